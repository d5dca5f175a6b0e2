//! Developer automation, run as `cargo run -p xtask -- TASK`:
//!
//! - `stripped-coverage [BINARY...]`: how many of a binary's `.symtab` function starts the
//!   engine still finds, exactly, in a stripped copy. The truth is the binary's own `.symtab`,
//!   or for an already-stripped system library its separate debug file's under
//!   `/usr/lib/debug/.build-id/`. Defaults to the mutatees' O2 builds (programs and
//!   libraries) and libc.
//! - `open-time FILE [--runs N]`: how long `Binary::open` and `FunctionTable::build` take.
//! - `bench-analysis [FILE] [--runs N]`: the whole-module analysis's median time and peak
//!   memory, against `objdump -d` (default FILE: gcc 12's `cc1`). Run it with `--release`.
//! - `bench-static [--calls N] [--runs N]`: the added ns per call of a gsh entry counter saved
//!   into a program, against gcc's `-finstrument-functions` with empty hooks. Run it with
//!   `--release`.
//! - `bench-loops [--calls N] [--runs N]`: the added ns per iteration of a saved loop
//!   iteration counter (and of entry, exit, iter-begin and iter-end counters together)
//!   against the plain loop, and the added ns per entry of a loop timer against two `rdtsc`,
//!   all in the same run. Run it with `--release`.
//! - `bench-live [--runs N]`: how long a running 4-thread program is paused to insert a
//!   counter into 1, 100 and 1,000 functions and to delete them. Run it with `--release`.
//! - `bench-loop-timer [--runs N]`: how long `consult`'s loop timer takes to go into and out of
//!   python3's interpreter loop while it computes, as a ratio to the same timer on a small
//!   function's loop in the same run. Run it with `--release`.
//! - `soak-redis [--runs CYCLES] [--separate]`: issue 13's live soak on redis-server under load: exact
//!   counts (count, time, profile, coverage) of a function called a known number of times,
//!   every answer checked, the code back and gsh's pools released after each detach; slots,
//!   RSS, mappings, and the attach's and detach's time and pause (as ratios to a baseline
//!   measured in each cycle) per cycle.
//! - `bench-stall [count|coverage|detach] [--runs N]`: the longest reply a client pinging
//!   redis-server every 1 ms sees during `count '*'` and during `coverage '*'` (inserted and
//!   deleted under `SET`/`GET` load), against the one it sees during a bare halt + resume
//!   and the replies' idle p99; and (`detach`) during the `delete` and the `detach` of
//!   `count '*'` beside `time '*'`, against the longest reply with no gsh attached, with the
//!   stops inside a job held as before and served. Run it with `--release`.
//! - `bench-consult [--runs N] [--cost PERCENT] [--threads N] [--trips N] [--python]
//!   [--search COMMANDS --window SECONDS]`: the progress rate of a CPU-bound program while
//!   `consult` searches it (or other gsh commands run on it), over its rate alone before and
//!   after (alternated, one program), per wall and per CPU second, beside the overhead
//!   `consult` reported. Run it with `--release`.
//! - `bench-consult --redis [--runs N] [--cost PERCENT] [--for SECONDS] [--clients N]
//!   [--no-pin] [--search COMMANDS --window SECONDS]`: the same on redis-server under a
//!   closed-loop `SET`/`GET` load of ours (every answer checked): its operations per second
//!   during each search against alone phases on both sides and against a never-searched twin
//!   server under the same load (each pinned with its load to a CPU of its own), beside
//!   consult's estimate and its parts, gsh's CPU and the first finding; after each detach
//!   the server maps nothing of gsh's. Run it with `--release`.
//! - `bench-stops [--runs N] [--cost PERCENT] [--threads N] [--for SECONDS]`: the share of
//!   the time `consult` says its stack samples stopped a CPU-bound program, and what it says
//!   they cost, against the threads' own `schedstat` and the program's progress beside a
//!   never-searched twin (searches alternated with alone phases). Run it with `--release`.
//! - `bench-attached [--runs N]`: thread creation and signal delivery in a program gsh is
//!   attached to with nothing inserted, against the same program not attached. Run it with
//!   `--release`.
//! - `stress-attach [--runs N]`: attaches to bench-attached's program at delays from 0 to 4 ms
//!   after its spawn (its start-up, its first `malloc`, its `read`), loads the runtime and
//!   inserts `count`, N times; every failure is printed with where the program was stopped.
//! - `mem-attached [--runs N]`: gsh's peak memory attached to an nginx worker and to a
//!   program with shared mappings, against gsh doing the same on their files alone. Run it
//!   with `--release`.
//! - `whole-program [sqlite3|bash|python3|redis-server|cc1|all] [--runs N]`: issue 12's
//!   whole-program reports: a counter at every function's entry and every exit of Debian's
//!   program (all five by default), saved, and the copy's output on a workload compared
//!   exactly with the original's; prints the tactic counts, the run-time ratio and the
//!   per-function entry/exit balance. With `--loops` (default python3 and cc1): entry, exit,
//!   iter-begin and iter-end counters on every loop instead, with the per-loop balance.
//!   Run it with `--release`.
//! - `bench-coverage [cc1|python3|sqlite3] [--runs N]`: `coverage '*'` of gcc 12's `cc1`
//!   compiling the C mutatees (or python3 running a script, or sqlite3 a query), saved: the
//!   slowdown against the original in the same run, with identical outputs. Run it with
//!   `--release`.
//! - `bench-save-scale [--size N]`: `save`'s time per point with `coverage '*'` and with
//!   four declared counters per loop, on a synthetic program of 4N functions against N; about
//!   1x when linear, and the task fails above 2.5x. Run it with `--release`.
//! - `check-switches BINARY...`: every jump table an independent decoder finds
//!   ([`gsh_tests::switches`]), and those whose real case targets are not all block starts in
//!   gsh's CFGs.
//! - `ground-truth [gcc|clang...]`: [`gsh_tests::ground_truth`]'s corpus built at -O0..-O3,
//!   PIE and not; gsh's jump tables and stripped function starts graded against the
//!   relocations and symbols the builds keep.
//! - `ground-truth-crates [gcc|clang...]`: the same grading on real C from crates (SQLite,
//!   Lua, zstd, zlib), fetched with cargo, built at -O0 and -O2, PIE and not.
//! - `grade BINARY...`: the same grading of binaries built elsewhere (with relocations and
//!   labels kept, and a `.stripped` copy beside each).

mod bench;
mod bench_attached;
mod bench_consult;
mod bench_consult_redis;
mod bench_coverage;
mod bench_live;
mod bench_loop_timer;
mod bench_loops;
mod bench_measure;
mod bench_save_scale;
mod bench_stall;
mod bench_static;
mod bench_stops;
mod coverage;
mod cprogram;
mod ground_truth;
mod ground_truth_crates;
mod mem_attached;
mod progress;
mod soak_redis;
mod switches;
mod timing;
mod whole_program;

use anyhow::{bail, Result};

const USAGE: &str = "usage: cargo run -p xtask -- TASK
tasks:
  stripped-coverage [BINARY...]   function starts found in stripped copies (default: the
                                  mutatees' O2 builds and libc.so.6)
  open-time FILE [--runs N]       time Binary::open and FunctionTable::build (default 5 runs)
  bench-analysis [FILE] [--runs N]   whole-module analysis time and peak RSS against
                                  objdump -d (default: gcc 12's cc1, 3 runs; use --release)
  bench-static [--calls N] [--runs N]   ns per call added by a saved gsh entry counter vs
                                  gcc -finstrument-functions (default 200M calls, 5 runs;
                                  use --release)
  bench-measure [--calls N] [--runs N]   ns per call added by live count, time, time --cpu,
                                  profile vs -finstrument-functions (default 50M calls, 5
                                  runs; use --release)
  bench-loops [--calls N] [--runs N]   ns per iteration added by a loop iteration counter
                                  and by four loop counters vs the plain loop, and ns per
                                  entry of a loop timer vs two rdtsc (default 100M
                                  iterations, 5 runs; use --release)
  bench-live [--runs N]           pause of a running program while counters are inserted
  bench-loop-timer [--runs N]     consult's loop timer into python3's interpreter loop, in and out
                                  into 1/100/1000 functions and deleted (use --release)
  soak-redis [--runs N] [--separate]
                                  attach/count/time/profile/coverage/delete/detach cycles on
                                  redis under redis-benchmark load (default 50; --release);
                                  --separate: delete and detach in two jobs, hands-off between
  bench-stall [count|coverage|detach] [--runs N]
                                  longest reply of redis-server pinged every 1 ms during
                                  `count '*'` and `coverage '*'`, against halt + resume
                                  and the idle p99, and during delete and detach of
                                  `count '*'` with `time '*'` (use --release)
  bench-consult [--runs N] [--cost PERCENT] [--threads N] [--trips N] [--python]
                [--search COMMANDS --window SECONDS]
                                  progress rate of a CPU-bound program while `consult`
                                  searches it, over its rate alone (alternated), beside
                                  the overhead consult reported (use --release)
  bench-consult --redis [--runs N] [--cost PERCENT] [--for SECONDS] [--clients N]
                [--no-pin] [--search COMMANDS --window SECONDS]
                                  SET/GET operations per second of redis-server while
                                  `consult` searches it (default 30 s, consult's --cost),
                                  over alone (alternated) and over a twin server, beside
                                  the overhead consult reported; every answer checked and
                                  gsh's mappings gone after each detach (use --release)
  bench-stops [--runs N] [--cost PERCENT] [--threads N] [--for SECONDS]
                                  consult's stopped share and stops' cost (stack samples
                                  only) against the threads' schedstat and the progress
                                  of a CPU-bound program beside its twin (use --release)
  bench-attached [--runs N]       thread creation and signal delivery while attached with
                                  nothing inserted, vs not attached (default 7 runs; use
                                  --release)
  stress-attach [--runs N]        attach, load the runtime and count at 0-4 ms after the
                                  program's spawn, N times (default 200); failures printed
                                  with where the program was stopped
  mem-attached [--runs N]         gsh's peak memory attached to an nginx worker and to a
                                  program with shared mappings, vs the same on their files
                                  (default 3 runs; use --release)
  bench-coverage [cc1|python3|sqlite3] [--runs N]
                                  coverage '*' of cc1 compiling the C mutatees (or python3
                                  on a script, sqlite3 on a query), saved: slowdown vs the
                                  original, same run
                                  (default cc1, 3 runs; use --release)
  bench-save-scale [--size N]     save time per point of coverage '*' and of per-loop
                                  counters on a synthetic program of 4N functions over N:
                                  fails when superlinear (default 1000; use --release)
  whole-program [sqlite3|bash|python3|redis-server|cc1|all] [--loops] [--runs N]
                                  a counter at every entry and exit of the program, saved;
                                  outputs compared exactly, tactics, run-time ratios and
                                  entry/exit balance printed (default all, 3 runs; --release);
                                  --loops: four counters on every loop instead (default
                                  python3 and cc1)
  check-switches BINARY...        jump tables an independent decoder finds whose case targets
                                  are not all block starts in gsh's CFGs
  ground-truth [gcc|clang...]     the corpus in tests/corpus built at -O0..-O3, PIE and not,
                                  with relocations kept: jump tables and stripped function
                                  starts graded (default: gcc and clang)
  ground-truth-crates [gcc|clang...]
                                  the same on SQLite, Lua, zstd and zlib from crates
                                  (fetched with cargo), at -O0 and -O2, PIE and not
  grade BINARY...                 the same grading of binaries built with relocations and
                                  labels kept, each with a BINARY.stripped copy beside it";

/// Parses `[FILE] [--runs N]`, the arguments `open-time` and `bench-analysis` share; `usage`
/// is quoted back on a mistake.
pub fn file_and_runs(
    args: &[String],
    default_runs: usize,
    usage: &str,
) -> Result<(Option<String>, usize)> {
    use anyhow::Context as _;
    let mut file = None;
    let mut runs = default_runs;
    let mut it = args.iter();
    while let Some(arg) = it.next() {
        match arg.as_str() {
            "--runs" => {
                let n = it.next().context("--runs needs a number")?;
                runs = n
                    .parse()
                    .with_context(|| format!("--runs: `{n}` is not a number"))?;
                if runs == 0 {
                    bail!("--runs must be at least 1");
                }
            }
            other if file.is_none() => file = Some(other.to_owned()),
            other => bail!("unexpected argument `{other}`; usage: {usage}"),
        }
    }
    Ok((file, runs))
}

/// The number an option `what` takes, the next of `args`: the benches' `--runs 3`.
pub(crate) fn number_arg(
    args: &mut std::slice::Iter<'_, String>,
    what: &str,
) -> anyhow::Result<f64> {
    use anyhow::Context as _;
    let v = args
        .next()
        .with_context(|| format!("{what} needs a number"))?;
    v.parse()
        .with_context(|| format!("{what}: `{v}` is not a number"))
}

fn main() {
    if let Err(e) = run() {
        eprintln!("xtask: {e:#}");
        std::process::exit(1);
    }
}

fn run() -> Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let Some((task, rest)) = args.split_first() else {
        println!("{USAGE}");
        return Ok(());
    };
    match task.as_str() {
        "stripped-coverage" => coverage::run(rest),
        "open-time" => timing::run(rest),
        "bench-analysis" => bench::run(rest),
        "bench-static" => bench_static::run(rest),
        "bench-live" => bench_live::run(rest),
        "bench-loop-timer" => bench_loop_timer::run(rest),
        "bench-loops" => bench_loops::run(rest),
        "bench-stall" => bench_stall::run(rest),
        "bench-consult" => bench_consult::run(rest),
        "bench-stops" => bench_stops::run(rest),
        "stress-attach" => bench_attached::stress(rest),
        "soak-redis" => soak_redis::run(rest),
        "bench-attached" => bench_attached::run(rest),
        "bench-measure" => bench_measure::run(rest),
        "bench-coverage" => bench_coverage::run(rest),
        "bench-save-scale" => bench_save_scale::run(rest),
        "whole-program" => whole_program::run(rest),
        "check-switches" => switches::run(rest),
        "ground-truth" => ground_truth::run(rest),
        "ground-truth-crates" => ground_truth_crates::run(rest),
        "grade" => ground_truth::grade_files(rest),
        "mem-attached" => mem_attached::run(rest),
        // Run by bench-analysis, once per measured run, so each has its own peak RSS.
        "bench-analysis-child" => bench::child(rest),
        "help" | "--help" | "-h" => {
            println!("{USAGE}");
            Ok(())
        }
        other => bail!("unknown task `{other}`\n{USAGE}"),
    }
}
