//! Helpers shared by the runtime's integration tests: sum a slot over every thread block, and
//! find the calling thread's block.

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
