//! CFG, jump-table, non-returning and loop tests on code compiled by gcc at test time.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Mutex;

use crate::addr::LinkAddr;
use crate::analysis::FunctionAnalysis;
use crate::cfg::{EdgeKind, Exit};
use crate::session::Session;
use crate::testutil::{compile, open};

const SOURCE: &str = r#"
#include <stdio.h>
#include <stdlib.h>

volatile int sink;

__attribute__((noinline)) int leaf(int x) { sink = x; return x + 1; }

__attribute__((noinline)) int nested(int n) {
    int s = 0;
    for (int i = 0; i < n; i++)
        for (int j = 0; j < n; j++)
            for (int k = 0; k < j; k++)
                s += i ^ j ^ k;
    return s;
}

__attribute__((noinline)) int siblings(int n) {
    int s = 0;
    for (int i = 0; i < n; i++) s += leaf(i);
    while (s > 100) s /= 3;
    for (int i = 0; i < n; i++) sink = i;
    return s;
}

__attribute__((noinline)) int sw(int c) {
    switch (c) {
    case 0: return leaf(10);
    case 1: return leaf(21);
    case 2: return leaf(32) * 3;
    case 3: return leaf(43) - 7;
    case 4: return leaf(54) ^ 5;
    case 5: return leaf(65) + 9;
    case 6: return leaf(76) * 11;
    case 7: return leaf(87) - 13;
    case 8: return leaf(98) + 17;
    case 9: return leaf(109) ^ 19;
    case 10: return leaf(120) * 23;
    case 11: return leaf(131) - 29;
    default: return -1;
    }
}

/* The index is computed, `v - 12*(v/12)`, so its symbolic form has several terms. */
__attribute__((noinline)) int swmod(int v) {
    int r;
    switch (v % 12) {
    case 0: r = leaf(v); break;
    case 1: r = v + 23; break;
    case 2: r = v * 37; break;
    case 3: r = v ^ 41; break;
    case 4: r = v - 53; break;
    case 5: r = leaf(v) + 67; break;
    case 6: r = v << 3; break;
    case 7: r = v / 3 + 83; break;
    case 8: r = v % 5 + 97; break;
    case 9: r = -v; break;
    case 10: r = v | 113; break;
    case 11: r = v & 127; break;
    default: r = -1; break;
    }
    sink = r;
    return r;
}

__attribute__((noinline, noreturn)) void die(const char *why) {
    fprintf(stderr, "%s\n", why);
    exit(3);
}

__attribute__((noinline)) int checked(int x) {
    if (x < 0) die("negative");
    return x * 2;
}

__attribute__((noinline)) int tail(int x) { return leaf(x * 3); }

/* A tail call through a pointer: an indirect jump with the stack as at entry. */
__attribute__((noinline)) int via(int (*k)(int), int v) { return k(v + 1); }

/* A tail call through a table of pointers to other functions (cc1's maybe_gen_insn): the
 * table is read, but no entry leads into the function, and the frame is torn down first. */
__attribute__((noinline)) int twice(int v) { return 2 * v; }
__attribute__((noinline)) int thrice(int v) { return 3 * v; }
int (*const ops[4])(int) = {leaf, twice, thrice, leaf};
__attribute__((noinline)) int viatable(int i, int v) {
    int r = leaf(v);
    return ops[(i + r) & 3](r);
}

/* An indirect jump inside a frame that is no table: not a way out. */
__attribute__((noinline)) int inside(int v) {
    volatile char buf[64];
    buf[v & 63] = 1;
    int r = leaf(v);
    __asm__ volatile("lea 1f(%%rip), %%rax\n\tjmp *%%rax\n1:" ::: "rax", "memory");
    return r + leaf(r) + buf[0];
}

int main(int argc, char **argv) {
    (void)argv;
    return nested(argc) + siblings(argc) + sw(argc) + swmod(argc) + checked(argc) + tail(argc)
        + via(leaf, argc) + inside(argc) + viatable(argc, argc);
}
"#;

/// Opens the test program built with `flags`, compiling it once per process: tests run in
/// parallel, and two compiles writing the same output file at once would race.
fn analysed(flags: &[&str]) -> Session {
    static BUILT: Mutex<BTreeMap<String, PathBuf>> = Mutex::new(BTreeMap::new());
    let path = {
        let mut built = BUILT.lock().unwrap_or_else(|p| p.into_inner());
        built
            .entry(flags.join(" "))
            .or_insert_with(|| compile("cfg", SOURCE, false, flags))
            .clone()
    };
    open(&path)
}

fn func<'a>(s: &'a Session, name: &str) -> (&'a FunctionAnalysis, LinkAddr) {
    let m = s.main().unwrap();
    let f = m
        .functions()
        .by_name(name)
        .next()
        .unwrap_or_else(|| panic!("{name} not found"));
    (m.analysis().function(f.id), f.addr)
}

fn loop_shape(a: &FunctionAnalysis) -> Vec<(String, u32)> {
    a.loops
        .loops
        .iter()
        .map(|l| (l.name.clone(), l.depth))
        .collect()
}

const VARIANTS: &[&[&str]] = &[
    &["-O0", "-g", "-fno-pie", "-no-pie"],
    &["-O0", "-g", "-fPIE", "-pie"],
    &["-O2", "-g", "-fno-pie", "-no-pie"],
    &["-O2", "-g", "-fPIE", "-pie"],
];

#[test]
fn nested_loops_form_a_tree() {
    for flags in VARIANTS {
        let s = analysed(flags);
        let (a, _) = func(&s, "nested");
        let names: Vec<String> = loop_shape(a).into_iter().map(|(n, _)| n).collect();
        // gcc at -O2 may peel or merge the innermost level, but never flattens the nest.
        assert!(
            names.starts_with(&["loop_1".to_string(), "loop_1.1".to_string()]),
            "{flags:?}: {names:?}"
        );
        assert!(a.loops.max_depth() >= 2, "{flags:?}");
        if flags.contains(&"-O0") {
            assert_eq!(names, ["loop_1", "loop_1.1", "loop_1.1.1"], "{flags:?}");
        }
        assert!(a.loops.irreducible.is_empty());
        for l in &a.loops.loops {
            assert!(l.blocks.contains(&l.header));
            if let Some(p) = l.parent {
                let parent = &a.loops.loops[p];
                assert!(
                    l.blocks.iter().all(|b| parent.blocks.contains(b)),
                    "nesting"
                );
            }
        }
    }
}

#[test]
fn sibling_loops_are_numbered_in_address_order() {
    for flags in VARIANTS {
        let s = analysed(flags);
        let (a, _) = func(&s, "siblings");
        let shape = loop_shape(a);
        assert_eq!(shape.len(), 3, "{flags:?}: {shape:?}");
        assert!(shape.iter().all(|(_, d)| *d == 1), "{flags:?}: {shape:?}");
        let headers: Vec<LinkAddr> = a
            .loops
            .loops
            .iter()
            .map(|l| a.cfg.block(l.header).start)
            .collect();
        assert!(headers.windows(2).all(|w| w[0] < w[1]));
        // The first loop calls leaf; its body holds the call.
        let first = &a.loops.loops[0];
        assert!(first.blocks.iter().any(|b| a
            .cfg
            .block(*b)
            .call
            .as_ref()
            .is_some_and(|c| c.target.is_some())));
    }
}

#[test]
fn switch_jump_table_resolves_every_case() {
    for (flags, name) in VARIANTS.iter().flat_map(|f| [(f, "sw"), (f, "swmod")]) {
        let s = analysed(flags);
        let (a, addr) = func(&s, name);
        assert_eq!(
            a.cfg.jump_tables.len(),
            1,
            "{flags:?} {name}: {:?}",
            a.cfg.unresolved
        );
        let table = &a.cfg.jump_tables[0];
        assert!(table.bounded, "{flags:?}");
        // Twelve cases plus, when the table has holes, the default: every target is in the
        // function and has an edge.
        assert!(
            table.targets.len() >= 12,
            "{flags:?}: {}",
            table.targets.len()
        );
        let f = s.main().unwrap().functions().at(addr).unwrap().clone();
        for t in &table.targets {
            assert!(f.contains(*t), "{flags:?}: {t} outside sw");
            let to = a.cfg.block_at(*t).expect("target starts a block");
            assert!(a
                .cfg
                .edges
                .iter()
                .any(|e| e.to == to && e.kind == EdgeKind::JumpTable));
        }
        assert!(a.cfg.unresolved.is_empty());
    }
}

#[test]
fn noreturn_callees_end_blocks() {
    for flags in VARIANTS {
        let s = analysed(flags);
        let (die, _) = func(&s, "die");
        assert!(die.noreturn, "{flags:?}: die never returns");
        let (checked, _) = func(&s, "checked");
        assert!(!checked.noreturn);
        assert!(
            checked
                .cfg
                .blocks
                .iter()
                .any(|b| matches!(b.exit, Some(Exit::NoReturnCall { .. }))),
            "{flags:?}: the call to die ends its block"
        );
        assert!(checked
            .cfg
            .blocks
            .iter()
            .any(|b| b.exit == Some(Exit::Return)));
        assert!(!checked.overlaps);
    }
}

#[test]
fn tail_calls_are_exits_and_call_edges() {
    let s = analysed(&["-O2", "-g"]);
    let m = s.main().unwrap();
    let (tail, _) = func(&s, "tail");
    let leaf = m.functions().by_name("leaf").next().unwrap();
    assert!(
        tail.cfg
            .blocks
            .iter()
            .any(|b| b.exit == Some(Exit::TailCall { target: leaf.addr })),
        "{:?}",
        tail.cfg.blocks
    );
    assert!(tail.callees.contains(&leaf.id));
    assert!(m.analysis().callers(leaf.id).len() >= 3);
}

#[test]
fn metrics_follow_the_graph() {
    let s = analysed(&["-O0", "-g"]);
    let m = s.main().unwrap();
    let f = m.functions().by_name("leaf").next().unwrap();
    let metrics = m.analysis().metrics(f.id);
    assert_eq!(metrics.blocks, 1);
    assert_eq!(metrics.cyclomatic, 1);
    assert_eq!(metrics.loops, 0);
    let f = m.functions().by_name("nested").next().unwrap();
    let metrics = m.analysis().metrics(f.id);
    assert_eq!(
        metrics.cyclomatic,
        metrics.edges as i64 - metrics.blocks as i64 + 2
    );
    assert!(metrics.cyclomatic >= 4);
    assert_eq!(metrics.max_loop_depth, 3);
}

const CXX_SOURCE: &str = r#"
#include <cstdio>
#include <stdexcept>

__attribute__((noinline)) int thrower(int x) {
    if (x > 2) throw std::runtime_error("big");
    return x;
}

__attribute__((noinline)) int catcher(int x) {
    try {
        return thrower(x);
    } catch (const std::exception &e) {
        std::puts(e.what());
        return -1;
    }
}

int main(int argc, char **) { return catcher(argc); }
"#;

#[test]
fn landing_pads_are_reached_by_catch_edges() {
    for flags in [&["-O0", "-g"][..], &["-O2", "-g"][..]] {
        let path = compile("landing", CXX_SOURCE, true, flags);
        let s = open(&path);
        let m = s.main().unwrap();
        let find = |name: &str| {
            m.functions()
                .functions()
                .iter()
                .find(|f| f.demangled.as_deref() == Some(name))
                .unwrap_or_else(|| panic!("{name} not found"))
        };
        let throw_at = m
            .functions()
            .by_name("__cxa_throw@plt")
            .next()
            .unwrap()
            .addr;
        let thrower = m.analysis().function(find("thrower(int)").id);
        assert!(
            thrower
                .cfg
                .blocks
                .iter()
                .any(|b| b.exit == Some(Exit::NoReturnCall { target: throw_at })),
            "{flags:?}: the throw ends its block"
        );
        let catcher = m.analysis().function(find("catcher(int)").id);
        let begin = m
            .functions()
            .by_name("__cxa_begin_catch@plt")
            .next()
            .unwrap()
            .addr;
        let catch_edges: Vec<_> = catcher
            .cfg
            .edges
            .iter()
            .filter(|e| e.kind == EdgeKind::Catch)
            .collect();
        assert!(!catch_edges.is_empty(), "{flags:?}: no catch edge");
        // The handler's call to __cxa_begin_catch is in the CFG, reached only through a pad.
        assert!(
            catcher.cfg.calls().any(|c| c.target == Some(begin)),
            "{flags:?}: the handler is missing"
        );
        // The call to thrower is one that lands.
        let thrower_at = find("thrower(int)").addr;
        assert!(
            catch_edges.iter().any(|e| catcher
                .cfg
                .block(e.from)
                .call
                .as_ref()
                .is_some_and(|c| c.target == Some(thrower_at))),
            "{flags:?}"
        );
    }
}

#[test]
fn indirect_jumps_leave_only_from_an_unwound_frame() {
    for flags in VARIANTS {
        let s = analysed(flags);
        let exits = |name: &str| -> Vec<Exit> {
            let (a, _) = func(&s, name);
            a.cfg.blocks.iter().filter_map(|b| b.exit.clone()).collect()
        };
        let inside = exits("inside");
        assert!(inside.contains(&Exit::Unresolved), "{flags:?}: {inside:?}");
        assert!(!inside.contains(&Exit::Indirect), "{flags:?}: {inside:?}");
        let (a, _) = func(&s, "inside");
        assert_eq!(a.cfg.unresolved.len(), 1, "{flags:?}");
        let m = s.main().unwrap();
        let f = m.functions().by_name("inside").next().unwrap();
        let points = crate::point::all(m, f.id);
        assert!(
            points.iter().all(|p| p.addr != a.cfg.unresolved[0]),
            "{flags:?}: a point at the unresolved jump of inside: {points:?}"
        );
        if flags.contains(&"-O2") {
            let via = exits("via");
            assert!(via.contains(&Exit::Indirect), "{flags:?}: {via:?}");
            let table = exits("viatable");
            assert!(table.contains(&Exit::Indirect), "{flags:?}: {table:?}");
            assert!(!table.contains(&Exit::Unresolved), "{flags:?}: {table:?}");
        }
    }
}

mod degrees {
    use proptest::prelude::*;

    use crate::addr::LinkAddr;
    use crate::cfg::{Block, BlockId, Cfg, Edge, EdgeKind};

    fn cfg(blocks: u32, edges: &[(u32, u32, u8)]) -> Cfg {
        let kinds = [
            EdgeKind::FallThrough,
            EdgeKind::Taken,
            EdgeKind::CallFallThrough,
            EdgeKind::JumpTable,
            EdgeKind::Catch,
        ];
        let mut edges: Vec<Edge> = edges
            .iter()
            .map(|&(f, t, k)| Edge {
                from: BlockId(f % blocks),
                to: BlockId(t % blocks),
                kind: kinds[k as usize % kinds.len()],
            })
            .collect();
        edges.sort_by_key(|e| (e.from, e.to, e.kind as u8));
        edges.dedup();
        Cfg {
            entry: LinkAddr(0x1000),
            blocks: (0..blocks)
                .map(|i| Block {
                    id: BlockId(i),
                    start: LinkAddr(0x1000 + u64::from(i) * 4),
                    end: LinkAddr(0x1004 + u64::from(i) * 4),
                    last: LinkAddr(0x1000 + u64::from(i) * 4),
                    instructions: 1,
                    exit: None,
                    call: None,
                })
                .collect(),
            edges,
            ..Cfg::default()
        }
    }

    proptest! {
        /// The degree index answers exactly what the scans of `edges` answer, for every block
        /// of any graph (parallel edges of different kinds, self loops, unreached blocks).
        #[test]
        fn degrees_are_the_scans_counts(
            blocks in 1u32..48,
            edges in proptest::collection::vec((0u32..64, 0u32..64, 0u8..5), 0..160),
        ) {
            let cfg = cfg(blocks, &edges);
            for b in 0..blocks {
                let id = BlockId(b);
                prop_assert_eq!(cfg.in_degree(id), cfg.predecessors(id).count());
                prop_assert_eq!(cfg.out_degree(id), cfg.successors(id).count());
            }
        }
    }
}

/// A search holds the analysis to its cost limit between functions
/// ([`crate::symbols::Progress::pace`]): each function's graph is built, and its loops found,
/// only once the progress lets it go on. Before, the progress was told every 256 functions,
/// and nothing could hold the work in between.
#[test]
fn the_analysis_asks_its_progress_before_each_function() {
    use std::sync::atomic::{AtomicUsize, Ordering};
    struct Paces(AtomicUsize);
    impl crate::symbols::Progress for Paces {
        fn update(&self, _: u64, _: u64) {}
        fn pace(&self) {
            self.0.fetch_add(1, Ordering::Relaxed);
        }
    }
    let s = analysed(&["-O2"]);
    let m = s.main().unwrap();
    let functions = m.functions().functions().len();
    let paces = Paces(AtomicUsize::new(0));
    m.analysis_with(&paces);
    // Its graph built, then its loops and calls found: twice a function at the least.
    assert!(
        paces.0.load(Ordering::Relaxed) >= 2 * functions,
        "{} paces for {functions} functions",
        paces.0.load(Ordering::Relaxed)
    );
}

/// An analysis held back by its progress (`consult`'s pace) holds no one else: whoever needs
/// the module's analysis meanwhile gets it. Run inside the module's lock, the held analysis
/// kept the stack sampler and the tracer waiting, and the pace, which needed them to see the
/// search's cost fall, held it for the rest of the search.
#[test]
fn an_analysis_held_back_aside_keeps_no_one_waiting() {
    use std::sync::atomic::{AtomicBool, Ordering};
    struct Held(AtomicBool);
    impl crate::symbols::Progress for Held {
        fn update(&self, _: u64, _: u64) {}
        fn pace(&self) {
            while self.0.load(Ordering::Relaxed) {
                std::thread::sleep(std::time::Duration::from_millis(5));
            }
        }
    }
    let s = analysed(&["-O1"]);
    let m = s.main().unwrap();
    let held = Held(AtomicBool::new(true));
    std::thread::scope(|scope| {
        let aside = scope.spawn(|| m.analyse_aside(&held));
        std::thread::sleep(std::time::Duration::from_millis(50));
        let leaf = m.functions().by_name("leaf").next().unwrap().id;
        assert!(!m.analysis().function(leaf).cfg.blocks.is_empty());
        assert!(!aside.is_finished(), "the held analysis went on");
        held.0.store(false, Ordering::Relaxed);
    });
    assert!(m.analysis_ready());
}
