//! The walk memo gives exactly the full walk's path records: random sequences of entries on
//! synthetic stacks laid out like real ones (outer frames at fixed addresses, deeper ones
//! below), with recursion, paths that differ only in an unprofiled intermediate frame at the
//! same depth, frames abandoned without their exit (as by `longjmp`), stale words left by
//! earlier frames, and stacks deeper than `MAX_PATH_DEPTH` (the path is the innermost
//! `MAX_PATH_DEPTH` return addresses, memo or not). The oracle is the built return addresses
//! and `path::walk`, which never uses the memo.

mod common;

use gsh_rt::layout::*;
use gsh_rt::path::{gsh_rt_path_count, gsh_rt_path_enter, gsh_rt_path_exit, record, walk};
use std::collections::HashMap;
use std::sync::atomic::Ordering::Relaxed;

/// Words in the fake stack; the outermost frame's terminator sits near the top.
const WORDS: usize = 4096;
const TOP: usize = WORDS - 8;

/// A fake stack of 8-byte words laid out as a real one: the outermost frame at the top.
struct Stack(Vec<u64>);

impl Stack {
    fn addr(&self, i: usize) -> u64 {
        self.0.as_ptr() as u64 + 8 * i as u64
    }

    /// Writes a frame-pointer chain for `ras` (innermost first) below `TOP`, touching only
    /// the words the walk reads, and returns (rsp, rbp) as at the measured function's first
    /// instruction. A frame's size depends on its return address, so paths sharing outer
    /// frames share their addresses, as recursion does.
    fn build(&mut self, ras: &[u64]) -> (u64, u64) {
        self.0[TOP] = 0;
        self.0[TOP + 1] = 0; // the outermost frame: no return address
        let mut fp = TOP;
        for &ra in ras[1..].iter().rev() {
            let at = fp - 2 - (ra as usize >> 4) % 5;
            self.0[at] = self.addr(fp); // saved rbp
            self.0[at + 1] = ra;
            fp = at;
        }
        let rsp = fp - 1 - (ras[0] as usize >> 4) % 3;
        self.0[rsp] = ras[0];
        (self.addr(rsp), self.addr(fp))
    }
}

/// xorshift64*: deterministic, so a failure reproduces.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

/// The calling thread's records for `slot`: (ras, count).
fn records(slot: u32) -> HashMap<Vec<u64>, u64> {
    let b = common::me();
    (0..=b.header().path_mask)
        .map(|i| record(b, i))
        .filter(|r| r.hash.load(Relaxed) != 0 && r.slot == slot)
        .map(|r| (r.ras[..r.depth as usize].to_vec(), r.count.load(Relaxed)))
        .collect()
}

fn run(seed: u64, slot: u32) {
    let mut rng = Rng(seed);
    let mut stack = Stack(vec![0; WORDS]);
    let mut want: HashMap<Vec<u64>, u64> = HashMap::new();
    // A few call sites, so that paths repeat and the memo is used.
    let site = |k: u64| 0x40_1000 + 0x10 * k;
    // Where walks restart from: shallow, recursion, mutual recursion, beyond MAX_PATH_DEPTH.
    let bases: [Vec<u64>; 4] = [
        vec![site(0), site(1)],
        (0..12).map(|i| site(2 * (i / 11))).collect(),
        (0..20).map(|i| site(i % 2)).collect(),
        (0..MAX_PATH_DEPTH as u64 + 5)
            .map(|i| site(i % 3))
            .collect(),
    ];
    let mut ras = bases[0].clone();
    // Fewer entries than the table's 3/4 fill, so that no path goes to "other".
    for _ in 0..3000 {
        match rng.below(10) {
            8 | 9 => ras = bases[rng.below(4) as usize].clone(),
            // Called again from the same place (a loop): the memo's case.
            0..=2 => {}
            // Recursion: one frame deeper or shallower; a deep one past MAX_PATH_DEPTH.
            3 => ras.insert(0, site(rng.below(3))),
            4 if ras.len() > 1 => {
                ras.remove(0);
            }
            5 => {
                let d = MAX_PATH_DEPTH + 1 + rng.below(8) as usize;
                while ras.len() < d {
                    ras.insert(0, site(rng.below(2)));
                }
            }
            // The same depth and frame sizes, another unprofiled caller somewhere up the stack
            // (also beyond MAX_PATH_DEPTH, where it must not matter).
            _ => {
                let i = rng.below(ras.len() as u64) as usize;
                // 0xf0 apart: the same frame size ((ra >> 4) % 5 and % 3), so the same rsp
                // and rbp; toggling keeps the set of paths small.
                ras[i] = if ((ras[i] - site(0)) / 0xf0).is_multiple_of(2) {
                    ras[i] + 0xf0
                } else {
                    ras[i] - 0xf0
                };
            }
        }
        ras.truncate(MAX_PATH_DEPTH + 8); // return from the outermost frames
        let (rsp, rbp) = stack.build(&ras);
        let n = ras.len().min(MAX_PATH_DEPTH);
        let mut walked = [0u64; MAX_PATH_DEPTH];
        let got = walk(common::me(), rsp, rbp, &mut walked);
        assert_eq!(
            walked[..got],
            ras[..n],
            "the full walk reads the built stack"
        );
        *want.entry(ras[..n].to_vec()).or_default() += 1;
        match rng.below(3) {
            0 => gsh_rt_path_count(slot, rsp, rbp),
            1 => {
                gsh_rt_path_enter(slot, rsp, rbp);
                gsh_rt_path_exit(slot, rsp);
            }
            // Left open: abandoned, as by a longjmp; a later entry at or above it pops it.
            _ => gsh_rt_path_enter(slot, rsp, rbp),
        }
    }
    let got = records(slot);
    let wrong: Vec<_> = want
        .iter()
        .filter(|(ras, n)| got.get(*ras) != Some(n))
        .map(|(ras, n)| (ras.len(), *n, got.get(ras).copied()))
        .take(5)
        .collect();
    assert!(
        wrong.is_empty(),
        "(depth, want, got): {wrong:?} of {} paths, other {}",
        want.len(),
        common::header().other_count.load(Relaxed)
    );
    assert_eq!(
        got.len(),
        want.len(),
        "paths recorded that were never entered"
    );
    let h = common::header();
    assert_eq!(h.other_count.load(Relaxed), 0);
}

#[test]
fn memoised_walks_count_the_same_paths_as_full_walks() {
    for (i, seed) in [0x9E37_79B9_7F4A_7C15u64, 12345, 0xDEAD_BEEF]
        .into_iter()
        .enumerate()
    {
        std::thread::spawn(move || run(seed, 300 + i as u32))
            .join()
            .expect("walking thread");
    }
}
