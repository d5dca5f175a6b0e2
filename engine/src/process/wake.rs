//! [`Waker`]: what the tracer thread sleeps on. The kernel tells a tracer that a tracee stopped
//! or exited with SIGCHLD (for ptrace stops too, and whatever `SA_NOCLDSTOP` says for job
//! control); a handler writes one byte into a socket pair for every SIGCHLD, and the shell writes
//! one when it hands the tracer a job. So the tracer blocks in `poll` until there is something to
//! do, and handles a stop as soon as the kernel reports it: no fixed polling interval stands
//! between a thread's creation or a signal and its handling.
//!
//! A SIGCHLD is delivered to whichever of gsh's threads can take it, and its handler runs only
//! when that thread gets a CPU: on a loaded machine, that hop delayed a halt's wakeup by up to
//! 77 ms with every thread already stopped (`xtask bench-stall count`). A halt therefore also
//! wakes on its own every [`HALT_POLL`] to look at `waitpid`.
//!
//! The byte only says "look": the tracer always drains `waitpid` with `WNOHANG` after waking and
//! before sleeping again, so bytes merged or lost to a full socket lose no event, and a wakeup
//! caused by another tracer's child (tests run several tracers in one process) costs one empty
//! `waitpid`.

use std::io::{ErrorKind, Read, Write};
use std::os::fd::{AsRawFd, RawFd};
use std::os::unix::net::UnixStream;
use std::time::Duration;

use super::error::ProcessError;

/// How often a halt looks at `waitpid` without waiting for a SIGCHLD's wakeup.
pub(crate) const HALT_POLL: Duration = Duration::from_micros(200);

/// The tracer's wakeup source: SIGCHLD, and jobs from the shell.
pub(crate) struct Waker {
    rx: UnixStream,
    tx: UnixStream,
    signal: Option<signal_hook::SigId>,
}

impl Waker {
    pub(crate) fn new() -> Result<Waker, ProcessError> {
        let fail = |e: std::io::Error| ProcessError::Launch {
            program: "the tracer's wakeup socket".into(),
            detail: e.to_string(),
        };
        let (rx, tx) = UnixStream::pair().map_err(fail)?;
        rx.set_nonblocking(true).map_err(fail)?;
        tx.set_nonblocking(true).map_err(fail)?;
        // The handler sends one byte with MSG_DONTWAIT (async-signal-safe, never blocks); the
        // registration chains any handler installed before, and SA_RESTART keeps other
        // threads' system calls from failing with EINTR.
        let signal = signal_hook::low_level::pipe::register(
            signal_hook::consts::SIGCHLD,
            tx.try_clone().map_err(fail)?,
        )
        .map_err(fail)?;
        Ok(Waker {
            rx,
            tx,
            signal: Some(signal),
        })
    }

    /// Makes the tracer's current or next [`Waker::wait`] return. Any thread may call it.
    pub(crate) fn wake(&self) {
        // A full socket already holds a wakeup.
        let _ = (&self.tx).write(&[1]);
    }

    /// Blocks until a wakeup (a SIGCHLD since the last wait, or [`Waker::wake`]) or until
    /// `timeout` passes; then forgets the wakeups so far. Callers check `waitpid` next.
    pub(crate) fn wait(&self, timeout: Option<Duration>) {
        self.wait_also(None, timeout)
    }

    /// [`Waker::wait`], also ending when `extra` (a hands-off process's pidfd) is readable.
    pub(crate) fn wait_also(&self, extra: Option<RawFd>, timeout: Option<Duration>) {
        // To the microsecond (`ppoll`): a halt re-checks `waitpid` every few hundred of them.
        let timeout = timeout.map(|t| {
            let t = t.clamp(Duration::from_micros(10), Duration::from_secs(60));
            libc::timespec {
                tv_sec: t.as_secs() as libc::time_t,
                tv_nsec: t.subsec_nanos() as libc::c_long,
            }
        });
        let mut fds = [self.rx.as_raw_fd(), extra.unwrap_or(-1)].map(|fd| libc::pollfd {
            fd,
            events: libc::POLLIN,
            revents: 0,
        });
        let ts = timeout
            .as_ref()
            .map_or(std::ptr::null(), |t| t as *const libc::timespec);
        // SAFETY: `fds` are valid pollfds for the call's duration naming our open socket and,
        // when given, the caller's open pidfd (a negative fd is ignored by ppoll); `ts` is
        // null or points at a timespec that outlives the call; a null signal mask keeps the
        // thread's own. EINTR (another signal) counts as a wakeup like any other.
        unsafe {
            libc::ppoll(
                fds.as_mut_ptr(),
                fds.len() as libc::nfds_t,
                ts,
                std::ptr::null(),
            )
        };
        let mut buf = [0u8; 256];
        loop {
            match (&self.rx).read(&mut buf) {
                Ok(n) if n == buf.len() => continue,
                Err(e) if e.kind() == ErrorKind::Interrupted => continue,
                _ => return,
            }
        }
    }
}

impl Drop for Waker {
    fn drop(&mut self) {
        if let Some(id) = self.signal.take() {
            signal_hook::low_level::unregister(id);
        }
    }
}
