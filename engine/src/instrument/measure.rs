//! Measuring in a live process with the runtime library `gsh-rt` (`rt/LAYOUT.md`): `count`
//! requests, the runtime loaded once per process, one counter slot per counted function, and
//! the counts read from the threads' blocks without stopping the process.
//!
//! A `count` is an ordinary plan request (so `delete`, `show instrumentation` and ids work as
//! for `at`) whose body is the marker [`COUNT_BODY`], which no user snippet can contain (the
//! checker rejects the reserved name outside gsh's own snippets). [`super::Live`] compiles it,
//! per function, to the inline counter of [`crate::snippet::codegen`]'s `rtcount`: a TLS load,
//! a test and an `inc`, with a slow path that creates the thread's block on its first event.
//! Every event is counted: a thread without a block gets one before its count is taken.
//!
//! The runtime cannot be loaded before the program's libc is initialised (`dlopen` is a libc
//! call), so a count asked for before `start`/`run` waits until the process stops at `main`
//! ([`super::Live::start_measuring`]); on an attached process it goes in at once.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use object::{Object, ObjectSymbol};

use crate::process::{MemReader, Process, ProcessError};
use crate::session::{FuncRef, ModuleId, Session};
use crate::symbols::FuncId;

use super::request::{Plan, PointSpec, Request, RequestError};

/// The body of every `count` request: the marker [`super::Live`] recognises.
pub const COUNT_BODY: &str = "__gsh_rt_count();";
/// Counter slots per thread (`gsh_rt_init`'s `max_slots`): one per counted function.
const MAX_SLOTS: u32 = 16384;
/// Call-path records per thread (`gsh_rt_init`'s `path_capacity`): its default.
const PATH_CAPACITY: u32 = 4096;
const ROOT_MAGIC: u32 = 0x5452_5347;
const ROOT_ABI: u32 = 2;

/// Why measuring failed.
#[derive(Debug, thiserror::Error)]
pub enum MeasureError {
    #[error(transparent)]
    Process(#[from] ProcessError),
    #[error("cannot find gsh's runtime library: {0}")]
    NoRuntime(String),
    #[error("the runtime library {path}: {detail}")]
    BadRuntime { path: PathBuf, detail: String },
    #[error("every one of the {MAX_SLOTS} counter slots is in use")]
    SlotsFull,
}

/// The runtime as loaded in the process.
#[derive(Clone, Debug)]
pub struct Runtime {
    pub path: PathBuf,
    /// `GSH_RT_ROOT`'s address.
    pub root: u64,
    /// `gsh_rt_thread`'s address: the slow path's call.
    pub thread_fn: u64,
    /// `fs`-relative offset of the TLS word holding the thread's block.
    pub tls_offset: i64,
}

/// One counted function.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Counter {
    /// The `count` request's id.
    pub id: u32,
    pub module: ModuleId,
    pub func: FuncId,
    /// The function as users name it.
    pub name: String,
    pub slot: u32,
}

/// A counter's value.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct CountValue {
    pub id: u32,
    pub function: String,
    pub calls: u64,
}

/// Measuring state of one process; [`super::Live`] holds it.
#[derive(Debug, Default)]
pub struct Measure {
    pub runtime: Option<Runtime>,
    pub counters: Vec<Counter>,
    /// Counts as the process left them when it exited.
    pub last: Option<Vec<CountValue>>,
}

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

/// Adds a `count` request for the functions `glob` names (entries), as one id.
pub fn add_count<'p>(
    plan: &'p mut Plan,
    session: &mut Session,
    glob: &str,
) -> Result<&'p Request, RequestError> {
    let spec = PointSpec::parse(&[glob, "entry"]).map_err(RequestError::NoPoint)?;
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
    let id = plan.new_id();
    plan.requests.push(Request {
        id,
        spec,
        cond: None,
        body: COUNT_BODY.to_owned(),
        funcs,
        warnings: Vec::new(),
    });
    Ok(plan.requests.last().expect("just pushed"))
}

/// Is this plan request a `count`?
pub fn is_count(r: &Request) -> bool {
    r.body == COUNT_BODY && r.cond.is_none()
}

fn u32_at(b: &[u8], off: usize) -> u32 {
    u32::from_le_bytes(b[off..off + 4].try_into().expect("4 bytes"))
}

fn u64_at(b: &[u8], off: usize) -> u64 {
    u64::from_le_bytes(b[off..off + 8].try_into().expect("8 bytes"))
}

impl Measure {
    /// Loads the runtime into the process (once), initialises it and learns its root, TLS
    /// offset and slow-path function. The process must be stopped past libc's start-up.
    pub fn load(&mut self, p: &mut Process) -> Result<&Runtime, MeasureError> {
        if self.runtime.is_none() {
            let path = find_runtime()?;
            self.runtime = Some(load_runtime(p, &path)?);
        }
        Ok(self.runtime.as_ref().expect("just set"))
    }

    /// The snippet counting calls to `func` for request `id`, with a slot given on first use.
    pub fn source(
        &mut self,
        session_name: impl FnOnce() -> String,
        id: u32,
        module: ModuleId,
        func: FuncId,
    ) -> Result<String, MeasureError> {
        let rt = self
            .runtime
            .as_ref()
            .ok_or_else(|| MeasureError::NoRuntime("not loaded in the process yet".into()))?;
        let slot = match self
            .counters
            .iter()
            .find(|c| c.id == id && c.module == module && c.func == func)
        {
            Some(c) => c.slot,
            None => {
                let slot = self.counters.len() as u32;
                if slot >= MAX_SLOTS {
                    return Err(MeasureError::SlotsFull);
                }
                self.counters.push(Counter {
                    id,
                    module,
                    func,
                    name: session_name(),
                    slot,
                });
                slot
            }
        };
        Ok(format!(
            "__gsh_rt_count({slot}, {:#x}, {:#x});",
            rt.tls_offset as u64, rt.thread_fn
        ))
    }

    /// Every counter's value now, summed over the threads' blocks, read with `read` (a
    /// [`MemReader`] needs no stop).
    pub fn values(&self, reader: &MemReader) -> Result<Vec<CountValue>, MeasureError> {
        let Some(rt) = &self.runtime else {
            return Ok(self.zero());
        };
        let read = |a: u64, n: usize| reader.read(a, n);
        let root = read(rt.root, 72)?;
        let slots_offset = u64_at(&root, 40);
        let mut sums = vec![0u64; self.counters.len()];
        let top = self
            .counters
            .iter()
            .map(|c| c.slot)
            .max()
            .map_or(0, |s| s + 1);
        let mut block = u64_at(&root, 64);
        // A corrupted list must not loop forever: threads are bounded by the pid space.
        let mut seen = 0;
        while block != 0 && seen < 1 << 22 {
            let head = read(block, 8)?;
            if top > 0 {
                let slots = read(block + slots_offset, 32 * top as usize)?;
                for (i, c) in self.counters.iter().enumerate() {
                    sums[i] += u64_at(&slots, 32 * c.slot as usize);
                }
            }
            block = u64_at(&head, 0);
            seen += 1;
        }
        Ok(self
            .counters
            .iter()
            .zip(sums)
            .map(|(c, calls)| CountValue {
                id: c.id,
                function: c.name.clone(),
                calls,
            })
            .collect())
    }

    fn zero(&self) -> Vec<CountValue> {
        self.counters
            .iter()
            .map(|c| CountValue {
                id: c.id,
                function: c.name.clone(),
                calls: 0,
            })
            .collect()
    }

    /// Keeps the final counts (the process is exiting; its memory is readable one last time).
    pub fn snapshot(&mut self, p: &Process) {
        if self.counters.is_empty() {
            return;
        }
        if let Ok(v) = self.values(&p.reader()) {
            self.last = Some(v);
        }
    }
}

/// Per-request counters in a map by id, for callers that group (the shell's report).
pub fn by_id(values: &[CountValue]) -> BTreeMap<u32, Vec<&CountValue>> {
    let mut m: BTreeMap<u32, Vec<&CountValue>> = BTreeMap::new();
    for v in values {
        m.entry(v.id).or_default().push(v);
    }
    m
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
    let (init, tls, thread, root) = (
        symbol("gsh_rt_init")?,
        symbol("gsh_rt_tls_offset")?,
        symbol("gsh_rt_thread")?,
        symbol("GSH_RT_ROOT")?,
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
    let head = p.read(root, 8)?;
    if u32_at(&head, 0) != ROOT_MAGIC || u32_at(&head, 4) != ROOT_ABI {
        return Err(bad(format!(
            "its root has magic {:#x}, ABI {} (gsh reads ABI {ROOT_ABI})",
            u32_at(&head, 0),
            u32_at(&head, 4)
        )));
    }
    if tls_offset == 0 || i32::try_from(tls_offset).is_err() {
        return Err(bad(format!("its TLS offset {tls_offset} is unusable")));
    }
    Ok(Runtime {
        path: canon,
        root,
        thread_fn: thread.wrapping_add(bias),
        tls_offset,
    })
}
