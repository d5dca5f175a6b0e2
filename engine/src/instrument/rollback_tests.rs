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
use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicBool;

use crate::instrument::live::LiveError;
use crate::instrument::{Live, Plan, PointSpec};
use crate::process::{Launch, Process, State, Stop, Tracer};
use crate::session::{ModuleId, Session};
use crate::testutil;

thread_local! {
    /// Writes left before the one that fails (1: the next one); `None`: disarmed.
    static FAIL_AT: Cell<Option<usize>> = const { Cell::new(None) };
    /// The next write putting old bytes back (after a failed write) fails too.
    static FAIL_RESTORE: Cell<bool> = const { Cell::new(false) };
}

/// Makes the next write that puts old bytes back on this thread fail, once.
fn fail_restore() {
    FAIL_RESTORE.with(|f| f.set(true));
}

/// Counts one write putting old bytes back; true when it must fail.
pub(super) fn restore_fault_hit() -> bool {
    FAIL_RESTORE.with(|f| f.replace(false))
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

/// The first word `path` prints when it runs alone (the sum it computes); it must succeed.
fn sum_alone(path: &Path) -> String {
    let alone = std::process::Command::new(path)
        .output()
        .expect("run the program alone");
    assert!(alone.status.success(), "the program alone: {alone:?}");
    String::from_utf8(alone.stdout)
        .expect("text")
        .split_whitespace()
        .next()
        .expect("the sum")
        .to_owned()
}

/// `path` started under a tracer (stopped at its entry, its output going to `path.out`), a
/// session with every module it loaded open, and that output file.
fn start(path: &Path) -> (Tracer<Live>, Session, PathBuf) {
    let mut session = testutil::open(path);
    let out = path.with_extension("out");
    let launch = Launch {
        program: path.to_owned(),
        args: Vec::new(),
        stdin: None,
        stdout: Some(out.clone()),
        env: Vec::new(),
    };
    let tracer = Tracer::start(&launch, Live::default()).expect("start the program");
    let session_mut = &mut session;
    tracer
        .with(|p, live| live.learn_modules(session_mut, p))
        .expect("tracer")
        .expect("learn the modules");
    (tracer, session, out)
}

/// Runs the program to its exit (status 0) and returns what it printed into `out`.
fn run_to_end(tracer: Tracer<Live>, out: &Path) -> String {
    let stop = tracer
        .with(|p, live| p.cont_wait(live, &AtomicBool::new(false)))
        .expect("tracer")
        .expect("run to the end");
    assert_eq!(stop, Stop::Exited(0));
    drop(tracer);
    std::fs::read_to_string(out).expect("the program's output")
}

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
    let sum = sum_alone(&path);
    let (tracer, mut session, out) = start(&path);
    let main_id = session.main().expect("main").id;
    let bias = tracer
        .with(|_, live| live.bias(main_id))
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
    let got = run_to_end(tracer, &out);
    // Each of the four is called 1000 times from main; work4 calls work1 and work2 200 times
    // each besides.
    assert_eq!(got, format!("{sum} 4400\n"), "failed inserts: {failures}");
    eprintln!(
        "{flags:?}: {failures} inserts and {delete_failures} deletes failed and were rolled back"
    );
}

/// A library of the mutatee's own, four functions 8 KiB apart like the program's.
const LIBRARY: &str = r#"
/* Its own counter (hidden: not the program's `hits`): a snippet names the globals of the
   module it is in. */
__attribute__((visibility("hidden"))) long hits;
long lib_hits(void) { return hits; }

__attribute__((noipa, aligned(8192))) int lwork1(int x) { return x * 5 + 2; }
__attribute__((noipa, aligned(8192))) int lwork2(int x) { return x % 3 ? x / 3 : x; }
__attribute__((noipa, aligned(8192))) int lwork3(int x) { return x ^ 0x55; }
__attribute__((noipa, aligned(8192))) int lwork4(int x) { return x & 1 ? lwork1(x) : lwork3(x); }
"#;

const TWO_MODULES: &str = r#"
#include <stdio.h>

long hits;
long lib_hits(void);
int lwork1(int), lwork2(int), lwork3(int), lwork4(int);

__attribute__((noipa, aligned(8192))) int work1(int x) { return x * 3 + 1; }
__attribute__((noipa, aligned(8192))) int work2(int x) { return x % 7 ? x / 7 : -x; }
__attribute__((noipa, aligned(8192))) int work3(int x) { return x - 9; }
__attribute__((noipa, aligned(8192))) int work4(int x) { return x % 5 ? work1(x) : 4; }

int main(void) {
    long sum = 0;
    for (int i = 0; i < 1000; i++)
        sum += work1(i) + work2(i) + work3(i) + work4(i)
             + lwork1(i) + lwork2(i) + lwork3(i) + lwork4(i);
    printf("%ld %ld\n", sum, hits + lib_hits());
    return 0;
}
"#;

/// The bytes of every executable segment of module `m`, as the process has them.
fn module_text(p: &Process, session: &Session, m: ModuleId, bias: u64) -> Vec<u8> {
    let mut text = Vec::new();
    for seg in session.module(m).binary.segments() {
        if seg.flags & 1 != 0 {
            text.extend(
                p.read(seg.vaddr.0.wrapping_add(bias), seg.memsz as usize)
                    .expect("read a module's code"),
            );
        }
    }
    text
}

/// The program and its library, started and stopped at its entry with both loaded: the
/// tracer, the session (both modules open), and each module with its bias.
fn start_two_modules() -> (Tracer<Live>, Session, [(ModuleId, u64); 2], String, PathBuf) {
    let lib = testutil::compile(
        "libtwo.so",
        LIBRARY,
        false,
        &["-O2", "-g", "-shared", "-fPIC"],
    );
    let dir = lib.parent().expect("the library's directory").to_owned();
    let link = format!("-L{}", dir.display());
    let rpath = format!("-Wl,-rpath,{}", dir.display());
    let path = testutil::compile(
        "twomodules",
        TWO_MODULES,
        false,
        &[
            "-O2",
            "-g",
            "-Wl,--no-as-needed",
            &link,
            "-l:libtwo.so",
            &rpath,
        ],
    );
    let sum = sum_alone(&path);
    let (tracer, session, out) = start(&path);
    let main = session.main().expect("main").id;
    let lib = session
        .modules()
        .iter()
        .find(|m| m.name.starts_with("libtwo"))
        .expect("the library is open in the session")
        .id;
    let biases = tracer
        .with(|_, live| [main, lib].map(|m| (m, live.bias(m).expect("a loaded module"))))
        .expect("tracer");
    (tracer, session, biases, sum, out)
}

/// One request over both modules: `work*` in the program and `libtwo.so!lwork*` in its
/// library, each counting into its own module's `hits`. No command makes one today (a glob resolves in the first module where it
/// matches), but `Live` keeps a request per module, and a delete goes module by module.
fn add_two_module_request(plan: &mut Plan, session: &mut Session) -> u32 {
    let spec = PointSpec::parse(&["work*", "entry"]).expect("point");
    let id = plan
        .add(session, spec, None, "hits++;".into())
        .expect("request")
        .id;
    // lwork4 calls lwork1 and lwork3 through the library's PLT: not the functions.
    let in_lib: Vec<_> = session
        .resolve_functions("libtwo.so!lwork*")
        .expect("the library's functions")
        .into_iter()
        .filter(|f| !session.func(*f).name.ends_with("@plt"))
        .collect();
    assert_eq!(in_lib.len(), 4, "lwork1..lwork4");
    let r = plan
        .requests
        .iter_mut()
        .find(|r| r.id == id)
        .expect("just added");
    r.funcs.extend(in_lib);
    id
}

#[test]
fn a_delete_failing_in_its_second_module_keeps_the_first_done_and_the_request_listed() {
    let (tracer, mut session, modules, sum, out) = start_two_modules();
    let texts = |tracer: &Tracer<Live>, session: &Session| {
        tracer
            .with(|p, _| modules.map(|(m, bias)| module_text(p, session, m, bias)))
            .expect("tracer")
    };
    let original = texts(&tracer, &session);
    let mut plan = Plan::default();
    // For N = 1, 2, ...: insert, fail the N-th write of the delete, check each module is
    // all old or all instrumented, delete again; until a delete makes fewer writes than N.
    let mut split = 0;
    for n in 1.. {
        assert!(n < 10_000, "a delete that never stops writing");
        let id = add_two_module_request(&mut plan, &mut session);
        let s = &session;
        let points = tracer
            .with(|p, live| plan.place(id, |plan| live.insert(p, s, plan, id)))
            .expect("tracer")
            .expect("insert into both modules");
        assert_eq!(points.len(), 8, "work1..4 and lwork1..4");
        let instrumented = texts(&tracer, &session);
        for (i, (a, b)) in original.iter().zip(&instrumented).enumerate() {
            assert!(a != b, "the insert changed no code in module {i}");
        }
        let (result, fired, left, status) = tracer
            .with(|p, live| {
                fail_write(n);
                let result = live.remove(p, id);
                (result, !disarm(), live.points(id), live.status(id))
            })
            .expect("tracer");
        let now = texts(&tracer, &session);
        match result {
            Ok(removed) => {
                assert!(!fired, "write {n} failed, yet the delete succeeded");
                assert_eq!(removed, 8);
                assert!(
                    now == original,
                    "after delete, the code differs from before"
                );
                plan.delete(id).expect("unlist");
                assert!(
                    split > 0,
                    "no fault hit the second module after the first was done"
                );
                break;
            }
            Err(e) => {
                assert!(fired, "delete failed without the injected fault: {e}");
                // Each module all or nothing.
                let done: Vec<bool> = (0..2)
                    .map(|i| {
                        if now[i] == original[i] {
                            true
                        } else {
                            assert!(
                                now[i] == instrumented[i],
                                "after the delete failed at write {n} ({e}), module {i}'s \
                                 code is neither as before nor as instrumented"
                            );
                            false
                        }
                    })
                    .collect();
                assert!(
                    !done.iter().all(|d| *d),
                    "the delete failed at write {n} ({e}), yet both modules are clean"
                );
                // The request stays listed, with the points of the modules not yet done.
                let status = status.expect("the request is still listed after a failed delete");
                assert_eq!(
                    left,
                    4 * done.iter().filter(|d| !**d).count(),
                    "request {id} after the delete failed at write {n}: {status}"
                );
                if done.iter().any(|d| *d) {
                    split += 1;
                }
                // `delete` again finishes it.
                let removed = tracer
                    .with(|p, live| live.remove(p, id))
                    .expect("tracer")
                    .expect("the second delete");
                assert_eq!(removed, left, "the second delete takes out what was left");
                assert!(
                    texts(&tracer, &session) == original,
                    "after the second delete, the code differs from before"
                );
                plan.delete(id).expect("unlist");
            }
        }
    }
    // Instrumented once more, the program computes what it computes alone.
    let id = add_two_module_request(&mut plan, &mut session);
    let s = &session;
    tracer
        .with(|p, live| plan.place(id, |plan| live.insert(p, s, plan, id)))
        .expect("tracer")
        .expect("insert into both modules");
    for (i, (a, b)) in original.iter().zip(texts(&tracer, &session)).enumerate() {
        assert!(*a != b, "the last insert changed no code in module {i}");
    }
    let got = run_to_end(tracer, &out);
    // Eight functions called 1000 times from main; work4 calls work1 800 times, lwork4 calls
    // lwork1 and lwork3 500 times each.
    assert_eq!(
        got,
        format!("{sum} 9800\n"),
        "deletes split between modules: {split}"
    );
    eprintln!("two modules: {split} deletes failed in the second module after the first was done");
}

#[test]
fn a_failed_restore_says_the_process_is_left_stopped_with_torn_code() {
    // Runs until killed, so the process is running when the delete halts it.
    let source = SOURCE.replace("i < 1000; i++", "; i = (i + 1) % 1000");
    let path = testutil::compile("torn", &source, false, &["-O2", "-g"]);
    let (tracer, mut session, _) = start(&path);
    let mut plan = Plan::default();
    let spec = PointSpec::parse(&["work*", "entry"]).expect("point");
    let id = plan
        .add(&mut session, spec, None, "hits++;".into())
        .expect("request")
        .id;
    let s = &session;
    tracer
        .with(|p, live| plan.place(id, |plan| live.insert(p, s, plan, id)))
        .expect("tracer")
        .expect("insert");
    // Let it run, so the commit halts it and must not resume it with torn code.
    tracer
        .with(|p, _| p.resume())
        .expect("tracer")
        .expect("resume");
    // The N-th write of a delete fails, and so does putting the old bytes back; the first N
    // whose failure is in writing code (not in staging) gives the torn state.
    for n in 1.. {
        assert!(n < 10_000, "no write of the code itself failed");
        let (result, state) = tracer
            .with(|p, live| {
                fail_write(n);
                fail_restore();
                let result = live.remove(p, id);
                disarm();
                restore_fault_hit();
                (result, p.state())
            })
            .expect("tracer");
        match result {
            Err(e @ LiveError::Torn { .. }) => {
                let text = e.to_string();
                for words in ["failed too", "left stopped", "`kill` the process", "0x"] {
                    assert!(text.contains(words), "`{words}` missing from: {text}");
                }
                assert_eq!(state, State::Stopped, "torn code must not run: {text}");
                tracer.with(|p, _| p.kill()).expect("tracer").expect("kill");
                return;
            }
            Err(e) => {
                // Failed while staging: nothing was written, the process runs on.
                assert_eq!(state, State::Running, "after {e}");
            }
            Ok(_) => panic!("the delete made fewer than {n} writes, none of them code"),
        }
    }
}
