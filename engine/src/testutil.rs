//! Helpers for the engine's unit tests: compile a C or C++ snippet with the machine's gcc into
//! a fresh temporary directory and open it.

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::session::Session;

/// Compiles `source` (C, or C++ when `cxx`) with `flags` and returns the output's path. Panics
/// with the compiler's message on failure: a test that cannot build its input must fail loudly.
pub fn compile(name: &str, source: &str, cxx: bool, flags: &[&str]) -> PathBuf {
    let dir = std::env::temp_dir().join(format!(
        "gsh-engine-test-{}-{name}-{}",
        std::process::id(),
        flags.join("").replace(['-', ' ', '='], "")
    ));
    std::fs::create_dir_all(&dir).expect("temp dir");
    // Tests run in parallel and several build the same program: each compiles under a name of
    // its own and renames the result into place, so no test opens a file another compiler is
    // still writing (`NotElf`, once, in CI).
    static BUILDS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let n = BUILDS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let ext = if cxx { "cpp" } else { "c" };
    let src = dir.join(format!("{name}.{n}.{ext}"));
    std::fs::write(&src, source).expect("write source");
    let building = dir.join(format!("{name}.{n}.out"));
    let compiler = if cxx { "g++" } else { "gcc" };
    let result = Command::new(compiler)
        .args(flags)
        .arg("-o")
        .arg(&building)
        .arg(&src)
        .output()
        .unwrap_or_else(|e| panic!("cannot run {compiler}: {e}"));
    assert!(
        result.status.success(),
        "{compiler} {flags:?} failed:\n{}",
        String::from_utf8_lossy(&result.stderr)
    );
    let out = dir.join(name);
    std::fs::rename(&building, &out).expect("rename the compiled test binary into place");
    out
}

/// Opens `path` in a fresh session.
pub fn open(path: &Path) -> Session {
    let mut s = Session::new();
    s.open(path).expect("open compiled test binary");
    s
}
