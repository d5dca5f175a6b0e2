//! Tests for prompt completion: which words are offered where.

use super::*;

fn words(before: &str, functions: &[&str]) -> Vec<String> {
    let functions: Vec<String> = functions.iter().map(|s| s.to_string()).collect();
    match complete_words(before, &functions) {
        Completion::Words(start, w) => {
            assert!(start <= before.len());
            w
        }
        Completion::Files => vec!["<files>".into()],
    }
}

#[test]
fn completes_command_names() {
    assert_eq!(words("sh", &[]), vec!["show "]);
    assert!(words("", &[]).contains(&"whatis ".to_owned()));
    assert_eq!(words("echo a; wha", &[]), vec!["whatis "]);
}

#[test]
fn completes_subcommands() {
    assert_eq!(words("show f", &[]), vec!["funcs ", "functions "]);
    assert_eq!(words("find ", &[]).len(), 4);
}

#[test]
fn completes_files_for_open_and_source() {
    assert_eq!(words("open /bi", &[]), vec!["<files>"]);
    assert_eq!(words("source ", &[]), vec!["<files>"]);
}

#[test]
fn completes_function_names_after_quotes() {
    let f = ["main", "malloc", "malloc_trim", "memcpy"];
    assert_eq!(words("disas mal", &f), vec!["malloc", "malloc_trim"]);
    assert_eq!(
        words("whatis 'ma", &f),
        vec!["main", "malloc", "malloc_trim"]
    );
    assert!(words("show functions x in ", &f).is_empty());
    match complete_words("whatis 'me", &f.map(String::from)) {
        Completion::Words(start, _) => assert_eq!(start, "whatis '".len()),
        Completion::Files => panic!("files"),
    }
}

#[test]
fn completes_command_names_for_help() {
    assert_eq!(words("help di", &[]), vec!["disas ", "disassemble "]);
    assert_eq!(words("help show m", &[]), vec!["modules "]);
}

#[test]
fn nothing_for_unknown_commands_or_free_text() {
    assert!(words("bogus x", &[]).is_empty());
    assert!(words("echo x", &[]).is_empty());
}
