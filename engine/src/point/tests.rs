//! Points found in small C functions compiled with gcc: entry, every kind of exit, and call
//! sites filtered by callee.

use super::{find, ExitKind, PointKind, Query};
use crate::testutil::{compile, open};

const SOURCE: &str = r#"
#include <stdlib.h>
int leaf(int x) { return x + 1; }
int twice(int x) { return leaf(x) + leaf(x + 1); }
int many(int x) { if (x < 0) return -1; if (x == 0) return 0; return leaf(x); }
int tail(int x) { return leaf(x * 3); }
void die(int x) { if (x) exit(3); }
"#;

fn kinds(flags: &[&str], name: &str, q: &Query) -> Vec<PointKind> {
    let path = compile("points", SOURCE, false, flags);
    let s = open(&path);
    let m = s.main().expect("main module");
    let f = m.functions().by_name(name).next().expect("function");
    find(m, f.id, q).into_iter().map(|p| p.kind).collect()
}

#[test]
fn entry_exit_and_call_points() {
    let flags = ["-O2", "-shared", "-fPIC", "-fno-inline"];
    let k = kinds(&flags, "twice", &Query::all());
    assert_eq!(k.first(), Some(&PointKind::Entry));
    assert_eq!(k.iter().filter(|k| **k == PointKind::CallBefore).count(), 2);
    let exits = k
        .iter()
        .filter(|k| matches!(k, PointKind::Exit { .. }))
        .count();
    assert!(exits >= 1, "{k:?}");
    let t = kinds(&flags, "tail", &Query::all());
    assert!(
        t.contains(&PointKind::Exit {
            how: ExitKind::TailCall
        }),
        "{t:?}"
    );
    let d = kinds(&flags, "die", &Query::all());
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
    let mut q = Query {
        calls_before: true,
        calls_after: true,
        ..Query::default()
    };
    let all = kinds(&flags, "twice", &q);
    assert_eq!(all.len(), 4, "{all:?}");
    q.callee = Some("nothing_by_this_name".into());
    assert!(kinds(&flags, "twice", &q).is_empty());
    q.callee = Some("leaf".into());
    assert_eq!(kinds(&flags, "twice", &q).len(), 4);
}
