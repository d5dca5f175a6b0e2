//! Instrumentation in a live process: the plan's requests inserted into, and removed from, a
//! process under ptrace while it runs. [`Live`] is the tracer's [`Hooks`]: it lives on the
//! tracer thread next to the [`Process`], so that it can apply pending instrumentation the
//! moment a library appears, move traps into trampolines, and keep fork children clean, even
//! while the shell sits at its prompt.
//!
//! Every change over code happens with all threads stopped: the process is halted if it was
//! running and resumed afterwards, which is the "pause" the benchmarks measure. Trampolines
//! are written while it runs; the jumps into them go in batches of whole changes of at most
//! [`PAUSE_WRITES`] writes, the threads running between batches, so that a request of any
//! size stops the process only briefly at a time. After
//! each batch of writes, a thread whose `rip` lies inside bytes that changed is moved: into
//! the trampoline's copy of its instruction when code was covered, or along the jump it was
//! about to take when one of our jumps was taken away. A trampoline no code enters any more
//! (replaced or taken out) is freed at a later pause once no stopped thread's registers or
//! stack point into it, and later trampolines take its memory (`Live::trampoline_memory`).
//!
//! Breakpoints (`break`) are `int3`s at the point, or at the start of the point's code in its
//! trampoline when a site covers the point; they are lifted around every patch so that the
//! patcher always finds the bytes it expects.

#![warn(missing_docs)]

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::addr::RuntimeAddr;
use crate::patch::{
    self, AddressSpace, AllocKind, PatchOptions, Patcher, PointReport, SpaceError, Tactic,
};
use crate::process::{
    ChildMemory, Hooks, MappedModule, Process, ProcessError, State, TextChange, TrapAction,
};
use crate::session::{Module, ModuleId, Session};
use crate::snippet::env::PointInfo;
use crate::snippet::ir::Program;

use super::action::{Action, Metric};
use super::build::{self, BuildError, Placement};
use super::coverage::LiveCoverage;
use super::env::{Declaration, SessionEnv};
use super::measure::{Measure, MeasureError, Probe};
use super::pending::{overlay, Pending};
use super::request::{Plan, Request};

/// Bytes reserved for declared variables in a live process.
const DATA_SIZE: u64 = 1 << 20;

/// Why live instrumentation failed.
#[derive(Debug, thiserror::Error)]
pub enum LiveError {
    /// Controlling, reading or writing the process.
    #[error(transparent)]
    Process(#[from] ProcessError),
    /// Placing a point.
    #[error(transparent)]
    Patch(#[from] patch::PatchError),
    /// Memory the patcher asked for.
    #[error(transparent)]
    Space(#[from] SpaceError),
    /// A request that cannot become patch requests.
    #[error(transparent)]
    Build(#[from] BuildError),
    /// The memory for declared variables is full.
    #[error("declared variables need more than {DATA_SIZE} bytes")]
    DataFull,
    /// No request has that id.
    #[error("no instrumentation or breakpoint {0}")]
    UnknownId(u32),
    /// The runtime library or its slots.
    #[error(transparent)]
    Measure(#[from] MeasureError),
    /// Anything else, said in a sentence (a breakpoint's condition, an instruction copy).
    #[error("{0}")]
    Message(String),
    /// Writing a change to a module's code failed, and so did putting the old bytes back:
    /// the process is left stopped with code that is neither the old nor the new.
    #[error(
        "writing the code of {module} failed ({cause}), and putting its old bytes back failed \
         too ({restore}): {} of the {total} run(s) of bytes changed there (at {}) may hold new \
         or half-written code, the others are as before; every thread is left stopped so that \
         none runs into them, and gsh's records of {module} no longer match its code: `kill` \
         the process (`continue` or `detach` would run that code)",
        left.len(),
        left.iter().map(|a| format!("{a:#x}")).collect::<Vec<_>>().join(", ")
    )]
    Torn {
        /// The module whose code was being written.
        module: String,
        /// Why writing failed.
        cause: Box<LiveError>,
        /// Why putting the old bytes back failed.
        restore: Box<LiveError>,
        /// Where the runs not put back start.
        left: Vec<u64>,
        /// How many runs the change had.
        total: usize,
    },
    /// Writing a change to a module's code failed; its old bytes are back, but the
    /// breakpoints lifted for the write could not all be set again.
    #[error(
        "writing the code of {module} failed ({cause}); its code is back as it was, but \
         setting the breakpoints again failed ({restore}): the process is stopped, and a \
         breakpoint may not stop it until `delete` and `break` set it again"
    )]
    BreakpointsLost {
        /// The module whose code was being written.
        module: String,
        /// Why writing failed.
        cause: Box<LiveError>,
        /// Why setting the breakpoints failed.
        restore: Box<LiveError>,
    },
}

/// Where one pause's time went: the steps between the first thread stopping and the last
/// one running again (`xtask bench-stall` prints the longest pause's).
#[derive(Clone, Copy, Debug, Default)]
pub struct PauseSteps {
    /// Stopping every thread (`Process::halt`).
    pub halt: Duration,
    /// Serving the stops the halt caught.
    pub serve: Duration,
    /// The change itself: breakpoints lifted, runs written, threads moved, breakpoints back.
    pub change: Duration,
    /// Letting every thread run again (`Process::resume`).
    pub resume: Duration,
    /// How the halt went, thread by thread.
    pub halt_timing: crate::process::HaltTiming,
}

/// Code memory freed from retired trampolines, and how much was asked of the process.
#[derive(Default)]
struct CodeMemory {
    /// Free ranges, sorted, which new trampolines take first.
    free: Vec<std::ops::Range<u64>>,
    /// Bytes of trampolines allocated from the process's pools rather than from `free`.
    asked: u64,
}

/// See [`Live::trampoline_memory`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TrampolineMemory {
    /// Bytes of trampolines taken from the process's pools (not from freed ones) so far.
    pub asked: u64,
    /// Bytes freed from retired trampolines, not yet taken again.
    pub free: u64,
    /// Retired trampolines waiting for no thread to be inside them.
    pub waiting: usize,
    /// The patchers' address-map records (where trampoline code came from).
    pub records: usize,
}

/// A module as loaded in the process.
struct Loaded {
    module: Arc<Module>,
    bias: u64,
    patcher: Patcher,
}

/// A request as the live layer keeps it: the plan's request and the modules it reaches.
struct LiveRequest {
    request: Request,
    modules: HashMap<ModuleId, Arc<Module>>,
    /// Modules it has been inserted into.
    applied: Vec<ModuleId>,
    /// Points it was inserted at, over all modules.
    points: usize,
}

impl LiveRequest {
    /// A measure, which waits for the runtime library.
    fn measures(&self) -> bool {
        self.request.action.metric().is_some()
    }
}

/// A live process's placement: declared variables in memory mapped near the main program,
/// the module's load bias, every loaded module reachable, measures in the runtime's slots.
struct LivePlacement<'l> {
    /// The process, whose stops `server` serves while snippets are compiled.
    p: &'l mut Process,
    server: Server,
    declared: &'l [Declaration],
    bias: u64,
    loaded: &'l BTreeMap<ModuleId, Loaded>,
    measure: &'l mut Measure,
    coverage: &'l LiveCoverage,
}

impl Placement for LivePlacement<'_> {
    fn env<'a>(
        &'a self,
        module: &'a Module,
        func: &'a crate::symbols::Function,
        info: PointInfo,
    ) -> SessionEnv<'a> {
        SessionEnv::new(module, Some(func), self.declared, info, self.bias)
            .with_modules(self.loaded.values().map(|l| &*l.module))
            .with_loaded(self.loaded.values().map(|l| (&*l.module, l.bias)))
    }

    fn measure_source(
        &mut self,
        module: &Module,
        id: u32,
        func: crate::symbols::FuncId,
        metric: Metric,
        probe: &Probe,
        frame: i32,
    ) -> Result<String, BuildError> {
        self.server.tick(self.p);
        let name = || module.functions().get(func).display_name().to_owned();
        Ok(self
            .measure
            .source(name, id, module.id, func, metric, probe, frame)?)
    }

    fn coverage_counter(
        &mut self,
        module: &Module,
        id: u32,
        func: crate::symbols::FuncId,
        block: crate::addr::LinkAddr,
    ) -> Result<u64, BuildError> {
        self.server.tick(self.p);
        let f = module.functions().get(func).addr.0;
        self.coverage
            .counter(id, module.id, f, block.0)
            .ok_or(BuildError::NoCounter { id, block })
    }
}

/// A `break`: an int3 the tracer reports.
#[derive(Clone, Debug)]
pub struct Breakpoint {
    /// The breakpoint request's id.
    pub id: u32,
    /// Where the point is (runtime address of the original instruction).
    pub point: u64,
    /// The point as users name it (`main entry`).
    pub what: String,
    /// Stop only when this holds (checked at the point, see [`super::eval::check_condition`]).
    pub cond: Option<Program>,
    /// Where the int3 is now, and the byte it replaced.
    placed: Option<(u64, u8)>,
    /// How many times it stopped a thread.
    pub hits: u64,
}

/// What `start` does after the process is created.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StopAt {
    /// Run on.
    Nothing,
    /// A one-shot int3 at this runtime address (`main`).
    Once(u64),
}

/// The live process's instrumentation state (the tracer's hooks).
#[derive(Default)]
pub struct Live {
    loaded: BTreeMap<ModuleId, Loaded>,
    /// Session modules known to the live layer, by canonical path, so libraries that appear
    /// later are recognised.
    known: Vec<(PathBuf, Arc<Module>)>,
    requests: BTreeMap<u32, LiveRequest>,
    declared: Vec<Declaration>,
    /// Initial values written so far (a prefix of `declared`).
    initialised: usize,
    data: Option<u64>,
    /// Every breakpoint set, one per point (a request's several points share its id).
    pub breakpoints: Vec<Breakpoint>,
    /// Out-of-line copies of the instructions under conditional breakpoints (int3 address to
    /// the instruction's bytes and its copy): a thread whose condition is false runs the
    /// original instruction there and comes back, while the int3 stays in place for every
    /// other thread. Made when the breakpoint is placed (every thread stopped).
    out_of_line: BTreeMap<u64, (Vec<u8>, u64)>,
    /// The breakpoints whose condition held at each thread's last reported stop.
    hit: BTreeMap<i32, Vec<u32>>,
    /// One-shot stop (`start` runs to `main`).
    once: Option<(u64, u8)>,
    /// Counts per tactic over every insert, for reports.
    pub tactics: BTreeMap<Tactic, usize>,
    /// Problems met while applying pending instrumentation from a hook, for the shell.
    pub messages: Vec<String>,
    /// The declared variables' bytes as the process left them when it exited (base, bytes).
    pub last_data: Option<(u64, Vec<u8>)>,
    /// How long code changes kept the process stopped, summed (benchmarks reset and read it).
    pub paused_for: std::time::Duration,
    /// The longest of those pauses, and the most writes over code one of them made
    /// (benchmarks and tests reset and read them; see [`PAUSE_WRITES`]).
    pub longest_pause: std::time::Duration,
    /// See [`Live::longest_pause`].
    pub most_writes_in_a_pause: usize,
    /// Where the longest pause's time went, step by step (benchmarks reset and read it).
    pub longest_pause_steps: PauseSteps,
    /// The most writes over code one pause of a running process may make, when not
    /// [`PAUSE_WRITES`] (a benchmark compares with `usize::MAX`: one pause per module).
    pub pause_writes: Option<usize>,
    /// Measuring requests' runtime and slots (see [`super::measure`]).
    pub measure: Measure,
    /// Coverage requests' counters (see [`super::coverage`]).
    pub coverage: LiveCoverage,
    /// Let an attached process go (hands-off) even while it holds declared variables or
    /// coverage counters, or measures with a runtime whose arena gsh could not take. Off by
    /// default: for those the tracer must see the exit to keep the final values (`exiting`),
    /// which an untraced process takes with it. Counters in an arena gsh holds need no tracer
    /// ([`super::arena`]).
    pub hands_off_while_measuring: bool,
    /// How many threads' values ended with the process: it ended while gsh was hands-off,
    /// its final values were read from the arena, and that many thread blocks were not in it
    /// ([`super::arena::Arena::lost`]). `report` says so with the values.
    pub values_lost_with: Option<u64>,
    /// Stage changes beside a running process at a lower priority (`Process::polite`), so
    /// that its threads come first. Off by default: `xtask bench-stall count` compares, and on
    /// a machine under load 11 neither way was consistently better while staging took up to
    /// twice as long.
    pub polite_staging: bool,
    /// Parse and check every snippet at every trampoline layout, as gsh did before the
    /// patchers kept checked snippets (`PatchOptions::recheck_snippets`; `xtask bench-stall
    /// relay` compares).
    pub recheck_snippets: bool,
    /// Generate each snippet's code afresh at every address a trampoline's layout tries, as
    /// gsh did before it moved the code generated once (`PatchOptions::generate_at_each_address`;
    /// `xtask bench-stall relay` compares).
    pub generate_at_each_address: bool,
    /// Generate each snippet's code once per trampoline layout and assemble the save and
    /// restore code at every layout, as gsh did before the patchers kept both
    /// (`PatchOptions::code_per_layout`; `xtask bench-stall relay` compares).
    pub code_per_layout: bool,
    /// Leave the stops that arrive inside a job for the tracer after it, as gsh did before
    /// [`Process::serve_in_job`]: their threads stay stopped until the job ends (a benchmark
    /// compares; `xtask bench-stall detach`).
    pub hold_stops_in_jobs: bool,
    /// Trampolines no code enters any more (replaced or taken out by a change written
    /// since), by module: a thread may still be inside one, or have called out of one. At
    /// the next pause, each that no stopped thread's registers or stack point into is freed
    /// for later trampolines ([`Live::free_code`]).
    leaving: Vec<(ModuleId, std::ops::Range<u64>)>,
    /// The process's mappings, read before a pause's halt when trampolines wait to be freed:
    /// where each thread's stack ends.
    scan_maps: Option<Vec<crate::process::Mapping>>,
    /// Those found free in the pause now ending, freed once it ends.
    freeing: Vec<(ModuleId, std::ops::Range<u64>)>,
    /// Code memory freed that way, which new trampolines take before asking the process for
    /// more: a long attach inserting and deleting requests reuses it.
    free_code: Arc<std::sync::Mutex<CodeMemory>>,
    /// While a change is committed: the trap sites of the patcher's records from before it
    /// (`int3` to trampoline), whose `int3`s stay in the code until their batch is written,
    /// so a thread stopped at one is still served (see [`Live::trap_site`]).
    retiring: BTreeMap<u64, u64>,
    /// Every run of a module's code this session wrote (start to end and module), kept when
    /// the change is taken out: a fork child that a halt held ([`Process::held_children`]) is
    /// a copy of its parent from before the job that released it, so it may have jumps the
    /// patcher no longer records, and is given the files' bytes over all of them.
    ever_written: BTreeMap<u64, (u64, ModuleId)>,
    /// Every `int3` a breakpoint or the one-shot stop put in, with the byte under it, for the
    /// same children.
    ever_int3: BTreeMap<u64, u8>,
}

fn canon(p: &Path) -> PathBuf {
    std::fs::canonicalize(p).unwrap_or_else(|_| p.to_owned())
}

/// The process as the patcher's address space, staged so that the process is paused only
/// for the jumps: trampolines go into freshly allocated memory at once, even while the process
/// runs (nothing reaches them yet), while writes over existing code wait in `pending` until
/// [`LiveSpace::commit`], which the caller runs with every thread stopped. Reads see the
/// pending writes, and see the original byte under each of our breakpoints, so the patcher
/// finds the bytes it expects.
struct LiveSpace<'p> {
    p: &'p mut Process,
    /// Memory allocated through this space (start to end): written directly.
    fresh: BTreeMap<u64, u64>,
    /// Writes over existing code.
    pending: Pending,
    /// (address, original byte) of every breakpoint in place.
    hidden: Vec<(u64, u8)>,
    /// Serves the process's stops while the patcher works.
    server: Server,
}

impl<'p> LiveSpace<'p> {
    fn new(p: &'p mut Process, hidden: Vec<(u64, u8)>, server: Server) -> LiveSpace<'p> {
        LiveSpace {
            p,
            fresh: BTreeMap::new(),
            pending: Pending::default(),
            hidden,
            server,
        }
    }
}

/// How many times `let_go` looks for a moment when no thread of a running process is in gsh's
/// code (2 ms apart) before it gives back only what no thread is in.
const LET_GO_TRIES: u32 = 50;

/// How often a job that works while the process runs serves its stops (see [`Server`]): a
/// thread that runs into a trap site waits at most about this long, and a `waitpid` costs a
/// microsecond.
const SERVE_EVERY: Duration = Duration::from_micros(250);

/// Serves a running process's stops now and then while a job works for a long time (the
/// patcher staging a large request, its snippets compiled), as the tracer does between jobs,
/// so a thread that runs into a trap site or takes a signal is not left stopped until the
/// job ends. The trap sites are those in the code as it is, which staging does not change.
struct Server {
    /// `int3` to trampoline; `None` when stops wait for the end of the job
    /// ([`Live::hold_stops_in_jobs`]).
    traps: Option<BTreeMap<u64, u64>>,
    last: Instant,
    /// [`Live::free_code`].
    free: Arc<std::sync::Mutex<CodeMemory>>,
}

impl Server {
    /// Serves the stops of `p` if it runs and [`SERVE_EVERY`] has passed. A failure leaves
    /// them for the tracer after the job, as before.
    fn tick(&mut self, p: &mut Process) {
        let Some(traps) = &self.traps else {
            return;
        };
        if self.last.elapsed() < SERVE_EVERY || p.state() != State::Running {
            return;
        }
        let _ = p.serve_in_job(&|rip| traps.get(&rip.wrapping_sub(1)).copied());
        self.last = Instant::now();
    }
}

impl AddressSpace for LiveSpace<'_> {
    fn read(&self, addr: RuntimeAddr, len: usize) -> Result<Vec<u8>, SpaceError> {
        let mut bytes = self.p.read(addr.0, len).map_err(|e| SpaceError::Access {
            addr,
            len,
            detail: e.to_string(),
        })?;
        for (at, orig) in &self.hidden {
            overlay(&mut bytes, addr.0, *at, &[*orig]);
        }
        self.pending.overlay(addr.0, &mut bytes);
        Ok(bytes)
    }

    fn allocate(
        &mut self,
        near: RuntimeAddr,
        size: u64,
        kind: AllocKind,
    ) -> Result<RuntimeAddr, SpaceError> {
        self.server.tick(self.p);
        if kind == AllocKind::Code {
            let mut code = self.server.free.lock().unwrap_or_else(|e| e.into_inner());
            if let Some(at) = take_free(&mut code.free, near.0, size) {
                self.fresh.insert(at, at + size);
                return Ok(RuntimeAddr(at));
            }
            code.asked += size;
        }
        let got = self
            .p
            .allocate(near.0, size, kind)
            .map(RuntimeAddr)
            .map_err(|e| match e {
                ProcessError::NoRoom { .. } => SpaceError::NoRoom { near, size },
                e => SpaceError::Access {
                    addr: near,
                    len: size as usize,
                    detail: format!("cannot allocate memory near it: {e}"),
                },
            })?;
        self.fresh.insert(got.0, got.0 + size);
        Ok(got)
    }

    fn write(&mut self, addr: RuntimeAddr, bytes: &[u8]) -> Result<(), SpaceError> {
        #[cfg(test)]
        if rollback_tests::fault_hit() {
            return Err(SpaceError::Access {
                addr,
                len: bytes.len(),
                detail: "injected fault".into(),
            });
        }
        self.server.tick(self.p);
        let end = addr.0 + bytes.len() as u64;
        let in_fresh = self
            .fresh
            .range(..=addr.0)
            .next_back()
            .is_some_and(|(_, e)| end <= *e);
        if in_fresh {
            return self.p.write(addr.0, bytes).map_err(|e| SpaceError::Access {
                addr,
                len: bytes.len(),
                detail: e.to_string(),
            });
        }
        self.pending.push(addr.0, bytes);
        Ok(())
    }

    fn end_change(&mut self) {
        self.pending.end_change();
    }
}

impl Live {
    /// Declared variables' addresses (valid once [`Live::sync_declared`] ran).
    pub fn declared(&self) -> &[Declaration] {
        &self.declared
    }

    /// Learns the process's modules: those the session has open get their bias. Call after
    /// `start`/`attach`, with the process stopped.
    pub fn learn_modules(
        &mut self,
        session: &mut Session,
        p: &mut Process,
    ) -> Result<(), LiveError> {
        for m in p.modules()? {
            if let Ok(id) = session.module_for_path(&m.path) {
                self.know(session.module_arc(id));
                self.loaded.entry(id).or_insert_with(|| Loaded {
                    module: session.module_arc(id),
                    bias: m.bias,
                    patcher: Patcher::new(m.bias, live_options()),
                });
            }
        }
        Ok(())
    }

    fn know(&mut self, m: Arc<Module>) {
        let path = canon(m.binary.path());
        if !self.known.iter().any(|(p, _)| *p == path) {
            self.known.push((path, m));
        }
    }

    /// The load bias of a session module, when the process has it mapped.
    pub fn bias(&self, id: ModuleId) -> Option<u64> {
        self.loaded.get(&id).map(|l| l.bias)
    }

    /// What the patcher of loaded module `id` plans from, for computing on another thread
    /// before the first insert there ([`crate::patch::ModuleFacts::compute`]).
    pub fn planning_facts(&self, id: ModuleId) -> Option<Arc<crate::patch::ModuleFacts>> {
        self.loaded.get(&id).map(|l| l.patcher.facts())
    }

    /// Every loaded module and its bias (for unwinding and `where`).
    pub fn loaded(&self) -> impl Iterator<Item = (&Arc<Module>, u64)> + '_ {
        self.loaded.values().map(|l| (&l.module, l.bias))
    }

    /// Where a trampoline address came from, as (module, original runtime address).
    pub fn origin(&self, addr: u64) -> Option<(ModuleId, u64)> {
        self.loaded.iter().find_map(|(id, l)| {
            l.patcher.origin(RuntimeAddr(addr)).map(|o| {
                let a = match o {
                    patch::Origin::Before(a) | patch::Origin::Copy(a) => a,
                    patch::Origin::JumpBack(a) => a,
                };
                (*id, a)
            })
        })
    }

    /// Gives declared variables their memory (near the main module) and writes the initial
    /// values of those declared since the last call.
    pub fn sync_declared(&mut self, p: &mut Process, plan: &Plan) -> Result<(), LiveError> {
        if plan.declared.is_empty() {
            return Ok(());
        }
        let base = match self.data {
            Some(b) => b,
            None => {
                let near = self
                    .loaded
                    .values()
                    .find(|l| l.module.is_main)
                    .or_else(|| self.loaded.values().next())
                    .map_or(0, |l| l.bias.wrapping_add(l.module.binary.entry().0));
                let b = p.allocate(near, DATA_SIZE, AllocKind::Data)?;
                self.data = Some(b);
                b
            }
        };
        let (vars, size) = plan.layout(base);
        if size > DATA_SIZE {
            return Err(LiveError::DataFull);
        }
        for (v, d) in vars.iter().zip(&plan.declared).skip(self.initialised) {
            p.write(v.addr, &d.init)?;
        }
        self.initialised = vars.len();
        self.declared = vars;
        Ok(())
    }

    /// Runs `f` with every thread stopped, then resumes the process if it was running.
    pub fn paused<R>(
        p: &mut Process,
        f: impl FnOnce(&mut Process) -> Result<R, LiveError>,
    ) -> Result<R, LiveError> {
        let running = p.state() == crate::process::State::Running;
        if running {
            p.halt()?;
        }
        let out = f(p);
        if running {
            p.resume()?;
        }
        out
    }

    /// Inserts request `id` of `plan` into every loaded module it reaches; the rest waits for
    /// its library to be loaded. The process may be running: trampolines are written while
    /// it runs, and it is paused only while the jumps into them are written.
    pub fn insert(
        &mut self,
        p: &mut Process,
        session: &Session,
        plan: &Plan,
        id: u32,
    ) -> Result<Vec<PointReport>, LiveError> {
        // The process's threads come first while gsh stages beside them.
        let polite = self.polite_staging && p.state() == State::Running;
        if polite {
            p.polite(true);
        }
        let out = self.insert_now(p, session, plan, id);
        if polite {
            p.polite(false);
        }
        out
    }

    /// [`Live::insert`], at whatever priority the tracer has.
    fn insert_now(
        &mut self,
        p: &mut Process,
        session: &Session,
        plan: &Plan,
        id: u32,
    ) -> Result<Vec<PointReport>, LiveError> {
        let request = plan
            .requests
            .iter()
            .find(|r| r.id == id)
            .ok_or(LiveError::UnknownId(id))?
            .clone();
        self.sync_declared(p, plan)?;
        let mut modules = HashMap::new();
        for f in &request.funcs {
            let m = session.module_arc(f.module);
            self.know(m.clone());
            modules.insert(f.module, m);
        }
        self.requests.insert(
            id,
            LiveRequest {
                request,
                modules,
                applied: Vec::new(),
                points: 0,
            },
        );
        if self.requests[&id].measures() && self.measure.runtime.is_none() {
            // Waits for [`Live::start_measuring`].
            return Ok(Vec::new());
        }
        let targets: Vec<ModuleId> = self.requests[&id]
            .modules
            .keys()
            .copied()
            .filter(|m| self.loaded.contains_key(m))
            .collect();
        let mut reports = Vec::new();
        for m in targets {
            match self.apply(p, id, m) {
                Ok(r) => reports.extend(r),
                Err(e) => {
                    // Nothing half-done: what went in is taken out, as if never asked for.
                    let _ = self.undo(p, id);
                    return Err(e);
                }
            }
        }
        Ok(reports)
    }

    /// Loads the runtime library (once), gives it unwind tables for profiles, and inserts the
    /// measuring requests that waited for it.
    /// The process must be stopped past libc's start-up (at `main`, or attached).
    pub fn start_measuring(&mut self, p: &mut Process) -> Result<Vec<PointReport>, LiveError> {
        let waiting: Vec<u32> = self
            .requests
            .iter()
            .filter(|(_, r)| r.measures() && r.applied.is_empty())
            .map(|(id, _)| *id)
            .collect();
        if waiting.is_empty() && self.measure.runtime.is_none() {
            return Ok(Vec::new());
        }
        self.measure.load(p)?;
        let mut reports = Vec::new();
        for id in waiting {
            let modules: Vec<ModuleId> = self.requests[&id]
                .modules
                .keys()
                .copied()
                .filter(|m| self.loaded.contains_key(m))
                .collect();
            for m in modules {
                reports.extend(self.apply(p, id, m)?);
            }
        }
        Ok(reports)
    }

    /// Loads the runtime library into the process, once: each of its injected calls stops
    /// the process only while it runs. The process must be past libc's start-up.
    pub fn load_runtime(&mut self, p: &mut Process) -> Result<(), LiveError> {
        self.measure.load(p)?;
        Ok(())
    }

    /// Gives the runtime the call-site unwind tables a profile in module `m` walks through:
    /// the main program's and `m`'s. Computed while the process runs.
    fn unwind_tables_for(&mut self, p: &mut Process, m: ModuleId) -> Result<(), LiveError> {
        let main = self
            .loaded
            .iter()
            .find(|(_, l)| l.module.is_main)
            .map(|(id, _)| *id);
        for id in main.into_iter().chain([m]) {
            if let Some(l) = self.loaded.get(&id) {
                let (module, bias) = (l.module.clone(), l.bias);
                self.measure.add_unwind_table(p, id, &module, bias)?;
            }
        }
        Ok(())
    }

    /// Inserts request `id` into loaded module `m`, through the one path from request to
    /// patcher ([`build`]). What the patcher staged belongs to the request even when the
    /// insert fails, so [`Live::remove`] takes it out.
    fn apply(
        &mut self,
        p: &mut Process,
        id: u32,
        m: ModuleId,
    ) -> Result<Vec<PointReport>, LiveError> {
        let metric = self.requests[&id].request.action.metric();
        if let Action::Breakpoint { cond } = &self.requests[&id].request.action {
            let cond = cond.clone();
            return self.apply_breakpoint(p, id, m, cond.as_deref());
        }
        if metric.is_some_and(|m| m.is_profile()) {
            self.unwind_tables_for(p, m)?;
        }
        let coverage = matches!(self.requests[&id].request.action, Action::Coverage { .. });
        if let Action::Coverage { once } = self.requests[&id].request.action {
            let loaded = &self.loaded[&m];
            let funcs: Vec<_> = self.requests[&id]
                .request
                .funcs
                .iter()
                .filter(|f| f.module == m)
                .map(|f| f.func)
                .collect();
            self.coverage.prepare(
                id,
                &loaded.module,
                loaded.bias,
                &funcs,
                once,
                |near, size| p.allocate(near, size, AllocKind::Data),
            )?;
        }
        let built = {
            let server = self.server();
            let loaded = &self.loaded[&m];
            let mut place = LivePlacement {
                p: &mut *p,
                server,
                declared: &self.declared,
                bias: loaded.bias,
                loaded: &self.loaded,
                measure: &mut self.measure,
                coverage: &self.coverage,
            };
            build::patch_requests(&loaded.module, &self.requests[&id].request, &mut place)?
        };
        // Slots a previous owner used start from zero, before any code counts in them.
        self.measure.prepare_slots(p)?;
        let (hidden, traps) = (self.hidden(), self.server());
        let loaded = self.loaded.get_mut(&m).expect("checked above");
        loaded.patcher.recheck_snippets(self.recheck_snippets);
        loaded
            .patcher
            .generate_at_each_address(self.generate_at_each_address);
        loaded.patcher.code_per_layout(self.code_per_layout);
        // Trampolines are written while the process runs; it stops only for the jumps.
        let mut space = LiveSpace::new(&mut *p, hidden, traps);
        let result = if coverage {
            // A block only a trap could reach goes unprobed.
            let mut built = built;
            build::drop_trapped_probes(&loaded.patcher, &loaded.module, &mut built, &[id]);
            build::insert_or_skip_traps(&mut loaded.patcher, &loaded.module, &mut space, built)
        } else {
            build::insert(&mut loaded.patcher, &loaded.module, &mut space, built)
        };
        // Recorded before the commit: should writing the jumps fail, the patcher still holds
        // the request's sites, and `remove` must take them out of this module too.
        if let Some(lr) = self.requests.get_mut(&id) {
            if !lr.applied.contains(&m) {
                lr.applied.push(m);
            }
        }
        self.commit(space, m, None)?;
        let done = result?;
        if coverage {
            let blocks: Vec<(u64, u64, String)> = done
                .skipped
                .iter()
                .map(|(pt, why)| {
                    let f = self.loaded[&m].module.functions().get(pt.func).addr.0;
                    (f, pt.addr.0, why.clone())
                })
                .collect();
            self.coverage.unprobed(id, m, &blocks);
        }
        for (pt, why) in &done.skipped {
            self.messages.push(format!(
                "instrumentation {id}: {} at {} skipped: {why}",
                pt.kind.as_str(),
                pt.addr
            ));
        }
        let reports = done.points;
        for r in &reports {
            *self.tactics.entry(r.tactic).or_insert(0) += 1;
        }
        if let Some(lr) = self.requests.get_mut(&id) {
            lr.points += reports.len();
        }
        Ok(reports)
    }

    /// Sets breakpoint request `id` at its points in loaded module `m`: an `int3` at each,
    /// stopping only when `cond` holds there (checked against each point's own facts).
    fn apply_breakpoint(
        &mut self,
        p: &mut Process,
        id: u32,
        m: ModuleId,
        cond: Option<&str>,
    ) -> Result<Vec<PointReport>, LiveError> {
        let (module, bias) = {
            let l = &self.loaded[&m];
            (l.module.clone(), l.bias)
        };
        let r = self.requests[&id].request.clone();
        let mut wanted = Vec::new();
        for f in r.funcs.iter().filter(|f| f.module == m) {
            let func = module.functions().get(f.func);
            for pt in build::points_of(&module, &r, f.func)? {
                let cond = match cond {
                    Some(c) => {
                        let env =
                            |info| SessionEnv::new(&module, Some(func), &self.declared, info, bias);
                        let base = env(PointInfo::default());
                        let info = crate::point::facts(&*module, &pt, id, &|c| base.c_type(c));
                        let program = super::eval::check_condition(c, &env(info))
                            .map_err(|e| LiveError::Message(e.to_string()))?;
                        Some(program)
                    }
                    None => None,
                };
                let what = format!("{} {}", func.display_name(), pt.kind.as_str());
                wanted.push((pt.addr.0.wrapping_add(bias), what, cond));
            }
        }
        let n = wanted.len();
        Self::paused(p, |p| {
            for (at, what, cond) in wanted {
                self.add_breakpoint(p, id, at, what, cond)?;
            }
            Ok(())
        })?;
        if let Some(lr) = self.requests.get_mut(&id) {
            lr.applied.push(m);
            lr.points += n;
        }
        Ok(Vec::new())
    }

    /// Removes request `id` everywhere it was inserted; like [`Live::insert`], the process
    /// may be running and is paused only while code is written.
    /// A measuring request's values stay for `report` and its slots are freed for reuse.
    /// Should it fail, the module it failed in has its code and records as before, the request
    /// stays (in the modules not yet done), and calling it again finishes the removal.
    pub fn remove(&mut self, p: &mut Process, id: u32) -> Result<usize, LiveError> {
        let polite = self.polite_staging && p.state() == State::Running;
        if polite {
            p.polite(true);
        }
        let out = self.remove_now(p, id);
        if polite {
            p.polite(false);
        }
        out
    }

    /// [`Live::remove`], at whatever priority the tracer has.
    fn remove_now(&mut self, p: &mut Process, id: u32) -> Result<usize, LiveError> {
        if self.breakpoints.iter().any(|b| b.id == id) {
            Self::paused(p, |p| {
                self.lift_breakpoints(p)?;
                self.breakpoints.retain(|b| b.id != id);
                self.place_breakpoints(p)
            })?;
        }
        let Some(mut lr) = self.requests.remove(&id) else {
            self.measure.release(&p.reader(), id, true);
            return Ok(0);
        };
        let mut removed = 0;
        // Module by module, all or nothing: should staging or writing fail, that module's
        // code and patcher records are as before, and the request stays with the modules it
        // is still in, for `delete` to be tried again.
        while let Some(&m) = lr.applied.first() {
            let (hidden, traps) = (self.hidden(), self.server());
            let Some(loaded) = self.loaded.get_mut(&m) else {
                lr.applied.remove(0);
                continue;
            };
            loaded.patcher.recheck_snippets(self.recheck_snippets);
            loaded
                .patcher
                .generate_at_each_address(self.generate_at_each_address);
            loaded.patcher.code_per_layout(self.code_per_layout);
            let prior = loaded.patcher.clone();
            let mut space = LiveSpace::new(&mut *p, hidden, traps);
            let result = match build::remove(&mut loaded.patcher, &loaded.module, &mut space, id) {
                Ok(n) => self.commit(space, m, Some(prior)).map(|()| n),
                Err(e) => {
                    // Nothing was written over code: only the records go back.
                    loaded.patcher = prior;
                    Err(e.into())
                }
            };
            match result {
                Ok(n) => {
                    removed += n;
                    lr.points = lr.points.saturating_sub(n);
                    lr.applied.remove(0);
                }
                Err(e) => {
                    self.requests.insert(id, lr);
                    return Err(e);
                }
            }
        }
        // Its code is gone: the values are final and the slots free.
        self.coverage.keep(&p.reader(), Some(id));
        self.measure.release(&p.reader(), id, true);
        Ok(removed)
    }

    /// `coverage --once`: takes out the probes of the blocks that ran since the last call
    /// (their counters stay as they are, at least 1), through the patcher's undo path while
    /// the process is paused only for the writes, as `delete` does: every thread is stopped
    /// while the bytes change, and threads inside them are moved. Returns how many probes
    /// went.
    pub fn retire_hit_probes(&mut self, p: &mut Process) -> Result<usize, LiveError> {
        if !p.state().is_alive() {
            return Ok(0);
        }
        let mut removed = 0;
        for r in self.coverage.hit_once(&p.reader()) {
            let (hidden, traps) = (self.hidden(), self.server());
            let Some(loaded) = self.loaded.get_mut(&r.module) else {
                continue;
            };
            // All or nothing, as in `remove`: a failure leaves the probes in, and counting.
            let prior = loaded.patcher.clone();
            let mut space = LiveSpace::new(&mut *p, hidden, traps);
            let patcher = &mut loaded.patcher;
            removed +=
                match build::remove_points(patcher, &loaded.module, &mut space, r.id, &r.points) {
                    Ok(n) => self.commit(space, r.module, Some(prior)).map(|()| n),
                    Err(e) => {
                        loaded.patcher = prior;
                        Err(e.into())
                    }
                }?;
            self.coverage.retired(&r);
        }
        Ok(removed)
    }

    /// Takes request `id` out because inserting it failed: its code, its breakpoints, its
    /// slots, and the values it kept (it never measured anything).
    pub fn undo(&mut self, p: &mut Process, id: u32) -> Result<usize, LiveError> {
        let removed = self.remove(p, id);
        self.forget(id);
        removed
    }

    /// Points request `id` was inserted at (breakpoints: `int3`s set), over all modules.
    pub fn points(&self, id: u32) -> usize {
        self.requests.get(&id).map_or(0, |r| r.points)
    }

    /// Forgets what request `id` measured: it was removed because inserting it failed.
    pub fn forget(&mut self, id: u32) {
        self.measure.forget(id);
    }

    /// Where request `id` stands in the process: `inserted at 12 points`, plus the libraries
    /// it still waits for.
    pub fn status(&self, id: u32) -> Option<String> {
        let lr = self.requests.get(&id)?;
        if lr.measures() && self.measure.runtime.is_none() {
            return Some("waiting for main (the runtime library loads there)".to_owned());
        }
        if matches!(lr.request.action, Action::Breakpoint { .. }) {
            return Some(format!("set at {} point(s)", lr.points));
        }
        let mut text = format!("inserted at {} point(s)", lr.points);
        let waiting: Vec<&str> = lr
            .modules
            .iter()
            .filter(|(m, _)| !lr.applied.contains(m))
            .map(|(_, module)| module.name.as_str())
            .collect();
        if !waiting.is_empty() {
            text.push_str(&format!("; waiting for {}", waiting.join(", ")));
        }
        Some(text)
    }

    /// A [`Server`] for a job about to work while the process runs: every trap site written,
    /// over all modules (its `int3`'s address and where a thread stopped by it goes on).
    fn server(&self) -> Server {
        let traps = (!self.hold_stops_in_jobs).then(|| {
            self.loaded
                .values()
                .flat_map(|l| l.patcher.traps())
                .map(|(at, to)| (at.0, to.0))
                .collect()
        });
        Server {
            traps,
            last: Instant::now(),
            free: self.free_code.clone(),
        }
    }

    /// Where a thread stopped by an `int3` (`rip` just after it) goes on, when that `int3`
    /// is a trap site's, standing for a jump into its trampoline: a site of the patchers'
    /// records, or, while a change is committed, of the records from before it (its `int3`
    /// stays until its batch is written; the old trampoline is not freed before the change is).
    pub fn trap_site(&self, rip: u64) -> Option<u64> {
        let at = RuntimeAddr(rip.wrapping_sub(1));
        self.loaded
            .values()
            .find(|l| l.patcher.is_trap(at))
            .and_then(|l| l.patcher.relocated(at))
            .map(|a| a.0)
            .or_else(|| self.retiring.get(&at.0).copied())
    }

    /// The original bytes under our breakpoints, for a [`LiveSpace`] to show.
    fn hidden(&self) -> Vec<(u64, u8)> {
        let mut v: Vec<(u64, u8)> = self.breakpoints.iter().filter_map(|b| b.placed).collect();
        v.extend(self.once);
        v
    }

    /// Writes a space's pending code changes with every thread stopped: breakpoints lifted,
    /// changes written, threads moved out of changed bytes, breakpoints put back where their
    /// points' code now is. Written even when the patcher failed half-way, since its records
    /// already count what it staged. Should a write fail, the bytes already written get their
    /// old values back, and `prior`, the patcher's records from before the staging, replaces
    /// them: what the code shows and what the patcher says stay one.
    ///
    /// A running process is stopped in short pauses: the changes are written in batches of at
    /// most [`PAUSE_WRITES`] writes, each batch whole changes only (a site's jump with its pad,
    /// see [`patch::AddressSpace::end_change`]), and the threads run between batches. Each
    /// batch's bytes are read and merged while the process runs. With a breakpoint or the
    /// one-shot stop in place, everything goes in one pause, so no breakpoint is ever missed
    /// half-way.
    fn commit(
        &mut self,
        space: LiveSpace<'_>,
        m: ModuleId,
        prior: Option<Patcher>,
    ) -> Result<(), LiveError> {
        let LiveSpace {
            p, pending, hidden, ..
        } = space;
        let writes = pending.writes();
        if writes.is_empty() {
            return Ok(());
        }
        self.retiring = prior
            .iter()
            .flat_map(|pr| pr.traps())
            .map(|(at, to)| (at.0, to.0))
            .collect();
        let result = self.commit_writes(p, &pending, writes, &hidden, m, prior);
        self.retiring.clear();
        self.retired_by_commit(m, result.is_ok());
        result
    }

    /// After a commit in module `m`: the trampolines it retired wait to be freed when it was
    /// written; when it failed, they are never freed (code put back may enter them).
    fn retired_by_commit(&mut self, m: ModuleId, written: bool) {
        let Some(l) = self.loaded.get_mut(&m) else {
            return;
        };
        let retired = l.patcher.take_retired();
        if written {
            self.leaving.extend(retired.into_iter().map(|r| (m, r)));
        }
    }

    /// Frees the trampolines in [`Live::leaving`] that no stopped thread can be inside: no
    /// thread's `rip`, other register, or word of its stack (from below the red zone to the
    /// end of its mapping: return addresses of calls out of a snippet, signal frames) points
    /// into one. Runs in a pause, every thread stopped; does nothing unless all are.
    fn free_left_trampolines(&mut self, p: &Process) {
        if self.leaving.is_empty() {
            return;
        }
        let Some(tids) = p.all_stopped_tids() else {
            return;
        };
        // Read before the halt: a stack not found in them keeps everything.
        let Some(maps) = self.scan_maps.take() else {
            return;
        };
        let mut ranges: Vec<std::ops::Range<u64>> =
            self.leaving.iter().map(|(_, r)| r.clone()).collect();
        ranges.sort_by_key(|r| r.start);
        let mut held = vec![false; ranges.len()];
        let mut mark = |w: u64| {
            let i = ranges.partition_point(|r| r.start <= w);
            if let Some(i) = i.checked_sub(1) {
                if w < ranges[i].end {
                    held[i] = true;
                }
            }
        };
        for tid in tids {
            let Ok(r) = p.regs(tid) else {
                return;
            };
            for w in [
                r.rip, r.rax, r.rbx, r.rcx, r.rdx, r.rsi, r.rdi, r.rbp, r.rsp, r.r8, r.r9, r.r10,
                r.r11, r.r12, r.r13, r.r14, r.r15,
            ] {
                mark(w);
            }
            let from = r.rsp.saturating_sub(128) & !7;
            let Some(m) = maps.iter().find(|m| m.start <= from && from < m.end) else {
                // A stack gsh cannot read: keep everything.
                return;
            };
            let len = (m.end - from).min(STACK_SCAN) as usize;
            let Ok(stack) = p.read(from, len) else {
                return;
            };
            for w in stack.chunks_exact(8) {
                mark(u64::from_le_bytes(w.try_into().expect("8 bytes")));
            }
        }
        let mut kept = Vec::new();
        for (m, r) in self.leaving.drain(..) {
            let i = ranges.partition_point(|x| x.start < r.start);
            if held.get(i).copied().unwrap_or(true) {
                kept.push((m, r));
            } else {
                self.freeing.push((m, r));
            }
        }
        self.leaving = kept;
    }

    /// Frees what [`Live::free_left_trampolines`] found free, once the process runs again:
    /// forgetting thousands of trampolines' records took milliseconds of a pause.
    fn finish_freeing(&mut self) {
        if self.freeing.is_empty() {
            return;
        }
        let mut freed = Vec::with_capacity(self.freeing.len());
        for (m, r) in std::mem::take(&mut self.freeing) {
            if let Some(l) = self.loaded.get_mut(&m) {
                l.patcher.forget_trampoline(&r);
            }
            freed.push(r);
        }
        let mut code = self.free_code.lock().unwrap_or_else(|e| e.into_inner());
        code.free.extend(freed);
        code.free.sort_by_key(|r| r.start);
        // Trampolines written one after another come free together: one range again.
        let mut merged: Vec<std::ops::Range<u64>> = Vec::with_capacity(code.free.len());
        for r in code.free.drain(..) {
            match merged.last_mut() {
                Some(last) if last.end >= r.start => last.end = last.end.max(r.end),
                _ => merged.push(r),
            }
        }
        code.free = merged;
    }

    /// What trampolines take of the process's memory and of gsh's records (a test and the
    /// soak check that none grows with each insert/delete cycle).
    pub fn trampoline_memory(&self) -> TrampolineMemory {
        let code = self.free_code.lock().unwrap_or_else(|e| e.into_inner());
        TrampolineMemory {
            asked: code.asked,
            free: code.free.iter().map(|r| r.end - r.start).sum(),
            waiting: self.leaving.len(),
            records: self.loaded.values().map(|l| l.patcher.map_records()).sum(),
        }
    }

    /// [`Live::commit`]'s writes, batch by batch.
    fn commit_writes(
        &mut self,
        p: &mut Process,
        pending: &Pending,
        writes: &[Write],
        hidden: &[(u64, u8)],
        m: ModuleId,
        prior: Option<Patcher>,
    ) -> Result<(), LiveError> {
        let running = p.state() == crate::process::State::Running;
        let most = if running && hidden.is_empty() {
            self.pause_writes.unwrap_or(PAUSE_WRITES).max(1)
        } else {
            usize::MAX
        };
        // Batches written so far (their runs, and the writes as threads may have seen them),
        // for a rollback.
        let mut done: Vec<(Vec<Run>, &[Write])> = Vec::new();
        let mut failed = None;
        for batch in pending.batches(most) {
            let batch = &writes[batch];
            // Prepared while the process runs: the changes merged into a few runs of bytes,
            // read as they are now (only gsh changes code, and it does so on this thread).
            let runs = match runs_of(p, batch, hidden) {
                Ok(r) => r,
                Err(e) => {
                    failed = Some(e);
                    break;
                }
            };
            let result = self.pause(p, running, batch.len(), |live, p| {
                live.write_batch(p, batch, &runs, m, prior.as_ref())
            });
            match result {
                Ok(()) => done.push((runs, batch)),
                Err(e) => {
                    failed = Some(e);
                    break;
                }
            }
        }
        let Some(e) = failed else {
            return Ok(());
        };
        // Back to the code as it was, newest batch first, each in a pause of its own with
        // threads moved out of the bytes that change back (off a pad going back to padding).
        let patcher = self.loaded[&m].patcher.clone();
        let module = self.loaded[&m].module.name.clone();
        let mut e = e;
        for (runs, batch) in done.iter().rev() {
            let undone = self.pause(p, running, batch.len(), |_, p| {
                for (j, back) in runs.iter().enumerate().rev() {
                    if let Err(restore) = restore_run(p, back) {
                        return Err(LiveError::Torn {
                            module: module.clone(),
                            cause: Box::new(LiveError::Message(e.to_string())),
                            restore: Box::new(restore),
                            left: runs[..=j].iter().map(|r| r.at).collect(),
                            total: runs.len(),
                        });
                    }
                }
                move_threads(p, &patcher, batch)
            });
            if let Err(again) = undone {
                // Torn: the process stays stopped, and this says why.
                e = again;
                break;
            }
        }
        // Torn code keeps the records of what was staged: neither old nor new is true.
        if let (Some(prior), false) = (prior, matches!(e, LiveError::Torn { .. })) {
            self.loaded.get_mut(&m).expect("a loaded module").patcher = prior;
        }
        Err(e)
    }

    /// Runs `f` with every thread stopped (halting and resuming the process if it was
    /// `running`), and counts the pause and its `writes`.
    fn pause(
        &mut self,
        p: &mut Process,
        running: bool,
        writes: usize,
        f: impl FnOnce(&mut Self, &mut Process) -> Result<(), LiveError>,
    ) -> Result<(), LiveError> {
        let serve = running && !self.hold_stops_in_jobs;
        if serve {
            // Stops since the last pause first, while the process still runs: a thread
            // already stopped when the halt interrupts it would stop again for that interrupt
            // right after the pause.
            let _ = p.serve_in_job(&|rip| self.trap_site(rip));
        }
        self.scan_maps = if self.leaving.is_empty() {
            None
        } else {
            p.mappings().ok()
        };
        let t = Instant::now();
        let mut steps = PauseSteps::default();
        if running {
            // Preempted while every thread waits on it, the tracer would stretch the pause.
            p.hurry(true);
            if let Err(e) = p.halt() {
                p.hurry(false);
                return Err(e.into());
            }
            steps.halt_timing = p.last_halt;
        }
        steps.halt = t.elapsed();
        if serve {
            // Stops the halt caught are served before the code changes (a thread at a trap
            // site moves into its trampoline), so their threads run again with the others
            // when the pause ends instead of waiting, stopped, for the whole job to end. A
            // failure leaves them for the tracer after the job.
            let _ = p.serve_in_job(&|rip| self.trap_site(rip));
        }
        steps.serve = t.elapsed() - steps.halt;
        let result = f(self, p);
        steps.change = t.elapsed() - steps.halt - steps.serve;
        // Code neither old nor new stays stopped: no thread may run into it.
        let torn = matches!(result, Err(LiveError::Torn { .. }));
        let resumed = if running && !torn && p.state().is_alive() {
            p.resume()
        } else {
            Ok(())
        };
        p.hurry(false);
        let took = t.elapsed();
        self.finish_freeing();
        resumed?;
        steps.resume = took - steps.halt - steps.serve - steps.change;
        self.paused_for += took;
        if took > self.longest_pause {
            self.longest_pause = took;
            self.longest_pause_steps = steps;
        }
        self.most_writes_in_a_pause = self.most_writes_in_a_pause.max(writes);
        result
    }

    /// Writes one batch of changes, every thread stopped: breakpoints lifted, runs written
    /// (on a failure, this batch's runs get their old bytes back before any thread runs, so
    /// none needs moving), threads moved out of changed bytes, breakpoints put back.
    fn write_batch(
        &mut self,
        p: &mut Process,
        pending: &[(u64, Vec<u8>)],
        runs: &[Run],
        m: ModuleId,
        prior: Option<&Patcher>,
    ) -> Result<(), LiveError> {
        self.free_left_trampolines(p);
        self.lift_breakpoints(p)?;
        let once = self.once.take();
        if let Some((at, byte)) = once {
            p.write(at, &[byte])?;
        }
        for r in runs {
            let end = r.at + r.new.len() as u64;
            let e = self.ever_written.entry(r.at).or_insert((end, m));
            e.0 = e.0.max(end);
        }
        for (i, r) in runs.iter().enumerate() {
            if let Err(e) = write_run(p, r) {
                let module = self.loaded[&m].module.name.clone();
                // The failing run too: a write can fail part-way.
                for (j, back) in runs[..=i].iter().enumerate().rev() {
                    if let Err(restore) = restore_run(p, back) {
                        return Err(LiveError::Torn {
                            module,
                            cause: Box::new(e),
                            restore: Box::new(restore),
                            left: runs[..=j].iter().map(|r| r.at).collect(),
                            total: runs.len(),
                        });
                    }
                }
                // The patcher's records as they were, so breakpoints go where the old code
                // has their points.
                if let Some(prior) = prior {
                    self.loaded.get_mut(&m).expect("a loaded module").patcher = prior.clone();
                }
                let again = match once {
                    Some((at, _)) => self.stop_once_at(p, at),
                    None => Ok(()),
                }
                .and_then(|()| self.place_breakpoints(p));
                if let Err(restore) = again {
                    return Err(LiveError::BreakpointsLost {
                        module,
                        cause: Box::new(e),
                        restore: Box::new(restore),
                    });
                }
                return Err(e);
            }
        }
        // Each change's bytes as the stopped threads saw them.
        let before: Vec<(u64, Vec<u8>)> = pending
            .iter()
            .filter_map(|(at, bytes)| {
                let i = runs.partition_point(|r| r.at <= *at).checked_sub(1)?;
                let r = runs.get(i).filter(|r| r.contains(*at))?;
                let from = (at - r.at) as usize;
                Some((*at, r.old[from..from + bytes.len()].to_vec()))
            })
            .collect();
        move_threads(p, &self.loaded[&m].patcher, &before)?;
        if let Some((at, _)) = once {
            // The stop follows its instruction into a trampoline when a site covered it.
            self.stop_once_at(p, at)?;
        }
        self.place_breakpoints(p)
    }

    /// Removes everything: instrumentation, breakpoints, the one-shot stop. Afterwards the
    /// text is the file's again. The process must be stopped.
    pub fn remove_all(&mut self, p: &mut Process) -> Result<(), LiveError> {
        let ids: Vec<u32> = self.requests.keys().copied().collect();
        let mut first_err = None;
        for id in ids {
            if let Err(e) = self.remove(p, id) {
                first_err.get_or_insert(e);
            }
        }
        self.lift_breakpoints(p)?;
        self.breakpoints.clear();
        if let Some((at, byte)) = self.once.take() {
            p.write(at, &[byte])?;
        }
        first_err.map_or(Ok(()), Err)
    }

    /// Ends the session on `p` leaving its code as the files have it: every request and
    /// breakpoint taken out, whatever else of gsh's differs from the files (an earlier, killed
    /// session's jumps) put back, the `r_brk` hook removed, then the process detached. When
    /// no change of gsh's is left, gsh's runtime is unloaded and its memory pools unmapped
    /// where no thread is in them (`unload.rs`, [`Process::let_go_of_pools`]); what stays is
    /// said in [`Live::messages`]. Returns what still differs from the files.
    pub fn let_go(&mut self, p: &mut Process) -> Result<Vec<TextChange>, LiveError> {
        // A running process keeps running while the requests come out, in short pauses
        // ([`Live::commit`]); what could not come out is tried again with it stopped.
        let ids: Vec<u32> = self.requests.keys().copied().collect();
        for id in ids {
            let _ = self.remove(p, id);
        }
        Live::paused(p, |p| self.remove_all(p))?;
        // The text is compared with the files while the process runs (only gsh changes code,
        // and on this thread): reading every module's text took most of a 25 ms pause. The
        // process stops only to have what differs put back and the hook taken out.
        let leftovers: Vec<TextChange> = p
            .text_changes()?
            .into_iter()
            .filter(|c| c.kind.is_gsh())
            .collect();
        Live::paused(p, |p| {
            p.restore_text(&leftovers)?;
            p.remove_rendezvous()?;
            Ok(())
        })?;
        let left = p.text_changes()?;
        let pools = p.pool_ranges();
        if !left.iter().any(|c| c.kind.is_gsh()) {
            // No code jumps to gsh's any more: the runtime and the pools go where no thread is
            // in them, the pool holding the injection stub last. A running thread still in a
            // trampoline leaves it within microseconds, so a running process is let run a
            // moment, a few times, until none is.
            let running = p.state() == crate::process::State::Running;
            let chains = super::unload::Chains::new(self, p)?;
            let mut tries = 0;
            let notes = loop {
                tries += 1;
                let wait = running && tries < LET_GO_TRIES;
                let done = Live::paused(p, |p| {
                    // A signal the halt caught (a forking program's SIGCHLD) is kept for the
                    // resume, so its thread can run the injected calls.
                    let _ = p.serve_in_job(&|rip| self.trap_site(rip));
                    if wait
                        && (!p.can_inject()
                            || super::unload::gsh_code_in_use(p, &mut |p, r| chains.of(p, r))?)
                    {
                        return Ok(None);
                    }
                    Live::let_go_of_memory(p, &chains).map(Some)
                })?;
                match done {
                    Some(notes) => break notes,
                    None => std::thread::sleep(Duration::from_millis(2)),
                }
            };
            self.messages.extend(notes);
        }
        // Children held by the pauses above get the files' code before the process is let go.
        p.release_held_children(Some(self))?;
        let keeping = p.children_keeping_gsh_memory(&pools);
        if !keeping.is_empty() {
            let pids: Vec<String> = keeping.iter().map(i32::to_string).collect();
            self.messages.push(format!(
                "note: {} process(es) forked from process {} while gsh was attached ({}) still \
                 map a copy of gsh's runtime or memory pools: their code is the files', so \
                 nothing runs there, but gsh traces none of them and cannot unmap it",
                keeping.len(),
                p.pid(),
                pids.join(", ")
            ));
        }
        p.detach()?;
        Ok(left)
    }

    /// Unloads the runtime and unmaps the pools where no thread is in them, by the threads'
    /// call chains ([`super::unload::Chains`]); notes what stays.
    fn let_go_of_memory(
        p: &mut Process,
        chains: &super::unload::Chains<'_>,
    ) -> Result<Vec<String>, LiveError> {
        let mut notes = super::unload::unload_runtimes(p, &mut |p, r| chains.of(p, r))?;
        let pools = p.let_go_of_pools(&mut |p, r| chains.of(p, r))?;
        if pools.released > 0 {
            let (n, it) = match pools.released {
                1 => ("s", "it"),
                _ => ("", "them"),
            };
            let why = match &pools.failed {
                Some(e) => format!("gsh could not unmap {it} ({e})"),
                None => format!("a thread is still in {it} (or returns into {it})"),
            };
            notes.push(format!(
                "note: {} of gsh's memory pools ({} KiB) stay{n} mapped in process {}: {why}; \
                 a later gsh session reuses {it}",
                pools.released,
                pools.released_bytes >> 10,
                p.pid(),
            ));
        }
        Ok(notes)
    }

    /// Sets a breakpoint at a point (runtime address of the original instruction).
    pub fn add_breakpoint(
        &mut self,
        p: &mut Process,
        id: u32,
        point: u64,
        what: String,
        cond: Option<Program>,
    ) -> Result<(), LiveError> {
        self.lift_breakpoints(p)?;
        self.breakpoints.push(Breakpoint {
            id,
            point,
            what,
            cond,
            placed: None,
            hits: 0,
        });
        self.place_breakpoints(p)
    }

    /// The breakpoints whose int3 is at `addr` (a thread's `rip` after a reported stop).
    pub fn breakpoints_at(&self, addr: u64) -> Vec<&Breakpoint> {
        self.breakpoints
            .iter()
            .filter(|b| self.current(b.point) == addr)
            .collect()
    }

    /// The breakpoints at `addr` that thread `tid` stopped for: those whose condition held
    /// (a false one sharing the place with a true one did not stop it).
    pub fn breakpoints_hit(&self, tid: i32, addr: u64) -> Vec<&Breakpoint> {
        let held = self.hit.get(&tid);
        self.breakpoints_at(addr)
            .into_iter()
            .filter(|b| held.is_none_or(|h| h.contains(&b.id)))
            .collect()
    }

    /// Removes breakpoint `id`; false when there is none.
    pub fn remove_breakpoint(&mut self, p: &mut Process, id: u32) -> Result<bool, LiveError> {
        let Some(i) = self.breakpoints.iter().position(|b| b.id == id) else {
            return Ok(false);
        };
        self.lift_breakpoints(p)?;
        self.breakpoints.remove(i);
        self.place_breakpoints(p)?;
        Ok(true)
    }

    /// Where the code for the original instruction at `addr` runs now: its trampoline copy
    /// when a site displaced it, else itself.
    fn current(&self, addr: u64) -> u64 {
        self.loaded
            .values()
            .find_map(|l| l.patcher.relocated(RuntimeAddr(addr)))
            .map_or(addr, |a| a.0)
    }

    fn lift_breakpoints(&mut self, p: &mut Process) -> Result<(), LiveError> {
        for b in &mut self.breakpoints {
            if let Some((at, byte)) = b.placed.take() {
                p.write(at, &[byte])?;
            }
        }
        Ok(())
    }

    fn place_breakpoints(&mut self, p: &mut Process) -> Result<(), LiveError> {
        for i in 0..self.breakpoints.len() {
            let at = self.current(self.breakpoints[i].point);
            // Two breakpoints at one place share the int3.
            if self.breakpoints[..i]
                .iter()
                .any(|b| b.placed.is_some_and(|(a, _)| a == at))
            {
                continue;
            }
            let byte = p.read(at, 1)?[0];
            let conditional = self.breakpoints[i..]
                .iter()
                .any(|b| b.cond.is_some() && self.current(b.point) == at);
            if conditional {
                // Without a copy, false hits are stepped over (slower, and racy with threads).
                if let Err(e) = self.out_of_line_copy(p, at) {
                    self.messages.push(format!(
                        "breakpoint {}: conditions are checked by stepping: {e}",
                        self.breakpoints[i].id
                    ));
                }
            }
            p.write(at, &[0xcc])?;
            self.ever_int3.entry(at).or_insert(byte);
            self.breakpoints[i].placed = Some((at, byte));
        }
        Ok(())
    }

    /// Arranges for the process to stop once at the code for `addr` (`start` stops at
    /// `main` this way, after the instrumentation requested before it is in place).
    pub fn stop_once_at(&mut self, p: &mut Process, addr: u64) -> Result<(), LiveError> {
        let at = self.current(addr);
        if self
            .breakpoints
            .iter()
            .any(|b| b.placed.is_some_and(|(a, _)| a == at))
        {
            return Ok(());
        }
        let byte = p.read(at, 1)?[0];
        p.write(at, &[0xcc])?;
        self.ever_int3.entry(at).or_insert(byte);
        self.once = Some((at, byte));
        Ok(())
    }

    /// Steps thread `tid`, stopped after our int3 at `at`, over the original instruction
    /// there and puts the int3 back.
    fn step_over(&mut self, p: &mut Process, tid: i32, at: u64, byte: u8) -> Result<(), LiveError> {
        p.write(at, &[byte])?;
        let mut regs = p.regs(tid)?;
        regs.rip = at;
        p.set_regs(tid, &regs)?;
        p.step(tid)?;
        p.write(at, &[0xcc])?;
        Ok(())
    }

    /// Makes an out-of-line copy of the instruction at `at` (not yet under an int3), followed
    /// by a jump back after it, unless the one made before still matches the code. The old
    /// copies stay mapped: a thread may still be in one.
    fn out_of_line_copy(&mut self, p: &mut Process, at: u64) -> Result<u64, LiveError> {
        use iced_x86::{Decoder, DecoderOptions};
        // An instruction is at most 15 bytes; near the end of a mapping fewer can be read.
        let bytes = (1..=15)
            .rev()
            .find_map(|n| p.read(at, n).ok())
            .ok_or_else(|| LiveError::Message(format!("cannot read the code at {at:#x}")))?;
        let insn = Decoder::with_ip(64, &bytes, at, DecoderOptions::NONE).decode();
        if insn.is_invalid() {
            return Err(LiveError::Message(format!("no instruction at {at:#x}")));
        }
        let bytes = bytes[..insn.len()].to_vec();
        if let Some((old, copy)) = self.out_of_line.get(&at) {
            if *old == bytes {
                return Ok(*copy);
            }
        }
        let bad = |e: patch::reloc::RelocError| LiveError::Message(e.to_string());
        // A relocated instruction grows by a few bytes at most (a call becomes a push of its
        // return address and a jump), plus the jump back.
        let copy = p.allocate(at, 64, AllocKind::Code)?;
        let mut code = patch::reloc::relocate(&insn, copy, &|_| None).map_err(bad)?;
        if patch::reloc::falls_through(&insn) {
            let back = patch::reloc::jmp_rel32(copy + code.len() as u64, insn.next_ip());
            code.extend(back.map_err(bad)?);
        }
        if code.len() > 64 {
            return Err(LiveError::Message(format!(
                "the copy of the instruction at {at:#x} is too long"
            )));
        }
        p.write(copy, &code)?;
        self.out_of_line.insert(at, (bytes, copy));
        Ok(copy)
    }

    /// Makes thread `tid`, stopped at a reported breakpoint, ready to go on: the next resume
    /// executes the original instruction and keeps the breakpoint.
    pub fn step_past_breakpoint(&mut self, p: &mut Process, tid: i32) -> Result<(), LiveError> {
        let rip = p.regs(tid)?.rip;
        let hit = self
            .breakpoints
            .iter()
            .find_map(|b| b.placed.filter(|(a, _)| *a == rip));
        if let Some((at, byte)) = hit {
            self.step_over(p, tid, at, byte)?;
        }
        Ok(())
    }

    /// Applies waiting requests to a module that just appeared.
    fn module_appeared(&mut self, p: &mut Process, m: &MappedModule) {
        let path = canon(&m.path);
        let Some(module) = self
            .known
            .iter()
            .find(|(k, _)| *k == path)
            .map(|(_, m)| m.clone())
        else {
            return;
        };
        let id = module.id;
        self.loaded.entry(id).or_insert_with(|| Loaded {
            module,
            bias: m.bias,
            patcher: Patcher::new(m.bias, live_options()),
        });
        let waiting: Vec<u32> = self
            .requests
            .iter()
            .filter(|(_, r)| r.modules.contains_key(&id) && !r.applied.contains(&id))
            // Counts wait for the runtime, not only for their library.
            .filter(|(_, r)| !r.measures() || self.measure.runtime.is_some())
            .map(|(k, _)| *k)
            .collect();
        for rid in waiting {
            let before = self.points(rid);
            let what = match self.requests[&rid].request.action {
                Action::Breakpoint { .. } => "breakpoint",
                _ => "instrumentation",
            };
            match self.apply(p, rid, id) {
                Ok(_) => self.messages.push(format!(
                    "{what} {rid}: {} point(s) {} in {}",
                    self.points(rid) - before,
                    if what == "breakpoint" {
                        "set"
                    } else {
                        "inserted"
                    },
                    m.path.display()
                )),
                Err(e) => self.messages.push(format!(
                    "instrumentation {rid} could not be inserted in {}: {e}",
                    m.path.display()
                )),
            }
        }
    }
}

fn live_options() -> PatchOptions {
    PatchOptions {
        // The tracer moves a thread that hits a trap site into its trampoline.
        allow_traps: true,
        ..PatchOptions::default()
    }
}

/// The most writes over code (jumps, pads, original bytes put back) one pause of a running
/// process makes: a large request is written in batches of whole changes, the threads running
/// between them, so that no pause grows with the request. Writing is the cheap part of a
/// pause: on redis, 256 writes merged into runs took 0.05 ms of a pause whose halt took
/// 1 ms on a quiet machine and 14 ms under client and machine load (`xtask bench-stall
/// count`), so batches are large and pauses few: every halt is a chance for a thread to
/// wait for a CPU while the others are stopped.
pub const PAUSE_WRITES: usize = 4096;

/// How much of a thread's stack (from its `rsp`) is searched for pointers into trampolines
/// that wait to be freed; a deeper stack keeps them all.
const STACK_SCAN: u64 = 8 << 20;

/// Takes `size` bytes (16-aligned) within ±2 GiB of `near` from the free ranges `free`.
fn take_free(free: &mut Vec<std::ops::Range<u64>>, near: u64, size: u64) -> Option<u64> {
    let within = |a: u64| patch::within_rel32(near, a);
    let i = free.iter().position(|r| {
        let at = r.start.next_multiple_of(16);
        at + size <= r.end && within(at) && within(at + size)
    })?;
    let r = &mut free[i];
    let at = r.start.next_multiple_of(16);
    r.start = at + size;
    if r.start >= r.end {
        free.remove(i);
    }
    Some(at)
}

/// A staged write over code: where, and the bytes.
type Write = (u64, Vec<u8>);

/// Changes closer than this are written as one run, with the bytes between them rewritten
/// as they are: one write instead of thousands while the process is stopped.
const RUN_GAP: u64 = 4096;
/// Runs are cut at this size.
const RUN_MAX: u64 = 1 << 20;

/// A run of bytes to write while the process is stopped: as they are now (with the original
/// byte under each of our breakpoints) and as they will be.
struct Run {
    at: u64,
    old: Vec<u8>,
    new: Vec<u8>,
}

impl Run {
    fn contains(&self, a: u64) -> bool {
        a >= self.at && a < self.at + self.old.len() as u64
    }
}

/// Merges pending writes into runs (see [`RUN_GAP`]), read now; later writes win where
/// writes overlap, as if written in order.
fn runs_of(
    p: &Process,
    pending: &[(u64, Vec<u8>)],
    hidden: &[(u64, u8)],
) -> Result<Vec<Run>, LiveError> {
    let mut spans: Vec<(u64, u64)> = pending
        .iter()
        .map(|(a, b)| (*a, a + b.len() as u64))
        .collect();
    spans.sort_unstable();
    let mut merged: Vec<(u64, u64)> = Vec::new();
    for (lo, hi) in spans {
        match merged.last_mut() {
            Some((start, end)) if lo < *end || (lo <= *end + RUN_GAP && hi - *start <= RUN_MAX) => {
                *end = (*end).max(hi)
            }
            _ => merged.push((lo, hi)),
        }
    }
    let mut runs = Vec::with_capacity(merged.len());
    for (lo, hi) in merged {
        let mut old = p.read(lo, (hi - lo) as usize)?;
        for (at, orig) in hidden {
            overlay(&mut old, lo, *at, &[*orig]);
        }
        let new = old.clone();
        runs.push(Run { at: lo, old, new });
    }
    for (at, bytes) in pending {
        // Runs are sorted and disjoint: the one starting at or before `at` holds it.
        let i = runs.partition_point(|r| r.at <= *at).saturating_sub(1);
        if let Some(r) = runs.get_mut(i) {
            let from = (at - r.at) as usize;
            r.new[from..from + bytes.len()].copy_from_slice(bytes);
        }
    }
    Ok(runs)
}

/// Writes a run's new bytes.
fn write_run(p: &mut Process, r: &Run) -> Result<(), LiveError> {
    #[cfg(test)]
    if rollback_tests::fault_hit() {
        return Err(LiveError::Message("injected fault".into()));
    }
    Ok(p.write(r.at, &r.new)?)
}

/// Puts a run's old bytes back, after writing it failed.
fn restore_run(p: &mut Process, r: &Run) -> Result<(), LiveError> {
    #[cfg(test)]
    if rollback_tests::restore_fault_hit() {
        return Err(LiveError::Message("injected fault while restoring".into()));
    }
    Ok(p.write(r.at, &r.old)?)
}

/// Moves stopped threads out of bytes that just changed (see the module documentation).
fn move_threads(
    p: &mut Process,
    patcher: &Patcher,
    before: &[(u64, Vec<u8>)],
) -> Result<(), LiveError> {
    if before.is_empty() {
        return Ok(());
    }
    for tid in p.stopped_tids() {
        let Ok(mut regs) = p.regs(tid) else {
            continue;
        };
        let rip = regs.rip;
        let Some((at, old)) = before
            .iter()
            .rev()
            .find(|(at, b)| rip >= *at && rip < at + b.len() as u64)
        else {
            continue;
        };
        let to = if rip > *at {
            // Inside code that was covered: its copy. Inside one of our jumps that went away:
            // along the jump.
            patcher
                .relocated(RuntimeAddr(rip))
                .map(|a| a.0)
                .or_else(|| jump_target(&old[(rip - at) as usize..], rip))
        } else {
            // At the start of a change: the new bytes begin an instruction there, unless a
            // pad that held our jump went back to padding.
            let now = p.read(rip, 1)?;
            if now.first() == Some(&0xcc) {
                jump_target(old, rip)
            } else {
                None
            }
        };
        if let Some(to) = to {
            regs.rip = to;
            p.set_regs(tid, &regs)?;
        }
    }
    Ok(())
}

/// The target of the `jmp rel32`/`jmp rel8` at the start of `bytes`, which sit at `at`.
fn jump_target(bytes: &[u8], at: u64) -> Option<u64> {
    match bytes {
        [0xe9, a, b, c, d, ..] => {
            let rel = i32::from_le_bytes([*a, *b, *c, *d]);
            Some((at as i64 + 5 + i64::from(rel)) as u64)
        }
        [0xeb, d, ..] => Some((at as i64 + 2 + i64::from(*d as i8)) as u64),
        _ => None,
    }
}

impl Hooks for Live {
    fn modules_changed(&mut self, p: &mut Process, added: &[MappedModule]) {
        for m in added {
            self.module_appeared(p, m);
        }
    }

    fn trap(&mut self, p: &mut Process, tid: i32, rip: u64) -> TrapAction {
        let at = rip.wrapping_sub(1);
        if let Some((once, byte)) = self.once {
            if once == at {
                self.once = None;
                if p.write(at, &[byte]).is_ok() {
                    if let Ok(mut regs) = p.regs(tid) {
                        regs.rip = at;
                        let _ = p.set_regs(tid, &regs);
                    }
                }
                return TrapAction::Report;
            }
        }
        let here: Vec<usize> = (0..self.breakpoints.len())
            .filter(|&i| self.current(self.breakpoints[i].point) == at)
            .collect();
        if let Some(placed) = here.iter().find_map(|&i| self.breakpoints[i].placed) {
            if let Ok(mut regs) = p.regs(tid) {
                regs.rip = at;
                let _ = p.set_regs(tid, &regs);
            }
            let mut held = Vec::new();
            for &i in &here {
                // A condition that cannot be evaluated stops, so the user sees why.
                let holds = match &self.breakpoints[i].cond {
                    Some(c) => super::eval::condition_holds(p, tid, c).unwrap_or(true),
                    None => true,
                };
                if holds {
                    self.breakpoints[i].hits += 1;
                    held.push(self.breakpoints[i].id);
                }
            }
            if !held.is_empty() {
                self.hit.insert(tid, held);
                return TrapAction::Report;
            }
            // Not this time: run the original instruction out of line and go on. Lifting the
            // int3 to step over it instead would let the other threads, which run meanwhile,
            // pass it unseen.
            if let Some(&(_, copy)) = self.out_of_line.get(&placed.0) {
                return TrapAction::Resume(copy);
            }
            return match self.step_over(p, tid, placed.0, placed.1) {
                Ok(()) => match p.regs(tid) {
                    Ok(r) => TrapAction::Resume(r.rip),
                    Err(_) => TrapAction::Report,
                },
                Err(_) => TrapAction::Report,
            };
        }
        // A trap site: the int3 stands for a jump into the trampoline.
        if let Some(to) = self.trap_site(rip) {
            return TrapAction::Resume(to);
        }
        TrapAction::Report
    }

    /// Breakpoints, the one-shot stop and trap sites are `int3`s only the tracer can serve;
    /// declared variables, coverage, and counters whose runtime has no arena gsh holds
    /// ([`super::arena`]) need it to see the exit and keep their final values, unless the user
    /// chose to lose them ([`Live::hands_off_while_measuring`]).
    fn needs_tracer(&self) -> bool {
        let keeps_values = (self.measure.slots_in_use() > 0 && !self.measure.survives_exit())
            || self.data.is_some()
            || !self.coverage.is_empty();
        (keeps_values && !self.hands_off_while_measuring)
            || self.once.is_some()
            || self.breakpoints.iter().any(|b| b.placed.is_some())
            || self.loaded.values().any(|l| l.patcher.has_traps())
    }

    fn exiting(&mut self, p: &mut Process, _tid: i32) {
        self.measure.snapshot(p);
        self.coverage.keep(&p.reader(), None);
        let (Some(base), Some(last)) = (self.data, self.declared.last()) else {
            return;
        };
        let len = (last.addr + last.ty.size().max(1) - base) as usize;
        if let Ok(bytes) = p.read(base, len) {
            self.last_data = Some((base, bytes));
        }
    }

    fn ended(&mut self, p: &mut Process) {
        // Read from the arena only when no values were kept at an exit or detach gsh saw.
        let from_arena = self.measure.last.is_none() && self.measure.measured_anything();
        self.measure.keep_after_exit(p.pid());
        if from_arena {
            self.values_lost_with = self
                .measure
                .runtime
                .as_ref()
                .and_then(|rt| rt.arena.as_ref())
                .and_then(super::arena::Arena::lost)
                .filter(|&n| n > 0);
        }
    }

    fn forked(&mut self, _p: &mut Process, child: &mut ChildMemory) {
        // The child runs uninstrumented: every byte we changed goes back to the file's. A
        // held child may predate the changes taken out since: every byte changed this session.
        for (&at, &byte) in &self.ever_int3 {
            if child.read(at, 1).is_ok_and(|b| b[0] == 0xcc) {
                let _ = child.write(at, &[byte]);
            }
        }
        for (&start, &(end, m)) in &self.ever_written {
            let Some(l) = self.loaded.get(&m) else {
                continue;
            };
            let link = crate::addr::LinkAddr(start.wrapping_sub(l.bias));
            if let Some(bytes) = l.module.binary.bytes_at(link, end - start) {
                let _ = child.write(start, bytes);
            }
        }
        for l in self.loaded.values() {
            for r in l.patcher.written() {
                let link = crate::addr::LinkAddr(r.start.wrapping_sub(l.bias));
                if let Some(bytes) = l.module.binary.bytes_at(link, r.end - r.start) {
                    let _ = child.write(r.start, bytes);
                }
            }
        }
        for b in &self.breakpoints {
            if let Some((at, byte)) = b.placed {
                let _ = child.write(at, &[byte]);
            }
        }
        if let Some((at, byte)) = self.once {
            let _ = child.write(at, &[byte]);
        }
    }
}

#[cfg(test)]
#[path = "rollback_tests.rs"]
mod rollback_tests;
