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
//! 6. A jump-table edge into a block other edges reach too: the instruction that reads the
//!    table's entry (in the jump's own block) is moved into a trampoline that reads a private
//!    copy of the table instead ([`Way::Table`]). The copy's entries for the edge's target lead
//!    to a stub in the same trampoline (the edge's snippets, then a jump to the target); every
//!    other entry is the original's, byte for byte. The original table is never written, so
//!    other jumps sharing it (a computed goto's dispatch, tail-duplicated) are unaffected, and
//!    a PIE's table of relative offsets needs no relocation (the copy's offsets are from the
//!    same base). Refused, with the reason, when nothing bounds the index (the copy's size is
//!    unknown), when the entries are absolute addresses the loader relocates (a PIE's), or
//!    when the load is not in the jump's block.
//!
//! Anything else (an exception edge into a block with other ways in, an entry from the caller
//! or a call's fall-through in a function with indirect jumps, which cannot be relocated
//! whole, a `loop`/`jrcxz` branch) is refused with the reason.

use crate::addr::LinkAddr;
use crate::cfg::{BlockId, EdgeKind, JumpTable, TableEntry};
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
    /// At the instruction reading a jump table's entry, only when the entry read leads to the
    /// edge's target: the instruction reads a private copy of the table whose entries for the
    /// target lead to the snippets ([`table_of`] describes it).
    Table,
}

/// Entries a private copy of a table may have at the most (a guard's count can be large).
pub const MAX_TABLE_COPY: u64 = 4096;

/// The jump table of the edge point `p` placed with [`Way::Table`], and the edge's target.
pub fn table_of<'v>(view: &'v dyn CodeView, p: &Point) -> Option<(&'v JumpTable, LinkAddr)> {
    let Some(OnEdge::Edge { from, to, .. }) = p.edge else {
        return None;
    };
    let cfg = view.cfg(p.func);
    let last = cfg.block(from).last;
    let t = cfg.jump_tables.iter().find(|t| t.jump == last)?;
    Some((t, cfg.block(to).start))
}

/// Why the table `t` of a jump ending block `from` cannot be read from a private copy, if it
/// cannot.
fn table_refusal(
    view: &dyn CodeView,
    cfg: &crate::cfg::Cfg,
    t: &JumpTable,
    from: BlockId,
) -> Option<String> {
    if let Some(why) = uncopyable(view, t) {
        return Some(why);
    }
    if cfg.block_containing(t.load) != Some(from) {
        return Some(format!(
            "the entry of the jump table at {} is read at {}, outside the jump's block",
            t.table, t.load
        ));
    }
    None
}

/// Why a function cannot be copied whole, if it cannot: an indirect jump left unresolved (its
/// targets in the original would run original code), or a jump table that the copy cannot
/// read from a private copy of its own whose entries lead into the copy ([`uncopyable`]; the
/// original table is never written, and its entries lead into the original body).
pub fn copy_refusal(view: &dyn CodeView, cfg: &crate::cfg::Cfg) -> Option<String> {
    if let Some(at) = cfg.unresolved.first() {
        return Some(format!("it has an unresolved indirect jump at {at}"));
    }
    for t in &cfg.jump_tables {
        if let Some(why) = uncopyable(view, t) {
            return Some(why);
        }
        if cfg.block_containing(t.load).is_none() {
            return Some(format!(
                "the entry of the jump table at {} is read at {}, outside its code",
                t.table, t.load
            ));
        }
    }
    None
}

/// Why the table `t` cannot be read from a private copy by a relocated copy of the
/// instruction that reads it, if it cannot.
fn uncopyable(view: &dyn CodeView, t: &JumpTable) -> Option<String> {
    if let TableEntry::Absolute { relocated: true } = t.entry {
        return Some(format!(
            "the jump table at {} holds absolute addresses the loader relocates (a PIE's), \
             which a private copy of it cannot hold without relocations of its own",
            t.table
        ));
    }
    let Some(reach) = t.reach else {
        return Some(format!(
            "nothing bounds the index of the jump table at {}, so the size of a private copy \
             of it is unknown",
            t.table
        ));
    };
    if reach > MAX_TABLE_COPY {
        return Some(format!(
            "the jump table at {} has {reach} entries, more than a private copy may hold ({MAX_TABLE_COPY})",
            t.table
        ));
    }
    if view.bytes_at(t.table, reach * t.stride).map(<[u8]>::len)
        != Some((reach * t.stride) as usize)
    {
        return Some(format!(
            "the {reach} entries the index can reach from {} are not all in the file",
            t.table
        ));
    }
    let load = plan::decode(view, t.load, 15).into_iter().next();
    if !load.is_some_and(|i| {
        i.ip() == t.load.0
            && i.memory_index() != iced_x86::Register::None
            && !i.is_ip_rel_memory_operand()
            && i.memory_size().size() as u64 == t.stride
    }) {
        return Some(format!(
            "the instruction at {} does not read the jump table at {} through an index",
            t.load, t.table
        ));
    }
    None
}

/// True when some branch of the function goes back to its first instruction: its entry block
/// is a loop header, so the function's entry from the caller is not the only way into it.
pub fn looping_entry(cfg: &crate::cfg::Cfg) -> bool {
    cfg.entry_block().is_some_and(|b| cfg.in_degree(b) > 0)
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
        if let Some(why) = copy_refusal(view, cfg) {
            return Err(format!(
                "the function's first block is a loop header, so its entry from the caller is \
                 told apart from the back edges to it only in a copy of the whole function, \
                 and it cannot be copied: {why} ({} at {})",
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
    if cfg.in_degree(to) == 1 && cfg.entry_block() != Some(to) {
        return Ok((tb.start, to, Way::Before));
    }
    match kind {
        EdgeKind::JumpTable => {
            let Some(t) = cfg.jump_tables.iter().find(|t| t.jump == fb.last) else {
                return Err(format!(
                    "no jump table of the jump at {} leads to {}",
                    fb.last, tb.start
                ));
            };
            if let Some(why) = table_refusal(view, cfg, t, from) {
                return Err(why);
            }
            return Ok((t.load, from, Way::Table));
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
        if let Some(why) = copy_refusal(view, cfg) {
            return Err(format!(
                "the edge {} -> {} after a call reaches a block other edges reach too, which \
                 only a copy of the whole function tells apart, and it cannot be copied: {why}",
                fb.start, tb.start
            ));
        }
        return Ok((tb.start, to, Way::FromCaller));
    }
    let last = plan::decode(view, fb.last, 15).into_iter().next();
    let Some(last) = last.filter(|i| i.ip() == fb.last.0) else {
        return Err(format!("cannot decode the instruction at {}", fb.last));
    };
    let succs = cfg.out_degree(from);
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

/// For the function `func` copied whole: the instruction reading each of its jump tables reads
/// a private copy instead ([`super::layout::TableCopy::whole`]), whose entries lead to the
/// copies of their targets; without it the copy's dispatch would land in the original body,
/// which no longer runs (its bytes serve as pads for the copy's arrivals). `codes` holds the
/// trampoline's point code by runtime address; edge points already placed on a table keep
/// their cases.
pub fn copy_tables(
    view: &dyn CodeView,
    space: &dyn super::AddressSpace,
    bias: u64,
    func: crate::symbols::FuncId,
    codes: &mut std::collections::HashMap<u64, super::layout::PointCode<'_>>,
    vector: super::VectorSave,
) -> Result<(), super::PatchError> {
    for t in &view.cfg(func).jump_tables {
        let Some(reach) = t.reach else {
            return Err(super::PatchError::Layout(format!(
                "nothing bounds the index of the jump table at {}",
                t.table
            )));
        };
        let pc = codes
            .entry(t.load.to_runtime(bias).0)
            .or_insert_with(|| super::layout::PointCode::empty(vector));
        if pc.table.is_none() {
            pc.table = Some(table_copy(space, bias, t, reach)?);
        }
        if let Some(copy) = &mut pc.table {
            copy.whole = true;
        }
    }
    Ok(())
}

/// A private copy of `t`'s first `reach` entries, as the process has them, with no case yet.
pub fn table_copy<'e>(
    space: &dyn super::AddressSpace,
    bias: u64,
    t: &JumpTable,
    reach: u64,
) -> Result<super::layout::TableCopy<'e>, super::PatchError> {
    let at = t.table.to_runtime(bias);
    Ok(super::layout::TableCopy {
        table: at.0,
        stride: t.stride,
        base: match t.entry {
            TableEntry::Relative { base } => Some(base.to_runtime(bias).0),
            TableEntry::Absolute { .. } => None,
        },
        original: space.read(at, (reach * t.stride) as usize)?,
        cases: Vec::new(),
        whole: false,
    })
}
