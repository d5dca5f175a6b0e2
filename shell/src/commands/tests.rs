//! Tests for the command table: consistency of the definitions, lookup, did-you-mean, and
//! commands that need no binary.

use super::*;
use crate::output::Style;

#[test]
fn names_and_aliases_are_unique() {
    let mut seen = std::collections::HashSet::new();
    for spec in COMMANDS {
        for name in std::iter::once(spec.name).chain(spec.aliases.iter().copied()) {
            assert!(seen.insert(name), "`{name}` defined twice");
        }
    }
}

#[test]
fn every_spec_is_documented() {
    for spec in COMMANDS {
        assert!(!spec.summary.is_empty(), "{}", spec.name);
        assert!(
            !spec.summary.ends_with('.'),
            "{}: summary ends with .",
            spec.name
        );
        assert!(!spec.help.is_empty(), "{}", spec.name);
        assert!(!spec.examples.is_empty(), "{}: no example", spec.name);
        for (example, _) in spec.examples {
            let cmds = crate::script::split(example).expect("example parses");
            assert_eq!(cmds.len(), 1, "{example}");
            let cmd = glued_format(&cmds[0]);
            let words: Vec<&str> = cmd.words.iter().map(|w| w.text.as_str()).collect();
            let (found, _) = lookup(&words).unwrap_or_else(|| panic!("{example}: no command"));
            assert_eq!(
                found.name, spec.name,
                "example `{example}` runs another command"
            );
        }
    }
}

#[test]
fn lookup_prefers_the_longest_name() {
    let (spec, n) = lookup(&["show", "functions", "x"]).unwrap();
    assert_eq!((spec.name, n), ("show functions", 2));
    let (spec, n) = lookup(&["exit"]).unwrap();
    assert_eq!((spec.name, n), ("quit", 1));
    assert!(lookup(&["show"]).is_none());
    assert!(lookup(&[]).is_none());
    assert_eq!(find("show funcs").map(|s| s.name), Some("show functions"));
    assert!(find("show").is_none());
}

#[test]
fn did_you_mean() {
    assert_eq!(
        unknown(&["shwo"]).to_string(),
        "unknown command `shwo`; did you mean `show`?"
    );
    assert_eq!(
        unknown(&["show", "functoins"]).to_string(),
        "unknown command `show functoins`; did you mean `show functions`?"
    );
    assert_eq!(
        unknown(&["show"]).to_string(),
        "`show` needs one of: funcs, functions, instrumentation, libraries, libs, locals, modules, points, registers, threads, variables, vars"
    );
    assert_eq!(
        unknown(&["xyzzy"]).to_string(),
        "unknown command `xyzzy`; `help` lists the commands"
    );
    // Only when close: a two-letter word is not a typo of the one-letter alias `b` (or of
    // the command `x`), and `informs` is nothing like any command.
    assert_eq!(
        unknown(&["info"]).to_string(),
        "`info` needs one of: locals, registers"
    );
    for far in ["bp", "br", "bx", "xx", "informs"] {
        assert_eq!(
            unknown(&[far]).to_string(),
            format!("unknown command `{far}`; `help` lists the commands")
        );
    }
    assert_eq!(
        unknown(&["stauts"]).to_string(),
        "unknown command `stauts`; did you mean `status`?"
    );
    assert_eq!(
        closest("disa", ["disas", "open"].into_iter()),
        Some("disas")
    );
}

/// Runs `text` in a fresh context with no file open; returns (stdout, result).
fn run_text(text: &str, json: bool) -> (String, anyhow::Result<()>) {
    #[derive(Clone, Default)]
    struct Buf(std::rc::Rc<std::cell::RefCell<Vec<u8>>>);
    impl std::io::Write for Buf {
        fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
            self.0.borrow_mut().extend_from_slice(b);
            Ok(b.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let buf = Buf::default();
    let mut ctx = Context::with_writer(json, Style::PLAIN, Box::new(buf.clone()));
    let r = ctx.run_text(text, None);
    let out = String::from_utf8_lossy(&buf.0.borrow()).into_owned();
    (out, r)
}

#[test]
fn echo_and_quit() {
    let (out, r) = run_text("echo hello   'big  world'; quit; echo never", false);
    assert!(r.is_ok());
    assert_eq!(out, "hello big  world\n");
}

#[test]
fn json_prints_one_tagged_line_per_command() {
    let (out, r) = run_text("echo a; sleep 0; help echo", true);
    assert!(r.is_ok());
    let lines: Vec<serde_json::Value> = out
        .lines()
        .map(|l| serde_json::from_str(l).expect("valid JSON"))
        .collect();
    assert_eq!(lines.len(), 3);
    assert_eq!(
        lines[0],
        serde_json::json!({"command": "echo a", "result": {"text": "a"}})
    );
    assert_eq!(
        lines[1],
        serde_json::json!({"command": "sleep 0", "result": {}})
    );
    assert_eq!(lines[2]["command"], "help echo");
}

#[test]
fn json_errors_are_lines_of_the_stream_once() {
    let (out, r) = run_text("echo 'a b'; bogus; echo never", true);
    assert!(r.is_err());
    let lines: Vec<serde_json::Value> = out
        .lines()
        .map(|l| serde_json::from_str(l).expect("valid JSON"))
        .collect();
    assert_eq!(lines.len(), 2, "{out}");
    assert_eq!(lines[0]["command"], "echo 'a b'");
    assert_eq!(
        lines[1],
        serde_json::json!({
            "command": "bogus",
            "error": "line 1: unknown command `bogus`; `help` lists the commands"
        })
    );
}

#[test]
fn errors_stop_the_batch_and_name_the_line() {
    let (out, r) = run_text("echo one\nshwo functions\necho two", false);
    assert_eq!(out, "one\n");
    let e = crate::context::error_line(&r.unwrap_err());
    assert_eq!(e, "line 2: unknown command `shwo`; did you mean `show`?");
}

#[test]
fn commands_need_an_open_file() {
    let (_, r) = run_text("show functions", false);
    let e = crate::context::error_line(&r.unwrap_err());
    assert!(e.contains("no file is open"), "{e}");
}

#[test]
fn argument_errors_show_usage() {
    for (text, want) in [
        ("sleep", "missing argument; usage: sleep SECONDS"),
        ("sleep x", "sleep takes a number of seconds, not `x`"),
        ("sleep -1", "sleep takes 0 to 86400 seconds, not `-1`"),
        ("quit now", "unexpected argument `now`; usage: quit"),
        ("open", "missing argument; usage: open FILE"),
        ("open /nonexistent/file", "cannot read /nonexistent/file"),
        ("help --bogus", "unknown option `--bogus`"),
        ("help nothing", "unknown command `nothing`"),
        ("echo x { y; }", "`echo` takes no `{ ... }` block"),
    ] {
        let (_, r) = run_text(text, false);
        let e = crate::context::error_line(&r.unwrap_err());
        assert!(e.contains(want), "{text}: {e}");
    }
}

#[test]
fn help_lists_and_describes() {
    let (out, r) = run_text("help", false);
    assert!(r.is_ok());
    assert!(out.contains("show functions"));
    let (out, _) = run_text("help show", false);
    assert!(out.contains("show modules") && !out.contains("whatis"));
    let (out, _) = run_text("help disas", false);
    assert!(out.contains("Examples:"));
}

#[test]
fn source_nesting_is_bounded() {
    let dir = std::env::temp_dir().join(format!("gsh-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("self.gsh");
    std::fs::write(&path, format!("source {}\n", path.display())).unwrap();
    let (_, r) = run_text(&format!("source {}", path.display()), false);
    let e = crate::context::error_line(&r.unwrap_err());
    assert!(e.contains("nested more than 16 deep"), "{e}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn looks_around_in_a_real_binary() {
    // The test binary itself: unstripped, so `main` and this crate's functions are there.
    let exe = std::env::current_exe().expect("the test binary's path");
    let exe = exe.display();
    let (out, r) = run_text(
        &format!(
            "open {exe}; show functions main; find function 'looks_around_in_a_real_binary' \
             --limit 1; whatis main; disas main 3; show modules"
        ),
        false,
    );
    r.expect("every command succeeds");
    assert!(out.contains("1 function matching `main`"), "{out}");
    assert!(out.contains("looks_around_in_a_real_binary"), "{out}");
    // Keys are padded to the widest one, which `whatis` metrics made wider.
    assert!(
        out.lines()
            .any(|l| l.split_whitespace().eq(["Name", "source", "symtab"])),
        "{out}"
    );
    assert!(out.contains("main in "), "{out}");

    let (out, r) = run_text(&format!("open {exe}; whatis main; disas main 2"), true);
    r.expect("every command succeeds");
    let docs: Vec<serde_json::Value> = out
        .lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).expect("valid JSON")["result"].take())
        .collect();
    assert_eq!(docs.len(), 3);
    assert_eq!(docs[1]["function"], "main");
    assert!(docs[1]["address"].as_str().unwrap().starts_with("0x"));
    assert_eq!(docs[2]["rows"].as_array().unwrap().len(), 2);
}
