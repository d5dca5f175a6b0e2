//! [`Tracer`]: the handle to the dedicated thread that owns a traced process. It launches or
//! attaches, runs the caller's jobs with the process and the hooks, and between jobs keeps
//! serving a process that runs in the background. Dropping it kills a process we started and
//! detaches one we attached to.

use std::ffi::{CString, OsStr, OsString};
use std::os::fd::AsRawFd;
use std::os::unix::ffi::OsStrExt;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::{Path, PathBuf};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use nix::errno::Errno;

use super::control::Process;
use super::error::{permission_problem, ProcessError};
use super::memory::MemReader;
use super::ptrace::{self, WaitEvent};
use super::startup::StartUp;
use super::wake::Waker;
use super::{Event, Hooks, Launch, State, ThreadState};

/// A job for the tracer thread that may borrow for `'a`.
type ScopedJob<'a, H> = Box<dyn FnOnce(&mut Process, &mut H) + Send + 'a>;
/// A job for the tracer thread, its lifetime erased (see [`Tracer::with`]).
type Job<H> = ScopedJob<'static, H>;

enum Msg<H> {
    Job(Job<H>),
    Quit,
}

/// How soon the tracer looks again at a process whose events it failed to handle.
const RETRY: Duration = Duration::from_millis(2);

/// The handle to a traced process and the thread that owns it.
pub struct Tracer<H: Hooks + 'static> {
    pid: i32,
    tx: mpsc::Sender<Msg<H>>,
    thread: Option<JoinHandle<()>>,
    events: Arc<Mutex<Vec<Event>>>,
    waker: Arc<Waker>,
}

impl<H: Hooks + 'static> Tracer<H> {
    /// Launches `launch` in its own process group with ASLR left on, and returns with it
    /// stopped at its entry point, the dynamic linker done mapping its libraries, the hooks
    /// told about every module (`modules_changed`), and the rendezvous hook installed.
    pub fn start(launch: &Launch, hooks: H) -> Result<Tracer<H>, ProcessError> {
        let launch = launch.clone();
        Tracer::spawn(hooks, move |events, waker, hooks| {
            let pid = spawn_traced(&launch)?;
            let mut p = Process::new(pid, true, &[pid], events, waker)?;
            match p.run_to_entry(hooks)? {
                None => Ok(p),
                Some(stop) => Err(ProcessError::Launch {
                    program: launch.program.clone(),
                    detail: format!("it {stop} before reaching its entry point"),
                }),
            }
        })
    }

    /// Attaches to every thread of process `pid` and returns with all of them stopped, the
    /// hooks told about every module, and the rendezvous hook installed.
    pub fn attach(pid: i32, hooks: H) -> Result<Tracer<H>, ProcessError> {
        Tracer::spawn(hooks, move |events, waker, hooks| {
            let tids = seize_all(pid)?;
            let mut p = Process::new(pid, false, &tids, events, waker)?;
            for t in p.threads.values_mut() {
                t.state = ThreadState::Running;
            }
            p.state = State::Running;
            p.halt()?;
            // Met in its start-up (even at the end of its exec), it runs to its entry point
            // first, as a started program does: libc must be up for injected calls.
            p.take_attach_exec();
            let met = p.start_up()?;
            if met != StartUp::Done {
                if let Err(e) = p.finish_start_up(hooks, met) {
                    if p.state().is_alive() {
                        let _ = p.detach();
                    }
                    return Err(e);
                }
            }
            p.install_rendezvous()?;
            p.modules_dirty = true;
            p.flush_module_changes(hooks)?;
            Ok(p)
        })
    }

    fn spawn(
        hooks: H,
        init: impl FnOnce(Arc<Mutex<Vec<Event>>>, Arc<Waker>, &mut H) -> Result<Process, ProcessError>
            + Send
            + 'static,
    ) -> Result<Tracer<H>, ProcessError> {
        let waker = Arc::new(Waker::new()?);
        let tracer_waker = waker.clone();
        let (tx, rx) = mpsc::channel::<Msg<H>>();
        let (ready_tx, ready_rx) = mpsc::channel();
        let events = Arc::new(Mutex::new(Vec::new()));
        let shared = events.clone();
        let thread = std::thread::Builder::new()
            .name("gsh-tracer".into())
            .spawn(move || {
                let mut hooks = hooks;
                let p = catch_unwind(AssertUnwindSafe(|| init(shared, tracer_waker, &mut hooks)))
                    .unwrap_or_else(|e| Err(ProcessError::Panicked(panic_text(&*e))));
                match p {
                    Ok(p) => {
                        let _ = ready_tx.send(Ok(p.pid));
                        serve(p, hooks, rx);
                    }
                    Err(e) => {
                        let _ = ready_tx.send(Err(e));
                    }
                }
            })
            .map_err(|e| ProcessError::Launch {
                program: "the tracer thread".into(),
                detail: e.to_string(),
            })?;
        match ready_rx.recv() {
            Ok(Ok(pid)) => Ok(Tracer {
                pid,
                tx,
                thread: Some(thread),
                events,
                waker,
            }),
            Ok(Err(e)) => {
                let _ = thread.join();
                Err(e)
            }
            Err(_) => {
                let _ = thread.join();
                Err(ProcessError::TracerGone)
            }
        }
    }

    /// The process id.
    pub fn pid(&self) -> i32 {
        self.pid
    }

    /// Runs `f` on the tracer thread with the process and the hooks, and waits for it. A
    /// panic inside `f` comes back as [`ProcessError::Panicked`]. Must not be called from
    /// inside another job (that would wait for itself).
    pub fn with<R: Send>(
        &self,
        f: impl FnOnce(&mut Process, &mut H) -> R + Send,
    ) -> Result<R, ProcessError> {
        let (reply_tx, reply_rx) = mpsc::sync_channel::<Result<R, ProcessError>>(1);
        let job = move |p: &mut Process, h: &mut H| {
            let r = catch_unwind(AssertUnwindSafe(|| f(p, h)))
                .map_err(|e| ProcessError::Panicked(panic_text(&*e)));
            // Libraries `f` loaded reach the hooks before the caller hears back.
            let flushed = catch_unwind(AssertUnwindSafe(|| p.flush_module_changes(h)));
            // A failed flush (the process died meanwhile) must not hide `f`'s result; the
            // next command reports the death.
            let r = match (r, flushed) {
                (Ok(_), Err(e)) => Err(ProcessError::Panicked(panic_text(&*e))),
                (r, _) => r,
            };
            let _ = reply_tx.send(r);
        };
        let job: ScopedJob<'_, H> = Box::new(job);
        // SAFETY: only the lifetime changes (same vtable and layout). `f` may borrow from our
        // caller, so it must not outlive this call: we block on `reply_rx` until the job sent
        // its reply (after `f` was consumed) or was dropped unrun (which drops `reply_tx`, so
        // `recv` fails); either way nothing borrowed is touched after we return. If `send`
        // fails, the job comes back inside the error and is dropped right here.
        let job: Job<H> = unsafe { std::mem::transmute::<ScopedJob<'_, H>, Job<H>>(job) };
        self.tx
            .send(Msg::Job(job))
            .map_err(|_| ProcessError::TracerGone)?;
        self.waker.wake();
        reply_rx.recv().map_err(|_| ProcessError::TracerGone)?
    }

    /// Events since the last call, oldest first: library loads, threads, forks, execs, and
    /// the stops and exits that happened while nobody was waiting in `cont_wait`.
    pub fn take_events(&self) -> Vec<Event> {
        std::mem::take(&mut *self.events.lock().unwrap_or_else(|p| p.into_inner()))
    }

    /// A reader of the process's memory that needs no stop and no tracer thread.
    pub fn reader(&self) -> MemReader {
        MemReader::new(self.pid)
    }
}

impl<H: Hooks + 'static> Drop for Tracer<H> {
    fn drop(&mut self) {
        let _ = self.tx.send(Msg::Quit);
        self.waker.wake();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
        // The session's state (the hooks, dropped as the thread ended) is freed, but glibc
        // keeps freed memory for later: gsh's RSS grew by steps from session to session on
        // redis (158 -> 168 MB over 10, 22 MB in use throughout, #13). Give it back.
        // SAFETY: malloc_trim takes no pointer; glibc locks each arena as it trims it.
        unsafe {
            libc::malloc_trim(0);
        }
    }
}

/// The tracer thread's loop: jobs, and background events while the process runs. It sleeps on
/// the waker until SIGCHLD or a job arrives, so events are handled at the kernel's pace.
fn serve<H: Hooks>(mut p: Process, mut hooks: H, rx: mpsc::Receiver<Msg<H>>) {
    let waker = p.waker.clone();
    loop {
        // Events before jobs, so a stream of jobs cannot starve the process's events.
        let mut failed = false;
        if p.wants_polling() {
            // Errors here have nobody to go to; the state and events say what happened. A
            // stop left unhandled by one is looked at again shortly.
            failed = !matches!(
                catch_unwind(AssertUnwindSafe(|| p.poll_background(&mut hooks))),
                Ok(Ok(()))
            );
        }
        // Nothing needs the tracer: let the running process go until a job needs it. A
        // failure leaves it traced, as it was; the next wakeup tries again.
        if !failed {
            let _ = catch_unwind(AssertUnwindSafe(|| p.let_go_if_idle(&hooks)));
        }
        let msg = match rx.try_recv() {
            Ok(m) => m,
            Err(mpsc::TryRecvError::Empty) => {
                // `waitpid` was drained above after the last wakeup: a stop since then, or a
                // job sent since `try_recv`, has left a byte that ends this wait at once. While
                // hands-off, the process's pidfd ends it when the process ends.
                waker.wait_also(p.exit_fd(), failed.then_some(RETRY));
                continue;
            }
            Err(mpsc::TryRecvError::Disconnected) => Msg::Quit,
        };
        match msg {
            Msg::Job(job) => {
                job(&mut p, &mut hooks);
                let _ = catch_unwind(AssertUnwindSafe(|| p.flush_module_changes(&mut hooks)));
            }
            Msg::Quit => {
                if p.state().is_alive() {
                    let _ = if p.was_started() {
                        p.kill()
                    } else {
                        p.detach()
                    };
                }
                return;
            }
        }
    }
}

fn panic_text(e: &(dyn std::any::Any + Send)) -> String {
    e.downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| e.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "(no message)".into())
}

/// `program` as given when it names a path, else found in `PATH`.
fn resolve(program: &Path) -> Option<PathBuf> {
    if program.as_os_str().as_bytes().contains(&b'/') {
        return program.is_file().then(|| program.to_owned());
    }
    std::env::var_os("PATH").and_then(|path| {
        std::env::split_paths(&path)
            .map(|d| d.join(program))
            .find(|p| p.is_file())
    })
}

fn cstring(s: &OsStr, program: &Path) -> Result<CString, ProcessError> {
    CString::new(s.as_bytes()).map_err(|_| ProcessError::Launch {
        program: program.to_owned(),
        detail: format!("{} contains a NUL byte", s.to_string_lossy()),
    })
}

/// Forks, and in the child: its own process group, the redirections, then it waits for us to
/// seize it before exec'ing. Returns the child stopped at its exec event.
fn spawn_traced(l: &Launch) -> Result<i32, ProcessError> {
    let launch_error = |detail: String| ProcessError::Launch {
        program: l.program.clone(),
        detail,
    };
    let path =
        resolve(&l.program).ok_or_else(|| launch_error("no such file (nor in PATH)".into()))?;
    // Everything the child needs is built before fork: after it, only async-signal-safe calls.
    let c_path = cstring(path.as_os_str(), &l.program)?;
    let mut argv = vec![cstring(l.program.as_os_str(), &l.program)?];
    for a in &l.args {
        argv.push(cstring(OsStr::new(a), &l.program)?);
    }
    let mut env: Vec<(OsString, OsString)> = std::env::vars_os()
        .filter(|(k, _)| !l.env.iter().any(|(x, _)| OsStr::new(x) == k))
        .collect();
    env.extend(l.env.iter().map(|(k, v)| (k.into(), v.into())));
    let mut envp = Vec::new();
    for (k, v) in env {
        let mut kv = k;
        kv.push("=");
        kv.push(v);
        envp.push(cstring(&kv, &l.program)?);
    }
    let argv_ptrs: Vec<*const libc::c_char> = argv
        .iter()
        .map(|c| c.as_ptr())
        .chain([std::ptr::null()])
        .collect();
    let envp_ptrs: Vec<*const libc::c_char> = envp
        .iter()
        .map(|c| c.as_ptr())
        .chain([std::ptr::null()])
        .collect();
    let stdin = match &l.stdin {
        Some(p) => Some(
            std::fs::File::open(p)
                .map_err(|e| launch_error(format!("cannot open {} for input: {e}", p.display())))?,
        ),
        None => None,
    };
    let stdout =
        match &l.stdout {
            Some(p) => Some(std::fs::File::create(p).map_err(|e| {
                launch_error(format!("cannot create {} for output: {e}", p.display()))
            })?),
            None => None,
        };
    let (go_r, go_w) = nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC)
        .map_err(|e| launch_error(format!("pipe: {e}")))?;
    let (err_r, err_w) = nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC)
        .map_err(|e| launch_error(format!("pipe: {e}")))?;
    let (in_fd, out_fd) = (
        stdin.as_ref().map_or(-1, |f| f.as_raw_fd()),
        stdout.as_ref().map_or(-1, |f| f.as_raw_fd()),
    );
    let (go_r_fd, err_w_fd) = (go_r.as_raw_fd(), err_w.as_raw_fd());

    // SAFETY: fork in a multi-threaded process; the child only makes async-signal-safe calls
    // (setpgid, dup2, read, execve, write, _exit) on data prepared above, then execs or exits.
    let child = unsafe { libc::fork() };
    if child == 0 {
        // SAFETY: (child) raw syscalls on valid fds and NUL-terminated arrays built before fork.
        unsafe {
            libc::setpgid(0, 0);
            if in_fd >= 0 {
                libc::dup2(in_fd, 0);
            }
            if out_fd >= 0 {
                libc::dup2(out_fd, 1);
            }
            let mut b = 0u8;
            while libc::read(go_r_fd, (&mut b as *mut u8).cast(), 1) < 0 {}
            libc::execve(c_path.as_ptr(), argv_ptrs.as_ptr(), envp_ptrs.as_ptr());
            let errno = *libc::__errno_location();
            libc::write(err_w_fd, (&errno as *const i32).cast(), 4);
            libc::_exit(127);
        }
    }
    if child < 0 {
        return Err(launch_error(format!("fork: {}", Errno::last())));
    }
    drop((go_r, err_w, stdin, stdout));
    // SAFETY: setpgid takes only integers; done here too so the group exists before we go on.
    unsafe { libc::setpgid(child, child) };
    if let Err(e) = ptrace::seize(child, ptrace::OPTIONS | libc::PTRACE_O_EXITKILL) {
        // SAFETY: kill takes only integers; `child` is our own child.
        unsafe { libc::kill(child, libc::SIGKILL) };
        let _ = nix::sys::wait::waitpid(nix::unistd::Pid::from_raw(child), None);
        return Err(match e {
            Errno::EPERM => permission_problem(child),
            e => launch_error(format!("ptrace(SEIZE): {e}")),
        });
    }
    nix::unistd::write(&go_w, &[1]).map_err(|e| launch_error(format!("pipe: {e}")))?;
    drop(go_w);
    loop {
        match ptrace::wait(child, false) {
            Ok(Some((_, WaitEvent::Event(libc::PTRACE_EVENT_EXEC)))) => return Ok(child),
            Ok(Some((_, WaitEvent::Exited(code)))) => {
                let mut buf = [0u8; 4];
                let detail = match nix::unistd::read(&err_r, &mut buf) {
                    Ok(4) => std::io::Error::from_raw_os_error(i32::from_le_bytes(buf)).to_string(),
                    _ => format!("it exited with code {code} before exec"),
                };
                return Err(launch_error(detail));
            }
            Ok(Some((_, WaitEvent::Signaled(sig)))) => {
                return Err(launch_error(format!(
                    "it was killed by {} before exec",
                    ptrace::signal_name(sig)
                )))
            }
            // A signal sent to it before exec: pass it on.
            Ok(Some((_, WaitEvent::Signal(sig)))) => {
                let _ = ptrace::cont(child, sig);
            }
            Ok(Some(_)) => {
                let _ = ptrace::cont(child, 0);
            }
            Ok(None) => {}
            Err(e) => return Err(launch_error(format!("waitpid: {e}"))),
        }
    }
}

/// Seizes every thread of `pid`, re-reading /proc/PID/task until no new thread appears.
pub(crate) fn seize_all(pid: i32) -> Result<Vec<i32>, ProcessError> {
    let me = std::process::id() as i32;
    // TracerPid names the tracing thread: this one.
    // SAFETY: gettid takes no arguments and cannot fail.
    let me_thread = unsafe { libc::syscall(libc::SYS_gettid) } as i32;
    if pid <= 0 {
        return Err(ProcessError::NoSuchProcess(pid));
    }
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))
        .map_err(|_| ProcessError::NoSuchProcess(pid))?;
    let tgid = status
        .lines()
        .find_map(|l| l.strip_prefix("Tgid:"))
        .and_then(|v| v.trim().parse::<i32>().ok())
        .unwrap_or(pid);
    if pid == me || tgid == me {
        return Err(ProcessError::Ourselves(pid));
    }
    if tgid != pid {
        return Err(ProcessError::NotPermitted {
            pid,
            why: format!("{pid} is a thread of process {tgid}; attach to {tgid}"),
        });
    }
    let mut seized: Vec<i32> = Vec::new();
    loop {
        let tasks: Vec<i32> = std::fs::read_dir(format!("/proc/{pid}/task"))
            .map_err(|_| ProcessError::NoSuchProcess(pid))?
            .filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok())
            .collect();
        let mut new = false;
        for tid in tasks {
            if seized.contains(&tid) {
                continue;
            }
            let options = if tid == pid {
                ptrace::OPTIONS
            } else {
                ptrace::THREAD_OPTIONS
            };
            match ptrace::seize(tid, options) {
                Ok(()) => {
                    seized.push(tid);
                    new = true;
                }
                // A thread cloned after its creator was seized is traced already, by us
                // (PTRACE_O_TRACECLONE): its first stop comes like any new thread's.
                Err(Errno::EPERM) if tid != pid && tracer_of(tid) == Some(me_thread) => {
                    seized.push(tid);
                    new = true;
                }
                // A thread that has exited but is not reaped yet cannot be traced: the kernel
                // refuses with EPERM. It never runs again, so there is nothing to stop. (A
                // thread pool's short-lived threads are often in that state.)
                Err(Errno::EPERM) if tid != pid && is_exiting(pid, tid) => {}
                Err(Errno::EPERM) => {
                    release(&seized);
                    return Err(permission_problem(pid));
                }
                Err(Errno::ESRCH) if tid != pid => {}
                Err(Errno::ESRCH) => {
                    release(&seized);
                    return Err(ProcessError::NoSuchProcess(pid));
                }
                Err(e) => {
                    release(&seized);
                    return Err(ProcessError::ptrace("SEIZE", tid, e));
                }
            }
        }
        if !new {
            return Ok(seized);
        }
    }
}

/// The process tracing thread `tid`, from its `TracerPid`.
fn tracer_of(tid: i32) -> Option<i32> {
    std::fs::read_to_string(format!("/proc/{tid}/status"))
        .ok()?
        .lines()
        .find_map(|l| l.strip_prefix("TracerPid:"))
        .and_then(|v| v.trim().parse().ok())
}

/// True when thread `tid` of `pid` is gone or exiting (a zombie, or dead): its state in
/// /proc, after the command name, is `Z`, `X` or `x`.
fn is_exiting(pid: i32, tid: i32) -> bool {
    let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/task/{tid}/stat")) else {
        return true;
    };
    stat.rsplit_once(") ")
        .and_then(|(_, rest)| rest.chars().next())
        .is_none_or(|state| matches!(state, 'Z' | 'X' | 'x'))
}

/// Lets go of threads seized by a failed attach (they were never stopped).
fn release(tids: &[i32]) {
    for &t in tids {
        if ptrace::interrupt(t).is_ok() {
            let _ = ptrace::wait(t, false);
            let _ = ptrace::detach(t, 0);
        }
    }
}

#[cfg(test)]
mod trim_tests {
    use super::*;
    use crate::process::Launch;

    /// Hooks holding memory allocated on the tracer thread, as a session's state is.
    struct Heavy(Vec<Vec<u8>>);
    impl Hooks for Heavy {}

    fn rss_kib() -> u64 {
        std::fs::read_to_string("/proc/self/status")
            .unwrap_or_default()
            .lines()
            .find_map(|l| l.strip_prefix("VmRSS:"))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
            .unwrap_or(0)
    }

    /// Dropping a tracer gives the memory its hooks held back to the system, even when small
    /// blocks still in use lie between the freed ones (#13: gsh's RSS grew by steps from
    /// session to session while its heap in use stayed flat). Run in a process of its own,
    /// so that no other test's memory comes and goes meanwhile.
    #[test]
    fn dropping_a_tracer_gives_its_memory_back() {
        const NAME: &str = "process::tracer::trim_tests::dropping_a_tracer_gives_its_memory_back";
        if std::env::var_os("GSH_TRIM_TEST_ALONE").is_none() {
            let exe = std::env::current_exe().expect("test binary");
            let o = std::process::Command::new(exe)
                .args([NAME, "--exact", "--test-threads=1", "--nocapture"])
                .env("GSH_TRIM_TEST_ALONE", "1")
                .output()
                .expect("run the test alone");
            assert!(
                o.status.success(),
                "{}{}",
                String::from_utf8_lossy(&o.stdout),
                String::from_utf8_lossy(&o.stderr)
            );
            return;
        }
        let launch = Launch {
            program: "/bin/sleep".into(),
            args: vec!["60".into()],
            stdin: None,
            stdout: None,
            env: Vec::new(),
        };
        let before = rss_kib();
        let tracer = Tracer::start(&launch, Heavy(Vec::new())).expect("start sleep");
        // 60 MiB in 60 KiB blocks (below malloc's mmap threshold: in the thread's arena),
        // each followed by a small block that outlives the tracer.
        let kept: Vec<Box<[u8; 64]>> = tracer
            .with(|_, h| {
                (0..1024)
                    .map(|i| {
                        h.0.push(vec![i as u8 | 1; 60 * 1024]);
                        Box::new([i as u8; 64])
                    })
                    .collect()
            })
            .expect("tracer");
        let held = rss_kib();
        assert!(held > before + 48 * 1024, "{before} KiB, then {held} KiB");
        tracer
            .with(|p, _| p.kill())
            .expect("tracer")
            .expect("kill sleep");
        drop(tracer);
        let after = rss_kib();
        assert!(
            after < before + 16 * 1024,
            "{before} KiB before, {held} KiB with the hooks' 60 MiB, {after} KiB once the \
             tracer was dropped"
        );
        assert!(kept.iter().enumerate().all(|(i, b)| b[0] == i as u8));
    }
}
