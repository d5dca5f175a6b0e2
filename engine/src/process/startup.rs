//! Attaching to a program still in its start-up. Right after `exec` the dynamic linker maps
//! and relocates the program's libraries, and only then (libc's early initialisation done)
//! tells debuggers that the link map is consistent (`r_debug.r_state = RT_CONSISTENT` and a
//! call of `r_brk`); before that, nothing gsh injects can call into libc (`dlopen` is not
//! mapped yet, or crashes unrelocated), and before `r_debug` is set up (`DT_DEBUG` still 0)
//! the libraries mapped later would go unnoticed. An attach in that window (a server attached
//! right after it was spawned: four times in ten) therefore lets the program run on to that
//! notification, or to its entry point when `r_brk` is not known yet, as `start` does, and
//! only then reports its modules; a program that gets to neither in time is let go, running,
//! with an error saying why. Only a process of one thread whose leader runs the dynamic
//! linker's code can be in its start-up (the constructors, which run later, may start threads
//! and may call `dlopen`, so injected calls are safe from there on).
//!
//! An attach can even meet the end of the `exec` itself: the kernel then reports the exec
//! event as the thread's first stop instead of the interrupt gsh sent. That event is the
//! attach's own stop (the process is the new program at its first instruction), not an exec
//! to follow later: kept as a deferred stop, it left the only thread unusable for injected
//! code and later stopped the process for good as an `exec`.

use std::time::{Duration, Instant};

use super::control::Process;
use super::error::ProcessError;
use super::ptrace::{self, WaitEvent, SI_KERNEL};
use super::rendezvous::RT_CONSISTENT;
use super::{maps, Hooks, ThreadState};

/// How long an attach waits for a program in its start-up to finish linking. The dynamic
/// linker needs milliseconds; longer means it is blocked (a library on a slow or hung file
/// system), and the program is let go rather than held.
const STARTUP_DEADLINE: Duration = Duration::from_secs(10);

/// Where in its start-up a process was met.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum StartUp {
    /// Past the dynamic linker's work (or a program without one): libc can run injected calls.
    Done,
    /// The dynamic linker is still mapping and relocating; `r_brk` when `r_debug` is set up.
    Linking {
        /// The address debuggers are told to hook (`_dl_debug_state`).
        r_brk: Option<u64>,
        /// libc is mapped already (else: not yet).
        libc: bool,
    },
}

impl Process {
    /// Drops an exec event that the attach's interrupt met as the leader's first stop (see
    /// the module's doc): it is the attach's stop. True when there was one.
    pub(crate) fn take_attach_exec(&mut self) -> bool {
        let before = self.deferred.len();
        let pid = self.pid;
        self.deferred
            .retain(|&(tid, ev)| !(tid == pid && ev == WaitEvent::Event(libc::PTRACE_EVENT_EXEC)));
        if self.deferred.len() == before {
            return false;
        }
        // Every other thread went with the old program.
        self.threads.retain(|&tid, _| tid == pid);
        true
    }

    /// Where in its start-up the stopped process is (see the module's doc).
    pub(crate) fn start_up(&mut self) -> Result<StartUp, ProcessError> {
        let aux = maps::auxv(self.pid)?;
        let Some(&base) = aux.get(&libc::AT_BASE).filter(|b| **b != 0) else {
            return Ok(StartUp::Done);
        };
        if self.threads.len() != 1 {
            return Ok(StartUp::Done);
        }
        let rip = ptrace::regs(self.pid)?.rip;
        let modules = self.modules()?;
        let in_linker = modules
            .iter()
            .any(|m| m.base == base && m.text.iter().any(|t| t.contains(&rip)));
        if !in_linker {
            return Ok(StartUp::Done);
        }
        let libc = modules.iter().any(|m| {
            m.path
                .file_name()
                .is_some_and(|f| f.to_string_lossy().starts_with("libc.so"))
        });
        let Some(r_debug) = self.find_r_debug()? else {
            // Not set up yet, when libc is not mapped either (the dynamic linker fills
            // DT_DEBUG in before it maps any library); else a program without DT_DEBUG.
            return Ok(if libc {
                StartUp::Done
            } else {
                StartUp::Linking { r_brk: None, libc }
            });
        };
        let r_brk = self.read_u64(r_debug + 16)?;
        if self.consistent(r_debug)? && libc {
            return Ok(StartUp::Done);
        }
        Ok(StartUp::Linking {
            r_brk: (r_brk != 0).then_some(r_brk),
            libc,
        })
    }

    /// `r_debug.r_state` is `RT_CONSISTENT`.
    fn consistent(&self, r_debug: u64) -> Result<bool, ProcessError> {
        let state = self.mem.read(r_debug + 24, 4)?;
        Ok(i32::from_le_bytes(state.try_into().unwrap_or_default()) == RT_CONSISTENT)
    }

    /// Runs a process attached while its dynamic linker was still linking until the link map
    /// is consistent (an `int3` at `r_brk`) or until its entry point (another), handling every
    /// stop on the way, and leaves it stopped there with both put back. An error when it
    /// ends, stops for another reason or takes longer than [`STARTUP_DEADLINE`]; the caller
    /// then lets it go.
    pub(crate) fn finish_start_up(
        &mut self,
        hooks: &mut dyn Hooks,
        met: StartUp,
    ) -> Result<(), ProcessError> {
        let StartUp::Linking { r_brk, libc } = met else {
            return Ok(());
        };
        let entry = maps::auxv(self.pid)?
            .get(&libc::AT_ENTRY)
            .copied()
            .ok_or_else(|| ProcessError::Io {
                path: format!("/proc/{}/auxv", self.pid).into(),
                detail: "no AT_ENTRY".into(),
            })?;
        let mut traps = vec![(entry, self.mem.read(entry, 1)?[0])];
        if let Some(at) = r_brk {
            traps.push((at, self.mem.read(at, 1)?[0]));
        }
        for &(at, _) in &traps {
            self.mem.write(at, &[0xcc])?;
        }
        let reached = self.run_until_linked(&traps, hooks);
        if self.state.is_alive() {
            self.halt()?;
            for &(at, orig) in &traps {
                self.mem.write(at, &[orig])?;
            }
        }
        let why = if libc {
            "libc was not relocated yet"
        } else {
            "libc was not mapped yet"
        };
        reached.map_err(|detail| ProcessError::StartUp {
            pid: self.pid,
            detail: format!("attached in its start-up ({why}), it {detail}"),
        })
    }

    /// Resumes the process and handles its stops until a thread traps at one of `traps`
    /// (`(address, original byte)`, the `int3`s in place): the entry point, or `r_brk` with
    /// the link map consistent (at `r_brk` otherwise it is stepped over). The thread is left
    /// at the trap's address.
    fn run_until_linked(
        &mut self,
        traps: &[(u64, u8)],
        hooks: &mut dyn Hooks,
    ) -> Result<(), String> {
        let r_debug = self.find_r_debug().ok().flatten();
        self.resume()
            .map_err(|e| format!("could not be resumed ({e})"))?;
        let started = Instant::now();
        loop {
            let (tid, ev) = match ptrace::wait(-1, true) {
                Ok(Some(x)) => x,
                Ok(None) => {
                    let left = STARTUP_DEADLINE.saturating_sub(started.elapsed());
                    if left.is_zero() {
                        return Err(format!(
                            "did not finish linking within {} s (is the dynamic linker \
                             blocked?)",
                            STARTUP_DEADLINE.as_secs()
                        ));
                    }
                    self.waker.wait(Some(left));
                    continue;
                }
                Err(e) => return Err(format!("could not be waited for ({e})")),
            };
            let rip = ptrace::regs(tid).map(|r| r.rip).unwrap_or(0);
            let hit = traps.iter().find(|&&(at, _)| rip == at.wrapping_add(1));
            if let (WaitEvent::Signal(libc::SIGTRAP), Some(&(at, orig))) = (ev, hit) {
                if ptrace::sig_code(tid).ok() == Some(SI_KERNEL) {
                    if let Some(t) = self.threads.get_mut(&tid) {
                        t.state = ThreadState::Stopped;
                    }
                    let to = |e: ProcessError| format!("could not be stopped there ({e})");
                    let mut r = ptrace::regs(tid).map_err(to)?;
                    r.rip = at;
                    ptrace::set_regs(tid, &r).map_err(to)?;
                    // `r_brk` called while still adding objects: on to the next call.
                    let adding = at != traps[0].0
                        && r_debug.is_some_and(|d| !self.consistent(d).unwrap_or(true));
                    if !adding {
                        return Ok(());
                    }
                    let stepped = self
                        .mem
                        .write(at, &[orig])
                        .and_then(|()| self.step(tid))
                        .and_then(|()| self.mem.write(at, &[0xcc]))
                        .and_then(|()| self.resume_thread(tid));
                    stepped.map_err(|e| format!("could not be stepped over r_brk ({e})"))?;
                    continue;
                }
            }
            match self.handle(tid, ev, hooks) {
                Ok(None) => {}
                Ok(Some(stop)) => return Err(format!("{stop} before its libraries were linked")),
                Err(e) => return Err(format!("could not be followed ({e})")),
            }
        }
    }
}
