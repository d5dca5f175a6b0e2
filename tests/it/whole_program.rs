//! Whole programs with a counter at every function's entry and exit (issue 12's fast
//! subset; `cargo xtask whole-program` runs the full set): Debian's sqlite3 and bash, saved
//! by gsh, run a small workload exactly as the originals do, and no function's exits
//! outnumber its entries (except, reported, where an unresolved indirect `jmp` is taken for
//! an exit: the analysis half of issue 12).

use std::path::{Path, PathBuf};

use gsh_tests::whole::{balance, run_timed, save_counted, Saved, BASH, SQL};
use gsh_tests::{ensure_package, target_dir};

fn out_dir(name: &str) -> PathBuf {
    let dir = target_dir().join("whole-program-test").join(name);
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("create the output directory");
    dir
}

/// Runs the original and the copy on `input`, checks they agree and the counters balance.
fn check(saved: &Saved, original: &Path, args: &[&str], input: &str) {
    let (want, _) = run_timed(original, args, input.as_bytes());
    let (got, _) = run_timed(&saved.out, args, input.as_bytes());
    assert_eq!(
        String::from_utf8_lossy(&got.stdout),
        String::from_utf8_lossy(&want.stdout),
        "stdout; stderr:\n{}",
        String::from_utf8_lossy(&got.stderr)
    );
    assert_eq!(
        String::from_utf8_lossy(&got.stderr),
        String::from_utf8_lossy(&want.stderr),
        "stderr"
    );
    assert_eq!(got.status.code(), want.status.code());
    let b = balance(saved);
    assert!(b.called > 50, "{b:?}");
    assert!(
        b.extra_exits.is_empty(),
        "exits without entries: {:?}",
        b.extra_exits
    );
    eprintln!(
        "{}: {} functions called, {} balanced, {} left open: {:?}",
        original.display(),
        b.called,
        b.balanced,
        b.open.len(),
        b.open
    );
    if !b.extra_exits_indirect.is_empty() {
        eprintln!(
            "KNOWN: exits outnumber entries where an unresolved indirect jmp counts as an exit \
             (issue 12's analysis half): {:?}",
            b.extra_exits_indirect
        );
    }
}

#[test]
fn sqlite3_counted_everywhere_runs_sql_identically() {
    ensure_package("sqlite3");
    let original = Path::new("/usr/bin/sqlite3");
    let dir = out_dir("sqlite3");
    let saved = save_counted(original, &dir.join("sqlite3"));
    check(&saved, original, &[":memory:"], SQL);
}

#[test]
fn bash_counted_everywhere_runs_an_interactive_session_identically() {
    let original = Path::new("/bin/bash");
    let dir = out_dir("bash");
    // Named bash, so the prompts match.
    let saved = save_counted(original, &dir.join("bash"));
    check(&saved, original, &["--norc", "--noprofile", "-i"], BASH);
}
