//! `whole-program [sqlite3|bash|python3|redis-server|cc1|all] [--loops]`: issue 12's
//! whole-program reports, and with `--loops` issue 16's (below). Every function's entry and every exit of a large Debian program get a counter of
//! their own ([`gsh_tests::whole`]), the program is saved with `gsh` (release build), and the
//! rewritten copy runs a workload beside the original and must produce exactly its output:
//!
//! - `sqlite3`: SQL on an in-memory database (200,000 rows), through stdin;
//! - `bash`: an interactive session (`bash -i` with input on stdin) and a shell loop;
//! - `python3` (`-I`): `xtask/bench/whole_program.py` (strings, dicts, sorting, regular
//!   expressions, json, big integers, classes, generators, exceptions);
//! - `redis-server`: a `redis-cli` session whose replies are compared, then `redis-benchmark`
//!   (timed) and a `shutdown`;
//! - `cc1` (gcc 12's compiler proper): compiles the test mutatees, `gcc -S -O2 -B DIR` with DIR
//!   holding the rewritten `cc1`; the `.s` files are compared.
//!
//! Debian packages a program needs are installed when missing. Prints the points and tactic
//! counts `save` reported, how long `save` took, the workload's run time rewritten against
//! original (median of `--runs`, alternating, in the same run) as a ratio, and the counters:
//! functions called, balanced, left open (longjmp, exit, still running) and any whose exits
//! outnumber their entries.
//!
//! With `--loops` (default programs: python3 and cc1), every loop `loops '*'` finds instead
//! gets four counters, at its entry, exit, iter-begin and iter-end points (named by header
//! address, `at 0xH loop 0xH entry`, so functions sharing a name are told apart), and the copy
//! runs the same workload with the same comparison. Printed: the loops, the points and tactic
//! counts (`trap` among them) and skipped points `save` reported, the run-time ratio, and the
//! counters: loops entered, balanced (entries = exits and iteration begins = ends), left open
//! (more entries than exits: a `longjmp`, `exit` or exception out of a callee, or still running
//! at the end), and any with more exits than entries or more ends than begins (points in the
//! wrong place).
//!
//! Also printed with `--loops`: the census of the loop points on jump-table edges into blocks
//! other edges reach too (a loop's entry, exit or iteration end there), which `patch::edge`
//! refused without exception before it read private table copies (issue 16): how many such
//! points and distinct edges the loops have, how many are placed now, and the refused ones by
//! reason.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use gsh_tests::whole::{self, Saved};
use gsh_tests::{ensure_package, mutatee_source_dir, target_dir, Gsh};

const PYTHON: &str = "/usr/bin/python3";
const CC1: &str = "/usr/lib/gcc/x86_64-linux-gnu/12/cc1";
const SCRIPT: &str = include_str!("../bench/whole_program.py");
const PROGRAMS: [&str; 5] = ["sqlite3", "bash", "python3", "redis-server", "cc1"];
const USAGE: &str =
    "whole-program [sqlite3|bash|python3|redis-server|cc1|all] [--loops] [--runs N]";
/// What `--loops` instruments by default.
const LOOP_PROGRAMS: [&str; 2] = ["python3", "cc1"];

pub fn run(args: &[String]) -> Result<()> {
    let loops = args.iter().any(|a| a == "--loops");
    let rest: Vec<String> = args.iter().filter(|a| *a != "--loops").cloned().collect();
    let (which, runs) = crate::file_and_runs(&rest, 3, USAGE)?;
    let which = which.unwrap_or_else(|| "all".to_owned());
    if cfg!(debug_assertions) {
        eprintln!("warning: built without optimisation; run with `cargo run --release -p xtask`");
    }
    let chosen: Vec<&str> = match which.as_str() {
        "all" if loops => LOOP_PROGRAMS.to_vec(),
        "all" => PROGRAMS.to_vec(),
        p if PROGRAMS.contains(&p) => vec![p],
        other => bail!("unknown program `{other}`; usage: {USAGE}"),
    };
    // Build gsh first (once per process), so its build is not timed as a save.
    Gsh::binary();
    let mut failed = Vec::new();
    for p in chosen {
        let dir = target_dir()
            .join(if loops {
                "whole-program-loops"
            } else {
                "whole-program"
            })
            .join(p);
        // Stale outputs of an earlier run must not pass for this one's.
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir)
            .with_context(|| format!("cannot create {}", dir.display()))?;
        let r = match p {
            _ if loops => whole_loops(p, &dir, runs),
            "sqlite3" => sqlite3(&dir, runs),
            "bash" => bash(&dir, runs),
            "python3" => python(&dir, runs),
            "redis-server" => redis(&dir, runs),
            _ => cc1(&dir, runs),
        };
        if let Err(e) = r {
            println!("{p}: FAILED: {e:#}\n");
            failed.push(p);
        }
    }
    if !failed.is_empty() {
        bail!("failed: {}", failed.join(", "));
    }
    Ok(())
}

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

fn report(name: &str, saved: &Saved, original: Duration, rewritten: Duration) {
    let b = whole::balance(saved);
    println!("{name}: a counter at every function's entry and every exit");
    println!(
        "  points:    {} (skipped: {})",
        saved.field("Points"),
        saved.field("Skipped")
    );
    println!("  tactics:   {}", saved.field("Tactics"));
    println!("  save took: {:.1} s", saved.took.as_secs_f64());
    println!(
        "  run time:  original {:.3} s, rewritten {:.3} s: {:.2}x",
        original.as_secs_f64(),
        rewritten.as_secs_f64(),
        rewritten.as_secs_f64() / original.as_secs_f64()
    );
    println!("  output:    identical");
    println!(
        "  counters:  {} functions called, {} balanced, {} without exits (they never return), {} left open, {} not judged (entry point skipped), {} with more exits than entries at an unresolved indirect jmp, {} other",
        b.called,
        b.balanced,
        b.no_exits.len(),
        b.open.len(),
        b.entry_skipped.len(),
        b.extra_exits_indirect.len(),
        b.extra_exits.len()
    );
    let show = |v: &[(String, u64, u64)]| {
        v.iter()
            .take(8)
            .map(|(n, e, x)| format!("{n} {e}/{x}"))
            .collect::<Vec<_>>()
            .join(", ")
    };
    if !b.no_exits.is_empty() {
        let names: Vec<String> = b
            .no_exits
            .iter()
            .take(8)
            .map(|(n, e)| format!("{n} {e}"))
            .collect();
        println!("    without exits (entries): {}", names.join(", "));
    }
    if !b.open.is_empty() {
        println!("    left open (entries/exits): {}", show(&b.open));
    }
    if !b.extra_exits_indirect.is_empty() {
        println!(
            "    indirect jmp taken for an exit: {}",
            show(&b.extra_exits_indirect)
        );
    }
    if !b.entry_skipped.is_empty() {
        println!("    not judged (entries/exits): {}", show(&b.entry_skipped));
    }
    if !b.extra_exits.is_empty() {
        println!("    MORE EXITS THAN ENTRIES: {}", show(&b.extra_exits));
    }
    println!();
}

/// Runs the original and the copy `runs` times each, alternating, on `input`; compares the
/// first runs' outputs; returns the median times.
fn compare(
    original: &Path,
    copy: &Path,
    args: &[&str],
    input: &str,
    runs: usize,
) -> Result<(Duration, Duration)> {
    let (mut a, mut b) = (Vec::new(), Vec::new());
    for r in 0..runs {
        let (want, ta) = whole::run_timed(original, args, input.as_bytes());
        let (got, tb) = whole::run_timed(copy, args, input.as_bytes());
        a.push(ta);
        b.push(tb);
        if r == 0
            && (got.stdout != want.stdout
                || got.stderr != want.stderr
                || got.status.code() != want.status.code())
        {
            bail!(
                "the rewritten {} differs ({} vs {}):\n--- stdout ---\n{}\n--- stderr ---\n{}",
                original.display(),
                got.status,
                want.status,
                String::from_utf8_lossy(&got.stdout),
                String::from_utf8_lossy(&got.stderr)
            );
        }
    }
    Ok((median(a), median(b)))
}

fn sqlite3(dir: &Path, runs: usize) -> Result<()> {
    ensure_package("sqlite3");
    let original = Path::new("/usr/bin/sqlite3");
    let saved = whole::save_counted(original, &dir.join("sqlite3"));
    let sql = whole::SQL.replace("x < 3000", "x < 200000");
    let (a, b) = compare(original, &saved.out, &[":memory:"], &sql, runs)?;
    report("sqlite3", &saved, a, b);
    Ok(())
}

fn bash(dir: &Path, runs: usize) -> Result<()> {
    let original = Path::new("/bin/bash");
    // Named bash, so the prompts match.
    let saved = whole::save_counted(original, &dir.join("bash"));
    let input = whole::BASH.replace(
        "echo done\n",
        "s=0; for ((i = 0; i < 30000; i++)); do s=$((s + i % 7)); done; echo \"s=$s\"\necho done\n",
    );
    let (a, b) = compare(
        original,
        &saved.out,
        &["--norc", "--noprofile", "-i"],
        &input,
        runs,
    )?;
    report("bash", &saved, a, b);
    Ok(())
}

fn python(dir: &Path, runs: usize) -> Result<()> {
    let original = Path::new(PYTHON);
    let saved = whole::save_counted(original, &dir.join("python3"));
    let (a, b) = python_compare(dir, &saved.out, runs)?;
    report("python3", &saved, a, b);
    Ok(())
}

/// Runs the python workload with the original and `copy`; the median times.
fn python_compare(dir: &Path, copy: &Path, runs: usize) -> Result<(Duration, Duration)> {
    let script = dir.join("whole_program.py");
    std::fs::write(&script, SCRIPT)?;
    // -I: no user site directory or environment variables, so both see the same modules.
    compare(Path::new(PYTHON), copy, &["-I", path(&script)?], "", runs)
}

/// A redis-server on `port` until dropped (then `shutdown nosave`, waited for).
struct Server {
    child: std::process::Child,
    port: u16,
}

impl Server {
    fn start(exe: &Path, port: u16, dir: &Path) -> Result<Server> {
        let child = Command::new(exe)
            .args([
                "--port",
                &port.to_string(),
                "--save",
                "",
                "--appendonly",
                "no",
            ])
            .args(["--dir", path(dir)?])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .with_context(|| format!("cannot start {}", exe.display()))?;
        let s = Server { child, port };
        // Ready when it answers PING.
        for _ in 0..200 {
            if s.cli(&["ping"])?.trim() == "PONG" {
                return Ok(s);
            }
            std::thread::sleep(Duration::from_millis(25));
        }
        bail!("{} did not answer on port {port}", exe.display())
    }

    fn cli(&self, args: &[&str]) -> Result<String> {
        let o = Command::new("redis-cli")
            .args(["-p", &self.port.to_string()])
            .args(args)
            .stderr(Stdio::null())
            .output()
            .context("cannot run redis-cli")?;
        Ok(String::from_utf8_lossy(&o.stdout).into_owned())
    }

    fn stop(mut self) -> Result<()> {
        let _ = self.cli(&["shutdown", "nosave"]);
        let status = self.child.wait()?;
        if !status.success() {
            bail!("redis-server ended with {status}");
        }
        Ok(())
    }
}

/// Commands whose replies are compared.
const REDIS_SESSION: &[&[&str]] = &[
    &["set", "k", "v"],
    &["get", "k"],
    &["incrby", "n", "41"],
    &["incr", "n"],
    &["rpush", "l", "a", "b", "c", "d"],
    &["lrange", "l", "1", "-1"],
    &["hset", "h", "f1", "1", "f2", "2"],
    &["hgetall", "h"],
    &["zadd", "z", "3", "c", "1", "a", "2", "b"],
    &["zrange", "z", "0", "-1", "withscores"],
    &["sadd", "s", "x", "y", "x"],
    &["scard", "s"],
    &["eval", "return redis.call('get', KEYS[1]) .. '!'", "1", "k"],
    &["dbsize"],
];

fn redis(dir: &Path, runs: usize) -> Result<()> {
    ensure_package("redis-server");
    ensure_package("redis-tools");
    let original = Path::new("/usr/bin/redis-server");
    // Debian's redis-server is a link to the binary redis-check-rdb names too (argv[0]
    // chooses); save the file itself, under the server's name.
    let real = std::fs::canonicalize(original)?;
    let saved = whole::save_counted(&real, &dir.join("redis-server"));
    let session = |exe: &Path, port: u16| -> Result<(String, Duration)> {
        let s = Server::start(exe, port, dir)?;
        let mut out = String::new();
        for c in REDIS_SESSION {
            out.push_str(&s.cli(c)?);
        }
        let start = Instant::now();
        let o = Command::new("redis-benchmark")
            .args(["-p", &port.to_string(), "-q", "-n", "20000", "-c", "4"])
            .args(["-t", "set,get,incr,lpush,rpop,hset,lrange_100"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .context("cannot run redis-benchmark")?;
        let took = start.elapsed();
        if !o.success() {
            bail!("redis-benchmark failed against {}", exe.display());
        }
        s.stop()?;
        Ok((out, took))
    };
    let (mut a, mut b) = (Vec::new(), Vec::new());
    for r in 0..runs {
        // Started by its own name: redis-check-rdb's name would select the checker.
        let (want, ta) = session(original, 26379)?;
        let (got, tb) = session(&saved.out, 26380)?;
        a.push(ta);
        b.push(tb);
        if r == 0 && got != want {
            bail!(
                "the rewritten redis-server replied differently:\n{got}\n--- original ---\n{want}"
            );
        }
    }
    report("redis-server", &saved, median(a), median(b));
    println!("  (redis-benchmark -n 20000 -c 4, 7 tests, timed)");
    Ok(())
}

fn cc1(dir: &Path, runs: usize) -> Result<()> {
    let bin = dir.join("bin");
    std::fs::create_dir_all(&bin)?;
    let saved = whole::save_counted(Path::new(CC1), &bin.join("cc1"));
    let (a, b, n) = cc1_compare(dir, &bin, runs)?;
    report("cc1", &saved, median(a), median(b));
    println!("  ({n} C files compiled with gcc -S -O2 -g)");
    Ok(())
}

/// Compiles the test mutatees with gcc's own cc1 and with the one in `bin` (`gcc -B`),
/// alternating, `runs` times; fails unless the `.s` files are identical. Returns each
/// run's time with the original and with `bin`'s, and how many files a run compiles.
/// `bench-coverage cc1` uses it too.
pub fn cc1_compare(
    dir: &Path,
    bin: &Path,
    runs: usize,
) -> Result<(Vec<Duration>, Vec<Duration>, usize)> {
    let mut b_arg = std::ffi::OsString::from("-B");
    b_arg.push(bin);
    b_arg.push("/");
    // The driver must really run the cc1 in `bin`, not find the system one.
    let probe = Command::new("gcc")
        .arg(&b_arg)
        .arg("-print-prog-name=cc1")
        .output()?;
    let used = String::from_utf8_lossy(&probe.stdout).trim().to_owned();
    if Path::new(&used) != bin.join("cc1") {
        bail!(
            "gcc {b_arg:?} would run {used}, not {}",
            bin.join("cc1").display()
        );
    }
    let mut sources: Vec<PathBuf> = std::fs::read_dir(mutatee_source_dir())?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "c"))
        .collect();
    sources.sort();
    let (mut a, mut b) = (Vec::new(), Vec::new());
    for _ in 0..runs {
        let (mut ta, mut tb) = (Duration::ZERO, Duration::ZERO);
        for src in &sources {
            let stem = src.file_stem().and_then(|s| s.to_str()).unwrap_or("x");
            let want = dir.join(format!("{stem}.orig.s"));
            let got = dir.join(format!("{stem}.gsh.s"));
            for (s, extra, time) in [(&want, None, &mut ta), (&got, Some(&b_arg), &mut tb)] {
                let mut cmd = Command::new("gcc");
                cmd.args(["-S", "-O2", "-g", "-pthread"]);
                if let Some(x) = extra {
                    cmd.arg(x);
                }
                cmd.arg(src).arg("-o").arg(s).stdin(Stdio::null());
                let start = Instant::now();
                let o = cmd
                    .output()
                    .with_context(|| format!("cannot run {cmd:?}"))?;
                *time += start.elapsed();
                if !o.status.success() {
                    bail!(
                        "{cmd:?} failed ({}):\n{}",
                        o.status,
                        String::from_utf8_lossy(&o.stderr)
                    );
                }
            }
            if std::fs::read(&want)? != std::fs::read(&got)? {
                bail!(
                    "the cc1 in {} wrote a different {}: compare {} and {}",
                    bin.display(),
                    src.display(),
                    want.display(),
                    got.display()
                );
            }
        }
        a.push(ta);
        b.push(tb);
    }
    Ok((a, b, sources.len()))
}

fn path(p: &Path) -> Result<&str> {
    p.to_str()
        .with_context(|| format!("{} is not UTF-8", p.display()))
}

/// A program saved with four counters on every loop.
struct LoopsSaved {
    out: PathBuf,
    dump: PathBuf,
    /// `(function, loop, header)` of each loop, in counter order.
    loops: Vec<(String, String, String)>,
    /// Loops `loops '*'` lists under a function whose own bytes do not hold their header
    /// ([`Owners::of`]), left out.
    elsewhere: usize,
    report: String,
    took: Duration,
}

/// The four loop points, in counter order.
const LOOP_POINTS: [&str; 4] = ["entry", "exit", "iter-begin", "iter-end"];

/// Saves `original` as `out` with an entry, exit, iter-begin and iter-end counter on every
/// loop, written at the end of the run as [`whole::save_counted`]'s are.
fn save_loops(original: &Path, out: &Path) -> Result<LoopsSaved> {
    let rows = whole::gsh_json_rows("loops '*'", original);
    let loops: Vec<(String, String, String)> = rows
        .iter()
        .map(|r| {
            let s = |k: &str| r[k].as_str().unwrap_or("").to_owned();
            (s("function"), s("loop"), s("header"))
        })
        .collect();
    if loops.is_empty() {
        bail!("{} has no loops", original.display());
    }
    let functions = whole::gsh_json_rows("show functions", original);
    let owner = Owners::new(&functions);
    let listed = loops.len();
    let mut named: Vec<(String, String, String, String)> = Vec::new();
    for (f, l, h) in loops {
        if let Some(func) = owner.of(&f, &h) {
            named.push((func.to_owned(), f, l, h));
        }
    }
    let elsewhere = listed - named.len();
    let loops: Vec<(String, String, String)> = named
        .iter()
        .map(|(_, f, l, h)| (f.clone(), l.clone(), h.clone()))
        .collect();
    let names: Vec<&str> = functions
        .iter()
        .filter_map(|r| r["name"].as_str())
        .collect();
    let main_points = whole::gsh_json_rows("show points main", original);
    let fopen = whole::fopen_of(original, &names);
    let dump = out.with_extension("counters");
    let mut script = String::new();
    for i in 0..loops.len() * 4 {
        script.push_str(&format!("declare long gsh_l{i}\n"));
    }
    script.push_str("declare void *gsh_fp; declare long gsh_pid\n");
    script.push_str("at main entry { gsh_pid = $tid; }\n");
    for (i, (func, _, _, header)) in named.iter().enumerate() {
        for (k, at) in LOOP_POINTS.iter().enumerate() {
            script.push_str(&format!(
                "at {func} loop {header} {at} {{ gsh_l{}++; }}\n",
                4 * i + k
            ));
        }
    }
    let write = whole::dump_snippet(fopen, &dump, "gsh_l0", loops.len() * 4);
    script.push_str(&whole::at_the_end(&main_points, &names, &write));
    let (report, took) = whole::run_save(original, out, script);
    Ok(LoopsSaved {
        out: out.to_owned(),
        dump,
        loops,
        elsewhere,
        report,
        took,
    })
}

/// The function a `loops` row names, by address where its name is unique (functions sharing
/// a name are told apart that way), else by the loop's header (the function holding it). By
/// name first: a loop's CFG can be a cold part's (`f.cold`, listed on its own) reaching back
/// into its parent, or the parent's reaching into the cold part.
struct Owners<'a> {
    /// Unique name -> (address as written, start, end).
    unique: std::collections::HashMap<&'a str, (&'a str, u64, u64)>,
}

impl<'a> Owners<'a> {
    fn new(functions: &'a [serde_json::Value]) -> Owners<'a> {
        let mut count: std::collections::HashMap<&str, usize> = std::collections::HashMap::new();
        for r in functions {
            if let Some(n) = r["name"].as_str() {
                *count.entry(n).or_default() += 1;
            }
        }
        let unique = functions
            .iter()
            .filter_map(|r| {
                let a = r["address"].as_str()?;
                let start = parse_hex(a)?;
                let size = r["size"].as_u64().unwrap_or(0);
                Some((r["name"].as_str()?, (a, start, start + size)))
            })
            .filter(|(n, _)| count[n] == 1)
            .collect();
        Owners { unique }
    }

    /// How to name the function of the loop listed under `function` with header `header`;
    /// `None` when the header lies outside that function's own bytes: a fragment's CFG (a
    /// cold part, `sub_517590.cold`) reaching into its parent's code finds the parent's loops
    /// without the parent's ways into them, so their entries would go uncounted.
    fn of<'b>(&'b self, function: &str, header: &'b str) -> Option<&'b str> {
        match self.unique.get(function) {
            Some(&(a, start, end)) => {
                let h = parse_hex(header)?;
                (start..end.max(start + 1)).contains(&h).then_some(a)
            }
            None => Some(header),
        }
    }
}

fn parse_hex(a: &str) -> Option<u64> {
    u64::from_str_radix(a.strip_prefix("0x")?, 16).ok()
}

/// What the loop counters of one run say.
#[derive(Debug, Default)]
struct LoopBalance {
    entered: usize,
    /// Entries = exits and iteration begins = ends.
    balanced: usize,
    /// `(loop, [entries, exits, begins, ends])` with more entries than exits (or begins than
    /// ends) and never the reverse: left by a longjmp, exit or exception, or still running.
    open: Vec<(String, [u64; 4])>,
    /// More exits than entries or more ends than begins: points in the wrong place.
    wrong: Vec<(String, [u64; 4])>,
    /// Entered, but a point at the header (an entry, back edge or the iteration begin) was
    /// skipped: not judged. (A skipped exit shows as a loop left open.)
    partial: Vec<(String, [u64; 4])>,
    /// Sums over all loops.
    totals: [u64; 4],
}

/// The addresses of the loop points `save` skipped (its notes table: `loop-exit 0x...
/// skipped why`). An entry, iteration begin or back edge is at its loop's header.
fn skipped_at(report: &str) -> std::collections::HashSet<String> {
    report
        .lines()
        .filter_map(|l| {
            let mut w = l.split_whitespace();
            let (kind, addr, outcome) = (w.next()?, w.next()?, w.next()?);
            (kind.starts_with("loop-") && outcome == "skipped").then(|| addr.to_owned())
        })
        .collect()
}

fn loop_balance(saved: &LoopsSaved) -> Result<LoopBalance> {
    let skipped = skipped_at(&saved.report);
    let bytes = std::fs::read(&saved.dump)
        .with_context(|| format!("{} wrote no counters", saved.out.display()))?;
    if bytes.len() != saved.loops.len() * 32 {
        bail!(
            "counter file size {} for {} loops",
            bytes.len(),
            saved.loops.len()
        );
    }
    let word = |k: usize| {
        let mut w = [0u8; 8];
        w.copy_from_slice(&bytes[k * 8..k * 8 + 8]);
        u64::from_le_bytes(w)
    };
    let mut b = LoopBalance::default();
    for (i, (f, l, h)) in saved.loops.iter().enumerate() {
        let c = [
            word(4 * i),
            word(4 * i + 1),
            word(4 * i + 2),
            word(4 * i + 3),
        ];
        for (t, v) in b.totals.iter_mut().zip(c) {
            *t += v;
        }
        if c[0] == 0 && c[2] == 0 {
            continue;
        }
        b.entered += 1;
        let name = format!("{f} {l} ({h})");
        if skipped.contains(h) {
            // An entry, back edge or the header itself has no counter: not judged.
            b.partial.push((name, c));
        } else if c[1] > c[0] || c[3] > c[2] {
            b.wrong.push((name, c));
        } else if c[0] == c[1] && c[2] == c[3] {
            b.balanced += 1;
        } else {
            b.open.push((name, c));
        }
    }
    Ok(b)
}

/// The value of `save`'s report line `name` (`Points`, `Tactics`, `Skipped`), or `-`.
fn field(report: &str, name: &str) -> String {
    report
        .lines()
        .find_map(|l| l.trim().strip_prefix(name))
        .map_or_else(|| "-".to_owned(), |v| v.trim().to_owned())
}

/// `--loops`: every loop of `program` counted, saved, run and compared.
fn whole_loops(program: &str, dir: &Path, runs: usize) -> Result<()> {
    let (saved, (a, b)) = match program {
        "python3" => {
            let saved = save_loops(Path::new(PYTHON), &dir.join("python3"))?;
            let t = python_compare(dir, &saved.out, runs)?;
            (saved, t)
        }
        "cc1" => {
            let bin = dir.join("bin");
            std::fs::create_dir_all(&bin)?;
            let saved = save_loops(Path::new(CC1), &bin.join("cc1"))?;
            let (a, b, _) = cc1_compare(dir, &bin, runs)?;
            (saved, (median(a), median(b)))
        }
        other => bail!("--loops runs python3 and cc1, not {other}"),
    };
    let bal = loop_balance(&saved)?;
    let census = table_census(Path::new(match program {
        "python3" => PYTHON,
        _ => CC1,
    }))?;
    println!("{program}: entry, exit, iter-begin and iter-end counters on every loop");
    println!(
        "  loops:     {} ({} more listed under a fragment whose bytes do not hold their \
         header, left out)",
        saved.loops.len(),
        saved.elsewhere
    );
    println!(
        "  points:    {} (skipped: {})",
        field(&saved.report, "Points"),
        field(&saved.report, "Skipped")
    );
    println!("  tactics:   {}", field(&saved.report, "Tactics"));
    println!(
        "  jump-table edges into blocks with other ways in: {} points on {} edges, all refused \
         before private table copies; placed now: {} points on {} edges",
        census.points, census.edges, census.placed_points, census.placed_edges
    );
    for (why, (points, edges)) in &census.refused {
        println!("    refused: {points} points on {edges} edges: {why}");
    }
    println!("  save took: {:.1} s", saved.took.as_secs_f64());
    println!(
        "  run time:  original {:.3} s, rewritten {:.3} s: {:.2}x",
        a.as_secs_f64(),
        b.as_secs_f64(),
        b.as_secs_f64() / a.as_secs_f64()
    );
    println!("  output:    identical");
    println!(
        "  counters:  {} loops entered, {} balanced, {} left open, {} not judged (a point at \
         the header skipped), {} wrong; totals: {} entries, {} exits, {} iteration begins, {} \
         ends",
        bal.entered,
        bal.balanced,
        bal.open.len(),
        bal.partial.len(),
        bal.wrong.len(),
        bal.totals[0],
        bal.totals[1],
        bal.totals[2],
        bal.totals[3]
    );
    let show = |v: &[(String, [u64; 4])]| {
        v.iter()
            .take(8)
            .map(|(n, c)| format!("{n} {}/{}/{}/{}", c[0], c[1], c[2], c[3]))
            .collect::<Vec<_>>()
            .join(", ")
    };
    if !bal.open.is_empty() {
        println!(
            "    left open (entries/exits/begins/ends): {}",
            show(&bal.open)
        );
    }
    if !bal.partial.is_empty() {
        println!("    not judged: {}", show(&bal.partial));
    }
    if !bal.wrong.is_empty() {
        println!(
            "    MORE EXITS THAN ENTRIES OR ENDS THAN BEGINS: {}",
            show(&bal.wrong)
        );
        bail!("{} loops counted wrong", bal.wrong.len());
    }
    println!();
    Ok(())
}

/// The loop points on jump-table edges into blocks other edges reach too (see the module's
/// documentation), and what `patch::edge` does with them.
#[derive(Debug, Default)]
struct TableCensus {
    points: usize,
    edges: usize,
    placed_points: usize,
    placed_edges: usize,
    /// Refused `(points, edges)` by reason, addresses left out of the reason.
    refused: std::collections::BTreeMap<String, (usize, usize)>,
}

/// Counts, in every function of `exe`, the loop entry, exit and iteration-end points on
/// jump-table edges into blocks with other ways in (or into the function's first block), and
/// asks `patch::edge` where each one goes. The edges are the ones `save` would be given by
/// the loop points of the same loops.
fn table_census(exe: &Path) -> Result<TableCensus> {
    use engine::cfg::loops::LoopEdge;
    use engine::cfg::EdgeKind;
    use engine::point::{OnEdge, Point, PointKind};
    let mut session = engine::session::Session::new();
    session.open(exe)?;
    let m = session.main()?;
    let analysis = m.analysis();
    let mut c = TableCensus::default();
    for f in m.functions().functions() {
        let a = analysis.function(f.id);
        let cfg = &a.cfg;
        if a.loops.loops.is_empty() || cfg.jump_tables.is_empty() {
            continue;
        }
        // Each distinct edge with how many loop points it carries.
        let mut on: std::collections::BTreeMap<(u32, u32), usize> = Default::default();
        for l in &a.loops.loops {
            let lp = l.points(cfg);
            for e in lp.entry.iter().chain(&lp.exit).chain(&lp.iter_end) {
                if let LoopEdge::Edge {
                    from,
                    to,
                    kind: EdgeKind::JumpTable,
                } = *e
                {
                    let shared = cfg.predecessors(to).count() > 1 || cfg.entry_block() == Some(to);
                    if shared {
                        *on.entry((from.0, to.0)).or_default() += 1;
                    }
                }
            }
        }
        for ((from, to), n) in on {
            let (from, to) = (engine::cfg::BlockId(from), engine::cfg::BlockId(to));
            let p = Point {
                kind: PointKind::Edge,
                func: f.id,
                addr: cfg.block(to).start,
                block: to,
                edge: Some(OnEdge::Edge {
                    from,
                    to,
                    kind: EdgeKind::JumpTable,
                }),
                callee: None,
                callee_name: None,
                loop_name: None,
            };
            c.points += n;
            c.edges += 1;
            match engine::patch::edge::place(m, &p) {
                Ok(_) => {
                    c.placed_points += n;
                    c.placed_edges += 1;
                }
                Err(why) => {
                    let r = c.refused.entry(without_numbers(&why)).or_default();
                    r.0 += n;
                    r.1 += 1;
                }
            }
        }
    }
    Ok(c)
}

/// `why` with every hexadecimal or decimal number replaced by `N`, so reasons group.
fn without_numbers(why: &str) -> String {
    why.split(' ')
        .map(|w| {
            let bare = w.trim_matches(|c: char| !c.is_ascii_alphanumeric());
            let number = !bare.is_empty()
                && (bare.starts_with("0x") || bare.chars().all(|c| c.is_ascii_digit()));
            if number {
                w.replace(bare, "N")
            } else {
                w.to_owned()
            }
        })
        .collect::<Vec<_>>()
        .join(" ")
}
