//! Block coverage (`coverage FUNC...`): one counter per basic block of each function, and a
//! probe at every block's entry that increments it in place, `inc qword ptr [rip+COUNTER]`
//! (the snippet compiler's reserved `__gsh_cov_hit`), with no call, no thread lookup and no
//! registers saved but the flags where they are live.
//!
//! Coverage is its own [`Action`], not a measure's [`Metric`](super::Metric):
//! its points are every block rather than a function's entry and exits, and its counters are
//! not the runtime's per-thread slots (16384 of them, 32 bytes per thread each, far too few
//! for `coverage '*'` of a large program) but one array of `u64`s per request and module,
//! shared by all threads. A [`CoverageMap`] says which block each counter belongs to. A live
//! process gets the array in memory gsh maps near the module (within RIP-relative reach of
//! the trampolines) and gsh reads it directly, without the runtime; a saved file gets it
//! inside its measuring descriptor (`rt/LAYOUT.md`, "Block coverage"), and the runtime writes
//! its non-zero counters into the results file at exit, the map riding along in the meta JSON.
//!
//! A block the patcher cannot probe (doubtful code, no room, a trap where traps are refused)
//! is *unprobed*: counted and reported as such, never taken for a block that did not run.
//! Its counter holds [`UNPROBED`] in a saved file; a live process keeps the list.
//!
//! With DWARF, [`summarise`] also gives each function's lines: a line is covered when any
//! block holding code of that line (a line-table row) ran, which is what gcov reports for
//! `-O0` code. [`lcov`] writes the result as an lcov tracefile.

#![warn(missing_docs)]

use std::collections::{BTreeMap, HashMap};
use std::fmt::Write as _;

use crate::addr::LinkAddr;
use crate::point::{self, Point, Where};
use crate::process::MemReader;
use crate::session::{FuncRef, Module, ModuleId, Session};

use super::action::Action;
use super::request::{Plan, PointSpec, Request, RequestError};
use crate::symbols::FuncId;

pub use gsh_rt_abi::descriptor::UNPROBED;

/// One function's blocks, in counter order.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct FuncBlocks {
    /// The function as users name it.
    pub function: String,
    /// Its address (link address).
    pub addr: u64,
    /// Each block's `[start, end)` link addresses, in address order.
    pub blocks: Vec<(u64, u64)>,
}

/// One coverage request's counters in one module: counter `first + k` belongs to the `k`th
/// block of the functions in order.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct CoverageMap {
    /// The request's id.
    pub id: u32,
    /// The index of its first counter in the array.
    pub first: u32,
    /// The functions.
    pub functions: Vec<FuncBlocks>,
}

impl CoverageMap {
    /// The blocks of `funcs` in `module`, numbered from `first`.
    pub fn new(module: &Module, id: u32, funcs: &[FuncId], first: u32) -> CoverageMap {
        let analysis = module.analysis();
        let functions = funcs
            .iter()
            .map(|&f| {
                let func = module.functions().get(f);
                let mut blocks: Vec<(u64, u64)> = analysis
                    .function(f)
                    .cfg
                    .blocks
                    .iter()
                    .map(|b| (b.start.0, b.end.0))
                    .collect();
                blocks.sort_unstable();
                blocks.dedup();
                FuncBlocks {
                    function: func.display_name().to_owned(),
                    addr: func.addr.0,
                    blocks,
                }
            })
            .collect();
        CoverageMap {
            id,
            first,
            functions,
        }
    }

    /// How many counters it uses.
    pub fn len(&self) -> u32 {
        self.functions.iter().map(|f| f.blocks.len() as u32).sum()
    }

    /// True when it has no blocks at all.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Each block's counter index, by the block's start and its function's address.
    pub fn index(&self) -> HashMap<(u64, u64), u32> {
        let mut out = HashMap::new();
        let mut i = self.first;
        for f in &self.functions {
            for &(start, _) in &f.blocks {
                out.insert((f.addr, start), i);
                i += 1;
            }
        }
        out
    }
}

/// Adds a coverage request for the functions `glob` names, as one id (cold parts are in
/// their parents' CFGs, and PLT stubs are not the program's code, so a glob leaves them out).
pub fn add<'p>(
    plan: &'p mut Plan,
    session: &mut Session,
    glob: &str,
    once: bool,
) -> Result<&'p Request, RequestError> {
    let spec = PointSpec::parse(&[glob, "entry"]).map_err(RequestError::NoPoint)?;
    let funcs: Vec<FuncRef> = session.resolve_functions(glob)?;
    let many = funcs.len() > 1;
    let funcs: Vec<FuncRef> = funcs
        .into_iter()
        .filter(|f| {
            // A PLT stub is the dynamic linker's code, not the program's.
            let func = session.module(f.module).functions().get(f.func);
            !(many && (func.is_cold_part() || func.name.ends_with("@plt")))
        })
        .collect();
    Ok(plan.push(spec, Action::Coverage { once }, funcs, Vec::new()))
}

/// The block-entry points of function `func`: one per block of its CFG, in address order.
pub fn points(module: &Module, func: FuncId) -> Vec<Point> {
    let mut starts: Vec<LinkAddr> = module
        .analysis()
        .function(func)
        .cfg
        .blocks
        .iter()
        .map(|b| b.start)
        .collect();
    starts.sort_unstable();
    starts.dedup();
    starts
        .into_iter()
        .flat_map(|addr| point::find(module, func, &Where::Block { addr }).unwrap_or_default())
        .collect()
}

/// The probe at a block whose counter is at `counter`.
pub fn probe_source(counter: u64) -> String {
    format!("__gsh_cov_hit({counter:#x});")
}

/// One block's count: `None` when it has no probe.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct BlockCount {
    /// Its first instruction (link address).
    pub addr: u64,
    /// Times entered, or `None` when unprobed.
    pub count: Option<u64>,
}

/// One source line's count: the most any block holding code of it ran.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct LineCount {
    /// The source file, as the line table names it.
    pub file: String,
    /// The line.
    pub line: u32,
    /// 0 when it did not run.
    pub count: u64,
}

/// What `report` shows of one function.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct FunctionCoverage {
    /// The coverage request's id.
    pub id: u32,
    /// The function as users name it.
    pub function: String,
    /// Its blocks.
    pub blocks: u32,
    /// Blocks that ran.
    pub covered: u32,
    /// Blocks without a probe (neither covered nor known to be uncovered).
    pub unprobed: u32,
    /// Times the function was entered (its entry block's count).
    pub entries: u64,
    /// The function's source file and first line, with DWARF.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub file: Option<String>,
    /// The function's line (where it is declared), with DWARF.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub line: Option<u32>,
    /// With DWARF, every line with code in the function, and its count (lines only unprobed
    /// blocks hold are left out: whether they ran is not known).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub lines: Option<Vec<LineCount>>,
    /// Every block and its count.
    pub block_counts: Vec<BlockCount>,
}

impl FunctionCoverage {
    /// (covered, total) lines, with DWARF that has lines for the function.
    pub fn line_totals(&self) -> Option<(u32, u32)> {
        let lines = self.lines.as_ref().filter(|l| !l.is_empty())?;
        let covered = lines.iter().filter(|l| l.count > 0).count() as u32;
        Some((covered, lines.len() as u32))
    }
}

/// Each function of `map` with its blocks' counts: `count(k)` is counter `k`'s value, `None`
/// for an unprobed block. With `module` (the code the map was made from, or a file holding
/// its DWARF at the same addresses), each function's lines as well.
pub fn summarise(
    map: &CoverageMap,
    module: Option<&Module>,
    count: impl Fn(u32) -> Option<u64>,
) -> Vec<FunctionCoverage> {
    let debug = module.and_then(|m| m.debug_info());
    let mut out = Vec::new();
    let mut k = map.first;
    for f in &map.functions {
        let mut block_counts = Vec::with_capacity(f.blocks.len());
        // Line -> the most any of its blocks ran (None: only unprobed blocks hold it).
        let mut lines: BTreeMap<(String, u32), Option<u64>> = BTreeMap::new();
        for &(start, end) in &f.blocks {
            let c = count(k);
            k += 1;
            block_counts.push(BlockCount {
                addr: start,
                count: c,
            });
            if let Some(d) = debug {
                for (_, file, line) in d.locations(LinkAddr(start), LinkAddr(end)) {
                    let e = lines.entry((file, line)).or_insert(None);
                    if let Some(c) = c {
                        *e = Some(e.unwrap_or(0).max(c));
                    }
                }
            }
        }
        let entry = block_counts
            .iter()
            .find(|b| b.addr == f.addr)
            .and_then(|b| b.count);
        // The declarator's line, as gcov and lcov name a function's line; else its entry's.
        let at_entry = debug.and_then(|d| {
            d.function(LinkAddr(f.addr))
                .and_then(|i| i.decl)
                .or_else(|| d.location(LinkAddr(f.addr)))
        });
        out.push(FunctionCoverage {
            id: map.id,
            function: f.function.clone(),
            blocks: f.blocks.len() as u32,
            covered: block_counts
                .iter()
                .filter(|b| b.count.is_some_and(|c| c > 0))
                .count() as u32,
            unprobed: block_counts.iter().filter(|b| b.count.is_none()).count() as u32,
            entries: entry.unwrap_or(0),
            file: debug.and_then(|d| {
                d.locations(LinkAddr(f.addr), LinkAddr(f.addr + 1))
                    .into_iter()
                    .next()
                    .map(|(_, file, _)| file)
            }),
            line: at_entry.map(|l| l.line),
            lines: debug.map(|_| {
                lines
                    .into_iter()
                    .filter_map(|((file, line), c)| {
                        Some(LineCount {
                            file,
                            line,
                            count: c?,
                        })
                    })
                    .collect()
            }),
            block_counts,
        });
    }
    out
}

/// The lcov tracefile of `functions` (`geninfo`'s format, which `genhtml` reads): per source
/// file its functions (`FN`, `FNDA`, `FNF`, `FNH`) and lines (`DA`, `LF`, `LH`). Functions
/// without DWARF have no source file and are left out; lines of one file that several
/// functions hold (inlined code) take the highest count.
pub fn lcov(test: &str, functions: &[FunctionCoverage]) -> String {
    #[derive(Default)]
    struct File<'a> {
        functions: Vec<&'a FunctionCoverage>,
        lines: BTreeMap<u32, u64>,
    }
    let mut files: BTreeMap<&str, File> = BTreeMap::new();
    for f in functions {
        if let Some(file) = &f.file {
            files.entry(file).or_default().functions.push(f);
        }
        for l in f.lines.iter().flatten() {
            let e = files
                .entry(l.file.as_str())
                .or_default()
                .lines
                .entry(l.line)
                .or_insert(0);
            *e = (*e).max(l.count);
        }
    }
    let mut out = String::new();
    for (name, file) in files {
        let _ = writeln!(out, "TN:{test}");
        let _ = writeln!(out, "SF:{name}");
        for f in &file.functions {
            let _ = writeln!(out, "FN:{},{}", f.line.unwrap_or(1), lcov_name(&f.function));
        }
        for f in &file.functions {
            let _ = writeln!(out, "FNDA:{},{}", f.entries, lcov_name(&f.function));
        }
        let hit = file.functions.iter().filter(|f| f.entries > 0).count();
        let _ = writeln!(out, "FNF:{}", file.functions.len());
        let _ = writeln!(out, "FNH:{hit}");
        for (line, count) in &file.lines {
            let _ = writeln!(out, "DA:{line},{count}");
        }
        let _ = writeln!(out, "LF:{}", file.lines.len());
        let _ = writeln!(
            out,
            "LH:{}",
            file.lines.values().filter(|&&c| c > 0).count()
        );
        out.push_str("end_of_record\n");
    }
    out
}

/// A function name as an lcov record may hold it: no commas or line breaks.
fn lcov_name(name: &str) -> String {
    name.chars()
        .map(|c| if c == ',' || c.is_control() { '_' } else { c })
        .collect()
}

/// One coverage request's counters in one module of a live process.
#[derive(Debug)]
pub struct CoverageArray {
    /// The module.
    pub module: ModuleId,
    /// The counters' runtime address.
    pub base: u64,
    /// Which block each counter belongs to (numbered from 0).
    pub map: CoverageMap,
    index: HashMap<(u64, u64), u32>,
    /// The module's load bias.
    pub bias: u64,
    /// Counters of blocks left without a probe, with why.
    pub unprobed: BTreeMap<u32, String>,
    /// The counts as they were when the request was deleted or the process ended.
    pub last: Option<Vec<u64>>,
    /// `--once`: probes of blocks that ran are taken out ([`LiveCoverage::hit_once`]).
    pub once: bool,
    /// `--once`: the counters whose probes are gone.
    pub retired: std::collections::BTreeSet<u32>,
}

/// Probes `coverage --once` may take out: request `id`'s in `module`, at these blocks (link
/// addresses), whose counters are `counters`.
#[derive(Debug)]
pub struct Retire {
    /// The request.
    pub id: u32,
    /// The module.
    pub module: ModuleId,
    /// The blocks' addresses.
    pub points: std::collections::HashSet<LinkAddr>,
    /// Their counters.
    pub counters: Vec<u32>,
}

/// Coverage in a live process: the counter arrays of every request and module.
#[derive(Debug, Default)]
pub struct LiveCoverage {
    /// In the order they were made.
    pub arrays: Vec<CoverageArray>,
    /// Deleted requests whose counts `report` still shows, oldest first: at most
    /// [`super::measure::KEPT_REQUESTS`], as for measures, so a long attach that inserts and
    /// deletes `coverage '*'` over and over does not grow with every cycle.
    deleted: std::collections::VecDeque<u32>,
}

impl LiveCoverage {
    /// Gives request `id`'s functions in `module` (loaded with `bias`) their counters, once,
    /// in memory mapped near the module with `alloc(near, size)`.
    pub fn prepare(
        &mut self,
        id: u32,
        module: &Module,
        bias: u64,
        funcs: &[FuncId],
        once: bool,
        alloc: impl FnOnce(u64, u64) -> Result<u64, crate::process::ProcessError>,
    ) -> Result<(), crate::process::ProcessError> {
        if self.array(id, module.id).is_some() {
            return Ok(());
        }
        let map = CoverageMap::new(module, id, funcs, 0);
        let near = bias.wrapping_add(module.binary.entry().0);
        let base = alloc(near, u64::from(map.len().max(1)) * 8)?;
        self.arrays.push(CoverageArray {
            module: module.id,
            base,
            index: map.index(),
            map,
            bias,
            unprobed: BTreeMap::new(),
            last: None,
            once,
            retired: Default::default(),
        });
        Ok(())
    }

    fn array(&self, id: u32, module: ModuleId) -> Option<&CoverageArray> {
        self.arrays
            .iter()
            .find(|a| a.map.id == id && a.module == module)
    }

    /// The runtime address of the counter of request `id`'s block at `block` of the function
    /// at `func` (link addresses) in `module`.
    pub fn counter(&self, id: u32, module: ModuleId, func: u64, block: u64) -> Option<u64> {
        let a = self.array(id, module)?;
        let k = a.index.get(&(func, block))?;
        Some(a.base + 8 * u64::from(*k))
    }

    /// Records that request `id`'s blocks at `blocks` (link addresses) of `module` got no
    /// probe, with why.
    pub fn unprobed(&mut self, id: u32, module: ModuleId, blocks: &[(u64, u64, String)]) {
        let Some(a) = self
            .arrays
            .iter_mut()
            .find(|a| a.map.id == id && a.module == module)
        else {
            return;
        };
        for (func, block, why) in blocks {
            if let Some(&k) = a.index.get(&(*func, *block)) {
                a.unprobed.insert(k, why.clone());
            }
        }
    }

    /// Keeps the counts of request `id` (or of every request) as they are now: its probes
    /// are gone, or the process is ending. Reading may fail (the process is gone); what was
    /// kept before stays.
    pub fn keep(&mut self, reader: &MemReader, id: Option<u32>) {
        for a in &mut self.arrays {
            if id.is_some_and(|id| id != a.map.id) || a.last.is_some() && id.is_none() {
                continue;
            }
            if let Ok(c) = read_counts(reader, a) {
                a.last = Some(c);
            }
        }
        let Some(id) = id else {
            return;
        };
        self.deleted.retain(|&d| d != id);
        self.deleted.push_back(id);
        while self.deleted.len() > super::measure::KEPT_REQUESTS {
            if let Some(old) = self.deleted.pop_front() {
                self.arrays.retain(|a| a.map.id != old);
            }
        }
    }

    /// `--once`: the probes of blocks that ran and still have them, per request and module.
    pub fn hit_once(&self, reader: &MemReader) -> Vec<Retire> {
        let mut out = Vec::new();
        for a in self.arrays.iter().filter(|a| a.once && a.last.is_none()) {
            let Ok(counts) = read_counts(reader, a) else {
                continue;
            };
            let mut r = Retire {
                id: a.map.id,
                module: a.module,
                points: Default::default(),
                counters: Vec::new(),
            };
            let mut k = 0u32;
            for f in &a.map.functions {
                for &(start, _) in &f.blocks {
                    let ran = counts.get(k as usize).is_some_and(|&c| c > 0);
                    if ran && !a.retired.contains(&k) && !a.unprobed.contains_key(&k) {
                        r.points.insert(LinkAddr(start));
                        r.counters.push(k);
                    }
                    k += 1;
                }
            }
            if !r.counters.is_empty() {
                out.push(r);
            }
        }
        out
    }

    /// Records that `r`'s probes are gone.
    pub fn retired(&mut self, r: &Retire) {
        if let Some(a) = self
            .arrays
            .iter_mut()
            .find(|a| a.map.id == r.id && a.module == r.module)
        {
            a.retired.extend(r.counters.iter().copied());
        }
    }

    /// Probes in place now, over every request (for `status` and tests).
    pub fn probes(&self) -> usize {
        self.arrays
            .iter()
            .filter(|a| a.last.is_none())
            .map(|a| a.map.len() as usize - a.unprobed.len() - a.retired.len())
            .sum()
    }

    /// True when some request has counters.
    pub fn is_empty(&self) -> bool {
        self.arrays.is_empty()
    }

    /// Every request's functions with their counts now (kept counts for requests deleted or
    /// a process that ended), lines from `module_of`'s modules.
    pub fn summarise<'m>(
        &self,
        reader: Option<&MemReader>,
        module_of: impl Fn(ModuleId) -> Option<&'m Module>,
    ) -> Result<Vec<FunctionCoverage>, crate::process::ProcessError> {
        let mut out = Vec::new();
        for a in &self.arrays {
            let counts = match (&a.last, reader) {
                (Some(c), _) => c.clone(),
                (None, Some(r)) => read_counts(r, a)?,
                (None, None) => vec![0; a.map.len() as usize],
            };
            let count = |k: u32| {
                (!a.unprobed.contains_key(&k)).then(|| counts.get(k as usize).copied().unwrap_or(0))
            };
            out.extend(summarise(&a.map, module_of(a.module), count));
        }
        Ok(out)
    }
}

fn read_counts(
    reader: &MemReader,
    a: &CoverageArray,
) -> Result<Vec<u64>, crate::process::ProcessError> {
    let bytes = reader.read(a.base, a.map.len() as usize * 8)?;
    Ok(bytes
        .chunks_exact(8)
        .map(|c| u64::from_le_bytes(c.try_into().expect("8 bytes")))
        .collect())
}

#[cfg(test)]
#[path = "coverage_tests.rs"]
mod tests;
