//! Static instrumentation end to end: `at ...` then `save`, then the saved program is run and
//! must compute exactly what the original does, plus what its snippets print.

use std::path::{Path, PathBuf};

use gsh_tests::{gsh_c, run_program, target_dir, Mutatee, Variant, MUTATEES};

/// Where a test's instrumented programs go.
fn out_path(name: &str) -> PathBuf {
    let dir = target_dir().join("instrumented");
    std::fs::create_dir_all(&dir).expect("create target/instrumented");
    dir.join(name)
}

/// Runs gsh's `commands` on `file`, then `save`s to `out`; panics with gsh's output on failure.
fn instrument(commands: &str, file: &Path, out: &Path) -> String {
    let o = gsh_c(&format!("{commands}; save {}", out.display()), file);
    o.assert_code(0);
    o.stdout
}

fn stdout_of(exe: &Path, args: &[&str]) -> (Option<i32>, String) {
    let o = run_program(exe, args, &[]);
    (
        o.status.code(),
        String::from_utf8_lossy(&o.stdout).into_owned(),
    )
}

const COUNTERS: &str = "declare long n_add; declare long n_fact_in; declare long n_fact_out; \
declare long sum_ret; declare long n_before; declare long n_after; declare long args; \
at add entry { n_add++; }; at factorial entry { n_fact_in++; }; at factorial exit { n_fact_out++; }; \
at add exit { sum_ret += $return; }; \
at main call add before { n_before++; args += $0 * 10 + $1; }; at main call add after { n_after++; }; \
at main exit { printf(\"gsh: add=%ld fact=%ld/%ld ret=%ld calls=%ld/%ld args=%ld\\n\", \
n_add, n_fact_in, n_fact_out, sum_ret, n_before, n_after, args); }";

#[test]
fn counts_arguments_and_return_values_are_exact() {
    let m = Mutatee::new("basic");
    for v in [Variant::O0, Variant::O2, Variant::Pie, Variant::NoPie] {
        let out = out_path(&format!("counters-{}", m.file_name(v)));
        instrument(COUNTERS, &m.path(v), &out);
        let (code, stdout) = stdout_of(&out, &[]);
        assert_eq!(code, Some(0), "{v:?}");
        // add(2, 3) and add(5, 11): entered twice, returning 5 and 16, called from main twice
        // with $0*10+$1 summing to 23 + 61. factorial(10) recurses at -O0; gcc turns it into
        // a loop at -O2.
        let fact = if v == Variant::O0 { 10 } else { 1 };
        let want = format!(
            "{}gsh: add=2 fact={fact}/{fact} ret=21 calls=2/2 args=84\n",
            m.expected_stdout()
        );
        assert_eq!(stdout, want, "{v:?}");
    }
}

#[test]
fn snippets_at_one_point_run_in_order_and_conditions_hold() {
    let m = Mutatee::new("basic");
    let out = out_path("order-basic");
    instrument(
        "at add entry { printf(\"first %d\\n\", a); }; at add entry { printf(\"second %d\\n\", b); }; \
         at add exit if ($return > 10) { printf(\"big %d\\n\", $return); }",
        &m.path(Variant::O2),
        &out,
    );
    let (code, stdout) = stdout_of(&out, &[]);
    assert_eq!(code, Some(0));
    let want = format!(
        "first 2\nsecond 3\nfirst 5\nsecond 11\nbig 16\n{}",
        m.expected_stdout()
    );
    assert_eq!(stdout, want);
}

#[test]
fn every_entry_and_exit_of_every_mutatee_keeps_its_output() {
    let script = "declare long gsh_n; at '*' entry { gsh_n++; }; at '*' exit { gsh_n++; }";
    for name in MUTATEES {
        let m = Mutatee::new(name);
        for v in [
            Variant::O0,
            Variant::O2,
            Variant::Stripped,
            Variant::Pie,
            Variant::NoPie,
        ] {
            let original = m.path(v);
            let out = out_path(&format!("all-{}", m.file_name(v)));
            let report = instrument(script, &original, &out);
            assert!(report.contains("Tactics"), "{report}");
            let want = stdout_of(&original, &[]);
            assert_eq!(stdout_of(&out, &[]), want, "{} {v:?}: output differs", name);
        }
    }
}

#[test]
fn every_entry_and_exit_of_ls_keeps_its_output() {
    let ls = Path::new("/usr/bin/ls");
    assert!(ls.is_file(), "/usr/bin/ls is missing");
    let out = out_path("ls-all");
    let o = gsh_tests::Gsh::new()
        .args([
            "-c",
            &format!(
                "declare long gsh_n; at '*' entry {{ gsh_n++; }}; at '*' exit {{ gsh_n++; }}; save {}",
                out.display()
            ),
            "/usr/bin/ls",
        ])
        .run();
    o.assert_code(0);
    let dir = gsh_tests::mutatee_source_dir();
    let dir = dir.to_str().unwrap();
    for args in [
        vec!["-la", dir],
        vec!["-R", "--sort=size", dir],
        vec!["--help"],
        vec!["/nonexistent-gsh-path"],
    ] {
        let a = run_program(ls, &args, &[]);
        let b = run_program(&out, &args, &[]);
        assert_eq!(b.status.code(), a.status.code(), "ls {args:?}");
        assert_eq!(
            String::from_utf8_lossy(&b.stdout),
            String::from_utf8_lossy(&a.stdout).replace("/usr/bin/ls", &out.display().to_string()),
            "ls {args:?}"
        );
    }
}

#[test]
fn save_refuses_what_it_cannot_do() {
    let m = Mutatee::new("loops");
    let o = gsh_c(
        "declare long n; at nested loop loop_1 entry { n++; }; save /tmp/gsh-never-written",
        &m.path(Variant::O0),
    );
    o.assert_code(1);
    assert!(
        o.stderr.contains("loop points are not supported yet"),
        "{}",
        o.stderr
    );
    assert!(!Path::new("/tmp/gsh-never-written").exists());
    let o = gsh_c("save /nonexistent-dir/out", &m.path(Variant::O0));
    o.assert_code(1);
    assert!(o.stderr.starts_with("gsh: "), "{}", o.stderr);
}
