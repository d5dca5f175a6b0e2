//! Traps that outlive their `int3`. A thread that executes one of gsh's `int3`s (a trap site,
//! a breakpoint) has a SIGTRAP queued from that instant, but when gsh's interrupt reaches it
//! first (the kernel reports an interrupt before dequeuing signals), its interrupt stop comes
//! first and the SIGTRAP stays queued, with `rip` just past the `int3`, until the thread is
//! next resumed. Two things may happen in between, each once a source of damage:
//!
//! - gsh runs injected code on that thread: the queued SIGTRAP is reported at once, at the
//!   stub's first instruction, and the injection failed as if it "hit a breakpoint" (the soak's
//!   cycle 16). [`Process::surface_pending_trap`] lets such a thread take its SIGTRAP first,
//!   as a stop kept for later (deferred), and the injection picks another thread.
//! - gsh takes that `int3` out (`delete`): the SIGTRAP arrives for a byte that is the
//!   program's again, the hooks no longer know it, and the process was stopped for good as at
//!   a breakpoint (redis under `delete`, then `detach` in a separate job). Run on from there
//!   it would have started mid-instruction. [`Process::int3_gone`] recognises it: the thread
//!   is backed up to run the restored instruction.

use std::time::{Duration, Instant};

use super::control::Process;
use super::error::ProcessError;
use super::ptrace::{self, WaitEvent};

/// How long a resumed thread with a signal queued may take to report it before gsh interrupts
/// it (the kernel reports it before the thread runs an instruction).
const QUEUED_STOP: Duration = Duration::from_millis(50);

/// SIGTRAP's bit in /proc's `SigPnd` mask.
const SIGTRAP_BIT: u64 = 1 << (libc::SIGTRAP - 1);

impl Process {
    /// True when a thread that stopped for a kernel SIGTRAP at `rip` executed an `int3` at
    /// `rip - 1` that is gone now (not an `int3`, nor the end of a two-byte `int $3`): one of
    /// gsh's, taken out after the thread passed it. The instruction there now is the one the
    /// thread must run.
    pub(crate) fn int3_gone(&self, rip: u64) -> bool {
        let Ok(bytes) = self.mem.read(rip.wrapping_sub(2), 2) else {
            return false;
        };
        bytes[1] != 0xcc && bytes != [0xcd, 0x03]
    }

    /// When stopped thread `tid` has a SIGTRAP queued (see the module's doc), lets it take it
    /// now: the SIGTRAP's stop is kept as a deferred stop, for the hooks to handle when the
    /// process runs again. True when there was one.
    pub(crate) fn surface_pending_trap(&mut self, tid: i32) -> Result<bool, ProcessError> {
        // A few rounds at most: each ends in a stop, and only a signal sent meanwhile makes
        // another needed.
        for _ in 0..4 {
            if pending_signals(self.pid, tid).is_none_or(|m| m & SIGTRAP_BIT == 0) {
                return Ok(false);
            }
            // A queued signal is reported before the thread runs any instruction; an
            // interrupt sent with it would be reported first (the kernel looks at interrupts
            // before signals), so it is sent only if no stop comes.
            ptrace::cont(tid, 0)?;
            let ev = self.next_stop(tid)?;
            match ev {
                WaitEvent::Signal(libc::SIGTRAP) | WaitEvent::Event(_) => {
                    self.deferred.push_back((tid, ev));
                    return Ok(true);
                }
                WaitEvent::EventStop(_) => {}
                WaitEvent::Exited(_) | WaitEvent::Signaled(_) => {
                    self.threads.remove(&tid);
                    return Err(self.gone("letting a thread take its queued SIGTRAP"));
                }
                // Another queued signal first: kept for the thread, as a halt keeps it.
                WaitEvent::Signal(sig) => self.keep_signal(tid, sig),
            }
        }
        Ok(false)
    }

    /// The next stop of thread `tid`, just resumed: the one its queued signal brings at once,
    /// else the one an interrupt brings.
    fn next_stop(&mut self, tid: i32) -> Result<WaitEvent, ProcessError> {
        let started = Instant::now();
        let mut interrupted = false;
        loop {
            match ptrace::wait(tid, true) {
                Ok(Some((_, ev))) => return Ok(ev),
                Ok(None) => {}
                Err(e) => return Err(ProcessError::ptrace("waitpid", tid, e)),
            }
            if !interrupted && started.elapsed() > QUEUED_STOP {
                ptrace::interrupt(tid)?;
                interrupted = true;
            }
            self.waker.wait(Some(Duration::from_millis(5)));
        }
    }
}

/// The signals queued for thread `tid` alone (`SigPnd` of its /proc status).
fn pending_signals(pid: i32, tid: i32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/task/{tid}/status")).ok()?;
    let hex = status.lines().find_map(|l| l.strip_prefix("SigPnd:"))?;
    u64::from_str_radix(hex.trim(), 16).ok()
}
