//! Cost per call of the runtime's entry points, measured the way gsh deploys them: the cdylib
//! `dlopen`ed and called through function pointers (so TLS is the initial-exec word in surplus
//! static TLS). Run from the workspace root:
//!
//! ```sh
//! cargo build --release -p gsh-rt --features probes && \
//!   cargo run --release -p gsh-rt --features probes --example bench
//! ```
//!
//! Each figure is the best of five runs, in ns per iteration, and "added" subtracts the empty
//! loop measured in the same run.

use std::ffi::{c_void, CString};
use std::hint::black_box;
use std::time::Instant;

use gsh_rt::layout::{self, UnwindEntry};
use gsh_rt_abi::exports::{self, sig, Event};

type Count = sig::Count;
type Enter = sig::Timer;
type PathEnter = sig::Path;

fn sym(lib: *mut c_void, name: &str) -> *mut c_void {
    let c = CString::new(name).expect("symbol name");
    // SAFETY: `lib` is a live dlopen handle and `c` a NUL-terminated name.
    let p = unsafe { libc::dlsym(lib, c.as_ptr()) };
    assert!(
        !p.is_null(),
        "{name} not exported (a stale libgsh_rt.so? build it first: cargo build --release -p gsh-rt --features probes)"
    );
    p
}

/// Best-of-five ns per iteration of `f(i)` for `n` iterations.
fn measure(n: u64, mut f: impl FnMut(u64)) -> f64 {
    (0..5)
        .map(|_| {
            let t = Instant::now();
            for i in 0..n {
                f(black_box(i));
            }
            t.elapsed().as_nanos() as f64 / n as f64
        })
        .fold(f64::INFINITY, f64::min)
}

extern "C" fn empty(_: u32) {}

fn main() {
    let exe = std::env::current_exe().expect("current exe");
    let dir = exe.parent().and_then(|d| d.parent()).expect("target dir");
    let so = dir.join("libgsh_rt.so");
    let c = CString::new(so.to_str().expect("utf-8 path")).expect("path");
    // SAFETY: loading our own library, whose constructors only calibrate the clock.
    let lib = unsafe { libc::dlopen(c.as_ptr(), libc::RTLD_NOW) };
    assert!(!lib.is_null(), "cannot dlopen {}", so.display());
    // SAFETY: the symbols have these C signatures (`rt-abi`'s `exports::sig`).
    let (
        count,
        enter,
        exit,
        enter_cpu,
        exit_cpu,
        path_enter,
        path_exit,
        tls_offset,
        add_table,
        gd_count,
        enter_tsc,
        exit_tsc,
        path_enter_tsc,
        path_exit_tsc,
        path_loop_enter,
        path_loop_enter_tsc,
    ) = unsafe {
        (
            std::mem::transmute::<*mut c_void, Count>(sym(lib, exports::COUNT)),
            std::mem::transmute::<*mut c_void, Enter>(sym(lib, Event::Enter.name())),
            std::mem::transmute::<*mut c_void, Enter>(sym(lib, Event::Exit.name())),
            std::mem::transmute::<*mut c_void, Enter>(sym(lib, Event::EnterCpu.name())),
            std::mem::transmute::<*mut c_void, Enter>(sym(lib, Event::ExitCpu.name())),
            std::mem::transmute::<*mut c_void, PathEnter>(sym(lib, Event::PathEnter.name())),
            std::mem::transmute::<*mut c_void, Enter>(sym(lib, Event::PathExit.name())),
            std::mem::transmute::<*mut c_void, sig::TlsOffset>(sym(lib, exports::TLS_OFFSET)),
            std::mem::transmute::<*mut c_void, sig::AddUnwindTable>(sym(
                lib,
                exports::ADD_UNWIND_TABLE,
            )),
            std::mem::transmute::<*mut c_void, Count>(sym(lib, "gsh_rt_probe_gd_count")),
            std::mem::transmute::<*mut c_void, Enter>(sym(lib, Event::Enter.bounded())),
            std::mem::transmute::<*mut c_void, Enter>(sym(lib, Event::Exit.bounded())),
            std::mem::transmute::<*mut c_void, PathEnter>(sym(lib, Event::PathEnter.bounded())),
            std::mem::transmute::<*mut c_void, Enter>(sym(lib, Event::PathExit.bounded())),
            std::mem::transmute::<*mut c_void, PathEnter>(sym(lib, exports::PATH_LOOP_ENTER)),
            std::mem::transmute::<*mut c_void, PathEnter>(sym(lib, exports::PATH_LOOP_ENTER_TSC)),
        )
    };
    let empty: Count = black_box(empty);
    count(0); // create this thread's block
    let off = tls_offset();

    const N: u64 = 20_000_000;
    let base = measure(N, |_| {});
    let call = measure(N, |_| empty(1));
    let r_count = measure(N, |_| count(1));
    let r_gd = measure(N, |_| gd_count(1));
    let r_inline = measure(N, |_| {
        // What a trampoline would inline: load the block, test, increment slot 1's count.
        // SAFETY: the TLS word holds this thread's block (created above); slot 1 exists.
        unsafe {
            std::arch::asm!(
                "mov r11, qword ptr fs:[{off}]",
                "test r11, r11",
                "jz 2f",
                "inc qword ptr [r11 + {rec}]",
                "2:",
                off = in(reg) off,
                rec = const layout::slot_offset(1),
                out("r11") _,
            )
        }
    });
    let sp = 0x7fff_0000_0000u64;
    let r_time = measure(N / 4, |_| {
        enter(2, sp);
        exit(2, sp);
    });
    let r_time_tsc = measure(N / 4, |_| {
        enter_tsc(2, sp);
        exit_tsc(2, sp);
    });
    let r_cpu = measure(200_000, |_| {
        enter_cpu(3, sp);
        exit_cpu(3, sp);
    });
    let r_rdtsc = measure(N, |_| {
        // SAFETY: rdtsc is unprivileged.
        black_box(unsafe { core::arch::x86_64::_rdtsc() });
    });
    let r_mono = measure(N / 4, |_| {
        let mut ts = libc::timespec {
            tv_sec: 0,
            tv_nsec: 0,
        };
        // SAFETY: valid out-pointer.
        unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
        black_box(ts);
    });

    // A fake 8-deep frame-pointer stack, and an 8-deep table-driven one (1000-entry table).
    let mut stack = vec![0u64; 512];
    let at = |s: &Vec<u64>, i: usize| s.as_ptr() as u64 + 8 * i as u64;
    stack[16] = 0x40_1000;
    let mut fp = 20;
    for k in 1..8 {
        stack[fp] = at(&stack, fp + 6);
        stack[fp + 1] = 0x40_1000 + 0x100 * k;
        fp += 6;
    }
    let (rsp_fp, rbp_fp) = (at(&stack, 16), at(&stack, 20));
    let table: Vec<UnwindEntry> = (0..1000u64)
        .map(|k| UnwindEntry {
            ra: 0x6000_0000 + 16 * k,
            cfa_off: 24,
            base: layout::UNWIND_BASE_RSP,
            reserved: 0,
            rbp_save: 0,
        })
        .collect();
    // SAFETY: `table` holds `len` sorted entries and outlives every walk below.
    assert_eq!(unsafe { add_table(table.as_ptr(), table.len()) }, 0);
    let t0 = 300;
    for k in 0..8 {
        stack[t0 + 3 * k] = 0x6000_0000 + 16 * (100 * k as u64 + 7);
    }
    let rsp_tab = at(&stack, t0);
    let r_path_fp = measure(N / 10, |_| {
        path_enter(4, rsp_fp, rbp_fp);
        path_exit(4, rsp_fp);
    });
    let r_path_tab = measure(N / 10, |_| {
        path_enter(5, rsp_tab, 0);
        path_exit(5, rsp_tab);
    });
    let r_path_fp_tsc = measure(N / 10, |_| {
        path_enter_tsc(4, rsp_fp, rbp_fp);
        path_exit_tsc(4, rsp_fp);
    });
    let r_path_tab_tsc = measure(N / 10, |_| {
        path_enter_tsc(5, rsp_tab, 0);
        path_exit_tsc(5, rsp_tab);
    });
    // A loop timed along call paths, inside an open profiled activation of its function
    // (fp depth 8): its entry finds the activation's record and its own record of that path.
    let key = rsp_fp - layout::LOOP_KEY_BELOW_ENTRY;
    path_enter(4, rsp_fp, rbp_fp);
    let r_path_loop = measure(N / 4, |_| {
        path_loop_enter(6, key, 0);
        path_exit(6, key);
    });
    let r_path_loop_tsc = measure(N / 4, |_| {
        path_loop_enter_tsc(6, key, 0);
        path_exit_tsc(6, key);
    });
    path_exit(4, rsp_fp);
    // The loop timer `consult` inserts from every caller: the inline sequence `time` generates
    // (engine `snippet/codegen/rt.rs`, as `consult::probes::calibrate` runs it), on a slot
    // record of its own: count, no open activation, rdtsc and open; at the exit a check,
    // rdtsc, add, close.
    let mut slot = [0u64; 4];
    let r_inline_timer = measure(N / 4, |_| {
        // SAFETY: reads and writes only `slot`'s four words and `fs:[0]` (the thread control
        // block's self pointer the x86-64 Linux ABI guarantees).
        unsafe {
            std::arch::asm!(
                "mov r11, qword ptr fs:[0]",
                "test r11, r11",
                "jz 4f",
                "inc qword ptr [rdi]",
                "mov rcx, qword ptr [rdi + 16]",
                "test rcx, rcx",
                "jz 3f",
                "cmp rsi, rcx",
                "jb 4f",
                "3:",
                "rdtsc",
                "shl rdx, 32",
                "or rax, rdx",
                "mov qword ptr [rdi + 24], rax",
                "mov qword ptr [rdi + 16], rsi",
                "cmp rsi, qword ptr [rdi + 16]",
                "jb 4f",
                "rdtsc",
                "shl rdx, 32",
                "or rax, rdx",
                "sub rax, qword ptr [rdi + 24]",
                "add qword ptr [rdi + 8], rax",
                "mov qword ptr [rdi + 16], 0",
                "4:",
                in("rdi") slot.as_mut_ptr(),
                in("rsi") key,
                out("rax") _,
                out("rcx") _,
                out("rdx") _,
                out("r11") _,
            )
        }
    });
    black_box(&slot);

    println!(
        "gsh-rt bench: {} (dlopen'd), ns per iteration, best of 5",
        so.display()
    );
    println!("{:<40}{:>8}{:>10}", "", "ns", "added");
    let row = |name: &str, v: f64| println!("{name:<40}{v:>8.2}{:>10.2}", v - base);
    row("empty loop", base);
    row("call of an empty C function", call);
    row("gsh_rt_count", r_count);
    row("  same, global-dynamic TLS (probe)", r_gd);
    row("inlined fs:[off] + inc", r_inline);
    row("gsh_rt_enter + gsh_rt_exit (wall)", r_time);
    row("  same, _tsc variants", r_time_tsc);
    row("gsh_rt_enter_cpu + gsh_rt_exit_cpu", r_cpu);
    row("gsh_rt_path_enter + exit, fp depth 8", r_path_fp);
    row("gsh_rt_path_enter + exit, table depth 8", r_path_tab);
    row("  _tsc variants, fp depth 8", r_path_fp_tsc);
    row("  _tsc variants, table depth 8", r_path_tab_tsc);
    row("loop timer inline (time FUNC loop)", r_inline_timer);
    row("gsh_rt_path_loop_enter + exit, depth 8", r_path_loop);
    row("  _tsc variants", r_path_loop_tsc);
    row("  rdtsc", r_rdtsc);
    row("  clock_gettime(CLOCK_MONOTONIC)", r_mono);
}
