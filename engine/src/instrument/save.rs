//! `save`: the plan written into a new ELF file. Declared variables go in the rewriter's new
//! data segment, trampolines in its new code segment, and the jumps into them over the original
//! code; the patcher sees all of it through an [`AddressSpace`] over the rewrite.
//!
//! Points that only a trap can reach get an `int3`, and the output gets gsh's own SIGTRAP
//! handler ([`crate::patch::trap`]) with a table from each trap site to its trampoline. The
//! handler is installed before any instrumented code runs: an executable's `e_entry` leads to
//! an install stub that then jumps to the original entry; a shared library's `DT_INIT` leads
//! to it, and it then calls the original `DT_INIT`. A library with no `DT_INIT` and no spare
//! dynamic entry cannot host the handler, and `save` refuses its traps. Nothing of this is
//! written when no point needs a trap.
//!
//! # Measuring in a saved file
//!
//! `count` requests (and the other measuring requests of [`super::measure`]) need gsh's
//! runtime library in the running program. The output names it, by absolute path, in a new
//! `DT_NEEDED` entry ([`Rewrite::add_needed`]), so `ld.so` loads it and runs its constructor
//! before the program's. The constructor finds the *measuring descriptor* this module writes in
//! the new data segment through a `PT_GSH_MEASURE` program header, and fills in the runtime's
//! TLS offset and functions there; the generated code reads them RIP-relatively from the
//! descriptor and does nothing while its TLS offset is 0 (the runtime is missing). The
//! descriptor also holds the results file the runtime writes at exit and a JSON text saying
//! what each slot measures (`rt/LAYOUT.md`, "Measuring descriptor"). A file with no spare
//! dynamic entry still measures when run with `LD_PRELOAD=<runtime>`; [`Measuring::needed`]
//! says which. A static executable loads no library, so `save` refuses to measure in one.

#![warn(missing_docs)]

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};

use crate::addr::{LinkAddr, RuntimeAddr};
use crate::elf::BinaryKind;
use crate::patch::trap;
use crate::patch::{
    self, AddressSpace, AllocKind, PatchOptions, Patcher, PointReport, SpaceError, Tactic,
};
use crate::point::Point;
use crate::rewrite::{self, InitHook, Rewrite};
use crate::session::{Module, Session};
use crate::snippet::env::PointInfo;
use crate::symbols::{FuncId, Function};

use gsh_rt_abi::descriptor::{self, PT_GSH_MEASURE};

use super::action::{Action, Metric};
use super::build::{self, BuildError, Built, Placement};
use super::env::{Declaration, SessionEnv};
use super::measure::{self, Counted, MeasureError, Probe};
use super::pending::Pending;
use super::request::{Plan, Request};
pub use super::results::SavedSlot;

/// Why `save` failed. Nothing is written when it fails.
#[derive(Debug, thiserror::Error)]
pub enum SaveError {
    /// Nothing open, or the file's tables.
    #[error(transparent)]
    Engine(#[from] crate::Error),
    /// Writing the new file.
    #[error(transparent)]
    Rewrite(#[from] rewrite::Error),
    /// Placing a point.
    #[error(transparent)]
    Patch(#[from] patch::PatchError),
    /// Instrumentation in another module than the file being saved.
    #[error("instrumentation {id} is in {module}; `save` rewrites only {file} (use a live process for libraries)")]
    OtherModule {
        /// The request.
        id: u32,
        /// The module its function is in.
        module: String,
        /// The file being saved.
        file: String,
    },
    /// A request that cannot become patch requests (a point not placed yet, a measure).
    #[error(transparent)]
    Build(#[from] BuildError),
    /// Measuring needs the runtime library, and this file cannot load one.
    #[error("instrumentation {id} cannot measure in {file}: {why}")]
    CannotMeasure {
        /// The measuring request.
        id: u32,
        /// The file being saved.
        file: String,
        /// Why it cannot load the runtime.
        why: String,
    },
    /// Finding the runtime library.
    #[error(transparent)]
    Measure(#[from] MeasureError),
    /// `coverage --once` takes probes out from gsh, which a saved file runs without.
    #[error("instrumentation {id} is `coverage --once`, which works in a live process only: a saved file has no gsh to take its probes out (use `coverage` without --once)")]
    OnceLiveOnly {
        /// The request.
        id: u32,
    },
}

/// How `save` writes a file; [`SaveOptions::default`] is what `save OUT` does.
#[derive(Clone, Debug, Default)]
pub struct SaveOptions {
    /// Where a saved file that measures writes its results when it exits. Default: the output
    /// path with `.gsh.json` appended. Made absolute (against the current directory), so the
    /// program writes the same file wherever it is run from.
    pub results: Option<PathBuf>,
}

/// The measuring part of a saved file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Measuring {
    /// The runtime library, as named in the file.
    pub runtime: PathBuf,
    /// True when the file loads the runtime itself (`DT_NEEDED`); false when its dynamic table
    /// had no room, and it measures only when run with `LD_PRELOAD=<runtime>`.
    pub needed: bool,
    /// The results file, absolute.
    pub results: PathBuf,
    /// The descriptor's link address.
    pub descriptor: LinkAddr,
    /// What each slot measures.
    pub slots: Vec<SavedSlot>,
    /// Block-coverage counters (`coverage` requests), in the descriptor.
    pub coverage: u32,
}

/// What `save` did.
#[derive(Debug)]
pub struct SaveReport {
    /// Every point inserted, with its tactic.
    pub points: Vec<PointReport>,
    /// Points left alone, and why: their instruction overlaps another instruction of the
    /// function's CFG (a block decoded from inside an instruction, typically from a jump
    /// table read past its end), so writing there could corrupt real code.
    pub skipped: Vec<(Point, String)>,
    /// How many points each tactic placed.
    pub tactics: BTreeMap<Tactic, usize>,
    /// With traps: the signal functions whose PLT stubs now lead through gsh's wrappers
    /// ([`crate::patch::interpose`]), and those left alone with why.
    pub interposed: Vec<(String, Option<String>)>,
    /// The new file's sizes and segments.
    pub file: rewrite::Summary,
    /// Present when the file measures (`count` and the like).
    pub measuring: Option<Measuring>,
}

/// The rewrite as the patcher's address space: link addresses are where code runs (bias 0).
struct RewriteSpace<'a> {
    rw: Rewrite<'a>,
    /// Writes over original code, replayed on reads so the patcher sees its own patches.
    patched: Pending,
}

impl AddressSpace for RewriteSpace<'_> {
    fn read(&self, addr: RuntimeAddr, len: usize) -> Result<Vec<u8>, SpaceError> {
        let mut bytes = self
            .rw
            .binary()
            .bytes_at(LinkAddr(addr.0), len as u64)
            .filter(|b| b.len() == len)
            .ok_or_else(|| SpaceError::Access {
                addr,
                len,
                detail: "not in the file's loaded bytes".into(),
            })?
            .to_vec();
        self.patched.overlay(addr.0, &mut bytes);
        Ok(bytes)
    }

    fn allocate(
        &mut self,
        near: RuntimeAddr,
        size: u64,
        kind: AllocKind,
    ) -> Result<RuntimeAddr, SpaceError> {
        let got = match kind {
            AllocKind::Code => self.rw.alloc_code(size, 16),
            AllocKind::Data => self.rw.alloc_data(size, 64),
        };
        got.map(|a| RuntimeAddr(a.0))
            .map_err(|_| SpaceError::NoRoom { near, size })
    }

    fn write(&mut self, addr: RuntimeAddr, bytes: &[u8]) -> Result<(), SpaceError> {
        self.rw
            .write(LinkAddr(addr.0), bytes)
            .map_err(|e| SpaceError::Access {
                addr,
                len: bytes.len(),
                detail: e.to_string(),
            })?;
        if self.rw.binary().bytes_at(LinkAddr(addr.0), 1).is_some() {
            self.patched.push(addr.0, bytes);
        }
        Ok(())
    }
}

/// The results file for `out`: as given, or `OUT.gsh.json`, made absolute.
fn results_path(out: &Path, given: Option<&Path>) -> Result<PathBuf, SaveError> {
    let path = match given {
        Some(p) => p.to_owned(),
        None => {
            let mut p = out.as_os_str().to_owned();
            p.push(".gsh.json");
            PathBuf::from(p)
        }
    };
    std::path::absolute(&path).map_err(|e| {
        SaveError::Rewrite(rewrite::Error::Io {
            path: path.clone(),
            source: e,
        })
    })
}

/// Writes the main module of `session` with everything in `plan` to `out`.
pub fn save(session: &Session, plan: &Plan, out: &Path) -> Result<SaveReport, SaveError> {
    save_with(session, plan, out, &SaveOptions::default())
}

/// [`save`] with options.
pub fn save_with(
    session: &Session,
    plan: &Plan,
    out: &Path,
    options: &SaveOptions,
) -> Result<SaveReport, SaveError> {
    let module = session.main()?;
    let measured: Vec<&Request> = plan
        .requests
        .iter()
        .filter(|r| r.action.reports())
        .collect();
    if let Some(r) = measured.first() {
        let binary = &module.binary;
        let static_exe = binary.kind() != BinaryKind::SharedLibrary && binary.interp().is_none();
        if static_exe {
            return Err(SaveError::CannotMeasure {
                id: r.id,
                file: module.name.clone(),
                why: "it is statically linked, so no dynamic loader runs to load gsh's runtime library"
                    .into(),
            });
        }
    }
    if let Some(r) = plan
        .requests
        .iter()
        .find(|r| r.action == Action::Coverage { once: true })
    {
        return Err(SaveError::OnceLiveOnly { id: r.id });
    }
    // Breakpoints belong to a live process; a saved file has none.
    let saved = plan
        .requests
        .iter()
        .filter(|r| !matches!(r.action, Action::Breakpoint { .. }));
    for r in saved {
        if let Some(f) = r.funcs.iter().find(|f| f.module != module.id) {
            return Err(SaveError::OtherModule {
                id: r.id,
                module: session.module(f.module).name.clone(),
                file: module.name.clone(),
            });
        }
    }
    let layout = rewrite::Options {
        extra_headers: usize::from(!measured.is_empty()),
        ..rewrite::Options::default()
    };
    let mut space = RewriteSpace {
        rw: Rewrite::with_options(&module.binary, layout)?,
        patched: Pending::default(),
    };
    // Before the trap handler's hook (`init`) claims a spare dynamic entry: loading the
    // runtime matters more, and a library's hook can still chain an existing DT_INIT.
    let (measuring, slot_of, counters) = if measured.is_empty() {
        (None, HashMap::new(), HashMap::new())
    } else {
        let (m, slot_of, counters) =
            plan_measuring(&mut space.rw, module, &measured, out, options)?;
        (Some(m), slot_of, counters)
    };
    // Declared variables, with their initial values, in the new data segment.
    let (_, size) = plan.layout(0);
    let declared: Vec<Declaration> = if size > 0 {
        let base = space.rw.alloc_data(size, 64)?;
        let (vars, _) = plan.layout(base.0);
        for (v, d) in vars.iter().zip(&plan.declared) {
            space.rw.write(LinkAddr(v.addr), &d.init)?;
        }
        vars
    } else {
        Vec::new()
    };

    let index = super::env::index_of(&declared);
    let mut place = SavePlacement {
        session,
        declared: &declared,
        index: &index,
        measuring: measuring.as_ref().map(|m| (m.descriptor, slot_of)),
        counters: &counters,
    };
    let mut built = Built::default();
    for r in &plan.requests {
        let b = build::patch_requests(module, r, &mut place)?;
        built.requests.extend(b.requests);
        built.skipped.extend(b.skipped);
    }
    let hook = match module.binary.kind() {
        BinaryKind::SharedLibrary => space.rw.init().map(Hook::Init),
        _ => Ok(Hook::Entry(module.binary.entry())),
    };
    let options = PatchOptions {
        allow_traps: hook.is_ok(),
        one_shot: true,
        ..PatchOptions::default()
    };
    let mut patcher = Patcher::new(0, options);
    let coverage_ids: Vec<u32> = plan
        .requests
        .iter()
        .filter(|r| matches!(r.action, Action::Coverage { .. }))
        .map(|r| r.id)
        .collect();
    build::drop_trapped_probes(&patcher, module, &mut built, &coverage_ids);
    // A failure from here on writes nothing: the rewrite is discarded with what it staged.
    let (points, skipped) = match (
        build::insert(&mut patcher, module, &mut space, built),
        &hook,
    ) {
        (Ok(done), _) => (done.points, done.skipped),
        (Err(patch::PatchError::NeedsTrap { point, addr, why }), Err(e)) => {
            return Err(patch::PatchError::NeedsTrap {
                point,
                addr,
                why: format!("{why}; and {e}"),
            }
            .into())
        }
        (Err(e), _) => return Err(e.into()),
    };
    // A block left without a probe starts at UNPROBED, so the report does not take it for a
    // block that never ran. (Counters by block, not a scan of every counter per skipped
    // point: cc1's coverage has 1.35 million counters.)
    if !skipped.is_empty() && !counters.is_empty() {
        let mut by_block: HashMap<(u64, u64), Vec<u64>> = HashMap::new();
        for (&(_, f, b), &at) in &counters {
            by_block.entry((f, b)).or_default().push(at);
        }
        for (p, _) in &skipped {
            let func = module.functions().get(p.func).addr.0;
            for &at in by_block.get(&(func, p.addr.0)).into_iter().flatten() {
                space
                    .rw
                    .write(LinkAddr(at), &super::coverage::UNPROBED.to_le_bytes())?;
            }
        }
    }
    let traps = patcher.traps();
    let mut interposed = Vec::new();
    if !traps.is_empty() {
        // Traps were allowed only because the hook exists.
        let hook = hook?;
        let previous = install_trap_handler(&mut space.rw, hook, &traps)?;
        interposed = interpose_signals(&mut space, module, previous)?;
    }
    let file = space.rw.save(out)?;
    Ok(SaveReport {
        points,
        skipped,
        tactics: patcher.tactic_counts(),
        interposed,
        file,
        measuring,
    })
}

/// `(request id, function address, block address)` to the address of the block's coverage
/// counter.
type CounterMap = HashMap<(u32, u64, u64), u64>;
/// Each slot of a measure: its request, function, loop (`None`: the function) and what it
/// counts, to the slot. (A map: a whole-program measure has a slot per function, and a scan
/// of them all per point was quadratic.)
type SlotMap = HashMap<(u32, FuncId, Option<String>, Counted), u32>;

/// A saved file's placement: declared variables in its new data segment, bias 0, every open
/// module reachable, measures finding the runtime through the file's descriptor.
struct SavePlacement<'s> {
    session: &'s Session,
    declared: &'s [Declaration],
    /// `declared` by name.
    index: &'s HashMap<String, usize>,
    /// The descriptor's address and each measured function's slot.
    measuring: Option<(LinkAddr, SlotMap)>,
    /// Coverage counters.
    counters: &'s CounterMap,
}

impl Placement for SavePlacement<'_> {
    fn env<'a>(
        &'a self,
        module: &'a Module,
        func: &'a Function,
        info: PointInfo,
    ) -> SessionEnv<'a> {
        SessionEnv::new(module, Some(func), self.declared, info, 0)
            .with_index(self.index)
            .with_session(self.session)
    }

    fn measure_source(
        &mut self,
        _module: &Module,
        id: u32,
        func: FuncId,
        metric: Metric,
        probe: &Probe,
        frame: i32,
    ) -> Result<String, BuildError> {
        let (descriptor, slot_of) = self
            .measuring
            .as_ref()
            .expect("save plans measuring before it builds a measure");
        let slot = slot_of
            .get(&(id, func, probe.loop_name.clone(), probe.counted))
            .copied()
            .unwrap_or(0);
        Ok(measure::saved_source(
            metric,
            probe,
            slot,
            descriptor.0,
            frame,
        ))
    }

    fn coverage_counter(
        &mut self,
        module: &Module,
        id: u32,
        func: FuncId,
        block: LinkAddr,
    ) -> Result<u64, BuildError> {
        let f = module.functions().get(func).addr.0;
        self.counters
            .get(&(id, f, block.0))
            .copied()
            .ok_or(BuildError::NoCounter { id, block })
    }
}

/// Gives every measured function a slot, writes the descriptor and its header, and names the
/// runtime in the file (or says it must be preloaded).
fn plan_measuring(
    rw: &mut Rewrite<'_>,
    module: &Module,
    measured: &[&Request],
    out: &Path,
    options: &SaveOptions,
) -> Result<(Measuring, SlotMap, CounterMap), SaveError> {
    let mut slots = Vec::new();
    let mut slot_of: SlotMap = HashMap::new();
    // Loops' code goes into the file only for a profile's paths to show them, once per loop.
    let profiled = measured
        .iter()
        .any(|r| r.action.metric().is_some_and(|m| m.is_profile()));
    let mut spanned = std::collections::HashSet::new();
    for r in measured {
        let Some(kind) = r.action.metric() else {
            continue;
        };
        for f in &r.funcs {
            for (probe, _) in measure::probes(module, r, f.func) {
                let key = (r.id, f.func, probe.loop_name.clone(), probe.counted);
                if slot_of.contains_key(&key) {
                    continue;
                }
                let slot = slots.len() as u32;
                slot_of.insert(key, slot);
                let spans = probe
                    .loop_name
                    .as_ref()
                    .filter(|n| profiled && spanned.insert((f.func, (*n).clone())))
                    .and_then(|n| {
                        let a = module.analysis().function(f.func);
                        a.loops.loops.iter().find(|l| l.name == *n)
                    })
                    .map(|l| super::loop_measure::spans(module, f.func, l))
                    .unwrap_or_default();
                slots.push(SavedSlot {
                    slot,
                    id: r.id,
                    kind,
                    function: module.functions().get(f.func).display_name().to_owned(),
                    loop_name: probe.loop_name,
                    counted: probe.counted,
                    spans,
                });
            }
        }
    }
    // Coverage requests' blocks, numbered one after another.
    let mut coverage = Vec::new();
    let mut next = 0u32;
    for r in measured {
        if matches!(r.action, Action::Coverage { .. }) {
            let funcs: Vec<FuncId> = r.funcs.iter().map(|f| f.func).collect();
            let map = super::coverage::CoverageMap::new(module, r.id, &funcs, next);
            next += map.len();
            coverage.push(map);
        }
    }
    if rw.has_phdr(PT_GSH_MEASURE) {
        // The runtime serves one descriptor per process: the old one would win.
        return Err(SaveError::CannotMeasure {
            id: measured.first().map_or(0, |r| r.id),
            file: module.name.clone(),
            why: "it already measures (gsh saved it with measuring); save from the original file"
                .into(),
        });
    }
    let runtime = measure::find_runtime()?;
    let runtime = std::path::absolute(&runtime).unwrap_or(runtime);
    let results = results_path(out, options.results.as_deref())?;
    let meta = super::results::Meta {
        version: descriptor::META_VERSION,
        slots: slots.clone(),
        coverage: coverage.clone(),
    };
    let meta = serde_json::to_string(&meta).expect("plain data serialises");
    // Profiles walk the stack: without the module's call-site table the runtime could only
    // follow frame pointers, which optimised code rarely keeps. Link addresses: the runtime
    // adds the load bias.
    let unwind = if slots.iter().any(|s| s.kind.is_profile()) {
        measure::unwind_table(module, 0)
    } else {
        Vec::new()
    };
    let bytes = descriptor::encode_with_coverage(
        slots.len() as u32,
        results.as_os_str().as_encoded_bytes(),
        meta.as_bytes(),
        &unwind,
        next,
    )
    .ok_or_else(|| rewrite::Error::OutOfReach {
        detail: format!(
            "a measuring descriptor with an unwind table of {:#x} bytes",
            unwind.len()
        ),
    })?;
    let descriptor = rw.alloc_data_with(&bytes, descriptor::ALIGN)?;
    rw.add_phdr(PT_GSH_MEASURE, descriptor, bytes.len() as u64)?;
    let mut counters = CounterMap::new();
    if next > 0 {
        let base = descriptor.0 + u64::from(descriptor::coverage_off(&bytes));
        for map in &coverage {
            for ((f, b), k) in map.index() {
                counters.insert((map.id, f, b), base + 8 * u64::from(k));
            }
        }
    }
    let needed = match rw.add_needed(runtime.as_os_str().as_encoded_bytes()) {
        Ok(()) => true,
        Err(rewrite::Error::NoDynamicRoom { .. }) => false,
        Err(e) => return Err(e.into()),
    };
    let m = Measuring {
        runtime,
        needed,
        results,
        descriptor,
        slots,
        coverage: next,
    };
    Ok((m, slot_of, counters))
}

/// Where the SIGTRAP handler's install stub is hooked in.
#[derive(Clone, Copy, Debug)]
enum Hook {
    /// `e_entry`, which held this original entry point.
    Entry(LinkAddr),
    /// A library's `DT_INIT`.
    Init(InitHook),
}

/// Sends the program's calls to the signal functions through its PLT stubs to gsh's
/// wrappers, which keep gsh's SIGTRAP handler installed and SIGTRAP unblocked while the
/// program believes it manages SIGTRAP itself. `previous` is the handler's record of the
/// program's SIGTRAP action. Returns each stub's import name, with why when it was left
/// alone.
fn interpose_signals(
    space: &mut RewriteSpace<'_>,
    module: &Module,
    previous: LinkAddr,
) -> Result<Vec<(String, Option<String>)>, SaveError> {
    use crate::patch::interpose;
    let mut out = Vec::new();
    for f in module.functions().functions() {
        let Some(import) = f.name.strip_suffix("@plt") else {
            continue;
        };
        let Some(kind) = interpose::Kind::of(import) else {
            continue;
        };
        let at = RuntimeAddr(f.addr.0);
        let len = f.size.clamp(5, 16) as usize;
        let bytes = space.read(at, len).map_err(patch::PatchError::from)?;
        let Some(path) = interpose::stub_path(&bytes, at.0) else {
            out.push((
                import.to_owned(),
                Some("its stub does not start with a jump (a trap site?)".to_owned()),
            ));
            continue;
        };
        let asm = |code: u64| {
            interpose::assemble(kind, code, &path, previous.0).map_err(patch::PatchError::from)
        };
        let size = asm(at.0)?.len() as u64 + 32;
        let code = space
            .allocate(at, size, AllocKind::Code)
            .map_err(patch::PatchError::from)?;
        let bytes = asm(code.0)?;
        if bytes.len() as u64 > size {
            return Err(patch::PatchError::Layout(
                "a signal wrapper grew past its allocation".into(),
            )
            .into());
        }
        space.write(code, &bytes).map_err(patch::PatchError::from)?;
        let jump = crate::patch::reloc::jmp_rel32(at.0, code.0).map_err(patch::PatchError::from)?;
        space.write(at, &jump).map_err(patch::PatchError::from)?;
        out.push((import.to_owned(), None));
    }
    Ok(out)
}

/// Writes the trap table, the handler and its install stub, and hooks the stub in. Returns
/// where the handler keeps the program's SIGTRAP action.
fn install_trap_handler(
    rw: &mut Rewrite<'_>,
    hook: Hook,
    traps: &[(RuntimeAddr, RuntimeAddr)],
) -> Result<LinkAddr, SaveError> {
    let pairs: Vec<(u64, u64)> = traps.iter().map(|(a, b)| (a.0, b.0)).collect();
    let table_at = rw.alloc_data(pairs.len() as u64 * trap::ENTRY_SIZE, 16)?;
    rw.write(table_at, &trap::table(table_at.0, &pairs))?;
    let previous = rw.alloc_data(trap::ACTION_SIZE, 16)?;
    let then = match hook {
        Hook::Entry(entry) => Some(entry.0),
        Hook::Init(InitHook::Chain { old, .. }) => Some(old.0),
        Hook::Init(InitHook::Spare { .. }) => None,
    };
    let asm = |code: u64| {
        trap::assemble(&trap::HandlerLayout {
            code,
            table: table_at.0,
            entries: pairs.len(),
            previous: previous.0,
            then,
        })
        .map_err(patch::PatchError::from)
    };
    // Branch sizes may differ once the address is final; the slack covers them.
    let guess = asm(rw.code_region().0 .0)?;
    let size = guess.bytes.len() as u64 + 32;
    let at = rw.alloc_code(size, 16)?;
    let code = asm(at.0)?;
    if code.bytes.len() as u64 > size {
        return Err(
            patch::PatchError::Layout("the trap handler grew past its allocation".into()).into(),
        );
    }
    rw.write(at, &code.bytes)?;
    match hook {
        Hook::Entry(_) => rw.set_entry(at),
        Hook::Init(h) => rw.set_init(h, at),
    }
    Ok(previous)
}
