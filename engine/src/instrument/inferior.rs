//! The process gsh controls, as the shell sees it (gdb's *inferior*, Dyninst's
//! `BPatch_process`): started or attached, with its instrumentation ([`Live`]) on the tracer
//! thread. Every request the shell makes of a process is a method here, so the shell parses,
//! calls and prints, and holds no tracer, makes no ptrace-level request and reads no register
//! or memory itself. The live-target checks are here once: a process that is gone answers
//! [`InferiorError::Gone`], and everything that needs the process stopped (frames, `x`,
//! `execute`) answers [`InferiorError::Running`] while it runs.
//!
//! The vocabulary of process control the shell prints (states, stops, events, text changes)
//! is re-exported from here; the control itself is not.

use std::collections::HashMap;
use std::path::Path;
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex};

use crate::addr::LinkAddr;
use crate::consult::stacks::Stacks;
use crate::process::{Process, ProcessError, Tracer};
use crate::session::{Module, Session};

pub use crate::process::{
    executable_path, is_executable_of, AttachedMode, ChangeKind, Event, Launch, State, Stop,
    TextChange, ThreadState,
};

use super::control;
use super::coverage::FunctionCoverage;
use super::env::SessionEnv;
use super::eval::{self, EvalError, Printed};
use super::frames;
use super::inspect;
use super::live::{Live, LiveError};
use super::measure::{CountValue, MeasureError, PathValue};
use super::request::Plan;
use super::sampling::StackSampler;
use super::scope::Scope;
use crate::patch::PointReport;

/// Why a request of the process under control failed.
#[derive(Debug, thiserror::Error)]
pub enum InferiorError {
    /// The process exited or was killed; the reason as one line.
    #[error("the process is gone ({0})")]
    Gone(String),
    /// The request needs every thread stopped.
    #[error("the process is running; `halt` it first")]
    Running,
    /// A stopped process with no thread to look at.
    #[error("the process has no threads")]
    NoThreads,
    /// The process ended before the runtime's values could be read.
    #[error("process {0} ended before its values could be read (killed?)")]
    ValuesLost(i32),
    /// Process control.
    #[error(transparent)]
    Process(#[from] ProcessError),
    /// The instrumentation in the process.
    #[error(transparent)]
    Live(#[from] LiveError),
    /// Reading the runtime's values.
    #[error(transparent)]
    Measure(#[from] MeasureError),
    /// Evaluating an expression or a snippet in the process.
    #[error(transparent)]
    Eval(#[from] EvalError),
    /// The session (no file open).
    #[error(transparent)]
    Session(#[from] crate::error::Error),
}

type Result<T, E = InferiorError> = std::result::Result<T, E>;

/// What `status` says of a live process.
#[derive(Clone, Debug)]
pub struct Status {
    /// Stopped, running...
    pub state: State,
    /// When stopped: the thread looked at and where it is (`main+0x12 (app.c:7)`).
    pub at: Option<(i32, String)>,
    /// How many threads it has.
    pub threads: usize,
    /// Running untraced (see [`AttachedMode::HandsOff`]).
    pub hands_off: bool,
}

/// One thread, for `show threads`.
#[derive(Clone, Debug)]
pub struct Thread {
    /// Its id.
    pub tid: i32,
    /// Its name.
    pub name: String,
    /// What it does.
    pub state: ThreadState,
    /// Where it is, when stopped.
    pub at: Option<String>,
}

/// How a wait for the process ended: the stop, described in one line, and the thread it
/// happened in.
#[derive(Clone, Debug)]
pub struct Waited {
    /// The stop; `None` when `wait` found the process not running and waited for nothing.
    pub stop: Option<Stop>,
    /// `stopped at breakpoint 2 (parse entry) in thread 4242, parse (app.c:10)`.
    pub text: String,
    /// The thread of a breakpoint or signal.
    pub tid: Option<i32>,
}

/// What the runtime and the coverage counters hold, for `report` and `watch`.
#[derive(Clone, Debug)]
pub struct Reading {
    /// The process was alive: the values are the values now, else its last ones.
    pub alive: bool,
    /// Its state when read.
    pub state: State,
    /// Counts and times per request and function.
    pub values: Vec<CountValue>,
    /// Profiles' call paths, by return address.
    pub paths: Vec<PathValue>,
    /// The frames each return address of `paths` stands for, outermost first: the function
    /// it returns into, as users name it, then the measured loops of that function holding
    /// the call (`loop_measure::enclosing`).
    pub callers: HashMap<u64, Vec<String>>,
    /// Block coverage per function.
    pub coverage: Vec<FunctionCoverage>,
    /// Why some of the final values are missing, when they are (threads whose blocks were
    /// outside the arena gsh keeps, gone with a process that ended while gsh was hands-off).
    pub missing: Option<String>,
}

/// What `detach` leaves behind: what was measured until then (kept even when letting go
/// fails), and the code that still differs from the files (not gsh's doing).
#[derive(Debug)]
pub struct Detached {
    /// The values when gsh let go, when anything was measured.
    pub kept: Option<Reading>,
    /// Places of the code that differ from the files, or why letting go failed.
    pub left: Result<Vec<TextChange>>,
    /// What of gsh stays in the process besides code, and why (a runtime or memory pool a
    /// thread is still in).
    pub notes: Vec<String>,
}

/// A frame of a stopped thread, handed to the closure of [`Inferior::frame`]: its scope
/// (registers, parameters, locals, globals), its memory, and expressions evaluated there.
pub struct FrameView<'s, 'p> {
    session: &'s Session,
    live: &'s Live,
    p: &'p mut Process,
    tid: Option<i32>,
    rip: Option<u64>,
    /// The names the frame sees.
    pub scope: Scope<'s>,
}

impl FrameView<'_, '_> {
    /// `len` bytes of the process's memory at `addr`.
    pub fn read(&self, addr: u64, len: usize) -> Result<Vec<u8>, ProcessError> {
        self.p.read(addr, len)
    }

    /// The address `expr` denotes (an access path or an expression) in this frame.
    pub fn address(&mut self, expr: &str) -> Result<u64> {
        self.evaluate(|p, tid, env, scope, near| eval::address(p, tid, env, scope, near, expr))
    }

    /// `expr`'s value in this frame, as `print` shows it.
    pub fn print(&mut self, expr: &str) -> Result<Printed> {
        self.evaluate(|p, tid, env, scope, near| {
            eval::print_stopped(p, tid, env, scope, near, expr)
        })
    }

    /// Runs `f` with the environment of the frame's function (see [`eval::live_env`]).
    fn evaluate<R>(
        &mut self,
        f: impl FnOnce(
            &mut Process,
            Option<i32>,
            &SessionEnv<'_>,
            &mut Scope<'_>,
            u64,
        ) -> Result<R, EvalError>,
    ) -> Result<R> {
        let (env, near) = eval::live_env(self.session, self.live, self.rip)?;
        Ok(f(self.p, self.tid, &env, &mut self.scope, near)?)
    }
}

/// The event telling that process `pid` ended, when `state` is an end (not a detach).
fn end_event(pid: i32, state: State) -> Option<Event> {
    match state {
        State::Exited(code) => Some(Event::Exited { pid, code }),
        State::Signaled(signal) => Some(Event::Killed { pid, signal }),
        State::Ended => Some(Event::Ended { pid }),
        State::Stopped | State::Running | State::Detached => None,
    }
}

/// The process under control and its instrumentation.
pub struct Inferior {
    tracer: Tracer<Live>,
    started: bool,
    gone: Option<String>,
    modules_changed: bool,
}

impl Inferior {
    /// Launches `launch`, stopped at its entry point with its libraries mapped.
    pub fn start(launch: &Launch) -> Result<Inferior> {
        Ok(Inferior::new(Tracer::start(launch, Live::default())?, true))
    }

    /// Attaches to every thread of process `pid` (all stopped), in `mode` while it runs;
    /// `measuring` lets it go even while measures run (`set attached-mode hands-off`).
    pub fn attach(pid: i32, mode: AttachedMode, measuring: bool) -> Result<Inferior> {
        let i = Inferior::new(Tracer::attach(pid, Live::default())?, false);
        i.set_attached_mode(mode, measuring)?;
        Ok(i)
    }

    fn new(tracer: Tracer<Live>, started: bool) -> Inferior {
        Inferior {
            tracer,
            started,
            gone: None,
            modules_changed: false,
        }
    }

    /// The process id.
    pub fn pid(&self) -> i32 {
        self.tracer.pid()
    }

    /// gsh launched it, so it is killed, not detached, when gsh lets go.
    pub fn started(&self) -> bool {
        self.started
    }

    /// Why the process is gone (it exited or was killed), once it is.
    pub fn gone(&self) -> Option<&str> {
        self.gone.as_deref()
    }

    /// Runs `f` on the tracer thread with the process; a process that is gone is an error.
    fn job<R: Send>(
        &self,
        f: impl FnOnce(&mut Process, &mut Live) -> Result<R> + Send,
    ) -> Result<R> {
        if let Some(why) = &self.gone {
            return Err(InferiorError::Gone(why.clone()));
        }
        self.tracer.with(f)?
    }

    /// [`Inferior::job`] with the process stopped: the one check of every request that reads
    /// or changes a stopped process (registers, memory, frames, snippets).
    fn stopped_job<R: Send>(
        &self,
        f: impl FnOnce(&mut Process, &mut Live) -> Result<R> + Send,
    ) -> Result<R> {
        self.job(|p, live| {
            if p.state() == State::Running {
                return Err(InferiorError::Running);
            }
            f(p, live)
        })
    }

    /// The tracer, for the engine's own users of the process (`consult`'s live probes).
    pub(crate) fn tracer(&self) -> &crate::process::Tracer<Live> {
        &self.tracer
    }

    /// Runs `f` with the instrumentation alone (no process), on the tracer thread, which
    /// outlives the process: what is inserted, the values kept at its exit.
    pub fn with_live<R: Send>(&self, f: impl FnOnce(&mut Live) -> R + Send) -> Result<R> {
        Ok(self.tracer.with(|_, live| f(live))?)
    }

    /// The events since the last call, oldest first. An exit or kill among them makes the
    /// process gone; a library loaded makes [`Inferior::learn_modules`] look again.
    ///
    /// The process's end is told once, whichever way the tracer met it: a request that meets
    /// the end (a halt for a stack sample, an injected call, a step) records it in the
    /// process's state and fails without an event, and the background loop, which would
    /// have told it, no longer looks at a process that is not running. So the state is read
    /// too, before the events (the tracer tells an end it met in the same step that records
    /// it, so no end event comes after the state says it ended), and an end with no event is
    /// told as its own.
    pub fn take_events(&mut self) -> Vec<Event> {
        let ended = match self.gone {
            None => self.tracer.with(|p, _| p.state()).ok(),
            Some(_) => None,
        };
        let mut events = self.tracer.take_events();
        for e in &events {
            match e {
                Event::Exited { .. } | Event::Killed { .. } | Event::Ended { .. } => {
                    self.gone = Some(e.to_string())
                }
                Event::LibraryLoaded { .. } | Event::Exec { .. } => self.modules_changed = true,
                _ => {}
            }
        }
        if self.gone.is_none() {
            if let Some(e) = ended.and_then(|s| end_event(self.pid(), s)) {
                self.gone = Some(e.to_string());
                events.push(e);
            }
        }
        events
    }

    /// The instrumentation's messages since the last call (a breakpoint's library loaded, a
    /// request placed late); there are some even after the process is gone.
    pub fn messages(&self) -> Vec<String> {
        self.with_live(|live| std::mem::take(&mut live.messages))
            .unwrap_or_default()
    }

    /// Opens in the session the libraries the process loaded since the last call.
    pub fn learn_modules(&mut self, session: &mut Session) -> Result<()> {
        if !std::mem::take(&mut self.modules_changed) || self.gone.is_some() {
            return Ok(());
        }
        // A process that ended since the events were read has no libraries to open.
        self.job(|p, live| match p.state().is_alive() {
            true => Ok(live.learn_modules(session, p)?),
            false => Ok(()),
        })
    }

    /// Ends control: an attached process gets its original code back and runs on; one gsh
    /// started is killed. Returns the code that still differs from the files (not gsh's), and
    /// what of gsh stays in the process besides code (see [`Detached::notes`]).
    pub fn finish(self) -> Result<(Vec<TextChange>, Vec<String>)> {
        if self.gone.is_some() {
            return Ok(Default::default());
        }
        let started = self.started;
        self.tracer
            .with(move |p, live| -> Result<(Vec<TextChange>, Vec<String>)> {
                // Ended since the events were read: nothing to kill, nothing to restore.
                if !p.state().is_alive() {
                    return Ok(Default::default());
                }
                if started {
                    p.kill()?;
                    return Ok(Default::default());
                }
                let left = live.let_go(p)?;
                Ok((left, std::mem::take(&mut live.messages)))
            })?
    }

    /// `detach`: keeps what was measured for `report`, takes out gsh's instrumentation and
    /// breakpoints and what an earlier gsh left in the code, and lets the process run on.
    pub fn detach(self) -> Result<Detached> {
        self.job(|p, live| {
            let kept = kept_reading(p, live);
            let left = live.let_go(p).map_err(Into::into);
            let notes = std::mem::take(&mut live.messages);
            Ok(Detached { kept, left, notes })
        })
    }

    /// `kill`.
    pub fn kill(self) -> Result<()> {
        if self.gone.is_none() {
            self.tracer.with(|p, _| p.kill())??;
        }
        Ok(())
    }

    /// `halt`: stops every thread.
    pub fn halt(&self) -> Result<()> {
        self.job(|p, _| Ok(p.halt()?))
    }

    /// Ctrl-C at the prompt: halts the process if it runs; says whether it did.
    pub fn halt_if_running(&self) -> Result<bool> {
        self.job(|p, _| {
            let running = p.state() == State::Running;
            if running {
                p.halt()?;
            }
            Ok(running)
        })
    }

    /// The process's state now.
    pub fn state(&self) -> Result<State> {
        self.job(|p, _| Ok(p.state()))
    }

    /// `set attached-mode`.
    pub fn set_attached_mode(&self, mode: AttachedMode, measuring: bool) -> Result<()> {
        self.job(|p, live| {
            live.hands_off_while_measuring = measuring;
            Ok(p.set_attached_mode(mode)?)
        })
    }

    /// A program just started: installs the plan, and when the main program has a `main` at
    /// link address `main`, runs to it and starts measuring there (see [`control::to_main`]).
    /// On an error the process is killed.
    pub fn install_started(
        &mut self,
        session: &mut Session,
        plan: &Plan,
        main: Option<LinkAddr>,
        interrupt: &AtomicBool,
    ) -> Result<(Vec<String>, Option<Stop>)> {
        let r = self.job(|p, live| Ok(control::to_main(session, plan, p, live, main, interrupt)?));
        if let Ok((_, Some(stop @ (Stop::Exited(_) | Stop::Killed(_))))) = &r {
            self.gone = Some(stop.to_string());
        }
        r
    }

    /// A process just attached to: installs the plan and starts measuring at once.
    pub fn install_attached(&self, session: &mut Session, plan: &Plan) -> Result<Vec<String>> {
        self.job(|p, live| Ok(control::attached(session, plan, p, live)?))
    }

    /// The executable files the process maps that were deleted or replaced since and that gsh
    /// cannot read through /proc: not modules, each with the reason.
    pub fn unreadable_modules(&self) -> Result<Vec<crate::process::UnreadableModule>> {
        self.job(|p, _| Ok(p.unreadable_modules()?))
    }

    /// How the process's code differs from its files (what an earlier gsh left, or others).
    pub fn text_changes(&self) -> Result<Vec<TextChange>> {
        self.job(|p, _| Ok(p.text_changes()?))
    }

    /// Puts the files' bytes back where `changes` say.
    pub fn restore_text(&self, changes: &[TextChange]) -> Result<()> {
        self.job(|p, _| Ok(p.restore_text(changes)?))
    }

    /// Takes for reuse the memory pools a killed gsh session kept; how many.
    pub fn reclaim_kept_pools(&self) -> Result<usize> {
        self.job(|p, live| {
            let chains = super::unload::Chains::new(live, p)?;
            Ok(p.reclaim_kept_pools(&mut |p, r| chains.of(p, r))?)
        })
    }

    /// What earlier gsh sessions left in the process besides code, one note each.
    pub fn earlier_session(&self) -> Result<Vec<String>> {
        self.job(|p, _| Ok(control::earlier_session(p)?))
    }

    /// How many threads the process has.
    pub fn thread_count(&self) -> Result<usize> {
        self.job(|p, _| Ok(p.threads().len()))
    }

    /// `thread` if it still exists, else (with `fallback`) the process's first.
    pub fn current_thread(&self, thread: Option<i32>, fallback: bool) -> Result<Option<i32>> {
        self.job(|p, _| Ok(pick_thread(p, thread, fallback)))
    }

    /// Every thread, with where it is.
    pub fn threads(&self) -> Result<Vec<Thread>> {
        self.job(|p, live| {
            Ok(p.threads()
                .into_iter()
                .map(|th| Thread {
                    at: th.rip.map(|r| frames::where_is(live, r)),
                    tid: th.tid,
                    name: th.name,
                    state: th.state,
                })
                .collect())
        })
    }

    /// `status`: the state, and where thread `current` is when the process is stopped.
    pub fn status(&self, current: i32) -> Result<Status> {
        self.job(|p, live| {
            let state = p.state();
            let at = match state {
                State::Stopped => p
                    .regs(current)
                    .ok()
                    .map(|r| (current, frames::where_is(live, r.rip))),
                _ => None,
            };
            Ok(Status {
                state,
                at,
                threads: p.threads().len(),
                hands_off: p.is_hands_off(),
            })
        })
    }

    /// Resumes (unless `resume` is false: `wait`) and waits for the next stop. `background`
    /// is a stop the process came to while running in the background, not told yet: `wait`
    /// tells it. Ctrl-C (`interrupt`) halts the process.
    pub fn resume_and_wait(
        &mut self,
        resume: bool,
        background: Option<Stop>,
        interrupt: &AtomicBool,
    ) -> Result<Waited> {
        // `wait` is for the process to stop or end: one that ended already (while a search
        // ran, or in a `sleep` after `continue &`) has done what it waits for. A batch ending
        // `consult --for 30; wait` failed when the program ended within the 30 s.
        if let (false, Some(why)) = (resume, &self.gone) {
            return Ok(Waited {
                stop: None,
                text: why.trim_start_matches('[').trim_end_matches(']').to_owned(),
                tid: None,
            });
        }
        let waited = self.job(|p, live| {
            // A thread stepped over a breakpoint may end the process there: that is the stop.
            let mut ended = None;
            if resume {
                if let Err(e) = control::step_past_breakpoints(p, live) {
                    ended = Some(p.state().end_stop().ok_or(e)?);
                }
            }
            let stop = match (ended, background) {
                (Some(end), _) => end,
                (None, Some(stop)) if p.state() == State::Stopped => stop,
                _ if !resume && p.state() != State::Running => {
                    return Ok(Waited {
                        stop: None,
                        text: format!("process {} is {}", p.pid(), p.state()),
                        tid: None,
                    });
                }
                // On a running process `cont_wait` resumes nothing and only waits.
                _ => p.cont_wait(live, interrupt)?,
            };
            let text = describe_stop(live, p, &stop);
            let tid = match &stop {
                Stop::Breakpoint { tid, .. } | Stop::Signal { tid, .. } => Some(*tid),
                _ => None,
            };
            Ok(Waited {
                stop: Some(stop),
                text,
                tid,
            })
        })?;
        if matches!(waited.stop, Some(Stop::Exited(_) | Stop::Killed(_))) {
            self.gone = Some(waited.text.clone());
        }
        Ok(waited)
    }

    /// `continue &`: steps past our breakpoints, then resumes every thread without waiting.
    pub fn resume(&self) -> Result<()> {
        self.job(|p, live| Ok(control::resume(p, live)?))
    }

    /// Resumes a stopped process (as `continue &`); a running one runs on.
    pub fn resume_if_stopped(&self) -> Result<()> {
        self.job(|p, live| {
            if p.state() == State::Stopped {
                control::resume(p, live)?;
            }
            Ok(())
        })
    }

    /// Gives the declared variables of `plan` memory in the process.
    pub fn sync_declared(&self, plan: &Plan) -> Result<()> {
        self.job(|p, live| Ok(live.sync_declared(p, plan)?))
    }

    /// Inserts request `id` of `plan` (see [`Live::insert`]); on failure nothing of it stays.
    pub fn insert(&self, session: &Session, plan: &Plan, id: u32) -> Result<Vec<PointReport>> {
        self.job(|p, live| Ok(live.insert(p, session, plan, id)?))
    }

    /// Inserts measure `id` of `plan` with the runtime loaded first; how many points went in.
    /// Only the runtime's injected calls and the writing of the jumps stop the process. On
    /// failure nothing of it stays in the process.
    pub fn insert_measure(&self, session: &Session, plan: &Plan, id: u32) -> Result<usize> {
        self.job(|p, live| {
            let placed = live.load_runtime(p).and_then(|()| {
                let n = live.insert(p, session, plan, id)?.len();
                Ok(n + live.start_measuring(p)?.len())
            });
            if placed.is_err() {
                let _ = live.undo(p, id);
            }
            Ok(placed?)
        })
    }

    /// Removes request `id` from the process (see [`Live::remove`]).
    pub fn remove(&self, id: u32) -> Result<usize> {
        self.job(|p, live| Ok(live.remove(p, id)?))
    }

    /// `load library PATH`: `dlopen`s it with every thread stopped; the handle.
    /// Once `interrupt` is set (Ctrl-C), gsh stops waiting: `dlopen` finishes in the process
    /// on its own, which runs on, and the result is an error saying so.
    pub fn load_library(&self, path: &Path, interrupt: &std::sync::Arc<AtomicBool>) -> Result<u64> {
        let flag = interrupt.clone();
        self.job(move |p, _| {
            Ok(Live::paused(p, |p| {
                Ok(p.with_call_interrupt(flag, |p| p.load_library(path))?)
            })?)
        })
    }

    /// `print EXPR` (with gdb's `format`): in frame `frame` of thread `tid` when stopped, from
    /// memory while running, over the declared variables' last values once gone.
    pub fn print(
        &self,
        session: &Session,
        tid: Option<i32>,
        frame: usize,
        format: Option<char>,
        expr: &str,
    ) -> Result<Printed> {
        if self.gone.is_some() {
            return self
                .with_live(|live| inspect::print_after_exit(session, live, format, expr))?
                .map_err(Into::into);
        }
        self.job(|p, live| Ok(inspect::print(session, live, p, tid, frame, format, expr)?))
    }

    /// `execute { SNIPPET }` on thread `tid` (else the first) of the stopped process.
    pub fn execute(&self, session: &Session, tid: Option<i32>, source: &str) -> Result<()> {
        self.stopped_job(|p, live| {
            let tid = pick_thread(p, tid, true);
            let rip = tid.and_then(|t| p.regs(t).ok()).map(|r| r.rip);
            let (env, near) = eval::live_env(session, live, rip)?;
            Ok(eval::execute(p, tid, &env, near, source)?)
        })
    }

    /// The frames of thread `tid` (else the first) of the stopped process: (pc, description).
    pub fn frames(&self, tid: Option<i32>) -> Result<Vec<(u64, String)>> {
        self.stopped_job(|p, live| {
            let tid = pick_thread(p, tid, true).ok_or(InferiorError::NoThreads)?;
            let r = p.regs(tid)?;
            Ok(frames::walk(live, p, &r))
        })
    }

    /// Runs `f` over frame `n` of thread `tid` of the stopped process (with `fallback`, the
    /// first thread when `tid` is gone; else globals and declared variables only).
    pub fn frame<R: Send>(
        &self,
        session: &Session,
        tid: Option<i32>,
        n: usize,
        fallback: bool,
        f: impl FnOnce(&mut FrameView<'_, '_>) -> R + Send,
    ) -> Result<R> {
        self.stopped_job(|p, live| {
            let tid = pick_thread(p, tid, fallback);
            let live: &Live = live;
            let (scope, rip) = inspect::frame_scope(session, live, p, tid, n);
            let mut view = FrameView {
                session,
                live,
                p,
                tid,
                rip,
                scope,
            };
            Ok(f(&mut view))
        })
    }

    /// What is measured: the values now while the process lives (`retire_hit`: `coverage
    /// --once` probes of blocks that ran are taken out first), else its last values.
    pub fn read_measures(&self, retire_hit: bool) -> Result<Reading> {
        let pid = self.pid();
        self.tracer.with(|p, live| {
            if retire_hit {
                live.retire_hit_probes(p)?;
            }
            reading(pid, p, live)
        })?
    }

    /// The modules loaded now, with their load biases.
    pub fn loaded(&self) -> Result<Vec<(Arc<Module>, u64)>> {
        self.with_live(|live| live.loaded().map(|(m, b)| (m.clone(), b)).collect())
    }

    /// `consult`'s stack sampling: stops the process, walks every thread's stack and resumes,
    /// into `store`, until `done`, stopped at most `cost` of the time. The sampler begins with
    /// the modules loaded now; when a stop shows code of a library loaded since, it begins
    /// again with that library too (its unwind tables indexed, its functions named).
    pub fn sample_stacks(&self, store: &Mutex<Stacks>, cost: f64, done: &AtomicBool) {
        let mut modules = match self.loaded() {
            Ok(m) => m,
            Err(e) => {
                return store
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .fail(e.to_string())
            }
        };
        loop {
            let found = StackSampler::new(&modules).run(&self.tracer, store, cost, done);
            if found.is_empty() || done.load(std::sync::atomic::Ordering::SeqCst) {
                return;
            }
            modules.extend(found);
        }
    }
}

/// `tid` if that thread still exists in `p`, else (with `fallback`) the process's first.
fn pick_thread(p: &Process, tid: Option<i32>, fallback: bool) -> Option<i32> {
    let threads = p.threads();
    let existing = tid.filter(|t| threads.iter().any(|th| th.tid == *t));
    if fallback {
        existing.or_else(|| threads.first().map(|th| th.tid))
    } else {
        existing
    }
}

/// A stop as one line: `stopped at breakpoint 2 (parse entry) in thread 4242, parse`.
fn describe_stop(live: &Live, p: &Process, stop: &Stop) -> String {
    match stop {
        Stop::Breakpoint { tid, .. } => {
            let rip = p.regs(*tid).map(|r| r.rip).unwrap_or(0);
            let bps = live.breakpoints_hit(*tid, rip);
            let at = frames::where_is(live, rip);
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

/// The frames a return address `ra` stands for: the function it returns into, as users see
/// it, then the loops of that function among `loops` that hold the call, outermost first.
fn caller_frames(live: &Live, ra: u64, loops: &HashMap<String, Vec<String>>) -> Vec<String> {
    // The call instruction is before `ra`: `ra` itself may be past the end of a function
    // whose last instruction is a call that does not return.
    let at = ra.wrapping_sub(1);
    let at = live.origin(at).map_or(at, |(_, orig)| orig);
    for (m, bias) in live.loaded() {
        let link = LinkAddr(at.wrapping_sub(bias));
        if let Some(f) = m.functions().containing(link) {
            let name = f.display_name().to_owned();
            let mut frames = Vec::new();
            if let Some(measured) = loops.get(&name) {
                frames = super::loop_measure::enclosing(m, f.id, link, |l| {
                    measured.iter().any(|x| x == l)
                });
            }
            frames.insert(0, name);
            return frames;
        }
    }
    vec![format!("{ra:#x}")]
}

fn callers(live: &Live, paths: &[PathValue], values: &[CountValue]) -> HashMap<u64, Vec<String>> {
    let loops = super::loop_measure::measured(values);
    let mut out = HashMap::new();
    for ra in paths.iter().flat_map(|p| &p.ras) {
        out.entry(*ra)
            .or_insert_with(|| caller_frames(live, *ra, &loops));
    }
    out
}

/// The live process's coverage, lines from the modules as loaded.
fn live_coverage(
    live: &Live,
    reader: Option<&crate::process::MemReader>,
) -> Result<Vec<FunctionCoverage>> {
    Ok(live.coverage.summarise(reader, |id| {
        live.loaded().find(|(m, _)| m.id == id).map(|(m, _)| &**m)
    })?)
}

/// What is measured: now when the process is alive, else its last values.
fn reading(pid: i32, p: &Process, live: &Live) -> Result<Reading> {
    let state = p.state();
    let alive = state.is_alive();
    let reader = p.reader();
    let (values, paths) = if alive {
        (live.measure.values(&reader)?, live.measure.paths(&reader)?)
    } else {
        match live.measure.final_values(pid) {
            Some(kept) => kept,
            None if !live.measure.measured_anything() => (Vec::new(), Vec::new()),
            None => return Err(InferiorError::ValuesLost(pid)),
        }
    };
    let coverage = live_coverage(live, alive.then_some(&reader))?;
    let missing = match alive {
        true => None,
        false => live.values_lost_with.map(missing_values),
    };
    Ok(Reading {
        alive,
        state,
        callers: callers(live, &paths, &values),
        values,
        paths,
        coverage,
        missing,
    })
}

/// Says which final values are missing and why, `threads` blocks having ended with the process.
fn missing_values(threads: u64) -> String {
    let them = match threads {
        1 => "1 thread".to_owned(),
        n => format!("{n} threads"),
    };
    format!(
        "the values {them} measured are missing: more threads ran at once than the \
         runtime's arena held and it could not grow, so they counted in memory of the \
         process's own, which ended with it while gsh was hands-off; with `set attached-mode \
         auto` or `traced` gsh sees the exit and keeps every value"
    )
}

/// What was measured, kept before gsh lets go of the process; `None` when nothing was.
fn kept_reading(p: &Process, live: &mut Live) -> Option<Reading> {
    if !live.measure.measured_anything() && live.coverage.is_empty() {
        return None;
    }
    live.coverage.keep(&p.reader(), None);
    let coverage = live_coverage(live, None).unwrap_or_default();
    let state = p.state();
    if !live.measure.measured_anything() {
        return Some(Reading {
            alive: false,
            state,
            values: Vec::new(),
            paths: Vec::new(),
            callers: HashMap::new(),
            coverage,
            missing: None,
        });
    }
    live.measure.snapshot(p);
    let values = live.measure.last.clone()?;
    let paths = live.measure.last_paths.clone().unwrap_or_default();
    Some(Reading {
        alive: false,
        state,
        callers: callers(live, &paths, &values),
        values,
        paths,
        coverage,
        missing: None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn is_end(e: &Event) -> bool {
        matches!(
            e,
            Event::Exited { .. } | Event::Killed { .. } | Event::Ended { .. }
        )
    }

    fn running(program: &str, arg: &str) -> Inferior {
        let launch = Launch {
            program: program.into(),
            args: vec![arg.into()],
            ..Launch::default()
        };
        let mut i = Inferior::start(&launch).expect("start the program");
        i.resume().expect("resume");
        let _ = i.take_events();
        i
    }

    /// An end the tracer meets inside a request is recorded in the process's state with no
    /// event (the stack sampler's halt meets a program's exit so during `consult`; here the
    /// request is a kill): the events still tell it, once, the process is gone, and letting
    /// go of it is no error. It was not told, and `gsh -c consult` ended with "the process
    /// is not running ... while listing modules" and "... while killing".
    #[test]
    fn an_end_met_inside_a_request_is_told_once() {
        let mut i = running("/bin/sleep", "60");
        i.tracer
            .with(|p, _| p.kill())
            .expect("tracer")
            .expect("kill");
        let events = i.take_events();
        assert_eq!(events.iter().filter(|e| is_end(e)).count(), 1, "{events:?}");
        assert!(i.gone().is_some());
        assert!(i.take_events().is_empty());
        i.finish().expect("letting go of an ended process");
    }

    /// A program stepped over its exit (a breakpoint's original instruction is its
    /// `exit_group`) is told to have exited, with its status, once: by the wait that follows
    /// the step, the events adding nothing. The step reaped the exit without recording it;
    /// the wait found no tracee and told a SIGKILL.
    #[test]
    fn a_step_over_the_exit_is_told_once() {
        let launch = Launch {
            program: "/bin/sleep".into(),
            args: vec!["60".into()],
            ..Launch::default()
        };
        let mut i = Inferior::start(&launch).expect("start the program");
        let _ = i.take_events();
        let pid = i.pid();
        i.tracer
            .with(|p, _| {
                let mut r = p.regs(pid)?;
                p.write(r.rip, &[0x0f, 0x05])?;
                r.rax = libc::SYS_exit_group as u64;
                r.rdi = 7;
                r.orig_rax = u64::MAX;
                p.set_regs(pid, &r)?;
                p.step(pid)
            })
            .expect("tracer")
            .expect("the step");
        let waited = i
            .resume_and_wait(true, None, &AtomicBool::new(false))
            .expect("wait");
        assert_eq!(waited.stop, Some(Stop::Exited(7)));
        assert!(i.gone().is_some());
        let events = i.take_events();
        assert!(!events.iter().any(is_end), "told twice: {events:?}");
        i.finish().expect("letting go of an ended process");
    }

    /// An end the background loop meets (a program exiting by itself) is told once too.
    #[test]
    fn an_exit_is_told_once() {
        let mut i = running("/bin/sleep", "0.05");
        let since = std::time::Instant::now();
        let mut ends = 0;
        while i.gone().is_none() {
            assert!(since.elapsed().as_secs() < 10, "sleep 0.05 did not end");
            ends += i.take_events().iter().filter(|e| is_end(e)).count();
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        ends += i.take_events().iter().filter(|e| is_end(e)).count();
        assert_eq!(ends, 1);
        i.finish().expect("letting go of an ended process");
    }
}
