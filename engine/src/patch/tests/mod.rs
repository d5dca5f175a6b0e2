//! Real code, instrumented in this process: a shared library built with gcc at `-O0` and
//! `-O2` (plus hand-written assembly for the tactics), `dlopen`ed, analysed from its file,
//! patched through [`inproc::InProcess`], and called.

mod inproc;

use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Arc;

use inproc::{build, InProcess, Lib};

use super::{
    describe_points, AddressSpace, AllocKind, PatchError, PatchOptions, Patcher, Request, Tactic,
};
use crate::addr::RuntimeAddr;
use crate::point::{self, Point, PointKind, Where};
use crate::session::Session;
use crate::snippet::types::{FnSig, IntKind, Type};
use crate::snippet::{MapEnv, PointInfo, VarPlace};

const C: &str = r#"
int inc(int x) { return x + 1; }
int sum_to(int n) { int s = 0; for (int i = 0; i < n; i++) s += i * 3; return s; }
int add3(int x) { return inc(x) + inc(x + 1) + 1; }
int classify(int x) { if (x < 0) return -1; if (x == 0) return 0; if (x > 100) return 2; return 1; }
int tail(int x) { return inc(x * 3); }
static __attribute__((noinline)) int leaf2(int x) { return x * 7 + 1; }
double driver(int n) {
    double acc = 0.25; long k = 0;
    for (int i = 0; i < n; i++) { acc = acc * 1.5 + 1.0; k += leaf2(i); acc -= (double)k * 0.001; }
    return acc + (double)k;
}
int fold(int op) {
    int a = op * 5 + 1;
    switch (op) {
    case 0: a += 3; /* fall through */
    case 1: a *= 2; break;
    case 2: a -= 7; /* fall through */
    case 3: a ^= 0x55; break;
    case 4: a += 11; /* fall through */
    case 5: a = a / 3 + 1; break;
    case 6: a = ~a; break;
    case 7: a += 100; /* fall through */
    case 9: a -= 5; /* fall through */
    default: a -= 1;
    }
    return a;
}
"#;

/// Functions whose shapes force the tactics other than a plain jump.
const ASM: &str = r#"
    .text
    .p2align 5, 0xcc
    .globl pun_entry
    .type pun_entry, @function
pun_entry:                      # entry block: 4 bytes (test; je)
    test %edi, %edi
    je 1f
    lea 1(%rdi), %eax
    ret                         # block of 4 bytes, then another block
1:  mov $100, %eax
    ret
    .size pun_entry, .-pun_entry
    .p2align 5, 0xcc
    .globl mid_ret
    .type mid_ret, @function
mid_ret:                        # a lone ret in the middle of a leaf
    test %edi, %edi
    jne 2f
    ret
2:  lea (%rdi,%rdi), %eax
    ret
    .size mid_ret, .-mid_ret
    .p2align 5, 0xcc
    .globl needs_trap
    .type needs_trap, @function
needs_trap:                     # a lone ret, and a call returning to a lone ret
    test %edi, %edi             # right before the next function: no room anywhere
    jne 3f
    ret
3:  call inc@PLT
    ret
    .size needs_trap, .-needs_trap
    .globl after_trap
    .type after_trap, @function
after_trap:
    ret
    .size after_trap, .-after_trap
    .p2align 5, 0xcc
    .globl cond_tail
    .type cond_tail, @function
cond_tail:                      # a conditional tail call inside the entry's jump
    test %edi, %edi
    js neg_one
    lea 2(%rdi), %eax
    ret
    .size cond_tail, .-cond_tail
    .p2align 5, 0xcc
    .globl neg_one
    .type neg_one, @function
neg_one:
    mov $-1, %eax
    ret
    .size neg_one, .-neg_one
    .p2align 5, 0xcc
    .globl count_down
    .type count_down, @function
count_down:                     # a loop whose back edge (jne) goes to a header that writes the
    xor %eax, %eax              # flags before reading them; the header has two ways in and the
    test %edi, %edi             # latch two ways out: its edges need an edge trampoline
    jle 5f
4:  add $2, %eax
    sub $1, %edi
    jne 4b
5:  ret
    .size count_down, .-count_down
    .p2align 5, 0xcc
    .globl spin_entry
    .type spin_entry, @function
spin_entry:                     # the entry block is the loop's header: the back edge
    sub $1, %edi                # returns to the function's first instruction
    jg spin_entry
    lea 7(%rdi), %eax
    ret
    .size spin_entry, .-spin_entry
    .p2align 5, 0xcc
    .globl spin_switch
    .type spin_switch, @function
spin_switch:                    # the entry block is a loop header, and a jump table (PIC
    cmp $3, %edi                # offsets) dispatches inside the loop (cc1's 0x7f12a0)
    ja 19f
    lea .Ltab_spin(%rip), %rdx
    movslq (%rdx,%rdi,4), %rax
    add %rdx, %rax
    jmp *%rax
10: mov $100, %eax
    ret
11: sub $1, %edi
    jmp spin_switch
12: sub $2, %edi
    jmp spin_switch
13: xor $1, %edi
    jmp spin_switch
19: lea 7(%rdi), %eax
    ret
    .size spin_switch, .-spin_switch
    .section .rodata
    .p2align 2
.Ltab_spin:
    .long 10b-.Ltab_spin, 11b-.Ltab_spin, 12b-.Ltab_spin, 13b-.Ltab_spin
    .text
    .p2align 5, 0xcc
    .section .note.GNU-stack,"",@progbits
"#;

/// Calls recorded by the snippet-called function.
static RECORDED: AtomicI64 = AtomicI64::new(0);
static RECORD_CALLS: AtomicI64 = AtomicI64::new(0);

extern "C" fn record(v: i64) {
    // Dirty every caller-saved vector register, as an AVX-using callee could.
    let x = (v as f64).sqrt() * 3.0 + 1.0;
    RECORDED.fetch_add(v + (x * 0.0) as i64, Ordering::SeqCst);
    RECORD_CALLS.fetch_add(1, Ordering::SeqCst);
}

struct Fixture {
    session: Session,
    lib: Lib,
    space: InProcess,
    patcher: Patcher,
    data: u64,
}

const COUNTERS: usize = 16;

impl Fixture {
    fn new(test: &str, opt: &str, options: PatchOptions) -> Fixture {
        let path = build(test, C, ASM, opt);
        let lib = Lib::open(&path);
        let mut session = Session::new();
        session.open(&path).expect("open the test library");
        let m = session.main().expect("main module");
        let inc = m.functions().by_name("inc").next().expect("inc").addr;
        let bias = lib.sym("inc") - inc.0;
        let mut space = InProcess::near(lib.sym("inc"));
        let data = space
            .allocate(
                RuntimeAddr(lib.sym("inc")),
                8 * COUNTERS as u64,
                AllocKind::Data,
            )
            .expect("data near the library")
            .0;
        Fixture {
            session,
            lib,
            space,
            patcher: Patcher::new(bias, options),
            data,
        }
    }

    fn counter(&self, i: usize) -> i64 {
        // SAFETY: `data` is our RW data allocation of COUNTERS longs.
        unsafe { ((self.data + 8 * i as u64) as *const i64).read_volatile() }
    }

    fn env(&self, kind: crate::snippet::PointKind) -> MapEnv {
        let mut e = MapEnv {
            point: PointInfo {
                kind,
                ..PointInfo::default()
            },
            ..MapEnv::default()
        };
        for i in 0..COUNTERS {
            e = e.var(
                &format!("n{i}"),
                Type::Int(IntKind::Long),
                VarPlace::Absolute(self.data + 8 * i as u64),
            );
        }
        e.func(
            "record",
            record as *const () as u64,
            FnSig {
                ret: Type::Void,
                params: Some(vec![Type::Int(IntKind::Long)]),
                variadic: false,
                printf_format: None,
            },
        )
    }

    fn points(&self, func: &str, q: &[Where]) -> Vec<Point> {
        let m = self.session.main().expect("main module");
        let f = m
            .functions()
            .by_name(func)
            .next()
            .unwrap_or_else(|| panic!("no {func}"));
        let mut out: Vec<Point> = q
            .iter()
            .flat_map(|w| point::find(m, f.id, w).unwrap_or_default())
            .collect();
        point::sort(&mut out);
        out
    }

    /// Inserts `source` at every point given.
    fn insert(
        &mut self,
        pts: &[Point],
        source: &str,
    ) -> Result<Vec<super::PointReport>, PatchError> {
        let reqs: Vec<Request> = pts
            .iter()
            .map(|p| Request {
                tag: 1,
                point: p.clone(),
                source: source.into(),
                env: Arc::new(self.env(p.kind.snippet_kind())),
            })
            .collect();
        let m = self.session.main().expect("main module");
        let done = self.patcher.insert(m, &mut self.space, &reqs)?;
        assert!(done.skipped.is_empty(), "skipped: {:?}", done.skipped);
        Ok(done.points)
    }

    fn f1(&self, name: &str) -> extern "C" fn(i32) -> i32 {
        // SAFETY: every int function of the test library has this signature.
        unsafe {
            std::mem::transmute::<usize, extern "C" fn(i32) -> i32>(self.lib.sym(name) as usize)
        }
    }
}

fn entry() -> Vec<Where> {
    vec![Where::Entry]
}

fn exits() -> Vec<Where> {
    vec![Where::Exit]
}

const OPTS: [&str; 2] = ["-O0", "-O2"];

#[test]
fn counts_at_entry_and_exit_are_exact() {
    for opt in OPTS {
        let mut fx = Fixture::new("counts", opt, PatchOptions::default());
        let funcs = ["inc", "sum_to", "classify", "tail", "add3"];
        let before: Vec<Vec<i32>> = funcs
            .iter()
            .map(|f| (-3..130).map(|x| fx.f1(f)(x)).collect())
            .collect();
        for (i, f) in funcs.iter().enumerate() {
            let e = fx.points(f, &entry());
            fx.insert(&e, &format!("n{}++;", 2 * i))
                .unwrap_or_else(|e| panic!("{opt} {f} entry: {e}"));
            let x = fx.points(f, &exits());
            assert!(!x.is_empty(), "{opt} {f} has exits");
            fx.insert(&x, &format!("n{}++;", 2 * i + 1))
                .unwrap_or_else(|e| panic!("{opt} {f} exit: {e}"));
        }
        for (i, f) in funcs.iter().enumerate() {
            let after: Vec<i32> = (-3..130).map(|x| fx.f1(f)(x)).collect();
            assert_eq!(after, before[i], "{opt} {f} computes what it did");
        }
        // inc is also called by add3 (twice per call) and tail (once) through the PLT.
        let calls = 133;
        assert_eq!(fx.counter(0), calls * 4, "{opt} inc entries");
        assert_eq!(fx.counter(1), calls * 4, "{opt} inc exits");
        for (i, name) in funcs.iter().enumerate().skip(1) {
            assert_eq!(fx.counter(2 * i), calls, "{opt} {name} entries");
            assert_eq!(fx.counter(2 * i + 1), calls, "{opt} {name} exits");
        }
        assert!(!fx.patcher.tactic_counts().contains_key(&Tactic::Trap));
        let m = fx.session.main().expect("module");
        fx.patcher.remove_all(&mut fx.space).expect("restore");
        let f = m.functions().by_name("inc").next().expect("inc");
        let now = fx
            .space
            .read(RuntimeAddr(fx.lib.sym("inc")), f.size as usize)
            .expect("read");
        assert_eq!(
            Some(&now[..]),
            m.binary.bytes_at(f.addr, f.size),
            "{opt} bytes restored"
        );
    }
}

#[test]
fn call_sites_count_before_and_after() {
    for opt in OPTS {
        let mut fx = Fixture::new("calls", opt, PatchOptions::default());
        let q = [Where::CallBefore {
            callee: Some("inc".into()),
        }];
        let b = fx.points("add3", &q);
        assert_eq!(b.len(), 2, "{opt}: {b:?}");
        let r = fx.insert(&b, "n0++;").expect("call-before");
        // A counter where the ABI leaves the flags dead is the bare `inc`: nothing saved.
        assert!(r.iter().all(|r| r.saves == "nothing"), "{r:?}");
        let q = [Where::CallAfter {
            callee: Some("inc".into()),
        }];
        let a = fx.points("add3", &q);
        fx.insert(&a, "n1 = n1 + $return;").expect("call-after");
        for x in 0..10 {
            assert_eq!(fx.f1("add3")(x), 2 * x + 4);
        }
        assert_eq!(fx.counter(0), 20, "{opt}");
        // inc(x) + inc(x+1) summed over x = 0..10: sum of (2x + 3).
        assert_eq!(
            fx.counter(1),
            (0..10).map(|x| 2 * x + 3).sum::<i64>(),
            "{opt}"
        );
    }
}

#[test]
fn snippets_see_arguments_return_values_and_run_in_order() {
    for opt in OPTS {
        let mut fx = Fixture::new("args", opt, PatchOptions::default());
        let e = fx.points("inc", &entry());
        let x = fx.points("inc", &exits());
        fx.insert(&e, "n0 = $0; n2 = n2 * 10 + 1;").expect("first");
        fx.insert(&x, "n1 = $return;").expect("exit");
        let _ = fx.f1("inc")(41);
        assert_eq!(
            (fx.counter(0), fx.counter(1), fx.counter(2)),
            (41, 42, 1),
            "{opt}"
        );
        let mut fx = Fixture::new("order", opt, PatchOptions::default());
        let e = fx.points("sum_to", &entry());
        let env = Arc::new(fx.env(e[0].kind.snippet_kind()));
        let reqs: Vec<Request> = ["n3 = n3 * 10 + 1;", "n3 = n3 * 10 + 2;"]
            .iter()
            .enumerate()
            .map(|(i, s)| Request {
                tag: i as u32 + 1,
                point: e[0].clone(),
                source: (*s).into(),
                env: env.clone(),
            })
            .collect();
        let m = fx.session.main().expect("module");
        fx.patcher
            .insert(m, &mut fx.space, &reqs)
            .expect("two snippets");
        assert_eq!(fx.f1("sum_to")(4), 18);
        assert_eq!(fx.counter(3), 12, "{opt}: in insertion order");
    }
}

#[test]
fn return_value_can_be_replaced() {
    for opt in OPTS {
        let mut fx = Fixture::new("ret42", opt, PatchOptions::default());
        let x = fx.points("classify", &exits());
        fx.insert(&x, "$return = 42;").expect("exit");
        for v in [-5, 0, 7, 500] {
            assert_eq!(fx.f1("classify")(v), 42, "{opt}");
        }
        assert_eq!(fx.f1("inc")(1), 2);
    }
}

#[test]
fn calls_out_preserve_registers_and_vector_state() {
    for opt in OPTS {
        let mut fx = Fixture::new("callout", opt, PatchOptions::default());
        // SAFETY: driver has this signature.
        let driver: extern "C" fn(i32) -> f64 =
            unsafe { std::mem::transmute(fx.lib.sym("driver") as usize) };
        let want = driver(50);
        let e = fx.points("leaf2", &entry());
        RECORDED.store(0, Ordering::SeqCst);
        RECORD_CALLS.store(0, Ordering::SeqCst);
        let r = fx
            .insert(&e, "record($0); n0++;")
            .expect("call-out snippet");
        assert!(r[0].saves.contains("xsave"), "{}", r[0].saves);
        let mut acc = 0.0f64;
        for i in 0..3 {
            acc += driver(50) * f64::from(i);
        }
        assert_eq!(
            acc,
            want * 3.0,
            "{opt}: driver's live xmm and GPR state survived"
        );
        assert_eq!(RECORD_CALLS.load(Ordering::SeqCst), 150);
        assert_eq!(RECORDED.load(Ordering::SeqCst), 3 * (0..50).sum::<i64>());
        assert_eq!(fx.counter(0), 150);
    }
}

#[test]
fn tiny_functions_get_tactics_other_than_traps() {
    let mut fx = Fixture::new("tactics", "-O2", PatchOptions::default());
    let all = [Where::Entry, Where::Exit];
    let m = fx.session.main().expect("module");
    let rows = describe_points(m, &fx.patcher, &fx.points("needs_trap", &exits()));
    assert!(
        rows.iter()
            .any(|r| r.tactic == Some(Tactic::Trap) && r.why.contains("cannot be relocated")),
        "{rows:#?}"
    );
    let err = fx
        .insert(&fx.points("needs_trap", &exits()), "n9++;")
        .expect_err("traps are refused");
    assert!(matches!(err, PatchError::NeedsTrap { .. }), "{err}");

    for (i, f) in ["inc", "pun_entry", "mid_ret"].iter().enumerate() {
        let before: Vec<i32> = (-2..5).map(|x| fx.f1(f)(x)).collect();
        let p = fx.points(f, &all);
        let entries = p
            .iter()
            .filter(|p| p.kind == PointKind::Entry)
            .cloned()
            .collect::<Vec<_>>();
        let exits = p
            .iter()
            .filter(|p| p.kind != PointKind::Entry)
            .cloned()
            .collect::<Vec<_>>();
        fx.insert(&entries, &format!("n{}++;", 2 * i))
            .unwrap_or_else(|e| panic!("{f}: {e}"));
        fx.insert(&exits, &format!("n{}++;", 2 * i + 1))
            .unwrap_or_else(|e| panic!("{f}: {e}"));
        let after: Vec<i32> = (-2..5).map(|x| fx.f1(f)(x)).collect();
        assert_eq!(after, before, "{f}");
        assert_eq!((fx.counter(2 * i), fx.counter(2 * i + 1)), (7, 7), "{f}");
    }
    let counts = fx.patcher.tactic_counts();
    assert!(counts.contains_key(&Tactic::Pun), "{counts:?}");
    assert!(counts.contains_key(&Tactic::RelocateFunction), "{counts:?}");
    assert!(!counts.contains_key(&Tactic::Trap), "{counts:?}");
}

/// Calls `f(41)` from assembly with sentinels in every caller-saved register the callee
/// (`inc`: `lea eax,[rdi+1]; ret` at -O2) leaves alone, and the carry flag set; returns what
/// came back: (rax, GPRs, xmm low halves, rflags).
fn call_with_sentinels(f: u64) -> (u64, [u64; 7], [f64; 8], u64) {
    let g: [u64; 7] = std::array::from_fn(|i| 0x5e00_0000_0000_0000 | (i as u64) << 8);
    let x: [f64; 8] = std::array::from_fn(|i| 1.5 + i as f64);
    let mut go = g;
    let mut xo = x;
    let ret: u64;
    let flags: u64;
    // SAFETY: calls a C function of the test library (int -> int) with a valid stack; every
    // register it may change per the ABI is an operand or marked clobbered.
    unsafe {
        std::arch::asm!(
            "stc",
            "call {f}",
            "pushfq",
            "pop {fl}",
            f = in(reg) f,
            fl = lateout(reg) flags,
            inout("rdi") 41u64 => _,
            lateout("rax") ret,
            inout("rcx") go[0], inout("rdx") go[1], inout("rsi") go[2], inout("r8") go[3],
            inout("r9") go[4], inout("r10") go[5], inout("r11") go[6],
            inout("xmm0") xo[0], inout("xmm1") xo[1], inout("xmm2") xo[2], inout("xmm3") xo[3],
            inout("xmm8") xo[4], inout("xmm9") xo[5], inout("xmm14") xo[6], inout("xmm15") xo[7],
            out("xmm4") _, out("xmm5") _, out("xmm6") _, out("xmm7") _,
            out("xmm10") _, out("xmm11") _, out("xmm12") _, out("xmm13") _,
        );
    }
    assert_eq!(go, g, "inc itself leaves the sentinels alone");
    assert_eq!(xo, x, "inc itself leaves the xmm sentinels alone");
    (ret, go, xo, flags)
}

#[test]
fn registers_flags_and_vectors_survive_a_call_out() {
    let options = PatchOptions {
        always_save_flags: true,
        ..PatchOptions::default()
    };
    let mut fx = Fixture::new("sentinels", "-O2", options);
    let f = fx.lib.sym("inc");
    let (r0, g0, x0, fl0) = call_with_sentinels(f);
    assert_eq!(r0 as u32, 42);
    let e = fx.points("inc", &entry());
    let r = fx
        .insert(&e, "record($0); n0 = $0 * 2;")
        .expect("call-out at entry");
    assert!(r[0].saves.contains("flags"), "{}", r[0].saves);
    let (r1, g1, x1, fl1) = call_with_sentinels(f);
    assert_eq!(r1 as u32, 42);
    assert_eq!(g1, g0, "caller-saved GPRs survive");
    assert_eq!(x1, x0, "xmm registers survive");
    assert_eq!(fl1 & 1, fl0 & 1, "the carry flag survives");
    assert_eq!(fl0 & 1, 1);
    assert_eq!(fx.counter(0), 82);
}

#[test]
fn removing_by_tag_keeps_the_other_snippets_and_restores_bare_sites() {
    for opt in OPTS {
        let mut fx = Fixture::new("remove", opt, PatchOptions::default());
        let e = fx.points("sum_to", &entry());
        let x = fx.points("inc", &exits());
        let env = Arc::new(fx.env(e[0].kind.snippet_kind()));
        let xenv = Arc::new(fx.env(x[0].kind.snippet_kind()));
        let mut reqs: Vec<Request> = ["n0++;", "n1++;"]
            .iter()
            .enumerate()
            .map(|(i, s)| Request {
                tag: i as u32 + 1,
                point: e[0].clone(),
                source: (*s).into(),
                env: env.clone(),
            })
            .collect();
        reqs.extend(x.iter().map(|p| Request {
            tag: 3,
            point: p.clone(),
            source: "n2++;".into(),
            env: xenv.clone(),
        }));
        let m = fx.session.main().expect("module");
        fx.patcher.insert(m, &mut fx.space, &reqs).expect("insert");
        // Every snippet written is kept checked, and none more.
        assert_eq!(fx.patcher.checked_snippets(), 2 + x.len(), "{opt}");
        let f = m.functions().by_name("inc").next().expect("inc");
        let original = m.binary.bytes_at(f.addr, f.size).expect("bytes").to_vec();
        assert_eq!(fx.f1("sum_to")(4), 18);
        assert_eq!(fx.f1("inc")(4), 5);
        assert_eq!((fx.counter(0), fx.counter(1), fx.counter(2)), (1, 1, 1));

        // One of two snippets at a site: the other keeps running.
        assert_eq!(fx.patcher.remove(m, &mut fx.space, 1).expect("remove 1"), 1);
        assert_eq!(fx.patcher.checked_snippets(), 1 + x.len(), "{opt}");
        assert_eq!(fx.f1("sum_to")(4), 18, "{opt}");
        assert_eq!((fx.counter(0), fx.counter(1)), (1, 2), "{opt}");
        // The last snippet at a site: its bytes come back.
        assert_eq!(
            fx.patcher.remove(m, &mut fx.space, 3).expect("remove 3"),
            x.len()
        );
        assert_eq!(fx.f1("inc")(4), 5);
        assert_eq!(fx.counter(2), 1, "{opt}: inc's exit is bare again");
        let now = fx
            .space
            .read(RuntimeAddr(fx.lib.sym("inc")), f.size as usize)
            .expect("read");
        assert_eq!(now, original, "{opt}: inc's bytes are the file's");
        assert_eq!(fx.patcher.remove(m, &mut fx.space, 3).expect("again"), 0);
        assert_eq!(fx.patcher.checked_snippets(), 1, "{opt}");
        fx.patcher.remove(m, &mut fx.space, 2).expect("remove 2");
        assert!(fx.patcher.is_empty());
        assert_eq!(fx.patcher.checked_snippets(), 0, "{opt}");
        assert_eq!(fx.f1("sum_to")(4), 18);
        assert_eq!(fx.counter(1), 2, "{opt}");
    }
}

/// An exit at a conditional tail call (`js neg_one`) counts only when the branch is taken:
/// run before the branch, it counted every call (python3's `PyObject_Malloc` had twice as
/// many exits as entries), here 133 + 131.
#[test]
fn an_exit_at_a_conditional_tail_call_counts_only_when_taken() {
    let mut fx = Fixture::new("cond_tail", "-O2", PatchOptions::default());
    let before: Vec<i32> = (-3..130).map(|x| fx.f1("cond_tail")(x)).collect();
    let e = fx.points("cond_tail", &entry());
    let x = fx.points("cond_tail", &exits());
    assert_eq!(x.len(), 2, "{x:?}");
    fx.insert(&e, "n0++;").expect("entry");
    fx.insert(&x, "n1++;").expect("exits");
    let after: Vec<i32> = (-3..130).map(|x| fx.f1("cond_tail")(x)).collect();
    assert_eq!(after, before);
    assert_eq!((fx.counter(0), fx.counter(1)), (133, 133));
}

/// A view holding only what [`crate::code::CodeView`] promises: the file's bytes, the function list and
/// each function's CFG, copied out of the session. The patcher plans the same sites from it
/// as from the module, so it needs nothing else of the session.
struct Copied<'b> {
    binary: &'b crate::elf::Binary,
    functions: Vec<crate::symbols::Function>,
    cfgs: Vec<crate::cfg::Cfg>,
}

impl Copied<'_> {
    /// What module `m` promises as a code view, copied out of it.
    fn of(m: &crate::session::Module) -> Copied<'_> {
        Copied {
            binary: &m.binary,
            functions: crate::code::CodeView::functions(m).to_vec(),
            cfgs: (0..m.functions().functions().len())
                .map(|i| crate::code::CodeView::cfg(m, crate::symbols::FuncId(i as u32)).clone())
                .collect(),
        }
    }
}

impl crate::code::CodeBytes for Copied<'_> {
    fn bytes_at(&self, addr: crate::addr::LinkAddr, len: u64) -> Option<&[u8]> {
        self.binary.bytes_at(addr, len)
    }
}

impl crate::code::CodeView for Copied<'_> {
    fn functions(&self) -> &[crate::symbols::Function] {
        &self.functions
    }

    fn cfg(&self, f: crate::symbols::FuncId) -> &crate::cfg::Cfg {
        &self.cfgs[f.0 as usize]
    }
}

#[test]
fn the_patcher_plans_from_the_code_view_alone() {
    let fx = Fixture::new("view", "-O2", PatchOptions::default());
    let m = fx.session.main().expect("module");
    let copied = Copied::of(m);
    let mut points = Vec::new();
    for f in [
        "inc",
        "pun_entry",
        "mid_ret",
        "needs_trap",
        "classify",
        "add3",
    ] {
        points.extend(fx.points(f, &entry()));
        points.extend(fx.points(f, &exits()));
    }
    // Fresh patchers: each caches what it derives from the code (padding, foreign targets).
    let fresh = || Patcher::new(0, PatchOptions::default());
    let from_module = fresh().plan(m, &points);
    let from_view = fresh().plan(&copied, &points);
    assert!(from_module.sites.len() >= 6, "{:?}", from_module.sites);
    assert_eq!(from_view.sites, from_module.sites);
    assert_eq!(from_view.refused, from_module.refused);
    assert_eq!(
        format!("{:?}", describe_points(&copied, &fresh(), &points)),
        format!("{:?}", describe_points(m, &fresh(), &points))
    );
}

/// A view counting the CFGs asked of it.
struct Counting<'v> {
    view: &'v Copied<'v>,
    cfgs: std::cell::Cell<usize>,
}

impl crate::code::CodeBytes for Counting<'_> {
    fn bytes_at(&self, addr: crate::addr::LinkAddr, len: u64) -> Option<&[u8]> {
        self.view.bytes_at(addr, len)
    }
}

impl crate::code::CodeView for Counting<'_> {
    fn functions(&self) -> &[crate::symbols::Function] {
        self.view.functions()
    }

    fn cfg(&self, f: crate::symbols::FuncId) -> &crate::cfg::Cfg {
        self.cfgs.set(self.cfgs.get() + 1);
        self.view.cfg(f)
    }
}

/// The module-wide facts a plan reads, computed beforehand (on another thread, as `consult`
/// does beside the module's analysis), leave the first plan nothing to go over but the
/// function it plans in: computed by that plan, python3's took the tracer thread 10 to 16 s
/// under load, the program stopped for stack samples and the search waiting meanwhile.
#[test]
fn module_facts_computed_beforehand_leave_the_first_plan_its_own_function() {
    let fx = Fixture::new("facts", "-O2", PatchOptions::default());
    let m = fx.session.main().expect("module");
    let copied = Copied::of(m);
    let functions = copied.functions.len();
    assert!(functions > 10, "{functions} functions");
    let points = fx.points("inc", &entry());
    let planned = |p: &Patcher| {
        let counting = Counting {
            view: &copied,
            cfgs: std::cell::Cell::new(0),
        };
        let sites = p.plan(&counting, &points).sites;
        (sites, counting.cfgs.get())
    };
    let (cold, asked) = planned(&Patcher::new(0, PatchOptions::default()));
    assert!(
        asked >= functions,
        "{asked} CFGs asked for {functions} functions"
    );
    let p = Patcher::new(0, PatchOptions::default());
    let facts = p.facts();
    assert!(!facts.ready());
    std::thread::scope(|s| {
        s.spawn(|| facts.compute(&copied));
    });
    assert!(p.facts().ready());
    let (warm, asked) = planned(&p);
    assert_eq!(warm, cold);
    assert!(
        asked < 5,
        "{asked} CFGs asked with the facts computed beforehand"
    );
}

fn loop_at(at: point::LoopAt) -> Vec<Where> {
    vec![Where::Loop {
        name: "loop_1".into(),
        at,
    }]
}

/// An edge trampoline's snippets run after the branch has read the flags: a counter on a back
/// edge to a header that writes the flags first saves nothing (it saved the flags, as the
/// branch reads them).
#[test]
fn an_edge_trampoline_saves_the_flags_only_where_the_edge_target_reads_them() {
    let mut fx = Fixture::new("edge_flags", "-O2", PatchOptions::default());
    let ends = fx.points("count_down", &loop_at(point::LoopAt::IterEnd));
    let m = fx.session.main().expect("module");
    let f = m
        .functions()
        .by_name("count_down")
        .next()
        .expect("count_down")
        .id;
    let header = point::PointSource::loops(m, f).loops[0].header;
    let back: Vec<Point> = ends
        .iter()
        .filter(|p| matches!(p.edge, Some(point::OnEdge::Edge { to, .. }) if to == header))
        .cloned()
        .collect();
    assert_eq!(back.len(), 1, "{ends:?}");
    let r = fx.insert(&back, "n0++;").expect("back edge");
    assert_eq!(r[0].saves, "nothing", "{r:?}");
    for x in 0..6 {
        assert_eq!(fx.f1("count_down")(x), 2 * x.max(0));
    }
    // The back edge is taken x - 1 times for x >= 1.
    assert_eq!(fx.counter(0), 1 + 2 + 3 + 4);
    // The exit's target is a `ret`, after which the ABI keeps no flags: nothing saved either.
    let exit: Vec<Point> = ends.iter().filter(|p| !back.contains(p)).cloned().collect();
    let r = fx.insert(&exit, "n1++;").expect("exit edge");
    assert_eq!(r[0].saves, "nothing", "{r:?}");
    for x in 0..6 {
        assert_eq!(fx.f1("count_down")(x), 2 * x.max(0));
    }
    assert_eq!(fx.counter(1), 5, "left once per call with x >= 1");
}

/// Where the entry block is a loop header, the function's entry and the loop's entry from the
/// caller run once per call, the header's iteration begin on every pass: the function is
/// copied whole and its back edge skips what runs on arrival.
#[test]
fn a_looping_entry_is_entered_once_per_call() {
    let mut fx = Fixture::new("looping_entry", "-O2", PatchOptions::default());
    let before: Vec<i32> = (0..10).map(|x| fx.f1("spin_entry")(x)).collect();
    let e = fx.points("spin_entry", &entry());
    let r = fx.insert(&e, "n0++;").expect("entry");
    assert_eq!(r[0].tactic, Tactic::RelocateFunction, "{r:?}");
    let l = fx.points("spin_entry", &loop_at(point::LoopAt::Entry));
    assert_eq!(l.len(), 1, "{l:?}");
    fx.insert(&l, "n1++;").expect("loop entry");
    let b = fx.points("spin_entry", &loop_at(point::LoopAt::IterBegin));
    fx.insert(&b, "n2++;").expect("iter-begin");
    let after: Vec<i32> = (0..10).map(|x| fx.f1("spin_entry")(x)).collect();
    assert_eq!(after, before);
    assert_eq!(fx.counter(0), 10, "function entries");
    assert_eq!(fx.counter(1), 10, "loop entries");
    // One pass for x <= 1, x passes otherwise.
    assert_eq!(
        fx.counter(2),
        1 + 1 + (2..10).sum::<i64>(),
        "iteration begins"
    );
}

/// A function copied whole for one point and keeping another's snippet when that point's goes
/// gets its own code back, the other point a site of its own: the copy costs where nothing
/// is measured (each call in it returns to the original, which jumps back; python3's
/// interpreter copied for a loop timer's exit lost 25% of its speed), and it stayed for as
/// long as any snippet of the function did (a counter beside the timer).
#[test]
fn a_functions_copy_goes_with_the_point_that_needed_it() {
    let mut fx = Fixture::new("uncopy", "-O2", PatchOptions::default());
    let before: Vec<i32> = (0..10).map(|x| fx.f1("spin_entry")(x)).collect();
    let m = fx.session.main().expect("module");
    let request = |fx: &Fixture, tag: u32, p: &Point, source: &str| Request {
        tag,
        point: p.clone(),
        source: source.into(),
        env: Arc::new(fx.env(p.kind.snippet_kind())),
    };
    let x = fx.points("spin_entry", &exits());
    let exit: Vec<Request> = x.iter().map(|p| request(&fx, 2, p, "n1++;")).collect();
    let r = fx.patcher.insert(m, &mut fx.space, &exit).expect("exit");
    assert!(
        r.points
            .iter()
            .all(|p| p.tactic != Tactic::RelocateFunction),
        "{r:?}"
    );
    let e = fx.points("spin_entry", &entry());
    let entry = [request(&fx, 1, &e[0], "n0++;")];
    let r = fx.patcher.insert(m, &mut fx.space, &entry).expect("entry");
    assert_eq!(r.points[0].tactic, Tactic::RelocateFunction, "{r:?}");
    let copied = fx.patcher.tactic_counts();
    assert_eq!(
        copied.get(&Tactic::RelocateFunction),
        Some(&1),
        "{copied:?}"
    );
    let during: Vec<i32> = (0..10).map(|x| fx.f1("spin_entry")(x)).collect();
    assert_eq!(during, before);
    assert_eq!((fx.counter(0), fx.counter(1)), (10, 10));

    // The entry's snippet goes: the exit's stays, in a site of its own.
    assert_eq!(fx.patcher.remove(m, &mut fx.space, 1).expect("remove"), 1);
    let counts = fx.patcher.tactic_counts();
    assert!(
        !counts.contains_key(&Tactic::RelocateFunction) && !counts.is_empty(),
        "{counts:?}"
    );
    let after: Vec<i32> = (0..10).map(|x| fx.f1("spin_entry")(x)).collect();
    assert_eq!(after, before);
    assert_eq!((fx.counter(0), fx.counter(1)), (10, 20));
    fx.patcher
        .remove(m, &mut fx.space, 2)
        .expect("remove the exit's");
    assert!(fx.patcher.is_empty());
    let f = m
        .functions()
        .by_name("spin_entry")
        .next()
        .expect("spin_entry");
    let now = fx
        .space
        .read(RuntimeAddr(fx.lib.sym("spin_entry")), f.size as usize)
        .expect("read");
    let original = m.binary.bytes_at(f.addr, f.size).expect("bytes").to_vec();
    assert_eq!(now, original, "spin_entry's bytes are the file's");
}

/// A looping entry in a function with a jump table (`spin_switch`, whose cases loop back to
/// its first instruction): the function is copied whole and its table read from a private
/// copy leading into the copy, so its entry counts once per call and its exits once per
/// return. Such entries used to be refused ("a function with indirect jumps cannot be
/// copied"): cc1's 0x7f12a0 and seven more went unjudged in `whole-program cc1`.
#[test]
fn a_looping_entry_with_a_jump_table_is_entered_once_per_call() {
    let mut fx = Fixture::new("looping_table", "-O2", PatchOptions::default());
    let xs: Vec<i32> = (-3..12).collect();
    let before: Vec<i32> = xs.iter().map(|&x| fx.f1("spin_switch")(x)).collect();
    let e = fx.points("spin_switch", &entry());
    let r = fx.insert(&e, "n0++;").expect("entry");
    assert_eq!(r[0].tactic, Tactic::RelocateFunction, "{r:?}");
    let x = fx.points("spin_switch", &exits());
    assert_eq!(x.len(), 2, "{x:?}");
    fx.insert(&x, "n1++;").expect("exits");
    let after: Vec<i32> = xs.iter().map(|&x| fx.f1("spin_switch")(x)).collect();
    assert_eq!(after, before);
    assert_eq!(fx.counter(0), xs.len() as i64, "entries");
    assert_eq!(fx.counter(1), xs.len() as i64, "exits");
}

/// Jump-table edges into blocks other edges reach too (`fold`'s cases falling into the next
/// case's block, its hole leading to the default the guard reaches), in a library loaded at a
/// bias (a PIC table of offsets): each edge's counter counts exactly the calls whose entry
/// leads to its target, `fold` computes what it did, the original table is never written, and
/// removing the snippets gives the code its bytes back.
#[test]
fn jump_table_edges_into_shared_blocks_count_exactly_and_go_away() {
    use crate::cfg::{EdgeKind, TableEntry};
    for opt in OPTS {
        let mut fx = Fixture::new("table_edges", opt, PatchOptions::default());
        let ops: Vec<i32> = (-2..13).chain(0..10).chain([3, 3, 7, 9, 9, 9]).collect();
        let before: Vec<i32> = ops.iter().map(|&x| fx.f1("fold")(x)).collect();
        let (f, t, shared) = {
            let m = fx.session.main().expect("module");
            let f = m.functions().by_name("fold").next().expect("fold").clone();
            let cfg = &m.analysis().function(f.id).cfg;
            assert_eq!(cfg.jump_tables.len(), 1, "{opt}: {cfg:?}");
            let t = cfg.jump_tables[0].clone();
            let TableEntry::Relative { base } = t.entry else {
                panic!("{opt}: a PIC table holds offsets: {t:?}");
            };
            // The table's targets by index, read from the file; values 0..=9 go through it.
            let target = |i: u64| {
                let at = crate::addr::LinkAddr(t.table.0 + 4 * i);
                let e = m.binary.bytes_at(at, 4).expect("entry");
                let off = i32::from_le_bytes(e.try_into().expect("4 bytes"));
                base.0.wrapping_add(off as i64 as u64)
            };
            let jump_block = cfg.block_containing(t.jump).expect("the jump's block");
            let shared: Vec<(Point, i64)> = cfg
                .edges
                .iter()
                .filter(|e| e.kind == EdgeKind::JumpTable && e.from == jump_block)
                .filter(|e| cfg.predecessors(e.to).count() > 1)
                .map(|e| {
                    let to = cfg.block(e.to).start;
                    let w = Where::Edge {
                        from: cfg.block(e.from).start,
                        to,
                    };
                    let p = point::find(m, f.id, &w)
                        .expect("the edge's point")
                        .remove(0);
                    let want = ops
                        .iter()
                        .filter(|&&x| (0..10).contains(&x) && target(x as u64) == to.0)
                        .count() as i64;
                    (p, want)
                })
                .collect();
            assert!(!shared.is_empty(), "{opt}: {cfg:?}");
            (f, t, shared)
        };
        let bias = fx.lib.sym("fold") - f.addr.0;
        let table_bytes = |space: &InProcess| {
            space
                .read(RuntimeAddr(t.table.0 + bias), 40)
                .expect("read the table")
        };
        let original = table_bytes(&fx.space);
        for (i, (p, _)) in shared.iter().enumerate() {
            let r = fx
                .insert(std::slice::from_ref(p), &format!("n{i}++;"))
                .expect("insert");
            assert_eq!(r.len(), 1, "{opt}: {r:?}");
            assert!(r[0].patch_at.0 <= t.load.0, "{opt}: {r:?}");
        }
        let after: Vec<i32> = ops.iter().map(|&x| fx.f1("fold")(x)).collect();
        assert_eq!(after, before, "{opt}");
        for (i, (p, want)) in shared.iter().enumerate() {
            assert_eq!(fx.counter(i), *want, "{opt}: edge {:?}", p.edge);
        }
        assert_eq!(
            table_bytes(&fx.space),
            original,
            "{opt}: the original table is untouched"
        );
        let m = fx.session.main().expect("module");
        fx.patcher.remove(m, &mut fx.space, 1).expect("remove");
        assert!(fx.patcher.is_empty());
        let now = fx
            .space
            .read(RuntimeAddr(f.addr.0 + bias), f.size as usize)
            .expect("read fold");
        assert_eq!(
            now,
            m.binary.bytes_at(f.addr, f.size).expect("bytes"),
            "{opt}: fold's bytes are the file's"
        );
        let counts: Vec<i64> = (0..shared.len()).map(|i| fx.counter(i)).collect();
        let again: Vec<i32> = ops.iter().map(|&x| fx.f1("fold")(x)).collect();
        assert_eq!(again, before, "{opt}");
        let still: Vec<i64> = (0..shared.len()).map(|i| fx.counter(i)).collect();
        assert_eq!(still, counts, "{opt}: no counter runs once removed");
    }
}

/// A computed goto's table is indexed by a value nothing bounds: a private copy's size is
/// unknown, so its edges into blocks with other ways in are refused with that reason rather
/// than guessed.
#[test]
fn a_table_nothing_bounds_is_refused_with_the_reason() {
    use crate::cfg::EdgeKind;
    let path = crate::testutil::compile(
        "gotos_refused",
        include_str!("../../../../tests/corpus/gotos.c"),
        false,
        &["-O2", "-fno-pie", "-no-pie"],
    );
    let s = crate::testutil::open(&path);
    let m = s.main().expect("module");
    let f = m.functions().by_name("run").next().expect("run").clone();
    let cfg = &m.analysis().function(f.id).cfg;
    let mut refused = 0;
    for e in cfg.edges.iter().filter(|e| e.kind == EdgeKind::JumpTable) {
        if cfg.predecessors(e.to).count() < 2 {
            continue;
        }
        let w = Where::Edge {
            from: cfg.block(e.from).start,
            to: cfg.block(e.to).start,
        };
        let p = point::find(m, f.id, &w)
            .expect("the edge's point")
            .remove(0);
        let why = super::edge::place(m, &p).expect_err("an unbounded table's edge");
        assert!(why.contains("nothing bounds the index"), "{why}");
        refused += 1;
    }
    assert!(refused > 0, "run's tables lead into shared blocks: {cfg:?}");
}

/// A trampoline laid out from a snippet checked before (as a relay lays it out), and from its
/// code generated once and moved to each address, is byte for byte the one laid out from its
/// text, at every address and with the flags live or not.
#[test]
fn a_snippet_checked_once_lays_out_the_same_bytes_as_its_text() {
    use super::layout::{decode_at, lay_out, PointCode, SnippetSrc};
    use std::collections::HashMap;
    let env = MapEnv::default()
        .var(
            "n",
            Type::Int(IntKind::Long),
            VarPlace::Absolute(0x7000_1000),
        )
        .var(
            "m",
            Type::Int(IntKind::Int),
            VarPlace::Absolute(0x7000_2000),
        )
        .func(
            "record",
            0x7000_3000,
            FnSig {
                ret: Type::Void,
                params: Some(vec![Type::Int(IntKind::Long)]),
                variadic: false,
                printf_format: None,
            },
        );
    // push rbp; mov rbp, rsp; sub rsp, 16; mov eax, [rip+0x100]
    let code = [
        0x55, 0x48, 0x89, 0xe5, 0x48, 0x83, 0xec, 0x10, 0x8b, 0x05, 0x00, 0x01, 0x00, 0x00,
    ];
    let at = 0x7000_0000u64;
    for source in [
        "n++;",
        "m = m * 3 + 1; if (m > 7) n = n + m;",
        "record(n); n--;",
    ] {
        let program = crate::snippet::check_source(source, &env)
            .0
            .expect("checks");
        for flags_live in [false, true] {
            // One memo through every base: its code is moved from the first.
            let memo = super::movable::Memo::new();
            for base in [0x7000_8000u64, 0x7001_0004, 0x6fff_0000] {
                let lay = |checked, memo| {
                    let mut pc = PointCode::empty(super::VectorSave::default());
                    pc.flags_live = flags_live;
                    pc.snippets.push(SnippetSrc {
                        source,
                        env: &env,
                        checked,
                        memo,
                    });
                    let codes: HashMap<u64, PointCode> = [(at, pc)].into_iter().collect();
                    lay_out(&[decode_at(&code, at)], &codes, base).expect("lays out")
                };
                let text = lay(None, None);
                for (checked, how) in [
                    (lay(Some(&program), None), "checked"),
                    (lay(Some(&program), Some(&memo)), "moved"),
                ] {
                    assert_eq!(text.bytes, checked.bytes, "{source} {how} at {base:#x}");
                    assert_eq!(text.map, checked.map, "{source} {how} at {base:#x}");
                }
            }
            assert!(matches!(memo.get(), Some(Some(_))), "{source}: not kept");
        }
    }
}

/// A site laid out again (for a second request at its points, and again once that request
/// is taken out) knows from its first layout whether the flags are live at its points: each
/// layout walked the function's CFG again for each of them, and a loop timer of python3's
/// interpreter lays out again the 228 sites it shares with another timer, at its insert and
/// at its removal (13 to 15% of gsh's CPU time during `consult`).
#[test]
fn a_site_laid_out_again_walks_no_cfg_for_the_flags() {
    let mut fx = Fixture::new("flagwalks", "-O2", PatchOptions::default());
    let before: Vec<i32> = (-3..40).map(|x| fx.f1("sum_to")(x)).collect();
    let pts = fx.points("sum_to", &loop_at(point::LoopAt::IterBegin));
    assert!(!pts.is_empty());
    fx.insert(&pts, "n0++;").expect("first request");
    let facts = fx.patcher.facts();
    let walks = facts.flag_walks();
    assert!(walks > 0, "the first layout found the flags' liveness");
    let second: Vec<Request> = pts
        .iter()
        .map(|p| Request {
            tag: 2,
            point: p.clone(),
            source: "n1++;".into(),
            env: Arc::new(fx.env(p.kind.snippet_kind())),
        })
        .collect();
    let m = fx.session.main().expect("main module");
    let done = fx
        .patcher
        .insert(m, &mut fx.space, &second)
        .expect("second request");
    assert_eq!(done.points.len(), pts.len());
    assert_eq!(facts.flag_walks(), walks, "walked again for the relay");
    let mid: Vec<i32> = (-3..40).map(|x| fx.f1("sum_to")(x)).collect();
    assert_eq!(mid, before);
    assert_eq!(fx.counter(1), fx.counter(0));
    assert!(fx.counter(0) > 0);
    fx.patcher.remove(m, &mut fx.space, 2).expect("remove 2");
    assert_eq!(facts.flag_walks(), walks, "walked again for the removal");
    let counted = fx.counter(0);
    let after: Vec<i32> = (-3..40).map(|x| fx.f1("sum_to")(x)).collect();
    assert_eq!(after, before);
    assert_eq!(fx.counter(0), 2 * counted);
}

/// A site laid out again (a second request at its points, then that request taken out)
/// is laid out once, where room for its old size and some more was allocated: it was laid
/// out twice, the first time only to learn its size, which its old trampoline tells.
#[test]
fn a_site_laid_out_again_is_laid_out_once() {
    let mut fx = Fixture::new("relayonce", "-O2", PatchOptions::default());
    let before: Vec<i32> = (-3..40).map(|x| fx.f1("sum_to")(x)).collect();
    let pts = fx.points("sum_to", &entry());
    fx.insert(&pts, "n0++;").expect("first request");
    let sites = fx.patcher.sites().count();
    assert_eq!(sites, 1);
    let new = fx.patcher.layouts();
    assert_eq!(new, 2, "a new site: once for its size, once where it went");
    let second: Vec<Request> = pts
        .iter()
        .map(|p| Request {
            tag: 2,
            point: p.clone(),
            source: "n1++; n2 = n2 + n1 * 3;".into(),
            env: Arc::new(fx.env(p.kind.snippet_kind())),
        })
        .collect();
    let m = fx.session.main().expect("main module");
    fx.patcher
        .insert(m, &mut fx.space, &second)
        .expect("second request");
    assert_eq!(fx.patcher.layouts(), new + 1, "the relay for the second");
    let mid: Vec<i32> = (-3..40).map(|x| fx.f1("sum_to")(x)).collect();
    assert_eq!(mid, before);
    assert_eq!((fx.counter(0), fx.counter(1)), (43, 43));
    fx.patcher.remove(m, &mut fx.space, 1).expect("remove 1");
    assert_eq!(fx.patcher.layouts(), new + 2, "the relay for the removal");
    let after: Vec<i32> = (-3..40).map(|x| fx.f1("sum_to")(x)).collect();
    assert_eq!(after, before);
    assert_eq!((fx.counter(0), fx.counter(1)), (43, 86));
}
