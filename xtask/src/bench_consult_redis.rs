//! `bench-consult --redis [--runs N] [--cost PERCENT] [--for SECONDS] [--clients N] [--no-pin]
//! [--search COMMANDS --window SECONDS]`: whether the overhead `consult` reports on a real server agrees with how much it slowed the server,
//! by the server's own progress, and whether both stay under `--cost` (#17). Two
//! redis-servers (Debian's, installed when missing) run side by side, each under the same
//! closed-loop load of ours: `--clients` connections (20, as `redis-benchmark -c 20`), driven
//! in lockstep rounds by two threads per server, each connection sending `SET` then `GET` of
//! the same key and checking every answer (a wrong one is counted, and fails the bench). The
//! operations each server completes are read every 50 ms, with its threads' CPU time (their
//! `schedstat`). One server is searched (`gsh --json -p PID -c 'consult --for SECONDS [--cost
//! PERCENT]'`), the other, its twin, never is: the bench alternates phases of 5 s alone with
//! searches, ending alone (`runs` searches, `runs + 1` alone phases), and compares each
//! search's operations per second, over the search's own seconds, with the mean of the alone
//! phases on both sides of it, in the same run; and the searched server's rate over its
//! twin's likewise, which cancels the machine's other load (it slows both alike), though not
//! gsh's own CPU time where some of it falls on the twin's CPU. Beside them,
//! what consult estimated and its parts (its stops, of which gsh's competition for the CPUs,
//! and its probes), gsh's CPU, the server's operations per second of its own CPU time (what
//! the probes cost shows there; the stops and the competition take CPU time from it instead),
//! and the first finding. After each detach the server must map nothing of gsh's (runtime,
//! arena, pools) and its text must be its file's. Without `--cost` the search runs at consult's
//! default. `--search COMMANDS --window SECONDS` runs other gsh commands in place of each
//! search, measured over the last SECONDS before gsh exits, or over a consult's own seconds
//! when the last command is one that ran fewer (an A/A check of the bench, or a search of
//! other arguments). Build it and gsh with `--release`.
//!
//! Each server and its load's threads are pinned to a CPU of their own (`--no-pin` leaves them
//! to the scheduler; gsh is never pinned). Unpinned, the rates jump between the scheduler's
//! placements from phase to phase (steady within a phase, to 1%): alone phases on either side
//! of a search differed by up to 69% (1.3% to 69% over 8 pairs), and the server's rate over
//! its twin's by up to 70%. Pinned, they differ by 0.0% to 4.8%. Pinned, the server cannot move
//! away from a CPU gsh runs on: the figures are for that placement.
//!
//! What it showed (2-core VM, load 4 to 17 with the bench's own threads, redis 7, 20
//! connections, ~82,000 operations per second alone): the search ends after 5.7 to 6.3 s
//! (`--for 30`), with 12 loop timers in and out and ~390 stack samples; at the default `--cost
//! 5` (15 runs in 5 batches) the server's throughput fell 6.1% to 15.6% (median 11.4%) against
//! the alone phases while consult estimated 5.0% to 6.2% (over --cost in 14 of 15 runs):
//! estimate / slowdown 0.35 to 0.95, median 0.49. `--cost 20` (12 runs) ran the same search:
//! 8.7% to 15.9% (median 12.4%) against 5.1% to 6.2%, 0.39 to 0.66, median 0.44. The A/A check
//! (`--search 'set attached-mode traced; continue &; sleep 6' --window 6`) read -0.3% and
//! 1.9%. Where it went: the probes cost nothing measurable (0.02% by consult's count), and the
//! stops held the server 0.1% of the time. The server did -0.1% to 5.2% less work per CPU
//! second (median 3.1% over 27 runs; its background threads, woken by each stop, ran 0.003
//! CPUs: not that) and ran 4.4% to 10.9% less (CPU seconds per wall second, 15 runs), where
//! consult's stops' estimate, nearly all of it gsh's competition, was 0.51 to 1.30 of that.
//! gsh used 0.11 to 0.13 CPUs, and 0.05 to 0.13 of them came out of the searched server's CPU
//! (what it and its load ran less), 0.00 to 0.08 out of the twin's: gsh's threads run mostly
//! where the server they stop runs, not spread over the machine in proportion to what runs
//! there, as the competition's estimate assumes (`sample::Competition::took`: the program's
//! share of the machine's busy time, about 0.28 here, where its share of its own CPU was
//! 0.53); the runs where more of gsh's time fell on the twin's CPU slowed the server
//! least. Unpinned (`--no-pin`, 3 runs, alone phases 12% to 27% apart), 10.0% to 13.8% against
//! an estimate of 6.1% to 7.3%, and of gsh's 0.14 CPUs (median) the server and its load ran
//! 0.106 less, the twin and its load 0.033. A second unpinned batch (6 runs, load 9 to 14) had alone phases
//! 17% to 44% apart and slowdowns of -23% to 18%: no reading at all, but for the work per CPU
//! second, which no placement moves: -1.4% to 3.9% less, median 3.2%, as pinned.
//!
//! Two checks of that, same machine (load 4 to 11), 3 runs each. gsh pinned to the twin's CPU
//! (`GSH_BIN` a script running `taskset -c 1 gsh`): the searched server lost 0.85% to 1.29% of
//! its running time and the twin 15%; the server's throughput fell 4.3% to 5.9%, consult
//! estimated 6.5% to 6.7% (all of it competition, which fell on the twin). So the less work
//! per CPU second is not gsh's sharing the server's CPU (its caches): it was 3.1% to 4.7%
//! there. Nor the timers: a search that inserts none (`--search 'consult --for 10
//! --threshold CPUBound=1' --window 10`, ~410 stack samples in 6.1 s, gsh 0.06 CPUs) cost 2.4%
//! to 3.4% of the work per CPU second and 2.6% to 4.8% of the running time, throughput 5.9% to
//! 7.1%, against an estimate of 2.9% to 3.3%. The stops cost the server's main thread that
//! much of its work per CPU second (~70 a second, ~0.2 ms of its CPU each), and consult's
//! estimate counts none of it: its stops' share is all competition (the main thread's
//! voluntary context switches rose from ~200 to 500 to 1,100 a second; its kernel share of
//! its CPU time stayed ~0.8). Every answer was right (6.1 million a batch) and every detach
//! left nothing of gsh's mapped.
//!
//! Priorities, alternated with the build before (3 runs a batch, load 2 to 26, other builds
//! running). With consult's samplers and analyses at nice 19, throughput fell 3.17%, 5.70%
//! and 3.92% (medians of three batches) against 8.74% and 10.14%; the server ran 0.6% less
//! against 5.8% and 7.5%; gsh used 0.03 CPUs against 0.08 to 0.09, its samplers getting few
//! turns (13 stack samples a second against 60 to 80), and each search ran its whole `--for
//! 30` with 1 to 10 timers against 12, naming the same path. A saturated machine starved such
//! samplers (two consult tests failed under two extra CPU hogs). The analyses alone at nice
//! 19: 9.12% and 9.76% against 7.43% to 8.90% (a third run read 24.7% beside a twin that
//! slowed 25.2%), and the suite's `planted smallio` search, every experiment judged by 5.6
//! s, ended only at 28 s (most likely waiting for libc's analysis). Samplers at nice 10: 6.80% against 7.23%. None of these priorities was kept.
//! The server's work per CPU second fell 2% to 5.6% in every arrangement (the twin's
//! slowdown, -1% to 7% in the same runs, is the noise). Sampling it with `perf record -F 70 --call-graph dwarf -p PID` in place of gsh
//! (a script as `GSH_BIN`), no stop at all, cost 2.3% to 3.6% of the work per CPU second, and
//! at `-F 5` still 2.0% to 2.5%: a per-task perf event costs at every context switch, not per
//! sample. Attached with nothing inserted (`--search 'set attached-mode traced; continue &;
//! sleep 10' --window 10`): -0.02%, 0.31%, 1.85%.
//!
//! gsh kept off the server's CPU (consult's own doing since, for a program pinned to some
//! CPUs: `consult::cpus::keep_off`), alternated with the build before (3 runs a batch, load 2
//! to 13, a helper's builds in two of them): throughput fell 2.92%, 3.44% and 5.53% (medians of
//! three batches; a fourth, beside a build of ours, 22.8% with alone phases 30% to 62% apart)
//! against 9.52%, 8.03%, 10.87% and 11.81%; the server's running time lost 0.30% to 2.30%
//! against 5.53% to 6.73%; its work per CPU second 2.01% to 3.32% against 1.08% to 7.68%. Each
//! search took 5.8 s against 10 to 13, its 0.13 CPUs on the twin's CPU (the twin slowed 11% to
//! 13%). consult's estimate read 0.02% (its probes'): the competition it counted is gone, and
//! what is left, the server's work per CPU second, `/proc` does not show. What is left is the
//! stops': a search of stops alone (`--search 'consult --for 10 --threshold CPUBound=1'
//! --window 10`, ~66 a second, each holding the server ~25 us) slowed it 3.26% to 5.13%
//! (median 3.59%; work per CPU second 2.2% to 5.3%, running time 0.4%), about 0.5 ms of its
//! throughput a stop; a burner of 0.11 to 0.13 CPUs on the twin's CPU in gsh's place (a
//! `GSH_BIN` script, `--window 6`) slowed it -2.1% to 2.2% (the twin 11% to 14%), so it is not
//! gsh's CPU time wherever it runs; and a `SCHED_IDLE` spinner on each CPU throughout (no vCPU
//! halts while a thread is held) left the whole search's 5.35% to 5.81%, so it is not the VM's
//! idle wake-ups either. Counting the time the probes' changes hold the whole program
//! (`Changes::held`, ~37 ms a search) the estimate read 0.48% to 1.05% beside 3.0% to 4.9%
//! (load 2 to 8). Stops alone, ~66 a second with `/proc` read every 5 ms: 2.61% and 2.66%
//! (medians of two batches); a build stopping at most 10 times a second and reading `/proc`
//! every 50 ms: 1.14% and 0.90%, alternated with them (load 7 to 15). Leaving alone the
//! threads that have not run since their last stop changed nothing here (the full search:
//! 4.00% and 3.04% against 4.11% and 3.47%; the server's main thread always runs).
//!
//! Walking threads asleep in a call without a stop (the main thread in `epoll_wait`, whose
//! stop returned `EINTR` to the server): ~120 of each search's thread samples (25 in a search
//! of stops alone, whose main thread is seldom asleep when sampled) beside ~1,450 given
//! again; alternated with the build before, throughput fell 2.86%, 3.10% and 2.39% against
//! 3.68%, 3.24% and 3.10% (medians of 3 runs, load 1 to 8), stops alone 1.16% and 1.71%
//! against 1.12% and 2.49%: within the noise. A script reading the server's `/proc` files as
//! the search does, every 5 ms, in gsh's place: -0.01% and -0.27% (one that only sleeps:
//! 0.28%, -0.12%). With the turns counting the server's read and write calls and the stops
//! held from the ask: 3.55%, 2.98%, 3.81%, 4.21% against estimates of 0.58% to 0.92% (0.15 to
//! 0.26 of the slowdown; 0.46 and 0.50 in single runs where the turns agreed on a loss).

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::process::Child;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use anyhow::{bail, Context as _, Result};
use gsh_tests::{json_stream, Gsh};

use crate::bench_consult::children_cpu;
use crate::bench_stall::{start_redis_on, ANSWER_DEADLINE};
use crate::progress::ratio;

/// The searched server's port, and its twin's: not bench-stall's and soak-redis' port, so
/// that they may run at the same time.
const PORTS: [u16; 2] = [16401, 16402];

/// How long each phase without the search lasts.
const ALONE: Duration = Duration::from_secs(5);

/// How often the servers' progress is read.
const EVERY: Duration = Duration::from_millis(50);

/// Threads driving each server's connections.
const LOAD_THREADS: usize = 2;

/// Wrong answers kept to show, per load.
const SHOWN: usize = 5;

const USAGE: &str = "bench-consult --redis [--runs N] [--cost PERCENT] [--for SECONDS] \
                     [--clients N] [--no-pin] [--search COMMANDS --window SECONDS]";

pub fn run(args: &[String]) -> Result<()> {
    let (mut runs, mut cost, mut seconds, mut clients) = (3usize, None, 30.0f64, 20usize);
    let (mut pinned, mut commands, mut window) = (true, None, None);
    let mut it = args.iter();
    while let Some(a) = it.next() {
        match a.as_str() {
            "--no-pin" => {
                pinned = false;
                continue;
            }
            "--search" => {
                commands = Some(it.next().context("--search needs gsh commands")?.clone());
                continue;
            }
            _ => {}
        }
        let mut value = |what: &str| crate::number_arg(&mut it, what);
        match a.as_str() {
            "--runs" => runs = value("--runs")? as usize,
            "--cost" => cost = Some(value("--cost")?),
            "--for" => seconds = value("--for")?,
            "--clients" => clients = value("--clients")? as usize,
            "--window" => window = Some(value("--window")?),
            other => bail!("unexpected argument `{other}`; usage: {USAGE}"),
        }
    }
    if runs == 0
        || clients < LOAD_THREADS
        || seconds <= 0.0
        || cost.is_some_and(|c| !(c > 0.0 && c <= 100.0))
        || commands.is_some() != window.is_some()
        || window.is_some_and(|w| w <= 0.0)
    {
        bail!(
            "usage: {USAGE} (at least {LOAD_THREADS} clients; --search and --window go \
             together)"
        );
    }
    let commands = commands.unwrap_or_else(|| match cost {
        Some(c) => format!("consult --for {seconds} --cost {c}"),
        None => format!("consult --for {seconds}"),
    });
    // consult's default --cost, against which the figures are read without one.
    let limit = cost.unwrap_or(5.0) / 100.0;
    println!(
        "`{commands}` on redis-server under {clients} connections of SET/GET pairs, a twin \
         server beside it under the same load, never searched: operations per second during \
         each search over the alone phases before and after it, same run"
    );
    if let Some(w) = window {
        println!("measured over the last {w} s before gsh exits");
    }
    let cpus = std::thread::available_parallelism().map_or(1, usize::from);
    let pinned = pinned && cpus >= 2;
    if pinned {
        println!(
            "each server and its load's threads on a CPU of their own (CPUs 0 and 1; gsh and \
             the rest anywhere); --no-pin lets the scheduler place them"
        );
    }
    let mut servers = Servers::start(clients, pinned)?;
    let result = bench(&mut servers, &commands, window, runs);
    let finished = servers.finish();
    let runs_out = result?;
    let (answers, wrong, shown) = finished?;
    report(&runs_out, limit);
    println!("answers: {answers} checked, {wrong} wrong (the searched server's and its twin's)");
    let mut failures = Vec::new();
    if wrong != 0 {
        failures.push(format!("{wrong} wrong answers: {}", shown.join("; ")));
    }
    for (i, r) in runs_out.iter().enumerate() {
        if let Err(e) = &r.left {
            failures.push(format!("run {}: after the detach, {e}", i + 1));
        }
    }
    if !failures.is_empty() {
        bail!(failures.join("\n"));
    }
    Ok(())
}

/// What one run measured.
struct Run {
    /// The searched server's progress and its twin's, alone before the search, after it, and
    /// during it.
    before: [Rates; 2],
    after: [Rates; 2],
    during: [Rates; 2],
    /// What consult reported: the estimate and its parts.
    overhead: f64,
    stop_cost: f64,
    competed: f64,
    probe_cost: f64,
    stopped: f64,
    /// The share of one CPU gsh used during the search, by its own count.
    search_cpu: f64,
    stack_samples: u64,
    /// Thread samples taken without a stop: walked asleep in a call, and given again.
    unstopped: (u64, u64),
    timers: u64,
    /// Seconds the search ran.
    seconds: f64,
    /// gsh's CPU seconds (every thread, from its start to its exit) and its wall seconds.
    gsh_cpu: (f64, f64),
    /// The first finding, as consult's report lists it.
    finding: String,
    /// After the detach: nothing of gsh's mapped and the text the file's, or what was left.
    left: Result<(), String>,
}

/// The alone phases' mean, and how much they differ over it (the noise).
fn mean_noise(a: f64, b: f64) -> (f64, f64) {
    let m = (a + b) / 2.0;
    (m, (a - b).abs() / m.max(1e-12))
}

fn report(runs: &[Run], limit: f64) {
    let under = |x: f64| if x < limit { "under" } else { "OVER" };
    let mut med: [Vec<f64>; 13] = Default::default();
    for (i, r) in runs.iter().enumerate() {
        let run = i + 1;
        let (b, a, d) = (&r.before, &r.after, &r.during);
        let (alone, noise) = mean_noise(b[0].ops, a[0].ops);
        let slowdown = 1.0 - d[0].ops / alone;
        let (twin_alone, twin_noise) = mean_noise(b[1].ops, a[1].ops);
        let twin_slowdown = 1.0 - d[1].ops / twin_alone;
        let paired_alone = mean_noise(b[0].ops / b[1].ops, a[0].ops / a[1].ops).0;
        let paired_slowdown = 1.0 - (d[0].ops / d[1].ops) / paired_alone;
        let cpu_slowdown = 1.0 - d[0].per_cpu / mean_noise(b[0].per_cpu, a[0].per_cpu).0;
        let share = mean_noise(b[0].share, a[0].share).0;
        // The share of its running time the server lost: what consult's stops (gsh's
        // competition among them) estimate; the probes show in the work per CPU second.
        let run_lost = 1.0 - d[0].share / share;
        // What each server and its load ran less during the search than alone, in CPUs:
        // where gsh's CPU time (and the stops) came out of.
        let lost = [0, 1].map(|i| mean_noise(b[i].group, a[i].group).0 - d[i].group);
        println!(
            "run {run}: {:.0} ops/s alone ({:.0} before, {:.0} after: they differ by {:.1}%), \
             {:.0} during the search's {:.1} s: a slowdown of {:.2}%; per second of the \
             server's CPU {:.2}%; its running time (CPU seconds per wall second) {:.3} alone, \
             {:.3} during, {:.2}% lost (its background threads' {:.4} alone, {:.4} during); \
             the twin slowed {:.2}% (its alone phases differ by {:.1}%; gsh runs on its CPU \
             too), the server against it {:.2}%",
            alone,
            b[0].ops,
            a[0].ops,
            noise * 100.0,
            d[0].ops,
            r.seconds,
            slowdown * 100.0,
            cpu_slowdown * 100.0,
            share,
            d[0].share,
            run_lost * 100.0,
            mean_noise(b[0].others, a[0].others).0,
            d[0].others,
            twin_slowdown * 100.0,
            twin_noise * 100.0,
            paired_slowdown * 100.0
        );
        // Other commands than consult (--search) estimate nothing.
        if !r.overhead.is_nan() {
            println!(
                "run {run}: consult's estimate {:.2}% (stops {:.2}%, of which gsh's competition \
             {:.2}%; probes {:.2}%, {} timers; stopped {:.2}% of the time, {} samples, of the \
             threads' {} walked asleep and {} given again without a stop; gsh used \
             {:.1}% of a CPU by its count); estimate / slowdown {}, / the slowdown against the \
             twin {}; its stops' estimate / running time lost {}; under --cost {:.0}%: the \
             estimate {}, the slowdown {}",
                r.overhead * 100.0,
                r.stop_cost * 100.0,
                r.competed * 100.0,
                r.probe_cost * 100.0,
                r.timers,
                r.stopped * 100.0,
                r.stack_samples,
                r.unstopped.0,
                r.unstopped.1,
                r.search_cpu * 100.0,
                ratio(r.overhead, slowdown),
                ratio(r.overhead, paired_slowdown),
                ratio(r.stop_cost, run_lost),
                limit * 100.0,
                under(r.overhead),
                under(slowdown)
            );
        }
        println!(
            "run {run}: gsh used {:.2} CPU seconds over its {:.1} s ({:.2} CPUs); the server \
             and its load ran {:.3} CPU seconds per wall second less than alone, the twin and \
             its load {:.3} less; first finding: {}; after the detach: {}",
            r.gsh_cpu.0,
            r.gsh_cpu.1,
            r.gsh_cpu.0 / r.gsh_cpu.1.max(1e-9),
            lost[0],
            lost[1],
            r.finding,
            match &r.left {
                Ok(()) => "nothing of gsh's mapped, the text its file's".to_owned(),
                Err(e) => format!("NOT CLEAN: {e}"),
            }
        );
        for (v, x) in med.iter_mut().zip([
            alone,
            d[0].ops,
            slowdown,
            cpu_slowdown,
            twin_slowdown,
            paired_slowdown,
            r.overhead,
            r.competed,
            r.probe_cost,
            r.gsh_cpu.0 / r.gsh_cpu.1.max(1e-9),
            lost[0],
            lost[1],
            run_lost,
        ]) {
            v.push(x);
        }
    }
    let median = |v: &mut Vec<f64>| {
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    let [alone, during, slow, cpu, twin, paired, est, comp, probes, gsh, lost, twin_lost, run_lost] =
        med.each_mut();
    let (slow, paired, est) = (median(slow), median(paired), median(est));
    println!(
        "median of {} runs: {:.0} ops/s alone, {:.0} during; slowdown {:.2}% (per server CPU \
         second {:.2}%, running time lost {:.2}%; the twin's {:.2}%, against it {:.2}%); consult's estimate {:.2}% \
         (competition {:.2}%, probes {:.2}%); estimate / slowdown {}, / against the twin {}; \
         gsh {:.2} CPUs, the server and its load {:.3} CPUs less, the twin and its load \
         {:.3} less",
        runs.len(),
        median(alone),
        median(during),
        slow * 100.0,
        median(cpu) * 100.0,
        median(run_lost) * 100.0,
        median(twin) * 100.0,
        paired * 100.0,
        est * 100.0,
        median(comp) * 100.0,
        median(probes) * 100.0,
        ratio(est, slow),
        ratio(est, paired),
        median(gsh),
        median(lost),
        median(twin_lost)
    );
}

/// The two servers, their loads, and the progress read from them every [`EVERY`].
struct Servers {
    /// The searched server, then its twin.
    children: Vec<Child>,
    loads: Vec<Load>,
    samples: Arc<Mutex<Vec<Sample>>>,
    stop: Arc<AtomicBool>,
    sampler: Option<JoinHandle<()>>,
}

/// One reading of both servers: when, their operations completed, their threads' CPU
/// nanoseconds.
#[derive(Clone, Copy)]
struct Sample {
    t: Instant,
    ops: [u64; 2],
    cpu: [u64; 2],
    /// Of those, its main thread's (redis' event loop, which does the work).
    main: [u64; 2],
    /// The CPU nanoseconds of each server's load threads.
    clients: [u64; 2],
}

/// One server's progress over an interval.
#[derive(Clone, Copy)]
struct Rates {
    /// Operations per wall second.
    ops: f64,
    /// Operations per second of the server's CPU time.
    per_cpu: f64,
    /// The server's CPU seconds per wall second.
    share: f64,
    /// Its other threads' (redis' background threads, idle under this load), CPU seconds
    /// per wall second.
    others: f64,
    /// The server's and its load threads' CPU seconds per wall second: pinned, how much of
    /// their CPU they had.
    group: f64,
}

impl Servers {
    /// With `pinned`, each server and its load's threads run on a CPU of their own.
    fn start(clients: usize, pinned: bool) -> Result<Servers> {
        let mut servers = Servers {
            children: Vec::new(),
            loads: Vec::new(),
            samples: Arc::default(),
            stop: Arc::default(),
            sampler: None,
        };
        // Dropped on an error: the servers started so far are killed.
        for (i, port) in PORTS.into_iter().enumerate() {
            servers.children.push(start_redis_on(port)?);
            let cpu = pinned.then_some(i);
            if let Some(cpu) = cpu {
                let pid = servers.children[i].id();
                // Its threads are all started once it answers (redis starts its background
                // threads before it listens).
                for t in std::fs::read_dir(format!("/proc/{pid}/task"))?.flatten() {
                    let tid = t.file_name().to_string_lossy().parse::<i32>()?;
                    pin(tid, cpu)?;
                }
            }
            servers.loads.push(Load::start(port, clients, cpu)?);
        }
        let pids: Vec<u32> = servers.children.iter().map(Child::id).collect();
        let ops: Vec<Arc<AtomicU64>> = servers.loads.iter().map(|l| l.ops.clone()).collect();
        let tids: Vec<Arc<Mutex<Vec<i32>>>> =
            servers.loads.iter().map(|l| l.tids.clone()).collect();
        let me = std::process::id();
        let (samples, stop) = (servers.samples.clone(), servers.stop.clone());
        servers.sampler = Some(std::thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                let t = Instant::now();
                let o = [
                    ops[0].load(Ordering::Relaxed),
                    ops[1].load(Ordering::Relaxed),
                ];
                let clients = |i: usize| -> Option<u64> {
                    let tids = tids[i].lock().expect("tids");
                    tids.iter().map(|&t| thread_cpu_ns(me, t)).sum()
                };
                let main = |i: usize| thread_cpu_ns(pids[i], pids[i] as i32);
                if let (Some(a), Some(b), Some(ma), Some(mb), Some(ca), Some(cb)) = (
                    cpu_ns(pids[0]),
                    cpu_ns(pids[1]),
                    main(0),
                    main(1),
                    clients(0),
                    clients(1),
                ) {
                    samples.lock().expect("samples").push(Sample {
                        t,
                        ops: o,
                        cpu: [a, b],
                        main: [ma, mb],
                        clients: [ca, cb],
                    });
                }
                std::thread::sleep(EVERY);
            }
        }));
        Ok(servers)
    }

    fn pid(&self) -> u32 {
        self.children[0].id()
    }

    /// Fails when a load's thread ended (a server stopped answering) or a server exited.
    fn check(&mut self) -> Result<()> {
        for l in &mut self.loads {
            l.check()?;
        }
        for (c, port) in self.children.iter_mut().zip(PORTS) {
            if let Ok(Some(status)) = c.try_wait() {
                bail!("the redis-server on port {port} ended ({status})");
            }
        }
        Ok(())
    }

    /// Each server's progress over `from..to`.
    fn rates(&self, from: Instant, to: Instant) -> Result<[Rates; 2]> {
        let s = self.samples.lock().expect("samples");
        let inside: Vec<&Sample> = s.iter().filter(|x| x.t >= from && x.t <= to).collect();
        let (Some(a), Some(b)) = (inside.first(), inside.last()) else {
            bail!("no reading of the servers' progress in the window");
        };
        let wall = (b.t - a.t).as_secs_f64();
        if wall <= 0.0 {
            bail!("one reading of the servers' progress in the window");
        }
        Ok([0, 1].map(|i| {
            let ops = (b.ops[i] - a.ops[i]) as f64;
            let cpu = (b.cpu[i] - a.cpu[i]) as f64 / 1e9;
            let clients = (b.clients[i] - a.clients[i]) as f64 / 1e9;
            let main = (b.main[i] - a.main[i]) as f64 / 1e9;
            Rates {
                ops: ops / wall,
                per_cpu: ops / cpu.max(1e-9),
                share: cpu / wall,
                others: (cpu - main) / wall,
                group: (cpu + clients) / wall,
            }
        }))
    }

    /// Stops the loads and the servers: the answers checked, the wrong ones, and the first
    /// few of those.
    fn finish(mut self) -> Result<(u64, u64, Vec<String>)> {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(s) = self.sampler.take() {
            let _ = s.join();
        }
        let (mut answers, mut wrong, mut shown) = (0, 0, Vec::new());
        let mut failed = Ok(());
        for l in std::mem::take(&mut self.loads) {
            match l.finish() {
                Ok((n, w, s)) => {
                    answers += n;
                    wrong += w;
                    shown.extend(s);
                }
                Err(e) => failed = Err(e),
            }
        }
        failed.map(|()| (answers, wrong, shown))
    }
}

impl Drop for Servers {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        for c in &mut self.children {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// Lets thread `tid` (0: the calling thread) run on CPU `cpu` only.
fn pin(tid: i32, cpu: usize) -> Result<()> {
    // SAFETY: `set` is a zeroed cpu_set_t on this stack; CPU_SET writes one bit of it, within
    // it (`cpu` is below the CPUs the machine has, checked when pinning was chosen), and
    // sched_setaffinity reads it.
    let r = unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(cpu, &mut set);
        libc::sched_setaffinity(tid, std::mem::size_of::<libc::cpu_set_t>(), &set)
    };
    if r != 0 {
        bail!(
            "pinning thread {tid} to CPU {cpu}: {}",
            std::io::Error::last_os_error()
        );
    }
    Ok(())
}

/// The nanoseconds on a CPU of thread `tid` of process `pid` (its `schedstat`).
fn thread_cpu_ns(pid: u32, tid: i32) -> Option<u64> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/task/{tid}/schedstat")).ok()?;
    s.split_whitespace().next()?.parse().ok()
}

/// The summed nanoseconds on a CPU of process `pid`'s threads (their `schedstat`).
fn cpu_ns(pid: u32) -> Option<u64> {
    let mut sum = 0;
    for t in std::fs::read_dir(format!("/proc/{pid}/task"))
        .ok()?
        .flatten()
    {
        // A thread that ended meanwhile has no schedstat: its time is lost, not an error.
        if let Ok(s) = std::fs::read_to_string(t.path().join("schedstat")) {
            sum += s.split_whitespace().next()?.parse::<u64>().ok()?;
        }
    }
    Some(sum)
}

/// A closed-loop load on one server: [`LOAD_THREADS`] threads, each driving its share of the
/// connections in rounds (a request sent on every one, then every answer read and checked):
/// a connection sends `SET` of its key to a fresh value, then `GET` of it, which must answer
/// that value.
struct Load {
    stop: Arc<AtomicBool>,
    /// Answers received (right or wrong).
    ops: Arc<AtomicU64>,
    /// Its threads' ids, each added once the thread runs.
    tids: Arc<Mutex<Vec<i32>>>,
    wrong: Arc<Mutex<(u64, Vec<String>)>>,
    threads: Vec<JoinHandle<Result<()>>>,
    port: u16,
}

impl Load {
    fn start(port: u16, clients: usize, cpu: Option<usize>) -> Result<Load> {
        let mut load = Load {
            stop: Arc::default(),
            ops: Arc::default(),
            tids: Arc::default(),
            wrong: Arc::default(),
            threads: Vec::new(),
            port,
        };
        for t in 0..LOAD_THREADS {
            let n = clients / LOAD_THREADS + usize::from(t < clients % LOAD_THREADS);
            let mut conns = Vec::new();
            for _ in 0..n {
                let s = TcpStream::connect(("127.0.0.1", port))
                    .with_context(|| format!("connecting to redis on port {port}"))?;
                s.set_nodelay(true)?;
                // A server that stopped answering is an error, not a hang.
                s.set_read_timeout(Some(ANSWER_DEADLINE))?;
                conns.push((s.try_clone()?, BufReader::new(s)));
            }
            let (stop, ops, wrong) = (load.stop.clone(), load.ops.clone(), load.wrong.clone());
            let tids = load.tids.clone();
            load.threads.push(std::thread::spawn(move || {
                // SAFETY: gettid takes no arguments and cannot fail.
                tids.lock().expect("tids").push(unsafe { libc::gettid() });
                if let Some(cpu) = cpu {
                    pin(0, cpu)?;
                }
                drive(t, &mut conns, &stop, &ops, &wrong)
            }));
        }
        Ok(load)
    }

    /// Fails when a thread ended before it was told to.
    fn check(&mut self) -> Result<()> {
        if let Some(i) = self.threads.iter().position(JoinHandle::is_finished) {
            let t = self.threads.remove(i);
            let port = self.port;
            t.join()
                .map_err(|_| anyhow::anyhow!("a load thread of port {port} panicked"))?
                .with_context(|| format!("the load on port {port}"))?;
            bail!("a load thread of port {port} ended");
        }
        Ok(())
    }

    /// Stops it: the answers it received, the wrong ones, and the first few of those.
    fn finish(mut self) -> Result<(u64, u64, Vec<String>)> {
        self.stop.store(true, Ordering::Relaxed);
        for t in std::mem::take(&mut self.threads) {
            t.join()
                .map_err(|_| anyhow::anyhow!("a load thread panicked"))?
                .with_context(|| format!("the load on port {}", self.port))?;
        }
        let (n, shown) = std::mem::take(&mut *self.wrong.lock().expect("wrong"));
        Ok((self.ops.load(Ordering::Relaxed), n, shown))
    }
}

impl Drop for Load {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

/// One load thread: rounds over `conns` until `stop`. Round `r` sends, on connection `c`,
/// `SET` of key `(thread, c, r / 2 mod 1000)` to `v<r>` when `r` is even, and `GET` of the
/// same key, which must answer `v<r - 1>`, when it is odd.
fn drive(
    thread: usize,
    conns: &mut [(TcpStream, BufReader<TcpStream>)],
    stop: &AtomicBool,
    ops: &AtomicU64,
    wrong: &Mutex<(u64, Vec<String>)>,
) -> Result<()> {
    let mut line = Vec::new();
    let mut round: u64 = 0;
    while !stop.load(Ordering::Relaxed) {
        let set = round.is_multiple_of(2);
        let value = format!("v{}", round - u64::from(!set));
        for (c, (w, _)) in conns.iter_mut().enumerate() {
            let key = format!("gshbench:{thread}:{c}:{}", round / 2 % 1000);
            let request = if set {
                format!("SET {key} {value}\r\n")
            } else {
                format!("GET {key}\r\n")
            };
            w.write_all(request.as_bytes())?;
        }
        for (c, (_, r)) in conns.iter_mut().enumerate() {
            let answer = read_answer(r, &mut line)?;
            let want = if set { "+OK" } else { value.as_str() };
            if answer != want {
                let mut w = wrong.lock().expect("wrong");
                w.0 += 1;
                if w.1.len() < SHOWN {
                    let what = if set { "SET" } else { "GET" };
                    w.1.push(format!(
                        "{what} gshbench:{thread}:{c}:{} answered {answer:?}, not {want:?}",
                        round / 2 % 1000
                    ));
                }
            }
        }
        ops.fetch_add(conns.len() as u64, Ordering::Relaxed);
        round += 1;
    }
    Ok(())
}

/// One answer: a status or error line as it is (`+OK`, `-ERR ...`), a bulk string's value, or
/// `(nil)`.
fn read_answer(r: &mut BufReader<TcpStream>, line: &mut Vec<u8>) -> Result<String> {
    line.clear();
    r.read_until(b'\n', line)?;
    if !line.ends_with(b"\r\n") {
        bail!("redis closed the connection");
    }
    let text = String::from_utf8_lossy(&line[..line.len() - 2]).into_owned();
    let Some(len) = text.strip_prefix('$') else {
        return Ok(text);
    };
    let Ok(len) = len.parse::<usize>() else {
        return Ok("(nil)".into());
    };
    let mut value = vec![0u8; len + 2];
    r.read_exact(&mut value)?;
    value.truncate(len);
    Ok(String::from_utf8_lossy(&value).into_owned())
}

/// One server throughout, its twin beside it: alone, then `runs` times a search and alone
/// again.
/// `window`: with other commands than consult, the seconds before gsh exits over which they
/// are measured.
fn bench(
    servers: &mut Servers,
    commands: &str,
    window: Option<f64>,
    runs: usize,
) -> Result<Vec<Run>> {
    let pid = servers.pid();
    let exe = std::fs::read_link(format!("/proc/{pid}/exe"))?;
    // The loads' connections up and the servers warm before anything is measured.
    std::thread::sleep(Duration::from_millis(500));
    let alone = |servers: &mut Servers| -> Result<[Rates; 2]> {
        let t0 = Instant::now();
        std::thread::sleep(ALONE);
        servers.check()?;
        servers.rates(t0, Instant::now())
    };
    let mut before = alone(servers)?;
    let mut out = Vec::new();
    for _ in 0..runs {
        let t1 = Instant::now();
        let cpu_before = children_cpu();
        let o = Gsh::new()
            .args(["--json", "-p", &pid.to_string(), "-c", commands])
            .timeout(Duration::from_secs(300))
            .run();
        let t2 = Instant::now();
        // gsh was waited for: its CPU time (all its threads') is in its parent's children's.
        let gsh_cpu = children_cpu() - cpu_before;
        if !o.success() {
            bail!("gsh failed:\n{o}");
        }
        // Before the alone phase: what is left now is what the detach left.
        let left = gsh_tests::server::gsh_mappings(pid).and_then(|m| {
            if m.is_empty() {
                gsh_tests::server::text_matches_file(pid, &exe)
            } else {
                Err(format!("gsh's mappings left: {}", m.join(" | ")))
            }
        });
        servers.check()?;
        let after = alone(servers)?;
        let last = json_stream(&o)
            .pop()
            .and_then(|mut l| l.get_mut("result").map(serde_json::Value::take));
        let r = match window {
            Some(_) => last.unwrap_or_default(),
            None => last.context("consult printed no result")?,
        };
        // gsh's own start (opening the modules, attaching) is inside t1..t2 but before the
        // search; the search's seconds are the last part of it.
        let seconds = match (window, r["seconds"].as_f64()) {
            // A consult among other commands: its seconds, within the window.
            (Some(w), Some(s)) => s.min(w),
            (Some(w), None) => w,
            (None, s) => s.unwrap_or(0.0),
        };
        let from = t2
            .checked_sub(Duration::from_secs_f64(seconds))
            .unwrap_or(t1)
            .max(t1);
        let during = servers.rates(from, t2)?;
        let f = |k: &str| r[k].as_f64().unwrap_or(f64::NAN);
        out.push(Run {
            before,
            after,
            during,
            overhead: f("overhead"),
            stop_cost: f("stop_cost"),
            competed: f("competed"),
            probe_cost: r["probes"]["cost"].as_f64().unwrap_or(f64::NAN),
            stopped: f("stopped"),
            search_cpu: f("gsh_cpu"),
            stack_samples: r["stack_samples"].as_u64().unwrap_or(0),
            unstopped: (
                r["asleep"].as_u64().unwrap_or(0),
                r["reused"].as_u64().unwrap_or(0),
            ),
            timers: r["probes"]["inserted"].as_u64().unwrap_or(0),
            seconds,
            gsh_cpu: (gsh_cpu, (t2 - t1).as_secs_f64()),
            finding: first_finding(&r),
            left,
        });
        before = after;
    }
    Ok(out)
}

/// The first finding as consult's report lists it: hypothesis, fraction, focus.
fn first_finding(r: &serde_json::Value) -> String {
    let Some(f) = r["findings"].as_array().and_then(|v| v.first()) else {
        return "none".into();
    };
    let focus: Vec<&str> = f["focus"]
        .as_array()
        .map(|v| v.iter().filter_map(|x| x.as_str()).collect())
        .unwrap_or_default();
    let thread = f["thread"]
        .as_u64()
        .map_or(String::new(), |t| format!(" (thread {t})"));
    format!(
        "{} {:.2}  {}{thread}",
        f["hypothesis"].as_str().unwrap_or("?"),
        f["fraction"].as_f64().unwrap_or(f64::NAN),
        focus.join(" > ")
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::TcpListener;

    /// A server of one connection answering each request line with what `answer` makes of it.
    fn fake_server(answer: fn(&str) -> String) -> (u16, JoinHandle<()>) {
        let listener = TcpListener::bind(("127.0.0.1", 0)).expect("bind");
        let port = listener.local_addr().expect("address").port();
        let server = std::thread::spawn(move || {
            let (s, _) = listener.accept().expect("accept");
            let mut w = s.try_clone().expect("clone");
            for line in BufReader::new(s).lines() {
                let Ok(line) = line else { break };
                if w.write_all(answer(&line).as_bytes()).is_err() {
                    break;
                }
            }
        });
        (port, server)
    }

    fn connect(port: u16) -> (TcpStream, BufReader<TcpStream>) {
        let s = TcpStream::connect(("127.0.0.1", port)).expect("connect");
        (s.try_clone().expect("clone"), BufReader::new(s))
    }

    /// Each kind of answer is read whole, so the next one starts where it should: a status,
    /// a bulk string (an empty one too), nil, an error.
    #[test]
    fn answers_are_read_whole() {
        let (port, server) = fake_server(|line| match line {
            "A" => "+OK\r\n".into(),
            "B" => "$5\r\nv\r\nxy\r\n".into(),
            "C" => "$-1\r\n".into(),
            "D" => "$0\r\n\r\n".into(),
            _ => "-ERR unknown\r\n".into(),
        });
        let (mut w, mut r) = connect(port);
        w.write_all(b"A\r\nB\r\nC\r\nD\r\nE\r\n").expect("write");
        let mut line = Vec::new();
        let got: Vec<String> = (0..5)
            .map(|_| read_answer(&mut r, &mut line).expect("answer"))
            .collect();
        assert_eq!(got, ["+OK", "v\r\nxy", "(nil)", "", "-ERR unknown"]);
        drop((w, r));
        server.join().expect("server");
    }

    /// A `GET` answered with another value than the `SET` before it stored is counted wrong,
    /// and the load goes on.
    #[test]
    fn wrong_answers_are_counted() {
        let (port, server) = fake_server(|line| {
            if line.starts_with("SET ") {
                "+OK\r\n".into()
            } else {
                "$3\r\nold\r\n".into()
            }
        });
        let mut conns = vec![connect(port)];
        let (stop, ops, wrong) = (AtomicBool::new(false), AtomicU64::new(0), Mutex::default());
        std::thread::scope(|s| {
            let load = s.spawn(|| drive(0, &mut conns, &stop, &ops, &wrong));
            while ops.load(Ordering::Relaxed) < 10 {
                std::thread::sleep(Duration::from_millis(1));
            }
            stop.store(true, Ordering::Relaxed);
            load.join().expect("load").expect("the load ran");
        });
        let (n, shown) = &*wrong.lock().expect("wrong");
        // Every other answer is a GET's.
        assert_eq!(*n, ops.load(Ordering::Relaxed) / 2);
        assert_eq!(shown[0], "GET gshbench:0:0:0 answered \"old\", not \"v0\"");
        drop(conns);
        server.join().expect("server");
    }
}
