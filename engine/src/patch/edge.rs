//! Points on CFG edges (loop entry, exit and iteration end, `edge`): where each one's snippets
//! run so that they run exactly when control takes the edge (issue 16).
//!
//! Cheapest first:
//!
//! 1. The edge is the only way into its target (and the target is not the function's entry):
//!    before the target's first instruction, an ordinary point. This holds for any kind of
//!    edge: a jump table's case block, or a landing pad, that nothing else reaches.
//! 2. The edge is the only way out of its source, which ends in a `jmp` or simply falls into
//!    the next block: before the source's last instruction.
//! 3. The source ends in a conditional branch: an *edge trampoline*. The site copies the `jcc`
//!    (with the instructions before it that make room for the jump) into a trampoline that
//!    holds the relocated branch and one block per edge: the taken edge's snippets run on the
//!    branch's taken path (`j!cc over; snippets; jmp target; over:`), the fall-through edge's
//!    right after the branch, each block then continuing to the original target
//!    ([`super::layout::PointCode::on_taken`], [`super::layout::PointCode::on_fall`]).
//!
//! 4. The edge from the caller into a function whose first block is a loop header (the loop's
//!    entry is the call itself; a function `entry` point is the same edge): the function is
//!    relocated whole, its snippets laid out before the copy of the first instruction, and
//!    every branch inside the copy to the first instruction (the back edges) retargeted past
//!    them ([`Way::FromCaller`], [`super::layout::PointCode::on_arrival`]). At the original
//!    entry, a jump into the copy's start: only calls, tail calls and jumps from other
//!    functions arrive there. A point at the entry placed any other way ran on every back
//!    edge too (`entry` counted a loop's iterations), and placing it at the function entry
//!    less the back-edge arrivals would work for counters only, not for snippets.
//!
//! 5. The edge after a call into a block other edges reach too: the same copy of the whole
//!    function, the snippets laid out before the copy of the call's return address, where the
//!    callee returns (the copy pushes original return addresses, and the original return
//!    address jumps into the copy), and the copy's branches to that block retargeted past
//!    them ([`Way::FromCaller`]).
//!
//! Anything else (a jump-table or exception edge into a block with other ways in, an entry
//! from the caller or a call's fall-through in a function with indirect jumps, which cannot be
//! relocated whole, a `loop`/`jrcxz` branch) is refused with the reason.

use crate::addr::LinkAddr;
use crate::cfg::{BlockId, EdgeKind};
use crate::code::CodeView;
use crate::point::{OnEdge, Point, PointKind};

use super::plan;

/// Where an edge point's snippets run relative to the instruction at its placed address.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Way {
    /// Before the instruction (an ordinary point).
    Before,
    /// On the taken path of the conditional branch there.
    Taken,
    /// On the fall-through path of the conditional branch there.
    FallThrough,
    /// Before the instruction, only when control arrives there from outside the function's
    /// code, never by a branch inside it: the function is relocated whole. At the function's
    /// first instruction that is the call (never a back edge to it); at a call's return
    /// address, the return from the callee (never another edge into that block).
    FromCaller,
}

/// True when some branch of the function goes back to its first instruction: its entry block
/// is a loop header, so the function's entry from the caller is not the only way into it.
pub fn looping_entry(cfg: &crate::cfg::Cfg) -> bool {
    cfg.entry_block()
        .is_some_and(|b| cfg.predecessors(b).next().is_some())
}

/// True when `p` runs only on arrival from the caller at a [`looping_entry`], which only a
/// relocated copy of the function tells apart from the back edges.
pub fn from_caller(view: &dyn CodeView, p: &Point) -> bool {
    way(view, p) == Way::FromCaller
}

/// `p` moved to where its snippets run: a point on an edge gets the address of the
/// instruction it is placed at ([`way`] then says how); any other point is returned as is.
pub fn place(view: &dyn CodeView, p: &Point) -> Result<Point, String> {
    let (addr, block, _) = decide(view, p)?;
    Ok(Point {
        addr,
        block,
        ..p.clone()
    })
}

/// How the snippets of `p` (as [`place`] returned it) run at its address.
pub fn way(view: &dyn CodeView, p: &Point) -> Way {
    decide(view, p).map_or(Way::Before, |d| d.2)
}

/// Where and how an edge point runs (any other point: at its address, before it).
fn decide(view: &dyn CodeView, p: &Point) -> Result<(LinkAddr, BlockId, Way), String> {
    let caller =
        p.edge == Some(OnEdge::FromCaller) || (p.edge.is_none() && p.kind == PointKind::Entry);
    if caller {
        let cfg = view.cfg(p.func);
        if !looping_entry(cfg) {
            return Ok((p.addr, p.block, Way::Before));
        }
        if !cfg.jump_tables.is_empty() || !cfg.unresolved.is_empty() {
            return Err(format!(
                "the function's first block is a loop header, so its entry from the caller is \
                 told apart from the back edges to it only in a copy of the whole function, \
                 and a function with indirect jumps cannot be copied ({} at {})",
                p.kind.as_str(),
                p.addr
            ));
        }
        let b = cfg.entry_block().unwrap_or(p.block);
        return Ok((cfg.block(b).start, b, Way::FromCaller));
    }
    let Some(OnEdge::Edge { from, to, kind }) = p.edge else {
        return Ok((p.addr, p.block, Way::Before));
    };
    let cfg = view.cfg(p.func);
    let tb = cfg.block(to);
    let fb = cfg.block(from);
    // A case block only its jump table reaches (or a landing pad only one call reaches) runs
    // exactly when the edge is taken, whatever the edge's kind.
    if cfg.predecessors(to).count() == 1 && cfg.entry_block() != Some(to) {
        return Ok((tb.start, to, Way::Before));
    }
    match kind {
        EdgeKind::JumpTable => {
            return Err(
                "an edge of an indirect jump (a jump table) to a block with other ways in \
                 cannot be instrumented on its own yet"
                    .to_owned(),
            )
        }
        EdgeKind::Catch => {
            return Err(
                "an edge to an exception landing pad other calls reach too cannot be \
                 instrumented"
                    .to_owned(),
            )
        }
        _ => {}
    }
    if kind == EdgeKind::CallFallThrough {
        // The call's return into a block other edges reach too: in a copy of the whole
        // function the call pushes its original return address, so the callee returns into
        // the original code, whose jump there enters the copy before the block's copy; the
        // copy's own branches to the block land past the snippets laid out there.
        if !cfg.jump_tables.is_empty() || !cfg.unresolved.is_empty() {
            return Err(format!(
                "the edge {} -> {} after a call reaches a block other edges reach too, which                  only a copy of the whole function tells apart, and a function with indirect                  jumps cannot be copied",
                fb.start, tb.start
            ));
        }
        return Ok((tb.start, to, Way::FromCaller));
    }
    let last = plan::decode(view, fb.last, 15).into_iter().next();
    let Some(last) = last.filter(|i| i.ip() == fb.last.0) else {
        return Err(format!("cannot decode the instruction at {}", fb.last));
    };
    let succs = cfg.successors(from).count();
    if succs == 1 && kind != EdgeKind::CallFallThrough {
        return Ok((fb.last, from, Way::Before));
    }
    if last.is_jcc_short_or_near() && succs == 2 {
        let target = last.near_branch_target();
        if target == last.next_ip() {
            return Err(format!(
                "the branch at {} goes to the next instruction either way",
                fb.last
            ));
        }
        let way = if target == tb.start.0 {
            Way::Taken
        } else {
            Way::FallThrough
        };
        return Ok((fb.last, from, way));
    }
    Err(format!(
        "the edge {} -> {} leaves a block ending in `{}` for a block with several \
         predecessors",
        fb.start,
        tb.start,
        format!("{:?}", last.mnemonic()).to_lowercase()
    ))
}
