//! Binary analysis end to end, through `gsh --json`: loop trees of mutatees with known shapes
//! (nested, while, sibling loops, a loop calling functions, an irreducible cycle), jump-table
//! targets graded against the table's bytes as objdump locates it, tail calls, non-returning
//! error paths, C++ throw and catch (landing pads), function bounds against `.symtab`, the DOT
//! export, and a whole-library robustness run over libc and libpython.

use std::collections::BTreeSet;
use std::path::Path;
use std::time::Duration;

use gsh_tests::{gsh_json, run_tool, target_dir, truth, Gsh, Mutatee, Variant};
use serde_json::Value;

/// The variants every structural test runs on: -O0 and -O2, PIE and not.
const VARIANTS: [Variant; 4] = [Variant::O0, Variant::O2, Variant::Pie, Variant::NoPie];

fn rows(doc: &Value) -> &Vec<Value> {
    doc["rows"]
        .as_array()
        .unwrap_or_else(|| panic!("no rows in {doc}"))
}

fn hex(v: &Value) -> u64 {
    let s = v.as_str().unwrap_or_else(|| panic!("not an address: {v}"));
    u64::from_str_radix(s.trim_start_matches("0x"), 16)
        .unwrap_or_else(|_| panic!("not an address: {s}"))
}

fn strings(v: &Value) -> Vec<String> {
    v.as_array()
        .map(|a| {
            a.iter()
                .filter_map(|s| s.as_str().map(str::to_owned))
                .collect()
        })
        .unwrap_or_default()
}

/// `(address, size)` of `name` in `.symtab`.
fn symbol(path: &Path, name: &str) -> (u64, u64) {
    truth::symtab_functions(path)
        .into_iter()
        .find(|f| f.name == name)
        .map(|f| (f.addr, f.size))
        .unwrap_or_else(|| panic!("{} has no symbol {name}", path.display()))
}

/// The rows of `loops FUNC`.
fn loops_of(path: &Path, func: &str) -> Vec<Value> {
    rows(&gsh_json(&format!("loops {func}"), path)).clone()
}

/// `(name, depth)` of each loop, in the order gsh lists them (pre-order).
fn shape(loops: &[Value]) -> Vec<(String, u64)> {
    loops
        .iter()
        .map(|l| {
            (
                l["loop"].as_str().unwrap_or_default().to_owned(),
                l["depth"].as_u64().unwrap_or(0),
            )
        })
        .collect()
}

fn names(list: &[(&str, u64)]) -> Vec<(String, u64)> {
    list.iter().map(|(n, d)| ((*n).to_owned(), *d)).collect()
}

/// Checks what must hold of any loop tree: each header lies in the function, each back edge
/// ends at its loop's header, and a nested loop is smaller than the loop around it.
fn check_plausible(path: &Path, func: &str, loops: &[Value]) {
    let (start, size) = symbol(path, func);
    for l in loops {
        let name = l["loop"].as_str().unwrap_or_default();
        let header = hex(&l["header"]);
        assert!(
            header >= start && header < start + size,
            "{} {func} {name}: header {header:#x} outside the function",
            path.display()
        );
        let blocks = l["blocks"].as_u64().unwrap_or(0);
        assert!(blocks >= 1, "{func} {name}: no blocks");
        let back = strings(&l["back_edges"]);
        assert!(!back.is_empty(), "{func} {name}: no back edge");
        for e in &back {
            let (_, to) = e.split_once("->").expect("back edges are FROM->TO");
            assert_eq!(
                u64::from_str_radix(to.trim_start_matches("0x"), 16).ok(),
                Some(header),
                "{func} {name}: back edge {e} does not end at the header"
            );
        }
        if let Some((parent, _)) = name.rsplit_once('.') {
            let outer = loops
                .iter()
                .find(|o| o["loop"] == parent)
                .unwrap_or_else(|| panic!("{func} {name}: no enclosing {parent}"));
            assert!(
                outer["blocks"].as_u64().unwrap_or(0) > blocks,
                "{func}: {parent} must hold more blocks than {name}"
            );
        }
        if let Some(lines) = l["lines"].as_str() {
            assert!(lines.contains(".c:"), "{func} {name}: lines `{lines}`");
        }
    }
}

#[test]
fn loop_trees_of_known_shapes_are_exact() {
    let m = Mutatee::new("loops");
    for v in VARIANTS {
        let path = m.path(v);
        let expect: [(&str, &[(&str, u64)]); 6] = [
            (
                "nested",
                &[("loop_1", 1), ("loop_1.1", 2), ("loop_1.1.1", 3)],
            ),
            ("collatz_steps", &[("loop_1", 1)]),
            ("siblings", &[("loop_1", 1), ("loop_2", 1)]),
            ("calls_in_loop", &[("loop_1", 1)]),
            ("classify", &[]),
            ("square", &[]),
        ];
        for (func, want) in expect {
            let loops = loops_of(&path, func);
            assert_eq!(shape(&loops), names(want), "{v:?} {func}");
            check_plausible(&path, func, &loops);
        }
        // At -O0 each loop's blocks start on exactly the lines of its statement.
        if v == Variant::O0 {
            let lines: Vec<(String, String)> =
                ["nested", "collatz_steps", "siblings", "calls_in_loop"]
                    .iter()
                    .flat_map(|f| loops_of(&path, f))
                    .map(|l| {
                        (
                            l["loop"].as_str().unwrap_or("").to_owned(),
                            l["lines"].as_str().unwrap_or("-").to_owned(),
                        )
                    })
                    .collect();
            let want = [
                ("loop_1", "loops.c:39-42"),
                ("loop_1.1", "loops.c:40-42"),
                ("loop_1.1.1", "loops.c:41-42"),
                ("loop_1", "loops.c:48-49"),
                ("loop_1", "loops.c:58-59"),
                ("loop_2", "loops.c:60-61"),
                ("loop_1", "loops.c:67-69"),
            ];
            assert_eq!(lines.len(), want.len());
            for ((name, got), (want_name, want_lines)) in lines.iter().zip(want) {
                assert_eq!(name, want_name);
                assert!(
                    got.ends_with(want_lines),
                    "{name}: {got}, want {want_lines}"
                );
            }
        }
        // Sibling loops are numbered in address order of their headers.
        let sib = loops_of(&path, "siblings");
        assert!(hex(&sib[0]["header"]) < hex(&sib[1]["header"]), "{v:?}");
        // The loop's body calls both functions, by name.
        let calls = strings(&loops_of(&path, "calls_in_loop")[0]["calls"]);
        assert_eq!(calls, ["square", "classify"], "{v:?}");
    }
}

#[test]
fn loops_takes_a_glob_an_address_and_module_bang_name() {
    let path = Mutatee::new("loops").path(Variant::O2);
    let all = gsh_json("loops '*'", &path);
    let funcs: BTreeSet<&str> = rows(&all)
        .iter()
        .filter_map(|r| r["function"].as_str())
        .collect();
    assert_eq!(
        funcs,
        BTreeSet::from(["nested", "collatz_steps", "siblings", "calls_in_loop"])
    );
    assert_eq!(rows(&all).len(), 7);

    let (nested, _) = symbol(&path, "nested");
    let by_addr = loops_of(&path, &format!("{:#x}", nested + 1));
    assert_eq!(shape(&by_addr).len(), 3);
    let by_module = loops_of(&path, "loops-O2!nested");
    assert_eq!(shape(&by_module), shape(&by_addr));

    let out = gsh_tests::gsh_c("loops no_such_function", &path);
    assert_eq!(out.code, Some(1), "{out}");
    assert!(out.stderr.contains("no_such_function"), "{out}");
}

/// The jump table of the `jmp` in `func` as objdump shows it: the table's address from the
/// instructions before the jump (`lea T(%rip)` for PIE's relative tables, `T(,%rax,8)` for
/// absolute ones), its length from the guarding `cmp $N`, and its entries read from the file.
fn objdump_jump_table(path: &Path, func: &str) -> (u64, BTreeSet<u64>) {
    let text = run_tool(
        "objdump",
        &[
            "-d".as_ref(),
            "--no-show-raw-insn".as_ref(),
            path.as_os_str(),
        ],
    );
    let body: Vec<&str> = text
        .lines()
        .skip_while(|l| !l.ends_with(&format!("<{func}>:")))
        .take_while(|l| !l.is_empty())
        .collect();
    let jmp = body
        .iter()
        .position(|l| l.contains("jmp    *%r") || l.contains("jmp    *0x") || l.contains("jmp *"))
        .unwrap_or_else(|| panic!("no indirect jmp in {func} of {}", path.display()));
    let before = &body[..=jmp];
    let addr_of = |l: &str| u64::from_str_radix(l.trim().split(':').next().unwrap_or(""), 16).ok();
    let mut table = None;
    for l in before.iter().rev() {
        if let Some(i) = l.find("(,%r") {
            if l[i..].starts_with("(,%r") && l[i..].contains(",8)") {
                let start = l[..i].rfind("0x").expect("absolute table address");
                let t = u64::from_str_radix(&l[start + 2..i], 16).expect("hex");
                table = Some((t, true));
                break;
            }
        }
        if let Some((_, c)) = l.split_once("# ") {
            let t = c.split_whitespace().next().unwrap_or("");
            if let Ok(t) = u64::from_str_radix(t, 16) {
                table = Some((t, false));
                break;
            }
        }
    }
    let (table, absolute) = table.unwrap_or_else(|| panic!("no table address before the jmp"));
    let bound = before
        .iter()
        .rev()
        .find_map(|l| {
            let i = l.find("cmp")?;
            let imm = l[i..].split('$').nth(1)?.split(',').next()?;
            u64::from_str_radix(imm.trim_start_matches("0x"), 16).ok()
        })
        .expect("a guarding cmp before the jmp");
    let data = std::fs::read(path).expect("read binary");
    let file = object::File::parse(&*data).expect("parse ELF");
    let read = |addr: u64, n: usize| -> Vec<u8> {
        use object::{Object, ObjectSection};
        for s in file.sections() {
            if addr >= s.address() && addr + n as u64 <= s.address() + s.size() {
                let d = s.data().expect("section data");
                let off = (addr - s.address()) as usize;
                return d[off..off + n].to_vec();
            }
        }
        panic!("{addr:#x} is in no section");
    };
    let mut targets = BTreeSet::new();
    for i in 0..=bound {
        let t = if absolute {
            u64::from_le_bytes(read(table + 8 * i, 8).try_into().unwrap())
        } else {
            let rel = i32::from_le_bytes(read(table + 4 * i, 4).try_into().unwrap());
            table.wrapping_add(rel as i64 as u64)
        };
        targets.insert(t);
    }
    let jmp_addr = addr_of(body[jmp]).expect("jmp address");
    (jmp_addr, targets)
}

#[test]
fn switch_jump_table_targets_match_the_table_in_the_file() {
    let m = Mutatee::new("loops");
    for v in VARIANTS {
        let path = m.path(v);
        let (jmp, want) = objdump_jump_table(&path, "classify");
        assert!(want.len() >= 12, "{v:?}: {want:x?}");
        let cfg = gsh_json("cfg classify", &path);
        let tables = strings(&cfg["function"]["jump_tables"]);
        assert_eq!(tables.len(), 1, "{v:?}: {cfg}");
        assert!(
            tables[0].starts_with(&format!("{jmp:#x} via ")),
            "{v:?}: {tables:?}, objdump's jmp at {jmp:#x}"
        );
        assert!(cfg["function"]["unresolved_jumps"]
            .as_array()
            .is_none_or(|a| a.is_empty()));
        let got: BTreeSet<u64> = rows(&cfg["edges"])
            .iter()
            .filter(|e| e["kind"] == "jump-table")
            .map(|e| hex(&e["to"]))
            .collect();
        assert_eq!(got, want, "{v:?}: jump-table edges");
        // Every target starts a block.
        let starts: BTreeSet<u64> = rows(&cfg["blocks"])
            .iter()
            .map(|b| hex(&b["start"]))
            .collect();
        assert!(want.is_subset(&starts), "{v:?}");
        assert_eq!(
            gsh_json("whatis classify", &path)["jump_tables"],
            1,
            "{v:?}"
        );
    }
}

/// Every block of `func` lies in its `.symtab` range or in a `.cold` part split off it.
fn check_bounds(path: &Path, func: &str) {
    let (start, size) = symbol(path, func);
    let cold = truth::symtab_functions(path)
        .into_iter()
        .find(|f| f.name == format!("{func}.cold"))
        .map(|f| (f.addr, f.addr + f.size));
    let cfg = gsh_json(&format!("cfg {func}"), path);
    for b in rows(&cfg["blocks"]) {
        let (s, e) = (hex(&b["start"]), hex(&b["end"]));
        let inside = s >= start && e <= start + size;
        let in_cold = cold.is_some_and(|(cs, ce)| s >= cs && e <= ce);
        assert!(
            inside || in_cold,
            "{} {func}: block {s:#x}..{e:#x} outside {start:#x}..{:#x}",
            path.display(),
            start + size
        );
    }
    assert_eq!(hex(&cfg["function"]["entry"]), start);
}

#[test]
fn cfg_blocks_stay_within_function_bounds() {
    for v in VARIANTS {
        let path = Mutatee::new("loops").path(v);
        for f in [
            "nested",
            "collatz_steps",
            "siblings",
            "calls_in_loop",
            "classify",
        ] {
            check_bounds(&path, f);
        }
        let path = Mutatee::new("noreturn").path(v);
        for f in ["checked_div", "parse_mode", "after_noreturn", "main"] {
            check_bounds(&path, f);
        }
    }
}

#[test]
fn cfg_dot_file_has_every_block_and_edge() {
    let path = Mutatee::new("loops").path(Variant::O2);
    let dir = target_dir().join("analysis-tests");
    std::fs::create_dir_all(&dir).expect("create dot dir");
    let dot = dir.join(format!("classify-{}.dot", std::process::id()));
    let cfg = gsh_json(&format!("cfg classify --dot {}", dot.display()), &path);
    let text = std::fs::read_to_string(&dot).expect("the dot file was written");
    // Graphviz is not needed to run the tests; when it is installed, it must accept the file.
    if which("dot") {
        let svg = run_tool("dot", &["-Tsvg".as_ref(), dot.as_os_str()]);
        assert!(svg.contains("<svg"), "dot rejected the file");
    }
    let _ = std::fs::remove_file(&dot);

    let lines: Vec<&str> = text.lines().collect();
    assert!(lines[0].starts_with("digraph \"classify\" {"), "{text}");
    assert_eq!(lines.last(), Some(&"}"));
    let mut nodes = BTreeSet::new();
    let mut edges = Vec::new();
    for l in &lines[1..lines.len() - 1] {
        let l = l.trim();
        if let Some((from, rest)) = l.split_once(" -> ") {
            let to = rest.split_whitespace().next().unwrap_or("");
            assert!(rest.contains("style="), "edge without a style: {l}");
            edges.push((from.to_owned(), to.to_owned()));
        } else if l.starts_with('b') {
            let (id, attrs) = l.split_once(' ').expect("node attributes");
            assert!(attrs.contains("label=\"0x"), "node label: {l}");
            assert!(attrs.contains("..0x"), "label has the address range: {l}");
            nodes.insert(id.to_owned());
        }
    }
    assert_eq!(nodes.len(), rows(&cfg["blocks"]).len());
    assert_eq!(edges.len(), rows(&cfg["edges"]).len());
    for (from, to) in &edges {
        assert!(nodes.contains(from) && nodes.contains(to), "{from} -> {to}");
    }
    assert!(text.contains("style=bold"), "jump-table edges are bold");
}

fn which(tool: &str) -> bool {
    std::process::Command::new("sh")
        .args(["-c", &format!("command -v {tool}")])
        .output()
        .is_ok_and(|o| o.status.success())
}

#[test]
fn tail_calls_leave_the_function_and_are_call_edges() {
    let m = Mutatee::new("tailcall");
    for v in [Variant::O2, Variant::Pie, Variant::NoPie] {
        let path = m.path(v);
        let cfg = gsh_json("cfg forward", &path);
        assert!(
            rows(&cfg["blocks"])
                .iter()
                .any(|b| b["exit"] == "tail-call" && b["target"] == "leaf"),
            "{v:?}: {cfg}"
        );
        let callees = gsh_json("callees choose", &path);
        let got: BTreeSet<(String, String)> = rows(&callees)
            .iter()
            .map(|r| {
                (
                    r["callee"].as_str().unwrap_or("").to_owned(),
                    r["kind"].as_str().unwrap_or("").to_owned(),
                )
            })
            .collect();
        assert_eq!(
            got,
            BTreeSet::from([
                ("leaf".to_owned(), "tail-call".to_owned()),
                ("forward".to_owned(), "tail-call".to_owned())
            ]),
            "{v:?}"
        );
        let callers = gsh_json("callers leaf", &path);
        let who: BTreeSet<&str> = rows(&callers)
            .iter()
            .filter_map(|r| r["caller"].as_str())
            .collect();
        assert!(
            who.contains("forward") && who.contains("choose"),
            "{v:?}: {who:?}"
        );
        // apply jumps through its function-pointer argument: an indirect exit, no callee.
        let apply = gsh_json("callees apply", &path);
        assert_eq!(rows(&apply).len(), 1, "{v:?}: {apply}");
        assert_eq!(rows(&apply)[0]["callee"], "<indirect>");
    }
    // At -O0 the same calls are ordinary calls, and the pointer call is an indirect call site.
    let path = m.path(Variant::O0);
    let apply = gsh_json("callees apply", &path);
    assert_eq!(rows(&apply)[0]["kind"], "indirect-call", "{apply}");
    assert!(apply["title"]
        .as_str()
        .unwrap_or("")
        .contains("1 indirect call site"));
}

#[test]
fn calls_through_the_plt_name_the_stub() {
    let path = Mutatee::new("noreturn").path(Variant::O2);
    let callees = gsh_json("callees parse_mode", &path);
    let names: BTreeSet<&str> = rows(&callees)
        .iter()
        .filter_map(|r| r["callee"].as_str())
        .collect();
    assert_eq!(names, BTreeSet::from(["strcmp@plt", "die_hard"]));
    let stubs = truth::objdump_plt_stubs(&path);
    let strcmp = rows(&callees)
        .iter()
        .find(|r| r["callee"] == "strcmp@plt")
        .expect("strcmp@plt");
    assert!(
        stubs
            .iter()
            .any(|(a, n)| n == "strcmp@plt" && *a == hex(&strcmp["address"])),
        "{stubs:?}"
    );
    let callers = gsh_json("callers strcmp@plt", &path);
    assert_eq!(rows(&callers)[0]["caller"], "parse_mode");
    assert_eq!(strings(&rows(&callers)[0]["sites"]).len(), 2);
}

#[test]
fn noreturn_error_paths_end_blocks() {
    let m = Mutatee::new("noreturn");
    for v in VARIANTS {
        let path = m.path(v);
        for f in ["fatal", "die_hard"] {
            assert_eq!(
                gsh_json(&format!("whatis {f}"), &path)["noreturn"],
                "yes",
                "{v:?} {f}"
            );
        }
        for f in ["checked_div", "parse_mode", "after_noreturn", "main"] {
            assert_eq!(
                gsh_json(&format!("whatis {f}"), &path)["noreturn"],
                "no",
                "{v:?} {f}"
            );
        }
        let ends = |func: &str, callee: &str| {
            let cfg = gsh_json(&format!("cfg {func}"), &path);
            rows(&cfg["blocks"])
                .iter()
                .any(|b| b["exit"] == "noreturn-call" && b["target"] == callee)
        };
        assert!(ends("checked_div", "fatal"), "{v:?}");
        assert!(ends("parse_mode", "die_hard"), "{v:?}");
        assert!(ends("fatal", "exit@plt"), "{v:?}");
        assert!(ends("die_hard", "abort@plt"), "{v:?}");
        // The call that never returns has no fall-through into after_noreturn.
        let (after, _) = symbol(&path, "after_noreturn");
        let cfg = gsh_json("cfg parse_mode", &path);
        assert!(
            rows(&cfg["blocks"])
                .iter()
                .all(|b| hex(&b["start"]) != after),
            "{v:?}: parse_mode runs into after_noreturn"
        );
    }
}

#[test]
fn cxx_throw_ends_a_block_and_landing_pads_are_in_the_cfg() {
    let m = Mutatee::new("cxx");
    for v in VARIANTS {
        let path = m.path(v);
        let thrower = gsh_json("cfg check_depth", &path);
        assert!(
            rows(&thrower["blocks"])
                .iter()
                .any(|b| b["exit"] == "noreturn-call" && b["target"] == "__cxa_throw@plt"),
            "{v:?}: {thrower}"
        );
        // Building the exception may throw: its cleanup frees it and resumes unwinding.
        assert!(
            rows(&thrower["edges"]).iter().any(|e| e["kind"] == "catch"),
            "{v:?}: check_depth has a landing pad"
        );
        let catcher = gsh_json("cfg main", &path);
        let pads: BTreeSet<u64> = rows(&catcher["edges"])
            .iter()
            .filter(|e| e["kind"] == "catch")
            .map(|e| hex(&e["to"]))
            .collect();
        assert!(!pads.is_empty(), "{v:?}: main has landing pads");
        assert!(
            rows(&catcher["blocks"])
                .iter()
                .any(|b| b["target"] == "__cxa_begin_catch@plt"),
            "{v:?}: the catch handler is part of main's CFG"
        );
        assert_eq!(gsh_json("whatis check_depth", &path)["noreturn"], "no");
    }
}

#[test]
fn irreducible_cycle_is_reported_not_a_loop() {
    let m = Mutatee::new("irreducible");
    for v in VARIANTS {
        let path = m.path(v);
        let doc = gsh_json("loops tangled", &path);
        let note = doc["note"].as_str().unwrap_or_default();
        assert!(
            note.contains("irreducible") && note.contains("tangled"),
            "{v:?}: {doc}"
        );
        let loops = rows(&doc);
        assert!(
            !loops.is_empty(),
            "{v:?}: the reducible for loop is still a loop"
        );
        assert!(loops.iter().all(|l| l["depth"] == 1), "{v:?}: {doc}");
        check_plausible(&path, "tangled", loops);
        let stats = gsh_json("stats", &path);
        assert!(
            stats["irreducible_functions"].as_u64() >= Some(1),
            "{v:?}: {stats}"
        );
    }
}

#[test]
fn stats_and_metrics_agree_with_the_commands() {
    let path = Mutatee::new("loops").path(Variant::O2);
    let stats = gsh_json("stats", &path);
    let functions = gsh_json("show functions", &path);
    assert_eq!(
        stats["functions"].as_u64(),
        Some(rows(&functions).len() as u64)
    );
    assert_eq!(stats["loops"], 7);
    assert_eq!(stats["jump_tables"], 1);
    assert_eq!(stats["jump_tables_bounded"], 1);
    for key in ["blocks", "edges", "instructions", "call_edges", "time_ms"] {
        assert!(stats[key].is_u64(), "{key}: {stats}");
    }

    let nested = gsh_json("whatis nested", &path);
    assert_eq!(nested["loops"], 3);
    assert_eq!(nested["loop_depth"], 3);
    let (blocks, edges) = (
        nested["blocks"].as_u64().unwrap_or(0),
        nested["edges"].as_u64().unwrap_or(0),
    );
    assert_eq!(
        nested["cyclomatic_complexity"].as_u64(),
        Some(edges + 2 - blocks)
    );
    let cfg = gsh_json("cfg nested", &path);
    assert_eq!(rows(&cfg["blocks"]).len() as u64, blocks);

    let by_loops = gsh_json("show functions --sort loops --limit 1", &path);
    assert_eq!(rows(&by_loops)[0]["name"], "nested");
    assert_eq!(rows(&by_loops)[0]["loops"], 3);
    let by_cx = gsh_json("show functions --sort complexity --limit 1", &path);
    assert_eq!(rows(&by_cx)[0]["name"], "classify");
    let by_callers = gsh_json("show functions --sort callers --limit 1", &path);
    assert_eq!(rows(&by_callers)[0]["name"], "square");
    let bad = gsh_tests::gsh_c("show functions --sort colour", &path);
    assert_eq!(bad.code, Some(1));
    assert!(bad.stderr.contains("complexity"), "{bad}");
}

/// `gsh --json -c stats FILE` on a big system library: it must finish, and the counts must
/// be those of real code.
fn whole_library(path: &Path) {
    let out = Gsh::new()
        .args(["--json", "-c", "stats"])
        .arg(path)
        .timeout(Duration::from_secs(300))
        .run();
    out.assert_success();
    let s: Value = gsh_tests::json_stream(&out)
        .pop()
        .map(|mut line| line["result"].take())
        .unwrap_or_else(|| panic!("no JSON:\n{out}"));
    let n = |k: &str| s[k].as_u64().unwrap_or_else(|| panic!("{k} missing: {s}"));
    assert!(n("functions") > 1000, "{s}");
    assert!(n("blocks") > 5 * n("functions"), "{s}");
    assert!(n("edges") > n("blocks") / 2, "{s}");
    assert!(n("instructions") > 2 * n("blocks"), "{s}");
    assert!(n("loops") > n("functions") / 10, "{s}");
    assert!(n("jump_tables") > 50, "{s}");
    assert!(n("jump_tables_bounded") > n("jump_tables") / 3, "{s}");
    assert!(n("noreturn_functions") > 5, "{s}");
    assert!(n("overlapping_functions") < n("functions") / 10, "{s}");
    assert!(n("call_edges") > n("functions"), "{s}");
}

#[test]
fn every_function_of_libc_is_analysed_without_a_panic() {
    whole_library(Path::new("/lib/x86_64-linux-gnu/libc.so.6"));
}

#[test]
fn every_function_of_libpython_is_analysed_without_a_panic() {
    let path = Path::new("/usr/lib/x86_64-linux-gnu/libpython3.11.so.1.0");
    if !path.is_file() {
        eprintln!(
            "SKIPPED every_function_of_libpython_is_analysed_without_a_panic: {} is not \
             installed (apt-get install libpython3.11)",
            path.display()
        );
        return;
    }
    whole_library(path);
}

/// Long analysis names each step as it starts, so the progress bar never sits at 100% with a
/// frozen clock while work goes on: it did for ~20 s on cc1, finding loops and non-returning
/// functions after the CFGs' count had reached its total.
#[test]
fn analysis_reports_each_step_it_takes() {
    #[derive(Default)]
    struct Recorder(std::sync::Mutex<Vec<String>>);
    impl engine::symbols::Progress for Recorder {
        fn update(&self, done: u64, total: u64) {
            let mut v = self.0.lock().unwrap();
            assert!(done <= total, "{done} of {total}");
            if done == total {
                v.push("100%".into());
            }
        }
        fn phase(&self, what: &str) {
            self.0.lock().unwrap().push(what.to_owned());
        }
    }
    let mut session = engine::Session::new();
    session.open(Path::new("/bin/ls")).expect("open /bin/ls");
    let recorder = Recorder::default();
    session.main().expect("main").analysis_with(&recorder);
    let events = recorder.0.into_inner().unwrap();
    let steps: Vec<&str> = events
        .iter()
        .map(String::as_str)
        .filter(|e| *e != "100%")
        .collect();
    assert_eq!(
        steps,
        [
            "finding functions",
            "building control-flow graphs",
            "finding functions that never return",
            "finding loops and calls",
            "building the call graph"
        ]
    );
    // Every step that counts reaches its total before the next begins, and the last event
    // is a step starting or finishing, never silence after a full bar.
    let cfgs = events
        .iter()
        .position(|e| e == "building control-flow graphs")
        .unwrap();
    let never = events
        .iter()
        .position(|e| e == "finding functions that never return")
        .unwrap();
    assert!(
        events[cfgs..never].iter().any(|e| e == "100%"),
        "{events:?}"
    );
}

/// Every jump table an independent decoder finds in Debian's gzip and bash (by pattern, over a
/// linear sweep: `gsh_tests::switches`) has each case target starting a block in gsh's CFGs.
/// Biased indexes (`sub eax, K` before the compare) used to place tables `K` entries early.
#[test]
fn every_case_target_of_gzip_and_bash_starts_a_block() {
    for path in ["/usr/bin/gzip", "/bin/bash"] {
        let report = gsh_tests::switches::check(Path::new(path)).unwrap_or_else(|e| panic!("{e}"));
        assert!(
            report.tables.len() >= 5,
            "{path}: only {} tables decoded",
            report.tables.len()
        );
        let missing: Vec<String> = report
            .with_missing()
            .map(|t| format!("jmp {:#x} table {:#x}: {:x?}", t.jump, t.table, t.missing))
            .collect();
        assert!(missing.is_empty(), "{path}: {missing:#?}");
    }
}

/// The ground truth (`cargo run -p xtask -- ground-truth` runs all of it): switches of every
/// shape and plain C, built by gcc and clang at -O0..-O3, PIE and not, with the linker's
/// relocations and the assembler's labels kept. Every jump table is found exactly (entries and
/// targets), none invented; every function start of the stripped copy is found, none inside a
/// function.
#[test]
fn ground_truth_tables_and_starts_are_exact_with_gcc_and_clang() {
    gsh_tests::ensure_package("clang");
    let dir = target_dir().join("ground-truth-test");
    let mut problems = Vec::new();
    let mut tables = 0;
    for compiler in ["gcc", "clang"] {
        for build in gsh_tests::ground_truth::Build::all(compiler) {
            for source in [
                "corpus/switches.c",
                "corpus/cold.c",
                "mutatees/basic.c",
                "mutatees/tailcall.c",
            ] {
                let path = build
                    .compile(source, &dir)
                    .unwrap_or_else(|e| panic!("{e}"));
                let g = gsh_tests::ground_truth::grade(&path).unwrap_or_else(|e| panic!("{e}"));
                tables += g.tables;
                assert!(g.starts > 0, "{}: no function starts", build.label());
                problems.extend(
                    g.problems
                        .iter()
                        .map(|p| format!("{} {source}: {p}", build.label())),
                );
            }
        }
    }
    assert!(tables >= 60, "only {tables} jump tables in the corpus");
    assert!(problems.is_empty(), "{problems:#?}");
}

/// A looping entry in a function that dispatches through a jump table (`corpus/looptable.c`,
/// cc1's 0x7f12a0): `entry` and `exit` count once per call and return, saved and live, PIE
/// (a table of offsets) and not (of addresses). The function is copied whole and its table
/// read from a private copy leading into the copy; such an entry used to be skipped ("a
/// function with indirect jumps cannot be copied").
#[test]
fn a_looping_entry_with_a_jump_table_counts_once_per_call() {
    let dir = target_dir().join("looptable-test");
    for pie in [false, true] {
        let build = gsh_tests::ground_truth::Build {
            compiler: "gcc",
            opt: "-O2",
            pie,
        };
        let exe = build
            .compile("corpus/looptable.c", &dir)
            .unwrap_or_else(|e| panic!("{e}"));
        let script = "declare long n0; declare long n1; at spin_table entry { n0++; }; \
                      at spin_table exit { n1++; }; \
                      at main exit { printf(\"gsh: %ld %ld\\n\", n0, n1); }";
        // 15 calls, each entered and left once; the sum is the original program's.
        let want = "531\ngsh: 15 15\n";
        let out = dir.join(format!("{}-saved", build.label().replace(' ', "-")));
        let o = gsh_tests::gsh_c(&format!("{script}; save {}", out.display()), &exe);
        o.assert_code(0);
        assert!(
            o.stdout.contains("relocate-function"),
            "{}:\n{o}",
            build.label()
        );
        let r = gsh_tests::run_program(&out, &[], &[]);
        assert_eq!(
            String::from_utf8_lossy(&r.stdout),
            want,
            "{} saved:\n{o}",
            build.label()
        );
        let live = dir.join(format!("{}-live", build.label().replace(' ', "-")));
        let o = gsh_tests::gsh_c(&format!("{script}; run > {}", live.display()), &exe);
        o.assert_code(0);
        let text = std::fs::read_to_string(&live).expect("live output");
        assert_eq!(text, want, "{} live:\n{o}", build.label());
    }
}
