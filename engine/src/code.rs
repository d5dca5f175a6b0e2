//! The narrow view of a module's code that the patcher plans from (Dyninst's `CodeSource` and
//! `CodeObject` as PatchAPI sees them): the file's bytes at a link address ([`CodeBytes`]), and
//! on top of them the function table and each function's CFG ([`CodeView`]).
//! [`crate::session::Module`] implements the view, [`Binary`] the bytes; the patcher never sees
//! the session, its name resolution, or its DWARF, and a test may hand it a fake.
//!
//! Architecture invariant: this module imports only the analysis layers ([`crate::addr`],
//! [`crate::elf`], [`crate::symbols`], [`crate::cfg`]), never the session or anything that
//! patches.

#![warn(missing_docs)]

use std::sync::Arc;

use crate::addr::LinkAddr;
use crate::cfg::Cfg;
use crate::elf::Binary;
use crate::symbols::{FuncId, Function};

/// Bytes of a file's code by link address.
pub trait CodeBytes {
    /// The `len` bytes at link address `addr` as the file holds them; `None` when they are
    /// not all in the file.
    fn bytes_at(&self, addr: LinkAddr, len: u64) -> Option<&[u8]>;
}

/// What the patcher reads of a module: its code, its functions and their CFGs.
pub trait CodeView: CodeBytes {
    /// Every function, sorted by address; a [`FuncId`] indexes this slice.
    fn functions(&self) -> &[Function];

    /// The CFG of function `f`.
    fn cfg(&self, f: FuncId) -> &Cfg;

    /// Function `f`.
    fn function(&self, f: FuncId) -> &Function {
        &self.functions()[f.0 as usize]
    }

    /// The function starting exactly at `addr`.
    fn function_at(&self, addr: LinkAddr) -> Option<&Function> {
        let funcs = self.functions();
        funcs
            .binary_search_by_key(&addr, |f| f.addr)
            .ok()
            .map(|i| &funcs[i])
    }
}

impl CodeBytes for Binary {
    fn bytes_at(&self, addr: LinkAddr, len: u64) -> Option<&[u8]> {
        Binary::bytes_at(self, addr, len)
    }
}

/// A shared module is viewed as the module itself.
impl<T: CodeBytes + ?Sized> CodeBytes for Arc<T> {
    fn bytes_at(&self, addr: LinkAddr, len: u64) -> Option<&[u8]> {
        (**self).bytes_at(addr, len)
    }
}

/// A shared module is viewed as the module itself.
impl<T: CodeView + ?Sized> CodeView for Arc<T> {
    fn functions(&self) -> &[Function] {
        (**self).functions()
    }

    fn cfg(&self, f: FuncId) -> &Cfg {
        (**self).cfg(f)
    }
}
