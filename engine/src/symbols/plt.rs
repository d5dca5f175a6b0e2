//! PLT stubs, named `name@plt` after the symbol of the GOT slot each one jumps through.
//!
//! Rather than trust a fixed stub layout (lazy `.plt`, IBT `.plt.sec`, `.plt.got` all differ),
//! each PLT section is decoded and every `jmp [rip+slot]` is matched to the relocation that
//! fills `slot`. A stub starts at the entry boundary (`sh_entsize`, 16 by default) holding
//! that jump.

use std::collections::HashMap;

use iced_x86::{Decoder, DecoderOptions, Mnemonic, OpKind, Register};
use object::read::elf::ElfFile64;
use object::{Endianness, Object, ObjectSymbol, ObjectSymbolTable, RelocationTarget};

use crate::addr::LinkAddr;
use crate::elf::Binary;

/// Size given to a PLT stub when nothing else says.
pub const STUB_SIZE: u64 = 16;

/// Every PLT stub's start address and `name@plt` name.
pub fn stubs(binary: &Binary, slots: &HashMap<u64, String>) -> Vec<(LinkAddr, String)> {
    if slots.is_empty() {
        return Vec::new();
    }
    let mut out = Vec::new();
    for section in binary.code_sections() {
        if !section.name.starts_with(".plt") && section.name != ".iplt" {
            continue;
        }
        let entry = if section.entsize >= 8 {
            section.entsize
        } else {
            STUB_SIZE
        };
        let bytes = binary.section_data(section);
        let mut decoder = Decoder::with_ip(64, bytes, section.addr.0, DecoderOptions::NONE);
        for insn in &mut decoder {
            if insn.is_invalid() {
                continue;
            }
            let is_slot_jump = insn.mnemonic() == Mnemonic::Jmp
                && insn.op_count() == 1
                && insn.op0_kind() == OpKind::Memory
                && insn.memory_base() == Register::RIP;
            if !is_slot_jump {
                continue;
            }
            let Some(name) = slots.get(&insn.ip_rel_memory_address()) else {
                continue;
            };
            let offset = insn.ip() - section.addr.0;
            let start = section.addr.0 + offset - offset % entry;
            out.push((LinkAddr(start), format!("{name}@plt")));
        }
    }
    out
}

/// GOT slot address → imported symbol name, from the dynamic relocations.
pub fn got_slot_names(file: &ElfFile64<'_, Endianness>) -> HashMap<u64, String> {
    let mut slots = HashMap::new();
    let Some(relocs) = file.dynamic_relocations() else {
        return slots;
    };
    let Some(dynsyms) = file.dynamic_symbol_table() else {
        return slots;
    };
    for (offset, reloc) in relocs {
        // IRELATIVE slots (libc's own ifunc stubs) have no symbol: name them as objdump does.
        if reloc.target() == RelocationTarget::Absolute && reloc.addend() != 0 {
            slots.insert(offset, format!("*ABS*+{:#x}", reloc.addend()));
            continue;
        }
        if let RelocationTarget::Symbol(index) = reloc.target() {
            if let Ok(sym) = dynsyms.symbol_by_index(index) {
                if let Ok(name) = sym.name() {
                    if !name.is_empty() {
                        slots.insert(offset, name.to_owned());
                    }
                }
            }
        }
    }
    slots
}
