//! The sites a [`super::Patcher`] has written, with lookups by address.
//!
//! A live process traps into the tracer at every trap site it runs through, and each trap asks
//! which site holds the address; planning asks, for every point, whether a written site
//! already copies its instruction. Scanning every site per question was fine for a few
//! hundred sites and hopeless for `coverage '*'` on python3 (219,000 sites): each trap cost
//! milliseconds and the program crawled. The index is built on the first question after the
//! sites change, so a batch of changes pays for one build.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::ops::Deref;
use std::sync::OnceLock;

use super::plan::{Site, Tactic};
use super::Request;
use crate::addr::{LinkAddr, RuntimeAddr};
use crate::symbols::FuncId;

/// One written site.
#[derive(Clone)]
pub(super) struct Applied {
    pub(super) func: FuncId,
    pub(super) site: Site,
    /// Every snippet of the site, in insertion order.
    pub(super) requests: Vec<Request>,
    /// The current trampoline (earlier ones are retired, never freed).
    pub(super) tramp: RuntimeAddr,
    /// Original bytes, to restore.
    pub(super) originals: Vec<(RuntimeAddr, Vec<u8>)>,
    /// Where, in the current trampoline, the code for each original instruction starts
    /// (runtime original address, runtime trampoline address).
    pub(super) copies: Vec<(u64, u64)>,
}

impl Applied {
    /// True when every snippet of the site is at a point of `func` (a site may also hold
    /// points of code it copies for another function: instructions it evicted, or code two
    /// functions share).
    pub(super) fn holds_only(&self, func: FuncId) -> bool {
        self.requests.iter().all(|r| r.point.func == func)
    }
}

/// The written sites, in the order they were written. Read as a slice; changed only through
/// [`AppliedSites::edit`], which drops the index, or [`AppliedSites::add_request`], which
/// leaves it (the index does not look at requests).
#[derive(Clone, Default)]
pub(super) struct AppliedSites {
    list: Vec<Applied>,
    index: OnceLock<Index>,
}

#[derive(Clone, Default)]
struct Index {
    /// Segment start → (segment end, site), link addresses. `None` when two sites' segments
    /// overlap: then the first site in order answers, as a scan finds it.
    segments: Option<BTreeMap<u64, (u64, usize)>>,
    /// Runtime address of an original instruction → where its code starts in the first
    /// site's current trampoline that copies it.
    copies: HashMap<u64, u64>,
    /// Link address of each trap site's `int3`.
    traps: HashSet<u64>,
    /// The sites of each function, in order.
    by_func: HashMap<FuncId, Vec<usize>>,
}

impl Deref for AppliedSites {
    type Target = [Applied];

    fn deref(&self) -> &[Applied] {
        &self.list
    }
}

impl AppliedSites {
    /// The list, to change; the index is rebuilt at the next question.
    pub(super) fn edit(&mut self) -> &mut Vec<Applied> {
        self.index = OnceLock::new();
        &mut self.list
    }

    /// Adds a snippet to site `i` (its trampoline is laid out again by the caller, through
    /// [`AppliedSites::edit`]).
    pub(super) fn add_request(&mut self, i: usize, r: Request) {
        self.list[i].requests.push(r);
    }

    fn index(&self) -> &Index {
        self.index.get_or_init(|| Index::of(&self.list))
    }

    /// The first site whose copied code holds the instruction at `addr`.
    pub(super) fn at(&self, addr: LinkAddr) -> Option<usize> {
        match &self.index().segments {
            Some(segments) => {
                let (_, &(end, i)) = segments.range(..=addr.0).next_back()?;
                (addr.0 < end).then_some(i)
            }
            None => self
                .list
                .iter()
                .position(|a| a.site.segments.iter().any(|s| s.contains(&addr))),
        }
    }

    /// Where the code for the original instruction at `orig` (runtime) starts in the current
    /// trampoline of the first site that copies it.
    pub(super) fn copy_of(&self, orig: u64) -> Option<u64> {
        self.index().copies.get(&orig).copied()
    }

    /// True when a trap site's `int3` is at `at` (link address).
    pub(super) fn is_trap(&self, at: LinkAddr) -> bool {
        self.index().traps.contains(&at.0)
    }

    /// The sites written in `func`, in order.
    pub(super) fn of_func(&self, func: FuncId) -> &[usize] {
        self.index().by_func.get(&func).map_or(&[], |v| v)
    }

    /// True when any trap site is written.
    pub(super) fn has_traps(&self) -> bool {
        !self.index().traps.is_empty()
    }
}

impl Index {
    fn of(list: &[Applied]) -> Index {
        let mut segments = BTreeMap::new();
        let mut disjoint = true;
        let mut copies = HashMap::new();
        let mut traps = HashSet::new();
        let mut by_func: HashMap<FuncId, Vec<usize>> = HashMap::new();
        for (i, a) in list.iter().enumerate() {
            by_func.entry(a.func).or_default().push(i);
            for s in &a.site.segments {
                if s.start >= s.end {
                    continue;
                }
                let before = segments.range(..s.end.0).next_back();
                if before.is_some_and(|(_, &(end, _))| end > s.start.0) {
                    disjoint = false;
                }
                segments.insert(s.start.0, (s.end.0, i));
            }
            for &(orig, at) in &a.copies {
                copies.entry(orig).or_insert(at);
            }
            if a.site.tactic == Tactic::Trap {
                traps.insert(a.site.patch_at.0);
            }
        }
        Index {
            segments: disjoint.then_some(segments),
            copies,
            traps,
            by_func,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn applied(func: u32, segments: &[(u64, u64)], trap: bool) -> Applied {
        let site = Site {
            tactic: if trap { Tactic::Trap } else { Tactic::Jump },
            patch_at: LinkAddr(segments.first().map_or(0, |s| s.0)),
            overwrite: 1,
            pad: None,
            evict: None,
            segments: segments
                .iter()
                .map(|&(a, b)| LinkAddr(a)..LinkAddr(b))
                .collect(),
            points: Vec::new(),
            arrivals: Vec::new(),
            why: String::new(),
        };
        Applied {
            func: FuncId(func),
            copies: segments
                .iter()
                .map(|&(a, _)| (a, 0x9000_0000 + a))
                .collect(),
            site,
            requests: Vec::new(),
            tramp: RuntimeAddr(0),
            originals: Vec::new(),
        }
    }

    /// What the index answers before the index existed: a scan in order.
    fn scan_at(list: &[Applied], addr: u64) -> Option<usize> {
        list.iter()
            .position(|a| a.site.segments.iter().any(|s| s.contains(&LinkAddr(addr))))
    }

    fn scan_copy(list: &[Applied], orig: u64) -> Option<u64> {
        list.iter()
            .flat_map(|a| a.copies.iter())
            .find(|c| c.0 == orig)
            .map(|c| c.1)
    }

    proptest! {
        /// Disjoint or overlapping, empty or not, the index answers every address as the scan
        /// in order does, and stays right across edits.
        #[test]
        fn the_index_answers_as_a_scan_does(
            sites in prop::collection::vec(
                (0u32..3, prop::collection::vec((0u64..400, 0u64..40), 1..4), any::<bool>()),
                0..12,
            ),
            drop_first in any::<bool>(),
        ) {
            let mut all = AppliedSites::default();
            for (func, segs, trap) in &sites {
                let segs: Vec<(u64, u64)> = segs.iter().map(|&(a, n)| (a, a + n)).collect();
                all.edit().push(applied(*func, &segs, *trap));
            }
            for round in 0..2 {
                for addr in 0..450 {
                    prop_assert_eq!(all.at(LinkAddr(addr)), scan_at(&all, addr));
                    prop_assert_eq!(all.copy_of(addr), scan_copy(&all, addr));
                    let trap = all
                        .iter()
                        .any(|a| a.site.tactic == Tactic::Trap && a.site.patch_at.0 == addr);
                    prop_assert_eq!(all.is_trap(LinkAddr(addr)), trap);
                }
                for f in 0..3 {
                    let scan: Vec<usize> =
                        (0..all.len()).filter(|&i| all[i].func == FuncId(f)).collect();
                    prop_assert_eq!(all.of_func(FuncId(f)), &scan[..]);
                }
                prop_assert_eq!(
                    all.has_traps(),
                    all.iter().any(|a| a.site.tactic == Tactic::Trap)
                );
                if round == 0 && drop_first && !all.is_empty() {
                    all.edit().remove(0);
                }
            }
        }
    }
}
