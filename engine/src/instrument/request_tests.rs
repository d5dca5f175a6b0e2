//! Point specs and the plan's checks on a binary compiled at test time.

use super::*;
use crate::testutil::{compile, open};

const SOURCE: &str = r#"
#include <stdio.h>
long total;
__attribute__((noinline)) int work(int n) { total += n; return n * 2; }
__attribute__((noinline)) int work_more(int n) { return work(n) + 1; }
int main(void) {
    int s = 0;
    for (int i = 0; i < 3; i++) s += work_more(i);
    printf("%d\n", s);
    return 0;
}
"#;

#[test]
fn requests_are_checked_when_made() {
    let path = compile("instrument-plan", SOURCE, false, &["-O0", "-g"]);
    let mut session = open(&path);
    let mut plan = Plan::default();
    plan.declare(&session, "long count = 0").unwrap();
    assert!(matches!(
        plan.declare(&session, "long count"),
        Err(RequestError::Redeclared(_))
    ));
    assert!(plan.declare(&session, "long").is_err());

    let spec = |s: &str| PointSpec::parse(&s.split(' ').collect::<Vec<_>>()).unwrap();
    let r = plan
        .add(&mut session, spec("work entry"), None, "count++;".into())
        .unwrap();
    assert_eq!((r.id, r.funcs.len()), (1, 1));
    let r = plan
        .add(
            &mut session,
            spec("work* exit"),
            Some("$return > 2".into()),
            "printf(\"%d\\n\", $return);".into(),
        )
        .unwrap();
    assert_eq!((r.id, r.funcs.len()), (2, 2));
    plan.add(
        &mut session,
        spec("main call work_more before"),
        None,
        "count += $0;".into(),
    )
    .unwrap();
    plan.add(
        &mut session,
        spec("main loop loop_1 iter-begin"),
        None,
        "count++;".into(),
    )
    .unwrap();

    // Errors name what is wrong.
    let err = plan
        .add(
            &mut session,
            spec("work call puts before"),
            None,
            "count++;".into(),
        )
        .unwrap_err();
    assert!(err.to_string().contains("no call to `puts`"), "{err}");
    let err = plan
        .add(&mut session, spec("work entry"), None, "cuont++;".into())
        .unwrap_err();
    assert!(err.to_string().contains("did you mean `count`"), "{err}");
    let err = plan
        .add(
            &mut session,
            spec("work entry"),
            None,
            "count = $return;".into(),
        )
        .unwrap_err();
    assert!(err.to_string().contains("$return"), "{err}");
    let err = plan
        .add(&mut session, spec("wrok entry"), None, "count++;".into())
        .unwrap_err();
    assert!(err.to_string().contains("did you mean `work`"), "{err}");
    let err = plan
        .add(
            &mut session,
            spec("main loop loop_9 entry"),
            None,
            "count++;".into(),
        )
        .unwrap_err();
    assert!(err.to_string().contains("loop_9"), "{err}");

    assert_eq!(plan.delete(2).unwrap().id, 2);
    assert!(matches!(plan.delete(2), Err(RequestError::UnknownId(2))));
    assert_eq!(
        plan.requests.iter().map(|r| r.id).collect::<Vec<_>>(),
        [1, 3, 4]
    );

    // A request that fails to be placed leaves the plan; one placed stays.
    assert_eq!(plan.place(3, |p| Ok::<_, ()>(p.requests.len())), Ok(3));
    assert_eq!(
        plan.place(3, |_| Err::<(), _>("not inserted")),
        Err("not inserted")
    );
    assert_eq!(
        plan.requests.iter().map(|r| r.id).collect::<Vec<_>>(),
        [1, 4]
    );

    // Layout: each variable aligned to its size.
    plan.declare(&session, "char flag").unwrap();
    // A declaration that fails to be placed leaves the plan.
    plan.declare(&session, "int lost").unwrap();
    assert_eq!(
        plan.place_declared(|_| Err::<(), _>("no room")),
        Err("no room")
    );
    plan.declare(&session, "double ratio = 0.5").unwrap();
    // The layout kept for checking follows the declarations, the failed one gone.
    let laid = |vars: &[Declaration]| -> Vec<(String, u64)> {
        vars.iter().map(|v| (v.name.clone(), v.addr)).collect()
    };
    let kept = laid(&plan.checking().vars);
    assert_eq!(kept, laid(&plan.layout(CHECK_DATA_BASE).0));
    assert_eq!(plan.checking().by_name.get("ratio"), Some(&2));
    assert!(matches!(
        plan.declare(&session, "long ratio"),
        Err(RequestError::Redeclared(_))
    ));
    let (vars, size) = plan.layout(0x1000);
    assert_eq!(
        vars.iter().map(|v| v.addr).collect::<Vec<_>>(),
        [0x1000, 0x1008, 0x1010]
    );
    assert_eq!(size, 0x18);
}

#[test]
fn context_variables_are_checked_against_each_point() {
    let path = compile("instrument-context", SOURCE, false, &["-O0", "-g"]);
    let mut session = open(&path);
    let mut plan = Plan::default();
    let spec = |s: &str| PointSpec::parse(&s.split(' ').collect::<Vec<_>>()).unwrap();
    // Each constant where it means something: a -g build has lines everywhere, a call point
    // its callee, a loop point its loop.
    for (point, body) in [
        (
            "work entry",
            r#"printf("%s:%d %s %s\n", $file, $line, $function, $module);"#,
        ),
        ("work exit", r#"printf("%s:%d\n", $file, $line);"#),
        (
            "work_more call work after",
            r#"printf("%s %d\n", $callee, $line);"#,
        ),
        ("work_more call work before", r#"printf("%s\n", $callee);"#),
        ("main call before", r#"printf("%s\n", $callee);"#),
        (
            "main loop loop_1 iter-begin",
            r#"printf("%s %s:%d\n", $loop, $file, $line);"#,
        ),
    ] {
        if let Err(e) = plan.add(&mut session, spec(point), None, body.into()) {
            panic!("at {point}: {e}");
        }
    }
    // And refused where it means nothing.
    for (point, body, why) in [
        (
            "work entry",
            r#"printf("%s\n", $callee);"#,
            "only available at call points",
        ),
        (
            "work entry",
            r#"printf("%s\n", $loop);"#,
            "only available at loop points",
        ),
        (
            "main call work_more after",
            r#"printf("%s\n", $loop);"#,
            "loop points",
        ),
    ] {
        let err = plan
            .add(&mut session, spec(point), None, body.into())
            .unwrap_err();
        assert!(err.to_string().contains(why), "at {point}: {err}");
    }
}

#[test]
fn file_and_line_need_line_information_at_the_point() {
    let path = compile("instrument-context-nodebug", SOURCE, false, &["-O0"]);
    let mut session = open(&path);
    let mut plan = Plan::default();
    let spec = PointSpec::parse(&["work", "entry"]).unwrap();
    let err = plan
        .add(&mut session, spec, None, r#"printf("%d\n", $line);"#.into())
        .unwrap_err();
    assert!(err.to_string().contains("source line"), "{err}");
}

/// `show points main` lists calls to `operator new(unsigned long)@plt` and `work(int)@plt`; `at`
/// must find them by the names without `@plt`. `Plan::add` had its own callee matcher, which compared the
/// demangled name whole and answered "main has no call to `operator new(unsigned long)`".
#[test]
fn a_cxx_plt_callee_is_found_by_its_demangled_name() {
    let path = compile(
        "instrument-cxx-callee",
        crate::point::tests::CXX,
        true,
        &["-O0", "-g"],
    );
    let mut session = open(&path);
    let mut plan = Plan::default();
    for callee in ["operator new(unsigned long)", "work(int)"] {
        let words = ["main", "call", callee, "before"];
        let spec = PointSpec::parse(&words).unwrap();
        let r = plan
            .add(&mut session, spec, None, "$0;".into())
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(r.funcs.len(), 1);
    }
}
