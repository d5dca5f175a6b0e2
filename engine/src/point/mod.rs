//! Instrumentation points of a function, found from its CFG: where snippets can run, and what
//! the snippet sees there (`$0..$5` at entry and before calls, `$return` at exits and after
//! calls).
//!
//! A point is always "just before the instruction at [`Point::addr`]": entry is before the
//! first instruction; an exit is before the `ret`, before the tail-call `jmp` (direct, or an
//! indirect one that is no jump table), or before the call to a non-returning function (PATCHING.md, "Exits"); a call-before point is before the
//! `call`; a call-after point is before the instruction the call returns to. The patcher
//! ([`crate::patch`]) decides how control gets there; this module only says where.
//!
//! Loop points (entry, exit, iteration begin and end) have a kind and a loop name here but are
//! not enumerated yet: they sit on CFG edges, which need edge trampolines.

use crate::addr::LinkAddr;
use crate::cfg::{BlockId, Exit};
use crate::session::Module;
use crate::snippet;
use crate::symbols::FuncId;

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

/// Where in a loop a loop point is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum LoopPointKind {
    /// On the edges entering the loop from outside, once per entry.
    Entry,
    /// On the edges leaving the loop.
    Exit,
    /// At the header, each iteration.
    IterBegin,
    /// On the back edges, each iteration.
    IterEnd,
}

/// What kind of point.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize)]
#[serde(rename_all = "kebab-case", tag = "kind")]
pub enum PointKind {
    Entry,
    Exit {
        how: ExitKind,
    },
    CallBefore,
    CallAfter,
    /// Not enumerated yet (see the module docs); here so the type holds them.
    Loop {
        at: LoopPointKind,
    },
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
                LoopPointKind::Entry => "loop-entry",
                LoopPointKind::Exit => "loop-exit",
                LoopPointKind::IterBegin => "loop-iter-begin",
                LoopPointKind::IterEnd => "loop-iter-end",
            },
        }
    }

    /// What the snippet compiler needs to know about the point (`$return`, `$0..$5`).
    pub fn snippet_kind(self) -> snippet::PointKind {
        match self {
            PointKind::Entry => snippet::PointKind::Entry,
            PointKind::Exit { .. } => snippet::PointKind::Exit,
            PointKind::CallBefore => snippet::PointKind::CallBefore,
            PointKind::CallAfter => snippet::PointKind::CallAfter,
            PointKind::Loop { .. } => snippet::PointKind::Other,
        }
    }

    /// True when the point is at a function-call boundary, where the SysV ABI leaves the
    /// arithmetic flags undefined, so a snippet may change them without saving them.
    pub fn at_call_boundary(self) -> bool {
        !matches!(self, PointKind::Loop { .. })
    }
}

/// One instrumentation point.
#[derive(Clone, Debug, PartialEq, Eq, Hash, serde::Serialize)]
pub struct Point {
    pub kind: PointKind,
    pub func: FuncId,
    /// The snippet runs just before the instruction at this address.
    pub addr: LinkAddr,
    /// The block holding that instruction.
    pub block: BlockId,
    /// The called function at call points, tail calls and no-return calls (`None` when the
    /// call is indirect).
    pub callee: Option<LinkAddr>,
    /// The called function's name, when known.
    pub callee_name: Option<String>,
    /// The loop's name (`loop_1.2`) at loop points.
    pub loop_name: Option<String>,
}

/// Which points to list.
#[derive(Clone, Debug, Default)]
pub struct Query {
    pub entry: bool,
    pub exits: bool,
    pub calls_before: bool,
    pub calls_after: bool,
    /// Only call points whose callee's name (raw or demangled, PLT stubs' `@plt` ignored) is
    /// this.
    pub callee: Option<String>,
}

impl Query {
    /// Every kind of point that is enumerated.
    pub fn all() -> Query {
        Query {
            entry: true,
            exits: true,
            calls_before: true,
            calls_after: true,
            callee: None,
        }
    }
}

/// The points of function `func` of `module` that `query` asks for, in address order (at one
/// address: entry, call-before, exit, call-after).
pub fn find(module: &Module, func: FuncId, query: &Query) -> Vec<Point> {
    let table = module.functions();
    let cfg = &module.analysis().function(func).cfg;
    let name_of = |a: LinkAddr| table.at(a).map(|f| f.display_name().to_owned());
    let callee_ok = |target: Option<LinkAddr>| match &query.callee {
        None => true,
        Some(want) => target.and_then(|t| table.at(t)).is_some_and(|f| {
            [f.name.as_str(), f.display_name()]
                .iter()
                .any(|n| n == want || n.strip_suffix("@plt") == Some(want))
        }),
    };
    let point = |kind, addr: LinkAddr, block, callee: Option<LinkAddr>| Point {
        kind,
        func,
        addr,
        block,
        callee,
        callee_name: callee.and_then(name_of),
        loop_name: None,
    };
    let mut out = Vec::new();
    if query.entry {
        if let Some(b) = cfg.entry_block() {
            out.push(point(PointKind::Entry, cfg.entry, b, None));
        }
    }
    for b in &cfg.blocks {
        if let Some(call) = &b.call {
            if callee_ok(call.target) {
                if query.calls_before {
                    out.push(point(PointKind::CallBefore, call.addr, b.id, call.target));
                }
                if query.calls_after && !call.noreturn {
                    if let Some(after) = cfg.block_at(b.end) {
                        out.push(point(PointKind::CallAfter, b.end, after, call.target));
                    }
                }
            }
        }
        if query.exits {
            let how = match &b.exit {
                Some(Exit::Return) => Some((ExitKind::Return, None)),
                Some(Exit::TailCall { target }) => Some((ExitKind::TailCall, Some(*target))),
                Some(Exit::NoReturnCall { target }) => {
                    Some((ExitKind::NoReturnCall, Some(*target)))
                }
                Some(Exit::Indirect) => Some((ExitKind::IndirectJump, None)),
                _ => None,
            };
            if let Some((how, callee)) = how {
                out.push(point(PointKind::Exit { how }, b.last, b.id, callee));
            }
        }
    }
    let rank = |k: &PointKind| match k {
        PointKind::Entry => 0,
        PointKind::CallBefore => 1,
        PointKind::Exit { .. } => 2,
        PointKind::CallAfter => 3,
        PointKind::Loop { .. } => 4,
    };
    out.sort_by_key(|p| (p.addr, rank(&p.kind)));
    out
}

#[cfg(test)]
mod tests;
