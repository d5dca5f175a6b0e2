//! Script tests: each `tests/scripts/NAME.gsh` runs under `gsh -b` against the mutatee its
//! first line names (`# mutatee: basic O0`), and its stdout must equal `NAME.out` up to
//! trailing whitespace. `GSH_BLESS=1 cargo test -p gsh-tests scripts`
//! rewrites the `.out` files from what gsh prints now; review the diff before committing it.

//!
//! A script may say `# exit: N` on a later comment line when it is meant to fail with status
//! N; otherwise it must succeed. gsh runs in the mutatees' directory with the mutatee named by
//! its file name, so paths in the output are the same on every machine.

use std::path::{Path, PathBuf};

use gsh_tests::{scripts_dir, Gsh, Mutatee, Variant};

/// One script and what its header asks for.
struct Script {
    path: PathBuf,
    mutatee: Mutatee,
    variant: Variant,
    exit: i32,
}

fn parse_script(path: &Path) -> Result<Script, String> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("cannot read: {e}"))?;
    let first = text.lines().next().unwrap_or("");
    let spec = first
        .strip_prefix("# mutatee:")
        .ok_or("the first line must be `# mutatee: NAME VARIANT`")?;
    let words: Vec<&str> = spec.split_whitespace().collect();
    let [name, variant] = words[..] else {
        return Err(format!("`{first}`: expected `# mutatee: NAME VARIANT`"));
    };
    if !gsh_tests::MUTATEES.contains(&name) {
        return Err(format!(
            "unknown mutatee `{name}`; known: {:?}",
            gsh_tests::MUTATEES
        ));
    }
    let variant = Variant::parse(variant).ok_or_else(|| {
        let known: Vec<_> = Variant::ALL.iter().map(|v| v.suffix()).collect();
        format!("unknown variant `{variant}`; known: {known:?}")
    })?;
    let mut exit = 0;
    for line in text.lines() {
        if let Some(code) = line.strip_prefix("# exit:") {
            exit = code
                .trim()
                .parse()
                .map_err(|_| format!("`{line}`: exit status must be a number"))?;
        }
    }
    Ok(Script {
        path: path.to_owned(),
        mutatee: Mutatee::new(name),
        variant,
        exit,
    })
}

fn scripts() -> Vec<PathBuf> {
    let dir = scripts_dir();
    let mut paths: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("cannot list {}: {e}", dir.display()))
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "gsh"))
        .collect();
    paths.sort();
    assert!(!paths.is_empty(), "no .gsh scripts in {}", dir.display());
    paths
}

/// Drops trailing whitespace on every line and trailing blank lines: the only normalisation.
fn normalize(text: &str) -> String {
    let mut lines: Vec<&str> = text.lines().map(str::trim_end).collect();
    while lines.last() == Some(&"") {
        lines.pop();
    }
    let mut out = lines.join("\n");
    out.push('\n');
    out
}

/// The first differing line, shown with a little context, for failure messages.
fn first_difference(expected: &str, actual: &str) -> String {
    let (e, a): (Vec<_>, Vec<_>) = (expected.lines().collect(), actual.lines().collect());
    let i = e.iter().zip(&a).take_while(|(x, y)| x == y).count();
    format!(
        "first difference at line {}:\n  expected: {:?}\n  actual:   {:?}",
        i + 1,
        e.get(i).copied().unwrap_or("<end of output>"),
        a.get(i).copied().unwrap_or("<end of output>")
    )
}

#[test]
fn script_headers_name_real_mutatees_and_variants() {
    let errors: Vec<String> = scripts()
        .iter()
        .filter_map(|p| {
            parse_script(p)
                .err()
                .map(|e| format!("{}: {e}", p.display()))
        })
        .collect();
    assert!(errors.is_empty(), "{}", errors.join("\n"));
}

#[test]
fn scripts_print_their_expected_output() {
    let bless = std::env::var_os("GSH_BLESS").is_some_and(|v| v != "0");
    let mut failures = Vec::new();
    for path in scripts() {
        let script = parse_script(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        let exe = script.mutatee.path(script.variant);
        let dir = exe
            .parent()
            .expect("mutatees live in a directory")
            .to_owned();
        let out = Gsh::new()
            .current_dir(dir)
            .arg("-b")
            .arg(&script.path)
            .arg(exe.file_name().expect("a file name"))
            .run();
        let name = path
            .file_name()
            .unwrap_or_default()
            .to_string_lossy()
            .into_owned();
        if out.code != Some(script.exit) {
            failures.push(format!(
                "{name}: expected exit status {}\n{out}",
                script.exit
            ));
            continue;
        }
        let actual = normalize(&out.stdout);
        let expected_path = path.with_extension("out");
        if bless {
            std::fs::write(&expected_path, &actual)
                .unwrap_or_else(|e| panic!("cannot write {}: {e}", expected_path.display()));
            continue;
        }
        match std::fs::read_to_string(&expected_path) {
            Err(e) => failures.push(format!(
                "{name}: cannot read {} ({e}); run with GSH_BLESS=1 to create it",
                expected_path.display()
            )),
            Ok(expected) if normalize(&expected) != actual => failures.push(format!(
                "{name}: output differs from {} (GSH_BLESS=1 rewrites it)\n{}\n--- actual stdout ---\n{actual}--- stderr ---\n{}",
                expected_path.display(),
                first_difference(&normalize(&expected), &actual),
                out.stderr
            )),
            Ok(_) => {}
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
}

#[test]
fn normalization_touches_only_trailing_whitespace() {
    assert_eq!(normalize("a  \n b\t\n\n\n"), "a\n b\n");
    assert_eq!(normalize("x"), "x\n");
    assert_ne!(normalize("a b"), normalize("a  b"));
}
