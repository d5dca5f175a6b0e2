//! Calls from snippets into real C-ABI functions in this process (Rust `extern "C"` functions
//! and libc's variadic `snprintf`/`printf`): argument registers, stack arguments, doubles,
//! `al` for variadic calls, narrow return values, and stack alignment at the call.

use super::abi::SavedRegs;
use super::compile;
use super::diag::render_all;
use super::env::{MapEnv, PointInfo, PointKind, VarPlace};
use super::testenv::{Mapping, Runner};
use super::types::{Field, FnSig, IntKind, StructLayout, Type};
use crate::snippet::codegen_tests::check_clobbers;

extern "C" fn forty_two() -> i64 {
    42
}

/// Weighted so that any argument in the wrong place changes the result.
#[allow(clippy::too_many_arguments)]
extern "C" fn weigh8(a: i64, b: i64, c: i64, d: i64, e: i64, f: i64, g: i64, h: i64) -> i64 {
    a + 10 * b + 100 * c + 1_000 * d + 10_000 * e + 100_000 * f + 1_000_000 * g + 10_000_000 * h
}

extern "C" fn weigh1(a: i64) -> i64 {
    a
}

extern "C" fn weigh3(a: i32, b: u8, c: i16) -> i64 {
    i64::from(a) * 1000 + i64::from(b) * 10 + i64::from(c)
}

#[allow(clippy::too_many_arguments)]
extern "C" fn doubles10(
    a: f64,
    b: f64,
    c: f64,
    d: f64,
    e: f64,
    f: f64,
    g: f64,
    h: f64,
    i: f64,
    j: f64,
) -> f64 {
    a + 2.0 * b + 3.0 * c + 4.0 * d + 5.0 * e + 6.0 * f + 7.0 * g + 8.0 * h + 9.0 * i + 10.0 * j
}

/// Integers and doubles interleaved, more of each than registers hold.
#[allow(clippy::too_many_arguments)]
extern "C" fn mixed(
    a: i64,
    x: f64,
    b: i32,
    y: f64,
    c: i64,
    d: i64,
    e: i64,
    f: i64,
    g: i64,
    z: f64,
) -> f64 {
    (a + 2 * i64::from(b) + 3 * c + 4 * d + 5 * e + 6 * f + 7 * g) as f64
        + x * 0.5
        + y * 0.25
        + z * 0.125
}

extern "C" fn minus_five() -> i8 {
    -5
}

extern "C" fn bump(p: *mut i64) {
    // SAFETY: the snippet passes the address of a declared `long`.
    unsafe { *p += 1 };
}

fn fn_sig(ret: Type, params: &[Type], variadic: bool) -> FnSig {
    FnSig {
        ret,
        params: Some(params.to_vec()),
        variadic,
        printf_format: None,
    }
}

const BUF: u64 = 128;

/// Runs `src` with `long l`, `double d`, `char buf[64]` and the functions above, at a point of
/// `kind`; returns the data page and the saved block.
fn run(
    src: &str,
    kind: PointKind,
    extra: impl FnOnce(MapEnv, u64) -> MapEnv,
) -> (Vec<u8>, SavedRegs) {
    let mut runner = Runner::new(0);
    let mut data = Mapping::new(4096, runner.snippet_addr() + (1 << 20));
    let base = data.addr();
    // A leaf function that returns rsp % 16 at its entry (8 when the caller was aligned).
    let mut probe = Mapping::new(4096, 0);
    probe.bytes()[..8].copy_from_slice(&[0x48, 0x89, 0xe0, 0x83, 0xe0, 0x0f, 0xc3, 0x90]);
    probe.protect(libc::PROT_READ | libc::PROT_EXEC);
    let l = Type::LONG;
    let env = MapEnv {
        point: PointInfo {
            kind,
            function: "work".into(),
            module: "a.out".into(),
            return_type: Some(Type::INT),
            ..PointInfo::default()
        },
        ..MapEnv::default()
    }
    .var("l", l.clone(), VarPlace::Absolute(base))
    .var("d", Type::Double, VarPlace::Absolute(base + 8))
    .var("l2", l.clone(), VarPlace::Absolute(base + 16))
    .var(
        "buf",
        Type::Array(Box::new(Type::Int(IntKind::Char)), 64),
        VarPlace::Absolute(base + BUF),
    )
    .func(
        "forty_two",
        forty_two as *const () as u64,
        FnSig {
            ret: l.clone(),
            params: None,
            variadic: false,
            printf_format: None,
        },
    )
    .func(
        "weigh1",
        weigh1 as *const () as u64,
        fn_sig(l.clone(), std::slice::from_ref(&l), false),
    )
    .func(
        "weigh8",
        weigh8 as *const () as u64,
        fn_sig(l.clone(), &vec![l.clone(); 8], false),
    )
    .func(
        "weigh3",
        weigh3 as *const () as u64,
        fn_sig(
            l.clone(),
            &[
                Type::INT,
                Type::Int(IntKind::UChar),
                Type::Int(IntKind::Short),
            ],
            false,
        ),
    )
    .func(
        "doubles10",
        doubles10 as *const () as u64,
        fn_sig(Type::Double, &vec![Type::Double; 10], false),
    )
    .func(
        "mixed",
        mixed as *const () as u64,
        fn_sig(
            Type::Double,
            &[
                l.clone(),
                Type::Double,
                Type::INT,
                Type::Double,
                l.clone(),
                l.clone(),
                l.clone(),
                l.clone(),
                l.clone(),
                Type::Double,
            ],
            false,
        ),
    )
    .func(
        "minus_five",
        minus_five as *const () as u64,
        fn_sig(Type::Int(IntKind::Char), &[], false),
    )
    .func(
        "bump",
        bump as *const () as u64,
        fn_sig(Type::Void, &[Type::ptr(l.clone())], false),
    )
    .func("rsp_mod_16", probe.addr(), fn_sig(l.clone(), &[], false))
    .func(
        "snprintf",
        libc::snprintf as *const () as u64,
        fn_sig(
            Type::INT,
            &[Type::char_ptr(), Type::ULONG, Type::char_ptr()],
            true,
        ),
    )
    .func(
        "printf",
        libc::printf as *const () as u64,
        fn_sig(Type::INT, &[Type::char_ptr()], true),
    );
    let env = extra(env, base);
    let c = compile(src, &env, runner.snippet_addr())
        .unwrap_or_else(|d| panic!("{}", render_all(&d, src)));
    let mut regs = SavedRegs {
        args: [1, 2, 3, 4, 5, 6],
        rax: 0xffff_ffff_0000_0007,
        ..SavedRegs::default()
    };
    let dump = runner.run(&c.code.bytes, &mut regs);
    check_clobbers(&dump, &c.code.clobbers, src);
    (data.bytes()[..256].to_vec(), regs)
}

fn long_at(d: &[u8], off: usize) -> i64 {
    i64::from_le_bytes(d[off..off + 8].try_into().unwrap_or_default())
}

fn double_at(d: &[u8], off: usize) -> f64 {
    f64::from_le_bytes(d[off..off + 8].try_into().unwrap_or_default())
}

fn none(env: MapEnv, _: u64) -> MapEnv {
    env
}

#[test]
fn calls_with_zero_to_eight_integer_arguments() {
    let (d, _) = run("l = forty_two();", PointKind::Entry, none);
    assert_eq!(long_at(&d, 0), 42);
    let (d, _) = run("l = weigh1(7);", PointKind::Entry, none);
    assert_eq!(long_at(&d, 0), 7);
    let (d, _) = run("l = weigh3(-2, 300, 70000);", PointKind::Entry, none);
    assert_eq!(long_at(&d, 0), -2000 + 44 * 10 + 4464);
    let (d, _) = run(
        "l = weigh8(1, 2, 3, 4, 5, 6, 7, 8);",
        PointKind::Entry,
        none,
    );
    assert_eq!(long_at(&d, 0), 87_654_321);
    // Arguments that themselves call, and a stack depth that needs padding.
    let (d, _) = run(
        "l = 1 + weigh8(1, weigh1(2), 3, 4, 5, 6, 7, weigh1(8));",
        PointKind::Entry,
        none,
    );
    assert_eq!(long_at(&d, 0), 87_654_322);
}

#[test]
fn calls_with_doubles_in_registers_and_on_the_stack() {
    let (d, _) = run(
        "d = doubles10(1, 2, 3, 4, 5, 6, 7, 8, 9, 10);",
        PointKind::Entry,
        none,
    );
    assert_eq!(double_at(&d, 8), 385.0);
    let (d, _) = run(
        "d = mixed(1, 2.0, 2, 4.0, 3, 4, 5, 6, 7, 8.0);",
        PointKind::Entry,
        none,
    );
    let want = (1 + 4 + 9 + 16 + 25 + 36 + 49) as f64 + 1.0 + 1.0 + 1.0;
    assert_eq!(double_at(&d, 8), want);
}

#[test]
fn narrow_return_values_are_extended() {
    let (d, _) = run("l = minus_five();", PointKind::Entry, none);
    assert_eq!(long_at(&d, 0), -5);
}

#[test]
fn the_stack_is_aligned_at_every_call() {
    for src in [
        "l = rsp_mod_16();",
        "l = (1 + rsp_mod_16()) - 1;",
        "l = weigh1(1 + rsp_mod_16()) - 1;",
        "l = weigh8(1, 2, 3, 4, 5, 6, 7, rsp_mod_16()) / 10000000;",
        "l = weigh8(1, 2, 3, 4, 5, 6, rsp_mod_16(), 8) / 1000000 % 10;",
    ] {
        let (d, _) = run(src, PointKind::Entry, none);
        assert_eq!(long_at(&d, 0), 8, "{src}");
    }
}

#[test]
fn variadic_snprintf_formats_into_a_buffer() {
    let src = "l = 12345; d = 2.5; l2 = snprintf(buf, 64, \"%d-%s-%.2f|%ld|%c\", 42, \"str\", d, l, 'x');";
    let (d, _) = run(src, PointKind::Entry, none);
    let text = &d[BUF as usize..];
    let end = text.iter().position(|&b| b == 0).unwrap_or(0);
    assert_eq!(std::str::from_utf8(&text[..end]), Ok("42-str-2.50|12345|x"));
    assert_eq!(long_at(&d, 16), 19);
    // More doubles than registers, through a variadic call.
    let src = "l2 = snprintf(buf, 64, \"%g %g %g %g %g %g %g %g %g %d\", 1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0, 9.5, 10);";
    let (d, _) = run(src, PointKind::Entry, none);
    let text = &d[BUF as usize..];
    let end = text.iter().position(|&b| b == 0).unwrap_or(0);
    assert_eq!(
        std::str::from_utf8(&text[..end]),
        Ok("1 2 3 4 5 6 7 8 9.5 10")
    );
}

#[test]
fn printf_prints() {
    let (d, _) = run(
        "l = printf(\"snippet printf test %s %d\\n\", $function, 7);",
        PointKind::Entry,
        none,
    );
    assert_eq!(long_at(&d, 0), "snippet printf test work 7\n".len() as i64);
}

#[test]
fn void_calls_and_pointers_to_declared_variables() {
    let (d, _) = run("l = 41; bump(&l);", PointKind::Entry, none);
    assert_eq!(long_at(&d, 0), 42);
}

#[test]
fn return_and_arguments_read_the_saved_block() {
    let (d, regs) = run("l = $return; $return = -1;", PointKind::Exit, none);
    assert_eq!(long_at(&d, 0), 7, "an int $return reads eax only");
    assert_eq!(regs.rax as u32, u32::MAX);
    let (d, _) = run("l = $0 * 100 + $5;", PointKind::Entry, none);
    assert_eq!(long_at(&d, 0), 106);
}

#[test]
fn tid_is_the_threads_id() {
    let (d, _) = run("l = $tid;", PointKind::Entry, none);
    // SAFETY: gettid has no preconditions.
    let tid = i64::from(unsafe { libc::gettid() });
    assert_eq!(long_at(&d, 0), tid);
}

#[repr(C)]
struct Node {
    value: i64,
    next: *mut Node,
    small: i16,
}

#[test]
fn struct_fields_through_pointers() {
    let mut second = Box::new(Node {
        value: 99,
        next: std::ptr::null_mut(),
        small: 1,
    });
    let mut first = Box::new(Node {
        value: 5,
        next: &mut *second,
        small: -3,
    });
    let head: *mut Node = &mut *first;
    let node = Type::Struct {
        name: "node".into(),
        size: 24,
    };
    let (d, _) = run(
        "l = head->next->value + head->value; head->next->small += 10; (*head).small = head->small * 2; if (head->next->next == 0) l2 = 1;",
        PointKind::Entry,
        |mut env, base| {
            env.structs.push(StructLayout {
                name: "node".into(),
                size: 24,
                fields: vec![
                    Field { name: "value".into(), offset: 0, ty: Type::LONG },
                    Field { name: "next".into(), offset: 8, ty: Type::ptr(node.clone()) },
                    Field { name: "small".into(), offset: 16, ty: Type::Int(IntKind::Short) },
                ],
            });
            // `head` is a global holding the pointer, in the data page.
            let at = base + 200;
            // SAFETY: `at` is inside the data mapping, 8-byte aligned, and unused otherwise.
            unsafe { *(at as *mut u64) = head as u64 };
            env.var("head", Type::ptr(node.clone()), VarPlace::Absolute(at))
        },
    );
    assert_eq!(long_at(&d, 0), 104);
    assert_eq!(long_at(&d, 16), 1);
    assert_eq!(second.small, 11);
    assert_eq!(first.small, -6);
}
