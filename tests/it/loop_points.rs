//! Loop points (issue 16) placed through edge placement and edge trampolines, in a saved
//! binary and a live process: entry, exit, iter-begin and iter-end counted exactly, with the
//! mutatee's own output unchanged, at -O0 and -O2, PIE and non-PIE, and stripped (loops found
//! by the stripped binary's own analysis, named by their header addresses).
//!
//! `loops.c` has nests, siblings and calls in loops; `loops_exits.c` leaves its loops by
//! `break`, `return`, `goto`, `longjmp` (from the loop's function and from a callee),
//! iterates with `continue` and do-while, has a loop whose header is the function's first
//! block at -O2 (entered by the call itself; the function's `entry` point is once per call
//! there too), and a lone conditional branch whose two edges are counted as `edge` points.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use gsh_tests::{gsh_c, gsh_json, run_program, target_dir, Mutatee, Variant};

/// One loop and what its four points count in one run of the mutatee:
/// `[entries, exits, iteration begins, iteration ends]` at -O0 and at -O2 (the -O2 figures
/// hold for every build made with -O2: PIE, non-PIE, stripped).
struct Case {
    func: &'static str,
    name: &'static str,
    o0: [u64; 4],
    o2: [u64; 4],
}

const fn case(func: &'static str, name: &'static str, o0: [u64; 4], o2: [u64; 4]) -> Case {
    Case { func, name, o0, o2 }
}

/// `loops.c`. Entries follow from the calls in `main` (`nested(6)`, `collatz_steps(27)`,
/// `siblings(10)`, `calls_in_loop(24)`), and every loop is left once per entry. An
/// iteration is a pass through the header, so it includes the last test that leaves the loop
/// where the header is that test (gcc's -O0 `for` and `while`, tested at the bottom and
/// entered by a jump there: `n + 1` passes per entry); gcc's -O2 rotates the loops behind a
/// guard, so the header is the body's top and runs `n` times per entry.
const LOOPS: &[Case] = &[
    case("nested", "loop_1", [1, 1, 7, 7], [1, 1, 6, 6]),
    case("nested", "loop_1.1", [6, 6, 42, 42], [6, 6, 36, 36]),
    case(
        "nested",
        "loop_1.1.1",
        [36, 36, 252, 252],
        [36, 36, 216, 216],
    ),
    case(
        "collatz_steps",
        "loop_1",
        [1, 1, 112, 112],
        [1, 1, 111, 111],
    ),
    case("siblings", "loop_1", [1, 1, 11, 11], [1, 1, 10, 10]),
    case("siblings", "loop_2", [1, 1, 11, 11], [1, 1, 10, 10]),
    case("calls_in_loop", "loop_1", [1, 1, 25, 25], [1, 1, 24, 24]),
];

/// `loops_exits.c`: each function is called twice, its loop entered once per call (the
/// inner loop of `with_goto` once per outer iteration reached) and left once per entry, by
/// the way the comment names, except where a callee's `longjmp` leaves it.
const EXITS: &[Case] = &[
    // break at i == 3, then the test fails at i == 10: -O0 tests i = 0..3 and 0..10 (4 + 11
    // passes); -O2's header is the body, run for i = 0..2 and 0..9 (3 + 10).
    case("with_break", "loop_1", [2, 2, 15, 15], [2, 2, 13, 13]),
    // return at i == 4: 5 + 11 tests at -O0, 4 + 10 bodies at -O2.
    case("with_return", "loop_1", [2, 2, 16, 16], [2, 2, 14, 14]),
    // goto out of both loops at (i, j) = (2, 2) of a 5x5 nest, then a full 5x5 search: the
    // outer test runs 3 + 6 times at -O0, and the inner loop is entered 3 + 5 times, its test
    // running 6 + 6 + 3 and 5 * 6 times. gcc -O2 makes the nest one loop whose header steps
    // j: 5 + 5 + 2 passes, then 25.
    case("with_goto", "loop_1", [2, 2, 9, 9], [2, 2, 37, 37]),
    // `continue` (i % 3 == 0) stays in the loop: 11 + 8 tests at -O0, 10 + 7 bodies at -O2.
    case("with_continue", "loop_1", [2, 2, 19, 19], [2, 2, 17, 17]),
    // do-while: the header is the body at every level; 1 pass for v = 1, 6 for v = 100.
    case("do_while", "loop_1", [2, 2, 7, 7], [2, 2, 7, 7]),
    // longjmp from the loop's own body at i == 2 is a call that never returns, so the edge
    // into its block is an exit: 7 + 3 tests at -O0, 6 + 2 bodies at -O2.
    case("jump_here", "loop_1", [2, 2, 10, 10], [2, 2, 8, 8]),
    // longjmp from a callee at i == 3 leaves the loop by no edge of this function: the second
    // entry has no exit, and its fourth iteration no end. Entries and exits do not balance:
    // 2 entries, 1 exit; 7 + 4 begins and 6 + 4 ends at -O0, 6 + 4 and 5 + 4 at -O2.
    case("jump_in_callee", "loop_1", [2, 1, 11, 10], [2, 1, 10, 9]),
    // A do-while whose header is the function's first block at -O2: the call itself enters
    // the loop, and the function is copied whole so that the back edges skip the entry's
    // snippets. 7 passes for seed 1, 8 for seed 8.
    case("header_first", "loop_1", [2, 2, 15, 15], [2, 2, 15, 15]),
];

/// The inner loop of `with_goto`, which gcc -O2 merges into its parent.
const EXITS_O0_ONLY: &[Case] = &[case("with_goto", "loop_1.1", [8, 8, 45, 45], [0; 4])];

const POINTS: [&str; 4] = ["entry", "exit", "iter-begin", "iter-end"];

/// How the test names a loop in one build: by function and loop name, or, stripped, both by
/// the header's address (`at 0x12f0 loop 0x12f0 entry`: the function containing it).
fn loop_spec(c: &Case, headers: Option<&BTreeMap<(String, String), String>>) -> (String, String) {
    match headers {
        None => (c.func.to_owned(), c.name.to_owned()),
        Some(h) => {
            let a = h
                .get(&(c.func.to_owned(), c.name.to_owned()))
                .unwrap_or_else(|| panic!("no header for {} {} in the -O2 build", c.func, c.name))
                .clone();
            (a.clone(), a)
        }
    }
}

/// Every loop of `exe` as `loops '*'` lists it: `(function, loop) -> header address`.
fn headers(exe: &Path) -> BTreeMap<(String, String), String> {
    let v = gsh_json("loops '*'", exe);
    let rows = v["rows"].as_array().expect("loops rows");
    rows.iter()
        .map(|r| {
            let s = |k: &str| r[k].as_str().expect("a string field").to_owned();
            ((s("function"), s("loop")), s("header"))
        })
        .collect()
}

/// One counted point: its `at` specification and the count it must reach.
struct Counted {
    label: String,
    point: String,
    want: u64,
}

/// The points of `cases` in build `v` of a mutatee, with their expected counts.
fn loop_points(
    cases: &[Case],
    v: Variant,
    headers: Option<&BTreeMap<(String, String), String>>,
) -> Vec<Counted> {
    let mut out = Vec::new();
    for c in cases {
        let want = if v == Variant::O0 { c.o0 } else { c.o2 };
        let (f, l) = loop_spec(c, headers);
        for (k, at) in POINTS.iter().enumerate() {
            out.push(Counted {
                label: format!("{} {} {at}", c.func, c.name),
                point: format!("{f} loop {l} {at}"),
                want: want[k],
            });
        }
    }
    out
}

/// The two edges of `sign_split`'s conditional branch, counted: at -O0 it is `jns` (taken
/// for the 5 values that are not negative), at -O2 `js` (taken for the 3 negative ones).
fn edge_points(exe_for_cfg: &Path, v: Variant, by_addr: bool) -> Vec<Counted> {
    let cfg = gsh_json("cfg sign_split", exe_for_cfg);
    let blocks = cfg["blocks"]["rows"].as_array().expect("blocks");
    let branch: Vec<&str> = blocks
        .iter()
        .filter(|b| b["exit"] == "branch")
        .map(|b| b["start"].as_str().expect("start"))
        .collect();
    assert_eq!(
        branch.len(),
        1,
        "sign_split has one conditional branch: {cfg}"
    );
    let entry = cfg["function"]["entry"].as_str().expect("entry");
    let func = if by_addr { entry } else { "sign_split" };
    let (taken, fall) = if v == Variant::O0 { (5, 3) } else { (3, 5) };
    let edges = cfg["edges"]["rows"].as_array().expect("edges");
    let mut out = Vec::new();
    for e in edges.iter().filter(|e| e["from"] == branch[0]) {
        let kind = e["kind"].as_str().expect("kind");
        let to = e["to"].as_str().expect("to");
        out.push(Counted {
            label: format!("sign_split edge {kind}"),
            point: format!("{func} edge {} {to}", branch[0]),
            want: if kind == "taken" { taken } else { fall },
        });
    }
    assert_eq!(out.len(), 2, "a conditional branch has two edges: {cfg}");
    out
}

/// `classify`'s jump-table edges into case blocks nothing else reaches: `calls_in_loop(24)`
/// calls it with 0..23, so each of the twelve cases runs twice. gcc makes the table at -O0
/// and -O2 alike.
fn jump_table_edges(m: &Mutatee, v: Variant) -> Vec<Counted> {
    let stripped = v == Variant::Stripped;
    let exe = if stripped {
        m.path(Variant::O2)
    } else {
        m.path(v)
    };
    let cfg = gsh_json("cfg classify", &exe);
    let edges = cfg["edges"]["rows"].as_array().expect("edges");
    let into = |to: &serde_json::Value| edges.iter().filter(|e| &e["to"] == to).count();
    let func = if stripped {
        cfg["function"]["entry"].as_str().expect("entry")
    } else {
        "classify"
    };
    let table: Vec<Counted> = edges
        .iter()
        .filter(|e| e["kind"] == "jump-table" && into(&e["to"]) == 1)
        .map(|e| {
            let (from, to) = (
                e["from"].as_str().expect("from"),
                e["to"].as_str().expect("to"),
            );
            Counted {
                label: format!("classify case {to}"),
                point: format!("{func} edge {from} {to}"),
                want: 2,
            }
        })
        .collect();
    assert!(table.len() >= 10, "classify's jump table: {cfg}");
    table
}

/// The script counting every point into its own variable, printing them all at `main`'s exit,
/// and the lines it must print.
fn script(points: &[Counted]) -> (String, String) {
    let mut s = String::new();
    let mut want = String::new();
    let mut fmt = String::new();
    let mut args = Vec::new();
    for (i, p) in points.iter().enumerate() {
        s.push_str(&format!(
            "declare long c{i}; at {} {{ c{i}++; }}; ",
            p.point
        ));
        fmt.push_str(&format!("gsh: {} %ld\\n", p.label));
        args.push(format!("c{i}"));
        want.push_str(&format!("gsh: {} {}\n", p.label, p.want));
    }
    s.push_str(&format!(
        "at main exit {{ printf(\"{fmt}\", {}); }}",
        args.join(", ")
    ));
    (s, want)
}

/// Counts `points` in build `v` of `m`, saved and live, and compares the program's output
/// and the counts with what they must be. Returns `save`'s report.
fn check(m: &Mutatee, v: Variant, points: &[Counted]) -> String {
    let (script, counts) = script(points);
    let want = format!("{}{counts}", m.expected_stdout());
    let exe = m.path(v);
    let dir = target_dir().join("instrumented");
    std::fs::create_dir_all(&dir).expect("create target/instrumented");
    let out = dir.join(format!("loop-points-{}", m.file_name(v)));
    let o = gsh_c(&format!("{script}; save {}", out.display()), &exe);
    o.assert_code(0);
    let saved = o.stdout.clone();
    let r = run_program(&out, &[], &[]);
    assert_eq!(r.status.code(), Some(0), "{v:?} saved:\n{o}");
    assert_eq!(
        String::from_utf8_lossy(&r.stdout),
        want,
        "{} saved:\n{o}",
        m.file_name(v)
    );
    // The same requests in a live process.
    let live = dir.join(format!("loop-points-{}.live", m.file_name(v)));
    let o = gsh_c(&format!("{script}; run > {}", live.display()), &exe);
    o.assert_code(0);
    let text = std::fs::read_to_string(&live).expect("live output");
    assert_eq!(text, want, "{} live:\n{o}", m.file_name(v));
    saved
}

/// The loops of the stripped build are the -O2 build's, found without symbols: the same
/// headers. Returns the -O2 build's headers by function and loop name.
fn stripped_headers(m: &Mutatee) -> BTreeMap<(String, String), String> {
    let named = headers(&m.path(Variant::O2));
    let stripped: BTreeSet<String> = headers(&m.path(Variant::Stripped)).into_values().collect();
    let want: BTreeSet<String> = named.values().cloned().collect();
    assert_eq!(stripped, want, "the stripped build's loop headers");
    named
}

fn loops_in(v: Variant) {
    let m = Mutatee::new("loops");
    let headers = (v == Variant::Stripped).then(|| stripped_headers(&m));
    let mut points = loop_points(LOOPS, v, headers.as_ref());
    points.extend(jump_table_edges(&m, v));
    // `loop '*'`: every loop of the function, here the whole nest.
    let f = loop_spec(&LOOPS[0], headers.as_ref()).0;
    for (k, at) in POINTS.iter().enumerate() {
        let all: u64 = LOOPS
            .iter()
            .filter(|c| c.func == "nested")
            .map(|c| if v == Variant::O0 { c.o0[k] } else { c.o2[k] })
            .sum();
        points.push(Counted {
            label: format!("nested every loop {at}"),
            point: format!("{f} loop '*' {at}"),
            want: all,
        });
    }
    check(&m, v, &points);
}

fn exits_in(v: Variant) {
    let m = Mutatee::new("loops_exits");
    let headers = (v == Variant::Stripped).then(|| stripped_headers(&m));
    let mut points = loop_points(EXITS, v, headers.as_ref());
    if v == Variant::O0 {
        points.extend(loop_points(EXITS_O0_ONLY, v, None));
    }
    let cfg_of = if v == Variant::Stripped {
        m.path(Variant::O2)
    } else {
        m.path(v)
    };
    points.extend(edge_points(&cfg_of, v, v == Variant::Stripped));
    // The function's entry is once per call even where its first block is a loop header
    // (-O2): it counted every back edge to it as well (15).
    let (f, _) = loop_spec(&EXITS[EXITS.len() - 1], headers.as_ref());
    points.push(Counted {
        label: "header_first entry".into(),
        point: format!("{f} entry"),
        want: 2,
    });
    check(&m, v, &points);
}

#[test]
fn loop_counts_are_exact_at_o0() {
    loops_in(Variant::O0);
}

#[test]
fn loop_counts_are_exact_at_o2() {
    loops_in(Variant::O2);
}

#[test]
fn loop_counts_are_exact_in_a_pie() {
    loops_in(Variant::Pie);
}

#[test]
fn loop_counts_are_exact_without_pie() {
    loops_in(Variant::NoPie);
}

#[test]
fn loop_counts_are_exact_stripped_by_header_address() {
    loops_in(Variant::Stripped);
}

#[test]
fn loops_left_every_way_count_exactly_at_o0() {
    exits_in(Variant::O0);
}

#[test]
fn loops_left_every_way_count_exactly_at_o2() {
    exits_in(Variant::O2);
}

#[test]
fn loops_left_every_way_count_exactly_in_a_pie() {
    exits_in(Variant::Pie);
}

#[test]
fn loops_left_every_way_count_exactly_without_pie() {
    exits_in(Variant::NoPie);
}

#[test]
fn loops_left_every_way_count_exactly_stripped_by_header_address() {
    exits_in(Variant::Stripped);
}

/// A loop that runs through a cold part, stripped (`loops_cold.c`, python3's `sub_55f7b0`):
/// the cold part's CFG runs through its parent's loop back to its own start, so a point on
/// that loop's entry copies the cold part whole, and the copy holds the parent's loop header,
/// which the parent's first block falls into in the original code. Every way into the copied
/// code from code the copy does not replace must enter the copy: the parent's loop counted 8
/// iteration begins and 11 ends of 19, and 3 exits of 4, when the copy took the header for
/// dead code. `coldsum` sums 5, 3, 2 and 5 values: 4 entries and exits, n + 1 header passes
/// per call.
#[test]
fn a_loop_through_a_cold_part_copied_whole_counts_exactly() {
    let m = Mutatee::new("loops_cold");
    let exe = m.path(Variant::Stripped);
    let loops = headers(&exe);
    let parent = loops
        .keys()
        .find(|(f, l)| l == "loop_1" && loops.contains_key(&(format!("{f}.cold"), l.clone())))
        .map(|(f, _)| f.clone())
        .unwrap_or_else(|| panic!("coldsum's loop, and its cold part's own: {loops:?}"));
    let cold = format!("{parent}.cold");
    let mut points: Vec<Counted> = POINTS
        .iter()
        .zip([4, 4, 19, 19])
        .map(|(at, want)| Counted {
            label: format!("coldsum loop {at}"),
            point: format!("{parent} loop loop_1 {at}"),
            want,
        })
        .collect();
    // The cold part's loop is entered by no call; its entry copies the cold part whole.
    points.push(Counted {
        label: "cold part loop entry".into(),
        point: format!("{cold} loop loop_1 entry"),
        want: 0,
    });
    let saved = check(&m, Variant::Stripped, &points);
    // The saved copy really was made by copying the cold part whole.
    assert!(
        saved.contains("relocate-function 1"),
        "the cold part is copied whole:\n{saved}"
    );
}

/// The edge after a call into a block a branch reaches too (`loops_cold.c`'s `callmerge`,
/// called with 0..8): the function is copied whole, the callee returns into the original
/// code, whose jump into the copy runs the edge's snippets, and the branch in the copy skips
/// them. The call's edge is taken for the 4 odd values, the branch's for the 4 even ones, and
/// the block they meet at runs 8 times. The call's edge was refused before ("leaves a block
/// ending in `call` for a block with several predecessors").
#[test]
fn an_edge_after_a_call_into_a_shared_block_counts_exactly() {
    let m = Mutatee::new("loops_cold");
    for v in [Variant::O2, Variant::Pie] {
        let cfg = gsh_json("cfg callmerge", &m.path(v));
        let edges = cfg["edges"]["rows"].as_array().expect("edges");
        let edge = |kind: &str| {
            let e = edges
                .iter()
                .find(|e| e["kind"] == kind)
                .unwrap_or_else(|| panic!("callmerge has a {kind} edge: {cfg}"));
            let s = |k: &str| e[k].as_str().expect("an address").to_owned();
            (s("from"), s("to"))
        };
        let (call, join) = edge("call-ft");
        let (branch, also) = edge("taken");
        assert_eq!(join, also, "the call and the branch meet: {cfg}");
        let points = [
            Counted {
                label: "callmerge edge after the call".into(),
                point: format!("callmerge edge {call} {join}"),
                want: 4,
            },
            Counted {
                label: "callmerge edge of the branch".into(),
                point: format!("callmerge edge {branch} {join}"),
                want: 4,
            },
            Counted {
                label: "callmerge block where they meet".into(),
                point: format!("callmerge block {join}"),
                want: 8,
            },
        ];
        let saved = check(&m, v, &points);
        assert!(
            saved.contains("relocate-function 1") && !saved.contains("skipped"),
            "callmerge is copied whole and nothing is skipped:\n{saved}"
        );
    }
}

/// `show points FUNC` lists every loop's four kinds of point, each with its loop and the edge
/// it sits on, and `show points FUNC loop LOOP` only that loop's; each is placed with a jump
/// at -O0 (none skipped, no trap); a loop that is not there is an error naming `loops`.
#[test]
fn show_points_lists_loop_points_with_their_loop_and_edge() {
    let m = gsh_tests::Mutatee::new("loops");
    let exe = m.path(Variant::O0);
    let all = gsh_json("show points nested", &exe);
    let rows = all["rows"].as_array().expect("rows");
    let field = |r: &serde_json::Value, k: &str| r[k].as_str().unwrap_or("").to_owned();
    let kinds: BTreeSet<(String, String)> = rows
        .iter()
        .filter(|r| field(r, "point").starts_with("loop-"))
        .map(|r| (field(r, "loop"), field(r, "point")))
        .collect();
    for name in ["loop_1", "loop_1.1", "loop_1.1.1"] {
        for kind in [
            "loop-entry",
            "loop-exit",
            "loop-iter-begin",
            "loop-iter-end",
        ] {
            assert!(
                kinds.contains(&(name.to_owned(), kind.to_owned())),
                "{name} {kind} missing: {kinds:?}"
            );
        }
    }
    assert!(rows.iter().any(|r| field(r, "point") == "entry"));
    // Entry, exit and iteration-end points sit on edges, `FROM->TO`; iter-begin on the header.
    for r in rows
        .iter()
        .filter(|r| field(r, "point").starts_with("loop-"))
    {
        let on_edge = field(r, "point") != "loop-iter-begin";
        assert_eq!(field(r, "edge").contains("->"), on_edge, "{r}");
    }

    let one = gsh_json("show points nested loop loop_1.1", &exe);
    let rows = one["rows"].as_array().expect("rows");
    assert!(!rows.is_empty());
    for r in rows {
        assert_eq!(field(r, "loop"), "loop_1.1", "{r}");
        let tactic = field(r, "tactic");
        assert!(tactic != "skipped" && tactic != "trap", "{r}");
    }

    let o = gsh_c("show points nested loop loop_9", &exe);
    assert_ne!(o.code, Some(0));
    assert!(o.stderr.contains("no loop named `loop_9`"), "{}", o.stderr);
}

/// The target of each entry of `step`'s table in `exe`: `count` entries at `table`, 8-byte
/// addresses, or (in a PIE) 4-byte offsets from the table, read from the file itself.
fn table_targets(exe: &Path, table: u64, count: u64, pie: bool) -> Vec<u64> {
    use object::{Object, ObjectSection};
    let data = std::fs::read(exe).expect("read the mutatee");
    let file = object::File::parse(&*data).expect("an ELF file");
    let stride = if pie { 4 } else { 8 };
    let bytes = file
        .sections()
        .find_map(|s| {
            let at = table.checked_sub(s.address())?;
            (at < s.size()).then(|| s.data().expect("section data")[at as usize..].to_vec())
        })
        .expect("the table is in a section");
    (0..count as usize)
        .map(|i| {
            let e = &bytes[i * stride..(i + 1) * stride];
            match pie {
                false => u64::from_le_bytes(e.try_into().expect("8 bytes")),
                true => {
                    table.wrapping_add(i32::from_le_bytes(e.try_into().expect("4 bytes")) as u64)
                }
            }
        })
        .collect()
}

/// Jump-table edges into blocks other edges reach too (`tables.c`'s `step`: cases falling
/// into the next case's block, a hole leading to the default the guard reaches), each counted
/// exactly in a saved binary and a live process: the count of an edge is the number of
/// dispatches of the values whose entries lead to its target, as the program counts them
/// itself. The default block's own entry point counts every way in (values 7 to 10) beside the
/// table's stub into it. These edges were skipped before ("an edge of an indirect jump (a jump
/// table) to a block with other ways in cannot be instrumented on its own yet").
#[test]
fn jump_table_edges_into_shared_blocks_count_exactly() {
    let m = Mutatee::new("tables");
    let expected = m.expected_stdout();
    let dispatched: Vec<u64> = expected
        .lines()
        .filter_map(|l| l.strip_prefix("op "))
        .map(|l| {
            l.split(": ")
                .nth(1)
                .expect("a count")
                .parse()
                .expect("a number")
        })
        .collect();
    assert_eq!(dispatched.len(), 11, "{expected}");
    for v in [Variant::O0, Variant::NoPie, Variant::Pie] {
        let exe = m.path(v);
        let cfg = gsh_json("cfg step", &exe);
        let tables = cfg["function"]["jump_tables"]
            .as_array()
            .expect("jump tables");
        assert_eq!(tables.len(), 1, "{v:?}: {cfg}");
        let words: Vec<&str> = tables[0].as_str().expect("text").split(' ').collect();
        let addr = |w: &str| u64::from_str_radix(w.trim_start_matches("0x"), 16).expect("hex");
        let (jump, table) = (addr(words[0]), addr(words[2]));
        // `e_type` 3 (`ET_DYN`): a PIE, whose table holds offsets from itself.
        let pie = std::fs::read(&exe).expect("read the mutatee")[16] == 3;
        // Values 0..=9 go through the table (`case 9` is its last entry), 10 through the guard.
        let targets = table_targets(&exe, table, 10, pie);
        let edges = cfg["edges"]["rows"].as_array().expect("edges");
        let into = |to: &str| edges.iter().filter(|e| e["to"] == to).count();
        let from = edges
            .iter()
            .find(|e| e["kind"] == "jump-table")
            .and_then(|e| e["from"].as_str())
            .expect("a jump-table edge");
        let mut points = Vec::new();
        for e in edges.iter().filter(|e| e["kind"] == "jump-table") {
            let to = e["to"].as_str().expect("to");
            if into(to) < 2 {
                continue;
            }
            let want = (0..10)
                .filter(|&i| targets[i] == addr(to))
                .map(|i| dispatched[i])
                .sum();
            points.push(Counted {
                label: format!("step table edge to {to}"),
                point: format!("step edge {from} {to}"),
                want,
            });
        }
        assert!(
            points.len() >= 3,
            "{v:?}: step's table edges into shared blocks (jump at {jump:#x}): {cfg}"
        );
        let default = edges
            .iter()
            .find(|e| e["kind"] == "taken" && e["from"] == cfg["function"]["entry"])
            .and_then(|e| e["to"].as_str())
            .expect("the guard's branch to the default");
        points.push(Counted {
            label: "step default block".into(),
            point: format!("step block {default}"),
            want: dispatched[7..].iter().sum(),
        });
        let saved = check(&m, v, &points);
        assert!(
            !saved.contains("kipped"),
            "{v:?}: nothing is skipped:\n{saved}"
        );
    }
}

/// python3's `sub_62daa0` jumps into its cold part at an `add rsp` that follows an `or` in
/// one block of the cold part's own CFG. Placing that cold part's loop_2 exit (an edge from a
/// short block, by a pun) evicted both instructions into a trampoline and wrote the evicting
/// `jmp` over the `add`: the parent's jump landed inside it, and the saved python3 crashed
/// before its first `print`. Such a jump target now counts as a way in from another function.
#[test]
fn a_parents_jump_into_its_cold_part_is_kept_by_an_eviction() {
    let python = Path::new("/usr/bin/python3.11");
    if !python.exists() {
        eprintln!("skipped: no {}", python.display());
        return;
    }
    let dir = target_dir().join("loop-points-python");
    std::fs::create_dir_all(&dir).expect("create the output directory");
    let out = dir.join("python3");
    let o = gsh_c(
        &format!(
            "declare long n; at sub_62daa0.cold loop loop_2 exit {{ n++; }}; \
             at sub_62daa0.cold loop loop_2 iter-end {{ n++; }}; save {}",
            out.display()
        ),
        python,
    );
    if o.stderr.contains("sub_62daa0.cold") && o.code != Some(0) {
        // Another build of python3 3.11 splits its functions elsewhere.
        eprintln!("skipped: this python3 has no sub_62daa0.cold: {}", o.stderr);
        return;
    }
    o.assert_code(0);
    let r = run_program(&out, &["-I", "-c", "print(6 * 7)"], &[]);
    assert_eq!(
        String::from_utf8_lossy(&r.stdout),
        "42\n",
        "{:?}; stderr: {}",
        r.status,
        String::from_utf8_lossy(&r.stderr)
    );
}
