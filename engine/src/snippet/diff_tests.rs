//! Differential tests: thousands of random well-typed snippets over declared variables of
//! every type, run both by the reference interpreter and as machine code in this process;
//! the variables' memory, the saved-register block and the clobber report must agree.
//!
//! Case counts are kept small enough for a debug build on a loaded machine (500 per test, 4
//! tests); run more with `PROPTEST_CASES=20000 cargo test -p gsh-engine snippet::diff_tests`.

use proptest::prelude::*;
use proptest::test_runner::Config;

use super::abi::SavedRegs;
use super::codegen_tests::check_clobbers;
use super::diag::render_all;
use super::interp;
use super::testenv::{var_env, CopyMachine, Mapping, Runner, DATA_SIZE, P_OFFSET, Q_OFFSET, VARS};
use super::{check_source, codegen};

fn config() -> Config {
    let mut c = Config {
        failure_persistence: None,
        ..Config::default()
    };
    if std::env::var_os("PROPTEST_CASES").is_none() {
        c.cases = 500;
    }
    c
}

/// An expression text and whether it has type `double`.
type Ex = (String, bool);

const INT_LVALUES: [&str; 14] = [
    "c", "uc", "s", "us", "i", "u", "l", "ul", "i2", "l2", "*p", "q[0]", "$0", "$1",
];
const DOUBLE_LVALUES: [&str; 2] = ["d", "d2"];
const INT_LITERALS: [&str; 20] = [
    "0",
    "1",
    "2",
    "3",
    "7",
    "31",
    "32",
    "33",
    "63",
    "64",
    "255",
    "-1",
    "-2",
    "0x7fffffff",
    "0x80000000",
    "2147483647",
    "4294967295u",
    "0x7fffffffffffffff",
    "'a'",
    "-9223372036854775807L",
];
/// Integer-valued expressions over the pointers `p` (to `l2`) and `q` (to `i2`).
const POINTER_EXPRS: [&str; 8] = [
    "(&l2 - p)",
    "*(p + 0)",
    "(p + 1)[-1]",
    "*(q - 1 + 1)",
    "(p != 0)",
    "(q == &i2)",
    "((long *)&l - p)",
    "(!p)",
];
const DOUBLE_LITERALS: [&str; 8] = [
    "0.0", "1.5", "-2.25", "1e300", "3.0", "0.1", "1e19", "-1e19",
];
const INT_TYPES: [&str; 8] = [
    "char",
    "unsigned char",
    "short",
    "unsigned short",
    "int",
    "unsigned",
    "long",
    "unsigned long",
];

fn leaf() -> impl Strategy<Value = Ex> {
    prop_oneof![
        4 => prop::sample::select(&INT_LVALUES[..]).prop_map(|s| (s.to_string(), false)),
        3 => prop::sample::select(&INT_LITERALS[..]).prop_map(|s| (s.to_string(), false)),
        1 => prop::sample::select(&POINTER_EXPRS[..]).prop_map(|s| (s.to_string(), false)),
        2 => prop::sample::select(&DOUBLE_LVALUES[..]).prop_map(|s| (s.to_string(), true)),
        1 => prop::sample::select(&DOUBLE_LITERALS[..]).prop_map(|s| (s.to_string(), true)),
    ]
}

const BIN_OPS: [&str; 18] = [
    "+", "-", "*", "/", "%", "&", "|", "^", "<<", ">>", "==", "!=", "<", "<=", ">", ">=", "&&",
    "||",
];
const ASSIGN_OPS: [&str; 11] = [
    "=", "+=", "-=", "*=", "/=", "%=", "&=", "|=", "^=", "<<=", ">>=",
];

fn int_only(op: &str) -> bool {
    matches!(
        op,
        "%" | "&" | "|" | "^" | "<<" | ">>" | "%=" | "&=" | "|=" | "^=" | "<<=" | ">>="
    )
}

fn expr() -> impl Strategy<Value = Ex> {
    leaf().prop_recursive(5, 40, 3, |inner| {
        prop_oneof![
            // Binary operators; integer-only ones fall back to `+` on doubles.
            (
                prop::sample::select(&BIN_OPS[..]),
                inner.clone(),
                inner.clone()
            )
                .prop_map(|(op, (a, da), (b, db))| {
                    let op = if int_only(op) && (da || db) { "+" } else { op };
                    let is_double = (da || db) && matches!(op, "+" | "-" | "*" | "/");
                    (format!("({a} {op} {b})"), is_double)
                }),
            // Unary operators.
            (0..4usize, inner.clone()).prop_map(|(k, (a, da))| match k {
                0 => (format!("(- {a})"), da),
                1 => (format!("(!{a})"), false),
                2 if !da => (format!("(~{a})"), false),
                _ => (format!("(+ {a})"), da),
            }),
            // Casts.
            (prop::sample::select(&INT_TYPES[..]), inner.clone())
                .prop_map(|(t, (a, _))| (format!("(({t}){a})"), false)),
            inner
                .clone()
                .prop_map(|(a, _)| (format!("((double){a})"), true)),
            // The conditional operator.
            (inner.clone(), inner.clone(), inner.clone()).prop_map(|((c, _), (a, da), (b, db))| {
                (format!("({c} ? {a} : {b})"), da || db)
            }),
            // Assignments and increments inside expressions.
            (
                prop::sample::select(&ASSIGN_OPS[..]),
                prop::bool::weighted(0.2),
                0..16usize,
                inner.clone()
            )
                .prop_map(|(op, dbl, k, (b, db))| assign(op, dbl, k, &b, db)),
            (0..4usize, 0..16usize).prop_map(|(k, v)| {
                let v = INT_LVALUES
                    .iter()
                    .chain(&DOUBLE_LVALUES)
                    .nth(v)
                    .copied()
                    .unwrap_or("d");
                let s = match k {
                    0 => format!("({v}++)"),
                    1 => format!("({v}--)"),
                    2 => format!("(++{v})"),
                    _ => format!("(--{v})"),
                };
                let is_double = v.starts_with('d');
                (s, is_double)
            }),
        ]
    })
}

fn assign(op: &str, to_double: bool, k: usize, rhs: &str, rhs_double: bool) -> Ex {
    let (lhs, is_double) = if to_double {
        (DOUBLE_LVALUES[k % 2], true)
    } else {
        (INT_LVALUES[k % INT_LVALUES.len()], false)
    };
    let op = if int_only(op) && (is_double || rhs_double) {
        "+="
    } else {
        op
    };
    (format!("({lhs} {op} {rhs})"), is_double)
}

fn stmt() -> impl Strategy<Value = String> {
    let simple = prop_oneof![
        (
            prop::sample::select(&ASSIGN_OPS[..]),
            prop::bool::weighted(0.25),
            0..16usize,
            expr()
        )
            .prop_map(|(op, dbl, k, (b, db))| format!("{};", assign(op, dbl, k, &b, db).0)),
        (0..16usize, prop::bool::ANY).prop_map(|(v, inc)| format!(
            "{}{};",
            INT_LVALUES[v % INT_LVALUES.len()],
            if inc { "++" } else { "--" }
        )),
        expr().prop_map(|(e, _)| format!("{e};")),
    ];
    simple.prop_recursive(2, 8, 3, |inner| {
        prop_oneof![
            (expr(), inner.clone(), prop::option::of(inner.clone())).prop_map(|((c, _), t, e)| {
                match e {
                    Some(e) => format!("if ({c}) {t} else {e}"),
                    None => format!("if ({c}) {t}"),
                }
            }),
            prop::collection::vec(inner, 1..4).prop_map(|v| format!("{{ {} }}", v.join(" "))),
        ]
    })
}

/// Interesting 64-bit patterns, and anything.
fn bits() -> impl Strategy<Value = u64> {
    prop_oneof![
        Just(0u64),
        Just(1),
        Just(u64::MAX),
        Just(1 << 63),
        Just(0x8000_0000),
        Just(0x7fff_ffff),
        Just(0xff),
        Just(0x80),
        Just(0x8000),
        Just(1.5f64.to_bits()),
        Just((-3.75f64).to_bits()),
        Just(f64::NAN.to_bits()),
        Just(f64::INFINITY.to_bits()),
        Just(1e19f64.to_bits()),
        0u64..100,
        any::<u64>(),
    ]
}

/// Compiles and runs `src` both ways from the same initial state and compares.
fn differential(src: &str, init: &[u64], args: [u64; 6], far: bool) -> Result<(), TestCaseError> {
    let mut runner = Runner::new(0);
    // Near: within RIP reach of the code. Far: 64 GiB away, reached through r11.
    let hint = if far {
        runner.snippet_addr().wrapping_sub(64 << 30)
    } else {
        runner.snippet_addr() + (1 << 20)
    };
    let mut data = Mapping::new(4096, hint);
    let base = data.addr();
    let distance = (base as i128 - runner.snippet_addr() as i128).abs();
    prop_assume!(far == (distance >= 1 << 31));
    for (k, v) in init.iter().enumerate() {
        let off = k * 8;
        if off < P_OFFSET as usize {
            data.bytes()[off..off + 8].copy_from_slice(&v.to_le_bytes());
        }
    }
    // `p` points at `l2`, `q` at `i2`.
    let (l2, i2) = (offset_of("l2"), offset_of("i2"));
    data.bytes()[P_OFFSET as usize..][..8].copy_from_slice(&(base + l2).to_le_bytes());
    data.bytes()[Q_OFFSET as usize..][..8].copy_from_slice(&(base + i2).to_le_bytes());
    let env = var_env(base);
    let (program, diags) = check_source(src, &env);
    let Some(program) = program else {
        return Err(TestCaseError::fail(format!(
            "does not check:\n{}",
            render_all(&diags, src)
        )));
    };
    let code = codegen::generate(&program, runner.snippet_addr())
        .map_err(|e| TestCaseError::fail(format!("{src}: {e}")))?;
    let saved = SavedRegs {
        args,
        ..SavedRegs::default()
    };
    let mut m = CopyMachine {
        base,
        mem: data.bytes()[..DATA_SIZE].to_vec(),
        saved,
    };
    interp::run(&program, &mut m).map_err(TestCaseError::fail)?;
    let mut regs = saved;
    let dump = runner.run(&code.bytes, &mut regs);
    check_clobbers(&dump, &code.clobbers, src);
    let real = data.bytes()[..DATA_SIZE].to_vec();
    for (name, ty, off) in VARS {
        let off = off as usize;
        let n = ty.size() as usize;
        let (a, b) = (&m.mem[off..off + n], &real[off..off + n]);
        if ty == super::types::Type::Double {
            let x = f64::from_le_bytes(a.try_into().unwrap_or_default());
            let y = f64::from_le_bytes(b.try_into().unwrap_or_default());
            // NaN payloads may legitimately differ; every other bit must match.
            prop_assert!(
                x.to_bits() == y.to_bits() || (x.is_nan() && y.is_nan()),
                "`{name}` differs: interpreter {x:?}, machine code {y:?}\nsnippet: {src}"
            );
        } else {
            prop_assert_eq!(a, b, "`{}` differs\nsnippet: {}", name, src);
        }
    }
    prop_assert_eq!(m.saved, regs, "saved registers differ\nsnippet: {}", src);
    Ok(())
}

fn offset_of(name: &str) -> u64 {
    VARS.iter().find(|v| v.0 == name).map_or(0, |v| v.2)
}

proptest! {
    #![proptest_config(config())]

    #[test]
    fn expressions_agree(e in expr(), v in 0..14usize, init in prop::collection::vec(bits(), 8),
                         args in prop::array::uniform6(bits())) {
        let src = format!("{} = {};", INT_LVALUES[v], e.0);
        differential(&src, &init, args, false)?;
    }

    #[test]
    fn double_expressions_agree(e in expr(), init in prop::collection::vec(bits(), 8),
                                args in prop::array::uniform6(bits())) {
        let src = format!("d = {};", e.0);
        differential(&src, &init, args, false)?;
    }

    #[test]
    fn statements_agree(s in prop::collection::vec(stmt(), 1..4),
                        init in prop::collection::vec(bits(), 8),
                        args in prop::array::uniform6(bits())) {
        differential(&s.join("\n"), &init, args, false)?;
    }

    #[test]
    fn far_data_agrees(s in stmt(), init in prop::collection::vec(bits(), 8),
                       args in prop::array::uniform6(bits())) {
        differential(&s, &init, args, true)?;
    }
}
