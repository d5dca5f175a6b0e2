//! `consult`: the automated bottleneck search (`engine::consult`) on the current process, or on
//! the program started for it. The search samples the process from outside; the program runs
//! throughout and runs on afterwards.

use std::time::Duration;

use anyhow::{anyhow, bail, Context as _, Result};
use engine::consult::{self, proclab::ProcLab, Focus, Hypothesis, Resource, Search, Settings};
use engine::process::State;

use super::{Args, Complete, Spec};
use crate::context::Context;
use crate::output::Output;
use crate::target;

/// `--for`'s default and largest value.
const DEFAULT_SECONDS: f64 = 60.0;
const MAX_SECONDS: f64 = 86_400.0;

pub const CONSULT: Spec = Spec {
    name: "consult",
    aliases: &[],
    usage: "[--for SECONDS] [--cost PERCENT] [--threshold NAME=FRACTION]... [--dot FILE]",
    complete: Complete::Nothing,
    summary: "search by itself for why and where the running program is slow",
    help: "Runs Paradyn's Performance Consultant on the process (starting the program first \
when there is none): it tests hypotheses about why the program is slow, each as a fraction of \
a thread's wall time against a threshold: CPUBound (0.30: on a CPU), SyncWait (0.20: in lock, \
condition and futex waits), IOBlocking (0.20: in read/write-family and file system calls on \
files; refined to SmallIO, 0.10), ExternalWait (0.20: poll, select, epoll, sleeps, accept, and \
reads and writes on sockets, pipes and terminals) and RunQueue (0.20: runnable but waiting for \
a CPU). A hypothesis true for the program is refined to the threads it holds for, and \
IOBlocking further to the file descriptors waited on, the likeliest first. A reading counts \
after 1 s; within 5% of its threshold it waits, at most 6 s, then counts as false.

The search measures from outside the process (the scheduler's counts and the system call each \
thread is blocked in, sampled every 5 ms), so the program runs unchanged and the search's cost \
is the sampling thread's CPU, which the result reports. It ends when every experiment is \
judged, after --for SECONDS (default 60), on Ctrl-C (keeping what it found), or when the \
process ends. A stopped process is resumed and left running.

Refinement below a thread (modules, functions, loops, call paths) needs probes in the \
program and is not done yet: conclusions name the program, the thread and, for I/O, the file.

The result lists the conclusions first (hypothesis, fraction, focus), then the search history \
as an indented tree of every experiment (true, false, untested, failed) with its fraction. \
With --json: {\"findings\": [{\"hypothesis\", \"focus\", \"fraction\", \"thread\"}], \"tested\", \
\"overhead\", \"seconds\", \"graph\"}. --dot FILE writes the graph for Graphviz.",
    examples: &[
        ("consult --for 20", "search for up to 20 seconds"),
        (
            "consult --threshold CPUBound=0.5",
            "call a thread CPU-bound only above half its time",
        ),
        (
            "consult --dot search.dot",
            "also write the search history graph",
        ),
    ],
    run: consult_cmd,
};

fn seconds(s: &str) -> Result<Duration> {
    match s.parse::<f64>() {
        Ok(x) if x.is_finite() && x > 0.0 && x <= MAX_SECONDS => Ok(Duration::from_secs_f64(x)),
        _ => bail!("--for must be a number of seconds from 0 to {MAX_SECONDS}, not `{s}`"),
    }
}

fn fraction(what: &str, s: &str) -> Result<f64> {
    match s.parse::<f64>() {
        Ok(x) if x.is_finite() && (0.0..=1.0).contains(&x) => Ok(x),
        _ => bail!("{what} must be a fraction from 0 to 1, not `{s}`"),
    }
}

fn settings(args: &mut Args) -> Result<Settings> {
    let mut s = Settings::default();
    if let Some(c) = args.option("--cost")? {
        let pct: f64 = c
            .trim_end_matches('%')
            .parse()
            .ok()
            .filter(|x: &f64| x.is_finite() && *x > 0.0 && *x <= 100.0)
            .ok_or_else(|| anyhow!("--cost must be a percentage from 0 to 100, not `{c}`"))?;
        s.cost_limit = pct / 100.0;
    }
    while let Some(t) = args.option("--threshold")? {
        let (name, value) = t
            .split_once('=')
            .ok_or_else(|| anyhow!("--threshold takes NAME=FRACTION, not `{t}`"))?;
        let h = Hypothesis::by_name(name).ok_or_else(|| {
            let names: Vec<&str> = Hypothesis::TOP
                .iter()
                .chain(&[Hypothesis::SmallIO])
                .map(|h| h.name())
                .collect();
            anyhow!(
                "no hypothesis is named `{name}`; they are {}",
                names.join(", ")
            )
        })?;
        s.thresholds
            .push((h, fraction(&format!("{name}'s threshold"), value)?));
    }
    Ok(s)
}

fn consult_cmd(ctx: &mut Context, args: &mut Args) -> Result<Output> {
    let limit = match args.option("--for")? {
        Some(s) => seconds(&s)?,
        None => Duration::from_secs_f64(DEFAULT_SECONDS),
    };
    let settings = settings(args)?;
    let dot = args.option("--dot")?;
    args.positionals(0, 0)?;
    if ctx.target.as_ref().is_none_or(|t| t.gone.is_some()) {
        let started = super::process::start_process(ctx, args)?;
        eprintln!("{started}");
    }
    let program = ctx
        .session
        .main()
        .map(|m| m.name.clone())
        .unwrap_or_else(|_| "program".into());
    let t = ctx.target.as_mut().ok_or_else(super::process::no_process)?;
    if let Some(gone) = &t.gone {
        bail!("{gone}: there is nothing to consult");
    }
    let pid = t.pid();
    // The search watches a running program: resume a stopped one, as `continue &` does.
    t.with(|p, live| {
        if p.state() == State::Stopped {
            super::process::step_past_breakpoints(p, live)?;
            p.resume()?;
        }
        Ok(())
    })?;
    t.frame = 0;
    let flag = ctx.interrupt.clone();
    let _ctrl_c = target::CtrlC::catch(&flag);
    let mut lab = ProcLab::new(pid);
    let mut search = Search::new(settings, Focus(vec![Resource::Program(program)]));
    let seconds = {
        let t = ctx.target.as_ref().ok_or_else(super::process::no_process)?;
        consult::run(&mut search, &mut lab, limit, &flag, || {
            matches!(t.tracer.with(|p, _| p.state()), Ok(State::Running))
        })
    };
    let why_stopped = lab.error();
    let overhead = lab.overhead();
    let report = search.report(seconds, overhead);
    if let Some(path) = dot {
        std::fs::write(&path, report.dot()).with_context(|| format!("cannot write {path}"))?;
    }
    if ctx.json {
        return Ok(Output::Json(serde_json::to_value(&report)?));
    }
    let mut text = report.text();
    if let Some(e) = why_stopped {
        text.push_str(&format!("(sampling stopped: {e})\n"));
    }
    Ok(Output::Text(text))
}
