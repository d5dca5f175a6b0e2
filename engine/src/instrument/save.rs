//! `save`: the plan written into a new ELF file. Declared variables go in the rewriter's new
//! data segment, trampolines in its new code segment, and the jumps into them over the original
//! code; the patcher sees all of it through an [`AddressSpace`] over the rewrite.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;

use crate::addr::{LinkAddr, RuntimeAddr};
use crate::patch::{
    self, AddressSpace, AllocKind, PatchOptions, Patcher, PointReport, SpaceError, Tactic,
};
use crate::point::{self, Point, Query};
use crate::rewrite::{self, Rewrite};
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
    pub tactics: BTreeMap<Tactic, usize>,
    pub file: rewrite::Summary,
}

/// The rewrite as the patcher's address space: link addresses are where code runs (bias 0).
struct RewriteSpace<'a> {
    rw: Rewrite<'a>,
    /// Writes over original code, replayed on reads so the patcher sees its own patches.
    patched: BTreeMap<u64, Vec<u8>>,
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
        for (&at, patch) in self.patched.range(..addr.0 + len as u64) {
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
    for r in &plan.requests {
        let source = r.source();
        for f in &r.funcs {
            let func = module.functions().get(f.func);
            for p in points_of(module, r, f.func)? {
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
    let mut patcher = Patcher::new(0, PatchOptions::default());
    let points = patcher.insert(module, &mut space, &requests)?;
    let file = space.rw.save(out)?;
    Ok(SaveReport {
        points,
        tactics: patcher.tactic_counts(),
        file,
    })
}
