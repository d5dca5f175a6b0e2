//! Writing new ELF files (`engine::rewrite`): a rewrite that inserts nothing runs exactly like
//! the original for every mutatee variant, the shared library, `ls`, `python3` and `cc1`; a
//! rewrite that jumps from a function's entry to new code prints a line each time the function
//! runs; the program headers keep their shape; bad output paths give clear errors.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::Instant;

use engine::rewrite::{Rewrite, Summary};
use engine::{Binary, LinkAddr};
use gsh_tests::{run_tool, target_dir, truth, Mutatee, Variant};
use iced_x86::{
    BlockEncoder, BlockEncoderOptions, Code, Decoder, DecoderOptions, FlowControl, Instruction,
    InstructionBlock, MemoryOperand, Register,
};

/// A fresh directory for this test's outputs under the target directory.
fn out_dir(test: &str) -> PathBuf {
    let dir = target_dir()
        .join("rewrite-tests")
        .join(format!("{test}-{}", std::process::id()));
    std::fs::create_dir_all(&dir)
        .unwrap_or_else(|e| panic!("cannot create {}: {e}", dir.display()));
    dir
}

/// Rewrites `input` into `out` with one byte of new code and data, so the new segments and the
/// grown program header table are all present while the program's behaviour must not change.
fn rewrite_empty(input: &Path, out: &Path) -> Summary {
    let binary = Binary::open(input).unwrap_or_else(|e| panic!("{e}"));
    let mut rw = Rewrite::new(&binary).unwrap_or_else(|e| panic!("{}: {e}", input.display()));
    let code = rw.alloc_code(1, 16).expect("alloc code");
    rw.write(code, &[0xcc]).expect("write code");
    rw.alloc_data(8, 8).expect("alloc data");
    let summary = rw
        .save(out)
        .unwrap_or_else(|e| panic!("{}: {e}", input.display()));
    // Shown with --nocapture: the figures of each rewrite.
    eprintln!("{}: {summary:?}", input.display());
    summary
}

fn run(exe: &Path, args: &[&str], env: &[(&str, &Path)]) -> Output {
    gsh_tests::run_program(exe, args, env)
}

fn assert_same_run(original: &Output, rewritten: &Output, what: &str) {
    assert_eq!(
        rewritten.status.code(),
        original.status.code(),
        "{what}: exit status differs; stderr: {}",
        String::from_utf8_lossy(&rewritten.stderr)
    );
    assert_eq!(
        String::from_utf8_lossy(&rewritten.stdout),
        String::from_utf8_lossy(&original.stdout),
        "{what}: stdout differs"
    );
}

/// `readelf -lW` of `path`, with the checks every output must pass: no RWE segment, and the
/// GNU segments of the input still there.
fn check_program_headers(input: &Path, output: &Path) {
    let before = run_tool("readelf", &["-lW".as_ref(), input.as_os_str()]);
    let after = run_tool("readelf", &["-lW".as_ref(), output.as_os_str()]);
    assert!(
        !after.contains(" RWE "),
        "{}: an RWE segment\n{after}",
        output.display()
    );
    for kind in [
        "GNU_RELRO",
        "GNU_STACK",
        "GNU_PROPERTY",
        "INTERP",
        "DYNAMIC",
        "NOTE",
        "TLS",
        "GNU_EH_FRAME",
        "PHDR",
    ] {
        let count = |text: &str| {
            text.lines()
                .filter(|l| l.split_whitespace().next() == Some(kind))
                .count()
        };
        assert_eq!(
            count(&after),
            count(&before),
            "{kind} entries in {}\n{after}",
            output.display()
        );
    }
    let loads = |text: &str| {
        text.lines()
            .filter(|l| l.trim_start().starts_with("LOAD"))
            .count()
    };
    assert!(
        loads(&after) > loads(&before),
        "no new PT_LOAD in {}",
        output.display()
    );
    assert!(after.contains(" R E ") && after.contains(" RW "));
    let header = |p: &Path| {
        run_tool("readelf", &["-h".as_ref(), p.as_os_str()])
            .lines()
            .find(|l| l.contains("Type:"))
            .map(str::to_owned)
    };
    assert_eq!(header(output), header(input), "ELF type changed");
    // The section headers still read, and name the new segments.
    let sections = run_tool("readelf", &["-SW".as_ref(), output.as_os_str()]);
    if !sections.contains("There are no sections") {
        assert!(
            sections.contains(".gsh.text") && sections.contains(".gsh.data"),
            "{sections}"
        );
    }
}

#[test]
fn empty_rewrite_of_every_mutatee_variant_runs_the_same() {
    let dir = out_dir("mutatees");
    for m in Mutatee::all() {
        for v in Variant::ALL {
            let exe = m.path(v);
            let out = dir.join(m.file_name(v));
            let summary = rewrite_empty(&exe, &out);
            let what = format!("{} ({summary:?})", m.file_name(v));
            let original = run(&exe, &[], &[]);
            assert_eq!(
                String::from_utf8_lossy(&original.stdout),
                m.expected_stdout()
            );
            assert_same_run(&original, &run(&out, &[], &[]), &what);
            check_program_headers(&exe, &out);
            // objdump still disassembles the output.
            run_tool("objdump", &["-d".as_ref(), out.as_os_str()]);
        }
    }
}

#[test]
fn empty_rewrite_of_system_programs_runs_the_same() {
    let dir = out_dir("system");
    // A directory nothing changes while the tests run (`/` has `/proc`, whose link count
    // follows the number of processes, and `/tmp`).
    let listed = gsh_tests::mutatee_source_dir();
    let listed = listed.to_str().expect("a UTF-8 path");
    for (program, args) in [
        ("/usr/bin/ls", &["-la", listed][..]),
        ("/usr/bin/python3", &["-c", "print(1+1)"][..]),
    ] {
        let input = std::fs::canonicalize(program)
            .unwrap_or_else(|e| panic!("{program} is needed for this test: {e}"));
        let out = dir.join(input.file_name().expect("a file name"));
        let summary = rewrite_empty(&input, &out);
        let original = run(&input, args, &[]);
        assert!(original.status.success(), "{program} itself failed");
        assert_same_run(
            &original,
            &run(&out, args, &[]),
            &format!("{program} {summary:?}"),
        );
        check_program_headers(&input, &out);
    }
}

/// A program linked against `libshared`, built in `dir` with the library as `libshared.so`.
fn build_shared_user(dir: &Path) -> PathBuf {
    let lib = Mutatee::new("libshared").path(Variant::O2);
    let link_dir = dir.join("link");
    std::fs::create_dir_all(&link_dir).expect("link dir");
    std::fs::copy(&lib, link_dir.join("libshared.so")).expect("copy libshared");
    let source = dir.join("user.c");
    std::fs::write(
        &source,
        "#include <stdio.h>\n\
         int shared_add(int, int); int shared_hash(const char *); void shared_hello(void);\n\
         int main(void) { printf(\"%d %d\\n\", shared_add(2, 3), shared_hash(\"gsh\"));\n\
         shared_hello(); return 0; }\n",
    )
    .expect("write user.c");
    let exe = dir.join("user");
    let mut link = std::ffi::OsString::from("-L");
    link.push(&link_dir);
    run_tool(
        "gcc",
        &[
            source.into_os_string(),
            link,
            "-lshared".into(),
            "-o".into(),
            exe.clone().into_os_string(),
        ],
    );
    exe
}

#[test]
fn empty_rewrite_of_a_shared_library_still_loads() {
    let dir = out_dir("shared");
    let user = build_shared_user(&dir);
    let link_dir = dir.join("link");
    let rewritten_dir = dir.join("rewritten");
    std::fs::create_dir_all(&rewritten_dir).expect("dir");
    let input = link_dir.join("libshared.so");
    let summary = rewrite_empty(&input, &rewritten_dir.join("libshared.so"));
    let original = run(&user, &[], &[("LD_LIBRARY_PATH", &link_dir)]);
    assert!(original.status.success(), "the original library fails");
    let rewritten = run(&user, &[], &[("LD_LIBRARY_PATH", &rewritten_dir)]);
    assert_same_run(&original, &rewritten, &format!("libshared {summary:?}"));
    check_program_headers(&input, &rewritten_dir.join("libshared.so"));
}

/// The address of function `name` from `nm`.
fn function_addr(exe: &Path, name: &str) -> LinkAddr {
    truth::nm_defined(exe)
        .into_iter()
        .find(|s| s.name == name)
        .map(|s| LinkAddr(s.addr))
        .unwrap_or_else(|| panic!("no {name} in {}", exe.display()))
}

/// Instruments `func`'s entry in `input`: a `jmp rel32` to new code that writes `message` to
/// stdout with a raw `write` system call, runs the displaced instructions, and jumps back.
fn print_at_entry(input: &Path, out: &Path, func: &str, message: &[u8]) {
    let binary = Binary::open(input).unwrap_or_else(|e| panic!("{e}"));
    let entry = function_addr(input, func);
    let mut rw = Rewrite::new(&binary).expect("plan");
    let msg = rw.alloc_data_with(message, 8).expect("message");

    // Displace whole instructions covering the 5-byte jump; they must not branch.
    let bytes = binary.bytes_at(entry, 32).expect("code bytes");
    let mut decoder = Decoder::with_ip(64, bytes, entry.0, DecoderOptions::NONE);
    let mut displaced = Vec::new();
    let mut len = 0;
    while len < 5 {
        let ins = decoder.decode();
        assert!(!ins.is_invalid(), "undecodable code at {func}");
        assert_eq!(
            ins.flow_control(),
            FlowControl::Next,
            "{func} starts with a branch: {ins}"
        );
        len += ins.len();
        displaced.push(ins);
    }
    let back = entry.0 + len as u64;

    let mut code = vec![
        // Step over the red zone, then save what the system call clobbers.
        Instruction::with2(
            Code::Lea_r64_m,
            Register::RSP,
            MemoryOperand::with_base_displ(Register::RSP, -128),
        )
        .expect("lea"),
        Instruction::with(Code::Pushfq),
    ];
    let saved = [
        Register::RAX,
        Register::RDI,
        Register::RSI,
        Register::RDX,
        Register::RCX,
        Register::R11,
    ];
    for r in saved {
        code.push(Instruction::with1(Code::Push_r64, r).expect("push"));
    }
    code.extend([
        Instruction::with2(Code::Mov_r32_imm32, Register::EAX, 1u32).expect("mov"),
        Instruction::with2(Code::Mov_r32_imm32, Register::EDI, 1u32).expect("mov"),
        // RIP-relative: the block encoder turns the absolute address into a displacement.
        Instruction::with2(
            Code::Lea_r64_m,
            Register::RSI,
            MemoryOperand::with_base_displ(Register::RIP, msg.0 as i64),
        )
        .expect("lea"),
        Instruction::with2(Code::Mov_r32_imm32, Register::EDX, message.len() as u32).expect("mov"),
        Instruction::with(Code::Syscall),
    ]);
    for r in saved.into_iter().rev() {
        code.push(Instruction::with1(Code::Pop_r64, r).expect("pop"));
    }
    code.extend([
        Instruction::with(Code::Popfq),
        Instruction::with2(
            Code::Lea_r64_m,
            Register::RSP,
            MemoryOperand::with_base_displ(Register::RSP, 128),
        )
        .expect("lea"),
    ]);
    code.extend(displaced);
    code.push(Instruction::with_branch(Code::Jmp_rel32_64, back).expect("jmp"));

    // The address is final before encoding: that is what the allocation interface is for.
    let blob = rw.alloc_code(256, 16).expect("code");
    let encoded = BlockEncoder::encode(
        64,
        InstructionBlock::new(&code, blob.0),
        BlockEncoderOptions::NONE,
    )
    .expect("encode trampoline");
    assert!(encoded.code_buffer.len() <= 256);
    rw.write(blob, &encoded.code_buffer)
        .expect("write trampoline");

    let rel = (blob.0 as i64 - (entry.0 as i64 + 5)) as i32;
    let mut patch = vec![0xe9];
    patch.extend_from_slice(&rel.to_le_bytes());
    patch.resize(len, 0xcc);
    rw.write(entry, &patch).expect("patch entry");
    rw.save(out).expect("save");
}

#[test]
fn jump_to_new_code_prints_at_each_entry() {
    let dir = out_dir("insert");
    let m = Mutatee::new("basic");
    // `add` runs twice (the output says counter=2); the raw writes come before the buffered
    // printf output, which reaches the pipe at exit.
    let message = b"add entered\n";
    let expected = format!("add entered\nadd entered\n{}", m.expected_stdout());
    for v in [Variant::O0, Variant::Pie, Variant::NoPie] {
        let exe = m.path(v);
        let out = dir.join(m.file_name(v));
        print_at_entry(&exe, &out, "add", message);
        let result = run(&out, &[], &[]);
        assert!(
            result.status.success(),
            "{}: {:?} {}",
            out.display(),
            result.status,
            String::from_utf8_lossy(&result.stderr)
        );
        assert_eq!(
            String::from_utf8_lossy(&result.stdout),
            expected,
            "{}",
            out.display()
        );
        check_program_headers(&exe, &out);
    }
}

#[test]
fn output_in_a_missing_directory_is_a_clear_error() {
    let exe = Mutatee::new("basic").path(Variant::O2);
    let binary = Binary::open(&exe).expect("open");
    let mut rw = Rewrite::new(&binary).expect("plan");
    rw.alloc_code(1, 1).expect("code");
    let missing = Path::new("/nonexistent-gsh-dir/basic");
    let err = rw.save(missing).expect_err("a missing directory");
    let text = err.to_string();
    assert!(
        text.contains("/nonexistent-gsh-dir/basic") && text.contains("No such file"),
        "{text}"
    );
}

#[test]
fn truncated_and_foreign_files_are_refused_when_opened() {
    let dir = out_dir("bad");
    let exe = Mutatee::new("basic").path(Variant::O2);
    let bytes = std::fs::read(&exe).expect("read");
    let truncated = dir.join("truncated");
    std::fs::write(&truncated, &bytes[..bytes.len() / 3]).expect("write");
    assert!(Binary::open(&truncated).is_err());
    let mut foreign = bytes.clone();
    foreign[18] = 0xb7; // e_machine = EM_AARCH64
    let foreign_path = dir.join("foreign");
    std::fs::write(&foreign_path, &foreign).expect("write");
    assert!(Binary::open(&foreign_path).is_err());
}

/// cc1: a 30 MB executable; rewritten with nothing inserted, it must still compile C when gcc
/// runs it through `-B`.
#[test]
fn empty_rewrite_of_cc1_still_compiles() {
    let cc1 = run_tool("gcc", &["-print-prog-name=cc1"]).trim().to_owned();
    let cc1 = PathBuf::from(cc1);
    assert!(
        cc1.is_absolute() && cc1.is_file(),
        "gcc's cc1 not found: {}",
        cc1.display()
    );
    let dir = out_dir("cc1");
    let start = Instant::now();
    let summary = rewrite_empty(&cc1, &dir.join("cc1"));
    eprintln!("cc1 rewritten in {:?}: {summary:?}", start.elapsed());
    check_program_headers(&cc1, &dir.join("cc1"));
    let source = dir.join("tiny.c");
    std::fs::write(&source, "int main(void) { return 42; }\n").expect("write");
    let mut b = std::ffi::OsString::from("-B");
    b.push(&dir);
    let exe = dir.join("tiny");
    let out = Command::new("gcc")
        .arg(&b)
        .arg("-v")
        .arg(&source)
        .arg("-o")
        .arg(&exe)
        .output()
        .expect("gcc");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "gcc -B failed: {stderr}");
    // `-v` shows which cc1 ran: the rewritten one.
    assert!(
        stderr.contains(&format!("{}/cc1 ", dir.display())),
        "{stderr}"
    );
    assert_eq!(run(&exe, &[], &[]).status.code(), Some(42));
    let version = run(&dir.join("cc1"), &["--version"], &[]);
    assert!(version.status.success());
}

/// The rewriter sits on the ELF layer only: it must not reach into analysis or sessions (the
/// trampoline builders above it do that and hand it bytes).
#[test]
fn rewrite_imports_only_addr_and_elf() {
    let dir = gsh_tests::workspace_root().join("engine/src/rewrite");
    for entry in std::fs::read_dir(&dir).expect("engine/src/rewrite") {
        let path = entry.expect("entry").path();
        if path.file_name().is_some_and(|n| n == "tests.rs") {
            continue;
        }
        let text = std::fs::read_to_string(&path).expect("read");
        for (i, _) in text.match_indices("crate::") {
            let name: String = text[i + "crate::".len()..]
                .chars()
                .take_while(|c| c.is_alphanumeric() || *c == '_')
                .collect();
            assert!(
                ["addr", "elf", "Binary"].contains(&name.as_str()),
                "{} imports crate::{name}",
                path.display()
            );
        }
    }
}
