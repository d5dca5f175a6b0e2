//! The narrow address space the patcher works through (Dyninst's `AddrSpace`): read code,
//! allocate memory near the code, write bytes. The static rewriter implements it over new ELF
//! segments, the live-process backend over ptrace, and the tests over their own process.
//!
//! It sits low in the engine, below both [`crate::patch`] and [`crate::process`], so that
//! neither imports the other: the patcher writes through the trait, process control shares its
//! vocabulary ([`AllocKind`], [`within_rel32`]), and `instrument::live` joins the two.
//!
//! Architecture invariant: this module imports nothing of the engine but [`crate::addr`].
//!
//! # Which addresses
//!
//! Every address here is where the code *executes*, a [`RuntimeAddr`]: for a live process the
//! runtime address (link address plus the module's load bias); for the static rewriter the
//! link address in the output file, i.e. a runtime address with bias 0. The patcher encodes
//! trampolines, jumps and RIP-relative operands for exactly these addresses, so an
//! implementation must hand back memory that will execute at the address it returns.

#![warn(missing_docs)]

use crate::addr::RuntimeAddr;

/// What an allocation will hold.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AllocKind {
    /// Trampolines: readable and executable once written, never writable and executable at
    /// once.
    Code,
    /// Declared variables and other snippet data: readable and writable.
    Data,
}

/// Why the address space refused.
#[derive(Debug, thiserror::Error)]
pub enum SpaceError {
    /// Nothing could be allocated within reach of the code.
    #[error("no room for {size} bytes within ±2 GiB of {near}")]
    NoRoom {
        /// The code the memory had to reach.
        near: RuntimeAddr,
        /// How many bytes were asked for.
        size: u64,
    },
    /// Reading or writing failed (unmapped address, permission, I/O).
    #[error("cannot access {len} bytes at {addr}: {detail}")]
    Access {
        /// Where the access started.
        addr: RuntimeAddr,
        /// How many bytes it covered.
        len: usize,
        /// What the backend said.
        detail: String,
    },
}

/// An address space the patcher can read, allocate in, and write to.
pub trait AddressSpace {
    /// The `len` bytes at `addr`.
    fn read(&self, addr: RuntimeAddr, len: usize) -> Result<Vec<u8>, SpaceError>;

    /// Allocates `size` bytes aligned to 16 (64 for data) within ±2 GiB of `near` (minus
    /// `size`), so rel32 jumps and RIP-relative operands reach both ways, and returns where
    /// they will execute.
    fn allocate(
        &mut self,
        near: RuntimeAddr,
        size: u64,
        kind: AllocKind,
    ) -> Result<RuntimeAddr, SpaceError>;

    /// Writes `bytes` at `addr`: into allocated code or data, or over the original code (the
    /// jumps into trampolines). Code stays non-writable once written.
    fn write(&mut self, addr: RuntimeAddr, bytes: &[u8]) -> Result<(), SpaceError>;

    /// The writes over code since the last call form one change, whole in itself: code a
    /// thread runs is right before it and after it, never half-way (a site's jump and its
    /// pad, a removed site's original bytes). A live process may resume its threads between
    /// changes, so a large insert stops it in short pauses; a file needs nothing.
    fn end_change(&mut self) {}
}

/// True when a rel32 displacement from the end of an instruction at `from` reaches `to`.
pub fn within_rel32(from: u64, to: u64) -> bool {
    let d = to as i128 - from as i128;
    d >= i128::from(i32::MIN) + 16 && d <= i128::from(i32::MAX) - 16
}
