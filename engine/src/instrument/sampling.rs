//! The stack samples `consult` takes of a traced process ([`crate::consult::stacks`]'s
//! [`StackSource`]): each stops one thread at a time ([`Process::hold_each`]), reads its
//! registers, walks its stack with the unwinder and resumes it before stopping the next, so a
//! thread is held only for its own walk while the others run: the walk reads only that
//! thread's registers and stack, and the code before its `rip`; frames and futex addresses are
//! named after every thread runs again, from the modules' symbols. The search itself knows
//! nothing of processes; this is where the two meet.
//!
//! A thread asleep in a system call is walked without a stop when it can be: from the stack
//! pointer and pc `/proc` shows it asleep with, when every step of the walk is the call
//! frame information's (none needs a register the stop would have read: `rbp` for a frame
//! kept by frame pointer) and it reaches the thread's first frame or the walk's depth; the
//! frames are exactly those a stop would have found. One that has not run since its last
//! sample is given it again. Both are held for no time ([`Process::hold_each_since`]).
//!
//! A sampler covers the modules it was made with. When a stop shows code in a file the
//! process has mapped since (a library loaded while the search runs), the sampler opens that
//! library, drops the batch (its walks went through code without unwind tables, its frames
//! there were nameless) and ends its round; `Inferior::sample_stacks` begins the next with the
//! library included. No frame is ever named without the module that holds it.

use std::collections::{HashMap, HashSet};
use std::ops::Range;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::addr::LinkAddr;
use crate::consult::stacks::{
    self, Batch, FrameName, StackSource, Stacks, Syscall, Taken, ThreadStack,
};
use crate::process::{self, CallSite, Looked, Process, State, Tracer};
use crate::session::{Module, ModuleId};
use crate::unwind::{UnwindModule, Unwinder};

use super::frames::{proc_memory, top_regs};
use super::Live;

/// ELF's executable-segment flag.
const PF_X: u32 = 1;

/// The deepest stack a sample walks.
const MAX_FRAMES: usize = 64;

/// The stack sampler of one search: the unwinder over the modules loaded when it began, with
/// their call-frame information indexed before the first stop.
pub struct StackSampler<'a> {
    unwinder: Unwinder<'a>,
    /// The modules loaded when the round began, with their load biases.
    modules: &'a [(Arc<Module>, u64)],
    /// Their executable segments at run time.
    text: Vec<Range<u64>>,
}

impl<'a> StackSampler<'a> {
    /// A sampler over `modules` (each with its load bias). Indexes every module's call-frame
    /// information now, while the program runs, rather than inside the first stop (a large
    /// library's index takes tens of milliseconds).
    pub fn new(modules: &'a [(Arc<Module>, u64)]) -> StackSampler<'a> {
        let unwinder = Unwinder::new(
            modules
                .iter()
                .map(|(m, bias)| UnwindModule {
                    binary: &m.binary,
                    bias: *bias,
                })
                .collect(),
        );
        unwinder.index_all();
        let mut text = Vec::new();
        for (m, bias) in modules {
            for seg in m.binary.segments() {
                if seg.flags & PF_X != 0 && seg.memsz > 0 {
                    let start = seg.vaddr.0.wrapping_add(*bias);
                    text.push(start..start.wrapping_add(seg.memsz));
                }
            }
        }
        StackSampler {
            unwinder,
            modules,
            text,
        }
    }

    /// Samples the process `tracer` owns into `store` until `done`, paced by
    /// [`stacks::sample_stacks`] so it is stopped at most `cost` of the time; or until a
    /// stop shows code of a file mapped since this sampler was made. Returns those files,
    /// opened, with their load biases (none when `done` or an error ended it).
    pub fn run(
        &self,
        tracer: &Tracer<Live>,
        store: &Mutex<Stacks>,
        cost: f64,
        done: &AtomicBool,
    ) -> Vec<(Arc<Module>, u64)> {
        let mut source = TracerStacks {
            tracer,
            sampler: self,
            names: HashMap::new(),
            locks: HashMap::new(),
            outside: HashSet::new(),
            found: Vec::new(),
            looked: Looked::default(),
        };
        let found = AtomicBool::new(false);
        let mut source = Round {
            inner: &mut source,
            found: &found,
        };
        stacks::sample_stacks(&mut source, store, cost, &|| {
            done.load(Ordering::SeqCst) || found.load(Ordering::SeqCst)
        });
        std::mem::take(&mut source.inner.found)
    }

    /// True when `pc` lies in the code of a module this sampler knows.
    fn holds(&self, pc: u64) -> bool {
        self.text.iter().any(|r| r.contains(&pc))
    }
}

/// A [`TracerStacks`] that raises `found` once it has found a new module.
struct Round<'r, 's, 'a> {
    inner: &'r mut TracerStacks<'s, 'a>,
    found: &'r AtomicBool,
}

impl StackSource for Round<'_, '_, '_> {
    fn sample(&mut self) -> Result<Option<Batch>, String> {
        let batch = self.inner.sample();
        if !self.inner.found.is_empty() {
            self.found.store(true, Ordering::SeqCst);
        }
        batch
    }
}

/// A [`StackSource`] over a traced process, with the names found so far.
struct TracerStacks<'s, 'a> {
    tracer: &'s Tracer<Live>,
    sampler: &'s StackSampler<'a>,
    names: HashMap<u64, FrameName>,
    locks: HashMap<u64, Option<String>>,
    /// Addresses of code in no file the process has mapped (the vDSO, generated code).
    outside: HashSet<u64>,
    /// Files mapped since the sampler was made, opened, that samples showed code in.
    found: Vec<(Arc<Module>, u64)>,
    /// Each thread's last look: a thread that has not run since is given it again.
    looked: Looked<(Option<Syscall>, Vec<u64>)>,
}

/// One thread as its look left it: its system call, its frames' lookup addresses, how long it
/// was held and how it was looked at.
type Raw = (i32, Option<Syscall>, Vec<u64>, Duration, Taken);

impl TracerStacks<'_, '_> {
    /// Looks for the files holding `pcs` that lie in no module the sampler knows; opens each
    /// into [`TracerStacks::found`]. Addresses in no file are remembered as such.
    fn learn(&mut self, pcs: &[u64]) -> Result<(), String> {
        let unknown: Vec<u64> = pcs
            .iter()
            .copied()
            .filter(|pc| !self.sampler.holds(*pc) && !self.outside.contains(pc))
            .collect();
        if unknown.is_empty() {
            return Ok(());
        }
        let mapped = self
            .tracer
            .with(|p, _| p.modules())
            .map_err(|e| e.to_string())?
            .map_err(|e| e.to_string())?;
        for pc in unknown {
            let Some(m) = mapped
                .iter()
                .find(|m| m.text.iter().any(|r| r.contains(&pc)))
            else {
                self.outside.insert(pc);
                continue;
            };
            if self.found.iter().any(|(f, _)| f.binary.path() == m.path) {
                continue;
            }
            match crate::elf::Binary::open(&m.path) {
                Ok(binary) => {
                    let module = Module::new(ModuleId(u32::MAX), binary, m.is_main, Vec::new());
                    self.found.push((Arc::new(module), m.bias));
                }
                // Unreadable: named by its address, as code in no file is.
                Err(_) => {
                    self.outside.insert(pc);
                }
            }
        }
        Ok(())
    }

    /// The frame at lookup address `pc`.
    fn name(&mut self, pc: u64) -> FrameName {
        if let Some(n) = self.names.get(&pc) {
            return n.clone();
        }
        let n = frame_name(self.sampler.modules.iter().map(|(m, b)| (m, *b)), pc, pc);
        self.names.insert(pc, n.clone());
        n
    }

    /// The variable a futex address lies in, as `NAME` or `NAME+OFFSET`.
    fn lock_name(&mut self, addr: u64) -> Option<String> {
        if let Some(n) = self.locks.get(&addr) {
            return n.clone();
        }
        let n = self.sampler.modules.iter().find_map(|(m, bias)| {
            let link = addr.wrapping_sub(*bias);
            let v = m.functions().variables().iter().find(|v| {
                v.size > 0 && (v.addr.0..v.addr.0.saturating_add(v.size)).contains(&link)
            })?;
            let off = link - v.addr.0;
            Some(if off == 0 {
                v.name.clone()
            } else {
                format!("{}+{off}", v.name)
            })
        });
        self.locks.insert(addr, n.clone());
        n
    }
}

/// The system call a stopped thread is in (or has just finished, when the stop came at its
/// return): `orig_rax` holds its number only after a `syscall` instruction. A call the stop
/// interrupted while it slept returns `-EINTR` or one of the kernel's restart codes
/// (`ERESTARTSYS` 512 to `ERESTART_RESTARTBLOCK` 516), and is restarted on resuming.
fn in_syscall(p: &Process, r: &libc::user_regs_struct) -> Option<Syscall> {
    if (r.orig_rax as i64) < 0 {
        return None;
    }
    let before = p.read(r.rip.wrapping_sub(2), 2).ok()?;
    let ret = r.rax as i64;
    (before == [0x0f, 0x05]).then_some(Syscall {
        nr: r.orig_rax,
        args: [r.rdi, r.rsi, r.rdx],
        asleep: ret == -(libc::EINTR as i64) || (-516..=-512).contains(&ret),
    })
}

/// The lookup addresses of the frames of a thread asleep in system call `call`, walked from
/// its stack pointer and pc alone; `None` unless they are exactly a stop's
/// ([`Unwinder::walk_exact`]).
fn walk_asleep(
    unwinder: &Unwinder<'_>,
    p: &Process,
    live: &Live,
    call: &CallSite,
) -> Option<Vec<u64>> {
    let pc = live.origin(call.pc).map_or(call.pc, |(_, a)| a);
    let frames = unwinder.walk_exact(&proc_memory(p), pc, call.sp, MAX_FRAMES)?;
    Some(frames.iter().map(|f| f.lookup_pc()).collect())
}

impl StackSource for TracerStacks<'_, '_> {
    fn sample(&mut self) -> Result<Option<Batch>, String> {
        let unwinder = &self.sampler.unwinder;
        let looked = &mut self.looked;
        let taken = self
            .tracer
            .with(|p, live| -> Result<Option<Vec<Raw>>, String> {
                if p.state() != State::Running {
                    return Ok(None);
                }
                // At a raised priority, as a `Live` pause is: on a loaded machine the tracer
                // preempted in the middle of a stop held the program tens of ms.
                p.hurry(true);
                // One thread at a time, the others running: a thread's registers and stack
                // are its own. One asleep in a call is walked without a stop where it can be,
                // and one that has not run since its last look keeps that sample.
                let held = p.hold_each_since(
                    looked,
                    |p, _, r| {
                        let top = top_regs(live, r);
                        let frames = unwinder.walk(&proc_memory(p), top, MAX_FRAMES);
                        let pcs: Vec<u64> = frames.iter().map(|f| f.lookup_pc()).collect();
                        (in_syscall(p, r), pcs)
                    },
                    |p, _, call| {
                        let pcs = walk_asleep(unwinder, p, live, call)?;
                        let syscall = Syscall {
                            nr: call.nr,
                            args: [call.args[0], call.args[1], call.args[2]],
                            asleep: true,
                        };
                        Some((Some(syscall), pcs))
                    },
                );
                p.hurry(false);
                let held = held.map_err(|e| e.to_string())?;
                Ok(Some(
                    held.into_iter()
                        .map(|h| {
                            let taken = match h.taken {
                                process::Taken::Stopped => Taken::Stopped,
                                process::Taken::Asleep => Taken::Asleep,
                                process::Taken::Again => Taken::Again,
                            };
                            (h.tid, h.seen.0, h.seen.1, h.held, taken)
                        })
                        .collect(),
                ))
            })
            .map_err(|e| e.to_string())??;
        let Some(raw) = taken else {
            return Ok(None);
        };
        // Each thread was held alone, from when the tracer saw it stop to its resume: the
        // batch holds no thread longer than the longest of them.
        let stopped = raw.iter().map(|r| r.3).max().unwrap_or_default();
        let pcs: Vec<u64> = raw
            .iter()
            .flat_map(|(_, _, pcs, _, _)| pcs.iter().copied())
            .collect();
        self.learn(&pcs)?;
        if !self.found.is_empty() {
            // Walked through code without its unwind tables and named without its module:
            // the stop counts, its stacks do not.
            return Ok(Some(Batch {
                stopped,
                threads: Vec::new(),
            }));
        }
        let threads = raw
            .into_iter()
            .map(|(tid, syscall, pcs, held, taken)| {
                let frames: Vec<FrameName> = pcs.iter().map(|&pc| self.name(pc)).collect();
                let syscall = syscall.map(|s| stacks::waited_object(s, &frames));
                ThreadStack {
                    tid,
                    lock_name: syscall
                        .filter(|s| s.nr == libc::SYS_futex as u64)
                        .and_then(|s| self.lock_name(s.args[0])),
                    syscall,
                    frames,
                    pcs,
                    held,
                    taken,
                }
            })
            .collect();
        Ok(Some(Batch { stopped, threads }))
    }
}

/// The function of one of `modules` (each with its load bias) holding `at`, else `pc` as an
/// address in no module.
pub(crate) fn frame_name<'m>(
    modules: impl IntoIterator<Item = (&'m Arc<Module>, u64)>,
    at: u64,
    pc: u64,
) -> FrameName {
    modules
        .into_iter()
        .find_map(|(m, bias)| {
            let f = m.functions().containing(LinkAddr(at.wrapping_sub(bias)))?;
            Some(FrameName {
                module: m.name.clone(),
                function: f.display_name().to_owned(),
                main: m.is_main,
            })
        })
        .unwrap_or_else(|| FrameName {
            module: String::new(),
            function: format!("{pc:#x}"),
            main: false,
        })
}
