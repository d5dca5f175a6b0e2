//! Function starts a stripped binary still records outside its symbol tables, as careful
//! disassemblers read them: `_init`/`_fini` (`DT_INIT`/`DT_FINI`, the `.init`/`.fini`
//! sections), the constructors and destructors of `.init_array`/`.fini_array`/`.preinit_array`,
//! code pointers in data that the dynamic linker relocates (`R_X86_64_RELATIVE` addends: tables
//! of callbacks), and the targets of tail calls into code no other source covers (crtstuff's
//! `register_tm_clones`, jumped to from `frame_dummy`). None may fall inside a function another
//! source already bounds: a pointer into a function's middle is a label (a computed goto's
//! table), not a start.

use object::elf;
use object::read::elf::{Dyn, ElfFile64, Rela, SectionHeader};
use object::{Endianness, Object};

use crate::addr::LinkAddr;
use crate::elf::Binary;

/// `_init` and `_fini` by name, from the dynamic section and the sections of those names.
pub fn init_fini(binary: &Binary) -> Vec<(LinkAddr, &'static str)> {
    let mut out = Vec::new();
    for (section, name) in [(".init", "_init"), (".fini", "_fini")] {
        if let Some(s) = binary.section(section) {
            out.push((s.addr, name));
        }
    }
    let file = binary.elf();
    let endian = file.endian();
    let sections = file.elf_section_table();
    if let Ok(Some((dyns, _))) = sections.dynamic(endian, file.data()) {
        for d in dyns {
            let name = match d.tag32(endian) {
                Some(elf::DT_INIT) => "_init",
                Some(elf::DT_FINI) => "_fini",
                _ => continue,
            };
            out.push((LinkAddr(d.d_val(endian)), name));
        }
    }
    out.sort_unstable();
    out.dedup();
    out
}

/// The entries of the init and fini arrays: each word, or the addend of the relocation that
/// fills it when the file holds zero there.
pub fn array_entries(binary: &Binary) -> Vec<LinkAddr> {
    let relative = relative_relocations(&binary.elf());
    let mut out = Vec::new();
    for name in [".preinit_array", ".init_array", ".fini_array"] {
        let Some(s) = binary.section(name) else {
            continue;
        };
        let data = binary.section_data(s);
        for (i, word) in data.chunks_exact(8).enumerate() {
            let at = s.addr.0 + 8 * i as u64;
            let value = u64::from_le_bytes(word.try_into().unwrap_or_default());
            let value = match relative.binary_search_by_key(&at, |r| r.0) {
                Ok(k) if value == 0 => relative[k].1,
                _ => value,
            };
            // 0 and -1 mark the ends of old-style lists.
            if value != 0 && value != u64::MAX {
                out.push(LinkAddr(value));
            }
        }
    }
    out
}

/// Code addresses the dynamic linker writes into data (`R_X86_64_RELATIVE` addends).
pub fn relocated_code_pointers(binary: &Binary) -> Vec<LinkAddr> {
    relative_relocations(&binary.elf())
        .into_iter()
        .map(|(_, target)| LinkAddr(target))
        .filter(|&t| binary.section_at(t).is_some_and(|s| s.is_exec()))
        .collect()
}

/// The addresses the dynamic linker writes a relocated pointer to (`R_X86_64_RELATIVE`),
/// sorted: in a PIE or a library, every word of a table of absolute code addresses.
pub fn relocated_words(binary: &Binary) -> Vec<u64> {
    relative_relocations(&binary.elf())
        .into_iter()
        .map(|(at, _)| at)
        .collect()
}

/// `(offset, addend)` of every `R_X86_64_RELATIVE` relocation, sorted by offset.
fn relative_relocations(file: &ElfFile64<'_, Endianness>) -> Vec<(u64, u64)> {
    let endian = file.endian();
    let data = file.data();
    let mut out = Vec::new();
    for section in file.sections() {
        let header = section.elf_section_header();
        if header.sh_type(endian) != elf::SHT_RELA {
            continue;
        }
        // Only the dynamic linker's relocations: `--emit-relocs` keeps the static linker's in
        // sections that apply to one section (`sh_info` names it).
        if header.sh_flags(endian) & u64::from(elf::SHF_INFO_LINK) != 0 {
            continue;
        }
        let Ok(Some((relas, _))) = header.rela(endian, data) else {
            continue;
        };
        for r in relas {
            if r.r_type(endian, false) == elf::R_X86_64_RELATIVE {
                out.push((r.r_offset(endian), r.r_addend(endian) as u64));
            }
        }
    }
    out.sort_unstable();
    out
}

/// The targets of direct `jmp`s that leave the region they are in for code no function
/// bounds: `known` is every start with what bounds it (`Some(size)`, from a symbol, an FDE or a
/// PLT), sorted; `jumps` the `(jmp, target)` pairs of the code.
pub fn tail_call_targets(known: &[(u64, Option<u64>)], jumps: &[(u64, u64)]) -> Vec<LinkAddr> {
    // The start of the region holding `a`, and whether a sized function covers it.
    let region = |a: u64| -> Option<(u64, bool)> {
        let i = known.partition_point(|k| k.0 <= a);
        let (start, size) = *known.get(i.checked_sub(1)?)?;
        Some((start, size.is_some_and(|s| a < start + s)))
    };
    let mut out = Vec::new();
    for &(from, to) in jumps {
        let (there, covered) = region(to).unwrap_or((0, false));
        if to == there || covered {
            // A known start, or inside a bounded function (a `.cold` part or a loop).
            continue;
        }
        if region(from).map(|r| r.0) != Some(there) {
            out.push(LinkAddr(to));
        }
    }
    out
}
