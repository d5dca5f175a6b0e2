//! The library unloaded the way gsh unloads it (`gsh_rt_unloading(1)`, then `dlclose`) leaves
//! nothing of itself mapped: not the arena, not a thread block mapped on its own because the
//! arena could not grow, and not a mapping `gsh_rt_alloc` made, whether the runtime registered
//! it as an unwind table or refused it. Before, the lone block and the refused table stayed.
//! Alone in its test binary: it sets the arena's size through the environment before the
//! library starts.

mod common;

use common::shared_library;
use gsh_rt::layout::UnwindEntry;
use std::ffi::{c_void, CString};

fn sym(lib: *mut c_void, name: &str) -> *mut c_void {
    let c = CString::new(name).expect("name");
    // SAFETY: a live handle and a NUL-terminated name.
    let p = unsafe { libc::dlsym(lib, c.as_ptr()) };
    assert!(!p.is_null(), "{name} missing");
    p
}

/// The mappings of this process that hold `addr`, as /proc/self/maps lines.
fn mapped(addr: u64) -> Vec<String> {
    std::fs::read_to_string("/proc/self/maps")
        .expect("maps")
        .lines()
        .filter(|l| {
            let range = l.split_whitespace().next().unwrap_or("");
            let (lo, hi) = range.split_once('-').unwrap_or(("0", "0"));
            let lo = u64::from_str_radix(lo, 16).unwrap_or(0);
            let hi = u64::from_str_radix(hi, 16).unwrap_or(0);
            (lo..hi).contains(&addr)
        })
        .map(str::to_owned)
        .collect()
}

#[test]
fn unloading_leaves_nothing_of_the_runtime_mapped() {
    // One block, and no growth: a second thread's block is mapped on its own.
    std::env::set_var("GSH_RT_ARENA_BLOCKS", "1");
    std::env::set_var("GSH_RT_ARENA_CHUNKS", "1");
    let so = shared_library();
    let c = CString::new(so.to_str().expect("utf-8")).expect("path");
    // SAFETY: loading the runtime; its constructors only calibrate the clock.
    let lib = unsafe { libc::dlopen(c.as_ptr(), libc::RTLD_NOW | libc::RTLD_LOCAL) };
    assert!(!lib.is_null(), "dlopen");
    // SAFETY: the exports' C signatures (rt-abi's `exports::sig`).
    let (thread, alloc, add, unloading) = unsafe {
        (
            std::mem::transmute::<*mut c_void, extern "C" fn() -> *mut u8>(sym(
                lib,
                "gsh_rt_thread",
            )),
            std::mem::transmute::<*mut c_void, extern "C" fn(usize) -> *mut u8>(sym(
                lib,
                "gsh_rt_alloc",
            )),
            std::mem::transmute::<
                *mut c_void,
                unsafe extern "C" fn(*const UnwindEntry, usize) -> i32,
            >(sym(lib, "gsh_rt_add_unwind_table")),
            std::mem::transmute::<*mut c_void, extern "C" fn(i32)>(sym(lib, "gsh_rt_unloading")),
        )
    };
    let first = thread() as u64;
    assert_ne!(first, 0, "the arena's block");
    let lone = std::thread::spawn(move || thread() as u64)
        .join()
        .expect("thread");
    assert_ne!(lone, 0, "a block of its own");
    let entry = |ra| UnwindEntry {
        ra,
        cfa_off: 8,
        base: 0,
        reserved: 0,
        rbp_save: 0,
    };
    let n = 2;
    let len = n * std::mem::size_of::<UnwindEntry>();
    let mut tables = Vec::new();
    for (sorted, want) in [(true, 0), (false, -1)] {
        let at = alloc(len).cast::<UnwindEntry>();
        assert!(!at.is_null(), "gsh_rt_alloc");
        let (a, b) = if sorted {
            (0x1000, 0x2000)
        } else {
            (0x2000, 0x1000)
        };
        // SAFETY: `at` holds `n` entries, fresh from gsh_rt_alloc.
        let rc = unsafe {
            at.write(entry(a));
            at.add(1).write(entry(b));
            add(at, n)
        };
        assert_eq!(rc, want, "registered (sorted: {sorted})");
        tables.push(at as u64);
    }
    let arena = |maps: &str| maps.lines().any(|l| l.contains("gsh-rt-arena"));
    assert!(arena(
        &std::fs::read_to_string("/proc/self/maps").expect("maps")
    ));
    unloading(1);
    // SAFETY: nothing of this test calls into the library any more.
    assert_eq!(unsafe { libc::dlclose(lib) }, 0, "dlclose");
    let maps = std::fs::read_to_string("/proc/self/maps").expect("maps");
    assert!(!maps.contains("libgsh_rt"), "the library stays: {maps}");
    assert!(!arena(&maps), "the arena stays: {maps}");
    assert_eq!(
        mapped(lone),
        Vec::<String>::new(),
        "the lone thread's block"
    );
    for (at, what) in tables.iter().zip(["registered", "refused"]) {
        assert_eq!(mapped(*at), Vec::<String>::new(), "the {what} table");
    }
}
