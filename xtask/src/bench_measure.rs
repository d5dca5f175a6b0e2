//! `bench-measure [--calls N] [--runs N]`: what gsh's live measuring costs per call, side by
//! side in one run: `count`, `time` (wall), `time --cpu`, `profile`, `profile --count`, and
//! gcc's `-finstrument-functions` with empty hooks; and what `profile` costs beyond `time`.
//!
//! The mutatee is bench-static's (`xtask/bench/static_calls.c`): a tight loop calling the
//! 10-byte `f10`, timed around the loop by the program itself. Each gsh variant runs it under
//! `gsh --json -c "MEASURE f10; start > OUT; continue; report"`, so the program's output (the
//! loop time) goes to a file and the report says how many calls were measured, which must be
//! every one: a benchmark of instrumentation that does not fire would measure nothing. The
//! added cost per call is (median loop time − median plain loop time) / calls, the plain build
//! run directly in the same rounds. `time --cpu` makes a system call per entry and exit, so it
//! runs 1/100 of the calls.

use std::path::Path;
use std::process::{Command, Stdio};

use crate::bench_static::{build_plain_and_cyg, calls_and_runs, median, path};

use anyhow::{bail, Context, Result};
use gsh_tests::{target_dir, Gsh};

const DEFAULT_CALLS: u64 = 50_000_000;
const DEFAULT_RUNS: usize = 5;
const FUNC: &str = "f10";
/// What `profile` may cost per call beyond `time`'s wall-clock timer, in ns.
const PROFILE_OVER_TIME: f64 = 15.0;

/// One way of measuring.
struct Variant {
    label: &'static str,
    /// The gsh command (`count f10`), or `None` for a build run directly.
    measure: Option<&'static str>,
    /// The `-finstrument-functions` build instead of the plain one.
    cyg: bool,
    /// Calls are the run's calls divided by this.
    divide: u64,
    target: Option<f64>,
}

const VARIANTS: [Variant; 7] = [
    Variant {
        label: "plain",
        measure: None,
        cyg: false,
        divide: 1,
        target: None,
    },
    Variant {
        label: "gsh count",
        measure: Some("count"),
        cyg: false,
        divide: 1,
        target: Some(2.5),
    },
    Variant {
        label: "gsh time (wall)",
        measure: Some("time"),
        cyg: false,
        divide: 1,
        target: Some(20.0),
    },
    Variant {
        label: "gsh time --cpu",
        measure: Some("time --cpu"),
        cyg: false,
        divide: 100,
        target: None,
    },
    Variant {
        label: "gsh profile",
        measure: Some("profile"),
        cyg: false,
        divide: 1,
        target: Some(60.0),
    },
    Variant {
        label: "gsh profile --count",
        measure: Some("profile --count"),
        cyg: false,
        divide: 1,
        target: None,
    },
    Variant {
        label: "-finstrument-functions",
        measure: None,
        cyg: true,
        divide: 1,
        target: None,
    },
];

pub fn run(args: &[String]) -> Result<()> {
    let (calls, runs) = calls_and_runs(args, "bench-measure", (DEFAULT_CALLS, DEFAULT_RUNS))?;
    let dir = target_dir().join("bench-measure");
    std::fs::create_dir_all(&dir).with_context(|| format!("cannot create {}", dir.display()))?;
    let (plain, cyg) = build_plain_and_cyg(&dir)?;

    // per_call[variant] = ns per call of each run (loop time / calls).
    let mut per_call = vec![Vec::with_capacity(runs); VARIANTS.len()];
    for r in 0..runs {
        for (vi, v) in VARIANTS.iter().enumerate() {
            let n = (calls / v.divide).max(1);
            let exe = if v.cyg { &cyg } else { &plain };
            let ns = match v.measure {
                None => run_direct(exe, n)?,
                Some(m) => run_measured(exe, m, n, &dir)?,
            };
            per_call[vi].push(ns as f64 / n as f64);
        }
        eprintln!("run {}/{runs} done", r + 1);
    }
    let base = median(&per_call[0]);
    let cyg_added = median(&per_call[VARIANTS.len() - 1]) - base;
    println!(
        "{calls} calls of {FUNC} (10 bytes) per run, median of {runs} runs (gcc -O2); \
         plain loop {base:.3} ns/iteration"
    );
    for (vi, v) in VARIANTS.iter().enumerate().skip(1) {
        let added = median(&per_call[vi]) - base;
        let ratio = if cyg_added > 0.0 {
            format!("{:.2}x -finstrument-functions", added / cyg_added)
        } else {
            "-".into()
        };
        let target = match v.target {
            Some(t) if added <= t => format!(", target <= {t} ns: met"),
            Some(t) => format!(", target <= {t} ns: MISSED"),
            None => String::new(),
        };
        let calls_note = if v.divide > 1 {
            format!(" ({} calls)", calls / v.divide)
        } else {
            String::new()
        };
        println!(
            "  {:<24} +{added:.2} ns/call ({ratio}{target}){calls_note}",
            v.label
        );
    }
    // The call-path walk's own cost: profile beside time in the same run (issue 13's target:
    // at most 15 ns more per call).
    let added = |label: &str| {
        VARIANTS
            .iter()
            .position(|v| v.label == label)
            .map(|i| median(&per_call[i]) - base)
    };
    if let (Some(p), Some(t)) = (added("gsh profile"), added("gsh time (wall)")) {
        let verdict = if p - t <= PROFILE_OVER_TIME {
            "met"
        } else {
            "MISSED"
        };
        println!(
            "  profile - time           {:+.2} ns/call ({:.2}x time; target <= +{PROFILE_OVER_TIME} ns: {verdict})",
            p - t,
            p / t
        );
    }
    println!("  Frida Interceptor: not installed here, not measured");
    Ok(())
}

/// Runs `exe f10 N` directly; returns its loop time in ns.
fn run_direct(exe: &Path, n: u64) -> Result<u64> {
    let out = Command::new(exe)
        .args([FUNC, &n.to_string()])
        .stdin(Stdio::null())
        .output()
        .with_context(|| format!("cannot run {}", exe.display()))?;
    let text = String::from_utf8_lossy(&out.stdout);
    if !out.status.success() {
        bail!("{} failed ({}): {text}", exe.display(), out.status);
    }
    loop_time(&text, exe)
}

/// Runs `exe f10 N` under gsh with `measure f10`; checks every call was measured and returns
/// the loop time in ns.
fn run_measured(exe: &Path, measure: &str, n: u64, dir: &Path) -> Result<u64> {
    let out_file = dir.join("program.out");
    let script = format!(
        "{measure} {FUNC}; start > {}; continue; report",
        path(&out_file)?
    );
    let n_text = n.to_string();
    let o = Gsh::new()
        .args([
            "--json",
            "-c",
            script.as_str(),
            path(exe)?,
            FUNC,
            n_text.as_str(),
        ])
        .run();
    if !o.success() {
        bail!("gsh failed ({measure}):\n{o}");
    }
    // The `--json` stream: one `{"command", "result"}` object per line; the report is last.
    let report: serde_json::Value = o
        .stdout
        .lines()
        .rev()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .find_map(|mut l| l.get_mut("result").map(serde_json::Value::take))
        .context("gsh printed no report")?;
    let measured = report["values"]
        .as_array()
        .and_then(|v| v.first())
        .and_then(|v| v["calls"].as_u64())
        .with_context(|| format!("no calls in the report: {report}"))?;
    if measured != n {
        bail!("{measure}: measured {measured} calls of {n}: the instrumentation did not fire");
    }
    let text = std::fs::read_to_string(&out_file)?;
    loop_time(&text, exe)
}

fn loop_time(text: &str, exe: &Path) -> Result<u64> {
    text.lines()
        .next()
        .and_then(|l| l.trim().parse().ok())
        .with_context(|| format!("{}: no time in `{text}`", exe.display()))
}
