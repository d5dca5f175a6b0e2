//! Unit tests for the rewriter: small programs compiled here in the layouts that stress the
//! program header tactics (PIE, non-PIE, static, static PIE, no section headers), rewritten
//! with new segments, and run.

use std::path::{Path, PathBuf};
use std::process::Command;

use super::*;
use crate::testutil::compile;
use gsh_rt_abi::PT_GSH_MEASURE;

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

const NEEDED_LIB: &str = r#"
#include <stdio.h>
__attribute__((constructor)) static void hello(void) { printf("needed library loaded\n"); }
"#;

/// The bytes of `exe` with its `PT_DYNAMIC` cut right after the terminating `DT_NULL`, so no
/// spare entry is left (linkers always leave some).
fn without_spare_dynamic_entries(exe: &Path) -> PathBuf {
    let mut bytes = std::fs::read(exe).expect("read");
    let binary = Binary::open(exe).expect("open");
    let orig = plan::Original::read(&binary).expect("headers");
    let used = orig.dynamic(binary.data()).len() as u64;
    let at = orig
        .phdrs
        .iter()
        .position(|p| p.p_type == object::elf::PT_DYNAMIC)
        .expect("PT_DYNAMIC");
    let field = orig.phoff as usize + at * raw::PHDR_SIZE as usize;
    let size = (used + 1) * raw::DYN_SIZE;
    raw::put_u64(&mut bytes, field + 32, size);
    raw::put_u64(&mut bytes, field + 40, size);
    let out = exe.with_file_name(format!(
        "{}-nospare",
        exe.file_name().expect("name").to_string_lossy()
    ));
    std::fs::write(&out, &bytes).expect("write");
    out
}

#[test]
fn needed_library_is_loaded_and_extra_header_is_listed() {
    let lib = compile("libgsh_needed.so", NEEDED_LIB, false, &["-shared", "-fPIC"]);
    for (name, flags) in [
        ("rw_needed_pie", &["-O1", "-pie", "-fPIE"][..]),
        ("rw_needed_nopie", &["-O1", "-no-pie", "-fno-pie"][..]),
    ] {
        let exe = compile(name, HELLO, false, flags);
        let binary = Binary::open(&exe).expect("open");
        let options = Options {
            extra_headers: 1,
            ..Options::default()
        };
        let mut rw = Rewrite::with_options(&binary, options).expect("plan");
        rw.add_needed(lib.as_os_str().as_encoded_bytes())
            .expect("needed");
        let desc = rw.alloc_data_with(&[7; 128], 64).expect("descriptor");
        rw.add_phdr(PT_GSH_MEASURE, desc, 128).expect("header");
        assert!(matches!(
            rw.add_phdr(PT_GSH_MEASURE, desc, 128),
            Err(Error::NoHeaderRoom(1))
        ));
        let out = exe.with_extension("needed");
        let summary = rw.save(&out).expect("save");
        // The read-only segment (moved sections), the data segment and the new header.
        assert_eq!(summary.phdrs_after, summary.phdrs_before + 3, "{name}");
        let (code, stdout) = run(&out);
        let (code0, stdout0) = run(&exe);
        assert_eq!(code, code0, "{name}");
        assert_eq!(
            stdout,
            format!("needed library loaded\n{stdout0}"),
            "{name}"
        );
        // readelf names libraries from the `.dynstr` section, which is the unchanged original,
        // so the new entry shows as a number; the run above shows ld.so reads the copy.
        let needed = |p: &Path| readelf("-dW", p).matches("(NEEDED)").count();
        assert_eq!(needed(&out), needed(&exe) + 1, "{name}");
        let headers = readelf("-lW", &out);
        let line = headers
            .lines()
            .find(|l| l.contains("LOOS+0x4736801"))
            .unwrap_or_else(|| panic!("{name}: no PT_GSH_MEASURE\n{headers}"));
        assert!(
            line.contains(&format!("{:#018x}", desc.0)),
            "{name}: {line}"
        );
    }
}

#[test]
fn no_spare_dynamic_entry_is_an_error_that_changes_nothing() {
    let exe = compile("rw_nospare", HELLO, false, &["-O1"]);
    let bare = without_spare_dynamic_entries(&exe);
    let binary = Binary::open(&bare).expect("open");
    let mut rw = Rewrite::new(&binary).expect("plan");
    assert!(matches!(
        rw.add_needed(b"/nonexistent/libx.so"),
        Err(Error::NoDynamicRoom { .. })
    ));
    assert!(!matches!(rw.init(), Ok(InitHook::Spare { .. })));
    assert_eq!(rw.to_bytes().expect("bytes"), binary.data());
}

#[test]
fn spare_entries_are_used_once() {
    let exe = compile("rw_spares", HELLO, false, &["-O1"]);
    let binary = Binary::open(&exe).expect("open");
    let mut rw = Rewrite::new(&binary).expect("plan");
    let mut added = 0;
    while rw.add_needed(b"libc.so.6").is_ok() {
        added += 1;
        assert!(added < 100, "spares never run out");
    }
    assert!(added >= 1, "gcc's linker leaves spare DT_NULL entries");
    let out = exe.with_extension("spares");
    rw.save(&out).expect("save");
    // Every spare but the last became a DT_NEEDED; the table still ends, and the program runs.
    assert_eq!(run(&exe), run(&out));
}
