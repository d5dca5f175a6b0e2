//! Stack unwinding for a stopped thread: from one set of registers to the chain of callers,
//! the walk behind `where`/`up`/`down` and call-path profiles.
//!
//! Each step prefers `.eh_frame` CFI (distro binaries rarely keep frame pointers), evaluating
//! DWARF expressions where the CFI uses them (glibc's PLT stubs and its `__restore_rt` signal
//! trampoline do). Only where no CFI covers the pc does it fall back: to a hand-decoded
//! `rt_sigframe` at a `sigreturn` stub, then to the `rbp` chain (with a small prologue check for
//! the top frame), then to a scan of the stack for a word that is a return address. Memory is
//! read through [`Memory`], so the same walk serves a ptrace'd process and, in tests, our own.
//!
//! Addresses: an FDE covers *link* addresses, so a runtime pc is looked up at `pc - bias`. For
//! every frame above the top one the pc is a return address, which may lie just past the end of
//! the calling function (a call to a `noreturn` function), so lookups use `pc - 1`;
//! [`Frame::pc`] stays the return address. The exceptions are the top frame and a frame
//! interrupted by a signal, whose pc is where execution actually stopped.

#![warn(missing_docs)]

use std::sync::{Arc, Mutex, OnceLock};

use gimli::{
    BaseAddresses, CfaRule, CieOrFde, EhFrame, EndianSlice, EvaluationResult, LittleEndian,
    Register, RegisterRule, UnwindContext, UnwindExpression, UnwindSection, Value,
};
use iced_x86::{Decoder, DecoderOptions, FlowControl};

use crate::elf::Binary;

#[cfg(test)]
mod tests;

/// Reads the target's memory (a ptrace'd process, or in tests our own). `None` when the
/// address cannot be read; the walk then stops rather than guessing.
pub trait Memory {
    /// The 8 bytes at `addr`, little-endian; `None` when they cannot be read.
    fn read_u64(&self, addr: u64) -> Option<u64>;
}

/// A [`Memory`] read a page at a time through `read_page` (the page's address to its
/// [`PAGE`] bytes, `None` when it cannot be read), each page once: a walk reads a word or two
/// per frame, mostly from the few pages of one stack. Read a word at a time from a ptrace'd
/// process, python3's stacks took about a hundred reads of `/proc/PID/mem` per sample, half
/// of what a stack sample cost gsh's tracer. The pages are those of one moment: make one for
/// each walk of a stopped thread.
pub struct Pages<F> {
    read_page: F,
    /// The pages read so far, by their address: `None` for one that could not be read.
    pages: std::cell::RefCell<Vec<(u64, Option<Vec<u8>>)>>,
}

/// The unit [`Pages`] reads in: the smallest a mapping can be.
pub const PAGE: u64 = 4096;

impl<F: Fn(u64) -> Option<Vec<u8>>> Pages<F> {
    /// Memory read through `read_page`.
    pub fn new(read_page: F) -> Pages<F> {
        Pages {
            read_page,
            pages: Default::default(),
        }
    }

    /// The `N` bytes at `addr`, which lie in one page.
    fn within<const N: usize>(&self, addr: u64) -> Option<[u8; N]> {
        let page = addr & !(PAGE - 1);
        let from = (addr - page) as usize;
        let mut pages = self.pages.borrow_mut();
        let i = match pages.iter().position(|(at, _)| *at == page) {
            Some(i) => i,
            None => {
                let bytes = (self.read_page)(page).filter(|b| b.len() as u64 == PAGE);
                pages.push((page, bytes));
                pages.len() - 1
            }
        };
        pages[i].1.as_ref()?.get(from..from + N)?.try_into().ok()
    }

    /// How many pages were read (or tried).
    pub fn pages_read(&self) -> usize {
        self.pages.borrow().len()
    }
}

impl<F: Fn(u64) -> Option<Vec<u8>>> Memory for Pages<F> {
    fn read_u64(&self, addr: u64) -> Option<u64> {
        let b = if addr & (PAGE - 1) <= PAGE - 8 {
            self.within::<8>(addr)?
        } else {
            // Across two pages.
            let mut b = [0u8; 8];
            for (i, x) in (0..).zip(b.iter_mut()) {
                *x = self.within::<1>(addr.checked_add(i)?)?[0];
            }
            b
        };
        Some(u64::from_le_bytes(b))
    }
}

/// A loaded module: its binary (for `.eh_frame` and code bytes) and its load bias, the amount
/// added to its link addresses to get runtime addresses (0 for a non-PIE executable).
pub struct UnwindModule<'a> {
    /// The module's file, for its `.eh_frame` and code bytes.
    pub binary: &'a Binary,
    /// Its load bias: runtime address minus link address (0 for a non-PIE executable).
    pub bias: u64,
}

/// The load bias of `binary` mapped at `map_start` from file offset `map_offset` (one line of
/// `/proc/PID/maps`), or `None` when no `PT_LOAD` segment starts at that offset.
pub fn load_bias(binary: &Binary, map_start: u64, map_offset: u64) -> Option<u64> {
    const PAGE: u64 = 0xfff;
    let seg = binary
        .segments()
        .iter()
        .find(|s| s.offset.0 & !PAGE == map_offset)?;
    Some(map_start.wrapping_sub(seg.vaddr.0 & !PAGE))
}

/// x86-64 DWARF register numbers.
mod reg {
    pub const RBP: u16 = 6;
    pub const RSP: u16 = 7;
    /// The return-address column, which is the caller's `rip`.
    pub const RA: u16 = 16;
    /// Registers a callee must preserve (SysV ABI): with no CFI rule they keep their value.
    pub const CALLEE_SAVED: [u16; 6] = [3, 6, 12, 13, 14, 15];
    /// `Regs::unknown` with every register 0..=16 unknown.
    pub const ALL_UNKNOWN: u32 = (1 << 17) - 1;
}

/// Registers of one frame, x86-64 DWARF numbering: rax=0 rdx=1 rcx=2 rbx=3 rsi=4 rdi=5 rbp=6
/// rsp=7 r8-r15=8-15, rip (the return-address column)=16.
///
/// In frames above the top one, registers the CFI cannot recover (the caller-saved ones,
/// mostly) are marked in `unknown` and read as `None` through [`Regs::get`]; their fields then
/// hold stale values. `Default` gives all registers zero and known.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Regs {
    /// `rip` (DWARF column 16, the return-address column): the frame's pc.
    pub rip: u64,
    /// `rsp` (DWARF register 7); above frame 0, the CFA of the frame below.
    pub rsp: u64,
    /// `rbp` (DWARF register 6).
    pub rbp: u64,
    /// `rbx` (DWARF register 3).
    pub rbx: u64,
    /// `r12` (DWARF register 12).
    pub r12: u64,
    /// `r13` (DWARF register 13).
    pub r13: u64,
    /// `r14` (DWARF register 14).
    pub r14: u64,
    /// `r15` (DWARF register 15).
    pub r15: u64,
    /// `rax` (DWARF register 0).
    pub rax: u64,
    /// `rdx` (DWARF register 1).
    pub rdx: u64,
    /// `rcx` (DWARF register 2).
    pub rcx: u64,
    /// `rsi` (DWARF register 4).
    pub rsi: u64,
    /// `rdi` (DWARF register 5).
    pub rdi: u64,
    /// `r8` (DWARF register 8).
    pub r8: u64,
    /// `r9` (DWARF register 9).
    pub r9: u64,
    /// `r10` (DWARF register 10).
    pub r10: u64,
    /// `r11` (DWARF register 11).
    pub r11: u64,
    /// Bit `n` set: DWARF register `n` was not recovered in this frame.
    pub unknown: u32,
}

impl Regs {
    /// A thread's registers where only its pc and stack pointer are known (a thread asleep
    /// in a system call, as `/proc/PID/task/TID/syscall` shows it): a walk from them steps
    /// only where a frame needs no other register.
    pub fn pc_and_sp(rip: u64, rsp: u64) -> Regs {
        Regs {
            rip,
            rsp,
            unknown: reg::ALL_UNKNOWN & !((1 << reg::RSP) | (1 << reg::RA)),
            ..Regs::default()
        }
    }

    /// DWARF register `n`, or `None` when it was not recovered (or `n` is not a general
    /// register or rip).
    pub fn get(&self, n: u16) -> Option<u64> {
        if n > reg::RA || self.unknown & (1 << n) != 0 {
            return None;
        }
        Some(*self.field(n)?)
    }

    /// Sets DWARF register `n`; `None` marks it unknown. Numbers above 16 are ignored.
    pub fn set(&mut self, n: u16, value: Option<u64>) {
        let Some(field) = self.field_mut(n) else {
            return;
        };
        match value {
            Some(v) => {
                *field = v;
                self.unknown &= !(1 << n);
            }
            None => self.unknown |= 1 << n,
        }
    }

    fn field(&self, n: u16) -> Option<&u64> {
        Some(match n {
            0 => &self.rax,
            1 => &self.rdx,
            2 => &self.rcx,
            3 => &self.rbx,
            4 => &self.rsi,
            5 => &self.rdi,
            6 => &self.rbp,
            7 => &self.rsp,
            8 => &self.r8,
            9 => &self.r9,
            10 => &self.r10,
            11 => &self.r11,
            12 => &self.r12,
            13 => &self.r13,
            14 => &self.r14,
            15 => &self.r15,
            16 => &self.rip,
            _ => return None,
        })
    }

    fn field_mut(&mut self, n: u16) -> Option<&mut u64> {
        Some(match n {
            0 => &mut self.rax,
            1 => &mut self.rdx,
            2 => &mut self.rcx,
            3 => &mut self.rbx,
            4 => &mut self.rsi,
            5 => &mut self.rdi,
            6 => &mut self.rbp,
            7 => &mut self.rsp,
            8 => &mut self.r8,
            9 => &mut self.r9,
            10 => &mut self.r10,
            11 => &mut self.r11,
            12 => &mut self.r12,
            13 => &mut self.r13,
            14 => &mut self.r14,
            15 => &mut self.r15,
            16 => &mut self.rip,
            _ => return None,
        })
    }
}

/// How a frame's registers were found from the frame below it (breakpad's "found by").
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FoundBy {
    /// Frame 0: the registers the walk started from.
    Top,
    /// The callee's `.eh_frame` CFI.
    Cfi,
    /// The callee's `rbp` chain (or, for the top frame, its prologue).
    FramePointer,
    /// The `ucontext` a signal handler's trampoline returns through; the pc is where the
    /// signal interrupted the thread, not a return address.
    SignalFrame,
    /// A stack word that looks like a return address: least trustworthy.
    Scan,
}

/// One frame of a walk.
#[derive(Clone, Copy, Debug)]
pub struct Frame {
    /// The frame's pc: for frame 0 and frames found by [`FoundBy::SignalFrame`] where the
    /// thread stopped, for every other frame the return address (one past the call).
    pub pc: u64,
    /// The canonical frame address: the caller's stack pointer once this frame returns (for
    /// glibc's signal trampoline, the interrupted stack pointer). 0 when the walk could not
    /// unwind this frame, which is then the last.
    pub cfa: u64,
    /// The registers recovered in this frame; those not recovered are marked in [`Regs::unknown`].
    pub regs: Regs,
    /// How the walk found this frame.
    pub how: FoundBy,
}

impl Frame {
    /// Whether [`Frame::pc`] is where the thread actually was (frame 0, or a frame a signal
    /// interrupted) rather than a return address.
    pub fn pc_is_exact(&self) -> bool {
        matches!(self.how, FoundBy::Top | FoundBy::SignalFrame)
    }

    /// The address to symbolize (function, line) and to look CFI up at: the pc itself when
    /// exact, else `pc - 1`, which is inside the call instruction even when the call is the
    /// last instruction of its function.
    pub fn lookup_pc(&self) -> u64 {
        if self.pc_is_exact() {
            self.pc
        } else {
            self.pc.wrapping_sub(1)
        }
    }
}

type Slice<'a> = EndianSlice<'a, LittleEndian>;

/// How to find a caller's frame from a call site, in the simple form a runtime walker uses.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CallSiteRule {
    /// The CFA is `rbp + cfa_offset`; else `rsp + cfa_offset`, `rsp` as it is at the call
    /// instruction (just after the callee returns).
    pub cfa_from_rbp: bool,
    /// Bytes added to `rbp` or `rsp` to get the CFA.
    pub cfa_offset: u32,
    /// The caller's caller's `rbp` is saved at `CFA + this`; `None`: `rbp` is unchanged here.
    pub rbp_saved_at: Option<i16>,
}

/// One FDE's link-address range and where it sits in `.eh_frame`.
#[derive(Clone, Copy, Debug)]
struct FdeSpan {
    start: u64,
    end: u64,
    offset: usize,
}

/// A module's CFI, indexed lazily on first use: most walks touch a handful of modules.
struct ModuleCfi<'a> {
    binary: &'a Binary,
    bias: u64,
    eh_frame: Option<(EhFrame<Slice<'a>>, BaseAddresses)>,
    /// FDEs sorted by start address.
    index: OnceLock<Vec<FdeSpan>>,
}

impl<'a> ModuleCfi<'a> {
    fn index(&self) -> &[FdeSpan] {
        self.index.get_or_init(|| {
            let Some((eh_frame, bases)) = &self.eh_frame else {
                return Vec::new();
            };
            let mut spans = Vec::new();
            let mut entries = eh_frame.entries(bases);
            // A malformed entry ends the index: what came before it is still good.
            while let Ok(Some(entry)) = entries.next() {
                let CieOrFde::Fde(partial) = entry else {
                    continue;
                };
                let offset = partial.offset();
                if let Ok(fde) = partial.parse(EhFrame::cie_from_offset) {
                    if fde.len() > 0 {
                        spans.push(FdeSpan {
                            start: fde.initial_address(),
                            end: fde.end_address(),
                            offset,
                        });
                    }
                }
            }
            spans.sort_by_key(|s| s.start);
            spans
        })
    }

    /// The FDE span covering link address `addr`. FDEs do not overlap in practice; where
    /// they do, the one starting last wins.
    fn span_for(&self, addr: u64) -> Option<FdeSpan> {
        let index = self.index();
        let after = index.partition_point(|s| s.start <= addr);
        let span = *index.get(after.checked_sub(1)?)?;
        (addr < span.end).then_some(span)
    }
}

/// The unwind rule for one pc, owned so it can be cached and applied without the
/// [`UnwindContext`] that produced it.
struct Rule {
    module: usize,
    /// Runtime end of the FDE's range: a return address equal to it is just past the function
    /// (after a `noreturn` call, or on a `sigreturn` stub placed right after it).
    end: u64,
    encoding: gimli::Encoding,
    cfa: CfaRule<usize>,
    /// Indexed by DWARF register number 0..=16; `None` is "no rule given".
    regs: [Option<RegisterRule<usize>>; 17],
    /// The CIE's return-address column.
    ra: u16,
    /// The FDE is a signal trampoline's (`S` augmentation).
    signal: bool,
}

/// Entries in the pc → rule cache before it is emptied; bounds memory for long profiles.
const RULE_CACHE_MAX: usize = 1 << 16;
/// Stack words the return-address scan looks at before giving up.
const SCAN_WORDS: u64 = 512;
/// Largest believable frame when following `rbp`: a guard against garbage in `rbp`.
const MAX_FP_FRAME: u64 = 64 << 20;
/// Operations one DWARF expression may run: CFI expressions are a handful of operations.
const MAX_EXPR_STEPS: u32 = 1000;

/// Walks stacks of one process through the CFI of its modules. Build it once per set of loaded
/// modules; it caches the FDE index of each module and the unwind rule of each pc it has seen,
/// so repeated walks (a profile) cost a hash lookup and a few memory reads per frame.
pub struct Unwinder<'a> {
    modules: Vec<ModuleCfi<'a>>,
    /// Executable runtime ranges `(start, end, module)`, sorted by start.
    code: Vec<(u64, u64, usize)>,
    /// Rules by runtime lookup address; `None` caches "no CFI here".
    rules: Mutex<foldhash::HashMap<u64, Option<Arc<Rule>>>>,
    context: Mutex<UnwindContext<usize>>,
}

/// What one step from a frame produced.
enum Step {
    /// The caller's registers, this frame's CFA, and how they were found (which also says
    /// whether the caller's pc is exact: see [`Frame::pc_is_exact`]).
    Caller { regs: Regs, cfa: u64, how: FoundBy },
    /// The CFI says this is the outermost frame (the return address is undefined).
    End { cfa: u64 },
}

impl<'a> Unwinder<'a> {
    /// An unwinder over `modules`. Cheap: each module's `.eh_frame` is indexed the first time a
    /// pc inside it is unwound.
    pub fn new(modules: Vec<UnwindModule<'a>>) -> Unwinder<'a> {
        let mut code = Vec::new();
        let modules: Vec<ModuleCfi<'a>> = modules
            .into_iter()
            .enumerate()
            .map(|(i, m)| {
                for seg in m.binary.segments() {
                    if seg.flags & object::elf::PF_X != 0 && seg.memsz > 0 {
                        let start = seg.vaddr.0.wrapping_add(m.bias);
                        code.push((start, start.saturating_add(seg.memsz), i));
                    }
                }
                ModuleCfi {
                    binary: m.binary,
                    bias: m.bias,
                    eh_frame: crate::symbols::ehframe::eh_frame(m.binary),
                    index: OnceLock::new(),
                }
            })
            .collect();
        code.sort_by_key(|c| c.0);
        Unwinder {
            modules,
            code,
            rules: Mutex::new(foldhash::HashMap::default()),
            context: Mutex::new(UnwindContext::new()),
        }
    }

    /// Indexes every module's CFI now rather than at the first pc unwound in it: before a
    /// stop, so the stop does not wait for a large library's index.
    pub fn index_all(&self) {
        for m in &self.modules {
            m.index();
        }
    }

    /// The module whose executable segments hold runtime address `addr`.
    pub fn module_at(&self, addr: u64) -> Option<usize> {
        let after = self.code.partition_point(|c| c.0 <= addr);
        let (_, end, module) = *self.code.get(after.checked_sub(1)?)?;
        (addr < end).then_some(module)
    }

    /// Walks from `top` (frame 0) to at most `max` frames. The walk stops at a pc of 0, at the
    /// outermost frame the CFI marks, at a pc in no module (that frame is kept; only the top
    /// frame may be unwound from outside every module, by frame pointer or scan), at a stack
    /// pointer that does not grow (except through a signal frame, which may switch stacks), or
    /// when no method can unwind a frame. It never panics and never loops: `max` bounds it.
    pub fn walk(&self, mem: &dyn Memory, top: Regs, max: usize) -> Vec<Frame> {
        self.walk_to_outermost(mem, top, max).0
    }

    /// [`Unwinder::walk`], and whether the walk reached the thread's outermost frame: the last
    /// frame's CFI marks its return address undefined (glibc's `_start`, a thread's first frame
    /// in `clone`), so the frames are the whole chain. False when it stopped for any other
    /// reason (`max`, a pc of 0 or in no module, a frame no method could step).
    pub fn walk_to_outermost(&self, mem: &dyn Memory, top: Regs, max: usize) -> (Vec<Frame>, bool) {
        let mut frames: Vec<Frame> = Vec::new();
        if max == 0 {
            return (frames, false);
        }
        frames.push(Frame {
            pc: top.rip,
            cfa: 0,
            regs: top,
            how: FoundBy::Top,
        });
        while frames.len() < max {
            let Some(cur) = frames.last_mut() else {
                break;
            };
            if cur.pc == 0 || cur.regs.get(reg::RSP).is_none() {
                break;
            }
            let in_module = self.module_at(cur.pc).is_some();
            if !in_module && cur.how != FoundBy::Top {
                break;
            }
            let step = self.step(mem, cur, in_module);
            let (regs, cfa, how) = match step {
                Some(Step::Caller { regs, cfa, how }) => (regs, cfa, how),
                Some(Step::End { cfa }) => {
                    cur.cfa = cfa;
                    return (frames, true);
                }
                None => break,
            };
            // A caller's frame lies above its callee's; only a signal may switch stacks.
            if how != FoundBy::SignalFrame && regs.rsp <= cur.regs.rsp {
                break;
            }
            cur.cfa = cfa;
            if regs.rip == 0 || regs.get(reg::RA).is_none() {
                break;
            }
            frames.push(Frame {
                pc: regs.rip,
                cfa: 0,
                regs,
                how,
            });
        }
        (frames, false)
    }

    /// The frames of a thread of which only the pc and stack pointer are known (asleep in a
    /// system call, as `/proc/PID/task/TID/syscall` shows it), when they are exactly the
    /// frames a walk from all its registers finds: every step by the call frame information
    /// (a signal frame's saved context included), which needed no register but those it
    /// recovered, and the walk ending at the thread's first frame or at `max`. `None` where a
    /// step needed another register (a frame-pointer function's CFA is `rbp`'s) and fell
    /// back to the frame-pointer chain or a scan, which guess.
    pub fn walk_exact(&self, mem: &dyn Memory, pc: u64, sp: u64, max: usize) -> Option<Vec<Frame>> {
        let (frames, whole) = self.walk_to_outermost(mem, Regs::pc_and_sp(pc, sp), max);
        let by_cfi = frames
            .iter()
            .skip(1)
            .all(|f| matches!(f.how, FoundBy::Cfi | FoundBy::SignalFrame));
        (by_cfi && (whole || frames.len() == max)).then_some(frames)
    }

    /// One step from `frame` to its caller.
    fn step(&self, mem: &dyn Memory, frame: &Frame, in_module: bool) -> Option<Step> {
        let regs = &frame.regs;
        if in_module {
            let rule = self.rule_for(frame.lookup_pc());
            // The pc itself inside the FDE that covers the lookup address: the ordinary case,
            // with no `sigreturn` stub to look for.
            if let Some(rule) = rule.as_ref().filter(|r| r.signal || regs.rip < r.end) {
                if let Some(step) = self.apply(mem, regs, rule) {
                    return Some(step);
                }
            }
            if let Some(step) = self.sigreturn_frame(mem, regs) {
                return Some(step);
            }
            if let Some(rule) = rule.as_ref().filter(|r| !r.signal && regs.rip >= r.end) {
                if let Some(step) = self.apply(mem, regs, rule) {
                    return Some(step);
                }
            }
        }
        self.frame_pointer(mem, regs, frame.pc_is_exact())
            .or_else(|| self.scan(mem, regs))
    }

    /// The frame rule at a call site, for a runtime's own fast walker (`gsh-rt`'s unwind
    /// tables): `ra` is the runtime return address. `None` when the CFI there is not the
    /// simple kind: a CFA of `rsp` or `rbp` plus an offset, the return address at `CFA - 8`, and
    /// `rbp` either unchanged or saved at a fixed offset from the CFA.
    pub fn call_site(&self, ra: u64) -> Option<CallSiteRule> {
        let rule = self.rule_for(ra.wrapping_sub(1))?;
        let (from_rbp, offset) = match &rule.cfa {
            CfaRule::RegisterAndOffset { register, offset } if register.0 == reg::RSP => {
                (false, *offset)
            }
            CfaRule::RegisterAndOffset { register, offset } if register.0 == reg::RBP => {
                (true, *offset)
            }
            _ => return None,
        };
        if rule.ra != reg::RA
            || rule.signal
            || !matches!(
                rule.regs[usize::from(reg::RA)],
                Some(RegisterRule::Offset(-8))
            )
        {
            return None;
        }
        let rbp_saved_at = match &rule.regs[usize::from(reg::RBP)] {
            None | Some(RegisterRule::SameValue) => None,
            Some(RegisterRule::Offset(o)) => Some(i16::try_from(*o).ok().filter(|o| *o != 0)?),
            Some(_) => return None,
        };
        Some(CallSiteRule {
            cfa_from_rbp: from_rbp,
            cfa_offset: u32::try_from(offset).ok()?,
            rbp_saved_at,
        })
    }

    /// The cached rule for runtime address `addr`, computing it on a miss.
    fn rule_for(&self, addr: u64) -> Option<Arc<Rule>> {
        let mut rules = self.rules.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(hit) = rules.get(&addr) {
            return hit.clone();
        }
        drop(rules);
        let rule = self.compute_rule(addr).map(Arc::new);
        rules = self.rules.lock().unwrap_or_else(|e| e.into_inner());
        if rules.len() >= RULE_CACHE_MAX {
            rules.clear();
        }
        rules.insert(addr, rule.clone());
        rule
    }

    fn compute_rule(&self, addr: u64) -> Option<Rule> {
        let module = self.module_at(addr)?;
        let m = &self.modules[module];
        let (eh_frame, bases) = m.eh_frame.as_ref()?;
        let link = addr.wrapping_sub(m.bias);
        let span = m.span_for(link)?;
        let fde = eh_frame
            .fde_from_offset(
                bases,
                gimli::EhFrameOffset(span.offset),
                EhFrame::cie_from_offset,
            )
            .ok()?;
        let mut ctx = self.context.lock().unwrap_or_else(|e| e.into_inner());
        let row = fde
            .unwind_info_for_address(eh_frame, bases, &mut ctx, link)
            .ok()?;
        Some(Rule {
            module,
            end: span.end.wrapping_add(m.bias),
            encoding: fde.cie().encoding(),
            cfa: row.cfa().clone(),
            regs: std::array::from_fn(|n| row.register(Register(n as u16))),
            ra: fde.cie().return_address_register().0,
            signal: fde.is_signal_trampoline(),
        })
    }

    /// Applies a CFI rule to `regs`; `None` when a value it needs cannot be read.
    fn apply(&self, mem: &dyn Memory, regs: &Regs, rule: &Rule) -> Option<Step> {
        if rule.ra > reg::RA {
            return None;
        }
        let cfa = match &rule.cfa {
            CfaRule::RegisterAndOffset { register, offset } => {
                regs.get(register.0)?.wrapping_add(*offset as u64)
            }
            CfaRule::Expression(expr) => self.evaluate(mem, regs, rule, *expr, None)?,
        };
        if matches!(
            rule.regs[usize::from(rule.ra)],
            Some(RegisterRule::Undefined)
        ) {
            return Some(Step::End { cfa });
        }
        let mut caller = *regs;
        for n in 0..=reg::RA {
            let value = match &rule.regs[usize::from(n)] {
                None if n == reg::RSP => Some(cfa),
                None if reg::CALLEE_SAVED.contains(&n) => regs.get(n),
                // Caller-saved registers, and a return-address column with no rule (which
                // would make the caller's pc the callee's: a loop, not a frame).
                None => None,
                Some(r) => self.recover(mem, regs, rule, cfa, n, r),
            };
            caller.set(n, value);
        }
        // The caller's pc is the return-address column, which on x86-64 is always rip's.
        let rip = caller.get(rule.ra);
        caller.set(reg::RA, rip);
        caller.get(reg::RA)?;
        caller.get(reg::RSP)?;
        Some(Step::Caller {
            regs: caller,
            cfa,
            how: if rule.signal {
                FoundBy::SignalFrame
            } else {
                FoundBy::Cfi
            },
        })
    }

    /// The caller's value of one register under `rule`.
    fn recover(
        &self,
        mem: &dyn Memory,
        regs: &Regs,
        rule: &Rule,
        cfa: u64,
        n: u16,
        r: &RegisterRule<usize>,
    ) -> Option<u64> {
        match r {
            RegisterRule::Undefined | RegisterRule::Architectural => None,
            RegisterRule::SameValue => regs.get(n),
            RegisterRule::Offset(n) => mem.read_u64(cfa.wrapping_add(*n as u64)),
            RegisterRule::ValOffset(n) => Some(cfa.wrapping_add(*n as u64)),
            RegisterRule::Register(other) => regs.get(other.0),
            RegisterRule::Expression(expr) => {
                let addr = self.evaluate(mem, regs, rule, *expr, Some(cfa))?;
                mem.read_u64(addr)
            }
            RegisterRule::ValExpression(expr) => self.evaluate(mem, regs, rule, *expr, Some(cfa)),
            RegisterRule::Constant(v) => Some(*v),
        }
    }

    /// Runs one CFI DWARF expression; `initial` is pushed first (the CFA, for register rules).
    fn evaluate(
        &self,
        mem: &dyn Memory,
        regs: &Regs,
        rule: &Rule,
        expr: UnwindExpression<usize>,
        initial: Option<u64>,
    ) -> Option<u64> {
        let (eh_frame, _) = self.modules.get(rule.module)?.eh_frame.as_ref()?;
        let mut eval = expr.get(eh_frame).ok()?.evaluation(rule.encoding);
        if let Some(v) = initial {
            eval.set_initial_value(v);
        }
        eval.set_max_iterations(MAX_EXPR_STEPS);
        let mut result = eval.evaluate().ok()?;
        loop {
            result = match result {
                EvaluationResult::Complete => break,
                EvaluationResult::RequiresMemory { address, size, .. } => {
                    let word = mem.read_u64(address)?;
                    let value = match size {
                        1..=7 => word & ((1u64 << (u32::from(size) * 8)) - 1),
                        _ => word,
                    };
                    eval.resume_with_memory(Value::Generic(value)).ok()?
                }
                EvaluationResult::RequiresRegister { register, .. } => {
                    let value = regs.get(register.0)?;
                    eval.resume_with_register(Value::Generic(value)).ok()?
                }
                _ => return None,
            };
        }
        eval.value_result()?.to_u64(u64::MAX).ok()
    }

    /// Exactly `len` code bytes at runtime address `addr`, from the module file when `addr` is in
    /// one (no target read needed), else from the target.
    fn code_bytes(&self, mem: &dyn Memory, addr: u64, len: u64) -> Option<Vec<u8>> {
        if let Some(module) = self.module_at(addr) {
            let m = &self.modules[module];
            let link = crate::addr::LinkAddr(addr.wrapping_sub(m.bias));
            if let Some(bytes) = m
                .binary
                .bytes_at(link, len)
                .filter(|b| b.len() as u64 == len)
            {
                return Some(bytes.to_vec());
            }
        }
        let mut out = Vec::new();
        let mut at = addr;
        while (out.len() as u64) < len {
            out.extend_from_slice(&mem.read_u64(at)?.to_le_bytes());
            at = at.checked_add(8)?;
        }
        out.truncate(len as usize);
        Some(out)
    }

    /// A return into a `sigreturn` stub with no CFI (musl, static binaries without glibc's
    /// hand-written CFI): the stub's `rsp` points at the `ucontext` of the `rt_sigframe`, whose
    /// `mcontext` holds every register of the interrupted frame.
    fn sigreturn_frame(&self, mem: &dyn Memory, regs: &Regs) -> Option<Step> {
        // mov $15, %rax (rt_sigreturn); syscall
        const SIGRETURN: [u8; 9] = [0x48, 0xc7, 0xc0, 0x0f, 0x00, 0x00, 0x00, 0x0f, 0x05];
        // ucontext: uc_flags, uc_link, uc_stack (24 bytes), then mcontext's gregs in this order.
        const MCONTEXT: u64 = 40;
        const GREGS: [u16; 17] = [8, 9, 10, 11, 12, 13, 14, 15, 5, 4, 6, 3, 1, 0, 2, 7, 16];
        if self.code_bytes(mem, regs.rip, 9)? != SIGRETURN {
            return None;
        }
        let uc = regs.get(reg::RSP)?;
        let mut caller = Regs::default();
        for (i, n) in GREGS.iter().enumerate() {
            let addr = uc.checked_add(MCONTEXT + 8 * i as u64)?;
            caller.set(*n, Some(mem.read_u64(addr)?));
        }
        Some(Step::Caller {
            regs: caller,
            cfa: caller.rsp,
            how: FoundBy::SignalFrame,
        })
    }

    /// The `rbp` chain. For the top frame, first a prologue check: stopped on the `push %rbp`
    /// (or `endbr64`) at a function's entry, or on its `ret`, the return address is at `rsp`;
    /// stopped on the `mov %rsp,%rbp` right after the push, it is one word higher.
    fn frame_pointer(&self, mem: &dyn Memory, regs: &Regs, exact: bool) -> Option<Step> {
        let rsp = regs.get(reg::RSP)?;
        let mut caller = *regs;
        // Only rbp is known to be restored here; the rest may have been saved anywhere.
        caller.unknown = reg::ALL_UNKNOWN;
        let found = |mut caller: Regs, cfa: u64, rip: u64| {
            caller.set(reg::RSP, Some(cfa));
            caller.set(reg::RA, Some(rip));
            (self.module_at(rip).is_some()).then_some(Step::Caller {
                regs: caller,
                cfa,
                how: FoundBy::FramePointer,
            })
        };
        if exact {
            if let Some(code) = self.code_bytes(mem, regs.rip, 4).filter(|c| c.len() == 4) {
                let at_entry = code[0] == 0x55 || code == [0xf3, 0x0f, 0x1e, 0xfa];
                if at_entry || code[0] == 0xc3 {
                    caller.set(reg::RBP, regs.get(reg::RBP));
                    return found(caller, rsp.checked_add(8)?, mem.read_u64(rsp)?);
                }
                let after_push = self
                    .code_bytes(mem, regs.rip.wrapping_sub(1), 1)
                    .is_some_and(|b| b == [0x55]);
                if after_push && code[..3] == [0x48, 0x89, 0xe5] {
                    caller.set(reg::RBP, Some(mem.read_u64(rsp)?));
                    return found(caller, rsp.checked_add(16)?, mem.read_u64(rsp + 8)?);
                }
            }
        }
        let rbp = regs.get(reg::RBP)?;
        if rbp < rsp || rbp - rsp > MAX_FP_FRAME || !rbp.is_multiple_of(8) {
            return None;
        }
        let saved_rbp = mem.read_u64(rbp)?;
        let rip = mem.read_u64(rbp.checked_add(8)?)?;
        // The caller's frame pointer, if it keeps one, lies above ours.
        if saved_rbp != 0 && saved_rbp <= rbp {
            return None;
        }
        caller.set(reg::RBP, Some(saved_rbp));
        found(caller, rbp.checked_add(16)?, rip)
    }

    /// The first stack word at or above `rsp` that is a return address: it points into a
    /// module's code just after a call instruction.
    fn scan(&self, mem: &dyn Memory, regs: &Regs) -> Option<Step> {
        let rsp = regs.get(reg::RSP)?;
        for i in 0..SCAN_WORDS {
            let slot = rsp.checked_add(i * 8)?;
            let word = mem.read_u64(slot)?;
            if self.module_at(word).is_some() && self.follows_call(mem, word) {
                let mut caller = *regs;
                caller.unknown = reg::ALL_UNKNOWN;
                caller.set(reg::RBP, regs.get(reg::RBP));
                caller.set(reg::RSP, Some(slot + 8));
                caller.set(reg::RA, Some(word));
                return Some(Step::Caller {
                    regs: caller,
                    cfa: slot + 8,
                    how: FoundBy::Scan,
                });
            }
        }
        None
    }

    /// Whether some call instruction (2 to 7 bytes long) ends exactly at `addr`.
    fn follows_call(&self, mem: &dyn Memory, addr: u64) -> bool {
        let Some(start) = addr.checked_sub(7) else {
            return false;
        };
        let Some(bytes) = self.code_bytes(mem, start, 7) else {
            return false;
        };
        (2..=7).any(|len| {
            let from = 7 - len;
            let mut decoder = Decoder::with_ip(
                64,
                &bytes[from..],
                start + from as u64,
                DecoderOptions::NONE,
            );
            let insn = decoder.decode();
            insn.len() == len
                && matches!(
                    insn.flow_control(),
                    FlowControl::Call | FlowControl::IndirectCall
                )
        })
    }
}
