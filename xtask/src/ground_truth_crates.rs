//! `ground-truth-crates [gcc|clang...]`: real C nobody here wrote, graded like the corpus of
//! [`gsh_tests::ground_truth`]. The sources come from crates that ship them: the SQLite
//! amalgamation (`libsqlite3-sys`), Lua 5.4 (`lua-src`), zstd (`zstd-sys`) and zlib
//! (`libz-sys`). `cargo fetch` brings them into cargo's registry through a throwaway manifest
//! under `target/`, and `cargo metadata` says where they are. Each library is linked whole
//! into a program with an empty `main` (every function stays: objects given on the command
//! line are linked whole), at -O0 and -O2, PIE and not, with each compiler.

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{bail, Context, Result};
use gsh_tests::ground_truth::{grade, Build};

/// The crates, pinned so the figures are reproducible.
const CRATES: &[(&str, &str)] = &[
    ("libsqlite3-sys", "=0.30.1"),
    ("lua-src", "=547.1.0"),
    ("zstd-sys", "=2.1.3"),
    ("libz-sys", "=1.1.31"),
];

/// One program built from a crate's C sources.
struct Program {
    name: &'static str,
    krate: &'static str,
    /// Directories under the crate whose `.c` files are compiled.
    dirs: &'static [&'static str],
    /// Include directories under the crate.
    includes: &'static [&'static str],
    flags: &'static [&'static str],
}

const PROGRAMS: &[Program] = &[
    Program {
        name: "sqlite3",
        krate: "libsqlite3-sys",
        dirs: &[],
        includes: &["sqlite3"],
        flags: &["-DSQLITE_THREADSAFE=0", "-lm"],
    },
    Program {
        name: "lua",
        krate: "lua-src",
        dirs: &["lua-5.4.7"],
        includes: &["lua-5.4.7"],
        flags: &["-DLUA_USE_LINUX", "-lm"],
    },
    Program {
        name: "zstd",
        krate: "zstd-sys",
        dirs: &[
            "zstd/lib/common",
            "zstd/lib/compress",
            "zstd/lib/decompress",
        ],
        includes: &["zstd/lib", "zstd/lib/common"],
        flags: &["-DZSTD_DISABLE_ASM"],
    },
    Program {
        name: "zlib",
        krate: "libz-sys",
        dirs: &["src/zlib"],
        includes: &["src/zlib"],
        flags: &[],
    },
];

pub fn run(args: &[String]) -> Result<()> {
    let mut compilers = Vec::new();
    for a in args {
        compilers.push(match a.as_str() {
            "gcc" => "gcc",
            "clang" => "clang",
            other => {
                bail!("unknown compiler `{other}`; usage: ground-truth-crates [gcc|clang...]")
            }
        });
    }
    if compilers.is_empty() {
        compilers = vec!["gcc", "clang"];
    }
    let dir = gsh_tests::target_dir().join("ground-truth-crates");
    let sources = fetch(&dir.join("fetch"))?;
    let stub = dir.join("stub_main.c");
    std::fs::create_dir_all(&dir)?;
    std::fs::write(&stub, "int main(void) { return 0; }\n")?;
    println!(
        "| program | build | tables | exact | invented | starts | found | inside | cold parts | attached | invented |"
    );
    println!("|---|---|---|---|---|---|---|---|---|---|---|");
    let mut problems = Vec::new();
    for compiler in compilers {
        for opt in ["-O0", "-O2"] {
            for pie in [true, false] {
                let build = Build { compiler, opt, pie };
                for p in PROGRAMS {
                    let root = sources
                        .iter()
                        .find(|(k, _)| k == p.krate)
                        .map(|(_, r)| r)
                        .with_context(|| format!("{} was not fetched", p.krate))?;
                    let mut files = c_files(root, p)?;
                    files.push(stub.clone());
                    let mut flags: Vec<String> = vec!["-w".to_owned()];
                    flags.extend(
                        p.includes
                            .iter()
                            .map(|i| format!("-I{}", root.join(i).display())),
                    );
                    flags.extend(p.flags.iter().map(|f| (*f).to_owned()));
                    let path = build
                        .compile_files(p.name, &files, &flags, &dir)
                        .map_err(anyhow::Error::msg)?;
                    let g = grade(&path).map_err(anyhow::Error::msg)?;
                    println!("| {} | {} | {} |", p.name, build.label(), g.cells());
                    problems.extend(
                        g.problems
                            .iter()
                            .map(|q| format!("{} {}: {q}", build.label(), p.name)),
                    );
                }
            }
        }
    }
    for p in problems {
        println!("{p}");
    }
    Ok(())
}

/// The `.c` files of `p` in the crate at `root`: the amalgamation alone for SQLite (its other
/// file is for WASI), every file of the listed directories otherwise.
fn c_files(root: &Path, p: &Program) -> Result<Vec<PathBuf>> {
    if p.dirs.is_empty() {
        return Ok(vec![root.join("sqlite3/sqlite3.c")]);
    }
    let mut out = Vec::new();
    for d in p.dirs {
        let dir = root.join(d);
        for entry in std::fs::read_dir(&dir).with_context(|| format!("{}", dir.display()))? {
            let path = entry?.path();
            if path.extension().is_some_and(|e| e == "c") {
                out.push(path);
            }
        }
    }
    out.sort();
    Ok(out)
}

/// Fetches [`CRATES`] with a throwaway manifest in `dir`; gives each crate's source root.
fn fetch(dir: &Path) -> Result<Vec<(String, PathBuf)>> {
    std::fs::create_dir_all(dir.join("src"))?;
    let mut manifest = String::from(
        "[package]\nname = \"gsh-ground-truth-sources\"\nversion = \"0.0.0\"\nedition = \"2021\"\n\n\
         [workspace]\n\n[dependencies]\n",
    );
    for (name, version) in CRATES {
        manifest.push_str(&format!("{name} = \"{version}\"\n"));
    }
    std::fs::write(dir.join("Cargo.toml"), manifest)?;
    std::fs::write(dir.join("src/main.rs"), "fn main() {}\n")?;
    let status = Command::new("cargo")
        .arg("fetch")
        .current_dir(dir)
        .status()
        .context("cannot run cargo fetch")?;
    if !status.success() {
        bail!("cargo fetch failed in {}", dir.display());
    }
    let out = Command::new("cargo")
        .args(["metadata", "--format-version", "1"])
        .current_dir(dir)
        .output()
        .context("cannot run cargo metadata")?;
    if !out.status.success() {
        bail!(
            "cargo metadata failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let meta: serde_json::Value = serde_json::from_slice(&out.stdout)?;
    let mut roots = Vec::new();
    for pkg in meta["packages"].as_array().into_iter().flatten() {
        let name = pkg["name"].as_str().unwrap_or_default();
        if CRATES.iter().any(|(c, _)| *c == name) {
            let manifest = PathBuf::from(pkg["manifest_path"].as_str().unwrap_or_default());
            if let Some(root) = manifest.parent() {
                roots.push((name.to_owned(), root.to_owned()));
            }
        }
    }
    Ok(roots)
}
