//! The deployed shape: `libgsh_rt.so` loaded with `dlopen` into a process that already has
//! threads (its initial-exec TLS word must come from glibc's surplus static TLS and be zero in
//! those threads), and read back through nothing but the exported root, as the mutator does.

mod common;

use common::shared_library;
use gsh_rt::layout::{Root, SlotRecord, ThreadHeader, ROOT_MAGIC, SLOTS_OFFSET};
use std::ffi::{c_void, CString};
use std::sync::atomic::Ordering::{Acquire, Relaxed};
use std::sync::mpsc;

fn sym(lib: *mut c_void, name: &str) -> *mut c_void {
    let c = CString::new(name).expect("name");
    // SAFETY: a live handle and a NUL-terminated name.
    let p = unsafe { libc::dlsym(lib, c.as_ptr()) };
    assert!(!p.is_null(), "{name} missing");
    p
}

#[test]
fn dlopened_library_counts_in_threads_that_predate_it() {
    let so = shared_library();

    // A thread that exists before the library is loaded.
    let (go_tx, go_rx) = mpsc::channel::<usize>();
    let (done_tx, done_rx) = mpsc::channel::<()>();
    let early = std::thread::spawn(move || {
        let count = go_rx.recv().expect("count fn");
        // SAFETY: the address of gsh_rt_count, whose C signature this is.
        let count: extern "C" fn(u32) = unsafe { std::mem::transmute(count) };
        for _ in 0..1000 {
            count(9);
        }
        done_tx.send(()).expect("done");
    });

    let c = CString::new(so.to_str().expect("utf-8")).expect("path");
    // SAFETY: loading the runtime; its constructor only calibrates the clock.
    let lib = unsafe { libc::dlopen(c.as_ptr(), libc::RTLD_NOW | libc::RTLD_LOCAL) };
    assert!(!lib.is_null(), "dlopen failed (static TLS exhausted?)");
    go_tx.send(sym(lib, "gsh_rt_count") as usize).expect("send");
    done_rx.recv().expect("worker finished");
    early.join().expect("worker");

    // Read like the mutator: from the root, by layout alone.
    // SAFETY: GSH_RT_ROOT is a `Root` in the loaded library.
    let root = unsafe { &*(sym(lib, "GSH_RT_ROOT") as *const Root) };
    assert_eq!(root.magic, ROOT_MAGIC);
    assert!(
        root.tls_offset.load(Relaxed) < 0,
        "static TLS lies below the thread pointer"
    );
    let mut total = 0;
    let mut cur = root.threads.load(Acquire);
    while cur != 0 {
        // SAFETY: list entries are thread blocks laid out per rt-abi's `ThreadHeader`.
        let h = unsafe { &*(cur as *const ThreadHeader) };
        // SAFETY: slot 9 is below max_slots (the default).
        let rec = unsafe { &*((cur + SLOTS_OFFSET + 9 * 32) as *const SlotRecord) };
        total += rec.count.load(Relaxed);
        cur = h.next.load(Relaxed);
    }
    assert_eq!(total, 1000);
}
