//! The stack samples `consult` takes of a traced process ([`crate::consult::stacks`]'s
//! [`StackSource`]): each stops every thread (`halt`), reads its registers, walks its stack
//! with the unwinder and resumes; frames and futex addresses are named after the process runs
//! again. The search itself knows nothing of processes; this is where the two meet.

use std::collections::HashMap;
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::addr::LinkAddr;
use crate::consult::stacks::{self, Batch, FrameName, StackSource, Stacks, Syscall, ThreadStack};
use crate::process::{Process, State, Tracer};
use crate::session::Module;
use crate::unwind::{UnwindModule, Unwinder};

use super::frames::{top_regs, ProcMemory};
use super::Live;

/// ELF's executable-segment flag.
const PF_X: u32 = 1;

/// The deepest stack a sample walks.
const MAX_FRAMES: usize = 64;

/// The stack sampler of one search: the unwinder over the modules loaded when it began, with
/// their call-frame information indexed before the first stop.
pub struct StackSampler<'a> {
    unwinder: Unwinder<'a>,
    /// The modules loaded when the search began, with their load biases.
    modules: &'a [(Arc<Module>, u64)],
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
        for (m, bias) in modules {
            for seg in m.binary.segments() {
                if seg.flags & PF_X != 0 && seg.memsz > 0 {
                    let _ = unwinder.call_site(seg.vaddr.0.wrapping_add(*bias).wrapping_add(1));
                }
            }
        }
        StackSampler { unwinder, modules }
    }

    /// Samples the process `tracer` owns into `store` until `done`, paced by
    /// [`stacks::sample_stacks`] so it is stopped at most `cost` of the time.
    pub fn run(&self, tracer: &Tracer<Live>, store: &Mutex<Stacks>, cost: f64, done: &AtomicBool) {
        let mut source = TracerStacks {
            tracer,
            sampler: self,
            names: HashMap::new(),
            locks: HashMap::new(),
        };
        stacks::sample_stacks(&mut source, store, cost, done);
    }
}

/// A [`StackSource`] over a traced process, with the names found so far.
struct TracerStacks<'s, 'a> {
    tracer: &'s Tracer<Live>,
    sampler: &'s StackSampler<'a>,
    names: HashMap<u64, FrameName>,
    locks: HashMap<u64, Option<String>>,
}

/// One thread as a stop left it: its system call and its frames' lookup addresses.
type Raw = (i32, Option<Syscall>, Vec<u64>);

impl TracerStacks<'_, '_> {
    /// The frame at lookup address `pc`.
    fn name(&mut self, pc: u64) -> FrameName {
        if let Some(n) = self.names.get(&pc) {
            return n.clone();
        }
        let n = self
            .sampler
            .modules
            .iter()
            .find_map(|(m, bias)| {
                let f = m.functions().containing(LinkAddr(pc.wrapping_sub(*bias)))?;
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
            });
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
        interrupted: ret == -(libc::EINTR as i64) || (-516..=-512).contains(&ret),
    })
}

impl StackSource for TracerStacks<'_, '_> {
    fn sample(&mut self) -> Result<Option<Batch>, String> {
        let unwinder = &self.sampler.unwinder;
        let taken = self
            .tracer
            .with(|p, live| -> Result<Option<(Duration, Vec<Raw>)>, String> {
                if p.state() != State::Running {
                    return Ok(None);
                }
                let t0 = Instant::now();
                p.halt().map_err(|e| e.to_string())?;
                let mut raw = Vec::new();
                for th in p.threads() {
                    let Ok(r) = p.regs(th.tid) else { continue };
                    let frames = unwinder.walk(&ProcMemory(p), top_regs(live, &r), MAX_FRAMES);
                    raw.push((
                        th.tid,
                        in_syscall(p, &r),
                        frames.iter().map(|f| f.lookup_pc()).collect(),
                    ));
                }
                p.resume().map_err(|e| e.to_string())?;
                Ok(Some((t0.elapsed(), raw)))
            })
            .map_err(|e| e.to_string())??;
        let Some((stopped, raw)) = taken else {
            return Ok(None);
        };
        let threads = raw
            .into_iter()
            .map(|(tid, syscall, pcs)| ThreadStack {
                tid,
                lock_name: syscall
                    .filter(|s| s.nr == libc::SYS_futex as u64)
                    .and_then(|s| self.lock_name(s.args[0])),
                syscall,
                frames: pcs.into_iter().map(|pc| self.name(pc)).collect(),
            })
            .collect();
        Ok(Some(Batch { stopped, threads }))
    }
}
