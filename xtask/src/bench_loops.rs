//! `bench-loops [--calls N] [--runs N]`: what loop points cost, against the plain loop and the
//! floor of a timer, measured in the same run (issue 16's "Fast").
//!
//! The mutatee (`xtask/bench/loops.c`, `gcc -O2 -g`) runs one shape per process and prints
//! its wall time. Builds, each saved by gsh from the plain one:
//!
//! - **iteration counter**: `at tight loop loop_1 iter-begin { n++; }` on a loop of N
//!   iterations; added ns per iteration = (its median − the plain median) / N, target ≤ 1 ns;
//! - **four loop counters**: entry, exit, iter-begin and iter-end counted on the same loop;
//! - **loop timer**: `t0 = now()` on the loop's entry edges and `total += now() - t0` on its
//!   exit edges (`now()` is the mutatee's `rdtsc`), on a loop entered N times (2 iterations
//!   per entry); added ns per entry, against the floor: the plain build's N back-to-back pairs
//!   of `rdtsc`, per pair;
//! - **`time` loop timer**: `time two loop loop_1`, gsh's own inline timer (its runtime keeps the
//!   time per thread and writes it at exit, `save --results`), on the same loop, against the
//!   same floor; its entry count in the results must be N.
//!
//! Runs alternate between the builds so a change in machine load hits all of them alike, and
//! every gsh build prints its counts, which must be exact: a benchmark of points that do not
//! fire would measure nothing.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use anyhow::{bail, Context, Result};
use gsh_tests::{target_dir, Gsh};

use crate::bench_static::{calls_and_runs, median, path, tool};

const SOURCE: &str = include_str!("../bench/loops.c");
const DEFAULT_CALLS: u64 = 100_000_000;
const DEFAULT_RUNS: usize = 5;

/// One build and the shape it runs.
struct Build {
    label: &'static str,
    exe: PathBuf,
    mode: &'static str,
    /// The counts the snippet at main's exit must print, as a function of N.
    counts: fn(u64) -> String,
    /// The tactics `save` reported.
    tactics: Option<String>,
    /// Where the build's runtime writes its measures at exit (`save --results`): the first
    /// slot's count must be N.
    results: Option<PathBuf>,
}

/// An instrumented build: label, mode, the points' commands, the snippet at main's exit that
/// prints the counts, and the counts it must print.
type Spec = (
    &'static str,
    &'static str,
    &'static str,
    &'static str,
    fn(u64) -> String,
);

fn none(_: u64) -> String {
    String::new()
}

pub fn run(args: &[String]) -> Result<()> {
    let (calls, runs) = calls_and_runs(args, "bench-loops", (DEFAULT_CALLS, DEFAULT_RUNS))?;
    let dir = target_dir().join("bench-loops");
    std::fs::create_dir_all(&dir).with_context(|| format!("cannot create {}", dir.display()))?;
    let builds = build_all(&dir)?;
    // Timer builds run fewer entries: each costs microseconds where a `rdtsc` is slow.
    let entries = (calls / 20).max(1);
    let n_of = |b: &Build| if b.mode == "tight" { calls } else { entries };
    let mut times: Vec<Vec<f64>> = vec![Vec::with_capacity(runs); builds.len()];
    for r in 0..runs {
        for (i, b) in builds.iter().enumerate() {
            let n = n_of(b);
            times[i].push(run_once(b, n)? as f64 / n as f64);
        }
        eprintln!("run {}/{runs} done", r + 1);
    }
    let med = |label: &str, mode: &str| -> f64 {
        let i = builds
            .iter()
            .position(|b| b.label == label && b.mode == mode)
            .expect("a build of this run");
        median(&times[i])
    };
    let tactics = |label: &str| {
        builds
            .iter()
            .find(|b| b.label == label)
            .and_then(|b| b.tactics.clone())
            .unwrap_or_else(|| "-".into())
    };
    println!(
        "median of {runs} runs (gcc -O2); {calls} iterations of the tight loop, {entries} entries \
         of the 2-iteration loop and pairs of rdtsc"
    );
    let plain = med("plain", "tight");
    let counter = med("iteration counter", "tight") - plain;
    let four = med("four loop counters", "tight") - plain;
    println!("tight loop: plain {plain:.3} ns/iteration");
    println!(
        "  iteration counter   +{counter:.3} ns/iteration ({:.2}x a plain iteration; tactics: {})",
        counter / plain,
        tactics("iteration counter")
    );
    println!(
        "  four loop counters  +{four:.3} ns/iteration ({:.2}x a plain iteration; tactics: {})",
        four / plain,
        tactics("four loop counters")
    );
    let verdict = if counter <= 1.0 { "met" } else { "MISSED" };
    println!("  target iteration counter <= 1 ns/iteration: {verdict}");
    let call = med("plain", "entries");
    let timer = med("loop timer", "entries") - call;
    let floor = med("plain", "rdtsc");
    println!("loop entered per call: plain {call:.3} ns/entry");
    println!(
        "  loop timer          +{timer:.3} ns/entry (tactics: {})",
        tactics("loop timer")
    );
    let timed = med("time loop timer", "entries") - call;
    println!(
        "  time FUNC loop      +{timed:.3} ns/entry (tactics: {})",
        tactics("time loop timer")
    );
    println!("  two-rdtsc floor      {floor:.3} ns/pair");
    println!(
        "  time FUNC loop / floor: {:.2}x (gsh's inline timer: rdtsc at entry and exit, kept \
         per thread)",
        timed / floor
    );
    println!(
        "  loop timer / floor: {:.2}x (the snippet calls now() twice: registers and vector \
         state saved around each call)",
        timer / floor
    );
    Ok(())
}

/// Compiles the plain build and saves the instrumented ones with gsh.
fn build_all(dir: &Path) -> Result<Vec<Build>> {
    let source = dir.join("loops.c");
    std::fs::write(&source, SOURCE)?;
    let plain = dir.join("plain");
    tool("gcc", &["-O2", "-g", path(&source)?, "-o", path(&plain)?])?;
    let mut builds: Vec<Build> = ["tight", "entries", "rdtsc"]
        .into_iter()
        .map(|mode| Build {
            label: "plain",
            exe: plain.clone(),
            mode,
            counts: none,
            tactics: None,
            results: None,
        })
        .collect();
    let specs: [Spec; 4] = [
        (
            "iteration counter",
            "tight",
            "declare long gsh_n; at tight loop loop_1 iter-begin { gsh_n++; }",
            "printf(\"%ld\\n\", gsh_n);",
            |n| format!("{n}\n"),
        ),
        (
            "four loop counters",
            "tight",
            "declare long gsh_e; declare long gsh_x; declare long gsh_b; declare long gsh_d; \
             at tight loop loop_1 entry { gsh_e++; }; at tight loop loop_1 exit { gsh_x++; }; \
             at tight loop loop_1 iter-begin { gsh_b++; }; \
             at tight loop loop_1 iter-end { gsh_d++; }",
            "printf(\"%ld %ld %ld %ld\\n\", gsh_e, gsh_x, gsh_b, gsh_d);",
            |n| format!("1 1 {n} {n}\n"),
        ),
        (
            "loop timer",
            "entries",
            "declare unsigned long gsh_t0; declare unsigned long gsh_total; declare long gsh_n; \
             at two loop loop_1 entry { gsh_t0 = now(); gsh_n++; }; \
             at two loop loop_1 exit { gsh_total += now() - gsh_t0; }",
            "printf(\"%ld\\n\", gsh_n);",
            |n| format!("{n}\n"),
        ),
        (
            "time loop timer",
            "entries",
            "time two loop loop_1",
            "",
            none,
        ),
    ];
    for (label, mode, points, print, counts) in specs {
        let out = dir.join(label.replace(' ', "-"));
        let results = print.is_empty().then(|| out.with_extension("json"));
        let script = match &results {
            Some(r) => format!("{points}; save {} --results {}", path(&out)?, path(r)?),
            None => format!("{points}; at main exit {{ {print} }}; save {}", path(&out)?),
        };
        let o = Gsh::new()
            .args(["-c", script.as_str(), path(&plain)?])
            .run();
        if !o.success() {
            bail!("gsh failed on {}:\n{o}", plain.display());
        }
        let tactics = tactics_alone(&plain, points)?;
        builds.push(Build {
            label,
            exe: out,
            mode,
            counts,
            tactics,
            results,
        });
    }
    Ok(builds)
}

/// The tactics `save` reports for `points` alone (without the bench's own `main` exit
/// snippet).
fn tactics_alone(plain: &Path, points: &str) -> Result<Option<String>> {
    let scratch = plain.with_file_name("tactics-scratch");
    let script = format!("{points}; save {}", path(&scratch)?);
    let o = Gsh::new().args(["-c", script.as_str(), path(plain)?]).run();
    if !o.success() {
        bail!("gsh failed on {}:\n{o}", plain.display());
    }
    // Best effort: the file only served to get the report.
    let _ = std::fs::remove_file(&scratch);
    Ok(o.stdout
        .lines()
        .find_map(|l| l.trim().strip_prefix("Tactics"))
        .map(|t| t.trim().to_owned()))
}

/// Runs one build once on `n`; returns its wall time in ns after checking its counts.
fn run_once(b: &Build, n: u64) -> Result<u64> {
    let out = Command::new(&b.exe)
        .args([b.mode, &n.to_string()])
        .stdin(Stdio::null())
        .output()
        .with_context(|| format!("cannot run {}", b.exe.display()))?;
    let text = String::from_utf8_lossy(&out.stdout);
    if !out.status.success() {
        bail!(
            "{} {} failed ({}): {text}{}",
            b.exe.display(),
            b.mode,
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let (first, rest) = text.split_once('\n').unwrap_or((&text, ""));
    let ns = first
        .trim()
        .parse()
        .with_context(|| format!("{}: no time in `{text}`", b.exe.display()))?;
    if let Some(results) = &b.results {
        let v: serde_json::Value = serde_json::from_slice(&std::fs::read(results)?)
            .with_context(|| format!("{}: no results", results.display()))?;
        let count = v["slots"][0]["count"].as_u64();
        if count != Some(n) {
            bail!(
                "{} {} {n}: the timer counted {count:?} entries: it did not fire exactly",
                b.exe.display(),
                b.mode
            );
        }
    }
    let want = (b.counts)(n);
    if rest != want {
        bail!(
            "{} {} {n}: printed {rest:?}, expected {want:?}: the points did not fire exactly",
            b.exe.display(),
            b.mode
        );
    }
    Ok(ns)
}
