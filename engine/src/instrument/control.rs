//! Process control with the instrumentation in place: what `start`, `attach`, `continue`
//! and `consult` do to a process beyond ptrace. A started program gets the plan installed
//! and runs to `main`, where the runtime for measures can load (libc is up); an attached one
//! gets the plan and the runtime at once; a stopped process resumes with every thread that
//! sits on one of our `int3`s first executing the instruction under it. The shell parses the
//! command, calls here, and prints the notes and the stop.

use std::sync::atomic::AtomicBool;

use crate::addr::LinkAddr;
use crate::process::{Process, State, Stop};
use crate::session::{ModuleId, Session};

use super::action::Action;
use super::live::{Live, LiveError};
use super::request::Plan;

/// Learns the process's modules into the session and inserts everything the plan holds
/// (snippets, measures, breakpoints). The process must be stopped. Returns a note per
/// instrumentation request saying where it stands (`instrumentation 1: inserted at 4
/// point(s)`); breakpoints get none.
pub fn install(
    session: &mut Session,
    plan: &Plan,
    p: &mut Process,
    live: &mut Live,
) -> Result<Vec<String>, LiveError> {
    live.learn_modules(session, p)?;
    live.sync_declared(p, plan)?;
    let mut notes = Vec::new();
    for r in &plan.requests {
        live.insert(p, session, plan, r.id)?;
        if matches!(r.action, Action::Breakpoint { .. }) {
            continue;
        }
        notes.push(format!(
            "instrumentation {}: {}",
            r.id,
            live.status(r.id).unwrap_or_else(|| "not inserted".into())
        ));
    }
    Ok(notes)
}

/// Loads the runtime and inserts the measures that waited for it ([`Live::start_measuring`]);
/// the process must be stopped past libc's start-up. A note when any point was inserted:
/// `measuring: 12 point(s) inserted, runtime PATH`.
pub fn start_measuring(p: &mut Process, live: &mut Live) -> Result<Vec<String>, LiveError> {
    let reports = live.start_measuring(p)?;
    if reports.is_empty() {
        return Ok(Vec::new());
    }
    Ok(vec![format!(
        "measuring: {} point(s) inserted, runtime {}",
        reports.len(),
        live.measure
            .runtime
            .as_ref()
            .map_or_else(String::new, |r| r.path.display().to_string())
    )])
}

/// A program just started (stopped at its entry point): installs the plan, then, when the
/// main program has a `main` at link address `main`, runs to it and starts measuring there.
/// Returns the notes, and the stop when the program stopped elsewhere first (it exited, a
/// signal, `interrupt` raised): measuring then has not started.
pub fn to_main(
    session: &mut Session,
    plan: &Plan,
    p: &mut Process,
    live: &mut Live,
    main: Option<LinkAddr>,
    interrupt: &AtomicBool,
) -> Result<(Vec<String>, Option<Stop>), LiveError> {
    let mut notes = install(session, plan, p, live)?;
    let (Some(main), Some(bias)) = (main, live.bias(ModuleId(0))) else {
        return Ok((notes, None));
    };
    live.stop_once_at(p, main.0.wrapping_add(bias))?;
    let stop = p.cont_wait(live, interrupt)?;
    if !matches!(stop, Stop::Breakpoint { .. }) {
        return Ok((notes, Some(stop)));
    }
    // `count`s wait for libc to be up, which it is at main.
    notes.extend(start_measuring(p, live)?);
    Ok((notes, None))
}

/// A process just attached to (stopped): installs the plan and starts measuring at once.
pub fn attached(
    session: &mut Session,
    plan: &Plan,
    p: &mut Process,
    live: &mut Live,
) -> Result<Vec<String>, LiveError> {
    let mut notes = install(session, plan, p, live)?;
    notes.extend(start_measuring(p, live)?);
    Ok(notes)
}

/// Threads sitting on one of our `int3`s execute the original instruction first, so that
/// resuming neither repeats the stop nor loses the instruction. Nothing to do unless the
/// process is stopped.
pub fn step_past_breakpoints(p: &mut Process, live: &mut Live) -> Result<(), LiveError> {
    if p.state() != State::Stopped {
        return Ok(());
    }
    for th in p.threads() {
        live.step_past_breakpoint(p, th.tid)?;
    }
    Ok(())
}

/// `continue &`: steps past our breakpoints, then resumes every thread without waiting.
/// A step that ends the process is no error: its end is in the state, told by the events.
pub fn resume(p: &mut Process, live: &mut Live) -> Result<(), LiveError> {
    if let Err(e) = step_past_breakpoints(p, live) {
        return match p.state().end_stop() {
            Some(_) => Ok(()),
            None => Err(e),
        };
    }
    p.resume()?;
    Ok(())
}

/// What earlier gsh sessions left in the process besides code, one note each: the runtime
/// library (reused, each counter zeroed before it counts again) and memory pools (reused once
/// released, kept while a killed session's jumps may still lead into them).
pub fn earlier_session(p: &mut Process) -> Result<Vec<String>, crate::process::ProcessError> {
    let mut notes = Vec::new();
    let runtime = p.modules()?.into_iter().find(super::unload::is_runtime);
    if let Some(rt) = runtime {
        notes.push(format!(
            "note: gsh's runtime ({}) is loaded from an earlier session; it is reused, each \
             counter zeroed before it counts again",
            rt.path.display()
        ));
    }
    let pools = p.earlier_pools()?;
    if pools.reused > 0 {
        notes.push(format!(
            "note: reusing {} memory pool{} ({} KiB) an earlier gsh session released",
            pools.reused,
            if pools.reused == 1 { "" } else { "s" },
            pools.reused_bytes >> 10
        ));
    }
    if pools.kept > 0 {
        notes.push(format!(
            "note: {} memory pool{} ({} KiB) of an earlier gsh session that did not detach \
             stay{} as they are (`attach --clean` frees them for reuse)",
            pools.kept,
            if pools.kept == 1 { "" } else { "s" },
            pools.kept_bytes >> 10,
            if pools.kept == 1 { "s" } else { "" },
        ));
    }
    Ok(notes)
}
