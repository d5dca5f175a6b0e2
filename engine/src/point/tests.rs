//! Points found in small C and C++ functions compiled with gcc: entry, every kind of exit,
//! call sites filtered by callee, loops, blocks and instructions, and specifications parsed
//! and printed back.

use super::{
    all, callee_matches, find, ExitKind, LoopAt, NoPoint, PointKind, PointSpec, Scope, Where,
};
use crate::addr::LinkAddr;
use crate::testutil::{compile, open};

const SOURCE: &str = r#"
#include <stdlib.h>
int leaf(int x) { return x + 1; }
int twice(int x) { return leaf(x) + leaf(x + 1); }
int many(int x) { if (x < 0) return -1; if (x == 0) return 0; return leaf(x); }
int tail(int x) { return leaf(x * 3); }
void die(int x) { if (x) exit(3); }
int sum(int n) { int s = 0; for (int i = 0; i < n; i++) s += leaf(i); return s; }
"#;

fn kinds(flags: &[&str], name: &str, at: &Where) -> Vec<PointKind> {
    let path = compile("points", SOURCE, false, flags);
    let s = open(&path);
    let m = s.main().expect("main module");
    let f = m.functions().by_name(name).next().expect("function");
    find(m, f.id, at)
        .unwrap_or_default()
        .into_iter()
        .map(|p| p.kind)
        .collect()
}

#[test]
fn entry_exit_and_call_points() {
    let flags = ["-O2", "-shared", "-fPIC", "-fno-inline"];
    let path = compile("points", SOURCE, false, &flags);
    let s = open(&path);
    let m = s.main().expect("main module");
    let f = |n: &str| m.functions().by_name(n).next().expect("function").id;
    let k: Vec<PointKind> = all(m, f("twice")).into_iter().map(|p| p.kind).collect();
    assert_eq!(k.first(), Some(&PointKind::Entry));
    assert_eq!(k.iter().filter(|k| **k == PointKind::CallBefore).count(), 2);
    let exits = k
        .iter()
        .filter(|k| matches!(k, PointKind::Exit { .. }))
        .count();
    assert!(exits >= 1, "{k:?}");
    let t: Vec<PointKind> = all(m, f("tail")).into_iter().map(|p| p.kind).collect();
    assert!(
        t.contains(&PointKind::Exit {
            how: ExitKind::TailCall
        }),
        "{t:?}"
    );
    let d: Vec<PointKind> = all(m, f("die")).into_iter().map(|p| p.kind).collect();
    assert!(
        d.contains(&PointKind::Exit {
            how: ExitKind::NoReturnCall
        }),
        "{d:?}"
    );
}

#[test]
fn call_points_filter_by_callee() {
    let flags = ["-O0", "-shared", "-fPIC"];
    let before = |callee: Option<&str>| Where::CallBefore {
        callee: callee.map(str::to_owned),
    };
    let after = Where::CallAfter { callee: None };
    assert_eq!(kinds(&flags, "twice", &before(None)).len(), 2);
    assert_eq!(kinds(&flags, "twice", &after).len(), 2);
    assert_eq!(kinds(&flags, "twice", &before(Some("leaf"))).len(), 2);
    let path = compile("points", SOURCE, false, &flags);
    let s = open(&path);
    let m = s.main().expect("main module");
    let twice = m.functions().by_name("twice").next().expect("twice").id;
    assert_eq!(
        find(m, twice, &before(Some("nothing_by_this_name"))),
        Err(NoPoint::CallTo("nothing_by_this_name".into()))
    );
    let leaf = m.functions().by_name("leaf").next().expect("leaf").id;
    assert_eq!(find(m, leaf, &before(None)), Err(NoPoint::Calls));
}

/// A C++ `main` whose calls go through PLT stubs with demangled names: `work(int)@plt` (weak,
/// so the program links without it) and `operator new(unsigned long)@plt`.
pub(crate) const CXX: &str = r#"
#include <cstdio>
int work(int x) __attribute__((weak));
int main() {
    if (work)
        work(1);
    int *p = new int(3);
    std::printf("%d\n", *p);
    delete p;
    return 0;
}
"#;

/// `show points` names a call's callee as the function table shows it (`work(int)@plt`,
/// `operator new(unsigned long)@plt`); `at FUNC call CALLEE` must find every such call by that
/// name without the `@plt`. Two matchers used to disagree: `at` compared the demangled name
/// whole, so a C++ PLT callee was never found.
#[test]
fn every_listed_callee_is_found_by_its_name() {
    let path = compile("points-cxx", CXX, true, &["-O0", "-fPIC", "-shared"]);
    let s = open(&path);
    let m = s.main().expect("main module");
    let main = m.functions().by_name("main").next().expect("main").id;
    let listed: Vec<String> = all(m, main)
        .into_iter()
        .filter(|p| p.kind == PointKind::CallBefore)
        .filter_map(|p| p.callee_name)
        .collect();
    for want in ["operator new(unsigned long)@plt", "work(int)@plt"] {
        assert!(listed.iter().any(|c| c == want), "{want}: {listed:?}");
    }
    for name in &listed {
        let want = name.strip_suffix("@plt").unwrap_or(name);
        let at = Where::CallBefore {
            callee: Some(want.to_owned()),
        };
        let found = find(m, main, &at).unwrap_or_default();
        assert!(
            !found.is_empty(),
            "`main call '{want}' before` found nothing"
        );
        let table = m.functions();
        assert!(found.iter().all(|p| callee_matches(table, p.callee, want)));
    }
}

#[test]
fn loop_points_sit_at_the_header_or_on_edges() {
    let path = compile("points", SOURCE, false, &["-O0", "-shared", "-fPIC"]);
    let s = open(&path);
    let m = s.main().expect("main module");
    let sum = m.functions().by_name("sum").next().expect("sum").id;
    let at = |at| Where::Loop {
        name: "loop_1".into(),
        at,
    };
    let begin = find(m, sum, &at(LoopAt::IterBegin)).unwrap();
    assert_eq!(begin.len(), 1);
    assert!(begin[0].edge.is_none() && begin[0].placeable().is_ok());
    assert_eq!(begin[0].scope(), Scope::Loop("loop_1"));
    for a in [LoopAt::Entry, LoopAt::Exit, LoopAt::IterEnd] {
        let pts = find(m, sum, &at(a)).unwrap();
        assert!(!pts.is_empty(), "{a:?}");
        for p in &pts {
            assert!(p.edge.is_some(), "{a:?}: {p:?}");
            assert_eq!(p.scope(), Scope::Loop("loop_1"));
            // Placed by the patcher's edge placement, an entry from the caller too.
            assert!(p.placeable().is_ok(), "{a:?}: {p:?}");
        }
    }
    assert!(matches!(
        find(
            m,
            sum,
            &Where::Loop {
                name: "loop_9".into(),
                at: LoopAt::Entry
            }
        ),
        Err(NoPoint::Loop { .. })
    ));
}

#[test]
fn block_and_instruction_points() {
    let path = compile("points", SOURCE, false, &["-O0", "-shared", "-fPIC"]);
    let s = open(&path);
    let m = s.main().expect("main module");
    let many = m.functions().by_name("many").next().expect("many").id;
    let cfg = &m.analysis().function(many).cfg;
    let b = cfg
        .blocks
        .iter()
        .find(|b| b.instructions >= 2)
        .expect("block");
    let pts = find(m, many, &Where::Block { addr: b.start }).unwrap();
    assert_eq!((pts.len(), pts[0].kind), (1, PointKind::Block));
    assert_eq!(pts[0].scope(), Scope::Block(b.id));
    let entry = find(m, many, &Where::Entry).unwrap();
    assert_eq!(entry[0].scope(), Scope::Function);
    let e = cfg.edges[0];
    let (from, to) = (cfg.block(e.from).start, cfg.block(e.to).start);
    let on = find(m, many, &Where::Edge { from, to }).unwrap();
    assert_eq!((on.len(), on[0].addr), (1, to));
    assert_eq!(
        on[0].scope(),
        Scope::Edge(super::OnEdge::Edge {
            from: e.from,
            to: e.to,
            kind: e.kind
        })
    );
    // Edge points are placed by the patcher (`patch::edge`), not refused here.
    assert!(on[0].placeable().is_ok());
    assert!(find(m, many, &Where::Block { addr: b.last }).is_err());
    // After the first instruction is before the second one.
    let after = find(
        m,
        many,
        &Where::Insn {
            addr: b.start,
            after: true,
        },
    )
    .unwrap();
    assert!(after[0].addr > b.start && after[0].addr <= b.last);
    let before = find(
        m,
        many,
        &Where::Insn {
            addr: after[0].addr,
            after: false,
        },
    )
    .unwrap();
    assert_eq!(before[0].addr, after[0].addr);
    assert_eq!(
        find(
            m,
            many,
            &Where::Insn {
                addr: b.last,
                after: true
            }
        ),
        Err(NoPoint::InsnEndsBlock(b.last))
    );
    // Not an instruction boundary: inside the block's first instruction longer than a byte.
    let mut start = b.start;
    let mut inside = None;
    for end in super::insn_ends(m, b.start, b.end) {
        if end.0 > start.0 + 1 {
            inside = Some(LinkAddr(start.0 + 1));
            break;
        }
        start = end;
    }
    let inside = inside.expect("an instruction of two bytes or more");
    assert_eq!(
        find(
            m,
            many,
            &Where::Insn {
                addr: inside,
                after: false
            }
        ),
        Err(NoPoint::Insn(inside))
    );
}

#[test]
fn point_specs_parse_and_print_back() {
    for text in [
        "work entry",
        "work exit",
        "main call before",
        "main call work after",
        "main loop loop_1 iter-begin",
        "'parse_*' entry",
        "main block 0x401136",
        "main insn 0x401136 after",
        "main edge 0x401136 0x401140",
    ] {
        let words: Vec<&str> = text.split(' ').collect();
        let spec = PointSpec::parse(&words).unwrap();
        assert_eq!(spec.to_string(), text);
    }
    for bad in [
        "work",
        "work middle",
        "main call work during",
        "main loop loop_1 sideways",
        "main block 401136",
        "main insn 0x401136 during",
        "main edge 0x401136",
    ] {
        let words: Vec<&str> = bad.split(' ').collect();
        assert!(PointSpec::parse(&words).is_err(), "{bad}");
    }
}
