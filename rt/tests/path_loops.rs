//! Loops timed along call paths (`gsh_rt_path_loop_enter`): a loop's activations go to the
//! path record with its function's profiled activation's return addresses, over synthetic
//! stacks built in a buffer (as `paths.rs`'s): one loop reached through two call paths keeps
//! them apart, exactly; a recursive activation's loop goes to its own path; a loop whose
//! function's activation is not profiled is counted apart ("other paths") and timed in no
//! path; a loop left without its exit is closed with its function.

mod common;

use gsh_rt::layout::*;
use gsh_rt::path::{
    gsh_rt_path_enter, gsh_rt_path_exit, gsh_rt_path_exit_tsc, gsh_rt_path_loop_enter,
    gsh_rt_path_loop_enter_tsc, record,
};
use std::sync::atomic::Ordering::Relaxed;

/// A fake stack: 8-byte words, addressed by index.
struct Stack(Vec<u64>);

impl Stack {
    fn new() -> Stack {
        Stack(vec![0; 2048])
    }
    fn addr(&self, i: usize) -> u64 {
        self.0.as_ptr() as u64 + 8 * i as u64
    }
    /// Builds `ras` as a frame-pointer chain from word `at` up: (rsp, rbp) as at the profiled
    /// function's first instruction.
    fn fp_chain(&mut self, at: usize, ras: &[u64]) -> (u64, u64) {
        self.0[at] = ras[0];
        let rsp = self.addr(at);
        let first_fp = at + 4;
        let mut i = first_fp;
        for &ra in &ras[1..] {
            let next = i + 6;
            self.0[i] = self.addr(next);
            self.0[i + 1] = ra;
            i = next;
        }
        self.0[i] = 0;
        self.0[i + 1] = 0;
        (rsp, self.addr(first_fp))
    }
}

/// The calling thread's records for `slot`: (ras, count, ns).
fn records(slot: u32) -> Vec<(Vec<u64>, u64, u64)> {
    let b = common::me();
    let mut v: Vec<_> = (0..=b.header().path_mask)
        .map(|i| record(b, i))
        .filter(|r| r.hash.load(Relaxed) != 0 && r.slot == slot)
        .map(|r| {
            (
                r.ras[..r.depth as usize].to_vec(),
                r.count.load(Relaxed),
                r.total_ns.load(Relaxed),
            )
        })
        .collect();
    v.sort();
    v
}

/// (ras, count) of `records`.
fn counts(slot: u32) -> Vec<(Vec<u64>, u64)> {
    records(slot).into_iter().map(|(r, c, _)| (r, c)).collect()
}

/// The thread's counts of frames closed abnormally, which a block carries on from a thread
/// that had it before.
struct Lost(u64, u64);

impl Lost {
    fn now() -> Lost {
        let h = common::header();
        Lost(
            h.abandoned_frames.load(Relaxed),
            h.unmatched_exits.load(Relaxed),
        )
    }

    /// Every frame since closed at its own exit, none left open.
    fn none_since(&self) {
        let h = common::header();
        assert_eq!(h.shadow_top.load(Relaxed), 0);
        assert_eq!(h.abandoned_frames.load(Relaxed), self.0);
        assert_eq!(h.unmatched_exits.load(Relaxed), self.1);
    }
}

fn key(rsp: u64) -> u64 {
    rsp - LOOP_KEY_BELOW_ENTRY
}

#[test]
fn a_loop_reached_through_two_paths_is_counted_along_each_exactly() {
    const FUNC: u32 = 400;
    const LOOP: u32 = 401;
    let hot = vec![0x40_1000, 0x40_2000, 0x40_3000];
    let decoy = vec![0x40_1000, 0x40_2100, 0x40_3000];
    let before = Lost::now();
    let mut stack = Stack::new();
    for (ras, calls, entries) in [(&hot, 5, 3), (&decoy, 2, 1)] {
        let (rsp, rbp) = stack.fp_chain(16, ras);
        for _ in 0..calls {
            gsh_rt_path_enter(FUNC, rsp, rbp);
            for _ in 0..entries {
                gsh_rt_path_loop_enter(LOOP, key(rsp), 0);
                gsh_rt_path_exit(LOOP, key(rsp));
            }
            gsh_rt_path_exit(FUNC, rsp);
        }
    }
    assert_eq!(
        counts(LOOP),
        vec![(hot.clone(), 15), (decoy.clone(), 2)],
        "the loop's entries along each path of its function"
    );
    assert_eq!(counts(FUNC), vec![(hot, 5), (decoy, 2)]);
    before.none_since();
    // None went to "other paths".
    assert_eq!(
        gsh_rt::events::slot(common::me(), LOOP).count.load(Relaxed),
        0
    );
}

/// The loop's time along a path is its own activations' (a sleep in the loop on one path, none
/// on the other), never its function's time around it.
#[test]
fn a_loops_time_goes_to_the_path_it_ran_along() {
    const FUNC: u32 = 410;
    const LOOP: u32 = 411;
    let slow = vec![0x42_1000, 0x42_2000];
    let fast = vec![0x42_1000, 0x42_2100];
    let mut stack = Stack::new();
    for (ras, nap) in [(&slow, 20), (&fast, 0)] {
        let (rsp, rbp) = stack.fp_chain(16, ras);
        gsh_rt_path_enter(FUNC, rsp, rbp);
        gsh_rt_path_loop_enter(LOOP, key(rsp), 0);
        std::thread::sleep(std::time::Duration::from_millis(nap));
        gsh_rt_path_exit(LOOP, key(rsp));
        gsh_rt_path_exit(FUNC, rsp);
    }
    let r = records(LOOP);
    assert_eq!(r.len(), 2, "{r:?}");
    // Sorted by return addresses: the slow path's first.
    assert_eq!((&r[0].0, &r[1].0), (&slow, &fast));
    let (slow_ns, fast_ns) = (r[0].2, r[1].2);
    assert!(slow_ns >= 19_000_000, "{slow_ns} ns for a 20 ms sleep");
    assert!(fast_ns < slow_ns, "{fast_ns} vs {slow_ns}");
}

/// Recursion: the loop of an inner activation of its function (a longer path) goes to the
/// inner path while the outer activation's loop stays open; each closes at its own exit.
#[test]
fn a_recursive_activations_loop_goes_to_its_own_path() {
    const FUNC: u32 = 420;
    const LOOP: u32 = 421;
    let outer = vec![0x43_1000, 0x43_2000];
    let inner = vec![0x43_1100, 0x43_1000, 0x43_2000];
    let before = Lost::now();
    let mut stack = Stack::new();
    // The inner activation's frames lie below the outer's.
    let (out_sp, out_bp) = stack.fp_chain(600, &outer);
    let (in_sp, in_bp) = stack.fp_chain(16, &inner);
    for _ in 0..4 {
        gsh_rt_path_enter(FUNC, out_sp, out_bp);
        gsh_rt_path_loop_enter(LOOP, key(out_sp), 0);
        gsh_rt_path_enter(FUNC, in_sp, in_bp);
        gsh_rt_path_loop_enter(LOOP, key(in_sp), 0);
        gsh_rt_path_exit(LOOP, key(in_sp));
        gsh_rt_path_exit(FUNC, in_sp);
        gsh_rt_path_exit(LOOP, key(out_sp));
        gsh_rt_path_exit(FUNC, out_sp);
    }
    assert_eq!(counts(LOOP), vec![(outer, 4), (inner, 4)]);
    before.none_since();
}

/// A loop whose function's activation is not profiled (it began before its profile went in)
/// is in no path: counted and timed in its slot's own record, as a profile's "other paths".
/// A loop left by a return, its exit never run, is closed with its function.
#[test]
fn a_loop_outside_a_profiled_activation_is_in_no_path_and_a_loop_left_closes_with_it() {
    const FUNC: u32 = 430;
    const LOOP: u32 = 431;
    let mut stack = Stack::new();
    let (rsp, rbp) = stack.fp_chain(16, &[0x44_1000, 0x44_2000]);
    gsh_rt_path_loop_enter(LOOP, key(rsp), 0);
    gsh_rt_path_exit(LOOP, key(rsp));
    assert!(records(LOOP).is_empty());
    let own = gsh_rt::events::slot(common::me(), LOOP);
    assert_eq!(own.count.load(Relaxed), 1);

    let h = common::header();
    let abandoned = h.abandoned_frames.load(Relaxed);
    let unmatched = h.unmatched_exits.load(Relaxed);
    gsh_rt_path_enter(FUNC, rsp, rbp);
    gsh_rt_path_loop_enter(LOOP, key(rsp), 0);
    // Returns from inside the loop.
    gsh_rt_path_exit(FUNC, rsp);
    assert_eq!(counts(LOOP), vec![(vec![0x44_1000, 0x44_2000], 1)]);
    assert_eq!(h.shadow_top.load(Relaxed), 0);
    assert_eq!(h.abandoned_frames.load(Relaxed), abandoned + 1);
    assert_eq!(h.unmatched_exits.load(Relaxed), unmatched);
}

#[test]
fn the_tsc_variant_counts_the_same_paths() {
    const FUNC: u32 = 440;
    const LOOP: u32 = 441;
    common::me(); // the `_tsc` entry points never create the thread's block
    let mut stack = Stack::new();
    let (rsp, rbp) = stack.fp_chain(16, &[0x45_1000, 0x45_2000]);
    for _ in 0..3 {
        gsh_rt_path_enter(FUNC, rsp, rbp);
        gsh_rt_path_loop_enter_tsc(LOOP, key(rsp), 0);
        gsh_rt_path_exit_tsc(LOOP, key(rsp));
        gsh_rt_path_exit(FUNC, rsp);
    }
    assert_eq!(counts(LOOP), vec![(vec![0x45_1000, 0x45_2000], 3)]);
    assert_eq!(common::header().shadow_top.load(Relaxed), 0);
}

/// The loops of one function share its key: a loop nested in another, both timed along call
/// paths, leaves the outer one open (each entry of the inner loop used to close the outer as
/// gone); an inner loop left without its exit (a `break` out of both) is closed when the outer
/// one exits; an outer loop entered again closes what its earlier activation left open.
#[test]
fn nested_loops_of_one_function_share_its_key_and_each_keeps_its_own_activation() {
    const FUNC: u32 = 450;
    const OUTER: u32 = 451;
    const INNER: u32 = 452;
    let ras = vec![0x46_1000, 0x46_2000];
    let mut stack = Stack::new();
    let (rsp, rbp) = stack.fp_chain(16, &ras);
    let k = key(rsp);
    let before = Lost::now();
    gsh_rt_path_enter(FUNC, rsp, rbp);
    gsh_rt_path_loop_enter(OUTER, k, 0);
    for _ in 0..3 {
        gsh_rt_path_loop_enter(INNER, k, 0);
        std::thread::sleep(std::time::Duration::from_millis(2));
        gsh_rt_path_exit(INNER, k);
    }
    gsh_rt_path_exit(OUTER, k);
    gsh_rt_path_exit(FUNC, rsp);
    before.none_since();
    let (outer, inner) = (records(OUTER), records(INNER));
    assert_eq!((outer.len(), inner.len()), (1, 1), "{outer:?} {inner:?}");
    assert_eq!((outer[0].1, inner[0].1), (1, 3));
    assert_eq!(outer[0].0, ras);
    // The outer loop's time holds the inner's.
    assert!(inner[0].2 >= 5_000_000, "{inner:?}");
    assert!(outer[0].2 >= inner[0].2, "{outer:?} {inner:?}");

    // A break out of both: the outer loop's exit closes the inner as gone.
    let h = common::header();
    let abandoned = h.abandoned_frames.load(Relaxed);
    let unmatched = h.unmatched_exits.load(Relaxed);
    gsh_rt_path_enter(FUNC, rsp, rbp);
    gsh_rt_path_loop_enter(OUTER, k, 0);
    gsh_rt_path_loop_enter(INNER, k, 0);
    gsh_rt_path_exit(OUTER, k);
    assert_eq!(h.abandoned_frames.load(Relaxed), abandoned + 1);
    // Entered again without its exit: the earlier activation is gone.
    gsh_rt_path_loop_enter(OUTER, k, 0);
    gsh_rt_path_loop_enter(OUTER, k, 0);
    assert_eq!(h.abandoned_frames.load(Relaxed), abandoned + 2);
    gsh_rt_path_exit(OUTER, k);
    gsh_rt_path_exit(FUNC, rsp);
    assert_eq!(h.shadow_top.load(Relaxed), 0);
    assert_eq!(h.unmatched_exits.load(Relaxed), unmatched);
    assert_eq!(counts(OUTER), vec![(ras.clone(), 4)]);
    assert_eq!(counts(INNER), vec![(ras, 4)]);
}
