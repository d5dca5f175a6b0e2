//! Clocks. Wall time is `rdtsc` converted to nanoseconds with a 32.32 multiplier calibrated
//! against `CLOCK_MONOTONIC` once at initialisation, when the TSC is invariant (the kernel uses
//! it as its clocksource, or CPUID says so); otherwise the vDSO `clock_gettime(CLOCK_MONOTONIC)`.
//! Thread CPU time is `clock_gettime(CLOCK_THREAD_CPUTIME_ID)`, a real system call on Linux.
//! The `_tsc` entry points read only [`tsc_ns`] and [`cpu_ns_raw`], which never call out of
//! the library.
//!
//! Measured on the 2-core AMD EPYC KVM guest this was written on (see `examples/bench.rs`):
//! `rdtsc` ~8 ns, vDSO `CLOCK_MONOTONIC` ~20 ns, `CLOCK_THREAD_CPUTIME_ID` ~250 ns.

use crate::layout::{CLOCK_MONOTONIC, CLOCK_RDTSC};
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering::Relaxed};

/// Which wall clock is in use, copied from the root for a cheap branch.
static KIND: AtomicU32 = AtomicU32::new(CLOCK_MONOTONIC);
/// 32.32 fixed-point ns per tick.
static MULT: AtomicU64 = AtomicU64::new(1 << 32);

/// Reads the time-stamp counter.
#[inline(always)]
pub fn rdtsc() -> u64 {
    // SAFETY: rdtsc is unprivileged on Linux (CR4.TSD is clear) and has no memory effects.
    unsafe { core::arch::x86_64::_rdtsc() }
}

/// Reads a POSIX clock in nanoseconds (0 if the clock is unavailable).
#[inline(always)]
pub fn posix_ns(clock: libc::clockid_t) -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid out-pointer; clock_gettime only writes it.
    unsafe { libc::clock_gettime(clock, &mut ts) };
    (ts.tv_sec as u64)
        .wrapping_mul(1_000_000_000)
        .wrapping_add(ts.tv_nsec as u64)
}

/// Wall-clock nanoseconds (an arbitrary but fixed origin).
#[inline(always)]
pub fn wall_ns() -> u64 {
    if KIND.load(Relaxed) == CLOCK_RDTSC {
        ((rdtsc() as u128 * MULT.load(Relaxed) as u128) >> 32) as u64
    } else {
        posix_ns(libc::CLOCK_MONOTONIC)
    }
}

/// Thread CPU-time nanoseconds.
#[inline(always)]
pub fn cpu_ns() -> u64 {
    posix_ns(libc::CLOCK_THREAD_CPUTIME_ID)
}

/// Wall-clock nanoseconds from the TSC alone, for the `_tsc` entry points: no branch to the
/// vDSO, so nothing outside the library is reachable. Only meaningful when the root's
/// `clock_kind` is [`CLOCK_RDTSC`] (otherwise the multiplier is 1.0 and this returns ticks).
#[inline(always)]
pub fn tsc_ns() -> u64 {
    ((rdtsc() as u128 * MULT.load(Relaxed) as u128) >> 32) as u64
}

/// Thread CPU-time nanoseconds through a raw `syscall` rather than libc's `clock_gettime`,
/// for the `_tsc` entry points (the vDSO has no fast path for CPU-time clocks: it makes the
/// same system call).
#[inline(always)]
pub fn cpu_ns_raw() -> u64 {
    crate::sys::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID)
}

/// Result of [`calibrate`]: what the root records.
pub struct Calibration {
    /// `CLOCK_RDTSC` or `CLOCK_MONOTONIC`.
    pub kind: u32,
    /// 32.32 ns per tick (1.0 for the monotonic clock).
    pub mult: u64,
    /// TSC at the end of calibration.
    pub tsc: u64,
    /// Monotonic ns at the same moment.
    pub mono: u64,
}

/// Chooses the wall clock and calibrates the TSC against `CLOCK_MONOTONIC` with a ~2 ms spin.
/// `GSH_RT_CLOCK=monotonic` in the environment forces the vDSO clock.
pub fn calibrate() -> Calibration {
    // SAFETY: getenv reads the environment without allocating (std's var_os would allocate,
    // and malloc may be the very function being measured).
    let env = unsafe { libc::getenv(c"GSH_RT_CLOCK".as_ptr()) };
    // SAFETY: a non-null getenv result is a NUL-terminated string.
    let forced_mono = !env.is_null() && unsafe { std::ffi::CStr::from_ptr(env) } == c"monotonic";
    let use_tsc = !forced_mono && tsc_is_invariant();
    let (t0, m0) = paired_read();
    let (mut t1, mut m1) = (t0, m0);
    while m1.saturating_sub(m0) < 2_000_000 {
        (t1, m1) = paired_read();
    }
    let ticks = t1.wrapping_sub(t0);
    let mult = if use_tsc && ticks > 0 {
        (((m1 - m0) as u128) << 32)
            .checked_div(ticks as u128)
            .unwrap_or(1 << 32) as u64
    } else {
        1 << 32
    };
    let kind = if use_tsc && mult > 0 {
        CLOCK_RDTSC
    } else {
        CLOCK_MONOTONIC
    };
    MULT.store(if kind == CLOCK_RDTSC { mult } else { 1 << 32 }, Relaxed);
    KIND.store(kind, Relaxed);
    Calibration {
        kind,
        mult: MULT.load(Relaxed),
        tsc: t1,
        mono: m1,
    }
}

/// A TSC and a monotonic reading taken as close together as two tries allow.
fn paired_read() -> (u64, u64) {
    let mut best = (0, 0, u64::MAX);
    for _ in 0..3 {
        let a = rdtsc();
        let m = posix_ns(libc::CLOCK_MONOTONIC);
        let b = rdtsc();
        if b.wrapping_sub(a) < best.2 {
            best = (a / 2 + b / 2, m, b.wrapping_sub(a));
        }
    }
    (best.0, best.1)
}

/// True when the TSC ticks at a constant rate through frequency changes and sleep states:
/// CPUID 0x80000007 EDX bit 8, or (in VMs that hide that bit) the kernel chose `tsc` as its
/// clocksource, which it only does after checking the same.
fn tsc_is_invariant() -> bool {
    let max_ext = core::arch::x86_64::__cpuid(0x8000_0000).eax;
    if max_ext >= 0x8000_0007 {
        let edx = core::arch::x86_64::__cpuid(0x8000_0007).edx;
        if edx & (1 << 8) != 0 {
            return true;
        }
    }
    let mut buf = [0u8; 64];
    let mut text = [0u8; 64];
    let mut len = 0;
    crate::sys::read_file_chunks(
        c"/sys/devices/system/clocksource/clocksource0/current_clocksource",
        &mut buf,
        |chunk| {
            let n = chunk.len().min(text.len() - len);
            text[len..len + n].copy_from_slice(&chunk[..n]);
            len += n;
        },
    );
    text[..len].trim_ascii() == b"tsc"
}
