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

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;

use crate::addr::{LinkAddr, RuntimeAddr};
use crate::elf::BinaryKind;
use crate::patch::trap;
use crate::patch::{
    self, AddressSpace, AllocKind, PatchOptions, Patcher, PointReport, SpaceError, Tactic,
};
use crate::point::{self, Point, Query};
use crate::rewrite::{self, InitHook, Rewrite};
use crate::session::{Module, Session};
use crate::snippet::env::PointInfo;
use crate::snippet::types::Type;

use super::env::{Declaration, SessionEnv};
use super::request::{Plan, Request, Where};

/// Why `save` failed. Nothing is written when it fails.
#[derive(Debug, thiserror::Error)]
pub enum SaveError {
    #[error(transparent)]
    Engine(#[from] crate::Error),
    #[error(transparent)]
    Rewrite(#[from] rewrite::Error),
    #[error(transparent)]
    Patch(#[from] patch::PatchError),
    /// Instrumentation in another module than the file being saved.
    #[error("instrumentation {id} is in {module}; `save` rewrites only {file} (use a live process for libraries)")]
    OtherModule {
        id: u32,
        module: String,
        file: String,
    },
    /// A kind of point the patcher does not place yet.
    #[error("instrumentation {id}: {what} are not supported yet")]
    Unsupported { id: u32, what: &'static str },
}

/// What `save` did.
#[derive(Debug)]
pub struct SaveReport {
    pub points: Vec<PointReport>,
    /// Points left alone, and why: their instruction overlaps another instruction of the
    /// function's CFG (a block decoded from inside an instruction, typically from a jump
    /// table read past its end), so writing there could corrupt real code.
    pub skipped: Vec<(Point, String)>,
    pub tactics: BTreeMap<Tactic, usize>,
    pub file: rewrite::Summary,
}

/// The rewrite as the patcher's address space: link addresses are where code runs (bias 0).
struct RewriteSpace<'a> {
    rw: Rewrite<'a>,
    /// Writes over original code, replayed on reads so the patcher sees its own patches.
    patched: BTreeMap<u64, Vec<u8>>,
    /// The longest of them, so a read looks only at patches that can reach it.
    longest: u64,
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
        let from = addr.0.saturating_sub(self.longest);
        for (&at, patch) in self.patched.range(from..addr.0 + len as u64) {
            for (i, b) in patch.iter().enumerate() {
                let a = at + i as u64;
                if a >= addr.0 && a < addr.0 + len as u64 {
                    bytes[(a - addr.0) as usize] = *b;
                }
            }
        }
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
            self.longest = self.longest.max(bytes.len() as u64);
            self.patched.insert(addr.0, bytes.to_vec());
        }
        Ok(())
    }
}

/// The points of `func` a request selects.
pub fn points_of(
    module: &Module,
    r: &Request,
    func: crate::symbols::FuncId,
) -> Result<Vec<Point>, SaveError> {
    let mut q = Query::default();
    match &r.spec.at {
        Where::Entry => q.entry = true,
        Where::Exit => q.exits = true,
        Where::CallBefore { callee } => {
            q.calls_before = true;
            q.callee = callee.clone();
        }
        Where::CallAfter { callee } => {
            q.calls_after = true;
            q.callee = callee.clone();
        }
        Where::Loop { .. } => {
            return Err(SaveError::Unsupported {
                id: r.id,
                what: "loop points",
            })
        }
    }
    Ok(point::find(module, func, &q))
}

/// What the snippet constants (`$function`, `$line`, `$callee`, ...) say at `point`, and the
/// type `$return` has there.
pub(crate) fn point_info(
    module: &Module,
    env: &SessionEnv<'_>,
    r: &Request,
    p: &Point,
) -> PointInfo {
    let table = module.functions();
    let func = table.get(p.func);
    let debug = module.debug_info();
    let loc = debug.and_then(|d| d.location(p.addr));
    let return_of = |addr: Option<LinkAddr>| -> Option<Type> {
        let info = debug?.function(addr?)?;
        env.c_type(&info.return_type)
    };
    let kind = p.kind.snippet_kind();
    let return_type = match kind {
        crate::snippet::env::PointKind::Exit => return_of(Some(func.addr)),
        crate::snippet::env::PointKind::CallAfter => return_of(p.callee),
        _ => None,
    };
    PointInfo {
        kind,
        function: func.display_name().to_owned(),
        module: module.name.clone(),
        file: loc.as_ref().map(|l| l.file.clone()),
        line: loc.map(|l| l.line),
        callee: p.callee_name.clone(),
        loop_name: p.loop_name.clone(),
        id: r.id,
        return_type,
        internal: false,
    }
}

/// Writes the main module of `session` with everything in `plan` to `out`.
pub fn save(session: &Session, plan: &Plan, out: &Path) -> Result<SaveReport, SaveError> {
    let module = session.main()?;
    for r in &plan.requests {
        if super::measure::is_count(r) {
            return Err(SaveError::Unsupported {
                id: r.id,
                what: "`count`s in a saved file (they need a live process)",
            });
        }
        if let Some(f) = r.funcs.iter().find(|f| f.module != module.id) {
            return Err(SaveError::OtherModule {
                id: r.id,
                module: session.module(f.module).name.clone(),
                file: module.name.clone(),
            });
        }
    }
    let mut space = RewriteSpace {
        rw: Rewrite::new(&module.binary)?,
        patched: BTreeMap::new(),
        longest: 0,
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

    let mut requests = Vec::new();
    let mut skipped = Vec::new();
    for r in &plan.requests {
        let source = r.source();
        for f in &r.funcs {
            let func = module.functions().get(f.func);
            for p in points_of(module, r, f.func)? {
                if let Some(why) = overlapping_code(module, &p) {
                    skipped.push((p, why));
                    continue;
                }
                let base_env =
                    SessionEnv::new(module, Some(func), &declared, PointInfo::default(), 0);
                let info = point_info(module, &base_env, r, &p);
                let env = SessionEnv::new(module, Some(func), &declared, info, 0);
                requests.push(patch::Request {
                    tag: r.id,
                    point: p,
                    source: source.clone(),
                    env: Arc::new(env.snapshot(&source)),
                });
            }
        }
    }
    let hook = match module.binary.kind() {
        BinaryKind::SharedLibrary => space.rw.init().map(Hook::Init),
        _ => Ok(Hook::Entry(module.binary.entry())),
    };
    let options = PatchOptions {
        allow_traps: hook.is_ok(),
        ..PatchOptions::default()
    };
    let mut patcher = Patcher::new(0, options);
    let points = match (patcher.insert(module, &mut space, &requests), &hook) {
        (Ok(p), _) => p,
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
    let traps = patcher.traps();
    if !traps.is_empty() {
        // Traps were allowed only because the hook exists.
        let hook = hook?;
        install_trap_handler(&mut space.rw, hook, &traps)?;
    }
    let file = space.rw.save(out)?;
    Ok(SaveReport {
        points,
        skipped,
        tactics: patcher.tactic_counts(),
        file,
    })
}

/// Where the SIGTRAP handler's install stub is hooked in.
#[derive(Clone, Copy, Debug)]
enum Hook {
    /// `e_entry`, which held this original entry point.
    Entry(LinkAddr),
    /// A library's `DT_INIT`.
    Init(InitHook),
}

/// Writes the trap table, the handler and its install stub, and hooks the stub in.
fn install_trap_handler(
    rw: &mut Rewrite<'_>,
    hook: Hook,
    traps: &[(RuntimeAddr, RuntimeAddr)],
) -> Result<(), SaveError> {
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
    Ok(())
}

/// Why `p` lies in doubtful code, if it does: another block of its function decodes an
/// instruction across the point's address, so the two readings of those bytes cannot both be
/// right. cc1 has one: a jump table read one entry too far gives a "target" inside a `je`,
/// whose bytes then decode to a `ret imm16` that never runs.
fn overlapping_code(module: &Module, p: &Point) -> Option<String> {
    let cfg = &module.analysis().function(p.func).cfg;
    for b in &cfg.blocks {
        if !(b.start < p.addr && p.addr < b.end) {
            continue;
        }
        let insns = patch::plan::decode(&module.binary, b.start, b.end.0 - b.start.0);
        if !insns.iter().any(|i| i.ip() == p.addr.0) {
            return Some(format!(
                "the block at {} decodes an instruction across {}",
                b.start, p.addr
            ));
        }
    }
    None
}
