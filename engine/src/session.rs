//! A session: the modules gsh has open, and the resolution of what users type (`main`,
//! `libc.so.6!malloc`, `0x401136`, `'parse_*'`) into functions.
//!
//! Modules are analysed lazily: a module's function table is built the first time something
//! asks for it, and its DWARF the first time a source-level question is asked.

#![warn(missing_docs)]

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::OnceLock;

use globset::GlobMatcher;
use regex::Regex;

use crate::addr::LinkAddr;
use crate::analysis::Analysis;
use crate::dwarf::{locate, DebugInfo};
use crate::elf::Binary;
use crate::error::{Error, Result};
use crate::symbols::{
    strip_params, FuncId, Function, FunctionTable, NoProgress, Progress, Variable,
};

/// Index of a module in its [`Session`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize)]
#[serde(transparent)]
pub struct ModuleId(pub u32);

/// A function of a module.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize)]
pub struct FuncRef {
    /// The module it belongs to.
    pub module: ModuleId,
    /// Its index in that module's function table.
    pub func: FuncId,
}

/// One loaded ELF object and what has been learned about it so far.
pub struct Module {
    /// Its index in [`Session::modules`]; the main module is 0.
    pub id: ModuleId,
    /// The file name users type (`libc.so.6`, `ls`).
    pub name: String,
    /// The opened, validated ELF file.
    pub binary: Binary,
    /// True for the executable (or library) the session was opened on.
    pub is_main: bool,
    table: OnceLock<FunctionTable>,
    analysis: OnceLock<Analysis>,
    debug: OnceLock<Option<DebugInfo>>,
    debug_dirs: Vec<PathBuf>,
}

impl Module {
    pub(crate) fn new(
        id: ModuleId,
        binary: Binary,
        is_main: bool,
        debug_dirs: Vec<PathBuf>,
    ) -> Module {
        // A file deleted or replaced since a process mapped it is read through a link to it
        // (`/proc/PID/exe`, `/proc/PID/map_files/START-END`); users know it by the name the
        // link gives, `NAME (deleted)`, not by the link's own (`exe`, `START-END`).
        let named = std::fs::read_link(binary.path())
            .ok()
            .filter(|t| t.as_os_str().as_encoded_bytes().ends_with(b" (deleted)"))
            .unwrap_or_else(|| binary.path().to_owned());
        let name = named
            .file_name()
            .map(|n| {
                let n = n.to_string_lossy();
                n.strip_suffix(" (deleted)").unwrap_or(&n).to_owned()
            })
            .unwrap_or_else(|| binary.path().display().to_string());
        Module {
            id,
            name,
            binary,
            is_main,
            table: OnceLock::new(),
            analysis: OnceLock::new(),
            debug: OnceLock::new(),
            debug_dirs,
        }
    }

    /// The module's functions and variables, discovered on first call.
    pub fn functions(&self) -> &FunctionTable {
        self.functions_with(&NoProgress)
    }

    /// Like [`Module::functions`], reporting progress if the table must be built now.
    pub fn functions_with(&self, progress: &dyn Progress) -> &FunctionTable {
        self.table.get_or_init(|| {
            let debug = self.debug_file_symbols();
            FunctionTable::build_with_debug_file(&self.binary, debug.as_ref(), progress)
        })
    }

    /// The separate debug file, opened for its `.symtab`, when the binary has none of its
    /// own (stripped, as Debian's libraries are, with `libc6-dbg` or a `-dbgsym` package
    /// installed).
    fn debug_file_symbols(&self) -> Option<Binary> {
        if self.binary.sections().iter().any(|s| s.name == ".symtab") {
            return None;
        }
        let path = crate::dwarf::locate::separate_debug_file(&self.binary, &self.debug_dirs)?;
        Binary::open(&path).ok()
    }

    /// CFGs, loops, call graph and metrics of every function, computed on first call.
    pub fn analysis(&self) -> &Analysis {
        self.analysis_with(&NoProgress)
    }

    /// Like [`Module::analysis`], reporting progress if the analysis must run now.
    pub fn analysis_with(&self, progress: &dyn Progress) -> &Analysis {
        self.analysis.get_or_init(|| {
            let table = self.functions_with(progress);
            Analysis::run(&self.binary, table, progress)
        })
    }

    /// Runs the whole-module analysis, reporting to `progress`, beside the module's own
    /// ([`Module::analysis`]) rather than inside it, and keeps it unless another caller's
    /// finished first. `progress` may hold it back for long (`consult`'s pace): whoever asks
    /// for the analysis meanwhile runs it without waiting for this one, and this one runs on
    /// threads of its own, holding none of those everyone else's parallel work runs on.
    /// Held inside, `consult`'s paced analysis held the stack sampler and the tracer thread,
    /// which the pace needed to see the search's cost fall before it let the analysis go on.
    pub fn analyse_aside(&self, progress: &dyn Progress) {
        if self.analysis_ready() {
            return;
        }
        let table = self.functions();
        let run = || Analysis::run(&self.binary, table, progress);
        let analysis = match rayon::ThreadPoolBuilder::new()
            .thread_name(|i| format!("gsh-aside-{i}"))
            .build()
        {
            Ok(pool) => pool.install(run),
            Err(_) => run(),
        };
        // Another caller's, finished first, is kept: the two are the same.
        let _ = self.analysis.set(analysis);
    }

    /// True when the whole-module analysis has run already.
    pub fn analysis_ready(&self) -> bool {
        self.analysis.get().is_some()
    }

    /// True when the function table has been built already.
    pub fn functions_ready(&self) -> bool {
        self.table.get().is_some()
    }

    /// The module's DWARF, loaded on first call; `None` when it has none.
    pub fn debug_info(&self) -> Option<&DebugInfo> {
        self.debug
            .get_or_init(|| DebugInfo::load(&self.binary, &self.debug_dirs))
            .as_ref()
    }

    /// `name+0x12` for an address inside a function of this module.
    pub fn describe(&self, addr: LinkAddr) -> Option<String> {
        let f = self.functions().containing(addr)?;
        let off = addr.0 - f.addr.0;
        Some(if off == 0 {
            f.display_name().to_owned()
        } else {
            format!("{}+{off:#x}", f.display_name())
        })
    }
}

/// A `DT_NEEDED` entry and where the dynamic linker would find it.
#[derive(Clone, Debug, serde::Serialize)]
pub struct Library {
    /// The name as written in `DT_NEEDED` (`libc.so.6`).
    pub name: String,
    /// The file the dynamic linker would load; `None` when none is found.
    pub path: Option<PathBuf>,
}

/// How a pattern matches names.
pub enum Matcher {
    /// Every name.
    All,
    /// A shell-style glob, matched against the whole name.
    Glob(GlobMatcher),
    /// A regular expression, matched anywhere in the name.
    Regex(Regex),
}

impl Matcher {
    /// A shell-style glob (`parse_*`, `*::push*`), matched against the whole name.
    pub fn glob(pattern: &str) -> Result<Matcher> {
        let glob = globset::GlobBuilder::new(pattern)
            .literal_separator(false)
            .backslash_escape(true)
            .build()
            .map_err(|e| Error::BadPattern {
                pattern: pattern.to_owned(),
                detail: e.kind().to_string(),
            })?;
        Ok(Matcher::Glob(glob.compile_matcher()))
    }

    /// A regular expression, matched anywhere in the name.
    pub fn regex(pattern: &str) -> Result<Matcher> {
        Regex::new(pattern)
            .map(Matcher::Regex)
            .map_err(|e| Error::BadPattern {
                pattern: pattern.to_owned(),
                detail: e
                    .to_string()
                    .lines()
                    .last()
                    .unwrap_or("invalid")
                    .trim()
                    .to_owned(),
            })
    }

    fn is_match(&self, s: &str) -> bool {
        match self {
            Matcher::All => true,
            Matcher::Glob(g) => g.is_match(s),
            Matcher::Regex(r) => r.is_match(s),
        }
    }

    /// True when any of the function's names matches: raw, demangled, demangled without its
    /// parameter list, or an alias.
    pub fn matches_function(&self, f: &Function) -> bool {
        self.is_match(&f.name)
            || f.demangled
                .as_deref()
                .is_some_and(|d| self.is_match(d) || self.is_match(strip_params(d)))
            || f.aliases.iter().any(|a| self.is_match(a))
    }

    /// True when the variable's raw or demangled name matches.
    pub fn matches_variable(&self, v: &Variable) -> bool {
        self.is_match(&v.name) || v.demangled.as_deref().is_some_and(|d| self.is_match(d))
    }
}

/// True when `s` contains glob metacharacters.
pub fn is_glob(s: &str) -> bool {
    s.contains(['*', '?', '['])
}

/// The modules gsh has open.
pub struct Session {
    modules: Vec<Arc<Module>>,
    debug_dirs: Vec<PathBuf>,
}

impl Default for Session {
    fn default() -> Self {
        Session::new()
    }
}

impl Session {
    /// An empty session, with the default debug directories (or those in `GSH_DEBUG_DIRS`, a
    /// colon-separated list, when set).
    pub fn new() -> Session {
        let debug_dirs = match std::env::var_os("GSH_DEBUG_DIRS") {
            Some(v) => std::env::split_paths(&v).collect(),
            None => locate::default_debug_dirs(),
        };
        Session {
            modules: Vec::new(),
            debug_dirs,
        }
    }

    /// Sets where separate debug files are looked for; applies to modules opened afterwards.
    pub fn set_debug_dirs(&mut self, dirs: Vec<PathBuf>) {
        self.debug_dirs = dirs;
    }

    /// Opens `path` as the main module, closing whatever was open.
    pub fn open(&mut self, path: &Path) -> Result<ModuleId> {
        let binary = Binary::open(path)?;
        self.modules.clear();
        self.modules.push(Arc::new(Module::new(
            ModuleId(0),
            binary,
            true,
            self.debug_dirs.clone(),
        )));
        Ok(ModuleId(0))
    }

    /// The main module.
    pub fn main(&self) -> Result<&Module> {
        self.modules.first().map(|m| &**m).ok_or(Error::NothingOpen)
    }

    /// The open modules: the main one first, then libraries in the order they were loaded.
    pub fn modules(&self) -> &[Arc<Module>] {
        &self.modules
    }

    /// The module with id `id`. Panics on an id from another session.
    pub fn module(&self, id: ModuleId) -> &Module {
        &self.modules[id.0 as usize]
    }

    /// The function `r` names. Panics on a reference from another session.
    pub fn func(&self, r: FuncRef) -> &Function {
        self.module(r.module).functions().get(r.func)
    }

    /// The main module's `DT_NEEDED` libraries and where each resolves.
    pub fn libraries(&self) -> Result<Vec<Library>> {
        let main = self.main()?;
        Ok(main
            .binary
            .needed()
            .iter()
            .map(|name| Library {
                name: name.clone(),
                path: resolve_library(name, &main.binary),
            })
            .collect())
    }

    /// The module named `name` (file name, soname, or path); a library the main module needs is
    /// loaded on first mention.
    pub fn find_module(&mut self, name: &str) -> Result<ModuleId> {
        if let Some(m) = self.modules.iter().find(|m| {
            m.name == name || m.binary.soname() == Some(name) || m.binary.path() == Path::new(name)
        }) {
            return Ok(m.id);
        }
        let main = self.main()?;
        let wanted = main
            .binary
            .needed()
            .iter()
            .find(|n| *n == name || n.split(".so").next() == Some(name))
            .cloned();
        let path = match wanted {
            Some(n) => resolve_library(&n, &main.binary),
            None if name.contains('/') => Some(PathBuf::from(name)),
            None => None,
        };
        let path = path.ok_or_else(|| Error::UnknownModule {
            name: name.to_owned(),
        })?;
        self.load_module(&path)
    }

    /// Opens another ELF file as a module of this session.
    pub fn load_module(&mut self, path: &Path) -> Result<ModuleId> {
        self.main()?;
        let binary = Binary::open(path)?;
        let id = ModuleId(self.modules.len() as u32);
        self.modules.push(Arc::new(Module::new(
            id,
            binary,
            false,
            self.debug_dirs.clone(),
        )));
        Ok(id)
    }

    /// A shared handle on a module, for work that outlives a borrow of the session (the
    /// live-process layer applies pending instrumentation when a library appears).
    pub fn module_arc(&self, id: ModuleId) -> Arc<Module> {
        self.modules[id.0 as usize].clone()
    }

    /// The module opened from `path` (compared after resolving symlinks), opening it when no
    /// module is: a live process's libraries join the session this way.
    pub fn module_for_path(&mut self, path: &Path) -> Result<ModuleId> {
        let canon = |p: &Path| std::fs::canonicalize(p).unwrap_or_else(|_| p.to_owned());
        let want = canon(path);
        if let Some(m) = self.modules.iter().find(|m| canon(m.binary.path()) == want) {
            return Ok(m.id);
        }
        self.load_module(path)
    }

    /// Resolves a function as users name it: `NAME`, `MODULE!NAME`, `0xADDR` (the function
    /// containing it), or a glob (`'parse_*'`) that may select many. Names are looked up in
    /// the main module first, then in the other open modules.
    pub fn resolve_functions(&mut self, spec: &str) -> Result<Vec<FuncRef>> {
        self.main()?;
        let (modules, name) = match spec.split_once('!') {
            Some((m, n)) => (vec![self.find_module(m)?], n),
            None => ((0..self.modules.len() as u32).map(ModuleId).collect(), spec),
        };
        if let Some(hex) = name.strip_prefix("0x").or_else(|| name.strip_prefix("0X")) {
            let addr = u64::from_str_radix(hex, 16).map_err(|_| Error::UnknownFunction {
                name: spec.to_owned(),
                hint: "; addresses are written 0x401136".into(),
            })?;
            for &m in &modules {
                let module = self.module(m);
                if let Some(f) = module.functions().containing(LinkAddr(addr)) {
                    return Ok(vec![FuncRef {
                        module: m,
                        func: f.id,
                    }]);
                }
            }
            return Err(Error::UnknownFunction {
                name: spec.to_owned(),
                hint: "; no function contains that address".into(),
            });
        }
        let matcher = if is_glob(name) {
            Some(Matcher::glob(name)?)
        } else {
            None
        };
        for &m in &modules {
            let table = self.module(m).functions();
            let found: Vec<FuncRef> = match &matcher {
                Some(g) => table
                    .functions()
                    .iter()
                    .filter(|f| g.matches_function(f))
                    .map(|f| FuncRef {
                        module: m,
                        func: f.id,
                    })
                    .collect(),
                None => table
                    .by_name(name)
                    .map(|f| FuncRef {
                        module: m,
                        func: f.id,
                    })
                    .collect(),
            };
            if !found.is_empty() {
                return Ok(found);
            }
        }
        let hint = self
            .nearest_function_name(name, &modules)
            .map(|n| format!("; did you mean `{n}`?"))
            .unwrap_or_else(|| "; `find function REGEX` searches".into());
        Err(Error::UnknownFunction {
            name: spec.to_owned(),
            hint,
        })
    }

    /// The function name closest to `name`, for "did you mean" hints.
    pub fn nearest_function_name(&self, name: &str, modules: &[ModuleId]) -> Option<String> {
        let names = modules.iter().flat_map(|&m| {
            self.module(m)
                .functions()
                .functions()
                .iter()
                .map(|f| f.demangled.as_deref().map(strip_params).unwrap_or(&f.name))
        });
        crate::suggest::closest(name, names).map(str::to_owned)
    }
}

/// Where the dynamic linker would find `name` for `binary`: its `DT_RUNPATH`/`DT_RPATH` (with
/// `$ORIGIN`), `LD_LIBRARY_PATH`, then the system directories.
pub fn resolve_library(name: &str, binary: &Binary) -> Option<PathBuf> {
    if name.contains('/') {
        let p = PathBuf::from(name);
        return p.is_file().then_some(p);
    }
    let origin = binary
        .path()
        .canonicalize()
        .ok()
        .and_then(|p| p.parent().map(Path::to_owned))
        .unwrap_or_default();
    let mut dirs: Vec<PathBuf> = binary
        .runpath()
        .iter()
        .map(|d| PathBuf::from(d.replace("$ORIGIN", &origin.to_string_lossy())))
        .collect();
    if let Some(v) = std::env::var_os("LD_LIBRARY_PATH") {
        dirs.extend(std::env::split_paths(&v));
    }
    for d in [
        "/lib/x86_64-linux-gnu",
        "/usr/lib/x86_64-linux-gnu",
        "/lib64",
        "/usr/lib64",
        "/lib",
        "/usr/lib",
        "/usr/local/lib",
    ] {
        dirs.push(PathBuf::from(d));
    }
    dirs.into_iter().map(|d| d.join(name)).find(|p| p.is_file())
}

/// The patcher's view of a module: its file's bytes, its functions and their CFGs (running
/// the whole-module analysis on first use).
impl crate::code::CodeBytes for Module {
    fn bytes_at(&self, addr: LinkAddr, len: u64) -> Option<&[u8]> {
        self.binary.bytes_at(addr, len)
    }
}

impl crate::code::CodeView for Module {
    fn functions(&self) -> &[Function] {
        Module::functions(self).functions()
    }

    fn cfg(&self, f: FuncId) -> &crate::cfg::Cfg {
        &self.analysis().function(f).cfg
    }
}
