//! Where things are: the workspace, its target directory, the mutatee sources and scripts.

use std::path::{Path, PathBuf};

/// The workspace root (the directory holding the virtual manifest).
pub fn workspace_root() -> PathBuf {
    // This crate lives in `<root>/tests`; its manifest directory is fixed at compile time.
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("the tests crate sits inside the workspace")
        .to_owned()
}

/// The directory holding the mutatee sources, `tests/mutatees/`.
pub fn mutatee_source_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("mutatees")
}

/// The directory holding the script tests, `tests/scripts/`.
pub fn scripts_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts")
}

/// Cargo's target directory: `CARGO_TARGET_DIR` when set, else the nearest ancestor of the
/// running executable that carries Cargo's `CACHEDIR.TAG` (test binaries live in
/// `target/debug/deps/`, xtask in `target/debug/`), else `<workspace>/target`.
pub fn target_dir() -> PathBuf {
    if let Some(dir) = std::env::var_os("CARGO_TARGET_DIR") {
        let dir = PathBuf::from(dir);
        return if dir.is_absolute() {
            dir
        } else {
            workspace_root().join(dir)
        };
    }
    if let Ok(exe) = std::env::current_exe() {
        if let Some(dir) = exe
            .ancestors()
            .skip(1)
            .find(|d| d.join("CACHEDIR.TAG").is_file())
        {
            return dir.to_owned();
        }
    }
    workspace_root().join("target")
}
