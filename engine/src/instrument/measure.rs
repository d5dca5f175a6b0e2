//! Measuring with the runtime library `gsh-rt` (`rt/LAYOUT.md`): `count`, `time` and
//! `profile` requests, the runtime loaded once per live process, one slot per measured
//! function, and the values read from the threads' blocks without stopping the process.
//!
//! A measure is an ordinary plan request (so `delete`, `show instrumentation` and ids work as
//! for `at`) whose action is [`Action::Measure`] with its [`Metric`]. [`super::Live`] compiles it,
//! per function and point, to one of the runtime operations of [`crate::snippet::codegen`]'s
//! `rt` module: an inline counter, an inline `rdtsc` timer, or a call into the runtime with
//! only what the callee may change saved. Every event is counted: a thread without a block
//! gets one before its event is taken. A rewritten binary gets the same operations, finding
//! the runtime through a measuring descriptor ([`saved_source`]).
//!
//! The runtime cannot be loaded before the program's libc is initialised (`dlopen` is a libc
//! call), so a measure asked for before `start`/`run` waits until the process stops at `main`
//! ([`super::Live::start_measuring`]); on an attached process it goes in at once.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::mem::{offset_of, size_of};
use std::path::{Path, PathBuf};

use gsh_rt_abi::descriptor;
use gsh_rt_abi::exports::{self, Event};
use gsh_rt_abi::layout::{self, PathRecord, Root, ShadowEntry, SlotRecord, ThreadHeader};

use object::{Object, ObjectSymbol};

use crate::process::{MemReader, Process, ProcessError};
use crate::session::{FuncRef, ModuleId, Session};
use crate::snippet::check::RT_SAVE_FULL;
use crate::symbols::FuncId;

use super::action::{Action, Measurement};
pub use super::action::{LoopSel, Measured, Metric};
use super::arena::Arena;
use super::loop_measure;
use super::request::{LoopAt, Plan, PointSpec, Request, RequestError, Where};
use crate::point::Point;

/// Counter slots per thread (`gsh_rt_init`'s `max_slots`): one per measured function. The
/// runtime's default, which a saved file's descriptor also asks for.
const MAX_SLOTS: u32 = layout::DEFAULT_MAX_SLOTS;
/// Call-path records per thread (`gsh_rt_init`'s `path_capacity`): its default.
const PATH_CAPACITY: u32 = layout::DEFAULT_PATH_CAPACITY;
/// Bytes per `PathRecord`, `SlotRecord` and `ShadowEntry` (`rt-abi`).
const PATH_RECORD: usize = size_of::<PathRecord>();
const SLOT_RECORD: usize = size_of::<SlotRecord>();
const SHADOW_ENTRY: usize = size_of::<ShadowEntry>();

/// Why measuring failed.
#[derive(Debug, thiserror::Error)]
pub enum MeasureError {
    /// Process control failed while loading the runtime or reading its memory.
    #[error(transparent)]
    Process(#[from] ProcessError),
    /// No `libgsh_rt.so` where gsh looks (`$GSH_RT`, beside the executable, its parent); the
    /// text says where it looked and how to build it.
    #[error("cannot find gsh's runtime library: {0}")]
    NoRuntime(String),
    /// The runtime library was found but cannot be used.
    #[error("the runtime library {path}: {detail}")]
    BadRuntime {
        /// The library file.
        path: PathBuf,
        /// What is wrong: unreadable, not an ELF, a missing export, a failed `dlopen`...
        detail: String,
    },
    /// Every runtime slot holds a measure; `delete` frees some.
    #[error("every one of the {MAX_SLOTS} counter slots is in use")]
    SlotsFull,
}

/// A runtime function generated code calls, and the vector state to save around it.
#[derive(Clone, Copy, Debug)]
pub struct RtFn {
    /// Its runtime address (a descriptor's `fns` cell in a rewritten binary).
    pub addr: u64,
    /// `__gsh_rt_call`'s SAVE: an `xmm` mask, or [`RT_SAVE_FULL`].
    pub save: u64,
}

/// The runtime as loaded in the process.
#[derive(Clone, Debug)]
pub struct Runtime {
    /// The library file loaded (`libgsh_rt.so`).
    pub path: PathBuf,
    /// `GSH_RT_ROOT`'s address.
    pub root: u64,
    /// `gsh_rt_thread`'s address: the slow path's call.
    pub thread_fn: u64,
    /// `fs`-relative offset of the TLS word holding the thread's block.
    pub tls_offset: i64,
    /// Its clock is the TSC (`clock_kind` 1), so timers can be inlined.
    pub tsc: bool,
    /// Nanoseconds per TSC tick, 32.32 fixed point.
    pub tsc_mult: u64,
    /// Where a thread block holds its shadow stack (`Root::shadow_offset`), for `profile`'s
    /// inline path.
    pub shadow_offset: u64,
    /// Where a thread block holds its path records (`Root::paths_offset`), likewise.
    pub paths_offset: u64,
    /// The functions calls go to, by name (`gsh_rt_path_enter`, ...), chosen on first use.
    pub fns: HashMap<&'static str, RtFn>,
    /// The measuring entry points' link addresses, and the library's load bias.
    syms: HashMap<&'static str, u64>,
    bias: u64,
    /// The arena gsh holds open, whose blocks outlive the process (see [`super::arena`]).
    pub arena: Option<Arena>,
}

impl Runtime {
    /// The function a measuring call `name` goes to, and what to save around it: the TSC-only
    /// variant when the callee analysis bounds what it changes (then only the xmm registers it
    /// writes are saved, instead of all vector state: xsave costs ~180 ns here), else `name`
    /// itself with everything saved. The analysis runs on first use, so counts never pay it.
    fn call_fn(&mut self, event: Event) -> Result<RtFn, MeasureError> {
        self.call_named(event.name(), event.bounded())
    }

    /// [`Runtime::call_fn`] of the entry point `key`, whose bounded variant is `fast`.
    fn call_named(&mut self, key: &'static str, fast: &'static str) -> Result<RtFn, MeasureError> {
        if let Some(f) = self.fns.get(key) {
            return Ok(*f);
        }
        let missing = || MeasureError::BadRuntime {
            path: self.path.clone(),
            detail: format!("it does not export `{key}`"),
        };
        let lean = self.syms.get(fast).filter(|_| self.tsc).and_then(|&addr| {
            let m = rt_module(&self.path)?;
            let e = crate::callee::effects(&m, crate::LinkAddr(addr)).ok()?;
            (!e.mxcsr).then_some(RtFn {
                addr: addr.wrapping_add(self.bias),
                save: u64::from(e.xmms),
            })
        });
        let f = match lean {
            Some(f) => f,
            None => RtFn {
                addr: self
                    .syms
                    .get(key)
                    .ok_or_else(missing)?
                    .wrapping_add(self.bias),
                save: RT_SAVE_FULL,
            },
        };
        self.fns.insert(key, f);
        Ok(f)
    }
}

/// What one slot counts (its `count`; a timer's slot also sums the time of what it counts).
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize,
)]
#[serde(rename_all = "kebab-case")]
pub enum Counted {
    /// The function's calls, or the loop's entries.
    #[default]
    Entries,
    /// The loop's iterations: passes through its header.
    Iterations,
    /// Passes along the loop's back edges, for a loop whose entries cannot be counted on
    /// their edges (its header is the function's first block, or an entry edge has no place
    /// for code): its entries are then its iterations less these, since every arrival at a
    /// header comes along an entry edge or a back edge.
    BackEdges,
}

/// One kind of code a measure puts into a function: for what (the function or one loop),
/// what its slot counts, and whether it opens (entries, iterations) or closes (exits).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Probe {
    /// The loop (`loop_1.2`), the calls (`call CALLEE`), or `None` for the function.
    pub loop_name: Option<String>,
    /// What its slot counts: calls or entries, or a loop's iterations.
    pub counted: Counted,
    /// At the exits (the function's, or the loop's exit edges): timers close there.
    pub at_exit: bool,
}

/// One slot of a measure: a request's function or loop, and what the slot counts.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Counter {
    /// The request's id.
    pub id: u32,
    /// The module the function is in.
    pub module: ModuleId,
    /// The function, in that module's table.
    pub func: FuncId,
    /// The function as users name it.
    pub name: String,
    /// The loop, for a loop measure.
    pub loop_name: Option<String>,
    /// What its slot counts: calls or entries, or a loop's iterations.
    pub counted: Counted,
    /// The runtime slot its values are kept in, in every thread block.
    pub slot: u32,
    /// What is measured.
    pub metric: Metric,
}

/// A measured function's or loop's value: calls (a loop's entries), a loop's iterations, and
/// for timers the inclusive time. In JSON a loop's name is `loop` and the callee of a `FUNC
/// call CALLEE` measure is `call` (inside, both ride in `loop_name`: see [`call_label`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CountValue {
    /// The request's id.
    pub id: u32,
    /// The function as users name it.
    pub function: String,
    /// The loop (`loop_1.2`), for a loop measure; `call CALLEE` for a measure of the
    /// function's calls to CALLEE ([`call_label`]).
    pub loop_name: Option<String>,
    /// Calls of the function, or entries into the loop, summed over threads.
    pub calls: u64,
    /// Iterations of the loop (passes through its header), for `count FUNC loop LOOP`.
    pub iterations: Option<u64>,
    /// What was measured.
    pub metric: Metric,
    /// Inclusive time (wall or thread CPU), for timed metrics; activations open now are
    /// credited up to now.
    pub ns: Option<u64>,
}

/// What a [`Probe`] of a function's direct calls to `callee` carries where a loop's name
/// would be: `call CALLEE` (no loop is named so: loops are `loop_...`).
pub fn call_label(callee: &str) -> String {
    format!("{CALL_PREFIX}{callee}")
}

const CALL_PREFIX: &str = "call ";

impl serde::Serialize for CountValue {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        #[derive(serde::Serialize)]
        struct Out<'a> {
            id: u32,
            function: &'a str,
            #[serde(rename = "loop", skip_serializing_if = "Option::is_none")]
            loop_name: Option<&'a str>,
            #[serde(skip_serializing_if = "Option::is_none")]
            call: Option<&'a str>,
            calls: u64,
            #[serde(skip_serializing_if = "Option::is_none")]
            iterations: Option<u64>,
            metric: Metric,
            #[serde(skip_serializing_if = "Option::is_none")]
            ns: Option<u64>,
        }
        Out {
            id: self.id,
            function: &self.function,
            loop_name: self.loop_only(),
            call: self.callee(),
            calls: self.calls,
            iterations: self.iterations,
            metric: self.metric,
            ns: self.ns,
        }
        .serialize(s)
    }
}

impl CountValue {
    /// The loop measured, for a loop's value (not a call's).
    pub fn loop_only(&self) -> Option<&str> {
        self.loop_name
            .as_deref()
            .filter(|l| !l.starts_with(CALL_PREFIX))
    }

    /// The callee, for the value of a `FUNC call CALLEE` measure.
    pub fn callee(&self) -> Option<&str> {
        self.loop_name.as_deref()?.strip_prefix(CALL_PREFIX)
    }

    /// What was measured, as a row names it: `work`, `work loop_1.2` for a loop, `work call
    /// hot` for its calls to `hot`.
    pub fn what(&self) -> String {
        match &self.loop_name {
            Some(l) => format!("{} {l}", self.function),
            None => self.function.clone(),
        }
    }
}

/// Folds the slots that count iterations (and back edges) into their loop's value (same
/// request, function and loop): `values[i]` belongs to `counted[i]`'s slot. A loop counted
/// without an entries slot gets its entries as iterations less back edges.
pub fn fold_iterations(values: Vec<CountValue>, counted: &[Counted]) -> Vec<CountValue> {
    let same = |a: &CountValue, b: &CountValue| {
        a.id == b.id && a.function == b.function && a.loop_name == b.loop_name
    };
    let mut out: Vec<CountValue> = Vec::with_capacity(values.len());
    let mut rest = Vec::new();
    for (v, c) in values.iter().zip(counted) {
        let has_entries = || {
            values
                .iter()
                .zip(counted)
                .any(|(w, c)| *c == Counted::Entries && same(v, w))
        };
        match c {
            Counted::Entries => out.push(v.clone()),
            // A loop whose entries are derived: its row where its iterations slot is.
            Counted::Iterations if !has_entries() && !out.iter().any(|o| same(o, v)) => {
                out.push(CountValue {
                    calls: 0,
                    iterations: Some(0),
                    ..v.clone()
                });
                rest.push((v.clone(), *c));
            }
            _ => rest.push((v.clone(), *c)),
        }
    }
    let derived: Vec<bool> = out
        .iter()
        .map(|o| {
            rest.iter()
                .any(|(v, c)| *c == Counted::BackEdges && same(o, v))
        })
        .collect();
    for (v, c) in &rest {
        let Some(i) = out.iter().position(|o| same(o, v)) else {
            continue;
        };
        let o = &mut out[i];
        match c {
            Counted::Iterations => {
                *o.iterations.get_or_insert(0) += v.calls;
                if derived[i] {
                    o.calls += v.calls;
                }
            }
            // Subtracted once every slot is in: a thread's back edges never outnumber its
            // header passes, but the sum is taken over threads in any order.
            Counted::BackEdges | Counted::Entries => {}
        }
    }
    for (v, c) in &rest {
        if *c == Counted::BackEdges {
            if let Some(o) = out.iter_mut().find(|o| same(o, v)) {
                o.calls = o.calls.saturating_sub(v.calls);
            }
        }
    }
    out
}

/// One distinct call path to a profiled function, summed over threads.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct PathValue {
    /// The request's id.
    pub id: u32,
    /// The profiled function as users name it.
    pub function: String,
    /// What was measured.
    pub metric: Metric,
    /// Return addresses, innermost first (`ras[0]` is in the profiled function's caller).
    /// Empty for the activations whose path was not kept: its thread's path table was full
    /// (or the walk found no return address).
    pub ras: Vec<u64>,
    /// Entries into the function along this path.
    pub calls: u64,
    /// Inclusive time along this path, in nanoseconds.
    pub ns: u64,
}

/// Measuring state of one process; [`super::Live`] holds it.
#[derive(Debug, Default)]
pub struct Measure {
    /// The runtime, once loaded into the process.
    pub runtime: Option<Runtime>,
    /// The measured functions, one per slot in use.
    pub counters: Vec<Counter>,
    /// Values as the process left them when it exited (or gsh detached).
    pub last: Option<Vec<CountValue>>,
    /// Call paths as the process left them when it exited (or gsh detached).
    pub last_paths: Option<Vec<PathValue>>,
    /// Modules whose call-site unwind tables the runtime has (for profiles' stack walks).
    pub unwound: Vec<ModuleId>,
    /// Slots given back by deleted or failed requests, handed out again before new ones.
    free: BTreeSet<u32>,
    /// Slots at or above this were never handed out by this session.
    next_slot: u32,
    /// Slots handed out since the last [`Measure::prepare_slots`]: a previous owner (a
    /// deleted request, or an earlier gsh session, since the runtime stays loaded after a
    /// detach) may have left values in them, so they are zeroed before code uses them.
    unprepared: Vec<u32>,
    /// Deleted requests' values as they were when deleted (their slots are free again), of
    /// the last [`KEPT_REQUESTS`] deleted, oldest first in `kept_order`.
    kept: Vec<CountValue>,
    kept_paths: Vec<PathValue>,
    kept_order: std::collections::VecDeque<u32>,
}

/// How many deleted requests' values `report` keeps within one attach: a long session that
/// inserts and deletes `count '*'` over and over must not grow with every cycle (each keeps
/// a value per function). The oldest deleted request's values go first.
pub const KEPT_REQUESTS: usize = 32;

/// Where `libgsh_rt.so` is: `$GSH_RT`, else next to the running executable (and its parent,
/// for test binaries in `target/debug/deps`), where `cargo build`/`cargo test` of the
/// workspace put it.
pub fn find_runtime() -> Result<PathBuf, MeasureError> {
    const NAME: &str = "libgsh_rt.so";
    if let Some(p) = std::env::var_os("GSH_RT") {
        let p = PathBuf::from(p);
        return if p.is_file() {
            Ok(p)
        } else {
            Err(MeasureError::NoRuntime(format!(
                "GSH_RT names {}, which is not a file",
                p.display()
            )))
        };
    }
    let exe = std::env::current_exe().map_err(|e| MeasureError::NoRuntime(e.to_string()))?;
    let mut looked = Vec::new();
    for dir in exe.ancestors().skip(1).take(2) {
        let p = dir.join(NAME);
        if p.is_file() {
            return Ok(p);
        }
        looked.push(p.display().to_string());
    }
    Err(MeasureError::NoRuntime(format!(
        "not at {}; build it with `cargo build -p gsh-rt` or name it with GSH_RT=PATH",
        looked.join(" or ")
    )))
}

/// Adds a measuring request for the functions `glob` names, as one id.
pub fn add<'p>(
    plan: &'p mut Plan,
    session: &mut Session,
    glob: &str,
    metric: Metric,
) -> Result<&'p Request, RequestError> {
    add_of(plan, session, glob, metric, Measured::Function)
}

/// Adds a request timing loop `lp` of the one function `glob` names along its call paths
/// (`consult`'s, not a command's): each activation of the loop is counted and timed in the
/// path record of its function's profiled activation (`gsh_rt_path_loop_enter`), read as a
/// profile's paths are, so the loop's time along one path is told from its time along
/// another. The function must be profiled (`profile FUNC`) for its activations to have paths;
/// the loop's activations in an activation that is not are in no path. Refused where a stack
/// height at the loop's points is not known: its key would not be the function's entry `rsp`
/// less [`gsh_rt_abi::layout::LOOP_KEY_BELOW_ENTRY`], where the runtime finds the activation.
pub fn add_path_loop<'p>(
    plan: &'p mut Plan,
    session: &mut Session,
    glob: &str,
    lp: &str,
) -> Result<&'p Request, RequestError> {
    let funcs = session.resolve_functions(glob)?;
    let [f] = funcs.as_slice() else {
        return Err(RequestError::NoPoint(format!(
            "`{glob}` names {} functions",
            funcs.len()
        )));
    };
    let module = session.module(f.module);
    let sel = LoopSel::Named(lp.to_owned());
    let chosen = loop_measure::select(module, f.func, &sel).map_err(RequestError::NoPoint)?;
    let heights = loop_measure::block_heights(module, f.func);
    for l in chosen {
        let points: Vec<Point> = [LoopAt::Entry, LoopAt::Exit]
            .into_iter()
            .flat_map(|at| loop_measure::points(module, f.func, l, at))
            .collect();
        if loop_measure::frame_offsets(&heights, &points).is_none() {
            return Err(RequestError::NoPoint(format!(
                "the stack height at {lp}'s entries or exits is not known: it cannot be timed \
                 along call paths"
            )));
        }
    }
    add_measure(
        plan,
        session,
        glob,
        Metric::Profile,
        Measured::Loop { loops: sel },
        true,
    )
}

/// Adds a measuring request for the functions `glob` names or, for [`Measured::Loop`], their
/// loops, as one id. A loop measure checks its loops now: a loop named that a single
/// function lacks is an error listing its loops, a function without loops is passed over when
/// a glob matches several, a loop whose entry points cannot be placed is refused (named) or
/// passed over with a warning (`'*'`), and irreducible cycles are named in a warning.
pub fn add_of<'p>(
    plan: &'p mut Plan,
    session: &mut Session,
    glob: &str,
    metric: Metric,
    of: Measured,
) -> Result<&'p Request, RequestError> {
    add_measure(plan, session, glob, metric, of, false)
}

/// [`add_of`]; with `along_paths`, a profile of loops ([`add_path_loop`]) is not refused.
fn add_measure<'p>(
    plan: &'p mut Plan,
    session: &mut Session,
    glob: &str,
    metric: Metric,
    of: Measured,
    along_paths: bool,
) -> Result<&'p Request, RequestError> {
    let at: &[&str] = match &of {
        Measured::Function => &["entry"],
        Measured::Loop { .. } if metric.is_profile() && !along_paths => {
            return Err(RequestError::NoPoint(format!(
                "`{}` profiles functions; loops are measured by `count` and `time`",
                metric.command()
            )))
        }
        Measured::Call { .. } if metric.is_profile() => {
            return Err(RequestError::NoPoint(format!(
                "`{}` profiles functions; calls are measured by `count` and `time`",
                metric.command()
            )))
        }
        Measured::Loop { .. } => &["loop", "", "entry"],
        Measured::Call { .. } => &["call", "", "before"],
    };
    let sel = match &of {
        Measured::Loop { loops } => loops.to_string(),
        Measured::Call { callee } => callee.clone(),
        Measured::Function => String::new(),
    };
    let words: Vec<&str> = std::iter::once(glob)
        .chain(
            at.iter()
                .map(|w| if w.is_empty() { sel.as_str() } else { w }),
        )
        .collect();
    let spec = PointSpec::parse(&words).map_err(RequestError::NoPoint)?;
    let funcs: Vec<FuncRef> = session.resolve_functions(glob)?;
    let many = funcs.len() > 1;
    let funcs: Vec<FuncRef> = funcs
        .into_iter()
        .filter(|f| {
            // `main.cold` is part of main, not a function that is called.
            !(many
                && session
                    .module(f.module)
                    .functions()
                    .get(f.func)
                    .name
                    .contains(".cold"))
        })
        .collect();
    let mut warnings = Vec::new();
    let funcs = match &of {
        Measured::Function => funcs,
        Measured::Call { callee } => {
            // Functions with a direct call to `callee` whose points can be placed.
            let mut kept = Vec::new();
            let mut refused = Vec::new();
            for f in funcs {
                let module = session.module(f.module);
                let name = module.functions().get(f.func).display_name().to_owned();
                let sites = call_points(module, f.func, callee, false);
                if sites.is_empty() {
                    refused.push(format!("{name} makes no direct call to {callee}"));
                    continue;
                }
                match sites.iter().find_map(|p| p.placeable().err()) {
                    Some(why) if !many => {
                        return Err(RequestError::Unplaceable {
                            spec: spec.to_string(),
                            why,
                        })
                    }
                    Some(why) => refused.push(format!("{name} call {callee}: {why}")),
                    None => kept.push(f),
                }
            }
            if kept.is_empty() {
                return Err(RequestError::NoPoint(format!(
                    "no call to `{callee}` from the functions matching `{glob}` can be \
                     measured ({})",
                    refused.join("; ")
                )));
            }
            if many {
                warnings.extend(refused.into_iter().map(|r| format!("not measured: {r}")));
            }
            kept
        }
        Measured::Loop { loops } => {
            let mut kept = Vec::new();
            let mut refused = Vec::new();
            // (function, its irreducible cycles)
            let mut tangled: Vec<(String, String)> = Vec::new();
            for f in funcs {
                let module = session.module(f.module);
                let name = module.functions().get(f.func).display_name().to_owned();
                let chosen = match loop_measure::select(module, f.func, loops) {
                    Ok(chosen) => chosen,
                    Err(why) if !many => return Err(RequestError::NoPoint(why)),
                    Err(_) => continue,
                };
                if let Some(c) = loop_measure::irreducible(module, f.func) {
                    tangled.push((name.clone(), c));
                }
                let mut placeable = 0;
                for l in &chosen {
                    let pts = loop_measure::points(module, f.func, l, LoopAt::Entry);
                    // A count takes such a loop's entries from its back edges.
                    let derived =
                        !metric.has_exit() && loop_measure::back_edges(module, f.func, l).is_some();
                    match pts
                        .iter()
                        .find_map(|p| p.placeable().err())
                        .filter(|_| !derived)
                    {
                        Some(why) if !many && !matches!(loops, LoopSel::All) => {
                            return Err(RequestError::Unplaceable {
                                spec: spec.to_string(),
                                why,
                            })
                        }
                        Some(why) => refused.push(format!("{name} {}: {why}", l.name)),
                        None => placeable += 1,
                    }
                }
                if placeable > 0 {
                    kept.push(f);
                }
            }
            if kept.is_empty() {
                return Err(RequestError::NoPoint(format!(
                    "no loop of the functions matching `{glob}` can be measured{}",
                    if refused.is_empty() {
                        String::new()
                    } else {
                        format!(" ({})", refused.join("; "))
                    }
                )));
            }
            warnings.extend(refused.into_iter().map(|r| format!("not measured: {r}")));
            warnings.extend(irreducible_warning(&tangled));
            kept
        }
    };
    Ok(plan.push(
        spec,
        Action::Measure(Measurement { metric, of }),
        funcs,
        warnings,
    ))
}

/// The warning naming the irreducible cycles of the functions a loop measure selected: each
/// cycle of one function, or the functions when several have some (`loops FUNC` names their
/// cycles).
fn irreducible_warning(tangled: &[(String, String)]) -> Option<String> {
    const LISTED: usize = 8;
    match tangled {
        [] => None,
        [(name, cycles)] => Some(format!(
            "{name} has irreducible cycles ({cycles}): they form no loop and are not measured"
        )),
        many => {
            let names: Vec<&str> = many.iter().take(LISTED).map(|t| t.0.as_str()).collect();
            let more = many.len().saturating_sub(LISTED);
            Some(format!(
                "{} functions have irreducible cycles, which form no loop and are not measured: \
                 {}{} (`loops FUNC` names them)",
                many.len(),
                names.join(", "),
                if more > 0 {
                    format!(" and {more} more")
                } else {
                    String::new()
                }
            ))
        }
    }
}

/// The points just before (or, with `after`, just after) `func`'s direct calls to `callee`.
pub fn call_points(module: &crate::Module, func: FuncId, callee: &str, after: bool) -> Vec<Point> {
    let callee = Some(callee.to_owned());
    let at = if after {
        Where::CallAfter { callee }
    } else {
        Where::CallBefore { callee }
    };
    crate::point::find(module, func, &at).unwrap_or_default()
}

/// The code request `r` (a measure) puts into `func`: each [`Probe`] with its points and, per
/// point, the frame offset its timer keys activations by (see [`loop_measure`]). Loops whose
/// entry cannot be placed are left out (the request warned of them when it was made).
pub fn probes(
    module: &crate::Module,
    r: &Request,
    func: FuncId,
) -> Vec<(Probe, Vec<(Point, i32)>)> {
    let Some(m) = r.action.measurement() else {
        return Vec::new();
    };
    let mut out = Vec::new();
    match &m.of {
        Measured::Function => {
            for (at_exit, at) in [(false, Where::Entry), (true, Where::Exit)] {
                if at_exit && !m.metric.has_exit() {
                    continue;
                }
                let points = crate::point::find(module, func, &at).unwrap_or_default();
                let probe = Probe {
                    loop_name: None,
                    counted: Counted::Entries,
                    at_exit,
                };
                out.push((probe, points.into_iter().map(|p| (p, 0)).collect()));
            }
        }
        Measured::Call { callee } => {
            // A call returns with the stack as it was when it was made: each activation is
            // keyed by the point's own `rsp`, the same before the call and after it, and a
            // recursive call below an open one is timed by the open one.
            let label = Some(call_label(callee));
            for (at_exit, after) in [(false, false), (true, true)] {
                if at_exit && !m.metric.has_exit() {
                    continue;
                }
                let probe = Probe {
                    loop_name: label.clone(),
                    counted: Counted::Entries,
                    at_exit,
                };
                let points = call_points(module, func, callee, after);
                out.push((probe, points.into_iter().map(|p| (p, 0)).collect()));
            }
        }
        Measured::Loop { loops } => {
            let Ok(chosen) = loop_measure::select(module, func, loops) else {
                return out;
            };
            // Only timers key activations by frame; counts need no stack heights.
            let heights = if m.metric.has_exit() {
                loop_measure::block_heights(module, func)
            } else {
                Vec::new()
            };
            for l in chosen {
                let entries = loop_measure::points(module, func, l, LoopAt::Entry);
                let unplaced = |p: &Point| {
                    p.placeable().is_err() || crate::patch::edge::place(module, p).is_err()
                };
                if !m.metric.has_exit() && entries.iter().any(unplaced) {
                    // Entries the patcher cannot reach are counted as iterations less back
                    // edges, when it can reach those.
                    if let Some(back) = loop_measure::back_edges(module, func, l) {
                        let headers = loop_measure::points(module, func, l, LoopAt::IterBegin);
                        for (counted, points) in
                            [(Counted::Iterations, headers), (Counted::BackEdges, back)]
                        {
                            let probe = Probe {
                                loop_name: Some(l.name.clone()),
                                counted,
                                at_exit: false,
                            };
                            out.push((probe, points.into_iter().map(|p| (p, 0)).collect()));
                        }
                        continue;
                    }
                }
                if entries.iter().any(|p| p.placeable().is_err()) {
                    continue;
                }
                let mut kinds = vec![(Counted::Entries, false, entries)];
                if m.metric.has_exit() {
                    let exits = loop_measure::points(module, func, l, LoopAt::Exit);
                    let exits = exits
                        .into_iter()
                        .map(|p| loop_measure::closing_point(module, p))
                        .collect();
                    kinds.push((Counted::Entries, true, exits));
                } else {
                    let headers = loop_measure::points(module, func, l, LoopAt::IterBegin);
                    kinds.push((Counted::Iterations, false, headers));
                }
                // One key for the loop's every point, or the points' own `rsp` throughout.
                let all: Vec<Point> = kinds.iter().flat_map(|k| k.2.iter().cloned()).collect();
                let frames = if m.metric.has_exit() {
                    loop_measure::frame_offsets(&heights, &all)
                } else {
                    None
                };
                let mut k = 0;
                for (counted, at_exit, points) in kinds {
                    let probe = Probe {
                        loop_name: Some(l.name.clone()),
                        counted,
                        at_exit,
                    };
                    let with: Vec<(Point, i32)> = points
                        .into_iter()
                        .map(|p| {
                            let f = frames.as_ref().map_or(0, |f| f[k]);
                            k += 1;
                            (p, f)
                        })
                        .collect();
                    out.push((probe, with));
                }
            }
        }
    }
    out
}

/// The snippet a rewritten binary runs at a point of `metric`'s slot `slot`, finding the
/// runtime through the measuring descriptor at `desc` (`rt/LAYOUT.md`). Calls save all vector
/// state: the runtime that will be loaded is not known when the file is written.
pub fn saved_source(metric: Metric, probe: &Probe, slot: u32, desc: u64, frame: i32) -> String {
    let access = format!("{slot}, 0, 0, {desc:#x}{}", frame_arg(frame));
    let call = |e: Event| {
        format!(
            "__gsh_rt_call({:#x}, {RT_SAVE_FULL:#x}, {access});",
            desc + descriptor::fn_at(e)
        )
    };
    match op(metric, probe, true) {
        Op::Count => format!("__gsh_rt_count({access});"),
        Op::TimeEnter => format!("__gsh_rt_time_enter({access});"),
        Op::TimeExit => format!("__gsh_rt_time_exit({access});"),
        Op::Call(e) => call(e),
        // Never asked for in a saved file (only `consult` times loops along call paths, in a
        // live process): counted in no path, as an activation outside a profiled one is.
        Op::PathLoopEnter => format!("__gsh_rt_count({access});"),
    }
}

/// The runtime operations' last argument, FRAME, when it is not 0 (`snippet::check`'s
/// `RT_NAMES`): an `i32` as its 64-bit two's complement. A live process's operations then
/// name DESC as 0 before it.
fn frame_arg(frame: i32) -> String {
    match frame {
        0 => String::new(),
        f => format!(", {:#x}", i64::from(f) as u64),
    }
}

/// How a point measures: one of the inline operations, or a call into the runtime.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Op {
    Count,
    TimeEnter,
    TimeExit,
    Call(Event),
    /// A loop's entry timed along its function's call paths (`gsh_rt_path_loop_enter`): a
    /// profile's loop ([`add_path_loop`]). Its exit is the path exit.
    PathLoopEnter,
}

/// The operation measuring `metric` at `probe`'s points. Wall-clock timers are inline when
/// `inline_timers` (the TSC is usable), else the runtime's own clock times them.
fn op(metric: Metric, probe: &Probe, inline_timers: bool) -> Op {
    if probe.counted != Counted::Entries {
        return Op::Count;
    }
    match (metric, probe.at_exit) {
        (Metric::Count, _) => Op::Count,
        (Metric::Time, false) if inline_timers => Op::TimeEnter,
        (Metric::Time, true) if inline_timers => Op::TimeExit,
        (Metric::Time, false) => Op::Call(Event::Enter),
        (Metric::Time, true) => Op::Call(Event::Exit),
        (Metric::TimeCpu, false) => Op::Call(Event::EnterCpu),
        (Metric::TimeCpu, true) => Op::Call(Event::ExitCpu),
        (Metric::Profile, false) if probe.loop_name.is_some() => Op::PathLoopEnter,
        (Metric::Profile, false) => Op::Call(Event::PathEnter),
        (Metric::ProfileCpu, false) => Op::Call(Event::PathEnterCpu),
        (Metric::Profile | Metric::ProfileCpu, true) => Op::Call(Event::PathExit),
        (Metric::ProfileCount, _) => Op::Call(Event::PathCount),
    }
}

fn u32_at(b: &[u8], off: usize) -> u32 {
    u32::from_le_bytes(b[off..off + 4].try_into().expect("4 bytes"))
}

fn u64_at(b: &[u8], off: usize) -> u64 {
    u64::from_le_bytes(b[off..off + 8].try_into().expect("8 bytes"))
}

impl Measure {
    /// Loads the runtime into the process (once), initialises it and learns its root, TLS
    /// offset and functions. The process must be stopped past libc's start-up.
    pub fn load(&mut self, p: &mut Process) -> Result<&Runtime, MeasureError> {
        if self.runtime.is_none() {
            let path = find_runtime()?;
            self.runtime = Some(load_runtime(p, &path)?);
        }
        Ok(self.runtime.as_ref().expect("just set"))
    }

    /// The slot of request `id`'s function `func` (or its loop) that counts what `probe`
    /// counts, given on first use.
    fn slot(
        &mut self,
        name: impl FnOnce() -> String,
        id: u32,
        module: ModuleId,
        func: FuncId,
        metric: Metric,
        probe: &Probe,
    ) -> Result<u32, MeasureError> {
        if let Some(c) = self.counters.iter().find(|c| {
            c.id == id
                && c.module == module
                && c.func == func
                && c.loop_name == probe.loop_name
                && c.counted == probe.counted
        }) {
            return Ok(c.slot);
        }
        let slot = match self.free.pop_first() {
            Some(s) => s,
            None if self.next_slot < MAX_SLOTS => {
                self.next_slot += 1;
                self.next_slot - 1
            }
            None => return Err(MeasureError::SlotsFull),
        };
        self.unprepared.push(slot);
        self.counters.push(Counter {
            id,
            module,
            func,
            name: name(),
            loop_name: probe.loop_name.clone(),
            counted: probe.counted,
            slot,
            metric,
        });
        Ok(slot)
    }

    /// The snippet measuring `func` (or its loop) for request `id` at a point of `probe`,
    /// its timer keyed by the point's `rsp` plus `frame`.
    #[allow(clippy::too_many_arguments)]
    pub fn source(
        &mut self,
        name: impl FnOnce() -> String,
        id: u32,
        module: ModuleId,
        func: FuncId,
        metric: Metric,
        probe: &Probe,
        frame: i32,
    ) -> Result<String, MeasureError> {
        if self.runtime.is_none() {
            return Err(MeasureError::NoRuntime(
                "not loaded in the process yet".into(),
            ));
        }
        let slot = self.slot(name, id, module, func, metric, probe)?;
        let rt = self.runtime.as_mut().expect("checked above");
        let access = format!(
            "{slot}, {:#x}, {:#x}{}",
            rt.tls_offset as u64,
            rt.thread_fn,
            match frame {
                0 => String::new(),
                _ => format!(", 0{}", frame_arg(frame)),
            }
        );
        let tsc = rt.tsc;
        let mut call = |event: Event| -> Result<String, MeasureError> {
            let f = rt.call_fn(event)?;
            // A wall-clock call path on the TSC: inline while the thread's walk memo applies
            // (`snippet::codegen`'s `path` module), the call otherwise.
            let path = match event {
                Event::PathEnter => Some("__gsh_rt_path_enter"),
                Event::PathCount => Some("__gsh_rt_path_count"),
                Event::PathExit => Some("__gsh_rt_path_exit"),
                _ => None,
            };
            Ok(match path.filter(|_| tsc) {
                Some(name) => format!(
                    "{name}({:#x}, {:#x}, {:#x}, {:#x}, {:#x}, {:#x}, {access});",
                    f.addr,
                    f.save,
                    rt.tsc_mult,
                    rt.shadow_offset,
                    rt.paths_offset,
                    rt.root + offset_of!(Root, unwind_count) as u64,
                ),
                None => format!("__gsh_rt_call({:#x}, {:#x}, {access});", f.addr, f.save),
            })
        };
        match op(metric, probe, tsc) {
            Op::Count => Ok(format!("__gsh_rt_count({access});")),
            Op::TimeEnter => Ok(format!("__gsh_rt_time_enter({access});")),
            Op::TimeExit => Ok(format!("__gsh_rt_time_exit({access});")),
            Op::Call(e) => call(e),
            Op::PathLoopEnter => {
                let f = rt.call_named(exports::PATH_LOOP_ENTER, exports::PATH_LOOP_ENTER_TSC)?;
                Ok(format!(
                    "__gsh_rt_call({:#x}, {:#x}, {access});",
                    f.addr, f.save
                ))
            }
        }
    }

    /// Every measured function's value now, summed over the threads' blocks, read with
    /// `reader` (a [`MemReader`] needs no stop).
    pub fn values(&self, reader: &MemReader) -> Result<Vec<CountValue>, MeasureError> {
        self.values_with(reader, &HashMap::new(), None)
    }

    /// [`Measure::values`] of thread `tid` alone (the measures in place now; none kept):
    /// what `consult` reads to judge an experiment for one thread.
    pub fn thread_values(
        &self,
        reader: &MemReader,
        tid: u32,
    ) -> Result<Vec<CountValue>, MeasureError> {
        self.values_with(reader, &HashMap::new(), Some(tid))
    }

    /// [`Measure::values`], knowing the stack pointers of stopped threads (by tid): an open
    /// activation whose frame lies below its thread's stack pointer is gone (left by an
    /// exception or `longjmp` and never entered again) and is not credited beyond its last
    /// event. With `only`, the threads other than that one are left out.
    fn values_with(
        &self,
        reader: &MemReader,
        sps: &HashMap<u32, u64>,
        only: Option<u32>,
    ) -> Result<Vec<CountValue>, MeasureError> {
        let Some(rt) = &self.runtime else {
            return Ok(self.zero());
        };
        let read = |a: u64, n: usize| reader.read(a, n);
        let root = read(rt.root, layout::ROOT_HEAD)?;
        let slots_offset = u64_at(&root, offset_of!(Root, slots_offset));
        let mut calls = vec![0u64; self.counters.len()];
        let mut ns = vec![0u64; self.counters.len()];
        let top = self
            .counters
            .iter()
            .map(|c| c.slot)
            .max()
            .map_or(0, |s| s + 1);
        // Inline timers keep TSC ticks; open activations are credited up to now, on the same
        // (synchronised, invariant) TSC the process reads.
        // SAFETY: rdtsc has no preconditions; the runtime uses it only with an invariant TSC.
        let now = unsafe { core::arch::x86_64::_rdtsc() };
        let to_ns = |ticks: u64| ((u128::from(ticks) * u128::from(rt.tsc_mult)) >> 32) as u64;
        for block in blocks(rt, reader, &root)? {
            if top == 0 {
                break;
            }
            let tid = if sps.is_empty() && only.is_none() {
                None
            } else {
                let at = offset_of!(ThreadHeader, tid) as u64;
                Some(u32_at(&read(block + at, 4)?, 0))
            };
            if only.is_some() && tid != only {
                continue;
            }
            let slots = read(block + slots_offset, SLOT_RECORD * top as usize)?;
            let sp = tid.and_then(|t| sps.get(&t).copied());
            for (i, c) in self.counters.iter().enumerate() {
                let at = SLOT_RECORD * c.slot as usize;
                let rec = &slots[at..at + SLOT_RECORD];
                calls[i] += u64_at(rec, offset_of!(SlotRecord, count));
                let total = u64_at(rec, offset_of!(SlotRecord, total_ns));
                match c.metric {
                    // Timed inline: ticks, and the open activation's sp and start.
                    Metric::Time if rt.tsc => {
                        let mut ticks = total;
                        let open_sp = u64_at(rec, offset_of!(SlotRecord, depth));
                        if open_sp != 0 && sp.is_none_or(|sp| open_sp >= sp) {
                            let start = u64_at(rec, offset_of!(SlotRecord, entry_ns));
                            ticks += now.saturating_sub(start);
                        }
                        ns[i] += to_ns(ticks);
                    }
                    m if m.is_timed() => ns[i] += total,
                    _ => {}
                }
            }
        }
        let now: Vec<CountValue> = self
            .counters
            .iter()
            .enumerate()
            .map(|(i, c)| CountValue {
                id: c.id,
                function: c.name.clone(),
                loop_name: c.loop_name.clone(),
                calls: calls[i],
                iterations: None,
                metric: c.metric,
                ns: (c.metric.is_timed() && !c.metric.is_profile()).then_some(ns[i]),
            })
            .collect();
        let counted: Vec<Counted> = self.counters.iter().map(|c| c.counted).collect();
        Ok(self.with_kept(fold_iterations(now, &counted)))
    }

    /// `now` and the deleted requests' kept values, by request id.
    fn with_kept(&self, mut now: Vec<CountValue>) -> Vec<CountValue> {
        if !self.kept.is_empty() {
            now.extend(self.kept.iter().cloned());
            now.sort_by_key(|v| v.id);
        }
        now
    }

    /// Every profiled function's call paths now, merged over threads by (function, path).
    pub fn paths(&self, reader: &MemReader) -> Result<Vec<PathValue>, MeasureError> {
        self.paths_with(reader, None)
    }

    /// [`Measure::paths`] of thread `tid` alone (the profiles in place now; none kept): what
    /// `consult` reads to judge a call path for one thread.
    pub fn thread_paths(
        &self,
        reader: &MemReader,
        tid: u32,
    ) -> Result<Vec<PathValue>, MeasureError> {
        self.paths_with(reader, Some(tid))
    }

    /// [`Measure::paths`]; with `only`, the threads other than that one are left out.
    fn paths_with(
        &self,
        reader: &MemReader,
        only: Option<u32>,
    ) -> Result<Vec<PathValue>, MeasureError> {
        let kept = if only.is_some() {
            &[][..]
        } else {
            &self.kept_paths[..]
        };
        let Some(rt) = &self.runtime else {
            return Ok(kept.to_vec());
        };
        if !self.counters.iter().any(|c| c.metric.is_profile()) {
            return Ok(kept.to_vec());
        }
        let root = reader.read(rt.root, layout::ROOT_HEAD)?;
        let paths_offset = u64_at(&root, offset_of!(Root, paths_offset));
        let capacity = u32_at(&root, offset_of!(Root, path_capacity)) as usize;
        let by_slot: HashMap<u32, &Counter> = self
            .counters
            .iter()
            .filter(|c| c.metric.is_profile())
            .map(|c| (c.slot, c))
            .collect();
        let slots_offset = u64_at(&root, offset_of!(Root, slots_offset));
        let top = by_slot.keys().max().map_or(0, |s| s + 1) as usize;
        let mut merged: BTreeMap<(u32, Vec<u64>), (u64, u64)> = BTreeMap::new();
        for block in blocks(rt, reader, &root)? {
            if only.is_some() {
                let at = offset_of!(ThreadHeader, tid) as u64;
                if Some(u32_at(&reader.read(block + at, 4)?, 0)) != only {
                    continue;
                }
            }
            // Activations on paths the thread's table had no room for are in the slot's own
            // record (`rt/LAYOUT.md`): a path with no return address, which `report` names.
            let slots = reader.read(block + slots_offset, SLOT_RECORD * top)?;
            for &slot in by_slot.keys() {
                let rec = &slots[SLOT_RECORD * slot as usize..][..SLOT_RECORD];
                let count = u64_at(rec, offset_of!(SlotRecord, count));
                if count != 0 {
                    let e = merged.entry((slot, Vec::new())).or_default();
                    e.0 += count;
                    e.1 += u64_at(rec, offset_of!(SlotRecord, total_ns));
                }
            }
            let table = reader.read(block + paths_offset, capacity * PATH_RECORD)?;
            for rec in table.chunks_exact(PATH_RECORD) {
                if u64_at(rec, offset_of!(PathRecord, hash)) == 0 {
                    continue;
                }
                let slot = u32_at(rec, offset_of!(PathRecord, slot));
                if !by_slot.contains_key(&slot) {
                    continue;
                }
                let depth = u32_at(rec, offset_of!(PathRecord, depth)) as usize;
                let ras: Vec<u64> = (0..depth.min(layout::MAX_PATH_DEPTH))
                    .map(|k| u64_at(rec, offset_of!(PathRecord, ras) + 8 * k))
                    .collect();
                let e = merged.entry((slot, ras)).or_default();
                e.0 += u64_at(rec, offset_of!(PathRecord, count));
                e.1 += u64_at(rec, offset_of!(PathRecord, total_ns));
            }
        }
        let mut out: Vec<PathValue> = merged
            .into_iter()
            .map(|((slot, ras), (calls, ns))| {
                let c = by_slot[&slot];
                PathValue {
                    id: c.id,
                    function: c.name.clone(),
                    metric: c.metric,
                    ras,
                    calls,
                    ns,
                }
            })
            .collect();
        if !kept.is_empty() {
            out.extend(kept.iter().cloned());
            out.sort_by_key(|p| p.id);
        }
        Ok(out)
    }

    fn zero(&self) -> Vec<CountValue> {
        let now = self
            .counters
            .iter()
            .map(|c| CountValue {
                id: c.id,
                function: c.name.clone(),
                loop_name: c.loop_name.clone(),
                calls: 0,
                iterations: None,
                metric: c.metric,
                ns: (c.metric.is_timed() && !c.metric.is_profile()).then_some(0),
            })
            .collect();
        let counted: Vec<Counted> = self.counters.iter().map(|c| c.counted).collect();
        self.with_kept(fold_iterations(now, &counted))
    }

    /// Gives back request `id`'s slots, for reuse by later requests; with `keep`, its values
    /// as they are now stay for `report` (the request was deleted, and its code removed).
    /// Reading may fail (the process is gone): the slots are freed all the same.
    pub fn release(&mut self, reader: &MemReader, id: u32, keep: bool) {
        if !self.counters.iter().any(|c| c.id == id) {
            return;
        }
        if keep {
            let values = self.values(reader).ok();
            let paths = self.paths(reader).ok();
            self.keep_values(id, values, paths);
        }
        let freed: Vec<u32> = self
            .counters
            .iter()
            .filter(|c| c.id == id)
            .map(|c| c.slot)
            .collect();
        self.counters.retain(|c| c.id != id);
        self.unprepared.retain(|s| !freed.contains(s));
        self.free.extend(freed);
    }

    /// Keeps deleted request `id`'s values among `values` and `paths` (every measure's, as
    /// read when it was deleted; `None` when reading failed) for `report`, dropping the
    /// oldest deleted request's beyond [`KEPT_REQUESTS`].
    fn keep_values(
        &mut self,
        id: u32,
        values: Option<Vec<CountValue>>,
        paths: Option<Vec<PathValue>>,
    ) {
        if let Some(v) = values {
            self.kept.retain(|v| v.id != id);
            self.kept.extend(v.into_iter().filter(|v| v.id == id));
        }
        if let Some(p) = paths {
            self.kept_paths.retain(|p| p.id != id);
            self.kept_paths.extend(p.into_iter().filter(|p| p.id == id));
        }
        self.kept_order.retain(|&k| k != id);
        self.kept_order.push_back(id);
        while self.kept_order.len() > KEPT_REQUESTS {
            if let Some(old) = self.kept_order.pop_front() {
                self.forget(old);
            }
        }
        self.kept.shrink_to(self.kept.len() * 2);
        self.kept_paths.shrink_to(self.kept_paths.len() * 2);
    }

    /// Drops the kept values of request `id` (it failed, so it never measured anything).
    pub fn forget(&mut self, id: u32) {
        self.kept.retain(|v| v.id != id);
        self.kept_paths.retain(|p| p.id != id);
        self.kept_order.retain(|&k| k != id);
    }

    /// Is there anything to report: a measure in place, or one deleted that kept values?
    pub fn measured_anything(&self) -> bool {
        !self.counters.is_empty() || !self.kept.is_empty()
    }

    /// Slots in use, for `status` and the soak test's leak check.
    pub fn slots_in_use(&self) -> usize {
        self.counters.len()
    }

    /// Makes the slots handed out since the last call fresh in every thread block, before
    /// any code that uses them is written: each slot's record zeroed, its path records
    /// retired, its open timer frames marked dead (`rt/LAYOUT.md`, "Slots are reused"). No
    /// code refers to these slots, so the process may run meanwhile. Threads created later
    /// get zeroed blocks.
    pub fn prepare_slots(&mut self, p: &mut Process) -> Result<(), MeasureError> {
        if self.unprepared.is_empty() {
            return Ok(());
        }
        let Some(rt) = &self.runtime else {
            return Ok(());
        };
        let mut fresh = std::mem::take(&mut self.unprepared);
        fresh.sort_unstable();
        fresh.dedup();
        let is_fresh = |s: u32| fresh.binary_search(&s).is_ok();
        let reader = p.reader();
        let root = reader.read(rt.root, layout::ROOT_HEAD)?;
        let (slots_offset, shadow_offset, paths_offset) = (
            u64_at(&root, offset_of!(Root, slots_offset)),
            u64_at(&root, offset_of!(Root, shadow_offset)),
            u64_at(&root, offset_of!(Root, paths_offset)),
        );
        let capacity = u32_at(&root, offset_of!(Root, path_capacity)) as usize;
        // Runs of consecutive slots, each zeroed with one write.
        let mut runs: Vec<(u32, u32)> = Vec::new();
        for &s in &fresh {
            match runs.last_mut() {
                Some((_, end)) if *end == s => *end += 1,
                _ => runs.push((s, s + 1)),
            }
        }
        for block in blocks(rt, &reader, &root)? {
            for &(lo, hi) in &runs {
                let zeros = vec![0u8; SLOT_RECORD * (hi - lo) as usize];
                p.write(
                    block + slots_offset + (SLOT_RECORD * lo as usize) as u64,
                    &zeros,
                )?;
            }
            let head = reader.read(block, size_of::<ThreadHeader>())?;
            let top = u32_at(&head, offset_of!(ThreadHeader, shadow_top))
                .min(layout::SHADOW_CAPACITY) as usize;
            if top > 0 {
                let stack = reader.read(block + shadow_offset, SHADOW_ENTRY * top)?;
                let (slot, kind) = (offset_of!(ShadowEntry, slot), offset_of!(ShadowEntry, kind));
                for (i, e) in stack.chunks_exact(SHADOW_ENTRY).enumerate() {
                    let k = u32_at(e, kind);
                    // Path frames too: their record may be claimed again for another path
                    // once retired below.
                    let open = [
                        layout::FRAME_WALL,
                        layout::FRAME_CPU,
                        layout::FRAME_PATH_WALL,
                        layout::FRAME_PATH_CPU,
                    ]
                    .contains(&k);
                    if is_fresh(u32_at(e, slot)) && open {
                        let at = block + shadow_offset + (SHADOW_ENTRY * i + kind) as u64;
                        p.write(at, &layout::FRAME_DEAD.to_le_bytes())?;
                    }
                }
            }
            if u32_at(&head, offset_of!(ThreadHeader, path_used)) > 0 && capacity > 0 {
                let table = reader.read(block + paths_offset, capacity * PATH_RECORD)?;
                let slot = offset_of!(PathRecord, slot);
                for (i, rec) in table.chunks_exact(PATH_RECORD).enumerate() {
                    let claimed = u64_at(rec, offset_of!(PathRecord, hash)) != 0;
                    if claimed && is_fresh(u32_at(rec, slot)) {
                        let at = block + paths_offset + (i * PATH_RECORD + slot) as u64;
                        p.write(at, &layout::RETIRED_SLOT.to_le_bytes())?;
                    }
                }
            }
        }
        Ok(())
    }

    /// True when the final values outlive the process (its runtime's arena is gsh's too, and
    /// holds every thread's block: [`Arena::complete`]), so gsh need not see the exit to keep
    /// them.
    pub fn survives_exit(&self) -> bool {
        self.runtime
            .as_ref()
            .and_then(|rt| rt.arena.as_ref())
            .is_some_and(Arena::complete)
    }

    /// The values and paths as the process left them: those kept at its exit or at `detach`,
    /// else those its arena holds (the process ended while gsh was hands-off). `None` when
    /// neither is there.
    pub fn final_values(&self, pid: i32) -> Option<(Vec<CountValue>, Vec<PathValue>)> {
        if let Some(v) = &self.last {
            return Some((v.clone(), self.last_paths.clone().unwrap_or_default()));
        }
        let reader = self.runtime.as_ref()?.arena.as_ref()?.reader(pid);
        let values = self.values_with(&reader, &HashMap::new(), None).ok()?;
        let paths = self.paths(&reader).unwrap_or_default();
        Some((values, paths))
    }

    /// Keeps the final values from the arena, the process having ended while gsh was
    /// hands-off (nothing is read when values were kept already).
    pub fn keep_after_exit(&mut self, pid: i32) {
        if self.last.is_none() && self.measured_anything() {
            if let Some((v, paths)) = self.final_values(pid) {
                self.last = Some(v);
                self.last_paths = Some(paths);
            }
        }
    }

    /// Keeps the final values (the process is exiting, or gsh is leaving it; its memory is
    /// readable one last time).
    pub fn snapshot(&mut self, p: &Process) {
        if !self.measured_anything() {
            return;
        }
        let reader = p.reader();
        let sps: HashMap<u32, u64> = p
            .threads()
            .iter()
            .filter_map(|t| Some((t.tid as u32, p.regs(t.tid).ok()?.rsp)))
            .collect();
        if let Ok(v) = self.values_with(&reader, &sps, None) {
            self.last = Some(v);
        }
        if let Ok(v) = self.paths(&reader) {
            self.last_paths = Some(v);
        }
    }
}

/// The runtime's call-site unwind table for `module` (`rt/LAYOUT.md`, `UnwindEntry`): one
/// entry per call instruction of every analysed function whose CFI is simple, sorted by
/// runtime return address.
pub fn unwind_table(module: &crate::Module, bias: u64) -> Vec<u8> {
    use crate::unwind::{UnwindModule, Unwinder};
    let unwinder = Unwinder::new(vec![UnwindModule {
        binary: &module.binary,
        bias,
    }]);
    let analysis = module.analysis();
    let mut ras: Vec<u64> = module
        .functions()
        .functions()
        .iter()
        .flat_map(|f| {
            analysis
                .function(f.id)
                .cfg
                .blocks
                .iter()
                .filter(|b| b.call.is_some())
                .map(|b| b.end.0.wrapping_add(bias))
        })
        .collect();
    ras.sort_unstable();
    ras.dedup();
    let mut out = Vec::with_capacity(size_of::<layout::UnwindEntry>() * ras.len());
    for ra in ras {
        let Some(rule) = unwinder.call_site(ra) else {
            continue;
        };
        let entry = layout::UnwindEntry {
            ra,
            cfa_off: rule.cfa_offset,
            base: if rule.cfa_from_rbp {
                layout::UNWIND_BASE_RBP
            } else {
                layout::UNWIND_BASE_RSP
            },
            reserved: 0,
            rbp_save: rule.rbp_saved_at.unwrap_or(0),
        };
        out.extend_from_slice(&entry.to_le_bytes());
    }
    out
}

impl Measure {
    /// Gives the runtime `module`'s call-site unwind table, once, so profiles walk through
    /// its frames without frame pointers. The process must be stopped.
    pub fn add_unwind_table(
        &mut self,
        p: &mut Process,
        id: ModuleId,
        module: &crate::Module,
        bias: u64,
    ) -> Result<usize, MeasureError> {
        if self.unwound.contains(&id) {
            return Ok(0);
        }
        let Some(rt) = &self.runtime else {
            return Ok(0);
        };
        let (Some(alloc), Some(add)) = (
            rt.fns.get(exports::ALLOC),
            rt.fns.get(exports::ADD_UNWIND_TABLE),
        ) else {
            return Ok(0);
        };
        let (alloc, add) = (alloc.addr, add.addr);
        self.unwound.push(id);
        let table = unwind_table(module, bias);
        if table.is_empty() {
            return Ok(0);
        }
        let at = p.call(alloc, &[table.len() as u64])?;
        if at == 0 {
            return Ok(0);
        }
        p.write(at, &table)?;
        let n = table.len() / size_of::<layout::UnwindEntry>();
        // -1: the runtime's table of tables is full; walks there use frame pointers.
        let rc = p.call(add, &[at, n as u64])?;
        Ok(if rc as i32 == 0 { n } else { 0 })
    }
}

/// The threads' blocks: newest first from the runtime's list while the process lives, and
/// those in its arena when `reader` reads what gsh kept of it.
fn blocks(rt: &Runtime, reader: &MemReader, root: &[u8]) -> Result<Vec<u64>, MeasureError> {
    if reader.is_kept() {
        return Ok(rt.arena.as_ref().map_or(Vec::new(), |a| a.blocks(reader)));
    }
    let mut out = Vec::new();
    let mut block = u64_at(root, offset_of!(Root, threads));
    let next = offset_of!(ThreadHeader, next) as u64;
    // A corrupted list must not loop forever: threads are bounded by the pid space.
    while block != 0 && out.len() < 1 << 22 {
        out.push(block);
        block = u64_at(&reader.read(block + next, 8)?, 0);
    }
    Ok(out)
}

/// The value of the runtime file's `GSH_RT_ABI_VERSION` object, read from the file.
fn file_abi(file: &object::File) -> Option<u32> {
    use object::{Object, ObjectSection, ObjectSymbol};
    let sym = file
        .dynamic_symbols()
        .find(|s| s.name() == Ok(exports::ABI_VERSION_OBJECT))?;
    let section = file.section_by_index(sym.section_index()?).ok()?;
    let bytes = section.data_range(sym.address(), 4).ok()??;
    Some(u32::from_le_bytes(bytes.try_into().ok()?))
}

/// The runtime library as an analysed module (for [`crate::callee::effects`]), once per
/// file per gsh process: its analysis takes a moment and the file does not change under us.
fn rt_module(path: &Path) -> Option<std::sync::Arc<crate::Module>> {
    use std::sync::{Arc, Mutex, OnceLock};
    type Cache = Mutex<HashMap<PathBuf, Option<Arc<crate::Module>>>>;
    static CACHE: OnceLock<Cache> = OnceLock::new();
    let cache = CACHE.get_or_init(Default::default);
    let mut cache = cache.lock().unwrap_or_else(|e| e.into_inner());
    cache
        .entry(path.to_owned())
        .or_insert_with(|| {
            let mut session = Session::new();
            let id = session.open(path).ok()?;
            let module = session.module_arc(id);
            module.analysis();
            Some(module)
        })
        .clone()
}

fn load_runtime(p: &mut Process, path: &Path) -> Result<Runtime, MeasureError> {
    let bad = |detail: String| MeasureError::BadRuntime {
        path: path.to_owned(),
        detail,
    };
    let canon = std::fs::canonicalize(path).map_err(|e| bad(e.to_string()))?;
    let data = std::fs::read(&canon).map_err(|e| bad(e.to_string()))?;
    let file = object::File::parse(&*data).map_err(|e| bad(e.to_string()))?;
    let symbol = |name: &str| {
        file.dynamic_symbols()
            .find(|s| s.name() == Ok(name))
            .map(|s| s.address())
            .ok_or_else(|| bad(format!("it does not export `{name}`")))
    };
    // Checked in the file, before anything is loaded: a runtime of another ABI (an older
    // build beside an updated gsh) is refused without entering the process.
    match file_abi(&file) {
        Some(abi) if abi == layout::ABI_VERSION => {}
        found => {
            return Err(bad(format!(
                "it is a runtime of ABI {}, and this gsh needs ABI {}: use the libgsh_rt.so \
                 built with this gsh (`cargo build -p gsh-rt`), or point $GSH_RT at it",
                found.map_or("unknown (no readable `GSH_RT_ABI_VERSION`)".into(), |a| a
                    .to_string()),
                layout::ABI_VERSION
            )))
        }
    }
    let (init, tls, thread, root) = (
        symbol(exports::INIT)?,
        symbol(exports::TLS_OFFSET)?,
        symbol(exports::THREAD)?,
        symbol(exports::ROOT)?,
    );
    p.load_library(&canon)?;
    let bias = p
        .modules()?
        .into_iter()
        .find(|m| std::fs::canonicalize(&m.path).is_ok_and(|c| c == canon))
        .map(|m| m.bias)
        .ok_or_else(|| bad("loaded, but not in the process's mappings".into()))?;
    let rc = p.call(
        init.wrapping_add(bias),
        &[u64::from(MAX_SLOTS), u64::from(PATH_CAPACITY)],
    )?;
    if rc as u32 != 0 {
        return Err(bad(
            "gsh_rt_init refused the slot count (the runtime was set up differently before)".into(),
        ));
    }
    let tls_offset = p.call(tls.wrapping_add(bias), &[])? as i64;
    let root = root.wrapping_add(bias);
    let head = p.read(root, layout::ROOT_HEAD)?;
    let (magic, abi) = (
        u32_at(&head, offset_of!(Root, magic)),
        u32_at(&head, offset_of!(Root, abi_version)),
    );
    if magic != layout::ROOT_MAGIC || abi != layout::ABI_VERSION {
        return Err(bad(format!(
            "its root has magic {magic:#x}, ABI {abi} (gsh reads ABI {})",
            layout::ABI_VERSION
        )));
    }
    if tls_offset == 0 || i32::try_from(tls_offset).is_err() {
        return Err(bad(format!("its TLS offset {tls_offset} is unusable")));
    }
    let tsc = u32_at(&head, offset_of!(Root, clock_kind)) == layout::CLOCK_RDTSC;
    let mut fns = HashMap::new();
    for name in [exports::ALLOC, exports::ADD_UNWIND_TABLE] {
        if let Ok(addr) = symbol(name) {
            let addr = addr.wrapping_add(bias);
            fns.insert(
                name,
                RtFn {
                    addr,
                    save: RT_SAVE_FULL,
                },
            );
        }
    }
    let mut syms = HashMap::new();
    let named = Event::ALL.into_iter().map(|e| [e.name(), e.bounded()]);
    let path_loop = [exports::PATH_LOOP_ENTER, exports::PATH_LOOP_ENTER_TSC];
    for pair in named.chain([path_loop]) {
        for n in pair {
            if let Ok(addr) = symbol(n) {
                syms.insert(n, addr);
            }
        }
    }
    Ok(Runtime {
        path: canon,
        root,
        thread_fn: thread.wrapping_add(bias),
        tls_offset,
        tsc,
        tsc_mult: u64_at(&head, offset_of!(Root, tsc_mult)),
        shadow_offset: u64_at(&head, offset_of!(Root, shadow_offset)),
        paths_offset: u64_at(&head, offset_of!(Root, paths_offset)),
        fns,
        syms,
        bias,
        arena: Arena::take(p, root, &head),
    })
}

#[cfg(test)]
#[path = "measure_tests.rs"]
mod tests;
