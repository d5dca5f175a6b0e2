//! Random bytes as code: wrapped in a minimal executable whose entry is the first byte, then
//! functions discovered and the whole module analysed (CFGs, jump tables, loops, call graph).
//! Must never panic or hang, whatever the bytes decode to.
#![no_main]

use std::path::Path;

use engine::analysis::Analysis;
use engine::symbols::{FunctionTable, NoProgress};
use engine::Binary;

const BASE: u64 = 0x40_0000;
const CODE_OFF: u64 = 0x1000;

fn put(buf: &mut Vec<u8>, at: usize, bytes: &[u8]) {
    if buf.len() < at + bytes.len() {
        buf.resize(at + bytes.len(), 0);
    }
    buf[at..at + bytes.len()].copy_from_slice(bytes);
}

/// An ELF executable with one R-X `PT_LOAD` holding `code` as `.text` at `BASE + CODE_OFF`.
fn image(code: &[u8]) -> Vec<u8> {
    let mut f = vec![0u8; CODE_OFF as usize];
    put(&mut f, 0, &[0x7f, b'E', b'L', b'F', 2, 1, 1, 0]);
    put(&mut f, 16, &2u16.to_le_bytes()); // ET_EXEC
    put(&mut f, 18, &62u16.to_le_bytes()); // EM_X86_64
    put(&mut f, 20, &1u32.to_le_bytes());
    put(&mut f, 24, &(BASE + CODE_OFF).to_le_bytes()); // e_entry
    put(&mut f, 32, &64u64.to_le_bytes()); // e_phoff
    let shstr_off = CODE_OFF as usize + code.len();
    let shstr = b"\0.text\0.shstrtab\0";
    let sh_off = (shstr_off + shstr.len() + 7) & !7;
    put(&mut f, 40, &(sh_off as u64).to_le_bytes()); // e_shoff
    put(&mut f, 52, &64u16.to_le_bytes()); // e_ehsize
    put(&mut f, 54, &56u16.to_le_bytes()); // e_phentsize
    put(&mut f, 56, &1u16.to_le_bytes()); // e_phnum
    put(&mut f, 58, &64u16.to_le_bytes()); // e_shentsize
    put(&mut f, 60, &3u16.to_le_bytes()); // e_shnum
    put(&mut f, 62, &2u16.to_le_bytes()); // e_shstrndx
    // PT_LOAD, R-X, covering the code.
    let ph = 64;
    put(&mut f, ph, &1u32.to_le_bytes());
    put(&mut f, ph + 4, &5u32.to_le_bytes());
    put(&mut f, ph + 8, &CODE_OFF.to_le_bytes());
    put(&mut f, ph + 16, &(BASE + CODE_OFF).to_le_bytes());
    put(&mut f, ph + 24, &(BASE + CODE_OFF).to_le_bytes());
    put(&mut f, ph + 32, &(code.len() as u64).to_le_bytes());
    put(&mut f, ph + 40, &(code.len() as u64).to_le_bytes());
    put(&mut f, ph + 48, &0x1000u64.to_le_bytes());
    put(&mut f, CODE_OFF as usize, code);
    put(&mut f, shstr_off, shstr);
    // Section headers: null, .text (PROGBITS, ALLOC|EXECINSTR), .shstrtab.
    let text = sh_off + 64;
    put(&mut f, text, &1u32.to_le_bytes());
    put(&mut f, text + 4, &1u32.to_le_bytes());
    put(&mut f, text + 8, &6u64.to_le_bytes());
    put(&mut f, text + 16, &(BASE + CODE_OFF).to_le_bytes());
    put(&mut f, text + 24, &CODE_OFF.to_le_bytes());
    put(&mut f, text + 32, &(code.len() as u64).to_le_bytes());
    put(&mut f, text + 48, &16u64.to_le_bytes());
    let strtab = sh_off + 128;
    put(&mut f, strtab, &7u32.to_le_bytes());
    put(&mut f, strtab + 4, &3u32.to_le_bytes());
    put(&mut f, strtab + 24, &(shstr_off as u64).to_le_bytes());
    put(&mut f, strtab + 32, &(shstr.len() as u64).to_le_bytes());
    put(&mut f, strtab + 48, &1u64.to_le_bytes());
    // The table's last field (sh_entsize, 0) is never written: make room for it.
    f.resize(sh_off + 3 * 64, 0);
    f
}

libfuzzer_sys::fuzz_target!(|code: &[u8]| {
    if code.is_empty() {
        return;
    }
    let binary = Binary::from_bytes(Path::new("code"), image(code)).expect("well-formed image");
    let table = FunctionTable::build(&binary, &NoProgress);
    assert!(!table.functions().is_empty(), "the entry is always a function");
    let analysis = Analysis::run(&binary, &table, &NoProgress);
    for f in table.functions() {
        let a = analysis.function(f.id);
        for e in &a.cfg.edges {
            assert!((e.from.0 as usize) < a.cfg.blocks.len() && (e.to.0 as usize) < a.cfg.blocks.len());
        }
        let _ = analysis.metrics(f.id);
    }
});
