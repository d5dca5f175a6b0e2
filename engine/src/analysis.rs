//! Whole-module analysis: every function's CFG and loops, non-returning functions found to a
//! fixpoint, the call graph, and per-function metrics. Runs in parallel with rayon, once per
//! module, the first time anything asks for a CFG.

#![warn(missing_docs)]

use std::time::{Duration, Instant};

use rayon::prelude::*;

use crate::addr::LinkAddr;
use crate::cfg::build::Context;
use crate::cfg::landing::LandingPads;
use crate::cfg::loops::{self, LoopForest};
use crate::cfg::{self, noreturn, Cfg, Exit};
use crate::elf::Binary;
use crate::symbols::{FuncId, FunctionTable, Progress};

/// Function entry addresses, hashed fast: every call site looks its target up.
type HashSet = foldhash::HashSet<u64>;

/// Rounds of the non-returning fixpoint at the most; real code settles in two or three.
const MAX_ROUNDS: usize = 8;

/// Everything learned about one function.
#[derive(Clone, Debug, serde::Serialize)]
pub struct FunctionAnalysis {
    /// Its control-flow graph.
    pub cfg: Cfg,
    /// Its natural loops, their nesting and the dominator tree.
    pub loops: LoopForest,
    /// True when it never returns: every way out is a trap or a call (or tail call) to a function that never returns.
    pub noreturn: bool,
    /// Functions called directly (deduplicated, in address order).
    pub callees: Vec<FuncId>,
    /// Indirect call sites.
    pub indirect_calls: u32,
    /// True when some block lies inside another function's range.
    pub overlaps: bool,
}

/// Size and shape figures of a function.
#[derive(Clone, Debug, serde::Serialize)]
pub struct Metrics {
    /// Instructions in its blocks.
    pub instructions: u64,
    /// Basic blocks.
    pub blocks: usize,
    /// Intra-procedural edges.
    pub edges: usize,
    /// McCabe's complexity, edges − blocks + 2 (1 for an empty CFG).
    pub cyclomatic: i64,
    /// Natural loops, nested ones included.
    pub loops: usize,
    /// The deepest loop nesting (0 without loops).
    pub max_loop_depth: u32,
    /// Blocks that end in a call.
    pub call_sites: usize,
    /// Functions that call or tail-call it directly.
    pub callers: usize,
}

/// Counts over a whole module.
#[derive(Clone, Debug, Default, serde::Serialize)]
pub struct Stats {
    /// Functions in the module's table.
    pub functions: usize,
    /// Basic blocks, summed over functions.
    pub blocks: usize,
    /// Intra-procedural edges, summed over functions.
    pub edges: usize,
    /// Instructions in blocks, summed over functions (shared code counts once per function).
    pub instructions: u64,
    /// Natural loops, summed over functions.
    pub loops: usize,
    /// Functions with at least one irreducible cycle.
    pub irreducible: usize,
    /// Jump tables resolved.
    pub jump_tables: usize,
    /// Jump tables no guarding compare bounded (read until an entry left the function).
    pub jump_tables_unbounded: usize,
    /// Indirect jumps neither resolved as tables nor taken as tail calls.
    pub unresolved_indirect_jumps: usize,
    /// Functions found never to return.
    pub noreturn_functions: usize,
    /// Functions with a block inside another function's range.
    pub overlapping_functions: usize,
    /// Edges of the call graph: distinct (caller, callee) pairs.
    pub call_edges: usize,
    /// Indirect call sites.
    pub indirect_calls: usize,
    #[serde(serialize_with = "secs")]
    /// Wall time the whole analysis took (JSON: seconds).
    pub elapsed: Duration,
}

fn secs<S: serde::Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_f64(d.as_secs_f64())
}

/// The analysis of every function of a module.
#[derive(Debug)]
pub struct Analysis {
    functions: Vec<FunctionAnalysis>,
    callers: Vec<Vec<FuncId>>,
    stats: Stats,
}

impl Analysis {
    /// Analyses every function of `binary`.
    pub fn run(binary: &Binary, table: &FunctionTable, progress: &dyn Progress) -> Analysis {
        let started = Instant::now();
        let funcs = table.functions();
        let known: HashSet = funcs
            .iter()
            .filter(|f| {
                noreturn::is_known(&f.name) || f.aliases.iter().any(|a| noreturn::is_known(a))
            })
            .map(|f| f.addr.0)
            .collect();
        let mut noret = known;
        let total = funcs.len() as u64;
        let done = std::sync::atomic::AtomicU64::new(0);
        let code = crate::cfg::build::code_ranges(binary);
        let landing_pads = LandingPads::read(binary);
        let table_limits = cfg::TableLimits::read(binary, table);
        let build_one = |i: usize, noret: &HashSet| {
            progress.pace();
            let is_noreturn = |a: LinkAddr| noret.contains(&a.0);
            let ctx = Context {
                binary,
                functions: table,
                is_noreturn: &is_noreturn,
                code: &code,
                landing_pads: &landing_pads,
                table_limits: &table_limits,
            };
            cfg::build(&ctx, &funcs[i])
        };
        progress.phase("building control-flow graphs");
        let mut cfgs: Vec<Cfg> = (0..funcs.len())
            .into_par_iter()
            .map(|i| {
                let c = build_one(i, &noret);
                let d = done.fetch_add(1, std::sync::atomic::Ordering::Relaxed) + 1;
                if d.is_multiple_of(256) || d == total {
                    progress.update(d, total);
                }
                c
            })
            .collect();

        // Only a function whose CFG was rebuilt can newly turn out never to return: the rest
        // are unchanged since they were last checked.
        progress.phase("finding functions that never return");
        let mut candidates: Vec<usize> = (0..funcs.len()).collect();
        for round in 0..MAX_ROUNDS {
            progress.update(round as u64, MAX_ROUNDS as u64);
            let fresh: Vec<u64> = candidates
                .par_iter()
                .filter(|&&i| !noret.contains(&funcs[i].addr.0) && never_returns(&cfgs[i], &noret))
                .map(|&i| funcs[i].addr.0)
                .collect();
            if fresh.is_empty() {
                break;
            }
            noret.extend(fresh.iter().copied());
            let fresh: HashSet = fresh.into_iter().collect();
            // One pass over each block: a call or a tail call to a function now known never
            // to return means the CFG must be rebuilt without the path past it.
            let redo: Vec<usize> = cfgs
                .par_iter()
                .enumerate()
                .filter(|(_, c)| {
                    c.blocks.iter().any(|b| {
                        let call = b.call.as_ref().and_then(|s| s.target);
                        let tail = match b.exit {
                            Some(Exit::TailCall { target }) => Some(target),
                            _ => None,
                        };
                        call.or(tail).is_some_and(|t| fresh.contains(&t.0))
                    })
                })
                .map(|(i, _)| i)
                .collect();
            let rebuilt: Vec<(usize, Cfg)> = redo
                .par_iter()
                .map(|&i| (i, build_one(i, &noret)))
                .collect();
            candidates = redo;
            for (i, c) in rebuilt {
                cfgs[i] = c;
            }
        }

        progress.phase("finding loops and calls");
        done.store(0, std::sync::atomic::Ordering::Relaxed);
        let functions: Vec<FunctionAnalysis> = cfgs
            .into_par_iter()
            .zip(funcs.par_iter())
            .map(|(cfg, f)| {
                progress.pace();
                let d = done.fetch_add(1, std::sync::atomic::Ordering::Relaxed) + 1;
                if d.is_multiple_of(256) || d == total {
                    progress.update(d, total);
                }
                let loops = loops::find(&cfg);
                let mut callees: Vec<FuncId> = cfg
                    .calls()
                    .filter_map(|s| s.target)
                    .filter_map(|t| table.at(t).map(|g| g.id))
                    .collect();
                callees.extend(cfg.blocks.iter().filter_map(|b| match b.exit {
                    Some(Exit::TailCall { target }) => table.at(target).map(|g| g.id),
                    _ => None,
                }));
                callees.sort_unstable();
                callees.dedup();
                let indirect_calls = cfg.calls().filter(|s| s.target.is_none()).count() as u32;
                // A cold part's blocks are its parent's own code, not an overlap.
                let overlaps = cfg.blocks.iter().any(|b| {
                    !f.contains(b.start)
                        && table
                            .containing(b.start)
                            .is_some_and(|g| g.id != f.id && !g.is_cold_part())
                });
                FunctionAnalysis {
                    noreturn: noret.contains(&f.addr.0),
                    cfg,
                    loops,
                    callees,
                    indirect_calls,
                    overlaps,
                }
            })
            .collect();

        progress.phase("building the call graph");
        let mut callers = vec![Vec::new(); functions.len()];
        for (i, a) in functions.iter().enumerate() {
            for c in &a.callees {
                callers[c.0 as usize].push(FuncId(i as u32));
            }
        }
        let mut stats = Stats {
            functions: functions.len(),
            ..Stats::default()
        };
        for a in &functions {
            stats.blocks += a.cfg.blocks.len();
            stats.edges += a.cfg.edges.len();
            stats.instructions += a.cfg.instructions();
            stats.loops += a.loops.loops.len();
            stats.irreducible += usize::from(!a.loops.irreducible.is_empty());
            stats.jump_tables += a.cfg.jump_tables.len();
            stats.jump_tables_unbounded += a.cfg.jump_tables.iter().filter(|t| !t.bounded).count();
            stats.unresolved_indirect_jumps += a.cfg.unresolved.len();
            stats.noreturn_functions += usize::from(a.noreturn);
            stats.overlapping_functions += usize::from(a.overlaps);
            stats.call_edges += a.callees.len();
            stats.indirect_calls += a.indirect_calls as usize;
        }
        stats.elapsed = started.elapsed();
        Analysis {
            functions,
            callers,
            stats,
        }
    }

    /// The analysis of function `id`. Panics on an id from another module's table.
    pub fn function(&self, id: FuncId) -> &FunctionAnalysis {
        &self.functions[id.0 as usize]
    }

    /// Functions that call `id` directly (or tail-call it).
    pub fn callers(&self, id: FuncId) -> &[FuncId] {
        &self.callers[id.0 as usize]
    }

    /// The module's counts.
    pub fn stats(&self) -> &Stats {
        &self.stats
    }

    /// Metrics of one function.
    pub fn metrics(&self, id: FuncId) -> Metrics {
        let a = self.function(id);
        Metrics {
            instructions: a.cfg.instructions(),
            blocks: a.cfg.blocks.len(),
            edges: a.cfg.edges.len(),
            cyclomatic: a.cfg.cyclomatic_complexity(),
            loops: a.loops.loops.len(),
            max_loop_depth: a.loops.max_depth(),
            call_sites: a.cfg.calls().count(),
            callers: self.callers(id).len(),
        }
    }
}

/// True when every way out of the function is a trap or a call that never returns.
fn never_returns(cfg: &Cfg, noret: &HashSet) -> bool {
    let mut saw_exit = false;
    for b in &cfg.blocks {
        match &b.exit {
            Some(Exit::Return)
            | Some(Exit::Indirect)
            | Some(Exit::Unresolved)
            | Some(Exit::Invalid) => return false,
            Some(Exit::TailCall { target }) => {
                if !noret.contains(&target.0) {
                    return false;
                }
                saw_exit = true;
            }
            Some(Exit::NoReturnCall { .. }) | Some(Exit::Trap) => saw_exit = true,
            None => {}
        }
    }
    saw_exit
}
