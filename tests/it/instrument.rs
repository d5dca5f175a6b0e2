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

/// The README's `scripts/count-ls-calls.gsh`: `main`'s exit prints the count once, however many
/// options ls parses. Its option switch (a table indexed by `getopt_long`'s result less 0x83,
/// its base set before the loop) used to stay unresolved and count as an exit, so each option
/// printed one more line.
#[test]
fn the_readme_ls_count_prints_once_whatever_the_options() {
    let script =
        std::fs::read_to_string(gsh_tests::workspace_root().join("scripts/count-ls-calls.gsh"))
            .expect("read scripts/count-ls-calls.gsh");
    let out = out_path("ls-count-calls");
    let script = script.replace("save /tmp/ls.counted", &format!("save {}", out.display()));
    assert!(
        script.contains(&out.display().to_string()),
        "the script no longer saves to /tmp/ls.counted"
    );
    let ls = Path::new("/bin/ls");
    let o = gsh_c(&script, ls);
    assert_eq!(o.code, Some(0), "{o}");
    let dir = gsh_tests::mutatee_source_dir();
    let b = run_program(&out, &["-a", "-l", "-d", "-h", dir.to_str().unwrap()], &[]);
    assert_eq!(b.status.code(), Some(0));
    let stdout = String::from_utf8_lossy(&b.stdout);
    let lines = stdout.lines().filter(|l| l.starts_with("ls made ")).count();
    assert_eq!(lines, 1, "{stdout}");
}

#[test]
fn save_refuses_what_it_cannot_do() {
    let m = Mutatee::new("loops");
    let o = gsh_c(
        "declare long n; at nested loop loop_9 entry { n++; }; save /tmp/gsh-never-written",
        &m.path(Variant::O0),
    );
    o.assert_code(1);
    assert!(o.stderr.contains("no loop named `loop_9`"), "{}", o.stderr);
    assert!(!Path::new("/tmp/gsh-never-written").exists());
    let o = gsh_c("save /nonexistent-dir/out", &m.path(Variant::O0));
    o.assert_code(1);
    assert!(o.stderr.starts_with("gsh: "), "{}", o.stderr);
}

#[test]
fn vector_and_integer_registers_survive_a_snippet_calling_printf() {
    // fpregs keeps doubles in xmm (and, with AVX, 256-bit vectors in ymm) and integers in
    // caller-saved registers across its calls to `step`, because gcc sees that `step` clobbers
    // none of them. The snippet calls printf, which may clobber all of them: only a complete
    // save keeps the %a checksums bit-exact. The condition clobbers the flags as well.
    let m = Mutatee::new("fpregs");
    let steps: String = (0..40)
        .filter(|i| i % 2 == 0)
        .map(|i| format!("step {i}\n"))
        .collect();
    let expected = m.expected_stdout();
    let mut want = String::new();
    for line in expected.lines() {
        want.push_str(&steps);
        want.push_str(line);
        want.push('\n');
    }
    for v in [Variant::O0, Variant::O2, Variant::Pie, Variant::NoPie] {
        let out = out_path(&format!("printf-{}", m.file_name(v)));
        instrument(
            "at step entry if (i % 2 == 0) { printf(\"step %d\\n\", i); }",
            &m.path(v),
            &out,
        );
        let (code, stdout) = stdout_of(&out, &[]);
        assert_eq!(code, Some(0), "{v:?}");
        assert_eq!(stdout, want, "{v:?}");
    }
}

#[test]
fn longjmp_out_of_instrumented_frames_skips_their_exits() {
    // Every third activation of `thrower` longjmps back to main through `middle`: those
    // activations of `middle` never return, so its exit fires 6 times of 10. `thrower`'s call
    // to longjmp is one of its exits (a call to a non-returning function), so it fires 10.
    let m = Mutatee::new("longjmp");
    let script = "declare long gsh_te; declare long gsh_tx; declare long gsh_me; declare long gsh_mx; \
        at thrower entry { gsh_te++; }; at thrower exit { gsh_tx++; }; \
        at middle entry { gsh_me++; }; at middle exit { gsh_mx++; }; \
        at main exit { printf(\"gsh: thrower=%ld/%ld middle=%ld/%ld\\n\", gsh_te, gsh_tx, gsh_me, gsh_mx); }";
    for v in [Variant::O0, Variant::O2, Variant::Pie, Variant::NoPie] {
        let out = out_path(&format!("longjmp-{}", m.file_name(v)));
        instrument(script, &m.path(v), &out);
        let (code, stdout) = stdout_of(&out, &[]);
        assert_eq!(code, Some(0), "{v:?}");
        let want = format!("{}gsh: thrower=10/10 middle=10/6\n", m.expected_stdout());
        assert_eq!(stdout, want, "{v:?}");
    }
}

#[test]
fn recursive_functions_count_every_activation() {
    // At -O0 every call is a real call: fib(15) is 1973 activations, 15 deep; ackermann(2, 3)
    // counts its own 44; even(10) and odd(7) are 10 activations of even and 9 of odd.
    let m = Mutatee::new("recursion");
    let script = "declare long gsh_fi; declare long gsh_fo; declare long gsh_d; declare long gsh_max; \
        declare long gsh_ai; declare long gsh_ao; declare long gsh_ei; declare long gsh_eo; \
        declare long gsh_oi; declare long gsh_oo; \
        at fib entry { gsh_fi++; gsh_d++; if (gsh_d > gsh_max) gsh_max = gsh_d; }; \
        at fib exit { gsh_fo++; gsh_d--; }; \
        at ackermann entry { gsh_ai++; }; at ackermann exit { gsh_ao++; }; \
        at even entry { gsh_ei++; }; at even exit { gsh_eo++; }; \
        at odd entry { gsh_oi++; }; at odd exit { gsh_oo++; }; \
        at main exit { printf(\"gsh: fib=%ld/%ld depth=%ld/%ld ack=%ld/%ld even=%ld/%ld odd=%ld/%ld\\n\", \
        gsh_fi, gsh_fo, gsh_max, gsh_d, gsh_ai, gsh_ao, gsh_ei, gsh_eo, gsh_oi, gsh_oo); }";
    let out = out_path("recursion-O0");
    instrument(script, &m.path(Variant::O0), &out);
    let (code, stdout) = stdout_of(&out, &[]);
    assert_eq!(code, Some(0));
    let want = format!(
        "{}gsh: fib=1973/1973 depth=15/0 ack=44/44 even=10/10 odd=9/9\n",
        m.expected_stdout()
    );
    assert_eq!(stdout, want);
}

#[test]
fn cxx_exceptions_unwind_through_instrumented_frames() {
    // descend(0..3) each call check_depth; check_depth(3) throws through the descend frames
    // to main's catch. No descend returns; check_depth returns three times and leaves once
    // through its call to __cxa_throw (an exit: a call to a non-returning function).
    let m = Mutatee::new("cxx");
    let script = "declare long gsh_ci; declare long gsh_co; declare long gsh_di; declare long gsh_do; \
        at check_depth entry { gsh_ci++; }; at check_depth exit { gsh_co++; }; \
        at descend entry { gsh_di++; }; at descend exit { gsh_do++; }; \
        at main exit { printf(\"gsh: check_depth=%ld/%ld descend=%ld/%ld\\n\", gsh_ci, gsh_co, gsh_di, gsh_do); }";
    for v in [Variant::O0, Variant::O2, Variant::Pie, Variant::NoPie] {
        let out = out_path(&format!("exceptions-{}", m.file_name(v)));
        instrument(script, &m.path(v), &out);
        let (code, stdout) = stdout_of(&out, &[]);
        assert_eq!(code, Some(0), "{v:?}");
        // At -O2 gcc turns descend's recursion into a loop: one activation.
        let descend = if v == Variant::O0 { 4 } else { 1 };
        let want = format!(
            "{}gsh: check_depth=4/4 descend={descend}/0\n",
            m.expected_stdout()
        );
        assert_eq!(stdout, want, "{v:?}");
    }
}

#[test]
fn a_saved_shared_library_runs_its_snippets_in_its_users() {
    let dir = out_path("shared-user");
    let _ = std::fs::remove_dir_all(&dir);
    let link_dir = dir.join("link");
    let saved_dir = dir.join("saved");
    std::fs::create_dir_all(&link_dir).expect("link dir");
    std::fs::create_dir_all(&saved_dir).expect("saved dir");
    let lib = link_dir.join("libshared.so");
    std::fs::copy(Mutatee::new("libshared").path(Variant::O2), &lib).expect("copy libshared");
    let source = dir.join("user.c");
    std::fs::write(
        &source,
        "#include <stdio.h>\n\
         int shared_add(int, int); int shared_hash(const char *); void shared_hello(void);\n\
         int main(void) { printf(\"%d %d\\n\", shared_add(2, 3), shared_hash(\"gsh\"));\n\
         printf(\"%d\\n\", shared_add(4, 5)); shared_hello(); return 0; }\n",
    )
    .expect("write user.c");
    let user = dir.join("user");
    let mut link = std::ffi::OsString::from("-L");
    link.push(&link_dir);
    gsh_tests::run_tool(
        "gcc",
        &[
            source.into_os_string(),
            link,
            "-lshared".into(),
            "-o".into(),
            user.clone().into_os_string(),
        ],
    );
    let original = run_program(&user, &[], &[("LD_LIBRARY_PATH", &link_dir)]);
    assert!(original.status.success(), "the original library fails");

    // shared_hash("gsh") calls the static `mix` three times, and once more through the hidden
    // shared_internal; shared_hello prints the counters before its own line.
    instrument(
        "declare long gsh_add; declare long gsh_mix; declare long gsh_sum; \
         at shared_add entry { gsh_add++; gsh_sum += a * 100 + b; }; at mix entry { gsh_mix++; }; \
         at shared_hello entry { printf(\"gsh: add=%ld mix=%ld sum=%ld\\n\", gsh_add, gsh_mix, gsh_sum); }",
        &lib,
        &saved_dir.join("libshared.so"),
    );
    let saved = run_program(&user, &[], &[("LD_LIBRARY_PATH", &saved_dir)]);
    assert_eq!(saved.status.code(), Some(0));
    let original = String::from_utf8_lossy(&original.stdout).into_owned();
    let (first, hello) = original
        .split_once("hello")
        .expect("the user prints shared_hello's line last");
    let want = format!("{first}gsh: add=2 mix=4 sum=608\nhello{hello}");
    assert_eq!(String::from_utf8_lossy(&saved.stdout), want);
}

#[test]
fn exit_snippets_fire_for_tail_call_exits() {
    // forward and choose leave only by tail calls at -O2, is_even and is_odd mostly, apply by
    // an indirect one. Every activation still exits exactly once.
    let m = Mutatee::new("tailcall");
    let funcs = ["leaf", "forward", "choose", "is_even", "is_odd", "apply"];
    let mut script = String::new();
    for f in funcs {
        script.push_str(&format!(
            "declare long gsh_{f}_in; declare long gsh_{f}_out; \
             at {f} entry {{ gsh_{f}_in++; }}; at {f} exit {{ gsh_{f}_out++; }}; "
        ));
    }
    let format: Vec<String> = funcs.iter().map(|f| format!("{f}=%ld/%ld")).collect();
    let values: Vec<String> = funcs
        .iter()
        .map(|f| format!("gsh_{f}_in, gsh_{f}_out"))
        .collect();
    script.push_str(&format!(
        "at main exit {{ printf(\"gsh: {}\\n\", {}); }}",
        format.join(" "),
        values.join(", ")
    ));
    for v in [Variant::O0, Variant::O2, Variant::Pie, Variant::NoPie] {
        let out = out_path(&format!("tailexits-{}", m.file_name(v)));
        instrument(&script, &m.path(v), &out);
        let (code, stdout) = stdout_of(&out, &[]);
        assert_eq!(code, Some(0), "{v:?}");
        // leaf: from forward(4), choose(20), choose(2) via forward, apply. is_even(10) is
        // even 10, 8, ..., 0 and odd 9, ..., 1.
        let want = format!(
            "{}gsh: leaf=4/4 forward=2/2 choose=2/2 is_even=6/6 is_odd=5/5 apply=1/1\n",
            m.expected_stdout()
        );
        assert_eq!(stdout, want, "{v:?}");
    }
}

/// Calls in snippets are checked against the callee's prototype, from the C library's table
/// when the callee is an import the program's DWARF does not describe: `printf(1, 2)` used
/// to check (any arguments went) and the program died of SIGSEGV in printf.
#[test]
fn calls_to_the_c_library_are_checked_against_its_prototypes() {
    let m = Mutatee::new("basic");
    let o = gsh_c(
        "at add entry { printf(1, 2); }; show instrumentation; run",
        &m.path(Variant::O0),
    );
    o.assert_code(1);
    assert!(
        o.stderr.contains("error: cannot use `int` as `char *`")
            && o.stderr
                .contains("1 | printf(1, 2);\n  |        ^ cast it: `(char *)...`"),
        "{o}"
    );
    assert!(
        !o.stdout.contains("Instrumentation"),
        "nothing inserted:\n{o}"
    );

    // The format string is matched with its arguments; what cannot be right is refused.
    let o = gsh_c(
        "at add entry { printf(\"%s and %f\\n\", a, b); }",
        &m.path(Variant::O0),
    );
    o.assert_code(1);
    assert!(o.stderr.contains("`%s` needs a `char *`, not `int`"), "{o}");
    assert!(o.stderr.contains("`%f` needs a `double`, not `int`"), "{o}");

    // Debian's programs import the fortified `__printf_chk`: its format is checked too.
    let o = gsh_c(
        "at main exit { __printf_chk(1, \"%s\\n\", 42); }",
        Path::new("/bin/ls"),
    );
    o.assert_code(1);
    assert!(o.stderr.contains("`%s` needs a `char *`, not `int`"), "{o}");

    // What is right still runs, live.
    let o = gsh_c(
        "at add entry { printf(\"gsh: %d+%d\\n\", a, b); }; run",
        &m.path(Variant::O0),
    );
    o.assert_code(0);
    assert!(o.stdout.contains("gsh: 2+3\ngsh: 5+11\n"), "{o}");
}

/// A call to a function another library defines is checked against that library's DWARF
/// (the program's own DWARF does not describe its imports), once gsh has the library open:
/// named in a command, or loaded in a live process.
#[test]
fn calls_into_a_library_are_checked_against_its_dwarf() {
    let dir = out_path("shared-prototypes");
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("dir");
    let lib = dir.join("libshared.so");
    std::fs::copy(Mutatee::new("libshared").path(Variant::O0), &lib).expect("copy libshared");
    let source = dir.join("user.c");
    std::fs::write(
        &source,
        "int shared_hash(const char *);\nint main(void) { return shared_hash(\"gsh\") == 42; }\n",
    )
    .expect("write user.c");
    let user = dir.join("user");
    let mut rpath = std::ffi::OsString::from("-Wl,-rpath,");
    rpath.push(&dir);
    let mut link = std::ffi::OsString::from("-L");
    link.push(&dir);
    gsh_tests::run_tool(
        "gcc",
        &[
            source.into_os_string(),
            link,
            rpath,
            "-lshared".into(),
            "-o".into(),
            user.clone().into_os_string(),
        ],
    );
    // Static: the library is open once a command named it.
    let o = gsh_c(
        "whatis libshared.so!shared_hash; at main entry { shared_hash(42); }",
        &user,
    );
    o.assert_code(1);
    assert!(o.stderr.contains("cannot use `int` as `char *`"), "{o}");
    // Live: the library is loaded when the snippet goes in.
    let o = gsh_c("at main entry { shared_hash(42); }; start", &user);
    o.assert_code(1);
    assert!(o.stderr.contains("cannot use `int` as `char *`"), "{o}");
    // A right call runs (the program imports nothing else to print with).
    let o = gsh_c(
        "declare long h; at main entry { h = shared_hash(\"gsh\"); }; start; continue; print h",
        &user,
    );
    o.assert_code(0);
    assert!(o.stdout.contains("h = "), "{o}");
}

/// The source line of `needle`'s first occurrence in the mutatee's source.
fn source_line(file: &str, needle: &str) -> usize {
    let path = gsh_tests::mutatee_source_dir().join(file);
    let text = std::fs::read_to_string(&path).expect("mutatee source");
    text.lines()
        .position(|l| l.contains(needle))
        .map(|i| i + 1)
        .unwrap_or_else(|| panic!("`{needle}` is not in {}", path.display()))
}

#[test]
fn context_variables_say_each_points_facts_when_saved_and_live() {
    let m = Mutatee::new("basic");
    let script = "at main call add after { printf(\"after %s in %s at %s:%d\\n\", $callee, $function, $file, $line); }; \
                  at inc entry { printf(\"entry %s %s:%d\\n\", $function, $file, $line); }";
    let first_add = source_line("basic.c", "int s = add(2, 3);");
    let second_add = source_line("basic.c", "s = add(s, inc(10));");
    let inc = source_line("basic.c", "NOINLINE int inc(int x)");
    let want = format!(
        "after add in main at mutatees/basic.c:{first_add}\nentry inc mutatees/basic.c:{inc}\n\
         after add in main at mutatees/basic.c:{second_add}\n{}",
        m.expected_stdout()
    );
    let out = out_path("context-basic");
    instrument(script, &m.path(Variant::O0), &out);
    let (code, stdout) = stdout_of(&out, &[]);
    assert_eq!(code, Some(0));
    assert_eq!(stdout, want);
    // The same requests inserted into a live process.
    let o = gsh_c(
        &format!("{script}; run > {}.live", out.display()),
        &m.path(Variant::O0),
    );
    o.assert_code(0);
    let live = std::fs::read_to_string(format!("{}.live", out.display())).expect("output");
    assert_eq!(live, want);
    // And in a breakpoint's condition: stop only at the second call to add (whose second
    // argument is inc(10)).
    let o = gsh_c(
        &format!(
            "break main call add before if ($line == {second_add}); run > {}.break; print $1",
            out.display()
        ),
        &m.path(Variant::O0),
    );
    o.assert_code(0);
    assert!(o.stdout.contains("$1 = 11\n"), "{}", o.stdout);
}

#[test]
fn loop_header_block_and_instruction_points_count_every_iteration() {
    // collatz_steps(27) takes 111 steps, so its loop header (at -O0 the `while` test) runs
    // 112 times: the iteration begin, the block entry there and the point after its first
    // instruction all see each one. Points on edges are refused, saying why.
    let m = Mutatee::new("loops");
    let exe = m.path(Variant::O0);
    let loops = gsh_tests::gsh_json("loops collatz_steps", &exe);
    let header = loops["rows"][0]["header"]
        .as_str()
        .unwrap_or_else(|| panic!("{loops}"))
        .to_owned();
    let out = out_path("loops-header-points");
    let stdout = instrument(
        &format!(
            "declare long it; declare long bl; declare long ins; \
             at collatz_steps loop loop_1 iter-begin {{ it++; }}; \
             at collatz_steps block {header} {{ bl++; }}; \
             at collatz_steps insn {header} after {{ ins++; }}; \
             at main exit {{ printf(\"gsh: %ld %ld %ld\\n\", it, bl, ins); }}"
        ),
        &exe,
        &out,
    );
    assert!(stdout.contains("Points"), "{stdout}");
    let (code, text) = stdout_of(&out, &[]);
    assert_eq!(code, Some(0));
    assert!(text.contains("collatz=111\n"), "{text}");
    assert!(text.contains("gsh: 112 112 112\n"), "{text}");
    let o = gsh_c(
        &format!("at collatz_steps edge {header} {header} {{ }}"),
        &exe,
    );
    o.assert_code(1);
    assert!(o.stderr.contains("no edge from the block"), "{}", o.stderr);
}
