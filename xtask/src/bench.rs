//! `bench-analysis [FILE] [--runs N]`: how long the whole-module analysis takes (open the ELF,
//! build the function table, then every function's CFG, loops and call graph), its peak memory,
//! and how that compares with `objdump -d FILE > /dev/null` timed in the same run.
//!
//! Each analysis run happens in a child process (this executable again, with the hidden task
//! `bench-analysis-child`), so that its peak resident set (`VmHWM`) is its own and neither
//! objdump's nor an earlier run's.

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use engine::analysis::Analysis;
use engine::symbols::NoProgress;
use engine::{Binary, FunctionTable};

const DEFAULT_FILE: &str = "/usr/lib/gcc/x86_64-linux-gnu/12/cc1";
const DEFAULT_RUNS: usize = 3;
/// The targets: analysis at most this fraction of objdump's time, and under 1 GiB.
const TIME_TARGET: f64 = 0.5;
const RSS_TARGET_KB: u64 = 1 << 20;

/// What one child run measured.
struct Run {
    open: Duration,
    table: Duration,
    analysis: Duration,
    peak_kb: u64,
    summary: String,
}

impl Run {
    fn total(&self) -> Duration {
        self.open + self.table + self.analysis
    }
}

pub fn run(args: &[String]) -> Result<()> {
    let (file, runs) =
        crate::file_and_runs(args, DEFAULT_RUNS, "bench-analysis [FILE] [--runs N]")?;
    let file = file.unwrap_or_else(|| DEFAULT_FILE.to_owned());
    if !Path::new(&file).is_file() {
        bail!("{file} does not exist; give a FILE to analyse");
    }
    if cfg!(debug_assertions) {
        eprintln!("warning: built without optimisation; run with `cargo run --release -p xtask`");
    }

    let exe = std::env::current_exe().context("cannot find this executable")?;
    let mut analysis_runs = Vec::with_capacity(runs);
    let mut objdump_times = Vec::with_capacity(runs);
    for i in 0..runs {
        // Alternate, so that a change in machine load hits both sides alike.
        analysis_runs.push(child_run(&exe, &file)?);
        objdump_times.push(objdump(&file)?);
        eprintln!(
            "run {}/{runs}: analysis {}, objdump {}",
            i + 1,
            secs(analysis_runs[i].total()),
            secs(objdump_times[i])
        );
    }

    let size = std::fs::metadata(&file).map(|m| m.len()).unwrap_or(0);
    println!(
        "{file}: {:.1} MB, {runs} runs; {}",
        size as f64 / 1e6,
        analysis_runs[0].summary
    );
    let median = |mut v: Vec<Duration>| {
        v.sort();
        v[v.len() / 2]
    };
    let open = median(analysis_runs.iter().map(|r| r.open).collect());
    let table = median(analysis_runs.iter().map(|r| r.table).collect());
    let analysis = median(analysis_runs.iter().map(|r| r.analysis).collect());
    let total = median(analysis_runs.iter().map(Run::total).collect());
    let objdump = median(objdump_times);
    let peak_kb = analysis_runs.iter().map(|r| r.peak_kb).max().unwrap_or(0);
    println!("  median wall time");
    println!("    Binary::open           {}", secs(open));
    println!("    FunctionTable::build   {}", secs(table));
    println!("    Analysis::run          {}", secs(analysis));
    println!("    total                  {}", secs(total));
    println!("    objdump -d > /dev/null {}", secs(objdump));
    let ratio = total.as_secs_f64() / objdump.as_secs_f64().max(1e-9);
    let verdict = |ok: bool| if ok { "met" } else { "MISSED" };
    println!(
        "  ratio to objdump        {ratio:.3}x (target <= {TIME_TARGET}x: {})",
        verdict(ratio <= TIME_TARGET)
    );
    println!(
        "  peak RSS                {:.1} MiB (target < 1024 MiB: {})",
        peak_kb as f64 / 1024.0,
        verdict(peak_kb < RSS_TARGET_KB)
    );
    Ok(())
}

/// The child's side: analyse `file` once and print what it measured on one line.
pub fn child(args: &[String]) -> Result<()> {
    let [file] = args else {
        bail!("usage: bench-analysis-child FILE");
    };
    let start = Instant::now();
    let binary = Binary::open(Path::new(file))?;
    let opened = Instant::now();
    let table = FunctionTable::build(&binary, &NoProgress);
    let built = Instant::now();
    let analysis = Analysis::run(&binary, &table, &NoProgress);
    let done = Instant::now();
    let s = analysis.stats();
    println!(
        "{} {} {} {} {} functions, {} blocks, {} edges, {} loops, {} jump tables",
        (opened - start).as_nanos(),
        (built - opened).as_nanos(),
        (done - built).as_nanos(),
        peak_rss_kb()?,
        s.functions,
        s.blocks,
        s.edges,
        s.loops,
        s.jump_tables
    );
    Ok(())
}

fn child_run(exe: &Path, file: &str) -> Result<Run> {
    let out = Command::new(exe)
        .args(["bench-analysis-child", file])
        .stdin(Stdio::null())
        .output()
        .context("cannot run the analysis child")?;
    if !out.status.success() {
        bail!(
            "the analysis child failed ({}): {}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let line = String::from_utf8_lossy(&out.stdout).trim().to_owned();
    let mut words = line.splitn(5, ' ');
    let mut next = || -> Result<u64> {
        let w = words.next().context("short child report")?;
        w.parse()
            .with_context(|| format!("bad child report `{line}`"))
    };
    let (open, table, analysis, peak_kb) = (next()?, next()?, next()?, next()?);
    Ok(Run {
        open: Duration::from_nanos(open),
        table: Duration::from_nanos(table),
        analysis: Duration::from_nanos(analysis),
        peak_kb,
        summary: words.next().unwrap_or_default().to_owned(),
    })
}

/// Wall time of `objdump -d file > /dev/null`.
fn objdump(file: &str) -> Result<Duration> {
    let start = Instant::now();
    let status = Command::new("objdump")
        .args(["-d", file])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .context("cannot run objdump")?;
    let elapsed = start.elapsed();
    if !status.success() {
        bail!("objdump -d {file} failed: {status}");
    }
    Ok(elapsed)
}

/// This process's peak resident set in KiB, from `VmHWM` in `/proc/self/status`.
fn peak_rss_kb() -> Result<u64> {
    let status = std::fs::read_to_string("/proc/self/status")?;
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .context("no VmHWM in /proc/self/status")
}

fn secs(d: Duration) -> String {
    format!("{:.3} s", d.as_secs_f64())
}
