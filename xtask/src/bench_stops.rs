//! `bench-stops [--runs N] [--cost PERCENT] [--threads N] [--for SECONDS]`: whether what
//! `consult` says of its stack samples' stops agrees with what the program went through.
//!
//! A CPU-bound program computes in `--threads` threads (1 by default, its main thread; the
//! others start beside it), none of which ever sleeps: each adds its finished work units to
//! one counter, and the main thread, between units, prints the count every 100 ms with its
//! monotonic clock and the process's CPU time (a line whose clock and count a stop came
//! between is dropped). A twin (the same program) runs beside it throughout and is never
//! searched: the machine's other load slows both alike. The bench alternates phases of 5 s
//! alone with searches (`gsh -p PID -c 'consult --for SECONDS --cost PERCENT --threshold
//! CPUBound=1'`), ending alone. With CPUBound's threshold at 1 no hypothesis holds (a thread
//! is never on a CPU or waiting for one more than all of the time) and the search refines
//! nothing, so it inserts no probe (the bench checks that none went in): it only stops the
//! program for stack samples while it waits out the bounded wait, at the pace `--cost`
//! allows. Each run then compares, over the search's own seconds:
//!
//! - the `stopped` share the search reports against the time the threads were stopped by
//!   their own `schedstat` (the wall time neither on a CPU nor waiting for one: they never
//!   sleep), the thread held longest and the mean over threads;
//! - the `stop_cost` the search reports (the running time its stops took from the threads)
//!   against the loss of progress: per wall second over the twin's, during the search
//!   against the alone phases on both sides (the pair cancels the machine's other load); per
//!   wall second alone (unpaired); and per second on a CPU or waiting for one (which a stop
//!   does not count: what a stopped thread does not get back shows here as no loss, what
//!   it gets back as a gain), and per CPU second (the stops' own work in the kernel and
//!   the caches, which the estimate leaves out).
//!
//! Ratios estimate / measured are printed per run, with the alone phases' difference as the
//! noise. Build it, gsh and the runtime with `--release`.
//!
//! What it showed (2-core machine shared with other builds, load 11 to 17 by `uptime`; `--for
//! 20`, every search ended after its bounded wait, 1 to 6 s, with no probe):
//!
//! - `stopped` against the threads' `schedstat`: with gsh as it was (a stop counted from
//!   asking for it to the resume, `--cost 5`, 4 runs) the search said 1.8% to 4.7% where its
//!   thread was stopped 0.37% to 0.73%: 2.5x to 11.4x (median 9.8). Counted from when the
//!   halt saw each thread stop to its resume, and a stop as the mean of its threads (same
//!   load): 0.38% to 0.49% against 0.31% to 0.65%, 0.62x to 1.56x (median 0.69; `--cost 5`,
//!   4 runs, 400 to 570 stops each); with two computing threads (`--threads 2 --cost 30`) 5.0%
//!   to 12.4% against 4.6% to 10.1%, 0.82x to 1.26x (median 1.23). What it misses with one
//!   thread (about 25 us a stop) is the time from the thread's stop to the tracer seeing it.
//!   The schedstat itself reads 0.01% to 0.3% stopped alone, where nothing stops the threads
//!   (a run or a wait in progress is not in it yet): the ratios of one thread's small shares
//!   are that noisy.
//! - With one thread a stop holds it about 70 us, and the sampler takes at most one per 10 ms,
//!   so even `--cost 30` stopped it under 1%. With two threads a stop holds the thread that
//!   stopped first until the other, waiting for a CPU, takes its stop: 5% to 10% of the time.
//! - `stop_cost` against the loss of progress: none could be measured. During all but one of
//!   the one-thread searches the searched program got *more* of the CPUs than alone (its
//!   thread on a CPU 0.33 to 0.92 of the wall time against 0.13 to 0.35 alone, the rest
//!   waiting for one; the one, 0.21 against 0.20): the scheduler favours a thread often
//!   stopped and woken. Its progress per wall second was 0.93x to 5.5x
//!   alone's unpaired, 0.52x to 4.7x against its twin (whose alone phases differed by up to
//!   77%: under this load two equal programs get unequal shares for seconds), per second on a
//!   CPU or waiting for one 1.03x to 5.6x, per CPU second 0.993x to 1.028x (the stops' work in
//!   the kernel and the caches: within the noise, up to 2.9%). The search's `stop_cost` was 0%
//!   to 3.9% (0% in most runs: a thread waiting for a CPU more than the stops took gets them
//!   back, `stacks::imposed`): over the slowdown measured, as it should be, but whether it is
//!   right where the stops do cost (an idle machine) this load could not show.
//! - On a quiet machine (load 1.4 to 3, `--cost 5`, 3 runs each) the stops did cost: one
//!   computing thread progressed 0.940 to 0.947 of alone per wall second against its twin,
//!   two threads 0.817 to 0.911, while per CPU second nothing was lost (a stopped thread gives
//!   its CPU to the twin and waits for it after). `stacks::imposed` said 0.00% to 0.49%:
//!   0.00 to 0.08 of the loss. With the sampler's quiet turns (`stacks::StopTurns`) the
//!   search's `stop_cost` read 2.9% to 3.8% with one thread, 0.45 to 1.07 of the loss
//!   (median 0.81), and 5.5% to 7.8% with two, 0.38 to 0.64 of it.
//!
//! With a sample holding one thread at a time (`Process::hold_each`: interrupted, walked and
//! resumed before the next; an attached process gsh has let go stays so, each thread seized
//! alone), against the halt of every thread, same binaries built from the same tree, runs
//! alternated (`--cost 5 --for 20 --runs 3`, each search ending after its bounded wait, 4 to
//! 6 s; load 7.5 to 11 by `uptime`, 6 runs of each):
//!
//! - two threads: the threads' `schedstat` read them stopped 0.00% to 0.67% of the wall time
//!   (mean over threads; the longest-held 0.00% to 0.75%), where the halt held them 1.2% to
//!   8.5% (1.7% to 14.9%); the search said 0.07% to 0.19% stopped against 2.1% to 4.7%, and
//!   took 120 to 357 samples in its 6 s against 16 to 167.
//! - one thread: 0.36% to 0.74% against 0.27% to 1.49% (the halt's stop was one thread's
//!   too; hands-off it also seized the thread and the tracer then halted it again to let it
//!   go, a stop the search never counted).
//! - progress per wall second against the twin: 0.85 to 1.72 (two threads) and 0.94 to 2.93
//!   (one) with the per-thread holds, 0.82 to 1.48 and 0.93 to 2.54 with the halt: at this
//!   load two equal programs get unequal shares for seconds, and no loss could be measured.

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use crate::progress::{now, ratio};
use anyhow::{bail, Context as _, Result};
use gsh_tests::{target_dir, Gsh};

/// `spin [THREADS]`: THREADS threads computing (the main thread among them), the main one
/// printing `CLOCK COUNT CPU` every 100 ms between its units.
const PROGRAM: &str = r#"
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
static volatile unsigned long done;
__attribute__((noipa, used)) unsigned long unit(unsigned long x) {
    for (int i = 0; i < 40; i++)
        x = x * 6364136223846793005UL + 1442695040888963407UL;
    return x;
}
__attribute__((noipa, used)) void *crunch(void *arg) {
    unsigned long x = (unsigned long)arg;
    for (;;) {
        x = unit(x);
        if (x == 42) puts("");
        __atomic_add_fetch(&done, 1, __ATOMIC_RELAXED);
    }
    return NULL;
}
static double secs(struct timespec t) { return t.tv_sec + t.tv_nsec / 1e9; }
int main(int argc, char **argv) {
    int n = argc > 1 ? atoi(argv[1]) : 1;
    for (int i = 1; i < n; i++) {
        pthread_t t;
        pthread_create(&t, NULL, crunch, (void *)(unsigned long)(i + 1));
    }
    setvbuf(stdout, NULL, _IOLBF, 0);
    unsigned long x = 1;
    struct timespec last;
    clock_gettime(CLOCK_MONOTONIC, &last);
    for (;;) {
        for (int k = 0; k < 4096; k++) {
            x = unit(x);
            if (x == 42) puts("");
            __atomic_add_fetch(&done, 1, __ATOMIC_RELAXED);
        }
        struct timespec a, b, cpu;
        clock_gettime(CLOCK_MONOTONIC, &a);
        if (secs(a) - secs(last) < 0.1)
            continue;
        last = a;
        unsigned long c = __atomic_load_n(&done, __ATOMIC_RELAXED);
        clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &cpu);
        clock_gettime(CLOCK_MONOTONIC, &b);
        /* A stop between reading the clock and the count would pair them wrongly. */
        if (secs(b) - secs(a) < 1e-3)
            printf("%.6f %lu %.6f\n", secs(b), c, secs(cpu));
    }
}
"#;

/// How long each phase without the search lasts.
const ALONE: Duration = Duration::from_secs(5);

fn usage() -> &'static str {
    "bench-stops [--runs N] [--cost PERCENT] [--threads N] [--for SECONDS]"
}

pub fn run(args: &[String]) -> Result<()> {
    let (mut runs, mut cost, mut threads, mut seconds) = (3usize, 5.0f64, 1usize, 20.0f64);
    let mut it = args.iter();
    while let Some(a) = it.next() {
        let mut value = |what: &str| crate::number_arg(&mut it, what);
        match a.as_str() {
            "--runs" => runs = value("--runs")? as usize,
            "--cost" => cost = value("--cost")?,
            "--threads" => threads = value("--threads")? as usize,
            "--for" => seconds = value("--for")?,
            other => bail!("unexpected argument `{other}`; usage: {}", usage()),
        }
    }
    if runs == 0
        || threads == 0
        || !(cost > 0.0 && cost <= 100.0)
        || seconds.is_nan()
        || seconds <= 0.0
    {
        bail!("usage: {}", usage());
    }
    let dir = target_dir().join("bench-stops");
    let exe = crate::cprogram::build(&dir, "spin", PROGRAM)?;
    println!(
        "consult --cost {cost} (stack samples only) on a program computing in {threads} \
         thread(s), beside its twin: what the search says of its stops against the threads' \
         schedstat and the program's progress, during each search against the alone phases \
         on both sides, same run"
    );
    let program = [exe.into_os_string(), threads.to_string().into()];
    let out = bench(&program, cost, seconds, runs)?;
    let mut sums: Vec<(&str, Vec<f64>)> = vec![
        ("stopped / schedstat's mean over threads", Vec::new()),
        ("stopped / schedstat's longest-held thread", Vec::new()),
        ("stop_cost / twin-paired loss per wall second", Vec::new()),
    ];
    for (i, r) in out.iter().enumerate() {
        let run = i + 1;
        println!(
            "run {run}: consult ran {:.1} s, {} stops, {} probes; it says the program was \
             stopped {:.2}% of the time and its stops took {:.2}% of its running (overhead \
             {:.2}%)",
            r.seconds,
            r.samples,
            r.probes,
            r.stopped * 100.0,
            r.stop_cost * 100.0,
            r.overhead * 100.0
        );
        println!(
            "run {run}: its threads' schedstat: stopped {:.2}% of the wall time (mean over {} \
             threads), {:.2}% (the longest held); alone, where nothing stops them, it reads \
             {:.2}% (the noise: a thread's current run or wait is not in its schedstat until \
             it ends); on a CPU {:.2}, waiting for one {:.2} per wall second (alone: {:.2}, \
             {:.2}); stopped / schedstat {} (mean), {} (longest)",
            r.held_mean * 100.0,
            r.threads,
            r.held_max * 100.0,
            r.held_alone * 100.0,
            r.run_share.0,
            r.wait_share.0,
            r.run_share.1,
            r.wait_share.1,
            ratio(r.stopped, r.held_mean),
            ratio(r.stopped, r.held_max)
        );
        println!(
            "run {run}: progress during the search over alone: per wall second against the \
             twin {:.4} (the alone phases differ by {:.2}%), unpaired {:.4} ({:.2}%), per \
             second on a CPU or waiting for one {:.4} ({:.2}%), per CPU second {:.4} ({:.2}%); \
             stop_cost / twin-paired loss {}, / unpaired loss {}",
            r.paired.0,
            r.paired.1 * 100.0,
            r.wall.0,
            r.wall.1 * 100.0,
            r.runnable.0,
            r.runnable.1 * 100.0,
            r.cpu.0,
            r.cpu.1 * 100.0,
            ratio(r.stop_cost, 1.0 - r.paired.0),
            ratio(r.stop_cost, 1.0 - r.wall.0)
        );
        // Only where the held time stands out of the noise.
        if r.held_mean > 2.0 * r.held_alone && r.held_mean > 0.001 {
            sums[0].1.push(r.stopped / r.held_mean);
            sums[1].1.push(r.stopped / r.held_max);
        }
        if 1.0 - r.paired.0 > r.paired.1 {
            sums[2].1.push(r.stop_cost / (1.0 - r.paired.0));
        }
    }
    for (what, mut v) in sums {
        if v.is_empty() {
            println!("median {what}: not meaningful in any run (within the noise)");
            continue;
        }
        v.sort_by(f64::total_cmp);
        println!(
            "median {what}: {:.2} ({} of {runs} runs; range {:.2} to {:.2})",
            v[v.len() / 2],
            v.len(),
            v[0],
            v[v.len() - 1]
        );
    }
    Ok(())
}

/// What one run measured; pairs are (during over alone, the alone phases' difference over
/// their mean).
struct Run {
    seconds: f64,
    samples: u64,
    probes: u64,
    stopped: f64,
    stop_cost: f64,
    overhead: f64,
    threads: usize,
    held_max: f64,
    held_mean: f64,
    /// What the schedstat of the threads said they were stopped alone (the mean of both
    /// phases' absolute values): the measure's noise.
    held_alone: f64,
    /// The threads' summed CPU seconds and seconds waiting for a CPU per wall second: during,
    /// alone.
    run_share: (f64, f64),
    wait_share: (f64, f64),
    paired: (f64, f64),
    wall: (f64, f64),
    runnable: (f64, f64),
    cpu: (f64, f64),
}

/// A program's progress lines: its clock, its count, its CPU seconds.
type Progress = Arc<Mutex<Vec<(f64, u64, f64)>>>;

/// Every thread's `schedstat` at one time: its id, on a CPU and waiting for one (ns).
type Reading = (f64, Vec<(i32, u64, u64)>);

/// A program's `schedstat` readings, every 50 ms.
type Sched = Arc<Mutex<Vec<Reading>>>;

/// One program under the bench.
struct Prog {
    child: Child,
    progress: Progress,
    reader: Option<JoinHandle<()>>,
    sched: Sched,
}

impl Drop for Prog {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        if let Some(r) = self.reader.take() {
            let _ = r.join();
        }
    }
}

/// What one program did over a window.
#[derive(Clone, Copy)]
struct Window {
    /// Work per wall second, per CPU second of the process.
    per_wall: f64,
    per_cpu: f64,
    /// Its threads' CPU seconds and seconds waiting for a CPU per wall second (summed).
    run: f64,
    wait: f64,
    /// The share of the wall time its threads were neither on a CPU nor waiting for one:
    /// the longest, the mean.
    held_max: f64,
    held_mean: f64,
    /// The mean as measured, not clamped at 0.
    held_signed: f64,
    threads: usize,
}

impl Window {
    /// Work per second on a CPU or waiting for one.
    fn per_runnable(&self) -> f64 {
        self.per_wall / (self.run + self.wait).max(1e-9)
    }
}

impl Prog {
    fn spawn(program: &[std::ffi::OsString]) -> Result<Prog> {
        let mut child = Command::new(&program[0])
            .args(&program[1..])
            .stdout(Stdio::piped())
            .spawn()
            .context("starting the program")?;
        let out = child.stdout.take();
        let mut p = Prog {
            child,
            progress: Arc::default(),
            reader: None,
            sched: Arc::default(),
        };
        let Some(out) = out else {
            bail!("the program's output is not piped");
        };
        let s = p.progress.clone();
        p.reader = Some(std::thread::spawn(move || {
            for line in BufReader::new(out).lines() {
                let Ok(line) = line else { break };
                let w: Vec<&str> = line.split_whitespace().collect();
                if let [t, n, cpu] = w[..] {
                    if let (Ok(t), Ok(n), Ok(cpu)) = (t.parse(), n.parse(), cpu.parse()) {
                        s.lock().expect("progress").push((t, n, cpu));
                    }
                }
            }
        }));
        Ok(p)
    }

    /// What it did over `a..b`.
    fn window(&self, a: f64, b: f64) -> Result<Window> {
        let p = self.progress.lock().expect("progress");
        let inside: Vec<&(f64, u64, f64)> =
            p.iter().filter(|(t, _, _)| *t >= a && *t <= b).collect();
        let (Some(first), Some(last)) = (inside.first(), inside.last()) else {
            bail!("the program printed no progress in {a:.1}..{b:.1}");
        };
        let work = (last.1 - first.1) as f64;
        let per_wall = work / (last.0 - first.0).max(1e-9);
        let per_cpu = work / (last.2 - first.2).max(1e-9);
        let s = self.sched.lock().expect("sched");
        let inside: Vec<&Reading> = s.iter().filter(|(t, _)| *t >= a && *t <= b).collect();
        let (Some(first), Some(last)) = (inside.first(), inside.last()) else {
            bail!("no schedstat read in {a:.1}..{b:.1}");
        };
        let wall = (last.0 - first.0).max(1e-9);
        let (mut run, mut wait, mut held) = (0.0, 0.0, Vec::new());
        for &(tid, r1, w1) in &last.1 {
            let Some(&(_, r0, w0)) = first.1.iter().find(|(t, _, _)| *t == tid) else {
                continue;
            };
            let (r, w) = ((r1 - r0) as f64 / 1e9, (w1 - w0) as f64 / 1e9);
            run += r / wall;
            wait += w / wall;
            held.push((wall - r - w) / wall);
        }
        if held.is_empty() {
            bail!("no thread's schedstat in {a:.1}..{b:.1}");
        }
        Ok(Window {
            per_wall,
            per_cpu,
            run,
            wait,
            held_max: held.iter().copied().fold(0.0, f64::max),
            held_mean: (held.iter().sum::<f64>() / held.len() as f64).max(0.0),
            held_signed: held.iter().sum::<f64>() / held.len() as f64,
            threads: held.len(),
        })
    }
}

/// Every thread of `pid` with its time on a CPU and waiting for one (ns).
fn schedstat(pid: u32) -> Vec<(i32, u64, u64)> {
    let Ok(dir) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return Vec::new();
    };
    dir.filter_map(|e| {
        let tid: i32 = e.ok()?.file_name().to_str()?.parse().ok()?;
        let s = std::fs::read_to_string(format!("/proc/{pid}/task/{tid}/schedstat")).ok()?;
        let mut it = s.split_whitespace().map(|x| x.parse::<u64>().ok());
        Some((tid, it.next()??, it.next()??))
    })
    .collect()
}

/// The mean of `during / alone` over the alone phases before and after, and how much those
/// differ over their mean.
fn over(during: f64, before: f64, after: f64) -> (f64, f64) {
    let base = (before + after) / 2.0;
    (during / base, (before - after).abs() / base)
}

/// Runs `consult` on process `pid` with `--watch`, and returns its result and when (on our
/// clock) the search began: each line `--watch` writes says how long into the search it
/// was written, and the earliest of its arrival less that is the start.
fn search(pid: u32, cost: f64, seconds: f64) -> Result<(serde_json::Value, f64)> {
    let mut child = Command::new(Gsh::binary())
        .args(["--json", "-p", &pid.to_string(), "-c"])
        .arg(format!(
            "consult --for {seconds} --cost {cost} --threshold CPUBound=1 --watch"
        ))
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .env("NO_COLOR", "1")
        .spawn()
        .context("starting gsh")?;
    let (Some(mut out), Some(err)) = (child.stdout.take(), child.stderr.take()) else {
        let _ = child.kill();
        let _ = child.wait();
        bail!("gsh's output is not piped");
    };
    let stdout = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = std::io::Read::read_to_string(&mut out, &mut s);
        s
    });
    let mut began = f64::INFINITY;
    let mut said = String::new();
    for line in BufReader::new(err).lines() {
        let Ok(line) = line else { break };
        let at = now();
        let into = line
            .strip_prefix("[consult")
            .and_then(|l| l.split_once(" s]"))
            .and_then(|(n, _)| n.trim().parse::<f64>().ok());
        match into {
            Some(s) => began = began.min(at - s),
            None => {
                said.push_str(&line);
                said.push('\n');
            }
        }
    }
    let status = child.wait().context("waiting for gsh")?;
    let stdout = stdout.join().unwrap_or_default();
    if !status.success() {
        bail!("gsh failed ({status}):\n{stdout}\n{said}");
    }
    if !began.is_finite() {
        bail!("consult --watch said nothing:\n{said}");
    }
    let r = stdout
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter_map(|mut v| v.get_mut("result").map(serde_json::Value::take))
        .next_back()
        .with_context(|| format!("consult printed no result:\n{stdout}\n{said}"))?;
    Ok((r, began))
}

/// One program and its twin throughout: alone, then `runs` times a search and alone again.
fn bench(program: &[std::ffi::OsString], cost: f64, seconds: f64, runs: usize) -> Result<Vec<Run>> {
    let progs = [Prog::spawn(program)?, Prog::spawn(program)?];
    let pid = progs[0].child.id();
    let stop = Arc::new(AtomicBool::new(false));
    let sampler = {
        let targets: Vec<(u32, Sched)> = progs
            .iter()
            .map(|p| (p.child.id(), p.sched.clone()))
            .collect();
        let stop = stop.clone();
        std::thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                for (pid, sched) in &targets {
                    let t = now();
                    sched.lock().expect("sched").push((t, schedstat(*pid)));
                }
                std::thread::sleep(Duration::from_millis(50));
            }
        })
    };
    let result = (|| -> Result<Vec<Run>> {
        std::thread::sleep(Duration::from_millis(500));
        let both = |a: f64, b: f64| -> Result<(Window, Window)> {
            Ok((progs[0].window(a, b)?, progs[1].window(a, b)?))
        };
        let alone = || -> Result<(Window, Window)> {
            let t0 = now();
            std::thread::sleep(ALONE);
            both(t0, now())
        };
        let mut before = alone()?;
        let mut out = Vec::new();
        for _ in 0..runs {
            let (r, began) = search(pid, cost, seconds)?;
            let after = alone()?;
            let probes = r["probes"]["inserted"].as_u64().unwrap_or(0);
            if probes > 0 {
                bail!("the search inserted {probes} probes: it was to take stack samples only");
            }
            // Over the search alone: gsh's attach (the process held while it opens the
            // modules) comes before, its detach after, and the start is known only to within
            // the latency of `--watch`'s lines, which shifts the window late: it is trimmed
            // by a tenth of a second before and a fifth after.
            let secs = r["seconds"].as_f64().unwrap_or(0.0);
            if secs < 1.0 {
                bail!("the search ran {secs:.2} s: too short to measure");
            }
            let (p, t) = both(began + 0.1, began + secs - 0.2)?;
            let f = |x: &serde_json::Value| x.as_f64().unwrap_or(f64::NAN);
            let paired = |w: (Window, Window)| w.0.per_wall / w.1.per_wall;
            out.push(Run {
                seconds: secs,
                samples: r["stack_samples"].as_u64().unwrap_or(0),
                probes,
                stopped: f(&r["stopped"]),
                stop_cost: f(&r["stop_cost"]),
                overhead: f(&r["overhead"]),
                threads: p.threads,
                held_max: p.held_max,
                held_mean: p.held_mean,
                held_alone: (before.0.held_signed.abs() + after.0.held_signed.abs()) / 2.0,
                run_share: (p.run, (before.0.run + after.0.run) / 2.0),
                wait_share: (p.wait, (before.0.wait + after.0.wait) / 2.0),
                paired: over(paired((p, t)), paired(before), paired(after)),
                wall: over(p.per_wall, before.0.per_wall, after.0.per_wall),
                runnable: over(
                    p.per_runnable(),
                    before.0.per_runnable(),
                    after.0.per_runnable(),
                ),
                cpu: over(p.per_cpu, before.0.per_cpu, after.0.per_cpu),
            });
            before = after;
        }
        Ok(out)
    })();
    stop.store(true, Ordering::Relaxed);
    let _ = sampler.join();
    drop(progs);
    result
}
