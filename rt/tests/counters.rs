//! Counting: exact totals from many threads without atomic read-modify-writes, and blocks of
//! exited threads staying in the list, marked dead (`reuse.rs`: handed on).

mod common;

use gsh_rt::layout::{THREAD_DEAD, THREAD_LIVE};
use gsh_rt::thread;
use std::sync::atomic::Ordering::Relaxed;

#[test]
fn eight_threads_count_exactly() {
    const SLOT: u32 = 1;
    const CALLS: u64 = 1_000_000;
    let threads: Vec<_> = (0..8)
        .map(|_| {
            std::thread::spawn(|| {
                for _ in 0..CALLS {
                    gsh_rt::events::gsh_rt_count(std::hint::black_box(SLOT));
                }
                // SAFETY: gettid has no preconditions.
                (common::me().as_ptr() as usize, unsafe { libc::gettid() })
            })
        })
        .collect();
    let (blocks, workers): (Vec<usize>, Vec<i32>) = threads
        .into_iter()
        .map(|t| t.join().expect("worker"))
        .unzip();
    assert_eq!(common::slot_total(SLOT).0, 8 * CALLS);
    // Every worker's block survives its thread, marked dead by the pthread-key destructor (a
    // worker may have had the block of one that ended before it started, or of an earlier
    // test's thread: its count carries on). A thread started since, by a test running beside
    // this one, may have been handed a dead worker's block: then it is live, and that
    // thread's, not a worker's (a fresh-clone CI run failed here, a block read live).
    let mut distinct = blocks.clone();
    distinct.sort_unstable();
    distinct.dedup();
    let mine: Vec<_> = thread::blocks()
        .filter(|b| distinct.contains(&(b.as_ptr() as usize)))
        .collect();
    assert_eq!(mine.len(), distinct.len());
    let mut counted = 0;
    for b in mine {
        let h = b.header();
        // The thread it is handed to writes its id just after taking it: a moment to do so.
        let handed_on = || {
            let t = std::time::Instant::now();
            loop {
                // SAFETY: an aligned word the taker writes once; a stale read is retried.
                let tid = unsafe { std::ptr::read_volatile(&h.tid) } as i32;
                if !workers.contains(&tid) || t.elapsed().as_millis() > 200 {
                    return !workers.contains(&tid);
                }
                std::thread::yield_now();
            }
        };
        let state = h.state.load(Relaxed);
        assert!(
            state == THREAD_DEAD || (state == THREAD_LIVE && handed_on()),
            "a worker's block is {state}, thread {}'s (workers {workers:?})",
            h.tid
        );
        counted += gsh_rt::events::slot(b, SLOT).count.load(Relaxed);
    }
    assert!(counted >= 8 * CALLS, "{counted}");
}

#[test]
fn live_thread_and_bad_slots() {
    let h = common::header();
    assert_eq!(h.state.load(Relaxed), THREAD_LIVE);
    assert_eq!(h.tid as i32, unsafe { libc::gettid() });
    let before = h.bad_slots.load(Relaxed);
    gsh_rt::events::gsh_rt_count(u32::MAX);
    assert_eq!(h.bad_slots.load(Relaxed), before + 1);
}

#[test]
fn tls_word_is_inlinable() {
    // What generated code does: read fs:[offset] and find the block there.
    let b = common::me().as_ptr() as u64;
    let off = gsh_rt::gsh_rt_tls_offset();
    let v: u64;
    // SAFETY: reads this thread's TLS word at the offset the runtime reported.
    unsafe { std::arch::asm!("mov {v}, qword ptr fs:[{o}]", v = out(reg) v, o = in(reg) off) };
    assert_eq!(v, b);
    let root = unsafe { &*gsh_rt::gsh_rt_root() };
    assert_eq!(root.tls_offset.load(Relaxed), off);
    assert_eq!(root.magic, gsh_rt::layout::ROOT_MAGIC);
}
