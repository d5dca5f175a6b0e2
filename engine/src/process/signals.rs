//! The signals gsh keeps for a thread, and how each reaches it. A signal reaches a traced
//! thread as a signal-delivery-stop, and the thread gets it only when the tracer passes it on
//! with the request that resumes the thread *from that very stop* (`PTRACE_CONT`'s or
//! `PTRACE_DETACH`'s data). From any other stop the kernel ignores that data (a group-stop, an
//! interrupt or other event stop) or sends it as a new signal (a syscall stop, `SI_KERNEL`).
//! And a thread that gsh runs from its delivery-stop for something of its own (an injected
//! call, a single step, a thread let take a queued SIGTRAP) leaves that stop with no signal:
//! the kernel drops the signal. gsh kept such signals as the thread's pending ones and passed
//! them on at its next resume whatever stop it was in, and they were lost (#13: a SIGSEGV sent
//! during an injected `nanosleep`, a signal sent while a call waited for a thread outside the
//! allocator, one met while stepping over a breakpoint).
//!
//! So a kept signal ([`Kept`]) holds its siginfo, read at its delivery-stop. When the thread
//! resumes ([`Process::signals_out`]), the kept signal whose siginfo is the stop's own (the
//! thread never left that delivery-stop) rides the resume with everything the kernel put in
//! it; every other is sent again with `tgkill` and awaited, and when it stops the thread its
//! delivery-stop gets its original siginfo back (`PTRACE_SETSIGINFO`): a handler sees the
//! faulting address and `si_code` of a real fault, or the sender of a `kill`, never gsh's
//! `tgkill`. A signal sent again is handled when it arrives as it would have been when it
//! first came, unless it was then: a fault the user was shown is passed on, not reported a
//! second time. One mechanism for every path that keeps a signal: none needs
//! to know which stop its thread will be in when it resumes.
//!
//! Not exact: a thread detached (`detach`, hands-off) gets the signals sent again untraced,
//! with gsh's `tgkill` siginfo; two kept instances of one standard signal sent again together
//! become one, as two sent at once natively do (the kernel queues one of each number).

use super::control::{is_fault, Process};
use super::ptrace;

/// `si_code` of a signal sent by `tgkill`.
pub(crate) const SI_TKILL: i32 = -6;

/// A signal kept for a thread, to pass on when it runs again.
#[derive(Clone, Copy)]
pub(crate) struct Kept {
    pub(crate) signal: i32,
    /// Its siginfo as read at its delivery-stop (`None` where the kernel would not say).
    info: Option<libc::siginfo_t>,
    /// Reported already (a fault stop the user saw): when it comes again it is passed on.
    reported: bool,
}

impl std::fmt::Debug for Kept {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Kept")
            .field("signal", &self.signal)
            .field("si_code", &self.info.map(|i| i.si_code))
            .field("reported", &self.reported)
            .finish()
    }
}

/// The bytes of a siginfo, to compare two.
fn bytes(info: &libc::siginfo_t) -> &[u8] {
    // SAFETY: siginfo_t is 128 bytes of C integers with no padding, every byte written (it
    // starts zeroed and the kernel copies out the whole struct); the slice borrows `info`.
    unsafe {
        std::slice::from_raw_parts(
            (info as *const libc::siginfo_t).cast::<u8>(),
            std::mem::size_of::<libc::siginfo_t>(),
        )
    }
}

fn same(a: &Option<libc::siginfo_t>, b: &Option<libc::siginfo_t>) -> bool {
    matches!((a, b), (Some(a), Some(b)) if bytes(a) == bytes(b))
}

impl Process {
    /// Keeps `signal`, whose delivery-stop thread `tid` is in now, to pass on when the thread
    /// runs again (whatever stop it is in then). A fault raised again by the same instruction
    /// (the same siginfo, from the kernel) is kept once.
    pub(crate) fn keep_signal(&mut self, tid: i32, signal: i32) {
        self.keep(tid, signal, false);
    }

    /// [`Process::keep_signal`] for a signal reported as a stop (a fault): when it has to be
    /// sent again, it is passed on when it comes back, not reported again.
    pub(crate) fn keep_reported(&mut self, tid: i32, signal: i32) {
        self.keep(tid, signal, true);
    }

    fn keep(&mut self, tid: i32, signal: i32, reported: bool) {
        if !self.threads.contains_key(&tid) {
            return;
        }
        let kept = match ptrace::siginfo(tid) {
            Ok(now) => self.resent(tid, signal, &now).unwrap_or(Kept {
                signal,
                info: Some(now),
                reported,
            }),
            Err(_) => Kept {
                signal,
                info: None,
                reported,
            },
        };
        let Some(t) = self.threads.get_mut(&tid) else {
            return;
        };
        let raised = kept.info.is_some_and(|i| i.si_code > 0);
        if raised && t.pending.iter().any(|k| same(&k.info, &kept.info)) {
            return;
        }
        t.pending.push(kept);
    }

    /// True when the delivery-stop thread `tid` is in is that of a signal gsh sent again
    /// ([`Process::signals_out`]) after reporting it: kept again with its original siginfo,
    /// to be passed on, not reported twice. One not reported before is left to be handled as
    /// when it first came (its siginfo put back). Costs nothing while none is awaited.
    pub(crate) fn reported_again(&mut self, tid: i32, signal: i32) -> bool {
        let Some(kept) = self.arrived_again(tid, signal) else {
            return false;
        };
        if kept.reported {
            if let Some(t) = self.threads.get_mut(&tid) {
                t.pending.push(kept);
            }
        }
        kept.reported
    }

    /// True when the delivery-stop thread `tid` is in is that of a signal gsh sent again: it
    /// is kept again as it was (for a thread running injected code, whose signals all wait
    /// for the program to run again).
    pub(crate) fn kept_again(&mut self, tid: i32, signal: i32) -> bool {
        let Some(kept) = self.arrived_again(tid, signal) else {
            return false;
        };
        if let Some(t) = self.threads.get_mut(&tid) {
            t.pending.push(kept);
        }
        true
    }

    /// The kept signal gsh sent again whose delivery-stop thread `tid` is in now, if it is
    /// one, with its original siginfo put back into the stop.
    fn arrived_again(&mut self, tid: i32, signal: i32) -> Option<Kept> {
        if self.threads.get(&tid).is_none_or(|t| t.resent.is_empty()) {
            return None;
        }
        let now = ptrace::siginfo(tid).ok()?;
        self.resent(tid, signal, &now)
    }

    /// When `now`, the siginfo of thread `tid`'s delivery-stop for `signal`, is gsh's own
    /// `tgkill` sending a kept signal again: that kept signal, its original siginfo put back
    /// into the stop (so the thread gets it), no longer awaited.
    fn resent(&mut self, tid: i32, signal: i32, now: &libc::siginfo_t) -> Option<Kept> {
        let t = self.threads.get_mut(&tid)?;
        if t.resent.is_empty() || now.si_code != SI_TKILL {
            return None;
        }
        // SAFETY: a signal sent by tgkill (SI_TKILL) carries the sender's pid.
        if unsafe { now.si_pid() } != std::process::id() as i32 {
            return None;
        }
        let at = t.resent.iter().position(|k| k.signal == signal)?;
        let mut kept = t.resent.remove(at);
        match kept.info {
            Some(info) => {
                let _ = ptrace::set_siginfo(tid, &info);
            }
            None => kept.info = Some(*now),
        }
        Some(kept)
    }

    /// Takes the signals kept for stopped thread `tid`, which is about to be resumed: returns
    /// the one to pass on with the resuming request (0 for none), the kept signal whose
    /// delivery-stop the thread is still in, when `may_carry`. Every other is sent again with
    /// `tgkill` and awaited (see the module's documentation). With `report`, a fault signal
    /// kept without being reported (one a halt caught before a thread was chosen for injected
    /// code) is sent again even from its own stop, so that the tracer sees it come and
    /// reports it, as it would have.
    pub(crate) fn signals_out(&mut self, tid: i32, may_carry: bool, report: bool) -> i32 {
        let pid = self.pid;
        let Some(t) = self.threads.get_mut(&tid) else {
            return 0;
        };
        if t.pending.is_empty() {
            return 0;
        }
        let kept = std::mem::take(&mut t.pending);
        let now = ptrace::siginfo(tid).ok();
        let mut carry = 0;
        for k in kept {
            let unreported = report && !k.reported && is_fault(k.signal);
            if may_carry && carry == 0 && !unreported && same(&k.info, &now) {
                carry = k.signal;
            } else if ptrace::tgkill(pid, tid, k.signal).is_ok() {
                t.resent.push(k);
            }
        }
        carry
    }
}
