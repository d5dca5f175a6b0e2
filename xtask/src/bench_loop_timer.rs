//! `bench-loop-timer [--runs N]`: how long `consult`'s loop timer takes to go into, and come
//! out of, python3's interpreter loop (`_PyEval_EvalFrameDefault`, a 130 KB function the
//! program's one thread never leaves) while python3 computes, against the same timer on the
//! loop of a small function of the same program, alternating, in one run.
//!
//! gsh attaches through the engine as `attach` does (every thread traced, as for a program it
//! started) and inserts each timer as the search does (`LiveProbes`: a `time FUNC loop LOOP`
//! request of the plan, inserted while the program runs, then undone and deleted). The
//! module's analysis is done before the first timing.

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, Context as _, Result};
use engine::consult::probes::Probes;
use engine::instrument::consult_probes::LiveProbes;
use engine::instrument::{Inferior, Plan};
use engine::process::AttachedMode;
use engine::Session;

const PYTHON: &str = "/usr/bin/python3";
const INTERPRETER: &str = "_PyEval_EvalFrameDefault";
const SCRIPT: &str = "import sys\n\
def fib(n):\n    return n if n < 2 else fib(n - 1) + fib(n - 2)\n\
print('running', flush=True)\n\
while True:\n    fib(20)\n";

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

fn ms(d: Duration) -> String {
    format!("{:.1} ms", d.as_secs_f64() * 1e3)
}

pub fn run(args: &[String]) -> Result<()> {
    let usage = "bench-loop-timer [--runs N]";
    let (file, runs) = crate::file_and_runs(args, 5, usage)?;
    if let Some(f) = file {
        bail!("unexpected argument `{f}`; usage: {usage}");
    }
    let mut child = Command::new(PYTHON)
        .args(["-c", SCRIPT])
        .stdout(Stdio::piped())
        .spawn()
        .context("starting python3")?;
    let mut line = String::new();
    BufReader::new(child.stdout.take().expect("piped"))
        .read_line(&mut line)
        .context("python3 does not say it runs")?;
    let result = measure(child.id() as i32, runs);
    let _ = child.kill();
    let _ = child.wait();
    result
}

fn measure(pid: i32, runs: usize) -> Result<()> {
    let inferior = Inferior::attach(pid, AttachedMode::Traced, true)?;
    let mut session = Session::new();
    session.open(std::path::Path::new(PYTHON))?;
    let mut plan = Plan::default();
    for n in inferior.install_attached(&mut session, &plan)? {
        eprintln!("{n}");
    }
    inferior.resume_if_stopped()?;
    let started = Instant::now();
    let main = session.main()?;
    let analysis = main.analysis();
    eprintln!(
        "analysis of {}: {:.2} s",
        main.name,
        started.elapsed().as_secs_f64()
    );
    // The baseline: the smallest named function of the program with one loop.
    let small = main
        .functions()
        .functions()
        .iter()
        .filter(|f| !f.name.starts_with("sub_") && !f.is_cold_part())
        .filter(|f| analysis.function(f.id).loops.loops.len() == 1)
        .min_by_key(|f| (analysis.metrics(f.id).instructions, f.name.clone()))
        .map(|f| f.display_name().to_owned())
        .context("python3 has no small function with a loop")?;
    let module = main.name.clone();
    let mut probes = LiveProbes::new(&mut plan, &mut session, &inferior);
    let big_loops = probes
        .loops(&module, INTERPRETER)
        .map_err(anyhow::Error::msg)?;
    let cases = [
        (INTERPRETER.to_owned(), big_loops[0].name.clone()),
        (INTERPRETER.to_owned(), big_loops[1].name.clone()),
        (small.clone(), "loop_1".to_owned()),
    ];
    let mut times: Vec<(Vec<Duration>, Vec<Duration>)> = vec![Default::default(); cases.len()];
    for _ in 0..runs {
        for (i, (function, lp)) in cases.iter().enumerate() {
            let t = Instant::now();
            let id = probes
                .insert(&module, function, lp)
                .map_err(anyhow::Error::msg)?;
            times[i].0.push(t.elapsed());
            // Entered meanwhile, as a search reads it.
            std::thread::sleep(Duration::from_millis(50));
            let t = Instant::now();
            probes.remove(id).map_err(anyhow::Error::msg)?;
            times[i].1.push(t.elapsed());
        }
    }
    drop(probes);
    println!(
        "loop timer into a running python3 ({runs} runs, alternating; median insert / remove):"
    );
    let base = (median(times[2].0.clone()), median(times[2].1.clone()));
    for ((function, lp), (ins, rem)) in cases.iter().zip(times) {
        let (i, r) = (median(ins), median(rem));
        println!(
            "  time {function} loop {lp:<10} insert {:>10} ({:.1}x)   remove {:>10} ({:.1}x)",
            ms(i),
            i.as_secs_f64() / base.0.as_secs_f64().max(1e-9),
            ms(r),
            r.as_secs_f64() / base.1.as_secs_f64().max(1e-9),
        );
    }
    println!("  (the ratios are to the last line's, a small function's loop, in the same run)");
    inferior.finish()?;
    Ok(())
}
