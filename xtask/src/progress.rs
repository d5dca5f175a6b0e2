//! What the benchmarks that read a program's own progress report share (`bench-consult`,
//! `bench-stops`): the clock the program stamps its lines with, and how an estimate is put
//! beside what was measured.

/// CLOCK_MONOTONIC in seconds, the clock the program stamps its progress with.
pub fn now() -> f64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec for the call.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as f64 + ts.tv_nsec as f64 / 1e9
}

/// `estimate / measured` as text; a measured share under a tenth of a percent (within the
/// noise, or a speed-up) has no meaningful ratio.
pub fn ratio(estimate: f64, measured: f64) -> String {
    if measured < 0.001 {
        format!("not meaningful (measured {:.2}%)", measured * 100.0)
    } else {
        format!("{:.2}", estimate / measured)
    }
}
