//! Hands-off running. Under ptrace every signal a thread receives is a signal-delivery-stop and
//! every new thread two stops, each a round trip through the tracer; no ptrace option removes
//! them, so a signal costs several times its native 4 µs however fast the tracer is. While
//! nothing needs the tracer (no breakpoint or trap site of the hooks', the dynamic linker hook
//! a jump rather than an `int3`, [`AttachedMode::HandsOff`]), a running attached process is
//! let go: every thread is detached, leaving trampolines, the runtime and the hooks' code in
//! place, and the process is watched through a pidfd for its end. The next request that needs
//! ptrace (`halt`, and through it inserting, injecting, `detach`, `kill`, `cont_wait`) seizes
//! every thread again ([`seize_all`](super::tracer::seize_all), until the thread list is
//! stable), lists the threads that came and went, and rescans the mappings when the dynamic
//! linker's hook counted a change of its link map meanwhile (its trampoline counts each call
//! before its signal), so libraries loaded meanwhile reach the hooks as after a `dlopen`.
//!
//! Not seen while hands-off: forks (children keep the instrumentation's code), execs, each
//! thread's start and exit, fault signals (the program's own disposition applies: a crash is
//! seen as the process's end by that signal). The exit status comes from `waitid(P_PIDFD,
//! WNOWAIT)` when gsh's process is the parent (nothing is reaped), else from
//! /proc/PID/stat while the process is a zombie; when its parent reaped it first the end is
//! [`State::Ended`].

use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};

use super::control::{is_fault, Process, Thread};
use super::error::ProcessError;
use super::ptrace::WaitEvent;
use super::{AttachedMode, Event, Hooks, State, ThreadInfo, ThreadState};

/// What gsh keeps of a process it let go.
pub(crate) struct HandsOff {
    /// Readable once the process has ended.
    pidfd: OwnedFd,
    /// Its threads when gsh let go, to say at the re-seize which came and went.
    threads: Vec<i32>,
}

/// A pidfd for `pid` (Linux 5.3).
fn pidfd_open(pid: i32) -> Result<OwnedFd, ProcessError> {
    // SAFETY: pidfd_open takes two integers and returns a new file descriptor or -1.
    let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) };
    if fd < 0 {
        return Err(ProcessError::ptrace(
            "pidfd_open",
            pid,
            nix::errno::Errno::last(),
        ));
    }
    // SAFETY: `fd` was just returned to us by the kernel and nothing else owns it.
    Ok(unsafe { OwnedFd::from_raw_fd(fd as RawFd) })
}

impl Process {
    /// A descriptor, in gsh, of the open file that is the process's descriptor `fd`
    /// (`pidfd_getfd`, Linux 5.6; the tracer has the access it needs). gsh's copy keeps the
    /// file open after the process is gone: a memfd the process maps shared stays readable.
    pub fn take_fd(&self, fd: i32) -> Result<std::fs::File, ProcessError> {
        let pidfd = pidfd_open(self.pid)?;
        // SAFETY: pidfd_getfd takes a pidfd, the target's descriptor number and flags (0), and
        // returns a new descriptor in this process or -1.
        let got = unsafe { libc::syscall(libc::SYS_pidfd_getfd, pidfd.as_raw_fd(), fd, 0) };
        if got < 0 {
            return Err(ProcessError::ptrace(
                "pidfd_getfd",
                self.pid,
                nix::errno::Errno::last(),
            ));
        }
        // SAFETY: `got` was just returned by the kernel and nothing else owns it.
        Ok(std::fs::File::from(unsafe {
            OwnedFd::from_raw_fd(got as RawFd)
        }))
    }
}

/// True when `fd` is readable now (a pidfd: its process has ended).
fn readable(fd: RawFd) -> bool {
    let mut p = libc::pollfd {
        fd,
        events: libc::POLLIN,
        revents: 0,
    };
    // SAFETY: one valid pollfd for the call's duration; timeout 0 never blocks.
    unsafe { libc::poll(&mut p, 1, 0) == 1 && p.revents & libc::POLLIN != 0 }
}

/// How the process behind `pidfd` ended, without reaping it: `waitid(WNOWAIT)` when it is a
/// child of gsh's process, else the zombie's /proc/PID/stat; `None` when neither says.
fn exit_state(pid: i32, pidfd: RawFd) -> Option<State> {
    // SAFETY: an all-zero siginfo_t is a valid value (plain integers and unions of them).
    let mut si: libc::siginfo_t = unsafe { std::mem::zeroed() };
    // SAFETY: `si` is a valid out-pointer; WNOWAIT leaves the child for its parent to reap,
    // and WNOHANG never blocks. ECHILD (not our child) is an error return, nothing else.
    let r = unsafe {
        libc::waitid(
            libc::P_PIDFD,
            pidfd as libc::id_t,
            &mut si,
            libc::WEXITED | libc::WNOHANG | libc::WNOWAIT,
        )
    };
    // SAFETY: after a successful waitid the kernel filled si_pid and si_status.
    if r == 0 && unsafe { si.si_pid() } == pid {
        // SAFETY: as above.
        let status = unsafe { si.si_status() };
        return Some(match si.si_code {
            libc::CLD_EXITED => State::Exited(status),
            _ => State::Signaled(status),
        });
    }
    // Field 52, exit_code, in waitpid's encoding; fields are counted after the name's `)`.
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let rest = &stat[stat.rfind(')')? + 1..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    if fields.first() != Some(&"Z") && fields.first() != Some(&"X") {
        return None;
    }
    let code: i32 = fields.get(52 - 3)?.parse().ok()?;
    Some(if libc::WIFSIGNALED(code) {
        State::Signaled(libc::WTERMSIG(code))
    } else {
        State::Exited(libc::WEXITSTATUS(code))
    })
}

impl Process {
    /// How gsh follows this process while it runs (only an attached one is ever let go).
    pub fn attached_mode(&self) -> AttachedMode {
        self.mode
    }

    /// Chooses how gsh follows this process while it runs; `Traced` takes hold again at once.
    pub fn set_attached_mode(&mut self, mode: AttachedMode) -> Result<(), ProcessError> {
        self.mode = mode;
        if mode == AttachedMode::Traced && self.state.is_alive() {
            self.reseize()?;
        }
        Ok(())
    }

    /// True while gsh has let the running process go (see the module documentation).
    pub fn is_hands_off(&self) -> bool {
        self.hands_off.is_some()
    }

    /// The pidfd to sleep on while hands-off.
    pub(crate) fn exit_fd(&self) -> Option<RawFd> {
        self.hands_off.as_ref().map(|h| h.pidfd.as_raw_fd())
    }

    /// Every thread of the process as /proc lists it, all running (while hands-off).
    pub(crate) fn untraced_threads(&self) -> Vec<ThreadInfo> {
        let mut tids: Vec<i32> = std::fs::read_dir(format!("/proc/{}/task", self.pid))
            .map(|d| {
                d.filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok())
                    .collect()
            })
            .unwrap_or_default();
        tids.sort_unstable();
        tids.into_iter()
            .map(|tid| ThreadInfo {
                tid,
                state: ThreadState::Running,
                rip: None,
                name: std::fs::read_to_string(format!("/proc/{}/task/{tid}/comm", self.pid))
                    .map(|s| s.trim_end().to_owned())
                    .unwrap_or_default(),
            })
            .collect()
    }

    /// Cheap test: could the running process be let go now?
    fn may_let_go(&self, hooks: &dyn Hooks) -> bool {
        !self.started
            && self.mode == AttachedMode::HandsOff
            && self.state == State::Running
            && self.hands_off.is_none()
            && self.deferred.is_empty()
            && self.early_children.is_empty()
            && self.held_children.is_empty()
            // An `int3` at r_brk would kill the untraced program at its next dlopen.
            && self.rendezvous.as_ref().is_none_or(|rv| rv.is_jump())
            && self
                .threads
                .values()
                .all(|t| !t.job && t.state == ThreadState::Running)
            && !hooks.needs_tracer()
    }

    /// Lets the running process go when nothing needs the tracer (and takes a process let go
    /// back when something does again): halts it, and detaches every thread with its pending
    /// signals. Stops caught while halting that are more than a plain signal are left to the
    /// tracer (the process is resumed traced and the next call tries again). True when gsh is
    /// now hands-off.
    pub(crate) fn let_go_if_idle(&mut self, hooks: &dyn Hooks) -> Result<bool, ProcessError> {
        if self.hands_off.is_some() && hooks.needs_tracer() {
            // Something now needs the tracer that did not when the process was let go (its
            // runtime could not grow the arena gsh holds: the exit must be seen to keep the
            // values): take it back, running.
            self.reseize()?;
            return Ok(false);
        }
        if !self.may_let_go(hooks) {
            return Ok(false);
        }
        let pidfd = pidfd_open(self.pid)?;
        self.halt()?;
        let mut plain = true;
        for &(tid, ev) in &self.deferred {
            plain &= matches!(ev, WaitEvent::Signal(sig)
                if !is_fault(sig) && !self.is_rendezvous_signal(tid, sig));
        }
        if !plain
            || self.threads.values().any(|t| t.job)
            || !self.early_children.is_empty()
            || !self.held_children.is_empty()
        {
            self.resume()?;
            return Ok(false);
        }
        let deferred: Vec<(i32, WaitEvent)> = self.deferred.drain(..).collect();
        for (tid, ev) in deferred {
            if let WaitEvent::Signal(sig) = ev {
                self.keep_signal(tid, sig);
            }
        }
        let threads = self.threads.keys().copied().collect();
        self.detach_threads();
        self.early_threads.clear();
        self.hands_off = Some(HandsOff { pidfd, threads });
        self.runs_again();
        Ok(true)
    }

    /// While hands-off: records the process's end if its pidfd says so, and tells `hooks`
    /// ([`Hooks::ended`]). True while hands-off or when it just ended so (the tracer has no
    /// tracee to wait for).
    pub(crate) fn poll_hands_off_with(&mut self, hooks: &mut dyn Hooks) -> bool {
        let was = self.hands_off.is_some();
        let off = self.poll_hands_off();
        if was && self.hands_off.is_none() {
            hooks.ended(self);
        }
        off
    }

    /// [`Process::poll_hands_off_with`] without telling the hooks (they read what they kept
    /// when asked).
    pub(crate) fn poll_hands_off(&mut self) -> bool {
        let Some(off) = &self.hands_off else {
            return false;
        };
        let fd = off.pidfd.as_raw_fd();
        if readable(fd) {
            let state = exit_state(self.pid, fd).unwrap_or(State::Ended);
            self.hands_off = None;
            self.threads.clear();
            self.deferred.clear();
            self.state = state;
            let pid = self.pid;
            self.push_event(match state {
                State::Exited(code) => Event::Exited { pid, code },
                State::Signaled(signal) => Event::Killed { pid, signal },
                _ => Event::Ended { pid },
            });
        }
        true
    }

    /// Takes hold of a process gsh let go: seizes every thread (running, traced again), says
    /// which threads came and went meanwhile, and has the mappings rescanned if the link map
    /// may have changed. Fails with [`ProcessError::Gone`] when the process ended meanwhile.
    pub(crate) fn reseize(&mut self) -> Result<(), ProcessError> {
        if self.hands_off.is_none() {
            return Ok(());
        }
        let ended = |p: &mut Process| {
            p.poll_hands_off();
            if p.state.is_alive() {
                None
            } else {
                Some(p.gone("taking hold of it again"))
            }
        };
        if let Some(e) = ended(self) {
            return Err(e);
        }
        let tids = match super::tracer::seize_all(self.pid) {
            Ok(t) => t,
            Err(e) => {
                // It may have ended between the look at its pidfd and the seize.
                std::thread::sleep(std::time::Duration::from_millis(1));
                return Err(ended(self).unwrap_or(e));
            }
        };
        let Some(off) = self.hands_off.take() else {
            return Ok(());
        };
        for &t in &tids {
            if !off.threads.contains(&t) {
                self.push_event(Event::ThreadStarted(t));
            }
        }
        for &t in &off.threads {
            if !tids.contains(&t) {
                self.push_event(Event::ThreadExited(t));
            }
        }
        self.threads = tids
            .iter()
            .map(|&t| (t, Thread::new(ThreadState::Running)))
            .collect();
        self.state = State::Running;
        // Libraries loaded meanwhile: the next flush compares the maps with what the hooks
        // know, when the dynamic linker's hook counted a change.
        self.note_untraced_loads();
        Ok(())
    }
}
