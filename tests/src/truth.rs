//! Ground truth about a binary, read without the engine: `nm`, `objdump`, and a direct walk of
//! `.symtab` with the `object` crate. Tests and xtask grade the engine against these.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::sync::{Mutex, OnceLock};

use object::read::elf::ElfFile64;
use object::{Endianness, Object, ObjectSection, ObjectSymbol, SectionKind, SymbolKind};

use crate::command::run_tool;

/// One symbol as `nm` prints it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NmSymbol {
    pub addr: u64,
    /// nm's type letter: `T`/`t` text, `W`/`w` weak, `i` indirect function, ...
    pub kind: char,
    pub name: String,
}

/// `nm --defined-only FILE`: every defined symbol with an address. Each file is read by `nm`
/// once per process: many tests ask about the same few builds.
pub fn nm_defined(path: &Path) -> Vec<NmSymbol> {
    static CACHE: OnceLock<Mutex<HashMap<PathBuf, Vec<NmSymbol>>>> = OnceLock::new();
    let cache = CACHE.get_or_init(Default::default);
    // The map is only ever inserted into, so a panic elsewhere cannot leave it half-written.
    let lock = || {
        cache
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    };
    if let Some(symbols) = lock().get(path) {
        return symbols.clone();
    }
    let symbols = run_nm(path);
    lock().insert(path.to_owned(), symbols.clone());
    symbols
}

fn run_nm(path: &Path) -> Vec<NmSymbol> {
    let out = run_tool(
        "nm",
        &[std::ffi::OsStr::new("--defined-only"), path.as_os_str()],
    );
    out.lines()
        .filter_map(|line| {
            let mut parts = line.split_whitespace();
            let addr = u64::from_str_radix(parts.next()?, 16).ok()?;
            let kind = parts.next()?.chars().next()?;
            let name = parts.next()?.to_owned();
            Some(NmSymbol { addr, kind, name })
        })
        .collect()
}

/// The function symbols `nm` reports in code sections: text (`T`/`t`), weak (`W`/`w`) and
/// indirect (`i`) symbols whose address lies in an executable section.
pub fn nm_functions(path: &Path) -> Vec<NmSymbol> {
    let code = code_ranges(path);
    nm_defined(path)
        .into_iter()
        .filter(|s| matches!(s.kind, 'T' | 't' | 'W' | 'w' | 'i'))
        .filter(|s| code.iter().any(|&(lo, hi)| s.addr >= lo && s.addr < hi))
        .collect()
}

/// The address ranges of the executable sections of the ELF file at `path`.
pub fn code_ranges(path: &Path) -> Vec<(u64, u64)> {
    let data = read(path);
    let file = parse(path, &data);
    file.sections()
        .filter(|s| s.kind() == SectionKind::Text && s.size() > 0)
        .map(|s| (s.address(), s.address() + s.size()))
        .collect()
}

/// A `STT_FUNC` symbol from `.symtab`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SymtabFunc {
    pub addr: u64,
    pub size: u64,
    pub name: String,
}

/// The distinct function starts in `.symtab` of `path`: `STT_FUNC` symbols with a size, defined
/// in an executable section, one per address (the first name seen). Works on separate debug
/// files too, whose sections keep their flags though their bytes are gone.
pub fn symtab_functions(path: &Path) -> Vec<SymtabFunc> {
    let mut all = symtab_function_starts(path);
    all.retain(|f| f.size > 0);
    all
}

/// Like [`symtab_functions`], with the `STT_FUNC` symbols of size 0 too: crt's `_init`,
/// `_fini`, `frame_dummy`, `register_tm_clones`, written in assembly or without a size.
pub fn symtab_function_starts(path: &Path) -> Vec<SymtabFunc> {
    let data = read(path);
    let file = parse(path, &data);
    let mut by_addr: BTreeMap<u64, SymtabFunc> = BTreeMap::new();
    for sym in file.symbols() {
        if sym.kind() != SymbolKind::Text || sym.is_undefined() {
            continue;
        }
        if sym.elf_symbol().st_type() != object::elf::STT_FUNC {
            continue;
        }
        let Some(index) = sym.section_index() else {
            continue;
        };
        let Ok(section) = file.section_by_index(index) else {
            continue;
        };
        let flags = match section.flags() {
            object::SectionFlags::Elf { sh_flags } => sh_flags,
            _ => 0,
        };
        if flags & u64::from(object::elf::SHF_EXECINSTR) == 0 {
            continue;
        }
        by_addr.entry(sym.address()).or_insert_with(|| SymtabFunc {
            addr: sym.address(),
            size: sym.size(),
            name: sym.name().unwrap_or("").to_owned(),
        });
    }
    by_addr.into_values().collect()
}

/// The address of every function symbol in `.symtab` and `.dynsym` of `path`, sized or not:
/// the starts a function table may report without making anything up.
pub fn all_function_symbols(path: &Path) -> std::collections::HashSet<u64> {
    let data = read(path);
    let file = parse(path, &data);
    file.symbols()
        .chain(file.dynamic_symbols())
        .filter(|s| s.kind() == SymbolKind::Text && !s.is_undefined())
        .map(|s| s.address())
        .collect()
}

/// True when the file at `path` has a `.symtab`.
pub fn has_symtab(path: &Path) -> bool {
    let data = read(path);
    parse(path, &data).section_by_name(".symtab").is_some()
}

/// PLT stubs as `objdump -d` names them: `(address, "puts@plt")`.
pub fn objdump_plt_stubs(path: &Path) -> Vec<(u64, String)> {
    let out = run_tool(
        "objdump",
        &[
            std::ffi::OsStr::new("-d"),
            std::ffi::OsStr::new("--no-show-raw-insn"),
            path.as_os_str(),
        ],
    );
    out.lines()
        .filter_map(|line| {
            // `0000000000001030 <puts@plt>:`
            let (addr, rest) = line.split_once(" <")?;
            let name = rest.strip_suffix(">:")?;
            if !name.ends_with("@plt") || name.contains('+') {
                return None;
            }
            Some((u64::from_str_radix(addr.trim(), 16).ok()?, name.to_owned()))
        })
        .collect()
}

/// The system's separate debug file for `path`, `/usr/lib/debug/.build-id/xx/rest.debug`, when
/// the file has a build id and the file exists.
pub fn system_debug_file(path: &Path) -> Option<PathBuf> {
    let data = std::fs::read(path).ok()?;
    let file = ElfFile64::<Endianness>::parse(&*data).ok()?;
    let id = file.build_id().ok()??;
    if id.len() < 2 {
        return None;
    }
    let hex: String = id.iter().map(|b| format!("{b:02x}")).collect();
    let p = PathBuf::from("/usr/lib/debug/.build-id")
        .join(&hex[..2])
        .join(format!("{}.debug", &hex[2..]));
    p.is_file().then_some(p)
}

fn read(path: &Path) -> Vec<u8> {
    std::fs::read(path).unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()))
}

fn parse<'a>(path: &Path, data: &'a [u8]) -> ElfFile64<'a, Endianness> {
    ElfFile64::parse(data)
        .unwrap_or_else(|e| panic!("{} is not a 64-bit ELF file: {e}", path.display()))
}
