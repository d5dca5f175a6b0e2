//! Process control on a real child where a test must reach inside `Process` (a thread list
//! the kernel has moved past).

use super::*;
use crate::process::{Launch, NoHooks, Tracer};

/// A thread id no process has: at or above the kernel's `pid_max`.
fn no_such_tid() -> i32 {
    std::fs::read_to_string("/proc/sys/kernel/pid_max")
        .expect("pid_max")
        .trim()
        .parse()
        .expect("a number")
}

/// A thread listed as running that the kernel released before the halt's interrupt (ESRCH:
/// the thread whose id an `execve` in another thread takes goes so, with no exit reported)
/// is dropped, its exit told, not recorded as stopped: it was, and every later look at its
/// registers failed (a pause moving threads out of changed code failed with it).
#[test]
fn halt_drops_a_thread_the_kernel_no_longer_has() {
    let launch = Launch {
        program: "/bin/sleep".into(),
        args: vec!["60".into()],
        ..Launch::default()
    };
    let tracer = Tracer::start(&launch, NoHooks).expect("start sleep");
    let ghost = no_such_tid();
    let (listed, registers_of_all) = tracer
        .with(move |p, _| {
            p.resume().expect("resume");
            p.threads.insert(ghost, Thread::new(ThreadState::Running));
            p.halt().expect("halt");
            let listed = p.threads().iter().any(|t| t.tid == ghost);
            let all = p.stopped_tids().iter().all(|&t| p.regs(t).is_ok());
            (listed, all)
        })
        .expect("tracer");
    assert!(!listed, "a thread the kernel does not have is listed");
    assert!(
        registers_of_all,
        "a stopped thread's registers cannot be read"
    );
    assert!(tracer.take_events().contains(&Event::ThreadExited(ghost)));
    tracer.with(|p, _| p.kill()).expect("tracer").expect("kill");
}

/// A halt of the running process holds it whole until its resume, and the time counts
/// ([`Process::held_whole`]): the search charges what its code changes held the program. A
/// halt of a process already stopped, and stops of one thread at a time, add nothing.
#[test]
fn the_time_the_whole_process_is_held_is_counted_from_halt_to_resume() {
    let launch = Launch {
        program: "/bin/sleep".into(),
        args: vec!["60".into()],
        ..Launch::default()
    };
    let tracer = Tracer::start(&launch, NoHooks).expect("start sleep");
    let (start, held, holding, again, sampled) = tracer
        .with(|p, _| {
            // Whatever starting it took (stopped at its entry).
            let start = p.held_whole();
            p.resume().expect("resume");
            p.halt().expect("halt");
            std::thread::sleep(Duration::from_millis(60));
            let holding = p.held_whole();
            p.halt().expect("a second halt");
            p.resume().expect("resume");
            let held = p.held_whole();
            std::thread::sleep(Duration::from_millis(30));
            let again = p.held_whole();
            p.hold_each(|_, _, _| ()).expect("one thread at a time");
            (start, held, holding, again, p.held_whole())
        })
        .expect("tracer");
    let holding = holding - start;
    assert!(holding >= Duration::from_millis(60), "{holding:?}");
    let held = held - start;
    let (again, sampled) = (again - start, sampled - start);
    assert!(held >= holding && held < Duration::from_secs(5), "{held:?}");
    assert_eq!(again, held, "running, it is not held");
    assert_eq!(
        sampled, held,
        "a thread held alone is not the whole process"
    );
    tracer.with(|p, _| p.kill()).expect("tracer").expect("kill");
}
