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
    let ext = if cxx { "cpp" } else { "c" };
    let src = dir.join(format!("{name}.{ext}"));
    std::fs::write(&src, source).expect("write source");
    let out = dir.join(name);
    let compiler = if cxx { "g++" } else { "gcc" };
    let result = Command::new(compiler)
        .args(flags)
        .arg("-o")
        .arg(&out)
        .arg(&src)
        .output()
        .unwrap_or_else(|e| panic!("cannot run {compiler}: {e}"));
    assert!(
        result.status.success(),
        "{compiler} {flags:?} failed:\n{}",
        String::from_utf8_lossy(&result.stderr)
    );
    out
}

/// Opens `path` in a fresh session.
pub fn open(path: &Path) -> Session {
    let mut s = Session::new();
    s.open(path).expect("open compiled test binary");
    s
}
