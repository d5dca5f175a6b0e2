//! The C programs the benchmarks run, built with gcc at run time.

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{bail, Context as _, Result};

/// Writes `source` to `dir/NAME.c` and builds it with `gcc -O2 -pthread` into `dir/NAME`.
pub fn build(dir: &Path, name: &str, source: &str) -> Result<PathBuf> {
    std::fs::create_dir_all(dir)?;
    let src = dir.join(format!("{name}.c"));
    let exe = dir.join(name);
    std::fs::write(&src, source)?;
    let ok = Command::new("gcc")
        .args(["-O2", "-pthread", "-o"])
        .arg(&exe)
        .arg(&src)
        .status()
        .context("running gcc")?
        .success();
    if !ok {
        bail!("gcc failed on {}", src.display());
    }
    Ok(exe)
}
