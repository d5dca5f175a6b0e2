//! Operators: C's typing rules for unary, binary, assignment, conditional and call
//! expressions, with every implicit conversion made explicit.

use super::{arith_op, cmp_op, convert, is_null_constant, Checker};
use crate::snippet::ast::{self, BinOp, ExprKind as A, Span, UnOp};
use crate::snippet::diag::Diagnostic;
use crate::snippet::env::Binding;
use crate::snippet::ir::{wrap, ArithOp, CmpOp, Expr, ExprKind as E, PlaceKind, UnaryOp};
use crate::snippet::types::{common_type, Type};

impl Checker<'_> {
    pub(super) fn unary(&mut self, op: UnOp, x: &ast::Expr, span: Span) -> Option<Expr> {
        match op {
            UnOp::Plus | UnOp::Neg => {
                let v = self.arith_value(x, if op == UnOp::Neg { "`-`" } else { "`+`" })?;
                let ty = v.ty.promoted();
                let v = convert(v, &ty);
                if op == UnOp::Plus {
                    return Some(v);
                }
                Some(fold_unary(UnaryOp::Neg, v, ty))
            }
            UnOp::BitNot => {
                let v = self.int_value(x, "`~`")?;
                let ty = v.ty.promoted();
                let v = convert(v, &ty);
                Some(fold_unary(UnaryOp::BitNot, v, ty))
            }
            UnOp::Not => {
                let v = self.condition(x)?;
                Some(Expr::new(E::Unary(UnaryOp::Not, Box::new(v)), Type::INT))
            }
            UnOp::Deref => {
                let place = self.place(&ast::Expr {
                    kind: A::Unary(UnOp::Deref, Box::new(x.clone())),
                    span,
                })?;
                Some(self.load(place))
            }
            UnOp::AddrOf => {
                if let A::Name(n) = &x.kind {
                    if let Some(Binding::Func { addr, .. }) = self.env.lookup(n) {
                        return Some(Expr::int(addr, Type::ptr(Type::Void)));
                    }
                }
                let place = self.place(x)?;
                if let PlaceKind::Saved(_) = place.kind {
                    self.diags.push(
                        Diagnostic::error(span, "cannot take the address of a register value")
                            .with_hint("copy it into a declared variable first"),
                    );
                    return None;
                }
                let ty = match &place.ty {
                    Type::Array(elem, _) => Type::ptr((**elem).clone()),
                    t => Type::ptr(t.clone()),
                };
                Some(Expr::new(E::AddrOf(Box::new(place)), ty))
            }
            UnOp::PreInc | UnOp::PreDec | UnOp::PostInc | UnOp::PostDec => {
                let place = self.written_place(x)?;
                let sign: i64 = if matches!(op, UnOp::PreInc | UnOp::PostInc) {
                    1
                } else {
                    -1
                };
                let delta = match &place.ty {
                    Type::Int(_) | Type::Double => sign,
                    Type::Ptr(t) if **t != Type::Void => sign * t.size() as i64,
                    other => {
                        let what = if sign > 0 { "++" } else { "--" };
                        self.error(span, format!("cannot apply `{what}` to `{other}`"));
                        return None;
                    }
                };
                let ty = place.ty.clone();
                let post = matches!(op, UnOp::PostInc | UnOp::PostDec);
                Some(Expr::new(
                    E::IncDec {
                        place: Box::new(place),
                        delta,
                        post,
                    },
                    ty,
                ))
            }
        }
    }

    /// `base + index` or `base - index` where one side is a pointer; also `p[i]`.
    pub(super) fn pointer_add(
        &mut self,
        base: &ast::Expr,
        index: &ast::Expr,
        op: BinOp,
        span: Span,
    ) -> Option<Expr> {
        let a = self.value(base)?;
        let b = self.value(index)?;
        self.pointer_arith(a, b, op, span)
    }

    pub(super) fn pointer_arith(
        &mut self,
        a: Expr,
        b: Expr,
        op: BinOp,
        span: Span,
    ) -> Option<Expr> {
        let (ptr, idx) = match (&a.ty, &b.ty) {
            (Type::Ptr(_), Type::Int(_)) => (a, b),
            (Type::Int(_), Type::Ptr(_)) if op == BinOp::Add => (b, a),
            (Type::Ptr(pa), Type::Ptr(pb)) if op == BinOp::Sub => {
                if pa != pb {
                    self.error(span, format!("cannot subtract `{}` from `{}`", b.ty, a.ty));
                    return None;
                }
                let scale = pa.size().max(1);
                return Some(Expr::new(
                    E::PtrDiff(Box::new(a), Box::new(b), scale),
                    Type::LONG,
                ));
            }
            (Type::Ptr(_), Type::Double) | (Type::Double, Type::Ptr(_)) => {
                let verb = if op == BinOp::Add { "add" } else { "subtract" };
                self.error(span, format!("cannot {verb} a pointer and a double"));
                return None;
            }
            _ => {
                self.error(
                    span,
                    format!(
                        "cannot apply `{}` to `{}` and `{}`",
                        op.symbol(),
                        a.ty,
                        b.ty
                    ),
                );
                return None;
            }
        };
        let elem = ptr.ty.pointee()?;
        let scale = elem.size().max(1);
        let idx = convert(idx, &Type::LONG);
        let idx = if op == BinOp::Sub {
            fold_unary(UnaryOp::Neg, idx, Type::LONG)
        } else {
            idx
        };
        let ty = ptr.ty.clone();
        Some(Expr::new(
            E::PtrAdd(Box::new(ptr), Box::new(idx), scale),
            ty,
        ))
    }

    pub(super) fn binary(
        &mut self,
        op: BinOp,
        a: &ast::Expr,
        b: &ast::Expr,
        span: Span,
    ) -> Option<Expr> {
        if matches!(op, BinOp::LogAnd | BinOp::LogOr) {
            let x = self.condition(a);
            let y = self.condition(b);
            let (x, y) = (Box::new(x?), Box::new(y?));
            let kind = if op == BinOp::LogAnd {
                E::LogAnd(x, y)
            } else {
                E::LogOr(x, y)
            };
            return Some(Expr::new(kind, Type::INT));
        }
        let x = self.value(a);
        let y = self.value(b);
        let (x, y) = (x?, y?);
        if let Some(cmp) = cmp_op(op) {
            return self.compare(cmp, x, y, op, span);
        }
        let aop = arith_op(op)?;
        if x.ty.is_ptr() || y.ty.is_ptr() {
            if matches!(op, BinOp::Add | BinOp::Sub) {
                return self.pointer_arith(x, y, op, span);
            }
            self.error(
                span,
                format!(
                    "cannot apply `{}` to `{}` and `{}`",
                    op.symbol(),
                    x.ty,
                    y.ty
                ),
            );
            return None;
        }
        let int_only = matches!(
            aop,
            ArithOp::Rem | ArithOp::And | ArithOp::Or | ArithOp::Xor | ArithOp::Shl | ArithOp::Shr
        );
        if int_only && (!x.ty.is_int() || !y.ty.is_int()) {
            let bad = if x.ty.is_int() { &y.ty } else { &x.ty };
            self.error(
                span,
                format!("`{}` needs integers, not `{bad}`", op.symbol()),
            );
            return None;
        }
        if !x.ty.is_arith() || !y.ty.is_arith() {
            self.error(
                span,
                format!(
                    "cannot apply `{}` to `{}` and `{}`",
                    op.symbol(),
                    x.ty,
                    y.ty
                ),
            );
            return None;
        }
        let ty = if matches!(aop, ArithOp::Shl | ArithOp::Shr) {
            x.ty.promoted()
        } else {
            common_type(&x.ty, &y.ty)
        };
        Some(fold_arith(aop, convert(x, &ty), convert(y, &ty), ty))
    }

    pub(super) fn compare(
        &mut self,
        cmp: CmpOp,
        x: Expr,
        y: Expr,
        op: BinOp,
        span: Span,
    ) -> Option<Expr> {
        let (x, y) = match (&x.ty, &y.ty) {
            (a, b) if a.is_arith() && b.is_arith() => {
                let ty = common_type(a, b);
                (convert(x, &ty), convert(y, &ty))
            }
            (Type::Ptr(_), Type::Ptr(_)) => (x, y),
            (Type::Ptr(_), _) if is_null_constant(&y) => {
                let ty = x.ty.clone();
                (x, convert(y, &ty))
            }
            (_, Type::Ptr(_)) if is_null_constant(&x) => {
                let ty = y.ty.clone();
                (convert(x, &ty), y)
            }
            (a, b) => {
                self.error(
                    span,
                    format!("cannot compare `{a}` with `{b}` using `{}`", op.symbol()),
                );
                return None;
            }
        };
        Some(Expr::new(
            E::Compare(cmp, Box::new(x), Box::new(y)),
            Type::INT,
        ))
    }

    /// Converts `v` for storing into (or passing as) `to`, or reports why not.
    pub(super) fn assign_convert(&mut self, v: Expr, to: &Type, span: Span) -> Option<Expr> {
        let ok = match (&v.ty, to) {
            (a, b) if a.is_arith() && b.is_arith() => true,
            (Type::Ptr(a), Type::Ptr(b)) => a == b || **a == Type::Void || **b == Type::Void,
            (_, Type::Ptr(_)) => is_null_constant(&v),
            _ => false,
        };
        if !ok {
            let mut d = Diagnostic::error(span, format!("cannot use `{}` as `{to}`", v.ty));
            if (v.ty.is_ptr() && to.is_int())
                || (v.ty.is_int() && to.is_ptr())
                || (v.ty.is_ptr() && to.is_ptr())
            {
                d = d.with_hint(format!("cast it: `({to})...`"));
            }
            self.diags.push(d);
            return None;
        }
        Some(convert(v, to))
    }

    pub(super) fn assign(
        &mut self,
        op: Option<BinOp>,
        lhs: &ast::Expr,
        rhs: &ast::Expr,
        span: Span,
    ) -> Option<Expr> {
        let place = self.written_place(lhs);
        let value = self.value(rhs);
        let (place, value) = (place?, value?);
        if !place.ty.is_scalar() {
            self.error(lhs.span, format!("cannot assign to `{}`", place.ty));
            return None;
        }
        let ty = place.ty.clone();
        let value = match op {
            None => self.assign_convert(value, &ty, rhs.span)?,
            Some(op) => {
                let current = Expr::new(E::Current, ty.clone());
                let combined = if ty.is_ptr() {
                    if !matches!(op, BinOp::Add | BinOp::Sub) || !value.ty.is_int() {
                        self.error(
                            span,
                            format!(
                                "cannot apply `{}=` to `{ty}` and `{}`",
                                op.symbol(),
                                value.ty
                            ),
                        );
                        return None;
                    }
                    self.pointer_arith(current, value, op, span)?
                } else {
                    let aop = arith_op(op)?;
                    let int_only = matches!(
                        aop,
                        ArithOp::Rem
                            | ArithOp::And
                            | ArithOp::Or
                            | ArithOp::Xor
                            | ArithOp::Shl
                            | ArithOp::Shr
                    );
                    if (int_only && (!ty.is_int() || !value.ty.is_int())) || !value.ty.is_arith() {
                        self.error(
                            span,
                            format!(
                                "cannot apply `{}=` to `{ty}` and `{}`",
                                op.symbol(),
                                value.ty
                            ),
                        );
                        return None;
                    }
                    let opty = if matches!(aop, ArithOp::Shl | ArithOp::Shr) {
                        ty.promoted()
                    } else {
                        common_type(&ty, &value.ty)
                    };
                    let r = Expr::new(
                        E::Arith(
                            aop,
                            Box::new(convert(current, &opty)),
                            Box::new(convert(value, &opty)),
                        ),
                        opty,
                    );
                    convert(r, &ty)
                };
                combined
            }
        };
        Some(Expr::new(
            E::Assign {
                place: Box::new(place),
                value: Box::new(value),
            },
            ty,
        ))
    }

    pub(super) fn cond(
        &mut self,
        c: &ast::Expr,
        a: &ast::Expr,
        b: &ast::Expr,
        span: Span,
    ) -> Option<Expr> {
        let c = self.condition(c);
        let x = self.expr(a);
        let y = self.expr(b);
        let (c, x, y) = (c?, x?, y?);
        let ty = match (&x.ty, &y.ty) {
            (p, q) if p.is_arith() && q.is_arith() => common_type(p, q),
            (Type::Void, Type::Void) => Type::Void,
            (p @ Type::Ptr(_), q) if p == q => p.clone(),
            (p @ Type::Ptr(_), _) if is_null_constant(&y) => p.clone(),
            (_, q @ Type::Ptr(_)) if is_null_constant(&x) => q.clone(),
            (p, q) => {
                self.error(
                    span,
                    format!("the two branches of `?:` have different types, `{p}` and `{q}`"),
                );
                return None;
            }
        };
        let (x, y) = (convert(x, &ty), convert(y, &ty));
        Some(Expr::new(
            E::Cond(Box::new(c), Box::new(x), Box::new(y)),
            ty,
        ))
    }

    pub(super) fn call(&mut self, f: &ast::Expr, args: &[ast::Expr], span: Span) -> Option<Expr> {
        let binding = match &f.kind {
            A::Name(name) => match self.env.lookup(name) {
                Some(b) => b,
                None => {
                    // Reuse the unknown-name diagnostic.
                    let _ = self.place(f);
                    for a in args {
                        let _ = self.value(a);
                    }
                    return None;
                }
            },
            _ => {
                let _ = self.expr(f);
                self.error(f.span, "only named functions can be called");
                return None;
            }
        };
        let name = match &f.kind {
            A::Name(n) => n.as_str(),
            _ => "",
        };
        let (addr, sig) = match binding {
            Binding::Func { addr, sig } => (addr, sig),
            Binding::Var { ty, .. } => {
                self.diags.push(
                    Diagnostic::error(
                        f.span,
                        format!("`{name}` is a variable of type `{ty}`, not a function"),
                    )
                    .with_hint("only the mutatee's functions can be called"),
                );
                return None;
            }
        };
        let values: Vec<Option<Expr>> = args.iter().map(|a| self.value(a)).collect();
        let mut out = Vec::new();
        let params = sig.params.clone();
        if let Some(params) = &params {
            let n = params.len();
            if args.len() < n || (args.len() > n && !sig.variadic) {
                let expected = if sig.variadic {
                    format!("at least {n}")
                } else {
                    n.to_string()
                };
                self.error(
                    span,
                    format!(
                        "`{name}` takes {expected} argument{}, but {} were given",
                        if n == 1 { "" } else { "s" },
                        args.len()
                    ),
                );
                return None;
            }
        }
        for (i, (v, a)) in values.into_iter().zip(args).enumerate() {
            let v = v?;
            let param = params.as_ref().and_then(|p| p.get(i));
            let v = match param {
                Some(pt) => self.assign_convert(v, pt, a.span)?,
                // Default argument promotions, for `...` and unprototyped functions.
                None => {
                    let ty = v.ty.promoted();
                    convert(v, &ty)
                }
            };
            out.push(v);
        }
        if let Some(at) = sig.printf_format {
            self.check_printf_format(name, at, &out, args);
        }
        if !sig.ret.is_scalar() && sig.ret != Type::Void {
            self.error(
                span,
                format!(
                    "`{name}` returns `{}`, which snippets cannot receive",
                    sig.ret
                ),
            );
            return None;
        }
        Some(Expr::new(E::Call { addr, args: out }, sig.ret))
    }
}

/// Folds negation and `~` of constants so `-1` is an immediate.
fn fold_unary(op: UnaryOp, v: Expr, ty: Type) -> Expr {
    match (op, &v.kind) {
        (UnaryOp::Neg, E::Int(x)) => Expr::int(wrap(x.wrapping_neg(), &ty), ty),
        (UnaryOp::BitNot, E::Int(x)) => Expr::int(wrap(!x, &ty), ty),
        (UnaryOp::Neg, E::Float(f)) => Expr::new(E::Float(-f), ty),
        _ => Expr::new(E::Unary(op, Box::new(v)), ty),
    }
}

fn fold_arith(op: ArithOp, x: Expr, y: Expr, ty: Type) -> Expr {
    Expr::new(E::Arith(op, Box::new(x), Box::new(y)), ty)
}
