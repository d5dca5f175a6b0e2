//! Code generator tests: the shape of the code for simple snippets (a counter is one
//! instruction), what it reports as clobbered, and hand-picked snippets run for real.

use iced_x86::{Decoder, DecoderOptions, Formatter, IntelFormatter};

use super::abi::SavedRegs;
use super::compile;
use super::env::{MapEnv, VarPlace};
use super::testenv::{sentinel, var_env, Mapping, Runner, DATA_SIZE, P_OFFSET, Q_OFFSET};
use super::types::Type;

/// Disassembles `bytes` at `addr`, one instruction per line.
fn disasm(bytes: &[u8], addr: u64) -> Vec<String> {
    let mut d = Decoder::with_ip(64, bytes, addr, DecoderOptions::NONE);
    let mut f = IntelFormatter::new();
    let mut out = Vec::new();
    for insn in &mut d {
        let mut s = String::new();
        f.format(&insn, &mut s);
        out.push(s);
    }
    out
}

const AT: u64 = 0x7000_0000_0000;

fn counter_env() -> MapEnv {
    MapEnv::default()
        .var("n", Type::LONG, VarPlace::Absolute(AT + 0x1000))
        .var("k", Type::INT, VarPlace::Absolute(AT + 0x1008))
        .var("far", Type::LONG, VarPlace::Absolute(AT + 0x1_0000_0000))
}

#[test]
fn a_counter_is_one_instruction_that_clobbers_only_flags() {
    let c = compile("n++;", &counter_env(), AT).expect("compiles");
    assert_eq!(disasm(&c.code.bytes, AT), ["inc qword ptr [700000001000h]"]);
    let insn = Decoder::with_ip(64, &c.code.bytes, AT, DecoderOptions::NONE).decode();
    assert!(insn.is_ip_rel_memory_operand(), "reached as [rip+disp32]");
    assert_eq!(c.code.bytes.len(), 7);
    let k = &c.code.clobbers;
    assert_eq!(
        (k.gprs, k.xmms, k.flags, k.calls_out, k.stack),
        (0, 0, true, false, false)
    );
    assert!(!c.code.requirements.base);
}

#[test]
fn simple_updates_are_single_instructions() {
    let one = |src: &str| {
        let c = compile(src, &counter_env(), AT).expect("compiles");
        let d = disasm(&c.code.bytes, AT);
        assert_eq!(d.len(), 1, "{src}: {d:?}");
        assert_eq!(c.code.clobbers.gprs, 0, "{src}");
        d.into_iter().next().unwrap_or_default()
    };
    assert_eq!(one("n--;"), "dec qword ptr [700000001000h]");
    assert_eq!(one("n += 5;"), "add qword ptr [700000001000h],5");
    assert_eq!(one("k -= 3;"), "sub dword ptr [700000001008h],3");
    assert_eq!(one("n = 0;"), "mov qword ptr [700000001000h],0");
    assert_eq!(one("++k;"), "inc dword ptr [700000001008h]");
    let c = compile("n = 7;", &counter_env(), AT).expect("compiles");
    assert!(
        !c.code.clobbers.flags,
        "a plain store leaves the flags alone"
    );
}

#[test]
fn far_variables_go_through_r11() {
    let c = compile("far++;", &counter_env(), AT).expect("compiles");
    assert_eq!(
        disasm(&c.code.bytes, AT),
        ["mov r11,700100000000h", "inc qword ptr [r11]"]
    );
    assert_eq!(c.code.clobbers.gpr_names(), ["r11"]);
}

#[test]
fn calls_report_caller_saved_registers_and_vector_state() {
    let env = counter_env().func(
        "f",
        0x1234,
        super::types::FnSig {
            ret: Type::Void,
            params: Some(vec![]),
            variadic: false,
            printf_format: None,
        },
    );
    let c = compile("f();", &env, AT).expect("compiles");
    let k = c.code.clobbers;
    assert!(k.calls_out && k.vector() && k.flags);
    assert_eq!(
        k.gpr_names(),
        ["rax", "rcx", "rdx", "rsi", "rdi", "r8", "r9", "r10", "r11"]
    );
}

/// Runs `src` against the test variables (near the code) and returns the data area.
fn run(src: &str, init: &[u8]) -> (Vec<u8>, SavedRegs) {
    let mut runner = Runner::new(0);
    let mut data = Mapping::new(4096, runner.snippet_addr() + (1 << 20));
    let base = data.addr();
    data.bytes()[..init.len()].copy_from_slice(init);
    let c = compile(src, &var_env(base), runner.snippet_addr()).unwrap_or_else(|d| {
        panic!("{}", super::diag::render_all(&d, src));
    });
    let mut regs = SavedRegs {
        args: [10, 20, 30, 40, 50, 60],
        ..SavedRegs::default()
    };
    let dump = runner.run(&c.code.bytes, &mut regs);
    check_clobbers(&dump, &c.code.clobbers, src);
    (data.bytes()[..DATA_SIZE].to_vec(), regs)
}

/// Every register not reported as clobbered still holds its sentinel.
pub fn check_clobbers(dump: &[u64; 16], k: &super::Clobbers, src: &str) {
    for (n, v) in dump.iter().enumerate() {
        if [3, 4, 5].contains(&n) {
            continue;
        }
        if k.gprs & (1 << n) == 0 {
            assert_eq!(
                *v,
                sentinel(n),
                "register {n} changed but not reported, for `{src}`"
            );
        }
    }
}

fn long_at(d: &[u8], off: usize) -> i64 {
    i64::from_le_bytes(d[off..off + 8].try_into().unwrap_or_default())
}

#[test]
fn runs_simple_snippets() {
    let (d, _) = run("l = 6 * 7;", &[]);
    assert_eq!(long_at(&d, 16), 42);
    let (d, _) = run(
        "l = -7 / 2; ul = -7 % 2; i = 1 << 33; u = (unsigned)-1 >> 4;",
        &[],
    );
    assert_eq!(long_at(&d, 16), -3);
    assert_eq!(long_at(&d, 24), -1);
    assert_eq!(
        i32::from_le_bytes(d[8..12].try_into().unwrap_or_default()),
        2
    );
    assert_eq!(
        u32::from_le_bytes(d[12..16].try_into().unwrap_or_default()),
        0x0fff_ffff
    );
    let (d, _) = run("d = 1.5; d = d * 2 + 1; l = d;", &[]);
    assert_eq!(long_at(&d, 16), 4);
    let (d, _) = run(
        "l = 5; l = l / 0; l2 = 7 % 0; i = -2147483647 - 1; i = i / -1;",
        &[],
    );
    assert_eq!((long_at(&d, 16), long_at(&d, 48)), (0, 0));
    assert_eq!(
        i32::from_le_bytes(d[8..12].try_into().unwrap_or_default()),
        i32::MIN
    );
    let (d, regs) = run(
        "l = $0 + $5; $1 = 99; if (l > 60) l2 = 1; else l2 = 2;",
        &[],
    );
    assert_eq!((long_at(&d, 16), long_at(&d, 48)), (70, 1));
    assert_eq!(regs.args[1], 99);
}

#[test]
fn pointers_reach_memory() {
    // p and q are set by the snippet itself: they point into the data area.
    let (d, _) = run(
        "p = &l2; *p = 5; p[0] += 2; q = &i2; *q = -1; l = *p + *q;",
        &[],
    );
    assert_eq!(long_at(&d, 48), 7);
    assert_eq!(long_at(&d, 16), 6);
    assert_ne!(long_at(&d, P_OFFSET as usize), 0);
    assert_ne!(long_at(&d, Q_OFFSET as usize), 0);
}

#[test]
fn short_circuit_skips_side_effects() {
    let (d, _) = run("l = 0; i = (l && l2++) + (!l || l2--);", &[]);
    assert_eq!(long_at(&d, 48), 0, "neither side effect ran");
    assert_eq!(
        i32::from_le_bytes(d[8..12].try_into().unwrap_or_default()),
        1
    );
}

#[test]
fn strings_live_after_the_code() {
    let (d, _) = run(
        "p = (long *)\"hello\"; c = *(char *)p; uc = ((char *)p)[4];",
        &[],
    );
    assert_eq!((d[0], d[1]), (b'h', b'o'));
}

#[test]
fn disassembly_shows_strings_as_data() {
    let env = counter_env().func(
        "puts",
        0x1234,
        super::types::FnSig {
            ret: Type::INT,
            params: Some(vec![Type::char_ptr()]),
            variadic: false,
            printf_format: None,
        },
    );
    let c = compile("puts(\"hi\");", &env, AT).expect("compiles");
    let lines = c.code.disassemble();
    assert!(lines.iter().any(|l| l == "db 0x68,0x69,0x00"), "{lines:#?}");
    assert!(
        lines.last().is_some_and(|l| l.ends_with("nop")),
        "{lines:#?}"
    );
    assert!(lines.iter().any(|l| l.ends_with("call r11")), "{lines:#?}");
}

#[test]
fn conditions_branch_on_the_comparison_itself() {
    let env = counter_env();
    let c = compile("if (n < 0 || k == 3) n++;", &env, AT).expect("compiles");
    let lines = c.code.disassemble();
    assert!(
        !lines.iter().any(|l| l.contains("set")),
        "no 0/1 materialised: {lines:#?}"
    );
    assert_eq!(
        lines.iter().filter(|l| l.contains("cmp")).count(),
        2,
        "{lines:#?}"
    );
}
