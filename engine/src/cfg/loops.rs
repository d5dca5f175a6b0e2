//! Loops: the dominator tree (Cooper–Harvey–Kennedy), natural loops
//! of back edges, loops sharing a header merged into one, and the nesting tree, named as
//! Dyninst names them (`loop_1`, `loop_1.1`, ...) in address order of their headers.
//!
//! A cycle entered other than through a dominating header is irreducible: its retreating edges
//! are reported and no loop is made of it.

use std::collections::{BTreeMap, BTreeSet};

use super::{BlockId, Cfg};

/// One natural loop.
#[derive(Clone, Debug, serde::Serialize)]
pub struct Loop {
    /// `loop_1`, `loop_1.2`, ...
    pub name: String,
    /// The block every entry into the loop goes through; it dominates every block of the loop.
    pub header: BlockId,
    /// Every block of the loop, nested loops' included, in address order.
    pub blocks: Vec<BlockId>,
    /// `(latch, header)` pairs: the edges that close the loop.
    pub back_edges: Vec<(BlockId, BlockId)>,
    /// Index of the enclosing loop in [`LoopForest::loops`].
    pub parent: Option<usize>,
    /// Indexes of the loops nested directly in this one, in [`LoopForest::loops`].
    pub children: Vec<usize>,
    /// 1 for outermost loops.
    pub depth: u32,
}

/// All loops of a function, in pre-order (each loop before the loops nested in it).
#[derive(Clone, Debug, Default, serde::Serialize)]
pub struct LoopForest {
    /// Every loop, in pre-order: an outer loop before those nested in it, siblings by header address.
    pub loops: Vec<Loop>,
    /// Retreating edges whose target does not dominate their source: irreducible cycles.
    pub irreducible: Vec<(BlockId, BlockId)>,
    /// Immediate dominator of each block (`None` for the entry and unreachable blocks).
    pub idom: Vec<Option<BlockId>>,
}

impl LoopForest {
    /// The deepest nesting level (0 without loops).
    pub fn max_depth(&self) -> u32 {
        self.loops.iter().map(|l| l.depth).max().unwrap_or(0)
    }

    /// The loop named `name`.
    pub fn by_name(&self, name: &str) -> Option<&Loop> {
        self.loops.iter().find(|l| l.name == name)
    }

    /// The loop `name` names in `cfg`, the graph the loops were found in: a name as
    /// [`Loop::name`] spells it (`loop_1.2`), or its header's address as `loops` prints it
    /// (`0x12f0`), which also names a loop of a stripped binary whatever the nesting.
    pub fn find(&self, cfg: &Cfg, name: &str) -> Option<&Loop> {
        if let Some(l) = self.by_name(name) {
            return Some(l);
        }
        let hex = name
            .strip_prefix("0x")
            .or_else(|| name.strip_prefix("0X"))?;
        let addr = u64::from_str_radix(hex, 16).ok()?;
        self.loops
            .iter()
            .find(|l| cfg.block(l.header).start.0 == addr)
    }

    /// The innermost loop containing `block`.
    pub fn innermost(&self, block: BlockId) -> Option<&Loop> {
        self.loops
            .iter()
            .filter(|l| l.blocks.binary_search(&block).is_ok())
            .max_by_key(|l| l.depth)
    }
}

/// How control crosses a loop's boundary or closes an iteration: one place a loop point puts
/// code, in the terms of the loop-aware search seed (entry, exit, iteration begin and end).
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "kebab-case", tag = "edge")]
pub enum LoopEdge {
    /// An intra-procedural edge.
    Edge {
        /// The block control leaves.
        from: BlockId,
        /// The block control enters.
        to: BlockId,
        /// The edge's kind in the CFG.
        kind: super::EdgeKind,
    },
    /// The loop's header is the function's entry block: the caller enters the loop.
    FromCaller,
}

/// The points of one loop. Entries and exits balance on every path that enters the loop and
/// leaves it normally, and so do iteration begins and ends.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct LoopPoints {
    /// Edges M -> H where H is the header and M is outside the loop.
    pub entry: Vec<LoopEdge>,
    /// Edges M -> N where M is in the loop and N is not. A `return`, tail call or `break` out
    /// of the loop is one of these: a block that leaves the function reaches no back edge, so
    /// it is outside the natural loop and the edge into it is the exit.
    pub exit: Vec<LoopEdge>,
    /// The header: every iteration begins there.
    pub iter_begin: BlockId,
    /// The back edges, then the exits: every iteration ends on one of them.
    pub iter_end: Vec<LoopEdge>,
}

impl Loop {
    /// True when `block` belongs to the loop (nested loops' blocks included).
    pub fn contains(&self, block: BlockId) -> bool {
        self.blocks.binary_search(&block).is_ok()
    }

    /// Where this loop's entry, exit and iteration points are in `cfg`, the graph the loop was
    /// found in.
    pub fn points(&self, cfg: &Cfg) -> LoopPoints {
        let edge = |e: &super::Edge| LoopEdge::Edge {
            from: e.from,
            to: e.to,
            kind: e.kind,
        };
        let mut entry: Vec<LoopEdge> = cfg
            .predecessors(self.header)
            .filter(|e| !self.contains(e.from))
            .map(edge)
            .collect();
        if cfg.entry_block() == Some(self.header) {
            entry.insert(0, LoopEdge::FromCaller);
        }
        let exit: Vec<LoopEdge> = cfg
            .edges
            .iter()
            .filter(|e| self.contains(e.from) && !self.contains(e.to))
            .map(edge)
            .collect();
        let back = cfg
            .edges
            .iter()
            .filter(|e| e.to == self.header && self.contains(e.from))
            .map(edge);
        let iter_end = back.chain(exit.iter().copied()).collect();
        LoopPoints {
            entry,
            exit,
            iter_begin: self.header,
            iter_end,
        }
    }
}

/// Successor and predecessor lists of every block in two flat arrays (compressed sparse rows):
/// two allocations per function instead of two per block.
struct Adjacency {
    succ_start: Vec<u32>,
    succs: Vec<u32>,
    pred_start: Vec<u32>,
    preds: Vec<u32>,
}

impl Adjacency {
    fn new(cfg: &Cfg) -> Adjacency {
        let n = cfg.blocks.len();
        let pairs = |key: fn(&super::Edge) -> (u32, u32)| {
            let mut start = vec![0u32; n + 1];
            for e in &cfg.edges {
                start[key(e).0 as usize + 1] += 1;
            }
            for i in 0..n {
                start[i + 1] += start[i];
            }
            let mut fill = start.clone();
            let mut out = vec![0u32; cfg.edges.len()];
            for e in &cfg.edges {
                let (from, to) = key(e);
                out[fill[from as usize] as usize] = to;
                fill[from as usize] += 1;
            }
            (start, out)
        };
        let (succ_start, succs) = pairs(|e| (e.from.0, e.to.0));
        let (pred_start, preds) = pairs(|e| (e.to.0, e.from.0));
        Adjacency {
            succ_start,
            succs,
            pred_start,
            preds,
        }
    }

    fn succs(&self, b: usize) -> &[u32] {
        &self.succs[self.succ_start[b] as usize..self.succ_start[b + 1] as usize]
    }

    fn preds(&self, b: usize) -> &[u32] {
        &self.preds[self.pred_start[b] as usize..self.pred_start[b + 1] as usize]
    }
}

/// Finds the loops of `cfg`.
pub fn find(cfg: &Cfg) -> LoopForest {
    let Some(entry) = cfg.entry_block() else {
        return LoopForest::default();
    };
    let n = cfg.blocks.len();
    let adj = Adjacency::new(cfg);
    let entry = entry.0 as usize;
    let (postorder, retreating) = depth_first(&adj, n, entry);
    let idom_index = dominators(&adj, n, entry, &postorder);
    let idom = idom_index
        .iter()
        .enumerate()
        .map(|(b, d)| match *d {
            NONE => None,
            d if d as usize == b => None,
            d => Some(BlockId(d)),
        })
        .collect();
    // True when `a` dominates `b`: `a` is on `b`'s chain of immediate dominators.
    let dominates = |a: usize, b: usize| {
        let mut x = b;
        loop {
            if x == a {
                return true;
            }
            let d = idom_index[x];
            if d == NONE || d as usize == x {
                return false;
            }
            x = d as usize;
        }
    };

    // Back edges grouped by header; loops sharing a header become one.
    let mut by_header: BTreeMap<usize, Vec<usize>> = BTreeMap::new();
    let mut irreducible = Vec::new();
    for (from, to) in retreating {
        if dominates(to, from) {
            by_header.entry(to).or_default().push(from);
        } else {
            irreducible.push((BlockId(from as u32), BlockId(to as u32)));
        }
    }

    struct Raw {
        header: usize,
        body: BTreeSet<usize>,
        latches: Vec<usize>,
    }
    let mut raws: Vec<Raw> = by_header
        .into_iter()
        .map(|(header, latches)| {
            let mut body = BTreeSet::from([header]);
            let mut stack: Vec<usize> = latches.clone();
            while let Some(b) = stack.pop() {
                if body.insert(b) {
                    stack.extend(adj.preds(b).iter().map(|&p| p as usize));
                }
            }
            Raw {
                header,
                body,
                latches,
            }
        })
        .collect();

    // Parent of each loop: the smallest other loop whose body holds its header.
    raws.sort_by_key(|r| (std::cmp::Reverse(r.body.len()), cfg.blocks[r.header].start));
    let parent_of: Vec<Option<usize>> = (0..raws.len())
        .map(|i| {
            (0..raws.len())
                .filter(|&j| {
                    j != i
                        && raws[j].body.contains(&raws[i].header)
                        && raws[j].body.len() > raws[i].body.len()
                })
                .min_by_key(|&j| raws[j].body.len())
        })
        .collect();

    // Name in pre-order, siblings in header address order.
    let mut children: Vec<Vec<usize>> = vec![Vec::new(); raws.len()];
    let mut roots = Vec::new();
    for (i, p) in parent_of.iter().enumerate() {
        match p {
            Some(p) => children[*p].push(i),
            None => roots.push(i),
        }
    }
    let key = |i: &usize| cfg.blocks[raws[*i].header].start;
    roots.sort_by_key(key);
    for c in &mut children {
        c.sort_by_key(key);
    }
    let mut order: Vec<(usize, String, u32)> = Vec::new();
    fn visit(
        i: usize,
        name: String,
        depth: u32,
        children: &[Vec<usize>],
        order: &mut Vec<(usize, String, u32)>,
    ) {
        order.push((i, name.clone(), depth));
        for (k, &c) in children[i].iter().enumerate() {
            visit(c, format!("{name}.{}", k + 1), depth + 1, children, order);
        }
    }
    for (k, &r) in roots.iter().enumerate() {
        visit(r, format!("loop_{}", k + 1), 1, &children, &mut order);
    }
    let position: BTreeMap<usize, usize> = order
        .iter()
        .enumerate()
        .map(|(pos, (i, _, _))| (*i, pos))
        .collect();
    let loops = order
        .iter()
        .map(|(i, name, depth)| {
            let r = &raws[*i];
            Loop {
                name: name.clone(),
                header: BlockId(r.header as u32),
                blocks: r.body.iter().map(|&b| BlockId(b as u32)).collect(),
                back_edges: r
                    .latches
                    .iter()
                    .map(|&l| (BlockId(l as u32), BlockId(r.header as u32)))
                    .collect(),
                parent: parent_of[*i].map(|p| position[&p]),
                children: children[*i].iter().map(|c| position[c]).collect(),
                depth: *depth,
            }
        })
        .collect();
    LoopForest {
        loops,
        irreducible,
        idom,
    }
}

/// Marks an unreachable block in [`dominators`]' result.
const NONE: u32 = u32::MAX;

/// A depth-first walk from the entry (iterative, so deep CFGs cannot overflow the stack): the
/// blocks in postorder, and the retreating edges, those to a block on the current path.
fn depth_first(adj: &Adjacency, n: usize, entry: usize) -> (Vec<u32>, Vec<(usize, usize)>) {
    #[derive(Clone, Copy, PartialEq)]
    enum State {
        New,
        OnPath,
        Done,
    }
    let mut state = vec![State::New; n];
    let mut postorder = Vec::with_capacity(n);
    let mut retreating = Vec::new();
    let mut stack: Vec<(usize, usize)> = vec![(entry, 0)];
    state[entry] = State::OnPath;
    while let Some((node, i)) = stack.pop() {
        let succs = adj.succs(node);
        if i < succs.len() {
            stack.push((node, i + 1));
            let s = succs[i] as usize;
            match state[s] {
                State::New => {
                    state[s] = State::OnPath;
                    stack.push((s, 0));
                }
                State::OnPath => retreating.push((node, s)),
                State::Done => {}
            }
        } else {
            state[node] = State::Done;
            postorder.push(node as u32);
        }
    }
    retreating.sort_unstable();
    retreating.dedup();
    (postorder, retreating)
}

/// Immediate dominators by Cooper, Harvey and Kennedy's "A Simple, Fast Dominance Algorithm",
/// over dense block indices: the entry is its own, unreachable blocks get [`NONE`].
/// (petgraph's `simple_fast` computes the same but keys its tables by hashing, which made it
/// most of the loop analysis's time on large binaries.)
fn dominators(adj: &Adjacency, n: usize, entry: usize, postorder: &[u32]) -> Vec<u32> {
    let mut po_index = vec![NONE; n];
    for (i, &b) in postorder.iter().enumerate() {
        po_index[b as usize] = i as u32;
    }
    let mut idom = vec![NONE; n];
    idom[entry] = entry as u32;
    let intersect = |idom: &[u32], mut a: u32, mut b: u32| {
        while a != b {
            while po_index[a as usize] < po_index[b as usize] {
                a = idom[a as usize];
            }
            while po_index[b as usize] < po_index[a as usize] {
                b = idom[b as usize];
            }
        }
        a
    };
    let mut changed = true;
    while changed {
        changed = false;
        // Reverse postorder, skipping the entry (last in postorder).
        for &b in postorder.iter().rev().skip(1) {
            let mut new = NONE;
            for &p in adj.preds(b as usize) {
                if idom[p as usize] == NONE {
                    continue;
                }
                new = if new == NONE {
                    p
                } else {
                    intersect(&idom, p, new)
                };
            }
            if new != NONE && idom[b as usize] != new {
                idom[b as usize] = new;
                changed = true;
            }
        }
    }
    idom
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::addr::LinkAddr;
    use crate::cfg::{Block, Edge, EdgeKind, Exit};

    /// A CFG of `n` blocks 16 bytes apart from 0x1000, block 0 the entry, with the given edges
    /// and the given blocks ending in `ret`.
    fn graph(n: u32, edges: &[(u32, u32, EdgeKind)], returns: &[u32]) -> Cfg {
        let blocks = (0..n)
            .map(|i| {
                let start = 0x1000 + 16 * u64::from(i);
                Block {
                    id: BlockId(i),
                    start: LinkAddr(start),
                    end: LinkAddr(start + 16),
                    last: LinkAddr(start + 14),
                    instructions: 4,
                    exit: returns.contains(&i).then_some(Exit::Return),
                    call: None,
                }
            })
            .collect();
        let edges = edges
            .iter()
            .map(|&(from, to, kind)| Edge {
                from: BlockId(from),
                to: BlockId(to),
                kind,
            })
            .collect();
        Cfg {
            entry: LinkAddr(0x1000),
            blocks,
            edges,
            ..Cfg::default()
        }
    }

    fn e(from: u32, to: u32, kind: EdgeKind) -> LoopEdge {
        LoopEdge::Edge {
            from: BlockId(from),
            to: BlockId(to),
            kind,
        }
    }

    use EdgeKind::{FallThrough as Ft, Taken as Tk};

    /// 0 -> 1 (header) -> 2 -> 1 (back) ; 1 -> 3 (exit) ; 2 -> 4 (break) ; 3, 4 return.
    #[test]
    fn a_loop_with_a_break_has_two_exits_and_its_iterations_end_on_back_and_exit_edges() {
        let cfg = graph(
            5,
            &[(0, 1, Ft), (1, 2, Ft), (1, 3, Tk), (2, 1, Tk), (2, 4, Ft)],
            &[3, 4],
        );
        let forest = find(&cfg);
        assert_eq!(forest.loops.len(), 1);
        let p = forest.loops[0].points(&cfg);
        assert_eq!(p.entry, vec![e(0, 1, Ft)]);
        assert_eq!(p.exit, vec![e(1, 3, Tk), e(2, 4, Ft)]);
        assert_eq!(p.iter_begin, BlockId(1));
        assert_eq!(p.iter_end, vec![e(2, 1, Tk), e(1, 3, Tk), e(2, 4, Ft)]);
    }

    /// A `return` inside the loop leaves it along the edge to the returning block; a header at
    /// the function's entry is entered by the caller.
    #[test]
    fn returning_from_inside_leaves_the_loop_and_an_entry_header_is_entered_by_the_caller() {
        // 0 (header and entry) -> 1 -> 0 (back); 1 -> 2 (ret).
        let cfg = graph(3, &[(0, 1, Ft), (1, 0, Tk), (1, 2, Ft)], &[2]);
        let forest = find(&cfg);
        let p = forest.loops[0].points(&cfg);
        assert_eq!(p.entry, vec![LoopEdge::FromCaller]);
        assert_eq!(p.exit, vec![e(1, 2, Ft)]);
        assert_eq!(p.iter_end, vec![e(1, 0, Tk), e(1, 2, Ft)]);
    }

    /// The inner loop's `continue` of the outer loop exits the inner loop only.
    #[test]
    fn nested_loops_exit_to_the_outer_header() {
        // 0 -> 1 (outer header) -> 2 (inner header) -> 3 -> 2 (inner back)
        // 3 -> 1 (outer back, leaves the inner loop); 1 -> 4 ret.
        let cfg = graph(
            5,
            &[
                (0, 1, Ft),
                (1, 2, Ft),
                (2, 3, Ft),
                (3, 2, Tk),
                (3, 1, Ft),
                (1, 4, Tk),
            ],
            &[4],
        );
        let forest = find(&cfg);
        let outer = forest.by_name("loop_1").unwrap().points(&cfg);
        let inner = forest.by_name("loop_1.1").unwrap().points(&cfg);
        assert_eq!(outer.entry, vec![e(0, 1, Ft)]);
        assert_eq!(outer.exit, vec![e(1, 4, Tk)]);
        assert_eq!(inner.entry, vec![e(1, 2, Ft)]);
        assert_eq!(inner.exit, vec![e(3, 1, Ft)]);
        assert_eq!(inner.iter_end, vec![e(3, 2, Tk), e(3, 1, Ft)]);
        // The same loops by their headers' addresses, as `loops` prints them.
        assert_eq!(forest.find(&cfg, "0x1010").unwrap().name, "loop_1");
        assert_eq!(forest.find(&cfg, "0x1020").unwrap().name, "loop_1.1");
        assert_eq!(forest.find(&cfg, "loop_1.1").unwrap().header, BlockId(2));
        assert!(forest.find(&cfg, "0x1030").is_none(), "not a header");
        assert!(forest.find(&cfg, "0xzz").is_none());
    }
}
