//! Stack samples: where in the code each thread's time goes, without probes — the search's
//! "where" axis below the thread, and the Deep Start priorities of its refinements.
//!
//! A [`StackSource`] (the shell's, over the process tracer and the engine's unwinder) stops
//! each thread in turn, reads its registers, walks its stack and lets it run again before the
//! next; it reports each thread's frames by name and the system call it was in, if any. A
//! thread asleep in a system call is not stopped when the source can walk it from what `/proc`
//! shows, or when it has not run since its last sample, which then comes again; either is
//! held for no time ([`ThreadStack::taken`]) and counts as any sample does.
//! [`sample_stacks`] calls it at the pace the cost limit allows: what the stops cost the
//! program, measured by turns with and without them ([`StopTurns`]), and what the probes took,
//! within that share of its running. [`Stacks`] keeps the samples, each reduced to its *path* — the frames from
//! the thread's own entry inward (its start-up plumbing in the C library left out), through
//! the program and the libraries it brings (a Python interpreter's `libpython`), and cut
//! after the first call into the C runtime ([`runtime`]: how `write` or `pthread_mutex_lock`
//! does its work is not where the program's time goes) — with the activity its system call
//! means ([`super::sample::classify`]).
//!
//! A focus below a thread is a call path: `Function` resources, outermost first, each called
//! directly by the one before (a `Module` resource names the module of the function after it
//! where that changes). A sample is *at* the focus when its path starts with those functions:
//! a function's time includes its callees', as Paradyn's is. A function focus is refined to
//! the callees its samples show next, and, for waits, to the descriptor or lock they wait on
//! (a `poll`, `select` or `epoll_wait` on several descriptors to one [`Resource::Wait`] naming
//! them all).
//!
//! A function reached through several call paths (iPath's case: a helper called from many
//! places) is not followed down any one chain: its time would be split among them, each part
//! perhaps under the threshold. A thread (or a function above the paths) is refined to it as a
//! [`Resource::Code`] focus, all
//! its samples wherever it was called from, and that focus to the call paths reaching it
//! ([`Resource::CallPath`]), each with its share, so the search tells which path is hot.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use super::pace::AIM;
use super::sample::{classify, Activity, Meter};
use super::{Focus, Hypothesis, Resource, WaitSet, Watched};

/// One frame of a sampled stack.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct FrameName {
    /// The module's name (`libc.so.6`); empty where no module holds the pc.
    pub module: String,
    /// The function's name, or the address where no function is known.
    pub function: String,
    /// True for the program's own executable.
    pub main: bool,
}

/// The system call a thread was in when stopped.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Syscall {
    /// The system call's number (`orig_rax`).
    pub nr: u64,
    /// The first three arguments (a descriptor or a futex's address; a byte count third).
    pub args: [u64; 3],
    /// The thread was asleep in the call: the stop interrupted it there (it returned a
    /// restart code or `EINTR`), or the thread was seen asleep in it without a stop.
    /// Otherwise the stop came as the call returned, after running in the kernel.
    pub asleep: bool,
}

/// One thread's stack at one stop.
#[derive(Clone, Debug, PartialEq)]
pub struct ThreadStack {
    /// The thread's id.
    pub tid: i32,
    /// The system call it was in, if any.
    pub syscall: Option<Syscall>,
    /// The symbol a futex address lies in (`big_lock`, `queue+8`), when the source knows it.
    pub lock_name: Option<String>,
    /// Innermost first, as the unwinder finds them.
    pub frames: Vec<FrameName>,
    /// Each frame's address inside its function (a caller's is within its call instruction),
    /// innermost first; empty when the source does not say.
    pub pcs: Vec<u64>,
    /// How long the thread was held in its stop: from when it stopped (when the stop was
    /// asked for, later by what the thread then waited for a CPU before it could stop) to its
    /// resume. A thread not on a CPU at the ask waits for one to stop, and after the resume
    /// to run again, which its `schedstat` counts as waiting, not as stopped. Zero for a
    /// thread not stopped ([`ThreadStack::taken`]).
    pub held: Duration,
    /// How the sample was taken: in a stop, from `/proc` while the thread slept in a call, or
    /// given again (the thread had not run since its last sample).
    pub taken: Taken,
}

/// How a thread's sample was taken ([`ThreadStack::taken`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Taken {
    /// The thread was stopped, its registers read.
    Stopped,
    /// Not stopped: asleep in a system call, walked from what `/proc` shows of it there.
    Asleep,
    /// Not stopped: it had not run since its last sample, given again.
    Again,
}

/// Every thread's stack at one stop, and how long the process was stopped for it.
#[derive(Clone, Debug)]
pub struct Batch {
    /// How long the batch held the program: the longest any of its threads was held
    /// ([`ThreadStack::held`]; each is held alone, the others running), whether or not its
    /// stack is in the batch.
    pub stopped: Duration,
    /// One stack per thread.
    pub threads: Vec<ThreadStack>,
}

/// What stops a process's threads and walks their stacks.
pub trait StackSource {
    /// One batch; `Ok(None)` when the process is not running now (nothing was stopped).
    fn sample(&mut self) -> Result<Option<Batch>, String>;
}

/// One thread's sample, reduced.
#[derive(Clone, Debug)]
struct Sample {
    at: Instant,
    tid: i32,
    activity: Activity,
    /// On a CPU: in the program's code or running a system call in the kernel, not asleep.
    on_cpu: bool,
    /// Bytes asked of a read or write call.
    bytes: Option<u64>,
    /// A futex wait's address and name.
    lock: Option<(u64, Option<String>)>,
    /// The descriptors a wait on several (poll, select, epoll) waits on.
    waited: Vec<i32>,
    /// Which such wait it is, for those calls.
    wait_on: Option<WaitOn>,
    path: Vec<Arc<FrameName>>,
    /// Each path frame's address inside its function (0 where unknown).
    sites: Vec<u64>,
}

/// Everything sampled so far, shared between [`sample_stacks`] and the lab reading it.
#[derive(Debug)]
pub struct Stacks {
    pid: i32,
    samples: Vec<Sample>,
    started: Instant,
    /// Time the process spent stopped for samples: at each stop, the mean over its threads
    /// of the time each was held (the longest, [`Batch::stopped`], when it names none).
    stopped: Duration,
    /// Each thread's time held in stops so far ([`ThreadStack::held`]).
    held: BTreeMap<i32, Duration>,
    batches: u64,
    /// Thread samples given again without stopping their thread ([`Taken::Again`]).
    reused: u64,
    /// Thread samples walked without stopping their thread, asleep in a call
    /// ([`Taken::Asleep`]).
    asleep: u64,
    error: Option<String>,
    /// Interned frames: a path shares them.
    names: BTreeMap<(String, String), Arc<FrameName>>,
    /// Each thread's last system call other than `restart_syscall`.
    last_call: BTreeMap<i32, Syscall>,
    /// Frames sampled so far that no module held (code the sampler was not told of: a
    /// library loaded since it began).
    unnamed: u64,
    /// Each sampled thread's scheduler counts after the last batch it was in.
    sched: BTreeMap<i32, SchedMark>,
    /// The time the stops took from the threads' running: see [`imposed`].
    lost: Duration,
    /// The CPU time the sampled threads used between their batches.
    used: Duration,
    /// The running time the search's probes have taken from the program so far: the stops
    /// share one budget with them ([`sample_stacks`]).
    probes_spent: Duration,
    /// What gsh's own CPU time has taken from the program by competing for the CPUs
    /// ([`super::sample::Competition::took`]), as the sampler last measured it: the stops'
    /// pacing counts it ([`stops_cost`]).
    competed: Duration,
    /// The program's CPU time per wall second with the sampler quiet and while it samples,
    /// by turns ([`sample_stacks`]): what the stops cost beyond the time they hold.
    turns: StopTurns,
    /// What reads the descriptors a thread waits on in `poll`, `select` or `epoll_wait`
    /// ([`Stacks::reading_waits`]); none read without it.
    waits: Option<WaitReader>,
    /// What tells what those descriptors are ([`Stacks::describing`]).
    describe: Option<Describer>,
}

/// Reads the descriptors a thread of process `pid` asleep in system call `nr` with arguments
/// `args` waits on (the caller's: the search knows programs only through what it is given;
/// `instrument` gives `process::waits::waited`).
pub type WaitReader = fn(pid: i32, nr: u64, args: [u64; 3]) -> Vec<i32>;

/// Tells what each of descriptors `fds` of process `pid` is, in their order (`instrument`
/// gives `process::fds::describe`'s answer): a wait on several is named by them.
pub type Describer = fn(pid: i32, fds: &[i32]) -> Vec<Watched>;

/// Which wait on several descriptors a sample is in: the call (its kin folded in: `ppoll` is
/// `poll`) and, for `epoll_wait`, the epoll instance. Samples in one are one wait, whatever
/// descriptors each showed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
struct WaitOn {
    call: &'static str,
    epfd: Option<i32>,
}

impl WaitOn {
    /// The wait system call `nr` with first argument `arg0` is, if it waits on several
    /// descriptors.
    fn of(nr: u64, arg0: u64) -> Option<WaitOn> {
        let (call, epfd) = match nr {
            // poll, ppoll
            7 | 271 => ("poll", None),
            // select, pselect6
            23 | 270 => ("select", None),
            // epoll_wait, epoll_pwait, epoll_pwait2
            232 | 281 | 441 => ("epoll_wait", Some(arg0 as i32)),
            _ => return None,
        };
        Some(WaitOn { call, epfd })
    }
}

/// The program's CPU time over wall time in the sampler's quiet turns and in its sampling
/// turns. A stopped thread gives its CPU to whatever else is runnable, and after its resume
/// waits for one again: on a machine shared with another busy program, one computing thread
/// sampled 90 times a second ran 6% less of the wall time than its twin, while it was held
/// 1.2% of it and [`imposed`] (which counts the time waited for a CPU as given back) said
/// 0.01% (`xtask bench-consult`, `bench-stops`). The turns measure that loss instead.
///
/// And the program's read and write calls over wall time (`/proc/PID/io`'s `syscr` and
/// `syscw`), where it makes enough of them to tell ([`MIN_CALLS`] in a quiet turn): a
/// server's stops cost it more of its work than of its CPU time. redis-server under
/// `redis-benchmark` answered 1.1% to 2.5% fewer requests during a search of stops alone, while
/// its CPU time per wall second fell 0.05% to 0.75% (it is not busy all the time: what a stop
/// delays, the clients wait for). The loss counted is the larger of the two.
///
/// A sampling turn and the quiet turn after it are a cycle, compared with each other, so that
/// a load that comes and goes weighs on both. Under such a load one quiet quarter second ran
/// 0.43 of a CPU and the sampling turn before it 0.88: the loss counted is what the cycles
/// agree on, their mean less twice its standard error, and nothing until [`MIN_CYCLES`]
/// cycles after the first (the search's start, its attach and first probes, slows the program
/// by itself: its first sampling turn ran 0.1 to 0.2 of a CPU where the quiet one ran 0.4 to 0.6).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct StopTurns {
    /// The sampling turn not yet followed by a quiet one: its wall time, what the program did
    /// and the time its stops held the process ([`Batch::stopped`], summed).
    open: Option<(Duration, Work, Duration)>,
    /// The cycles so far, the first one dropped.
    cycles: Vec<Cycle>,
    /// Whether the first cycle was dropped yet.
    started: bool,
}

/// What the program did in a turn ([`StopTurns`]): its threads' CPU nanoseconds, and its read
/// and write calls where they were counted.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Work {
    /// Its threads' CPU nanoseconds.
    pub run: u64,
    /// Its read and write calls; `None` where `/proc` did not count them.
    pub calls: Option<u64>,
}

impl Work {
    /// This turn's work and the next's, as one turn's.
    fn and(self, next: Work) -> Work {
        Work {
            run: self.run + next.run,
            calls: self.calls.zip(next.calls).map(|(a, b)| a + b),
        }
    }
}

/// A sampling turn and the quiet turn after it ([`StopTurns`]).
#[derive(Clone, Copy, Debug, PartialEq)]
struct Cycle {
    sampled: Duration,
    sampled_work: Work,
    held: Duration,
    quiet: Duration,
    quiet_work: Work,
}

impl Cycle {
    /// The program's CPU rate in the quiet turn and in the sampling turn.
    fn rates(&self) -> (f64, f64) {
        (
            self.quiet_work.run as f64 / 1e9 / self.quiet.as_secs_f64().max(1e-9),
            self.sampled_work.run as f64 / 1e9 / self.sampled.as_secs_f64().max(1e-9),
        )
    }

    /// The share of its running the sampling turn lost against the quiet one's rate.
    fn run_share(&self) -> f64 {
        match self.rates() {
            (q, s) if q > 0.0 => (q - s) / q,
            _ => 0.0,
        }
    }

    /// The share of its read and write calls the sampling turn lost against the quiet one's
    /// rate; `None` where they were not counted, or too few to tell.
    fn calls_share(&self) -> Option<f64> {
        let quiet = self.quiet_work.calls.filter(|n| *n >= MIN_CALLS)?;
        let q = quiet as f64 / self.quiet.as_secs_f64().max(1e-9);
        let s = self.sampled_work.calls? as f64 / self.sampled.as_secs_f64().max(1e-9);
        Some((q - s) / q)
    }
}

/// The cycles the turns need, after the first, before they tell anything.
const MIN_CYCLES: usize = 3;

/// The fewest read and write calls in a quiet turn for the cycle to tell by them: 400 a
/// second, a tenth of a turn's count then more than Poisson noise.
const MIN_CALLS: u64 = 100;

/// What `cycles`, each its sampling turn's seconds and its share, agree on: their mean (each
/// weighing as long as its sampling turn lasted) less twice its standard error, at least 0;
/// `None` for fewer than [`MIN_CYCLES`].
fn agreed(cycles: &[(f64, f64)]) -> Option<f64> {
    let n = cycles.len();
    if n < MIN_CYCLES {
        return None;
    }
    let wall: f64 = cycles.iter().map(|(w, _)| w).sum();
    let mean = cycles.iter().map(|(w, x)| w * x).sum::<f64>() / wall.max(1e-9);
    let var = cycles.iter().map(|(_, x)| (x - mean).powi(2)).sum::<f64>() / (n - 1) as f64;
    let se = (var / n as f64).sqrt();
    Some((mean - 2.0 * se).max(0.0))
}

impl StopTurns {
    /// Adds a turn of `wall` in which the program did `work`, quiet (no stop) or sampling
    /// with stops that held it `held`.
    pub fn add(&mut self, quiet: bool, wall: Duration, work: Work, held: Duration) {
        if !quiet {
            self.open = Some(match self.open {
                Some((w, done, h)) => (w + wall, done.and(work), h + held),
                None => (wall, work, held),
            });
            return;
        }
        let Some((sampled, sampled_work, held)) = self.open.take() else {
            return;
        };
        if !std::mem::replace(&mut self.started, true) {
            return;
        }
        self.cycles.push(Cycle {
            sampled,
            sampled_work,
            held,
            quiet: wall,
            quiet_work: work,
        });
    }

    /// The cycles counted so far.
    pub fn cycles(&self) -> usize {
        self.cycles.len()
    }

    /// The share of the running the sampling turns lost against the quiet ones, as the cycles
    /// agree on it ([`agreed`]): of their CPU time, or of their read and write calls where
    /// enough cycles counted them, whichever is more. With the sampling turns' wall time and
    /// the time their stops held the process; `None` before [`MIN_CYCLES`]. Nothing is lost
    /// when the program ran as much or more while sampled (under a heavy load the scheduler
    /// favours a thread often stopped and woken).
    fn share(&self) -> Option<(f64, Duration, Duration)> {
        let weighed = |c: &Cycle, x: f64| (c.sampled.as_secs_f64(), x);
        let run: Vec<(f64, f64)> = self
            .cycles
            .iter()
            .map(|c| weighed(c, c.run_share()))
            .collect();
        let calls: Vec<(f64, f64)> = self
            .cycles
            .iter()
            .filter_map(|c| Some(weighed(c, c.calls_share()?)))
            .collect();
        let share = agreed(&run)?.max(agreed(&calls).unwrap_or(0.0));
        let wall: Duration = self.cycles.iter().map(|c| c.sampled).sum();
        let held: Duration = self.cycles.iter().map(|c| c.held).sum();
        Some((share, wall, held))
    }

    /// The running time the sampling turns lost against the quiet ones' rate ([`share`]).
    ///
    /// [`share`]: StopTurns::share
    pub fn lost(&self) -> Option<Duration> {
        let (share, _, _) = self.share()?;
        let would: f64 = self
            .cycles
            .iter()
            .map(|c| c.rates().0 * c.sampled.as_secs_f64())
            .sum();
        Some(Duration::from_secs_f64(share * would))
    }

    /// What a second the stops hold the process costs the program, in seconds of the running
    /// it would have done without them, as a share of that running: the share of the running
    /// the sampling turns lost against the quiet ones, over the share of their wall time the
    /// stops held it. Never under 1, the held time alone (where the program lost nothing),
    /// and at most [`MAX_WEIGHT`]; [`PRIOR_WEIGHT`] before the turns can tell.
    pub fn weight(&self) -> f64 {
        let Some((share, wall, held)) = self.share() else {
            return PRIOR_WEIGHT;
        };
        if held.is_zero() {
            return 1.0;
        }
        (share / (held.as_secs_f64() / wall.as_secs_f64())).clamp(1.0, MAX_WEIGHT)
    }
}

/// The most a held second is taken to cost ([`StopTurns::weight`]): one computing thread
/// beside a busy twin lost 5 times the share it was held, python3's threads up to 40 times.
const MAX_WEIGHT: f64 = 50.0;

/// What a held second is taken to cost before the turns can tell: about what it cost one
/// computing thread beside a busy twin. Paced by held time alone until then, a search under
/// load spent its whole limit in its first seconds (the turns then read 20 a held second).
const PRIOR_WEIGHT: f64 = 5.0;

/// A thread's `schedstat` read after a batch, with its time held in stops by then.
#[derive(Clone, Copy, Debug)]
struct SchedMark {
    at: Instant,
    run: u64,
    wait: u64,
    held: Duration,
}

/// The running time a thread lost to `stopped` of stops in an interval in which it was not
/// stopped for `free`, ran `run` and waited for a CPU `wait` (the last two from its
/// `schedstat`). Stopped, it would have run at the rate it ran while free; but a thread that
/// waits for a CPU gets its time back: the CPU it leaves goes to a thread it waits behind,
/// and the scheduler's fairness lets it run ahead of that one afterwards, so what it would
/// have waited is what it gives up first. A thread asleep loses nothing; one computing on a
/// CPU of its own loses the whole stop.
pub fn imposed(stopped: Duration, free: Duration, run: Duration, wait: Duration) -> Duration {
    if free.is_zero() {
        return Duration::ZERO;
    }
    let rate = (run.as_secs_f64() / free.as_secs_f64()).min(1.0);
    stopped.mul_f64(rate).saturating_sub(wait)
}

/// What the stops between two marks of one thread took from its running ([`imposed`]), and
/// the CPU time it used meanwhile: the interval less the time it was held is its free time,
/// over which its `schedstat` says how much it ran and waited for a CPU.
fn charge(prev: &SchedMark, now: &SchedMark) -> (Duration, Duration) {
    let held = now.held.saturating_sub(prev.held);
    let free = now
        .at
        .saturating_duration_since(prev.at)
        .saturating_sub(held);
    let ran = Duration::from_nanos(now.run.saturating_sub(prev.run));
    let waited = Duration::from_nanos(now.wait.saturating_sub(prev.wait));
    (imposed(held, free, ran, waited), ran)
}

/// The shortest pause between two stops, however cheap a stop is: 100 per second.
const MIN_PERIOD: Duration = Duration::from_millis(10);

/// The most callees one refinement proposes.
const MAX_CHILDREN: usize = 8;

/// True for a frame of the C runtime and its kin, whose work is done for the program rather
/// than being its own: the C library, the dynamic loader, libm, libpthread, libdl, librt,
/// libgcc_s, libstdc++ (its thread entry and allocator; the algorithms are templates,
/// compiled into their callers), gsh's own runtime, and code in no file (the vDSO).
pub fn runtime(f: &FrameName) -> bool {
    const RUNTIME: [&str; 12] = [
        "libc.so",
        "libc-",
        "ld-linux",
        "ld64.so",
        "libm.so",
        "libm-",
        "libpthread",
        "libdl",
        "librt",
        "libgcc_s",
        "libstdc++",
        "libgsh_rt",
    ];
    f.module.is_empty() || RUNTIME.iter().any(|r| f.module.starts_with(r))
}

/// The path of a stack given innermost first: from the thread's entry inward, through the
/// program and its libraries, cut after the first frame of the C runtime ([`runtime`]). The
/// entry is the first frame outside the runtime called from inside it (`main` from
/// `__libc_start_call_main`, a thread function from `start_thread`), or the outermost frame.
/// Indexes into `frames`, outermost first.
fn path_of(frames: &[FrameName]) -> Vec<usize> {
    let outer_first: Vec<usize> = (0..frames.len()).rev().collect();
    let any_user = frames.iter().any(|f| !runtime(f));
    let user = |i: usize| !runtime(&frames[i]) || !any_user;
    let entry = (1..outer_first.len())
        .find(|&i| user(outer_first[i]) && !user(outer_first[i - 1]))
        .unwrap_or(0);
    let mut out = Vec::new();
    for &i in &outer_first[entry..] {
        out.push(i);
        if !user(i) {
            break;
        }
    }
    out
}

/// True when an activation of a call path's last function, whose return addresses return
/// into `callers` (innermost first), was reached along `path` (the functions from the thread's
/// entry, caller first, ending in that function) as the stack samples name paths
/// ([`path_of`]): its callers, innermost first, are the path's, and what called the path's
/// entry, if anything, is the C runtime. With `complete` false (the walk stopped at its depth
/// limit, not at the stack's end) the callers it holds need only agree with the path.
pub fn on_path(callers: &[FrameName], path: &[String], complete: bool) -> bool {
    let Some((_, above)) = path.split_last() else {
        return false;
    };
    let agree = callers
        .iter()
        .zip(above.iter().rev())
        .all(|(f, p)| f.function == *p);
    if callers.len() < above.len() {
        return agree && !complete;
    }
    agree && callers.get(above.len()).is_none_or(runtime)
}

impl Stacks {
    /// An empty store for process `pid` (whose descriptors name the files waited on).
    pub fn new(pid: i32) -> Stacks {
        Stacks {
            pid,
            samples: Vec::new(),
            started: Instant::now(),
            stopped: Duration::ZERO,
            held: BTreeMap::new(),
            batches: 0,
            reused: 0,
            asleep: 0,
            error: None,
            names: BTreeMap::new(),
            last_call: BTreeMap::new(),
            unnamed: 0,
            sched: BTreeMap::new(),
            lost: Duration::ZERO,
            used: Duration::ZERO,
            probes_spent: Duration::ZERO,
            competed: Duration::ZERO,
            turns: StopTurns::default(),
            waits: None,
            describe: None,
        }
    }

    /// Reads the `schedstat` of each thread of a batch just taken, once the process runs
    /// again, and adds what the stops since its last batch took from it ([`imposed`]): the
    /// time that thread was held, not the time the process took to stop (which for a thread
    /// waiting for a CPU is mostly that waiting, its `schedstat` counts it and the scheduler
    /// gives it back).
    fn account(&mut self, tids: &[i32]) {
        let now = Instant::now();
        for &tid in tids {
            let Some((run, wait)) = super::sample::schedstat(self.pid, tid) else {
                continue;
            };
            let mark = SchedMark {
                at: now,
                run,
                wait,
                held: self.held.get(&tid).copied().unwrap_or_default(),
            };
            let Some(prev) = self.sched.insert(tid, mark) else {
                continue;
            };
            let (lost, ran) = charge(&prev, &mark);
            self.lost += lost;
            self.used += ran;
        }
    }

    /// The running time the stops took from the sampled threads, and the CPU time they used
    /// meanwhile (both over the intervals between each thread's batches).
    ///
    /// What the stops took is what the turns measured where they can tell ([`StopTurns`]), and
    /// never less than what the threads were held for, as [`imposed`] counts it.
    pub fn cost(&self) -> (Duration, Duration) {
        let lost = self.turns.lost().map_or(self.lost, |m| m.max(self.lost));
        (lost, self.used)
    }

    /// The running time the stops took from the sampled threads by holding them alone
    /// ([`imposed`], summed over the intervals between each thread's batches).
    pub fn imposed(&self) -> Duration {
        self.lost
    }

    /// Adds a turn of `wall` in which the program did `work`, quiet (no stop) or sampling
    /// with stops that held it `held`.
    pub fn turn(&mut self, quiet: bool, wall: Duration, work: Work, held: Duration) {
        self.turns.add(quiet, wall, work, held);
    }

    /// This store, reading with `reader` the descriptors a sampled thread waits on in `poll`,
    /// `select` or `epoll_wait`, as it sleeps on after the stop.
    pub fn reading_waits(mut self, reader: WaitReader) -> Stacks {
        self.waits = Some(reader);
        self
    }

    /// This store, telling with `describe` what the descriptors a wait on several waits on
    /// are, when it names the wait ([`Stacks::refine`]). Without it they are named by number.
    pub fn describing(mut self, describe: Describer) -> Stacks {
        self.describe = Some(describe);
        self
    }

    /// The wait `on`, on descriptors `fds` (ascending), each named by what it is.
    fn wait_set(&self, on: WaitOn, fds: &[i32]) -> WaitSet {
        let mut named = self.describe.map(|d| d(self.pid, fds)).unwrap_or_default();
        if named.len() != fds.len() {
            named = fds
                .iter()
                .map(|&fd| Watched {
                    fd,
                    kind: "fd".into(),
                    at: String::new(),
                    what: format!("fd {fd}"),
                })
                .collect();
        }
        WaitSet {
            call: on.call.into(),
            epfd: on.epfd,
            fds: named,
        }
    }

    /// What the stops cost per second they hold the process, as a share of its running
    /// ([`StopTurns::weight`]): the sampler paces them by it.
    pub fn stop_weight(&self) -> f64 {
        self.turns.weight()
    }

    /// Tells the sampler what the search's probes have taken from the program so far: the
    /// stops leave it to them ([`sample_stacks`]).
    pub fn set_probes_spent(&mut self, spent: Duration) {
        self.probes_spent = spent;
    }

    /// Adds one batch taken at `at`.
    pub fn push(&mut self, at: Instant, batch: Batch) {
        self.stopped += match batch.threads.len() {
            0 => batch.stopped,
            n => batch.threads.iter().map(|t| t.held).sum::<Duration>() / n as u32,
        };
        self.batches += 1;
        let taken = |how| batch.threads.iter().filter(|t| t.taken == how).count() as u64;
        self.reused += taken(Taken::Again);
        self.asleep += taken(Taken::Asleep);
        for t in &batch.threads {
            *self.held.entry(t.tid).or_default() += t.held;
        }
        let tids: Vec<i32> = batch.threads.iter().map(|t| t.tid).collect();
        self.account(&tids);
        for mut t in batch.threads {
            self.unnamed += t.frames.iter().filter(|f| f.module.is_empty()).count() as u64;
            // A stop interrupts a sleeping call; the kernel resumes a poll, a sleep or a timed
            // futex wait as `restart_syscall`, which is still the call the thread was in.
            match t.syscall {
                Some(s) if s.nr == RESTART_SYSCALL => {
                    t.syscall = self.last_call.get(&t.tid).copied();
                }
                Some(s) => {
                    self.last_call.insert(t.tid, s);
                }
                None => {}
            }
            let on_cpu = t.syscall.is_none_or(|s| !s.asleep);
            let activity = match t.syscall {
                Some(s) => classify(self.pid, s.nr, [s.args[0], s.args[1]]),
                None => Activity::Running,
            };
            let bytes = t.syscall.and_then(|s| {
                matches!(activity, Activity::Blocked { fd: Some(_), .. }).then_some(s.args[2])
            });
            let lock = t
                .syscall
                .filter(|_| {
                    matches!(
                        activity,
                        Activity::Blocked {
                            hypothesis: Hypothesis::SyncWait,
                            ..
                        }
                    )
                })
                .filter(|s| s.nr == FUTEX)
                .map(|s| (s.args[0], t.lock_name.clone()));
            // Read as the thread sleeps on in the call, after the stop.
            let wait_on = match (&activity, t.syscall) {
                (
                    Activity::Blocked {
                        hypothesis: Hypothesis::ExternalWait,
                        fd: None,
                        ..
                    },
                    Some(s),
                ) => WaitOn::of(s.nr, s.args[0]),
                _ => None,
            };
            let waited = match (&activity, t.syscall) {
                (
                    Activity::Blocked {
                        hypothesis: Hypothesis::ExternalWait,
                        fd: None,
                        ..
                    },
                    Some(s),
                ) => self
                    .waits
                    .map_or_else(Vec::new, |read| read(self.pid, s.nr, s.args)),
                _ => Vec::new(),
            };
            let indexes = path_of(&t.frames);
            let sites = indexes
                .iter()
                .map(|&i| t.pcs.get(i).copied().unwrap_or(0))
                .collect();
            let path = indexes
                .into_iter()
                .map(|i| &t.frames[i])
                .map(|f| {
                    self.names
                        .entry((f.module.clone(), f.function.clone()))
                        .or_insert_with(|| Arc::new(f.clone()))
                        .clone()
                })
                .collect();
            self.samples.push(Sample {
                at,
                tid: t.tid,
                activity,
                on_cpu,
                bytes,
                lock,
                waited,
                wait_on,
                path,
                sites,
            });
        }
    }

    /// Every distinct frame sampled so far.
    pub fn frames(&self) -> impl Iterator<Item = &FrameName> {
        self.names.values().map(|f| &**f)
    }

    /// How many frames sampled so far lay in no module the sampler knew.
    pub fn unnamed(&self) -> u64 {
        self.unnamed
    }

    /// Records why sampling could not go on.
    pub fn fail(&mut self, why: String) {
        self.error = Some(why);
    }

    /// Why sampling stopped, if it did.
    pub fn error(&self) -> Option<&str> {
        self.error.as_deref()
    }

    /// Stops taken so far.
    pub fn batches(&self) -> u64 {
        self.batches
    }

    /// Thread samples so far given again without stopping their thread, which had not run
    /// since its last sample ([`Taken::Again`]).
    pub fn reused(&self) -> u64 {
        self.reused
    }

    /// Thread samples so far walked without stopping their thread, asleep in a system call
    /// ([`Taken::Asleep`]).
    pub fn asleep(&self) -> u64 {
        self.asleep
    }

    /// The time the process spent stopped for samples: at each stop, the mean over its
    /// threads of the time each was held. (The sampler's pace counts each stop's longest.)
    pub fn stopped(&self) -> Duration {
        self.stopped
    }

    /// The fraction of the wall time since sampling began that the process spent stopped.
    pub fn stopped_fraction(&self) -> f64 {
        self.stopped.as_secs_f64() / self.started.elapsed().as_secs_f64().max(1e-9)
    }

    /// The samples of thread `tid` taken since `since`.
    fn window(&self, tid: i32, since: Instant) -> impl Iterator<Item = &Sample> {
        let first = self.samples.partition_point(|s| s.at < since);
        self.samples[first..].iter().filter(move |s| s.tid == tid)
    }

    /// How many samples of `tid` were taken since `since`.
    pub fn count(&self, tid: i32, since: Instant) -> usize {
        self.window(tid, since).count()
    }

    /// The fraction of thread `tid`'s samples since `since` in which hypothesis `h` held at
    /// the innermost part of `focus` (the path below the thread, and a file or lock). For
    /// [`Hypothesis::CPUBound`] and [`Hypothesis::RunQueue`], which the scheduler measures
    /// per thread, it is the share of the thread's running samples at the focus. `None`
    /// before `min` samples.
    pub fn fraction(
        &self,
        h: Hypothesis,
        focus: &Focus,
        tid: i32,
        since: Instant,
        min: usize,
    ) -> Option<f64> {
        self.fraction_where(h, focus, tid, since, min, |_| true)
    }

    /// [`Stacks::fraction`] for [`Hypothesis::SyncWait`], counting only the waits to take a
    /// lock ([`takes_lock`]): a thread `/proc` found parked in one futex wait (its wait taken
    /// for a pool thread's, slowing nothing) may be a waiter kept from a lock its holders
    /// keep taking, the worst of contention. At a load of 15 on 2 CPUs two of `planted
    /// lock`'s three lockers ran under 1% of a second-long window, asleep for `hot_lock`:
    /// read as parked at 0, they were judged false, and the search named no lock in 3 of 10.
    pub fn lock_fraction(
        &self,
        focus: &Focus,
        tid: i32,
        since: Instant,
        min: usize,
    ) -> Option<f64> {
        self.fraction_where(Hypothesis::SyncWait, focus, tid, since, min, takes_lock)
    }

    /// [`Stacks::fraction`], counting as hits only the samples `keep` accepts.
    fn fraction_where(
        &self,
        h: Hypothesis,
        focus: &Focus,
        tid: i32,
        since: Instant,
        min: usize,
        keep: impl Fn(&Sample) -> bool,
    ) -> Option<f64> {
        let (select, leaf) = split(focus);
        let (mut all, mut hit) = (0usize, 0usize);
        for s in self.window(tid, since) {
            if matches!(h, Hypothesis::CPUBound | Hypothesis::RunQueue) && !s.on_cpu {
                continue;
            }
            all += 1;
            if holds(h, s) && keep(s) && select.matches(s) && leaf.as_ref().is_none_or(|r| on(s, r))
            {
                hit += 1;
            }
        }
        (self.count(tid, since) >= min).then(|| {
            if all == 0 {
                0.0
            } else {
                hit as f64 / all as f64
            }
        })
    }

    /// The addresses in the last function of `focus`'s call path at which thread `tid`'s
    /// samples since `since` show it calling `callee`, where `h` held (distinct; unknown ones
    /// left out).
    pub fn call_sites(
        &self,
        h: Hypothesis,
        focus: &Focus,
        tid: i32,
        since: Instant,
        callee: &str,
    ) -> Vec<u64> {
        let Some(path) = focus.call_path() else {
            return Vec::new();
        };
        let Some(last) = path.len().checked_sub(1) else {
            return Vec::new();
        };
        let mut out: Vec<u64> = self
            .window(tid, since)
            .filter(|s| holds(h, s) && at(s, &path))
            .filter(|s| s.path.get(path.len()).is_some_and(|f| f.function == callee))
            .filter_map(|s| s.sites.get(last).copied().filter(|&a| a != 0))
            .collect();
        out.sort_unstable();
        out.dedup();
        out
    }

    /// What the samples of `tid` since `since` show one level below the call path
    /// `functions` for `h`.
    /// `skip`'s functions are left out of the callees (they are tested on their own).
    fn level(
        &self,
        h: Hypothesis,
        functions: &[&str],
        tid: i32,
        since: Instant,
        skip: &BTreeMap<Arc<FrameName>, f64>,
    ) -> Level {
        let mut lv = Level::default();
        // Each wait on several descriptors: its samples, and every descriptor they showed.
        let mut waits: BTreeMap<WaitOn, (usize, std::collections::BTreeSet<i32>)> = BTreeMap::new();
        for s in self.window(tid, since) {
            if matches!(h, Hypothesis::CPUBound | Hypothesis::RunQueue) && !s.on_cpu {
                continue;
            }
            lv.all += 1;
            if !holds(h, s) || !at(s, functions) {
                continue;
            }
            lv.matched += 1;
            // A path ends at its first call into the C runtime: that call is a leaf.
            if let Some(next) = s.path.get(functions.len()) {
                *lv.callees.entry(next.clone()).or_default() += 1;
            }
            match (&s.activity, &s.lock) {
                (Activity::Blocked { fd: Some(fd), .. }, _) => {
                    *lv.leaves.entry(LeafKey::File(*fd)).or_default() += 1
                }
                (_, Some((addr, name))) if h == Hypothesis::SyncWait => {
                    *lv.leaves
                        .entry(LeafKey::Lock(*addr, name.clone()))
                        .or_default() += 1
                }
                // A wait on several descriptors is one wait, named once below.
                _ => {
                    if let Some(on) = s.wait_on {
                        let (n, fds) = waits.entry(on).or_default();
                        *n += 1;
                        fds.extend(&s.waited);
                    }
                }
            }
        }
        // A wait on one descriptor throughout is a wait on that descriptor, as a read on it
        // is; one on several is one leaf naming them all (a server's epoll_wait watching each
        // client was a leaf for each, all with the same share: eight findings for one wait).
        for (on, (n, fds)) in waits {
            let fds: Vec<i32> = fds.into_iter().collect();
            let key = match fds[..] {
                [] => continue,
                [fd] => LeafKey::File(fd),
                _ => LeafKey::Wait(on, fds),
            };
            *lv.leaves.entry(key).or_default() += n;
        }
        // A wait is named below the call that waits (the last of its path), not beside the
        // callers above it; time on a CPU waits on nothing.
        if !lv.callees.is_empty() || matches!(h, Hypothesis::CPUBound | Hypothesis::RunQueue) {
            lv.leaves.clear();
        }
        lv.skipped = lv
            .callees
            .keys()
            .filter(|f| skip.contains_key(*f))
            .cloned()
            .collect();
        lv.callees.retain(|f, _| !skip.contains_key(f));
        lv
    }

    /// The functions of the program and its libraries that thread `tid`'s samples since
    /// `since` show reached, for
    /// `h`, through more than one call path each holding at least `least` of the samples,
    /// each with the share of samples it is in (wherever it was called from). Only functions
    /// below the call path `below` count (all of them, for an empty one).
    fn spread(
        &self,
        h: Hypothesis,
        tid: i32,
        since: Instant,
        least: f64,
        below: &[&str],
    ) -> BTreeMap<Arc<FrameName>, f64> {
        let mut all = 0usize;
        let mut paths: BTreeMap<Arc<FrameName>, BTreeMap<Vec<&str>, usize>> = BTreeMap::new();
        for s in self.window(tid, since) {
            if matches!(h, Hypothesis::CPUBound | Hypothesis::RunQueue) && !s.on_cpu {
                continue;
            }
            all += 1;
            if !holds(h, s) || !at(s, below) {
                continue;
            }
            // The entry has one path, itself; a recursive function counts at its outermost call.
            for (i, f) in s.path.iter().enumerate().skip(below.len().max(1)) {
                if !runtime(f) && !s.path[..i].iter().any(|g| g.function == f.function) {
                    let prefix = s.path[..=i].iter().map(|g| g.function.as_str()).collect();
                    *paths
                        .entry(f.clone())
                        .or_default()
                        .entry(prefix)
                        .or_default() += 1;
                }
            }
        }
        paths
            .into_iter()
            .filter(|(_, by)| {
                by.values()
                    .filter(|&&n| n as f64 >= least * all as f64)
                    .count()
                    > 1
            })
            .map(|(f, by)| (f, by.values().sum::<usize>() as f64 / all as f64))
            .filter(|(_, share)| *share >= least)
            .collect()
    }

    /// The call paths reaching `function` (a [`Resource::Code`] focus) in thread `tid`'s
    /// samples since `since` where `h` held, each with its share of the samples.
    fn paths_to(
        &self,
        h: Hypothesis,
        focus: &Focus,
        function: &str,
        tid: i32,
        since: Instant,
        least: f64,
    ) -> Vec<(Focus, f64)> {
        let mut all = 0usize;
        let mut paths: BTreeMap<Vec<String>, usize> = BTreeMap::new();
        for s in self.window(tid, since) {
            if matches!(h, Hypothesis::CPUBound | Hypothesis::RunQueue) && !s.on_cpu {
                continue;
            }
            all += 1;
            if !holds(h, s) {
                continue;
            }
            if let Some(i) = s.path.iter().position(|f| f.function == function) {
                let prefix = s.path[..=i].iter().map(|f| f.function.clone()).collect();
                *paths.entry(prefix).or_default() += 1;
            }
        }
        let mut out: Vec<(Focus, f64)> = paths
            .into_iter()
            .map(|(p, n)| {
                (
                    focus.with(Resource::CallPath(p)),
                    n as f64 / all.max(1) as f64,
                )
            })
            .filter(|(_, share)| *share >= least)
            .collect();
        out.sort_by(|a, b| b.1.total_cmp(&a.1));
        out.truncate(MAX_CHILDREN);
        out
    }

    /// The call path `path` of a [`Resource::CallPath`] focus (a function found wherever it is
    /// called from, and one path reaching it) as the chain of calls it is: its thread narrowed
    /// by each function of the path in turn, naming modules where they change. Refined as a
    /// chain is, the path's function goes on to its loops and callees, and the conclusion names
    /// the path it is reached by (`main > crunch > work > loop_1`), not the function's loop
    /// wherever it is called from (`work > loop_1`, a decoy calling `work` too included). With
    /// its share of thread `tid`'s samples since `since` where `h` held; nothing below `least`.
    fn along(
        &self,
        h: Hypothesis,
        focus: &Focus,
        path: &[&str],
        tid: i32,
        since: Instant,
        least: f64,
    ) -> Vec<(Focus, f64)> {
        let (mut all, mut hit) = (0usize, 0usize);
        let mut frames: Option<&[Arc<FrameName>]> = None;
        for s in self.window(tid, since) {
            if matches!(h, Hypothesis::CPUBound | Hypothesis::RunQueue) && !s.on_cpu {
                continue;
            }
            all += 1;
            if holds(h, s) && at(s, path) {
                hit += 1;
                frames.get_or_insert(&s.path[..path.len()]);
            }
        }
        let Some(frames) = frames else {
            return Vec::new();
        };
        let share = hit as f64 / all as f64;
        if share < least {
            return Vec::new();
        }
        let mut chain = Focus(
            focus
                .0
                .iter()
                .take_while(|r| {
                    !matches!(
                        r,
                        Resource::Module(_) | Resource::Function(_) | Resource::Code(_)
                    )
                })
                .cloned()
                .collect(),
        );
        let mut module = None;
        for f in frames {
            chain = step(&chain, &mut module, f);
        }
        vec![(chain, share)]
    }

    /// The refinements of `focus` (a thread, or a call path below one) for `h` that thread
    /// `tid`'s samples since `since` show, each with the share of samples at it as its
    /// priority: the callees the path goes on to, and for waits the descriptor or lock.
    ///
    /// Deep Start: where one callee holds nearly all of the focus' samples (97%) and
    /// the path goes on below it, the search would only confirm it; the refinement goes
    /// straight down such a chain and proposes its last function, where the path branches.
    pub fn refine(
        &self,
        h: Hypothesis,
        focus: &Focus,
        tid: i32,
        since: Instant,
        least: f64,
    ) -> Vec<(Focus, f64)> {
        let (select, leaf) = split(focus);
        let first = match select {
            _ if leaf.is_some() => return Vec::new(),
            Select::Anywhere(f) => return self.paths_to(h, focus, f, tid, since, least),
            // A call path reaching a function is where iPath ends: it goes on as the chain
            // of calls it is.
            Select::Prefix(p) if matches!(focus.last(), Some(Resource::CallPath(_))) => {
                return self.along(h, focus, &p, tid, since, least)
            }
            Select::Prefix(p) => p,
        };
        // Functions reached by several paths are tested on their own, at the thread, not
        // along one chain.
        let spread = self.spread(h, tid, since, least, &[]);
        let thread = Focus(
            focus
                .0
                .iter()
                .take_while(|r| !matches!(r, Resource::Module(_) | Resource::Function(_)))
                .cloned()
                .collect(),
        );
        let mut functions: Vec<String> = first.iter().map(|f| (*f).to_owned()).collect();
        let start = focus;
        let mut focus = focus.clone();
        let mut module = last_module(&focus);
        let mut lv = self.level(h, &refs(&functions), tid, since, &spread);
        loop {
            let only = match lv.callees.iter().next() {
                Some((f, &n)) if lv.callees.len() == 1 && lv.leaves.is_empty() => (f.clone(), n),
                _ => break,
            };
            if lv.matched < DEEP_MIN || (only.1 as f64) < DEEP * lv.matched as f64 {
                break;
            }
            let mut deeper = functions.clone();
            deeper.push(only.0.function.clone());
            let next = self.level(h, &refs(&deeper), tid, since, &spread);
            if next.callees.is_empty() && next.leaves.is_empty() {
                break;
            }
            focus = step(&focus, &mut module, &only.0);
            functions = deeper;
            lv = next;
        }
        let skipped = std::mem::take(&mut lv.skipped);
        if lv.all == 0 {
            return Vec::new();
        }
        let all = lv.all as f64;
        let through =
            (focus.0.len() > start.0.len()).then(|| (focus.clone(), lv.matched as f64 / all));
        let mut out: Vec<(Focus, f64)> = lv
            .callees
            .into_iter()
            .map(|(f, n)| (step(&focus, &mut module.clone(), &f), n as f64 / all))
            .chain(lv.leaves.into_iter().map(|(k, n)| {
                let r = match k {
                    LeafKey::File(fd) => Resource::File {
                        fd,
                        path: std::fs::read_link(format!("/proc/{}/fd/{fd}", self.pid))
                            .map(|p| p.to_string_lossy().into_owned())
                            .unwrap_or_else(|_| "?".into()),
                    },
                    LeafKey::Lock(addr, name) => Resource::Lock { addr, name },
                    LeafKey::Wait(on, fds) => Resource::Wait(self.wait_set(on, &fds)),
                };
                (focus.with(r), n as f64 / all)
            }))
            .filter(|(_, p)| *p >= least)
            .collect();
        out.sort_by(|a, b| b.1.total_cmp(&a.1));
        out.truncate(MAX_CHILDREN);
        // Gone through a chain: its last function is the refinement, to be confirmed and
        // refined in turn.
        let mut out = match through {
            Some(t) => vec![t],
            None => out,
        };
        // Found at the thread or below any function of the chain (whichever window first
        // holds enough samples of each path; the graph holds each once), and wherever the
        // chain left one out as its callee.
        if !spread.is_empty() {
            let mut below = self.spread(h, tid, since, least, &first);
            for f in skipped {
                let share = spread.get(&f).copied().unwrap_or(0.0);
                below.entry(f).or_insert(share);
            }
            out.extend(below.into_iter().map(|(f, share)| {
                let code = thread
                    .with(Resource::Module(f.module.clone()))
                    .with(Resource::Code(f.function.clone()));
                (code, share)
            }));
        }
        out
    }
}

/// One level of refinement: counts of the samples below a call path.
#[derive(Default)]
struct Level {
    /// Samples that count for the hypothesis' measure (on a CPU, for CPU hypotheses).
    all: usize,
    /// Those at the call path where the hypothesis held.
    matched: usize,
    callees: BTreeMap<Arc<FrameName>, usize>,
    leaves: BTreeMap<LeafKey, usize>,
    /// Callees left out because they are reached by several paths.
    skipped: Vec<Arc<FrameName>>,
}

/// The share of a focus' samples one callee must hold for Deep Start to go through it.
const DEEP: f64 = 0.97;
/// The samples a focus needs before Deep Start trusts their shares.
const DEEP_MIN: usize = 20;

fn refs(v: &[String]) -> Vec<&str> {
    v.iter().map(String::as_str).collect()
}

/// `focus` extended by function `f`, naming `f`'s module first when it is not `module` (which
/// becomes it).
fn step(focus: &Focus, module: &mut Option<String>, f: &FrameName) -> Focus {
    let mut child = focus.clone();
    if module.as_deref() != Some(f.module.as_str()) {
        child = child.with(Resource::Module(f.module.clone()));
        *module = Some(f.module.clone());
    }
    child.with(Resource::Function(f.function.clone()))
}

/// A refinement below the call path.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum LeafKey {
    File(i32),
    Lock(u64, Option<String>),
    /// A wait on several descriptors, with those its samples showed, ascending.
    Wait(WaitOn, Vec<i32>),
}

/// The futex system call's number.
const FUTEX: u64 = 202;
/// `restart_syscall`: an interrupted call resumed by the kernel.
pub const RESTART_SYSCALL: u64 = 219;

/// A thread asleep waiting to take a lock at 0x4040 (`FUTEX_WAIT_PRIVATE`), for tests.
#[cfg(test)]
pub(super) const LOCK_WAIT: Syscall = Syscall {
    nr: FUTEX,
    args: [0x4040, 0x80, 2],
    asleep: true,
};

/// The module of the last function of `focus`.
fn last_module(focus: &Focus) -> Option<String> {
    focus.0.iter().rev().find_map(|r| match r {
        Resource::Module(m) => Some(m.clone()),
        _ => None,
    })
}

/// What a focus below a thread selects of a sample's path.
#[derive(Debug)]
enum Select<'a> {
    /// Paths starting with these functions.
    Prefix(Vec<&'a str>),
    /// Paths through this function, wherever it was called from.
    Anywhere(&'a str),
}

impl Select<'_> {
    fn matches(&self, s: &Sample) -> bool {
        match self {
            Select::Prefix(functions) => at(s, functions),
            Select::Anywhere(f) => s.path.iter().any(|p| p.function == *f),
        }
    }
}

/// What `focus` selects of the paths below its thread, and the file or lock it ends in, if
/// any.
fn split(focus: &Focus) -> (Select<'_>, Option<Resource>) {
    let mut leaf = None;
    let mut code = None;
    for r in &focus.0 {
        match r {
            Resource::File { .. } | Resource::Lock { .. } | Resource::Wait(_) => {
                leaf = Some(r.clone())
            }
            Resource::Code(f) => code = Some(f.as_str()),
            _ => {}
        }
    }
    let select = match (focus.call_path(), code) {
        (Some(p), _) => Select::Prefix(p),
        (None, Some(f)) => Select::Anywhere(f),
        (None, None) => Select::Prefix(Vec::new()),
    };
    (select, leaf)
}

/// Whether hypothesis `h` held in sample `s`. Time in an I/O call counts whether the call
/// slept or ran in the kernel; a wait for the outside only while it slept. A wait for a lock
/// counts from the call to its return, as Paradyn's synchronization time does: asleep, and
/// woken but not yet back from the wait (the stop came at its return), which on a loaded
/// machine is most of it. A thread waiting for a lock is woken by each release, then waits
/// for a CPU while the releaser, still running, takes the lock again: at a load of 13 on 2
/// CPUs three threads taking turns at one lock were seen asleep in it 6-9% of their samples,
/// woken and waiting for a CPU most of the rest. A join waits for a thread to end, not for a
/// lock: it does not count.
fn holds(h: Hypothesis, s: &Sample) -> bool {
    match (&s.activity, h) {
        (_, Hypothesis::CPUBound | Hypothesis::RunQueue) => s.on_cpu,
        (Activity::Blocked { hypothesis, .. }, Hypothesis::SmallIO) => {
            *hypothesis == Hypothesis::IOBlocking && s.bytes.is_some_and(|b| b < 4096)
        }
        (Activity::Blocked { hypothesis, .. }, Hypothesis::IOBlocking) => {
            *hypothesis == Hypothesis::IOBlocking
        }
        (Activity::Blocked { hypothesis, .. }, Hypothesis::SyncWait) => {
            *hypothesis == Hypothesis::SyncWait && !joins(s)
        }
        (Activity::Blocked { hypothesis, .. }, h) => *hypothesis == h && !s.on_cpu,
        _ => false,
    }
}

/// The system call `s` of a thread stopped in `frames` (innermost first), with a condition
/// variable's wait made a wait on the variable: glibc's `pthread_cond_wait` sleeps on one of
/// two words of it in turn (`__g_signals[0]` and `[1]`, 40 and 44 bytes in, since glibc 2.25;
/// the layout is the ABI), which read as two locks four bytes apart (python3's lock
/// `_PyRuntime+432` and `+436`, zstd's likewise). The futex's address becomes the variable's
/// start.
pub fn waited_object(mut s: Syscall, frames: &[FrameName]) -> Syscall {
    const SIGNALS: u64 = 40;
    let in_cond_wait = frames.iter().take_while(|f| runtime(f)).any(|f| {
        let name = f.function.trim_start_matches('_');
        name.starts_with("pthread_cond_") && name.contains("wait")
    });
    if s.nr == FUTEX && in_cond_wait && s.args[0] >= SIGNALS {
        s.args[0] = (s.args[0] & !7) - SIGNALS;
    }
    s
}

/// True when sample `s` is in a call that waits for a thread to end (`pthread_join` and its
/// kin), the last step of its path.
fn joins(s: &Sample) -> bool {
    const JOINS: [&str; 6] = [
        "pthread_join",
        "__pthread_join",
        "pthread_timedjoin_np",
        "pthread_clockjoin_np",
        "pthread_tryjoin_np",
        "__pthread_clockjoin_ex",
    ];
    s.path
        .last()
        .is_some_and(|f| runtime(f) && JOINS.contains(&f.function.as_str()))
}

/// True when sample `s` waits in a call that takes a lock (`pthread_mutex_lock`, a rwlock's
/// or C11's lock, the last step of its path): a lock is held by a thread that will release
/// it, so waiting for it is never idleness, as a wait for a condition or a join may be.
fn takes_lock(s: &Sample) -> bool {
    const LOCKS: [&str; 11] = [
        "pthread_mutex_lock",
        "pthread_mutex_timedlock",
        "pthread_mutex_clocklock",
        "pthread_rwlock_rdlock",
        "pthread_rwlock_wrlock",
        "pthread_rwlock_timedrdlock",
        "pthread_rwlock_timedwrlock",
        "pthread_rwlock_clockrdlock",
        "pthread_rwlock_clockwrlock",
        "mtx_lock",
        "mtx_timedlock",
    ];
    s.path
        .last()
        .is_some_and(|f| runtime(f) && LOCKS.contains(&f.function.trim_start_matches('_')))
}

/// Whether sample `s`'s path starts with `functions`.
fn at(s: &Sample, functions: &[&str]) -> bool {
    functions.len() <= s.path.len() && functions.iter().zip(&s.path).all(|(f, p)| *f == p.function)
}

/// Whether sample `s` waits on the file, lock or wait `r`. A wait on several descriptors is
/// the same call on the same epoll instance, whatever descriptors the sample showed.
fn on(s: &Sample, r: &Resource) -> bool {
    match (r, &s.activity, &s.lock) {
        (Resource::File { fd, .. }, Activity::Blocked { fd: Some(x), .. }, _) => fd == x,
        (Resource::File { fd, .. }, _, _) => s.waited.contains(fd),
        (Resource::Wait(w), _, _) => s
            .wait_on
            .is_some_and(|on| on.call == w.call && on.epfd == w.epfd),
        (Resource::Lock { addr, .. }, _, Some((x, _))) => addr == x,
        _ => false,
    }
}

/// How long the sampler samples between two quiet turns, and how long those last
/// ([`StopTurns`]): a ninth of the time without samples. Until the turns can tell
/// ([`MIN_CYCLES`]) the sampling turns last [`FIRST_SAMPLING`], so that the stops are paced by
/// what they cost within two seconds, and by [`PRIOR_WEIGHT`] until then.
const SAMPLING: Duration = Duration::from_secs(2);
const FIRST_SAMPLING: Duration = Duration::from_millis(250);
const QUIET: Duration = Duration::from_millis(250);

/// The CPU nanoseconds the threads of process `pid` have run, summed over its threads now.
fn process_run(pid: i32) -> Option<u64> {
    let tasks = std::fs::read_dir(format!("/proc/{pid}/task")).ok()?;
    let mut run = 0;
    for t in tasks.flatten() {
        let Some(tid) = t.file_name().to_str().and_then(|n| n.parse().ok()) else {
            continue;
        };
        if let Some((r, _)) = super::sample::schedstat(pid, tid) {
            run += r;
        }
    }
    Some(run)
}

/// The read and write calls process `pid` has made (`/proc/PID/io`'s `syscr` and `syscw`:
/// `read`, `write` and their vector and positioned kinds, `sendfile`), its ended threads'
/// included.
fn process_calls(pid: i32) -> Option<u64> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/io")).ok()?;
    parse_io_calls(&text)
}

/// The `syscr` and `syscw` counts of a `/proc/PID/io` text, summed.
fn parse_io_calls(text: &str) -> Option<u64> {
    let count = |key: &str| {
        text.lines()
            .find_map(|l| l.strip_prefix(key)?.trim().parse::<u64>().ok())
    };
    Some(count("syscr:")? + count("syscw:")?)
}

/// A turn of the sampler: when it began, the program's CPU time and calls then, and how long
/// its stops have held the program since.
struct Turn {
    at: Instant,
    run: Option<u64>,
    calls: Option<u64>,
    held: Duration,
}

impl Turn {
    fn begin(pid: i32) -> Turn {
        Turn {
            at: Instant::now(),
            run: process_run(pid),
            calls: process_calls(pid),
            held: Duration::ZERO,
        }
    }

    /// Ends this turn, adding it to `stacks` as quiet or sampling, and begins the next.
    fn end(&mut self, stacks: &Mutex<Stacks>, pid: i32, quiet: bool) {
        let next = Turn::begin(pid);
        if let (Some(before), Some(after)) = (self.run, next.run) {
            // A thread that ended meanwhile takes its time with it: such a turn says nothing.
            if after >= before {
                let calls = self
                    .calls
                    .zip(next.calls)
                    .and_then(|(b, a)| a.checked_sub(b));
                let work = Work {
                    run: after - before,
                    calls,
                };
                stacks.lock().unwrap_or_else(|e| e.into_inner()).turn(
                    quiet,
                    next.at - self.at,
                    work,
                    self.held,
                );
            }
        }
        *self = next;
    }
}

/// Samples `source` into `stacks` until `stop` says so, keeping the time the process is
/// stopped under `cost` (a fraction of the wall time) and at most one stop per
/// 10 ms. An error from the source is recorded and ends sampling.
pub fn sample_stacks(
    source: &mut dyn StackSource,
    stacks: &Mutex<Stacks>,
    cost: f64,
    stop: &dyn Fn() -> bool,
) {
    let started = Instant::now();
    let mut stopped = Duration::ZERO;
    // The next stop is expected to last as long as the last one.
    let mut last = Duration::ZERO;
    // When the last stop ended: the next waits at least MIN_PERIOD after it.
    let mut free = started.checked_sub(MIN_PERIOD).unwrap_or(started);
    let pid = stacks.lock().unwrap_or_else(|e| e.into_inner()).pid;
    // Turns: SAMPLING of stops, then QUIET without any, each ended by the program's CPU time.
    let mut turn = Turn::begin(pid);
    // What gsh's own CPU time has taken from the program since the search began, told at
    // each quiet turn's end (the report measures it over the whole search too); read
    // between stops as well, for threads that come and go.
    let mut usage = Meter::new(pid);
    while !stop() {
        usage.read();
        let sampling = match stacks
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .turns
            .cycles()
        {
            n if n < MIN_CYCLES => FIRST_SAMPLING,
            _ => SAMPLING,
        };
        if turn.at.elapsed() >= sampling {
            turn.end(stacks, pid, false);
            let quiet_until = Instant::now() + QUIET;
            while !stop() && Instant::now() < quiet_until {
                std::thread::sleep((quiet_until - Instant::now()).min(Duration::from_millis(20)));
            }
            turn.end(stacks, pid, true);
            let took = Duration::from_secs_f64(usage.read_now().took());
            stacks.lock().unwrap_or_else(|e| e.into_inner()).competed = took;
            continue;
        }
        // The next stop waits until what the stops cost, the next stop's included, and what
        // the probes have taken are within AIM of `cost` of the time elapsed; the stops keep
        // a tenth of it whatever the probes take, so that the search still gets its samples.
        // A stop costs the time it holds the process times what a held second cost the
        // program in the turns so far (`StopTurns::weight`), and the aim leaves room for
        // that measure's noise. The turns go on while it waits: what a held second costs
        // changes with them (one stop held 0.2 s under load, at the weight assumed before
        // the turns tell, put the next one past the search's end; the turns, not ended while
        // it waited, never told that its threads asleep lost nothing).
        let (probes, weight, competed) = {
            let s = stacks.lock().unwrap_or_else(|e| e.into_inner());
            (s.probes_spent, s.stop_weight(), s.competed)
        };
        let (stops, competing) = stops_cost(stopped + last, weight, competed);
        let due = started + stop_due(stops, probes + competing, cost);
        let next = due.max(free + MIN_PERIOD);
        let now = Instant::now();
        if now < next {
            let turn_ends = turn.at + sampling;
            std::thread::sleep((next.min(turn_ends).max(now) - now).min(Duration::from_millis(20)));
            continue;
        }
        let at = Instant::now();
        match source.sample() {
            Ok(Some(batch)) => {
                stopped += batch.stopped;
                turn.held += batch.stopped;
                last = batch.stopped;
                stacks
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .push(at, batch);
            }
            Ok(None) => {}
            Err(e) => {
                let mut stacks = stacks.lock().unwrap_or_else(|e| e.into_inner());
                // A stop that met the process's end is no error: sampling is over.
                if !super::sample::ended(stacks.pid) {
                    stacks.error = Some(e);
                }
                return;
            }
        }
        free = Instant::now();
    }
}

/// What the stops have cost the program so far, having held it `held` at `weight` each
/// ([`StopTurns::weight`]), and what gsh's own CPU time took from it beyond that by competing
/// for the CPUs: `competed` ([`super::sample::Competition::took`]) with what they held, where
/// that is more (the turns see gsh's work while it samples, not what it does throughout).
fn stops_cost(held: Duration, weight: f64, competed: Duration) -> (Duration, Duration) {
    let stops = held.mul_f64(weight);
    (stops, (held + competed).saturating_sub(stops))
}

/// How long after sampling began the next stop may be taken, so that the stops, having cost
/// `stops` (the next stop's included), and the rest, having taken `others` (the probes, and
/// gsh's competition beyond the stops', [`stops_cost`]), cost [`AIM`] of `cost` of the time
/// elapsed; the stops keep a tenth of that whatever the rest takes, so that the search still
/// gets its samples (gsh's competition, which grows with the search's own work, would
/// otherwise stop them for good).
fn stop_due(stops: Duration, others: Duration, cost: f64) -> Duration {
    let cost = cost.max(1e-6) * AIM;
    let shared = (stops + others).div_f64(cost);
    let own = stops.div_f64(cost / 10.0);
    shared.min(own)
}

#[cfg(test)]
mod tests;
