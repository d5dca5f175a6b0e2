//! `bench-static [--calls N] [--runs N]`: what a static gsh counter costs per call, against
//! gcc's `-finstrument-functions` with empty hooks, measured in the same run.
//!
//! The mutatee (`xtask/bench/static_calls.c`) calls a 4-byte function (`lea eax,[rdi+1]; ret`)
//! or a 10-byte one in a tight loop and prints the loop's wall time. It is built three ways:
//! plain `gcc -O2`; plain and then rewritten by `gsh` with `at F entry { gsh_n++; }` (and, for
//! comparison, entry plus exit); and `gcc -O2 -finstrument-functions` with empty
//! `__cyg_profile_func_enter/exit` in a separate translation unit. The added cost per call is
//! (median instrumented loop time − median plain loop time) / calls. Runs alternate between the
//! builds so that a change in machine load hits all of them alike. The gsh builds also print
//! their counter, which must equal the number of calls: a benchmark of instrumentation that
//! does not fire would measure nothing.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use anyhow::{bail, Context, Result};
use gsh_tests::{target_dir, Gsh};

const SOURCE: &str = include_str!("../bench/static_calls.c");
const HOOKS: &str = include_str!("../bench/cyg_hooks.c");
const DEFAULT_CALLS: u64 = 200_000_000;
const DEFAULT_RUNS: usize = 5;
const FUNCTIONS: [&str; 2] = ["f4", "f10"];

/// One way of building the mutatee.
struct Build {
    label: String,
    exe: PathBuf,
    /// The function it instruments (`None`: all of them, or none).
    only: Option<&'static str>,
    /// gsh builds print their counter after the time: the calls they counted per call made.
    counts_per_call: Option<u64>,
    /// The tactic line gsh printed when saving.
    tactics: Option<String>,
}

/// Parses `[--calls N] [--runs N]` (both at least 1) for the loop benchmarks; `task` names
/// the task in the usage line. Warns when xtask was built without optimisation.
pub fn calls_and_runs(
    args: &[String],
    task: &str,
    (mut calls, mut runs): (u64, usize),
) -> Result<(u64, usize)> {
    let mut it = args.iter();
    while let Some(arg) = it.next() {
        let mut number = |name: &str| -> Result<u64> {
            let n = it
                .next()
                .with_context(|| format!("{name} needs a number"))?;
            let v: u64 = n
                .parse()
                .with_context(|| format!("{name}: `{n}` is not a number"))?;
            if v == 0 {
                bail!("{name} must be at least 1");
            }
            Ok(v)
        };
        match arg.as_str() {
            "--calls" => calls = number("--calls")?,
            "--runs" => runs = number("--runs")? as usize,
            other => bail!("unexpected argument `{other}`; usage: {task} [--calls N] [--runs N]"),
        }
    }
    if cfg!(debug_assertions) {
        eprintln!("warning: built without optimisation; run with `cargo run --release -p xtask`");
    }
    Ok((calls, runs))
}

/// The median of a run's figures.
pub fn median(v: &[f64]) -> f64 {
    let mut v = v.to_vec();
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// Writes the loop mutatee into `dir` and builds it plain (`gcc -O2`) and with
/// `-finstrument-functions` and empty hooks; returns (plain, cyg).
pub fn build_plain_and_cyg(dir: &Path) -> Result<(PathBuf, PathBuf)> {
    let source = dir.join("static_calls.c");
    let hooks = dir.join("cyg_hooks.c");
    std::fs::write(&source, SOURCE)?;
    std::fs::write(&hooks, HOOKS)?;
    let plain = dir.join("plain");
    tool("gcc", &["-O2", path(&source)?, "-o", path(&plain)?])?;
    let hooks_o = dir.join("cyg_hooks.o");
    tool("gcc", &["-O2", "-c", path(&hooks)?, "-o", path(&hooks_o)?])?;
    let cyg = dir.join("cyg");
    tool(
        "gcc",
        &[
            "-O2",
            "-finstrument-functions",
            path(&source)?,
            path(&hooks_o)?,
            "-o",
            path(&cyg)?,
        ],
    )?;
    Ok((plain, cyg))
}

pub fn run(args: &[String]) -> Result<()> {
    let (calls, runs) = calls_and_runs(args, "bench-static", (DEFAULT_CALLS, DEFAULT_RUNS))?;
    let dir = target_dir().join("bench-static");
    std::fs::create_dir_all(&dir).with_context(|| format!("cannot create {}", dir.display()))?;
    let builds = build_all(&dir)?;

    // times[build][function] = one ns-per-call figure per run.
    let mut times = vec![vec![Vec::with_capacity(runs); FUNCTIONS.len()]; builds.len()];
    for r in 0..runs {
        for (fi, func) in FUNCTIONS.iter().enumerate() {
            for (bi, b) in builds.iter().enumerate() {
                if b.only.is_some_and(|o| o != *func) {
                    continue;
                }
                times[bi][fi].push(run_once(b, func, calls)? as f64 / calls as f64);
            }
        }
        eprintln!("run {}/{runs} done", r + 1);
    }

    println!("{calls} calls per run, median of {runs} runs (gcc -O2)");
    for (fi, func) in FUNCTIONS.iter().enumerate() {
        let base = median(&times[0][fi]);
        let cyg = builds
            .iter()
            .position(|b| b.label == "-finstrument-functions")
            .map(|bi| median(&times[bi][fi]) - base);
        println!("{func}: plain loop {base:.3} ns/iteration");
        for (bi, b) in builds.iter().enumerate().skip(1) {
            if times[bi][fi].is_empty() {
                continue;
            }
            let added = median(&times[bi][fi]) - base;
            let ratio = match cyg {
                Some(c) if c > 0.0 => format!("{:.2}x -finstrument-functions", added / c),
                _ => "-".into(),
            };
            let tactic = b
                .tactics
                .as_deref()
                .map(|t| format!(", tactics: {t}"))
                .unwrap_or_default();
            println!("  {:<26} +{added:.3} ns/call ({ratio}{tactic})", b.label);
        }
        let gsh = builds
            .iter()
            .position(|b| b.label == "gsh entry counter" && b.only == Some(*func));
        if let (Some(c), Some(bi)) = (cyg, gsh) {
            let added = median(&times[bi][fi]) - base;
            let verdict = if added <= c { "met" } else { "MISSED" };
            println!("  target gsh entry counter <= -finstrument-functions: {verdict}");
        }
    }
    Ok(())
}

/// Compiles the plain and `-finstrument-functions` builds and rewrites the plain one with gsh.
fn build_all(dir: &Path) -> Result<Vec<Build>> {
    let (plain, cyg) = build_plain_and_cyg(dir)?;
    let mut builds = vec![Build {
        label: "plain".into(),
        exe: plain.clone(),
        only: None,
        counts_per_call: None,
        tactics: None,
    }];
    for (label, points, per_call) in [
        ("gsh entry counter", &["entry"][..], 1),
        ("gsh entry+exit counters", &["entry", "exit"][..], 2),
    ] {
        for func in FUNCTIONS {
            let out = dir.join(format!("gsh-{}-{func}", points.join("-")));
            let mut script = String::from("declare long gsh_n; ");
            for p in points {
                script.push_str(&format!("at {func} {p} {{ gsh_n++; }}; "));
            }
            script.push_str(&format!(
                "at main exit {{ printf(\"%ld\\n\", gsh_n); }}; save {}",
                path(&out)?
            ));
            let o = Gsh::new()
                .args(["-c", script.as_str(), path(&plain)?])
                .run();
            if !o.success() {
                bail!("gsh failed on {}:\n{o}", plain.display());
            }
            let tactics = tactics_alone(&plain, func, points)?;
            builds.push(Build {
                label: label.into(),
                exe: out,
                only: Some(func),
                counts_per_call: Some(per_call),
                tactics,
            });
        }
    }
    builds.push(Build {
        label: "-finstrument-functions".into(),
        exe: cyg,
        only: None,
        counts_per_call: None,
        tactics: None,
    });
    Ok(builds)
}

/// The tactics `save` reports for `func`'s `points` alone (the bench builds' `main` exit
/// snippet would add its own to theirs).
fn tactics_alone(plain: &Path, func: &str, points: &[&str]) -> Result<Option<String>> {
    let scratch = plain.with_file_name(format!("tactics-{func}-{}", points.join("-")));
    let mut script = String::from("declare long gsh_n; ");
    for p in points {
        script.push_str(&format!("at {func} {p} {{ gsh_n++; }}; "));
    }
    script.push_str(&format!("save {}", path(&scratch)?));
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

/// Runs one build once on `func`; returns the loop's wall time in ns.
fn run_once(b: &Build, func: &str, calls: u64) -> Result<u64> {
    let out = Command::new(&b.exe)
        .args([func, &calls.to_string()])
        .stdin(Stdio::null())
        .output()
        .with_context(|| format!("cannot run {}", b.exe.display()))?;
    let text = String::from_utf8_lossy(&out.stdout);
    if !out.status.success() {
        bail!(
            "{} {func} failed ({}): {text}{}",
            b.exe.display(),
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let mut lines = text.lines();
    let ns = lines
        .next()
        .and_then(|l| l.trim().parse().ok())
        .with_context(|| format!("{}: no time in `{text}`", b.exe.display()))?;
    if let Some(per_call) = b.counts_per_call {
        let counted: u64 = lines
            .next()
            .and_then(|l| l.trim().parse().ok())
            .with_context(|| format!("{}: no counter in `{text}`", b.exe.display()))?;
        if counted != per_call * calls {
            bail!(
                "{} {func}: counted {counted}, expected {}: the instrumentation did not fire",
                b.exe.display(),
                per_call * calls
            );
        }
    }
    Ok(ns)
}

pub fn tool(program: &str, args: &[&str]) -> Result<()> {
    let out = Command::new(program)
        .args(args)
        .stdin(Stdio::null())
        .output()
        .with_context(|| format!("cannot run {program}"))?;
    if !out.status.success() {
        bail!(
            "{program} {} failed: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    Ok(())
}

/// `p` as a command-line argument. gsh scripts embed paths as text, so they must be UTF-8.
pub fn path(p: &Path) -> Result<&str> {
    p.to_str()
        .with_context(|| format!("{} is not UTF-8; set CARGO_TARGET_DIR", p.display()))
}
