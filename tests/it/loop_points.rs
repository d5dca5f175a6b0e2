//! Loop points (issue 16) placed through edge placement and edge trampolines, in a saved
//! binary and a live process: entry, exit, iter-begin and iter-end counted exactly on
//! `loops.c`, at -O0 and -O2, with the mutatee's own output unchanged.

use gsh_tests::{gsh_c, run_program, target_dir, Mutatee, Variant};

/// `(function, loop, entries, iterations at -O0, iterations at -O2)`. Entries follow from the
/// calls in `main` (`nested(6)`, `collatz_steps(27)`, `siblings(10)`, `calls_in_loop(24)`).
/// An iteration is a pass through the header, so it includes the last test that leaves
/// the loop where the header is that test (gcc's -O0 `for` and `while`, tested at the
/// bottom and entered by a jump there: `n + 1` passes per entry); gcc's -O2 rotates the
/// loops behind a guard, so the header is the body's top and runs `n` times per entry.
const LOOPS: &[(&str, &str, u64, u64, u64)] = &[
    ("nested", "loop_1", 1, 7, 6),
    ("nested", "loop_1.1", 6, 42, 36),
    ("nested", "loop_1.1.1", 36, 252, 216),
    ("collatz_steps", "loop_1", 1, 112, 111),
    ("siblings", "loop_1", 1, 11, 10),
    ("siblings", "loop_2", 1, 11, 10),
    ("calls_in_loop", "loop_1", 1, 25, 24),
];

fn script(v: Variant) -> (String, String) {
    let mut s = String::new();
    let mut want = String::new();
    let mut names = Vec::new();
    for (i, (f, l, entries, it0, it2)) in LOOPS.iter().enumerate() {
        let it = if v == Variant::O0 { it0 } else { it2 };
        for (k, at) in ["entry", "exit", "iter-begin", "iter-end"]
            .iter()
            .enumerate()
        {
            let n = format!("c{i}_{k}");
            s.push_str(&format!(
                "declare long {n}; at {f} loop {l} {at} {{ {n}++; }}; "
            ));
            names.push(n);
        }
        want.push_str(&format!("gsh: {f} {l} {entries} {entries} {it} {it}\n"));
    }
    let mut fmt = String::new();
    let mut args = Vec::new();
    for (i, (f, l, ..)) in LOOPS.iter().enumerate() {
        fmt.push_str(&format!("gsh: {f} {l} %ld %ld %ld %ld\\n"));
        args.extend((0..4).map(|k| format!("c{i}_{k}")));
    }
    s.push_str(&format!(
        "at main exit {{ printf(\"{fmt}\", {}); }}",
        args.join(", ")
    ));
    (s, want)
}

#[test]
fn loop_entry_exit_and_iteration_counts_are_exact_saved_and_live() {
    let m = Mutatee::new("loops");
    let dir = target_dir().join("instrumented");
    std::fs::create_dir_all(&dir).expect("create target/instrumented");
    for v in [Variant::O0, Variant::O2] {
        let (script, counts) = script(v);
        let want = format!("{}{counts}", m.expected_stdout());
        let exe = m.path(v);
        let out = dir.join(format!("loop-points-{v:?}"));
        let o = gsh_c(&format!("{script}; save {}", out.display()), &exe);
        o.assert_code(0);
        let r = run_program(&out, &[], &[]);
        assert_eq!(r.status.code(), Some(0), "{v:?}");
        assert_eq!(String::from_utf8_lossy(&r.stdout), want, "{v:?} saved");
        // The same requests in a live process.
        let live = dir.join(format!("loop-points-{v:?}.live"));
        let o = gsh_c(&format!("{script}; run > {}", live.display()), &exe);
        o.assert_code(0);
        let text = std::fs::read_to_string(&live).expect("live output");
        assert_eq!(text, want, "{v:?} live");
    }
}
