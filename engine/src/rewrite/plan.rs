//! Planning a rewrite: reading the headers the rewriter edits, choosing how the program header
//! table gets room for the new entries, and fixing where the new segments go. Everything here
//! happens when a [`super::Rewrite`] is created, so allocations can hand out final addresses.

use object::elf;

use super::raw::{self, Phdr, Shdr};
use super::{Error, Result, PAGE};
use crate::elf::Binary;

/// Below this many bytes of padding, a relocated header table is placed where old kernels look
/// for it (see [`Room::Relocate`]); beyond it the file would balloon for a bss-heavy binary.
const MAX_CONGRUENCE_PADDING: u64 = 64 << 20;

/// The end of the x86-64 user address space (4-level paging); no segment may reach it.
const USER_TOP: u64 = 1 << 47;

/// How far a rel32 jump or RIP-relative operand reaches.
const REACH: u64 = 1 << 31;

/// The code reserve used by [`super::Rewrite::new`]: address space, not file bytes.
pub const DEFAULT_CODE_RESERVE: u64 = 256 << 20;

/// The headers of the original file, decoded once.
#[derive(Clone, Debug)]
pub struct Original {
    pub phoff: u64,
    pub phdrs: Vec<Phdr>,
    /// Empty when the file has no section header table.
    pub shdrs: Vec<Shdr>,
    pub shstrndx: usize,
    /// The file length once a section header table at the very end is dropped (it is written
    /// anew after the new segments).
    pub kept_len: u64,
}

impl Original {
    pub fn read(binary: &Binary) -> Result<Original> {
        let data = binary.data();
        let ehdr = raw::slice(data, 0, raw::EHDR_SIZE, "the ELF header")?;
        let phoff = raw::u64_at(ehdr, raw::E_PHOFF);
        let phentsize = u64::from(raw::u16_at(ehdr, raw::E_PHENTSIZE));
        let phnum = u64::from(raw::u16_at(ehdr, raw::E_PHNUM));
        if phnum == 0 || phentsize != raw::PHDR_SIZE {
            return Err(Error::Malformed {
                detail: format!(
                    "{phnum} program headers of {phentsize} bytes; a loadable file has at least one of {} bytes",
                    raw::PHDR_SIZE
                ),
            });
        }
        let table = raw::slice(
            data,
            phoff,
            phnum * raw::PHDR_SIZE,
            "the program header table",
        )?;
        let phdrs: Vec<Phdr> = table
            .chunks_exact(raw::PHDR_SIZE as usize)
            .map(Phdr::decode)
            .collect();

        let shoff = raw::u64_at(ehdr, raw::E_SHOFF);
        let shentsize = u64::from(raw::u16_at(ehdr, raw::E_SHENTSIZE));
        let mut shnum = u64::from(raw::u16_at(ehdr, raw::E_SHNUM));
        let mut shstrndx = u64::from(raw::u16_at(ehdr, raw::E_SHSTRNDX));
        let mut shdrs: Vec<Shdr> = Vec::new();
        if shoff != 0 {
            if shentsize != raw::SHDR_SIZE {
                return Err(Error::Malformed {
                    detail: format!("section headers of {shentsize} bytes"),
                });
            }
            let first = Shdr::decode(raw::slice(data, shoff, raw::SHDR_SIZE, "section header 0")?);
            // Extended numbering: past 0xff00 sections the real counts live in section 0.
            if shnum == 0 {
                shnum = first.size;
            }
            if shstrndx == u64::from(elf::SHN_XINDEX) {
                shstrndx = u64::from(first.link);
            }
            let bytes = raw::slice(
                data,
                shoff,
                shnum.saturating_mul(raw::SHDR_SIZE),
                "the section header table",
            )?;
            shdrs = bytes
                .chunks_exact(raw::SHDR_SIZE as usize)
                .map(Shdr::decode)
                .collect();
        }
        let len = data.len() as u64;
        // Checked once here, so the arithmetic of planning and emitting cannot overflow.
        for (i, p) in phdrs.iter().enumerate() {
            let load = p.p_type == elf::PT_LOAD;
            let file_end = p.offset.checked_add(p.filesz).filter(|&e| e <= len);
            let mem_end = p.vaddr.checked_add(p.memsz).filter(|&e| e < USER_TOP);
            if load && (file_end.is_none() || mem_end.is_none() || p.filesz > p.memsz) {
                return Err(Error::Malformed {
                    detail: format!(
                        "loadable segment {i} ({:#x} bytes at offset {:#x}, {:#x} bytes at {:#x}) lies outside the file or the address space",
                        p.filesz, p.offset, p.memsz, p.vaddr
                    ),
                });
            }
        }
        for (i, s) in shdrs.iter().enumerate() {
            let end = s.offset.checked_add(s.size).filter(|&e| e <= len);
            if s.has_file_bytes() && s.size > 0 && end.is_none() {
                return Err(Error::Malformed {
                    detail: format!("section {i} runs past the end of the file"),
                });
            }
        }
        let table_end = shoff + shdrs.len() as u64 * raw::SHDR_SIZE;
        let kept_len = if !shdrs.is_empty() && table_end == len {
            shoff
        } else {
            len
        };
        Ok(Original {
            phoff,
            phdrs,
            shdrs,
            shstrndx: shstrndx as usize,
            kept_len,
        })
    }

    pub fn loads(&self) -> impl Iterator<Item = &Phdr> {
        self.phdrs.iter().filter(|p| p.p_type == elf::PT_LOAD)
    }

    /// The name of section `index`, empty when unknown.
    pub fn section_name<'a>(&self, data: &'a [u8], index: usize) -> &'a [u8] {
        let Some(strtab) = self.shdrs.get(self.shstrndx) else {
            return &[];
        };
        let Some(sh) = self.shdrs.get(index) else {
            return &[];
        };
        let table =
            raw::slice(data, strtab.offset, strtab.size, "the section name table").unwrap_or(&[]);
        raw::str_at(table, sh.name)
    }

    /// The values of the dynamic table: `(file offset of the entry, tag, value)`.
    pub fn dynamic(&self, data: &[u8]) -> Vec<(u64, i64, u64)> {
        let Some(dynamic) = self.phdrs.iter().find(|p| p.p_type == elf::PT_DYNAMIC) else {
            return Vec::new();
        };
        let Ok(bytes) = raw::slice(data, dynamic.offset, dynamic.filesz, "the dynamic table")
        else {
            return Vec::new();
        };
        let mut out = Vec::new();
        for (i, entry) in bytes.chunks_exact(raw::DYN_SIZE as usize).enumerate() {
            let tag = raw::u64_at(entry, 0) as i64;
            if tag == elf::DT_NULL as i64 {
                break;
            }
            let at = dynamic.offset + i as u64 * raw::DYN_SIZE;
            out.push((at, tag, raw::u64_at(entry, 8)));
        }
        out
    }
}

/// `DT_RELR` (the generic ABI's value; `object` 0.37 does not name it).
const DT_RELR: u32 = 36;

/// Dynamic tags whose value is an address; these follow a section that moves.
pub const POINTER_TAGS: &[u32] = &[
    elf::DT_PLTGOT,
    elf::DT_HASH,
    elf::DT_STRTAB,
    elf::DT_SYMTAB,
    elf::DT_RELA,
    elf::DT_INIT,
    elf::DT_FINI,
    elf::DT_REL,
    elf::DT_JMPREL,
    elf::DT_INIT_ARRAY,
    elf::DT_FINI_ARRAY,
    elf::DT_PREINIT_ARRAY,
    elf::DT_SYMTAB_SHNDX,
    DT_RELR,
    elf::DT_GNU_HASH,
    elf::DT_VERSYM,
    elf::DT_VERDEF,
    elf::DT_VERNEED,
];

/// A byte range of the first segment that moves, unchanged, to the new read-only segment.
#[derive(Clone, Debug)]
pub struct Block {
    /// Its offset in the input file.
    pub old_offset: u64,
    /// Its link address in the input (the new segment maps it elsewhere).
    pub old_vaddr: u64,
    /// Its length in bytes.
    pub len: u64,
    /// Indices of the sections inside it.
    pub sections: Vec<usize>,
}

/// How the program header table gets room for its new entries.
#[derive(Clone, Debug)]
pub enum Room {
    /// The bytes after the table are already unused (a file rewritten before).
    Free,
    /// The sections right after the table move to a new read-only segment, and the table grows
    /// in place.
    Move(Block),
    /// The table itself moves to a new read-only segment at the end.
    Relocate {
        /// True when the segment's `vaddr - offset` equals the first segment's, so kernels
        /// before Linux 5.18 (which compute `AT_PHDR` as load address plus `e_phoff`) still
        /// find it.
        congruent: bool,
    },
}

/// Where everything new goes. Addresses are link addresses.
#[derive(Clone, Debug)]
pub struct Plan {
    pub room: Room,
    /// The program header count once every new segment is present.
    pub max_phnum: usize,
    /// The new read-only segment (moved sections, or the relocated header table).
    pub ro_offset: u64,
    pub ro_vaddr: u64,
    pub ro_size: u64,
    pub code_vaddr: u64,
    pub code_reserve: u64,
    pub data_vaddr: u64,
    /// No new byte may end past this address (rel32 reach from the lowest code byte).
    pub reach_end: u64,
}

pub fn page_up(x: u64) -> u64 {
    x.div_ceil(PAGE) * PAGE
}

/// Plans a rewrite with room for `extra_headers` program headers beyond the new segments'.
pub fn make_plan(
    binary: &Binary,
    orig: &Original,
    code_reserve: u64,
    extra_headers: usize,
) -> Result<Plan> {
    let first = orig.loads().next().ok_or(Error::NoLoadSegments)?;
    let max_end = orig
        .loads()
        .map(|p| p.vaddr.saturating_add(p.memsz))
        .max()
        .unwrap_or(0);
    let code_lo = orig
        .loads()
        .filter(|p| p.flags & elf::PF_X != 0)
        .map(|p| p.vaddr)
        .min()
        .unwrap_or(first.vaddr);
    let reach_end = code_lo.saturating_add(REACH);

    let phnum = orig.phdrs.len();
    let table_end = orig.phoff + phnum as u64 * raw::PHDR_SIZE;
    let in_place = |extra: usize| orig.phoff + (phnum + extra) as u64 * raw::PHDR_SIZE;

    // Two new segments (code, data) fit if the bytes after the table are free; otherwise a
    // third, read-only one holds what moves out of the way.
    let room = if is_free(binary, orig, table_end, in_place(2 + extra_headers)) {
        Room::Free
    } else if let Some(block) = movable_block(binary, orig, table_end, in_place(3 + extra_headers))
    {
        Room::Move(block)
    } else {
        Room::Relocate { congruent: false }
    };
    let max_phnum = extra_headers
        + match room {
            Room::Free => phnum + 2,
            _ => phnum + 3,
        };

    let mut ro_offset = page_up(orig.kept_len);
    let mut ro_vaddr = page_up(max_end);
    let ro_size;
    let room = match room {
        Room::Free => {
            ro_size = 0;
            Room::Free
        }
        Room::Move(block) => {
            // Keep each moved byte's place within its page, so every section keeps its
            // alignment and the segment's offset and address agree modulo the page size.
            let in_page = block.old_vaddr % PAGE;
            ro_offset += in_page;
            ro_vaddr += in_page;
            ro_size = block.len;
            Room::Move(block)
        }
        Room::Relocate { .. } => {
            ro_size = max_phnum as u64 * raw::PHDR_SIZE;
            let bias = first.vaddr.wrapping_sub(first.offset);
            let congruent_vaddr = bias.wrapping_add(ro_offset);
            let padded_offset = ro_vaddr.wrapping_sub(bias);
            // Congruence without padding when the file is longer than the address span (it
            // usually is), as long as that leaves at least half the reach for new code.
            let halfway = code_lo + (reach_end - code_lo) / 2;
            let congruent = if congruent_vaddr >= ro_vaddr
                && congruent_vaddr.saturating_add(ro_size) < halfway
            {
                ro_vaddr = congruent_vaddr;
                true
            } else if padded_offset >= ro_offset
                && padded_offset - ro_offset <= MAX_CONGRUENCE_PADDING
            {
                ro_offset = padded_offset;
                true
            } else {
                false
            };
            Room::Relocate { congruent }
        }
    };

    let code_vaddr = page_up(ro_vaddr + ro_size);
    // The code reserve is address space only; shrink it if a large binary leaves less reach.
    let room_left = reach_end.saturating_sub(code_vaddr);
    let code_reserve = page_up(code_reserve.max(PAGE)).min(room_left / 2 / PAGE * PAGE);
    if code_reserve < PAGE {
        return Err(Error::OutOfReach {
            detail: format!(
                "the new segments would start at {code_vaddr:#x}, too far from the code at {code_lo:#x} for rel32 jumps"
            ),
        });
    }
    Ok(Plan {
        room,
        max_phnum,
        ro_offset,
        ro_vaddr,
        ro_size,
        code_vaddr,
        code_reserve,
        data_vaddr: code_vaddr + code_reserve,
        reach_end,
    })
}

/// The loadable segment whose file image holds the program header table.
fn table_segment(orig: &Original) -> Option<&Phdr> {
    orig.loads()
        .find(|p| p.offset <= orig.phoff && orig.phoff < p.offset.saturating_add(p.filesz))
}

/// True when `[start, end)` is inside the segment holding the header table, and no section,
/// segment other than that one (and `PT_PHDR`), dynamic pointer or entry point uses it.
fn is_free(binary: &Binary, orig: &Original, start: u64, end: u64) -> bool {
    // Without section headers nothing says which bytes are unused.
    if orig.shdrs.is_empty() {
        return false;
    }
    let Some(seg) = table_segment(orig) else {
        return false;
    };
    if end > seg.offset + seg.filesz {
        return false;
    }
    let vaddr = |off: u64| seg.vaddr + (off - seg.offset);
    let overlaps_section = orig
        .shdrs
        .iter()
        .any(|s| s.has_file_bytes() && s.size > 0 && s.offset < end && start < s.offset + s.size);
    let overlaps_segment = orig
        .phdrs
        .iter()
        .any(|p| p.p_type != elf::PT_PHDR && !std::ptr::eq(p, seg) && p.file_overlaps(start, end));
    let (lo, hi) = (vaddr(start), vaddr(end));
    let pointed_at = orig
        .dynamic(binary.data())
        .iter()
        .any(|&(_, tag, v)| is_pointer_tag(tag) && v >= lo && v < hi);
    let entry = binary.entry().0;
    let holds_entry = entry >= lo && entry < hi;
    !(overlaps_section || overlaps_segment || pointed_at || holds_entry)
}

pub fn is_pointer_tag(tag: i64) -> bool {
    POINTER_TAGS.iter().any(|&t| i64::from(t) == tag)
}

/// The sections right after the table that must move for it to grow to `need_end`, when all of
/// them can: only sections reached through program headers or dynamic tags, never through
/// code, move.
fn movable_block(binary: &Binary, orig: &Original, start: u64, need_end: u64) -> Option<Block> {
    if orig.shdrs.is_empty() {
        return None;
    }
    let seg = table_segment(orig)?;
    let data = binary.data();
    let dynamic = orig.dynamic(data);
    let tag_value = |tag: u32| {
        dynamic
            .iter()
            .find(|&&(_, t, _)| t == i64::from(tag))
            .map(|&(_, _, v)| v)
    };
    let reloc_tables: Vec<u64> = [elf::DT_RELA, elf::DT_REL, elf::DT_JMPREL, DT_RELR]
        .into_iter()
        .filter_map(tag_value)
        .collect();

    // Grow the block until it covers whole sections.
    let mut end = need_end;
    let mut sections: Vec<usize>;
    loop {
        sections = (0..orig.shdrs.len())
            .filter(|&i| {
                let s = &orig.shdrs[i];
                s.has_file_bytes() && s.size > 0 && s.offset < end && start < s.offset + s.size
            })
            .collect();
        let covered = sections
            .iter()
            .map(|&i| orig.shdrs[i].offset + orig.shdrs[i].size)
            .max()
            .unwrap_or(end)
            .max(end);
        if covered == end {
            break;
        }
        end = covered;
    }
    if sections.is_empty() || end > seg.offset + seg.filesz {
        return None;
    }
    let old_vaddr = seg.vaddr + (start - seg.offset);
    for &i in &sections {
        let s = &orig.shdrs[i];
        let name = orig.section_name(data, i);
        // A section whose address does not follow its offset is not a plain part of the block.
        if s.offset < start || s.addr != old_vaddr + (s.offset - start) || !s.is_alloc() {
            return None;
        }
        let write_or_exec = s.flags & u64::from(elf::SHF_WRITE | elf::SHF_EXECINSTR) != 0;
        let movable = match s.sh_type {
            elf::SHT_NOTE
            | elf::SHT_GNU_HASH
            | elf::SHT_HASH
            | elf::SHT_DYNSYM
            | elf::SHT_STRTAB
            | elf::SHT_GNU_VERSYM
            | elf::SHT_GNU_VERNEED
            | elf::SHT_GNU_VERDEF => !dynamic.is_empty() || s.sh_type == elf::SHT_NOTE,
            // Relocation tables move only when the dynamic table is how they are found: a
            // static executable finds its IRELATIVE table through linker symbols in code.
            elf::SHT_RELA | elf::SHT_REL | elf::SHT_RELR => reloc_tables.contains(&s.addr),
            elf::SHT_PROGBITS => name == b".interp",
            _ => false,
        };
        if write_or_exec || !movable {
            return None;
        }
    }
    // Every other segment either lies wholly inside the block (it moves along) or outside it.
    for p in &orig.phdrs {
        if p.p_type == elf::PT_PHDR || std::ptr::eq(p, seg) || !p.file_overlaps(start, end) {
            continue;
        }
        if p.p_type == elf::PT_LOAD || !p.file_within(start, end) {
            return None;
        }
    }
    let entry = binary.entry().0;
    if entry >= old_vaddr && entry < old_vaddr + (end - start) {
        return None;
    }
    Some(Block {
        old_offset: start,
        old_vaddr,
        len: end - start,
        sections,
    })
}
