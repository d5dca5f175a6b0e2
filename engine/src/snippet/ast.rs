//! The snippet syntax tree, exactly as written: every node carries the byte span of its text,
//! and nothing refers to a process, a binary or a type layout. Names are plain strings here;
//! [`super::check`] resolves them against an environment and produces the typed tree in
//! [`super::ir`].

/// A byte range `[start, end)` in the snippet source.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Span {
    /// Offset of its first byte.
    pub start: usize,
    /// Offset one past its last byte.
    pub end: usize,
}

impl Span {
    /// The span `[start, end)`.
    pub fn new(start: usize, end: usize) -> Span {
        Span { start, end }
    }

    /// The smallest span covering both.
    pub fn to(self, other: Span) -> Span {
        Span::new(self.start.min(other.start), self.end.max(other.end))
    }
}

/// The integer types, named by what C calls them on x86-64 (SysV: `char` is signed, `int` is
/// 32 bits, `long` is 64). `signed char` is `Char` and `long long` is `Long`, because they
/// behave identically here.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum IntKind {
    /// `char` (signed, 1 byte); also `signed char`.
    Char,
    /// `unsigned char` (1 byte).
    UChar,
    /// `short` (2 bytes).
    Short,
    /// `unsigned short` (2 bytes).
    UShort,
    /// `int` (4 bytes).
    Int,
    /// `unsigned int` (4 bytes).
    UInt,
    /// `long` (8 bytes); also `long long`.
    Long,
    /// `unsigned long` (8 bytes); also `unsigned long long`.
    ULong,
}

impl IntKind {
    /// All kinds, narrowest first.
    pub const ALL: [IntKind; 8] = [
        IntKind::Char,
        IntKind::UChar,
        IntKind::Short,
        IntKind::UShort,
        IntKind::Int,
        IntKind::UInt,
        IntKind::Long,
        IntKind::ULong,
    ];

    /// Size in bytes.
    pub fn size(self) -> u32 {
        match self {
            IntKind::Char | IntKind::UChar => 1,
            IntKind::Short | IntKind::UShort => 2,
            IntKind::Int | IntKind::UInt => 4,
            IntKind::Long | IntKind::ULong => 8,
        }
    }

    /// True for `char`, `short`, `int` and `long`.
    pub fn signed(self) -> bool {
        matches!(
            self,
            IntKind::Char | IntKind::Short | IntKind::Int | IntKind::Long
        )
    }

    /// C's integer conversion rank, for the usual arithmetic conversions.
    pub fn rank(self) -> u32 {
        self.size()
    }

    /// The unsigned type of the same rank.
    pub fn to_unsigned(self) -> IntKind {
        match self {
            IntKind::Char | IntKind::UChar => IntKind::UChar,
            IntKind::Short | IntKind::UShort => IntKind::UShort,
            IntKind::Int | IntKind::UInt => IntKind::UInt,
            IntKind::Long | IntKind::ULong => IntKind::ULong,
        }
    }

    /// How C spells it.
    pub fn c_name(self) -> &'static str {
        match self {
            IntKind::Char => "char",
            IntKind::UChar => "unsigned char",
            IntKind::Short => "short",
            IntKind::UShort => "unsigned short",
            IntKind::Int => "int",
            IntKind::UInt => "unsigned int",
            IntKind::Long => "long",
            IntKind::ULong => "unsigned long",
        }
    }
}

/// The base of a written type, before its `*`s.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum BaseType {
    /// `void`.
    Void,
    /// An integer type.
    Int(IntKind),
    /// `double`.
    Double,
    /// `struct NAME`, laid out by the environment.
    Struct(String),
}

/// A type as written in a cast or a declaration: a base and a number of `*`s.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TypeExpr {
    /// The type before its `*`s.
    pub base: BaseType,
    /// How many `*`s follow it (0 for the base type itself).
    pub pointers: u32,
    /// Where the type is written.
    pub span: Span,
}

/// Unary operators. Increments and decrements are here too, prefix and postfix.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum UnOp {
    /// `-x`.
    Neg,
    /// `+x`.
    Plus,
    /// `!x`: 1 when `x` is zero, else 0.
    Not,
    /// `~x`.
    BitNot,
    /// `*p`.
    Deref,
    /// `&x`.
    AddrOf,
    /// `++x`: the new value.
    PreInc,
    /// `--x`: the new value.
    PreDec,
    /// `x++`: the old value.
    PostInc,
    /// `x--`: the old value.
    PostDec,
}

/// Binary operators, including the short-circuit ones.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum BinOp {
    /// `+` (with pointer arithmetic).
    Add,
    /// `-` (with pointer arithmetic and pointer differences).
    Sub,
    /// `*`.
    Mul,
    /// `/`, truncating toward zero on integers.
    Div,
    /// `%`.
    Rem,
    /// `<<`.
    Shl,
    /// `>>`: arithmetic on signed operands, logical on unsigned ones.
    Shr,
    /// `&`.
    BitAnd,
    /// `|`.
    BitOr,
    /// `^`.
    BitXor,
    /// `==`.
    Eq,
    /// `!=`.
    Ne,
    /// `<`.
    Lt,
    /// `<=`.
    Le,
    /// `>`.
    Gt,
    /// `>=`.
    Ge,
    /// `&&`, evaluating its right side only when the left is true.
    LogAnd,
    /// `||`, evaluating its right side only when the left is false.
    LogOr,
}

impl BinOp {
    /// The operator as written.
    pub fn symbol(self) -> &'static str {
        match self {
            BinOp::Add => "+",
            BinOp::Sub => "-",
            BinOp::Mul => "*",
            BinOp::Div => "/",
            BinOp::Rem => "%",
            BinOp::Shl => "<<",
            BinOp::Shr => ">>",
            BinOp::BitAnd => "&",
            BinOp::BitOr => "|",
            BinOp::BitXor => "^",
            BinOp::Eq => "==",
            BinOp::Ne => "!=",
            BinOp::Lt => "<",
            BinOp::Le => "<=",
            BinOp::Gt => ">",
            BinOp::Ge => ">=",
            BinOp::LogAnd => "&&",
            BinOp::LogOr => "||",
        }
    }

    /// True for `==`, `!=`, `<`, `<=`, `>`, `>=`, whose result is an `int` 0 or 1.
    pub fn is_comparison(self) -> bool {
        matches!(
            self,
            BinOp::Eq | BinOp::Ne | BinOp::Lt | BinOp::Le | BinOp::Gt | BinOp::Ge
        )
    }
}

/// An integer literal as written; its C type is decided by the checker from the value, the
/// base and the suffix.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct IntLit {
    /// Its value; a literal too large for 64 bits is diagnosed by the lexer.
    pub value: u64,
    /// Written in decimal (decimal literals never become unsigned without a `u`).
    pub decimal: bool,
    /// Has a `u` or `U` suffix.
    pub unsigned: bool,
    /// Has an `l`/`L` (or `ll`) suffix.
    pub long: bool,
}

#[derive(Clone, Debug, PartialEq)]
/// What an expression is, as written.
pub enum ExprKind {
    /// An integer literal.
    Int(IntLit),
    /// A floating-point literal (type `double`).
    Float(f64),
    /// A character literal: type `int`, value of the (signed) `char`.
    Char(u8),
    /// A string literal's bytes, without the terminating NUL; type `char *`.
    Str(Vec<u8>),
    /// A name: a variable, a parameter or a function.
    Name(String),
    /// `$0`, `$return`, `$function`, ... (without the `$`).
    Special(String),
    /// A unary operator and its operand.
    Unary(UnOp, Box<Expr>),
    /// A binary operator and its left and right operands.
    Binary(BinOp, Box<Expr>, Box<Expr>),
    /// `a = b` (`None`) or `a op= b`.
    Assign(Option<BinOp>, Box<Expr>, Box<Expr>),
    /// `c ? a : b`.
    Cond(Box<Expr>, Box<Expr>, Box<Expr>),
    /// `(TYPE) x`.
    Cast(TypeExpr, Box<Expr>),
    /// `f(args)`: the callee and its arguments.
    Call(Box<Expr>, Vec<Expr>),
    /// `a[i]`.
    Index(Box<Expr>, Box<Expr>),
    /// `a.field` (`arrow == false`) or `a->field`.
    Member {
        /// The struct or pointer it is taken of.
        base: Box<Expr>,
        /// The member's name.
        field: String,
        /// Where the member's name is, for diagnostics.
        field_span: Span,
        /// True for `->`.
        arrow: bool,
    },
    /// `sizeof(TYPE)`.
    SizeofType(TypeExpr),
    /// Stands where the parser found no expression; a diagnostic says why.
    Error,
}

#[derive(Clone, Debug, PartialEq)]
/// An expression and where it is written.
pub struct Expr {
    /// What it is.
    pub kind: ExprKind,
    /// Its text's byte range.
    pub span: Span,
}

#[derive(Clone, Debug, PartialEq)]
/// What a statement is.
pub enum StmtKind {
    /// An expression evaluated for its effects: `x = 1;`, `f();`.
    Expr(Expr),
    /// `if (cond) then [else otherwise]`.
    If {
        /// The condition, a scalar compared with zero.
        cond: Expr,
        /// Run when the condition is true.
        then: Box<Stmt>,
        /// Run when it is false, if there is an `else`.
        otherwise: Option<Box<Stmt>>,
    },
    /// `{ ... }`.
    Block(Vec<Stmt>),
    /// A lone `;`.
    Empty,
    /// A statement the parser could not read; a diagnostic says why.
    Error,
}

#[derive(Clone, Debug, PartialEq)]
/// A statement and where it is written.
pub struct Stmt {
    /// What it is.
    pub kind: StmtKind,
    /// Its text's byte range.
    pub span: Span,
}

/// A whole snippet: the statements between the braces of `at POINT { ... }`.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Program {
    /// The statements, in order.
    pub stmts: Vec<Stmt>,
}
