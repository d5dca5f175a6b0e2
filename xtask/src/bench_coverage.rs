//! `bench-coverage [cc1|python3|sqlite3] [--runs N]`: what `coverage '*'` costs a real program, as a
//! slowdown ratio to the plain program measured in the same run.
//!
//! The program is saved with `coverage '*'` (a probe, one `inc` of its own counter, at every
//! block of every function), then the saved copy and the original run the same workload in
//! alternation, `N` times each; the ratio is median(saved) / median(original). Outputs must
//! be identical, and the results file the copy writes must show code covered, so a probe that
//! never fires cannot pass for a cheap one.
//!
//! - `cc1` (gcc 12's compiler proper): compiles every C mutatee (`gcc -S -O2 -g -B DIR`, DIR
//!   holding the saved `cc1`); the `.s` files are compared.
//! - `python3` (`-I`): `xtask/bench/whole_program.py`.
//! - `sqlite3` (`:memory:`): the whole-program tests' SQL, with 200,000 rows.

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use gsh_tests::{target_dir, Gsh};

const CC1: &str = "/usr/lib/gcc/x86_64-linux-gnu/12/cc1";
const PYTHON: &str = "/usr/bin/python3";
const SCRIPT: &str = include_str!("../bench/whole_program.py");
const SQLITE3: &str = "/usr/bin/sqlite3";
const USAGE: &str = "usage: bench-coverage [cc1|python3|sqlite3] [--runs N]";

pub fn run(args: &[String]) -> Result<()> {
    let mut program = "cc1".to_owned();
    let mut runs = 3usize;
    let mut it = args.iter();
    while let Some(a) = it.next() {
        match a.as_str() {
            "--runs" => {
                runs = it
                    .next()
                    .and_then(|n| n.parse().ok())
                    .filter(|&n| n > 0)
                    .with_context(|| format!("--runs needs a number; {USAGE}"))?;
            }
            "cc1" | "python3" | "sqlite3" => program = a.clone(),
            other => bail!("unexpected argument `{other}`; {USAGE}"),
        }
    }
    if cfg!(debug_assertions) {
        eprintln!("warning: built without optimisation; run with `cargo run --release -p xtask`");
    }
    let dir = target_dir()
        .join("bench-coverage")
        .join(format!("{program}-{}", std::process::id()));
    let bin = dir.join("bin");
    std::fs::create_dir_all(&bin)?;
    let original = Path::new(match program.as_str() {
        "cc1" => CC1,
        "python3" => PYTHON,
        _ => SQLITE3,
    });
    let name = original.file_name().expect("a file name");
    let saved = bin.join(name);
    let results = dir.join("coverage.json");
    let start = Instant::now();
    let out = Gsh::new()
        .timeout(Duration::from_secs(3600))
        .current_dir(&dir)
        .args(["-c"])
        .arg(format!(
            "coverage '*'; save {} --results {}",
            saved.display(),
            results.display()
        ))
        .arg(original)
        .run();
    if !out.success() {
        bail!("gsh could not save {}:\n{}", original.display(), out.stderr);
    }
    let save_time = start.elapsed();
    let line = |key: &str| {
        out.stdout
            .lines()
            .find(|l| l.trim_start().starts_with(key))
            .map(|l| l.trim().to_owned())
            .unwrap_or_default()
    };
    println!("{program}: saved with coverage '*' in {save_time:.1?}");
    for key in ["Points", "Skipped", "Tactics", "Coverage", "Size"] {
        let l = line(key);
        if !l.is_empty() {
            println!("  {l}");
        }
    }
    let (a, b) = match program.as_str() {
        "cc1" => cc1(&dir, &bin, runs)?,
        "python3" => {
            let script = dir.join("whole_program.py");
            std::fs::write(&script, SCRIPT)?;
            let args = ["-I".to_owned(), script.display().to_string()];
            alternate(original, &saved, &args, "", runs)?
        }
        _ => {
            let sql = gsh_tests::whole::SQL.replace("x < 3000", "x < 200000");
            alternate(original, &saved, &[":memory:".to_owned()], &sql, runs)?
        }
    };
    let (ma, mb) = (median(a), median(b));
    println!(
        "  original {:.3} s, with coverage '*' {:.3} s (medians of {runs}): slowdown {:.2}x",
        ma.as_secs_f64(),
        mb.as_secs_f64(),
        mb.as_secs_f64() / ma.as_secs_f64()
    );
    let report = Gsh::new()
        .timeout(Duration::from_secs(600))
        .args(["-c".into(), format!("report {}", results.display())])
        .run();
    if !report.success() {
        bail!("report of {}: {}", results.display(), report.stderr);
    }
    let total = report
        .stdout
        .lines()
        .find(|l| l.contains("function(s):"))
        .unwrap_or("no coverage reported")
        .trim();
    if !total.contains("blocks covered") || total.contains(": 0/") {
        bail!("the saved {program} covered nothing: {total}");
    }
    println!("  last run: {total}");
    Ok(())
}

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

/// Compiles every C mutatee with the original and the saved `cc1`, alternating; the `.s`
/// files must be the same.
fn cc1(dir: &Path, bin: &Path, runs: usize) -> Result<(Vec<Duration>, Vec<Duration>)> {
    let (a, b, n) = crate::whole_program::cc1_compare(dir, bin, runs)?;
    println!("  workload: {n} C files, gcc -S -O2 -g");
    Ok((a, b))
}

/// Runs the original and the saved program with `args` and `input` on stdin, alternating;
/// the outputs must be the same.
fn alternate(
    original: &Path,
    saved: &Path,
    args: &[String],
    input: &str,
    runs: usize,
) -> Result<(Vec<Duration>, Vec<Duration>)> {
    use std::io::Write;
    let (mut a, mut b) = (Vec::new(), Vec::new());
    let mut want = None;
    for _ in 0..runs {
        for (exe, times) in [(original, &mut a), (saved, &mut b)] {
            let start = Instant::now();
            let mut child = Command::new(exe)
                .args(args)
                .stdin(Stdio::piped())
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .with_context(|| format!("cannot run {}", exe.display()))?;
            let mut stdin = child.stdin.take().expect("piped");
            stdin.write_all(input.as_bytes())?;
            drop(stdin);
            let o = child.wait_with_output()?;
            times.push(start.elapsed());
            if !o.status.success() {
                bail!(
                    "{} failed: {}",
                    exe.display(),
                    String::from_utf8_lossy(&o.stderr)
                );
            }
            match &want {
                None => want = Some(o.stdout),
                Some(w) if *w != o.stdout => bail!("{} printed something else", exe.display()),
                Some(_) => {}
            }
        }
    }
    println!("  workload: {} {}", original.display(), args.join(" "));
    Ok((a, b))
}
