//! The types the checker and code generator work with, and C's conversion rules over them
//! (integer promotions and the usual arithmetic conversions), with sizes from the SysV x86-64
//! ABI.

use std::fmt;

pub use super::ast::IntKind;

/// A snippet type. Structs are named, not expanded, so self-referential layouts (`struct node
/// { struct node *next; }`) cost nothing; the environment lays them out on demand.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Type {
    /// `void`: only as a return type or a pointee.
    Void,
    /// An integer type (`char` to `unsigned long`).
    Int(IntKind),
    /// `double`; `float` is not a snippet type.
    Double,
    /// A pointer to the type.
    Ptr(Box<Type>),
    /// A fixed-size array (from DWARF); in expressions it decays to a pointer to its element.
    Array(Box<Type>, u64),
    /// `struct NAME`, with the size the environment gave.
    Struct {
        /// The struct's tag, without `struct`.
        name: String,
        /// Its size in bytes.
        size: u64,
    },
}

impl Type {
    /// `int`.
    pub const INT: Type = Type::Int(IntKind::Int);
    /// `long`.
    pub const LONG: Type = Type::Int(IntKind::Long);
    /// `unsigned long`.
    pub const ULONG: Type = Type::Int(IntKind::ULong);

    /// A pointer to `to`.
    pub fn ptr(to: Type) -> Type {
        Type::Ptr(Box::new(to))
    }

    /// `char *`, the type of string literals and string constants such as `$function`.
    pub fn char_ptr() -> Type {
        Type::ptr(Type::Int(IntKind::Char))
    }

    /// Size in bytes (`void` counts 1, as GNU C does for pointer arithmetic).
    pub fn size(&self) -> u64 {
        match self {
            Type::Void => 1,
            Type::Int(k) => u64::from(k.size()),
            Type::Double | Type::Ptr(_) => 8,
            Type::Array(elem, n) => elem.size().saturating_mul(*n),
            Type::Struct { size, .. } => *size,
        }
    }

    /// True for integer types.
    pub fn is_int(&self) -> bool {
        matches!(self, Type::Int(_))
    }

    /// True for integers and `double`: what arithmetic takes.
    pub fn is_arith(&self) -> bool {
        matches!(self, Type::Int(_) | Type::Double)
    }

    /// True for pointers (not arrays, which decay to them in expressions).
    pub fn is_ptr(&self) -> bool {
        matches!(self, Type::Ptr(_))
    }

    /// Integers, doubles and pointers: what a condition, a register or a call argument holds.
    pub fn is_scalar(&self) -> bool {
        matches!(self, Type::Int(_) | Type::Double | Type::Ptr(_))
    }

    /// The pointed-to type of a pointer.
    pub fn pointee(&self) -> Option<&Type> {
        match self {
            Type::Ptr(t) => Some(t),
            _ => None,
        }
    }

    /// C's integer promotions: narrower than `int` becomes `int`.
    pub fn promoted(&self) -> Type {
        match self {
            Type::Int(k) if k.size() < 4 => Type::INT,
            other => other.clone(),
        }
    }

    /// The C spelling, for diagnostics.
    pub fn c_name(&self) -> String {
        match self {
            Type::Void => "void".into(),
            Type::Int(k) => k.c_name().into(),
            Type::Double => "double".into(),
            Type::Ptr(t) => match **t {
                Type::Ptr(_) => format!("{}*", t.c_name()),
                _ => format!("{} *", t.c_name()),
            },
            Type::Array(t, n) => format!("{}[{n}]", t.c_name()),
            Type::Struct { name, .. } => format!("struct {name}"),
        }
    }
}

impl fmt::Display for Type {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.c_name())
    }
}

/// C's usual arithmetic conversions: the common type of two arithmetic operands.
pub fn common_type(a: &Type, b: &Type) -> Type {
    if *a == Type::Double || *b == Type::Double {
        return Type::Double;
    }
    let (Type::Int(x), Type::Int(y)) = (a.promoted(), b.promoted()) else {
        return Type::LONG;
    };
    if x == y {
        return Type::Int(x);
    }
    if x.signed() == y.signed() {
        return Type::Int(if x.rank() >= y.rank() { x } else { y });
    }
    let (s, u) = if x.signed() { (x, y) } else { (y, x) };
    if u.rank() >= s.rank() {
        Type::Int(u)
    } else if s.size() > u.size() {
        // The signed type holds every value of the unsigned one (long vs unsigned int).
        Type::Int(s)
    } else {
        Type::Int(s.to_unsigned())
    }
}

/// A struct layout, as DWARF gives it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StructLayout {
    /// The struct's tag, without `struct`.
    pub name: String,
    /// Its size in bytes.
    pub size: u64,
    /// Its members, in declaration order.
    pub fields: Vec<Field>,
}

/// A member of a struct. Bit-fields are not offered (the environment leaves them out).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Field {
    /// The member's name.
    pub name: String,
    /// Its byte offset from the start of the struct.
    pub offset: u64,
    /// Its snippet type.
    pub ty: Type,
}

/// A function's signature. `params: None` means unprototyped (e.g. a function known only
/// from `.dynsym`): every argument then gets C's default argument promotions.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FnSig {
    /// The return type (`void` for none).
    pub ret: Type,
    /// The parameter types; `None` when unprototyped.
    pub params: Option<Vec<Type>>,
    /// True when it takes `...` after its parameters.
    pub variadic: bool,
    /// The parameter (0-based) holding a printf-style format that the variadic arguments
    /// must match, as GCC's `__attribute__((format(printf, N, N+1)))` says.
    pub printf_format: Option<usize>,
}

impl FnSig {
    /// A prototype with no format string.
    pub fn new(ret: Type, params: Vec<Type>, variadic: bool) -> FnSig {
        FnSig {
            ret,
            params: Some(params),
            variadic,
            printf_format: None,
        }
    }
}
