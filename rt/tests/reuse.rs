//! A thread's block outlives it, marked dead, and the next thread that needs a block takes it,
//! counts and all: a program that creates threads by the thousand keeps as many blocks as it
//! ever had threads at once, not one per thread it ever made. Alone in its test binary, so
//! no other thread takes the block first.

mod common;

use gsh_rt::layout::{THREAD_DEAD, THREAD_LIVE};
use gsh_rt::thread;
use std::sync::atomic::Ordering::Relaxed;

#[test]
fn a_new_thread_takes_an_exited_threads_block_with_its_counts() {
    const SLOT: u32 = 3;
    let run = || {
        std::thread::spawn(|| {
            gsh_rt::events::gsh_rt_count(std::hint::black_box(SLOT));
            let b = common::me();
            assert_eq!(b.header().state.load(Relaxed), THREAD_LIVE);
            (
                b.as_ptr() as usize,
                b.header().tid,
                gsh_rt::events::slot(b, SLOT).count.load(Relaxed),
            )
        })
        .join()
        .expect("worker")
    };
    let (first, tid1, n1) = run();
    let made = thread::GSH_RT_ROOT.thread_count.load(Relaxed);
    for i in 1..=100 {
        let (block, tid, n) = run();
        assert_eq!(block, first, "thread {i} got a block of its own");
        assert_ne!(tid, tid1);
        assert_eq!(n, n1 + i);
    }
    assert_eq!(thread::GSH_RT_ROOT.thread_count.load(Relaxed), made);
    let b = thread::blocks()
        .find(|b| b.as_ptr() as usize == first)
        .expect("on the list");
    assert_eq!(b.header().state.load(Relaxed), THREAD_DEAD);
    assert_eq!(gsh_rt::events::slot(b, SLOT).count.load(Relaxed), n1 + 100);
}
