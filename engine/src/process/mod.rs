//! Live processes under ptrace: start one or attach to one, halt and resume all its threads,
//! read and write its memory, allocate memory near its modules, inject syscalls and function
//! calls, load a library into it, follow its threads, forks, execs and exit, and detach leaving
//! it running. Every `ptrace`, `waitpid`, `process_vm_*` and `/proc` access of gsh lives here.
//!
//! # One owner
//!
//! The kernel binds a tracee to the one thread that attached it, so a [`Tracer`] owns a
//! dedicated tracer thread that makes every request. Callers hand it work with
//! [`Tracer::with`]; between jobs the thread sleeps until SIGCHLD or the next job, and keeps
//! serving a process that runs in the
//! background (forwarding signals, following threads, library loads and forks, and recording
//! user-visible stops as [`Event`]s for [`Tracer::take_events`]). The per-thread state machine
//! is in [`Process`]; nothing here is multi-threaded beyond that one channel.
//!
//! # Layout
//!
//! - `tracer.rs`: the tracer thread, launching and attaching.
//! - `control.rs`: [`Process`]: threads, halt/resume, the wait loop, forks, execs.
//! - `hold.rs`: holding one thread at a time while the others run (stack samples).
//! - `idle.rs`: looking without a stop at a thread asleep in a system call, or unmoved since
//!   its last look.
//! - `inject.rs`: injected syscalls and calls, `dlopen`.
//! - `pools.rs`: gsh's memory in the process, recognised and reused by later sessions.
//! - `leftovers.rs`: the module text compared with the files, and what an earlier gsh left.
//! - `rendezvous.rs`: the dynamic linker's `r_debug.r_brk` hook for libraries loaded later.
//! - `stale.rs`: a SIGTRAP still queued for an `int3` that injected code or a `delete` outran.
//! - `startup.rs`: an attach that meets the program in its start-up runs it to its entry.
//! - `memory.rs`, `maps.rs`, `ptrace.rs`: /proc/PID/mem, /proc/PID/maps and auxv, raw ptrace.
//! - `handsoff.rs`: letting a running process go while nothing needs the tracer, watching it
//!   with a pidfd, and seizing it again when a command needs it stopped.
//! - `wake.rs`: what the tracer thread sleeps on (SIGCHLD and jobs), so every stop is handled
//!   as soon as the kernel reports it.
//! - `waits.rs`: the descriptors a thread asleep in poll, select or epoll waits on.
//! - `fds.rs`: what a descriptor is (its `/proc/PID/fd` link, a socket's line in the
//!   process's network tables).

#![warn(missing_docs)]

mod control;
mod error;
mod exe;
pub mod fds;
mod handsoff;
mod hold;
mod idle;
mod inject;
mod leftovers;
mod maps;
mod memory;
mod pools;
mod ptrace;
mod rendezvous;
mod signals;
mod stale;
mod startup;
mod tracer;
pub mod waits;
mod wake;

use std::fmt;
use std::path::PathBuf;

pub use crate::space::AllocKind;
pub use control::{HaltTiming, Process};
pub use error::ProcessError;
pub use exe::{executable_path, is_executable_of};
pub use hold::{Held, Taken};
pub use idle::{CallSite, Looked, RESAMPLE};
pub use leftovers::{ChangeKind, TextChange};
pub use maps::{MappedModule, Mapping, UnreadableModule};
pub use memory::{ChildMemory, Kept, KeptSource, MemReader};
pub use pools::{CallChains, EarlierPools, PoolsLetGo};
pub use ptrace::signal_name;
pub use tracer::Tracer;

/// How to launch a program.
#[derive(Clone, Debug, Default)]
pub struct Launch {
    /// The executable (searched in `PATH` when it has no `/`).
    pub program: PathBuf,
    /// Its arguments, not including `argv[0]` (which is `program`).
    pub args: Vec<String>,
    /// Where its standard input comes from; inherited when `None`.
    pub stdin: Option<PathBuf>,
    /// Where its standard output goes (created or truncated); inherited when `None`.
    pub stdout: Option<PathBuf>,
    /// Extra environment variables, on top of gsh's own environment.
    pub env: Vec<(String, String)>,
}

/// Per-session callbacks the tracer thread calls while it owns a stopped process.
pub trait Hooks: Send {
    /// Shared libraries appeared (at startup once ld.so mapped the DT_NEEDED libraries, at
    /// attach, after an exec, and after each `dlopen`, when the dynamic linker's `r_brk` is hit
    /// with `r_state == RT_CONSISTENT`). Every thread is stopped.
    fn modules_changed(&mut self, _p: &mut Process, _added: &[MappedModule]) {}

    /// Thread `tid` stopped with SIGTRAP at `rip` after an `int3` (at `rip - 1`) that the
    /// tracer does not own and that is still there. A trap caught while halting is handled at
    /// the next resume; when its `int3` is gone by then, the tracer itself backs the thread up
    /// to run the restored instruction, without asking the hooks.
    fn trap(&mut self, _p: &mut Process, _tid: i32, _rip: u64) -> TrapAction {
        TrapAction::Report
    }

    /// A traced fork child appeared, stopped, sharing nothing with the parent but a copy of its
    /// memory. The tracer removes its own `int3`s and detaches the child right after this
    /// returns; the hook may first restore original code through `child`. Not called for
    /// `vfork` children, which share the parent's memory.
    fn forked(&mut self, _p: &mut Process, _child: &mut ChildMemory) {}

    /// The main thread is exiting (its `PTRACE_EVENT_EXIT` stop): the process's memory is
    /// still there to read, for the last time, when the whole process is ending.
    fn exiting(&mut self, _p: &mut Process, _tid: i32) {}

    /// The process ended while gsh was hands-off (not traced): its memory is gone, and what
    /// the hooks keep outside it (a shared mapping's file) is all that is left to read.
    fn ended(&mut self, _p: &mut Process) {}

    /// True while the hooks need the tracer to see the process run: they planted `int3`s
    /// (breakpoints, trap sites) or must see forks or the exit. While false, an attached
    /// process that runs is let go (hands-off, see [`AttachedMode`]) until a command needs it
    /// stopped. Hooks that do not say are assumed to need it.
    fn needs_tracer(&self) -> bool {
        true
    }
}

/// Hooks that do nothing: traps are reported, libraries and forks ignored.
#[derive(Clone, Copy, Debug, Default)]
pub struct NoHooks;

impl Hooks for NoHooks {
    fn needs_tracer(&self) -> bool {
        false
    }
}

/// How gsh follows an attached process while it runs.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum AttachedMode {
    /// While nothing needs the tracer ([`Hooks::needs_tracer`]), a running process is
    /// detached (instrumentation and runtime stay) and watched through a pidfd, so signals and
    /// new threads cost what they cost untraced; every thread is seized again when a command
    /// needs the process stopped. Forks, execs, thread events and fault signals are not seen
    /// meanwhile; libraries loaded meanwhile are found at the re-seize.
    #[default]
    HandsOff,
    /// Every thread stays traced while the process runs: each signal and thread creation stops
    /// in the tracer, and fault signals stop the process.
    Traced,
}

impl fmt::Display for AttachedMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            AttachedMode::HandsOff => "hands-off",
            AttachedMode::Traced => "traced",
        })
    }
}

/// What to do with a thread that hit a foreign `int3`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TrapAction {
    /// Resume the thread at this `rip`, silently.
    Resume(u64),
    /// Stop every thread and report [`Stop::Breakpoint`] (or [`Event::Breakpoint`]).
    Report,
}

/// The state of the process as a whole.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum State {
    /// Every thread is in a ptrace-stop.
    Stopped,
    /// Resumed (some threads may be stopped briefly by the tracer).
    Running,
    /// Exited with this code.
    Exited(i32),
    /// Killed by this signal.
    Signaled(i32),
    /// gsh let it go.
    Detached,
    /// It ended while gsh was hands-off, and its parent collected its exit status first.
    Ended,
}

impl State {
    /// True while gsh still controls a live process.
    pub fn is_alive(self) -> bool {
        matches!(self, State::Stopped | State::Running)
    }

    /// The stop that tells this end (an exit or a kill gsh saw), for a request that met it.
    pub fn end_stop(self) -> Option<Stop> {
        match self {
            State::Exited(code) => Some(Stop::Exited(code)),
            State::Signaled(sig) => Some(Stop::Killed(sig)),
            _ => None,
        }
    }
}

impl fmt::Display for State {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            State::Stopped => write!(f, "stopped"),
            State::Running => write!(f, "running"),
            State::Exited(code) => write!(f, "exited with code {code}"),
            State::Signaled(sig) => write!(f, "killed by {}", signal_name(*sig)),
            State::Detached => write!(f, "detached"),
            State::Ended => write!(f, "ended (its parent collected its exit status)"),
        }
    }
}

/// What one thread is doing.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ThreadState {
    /// Running (resumed by gsh).
    Running,
    /// In a ptrace-stop that gsh holds.
    Stopped,
    /// Stopped by job control (SIGSTOP and friends); it runs again on SIGCONT.
    JobStopped,
    /// Just created; its first stop has not been seen yet.
    Starting,
}

/// One thread of the process.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ThreadInfo {
    /// Its thread id.
    pub tid: i32,
    /// What it is doing.
    pub state: ThreadState,
    /// Where it is, when stopped.
    pub rip: Option<u64>,
    /// Its name (/proc/PID/task/TID/comm).
    pub name: String,
}

/// Why `cont_wait` returned.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stop {
    /// Thread `tid` hit an `int3` the hooks chose to report; `rip` is just after it.
    Breakpoint {
        /// The thread.
        tid: i32,
        /// Its `rip`, one past the `int3`.
        rip: u64,
    },
    /// Thread `tid` got a fault signal (SIGSEGV, SIGILL, SIGABRT, ...); it is delivered when
    /// the process resumes.
    Signal {
        /// The thread.
        tid: i32,
        /// The signal's number.
        signal: i32,
    },
    /// The process exited with this code.
    Exited(i32),
    /// The process was killed by this signal.
    Killed(i32),
    /// The caller's interrupt flag was raised; every thread is stopped.
    Halted,
    /// The process executed a new program; it is stopped at the new entry point with the new
    /// libraries mapped (the hooks already saw them through `modules_changed`).
    Exec,
}

/// Something that happened, for the shell to print.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Event {
    /// A thread hit a reported `int3` (see [`Stop::Breakpoint`]).
    Breakpoint {
        /// The thread.
        tid: i32,
        /// Its `rip`, one past the `int3`.
        rip: u64,
    },
    /// A thread got a fault signal (see [`Stop::Signal`]).
    Signal {
        /// The thread.
        tid: i32,
        /// The signal's number.
        signal: i32,
    },
    /// The process exited.
    Exited {
        /// The process.
        pid: i32,
        /// Its exit code.
        code: i32,
    },
    /// The process was killed by a signal.
    Killed {
        /// The process.
        pid: i32,
        /// The signal's number.
        signal: i32,
    },
    /// The process ended while gsh was hands-off; its exit status went to its parent.
    Ended {
        /// The process.
        pid: i32,
    },
    /// A thread with this id was created.
    ThreadStarted(i32),
    /// The thread with this id exited.
    ThreadExited(i32),
    /// The process forked; the child runs untraced.
    Forked {
        /// The process that forked.
        parent: i32,
        /// The new process.
        child: i32,
    },
    /// The process executed a new program.
    Exec {
        /// The process.
        pid: i32,
        /// The new program.
        path: PathBuf,
    },
    /// A library was mapped (seen at the dynamic linker's rendezvous).
    LibraryLoaded {
        /// The library's file.
        path: PathBuf,
    },
}

impl fmt::Display for Event {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Event::Breakpoint { tid, rip } => {
                write!(f, "[thread {tid} stopped at breakpoint {:#x}]", rip - 1)
            }
            Event::Signal { tid, signal } => {
                write!(f, "[thread {tid} received {}]", signal_name(*signal))
            }
            Event::Exited { pid, code } => write!(f, "[process {pid} exited with code {code}]"),
            Event::Killed { pid, signal } => {
                write!(f, "[process {pid} killed by {}]", signal_name(*signal))
            }
            Event::Ended { pid } => write!(
                f,
                "[process {pid} ended while gsh was hands-off; its parent collected its exit status]"
            ),
            Event::ThreadStarted(tid) => write!(f, "[new thread {tid}]"),
            Event::ThreadExited(tid) => write!(f, "[thread {tid} exited]"),
            Event::Forked { parent, child } => {
                write!(
                    f,
                    "[process {parent} forked {child}; the child runs untraced]"
                )
            }
            Event::Exec { pid, path } => {
                write!(
                    f,
                    "[process {pid} is executing new program {}]",
                    path.display()
                )
            }
            Event::LibraryLoaded { path } => write!(f, "[library loaded: {}]", path.display()),
        }
    }
}

impl fmt::Display for Stop {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Stop::Breakpoint { tid, rip } => {
                write!(f, "thread {tid} stopped at breakpoint {:#x}", rip - 1)
            }
            Stop::Signal { tid, signal } => {
                write!(f, "thread {tid} received {}", signal_name(*signal))
            }
            Stop::Exited(code) => write!(f, "exited with code {code}"),
            Stop::Killed(sig) => write!(f, "killed by {}", signal_name(*sig)),
            Stop::Halted => write!(f, "halted"),
            Stop::Exec => write!(f, "executed a new program"),
        }
    }
}
