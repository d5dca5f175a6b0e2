//! The snippet syntax tree, exactly as written: every node carries the byte span of its text,
//! and nothing refers to a process, a binary or a type layout. Names are plain strings here;
//! [`super::check`] resolves them against an environment and produces the typed tree in
//! [`super::ir`].

/// A byte range `[start, end)` in the snippet source.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Span {
    pub start: usize,
    pub end: usize,
}

impl Span {
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
    Char,
    UChar,
    Short,
    UShort,
    Int,
    UInt,
    Long,
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
    Void,
    Int(IntKind),
    Double,
    /// `struct NAME`, laid out by the environment.
    Struct(String),
}

/// A type as written in a cast or a declaration: a base and a number of `*`s.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TypeExpr {
    pub base: BaseType,
    pub pointers: u32,
    pub span: Span,
}

/// Unary operators. Increments and decrements are here too, prefix and postfix.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum UnOp {
    Neg,
    Plus,
    Not,
    BitNot,
    Deref,
    AddrOf,
    PreInc,
    PreDec,
    PostInc,
    PostDec,
}

/// Binary operators, including the short-circuit ones.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum BinOp {
    Add,
    Sub,
    Mul,
    Div,
    Rem,
    Shl,
    Shr,
    BitAnd,
    BitOr,
    BitXor,
    Eq,
    Ne,
    Lt,
    Le,
    Gt,
    Ge,
    LogAnd,
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
    pub value: u64,
    /// Written in decimal (decimal literals never become unsigned without a `u`).
    pub decimal: bool,
    pub unsigned: bool,
    pub long: bool,
}

#[derive(Clone, Debug, PartialEq)]
pub enum ExprKind {
    Int(IntLit),
    Float(f64),
    /// A character literal: type `int`, value of the (signed) `char`.
    Char(u8),
    Str(Vec<u8>),
    Name(String),
    /// `$0`, `$return`, `$function`, ... (without the `$`).
    Special(String),
    Unary(UnOp, Box<Expr>),
    Binary(BinOp, Box<Expr>, Box<Expr>),
    /// `a = b` (`None`) or `a op= b`.
    Assign(Option<BinOp>, Box<Expr>, Box<Expr>),
    Cond(Box<Expr>, Box<Expr>, Box<Expr>),
    Cast(TypeExpr, Box<Expr>),
    Call(Box<Expr>, Vec<Expr>),
    Index(Box<Expr>, Box<Expr>),
    /// `a.field` (`arrow == false`) or `a->field`.
    Member {
        base: Box<Expr>,
        field: String,
        field_span: Span,
        arrow: bool,
    },
    /// `sizeof(TYPE)`.
    SizeofType(TypeExpr),
    /// Stands where the parser found no expression; a diagnostic says why.
    Error,
}

#[derive(Clone, Debug, PartialEq)]
pub struct Expr {
    pub kind: ExprKind,
    pub span: Span,
}

#[derive(Clone, Debug, PartialEq)]
pub enum StmtKind {
    Expr(Expr),
    If {
        cond: Expr,
        then: Box<Stmt>,
        otherwise: Option<Box<Stmt>>,
    },
    Block(Vec<Stmt>),
    /// A lone `;`.
    Empty,
    /// A statement the parser could not read; a diagnostic says why.
    Error,
}

#[derive(Clone, Debug, PartialEq)]
pub struct Stmt {
    pub kind: StmtKind,
    pub span: Span,
}

/// A whole snippet: the statements between the braces of `at POINT { ... }`.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Program {
    pub stmts: Vec<Stmt>,
}
