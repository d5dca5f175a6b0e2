//! The trap tactic in saved files: a point no jump can reach gets an `int3`, and the output
//! carries gsh's own SIGTRAP handler, installed from `e_entry` (executables) or `DT_INIT`
//! (libraries). The mutatees `traps` and `libtraps` have a 1-byte function packed between two
//! others, which only a trap reaches.

use std::os::unix::process::ExitStatusExt as _;
use std::path::{Path, PathBuf};

use gsh_tests::{gsh_c, run_program, run_tool, target_dir, Mutatee, Variant};

fn out_dir(name: &str) -> PathBuf {
    let dir = target_dir().join("instrumented").join(name);
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("create the output directory");
    dir
}

/// Runs gsh's `commands` then `save OUT`; returns the `Tactics` line of the report.
fn save(commands: &str, file: &Path, out: &Path) -> String {
    let o = gsh_c(&format!("{commands}; save {}", out.display()), file);
    o.assert_code(0);
    o.stdout
        .lines()
        .find_map(|l| l.trim().strip_prefix("Tactics"))
        .unwrap_or_else(|| panic!("no Tactics line in {}", o.stdout))
        .trim()
        .to_owned()
}

const TINY: &str = "declare long gsh_in; declare long gsh_out; declare long gsh_a; \
    declare long gsh_b; at tiny_ret entry { gsh_in++; }; at tiny_ret exit { gsh_out += 2; }; \
    at tiny_a entry { gsh_a++; }; at tiny_b entry { gsh_b++; }; \
    at main exit { printf(\"gsh: in=%ld out=%ld a=%ld b=%ld\\n\", gsh_in, gsh_out, gsh_a, gsh_b); }";

#[test]
fn a_point_only_a_trap_reaches_counts_exactly_in_pie_and_non_pie() {
    let m = Mutatee::new("traps");
    for v in [Variant::Pie, Variant::NoPie, Variant::O0] {
        let dir = out_dir(&format!("traps-{}", m.file_name(v)));
        let out = dir.join("traps");
        let tactics = save(TINY, &m.path(v), &out);
        // tiny_ret's entry and exit are one instruction, one site: one int3; tiny_a and
        // tiny_b one each, so the handler's table has three entries to search. main's exit
        // gets a jump of some kind.
        assert!(tactics.ends_with("trap 3"), "{v:?}: {tactics}");
        assert_eq!(tactics.matches(',').count(), 1, "{v:?}: {tactics}");
        let run = run_program(&out, &[], &[]);
        assert_eq!(run.status.code(), Some(0), "{v:?}: {run:?}");
        // work(7) and work(3) call tiny_ret 10 times, tiny_a 4 + 2, tiny_b 3 + 1.
        let want = format!("{}gsh: in=10 out=20 a=6 b=4\n", m.expected_stdout());
        assert_eq!(String::from_utf8_lossy(&run.stdout), want, "{v:?}");
    }
}

#[test]
fn a_genuine_int3_still_ends_the_rewritten_program_with_sigtrap() {
    let m = Mutatee::new("traps");
    for v in [Variant::Pie, Variant::NoPie] {
        let dir = out_dir(&format!("genuine-int3-{}", m.file_name(v)));
        let out = dir.join("traps");
        let tactics = save(TINY, &m.path(v), &out);
        assert!(tactics.contains("trap 3"), "{tactics}");
        for exe in [m.path(v), out] {
            let run = run_program(&exe, &["int3"], &[]);
            assert_eq!(run.status.signal(), Some(5), "{}: {run:?}", exe.display());
            assert_eq!(String::from_utf8_lossy(&run.stdout), "about to trap\n");
        }
    }
}

#[test]
fn a_save_without_traps_keeps_the_entry_point() {
    let m = Mutatee::new("traps");
    let original = m.path(Variant::Pie);
    let dir = out_dir("no-traps");
    let out = dir.join("traps");
    let tactics = save(
        "declare long gsh_n; at work entry { gsh_n++; }",
        &original,
        &out,
    );
    assert!(!tactics.contains("trap"), "{tactics}");
    let entry = |p: &Path| std::fs::read(p).expect("read the ELF")[24..32].to_vec();
    assert_eq!(entry(&out), entry(&original));
    let run = run_program(&out, &[], &[]);
    assert_eq!(String::from_utf8_lossy(&run.stdout), m.expected_stdout());
}

/// Builds libtraps with `extra` gcc flags into `dir/link`, a user program against it, saves
/// the library instrumented into `dir/saved`, and runs the user with each.
fn shared_library_case(name: &str, extra: &[&str]) {
    let dir = out_dir(name);
    let link_dir = dir.join("link");
    let saved_dir = dir.join("saved");
    std::fs::create_dir_all(&link_dir).expect("link dir");
    std::fs::create_dir_all(&saved_dir).expect("saved dir");
    let lib = link_dir.join("libtraps.so");
    let source = Mutatee::new("libtraps").source().to_owned();
    let mut args: Vec<std::ffi::OsString> = vec!["-O2".into(), "-shared".into(), "-fPIC".into()];
    args.extend(extra.iter().map(Into::into));
    args.extend([source.into(), "-o".into(), lib.clone().into()]);
    run_tool("gcc", &args);
    let user_c = dir.join("user.c");
    std::fs::write(
        &user_c,
        "int lib_work(int); void lib_report(int);\n\
         int main(void) { lib_report(lib_work(5)); lib_report(lib_work(2)); return 0; }\n",
    )
    .expect("write user.c");
    let user = dir.join("user");
    let mut link = std::ffi::OsString::from("-L");
    link.push(&link_dir);
    run_tool(
        "gcc",
        &[
            user_c.into_os_string(),
            link,
            "-ltraps".into(),
            "-o".into(),
            user.clone().into_os_string(),
        ],
    );
    let original = run_program(&user, &[], &[("LD_LIBRARY_PATH", &link_dir)]);
    assert_eq!(
        String::from_utf8_lossy(&original.stdout),
        "lib_work gave 15\nlib_work gave 6\n"
    );
    let tactics = save(
        "declare long gsh_n; at lib_tiny entry { gsh_n++; }; \
         at lib_report entry { printf(\"gsh: tiny=%ld\\n\", gsh_n); }",
        &lib,
        &saved_dir.join("libtraps.so"),
    );
    assert!(tactics.ends_with("trap 1"), "{tactics}");
    let saved = run_program(&user, &[], &[("LD_LIBRARY_PATH", &saved_dir)]);
    assert_eq!(saved.status.code(), Some(0), "{saved:?}");
    assert_eq!(
        String::from_utf8_lossy(&saved.stdout),
        "gsh: tiny=5\nlib_work gave 15\ngsh: tiny=7\nlib_work gave 6\n"
    );
}

#[test]
fn a_shared_library_chains_its_dt_init_to_install_the_handler() {
    shared_library_case("libtraps-init", &[]);
}

#[test]
fn a_shared_library_without_dt_init_gets_one_in_a_spare_dynamic_entry() {
    // Without crti.o there is no _init, so no DT_INIT; GNU ld leaves spare DT_NULL entries.
    shared_library_case("libtraps-noinit", &["-nostartfiles"]);
}

/// A program that installs its own SIGTRAP handler and blocks SIGTRAP, as bash does: gsh's
/// handler stays first (the saved file's `sigaction`, `signal`, `sigprocmask` and
/// `pthread_sigmask` calls go through gsh's wrappers), the program's handler still gets the
/// SIGTRAPs that are not gsh's, and every trap counts, also inside a handler whose mask
/// blocks everything. Before, the program's handler replaced gsh's and returned into the
/// byte after the `int3`.
#[test]
fn traps_survive_a_program_that_installs_and_blocks_sigtrap() {
    let m = Mutatee::new("sigtrap");
    for v in [Variant::Pie, Variant::NoPie] {
        let dir = out_dir(&format!("sigtrap-{}", m.file_name(v)));
        let out = dir.join("sigtrap");
        let o = gsh_c(
            &format!(
                "declare long n; at tiny entry {{ n++; }}; \
                 at main exit {{ printf(\"gsh: n=%ld\\n\", n); }}; save {}",
                out.display()
            ),
            &m.path(v),
        );
        o.assert_code(0);
        assert!(o.stdout.contains("trap"), "{v:?}: {}", o.stdout);
        let signals = o
            .stdout
            .lines()
            .find_map(|l| l.trim().strip_prefix("Signals"))
            .unwrap_or_else(|| panic!("{v:?}: no Signals line in {}", o.stdout));
        for f in ["sigaction", "signal", "sigprocmask", "pthread_sigmask"] {
            assert!(
                signals.split(", ").any(|s| s.trim() == f),
                "{v:?}: {f} in {signals}"
            );
        }
        let run = run_program(&out, &[], &[]);
        assert_eq!(run.status.code(), Some(0), "{v:?}: {run:?}");
        // tiny runs 4 + 3 + 2 times from work, once from the SIGUSR1 handler, once after
        // the ignored SIGTRAP.
        let want = format!("{}gsh: n=11\n", m.expected_stdout());
        assert_eq!(String::from_utf8_lossy(&run.stdout), want, "{v:?}");
    }
}

/// Every trap says why no jump fitted, in `show points` (with a count in the title) and in
/// `save`'s notes.
#[test]
fn traps_say_why_no_jump_fitted() {
    let m = Mutatee::new("traps");
    let o = gsh_c("show points tiny_a", &m.path(Variant::Pie));
    o.assert_code(0);
    assert!(o.stdout.contains("would need a trap"), "{}", o.stdout);
    let why = "block too small for a 5-byte jump (1 byte(s): 0 before the point, 1 from it)";
    assert!(o.stdout.contains(why), "{}", o.stdout);
    let dir = out_dir("traps-why");
    let o = gsh_c(
        &format!(
            "declare long n; at tiny_a entry {{ n++; }}; save {}",
            dir.join("traps").display()
        ),
        &m.path(Variant::Pie),
    );
    o.assert_code(0);
    let note = o
        .stdout
        .lines()
        .skip_while(|l| !l.contains("notes"))
        .find(|l| l.contains(" trap "))
        .unwrap_or_else(|| panic!("no trap note: {}", o.stdout));
    assert!(note.contains(why), "{note}");
}
