//! Loop and call timers for `consult` in a live process: the [`Probes`] its refinement
//! ([`crate::consult::probes`]) inserts, reads and takes out, as `time FUNC loop LOOP` and
//! `time FUNC call CALLEE` requests of the session's plan, through the process's tracer
//! while the program runs; call paths by `profile FUNC`, read for one path (`paths.rs`).

use std::sync::Arc;

use crate::consult::pace::Pace;
use crate::consult::probes::{Changes, LoopInfo, Probes, TimerValue};
use crate::patch::ModuleFacts;
use crate::session::Module;

mod paths;

/// [`Probes`] in a live process: loop timers are `time FUNC loop LOOP` requests of the
/// session's plan, inserted through the process's tracer while it runs and taken out (values
/// and all) when their experiment ends.
pub struct LiveProbes<'a> {
    plan: &'a mut super::Plan,
    session: &'a mut crate::session::Session,
    tracer: &'a crate::process::Tracer<super::Live>,
    /// Modules being analysed in the background, for [`Probes::ready`], each with what its
    /// patcher plans from, computed there too (`None`: the module is not loaded).
    analysing: std::collections::BTreeMap<crate::ModuleId, Option<Arc<ModuleFacts>>>,
    /// The call paths timed, over the profiles of their functions.
    paths: paths::PathTimers,
    /// The search's pace, which the analyses are held to ([`LiveProbes::pacing`]).
    pace: Option<Arc<Pace>>,
    /// How long each insert and removal took.
    changes: Changes,
}

impl<'a> LiveProbes<'a> {
    /// Probes of the process `inferior`, with requests added to `plan`.
    pub fn new(
        plan: &'a mut super::Plan,
        session: &'a mut crate::session::Session,
        inferior: &'a super::inferior::Inferior,
    ) -> LiveProbes<'a> {
        LiveProbes {
            plan,
            session,
            tracer: inferior.tracer(),
            analysing: Default::default(),
            paths: Default::default(),
            pace: None,
            changes: Changes::default(),
        }
    }

    /// The modules' analyses in the background are held to `pace`, the search's cost limit:
    /// on a loaded machine, redis-server's took most of the 7.2% of the server's running time
    /// gsh's competition for the CPUs cost, against a limit of 5%.
    pub fn pacing(mut self, pace: Arc<Pace>) -> Self {
        self.pace = Some(pace);
        self
    }

    /// The one function `function` of `module` names.
    fn resolve(&mut self, module: &str, function: &str) -> Result<crate::FuncRef, String> {
        let glob = format!("{module}!{function}");
        let funcs = self
            .session
            .resolve_functions(&glob)
            .map_err(|e| e.to_string())?;
        match funcs.as_slice() {
            [f] => Ok(*f),
            _ => Err(format!("`{glob}` names {} functions", funcs.len())),
        }
    }

    /// Inserts a `METRIC FUNCTION WHAT` request measuring `of` in `function` of `module`,
    /// into the running process; its id.
    fn timer(
        &mut self,
        module: &str,
        function: &str,
        metric: super::Metric,
        of: super::action::Measured,
        what: &str,
    ) -> Result<u32, String> {
        use super::measure;
        self.resolve(module, function)?;
        let glob = format!("{module}!{function}");
        let id = measure::add_of(self.plan, self.session, &glob, metric, of)
            .map_err(|e| format!("{function} {what}: {e}"))?
            .id;
        self.place(id, metric, function, what)
    }

    /// Places request `id` (`METRIC FUNCTION WHAT`, just added to the plan) into the running
    /// process; its id.
    fn place(
        &mut self,
        id: u32,
        metric: super::Metric,
        function: &str,
        what: &str,
    ) -> Result<u32, String> {
        let session = &*self.session;
        let tracer = self.tracer;
        let began = std::time::Instant::now();
        let mut held = std::time::Duration::ZERO;
        let placed = self.plan.place(id, |plan| {
            tracer
                .with(|p, live| {
                    let before = p.held_whole();
                    let placed = live.load_runtime(p).and_then(|()| {
                        live.insert(p, session, plan, id)?;
                        live.start_measuring(p)
                    });
                    if placed.is_err() {
                        let _ = live.undo(p, id);
                    }
                    held = p.held_whole().saturating_sub(before);
                    placed.map(|_| ()).map_err(|e| e.to_string())
                })
                .map_err(|e| e.to_string())?
        });
        self.changes.inserts.push(began.elapsed().as_secs_f64());
        self.changes.held += held.as_secs_f64();
        placed.map_err(|e| {
            let asked = format!("{} {function} {what}", metric.command());
            format!("{}: not inserted: {e}", asked.trim_end())
        })?;
        Ok(id)
    }
}

impl Probes for LiveProbes<'_> {
    fn loops(&mut self, module: &str, function: &str) -> Result<Vec<LoopInfo>, String> {
        let f = self.resolve(module, function)?;
        let forest = &self
            .session
            .module(f.module)
            .analysis()
            .function(f.func)
            .loops;
        Ok(forest
            .loops
            .iter()
            .map(|l| LoopInfo {
                name: l.name.clone(),
                parent: l.parent.map(|p| forest.loops[p].name.clone()),
            })
            .collect())
    }

    fn ready(&mut self, module: &str, function: &str) -> bool {
        // A name that does not resolve fails where it is used, with why.
        let Ok(f) = self.resolve(module, function) else {
            return true;
        };
        let m = self.session.modules()[f.module.0 as usize].clone();
        if self.analysing.contains_key(&f.module) {
            return m.analysis_ready();
        }
        // Once per module; the analysis is the module's own (a `OnceLock`), so whoever asks
        // for it meanwhile waits for this one, and later commands find it done. So are the
        // facts its patcher plans from (every CFG, the gaps between blocks decoded), next:
        // left to the first insert, they kept the tracer thread 10 to 16 s on python3 under
        // load (a debug gsh), the stack samples and the search waiting on it.
        let facts = self
            .tracer
            .with(|_, live| live.planning_facts(f.module))
            .ok()
            .flatten()
            .filter(|x| !x.ready());
        let analysed = m.analysis_ready();
        if analysed && facts.is_none() {
            return true;
        }
        self.analysing.insert(f.module, facts.clone());
        let pace = self.pace.clone();
        let started = std::thread::Builder::new()
            .name("gsh-consult-analysis".into())
            .spawn(move || analyse(&m, facts, pace.as_deref()));
        if started.is_err() {
            // No thread: analysed, and planned from, where first needed, as before.
            self.analysing.insert(f.module, None);
            return true;
        }
        analysed
    }

    fn planned(&mut self, module: &str, function: &str) -> bool {
        if !self.ready(module, function) {
            return false;
        }
        let Ok(f) = self.resolve(module, function) else {
            return true;
        };
        self.analysing
            .get(&f.module)
            .and_then(Option::as_ref)
            .is_none_or(|x| x.ready())
    }

    fn loop_at(&mut self, module: &str, function: &str, pc: u64) -> Option<String> {
        let f = self.resolve(module, function).ok()?;
        let bias = self.tracer.with(|_, live| live.bias(f.module)).ok()??;
        let link = pc.wrapping_sub(bias);
        let analysis = self.session.module(f.module).analysis().function(f.func);
        let blocks = &analysis.cfg.blocks;
        analysis
            .loops
            .loops
            .iter()
            .filter(|l| {
                l.blocks.iter().any(|b| {
                    let b = &blocks[b.0 as usize];
                    (b.start.0..b.end.0).contains(&link)
                })
            })
            .max_by_key(|l| l.depth)
            .map(|l| l.name.clone())
    }

    fn insert(&mut self, module: &str, function: &str, lp: &str) -> Result<u32, String> {
        use super::action::{LoopSel, Measured};
        let of = Measured::Loop {
            loops: LoopSel::Named(lp.to_owned()),
        };
        self.timer(
            module,
            function,
            super::Metric::Time,
            of,
            &format!("loop {lp}"),
        )
    }

    fn count_calls(&mut self, module: &str, function: &str) -> Result<u32, String> {
        let of = super::action::Measured::Function;
        self.timer(module, function, super::Metric::Count, of, "calls")
    }

    fn insert_call(&mut self, module: &str, caller: &str, callee: &str) -> Result<u32, String> {
        let of = super::action::Measured::Call {
            callee: callee.to_owned(),
        };
        self.timer(
            module,
            caller,
            super::Metric::Time,
            of,
            &format!("call {callee}"),
        )
    }

    fn insert_path(&mut self, module: &str, path: &[String]) -> Result<u32, String> {
        self.insert_path_timer(module, path)
    }

    fn read(&mut self, id: u32, tid: i32) -> Result<TimerValue, String> {
        if let Some(v) = self.read_path_timer(id, Some(tid)) {
            return v;
        }
        let reader = self.tracer.reader();
        let values = self
            .tracer
            .with(|_, live| live.measure.thread_values(&reader, tid as u32))
            .map_err(|e| e.to_string())?
            .map_err(|e| e.to_string())?;
        Ok(values
            .iter()
            .filter(|v| v.id == id)
            .fold(TimerValue::default(), |a, v| TimerValue {
                entries: a.entries + v.calls,
                ns: a.ns + v.ns.unwrap_or(0),
            }))
    }

    fn read_all(&mut self, id: u32, _: i32) -> Result<TimerValue, String> {
        if let Some(v) = self.read_path_timer(id, None) {
            return v;
        }
        let reader = self.tracer.reader();
        let values = self
            .tracer
            .with(|_, live| live.measure.values(&reader))
            .map_err(|e| e.to_string())?
            .map_err(|e| e.to_string())?;
        Ok(values
            .iter()
            .filter(|v| v.id == id)
            .fold(TimerValue::default(), |a, v| TimerValue {
                entries: a.entries + v.calls,
                ns: a.ns + v.ns.unwrap_or(0),
            }))
    }

    fn learn(&mut self) -> Result<usize, String> {
        let session = &mut *self.session;
        self.tracer
            .with(|p, live| {
                // gsh's own runtime (loaded for the timers) is no library of the program's:
                // its code runs no program time worth a new look at the stacks.
                let rt = live.measure.runtime.as_ref().map(|r| r.path.clone());
                let theirs = |live: &super::Live| {
                    live.loaded()
                        .filter(|(m, _)| {
                            rt.as_deref().is_none_or(|rt| {
                                std::fs::canonicalize(m.binary.path()).ok().as_deref()
                                    != std::fs::canonicalize(rt).ok().as_deref()
                            })
                        })
                        .count()
                };
                let before = theirs(live);
                live.learn_modules(session, p)?;
                Ok(theirs(live).saturating_sub(before))
            })
            .map_err(|e| e.to_string())?
            .map_err(|e: super::live::LiveError| format!("learning new libraries: {e}"))
    }

    fn insert_path_loop(&mut self, module: &str, path: &[String], lp: &str) -> Result<u32, String> {
        self.insert_path_loop_timer(module, path, lp)
    }

    fn remove(&mut self, id: u32) -> Result<(), String> {
        // A path timer's profile stays in while other paths read it.
        for id in self.paths.remove(id) {
            // Taken out as if never asked for: its values are the search's, not `report`'s.
            let began = std::time::Instant::now();
            let undone = self.tracer.with(|p, live| {
                let before = p.held_whole();
                let undone = live.undo(p, id);
                (undone, p.held_whole().saturating_sub(before))
            });
            self.changes.removes.push(began.elapsed().as_secs_f64());
            let undone = undone.map(|(undone, held)| {
                self.changes.held += held.as_secs_f64();
                undone
            });
            undone
                .map_err(|e| e.to_string())?
                .map_err(|e| format!("consult's timer {id}: not removed: {e}"))?;
            let _ = self.plan.delete(id);
        }
        Ok(())
    }

    fn changes(&self) -> Changes {
        self.changes.clone()
    }
}

/// The search's pace holds a module's analysis between functions.
impl crate::symbols::Progress for Pace {
    fn update(&self, _: u64, _: u64) {}

    fn pace(&self) {
        self.wait();
    }
}

/// Analyses module `m` and computes the `facts` its patcher plans from, held to `pace` where
/// the search has one: then beside the module's own analysis, which whoever needs it
/// meanwhile runs rather than wait for the held one ([`Module::analyse_aside`]).
fn analyse(m: &Module, facts: Option<Arc<ModuleFacts>>, pace: Option<&Pace>) {
    match pace {
        Some(p) => m.analyse_aside(p),
        None => {
            m.analysis();
        }
    }
    if let Some(facts) = facts {
        if let Some(p) = pace {
            p.wait();
        }
        facts.compute(m);
    }
}
