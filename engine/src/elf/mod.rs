//! Reading an ELF file: validation, sections, segments, dynamic entries, and the *code source*
//! through which every other layer reads bytes by [`LinkAddr`].
//!
//! The file is memory-mapped and parsed lazily: opening a 30 MB binary reads its headers and
//! section table only. Everything that walks symbols or code lives in [`crate::symbols`] and is
//! computed when first asked for.

#![warn(missing_docs)]

mod data;
mod validate;

use std::path::{Path, PathBuf};

use object::elf;
use object::read::elf::{
    Dyn as _, ElfFile64, FileHeader as _, ProgramHeader as _, SectionHeader as _,
};
use object::{Endianness, Object, ObjectSection};

pub use data::Data;

use crate::addr::{FileOffset, LinkAddr};
use crate::error::{Error, Result};

/// What kind of ELF object a binary is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum BinaryKind {
    /// `ET_EXEC`: a position-dependent executable, loaded at its link addresses.
    Executable,
    /// `ET_DYN` with an interpreter: a position-independent executable.
    PieExecutable,
    /// `ET_DYN` without an interpreter: a shared library.
    SharedLibrary,
    /// `ET_REL`: an object file, not yet linked.
    Relocatable,
    /// `ET_CORE`, or anything else.
    Other,
}

impl BinaryKind {
    /// A short word for tables.
    pub fn as_str(self) -> &'static str {
        match self {
            BinaryKind::Executable => "exec",
            BinaryKind::PieExecutable => "pie",
            BinaryKind::SharedLibrary => "shared",
            BinaryKind::Relocatable => "object",
            BinaryKind::Other => "other",
        }
    }
}

/// One section of the file, copied out of the section table.
#[derive(Clone, Debug, serde::Serialize)]
pub struct Section {
    /// Its index in the section header table (0 is the null section).
    pub index: usize,
    /// Its name from `.shstrtab` (`.text`, `.plt.sec`...); empty when it has none.
    pub name: String,
    /// Its link address (`sh_addr`); 0 for sections not loaded.
    pub addr: LinkAddr,
    /// Its size in bytes in memory (`sh_size`), also for `SHT_NOBITS` sections that take none in the file.
    pub size: u64,
    /// Where its bytes are in the file; `None` for `SHT_NOBITS` sections such as `.bss`.
    pub file_range: Option<(FileOffset, u64)>,
    /// `sh_flags`: `SHF_ALLOC`, `SHF_WRITE`, `SHF_EXECINSTR`...
    pub flags: u64,
    /// `sh_type`: `SHT_PROGBITS`, `SHT_NOBITS`, `SHT_SYMTAB`...
    pub kind: u32,
    /// `sh_entsize`: the size of one entry for tables (symbols, relocations), else 0.
    pub entsize: u64,
}

impl Section {
    /// True for sections holding code (`SHF_EXECINSTR`).
    pub fn is_exec(&self) -> bool {
        self.flags & u64::from(elf::SHF_EXECINSTR) != 0
    }

    /// True for sections occupying memory at run time (`SHF_ALLOC`).
    pub fn is_alloc(&self) -> bool {
        self.flags & u64::from(elf::SHF_ALLOC) != 0
    }

    /// True when `addr` lies inside this section's memory range.
    pub fn contains(&self, addr: LinkAddr) -> bool {
        addr.0 >= self.addr.0 && addr.0 - self.addr.0 < self.size
    }
}

/// One loadable segment (`PT_LOAD`).
#[derive(Clone, Debug, serde::Serialize)]
pub struct Segment {
    /// Link address of its first byte (`p_vaddr`).
    pub vaddr: LinkAddr,
    /// Bytes it takes in memory (`p_memsz`); past `filesz` they are zero-filled.
    pub memsz: u64,
    /// Where its bytes start in the file (`p_offset`).
    pub offset: FileOffset,
    /// Bytes it takes in the file (`p_filesz`).
    pub filesz: u64,
    /// `p_flags`: `PF_R`, `PF_W`, `PF_X`.
    pub flags: u32,
}

/// An opened, validated 64-bit x86-64 ELF file.
pub struct Binary {
    path: PathBuf,
    data: Data,
    kind: BinaryKind,
    entry: LinkAddr,
    sections: Vec<Section>,
    segments: Vec<Segment>,
    needed: Vec<String>,
    soname: Option<String>,
    runpath: Vec<String>,
    interp: Option<String>,
    build_id: Option<Vec<u8>>,
    debuglink: Option<(String, u32)>,
}

impl std::fmt::Debug for Binary {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Binary")
            .field("path", &self.path)
            .field("kind", &self.kind)
            .finish()
    }
}

impl Binary {
    /// Opens and validates the ELF file at `path`, memory-mapping it.
    pub fn open(path: &Path) -> Result<Binary> {
        let data = Data::map(path)?;
        Binary::from_data(path, data)
    }

    /// Parses an ELF image already in memory; `path` is used only in messages.
    pub fn from_bytes(path: &Path, bytes: Vec<u8>) -> Result<Binary> {
        Binary::from_data(path, Data::Owned(bytes))
    }

    fn from_data(path: &Path, data: Data) -> Result<Binary> {
        validate::check_header(path, &data)?;
        let malformed = |e: object::Error| Error::Malformed {
            path: path.to_owned(),
            detail: e.to_string(),
        };
        let file = ElfFile64::<Endianness>::parse(&*data).map_err(malformed)?;
        let endian = file.endian();
        let header = file.elf_header();
        let kind = match header.e_type(endian) {
            elf::ET_EXEC => BinaryKind::Executable,
            elf::ET_DYN => {
                let has_interp = file
                    .elf_program_headers()
                    .iter()
                    .any(|ph| ph.p_type(endian) == elf::PT_INTERP);
                if has_interp {
                    BinaryKind::PieExecutable
                } else {
                    BinaryKind::SharedLibrary
                }
            }
            elf::ET_REL => BinaryKind::Relocatable,
            _ => BinaryKind::Other,
        };

        let mut sections = Vec::new();
        for section in file.sections() {
            let shdr = section.elf_section_header();
            let name = section.name().unwrap_or("").to_owned();
            let file_range = section.file_range().map(|(o, s)| (FileOffset(o), s));
            sections.push(Section {
                index: section.index().0,
                name,
                addr: LinkAddr(section.address()),
                size: section.size(),
                file_range,
                flags: shdr.sh_flags(endian),
                kind: shdr.sh_type(endian),
                entsize: shdr.sh_entsize(endian),
            });
        }
        let len = data.len() as u64;
        for s in &sections {
            if let Some((off, size)) = s.file_range {
                if off.0.checked_add(size).is_none_or(|end| end > len) {
                    return Err(Error::Malformed {
                        path: path.to_owned(),
                        detail: format!(
                            "section {} runs past the end of the file ({} bytes at {} in a {}-byte file)",
                            s.name, size, off, len
                        ),
                    });
                }
            }
        }

        let mut segments = Vec::new();
        let mut interp = None;
        for seg in file.segments() {
            let ph = seg.elf_program_header();
            if ph.p_type(endian) != elf::PT_LOAD {
                continue;
            }
            segments.push(Segment {
                vaddr: LinkAddr(ph.p_vaddr(endian)),
                memsz: ph.p_memsz(endian),
                offset: FileOffset(ph.p_offset(endian)),
                filesz: ph.p_filesz(endian),
                flags: ph.p_flags(endian),
            });
        }
        for ph in file.elf_program_headers() {
            if ph.p_type(endian) == elf::PT_INTERP {
                if let Ok(bytes) = ph.data(endian, &*data) {
                    let s = bytes.split(|&b| b == 0).next().unwrap_or(&[]);
                    interp = Some(String::from_utf8_lossy(s).into_owned());
                }
            }
        }

        let (needed, soname, runpath) = read_dynamic(&file);
        let build_id = file.build_id().ok().flatten().map(<[u8]>::to_vec);
        let debuglink = file
            .gnu_debuglink()
            .ok()
            .flatten()
            .map(|(name, crc)| (String::from_utf8_lossy(name).into_owned(), crc));
        let entry = LinkAddr(header.e_entry(endian));
        drop(file);
        Ok(Binary {
            path: path.to_owned(),
            data,
            kind,
            entry,
            sections,
            segments,
            needed,
            soname,
            runpath,
            interp,
            build_id,
            debuglink,
        })
    }

    /// The path the binary was opened from.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The whole file.
    pub fn data(&self) -> &[u8] {
        &self.data
    }

    /// Re-parses the headers with `object` for the layers that walk symbols or relocations.
    /// Parsing was validated at open, so this cannot fail afterwards.
    pub fn elf(&self) -> ElfFile64<'_, Endianness> {
        ElfFile64::parse(&*self.data).expect("validated when the binary was opened")
    }

    /// What the file is: executable, PIE, shared library, relocatable object, other.
    pub fn kind(&self) -> BinaryKind {
        self.kind
    }

    /// True for PIE executables and shared libraries, whose load bias is chosen at run time.
    pub fn is_position_independent(&self) -> bool {
        matches!(
            self.kind,
            BinaryKind::PieExecutable | BinaryKind::SharedLibrary
        )
    }

    /// The entry point (`e_entry`), usually `_start`; 0 in most shared libraries.
    pub fn entry(&self) -> LinkAddr {
        self.entry
    }

    /// Every section, in section-table order.
    pub fn sections(&self) -> &[Section] {
        &self.sections
    }

    /// The `PT_LOAD` segments, in program-header order.
    pub fn segments(&self) -> &[Segment] {
        &self.segments
    }

    /// The section named `name`, if any.
    pub fn section(&self, name: &str) -> Option<&Section> {
        self.sections.iter().find(|s| s.name == name)
    }

    /// The allocated section containing `addr`, if any.
    pub fn section_at(&self, addr: LinkAddr) -> Option<&Section> {
        self.sections
            .iter()
            .find(|s| s.is_alloc() && s.size > 0 && s.contains(addr))
    }

    /// The names in `DT_NEEDED`, in order.
    pub fn needed(&self) -> &[String] {
        &self.needed
    }

    /// `DT_SONAME`, for shared libraries that have one.
    pub fn soname(&self) -> Option<&str> {
        self.soname.as_deref()
    }

    /// `DT_RUNPATH` (or `DT_RPATH`) entries, `$ORIGIN` not yet expanded.
    pub fn runpath(&self) -> &[String] {
        &self.runpath
    }

    /// The program interpreter (`PT_INTERP`), for dynamically linked executables.
    pub fn interp(&self) -> Option<&str> {
        self.interp.as_deref()
    }

    /// The GNU build id note, if present.
    pub fn build_id(&self) -> Option<&[u8]> {
        self.build_id.as_deref()
    }

    /// `.gnu_debuglink`: the separate debug file's name and CRC32.
    pub fn debuglink(&self) -> Option<(&str, u32)> {
        self.debuglink.as_ref().map(|(n, c)| (n.as_str(), *c))
    }

    /// True when the file has a `.symtab` (it was not stripped).
    pub fn has_symtab(&self) -> bool {
        self.sections.iter().any(|s| s.kind == elf::SHT_SYMTAB)
    }

    /// True when the file carries DWARF (`.debug_info`).
    pub fn has_dwarf(&self) -> bool {
        self.section(".debug_info")
            .is_some_and(|s| s.kind != elf::SHT_NOBITS && s.size > 0)
    }

    /// The code source: up to `len` bytes of file-backed memory starting at `addr`. Returns
    /// fewer bytes when the range crosses the end of the segment's file image, and `None` when
    /// `addr` is not in any loadable segment's file image.
    pub fn bytes_at(&self, addr: LinkAddr, len: u64) -> Option<&[u8]> {
        for seg in &self.segments {
            if addr.0 >= seg.vaddr.0 && addr.0 - seg.vaddr.0 < seg.filesz {
                let delta = addr.0 - seg.vaddr.0;
                let avail = seg.filesz - delta;
                let start = seg.offset.0.checked_add(delta)? as usize;
                let n = len.min(avail) as usize;
                return self.data.get(start..start.checked_add(n)?);
            }
        }
        None
    }

    /// The bytes of a section as stored in the file (empty for `SHT_NOBITS`).
    pub fn section_data(&self, section: &Section) -> &[u8] {
        match section.file_range {
            Some((off, size)) => self
                .data
                .get(off.0 as usize..(off.0 + size) as usize)
                .unwrap_or(&[]),
            None => &[],
        }
    }

    /// The file offset of a link address, when it is backed by file bytes.
    pub fn file_offset(&self, addr: LinkAddr) -> Option<FileOffset> {
        self.segments.iter().find_map(|seg| {
            (addr.0 >= seg.vaddr.0 && addr.0 - seg.vaddr.0 < seg.filesz)
                .then(|| FileOffset(seg.offset.0 + (addr.0 - seg.vaddr.0)))
        })
    }

    /// The executable sections, in address order.
    pub fn code_sections(&self) -> impl Iterator<Item = &Section> {
        self.sections
            .iter()
            .filter(|s| s.is_exec() && s.is_alloc() && s.file_range.is_some() && s.size > 0)
    }
}

fn read_dynamic(file: &ElfFile64<'_, Endianness>) -> (Vec<String>, Option<String>, Vec<String>) {
    let endian = file.endian();
    let data = file.data();
    let mut needed = Vec::new();
    let mut soname = None;
    let mut runpath = Vec::new();
    let sections = file.elf_section_table();
    let Ok(Some((dyns, link))) = sections.dynamic(endian, data) else {
        return (needed, soname, runpath);
    };
    let Ok(strings) = sections.strings(endian, data, link) else {
        return (needed, soname, runpath);
    };
    for d in dyns {
        let tag = d.tag32(endian);
        let Some(tag) = tag else { continue };
        let read = || {
            d.string(endian, strings)
                .ok()
                .map(|s| String::from_utf8_lossy(s).into_owned())
        };
        match tag {
            elf::DT_NEEDED => needed.extend(read()),
            elf::DT_SONAME => soname = read(),
            elf::DT_RUNPATH | elf::DT_RPATH => {
                if let Some(s) = read() {
                    runpath.extend(s.split(':').filter(|p| !p.is_empty()).map(str::to_owned));
                }
            }
            _ => {}
        }
    }
    (needed, soname, runpath)
}

#[cfg(test)]
mod tests;
