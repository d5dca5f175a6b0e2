//! Leaving the process as it was: when gsh detaches with no probe left and no thread in the
//! runtime, it asks for the library's unloading ([`gsh_rt_unloading`], then `dlclose`), and
//! the library's destructor gives back what the runtime made in the process (its pthread key,
//! arena and memfd, the unwind tables of `gsh_rt_alloc`); glibc's `__cxa_finalize` removes
//! the fork handler registered with this library's `__dso_handle`. Without the request, a
//! destructor runs only at the process's exit, while other threads may still count into the
//! arena, so it gives back nothing.

use crate::layout::*;
use crate::thread::GSH_RT_ROOT;
use std::sync::atomic::AtomicBool;
use std::sync::atomic::Ordering::{Acquire, Relaxed};

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
        t.len.store(0, Relaxed);
        if at != 0 && len != 0 {
            // SAFETY: the table came from `gsh_rt_alloc` (its own mapping) and only the
            // runtime's walks, which no thread runs any more, read it.
            unsafe { crate::sys::munmap(at, len * std::mem::size_of::<UnwindEntry>() as u64) };
        }
    }
    crate::thread::give_back();
}

#[used]
#[link_section = ".fini_array"]
static ON_UNLOAD: extern "C" fn() = on_unload;
