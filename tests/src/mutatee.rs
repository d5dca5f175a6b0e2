//! Mutatees: the C and C++ programs under `tests/mutatees/`, compiled by the machine's gcc in
//! fixed variants into `<target>/mutatees/<name>-<variant>`.
//!
//! Each artefact is built at most once per process (a `OnceLock` per artefact) and reused
//! across runs while its recipe (compiler, flags, source contents) is unchanged, recorded in a
//! `.stamp` file beside it. Builds happen in a private temporary directory and are renamed into
//! place, so test binaries or xtask running at the same time never see a half-written file.

use std::collections::HashMap;
use std::hash::{Hash, Hasher};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

use crate::command::run_tool;
use crate::paths::{mutatee_source_dir, target_dir};

/// Every mutatee program, by name (the source file's stem).
pub const MUTATEES: &[&str] = &[
    "basic",
    "loops",
    "noreturn",
    "tailcall",
    "threads",
    "cxx",
    "irreducible",
    "fpregs",
    "longjmp",
    "recursion",
];

/// Every mutatee shared library, by name. Names starting with `lib` build with
/// `-shared -fPIC` into `NAME-VARIANT.so`; they have no PIE or non-PIE variants.
pub const LIBRARIES: &[&str] = &["libshared"];

/// How a mutatee is compiled.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Variant {
    /// `-O0 -g`, the compiler's default PIE-ness (PIE on Debian and Ubuntu).
    O0,
    /// `-O2 -g`.
    O2,
    /// The `O2` build with `strip`: no `.symtab`, no DWARF.
    Stripped,
    /// `-O2 -g -fPIE -pie`.
    Pie,
    /// `-O2 -g -fno-pie -no-pie`: an `ET_EXEC` loaded at its link addresses.
    NoPie,
    /// The `O2` build with its DWARF moved into `<name>-debuglink.debug` beside it
    /// (`objcopy --only-keep-debug`, `strip --strip-debug`, `objcopy --add-gnu-debuglink`).
    /// The `.symtab` stays in the executable.
    SeparateDebug,
}

impl Variant {
    /// Every variant.
    pub const ALL: [Variant; 6] = [
        Variant::O0,
        Variant::O2,
        Variant::Stripped,
        Variant::Pie,
        Variant::NoPie,
        Variant::SeparateDebug,
    ];

    /// The variants that keep a `.symtab`.
    pub const WITH_SYMTAB: [Variant; 5] = [
        Variant::O0,
        Variant::O2,
        Variant::Pie,
        Variant::NoPie,
        Variant::SeparateDebug,
    ];

    /// The file-name suffix, also the word scripts use (`# mutatee: basic O2`).
    pub fn suffix(self) -> &'static str {
        match self {
            Variant::O0 => "O0",
            Variant::O2 => "O2",
            Variant::Stripped => "stripped",
            Variant::Pie => "pie",
            Variant::NoPie => "nopie",
            Variant::SeparateDebug => "debuglink",
        }
    }

    /// The variant named by `word` (its suffix, any case).
    pub fn parse(word: &str) -> Option<Variant> {
        Variant::ALL
            .into_iter()
            .find(|v| v.suffix().eq_ignore_ascii_case(word))
    }

    /// Compiler flags for the variants gcc builds directly; `None` for those derived from `O2`.
    fn flags(self) -> Option<&'static [&'static str]> {
        match self {
            Variant::O0 => Some(&["-O0", "-g"]),
            Variant::O2 => Some(&["-O2", "-g"]),
            Variant::Pie => Some(&["-O2", "-g", "-fPIE", "-pie"]),
            Variant::NoPie => Some(&["-O2", "-g", "-fno-pie", "-no-pie"]),
            Variant::Stripped | Variant::SeparateDebug => None,
        }
    }
}

/// One mutatee program: a source file under `tests/mutatees/`.
#[derive(Clone, Debug)]
pub struct Mutatee {
    name: String,
    source: PathBuf,
    cxx: bool,
}

type Cell = Arc<OnceLock<PathBuf>>;

/// One build cell per (mutatee, variant), shared by every test thread of this process.
fn cell(name: &str, variant: Variant) -> Cell {
    static CELLS: OnceLock<Mutex<HashMap<(String, Variant), Cell>>> = OnceLock::new();
    let mut cells = CELLS
        .get_or_init(Default::default)
        .lock()
        // A panic while holding this lock cannot leave the map inconsistent: it only inserts.
        .unwrap_or_else(|poisoned| poisoned.into_inner());
    cells.entry((name.to_owned(), variant)).or_default().clone()
}

impl Mutatee {
    /// The mutatee `name` (`basic`, `cxx`, ...). Panics when no `name.c` or `name.cpp` exists.
    pub fn new(name: &str) -> Mutatee {
        let dir = mutatee_source_dir();
        for (ext, cxx) in [("c", false), ("cpp", true)] {
            let source = dir.join(format!("{name}.{ext}"));
            if source.is_file() {
                return Mutatee {
                    name: name.to_owned(),
                    source,
                    cxx,
                };
            }
        }
        panic!(
            "no mutatee `{name}`: neither {name}.c nor {name}.cpp in {}",
            dir.display()
        );
    }

    /// Every mutatee program in [`MUTATEES`] (not the libraries).
    pub fn all() -> Vec<Mutatee> {
        MUTATEES.iter().map(|n| Mutatee::new(n)).collect()
    }

    /// True for shared libraries ([`LIBRARIES`]).
    pub fn is_library(&self) -> bool {
        self.name.starts_with("lib")
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    pub fn source(&self) -> &Path {
        &self.source
    }

    /// True for C++ sources (built with g++).
    pub fn is_cxx(&self) -> bool {
        self.cxx
    }

    /// What the program prints on stdout when run without arguments, from `NAME.stdout`.
    pub fn expected_stdout(&self) -> String {
        let path = self.source.with_extension("stdout");
        std::fs::read_to_string(&path)
            .unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()))
    }

    /// The file name of a variant: `basic-O2`, `libshared-O2.so`.
    pub fn file_name(&self, variant: Variant) -> String {
        let ext = if self.is_library() { ".so" } else { "" };
        format!("{}-{}{ext}", self.name, variant.suffix())
    }

    /// The built executable for `variant`, compiling it first if this process has not yet.
    /// Panics, naming the command and its stderr, when a tool fails.
    pub fn path(&self, variant: Variant) -> PathBuf {
        assert!(
            !(self.is_library() && matches!(variant, Variant::Pie | Variant::NoPie)),
            "{} is a shared library: it has no {variant:?} variant",
            self.name
        );
        cell(&self.name, variant)
            .get_or_init(|| self.build(variant))
            .clone()
    }

    /// The separate debug file of the [`Variant::SeparateDebug`] build (building it if needed).
    pub fn debug_file(&self) -> PathBuf {
        let exe = self.path(Variant::SeparateDebug);
        exe.with_file_name(format!("{}.debug", self.file_name(Variant::SeparateDebug)))
    }

    /// Builds `variant` unless an up-to-date copy from an earlier run is already in place.
    fn build(&self, variant: Variant) -> PathBuf {
        let out_dir = target_dir().join("mutatees");
        std::fs::create_dir_all(&out_dir)
            .unwrap_or_else(|e| panic!("cannot create {}: {e}", out_dir.display()));
        let out = out_dir.join(self.file_name(variant));
        let recipe = self.recipe(variant);
        let stamp = out.with_file_name(format!("{}.stamp", self.file_name(variant)));
        let fresh = out.is_file()
            && (variant != Variant::SeparateDebug
                || out
                    .with_file_name(format!("{}.debug", self.file_name(variant)))
                    .is_file())
            && std::fs::read_to_string(&stamp).is_ok_and(|s| s == recipe);
        if fresh {
            return out;
        }

        let work = TempDir::new(&out_dir, &self.file_name(variant));
        let built = work.path().join(self.file_name(variant));
        let mut extra = Vec::new();
        match variant.flags() {
            Some(flags) => self.compile(flags, &built),
            None => {
                let base = self.path(Variant::O2);
                match variant {
                    Variant::Stripped => {
                        run_tool("strip", &[path_arg(&base), "-o".into(), path_arg(&built)]);
                    }
                    Variant::SeparateDebug => {
                        // The debuglink records the debug file's base name, so it is made
                        // under its final name, then both files move into place together.
                        let debug_name = format!("{}.debug", self.file_name(variant));
                        let debug = work.path().join(&debug_name);
                        run_tool(
                            "objcopy",
                            &[
                                "--only-keep-debug".into(),
                                path_arg(&base),
                                path_arg(&debug),
                            ],
                        );
                        run_tool(
                            "strip",
                            &[
                                "--strip-debug".into(),
                                path_arg(&base),
                                "-o".into(),
                                path_arg(&built),
                            ],
                        );
                        let mut link = std::ffi::OsString::from("--add-gnu-debuglink=");
                        link.push(&debug);
                        run_tool("objcopy", &[link, built.clone().into_os_string()]);
                        extra.push((debug, out_dir.join(debug_name)));
                    }
                    _ => unreachable!("only derived variants have no flags"),
                }
            }
        }
        // The debug file first: once the executable appears, its debuglink must resolve.
        for (from, to) in extra.into_iter().chain([(built, out.clone())]) {
            std::fs::rename(&from, &to).unwrap_or_else(|e| {
                panic!("cannot move {} to {}: {e}", from.display(), to.display())
            });
        }
        std::fs::write(&stamp, &recipe)
            .unwrap_or_else(|e| panic!("cannot write {}: {e}", stamp.display()));
        out
    }

    fn compiler(&self) -> &'static str {
        if self.cxx {
            "g++"
        } else {
            "gcc"
        }
    }

    fn compile(&self, flags: &[&str], out: &Path) {
        let std = if self.cxx {
            "-std=gnu++17"
        } else {
            "-std=gnu11"
        };
        let mut args: Vec<std::ffi::OsString> = vec![std.into(), "-Wall".into(), "-pthread".into()];
        args.extend(flags.iter().map(Into::into));
        if self.is_library() {
            args.extend(["-shared".into(), "-fPIC".into()]);
        }
        args.extend([path_arg(&self.source), "-o".into(), path_arg(out)]);
        run_tool(self.compiler(), &args);
    }

    /// Everything that determines the artefact's bytes, as text for the stamp file.
    fn recipe(&self, variant: Variant) -> String {
        match variant.flags() {
            Some(flags) => {
                let source = std::fs::read(&self.source)
                    .unwrap_or_else(|e| panic!("cannot read {}: {e}", self.source.display()));
                let mut hasher = std::collections::hash_map::DefaultHasher::new();
                source.hash(&mut hasher);
                let library = if self.is_library() {
                    " -shared -fPIC"
                } else {
                    ""
                };
                format!(
                    "{} {}{library} source={:016x}\n",
                    self.compiler(),
                    flags.join(" "),
                    hasher.finish()
                )
            }
            None => format!("{}then {}\n", self.recipe(Variant::O2), variant.suffix()),
        }
    }
}

fn path_arg(p: &Path) -> std::ffi::OsString {
    p.as_os_str().to_owned()
}

/// A private build directory inside `parent`, removed on drop.
struct TempDir(PathBuf);

impl TempDir {
    fn new(parent: &Path, label: &str) -> TempDir {
        static NEXT: AtomicU64 = AtomicU64::new(0);
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let dir = parent.join(format!(".build-{}-{n}-{label}", std::process::id()));
        std::fs::create_dir_all(&dir)
            .unwrap_or_else(|e| panic!("cannot create {}: {e}", dir.display()));
        TempDir(dir)
    }

    fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        // Best effort: a leftover directory under target/ costs nothing but disk.
        let _ = std::fs::remove_dir_all(&self.0);
    }
}
