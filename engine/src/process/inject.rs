//! Making the mutatee do things: injected system calls (`syscall; int3` run by one stopped
//! thread), injected function calls (a return address pointing at an `int3` stub), and
//! `dlopen` of a library. The memory they need comes from `pools.rs`.
//!
//! Every injection runs one thread while the others stay stopped, and puts back every register
//! (general, and for calls the floating-point and vector state too) and byte it changed. A
//! thread stopped inside a system call keeps its `orig_rax` and `-ERESTART*` return value in
//! the saved registers, so the interrupted call restarts when the thread resumes; the injected run itself gets `orig_rax = -1` so the kernel does not "restart"
//! it.

use std::path::Path;
use std::time::{Duration, Instant};

use object::{Object, ObjectSymbol};

use super::control::Process;
use super::error::ProcessError;
use super::ptrace::{self, WaitEvent, SI_KERNEL};
use super::{AllocKind, State, ThreadState};

/// An injected call that runs longer than this is abandoned (it may be waiting for a lock a
/// stopped thread holds).
const CALL_DEADLINE: Duration = Duration::from_secs(10);

const STUB: [u8; 4] = [0x0f, 0x05, 0xcc, 0xcc];

impl Process {
    /// The injection stub, mapping a small code pool for it on first use.
    fn stub(&mut self, near: u64) -> Result<u64, ProcessError> {
        if let Some(s) = self.pools.stub {
            return Ok(s);
        }
        let s = self.allocate(near, STUB.len() as u64, AllocKind::Code)?;
        self.mem.write(s, &STUB)?;
        self.pools.stub = Some(s);
        Ok(s)
    }

    /// The thread injections run on: the leader when it is plainly stopped, else another.
    fn inject_thread(&self) -> Result<i32, ProcessError> {
        let usable = |tid: &i32| {
            self.threads
                .get(tid)
                .is_some_and(|t| t.state == ThreadState::Stopped && !t.job)
                && !self.deferred.iter().any(|(d, _)| d == tid)
        };
        if usable(&self.pid) {
            return Ok(self.pid);
        }
        self.threads
            .keys()
            .copied()
            .find(usable)
            .ok_or_else(|| ProcessError::Inject {
                what: "code".into(),
                tid: self.pid,
                detail: "no thread is stopped in a state that can run injected code".into(),
            })
    }

    /// Runs `f` with every thread stopped, restoring the running state afterwards.
    pub(super) fn stopped<R>(
        &mut self,
        f: impl FnOnce(&mut Process) -> Result<R, ProcessError>,
    ) -> Result<R, ProcessError> {
        let was_running = self.state == State::Running;
        if was_running {
            self.halt()?;
        }
        let r = f(self);
        if was_running && self.state.is_alive() {
            self.resume()?;
        }
        r
    }

    /// Executes system call `nr` with `args` (at most 6) in a stopped thread; returns the raw
    /// result (`-errno` on failure).
    pub fn syscall(&mut self, nr: i64, args: &[u64]) -> Result<i64, ProcessError> {
        self.alive("injecting a syscall")?;
        if args.len() > 6 {
            return Err(ProcessError::Inject {
                what: format!("syscall {nr}"),
                tid: self.pid,
                detail: "a syscall takes at most 6 arguments".into(),
            });
        }
        self.stopped(|p| {
            let tid = p.inject_thread()?;
            let saved = ptrace::regs(tid)?;
            // Before the first pool exists, borrow the bytes at the thread's rip.
            let (at, restore) = match p.pools.stub {
                Some(s) => (s, None),
                None => (saved.rip, Some(p.mem.read(saved.rip, 3)?)),
            };
            if restore.is_some() {
                p.mem.write(at, &STUB[..3])?;
            }
            let mut r = saved;
            r.rip = at;
            r.rax = nr as u64;
            r.orig_rax = u64::MAX;
            let mut a = [0u64; 6];
            a[..args.len()].copy_from_slice(args);
            (r.rdi, r.rsi, r.rdx, r.r10, r.r8, r.r9) = (a[0], a[1], a[2], a[3], a[4], a[5]);
            let result = p.run_injected(tid, &r, at + 3, &format!("syscall {nr}"));
            if let Some(bytes) = restore {
                if p.state.is_alive() {
                    p.mem.write(at, &bytes)?;
                }
            }
            let out = result?;
            ptrace::set_regs(tid, &saved)?;
            Ok(out.rax as i64)
        })
    }

    /// Calls the function at `func` with integer `args` (at most 6) on a stopped thread, on
    /// its own stack below the red zone, returning to an `int3` stub; returns `rax`.
    pub fn call(&mut self, func: u64, args: &[u64]) -> Result<u64, ProcessError> {
        self.alive("injecting a call")?;
        if args.len() > 6 {
            return Err(ProcessError::Inject {
                what: format!("call of {func:#x}"),
                tid: self.pid,
                detail: "gsh passes at most 6 arguments, in registers".into(),
            });
        }
        self.stopped(|p| {
            let stub = p.stub(func)?;
            let ret_to = stub + 3;
            let tid = p.inject_thread()?;
            let saved = ptrace::regs(tid)?;
            // The called function may use any vector register (dlopen's string functions do),
            // and the thread may have been stopped in the middle of code that keeps values
            // there: they are put back with the general registers.
            let vectors = ptrace::vector_state(tid)?;
            let mut r = saved;
            // Below the red zone, 16-aligned at the call, then the pushed return address.
            let sp = ((saved.rsp - 256) & !0xf) - 8;
            p.mem.write(sp, &ret_to.to_le_bytes())?;
            r.rsp = sp;
            r.rip = func;
            r.rax = 0;
            r.orig_rax = u64::MAX;
            let mut a = [0u64; 6];
            a[..args.len()].copy_from_slice(args);
            (r.rdi, r.rsi, r.rdx, r.rcx, r.r8, r.r9) = (a[0], a[1], a[2], a[3], a[4], a[5]);
            let result = p.run_injected(tid, &r, ret_to + 1, &format!("call of {func:#x}"));
            if p.state.is_alive() {
                ptrace::set_regs(tid, &saved)?;
                ptrace::set_vector_state(tid, &vectors)?;
            }
            Ok(result?.rax)
        })
    }

    /// Sets `regs` on `tid`, runs it alone until it traps with `rip == done`, and returns its
    /// registers there. The thread is left stopped; the caller restores its registers.
    fn run_injected(
        &mut self,
        tid: i32,
        regs: &libc::user_regs_struct,
        done: u64,
        what: &str,
    ) -> Result<libc::user_regs_struct, ProcessError> {
        let fail = |detail: String| ProcessError::Inject {
            what: what.to_owned(),
            tid,
            detail,
        };
        ptrace::set_regs(tid, regs)?;
        ptrace::cont(tid, 0)?;
        let started = Instant::now();
        loop {
            let ev = match ptrace::wait(tid, true) {
                Ok(Some((_, ev))) => ev,
                Ok(None) => {
                    if started.elapsed() > CALL_DEADLINE {
                        // Get the thread back before giving up on it.
                        let _ = ptrace::interrupt(tid);
                        while let Ok(Some((_, ev))) = ptrace::wait(tid, false) {
                            if !matches!(ev, WaitEvent::Signal(_)) {
                                break;
                            }
                            let _ = ptrace::cont(tid, 0);
                        }
                        return Err(fail(format!(
                            "it did not finish within {} s (waiting for a lock another, stopped \
                             thread holds?); its registers were restored",
                            CALL_DEADLINE.as_secs()
                        )));
                    }
                    self.waker
                        .wait(Some(CALL_DEADLINE.saturating_sub(started.elapsed())));
                    continue;
                }
                Err(_) => {
                    self.state = State::Signaled(libc::SIGKILL);
                    self.threads.clear();
                    return Err(self.gone(what));
                }
            };
            match ev {
                WaitEvent::Exited(_) | WaitEvent::Signaled(_) => {
                    // The thread died under the call: the process is exiting (exit_group, or a
                    // SIGKILL from outside). The leader's status tells how, when it is the one.
                    if tid == self.pid {
                        self.state = match ev {
                            WaitEvent::Exited(code) => State::Exited(code),
                            WaitEvent::Signaled(sig) => State::Signaled(sig),
                            _ => self.state,
                        };
                        self.threads.clear();
                    } else {
                        self.threads.remove(&tid);
                    }
                    return Err(ProcessError::Gone {
                        pid: self.pid,
                        during: what.to_owned(),
                        how: "the thread running it died".into(),
                    });
                }
                WaitEvent::Event(libc::PTRACE_EVENT_EXIT) => {
                    // SIGKILL from outside, or exit() inside the call: let it die, report.
                    let _ = ptrace::cont(tid, 0);
                }
                WaitEvent::Event(libc::PTRACE_EVENT_CLONE) => {
                    if let Ok(new) = ptrace::event_msg(tid) {
                        // Unless its first stop came first (see `Process::handle`).
                        if !self.early_threads.remove(&(new as i32)) {
                            self.threads
                                .entry(new as i32)
                                .or_insert(super::control::Thread::new(ThreadState::Starting));
                        }
                    }
                    ptrace::cont(tid, 0)?;
                }
                WaitEvent::Event(_) | WaitEvent::EventStop(_) => ptrace::cont(tid, 0)?,
                WaitEvent::Signal(libc::SIGTRAP) => {
                    let r = ptrace::regs(tid)?;
                    let kernel = ptrace::sig_code(tid)? == SI_KERNEL;
                    if kernel && r.rip == done {
                        return Ok(r);
                    }
                    if kernel && self.is_rendezvous_hit(r.rip) {
                        self.step_over_rendezvous(tid)?;
                        ptrace::cont(tid, 0)?;
                        continue;
                    }
                    return Err(fail(format!(
                        "it hit a breakpoint at {:#x}; its registers were restored",
                        r.rip - 1
                    )));
                }
                WaitEvent::Signal(
                    sig @ (libc::SIGSEGV | libc::SIGBUS | libc::SIGILL | libc::SIGFPE),
                ) => {
                    let rip = ptrace::regs(tid).map(|r| r.rip).unwrap_or(0);
                    return Err(fail(format!(
                        "it crashed with {} at {rip:#x}; its registers were restored",
                        ptrace::signal_name(sig)
                    )));
                }
                // dlopen inside the call passed the dynamic linker's hook.
                WaitEvent::Signal(sig) if self.is_rendezvous_signal(tid, sig) => {
                    self.note_rendezvous()?;
                    ptrace::cont(tid, 0)?;
                }
                WaitEvent::Signal(sig) => {
                    // Not ours to take: delivered when the process resumes.
                    if let Some(t) = self.threads.get_mut(&tid) {
                        t.pending.push(sig);
                    }
                    ptrace::cont(tid, 0)?;
                }
            }
        }
    }

    /// Loads the shared library at `path` into the process with `dlopen(path, RTLD_NOW)`;
    /// returns the handle. The hooks see its modules (`modules_changed`) when the command ends.
    pub fn load_library(&mut self, path: &Path) -> Result<u64, ProcessError> {
        self.alive("loading a library")?;
        let abs = std::fs::canonicalize(path).map_err(|e| ProcessError::Dlopen {
            path: path.to_owned(),
            detail: e.to_string(),
        })?;
        let dlopen = self.dynamic_symbol("dlopen")?;
        let dlerror = self.dynamic_symbol("dlerror")?;
        let mut text = abs.as_os_str().as_encoded_bytes().to_vec();
        text.push(0);
        let at = self.allocate(dlopen, text.len() as u64, AllocKind::Data)?;
        self.write(at, &text)?;
        let handle = self.call(dlopen, &[at, libc::RTLD_NOW as u64])?;
        if handle != 0 {
            return Ok(handle);
        }
        let msg = self.call(dlerror, &[])?;
        let detail = if msg == 0 {
            "dlopen returned NULL and dlerror says nothing".to_owned()
        } else {
            self.c_string(msg)?
        };
        Err(ProcessError::Dlopen { path: abs, detail })
    }

    /// The NUL-terminated string at `addr` (at most 4 KiB).
    fn c_string(&self, addr: u64) -> Result<String, ProcessError> {
        let mut out = Vec::new();
        let mut at = addr;
        while out.len() < 4096 {
            // Read up to the page end so a string near an unmapped page still reads.
            let chunk = (0x1000 - (at & 0xfff)) as usize;
            let bytes = self.mem.read(at, chunk)?;
            if let Some(n) = bytes.iter().position(|&b| b == 0) {
                out.extend_from_slice(&bytes[..n]);
                return Ok(String::from_utf8_lossy(&out).into_owned());
            }
            out.extend_from_slice(&bytes);
            at += chunk as u64;
        }
        Ok(String::from_utf8_lossy(&out).into_owned())
    }

    /// The runtime address of `name` in libc's dynamic symbols (glibc 2.34+ exports `dlopen`
    /// there), else in libdl's.
    fn dynamic_symbol(&mut self, name: &str) -> Result<u64, ProcessError> {
        let modules = self.modules()?;
        let mut looked = Vec::new();
        for lib in ["libc.so", "libdl.so"] {
            for m in modules.iter().filter(|m| {
                m.path
                    .file_name()
                    .is_some_and(|f| f.to_string_lossy().starts_with(lib))
            }) {
                looked.push(m.path.display().to_string());
                let data = std::fs::read(&m.path).map_err(|e| ProcessError::Io {
                    path: m.path.clone(),
                    detail: e.to_string(),
                })?;
                let file = object::File::parse(&*data).map_err(|e| ProcessError::Io {
                    path: m.path.clone(),
                    detail: e.to_string(),
                })?;
                if let Some(s) = file
                    .dynamic_symbols()
                    .find(|s| s.is_definition() && s.name() == Ok(name))
                {
                    return Ok(m.bias.wrapping_add(s.address()));
                }
            }
        }
        Err(ProcessError::NoSymbol {
            symbol: name.to_owned(),
            detail: if looked.is_empty() {
                "no libc.so or libdl.so is mapped; is the program static?".into()
            } else {
                format!("looked in {}", looked.join(", "))
            },
        })
    }
}
