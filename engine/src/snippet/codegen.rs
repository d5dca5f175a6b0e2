//! x86-64 code generation: a checked [`Program`] to machine code for a given runtime address,
//! plus the exact set of registers and flags it clobbers, so a trampoline saves nothing more.
//!
//! Lowering is direct from the typed tree, as an accumulator machine: an integer or pointer
//! result is in `rax` (sign- or zero-extended to 64 bits from its type's width), a double in
//! `xmm0`; a binary operator keeps its left value on the stack while the right one is
//! computed. `rcx`, `rdx` and `r11` are scratch. Simple statements get single instructions:
//! `n++;` on a declared `long` is one `inc qword ptr [rip+disp]`, `n = 5;` one `mov`,
//! `n += 3;` one `add`, none of them touching a register.
//!
//! Instructions are built with iced-x86 and encoded by its `BlockEncoder`, which resolves
//! branches, shortens them, and turns RIP-relative operands into displacements for the final
//! address. String literals go in a data area after the code (jumped over), reached
//! RIP-relatively; declared variables and globals RIP-relatively when within ±2 GiB of the
//! code, else through `mov r11, imm64`; called functions likewise by `call rel32` when near
//! (position independent, as a rewritten PIE needs) and `mov r11, imm64; call r11` when far.

use iced_x86::{
    BlockEncoder, BlockEncoderOptions, Code as Op, IcedError, Instruction, InstructionBlock,
    InstructionInfoFactory, MemoryOperand, OpAccess, Register as R,
};

use super::abi::BASE_REG;
use super::ir::{Place, PlaceKind, Program};
use super::types::{IntKind, Type};

/// Machine code for one snippet, encoded to run at `addr`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Code {
    /// Execution enters at the first byte and leaves by falling off the last one.
    pub bytes: Vec<u8>,
    /// The runtime address `bytes[0]` is encoded to run at (`rip`-relative operands depend on it).
    pub addr: u64,
    /// Where the string data starts, when there is any: `bytes[data..]` holds the strings
    /// (and the final landing instruction), and is never executed except for that last byte.
    pub data: Option<std::ops::Range<usize>>,
    /// Exactly what the code may change; the trampoline saves these and nothing more.
    pub clobbers: Clobbers,
    /// What the code expects of its trampoline: `rbx` at the saved-register block, which slots to fill before and restore after.
    pub requirements: Requirements,
}

impl Code {
    /// The instructions, one per line as `address: text` in Intel syntax, with the string
    /// data shown as `db` lines (for `show` commands and tests).
    pub fn disassemble(&self) -> Vec<String> {
        use iced_x86::{Decoder, DecoderOptions, Formatter, IntelFormatter};
        let mut out = Vec::new();
        let mut f = IntelFormatter::new();
        let mut decode = |bytes: &[u8], start: usize, out: &mut Vec<String>| {
            let mut d = Decoder::with_ip(64, bytes, self.addr + start as u64, DecoderOptions::NONE);
            for insn in &mut d {
                let mut text = String::new();
                f.format(&insn, &mut text);
                out.push(format!("{:#x}: {text}", insn.ip()));
            }
        };
        match &self.data {
            Some(r) => {
                decode(&self.bytes[..r.start], 0, &mut out);
                for chunk in self.bytes[r.clone()].chunks(16) {
                    let hex: Vec<String> = chunk.iter().map(|b| format!("{b:#04x}")).collect();
                    out.push(format!("db {}", hex.join(",")));
                }
                decode(&self.bytes[r.end..], r.end, &mut out);
            }
            None => decode(&self.bytes, 0, &mut out),
        }
        out
    }
}

/// What running the snippet may change, beyond the memory it writes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Clobbers {
    /// General registers, bit N = register number N (`rax`=0, `rcx`=1, `rdx`=2, `rbx`=3,
    /// `rbp`=5, `rsi`=6, `rdi`=7, `r8`..`r15`=8..15). `rsp` is never listed: see `stack`.
    pub gprs: u16,
    /// Vector registers `xmmN` (and their `ymm`/`zmm` upper halves when `calls_out`).
    pub xmms: u16,
    /// The arithmetic flags.
    pub flags: bool,
    /// The snippet calls mutatee code: every caller-saved register, all vector state and the
    /// flags are clobbered, and `rsp` must be 16-byte aligned on entry.
    pub calls_out: bool,
    /// The snippet pushes onto the stack (below `rsp`): the trampoline must have stepped over
    /// the red zone.
    pub stack: bool,
}

impl Clobbers {
    /// Does the trampoline need to save vector state?
    pub fn vector(&self) -> bool {
        self.xmms != 0 || self.calls_out
    }

    /// The clobbered general registers' names, e.g. `["rax", "rcx"]`.
    pub fn gpr_names(&self) -> Vec<&'static str> {
        const NAMES: [&str; 16] = [
            "rax", "rcx", "rdx", "rbx", "rsp", "rbp", "rsi", "rdi", "r8", "r9", "r10", "r11",
            "r12", "r13", "r14", "r15",
        ];
        (0..16)
            .filter(|i| self.gprs & (1 << i) != 0)
            .map(|i| NAMES[i])
            .collect()
    }
}

/// What the snippet needs from the trampoline.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Requirements {
    /// `rbx` must point at the saved-register block.
    pub base: bool,
    /// 8-byte slots of the block the snippet reads (bit N = bytes `8N..8N+8`), which the
    /// trampoline must fill.
    pub saved_reads: u16,
    /// Slots it writes, which the trampoline must restore registers from afterwards.
    pub saved_writes: u16,
}

/// Why code could not be generated.
#[derive(Debug, thiserror::Error)]
pub enum CodegenError {
    /// The encoder rejected the code (e.g. a RIP-relative operand out of range).
    #[error("cannot encode the snippet: {0}")]
    Encode(String),
    /// A constant offset too large for an x86 displacement.
    #[error("offset {0} is too large for an x86-64 displacement")]
    Offset(i64),
}

impl From<IcedError> for CodegenError {
    fn from(e: IcedError) -> Self {
        CodegenError::Encode(e.to_string())
    }
}

type Res<T = ()> = Result<T, CodegenError>;

// iced's operand-conversion traits are private, so these are macros rather than generic
// methods.
macro_rules! op1 {
    ($g:expr, $code:expr, $a:expr) => {
        $g.emit(iced_x86::Instruction::with1($code, $a))
    };
}

macro_rules! op2 {
    ($g:expr, $code:expr, $a:expr, $b:expr) => {
        $g.emit(iced_x86::Instruction::with2($code, $a, $b))
    };
}

mod arith;
mod lower;
mod path;
mod rt;

/// Generates code for `program` to run at runtime address `addr`.
pub fn generate(program: &Program, addr: u64) -> Res<Code> {
    let mut g = Gen {
        insns: Vec::new(),
        labels: Vec::new(),
        branches: Vec::new(),
        string_refs: Vec::new(),
        addr,
        depth: 0,
        current: Vec::new(),
        req: Requirements::default(),
        calls_out: false,
        stack: false,
        self_saved: Vec::new(),
    };
    g.stmts(&program.stmts)?;
    g.finish(&program.strings)
}

/// Addresses the encoder sees for our own instructions before placement: far from any real
/// user-space address, so they can't be confused with a variable's address.
const FAKE_IP: u64 = 0xffff_f000_0000_0000;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Label(usize);

/// The place an enclosing assignment writes, for `Current`.
enum CurrentPlace {
    Static(Place),
    /// Address on the stack, pushed at stack depth `depth`; plus an offset.
    Stacked {
        depth: i64,
        offset: i64,
        ty: Type,
    },
}

struct Gen {
    insns: Vec<Instruction>,
    /// Instruction index each label is bound to.
    labels: Vec<Option<usize>>,
    branches: Vec<(usize, Label)>,
    /// (instruction index of a `lea`, string number).
    string_refs: Vec<(usize, usize)>,
    addr: u64,
    /// Bytes pushed since entry; 16-byte alignment at calls is computed from it.
    depth: i64,
    current: Vec<CurrentPlace>,
    req: Requirements,
    calls_out: bool,
    stack: bool,
    /// Instruction ranges that save and restore every register they change themselves (the
    /// runtime counter's slow path): left out of the clobber scan.
    self_saved: Vec<std::ops::Range<usize>>,
}

fn disp32(v: i64) -> Res<i64> {
    if i32::try_from(v).is_ok() {
        Ok(v)
    } else {
        Err(CodegenError::Offset(v))
    }
}

fn fits_i32(v: u64) -> bool {
    i32::try_from(v as i64).is_ok()
}

/// The 32-, 16- and 8-bit parts of a 64-bit register.
fn sub_regs(r: R) -> (R, R, R) {
    match r {
        R::RAX => (R::EAX, R::AX, R::AL),
        R::RCX => (R::ECX, R::CX, R::CL),
        R::RDX => (R::EDX, R::DX, R::DL),
        R::RSI => (R::ESI, R::SI, R::SIL),
        R::RDI => (R::EDI, R::DI, R::DIL),
        R::R8 => (R::R8D, R::R8W, R::R8L),
        R::R9 => (R::R9D, R::R9W, R::R9L),
        _ => (R::R11D, R::R11W, R::R11L),
    }
}

const ARG_GPRS: [R; 6] = [R::RDI, R::RSI, R::RDX, R::RCX, R::R8, R::R9];
const ARG_XMMS: [R; 8] = [
    R::XMM0,
    R::XMM1,
    R::XMM2,
    R::XMM3,
    R::XMM4,
    R::XMM5,
    R::XMM6,
    R::XMM7,
];

fn int_kind(ty: &Type) -> Option<IntKind> {
    match ty {
        Type::Int(k) => Some(*k),
        _ => None,
    }
}

impl Gen {
    fn emit(&mut self, i: Result<Instruction, IcedError>) -> Res {
        self.insns.push(i?);
        Ok(())
    }

    fn op0(&mut self, code: Op) -> Res {
        self.insns.push(Instruction::with(code));
        Ok(())
    }

    fn new_label(&mut self) -> Label {
        self.labels.push(None);
        Label(self.labels.len() - 1)
    }

    fn bind(&mut self, l: Label) {
        self.labels[l.0] = Some(self.insns.len());
    }

    fn jump(&mut self, code: Op, l: Label) -> Res {
        self.emit(Instruction::with_branch(code, 0))?;
        self.branches.push((self.insns.len() - 1, l));
        Ok(())
    }

    fn push(&mut self, r: R) -> Res {
        self.stack = true;
        self.depth += 8;
        op1!(self, Op::Push_r64, r)
    }

    fn pop(&mut self, r: R) -> Res {
        self.depth -= 8;
        op1!(self, Op::Pop_r64, r)
    }

    /// `mov reg, imm` in its shortest flag-preserving form.
    fn mov_imm(&mut self, r: R, v: u64) -> Res {
        if v <= u64::from(u32::MAX) {
            op2!(self, Op::Mov_r32_imm32, sub_regs(r).0, v as u32)
        } else if fits_i32(v) {
            op2!(self, Op::Mov_rm64_imm32, r, v as i64 as i32)
        } else {
            op2!(self, Op::Mov_r64_imm64, r, v)
        }
    }

    pub(super) fn is_near(&self, target: u64) -> bool {
        let d = target as i128 - self.addr as i128;
        d.abs() < 0x7000_0000
    }

    /// A memory operand for a place with a static address (absolute or saved), emitting
    /// `mov r11, imm64` first when the address is out of RIP-relative reach.
    fn static_mem(&mut self, p: &Place, write: bool) -> Res<MemoryOperand> {
        match &p.kind {
            PlaceKind::Absolute(a) if self.is_near(*a) => {
                Ok(MemoryOperand::with_base_displ(R::RIP, *a as i64))
            }
            PlaceKind::Absolute(a) => {
                op2!(self, Op::Mov_r64_imm64, R::R11, *a)?;
                Ok(MemoryOperand::with_base_displ(R::R11, 0))
            }
            PlaceKind::Saved(off) => {
                self.req.base = true;
                let slots = (p.ty.size().max(1) as u32).div_ceil(8);
                for s in 0..slots {
                    let bit = 1u16 << ((off / 8 + s) & 15);
                    if write {
                        self.req.saved_writes |= bit;
                        if p.ty.size() < 8 {
                            // A narrow write leaves the rest of the slot as it was.
                            self.req.saved_reads |= bit;
                        }
                    } else {
                        self.req.saved_reads |= bit;
                    }
                }
                Ok(MemoryOperand::with_base_displ(BASE_REG, i64::from(*off)))
            }
            PlaceKind::Deref(..) => Err(CodegenError::Encode("dynamic place as static".into())),
        }
    }

    /// Loads a value of type `ty` from `m` into `r` (or `xmm0` for doubles).
    fn load(&mut self, r: R, m: MemoryOperand, ty: &Type) -> Res {
        let (r32, _, _) = sub_regs(r);
        match ty {
            Type::Double => op2!(self, Op::Movsd_xmm_xmmm64, R::XMM0, m),
            Type::Int(k) => match k {
                IntKind::Char => op2!(self, Op::Movsx_r64_rm8, r, m),
                IntKind::UChar => op2!(self, Op::Movzx_r32_rm8, r32, m),
                IntKind::Short => op2!(self, Op::Movsx_r64_rm16, r, m),
                IntKind::UShort => op2!(self, Op::Movzx_r32_rm16, r32, m),
                IntKind::Int => op2!(self, Op::Movsxd_r64_rm32, r, m),
                IntKind::UInt => op2!(self, Op::Mov_r32_rm32, r32, m),
                IntKind::Long | IntKind::ULong => op2!(self, Op::Mov_r64_rm64, r, m),
            },
            _ => op2!(self, Op::Mov_r64_rm64, r, m),
        }
    }

    /// Stores `r` (or `xmm0` for doubles) into `m` as type `ty`.
    fn store(&mut self, r: R, m: MemoryOperand, ty: &Type) -> Res {
        let (r32, r16, r8) = sub_regs(r);
        match ty.size() {
            _ if *ty == Type::Double => op2!(self, Op::Movsd_xmmm64_xmm, m, R::XMM0),
            1 => op2!(self, Op::Mov_rm8_r8, m, r8),
            2 => op2!(self, Op::Mov_rm16_r16, m, r16),
            4 => op2!(self, Op::Mov_rm32_r32, m, r32),
            _ => op2!(self, Op::Mov_rm64_r64, m, r),
        }
    }

    /// Re-extends `r` from the width of `ty` (after arithmetic that left high bits dirty).
    fn normalize(&mut self, r: R, ty: &Type) -> Res {
        let (r32, r16, r8) = sub_regs(r);
        match int_kind(ty) {
            Some(IntKind::Char) => op2!(self, Op::Movsx_r64_rm8, r, r8),
            Some(IntKind::UChar) => op2!(self, Op::Movzx_r32_rm8, r32, r8),
            Some(IntKind::Short) => op2!(self, Op::Movsx_r64_rm16, r, r16),
            Some(IntKind::UShort) => op2!(self, Op::Movzx_r32_rm16, r32, r16),
            Some(IntKind::Int) => op2!(self, Op::Movsxd_r64_rm32, r, r32),
            Some(IntKind::UInt) => op2!(self, Op::Mov_r32_rm32, r32, r32),
            _ => Ok(()),
        }
    }

    fn finish(mut self, strings: &[Vec<u8>]) -> Res<Code> {
        let mut string_at = Vec::new();
        let mut string_at_end = None;
        if !strings.is_empty() {
            let end = self.new_label();
            self.jump(Op::Jmp_rel32_64, end)?;
            for s in strings {
                string_at.push(self.insns.len());
                let mut bytes = s.clone();
                bytes.push(0);
                for chunk in bytes.chunks(16) {
                    self.emit(Instruction::with_declare_byte(chunk))?;
                }
            }
            self.bind(end);
            string_at_end = Some(self.insns.len());
        }
        // A label at the very end needs an instruction to land on.
        if self.labels.contains(&Some(self.insns.len())) {
            self.op0(Op::Nopd)?;
        }
        let ip = |i: usize| FAKE_IP + 16 * i as u64;
        for (i, insn) in self.insns.iter_mut().enumerate() {
            insn.set_ip(ip(i));
        }
        for &(i, l) in &self.branches {
            let target =
                self.labels[l.0].ok_or_else(|| CodegenError::Encode("unbound label".into()))?;
            self.insns[i].set_near_branch64(ip(target));
        }
        for &(i, s) in &self.string_refs {
            self.insns[i].set_memory_displacement64(ip(string_at[s]));
        }
        let clobbers = self.clobbers();
        let block = InstructionBlock::new(&self.insns, self.addr);
        let encoded = BlockEncoder::encode(
            64,
            block,
            BlockEncoderOptions::RETURN_NEW_INSTRUCTION_OFFSETS,
        )?;
        let offset = |i: usize| {
            encoded
                .new_instruction_offsets
                .get(i)
                .map_or(encoded.code_buffer.len(), |&o| o as usize)
        };
        let data = match (string_at.first(), string_at_end) {
            (Some(&first), Some(end)) => Some(offset(first)..offset(end)),
            _ => None,
        };
        Ok(Code {
            bytes: encoded.code_buffer,
            addr: self.addr,
            data,
            clobbers,
            requirements: self.req,
        })
    }

    fn clobbers(&self) -> Clobbers {
        let mut c = Clobbers {
            calls_out: self.calls_out,
            stack: self.stack,
            ..Clobbers::default()
        };
        let mut factory = InstructionInfoFactory::new();
        for (i, insn) in self.insns.iter().enumerate() {
            if self.self_saved.iter().any(|r| r.contains(&i)) {
                c.flags = true;
                continue;
            }
            if insn.code() == Op::DeclareByte {
                continue;
            }
            if insn.rflags_modified() != 0 {
                c.flags = true;
            }
            for used in factory.info(insn).used_registers() {
                if !matches!(
                    used.access(),
                    OpAccess::Write
                        | OpAccess::ReadWrite
                        | OpAccess::CondWrite
                        | OpAccess::ReadCondWrite
                ) {
                    continue;
                }
                let full = used.register().full_register();
                if full.is_gpr64() && full != R::RSP {
                    c.gprs |= 1 << full.number();
                } else if full.is_zmm() || full.is_xmm() || full.is_ymm() {
                    c.xmms |= 1 << (full.number() & 15);
                }
            }
        }
        if self.calls_out {
            // Caller-saved per SysV: rax rcx rdx rsi rdi r8-r11, all vector registers.
            c.gprs |= 0b0000_1111_1100_0111;
            c.xmms = 0xffff;
            c.flags = true;
        }
        c
    }
}
