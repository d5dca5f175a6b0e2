//! Name resolution and type checking: an [`ast::Program`] and an [`Env`] in, an
//! [`ir::Program`] and diagnostics out. C's rules apply (integer promotions, the usual
//! arithmetic conversions, pointer arithmetic scaled by the pointee size); the checker makes
//! every conversion explicit so later stages never re-derive them. Every error is reported
//! (checking continues after one), and a program is returned only when there were none.

use super::abi;
use super::ast::{self, BaseType, BinOp, ExprKind as A, IntLit, Span, StmtKind, UnOp};
use super::diag::{did_you_mean, Diagnostic};
use super::env::{Binding, Env, PointKind, VarPlace};
use super::ir::{self, wrap, ArithOp, CmpOp, Expr, ExprKind as E, Place, PlaceKind, UnaryOp};
use super::types::{common_type, IntKind, Type};

/// Point constants that `$NAME` may name.
const SPECIALS: [&str; 10] = [
    "return", "function", "module", "file", "line", "callee", "loop", "id", "tid", "0",
];

/// Checks a parsed snippet against `env`.
pub fn check(program: &ast::Program, env: &dyn Env) -> (Option<ir::Program>, Vec<Diagnostic>) {
    let mut c = Checker {
        env,
        diags: Vec::new(),
        strings: Vec::new(),
    };
    let stmts = c.stmts(&program.stmts);
    let ok = !c.diags.iter().any(Diagnostic::is_error);
    let program = ok.then_some(ir::Program {
        stmts,
        strings: c.strings,
    });
    (program, c.diags)
}

/// A checked expression and the string literals it uses.
pub type CheckedExpr = (Expr, Vec<Vec<u8>>);

/// Checks a single expression (for `print EXPR`), returning its typed tree.
pub fn check_expr(expr: &ast::Expr, env: &dyn Env) -> (Option<CheckedExpr>, Vec<Diagnostic>) {
    let mut c = Checker {
        env,
        diags: Vec::new(),
        strings: Vec::new(),
    };
    let e = c.value(expr);
    let ok = !c.diags.iter().any(Diagnostic::is_error);
    (e.filter(|_| ok).map(|e| (e, c.strings)), c.diags)
}

/// Resolves a written type. `void` alone is allowed only where `allow_void`.
pub fn resolve_type(t: &ast::TypeExpr, env: &dyn Env) -> Result<Type, Diagnostic> {
    let mut ty = match &t.base {
        BaseType::Void => Type::Void,
        BaseType::Int(k) => Type::Int(*k),
        BaseType::Double => Type::Double,
        BaseType::Struct(name) => match env.struct_layout(name) {
            Some(layout) => Type::Struct {
                name: name.clone(),
                size: layout.size,
            },
            None => {
                return Err(
                    Diagnostic::error(t.span, format!("unknown type `struct {name}`"))
                        .with_hint("struct layouts come from the mutatee's debug info"),
                )
            }
        },
    };
    for _ in 0..t.pointers {
        ty = Type::ptr(ty);
    }
    Ok(ty)
}

struct Checker<'a> {
    env: &'a dyn Env,
    diags: Vec<Diagnostic>,
    strings: Vec<Vec<u8>>,
}

fn arith_op(op: BinOp) -> Option<ArithOp> {
    Some(match op {
        BinOp::Add => ArithOp::Add,
        BinOp::Sub => ArithOp::Sub,
        BinOp::Mul => ArithOp::Mul,
        BinOp::Div => ArithOp::Div,
        BinOp::Rem => ArithOp::Rem,
        BinOp::BitAnd => ArithOp::And,
        BinOp::BitOr => ArithOp::Or,
        BinOp::BitXor => ArithOp::Xor,
        BinOp::Shl => ArithOp::Shl,
        BinOp::Shr => ArithOp::Shr,
        _ => return None,
    })
}

fn cmp_op(op: BinOp) -> Option<CmpOp> {
    Some(match op {
        BinOp::Eq => CmpOp::Eq,
        BinOp::Ne => CmpOp::Ne,
        BinOp::Lt => CmpOp::Lt,
        BinOp::Le => CmpOp::Le,
        BinOp::Gt => CmpOp::Gt,
        BinOp::Ge => CmpOp::Ge,
        _ => return None,
    })
}

/// Converts `e` to `to` (no checks: callers decided the conversion is allowed).
fn convert(e: Expr, to: &Type) -> Expr {
    if e.ty == *to {
        return e;
    }
    match e.kind {
        // Fold constant integer conversions so literals stay immediates.
        E::Int(v) if to.is_int() || to.is_ptr() => Expr::int(wrap(v, to), to.clone()),
        E::Int(v) if *to == Type::Double => {
            let f = match &e.ty {
                Type::Int(k) if k.signed() => v as i64 as f64,
                _ => v as f64,
            };
            Expr::new(E::Float(f), Type::Double)
        }
        kind => Expr::new(E::Convert(Box::new(Expr { kind, ty: e.ty })), to.clone()),
    }
}

fn is_null_constant(e: &Expr) -> bool {
    matches!(e.kind, E::Int(0)) && e.ty.is_int()
}

impl Checker<'_> {
    fn error(&mut self, span: Span, message: impl Into<String>) {
        self.diags.push(Diagnostic::error(span, message));
    }

    fn stmts(&mut self, stmts: &[ast::Stmt]) -> Vec<ir::Stmt> {
        stmts.iter().flat_map(|s| self.stmt(s)).collect()
    }

    fn stmt(&mut self, s: &ast::Stmt) -> Vec<ir::Stmt> {
        match &s.kind {
            StmtKind::Expr(e) => {
                let Some(v) = self.expr(e) else {
                    return Vec::new();
                };
                if !v.has_effects() && v.ty != Type::Void {
                    self.diags.push(
                        Diagnostic::warning(e.span, "this statement has no effect")
                            .with_hint("assign the value, e.g. `n = ...;`"),
                    );
                }
                vec![ir::Stmt::Expr(v)]
            }
            StmtKind::If {
                cond,
                then,
                otherwise,
            } => {
                let c = self.condition(cond);
                let t = self.stmt(then);
                let o = otherwise.as_ref().map(|o| self.stmt(o)).unwrap_or_default();
                c.map(|c| vec![ir::Stmt::If(c, t, o)]).unwrap_or_default()
            }
            StmtKind::Block(stmts) => self.stmts(stmts),
            StmtKind::Empty | StmtKind::Error => Vec::new(),
        }
    }

    /// A scalar used as a truth value.
    fn condition(&mut self, e: &ast::Expr) -> Option<Expr> {
        let v = self.value(e)?;
        if !v.ty.is_scalar() {
            self.error(
                e.span,
                format!("a condition must be a number or a pointer, not `{}`", v.ty),
            );
            return None;
        }
        Some(v)
    }

    /// An expression whose value is used: not `void`, arrays decayed, not a struct.
    fn value(&mut self, e: &ast::Expr) -> Option<Expr> {
        let v = self.expr(e)?;
        match &v.ty {
            Type::Void => {
                self.error(e.span, "this expression has no value (it is `void`)");
                None
            }
            Type::Struct { name, .. } => {
                self.diags.push(
                    Diagnostic::error(
                        e.span,
                        format!("a whole `struct {name}` cannot be used as a value"),
                    )
                    .with_hint("use one of its fields with `.` or `->`"),
                );
                None
            }
            _ => Some(v),
        }
    }

    /// An arithmetic value (integer or double).
    fn arith_value(&mut self, e: &ast::Expr, what: &str) -> Option<Expr> {
        let v = self.value(e)?;
        if !v.ty.is_arith() {
            self.error(e.span, format!("{what} needs a number, not `{}`", v.ty));
            return None;
        }
        Some(v)
    }

    fn int_value(&mut self, e: &ast::Expr, what: &str) -> Option<Expr> {
        let v = self.value(e)?;
        if !v.ty.is_int() {
            self.error(e.span, format!("{what} needs an integer, not `{}`", v.ty));
            return None;
        }
        Some(v)
    }

    fn expr(&mut self, e: &ast::Expr) -> Option<Expr> {
        match &e.kind {
            A::Int(lit) => Some(int_literal(*lit)),
            A::Float(f) => Some(Expr::new(E::Float(*f), Type::Double)),
            A::Char(c) => Some(Expr::int(*c as i8 as i64 as u64, Type::INT)),
            A::Str(s) => Some(self.string(s.clone())),
            A::Name(_) | A::Special(_) | A::Index(..) | A::Member { .. } => {
                if let A::Name(name) = &e.kind {
                    if let Some(Binding::Func { .. }) = self.env.lookup(name) {
                        self.diags.push(
                            Diagnostic::error(e.span, format!("`{name}` is a function"))
                                .with_hint(format!("call it: `{name}(...)`")),
                        );
                        return None;
                    }
                }
                if let A::Special(s) = &e.kind {
                    if let Some(v) = self.special_constant(s, e.span) {
                        return v;
                    }
                }
                let place = self.place(e)?;
                Some(self.load(place))
            }
            A::Unary(op, x) => self.unary(*op, x, e.span),
            A::Binary(op, a, b) => self.binary(*op, a, b, e.span),
            A::Assign(op, lhs, rhs) => self.assign(*op, lhs, rhs, e.span),
            A::Cond(c, a, b) => self.cond(c, a, b, e.span),
            A::Cast(t, x) => {
                let to = match resolve_type(t, self.env) {
                    Ok(t) => t,
                    Err(d) => {
                        self.diags.push(d);
                        return None;
                    }
                };
                if to == Type::Void {
                    let v = self.expr(x)?;
                    return Some(Expr::new(E::Convert(Box::new(v)), Type::Void));
                }
                let v = self.value(x)?;
                if !to.is_scalar() {
                    self.error(t.span, format!("cannot cast to `{to}`"));
                    return None;
                }
                if (to == Type::Double && v.ty.is_ptr()) || (to.is_ptr() && v.ty == Type::Double) {
                    self.error(e.span, format!("cannot cast `{}` to `{to}`", v.ty));
                    return None;
                }
                Some(convert(v, &to))
            }
            A::Call(f, args) => self.call(f, args, e.span),
            A::SizeofType(t) => match resolve_type(t, self.env) {
                Ok(ty) => Some(Expr::int(ty.size(), Type::ULONG)),
                Err(d) => {
                    self.diags.push(d);
                    None
                }
            },
            A::Error => None,
        }
    }

    fn string(&mut self, s: Vec<u8>) -> Expr {
        let idx = match self.strings.iter().position(|x| *x == s) {
            Some(i) => i,
            None => {
                self.strings.push(s);
                self.strings.len() - 1
            }
        };
        Expr::new(E::Str(idx), Type::char_ptr())
    }

    /// `$function` and the other point constants. `None` when `name` denotes storage
    /// (`$0`, `$return`), handled by [`Checker::place`].
    fn special_constant(&mut self, name: &str, span: Span) -> Option<Option<Expr>> {
        let point = self.env.point().clone();
        let missing = |what: &str, hint: &str| {
            Diagnostic::error(span, format!("`${name}` is only available {what}"))
                .with_hint(hint.to_string())
        };
        let e = match name {
            "function" => self.string(point.function.into_bytes()),
            "module" => self.string(point.module.into_bytes()),
            "file" => match point.file {
                Some(f) => self.string(f.into_bytes()),
                None => {
                    self.diags
                        .push(missing("with debug info", "the point has no source file"));
                    return Some(None);
                }
            },
            "line" => match point.line {
                Some(l) => Expr::int(u64::from(l), Type::INT),
                None => {
                    self.diags
                        .push(missing("with debug info", "the point has no source line"));
                    return Some(None);
                }
            },
            "callee" => match point.callee {
                Some(c) => self.string(c.into_bytes()),
                None => {
                    self.diags.push(missing(
                        "at call points",
                        "use `at FUNC call CALLEE before`",
                    ));
                    return Some(None);
                }
            },
            "loop" => match point.loop_name {
                Some(l) => self.string(l.into_bytes()),
                None => {
                    self.diags
                        .push(missing("at loop points", "use `at FUNC loop LOOP entry`"));
                    return Some(None);
                }
            },
            "id" => Expr::int(u64::from(point.id), Type::INT),
            "tid" => Expr::new(E::Tid, Type::INT),
            _ => return None,
        };
        Some(Some(e))
    }

    fn load(&mut self, place: Place) -> Expr {
        match &place.ty {
            // Arrays decay to a pointer to their first element.
            Type::Array(elem, _) => {
                let ty = Type::ptr((**elem).clone());
                Expr::new(E::AddrOf(Box::new(place)), ty)
            }
            _ => {
                let ty = place.ty.clone();
                Expr::new(E::Load(Box::new(place)), ty)
            }
        }
    }

    /// An lvalue.
    fn place(&mut self, e: &ast::Expr) -> Option<Place> {
        match &e.kind {
            A::Name(name) => match self.env.lookup(name) {
                Some(Binding::Var { ty, place }) => Some(Place {
                    kind: match place {
                        VarPlace::Absolute(a) => PlaceKind::Absolute(a),
                        VarPlace::Saved(o) => PlaceKind::Saved(o),
                    },
                    ty,
                }),
                Some(Binding::Func { .. }) => {
                    self.error(e.span, format!("`{name}` is a function, not a variable"));
                    None
                }
                None => {
                    let names = self.env.names();
                    let mut d = Diagnostic::error(e.span, format!("unknown name `{name}`"));
                    if let Some(hint) = did_you_mean(name, names.iter().map(String::as_str)) {
                        d = d.with_hint(hint);
                    } else {
                        d = d.with_hint("declare it first: `declare long NAME`");
                    }
                    self.diags.push(d);
                    None
                }
            },
            A::Special(name) => self.special_place(name, e.span),
            A::Unary(UnOp::Deref, p) => {
                let ptr = self.value(p)?;
                self.deref(ptr, 0, e.span)
            }
            A::Index(base, index) => {
                let ptr = self.pointer_add(base, index, BinOp::Add, e.span)?;
                self.deref(ptr, 0, e.span)
            }
            A::Member {
                base,
                field,
                field_span,
                arrow,
            } => {
                let (struct_ty, place_of) = if *arrow {
                    let p = self.value(base)?;
                    match p.ty.pointee().cloned() {
                        Some(t @ Type::Struct { .. }) => (t, Err(p)),
                        _ => {
                            self.error(
                                base.span,
                                format!("`->` needs a pointer to a struct, not `{}`", p.ty),
                            );
                            return None;
                        }
                    }
                } else {
                    let place = self.place(base)?;
                    match place.ty.clone() {
                        t @ Type::Struct { .. } => (t, Ok(place)),
                        other => {
                            let mut d = Diagnostic::error(
                                base.span,
                                format!("`.` needs a struct, not `{other}`"),
                            );
                            if other
                                .pointee()
                                .is_some_and(|t| matches!(t, Type::Struct { .. }))
                            {
                                d = d.with_hint("use `->` on a pointer");
                            }
                            self.diags.push(d);
                            return None;
                        }
                    }
                };
                let Type::Struct { name, .. } = &struct_ty else {
                    return None;
                };
                let layout = self.env.struct_layout(name)?;
                let Some(f) = layout.fields.iter().find(|f| f.name == *field) else {
                    let mut d = Diagnostic::error(
                        *field_span,
                        format!("`struct {name}` has no field `{field}`"),
                    );
                    if let Some(h) =
                        did_you_mean(field, layout.fields.iter().map(|f| f.name.as_str()))
                    {
                        d = d.with_hint(h);
                    }
                    self.diags.push(d);
                    return None;
                };
                let offset = f.offset as i64;
                let kind = match place_of {
                    Err(ptr) => PlaceKind::Deref(Box::new(ptr), offset),
                    Ok(Place {
                        kind: PlaceKind::Absolute(a),
                        ..
                    }) => PlaceKind::Absolute(a.wrapping_add(offset as u64)),
                    Ok(Place {
                        kind: PlaceKind::Saved(o),
                        ..
                    }) => PlaceKind::Saved(o + offset as u32),
                    Ok(Place {
                        kind: PlaceKind::Deref(p, o),
                        ..
                    }) => PlaceKind::Deref(p, o + offset),
                };
                Some(Place {
                    kind,
                    ty: f.ty.clone(),
                })
            }
            _ => {
                // Check it anyway, for its own diagnostics.
                if self.expr(e).is_some() {
                    self.error(
                        e.span,
                        "this is not something that can be assigned or addressed",
                    );
                }
                None
            }
        }
    }

    fn deref(&mut self, ptr: Expr, offset: i64, span: Span) -> Option<Place> {
        match ptr.ty.pointee().cloned() {
            Some(Type::Void) => {
                self.diags.push(
                    Diagnostic::error(span, "cannot dereference a `void *`")
                        .with_hint("cast it first, e.g. `*(long *)p`"),
                );
                None
            }
            Some(ty) => Some(Place {
                kind: PlaceKind::Deref(Box::new(ptr), offset),
                ty,
            }),
            None => {
                self.error(
                    span,
                    format!("cannot dereference `{}`, which is not a pointer", ptr.ty),
                );
                None
            }
        }
    }

    /// `$0..$5` and `$return`: slots of the saved-register block.
    fn special_place(&mut self, name: &str, span: Span) -> Option<Place> {
        let point = self.env.point().clone();
        if let Ok(n) = name.parse::<u32>() {
            if n > 5 {
                self.diags.push(
                    Diagnostic::error(span, format!("`${n}` does not exist"))
                        .with_hint("`$0`..`$5` are the six integer argument registers"),
                );
                return None;
            }
            if !matches!(
                point.kind,
                PointKind::Entry | PointKind::CallBefore | PointKind::Other
            ) {
                self.diags.push(
                    Diagnostic::error(
                        span,
                        format!("`${n}` is only available at entry points and before calls"),
                    )
                    .with_hint("the argument registers hold other values here"),
                );
                return None;
            }
            return Some(Place {
                kind: PlaceKind::Saved(abi::arg_offset(n)),
                ty: Type::LONG,
            });
        }
        if name == "return" {
            if !matches!(point.kind, PointKind::Exit | PointKind::CallAfter) {
                self.diags.push(
                    Diagnostic::error(span, "`$return` is only available at exit points")
                        .with_hint("use `at FUNC exit` or `at FUNC call ... after`"),
                );
                return None;
            }
            let ty = point.return_type.unwrap_or(Type::LONG);
            let offset = match ty {
                Type::Double => abi::xmm_offset(0),
                Type::Int(_) | Type::Ptr(_) => abi::RAX_OFFSET,
                other => {
                    self.error(
                        span,
                        format!("`$return` has type `{other}`, which snippets cannot read"),
                    );
                    return None;
                }
            };
            return Some(Place {
                kind: PlaceKind::Saved(offset),
                ty,
            });
        }
        let mut d = Diagnostic::error(span, format!("unknown special name `${name}`"));
        if let Some(h) = did_you_mean(name, SPECIALS.iter().copied()) {
            d = d.with_hint(h.replacen('`', "`$", 1));
        } else {
            d = d.with_hint(
                "specials are $0..$5 $return $function $module $file $line $callee $loop $id $tid",
            );
        }
        self.diags.push(d);
        None
    }

    fn unary(&mut self, op: UnOp, x: &ast::Expr, span: Span) -> Option<Expr> {
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
                let place = self.place(x)?;
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
    fn pointer_add(
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

    fn pointer_arith(&mut self, a: Expr, b: Expr, op: BinOp, span: Span) -> Option<Expr> {
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

    fn binary(&mut self, op: BinOp, a: &ast::Expr, b: &ast::Expr, span: Span) -> Option<Expr> {
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

    fn compare(&mut self, cmp: CmpOp, x: Expr, y: Expr, op: BinOp, span: Span) -> Option<Expr> {
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
    fn assign_convert(&mut self, v: Expr, to: &Type, span: Span) -> Option<Expr> {
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

    fn assign(
        &mut self,
        op: Option<BinOp>,
        lhs: &ast::Expr,
        rhs: &ast::Expr,
        span: Span,
    ) -> Option<Expr> {
        let place = self.place(lhs);
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

    fn cond(&mut self, c: &ast::Expr, a: &ast::Expr, b: &ast::Expr, span: Span) -> Option<Expr> {
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

    fn call(&mut self, f: &ast::Expr, args: &[ast::Expr], span: Span) -> Option<Expr> {
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

/// The C type of an integer literal: the first of int, (unsigned int for non-decimal), long,
/// unsigned long that holds the value, respecting `u` and `l` suffixes.
fn int_literal(lit: IntLit) -> Expr {
    let v = lit.value;
    let candidates: &[IntKind] = match (lit.unsigned, lit.long, lit.decimal) {
        (false, false, true) => &[IntKind::Int, IntKind::Long, IntKind::ULong],
        (false, false, false) => &[IntKind::Int, IntKind::UInt, IntKind::Long, IntKind::ULong],
        (true, false, _) => &[IntKind::UInt, IntKind::ULong],
        (false, true, true) => &[IntKind::Long, IntKind::ULong],
        (false, true, false) => &[IntKind::Long, IntKind::ULong],
        (true, true, _) => &[IntKind::ULong],
    };
    let fits = |k: IntKind| match k {
        IntKind::Int => v <= i32::MAX as u64,
        IntKind::UInt => v <= u32::MAX as u64,
        IntKind::Long => v <= i64::MAX as u64,
        _ => true,
    };
    let kind = candidates
        .iter()
        .copied()
        .find(|&k| fits(k))
        .unwrap_or(IntKind::ULong);
    Expr::int(v, Type::Int(kind))
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
