//! The live process the shell controls, if any: the tracer handle, what gsh did to it (started
//! it, or attached), where the user is looking (thread and frame), and the breakpoints asked
//! for before there was a process. Ending a session detaches an attached process with its
//! instrumentation removed, and kills one gsh started, as gdb does.

use std::sync::atomic::AtomicBool;
use std::sync::Arc;

use anyhow::{anyhow, bail, Result};
use engine::instrument::Live;
use engine::process::{Event, Process, State, Stop, TextChange, Tracer};
use engine::session::Session;

/// The process under control.
pub struct Target {
    pub tracer: Tracer<Live>,
    /// gsh launched it (`start`/`run`), so it is killed, not detached, at the end.
    pub started: bool,
    /// The thread the last stop happened in: `where`, `print` and `$N` look at it.
    pub thread: Option<i32>,
    /// The frame `up`/`down` selected (0 is the innermost).
    pub frame: usize,
    /// Set once the process has exited or was killed: the one-line reason.
    pub gone: Option<String>,
    /// A library was loaded since the session last learnt the process's modules.
    pub modules_changed: bool,
    /// Events taken from the tracer and not yet printed (see [`Target::background_stop`]).
    queued: Vec<Event>,
}

impl Target {
    pub fn new(tracer: Tracer<Live>, started: bool) -> Target {
        Target {
            tracer,
            started,
            thread: None,
            frame: 0,
            gone: None,
            modules_changed: false,
            queued: Vec::new(),
        }
    }

    /// The stop a process running in the background came to (a breakpoint, a fault signal)
    /// whose event has not been printed yet: `wait` then tells it as it would have told it
    /// waiting. Taken out of the events, so it is told once.
    pub fn background_stop(&mut self) -> Option<Stop> {
        self.queued.extend(self.tracer.take_events());
        let i = self
            .queued
            .iter()
            .rposition(|e| matches!(e, Event::Breakpoint { .. } | Event::Signal { .. }))?;
        match self.queued.remove(i) {
            Event::Breakpoint { tid, rip } => Some(Stop::Breakpoint { tid, rip }),
            Event::Signal { tid, signal } => Some(Stop::Signal { tid, signal }),
            _ => None,
        }
    }

    pub fn pid(&self) -> i32 {
        self.tracer.pid()
    }

    /// Runs `f` on the tracer thread; errors when the process is gone.
    pub fn with<R: Send>(
        &self,
        f: impl FnOnce(&mut Process, &mut Live) -> Result<R> + Send,
    ) -> Result<R> {
        if let Some(why) = &self.gone {
            return Err(anyhow!("the process is gone ({why})"));
        }
        self.tracer.with(f)?
    }

    /// Runs `f` on the tracer thread with the process stopped: the one check of every command
    /// that reads or changes a stopped process (registers, memory, frames, snippets).
    pub fn with_stopped<R: Send>(
        &self,
        f: impl FnOnce(&mut Process, &mut Live) -> Result<R> + Send,
    ) -> Result<R> {
        self.with(|p, live| {
            if p.state() == State::Running {
                bail!("the process is running; `halt` it first");
            }
            f(p, live)
        })
    }

    /// Events the tracer recorded while nobody waited, and the live layer's messages. Thread
    /// starts and exits are one summary line unless `each_thread` (`set thread-events on`):
    /// a thread pool makes thousands a second.
    pub fn events(&mut self, each_thread: bool) -> Vec<String> {
        let mut out: Vec<String> = Vec::new();
        let (mut started, mut exited) = (0usize, 0usize);
        let mut all = std::mem::take(&mut self.queued);
        all.extend(self.tracer.take_events());
        for e in all {
            match e {
                Event::Exited { .. } | Event::Killed { .. } | Event::Ended { .. } => {
                    self.gone = Some(e.to_string())
                }
                Event::LibraryLoaded { .. } | Event::Exec { .. } => self.modules_changed = true,
                Event::ThreadStarted(_) if !each_thread => {
                    started += 1;
                    continue;
                }
                Event::ThreadExited(_) if !each_thread => {
                    exited += 1;
                    continue;
                }
                _ => {}
            }
            out.push(e.to_string());
        }
        if started + exited > 0 {
            out.insert(0, thread_summary(started, exited));
        }
        // The tracer thread outlives the process, so its messages are there to collect.
        if let Ok(msgs) = self
            .tracer
            .with(|_, live| std::mem::take(&mut live.messages))
        {
            out.extend(msgs.into_iter().map(|m| format!("[{m}]")));
        }
        out
    }

    /// Opens in the session the libraries the process loaded since the last call (`load
    /// library`, `dlopen`), so `show modules`, `whatis LIB!FN`, `at`, `break` and snippet calls
    /// reach them like the libraries it started with.
    pub fn learn_modules(&mut self, session: &mut Session) -> Result<()> {
        if !std::mem::take(&mut self.modules_changed) || self.gone.is_some() {
            return Ok(());
        }
        self.with(|p, live| Ok(live.learn_modules(session, p)?))
    }

    /// Ends control: an attached process gets its original code back and runs on; one gsh
    /// started is killed.
    pub fn finish(self) -> Result<()> {
        if self.gone.is_some() {
            return Ok(());
        }
        let started = self.started;
        self.tracer.with(move |p, live| -> Result<()> {
            if started {
                p.kill()?;
                return Ok(());
            }
            let left = let_go(p, live)?;
            if !left.is_empty() {
                eprintln!("{}", differences(p.pid(), &left));
            }
            Ok(())
        })??;
        Ok(())
    }
}

/// `tid` if that thread still exists in `p`.
pub fn existing_thread(p: &Process, tid: Option<i32>) -> Option<i32> {
    tid.filter(|t| p.threads().iter().any(|th| th.tid == *t))
}

/// The thread commands look at: `tid` if it still exists, else the process's first.
pub fn current_thread(p: &Process, tid: Option<i32>) -> Option<i32> {
    existing_thread(p, tid).or_else(|| p.threads().first().map(|th| th.tid))
}

/// Why a command that needs a process cannot run.
pub fn no_process() -> anyhow::Error {
    anyhow!("there is no process; `start`, `run` or `attach PID` first")
}

/// The one way commands reach the process under control (`ctx.target`): present, or live
/// (present and not gone), with the same error everywhere.
pub trait TargetSlot {
    /// The target, gone or not; the error says how to get one.
    fn present(&mut self) -> Result<&mut Target>;
    /// The target if it has not exited or been killed.
    fn live(&mut self) -> Option<&mut Target>;
    /// The target if it has not exited or been killed, to read.
    fn live_ref(&self) -> Option<&Target>;
    /// Whether there is a target that has not exited or been killed.
    fn is_live(&self) -> bool;
}

impl TargetSlot for Option<Target> {
    fn present(&mut self) -> Result<&mut Target> {
        self.as_mut().ok_or_else(no_process)
    }

    fn live(&mut self) -> Option<&mut Target> {
        self.as_mut().filter(|t| t.gone.is_none())
    }

    fn live_ref(&self) -> Option<&Target> {
        self.as_ref().filter(|t| t.gone.is_none())
    }

    fn is_live(&self) -> bool {
        self.live_ref().is_some()
    }
}

/// Removes gsh's instrumentation and breakpoints, and what an earlier gsh left in the code
/// (see [`engine::process::TextChange`]), then detaches. Returns the text that still differs
/// from the files (not gsh's doing).
pub fn let_go(p: &mut Process, live: &mut Live) -> Result<Vec<TextChange>> {
    Ok(live.let_go(p)?)
}

/// `process 42: 2 places (7 bytes) of its code differ from the files, not by gsh: libfoo.so+0x1234 ...`
pub fn differences(pid: i32, changes: &[TextChange]) -> String {
    let bytes: usize = changes.iter().map(|c| c.file.len()).sum();
    let places: Vec<String> = changes
        .iter()
        .take(4)
        .map(|c| {
            let name = c.path.file_name().map_or_else(
                || c.path.display().to_string(),
                |n| n.to_string_lossy().into_owned(),
            );
            format!("{name} at {:#x}", c.addr)
        })
        .collect();
    let more = if changes.len() > places.len() {
        ", ..."
    } else {
        ""
    };
    format!(
        "process {pid}: {} place{} ({bytes} bytes) of its code differ{} from the files, not by \
         gsh: {}{more}",
        changes.len(),
        if changes.len() == 1 { "" } else { "s" },
        if changes.len() == 1 { "s" } else { "" },
        places.join(", ")
    )
}

/// `[3 threads started, 2 exited]`.
fn thread_summary(started: usize, exited: usize) -> String {
    let threads = |n: usize| if n == 1 { "thread" } else { "threads" };
    match (started, exited) {
        (s, 0) => format!("[{s} {} started]", threads(s)),
        (0, x) => format!("[{x} {} exited]", threads(x)),
        (s, x) => format!("[{s} {} started, {x} exited]", threads(s)),
    }
}

/// While it lives, Ctrl-C sets `flag` instead of ending gsh (and, with it, control of the
/// process): a wait for the process then halts it.
pub struct CtrlC(Option<signal_hook::SigId>);

impl CtrlC {
    pub fn catch(flag: &Arc<AtomicBool>) -> CtrlC {
        flag.store(false, std::sync::atomic::Ordering::SeqCst);
        CtrlC(signal_hook::flag::register(signal_hook::consts::SIGINT, flag.clone()).ok())
    }
}

impl Drop for CtrlC {
    fn drop(&mut self) {
        if let Some(id) = self.0.take() {
            signal_hook::low_level::unregister(id);
        }
    }
}

/// A stop as one line: `stopped at breakpoint 2 (parse entry) in thread 4242`.
pub fn describe_stop(live: &Live, p: &Process, stop: &engine::process::Stop) -> String {
    use engine::process::Stop;
    match stop {
        Stop::Breakpoint { tid, .. } => {
            let rip = p.regs(*tid).map(|r| r.rip).unwrap_or(0);
            let bps = live.breakpoints_hit(*tid, rip);
            let at = engine::instrument::frames::where_is(live, rip);
            if bps.is_empty() {
                format!("stopped at {at} in thread {tid}")
            } else {
                let ids: Vec<String> = bps
                    .iter()
                    .map(|b| format!("{} ({})", b.id, b.what))
                    .collect();
                format!(
                    "stopped at breakpoint {} in thread {tid}, {at}",
                    ids.join(", ")
                )
            }
        }
        other => other.to_string(),
    }
}
