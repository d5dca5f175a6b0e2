//! Functions and variables of a binary, stripped or not.
//!
//! Function starts come from five sources, merged by address: `.symtab`, `.dynsym`, PLT stubs
//! (named `name@plt` from their relocations), `.eh_frame` FDEs (exact start and end of nearly
//! every compiled function), and the targets of direct calls. A stripped binary's cold parts
//! are then named after the functions they were split from (`cold.rs`). Each function
//! remembers where its name came from ([`NameSource`]) and which sources saw it ([`Found`]),
//! so users can tell a real name from a made-up `sub_401136`. A stripped binary's separate
//! debug file (Debian's `libc6-dbg`, `-dbgsym` packages) keeps the `.symtab` the binary lost;
//! its names come next, so libc's `start_thread` is not `sub_88ef0`.

#![warn(missing_docs)]

mod cold;
pub mod ehframe;
mod plt;
mod scan;
mod starts;

pub use scan::main_from_entry;
pub use starts::relocated_words;

use std::collections::BTreeMap;

use object::elf;
use object::read::elf::{ElfFile64, ElfSymbol64};
use object::{Endianness, Object, ObjectSymbol, SymbolKind};

use crate::addr::LinkAddr;
use crate::demangle::demangle;
use crate::elf::Binary;

/// Index of a function in its module's [`FunctionTable`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize)]
#[serde(transparent)]
pub struct FuncId(pub u32);

/// Where a function's name came from, best first.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum NameSource {
    /// The full symbol table, `.symtab`.
    Symtab,
    /// The dynamic symbol table, `.dynsym`.
    Dynsym,
    /// The `.symtab` of the separate debug file of a stripped binary.
    DebugSymtab,
    /// A PLT stub, named from its jump-slot relocation.
    Plt,
    /// Inferred from code: `_start` at the ELF entry, `main` from the argument `_start` passes
    /// to `__libc_start_main`, `f.cold` from the function that branches into a cold part.
    Inferred,
    /// No name anywhere: made up from the address.
    Synthetic,
}

impl NameSource {
    /// The source's name as `show functions` prints it (`symtab`, `debug symtab`...).
    pub fn as_str(self) -> &'static str {
        match self {
            NameSource::Symtab => "symtab",
            NameSource::Dynsym => "dynsym",
            NameSource::DebugSymtab => "debug symtab",
            NameSource::Plt => "plt",
            NameSource::Inferred => "inferred",
            NameSource::Synthetic => "synthetic",
        }
    }
}

/// Which discovery sources saw a function start (a bit set).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
#[serde(transparent)]
pub struct Found(u8);

impl Found {
    /// Named in `.symtab` (or the separate debug file's).
    pub const SYMTAB: Found = Found(1);
    /// Named in `.dynsym`.
    pub const DYNSYM: Found = Found(2);
    /// A PLT stub.
    pub const PLT: Found = Found(4);
    /// The start of an `.eh_frame` FDE.
    pub const EH_FRAME: Found = Found(8);
    /// The target of a direct call.
    pub const CALL: Found = Found(16);
    /// The ELF entry point.
    pub const ENTRY: Found = Found(32);
    /// `DT_INIT`/`DT_FINI`, an init or fini array, or a code pointer relocated in data.
    pub const DATA: Found = Found(64);
    /// The target of a tail call into code nothing else bounds.
    pub const TAIL_CALL: Found = Found(128);

    /// True when every source in `other` is also in `self`.
    pub fn contains(self, other: Found) -> bool {
        self.0 & other.0 == other.0
    }

    fn insert(&mut self, other: Found) {
        self.0 |= other.0;
    }

    /// The sources as words, e.g. `["symtab", "eh_frame"]`.
    pub fn names(self) -> Vec<&'static str> {
        [
            (Found::SYMTAB, "symtab"),
            (Found::DYNSYM, "dynsym"),
            (Found::PLT, "plt"),
            (Found::EH_FRAME, "eh_frame"),
            (Found::CALL, "call"),
            (Found::ENTRY, "entry"),
            (Found::DATA, "data"),
            (Found::TAIL_CALL, "tail-call"),
        ]
        .into_iter()
        .filter(|(f, _)| self.contains(*f))
        .map(|(_, n)| n)
        .collect()
    }
}

/// A function: an entry address, a size, and its names.
#[derive(Clone, Debug, serde::Serialize)]
pub struct Function {
    /// Its index in the sorted [`FunctionTable`].
    pub id: FuncId,
    /// The raw (mangled) name, or `sub_ADDR` when it has none.
    pub name: String,
    /// The demangled name, when `name` is a C++ or Rust mangled name.
    pub demangled: Option<String>,
    /// Other symbols at the same address (`__libc_malloc` beside `malloc`).
    pub aliases: Vec<String>,
    /// Its entry address, which is also its lowest.
    pub addr: LinkAddr,
    /// Size in bytes; from the symbol, the FDE, or the distance to the next function.
    pub size: u64,
    /// Where its name came from.
    pub name_source: NameSource,
    /// Every source that saw it start.
    pub found: Found,
    /// True for symbols visible outside the module (`STB_GLOBAL`/`STB_WEAK`).
    pub global: bool,
}

impl Function {
    /// The name to show users: demangled when there is one.
    pub fn display_name(&self) -> &str {
        self.demangled.as_deref().unwrap_or(&self.name)
    }

    /// One past the last byte.
    pub fn end(&self) -> LinkAddr {
        self.addr.offset(self.size)
    }

    /// True when `addr` lies in `[addr, addr + size)`.
    pub fn contains(&self, addr: LinkAddr) -> bool {
        addr >= self.addr && addr < self.end()
    }

    /// True for a part gcc split off a function (`f.cold`, `f.cold.1`; in a stripped binary,
    /// named so after the function that branches into it): the parent's code, not a function
    /// that is called.
    pub fn is_cold_part(&self) -> bool {
        self.name.contains(".cold")
    }
}

/// A data symbol.
#[derive(Clone, Debug, serde::Serialize)]
pub struct Variable {
    /// The raw (mangled) symbol name.
    pub name: String,
    /// The demangled name, when `name` is mangled.
    pub demangled: Option<String>,
    /// Its link address (for TLS variables, its offset in the TLS block).
    pub addr: LinkAddr,
    /// Size in bytes, from the symbol.
    pub size: u64,
    /// Section the variable lives in (`.data`, `.bss`, `.rodata`, `.tbss`, ...).
    pub section: String,
    /// True for symbols visible outside the module (`STB_GLOBAL`/`STB_WEAK`).
    pub global: bool,
    /// True for thread-local variables; `addr` is then an offset in the TLS block.
    pub tls: bool,
}

impl Variable {
    /// The name to show users: demangled when there is one.
    pub fn display_name(&self) -> &str {
        self.demangled.as_deref().unwrap_or(&self.name)
    }
}

/// All functions and variables of one binary, sorted by address.
#[derive(Debug, Default)]
pub struct FunctionTable {
    functions: Vec<Function>,
    variables: Vec<Variable>,
    /// GOT slot address → the imported symbol the dynamic linker writes there.
    got: std::collections::HashMap<u64, String>,
    /// Every name a function answers to in [`FunctionTable::by_name`] → the indexes of the
    /// functions answering to it, ascending. A scan of every function per name made each
    /// snippet compiled at a point cost the whole table (cc1's coverage: 50,000 functions
    /// for each of 600,000 probes).
    names: std::collections::HashMap<String, Vec<u32>>,
}

/// A sink for progress reports during long discovery work.
pub trait Progress: Sync {
    /// `done` of `total` units of work are finished.
    fn update(&self, done: u64, total: u64);

    /// A new step of the work begins (`building control-flow graphs`); the `update`s that
    /// follow count its units, from 0 again. A step with no units still says it is running.
    fn phase(&self, _what: &str) {}

    /// Called between units of the work (each function analysed): a progress that holds the
    /// work to a budget (`consult`'s, [`crate::consult::pace::Pace`]) waits here while the
    /// budget is spent.
    fn pace(&self) {}
}

/// A [`Progress`] that ignores everything.
pub struct NoProgress;

impl Progress for NoProgress {
    fn update(&self, _: u64, _: u64) {}
}

/// A candidate start with everything the sources said about it.
#[derive(Default)]
struct Candidate {
    names: Vec<(String, NameSource, u8)>,
    size: Option<u64>,
    found: Found,
}

impl FunctionTable {
    /// Discovers the functions and variables of `binary`.
    pub fn build(binary: &Binary, progress: &dyn Progress) -> FunctionTable {
        FunctionTable::build_with_debug_file(binary, None, progress)
    }

    /// Like [`FunctionTable::build`], also naming functions from `debug_file`'s `.symtab`
    /// (the separate debug file of `binary`, which must be stripped of its own) .
    pub fn build_with_debug_file(
        binary: &Binary,
        debug_file: Option<&Binary>,
        progress: &dyn Progress,
    ) -> FunctionTable {
        let file = binary.elf();
        let mut cands: BTreeMap<u64, Candidate> = BTreeMap::new();
        let in_code = |addr: u64| {
            binary
                .section_at(LinkAddr(addr))
                .is_some_and(|s| s.is_exec())
        };

        let mut variables = Vec::new();
        let mut seen_vars = std::collections::HashSet::new();
        let mut sink = Symbols {
            binary,
            cands: &mut cands,
            variables: &mut variables,
            seen_vars: &mut seen_vars,
            in_code: &in_code,
        };
        read_symbols(&file, &mut sink);
        if let Some(debug) = debug_file {
            let debug = debug.elf();
            sink.add(debug.symbols(), NameSource::DebugSymtab, Found::SYMTAB);
        }
        let got = plt::got_slot_names(&file);
        for (addr, name) in plt::stubs(binary, &got) {
            let c = cands.entry(addr.0).or_default();
            c.names.push((name, NameSource::Plt, 0));
            c.found.insert(Found::PLT);
            c.size.get_or_insert(plt::STUB_SIZE);
        }
        let in_plt = |addr: u64| {
            binary
                .section_at(LinkAddr(addr))
                .is_some_and(|s| s.name.starts_with(".plt") || s.name == ".iplt")
        };
        for (start, len) in ehframe::fde_ranges(binary) {
            // One FDE covers a whole PLT section; its stubs are named from relocations instead.
            if !in_code(start.0) || in_plt(start.0) {
                continue;
            }
            let c = cands.entry(start.0).or_default();
            c.found.insert(Found::EH_FRAME);
            if len > 0 {
                c.size.get_or_insert(len);
            }
        }
        if let Some(main) = scan::main_from_entry(binary) {
            if in_code(main.0) {
                let c = cands.entry(main.0).or_default();
                c.names.push(("main".to_owned(), NameSource::Inferred, 0));
            }
        }
        if in_code(binary.entry().0) {
            cands
                .entry(binary.entry().0)
                .or_default()
                .found
                .insert(Found::ENTRY);
        }
        for (addr, name) in starts::init_fini(binary) {
            if in_code(addr.0) {
                let c = cands.entry(addr.0).or_default();
                c.names.push((name.to_owned(), NameSource::Inferred, 0));
                c.found.insert(Found::DATA);
            }
        }
        for addr in starts::array_entries(binary) {
            if in_code(addr.0) {
                cands.entry(addr.0).or_default().found.insert(Found::DATA);
            }
        }
        progress.phase("finding functions");
        let branches = scan::branches(binary, progress);
        for target in branches.calls {
            if in_code(target.0) {
                cands.entry(target.0).or_default().found.insert(Found::CALL);
            }
        }
        // Sources that may point inside functions (labels, jumps within one) count only where
        // no function with a known size covers them.
        let known: Vec<(u64, Option<u64>)> = cands.iter().map(|(a, c)| (*a, c.size)).collect();
        let uncovered = |a: u64| {
            let i = known.partition_point(|k| k.0 <= a);
            match i.checked_sub(1).map(|i| known[i]) {
                Some((start, size)) => start == a || size.is_none_or(|s| a >= start + s),
                None => true,
            }
        };
        let mut found_later = Vec::new();
        for addr in starts::relocated_code_pointers(binary) {
            if uncovered(addr.0) {
                found_later.push((addr.0, Found::DATA));
            }
        }
        for addr in starts::tail_call_targets(&known, &branches.jumps) {
            if in_code(addr.0) && !in_plt(addr.0) {
                found_later.push((addr.0, Found::TAIL_CALL));
            }
        }
        for (addr, how) in found_later {
            cands.entry(addr).or_default().found.insert(how);
        }

        let mut functions = finish(binary, cands);
        let jumps = branches.jumps.iter().map(|&(a, t)| (a, t, false));
        let conditional = branches.conditional.iter().map(|&(a, t)| (a, t, true));
        cold::name_fragments(binary, &mut functions, jumps.chain(conditional));
        variables.sort_by_key(|v: &Variable| (v.tls, v.addr));
        let names = name_index(&functions);
        FunctionTable {
            functions,
            variables,
            got,
            names,
        }
    }

    /// Every function, sorted by address; a function's [`FuncId`] is its index here.
    pub fn functions(&self) -> &[Function] {
        &self.functions
    }

    /// Every data symbol, sorted by address, thread-local ones (by TLS offset) last.
    pub fn variables(&self) -> &[Variable] {
        &self.variables
    }

    /// The imported symbol whose address the GOT slot at `addr` holds (`puts` for the slot a
    /// `call [rip+...]` to puts reads).
    pub fn got_slot(&self, addr: LinkAddr) -> Option<&str> {
        self.got.get(&addr.0).map(String::as_str)
    }

    /// The function with id `id`. Panics on an id from another table.
    pub fn get(&self, id: FuncId) -> &Function {
        &self.functions[id.0 as usize]
    }

    /// The function starting exactly at `addr`.
    pub fn at(&self, addr: LinkAddr) -> Option<&Function> {
        self.functions
            .binary_search_by_key(&addr, |f| f.addr)
            .ok()
            .map(|i| &self.functions[i])
    }

    /// The function whose range contains `addr`.
    pub fn containing(&self, addr: LinkAddr) -> Option<&Function> {
        let i = self.functions.partition_point(|f| f.addr <= addr);
        // Nested or overlapping ranges are rare but real: look back a few entries.
        self.functions[..i]
            .iter()
            .rev()
            .take(8)
            .find(|f| f.contains(addr))
    }

    /// The end of the addresses from `addr` on that [`FunctionTable::containing`] maps to the
    /// same function (or to none): the next start, or the first end of a function holding
    /// `addr`, whichever comes first.
    pub fn same_region_until(&self, addr: LinkAddr) -> LinkAddr {
        let i = self.functions.partition_point(|f| f.addr <= addr);
        let mut end = self.functions.get(i).map_or(u64::MAX, |f| f.addr.0);
        for f in self.functions[..i].iter().rev().take(8) {
            if f.end() > addr {
                end = end.min(f.end().0);
            }
        }
        LinkAddr(end)
    }

    /// Functions whose raw, demangled or alias name is exactly `name` (or whose demangled
    /// name is `name` with parameters), in address order.
    pub fn by_name<'a>(&'a self, name: &'a str) -> impl Iterator<Item = &'a Function> + 'a {
        self.names
            .get(name)
            .into_iter()
            .flatten()
            .map(|&i| &self.functions[i as usize])
    }
}

/// The names each function answers to, for [`FunctionTable::by_name`]: its raw name, its
/// demangled name with and without parameters, and its aliases.
fn name_index(functions: &[Function]) -> std::collections::HashMap<String, Vec<u32>> {
    let mut names: std::collections::HashMap<String, Vec<u32>> = std::collections::HashMap::new();
    for (i, f) in functions.iter().enumerate() {
        let demangled = f.demangled.as_deref();
        let keys = std::iter::once(f.name.as_str())
            .chain(demangled)
            .chain(demangled.map(strip_params))
            .chain(f.aliases.iter().map(String::as_str));
        for k in keys {
            let v = names.entry(k.to_owned()).or_default();
            // Functions are visited in order: one already listed under this key is this one.
            if v.last() != Some(&(i as u32)) {
                v.push(i as u32);
            }
        }
    }
    names
}

/// `ns::f(int, char)` → `ns::f`, so users can name C++ functions without their parameters.
pub fn strip_params(demangled: &str) -> &str {
    // A method's qualifiers follow its parameter list: `Klass::get() const`.
    let mut demangled = demangled;
    while let Some(rest) = [" const", " volatile", " &&", " &", " noexcept"]
        .iter()
        .find_map(|q| demangled.strip_suffix(q))
    {
        demangled = rest;
    }
    if !demangled.ends_with(')') {
        return demangled;
    }
    // Find the '(' that opens the final parameter list, skipping nested parentheses.
    let mut depth = 0usize;
    for (i, c) in demangled.char_indices().rev() {
        match c {
            ')' => depth += 1,
            '(' => {
                depth -= 1;
                if depth == 0 {
                    return &demangled[..i];
                }
            }
            _ => {}
        }
    }
    demangled
}

/// Adds the binary's own `.symtab` and `.dynsym`.
fn read_symbols(file: &ElfFile64<'_, Endianness>, sink: &mut Symbols<'_>) {
    sink.add(file.symbols(), NameSource::Symtab, Found::SYMTAB);
    sink.add(file.dynamic_symbols(), NameSource::Dynsym, Found::DYNSYM);
}

/// Where symbol tables' functions and variables go while a table is built.
struct Symbols<'a> {
    binary: &'a Binary,
    cands: &'a mut BTreeMap<u64, Candidate>,
    variables: &'a mut Vec<Variable>,
    /// (name, address) of every variable added, so each is listed once.
    seen_vars: &'a mut std::collections::HashSet<(String, u64)>,
    in_code: &'a dyn Fn(u64) -> bool,
}

impl Symbols<'_> {
    /// Adds one symbol table's functions (names from `source`) and variables.
    fn add<'d: 'f, 'f>(
        &mut self,
        symbols: impl Iterator<Item = ElfSymbol64<'d, 'f, Endianness>>,
        source: NameSource,
        found: Found,
    ) {
        for sym in symbols {
            if sym.is_undefined() {
                continue;
            }
            let Ok(name) = sym.name() else { continue };
            if name.is_empty() {
                continue;
            }
            let st_type = sym.elf_symbol().st_type();
            let bind = sym.elf_symbol().st_bind();
            // Binding rank: a global name is a better primary name than a weak or local one.
            let rank = match bind {
                elf::STB_GLOBAL => 0,
                elf::STB_WEAK => 1,
                _ => 2,
            };
            let global = rank < 2;
            match sym.kind() {
                SymbolKind::Text
                    if (self.in_code)(sym.address()) || st_type == elf::STT_GNU_IFUNC =>
                {
                    let c = self.cands.entry(sym.address()).or_default();
                    c.found.insert(found);
                    if sym.size() > 0 {
                        c.size.get_or_insert(sym.size());
                    }
                    c.names.push((name.to_owned(), source, rank));
                }
                SymbolKind::Data | SymbolKind::Tls => {
                    if !self.seen_vars.insert((name.to_owned(), sym.address())) {
                        continue;
                    }
                    let section = sym
                        .section_index()
                        .and_then(|i| self.binary.sections().iter().find(|s| s.index == i.0))
                        .map(|s| s.name.clone())
                        .unwrap_or_default();
                    self.variables.push(Variable {
                        name: name.to_owned(),
                        demangled: demangle(name),
                        addr: LinkAddr(sym.address()),
                        size: sym.size(),
                        section,
                        global,
                        tls: sym.kind() == SymbolKind::Tls,
                    });
                }
                _ => {}
            }
        }
    }
}

/// Turns candidates into functions: picks names, fills in missing sizes.
fn finish(binary: &Binary, cands: BTreeMap<u64, Candidate>) -> Vec<Function> {
    let starts: Vec<u64> = cands.keys().copied().collect();
    let mut functions = Vec::with_capacity(cands.len());
    for (i, (addr, mut c)) in cands.into_iter().enumerate() {
        let section_end = binary
            .section_at(LinkAddr(addr))
            .map(|s| s.addr.0 + s.size)
            .unwrap_or(addr);
        let size = c.size.unwrap_or_else(|| {
            // No symbol or FDE gave a size: run to the next known start or the section's end.
            let next = starts.get(i + 1).copied().unwrap_or(u64::MAX);
            next.min(section_end).saturating_sub(addr)
        });
        // The name users expect: `puts` (weak) over `_IO_puts` (global), `malloc` over
        // `__libc_malloc`: fewer leading underscores first, then binding, then length.
        c.names.sort_by_key(|(name, source, rank)| {
            let underscores = name.len() - name.trim_start_matches('_').len();
            (*source, underscores, *rank, name.len(), name.clone())
        });
        // One entry per name, its best source first: the debug file's `.symtab` repeats
        // `.dynsym`'s names (`readdir64` from both).
        let mut seen = std::collections::HashSet::new();
        c.names.retain(|(name, _, _)| seen.insert(name.clone()));
        let (name, name_source, global) = match c.names.first() {
            Some((n, s, rank)) => (n.clone(), *s, *rank < 2),
            // The ELF entry point of a stripped executable is crt1's `_start`; name it so,
            // as disassemblers do, so users can find it without knowing its address.
            None if c.found.contains(Found::ENTRY) => {
                ("_start".to_owned(), NameSource::Inferred, false)
            }
            None => (format!("sub_{addr:x}"), NameSource::Synthetic, false),
        };
        let aliases = c.names.iter().skip(1).map(|n| n.0.clone()).collect();
        functions.push(Function {
            id: FuncId(functions.len() as u32),
            demangled: demangle(&name),
            name,
            aliases,
            addr: LinkAddr(addr),
            size,
            name_source,
            found: c.found,
            global,
        });
    }
    functions
}

#[cfg(test)]
mod tests;
