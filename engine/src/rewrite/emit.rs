//! Producing the bytes of the rewritten file from a [`Rewrite`]: patches, moved sections and
//! the references that follow them, the grown program header table, the new segments, and a
//! new section header table.

use object::elf;

use super::plan::{page_up, Block, Original, Plan};
use super::raw::{self, Phdr, Shdr};
use super::{Error, Result, Rewrite, Room, Summary};

pub fn emit(rw: &Rewrite<'_>) -> Result<(Vec<u8>, Summary)> {
    let input = rw.binary.data();
    let orig = &rw.orig;
    let plan = &rw.plan;
    let mut out = input.to_vec();
    for (offset, bytes) in &rw.patches {
        let at = *offset as usize;
        out[at..at + bytes.len()].copy_from_slice(bytes);
    }
    let mut summary = Summary {
        tactic: "copy",
        phdrs_before: orig.phdrs.len(),
        phdrs_after: orig.phdrs.len(),
        moved_sections: Vec::new(),
        size_before: input.len() as u64,
        size_after: input.len() as u64,
    };
    if rw.only_patches() {
        return Ok((out, summary));
    }

    let mut phdrs = orig.phdrs.clone();
    let mut shdrs = orig.shdrs.clone();
    // The read-only segment's contents, when there is one.
    let mut ro_bytes = Vec::new();
    match &plan.room {
        Room::Free => summary.tactic = "free",
        Room::Move(block) => {
            summary.tactic = "move";
            ro_bytes = move_block(&mut out, orig, plan, block, &mut phdrs, &mut shdrs)?;
            summary.moved_sections = block
                .sections
                .iter()
                .map(|&i| String::from_utf8_lossy(orig.section_name(input, i)).into_owned())
                .collect();
        }
        Room::Relocate { .. } => summary.tactic = "relocate",
    }

    // New segments, in address order, right after the last existing PT_LOAD entry: ld.so
    // sizes its mapping from the first and last PT_LOAD entries in table order.
    out.truncate(orig.kept_len as usize);
    let ro = (plan.ro_size > 0)
        .then(|| Phdr::load(elf::PF_R, plan.ro_offset, plan.ro_vaddr, plan.ro_size));
    let code_offset = page_up(match &ro {
        Some(p) => p.offset + p.filesz,
        None => orig.kept_len,
    });
    let code = (!rw.code.is_empty()).then(|| {
        Phdr::load(
            elf::PF_R | elf::PF_X,
            code_offset,
            plan.code_vaddr,
            rw.code.len() as u64,
        )
    });
    let data_offset = page_up(code.map_or(code_offset, |p| p.offset + p.filesz));
    let data = (!rw.data.is_empty()).then(|| {
        Phdr::load(
            elf::PF_R | elf::PF_W,
            data_offset,
            plan.data_vaddr,
            rw.data.len() as u64,
        )
    });
    let new_loads: Vec<Phdr> = [ro, code, data].into_iter().flatten().collect();
    let last_load = phdrs
        .iter()
        .rposition(|p| p.p_type == elf::PT_LOAD)
        .ok_or(Error::NoLoadSegments)?;
    let at = last_load + 1;
    phdrs.splice(at..at, new_loads.iter().copied());
    // Extra headers at the end, with file offsets from the segment holding their bytes.
    for extra in &rw.extra_phdrs {
        let mut p = *extra;
        let holder = phdrs
            .iter()
            .filter(|s| s.p_type == elf::PT_LOAD)
            .find(|s| p.vaddr >= s.vaddr && p.vaddr + p.memsz <= s.vaddr + s.filesz)
            .ok_or_else(|| Error::Malformed {
                detail: format!(
                    "a new program header describes {:#x} bytes at {:#x}, outside every segment's file bytes",
                    p.memsz, p.vaddr
                ),
            })?;
        p.offset = holder.offset + (p.vaddr - holder.vaddr);
        phdrs.push(p);
    }
    summary.phdrs_after = phdrs.len();

    // Where the table lives now, and PT_PHDR describing it.
    let table_size = phdrs.len() as u64 * raw::PHDR_SIZE;
    let (table_offset, table_vaddr) = match plan.room {
        Room::Relocate { .. } => (plan.ro_offset, plan.ro_vaddr),
        _ => {
            let seg = orig
                .loads()
                .find(|p| p.offset <= orig.phoff && orig.phoff < p.offset + p.filesz);
            let vaddr = seg.map_or(orig.phoff, |s| s.vaddr + (orig.phoff - s.offset));
            (orig.phoff, vaddr)
        }
    };
    for p in phdrs.iter_mut().filter(|p| p.p_type == elf::PT_PHDR) {
        p.offset = table_offset;
        p.vaddr = table_vaddr;
        p.paddr = table_vaddr;
        p.filesz = table_size;
        p.memsz = table_size;
    }
    let table: Vec<u8> = phdrs.iter().flat_map(|p| p.encode()).collect();
    match plan.room {
        Room::Relocate { .. } => {
            ro_bytes = table;
            // The old table stays as dead bytes; zero it so nothing mistakes it for live.
            let old = orig.phoff as usize
                ..orig.phoff as usize + orig.phdrs.len() * raw::PHDR_SIZE as usize;
            if let Some(old) = out.get_mut(old) {
                old.fill(0);
            }
        }
        _ => {
            let reserved = orig.phoff + plan.max_phnum as u64 * raw::PHDR_SIZE;
            if orig.phoff + table_size > reserved {
                return Err(Error::Malformed {
                    detail: "the grown program header table overruns its room".into(),
                });
            }
            let at = table_offset as usize;
            let room = out
                .get_mut(at..at + table.len())
                .ok_or_else(|| Error::Malformed {
                    detail: "the program header table lies past the end of the file".into(),
                })?;
            room.copy_from_slice(&table);
        }
    }

    // The segments' bytes.
    if let Some(p) = ro {
        pad_to(&mut out, p.offset);
        out.extend_from_slice(&ro_bytes);
    }
    if let Some(p) = code {
        pad_to(&mut out, p.offset);
        out.extend_from_slice(&rw.code);
    }
    if let Some(p) = data {
        pad_to(&mut out, p.offset);
        out.extend_from_slice(&rw.data);
    }

    // The ELF header.
    let phnum = u16::try_from(phdrs.len()).map_err(|_| Error::Malformed {
        detail: format!("{} program headers do not fit in e_phnum", phdrs.len()),
    })?;
    raw::put_u16(&mut out, raw::E_PHNUM, phnum);
    if let Some(entry) = rw.entry {
        raw::put_u64(&mut out, raw::E_ENTRY, entry);
    }
    raw::put_u64(&mut out, raw::E_PHOFF, table_offset);

    if !shdrs.is_empty() {
        write_sections(&mut out, rw, shdrs, code, data)?;
    }
    summary.size_after = out.len() as u64;
    Ok((out, summary))
}

/// Moves `block` to the read-only segment: every reference to the bytes in it follows by the
/// same distance. Returns the bytes to place there.
fn move_block(
    out: &mut [u8],
    orig: &Original,
    plan: &Plan,
    block: &Block,
    phdrs: &mut [Phdr],
    shdrs: &mut [Shdr],
) -> Result<Vec<u8>> {
    let dv = plan.ro_vaddr.wrapping_sub(block.old_vaddr);
    let doff = plan.ro_offset.wrapping_sub(block.old_offset);
    let (lo, hi) = (block.old_vaddr, block.old_vaddr + block.len);
    let inside = |v: u64| v >= lo && v < hi;

    // Segments wholly inside the block (PT_INTERP, PT_NOTE, PT_GNU_PROPERTY) move along.
    let block_end = block.old_offset + block.len;
    for p in phdrs.iter_mut() {
        if p.p_type != elf::PT_LOAD
            && p.p_type != elf::PT_PHDR
            && p.filesz > 0
            && p.file_within(block.old_offset, block_end)
        {
            p.offset = p.offset.wrapping_add(doff);
            p.vaddr = p.vaddr.wrapping_add(dv);
            p.paddr = p.paddr.wrapping_add(dv);
        }
    }

    // Dynamic tags that point into the block.
    for (at, tag, value) in orig.dynamic(out) {
        if super::plan::is_pointer_tag(tag) && inside(value) {
            raw::put_u64(out, at as usize + 8, value.wrapping_add(dv));
        }
    }

    // Symbols defined in moved sections (in place, before the block is copied: `.dynsym` may
    // be one of them).
    for sym_table in orig
        .shdrs
        .iter()
        .filter(|s| matches!(s.sh_type, elf::SHT_SYMTAB | elf::SHT_DYNSYM))
    {
        let bytes = raw::slice(out, sym_table.offset, sym_table.size, "a symbol table")?;
        let count = bytes.len() / raw::SYM_SIZE as usize;
        for i in 0..count {
            let at = sym_table.offset as usize + i * raw::SYM_SIZE as usize;
            let shndx = usize::from(raw::u16_at(out, at + 6));
            if block.sections.contains(&shndx) {
                let value = raw::u64_at(out, at + 8);
                raw::put_u64(out, at + 8, value.wrapping_add(dv));
            }
        }
    }

    for &i in &block.sections {
        shdrs[i].addr = shdrs[i].addr.wrapping_add(dv);
        shdrs[i].offset = shdrs[i].offset.wrapping_add(doff);
    }
    let old = block.old_offset as usize..block_end as usize;
    let moved = out[old.clone()].to_vec();
    // The vacated bytes hold nothing anymore; zeroes make a stale reference fail visibly.
    out[old].fill(0);
    Ok(moved)
}

/// Appends a new section name table and section header table describing the new segments.
fn write_sections(
    out: &mut Vec<u8>,
    rw: &Rewrite<'_>,
    mut shdrs: Vec<Shdr>,
    code: Option<Phdr>,
    data: Option<Phdr>,
) -> Result<()> {
    let orig = &rw.orig;
    let input = rw.binary.data();
    let mut names = match orig.shdrs.get(orig.shstrndx) {
        Some(s) if orig.shstrndx != 0 && s.sh_type == elf::SHT_STRTAB => {
            raw::slice(input, s.offset, s.size, "the section name table")?.to_vec()
        }
        _ => Vec::new(),
    };
    let has_names = !names.is_empty();
    let mut name = |text: &str| -> u32 {
        if !has_names {
            return 0;
        }
        let at = names.len() as u32;
        names.extend_from_slice(text.as_bytes());
        names.push(0);
        at
    };
    let mut new_section = |label: &str, seg: Phdr, flags: u32| Shdr {
        name: name(label),
        sh_type: elf::SHT_PROGBITS,
        flags: u64::from(flags),
        addr: seg.vaddr,
        offset: seg.offset,
        size: seg.filesz,
        link: 0,
        info: 0,
        addralign: 16,
        entsize: 0,
    };
    if let Some(seg) = code {
        shdrs.push(new_section(
            ".gsh.text",
            seg,
            elf::SHF_ALLOC | elf::SHF_EXECINSTR,
        ));
    }
    if let Some(seg) = data {
        shdrs.push(new_section(
            ".gsh.data",
            seg,
            elf::SHF_ALLOC | elf::SHF_WRITE,
        ));
    }
    if has_names {
        let offset = out.len() as u64;
        out.extend_from_slice(&names);
        let strtab = &mut shdrs[orig.shstrndx];
        strtab.offset = offset;
        strtab.size = names.len() as u64;
    }
    pad_to(out, out.len().next_multiple_of(8) as u64);
    let shoff = out.len() as u64;
    let count = shdrs.len();
    // Extended numbering keeps the real count in section 0 when it does not fit in e_shnum.
    let shnum = if count >= usize::from(elf::SHN_LORESERVE) {
        shdrs[0].size = count as u64;
        0
    } else {
        count as u16
    };
    for s in &shdrs {
        out.extend_from_slice(&s.encode());
    }
    raw::put_u64(out, raw::E_SHOFF, shoff);
    raw::put_u16(out, raw::E_SHNUM, shnum);
    Ok(())
}

fn pad_to(out: &mut Vec<u8>, offset: u64) {
    if (out.len() as u64) < offset {
        out.resize(offset as usize, 0);
    }
}
