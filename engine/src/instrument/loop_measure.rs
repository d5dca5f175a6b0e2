//! What loop measures need beyond the points: which loops a selector names in a function
//! (with errors that list the function's loops, and a message naming irreducible cycles,
//! which are no loops), and the frame a loop's timer is keyed by.
//!
//! A timer keys its open activation by a stack address (`rt/LAYOUT.md`, "Shadow stack and
//! lost exits"): an entry whose frame lies at or above an open one's closes it (that frame is
//! gone: `longjmp`, an exception), one below it is nested (recursion). A function's key is
//! its `rsp` at entry. A loop's points are spread over its function, where `rsp` moves
//! (pushes, `sub rsp`, calls' arguments), so each point adds its stack height to its `rsp`:
//! every point of one activation of the loop then gives the same key, the function's entry
//! `rsp` less 8. That lies strictly between the function's own key and any callee's (a
//! callee's entry `rsp` is at least 16 below: the call pushes 8 onto a 16-aligned stack), so
//! a loop timer and its function's timer never close each other, a callee's frame left open
//! below the loop is closed when the loop exits, and a loop left without passing an exit (an
//! exception to a caller, `longjmp`) is closed at the loop's next entry at that frame or above
//! it, as function timers are at their function's next entry.

#![warn(missing_docs)]

use crate::addr::LinkAddr;
use crate::cfg::loops::Loop;
use crate::point::{LoopAt, Point};
use crate::session::Module;
use crate::symbols::FuncId;

use super::action::LoopSel;

/// Below the function's entry `rsp`, where a loop's activations are keyed (see the module
/// doc): the runtime's, where a loop timed along call paths finds its function's activation.
const LOOP_KEY_BELOW_ENTRY: i64 = gsh_rt_abi::layout::LOOP_KEY_BELOW_ENTRY as i64;

/// The loops of `func` that `sel` names, in the analysis' order, or why there are none: a
/// message that names the function's loops (or its irreducible cycles).
pub fn select<'m>(
    module: &'m Module,
    func: FuncId,
    sel: &LoopSel,
) -> Result<Vec<&'m Loop>, String> {
    let a = module.analysis().function(func);
    let name = module.functions().get(func).display_name();
    let loops = &a.loops.loops;
    let chosen: Vec<&Loop> = match sel {
        LoopSel::All => loops.iter().collect(),
        LoopSel::Named(n) => loops.iter().filter(|l| l.name == *n).collect(),
        LoopSel::Header(at) => loops
            .iter()
            .filter(|l| a.cfg.block(l.header).start == *at)
            .collect(),
    };
    if !chosen.is_empty() {
        return Ok(chosen);
    }
    let cycles = irreducible(module, func)
        .map(|c| format!("; its irreducible cycles ({c}) form no loop and cannot be measured"))
        .unwrap_or_default();
    if loops.is_empty() {
        return Err(format!("{name} has no loops{cycles}"));
    }
    let listed: Vec<String> = loops
        .iter()
        .map(|l| format!("{} (header {})", l.name, a.cfg.block(l.header).start))
        .collect();
    let what = match sel {
        LoopSel::Named(n) => format!("no loop named `{n}`"),
        LoopSel::Header(at) => format!("no loop whose header is at {at}"),
        LoopSel::All => unreachable!("a function with loops has some for `*`"),
    };
    Err(format!(
        "{name} has {what}; its loops are {}{cycles}",
        listed.join(", ")
    ))
}

/// `func`'s irreducible cycles as `loops` shows them (`FROM->TO` for each retreating edge
/// into a block that does not dominate its source, the first few and how many more), or
/// `None` when it has none.
pub fn irreducible(module: &Module, func: FuncId) -> Option<String> {
    let a = module.analysis().function(func);
    if a.loops.irreducible.is_empty() {
        return None;
    }
    let all = &a.loops.irreducible;
    let mut edges: Vec<String> = all
        .iter()
        .take(SHOWN_CYCLE_EDGES)
        .map(|(from, to)| format!("{}->{}", a.cfg.block(*from).start, a.cfg.block(*to).start))
        .collect();
    // python3's `_PyEval_EvalFrameDefault` has thousands: a message of 300 KB.
    if all.len() > SHOWN_CYCLE_EDGES {
        edges.push(format!("and {} more", all.len() - SHOWN_CYCLE_EDGES));
    }
    Some(edges.join(", "))
}

/// How many of a function's irreducible cycle entries [`irreducible`] names.
const SHOWN_CYCLE_EDGES: usize = 8;

/// The stack height at the start of each block of `func` (its `rsp` less the `rsp` at the
/// function's entry: 0 at entry, -8 after a `push`), where flow from the entry fixes it.
pub fn block_heights(module: &Module, func: FuncId) -> Vec<Option<i64>> {
    let cfg = &module.analysis().function(func).cfg;
    heights(cfg, |at, len| module.binary.bytes_at(at, len))
}

/// [`block_heights`] of `cfg`, whose code `bytes` reads.
fn heights<'b>(
    cfg: &crate::cfg::Cfg,
    bytes: impl Fn(LinkAddr, u64) -> Option<&'b [u8]>,
) -> Vec<Option<i64>> {
    use iced_x86::{Decoder, DecoderOptions};
    let mut heights: Vec<Option<i64>> = vec![None; cfg.blocks.len()];
    let Some(entry) = cfg.entry_block() else {
        return heights;
    };
    // Each block's successors, indexed once: `Cfg::successors` scans every edge, and a
    // scan per block made this quadratic (python3's `_PyEval_EvalFrameDefault`: a minute
    // per timer, with the program stopped).
    let mut successors: Vec<Vec<crate::cfg::BlockId>> = vec![Vec::new(); cfg.blocks.len()];
    for e in &cfg.edges {
        successors[e.from.0 as usize].push(e.to);
    }
    // (block, rsp height, rbp height when rbp holds a stack address)
    let mut work = vec![(entry, 0i64, None::<i64>)];
    while let Some((b, sp, bp)) = work.pop() {
        let slot = &mut heights[b.0 as usize];
        if slot.is_some() {
            continue;
        }
        *slot = Some(sp);
        let block = cfg.block(b);
        let Some(bytes) = bytes(block.start, block.end.0 - block.start.0) else {
            continue;
        };
        let mut d = Decoder::with_ip(64, bytes, block.start.0, DecoderOptions::NONE);
        let (mut sp, mut bp) = (sp, bp);
        let mut known = true;
        while d.can_decode() {
            let insn = d.decode();
            match crate::cfg::build::stack_effect(&insn, sp, bp) {
                Some((s, p)) => (sp, bp) = (s, p),
                None => {
                    known = false;
                    break;
                }
            }
        }
        if !known {
            continue;
        }
        for &to in &successors[b.0 as usize] {
            if heights[to.0 as usize].is_none() {
                work.push((to, sp, bp));
            }
        }
    }
    heights
}

/// The frame offset of each of a loop's `points` (added to the point's `rsp`, it gives the
/// loop's key: see the module doc), from `heights` ([`block_heights`]); `None` when the
/// stack height at some point is not known, and the points' own `rsp` must serve.
pub fn frame_offsets(heights: &[Option<i64>], points: &[Point]) -> Option<Vec<i32>> {
    points
        .iter()
        .map(|p| {
            let h = heights.get(p.block.0 as usize).copied().flatten()?;
            i32::try_from(-h - LOOP_KEY_BELOW_ENTRY).ok()
        })
        .collect()
}

/// The header address of `l` in `func`'s CFG.
pub fn header(module: &Module, func: FuncId, l: &Loop) -> LinkAddr {
    module.analysis().function(func).cfg.block(l.header).start
}

/// The points where a loop measure of `l` goes: `at` of the loop, as `at FUNC loop L AT`
/// finds them.
pub fn points(module: &Module, func: FuncId, l: &Loop, at: LoopAt) -> Vec<Point> {
    let w = crate::point::Where::Loop {
        name: l.name.clone(),
        at,
    };
    crate::point::find(module, func, &w).unwrap_or_default()
}

/// Where a loop timer closes for exit point `p`: on its edge when the patcher can place code
/// there, else at the start of the block the edge leads to (an exception landing pad, a
/// jump table's target, a block several others reach through calls). Closing there is right
/// for every way in: control arriving from outside the loop finds no activation open at its
/// frame (or only an outer, recursive one, whose key is higher), and an inline timer's close
/// does nothing then.
pub fn closing_point(module: &Module, p: Point) -> Point {
    if p.edge.is_none() || crate::patch::edge::place(module, &p).is_ok() {
        return p;
    }
    Point { edge: None, ..p }
}

/// The points on `l`'s back edges (the iteration ends that return to its header), when the
/// patcher can place every one of them; `None` otherwise.
pub fn back_edges(module: &Module, func: FuncId, l: &Loop) -> Option<Vec<Point>> {
    use crate::point::OnEdge;
    let back: Vec<Point> = points(module, func, l, LoopAt::IterEnd)
        .into_iter()
        .filter(|p| {
            matches!(p.edge, Some(OnEdge::Edge { from, to, .. })
                if l.back_edges.contains(&(from, to)))
        })
        .collect();
    let placed = back
        .iter()
        .all(|p| p.placeable().is_ok() && crate::patch::edge::place(module, p).is_ok());
    (placed && !back.is_empty()).then_some(back)
}

/// The loops of `func` holding the instruction at `at` that `shown` keeps, outermost first:
/// where a call path through a call at `at` shows loops as elements, between `func` and the
/// callee (`main > work > loop_1 > loop_1.2 > helper`). Empty when `at` is in no such loop
/// (or in no block of `func`).
pub fn enclosing(
    module: &Module,
    func: FuncId,
    at: LinkAddr,
    shown: impl Fn(&str) -> bool,
) -> Vec<String> {
    let a = module.analysis().function(func);
    let Some(b) = a.cfg.block_containing(at) else {
        return Vec::new();
    };
    let forest = &a.loops.loops;
    // The innermost loop holding the block: loops hold their nested loops' blocks too.
    let mut inner = forest
        .iter()
        .enumerate()
        .filter(|(_, l)| l.blocks.contains(&b))
        .max_by_key(|(_, l)| l.depth)
        .map(|(i, _)| i);
    let mut chain = Vec::new();
    while let Some(i) = inner {
        let l = &forest[i];
        if shown(&l.name) {
            chain.push(l.name.clone());
        }
        inner = l.parent;
    }
    chain.reverse();
    chain
}

/// The loops measured in `values` (loop counters and timers), by function as users name it:
/// a profile's call paths show these as elements ([`enclosing`]).
pub fn measured(
    values: &[super::measure::CountValue],
) -> std::collections::HashMap<String, Vec<String>> {
    let mut out: std::collections::HashMap<String, Vec<String>> = Default::default();
    for v in values {
        if let Some(l) = &v.loop_name {
            let e = out.entry(v.function.clone()).or_default();
            if !e.contains(l) {
                e.push(l.clone());
            }
        }
    }
    out
}

/// `l`'s code in `func` as `[start, end)` link-address ranges, adjacent blocks merged.
pub fn spans(module: &Module, func: FuncId, l: &Loop) -> Vec<[u64; 2]> {
    let cfg = &module.analysis().function(func).cfg;
    let mut blocks: Vec<[u64; 2]> = l
        .blocks
        .iter()
        .map(|&b| [cfg.block(b).start.0, cfg.block(b).end.0])
        .collect();
    blocks.sort_unstable();
    let mut out: Vec<[u64; 2]> = Vec::new();
    for b in blocks {
        match out.last_mut() {
            Some(last) if last[1] >= b[0] => last[1] = last[1].max(b[1]),
            _ => out.push(b),
        }
    }
    out
}

/// The loops of `loops` (name, [`spans`]) whose code holds `at`, outermost first (a nested
/// loop's name extends its parent's: `loop_1.2` in `loop_1`).
pub fn in_spans(loops: &[(String, Vec<[u64; 2]>)], at: u64) -> Vec<String> {
    let mut out: Vec<&String> = loops
        .iter()
        .filter(|(_, s)| s.iter().any(|&[a, b]| a <= at && at < b))
        .map(|(n, _)| n)
        .collect();
    out.sort_by_key(|n| n.matches('.').count());
    out.into_iter().cloned().collect()
}

#[cfg(test)]
mod tests {
    use crate::cfg::{Block, BlockId, Cfg, Edge, EdgeKind};
    use crate::LinkAddr;

    /// A function of 40,000 one-`push` blocks in a chain: each block's height is known, and
    /// each block is read and decoded once. A scan of every edge per block (1.6 billion steps
    /// here) took a minute on python3's interpreter loop, with the program stopped; the
    /// successors are now indexed once, which this checks by the reads rather than by a clock.
    #[test]
    fn block_heights_read_each_block_once() {
        const N: u32 = 40_000;
        let code = vec![0x50u8; N as usize]; // push rax
        let base = 0x1000u64;
        let cfg = Cfg {
            entry: LinkAddr(base),
            blocks: (0..N)
                .map(|i| Block {
                    id: BlockId(i),
                    start: LinkAddr(base + u64::from(i)),
                    end: LinkAddr(base + u64::from(i) + 1),
                    last: LinkAddr(base + u64::from(i)),
                    instructions: 1,
                    exit: None,
                    call: None,
                })
                .collect(),
            edges: (1..N)
                .map(|i| Edge {
                    from: BlockId(i - 1),
                    to: BlockId(i),
                    kind: EdgeKind::FallThrough,
                })
                .collect(),
            ..Cfg::default()
        };
        let reads = std::cell::Cell::new(0u32);
        let h = super::heights(&cfg, |at, len| {
            reads.set(reads.get() + 1);
            let from = usize::try_from(at.0.checked_sub(base)?).ok()?;
            code.get(from..from + usize::try_from(len).ok()?)
        });
        assert_eq!(h[0], Some(0));
        assert_eq!(h[N as usize - 1], Some(-8 * i64::from(N - 1)));
        assert!(h.iter().all(Option::is_some));
        assert_eq!(reads.get(), N, "a block was read more than once");
    }
}
