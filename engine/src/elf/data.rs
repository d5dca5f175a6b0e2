//! The bytes of an opened file: memory-mapped from disk, or owned (tests and fuzzing).

use std::fs::File;
use std::ops::Deref;
use std::path::Path;

use crate::error::{Error, Result};

/// File contents, mapped or owned.
pub enum Data {
    /// The file mapped read-only; the mapping lives as long as the `Binary`.
    Mapped(memmap2::Mmap),
    /// Bytes held in memory: a test's fake ELF or a fuzzer's input.
    Owned(Vec<u8>),
}

impl Data {
    /// Maps the file at `path` read-only.
    pub fn map(path: &Path) -> Result<Data> {
        let io = |source| Error::Io {
            path: path.to_owned(),
            source,
        };
        let file = File::open(path).map_err(io)?;
        let meta = file.metadata().map_err(io)?;
        if meta.is_dir() {
            return Err(io(std::io::Error::other("is a directory")));
        }
        if meta.len() == 0 {
            return Err(Error::NotElf {
                path: path.to_owned(),
            });
        }
        // SAFETY: the mapping is private and read-only. If another process truncates the file
        // while it is mapped, reads past the new end raise SIGBUS; gsh accepts that risk, as
        // every mmap-based ELF reader (objdump, gdb, ripgrep) does, for the speed of not
        // copying 30 MB binaries.
        let map = unsafe { memmap2::Mmap::map(&file) }.map_err(io)?;
        Ok(Data::Mapped(map))
    }
}

impl Deref for Data {
    type Target = [u8];

    fn deref(&self) -> &[u8] {
        match self {
            Data::Mapped(m) => m,
            Data::Owned(v) => v,
        }
    }
}
