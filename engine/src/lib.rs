//! gsh's engine: everything gsh knows about a binary, and (later) everything it does to one.
//!
//! The engine targets x86-64 Linux only; that is said once, here, rather than in scattered
//! `cfg`s. Its layers follow Dyninst's, not its class hierarchy:
//!
//! - [`elf`] reads an ELF file into a [`Binary`]: validated headers, sections, segments, and a
//!   narrow *code source* (`Binary::bytes_at`) through which every later layer reads code.
//! - [`symbols`] finds the functions and variables of a binary, stripped or not, and says where
//!   each name came from.
//! - [`dwarf`] answers source-level questions (signatures, types, lines) from DWARF, found in the
//!   file itself or in a separate debug file.
//! - [`disasm`] decodes instructions for display and analysis.
//! - [`rewrite`] writes a new ELF file: new code and data segments, patches over code.
//! - [`point`] finds instrumentation points in a function's CFG; [`patch`] inserts snippets
//!   there through trampolines. The patcher reads code through a narrow view ([`code`]),
//!   not the session, and writes through a narrow address-space trait ([`space`], below both
//!   the patcher and process control).
//! - [`process`] controls live processes under ptrace: start, attach, halt, memory, injected
//!   calls, threads, forks, library loads.
//! - [`consult`] is the automated bottleneck search over a measuring lab.
//! - [`session`] ties modules together and resolves the names users type.
//!
//! # Naming conventions
//!
//! - A *module* is one loaded ELF object: the executable or a shared library.
//! - A *function* is a range of code with an entry address. Its *name source* says whether the
//!   name came from `.symtab`, `.dynsym`, a PLT relocation, or was made up (`sub_401136`).
//! - Addresses are typed by the space they live in: [`LinkAddr`] is an address as written in the
//!   ELF file (a virtual address before relocation), [`FileOffset`] an offset into the file, and
//!   [`RuntimeAddr`] an address in a live process (link address plus load bias). Conversions
//!   between them are explicit methods, never `as` casts.
//! - A *mutatee* is the program gsh instruments; a *point* is a place in it where code can be
//!   inserted; a *snippet* is the code inserted there.

#![warn(missing_docs)]

pub mod addr;
pub mod analysis;
pub mod callee;
pub mod cfg;
pub mod code;
pub mod consult;
pub mod demangle;
pub mod disasm;
pub mod dwarf;
pub mod elf;
pub mod error;
pub mod instrument;
pub mod patch;
pub mod point;
pub mod process;
pub mod rewrite;
pub mod session;
pub mod snippet;
pub mod space;
pub mod suggest;
pub mod symbols;
#[cfg(test)]
mod testutil;
pub mod unwind;

pub use addr::{FileOffset, LinkAddr, RuntimeAddr};
pub use elf::{Binary, BinaryKind};
pub use error::{Error, Result};
pub use session::{FuncRef, Module, ModuleId, Session};
pub use symbols::{FuncId, Function, FunctionTable, NameSource, Variable};
