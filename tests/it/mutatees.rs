//! The mutatees themselves: every variant builds and prints its known output, and each variant
//! has the shape its name promises (stripped has no `.symtab`, the debuglink build points at
//! its debug file).

use std::process::{Command, Stdio};

use gsh_tests::{truth, Mutatee, Variant};

#[test]
fn every_variant_runs_and_prints_its_known_output() {
    for m in Mutatee::all() {
        let expected = m.expected_stdout();
        for v in Variant::ALL {
            let exe = m.path(v);
            let out = Command::new(&exe)
                .stdin(Stdio::null())
                .output()
                .unwrap_or_else(|e| panic!("cannot run {}: {e}", exe.display()));
            assert!(
                out.status.success(),
                "{} exited with {}",
                exe.display(),
                out.status
            );
            assert_eq!(
                String::from_utf8_lossy(&out.stdout),
                expected,
                "{} printed something else",
                exe.display()
            );
        }
    }
}

#[test]
fn stripped_variant_has_no_symtab_and_others_do() {
    for m in Mutatee::all() {
        assert!(
            !truth::has_symtab(&m.path(Variant::Stripped)),
            "{}",
            m.name()
        );
        for v in Variant::WITH_SYMTAB {
            assert!(truth::has_symtab(&m.path(v)), "{} {v:?}", m.name());
        }
    }
}

#[test]
fn noreturn_error_paths_exit_as_designed() {
    let exe = Mutatee::new("noreturn").path(Variant::O2);
    let run = |arg: &str| {
        Command::new(&exe)
            .arg(arg)
            .stdin(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .unwrap_or_else(|e| panic!("cannot run {}: {e}", exe.display()))
    };
    assert_eq!(run("exit").code(), Some(3));
    // abort() ends the process with SIGABRT, so there is no exit code.
    assert_eq!(run("abort").code(), None);
}
