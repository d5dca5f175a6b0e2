use std::path::Path;

use super::*;

fn err_of(bytes: Vec<u8>) -> String {
    Binary::from_bytes(Path::new("x"), bytes)
        .unwrap_err()
        .to_string()
}

#[test]
fn rejects_non_elf() {
    assert_eq!(
        err_of(b"#!/bin/sh\necho hi\n".to_vec()),
        "x: not an ELF file"
    );
}

#[test]
fn rejects_32_bit() {
    let mut h = vec![0u8; 64];
    h[..4].copy_from_slice(&elf::ELFMAG);
    h[4] = elf::ELFCLASS32;
    assert!(err_of(h).contains("32-bit"));
}

#[test]
fn rejects_other_machine() {
    let mut h = vec![0u8; 64];
    h[..4].copy_from_slice(&elf::ELFMAG);
    h[4] = elf::ELFCLASS64;
    h[5] = elf::ELFDATA2LSB;
    h[18..20].copy_from_slice(&elf::EM_AARCH64.to_le_bytes());
    assert!(err_of(h).contains("AArch64"));
}

#[test]
fn opens_own_executable_and_reads_truncations_as_errors() {
    let exe = std::env::current_exe().unwrap();
    let bin = Binary::open(&exe).unwrap();
    assert!(bin.code_sections().count() > 0);
    let bytes = std::fs::read(&exe).unwrap();
    for len in [0, 10, 63, 64, 200, 4096, bytes.len() / 2] {
        // Any outcome but a panic is acceptable; most of these must be errors.
        let _ = Binary::from_bytes(Path::new("t"), bytes[..len].to_vec());
    }
    assert!(Binary::from_bytes(Path::new("t"), bytes[..bytes.len() / 2].to_vec()).is_err());
}
