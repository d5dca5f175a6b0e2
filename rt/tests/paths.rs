//! Call-path profiles over synthetic stacks built in a buffer: frame-pointer chains, a
//! registered unwind table for frames without frame pointers, and a mix of both (a table frame
//! that saved the caller's `rbp`, above which the chain continues). A full table is
//! `full_table.rs`'s, alone in its binary: its thread's block, table full, goes to the next
//! thread that starts.

mod common;

use gsh_rt::layout::*;
use gsh_rt::path::{
    gsh_rt_add_unwind_table, gsh_rt_path_count, gsh_rt_path_count_tsc, gsh_rt_path_enter,
    gsh_rt_path_enter_tsc, gsh_rt_path_exit, gsh_rt_path_exit_tsc, record,
};
use std::sync::atomic::Ordering::Relaxed;

/// A fake stack: 8-byte words, addressed by index.
struct Stack(Vec<u64>);

impl Stack {
    fn new() -> Stack {
        Stack(vec![0; 1024])
    }
    fn addr(&self, i: usize) -> u64 {
        self.0.as_ptr() as u64 + 8 * i as u64
    }
    /// Builds `ras` as a frame-pointer chain: returns (rsp, rbp) as at the measured function's
    /// first instruction.
    fn fp_chain(&mut self, ras: &[u64]) -> (u64, u64) {
        let mut i = 16;
        self.0[i] = ras[0];
        let rsp = self.addr(i);
        let first_fp = i + 4;
        i = first_fp;
        for &ra in &ras[1..] {
            let next = i + 6; // a caller frame with locals
            self.0[i] = self.addr(next); // saved rbp
            self.0[i + 1] = ra;
            i = next;
        }
        self.0[i] = 0;
        self.0[i + 1] = 0; // outermost: no return address
        (rsp, self.addr(first_fp))
    }
}

/// The calling thread's records for `slot`: (ras, count).
fn records(slot: u32) -> Vec<(Vec<u64>, u64)> {
    let b = common::me();
    (0..=b.header().path_mask)
        .map(|i| record(b, i))
        .filter(|r| r.hash.load(Relaxed) != 0 && r.slot == slot)
        .map(|r| (r.ras[..r.depth as usize].to_vec(), r.count.load(Relaxed)))
        .collect()
}

fn sorted(mut v: Vec<(Vec<u64>, u64)>) -> Vec<(Vec<u64>, u64)> {
    v.sort();
    v
}

#[test]
fn frame_pointer_paths_are_counted_exactly() {
    let paths = [
        (vec![0x40_1000, 0x40_2000, 0x40_3000], 5),
        (vec![0x40_1000, 0x40_2100, 0x40_3000], 3),
        (vec![0x40_1100, 0x40_2000], 7),
    ];
    let mut stack = Stack::new();
    for (ras, n) in &paths {
        let (rsp, rbp) = stack.fp_chain(ras);
        for _ in 0..*n {
            gsh_rt_path_enter(200, rsp, rbp);
            gsh_rt_path_exit(200, rsp);
        }
    }
    assert_eq!(sorted(records(200)), sorted(paths.to_vec()));
    assert_eq!(common::header().shadow_top.load(Relaxed), 0);
}

#[test]
fn unwind_table_paths_without_frame_pointers() {
    // Call sites in a module without frame pointers: the caller of 0x7000_1000 has a 40-byte
    // frame (CFA = rsp + 40 after the call returns), and so on.
    let table: &'static [UnwindEntry] = Box::leak(Box::new([
        UnwindEntry {
            ra: 0x7000_1000,
            cfa_off: 40,
            base: UNWIND_BASE_RSP,
            reserved: 0,
            rbp_save: 0,
        },
        UnwindEntry {
            ra: 0x7000_1100,
            cfa_off: 24,
            base: UNWIND_BASE_RSP,
            reserved: 0,
            rbp_save: 0,
        },
        UnwindEntry {
            ra: 0x7000_2000,
            cfa_off: 16,
            base: UNWIND_BASE_RSP,
            reserved: 0,
            rbp_save: 0,
        },
        // This caller saved its caller's rbp at CFA-16; above it the frame-pointer chain resumes.
        UnwindEntry {
            ra: 0x7000_2100,
            cfa_off: 32,
            base: UNWIND_BASE_RSP,
            reserved: 0,
            rbp_save: -16,
        },
    ]));
    // SAFETY: a leaked, sorted table.
    assert_eq!(
        unsafe { gsh_rt_add_unwind_table(table.as_ptr(), table.len()) },
        0
    );
    let unsorted = [table[1], table[0]];
    // SAFETY: a valid (but unsorted) table, rejected.
    assert_eq!(unsafe { gsh_rt_add_unwind_table(unsorted.as_ptr(), 2) }, -1);

    let mut stack = Stack::new();
    let base = 16;
    let at = |s: &Stack, i: usize| s.addr(i);
    // Path A: ra0 = 0x7000_1000 at word 16; caller frame 40 bytes -> next ra at word 16 + 5;
    // that is 0x7000_2000 with 16 bytes -> next at word 23, an unknown ra 0x40_9000 whose frame
    // (no frame pointer, rbp 0) ends the walk.
    stack.0[base] = 0x7000_1000;
    stack.0[base + 5] = 0x7000_2000;
    stack.0[base + 7] = 0x40_9000;
    let rsp_a = at(&stack, base);
    // Path B: 0x7000_1100 (24-byte frame) -> 0x7000_2100 (32 bytes, saved rbp at CFA-16) ->
    // the chain: rbp -> [0x40_a000 above it] -> end.
    let b0 = 100;
    stack.0[b0] = 0x7000_1100;
    stack.0[b0 + 3] = 0x7000_2100; // p + 24
    let cfa = b0 + 3 + 1 + 4; // word index of CFA: p + 8 + 32
    let chain = 200;
    stack.0[cfa - 2] = stack.addr(chain); // saved rbp
    stack.0[cfa - 1] = 0x40_a100; // the return address of 0x7000_2100's function
    stack.0[chain] = 0;
    stack.0[chain + 1] = 0x40_a200;
    let rsp_b = at(&stack, b0);

    for _ in 0..4 {
        gsh_rt_path_enter(210, rsp_a, 0);
        gsh_rt_path_exit(210, rsp_a);
    }
    for _ in 0..6 {
        gsh_rt_path_count(210, rsp_b, 0);
    }
    let want = vec![
        (vec![0x7000_1000, 0x7000_2000, 0x40_9000], 4),
        (vec![0x7000_1100, 0x7000_2100, 0x40_a100, 0x40_a200], 6),
    ];
    assert_eq!(sorted(records(210)), sorted(want));
}

#[test]
fn path_time_and_depth_limit() {
    let mut stack = Stack::new();
    let ras: Vec<u64> = (0..40).map(|i| 0x50_0000 + 16 * i).collect();
    let (rsp, rbp) = stack.fp_chain(&ras);
    gsh_rt_path_enter(220, rsp, rbp);
    std::thread::sleep(std::time::Duration::from_millis(10));
    gsh_rt_path_exit(220, rsp);
    let b = common::me();
    let r = (0..=b.header().path_mask)
        .map(|i| record(b, i))
        .find(|r| r.hash.load(Relaxed) != 0 && r.slot == 220)
        .expect("record");
    assert_eq!(r.depth as usize, MAX_PATH_DEPTH);
    assert_eq!(r.ras[..MAX_PATH_DEPTH], ras[..MAX_PATH_DEPTH]);
    assert_eq!(r.count.load(Relaxed), 1);
    let ns = r.total_ns.load(Relaxed);
    assert!(
        (9_500_000..40_000_000).contains(&ns),
        "{ns} ns for a 10 ms sleep"
    );
}

#[test]
fn tsc_variants_count_the_same_paths() {
    let paths = [
        (vec![0x41_1000, 0x41_2000, 0x41_3000], 4),
        (vec![0x41_1100, 0x41_2000], 2),
    ];
    common::me(); // the `_tsc` entry points never create the thread's block
    let mut stack = Stack::new();
    for (ras, n) in &paths {
        let (rsp, rbp) = stack.fp_chain(ras);
        for _ in 0..*n {
            gsh_rt_path_enter_tsc(240, rsp, rbp);
            gsh_rt_path_exit_tsc(240, rsp);
            gsh_rt_path_count_tsc(241, rsp, rbp);
        }
    }
    assert_eq!(sorted(records(240)), sorted(paths.to_vec()));
    assert_eq!(sorted(records(241)), sorted(paths.to_vec()));
    assert_eq!(common::header().shadow_top.load(Relaxed), 0);
}

/// A path profiled again in session after session: each time gsh hands its slot to the new
/// profile, it retires the slot's records (`RETIRED_SLOT`), as it does through
/// `/proc/PID/mem`. The path's hash is the same each time, so its probe sequence met one more
/// retired record per session, and from the 33rd on every activation went to "other".
#[test]
fn a_path_profiled_again_after_its_records_were_retired_is_still_counted() {
    const SLOT: u32 = 310;
    let mut stack = Stack::new();
    let (rsp, rbp) = stack.fp_chain(&[0x40_5000, 0x40_6000]);
    let b = common::me();
    let used_before = b.header().path_used.load(Relaxed);
    for _ in 0..3 * 32 {
        gsh_rt_path_enter(SLOT, rsp, rbp);
        gsh_rt_path_exit(SLOT, rsp);
        assert_eq!(records(SLOT), vec![(vec![0x40_5000, 0x40_6000], 1)]);
        for i in 0..=b.header().path_mask {
            let r = record(b, i);
            if r.hash.load(Relaxed) != 0 && r.slot == SLOT {
                let offset = std::ptr::from_ref(r) as usize - b.as_ptr() as usize
                    + std::mem::offset_of!(PathRecord, slot);
                // SAFETY: the record lies in this thread's block, and this thread is the only
                // one using it; the mutator writes the same word from outside.
                unsafe {
                    b.as_ptr()
                        .add(offset)
                        .cast::<u32>()
                        .write_volatile(RETIRED_SLOT)
                };
            }
        }
    }
    assert!(records(SLOT).is_empty());
    assert!(b.header().path_used.load(Relaxed) <= used_before + 1);
}
