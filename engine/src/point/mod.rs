//! Instrumentation points: the one type every kind of point is (function entry and exit, call
//! site before and after, loop entry, exit and iteration, block entry, instruction before and
//! after, CFG edge), the one parser of a point as users write it ([`spec`]), the one place
//! that finds a specification's points in a function's CFG ([`find`]), the one callee matcher
//! ([`callee_matches`]), and the facts a snippet may ask of a point ([`facts()`]).
//!
//! A point that is not on an edge is "just before the instruction at [`Point::addr`]": entry
//! is before the first instruction; an exit is before the `ret`, before the tail-call `jmp`
//! (direct, or an indirect one that is no jump table), or before the call to a non-returning
//! function (PATCHING.md, "Exits"); a call-before point is before the `call`; a call-after
//! point is before the instruction the call returns to; a block point before the block's first
//! instruction; a loop's iteration begin before its header's first instruction. The patcher
//! ([`crate::patch`]) decides how control gets there; this module only says where.
//!
//! Points on a CFG edge ([`Point::edge`]: loop entry, exit and iteration end, `edge`) run
//! only when control takes that edge; the patcher places them ([`crate::patch::edge`]: at
//! the target, at the source's last instruction, or through an edge trampoline).

#![warn(missing_docs)]

pub mod facts;
pub mod spec;

pub use facts::facts;
pub use spec::{LoopAt, PointSpec, Where};

use crate::addr::LinkAddr;
use crate::cfg::loops::LoopEdge;
use crate::cfg::loops::LoopForest;
use crate::cfg::{BlockId, Cfg, Exit};
use crate::snippet;
use crate::symbols::{FuncId, FunctionTable};

/// Why a function exit is an exit.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum ExitKind {
    /// A `ret`.
    Return,
    /// A `jmp` to another function's entry.
    TailCall,
    /// A call to a function that never returns: the point is before the call.
    NoReturnCall,
    /// An indirect `jmp` that is not a resolved jump table: taken to be a tail call through a
    /// pointer (`return fn(x);`), as [`crate::cfg::Cfg::may_return`] takes it. Without it, a
    /// function whose only way out is such a jump would have no exit at all.
    IndirectJump,
}

/// What kind of point.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize)]
#[serde(rename_all = "kebab-case", tag = "kind")]
pub enum PointKind {
    /// Function entry: before the first instruction.
    Entry,
    /// A way out of the function.
    Exit {
        /// Which way.
        how: ExitKind,
    },
    /// Before a call instruction.
    CallBefore,
    /// Where a call returns to.
    CallAfter,
    /// A loop's entry, exit (on edges), iteration begin (at the header) or end (on edges).
    Loop {
        /// Where in the loop.
        at: LoopAt,
    },
    /// Entry to a basic block.
    Block,
    /// Before an instruction.
    InsnBefore,
    /// After an instruction that falls through inside its block.
    InsnAfter,
    /// On a CFG edge.
    Edge,
}

impl PointKind {
    /// The name `show points` uses.
    pub fn as_str(self) -> &'static str {
        match self {
            PointKind::Entry => "entry",
            PointKind::Exit {
                how: ExitKind::Return,
            } => "exit (ret)",
            PointKind::Exit {
                how: ExitKind::TailCall,
            } => "exit (tail call)",
            PointKind::Exit {
                how: ExitKind::NoReturnCall,
            } => "exit (no-return call)",
            PointKind::Exit {
                how: ExitKind::IndirectJump,
            } => "exit (indirect jmp)",
            PointKind::CallBefore => "call-before",
            PointKind::CallAfter => "call-after",
            PointKind::Loop { at } => match at {
                LoopAt::Entry => "loop-entry",
                LoopAt::Exit => "loop-exit",
                LoopAt::IterBegin => "loop-iter-begin",
                LoopAt::IterEnd => "loop-iter-end",
            },
            PointKind::Block => "block",
            PointKind::InsnBefore => "insn-before",
            PointKind::InsnAfter => "insn-after",
            PointKind::Edge => "edge",
        }
    }

    /// What the snippet compiler needs to know about the point (`$return`, `$0..$5`).
    pub fn snippet_kind(self) -> snippet::PointKind {
        match self {
            PointKind::Entry => snippet::PointKind::Entry,
            PointKind::Exit { .. } => snippet::PointKind::Exit,
            PointKind::CallBefore => snippet::PointKind::CallBefore,
            PointKind::CallAfter => snippet::PointKind::CallAfter,
            _ => snippet::PointKind::Other,
        }
    }

    /// True when the point is at a function-call boundary, where the SysV ABI leaves the
    /// arithmetic flags undefined, so a snippet may change them without saving them.
    pub fn at_call_boundary(self) -> bool {
        matches!(
            self,
            PointKind::Entry
                | PointKind::Exit { .. }
                | PointKind::CallBefore
                | PointKind::CallAfter
        )
    }

    /// Order among points at one address: entry, call-before, exit, call-after, the rest.
    fn rank(self) -> u8 {
        match self {
            PointKind::Entry => 0,
            PointKind::CallBefore => 1,
            PointKind::Exit { .. } => 2,
            PointKind::CallAfter => 3,
            _ => 4,
        }
    }
}

/// The CFG edge a point sits on.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize)]
#[serde(rename_all = "kebab-case", tag = "on")]
pub enum OnEdge {
    /// An intra-procedural edge.
    Edge {
        /// The block control leaves.
        from: BlockId,
        /// The block control enters.
        to: BlockId,
        /// How control goes along it.
        kind: crate::cfg::EdgeKind,
    },
    /// From the caller into the function's entry block (a loop whose header is the entry).
    FromCaller,
}

impl From<LoopEdge> for OnEdge {
    fn from(e: LoopEdge) -> OnEdge {
        match e {
            LoopEdge::Edge { from, to, kind } => OnEdge::Edge { from, to, kind },
            LoopEdge::FromCaller => OnEdge::FromCaller,
        }
    }
}

/// What a point belongs to: the code whose events it sees.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Scope<'a> {
    /// The whole function (entry, exits, call sites).
    Function,
    /// A loop, by name.
    Loop(&'a str),
    /// One basic block (block entry, instruction points).
    Block(BlockId),
    /// One edge.
    Edge(OnEdge),
}

/// One instrumentation point.
#[derive(Clone, Debug, PartialEq, Eq, Hash, serde::Serialize)]
pub struct Point {
    /// What kind of point.
    pub kind: PointKind,
    /// The function it is in.
    pub func: FuncId,
    /// The snippet runs just before the instruction at this address (for a point on an
    /// edge: the first instruction the edge leads to).
    pub addr: LinkAddr,
    /// The block holding that instruction.
    pub block: BlockId,
    /// The edge the point is on, for points that run only when control takes an edge.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub edge: Option<OnEdge>,
    /// The called function at call points, tail calls and no-return calls (`None` when the
    /// call is indirect).
    pub callee: Option<LinkAddr>,
    /// The called function's name, when known.
    pub callee_name: Option<String>,
    /// The loop's name (`loop_1.2`) at loop points.
    pub loop_name: Option<String>,
}

impl Point {
    /// What the point belongs to.
    pub fn scope(&self) -> Scope<'_> {
        match (&self.kind, &self.loop_name, self.edge) {
            (PointKind::Loop { .. }, Some(name), _) => Scope::Loop(name),
            (PointKind::Edge, _, Some(e)) => Scope::Edge(e),
            (PointKind::Block | PointKind::InsnBefore | PointKind::InsnAfter, _, _) => {
                Scope::Block(self.block)
            }
            _ => Scope::Function,
        }
    }

    /// Whether the patcher can place the point today, and why not. Every kind of point can
    /// be: points on edges are placed by [`crate::patch::edge`], which skips the few it
    /// cannot place in a given function with the reason (a jump-table edge; the entry from
    /// the caller into a loop whose header is the entry block of a function with indirect
    /// jumps, which cannot be copied whole).
    pub fn placeable(&self) -> Result<(), Unplaceable> {
        Ok(())
    }
}

/// Why a point cannot be placed yet. [`Point::placeable`] refuses nothing today; the type stays
/// for the requests that check it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum Unplaceable {
    /// It runs when the caller enters a loop whose header is the function's entry block
    /// (refused until the patcher could copy such functions whole).
    #[error(
        "{} points are not supported yet where the loop's header is the function's first \
         block: entering from the caller cannot be told apart from the back edges there",
        edge_kind_words(*.0)
    )]
    OnEdge(PointKind),
}

fn edge_kind_words(k: PointKind) -> &'static str {
    match k {
        PointKind::Loop { at: LoopAt::Entry } => "loop entry",
        PointKind::Loop { at: LoopAt::Exit } => "loop exit",
        PointKind::Loop {
            at: LoopAt::IterEnd,
        } => "loop iter-end",
        _ => "edge",
    }
}

/// Why a function has no point of the kind asked for; the text follows "FUNC has".
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum NoPoint {
    /// The function's entry decodes to no block.
    #[error("no entry point")]
    Entry,
    /// No block leaves the function.
    #[error("no exit point (it never returns)")]
    Exit,
    /// No call instruction.
    #[error("no calls")]
    Calls,
    /// No call to the callee named.
    #[error("no call to `{0}`")]
    CallTo(String),
    /// No loop of that name.
    #[error("no loop named `{name}` (`loops {func}` lists them, by name or header address)")]
    Loop {
        /// The loop asked for.
        name: String,
        /// The function, as users name it.
        func: String,
    },
    /// `loop '*'` in a function without loops.
    #[error("no loops")]
    Loops,
    /// No block starts at that address.
    #[error("no basic block starting at {addr} (`cfg {func}` lists them)")]
    Block {
        /// The address asked for.
        addr: LinkAddr,
        /// The function, as users name it.
        func: String,
    },
    /// No instruction of the function's CFG starts at that address.
    #[error("no instruction starting at {0}")]
    Insn(LinkAddr),
    #[error(
        "no point after the instruction at {0}: it ends its block, so what follows it is an \
         edge (`FUNC edge FROM TO`)"
    )]
    /// After an instruction that ends its block is an edge.
    InsnEndsBlock(LinkAddr),
    /// No edge between those blocks.
    #[error("no edge from the block at {0} to the block at {1}")]
    Edge(LinkAddr, LinkAddr),
}

/// The one callee matcher: does the function at `target` answer to `want`? Its raw or
/// demangled name, each with a PLT stub's `@plt` ignored, so `work(int)`, `_Z4worki`,
/// `operator new(unsigned long)` and `puts` all find their PLT stubs.
pub fn callee_matches(table: &FunctionTable, target: Option<LinkAddr>, want: &str) -> bool {
    let Some(f) = target.and_then(|t| table.at(t)) else {
        return false;
    };
    [f.name.as_str(), f.display_name()]
        .iter()
        .any(|n| *n == want || n.strip_suffix("@plt") == Some(want))
}

/// What points are found in and described from: a module's code, functions, CFGs and loops,
/// and the source facts a snippet may ask for. The instrumentation layer implements it over a
/// session's module; `point` never sees the session or its DWARF.
pub trait PointSource {
    /// The module's name (`$module`).
    fn name(&self) -> &str;
    /// Its function table.
    fn functions(&self) -> &FunctionTable;
    /// The CFG of function `f`.
    fn cfg(&self, f: FuncId) -> &Cfg;
    /// The loops of function `f`.
    fn loops(&self, f: FuncId) -> &LoopForest;
    /// The file's bytes at a link address; `None` when they are not all in the file.
    fn bytes_at(&self, addr: LinkAddr, len: u64) -> Option<&[u8]>;
    /// The source file and line of the instruction at `addr`, when the line table has it.
    fn line(&self, addr: LinkAddr) -> Option<(String, u32)>;
    /// The C spelling of the return type of the function starting at `func`, when DWARF
    /// describes it.
    fn return_type(&self, func: LinkAddr) -> Option<String>;
}

/// A point of `func` (everything but its kind and place filled in).
struct Maker<'a> {
    table: &'a FunctionTable,
    func: FuncId,
}

impl Maker<'_> {
    fn at(&self, kind: PointKind, addr: LinkAddr, block: BlockId) -> Point {
        Point {
            kind,
            func: self.func,
            addr,
            block,
            edge: None,
            callee: None,
            callee_name: None,
            loop_name: None,
        }
    }

    fn call(&self, kind: PointKind, addr: LinkAddr, block: BlockId, t: Option<LinkAddr>) -> Point {
        Point {
            callee: t,
            callee_name: t
                .and_then(|t| self.table.at(t))
                .map(|f| f.display_name().to_owned()),
            ..self.at(kind, addr, block)
        }
    }
}

/// Sorts points by address (at one address: entry, call-before, exit, call-after, the rest).
pub fn sort(points: &mut [Point]) {
    points.sort_by_key(|p| (p.addr, p.kind.rank()));
}

/// Every point `show points` lists (entry, exits, before and after each call), in address
/// order.
pub fn all(module: &(impl PointSource + ?Sized), func: FuncId) -> Vec<Point> {
    let mut out = Vec::new();
    for w in [
        Where::Entry,
        Where::Exit,
        Where::CallBefore { callee: None },
        Where::CallAfter { callee: None },
    ] {
        out.extend(find(module, func, &w).unwrap_or_default());
    }
    sort(&mut out);
    out
}

/// The points of function `func` of `module` that `at` names, in address order, or why
/// there are none.
pub fn find(
    module: &(impl PointSource + ?Sized),
    func: FuncId,
    at: &Where,
) -> Result<Vec<Point>, NoPoint> {
    let table = module.functions();
    let cfg = module.cfg(func);
    let make = Maker { table, func };
    let mut out = Vec::new();
    match at {
        Where::Entry => {
            let b = cfg.entry_block().ok_or(NoPoint::Entry)?;
            out.push(make.at(PointKind::Entry, cfg.entry, b));
        }
        Where::Exit => {
            for b in &cfg.blocks {
                let (how, callee) = match &b.exit {
                    Some(Exit::Return) => (ExitKind::Return, None),
                    Some(Exit::TailCall { target }) => (ExitKind::TailCall, Some(*target)),
                    Some(Exit::NoReturnCall { target }) => (ExitKind::NoReturnCall, Some(*target)),
                    Some(Exit::Indirect) => (ExitKind::IndirectJump, None),
                    _ => continue,
                };
                out.push(make.call(PointKind::Exit { how }, b.last, b.id, callee));
            }
            if out.is_empty() {
                return Err(NoPoint::Exit);
            }
        }
        Where::CallBefore { callee } | Where::CallAfter { callee } => {
            let before = matches!(at, Where::CallBefore { .. });
            let mut any = false;
            for b in &cfg.blocks {
                let Some(call) = &b.call else { continue };
                if let Some(want) = callee {
                    if !callee_matches(table, call.target, want) {
                        continue;
                    }
                }
                any = true;
                if before {
                    out.push(make.call(PointKind::CallBefore, call.addr, b.id, call.target));
                } else if !call.noreturn {
                    if let Some(after) = cfg.block_at(b.end) {
                        out.push(make.call(PointKind::CallAfter, b.end, after, call.target));
                    }
                }
            }
            if !any {
                return Err(callee.clone().map_or(NoPoint::Calls, NoPoint::CallTo));
            }
        }
        Where::Loop { name, at } => {
            let forest = module.loops(func);
            let chosen: Vec<&crate::cfg::loops::Loop> = if name == "*" {
                forest.loops.iter().collect()
            } else {
                vec![forest.find(cfg, name).ok_or_else(|| NoPoint::Loop {
                    name: name.clone(),
                    func: table.get(func).display_name().to_owned(),
                })?]
            };
            if chosen.is_empty() {
                return Err(NoPoint::Loops);
            }
            for l in chosen {
                loop_points(&make, cfg, l, *at, &mut out);
            }
        }
        Where::Block { addr } => {
            let b = cfg.block_at(*addr).ok_or_else(|| NoPoint::Block {
                addr: *addr,
                func: table.get(func).display_name().to_owned(),
            })?;
            out.push(make.at(PointKind::Block, *addr, b));
        }
        Where::Insn { addr, after } => {
            let b = cfg
                .block_containing(*addr)
                .map(|b| cfg.block(b))
                .ok_or(NoPoint::Insn(*addr))?;
            // The instruction must start at `addr` as the block decodes, not inside another.
            let mut start = b.start;
            let mut next = None;
            for end in insn_ends(module, b.start, b.end) {
                if start == *addr {
                    next = Some(end);
                    break;
                }
                start = end;
            }
            let next = next.ok_or(NoPoint::Insn(*addr))?;
            if !after {
                out.push(make.at(PointKind::InsnBefore, *addr, b.id));
            } else if *addr == b.last || next >= b.end {
                return Err(NoPoint::InsnEndsBlock(*addr));
            } else {
                out.push(make.at(PointKind::InsnAfter, next, b.id));
            }
        }
        Where::Edge { from, to } => {
            let e = cfg
                .edges
                .iter()
                .find(|e| cfg.block(e.from).start == *from && cfg.block(e.to).start == *to)
                .ok_or(NoPoint::Edge(*from, *to))?;
            let on = OnEdge::Edge {
                from: e.from,
                to: e.to,
                kind: e.kind,
            };
            out.push(on_edge(&make, cfg, PointKind::Edge, on));
        }
    }
    sort(&mut out);
    Ok(out)
}

/// The points of loop `l` of `cfg` at `at`.
fn loop_points(
    make: &Maker<'_>,
    cfg: &Cfg,
    l: &crate::cfg::loops::Loop,
    at: LoopAt,
    out: &mut Vec<Point>,
) {
    let pts = l.points(cfg);
    let kind = PointKind::Loop { at };
    let named = |p: Point| Point {
        loop_name: Some(l.name.clone()),
        ..p
    };
    let edges = match at {
        LoopAt::IterBegin => {
            let h = pts.iter_begin;
            out.push(named(make.at(kind, cfg.block(h).start, h)));
            Vec::new()
        }
        LoopAt::Entry => pts.entry,
        LoopAt::Exit => pts.exit,
        LoopAt::IterEnd => pts.iter_end,
    };
    for e in edges {
        out.push(named(on_edge(make, cfg, kind, e.into())));
    }
}

/// A point on edge `e`, at the first instruction the edge leads to.
fn on_edge(make: &Maker<'_>, cfg: &Cfg, kind: PointKind, e: OnEdge) -> Point {
    let to = match e {
        OnEdge::Edge { to, .. } => to,
        OnEdge::FromCaller => cfg.entry_block().unwrap_or(BlockId(0)),
    };
    Point {
        edge: Some(e),
        ..make.at(kind, cfg.block(to).start, to)
    }
}

/// The end of each instruction of the code from `start` to `end`, decoded in order.
fn insn_ends(
    module: &(impl PointSource + ?Sized),
    start: LinkAddr,
    end: LinkAddr,
) -> Vec<LinkAddr> {
    use iced_x86::{Decoder, DecoderOptions};
    let Some(bytes) = module.bytes_at(start, end.0 - start.0) else {
        return Vec::new();
    };
    let mut d = Decoder::with_ip(64, bytes, start.0, DecoderOptions::NONE);
    let mut out = Vec::new();
    while d.can_decode() {
        let i = d.decode();
        if i.is_invalid() {
            break;
        }
        out.push(LinkAddr(i.next_ip()));
    }
    out
}

#[cfg(test)]
pub(crate) mod tests;
