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
