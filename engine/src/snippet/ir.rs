//! The checked program: a typed tree in which every name is resolved to storage, every
//! implicit C conversion is an explicit [`ExprKind::Convert`], and both operands of an
//! arithmetic operator have the operator's type. The code generator lowers it directly (it is
//! straight-line code with branches, so a tree is the simplest IR), and the reference
//! interpreter runs it; neither needs to know C's conversion rules.

use super::types::Type;

/// A checked snippet.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Program {
    /// The statements, in order.
    pub stmts: Vec<Stmt>,
    /// String literals, in the order [`ExprKind::Str`] indexes them; NUL-terminated by codegen.
    pub strings: Vec<Vec<u8>>,
}

#[derive(Clone, Debug, PartialEq)]
/// A checked statement.
pub enum Stmt {
    /// Evaluated for its side effects; the value is dropped.
    Expr(Expr),
    /// `cond` is a scalar: true when not zero (for doubles: not `0.0`, so NaN is true).
    If(Expr, Vec<Stmt>, Vec<Stmt>),
    /// One of gsh's own measuring operations (`count`, `time`, `profile`), never written by
    /// users: it acts on the calling thread's `gsh-rt` block (see `rt/LAYOUT.md` and
    /// [`crate::snippet::codegen`]'s `rt` module). A thread without a block yet gets one first,
    /// with every register the runtime may change saved around the call.
    Rt {
        /// What to do.
        op: RtOp,
        /// The runtime slot it acts on (the measure's index in the thread block).
        slot: u32,
        /// How the code finds the runtime.
        access: RtAccess,
        /// Added to the point's `rsp` to give the activation's frame, which timers and call
        /// paths key their open activations by: 0 at a function's entry and exits; at a
        /// loop's points, what makes it the same value at every point of one activation of
        /// the loop (`instrument::loops`' frame key).
        frame: i32,
    },
    /// gsh's block-coverage probe, never written by users: one `inc qword` of the counter at
    /// this absolute address (RIP-relative when near; `rt-abi`'s `descriptor::UNPROBED`
    /// explains the counters).
    Hit(u64),
}

/// What an [`Stmt::Rt`] does to its slot.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RtOp {
    /// `count++`, inline.
    Count,
    /// Opens a wall-clock activation, inline: counts, and unless an outer activation of the
    /// same slot is still open on this thread, records the TSC and the stack pointer.
    TimeEnter,
    /// Closes the activation whose stack pointer matches, adding the elapsed TSC ticks.
    TimeExit,
    /// Calls a runtime function `f(slot, sp, rbp)`, where `sp` and `rbp` are the values at the
    /// point, saving every general register the call may change and the vector state `save`
    /// names.
    Call {
        /// The runtime function called.
        func: RtFunc,
        /// The vector state saved around the call.
        save: VectorSaving,
    },
    /// A call-path profile's event (`profile`, wall time on the TSC): inline when the
    /// thread's walk memo applies (`rt-abi`'s `WalkMemo`) or, at an exit, when the shadow
    /// stack's top is this activation; otherwise the [`RtOp::Call`] of `func` (the runtime's
    /// `_tsc` entry point for the same event), which gives the same result the long way.
    Path {
        /// Which event.
        event: PathEvent,
        /// The runtime function called when the inline path does not apply.
        func: RtFunc,
        /// The vector state saved around that call.
        save: VectorSaving,
        /// The runtime's layout, which the inline path reads.
        layout: PathLayout,
    },
}

/// Which call-path event an [`RtOp::Path`] is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PathEvent {
    /// `gsh_rt_path_enter_tsc`: count the path and open a timed activation.
    Enter,
    /// `gsh_rt_path_count_tsc`: count the path only.
    Count,
    /// `gsh_rt_path_exit_tsc`: close the activation, crediting its path record.
    Exit,
}

/// What generated code needs of the loaded runtime to profile inline: fixed when the runtime
/// is initialised (`Root`'s fields).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PathLayout {
    /// `Root::tsc_mult`: nanoseconds per TSC tick, 32.32 fixed point.
    pub tsc_mult: u64,
    /// `Root::shadow_offset`: the shadow stack in a thread block (the walk memo follows it at
    /// `rt-abi`'s `memo_offset`).
    pub shadow_offset: u32,
    /// `Root::paths_offset`: the path records in a thread block.
    pub paths_offset: u32,
    /// The runtime address of `Root::unwind_count`.
    pub unwind_count: u64,
}

/// How the generated code finds the runtime.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RtAccess {
    /// Known when the code is generated (a live process): the `fs`-relative offset of the TLS
    /// word holding the thread's block, and `gsh_rt_thread`'s address.
    Direct {
        /// The `fs`-relative offset of the TLS word holding the thread's block.
        tls_offset: i64,
        /// `gsh_rt_thread`'s runtime address.
        thread_fn: u64,
    },
    /// Read at run time from a measuring descriptor at this address (a rewritten binary): the
    /// TLS offset (0 when the runtime is not loaded: the operation is skipped) and
    /// `gsh_rt_thread`, at `gsh_rt_abi::descriptor`'s `TLS_OFFSET_AT` and `THREAD_FN_AT`.
    Descriptor(u64),
}

/// The runtime function an [`RtOp::Call`] calls.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RtFunc {
    /// The function's runtime address.
    Addr(u64),
    /// The address of a cell holding the function's address (a descriptor's `fns[k]`).
    Cell(u64),
}

/// The vector state saved around an [`RtOp::Call`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum VectorSaving {
    /// These `xmm` registers' low 128 bits (bit N = `xmmN`): enough for a callee proven to use
    /// only legacy-SSE encodings, which leave the upper halves alone.
    Xmm(u16),
    /// All of it (`xsave64`).
    Full,
}

#[derive(Clone, Debug, PartialEq)]
/// A checked expression: what it computes and the type of its value.
pub struct Expr {
    /// What it computes.
    pub kind: ExprKind,
    /// Its value's type, after every conversion.
    pub ty: Type,
}

/// Where a value lives.
#[derive(Clone, Debug, PartialEq)]
pub enum PlaceKind {
    /// A fixed runtime address.
    Absolute(u64),
    /// A byte offset into the saved-register block.
    Saved(u32),
    /// `*(ptr + offset)`, `ptr` a pointer-typed expression.
    Deref(Box<Expr>, i64),
}

/// An lvalue: storage of type `ty`.
#[derive(Clone, Debug, PartialEq)]
pub struct Place {
    /// Where it is.
    pub kind: PlaceKind,
    /// The type stored there.
    pub ty: Type,
}

/// Arithmetic on two operands of the expression's type (an integer type of rank `int` or
/// more, or `double`). For shifts, the count was converted to the left operand's type.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ArithOp {
    /// `+`.
    Add,
    /// `-`.
    Sub,
    /// `*`.
    Mul,
    /// `/`, truncating toward zero on integers.
    Div,
    /// `%`.
    Rem,
    /// `&`.
    And,
    /// `|`.
    Or,
    /// `^`.
    Xor,
    /// `<<`.
    Shl,
    /// `>>`: arithmetic for a signed type, logical for an unsigned one.
    Shr,
}

/// A comparison of two operands of the same type (integer, double or pointer); yields `int`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CmpOp {
    /// `==`.
    Eq,
    /// `!=`.
    Ne,
    /// `<` (unsigned for unsigned types and pointers).
    Lt,
    /// `<=`.
    Le,
    /// `>`.
    Gt,
    /// `>=`.
    Ge,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
/// Unary operators on a checked operand.
pub enum UnaryOp {
    /// Two's-complement (or IEEE) negation of an operand of the expression's type.
    Neg,
    /// `~`, on an operand of the expression's (integer) type.
    BitNot,
    /// `!`: 1 when the scalar operand is zero, else 0; yields `int`.
    Not,
}

#[derive(Clone, Debug, PartialEq)]
/// What a checked expression computes.
pub enum ExprKind {
    /// An integer or pointer constant, already wrapped to the expression's type.
    Int(u64),
    /// A `double` constant.
    Float(f64),
    /// The address of string literal number N.
    Str(usize),
    /// The value stored in a place.
    Load(Box<Place>),
    /// The address of a place.
    AddrOf(Box<Place>),
    /// Stores `value` (of the place's type) into the place and yields it. The place's address
    /// is computed first, once; [`ExprKind::Current`] inside `value` reads the place.
    Assign {
        /// Where to store.
        place: Box<Place>,
        /// What to store.
        value: Box<Expr>,
    },
    /// Inside an `Assign`'s value: the place's value, read when evaluation reaches it.
    Current,
    /// `++`/`--`: adds `delta` (already scaled for pointers, `±1.0` for doubles) to the place;
    /// yields the old value when `post`, the new one otherwise.
    IncDec {
        /// The place changed.
        place: Box<Place>,
        /// What is added to it.
        delta: i64,
        /// True for `x++`/`x--`.
        post: bool,
    },
    /// A unary operator on an operand.
    Unary(UnaryOp, Box<Expr>),
    /// Arithmetic on two operands of the expression's type.
    Arith(ArithOp, Box<Expr>, Box<Expr>),
    /// A comparison; yields `int` 0 or 1.
    Compare(CmpOp, Box<Expr>, Box<Expr>),
    /// `ptr + index * scale` with `index` a `long`.
    PtrAdd(Box<Expr>, Box<Expr>, u64),
    /// `(a - b) / scale` of two pointers; yields `long`.
    PtrDiff(Box<Expr>, Box<Expr>, u64),
    /// Short-circuit `&&` and `||` of scalars; yield `int` 0 or 1.
    LogAnd(Box<Expr>, Box<Expr>),
    /// Short-circuit `||`: the right side runs only when the left is zero.
    LogOr(Box<Expr>, Box<Expr>),
    /// `c ? a : b`; `a` and `b` already have the expression's type.
    Cond(Box<Expr>, Box<Expr>, Box<Expr>),
    /// Converts the operand to the expression's type.
    Convert(Box<Expr>),
    /// Calls the function at `addr`; arguments already converted (and promoted for `...`).
    Call {
        /// The callee's runtime address.
        addr: u64,
        /// The arguments, in order, each of its parameter's type.
        args: Vec<Expr>,
    },
    /// The calling thread's id (`gettid`).
    Tid,
}

impl Expr {
    /// An expression computing `kind`, of type `ty`.
    pub fn new(kind: ExprKind, ty: Type) -> Expr {
        Expr { kind, ty }
    }

    /// The integer constant `value` of type `ty` (wrap it with [`wrap`] first when it may not fit).
    pub fn int(value: u64, ty: Type) -> Expr {
        Expr::new(ExprKind::Int(value), ty)
    }

    /// Does evaluating this have effects beyond computing a value?
    pub fn has_effects(&self) -> bool {
        use ExprKind::*;
        match &self.kind {
            Int(_) | Float(_) | Str(_) | Current | Tid => false,
            Assign { .. } | IncDec { .. } | Call { .. } => true,
            Load(p) | AddrOf(p) => p.has_effects(),
            Unary(_, a) | Convert(a) => a.has_effects(),
            Arith(_, a, b)
            | Compare(_, a, b)
            | PtrAdd(a, b, _)
            | PtrDiff(a, b, _)
            | LogAnd(a, b)
            | LogOr(a, b) => a.has_effects() || b.has_effects(),
            Cond(c, a, b) => c.has_effects() || a.has_effects() || b.has_effects(),
        }
    }
}

impl Place {
    /// True when computing the address has effects (a `Deref` of an expression that has them).
    pub fn has_effects(&self) -> bool {
        match &self.kind {
            PlaceKind::Deref(p, _) => p.has_effects(),
            _ => false,
        }
    }
}

/// Wraps an integer to the width and signedness of `ty`, as the 64-bit value a register holds
/// (sign- or zero-extended). Pointers and doubles are left alone.
pub fn wrap(value: u64, ty: &Type) -> u64 {
    match ty {
        Type::Int(k) => {
            let bits = k.size() * 8;
            if bits == 64 {
                value
            } else if k.signed() {
                let shift = 64 - bits;
                (((value << shift) as i64) >> shift) as u64
            } else {
                value & ((1u64 << bits) - 1)
            }
        }
        _ => value,
    }
}
