//! What `libgsh_rt.so` exports, by name, and how generated code calls it.
//!
//! **Calling convention of the event functions** ([`Event`]): generated code calls every one
//! as `f(edi = slot, rsi = rsp, rdx = rbp)`, SysV x86-64, the stack 16-byte aligned, the
//! caller-saved registers saved around the call, where `rsp` is the stack pointer at the
//! measured function's first instruction (it points at the return address; at an exit, the
//! stack pointer at its `ret`, the same value) and `rbp` the frame pointer there (still the
//! caller's). Functions declared with two arguments ([`sig::Timer`]) ignore `rdx`. The slow
//! path of every generated operation calls [`THREAD`] (no arguments; the block in `rax`, 0
//! when none can be made) with everything saved. The `_tsc` variants ([`Event::bounded`])
//! never leave the library, so the engine's callee analysis can bound what they change.

/// The root object (`layout::Root`).
pub const ROOT: &str = "GSH_RT_ROOT";
/// The layout version as an object (`u32`).
pub const ABI_VERSION_OBJECT: &str = "GSH_RT_ABI_VERSION";
/// `u32 gsh_rt_abi_version(void)`.
pub const ABI_VERSION_FN: &str = "gsh_rt_abi_version";
/// `const Root* gsh_rt_root(void)`.
pub const ROOT_FN: &str = "gsh_rt_root";
/// `i32 gsh_rt_init(u32 max_slots, u32 path_capacity)`: [`sig::Init`].
pub const INIT: &str = "gsh_rt_init";
/// `u8* gsh_rt_thread(void)`: the calling thread's block, created on first use.
pub const THREAD: &str = "gsh_rt_thread";
/// `i64 gsh_rt_tls_offset(void)`: where the thread's block address lives, `fs`-relative.
pub const TLS_OFFSET: &str = "gsh_rt_tls_offset";
/// `u8* gsh_rt_alloc(usize len)`: zeroed memory, freed only when the library is unloaded.
pub const ALLOC: &str = "gsh_rt_alloc";
/// `i32 gsh_rt_add_unwind_table(const UnwindEntry*, usize len)`.
pub const ADD_UNWIND_TABLE: &str = "gsh_rt_add_unwind_table";
/// `void gsh_rt_count(u32 slot)`.
pub const COUNT: &str = "gsh_rt_count";
/// `i32 gsh_rt_set_output(const char* path)`.
pub const SET_OUTPUT: &str = "gsh_rt_set_output";
/// `i32 gsh_rt_write(const char* path)`.
pub const WRITE: &str = "gsh_rt_write";
/// `void gsh_rt_unloading(i32 on)`: [`sig::Unloading`].
pub const UNLOADING: &str = "gsh_rt_unloading";

/// `void gsh_rt_path_loop_enter(u32 slot, u64 key, u64 rbp)`: [`sig::Path`] (`rbp` unused). A
/// loop's activation timed along call paths: keyed by the call path of the profiled
/// activation of its function it runs in (the path frame at `key` +
/// [`crate::layout::LOOP_KEY_BELOW_ENTRY`]), closed by `gsh_rt_path_exit(slot, key)`. Live
/// processes only: no descriptor cell names it.
pub const PATH_LOOP_ENTER: &str = "gsh_rt_path_loop_enter";
/// As [`PATH_LOOP_ENTER`], bounded as the [`Event::bounded`] variants are.
pub const PATH_LOOP_ENTER_TSC: &str = "gsh_rt_path_loop_enter_tsc";

/// The event functions generated code calls, in the order of the measuring descriptor's `fns`
/// cells (`crate::descriptor::Descriptor::fns`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum Event {
    /// `gsh_rt_enter(slot, rsp)`: wall timer entry (also counts).
    Enter,
    /// `gsh_rt_exit(slot, rsp)`: wall timer exit.
    Exit,
    /// `gsh_rt_enter_cpu(slot, rsp)`: thread-CPU timer entry.
    EnterCpu,
    /// `gsh_rt_exit_cpu(slot, rsp)`: thread-CPU timer exit.
    ExitCpu,
    /// `gsh_rt_path_enter(slot, rsp, rbp)`: call-path profile entry, wall time.
    PathEnter,
    /// `gsh_rt_path_exit(slot, rsp)`: call-path profile exit (wall or CPU).
    PathExit,
    /// `gsh_rt_path_enter_cpu(slot, rsp, rbp)`: call-path profile entry, thread CPU time.
    PathEnterCpu,
    /// `gsh_rt_path_count(slot, rsp, rbp)`: call path counted only; no exit.
    PathCount,
}

impl Event {
    /// Every event function, in the descriptor's order (`ALL[k]` is `fns[k]`).
    pub const ALL: [Event; 8] = [
        Event::Enter,
        Event::Exit,
        Event::EnterCpu,
        Event::ExitCpu,
        Event::PathEnter,
        Event::PathExit,
        Event::PathEnterCpu,
        Event::PathCount,
    ];

    /// The exported name.
    pub const fn name(self) -> &'static str {
        match self {
            Event::Enter => "gsh_rt_enter",
            Event::Exit => "gsh_rt_exit",
            Event::EnterCpu => "gsh_rt_enter_cpu",
            Event::ExitCpu => "gsh_rt_exit_cpu",
            Event::PathEnter => "gsh_rt_path_enter",
            Event::PathExit => "gsh_rt_path_exit",
            Event::PathEnterCpu => "gsh_rt_path_enter_cpu",
            Event::PathCount => "gsh_rt_path_count",
        }
    }

    /// The bounded variant's name: the same arguments and records, reading the wall clock
    /// from the TSC only (use it only when the root's `clock_kind` is `CLOCK_RDTSC`), never
    /// calling out of the library, never creating the thread's block.
    pub const fn bounded(self) -> &'static str {
        match self {
            Event::Enter => "gsh_rt_enter_tsc",
            Event::Exit => "gsh_rt_exit_tsc",
            Event::EnterCpu => "gsh_rt_enter_cpu_tsc",
            Event::ExitCpu => "gsh_rt_exit_cpu_tsc",
            Event::PathEnter => "gsh_rt_path_enter_tsc",
            Event::PathExit => "gsh_rt_path_exit_tsc",
            Event::PathEnterCpu => "gsh_rt_path_enter_cpu_tsc",
            Event::PathCount => "gsh_rt_path_count_tsc",
        }
    }

    /// Its index in the descriptor's `fns`.
    pub const fn index(self) -> usize {
        self as usize
    }
}

/// What kind of symbol an export is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// A function (`STT_FUNC`).
    Function,
    /// A data object (`STT_OBJECT`).
    Object,
}

/// Every symbol the runtime exports, with its kind: what the engine may look up.
pub fn all() -> impl Iterator<Item = (&'static str, Kind)> {
    const PLAIN: [(&str, Kind); 15] = [
        (ROOT, Kind::Object),
        (ABI_VERSION_OBJECT, Kind::Object),
        (ABI_VERSION_FN, Kind::Function),
        (ROOT_FN, Kind::Function),
        (INIT, Kind::Function),
        (THREAD, Kind::Function),
        (TLS_OFFSET, Kind::Function),
        (ALLOC, Kind::Function),
        (ADD_UNWIND_TABLE, Kind::Function),
        (COUNT, Kind::Function),
        (SET_OUTPUT, Kind::Function),
        (WRITE, Kind::Function),
        (UNLOADING, Kind::Function),
        (PATH_LOOP_ENTER, Kind::Function),
        (PATH_LOOP_ENTER_TSC, Kind::Function),
    ];
    PLAIN.into_iter().chain(
        Event::ALL
            .into_iter()
            .flat_map(|e| [(e.name(), Kind::Function), (e.bounded(), Kind::Function)]),
    )
}

/// The C signatures of the exports, as Rust function-pointer types: the runtime asserts at
/// compile time that each of its functions has its type.
pub mod sig {
    use crate::layout::{Root, UnwindEntry};

    /// [`super::INIT`].
    pub type Init = extern "C" fn(max_slots: u32, path_capacity: u32) -> i32;
    /// [`super::THREAD`] and [`super::ALLOC`]'s result: a block or memory, null on failure.
    pub type Thread = extern "C" fn() -> *mut u8;
    /// [`super::TLS_OFFSET`].
    pub type TlsOffset = extern "C" fn() -> i64;
    /// [`super::ALLOC`].
    pub type Alloc = extern "C" fn(len: usize) -> *mut u8;
    /// [`super::ADD_UNWIND_TABLE`].
    pub type AddUnwindTable = unsafe extern "C" fn(entries: *const UnwindEntry, len: usize) -> i32;
    /// [`super::COUNT`].
    pub type Count = extern "C" fn(slot: u32);
    /// [`super::SET_OUTPUT`] and [`super::WRITE`].
    pub type Output = unsafe extern "C" fn(path: *const core::ffi::c_char) -> i32;
    /// [`super::UNLOADING`]: with `on` non-zero, the library's unloading (`dlclose`) gives
    /// back what the runtime holds in the process (its pthread key, arena, fork handler,
    /// unwind tables); with 0, its unloading at the process's exit does not.
    pub type Unloading = extern "C" fn(on: i32);
    /// [`super::ROOT_FN`].
    pub type RootFn = extern "C" fn() -> *const Root;
    /// [`super::ABI_VERSION_FN`].
    pub type AbiVersion = extern "C" fn() -> u32;
    /// Timer events and path exits: `(slot, rsp)`.
    pub type Timer = extern "C" fn(slot: u32, rsp: u64);
    /// Path entries and counts: `(slot, rsp, rbp)`.
    pub type Path = extern "C" fn(slot: u32, rsp: u64, rbp: u64);
}
