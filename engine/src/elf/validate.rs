//! Header checks made before anything else touches the file, so that each kind of bad input
//! gets its own clear message instead of a generic parse error.

use std::path::Path;

use object::elf;

use crate::error::{Error, Result};

/// Index of the class byte in `e_ident`.
const EI_CLASS: usize = 4;
/// Index of the data-encoding byte in `e_ident`.
const EI_DATA: usize = 5;

/// Checks the ELF identification and machine of `data`.
pub fn check_header(path: &Path, data: &[u8]) -> Result<()> {
    if data.len() < 4 || data[..4] != elf::ELFMAG {
        return Err(Error::NotElf {
            path: path.to_owned(),
        });
    }
    let unsupported = |what: String| Error::Unsupported {
        path: path.to_owned(),
        what,
    };
    if data.len() < 64 {
        return Err(Error::Malformed {
            path: path.to_owned(),
            detail: format!("file is {} bytes, shorter than an ELF header", data.len()),
        });
    }
    match data[EI_CLASS] {
        elf::ELFCLASS64 => {}
        elf::ELFCLASS32 => return Err(unsupported("a 32-bit".into())),
        c => return Err(unsupported(format!("an unknown-class ({c})"))),
    }
    if data[EI_DATA] != elf::ELFDATA2LSB {
        return Err(unsupported("a big-endian".into()));
    }
    let machine = u16::from_le_bytes([data[18], data[19]]);
    if machine != elf::EM_X86_64 {
        return Err(unsupported(format!(
            "{} ({machine})",
            machine_name(machine)
        )));
    }
    Ok(())
}

fn machine_name(machine: u16) -> &'static str {
    match machine {
        elf::EM_386 => "an i386",
        elf::EM_AARCH64 => "an AArch64",
        elf::EM_ARM => "an ARM",
        elf::EM_RISCV => "a RISC-V",
        elf::EM_PPC64 => "a PowerPC64",
        elf::EM_S390 => "an s390",
        elf::EM_MIPS => "a MIPS",
        elf::EM_LOONGARCH => "a LoongArch",
        _ => "a non-x86-64",
    }
}
