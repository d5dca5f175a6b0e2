//! The snippet compiler: what users write at an instrumentation point, in a subset of C, from
//! text to checked program to x86-64 machine code.
//!
//! # Pipeline
//!
//! [`lexer`] (nom) → [`parser`] → [`ast`] (spans, no process references) → [`check`] (names
//! and types, against the [`env::Env`] trait) → [`ir`] (typed tree, conversions explicit) →
//! [`codegen`] (iced-x86). [`interp`] runs the same [`ir`] and is the reference the generated
//! code is tested against. [`diag`] renders diagnostics with the line, a caret and a hint.
//! The grammar, for users, is in `GRAMMAR.md` beside this file.
//!
//! The parser always returns a tree and its diagnostics, even for half-typed input, so a shell
//! can complete and highlight; [`compile`] returns code only when there are no errors.
//!
//! # The snippet ABI
//!
//! The contract between the code [`codegen`] emits and the trampoline that runs it (numbers in
//! [`abi`]):
//!
//! - **Entry**: execution starts at the first byte of [`codegen::Code::bytes`], which was
//!   encoded for the address given to [`compile`]. If [`codegen::Requirements::base`], `rbx`
//!   holds the address of an [`abi::SavedRegs`] block (argument registers `rdi rsi rdx rcx r8
//!   r9` at offsets 0..48, `rax` at 48, the low halves of `xmm0..7` at 64..128), with the
//!   slots in `saved_reads` filled.
//! - **Stack**: if [`codegen::Clobbers::calls_out`], `rsp` must be 16-byte aligned at entry
//!   (the snippet keeps it aligned at each `call` it makes). If [`codegen::Clobbers::stack`],
//!   the snippet pushes below `rsp`, so the trampoline must first step over the 128-byte red
//!   zone. Otherwise the snippet touches no stack and `rsp` may be anything.
//! - **Exit**: the snippet falls off its last byte with `rsp` and `rbx` as on entry. It never
//!   returns with `ret`, so a trampoline can inline it. Registers it may have changed are in
//!   [`codegen::Clobbers`]; slots of the saved block it wrote are in `saved_writes` and take
//!   effect when the trampoline restores registers from the block (`$return = 0;`).
//! - **Data**: declared variables and mutatee globals have absolute addresses (from the
//!   environment); the snippet reaches them RIP-relatively (`[rip+disp32]`) when they are
//!   within ±2 GiB of the code, else through `mov r11, imm64`. String literals live in a data
//!   area after the code, jumped over. Called functions are reached with `call rel32` when
//!   within ±2 GiB (position independent) and `mov r11, imm64; call r11` otherwise.
//! - **Counters**: `n++;` for a declared `long n` near the code is exactly one instruction,
//!   `inc qword ptr [rip+disp]`, and clobbers only the flags.
//! - **`$0..$5`** read slots 0..5 of the block (valid at entry and before calls);
//!   **`$return`** reads `rax` (or `xmm0` for a `double` return type), valid only at exits and
//!   after calls; **`$tid`** is `gettid(2)` (a `syscall`, clobbering `rax rcx r11`), chosen
//!   over a `%fs`-relative TCB read because it works in every mutatee, static or not.
//!
//! # Semantics C leaves undefined
//!
//! Signed overflow wraps; `x / 0` and `x % 0` are 0 and `MIN / -1` is `MIN`; shift counts are
//! masked to the operand width (31 or 63); out-of-range `double` to integer conversions give
//! `LONG_MIN` wrapped to the target width; evaluation is left to right. See [`interp`].

#![warn(missing_docs)]

/// The user's guide to the snippet language (`help snippets`, the man page's SNIPPETS section).
pub const GRAMMAR: &str = include_str!("GRAMMAR.md");

pub mod abi;
pub mod ast;
pub mod cache;
pub mod check;
pub mod codegen;
pub mod diag;
pub mod env;
pub mod interp;
pub mod ir;
pub mod lexer;
pub mod libc;
pub mod parser;
pub mod types;

#[cfg(test)]
mod call_tests;
#[cfg(test)]
mod check_tests;
#[cfg(test)]
mod codegen_tests;
#[cfg(test)]
mod diff_tests;
#[cfg(test)]
mod parser_tests;
#[cfg(test)]
mod testenv;

use ast::Span;
pub use codegen::{Clobbers, Code, Requirements};
pub use diag::Diagnostic;
pub use env::{Binding, Env, MapEnv, PointInfo, PointKind, VarPlace};
pub use types::{FnSig, StructLayout, Type};

/// A snippet compiled for one address.
#[derive(Clone, Debug)]
pub struct Compiled {
    /// The checked program, for the interpreter and for inspection.
    pub program: ir::Program,
    /// The machine code, encoded for the address asked for.
    pub code: Code,
    /// Warnings (errors stop compilation).
    pub warnings: Vec<Diagnostic>,
}

/// Parses and checks `source` against `env`: the checked program when there are no errors,
/// and every diagnostic either way.
pub fn check_source(source: &str, env: &dyn Env) -> (Option<ir::Program>, Vec<Diagnostic>) {
    let (ast, mut diags) = parser::parse(source);
    let parse_failed = diags.iter().any(Diagnostic::is_error);
    let (program, more) = check::check(&ast, env);
    diags.extend(more);
    (program.filter(|_| !parse_failed), diags)
}

/// Compiles `source` to machine code that will run at `addr`. On failure, the diagnostics
/// (render them with [`diag::render_all`]).
pub fn compile(source: &str, env: &dyn Env, addr: u64) -> Result<Compiled, Vec<Diagnostic>> {
    let (program, diags) = check_source(source, env);
    let Some(program) = program else {
        return Err(diags);
    };
    let code = generate(&program, source, addr)?;
    Ok(Compiled {
        program,
        code,
        warnings: diags,
    })
}

/// Machine code for `program` (checked from `source`) that will run at `addr`: what
/// [`compile`] does after checking, for a program checked before ([`cache::CheckCache`]).
pub fn generate(program: &ir::Program, source: &str, addr: u64) -> Result<Code, Vec<Diagnostic>> {
    codegen::generate(program, addr)
        .map_err(|e| vec![Diagnostic::error(Span::new(0, source.len()), e.to_string())])
}

/// A variable from `declare TYPE NAME [= INIT]`, ready for the shell to allocate.
#[derive(Clone, Debug, PartialEq)]
pub struct Declared {
    /// The variable's name.
    pub name: String,
    /// Its snippet type.
    pub ty: Type,
    /// The initial bytes (little-endian, `ty.size()` long); zeros without an initializer.
    pub init: Vec<u8>,
}

/// Checks the text after the shell's `declare`: a scalar type, a name, and an optional
/// constant initializer (`declare double ratio = 1.0 / 3`), evaluated now.
pub fn declare(source: &str, env: &dyn Env) -> Result<Declared, Vec<Diagnostic>> {
    let d = parser::parse_declaration(source)?;
    let ty = check::resolve_type(&d.ty, env).map_err(|e| vec![e])?;
    if !ty.is_scalar() {
        return Err(vec![Diagnostic::error(
            d.ty.span,
            format!("cannot declare a variable of type `{ty}`"),
        )
        .with_hint("declare an integer, a double or a pointer")]);
    }
    let mut init = vec![0u8; ty.size() as usize];
    if let Some(e) = &d.init {
        let (checked, diags) = check::check_expr(e, env);
        let Some((value, _strings)) = checked else {
            return Err(diags);
        };
        let convertible = (value.ty.is_arith() && ty.is_arith())
            || (ty.is_ptr() && matches!(value.kind, ir::ExprKind::Int(0)));
        if !convertible {
            return Err(vec![Diagnostic::error(
                e.span,
                format!("cannot initialize a `{ty}` with `{}`", value.ty),
            )
            .with_hint(
                "initializers are numbers; assign anything else in a snippet",
            )]);
        }
        let v = interp::eval(&value, &mut ConstMachine).map_err(|m| {
            vec![Diagnostic::error(e.span, m).with_hint("initializers must be constants")]
        })?;
        let bits = match interp::convert(v, &value.ty, &ty) {
            interp::Value::Int(b) => b,
            interp::Value::Double(f) => f.to_bits(),
        };
        let n = init.len();
        init.copy_from_slice(&bits.to_le_bytes()[..n]);
    }
    Ok(Declared {
        name: d.name,
        ty,
        init,
    })
}

/// Evaluates constant initializers: anything that touches memory or calls is not constant.
struct ConstMachine;

impl interp::Machine for ConstMachine {
    fn read(&mut self, _: interp::Addr, _: u32) -> Result<u64, String> {
        Err("an initializer cannot read variables".into())
    }

    fn write(&mut self, _: interp::Addr, _: u32, _: u64) -> Result<(), String> {
        Err("an initializer cannot assign".into())
    }

    fn string_addr(&mut self, _: usize) -> u64 {
        0
    }

    fn call(
        &mut self,
        _: u64,
        _: &[(interp::Value, Type)],
        _: &Type,
    ) -> Result<interp::Value, String> {
        Err("an initializer cannot call functions".into())
    }

    fn tid(&mut self) -> u64 {
        0
    }
}
