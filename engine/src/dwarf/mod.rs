//! Source-level facts from DWARF: function signatures, variable and type layouts, and line
//! numbers. DWARF is read from the binary itself or from a separate debug file found by
//! build id or `.gnu_debuglink` (see [`locate`]).
//!
//! Everything here is loaded on first use: opening a binary never touches `.debug_info`.
//!
//! The parts: `load` reads sections into gimli and names DIEs ([`DebugInfo`] holds it behind a
//! lock), `names` indexes types and globals by name, `types` spells and lays out types, and
//! `functions` reads signatures and frame variables. Address questions go through addr2line,
//! which finds the unit by `.debug_aranges` and parses only that unit's functions.
//!
//! Not supported: split DWARF (`.dwo`), `.debug_types` type units, and dwz supplementary
//! files (`.gnu_debugaltlink`); their DIEs are simply not found.

#![warn(missing_docs)]

mod frame;
mod functions;
mod load;
pub mod locate;
mod names;
mod types;

#[cfg(test)]
mod tests;

use std::path::{Path, PathBuf};
use std::sync::{Mutex, OnceLock};

use crate::addr::LinkAddr;
use crate::elf::{Binary, Data};

pub use frame::{FrameRegs, FrameVariable, VarLocation};

/// A source position.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct SourceLoc {
    /// The file name as the line table or `DW_AT_decl_file` gives it.
    pub file: String,
    /// 1-based line number.
    pub line: u32,
}

impl std::fmt::Display for SourceLoc {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}:{}", self.file, self.line)
    }
}

/// A formal parameter of a function.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct Param {
    /// Its name; `None` for an unnamed parameter (`int f(int)`).
    pub name: Option<String>,
    /// The type as C would spell it, e.g. `const char *`.
    pub type_name: String,
}

/// What DWARF says about one function.
#[derive(Clone, Debug, serde::Serialize)]
pub struct FunctionInfo {
    /// The function's name (`DW_AT_name`, not the linkage name).
    pub name: String,
    /// The return type as C would spell it; `void` when it has none.
    pub return_type: String,
    /// The formal parameters, in order.
    pub params: Vec<Param>,
    /// True when it takes `...` after its parameters.
    pub variadic: bool,
    /// False for functions declared without a prototype (K&R C, assembly): an empty
    /// parameter list then means "unknown", not `(void)`.
    pub prototyped: bool,
    /// Where it is declared (`DW_AT_decl_file`/`decl_line`).
    pub decl: Option<SourceLoc>,
}

impl FunctionInfo {
    /// The C-style signature, e.g. `int work(int n, const char *name)`, with function
    /// pointers spelled as C declares them: `void (*signal(int sig, void (*handler)(int)))(int)`.
    pub fn signature(&self) -> String {
        let mut params: Vec<String> = self
            .params
            .iter()
            .map(|p| declaration(&p.type_name, p.name.as_deref().unwrap_or("")))
            .collect();
        if self.variadic {
            params.push("...".into());
        }
        if params.is_empty() && self.prototyped {
            params.push("void".into());
        }
        declaration(
            &self.return_type,
            &format!("{}({})", self.name, params.join(", ")),
        )
    }
}

/// A C declaration of `name` with the type spelled `type_name` (as this module spells types):
/// `int x`, `char *s`, `char buf[16]`, `char *argv[4]`, `int (*cmp)(const void *, const void *)`.
/// The name goes where C's declarator syntax puts it: inside the first `(*` group before its
/// `)` or `[`, else before the first array or function suffix, else at the end.
pub fn declaration(type_name: &str, name: &str) -> String {
    if name.is_empty() {
        return type_name.to_owned();
    }
    let hole = match [type_name.find("(*"), type_name.find("(&")]
        .into_iter()
        .flatten()
        .min()
    {
        Some(open) => type_name[open..]
            .find([')', '['])
            .map(|i| open + i)
            .unwrap_or(type_name.len()),
        None => type_name
            .find('[')
            .or_else(|| {
                type_name
                    .ends_with(')')
                    .then(|| type_name.find('('))
                    .flatten()
            })
            .unwrap_or(type_name.len()),
    };
    let (before, after) = type_name.split_at(hole);
    let sep = if before.ends_with(|c: char| c.is_alphanumeric() || c == '_' || c == '>') {
        " "
    } else {
        ""
    };
    format!("{before}{sep}{name}{after}")
}

/// Where a variable lives, as far as its DWARF says.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum VariableKind {
    /// A variable at file or namespace scope (or a class's static member).
    Global,
    /// A `static` variable declared inside a function.
    StaticLocal,
    /// A formal parameter of a function.
    Param,
    /// An automatic variable of a function.
    Local,
}

/// What DWARF says about one variable.
#[derive(Clone, Debug, serde::Serialize)]
pub struct VariableInfo {
    /// Its name.
    pub name: String,
    /// Its type as C would spell it (`struct point *`, `int[16]`).
    pub type_name: String,
    /// Static address, for globals and static locals.
    pub addr: Option<LinkAddr>,
    /// Its size in bytes, when its type has a known size.
    pub size: Option<u64>,
    /// Where it is declared.
    pub decl: Option<SourceLoc>,
    /// Whether it is a global, a static local, a parameter or a local.
    pub kind: VariableKind,
}

/// The kind of a named type.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum TypeKind {
    /// `struct NAME`.
    Struct,
    /// `union NAME`.
    Union,
    /// `enum NAME`, with its enumerators.
    Enum,
    /// A C++ `class`.
    Class,
    /// A `typedef`, naming another type ([`TypeLayout::target`]).
    Typedef,
    /// A base type: `int`, `double`, `unsigned char`...
    Base,
}

/// A member of a struct, union or class.
#[derive(Clone, Debug, serde::Serialize)]
pub struct Member {
    /// Its name; `None` for an anonymous struct or union member.
    pub name: Option<String>,
    /// Its type as C would spell it.
    pub type_name: String,
    /// Byte offset from the start of the aggregate.
    pub offset: u64,
    /// Its size in bytes, when known.
    pub size: Option<u64>,
    /// For bit-fields: (bit offset within the aggregate, bit size).
    pub bits: Option<(u64, u64)>,
    /// The layout of the member's type when it is an anonymous struct or union (which no
    /// name finds): `struct { int a; } u;` or C11's unnamed `union { ... };`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub inline: Option<Box<TypeLayout>>,
}

/// The layout of a named type.
#[derive(Clone, Debug, serde::Serialize)]
pub struct TypeLayout {
    /// What kind of type it is.
    pub kind: TypeKind,
    /// The type's name as C spells it (`struct point`, `size_t`).
    pub name: String,
    /// Its size in bytes (`DW_AT_byte_size`); `None` for incomplete types.
    pub size: Option<u64>,
    /// Members of a struct, union or class, in declaration order; empty for other kinds.
    pub members: Vec<Member>,
    /// An enum's enumerators and their values, in declaration order; empty for other kinds.
    pub enumerators: Vec<(String, i64)>,
    /// For typedefs: the type it names.
    pub target: Option<String>,
    /// Where it is declared.
    pub decl: Option<SourceLoc>,
}

/// DWARF of one module, loaded from `source`.
///
/// Loading only maps the file. The sections are read (and decompressed) on the first query,
/// the name index on the first query by name, and each unit's functions on the first query
/// by an address inside it. Queries take a lock: gimli's and addr2line's lazily filled
/// caches are not thread-safe, and queries come from one user at a time anyway.
pub struct DebugInfo {
    source: PathBuf,
    data: Data,
    state: OnceLock<Option<Mutex<load::State>>>,
}

impl DebugInfo {
    /// Loads DWARF for `binary`: from the file itself when it has `.debug_info`, else from a
    /// separate debug file found under `debug_dirs`. `None` when there is none.
    pub fn load(binary: &Binary, debug_dirs: &[PathBuf]) -> Option<DebugInfo> {
        let (source, data) = if binary.has_dwarf() {
            let path = binary.path().to_owned();
            // A binary parsed from memory may have no file behind its path; copy its bytes.
            let data = Data::map(&path).unwrap_or_else(|_| Data::Owned(binary.data().to_vec()));
            (path, data)
        } else {
            let path = locate::separate_debug_file(binary, debug_dirs)?;
            let data = Data::map(&path).ok()?;
            (path, data)
        };
        Some(DebugInfo {
            source,
            data,
            state: OnceLock::new(),
        })
    }

    /// The file the DWARF was read from.
    pub fn source(&self) -> &Path {
        &self.source
    }

    /// Runs `query` on the loaded sections, reading them first if this is the first query.
    /// `None` when the file's DWARF cannot be read at all.
    fn with<T>(&self, query: impl FnOnce(&load::State) -> Option<T>) -> Option<T> {
        let state = self
            .state
            .get_or_init(|| load::State::new(&self.data).map(Mutex::new))
            .as_ref()?;
        // A panic in an earlier query leaves the caches consistent (they are filled
        // atomically), so a poisoned lock is still usable.
        let guard = state.lock().unwrap_or_else(|e| e.into_inner());
        query(&guard)
    }

    /// The source line of `addr`.
    pub fn location(&self, addr: LinkAddr) -> Option<SourceLoc> {
        self.with(|s| s.location(addr.0))
    }

    /// The line-table rows in `[lo, hi)`: address, file (in full) and line of each.
    pub fn locations(&self, lo: LinkAddr, hi: LinkAddr) -> Vec<(LinkAddr, String, u32)> {
        self.with(|s| Some(s.locations(lo.0, hi.0)))
            .unwrap_or_default()
            .into_iter()
            .map(|(a, f, l)| (LinkAddr(a), f, l))
            .collect()
    }

    /// The function whose code starts at or contains `addr`: the outermost function, not
    /// one inlined into it.
    pub fn function(&self, addr: LinkAddr) -> Option<FunctionInfo> {
        self.with(|s| {
            let die = s.function_die(addr.0)?;
            functions::function_info(&s.units, die)
        })
    }

    /// The parameters (first, in order) and local variables of the function containing
    /// `addr`, including those in nested blocks but not those of functions inlined into it.
    pub fn function_variables(&self, addr: LinkAddr) -> Vec<VariableInfo> {
        self.with(|s| {
            let die = s.function_die(addr.0)?;
            Some(functions::function_variables(&s.units, die))
        })
        .unwrap_or_default()
    }

    /// The parameters and locals visible at `pc` (a link address) in the function containing
    /// it, each located in the frame `frame` describes: parameters first, then the locals
    /// of the innermost block outward.
    pub fn frame_variables(&self, pc: LinkAddr, frame: &dyn FrameRegs) -> Vec<FrameVariable> {
        let state = self
            .state
            .get_or_init(|| load::State::new(&self.data).map(Mutex::new))
            .as_ref();
        let Some(state) = state else {
            return Vec::new();
        };
        let guard = state.lock().unwrap_or_else(|e| e.into_inner());
        let Some(die) = guard.function_die(pc.0) else {
            return Vec::new();
        };
        let loclists = guard.loclists(&self.data);
        frame::frame_variables(&guard, loclists, die, pc.0, frame)
    }

    /// The global or static variable named `name` (`counter`, `ns::Klass::instances`, or
    /// `func::counter` for a static local).
    pub fn variable(&self, name: &str) -> Option<VariableInfo> {
        self.with(|s| {
            let (die, static_local) = s.names().variable(name)?;
            functions::variable_info(&s.units, die, name, static_local)
        })
    }

    /// The struct, union, class, enum, typedef or base type named `name` (`struct point`,
    /// `point` and `enum color` all work). A typedef's layout carries the size, members and
    /// enumerators of the type it names, with `target` spelling that type.
    pub fn type_layout(&self, name: &str) -> Option<TypeLayout> {
        self.with(|s| {
            let (kind, die) = s.names().type_named(name)?;
            types::layout(&s.units, die, kind)
        })
    }

    /// The names of all named types, sorted and without duplicates, as [`Self::type_layout`]
    /// accepts them (`point`, `ns::Klass`, `unsigned long`): for tab completion.
    pub fn type_names(&self) -> Vec<String> {
        self.with(|s| Some(s.names().type_names()))
            .unwrap_or_default()
    }
}
