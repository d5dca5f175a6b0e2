//! Name resolution and type checking: an [`ast::Program`] and an [`Env`] in, an
//! [`ir::Program`] and diagnostics out. C's rules apply (integer promotions, the usual
//! arithmetic conversions, pointer arithmetic scaled by the pointee size); the checker makes
//! every conversion explicit so later stages never re-derive them. Every error is reported
//! (checking continues after one), and a program is returned only when there were none.

use super::ast::{self, BaseType, BinOp, ExprKind as A, IntLit, Span, StmtKind};
use super::diag::Diagnostic;
use super::env::{Binding, Env, PointKind};
use super::ir::{self, wrap, ArithOp, CmpOp, Expr, ExprKind as E, Place};
use super::types::{IntKind, Type};

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
        writing: false,
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
        writing: false,
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

mod format;
mod ops;
mod places;

struct Checker<'a> {
    env: &'a dyn Env,
    diags: Vec<Diagnostic>,
    strings: Vec<Vec<u8>>,
    /// The place being checked is written (assigned, incremented), so an unknown name there
    /// is most likely a variable the user meant to `declare`.
    writing: bool,
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

/// The reserved names of gsh's runtime operations (see [`ir::Stmt::Rt`]), in gsh's own
/// snippets only. All arguments are integer literals:
///
/// - `__gsh_rt_count(SLOT, TLS_OFFSET, THREAD_FN)`, and the same for `__gsh_rt_time_enter` and
///   `__gsh_rt_time_exit`;
/// - `__gsh_rt_call(FUNC, SAVE, SLOT, TLS_OFFSET, THREAD_FN)`, `SAVE` an `xmm` mask, or
///   `0x10000` for all vector state;
/// - each with a last argument `DESC` (and `TLS_OFFSET`, `THREAD_FN` 0) for a rewritten binary:
///   the runtime is found through the measuring descriptor at `DESC`, and `FUNC` is the
///   address of the cell holding the function;
/// - each in a long form ending `TLS_OFFSET, THREAD_FN, DESC, FRAME` (`DESC` 0 in a live
///   process, `TLS_OFFSET` and `THREAD_FN` 0 in a rewritten binary): `FRAME` (an `i32`, as
///   its 64-bit two's complement) is added to the point's `rsp` to give the frame the
///   activation is keyed by (see [`ir::Stmt::Rt`]);
/// - `__gsh_rt_path_enter`, `__gsh_rt_path_count` and `__gsh_rt_path_exit(FUNC, SAVE,
///   TSC_MULT, SHADOW_OFFSET, PATHS_OFFSET, UNWIND_COUNT, SLOT, TLS_OFFSET, THREAD_FN)`
///   (live processes only): a call-path event done inline when it can, else by calling FUNC
///   as `__gsh_rt_call` would (see [`ir::RtOp::Path`]);
/// - `__gsh_cov_hit(COUNTER)`: a block-coverage probe, `COUNTER` the counter's address.
pub const RT_NAMES: [&str; 8] = [
    "__gsh_rt_count",
    "__gsh_rt_time_enter",
    "__gsh_rt_time_exit",
    "__gsh_rt_call",
    "__gsh_rt_path_enter",
    "__gsh_rt_path_count",
    "__gsh_rt_path_exit",
    "__gsh_cov_hit",
];

/// `SAVE` of `__gsh_rt_call` asking for all vector state.
pub const RT_SAVE_FULL: u64 = 0x1_0000;

fn rt_name(e: &ast::Expr) -> Option<&str> {
    match &e.kind {
        A::Call(f, _) => match &f.kind {
            A::Name(n) => RT_NAMES.iter().find(|r| **r == n.as_str()).copied(),
            _ => None,
        },
        _ => None,
    }
}

impl Checker<'_> {
    fn rt_op(&mut self, e: &ast::Expr, name: &str) -> Option<ir::Stmt> {
        if !self.env.point().internal {
            self.diags.push(
                Diagnostic::error(e.span, format!("`{name}` is reserved for gsh"))
                    .with_hint("use the `count`, `time` or `profile` commands to measure"),
            );
            return None;
        }
        let A::Call(_, args) = &e.kind else {
            return None;
        };
        let lits: Vec<u64> = args
            .iter()
            .filter_map(|a| match &a.kind {
                A::Int(l) => Some(l.value),
                _ => None,
            })
            .collect();
        if name == "__gsh_cov_hit" {
            return match lits[..] {
                [counter] if args.len() == 1 => Some(ir::Stmt::Hit(counter)),
                _ => {
                    self.error(e.span, format!("`{name}` takes the counter's address"));
                    None
                }
            };
        }
        let path = match name {
            "__gsh_rt_path_enter" => Some(ir::PathEvent::Enter),
            "__gsh_rt_path_count" => Some(ir::PathEvent::Count),
            "__gsh_rt_path_exit" => Some(ir::PathEvent::Exit),
            _ => None,
        };
        let head_len = match (name, path) {
            ("__gsh_rt_call", _) => 2,
            (_, Some(_)) => 6,
            _ => 0,
        };
        let (head, rest) = lits.split_at(head_len.min(lits.len()));
        let wrong = |this: &mut Self| {
            this.error(
                e.span,
                format!("`{name}`: wrong arguments for gsh's runtime operation"),
            );
        };
        if lits.len() != args.len() {
            wrong(self);
            return None;
        }
        let (slot, access, frame) = match *rest {
            [slot, tls, thread] | [slot, tls, thread, 0, _] => (
                slot,
                ir::RtAccess::Direct {
                    tls_offset: tls as i64,
                    thread_fn: thread,
                },
                rest.get(4).copied().unwrap_or(0),
            ),
            [slot, 0, 0, desc] | [slot, 0, 0, desc, _] if desc != 0 => (
                slot,
                ir::RtAccess::Descriptor(desc),
                rest.get(4).copied().unwrap_or(0),
            ),
            _ => {
                wrong(self);
                return None;
            }
        };
        // FRAME is an i32, written as its 64-bit two's complement.
        let Ok(frame) = i32::try_from(frame as i64) else {
            self.error(e.span, format!("frame offset {frame:#x} is out of range"));
            return None;
        };
        let Ok(slot) = u32::try_from(slot) else {
            self.error(e.span, format!("slot {slot} is too large"));
            return None;
        };
        let func = |f: u64| match access {
            ir::RtAccess::Direct { .. } => ir::RtFunc::Addr(f),
            ir::RtAccess::Descriptor(_) => ir::RtFunc::Cell(f),
        };
        let save = |s: u64| {
            if s == RT_SAVE_FULL {
                ir::VectorSaving::Full
            } else {
                ir::VectorSaving::Xmm(s as u16)
            }
        };
        let op = match (name, head) {
            (_, &[f, s, tsc_mult, shadow, paths, unwind_count]) if path.is_some() => {
                let (Ok(shadow_offset), Ok(paths_offset)) =
                    (u32::try_from(shadow), u32::try_from(paths))
                else {
                    self.error(e.span, format!("`{name}`: offsets out of range"));
                    return None;
                };
                if !matches!(access, ir::RtAccess::Direct { .. }) {
                    self.error(e.span, format!("`{name}` needs a live process's runtime"));
                    return None;
                }
                ir::RtOp::Path {
                    event: path.unwrap_or(ir::PathEvent::Enter),
                    func: func(f),
                    save: save(s),
                    layout: ir::PathLayout {
                        tsc_mult,
                        shadow_offset,
                        paths_offset,
                        unwind_count,
                    },
                }
            }
            ("__gsh_rt_count", _) => ir::RtOp::Count,
            ("__gsh_rt_time_enter", _) => ir::RtOp::TimeEnter,
            ("__gsh_rt_time_exit", _) => ir::RtOp::TimeExit,
            ("__gsh_rt_call", &[f, s]) => ir::RtOp::Call {
                func: func(f),
                save: save(s),
            },
            _ => {
                self.error(e.span, format!("`{name}`: wrong arguments before SLOT"));
                return None;
            }
        };
        Some(ir::Stmt::Rt {
            op,
            slot,
            access,
            frame,
        })
    }

    fn error(&mut self, span: Span, message: impl Into<String>) {
        self.diags.push(Diagnostic::error(span, message));
    }

    fn stmts(&mut self, stmts: &[ast::Stmt]) -> Vec<ir::Stmt> {
        stmts.iter().flat_map(|s| self.stmt(s)).collect()
    }

    fn stmt(&mut self, s: &ast::Stmt) -> Vec<ir::Stmt> {
        match &s.kind {
            StmtKind::Expr(e) if rt_name(e).is_some() => {
                let name = rt_name(e).unwrap_or_default();
                self.rt_op(e, name).into_iter().collect()
            }
            StmtKind::Expr(e) => {
                let Some(v) = self.expr(e) else {
                    return Vec::new();
                };
                // A struct is never loaded as a whole: nothing downstream (the interpreter's
                // machine, the code generator) moves more than 8 bytes at once.
                if let Type::Struct { name, .. } = &v.ty {
                    self.diags.push(
                        Diagnostic::error(
                            e.span,
                            format!("a whole `struct {name}` cannot be used as a value"),
                        )
                        .with_hint("use one of its fields with `.` or `->`"),
                    );
                    return Vec::new();
                }
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
                    self.diags.push(missing(
                        "where the debug info gives a source line",
                        "this point has none: compile with `-g`",
                    ));
                    return Some(None);
                }
            },
            "line" => match point.line {
                Some(l) => Expr::int(u64::from(l), Type::INT),
                None => {
                    self.diags.push(missing(
                        "where the debug info gives a source line",
                        "this point has none: compile with `-g`",
                    ));
                    return Some(None);
                }
            },
            "callee" => match point.callee {
                Some(c) => self.string(c.into_bytes()),
                None if matches!(point.kind, PointKind::CallBefore | PointKind::CallAfter) => {
                    self.diags.push(
                        Diagnostic::error(span, "`$callee` is not known at this point").with_hint(
                            "the call is indirect, so which function it calls is not known",
                        ),
                    );
                    return Some(None);
                }
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
