//! Choosing how control reaches each point: the tactic, the bytes overwritten, and the original
//! instructions copied into the trampoline (PATCHING.md, "Placing the jump"). Planning works in
//! link addresses on the file's bytes and the CFG; nothing is written here.
//!
//! Tactics, cheapest first, tried per function:
//!
//! 1. **jump**: a 5-byte `jmp rel32` at the point, over whole instructions of its block; when
//!    the block ends in `ret`/`jmp` first, over the unreachable padding after it.
//! 2. **jump-before** (tactic (a)): the jump sits on earlier instructions of the same block and
//!    the point's snippets run at their place inside the trampoline (`pop rbx; ret`).
//! 3. **pun** (tactic (b), e9patch's punning): a 2-byte `jmp rel8` to nearby padding (the
//!    `int3`/`nop` bytes between functions) that holds the 5-byte `jmp rel32`.
//! 4. **evict** (e9patch's neighbour eviction): no padding nearby, so 10 or more bytes of
//!    plain instructions within rel8 reach (of this or another function) move to their own
//!    trampoline, entered by a `jmp rel32` over their first 5 bytes; the next 5 bytes hold
//!    the point's `jmp rel32`, reached by the 2-byte `jmp rel8`.
//! 5. **relocate-function** (tactic (c)): the whole function is copied into one trampoline with
//!    every point's snippets, and its entry redirected by a jump or a pun; the return
//!    addresses of its calls and other ways in jump into the copy, and each jump table is read
//!    from a private copy whose entries lead into the copy. Not for functions with unresolved
//!    indirect jumps, or tables a private copy cannot stand for (`edge::copy_refusal`).
//! 6. **trap** (tactic (d)): `int3`, which needs a SIGTRAP handler ([`super::trap`]); `save`
//!    writes one into the output, live processes refuse traps.
//!
//! Local tactics (1–4) are tried for every point of a function; if any point fails, the
//! function is relocated whole; if that is impossible, the failing points get traps.
//!
//! Not checked yet: `.eh_frame` landing pads as branch targets (C++ code whose landing pad
//! falls inside a displaced range), and e9patch's successor eviction.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::ops::Range;
use std::sync::OnceLock;

use iced_x86::{Decoder, DecoderOptions, FlowControl, Instruction, Mnemonic};

use super::reloc::falls_through;
use crate::addr::LinkAddr;
use crate::cfg::{BlockId, Cfg, Exit};
use crate::code::{CodeBytes, CodeView};
use crate::symbols::{FuncId, Function};

/// How a point's trampoline is entered.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Tactic {
    /// A 5-byte `jmp rel32` at the point.
    Jump,
    /// The jump sits on earlier instructions of the point's block.
    JumpBefore,
    /// A 2-byte `jmp rel8` to padding that holds the `jmp rel32`.
    Pun,
    /// A 2-byte `jmp rel8` into nearby instructions moved to their own trampoline.
    Evict,
    /// The whole function copied into the trampoline, its entry redirected.
    RelocateFunction,
    /// An `int3` that gsh's SIGTRAP handler sends to the trampoline.
    Trap,
}

impl Tactic {
    /// The tactic's name, as `show points` and the JSON output spell it.
    pub fn as_str(self) -> &'static str {
        match self {
            Tactic::Jump => "jump",
            Tactic::JumpBefore => "jump-before",
            Tactic::Pun => "pun",
            Tactic::Evict => "evict",
            Tactic::RelocateFunction => "relocate-function",
            Tactic::Trap => "trap",
        }
    }
}

/// One place where original code is overwritten to enter one trampoline.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Site {
    /// How control enters the trampoline.
    pub tactic: Tactic,
    /// Where the entering `jmp` (or `int3`) is written.
    pub patch_at: LinkAddr,
    /// How many original bytes from `patch_at` are overwritten (the rest filled with `int3`).
    pub overwrite: u64,
    /// For a pun: the padding that receives the 5-byte `jmp rel32`.
    pub pad: Option<LinkAddr>,
    /// For an eviction: the original instructions (of this or a neighbouring function) that
    /// move into this site's trampoline (they are one of its `segments`), entered by a
    /// `jmp rel32` over their first 5 bytes; their next 5 bytes are the pun's `pad`. A point
    /// inserted there later runs in this trampoline, which is laid out again for it.
    pub evict: Option<Range<LinkAddr>>,
    /// Runs of original code copied into the trampoline, in layout order.
    pub segments: Vec<Range<LinkAddr>>,
    /// Addresses of instructions in the segments that have snippets before them.
    pub points: Vec<LinkAddr>,
    /// More places that enter the same trampoline, each at the copy of its own instruction:
    /// for a relocated function, the return addresses of its calls (the copy pushes original
    /// return addresses, so callees return into the original code).
    pub arrivals: Vec<Arrival>,
    /// Why this tactic, in words.
    pub why: String,
}

impl Site {
    /// The byte ranges of original code this site owns: what it overwrites (the jump or
    /// `int3`, a pun's pad, evicted instructions, arrivals) and what its trampoline copies
    /// (the segments). Copied bytes count too: another site writing into them would make the
    /// copy read patched bytes, or leave its own jump inside code the copy replaced. A trap
    /// overwrites one byte but copies its whole instruction (sqlite3's `0xc82f`, a trap whose
    /// instruction ran into the next function's pun, failed `save` with "the code differs").
    pub fn claims(&self) -> Vec<Range<u64>> {
        let mut v = Vec::with_capacity(2 + self.segments.len());
        v.push(self.patch_at.0..self.patch_at.0 + self.overwrite);
        v.extend(self.segments.iter().map(|s| s.start.0..s.end.0));
        if let Some(p) = self.pad {
            v.push(p.0..p.0 + 5);
        }
        if let Some(e) = &self.evict {
            v.push(e.start.0..e.end.0);
        }
        for a in &self.arrivals {
            v.push(a.at.0..a.at.0 + a.overwrite);
            if let Some(p) = a.pad {
                v.push(p.0..p.0 + 5);
            }
        }
        v
    }
}

/// A further entry into a site's trampoline.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Arrival {
    /// Where its `jmp` is written.
    pub at: LinkAddr,
    /// How many original bytes from `at` are overwritten.
    pub overwrite: u64,
    /// A `jmp rel8` at `at` to a `jmp rel32` here, when there is no room for 5 bytes.
    pub pad: Option<LinkAddr>,
}

/// Byte ranges of original code already overwritten, kept sorted and merged so a query costs
/// a lookup, not a scan: a whole-program save claims a hundred thousand ranges.
#[derive(Clone, Debug, Default)]
pub struct Claimed(BTreeMap<u64, u64>);

impl Claimed {
    /// True when some byte of `r` is claimed (an empty `r`: when a claim holds its position
    /// strictly inside).
    pub fn overlaps(&self, r: &Range<u64>) -> bool {
        if r.is_empty() {
            // An empty range overlaps a claim that holds its position strictly inside.
            return self
                .0
                .range(..r.start)
                .next_back()
                .is_some_and(|(_, &e)| e > r.start);
        }
        self.0
            .range(..r.end)
            .next_back()
            .is_some_and(|(_, &e)| e > r.start)
    }

    /// The parts of `r` no claim covers, in order.
    pub fn subtract(&self, r: Range<u64>) -> Vec<Range<u64>> {
        let mut out = Vec::new();
        let mut at = r.start;
        // The claim holding `r.start`, if any, then every claim starting inside `r`.
        let first = self.0.range(..=r.start).next_back().map(|(&s, &e)| (s, e));
        for (s, e) in first
            .into_iter()
            .chain(self.0.range(r.start + 1..r.end).map(|(&s, &e)| (s, e)))
        {
            if e <= at {
                continue;
            }
            if s > at {
                out.push(at..s.min(r.end));
            }
            at = at.max(e);
            if at >= r.end {
                break;
            }
        }
        if at < r.end {
            out.push(at..r.end);
        }
        out
    }

    /// Claims every byte `site` owns ([`Site::claims`]).
    pub fn add(&mut self, site: &Site) {
        for r in site.claims() {
            self.insert(r);
        }
    }

    /// Claims `r`, merging it with the claims it touches.
    pub fn insert(&mut self, r: Range<u64>) {
        if r.is_empty() {
            return;
        }
        let (mut start, mut end) = (r.start, r.end);
        // Every claim touching [start, end]: starts at or before `end`, and, going down,
        // until one ends before `start` (the claims are disjoint and sorted).
        let touching: Vec<(u64, u64)> = self
            .0
            .range(..=end)
            .rev()
            .take_while(|(_, &e)| e >= start)
            .map(|(&s, &e)| (s, e))
            .collect();
        for (s, e) in touching {
            self.0.remove(&s);
            start = start.min(s);
            end = end.max(e);
        }
        self.0.insert(start, end);
    }
}

/// Something that answers "is any of these bytes claimed?".
pub trait Overlaps {
    /// True when some byte of `r` is claimed.
    fn overlaps(&self, r: &Range<u64>) -> bool;
}

impl Overlaps for Claimed {
    fn overlaps(&self, r: &Range<u64>) -> bool {
        Claimed::overlaps(self, r)
    }
}

/// Two sets of claims seen as one, so planning a function adds its own claims on top of the
/// module's without copying them (a copy per function made whole-program saves quadratic).
pub struct Both<'a>(pub &'a dyn Overlaps, pub &'a dyn Overlaps);

impl Overlaps for Both<'_> {
    fn overlaps(&self, r: &Range<u64>) -> bool {
        self.0.overlaps(r) || self.1.overlaps(r)
    }
}

/// The claims of `all` but those of `own`, which are among them (the sites a relocated
/// function would absorb, seen from the rest): built from the two, not claimed again site by
/// site, which cost a pass over every site written for each function planned.
pub struct Except<'a> {
    /// Every claim.
    pub all: &'a Claimed,
    /// The claims to leave out.
    pub own: &'a Claimed,
}

impl Overlaps for Except<'_> {
    fn overlaps(&self, r: &Range<u64>) -> bool {
        if r.is_empty() {
            // Held strictly inside: the bytes on both sides are claimed (claims merge).
            return r.start > 0
                && self.overlaps(&(r.start - 1..r.start))
                && self.overlaps(&(r.start..r.start + 1));
        }
        if !self.all.overlaps(r) {
            return false;
        }
        // The claimed parts of `r` lie between the parts `all` leaves free; one that `own`
        // does not cover wholly is someone else's.
        let mut at = r.start;
        for free in self
            .all
            .subtract(r.clone())
            .into_iter()
            .chain(std::iter::once(r.end..r.end))
        {
            if free.start > at && !self.own.subtract(at..free.start).is_empty() {
                return true;
            }
            at = free.end;
        }
        false
    }
}

/// What planning one function needs.
pub struct Planner<'a> {
    /// The module's code, functions and CFGs (every function's, for evicting a neighbour's
    /// instructions).
    pub view: &'a dyn CodeView,
    /// The function being planned.
    pub func: &'a Function,
    /// Its CFG.
    pub cfg: &'a Cfg,
    /// Addresses that code outside `func` branches to ([`foreign_targets`]).
    pub foreign: &'a HashSet<u64>,
    /// [`prefix_ends`] of the module's functions.
    pub prefix_end: &'a [u64],
    /// The addresses of every point being planned, sorted: evictions keep clear of them.
    pub wanted: &'a [u64],
    /// Every byte some function's CFG decodes as code ([`code_bytes`]). Padding is what no
    /// CFG claims: a `nop` run another function executes (a loop's alignment, a cold part
    /// past its symbol's end) is never a pad.
    pub code: &'a Claimed,
    /// The module's [`ways_in`], computed when a function is first copied whole.
    pub ways_in: &'a OnceLock<WaysIn>,
    /// [`Planner::padding`], computed on first use: the same for every point of the
    /// function, and a sort of its blocks each time made a large function's plan quadratic.
    pub pads: std::cell::OnceCell<Vec<Range<u64>>>,
    /// The targets of the function's jump tables, gathered on first use: [`Planner::is_target`]
    /// asks for every byte a jump would cover, and a scan of every table's targets each time
    /// made a loop timer in python3's interpreter loop (hundreds of cases) cost a scan of
    /// them per byte per point.
    pub table_targets: std::cell::OnceCell<HashSet<u64>>,
}

/// Every byte that a block of some function's CFG covers, merged.
pub fn code_bytes(view: &dyn CodeView) -> Claimed {
    let mut c = Claimed::default();
    for i in 0..view.functions().len() {
        for b in &view.cfg(FuncId(i as u32)).blocks {
            c.insert(b.start.0..b.end.0);
        }
    }
    c
}

/// For each of `funcs` (sorted by address), the largest end of it and every function before
/// it.
pub fn prefix_ends(funcs: &[Function]) -> Vec<u64> {
    funcs
        .iter()
        .scan(0, |max, f| {
            *max = (*max).max(f.end().0);
            Some(*max)
        })
        .collect()
}

/// Addresses inside some function that code of *another* function jumps to. gcc splits a
/// function into a hot part and a cold part (`f` and `f.cold`; in a stripped binary, two
/// nameless functions) that jump into each other's middles, and a cross-function jump table
/// does the same. Each function's CFG records such a branch only as leaving it, so without
/// this set a jump placed over the target's function would swallow the target: python3's
/// `jmp 0x441cf3` from one fragment into another's epilogue landed on `int3` filler.
pub fn foreign_targets(view: &dyn CodeView) -> HashSet<u64> {
    let mut out = HashSet::new();
    let mut elsewhere: Vec<u64> = Vec::new();
    for i in 0..view.functions().len() {
        let cfg = view.cfg(FuncId(i as u32));
        let mut add = |t: u64| {
            if cfg.block_at(LinkAddr(t)).is_none() {
                out.insert(t);
            }
        };
        for b in &cfg.blocks {
            if let Some(Exit::TailCall { target }) = b.exit {
                add(target.0);
            }
            // A conditional branch whose both sides leave records only one of them as an
            // exit: decode the branch itself.
            if let Some(i) = decode(view, b.last, b.end.0 - b.last.0).first() {
                if i.is_jcc_short_or_near() || i.is_jmp_short_or_near() {
                    add(i.near_branch_target());
                }
            }
        }
        for t in cfg.jump_tables.iter().flat_map(|t| &t.targets) {
            add(t.0);
        }
        // Bytes of the function no block covers may be code the analysis missed (a jump
        // table resolved with too few targets): cc1's may_be_nonaddressable_p loops back to
        // its entry block's fourth byte from such code, and a jump placed over the entry
        // block turned that byte into `add esp, ecx`. A linear sweep of the gaps finds their
        // direct branches.
        // Only the function's own bytes: blocks past its end (a cold part's CFG reaching back
        // into its parent, megabytes away) bound no gap of it. Sweeping to them decoded other
        // functions' code as this one's, gigabytes over python3, a minute per first probe.
        let f = &view.functions()[i];
        let own = f.addr.0..f.end().0;
        let end = own.end;
        let mut covered: Vec<(u64, u64)> =
            cfg.blocks.iter().map(|b| (b.start.0, b.end.0)).collect();
        covered.sort_unstable();
        let mut at = f.addr.0;
        let mut gaps = Vec::new();
        for (s, e) in covered {
            if s >= end {
                break;
            }
            if s > at {
                gaps.push(at..s);
            }
            at = at.max(e);
        }
        if at < end {
            gaps.push(at..end);
        }
        for g in gaps {
            for insn in decode(view, LinkAddr(g.start), g.end - g.start) {
                if insn.is_jcc_short_or_near() || insn.is_jmp_short_or_near() {
                    add(insn.near_branch_target());
                }
            }
        }
        // A function's CFG holds its cold part's blocks as its own, so a branch into one is
        // no exit of it; but the cold part's own CFG may have no block there, when only the
        // parent branches to it. python3's `sub_62daa0` jumps to the `add rsp` after an `or`
        // in `sub_62daa0.cold`, which one block holds in the cold part's CFG: an eviction
        // took both instructions for a loop exit's pun, and the parent's jump landed inside
        // the evicting `jmp` (a crash at the first `print`).
        elsewhere.extend(
            cfg.edges
                .iter()
                .map(|e| cfg.block(e.to).start.0)
                .filter(|to| !own.contains(to)),
        );
    }
    // Blocks outside a function's own bytes that its edges lead to are ways in from another
    // function where the function holding those bytes has no block there.
    let funcs = view.functions();
    for to in elsewhere {
        let i = funcs.partition_point(|f| f.addr.0 <= to);
        let holder = i
            .checked_sub(1)
            .filter(|&h| funcs[h].contains(LinkAddr(to)));
        let seen =
            holder.is_some_and(|h| view.cfg(FuncId(h as u32)).block_at(LinkAddr(to)).is_some());
        if !seen {
            out.insert(to);
        }
    }
    out
}

/// Where control comes from at each address some CFG leads to ([`ways_in`]): the address of
/// the last instruction of each edge's source block, or [`FROM_CALLER`] at a function's entry.
pub type WaysIn = HashMap<u64, Vec<u64>>;

/// The source of the way into a function's entry from its callers, in [`WaysIn`].
pub const FROM_CALLER: u64 = u64::MAX;

/// Every CFG edge of the module, by target, and every function entry: what a function copied
/// whole must redirect when the edge comes from code outside its own CFG (a cold part's
/// parent falling into a block the cold part's CFG holds too).
pub fn ways_in(view: &dyn CodeView) -> WaysIn {
    let mut out: WaysIn = HashMap::new();
    for (i, f) in view.functions().iter().enumerate() {
        out.entry(f.addr.0).or_default().push(FROM_CALLER);
        let cfg = view.cfg(FuncId(i as u32));
        for e in &cfg.edges {
            out.entry(cfg.block(e.to).start.0)
                .or_default()
                .push(cfg.block(e.from).last.0);
        }
    }
    out
}

/// Decodes `len` bytes at `start`; empty when they are not in the file.
pub fn decode<C: CodeBytes + ?Sized>(code: &C, start: LinkAddr, len: u64) -> Vec<Instruction> {
    let Some(bytes) = code.bytes_at(start, len) else {
        return Vec::new();
    };
    Decoder::with_ip(64, bytes, start.0, DecoderOptions::NONE)
        .iter()
        .take_while(|i| !i.is_invalid())
        .collect()
}

impl Planner<'_> {
    fn block_insns(&self, addr: LinkAddr) -> Option<Vec<Instruction>> {
        let b = self.cfg.block(self.cfg.block_containing(addr)?);
        Some(decode(self.view, b.start, b.end.0 - b.start.0))
    }

    /// Addresses control may arrive at other than by falling through.
    fn is_target(&self, a: u64) -> bool {
        self.cfg.block_at(LinkAddr(a)).is_some()
            || self
                .table_targets
                .get_or_init(|| {
                    self.cfg
                        .jump_tables
                        .iter()
                        .flat_map(|t| t.targets.iter().map(|t| t.0))
                        .collect()
                })
                .contains(&a)
            || self.view.function_at(LinkAddr(a)).is_some()
            || self.foreign.contains(&a)
    }

    /// Runs of `nop`/`int3` bytes no block of this function covers: inside it, after it up to
    /// the next function, and before it back to the previous one.
    pub fn padding(&self) -> Vec<Range<u64>> {
        // The table is sorted by address; `prefix_end` holds running maxima of the ends, so
        // both neighbours cost a binary search, not a scan of every function per point.
        let funcs = self.view.functions();
        let i = funcs.partition_point(|f| f.addr <= self.func.addr);
        let next = funcs
            .get(i)
            .map(|f| f.addr.0)
            .unwrap_or(self.func.end().0 + 64);
        let before = funcs.partition_point(|f| f.addr < self.func.addr);
        let prev_end = before
            .checked_sub(1)
            .and_then(|j| self.prefix_end.get(j).copied());
        let mut gaps = Vec::new();
        if let Some(p) = prev_end.filter(|&p| p < self.func.addr.0) {
            gaps.push(p..self.func.addr.0);
        }
        let mut blocks: Vec<Range<u64>> =
            self.cfg.blocks.iter().map(|b| b.start.0..b.end.0).collect();
        blocks.sort_by_key(|r| r.start);
        let mut at = self.func.addr.0;
        let limit = next.max(self.func.end().0);
        for b in blocks.iter().filter(|b| b.end <= limit) {
            if b.start > at {
                gaps.push(at..b.start);
            }
            at = at.max(b.end);
        }
        if at < limit {
            gaps.push(at..limit);
        }
        let mut runs = Vec::new();
        for g in gaps.into_iter().flat_map(|g| self.code.subtract(g)) {
            let mut end = g.start;
            for i in decode(self.view, LinkAddr(g.start), g.end - g.start) {
                if !matches!(i.mnemonic(), Mnemonic::Nop | Mnemonic::Int3) || i.next_ip() > g.end {
                    break;
                }
                end = i.next_ip();
            }
            if end > g.start {
                runs.push(g.start..end);
            }
        }
        runs
    }

    fn in_padding(pads: &[Range<u64>], r: &Range<u64>) -> bool {
        r.is_empty() || pads.iter().any(|p| p.start <= r.start && r.end <= p.end)
    }

    /// Whole instructions `insns[s..k]` of one block from `insns[s]` through the point's
    /// `insns[idx]` covering at least `need` bytes, or the rest of the block plus padding when
    /// it cannot fall through. Returns the bytes overwritten and `k`.
    fn cover(
        &self,
        insns: &[Instruction],
        s: usize,
        idx: usize,
        need: u64,
        pads: &[Range<u64>],
        claimed: &dyn Overlaps,
    ) -> Option<(u64, usize, bool)> {
        let start = insns[s].ip();
        let mut end = start;
        let mut k = s;
        while (end - start < need || k <= idx) && k < insns.len() {
            end = insns[k].next_ip();
            k += 1;
        }
        let mut padded = false;
        let len = if end - start >= need {
            end - start
        } else {
            let last = insns.last()?;
            if falls_through(last) || !Self::in_padding(pads, &(end..start + need)) {
                return None;
            }
            padded = true;
            need
        };
        let range = start..start + len;
        if claimed.overlaps(&range) || (start + 1..end).any(|a| self.is_target(a)) {
            return None;
        }
        Some((len, k, padded))
    }

    /// A 5-byte padding run reachable by `jmp rel8` from an instruction at `from`.
    fn find_pad(
        from: u64,
        pads: &[Range<u64>],
        claimed: &dyn Overlaps,
        avoid: &Range<u64>,
    ) -> Option<u64> {
        let after = from + 2;
        pads.iter().find_map(|p| {
            (p.start..p.end.saturating_sub(4)).find(|&a| {
                let d = a as i64 - after as i64;
                let r = a..a + 5;
                (-128..=127).contains(&d)
                    && !claimed.overlaps(&r)
                    && !(r.start < avoid.end && avoid.start < r.end)
            })
        })
    }

    /// Tactics 1–3 for the instruction at `addr`.
    pub fn place_local(&self, addr: LinkAddr, claimed: &dyn Overlaps) -> Option<Site> {
        let insns = self.block_insns(addr)?;
        let idx = insns.iter().position(|i| i.ip() == addr.0)?;
        let pads = self.pads.get_or_init(|| self.padding());
        let starts = std::iter::once(idx).chain((0..idx).rev());
        let starts_again = starts.clone();
        for s in starts.clone() {
            if let Some((len, k, padded)) = self.cover(&insns, s, idx, 5, pads, claimed) {
                let start = insns[s].ip();
                let tactic = if s == idx {
                    Tactic::Jump
                } else {
                    Tactic::JumpBefore
                };
                let mut why = if s == idx {
                    format!("5-byte jmp over {} instruction(s)", k - s)
                } else {
                    format!(
                        "too few bytes after the point; jmp placed {} bytes earlier in its block",
                        addr.0 - start
                    )
                };
                if padded {
                    why.push_str(" and the padding after the block");
                }
                return Some(Site {
                    tactic,
                    patch_at: LinkAddr(start),
                    overwrite: len,
                    pad: None,
                    evict: None,
                    segments: vec![LinkAddr(start)..LinkAddr(insns[k - 1].next_ip())],
                    points: vec![],
                    arrivals: vec![],
                    why,
                });
            }
        }
        for s in starts {
            if let Some((len, k, _)) = self.cover(&insns, s, idx, 2, pads, claimed) {
                let start = insns[s].ip();
                let avoid = start..start + len;
                if let Some(pad) = Self::find_pad(start, pads, claimed, &avoid) {
                    return Some(Site {
                        tactic: Tactic::Pun,
                        patch_at: LinkAddr(start),
                        overwrite: len,
                        pad: Some(LinkAddr(pad)),
                        evict: None,
                        segments: vec![LinkAddr(start)..LinkAddr(insns[k - 1].next_ip())],
                        points: vec![],
                    arrivals: vec![],
                        why: format!(
                            "block too short for 5 bytes; jmp rel8 to padding at {pad:#x} holding a jmp rel32"
                        ),
                    });
                }
            }
        }
        // e9patch's neighbour eviction: no padding nearby, so make some. Instructions within
        // rel8 reach move to their own trampoline, and the bytes after the jump to it hold
        // this point's jump.
        for s in starts_again {
            if let Some((len, k, _)) = self.cover(&insns, s, idx, 2, pads, claimed) {
                let start = insns[s].ip();
                let avoid = start..start + len;
                if let Some((evict, pad)) = self.find_eviction(start, claimed, &avoid) {
                    return Some(Site {
                        tactic: Tactic::Evict,
                        patch_at: LinkAddr(start),
                        overwrite: len,
                        pad: Some(LinkAddr(pad)),
                        why: format!(
                            "block too short for 5 bytes and no padding near; jmp rel8 to {pad:#x}, inside the instructions at {:#x}..{:#x} moved to their own trampoline",
                            evict.start, evict.end
                        ),
                        evict: Some(LinkAddr(evict.start)..LinkAddr(evict.end)),
                        // The evicted instructions are copied into this site's trampoline
                        // too, entered by the jump written over them.
                        segments: vec![
                            LinkAddr(start)..LinkAddr(insns[k - 1].next_ip()),
                            LinkAddr(evict.start)..LinkAddr(evict.end),
                        ],
                        points: vec![],
                        arrivals: vec![],
                    });
                }
            }
        }
        None
    }

    /// At least 10 bytes of whole, plain (non-branching) instructions of one block of any
    /// function, whose bytes 5..10 are within `jmp rel8` reach of an instruction at `from`,
    /// that nothing jumps into the middle of and no point being planned needs. Returns them
    /// and the pad address (their start plus 5).
    fn find_eviction(
        &self,
        from: u64,
        claimed: &dyn Overlaps,
        avoid: &Range<u64>,
    ) -> Option<(Range<u64>, u64)> {
        const LEN: u64 = 10;
        let after = from + 2;
        // Eviction starts e with e + 5 in [after - 128, after + 127].
        let lo = after.saturating_sub(133);
        let hi = after + 122;
        let funcs = self.view.functions();
        let first = self.prefix_end.partition_point(|&e| e <= lo);
        for (i, f) in funcs.iter().enumerate().skip(first) {
            if f.addr.0 > hi {
                break;
            }
            let cfg = self.view.cfg(FuncId(i as u32));
            for b in &cfg.blocks {
                if b.end.0 <= lo || b.start.0 > hi {
                    continue;
                }
                let insns = decode(self.view, b.start, b.end.0 - b.start.0);
                for j in 0..insns.len() {
                    let e = insns[j].ip();
                    if e < lo || e > hi {
                        continue;
                    }
                    let mut end = e;
                    let mut k = j;
                    while end - e < LEN
                        && k < insns.len()
                        && insns[k].flow_control() == FlowControl::Next
                    {
                        end = insns[k].next_ip();
                        k += 1;
                    }
                    let r = e..end;
                    if end - e < LEN
                        || claimed.overlaps(&r)
                        || (r.start < avoid.end && avoid.start < r.end)
                    {
                        continue;
                    }
                    let inside_target = (e + 1..end).any(|a| {
                        cfg.block_at(LinkAddr(a)).is_some()
                            || self.view.function_at(LinkAddr(a)).is_some()
                            || self.foreign.contains(&a)
                            || cfg
                                .jump_tables
                                .iter()
                                .any(|t| t.targets.contains(&LinkAddr(a)))
                    });
                    // A point's own jump covers up to 5 bytes from it. Function entries are
                    // kept clear too, for points inserted later.
                    let w = self.wanted.partition_point(|&p| p + 5 <= e);
                    let near_point = self.wanted.get(w).is_some_and(|&p| p < end)
                        || (e.saturating_sub(4)..end)
                            .any(|a| self.view.function_at(LinkAddr(a)).is_some());
                    // Bytes two blocks claim are doubtful code (one reading is wrong).
                    let shared = cfg
                        .blocks
                        .iter()
                        .filter(|o| o.start.0 < end && e < o.end.0)
                        .count()
                        > 1;
                    if !inside_target && !near_point && !shared {
                        return Some((r, e + 5));
                    }
                }
            }
        }
        None
    }

    /// The places where control enters this function's code from code its CFG does not hold,
    /// other than its entry: targets of other functions' branches ([`foreign_targets`]), and
    /// the targets of edges (and the entries) of other functions whose CFGs share its code —
    /// a cold part's CFG runs through its parent's blocks, which the parent's own blocks fall
    /// into — and block starts right after bytes another CFG holds. An error when one of them
    /// is not the start of one of its instructions (the two CFGs read the bytes differently).
    fn entered_from_outside(&self) -> Result<Vec<u64>, String> {
        let cfg = self.cfg;
        let ways = self.ways_in.get_or_init(|| ways_in(self.view));
        let ours = |a: u64| cfg.block_containing(LinkAddr(a)).is_some();
        let from_outside = |a: u64| {
            self.foreign.contains(&a)
                || ways.get(&a).is_some_and(|v| {
                    v.iter().any(|&s| {
                        (s == FROM_CALLER && a != cfg.entry.0) || (s != FROM_CALLER && !ours(s))
                    })
                })
        };
        let mut out = Vec::new();
        for b in &cfg.blocks {
            let starts: HashSet<u64> = decode(self.view, b.start, b.end.0 - b.start.0)
                .iter()
                .map(|i| i.ip())
                .collect();
            for a in b.start.0..b.end.0 {
                if !from_outside(a) {
                    continue;
                }
                if !starts.contains(&a) {
                    return Err(format!(
                        "other code enters it at {a:#x}, inside one of its instructions"
                    ));
                }
                out.push(a);
            }
            // Another CFG's code right before the block may fall into it.
            let before = b.start.0.saturating_sub(1);
            if b.start != cfg.entry && self.code.overlaps(&(before..b.start.0)) && !ours(before) {
                out.push(b.start.0);
            }
        }
        Ok(out)
    }

    /// Tactic 4: the whole function in one trampoline. Control arrives in the original at the
    /// entry, at the return addresses of its calls (the copy pushes original return
    /// addresses), and wherever code its CFG does not hold enters its code
    /// ([`Planner::entered_from_outside`]); each arrival gets a jump to its copy, and the rest
    /// of the original body is dead, so it serves as padding for puns.
    pub fn place_function(&self, claimed: &dyn Overlaps) -> Result<Site, String> {
        let cfg = self.cfg;
        // Its jump tables are read from private copies leading into the copy
        // (`edge::copy_tables`).
        if let Some(why) = super::edge::copy_refusal(self.view, cfg) {
            return Err(why);
        }
        // Control that may reach bytes which do not decode has no copy to arrive at.
        if let Some(b) = cfg.blocks.iter().find(|b| b.instructions == 0) {
            return Err(format!("its code at {:#x} does not decode", b.start.0));
        }
        let mut blocks: Vec<Range<u64>> = cfg.blocks.iter().map(|b| b.start.0..b.end.0).collect();
        blocks.sort_by_key(|r| r.start);
        if blocks.is_empty() {
            return Err("it has no code".into());
        }
        let mut segments: Vec<Range<LinkAddr>> = Vec::new();
        for b in &blocks {
            match segments.last_mut() {
                Some(s) if s.end.0 == b.start => s.end = LinkAddr(b.end),
                _ => segments.push(LinkAddr(b.start)..LinkAddr(b.end)),
            }
        }
        // The copy needs its own code, not the span from its lowest block to its highest: a
        // function split into a hot and a `.cold` part spans megabytes of other functions,
        // whose sites made every such function "patched already" (python3's `coverage '*'`
        // left over 3,000 blocks unprobed so). Bytes between its blocks that it writes
        // (arrivals, pads) are checked one by one below.
        if segments
            .iter()
            .any(|s| claimed.overlaps(&(s.start.0..s.end.0)))
        {
            return Err("part of it is patched already".into());
        }
        let size: u64 = segments.iter().map(|s| s.end.0 - s.start.0).sum();
        // Every way into its code from code the copy does not replace becomes an arrival, a
        // jump into the copy, so that no original instruction of it runs any more: the entry,
        // the return addresses of its calls (the copy pushes original return addresses), and
        // each place other code enters it ([`Planner::entered_from_outside`]). Code left
        // running in the original would skip every snippet the copy holds: python3's
        // `sub_55f7b0.cold`, copied whole for a loop at its start, holds its parent's loop
        // header, which the parent's first block falls into, and that loop's iterations went
        // uncounted until control happened into the copy.
        let mut arrivals: Vec<u64> = vec![cfg.entry.0];
        arrivals.extend(
            cfg.blocks
                .iter()
                .filter(|b| b.call.as_ref().is_some_and(|c| !c.noreturn))
                .map(|b| b.end.0),
        );
        arrivals.extend(self.entered_from_outside()?);
        arrivals.sort();
        arrivals.dedup();
        // With every way in redirected, the original body is dead: padding for puns.
        let mut dead: Vec<Range<u64>> = blocks.clone();
        dead.extend(self.pads.get_or_init(|| self.padding()).iter().cloned());
        let is_dead = |a: u64| dead.iter().any(|r| r.contains(&a));
        let mut mine = Claimed::default();
        let mut placed: Vec<Arrival> = Vec::new();
        // At most one eviction per site: it makes room for one arrival's pun.
        let mut evict: Option<Range<u64>> = None;
        for (n, &a) in arrivals.iter().enumerate() {
            let next = arrivals.get(n + 1).copied().unwrap_or(u64::MAX);
            let mut room = 0;
            // Bytes after `a` that other code jumps to must stay as they are.
            while room < 5 && a + room < next && is_dead(a + room) {
                room += 1;
            }
            let r5 = a..a + 5;
            if room >= 5 && !Both(claimed, &mine).overlaps(&r5) {
                mine.insert(r5);
                placed.push(Arrival {
                    at: LinkAddr(a),
                    overwrite: 5,
                    pad: None,
                });
                continue;
            }
            if room < 2 || Both(claimed, &mine).overlaps(&(a..a + 2)) {
                return Err(format!(
                    "no room for a jump at {a:#x}, where control arrives"
                ));
            }
            mine.insert(a..a + 2);
            // Pads: dead bytes not at an arrival.
            let pads = &dead;
            let avoid: Vec<Range<u64>> = arrivals.iter().map(|&x| x..x + 2).collect();
            let pad = pads.iter().find_map(|p| {
                (p.start..p.end.saturating_sub(4)).find(|&q| {
                    let d = q as i64 - (a as i64 + 2);
                    let r = q..q + 5;
                    (-128..=127).contains(&d)
                        && r.clone().all(is_dead)
                        && !Both(claimed, &mine).overlaps(&r)
                        && !avoid.iter().any(|v| v.start < r.end && r.start < v.end)
                })
            });
            let pad = match pad {
                Some(p) => p,
                None if evict.is_none() => {
                    let Some((r, q)) = self.find_eviction(a, &Both(claimed, &mine), &(a..a + 2))
                    else {
                        return Err(format!("no padding within reach of {a:#x} for a pun"));
                    };
                    mine.insert(r.clone());
                    evict = Some(r);
                    placed.push(Arrival {
                        at: LinkAddr(a),
                        overwrite: 2,
                        pad: Some(LinkAddr(q)),
                    });
                    continue;
                }
                None => return Err(format!("no padding within reach of {a:#x} for a pun")),
            };
            mine.insert(pad..pad + 5);
            placed.push(Arrival {
                at: LinkAddr(a),
                overwrite: 2,
                pad: Some(LinkAddr(pad)),
            });
        }
        // Evicted instructions of other code join the copy (an eviction inside this
        // function's own body is in it already).
        if let Some(r) = &evict {
            if !segments
                .iter()
                .any(|s| s.start.0 < r.end && r.start < s.end.0)
            {
                segments.push(LinkAddr(r.start)..LinkAddr(r.end));
            }
        }
        let first = placed.remove(0);
        let how = if first.pad.is_some() {
            "a pun"
        } else {
            "a jmp"
        };
        Ok(Site {
            tactic: Tactic::RelocateFunction,
            patch_at: first.at,
            overwrite: first.overwrite,
            pad: first.pad,
            evict: evict.map(|r| LinkAddr(r.start)..LinkAddr(r.end)),
            segments,
            points: vec![],
            why: format!(
                "no room at the point; the whole function ({size} bytes) is copied, its entry redirected by {how}{}",
                if placed.is_empty() {
                    String::new()
                } else {
                    format!(" and {} other way(s) in (return addresses of its calls, code entering it from outside its CFG) by jumps into the copy", placed.len())
                }
            ),
            arrivals: placed,
        })
    }

    /// Tactic 5: `int3` on the instruction at `addr`.
    pub fn place_trap(&self, addr: LinkAddr, why: String) -> Option<Site> {
        let insns = self.block_insns(addr)?;
        let i = insns.iter().find(|i| i.ip() == addr.0)?;
        Some(Site {
            tactic: Tactic::Trap,
            patch_at: addr,
            overwrite: 1,
            pad: None,
            evict: None,
            segments: vec![addr..LinkAddr(i.next_ip())],
            points: vec![],
            arrivals: vec![],
            why,
        })
    }

    /// Why the point at `addr` must not be patched at all, if so: its instruction runs across
    /// the start of a function, so at most one of the two readings of those bytes is code
    /// (sqlite3's `0xc82f`, a jump-table "target" read past the table, decodes
    /// `add [rcx-0x77], al` across the entry of the function at `0xc830`).
    pub fn doubtful(&self, addr: LinkAddr) -> Option<String> {
        let i = decode(self.view, addr, 15).into_iter().next()?;
        let f = self.view.functions();
        let k = f.partition_point(|g| g.addr.0 <= addr.0);
        f.get(k).filter(|g| g.addr.0 < i.next_ip()).map(|g| {
            format!(
                "doubtful code: its instruction ({addr}..{:#x}) runs across the start of {}",
                i.next_ip(),
                g.display_name()
            )
        })
    }

    /// Sites for the points at `addrs` (sorted) of this function, and the points refused with
    /// why: doubtful code ([`Planner::doubtful`]), or a trap whose instruction's bytes another
    /// site owns already. `outside` is `claimed` without the sites already in this function,
    /// which relocating it would absorb; `inside` lists those sites' points.
    pub fn plan(
        &self,
        addrs: &[LinkAddr],
        claimed: &Claimed,
        outside: &dyn Overlaps,
        inside: &[LinkAddr],
    ) -> (Vec<Site>, Vec<(LinkAddr, String)>) {
        let mut refused: Vec<(LinkAddr, String)> = Vec::new();
        let addrs: Vec<LinkAddr> = addrs
            .iter()
            .copied()
            .filter(|&a| match self.doubtful(a) {
                Some(why) => {
                    refused.push((a, why));
                    false
                }
                None => true,
            })
            .collect();
        let mut local = Claimed::default();
        let mut sites: Vec<Site> = Vec::new();
        // The points of `sites`: a scan of every site per point was quadratic in a large
        // function's blocks.
        let mut held: HashSet<LinkAddr> = HashSet::new();
        let mut failed = Vec::new();
        for &a in &addrs {
            if held.contains(&a) {
                continue;
            }
            match self.place_local(a, &Both(claimed, &local)) {
                Some(mut site) => {
                    site.points = Self::inside(&site, &addrs);
                    held.extend(site.points.iter().copied());
                    local.add(&site);
                    sites.push(site);
                }
                None => failed.push(a),
            }
        }
        failed.retain(|a| !held.contains(a));
        if failed.is_empty() {
            return (sites, refused);
        }
        let reason = match self.place_function(outside) {
            Ok(site) => return (vec![Self::holding(site, &addrs, inside)], refused),
            Err(e) => e,
        };
        for a in failed {
            let why = format!(
                "{}, and the function cannot be relocated: {reason}",
                self.why_no_jump(a)
            );
            let Some(mut t) = self.place_trap(a, why) else {
                refused.push((a, format!("no instruction at {a} in its function's CFG")));
                continue;
            };
            // The trap copies its whole instruction: all of it must be free.
            let taken = t.claims().iter().any(|r| Both(claimed, &local).overlaps(r));
            if taken {
                refused.push((
                    a,
                    format!(
                        "no room for a jump ({reason}), and its instruction's bytes belong to another site"
                    ),
                ));
                continue;
            }
            t.points = vec![a];
            local.add(&t);
            sites.push(t);
        }
        (sites, refused)
    }

    /// A relocated-function site holding the points at `addrs` and those of the sites it
    /// absorbs (`inside`), sorted once each.
    fn holding(mut site: Site, addrs: &[LinkAddr], inside: &[LinkAddr]) -> Site {
        site.points = addrs.iter().chain(inside).copied().collect();
        site.points.sort();
        site.points.dedup();
        site
    }

    /// Sites for the points at `addrs` of a function that must be copied whole (a point at
    /// its looping entry runs only on arrival from the caller, one at a call's return address
    /// only on the return from the callee: [`super::edge::Way::FromCaller`], their addresses
    /// `on_arrival`): one relocated-function site, or, when the function cannot be copied (or
    /// other code enters it at such a return address), every point at those addresses
    /// refused with why and the others planned as usual (a point inside a site written
    /// already is then refused rather than placed over it).
    pub fn plan_whole(
        &self,
        addrs: &[LinkAddr],
        on_arrival: &HashSet<LinkAddr>,
        claimed: &Claimed,
        outside: &dyn Overlaps,
        inside: &[LinkAddr],
    ) -> (Vec<Site>, Vec<(LinkAddr, String)>) {
        // Snippets that run on arrival at a call's return address run for every arrival from
        // outside the copy: other code entering there would run them too.
        let copied = self.place_function(outside).and_then(|site| {
            let outer = self.entered_from_outside()?;
            match on_arrival
                .iter()
                .find(|a| **a != self.cfg.entry && outer.contains(&a.0))
            {
                Some(a) => Err(format!(
                    "other code than the call's return enters it at {a}, where snippets run \
                     only on the return"
                )),
                None => Ok(site),
            }
        });
        match copied {
            Ok(mut site) => {
                let how = site
                    .why
                    .trim_start_matches("no room at the point; ")
                    .to_owned();
                site.why = if on_arrival.contains(&self.cfg.entry) {
                    format!(
                        "its first block is a loop header: {how}; branches in the copy back to \
                         its entry skip what runs on the caller's arrival"
                    )
                } else {
                    format!(
                        "an edge after a call reaches a block other edges reach too: {how}; \
                         branches in the copy to that block skip what runs on the callee's return"
                    )
                };
                (vec![Self::holding(site, addrs, inside)], Vec::new())
            }
            Err(e) => {
                let entry = self.cfg.entry;
                let rest: Vec<LinkAddr> = addrs
                    .iter()
                    .copied()
                    .filter(|a| !on_arrival.contains(a))
                    .collect();
                let (sites, mut refused) = self.plan(&rest, claimed, outside, inside);
                for &a in addrs.iter().filter(|a| on_arrival.contains(a)) {
                    let why = if a == entry {
                        format!(
                            "the function's first block is a loop header, so its entry from \
                             the caller is told apart from the back edges to it only in a copy \
                             of the whole function, and it cannot be copied: {e}"
                        )
                    } else {
                        format!(
                            "the edge from a call to its return address at {a}, which other \
                             edges reach too, is told apart from them only in a copy of the \
                             whole function, and it cannot be copied: {e}"
                        )
                    };
                    refused.push((a, why));
                }
                (sites, refused)
            }
        }
    }

    /// Why no local tactic placed a jump at `addr`, in the block's own terms: how many bytes
    /// the block has around the point, and that neither padding nor evictable instructions
    /// lie within a `jmp rel8`'s reach.
    fn why_no_jump(&self, addr: LinkAddr) -> String {
        let Some(b) = self.cfg.block_containing(addr).map(|b| self.cfg.block(b)) else {
            return "no block holds it".to_owned();
        };
        let after = b.end.0 - addr.0;
        let before = addr.0 - b.start.0;
        let room = if after + before < 5 {
            format!(
                "block too small for a 5-byte jump ({} byte(s): {before} before the point, {after} from it)",
                after + before
            )
        } else if let Some(t) = (b.start.0 + 1..b.end.0).find(|&t| self.is_target(t)) {
            format!(
                "its block ({} bytes) has a branch target inside, at {t:#x} (a jump-table case, or a jump from another function), which a jump over it would swallow",
                after + before
            )
        } else {
            format!(
                "the {} bytes of its block are taken by other sites",
                after + before
            )
        };
        format!("{room}; no padding within jmp rel8 reach for a pun, and nothing to evict")
    }

    /// The points at `addrs` (sorted, each once) that `site`'s segments hold, in order: a
    /// binary search per segment, where a scan of every point per site was quadratic in a
    /// large function's blocks.
    fn inside(site: &Site, addrs: &[LinkAddr]) -> Vec<LinkAddr> {
        let mut out: Vec<LinkAddr> = Vec::new();
        for s in &site.segments {
            let from = addrs.partition_point(|a| *a < s.start);
            out.extend(addrs[from..].iter().take_while(|a| **a < s.end));
        }
        if site.segments.len() > 1 {
            out.sort_unstable();
            out.dedup();
        }
        out
    }
}

/// True when the instruction at `addr` itself reads the status flags: a conditional tail call
/// (`ja other_function`) is an exit, yet the flags decide it, so no point there may clobber
/// them.
pub fn reads_flags(view: &dyn CodeView, addr: LinkAddr) -> bool {
    use iced_x86::RflagsBits as F;
    const STATUS: u32 = F::OF | F::SF | F::ZF | F::AF | F::CF | F::PF;
    decode(view, addr, 15)
        .first()
        .is_some_and(|i| i.rflags_read() & STATUS != 0)
}

/// Blocks [`flags_live`] follows past the point's own before it calls the flags live.
const FLAGS_SCAN_BLOCKS: usize = 16;

/// Are the status flags possibly read before being written, from `addr` on? The scan follows
/// the CFG's edges from the point's block: a path ends where every flag is written, or at a
/// call, a return or a jump to another function (the ABI leaves the flags undefined there:
/// neither a callee nor a caller may read them), or at a call that never returns or a trap.
/// True when a path reads them first, or leads where the CFG cannot follow (an unresolved
/// jump, undecodable code), or when more than [`FLAGS_SCAN_BLOCKS`] blocks would be needed.
pub fn flags_live(view: &dyn CodeView, cfg: &Cfg, addr: LinkAddr) -> bool {
    use iced_x86::RflagsBits as F;
    const STATUS: u32 = F::OF | F::SF | F::ZF | F::AF | F::CF | F::PF;
    let Some(first) = cfg.block_containing(addr) else {
        return true;
    };
    // The point's block is scanned from the point; reached again by a loop, from its start.
    let mut work = vec![(first, addr)];
    let mut seen: HashSet<BlockId> = HashSet::new();
    while let Some((id, from)) = work.pop() {
        let b = cfg.block(id);
        let mut written = 0;
        for i in decode(view, from, b.end.0.saturating_sub(from.0)) {
            if i.rflags_read() & STATUS & !written != 0 {
                return true;
            }
            written |=
                i.rflags_written() | i.rflags_cleared() | i.rflags_set() | i.rflags_undefined();
            if written & STATUS == STATUS {
                break;
            }
        }
        if written & STATUS == STATUS || b.call.is_some() {
            continue;
        }
        match b.exit {
            Some(
                Exit::Return
                | Exit::TailCall { .. }
                | Exit::Indirect
                | Exit::NoReturnCall { .. }
                | Exit::Trap,
            ) => continue,
            Some(Exit::Unresolved | Exit::Invalid) => return true,
            None => {}
        }
        let mut successors = 0;
        for e in cfg.successors(id) {
            successors += 1;
            if seen.insert(e.to) {
                if seen.len() > FLAGS_SCAN_BLOCKS {
                    return true;
                }
                work.push((e.to, cfg.block(e.to).start));
            }
        }
        if successors == 0 {
            return true;
        }
    }
    false
}

#[cfg(test)]
mod foreign_tests {
    use super::*;
    use crate::cfg::{Block, BlockId, Cfg, Edge, EdgeKind};
    use crate::symbols::{Found, NameSource};

    /// Code at 0x1000..0x4000 (`nop` filler), its functions and their CFGs.
    struct View {
        code: Vec<u8>,
        functions: Vec<Function>,
        cfgs: Vec<Cfg>,
    }

    impl crate::code::CodeBytes for View {
        fn bytes_at(&self, addr: LinkAddr, len: u64) -> Option<&[u8]> {
            let from = usize::try_from(addr.0.checked_sub(0x1000)?).ok()?;
            self.code.get(from..from + usize::try_from(len).ok()?)
        }
    }

    impl CodeView for View {
        fn functions(&self) -> &[Function] {
            &self.functions
        }
        fn cfg(&self, f: FuncId) -> &Cfg {
            &self.cfgs[f.0 as usize]
        }
    }

    fn function(id: u32, name: &str, addr: u64, size: u64) -> Function {
        Function {
            id: FuncId(id),
            name: name.into(),
            demangled: None,
            aliases: Vec::new(),
            addr: LinkAddr(addr),
            size,
            name_source: NameSource::Symtab,
            found: Found::default(),
            global: true,
        }
    }

    fn block(id: u32, start: u64, end: u64) -> Block {
        Block {
            id: BlockId(id),
            start: LinkAddr(start),
            end: LinkAddr(end),
            last: LinkAddr(start),
            instructions: 1,
            exit: None,
            call: None,
        }
    }

    /// `a` (one `ret` at 0x1000) has a cold block at 0x3000 in its CFG; `b`, between them,
    /// jumps within itself. `a`'s gaps are its own bytes only: sweeping from its end to its
    /// cold block decoded `b` as `a`'s code and took `b`'s own jump for a foreign one.
    #[test]
    fn a_functions_gaps_end_at_its_end() {
        let mut code = vec![0x90u8; 0x3000];
        code[0] = 0xc3; // a: ret
        code[0x1000..0x1003].copy_from_slice(&[0xeb, 0x00, 0xc3]); // b: jmp +0; ret
        code[0x2000] = 0xc3; // a's cold block: ret
        let view = View {
            code,
            functions: vec![function(0, "a", 0x1000, 1), function(1, "b", 0x2000, 3)],
            cfgs: vec![
                Cfg {
                    entry: LinkAddr(0x1000),
                    blocks: vec![block(0, 0x1000, 0x1001), block(1, 0x3000, 0x3001)],
                    ..Cfg::default()
                },
                Cfg {
                    entry: LinkAddr(0x2000),
                    blocks: vec![block(0, 0x2000, 0x2002), block(1, 0x2002, 0x2003)],
                    edges: vec![Edge {
                        from: BlockId(0),
                        to: BlockId(1),
                        kind: EdgeKind::Taken,
                    }],
                    ..Cfg::default()
                },
            ],
        };
        assert_eq!(foreign_targets(&view), HashSet::new());
    }
}

#[cfg(test)]
mod claimed_tests {
    use super::*;

    #[test]
    fn claims_without_some_answer_as_the_rest_claimed_alone() {
        // Disjoint claims, some of them "own": Except answers as the others claimed alone.
        let parts = [
            (0, 4, false),
            (4, 9, true),
            (12, 15, false),
            (15, 20, true),
            (30, 31, true),
        ];
        let (mut all, mut own, mut rest) =
            (Claimed::default(), Claimed::default(), Claimed::default());
        for &(a, b, mine) in &parts {
            all.insert(a..b);
            if mine {
                own.insert(a..b);
            } else {
                rest.insert(a..b);
            }
        }
        let except = Except {
            all: &all,
            own: &own,
        };
        for a in 0..34 {
            for b in a..35 {
                assert_eq!(except.overlaps(&(a..b)), rest.overlaps(&(a..b)), "{a}..{b}");
            }
        }
    }

    #[test]
    fn claims_merge_and_answer_overlaps_at_their_edges() {
        let mut c = Claimed::default();
        c.insert(10..15);
        c.insert(20..25);
        c.insert(15..18); // touches the first: merged into 10..18
        c.insert(0..0); // empty: ignored
        assert!(c.overlaps(&(17..18)));
        assert!(!c.overlaps(&(18..20)));
        assert!(c.overlaps(&(19..21)));
        assert!(!c.overlaps(&(25..30)));
        assert!(!c.overlaps(&(0..10)));
        assert!(c.overlaps(&(0..11)));
        c.insert(12..22); // bridges both
        assert_eq!(c.0.len(), 1);
        assert!(c.overlaps(&(18..20)));
        // An empty range overlaps a claim holding its position strictly inside.
        assert!(c.overlaps(&(12..12)));
        assert!(!c.overlaps(&(10..10)));
        let top = Claimed::default();
        assert!(Both(&c, &top).overlaps(&(24..26)));
        // What is left of a range around, across and between claims.
        let mut d = Claimed::default();
        d.insert(10..15);
        d.insert(20..25);
        assert_eq!(d.subtract(0..30), vec![0..10, 15..20, 25..30]);
        assert_eq!(d.subtract(12..22), vec![15..20]);
        assert_eq!(d.subtract(11..14), Vec::<Range<u64>>::new());
        assert_eq!(d.subtract(15..20), vec![15..20]);
        assert_eq!(top.subtract(3..4), vec![3..4]);
        assert!(!Both(&top, &top).overlaps(&(24..26)));
    }
}

#[cfg(test)]
mod flags_tests {
    use super::*;
    use crate::testutil::{compile, open};

    /// `f`: the flags a `cmp` sets are read by a `jne` one block later, past a `jmp`. `g`:
    /// nothing reads them before the `ret` a `jmp` leads to. `h`: a call comes first.
    /// `k`: a loop back into the point's own block, whose start reads them.
    const SOURCE: &str = r#"
__asm__(".text\n"
    ".globl f\n.type f,@function\nf:\n"
    "  cmp $5, %edi\n  mov $1, %eax\n  jmp 1f\n1:\n  jne 2f\n  ret\n2:\n  mov $2, %eax\n  ret\n"
    ".size f, .-f\n"
    ".globl g\n.type g,@function\ng:\n"
    "  mov $1, %eax\n  jmp 1f\n1:\n  mov %eax, %ecx\n  ret\n"
    ".size g, .-g\n"
    ".globl h\n.type h,@function\nh:\n"
    "  mov $1, %eax\n  call g\n  ret\n"
    ".size h, .-h\n"
    ".globl k\n.type k,@function\nk:\n"
    "  cmp $5, %edi\n1:\n  jne 2f\n  mov $1, %eax\n  ret\n2:\n  mov $2, %eax\n  jmp 1b\n"
    ".size k, .-k\n");
int f(int); int g(void); int h(void); int k(int);
int main(int argc, char **argv) { (void)argv; return f(argc) + g() + h() + k(argc); }
"#;

    #[test]
    fn liveness_follows_the_cfg_to_a_read_or_a_boundary() {
        let path = compile("flags", SOURCE, false, &["-O0"]);
        let s = open(&path);
        let m = s.main().expect("main module");
        let live = |name: &str, offset: u64| {
            let f = m.functions().by_name(name).next().expect("function");
            let cfg = &m.analysis().function(f.id).cfg;
            flags_live(m, cfg, LinkAddr(f.addr.0 + offset))
        };
        // f+3 is the `mov` after `cmp $5, %edi` (3 bytes): the `jne` past the `jmp` reads.
        assert!(live("f", 3));
        // g's `mov`, then `jmp`, `mov`, `ret`: nothing reads them.
        assert!(!live("g", 0));
        // h's `mov`, then a call.
        assert!(!live("h", 0));
        // k's `mov $2` (at 2:) jumps back to `jne`, which reads them.
        let k = m.functions().by_name("k").next().expect("k");
        let cfg = &m.analysis().function(k.id).cfg;
        let back = cfg.blocks.iter().map(|b| b.start).max().expect("blocks");
        assert!(flags_live(m, cfg, back));
    }
}
