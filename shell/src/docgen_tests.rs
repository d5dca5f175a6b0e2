//! Keeps the checked-in generated files (man page, completions) in step with the command
//! table: a stale file fails the test, and `GSH_BLESS=1` rewrites it (rust-analyzer's style).

use std::path::PathBuf;

use super::*;

/// Compares `generated` with the file at `rel` (from the workspace root), or rewrites it when
/// `GSH_BLESS=1`.
fn check(rel: &str, generated: &str) {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("..")
        .join(rel);
    let bless = std::env::var_os("GSH_BLESS").is_some_and(|v| v == "1");
    let current = std::fs::read_to_string(&path).unwrap_or_default();
    if current == generated {
        return;
    }
    if bless {
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir).expect("create the directory of a generated file");
        }
        std::fs::write(&path, generated).expect("write a generated file");
        eprintln!("updated {rel}");
        return;
    }
    panic!(
        "{rel} is stale: it no longer matches what shell/src/docgen.rs generates from the \
         command table.\nRegenerate it with:\n\n    GSH_BLESS=1 cargo test -p gsh docgen\n"
    );
}

#[test]
fn docgen_man_page_is_fresh() {
    check("man/gsh.1", &man_page());
}

#[test]
fn docgen_bash_completion_is_fresh() {
    check("completions/gsh.bash", &bash());
}

#[test]
fn docgen_zsh_completion_is_fresh() {
    check("completions/_gsh", &zsh());
}

#[test]
fn docgen_fish_completion_is_fresh() {
    check("completions/gsh.fish", &fish());
}

#[test]
fn man_page_lists_every_command_and_option() {
    let man = man_page();
    for spec in COMMANDS {
        assert!(man.contains(&roff(spec.name)), "{} missing", spec.name);
    }
    for flag in [
        "\\-b",
        "\\-c",
        "\\-p",
        "\\-\\-json",
        "\\-\\-help",
        "\\-\\-version",
    ] {
        assert!(man.contains(flag), "{flag} missing");
    }
}

#[test]
fn completions_know_the_flags() {
    for text in [bash(), zsh(), fish()] {
        assert!(text.contains("json"), "{text}");
        assert!(text.contains("version"), "{text}");
    }
    assert!(bash().contains("-b) COMPREPLY=($(compgen -f"));
}

#[test]
fn help_mentions_every_command() {
    let h = help_overview();
    for spec in COMMANDS {
        assert!(h.contains(spec.name), "{} missing from help", spec.name);
        assert!(help_command(spec).contains(spec.summary));
    }
}

#[test]
fn wrap_keeps_words_whole() {
    assert_eq!(wrap("aa bb cc", 5), vec!["aa bb", "cc"]);
    assert_eq!(wrap("", 5), Vec::<String>::new());
    assert_eq!(wrap("longword x", 3), vec!["longword", "x"]);
}
