//! The reference interpreter: runs a checked program over an abstract [`Machine`]. It defines
//! what snippets mean, and the differential tests hold the generated machine code to it.
//!
//! Semantics beyond (or instead of) C's undefined behaviour — the code generator implements
//! exactly these:
//! - Evaluation is left to right: operands, arguments, and for assignments the place's address
//!   before the value.
//! - Signed overflow wraps (two's complement); conversions to narrower integers wrap.
//! - `x / 0` and `x % 0` are 0; `MIN / -1` wraps to `MIN` and `MIN % -1` is 0. Nothing traps.
//! - Shift counts are masked to the width of the (promoted) left operand, as x86 does: `x << n`
//!   is `x << (n & 31)` for `int`-sized and `x << (n & 63)` for `long`-sized operands.
//! - `double` to integer goes through a 64-bit truncating conversion (`cvttsd2si`): NaN and
//!   values outside the `long` range give `LONG_MIN`, then the result wraps to the target
//!   width. `unsigned long` targets take values up to 2^64 exactly.

use super::ir::{
    wrap, ArithOp, CmpOp, Expr, ExprKind as E, Place, PlaceKind, Program, Stmt, UnaryOp,
};
use super::types::{IntKind, Type};

/// A runtime value: integers and pointers as the 64-bit register value (sign- or
/// zero-extended from the type's width), doubles as themselves.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Value {
    /// An integer or pointer, as a 64-bit register holds it.
    Int(u64),
    /// A `double`.
    Double(f64),
}

impl Value {
    fn int(self) -> u64 {
        match self {
            Value::Int(v) => v,
            Value::Double(f) => f.to_bits(),
        }
    }

    fn double(self) -> f64 {
        match self {
            Value::Double(f) => f,
            Value::Int(v) => f64::from_bits(v),
        }
    }

    fn truth(self) -> bool {
        match self {
            Value::Int(v) => v != 0,
            #[allow(clippy::float_cmp)]
            Value::Double(f) => f != 0.0,
        }
    }
}

/// A storage address: in memory, or in the saved-register block.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Addr {
    /// A runtime address in the process's memory.
    Mem(u64),
    /// A byte offset in the saved-register block (see [`super::abi::SavedRegs`]).
    Saved(u32),
}

/// What the interpreter needs from the world.
pub trait Machine {
    /// Reads `size` (1, 2, 4 or 8) bytes, little-endian, zero-extended.
    fn read(&mut self, addr: Addr, size: u32) -> Result<u64, String>;
    /// Writes the low `size` (1, 2, 4 or 8) bytes of `bits`, little-endian.
    fn write(&mut self, addr: Addr, size: u32, bits: u64) -> Result<(), String>;
    /// The address string literal `index` lives at.
    fn string_addr(&mut self, index: usize) -> u64;
    /// Calls the mutatee function at `addr`.
    fn call(&mut self, addr: u64, args: &[(Value, Type)], ret: &Type) -> Result<Value, String>;
    /// `$tid`: the calling thread's id.
    fn tid(&mut self) -> u64;
}

/// Runs `program`. Errors come only from the machine (e.g. a bad address).
pub fn run(program: &Program, m: &mut dyn Machine) -> Result<(), String> {
    let mut i = Interp {
        m,
        current: Vec::new(),
    };
    i.stmts(&program.stmts)
}

/// Evaluates one expression.
pub fn eval(expr: &Expr, m: &mut dyn Machine) -> Result<Value, String> {
    Interp {
        m,
        current: Vec::new(),
    }
    .expr(expr)
}

struct Interp<'a> {
    m: &'a mut dyn Machine,
    /// The places of the enclosing assignments, innermost last, for `Current`.
    current: Vec<(Addr, Type)>,
}

/// 2^63 as a double.
pub const TWO_63: f64 = 9_223_372_036_854_775_808.0;

/// `cvttsd2si` with a 64-bit destination.
pub fn cvtt(f: f64) -> u64 {
    if !(-TWO_63..TWO_63).contains(&f) {
        i64::MIN as u64
    } else {
        f.trunc() as i64 as u64
    }
}

/// Converts a value of type `from` to type `to`.
pub fn convert(v: Value, from: &Type, to: &Type) -> Value {
    match (from, to) {
        (_, Type::Void) => v,
        (Type::Double, Type::Double) => v,
        (Type::Double, _) => {
            let f = v.double();
            let bits = if *to == Type::ULONG && f >= TWO_63 {
                cvtt(f - TWO_63) ^ (1 << 63)
            } else {
                cvtt(f)
            };
            Value::Int(wrap(bits, to))
        }
        (Type::Int(k), Type::Double) => Value::Double(if k.signed() {
            v.int() as i64 as f64
        } else {
            v.int() as f64
        }),
        (_, Type::Double) => Value::Double(v.int() as f64),
        _ => Value::Int(wrap(v.int(), to)),
    }
}

fn signed(ty: &Type) -> bool {
    matches!(ty, Type::Int(k) if k.signed())
}

/// Integer arithmetic on operands of type `ty` (int, unsigned, long or unsigned long).
pub fn int_arith(op: ArithOp, x: u64, y: u64, ty: &Type) -> u64 {
    let width = if ty.size() == 8 { 64 } else { 32 };
    let s = signed(ty);
    let r = match op {
        ArithOp::Add => x.wrapping_add(y),
        ArithOp::Sub => x.wrapping_sub(y),
        ArithOp::Mul => x.wrapping_mul(y),
        ArithOp::And => x & y,
        ArithOp::Or => x | y,
        ArithOp::Xor => x ^ y,
        ArithOp::Div | ArithOp::Rem if y == 0 => 0,
        ArithOp::Div if s => (x as i64).wrapping_div(y as i64) as u64,
        ArithOp::Rem if s => (x as i64).wrapping_rem(y as i64) as u64,
        ArithOp::Div => x / y,
        ArithOp::Rem => x % y,
        ArithOp::Shl => x << (y & (width - 1)),
        ArithOp::Shr if s => ((x as i64) >> (y & (width - 1))) as u64,
        ArithOp::Shr => x >> (y & (width - 1)),
    };
    wrap(r, ty)
}

fn compare(op: CmpOp, x: Value, y: Value, ty: &Type) -> bool {
    use std::cmp::Ordering;
    let ord = match ty {
        Type::Double => x.double().partial_cmp(&y.double()),
        t if signed(t) => Some((x.int() as i64).cmp(&(y.int() as i64))),
        _ => Some(x.int().cmp(&y.int())),
    };
    match (op, ord) {
        (CmpOp::Ne, None) => true,
        (_, None) => false,
        (CmpOp::Eq, Some(o)) => o == Ordering::Equal,
        (CmpOp::Ne, Some(o)) => o != Ordering::Equal,
        (CmpOp::Lt, Some(o)) => o == Ordering::Less,
        (CmpOp::Le, Some(o)) => o != Ordering::Greater,
        (CmpOp::Gt, Some(o)) => o == Ordering::Greater,
        (CmpOp::Ge, Some(o)) => o != Ordering::Less,
    }
}

impl Interp<'_> {
    fn stmts(&mut self, stmts: &[Stmt]) -> Result<(), String> {
        for s in stmts {
            match s {
                Stmt::Expr(e) => {
                    self.expr(e)?;
                }
                Stmt::If(c, t, o) => {
                    if self.expr(c)?.truth() {
                        self.stmts(t)?;
                    } else {
                        self.stmts(o)?;
                    }
                }
                Stmt::Rt { .. } | Stmt::Hit(_) => {
                    return Err("gsh's runtime operations run only in a process".into());
                }
            }
        }
        Ok(())
    }

    fn addr(&mut self, p: &Place) -> Result<Addr, String> {
        Ok(match &p.kind {
            PlaceKind::Absolute(a) => Addr::Mem(*a),
            PlaceKind::Saved(o) => Addr::Saved(*o),
            PlaceKind::Deref(ptr, off) => {
                Addr::Mem(self.expr(ptr)?.int().wrapping_add(*off as u64))
            }
        })
    }

    fn load(&mut self, a: Addr, ty: &Type) -> Result<Value, String> {
        let size = ty.size() as u32;
        let bits = self.m.read(a, size)?;
        Ok(match ty {
            Type::Double => Value::Double(f64::from_bits(bits)),
            _ => Value::Int(wrap(bits, ty)),
        })
    }

    fn store(&mut self, a: Addr, ty: &Type, v: Value) -> Result<(), String> {
        self.m.write(a, ty.size() as u32, v.int())
    }

    fn expr(&mut self, e: &Expr) -> Result<Value, String> {
        Ok(match &e.kind {
            E::Int(v) => Value::Int(*v),
            E::Float(f) => Value::Double(*f),
            E::Str(i) => Value::Int(self.m.string_addr(*i)),
            E::Load(p) => {
                let a = self.addr(p)?;
                self.load(a, &p.ty)?
            }
            E::AddrOf(p) => match self.addr(p)? {
                Addr::Mem(a) => Value::Int(a),
                Addr::Saved(_) => return Err("address of a saved register".into()),
            },
            E::Current => {
                let (a, ty) = self
                    .current
                    .last()
                    .cloned()
                    .ok_or("`Current` outside an assignment")?;
                self.load(a, &ty)?
            }
            E::Assign { place, value } => {
                let a = self.addr(place)?;
                self.current.push((a, place.ty.clone()));
                let v = self.expr(value);
                self.current.pop();
                let v = v?;
                self.store(a, &place.ty, v)?;
                v
            }
            E::IncDec { place, delta, post } => {
                let a = self.addr(place)?;
                let old = self.load(a, &place.ty)?;
                let new = match &place.ty {
                    Type::Double => Value::Double(old.double() + *delta as f64),
                    ty => Value::Int(wrap(old.int().wrapping_add(*delta as u64), ty)),
                };
                self.store(a, &place.ty, new)?;
                if *post {
                    old
                } else {
                    new
                }
            }
            E::Unary(op, x) => {
                let v = self.expr(x)?;
                match (op, &e.ty) {
                    (UnaryOp::Not, _) => Value::Int(u64::from(!v.truth())),
                    (UnaryOp::Neg, Type::Double) => Value::Double(-v.double()),
                    (UnaryOp::Neg, ty) => Value::Int(wrap(v.int().wrapping_neg(), ty)),
                    (UnaryOp::BitNot, ty) => Value::Int(wrap(!v.int(), ty)),
                }
            }
            E::Arith(op, x, y) => {
                let a = self.expr(x)?;
                let b = self.expr(y)?;
                if e.ty == Type::Double {
                    let (a, b) = (a.double(), b.double());
                    Value::Double(match op {
                        ArithOp::Add => a + b,
                        ArithOp::Sub => a - b,
                        ArithOp::Mul => a * b,
                        ArithOp::Div => a / b,
                        _ => return Err(format!("{op:?} on doubles")),
                    })
                } else {
                    Value::Int(int_arith(*op, a.int(), b.int(), &e.ty))
                }
            }
            E::Compare(op, x, y) => {
                let a = self.expr(x)?;
                let b = self.expr(y)?;
                Value::Int(u64::from(compare(*op, a, b, &x.ty)))
            }
            E::PtrAdd(p, i, scale) => {
                let a = self.expr(p)?.int();
                let b = self.expr(i)?.int();
                Value::Int(a.wrapping_add(b.wrapping_mul(*scale)))
            }
            E::PtrDiff(p, q, scale) => {
                let a = self.expr(p)?.int();
                let b = self.expr(q)?.int();
                Value::Int(int_arith(
                    ArithOp::Div,
                    a.wrapping_sub(b),
                    *scale,
                    &Type::LONG,
                ))
            }
            E::LogAnd(x, y) => {
                Value::Int(u64::from(self.expr(x)?.truth() && self.expr(y)?.truth()))
            }
            E::LogOr(x, y) => Value::Int(u64::from(self.expr(x)?.truth() || self.expr(y)?.truth())),
            E::Cond(c, x, y) => {
                if self.expr(c)?.truth() {
                    self.expr(x)?
                } else {
                    self.expr(y)?
                }
            }
            E::Convert(x) => {
                let v = self.expr(x)?;
                convert(v, &x.ty, &e.ty)
            }
            E::Call { addr, args } => {
                let mut vals = Vec::new();
                for a in args {
                    vals.push((self.expr(a)?, a.ty.clone()));
                }
                let r = self.m.call(*addr, &vals, &e.ty)?;
                match &e.ty {
                    Type::Double | Type::Void => r,
                    ty => Value::Int(wrap(r.int(), ty)),
                }
            }
            E::Tid => Value::Int(wrap(self.m.tid(), &Type::Int(IntKind::Int))),
        })
    }
}
