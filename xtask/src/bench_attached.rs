//! `bench-attached [--runs N]`: what merely being attached costs a program, with nothing
//! inserted: the time to create (and join) a thread and to deliver a signal to itself, while
//! gsh is attached and the program runs in the background, against the same program not
//! attached, measured in one run, runs interleaved. Attached twice: hands-off (the default:
//! gsh detaches while nothing needs the tracer) and traced (`set attached-mode traced`, every
//! thread traced as gsh did before hands-off). Under ptrace each thread creation is two stops
//! (the creator's clone event, the new thread's first stop) and each signal one; the traced
//! ratio says how fast the tracer handles them.
//!
//! Then with `count` inserted into the function each operation runs (the signal handler, the
//! thread's function), in the default mode, hands-off while measuring (the final values are
//! read from the runtime's arena gsh holds, after the untraced exit), and traced (`set
//! attached-mode traced`, where the values are read at the exit stop); both must count every
//! operation exactly.
//!
//! The program is generated: it reads a line from stdin (so gsh can attach first), then
//! times `threads` creations or `signals` deliveries and prints the nanoseconds per operation.

use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::{Command, Stdio};

use anyhow::{bail, Context as _, Result};
use engine::instrument::measure::{self, Metric};
use engine::instrument::{Live, Plan};
use engine::process::{AttachedMode, NoHooks, State, Tracer};
use engine::Session;

const PROGRAM: &str = r#"
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
static volatile long got;
static void on_usr1(int s) { (void)s; got++; }
/* Each does a little more than return, so a jump fits and `count` needs no trap site. */
static void *nothing(void *a) { got++; return a; }
static long now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1000000000L + t.tv_nsec;
}
int main(int argc, char **argv) {
    int n = 2000;
    signal(SIGUSR1, on_usr1);
    char line[16];
    if (!fgets(line, sizeof line, stdin)) return 1;
    long t = now();
    if (argc > 1 && strcmp(argv[1], "signals") == 0) {
        for (int i = 0; i < n; i++) raise(SIGUSR1);
        if (got != n) return 2;
    } else {
        for (int i = 0; i < n; i++) {
            pthread_t th;
            if (pthread_create(&th, 0, nothing, 0) || pthread_join(th, 0)) return 3;
        }
    }
    printf("%ld\n", (now() - t) / n);
    return 0;
}
"#;

/// Runs the program once for `what`, attached in `mode` or not; nanoseconds per operation.
fn once(exe: &Path, what: &str, attached: Option<AttachedMode>) -> Result<f64> {
    let mut child = Command::new(exe)
        .arg(what)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .context("starting the benchmark program")?;
    let pid = child.id() as i32;
    let tracer = if let Some(mode) = attached {
        let t = Tracer::attach(pid, NoHooks)?;
        t.with(|p, _| {
            p.set_attached_mode(mode)?;
            p.resume()
        })??;
        if mode == AttachedMode::HandsOff {
            // Measure once gsh has let go (right after the resume).
            let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
            while !t.with(|p, _| p.is_hands_off())? {
                if std::time::Instant::now() > deadline {
                    bail!("gsh never went hands-off");
                }
                std::thread::sleep(std::time::Duration::from_millis(1));
            }
        }
        Some(t)
    } else {
        None
    };
    let mut stdin = child.stdin.take().context("no stdin")?;
    stdin.write_all(b"go\n")?;
    let mut line = String::new();
    BufReader::new(child.stdout.take().context("no stdout")?).read_line(&mut line)?;
    if let Some(t) = tracer {
        // The tracer thread (gsh's, like our own) reaps it when it exits: its exit status is
        // the tracer's to report, not `wait`'s.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        loop {
            match t.with(|p, _| p.state())? {
                State::Exited(0) => break,
                s if s.is_alive() && std::time::Instant::now() < deadline => {
                    std::thread::sleep(std::time::Duration::from_millis(1))
                }
                s => bail!("the benchmark program is {s} (for {what}, attached)"),
            }
        }
        let _ = child.wait();
    } else {
        let status = child.wait()?;
        if !status.success() {
            bail!("the benchmark program failed ({status}) for {what}");
        }
    }
    line.trim()
        .parse()
        .with_context(|| format!("the program printed `{}`", line.trim()))
}

/// Runs the program once for `what` with `count` inserted into the function each operation
/// runs, attached in `mode`; checks the count read after the exit is exact. Nanoseconds per
/// operation.
fn once_measuring(exe: &Path, what: &str, mode: AttachedMode) -> Result<f64> {
    let func = if what == "signals" {
        "on_usr1"
    } else {
        "nothing"
    };
    let mut session = Session::new();
    session.open(exe)?;
    let mut plan = Plan::default();
    let id = measure::add(&mut plan, &mut session, func, Metric::Count)?.id;
    let mut child = Command::new(exe)
        .arg(what)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .context("starting the benchmark program")?;
    let pid = child.id() as i32;
    let t = Tracer::attach(pid, Live::default())?;
    {
        let (s, pl) = (&mut session, &plan);
        t.with(|p, live| -> Result<()> {
            live.learn_modules(s, p)?;
            p.set_attached_mode(mode)?;
            live.load_runtime(p)?;
            live.insert(p, s, pl, id)?;
            live.start_measuring(p)?;
            p.resume()?;
            Ok(())
        })??;
    }
    if mode == AttachedMode::HandsOff {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while !t.with(|p, _| p.is_hands_off())? {
            if std::time::Instant::now() > deadline {
                bail!("gsh never went hands-off while measuring");
            }
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
    }
    let mut stdin = child.stdin.take().context("no stdin")?;
    stdin.write_all(b"go\n")?;
    let mut line = String::new();
    BufReader::new(child.stdout.take().context("no stdout")?).read_line(&mut line)?;
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    loop {
        match t.with(|p, _| p.state())? {
            State::Exited(0) => break,
            s if s.is_alive() && std::time::Instant::now() < deadline => {
                std::thread::sleep(std::time::Duration::from_millis(1))
            }
            s => bail!("the benchmark program is {s} (for {what}, measuring)"),
        }
    }
    // Read after the exit, traced (kept at the exit stop) or not (from the arena).
    let counted = t.with(|_, live| {
        live.measure
            .final_values(pid)
            .and_then(|(v, _)| v.iter().find(|v| v.function == func).map(|v| v.calls))
    })?;
    if counted != Some(2000) {
        bail!("{func} counted {counted:?} times, not 2000 ({mode})");
    }
    drop(t);
    let _ = child.wait();
    line.trim()
        .parse()
        .with_context(|| format!("the program printed `{}`", line.trim()))
}

/// Compiles the benchmark program; its path.
fn build_program() -> Result<std::path::PathBuf> {
    crate::cprogram::build(
        &gsh_tests::target_dir().join("bench-attached"),
        "attached",
        PROGRAM,
    )
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

pub fn run(args: &[String]) -> Result<()> {
    let (file, runs) = crate::file_and_runs(args, 7, "bench-attached [--runs N]")?;
    if let Some(f) = file {
        bail!("unexpected argument `{f}`; usage: bench-attached [--runs N]");
    }
    let exe = build_program()?;
    println!(
        "cost of being attached, nothing inserted, then `count` inserted: median ns per \
         operation over {runs} interleaved runs of 2,000 (target: attached <= 1.5x, the \
         default being hands-off)"
    );
    for (what, label) in [
        ("threads", "thread creation + join"),
        ("signals", "signal to itself"),
    ] {
        let (mut bare, mut off, mut traced) = (Vec::new(), Vec::new(), Vec::new());
        let (mut off_counted, mut traced_counted) = (Vec::new(), Vec::new());
        for _ in 0..runs {
            bare.push(once(&exe, what, None)?);
            off.push(once(&exe, what, Some(AttachedMode::HandsOff))?);
            traced.push(once(&exe, what, Some(AttachedMode::Traced))?);
            off_counted.push(once_measuring(&exe, what, AttachedMode::HandsOff)?);
            traced_counted.push(once_measuring(&exe, what, AttachedMode::Traced)?);
        }
        let (b, o, t) = (median(bare), median(off), median(traced));
        let (k, l) = (median(off_counted), median(traced_counted));
        println!(
            "  {label:<24} not attached {b:>8.0} ns   hands-off {o:>8.0} ns {:>6.2}x   \
             traced {t:>8.0} ns {:>6.2}x",
            o / b,
            t / b
        );
        println!(
            "  {:<24} counted, hands-off (default) {k:>8.0} ns {:>6.2}x   counted, traced \
             {l:>8.0} ns {:>6.2}x",
            "",
            k / b,
            l / b
        );
    }
    Ok(())
}

/// Where the leader of `p` is stopped: `module+offset` (or the raw address).
fn place(p: &mut engine::process::Process) -> String {
    let pid = p.pid();
    let Ok(r) = p.regs(pid) else {
        return "?".into();
    };
    let m = p.mappings().unwrap_or_default();
    match m.iter().find(|m| m.start <= r.rip && r.rip < m.end) {
        Some(m) => format!(
            "{}+{:#x} (rsp {:#x}, orig_rax {})",
            m.name.rsplit('/').next().unwrap_or(&m.name),
            r.rip - m.start + m.offset,
            r.rsp,
            r.orig_rax as i64
        ),
        None => format!("{:#x}", r.rip),
    }
}

/// One attach at `delay` after the spawn, measuring `what` as `once_measuring` does; the
/// leader's place when gsh got it, and the outcome.
fn stress_once(
    exe: &Path,
    what: &str,
    mode: AttachedMode,
    delay: std::time::Duration,
) -> (String, Result<()>) {
    let func = if what == "signals" {
        "on_usr1"
    } else {
        "nothing"
    };
    let mut where_ = String::from("not attached");
    let r = (|| -> Result<()> {
        let mut session = Session::new();
        session.open(exe)?;
        let mut plan = Plan::default();
        let id = measure::add(&mut plan, &mut session, func, Metric::Count)?.id;
        let mut child = Command::new(exe)
            .arg(what)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .context("starting the benchmark program")?;
        std::thread::sleep(delay);
        let pid = child.id() as i32;
        let t = match Tracer::attach(pid, Live::default()) {
            Ok(t) => t,
            Err(e) => {
                let _ = child.kill();
                let _ = child.wait();
                return Err(e.into());
            }
        };
        let (s, pl, w) = (&mut session, &plan, &mut where_);
        let r = t.with(|p, live| -> Result<()> {
            *w = place(p);
            live.learn_modules(s, p)?;
            p.set_attached_mode(mode)?;
            live.load_runtime(p)?;
            live.insert(p, s, pl, id)?;
            live.start_measuring(p)?;
            p.resume()?;
            Ok(())
        })?;
        if let Err(e) = r {
            drop(t);
            let _ = child.kill();
            let _ = child.wait();
            return Err(e);
        }
        let mut stdin = child.stdin.take().context("no stdin")?;
        stdin.write_all(b"go\n")?;
        let mut line = String::new();
        BufReader::new(child.stdout.take().context("no stdout")?).read_line(&mut line)?;
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        loop {
            match t.with(|p, _| p.state())? {
                State::Exited(0) => break,
                s if s.is_alive() && std::time::Instant::now() < deadline => {
                    std::thread::sleep(std::time::Duration::from_millis(1))
                }
                s => bail!("the program is {s}"),
            }
        }
        let counted = t.with(|_, live| {
            live.measure
                .final_values(pid)
                .and_then(|(v, _)| v.iter().find(|v| v.function == func).map(|v| v.calls))
        })?;
        drop(t);
        let _ = child.wait();
        if counted != Some(2000) {
            bail!("{func} counted {counted:?} times, not 2000");
        }
        Ok(())
    })();
    (where_, r)
}

/// `stress-attach [--runs N]`: attaches to the benchmark program at delays from 0 to 4 ms
/// after its spawn (in its start-up, its first `malloc`, its `read` of stdin), loads the
/// runtime and inserts `count`, N times; prints every failure with where the program was.
pub fn stress(args: &[String]) -> Result<()> {
    let (file, runs) = crate::file_and_runs(args, 200, "stress-attach [--runs N]")?;
    if let Some(f) = file {
        bail!("unexpected argument `{f}`; usage: stress-attach [--runs N]");
    }
    let exe = build_program()?;
    let mut failed = 0;
    let mut places = std::collections::BTreeMap::<String, usize>::new();
    for i in 0..runs {
        let what = if i % 2 == 0 { "threads" } else { "signals" };
        let mode = if i % 4 < 2 {
            AttachedMode::HandsOff
        } else {
            AttachedMode::Traced
        };
        // A spread of delays, denser near the start.
        let us = (i as u64 * 7919) % 4000;
        let delay = std::time::Duration::from_micros(us * us / 4000);
        let (at, r) = stress_once(&exe, what, mode, delay);
        let key = at.split(" (").next().unwrap_or("").to_owned();
        *places.entry(key).or_default() += 1;
        if let Err(e) = r {
            failed += 1;
            println!("run {i} ({what}, {mode}, {delay:?} after spawn, leader at {at}): {e:#}");
        }
    }
    println!("{failed} of {runs} failed; where the leader was when gsh got it:");
    for (p, n) in places {
        println!("  {n:>5}  {p}");
    }
    if failed > 0 {
        bail!("{failed} of {runs} attaches failed");
    }
    Ok(())
}
