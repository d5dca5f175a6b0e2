//! Leaving the process as it was: when gsh detaches with no probe left and no thread in the
//! runtime, it asks for the library's unloading ([`gsh_rt_unloading`], then `dlclose`), and
//! the library's destructor gives back what the runtime made in the process: its pthread key,
//! arena and memfd, the thread blocks mapped on their own when the arena could not grow, every
//! mapping `gsh_rt_alloc` made (an unwind table the runtime refused as much as those it
//! registered) and the unwind tables a saved file's descriptor registered. glibc's
//! `__cxa_finalize` removes the fork handler registered with this library's `__dso_handle`.
//! The runtime starts no thread and installs no signal handler. Without the request, a
//! destructor runs only at the process's exit, while other threads may still count into the
//! arena, so it gives back nothing.

use crate::layout::*;
use crate::thread::GSH_RT_ROOT;
use std::sync::atomic::Ordering::{AcqRel, Acquire, Relaxed, Release};
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64};

/// How many mappings `gsh_rt_alloc` can make (gsh makes one per module it profiles, and the
/// runtime registers at most [`MAX_UNWIND_TABLES`] tables).
pub const MAX_ALLOCS: usize = 2 * MAX_UNWIND_TABLES;

/// Every mapping `gsh_rt_alloc` made, as (address, length): claimed by index, the address
/// stored last.
static ALLOCS: [(AtomicU64, AtomicU64); MAX_ALLOCS] =
    [const { (AtomicU64::new(0), AtomicU64::new(0)) }; MAX_ALLOCS];
static ALLOC_COUNT: AtomicU32 = AtomicU32::new(0);

/// Maps `len` bytes of zeroed memory and lists them for the unloading; `None` when the
/// kernel refuses or the list is full.
pub fn alloc(len: usize) -> Option<*mut u8> {
    let i = ALLOC_COUNT.fetch_add(1, AcqRel) as usize;
    if i >= MAX_ALLOCS {
        ALLOC_COUNT.fetch_sub(1, AcqRel);
        return None;
    }
    let at = crate::sys::mmap_anon(len)?;
    ALLOCS[i].1.store(len as u64, Relaxed);
    ALLOCS[i].0.store(at as u64, Release);
    Some(at)
}

/// Whether `[at, at + len)` lies in a mapping `gsh_rt_alloc` made.
fn allocated(at: u64, len: u64) -> bool {
    let n = (ALLOC_COUNT.load(Acquire) as usize).min(MAX_ALLOCS);
    ALLOCS[..n].iter().any(|(a, l)| {
        let (a, l) = (a.load(Acquire), l.load(Relaxed));
        a != 0 && at >= a && at + len <= a + l
    })
}

/// Set by the mutator just before it unloads the library.
static UNLOADING: AtomicBool = AtomicBool::new(false);

/// With `on` non-zero, the library's next unloading gives back what the runtime holds in the
/// process; with 0 (the library stayed loaded: another module needs it), it does not.
#[no_mangle]
pub extern "C" fn gsh_rt_unloading(on: i32) {
    UNLOADING.store(on != 0, Relaxed);
}

extern "C" fn on_unload() {
    if !UNLOADING.load(Relaxed) {
        return;
    }
    let r = &GSH_RT_ROOT;
    let n = (r.unwind_count.load(Acquire) as usize).min(MAX_UNWIND_TABLES);
    for t in &r.unwind[..n] {
        let (at, len) = (t.entries.load(Relaxed), t.len.load(Relaxed));
        let bytes = len * std::mem::size_of::<UnwindEntry>() as u64;
        t.len.store(0, Relaxed);
        // Those from `gsh_rt_alloc` go with its other mappings below.
        if at != 0 && len != 0 && !allocated(at, bytes) {
            // SAFETY: the table is a descriptor's copy, the runtime's own mapping
            // (`descriptor::register_unwind`), and only the runtime's walks, which no thread
            // runs any more, read it.
            unsafe { crate::sys::munmap(at, bytes) };
        }
    }
    let n = ALLOC_COUNT.swap(0, AcqRel) as usize;
    for (at, len) in &ALLOCS[..n.min(MAX_ALLOCS)] {
        let (at, len) = (at.swap(0, Acquire), len.load(Relaxed));
        if at != 0 {
            // SAFETY: a mapping `gsh_rt_alloc` made, for the mutator to fill; the mutator
            // asks for the unloading only once nothing it made uses the runtime.
            unsafe { crate::sys::munmap(at, len) };
        }
    }
    crate::thread::give_back();
}

#[used]
#[link_section = ".fini_array"]
static ON_UNLOAD: extern "C" fn() = on_unload;
