//! Parser tests: trees for well-formed snippets, and trees plus diagnostics for broken ones.

use super::ast::*;
use super::parser::{parse, parse_declaration, parse_expr};

fn shape(e: &Expr) -> String {
    match &e.kind {
        ExprKind::Int(l) => l.value.to_string(),
        ExprKind::Float(f) => format!("{f:?}"),
        ExprKind::Char(c) => format!("'{}'", *c as char),
        ExprKind::Str(s) => format!("{:?}", String::from_utf8_lossy(s)),
        ExprKind::Name(n) => n.clone(),
        ExprKind::Special(n) => format!("${n}"),
        ExprKind::Unary(op, x) => format!("({op:?} {})", shape(x)),
        ExprKind::Binary(op, a, b) => format!("({} {} {})", shape(a), op.symbol(), shape(b)),
        ExprKind::Assign(op, a, b) => format!(
            "({} {}= {})",
            shape(a),
            op.map_or("", |o| o.symbol()),
            shape(b)
        ),
        ExprKind::Cond(c, a, b) => format!("({} ? {} : {})", shape(c), shape(a), shape(b)),
        ExprKind::Cast(t, x) => format!(
            "(cast {:?}{} {})",
            t.base,
            "*".repeat(t.pointers as usize),
            shape(x)
        ),
        ExprKind::Call(f, args) => format!(
            "{}({})",
            shape(f),
            args.iter().map(shape).collect::<Vec<_>>().join(", ")
        ),
        ExprKind::Index(a, i) => format!("{}[{}]", shape(a), shape(i)),
        ExprKind::Member {
            base, field, arrow, ..
        } => format!("{}{}{field}", shape(base), if *arrow { "->" } else { "." }),
        ExprKind::SizeofType(t) => format!("sizeof({:?})", t.base),
        ExprKind::Error => "<error>".into(),
    }
}

fn expr(src: &str) -> String {
    let (e, diags) = parse_expr(src);
    assert!(diags.is_empty(), "{diags:?}");
    shape(&e)
}

#[test]
fn precedence_and_associativity_follow_c() {
    assert_eq!(expr("1 + 2 * 3"), "(1 + (2 * 3))");
    assert_eq!(expr("a - b - c"), "((a - b) - c)");
    assert_eq!(expr("a = b = c"), "(a = (b = c))");
    assert_eq!(expr("a << 1 + 2"), "(a << (1 + 2))");
    assert_eq!(expr("a & b == c"), "(a & (b == c))");
    assert_eq!(
        expr("a || b && c | d ^ e & f"),
        "(a || (b && (c | (d ^ (e & f)))))"
    );
    assert_eq!(expr("a < b == c > d"), "((a < b) == (c > d))");
    assert_eq!(expr("x ? y : z ? 1 : 2"), "(x ? y : (z ? 1 : 2))");
    assert_eq!(expr("a += b *= 2"), "(a += (b *= 2))");
    assert_eq!(expr("-x++"), "(Neg (PostInc x))");
    assert_eq!(expr("*p++"), "(Deref (PostInc p))");
    assert_eq!(expr("&s->f[2].g"), "(AddrOf s->f[2].g)");
    assert_eq!(expr("(long)x * 2"), "((cast Int(Long) x) * 2)");
    assert_eq!(expr("(unsigned char *)p"), "(cast Int(UChar)* p)");
    assert_eq!(
        expr("printf(\"%d\\n\", a, b + 1)"),
        "printf(\"%d\\n\", a, (b + 1))"
    );
    assert_eq!(expr("$0 + $return"), "($0 + $return)");
    assert_eq!(expr("sizeof(struct foo)"), "sizeof(Struct(\"foo\"))");
}

#[test]
fn literals() {
    assert_eq!(expr("0x2a"), "42");
    assert_eq!(expr("052"), "42");
    assert_eq!(expr("'\\n'"), "'\n'");
    assert_eq!(expr("1e3"), "1000.0");
    assert_eq!(expr(".5"), "0.5");
    assert_eq!(expr("\"a\" \"b\""), "\"ab\"");
    let (e, _) = parse_expr("10ul");
    assert!(matches!(
        e.kind,
        ExprKind::Int(IntLit {
            unsigned: true,
            long: true,
            ..
        })
    ));
}

#[test]
fn statements() {
    let (p, d) = parse("n++; if (x > 1) { a = 1; } else b = 2; ;");
    assert!(d.is_empty(), "{d:?}");
    assert_eq!(p.stmts.len(), 3);
    assert!(matches!(
        p.stmts[1].kind,
        StmtKind::If {
            otherwise: Some(_),
            ..
        }
    ));
}

#[test]
fn recovers_at_statement_level() {
    let (p, d) = parse("a = ; b++; c = (1 + ; d--;");
    assert_eq!(d.len(), 2, "{d:?}");
    assert_eq!(p.stmts.len(), 4);
    assert!(matches!(&p.stmts[1].kind, StmtKind::Expr(e) if shape(e) == "(PostInc b)"));
    assert!(matches!(&p.stmts[3].kind, StmtKind::Expr(e) if shape(e) == "(PostDec d)"));
}

#[test]
fn half_typed_input_still_gives_a_tree() {
    for src in [
        "count",
        "if (x",
        "printf(\"%d\", ",
        "a->",
        "{ a++;",
        "x = 'a",
        "\"abc",
        "}}",
        "$",
        "1 +* 2",
    ] {
        let (p, d) = parse(src);
        assert!(!d.is_empty(), "{src}: no diagnostics");
        let _ = p;
    }
}

#[test]
fn missing_semicolon_points_after_the_statement() {
    let (_, d) = parse("n++");
    assert_eq!(d.len(), 1);
    assert_eq!(d[0].message, "expected `;`, found the end of the snippet");
    assert_eq!(d[0].span.start, 3);
}

#[test]
fn loops_are_rejected_with_a_reason() {
    let (_, d) = parse("while (1) n++; m++;");
    assert_eq!(d.len(), 1);
    assert!(d[0].message.contains("`while` is not available"));
}

#[test]
fn declarations() {
    let d = parse_declaration("unsigned long n = 5").expect("parses");
    assert_eq!(d.ty.base, BaseType::Int(IntKind::ULong));
    assert_eq!(d.name, "n");
    assert!(parse_declaration("long").is_err());
    assert!(parse_declaration("char *name").is_ok());
}

#[test]
fn hostile_nesting_is_an_error_not_a_stack_overflow() {
    for src in [
        "(".repeat(5_000),
        format!("x = {};", "-".repeat(5_000)),
        format!("x = {}1;", "1 + ".repeat(5_000)),
        format!("x = {}1;", "a = ".repeat(5_000)),
        format!("x = {}1;", "a ? b : ".repeat(5_000)),
        format!("{}x++;", "if (1) ".repeat(5_000)),
        format!("{}x++;", "{".repeat(5_000)),
        format!("x{};", "[0]".repeat(5_000)),
    ] {
        let (_, d) = parse(&src);
        assert!(
            d.iter().any(|d| d.message.contains("nested too deeply")),
            "{}",
            &src[..20]
        );
    }
}

proptest::proptest! {
    #![proptest_config(proptest::test_runner::Config {
        failure_persistence: None,
        ..proptest::test_runner::Config::default()
    })]

    /// Bad input never panics: arbitrary text, and C-like token soup.
    #[test]
    fn parsing_and_checking_never_panic(
        text in "\\PC{0,60}",
        soup in proptest::collection::vec(proptest::sample::select(&[
            "x", "n", "$0", "$return", "$function", "1", "0x", "1.5e", "'a'", "\"s\"", "(", ")", "{", "}",
            "[", "]", ";", "+", "-", "*", "/", "%", "<<", "=", "+=", "++", "?", ":", "&&", "!", "&",
            "->", ".", ",", "if", "else", "(long)", "(char *)", "sizeof", "struct", "printf", "while",
        ][..]), 0..30),
    ) {
        let soup = soup.join(" ");
        for src in [text.as_str(), soup.as_str()] {
            let (_, d) = parse(src);
            let _ = super::diag::render_all(&d, src);
            let env = super::testenv::var_env(0x1000);
            let (_, d) = super::check_source(src, &env);
            let _ = super::diag::render_all(&d, src);
            let _ = super::compile(src, &env, 0x10_0000);
        }
    }
}
