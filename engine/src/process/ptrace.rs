//! Thin, typed wrappers over the raw `ptrace` and `waitpid` calls, and the decoding of wait
//! statuses into [`WaitEvent`]s. Raw `libc` rather than nix's wrappers because those take a
//! `Signal` enum that cannot carry real-time signals, which must be forwarded like any other.
//!
//! Every request here must come from the tracer thread: the kernel ties a tracee to the one
//! thread that attached it.

use nix::errno::Errno;

use super::error::ProcessError;

/// The options every tracee gets: follow clones, forks and execs, stop at thread exit, and
/// mark syscall stops (`SIGTRAP | 0x80`). The mark matters beyond telling stops apart: a
/// thread whose tracer dies during a syscall stop is sent the stop's signal, a harmless invalid
/// number with the mark but a fatal SIGTRAP without it (the kernel's `ptrace_report_syscall`).
pub(crate) const OPTIONS: libc::c_int = libc::PTRACE_O_TRACECLONE
    | libc::PTRACE_O_TRACEFORK
    | libc::PTRACE_O_TRACEVFORK
    | libc::PTRACE_O_TRACEEXEC
    | libc::PTRACE_O_TRACEEXIT
    | libc::PTRACE_O_TRACESYSGOOD;

/// The stop signal of a syscall stop (entry or exit) under `PTRACE_O_TRACESYSGOOD`.
pub(crate) const SYSCALL_STOP: i32 = libc::SIGTRAP | 0x80;

/// The options of every thread but the leader: no exit stop. Only the leader's is used (the
/// last look at a process's memory); another thread's would cost a stop for each thread that
/// ends, which a thread pool does thousands of times a second.
pub(crate) const THREAD_OPTIONS: libc::c_int = OPTIONS & !libc::PTRACE_O_TRACEEXIT;

/// `si_code` of the SIGTRAP an `int3` raises (the kernel reports it as `SI_KERNEL`).
pub(crate) const SI_KERNEL: i32 = 0x80;

fn request(
    op: &'static str,
    req: libc::c_uint,
    tid: i32,
    addr: usize,
    data: usize,
) -> Result<libc::c_long, ProcessError> {
    Errno::clear();
    // SAFETY: every request passed here takes integer `addr`/`data` or pointers to live, correctly
    // sized buffers owned by the caller (see each wrapper); the kernel validates the tid.
    let r = unsafe {
        libc::ptrace(
            req,
            tid,
            addr as *mut libc::c_void,
            data as *mut libc::c_void,
        )
    };
    if r == -1 {
        let e = Errno::last();
        if e != Errno::UnknownErrno {
            return Err(ProcessError::ptrace(op, tid, e));
        }
    }
    Ok(r)
}

pub(crate) fn seize(tid: i32, options: libc::c_int) -> Result<(), Errno> {
    // SAFETY: PTRACE_SEIZE takes no pointer; `data` is the option bits.
    let r = unsafe {
        libc::ptrace(
            libc::PTRACE_SEIZE,
            tid,
            std::ptr::null_mut::<libc::c_void>(),
            options as usize as *mut libc::c_void,
        )
    };
    if r == -1 {
        Err(Errno::last())
    } else {
        Ok(())
    }
}

/// Replaces a stopped thread's ptrace options.
pub(crate) fn set_options(tid: i32, options: libc::c_int) -> Result<(), ProcessError> {
    request(
        "SETOPTIONS",
        libc::PTRACE_SETOPTIONS,
        tid,
        0,
        options as usize,
    )
    .map(drop)
}

pub(crate) fn interrupt(tid: i32) -> Result<(), ProcessError> {
    request("INTERRUPT", libc::PTRACE_INTERRUPT, tid, 0, 0).map(drop)
}

/// Resumes a stopped thread, delivering `signal` (0 for none).
pub(crate) fn cont(tid: i32, signal: i32) -> Result<(), ProcessError> {
    request("CONT", libc::PTRACE_CONT, tid, 0, signal as usize).map(drop)
}

/// Resumes a stopped thread until its next syscall entry or exit (or any other stop).
pub(crate) fn cont_to_syscall(tid: i32) -> Result<(), ProcessError> {
    request("SYSCALL", libc::PTRACE_SYSCALL, tid, 0, 0).map(drop)
}

/// Lets a thread in group-stop sit stopped while still reporting to us (PTRACE_LISTEN).
pub(crate) fn listen(tid: i32) -> Result<(), ProcessError> {
    request("LISTEN", libc::PTRACE_LISTEN, tid, 0, 0).map(drop)
}

pub(crate) fn step(tid: i32) -> Result<(), ProcessError> {
    request("SINGLESTEP", libc::PTRACE_SINGLESTEP, tid, 0, 0).map(drop)
}

pub(crate) fn detach(tid: i32, signal: i32) -> Result<(), ProcessError> {
    request("DETACH", libc::PTRACE_DETACH, tid, 0, signal as usize).map(drop)
}

/// The event message of the last event stop: a new thread's or child's id, an exit status.
pub(crate) fn event_msg(tid: i32) -> Result<u64, ProcessError> {
    let mut msg: libc::c_ulong = 0;
    request(
        "GETEVENTMSG",
        libc::PTRACE_GETEVENTMSG,
        tid,
        0,
        &mut msg as *mut libc::c_ulong as usize,
    )?;
    Ok(msg)
}

/// The `si_code` of the signal a thread is stopped with (signal-delivery-stops only).
pub(crate) fn sig_code(tid: i32) -> Result<i32, ProcessError> {
    siginfo(tid).map(|info| info.si_code)
}

/// The whole siginfo of the stop thread `tid` is in: the signal's own for a
/// signal-delivery-stop; for any other ptrace stop the kernel makes one up (SIGTRAP with the
/// event in `si_code`, or the stop signal of a group-stop).
pub(crate) fn siginfo(tid: i32) -> Result<libc::siginfo_t, ProcessError> {
    // SAFETY: siginfo_t is plain old data; all-zero is a valid value.
    let mut info: libc::siginfo_t = unsafe { std::mem::zeroed() };
    request(
        "GETSIGINFO",
        libc::PTRACE_GETSIGINFO,
        tid,
        0,
        &mut info as *mut libc::siginfo_t as usize,
    )?;
    Ok(info)
}

/// Replaces the siginfo of the signal-delivery-stop thread `tid` is in: the signal it gets
/// when it is passed on carries this instead.
pub(crate) fn set_siginfo(tid: i32, info: &libc::siginfo_t) -> Result<(), ProcessError> {
    request(
        "SETSIGINFO",
        libc::PTRACE_SETSIGINFO,
        tid,
        0,
        info as *const libc::siginfo_t as usize,
    )
    .map(drop)
}

/// The `si_code` and `si_addr` of the signal thread `tid` is stopped with (`si_addr` is the
/// faulting address of a SIGSEGV, SIGBUS, SIGILL or SIGFPE the CPU raised; `si_code <= 0`
/// says the signal was sent, by `kill`, `tgkill` or `sigqueue`, not raised by a fault).
pub(crate) fn fault(tid: i32) -> Result<(i32, u64), ProcessError> {
    // SAFETY: siginfo_t is plain old data; all-zero is a valid value.
    let mut info: libc::siginfo_t = unsafe { std::mem::zeroed() };
    request(
        "GETSIGINFO",
        libc::PTRACE_GETSIGINFO,
        tid,
        0,
        &mut info as *mut libc::siginfo_t as usize,
    )?;
    // SAFETY: the kernel filled `info`; reading `si_addr` of a signal that has none gives
    // whatever the union holds there, a plain integer, never dereferenced.
    let addr = unsafe { info.si_addr() } as u64;
    Ok((info.si_code, addr))
}

pub(crate) fn regs(tid: i32) -> Result<libc::user_regs_struct, ProcessError> {
    // SAFETY: user_regs_struct is plain old data; all-zero is a valid value.
    let mut r: libc::user_regs_struct = unsafe { std::mem::zeroed() };
    request(
        "GETREGS",
        libc::PTRACE_GETREGS,
        tid,
        0,
        &mut r as *mut libc::user_regs_struct as usize,
    )?;
    Ok(r)
}

pub(crate) fn set_regs(tid: i32, r: &libc::user_regs_struct) -> Result<(), ProcessError> {
    request(
        "SETREGS",
        libc::PTRACE_SETREGS,
        tid,
        0,
        r as *const libc::user_regs_struct as usize,
    )
    .map(drop)
}

/// `NT_X86_XSTATE`: the thread's whole XSAVE area (x87, SSE, AVX, AVX-512 state).
const NT_X86_XSTATE: usize = 0x202;
/// `NT_PRFPREG`: the legacy FXSAVE area (x87 and SSE), where XSAVE is not offered.
const NT_PRFPREG: usize = 2;
/// Larger than any XSAVE area the kernel hands out today (AVX-512 with AMX tiles' header).
const XSTATE_MAX: usize = 16 * 1024;

/// A thread's floating-point and vector registers, as the kernel's regset holds them.
#[derive(Clone, Debug)]
pub(crate) struct VectorState {
    /// The regset: `NT_X86_XSTATE`, or `NT_PRFPREG` where XSAVE is not offered.
    note: usize,
    /// Its bytes, as long as the kernel said it is.
    bytes: Vec<u8>,
}

/// Thread `tid`'s floating-point and vector registers (xmm, ymm, zmm, x87, mxcsr).
pub(crate) fn vector_state(tid: i32) -> Result<VectorState, ProcessError> {
    let mut first = None;
    for note in [NT_X86_XSTATE, NT_PRFPREG] {
        let mut bytes = vec![0u8; XSTATE_MAX];
        let mut iov = libc::iovec {
            iov_base: bytes.as_mut_ptr().cast(),
            iov_len: bytes.len(),
        };
        match request(
            "GETREGSET",
            libc::PTRACE_GETREGSET,
            tid,
            note,
            &mut iov as *mut libc::iovec as usize,
        ) {
            Ok(_) => {
                bytes.truncate(iov.iov_len);
                return Ok(VectorState { note, bytes });
            }
            Err(e) => {
                first.get_or_insert(e);
            }
        }
    }
    Err(first.expect("two regsets were tried"))
}

/// Puts back what [`vector_state`] read from thread `tid`.
pub(crate) fn set_vector_state(tid: i32, state: &VectorState) -> Result<(), ProcessError> {
    let mut bytes = state.bytes.clone();
    let mut iov = libc::iovec {
        iov_base: bytes.as_mut_ptr().cast(),
        iov_len: bytes.len(),
    };
    request(
        "SETREGSET",
        libc::PTRACE_SETREGSET,
        tid,
        state.note,
        &mut iov as *mut libc::iovec as usize,
    )
    .map(drop)
}

/// What one `waitpid` status says happened to thread `tid`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum WaitEvent {
    /// The thread (or, for the leader, the whole process) exited with this code.
    Exited(i32),
    /// The thread (or process) was killed by this signal.
    Signaled(i32),
    /// Signal-delivery-stop: the signal is about to be delivered unless we suppress it.
    Signal(i32),
    /// `PTRACE_EVENT_STOP`: an interrupt (SIGTRAP), a group-stop (the stop signal), or a new
    /// thread's first stop.
    EventStop(i32),
    /// Another ptrace event stop (`PTRACE_EVENT_CLONE`, `FORK`, `EXEC`, `EXIT`, ...).
    Event(i32),
}

/// Decodes a raw wait status.
pub(crate) fn decode(status: i32) -> Option<WaitEvent> {
    if libc::WIFEXITED(status) {
        Some(WaitEvent::Exited(libc::WEXITSTATUS(status)))
    } else if libc::WIFSIGNALED(status) {
        Some(WaitEvent::Signaled(libc::WTERMSIG(status)))
    } else if libc::WIFSTOPPED(status) {
        let sig = libc::WSTOPSIG(status);
        let event = (status >> 16) & 0xff;
        if event == libc::PTRACE_EVENT_STOP {
            Some(WaitEvent::EventStop(sig))
        } else if event != 0 {
            Some(WaitEvent::Event(event))
        } else {
            Some(WaitEvent::Signal(sig))
        }
    } else {
        None
    }
}

/// Waits for a status change of `who` (-1: any tracee of this thread), with `__WALL` and
/// `__WNOTHREAD` so the tracer never reaps children that other threads of gsh started.
/// `Ok(None)` when `nohang` and nothing happened.
pub(crate) fn wait(who: i32, nohang: bool) -> Result<Option<(i32, WaitEvent)>, Errno> {
    let mut flags = libc::__WALL | libc::__WNOTHREAD;
    if nohang {
        flags |= libc::WNOHANG;
    }
    loop {
        let mut status = 0;
        // SAFETY: `status` is a valid out-pointer for the duration of the call.
        let r = unsafe { libc::waitpid(who, &mut status, flags) };
        match r {
            -1 => match Errno::last() {
                Errno::EINTR => continue,
                e => return Err(e),
            },
            0 => return Ok(None),
            tid => match decode(status) {
                Some(ev) => return Ok(Some((tid, ev))),
                // WIFCONTINUED and the like carry nothing for a tracer.
                None => continue,
            },
        }
    }
}

/// Sends `signal` to one thread of `pid`.
pub(crate) fn tgkill(pid: i32, tid: i32, signal: i32) -> Result<(), Errno> {
    // SAFETY: tgkill takes only integers.
    let r = unsafe { libc::syscall(libc::SYS_tgkill, pid, tid, signal) };
    if r == -1 {
        Err(Errno::last())
    } else {
        Ok(())
    }
}

/// The conventional name of a signal number: `SIGSEGV`, `SIGRTMIN+3`.
pub fn signal_name(signal: i32) -> String {
    match nix::sys::signal::Signal::try_from(signal) {
        Ok(s) => s.as_str().to_owned(),
        Err(_) if signal >= libc::SIGRTMIN() && signal <= libc::SIGRTMAX() => {
            format!("SIGRTMIN+{}", signal - libc::SIGRTMIN())
        }
        Err(_) => format!("signal {signal}"),
    }
}
