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
//! code, else through `mov r11, imm64`; called functions always through `mov r11, imm64;
//! call r11`, so calls work from any distance.

use iced_x86::{
    BlockEncoder, BlockEncoderOptions, Code as Op, IcedError, Instruction, InstructionBlock,
    InstructionInfoFactory, MemoryOperand, OpAccess, Register as R,
};

use super::abi::BASE_REG;
use super::ir::{ArithOp, CmpOp, Expr, ExprKind as E, Place, PlaceKind, Program, Stmt, UnaryOp};
use super::types::{IntKind, Type};

/// Machine code for one snippet, encoded to run at `addr`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Code {
    /// Execution enters at the first byte and leaves by falling off the last one.
    pub bytes: Vec<u8>,
    pub addr: u64,
    pub clobbers: Clobbers,
    pub requirements: Requirements,
}

/// What running the snippet may change, beyond the memory it writes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
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
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
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
        $g.emit(Instruction::with1($code, $a))
    };
}

macro_rules! op2 {
    ($g:expr, $code:expr, $a:expr, $b:expr) => {
        $g.emit(Instruction::with2($code, $a, $b))
    };
}

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

    fn is_near(&self, target: u64) -> bool {
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

    fn stmts(&mut self, stmts: &[Stmt]) -> Res {
        for s in stmts {
            match s {
                Stmt::Expr(e) => {
                    if !self.effect_only(e)? {
                        self.expr(e)?;
                    }
                }
                Stmt::If(c, then, otherwise) => {
                    let else_l = self.new_label();
                    self.truth(c)?;
                    self.jump(Op::Je_rel32_64, else_l)?;
                    self.stmts(then)?;
                    if otherwise.is_empty() {
                        self.bind(else_l);
                    } else {
                        let end = self.new_label();
                        self.jump(Op::Jmp_rel32_64, end)?;
                        self.bind(else_l);
                        self.stmts(otherwise)?;
                        self.bind(end);
                    }
                }
            }
        }
        Ok(())
    }

    /// Single-instruction forms for statements whose value is dropped: `n++`, `n--`,
    /// `n = CONST`, `n += CONST` (and `-= &= |= ^=`) on a variable with a static address.
    /// Returns false when `e` does not have such a form.
    fn effect_only(&mut self, e: &Expr) -> Res<bool> {
        match &e.kind {
            E::IncDec { place, delta, .. }
                if (is_static_int(place) || (is_static(place) && place.ty.is_ptr()))
                    && fits_i32(*delta as u64) =>
            {
                let size = place.ty.size();
                let m = self.static_mem(place, true)?;
                if *delta == 1 || *delta == -1 {
                    let code = match (size, *delta == 1) {
                        (1, true) => Op::Inc_rm8,
                        (2, true) => Op::Inc_rm16,
                        (4, true) => Op::Inc_rm32,
                        (_, true) => Op::Inc_rm64,
                        (1, false) => Op::Dec_rm8,
                        (2, false) => Op::Dec_rm16,
                        (4, false) => Op::Dec_rm32,
                        (_, false) => Op::Dec_rm64,
                    };
                    op1!(self, code, m)?;
                } else {
                    self.rmw_imm(ArithOp::Add, m, size, *delta as u64)?;
                }
                Ok(true)
            }
            E::Assign { place, value }
                if is_static_int(place) || (is_static(place) && place.ty.is_ptr()) =>
            {
                if let E::Int(v) = value.kind {
                    let size = place.ty.size();
                    if size < 8 || fits_i32(v) {
                        let m = self.static_mem(place, true)?;
                        return match size {
                            1 => op2!(self, Op::Mov_rm8_imm8, m, v as u8 as u32),
                            2 => op2!(self, Op::Mov_rm16_imm16, m, v as u16 as u32),
                            4 => op2!(self, Op::Mov_rm32_imm32, m, v as u32),
                            _ => op2!(self, Op::Mov_rm64_imm32, m, v as i64 as i32),
                        }
                        .map(|_| true);
                    }
                }
                if let Some((op, c)) = rmw_const(value, &place.ty) {
                    let size = place.ty.size();
                    let m = self.static_mem(place, true)?;
                    self.rmw_imm(op, m, size, c)?;
                    return Ok(true);
                }
                Ok(false)
            }
            _ => Ok(false),
        }
    }

    /// `op [m], imm` of width `size`; the constant is already wrapped to the width.
    fn rmw_imm(&mut self, op: ArithOp, m: MemoryOperand, size: u64, c: u64) -> Res {
        use ArithOp::*;
        let code = match (op, size) {
            (Add, 1) => Op::Add_rm8_imm8,
            (Add, 2) => Op::Add_rm16_imm16,
            (Add, 4) => Op::Add_rm32_imm32,
            (Add, _) => Op::Add_rm64_imm32,
            (Sub, 1) => Op::Sub_rm8_imm8,
            (Sub, 2) => Op::Sub_rm16_imm16,
            (Sub, 4) => Op::Sub_rm32_imm32,
            (Sub, _) => Op::Sub_rm64_imm32,
            (And, 1) => Op::And_rm8_imm8,
            (And, 2) => Op::And_rm16_imm16,
            (And, 4) => Op::And_rm32_imm32,
            (And, _) => Op::And_rm64_imm32,
            (Or, 1) => Op::Or_rm8_imm8,
            (Or, 2) => Op::Or_rm16_imm16,
            (Or, 4) => Op::Or_rm32_imm32,
            (Or, _) => Op::Or_rm64_imm32,
            (Xor, 1) => Op::Xor_rm8_imm8,
            (Xor, 2) => Op::Xor_rm16_imm16,
            (Xor, 4) => Op::Xor_rm32_imm32,
            (_, _) => Op::Xor_rm64_imm32,
        };
        match size {
            1 => op2!(self, code, m, c as u8 as u32),
            2 => op2!(self, code, m, c as u16 as u32),
            4 => op2!(self, code, m, c as u32),
            _ => op2!(self, code, m, c as i64 as i32),
        }
    }

    /// Evaluates a scalar and sets ZF when it is false (zero; for doubles `0.0`, NaN is true).
    fn truth(&mut self, e: &Expr) -> Res {
        self.expr(e)?;
        if e.ty == Type::Double {
            self.double_nonzero()?;
        }
        op2!(self, Op::Test_rm64_r64, R::RAX, R::RAX)
    }

    /// `eax = xmm0 != 0.0` (true for NaN).
    fn double_nonzero(&mut self) -> Res {
        op2!(self, Op::Xorpd_xmm_xmmm128, R::XMM1, R::XMM1)?;
        op2!(self, Op::Ucomisd_xmm_xmmm64, R::XMM0, R::XMM1)?;
        op1!(self, Op::Setne_rm8, R::AL)?;
        op1!(self, Op::Setp_rm8, R::CL)?;
        op2!(self, Op::Or_r8_rm8, R::AL, R::CL)?;
        op2!(self, Op::Movzx_r32_rm8, R::EAX, R::AL)
    }

    /// Loads `e` into `rcx` without disturbing `rax`, when it is that simple.
    fn simple_into_rcx(&mut self, e: &Expr) -> Res<bool> {
        match &e.kind {
            E::Int(v) => {
                self.mov_imm(R::RCX, *v)?;
                Ok(true)
            }
            E::Load(p)
                if matches!(p.kind, PlaceKind::Absolute(_) | PlaceKind::Saved(_))
                    && e.ty != Type::Double =>
            {
                let m = self.static_mem(p, false)?;
                self.load(R::RCX, m, &p.ty)?;
                Ok(true)
            }
            _ => Ok(false),
        }
    }

    /// Evaluates `a` into `rax` and `b` into `rcx` (integers and pointers).
    fn int_pair(&mut self, a: &Expr, b: &Expr) -> Res {
        self.expr(a)?;
        if self.simple_into_rcx(b)? {
            return Ok(());
        }
        self.push(R::RAX)?;
        self.expr(b)?;
        op2!(self, Op::Mov_r64_rm64, R::RCX, R::RAX)?;
        self.pop(R::RAX)
    }

    /// Evaluates `a` into `xmm0` and `b` into `xmm1`.
    fn double_pair(&mut self, a: &Expr, b: &Expr) -> Res {
        self.expr(a)?;
        op2!(self, Op::Movq_rm64_xmm, R::RAX, R::XMM0)?;
        self.push(R::RAX)?;
        self.expr(b)?;
        op2!(self, Op::Movapd_xmm_xmmm128, R::XMM1, R::XMM0)?;
        self.pop(R::RAX)?;
        op2!(self, Op::Movq_xmm_rm64, R::XMM0, R::RAX)
    }

    fn expr(&mut self, e: &Expr) -> Res {
        match &e.kind {
            E::Int(v) => self.mov_imm(R::RAX, *v),
            E::Float(f) => {
                self.mov_imm(R::RAX, f.to_bits())?;
                op2!(self, Op::Movq_xmm_rm64, R::XMM0, R::RAX)
            }
            E::Str(i) => {
                op2!(
                    self,
                    Op::Lea_r64_m,
                    R::RAX,
                    MemoryOperand::with_base_displ(R::RIP, 0)
                )?;
                self.string_refs.push((self.insns.len() - 1, *i));
                Ok(())
            }
            E::Load(p) => {
                let m = self.place_mem(p)?;
                self.load(R::RAX, m, &p.ty)
            }
            E::AddrOf(p) => match &p.kind {
                PlaceKind::Absolute(a) if self.is_near(*a) => {
                    op2!(
                        self,
                        Op::Lea_r64_m,
                        R::RAX,
                        MemoryOperand::with_base_displ(R::RIP, *a as i64)
                    )
                }
                PlaceKind::Absolute(a) => self.mov_imm(R::RAX, *a),
                PlaceKind::Deref(ptr, off) => {
                    self.expr(ptr)?;
                    if *off != 0 {
                        let d = disp32(*off)?;
                        op2!(
                            self,
                            Op::Lea_r64_m,
                            R::RAX,
                            MemoryOperand::with_base_displ(R::RAX, d)
                        )?;
                    }
                    Ok(())
                }
                PlaceKind::Saved(_) => {
                    Err(CodegenError::Encode("address of a saved register".into()))
                }
            },
            E::Current => match self.current.last() {
                Some(CurrentPlace::Static(p)) => {
                    let p = p.clone();
                    let m = self.static_mem(&p, false)?;
                    self.load(R::RAX, m, &p.ty)
                }
                Some(CurrentPlace::Stacked { depth, offset, ty }) => {
                    let (slot, offset, ty) = (self.depth - depth, *offset, ty.clone());
                    op2!(
                        self,
                        Op::Mov_r64_rm64,
                        R::RAX,
                        MemoryOperand::with_base_displ(R::RSP, slot)
                    )?;
                    self.load(
                        R::RAX,
                        MemoryOperand::with_base_displ(R::RAX, disp32(offset)?),
                        &ty,
                    )
                }
                None => Err(CodegenError::Encode(
                    "`Current` outside an assignment".into(),
                )),
            },
            E::Assign { place, value } => self.assign(place, value),
            E::IncDec { place, delta, post } => self.inc_dec(place, *delta, *post),
            E::Unary(op, x) => self.unary(*op, x, &e.ty),
            E::Arith(op, a, b) => {
                if e.ty == Type::Double {
                    self.double_pair(a, b)?;
                    let code = match op {
                        ArithOp::Add => Op::Addsd_xmm_xmmm64,
                        ArithOp::Sub => Op::Subsd_xmm_xmmm64,
                        ArithOp::Mul => Op::Mulsd_xmm_xmmm64,
                        _ => Op::Divsd_xmm_xmmm64,
                    };
                    op2!(self, code, R::XMM0, R::XMM1)
                } else {
                    self.int_arith(*op, a, b, &e.ty)
                }
            }
            E::Compare(op, a, b) => self.compare(*op, a, b),
            E::PtrAdd(p, i, scale) => {
                self.int_pair(p, i)?;
                if matches!(scale, 1 | 2 | 4 | 8) {
                    let m = MemoryOperand::with_base_index_scale(R::RAX, R::RCX, *scale as u32);
                    op2!(self, Op::Lea_r64_m, R::RAX, m)
                } else {
                    self.mov_imm(R::RDX, *scale)?;
                    op2!(self, Op::Imul_r64_rm64, R::RCX, R::RDX)?;
                    op2!(self, Op::Add_r64_rm64, R::RAX, R::RCX)
                }
            }
            E::PtrDiff(a, b, scale) => {
                self.int_pair(a, b)?;
                op2!(self, Op::Sub_r64_rm64, R::RAX, R::RCX)?;
                if *scale > 1 {
                    self.mov_imm(R::RCX, *scale)?;
                    self.op0(Op::Cqo)?;
                    op1!(self, Op::Idiv_rm64, R::RCX)?;
                }
                Ok(())
            }
            E::LogAnd(a, b) | E::LogOr(a, b) => {
                let and = matches!(e.kind, E::LogAnd(..));
                let short = self.new_label();
                let end = self.new_label();
                self.truth(a)?;
                self.jump(
                    if and {
                        Op::Je_rel32_64
                    } else {
                        Op::Jne_rel32_64
                    },
                    short,
                )?;
                self.truth(b)?;
                op1!(self, Op::Setne_rm8, R::AL)?;
                op2!(self, Op::Movzx_r32_rm8, R::EAX, R::AL)?;
                self.jump(Op::Jmp_rel32_64, end)?;
                self.bind(short);
                self.mov_imm(R::RAX, u64::from(!and))?;
                self.bind(end);
                Ok(())
            }
            E::Cond(c, a, b) => {
                let else_l = self.new_label();
                let end = self.new_label();
                self.truth(c)?;
                self.jump(Op::Je_rel32_64, else_l)?;
                self.expr(a)?;
                self.jump(Op::Jmp_rel32_64, end)?;
                self.bind(else_l);
                self.expr(b)?;
                self.bind(end);
                Ok(())
            }
            E::Convert(x) => {
                self.expr(x)?;
                self.convert(&x.ty, &e.ty)
            }
            E::Call { addr, args } => self.call(*addr, args, &e.ty),
            E::Tid => {
                // gettid(2): works in any mutatee (static, non-glibc), unlike TCB offsets.
                self.mov_imm(R::RAX, 186)?;
                self.op0(Op::Syscall)?;
                self.normalize(R::RAX, &Type::INT)
            }
        }
    }

    /// A memory operand for any place; for dereferences the pointer is evaluated into `rax`.
    fn place_mem(&mut self, p: &Place) -> Res<MemoryOperand> {
        match &p.kind {
            PlaceKind::Deref(ptr, off) => {
                self.expr(ptr)?;
                Ok(MemoryOperand::with_base_displ(R::RAX, disp32(*off)?))
            }
            _ => self.static_mem(p, false),
        }
    }

    fn assign(&mut self, place: &Place, value: &Expr) -> Res {
        let val_reg = R::RAX;
        match &place.kind {
            PlaceKind::Deref(ptr, off) => {
                self.expr(ptr)?;
                self.push(R::RAX)?;
                self.current.push(CurrentPlace::Stacked {
                    depth: self.depth,
                    offset: *off,
                    ty: place.ty.clone(),
                });
                let r = self.expr(value);
                self.current.pop();
                r?;
                self.pop(R::RCX)?;
                let m = MemoryOperand::with_base_displ(R::RCX, disp32(*off)?);
                self.store(val_reg, m, &place.ty)
            }
            _ => {
                self.current.push(CurrentPlace::Static(place.clone()));
                let r = self.expr(value);
                self.current.pop();
                r?;
                let m = self.static_mem(place, true)?;
                self.store(val_reg, m, &place.ty)
            }
        }
    }

    fn inc_dec(&mut self, place: &Place, delta: i64, post: bool) -> Res {
        let m = match &place.kind {
            PlaceKind::Deref(ptr, off) => {
                self.expr(ptr)?;
                op2!(self, Op::Mov_r64_rm64, R::RCX, R::RAX)?;
                MemoryOperand::with_base_displ(R::RCX, disp32(*off)?)
            }
            PlaceKind::Saved(_) => {
                // Reads and writes the same slot: record both.
                self.static_mem(place, false)?;
                self.static_mem(place, true)?
            }
            _ => self.static_mem(place, true)?,
        };
        if place.ty == Type::Double {
            op2!(self, Op::Movsd_xmm_xmmm64, R::XMM0, m)?;
            self.mov_imm(R::RDX, (delta as f64).to_bits())?;
            op2!(self, Op::Movq_xmm_rm64, R::XMM1, R::RDX)?;
            op2!(self, Op::Addsd_xmm_xmmm64, R::XMM1, R::XMM0)?;
            op2!(self, Op::Movsd_xmmm64_xmm, m, R::XMM1)?;
            if !post {
                op2!(self, Op::Movapd_xmm_xmmm128, R::XMM0, R::XMM1)?;
            }
            return Ok(());
        }
        self.load(R::RAX, m, &place.ty)?;
        op2!(
            self,
            Op::Lea_r64_m,
            R::RDX,
            MemoryOperand::with_base_displ(R::RAX, disp32(delta)?)
        )?;
        self.store(R::RDX, m, &place.ty)?;
        if !post {
            op2!(self, Op::Mov_r64_rm64, R::RAX, R::RDX)?;
            self.normalize(R::RAX, &place.ty)?;
        }
        Ok(())
    }

    fn unary(&mut self, op: UnaryOp, x: &Expr, ty: &Type) -> Res {
        self.expr(x)?;
        match op {
            UnaryOp::Not => {
                if x.ty == Type::Double {
                    self.double_nonzero()?;
                }
                op2!(self, Op::Test_rm64_r64, R::RAX, R::RAX)?;
                op1!(self, Op::Sete_rm8, R::AL)?;
                op2!(self, Op::Movzx_r32_rm8, R::EAX, R::AL)
            }
            UnaryOp::Neg if *ty == Type::Double => {
                self.mov_imm(R::RAX, 1 << 63)?;
                op2!(self, Op::Movq_xmm_rm64, R::XMM1, R::RAX)?;
                op2!(self, Op::Xorpd_xmm_xmmm128, R::XMM0, R::XMM1)
            }
            UnaryOp::Neg => {
                op1!(self, Op::Neg_rm64, R::RAX)?;
                self.normalize(R::RAX, ty)
            }
            UnaryOp::BitNot => {
                op1!(self, Op::Not_rm64, R::RAX)?;
                self.normalize(R::RAX, ty)
            }
        }
    }

    fn int_arith(&mut self, op: ArithOp, a: &Expr, b: &Expr, ty: &Type) -> Res {
        let wide = ty.size() == 8;
        let signed = int_kind(ty).is_some_and(IntKind::signed);
        // Constant right operands become immediates.
        if let E::Int(c) = b.kind {
            let imm = match op {
                ArithOp::Add => Some(Op::Add_rm64_imm32),
                ArithOp::Sub => Some(Op::Sub_rm64_imm32),
                ArithOp::And => Some(Op::And_rm64_imm32),
                ArithOp::Or => Some(Op::Or_rm64_imm32),
                ArithOp::Xor => Some(Op::Xor_rm64_imm32),
                _ => None,
            };
            if let (Some(code), true) = (imm, fits_i32(c)) {
                self.expr(a)?;
                op2!(self, code, R::RAX, c as i64 as i32)?;
                return self.normalize(R::RAX, ty);
            }
            if matches!(op, ArithOp::Shl | ArithOp::Shr) {
                self.expr(a)?;
                let count = (c & if wide { 63 } else { 31 }) as u32;
                let code = match (op, wide, signed) {
                    (ArithOp::Shl, true, _) => Op::Shl_rm64_imm8,
                    (ArithOp::Shl, false, _) => Op::Shl_rm32_imm8,
                    (_, true, true) => Op::Sar_rm64_imm8,
                    (_, true, false) => Op::Shr_rm64_imm8,
                    (_, false, true) => Op::Sar_rm32_imm8,
                    (_, false, false) => Op::Shr_rm32_imm8,
                };
                let r = if wide { R::RAX } else { R::EAX };
                op2!(self, code, r, count)?;
                return self.normalize(R::RAX, ty);
            }
        }
        self.int_pair(a, b)?;
        match op {
            ArithOp::Add => op2!(self, Op::Add_r64_rm64, R::RAX, R::RCX)?,
            ArithOp::Sub => op2!(self, Op::Sub_r64_rm64, R::RAX, R::RCX)?,
            ArithOp::Mul => op2!(self, Op::Imul_r64_rm64, R::RAX, R::RCX)?,
            ArithOp::And => op2!(self, Op::And_r64_rm64, R::RAX, R::RCX)?,
            ArithOp::Or => op2!(self, Op::Or_r64_rm64, R::RAX, R::RCX)?,
            ArithOp::Xor => op2!(self, Op::Xor_r64_rm64, R::RAX, R::RCX)?,
            ArithOp::Shl | ArithOp::Shr => {
                let code = match (op, wide, signed) {
                    (ArithOp::Shl, true, _) => Op::Shl_rm64_CL,
                    (ArithOp::Shl, false, _) => Op::Shl_rm32_CL,
                    (_, true, true) => Op::Sar_rm64_CL,
                    (_, true, false) => Op::Shr_rm64_CL,
                    (_, false, true) => Op::Sar_rm32_CL,
                    (_, false, false) => Op::Shr_rm32_CL,
                };
                let r = if wide { R::RAX } else { R::EAX };
                op2!(self, code, r, R::CL)?;
            }
            ArithOp::Div | ArithOp::Rem => self.divide(op == ArithOp::Rem, signed, b)?,
        }
        self.normalize(R::RAX, ty)
    }

    /// `rax = rax / rcx` (or `%`), defined for every input: `x / 0 == x % 0 == 0`,
    /// `MIN / -1 == MIN`, `MIN % -1 == 0`.
    fn divide(&mut self, rem: bool, signed: bool, divisor: &Expr) -> Res {
        let constant = match divisor.kind {
            E::Int(c) => Some(c),
            _ => None,
        };
        let done = self.new_label();
        let zero = self.new_label();
        let minus_one = self.new_label();
        if constant == Some(0) {
            return self.mov_imm(R::RAX, 0);
        }
        let check_zero = constant.is_none();
        let check_minus_one = signed && (constant.is_none() || constant == Some(u64::MAX));
        if check_zero {
            op2!(self, Op::Test_rm64_r64, R::RCX, R::RCX)?;
            self.jump(Op::Je_rel32_64, zero)?;
        }
        if check_minus_one {
            op2!(self, Op::Cmp_rm64_imm8, R::RCX, -1i32)?;
            self.jump(Op::Je_rel32_64, minus_one)?;
        }
        if signed {
            self.op0(Op::Cqo)?;
            op1!(self, Op::Idiv_rm64, R::RCX)?;
        } else {
            op2!(self, Op::Xor_r32_rm32, R::EDX, R::EDX)?;
            op1!(self, Op::Div_rm64, R::RCX)?;
        }
        if rem {
            op2!(self, Op::Mov_r64_rm64, R::RAX, R::RDX)?;
        }
        if check_zero || check_minus_one {
            self.jump(Op::Jmp_rel32_64, done)?;
        }
        if check_minus_one {
            self.bind(minus_one);
            if rem {
                self.mov_imm(R::RAX, 0)?;
            } else {
                op1!(self, Op::Neg_rm64, R::RAX)?;
            }
            if check_zero {
                self.jump(Op::Jmp_rel32_64, done)?;
            }
        }
        if check_zero {
            self.bind(zero);
            self.mov_imm(R::RAX, 0)?;
        }
        self.bind(done);
        Ok(())
    }

    fn compare(&mut self, op: CmpOp, a: &Expr, b: &Expr) -> Res {
        if a.ty == Type::Double {
            self.double_pair(a, b)?;
            let (x, y, set) = match op {
                CmpOp::Gt => (R::XMM0, R::XMM1, Op::Seta_rm8),
                CmpOp::Ge => (R::XMM0, R::XMM1, Op::Setae_rm8),
                CmpOp::Lt => (R::XMM1, R::XMM0, Op::Seta_rm8),
                CmpOp::Le => (R::XMM1, R::XMM0, Op::Setae_rm8),
                CmpOp::Eq | CmpOp::Ne => (R::XMM0, R::XMM1, Op::Sete_rm8),
            };
            op2!(self, Op::Ucomisd_xmm_xmmm64, x, y)?;
            match op {
                CmpOp::Eq => {
                    op1!(self, Op::Sete_rm8, R::AL)?;
                    op1!(self, Op::Setnp_rm8, R::CL)?;
                    op2!(self, Op::And_r8_rm8, R::AL, R::CL)?;
                }
                CmpOp::Ne => {
                    op1!(self, Op::Setne_rm8, R::AL)?;
                    op1!(self, Op::Setp_rm8, R::CL)?;
                    op2!(self, Op::Or_r8_rm8, R::AL, R::CL)?;
                }
                _ => op1!(self, set, R::AL)?,
            }
            return op2!(self, Op::Movzx_r32_rm8, R::EAX, R::AL);
        }
        let signed = int_kind(&a.ty).is_some_and(IntKind::signed);
        match b.kind {
            E::Int(c) if fits_i32(c) => {
                self.expr(a)?;
                op2!(self, Op::Cmp_rm64_imm32, R::RAX, c as i64 as i32)?;
            }
            _ => {
                self.int_pair(a, b)?;
                op2!(self, Op::Cmp_r64_rm64, R::RAX, R::RCX)?;
            }
        }
        let set = match (op, signed) {
            (CmpOp::Eq, _) => Op::Sete_rm8,
            (CmpOp::Ne, _) => Op::Setne_rm8,
            (CmpOp::Lt, true) => Op::Setl_rm8,
            (CmpOp::Le, true) => Op::Setle_rm8,
            (CmpOp::Gt, true) => Op::Setg_rm8,
            (CmpOp::Ge, true) => Op::Setge_rm8,
            (CmpOp::Lt, false) => Op::Setb_rm8,
            (CmpOp::Le, false) => Op::Setbe_rm8,
            (CmpOp::Gt, false) => Op::Seta_rm8,
            (CmpOp::Ge, false) => Op::Setae_rm8,
        };
        op1!(self, set, R::AL)?;
        op2!(self, Op::Movzx_r32_rm8, R::EAX, R::AL)
    }

    /// Converts the value in `rax`/`xmm0` from `from` to `to`.
    fn convert(&mut self, from: &Type, to: &Type) -> Res {
        match (from, to) {
            (_, Type::Void) | (Type::Double, Type::Double) => Ok(()),
            (Type::Double, _) if *to == Type::ULONG => {
                // Values from 2^63 up go through `x - 2^63`, then get the top bit back.
                let big = self.new_label();
                let done = self.new_label();
                self.mov_imm(R::RAX, super::interp::TWO_63.to_bits())?;
                op2!(self, Op::Movq_xmm_rm64, R::XMM1, R::RAX)?;
                op2!(self, Op::Ucomisd_xmm_xmmm64, R::XMM0, R::XMM1)?;
                self.jump(Op::Jae_rel32_64, big)?;
                op2!(self, Op::Cvttsd2si_r64_xmmm64, R::RAX, R::XMM0)?;
                self.jump(Op::Jmp_rel32_64, done)?;
                self.bind(big);
                op2!(self, Op::Subsd_xmm_xmmm64, R::XMM0, R::XMM1)?;
                op2!(self, Op::Cvttsd2si_r64_xmmm64, R::RAX, R::XMM0)?;
                op2!(self, Op::Btc_rm64_imm8, R::RAX, 63u32)?;
                self.bind(done);
                Ok(())
            }
            (Type::Double, _) => {
                op2!(self, Op::Cvttsd2si_r64_xmmm64, R::RAX, R::XMM0)?;
                self.normalize(R::RAX, to)
            }
            (_, Type::Double) if *from == Type::ULONG => {
                // cvtsi2sd is signed: halve (keeping the low bit for rounding), convert, double.
                let big = self.new_label();
                let done = self.new_label();
                op2!(self, Op::Test_rm64_r64, R::RAX, R::RAX)?;
                self.jump(Op::Js_rel32_64, big)?;
                op2!(self, Op::Cvtsi2sd_xmm_rm64, R::XMM0, R::RAX)?;
                self.jump(Op::Jmp_rel32_64, done)?;
                self.bind(big);
                op2!(self, Op::Mov_r64_rm64, R::RCX, R::RAX)?;
                op2!(self, Op::Shr_rm64_1, R::RCX, 1u32)?;
                op2!(self, Op::And_rm32_imm8, R::EAX, 1u32)?;
                op2!(self, Op::Or_r64_rm64, R::RCX, R::RAX)?;
                op2!(self, Op::Cvtsi2sd_xmm_rm64, R::XMM0, R::RCX)?;
                op2!(self, Op::Addsd_xmm_xmmm64, R::XMM0, R::XMM0)?;
                self.bind(done);
                Ok(())
            }
            (_, Type::Double) => op2!(self, Op::Cvtsi2sd_xmm_rm64, R::XMM0, R::RAX),
            (_, Type::Int(_)) => self.normalize(R::RAX, to),
            _ => Ok(()),
        }
    }

    /// A SysV call: arguments evaluated left to right and kept on the stack, then moved into
    /// registers (`rdi rsi rdx rcx r8 r9`, `xmm0-7`) or the outgoing stack area; `rsp` 16-byte
    /// aligned at the `call`; `al` = vector registers used (for variadic callees).
    fn call(&mut self, addr: u64, args: &[Expr], ret: &Type) -> Res {
        self.calls_out = true;
        let n = args.len() as i64;
        for a in args {
            self.expr(a)?;
            if a.ty == Type::Double {
                op2!(self, Op::Movq_rm64_xmm, R::RAX, R::XMM0)?;
            }
            self.push(R::RAX)?;
        }
        enum Dest {
            Gpr(R),
            Xmm(R),
            Stack(i64),
        }
        let (mut gi, mut xi, mut si) = (0, 0, 0i64);
        let dests: Vec<Dest> = args
            .iter()
            .map(|a| {
                if a.ty == Type::Double && xi < 8 {
                    xi += 1;
                    Dest::Xmm(ARG_XMMS[xi - 1])
                } else if a.ty != Type::Double && gi < 6 {
                    gi += 1;
                    Dest::Gpr(ARG_GPRS[gi - 1])
                } else {
                    si += 1;
                    Dest::Stack(si - 1)
                }
            })
            .collect();
        let stack_bytes = si * 8;
        let pad = if (self.depth + stack_bytes) % 16 == 0 {
            0
        } else {
            8
        };
        let extra = pad + stack_bytes;
        if extra > 0 {
            op2!(self, Op::Sub_rm64_imm32, R::RSP, extra as i32)?;
            self.depth += extra;
        }
        for (i, d) in dests.iter().enumerate() {
            let src = MemoryOperand::with_base_displ(R::RSP, extra + (n - 1 - i as i64) * 8);
            match d {
                Dest::Gpr(r) => op2!(self, Op::Mov_r64_rm64, *r, src)?,
                Dest::Xmm(x) => op2!(self, Op::Movsd_xmm_xmmm64, *x, src)?,
                Dest::Stack(k) => {
                    op2!(self, Op::Mov_r64_rm64, R::RAX, src)?;
                    op2!(
                        self,
                        Op::Mov_rm64_r64,
                        MemoryOperand::with_base_displ(R::RSP, k * 8),
                        R::RAX
                    )?;
                }
            }
        }
        self.mov_imm(R::RAX, xi as u64)?;
        op2!(self, Op::Mov_r64_imm64, R::R11, addr)?;
        op1!(self, Op::Call_rm64, R::R11)?;
        let total = extra + n * 8;
        if total > 0 {
            op2!(self, Op::Add_rm64_imm32, R::RSP, total as i32)?;
            self.depth -= total;
        }
        match ret {
            Type::Int(_) => self.normalize(R::RAX, ret),
            _ => Ok(()),
        }
    }

    fn finish(mut self, strings: &[Vec<u8>]) -> Res<Code> {
        let mut string_at = Vec::new();
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
        let encoded = BlockEncoder::encode(64, block, BlockEncoderOptions::NONE)?;
        Ok(Code {
            bytes: encoded.code_buffer,
            addr: self.addr,
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
        for insn in &self.insns {
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

fn is_static(p: &Place) -> bool {
    matches!(p.kind, PlaceKind::Absolute(_) | PlaceKind::Saved(_))
}

fn is_static_int(p: &Place) -> bool {
    is_static(p) && p.ty.is_int()
}

/// Recognises `Current OP constant` (possibly through integer conversions, which don't change
/// the low bits these operations produce) for an integer or pointer place, returning the
/// operation and the constant wrapped to the place's width.
fn rmw_const(value: &Expr, place_ty: &Type) -> Option<(ArithOp, u64)> {
    fn strip(e: &Expr) -> &Expr {
        match &e.kind {
            E::Convert(x) if e.ty.is_int() && x.ty.is_int() => strip(x),
            _ => e,
        }
    }
    let size = place_ty.size();
    let (op, a, c) = match &strip(value).kind {
        E::Arith(
            op @ (ArithOp::Add | ArithOp::Sub | ArithOp::And | ArithOp::Or | ArithOp::Xor),
            a,
            b,
        ) if value.ty.is_int() => match b.kind {
            E::Int(c) => (*op, a, c),
            _ => return None,
        },
        E::PtrAdd(a, b, scale) => match b.kind {
            E::Int(c) => (ArithOp::Add, a, c.wrapping_mul(*scale)),
            _ => return None,
        },
        _ => return None,
    };
    if !matches!(strip(a).kind, E::Current) {
        return None;
    }
    // Every operand must be at least as wide as the place, or the low bits could differ.
    if strip_widths_ok(value, size) && (size < 8 || fits_i32(c)) {
        Some((op, c))
    } else {
        None
    }
}

fn strip_widths_ok(e: &Expr, size: u64) -> bool {
    match &e.kind {
        E::Convert(x) => x.ty.size() >= size && strip_widths_ok(x, size),
        E::Arith(_, a, _) | E::PtrAdd(a, _, _) => e.ty.size() >= size && strip_widths_ok(a, size),
        E::Current => true,
        _ => false,
    }
}
