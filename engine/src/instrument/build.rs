//! The one path from a plan request to the patcher: the points a request names in one module
//! (refusing those the patcher cannot place yet, skipping doubtful code), the snippet each
//! point gets (the user's, or gsh's measuring operation for the metric) with the point's own
//! facts, and the insert into the patcher and back out. `save` and a live process both take
//! this path; a [`Placement`] says what differs between them: where declared variables live,
//! the load bias, what else a snippet may reach, and how a measure finds its slot and the
//! runtime.
//!
//! Undo is one path as well: what an insert staged is taken out again by the request's tag
//! ([`remove`]). A live process does that when an insert fails half-way and on `delete`; a
//! saved file is written only after every insert succeeded, so a failure leaves nothing.

#![warn(missing_docs)]

use std::collections::HashMap;
use std::sync::Arc;

use crate::patch::{self, AddressSpace, Inserted, PatchError, PatchOptions, Patcher, PointRow};
use crate::point::{self, Point, Where};
use crate::session::{FuncRef, Module, ModuleId, Session};
use crate::snippet::env::PointInfo;
use crate::symbols::{FuncId, Function};

use super::action::{Action, Metric};
use super::env::SessionEnv;
use super::measure::{self, MeasureError, Probe};
use super::request::Request;

/// Why a request could not become patch requests.
#[derive(Debug, thiserror::Error)]
pub enum BuildError {
    /// A point of a kind the patcher does not place yet.
    #[error("instrumentation {id}: {why}")]
    Unplaceable {
        /// The request.
        id: u32,
        /// Why its points cannot be placed.
        why: point::Unplaceable,
    },
    /// A measure could not get its slot or the runtime's entry points.
    #[error(transparent)]
    Measure(#[from] MeasureError),
    /// A coverage probe's block has no counter: the placement gave the request none, or the
    /// block is not in the function's CFG as the counters were numbered.
    #[error("instrumentation {id}: no coverage counter for the block at {block}")]
    NoCounter {
        /// The request.
        id: u32,
        /// The block's address.
        block: crate::addr::LinkAddr,
    },
}

/// What differs between writing a file and patching a process.
pub trait Placement {
    /// The environment a snippet at `info`'s point of `func` is compiled in: declared
    /// variables where this placement put them, the module's load bias, and the other modules
    /// a snippet may call into.
    fn env<'a>(&'a self, module: &'a Module, func: &'a Function, info: PointInfo)
        -> SessionEnv<'a>;

    /// gsh's measuring snippet for request `id`'s function `func` (or its loop) at a point of
    /// `probe`, its timer keyed by the point's `rsp` plus `frame`.
    fn measure_source(
        &mut self,
        module: &Module,
        id: u32,
        func: FuncId,
        metric: Metric,
        probe: &Probe,
        frame: i32,
    ) -> Result<String, BuildError>;

    /// The address of the counter of coverage request `id`'s block at `block` in `func`.
    fn coverage_counter(
        &mut self,
        module: &Module,
        id: u32,
        func: FuncId,
        block: crate::addr::LinkAddr,
    ) -> Result<u64, BuildError>;
}

/// The patch requests for one request in one module, and the points left alone with why.
#[derive(Default)]
pub struct Built {
    /// One per point and snippet.
    pub requests: Vec<patch::Request>,
    /// Points in doubtful code, with why.
    pub skipped: Vec<(Point, String)>,
}

/// The points of `func` that `r` names, refusing those the patcher cannot place yet.
pub fn points_of(module: &Module, r: &Request, func: FuncId) -> Result<Vec<Point>, BuildError> {
    let points = point::find(module, func, &r.spec.at).unwrap_or_default();
    if let Some(why) = points.iter().find_map(|p| p.placeable().err()) {
        return Err(BuildError::Unplaceable { id: r.id, why });
    }
    Ok(points)
}

/// Request `r`'s patch requests in `module` (its functions there only). A breakpoint has
/// none: it is an `int3` a live process keeps, not code.
pub fn patch_requests(
    module: &Module,
    r: &Request,
    place: &mut dyn Placement,
) -> Result<Built, BuildError> {
    let mut out = Built::default();
    if matches!(r.action, Action::Breakpoint { .. }) {
        return Ok(out);
    }
    if matches!(r.action, Action::Coverage { .. }) {
        return coverage_requests(module, r, place);
    }
    let metric = r.action.metric();
    for f in r.funcs.iter().filter(|f| f.module == module.id) {
        let func = module.functions().get(f.func);
        // A measure's code differs from point to point (entries and exits, a loop's headers,
        // each point's frame); a snippet is the same at every point. Points whose measuring
        // code is the same text share it (in the order the points came: two at one address
        // run in that order).
        let sources: Vec<(Arc<str>, Vec<Point>)> = match (metric, r.source()) {
            (Some(metric), _) => {
                let mut out = Vec::new();
                let mut same: HashMap<String, Arc<str>> = HashMap::new();
                for (probe, points) in measure::probes(module, r, f.func) {
                    for (p, frame) in points {
                        let source =
                            place.measure_source(module, r.id, f.func, metric, &probe, frame)?;
                        let source = same
                            .entry(source)
                            .or_insert_with_key(|s| Arc::from(s.as_str()))
                            .clone();
                        out.push((source, vec![p]));
                    }
                }
                out
            }
            (None, Some(source)) => vec![(source.into(), points_of(module, r, f.func)?)],
            (None, None) => continue,
        };
        let overlapping = Overlapping::new(module, f.func);
        // gsh's measuring code names only the runtime's reserved operations, which no point's
        // facts change: one environment for every point of the same text, so the patcher
        // checks it and generates its code once, not at each point (a loop timer of python3's
        // interpreter has 229 exits, and each insert of one checked and generated the code of
        // each, twice: 12% of gsh's CPU time during `consult`).
        let mut shared: HashMap<*const u8, Arc<dyn crate::snippet::env::Env + Send + Sync>> =
            HashMap::new();
        for (source, points) in sources {
            for p in points {
                if let Some(why) = overlapping.why(&p) {
                    out.skipped.push((p, why));
                    continue;
                }
                let known = shared.get(&(Arc::as_ptr(&source) as *const u8));
                if let (Some(_), Some(env)) = (metric, known) {
                    out.requests.push(patch::Request {
                        tag: r.id,
                        point: p,
                        env: env.clone(),
                        source: source.clone(),
                    });
                    continue;
                }
                let info = {
                    let base = place.env(module, func, PointInfo::default());
                    let mut info = point::facts(module, &p, r.id, &|c| base.c_type(c));
                    // gsh's own snippet: the runtime's reserved operations are allowed.
                    info.internal = metric.is_some();
                    info
                };
                let env = place.env(module, func, info);
                let env: Arc<dyn crate::snippet::env::Env + Send + Sync> =
                    Arc::new(env.snapshot(&source));
                shared.insert(Arc::as_ptr(&source) as *const u8, env.clone());
                out.requests.push(patch::Request {
                    tag: r.id,
                    point: p,
                    env,
                    source: source.clone(),
                });
            }
        }
    }
    Ok(out)
}

/// A coverage request's patch requests: a probe at every block of each function, each
/// incrementing its block's own counter.
fn coverage_requests(
    module: &Module,
    r: &Request,
    place: &mut dyn Placement,
) -> Result<Built, BuildError> {
    let mut out = Built::default();
    for f in r.funcs.iter().filter(|f| f.module == module.id) {
        let func = module.functions().get(f.func);
        let overlapping = Overlapping::new(module, f.func);
        // Every probe of the function names the same things (gsh's reserved operation and a
        // number) at the same facts, so they share one environment: one each held 1.35
        // million copies for cc1's `coverage '*'`.
        let info = PointInfo {
            internal: true,
            ..PointInfo::default()
        };
        let env: Arc<dyn crate::snippet::env::Env + Send + Sync> = Arc::new(
            place
                .env(module, func, info)
                .snapshot(&super::coverage::probe_source(0)),
        );
        for p in super::coverage::points(module, f.func) {
            if let Some(why) = overlapping.why(&p) {
                out.skipped.push((p, why));
                continue;
            }
            let counter = place.coverage_counter(module, r.id, f.func, p.addr)?;
            let source = super::coverage::probe_source(counter);
            out.requests.push(patch::Request {
                tag: r.id,
                point: p,
                env: env.clone(),
                source: source.into(),
            });
        }
    }
    Ok(out)
}

/// Inserts what [`patch_requests`] built; the one place instrumentation reaches the patcher.
pub fn insert(
    patcher: &mut Patcher,
    module: &Module,
    space: &mut dyn AddressSpace,
    built: Built,
) -> Result<Inserted, PatchError> {
    let mut done = patcher.insert(module, space, &built.requests)?;
    let mut skipped = built.skipped;
    skipped.append(&mut done.skipped);
    done.skipped = skipped;
    Ok(done)
}

/// Leaves out of `built` the coverage probes of requests `tags` that only a trap could reach
/// (listed as skipped, with why): a trap costs a signal, or a stop under the tracer, each
/// time its block runs, so a hot block would dominate the program; coverage reports such a
/// block as unprobed instead. Planned as [`Patcher::insert`] would plan them.
pub fn drop_trapped_probes(patcher: &Patcher, module: &Module, built: &mut Built, tags: &[u32]) {
    let probes: Vec<Point> = built
        .requests
        .iter()
        .filter(|r| tags.contains(&r.tag))
        .map(|r| r.point.clone())
        .collect();
    if probes.is_empty() {
        return;
    }
    let planned = patcher.plan(module, &probes);
    let trapped: HashMap<u64, String> = planned
        .sites
        .iter()
        .filter(|s| s.tactic == patch::Tactic::Trap)
        .flat_map(|s| s.points.iter().map(|a| (a.0, s.why.clone())))
        .collect();
    if trapped.is_empty() {
        return;
    }
    drop(planned);
    drop(probes);
    // In place: a partition into two new lists held a second copy of every request (cc1's
    // `coverage '*'` has 1.35 million).
    let mut dropped = Vec::new();
    built.requests.retain(|r| {
        let trap = tags.contains(&r.tag) && trapped.contains_key(&r.point.addr.0);
        if trap {
            dropped.push(r.point.clone());
        }
        !trap
    });
    for point in dropped {
        let why = &trapped[&point.addr.0];
        built.skipped.push((
            point,
            format!("only a trap could reach it, and coverage takes no traps: {why}"),
        ));
    }
}

/// [`insert`], leaving out the points only a trap could reach where traps are refused (they
/// are listed as skipped, with why), for coverage probes: a block without a probe is
/// reported as unprobed, where one refused point would refuse the whole request.
pub fn insert_or_skip_traps(
    patcher: &mut Patcher,
    module: &Module,
    space: &mut dyn AddressSpace,
    mut built: Built,
) -> Result<Inserted, PatchError> {
    loop {
        // `Patcher::insert` refuses a trap before it writes anything, so trying again
        // without the point is clean.
        let attempt = Built {
            requests: built.requests.clone(),
            skipped: Vec::new(),
        };
        match insert(patcher, module, space, attempt) {
            Err(PatchError::NeedsTrap { addr, why, .. }) => {
                let (refused, kept): (Vec<_>, Vec<_>) = std::mem::take(&mut built.requests)
                    .into_iter()
                    .partition(|r| r.point.addr == addr);
                if refused.is_empty() {
                    return Err(PatchError::NeedsTrap {
                        point: "block".into(),
                        addr,
                        why,
                    });
                }
                built.requests = kept;
                for r in refused {
                    built
                        .skipped
                        .push((r.point, format!("only a trap could reach it: {why}")));
                }
            }
            Ok(mut done) => {
                let mut skipped = std::mem::take(&mut built.skipped);
                skipped.append(&mut done.skipped);
                done.skipped = skipped;
                return Ok(done);
            }
            Err(e) => return Err(e),
        }
    }
}

/// Takes request `tag`'s code out of `module` at `points` only (`coverage --once`).
pub fn remove_points(
    patcher: &mut Patcher,
    module: &Module,
    space: &mut dyn AddressSpace,
    tag: u32,
    points: &std::collections::HashSet<crate::addr::LinkAddr>,
) -> Result<usize, PatchError> {
    patcher.remove_points(module, space, tag, points)
}

/// Takes request `tag`'s code out of `module` again: the one undo path.
pub fn remove(
    patcher: &mut Patcher,
    module: &Module,
    space: &mut dyn AddressSpace,
    tag: u32,
) -> Result<usize, PatchError> {
    patcher.remove(module, space, tag)
}

/// One function's blocks, sorted by start as the CFG keeps them, with the running maximum of
/// their ends: the blocks that may hold an address are found by a walk back from it, not a
/// scan of every block per point (which made a large function's coverage quadratic).
struct Overlapping<'a> {
    module: &'a Module,
    func: FuncId,
    /// For each block, the largest end of it and every block before it.
    reach: Vec<u64>,
}

impl<'a> Overlapping<'a> {
    fn new(module: &'a Module, func: FuncId) -> Overlapping<'a> {
        let reach = module
            .analysis()
            .function(func)
            .cfg
            .blocks
            .iter()
            .scan(0, |max, b| {
                *max = (*max).max(b.end.0);
                Some(*max)
            })
            .collect();
        Overlapping {
            module,
            func,
            reach,
        }
    }

    /// Why `p` lies in doubtful code, if it does: another block of its function decodes an
    /// instruction across the point's address, so the two readings of those bytes cannot
    /// both be right. cc1 has one: a jump table read one entry too far gives a "target"
    /// inside a `je`, whose bytes then decode to a `ret imm16` that never runs.
    fn why(&self, p: &Point) -> Option<String> {
        if p.func != self.func {
            return Overlapping::new(self.module, p.func).why(p);
        }
        let cfg = &self.module.analysis().function(p.func).cfg;
        // Blocks starting before the point, back to the last one that may reach past it, in
        // the CFG's order.
        let before = cfg.blocks.partition_point(|b| b.start < p.addr);
        let first = self.reach[..before].partition_point(|&e| e <= p.addr.0);
        for b in &cfg.blocks[first..before] {
            if p.addr >= b.end {
                continue;
            }
            let insns = patch::plan::decode(&self.module.binary, b.start, b.end.0 - b.start.0);
            if !insns.iter().any(|i| i.ip() == p.addr.0) {
                return Some(format!(
                    "the block at {} decodes an instruction across {}",
                    b.start, p.addr
                ));
            }
        }
        None
    }
}

/// The points `show points FUNC` lists when asked for nothing narrower: entry, exits, before
/// and after each call, and the four points of every loop (of the loop `loop`, when given).
pub fn listed_points(loop_name: Option<&str>) -> Vec<Where> {
    let loops = [
        point::LoopAt::Entry,
        point::LoopAt::Exit,
        point::LoopAt::IterBegin,
        point::LoopAt::IterEnd,
    ]
    .map(|at| Where::Loop {
        name: loop_name.unwrap_or("*").to_owned(),
        at,
    });
    let mut wheres = Vec::new();
    if loop_name.is_none() {
        wheres.extend([
            Where::Entry,
            Where::Exit,
            Where::CallBefore { callee: None },
            Where::CallAfter { callee: None },
        ]);
    }
    wheres.extend(loops);
    wheres
}

/// `show points`: the points of each of `funcs` at `wheres` ([`listed_points`], or one point
/// as `at` names it) and how the patcher would reach each, each point planned as if instrumented
/// alone (planned together, one point's needs, say a whole-function relocation, would hide
/// how cheaply the others could be reached). With no point at all, why, for the first
/// function.
pub fn describe_points(
    session: &Session,
    funcs: &[FuncRef],
    wheres: &[Where],
) -> Result<Vec<PointRow>, String> {
    // One patcher per module, not per function: a patcher caches whole-module facts (the
    // branch targets between functions) on first use.
    let mut patchers: HashMap<ModuleId, Patcher> = HashMap::new();
    let mut rows = Vec::new();
    let mut why = None;
    for f in funcs {
        let module = session.module(f.module);
        let patcher = patchers
            .entry(f.module)
            .or_insert_with(|| Patcher::new(0, PatchOptions::default()));
        let mut points = Vec::new();
        for w in wheres {
            match point::find(module, f.func, w) {
                Ok(found) => points.extend(found),
                Err(e) => {
                    why.get_or_insert_with(|| {
                        format!("{} has {e}", module.functions().get(f.func).display_name())
                    });
                }
            }
        }
        point::sort(&mut points);
        points.dedup();
        for p in points {
            rows.extend(patch::describe_points(
                module,
                patcher,
                std::slice::from_ref(&p),
            ));
        }
    }
    match why {
        Some(why) if rows.is_empty() => Err(why),
        _ => Ok(rows),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::instrument::action::{LoopSel, Measured};
    use crate::instrument::Plan;

    /// A placement whose measuring code depends on the point's frame alone, as gsh's does.
    struct Framed;

    impl Placement for Framed {
        fn env<'a>(
            &'a self,
            module: &'a Module,
            func: &'a Function,
            info: PointInfo,
        ) -> SessionEnv<'a> {
            SessionEnv::new(module, Some(func), &[], info, 0)
        }

        fn measure_source(
            &mut self,
            _: &Module,
            _: u32,
            _: FuncId,
            _: Metric,
            probe: &Probe,
            frame: i32,
        ) -> Result<String, BuildError> {
            let op = if probe.at_exit { "exit" } else { "enter" };
            Ok(format!("__gsh_rt_time_{op}(1, 2, 3, {frame});"))
        }

        fn coverage_counter(
            &mut self,
            _: &Module,
            id: u32,
            _: FuncId,
            block: crate::addr::LinkAddr,
        ) -> Result<u64, BuildError> {
            Err(BuildError::NoCounter { id, block })
        }
    }

    /// The exits of a loop timer whose measuring code is the same text share one text and one
    /// environment, so the patcher checks and generates it once: each of python3's loop
    /// timers checked and generated the same code at each of its 229 exits, twice.
    #[test]
    fn points_measured_by_the_same_code_share_it() {
        let path = crate::testutil::compile(
            "shared_measure",
            "int scan(const int *a, int n, int k) {\n\
                 for (int i = 0; i < n; i++) {\n\
                     if (a[i] == k) return i;\n\
                     if (a[i] < 0) return -2;\n\
                 }\n\
                 return -1;\n\
             }\n\
             int main(void) { int a[3] = {1, 2, 3}; return scan(a, 3, 2); }\n",
            false,
            &["-O2"],
        );
        let mut session = crate::testutil::open(&path);
        let mut plan = Plan::default();
        let of = Measured::Loop {
            loops: LoopSel::Named("loop_1".into()),
        };
        let r = measure::add_of(&mut plan, &mut session, "scan", Metric::Time, of)
            .expect("a loop timer")
            .clone();
        let module = session.main().expect("the program");
        let built = patch_requests(module, &r, &mut Framed).expect("built");
        let exits: Vec<&patch::Request> = built
            .requests
            .iter()
            .filter(|q| q.source.contains("exit"))
            .collect();
        assert!(exits.len() >= 2, "{} exits", exits.len());
        let mut shared = 0;
        for a in &built.requests {
            for b in &built.requests {
                if a.source == b.source {
                    assert!(Arc::ptr_eq(&a.source, &b.source), "{}", a.source);
                    assert!(Arc::ptr_eq(&a.env, &b.env), "{}", a.source);
                    shared += usize::from(a.point != b.point);
                }
            }
        }
        assert!(shared > 0, "no two points share their code");
    }
}
