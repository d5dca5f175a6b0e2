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
    match complete_words("whatis 'me", &f.map(String::from).to_vec()) {
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

/// Names from a made-up binary: `work` calls `puts` and `helper` and has two loops.
struct Fake(Vec<String>);

impl Known for Fake {
    fn functions(&self) -> &[String] {
        &self.0
    }

    fn callees(&self, func: &str) -> Vec<String> {
        match func {
            "work" => vec!["helper".into(), "puts".into()],
            _ => Vec::new(),
        }
    }

    fn loops(&self, func: &str) -> Vec<String> {
        match func {
            "work" => vec!["loop_1".into(), "loop_1.1".into()],
            _ => Vec::new(),
        }
    }
}

fn point_words(before: &str) -> Vec<String> {
    let known = Fake(vec!["main".into(), "work".into()]);
    match complete_words(before, &known) {
        Completion::Words(_, w) => w,
        Completion::Files => vec!["<files>".into()],
    }
}

#[test]
fn points_complete_after_the_function() {
    assert_eq!(point_words("at wo"), vec!["work"]);
    assert_eq!(
        point_words("at work "),
        vec!["entry ", "exit ", "call ", "loop ", "block ", "insn ", "edge "]
    );
    assert_eq!(
        point_words("break work e"),
        vec!["entry ", "exit ", "edge "]
    );
    assert_eq!(point_words("b 'work' c"), vec!["call "]);
    assert_eq!(
        point_words("at work call "),
        vec!["helper ", "puts ", "before ", "after "]
    );
    assert_eq!(point_words("at work call p"), vec!["puts "]);
    assert_eq!(point_words("at work call puts "), vec!["before ", "after "]);
    assert_eq!(point_words("at work loop "), vec!["loop_1 ", "loop_1.1 "]);
    assert_eq!(
        point_words("at work loop loop_1 "),
        vec!["entry ", "exit ", "iter-begin ", "iter-end "]
    );
    assert_eq!(
        point_words("at work insn 0x401136 "),
        vec!["before ", "after "]
    );
    assert!(point_words("at work entry ").is_empty());
}

#[test]
fn a_real_binarys_callees_and_loops_are_offered() {
    let mut session = engine::Session::new();
    session
        .open(std::path::Path::new("/bin/ls"))
        .expect("open /bin/ls");
    let main = session.main().expect("main module");
    let helper = GshHelper {
        files: FilenameCompleter::new(),
        functions: Vec::new(),
        functions_of: None,
        module: Some(session.module_arc(main.id)),
    };
    let callees = helper.callees("main");
    assert!(callees.iter().any(|c| c == "setlocale"), "{callees:?}");
    let loops = helper.loops("main");
    assert!(loops.iter().any(|l| l == "loop_1"), "{loops:?}");
}
