//! Control-flow graphs: basic blocks and typed edges of one function, built by recursive
//! traversal from its entry, with jump tables resolved and calls to non-returning functions
//! ending their blocks.
//!
//! Architecture invariant: a CFG is built from bytes read through [`crate::Binary::bytes_at`]
//! and names from the function table; it knows nothing of processes.

#![warn(missing_docs)]

pub mod build;
mod jumptable;
pub mod landing;
pub mod loops;
pub mod noreturn;
mod reaching;

use crate::addr::LinkAddr;

pub use build::build;
pub use jumptable::Limits as TableLimits;

/// Index of a block in its [`Cfg`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize)]
#[serde(transparent)]
pub struct BlockId(pub u32);

/// How control leaves a block along an edge.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum EdgeKind {
    /// Straight-line flow into the next block (including a not-taken conditional branch).
    FallThrough,
    /// A taken direct branch, conditional or not.
    Taken,
    /// The return from a call, to the instruction after it.
    CallFallThrough,
    /// One target of a resolved jump table.
    JumpTable,
    /// From a call that may throw to its exception landing pad (a `catch` or a cleanup).
    Catch,
}

impl EdgeKind {
    /// The kind's name as `show cfg` and the JSON output spell it (`call-ft`, `jump-table`, ...).
    pub fn as_str(self) -> &'static str {
        match self {
            EdgeKind::FallThrough => "fallthrough",
            EdgeKind::Taken => "taken",
            EdgeKind::CallFallThrough => "call-ft",
            EdgeKind::JumpTable => "jump-table",
            EdgeKind::Catch => "catch",
        }
    }
}

/// How a block ends, when it leaves the function or cannot be followed.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "kebab-case", tag = "kind")]
pub enum Exit {
    /// A `ret`.
    Return,
    /// A direct jump to another function's entry.
    TailCall {
        /// The entry of the function jumped to.
        target: LinkAddr,
    },
    /// An indirect jump that leaves the function: not a jump table, and taken with the stack
    /// as it was at entry (a tail call through a pointer).
    Indirect,
    /// An indirect jump that could not be resolved and that is not known to leave the function
    /// (a `switch` whose table was not read, or a jump taken inside a stack frame). Not a way
    /// out, so not a place for an exit point; its targets are missing from the graph.
    Unresolved,
    /// A call to a function that never returns (`exit`, `abort`, `__cxa_throw`, ...).
    NoReturnCall {
        /// The callee's address (a PLT stub for a library function).
        target: LinkAddr,
    },
    /// `hlt`, `ud2`, or `int3`: execution cannot continue here.
    Trap,
    /// Decoding failed or ran out of the code's bytes.
    Invalid,
}

/// A call made by a block (its last instruction).
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct CallSite {
    /// Address of the call instruction.
    pub addr: LinkAddr,
    /// The callee for direct calls; `None` for indirect ones.
    pub target: Option<LinkAddr>,
    /// True when the callee is known never to return.
    pub noreturn: bool,
}

/// A basic block: straight-line code with one entry at its start.
#[derive(Clone, Debug, serde::Serialize)]
pub struct Block {
    /// Its index in [`Cfg::blocks`].
    pub id: BlockId,
    /// Address of its first instruction.
    pub start: LinkAddr,
    /// One past its last byte.
    pub end: LinkAddr,
    /// Address of its last instruction.
    pub last: LinkAddr,
    /// How many instructions it holds; 0 for a block at an address nothing decodes at (its exit
    /// is then [`Exit::Invalid`]).
    pub instructions: u32,
    /// Set when control leaves the function here.
    pub exit: Option<Exit>,
    /// Set when the block ends in a call.
    pub call: Option<CallSite>,
}

/// An intra-procedural edge.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
pub struct Edge {
    /// The block control leaves.
    pub from: BlockId,
    /// The block control enters, at its start.
    pub to: BlockId,
    /// How control gets from one to the other.
    pub kind: EdgeKind,
}

/// A jump table found in the function.
#[derive(Clone, Debug, serde::Serialize)]
pub struct JumpTable {
    /// The indirect `jmp`.
    pub jump: LinkAddr,
    /// Where the table lives (its entry for index 0).
    pub table: LinkAddr,
    /// Entries read, up to the last one that was a target.
    pub entries: u64,
    /// Distinct targets, in table order.
    pub targets: Vec<LinkAddr>,
    /// True when a guarding compare bounded the table; false when entries were read until one
    /// left the function.
    pub bounded: bool,
    /// Bytes per entry: 8 for absolute addresses, 4 for relative offsets.
    pub stride: u64,
    /// What an entry holds.
    pub entry: TableEntry,
    /// The instruction that reads the entry (the `jmp [T + i*8]` itself, or the `mov`/`movsxd`
    /// before a `jmp reg`).
    pub load: LinkAddr,
    /// How many entries the index can reach, when something bounds it: a guard's count, a
    /// mask's, or 256 for a zero-extended byte. `None` when nothing does (the table was read
    /// while its entries led into the function).
    pub reach: Option<u64>,
}

/// What a jump table's entry holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "kebab-case", tag = "kind")]
pub enum TableEntry {
    /// An 8-byte absolute address. In a position-independent file (`relocated`) each entry is
    /// the target of an `R_X86_64_RELATIVE` relocation, whose addend the loader writes there.
    Absolute {
        /// True in a PIE or shared library.
        relocated: bool,
    },
    /// A 4-byte signed offset added to `base` (in gcc's and clang's PIE tables, the table's
    /// own start).
    Relative {
        /// What the offsets are relative to.
        base: LinkAddr,
    },
}

/// The control-flow graph of one function.
#[derive(Clone, Debug, Default, serde::Serialize)]
pub struct Cfg {
    /// The function's entry address, where the traversal started.
    pub entry: LinkAddr,
    /// Blocks sorted by start address; `blocks[0]` is not necessarily the entry (see
    /// [`Cfg::entry_block`]).
    pub blocks: Vec<Block>,
    /// Every intra-procedural edge, by source block, then target, then kind, without duplicates;
    /// calls are not edges.
    pub edges: Vec<Edge>,
    /// Jump tables resolved in the function, in the order they were found.
    pub jump_tables: Vec<JumpTable>,
    /// Indirect jumps that could not be resolved as jump tables and are not tail calls.
    pub unresolved: Vec<LinkAddr>,
    /// Each block's edge counts, built from `edges` at the first [`Cfg::in_degree`] or
    /// [`Cfg::out_degree`] (`edges` is complete once a CFG is built; one written by hand
    /// takes `Degrees::default()`).
    #[serde(skip)]
    pub degrees: Degrees,
}

/// A CFG's (in, out) edge counts by block index, computed once, when first asked.
#[derive(Clone, Debug, Default)]
pub struct Degrees(std::sync::OnceLock<Vec<(u32, u32)>>);

impl Cfg {
    /// The block with id `id`. Panics if `id` is not a block of this CFG: ids come only from it.
    pub fn block(&self, id: BlockId) -> &Block {
        &self.blocks[id.0 as usize]
    }

    /// The block holding the function's first instruction.
    pub fn entry_block(&self) -> Option<BlockId> {
        self.block_at(self.entry)
    }

    /// The block starting exactly at `addr`.
    pub fn block_at(&self, addr: LinkAddr) -> Option<BlockId> {
        self.blocks
            .binary_search_by_key(&addr, |b| b.start)
            .ok()
            .map(|i| BlockId(i as u32))
    }

    /// The block whose bytes contain `addr`.
    pub fn block_containing(&self, addr: LinkAddr) -> Option<BlockId> {
        let i = self.blocks.partition_point(|b| b.start <= addr);
        let b = self.blocks.get(i.checked_sub(1)?)?;
        (addr < b.end).then_some(b.id)
    }

    /// The edges leaving `id` (a linear scan of [`Cfg::edges`]).
    pub fn successors(&self, id: BlockId) -> impl Iterator<Item = &Edge> + '_ {
        self.edges.iter().filter(move |e| e.from == id)
    }

    /// The edges entering `id` (a linear scan of [`Cfg::edges`]).
    pub fn predecessors(&self, id: BlockId) -> impl Iterator<Item = &Edge> + '_ {
        self.edges.iter().filter(move |e| e.to == id)
    }

    /// How many edges enter `id`: `predecessors(id).count()`, from an index built once.
    /// The patcher asks it of every edge point (is the edge its target's only way in?), and
    /// the scan was the top of its profile on python3's interpreter loop.
    pub fn in_degree(&self, id: BlockId) -> usize {
        self.degrees()
            .get(id.0 as usize)
            .map_or(0, |d| d.0 as usize)
    }

    /// How many edges leave `id`: `successors(id).count()`, from the same index.
    pub fn out_degree(&self, id: BlockId) -> usize {
        self.degrees()
            .get(id.0 as usize)
            .map_or(0, |d| d.1 as usize)
    }

    fn degrees(&self) -> &[(u32, u32)] {
        self.degrees.0.get_or_init(|| {
            let mut d = vec![(0u32, 0u32); self.blocks.len()];
            for e in &self.edges {
                if let Some(to) = d.get_mut(e.to.0 as usize) {
                    to.0 += 1;
                }
                if let Some(from) = d.get_mut(e.from.0 as usize) {
                    from.1 += 1;
                }
            }
            d
        })
    }

    /// Total instructions in all blocks.
    pub fn instructions(&self) -> u64 {
        self.blocks.iter().map(|b| u64::from(b.instructions)).sum()
    }

    /// True when some path leaves the function normally (a return, a tail call, an indirect
    /// tail call, or an unresolved jump whose targets might lead to one).
    pub fn may_return(&self, noreturn_target: &dyn Fn(LinkAddr) -> bool) -> bool {
        self.blocks.iter().any(|b| match &b.exit {
            Some(Exit::Return) | Some(Exit::Indirect) | Some(Exit::Unresolved) => true,
            Some(Exit::TailCall { target }) => !noreturn_target(*target),
            _ => false,
        })
    }

    /// McCabe's cyclomatic complexity, E − N + 2 (1 for an empty graph).
    pub fn cyclomatic_complexity(&self) -> i64 {
        if self.blocks.is_empty() {
            return 1;
        }
        self.edges.len() as i64 - self.blocks.len() as i64 + 2
    }

    /// Every call site, in address order.
    pub fn calls(&self) -> impl Iterator<Item = &CallSite> + '_ {
        self.blocks.iter().filter_map(|b| b.call.as_ref())
    }
}

#[cfg(test)]
mod tests;
