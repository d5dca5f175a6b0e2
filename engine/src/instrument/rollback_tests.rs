//! A live insert that fails part-way is rolled back: whichever write through the process's
//! address space fails, the code is byte for byte what it was, the plan no longer holds the
//! request, and the program, instrumented afterwards, computes what it computes alone. A
//! `delete` failing at any write leaves the request inserted, its code byte for byte as it
//! was, until one succeeds and leaves the code as the file has it.
//!
//! The failure is injected: [`fail_write`] makes the N-th write fail, once, on the thread that
//! arms it (the tracer's, where `Live` runs). The writes counted are the patcher's, through a
//! `LiveSpace` (trampolines, then the jumps staged), and the commit's, one per run of changed
//! bytes written while every thread is stopped; the four functions lie 8 KiB apart, so their
//! jumps are four runs and a commit can fail after some of them went in.

use std::cell::Cell;
use std::sync::atomic::AtomicBool;

use crate::instrument::{Live, Plan, PointSpec};
use crate::process::{Launch, Process, Stop, Tracer};
use crate::session::Session;
use crate::testutil;

thread_local! {
    /// Writes left before the one that fails (1: the next one); `None`: disarmed.
    static FAIL_AT: Cell<Option<usize>> = const { Cell::new(None) };
}

/// Makes the `n`-th write (1-based) through a live address space on this thread fail, once.
fn fail_write(n: usize) {
    FAIL_AT.with(|f| f.set(Some(n)));
}

/// Disarms the fault; true when it had not fired.
fn disarm() -> bool {
    FAIL_AT.with(|f| f.take().is_some())
}

/// Counts one write; true when this is the one that must fail.
pub(super) fn fault_hit() -> bool {
    FAIL_AT.with(|f| match f.get() {
        Some(1) => {
            f.set(None);
            true
        }
        Some(n) => {
            f.set(Some(n - 1));
            false
        }
        None => false,
    })
}

const SOURCE: &str = r#"
#include <stdio.h>

long hits;

__attribute__((noipa, aligned(8192))) int work1(int x) { return x * 3 + 1; }
__attribute__((noipa, aligned(8192))) int work2(int x) { return x % 7 ? x / 7 : -x; }
__attribute__((noipa, aligned(8192))) int work3(int x) {
    int s = 0;
    for (int i = 0; i < x % 13; i++)
        s += i ^ x;
    return s;
}
__attribute__((noipa, aligned(8192))) int work4(int x) {
    switch (x % 5) {
    case 0: return work1(x);
    case 1: return work2(x) + 2;
    case 2: return 9;
    default: return x - 4;
    }
}

int main(void) {
    long sum = 0;
    for (int i = 0; i < 1000; i++)
        sum += work1(i) + work2(i) + work3(i) + work4(i);
    printf("%ld %ld\n", sum, hits);
    return 0;
}
"#;

/// The bytes of every executable segment of the main program, as the process has them.
fn main_text(p: &Process, session: &Session, bias: u64) -> Vec<u8> {
    let main = session.main().expect("main module");
    let mut text = Vec::new();
    for seg in main.binary.segments() {
        if seg.flags & 1 != 0 {
            text.extend(
                p.read(seg.vaddr.0.wrapping_add(bias), seg.memsz as usize)
                    .expect("read the program's code"),
            );
        }
    }
    text
}

#[test]
fn a_live_insert_failing_at_any_write_leaves_the_code_as_it_was() {
    rollback(&["-O2", "-g"]);
    rollback(&["-O0", "-g", "-no-pie"]);
}

/// Fails the N-th write of one insert for N = 1, 2, ... in a program built with `flags`.
fn rollback(flags: &[&str]) {
    let path = testutil::compile("rollback", SOURCE, false, flags);
    let expected = std::process::Command::new(&path)
        .output()
        .expect("run the program alone");
    assert!(expected.status.success());
    let expected = String::from_utf8(expected.stdout).expect("text");
    let sum = expected.split_whitespace().next().expect("the sum");

    let mut session = testutil::open(&path);
    let out = path.with_extension("out");
    let launch = Launch {
        program: path.clone(),
        args: Vec::new(),
        stdin: None,
        stdout: Some(out.clone()),
        env: Vec::new(),
    };
    let tracer = Tracer::start(&launch, Live::default()).expect("start the program");
    let main_id = session.main().expect("main").id;
    let session_mut = &mut session;
    let bias = tracer
        .with(|p, live| {
            live.learn_modules(session_mut, p)
                .expect("learn the modules");
            live.bias(main_id)
        })
        .expect("tracer")
        .expect("the main program is loaded");
    let mut plan = Plan::default();
    let original = tracer
        .with(|p, _| main_text(p, &session, bias))
        .expect("tracer");

    // The N-th write fails, for N = 1, 2, ... until an insert makes fewer writes than N.
    let mut failures = 0;
    let (inserted, id) = loop {
        let n = failures + 1;
        assert!(n < 10_000, "an insert that never stops writing");
        let spec = PointSpec::parse(&["work*", "entry"]).expect("point");
        let id = plan
            .add(&mut session, spec, None, "hits++;".into())
            .expect("request")
            .id;
        let session = &session;
        let (result, text, fired) = tracer
            .with(|p, live| {
                fail_write(n);
                let result = plan
                    .place(id, |plan| live.insert(p, session, plan, id))
                    .map(|reports| reports.len());
                let fired = !disarm();
                (result, main_text(p, session, bias), fired)
            })
            .expect("tracer");
        match result {
            Ok(points) => {
                assert!(!fired, "write {n} failed, yet the insert succeeded");
                break (points, id);
            }
            Err(e) => {
                assert!(fired, "insert failed without the injected fault: {e}");
                assert!(
                    text == original,
                    "after the insert failed at write {n} ({e}), the code differs from before"
                );
                assert!(
                    plan.requests.iter().all(|r| r.id != id),
                    "the failed request {id} is still in the plan"
                );
                failures += 1;
            }
        }
    };
    assert!(
        failures >= 4,
        "an insert at four entries made only {failures} writes"
    );
    assert_eq!(inserted, 4, "work1..work4's entries");

    // A `delete` failing at any write leaves the request in, its code as it was; the one
    // that makes fewer writes than N takes it out, leaving the code as the file has it.
    let instrumented = tracer
        .with(|p, _| main_text(p, &session, bias))
        .expect("tracer");
    assert!(instrumented != original, "the insert changed no code");
    let mut delete_failures = 0;
    loop {
        let n = delete_failures + 1;
        assert!(n < 10_000, "a delete that never stops writing");
        let (result, text, fired, points) = tracer
            .with(|p, live| {
                fail_write(n);
                let result = live.remove(p, id);
                let fired = !disarm();
                (result, main_text(p, &session, bias), fired, live.points(id))
            })
            .expect("tracer");
        match result {
            Ok(removed) => {
                assert!(!fired, "write {n} failed, yet the delete succeeded");
                assert_eq!(removed, 4, "work1..work4's entries");
                assert!(
                    text == original,
                    "after delete, the code differs from before the insert"
                );
                plan.delete(id).expect("delete the request");
                break;
            }
            Err(e) => {
                assert!(fired, "delete failed without the injected fault: {e}");
                assert!(
                    text == instrumented,
                    "after the delete failed at write {n} ({e}), the code differs from the \
                     instrumented code"
                );
                assert_eq!(points, 4, "request {id} after a failed delete");
                delete_failures += 1;
            }
        }
    }
    assert!(
        delete_failures >= 4,
        "a delete at four entries made only {delete_failures} writes"
    );
    let spec = PointSpec::parse(&["work*", "entry"]).expect("point");
    let id = plan
        .add(&mut session, spec, None, "hits++;".into())
        .expect("request")
        .id;
    let session = &session;
    let points = tracer
        .with(|p, live| plan.place(id, |plan| live.insert(p, session, plan, id)))
        .expect("tracer")
        .expect("insert again");
    assert_eq!(points.len(), 4, "work1..work4's entries");

    // The program, instrumented at last, computes what it computes alone.
    let stop = tracer
        .with(|p, live| p.cont_wait(live, &AtomicBool::new(false)))
        .expect("tracer")
        .expect("run to the end");
    assert_eq!(stop, Stop::Exited(0));
    drop(tracer);
    let got = std::fs::read_to_string(&out).expect("the program's output");
    // Each of the four is called 1000 times from main; work4 calls work1 and work2 200 times
    // each besides.
    assert_eq!(got, format!("{sum} 4400\n"), "failed inserts: {failures}");
    eprintln!(
        "{flags:?}: {failures} inserts and {delete_failures} deletes failed and were rolled back"
    );
}
