//! `print EXPR` and `execute { SNIPPET }` in a live process: the snippet is checked as for
//! `at` and run by the reference interpreter ([`crate::snippet::interp`]) against the
//! process's memory and registers, instead of being compiled into a trampoline. Calls to the
//! mutatee's functions are injected on the stopped thread; string literals they receive are
//! written into memory gsh allocates. A running process can be read (declared variables,
//! globals) without stopping it; anything that writes or calls needs it stopped.

#![warn(missing_docs)]

use crate::process::{MemReader, Process, ProcessError};
use crate::snippet::abi::{self, SAVED_REGS_SIZE};
use crate::snippet::interp::{self, Addr, Machine, Value};
use crate::snippet::ir::{Program, Stmt};
use crate::snippet::types::Type;
use crate::snippet::{self, Env};

use crate::patch::AllocKind;
use crate::snippet::ast::StmtKind;

use super::env::SessionEnv;
use super::scope::{Found, Loc, PathMachine, PrintEnv, Scope};
use super::values::{self, Printer, Types};
use super::Live;
use crate::session::Session;
use crate::snippet::env::{PointInfo, PointKind};

/// Why evaluation failed.
#[derive(Debug, thiserror::Error)]
pub enum EvalError {
    /// The text does not check (the rendered diagnostics).
    #[error("{0}")]
    Snippet(String),
    /// Running the snippet failed: memory it reads cannot be read, a size is unknown, an
    /// injected call failed.
    #[error("{0}")]
    Machine(String),
    /// Process control failed (the process ended, a thread vanished).
    #[error(transparent)]
    Process(#[from] ProcessError),
    /// The session cannot give what the evaluation needs (no file is open).
    #[error(transparent)]
    Session(#[from] crate::error::Error),
    /// The text is statements, not one expression.
    #[error("`print` takes one expression")]
    NotAnExpression,
    /// The process ended without leaving declared variables' values behind.
    #[error("the process is gone and left no values to print")]
    NothingLeft,
}

/// The environment `print`/`execute` check against in the live process, and the address the
/// snippet is taken to run at: with the thread at `rip` in a known function, that function's
/// (at its entry, its parameters by name and `$0..$5`); elsewhere, or without `rip`, main's
/// declared variables and globals at main's entry.
pub fn live_env<'a>(
    session: &'a Session,
    live: &'a Live,
    rip: Option<u64>,
) -> crate::error::Result<(SessionEnv<'a>, u64)> {
    let main = session.main()?;
    let main_bias = live.bias(main.id).unwrap_or(0);
    if let Some(rip) = rip {
        for (m, bias) in live.loaded() {
            let link = crate::addr::LinkAddr(rip.wrapping_sub(bias));
            if let Some(f) = m.functions().containing(link) {
                let module = session.module(m.id);
                let func = module.functions().get(f.id);
                let kind = if f.addr == link {
                    PointKind::Entry
                } else {
                    PointKind::default()
                };
                let info = PointInfo {
                    kind,
                    function: func.display_name().to_owned(),
                    module: module.name.clone(),
                    ..PointInfo::default()
                };
                return Ok((
                    SessionEnv::new(module, Some(func), live.declared(), info, bias)
                        .with_session(session)
                        .with_loaded(live.loaded().map(|(m, b)| (&**m, b))),
                    rip,
                ));
            }
        }
    }
    Ok((
        SessionEnv::new(main, None, live.declared(), PointInfo::default(), main_bias)
            .with_session(session)
            .with_loaded(live.loaded().map(|(m, b)| (&**m, b))),
        main_bias.wrapping_add(main.binary.entry().0),
    ))
}

/// A printed value, as `print` shows it.
#[derive(Clone, Debug)]
pub struct Printed {
    /// The value as `print` shows it (`$1 = ` left to the caller).
    pub shown: String,
}

impl std::fmt::Display for Printed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.shown)
    }
}

/// A scalar the snippet interpreter computed, shown as gdb shows it.
/// `symbol` names what a pointer points into; a pointer other than a `char *` is prefixed
/// with its type, as gdb does (`(struct shape *) 0x4040a0 <shapes+88>`).
fn scalar_text(
    value: Value,
    ty: &Type,
    text: Option<String>,
    symbol: &dyn Fn(u64) -> Option<String>,
) -> String {
    match (value, ty) {
        (Value::Double(d), _) => values::float_text(d, 17),
        (Value::Int(v), Type::Ptr(_)) => {
            let mut s = if is_char_ptr(ty) {
                format!("{v:#x}")
            } else {
                format!("({ty}) {v:#x}")
            };
            if let Some(name) = (v != 0).then(|| symbol(v)).flatten() {
                s.push_str(&format!(" <{name}>"));
            }
            if let Some(t) = text {
                s.push_str(&format!(" {t}"));
            }
            s
        }
        (Value::Int(v), Type::Int(k)) if k.size() == 1 => {
            let signed = if k.signed() {
                v as u8 as i8 as i64
            } else {
                (v as u8).into()
            };
            values::char_text(signed, v as u8)
        }
        (Value::Int(v), Type::Int(k)) if k.signed() => format!("{}", v as i64),
        (Value::Int(v), _) => format!("{v}"),
    }
}

/// Where the interpreter reads and writes.
enum Target<'p> {
    Stopped {
        p: &'p mut Process,
        /// The thread whose registers `$0..$5`, `$return` and parameters come from.
        tid: Option<i32>,
    },
    Running(&'p MemReader),
    /// The process exited: only the bytes kept at its exit remain (base address, bytes).
    Exited(u64, &'p [u8]),
}

struct LiveMachine<'p> {
    target: Target<'p>,
    /// The saved-register block, then the values of the frame's register-held locals
    /// (read-only slots `PrintEnv` binds them to).
    saved: Vec<u8>,
    saved_dirty: bool,
    strings: Vec<Vec<u8>>,
    string_addrs: Vec<Option<u64>>,
    /// Where to allocate string memory near.
    near: u64,
}

impl<'p> LiveMachine<'p> {
    /// A machine over `target`, with the saved-register block `saved` and the program's string
    /// literals `strings`; string memory is allocated near `near`.
    fn new(target: Target<'p>, saved: Vec<u8>, strings: Vec<Vec<u8>>, near: u64) -> Self {
        LiveMachine {
            target,
            saved,
            saved_dirty: false,
            strings,
            string_addrs: Vec::new(),
            near,
        }
    }

    /// A machine over stopped process `p`, with thread `tid`'s registers saved.
    fn over_stopped(
        p: &'p mut Process,
        tid: Option<i32>,
        strings: Vec<Vec<u8>>,
        near: u64,
    ) -> Result<Self, EvalError> {
        let saved = saved_from(p, tid)?;
        Ok(LiveMachine::new(
            Target::Stopped { p, tid },
            saved,
            strings,
            near,
        ))
    }
}

impl LiveMachine<'_> {
    fn stopped(&mut self, what: &str) -> Result<&mut Process, String> {
        match &mut self.target {
            Target::Stopped { p, .. } => Ok(p),
            Target::Running(_) => Err(format!("the process is running; `halt` it first to {what}")),
            Target::Exited(..) => Err(format!("the process has exited; cannot {what}")),
        }
    }

    fn read_mem(&mut self, addr: u64, len: usize) -> Result<Vec<u8>, String> {
        match &self.target {
            Target::Stopped { p, .. } => p.read(addr, len).map_err(|e| e.to_string()),
            Target::Running(r) => r.read(addr, len).map_err(|e| e.to_string()),
            Target::Exited(base, bytes) => {
                let off = addr.wrapping_sub(*base) as usize;
                bytes
                    .get(off..off.saturating_add(len))
                    .map(<[u8]>::to_vec)
                    .ok_or_else(|| {
                        "the process has exited; only declared variables were kept".to_owned()
                    })
            }
        }
    }
}

impl Machine for LiveMachine<'_> {
    fn read(&mut self, addr: Addr, size: u32) -> Result<u64, String> {
        let bytes = match addr {
            Addr::Mem(a) => self.read_mem(a, size as usize)?,
            Addr::Saved(off) => {
                let off = off as usize;
                self.saved
                    .get(off..off + size as usize)
                    .ok_or("outside the saved registers")?
                    .to_vec()
            }
        };
        let mut b = [0u8; 8];
        b[..bytes.len()].copy_from_slice(&bytes);
        Ok(u64::from_le_bytes(b))
    }

    fn write(&mut self, addr: Addr, size: u32, bits: u64) -> Result<(), String> {
        let bytes = &bits.to_le_bytes()[..size as usize];
        match addr {
            Addr::Mem(a) => self
                .stopped("change its memory")?
                .write(a, bytes)
                .map_err(|e| e.to_string()),
            Addr::Saved(off) if off >= SAVED_REGS_SIZE => Err(
                "that variable lives in a register of a frame gsh does not write; \
                 `print` reads it only"
                    .into(),
            ),
            Addr::Saved(off) => {
                self.stopped("change its registers")?;
                let off = off as usize;
                self.saved
                    .get_mut(off..off + bytes.len())
                    .ok_or("outside the saved registers")?
                    .copy_from_slice(bytes);
                self.saved_dirty = true;
                Ok(())
            }
        }
    }

    fn string_addr(&mut self, index: usize) -> u64 {
        if let Some(Some(a)) = self.string_addrs.get(index) {
            return *a;
        }
        let Some(bytes) = self.strings.get(index).cloned() else {
            return 0;
        };
        let near = self.near;
        let Ok(p) = self.stopped("pass it strings") else {
            return 0;
        };
        let mut data = bytes;
        data.push(0);
        let Ok(at) = p.allocate(near, data.len() as u64, AllocKind::Data) else {
            return 0;
        };
        if p.write(at, &data).is_err() {
            return 0;
        }
        if self.string_addrs.len() <= index {
            self.string_addrs.resize(index + 1, None);
        }
        self.string_addrs[index] = Some(at);
        at
    }

    fn call(&mut self, addr: u64, args: &[(Value, Type)], ret: &Type) -> Result<Value, String> {
        if args.iter().any(|(_, t)| *t == Type::Double) || *ret == Type::Double {
            return Err(
                "calls with `double` arguments or results are not supported by \
`print`/`execute` yet"
                    .into(),
            );
        }
        let ints: Vec<u64> = args
            .iter()
            .map(|(v, _)| match v {
                Value::Int(i) => *i,
                Value::Double(d) => d.to_bits(),
            })
            .collect();
        let p = self.stopped("call its functions")?;
        let r = p.call(addr, &ints).map_err(|e| e.to_string())?;
        Ok(Value::Int(r))
    }

    fn tid(&mut self) -> u64 {
        match &self.target {
            Target::Stopped { tid: Some(t), .. } => *t as u64,
            Target::Stopped { p, .. } => p.pid() as u64,
            Target::Running(r) => r.pid() as u64,
            Target::Exited(..) => 0,
        }
    }
}

fn check(source: &str, env: &dyn Env) -> Result<Program, EvalError> {
    let (program, diags) = snippet::check_source(source, env);
    match program {
        Some(p) if !diags.iter().any(|d| d.is_error()) => Ok(p),
        _ => Err(EvalError::Snippet(
            snippet::diag::render_all(&diags, source)
                .trim_end()
                .to_owned(),
        )),
    }
}

fn saved_from(p: &Process, tid: Option<i32>) -> Result<Vec<u8>, EvalError> {
    let mut saved = vec![0u8; SAVED_REGS_SIZE as usize];
    if let Some(tid) = tid {
        let r = p.regs(tid)?;
        let ints = [r.rdi, r.rsi, r.rdx, r.rcx, r.r8, r.r9];
        for (i, v) in ints.iter().enumerate() {
            let off = abi::arg_offset(i as u32) as usize;
            saved[off..off + 8].copy_from_slice(&v.to_le_bytes());
        }
        let off = abi::RAX_OFFSET as usize;
        saved[off..off + 8].copy_from_slice(&r.rax.to_le_bytes());
    }
    Ok(saved)
}

fn write_back(p: &mut Process, tid: Option<i32>, saved: &[u8]) -> Result<(), EvalError> {
    let Some(tid) = tid else { return Ok(()) };
    let mut r = p.regs(tid)?;
    let get = |off: u32| {
        let o = off as usize;
        u64::from_le_bytes(saved[o..o + 8].try_into().expect("8 bytes"))
    };
    r.rdi = get(abi::arg_offset(0));
    r.rsi = get(abi::arg_offset(1));
    r.rdx = get(abi::arg_offset(2));
    r.rcx = get(abi::arg_offset(3));
    r.r8 = get(abi::arg_offset(4));
    r.r9 = get(abi::arg_offset(5));
    r.rax = get(abi::RAX_OFFSET);
    p.set_regs(tid, &r)?;
    Ok(())
}

/// Reads a NUL-terminated string of at most 200 bytes, quoted as gdb quotes it.
fn c_string(m: &mut LiveMachine<'_>, addr: u64) -> Option<String> {
    if addr == 0 {
        return None;
    }
    let mut out = Vec::new();
    for chunk in 0..4 {
        let bytes = m.read_mem(addr + chunk * 50, 50).ok()?;
        if let Some(n) = bytes.iter().position(|b| *b == 0) {
            out.extend_from_slice(&bytes[..=n]);
            return Some(values::char_array(&out));
        }
        out.extend_from_slice(&bytes);
    }
    Some(format!("{}...", values::char_array(&out)))
}

fn is_char_ptr(t: &Type) -> bool {
    matches!(t, Type::Ptr(inner) if matches!(**inner, Type::Int(k) if k.size() == 1))
}

/// `print EXPR` in a stopped process (`tid` gives `$N` and the parameters' registers).
pub fn print_stopped(
    p: &mut Process,
    tid: Option<i32>,
    env: &dyn Env,
    scope: &mut Scope<'_>,
    near: u64,
    expr: &str,
) -> Result<Printed, EvalError> {
    let mut m = LiveMachine::over_stopped(p, tid, Vec::new(), near)?;
    print_with(&mut m, env, scope, expr, tid)
}

/// `print EXPR` after the process exited, over the declared variables' final bytes.
pub fn print_exited(
    base: u64,
    bytes: &[u8],
    env: &dyn Env,
    scope: &mut Scope<'_>,
    expr: &str,
) -> Result<Printed, EvalError> {
    let mut m = LiveMachine::new(
        Target::Exited(base, bytes),
        vec![0; SAVED_REGS_SIZE as usize],
        Vec::new(),
        0,
    );
    print_with(&mut m, env, scope, expr, None)
}

/// `print EXPR` in a running process: reads only.
pub fn print_running(
    reader: &MemReader,
    env: &dyn Env,
    scope: &mut Scope<'_>,
    expr: &str,
) -> Result<Printed, EvalError> {
    let mut m = LiveMachine::new(
        Target::Running(reader),
        vec![0; SAVED_REGS_SIZE as usize],
        Vec::new(),
        0,
    );
    print_with(&mut m, env, scope, expr, None)
}

/// Appends the values of the frame's register-held locals to the machine's saved block, so
/// snippet expressions can read them (`total + 1`): (name, offset) of each.
fn register_slots(m: &mut LiveMachine<'_>, scope: &Scope<'_>) -> Vec<(String, u32)> {
    let mut slots = Vec::new();
    let mut add = |name: String, bytes: &[u8]| {
        let off = m.saved.len();
        let mut padded = bytes.to_vec();
        padded.resize(bytes.len().next_multiple_of(16).max(16), 0);
        m.saved.extend_from_slice(&padded);
        slots.push((name, off as u32));
    };
    if let Some(regs) = &scope.regs {
        let aliases = ["pc", "sp", "fp"];
        for name in super::scope::REGISTERS.iter().chain(&aliases) {
            if let Some(v) = super::scope::register_number(name).and_then(|n| regs.get(n)) {
                add(
                    format!("{}{name}", super::scope::REGISTER_PREFIX),
                    &v.to_le_bytes(),
                );
            }
        }
    }
    for v in &scope.locals {
        if let crate::dwarf::VarLocation::Value(bytes) = &v.location {
            add(v.info.name.clone(), bytes);
        }
    }
    slots
}

/// `FIRST@COUNT` split at its `@`, outside quotes.
fn split_at_sign(text: &str) -> Option<(&str, &str)> {
    let mut quote = None;
    let mut escaped = false;
    for (i, c) in text.char_indices() {
        match (quote, c) {
            (Some(_), _) if escaped => escaped = false,
            (Some(_), '\\') => escaped = true,
            (Some(q), c) if c == q => quote = None,
            (Some(_), _) => {}
            (None, '"' | '\'') => quote = Some(c),
            (None, '@') => return Some((text[..i].trim(), text[i + 1..].trim())),
            _ => {}
        }
    }
    None
}

/// A [`LiveMachine`] as paths see it.
struct Paths<'m, 'p> {
    m: &'m mut LiveMachine<'p>,
    env: &'m dyn Env,
}

impl PathMachine for Paths<'_, '_> {
    fn read(&mut self, addr: u64, len: usize) -> Result<Vec<u8>, String> {
        self.m
            .read_mem(addr, len)
            .map_err(|e| format!("cannot read memory at {addr:#x}: {e}"))
    }

    fn saved(&self, offset: u32, len: usize) -> Option<Vec<u8>> {
        let o = offset as usize;
        self.m.saved.get(o..o + len).map(<[u8]>::to_vec)
    }

    fn int(&mut self, source: &str) -> Result<i64, String> {
        let program = check(&format!("{source};"), self.env).map_err(|e| e.to_string())?;
        let [Stmt::Expr(e)] = &program.stmts[..] else {
            return Err("a subscript is one expression".into());
        };
        if !e.ty.is_int() {
            return Err(format!("a subscript is an integer, not `{}`", e.ty));
        }
        self.m.strings = program.strings.clone();
        match interp::eval(e, self.m)? {
            Value::Int(v) => Ok(v as i64),
            Value::Double(_) => Err("a subscript is an integer".into()),
        }
    }
}

/// The object a path names, shown with its DWARF type.
fn show_found(
    m: &mut LiveMachine<'_>,
    scope: &Scope<'_>,
    f: &Found<'_>,
) -> Result<String, EvalError> {
    let types = Types::new(f.module.debug_info());
    let size = match (f.bits, &f.inline) {
        (Some((shift, n)), _) => (shift + n).div_ceil(8),
        (None, Some(l)) => l.size.unwrap_or(0),
        (None, None) => types.size(&f.type_name).ok_or_else(|| {
            EvalError::Machine(format!("the size of `{}` is not known", f.type_name))
        })?,
    };
    if size > 1 << 20 {
        return Err(EvalError::Machine(format!(
            "`{}` is {size} bytes; print a part of it",
            f.type_name
        )));
    }
    let bytes = match &f.loc {
        Loc::OptimizedOut => return Ok("<optimized out>".into()),
        Loc::Mem(a) => m
            .read_mem(*a, size as usize)
            .map_err(|e| EvalError::Machine(format!("cannot read memory at {a:#x}: {e}")))?,
        Loc::Value(v) => v.clone(),
    };
    let mut read = |a: u64, n: usize| m.read_mem(a, n).ok();
    let symbol = |a: u64| scope.symbol(a);
    let mut printer = Printer {
        types,
        read: &mut read,
        symbol: &symbol,
        format: scope.format,
    };
    Ok(match (f.bits, &f.inline) {
        (Some((shift, n)), _) => printer.bitfield(&f.type_name, &bytes, shift, n),
        (None, Some(l)) => printer.aggregate(l, &bytes, 0),
        (None, None) => printer.top(&f.type_name, &bytes),
    })
}

fn print_with(
    m: &mut LiveMachine<'_>,
    env: &dyn Env,
    scope: &mut Scope<'_>,
    expr: &str,
    tid: Option<i32>,
) -> Result<Printed, EvalError> {
    let text = scope
        .qualify(expr.trim().trim_end_matches(';'))
        .map_err(EvalError::Machine)?;
    let scope = &*scope;
    let slots = register_slots(m, scope);
    let env = PrintEnv {
        inner: env,
        scope,
        slots,
    };
    // gdb's artificial array `FIRST@COUNT`: COUNT objects from where FIRST lies.
    if let Some((first, count)) = split_at_sign(&text) {
        let source = format!("{first};");
        let (ast, diags) = crate::snippet::parser::parse(&source);
        let e = match (diags.iter().any(|d| d.is_error()), &ast.stmts[..]) {
            (false, [stmt]) => match &stmt.kind {
                StmtKind::Expr(e) => Some(e.clone()),
                _ => None,
            },
            _ => None,
        };
        let mut paths = Paths { m, env: &env };
        let found = match e {
            Some(e) => scope.path(&e, &source, &env, &mut paths),
            None => Ok(None),
        }
        .map_err(EvalError::Machine)?;
        let n = paths.int(count).map_err(EvalError::Machine)?;
        let Some(mut f) = found.filter(|f| matches!(f.loc, Loc::Mem(_)) && f.bits.is_none()) else {
            return Err(EvalError::Machine(format!(
                "`@` needs an object in memory on its left: `{}` is not one",
                scope.unqualify(first)
            )));
        };
        if !(1..=100_000).contains(&n) {
            return Err(EvalError::Machine(format!(
                "`@{count}`: the count is 1 to 100000"
            )));
        }
        // An array of arrays keeps its own dimensions inside the new one.
        f.type_name = match f
            .type_name
            .find('[')
            .filter(|_| !f.type_name.contains("(*"))
        {
            Some(open) => format!(
                "{} [{n}]{}",
                f.type_name[..open].trim_end(),
                &f.type_name[open..]
            ),
            None => format!("{} [{n}]", f.type_name),
        };
        return Ok(Printed {
            shown: show_found(m, scope, &f)?,
        });
    }
    let source = format!("{text};");
    // An access path over variables DWARF types: printed whole, with DWARF's types.
    let (ast, diags) = crate::snippet::parser::parse(&source);
    if let (false, [stmt]) = (diags.iter().any(|d| d.is_error()), &ast.stmts[..]) {
        if let StmtKind::Expr(e) = &stmt.kind {
            let found = scope
                .path(e, &source, &env, &mut Paths { m, env: &env })
                .map_err(EvalError::Machine)?;
            if let Some(f) = found {
                return Ok(Printed {
                    shown: show_found(m, scope, &f)?,
                });
            }
        }
    }
    let program = match check(&source, &env) {
        Ok(p) => p,
        Err(e) => {
            let e = match e {
                EvalError::Snippet(text) => EvalError::Snippet(scope.unqualify(&text)),
                other => other,
            };
            return aggregate(m, &env, scope, &text).ok_or(e)?;
        }
    };
    let [Stmt::Expr(e)] = &program.stmts[..] else {
        return Err(EvalError::NotAnExpression);
    };
    m.strings = program.strings.clone();
    let value = interp::eval(e, m).map_err(EvalError::Machine)?;
    let text = match value {
        Value::Int(a) if is_char_ptr(&e.ty) => c_string(m, a),
        _ => None,
    };
    if m.saved_dirty {
        if let Target::Stopped { p, .. } = &mut m.target {
            write_back(p, tid, &m.saved)?;
        }
    }
    let shown = match (scope.format, value) {
        (Some(f), Value::Int(v)) => {
            values::formatted(v, e.ty.size().min(8) * 8, f, &|a| scope.symbol(a))
        }
        _ => scalar_text(value, &e.ty, text, &|a| scope.symbol(a)),
    };
    Ok(Printed { shown })
}

/// A whole struct that is no access path (`*(struct pt *)p`): its address from the snippet
/// interpreter, its layout from the DWARF of the module that defines it. `None` when `text`
/// is not that.
fn aggregate(
    m: &mut LiveMachine<'_>,
    env: &dyn Env,
    scope: &Scope<'_>,
    text: &str,
) -> Option<Result<Printed, EvalError>> {
    let program = check(&format!("&({text});"), env).ok()?;
    let [Stmt::Expr(e)] = &program.stmts[..] else {
        return None;
    };
    let Some(crate::snippet::Type::Struct { name, .. }) = e.ty.pointee() else {
        return None;
    };
    let spelling = format!("struct {name}");
    let module = scope.modules.iter().map(|(m, _)| *m).find(|m| {
        m.debug_info()
            .and_then(|d| d.type_layout(&spelling))
            .is_some()
    })?;
    m.strings = program.strings.clone();
    let addr = match interp::eval(e, m) {
        Ok(Value::Int(a)) => a,
        Ok(Value::Double(_)) => return None,
        Err(e) => return Some(Err(EvalError::Machine(e))),
    };
    let found = Found {
        loc: Loc::Mem(addr),
        type_name: spelling,
        module,
        bits: None,
        inline: None,
    };
    Some(show_found(m, scope, &found).map(|shown| Printed { shown }))
}

/// The address `x EXPR` examines in a stopped process: the value of a pointer or an
/// integer, else where the object `EXPR` names lies (an array, a struct).
pub fn address(
    p: &mut Process,
    tid: Option<i32>,
    env: &dyn Env,
    scope: &mut Scope<'_>,
    near: u64,
    expr: &str,
) -> Result<u64, EvalError> {
    let mut m = LiveMachine::over_stopped(p, tid, Vec::new(), near)?;
    let text = scope.qualify(expr.trim()).map_err(EvalError::Machine)?;
    let scope = &*scope;
    let slots = register_slots(&mut m, scope);
    let env = PrintEnv {
        inner: env,
        scope,
        slots,
    };
    let source = format!("{text};");
    let (ast, diags) = crate::snippet::parser::parse(&source);
    if let (false, [stmt]) = (diags.iter().any(|d| d.is_error()), &ast.stmts[..]) {
        if let StmtKind::Expr(e) = &stmt.kind {
            let found = scope
                .path(
                    e,
                    &source,
                    &env,
                    &mut Paths {
                        m: &mut m,
                        env: &env,
                    },
                )
                .map_err(EvalError::Machine)?;
            if let Some(f) = found {
                let types = Types::new(f.module.debug_info());
                let scalar = matches!(
                    types.shape(&f.type_name),
                    values::Shape::Ptr(_) | values::Shape::Int { .. }
                );
                return match (&f.loc, scalar) {
                    (Loc::Mem(a), false) => Ok(*a),
                    (Loc::Mem(a), true) => {
                        let b = m.read_mem(*a, 8).map_err(EvalError::Machine)?;
                        Ok(u64::from_le_bytes(b.try_into().unwrap_or([0; 8])))
                    }
                    (Loc::Value(b), true) => {
                        let mut w = [0u8; 8];
                        w[..b.len().min(8)].copy_from_slice(&b[..b.len().min(8)]);
                        Ok(u64::from_le_bytes(w))
                    }
                    (Loc::Value(_), false) => Err(EvalError::Machine(format!(
                        "`{expr}` is in registers, not in memory"
                    ))),
                    (Loc::OptimizedOut, _) => Err(EvalError::Machine(format!(
                        "`{expr}` is optimized out here"
                    ))),
                };
            }
        }
    }
    let program = check(&source, &env)?;
    let [Stmt::Expr(e)] = &program.stmts[..] else {
        return Err(EvalError::NotAnExpression);
    };
    if !(e.ty.is_int() || e.ty.is_ptr()) {
        return Err(EvalError::Machine(format!(
            "`{expr}` is `{}`, not an address",
            e.ty
        )));
    }
    m.strings = program.strings.clone();
    match interp::eval(e, &mut m).map_err(EvalError::Machine)? {
        Value::Int(a) => Ok(a),
        Value::Double(_) => Err(EvalError::NotAnExpression),
    }
}

/// Checks a breakpoint condition `cond` (an expression) where it will be evaluated.
pub fn check_condition(cond: &str, env: &dyn Env) -> Result<Program, EvalError> {
    let program = check(&format!("{};", cond.trim()), env)?;
    match &program.stmts[..] {
        [Stmt::Expr(e)] if e.ty.is_scalar() => Ok(program),
        _ => Err(EvalError::NotAnExpression),
    }
}

/// Evaluates a condition from [`check_condition`] on stopped thread `tid`.
pub fn condition_holds(p: &mut Process, tid: i32, program: &Program) -> Result<bool, EvalError> {
    let [Stmt::Expr(e)] = &program.stmts[..] else {
        return Err(EvalError::NotAnExpression);
    };
    let near = p.regs(tid)?.rip;
    let mut m = LiveMachine::over_stopped(p, Some(tid), program.strings.clone(), near)?;
    Ok(match interp::eval(e, &mut m).map_err(EvalError::Machine)? {
        Value::Int(v) => v != 0,
        Value::Double(d) => d != 0.0,
    })
}

/// `execute { SNIPPET }`: runs the statements once in the stopped process.
pub fn execute(
    p: &mut Process,
    tid: Option<i32>,
    env: &dyn Env,
    near: u64,
    source: &str,
) -> Result<(), EvalError> {
    let program = check(source, env)?;
    let mut m = LiveMachine::over_stopped(p, tid, program.strings.clone(), near)?;
    interp::run(&program, &mut m).map_err(EvalError::Machine)?;
    if m.saved_dirty {
        if let Target::Stopped { p, .. } = &mut m.target {
            write_back(p, tid, &m.saved)?;
        }
    }
    Ok(())
}
