//! `bench-save-scale [--size N]`: whether `save` stays linear in the size of what it saves, as
//! a ratio measured in one run. A synthetic C program is built at two sizes, N and 4N: N small
//! functions each with a loop, plus one function of N `if`s (one large CFG). Each is saved
//! twice, with `coverage '*'` (a probe per block) and with four `at` counters per loop, each
//! its own `declare`d variable (the shape of `whole-program --loops`). The figure is the save
//! time per point at 4N over that at N: about 1 when the work per point is constant, about 4
//! when some step is quadratic (cc1's `coverage '*'` and `--loops` saves ran for over 14
//! CPU-minutes and 21 minutes that way, from scans of every function, declared variable or
//! site per point). The task fails above [`LIMIT`]. Each saved program must print what the
//! original prints. Measured with N = 1000: the gsh before the fix took 4.6 s and 50.5 s
//! for 4000 functions (1.42x and 2.73x per point, failing); after, 2.7 s and 2.5 s (1.00x,
//! 0.94x).

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use gsh_tests::{target_dir, Gsh};

const USAGE: &str = "usage: bench-save-scale [--size N]";
/// The largest per-point ratio (4N over N) taken for linear: a quadratic step gives about 4.
const LIMIT: f64 = 2.5;

pub fn run(args: &[String]) -> Result<()> {
    let mut size = 1000usize;
    let mut it = args.iter();
    while let Some(a) = it.next() {
        match a.as_str() {
            "--size" => {
                size = it
                    .next()
                    .and_then(|n| n.parse().ok())
                    .filter(|&n| n >= 10)
                    .with_context(|| format!("--size needs a number of at least 10; {USAGE}"))?;
            }
            other => bail!("unexpected argument `{other}`; {USAGE}"),
        }
    }
    if cfg!(debug_assertions) {
        eprintln!("warning: built without optimisation; run with `cargo run --release -p xtask`");
    }
    let dir = target_dir()
        .join("bench-save-scale")
        .join(std::process::id().to_string());
    std::fs::create_dir_all(&dir)?;
    let mut rows = Vec::new();
    for n in [size, 4 * size] {
        let exe = build(&dir, n)?;
        let plain = output(&exe)?;
        let cov = save(&dir, &exe, "coverage '*'\n", &format!("cov{n}"), &plain)?;
        let mut script = String::new();
        for i in 0..4 * n {
            writeln!(script, "declare long gsh_l{i}")?;
        }
        for i in 0..n {
            for (k, at) in ["entry", "exit", "iter-begin", "iter-end"]
                .iter()
                .enumerate()
            {
                writeln!(script, "at f{i} loop '*' {at} {{ gsh_l{}++; }}", 4 * i + k)?;
            }
        }
        let loops = save(&dir, &exe, &script, &format!("loops{n}"), &plain)?;
        rows.push((n, cov, loops));
    }
    println!("save time per point, {size} and {} functions:", 4 * size);
    let mut worst: f64 = 0.0;
    for (what, pick) in [
        ("coverage '*'", 0usize),
        ("loop counters (at + declare)", 1),
    ] {
        let per = |r: &(usize, Saved, Saved)| {
            let s = if pick == 0 { &r.1 } else { &r.2 };
            s.took.as_secs_f64() / s.points.max(1) as f64
        };
        let (a, b) = (&rows[0], &rows[1]);
        let ratio = per(b) / per(a);
        worst = worst.max(ratio);
        let (sa, sb) = if pick == 0 {
            (&a.1, &b.1)
        } else {
            (&a.2, &b.2)
        };
        println!(
            "  {what}: {} points in {:.2} s, {} points in {:.2} s: {:.2}x per point",
            sa.points,
            sa.took.as_secs_f64(),
            sb.points,
            sb.took.as_secs_f64(),
            ratio
        );
    }
    if worst > LIMIT {
        bail!("the save time per point grew {worst:.2}x with 4x the program (limit {LIMIT}x): some step is superlinear");
    }
    Ok(())
}

/// The synthetic program with `n` looping functions and one function of `n` `if`s.
fn build(dir: &Path, n: usize) -> Result<PathBuf> {
    let mut c = String::from("#include <stdio.h>\n#include <stdlib.h>\n");
    for i in 0..n {
        writeln!(
            c,
            "__attribute__((noinline)) long f{i}(long n) {{ long s = {i}; \
             for (long j = 0; j < n; j++) {{ if (j % 3 == {m}) s += j; else s ^= j; }} return s; }}",
            m = i % 3
        )?;
    }
    c.push_str("__attribute__((noinline)) long big(long x) {\n");
    for i in 0..n {
        writeln!(
            c,
            "  if (x % {} == {}) x += {i}; else x ^= {};",
            i % 7 + 2,
            i % 2,
            i + 1
        )?;
    }
    c.push_str("  return x;\n}\nint main(int argc, char **argv) {\n  long n = argc + 9, t = 0;\n");
    for i in 0..n {
        writeln!(c, "  t += f{i}(n);")?;
    }
    c.push_str("  printf(\"%ld %ld\\n\", t, big(t));\n  return 0;\n}\n");
    let src = dir.join(format!("scale{n}.c"));
    let exe = dir.join(format!("scale{n}"));
    std::fs::write(&src, c)?;
    let st = Command::new("gcc")
        .args(["-O1", "-fno-inline", "-o"])
        .arg(&exe)
        .arg(&src)
        .status()?;
    if !st.success() {
        bail!("gcc failed on {}", src.display());
    }
    Ok(exe)
}

fn output(exe: &Path) -> Result<String> {
    let o = Command::new(exe).output()?;
    if !o.status.success() {
        bail!("{} failed: {:?}", exe.display(), o.status);
    }
    Ok(String::from_utf8_lossy(&o.stdout).into_owned())
}

struct Saved {
    took: Duration,
    points: u64,
}

/// Saves `exe` with `script` (then `save`), times it, counts the points placed or skipped,
/// and checks the saved program prints `plain`.
fn save(dir: &Path, exe: &Path, script: &str, name: &str, plain: &str) -> Result<Saved> {
    let out = dir.join(name);
    let file = dir.join(format!("{name}.gsh"));
    std::fs::write(&file, format!("{script}save {}\n", out.display()))?;
    let start = Instant::now();
    let o = Gsh::new()
        .timeout(Duration::from_secs(3600))
        .current_dir(dir)
        .args(["-c".to_owned(), format!("source {}", file.display())])
        .arg(exe)
        .run();
    let took = start.elapsed();
    if !o.success() {
        bail!("gsh could not save {name}:\n{}", o.stderr);
    }
    // The report's `Points` and `Skipped` lines: every point, placed or not.
    let count = |key: &str| {
        o.stdout
            .lines()
            .find_map(|l| l.trim_start().strip_prefix(key))
            .and_then(|v| v.trim().parse::<u64>().ok())
            .unwrap_or(0)
    };
    let points = count("Points") + count("Skipped");
    if points == 0 {
        bail!("saving {name} placed no points:\n{}", o.stdout);
    }
    let got = output(&out)?;
    if got != plain {
        bail!("{name} printed {got:?}, the original {plain:?}");
    }
    Ok(Saved { took, points })
}
