//! What `print` can name, as gdb names it: the selected frame's parameters, then declared
//! variables, then globals of every loaded module (the frame's own module first, then the
//! main program, then the others), `MODULE!NAME` for one module's; and the access paths a
//! user writes on them (`head->pts[3].x`, `*p`, `arr[i]`), typed by DWARF so structs,
//! unions, enums, bit-fields and arrays print whole ([`super::values`]).
//!
//! Snippets type names with the snippet language's types, which have no unions, enums or
//! bit-fields; a path is evaluated here instead, with DWARF's types, and only what is not a
//! path (arithmetic, calls) goes to the snippet interpreter ([`PrintEnv`] gives it the same
//! globals).

#![warn(missing_docs)]

use crate::dwarf::{FrameRegs, FrameVariable, VarLocation};
use crate::session::Module;
use crate::snippet::ast::{self, ExprKind as A, UnOp};
use crate::snippet::env::{Binding, Env, PointInfo, VarPlace};
use crate::snippet::types::StructLayout;
use crate::LinkAddr;

use super::env::{Declaration, SessionEnv};
use super::values::{Shape, Types};

/// Where an object is.
#[derive(Clone, Debug)]
pub enum Loc {
    /// In memory at this (runtime) address.
    Mem(u64),
    /// Only its bytes are known (a register's value).
    Value(Vec<u8>),
    /// The debug info says the variable exists but not where it is at this pc.
    OptimizedOut,
}

/// An object a path names: where it is and its type, spelled as the DWARF of `module`
/// spells it.
#[derive(Clone)]
pub struct Found<'a> {
    /// Where the object is: an address, bytes, or optimized out.
    pub loc: Loc,
    /// Its type, as `module`'s DWARF spells it.
    pub type_name: String,
    /// The module whose DWARF types it.
    pub module: &'a Module,
    /// For a bit-field: (bit offset from `loc`, bit count).
    pub bits: Option<(u64, u64)>,
    /// The layout of an anonymous struct or union type (which no name finds).
    pub inline: Option<Box<crate::dwarf::TypeLayout>>,
}

/// What a path needs from the process: memory, the saved registers, and the value of a
/// subscript.
pub trait PathMachine {
    /// `len` bytes at runtime address `addr`, or why they cannot be read.
    fn read(&mut self, addr: u64, len: usize) -> Result<Vec<u8>, String>;
    /// Bytes of the saved-register block (parameters at a function's entry).
    fn saved(&self, offset: u32, len: usize) -> Option<Vec<u8>>;
    /// Evaluates `source` (a snippet expression) to an integer.
    fn int(&mut self, source: &str) -> Result<i64, String>;
}

/// The names `print` sees.
pub struct Scope<'a> {
    /// Loaded modules and their load biases, the selected frame's first, then the main
    /// program's.
    pub modules: Vec<(&'a Module, u64)>,
    /// The selected frame's function, when it has DWARF (parameters by name).
    pub frame: Option<(&'a Module, LinkAddr)>,
    /// The selected frame's parameters and locals, located at its pc.
    pub locals: Vec<FrameVariable>,
    /// The selected frame's registers (`$rip`, `$rsp`, ...), as far as they are known.
    pub regs: Option<crate::unwind::Regs>,
    /// gdb's `print/F` format for the values shown ([`super::values::formatted`]).
    pub format: Option<char>,
    /// Variables made with `declare`.
    pub declared: &'a [Declaration],
    /// `MODULE!NAME` spellings replaced in the expression by placeholders: (placeholder,
    /// module index in `modules`, name).
    qualified: Vec<(String, usize, String)>,
}

/// True when `module` is named `name`: its file name, soname, path, or the file name up to
/// `.so` (`libc` for `libc.so.6`).
fn module_named(module: &Module, name: &str) -> bool {
    module.name == name
        || module.binary.soname() == Some(name)
        || module.binary.path() == std::path::Path::new(name)
        || module.name.split(".so").next() == Some(name)
}

impl<'a> Scope<'a> {
    /// A scope over `modules` (each with its load bias, the one to search first first) and `declared`, with no frame: globals and declared variables only.
    pub fn new(modules: Vec<(&'a Module, u64)>, declared: &'a [Declaration]) -> Scope<'a> {
        Scope {
            modules,
            frame: None,
            locals: Vec::new(),
            regs: None,
            format: None,
            declared,
            qualified: Vec::new(),
        }
    }

    /// Rewrites every `MODULE!NAME` of `expr` into a placeholder name the scope resolves in
    /// that module alone; an unknown module is an error. `!=` and `!x` are left alone.
    pub fn qualify(&mut self, expr: &str) -> Result<String, String> {
        let bytes = expr.as_bytes();
        let mut out = String::new();
        let mut i = 0;
        let mut quote = None;
        let word = |c: u8| c.is_ascii_alphanumeric() || c == b'_';
        let module_char = |c: u8| word(c) || matches!(c, b'.' | b'-' | b'+');
        while i < bytes.len() {
            let c = bytes[i];
            match quote {
                Some(_) if c == b'\\' => {
                    out.push_str(&expr[i..(i + 2).min(expr.len())]);
                    i += 2;
                    continue;
                }
                Some(q) if c == q => quote = None,
                Some(_) => {}
                None if c == b'"' || c == b'\'' => quote = Some(c),
                // `$rsp`: a register, named so that snippet expressions can use it too.
                None if c == b'$' => {
                    let end = bytes[i + 1..].iter().take_while(|&&b| word(b)).count();
                    let name = &expr[i + 1..i + 1 + end];
                    if register_number(name).is_some() {
                        out.push_str(REGISTER_PREFIX);
                        out.push_str(name);
                        i += 1 + end;
                        continue;
                    }
                }
                None if c == b'!'
                    && bytes
                        .get(i + 1)
                        .is_some_and(|&n| word(n) && !n.is_ascii_digit()) =>
                {
                    let start = out.bytes().rev().take_while(|&b| module_char(b)).count();
                    let module = out[out.len() - start..].to_owned();
                    if !module.is_empty() && module.as_bytes()[0].is_ascii_alphabetic() {
                        let end = bytes[i + 1..].iter().take_while(|&&b| word(b)).count();
                        let name = &expr[i + 1..i + 1 + end];
                        let index = self
                            .modules
                            .iter()
                            .position(|(m, _)| module_named(m, &module))
                            .ok_or_else(|| {
                                format!(
                                    "no loaded module is named `{module}`; `show modules` lists them"
                                )
                            })?;
                        let placeholder = format!("__gsh_qualified_{}", self.qualified.len());
                        self.qualified
                            .push((placeholder.clone(), index, name.to_owned()));
                        out.truncate(out.len() - start);
                        out.push_str(&placeholder);
                        i += 1 + end;
                        continue;
                    }
                }
                None => {}
            }
            let ch = expr[i..].chars().next().unwrap_or('?');
            out.push(ch);
            i += ch.len_utf8().max(1);
        }
        Ok(out)
    }

    /// The user's spelling of a placeholder `qualify` made.
    pub fn unqualify(&self, text: &str) -> String {
        let mut s = text.replace(REGISTER_PREFIX, "$");
        for (p, m, n) in self.qualified.iter().rev() {
            s = s.replace(p, &format!("{}!{n}", self.modules[*m].0.name));
        }
        s
    }

    /// The modules a name is looked up in: one for a placeholder, else all, in order.
    fn lookup_order(&self, name: &str) -> (Vec<usize>, String) {
        match self.qualified.iter().find(|(p, ..)| p == name) {
            Some((_, m, n)) => (vec![*m], n.clone()),
            None => ((0..self.modules.len()).collect(), name.to_owned()),
        }
    }

    /// A global or static variable `name` (or a placeholder for `MODULE!NAME`).
    pub fn global(&self, name: &str) -> Option<Found<'a>> {
        let (order, name) = self.lookup_order(name);
        for i in order {
            let (module, bias) = self.modules[i];
            if let Some(v) = module
                .debug_info()
                .and_then(|d| d.variable(&name))
                .filter(|v| v.addr.is_some())
            {
                return Some(Found {
                    loc: Loc::Mem(v.addr?.0.wrapping_add(bias)),
                    type_name: v.type_name,
                    module,
                    bits: None,
                    inline: None,
                });
            }
            let table = module.functions();
            if let Some(v) = table
                .variables()
                .iter()
                .find(|v| !v.tls && (v.name == name || v.demangled.as_deref() == Some(&*name)))
            {
                let type_name = match v.size {
                    1 => "char",
                    2 => "short",
                    4 => "int",
                    _ => "long",
                };
                return Some(Found {
                    loc: Loc::Mem(v.addr.0.wrapping_add(bias)),
                    type_name: type_name.into(),
                    module,
                    bits: None,
                    inline: None,
                });
            }
        }
        None
    }

    /// The selected frame's parameter `name` at its function's entry, where `env` placed
    /// it (a slot of the saved registers), typed by DWARF.
    fn parameter(&self, name: &str, env: &dyn Env, m: &dyn PathMachine) -> Option<Found<'a>> {
        let Some(Binding::Var {
            place: VarPlace::Saved(off),
            ..
        }) = env.lookup(name)
        else {
            return None;
        };
        let (module, addr) = self.frame?;
        let info = module.debug_info()?.function(addr)?;
        let param = info
            .params
            .iter()
            .find(|p| p.name.as_deref() == Some(name))?;
        let size = Types::new(module.debug_info())
            .size(&param.type_name)
            .unwrap_or(8)
            .min(16) as usize;
        Some(Found {
            loc: Loc::Value(m.saved(off, size)?),
            type_name: param.type_name.clone(),
            module,
            bits: None,
            inline: None,
        })
    }

    /// The selected frame's parameter or local `name`, where its DWARF locates it.
    pub fn local(&self, name: &str) -> Option<Found<'a>> {
        let (module, _) = self.frame?;
        let v = self.locals.iter().find(|v| v.info.name == name)?;
        Some(Found {
            loc: match &v.location {
                VarLocation::Address(a) => Loc::Mem(*a),
                VarLocation::Value(b) => Loc::Value(b.clone()),
                VarLocation::OptimizedOut => Loc::OptimizedOut,
            },
            type_name: v.info.type_name.clone(),
            module,
            bits: None,
            inline: None,
        })
    }

    /// What `name` denotes for a path: a parameter, else a global; `None` for declared
    /// variables (the snippet interpreter has them) and unknown names.
    fn variable(&self, name: &str, env: &dyn Env, m: &dyn PathMachine) -> Option<Found<'a>> {
        if let Some(reg) = name.strip_prefix(REGISTER_PREFIX) {
            return self.register(reg)?.ok();
        }
        if let Some(p) = self.parameter(name, env, m) {
            return Some(p);
        }
        if let Some(f) = self.local(name) {
            return Some(f);
        }
        if self.declared.iter().any(|d| d.name == name) {
            return None;
        }
        self.global(name)
    }

    /// The object `e` names when it is an access path over variables this scope knows:
    /// `Ok(None)` when it is not (the snippet interpreter takes it then).
    pub fn path(
        &self,
        e: &ast::Expr,
        source: &str,
        env: &dyn Env,
        m: &mut dyn PathMachine,
    ) -> Result<Option<Found<'a>>, String> {
        let text =
            |e: &ast::Expr| self.unqualify(source.get(e.span.start..e.span.end).unwrap_or("?"));
        match &e.kind {
            A::Name(name) => Ok(self.variable(name, env, m)),
            A::Special(name) => self.register(name).transpose(),
            A::Member {
                base, field, arrow, ..
            } => {
                let Some(b) = self.path(base, source, env, m)? else {
                    return Ok(None);
                };
                let types = Types::new(b.module.debug_info());
                let b = if *arrow {
                    match types.shape(&b.type_name) {
                        Shape::Ptr(Some(p)) => pointed(&b, p, m)?,
                        _ => {
                            return Err(format!(
                                "`->` needs a pointer to a struct; `{}` is `{}`",
                                text(base),
                                b.type_name
                            ))
                        }
                    }
                } else {
                    b
                };
                let layout = match (b.inline.clone(), types.shape(&b.type_name)) {
                    (Some(l), _) => *l,
                    (None, Shape::Struct(l) | Shape::Union(l)) => l,
                    (None, Shape::Ptr(_)) if !*arrow => {
                        return Err(format!(
                            "`{}` is a pointer (`{}`): use `->`",
                            text(base),
                            b.type_name
                        ))
                    }
                    _ => {
                        return Err(format!(
                            "`{}` is `{}`, which has no members",
                            text(base),
                            b.type_name
                        ))
                    }
                };
                let Some((offset, member)) = find_member(&types, &layout, field, 0) else {
                    return Err(format!("`{}` has no member named `{field}`", layout.name));
                };
                let size = member
                    .size
                    .or_else(|| types.size(&member.type_name))
                    .unwrap_or(0);
                let (start, bits) = match member.bits {
                    Some((bit, n)) => (offset + bit / 8, Some((bit % 8, n))),
                    None => (offset + member.offset, None),
                };
                let len = match bits {
                    Some((shift, n)) => (shift + n).div_ceil(8),
                    None => size,
                };
                Ok(Some(Found {
                    loc: offset_loc(&b.loc, start, len)?,
                    type_name: member.type_name,
                    module: b.module,
                    bits,
                    inline: member.inline,
                }))
            }
            A::Index(base, index) => {
                let Some(b) = self.path(base, source, env, m)? else {
                    return Ok(None);
                };
                let i = m.int(source.get(index.span.start..index.span.end).unwrap_or("0"))?;
                let types = Types::new(b.module.debug_info());
                match types.shape(&b.type_name) {
                    Shape::Array { elem, .. } => {
                        let size = types.size(&elem).unwrap_or(0);
                        let off = (i as u64).wrapping_mul(size);
                        Ok(Some(Found {
                            loc: offset_loc(&b.loc, off, size)?,
                            type_name: elem,
                            module: b.module,
                            bits: None,
                            inline: None,
                        }))
                    }
                    Shape::Ptr(Some(p)) => {
                        let size = types.size(&p).unwrap_or(0);
                        let mut f = pointed(&b, p, m)?;
                        if let Loc::Mem(a) = &mut f.loc {
                            *a = a.wrapping_add((i as u64).wrapping_mul(size));
                        }
                        Ok(Some(f))
                    }
                    _ => Err(format!(
                        "cannot subscript `{}`: it is `{}`, not an array or pointer",
                        text(base),
                        b.type_name
                    )),
                }
            }
            A::Unary(UnOp::Deref, x) => {
                let Some(b) = self.path(x, source, env, m)? else {
                    return Ok(None);
                };
                let types = Types::new(b.module.debug_info());
                match types.shape(&b.type_name) {
                    Shape::Ptr(Some(p)) if matches!(types.shape(&p), Shape::Void) => Err(format!(
                        "`{}` is a `void *`: cast it to say what it points to",
                        text(x)
                    )),
                    Shape::Ptr(Some(p)) => Ok(Some(pointed(&b, p, m)?)),
                    Shape::Array { elem, .. } => {
                        let size = types.size(&elem).unwrap_or(0);
                        Ok(Some(Found {
                            loc: offset_loc(&b.loc, 0, size)?,
                            type_name: elem,
                            module: b.module,
                            bits: None,
                            inline: None,
                        }))
                    }
                    _ => Err(format!("`{}` is `{}`, not a pointer", text(x), b.type_name)),
                }
            }
            _ => Ok(None),
        }
    }

    /// Register `$name` of the selected frame, typed as gdb types it: `$rip` a function
    /// pointer, `$rsp` and `$rbp` `void *`, the others `long`. `None` when `name` is no
    /// register (`$0`, `$return` are the snippet language's).
    pub fn register(&self, name: &str) -> Option<Result<Found<'a>, String>> {
        let n = register_number(name)?;
        let (module, _) = self.modules.first().copied()?;
        let value = match self.regs.map(|r| r.get(n)) {
            Some(Some(v)) => v,
            Some(None) => {
                return Some(Err(format!(
                    "`${name}` is not known in this frame: the caller-saved registers are not \
                     recovered above the innermost frame"
                )))
            }
            None => return Some(Err(format!("`${name}` needs a stopped thread"))),
        };
        let type_name = match name {
            "rip" | "pc" => "void (*)()",
            "rsp" | "rbp" | "sp" | "fp" => "void *",
            _ => "long",
        };
        Some(Ok(Found {
            loc: Loc::Value(value.to_le_bytes().to_vec()),
            type_name: type_name.into(),
            module,
            bits: None,
            inline: None,
        }))
    }

    /// The function or variable `addr` is in, as `name` or `name+offset`, for pointers.
    pub fn symbol(&self, addr: u64) -> Option<String> {
        let named = |name: &str, off: u64| {
            if off == 0 {
                name.to_owned()
            } else {
                format!("{name}+{off}")
            }
        };
        self.modules.iter().find_map(|(m, bias)| {
            let link = addr.wrapping_sub(*bias);
            let table = m.functions();
            if let Some(f) = table.containing(LinkAddr(link)) {
                let name = f.display_name().trim_end_matches("@plt");
                return Some(named(name, link - f.addr.0));
            }
            table
                .variables()
                .iter()
                .find(|v| !v.tls && v.addr.0 <= link && link < v.addr.0 + v.size.max(1))
                .map(|v| named(v.display_name(), link - v.addr.0))
        })
    }
}

/// What `$rsp` becomes in an expression, so it is a name the snippet checker and the scope
/// resolve (`$rsp + 8`).
pub const REGISTER_PREFIX: &str = "__gsh_reg_";

/// The DWARF number of register `name` (`rip`, gdb's `pc`, `sp` and `fp` too).
pub fn register_number(name: &str) -> Option<u16> {
    Some(match name {
        "rax" => 0,
        "rdx" => 1,
        "rcx" => 2,
        "rbx" => 3,
        "rsi" => 4,
        "rdi" => 5,
        "rbp" | "fp" => 6,
        "rsp" | "sp" => 7,
        "r8" => 8,
        "r9" => 9,
        "r10" => 10,
        "r11" => 11,
        "r12" => 12,
        "r13" => 13,
        "r14" => 14,
        "r15" => 15,
        "rip" | "pc" => 16,
        _ => return None,
    })
}

/// The general registers in the order `show registers` lists them, as gdb does.
pub const REGISTERS: [&str; 17] = [
    "rax", "rbx", "rcx", "rdx", "rsi", "rdi", "rbp", "rsp", "r8", "r9", "r10", "r11", "r12", "r13",
    "r14", "r15", "rip",
];

/// The object a pointer `b` points to, of type `pointee`.
fn pointed<'a>(
    b: &Found<'a>,
    pointee: String,
    m: &mut dyn PathMachine,
) -> Result<Found<'a>, String> {
    let bytes = match &b.loc {
        Loc::Mem(a) => m.read(*a, 8)?,
        Loc::Value(v) => v.clone(),
        Loc::OptimizedOut => return Err("the pointer is optimized out here".into()),
    };
    let mut p = [0u8; 8];
    let n = bytes.len().min(8);
    p[..n].copy_from_slice(&bytes[..n]);
    Ok(Found {
        loc: Loc::Mem(u64::from_le_bytes(p)),
        type_name: pointee,
        module: b.module,
        bits: None,
        inline: None,
    })
}

/// `len` bytes at `off` into `loc`.
fn offset_loc(loc: &Loc, off: u64, len: u64) -> Result<Loc, String> {
    match loc {
        Loc::Mem(a) => Ok(Loc::Mem(a.wrapping_add(off))),
        Loc::Value(v) => v
            .get(off as usize..(off as usize).saturating_add(len as usize))
            .map(|b| Loc::Value(b.to_vec()))
            .ok_or_else(|| "that part of the value is not in a register".to_owned()),
        Loc::OptimizedOut => Ok(Loc::OptimizedOut),
    }
}

/// The member `field` of `layout`, looking into anonymous structs and unions: its offset
/// from `layout`'s start (of the anonymous aggregates it is in) and itself.
fn find_member(
    types: &Types<'_>,
    layout: &crate::dwarf::TypeLayout,
    field: &str,
    depth: usize,
) -> Option<(u64, crate::dwarf::Member)> {
    if depth > 8 {
        return None;
    }
    for m in &layout.members {
        if m.name.as_deref() == Some(field) {
            return Some((0, m.clone()));
        }
    }
    for m in layout.members.iter().filter(|m| m.name.is_none()) {
        let inner = match (&m.inline, types.shape(&m.type_name)) {
            (Some(l), _) => (**l).clone(),
            (None, Shape::Struct(l) | Shape::Union(l)) => l,
            _ => continue,
        };
        if let Some((off, found)) = find_member(types, &inner, field, depth + 1) {
            return Some((m.offset + off, found));
        }
    }
    None
}

/// The environment `print`'s snippets check against: the frame's own ([`SessionEnv`]),
/// then the globals of every other loaded module (and `MODULE!NAME` placeholders).
pub struct PrintEnv<'e, 'a> {
    /// The frame's environment: its parameters, declared variables, its module's globals and functions.
    pub inner: &'e dyn Env,
    /// The scope whose other modules' globals it adds.
    pub scope: &'e Scope<'a>,
    /// The frame's register-held locals: where in the interpreter's saved block each value
    /// was put.
    pub slots: Vec<(String, u32)>,
}

impl Env for PrintEnv<'_, '_> {
    fn lookup(&self, name: &str) -> Option<Binding> {
        if let Some(reg) = name.strip_prefix(REGISTER_PREFIX) {
            let found = self.scope.register(reg)?.ok()?;
            let env = SessionEnv::new(found.module, None, &[], PointInfo::default(), 0);
            return Some(Binding::Var {
                ty: env.c_type(&found.type_name)?,
                place: VarPlace::Saved(self.slots.iter().find(|(n, _)| n == name)?.1),
            });
        }
        let qualified = self.scope.qualified.iter().any(|(p, ..)| p == name);
        let saved = matches!(
            self.inner.lookup(name),
            Some(Binding::Var {
                place: VarPlace::Saved(_),
                ..
            })
        );
        // The frame's locals in memory, unless the parameter's register at entry is meant.
        let local = (!qualified && !saved)
            .then(|| self.scope.local(name))
            .flatten();
        if !qualified && local.is_none() {
            if let Some(b) = self.inner.lookup(name) {
                return Some(b);
            }
        }
        let found = match local {
            Some(l) => l,
            None => self.scope.global(name)?,
        };
        let place = match found.loc {
            Loc::Mem(addr) => VarPlace::Absolute(addr),
            Loc::Value(_) => VarPlace::Saved(self.slots.iter().find(|(n, _)| n == name)?.1),
            Loc::OptimizedOut => return None,
        };
        let env = SessionEnv::new(found.module, None, &[], PointInfo::default(), 0);
        Some(Binding::Var {
            ty: env.c_type(&found.type_name)?,
            place,
        })
    }

    fn names(&self) -> Vec<String> {
        self.inner.names()
    }

    fn struct_layout(&self, name: &str) -> Option<StructLayout> {
        self.inner.struct_layout(name).or_else(|| {
            self.scope.modules.iter().find_map(|(m, _)| {
                SessionEnv::new(m, None, &[], PointInfo::default(), 0).struct_layout(name)
            })
        })
    }

    fn point(&self) -> &PointInfo {
        self.inner.point()
    }
}

/// A frame of a stopped thread, as location expressions see it.
pub struct StoppedFrame<'r> {
    /// The frame's registers, as far as the unwinder recovered them.
    pub regs: crate::unwind::Regs,
    /// The canonical frame address; 0 when the unwinder could not find it.
    pub cfa: u64,
    /// The load bias of the frame's module.
    pub bias: u64,
    /// Reads `len` bytes at a runtime address; `None` when they cannot be read.
    pub read: &'r dyn Fn(u64, usize) -> Option<Vec<u8>>,
    /// The frame that called this one, when it is in the same module.
    pub caller: Option<Box<StoppedFrame<'r>>>,
    /// A register the unwinder did not recover, found another way ([`preserved_register`]).
    pub recover: Option<&'r dyn Fn(u16) -> Option<u64>>,
    /// This frame's return address (the caller's pc).
    pub return_address: Option<u64>,
}

impl FrameRegs for StoppedFrame<'_> {
    fn reg(&self, n: u16) -> Option<u64> {
        self.regs.get(n).or_else(|| self.recover.and_then(|r| r(n)))
    }

    fn cfa(&self) -> Option<u64> {
        (self.cfa != 0).then_some(self.cfa)
    }

    fn read(&self, addr: u64, len: usize) -> Option<Vec<u8>> {
        (self.read)(addr, len)
    }

    fn bias(&self) -> u64 {
        self.bias
    }

    fn caller(&self) -> Option<&dyn FrameRegs> {
        self.caller.as_deref().map(|c| c as &dyn FrameRegs)
    }

    fn return_address(&self) -> Option<u64> {
        self.return_address
    }
}

/// Register `reg` (DWARF numbering) of frame `n` of `frames` (innermost first) when the
/// unwinder could not recover it, as a caller-saved register above the innermost frame: it
/// still holds the innermost frame's value when no function from frame 0 up to frame `n - 1`
/// may write it, as the callee analysis ([`crate::callee::effects`]) proves. gcc relies on
/// exactly that when it keeps a value in a caller-saved register across a call to a function
/// it knows leaves the register alone (interprocedural register allocation).
pub fn preserved_register(
    modules: &[(&Module, u64)],
    frames: &[crate::unwind::Frame],
    n: usize,
    reg: u16,
) -> Option<u64> {
    // DWARF numbering to the hardware numbering `CalleeEffects::gprs` uses.
    const HARDWARE: [u16; 16] = [0, 2, 1, 3, 6, 7, 5, 4, 8, 9, 10, 11, 12, 13, 14, 15];
    let bit = 1u16 << *HARDWARE.get(usize::from(reg))?;
    for f in frames.get(..n)? {
        let pc = f.lookup_pc();
        let (module, func) = modules.iter().find_map(|(m, bias)| {
            let link = LinkAddr(pc.wrapping_sub(*bias));
            m.functions().containing(link).map(|f| (*m, f.addr))
        })?;
        let effects = crate::callee::effects(module, func).ok()?;
        if effects.gprs & bit != 0 {
            return None;
        }
    }
    frames.first()?.regs.get(reg)
}
