//! The layer rules of ARCHITECTURE.md, checked by reading each engine module's `use crate::`
//! lines and the shell's external crate uses.

use std::path::{Path, PathBuf};

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// Every `.rs` file under `dir`.
fn sources(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for entry in std::fs::read_dir(&d).unwrap_or_else(|e| panic!("{}: {e}", d.display())) {
            let p = entry.unwrap().path();
            if p.is_dir() {
                stack.push(p);
            } else if p.extension().is_some_and(|e| e == "rs") {
                out.push(p);
            }
        }
    }
    out
}

/// The engine modules a file imports through `crate::` paths.
fn crate_imports(file: &Path) -> Vec<String> {
    let text: String = std::fs::read_to_string(file)
        .unwrap()
        .lines()
        .filter(|l| !l.trim_start().starts_with("//"))
        .collect::<Vec<_>>()
        .join("\n");
    let mut out = Vec::new();
    for (i, _) in text.match_indices("crate::") {
        let rest = &text[i + "crate::".len()..];
        let name: String = rest
            .chars()
            .take_while(|c| c.is_alphanumeric() || *c == '_')
            .collect();
        if !name.is_empty() {
            out.push(name);
        }
    }
    out
}

fn check_layer(module: &str, forbidden: &[&str]) {
    let engine = root().join("engine/src");
    let dir = engine.join(module);
    let files = if dir.is_dir() {
        sources(&dir)
    } else {
        vec![engine.join(format!("{module}.rs"))]
    };
    assert!(!files.is_empty(), "no sources for {module}");
    // Unit tests may build whole sessions; the rules bind the code they test.
    let is_test = |f: &Path| {
        let name = f.file_name().unwrap().to_string_lossy();
        name == "tests.rs" || name.ends_with("_tests.rs")
    };
    for f in files.into_iter().filter(|f| !is_test(f)) {
        for import in crate_imports(&f) {
            assert!(
                !forbidden.contains(&import.as_str()),
                "{} imports crate::{import}, which ARCHITECTURE.md's layer rules forbid for {module}",
                f.display()
            );
        }
    }
}

#[test]
fn elf_and_addr_import_nothing_above_them() {
    let above = [
        "symbols", "dwarf", "cfg", "analysis", "session", "disasm", "demangle",
    ];
    check_layer("elf", &above);
    check_layer("addr", &above);
}

#[test]
fn symbols_import_only_elf_addr_demangle_error() {
    check_layer(
        "symbols",
        &["dwarf", "cfg", "analysis", "session", "disasm"],
    );
}

#[test]
fn dwarf_does_not_import_analysis_or_session() {
    check_layer("dwarf", &["symbols", "cfg", "analysis", "session"]);
}

#[test]
fn analysis_does_not_import_session_or_dwarf() {
    check_layer("cfg", &["session", "dwarf"]);
    check_layer("analysis", &["session", "dwarf"]);
}

#[test]
fn shell_reaches_binaries_only_through_the_engine() {
    for f in sources(&root().join("shell/src")) {
        let text = std::fs::read_to_string(&f).unwrap();
        for krate in ["object::", "gimli::", "iced_x86::", "addr2line::"] {
            assert!(
                !text.contains(krate),
                "{} uses {krate} directly; go through the engine",
                f.display()
            );
        }
    }
}

#[test]
fn snippet_compiler_sees_the_world_only_through_its_env() {
    check_layer(
        "snippet",
        &["session", "cfg", "analysis", "dwarf", "symbols"],
    );
}

#[test]
fn the_search_knows_programs_only_through_its_lab() {
    check_layer(
        "consult",
        &[
            "elf",
            "symbols",
            "dwarf",
            "cfg",
            "analysis",
            "session",
            "disasm",
            "snippet",
            "patch",
            "point",
            "instrument",
            "process",
            "rewrite",
            "unwind",
            "callee",
        ],
    );
}
