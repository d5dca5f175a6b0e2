//! The per-thread pointer to the thread block, in an initial-exec TLS word.
//!
//! Stable Rust's `thread_local!` in a `dlopen`ed cdylib uses the global-dynamic model: every
//! access calls `__tls_get_addr`. Instead the word is declared in assembly in `.tbss` and read
//! through a `@GOTTPOFF` relocation, which the linker turns into an initial-exec access
//! (`mov rax, [rip+GOT]; mov rax, fs:[rax]`) and the library gets `DF_STATIC_TLS`. glibc serves
//! such libraries from its surplus static TLS when they are `dlopen`ed (512+ bytes reserved; we
//! use 16) and zeroes the word in every existing thread. The word's `fs` offset is constant for
//! the life of the process, so generated code can inline `mov r11, fs:[OFF]` with the value
//! from `gsh_rt_tls_offset()`.
//!
//! The second word is the thread's "inside the runtime" flag that stops the slow path from
//! recursing when it calls something that is itself instrumented.

use std::arch::{asm, global_asm};

global_asm!(
    ".pushsection .tbss,\"awT\",@nobits",
    ".p2align 4",
    ".globl gsh_rt_tls_area",
    ".hidden gsh_rt_tls_area",
    ".type gsh_rt_tls_area, @object",
    ".size gsh_rt_tls_area, 16",
    "gsh_rt_tls_area:",
    ".zero 16",
    ".popsection",
);

/// The calling thread's block (its `ThreadHeader`), null until the slow path has run.
#[inline(always)]
pub fn block() -> *mut u8 {
    let p: *mut u8;
    // SAFETY: reads the IE TLS word declared above; `fs` is the thread pointer on x86-64 Linux.
    unsafe {
        asm!(
            "mov {p}, qword ptr [rip + gsh_rt_tls_area@GOTTPOFF]",
            "mov {p}, qword ptr fs:[{p}]",
            p = out(reg) p,
            options(nostack, readonly, preserves_flags),
        );
    }
    p
}

/// Sets the calling thread's block pointer.
pub fn set_block(b: *mut u8) {
    // SAFETY: writes the calling thread's own IE TLS word.
    unsafe {
        asm!(
            "mov {t}, qword ptr [rip + gsh_rt_tls_area@GOTTPOFF]",
            "mov qword ptr fs:[{t}], {b}",
            t = out(reg) _,
            b = in(reg) b,
            options(nostack, preserves_flags),
        );
    }
}

/// Reads the calling thread's "inside the runtime" flag.
pub fn busy() -> bool {
    let v: u64;
    // SAFETY: reads the second word of the calling thread's IE TLS area.
    unsafe {
        asm!(
            "mov {v}, qword ptr [rip + gsh_rt_tls_area@GOTTPOFF]",
            "mov {v}, qword ptr fs:[{v} + 8]",
            v = out(reg) v,
            options(nostack, readonly, preserves_flags),
        );
    }
    v != 0
}

/// Sets or clears the calling thread's "inside the runtime" flag.
pub fn set_busy(on: bool) {
    // SAFETY: writes the second word of the calling thread's own IE TLS area.
    unsafe {
        asm!(
            "mov {t}, qword ptr [rip + gsh_rt_tls_area@GOTTPOFF]",
            "mov qword ptr fs:[{t} + 8], {v}",
            t = out(reg) _,
            v = in(reg) on as u64,
            options(nostack, preserves_flags),
        );
    }
}

/// The `fs`-relative offset of the block-pointer word (negative: static TLS sits below the
/// thread pointer on x86-64). `ld.so` writes it into the GOT when it relocates the library, so
/// it is valid from then on, before any constructor or event (the descriptor constructor
/// relies on that).
pub fn offset() -> i64 {
    let off: i64;
    // SAFETY: loads the TP offset the dynamic linker stored in the GOT for the IE access.
    unsafe {
        asm!(
            "mov {o}, qword ptr [rip + gsh_rt_tls_area@GOTTPOFF]",
            o = out(reg) off,
            options(nostack, readonly, preserves_flags),
        );
    }
    off
}
