//! Callee effects: what a call to a function may change, so that a trampoline calling it can
//! save only that instead of the whole register file (Dyninst's "dead register" and callee
//! analysis, reduced to what gsh's trampolines need).
//!
//! A trampoline at a function's entry or exit must preserve every register: gcc's `-fipa-ra`
//! lets a caller keep values in caller-saved registers across calls to local functions, so the
//! ABI's "caller-saved" registers are not dead. Saving vector state with `xsave` costs ~180 ns
//! where `push`/`pop` and a few `movdqu` cost a few: if the callee provably writes only some
//! general-purpose registers and, with legacy-SSE (non-VEX) encodings, some `xmm` registers,
//! the upper bits of `ymm`/`zmm` are untouched (legacy SSE leaves bits 128 and up unchanged)
//! and the caller saves just those.
//!
//! The analysis follows every direct call and jump from the entry, transitively, inside the
//! module, over the CFGs of the whole-module [`Analysis`] (so `switch` jump tables are
//! resolved), and classifies every instruction with iced-x86's instruction info. Anything it
//! cannot bound is an [`Unknown`] naming the address: an indirect call or unresolved indirect
//! jump, a call or jump leaving the module (a PLT stub's `jmp [GOT]`), an instruction touching
//! state beyond GPRs, legacy `xmm` and flags (VEX, EVEX, x87, MMX, AVX-512 masks, the `xsave`
//! family, segment registers), undecodable code, or too much code.
//!
//! Calls that never return (to `abort`, `__cxa_throw`, Rust's panic entry points, ...) are not
//! followed: control does not come back to the caller's restore code through them, so what
//! they change cannot matter to it. Registers a callee saves and restores (`push rbx` ...
//! `pop rbx`) still count as written: proving the pairing is not worth it, the caller pushes
//! them. `rsp` is never reported (calls are balanced) nor is `rip`.

#![warn(missing_docs)]

use iced_x86::{
    CpuidFeature, Decoder, DecoderOptions, EncodingKind, Instruction, InstructionInfoFactory,
    InstructionInfoOptions, Mnemonic, OpAccess, Register,
};

use std::cell::OnceCell;

use object::read::Object;
use object::RelocationFlags;

use crate::addr::LinkAddr;
use crate::analysis::Analysis;
use crate::cfg::Exit;
use crate::elf::Binary;
use crate::session::Module;
use crate::symbols::FunctionTable;

/// Instructions analysed at the most before giving up ([`Unknown::TooMuchCode`]): the
/// functions worth a cheap trampoline are small, and a callee that reaches this far almost
/// surely reaches something unanalysable too.
pub const MAX_INSTRUCTIONS: usize = 50_000;

/// GPR numbers as iced-x86 and the hardware number them (`rax` = 0 ... `r15` = 15).
pub const GPR_NAMES: [&str; 16] = [
    "rax", "rcx", "rdx", "rbx", "rsp", "rbp", "rsi", "rdi", "r8", "r9", "r10", "r11", "r12", "r13",
    "r14", "r15",
];

/// The bit of `rsp` in [`CalleeEffects::gprs`]; never set.
const RSP: u16 = 1 << 4;

/// What a call to a function may change, when that can be bounded.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct CalleeEffects {
    /// General-purpose registers possibly written: bit N is register N in hardware order
    /// ([`GPR_NAMES`]); `rsp` is excluded.
    pub gprs: u16,
    /// `xmm0`..`xmm15` possibly written, all by legacy-SSE encodings (so bits 128 and up of
    /// the `ymm`/`zmm` registers are unchanged).
    pub xmms: u16,
    /// RFLAGS possibly changed (arithmetic flags, or `DF` by `std`/`cld`).
    pub flags: bool,
    /// MXCSR possibly changed: SSE floating-point arithmetic sets its sticky exception bits,
    /// `ldmxcsr` loads it. Save it with `stmxcsr`/`ldmxcsr` when set.
    pub mxcsr: bool,
    /// Some path executes `syscall` (its clobbers, `rax`, `rcx` and `r11`, are in `gprs`; the
    /// kernel preserves vector state).
    pub syscalls: bool,
    /// Instructions analysed.
    pub instructions: usize,
    /// Functions analysed (the entry and everything it reaches).
    pub functions: usize,
    /// Calls to functions that never return, not followed.
    pub noreturn_calls: usize,
}

impl CalleeEffects {
    /// Names of the GPRs in [`CalleeEffects::gprs`], in hardware order.
    pub fn gpr_names(&self) -> Vec<&'static str> {
        (0..16)
            .filter(|n| self.gprs & (1 << n) != 0)
            .map(|n| GPR_NAMES[n])
            .collect()
    }

    /// Numbers of the `xmm` registers in [`CalleeEffects::xmms`].
    pub fn xmm_numbers(&self) -> Vec<u32> {
        (0..16).filter(|n| self.xmms & (1 << n) != 0).collect()
    }
}

impl std::fmt::Display for CalleeEffects {
    /// `writes rax rcx rdx xmm0 flags (52 instructions in 3 functions)`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "writes")?;
        for name in self.gpr_names() {
            write!(f, " {name}")?;
        }
        for n in self.xmm_numbers() {
            write!(f, " xmm{n}")?;
        }
        if self.flags {
            write!(f, " flags")?;
        }
        if self.mxcsr {
            write!(f, " mxcsr")?;
        }
        if self.gprs == 0 && self.xmms == 0 && !self.flags && !self.mxcsr {
            write!(f, " nothing")?;
        }
        write!(
            f,
            " ({} instructions in {} functions)",
            self.instructions, self.functions
        )
    }
}

/// Which kind of state an unanalysable instruction touches.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum StateKind {
    /// A VEX-encoded instruction: it zeroes bits 128 and up of the `ymm`/`zmm` it writes.
    Vex,
    /// An EVEX (AVX-512) instruction.
    Evex,
    /// XOP, 3DNow! or another exotic encoding.
    OtherEncoding,
    /// An x87 instruction.
    X87,
    /// An MMX instruction (aliases the x87 registers).
    Mmx,
    /// An AVX-512 mask register.
    Mask,
    /// `xsave`/`xrstor`/`fxsave`/`fxrstor` and their variants.
    Xsave,
    /// A segment, control, debug or bound register, the `fs`/`gs` base, PKRU or XCR0.
    System,
    /// A software interrupt or `sysenter`, whose clobbers are not the `syscall` ones.
    Interrupt,
}

impl StateKind {
    /// The state's name in an [`Unknown::State`] message (`VEX-encoded`, `x87`...).
    pub fn as_str(self) -> &'static str {
        match self {
            StateKind::Vex => "VEX-encoded",
            StateKind::Evex => "EVEX-encoded",
            StateKind::OtherEncoding => "XOP/3DNow!-encoded",
            StateKind::X87 => "x87",
            StateKind::Mmx => "MMX",
            StateKind::Mask => "AVX-512 mask register",
            StateKind::Xsave => "xsave family",
            StateKind::System => "system state",
            StateKind::Interrupt => "software interrupt",
        }
    }
}

/// Why a call's effects cannot be bounded. Every variant names the address at fault.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error, serde::Serialize)]
#[serde(rename_all = "kebab-case", tag = "kind")]
pub enum Unknown {
    /// An indirect call (through a register or memory that is not a GOT slot).
    #[error("indirect call at {at}")]
    IndirectCall {
        /// The call instruction.
        at: LinkAddr,
    },
    /// An indirect jump that is neither a resolved jump table nor a jump through the GOT.
    #[error("unresolved indirect jump at {at}")]
    IndirectJump {
        /// The jump instruction.
        at: LinkAddr,
    },
    /// A call or jump through the GOT (a PLT stub, `-fno-plt` code): its target is in another
    /// module.
    #[error("{at} leaves the module{}", target.as_ref().map(|t| format!(" to {t}")).unwrap_or_default())]
    LeavesModule {
        /// The call or jump instruction.
        at: LinkAddr,
        /// The imported symbol, when the GOT slot's relocation names one.
        target: Option<String>,
    },
    /// An instruction changing state a trampoline cannot save with pushes and `movdqu`.
    #[error("{mnemonic} at {at} uses {}", why.as_str())]
    State {
        /// The instruction.
        at: LinkAddr,
        /// Its mnemonic, as the disassembler spells it (`vmovdqu`, `fld`...).
        mnemonic: String,
        /// Which state it touches.
        why: StateKind,
    },
    /// The code could not be decoded (or ran off its section).
    #[error("undecodable code at {at}")]
    Decode {
        /// Where decoding failed.
        at: LinkAddr,
    },
    /// A direct call or jump to an address where no known function starts.
    #[error("{at} reaches {target}, where no known function starts")]
    NotAFunction {
        /// The call or jump instruction.
        at: LinkAddr,
        /// Where it goes.
        target: LinkAddr,
    },
    /// More than [`MAX_INSTRUCTIONS`] instructions are reachable.
    #[error("more than {limit} reachable instructions")]
    TooMuchCode {
        /// The limit, [`MAX_INSTRUCTIONS`].
        limit: usize,
    },
}

impl Unknown {
    /// The address at fault (for [`Unknown::TooMuchCode`], none: 0).
    pub fn at(&self) -> LinkAddr {
        match self {
            Unknown::IndirectCall { at }
            | Unknown::IndirectJump { at }
            | Unknown::LeavesModule { at, .. }
            | Unknown::State { at, .. }
            | Unknown::Decode { at }
            | Unknown::NotAFunction { at, .. } => *at,
            Unknown::TooMuchCode { .. } => LinkAddr(0),
        }
    }
}

/// What a call to the function at `entry` in `module` may change. Runs the module's
/// whole-module analysis if it has not run yet.
pub fn effects(module: &Module, entry: LinkAddr) -> Result<CalleeEffects, Unknown> {
    effects_in(&module.binary, module.functions(), module.analysis(), entry)
}

/// [`effects`] over the parts of a module, for callers that hold them separately.
pub fn effects_in(
    binary: &Binary,
    functions: &FunctionTable,
    analysis: &Analysis,
    entry: LinkAddr,
) -> Result<CalleeEffects, Unknown> {
    let mut walk = Walk {
        binary,
        functions,
        relative: OnceCell::new(),
        factory: InstructionInfoFactory::new(),
        fx: CalleeEffects::default(),
    };
    let mut seen = foldhash::HashSet::default();
    // (function entry, the instruction that reached it) for error messages.
    let mut work = vec![(entry, entry)];
    while let Some((func, from)) = work.pop() {
        if !seen.insert(func) {
            continue;
        }
        let Some(f) = functions.at(func) else {
            return Err(walk.not_a_function(from, func));
        };
        walk.fx.functions += 1;
        let cfg = &analysis.function(f.id).cfg;
        for block in &cfg.blocks {
            let last = walk.block(block.start, block.end)?;
            match &block.exit {
                None | Some(Exit::Return) | Some(Exit::Trap) => {}
                Some(Exit::NoReturnCall { .. }) => {}
                Some(Exit::TailCall { target }) => work.push((*target, block.last)),
                Some(Exit::Indirect) => {
                    let target = walk.through_got(last.as_ref(), block.last, false)?;
                    work.push((target, block.last));
                }
                Some(Exit::Invalid) => return Err(Unknown::Decode { at: block.end }),
                Some(Exit::Unresolved) => return Err(Unknown::IndirectJump { at: block.last }),
            }
            if let Some(call) = &block.call {
                match call.target {
                    // iced-x86 calls `syscall` a call; its effects are the instruction's own.
                    None if last.as_ref().map(Instruction::mnemonic) == Some(Mnemonic::Syscall) => {
                    }
                    None => {
                        let t = walk.through_got(last.as_ref(), call.addr, true)?;
                        if walk.never_returns(t) {
                            walk.fx.noreturn_calls += 1;
                        } else {
                            work.push((t, call.addr));
                        }
                    }
                    Some(t) if call.noreturn || walk.never_returns(t) => {
                        walk.fx.noreturn_calls += 1;
                    }
                    Some(t) => work.push((t, call.addr)),
                }
            }
        }
    }
    Ok(walk.fx)
}

/// The state of one analysis: the module and the effects found so far.
struct Walk<'a> {
    binary: &'a Binary,
    functions: &'a FunctionTable,
    /// GOT slots holding addresses in this module, read on first need: see [`relative_slots`].
    relative: OnceCell<foldhash::HashMap<u64, u64>>,
    factory: InstructionInfoFactory,
    fx: CalleeEffects,
}

impl Walk<'_> {
    /// Classifies the instructions of one block; returns its last instruction.
    fn block(&mut self, start: LinkAddr, end: LinkAddr) -> Result<Option<Instruction>, Unknown> {
        let len = end.0.saturating_sub(start.0);
        if len == 0 {
            return Ok(None);
        }
        let bytes = self
            .binary
            .bytes_at(start, len)
            .ok_or(Unknown::Decode { at: start })?;
        let mut decoder = Decoder::with_ip(64, bytes, start.0, DecoderOptions::NONE);
        let mut last = None;
        while decoder.can_decode() {
            let insn = decoder.decode();
            if insn.is_invalid() {
                return Err(Unknown::Decode {
                    at: LinkAddr(insn.ip()),
                });
            }
            self.fx.instructions += 1;
            if self.fx.instructions > MAX_INSTRUCTIONS {
                return Err(Unknown::TooMuchCode {
                    limit: MAX_INSTRUCTIONS,
                });
            }
            self.instruction(&insn)?;
            last = Some(insn);
        }
        Ok(last)
    }

    /// Adds what `insn` writes to the effects, or says why it cannot be bounded.
    fn instruction(&mut self, insn: &Instruction) -> Result<(), Unknown> {
        let state = |why| {
            Err(Unknown::State {
                at: LinkAddr(insn.ip()),
                mnemonic: format!("{:?}", insn.mnemonic()).to_lowercase(),
                why,
            })
        };
        match insn.encoding() {
            EncodingKind::Legacy => {}
            EncodingKind::VEX => return state(StateKind::Vex),
            EncodingKind::EVEX | EncodingKind::MVEX => return state(StateKind::Evex),
            _ => return state(StateKind::OtherEncoding),
        }
        match insn.mnemonic() {
            Mnemonic::Fxsave
            | Mnemonic::Fxsave64
            | Mnemonic::Fxrstor
            | Mnemonic::Fxrstor64
            | Mnemonic::Xsave
            | Mnemonic::Xsave64
            | Mnemonic::Xsavec
            | Mnemonic::Xsavec64
            | Mnemonic::Xsaveopt
            | Mnemonic::Xsaveopt64
            | Mnemonic::Xsaves
            | Mnemonic::Xsaves64
            | Mnemonic::Xrstor
            | Mnemonic::Xrstor64
            | Mnemonic::Xrstors
            | Mnemonic::Xrstors64 => return state(StateKind::Xsave),
            Mnemonic::Wrfsbase
            | Mnemonic::Wrgsbase
            | Mnemonic::Wrpkru
            | Mnemonic::Xsetbv
            | Mnemonic::Swapgs => return state(StateKind::System),
            Mnemonic::Int | Mnemonic::Into | Mnemonic::Int1 | Mnemonic::Sysenter => {
                return state(StateKind::Interrupt)
            }
            Mnemonic::Syscall => {
                // The kernel returns rip in rcx and rflags in r11, its result in rax, and
                // preserves everything else, vector state included.
                self.fx.syscalls = true;
                self.fx.gprs |= 1 << 0 | 1 << 1 | 1 << 11;
            }
            Mnemonic::Ldmxcsr => self.fx.mxcsr = true,
            _ => {}
        }
        let features = insn.cpuid_features();
        if features.iter().any(|f| {
            matches!(
                f,
                CpuidFeature::FPU
                    | CpuidFeature::FPU287
                    | CpuidFeature::FPU287XL_ONLY
                    | CpuidFeature::FPU387
                    | CpuidFeature::FPU387SL_ONLY
            )
        }) {
            return state(StateKind::X87);
        }
        if features.contains(&CpuidFeature::MMX) {
            return state(StateKind::Mmx);
        }
        let info = self
            .factory
            .info_options(insn, InstructionInfoOptions::NO_MEMORY_USAGE);
        let mut uses_xmm = false;
        for used in info.used_registers() {
            let r = used.register();
            let written = matches!(
                used.access(),
                OpAccess::Write
                    | OpAccess::CondWrite
                    | OpAccess::ReadWrite
                    | OpAccess::ReadCondWrite
            );
            if r.is_st() {
                return state(StateKind::X87);
            }
            if r.is_mm() {
                return state(StateKind::Mmx);
            }
            if r.is_k() {
                return state(StateKind::Mask);
            }
            if r.is_ymm() || r.is_zmm() || r.is_tmm() {
                return state(StateKind::Vex);
            }
            if r.is_xmm() {
                uses_xmm = true;
            }
            if !written {
                continue;
            }
            if r.is_gpr() {
                self.fx.gprs |= (1u16 << r.full_register().number()) & !RSP;
            } else if r.is_xmm() {
                // Legacy encodings reach xmm0..15 only.
                self.fx.xmms |= 1 << (r.number() & 15);
            } else if r.is_segment_register() || r.is_cr() || r.is_dr() || r.is_tr() || r.is_bnd() {
                return state(StateKind::System);
            } else if r != Register::None && !r.is_ip() {
                // A register kind this analysis does not know: refuse rather than guess.
                return state(StateKind::System);
            }
        }
        if insn.rflags_modified() != 0 {
            self.fx.flags = true;
        }
        if uses_xmm && sets_mxcsr_flags(insn.mnemonic()) {
            self.fx.mxcsr = true;
        }
        Ok(())
    }

    /// The target of an indirect call or jump ending a block, when it reads a GOT slot that
    /// the dynamic linker fills with an address in this module (`call [rip+slot]` to a local
    /// function, as position-independent Rust code calls its panic functions). Any other slot
    /// leaves the module; any other indirect call or jump is unresolved.
    fn through_got(
        &self,
        insn: Option<&Instruction>,
        at: LinkAddr,
        call: bool,
    ) -> Result<LinkAddr, Unknown> {
        if let Some(insn) = insn.filter(|i| i.is_ip_rel_memory_operand()) {
            let slot = insn.ip_rel_memory_address();
            let relative = self.relative.get_or_init(|| relative_slots(self.binary));
            if let Some(&target) = relative.get(&slot) {
                return Ok(LinkAddr(target));
            }
            return Err(Unknown::LeavesModule {
                at,
                target: self.functions.got_slot(LinkAddr(slot)).map(str::to_owned),
            });
        }
        Err(if call {
            Unknown::IndirectCall { at }
        } else {
            Unknown::IndirectJump { at }
        })
    }

    /// The error for a direct call or jump to `target` where no function starts: into a PLT
    /// section it leaves the module.
    fn not_a_function(&self, at: LinkAddr, target: LinkAddr) -> Unknown {
        match self.binary.section_at(target) {
            Some(s) if s.name.starts_with(".plt") => Unknown::LeavesModule { at, target: None },
            _ => Unknown::NotAFunction { at, target },
        }
    }

    /// True for Rust's panic and abort entry points, which the module-wide non-returning
    /// analysis cannot prove (the panic machinery calls hooks indirectly). A panic never
    /// returns to the caller: in an `extern "C"` function it aborts, elsewhere it unwinds.
    fn never_returns(&self, target: LinkAddr) -> bool {
        let Some(f) = self.functions.at(target) else {
            return false;
        };
        let name = f.display_name();
        let name = name.split('@').next().unwrap_or(name);
        RUST_NEVER_RETURNS.iter().any(|p| name.starts_with(p))
            || name.starts_with("core::slice::index::") && name.ends_with("_fail")
    }
}

/// Slot address → link address, for every `R_X86_64_RELATIVE` dynamic relocation: the slot
/// holds an address in this module, fixed at load time and never rewritten (the GOT is
/// read-only after relocation, and nothing else writes such a slot). `IRELATIVE` slots, whose
/// value an ifunc resolver chooses, are not among them.
fn relative_slots(binary: &Binary) -> foldhash::HashMap<u64, u64> {
    const R_X86_64_RELATIVE: u32 = 8;
    let mut slots = foldhash::HashMap::default();
    let elf = binary.elf();
    let Some(relocs) = elf.dynamic_relocations() else {
        return slots;
    };
    for (offset, reloc) in relocs {
        if let RelocationFlags::Elf { r_type } = reloc.flags() {
            if r_type == R_X86_64_RELATIVE {
                slots.insert(offset, reloc.addend() as u64);
            }
        }
    }
    slots
}

/// Rust functions (prefixes of demangled names) that never return.
const RUST_NEVER_RETURNS: &[&str] = &[
    "core::panicking::",
    "core::option::unwrap_failed",
    "core::option::expect_failed",
    "core::result::unwrap_failed",
    "core::cell::panic_already_",
    "core::str::slice_error_fail",
    "std::panicking::begin_panic",
    "std::process::abort",
    "std::sys::pal::unix::abort_internal",
    "alloc::alloc::handle_alloc_error",
    "alloc::raw_vec::handle_error",
    "alloc::raw_vec::capacity_overflow",
    "rust_begin_unwind",
    "rust_panic",
];

/// True for legacy-SSE floating-point arithmetic, compares and conversions, which set MXCSR's
/// sticky exception flags (moves, logic, shuffles and integer SSE do not). By name, since
/// iced-x86 does not model MXCSR; erring towards true only costs a `stmxcsr`.
fn sets_mxcsr_flags(m: Mnemonic) -> bool {
    let name = format!("{m:?}").to_lowercase();
    const OPS: &[&str] = &[
        "add", "sub", "mul", "div", "sqrt", "min", "max", "cmp", "comis", "ucomis", "round", "dpp",
        "hadd", "hsub", "rcp", "rsqrt",
    ];
    if name.starts_with("cvt") {
        return true;
    }
    let fp = ["ps", "pd", "ss", "sd"].iter().any(|s| name.ends_with(s));
    fp && OPS.iter().any(|op| name.starts_with(op))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testutil::{compile, open};

    const SOURCE: &str = r#"
#include <stdio.h>

volatile long sink;
volatile double dsink;

__attribute__((noipa)) long leaf(long x) { return x * 3 + 1; }

__attribute__((noipa)) long chain(long x) { return leaf(x) + leaf(x + 1); }

__attribute__((noipa)) long shouts(long x) { printf("%ld\n", x); return x; }

__attribute__((noipa, target("avx2"))) void avx(double *p, int n) {
    for (int i = 0; i < n; i++) p[i] = p[i] * 2.5 + 1.0;
}

__attribute__((noipa)) double sse(double a, double b) { return a * b + 0.5; }

__attribute__((noipa)) long sw(long c) {
    switch (c) {
    case 0: return leaf(10);
    case 1: return leaf(21) * 3;
    case 2: return leaf(32) - 7;
    case 3: return leaf(43) ^ 5;
    case 4: return leaf(54) + 9;
    case 5: return leaf(65) * 11;
    case 6: return leaf(76) - 13;
    case 7: return leaf(87) + 17;
    default: return -1;
    }
}

__attribute__((noipa)) long through(long (*f)(long), long x) { return f(x); }

int main(int argc, char **argv) {
    (void)argv;
    double v[8] = {1, 2, 3, 4, 5, 6, 7, 8};
    avx(v, argc);
    dsink = sse(v[0], v[1]);
    sink = chain(argc) + sw(argc) + through(leaf, argc) + shouts(argc);
    return 0;
}
"#;

    fn effects_of(module: &Module, name: &str) -> Result<CalleeEffects, Unknown> {
        let f = module
            .functions()
            .by_name(name)
            .next()
            .unwrap_or_else(|| panic!("{name} not found"));
        effects(module, f.addr)
    }

    fn module() -> &'static crate::Session {
        static SESSION: std::sync::OnceLock<crate::Session> = std::sync::OnceLock::new();
        SESSION.get_or_init(|| {
            let exe = compile("callee", SOURCE, false, &["-O2", "-fno-inline"]);
            open(&exe)
        })
    }

    #[test]
    fn a_leaf_writes_few_registers() {
        let s = module();
        let m = s.main().expect("main module");
        let fx = effects_of(m, "leaf").expect("leaf is bounded");
        assert_eq!(fx.functions, 1);
        assert_eq!(fx.xmms, 0);
        assert!(fx.gprs & 1 != 0, "leaf returns in rax: {fx}");
        assert_eq!(fx.gprs & !0b1111_1111, 0, "no r8..r15: {fx}");
        let fx = effects_of(m, "chain").expect("chain is bounded");
        assert_eq!(fx.functions, 2, "chain follows its call to leaf: {fx}");
    }

    #[test]
    fn jump_tables_are_followed() {
        let s = module();
        let m = s.main().expect("main module");
        let fx = effects_of(m, "sw").expect("a switch is bounded");
        assert!(fx.functions >= 2, "{fx}");
    }

    #[test]
    fn plt_calls_leave_the_module() {
        let s = module();
        let m = s.main().expect("main module");
        match effects_of(m, "shouts") {
            Err(Unknown::LeavesModule { target, .. }) => {
                assert!(
                    target.as_deref().is_some_and(|t| t.contains("printf")),
                    "{target:?}"
                );
            }
            other => panic!("printf through the PLT must leave the module: {other:?}"),
        }
    }

    #[test]
    fn avx_is_unknown_and_sse_is_bounded() {
        let s = module();
        let m = s.main().expect("main module");
        match effects_of(m, "avx") {
            Err(Unknown::State { why, .. }) => assert_eq!(why, StateKind::Vex),
            other => panic!("AVX code must be unknown: {other:?}"),
        }
        let fx = effects_of(m, "sse").expect("legacy SSE is bounded");
        assert!(fx.xmms & 1 != 0, "the result is in xmm0: {fx}");
        assert!(fx.mxcsr, "mulsd sets MXCSR flags: {fx}");
    }

    #[test]
    fn indirect_calls_are_unknown() {
        let s = module();
        let m = s.main().expect("main module");
        let e = effects_of(m, "through").expect_err("a call through a pointer");
        assert!(
            matches!(
                e,
                Unknown::IndirectCall { .. } | Unknown::IndirectJump { .. }
            ),
            "{e}"
        );
    }

    #[test]
    fn mxcsr_names() {
        assert!(sets_mxcsr_flags(Mnemonic::Mulsd));
        assert!(sets_mxcsr_flags(Mnemonic::Cvtsi2sd));
        assert!(sets_mxcsr_flags(Mnemonic::Ucomisd));
        assert!(!sets_mxcsr_flags(Mnemonic::Movsd));
        assert!(!sets_mxcsr_flags(Mnemonic::Pxor));
        assert!(!sets_mxcsr_flags(Mnemonic::Movups));
    }
}
