//! Timers: wall time of sleeps within a tolerance, thread CPU time, recursion counted once, and
//! frames abandoned by a simulated longjmp credited when a later event reveals them.
//!
//! The `rsp` values are synthetic: timers only compare them, never read through them.

mod common;

use gsh_rt::events::{
    gsh_rt_enter, gsh_rt_enter_cpu, gsh_rt_enter_cpu_tsc, gsh_rt_enter_tsc, gsh_rt_exit,
    gsh_rt_exit_cpu, gsh_rt_exit_cpu_tsc, gsh_rt_exit_tsc, slot,
};
use std::sync::atomic::Ordering::Relaxed;
use std::time::{Duration, Instant};

const MS: u64 = 1_000_000;

fn sleep_ms(ms: u64) {
    std::thread::sleep(Duration::from_millis(ms));
}

/// Asserts `ns` is at least `ms` milliseconds and no longer than the wall time since `since`,
/// taken before the timed region began (sleeps overshoot on a busy box, so a fixed bound fails
/// under load while the timer is right; 2% and 0.1 ms allow for a calibrated clock's error).
fn assert_about(ns: u64, ms: u64, since: Instant) {
    assert!(ns >= ms * MS - MS / 2, "{ns} ns is shorter than {ms} ms");
    let window = since.elapsed().as_nanos() as u64;
    assert!(
        ns <= window + window / 50 + MS / 10,
        "{ns} ns is longer than the {window} ns the region took"
    );
}

#[test]
fn sleeps_are_timed() {
    for (i, ms) in [10u64, 20, 30].into_iter().enumerate() {
        let s = 100 + i as u32;
        let t0 = Instant::now();
        gsh_rt_enter(s, 0x7000);
        sleep_ms(ms);
        gsh_rt_exit(s, 0x7000);
        let (count, ns) = common::slot_total(s);
        assert_eq!(count, 1);
        assert_about(ns, ms, t0);
    }
}

#[test]
fn cpu_time_excludes_sleep() {
    gsh_rt_enter_cpu(110, 0x7000);
    sleep_ms(20);
    gsh_rt_exit_cpu(110, 0x7000);
    assert!(common::slot_total(110).1 < 5 * MS, "sleeping used CPU time");

    gsh_rt_enter_cpu(111, 0x7000);
    let start = std::time::Instant::now();
    while start.elapsed() < Duration::from_millis(20) {
        std::hint::spin_loop();
    }
    gsh_rt_exit_cpu(111, 0x7000);
    let ns = common::slot_total(111).1;
    // Spinning for 20 ms of wall time gets at most 20 ms of CPU, less if the box is busy.
    assert!(
        ns > 2 * MS && ns < 25 * MS,
        "{ns} ns of CPU for a 20 ms spin"
    );
}

#[test]
fn recursion_is_timed_once() {
    let s = 120;
    let t0 = Instant::now();
    gsh_rt_enter(s, 0x9000);
    sleep_ms(10);
    gsh_rt_enter(s, 0x8f00); // the recursive call, deeper on the stack
    sleep_ms(10);
    gsh_rt_exit(s, 0x8f00);
    gsh_rt_exit(s, 0x9000);
    let (count, ns) = common::slot_total(s);
    assert_eq!(count, 2);
    assert_about(ns, 20, t0);
    assert_eq!(slot(common::me(), s).depth.load(Relaxed), 0);
}

#[test]
fn longjmp_past_timed_frames_credits_them_at_the_next_exit() {
    let h = common::header();
    let before = h.abandoned_frames.load(Relaxed);
    // a (rsp 0x6000) calls b (0x5f00) calls c (0x5e00); c longjmps back into a, which returns.
    let t0 = Instant::now();
    gsh_rt_enter(130, 0x6000);
    gsh_rt_enter(131, 0x5f00);
    gsh_rt_enter(132, 0x5e00);
    sleep_ms(10);
    gsh_rt_exit(130, 0x6000);
    assert_eq!(h.abandoned_frames.load(Relaxed), before + 2);
    for s in 130..=132 {
        let (count, ns) = common::slot_total(s);
        assert_eq!(count, 1);
        assert_about(ns, 10, t0);
        assert_eq!(slot(common::me(), s).depth.load(Relaxed), 0);
    }
    assert_eq!(h.shadow_top.load(Relaxed), 0);
}

#[test]
fn longjmp_then_a_call_at_the_same_depth_pops_the_lost_frame() {
    let h = common::header();
    let before = h.abandoned_frames.load(Relaxed);
    let unmatched = h.unmatched_exits.load(Relaxed);
    // a (0x6000) calls b (0x5f00), which longjmps back into a; a then calls d at b's depth.
    let t0 = Instant::now();
    gsh_rt_enter(140, 0x6000);
    gsh_rt_enter(141, 0x5f00);
    sleep_ms(10);
    gsh_rt_enter(142, 0x5f00);
    assert_eq!(h.abandoned_frames.load(Relaxed), before + 1);
    assert_about(common::slot_total(141).1, 10, t0);
    gsh_rt_exit(142, 0x5f00);
    gsh_rt_exit(140, 0x6000);
    assert_about(common::slot_total(140).1, 10, t0);
    assert_eq!(h.unmatched_exits.load(Relaxed), unmatched);
    // An exit with no entry (instrumented while active) is counted, not mistaken for another.
    gsh_rt_exit(143, 0x4000);
    assert_eq!(h.unmatched_exits.load(Relaxed), unmatched + 1);
}

#[test]
fn activations_deeper_than_the_shadow_stack_are_counted_not_timed() {
    std::thread::spawn(|| {
        let h = common::header();
        let cap = h.shadow_capacity as u64;
        let n = cap + 10;
        for i in 0..n {
            gsh_rt_enter(150, 0x10_0000 - 16 * i);
        }
        for i in (0..n).rev() {
            gsh_rt_exit(150, 0x10_0000 - 16 * i);
        }
        assert_eq!(h.untimed.load(Relaxed), 10);
        assert_eq!(h.shadow_top.load(Relaxed), 0);
        assert_eq!(h.shadow_overflow.load(Relaxed), 0);
        assert_eq!(h.unmatched_exits.load(Relaxed), 0);
        assert_eq!(slot(common::me(), 150).count.load(Relaxed), n);
        assert_eq!(slot(common::me(), 150).depth.load(Relaxed), 0);
    })
    .join()
    .expect("deep thread");
}

#[test]
fn tsc_variants_time_once_the_thread_has_its_block() {
    // A thread without a block: the `_tsc` entry points drop the event rather than create it.
    std::thread::spawn(|| {
        gsh_rt_enter_tsc(160, 0x7000);
        gsh_rt_exit_tsc(160, 0x7000);
        assert!(
            gsh_rt::tls::block().is_null(),
            "a _tsc entry point created a block"
        );
    })
    .join()
    .expect("thread");
    assert_eq!(common::slot_total(160).0, 0);

    common::me();
    let t0 = Instant::now();
    gsh_rt_enter_tsc(161, 0x7000);
    sleep_ms(10);
    gsh_rt_exit_tsc(161, 0x7000);
    let (count, ns) = common::slot_total(161);
    assert_eq!(count, 1);
    let kind = gsh_rt::thread::GSH_RT_ROOT.clock_kind.load(Relaxed);
    if kind == gsh_rt::layout::CLOCK_RDTSC {
        assert_about(ns, 10, t0);
    } else {
        eprintln!(
            "NOT CHECKED: the clock is not rdtsc here (kind {kind}), so _tsc times are ticks"
        );
    }

    gsh_rt_enter_cpu_tsc(162, 0x7000);
    let start = std::time::Instant::now();
    while start.elapsed() < Duration::from_millis(10) {
        std::hint::spin_loop();
    }
    gsh_rt_exit_cpu_tsc(162, 0x7000);
    let ns = common::slot_total(162).1;
    assert!(ns > MS && ns < 15 * MS, "{ns} ns of CPU for a 10 ms spin");
}
