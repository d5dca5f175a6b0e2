//! The snippet parser: tokens to an [`super::ast::Program`], by recursive descent for statements and
//! precedence climbing for C's expression grammar. It always returns a tree: a statement it
//! cannot read becomes [`StmtKind::Error`] with a diagnostic, and parsing resumes after the
//! next `;` or `}` (rust-analyzer's invariant: the tree and its diagnostics, never one or the
//! other), so a shell can complete and highlight half-typed snippets.
//!
//! The lexer uses `nom`; the token-level grammar is hand-written because precise recovery and
//! "expected X, found Y" messages are simpler over a token slice than through combinators.

use super::ast::*;
use super::diag::Diagnostic;
use super::lexer::{lex, Token, TokenKind};

/// Parses a snippet body. Never fails; check the diagnostics for errors.
pub fn parse(source: &str) -> (Program, Vec<Diagnostic>) {
    let (tokens, mut diags) = lex(source);
    let mut p = Parser {
        tokens,
        pos: 0,
        diags: Vec::new(),
        end: source.len(),
        nesting: 0,
    };
    let mut stmts = Vec::new();
    while !p.at_end() {
        if p.eat("}") {
            let span = p.prev_span();
            p.error(span, "unmatched `}`");
            continue;
        }
        stmts.push(p.stmt());
    }
    diags.append(&mut p.diags);
    (Program { stmts }, diags)
}

/// Parses one expression (for `print EXPR` and `if (COND)` conditions).
pub fn parse_expr(source: &str) -> (Expr, Vec<Diagnostic>) {
    let (tokens, mut diags) = lex(source);
    let mut p = Parser {
        tokens,
        pos: 0,
        diags: Vec::new(),
        end: source.len(),
        nesting: 0,
    };
    let e = p.expr();
    if !p.at_end() {
        let span = p.peek_span();
        p.error(
            span,
            format!("expected the end of the expression, found {}", p.describe()),
        );
    }
    diags.append(&mut p.diags);
    (e, diags)
}

/// A parsed `declare TYPE NAME [= INIT]` (the part after `declare`).
#[derive(Clone, Debug, PartialEq)]
pub struct Declaration {
    /// The type as written.
    pub ty: TypeExpr,
    /// The variable's name.
    pub name: String,
    /// Where the name is, for diagnostics.
    pub name_span: Span,
    /// The initializer after `=`, if any.
    pub init: Option<Expr>,
}

/// Parses the text after the shell's `declare`: `TYPE NAME [= INIT]`.
pub fn parse_declaration(source: &str) -> Result<Declaration, Vec<Diagnostic>> {
    let (tokens, mut diags) = lex(source);
    let mut p = Parser {
        tokens,
        pos: 0,
        diags: Vec::new(),
        end: source.len(),
        nesting: 0,
    };
    let decl = (|| {
        let ty = match p.type_expr() {
            Some(ty) => ty,
            None => {
                let span = p.peek_span();
                p.error(span, format!("expected a type, found {}", p.describe()));
                return None;
            }
        };
        let (name, name_span) = match p.peek().map(|t| t.kind.clone()) {
            Some(TokenKind::Ident(n)) if !is_keyword(&n) => {
                p.pos += 1;
                (n, p.prev_span())
            }
            _ => {
                let span = p.peek_span();
                p.error(
                    span,
                    format!("expected a variable name, found {}", p.describe()),
                );
                return None;
            }
        };
        let init = if p.eat("=") { Some(p.expr()) } else { None };
        p.eat(";");
        if !p.at_end() {
            let span = p.peek_span();
            p.error(
                span,
                format!("unexpected {} after the declaration", p.describe()),
            );
        }
        Some(Declaration {
            ty,
            name,
            name_span,
            init,
        })
    })();
    diags.append(&mut p.diags);
    match decl {
        Some(d) if !diags.iter().any(Diagnostic::is_error) => Ok(d),
        _ => Err(diags),
    }
}

const KEYWORDS: [&str; 13] = [
    "if", "else", "char", "short", "int", "long", "unsigned", "signed", "double", "void", "struct",
    "sizeof", "float",
];

fn is_keyword(s: &str) -> bool {
    KEYWORDS.contains(&s)
}

fn is_type_start(s: &str) -> bool {
    matches!(
        s,
        "char"
            | "short"
            | "int"
            | "long"
            | "unsigned"
            | "signed"
            | "double"
            | "void"
            | "struct"
            | "float"
            | "const"
    )
}

struct Parser {
    tokens: Vec<Token>,
    pos: usize,
    diags: Vec<Diagnostic>,
    end: usize,
    /// How deep the tree under construction is; bounded so that no later recursive pass
    /// (checker, code generator, interpreter) can overflow the stack on hostile input.
    nesting: usize,
}

/// The deepest tree the parser builds.
const MAX_NESTING: usize = 128;

/// Binary operators with their precedence (higher binds tighter), all left-associative.
fn binary_op(p: &str) -> Option<(BinOp, u8)> {
    Some(match p {
        "||" => (BinOp::LogOr, 1),
        "&&" => (BinOp::LogAnd, 2),
        "|" => (BinOp::BitOr, 3),
        "^" => (BinOp::BitXor, 4),
        "&" => (BinOp::BitAnd, 5),
        "==" => (BinOp::Eq, 6),
        "!=" => (BinOp::Ne, 6),
        "<" => (BinOp::Lt, 7),
        "<=" => (BinOp::Le, 7),
        ">" => (BinOp::Gt, 7),
        ">=" => (BinOp::Ge, 7),
        "<<" => (BinOp::Shl, 8),
        ">>" => (BinOp::Shr, 8),
        "+" => (BinOp::Add, 9),
        "-" => (BinOp::Sub, 9),
        "*" => (BinOp::Mul, 10),
        "/" => (BinOp::Div, 10),
        "%" => (BinOp::Rem, 10),
        _ => return None,
    })
}

fn assign_op(p: &str) -> Option<Option<BinOp>> {
    Some(match p {
        "=" => None,
        "+=" => Some(BinOp::Add),
        "-=" => Some(BinOp::Sub),
        "*=" => Some(BinOp::Mul),
        "/=" => Some(BinOp::Div),
        "%=" => Some(BinOp::Rem),
        "&=" => Some(BinOp::BitAnd),
        "|=" => Some(BinOp::BitOr),
        "^=" => Some(BinOp::BitXor),
        "<<=" => Some(BinOp::Shl),
        ">>=" => Some(BinOp::Shr),
        _ => return None,
    })
}

impl Parser {
    fn at_end(&self) -> bool {
        self.pos >= self.tokens.len()
    }

    fn peek(&self) -> Option<&Token> {
        self.tokens.get(self.pos)
    }

    fn peek_punct(&self) -> Option<&'static str> {
        match self.peek()?.kind {
            TokenKind::Punct(p) => Some(p),
            _ => None,
        }
    }

    fn peek_ident(&self) -> Option<&str> {
        match &self.peek()?.kind {
            TokenKind::Ident(s) => Some(s),
            _ => None,
        }
    }

    fn peek_span(&self) -> Span {
        self.peek()
            .map_or(Span::new(self.end, self.end), |t| t.span)
    }

    fn prev_span(&self) -> Span {
        self.pos
            .checked_sub(1)
            .and_then(|i| self.tokens.get(i))
            .map_or(Span::new(0, 0), |t| t.span)
    }

    /// Reports a tree nested beyond [`MAX_NESTING`] and abandons the rest of the input.
    fn too_deep(&mut self) -> Span {
        let span = self.peek_span();
        self.push(
            Diagnostic::error(span, "the snippet is nested too deeply").with_hint(format!(
                "snippets may nest at most {MAX_NESTING} levels; split it up"
            )),
        );
        self.pos = self.tokens.len();
        span
    }

    fn describe(&self) -> String {
        match self.peek().map(|t| &t.kind) {
            None => "the end of the snippet".into(),
            Some(TokenKind::Ident(s)) => format!("`{s}`"),
            Some(TokenKind::Special(s)) => format!("`${s}`"),
            Some(TokenKind::Punct(p)) => format!("`{p}`"),
            Some(TokenKind::Int(_) | TokenKind::Float(_)) => "a number".into(),
            Some(TokenKind::Char(_)) => "a character".into(),
            Some(TokenKind::Str(_)) => "a string".into(),
            Some(TokenKind::Error) => "unreadable text".into(),
        }
    }

    fn error(&mut self, span: Span, message: impl Into<String>) {
        self.push(Diagnostic::error(span, message));
    }

    /// Records a diagnostic unless one was already reported at the same place: a missing
    /// operand usually makes the closing `)` "missing" too, and one message is enough.
    fn push(&mut self, diag: Diagnostic) {
        if self
            .diags
            .last()
            .is_some_and(|d| d.span.start == diag.span.start)
        {
            return;
        }
        self.diags.push(diag);
    }

    fn eat(&mut self, punct: &str) -> bool {
        if self.peek_punct() == Some(punct) {
            self.pos += 1;
            true
        } else {
            false
        }
    }

    fn eat_ident(&mut self, word: &str) -> bool {
        if self.peek_ident() == Some(word) {
            self.pos += 1;
            true
        } else {
            false
        }
    }

    /// Requires `punct`; reports and returns false when it is missing (without consuming).
    fn expect(&mut self, punct: &str) -> bool {
        if self.eat(punct) {
            return true;
        }
        // Point just after the previous token when the problem is a missing terminator.
        let span = if punct == ";" && self.pos > 0 {
            let prev = self.prev_span();
            Span::new(prev.end, prev.end + 1)
        } else {
            self.peek_span()
        };
        let found = self.describe();
        self.push(
            Diagnostic::error(span, format!("expected `{punct}`, found {found}"))
                .with_hint(format!("add `{punct}`")),
        );
        false
    }

    /// Skips to just after the next `;` at this nesting level, or to (not past) a `}` that
    /// closes it.
    fn recover(&mut self) {
        let mut depth = 0usize;
        while let Some(t) = self.peek() {
            match t.kind {
                TokenKind::Punct(";") if depth == 0 => {
                    self.pos += 1;
                    return;
                }
                TokenKind::Punct("{") | TokenKind::Punct("(") | TokenKind::Punct("[") => depth += 1,
                TokenKind::Punct("}") if depth == 0 => return,
                TokenKind::Punct("}") | TokenKind::Punct(")") | TokenKind::Punct("]") => {
                    depth = depth.saturating_sub(1)
                }
                _ => {}
            }
            self.pos += 1;
        }
    }

    fn stmt(&mut self) -> Stmt {
        if self.nesting >= MAX_NESTING {
            let span = self.too_deep();
            return Stmt {
                kind: StmtKind::Error,
                span,
            };
        }
        self.nesting += 1;
        let r = self.stmt_inner();
        self.nesting -= 1;
        r
    }

    fn stmt_inner(&mut self) -> Stmt {
        let start = self.peek_span();
        let errors_before = self.diags.len();
        if self.eat(";") {
            return Stmt {
                kind: StmtKind::Empty,
                span: start,
            };
        }
        if self.eat("{") {
            let mut stmts = Vec::new();
            loop {
                if self.at_end() {
                    self.error(start, "unclosed `{`");
                    break;
                }
                if self.eat("}") {
                    break;
                }
                stmts.push(self.stmt());
            }
            return Stmt {
                kind: StmtKind::Block(stmts),
                span: start.to(self.prev_span()),
            };
        }
        if self.eat_ident("if") {
            self.expect("(");
            let cond = self.expr();
            if !self.expect(")") {
                self.recover();
                return Stmt {
                    kind: StmtKind::Error,
                    span: start.to(self.prev_span()),
                };
            }
            let then = Box::new(self.stmt());
            let otherwise = if self.eat_ident("else") {
                Some(Box::new(self.stmt()))
            } else {
                None
            };
            return Stmt {
                kind: StmtKind::If {
                    cond,
                    then,
                    otherwise,
                },
                span: start.to(self.prev_span()),
            };
        }
        if let Some(word @ ("while" | "for" | "do" | "goto" | "return" | "switch")) =
            self.peek_ident()
        {
            let message = format!("`{word}` is not available in snippets");
            self.diags.push(
                Diagnostic::error(start, message)
                    .with_hint("snippets are straight-line code with `if`/`else` only"),
            );
            self.pos += 1;
            self.recover();
            return Stmt {
                kind: StmtKind::Error,
                span: start.to(self.prev_span()),
            };
        }
        let e = self.expr();
        if self.diags.len() > errors_before {
            self.recover();
            return Stmt {
                kind: StmtKind::Expr(e),
                span: start.to(self.prev_span()),
            };
        }
        if !self.expect(";") {
            self.recover();
        }
        Stmt {
            span: start.to(self.prev_span()),
            kind: StmtKind::Expr(e),
        }
    }

    pub fn expr(&mut self) -> Expr {
        self.assignment()
    }

    fn assignment(&mut self) -> Expr {
        if self.nesting >= MAX_NESTING {
            let span = self.too_deep();
            return Expr {
                kind: ExprKind::Error,
                span,
            };
        }
        self.nesting += 1;
        let r = self.assignment_inner();
        self.nesting -= 1;
        r
    }

    fn assignment_inner(&mut self) -> Expr {
        let lhs = self.conditional();
        if let Some(op) = self.peek_punct().and_then(assign_op) {
            self.pos += 1;
            let rhs = self.assignment();
            let span = lhs.span.to(rhs.span);
            return Expr {
                kind: ExprKind::Assign(op, Box::new(lhs), Box::new(rhs)),
                span,
            };
        }
        lhs
    }

    fn conditional(&mut self) -> Expr {
        if self.nesting >= MAX_NESTING {
            let span = self.too_deep();
            return Expr {
                kind: ExprKind::Error,
                span,
            };
        }
        self.nesting += 1;
        let r = self.conditional_inner();
        self.nesting -= 1;
        r
    }

    fn conditional_inner(&mut self) -> Expr {
        let cond = self.binary(1);
        if !self.eat("?") {
            return cond;
        }
        let then = self.expr();
        self.expect(":");
        let otherwise = self.conditional();
        let span = cond.span.to(otherwise.span);
        Expr {
            kind: ExprKind::Cond(Box::new(cond), Box::new(then), Box::new(otherwise)),
            span,
        }
    }

    fn binary(&mut self, min_prec: u8) -> Expr {
        let mut lhs = self.unary();
        let outer = self.nesting;
        while let Some((op, prec)) = self.peek_punct().and_then(binary_op) {
            if prec < min_prec {
                break;
            }
            // A chain `a + b + c ...` builds a left-deep tree: each operator is a level.
            if self.nesting >= MAX_NESTING {
                self.too_deep();
                break;
            }
            self.nesting += 1;
            self.pos += 1;
            let rhs = self.binary(prec + 1);
            let span = lhs.span.to(rhs.span);
            lhs = Expr {
                kind: ExprKind::Binary(op, Box::new(lhs), Box::new(rhs)),
                span,
            };
        }
        self.nesting = outer;
        lhs
    }

    /// Is the token after `(` the start of a type (so this is a cast)?
    fn at_cast(&self) -> bool {
        self.peek_punct() == Some("(")
            && matches!(self.tokens.get(self.pos + 1).map(|t| &t.kind),
                Some(TokenKind::Ident(s)) if is_type_start(s))
    }

    fn unary(&mut self) -> Expr {
        if self.nesting >= MAX_NESTING {
            let span = self.too_deep();
            return Expr {
                kind: ExprKind::Error,
                span,
            };
        }
        self.nesting += 1;
        let r = self.unary_inner();
        self.nesting -= 1;
        r
    }

    fn unary_inner(&mut self) -> Expr {
        let start = self.peek_span();
        if self.at_cast() {
            self.pos += 1;
            let ty = self.type_expr_or_error();
            self.expect(")");
            let operand = self.unary();
            let span = start.to(operand.span);
            return Expr {
                kind: ExprKind::Cast(ty, Box::new(operand)),
                span,
            };
        }
        if self.eat_ident("sizeof") {
            if self.at_cast() {
                self.pos += 1;
                let ty = self.type_expr_or_error();
                self.expect(")");
                return Expr {
                    kind: ExprKind::SizeofType(ty),
                    span: start.to(self.prev_span()),
                };
            }
            self.error(
                start,
                "`sizeof` takes a type in parentheses here, e.g. `sizeof(long)`",
            );
            return Expr {
                kind: ExprKind::Error,
                span: start,
            };
        }
        let op = match self.peek_punct() {
            Some("-") => Some(UnOp::Neg),
            Some("+") => Some(UnOp::Plus),
            Some("!") => Some(UnOp::Not),
            Some("~") => Some(UnOp::BitNot),
            Some("*") => Some(UnOp::Deref),
            Some("&") => Some(UnOp::AddrOf),
            Some("++") => Some(UnOp::PreInc),
            Some("--") => Some(UnOp::PreDec),
            _ => None,
        };
        if let Some(op) = op {
            self.pos += 1;
            let operand = self.unary();
            let span = start.to(operand.span);
            return Expr {
                kind: ExprKind::Unary(op, Box::new(operand)),
                span,
            };
        }
        self.postfix()
    }

    fn postfix(&mut self) -> Expr {
        let mut e = self.primary();
        let outer = self.nesting;
        loop {
            // Postfix chains (`a[1][2]`, `x++ ++`) build left-deep trees too.
            if self.nesting >= MAX_NESTING {
                self.too_deep();
                self.nesting = outer;
                return e;
            }
            self.nesting += 1;
            let span_start = e.span;
            if self.eat("++") {
                e = Expr {
                    kind: ExprKind::Unary(UnOp::PostInc, Box::new(e)),
                    span: span_start.to(self.prev_span()),
                };
            } else if self.eat("--") {
                e = Expr {
                    kind: ExprKind::Unary(UnOp::PostDec, Box::new(e)),
                    span: span_start.to(self.prev_span()),
                };
            } else if self.eat("(") {
                let mut args = Vec::new();
                if !self.eat(")") {
                    loop {
                        args.push(self.assignment());
                        if self.eat(",") {
                            continue;
                        }
                        self.expect(")");
                        break;
                    }
                }
                e = Expr {
                    kind: ExprKind::Call(Box::new(e), args),
                    span: span_start.to(self.prev_span()),
                };
            } else if self.eat("[") {
                let index = self.expr();
                self.expect("]");
                e = Expr {
                    kind: ExprKind::Index(Box::new(e), Box::new(index)),
                    span: span_start.to(self.prev_span()),
                };
            } else if self.peek_punct() == Some(".") || self.peek_punct() == Some("->") {
                let arrow = self.peek_punct() == Some("->");
                self.pos += 1;
                let field_span = self.peek_span();
                let field = match self.peek_ident() {
                    Some(f) => {
                        let f = f.to_string();
                        self.pos += 1;
                        f
                    }
                    None => {
                        let found = self.describe();
                        self.error(field_span, format!("expected a field name, found {found}"));
                        String::new()
                    }
                };
                e = Expr {
                    kind: ExprKind::Member {
                        base: Box::new(e),
                        field,
                        field_span,
                        arrow,
                    },
                    span: span_start.to(self.prev_span()),
                };
            } else {
                self.nesting = outer;
                return e;
            }
        }
    }

    fn primary(&mut self) -> Expr {
        let span = self.peek_span();
        let kind = match self.peek().map(|t| t.kind.clone()) {
            Some(TokenKind::Int(lit)) => ExprKind::Int(lit),
            Some(TokenKind::Float(f)) => ExprKind::Float(f),
            Some(TokenKind::Char(c)) => ExprKind::Char(c),
            Some(TokenKind::Str(mut s)) => {
                // Adjacent string literals concatenate, as in C.
                while let Some(TokenKind::Str(more)) =
                    self.tokens.get(self.pos + 1).map(|t| &t.kind)
                {
                    s.extend_from_slice(more);
                    self.pos += 1;
                }
                ExprKind::Str(s)
            }
            Some(TokenKind::Special(s)) => ExprKind::Special(s),
            Some(TokenKind::Ident(name)) if !is_keyword(&name) => ExprKind::Name(name),
            Some(TokenKind::Punct("(")) => {
                self.pos += 1;
                let inner = self.expr();
                self.expect(")");
                return Expr {
                    kind: inner.kind,
                    span: span.to(self.prev_span()),
                };
            }
            Some(TokenKind::Error) => {
                // The lexer already reported it.
                self.pos += 1;
                return Expr {
                    kind: ExprKind::Error,
                    span,
                };
            }
            _ => {
                let found = self.describe();
                self.error(span, format!("expected an expression, found {found}"));
                return Expr {
                    kind: ExprKind::Error,
                    span,
                };
            }
        };
        self.pos += 1;
        Expr {
            kind,
            span: span.to(self.prev_span()),
        }
    }

    fn type_expr_or_error(&mut self) -> TypeExpr {
        match self.type_expr() {
            Some(t) => t,
            None => {
                let span = self.peek_span();
                let found = self.describe();
                self.error(span, format!("expected a type, found {found}"));
                TypeExpr {
                    base: BaseType::Void,
                    pointers: 0,
                    span,
                }
            }
        }
    }

    /// `unsigned long *`, `struct foo **`, `double`, ... (`const` is accepted and ignored).
    fn type_expr(&mut self) -> Option<TypeExpr> {
        let start = self.peek_span();
        let mut signed = None;
        let (mut char_, mut short, mut int, mut longs, mut double, mut void) =
            (false, false, false, 0, false, false);
        let mut strukt = None;
        let mut any = false;
        loop {
            match self.peek_ident() {
                Some("const") => {}
                Some("signed") => signed = Some(true),
                Some("unsigned") => signed = Some(false),
                Some("char") => char_ = true,
                Some("short") => short = true,
                Some("int") => int = true,
                Some("long") => longs += 1,
                Some("double") => double = true,
                Some("float") => {
                    let span = self.peek_span();
                    self.diags.push(
                        Diagnostic::error(span, "`float` is not supported")
                            .with_hint("use `double`"),
                    );
                    double = true;
                }
                Some("void") => void = true,
                Some("struct") => {
                    self.pos += 1;
                    match self.peek_ident() {
                        Some(name) if !is_keyword(name) => strukt = Some(name.to_string()),
                        _ => {
                            let span = self.peek_span();
                            let found = self.describe();
                            self.error(span, format!("expected a struct name, found {found}"));
                            return None;
                        }
                    }
                }
                _ => break,
            }
            any = true;
            self.pos += 1;
        }
        if !any {
            return None;
        }
        let base = if let Some(name) = strukt {
            BaseType::Struct(name)
        } else if void {
            BaseType::Void
        } else if double {
            BaseType::Double
        } else {
            let unsigned = signed == Some(false);
            let kind = if char_ {
                if unsigned {
                    IntKind::UChar
                } else {
                    IntKind::Char
                }
            } else if short {
                if unsigned {
                    IntKind::UShort
                } else {
                    IntKind::Short
                }
            } else if longs > 0 {
                if unsigned {
                    IntKind::ULong
                } else {
                    IntKind::Long
                }
            } else if unsigned {
                IntKind::UInt
            } else {
                let _ = int;
                IntKind::Int
            };
            BaseType::Int(kind)
        };
        let mut pointers = 0;
        while self.eat("*") {
            pointers += 1;
            while self.eat_ident("const") {}
        }
        Some(TypeExpr {
            base,
            pointers,
            span: start.to(self.prev_span()),
        })
    }
}
