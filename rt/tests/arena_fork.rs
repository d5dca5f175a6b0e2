//! A child made by glibc's `_Fork` (no fork handlers run, so the runtime's `pthread_atfork`
//! handler does not remap the arena) shares the arena's memfd with its parent. The runtime
//! never hands such a child a block of its parent's memfd: its first new thread finds that the
//! arena was made for another process, and the child's arena is remapped privately there, so
//! what its threads count afterwards stays in the child. (What the forking thread counts in the
//! child before that goes into its parent's block: `rt/LAYOUT.md`.) Alone in its test binary:
//! it forks.

use gsh_rt::layout::ArenaHeader;
use gsh_rt::thread;
use std::sync::atomic::Ordering::Relaxed;

const SLOT: u32 = 9;

extern "C" {
    /// glibc 2.34's fork without fork handlers.
    fn _Fork() -> libc::pid_t;
}

fn header<'a>() -> &'a ArenaHeader {
    let at = thread::GSH_RT_ROOT.arena.load(Relaxed);
    assert_ne!(at, 0, "no arena");
    // SAFETY: `arena` is the address of the header, mapped for the life of the process.
    unsafe { &*(at as *const ArenaHeader) }
}

#[test]
fn a_child_forked_without_handlers_takes_no_block_of_its_parents_arena() {
    gsh_rt::events::gsh_rt_count(SLOT);
    let me = gsh_rt::events::block().expect("block");
    let count = || gsh_rt::events::slot(me, SLOT).count.load(Relaxed);
    let used = header().used.load(Relaxed);
    // SAFETY: the child runs only the code below and leaves with `_exit`.
    let child = unsafe { _Fork() };
    assert!(child >= 0, "_Fork failed");
    if child == 0 {
        // A new thread in the child: the runtime gives its parent's arena up.
        let ok = std::thread::spawn(|| {
            gsh_rt::events::gsh_rt_count(SLOT);
            gsh_rt::thread::GSH_RT_ROOT.arena_overflow.load(Relaxed) == 1
        })
        .join()
        .unwrap_or(false);
        // From now on the forking thread's block is the child's own copy too.
        for _ in 0..1000 {
            gsh_rt::events::gsh_rt_count(std::hint::black_box(SLOT));
        }
        // SAFETY: _exit ends the child without running the parent's destructors.
        unsafe { libc::_exit(if ok { 0 } else { 3 }) };
    }
    let mut status = 0;
    // SAFETY: waiting for our own child; `status` is a valid out-pointer.
    assert_eq!(unsafe { libc::waitpid(child, &mut status, 0) }, child);
    assert!(libc::WIFEXITED(status), "child: {status:#x}");
    assert_eq!(
        libc::WEXITSTATUS(status),
        0,
        "the child's new thread took a block of its parent's arena, not a private one"
    );
    assert_eq!(
        header().used.load(Relaxed),
        used,
        "the child took a block of the parent's"
    );
    assert_eq!(header().lost.load(Relaxed), 0);
    assert_eq!(count(), 1, "the child counted into the parent's block");
}
