//! A ground truth for analysis: C sources under `tests/corpus/` compiled here with gcc or clang
//! at -O0..-O3, PIE or not, with `-Wl,--emit-relocs` (every jump-table entry stays a relocation
//! in the output) and `-Wa,-L` (every table's label stays a symbol), so the tables and function
//! starts are known without asking gsh. [`grade`] compares gsh's jump tables with them, and the
//! function starts of a stripped copy with the symbol table.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Command;

use engine::symbols::NoProgress;
use engine::{Binary, FunctionTable, LinkAddr};
use object::{Object, ObjectSection, ObjectSymbol, SectionKind};

use crate::truth;

/// The corpus's sources, under `tests/`: switches of every shape, and the plain C mutatees.
pub const SOURCES: &[&str] = &[
    "corpus/switches.c",
    "corpus/cold.c",
    "mutatees/basic.c",
    "mutatees/loops.c",
    "mutatees/noreturn.c",
    "mutatees/tailcall.c",
    "mutatees/recursion.c",
    "mutatees/irreducible.c",
    "mutatees/longjmp.c",
];

/// One build of a source.
#[derive(Clone, Debug)]
pub struct Build {
    pub compiler: &'static str,
    pub opt: &'static str,
    pub pie: bool,
}

impl Build {
    /// Every configuration: the compiler at -O0..-O3, PIE and not.
    pub fn all(compiler: &'static str) -> Vec<Build> {
        let mut out = Vec::new();
        for opt in ["-O0", "-O1", "-O2", "-O3"] {
            for pie in [true, false] {
                out.push(Build { compiler, opt, pie });
            }
        }
        out
    }

    pub fn label(&self) -> String {
        format!(
            "{} {} {}",
            self.compiler,
            self.opt,
            if self.pie { "pie" } else { "no-pie" }
        )
    }

    /// Compiles `source` (a name in [`SOURCES`]) into `dir`, and a stripped copy beside it.
    pub fn compile(&self, source: &str, dir: &Path) -> Result<PathBuf, String> {
        let src = crate::workspace_root().join("tests").join(source);
        let stem = source
            .rsplit('/')
            .next()
            .unwrap_or(source)
            .trim_end_matches(".c");
        self.compile_files(stem, &[src], &[], dir)
    }

    /// Compiles and links `sources` with `flags` (include directories, macros, libraries) into
    /// `dir` as the program `name`, and a stripped copy beside it.
    pub fn compile_files(
        &self,
        name: &str,
        sources: &[PathBuf],
        flags: &[String],
        dir: &Path,
    ) -> Result<PathBuf, String> {
        std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        let out = dir.join(format!(
            "{name}-{}{}-{}",
            self.compiler,
            self.opt,
            if self.pie { "pie" } else { "nopie" }
        ));
        let pie: &[&str] = if self.pie {
            &["-fPIE", "-pie"]
        } else {
            &["-fno-pie", "-no-pie"]
        };
        let o = Command::new(self.compiler)
            .args([self.opt, "-Wl,--emit-relocs", "-Wa,-L"])
            .args(pie)
            .arg("-o")
            .arg(&out)
            .args(sources)
            .args(flags)
            .output()
            .map_err(|e| format!("cannot run {}: {e}", self.compiler))?;
        if !o.status.success() {
            return Err(format!(
                "{} {name} failed: {}",
                self.label(),
                String::from_utf8_lossy(&o.stderr)
            ));
        }
        let stripped = stripped_path(&out);
        let o = Command::new("strip")
            .arg("-o")
            .arg(&stripped)
            .arg(&out)
            .output()
            .map_err(|e| format!("cannot run strip: {e}"))?;
        if !o.status.success() {
            return Err(format!(
                "strip failed: {}",
                String::from_utf8_lossy(&o.stderr)
            ));
        }
        Ok(out)
    }
}

fn stripped_path(path: &Path) -> PathBuf {
    path.with_extension("stripped")
}

/// How gsh did on one build.
#[derive(Clone, Debug, Default)]
pub struct Grade {
    /// Jump tables in the binary (labels in read-only data whose first word is relocated).
    pub tables: usize,
    /// Of them, found by gsh at the right address with exactly the right entries and targets.
    pub tables_exact: usize,
    /// Tables gsh found that start at no table's label.
    pub tables_invented: usize,
    /// What was wrong, one line each.
    pub problems: Vec<String>,
    /// Function starts in the symbol table.
    pub starts: usize,
    /// Of them, found exactly in the stripped copy.
    pub starts_found: usize,
    /// Starts found in the stripped copy strictly inside a function.
    pub starts_inside: usize,
    /// Cold parts in the symbol table (`f.cold`).
    pub cold_parts: usize,
    /// Of them, known in the stripped copy as the cold part of the right function, whose CFG
    /// takes them in.
    pub cold_parts_attached: usize,
    /// Functions of the stripped copy taken for cold parts that are none.
    pub cold_parts_invented: usize,
}

impl Grade {
    /// The figures as the cells of a markdown table row, in the order of the tables that
    /// `xtask ground-truth` and `grade` print: tables, exact, invented, starts, found,
    /// inside, cold parts, attached, invented.
    pub fn cells(&self) -> String {
        [
            self.tables,
            self.tables_exact,
            self.tables_invented,
            self.starts,
            self.starts_found,
            self.starts_inside,
            self.cold_parts,
            self.cold_parts_attached,
            self.cold_parts_invented,
        ]
        .map(|n| n.to_string())
        .join(" | ")
    }
}

/// Grades gsh on the build at `path` (made by [`Build::compile`]).
pub fn grade(path: &Path) -> Result<Grade, String> {
    let mut g = Grade::default();
    let data = std::fs::read(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let file = object::File::parse(&*data).map_err(|e| format!("{}: {e}", path.display()))?;
    // Relocated words and their widths in bytes.
    let mut relocs = BTreeMap::new();
    let mut labels = BTreeSet::new();
    for section in file.sections() {
        // Computed gotos' tables of label addresses live in `.data.rel.ro` in a PIE.
        let relro = section.name().is_ok_and(|n| n.starts_with(".data.rel.ro"));
        if section.kind() != SectionKind::ReadOnlyData && !relro {
            continue;
        }
        relocs.extend(
            section
                .relocations()
                .map(|(offset, r)| (offset, u64::from(r.size() / 8))),
        );
        let range = section.address()..section.address() + section.size();
        labels.extend(
            file.symbols()
                .map(|s| s.address())
                .filter(|a| range.contains(a)),
        );
    }
    let pie = file.kind() == object::ObjectKind::Dynamic;
    let code: Vec<(u64, u64)> = file
        .sections()
        .filter(|s| s.kind() == SectionKind::Text)
        .map(|s| (s.address(), s.address() + s.size()))
        .collect();
    let in_code = |a: u64| code.iter().any(|&(s, e)| a >= s && a < e);
    // A switch's table in a PIE holds 4-byte offsets from its start; a computed goto's
    // table of label addresses (`static void *disptab[]`) holds 8-byte addresses in any
    // build. The relocation at a table's start says which.
    let read = |at: u64, base: u64, stride: u64| -> Option<u64> {
        let s = file
            .sections()
            .find(|s| at >= s.address() && at + stride <= s.address() + s.size())?;
        let d = s.data().ok()?;
        let off = (at - s.address()) as usize;
        let bytes = d.get(off..off + stride as usize)?;
        Some(if stride == 8 {
            u64::from_le_bytes(bytes.try_into().ok()?)
        } else {
            base.wrapping_add(i32::from_le_bytes(bytes.try_into().ok()?) as i64 as u64)
        })
    };
    let functions = truth::symtab_functions(path);
    // The truth: each label whose first word is relocated starts a table, which runs to the
    // next label or the first word no relocation fills.
    let mut truth: BTreeMap<u64, (u64, BTreeSet<u64>)> = BTreeMap::new();
    for &start in &labels {
        let Some(&width) = relocs.get(&start) else {
            continue;
        };
        let stride = match (pie, width) {
            (true, 8) | (false, _) => 8,
            _ => 4,
        };
        let end = labels
            .range(start + 1..)
            .next()
            .copied()
            .unwrap_or(u64::MAX);
        let mut at = start;
        let mut targets = BTreeSet::new();
        while at < end && relocs.contains_key(&at) {
            targets.extend(read(at, start, stride));
            at += stride;
        }
        // A lookup table of data (clang's `.Lswitch.table`, strings) is no jump table, nor is
        // an array of functions (a non-PIE's `const` callbacks live in `.rodata`): a jump
        // table leads into one function, never to a function's start.
        // A function and its cold part count as one.
        // clang places an unreachable default's label after a function's last instruction,
        // in the padding before the next function: that is still the switch's function.
        // A cold part's first instruction is its parent's code too: gcc's switch may jump
        // straight to it (lua's `genlink` sends its unreachable cases to `genlink.cold`).
        let starts_one = |t: u64| functions.iter().any(|f| f.addr == t);
        let home = |t: u64| {
            functions
                .iter()
                .find(|f| {
                    let from = t > f.addr || (t == f.addr && f.name.contains(".cold"));
                    from && (t < f.addr + f.size || (t == f.addr + f.size && !starts_one(t)))
                })
                .map(|f| f.name.split(".cold").next().unwrap_or_default())
        };
        let first = targets.first().and_then(|&t| home(t));
        let one_function = first.is_some() && targets.iter().all(|&t| home(t) == first);
        if targets.iter().all(|&t| in_code(t)) && !targets.is_empty() && one_function {
            truth.insert(start, ((at - start) / stride, targets));
        }
    }
    g.tables = truth.len();

    let mut session = engine::Session::new();
    session.open(path).map_err(|e| e.to_string())?;
    let module = session.main().map_err(|e| e.to_string())?;
    let analysis = module.analysis();
    let mut seen = BTreeSet::new();
    // Per table (several jumps may read one, a computed goto's at every dispatch): exact when
    // every jump read it exactly.
    let mut exact: BTreeMap<u64, bool> = BTreeMap::new();
    let mut invented = BTreeSet::new();
    for f in module.functions().functions() {
        for t in &analysis.function(f.id).cfg.jump_tables {
            if !seen.insert(t.jump) {
                continue;
            }
            let found: BTreeSet<u64> = t.targets.iter().map(|a| a.0).collect();
            match truth.get(&t.table.0) {
                Some((entries, targets)) if *entries == t.entries && *targets == found => {
                    exact.entry(t.table.0).or_insert(true);
                }
                Some((entries, _)) => {
                    exact.insert(t.table.0, false);
                    g.problems.push(format!(
                        "table {:#x} of {}: {} entries read, {entries} in the table",
                        t.table, f.name, t.entries
                    ))
                }
                None => {
                    if invented.insert(t.table.0) {
                        g.problems
                            .push(format!("table {:#x} of {} is no table", t.table, f.name));
                    }
                }
            }
        }
    }
    g.tables_exact = exact.values().filter(|&&e| e).count();
    g.tables_invented = invented.len();
    let found_at: BTreeSet<u64> = module
        .functions()
        .functions()
        .iter()
        .flat_map(|f| {
            analysis
                .function(f.id)
                .cfg
                .jump_tables
                .iter()
                .map(|t| t.table.0)
        })
        .collect();
    for start in truth.keys().filter(|s| !found_at.contains(s)) {
        g.problems.push(format!("table {start:#x} not found"));
    }

    let starts = truth::symtab_function_starts(path);
    let stripped = Binary::open(&stripped_path(path)).map_err(|e| e.to_string())?;
    let table = FunctionTable::build(&stripped, &NoProgress);
    g.starts = starts.len();
    for f in &starts {
        if table.at(LinkAddr(f.addr)).is_some() {
            g.starts_found += 1;
        } else {
            g.problems.push(format!(
                "{} at {:#x} not found when stripped",
                f.name, f.addr
            ));
        }
    }
    for found in table.functions() {
        let a = found.addr.0;
        if let Some(f) = starts.iter().find(|f| a > f.addr && a < f.addr + f.size) {
            g.starts_inside += 1;
            g.problems
                .push(format!("{} invented inside {}", found.name, f.name));
        }
    }
    grade_cold_parts(&mut g, &starts, &stripped_path(path))?;
    Ok(g)
}

/// Grades the stripped copy at `stripped` on the cold parts of `starts` (the unstripped
/// symbol table): each `f.cold` must be named after the function at `f`'s address, and `f`'s
/// CFG must hold its start as a block; no other function may be taken for a cold part.
fn grade_cold_parts(
    g: &mut Grade,
    starts: &[truth::SymtabFunc],
    stripped: &Path,
) -> Result<(), String> {
    let mut session = engine::Session::new();
    session.open(stripped).map_err(|e| e.to_string())?;
    let module = session.main().map_err(|e| e.to_string())?;
    let table = module.functions();
    let analysis = module.analysis();
    for cold in starts.iter().filter(|f| f.name.contains(".cold")) {
        g.cold_parts += 1;
        let parent_name = cold.name.split(".cold").next().unwrap_or_default();
        let parent = starts
            .iter()
            .find(|f| f.name == parent_name)
            .and_then(|f| table.at(LinkAddr(f.addr)));
        let part = table.at(LinkAddr(cold.addr));
        let attached = match (parent, part) {
            (Some(p), Some(c)) => {
                c.is_cold_part()
                    && c.name.starts_with(&format!("{}.cold", p.name))
                    && analysis.function(p.id).cfg.block_at(c.addr).is_some()
            }
            _ => false,
        };
        if attached {
            g.cold_parts_attached += 1;
        } else {
            g.problems.push(format!(
                "{} at {:#x} is not attached to its parent when stripped (found as {:?})",
                cold.name,
                cold.addr,
                part.map(|c| &c.name)
            ));
        }
    }
    for f in table.functions().iter().filter(|f| f.is_cold_part()) {
        let real = starts
            .iter()
            .any(|s| s.addr == f.addr.0 && s.name.contains(".cold"));
        if !real {
            g.cold_parts_invented += 1;
            g.problems
                .push(format!("{} at {:#x} is no cold part", f.name, f.addr));
        }
    }
    Ok(())
}
