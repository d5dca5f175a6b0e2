//! The snippet compiler's [`Env`] over a session: names in snippets resolve to the instrumented
//! function's parameters (from DWARF, at entry), variables made with `declare`, the module's
//! globals and functions, with types from DWARF where it has them.
//!
//! DWARF spells types as C does (`const char *`, `struct point`, `size_t`); [`c_type`] turns
//! those spellings into snippet [`Type`]s, following typedefs. What the snippet language cannot
//! express (function pointers, `float`, bit-fields) becomes the nearest thing it can (`void *`)
//! or is left out, so a snippet never sees a wrong layout.

#![warn(missing_docs)]

use std::collections::HashMap;

use crate::dwarf::{DebugInfo, TypeKind};
use crate::session::{Module, Session};
use crate::snippet::abi;
use crate::snippet::check::RT_NAMES;
use crate::snippet::env::{Binding, Env, MapEnv, PointInfo, PointKind, VarPlace};
use crate::snippet::lexer::{lex, TokenKind};
use crate::snippet::types::{Field, FnSig, IntKind, StructLayout, Type};
use crate::symbols::Function;

/// Typedef chains followed at the most.
const MAX_TYPEDEFS: usize = 8;

/// A variable made with `declare`, placed at `addr` (where the instrumentation's data lives).
#[derive(Clone, Debug)]
pub struct Declaration {
    /// The name snippets use.
    pub name: String,
    /// Its snippet type (`long`, `double`, a pointer...).
    pub ty: Type,
    /// Its runtime address in the process, or a placeholder before the process has memory for it.
    pub addr: u64,
}

/// Each name's last position in `declared`, for [`SessionEnv::with_index`].
pub fn index_of(declared: &[Declaration]) -> HashMap<String, usize> {
    declared
        .iter()
        .enumerate()
        .map(|(i, d)| (d.name.clone(), i))
        .collect()
}

/// Names for a snippet at one point of one function.
pub struct SessionEnv<'a> {
    module: &'a Module,
    func: Option<&'a Function>,
    declared: &'a [Declaration],
    /// `declared` by name (the last of a name), when the caller keeps one: a whole-program
    /// plan declares a variable per counter, and a scan of them all per name was quadratic.
    index: Option<&'a HashMap<String, usize>>,
    point: PointInfo,
    /// Added to link addresses to get the addresses code runs at (0 when rewriting a file).
    bias: u64,
    /// Other modules of the program, whose DWARF may declare what `module` imports.
    others: Vec<&'a Module>,
    /// The other modules a live process has loaded, with their load biases: a snippet may
    /// call their exported functions by name (a library loaded with `dlopen`, which the
    /// instrumented module has no PLT stub for).
    loaded: Vec<(&'a Module, u64)>,
}

impl<'a> SessionEnv<'a> {
    /// An environment for `point` in `func` of `module`; `bias` turns the module's link
    /// addresses into the addresses the snippet will run at.
    pub fn new(
        module: &'a Module,
        func: Option<&'a Function>,
        declared: &'a [Declaration],
        point: PointInfo,
        bias: u64,
    ) -> SessionEnv<'a> {
        SessionEnv {
            module,
            func,
            declared,
            index: None,
            point,
            bias,
            others: Vec::new(),
            loaded: Vec::new(),
        }
    }

    /// Finds declared variables through `index` (each name's last position in the declared
    /// variables given to [`SessionEnv::new`]) rather than by a scan.
    pub fn with_index(mut self, index: &'a HashMap<String, usize>) -> SessionEnv<'a> {
        self.index = Some(index);
        self
    }

    /// Lets snippets call the exported functions of the modules a live process has loaded
    /// (module, load bias), after the instrumented module's own functions and imports.
    pub fn with_loaded(
        mut self,
        loaded: impl IntoIterator<Item = (&'a Module, u64)>,
    ) -> SessionEnv<'a> {
        self.loaded = loaded
            .into_iter()
            .filter(|(m, _)| m.id != self.module.id)
            .collect();
        self
    }

    /// Lets calls to imports find their prototypes in the DWARF of `others` (the library that
    /// defines them), when the C library table does not know them.
    pub fn with_modules(mut self, others: impl IntoIterator<Item = &'a Module>) -> SessionEnv<'a> {
        self.others = others
            .into_iter()
            .filter(|m| m.id != self.module.id)
            .collect();
        self
    }

    /// [`SessionEnv::with_modules`] with the session's open modules.
    pub fn with_session(self, session: &'a Session) -> SessionEnv<'a> {
        self.with_modules(session.modules().iter().map(|m| &**m))
    }

    /// An environment for `declare` initializers and `print`: declared names and globals only.
    pub fn for_session(
        session: &'a Session,
        declared: &'a [Declaration],
    ) -> Option<SessionEnv<'a>> {
        let module = session.main().ok()?;
        Some(SessionEnv::new(
            module,
            None,
            declared,
            PointInfo::default(),
            0,
        ))
    }

    /// An owned copy of everything `source` can name here: the bindings of its identifiers and
    /// the layouts of the structs they reach. Trampolines keep their snippets' environments
    /// (to re-lay a site later), so they need one that does not borrow the session.
    pub fn snapshot(&self, source: &str) -> MapEnv {
        let (tokens, _) = lex(source);
        let mut env = MapEnv {
            point: self.point.clone(),
            ..MapEnv::default()
        };
        let mut structs: Vec<String> = Vec::new();
        let mut prev_struct = false;
        for t in &tokens {
            if let TokenKind::Ident(name) = &t.kind {
                if prev_struct {
                    structs.push(name.clone());
                } else if RT_NAMES.contains(&name.as_str()) {
                    // gsh's own operations are known by their spelling, never bound: looking
                    // them up searched every function of every loaded module, once per probe,
                    // which made `coverage '*'` on redis take 35 s.
                } else if let Some(b) = self.lookup(name) {
                    if let Binding::Var { ty, .. } = &b {
                        struct_names(ty, &mut structs);
                    }
                    env.bindings.push((name.clone(), b));
                }
                prev_struct = name == "struct";
            } else {
                prev_struct = false;
            }
        }
        // Structs reachable through members, breadth first, each once.
        let mut i = 0;
        while i < structs.len() && i < 64 {
            if !env.structs.iter().any(|s| s.name == structs[i]) {
                if let Some(layout) = self.struct_layout(&structs[i]) {
                    for f in &layout.fields {
                        struct_names(&f.ty, &mut structs);
                    }
                    env.structs.push(layout);
                }
            }
            i += 1;
        }
        env
    }

    fn debug(&self) -> Option<&DebugInfo> {
        self.module.debug_info()
    }

    /// The instrumented function's parameter `name`, as a slot of the saved-register block.
    /// Only at entry (and for the call's own arguments before a call, which have no names):
    /// elsewhere the argument registers no longer hold the parameters.
    fn parameter(&self, name: &str) -> Option<Binding> {
        if self.point.kind != PointKind::Entry {
            return None;
        }
        let func = self.func?;
        let info = self.debug()?.function(func.addr)?;
        let (mut ints, mut sses) = (0u32, 0u32);
        for p in &info.params {
            let ty = self.c_type(&p.type_name);
            let slot = match &ty {
                Some(Type::Double) => {
                    sses += 1;
                    (sses <= 8).then(|| abi::xmm_offset(sses - 1))
                }
                Some(t) if t.is_scalar() => {
                    ints += 1;
                    (ints <= 6).then(|| abi::arg_offset(ints - 1))
                }
                // Aggregates passed by value: the ABI's classification is not modelled, so
                // later parameters' registers are unknown.
                _ => return None,
            };
            if p.name.as_deref() == Some(name) {
                return Some(Binding::Var {
                    ty: ty?,
                    place: VarPlace::Saved(slot?),
                });
            }
        }
        None
    }

    fn global(&self, name: &str) -> Option<Binding> {
        let table = self.module.functions();
        let var = table
            .variables()
            .iter()
            .find(|v| !v.tls && (v.name == name || v.demangled.as_deref() == Some(name)))?;
        let ty = self
            .debug()
            .and_then(|d| d.variable(name))
            .and_then(|v| self.c_type(&v.type_name))
            .unwrap_or_else(|| type_of_size(var.size));
        Some(Binding::Var {
            ty,
            place: VarPlace::Absolute(var.addr.0.wrapping_add(self.bias)),
        })
    }

    fn function(&self, name: &str) -> Option<Binding> {
        let table = self.module.functions();
        let plt = format!("{name}@plt");
        let Some(f) = table
            .by_name(name)
            .next()
            .or_else(|| table.by_name(&plt).next())
        else {
            return self.loaded_function(name);
        };
        let libc = crate::snippet::libc::prototype(name);
        let mut sig = self
            .debug()
            .and_then(|d| d.function(f.addr))
            .filter(|info| info.name == name || f.name == name)
            .and_then(|info| {
                let ret = self.c_type(&info.return_type)?;
                let params = info
                    .params
                    .iter()
                    .map(|p| self.c_type(&p.type_name))
                    .collect::<Option<Vec<_>>>()?;
                Some(FnSig::new(ret, params, info.variadic))
            })
            // An import (DWARF describes only what the module defines) or a module without
            // DWARF: the C library's prototype when it is a libc function gsh knows, else the
            // DWARF of the open module that defines it.
            .or_else(|| libc.cloned())
            .or_else(|| {
                let import = f.name.ends_with("@plt");
                import.then(|| self.imported_prototype(name)).flatten()
            })
            // Known only from a symbol: take any arguments, as a variadic function, so that
            // doubles are passed in xmm registers with `al` set (harmless for a prototyped
            // callee), and return a `long`.
            .unwrap_or(FnSig::new(Type::LONG, Vec::new(), true));
        // DWARF does not record GCC's format attribute; the table does.
        if sig.variadic && sig.printf_format.is_none() {
            sig.printf_format = libc
                .filter(|l| l.params.as_ref().map(Vec::len) == sig.params.as_ref().map(Vec::len))
                .and_then(|l| l.printf_format);
        }
        Some(Binding::Func {
            addr: f.addr.0.wrapping_add(self.bias),
            sig,
        })
    }

    /// An exported function `name` of another module the process has loaded, typed by that
    /// module's DWARF (or the C library table, or as a variadic `long` function).
    fn loaded_function(&self, name: &str) -> Option<Binding> {
        self.loaded.iter().find_map(|&(m, bias)| {
            let f = m
                .functions()
                .by_name(name)
                .find(|f| f.global && !f.name.ends_with("@plt"))?;
            let mut other = SessionEnv::new(m, None, &[], PointInfo::default(), bias);
            other.others = self.others.clone();
            match other.function(name)? {
                Binding::Func { sig, .. } => Some(Binding::Func {
                    addr: f.addr.0.wrapping_add(bias),
                    sig,
                }),
                _ => None,
            }
        })
    }

    /// The prototype of `name` from the DWARF of another open module that defines it (a
    /// library the instrumented module calls through its PLT).
    fn imported_prototype(&self, name: &str) -> Option<FnSig> {
        self.others.iter().find_map(|m| {
            let f = m
                .functions()
                .by_name(name)
                .find(|f| f.global && !f.name.ends_with("@plt"))?;
            let info = m.debug_info()?.function(f.addr)?;
            let other = SessionEnv::new(m, None, &[], PointInfo::default(), 0);
            let ret = other.c_type(&info.return_type)?;
            let params = info
                .params
                .iter()
                .map(|p| other.c_type(&p.type_name))
                .collect::<Option<Vec<_>>>()?;
            Some(FnSig::new(ret, params, info.variadic))
        })
    }

    /// The snippet type DWARF's spelling `c` names, following typedefs.
    pub fn c_type(&self, c: &str) -> Option<Type> {
        c_type(
            c,
            &|name| {
                let layout = self.debug()?.type_layout(name)?;
                match layout.kind {
                    TypeKind::Typedef => layout.target,
                    TypeKind::Enum => Some("int".into()),
                    TypeKind::Struct | TypeKind::Class => Some(format!("struct {}", layout.name)),
                    _ => None,
                }
            },
            &|name| {
                self.debug()?
                    .type_layout(&format!("struct {name}"))
                    .or_else(|| self.debug()?.type_layout(name))
                    .and_then(|l| l.size)
            },
        )
    }
}

/// The struct names `ty` refers to, through pointers and arrays.
fn struct_names(ty: &Type, out: &mut Vec<String>) {
    match ty {
        Type::Struct { name, .. } if !out.contains(name) => out.push(name.clone()),
        Type::Ptr(t) | Type::Array(t, _) => struct_names(t, out),
        _ => {}
    }
}

/// A scalar type of `size` bytes, for globals DWARF does not describe.
fn type_of_size(size: u64) -> Type {
    match size {
        1 => Type::Int(IntKind::Char),
        2 => Type::Int(IntKind::Short),
        4 => Type::Int(IntKind::Int),
        _ => Type::LONG,
    }
}

/// Parses a C type spelling. `typedef_target` gives what a non-base name stands for (a
/// typedef's target spelling, `int` for an enum, `struct NAME` for a class); `struct_size` the
/// size of a struct.
pub fn c_type(
    c: &str,
    typedef_target: &dyn Fn(&str) -> Option<String>,
    struct_size: &dyn Fn(&str) -> Option<u64>,
) -> Option<Type> {
    c_type_depth(c, typedef_target, struct_size, 0)
}

fn c_type_depth(
    c: &str,
    typedef_target: &dyn Fn(&str) -> Option<String>,
    struct_size: &dyn Fn(&str) -> Option<u64>,
    depth: usize,
) -> Option<Type> {
    let c = c.trim();
    if depth > MAX_TYPEDEFS {
        return None;
    }
    // Function pointers: `int (*)(int)`, `void (*cb)(void)`.
    if c.contains("(*") {
        return Some(Type::Ptr(Box::new(Type::Void)));
    }
    // Arrays: `char [16]`, `int [2][3]` (outermost dimension first).
    if let Some(open) = c.find('[') {
        let elem = c_type_depth(&c[..open], typedef_target, struct_size, depth)?;
        let dims: Vec<u64> = c[open..]
            .split(']')
            .filter_map(|d| d.trim().strip_prefix('['))
            .map(|d| d.trim().parse().ok())
            .collect::<Option<Vec<_>>>()?;
        return Some(
            dims.into_iter()
                .rev()
                .fold(elem, |t, n| Type::Array(Box::new(t), n)),
        );
    }
    if let Some(inner) = c.strip_suffix('*') {
        let inner = inner.trim_end().trim_end_matches("const").trim_end();
        let pointee = c_type_depth(inner, typedef_target, struct_size, depth).unwrap_or(Type::Void);
        return Some(Type::Ptr(Box::new(pointee)));
    }
    let words: Vec<&str> = c
        .split_whitespace()
        .filter(|w| !matches!(*w, "const" | "volatile" | "restrict" | "__restrict"))
        .collect();
    let base = words.join(" ");
    let int = |k| Some(Type::Int(k));
    match base.as_str() {
        "void" => Some(Type::Void),
        "char" | "signed char" => int(IntKind::Char),
        "unsigned char" | "_Bool" | "bool" | "char8_t" => int(IntKind::UChar),
        "short" | "short int" | "signed short" | "short signed int" => int(IntKind::Short),
        "unsigned short" | "short unsigned int" | "unsigned short int" | "char16_t" => {
            int(IntKind::UShort)
        }
        "int" | "signed" | "signed int" | "wchar_t" => int(IntKind::Int),
        "unsigned" | "unsigned int" | "char32_t" => int(IntKind::UInt),
        "long" | "long int" | "signed long" | "long long" | "long long int" => int(IntKind::Long),
        "unsigned long"
        | "long unsigned int"
        | "unsigned long int"
        | "unsigned long long"
        | "long long unsigned int" => int(IntKind::ULong),
        "double" => Some(Type::Double),
        _ => {
            if let Some(name) = base
                .strip_prefix("struct ")
                .or_else(|| base.strip_prefix("class "))
            {
                let size = struct_size(name)?;
                return Some(Type::Struct {
                    name: name.to_owned(),
                    size,
                });
            }
            if base.starts_with("enum ") {
                return int(IntKind::Int);
            }
            // `union`, `float`, `long double` and friends have no snippet type.
            if base.starts_with("union ") || base.contains("float") || base.contains("long double")
            {
                return None;
            }
            let target = typedef_target(&base)?;
            c_type_depth(&target, typedef_target, struct_size, depth + 1)
        }
    }
}

impl Env for SessionEnv<'_> {
    fn lookup(&self, name: &str) -> Option<Binding> {
        if let Some(b) = self.parameter(name) {
            return Some(b);
        }
        let declared = match self.index {
            Some(index) => index.get(name).and_then(|&i| self.declared.get(i)),
            None => self.declared.iter().rev().find(|d| d.name == name),
        };
        if let Some(d) = declared {
            return Some(Binding::Var {
                ty: d.ty.clone(),
                place: VarPlace::Absolute(d.addr),
            });
        }
        self.global(name).or_else(|| self.function(name))
    }

    fn names(&self) -> Vec<String> {
        let mut names: Vec<String> = self.declared.iter().map(|d| d.name.clone()).collect();
        if let (Some(f), PointKind::Entry) = (self.func, self.point.kind) {
            if let Some(info) = self.debug().and_then(|d| d.function(f.addr)) {
                names.extend(info.params.into_iter().filter_map(|p| p.name));
            }
        }
        let table = self.module.functions();
        names.extend(table.variables().iter().map(|v| v.name.clone()));
        names.extend(
            table
                .functions()
                .iter()
                .map(|f| f.name.trim_end_matches("@plt").to_owned()),
        );
        names.sort();
        names.dedup();
        names
    }

    fn struct_layout(&self, name: &str) -> Option<StructLayout> {
        let layout = self
            .debug()?
            .type_layout(&format!("struct {name}"))
            .or_else(|| self.debug()?.type_layout(&format!("class {name}")))?;
        let fields = layout
            .members
            .iter()
            .filter(|m| m.bits.is_none())
            .filter_map(|m| {
                Some(Field {
                    name: m.name.clone()?,
                    offset: m.offset,
                    ty: self.c_type(&m.type_name)?,
                })
            })
            .collect();
        Some(StructLayout {
            name: name.to_owned(),
            size: layout.size?,
            fields,
        })
    }

    fn point(&self) -> &PointInfo {
        &self.point
    }
}

#[cfg(test)]
#[path = "env_tests.rs"]
mod tests;
