//! Lowering of statements, places and most expressions to instructions: the accumulator
//! machine (`rax`/`xmm0`, left operands on the stack), assignments through `Current`, and the
//! single-instruction forms of simple statements.

use iced_x86::{Code as Op, MemoryOperand, Register as R};

use super::{disp32, fits_i32, CodegenError, CurrentPlace, Gen, Res};
use crate::snippet::ir::{ArithOp, Expr, ExprKind as E, Place, PlaceKind, Stmt, UnaryOp};
use crate::snippet::types::Type;

impl Gen {
    pub(super) fn stmts(&mut self, stmts: &[Stmt]) -> Res {
        for s in stmts {
            match s {
                Stmt::Expr(e) => {
                    if !self.effect_only(e)? {
                        self.expr(e)?;
                    }
                }
                Stmt::Rt {
                    op,
                    slot,
                    access,
                    frame,
                } => self.rt(*op, *slot, *access, *frame)?,
                Stmt::Hit(counter) => self.hit(*counter)?,
                Stmt::If(c, then, otherwise) => {
                    let else_l = self.new_label();
                    self.branch(c, false, else_l)?;
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
    pub(super) fn effect_only(&mut self, e: &Expr) -> Res<bool> {
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
    pub(super) fn rmw_imm(&mut self, op: ArithOp, m: MemoryOperand, size: u64, c: u64) -> Res {
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
    pub(super) fn truth(&mut self, e: &Expr) -> Res {
        self.expr(e)?;
        if e.ty == Type::Double {
            self.double_nonzero()?;
        }
        op2!(self, Op::Test_rm64_r64, R::RAX, R::RAX)
    }

    /// `eax = xmm0 != 0.0` (true for NaN).
    pub(super) fn double_nonzero(&mut self) -> Res {
        op2!(self, Op::Xorpd_xmm_xmmm128, R::XMM1, R::XMM1)?;
        op2!(self, Op::Ucomisd_xmm_xmmm64, R::XMM0, R::XMM1)?;
        op1!(self, Op::Setne_rm8, R::AL)?;
        op1!(self, Op::Setp_rm8, R::CL)?;
        op2!(self, Op::Or_r8_rm8, R::AL, R::CL)?;
        op2!(self, Op::Movzx_r32_rm8, R::EAX, R::AL)
    }

    /// Loads `e` into `rcx` without disturbing `rax`, when it is that simple.
    pub(super) fn simple_into_rcx(&mut self, e: &Expr) -> Res<bool> {
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
    pub(super) fn int_pair(&mut self, a: &Expr, b: &Expr) -> Res {
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
    pub(super) fn double_pair(&mut self, a: &Expr, b: &Expr) -> Res {
        self.expr(a)?;
        op2!(self, Op::Movq_rm64_xmm, R::RAX, R::XMM0)?;
        self.push(R::RAX)?;
        self.expr(b)?;
        op2!(self, Op::Movapd_xmm_xmmm128, R::XMM1, R::XMM0)?;
        self.pop(R::RAX)?;
        op2!(self, Op::Movq_xmm_rm64, R::XMM0, R::RAX)
    }

    pub(super) fn expr(&mut self, e: &Expr) -> Res {
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
                self.branch(a, !and, short)?;
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
                self.branch(c, false, else_l)?;
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
    pub(super) fn place_mem(&mut self, p: &Place) -> Res<MemoryOperand> {
        match &p.kind {
            PlaceKind::Deref(ptr, off) => {
                self.expr(ptr)?;
                Ok(MemoryOperand::with_base_displ(R::RAX, disp32(*off)?))
            }
            _ => self.static_mem(p, false),
        }
    }

    pub(super) fn assign(&mut self, place: &Place, value: &Expr) -> Res {
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

    pub(super) fn inc_dec(&mut self, place: &Place, delta: i64, post: bool) -> Res {
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

    pub(super) fn unary(&mut self, op: UnaryOp, x: &Expr, ty: &Type) -> Res {
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
