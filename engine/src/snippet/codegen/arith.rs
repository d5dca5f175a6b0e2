//! Lowering of integer arithmetic (with the defined division and shift semantics),
//! comparisons, conversions between integer and `double`, and SysV calls.

use iced_x86::{Code as Op, MemoryOperand, Register as R};

use super::{fits_i32, int_kind, Gen, Label, Res, ARG_GPRS, ARG_XMMS};
use crate::snippet::ir::{ArithOp, CmpOp, Expr, ExprKind as E, UnaryOp};
use crate::snippet::types::{IntKind, Type};

impl Gen {
    pub(super) fn int_arith(&mut self, op: ArithOp, a: &Expr, b: &Expr, ty: &Type) -> Res {
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
    pub(super) fn divide(&mut self, rem: bool, signed: bool, divisor: &Expr) -> Res {
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

    pub(super) fn compare(&mut self, op: CmpOp, a: &Expr, b: &Expr) -> Res {
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
        let signed = self.cmp_ints(a, b)?;
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

    /// Compares two integers or pointers (`cmp rax, rcx` or `cmp rax, imm`), leaving the
    /// flags; returns whether the comparison is signed.
    pub(super) fn cmp_ints(&mut self, a: &Expr, b: &Expr) -> Res<bool> {
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
        Ok(int_kind(&a.ty).is_some_and(IntKind::signed))
    }

    /// Jumps to `target` when the scalar `c` is true (`when`) or false (`!when`), fusing
    /// integer comparisons, `!`, `&&` and `||` into the branches instead of materialising
    /// 0 or 1 first.
    pub(super) fn branch(&mut self, c: &Expr, when: bool, target: Label) -> Res {
        match &c.kind {
            E::Compare(op, a, b) if a.ty != Type::Double => {
                let signed = self.cmp_ints(a, b)?;
                // The condition under which to jump.
                let op = if when { *op } else { negate(*op) };
                let code = match (op, signed) {
                    (CmpOp::Eq, _) => Op::Je_rel32_64,
                    (CmpOp::Ne, _) => Op::Jne_rel32_64,
                    (CmpOp::Lt, true) => Op::Jl_rel32_64,
                    (CmpOp::Le, true) => Op::Jle_rel32_64,
                    (CmpOp::Gt, true) => Op::Jg_rel32_64,
                    (CmpOp::Ge, true) => Op::Jge_rel32_64,
                    (CmpOp::Lt, false) => Op::Jb_rel32_64,
                    (CmpOp::Le, false) => Op::Jbe_rel32_64,
                    (CmpOp::Gt, false) => Op::Ja_rel32_64,
                    (CmpOp::Ge, false) => Op::Jae_rel32_64,
                };
                self.jump(code, target)
            }
            E::Unary(UnaryOp::Not, x) => self.branch(x, !when, target),
            E::LogAnd(x, y) | E::LogOr(x, y) => {
                let and = matches!(c.kind, E::LogAnd(..));
                if and != when {
                    // `x && y` false or `x || y` true: either operand decides alone.
                    self.branch(x, when, target)?;
                    self.branch(y, when, target)
                } else {
                    // `x && y` true or `x || y` false: both must agree.
                    let skip = self.new_label();
                    self.branch(x, !when, skip)?;
                    self.branch(y, when, target)?;
                    self.bind(skip);
                    Ok(())
                }
            }
            _ => {
                self.truth(c)?;
                let code = if when {
                    Op::Jne_rel32_64
                } else {
                    Op::Je_rel32_64
                };
                self.jump(code, target)
            }
        }
    }

    /// Converts the value in `rax`/`xmm0` from `from` to `to`.
    pub(super) fn convert(&mut self, from: &Type, to: &Type) -> Res {
        match (from, to) {
            (_, Type::Void) | (Type::Double, Type::Double) => Ok(()),
            (Type::Double, _) if *to == Type::ULONG => {
                // Values from 2^63 up go through `x - 2^63`, then get the top bit back.
                let big = self.new_label();
                let done = self.new_label();
                self.mov_imm(R::RAX, crate::snippet::interp::TWO_63.to_bits())?;
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
    pub(super) fn call(&mut self, addr: u64, args: &[Expr], ret: &Type) -> Res {
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
        if self.is_near(addr) {
            // A direct `call rel32` keeps the code position independent: a PIE rewritten on
            // disk moves code and callee together, so only the distance must be right.
            self.emit(Ok(iced_x86::Instruction::with_branch(
                Op::Call_rel32_64,
                addr,
            )?))?;
        } else {
            op2!(self, Op::Mov_r64_imm64, R::R11, addr)?;
            op1!(self, Op::Call_rm64, R::R11)?;
        }
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
}

/// The comparison that is true exactly when `op` is false (for integers; NaN plays no part).
fn negate(op: CmpOp) -> CmpOp {
    match op {
        CmpOp::Eq => CmpOp::Ne,
        CmpOp::Ne => CmpOp::Eq,
        CmpOp::Lt => CmpOp::Ge,
        CmpOp::Le => CmpOp::Gt,
        CmpOp::Gt => CmpOp::Le,
        CmpOp::Ge => CmpOp::Lt,
    }
}
