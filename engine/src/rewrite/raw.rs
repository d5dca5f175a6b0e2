//! The few ELF64 little-endian records the rewriter edits (file header fields, program headers,
//! section headers, symbols, dynamic entries), read and written at explicit byte offsets.
//!
//! The rewriter works on a byte copy of the file whose record offsets need not be aligned, so
//! it decodes fields with `from_le_bytes` rather than casting to `object`'s aligned structs.
//! [`crate::Binary`] has already checked that the file is 64-bit little-endian x86-64.

use super::{Error, Result};

pub const EHDR_SIZE: u64 = 64;
pub const PHDR_SIZE: u64 = 56;
pub const SHDR_SIZE: u64 = 64;
pub const SYM_SIZE: u64 = 24;
pub const DYN_SIZE: u64 = 16;

// Offsets of the file header fields the rewriter reads or changes.
pub const E_ENTRY: usize = 24;
pub const E_PHOFF: usize = 32;
pub const E_SHOFF: usize = 40;
pub const E_PHENTSIZE: usize = 54;
pub const E_PHNUM: usize = 56;
pub const E_SHENTSIZE: usize = 58;
pub const E_SHNUM: usize = 60;
pub const E_SHSTRNDX: usize = 62;

/// The slice `data[off..off + len]`, or a "malformed" error naming `what`.
pub fn slice<'a>(data: &'a [u8], off: u64, len: u64, what: &str) -> Result<&'a [u8]> {
    let end = off.checked_add(len);
    match end {
        Some(end) if end <= data.len() as u64 => Ok(&data[off as usize..end as usize]),
        _ => Err(Error::Malformed {
            detail: format!("{what} ({len} bytes at {off:#x}) runs past the end of the file"),
        }),
    }
}

pub fn u16_at(b: &[u8], at: usize) -> u16 {
    u16::from_le_bytes([b[at], b[at + 1]])
}

pub fn u32_at(b: &[u8], at: usize) -> u32 {
    let mut a = [0; 4];
    a.copy_from_slice(&b[at..at + 4]);
    u32::from_le_bytes(a)
}

pub fn u64_at(b: &[u8], at: usize) -> u64 {
    let mut a = [0; 8];
    a.copy_from_slice(&b[at..at + 8]);
    u64::from_le_bytes(a)
}

pub fn put_u16(b: &mut [u8], at: usize, v: u16) {
    b[at..at + 2].copy_from_slice(&v.to_le_bytes());
}

pub fn put_u32(b: &mut [u8], at: usize, v: u32) {
    b[at..at + 4].copy_from_slice(&v.to_le_bytes());
}

pub fn put_u64(b: &mut [u8], at: usize, v: u64) {
    b[at..at + 8].copy_from_slice(&v.to_le_bytes());
}

/// One program header.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Phdr {
    pub p_type: u32,
    pub flags: u32,
    pub offset: u64,
    pub vaddr: u64,
    pub paddr: u64,
    pub filesz: u64,
    pub memsz: u64,
    pub align: u64,
}

impl Phdr {
    pub fn decode(b: &[u8]) -> Phdr {
        Phdr {
            p_type: u32_at(b, 0),
            flags: u32_at(b, 4),
            offset: u64_at(b, 8),
            vaddr: u64_at(b, 16),
            paddr: u64_at(b, 24),
            filesz: u64_at(b, 32),
            memsz: u64_at(b, 40),
            align: u64_at(b, 48),
        }
    }

    pub fn encode(&self) -> [u8; PHDR_SIZE as usize] {
        let mut b = [0; PHDR_SIZE as usize];
        put_u32(&mut b, 0, self.p_type);
        put_u32(&mut b, 4, self.flags);
        put_u64(&mut b, 8, self.offset);
        put_u64(&mut b, 16, self.vaddr);
        put_u64(&mut b, 24, self.paddr);
        put_u64(&mut b, 32, self.filesz);
        put_u64(&mut b, 40, self.memsz);
        put_u64(&mut b, 48, self.align);
        b
    }

    /// A loadable segment with file and memory images of the same size.
    pub fn load(flags: u32, offset: u64, vaddr: u64, size: u64) -> Phdr {
        Phdr {
            p_type: object::elf::PT_LOAD,
            flags,
            offset,
            vaddr,
            paddr: vaddr,
            filesz: size,
            memsz: size,
            align: super::PAGE,
        }
    }

    /// True when the file image `[offset, offset + filesz)` lies inside `[start, end)`.
    pub fn file_within(&self, start: u64, end: u64) -> bool {
        self.offset >= start && self.offset.saturating_add(self.filesz) <= end
    }

    /// True when the file image overlaps `[start, end)`.
    pub fn file_overlaps(&self, start: u64, end: u64) -> bool {
        self.filesz > 0 && self.offset < end && start < self.offset.saturating_add(self.filesz)
    }
}

/// One section header.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Shdr {
    pub name: u32,
    pub sh_type: u32,
    pub flags: u64,
    pub addr: u64,
    pub offset: u64,
    pub size: u64,
    pub link: u32,
    pub info: u32,
    pub addralign: u64,
    pub entsize: u64,
}

impl Shdr {
    pub fn decode(b: &[u8]) -> Shdr {
        Shdr {
            name: u32_at(b, 0),
            sh_type: u32_at(b, 4),
            flags: u64_at(b, 8),
            addr: u64_at(b, 16),
            offset: u64_at(b, 24),
            size: u64_at(b, 32),
            link: u32_at(b, 40),
            info: u32_at(b, 44),
            addralign: u64_at(b, 48),
            entsize: u64_at(b, 56),
        }
    }

    pub fn encode(&self) -> [u8; SHDR_SIZE as usize] {
        let mut b = [0; SHDR_SIZE as usize];
        put_u32(&mut b, 0, self.name);
        put_u32(&mut b, 4, self.sh_type);
        put_u64(&mut b, 8, self.flags);
        put_u64(&mut b, 16, self.addr);
        put_u64(&mut b, 24, self.offset);
        put_u64(&mut b, 32, self.size);
        put_u32(&mut b, 40, self.link);
        put_u32(&mut b, 44, self.info);
        put_u64(&mut b, 48, self.addralign);
        put_u64(&mut b, 56, self.entsize);
        b
    }

    /// True when the section occupies bytes in the file.
    pub fn has_file_bytes(&self) -> bool {
        self.sh_type != object::elf::SHT_NOBITS && self.sh_type != object::elf::SHT_NULL
    }

    pub fn is_alloc(&self) -> bool {
        self.flags & u64::from(object::elf::SHF_ALLOC) != 0
    }
}

/// The null-terminated string at `off` in a string table.
pub fn str_at(table: &[u8], off: u32) -> &[u8] {
    let rest = table.get(off as usize..).unwrap_or(&[]);
    let end = rest.iter().position(|&b| b == 0).unwrap_or(rest.len());
    &rest[..end]
}
