//! Random bytes as an ELF file: open, discover functions, disassemble the first one. Must
//! return errors, never panic, hang or read out of bounds.
#![no_main]

use std::path::Path;

use engine::symbols::{FunctionTable, NoProgress};
use engine::Binary;

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    let Ok(binary) = Binary::from_bytes(Path::new("fuzz"), data.to_vec()) else { return };
    let table = FunctionTable::build(&binary, &NoProgress);
    if let Some(f) = table.functions().first() {
        if let Some(bytes) = binary.bytes_at(f.addr, f.size.min(4096)) {
            let _ = engine::disasm::disassemble(bytes, f.addr, 64, &|_| None);
        }
    }
    let _ = binary.needed();
});
