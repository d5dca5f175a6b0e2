//! The code around the snippets of one point: save exactly what they clobber, fill the
//! saved-register block, align the stack for calls, run the snippets in insertion order,
//! write back `$return`/`$N` assignments, restore. The snippet ABI it honours is in
//! [`crate::snippet`] ("The snippet ABI") and [`crate::snippet::abi`].
//!
//! ```text
//!        original rsp ──► ┌──────────────────────────┐ high
//!                         │ red zone (128, skipped)  │  lea rsp,[rsp-128]   if anything below
//!                         ├──────────────────────────┤
//!                         │ rflags                   │  pushfq              if clobbered and live
//!                         │ clobbered GPRs, ascending│  push r…             (+ registers of $N/$return writes)
//!                         │ rbx                      │  push rbx            if the block is used
//!                         │ clobbered xmm (16 each)  │  movdqu              if xmm clobbered, no calls
//!              rbx ──►    │ SavedRegs (128)          │  mov [rsp+off], reg  slots the snippets read
//!                         │ rbp                      │  push rbp; mov rbp,rsp           if calls_out
//!                         │ (align to 64)            │  and rsp,-64
//!                         │ xsave/fxsave area        │  xsave64 [rsp] / fxsave64 [rsp]  if calls_out
//!                 rsp ──► └──────────────────────────┘ low: 16-aligned when the snippets run
//!   snippet 1 … snippet n   (each compiled for the address it sits at)
//!   …and the same in reverse: xrstor, rsp = rbp, pop rbp, xmm restored, written xmm slots
//!   loaded (movsd), written GPR slots copied over their push slots (push [rbx+o]; pop [rsp+d]),
//!   pop rbx, pop GPRs, popfq, lea rsp,[rsp+128].
//! ```
//!
//! Only `lea` moves `rsp` outside the flag-saving region, so a trampoline that does not save
//! the flags does not change them either. A counter (`n++;` at an entry, where the ABI leaves
//! the flags dead) is the bare `inc qword ptr [rip+x]`.

use std::cell::RefCell;
use std::collections::HashMap;
use std::sync::Arc;

use iced_x86::code_asm::*;

use crate::snippet::abi::{arg_offset, xmm_offset, RAX_OFFSET, SAVED_REGS_SIZE, SP_OFFSET};
use crate::snippet::{Clobbers, Code as SnippetCode, Requirements};

/// How vector state is saved around snippets that call out.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum VectorSave {
    /// `xsave64`/`xrstor64` of x87, SSE, AVX and AVX-512 state (mask `0xe7`): what glibc's
    /// EVEX string routines and AVX callees may change. Chosen by default.
    #[default]
    Xsave,
    /// `fxsave64`/`fxrstor64`: x87 and SSE only (upper `ymm`/`zmm` halves not saved).
    Fxsave,
}

/// The `xsave` feature mask: x87, SSE, AVX, opmask, ZMM_Hi256, Hi16_ZMM.
const XSAVE_MASK: u32 = 0xe7;
/// Bytes of the standard-format xsave area for [`XSAVE_MASK`] (AVX-512 ends at 2688), rounded
/// up to 64. Fixed rather than read from CPUID, so a rewritten binary runs on other CPUs.
const XSAVE_AREA: i32 = 2752;
const FXSAVE_AREA: i32 = 512;
const RED_ZONE: i32 = 128;

const GPR64: [AsmRegister64; 16] = [
    rax, rcx, rdx, rbx, rsp, rbp, rsi, rdi, r8, r9, r10, r11, r12, r13, r14, r15,
];
const XMM: [AsmRegisterXmm; 16] = [
    xmm0, xmm1, xmm2, xmm3, xmm4, xmm5, xmm6, xmm7, xmm8, xmm9, xmm10, xmm11, xmm12, xmm13, xmm14,
    xmm15,
];
/// Register numbers of `$0..$5`, then `$return` (slot 6).
const SLOT_REGS: [usize; 7] = [7, 6, 2, 1, 8, 9, 0];

/// What all snippets at one point need, together.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Needs {
    /// Everything any of the snippets may change.
    pub clobbers: Clobbers,
    /// Everything any of them reads or writes of the saved-register block.
    pub requirements: Requirements,
}

impl Needs {
    /// The union of what the compiled snippets `codes` need.
    pub fn of(codes: &[SnippetCode]) -> Needs {
        let mut n = Needs::default();
        for c in codes {
            let (a, b) = (&mut n.clobbers, &c.clobbers);
            a.gprs |= b.gprs;
            a.xmms |= b.xmms;
            a.flags |= b.flags;
            a.calls_out |= b.calls_out;
            a.stack |= b.stack;
            let (r, s) = (&mut n.requirements, &c.requirements);
            r.base |= s.base;
            r.saved_reads |= s.saved_reads;
            r.saved_writes |= s.saved_writes;
        }
        n
    }
}

/// The decisions for one point's save area, for `show points` and tests.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct SavePlan {
    /// True when anything is saved at all: the stack pointer first moves past the red zone.
    pub red_zone: bool,
    /// The flags are saved (a snippet clobbers them and the code after the point may read
    /// them).
    pub flags: bool,
    /// Registers pushed, by number, in push order.
    pub gprs: Vec<usize>,
    /// The saved-register block is filled and `rbx` points at it (`$0..$5`, `$return`).
    pub base: bool,
    /// `xmmN` saved with `movdqu` (snippets that use doubles without calling out).
    pub xmms: Vec<usize>,
    /// Vector state saved whole, because the snippets call out.
    pub vector: Option<VectorSave>,
}

impl SavePlan {
    /// The save area for snippets that need `needs`, where the flags are live or not after
    /// the point, saving vector state by `vector` if they call out.
    pub fn new(needs: &Needs, flags_live: bool, vector: VectorSave) -> SavePlan {
        let c = &needs.clobbers;
        let r = &needs.requirements;
        let mut gpr_mask = c.gprs & !(1 << 3) & !(1 << 4);
        for (slot, &reg) in SLOT_REGS.iter().enumerate() {
            if r.saved_writes & (1 << slot) != 0 {
                gpr_mask |= 1 << reg;
            }
        }
        if c.calls_out {
            // rbp keeps the unaligned rsp; the snippet never writes it (callee-saved).
            gpr_mask |= 1 << 5;
        }
        let gprs: Vec<usize> = (0..16).filter(|i| gpr_mask & (1 << i) != 0).collect();
        let xmms: Vec<usize> = if c.calls_out {
            Vec::new()
        } else {
            (0..16).filter(|i| c.xmms & (1 << i) != 0).collect()
        };
        let flags = c.flags && flags_live;
        let base = r.base;
        let red_zone =
            flags || !gprs.is_empty() || base || !xmms.is_empty() || c.stack || c.calls_out;
        SavePlan {
            red_zone,
            flags,
            gprs,
            base,
            xmms,
            vector: c.calls_out.then_some(vector),
        }
    }

    /// One line for `show points`: what is saved.
    pub fn describe(&self) -> String {
        const NAMES: [&str; 16] = [
            "rax", "rcx", "rdx", "rbx", "rsp", "rbp", "rsi", "rdi", "r8", "r9", "r10", "r11",
            "r12", "r13", "r14", "r15",
        ];
        let mut parts = Vec::new();
        if self.flags {
            parts.push("flags".to_owned());
        }
        parts.extend(self.gprs.iter().map(|&g| NAMES[g].to_owned()));
        if self.base {
            parts.push("rbx+block".to_owned());
        }
        parts.extend(self.xmms.iter().map(|x| format!("xmm{x}")));
        match self.vector {
            Some(VectorSave::Xsave) => parts.push("xsave".to_owned()),
            Some(VectorSave::Fxsave) => parts.push("fxsave".to_owned()),
            None => {}
        }
        if parts.is_empty() {
            "nothing".to_owned()
        } else {
            parts.join(" ")
        }
    }
}

/// The save code ([`prologue`]) and restore code ([`epilogue`]) for `plan` and `needs`,
/// assembled once per thread and kept: neither holds a branch or a RIP-relative operand, so
/// the bytes are the same wherever they go, and a trampoline is laid out at least four times
/// (and every shared site again at a relay), each assembling them with iced's block encoder.
/// The few distinct plans a program's points have are kept (at most [`SAVES_KEPT`]).
pub fn saves_code(plan: &SavePlan, needs: &Needs) -> Result<Arc<SavesCode>, IcedError> {
    thread_local! {
        static KEPT: RefCell<HashMap<(SavePlan, Needs), Arc<SavesCode>>> =
            RefCell::new(HashMap::new());
    }
    let key = (plan.clone(), *needs);
    if let Some(c) = KEPT.with(|k| k.borrow().get(&key).cloned()) {
        return Ok(c);
    }
    let code = Arc::new(SavesCode {
        save: prologue(plan, needs)?.assemble(0)?,
        restore: epilogue(plan, needs)?.assemble(0)?,
    });
    KEPT.with(|k| {
        let mut k = k.borrow_mut();
        if k.len() >= SAVES_KEPT {
            k.clear();
        }
        k.insert(key, code.clone());
    });
    Ok(code)
}

/// A save plan's code, the same at any address ([`saves_code`]).
#[derive(Debug)]
pub struct SavesCode {
    /// [`prologue`]'s bytes.
    pub save: Vec<u8>,
    /// [`epilogue`]'s bytes.
    pub restore: Vec<u8>,
}

/// How many save plans [`saves_code`] keeps per thread.
const SAVES_KEPT: usize = 4096;

/// The code before the snippets.
pub fn prologue(plan: &SavePlan, needs: &Needs) -> Result<CodeAssembler, IcedError> {
    let mut a = CodeAssembler::new(64)?;
    if plan.red_zone {
        a.lea(rsp, ptr(rsp - RED_ZONE))?;
    }
    if plan.flags {
        a.pushfq()?;
    }
    for &g in &plan.gprs {
        a.push(GPR64[g])?;
    }
    if plan.base {
        a.push(rbx)?;
    }
    if !plan.xmms.is_empty() {
        a.lea(rsp, ptr(rsp - 16 * plan.xmms.len() as i32))?;
        for (i, &x) in plan.xmms.iter().enumerate() {
            a.movdqu(xmmword_ptr(rsp + 16 * i as i32), XMM[x])?;
        }
    }
    if plan.base {
        a.lea(rsp, ptr(rsp - SAVED_REGS_SIZE as i32))?;
        let reads = needs.requirements.saved_reads | needs.requirements.saved_writes;
        for (slot, &reg) in SLOT_REGS.iter().enumerate() {
            if reads & (1 << slot) != 0 {
                let off = if slot == 6 {
                    RAX_OFFSET
                } else {
                    arg_offset(slot as u32)
                };
                a.mov(qword_ptr(rsp + off as i32), GPR64[reg])?;
            }
        }
        for x in 0..8u32 {
            if reads & (1 << (8 + x)) != 0 {
                a.movq(qword_ptr(rsp + xmm_offset(x) as i32), XMM[x as usize])?;
            }
        }
        if reads & (1 << (SP_OFFSET / 8)) != 0 {
            // rbx is pushed and not yet the base: a free register for the point's rsp.
            let above = SAVED_REGS_SIZE as i32
                + 16 * plan.xmms.len() as i32
                + 8
                + 8 * plan.gprs.len() as i32
                + if plan.flags { 8 } else { 0 }
                + if plan.red_zone { RED_ZONE } else { 0 };
            a.lea(rbx, ptr(rsp + above))?;
            a.mov(qword_ptr(rsp + SP_OFFSET as i32), rbx)?;
        }
        a.mov(rbx, rsp)?;
    }
    if let Some(v) = plan.vector {
        a.push(rbp)?;
        a.mov(rbp, rsp)?;
        a.and(rsp, -64)?;
        match v {
            VectorSave::Xsave => {
                a.lea(rsp, ptr(rsp - XSAVE_AREA))?;
                // xsave writes only XSTATE_BV of the header; xrstor faults unless the rest
                // (XCOMP_BV, reserved) is zero, and the stack holds garbage.
                for k in 0..8 {
                    a.mov(qword_ptr(rsp + 512 + 8 * k), 0)?;
                }
                a.mov(eax, XSAVE_MASK)?;
                a.mov(edx, 0u32)?;
                a.xsave64(ptr(rsp))?;
            }
            VectorSave::Fxsave => {
                a.lea(rsp, ptr(rsp - FXSAVE_AREA))?;
                a.fxsave64(ptr(rsp))?;
            }
        }
    }
    Ok(a)
}

/// The code after the snippets.
pub fn epilogue(plan: &SavePlan, needs: &Needs) -> Result<CodeAssembler, IcedError> {
    let mut a = CodeAssembler::new(64)?;
    if let Some(v) = plan.vector {
        match v {
            VectorSave::Xsave => {
                a.mov(eax, XSAVE_MASK)?;
                a.mov(edx, 0u32)?;
                a.xrstor64(ptr(rsp))?;
            }
            VectorSave::Fxsave => a.fxrstor64(ptr(rsp))?,
        }
        a.mov(rsp, rbp)?;
        a.pop(rbp)?;
    }
    let block = if plan.base { SAVED_REGS_SIZE as i32 } else { 0 };
    for (i, &x) in plan.xmms.iter().enumerate() {
        a.movdqu(XMM[x], xmmword_ptr(rsp + block + 16 * i as i32))?;
    }
    let writes = needs.requirements.saved_writes;
    if plan.base {
        for x in 0..8u32 {
            if writes & (1 << (8 + x)) != 0 {
                a.movq(XMM[x as usize], qword_ptr(rbx + xmm_offset(x) as i32))?;
            }
        }
        // Push slots sit above the block, the xmm area and the pushed rbx.
        let above = block + 16 * plan.xmms.len() as i32 + 8;
        let n = plan.gprs.len() as i32;
        for (slot, &reg) in SLOT_REGS.iter().enumerate() {
            if writes & (1 << slot) == 0 {
                continue;
            }
            let Some(k) = plan.gprs.iter().position(|&g| g == reg) else {
                continue;
            };
            let off = if slot == 6 {
                RAX_OFFSET
            } else {
                arg_offset(slot as u32)
            };
            // `pop [rsp+d]` addresses after rsp is incremented, i.e. from the current rsp.
            let d = above + 8 * (n - 1 - k as i32);
            a.push(qword_ptr(rbx + off as i32))?;
            a.pop(qword_ptr(rsp + d))?;
        }
    }
    let free = block + 16 * plan.xmms.len() as i32;
    if free != 0 {
        a.lea(rsp, ptr(rsp + free))?;
    }
    if plan.base {
        a.pop(rbx)?;
    }
    for &g in plan.gprs.iter().rev() {
        a.pop(GPR64[g])?;
    }
    if plan.flags {
        a.popfq()?;
    }
    if plan.red_zone {
        a.lea(rsp, ptr(rsp + RED_ZONE))?;
    }
    Ok(a)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::snippet::{Clobbers, Requirements};

    /// The kept save and restore code is what assembling them gives anywhere (they hold no
    /// branch and no RIP-relative operand), for plans of every shape: flags, registers, the
    /// saved-register block read and written, xmm registers, vector state around calls.
    #[test]
    fn kept_save_code_is_the_assembled_code_at_any_address() {
        let mut shapes = Vec::new();
        for gprs in [0u16, 0b1, 0b1000_0000_0100_0111] {
            for (xmms, calls_out) in [(0u16, false), (0b101, false), (0, true)] {
                for (base, reads, writes) in [(false, 0, 0), (true, 0b1100_0001, 0b100_0001)] {
                    shapes.push(Needs {
                        clobbers: Clobbers {
                            gprs,
                            xmms,
                            flags: gprs != 0,
                            calls_out,
                            stack: calls_out,
                        },
                        requirements: Requirements {
                            base,
                            saved_reads: reads,
                            saved_writes: writes,
                        },
                    });
                }
            }
        }
        for needs in &shapes {
            for (flags_live, vector) in [(true, VectorSave::Xsave), (false, VectorSave::Fxsave)] {
                let plan = SavePlan::new(needs, flags_live, vector);
                // Twice: assembled the first time, kept the second.
                for _ in 0..2 {
                    let kept = saves_code(&plan, needs).expect("saves");
                    for at in [0x1000, 0x7fff_1234_5678, 0xffff_ffff_ff00_0000] {
                        let save = prologue(&plan, needs).unwrap().assemble(at).unwrap();
                        let restore = epilogue(&plan, needs).unwrap().assemble(at).unwrap();
                        assert_eq!(kept.save, save, "{plan:?} at {at:#x}");
                        assert_eq!(kept.restore, restore, "{plan:?} at {at:#x}");
                    }
                }
            }
        }
    }
}
