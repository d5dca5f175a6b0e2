//! Bad input through the engine: missing files, directories, text, truncated and corrupted
//! copies of a real mutatee, and ELF files for other machines. Each gets an error, never a
//! panic.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::{Path, PathBuf};

use engine::symbols::NoProgress;
use engine::{Binary, Error, FunctionTable};
use gsh_tests::{target_dir, Mutatee, Variant};
use object::{Object, ObjectSection};

/// A scratch directory for this test binary's files under the target directory.
fn scratch(name: &str) -> PathBuf {
    let dir = target_dir()
        .join("test-scratch")
        .join(format!("{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("scratch directory");
    dir.join(name)
}

#[test]
fn missing_file_is_an_io_error_naming_the_path() {
    let path = Path::new("/nonexistent/gsh-test/no-such-file");
    let err = Binary::open(path).expect_err("no such file");
    assert!(matches!(err, Error::Io { .. }), "{err:?}");
    assert!(
        err.to_string()
            .contains("/nonexistent/gsh-test/no-such-file"),
        "{err}"
    );
}

#[test]
fn directory_is_an_error() {
    let err = Binary::open(&target_dir()).expect_err("a directory");
    assert!(err.to_string().contains("directory"), "{err}");
}

#[test]
fn text_and_empty_files_are_not_elf() {
    let text = scratch("notes.txt");
    std::fs::write(&text, "this is not an ELF file\n").expect("write");
    let err = Binary::open(&text).expect_err("text");
    assert!(matches!(err, Error::NotElf { .. }), "{err:?}");
    assert!(err.to_string().contains("not an ELF file"), "{err}");

    let empty = scratch("empty");
    std::fs::write(&empty, "").expect("write");
    assert!(matches!(Binary::open(&empty), Err(Error::NotElf { .. })));
}

/// Opens `bytes` and, if that succeeds, builds its function table. `None` when either panics;
/// otherwise whether the open succeeded.
fn open_without_panic(what: &str, bytes: Vec<u8>) -> Option<Result<(), Error>> {
    catch_unwind(AssertUnwindSafe(|| {
        let binary = Binary::from_bytes(Path::new(what), bytes)?;
        let _ = FunctionTable::build(&binary, &NoProgress);
        Ok(())
    }))
    .ok()
}

#[test]
fn truncated_copies_are_errors_not_panics() {
    for v in [Variant::O2, Variant::Stripped] {
        let path = Mutatee::new("basic").path(v);
        let full = std::fs::read(&path).expect("read mutatee");
        // Every length through the headers, then a stride that still lands in every section.
        let lengths = (0..256).chain((256..full.len()).step_by(61));
        let mut panicked = Vec::new();
        let mut accepted = Vec::new();
        let mut cases = 0;
        for len in lengths {
            cases += 1;
            match open_without_panic("truncated", full[..len].to_vec()) {
                None => panicked.push(len),
                Some(Ok(())) => accepted.push(len),
                Some(Err(_)) => {}
            }
        }
        assert!(cases > 200);
        assert!(
            panicked.is_empty(),
            "{v:?}: panicked at lengths {panicked:?}"
        );
        // The section headers sit at the end of a gcc-built file, so every cut loses them.
        assert!(
            accepted.is_empty(),
            "{v:?}: accepted truncated lengths {accepted:?} of {}",
            full.len()
        );
    }
}

#[test]
fn corrupted_headers_never_panic() {
    let full = std::fs::read(Mutatee::new("basic").path(Variant::O2)).expect("read mutatee");
    let shoff = u64::from_le_bytes(full[0x28..0x30].try_into().expect("8 bytes")) as usize;
    let phoff = u64::from_le_bytes(full[0x20..0x28].try_into().expect("8 bytes")) as usize;
    // The bytes whose corruption reaches the most code: the ELF header, program headers,
    // section headers, and the sections discovery parses or decodes.
    let mut regions = vec![
        (0usize, 64usize),
        (phoff, phoff + 13 * 56),
        (shoff, full.len()),
    ];
    let file = object::File::parse(&*full).expect("a real mutatee parses");
    for name in [
        ".eh_frame",
        ".eh_frame_hdr",
        ".text",
        ".plt",
        ".rela.plt",
        ".dynsym",
        ".symtab",
    ] {
        if let Some((offset, size)) = file.section_by_name(name).and_then(|s| s.file_range()) {
            if size > 0 {
                regions.push((offset as usize, (offset + size) as usize));
            }
        }
    }
    assert!(
        regions.len() >= 8,
        "the mutatee lacks sections this test corrupts"
    );
    let mut state: u64 = 0x9e37_79b9_7f4a_7c15;
    let mut next = move || {
        // xorshift64: deterministic, so a failure reproduces.
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    };
    let mut panicked = Vec::new();
    let mut opened = 0;
    for case in 0..1200 {
        let mut bytes = full.clone();
        let (lo, hi) = regions[case % regions.len()];
        let hi = hi.min(bytes.len());
        for _ in 0..1 + next() % 4 {
            let at = lo + (next() as usize) % (hi - lo);
            bytes[at] = match next() % 4 {
                0 => 0,
                1 => 0xff,
                _ => next() as u8,
            };
        }
        match open_without_panic("corrupted", bytes) {
            None => panicked.push(case),
            Some(Ok(())) => opened += 1,
            Some(Err(_)) => {}
        }
    }
    assert!(panicked.is_empty(), "panicked on cases {panicked:?}");
    // Many corruptions (a flipped byte in an unused header field) still open; those cases are
    // the ones that exercise function discovery on damaged input.
    assert!(opened > 50, "only {opened} of 1200 corrupted files opened");
}

#[test]
fn thirty_two_bit_elf_is_unsupported() {
    let mut header = vec![0u8; 64];
    header[..4].copy_from_slice(b"\x7fELF");
    header[4] = 1; // ELFCLASS32
    header[5] = 1; // little-endian
    header[6] = 1; // EV_CURRENT
    header[16] = 2; // ET_EXEC
    header[18] = 3; // EM_386
    let err = Binary::from_bytes(Path::new("i386"), header).expect_err("32-bit");
    assert!(matches!(err, Error::Unsupported { .. }), "{err:?}");
    assert!(err.to_string().contains("32-bit"), "{err}");
}

#[test]
fn aarch64_elf_is_unsupported() {
    let mut bytes = std::fs::read(Mutatee::new("basic").path(Variant::O2)).expect("read");
    bytes[18..20].copy_from_slice(&object::elf::EM_AARCH64.to_le_bytes());
    let path = scratch("aarch64");
    std::fs::write(&path, &bytes).expect("write");
    let err = Binary::open(&path).expect_err("AArch64");
    assert!(matches!(err, Error::Unsupported { .. }), "{err:?}");
    assert!(err.to_string().contains("AArch64"), "{err}");
}
