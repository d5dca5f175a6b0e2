//! Loops as elements of call paths (issue 16): with `profile FUNC` and a loop measure (`count`
//! or `time FUNC loop LOOP`) of a function on the path, the path shows the measured loops that
//! hold the call, between the function and its callee (`main > work > loop_1 > helper`), live
//! and from a saved binary's results; loops that are not measured do not show. Nested loops
//! show outermost first (`grid > loop_1 > loop_1.1 > helper`), and loops of several functions
//! on one path each show under their function.

use crate::loop_measure::live_and_saved;
use gsh_tests::{gsh_json_all, Mutatee, Variant};
use serde_json::Value;

/// Profiles `leaf` and `jump_at` of `loopmeasure.c`, with until_break's, jumpy's and main's
/// loops measured (even_sum's, which also calls leaf, is not).
const COMMANDS: &str = "profile leaf; profile jump_at; time until_break loop loop_1; \
    count until_break loop loop_1; time jumpy loop loop_1; count jumpy loop loop_1; \
    count main loop '*'";

/// The path row of `function` whose callers, from `main` on, are `from_main`.
fn path<'a>(report: &'a Value, function: &str, from_main: &str) -> &'a Value {
    let paths = report["paths"].as_array().expect("paths");
    paths
        .iter()
        .find(|p| {
            let callers: Vec<&str> = p["callers"]
                .as_array()
                .expect("callers")
                .iter()
                .map(|c| c.as_str().expect("a frame"))
                .collect();
            let tail = match callers.iter().position(|&c| c == "main") {
                Some(i) => callers[i..].join(" > "),
                None => callers.join(" > "),
            };
            p["function"] == function && tail == from_main
        })
        .unwrap_or_else(|| panic!("no path {from_main} > {function}: {:#}", report["paths"]))
}

/// The `metric` row of `function`'s `lp`.
fn value<'a>(report: &'a Value, function: &str, lp: &str, metric: &str) -> &'a Value {
    report["values"]
        .as_array()
        .expect("values")
        .iter()
        .find(|r| r["function"] == function && r["loop"] == lp && r["metric"] == metric)
        .unwrap_or_else(|| panic!("no {metric} of {function} {lp}: {report}"))
}

fn check(report: &Value, v: Variant, how: &str) {
    // until_break runs its body (and calls leaf) 4 + 3 times, even_sum 5 times; called_into
    // calls leaf once, before its loop (the call's return lands on the header, but the call
    // is not in the loop). jumpy calls jump_at 3 + 3 + 3 + 6 + 2 times, from main's loop.
    let ub = path(report, "leaf", "main > until_break > loop_1");
    assert_eq!(ub["calls"], 7, "{v:?} {how}: {ub}");
    let es = path(report, "leaf", "main > even_sum");
    assert_eq!(es["calls"], 5, "{v:?} {how}: {es}");
    let ja = path(report, "jump_at", "main > loop_1 > jumpy > loop_1");
    assert_eq!(ja["calls"], 17, "{v:?} {how}: {ja}");
    // No other paths: every call of leaf and jump_at is on one of these (or called_into's).
    let all: u64 = report["paths"]
        .as_array()
        .expect("paths")
        .iter()
        .filter(|p| p["function"] == "leaf")
        .map(|p| p["calls"].as_u64().expect("calls"))
        .sum();
    assert_eq!(all, 13, "{v:?} {how}: {:#}", report["paths"]);
    // A loop's inclusive time holds its callees' time on the paths through it.
    for (f, callee, p) in [("until_break", "leaf", ub), ("jumpy", "jump_at", ja)] {
        let t = value(report, f, "loop_1", "time");
        let (loop_ns, path_ns) = (t["ns"].as_u64().expect("ns"), p["ns"].as_u64().expect("ns"));
        assert!(
            path_ns <= loop_ns,
            "{v:?} {how}: {callee} under {f} loop_1 took {path_ns} ns, the loop {loop_ns} ns"
        );
    }
    // At -O2 every pass through these loops' headers runs the body once: the calls under the
    // loop element are the loop's iterations.
    if v == Variant::O2 {
        for (f, p) in [("until_break", ub), ("jumpy", ja)] {
            let c = value(report, f, "loop_1", "count");
            assert_eq!(c["iterations"], p["calls"], "{v:?} {how} {f}: {c} vs {p}");
        }
    }
}

/// Sum of `function`'s calls and ns over the paths whose callers from `main` on start with
/// `prefix`.
fn under(report: &Value, function: &str, prefix: &str) -> (u64, u64) {
    let mut sum = (0, 0);
    for p in report["paths"].as_array().expect("paths") {
        let callers: Vec<&str> = p["callers"]
            .as_array()
            .expect("callers")
            .iter()
            .map(|c| c.as_str().expect("a frame"))
            .collect();
        let Some(i) = callers.iter().position(|&c| c == "main") else {
            continue;
        };
        let path = callers[i..].join(" > ");
        if p["function"] == function
            && (path == prefix || path.starts_with(&format!("{prefix} > ")))
        {
            sum.0 += p["calls"].as_u64().expect("calls");
            sum.1 += p["ns"].as_u64().expect("ns");
        }
    }
    sum
}

/// Nested and sibling loops of one function, under a loop of its caller (`profloops.c`):
/// `twice` runs `grid(4, 5, 3)` twice; `grid` calls helper once per outer pass (4), once per
/// inner pass (4 * 5) and once per pass of its sibling loop (3); main calls it once itself.
#[test]
fn profile_paths_show_nested_and_sibling_loops() {
    let m = Mutatee::new("profloops");
    let commands = "profile helper; count grid loop '*'; time grid loop '*'; \
        count twice loop loop_1";
    for v in [Variant::O0, Variant::O2] {
        for (how, r) in ["live", "saved"]
            .into_iter()
            .zip(live_and_saved(&m, v, commands, "nested"))
        {
            let grid = "main > twice > loop_1 > grid";
            for (tail, calls) in [("loop_1", 8), ("loop_1 > loop_1.1", 40), ("loop_2", 6)] {
                let p = path(&r, "helper", &format!("{grid} > {tail}"));
                assert_eq!(p["calls"], calls, "{v:?} {how} {tail}: {p}");
            }
            assert_eq!(path(&r, "helper", "main")["calls"], 1, "{v:?} {how}");
            assert_eq!(under(&r, "helper", "main").0, 55, "{v:?} {how}");
            // Each loop's time holds the time of the calls made in it.
            for l in ["loop_1", "loop_2"] {
                let t = value(&r, "grid", l, "time")["ns"].as_u64().expect("ns");
                let (_, ns) = under(&r, "helper", &format!("{grid} > {l}"));
                assert!(
                    ns <= t,
                    "{v:?} {how}: helper in grid {l} {ns} ns, the loop {t} ns"
                );
            }
            if v == Variant::O2 {
                let c = value(&r, "grid", "loop_1.1", "count");
                assert_eq!(c["iterations"], 40, "{v:?} {how}: {c}");
            }
        }
    }
    // Only the nested loop measured: the outer one does not show, nor twice's.
    let docs = gsh_json_all(
        "profile helper; count grid loop loop_1.1; run > /dev/null; report",
        &m.path(Variant::O2),
    );
    let r = docs.last().expect("a report");
    assert_eq!(
        path(r, "helper", "main > twice > grid > loop_1.1")["calls"],
        40
    );
    assert_eq!(path(r, "helper", "main > twice > grid")["calls"], 14);
}

#[test]
fn profile_paths_show_measured_loops_live_and_saved() {
    let m = Mutatee::new("loopmeasure");
    for v in [Variant::O0, Variant::O2] {
        let [live, saved] = live_and_saved(&m, v, COMMANDS, "calls");
        check(&live, v, "live");
        check(&saved, v, "saved");
    }
}
