//! Writes staged over existing bytes, for the address spaces `save` and a live process give
//! the patcher: kept in the order they were made and indexed by address, so that a read sees
//! them (later writes winning where they overlap) at a cost of log n, and a request of n
//! sites costs n log n rather than n².

use std::collections::BTreeMap;

/// Staged writes, in order.
#[derive(Debug, Default)]
pub(super) struct Pending {
    writes: Vec<(u64, Vec<u8>)>,
    /// `writes`' indexes by address.
    by_addr: BTreeMap<u64, Vec<usize>>,
    /// The longest write, so a read looks only at writes that can reach it.
    longest: u64,
    /// Where each whole change ends: the number of writes made when it ended (increasing).
    ends: Vec<usize>,
}

impl Pending {
    /// Stages `bytes` at `at`.
    pub(super) fn push(&mut self, at: u64, bytes: &[u8]) {
        self.by_addr.entry(at).or_default().push(self.writes.len());
        self.longest = self.longest.max(bytes.len() as u64);
        self.writes.push((at, bytes.to_vec()));
    }

    /// Shows the staged writes in `bytes`, which were read at `at`.
    pub(super) fn overlay(&self, at: u64, bytes: &mut [u8]) {
        let from = at.saturating_sub(self.longest);
        let mut near: Vec<usize> = self
            .by_addr
            .range(from..at.saturating_add(bytes.len() as u64))
            .flat_map(|(_, v)| v.iter().copied())
            .collect();
        // In the order they were written: later writes win.
        near.sort_unstable();
        for i in near {
            let (w_at, w) = &self.writes[i];
            overlay(bytes, at, *w_at, w);
        }
    }

    /// The writes, in the order they were made.
    pub(super) fn writes(&self) -> &[(u64, Vec<u8>)] {
        &self.writes
    }

    /// Ends a whole change (see [`crate::patch::AddressSpace::end_change`]).
    pub(super) fn end_change(&mut self) {
        let n = self.writes.len();
        if self.ends.last().is_none_or(|&e| e < n) && n > 0 {
            self.ends.push(n);
        }
    }

    /// The writes cut into batches of whole changes, in order, each of at most `most` writes
    /// unless one change alone has more. Writes after the last end form one change.
    pub(super) fn batches(&self, most: usize) -> Vec<std::ops::Range<usize>> {
        let n = self.writes.len();
        let mut ends = self.ends.clone();
        if ends.last().is_none_or(|&e| e < n) {
            ends.push(n);
        }
        let mut out: Vec<std::ops::Range<usize>> = Vec::new();
        let mut start = 0;
        let mut last = 0;
        for end in ends {
            if end - start > most && last > start {
                out.push(start..last);
                start = last;
            }
            last = end;
        }
        if last > start {
            out.push(start..last);
        }
        out
    }
}

/// Copies the part of `src` (at `src_at`) that falls inside `bytes` (at `at`) over it.
pub(super) fn overlay(bytes: &mut [u8], at: u64, src_at: u64, src: &[u8]) {
    for (i, b) in src.iter().enumerate() {
        let a = src_at + i as u64;
        if a >= at && a < at + bytes.len() as u64 {
            bytes[(a - at) as usize] = *b;
        }
    }
}

#[cfg(test)]
#[path = "pending_tests.rs"]
mod tests;
