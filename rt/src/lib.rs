//! The runtime library that gsh loads into instrumented programs (`libgsh_rt.so`): per-thread
//! counters, inclusive wall and CPU timers, and iPath-style call-path profiles, all kept in
//! memory that the mutator reads from outside without stopping the process.
//!
//! Everything hangs off one exported root, `GSH_RT_ROOT` ([`layout::Root`]); its layout is
//! `#[repr(C)]`, versioned by [`layout::ABI_VERSION`], defined once in the `rt-abi` crate
//! (whose structs this library uses as its own, and whose export signatures it is checked
//! against below) and documented in `rt/LAYOUT.md`.
//! Trampolines call the `gsh_rt_*` C functions below, or inline the counter increment against
//! the thread block found through the initial-exec TLS word at `fs:[gsh_rt_tls_offset()]`.
//! Nothing on the hot path allocates, locks, uses a `lock` prefix or makes a system call other
//! than reading a clock. x86-64 Linux only, like the rest of gsh.

pub mod clock;
pub mod descriptor;
pub mod events;
pub mod output;
pub mod path;
pub mod sys;
pub mod thread;
pub mod tls;
pub mod unload;

pub use gsh_rt_abi::layout;
pub use layout::ABI_VERSION;

// Every export has the signature the ABI gives it (a wrong one does not compile).
const _: () = {
    use gsh_rt_abi::exports::sig;
    let _: sig::AbiVersion = gsh_rt_abi_version;
    let _: sig::RootFn = gsh_rt_root;
    let _: sig::Init = gsh_rt_init;
    let _: sig::Thread = gsh_rt_thread;
    let _: sig::TlsOffset = gsh_rt_tls_offset;
    let _: sig::Alloc = gsh_rt_alloc;
    let _: sig::AddUnwindTable = path::gsh_rt_add_unwind_table;
    let _: sig::Count = events::gsh_rt_count;
    let _: sig::Output = output::gsh_rt_set_output;
    let _: sig::Output = output::gsh_rt_write;
    let _: sig::Unloading = unload::gsh_rt_unloading;
    let _: [sig::Timer; 10] = [
        events::gsh_rt_enter,
        events::gsh_rt_exit,
        events::gsh_rt_enter_cpu,
        events::gsh_rt_exit_cpu,
        events::gsh_rt_enter_tsc,
        events::gsh_rt_exit_tsc,
        events::gsh_rt_enter_cpu_tsc,
        events::gsh_rt_exit_cpu_tsc,
        path::gsh_rt_path_exit,
        path::gsh_rt_path_exit_tsc,
    ];
    let _: [sig::Path; 8] = [
        path::gsh_rt_path_loop_enter,
        path::gsh_rt_path_loop_enter_tsc,
        path::gsh_rt_path_enter,
        path::gsh_rt_path_enter_cpu,
        path::gsh_rt_path_count,
        path::gsh_rt_path_enter_tsc,
        path::gsh_rt_path_enter_cpu_tsc,
        path::gsh_rt_path_count_tsc,
    ];
};

/// Layout version, for code that only wants to check what it loaded.
#[no_mangle]
pub static GSH_RT_ABI_VERSION: u32 = ABI_VERSION;

/// Returns [`ABI_VERSION`]; lets the mutator check what it loaded.
#[no_mangle]
pub extern "C" fn gsh_rt_abi_version() -> u32 {
    ABI_VERSION
}

/// Address of the root struct (the same as the `GSH_RT_ROOT` symbol).
#[no_mangle]
pub extern "C" fn gsh_rt_root() -> *const layout::Root {
    &thread::GSH_RT_ROOT
}

/// Fixes the slot count and per-thread path-record capacity (rounded up to a power of two).
/// Call before the first event; afterwards the configuration is frozen. Returns 0 if the
/// requested configuration is in force, -1 otherwise. Without a call, the first event freezes
/// [`layout::DEFAULT_MAX_SLOTS`] and [`layout::DEFAULT_PATH_CAPACITY`].
#[no_mangle]
pub extern "C" fn gsh_rt_init(max_slots: u32, path_capacity: u32) -> i32 {
    thread::configure(max_slots, path_capacity)
}

/// The calling thread's block (its [`layout::ThreadHeader`]), created on first use. This is
/// the slow path for inlined counters: call it when `fs:[gsh_rt_tls_offset()]` reads 0. Null if
/// the thread is already inside this function (a measured function called from it) or memory
/// is exhausted; drop the event then.
#[no_mangle]
pub extern "C" fn gsh_rt_thread() -> *mut u8 {
    events::block().map_or(std::ptr::null_mut(), thread::Block::as_ptr)
}

/// The `fs`-relative offset of the initial-exec TLS word holding the calling thread's block
/// address. Valid from the moment the library is relocated (before any event or constructor)
/// and constant for the life of the process.
#[no_mangle]
pub extern "C" fn gsh_rt_tls_offset() -> i64 {
    tls::offset()
}

/// Maps `len` bytes of zeroed memory, for the mutator to fill (e.g. an unwind table) without
/// calling the mutatee's `malloc`; unmapped only when the library is unloaded
/// (`unload.rs`), which is why each mapping is listed. Null on failure, or when the list of
/// [`unload::MAX_ALLOCS`] mappings is full.
#[no_mangle]
pub extern "C" fn gsh_rt_alloc(len: usize) -> *mut u8 {
    unload::alloc(len.max(1)).unwrap_or(std::ptr::null_mut())
}

/// Measurement probe (feature `probes`, for `examples/bench.rs` only): `gsh_rt_count` but with
/// the block pointer kept in a std `thread_local!`, which in a `dlopen`ed cdylib compiles to the
/// global-dynamic model (`__tls_get_addr` per access). Not part of the ABI.
#[cfg(feature = "probes")]
#[no_mangle]
pub extern "C" fn gsh_rt_probe_gd_count(slot: u32) {
    use std::cell::Cell;
    std::thread_local! {
        static BLOCK: Cell<*mut u8> = const { Cell::new(std::ptr::null_mut()) };
    }
    let mut b = BLOCK.with(Cell::get);
    if b.is_null() {
        b = gsh_rt_thread();
        BLOCK.with(|c| c.set(b));
    }
    if let Some(b) = thread::Block::from_trusted(b) {
        if slot < b.header().max_slots {
            events::bump(&events::slot(b, slot).count, 1);
        }
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn abi_version_is_exported() {
        assert_eq!(super::gsh_rt_abi_version(), super::GSH_RT_ABI_VERSION);
    }
}
