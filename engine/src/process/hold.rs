//! Holding one thread at a time while the others run ([`Process::hold_each`]): what a stack
//! sample needs, since a thread's registers and stack are its own. A halt stops every thread
//! and resumes them together, so the first thread to stop waits for the last; with two
//! computing threads on two CPUs that held each thread 5% to 10% of the time at `consult
//! --cost 5`, where its own walk is about 100 us.
//!
//! The tracer thread stays the one owner of `waitpid`: each thread is interrupted and waited
//! for by its id alone (`waitpid(tid)`), so the other threads' stops stay with the kernel for
//! the background loop, as they would have while the job ran. A thread that stops for another
//! reason before the interrupt (a signal, a breakpoint, a clone, its exit stop) is recorded as
//! a halt records it: stopped, its stop deferred for the tracer after the job, and looked at
//! where it is. A thread that ends is dropped, as the halt drops it.
//!
//! While gsh is hands-off (an attached process that nothing needs the tracer for), each thread
//! is seized alone, interrupted, looked at and detached, the others never traced: seizing
//! them all for a sample brought the process back under the tracer, and the tracer let it go
//! again after the job by halting every thread.
//!
//! [`Process::hold_each_since`] stops only the threads it must:
//!
//! - one provably asleep since in the call its last look saw it in is given that look again,
//!   held for no time (`idle.rs`);
//! - one asleep in a system call is looked at from what `/proc` shows of it there (the call,
//!   its stack pointer and pc), without a stop, when that is enough for the caller's look
//!   (a stack walk that needs no other register) and the thread provably did not run
//!   meanwhile. A stop wakes a sleeping thread, and some calls then return to the program
//!   rather than restart (`epoll_wait` returns `EINTR`): an event loop took one more turn per
//!   sample.

use std::time::{Duration, Instant};

use nix::errno::Errno;

use super::control::{is_zombie, Process};
use super::error::ProcessError;
use super::idle::{stop_began, CallSite, Looked};
use super::ptrace::{self, WaitEvent};
use super::{State, ThreadState};

/// What [`Process::hold_each`] saw of one thread.
#[derive(Clone, Debug)]
pub struct Held<T> {
    /// The thread.
    pub tid: i32,
    /// What the caller's look at it returned.
    pub seen: T,
    /// How long it was held: from when it stopped (the interrupt, later by what the thread
    /// then waited for a CPU before it could stop, by its `schedstat`; when the tracer saw it
    /// stopped where that is not known) to its resume. A thread stopped for something else,
    /// whose stop the tracer serves after the job, is held from when the tracer saw it until
    /// the last thread's look ends; one already stopped when the call began, from then. Zero
    /// for a thread not stopped ([`Held::taken`]).
    pub held: Duration,
    /// How `seen` was taken.
    pub taken: Taken,
}

/// How a thread was looked at ([`Process::hold_each_since`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Taken {
    /// Stopped, its registers read.
    Stopped,
    /// Not stopped: asleep in a system call, looked at from what `/proc` shows of it there.
    Asleep,
    /// Not stopped: it has not run since its last look, given again.
    Again,
}

impl<T> Held<T> {
    /// Thread `tid` not stopped, seen as `taken` says.
    fn unstopped(tid: i32, seen: T, taken: Taken) -> Held<T> {
        Held {
            tid,
            seen,
            held: Duration::ZERO,
            taken,
        }
    }
}

/// How long a thread may take to stop after its interrupt (as a halt waits).
const STOP_DEADLINE: Duration = Duration::from_secs(5);

/// How one thread's stop went.
enum Caught {
    /// Stopped at the interrupt (or a job-control stop): resumed as soon as it is looked at.
    Ours(Instant),
    /// Stopped for another reason, kept for the tracer: it stays stopped.
    Kept(Instant),
    /// It ended, or is no longer ours: nothing to look at.
    Gone,
}

impl Process {
    /// Stops each thread of the running process in turn, the others running on, calls `look`
    /// with the process, the thread and its registers while that thread alone is held, and
    /// lets it run again before stopping the next. Returns what `look` returned for each
    /// thread looked at, with how long it was held ([`Held::held`]). Threads that end or
    /// start meanwhile are passed over. The process must be running.
    pub fn hold_each<T: Clone>(
        &mut self,
        look: impl FnMut(&Process, i32, &libc::user_regs_struct) -> T,
    ) -> Result<Vec<Held<T>>, ProcessError> {
        self.hold_each_since(&mut Looked::default(), look, |_, _, _| None)
    }

    /// [`Process::hold_each`], stopping only the threads it must (see the module's doc):
    /// each that has not run since `looked`'s look at it is given that look again
    /// ([`Taken::Again`]); each asleep in a system call is given to `peek` with the call as
    /// `/proc` shows it, and is stopped only when `peek` returns `None` or the thread ran
    /// meanwhile ([`Taken::Asleep`]). `looked` keeps this call's looks for the next.
    pub fn hold_each_since<T: Clone>(
        &mut self,
        looked: &mut Looked<T>,
        mut look: impl FnMut(&Process, i32, &libc::user_regs_struct) -> T,
        mut peek: impl FnMut(&Process, i32, &CallSite) -> Option<T>,
    ) -> Result<Vec<Held<T>>, ProcessError> {
        const DURING: &str = "taking a stack sample";
        self.alive(DURING)?;
        if self.state != State::Running {
            return Err(ProcessError::NotStopped);
        }
        let began = Instant::now();
        if self.hands_off.is_some() {
            // Libraries loaded meanwhile reach the hooks only when the tracer compares the
            // maps (after the job), as a halt's seizing everything had it do: the search
            // learns them so while gsh is hands-off, the maps read only when the dynamic
            // linker's hook counted a change.
            self.note_untraced_loads();
            let out = self.hold_each_untraced(looked, look, peek)?;
            looked.keep_only(&out.iter().map(|h| h.tid).collect::<Vec<_>>());
            return Ok(out);
        }
        let mut out = Vec::new();
        // Held until the end: those whose stops the tracer serves after the job.
        let mut kept = Vec::new();
        let tids: Vec<i32> = self.threads.keys().copied().collect();
        for tid in tids {
            let state = self.threads.get(&tid).map(|t| t.state);
            if state == Some(ThreadState::Running) {
                if let Some(held) = self.unstopped(looked, tid, &mut peek) {
                    out.push(held);
                    continue;
                }
            }
            let before = looked.runs(self.pid, tid);
            let asked = Instant::now();
            let caught = match state {
                None | Some(ThreadState::Starting) => continue,
                Some(ThreadState::Stopped) => Caught::Kept(began),
                Some(ThreadState::Running | ThreadState::JobStopped) => self.catch(tid, DURING)?,
            };
            let at = match caught {
                Caught::Gone => continue,
                Caught::Ours(at) | Caught::Kept(at) => at,
            };
            let Ok(r) = ptrace::regs(tid) else {
                // Killed while stopped: its exit is on its way to the background loop.
                continue;
            };
            let seen = look(self, tid, &r);
            let ours = matches!(caught, Caught::Ours(_));
            let at_stop = looked.stopped(self.pid, tid, &r, ours, &seen);
            let at = if ours {
                stop_began(asked, at, before, at_stop)
            } else {
                at
            };
            if let Caught::Kept(_) = caught {
                kept.push((out.len(), at));
            } else {
                self.resume_thread(tid)?;
            }
            out.push(Held {
                tid,
                seen,
                held: at.elapsed(),
                taken: Taken::Stopped,
            });
        }
        let end = Instant::now();
        for (i, at) in kept {
            out[i].held = end.saturating_duration_since(at);
        }
        looked.keep_only(&out.iter().map(|h| h.tid).collect::<Vec<_>>());
        Ok(out)
    }

    /// Running thread `tid` looked at without a stop, where it can be (the module's doc): its
    /// last look given again if it has not run since, else `peek` at the call `/proc` shows
    /// it asleep in.
    fn unstopped<T: Clone>(
        &self,
        looked: &mut Looked<T>,
        tid: i32,
        peek: &mut impl FnMut(&Process, i32, &CallSite) -> Option<T>,
    ) -> Option<Held<T>> {
        if let Some(seen) = looked.still(tid) {
            return Some(Held::unstopped(tid, seen, Taken::Again));
        }
        let seen = looked.peek(self.pid, tid, |call| peek(self, tid, call))?;
        Some(Held::unstopped(tid, seen, Taken::Asleep))
    }

    /// Interrupts running thread `tid` and waits for its stop, by its id alone.
    fn catch(&mut self, tid: i32, during: &str) -> Result<Caught, ProcessError> {
        // A leader past its exit stop whose process runs on is a zombie: no stop comes.
        if tid == self.pid && self.leader_exiting && is_zombie(tid) {
            return Ok(Caught::Gone);
        }
        match ptrace::interrupt(tid) {
            Ok(()) => {}
            // Released without a word (the thread whose id an `execve` in another thread
            // took): dropped, as a halt drops it. The leader's exit comes as a status.
            Err(ProcessError::Ptrace {
                errno: Errno::ESRCH,
                ..
            }) => {
                if tid != self.pid {
                    self.forget_thread(tid);
                }
                return Ok(Caught::Gone);
            }
            Err(e) => return Err(e),
        }
        let Some(ev) = self.wait_for(tid)? else {
            return Ok(Caught::Gone);
        };
        let at = Instant::now();
        match ev {
            WaitEvent::Exited(_) | WaitEvent::Signaled(_) => {
                self.note_halt_stop(tid, ev)?;
                if !self.state.is_alive() {
                    return Err(self.gone(during));
                }
                Ok(Caught::Gone)
            }
            // The interrupt's stop, or a job-control stop (resumed by listening again).
            WaitEvent::EventStop(_) => {
                self.note_halt_stop(tid, ev)?;
                Ok(Caught::Ours(at))
            }
            // Another stop came first (the kernel then drops the interrupt): the tracer
            // serves it after the job, the thread stopped till then, as after a halt.
            _ => {
                self.note_halt_stop(tid, ev)?;
                Ok(Caught::Kept(at))
            }
        }
    }

    /// The next stop of thread `tid` (`None` when it is no longer ours, or neither stops nor
    /// exists within [`STOP_DEADLINE`]), sleeping until the kernel reports one.
    fn wait_for(&mut self, tid: i32) -> Result<Option<WaitEvent>, ProcessError> {
        let started = Instant::now();
        loop {
            match ptrace::wait(tid, true) {
                Ok(Some((_, ev))) => return Ok(Some(ev)),
                Ok(None) => {}
                // Not a tracee of ours any more: the background loop tells what became of it.
                Err(Errno::ECHILD) => return Ok(None),
                Err(e) => return Err(ProcessError::ptrace("waitpid", tid, e)),
            }
            let waited = started.elapsed();
            if waited > STOP_DEADLINE {
                if !self.is_our_thread(tid) {
                    return Ok(None);
                }
                return Err(ProcessError::Inject {
                    what: "stack sample".into(),
                    tid,
                    detail: "the thread neither stopped nor exited within 5 s".into(),
                });
            }
            self.waker
                .wait(Some((STOP_DEADLINE - waited).min(super::wake::HALT_POLL)));
        }
    }

    /// [`Process::hold_each`] while gsh is hands-off: each thread seized alone, interrupted,
    /// looked at and let go again, with the signal it stopped for, if any.
    fn hold_each_untraced<T: Clone>(
        &mut self,
        looked: &mut Looked<T>,
        mut look: impl FnMut(&Process, i32, &libc::user_regs_struct) -> T,
        mut peek: impl FnMut(&Process, i32, &CallSite) -> Option<T>,
    ) -> Result<Vec<Held<T>>, ProcessError> {
        let mut out = Vec::new();
        let tids: Vec<i32> = std::fs::read_dir(format!("/proc/{}/task", self.pid))
            .map(|d| {
                d.filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok())
                    .collect()
            })
            .unwrap_or_default();
        for tid in tids {
            if let Some(held) = self.unstopped(looked, tid, &mut peek) {
                out.push(held);
                continue;
            }
            let before = looked.runs(self.pid, tid);
            // Exited but not collected, or gone: never runs again.
            if ptrace::seize(tid, 0).is_err() {
                continue;
            }
            let asked = Instant::now();
            if ptrace::interrupt(tid).is_err() {
                let _ = ptrace::detach(tid, 0);
                continue;
            }
            let ev = match self.wait_for(tid) {
                Ok(Some(ev)) => ev,
                Ok(None) => continue,
                Err(e) => {
                    let _ = ptrace::detach(tid, 0);
                    return Err(e);
                }
            };
            let at = Instant::now();
            let signal = match ev {
                WaitEvent::Exited(_) | WaitEvent::Signaled(_) => continue,
                WaitEvent::Signal(sig) => sig,
                _ => 0,
            };
            let mut at = at;
            let seen = ptrace::regs(tid).ok().map(|r| {
                let seen = look(self, tid, &r);
                let ours = signal == 0;
                let at_stop = looked.stopped(self.pid, tid, &r, ours, &seen);
                if ours {
                    at = stop_began(asked, at, before, at_stop);
                }
                seen
            });
            // From a signal-delivery-stop the signal rides the detach; from an interrupt
            // or a job-control stop nothing does (the thread stays in a group stop).
            let _ = ptrace::detach(tid, signal);
            if let Some(seen) = seen {
                out.push(Held {
                    tid,
                    seen,
                    held: at.elapsed(),
                    taken: Taken::Stopped,
                });
            }
        }
        Ok(out)
    }
}
