//! Loop measures (issue 16): `count FUNC loop LOOP` (entries, iterations) and `time FUNC loop
//! LOOP [--cpu]` (inclusive time, balanced however the loop is left) on `loopmeasure.c` and
//! `loopthrow.cpp`, in a live process and in a saved binary, at -O0 and -O2, with the
//! programs' own output unchanged; and the loop refusals.
//!
//! Both mutatees sleep 200 ms after their loops, so a loop timer that some way out of its loop
//! left open would be credited with at least that; every loop here runs in microseconds.

use std::path::Path;

use gsh_tests::{gsh_c, gsh_json_all, run_program, target_dir, Mutatee, Variant};
use serde_json::Value;

/// `(function, loop, entries, iterations at -O0, iterations at -O2)` of `loopmeasure.c`.
/// Entries follow from main's calls. An iteration is a pass through the header: at -O0 gcc
/// tests a `for` at its header, so a loop that runs out passes it once more than its body
/// runs, and one left from its body (break, return, goto, longjmp) as often as the body
/// starts; at -O2 the loops are rotated behind a guard, the header is the body's top (or,
/// where gcc peeled the first test, the step before the test) and runs once per body pass.
/// - nest3(2, 3, 4): 2, 2·3 and 2·3·4 bodies.
/// - until_break(10, 4) breaks at i == 4, until_break(3, 7) runs out: -O0 5 + 4; -O2 peels
///   `i == stop` at i = 0, so the header is the call: 4 + 3.
/// - find_first returns at i == 2, then runs out over 6: -O0 3 + 7; -O2 3 + 6.
/// - with_goto(10, 12) leaves at i == 5, with_goto(4, 100) runs out: -O0 6 + 5; -O2 peels
///   i = 0 and enters at the step: 5 + 4.
/// - even_sum(9) with `continue` on odd i: -O0 10; -O2 9.
/// - digits(7) and digits(12345), do-while: 1 + 5 at both.
/// - jumpy over (5, 2), (4, 2), (3, 9), (6, 9), (2, 9), the first two left by longjmp at
///   i == 2: -O0 3 + 3 + 4 + 7 + 3; -O2 3 + 3 + 3 + 6 + 2.
const LOOPS: &[(&str, &str, u64, u64, u64)] = &[
    ("nest3", "loop_1", 1, 3, 2),
    ("nest3", "loop_1.1", 2, 8, 6),
    ("nest3", "loop_1.1.1", 6, 30, 24),
    ("until_break", "loop_1", 2, 9, 7),
    ("find_first", "loop_1", 2, 10, 9),
    ("with_goto", "loop_1", 2, 11, 9),
    ("even_sum", "loop_1", 1, 10, 9),
    ("digits", "loop_1", 2, 6, 6),
    ("jumpy", "loop_1", 5, 20, 17),
];

/// A loop timer's total must stay below this: far above what the loops take (microseconds,
/// or a few preemptions on a loaded machine), far below the 200 ms sleep an open timer would
/// swallow.
const OPEN_TIMER: u64 = 100_000_000;

fn scratch(tag: &str) -> std::path::PathBuf {
    let dir = target_dir()
        .join("loop-measure-tests")
        .join(format!("{tag}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
    dir
}

/// The report row of `function`'s `lp` measured as `metric`.
fn row<'a>(report: &'a Value, function: &str, lp: &str, metric: &str) -> &'a Value {
    report["values"]
        .as_array()
        .expect("values")
        .iter()
        .find(|r| {
            r["function"]
                .as_str()
                .is_some_and(|f| f.starts_with(function))
                && r["loop"] == lp
                && r["metric"] == metric
        })
        .unwrap_or_else(|| panic!("no {metric} row for {function} {lp}: {report}"))
}

/// How the stripped build's functions are written and shown: by their address in the -O2
/// build it was stripped from (`0x1350` in commands, `sub_1350` in rows); other builds by name.
fn names(m: &Mutatee, v: Variant) -> impl Fn(&str) -> (String, String) {
    let addrs: Vec<(String, String)> = if v == Variant::Stripped {
        let o2 = m.path(Variant::O2);
        LOOPS
            .iter()
            .map(|l| l.0)
            .chain(["countdown", "called_into"])
            .map(|f| {
                let doc = gsh_json_all(&format!("show functions {f}"), &o2);
                let a = doc[0]["rows"][0]["address"].as_str().expect("address");
                (f.to_owned(), a.to_owned())
            })
            .collect()
    } else {
        Vec::new()
    };
    move |f: &str| match addrs.iter().find(|(n, _)| n == f) {
        Some((_, a)) => (a.clone(), format!("sub_{}", a.trim_start_matches("0x"))),
        None => (f.to_owned(), f.to_owned()),
    }
}

/// The commands measuring `loopmeasure.c`: every loop counted and timed, jumpy's also on
/// the CPU clock; nest3's loops through `'*'`, with_goto's by its header address.
fn loopmeasure_commands(exe: &Path, name: &dyn Fn(&str) -> (String, String)) -> String {
    let with_goto = name("with_goto").0;
    let header = gsh_json_all(&format!("loops {with_goto}"), exe)[0]["rows"][0]["header"]
        .as_str()
        .map(str::to_owned)
        .expect("with_goto's loop");
    let mut c = format!("count {0} loop '*'; time {0} loop '*'", name("nest3").0);
    for (f, l, ..) in LOOPS.iter().filter(|l| l.0 != "nest3") {
        let l = if *f == "with_goto" { &header } else { *l };
        c.push_str(&format!(
            "; count {0} loop {l}; time {0} loop {l}",
            name(f).0
        ));
    }
    c.push_str(&format!("; time {} loop loop_1 --cpu", name("jumpy").0));
    // Its header is its first block: entered from the caller once per call.
    c.push_str(&format!(
        "; count {0} loop loop_1; time {0} loop loop_1",
        name("countdown").0
    ));
    // A call returns into its header, which its back edge also reaches: that entry edge has
    // no place for code, so its entries are its iterations less its back edges.
    c.push_str(&format!("; count {} loop loop_1", name("called_into").0));
    c
}

/// Checks a report of [`loopmeasure_commands`] at variant `v`.
fn check_loopmeasure(
    report: &Value,
    v: Variant,
    how: &str,
    name: &dyn Fn(&str) -> (String, String),
) {
    for &(f, l, entries, it0, it2) in LOOPS {
        let iterations = if v == Variant::O0 { it0 } else { it2 };
        let f = &name(f).1;
        let c = row(report, f, l, "count");
        assert_eq!(c["calls"], entries, "{v:?} {how} {f} {l} entries: {c}");
        assert_eq!(
            c["iterations"], iterations,
            "{v:?} {how} {f} {l} iterations: {c}"
        );
        let per = c["iterations_per_entry"].as_f64().expect("per entry");
        assert!(
            (per - iterations as f64 / entries as f64).abs() < 1e-9,
            "{c}"
        );
        // Balanced: one activation per entry, closed however it was left (jumpy's twice
        // by longjmp, at its next entry), none open through the final sleep.
        let t = row(report, f, l, "time");
        assert_eq!(t["calls"], entries, "{v:?} {how} {f} {l} timer: {t}");
        let ns = t["ns"].as_u64().expect("ns");
        assert!(ns < OPEN_TIMER, "{v:?} {how} {f} {l} left open: {t}");
    }
    let cpu = row(report, &name("jumpy").1, "loop_1", "time-cpu");
    assert_eq!(cpu["calls"], 5, "{v:?} {how}: {cpu}");
    assert!(cpu["ns"].as_u64().expect("ns") < OPEN_TIMER, "{cpu}");
    // countdown(5): entered once, 5 passes through its header (the last falls out).
    let c = row(report, &name("countdown").1, "loop_1", "count");
    assert_eq!(
        (&c["calls"], &c["iterations"]),
        (&Value::from(1), &Value::from(5)),
        "{v:?} {how}: {c}"
    );
    let t = row(report, &name("countdown").1, "loop_1", "time");
    assert_eq!(t["calls"], 1, "{v:?} {how}: {t}");
    assert!(t["ns"].as_u64().expect("ns") < OPEN_TIMER, "{t}");
    // called_into(5): the same, counted through its back edges.
    let c = row(report, &name("called_into").1, "loop_1", "count");
    assert_eq!(
        (&c["calls"], &c["iterations"]),
        (&Value::from(1), &Value::from(5)),
        "{v:?} {how}: {c}"
    );
}

/// Measures `m` at `v` with `commands` live (`start`, `continue`, `report --json`) and in a
/// saved binary (run, then `report RESULTS`); checks each program's output and returns the
/// two reports.
pub(crate) fn live_and_saved(m: &Mutatee, v: Variant, commands: &str, tag: &str) -> [Value; 2] {
    let exe = m.path(v);
    let dir = scratch(&format!("{tag}-{v:?}"));
    let out = dir.join("live.out");
    let docs = gsh_json_all(
        &format!("{commands}; start > {}; continue; report", out.display()),
        &exe,
    );
    let live = docs.last().expect("a report").clone();
    let program = std::fs::read_to_string(&out).expect("live output");
    assert_eq!(program, m.expected_stdout(), "{v:?} live output");

    let saved = dir.join("saved");
    let results = dir.join("saved.json");
    let o = gsh_c(
        &format!(
            "{commands}; save {} --results {}",
            saved.display(),
            results.display()
        ),
        &exe,
    );
    o.assert_code(0);
    assert!(!o.stdout.contains("skipped"), "{v:?}: {}", o.stdout);
    let r = run_program(&saved, &[], &[]);
    assert_eq!(r.status.code(), Some(0), "{v:?} saved run");
    assert_eq!(
        String::from_utf8_lossy(&r.stdout),
        m.expected_stdout(),
        "{v:?} saved output"
    );
    let docs = gsh_json_all(&format!("report {}", results.display()), &exe);
    let saved = docs.last().expect("a report").clone();
    [live, saved]
}

#[test]
fn loop_counts_and_timers_are_exact_live_and_saved() {
    let m = Mutatee::new("loopmeasure");
    // -O0 and -O2 are PIE (the compiler's default here); the stripped build is the -O2 one.
    for v in [Variant::O0, Variant::O2, Variant::NoPie, Variant::Stripped] {
        let name = names(&m, v);
        let commands = loopmeasure_commands(&m.path(v), &name);
        let [live, saved] = live_and_saved(&m, v, &commands, "c");
        check_loopmeasure(&live, v, "live", &name);
        check_loopmeasure(&saved, v, "saved", &name);
    }
}

/// Loops left by C++ exceptions: `throws_out`'s (caught in main; closed at its next entry,
/// as a function's timer is) and `catches_in`'s (caught in the function, outside the loop:
/// closed in the landing pad, the last time too, or the sleep after would count).
#[test]
fn loop_timers_left_by_exceptions_are_balanced() {
    let m = Mutatee::new("loopthrow");
    let commands = "count throws_out loop loop_1; time throws_out loop loop_1; \
                    count catches_in loop '*'; time catches_in loop '*'; \
                    time catches_in loop loop_1 --cpu";
    for v in [Variant::O0, Variant::O2] {
        for (report, how) in live_and_saved(&m, v, commands, "cxx")
            .iter()
            .zip(["live", "saved"])
        {
            for (f, entries) in [("throws_out", 4), ("catches_in", 3)] {
                let c = row(report, f, "loop_1", "count");
                assert_eq!(c["calls"], entries, "{v:?} {how}: {c}");
                let t = row(report, f, "loop_1", "time");
                assert_eq!(t["calls"], entries, "{v:?} {how}: {t}");
                let ns = t["ns"].as_u64().expect("ns");
                assert!(ns < OPEN_TIMER, "{v:?} {how} {f} left open: {t}");
            }
            let cpu = row(report, "catches_in", "loop_1", "time-cpu");
            assert_eq!(cpu["calls"], 3, "{v:?} {how}: {cpu}");
            assert!(cpu["ns"].as_u64().expect("ns") < OPEN_TIMER, "{cpu}");
        }
    }
}

/// What cannot be measured says why: an unknown loop lists the function's loops, a header
/// address that heads no loop likewise, a function without loops says so, a loop whose
/// header is the function's first block is timed once per call, irreducible cycles are
/// named, and profiles are for functions. Loop measures show in `show instrumentation` and
/// `watch`.
#[test]
fn loop_refusals_and_where_loop_measures_show() {
    let exe = Mutatee::new("loopmeasure").path(Variant::O2);
    let err = |cmd: &str| {
        let o = gsh_c(cmd, &exe);
        o.assert_code(1);
        o.stderr
    };
    let e = err("count nest3 loop loop_9");
    assert!(
        e.contains("nest3 has no loop named `loop_9`; its loops are loop_1 (header 0x"),
        "{e}"
    );
    assert!(e.contains("loop_1.1.1 (header 0x"), "{e}");
    let e = err("time nest3 loop 0x10");
    assert!(
        e.contains("nest3 has no loop whose header is at 0x10; its loops are loop_1"),
        "{e}"
    );
    let e = err("count leaf loop '*'");
    assert!(e.contains("leaf has no loops"), "{e}");
    // A loop whose header is the function's first block is entered from the caller: its
    // entry runs once per call (the patcher's entry-block tactic), so it can be timed.
    let o = gsh_c("time countdown loop loop_1; run; report", &exe);
    o.assert_code(0);
    assert!(
        o.stdout
            .lines()
            .any(|l| l.contains("countdown loop_1  time         1  ")),
        "{}",
        o.stdout
    );
    let e = err("profile nest3 loop loop_1");
    assert!(
        e.contains("loops are measured by `count` and `time`"),
        "{e}"
    );
    let e = err("count loop loop_1");
    assert!(e.contains("`loop` needs a function before it"), "{e}");
    let e = err("count nest3 loop");
    assert!(e.contains("`nest3 loop` needs the loop"), "{e}");

    let irr = Mutatee::new("irreducible").path(Variant::O0);
    let o = gsh_c("count tangled loop '*'", &irr);
    o.assert_code(0);
    assert!(
        o.stdout.contains("tangled has irreducible cycles (0x")
            && o.stdout.contains("they form no loop and are not measured"),
        "{}",
        o.stdout
    );

    let o = gsh_c(
        "count nest3 loop '*'; time digits loop loop_1; show instrumentation; start; watch; kill",
        &exe,
    );
    o.assert_code(0);
    for want in [
        "nest3 loop * entry",
        "(count loop *)",
        "(time loop loop_1)",
        "nest3 loop_1.1.1 entries",
        "nest3 loop_1.1.1 iterations",
        "digits loop_1 time µs",
    ] {
        assert!(o.stdout.contains(want), "missing {want:?}: {}", o.stdout);
    }
}

/// On an attached server, while it runs: the worker loop was entered before gsh came, so it
/// has no entries, and each iteration calls `handle_request` once, so the two counts read at
/// one instant differ by at most one per thread; after `detach` the server runs on.
#[test]
fn loop_counts_on_an_attached_server() {
    use gsh_tests::server::spawn;
    use std::time::Duration;
    let exe = Mutatee::new("server").path(Variant::O2);
    // Twenty seconds of work (a 1 ms sleep a round), ended by the test once gsh is done: time
    // enough for gsh to attach on a loaded machine, yet the test takes only as long as gsh.
    let (threads, rounds) = (2, 20_000);
    let out = scratch("attach").join("server.out");
    let mut child = spawn(&exe, threads, rounds, &out);
    let pid = child.id();
    std::thread::sleep(Duration::from_millis(50));
    let o = gsh_tests::Gsh::new()
        .args(["--json", "-c"])
        .arg(format!(
            "attach {pid}; count worker loop loop_1; count handle_request; continue &; \
             sleep 0.15; report; detach"
        ))
        .arg(&exe)
        .run();
    let alive = child.try_wait().expect("wait").is_none();
    let _ = child.kill();
    let _ = child.wait();
    o.assert_success();
    assert!(alive, "the server ended while or after gsh was attached");
    let docs = gsh_tests::json_stream(&o);
    let report = docs
        .iter()
        .filter_map(|d| d.get("result"))
        .rev()
        .find(|d| d["values"].is_array())
        .expect("a report");
    let lp = row(report, "worker", "loop_1", "count");
    let iterations = lp["iterations"].as_u64().expect("iterations");
    let calls = report["values"]
        .as_array()
        .expect("values")
        .iter()
        .find(|r| r["function"] == "handle_request")
        .and_then(|r| r["calls"].as_u64())
        .expect("handle_request's calls");
    assert_eq!(lp["calls"], 0, "entered before the attach: {lp}");
    assert!(iterations > 0, "{report}");
    assert!(
        iterations.abs_diff(calls) <= u64::from(threads),
        "{iterations} iterations, {calls} calls: {report}"
    );
}

/// A point inside instructions an earlier insert moved away to make room for a neighbour's
/// jump (at -O2, `jump_at`'s entry has 2 bytes for a jump: it lands inside `even_sum`'s
/// instructions before its loop, which are evicted into `jump_at`'s trampoline). The loop's
/// entry used to be skipped there, so its timer read 0; it now runs in that trampoline, and
/// takes either request out first without touching the other.
#[test]
fn a_loop_entry_inside_instructions_another_insert_evicted_is_timed() {
    let m = Mutatee::new("loopmeasure");
    let commands = "count jump_at; time even_sum loop loop_1";
    for (report, how) in live_and_saved(&m, Variant::O2, commands, "evicted")
        .iter()
        .zip(["live", "saved"])
    {
        assert_eq!(
            row(report, "even_sum", "loop_1", "time")["calls"],
            1,
            "{how}: {report}"
        );
    }
    let exe = m.path(Variant::O2);
    for order in ["delete 1; continue", "delete 2; continue"] {
        let o = gsh_c(&format!("{commands}; start; {order}; report"), &exe);
        o.assert_code(0);
        assert!(!o.stdout.contains("skipped"), "{}", o.stdout);
        let timed = o
            .stdout
            .lines()
            .any(|l| l.contains("even_sum loop_1  time  ") && l.contains("  1  "));
        let counted = o
            .stdout
            .lines()
            .any(|l| l.contains("jump_at          count  ") && l.contains("  17  "));
        match order {
            "delete 1; continue" => assert!(timed, "{}", o.stdout),
            _ => assert!(counted, "{}", o.stdout),
        }
    }
    for order in ["delete 1; delete 2", "delete 2; delete 1"] {
        let o = gsh_c(&format!("{commands}; start; {order}; detach"), &exe);
        o.assert_code(0);
        assert!(
            o.stdout.contains("its code is as the files have it"),
            "{order}: {}",
            o.stdout
        );
    }
}

/// A function with thousands of irreducible cycle entries (python3's interpreter loop,
/// 17,142 of them) is named with the first few and how many more, by `loops` and by a loop
/// measure's warning alike: both once printed every one, about 300 KB of text.
#[test]
fn a_function_with_thousands_of_irreducible_cycles_is_summarised() {
    let python = Path::new("/usr/bin/python3.11");
    if !python.exists() {
        eprintln!("skipped: no {}", python.display());
        return;
    }
    for cmd in [
        "loops _PyEval_EvalFrameDefault",
        "count _PyEval_EvalFrameDefault loop loop_1",
    ] {
        let o = gsh_c(cmd, python);
        o.assert_code(0);
        let all = format!("{}{}", o.stdout, o.stderr);
        let line = all
            .lines()
            .find(|l| l.contains("irreducible cycles"))
            .unwrap_or_else(|| panic!("{cmd}: no irreducible cycles named: {all}"));
        assert!(
            line.contains(" more)") || line.contains(" more;"),
            "{cmd}: {line}"
        );
        assert!(line.len() < 2_000, "{cmd}: {} bytes", line.len());
    }
}
