//! gsh end to end from the command line: exit statuses, one-line `gsh: ` errors, and `--json`
//! output that parses. The runner itself (building gsh, running it with a time limit) is
//! checked always; the shell's behaviour needs the shell branch.

use std::path::Path;

use gsh_tests::{gsh_c, gsh_json, target_dir, Gsh, GshOutput, Mutatee, Variant};

/// Asserts gsh failed with status 1 and exactly one stderr line starting `gsh: ` that
/// mentions `needle`.
fn assert_one_line_error(out: &GshOutput, needle: &str) {
    out.assert_code(1);
    let lines: Vec<&str> = out.stderr.trim_end().lines().collect();
    assert_eq!(lines.len(), 1, "expected one stderr line:\n{out}");
    assert!(
        lines[0].starts_with("gsh: "),
        "stderr must start with `gsh: `:\n{out}"
    );
    assert!(
        lines[0].contains(needle),
        "stderr should mention `{needle}`:\n{out}"
    );
}

#[test]
fn gsh_binary_builds_and_runs_under_the_harness() {
    let bin = Gsh::binary();
    assert!(bin.is_file(), "{} is not a file", bin.display());
    // Whatever gsh does with `--help`, it must finish within the limit and not be killed.
    let out = Gsh::new()
        .arg("--help")
        .timeout(std::time::Duration::from_secs(30))
        .run();
    assert!(out.code.is_some(), "gsh --help died from a signal:\n{out}");
}

#[test]
fn missing_file_fails_with_one_line() {
    let out = Gsh::new()
        .args(["-c", "show functions", "/nonexistent/gsh-test/no-such-file"])
        .run();
    assert_one_line_error(&out, "/nonexistent/gsh-test/no-such-file");
}

#[test]
fn non_elf_file_fails_with_one_line() {
    let dir = target_dir().join("test-scratch");
    std::fs::create_dir_all(&dir).expect("scratch directory");
    let text = dir.join("cli-not-elf.txt");
    std::fs::write(&text, "hello\n").expect("write");
    let out = gsh_c("show functions", &text);
    assert_one_line_error(&out, "not an ELF file");
}

#[test]
fn unknown_command_fails_with_one_line() {
    let exe = Mutatee::new("basic").path(Variant::O0);
    let out = gsh_c("frobnicate the widgets", &exe);
    assert_one_line_error(&out, "frobnicate");
}

#[test]
fn unknown_function_fails_with_one_line() {
    let exe = Mutatee::new("basic").path(Variant::O0);
    for cmd in [
        "whatis no_such_function",
        "disas no_such_function",
        "disas no_such_function",
    ] {
        let out = gsh_c(cmd, &exe);
        assert_one_line_error(&out, "no_such_function");
    }
}

#[test]
fn failing_command_stops_the_batch() {
    let exe = Mutatee::new("basic").path(Variant::O0);
    let out = gsh_c("whatis no_such_function; echo after", &exe);
    out.assert_code(1);
    assert!(
        !out.stdout.contains("after"),
        "commands after the failure ran:\n{out}"
    );
}

/// True when `needle` appears as a string anywhere in `value`.
fn mentions(value: &serde_json::Value, needle: &str) -> bool {
    match value {
        serde_json::Value::String(s) => s.contains(needle),
        serde_json::Value::Array(items) => items.iter().any(|v| mentions(v, needle)),
        serde_json::Value::Object(map) => map
            .iter()
            .any(|(k, v)| k.contains(needle) || mentions(v, needle)),
        _ => false,
    }
}

fn basic() -> std::path::PathBuf {
    Mutatee::new("basic").path(Variant::O0)
}

#[test]
fn json_show_functions_parses() {
    let doc = gsh_json("show functions", &basic());
    for name in ["main", "add", "inc", "puts@plt"] {
        assert!(
            mentions(&doc, name),
            "`show functions` JSON lacks {name}: {doc}"
        );
    }
}

#[test]
fn json_whatis_main_parses() {
    let doc = gsh_json("whatis main", &basic());
    assert!(mentions(&doc, "main"), "{doc}");
}

#[test]
fn json_disas_main_parses() {
    let doc = gsh_json("disas main 5", &basic());
    assert!(!doc.is_null(), "disas printed null");
}

#[test]
fn json_prints_one_document_per_command() {
    let docs = gsh_tests::gsh_json_all("whatis add; whatis inc", &basic());
    assert_eq!(docs.len(), 2, "{docs:?}");
}

/// `--json` is a stream: one object per line tagged with its command, errors as objects too,
/// and the started program's output kept out of it (it went to stdout between the
/// documents, and errors were only text on stderr).
#[test]
fn json_is_a_stream_of_tagged_answers_and_errors() {
    let m = Mutatee::new("basic");
    let exe = m.path(Variant::O0);
    let o = Gsh::new()
        .current_dir(exe.parent().expect("dir"))
        .args([
            "--json",
            "-c",
            "whatis add; run; show functions 'ad*'; bogus; whatis inc",
        ])
        .arg(exe.file_name().expect("name"))
        .run();
    o.assert_code(1);
    let lines = gsh_tests::json_stream(&o);
    let commands: Vec<&str> = lines
        .iter()
        .map(|l| l["command"].as_str().unwrap_or(""))
        .collect();
    assert_eq!(
        commands,
        ["whatis add", "run", "show functions 'ad*'", "bogus"],
        "{o}"
    );
    assert_eq!(lines[0]["result"]["function"], "add", "{o}");
    assert_eq!(
        lines[3]["error"], "line 1: unknown command `bogus`; `help` lists the commands",
        "{o}"
    );
    // The program ran, and its output went to stderr, not into the stream.
    for line in m.expected_stdout().lines() {
        assert!(o.stderr.contains(line), "{line:?} not on stderr:\n{o}");
    }

    // An error before any command is in the stream too.
    let o = Gsh::new()
        .args(["--json", "-c", "whatis main", "/no/such/file"])
        .run();
    o.assert_code(1);
    let lines = gsh_tests::json_stream(&o);
    assert_eq!(lines.len(), 1, "{o}");
    assert!(lines[0]["command"].is_null(), "{o}");
    assert!(
        lines[0]["error"]
            .as_str()
            .is_some_and(|e| e.contains("/no/such/file")),
        "{o}"
    );
}

#[test]
fn harness_paths_are_inside_the_target_directory() {
    let exe = basic();
    assert!(
        exe.starts_with(target_dir()),
        "{} outside {}",
        exe.display(),
        target_dir().display()
    );
    assert!(Path::new(&exe).is_file());
}

#[test]
fn help_snippets_prints_the_grammar() {
    let out = Gsh::new().args(["-c", "help snippets"]).run();
    out.assert_code(0);
    assert!(out.stdout.contains("## Grammar"), "{out}");
    assert!(out.stdout.contains("$return"), "{out}");
    let man = std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("../man/gsh.1"))
        .expect("man page");
    assert!(man.contains(".SH SNIPPETS"));
}

#[test]
fn snippet_errors_show_the_line_and_a_caret() {
    let out = gsh_c("declare long calls; at add entry { cals++; }", &basic());
    out.assert_code(1);
    let want = "gsh: line 1: in the snippet at add entry (add):\n\
                error: unknown name `cals`\n  |\n1 | cals++;\n  | ^^^^ did you mean `calls`?\n";
    assert_eq!(out.stderr, want, "{out}");
    let out = gsh_c("at add exit { long_gone = $0; }", &basic());
    out.assert_code(1);
    assert!(
        out.stderr.contains("only available at entry points"),
        "{out}"
    );
    let out = gsh_c("at add middle { }", &basic());
    out.assert_code(1);
    assert!(out.stderr.contains("is not a point"), "{out}");
    let out = gsh_c("delete 7", &basic());
    assert_one_line_error(&out, "no instrumentation with id 7");
}

#[test]
fn parameters_hiding_declared_variables_are_warned_about() {
    let out = gsh_c("declare long n; at factorial entry { n++; }", &basic());
    out.assert_code(0);
    assert_eq!(
        out.stderr,
        "gsh: warning: in factorial, `n` is its parameter, not the declared variable `n`\n"
    );
    let out = gsh_c(
        "declare long calls; at factorial entry { calls++; }",
        &basic(),
    );
    assert_eq!(out.stderr, "");
}

/// The README's main job (`./gsh -b scripts/tour-ls.gsh /bin/ls`) explores ls, measures a live
/// run of it and runs a rewritten copy: every part must work on this machine's `/bin/ls`.
#[test]
fn the_readme_tour_of_ls_explores_measures_and_rewrites() {
    let script = gsh_tests::workspace_root().join("scripts/tour-ls.gsh");
    let o = Gsh::new()
        .arg("-b")
        .arg(&script)
        .arg("/bin/ls")
        .timeout(std::time::Duration::from_secs(240))
        .run();
    o.assert_success();
    let rows: Vec<Vec<&str>> = o
        .stdout
        .lines()
        .map(|l| l.split_whitespace().collect())
        .collect();
    let counted = |f: &str| {
        rows.iter()
            .find(|r| r.len() > 4 && r[1] == f && r[2] == "count")
            .and_then(|r| r[3].parse::<u64>().ok())
            .unwrap_or_else(|| panic!("no count of {f}:\n{o}"))
    };
    assert!(counted("readdir") > 100, "{o}");
    assert!(counted("malloc") > 100, "{o}");
    assert!(o.stdout.contains("Saved    /tmp/ls.counted"), "{o}");
    let made = o
        .stdout
        .lines()
        .find_map(|l| l.strip_prefix("ls made "))
        .unwrap_or_else(|| panic!("the rewritten ls did not report:\n{o}"));
    assert!(made.ends_with(" calls to its own functions"), "{made}");
}

/// Commands piped in run as each line arrives (gsh once read to the end of input first, so
/// `(echo run; sleep 4; echo x) | gsh` ran `run` 4 s late and an attached process stayed
/// stopped until the writer closed); a `{ ... }` block spanning lines waits for its end; an
/// error names its line in the whole input.
#[test]
fn piped_commands_run_as_their_lines_arrive() {
    use std::io::{BufRead, BufReader, Write};
    use std::process::{Command, Stdio};
    let mut child = Command::new(Gsh::binary())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let mut out = BufReader::new(child.stdout.take().unwrap());
    stdin.write_all(b"echo first\n").unwrap();
    let mut line = String::new();
    // Blocks until gsh answers, with the pipe still open: before, this waited forever.
    out.read_line(&mut line).unwrap();
    assert_eq!(line, "first\n");
    stdin
        .write_all(b"echo second\nopen /nonexistent/file\necho never\n")
        .unwrap();
    drop(stdin);
    let status = child.wait().unwrap();
    let mut rest = String::new();
    std::io::Read::read_to_string(&mut out, &mut rest).unwrap();
    let mut err = String::new();
    std::io::Read::read_to_string(&mut child.stderr.take().unwrap(), &mut err).unwrap();
    assert_eq!(rest, "second\n");
    assert_eq!(status.code(), Some(1));
    assert!(err.contains("<stdin>:3"), "{err}");
}
