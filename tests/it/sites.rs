//! Patch sites never share bytes: every byte a site overwrites (its jump or `int3`, a pun's
//! pad, evicted instructions) or copies into its trampoline belongs to it alone, and padding
//! is only what no function's CFG calls code, whatever the CFG says.

use std::path::PathBuf;

use gsh_tests::{ensure_package, gsh_c, run_program, target_dir, Mutatee, Variant};

fn out_dir(name: &str) -> PathBuf {
    let dir = target_dir().join("instrumented").join(name);
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("create the output directory");
    dir
}

/// `short_entry`'s entry needs a pun, and the only `nop`s in reach are executed code of
/// `pick`'s far case: taken for padding, they became the pun's `jmp rel32`, and `pick(1)` ran
/// `short_entry`'s trampoline instead (it returned `short_entry`'s value and counted it).
#[test]
fn a_pun_never_lands_on_code_another_function_runs() {
    let m = Mutatee::new("overlap");
    for v in [Variant::O2, Variant::NoPie, Variant::O0] {
        let dir = out_dir(&format!("overlap-{}", m.file_name(v)));
        let out = dir.join("overlap");
        let o = gsh_c(
            &format!(
                "declare long n; declare long x; at short_entry entry {{ n++; }}; \
                 at pick exit {{ x++; }}; \
                 at main exit {{ printf(\"gsh: n=%ld x=%ld\\n\", n, x); }}; save {}",
                out.display()
            ),
            &m.path(v),
        );
        o.assert_code(0);
        let run = run_program(&out, &[], &[]);
        assert_eq!(run.status.code(), Some(0), "{v:?}: {run:?}");
        // short_entry: 5 calls in the loop, 2 in the printf; pick: 5 + 4.
        let want = format!("{}gsh: n=7 x=9\n", m.expected_stdout());
        assert_eq!(String::from_utf8_lossy(&run.stdout), want, "{v:?}");
    }
}

/// Debian's sqlite3 3.40: a jump table read past its end gives `0xda70` a "tail call" at
/// `0xc82f`, whose instruction runs into the function at `0xc830`. Planned with
/// `0xc830`'s entry, the trap there and the entry's pun shared bytes and `save` failed with
/// "the code at 0xc82f differs from the file". The doubtful point is skipped and said so;
/// the rest is saved and runs.
#[test]
fn sqlite3s_trap_and_pun_do_not_share_bytes() {
    ensure_package("sqlite3");
    let version = std::process::Command::new("/usr/bin/sqlite3")
        .arg("--version")
        .output()
        .expect("run sqlite3 --version");
    let version = String::from_utf8_lossy(&version.stdout);
    if !version.starts_with("3.40.1 2022-12-28") {
        eprintln!("SKIPPED: the addresses are Debian 12's sqlite3 3.40.1; this one is {version}");
        return;
    }
    let dir = out_dir("sqlite3-overlap");
    let out = dir.join("sqlite3");
    let o = gsh_c(
        &format!(
            "declare long n; at 0xc830 entry {{ n++; }}; at 0xda70 exit {{ n++; }}; save {}",
            out.display()
        ),
        std::path::Path::new("/usr/bin/sqlite3"),
    );
    o.assert_code(0);
    let run = std::process::Command::new(&out)
        .args([":memory:", "select 6*7;"])
        .output()
        .expect("run the saved sqlite3");
    assert_eq!(String::from_utf8_lossy(&run.stdout), "42\n", "{run:?}");
}
