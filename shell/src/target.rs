//! The live process the shell controls, if any: the engine's [`Inferior`] (the process, started
//! or attached, with its instrumentation) and where the user is looking (thread and frame).
//! Ending a session detaches an attached process with its instrumentation removed, and kills
//! one gsh started, as gdb does.

use std::sync::atomic::AtomicBool;
use std::sync::Arc;

use anyhow::{anyhow, Result};
use engine::instrument::inferior::{Event, Stop, TextChange};
use engine::instrument::Inferior;
use engine::session::Session;

/// The process under control, and where the user looks in it.
pub struct Target {
    /// The process and its instrumentation, behind the engine's façade.
    pub inferior: Inferior,
    /// The thread the last stop happened in: `where`, `print` and `$N` look at it.
    pub thread: Option<i32>,
    /// The frame `up`/`down` selected (0 is the innermost).
    pub frame: usize,
    /// Events taken from the tracer and not yet printed (see [`Target::background_stop`]).
    queued: Vec<Event>,
    /// What `attach` found of earlier gsh sessions (their runtime, memory, code changes),
    /// one sentence each, for `status` to tell again.
    pub earlier: Vec<String>,
}

impl Target {
    pub fn new(inferior: Inferior) -> Target {
        Target {
            inferior,
            thread: None,
            frame: 0,
            queued: Vec::new(),
            earlier: Vec::new(),
        }
    }

    /// The stop a process running in the background came to (a breakpoint, a fault signal)
    /// whose event has not been printed yet: `wait` then tells it as it would have told it
    /// waiting. Taken out of the events, so it is told once.
    pub fn background_stop(&mut self) -> Option<Stop> {
        let more = self.inferior.take_events();
        self.queued.extend(more);
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
        self.inferior.pid()
    }

    /// gsh launched it (`start`/`run`), so it is killed, not detached, at the end.
    pub fn started(&self) -> bool {
        self.inferior.started()
    }

    /// Why the process is gone (exited or killed), once it is.
    pub fn gone(&self) -> Option<&str> {
        self.inferior.gone()
    }

    /// Events the tracer recorded while nobody waited, and the live layer's messages. Thread
    /// starts and exits are one summary line unless `each_thread` (`set thread-events on`):
    /// a thread pool makes thousands a second.
    pub fn events(&mut self, each_thread: bool) -> Vec<String> {
        let mut out: Vec<String> = Vec::new();
        let (mut started, mut exited) = (0usize, 0usize);
        let mut all = std::mem::take(&mut self.queued);
        all.extend(self.inferior.take_events());
        for e in all {
            match e {
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
        out.extend(
            self.inferior
                .messages()
                .into_iter()
                .map(|m| format!("[{m}]")),
        );
        out
    }

    /// Opens in the session the libraries the process loaded since the last call (`load
    /// library`, `dlopen`), so `show modules`, `whatis LIB!FN`, `at`, `break` and snippet calls
    /// reach them like the libraries it started with.
    pub fn learn_modules(&mut self, session: &mut Session) -> Result<()> {
        Ok(self.inferior.learn_modules(session)?)
    }

    /// Ends control: an attached process gets its original code back and runs on; one gsh
    /// started is killed.
    pub fn finish(mut self) -> Result<()> {
        let pid = self.pid();
        // Its end, if it came meanwhile.
        for e in self.events(false) {
            eprintln!("{e}");
        }
        // Said, since a batch's program stopping halfway is no sign of anything: `gsh -c
        // 'consult --for 20' xz ...` left a 0-byte xz file and no word why.
        let killed = self.started() && self.gone().is_none();
        let (left, notes) = self.inferior.finish()?;
        if killed {
            eprintln!(
                "[process {pid} killed, as gsh started it and it was still running; \
                 `wait` lets it finish first]"
            );
        }
        for n in notes {
            eprintln!("{n}");
        }
        if !left.is_empty() {
            eprintln!("{}", differences(pid, &left));
        }
        Ok(())
    }
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
        self.as_mut().filter(|t| t.gone().is_none())
    }

    fn live_ref(&self) -> Option<&Target> {
        self.as_ref().filter(|t| t.gone().is_none())
    }

    fn is_live(&self) -> bool {
        self.live_ref().is_some()
    }
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
