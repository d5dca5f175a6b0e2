//! Refinement through instrumentation: Paradyn's insert-test-remove cycle, down to loops, as
//! the loop-aware search seed does it. A function the samples found CPU-bound is refined into
//! its outermost loops, and a loop found CPU-bound into the loops nested directly in it. Each
//! loop experiment inserts a live loop timer (the engine's one model: a
//! [`Measured::Loop`](crate::instrument::measure::Measured) measure of
//! [`Metric::Time`](crate::instrument::Metric), exactly what `time FUNC loop LOOP` inserts),
//! measures for an interval, and takes the timer out again as soon as the experiment is judged.
//!
//! A loop below a chain of calls the search went on along from a call path (its function
//! reached through several paths) is timed along that path alone ([`Probes::insert_path_loop`]):
//! the loop's timer from every caller would time the other paths' activations of it too.
//!
//! [`ProbeLab`] is the search's [`Lab`]: loop foci are its own; every other focus goes to the
//! [`ProcLab`] it wraps (samples). [`Probes`] is what inserts, reads and removes the timers;
//! `instrument::consult_probes::LiveProbes` does it in a live process through its tracer.
//!
//! A loop's fraction is a lower bound of the thread's CPU demand (time on a CPU or runnable)
//! spent in it: the loop's wall time from its timer, less the thread's time neither on a CPU
//! nor runnable (from `/proc`'s `schedstat`) over the same interval. For a loop that computes,
//! the two agree; a loop that sleeps reads 0. RunQueue at a loop is that demand times the
//! thread's share of it spent waiting for a CPU over the interval.
//!
//! A timer opens at the loop's entry: a loop running since before its timer went in (a
//! program's main loop, entered once) shows no time. It is judged false with a note saying so,
//! and refined all the same ([`Reading::opaque`]): the loops nested in it are entered afresh on
//! each of its iterations, so their timers see them. A loop unseen inside an unseen loop is
//! not refined further: the outer one has more likely ended than run all along.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Instant;

use super::pace::{Pace, HOLD_AT};
use super::proclab::ProcLab;
use super::{Experiment, Focus, Hypothesis, Lab, Method, ProbeId, Reading, Resource};

/// One loop of a function, as `loops FUNC` names it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LoopInfo {
    /// `loop_1.2`.
    pub name: String,
    /// The loop it is nested in directly, if any.
    pub parent: Option<String>,
}

/// What one loop timer has measured in one thread so far.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TimerValue {
    /// Entries into the loop.
    pub entries: u64,
    /// Nanoseconds inside it (an activation open now is credited up to now).
    pub ns: u64,
}

/// What inserts, reads and removes loop timers.
pub trait Probes {
    /// The loops of `function` in `module`, outermost first (pre-order), or why it has none
    /// that can be timed.
    fn loops(&mut self, module: &str, function: &str) -> Result<Vec<LoopInfo>, String>;
    /// Inserts a timer of loop `lp` of `function`; its id.
    fn insert(&mut self, module: &str, function: &str, lp: &str) -> Result<u32, String>;
    /// What timer `id` has measured in thread `tid`.
    fn read(&mut self, id: u32, tid: i32) -> Result<TimerValue, String>;
    /// What timer `id` has measured over every thread: what it cost. By default, what it
    /// measured in thread `tid`.
    fn read_all(&mut self, id: u32, tid: i32) -> Result<TimerValue, String> {
        self.read(id, tid)
    }
    /// Takes timer `id` out, with what it measured.
    fn remove(&mut self, id: u32) -> Result<(), String>;
    /// Inserts a timer of `caller`'s direct calls to `callee` (`time CALLER call CALLEE`,
    /// both in `module`): the time `callee` runs when called from `caller`; its id.
    fn insert_call(&mut self, module: &str, caller: &str, callee: &str) -> Result<u32, String> {
        let _ = (module, caller, callee);
        Err("calls are timed only in a live process".into())
    }
    /// Inserts a timer of a call path's last function (in `module`) that counts only its
    /// activations along the whole `path` (the functions from the thread's entry, caller first,
    /// ending in it: iPath): a profile of the function, each activation told apart by the
    /// return addresses on its stack, read as that path's alone; its id. Read and removed as
    /// the other timers are.
    fn insert_path(&mut self, module: &str, path: &[String]) -> Result<u32, String> {
        let _ = (module, path);
        Err("call paths are timed only in a live process".into())
    }
    /// Inserts a timer of loop `lp` of a call path's last function (in `module`) that counts
    /// only the loop's activations inside that function's activations along the whole `path`
    /// (as [`Probes::insert_path`]'s): the function's profile and the loop timed along its
    /// call paths; its id. Read and removed as the other timers are; read over every thread, it
    /// reads the profile's activations (each call of the function runs the profile and the
    /// loop's entries in it: what it costs).
    fn insert_path_loop(&mut self, module: &str, path: &[String], lp: &str) -> Result<u32, String> {
        let _ = (module, path, lp);
        Err("loops along call paths are timed only in a live process".into())
    }
    /// The innermost loop of `function` in `module` holding the runtime address `pc`, if any.
    fn loop_at(&mut self, module: &str, function: &str, pc: u64) -> Option<String> {
        let _ = (module, function, pc);
        None
    }
    /// True when the code of `function`'s module is analysed, so that its loops can be named
    /// and timed at once; when not, starts analysing it in the background and says false (a
    /// large module, python3's interpreter, takes seconds, which the search does not wait
    /// for: it asks again at its next step).
    fn ready(&mut self, module: &str, function: &str) -> bool {
        let _ = (module, function);
        true
    }
    /// True when a probe can go into `function`'s module at once: what its placement is
    /// planned from (a pass over every function of the module) is ready. When not, it is
    /// prepared in the background, after the analysis ([`Probes::ready`]), and this says
    /// false: done by the first insert, it held the tracer thread 10 to 16 s on python3 under
    /// load (a debug gsh), the stack samples and the search waiting on it.
    fn planned(&mut self, module: &str, function: &str) -> bool {
        self.ready(module, function)
    }
    /// Learns the libraries the program loaded since the last call (so their functions and
    /// loops can be named and timed); how many there were.
    fn learn(&mut self) -> Result<usize, String> {
        Ok(0)
    }
    /// Inserts a counter of `function`'s calls (`count FUNC`): the program's progress, with
    /// next to nothing added to it (about nothing in `bench-consult`'s loop, where `count FUNC
    /// loop LOOP` adds 16 ns per entry and a loop timer 4), the baseline of a timer's cost in
    /// situ. Its id, read and removed as a timer's (its entries are the calls).
    fn count_calls(&mut self, module: &str, function: &str) -> Result<u32, String> {
        let _ = (module, function);
        Err("calls are counted only in a live process".into())
    }
    /// How long each insert and each removal (of timers and counters alike) took, for the
    /// report: while one goes on, the search and the stack sampler wait.
    fn changes(&self) -> Changes {
        Changes::default()
    }
}

/// How long the probes' inserts and removals took, in seconds each, in the order made.
#[derive(Clone, Debug, Default, PartialEq, serde::Serialize)]
pub struct Changes {
    /// Each insert (timers, counters, profiles), failed ones included.
    pub inserts: Vec<f64>,
    /// Each removal.
    pub removes: Vec<f64>,
    /// Seconds they held the whole program, every thread stopped (loading the runtime,
    /// writing the jumps into trampolines and taking them out), summed: part of each
    /// change's time, the rest gsh's work while the program ran.
    pub held: f64,
}

/// Keeps `e` among the probes' errors unless process `pid` has ended: a timer that could not
/// go into or come out of a program that is gone is no error of the search (sort and python3's
/// regression tests, ending while searched, listed one for each timer still in).
fn keep_error(errors: &mut Vec<String>, pid: i32, e: String) {
    if !super::sample::ended(pid) {
        errors.push(e);
    }
}

/// How often [`ProbeLab::learn`] looks for libraries loaded meanwhile.
const LEARN_EVERY: std::time::Duration = std::time::Duration::from_secs(1);

/// Nanoseconds one timed loop entry and exit cost on this machine, measured by [`calibrate`]
/// as a search starts.
///
/// What a loop timer runs per entry is the inline code `time` generates
/// (`snippet/codegen/rt.rs`): at the entry, a trampoline reached by a jump saves `r11`, finds
/// the thread's block through `fs`, reads the clock (`rdtsc`), checks for an open activation,
/// reads the clock again to open one and stores its start and stack pointer; at the exit,
/// another reads the clock once more and adds. The calibration runs that sequence, written in
/// assembly so that gsh's own build (debug or release) does not change it, each half reached
/// by a call as a trampoline is by a jump, against the same loop calling two bare `ret`s, in
/// the same run: the difference per iteration is the cost. The clock read dominates, and it
/// is what differs most between machines (a virtual machine that traps `rdtsc` pays
/// microseconds), so it is measured, never assumed.
///
/// Run back to back, the sequence costs its whole latency: an upper bound of what it adds
/// where the program's own work can run beside it. In a loop bound by its own dependency
/// chain (`xtask bench-consult`'s) a timed entry costs about 4 ns against the 18 to 26 ns
/// measured here. So [`ProbeLab`] measures each timer's cost in situ (what it adds to the
/// thread's time per call of its function, by turns in and out) and uses this bound only until
/// it has that measure.
pub fn calibrate() -> f64 {
    extern "C" {
        fn gsh_consult_calibrate_enter(slot: *mut Slot, sp: u64);
        fn gsh_consult_calibrate_exit(slot: *mut Slot, sp: u64);
    }
    let timed = best(gsh_consult_calibrate_enter, gsh_consult_calibrate_exit);
    (timed - bare()).max(1.0)
}

/// Nanoseconds one count costs as a trampoline places it at a function's entry: reached by
/// a jump, the red zone skipped, `r11` saved, the thread's block found through `fs`, a test
/// and an `inc`, then a jump back; run back to back against the same loop without it, an
/// upper bound of what it adds, as [`calibrate`]'s is. What the counters a timer's turns
/// ([`TURNS`]) keep in are paid at.
///
/// Reached by a call and left by a `ret` beside a bare call and `ret` (as [`calibrate`]'s
/// halves are), the count read 0 ns: its few instructions ran in the shadow of the call and
/// return the bare loop paid too, and the counters of python3's turns (its hottest callee's
/// calls, every 78 ns) were paid nothing. The jumps are what the program pays in their place.
pub fn calibrate_count() -> f64 {
    extern "C" {
        fn gsh_consult_calibrate_count_placed(n: u64, slot: *mut Slot);
        fn gsh_consult_calibrate_count_bare(n: u64, slot: *mut Slot);
    }
    let placed = best_loop(gsh_consult_calibrate_count_placed);
    let bare = best_loop(gsh_consult_calibrate_count_bare);
    (placed - bare).max(0.0)
}

/// The slot after `n` iterations of [`calibrate_count`]'s placed count (its assembly is
/// referred to from this module only: its labels are local).
#[cfg(test)]
fn count_placed(n: u64) -> Slot {
    extern "C" {
        fn gsh_consult_calibrate_count_placed(n: u64, slot: *mut Slot);
    }
    let mut s = Slot::default();
    // SAFETY: as in `best_loop`.
    unsafe { gsh_consult_calibrate_count_placed(n, &mut s) };
    s
}

/// A loop of `n` iterations over a slot, written in assembly.
type Looped = unsafe extern "C" fn(u64, *mut Slot);

/// Best of `RUNS` runs of `N` iterations of `f`, in ns per iteration (as [`best`]).
fn best_loop(f: Looped) -> f64 {
    const N: u64 = 10_000;
    const RUNS: usize = 40;
    let f = std::hint::black_box(f);
    (0..RUNS)
        .map(|_| {
            let mut s = Slot::default();
            let t = Instant::now();
            // SAFETY: the loops read and write only the fourth word of `s`, which is live and
            // exclusively borrowed here, plus `fs:[0]` (the thread control block's self
            // pointer the x86-64 Linux ABI guarantees), use the stack below `rsp` only past
            // the red zone, and follow the C calling convention (they change only rcx, rdi,
            // r11, which they restore, and the flags).
            unsafe { f(N, &mut s) };
            std::hint::black_box(&s);
            t.elapsed().as_nanos() as f64 / N as f64
        })
        .fold(f64::INFINITY, f64::min)
}

/// The slot the calibration's sequences work on (start, open stack pointer, total, entries).
#[repr(C)]
#[derive(Default)]
struct Slot([u64; 4]);

/// One half of a calibrated sequence: the code at a loop's entry or exit.
type Half = unsafe extern "C" fn(*mut Slot, u64);

/// Nanoseconds per iteration of the calibration loop calling two bare `ret`s.
fn bare() -> f64 {
    extern "C" {
        fn gsh_consult_calibrate_nothing(slot: *mut Slot, sp: u64);
    }
    best(gsh_consult_calibrate_nothing, gsh_consult_calibrate_nothing)
}

/// Best of `RUNS` runs of `N` entries and exits through `e` and `x`, in ns per entry. Many
/// short runs: on a loaded machine a run that a preemption falls into reads long, and the
/// shortest is the one that ran alone.
fn best(e: Half, x: Half) -> f64 {
    const N: u32 = 10_000;
    const RUNS: usize = 40;
    let (e, x) = (std::hint::black_box(e), std::hint::black_box(x));
    (0..RUNS)
        .map(|_| {
            let mut s = Slot::default();
            let t = Instant::now();
            for i in 0..N {
                let sp = std::hint::black_box(0x7fff_0000 - u64::from(i & 1) * 64);
                // SAFETY: every half reads and writes only the four words of `s`, which is
                // live and exclusively borrowed here, plus `fs:[0]` (the thread control
                // block's self pointer the x86-64 Linux ABI guarantees), and follows the C
                // calling convention (they change only rax, rdx, rcx, r11 and the flags).
                unsafe {
                    e(&mut s, sp);
                    x(&mut s, sp);
                }
            }
            std::hint::black_box(&s);
            t.elapsed().as_nanos() as f64 / f64::from(N)
        })
        .fold(f64::INFINITY, f64::min)
}

// The timer's sequence for [`calibrate`]; rdi is the slot, rsi the stack pointer at the point.
std::arch::global_asm!(
    ".pushsection .text.gsh_consult_calibrate,\"ax\",@progbits",
    ".p2align 4",
    "gsh_consult_calibrate_enter:",
    "push r11",
    "mov r11, qword ptr fs:[0]",
    "test r11, r11",
    "jz 2f",
    "rdtsc",
    "shl rdx, 32",
    "or rax, rdx",
    "mov rcx, qword ptr [rdi + 8]",
    "test rcx, rcx",
    "jz 1f",
    "cmp rsi, rcx",
    "jb 2f",
    "1:",
    "rdtsc",
    "shl rdx, 32",
    "or rax, rdx",
    "mov qword ptr [rdi], rax",
    "mov qword ptr [rdi + 8], rsi",
    "inc qword ptr [rdi + 24]",
    "2:",
    "pop r11",
    "ret",
    ".p2align 4",
    "gsh_consult_calibrate_exit:",
    "push r11",
    "mov r11, qword ptr fs:[0]",
    "test r11, r11",
    "jz 3f",
    "cmp rsi, qword ptr [rdi + 8]",
    "jb 3f",
    "rdtsc",
    "shl rdx, 32",
    "or rax, rdx",
    "sub rax, qword ptr [rdi]",
    "add qword ptr [rdi + 16], rax",
    "mov qword ptr [rdi + 8], 0",
    "3:",
    "pop r11",
    "ret",
    ".p2align 4",
    "gsh_consult_calibrate_nothing:",
    "ret",
    ".p2align 4",
    // rdi the iterations, rsi the slot: each jumps to the count and back, as a function
    // entry patched with a jump to its trampoline does.
    "gsh_consult_calibrate_count_placed:",
    "mov rcx, rdi",
    "5:",
    "jmp 7f",
    "6:",
    "dec rcx",
    "jnz 5b",
    "ret",
    ".p2align 6",
    "7:",
    "lea rsp, [rsp - 128]",
    "push r11",
    "mov r11, qword ptr fs:[0]",
    "test r11, r11",
    "jz 4f",
    "inc qword ptr [rsi + 24]",
    "4:",
    "pop r11",
    "lea rsp, [rsp + 128]",
    "jmp 6b",
    ".p2align 4",
    // The same loop without the count.
    "gsh_consult_calibrate_count_bare:",
    "mov rcx, rdi",
    "8:",
    "dec rcx",
    "jnz 8b",
    "ret",
    ".popsection",
);

/// The cost predicted for a loop timer before its entry rate is known.
const UNKNOWN_COST: f64 = 0.002;

/// How long a timer must have been in before what it costs is taken as known: long enough for
/// a loop entered often to show its rate, short enough that a timer over the cost limit is out
/// again before it has cost much.
const RATE_WINDOW: f64 = 0.05;

/// How a timer's cost is measured in situ: beside a counter of its function's calls, the
/// timer is out and in by turns, out first, `TURNS` turns in all (so the timer's last turn
/// goes on as its experiment), each for `TURN_CPU` CPU seconds of the experiment's thread or
/// `TURN_WALL` wall seconds (a thread that barely runs). Turns rather than one baseline then
/// the timer, so that a drift of the thread's speed per CPU second (a loaded shared machine)
/// affects both alike.
const TURNS: usize = 6;
const TURN_CPU: f64 = 0.04;
const TURN_WALL: f64 = 0.4;

/// The fewest entries a rate in situ (the counter's or the timer's) is taken from.
const MIN_ENTRIES: u64 = 1000;

/// How far over the cost limit a timer's turns so far must show it to end them early: twice
/// the limit, beyond what one turn's noise makes of a timer within it.
const OVER: f64 = 2.0;

/// The thread's CPU nanoseconds per unit without timer turns `c`'s timer and with it, where
/// its cost is a share of its thread's time rather than a cost per entry (too few entries or
/// calls for that: [`ProbeLab::end_turns`]). The unit is a call of the function where it is
/// called often enough, else a call of its hottest callee (its progress). `None` before a
/// turn of each counted enough of them.
fn share_rates(c: &Turns) -> Option<(f64, f64)> {
    let enough = |without: u64, with: u64| without >= MIN_ENTRIES && with >= MIN_ENTRIES;
    let calls_enough = enough(c.counted.0, c.timed.0);
    if calls_enough && c.timed.2 >= MIN_ENTRIES {
        return None;
    }
    let (without, with) = if calls_enough {
        (c.counted.0, c.timed.0)
    } else if enough(c.progress_counted, c.progress_timed) {
        (c.progress_counted, c.progress_timed)
    } else {
        return None;
    };
    Some((
        c.counted.1 as f64 / without as f64,
        c.timed.1 as f64 / with as f64,
    ))
}

/// The share of its thread's time timer turns `c` so far show the timer adding, where its
/// cost is such a share ([`share_rates`]).
fn share_so_far(c: &Turns) -> Option<f64> {
    let (counted, timed) = share_rates(c)?;
    (timed > 0.0).then(|| ((timed - counted) / timed).clamp(0.0, 1.0))
}

/// The key of a timer in [`ProbeLab::shared`]: module, function, what it times.
type Key = (String, String, String);

/// A timer's cost being measured in situ ([`TURNS`]), in the thread of the experiment that
/// inserted it: a counter of the function's calls is in throughout, the timer in every other
/// turn.
struct Turns {
    counter: u32,
    /// A counter of the calls of the function's hottest callee (by the stack samples), when
    /// it has one: the thread's progress where the function itself is entered too rarely to
    /// tell (an interpreter's loop, entered once), with its calls at each turn's start and
    /// over the turns without the timer and with it.
    progress: Option<u32>,
    progress_calls: u64,
    progress_counted: u64,
    progress_timed: u64,
    /// The timer, in its turns.
    timer: Option<u32>,
    tid: i32,
    /// When the turn began; the thread's calls (by the counter), its timer's entries and its
    /// nanoseconds on a CPU then, and the timer's entries in every thread.
    started: Instant,
    calls: u64,
    entries: u64,
    run: u64,
    all: u64,
    /// Turns finished, and the thread's calls and CPU nanoseconds over the turns without the
    /// timer, and its calls, CPU nanoseconds and the timer's entries over the timer's.
    done: usize,
    counted: (u64, u64),
    timed: (u64, u64, u64),
    /// Entries in every thread over the timer's finished turns: paid at its cost per entry
    /// once known.
    timed_all: u64,
    /// Calls the counters counted over every finished turn, those not counted in the sums
    /// (a turn another probe went in or out in) too: what they cost, each at
    /// [`calibrate_count`]'s.
    counts: u64,
    /// No other probe went in or out since the turn began: a turn that saw one is not
    /// counted (its thread's rate changed by more than this timer).
    quiet: bool,
}

/// A timer's cost measured in situ as a share of its thread's time on a CPU, where its
/// entries do not tell it: what it adds to the thread's time per call of the function's
/// hottest callee (its progress), over that time with the timer. A timer costs so where its
/// placement slows code it does not time: python3's loop_4 of `_PyEval_EvalFrameDefault` has
/// an exit with no room for a jump, so the whole function runs from a copy (each call there
/// returns to the original, which jumps back), 25% of the program's time with no entry
/// counted (`xtask bench-consult --python`).
#[derive(Clone, Copy, Debug)]
struct Share {
    /// The thread's CPU nanoseconds per call of the callee without the timer, and with it.
    counted: f64,
    timed: f64,
    /// `(timed - counted) / timed`.
    share: f64,
}

/// A timer's cost measured in situ.
#[derive(Clone, Copy, Debug)]
struct InSitu {
    /// The thread's CPU nanoseconds per call of the function without the timer, and with it.
    counted: f64,
    timed: f64,
    /// Nanoseconds a timed entry costs: what the timer adds per call, over its entries per
    /// call, at most [`calibrate`]'s bound.
    ns: f64,
}

/// What one timer was measured to cost per entry, for the report.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct TimerCost {
    /// `MODULE!FUNCTION loop_1.2` or `MODULE!CALLER call CALLEE`.
    pub timer: String,
    /// The thread's CPU nanoseconds per call of the timer's function without the timer
    /// (beside a counter of the calls).
    pub counted_ns: Option<f64>,
    /// The same with the timer in.
    pub timed_ns: Option<f64>,
    /// Nanoseconds per timed entry counted for it: its cost in situ when measured, else the
    /// bound ([`ProbeStats::timer_ns`]).
    pub ns: f64,
    /// True when `ns` was measured in situ.
    pub in_situ: bool,
    /// Where its function is entered too rarely to measure `ns` in situ: the share of its
    /// thread's time on a CPU it took, measured in situ per call of the function's hottest
    /// callee ([`Share`]); it is counted so rather than per entry.
    pub share: Option<f64>,
}

/// The share of the cost limit the probes may take over the search: the stack samples keep
/// the rest (`stacks::sample_stacks`).
const PROBES_SHARE: f64 = 0.9;

/// A ProbeId's bit that marks it as a loop timer's (the others are the [`ProcLab`]'s).
const TIMER_BIT: u64 = 1 << 63;

/// A running loop experiment.
struct Timer {
    id: u32,
    tid: i32,
    started: Instant,
    value: TimerValue,
    /// Which hypothesis it tests (CPU demand, or its part spent waiting for a CPU).
    hypothesis: Hypothesis,
    /// The loop it times.
    focus: Focus,
    /// Its timer's key in [`ProbeLab::shared`].
    key: Key,
    /// The thread's nanoseconds on a CPU and runnable, at the start.
    sched: Sched,
    /// What the timer had measured over every thread, at the start.
    all: TimerValue,
    /// What it costs, once measured over [`RATE_WINDOW`]: the time its entries took, over
    /// the thread's time on a CPU meanwhile.
    cost: Option<f64>,
    /// Nanoseconds its entries (in every thread) have taken so far, as last read.
    paid: f64,
    /// It times a whole call path ([`Timed::Path`]).
    whole: bool,
}

/// A thread's scheduler counts: nanoseconds on a CPU, and runnable waiting for one.
#[derive(Clone, Copy, Debug, Default)]
struct Sched {
    run: u64,
    wait: u64,
}

/// The thread's nanoseconds on a CPU and waiting for one, from `schedstat`.
fn sched(pid: i32, tid: i32) -> Option<Sched> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/task/{tid}/schedstat")).ok()?;
    let mut it = s.split_whitespace().map(|x| x.parse::<u64>().ok());
    Some(Sched {
        run: it.next()??,
        wait: it.next()??,
    })
}

/// What the probes did over a search, for its report.
#[derive(Clone, Debug, Default, PartialEq, serde::Serialize)]
pub struct ProbeStats {
    /// Loop timers inserted.
    pub inserted: usize,
    /// Loop timers taken out again.
    pub removed: usize,
    /// Of the timers inserted, those of a call path's last call (`time CALLER call
    /// CALLEE`), where its whole path could not be timed; the others time loops and paths.
    pub call_timers: usize,
    /// Of the timers inserted, those of whole call paths ([`Probes::insert_path`]: a profile
    /// of the path's function, read for that path alone) and of loops along them
    /// ([`Probes::insert_path_loop`]).
    pub path_timers: usize,
    /// The share of the program's running time its loop timers took ([`super::Cost`]):
    /// [`ProbeStats::spent`] over what the threads would have run without the search; until
    /// the report sets it, over the search's wall time.
    pub cost: f64,
    /// The share of the program's running time their inserts and removals took by holding
    /// the whole program ([`Changes::held`], [`super::Cost`]).
    pub change_cost: f64,
    /// Seconds the timers ran: the entries they counted times the measured cost of one
    /// ([`ProbeStats::timer_ns`]).
    pub spent: f64,
    /// Nanoseconds one timed loop entry costs at most, as [`calibrate`] measured it when the
    /// search began: what a timer is counted at until its cost in situ is known.
    pub timer_ns: f64,
    /// Nanoseconds one counted entry costs at most ([`calibrate_count`]).
    pub count_ns: f64,
    /// Each timer's cost per entry, as measured in situ or bounded, in the order they came
    /// out.
    pub timer_costs: Vec<TimerCost>,
    /// Errors from inserting or removing timers, if any.
    pub errors: Vec<String>,
    /// How long the inserts and removals took.
    pub changes: Changes,
}

/// The search's lab: loop foci measured by live loop timers, every other focus by the
/// sampling lab it wraps.
pub struct ProbeLab<'p> {
    /// The sampling lab.
    pub inner: ProcLab,
    pid: i32,
    probes: Option<&'p mut dyn Probes>,
    timers: BTreeMap<u64, Timer>,
    next: u64,
    /// What each timer (keyed as in [`ProbeLab::shared`]) was measured to cost (the most
    /// seen, or the latest in situ): its predicted cost when it goes in again.
    costs: BTreeMap<Key, f64>,
    /// Timers whose cost in situ is being measured.
    turns: BTreeMap<Key, Turns>,
    /// Timers' costs in situ, once measured.
    in_situ: BTreeMap<Key, InSitu>,
    /// Timers' costs in situ as shares of their thread's time, where their function's calls
    /// were too few to measure a cost per entry.
    shares: BTreeMap<Key, Share>,
    /// Timers whose turns could not tell what they add (the thread slower per call without
    /// the timer than with it): the thread's CPU nanoseconds per call without and with, for
    /// the report.
    baseless: BTreeMap<Key, (f64, f64)>,
    /// The entries (in every thread) each timer in had counted as it went in.
    born: BTreeMap<Key, u64>,
    stats: ProbeStats,
    /// Nanoseconds paid by timers taken out (their entries times their cost per entry) and
    /// by counters.
    paid_ns: f64,
    started: Instant,
    /// When [`ProbeLab::learn`] last looked.
    learned: Instant,
    /// The timers in, by (module, function, loop), with the experiments using each.
    shared: BTreeMap<Key, (u32, usize)>,
    /// Loops whose timers saw no entry and no time.
    unseen: std::collections::BTreeSet<String>,
    /// Calls (keys as in [`ProbeLab::shared`]) whose timers could not be inserted: their
    /// paths are sampled without asking again.
    untimable: std::collections::BTreeSet<Key>,
    /// The chains of calls the search went on along from call paths (`Stacks::along`): the
    /// loops of their functions, and of what they call, are timed along their paths.
    along: std::collections::HashSet<Focus>,
    /// What the whole search has cost so far, where it is told ([`ProbeLab::pacing`]).
    pace: Option<Arc<Pace>>,
}

/// For a call path focus (a [`Resource::CallPath`] of two functions or more): the module,
/// the path, and the thread.
fn call_of(focus: &Focus) -> Option<(String, Vec<String>, i32)> {
    let Some(Resource::CallPath(path)) = focus.last() else {
        return None;
    };
    if path.len() < 2 {
        return None;
    }
    let (module, _, tid) = function_of(focus)?;
    Some((module, path.clone(), tid))
}

/// The module and function a focus' last function names, and the thread.
fn function_of(focus: &Focus) -> Option<(String, String, i32)> {
    let (mut module, mut function, mut tid) = (None, None, None);
    for r in &focus.0 {
        match r {
            Resource::Module(m) => module = Some(m.clone()),
            Resource::Function(f) | Resource::Code(f) => function = Some(f.clone()),
            Resource::Thread(t) => tid = Some(*t as i32),
            _ => {}
        }
    }
    Some((module?, function?, tid?))
}

impl<'p> ProbeLab<'p> {
    /// A lab over process `pid`: `inner` for samples, `probes` (when the process can take
    /// them) for loop timers.
    pub fn new(pid: i32, inner: ProcLab, probes: Option<&'p mut dyn Probes>) -> ProbeLab<'p> {
        // Measured once, before any timer goes in, while gsh's own thread is what runs.
        let (timer_ns, count_ns) = if probes.is_some() {
            (calibrate(), calibrate_count())
        } else {
            (0.0, 0.0)
        };
        ProbeLab {
            inner,
            pid,
            probes,
            timers: BTreeMap::new(),
            next: 0,
            costs: BTreeMap::new(),
            stats: ProbeStats {
                timer_ns,
                count_ns,
                ..ProbeStats::default()
            },
            turns: BTreeMap::new(),
            in_situ: BTreeMap::new(),
            shares: BTreeMap::new(),
            baseless: BTreeMap::new(),
            born: BTreeMap::new(),
            paid_ns: 0.0,
            started: Instant::now(),
            learned: Instant::now(),
            unseen: Default::default(),
            untimable: Default::default(),
            along: Default::default(),
            shared: BTreeMap::new(),
            pace: None,
        }
    }

    /// The lab starts no probe while the whole search (its stops and gsh's competition for
    /// the CPUs, not only the probes) is at its aim of the cost limit, as `pace` tells: a
    /// probe's start costs gsh's work too (analysis, planning, insertion).
    pub fn pacing(mut self, pace: Arc<Pace>) -> Self {
        self.pace = Some(pace);
        self
    }

    /// Seconds the probes have taken from the program so far.
    pub fn probes_spent(&self) -> f64 {
        self.paid_so_far() / 1e9
    }

    /// Seconds the probes' inserts and removals have held the whole program so far
    /// ([`Changes::held`]).
    pub fn changes_held(&self) -> f64 {
        self.probes.as_deref().map_or(0.0, |p| p.changes().held)
    }

    /// Looks, at most once a [`LEARN_EVERY`], for libraries the program loaded since the
    /// search began or last looked, and learns them; how many it found.
    pub fn learn(&mut self) -> usize {
        if self.learned.elapsed() < LEARN_EVERY {
            return 0;
        }
        self.learned = Instant::now();
        let Some(probes) = self.probes.as_deref_mut() else {
            return 0;
        };
        match probes.learn() {
            Ok(n) => n,
            // The process ended: it loads nothing more, and that is no probe's error.
            Err(e) => {
                keep_error(&mut self.stats.errors, self.pid, e);
                0
            }
        }
    }

    /// What the probes did; every timer still in is taken out first.
    pub fn finish(&mut self) -> ProbeStats {
        let left: Vec<u64> = self.timers.keys().copied().collect();
        for k in left {
            self.stop(ProbeId(k));
        }
        let mut s = self.stats.clone();
        if let Some(p) = self.probes.as_deref() {
            s.changes = p.changes();
        }
        s.spent = self.paid_ns / 1e9;
        s.cost = s.spent / self.started.elapsed().as_secs_f64().max(1e-9);
        s
    }

    /// The loops to test below `focus` for CPU demand: a function's outermost loops, or the
    /// loops nested directly in the loop it ends in.
    fn loops_below(&mut self, focus: &Focus) -> Vec<(Focus, f64)> {
        let Some(probes) = self.probes.as_deref_mut() else {
            return Vec::new();
        };
        let Some((module, function, _)) = function_of(focus) else {
            return Vec::new();
        };
        let within = match focus.last() {
            Some(Resource::Function(_) | Resource::Code(_)) => None,
            Some(Resource::Loop(l)) => Some(l.clone()),
            _ => return Vec::new(),
        };
        let Ok(loops) = probes.loops(&module, &function) else {
            return Vec::new();
        };
        loops
            .into_iter()
            .filter(|l| l.parent == within)
            // Before the callees (the samples' shares are at most 1): a loop costs little to
            // time, and tells what the callees cannot.
            .map(|l| (focus.with(Resource::Loop(l.name)), 1.0))
            .collect()
    }

    fn timer_value(&mut self, id: u32, tid: i32) -> Option<TimerValue> {
        self.probes.as_deref_mut()?.read(id, tid).ok()
    }

    /// Nanoseconds the timers have taken so far: those taken out, and those in as last read
    /// (a timer shared by experiments counted once).
    fn paid_so_far(&self) -> f64 {
        let mut seen = std::collections::BTreeSet::new();
        self.paid_ns
            + self
                .timers
                .values()
                .filter(|t| seen.insert(t.key.clone()))
                .map(|t| t.paid)
                .sum::<f64>()
    }

    fn timer_all(&mut self, id: u32, tid: i32) -> Option<TimerValue> {
        self.probes.as_deref_mut()?.read_all(id, tid).ok()
    }
}

/// What one timer times in its function.
enum Timed {
    /// A loop, by name.
    Loop(String),
    /// The function's direct calls to a callee, by name.
    Call(String),
    /// The function's activations along one call path (from the thread's entry, caller
    /// first, ending in the function).
    Path(Vec<String>),
    /// A loop, by name, inside the function's activations along one call path only.
    PathLoop(Vec<String>, String),
}

impl Timed {
    /// What a timer's key's part ([`Timed::key`]) names.
    fn of(key: &str) -> Timed {
        if let Some(callee) = key.strip_prefix("call ") {
            return Timed::Call(callee.to_owned());
        }
        let steps = |p: &str| p.split(" > ").map(str::to_owned).collect();
        match key.strip_prefix("path ") {
            Some(path) => match path.rsplit_once(" loop ") {
                Some((path, lp)) => Timed::PathLoop(steps(path), lp.to_owned()),
                None => Timed::Path(steps(path)),
            },
            None => Timed::Loop(key.to_owned()),
        }
    }

    /// Its part of a timer's key in [`ProbeLab::shared`]: `loop_1.2`, `call hot`,
    /// `path main > hot`, `path main > hot loop loop_1`.
    fn key(&self) -> String {
        match self {
            Timed::Loop(l) => l.clone(),
            Timed::Call(c) => format!("call {c}"),
            Timed::Path(p) => format!("path {}", p.join(" > ")),
            Timed::PathLoop(p, l) => format!("path {} loop {l}", p.join(" > ")),
        }
    }
}

impl ProbeLab<'_> {
    /// Inserts the timer `key` names (timing `what`); its id, in [`ProbeLab::shared`] with
    /// one user. A call that cannot be timed is remembered as such.
    fn insert_timer(&mut self, key: &Key, what: &Timed) -> Result<u32, String> {
        let probes = self
            .probes
            .as_deref_mut()
            .ok_or("loops are timed only in a live process")?;
        let (module, function) = (&key.0, &key.1);
        let inserted = match what {
            Timed::Loop(lp) => probes.insert(module, function, lp),
            Timed::Call(callee) => probes.insert_call(module, function, callee),
            Timed::Path(path) => probes.insert_path(module, path),
            Timed::PathLoop(path, lp) => probes.insert_path_loop(module, path, lp),
        };
        let id = match (inserted, what) {
            (Ok(id), _) => id,
            (Err(why), Timed::Loop(_)) => {
                keep_error(&mut self.stats.errors, self.pid, why.clone());
                return Err(why);
            }
            // Timed from every caller instead, as before it was known to lie on a path.
            (Err(why), Timed::PathLoop(..)) => {
                self.untimable.insert(key.clone());
                keep_error(
                    &mut self.stats.errors,
                    self.pid,
                    format!("{why} (the loop is timed from every caller of its function instead)"),
                );
                return Err(why);
            }
            // A path whose function cannot be profiled: its last call is timed instead, if it
            // can be; a call path whose last call cannot be timed (an indirect call, a caller
            // in another module) is measured by the stack samples.
            (Err(why), Timed::Call(_) | Timed::Path(_)) => {
                let instead = match what {
                    Timed::Path(_) => "its last call is timed instead",
                    _ => "its call path is sampled instead",
                };
                self.untimable.insert(key.clone());
                keep_error(
                    &mut self.stats.errors,
                    self.pid,
                    format!("{why} ({instead})"),
                );
                return Err(why);
            }
        };
        self.stats.inserted += 1;
        match what {
            Timed::Call(_) => self.stats.call_timers += 1,
            Timed::Path(_) | Timed::PathLoop(..) => self.stats.path_timers += 1,
            Timed::Loop(_) => {}
        }
        self.shared.insert(key.clone(), (id, 1));
        let born = self.timer_all(id, 0).unwrap_or_default().entries;
        self.born.insert(key.clone(), born);
        Ok(id)
    }

    /// Ends the turn of timer `key` (in or out, beside its function's counter) once it has
    /// run [`TURN_CPU`] of its thread's time (or [`TURN_WALL`]) and begins the next; after
    /// the last turn, the counter comes out and the timer's cost in situ is known. True when
    /// its experiments read the timer: from the start of its last turn on.
    fn turn(&mut self, key: &Key) -> bool {
        let Some(c) = self.turns.get(key) else {
            return true;
        };
        let last = c.done + 1 == TURNS;
        let Some(s) = sched(self.pid, c.tid) else {
            return last;
        };
        let cpu = s.run.saturating_sub(c.run) as f64 / 1e9;
        if cpu < TURN_CPU && c.started.elapsed().as_secs_f64() < TURN_WALL {
            return last;
        }
        let Some((d_run, d_all)) = self.account(key, s) else {
            return true;
        };
        // A timer its first turns in show far over the cost limit ends its turns there: what
        // they measured is its cost, over the limit, and it comes out at once. Each turn in
        // cost it: python3's loop_2 of `_PyEval_EvalFrameDefault` doubled its thread's time
        // per call, and its three turns in took 4% of a 4 s search's running.
        let over = self.pace.as_ref().is_some_and(|p| {
            self.turns.get(key).is_some_and(|c| {
                c.timer.is_some() && share_so_far(c).is_some_and(|x| x > OVER * p.limit())
            })
        });
        if over && !last {
            let id = self.turns.get(key).and_then(|c| c.timer);
            let Some(c) = self.end_turns(key) else {
                return true;
            };
            self.pay_turns(key, &c, d_run);
            if let Some(id) = id {
                self.read_from_now(key, id);
            }
            return true;
        }
        if last {
            // The timer stays in for its experiments, the counters come out; what the turns
            // measured is the timer's cost. Its last turn goes on as its experiments' reading,
            // paid there.
            let Some(c) = self.end_turns(key) else {
                return true;
            };
            self.pay_turns(key, &c, d_run);
            return true;
        }
        let Some(c) = self.turns.get_mut(key) else {
            return true;
        };
        let bound = self.stats.timer_ns;
        let tid = c.tid;
        let final_turn = c.done + 1 == TURNS;
        let taken = c.timer.take();
        if taken.is_some() {
            c.timed_all += d_all;
        }
        let users = self.shared.get(key).map_or(1, |x| x.1);
        let timer = match taken {
            Some(id) => {
                // Out for the next turn; counted at the bound while in, which is what keeps
                // a timer over the cost limit out.
                let cost = if d_run > 0 {
                    (d_all as f64 * bound / d_run as f64).min(1.0)
                } else {
                    0.0
                };
                if let Some(p) = self.probes.as_deref_mut() {
                    match p.remove(id) {
                        Ok(()) => self.stats.removed += 1,
                        Err(e) => keep_error(&mut self.stats.errors, self.pid, e),
                    }
                }
                self.born.remove(key);
                for t in self.timers.values_mut().filter(|t| &t.key == key) {
                    t.cost = Some(t.cost.map_or(cost, |c| c.max(cost)));
                }
                let known = self.costs.entry(key.clone()).or_insert(0.0);
                *known = known.max(cost);
                None
            }
            None => {
                let what = Timed::of(&key.2);
                match self.insert_timer(key, &what) {
                    Ok(id) => Some(id),
                    Err(_) => {
                        // Its experiments get no reading and are judged on the wait.
                        if let Some(c) = self.turns.remove(key) {
                            if let Some(p) = self.probes.as_deref_mut() {
                                let _ = p.remove(c.counter);
                                if let Some(progress) = c.progress {
                                    let _ = p.remove(progress);
                                }
                            }
                        }
                        self.shared.remove(key);
                        self.timers.retain(|_, t| &t.key != key);
                        return true;
                    }
                }
            }
        };
        if let Some(x) = self.shared.get_mut(key) {
            x.1 = users;
        }
        let run = sched(self.pid, tid).unwrap_or_default().run;
        let (entries, all) = match timer {
            Some(id) => (
                self.timer_value(id, tid).unwrap_or_default().entries,
                self.timer_all(id, tid).unwrap_or_default().entries,
            ),
            None => (0, 0),
        };
        let counter = self.turns.get(key).map_or(0, |c| c.counter);
        let calls = self.timer_value(counter, tid).unwrap_or_default().entries;
        let progress = match self.turns.get(key).and_then(|c| c.progress) {
            Some(p) => self.timer_value(p, tid).unwrap_or_default().entries,
            None => 0,
        };
        if let Some(c) = self.turns.get_mut(key) {
            c.timer = timer;
            c.started = Instant::now();
            c.quiet = true;
            c.calls = calls;
            c.progress_calls = progress;
            c.entries = entries;
            c.run = run;
            c.all = all;
        }
        if let (true, Some(id)) = (final_turn, timer) {
            self.read_from_now(key, id);
        }
        final_turn
    }

    /// The experiments of timer `key` (probe `id`) read it from now.
    fn read_from_now(&mut self, key: &Key, id: u32) {
        let now = Instant::now();
        let ks: Vec<u64> = self
            .timers
            .iter()
            .filter(|(_, t)| &t.key == key)
            .map(|(k, _)| *k)
            .collect();
        for k in ks {
            let tid = self.timers[&k].tid;
            let value = self.timer_value(id, tid).unwrap_or_default();
            let all = self.timer_all(id, tid).unwrap_or_default();
            let sched = sched(self.pid, tid).unwrap_or_default();
            if let Some(t) = self.timers.get_mut(&k) {
                t.id = id;
                t.started = now;
                t.value = value;
                t.all = all;
                t.sched = sched;
            }
        }
    }

    /// Adds the turn of timer `key` now ending to its turns' sums (its thread's calls of the
    /// function and of the hottest callee, its CPU time, the timer's entries, `s` being the
    /// thread's scheduler counts now), and counts it done; the thread's CPU nanoseconds over
    /// the turn and the timer's entries in every thread (0 when out).
    fn account(&mut self, key: &Key, s: Sched) -> Option<(u64, u64)> {
        let probes = self.probes.as_deref_mut()?;
        let c = self.turns.get_mut(key)?;
        let calls = probes.read(c.counter, c.tid).unwrap_or_default().entries;
        let progress = c
            .progress
            .map_or(0, |p| probes.read(p, c.tid).unwrap_or_default().entries);
        let (entries, all) = match c.timer {
            Some(id) => (
                probes.read(id, c.tid).unwrap_or_default().entries,
                probes.read_all(id, c.tid).unwrap_or_default().entries,
            ),
            None => (0, 0),
        };
        let s = sched(self.pid, c.tid).unwrap_or(s);
        let d_calls = calls.saturating_sub(c.calls);
        let d_run = s.run.saturating_sub(c.run);
        let d_entries = entries.saturating_sub(c.entries);
        let d_all = all.saturating_sub(c.all);
        let d_progress = progress.saturating_sub(c.progress_calls);
        c.done += 1;
        // The counters were in all the same: they cost.
        c.counts += d_calls + d_progress;
        if !c.quiet {
            return Some((d_run, d_all));
        }
        match c.timer {
            Some(_) => {
                c.timed.0 += d_calls;
                c.timed.1 += d_run;
                c.timed.2 += d_entries;
                c.progress_timed += d_progress;
            }
            None => {
                c.counted.0 += d_calls;
                c.counted.1 += d_run;
                c.progress_counted += d_progress;
            }
        }
        Some((d_run, d_all))
    }

    /// Marks the turn going on of every timer but `key`'s as disturbed: a probe went in or
    /// out beside it (an experiment judged meanwhile took its timer out: crunch's loop_1,
    /// entered once, read 7.2% of its thread's time when unit's loop_1 came out during its
    /// turns).
    fn disturb(&mut self, key: &Key) {
        for (k, c) in self.turns.iter_mut() {
            if k != key {
                c.quiet = false;
            }
        }
    }

    /// Ends the turns of timer `key`: its counters come out, and what the turns measured
    /// (however many were taken) is its cost in situ, per entry or as a share of its
    /// thread's time, where they counted enough calls to tell. The turns, for what they
    /// cost.
    fn end_turns(&mut self, key: &Key) -> Option<Turns> {
        let c = self.turns.remove(key)?;
        let bound = self.stats.timer_ns;
        let probes = self.probes.as_deref_mut()?;
        for counter in std::iter::once(c.counter).chain(c.progress) {
            if let Err(e) = probes.remove(counter) {
                keep_error(&mut self.stats.errors, self.pid, e);
            }
        }
        let counted = c.counted.1 as f64 / c.counted.0.max(1) as f64;
        let timed = c.timed.1 as f64 / c.timed.0.max(1) as f64;
        let enough =
            c.counted.0 >= MIN_ENTRIES && c.timed.0 >= MIN_ENTRIES && c.timed.2 >= MIN_ENTRIES;
        // Slower without the timer than with it: the rates are too noisy to tell what it
        // adds, and the bound holds.
        if enough && counted > timed {
            self.baseless.insert(key.clone(), (counted, timed));
        }
        if enough && counted <= timed {
            // A path's timer (a profile of its function) runs at every call of it, whatever
            // the path, and costs more than a loop's: each call is an entry, at no bound.
            let (per_entry, most) = if key.2.starts_with("path ") {
                (1.0, f64::INFINITY)
            } else {
                (c.timed.0 as f64 / c.timed.2 as f64, bound)
            };
            self.in_situ.insert(
                key.clone(),
                InSitu {
                    counted,
                    timed,
                    // Never above the whole sequence's latency, which a noisy rate may
                    // suggest.
                    ns: ((timed - counted) * per_entry).min(most),
                },
            );
        }
        // Too few entries or calls for a cost per entry: the share of the thread's time the
        // timer took (`share_rates`).
        if let Some((counted, timed)) = share_rates(&c) {
            if counted > timed {
                self.baseless.insert(key.clone(), (counted, timed));
            } else {
                let share = ((timed - counted) / timed).clamp(0.0, 1.0);
                self.shares.insert(
                    key.clone(),
                    Share {
                        counted,
                        timed,
                        share,
                    },
                );
                let known = self.costs.entry(key.clone()).or_insert(0.0);
                *known = known.max(share);
            }
        }
        Some(c)
    }

    /// Counts what timer `key`'s ended turns `c` took: its turns in, at its cost in situ
    /// (the bound where unmeasured), less `going_on` of its thread's CPU nanoseconds (its
    /// last turn, which goes on as its experiments' reading and is paid there), and every
    /// call its counters counted.
    fn pay_turns(&mut self, key: &Key, c: &Turns, going_on: u64) {
        let timed = match self.shares.get(key) {
            Some(s) => s.share * c.timed.1.saturating_sub(going_on) as f64,
            None => c.timed_all as f64 * self.entry_ns(key),
        };
        self.paid_ns += timed + c.counts as f64 * self.stats.count_ns;
    }

    /// Nanoseconds one entry of timer `key` is counted at: its cost in situ once measured,
    /// else the bound.
    fn entry_ns(&self, key: &Key) -> f64 {
        self.in_situ.get(key).map_or(self.stats.timer_ns, |s| s.ns)
    }

    /// True when `e` is a call path experiment the lab times with a probe (CPU demand, as for
    /// loops), rather than with stack samples.
    fn times_calls(&self, e: &Experiment) -> bool {
        self.probes.is_some()
            && matches!(e.hypothesis, Hypothesis::CPUBound | Hypothesis::RunQueue)
            && call_of(&e.focus).is_some()
    }

    /// How a call path experiment `e` is timed, with its timer's key in
    /// [`ProbeLab::shared`]: by its whole path (the timer of its function, read for the path),
    /// else, where that could not be inserted, by its last call; `None` where neither could
    /// (it is sampled).
    fn path_timer(&self, e: &Experiment) -> Option<(Key, Timed, i32)> {
        let (module, path, tid) = call_of(&e.focus)?;
        let [.., caller, callee] = path.as_slice() else {
            return None;
        };
        let whole = Timed::Path(path.clone());
        let key = (module.clone(), callee.clone(), whole.key());
        if !self.untimable.contains(&key) {
            return Some((key, whole, tid));
        }
        let last = Timed::Call(callee.clone());
        let key = (module, caller.clone(), last.key());
        (!self.untimable.contains(&key)).then_some((key, last, tid))
    }
}

impl ProbeLab<'_> {
    /// How loop focus `focus` is timed, with its timer's key in [`ProbeLab::shared`] and its
    /// thread: along its call path where it lies below a call path the search went on along
    /// (`Stacks::along`: the path's function reached through several paths, so a timer of its
    /// loop from every caller would time the other paths' too), unless that cannot be
    /// inserted; else from every caller of its function.
    fn loop_timer(&self, focus: &Focus) -> Option<(Key, Timed, i32)> {
        let Some(Resource::Loop(lp)) = focus.last() else {
            return None;
        };
        let (module, function, tid) = function_of(focus)?;
        let (at, _) = split_loops(focus);
        let path = at
            .call_path()
            .filter(|p| p.len() >= 2)
            .filter(|_| self.along.iter().any(|chain| at.0.starts_with(&chain.0)));
        if let Some(path) = path {
            let what = Timed::PathLoop(path.into_iter().map(str::to_owned).collect(), lp.clone());
            let key = (module.clone(), function.clone(), what.key());
            if !self.untimable.contains(&key) {
                return Some((key, what, tid));
            }
        }
        let what = Timed::Loop(lp.clone());
        Some(((module, function, what.key()), what, tid))
    }
}

/// A timer's name in the report: `MODULE!FUNCTION loop_1.2`.
fn name(key: &Key) -> String {
    format!("{}!{} {}", key.0, key.1, key.2)
}

/// The function focus a loop focus lies in (itself for a function), and the loops from the
/// function down, outermost first.
fn split_loops(focus: &Focus) -> (Focus, Vec<String>) {
    let mut f = focus.0.clone();
    let mut loops = Vec::new();
    while let Some(Resource::Loop(l)) = f.last() {
        loops.insert(0, l.clone());
        f.pop();
    }
    (Focus(f), loops)
}

impl ProbeLab<'_> {
    /// The direct callee of the function a loop focus lies in that the stack samples show
    /// most (module and name): whose calls tell the thread's progress where the function
    /// itself is entered too rarely (a [`Share`]).
    fn hottest_callee(&mut self, focus: &Focus) -> Option<(String, String)> {
        let (function, _) = split_loops(focus);
        let (module, name, _) = function_of(&function)?;
        let children = self.inner.refine(Hypothesis::CPUBound, &function)?;
        children
            .into_iter()
            .filter_map(|(child, p)| {
                let callee = match child.0.get(function.0.len()..)? {
                    [Resource::Function(c)] => (module.clone(), c.clone()),
                    [Resource::Module(m), Resource::Function(c)] => (m.clone(), c.clone()),
                    _ => return None,
                };
                (callee.1 != name && p > 0.0).then_some((callee, p))
            })
            .max_by(|a, b| a.1.total_cmp(&b.1))
            .map(|(c, _)| c)
    }

    /// The loops, outermost first, holding every one of the call sites of `callee` the samples
    /// show in the function `function` focuses on (empty when some site lies outside every
    /// loop, or none is known).
    fn home(&mut self, h: Hypothesis, function: &Focus, callee: &str) -> Vec<String> {
        let Some((module, name, _)) = function_of(function) else {
            return Vec::new();
        };
        let sites = self.inner.call_sites(h, function, callee);
        let Some(probes) = self.probes.as_deref_mut() else {
            return Vec::new();
        };
        // Its loops are known once its module's analysis is done, in the background: asked
        // before, the search's own thread ran the whole analysis itself (a search of
        // redis-server under load held it so, past its `--for 30` to 57 s).
        if !probes.ready(&module, &name) {
            return Vec::new();
        }
        let Ok(loops) = probes.loops(&module, &name) else {
            return Vec::new();
        };
        let chain = |inner: Option<String>| {
            let mut out = Vec::new();
            let mut at = inner;
            while let Some(l) = at {
                at = loops
                    .iter()
                    .find(|x| x.name == l)
                    .and_then(|x| x.parent.clone());
                out.insert(0, l);
            }
            out
        };
        let mut common: Option<Vec<String>> = None;
        for pc in sites {
            let c = chain(probes.loop_at(&module, &name, pc));
            common = Some(match common {
                None => c,
                Some(prev) => prev
                    .into_iter()
                    .zip(c)
                    .take_while(|(a, b)| a == b)
                    .map(|(a, _)| a)
                    .collect(),
            });
        }
        common.unwrap_or_default()
    }
}

impl Lab for ProbeLab<'_> {
    /// A CPU-bound function's callees called only from inside one of its loops are refined
    /// below that loop (the innermost holding all their call sites), not beside it: the loop's
    /// time includes theirs. Below a loop come the loops nested in it and the callees at home
    /// there.
    fn refine(&mut self, h: Hypothesis, focus: &Focus) -> Option<Vec<(Focus, f64)>> {
        let (function, within) = split_loops(focus);
        let timed = h == Hypothesis::CPUBound && self.probes.is_some();
        // Loops and call sites need the module's analysis: until it is done (in the
        // background), the lab cannot tell yet.
        if timed {
            if let (Some((module, name, _)), Some(probes)) =
                (function_of(&function), self.probes.as_deref_mut())
            {
                if !probes.ready(&module, &name) {
                    return None;
                }
            }
        }
        let mut out = Vec::new();
        if within.is_empty() || timed {
            let children = self.inner.refine(h, &function)?;
            if matches!(focus.last(), Some(Resource::CallPath(_))) {
                // The chain of calls the path is: what lies below it is timed along it.
                self.along.extend(children.iter().map(|(c, _)| c.clone()));
            }
            for (child, p) in children {
                // A refinement that does not extend the function (one reached by several
                // paths, proposed at the thread) belongs to the function alone.
                if !child.0.starts_with(&function.0) {
                    if within.is_empty() {
                        out.push((child, p));
                    }
                    continue;
                }
                // Only the function's direct callees have a call site in it.
                let callee = match child.0.get(function.0.len()..) {
                    Some([Resource::Function(c)])
                    | Some([Resource::Module(_), Resource::Function(c)])
                        if timed =>
                    {
                        Some(c.clone())
                    }
                    _ => None,
                };
                let home = match &callee {
                    Some(c) => self.home(h, &function, c),
                    None => Vec::new(),
                };
                if home != within {
                    continue;
                }
                let mut at = focus.clone();
                at.0.extend_from_slice(&child.0[function.0.len()..]);
                out.push((at, p));
            }
        }
        if h == Hypothesis::CPUBound {
            out.extend(self.loops_below(focus));
        }
        Some(out)
    }

    /// A CPU-bound function's loops wait for its module's analysis, which runs in the
    /// background (seconds for python3's interpreter on a loaded machine); any focus in a
    /// thread waits for the stack samples its refinement is read from, while they come.
    fn preparing(&mut self, h: Hypothesis, focus: &Focus) -> bool {
        let (function, _) = split_loops(focus);
        let analysing = match (function_of(&function), self.probes.as_deref_mut()) {
            (Some((module, name, _)), Some(probes)) if h == Hypothesis::CPUBound => {
                !probes.ready(&module, &name)
            }
            _ => false,
        };
        analysing || self.inner.preparing(h, focus)
    }

    fn ended(&mut self) -> bool {
        self.inner.ended()
    }

    fn predicted_cost(&mut self, e: &Experiment) -> Option<f64> {
        let key = match e.focus.last() {
            Some(Resource::Loop(_)) => self.loop_timer(&e.focus).map(|(key, _, _)| key),
            Some(Resource::CallPath(_)) if self.times_calls(e) => match self.path_timer(e) {
                Some((key, _, _)) => Some(key),
                // Sampled.
                None => return Some(0.0),
            },
            _ => return self.inner.predicted_cost(e),
        };
        let Some(key) = key else {
            return Some(UNKNOWN_COST);
        };
        if self.shared.contains_key(&key) || self.untimable.contains(&key) {
            // Its timer is in already (nothing more goes in), or it is sampled.
            return Some(0.0);
        }
        // Nothing goes in while a timer takes its turns: in or out during them, it would
        // read as theirs (crunch's loop_1, entered once, read 2.4% to 4.9% of its thread's
        // time, unit's loop_1's timer going in and out beside it).
        if !self.turns.is_empty() {
            return None;
        }
        if let Some(c) = self.costs.get(&key) {
            return Some(*c);
        }
        // One timer at a time whose cost is unknown: an interpreter's loops are entered
        // millions of times a second, and python3's thirteen timers started at once took 69%
        // of its time. The next waits until the last has been measured (a tenth of a second
        // after it went in), and is removed then if it costs too much.
        if self
            .timers
            .values()
            .any(|t| t.cost.is_none() && !self.costs.contains_key(&t.key))
        {
            return None;
        }
        Some(UNKNOWN_COST)
    }

    fn spent(&mut self) -> f64 {
        let paid = self.paid_so_far() / 1e9;
        // Over what the threads ran (plus what the stops took), as the report counts it;
        // over the wall time without stack samples.
        let base = match self.inner.stop_cost() {
            Some((lost, used)) if !used.is_zero() => (used + lost).as_secs_f64(),
            _ => self.started.elapsed().as_secs_f64(),
        };
        // The stops keep a tenth of the budget (`stacks::sample_stacks`): the probes get
        // the rest.
        let probes = paid / base.max(1e-9) / PROBES_SHARE;
        // The whole search, at the share of the limit that holds gsh's work, spent it all:
        // no probe starts.
        let whole = self.pace.as_ref().map_or(0.0, |p| p.spent() / HOLD_AT);
        probes.max(whole)
    }

    fn measured_cost(&mut self, probe: ProbeId) -> Option<f64> {
        if probe.0 & TIMER_BIT == 0 {
            return self.inner.measured_cost(probe);
        }
        let t = self.timers.get(&probe.0)?;
        // A timer shared by experiments costs once: the first of them carries it.
        let first = self
            .timers
            .iter()
            .find(|(_, x)| x.key == t.key)
            .is_some_and(|(k, _)| *k == probe.0);
        if first {
            t.cost
        } else {
            Some(0.0)
        }
    }

    /// A timer waits while what its placement is planned from is prepared in the
    /// background ([`Probes::planned`]), unless it is in already.
    fn can_start(&mut self, e: &Experiment) -> bool {
        let key = match e.focus.last() {
            Some(Resource::Loop(lp)) => function_of(&e.focus).map(|(m, f, _)| (m, f, lp.clone())),
            Some(Resource::CallPath(_)) if self.times_calls(e) => {
                self.path_timer(e).map(|(key, _, _)| key)
            }
            _ => None,
        };
        let Some(key) = key else {
            return true;
        };
        if self.shared.contains_key(&key) || self.untimable.contains(&key) {
            return true;
        }
        self.probes
            .as_deref_mut()
            .is_none_or(|p| p.planned(&key.0, &key.1))
    }

    fn start(&mut self, e: &Experiment) -> Result<ProbeId, String> {
        // A function tested for CPU demand may be refined into its loops: its module's
        // analysis starts now, in the background, rather than once it is found true.
        if let (Some(Resource::Function(_) | Resource::Code(_)), Some(probes)) =
            (e.focus.last(), self.probes.as_deref_mut())
        {
            if let Some((module, name, _)) = function_of(&e.focus) {
                if e.hypothesis == Hypothesis::CPUBound {
                    probes.ready(&module, &name);
                }
            }
        }
        let (module, function, what, tid) = match e.focus.last() {
            Some(Resource::Loop(_)) => {
                let ((module, function, _), what, tid) = self
                    .loop_timer(&e.focus)
                    .ok_or("a loop focus names its thread, module and function")?;
                (module, function, what, tid)
            }
            Some(Resource::CallPath(_)) if self.times_calls(e) => {
                let Some(((module, function, _), what, tid)) = self.path_timer(e) else {
                    return self.inner.start(e);
                };
                (module, function, what, tid)
            }
            _ => return self.inner.start(e),
        };
        let probes = self
            .probes
            .as_deref_mut()
            .ok_or("loops are timed only in a live process")?;
        // One timer per loop or caller's calls, shared by the experiments on it (each reads
        // its own thread).
        let key = (module.clone(), function.clone(), what.key());
        if self.untimable.contains(&key) {
            return self.inner.start(e);
        }
        let id = match self.shared.get_mut(&key) {
            Some((id, users)) => {
                *users += 1;
                *id
            }
            None => {
                // A timer whose cost in situ is not known yet takes turns with a counter
                // first (`ProbeLab::turn`).
                let counter = if self.in_situ.contains_key(&key)
                    || self.baseless.contains_key(&key)
                    || self.shares.contains_key(&key)
                {
                    None
                } else {
                    // A path's timer is a profile of its function (read for the path): its
                    // function's calls are counted as a loop's are.
                    probes.count_calls(&module, &function).ok()
                };
                if let Some(cid) = counter {
                    let calls = probes.read(cid, tid).unwrap_or_default().entries;
                    // The thread's progress beside it, for a function entered too rarely:
                    // calls of its hottest callee.
                    let hottest = match what {
                        // Each call of a path's function runs its profile: its calls tell.
                        Timed::Path(_) | Timed::PathLoop(..) => None,
                        _ => self.hottest_callee(&e.focus),
                    };
                    // Only in a module ready for probes: the first in another (libc) would
                    // plan over all of it while the process and the search wait.
                    let progress = match hottest {
                        Some((m, callee)) => self.probes.as_deref_mut().and_then(|p| {
                            p.planned(&m, &callee)
                                .then(|| p.count_calls(&m, &callee).ok())
                                .flatten()
                        }),
                        None => None,
                    };
                    let progress_calls = match (progress, self.probes.as_deref_mut()) {
                        (Some(p), Some(probes)) => probes.read(p, tid).unwrap_or_default().entries,
                        _ => 0,
                    };
                    self.turns.insert(
                        key.clone(),
                        Turns {
                            counter: cid,
                            progress,
                            progress_calls,
                            progress_counted: 0,
                            progress_timed: 0,
                            timer: None,
                            tid,
                            started: Instant::now(),
                            calls,
                            entries: 0,
                            run: sched(self.pid, tid).unwrap_or_default().run,
                            all: 0,
                            done: 0,
                            counted: (0, 0),
                            timed: (0, 0, 0),
                            timed_all: 0,
                            counts: 0,
                            quiet: true,
                        },
                    );
                    self.shared.insert(key.clone(), (cid, 1));
                    cid
                } else {
                    match self.insert_timer(&key, &what) {
                        Ok(id) => {
                            self.disturb(&key);
                            id
                        }
                        Err(why) if matches!(what, Timed::Loop(_)) => return Err(why),
                        // Timed from every caller instead (`ProbeLab::loop_timer`).
                        Err(_) if matches!(what, Timed::PathLoop(..)) => return self.start(e),
                        // Its last call is tried next (`ProbeLab::path_timer`).
                        Err(_) if matches!(what, Timed::Path(_)) => return self.start(e),
                        // Sampled instead.
                        Err(_) => return self.inner.start(e),
                    }
                }
            }
        };
        let sched = sched(self.pid, tid).unwrap_or_default();
        let value = self.timer_value(id, tid).unwrap_or_default();
        let all = self.timer_all(id, tid).unwrap_or_default();
        self.next += 1;
        self.timers.insert(
            TIMER_BIT | self.next,
            Timer {
                id,
                tid,
                started: Instant::now(),
                value,
                hypothesis: e.hypothesis,
                focus: e.focus.clone(),
                key,
                sched,
                all,
                cost: None,
                paid: 0.0,
                whole: matches!(what, Timed::Path(_)),
            },
        );
        Ok(ProbeId(TIMER_BIT | self.next))
    }

    /// A timer's reading waits for nothing that comes in by itself (one that is never
    /// entered has none); a sampled experiment's, for the stack samples.
    fn gathering(&mut self, probe: ProbeId) -> bool {
        probe.0 & TIMER_BIT == 0 && self.inner.gathering(probe)
    }

    fn read(&mut self, probe: ProbeId) -> Option<Reading> {
        if probe.0 & TIMER_BIT == 0 {
            return self.inner.read(probe);
        }
        // While the timer takes turns with a counter, its experiments have no reading yet.
        let key = self.timers.get(&probe.0)?.key.clone();
        if self.turns.contains_key(&key) && !self.turn(&key) {
            return None;
        }
        let (id, tid, started, v0, s0, h, a0) = {
            let t = self.timers.get(&probe.0)?;
            (
                t.id,
                t.tid,
                t.started,
                t.value,
                t.sched,
                t.hypothesis,
                t.all,
            )
        };
        let v = self.timer_value(id, tid)?;
        let s = sched(self.pid, tid)?;
        let wall = started.elapsed().as_secs_f64();
        if wall <= 0.0 {
            return None;
        }
        let entries = v.entries.saturating_sub(v0.entries);
        let ns = v.ns.saturating_sub(v0.ns) as f64 / 1e9;
        let (run, wait) = (
            s.run.saturating_sub(s0.run) as f64 / 1e9,
            s.wait.saturating_sub(s0.wait) as f64 / 1e9,
        );
        let idle = (wall - run - wait).max(0.0);
        // The loop's CPU demand, at least; for RunQueue, the part of it spent waiting for a
        // CPU, taken to be the thread's share of waiting over the interval.
        let demand = (ns - idle).max(0.0);
        let part = match h {
            Hypothesis::RunQueue if run + wait > 0.0 => wait / (run + wait),
            Hypothesis::RunQueue => 0.0,
            _ => 1.0,
        };
        // What its entries (in every thread) took, over the thread's time on a CPU: each at
        // its cost in situ once known, at the bound until then.
        let in_situ = self.in_situ.contains_key(&key);
        let share = self.shares.get(&key).map(|s| s.share);
        if let (true, Some(share)) = (wall >= RATE_WINDOW, share) {
            // Its cost is a share of the thread's time, whatever its entries.
            let t = self.timers.get_mut(&probe.0)?;
            t.cost = Some(share);
            t.paid = share * run * 1e9;
            self.costs.insert(t.key.clone(), share);
        } else if wall >= RATE_WINDOW {
            if let Some(all) = self.timer_all(id, tid) {
                let spent =
                    all.entries.saturating_sub(a0.entries) as f64 * self.entry_ns(&key) / 1e9;
                let cost = if spent > 0.0 {
                    spent / run.max(spent)
                } else {
                    0.0
                };
                let t = self.timers.get_mut(&probe.0)?;
                t.cost = Some(cost);
                t.paid = spent * 1e9;
                let known = self.costs.entry(t.key.clone()).or_insert(0.0);
                *known = if in_situ { cost } else { known.max(cost) };
            }
        }
        // Unseen: refined all the same, unless its own loop was unseen too (a loop that has
        // ended, rather than one running since before its timer: its loops are no better).
        let unseen = entries == 0 && ns == 0.0;
        let focus = self.timers.get(&probe.0)?.focus.clone();
        let outer = Focus(focus.0[..focus.0.len() - 1].to_vec());
        // Only a loop has parts to time in its stead: a call path ends at its call.
        let is_loop = matches!(focus.last(), Some(Resource::Loop(_)));
        let opaque = is_loop && unseen && !self.unseen.contains(&outer.to_string());
        // What the probes have cost: the time their timers ran, and the time their inserts
        // and removals held the program (at one thread's worth: the shell's pace counts it
        // at all of them).
        let paid = self.paid_so_far() / 1e9 + self.changes_held();
        self.inner
            .set_probes_spent(std::time::Duration::from_secs_f64(paid));
        if unseen {
            self.unseen.insert(focus.to_string());
        }
        Some(Reading {
            fraction: (demand * part / wall).clamp(0.0, 1.0),
            seconds: wall,
            note: match (unseen, opaque) {
                (true, true) => Some(
                    "not entered while timed: it may run since before its timer went in; the \
                     loops in it are timed instead",
                ),
                (true, false) if is_loop => Some("not entered while timed"),
                (true, false) => Some("not called while timed"),
                _ => None,
            },
            opaque,
        })
    }

    fn method(&self, probe: ProbeId) -> Method {
        if probe.0 & TIMER_BIT == 0 {
            self.inner.method(probe)
        } else if self.timers.get(&probe.0).is_some_and(|t| t.whole) {
            Method::PathProbe
        } else {
            Method::Probe
        }
    }

    fn stop(&mut self, probe: ProbeId) {
        if probe.0 & TIMER_BIT == 0 {
            return self.inner.stop(probe);
        }
        let Some(t) = self.timers.remove(&probe.0) else {
            return;
        };
        // Out when its last experiment ends.
        match self.shared.get_mut(&t.key) {
            Some((_, users)) if *users > 1 => {
                *users -= 1;
                return;
            }
            _ => {
                self.shared.remove(&t.key);
            }
        }
        self.disturb(&t.key);
        if self.turns.contains_key(&t.key) {
            // Still taking turns (the search ends, or judged it on its wait): the turn now
            // ending counts with the others, and what they measured is what the timer cost in
            // each of its turns in, this one's too; then the counters come out, and the timer
            // if in.
            let s = sched(self.pid, t.tid).unwrap_or_default();
            let ended = self.account(&t.key, s);
            let timer = self.turns.get_mut(&t.key).and_then(|c| {
                if let (Some(_), Some((_, d_all))) = (c.timer, ended) {
                    c.timed_all += d_all;
                }
                c.timer
            });
            // Its first turn, out, ends: the timer never went in.
            let mut went_in = timer.is_some();
            if let Some(c) = self.end_turns(&t.key) {
                self.pay_turns(&t.key, &c, 0);
                went_in |= c.done > 1;
            }
            if let (Some(id), Some(probes)) = (timer, self.probes.as_deref_mut()) {
                match probes.remove(id) {
                    Ok(()) => self.stats.removed += 1,
                    Err(e) => keep_error(&mut self.stats.errors, self.pid, e),
                }
            }
            self.born.remove(&t.key);
            if !went_in {
                return;
            }
        } else {
            let Some(probes) = self.probes.as_deref_mut() else {
                return;
            };
            // What it cost, counted over every thread since it went in, before it goes.
            let born = self.born.remove(&t.key).unwrap_or(t.all.entries);
            let share = self.shares.get(&t.key).map(|s| s.share);
            match share {
                // The share of the thread's time since its experiment's reading began, as
                // last read, and since then.
                Some(share) => {
                    let run =
                        sched(self.pid, t.tid).map_or(0, |s| s.run.saturating_sub(t.sched.run));
                    self.paid_ns += (share * run as f64).max(t.paid);
                }
                None => {
                    if let Ok(v) = probes.read_all(t.id, t.tid) {
                        self.paid_ns +=
                            v.entries.saturating_sub(born) as f64 * self.entry_ns(&t.key);
                    }
                }
            }
            let Some(probes) = self.probes.as_deref_mut() else {
                return;
            };
            match probes.remove(t.id) {
                Ok(()) => self.stats.removed += 1,
                Err(e) => keep_error(&mut self.stats.errors, self.pid, e),
            }
        }
        let s = self.in_situ.get(&t.key);
        let b = self.baseless.get(&t.key);
        let sh = self.shares.get(&t.key);
        self.stats.timer_costs.push(TimerCost {
            timer: name(&t.key),
            counted_ns: s
                .map(|s| s.counted)
                .or(sh.map(|s| s.counted))
                .or(b.map(|b| b.0)),
            timed_ns: s
                .map(|s| s.timed)
                .or(sh.map(|s| s.timed))
                .or(b.map(|b| b.1)),
            ns: self.entry_ns(&t.key),
            in_situ: s.is_some() || sh.is_some(),
            share: sh.map(|s| s.share),
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Probes that record what was asked of them; every timer reads `value`, or with
    /// `always`, a loop entered at that instant and never left.
    #[derive(Default)]
    struct Fake {
        inserted: Vec<(String, String, String)>,
        /// Call timers inserted: (module, caller, callee).
        calls: Vec<(String, String, String)>,
        removed: Vec<u32>,
        value: TimerValue,
        always: Option<Instant>,
        /// Analyses not done yet: `ready` says false this many more times.
        analysing: u32,
        /// How many times `loops` was asked.
        loops_asked: usize,
        /// Entries as if the loop were entered once per timed entry's cost (the second value,
        /// in ns) of the time since then.
        counting: Option<(Instant, f64)>,
        /// With counters: the thread's CPU nanoseconds per call without the timer and with
        /// it (one loop entry per call); a counter counts calls at that rate of the thread's
        /// time on a CPU, a timer entries at the second.
        rates: Option<(f64, f64)>,
        /// Each probe's thread CPU nanoseconds as it went in, for `rates`.
        born: BTreeMap<u32, u64>,
        /// The counters' calls so far, and the thread's CPU nanoseconds when they were
        /// brought up to date.
        counters: BTreeMap<u32, (f64, u64)>,
        /// With `rates`: `f` is entered too rarely for its counter to count anything, and its
        /// timers count no entry (they cost all the same: python3's loop_4); its callees'
        /// counters count at `rates`.
        rare: bool,
        /// The functions whose calls were counted.
        counted: Vec<String>,
        /// Whole call paths timed (with `paths`: their function profiled, ids from 400).
        timed_paths: Vec<Vec<String>>,
        /// Whole call paths can be timed.
        paths: bool,
        /// The process is gone: nothing comes out.
        gone: bool,
        /// Loops timed along call paths (with `paths`, ids from 500): path and loop.
        path_loops: Vec<(Vec<String>, String)>,
    }

    impl Fake {
        /// The calling thread's CPU nanoseconds.
        fn run() -> u64 {
            let (pid, f) = at_f();
            let Some(Resource::Thread(tid)) = f.0.get(1) else {
                return 0;
            };
            sched(pid, *tid as i32).unwrap_or_default().run
        }

        /// Brings the counters up to date, at the rate of whether a timer is in now.
        fn advance(&mut self) {
            let Some((counted, timed)) = self.rates else {
                return;
            };
            let timer = self.born.keys().any(|id| *id < 300 || *id >= 400);
            let per = if timer { timed } else { counted };
            let now = Fake::run();
            for (id, (calls, at)) in self.counters.iter_mut() {
                let still =
                    self.rare && self.counted.get((*id - 300) as usize) == Some(&"f".into());
                if !still {
                    *calls += now.saturating_sub(*at) as f64 / per;
                }
                *at = now;
            }
        }
    }

    impl Probes for Fake {
        fn count_calls(&mut self, _: &str, function: &str) -> Result<u32, String> {
            if self.rates.is_none() {
                return Err("no counters".into());
            }
            self.advance();
            let id = 300 + self.counted.len() as u32;
            self.counted.push(function.into());
            self.counters.insert(id, (0.0, Fake::run()));
            Ok(id)
        }
        fn loops(&mut self, _: &str, function: &str) -> Result<Vec<LoopInfo>, String> {
            self.loops_asked += 1;
            if function != "f" {
                return Err(format!("{function} has no loops"));
            }
            let l = |name: &str, parent: Option<&str>| LoopInfo {
                name: name.into(),
                parent: parent.map(Into::into),
            };
            Ok(vec![
                l("loop_1", None),
                l("loop_2", None),
                l("loop_2.1", Some("loop_2")),
                l("loop_2.1.1", Some("loop_2.1")),
            ])
        }
        fn insert(&mut self, module: &str, function: &str, lp: &str) -> Result<u32, String> {
            self.advance();
            self.inserted
                .push((module.into(), function.into(), lp.into()));
            let id = 100 + self.inserted.len() as u32;
            if self.rates.is_some() {
                self.born.insert(id, Fake::run());
            }
            Ok(id)
        }
        fn insert_call(&mut self, module: &str, caller: &str, callee: &str) -> Result<u32, String> {
            if caller == "by_pointer" {
                return Err(format!("{caller} makes no direct call to {callee}"));
            }
            self.calls
                .push((module.into(), caller.into(), callee.into()));
            Ok(200 + self.calls.len() as u32)
        }
        fn insert_path(&mut self, _: &str, path: &[String]) -> Result<u32, String> {
            if !self.paths {
                return Err("no profiles".into());
            }
            self.advance();
            self.timed_paths.push(path.to_vec());
            let id = 400 + self.timed_paths.len() as u32;
            if self.rates.is_some() {
                self.born.insert(id, Fake::run());
            }
            Ok(id)
        }
        fn insert_path_loop(&mut self, _: &str, path: &[String], lp: &str) -> Result<u32, String> {
            if !self.paths {
                return Err("no profiles".into());
            }
            self.path_loops.push((path.to_vec(), lp.into()));
            Ok(500 + self.path_loops.len() as u32)
        }
        fn read(&mut self, id: u32, _: i32) -> Result<TimerValue, String> {
            self.advance();
            if let Some((calls, _)) = self.counters.get(&id) {
                return Ok(TimerValue {
                    entries: *calls as u64,
                    ns: 0,
                });
            }
            if let (Some((_, timed)), Some(born)) = (self.rates, self.born.get(&id)) {
                let entries = if self.rare {
                    0
                } else {
                    (Fake::run().saturating_sub(*born) as f64 / timed) as u64
                };
                return Ok(TimerValue { entries, ns: 0 });
            }
            if let Some((since, ns)) = self.counting {
                return Ok(TimerValue {
                    entries: (since.elapsed().as_nanos() as f64 / ns) as u64,
                    ns: 0,
                });
            }
            Ok(match self.always {
                Some(t) => TimerValue {
                    entries: 1,
                    ns: t.elapsed().as_nanos() as u64,
                },
                None => self.value,
            })
        }
        fn remove(&mut self, id: u32) -> Result<(), String> {
            if self.gone {
                return Err("not removed: the process is not running".into());
            }
            self.advance();
            self.born.remove(&id);
            self.counters.remove(&id);
            self.removed.push(id);
            Ok(())
        }
        fn ready(&mut self, _: &str, _: &str) -> bool {
            self.analysing = self.analysing.saturating_sub(1);
            self.analysing == 0
        }
        fn loop_at(&mut self, _: &str, function: &str, pc: u64) -> Option<String> {
            match (function, pc) {
                ("f", 0x100) => Some("loop_2.1".into()),
                ("f", 0x300) => Some("loop_1".into()),
                _ => None,
            }
        }
    }

    /// This process and its calling thread, at function `f` of module `m`.
    fn at_f() -> (i32, Focus) {
        let pid = std::process::id() as i32;
        // SAFETY: gettid has no preconditions.
        let tid = unsafe { libc::gettid() };
        let focus = Focus(vec![
            Resource::Program("p".into()),
            Resource::Thread(tid as u32),
            Resource::Module("m".into()),
            Resource::Function("f".into()),
        ]);
        (pid, focus)
    }

    fn names(v: &[(Focus, f64)]) -> Vec<String> {
        v.iter().map(|(f, _)| f.to_string()).collect()
    }

    #[test]
    fn a_cpu_bound_function_is_refined_into_its_outermost_loops_and_a_loop_into_its_own() {
        let (pid, f) = at_f();
        let mut fake = Fake::default();
        let mut lab = ProbeLab::new(pid, ProcLab::new(pid), Some(&mut fake));
        let tid = f.0[1].to_string();
        let under = |tail: &str| format!("p > {tid} > m > f > {tail}");
        let loops = lab.refine(Hypothesis::CPUBound, &f).unwrap();
        assert_eq!(names(&loops), [under("loop_1"), under("loop_2")]);
        let inner = lab
            .refine(
                Hypothesis::CPUBound,
                &f.with(Resource::Loop("loop_2".into())),
            )
            .unwrap();
        assert_eq!(names(&inner), [under("loop_2 > loop_2.1")]);
        // Loops are a refinement of CPU demand only, and need a function that has them.
        assert!(lab.refine(Hypothesis::SyncWait, &f).unwrap().is_empty());
        let mut g = f.clone();
        g.0[3] = Resource::Function("g".into());
        assert!(lab.refine(Hypothesis::CPUBound, &g).unwrap().is_empty());
        // Without probes, nothing below a function is a loop.
        drop(lab);
        let mut slow = Fake {
            analysing: 2,
            ..Fake::default()
        };
        let mut lab = ProbeLab::new(pid, ProcLab::new(pid), Some(&mut slow));
        // While the function's module is being analysed, the lab cannot tell yet; then it can.
        assert!(lab.refine(Hypothesis::CPUBound, &f).is_none());
        assert_eq!(
            names(&lab.refine(Hypothesis::CPUBound, &f).unwrap()).len(),
            2
        );
        // Without probes, nothing below a function is a loop.
        let mut bare = ProbeLab::new(pid, ProcLab::new(pid), None);
        assert!(bare.refine(Hypothesis::CPUBound, &f).unwrap().is_empty());
    }

    /// A callee's loops in its caller are looked for once the caller's module is analysed,
    /// not before: asked before, the search's own thread ran the module's whole analysis
    /// itself, and a search of redis-server under load ran to 57 s of its `--for 30`.
    #[test]
    fn a_callee_s_loops_are_not_asked_for_while_its_module_is_analysed() {
        let (pid, f) = at_f();
        let mut fake = Fake {
            analysing: 1000,
            ..Fake::default()
        };
        let mut lab = ProbeLab::new(pid, ProcLab::new(pid), Some(&mut fake));
        assert!(lab.home(Hypothesis::SyncWait, &f, "inner").is_empty());
        drop(lab);
        assert_eq!(fake.loops_asked, 0);
    }

    /// A probe's start costs gsh's work (analysing, planning, inserting): none starts while
    /// the whole search, its stops and gsh's competition for the CPUs with the probes, is at
    /// its aim of the limit. Before, the lab's `spent` counted its probes alone, and the
    /// search went on starting timers on redis-server with gsh's competition at 7.2% of the
    /// server's time against a limit of 5%.
    #[test]
    fn no_probe_starts_while_the_whole_search_is_at_its_aim() {
        let (pid, _) = at_f();
        let limit = 0.05;
        let pace = Arc::new(Pace::new(limit));
        let mut fake = Fake::default();
        let mut lab = ProbeLab::new(pid, ProcLab::new(pid), Some(&mut fake)).pacing(pace.clone());
        assert!(lab.spent() < limit, "{}", lab.spent());
        pace.tell(limit * HOLD_AT);
        assert!(lab.spent() >= limit, "{}", lab.spent());
        pace.tell(limit * HOLD_AT * 0.5);
        assert!(lab.spent() < limit, "{}", lab.spent());
    }

    /// A timer that cannot come out of a program that ended is no error of the search; one
    /// that cannot come out of a live one is.
    #[test]
    fn a_timer_left_in_a_program_that_ended_is_no_probe_error() {
        let (_, f) = at_f();
        let mut gone = std::process::Command::new("true").spawn().unwrap();
        let ended = gone.id() as i32;
        gone.wait().unwrap();
        for (pid, errors) in [(ended, 0), (std::process::id() as i32, 1)] {
            let mut fake = Fake {
                gone: true,
                ..Fake::default()
            };
            let mut lab = ProbeLab::new(pid, ProcLab::new(pid), Some(&mut fake));
            lab.start(&Experiment {
                hypothesis: Hypothesis::CPUBound,
                focus: f.with(Resource::Loop("loop_1".into())),
            })
            .unwrap();
            let stats = lab.finish();
            assert_eq!(stats.errors.len(), errors, "{pid}: {:?}", stats.errors);
        }
    }

    #[test]
    fn each_timer_goes_in_when_its_experiment_starts_and_out_when_it_stops_or_the_search_ends() {
        let (pid, f) = at_f();
        let mut fake = Fake::default();
        let stats = {
            let mut lab = ProbeLab::new(pid, ProcLab::new(pid), Some(&mut fake));
            let e = |lp: &str| Experiment {
                hypothesis: Hypothesis::CPUBound,
                focus: f.with(Resource::Loop(lp.into())),
            };
            let one = lab.start(&e("loop_1")).unwrap();
            lab.start(&e("loop_2")).unwrap();
            // A second experiment on loop_2 (the part of its time waiting for a CPU) shares
            // its timer: nothing more goes in, and it goes out with the last of them.
            let waiting = Experiment {
                hypothesis: Hypothesis::RunQueue,
                ..e("loop_2")
            };
            lab.start(&waiting).unwrap();
            // A timer that saw no entry and no time cannot tell: it says so.
            let r = lab.read(one).unwrap();
            assert!(r.opaque && r.fraction == 0.0, "{r:?}");
            assert!(r.note.unwrap().contains("not entered"), "{r:?}");
            lab.stop(one);
            lab.finish()
        };
        assert_eq!(
            fake.inserted,
            [
                ("m".into(), "f".into(), "loop_1".into()),
                ("m".into(), "f".into(), "loop_2".into())
            ]
        );
        assert_eq!(fake.removed, [101, 102]);
        assert_eq!((stats.inserted, stats.removed), (2, 2));
        assert!(stats.errors.is_empty());
    }

    /// `f` calls `inner` only inside loop_2.1, `outer` outside every loop, and `both` inside
    /// loop_1 and loop_2.1: the search graph holds `inner` below loop_2.1 (whose time
    /// includes it), the others below `f`.
    #[test]
    fn callees_called_inside_a_loop_are_refined_below_that_loop() {
        use super::super::stacks::{Batch, FrameName, Stacks, ThreadStack};
        use std::sync::{Arc, Mutex};
        let (pid, f) = at_f();
        let tid = f.thread().unwrap() as i32;
        let stacks = Arc::new(Mutex::new(Stacks::new(pid)));
        let mut fake = Fake::default();
        let mut lab = ProbeLab::new(
            pid,
            ProcLab::with_stacks(pid, stacks.clone()),
            Some(&mut fake),
        );
        let e = Experiment {
            hypothesis: Hypothesis::CPUBound,
            focus: f.clone(),
        };
        lab.start(&e).unwrap();
        let frame = |name: &str| FrameName {
            module: "m".into(),
            function: name.into(),
            main: true,
        };
        for i in 0..60u64 {
            let (callee, site) = match i % 6 {
                0..=2 => ("inner", 0x100),
                3 => ("outer", 0x200),
                4 => ("both", 0x100),
                _ => ("both", 0x300),
            };
            stacks.lock().unwrap().push(
                Instant::now(),
                Batch {
                    stopped: std::time::Duration::ZERO,
                    threads: vec![ThreadStack {
                        tid,
                        syscall: None,
                        lock_name: None,
                        frames: vec![frame(callee), frame("f")],
                        pcs: vec![0x9000, site],
                        held: std::time::Duration::ZERO,
                        taken: super::super::stacks::Taken::Stopped,
                    }],
                },
            );
        }
        // `x`, reached from `f` through `outer` and through `both`, is proposed wherever it
        // is called from (at the thread, a focus shorter than `f`'s), below `f` only.
        for callee in ["outer", "both"] {
            for _ in 0..6 {
                stacks.lock().unwrap().push(
                    Instant::now(),
                    Batch {
                        stopped: std::time::Duration::ZERO,
                        threads: vec![ThreadStack {
                            tid,
                            syscall: None,
                            lock_name: None,
                            frames: vec![frame("x"), frame(callee), frame("f")],
                            pcs: vec![0x9100, 0x9000, 0x200],
                            held: std::time::Duration::ZERO,
                            taken: super::super::stacks::Taken::Stopped,
                        }],
                    },
                );
            }
        }
        let code = lab
            .refine(Hypothesis::CPUBound, &f)
            .unwrap()
            .into_iter()
            .filter(|(c, _)| matches!(c.last(), Some(Resource::Code(_))))
            .count();
        assert_eq!(code, 1);
        let names = |v: Vec<(Focus, f64)>| -> Vec<String> {
            v.iter()
                .filter(|(f, _)| !matches!(f.last(), Some(Resource::Code(_))))
                .map(|(f, _)| {
                    let tail: Vec<String> = f.0[4..].iter().map(|r| r.to_string()).collect();
                    tail.join(" > ")
                })
                .collect()
        };
        let at_f = names(lab.refine(Hypothesis::CPUBound, &f).unwrap());
        assert_eq!(at_f, ["both", "outer", "loop_1", "loop_2"]);
        let l2 = f.with(Resource::Loop("loop_2".into()));
        let at_l2 = names(lab.refine(Hypothesis::CPUBound, &l2).unwrap());
        assert_eq!(at_l2, ["loop_2 > loop_2.1"]);
        let l21 = l2.with(Resource::Loop("loop_2.1".into()));
        let at_l21 = names(lab.refine(Hypothesis::CPUBound, &l21).unwrap());
        assert_eq!(
            at_l21,
            [
                "loop_2 > loop_2.1 > inner",
                "loop_2 > loop_2.1 > loop_2.1.1"
            ]
        );
        // Measured below its loop as what it is: f's samples calling `inner`.
        let below = l21.with(Resource::Function("inner".into()));
        let probe = lab
            .start(&Experiment {
                hypothesis: Hypothesis::CPUBound,
                focus: below,
            })
            .unwrap();
        std::thread::sleep(std::time::Duration::from_millis(50));
        assert!(lab.read(probe).is_some());
        // Other hypotheses have no loops: every callee stays below the function.
        lab.start(&Experiment {
            hypothesis: Hypothesis::SyncWait,
            focus: f.clone(),
        })
        .unwrap();
        assert!(lab.refine(Hypothesis::SyncWait, &l2).unwrap().is_empty());
    }

    /// A call path's hypothesis is tested by a timer of its last call, `time CALLER call
    /// CALLEE`, shared by the experiments on it and taken out with the last; a path whose
    /// last call cannot be timed (here, an indirect one) is measured by the samples instead,
    /// and each experiment says which it was.
    #[test]
    fn a_call_path_is_timed_at_its_last_call_or_else_sampled() {
        use std::sync::{Arc, Mutex};
        let (pid, f) = at_f();
        let mut code = f.clone();
        code.0[3] = Resource::Code("hot".into());
        let path = |p: &[&str]| Experiment {
            hypothesis: Hypothesis::CPUBound,
            focus: code.with(Resource::CallPath(
                p.iter().map(|s| s.to_string()).collect(),
            )),
        };
        let stacks = Arc::new(Mutex::new(super::super::stacks::Stacks::new(pid)));
        let mut fake = Fake::default();
        let stats = {
            let mut lab = ProbeLab::new(pid, ProcLab::with_stacks(pid, stacks), Some(&mut fake));
            let hot = lab.start(&path(&["main", "hot_caller", "hot"])).unwrap();
            assert_eq!(lab.method(hot), Method::Probe);
            let waiting = Experiment {
                hypothesis: Hypothesis::RunQueue,
                ..path(&["main", "hot_caller", "hot"])
            };
            let shared = lab.start(&waiting).unwrap();
            let cold = lab.start(&path(&["main", "cold_caller", "hot"])).unwrap();
            assert_eq!(lab.method(cold), Method::Probe);
            let sampled = lab.start(&path(&["main", "by_pointer", "hot"])).unwrap();
            assert_eq!(lab.method(sampled), Method::Samples);
            // Only CPU demand is timed: other hypotheses' paths are sampled.
            let sync = Experiment {
                hypothesis: Hypothesis::SyncWait,
                ..path(&["main", "hot_caller", "hot"])
            };
            let sync = lab.start(&sync).unwrap();
            assert_eq!(lab.method(sync), Method::Samples);
            // A call not made while timed reads 0 and, unlike a loop, is not refined.
            let r = lab.read(cold).unwrap();
            assert!(!r.opaque && r.fraction == 0.0, "{r:?}");
            assert_eq!(r.note, Some("not called while timed"));
            lab.stop(hot);
            lab.stop(cold);
            lab.stop(shared);
            lab.finish()
        };
        let m = |c: &str| ("m".to_string(), c.to_string(), "hot".to_string());
        assert_eq!(fake.calls, [m("hot_caller"), m("cold_caller")]);
        assert!(fake.inserted.is_empty());
        assert_eq!(fake.removed, [202, 201]);
        assert_eq!(
            (stats.inserted, stats.call_timers, stats.removed),
            (2, 2, 2)
        );
        assert!(
            stats.errors.iter().any(|e| e.contains("sampled instead")),
            "{:?}",
            stats.errors
        );
    }

    /// The timer's cost is measured on this machine: a clock read's worth at least, far less
    /// than a microsecond where `rdtsc` runs natively. What a timer costs is its entries times
    /// that, over its thread's time on a CPU, known a moment after it goes in; it predicts the
    /// cost of the same timer later. Before that, one timer at a time goes in.
    #[test]
    fn the_timers_cost_is_measured_and_predicts_a_timers_cost() {
        let ns = calibrate();
        assert!((1.0..2000.0).contains(&ns), "{ns} ns per timed entry");
        let (pid, f) = at_f();
        let mut fake = Fake {
            value: TimerValue { entries: 0, ns: 0 },
            ..Fake::default()
        };
        let mut lab = ProbeLab::new(pid, ProcLab::new(pid), Some(&mut fake));
        let measured = lab.stats.timer_ns;
        assert!(measured >= 1.0, "{measured}");
        let e = Experiment {
            hypothesis: Hypothesis::CPUBound,
            focus: f.with(Resource::Loop("loop_1".into())),
        };
        let beside = Experiment {
            focus: f.with(Resource::Loop("loop_2".into())),
            ..e.clone()
        };
        // Unknown: predicted to cost little; a second unknown one waits for the first's.
        assert_eq!(lab.predicted_cost(&e), Some(UNKNOWN_COST));
        let first = lab.start(&e).unwrap();
        assert_eq!(lab.measured_cost(first), None);
        assert_eq!(lab.predicted_cost(&beside), None);
        // Not what shares its timer: nothing more goes in for it.
        let shared = Experiment {
            hypothesis: Hypothesis::RunQueue,
            ..e.clone()
        };
        assert_eq!(lab.predicted_cost(&shared), Some(0.0));
        let second = lab.start(&shared).unwrap();
        // Once the first has been in a moment, its cost is known (no entries here: none),
        // carried by the first of the experiments sharing it, and the next may go in.
        std::thread::sleep(std::time::Duration::from_secs_f64(RATE_WINDOW * 1.5));
        lab.read(first).unwrap();
        assert_eq!(lab.measured_cost(first), Some(0.0));
        assert_eq!(lab.measured_cost(second), Some(0.0));
        assert_eq!(lab.predicted_cost(&beside), Some(UNKNOWN_COST));
        lab.stop(first);
        lab.stop(second);
        // Out again, the timer is predicted at what it was measured to cost.
        lab.costs
            .insert(("m".into(), "f".into(), "loop_1".into()), 0.25);
        assert_eq!(lab.predicted_cost(&e), Some(0.25));
        assert_eq!(lab.finish().timer_ns, measured);
    }

    /// A timer entered as often as its thread can: what it costs is most of the thread's
    /// time, measured from its entries and the thread's time on a CPU.
    #[test]
    fn a_timer_entered_all_the_time_is_measured_to_cost_most_of_its_threads_time() {
        let (pid, f) = at_f();
        let mut fake = Fake {
            counting: Some((Instant::now(), 20.0)),
            ..Fake::default()
        };
        let mut lab = ProbeLab::new(pid, ProcLab::new(pid), Some(&mut fake));
        // The same cost per entry as the fake's, whatever this machine's is.
        lab.stats.timer_ns = 20.0;
        let ns = lab.stats.timer_ns;
        let e = Experiment {
            hypothesis: Hypothesis::CPUBound,
            focus: f.with(Resource::Loop("loop_1".into())),
        };
        let t = lab.start(&e).unwrap();
        // The thread computes; the fake reports an entry per timer's cost of its time.
        let spin = Instant::now();
        let mut x = 1u64;
        while spin.elapsed() < std::time::Duration::from_millis(200) {
            x = std::hint::black_box(x.wrapping_mul(6364136223846793005).wrapping_add(1));
        }
        lab.read(t).unwrap();
        let c = lab.measured_cost(t).unwrap();
        lab.finish();
        assert!(c > 0.5 && c <= 1.0, "{c} with {ns} ns per entry");
    }

    /// A loop the thread is in all along: while the thread computes its fraction is near 1;
    /// while it sleeps (neither on a CPU nor runnable) near 0, however long the timer says.
    #[test]
    fn a_loops_fraction_is_its_time_less_the_threads_time_off_a_cpu() {
        let (pid, f) = at_f();
        let mut fake = Fake {
            always: Some(Instant::now()),
            ..Fake::default()
        };
        let mut lab = ProbeLab::new(pid, ProcLab::new(pid), Some(&mut fake));
        let e = Experiment {
            hypothesis: Hypothesis::CPUBound,
            focus: f.with(Resource::Loop("loop_1".into())),
        };
        let spin = lab.start(&e).unwrap();
        let t = Instant::now();
        let mut x = 1u64;
        while t.elapsed() < std::time::Duration::from_millis(300) {
            x = std::hint::black_box(x.wrapping_mul(6364136223846793005).wrapping_add(1));
        }
        let busy = lab.read(spin).unwrap();
        lab.stop(spin);
        let nap = lab.start(&e).unwrap();
        std::thread::sleep(std::time::Duration::from_millis(300));
        let idle = lab.read(nap).unwrap();
        lab.finish();
        assert!(busy.fraction > 0.6 && !busy.opaque, "{busy:?}");
        assert!(idle.fraction < 0.3 && !idle.opaque, "{idle:?}");
    }

    /// Computes for the calling thread until it has run `ms` more milliseconds on a CPU.
    fn compute(ms: u64) {
        let until = Fake::run() + ms * 1_000_000;
        let mut x = 1u64;
        while Fake::run() < until {
            for _ in 0..1000 {
                x = std::hint::black_box(x.wrapping_mul(6364136223846793005).wrapping_add(1));
            }
        }
    }

    /// Lets timer `t` take its turns with its counter, the thread computing through each:
    /// no reading until its last turn, the timer's, has begun.
    fn take_turns(lab: &mut ProbeLab, t: ProbeId) {
        assert!(lab.read(t).is_none(), "counting");
        assert_eq!(lab.measured_cost(t), None);
        turns_from(lab, t, 1);
    }

    /// [`take_turns`] from turn `first` on, the turns before it taken.
    fn turns_from(lab: &mut ProbeLab, t: ProbeId, first: usize) {
        for turn in first..TURNS {
            compute((TURN_CPU * 1000.0) as u64 + 10);
            let r = lab.read(t);
            assert_eq!(r.is_some(), turn == TURNS - 1, "turn {turn}");
        }
    }

    /// A timer's cost is measured in situ: beside a counter of its function's calls, the timer
    /// is in and out by turns first (the experiment has no reading meanwhile), and what it adds
    /// to the thread's CPU time per call, over its entries per call, is what each entry costs,
    /// not the bound measured back to back, which holds until then and caps it.
    /// (Every entry was counted at the bound before: 4x over what a timer in a loop bound by
    /// its own work adds, `xtask bench-consult`.)
    #[test]
    fn a_timers_cost_is_what_it_adds_to_its_threads_time_per_entry_over_a_counter() {
        let (pid, f) = at_f();
        let e = Experiment {
            hypothesis: Hypothesis::CPUBound,
            focus: f.with(Resource::Loop("loop_1".into())),
        };
        // 40 ns of the thread's time per call without the timer, 44 with it.
        let mut fake = Fake {
            rates: Some((40.0, 44.0)),
            ..Fake::default()
        };
        let mut lab = ProbeLab::new(pid, ProcLab::new(pid), Some(&mut fake));
        lab.stats.timer_ns = 20.0;
        lab.stats.count_ns = 0.5;
        let t = lab.start(&e).unwrap();
        take_turns(&mut lab, t);
        // The timer's turns were counted at the bound: 20 ns of 44.
        let bound = lab.measured_cost(t).unwrap();
        assert!((0.3..0.6).contains(&bound), "{bound}");
        // Its last turn over, at what it adds: 4 ns of 44.
        compute((TURN_CPU * 1000.0) as u64 + 20);
        lab.read(t).unwrap();
        let c = lab.measured_cost(t).unwrap();
        assert!((0.07..0.14).contains(&c), "{c}");
        let stats = lab.finish();
        drop(lab);
        assert_eq!(fake.inserted.len(), TURNS / 2);
        // Each timer, and the counter.
        assert_eq!(fake.removed.len(), TURNS / 2 + 1);
        assert_eq!(stats.inserted, stats.removed);
        let [cost] = stats.timer_costs.as_slice() else {
            panic!("{stats:?}");
        };
        assert!(cost.in_situ, "{cost:?}");
        assert!((3.5..5.5).contains(&cost.ns), "{cost:?}");
        assert!((39.0..41.0).contains(&cost.counted_ns.unwrap()), "{cost:?}");

        // A timer adding more than the whole sequence's latency (a noisy rate) is held to it.
        let mut fake = Fake {
            rates: Some((40.0, 100.0)),
            ..Fake::default()
        };
        let mut lab = ProbeLab::new(pid, ProcLab::new(pid), Some(&mut fake));
        lab.stats.timer_ns = 20.0;
        let t = lab.start(&e).unwrap();
        take_turns(&mut lab, t);
        compute((TURN_CPU * 1000.0) as u64 + 20);
        lab.read(t).unwrap();
        let stats = lab.finish();
        assert_eq!(stats.timer_costs[0].ns, 20.0, "{stats:?}");
        assert!(stats.timer_costs[0].in_situ, "{stats:?}");

        // A thread slower per call without the timer than with it: too noisy to tell, and the
        // bound holds.
        let mut fake = Fake {
            rates: Some((50.0, 44.0)),
            ..Fake::default()
        };
        let mut lab = ProbeLab::new(pid, ProcLab::new(pid), Some(&mut fake));
        lab.stats.timer_ns = 20.0;
        let t = lab.start(&e).unwrap();
        take_turns(&mut lab, t);
        compute((TURN_CPU * 1000.0) as u64 + 20);
        lab.read(t).unwrap();
        let c = lab.measured_cost(t).unwrap();
        assert!((0.3..0.6).contains(&c), "{c}: 20 ns of 44");
        let stats = lab.finish();
        let cost = &stats.timer_costs[0];
        assert!(!cost.in_situ && cost.ns == 20.0, "{stats:?}");
        assert!(
            (49.0..51.0).contains(&cost.counted_ns.unwrap()),
            "{stats:?}"
        );
    }

    /// A timer that slows its thread with no entry counted (python3's loop_4 of
    /// `_PyEval_EvalFrameDefault`, whose placement copies the whole interpreter: 25% of its
    /// time, in a function entered once) is measured in situ as a share of the thread's time,
    /// per call of the function's hottest callee, and counted so. Before, its cost was its
    /// entries times their cost: nothing.
    #[test]
    fn a_timer_slowing_a_rarely_entered_function_costs_its_share_per_call_of_a_callee() {
        use super::super::stacks::Stacks;
        use std::sync::{Arc, Mutex};
        let (pid, f) = at_f();
        let tid = f.thread().unwrap() as i32;
        let stacks = Arc::new(Mutex::new(Stacks::new(pid)));
        // 40 ns of the thread's time per call of `hot` without the timer, 50 with it: a
        // fifth of its time.
        let mut fake = Fake {
            rates: Some((40.0, 50.0)),
            rare: true,
            ..Fake::default()
        };
        let stats = {
            let mut lab = ProbeLab::new(
                pid,
                ProcLab::with_stacks(pid, stacks.clone()),
                Some(&mut fake),
            );
            lab.stats.timer_ns = 20.0;
            // `f` is CPU-bound in `hot` (the samples), and its loop is tested.
            let function = Experiment {
                hypothesis: Hypothesis::CPUBound,
                focus: f.clone(),
            };
            lab.start(&function).unwrap();
            hot_in_f(&stacks, tid);
            let e = Experiment {
                hypothesis: Hypothesis::CPUBound,
                focus: f.with(Resource::Loop("loop_1".into())),
            };
            let t = lab.start(&e).unwrap();
            take_turns(&mut lab, t);
            compute((TURN_CPU * 1000.0) as u64 + 20);
            lab.read(t).unwrap();
            let c = lab.measured_cost(t).unwrap();
            assert!(
                (0.1..0.3).contains(&c),
                "{c}: 10 ns of 50 per call of `hot`"
            );
            lab.finish()
        };
        assert_eq!(fake.counted, ["f", "hot"]);
        let [cost] = stats.timer_costs.as_slice() else {
            panic!("{stats:?}");
        };
        let share = cost.share.unwrap();
        assert!(cost.in_situ && (0.1..0.3).contains(&share), "{stats:?}");
        assert!(
            (39.0..41.0).contains(&cost.counted_ns.unwrap()),
            "{stats:?}"
        );
        // What it took: a fifth of the thread's time in its turns and after, not nothing.
        assert!(
            stats.spent * 1e3 > 2.0 * TURN_CPU * 1000.0 * 0.1,
            "{stats:?}"
        );
    }

    /// A timer whose first turn in shows it far over the cost limit ends its turns there: its
    /// experiment reads it at once, at that cost, and the search takes it out. python3's
    /// loop_2 of `_PyEval_EvalFrameDefault` doubled its thread's time per call; its three turns
    /// in took 4% of a 4 s search's running, over `--cost 5` with the rest.
    #[test]
    fn a_timer_far_over_the_limit_in_its_first_turn_in_ends_its_turns() {
        use super::super::stacks::Stacks;
        use std::sync::{Arc, Mutex};
        let (pid, f) = at_f();
        let tid = f.thread().unwrap() as i32;
        let stacks = Arc::new(Mutex::new(Stacks::new(pid)));
        // 40 ns of the thread's time per call of `hot` without the timer, 80 with it: half.
        let mut fake = Fake {
            rates: Some((40.0, 80.0)),
            rare: true,
            ..Fake::default()
        };
        let mut lab = ProbeLab::new(
            pid,
            ProcLab::with_stacks(pid, stacks.clone()),
            Some(&mut fake),
        )
        .pacing(Arc::new(Pace::new(0.05)));
        lab.stats.timer_ns = 20.0;
        let function = Experiment {
            hypothesis: Hypothesis::CPUBound,
            focus: f.clone(),
        };
        lab.start(&function).unwrap();
        hot_in_f(&stacks, tid);
        let e = Experiment {
            hypothesis: Hypothesis::CPUBound,
            focus: f.with(Resource::Loop("loop_1".into())),
        };
        let t = lab.start(&e).unwrap();
        assert!(lab.read(t).is_none(), "counting");
        // Its first turn, out.
        compute((TURN_CPU * 1000.0) as u64 + 10);
        assert!(lab.read(t).is_none(), "its first turn in begins");
        // Its first turn in: half its thread's time, ten times the limit.
        compute((TURN_CPU * 1000.0) as u64 + 10);
        assert!(lab.read(t).is_some(), "its turns ended");
        std::thread::sleep(std::time::Duration::from_millis(60));
        lab.read(t);
        let c = lab.measured_cost(t).unwrap();
        assert!(
            (0.35..0.65).contains(&c),
            "{c}: 40 ns of 80 per call of `hot`"
        );
        lab.finish();
    }

    /// A loop below a call path the search went on along (`f`, reached from `main` through
    /// `crunch` and through `cold`) is timed along that path alone: by a timer of `f`'s loop
    /// counting only `f`'s activations along `main > crunch > f`, not the loop's timer from
    /// every caller, which the `Code` focus' loop keeps. Where that cannot be inserted, the loop
    /// is timed from every caller, and the error says so.
    #[test]
    fn a_loop_along_a_call_path_is_timed_along_that_path_alone() {
        use super::super::stacks::{Batch, FrameName, Stacks, ThreadStack};
        use std::sync::{Arc, Mutex};
        let (pid, f) = at_f();
        let Resource::Thread(tid) = f.0[1] else {
            unreachable!()
        };
        let frame = |name: &str| FrameName {
            module: "m".into(),
            function: name.into(),
            main: true,
        };
        let sampled = |stacks: &Mutex<Stacks>| {
            for i in 0..80u64 {
                let caller = if i % 4 == 0 { "cold" } else { "crunch" };
                stacks.lock().unwrap().push(
                    Instant::now(),
                    Batch {
                        stopped: std::time::Duration::ZERO,
                        threads: vec![ThreadStack {
                            tid: tid as i32,
                            syscall: None,
                            lock_name: None,
                            frames: vec![frame("f"), frame(caller), frame("main")],
                            pcs: vec![0x300, 0x8000, 0x7000],
                            held: std::time::Duration::ZERO,
                            taken: super::super::stacks::Taken::Stopped,
                        }],
                    },
                );
            }
        };
        let mut code = f.clone();
        code.0[3] = Resource::Code("f".into());
        let path = code.with(Resource::CallPath(vec![
            "main".into(),
            "crunch".into(),
            "f".into(),
        ]));
        for paths in [true, false] {
            let mut fake = Fake {
                paths,
                ..Fake::default()
            };
            let stacks = Arc::new(Mutex::new(Stacks::new(pid)));
            let stats = {
                let inner = ProcLab::with_stacks(pid, stacks.clone());
                let mut lab = ProbeLab::new(pid, inner, Some(&mut fake));
                let cpu = |focus: &Focus| Experiment {
                    hypothesis: Hypothesis::CPUBound,
                    focus: focus.clone(),
                };
                // Sampled: the path is refined from its samples.
                let anywhere = lab.start(&cpu(&code)).unwrap();
                assert_eq!(lab.method(anywhere), Method::Samples);
                sampled(&stacks);
                let chains = lab.refine(Hypothesis::CPUBound, &path).unwrap();
                let [(chain, _)] = chains.as_slice() else {
                    panic!("{chains:?}")
                };
                assert_eq!(chain.call_path(), Some(vec!["main", "crunch", "f"]));
                let loops = lab.refine(Hypothesis::CPUBound, chain).unwrap();
                let along = loops
                    .iter()
                    .find(|(l, _)| l.last() == Some(&Resource::Loop("loop_1".into())))
                    .unwrap_or_else(|| panic!("{loops:?}"))
                    .0
                    .clone();
                let t = lab.start(&cpu(&along)).unwrap();
                assert_eq!(lab.method(t), Method::Probe);
                let every = lab
                    .start(&cpu(&code.with(Resource::Loop("loop_1".into()))))
                    .unwrap();
                lab.stop(t);
                lab.stop(every);
                lab.stop(anywhere);
                lab.finish()
            };
            let path_loop = (
                vec!["main".into(), "crunch".into(), "f".into()],
                "loop_1".into(),
            );
            let m = |l: &str| ("m".to_string(), "f".to_string(), l.to_string());
            if paths {
                assert_eq!(fake.path_loops, [path_loop]);
                assert_eq!(fake.inserted, [m("loop_1")], "the Code focus' loop");
                assert_eq!(fake.removed, [501, 101]);
                assert_eq!(stats.path_timers, 1);
                assert!(stats.errors.is_empty(), "{:?}", stats.errors);
            } else {
                assert!(fake.path_loops.is_empty());
                // Both from every caller: one timer, shared.
                assert_eq!(fake.inserted, [m("loop_1")]);
                assert!(
                    stats
                        .errors
                        .iter()
                        .any(|e| e.contains("timed from every caller")),
                    "{:?}",
                    stats.errors
                );
            }
        }
    }

    /// A timer's key names what it times, and a loop along a path's is a path timer's for its
    /// cost (`path ` first: paid per call of its function, whose every call runs the profile).
    #[test]
    fn a_loop_along_a_paths_key_names_it_and_is_costed_as_a_paths() {
        let what = Timed::PathLoop(vec!["main".into(), "crunch".into()], "loop_1.2".into());
        let key = what.key();
        assert_eq!(key, "path main > crunch loop loop_1.2");
        assert!(key.starts_with("path "));
        let Timed::PathLoop(path, lp) = Timed::of(&key) else {
            panic!("{key}")
        };
        assert_eq!(
            (path.join(" > "), lp.as_str()),
            ("main > crunch".into(), "loop_1.2")
        );
        assert!(matches!(Timed::of("path main > crunch"), Timed::Path(p) if p.len() == 2));
        assert!(matches!(Timed::of("loop_1.2"), Timed::Loop(_)));
    }

    /// Samples of `f`'s thread in `f` calling `hot` three times in four and `cold` the rest:
    /// `hot` is `f`'s hottest callee.
    fn hot_in_f(stacks: &std::sync::Mutex<super::super::stacks::Stacks>, tid: i32) {
        use super::super::stacks::{Batch, FrameName, ThreadStack};
        let frame = |name: &str| FrameName {
            module: "m".into(),
            function: name.into(),
            main: true,
        };
        for i in 0..60u64 {
            let callee = if i % 4 == 0 { "cold" } else { "hot" };
            stacks.lock().unwrap().push(
                Instant::now(),
                Batch {
                    stopped: std::time::Duration::ZERO,
                    threads: vec![ThreadStack {
                        tid,
                        syscall: None,
                        lock_name: None,
                        frames: vec![frame(callee), frame("f")],
                        pcs: vec![0x9000, 0x200],
                        held: std::time::Duration::ZERO,
                        taken: super::super::stacks::Taken::Stopped,
                    }],
                },
            );
        }
    }

    /// While a timer takes its turns nothing else goes in, even once its turns in have given
    /// it a cost at the bound: going in or out during them, another timer would read as its.
    /// (They overlapped: crunch's loop_1, entered once, read 2.4% to 4.9% of its thread's
    /// time in `bench-consult`, unit's loop_1 taking turns beside it.)
    #[test]
    fn nothing_goes_in_while_a_timer_takes_its_turns() {
        let (pid, f) = at_f();
        let e = Experiment {
            hypothesis: Hypothesis::CPUBound,
            focus: f.with(Resource::Loop("loop_1".into())),
        };
        let beside = Experiment {
            focus: f.with(Resource::Loop("loop_2".into())),
            ..e.clone()
        };
        let mut fake = Fake {
            rates: Some((40.0, 44.0)),
            ..Fake::default()
        };
        let mut lab = ProbeLab::new(pid, ProcLab::new(pid), Some(&mut fake));
        lab.stats.timer_ns = 20.0;
        let t = lab.start(&e).unwrap();
        assert!(lab.read(t).is_none(), "counting");
        for turn in 1..TURNS {
            compute((TURN_CPU * 1000.0) as u64 + 10);
            lab.read(t);
            assert_eq!(lab.predicted_cost(&beside), None, "turn {turn}");
        }
        compute((TURN_CPU * 1000.0) as u64 + 20);
        lab.read(t).unwrap();
        assert!(lab.predicted_cost(&beside).is_some());
        lab.finish();
    }

    /// A timer still taking its turns when its experiment stops (the search's time is up) is
    /// counted at what its turns measured, its turn going on then included: python3's loop_4
    /// (a share of its thread's time, no entry counted) was counted at nothing.
    #[test]
    fn a_timer_stopped_in_its_turns_costs_what_they_measured() {
        use std::sync::{Arc, Mutex};
        let (pid, f) = at_f();
        let tid = f.thread().unwrap() as i32;
        let stacks = Arc::new(Mutex::new(super::super::stacks::Stacks::new(pid)));
        let mut fake = Fake {
            rates: Some((40.0, 50.0)),
            rare: true,
            ..Fake::default()
        };
        let stats = {
            let mut lab = ProbeLab::new(
                pid,
                ProcLab::with_stacks(pid, stacks.clone()),
                Some(&mut fake),
            );
            lab.stats.timer_ns = 20.0;
            lab.stats.count_ns = 0.0;
            let function = Experiment {
                hypothesis: Hypothesis::CPUBound,
                focus: f.clone(),
            };
            lab.start(&function).unwrap();
            hot_in_f(&stacks, tid);
            let e = Experiment {
                hypothesis: Hypothesis::CPUBound,
                focus: f.with(Resource::Loop("loop_1".into())),
            };
            let t = lab.start(&e).unwrap();
            // Out, in, out; then halfway through its second turn in, the search ends.
            assert!(lab.read(t).is_none(), "counting");
            for turn in 1..4 {
                compute((TURN_CPU * 1000.0) as u64 + 10);
                assert!(lab.read(t).is_none(), "turn {turn}");
            }
            compute((TURN_CPU * 500.0) as u64);
            lab.finish()
        };
        let [cost] = stats.timer_costs.as_slice() else {
            panic!("{stats:?}");
        };
        let share = cost.share.unwrap_or(0.0);
        assert!(cost.in_situ && (0.1..0.3).contains(&share), "{stats:?}");
        // A fifth of the thread's time in its turns in: 1.5 turns.
        let least = 1.5 * TURN_CPU * 0.1;
        assert!(stats.spent > least, "{stats:?}");
        assert_eq!(fake.born.len(), 0, "every probe out");
        assert_eq!(stats.inserted, stats.removed, "{stats:?}");
    }

    /// A whole call path's timer (a profile of its function, which runs at every call of
    /// it, and costs more than a loop's timer) takes turns beside a counter of the function's
    /// calls as a loop's does, and is counted at what it adds per call, above the loop
    /// timer's bound where it costs more. (It was counted at the bound.)
    #[test]
    fn a_call_paths_timer_costs_what_it_adds_per_call() {
        let (pid, f) = at_f();
        let mut code = f.clone();
        code.0[3] = Resource::Code("hot".into());
        let e = Experiment {
            hypothesis: Hypothesis::CPUBound,
            focus: code.with(Resource::CallPath(vec!["main".into(), "hot".into()])),
        };
        let mut fake = Fake {
            rates: Some((40.0, 44.0)),
            paths: true,
            ..Fake::default()
        };
        let stats = {
            let mut lab = ProbeLab::new(pid, ProcLab::new(pid), Some(&mut fake));
            lab.stats.timer_ns = 2.0;
            lab.stats.count_ns = 0.0;
            let t = lab.start(&e).unwrap();
            assert_eq!(lab.method(t), Method::PathProbe);
            take_turns(&mut lab, t);
            compute((TURN_CPU * 1000.0) as u64 + 20);
            lab.read(t).unwrap();
            lab.finish()
        };
        assert_eq!(fake.counted, ["hot"]);
        assert_eq!(fake.timed_paths.len(), TURNS / 2, "{:?}", fake.timed_paths);
        let [cost] = stats.timer_costs.as_slice() else {
            panic!("{stats:?}");
        };
        assert!(cost.in_situ && (3.0..5.5).contains(&cost.ns), "{stats:?}");
    }

    /// The counters a timer's turns keep in cost in every turn, one another probe went in or
    /// out in too: it is left out of the sums that tell the timer's cost, not out of what the
    /// counters took. (Only the quiet turns' calls were paid.)
    #[test]
    fn the_counters_of_a_timers_turns_cost_in_every_turn() {
        let (pid, f) = at_f();
        let e = Experiment {
            hypothesis: Hypothesis::CPUBound,
            focus: f.with(Resource::Loop("loop_1".into())),
        };
        let other = Experiment {
            focus: f.with(Resource::Loop("loop_2".into())),
            ..e.clone()
        };
        let mut fake = Fake {
            rates: Some((40.0, 44.0)),
            ..Fake::default()
        };
        let begun = Fake::run();
        let (stats, run) = {
            let mut lab = ProbeLab::new(pid, ProcLab::new(pid), Some(&mut fake));
            // The timers cost nothing: what is paid is the counters', 1 ns a call.
            lab.stats.timer_ns = 0.0;
            lab.stats.count_ns = 1.0;
            let free = InSitu {
                counted: 40.0,
                timed: 40.0,
                ns: 0.0,
            };
            lab.in_situ
                .insert(("m".into(), "f".into(), "loop_2".into()), free);
            let o = lab.start(&other).unwrap();
            let t = lab.start(&e).unwrap();
            // loop_2 comes out in loop_1's first turn.
            compute((TURN_CPU * 500.0) as u64);
            lab.stop(o);
            compute((TURN_CPU * 500.0) as u64 + 10);
            assert!(lab.read(t).is_none(), "counting");
            turns_from(&mut lab, t, 2);
            let run = Fake::run() - begun;
            (lab.finish(), run)
        };
        // A call every 40 to 44 ns of the thread's time, the counters in throughout.
        let least = run as f64 / 44.0 * 0.95 / 1e9;
        assert!(
            stats.spent > least,
            "{} s paid, {least} s at least",
            stats.spent
        );
    }

    /// The count [`calibrate_count`] times as a trampoline places it counts, once an
    /// iteration: it runs what is timed.
    #[test]
    fn the_placed_count_counts_each_iteration() {
        assert_eq!(count_placed(1000).0, [0, 0, 0, 1000]);
    }

    /// A turn during which another timer comes out (its experiment judged) is not counted:
    /// the thread's rate changed by that timer's cost, which would read as this one's.
    #[test]
    fn a_turn_another_timer_comes_out_in_is_not_counted() {
        let (pid, f) = at_f();
        let e = Experiment {
            hypothesis: Hypothesis::CPUBound,
            focus: f.with(Resource::Loop("loop_1".into())),
        };
        let other = Experiment {
            focus: f.with(Resource::Loop("loop_2".into())),
            ..e.clone()
        };
        // 40 ns of the thread's time per call with no timer in, 44 with any.
        let mut fake = Fake {
            rates: Some((40.0, 44.0)),
            ..Fake::default()
        };
        let mut lab = ProbeLab::new(pid, ProcLab::new(pid), Some(&mut fake));
        lab.stats.timer_ns = 20.0;
        lab.stats.count_ns = 0.0;
        // loop_2's cost is known: it goes in with no turns.
        let known = InSitu {
            counted: 40.0,
            timed: 44.0,
            ns: 4.0,
        };
        lab.in_situ
            .insert(("m".into(), "f".into(), "loop_2".into()), known);
        let o = lab.start(&other).unwrap();
        let t = lab.start(&e).unwrap();
        // loop_2 comes out near the end of loop_1's first turn (out), which then ends (by its
        // thread's CPU time, however long it took on a loaded machine).
        compute((TURN_CPU * 900.0) as u64);
        lab.stop(o);
        compute((TURN_CPU * 100.0) as u64 + 10);
        assert!(lab.read(t).is_none(), "counting");
        turns_from(&mut lab, t, 2);
        compute((TURN_CPU * 1000.0) as u64 + 20);
        lab.read(t).unwrap();
        let stats = lab.finish();
        let cost = stats
            .timer_costs
            .iter()
            .find(|c| c.timer.ends_with("loop_1"))
            .unwrap();
        // 4 ns; counted, the turn would have made it 3.3.
        assert!(cost.in_situ && (3.7..4.5).contains(&cost.ns), "{stats:?}");
    }
}
