//! Loops: the dominator tree (petgraph's Cooper–Harvey–Kennedy `simple_fast`), natural loops
//! of back edges, loops sharing a header merged into one, and the nesting tree, named as
//! Dyninst names them (`loop_1`, `loop_1.1`, ...) in address order of their headers.
//!
//! A cycle entered other than through a dominating header is irreducible: its retreating edges
//! are reported and no loop is made of it.

use std::collections::{BTreeMap, BTreeSet};

use petgraph::algo::dominators::{simple_fast, Dominators};
use petgraph::graph::{DiGraph, NodeIndex};

use super::{BlockId, Cfg};

/// One natural loop.
#[derive(Clone, Debug, serde::Serialize)]
pub struct Loop {
    /// `loop_1`, `loop_1.2`, ...
    pub name: String,
    pub header: BlockId,
    /// Every block of the loop, nested loops' included, in address order.
    pub blocks: Vec<BlockId>,
    /// `(latch, header)` pairs: the edges that close the loop.
    pub back_edges: Vec<(BlockId, BlockId)>,
    /// Index of the enclosing loop in [`LoopForest::loops`].
    pub parent: Option<usize>,
    pub children: Vec<usize>,
    /// 1 for outermost loops.
    pub depth: u32,
}

/// All loops of a function, in pre-order (each loop before the loops nested in it).
#[derive(Clone, Debug, Default, serde::Serialize)]
pub struct LoopForest {
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

    /// The innermost loop containing `block`.
    pub fn innermost(&self, block: BlockId) -> Option<&Loop> {
        self.loops
            .iter()
            .filter(|l| l.blocks.binary_search(&block).is_ok())
            .max_by_key(|l| l.depth)
    }
}

/// Finds the loops of `cfg`.
pub fn find(cfg: &Cfg) -> LoopForest {
    let Some(entry) = cfg.entry_block() else {
        return LoopForest::default();
    };
    let n = cfg.blocks.len();
    let mut graph = DiGraph::<(), ()>::with_capacity(n, cfg.edges.len());
    for _ in 0..n {
        graph.add_node(());
    }
    for e in &cfg.edges {
        graph.add_edge(
            NodeIndex::new(e.from.0 as usize),
            NodeIndex::new(e.to.0 as usize),
            (),
        );
    }
    let root = NodeIndex::new(entry.0 as usize);
    let doms = simple_fast(&graph, root);
    let idom = (0..n)
        .map(|i| {
            doms.immediate_dominator(NodeIndex::new(i))
                .map(|d| BlockId(d.index() as u32))
        })
        .collect();

    let dominates = |a: usize, b: usize, doms: &Dominators<NodeIndex>| {
        doms.dominators(NodeIndex::new(b))
            .is_some_and(|mut it| it.any(|d| d.index() == a))
    };

    // Back edges grouped by header; loops sharing a header become one.
    let mut by_header: BTreeMap<usize, Vec<usize>> = BTreeMap::new();
    let mut irreducible = Vec::new();
    for (from, to) in retreating_edges(cfg, entry.0 as usize) {
        if dominates(to, from, &doms) {
            by_header.entry(to).or_default().push(from);
        } else {
            irreducible.push((BlockId(from as u32), BlockId(to as u32)));
        }
    }

    let preds: Vec<Vec<usize>> = {
        let mut p = vec![Vec::new(); n];
        for e in &cfg.edges {
            p[e.to.0 as usize].push(e.from.0 as usize);
        }
        p
    };
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
                    stack.extend(preds[b].iter().copied());
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

/// Edges to a block on the current DFS path from the entry (iterative, so deep CFGs cannot
/// overflow the stack).
fn retreating_edges(cfg: &Cfg, entry: usize) -> Vec<(usize, usize)> {
    let n = cfg.blocks.len();
    let mut succs: Vec<Vec<usize>> = vec![Vec::new(); n];
    for e in &cfg.edges {
        succs[e.from.0 as usize].push(e.to.0 as usize);
    }
    #[derive(Clone, Copy, PartialEq)]
    enum State {
        New,
        OnPath,
        Done,
    }
    let mut state = vec![State::New; n];
    let mut out = Vec::new();
    let mut stack: Vec<(usize, usize)> = vec![(entry, 0)];
    state[entry] = State::OnPath;
    while let Some((node, i)) = stack.pop() {
        if i < succs[node].len() {
            stack.push((node, i + 1));
            let s = succs[node][i];
            match state[s] {
                State::New => {
                    state[s] = State::OnPath;
                    stack.push((s, 0));
                }
                State::OnPath => out.push((node, s)),
                State::Done => {}
            }
        } else {
            state[node] = State::Done;
        }
    }
    out.sort_unstable();
    out.dedup();
    out
}
