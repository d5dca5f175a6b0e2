//! Helpers shared by the runtime's integration tests: sum a slot over every thread block, find
//! the calling thread's block, and build the shared library.

#![allow(dead_code)]

use gsh_rt::events;
use gsh_rt::layout::ThreadHeader;
use gsh_rt::thread::{self, Block};
use std::sync::atomic::Ordering::Relaxed;

/// (count, total_ns) of `slot` summed over all threads.
pub fn slot_total(slot: u32) -> (u64, u64) {
    thread::blocks().fold((0, 0), |(c, t), b| {
        let r = events::slot(b, slot);
        (c + r.count.load(Relaxed), t + r.total_ns.load(Relaxed))
    })
}

/// The calling thread's block (created if needed).
pub fn me() -> Block {
    events::block().expect("thread block")
}

/// The calling thread's header.
pub fn header() -> &'static ThreadHeader {
    me().header()
}

/// `libgsh_rt.so`, built now into a target directory of its own: `cargo test` builds only
/// the rlib for tests, so a `libgsh_rt.so` beside the test binary may be missing or stale,
/// and the running cargo holds the lock on the main target directory.
pub fn shared_library() -> std::path::PathBuf {
    let exe = std::env::current_exe().expect("exe");
    let own = exe
        .parent()
        .and_then(|d| d.parent())
        .and_then(|d| d.parent())
        .expect("target root")
        .join("rt-cdylib");
    let status = std::process::Command::new(env!("CARGO"))
        .args(["build", "-q", "-p", "gsh-rt", "--target-dir"])
        .arg(&own)
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .status()
        .expect("run cargo build -p gsh-rt");
    assert!(status.success(), "cargo build -p gsh-rt failed");
    let so = own.join("debug/libgsh_rt.so");
    assert!(so.exists(), "{} not built", so.display());
    so
}
