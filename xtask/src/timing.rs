//! `open-time`: wall-clock time of opening a binary and building its function table, over
//! several runs, reported as min, median and max.

use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use engine::symbols::NoProgress;
use engine::{Binary, FunctionTable};

const DEFAULT_RUNS: usize = 5;

pub fn run(args: &[String]) -> Result<()> {
    let (file, runs) = crate::file_and_runs(args, DEFAULT_RUNS, "open-time FILE [--runs N]")?;
    let file = file.context("usage: open-time FILE [--runs N]")?;
    let path = Path::new(&file);

    let mut open_times = Vec::with_capacity(runs);
    let mut build_times = Vec::with_capacity(runs);
    let mut counts = (0, 0);
    for _ in 0..runs {
        let start = Instant::now();
        let binary = Binary::open(path)?;
        let opened = Instant::now();
        let table = FunctionTable::build(&binary, &NoProgress);
        let built = Instant::now();
        open_times.push(opened - start);
        build_times.push(built - opened);
        counts = (table.functions().len(), table.variables().len());
    }
    let size = std::fs::metadata(path).map(|m| m.len()).unwrap_or(0);
    println!(
        "{file}: {:.1} MB, {} functions, {} variables, {runs} runs",
        size as f64 / 1e6,
        counts.0,
        counts.1
    );
    println!("  {:<22} {:>10} {:>10} {:>10}", "", "min", "median", "max");
    for (label, times) in [
        ("Binary::open", &mut open_times),
        ("FunctionTable::build", &mut build_times),
    ] {
        times.sort();
        println!(
            "  {label:<22} {:>10} {:>10} {:>10}",
            ms(times[0]),
            ms(times[times.len() / 2]),
            ms(times[times.len() - 1])
        );
    }
    Ok(())
}

fn ms(d: Duration) -> String {
    format!("{:.2} ms", d.as_secs_f64() * 1e3)
}
