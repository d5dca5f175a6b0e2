//! `consult`: the automated bottleneck search (`engine::consult`) on the current process, or on
//! the program started for it. The search samples the process from outside — `/proc`, and
//! stack samples taken by stopping each thread alone for a moment (the engine's
//! `instrument::sampling`) — and times the loops of hot functions with live probes
//! (`instrument::consult_probes`), each taken out once judged; the program runs throughout and
//! runs on afterwards, with nothing of the search left in it.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::{anyhow, bail, Context as _, Result};
use engine::consult::pace::Pace;
use engine::consult::probes::{ProbeLab, Probes};
use engine::consult::stacks::Stacks;
use engine::consult::{self, proclab::ProcLab, Focus, Hypothesis, Resource, Search, Settings};
use engine::instrument::consult_probes::LiveProbes;
use engine::instrument::inferior::State;

use super::{Args, Complete, Spec};
use crate::context::Context;
use crate::output::Output;
use crate::target;
use crate::target::TargetSlot;

/// `--for`'s default and largest value.
const DEFAULT_SECONDS: f64 = 60.0;
const MAX_SECONDS: f64 = 86_400.0;

pub const CONSULT: Spec = Spec {
    name: "consult",
    aliases: &[],
    usage: "[--for SECONDS] [--cost PERCENT] [--threshold NAME=FRACTION]... [--dot FILE] [--watch]",
    complete: Complete::Nothing,
    summary: "search by itself for why and where the running program is slow",
    help: "Runs Paradyn's Performance Consultant on the process (starting the program first \
when there is none): it tests hypotheses about why the program is slow, each as a fraction of \
a thread's wall time against a threshold: CPUBound (0.30: on a CPU or runnable, waiting for \
one; refined to RunQueue, 0.20: the waiting part), SyncWait (0.20: in lock, condition and \
futex waits, asleep or woken and not yet back), IOBlocking (0.20: in read/write-family and file system calls on files; \
refined to SmallIO, 0.10: calls of under 4096 bytes) and ExternalWait (0.20: asleep in poll, \
select, epoll, sleeps, accept, and reads and writes on sockets, pipes and terminals). A thread \
that used no CPU while parked on one futex throughout (an idle pool thread) slows nothing: its \
wait is not SyncWait, nor is a join; unless its stack samples show it waiting to take a lock \
(pthread_mutex_lock, a rwlock), which its holders keep from it. A wait (SyncWait, IOBlocking, SmallIO, ExternalWait) is a \
fraction of the time the thread was not waiting for a CPU, at most twice its share of the wall \
time: on a loaded machine the run queue takes its share from a thread's waits as much as from \
its running. A reading counts after 1 s; within 5% of its threshold it \
waits, at most 6 s from its first reading, then counts as false; an experiment that gets no \
reading at all counts as false after 18 s, unless it waits for stack samples that still come \
(a loaded machine takes them slowly): then it waits for them, within --for. A thread is \
refined below itself from a dozen of its stack samples, waited for likewise.

A true hypothesis is refined along \"where\": the program to its threads, a thread to the call \
path its time goes to, from the thread's own entry (main, or the function it was started \
with) through the callees its stack samples show, the likeliest first, through the program \
and the libraries it brings (a Python interpreter's libpython) down to the first call into the \
C runtime (libc, the dynamic loader, libm, libpthread, libdl, librt, libgcc_s, libstdc++); a chain where one callee holds nearly all the samples is gone through in one \
step (Paradyn's Deep Start). A function of the program or its libraries the samples show reached through more \
than one call path (a helper called from several places) is not followed down any one of them: \
the thread is refined to it wherever it is called from (`prog > hot`), and that to each call \
path reaching it, from the thread's entry (`hot > main > a > hot`, iPath), so a conclusion \
names the module, the function and the path whose time it is; a true path goes on as the chain \
of calls it is (`main > a > hot`), into its function's loops, each timed along that path alone \
(`main > a > hot > loop_1`: hot's other callers' time in the loop is not its). A wait is refined further to the \
file descriptor it waits on, named by what it is (`fd 3 (pipe:[123])`), or the lock (the \
futex's address, named by the variable it lies in). A poll, select or epoll_wait that waits on \
one descriptor throughout is refined to that descriptor (for epoll, the one its instance \
watches); one that waits on several is one refinement, not one per descriptor: the call, the \
epoll instance for epoll_wait, and every descriptor any of its samples showed it waiting on \
(polled, or watched by the instance), each named by what /proc/PID/fd and the process's \
network tables say it is, summarised by kind (`epoll fd 5 watching 22 fds: pipe:[300], \
listening socket *:6379, 20 client connections to 127.0.0.1:6379`; `poll on 3 fds: 3 pipes`; \
a client connection is a TCP connection to a port listened on, a connection one the process \
made, listed by the address it goes to; each kind at each place once, the first four listed, \
the rest counted). \
Samples in the same call on the same epoll instance are that wait, whichever descriptors each \
showed (a server's clients come and go). A refinement is measured \
over the samples of the experiment it refines and those since. A conclusion is a true \
experiment nothing below it confirms; RunQueue stands only where CPUBound held.

A function found CPU-bound is refined into its loops too, outermost first, as the loop-aware \
search does it, with live probes: each loop gets a timer (what `time FUNC loop LOOP` inserts, \
named as `loops FUNC` names them: loop_1, loop_1.2), measured for its thread for the settle time \
and taken out as soon as the experiment is judged; a loop found CPU-bound is refined into the \
loops nested in it the same way. A loop's fraction is its time less the thread's time neither \
on a CPU nor runnable over the same interval (a lower bound of its CPU demand); RunQueue at a \
loop is the thread's waiting share of that. A timer opens at the loop's entry, so a loop \
running since before its timer went in (a main loop entered once) reads nothing: it is judged \
false with a note saying so, and the loops nested in it, entered afresh on each of its \
iterations, are timed instead. A callee that the function calls only from inside a loop is \
tested below that loop (`main > loop_1 > crunch`: the innermost loop holding every call site \
the samples show), since the loop's time includes it. A call path found by its samples (`hot > \
main > hot_caller > hot`: hot wherever it is called from, then each path reaching it) is \
tested for CPU demand by a timer of its whole path (iPath): hot is profiled (what `profile hot` \
inserts: each entry walks the return addresses on the stack, and the runtime keeps the \
activations of each path apart), and only the activations whose callers are the path's, from \
the thread's entry down, count: hot's time along that path, less the thread's time off a CPU, \
as for loops. Paths ending in the same function share its one profile. The result marks the \
experiments timed by probes (`[probe]`, `[probe of the whole path]`; JSON: \"measured\": \
\"probe\", \"path-probe\" or \"samples\"). Where the function cannot be profiled, the path's \
last call is timed instead (what `time hot_caller call hot` inserts) if it is a direct call in \
the same module, and the samples measure it otherwise; a last call's timer times every path \
ending in that call, and the result says so (`[probe of hot_caller > hot only]`; JSON: \
\"timed_call\": \"hot_caller > hot\"). A loop of a true path's function (or below it) is \
timed along the path alone in the same way: the function is profiled, and the loop's timer \
counts each of its activations in the call path of the profiled activation it runs in (no walk \
of its own), so only the activations along the path count (`[probe]`; a loop that cannot be \
timed so, its stack height at its entries unknown, is timed from every caller, and the errors \
say so). The loop of the function wherever it is called from (`hot > loop_1`) is timed from \
every caller. \
When the search ends, every probe it inserted is gone: `show \
instrumentation` lists none, the code is as before, and `report` shows none of their values.

The search measures from outside the process: the scheduler's counts and each thread's system \
call from /proc every 5 ms, and stack samples: one thread at a time is stopped, its registers \
read and its stack walked, and it runs again before the next is stopped, so a thread is held \
only for its own walk while the others run (an attached process gsh has let go, hands-off, \
stays so: each thread is taken hold of alone for its walk). A thread asleep in a system call \
is not stopped when its stack can be walked from the stack pointer and pc /proc shows it with \
there, every step by the call frame information (a frame kept by frame pointer needs `rbp`, \
which only a stop reads), and it was neither scheduled in nor on a CPU from before that \
reading to after the walk (`asleep` in the JSON counts these samples): a stop wakes a \
sleeping thread, and an `epoll_wait` it wakes returns EINTR to the program. A thread that has \
not run since its last sample is left alone and that sample counts again, held for no time: \
/proc says it is still asleep in the system call it was in then (after a stop, back in it after \
the one run the resume gave it), and neither scheduled in nor on a CPU since (`reused` in the \
JSON counts these samples). Each thread is looked at afresh at least once a second. Stops are paced so that what they \
cost and what the probes have taken stay within four fifths of --cost PERCENT (default 5) of \
the program's running (the stops keep a tenth of it whatever the probes take): the two share \
the limit, and the fifth left is room for the noise of measuring the stops' cost. A sample \
holds the program for as long as its longest-held thread was held, from when that thread \
stopped (when gsh asked it to, later by the time it then waited for a CPU, by its schedstat) \
to its resume, and costs that times what a held second cost the program in the \
sampler's turns so far (below; five times the held time until the turns can tell). A thread \
not on a CPU when the stop is asked for first waits for one to take it, and after the resume \
waits to run, which its schedstat counts as waiting for a CPU, not as stopped. The probes are kept \
within it: what a timer costs is its entries (in every thread) times a timed entry's cost, over \
its thread's time on a CPU, measured 50 ms after it goes in. A timer whose cost \
is not known yet goes in only when no other unknown one is in; one that turns out to cost \
more than the limit is taken out at once and its experiment is refused (state `refused`, \
with what it cost); of timers that fit the limit alone but not together, the latest is taken \
out and waits its turn; and a timer measured before is predicted to cost what it cost then, \
so one over the limit is refused without going in; and while the timers have taken the \
limit's share of the program's time since the search began (many tried and found too costly), \
none goes in. gsh's other work is held to the limit too: while what the whole search has cost \
so far (the overhead below, reckoned at every step) is at nine tenths of it (above the stops' aim), no probe goes in \
and the analysis of the code a timer would go into waits between functions, so that on a \
loaded machine gsh's own CPU time does not take the program's over the limit (the search \
takes longer instead: the report says how long, `held` in the JSON). The result reports the overhead: the \
search's estimate of how much it slowed the program, as a share of the time the program's \
threads would have run without it (given beside it, `running` in the JSON: of a program that \
hardly ran, a large share may be of little). The stops cost what the program's threads ran less while \
sampled than without stops: after every 2 s of sampling (0.25 s in its first two seconds) \
the sampler stops for none for 0.25 s, and in each such cycle the threads' CPU time per wall \
second in the quiet turn against the sampled one (from their schedstat) is the share of \
their running the stops took (a stopped thread gives its CPU to whatever else runs, and \
waits for one again after); or, where the program makes at least 400 read and write calls a \
second (/proc/PID/io's syscr and syscw), the calls per wall second it made fewer while sampled, \
where that share is more: a server not busy all the time loses more of its work than of its \
CPU time to a stop (its clients wait for what the stop delays). The first cycle (the search's start) is left out, and the share \
counted is what the cycles agree on: their mean less twice its standard error, from the \
third cycle on. It is never less than what the threads would have run while held (at their \
rate between stops: nothing for a thread asleep, and for one that waits for a CPU, that less \
the time it waited), which counts alone until then and where the cycles disagree. gsh's own CPU time (its \
search, analysis, sampling and tracing together) counts too: where the CPUs are all busy, what \
gsh runs comes out of what everything else would have run, and the program's part is its \
share of the busy time not gsh's of the CPUs it may run on (from /proc/stat) times gsh's CPU \
time, never more than the time its threads waited for a CPU. A program pinned to some of the \
CPUs (taskset, a cpuset) would lose what gsh runs there, and gsh's threads run mostly where the \
threads they stop run: while the search runs, gsh keeps all its threads on the CPUs the \
program may not use, where there are any (the report says which; JSON: \"kept_off\"), and \
its CPU time then takes none of the program's. The stops cost what they held plus that, where it \
is more than the turns measured (the turns see gsh's work while it samples, not what it does \
throughout); the sampler counts it with the probes when it paces its stops, which keep their \
tenth of the limit whatever it takes. The loop \
timers cost \
their entries times a timed entry's cost. That cost is measured where the timer runs: the \
first time a timer goes in, it is taken out and put back by turns (6 turns of 40 ms of its \
thread's CPU time, out first, while no other timer goes in; a turn another comes out in is \
not counted) beside a counter of its function's calls, and what it adds to the thread's CPU \
time per call, times the calls per entry, is its cost, capped by the bound the search measures as it starts (the timer's \
instructions run back to back in gsh, their whole latency; inside a loop bound by its own \
dependency chain they run beside the loop's work, and cost a fifth of that). A whole path's \
timer (a profile of its function, run at every call of it) costs what it adds per call, with \
no cap, and so does a loop's along a path (the profile and the loop's entries in each call). Where the function is called too rarely to tell (an interpreter's loop, entered once), \
the turns count the calls of its hottest callee by the stack samples too, and the timer costs \
the share of its thread's time it adds per such call; so does a timer whose placement slows \
code it does not time (a loop exit with no room for a jump has the whole function run from a \
copy, where each call returns through the original: the copy goes with the timer). The bound \
counts during the turns and where the rates are too noisy to tell; turns cut short (the \
search ends) count at what they measured. A timer costed so whose turns so far (one in, one \
out at least) show it over twice the limit ends its turns there, and comes out at once: \
each turn in cost as much (python3's interpreter loop whose timer doubled its time per call). Inserting and removing a timer holds the whole \
program while the jumps into its trampolines are written or taken out (and the first loads \
gsh's runtime): each such hold costs every thread what it would have run meanwhile, at their \
mean rate over the search, and counts with the probes (the report gives the hold's \
milliseconds; JSON: \"changes\": {\"held\"} and \"change_cost\" in \"probes\"). The time the \
program's threads were held stopped (\"stopped\", a share of the wall time: at each sample the \
mean over its threads of the time each was held), the samples taken and the CPU the /proc sampling used are reported beside \
it. Not counted: the delay a stop adds to a thread woken during it (a reply that arrives \
while the program is stopped is read when it runs again). Libraries the program \
loads while the search runs (dlopen) are taken up by the stack sampler at the first sample \
showing their code (it names their functions and walks through them from then on), and \
learnt by the search within a second, so their loops are timed like the program's. It ends when every experiment is judged, after --for \
SECONDS (default 60; probes being inserted count, and no experiment starts that would not be \
in by then, judging by the slowest start so far; the analysis of a module whose loops are \
to be timed runs in the background from the moment one of its functions is tested, with the \
patcher's facts about the module, the search going on meanwhile, and a function found \
CPU-bound waits for it past the bounded wait; once nothing more can start in time and nothing \
measures, it ends there rather than at --for), on Ctrl-C (keeping what it found; no experiment \
starts after it, and one being inserted comes out once in), or when the process ends: then each experiment still \
running is judged on what it read if it started at least the settle time before the end with a \
reading of at least half of it (true or false as at any time, and not refined further), and \
otherwise left untested; either way its note says the program ended. A stopped \
process is resumed and left running.

The result lists the conclusions first (hypothesis, fraction, focus), then the search history \
as an indented tree of every experiment (true, false, untested, failed, refused) with its \
fraction. \
With --json: {\"findings\": [{\"hypothesis\", \"focus\", \"fraction\", \"thread\", \
\"measured\", \"timed_call\", \"waits_on\"}], \"tested\", \"overhead\", \"stopped\", \"stop_cost\", \"sampler_cpu\", \
\"gsh_cpu\", \"waited\", \"competed\", \"running\", \"held\", \
\"stack_samples\", \"reused\", \"asleep\", \"kept_off\": {\"gsh\", \"program\"} (CPU lists; null where gsh \
kept to no CPUs of its own), \"probes\": {\"inserted\", \"removed\", \"call_timers\", \"path_timers\", \"cost\", \
\"change_cost\", \"spent\", \"timer_ns\", \"count_ns\", \"timer_costs\": [{\"timer\", \"counted_ns\", \"timed_ns\", \
\"ns\", \"in_situ\", \"share\"}], \"errors\", \"changes\": {\"inserts\", \"removes\", \"held\"} (the \
seconds each insert and removal of a probe took, and those they held the whole program)}, \"seconds\", \"graph\"}; a focus lists the program (named as its \
process is, by the path it was started through: Debian's redis-server, a link to \
redis-check-rdb, is redis-server, its module redis-check-rdb), then modules, \
functions, loops, and a file, lock or wait on several descriptors, outermost first (the wait \
as its summary above); a finding at such a wait has \"waits_on\": {\"call\" (epoll_wait, poll \
or select), \"epfd\" (the epoll instance, or null), \"fds\": [{\"fd\", \"kind\", \"what\"}]}, \
every descriptor it waited on with its kind (listening socket, client connection, connection, \
udp socket, unix socket, pipe, file, terminal, eventfd, closed fd, ...) and what it is in full \
(`client connection to 127.0.0.1:6379 from 127.0.0.1:41234`). --dot FILE writes the \
graph for Graphviz. --watch shows the search as it goes: a line on standard error for each \
experiment as it starts (`testing`) and as it is judged (`true` or `false`, with its fraction), \
with the seconds since the search began.",
    examples: &[
        ("consult --for 20", "search for up to 20 seconds"),
        (
            "consult --threshold CPUBound=0.5",
            "call a thread CPU-bound only above half its time",
        ),
        (
            "consult --dot search.dot",
            "also write the search history graph",
        ),
        (
            "consult --cost 20",
            "let stack samples stop the program up to a fifth of the time",
        ),
        (
            "consult --watch",
            "show each experiment as it starts and as it is judged",
        ),
    ],
    run: consult_cmd,
};

fn seconds(s: &str) -> Result<Duration> {
    match s.parse::<f64>() {
        Ok(x) if x.is_finite() && x > 0.0 && x <= MAX_SECONDS => Ok(Duration::from_secs_f64(x)),
        _ => bail!("--for must be a number of seconds from 0 to {MAX_SECONDS}, not `{s}`"),
    }
}

fn fraction(what: &str, s: &str) -> Result<f64> {
    match s.parse::<f64>() {
        Ok(x) if x.is_finite() && (0.0..=1.0).contains(&x) => Ok(x),
        _ => bail!("{what} must be a fraction from 0 to 1, not `{s}`"),
    }
}

fn settings(args: &mut Args) -> Result<Settings> {
    let mut s = Settings::default();
    if let Some(c) = args.option("--cost")? {
        let pct: f64 = c
            .trim_end_matches('%')
            .parse()
            .ok()
            .filter(|x: &f64| x.is_finite() && *x > 0.0 && *x <= 100.0)
            .ok_or_else(|| anyhow!("--cost must be a percentage from 0 to 100, not `{c}`"))?;
        s.cost_limit = pct / 100.0;
    }
    while let Some(t) = args.option("--threshold")? {
        let (name, value) = t
            .split_once('=')
            .ok_or_else(|| anyhow!("--threshold takes NAME=FRACTION, not `{t}`"))?;
        let h = Hypothesis::by_name(name).ok_or_else(|| {
            let names: Vec<&str> = Hypothesis::ALL.iter().map(|h| h.name()).collect();
            anyhow!(
                "no hypothesis is named `{name}`; they are {}",
                names.join(", ")
            )
        })?;
        s.thresholds
            .push((h, fraction(&format!("{name}'s threshold"), value)?));
    }
    Ok(s)
}

fn consult_cmd(ctx: &mut Context, args: &mut Args) -> Result<Output> {
    search(ctx, args, None)
}

/// What sees the search after each step: the search and the seconds since it began.
pub(crate) type Observer<'o> = &'o mut dyn FnMut(&Search, f64);

/// `consult` with `args`; `observer` (`watch consult`) sees the search as it runs.
pub(crate) fn search(
    ctx: &mut Context,
    args: &mut Args,
    mut observer: Option<Observer<'_>>,
) -> Result<Output> {
    let limit = match args.option("--for")? {
        Some(s) => seconds(&s)?,
        None => Duration::from_secs_f64(DEFAULT_SECONDS),
    };
    let settings = settings(args)?;
    let dot = args.option("--dot")?;
    let watching = args.flag("--watch");
    args.positionals(0, 0)?;
    if !ctx.target.is_live() {
        let started = super::process::start_process(ctx, args)?;
        eprintln!("{started}");
    }
    let t = ctx.target.present()?;
    if let Some(gone) = t.gone() {
        bail!("{gone}: there is nothing to consult");
    }
    let pid = t.pid();
    // The program as users know it (the link they started it through), its module by its
    // file's name.
    let program = consult::sample::program_name(pid)
        .or_else(|| ctx.session.main().ok().map(|m| m.name.clone()))
        .unwrap_or_else(|| "program".into());
    let t = ctx.target.present()?;
    // The search watches a running program: resume a stopped one, as `continue &` does.
    t.inferior.resume_if_stopped()?;
    t.frame = 0;
    let flag = ctx.interrupt.clone();
    let _ctrl_c = target::CtrlC::catch(&flag);
    // A program pinned to some CPUs loses what gsh runs there: gsh's threads keep to the
    // others until the search's report is made (its timers out first), and the competition
    // is measured so.
    let program_cpus = consult::cpus::Cpus::of_program(pid);
    let kept_off = program_cpus.as_ref().and_then(consult::cpus::keep_off);
    let t = ctx.target.present()?;
    let store = Arc::new(Mutex::new(
        Stacks::new(pid)
            .reading_waits(engine::instrument::waited)
            .describing(engine::instrument::described),
    ));
    let cost = settings.cost_limit;
    // gsh's work beside the stops (analysing code for timers, starting them) is held to the
    // cost limit by what the search has cost so far, told at each step.
    let pace = Arc::new(Pace::new(cost));
    let mut probes =
        LiveProbes::new(&mut ctx.plan, &mut ctx.session, &t.inferior).pacing(pace.clone());
    let mut lab = ProbeLab::new(
        pid,
        ProcLab::with_stacks(pid, store.clone()),
        Some(&mut probes as &mut dyn Probes),
    )
    .pacing(pace.clone());
    let mut search = Search::new(settings, Focus(vec![Resource::Program(program)]));
    // The sampler picks up libraries the program loads meanwhile by itself.
    let done = AtomicBool::new(false);
    /// Sets `done` and releases the pace when dropped: the sampler ends however the search
    /// does (a panic included), or the scope would wait for it forever, and the analyses
    /// left go on unheld.
    struct Done<'d>(&'d AtomicBool, &'d Pace);
    impl Drop for Done<'_> {
        fn drop(&mut self) {
            self.0.store(true, Ordering::SeqCst);
            self.1.release();
        }
    }
    let mut usage = consult::sample::Meter::new(pid);
    let seconds = std::thread::scope(|scope| {
        let _done = Done(&done, &pace);
        let sampling = std::thread::Builder::new()
            .name("gsh-consult-stacks".into())
            .spawn_scoped(scope, || t.inferior.sample_stacks(&store, cost, &done));
        let mut told = Vec::new();
        let seconds = consult::run_watched(
            &mut search,
            &mut lab,
            limit,
            &flag,
            || matches!(t.inferior.state(), Ok(State::Running)),
            |search, lab, now| {
                // Libraries loaded meanwhile, for loop timers in their functions.
                lab.learn();
                // The program's threads as they come and go, and what the search has cost
                // so far, which gsh's own work is held to.
                let competition = usage.read();
                let probes = lab.probes_spent();
                let changes = lab.changes_held();
                pace.tell(
                    cost_of(&store, probes, changes, now, competition)
                        .shares()
                        .overhead(),
                );
                if watching {
                    watch(search, now, &mut told);
                }
                if let Some(o) = observer.as_mut() {
                    o(search, now);
                }
            },
        );
        done.store(true, Ordering::SeqCst);
        if let Ok(h) = sampling {
            let _ = h.join();
        }
        seconds
    });
    let competition = usage.read_now();
    // Every loop timer still in goes out before anything else.
    let probe_stats = lab.finish();
    let why_stopped = lab.inner.error();
    let sampler_cpu = lab.inner.overhead();
    let (stops, reused, asleep, stack_error) = {
        let s = store.lock().unwrap_or_else(|e| e.into_inner());
        (
            s.batches(),
            s.reused(),
            s.asleep(),
            s.error().map(str::to_owned),
        )
    };
    let mut report = search.report(seconds, 0.0);
    let spent = probe_stats.spent;
    report.probes = probe_stats;
    report.set_cost(cost_of(
        &store,
        spent,
        report.probes.changes.held,
        seconds,
        competition,
    ));
    report.sampler_cpu = sampler_cpu;
    // Released as the search ended (`Done`).
    report.held = pace.held().as_secs_f64();
    report.stack_samples = stops;
    if let (Some(k), Some(p)) = (&kept_off, &program_cpus) {
        report.kept_off = Some(consult::KeptOffOut {
            gsh: k.on.to_string(),
            program: p.to_string(),
        });
    }
    report.reused = reused;
    report.asleep = asleep;
    if let Some(path) = dot {
        std::fs::write(&path, report.dot()).with_context(|| format!("cannot write {path}"))?;
    }
    if ctx.json {
        return Ok(Output::Json(serde_json::to_value(&report)?));
    }
    let mut text = report.text();
    if let Some(e) = why_stopped.or(stack_error) {
        text.push_str(&format!("(sampling stopped: {e})\n"));
    }
    Ok(Output::Text(text))
}

/// What the search has cost the program after `wall` seconds, from the stack samples'
/// `store`, the `probes`' seconds, the seconds their `changes` held the whole program and
/// gsh's `competition` for the CPUs.
fn cost_of(
    store: &Mutex<Stacks>,
    probes: f64,
    changes: f64,
    wall: f64,
    competition: consult::sample::Competition,
) -> consult::Cost {
    let s = store.lock().unwrap_or_else(|e| e.into_inner());
    let (lost, used) = s.cost();
    consult::Cost {
        stopped: s.stopped().as_secs_f64(),
        lost: lost.as_secs_f64(),
        imposed: s.imposed().as_secs_f64(),
        used: used.as_secs_f64(),
        probes,
        changes,
        wall,
        competition,
    }
}

/// `--watch`: one line on stderr for each experiment as it starts and as it is judged, with the
/// seconds into the search. `told[i]` is the state last told for node `i`.
fn watch(search: &Search, now: f64, told: &mut Vec<Option<consult::State>>) {
    use std::io::Write as _;
    let mut err = std::io::stderr().lock();
    for (i, n) in search.nodes().iter().enumerate() {
        if told.len() <= i {
            told.push(None);
        }
        if told[i] == Some(n.state) || n.state == consult::State::Untested {
            continue;
        }
        told[i] = Some(n.state);
        let what = match n.state {
            consult::State::Active => "testing".to_owned(),
            consult::State::True => format!("true {:.2}", n.fraction.unwrap_or(0.0)),
            consult::State::False => format!("false {:.2}", n.fraction.unwrap_or(0.0)),
            consult::State::Failed => "failed".to_owned(),
            consult::State::Refused => "refused".to_owned(),
            consult::State::Untested => continue,
        };
        let _ = writeln!(
            err,
            "[consult {now:6.2} s] {:<12} {:<11} {}",
            n.experiment.hypothesis.name(),
            what,
            n.experiment.focus
        );
    }
}
