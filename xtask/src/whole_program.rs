//! `whole-program python3|cc1`: issue 5's whole-program reports. Every function's entry and
//! every exit of a large system program get a counter (`at '*' entry { n++; }`, `at '*' exit
//! { m++; }`), the program is saved with `gsh` (release build), and the rewritten copy must
//! produce exactly the original's output:
//!
//! - `python3` (`/usr/bin/python3 -I`) runs a small script (`xtask/bench/whole_program.py`:
//!   strings, dicts, sorting, regular expressions, json, big integers, a class hierarchy,
//!   generators, exceptions); stdout and the exit code are compared.
//! - `cc1` (gcc 12's compiler proper) compiles C files to assembly through the driver, `gcc
//!   -S -O2 -B DIR` with DIR holding the rewritten `cc1`; the `.s` files are compared.
//!
//! Prints the points and the tactic counts `save` reported, how long `save` took, and the
//! original's and the rewritten program's run times (median of `--runs`, alternating).

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use gsh_tests::{mutatee_source_dir, target_dir, Gsh};

const PYTHON: &str = "/usr/bin/python3";
const CC1: &str = "/usr/lib/gcc/x86_64-linux-gnu/12/cc1";
const SCRIPT: &str = include_str!("../bench/whole_program.py");
const USAGE: &str = "usage: whole-program python3|cc1 [--runs N]";

pub fn run(args: &[String]) -> Result<()> {
    let (which, runs) = crate::file_and_runs(args, 3, USAGE)?;
    let which = which.context(USAGE)?;
    if cfg!(debug_assertions) {
        eprintln!("warning: built without optimisation; run with `cargo run --release -p xtask`");
    }
    let dir = target_dir().join("whole-program").join(&which);
    // Stale outputs of an earlier run must not pass for this one's.
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).with_context(|| format!("cannot create {}", dir.display()))?;
    match which.as_str() {
        "python3" => python(&dir, runs),
        "cc1" => cc1(&dir, runs),
        other => bail!("unknown program `{other}`; {USAGE}"),
    }
}

/// What `save` printed and how long it took.
struct Saved {
    points: String,
    skipped: String,
    tactics: String,
    took: Duration,
}

/// Saves `original` with a counter at every entry and every exit into `out`.
fn save_all(original: &Path, out: &Path) -> Result<Saved> {
    let script = format!(
        "declare long n; declare long m; at '*' entry {{ n++; }}; at '*' exit {{ m++; }}; save {}",
        path(out)?
    );
    // Build gsh first (once per process), so its build is not timed as the save.
    Gsh::binary();
    let start = Instant::now();
    let o = Gsh::new()
        .args(["-c", script.as_str(), path(original)?])
        .timeout(Duration::from_secs(3600))
        .run();
    let took = start.elapsed();
    if !o.success() {
        bail!("gsh failed on {}:\n{o}", original.display());
    }
    let field = |name: &str| {
        o.stdout
            .lines()
            .find_map(|l| l.trim().strip_prefix(name))
            .map(|v| v.trim().to_owned())
            .unwrap_or_else(|| "?".into())
    };
    Ok(Saved {
        points: field("Points"),
        skipped: o
            .stdout
            .lines()
            .find_map(|l| l.trim().strip_prefix("Skipped"))
            .map_or_else(|| "0".to_owned(), |v| v.trim().to_owned()),
        tactics: field("Tactics"),
        took,
    })
}

/// Runs `cmd` and returns its output and wall time.
fn timed(cmd: &mut Command) -> Result<(std::process::Output, Duration)> {
    cmd.stdin(Stdio::null());
    let start = Instant::now();
    let out = cmd
        .output()
        .with_context(|| format!("cannot run {cmd:?}"))?;
    Ok((out, start.elapsed()))
}

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

fn report(name: &str, saved: &Saved, original: Duration, rewritten: Duration) {
    println!("{name}: whole program, a counter at every entry and every exit");
    println!("  points:    {} (skipped: {})", saved.points, saved.skipped);
    println!("  tactics:   {}", saved.tactics);
    println!("  save took: {:.1} s", saved.took.as_secs_f64());
    println!(
        "  run time:  original {:.3} s, rewritten {:.3} s ({:.2}x)",
        original.as_secs_f64(),
        rewritten.as_secs_f64(),
        rewritten.as_secs_f64() / original.as_secs_f64()
    );
    println!("  output:    identical");
}

fn python(dir: &Path, runs: usize) -> Result<()> {
    let out = dir.join("python3");
    let saved = save_all(Path::new(PYTHON), &out)?;
    let script = dir.join("whole_program.py");
    std::fs::write(&script, SCRIPT)?;
    let (mut a, mut b) = (Vec::new(), Vec::new());
    // -I: no user site directory or environment variables, so both see the same modules.
    let py = |exe: &Path| {
        let mut c = Command::new(exe);
        c.arg("-I").arg(&script);
        c
    };
    for r in 0..runs {
        let (want, ta) = timed(&mut py(Path::new(PYTHON)))?;
        let (got, tb) = timed(&mut py(&out))?;
        a.push(ta);
        b.push(tb);
        if r > 0 {
            continue;
        }
        if !want.status.success() {
            bail!(
                "the script fails: {}",
                String::from_utf8_lossy(&want.stderr)
            );
        }
        if got.status.code() != want.status.code() || got.stdout != want.stdout {
            bail!(
                "the rewritten python3 differs ({} vs {}):\n{}\nstderr:\n{}",
                got.status,
                want.status,
                String::from_utf8_lossy(&got.stdout),
                String::from_utf8_lossy(&got.stderr)
            );
        }
    }
    report("python3", &saved, median(a), median(b));
    Ok(())
}

fn cc1(dir: &Path, runs: usize) -> Result<()> {
    let bin = dir.join("bin");
    std::fs::create_dir_all(&bin)?;
    let saved = save_all(Path::new(CC1), &bin.join("cc1"))?;
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
            let mut b_arg = std::ffi::OsString::from("-B");
            b_arg.push(&bin);
            b_arg.push("/");
            for (s, extra, time) in [(&want, None, &mut ta), (&got, Some(&b_arg), &mut tb)] {
                let mut cmd = Command::new("gcc");
                cmd.args(["-S", "-O2", "-g", "-pthread"]);
                if let Some(x) = extra {
                    cmd.arg(x);
                }
                cmd.arg(src).arg("-o").arg(s);
                let (o, t) = timed(&mut cmd)?;
                if !o.status.success() {
                    bail!(
                        "{cmd:?} failed ({}):\n{}",
                        o.status,
                        String::from_utf8_lossy(&o.stderr)
                    );
                }
                *time += t;
            }
            if std::fs::read(&want)? != std::fs::read(&got)? {
                bail!(
                    "the rewritten cc1 wrote a different {}: compare {} and {}",
                    src.display(),
                    want.display(),
                    got.display()
                );
            }
        }
        a.push(ta);
        b.push(tb);
    }
    // The driver must really have run the rewritten cc1, not found the system one.
    let probe = Command::new("gcc")
        .arg(format!("-B{}/", path(&bin)?))
        .args(["-print-prog-name=cc1"])
        .output()?;
    let used = String::from_utf8_lossy(&probe.stdout).trim().to_owned();
    if Path::new(&used) != bin.join("cc1") {
        bail!(
            "gcc -B{} would run {used}, not the rewritten cc1",
            bin.display()
        );
    }
    report("cc1", &saved, median(a), median(b));
    println!("  ({} C files compiled with gcc -S -O2 -g)", sources.len());
    Ok(())
}

fn path(p: &Path) -> Result<&str> {
    p.to_str()
        .with_context(|| format!("{} is not UTF-8", p.display()))
}
