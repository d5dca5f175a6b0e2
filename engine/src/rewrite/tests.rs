//! Unit tests for the rewriter: small programs compiled here in the layouts that stress the
//! program header tactics (PIE, non-PIE, static, static PIE, no section headers), rewritten
//! with new segments, and run.

use std::path::{Path, PathBuf};
use std::process::Command;

use super::*;
use crate::testutil::compile;

const HELLO: &str = r#"
#include <stdio.h>
#include <string.h>
__thread int tls_counter = 5;
static char big_bss[1 << 20];
int main(int argc, char **argv) {
    big_bss[argc] = 1;
    tls_counter += argc;
    printf("hello %d %d %zu\n", argc, tls_counter, strlen(argv[0]) > 0 ? (size_t)1 : (size_t)0);
    return 3;
}
"#;

fn run(path: &Path) -> (i32, String) {
    // A parallel test forking while this file was open for writing makes exec fail with
    // ETXTBSY until that child execs; retry briefly.
    let mut tries = 0;
    let out = loop {
        match Command::new(path).env_clear().output() {
            Err(e) if e.kind() == std::io::ErrorKind::ExecutableFileBusy && tries < 50 => {
                tries += 1;
                std::thread::sleep(std::time::Duration::from_millis(20));
            }
            result => {
                break result.unwrap_or_else(|e| panic!("cannot run {}: {e}", path.display()))
            }
        }
    };
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
    )
}

/// Rewrites `path` with a code and a data allocation (so every new segment exists), saves it
/// beside the input, and checks it runs like the original. Returns the output and summary.
fn rewrite_and_compare(path: &Path) -> (PathBuf, Summary) {
    let binary = Binary::open(path).expect("open");
    let mut rw = Rewrite::new(&binary).expect("plan");
    let code = rw.alloc_code(16, 16).expect("code");
    rw.write(code, &[0xc3]).expect("write code");
    rw.alloc_data_with(b"gsh", 8).expect("data");
    let out = path.with_extension("rewritten");
    let summary = rw.save(&out).expect("save");
    assert_eq!(run(path), run(&out), "{} changed behaviour", path.display());
    (out, summary)
}

fn readelf(args: &str, path: &Path) -> String {
    let out = Command::new("readelf")
        .args(args.split(' '))
        .arg(path)
        .output()
        .expect("readelf");
    assert!(out.status.success(), "readelf {args} failed");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
fn pie_moves_sections_after_the_header_table() {
    let exe = compile("rw_pie", HELLO, false, &["-O1", "-pie", "-fPIE"]);
    let (out, summary) = rewrite_and_compare(&exe);
    assert_eq!(summary.tactic, "move");
    assert!(summary.moved_sections.contains(&".interp".to_owned()));
    assert_eq!(summary.phdrs_after, summary.phdrs_before + 3);
    let headers = readelf("-lW", &out);
    assert!(headers.contains("GNU_RELRO") && headers.contains("GNU_STACK"));
    assert!(!headers.contains("RWE"));
    assert!(readelf("-h", &out).contains("DYN (Position-Independent Executable file)"));
    assert!(readelf("-SW", &out).contains(".gsh.text"));
    // The output can be rewritten again.
    let (_, summary) = rewrite_and_compare(&out);
    assert_ne!(summary.tactic, "copy");
}

#[test]
fn non_pie_stays_exec() {
    let exe = compile("rw_nopie", HELLO, false, &["-O1", "-no-pie", "-fno-pie"]);
    let (out, _) = rewrite_and_compare(&exe);
    assert!(readelf("-h", &out).contains("EXEC (Executable file)"));
}

#[test]
fn static_executables_run() {
    for (name, flags) in [
        ("rw_static", &["-O1", "-static"][..]),
        ("rw_static_pie", &["-O1", "-static-pie"][..]),
    ] {
        let exe = compile(name, HELLO, false, flags);
        let (_, summary) = rewrite_and_compare(&exe);
        eprintln!("{name}: {summary:?}");
        assert_ne!(summary.tactic, "copy", "{name}");
    }
}

#[test]
fn file_without_section_headers_relocates_the_table() {
    let exe = compile("rw_noshdr", HELLO, false, &["-O1"]);
    let mut bytes = std::fs::read(&exe).expect("read");
    // What `sstrip` does: forget the section header table.
    bytes[raw::E_SHOFF..raw::E_SHOFF + 8].fill(0);
    bytes[raw::E_SHNUM..raw::E_SHNUM + 2].fill(0);
    bytes[raw::E_SHSTRNDX..raw::E_SHSTRNDX + 2].fill(0);
    let bare = exe.with_file_name("rw_noshdr_bare");
    std::fs::write(&bare, &bytes).expect("write");
    Command::new("chmod")
        .arg("755")
        .arg(&bare)
        .status()
        .expect("chmod");
    let (out, summary) = rewrite_and_compare(&bare);
    assert_eq!(summary.tactic, "relocate");
    let binary = Binary::open(&out).expect("open output");
    assert!(matches!(
        Rewrite::new(&binary).expect("plan").room(),
        Room::Relocate { .. }
    ));
}

#[test]
fn nothing_allocated_is_a_copy_plus_patches() {
    let exe = compile("rw_copy", HELLO, false, &["-O1"]);
    let binary = Binary::open(&exe).expect("open");
    let rw = Rewrite::new(&binary).expect("plan");
    let bytes = rw.to_bytes().expect("bytes");
    assert_eq!(bytes, binary.data());
}

#[test]
fn writes_are_checked() {
    let exe = compile("rw_writes", HELLO, false, &["-O1"]);
    let binary = Binary::open(&exe).expect("open");
    let mut rw = Rewrite::new(&binary).expect("plan");
    let code = rw.alloc_code(4, 1).expect("code");
    assert!(rw.write(code, &[0x90; 5]).is_err(), "past the allocation");
    assert!(
        rw.write(LinkAddr(0x10), &[0x90]).is_err(),
        "over the headers"
    );
    assert!(rw.write(LinkAddr(u64::MAX - 1), &[0x90; 4]).is_err());
    assert!(matches!(rw.alloc_code(1, 3), Err(Error::BadAlign(3))));
    let entry = binary.entry();
    rw.write(entry, &[0xf4]).expect("a patch over code");
    let (data_addr, reserve) = rw.code_region();
    assert!(reserve >= PAGE && data_addr.0 % PAGE == 0);
    let err = rw
        .save(Path::new("/nonexistent-gsh-dir/out"))
        .expect_err("missing directory");
    assert!(
        err.to_string().contains("/nonexistent-gsh-dir/out"),
        "{err}"
    );
}

#[test]
fn code_reserve_is_enforced() {
    let exe = compile("rw_reserve", HELLO, false, &["-O1"]);
    let binary = Binary::open(&exe).expect("open");
    let mut rw = Rewrite::with_code_reserve(&binary, PAGE).expect("plan");
    rw.alloc_code(PAGE, 1).expect("fits");
    assert!(matches!(
        rw.alloc_code(1, 1),
        Err(Error::CodeReserveFull { .. })
    ));
}

#[test]
fn object_files_are_refused() {
    let exe = compile("rw_object", "int f(void) { return 1; }", false, &["-c"]);
    let binary = Binary::open(&exe).expect("open");
    assert!(matches!(
        Rewrite::new(&binary),
        Err(Error::NotLoadable { .. })
    ));
}

/// Header corruption never panics: every mutated file either fails to open, fails to plan with
/// an error, or rewrites.
#[test]
fn corrupted_headers_never_panic() {
    let exe = compile("rw_corrupt", HELLO, false, &["-O1"]);
    let original = std::fs::read(&exe).expect("read");
    let shoff = raw::u64_at(&original, raw::E_SHOFF) as usize;
    // A small xorshift generator: deterministic, no dependency.
    let mut state = 0x9e37_79b9_7f4a_7c15_u64;
    let mut next = || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    };
    for _ in 0..3000 {
        let mut bytes = original.clone();
        for _ in 0..1 + next() % 4 {
            // Mostly the ELF header and program headers, sometimes the section headers.
            let at = if next() % 4 == 0 {
                shoff + (next() as usize % (original.len() - shoff))
            } else {
                (next() % 0x400) as usize
            };
            bytes[at] = next() as u8;
        }
        let Ok(binary) = Binary::from_bytes(Path::new("corrupt"), bytes) else {
            continue;
        };
        let Ok(mut rw) = Rewrite::new(&binary) else {
            continue;
        };
        if rw.alloc_code(8, 8).is_ok() && rw.alloc_data(8, 8).is_ok() {
            let _ = rw.write(binary.entry(), &[0x90]);
            let _ = rw.to_bytes();
        }
    }
}
