//! `bench-coverage [cc1|python3] [--runs N]`: what `coverage '*'` costs a real program, as a
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

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use gsh_tests::{mutatee_source_dir, target_dir, Gsh};

const CC1: &str = "/usr/lib/gcc/x86_64-linux-gnu/12/cc1";
const PYTHON: &str = "/usr/bin/python3";
const SCRIPT: &str = include_str!("../bench/whole_program.py");
const USAGE: &str = "usage: bench-coverage [cc1|python3] [--runs N]";

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
            "cc1" | "python3" => program = a.clone(),
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
    let original = Path::new(if program == "cc1" { CC1 } else { PYTHON });
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
    let (a, b) = if program == "cc1" {
        cc1(&dir, &bin, runs)?
    } else {
        python(&dir, original, &saved, runs)?
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
    let mut sources: Vec<PathBuf> = std::fs::read_dir(mutatee_source_dir())?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "c"))
        .collect();
    sources.sort();
    let mut b_arg = std::ffi::OsString::from("-B");
    b_arg.push(bin);
    b_arg.push("/");
    // The driver must really run the saved cc1, not find the system one.
    let probe = Command::new("gcc")
        .arg(&b_arg)
        .arg("-print-prog-name=cc1")
        .output()?;
    let used = String::from_utf8_lossy(&probe.stdout).trim().to_owned();
    if Path::new(&used) != bin.join("cc1") {
        bail!("gcc {b_arg:?} would run {used}, not the saved cc1");
    }
    let (mut a, mut b) = (Vec::new(), Vec::new());
    for _ in 0..runs {
        let (mut ta, mut tb) = (Duration::ZERO, Duration::ZERO);
        for src in &sources {
            let stem = src.file_stem().and_then(|s| s.to_str()).unwrap_or("x");
            let want = dir.join(format!("{stem}.orig.s"));
            let got = dir.join(format!("{stem}.cov.s"));
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
                    bail!("{cmd:?} failed: {}", String::from_utf8_lossy(&o.stderr));
                }
            }
            if std::fs::read(&want)? != std::fs::read(&got)? {
                bail!(
                    "the saved cc1 wrote a different {}: compare {} and {}",
                    src.display(),
                    want.display(),
                    got.display()
                );
            }
        }
        a.push(ta);
        b.push(tb);
    }
    println!("  workload: {} C files, gcc -S -O2 -g", sources.len());
    Ok((a, b))
}

/// Runs the benchmark script with the original and the saved python3, alternating; the
/// outputs must be the same.
fn python(
    dir: &Path,
    original: &Path,
    saved: &Path,
    runs: usize,
) -> Result<(Vec<Duration>, Vec<Duration>)> {
    let script = dir.join("whole_program.py");
    std::fs::write(&script, SCRIPT)?;
    let (mut a, mut b) = (Vec::new(), Vec::new());
    let mut want = None;
    for _ in 0..runs {
        for (exe, times) in [(original, &mut a), (saved, &mut b)] {
            let start = Instant::now();
            let o = Command::new(exe)
                .arg("-I")
                .arg(&script)
                .stdin(Stdio::null())
                .output()
                .with_context(|| format!("cannot run {}", exe.display()))?;
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
    println!("  workload: python3 -I whole_program.py");
    Ok((a, b))
}
