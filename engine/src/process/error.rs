//! The live-process layer's error type. Every variant reads as a sentence after `gsh: `, names
//! the process, thread or address at fault, and, for permission problems, the fix.

use std::path::PathBuf;

/// Why a live-process operation failed.
#[derive(Debug, thiserror::Error)]
pub enum ProcessError {
    /// No process (or thread) with this id exists.
    #[error("no process with pid {0}")]
    NoSuchProcess(i32),
    /// The kernel refused to let us trace the process.
    #[error("not permitted to trace process {pid}: {why}")]
    NotPermitted {
        /// The process.
        pid: i32,
        /// Why, with the fix.
        why: String,
    },
    /// gsh was asked to trace itself.
    #[error("process {0} is gsh itself; a process cannot trace itself")]
    Ourselves(i32),
    /// The operation needs a live process and there is none (it exited, or was never started).
    #[error("the process is not running{0}")]
    NotRunning(String),
    /// The operation needs every thread stopped (`halt` first).
    #[error("the process is running; halt it first")]
    NotStopped,
    /// The process exited or was killed while a command was working on it.
    #[error("process {pid} went away while {during} ({how})")]
    Gone {
        /// The process.
        pid: i32,
        /// What gsh was doing (`inserting instrumentation`).
        during: String,
        /// How it went (`exited with code 1`, `killed by SIGKILL`).
        how: String,
    },
    /// The program could not be launched.
    #[error("cannot start {program}: {detail}")]
    Launch {
        /// The program.
        program: PathBuf,
        /// What went wrong (not found, not executable, `execve`'s error).
        detail: String,
    },
    /// A ptrace request failed.
    #[error("ptrace {op} on thread {tid} failed: {errno}")]
    Ptrace {
        /// The request (`PTRACE_GETREGS`, ...).
        op: &'static str,
        /// The thread it was made on.
        tid: i32,
        /// What the kernel said.
        errno: nix::errno::Errno,
    },
    /// Reading or writing the process's memory failed.
    #[error("cannot {op} {len} bytes at {addr:#x} in process {pid}: {detail}")]
    Memory {
        /// `read` or `write`.
        op: &'static str,
        /// The process.
        pid: i32,
        /// The first address.
        addr: u64,
        /// How many bytes.
        len: usize,
        /// What the kernel said, or how much got through.
        detail: String,
    },
    /// A file under /proc (or a module's ELF file) could not be read or understood.
    #[error("cannot read {path}: {detail}")]
    Io {
        /// The file.
        path: PathBuf,
        /// What went wrong.
        detail: String,
    },
    /// No free address range within ±2 GiB of `near` could be mapped.
    #[error("no room for {size} bytes within ±2 GiB of {near:#x} in process {pid}")]
    NoRoom {
        /// The process.
        pid: i32,
        /// The runtime address the memory had to reach.
        near: u64,
        /// How many bytes were asked for.
        size: u64,
    },
    /// An injected syscall or function call did not complete as expected.
    #[error("injected {what} in thread {tid} failed: {detail}")]
    Inject {
        /// The syscall or function (`mmap`, `dlopen`).
        what: String,
        /// The thread that ran it.
        tid: i32,
        /// How it failed (a signal, a timeout, a return value).
        detail: String,
    },
    /// `dlopen` returned NULL; the text is `dlerror()`'s.
    #[error("dlopen({path}) failed: {detail}")]
    Dlopen {
        /// The library asked for.
        path: PathBuf,
        /// `dlerror()`'s text.
        detail: String,
    },
    /// The process was attached in its start-up and could not be brought to its entry point;
    /// gsh let it go, running.
    #[error("process {pid}: {detail}; gsh let it go, running (attach again once it has started)")]
    StartUp {
        /// The process.
        pid: i32,
        /// Where it was met and what happened instead.
        detail: String,
    },
    /// A required symbol was not found in the process's libraries.
    #[error("cannot find `{symbol}` in the process's libraries ({detail})")]
    NoSymbol {
        /// The symbol (`dlopen`, `__libc_dlopen_mode`).
        symbol: String,
        /// Where gsh looked.
        detail: String,
    },
    /// A job given to the tracer thread panicked; the tracer thread lives on.
    #[error("a command panicked on the tracer thread: {0}")]
    Panicked(String),
    /// The tracer thread is gone (it panicked outside a job, or the tracer was dropped).
    #[error("the tracer thread is gone")]
    TracerGone,
}

impl ProcessError {
    /// The error for a failed ptrace request `op` on thread `tid`.
    pub(crate) fn ptrace(op: &'static str, tid: i32, errno: nix::errno::Errno) -> ProcessError {
        ProcessError::Ptrace { op, tid, errno }
    }
}

/// Why `pid` cannot be traced, with the fix: the Yama scope, `CAP_SYS_PTRACE`, or the tracer
/// that already holds it (`TracerPid` in /proc/PID/status).
pub(crate) fn permission_problem(pid: i32) -> ProcessError {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    let tracer = status
        .lines()
        .find_map(|l| l.strip_prefix("TracerPid:"))
        .and_then(|v| v.trim().parse::<i32>().ok())
        .unwrap_or(0);
    let zombie = status
        .lines()
        .find_map(|l| l.strip_prefix("State:"))
        .is_some_and(|v| v.trim().starts_with('Z') || v.trim().starts_with('X'));
    if zombie {
        return ProcessError::NotRunning(format!(
            ": process {pid} has exited (its parent has not collected it yet)"
        ));
    }
    let why = if tracer != 0 {
        format!(
            "it is already traced by PID {tracer}{}; detach that debugger first",
            comm(tracer).map(|c| format!(" ({c})")).unwrap_or_default()
        )
    } else {
        let scope = std::fs::read_to_string("/proc/sys/kernel/yama/ptrace_scope")
            .ok()
            .map(|s| s.trim().to_owned());
        match scope.as_deref() {
            Some(s) if s != "0" => format!(
                "/proc/sys/kernel/yama/ptrace_scope is {s}, which forbids attaching to \
                 non-children; run `echo 0 | sudo tee /proc/sys/kernel/yama/ptrace_scope`, or \
                 give gsh CAP_SYS_PTRACE (`sudo setcap cap_sys_ptrace=ep $(which gsh)`), or run \
                 it as root"
            ),
            _ => "the process belongs to another user or is protected; run gsh as that user, \
                  give it CAP_SYS_PTRACE, or check /proc/sys/kernel/yama/ptrace_scope (and, in \
                  a container, that the seccomp profile allows ptrace)"
                .to_owned(),
        }
    };
    ProcessError::NotPermitted { pid, why }
}

/// The command name of `pid`, from /proc/PID/comm.
pub(crate) fn comm(pid: i32) -> Option<String> {
    std::fs::read_to_string(format!("/proc/{pid}/comm"))
        .ok()
        .map(|s| s.trim_end().to_owned())
}

#[cfg(test)]
mod tests {
    /// A zombie cannot be traced: the message reads as one sentence.
    #[test]
    fn a_zombie_is_said_to_have_exited() {
        let mut child = std::process::Command::new("true")
            .spawn()
            .expect("spawn true");
        let pid = child.id() as i32;
        // Not waited for, so it stays a zombie once it has exited.
        let zombie = || {
            std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|s| {
                s.rsplit(')')
                    .next()
                    .is_some_and(|r| r.trim().starts_with('Z'))
            })
        };
        let start = std::time::Instant::now();
        while !zombie() && start.elapsed() < std::time::Duration::from_secs(20) {
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        let e = super::permission_problem(pid).to_string();
        let _ = child.wait();
        assert_eq!(
            e,
            format!(
                "the process is not running: process {pid} has exited (its parent has not collected it yet)"
            )
        );
    }
}
