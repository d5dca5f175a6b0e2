//! The environment a snippet is checked against: which names exist at the point, where their
//! storage is, and the constants describing the point. It is a trait so the checker and code
//! generator can be tested without a process; the shell implements it over a session (DWARF,
//! symbols, declared variables).

use super::types::{FnSig, StructLayout, Type};

/// Where a variable's storage is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum VarPlace {
    /// At a fixed runtime address: declared variables (in data the trampoline area provides)
    /// and the mutatee's globals. Reached RIP-relatively when within ±2 GiB of the code,
    /// otherwise through an absolute `mov r11, imm64`.
    Absolute(u64),
    /// In the saved-register block (see [`super::abi::SavedRegs`]) at this byte offset: the
    /// instrumented function's parameters at entry, `$0..$5`, `$return`.
    Saved(u32),
}

/// What a name denotes.
#[derive(Clone, Debug, PartialEq)]
pub enum Binding {
    /// A variable.
    Var {
        /// Its snippet type.
        ty: Type,
        /// Where it lives.
        place: VarPlace,
    },
    /// A function the snippet may call.
    Func {
        /// Its runtime address.
        addr: u64,
        /// Its signature, which calls are checked against.
        sig: FnSig,
    },
}

/// The kind of instrumentation point, which decides what `$return` and `$0..$5` mean.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum PointKind {
    /// Function entry: `$0..$5` are the arguments.
    Entry,
    /// Function exit: `$return` is the return value.
    Exit,
    /// Before a call: `$0..$5` are the call's arguments.
    CallBefore,
    /// After a call: `$return` is the call's result.
    CallAfter,
    /// Anywhere else (loop points, `execute`, `print`).
    #[default]
    Other,
}

/// Constants about the point, for `$function $module $file $line $callee $loop $id`.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct PointInfo {
    /// What `$return` and `$0..$5` mean here.
    pub kind: PointKind,
    /// `$function`: the function's name as users see it.
    pub function: String,
    /// `$module`: the module's file name.
    pub module: String,
    /// Source file and line, when there is debug info.
    pub file: Option<String>,
    /// `$line`, when there is debug info.
    pub line: Option<u32>,
    /// The called function's name, at call points.
    pub callee: Option<String>,
    /// The loop's name (`loop_1.2`), at loop points.
    pub loop_name: Option<String>,
    /// The instrumentation id.
    pub id: u32,
    /// The type of `$return` (the function's or callee's return type); `long` when unknown.
    pub return_type: Option<Type>,
    /// The snippet is gsh's own (e.g. `count`'s), so it may use the reserved
    /// `__gsh_rt_count(SLOT, TLS_OFFSET, THREAD_FN)`; user snippets never may.
    pub internal: bool,
}

/// Names and facts a snippet is checked against.
pub trait Env {
    /// What `name` denotes at this point: a parameter, a declared variable, a global, a
    /// function. Parameters shadow declared variables, which shadow globals.
    fn lookup(&self, name: &str) -> Option<Binding>;
    /// Every name `lookup` knows, for "did you mean" hints.
    fn names(&self) -> Vec<String>;
    /// The layout of `struct name`.
    fn struct_layout(&self, name: &str) -> Option<StructLayout>;
    /// The point the snippet is compiled for.
    fn point(&self) -> &PointInfo;
}

/// A simple in-memory environment, for tests, `print`, and callers that assemble names
/// themselves.
#[derive(Clone, Debug, Default)]
pub struct MapEnv {
    /// Names and what they denote; a later binding of a name shadows an earlier one.
    pub bindings: Vec<(String, Binding)>,
    /// Struct layouts by name.
    pub structs: Vec<StructLayout>,
    /// The point's facts.
    pub point: PointInfo,
}

impl MapEnv {
    /// Adds variable `name` of type `ty` at `place`.
    pub fn var(mut self, name: &str, ty: Type, place: VarPlace) -> MapEnv {
        self.bindings
            .push((name.into(), Binding::Var { ty, place }));
        self
    }

    /// Adds function `name` at runtime address `addr` with signature `sig`.
    pub fn func(mut self, name: &str, addr: u64, sig: FnSig) -> MapEnv {
        self.bindings
            .push((name.into(), Binding::Func { addr, sig }));
        self
    }
}

impl Env for MapEnv {
    fn lookup(&self, name: &str) -> Option<Binding> {
        self.bindings
            .iter()
            .rev()
            .find(|(n, _)| n == name)
            .map(|(_, b)| b.clone())
    }

    fn names(&self) -> Vec<String> {
        self.bindings.iter().map(|(n, _)| n.clone()).collect()
    }

    fn struct_layout(&self, name: &str) -> Option<StructLayout> {
        self.structs.iter().find(|s| s.name == name).cloned()
    }

    fn point(&self) -> &PointInfo {
        &self.point
    }
}
