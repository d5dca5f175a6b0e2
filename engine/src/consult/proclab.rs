//! [`ProcLab`]: a [`Lab`] that measures a live process without probes in it. Program and
//! thread foci come from sampling `/proc` ([`super::sample`]): one sampler for the whole
//! search, each experiment measuring from the snapshot taken when it started. Foci below a
//! thread — call paths, and the files and locks waited on — come from stack samples
//! ([`super::stacks`]) when the lab has them ([`ProcLab::with_stacks`]).
//!
//! Sampling `/proc` costs the program nothing but a share of a CPU for the sampling thread;
//! stack samples stop the process briefly, at the pace the cost limit allows. The shell
//! reports both.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use super::sample::{Sampler, Snapshot, ThreadTime};
use super::stacks::Stacks;
use super::{Experiment, Focus, Hypothesis, Lab, ProbeId, Reading, Resource};

/// How often the sampler looks at the process.
const PERIOD: Duration = Duration::from_millis(5);

/// Stack samples a thread needs in a window before they are read.
const STACK_MIN: usize = 12;

/// How long a lock wait's reading waits for stack samples before it takes `/proc`'s.
const STARVED: Duration = Duration::from_secs(3);

/// The least share of a focus' samples a refinement must show to be proposed.
const LEAST: f64 = 0.05;

struct Shared {
    sampler: Sampler,
    /// The last sampling error: the process is gone or unreadable.
    error: Option<String>,
    /// When the process was last sampled: a reading covers the time up to then, and no
    /// more once the process has ended.
    last: Option<Instant>,
}

/// One experiment: what it measures and the window it measures over.
struct Window {
    experiment: Experiment,
    /// Where the window's `/proc` counts and stack samples start.
    snapshot: Snapshot,
    since: Instant,
    /// When the experiment started.
    started: Instant,
    /// When the window's `/proc` counts begin (its snapshot's time): its own start, or that
    /// of the ancestor whose window a refinement reads. A reading covers the time since, and
    /// counts once that is the settle time: a refinement measured by samples inserts nothing
    /// to settle, and reads what its ancestor read.
    from: Instant,
}

/// Measures a live process `pid` by sampling.
pub struct ProcLab {
    pid: i32,
    shared: Arc<Mutex<Shared>>,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<Duration>>,
    started: Instant,
    next: u64,
    /// Every experiment started, kept after it ends: refinement reads the judged one.
    experiments: BTreeMap<u64, Window>,
    stacks: Option<Arc<Mutex<Stacks>>>,
}

/// The CPU time the calling thread has used.
fn thread_cpu() -> Duration {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec for the call.
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32)
}

impl ProcLab {
    /// A lab for process `pid`, sampling `/proc` from a thread of its own until dropped.
    pub fn new(pid: i32) -> ProcLab {
        let shared = Arc::new(Mutex::new(Shared {
            sampler: Sampler::new(pid),
            error: None,
            last: None,
        }));
        let stop = Arc::new(AtomicBool::new(false));
        let (s, st) = (shared.clone(), stop.clone());
        let thread = std::thread::Builder::new()
            .name("gsh-consult-sampler".into())
            .spawn(move || {
                while !st.load(Ordering::Relaxed) {
                    {
                        let mut sh = s.lock().unwrap_or_else(|e| e.into_inner());
                        let at = Instant::now();
                        let sampled = sh.sampler.sample();
                        if sampled.is_ok() {
                            sh.last = Some(at);
                        }
                        if let Err(e) = sampled {
                            // A process that ended has nothing more to sample: no error.
                            if super::sample::ended(pid) {
                                break;
                            }
                            sh.error = Some(e.to_string());
                        }
                    }
                    std::thread::sleep(PERIOD);
                }
                thread_cpu()
            })
            .ok();
        ProcLab {
            pid,
            shared,
            stop,
            thread,
            started: Instant::now(),
            next: 0,
            experiments: BTreeMap::new(),
            stacks: None,
        }
    }

    /// A lab that also reads the stack samples in `stacks` (which something else fills, with
    /// [`super::stacks::sample_stacks`]), so it refines threads to call paths, files and locks.
    pub fn with_stacks(pid: i32, stacks: Arc<Mutex<Stacks>>) -> ProcLab {
        let mut lab = ProcLab::new(pid);
        lab.stacks = Some(stacks);
        lab
    }

    /// The thread a focus names, if any.
    fn thread_of(focus: &Focus) -> Option<i32> {
        focus.0.iter().find_map(|r| match r {
            Resource::Thread(t) => Some(*t as i32),
            _ => None,
        })
    }

    /// True when the focus reaches below its thread.
    fn below_thread(focus: &Focus) -> bool {
        matches!(
            focus.last(),
            Some(
                Resource::Function(_)
                    | Resource::Code(_)
                    | Resource::CallPath(_)
                    | Resource::File { .. }
                    | Resource::Lock { .. }
                    | Resource::Wait(_)
            )
        )
    }

    /// The outermost experiment `e` refines: the same hypothesis (or the one it refines along
    /// the "why" axis) at a focus `e`'s focus extends, below the program level (the program's
    /// window began before some threads existed).
    fn ancestor(&self, e: &Experiment) -> Option<&Window> {
        let related = |h: Hypothesis| h == e.hypothesis || Some(h) == e.hypothesis.parent();
        self.experiments
            .values()
            .filter(|w| {
                let f = &w.experiment.focus.0;
                related(w.experiment.hypothesis)
                    && Self::thread_of(&w.experiment.focus).is_some()
                    && f.len() <= e.focus.0.len()
                    && e.focus.0.starts_with(f)
                    && w.experiment != *e
            })
            .min_by_key(|w| w.since)
    }

    /// For an experiment at a thread, the program-level experiment of the same hypothesis (or
    /// the one it refines along the "why" axis) it was refined from.
    fn program_window(&self, e: &Experiment) -> Option<&Window> {
        let related = |h: Hypothesis| h == e.hypothesis || Some(h) == e.hypothesis.parent();
        if !matches!(e.focus.last(), Some(Resource::Thread(_))) {
            return None;
        }
        self.experiments
            .values()
            .filter(|w| {
                related(w.experiment.hypothesis)
                    && matches!(w.experiment.focus.0.as_slice(), [Resource::Program(_)])
                    && e.focus.0.starts_with(&w.experiment.focus.0)
            })
            .min_by_key(|w| w.since)
    }

    /// The addresses in the last function of `focus` (an experiment of `h` this lab ran) at
    /// which the stack samples show it calling `callee`; empty without samples.
    pub fn call_sites(&self, h: Hypothesis, focus: &Focus, callee: &str) -> Vec<u64> {
        let (Some(w), Some(tid), Some(stacks)) = (
            self.experiments
                .values()
                .rev()
                .find(|w| w.experiment.hypothesis == h && &w.experiment.focus == focus),
            Self::thread_of(focus),
            self.stacks.as_ref(),
        ) else {
            return Vec::new();
        };
        let stacks = stacks.lock().unwrap_or_else(|e| e.into_inner());
        let since = if stacks.count(tid, w.since) >= STACK_MIN {
            w.since
        } else {
            self.started
        };
        stacks.call_sites(h, focus, tid, since, callee)
    }

    /// What the stops took from the program's threads and what they ran, so far (see
    /// [`Stacks::cost`]); `None` without stack samples.
    pub fn stop_cost(&self) -> Option<(Duration, Duration)> {
        let stacks = self.stacks.as_ref()?;
        Some(stacks.lock().unwrap_or_else(|e| e.into_inner()).cost())
    }

    /// Tells the stack sampler what the probes have taken so far: see
    /// [`Stacks::set_probes_spent`].
    pub fn set_probes_spent(&self, spent: Duration) {
        if let Some(stacks) = &self.stacks {
            stacks
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .set_probes_spent(spent);
        }
    }

    /// Why sampling stopped, when the process went away or became unreadable.
    pub fn error(&self) -> Option<String> {
        self.shared
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .error
            .clone()
    }

    /// Stops sampling and returns the share of one CPU the `/proc` sampling thread used while
    /// it ran.
    pub fn overhead(mut self) -> f64 {
        self.stop.store(true, Ordering::Relaxed);
        let cpu = self
            .thread
            .take()
            .and_then(|t| t.join().ok())
            .unwrap_or_default();
        cpu.as_secs_f64() / self.started.elapsed().as_secs_f64().max(1e-9)
    }

    /// The fraction of thread `t`'s time hypothesis `h` took at `focus` over window `w`, or
    /// `None` while the stack samples are too few to say.
    fn thread_fraction(
        &self,
        h: Hypothesis,
        focus: &Focus,
        t: &ThreadTime,
        w: &Window,
    ) -> Option<f64> {
        let stacks = self
            .stacks
            .as_ref()
            .map(|s| s.lock().unwrap_or_else(|e| e.into_inner()));
        let from_stacks = |min: usize| {
            stacks
                .as_ref()
                .and_then(|s| s.fraction(h, focus, t.tid, w.since, min))
        };
        let below = Self::below_thread(focus);
        let queued = t
            .fractions
            .get(&Hypothesis::RunQueue)
            .copied()
            .unwrap_or(0.0);
        let wait = match h {
            Hypothesis::CPUBound | Hypothesis::RunQueue => {
                let whole = t.fractions.get(&h).copied().unwrap_or(0.0);
                if below {
                    Some(whole * from_stacks(STACK_MIN)?)
                } else {
                    Some(whole)
                }
            }
            // A parked thread's wait slows nothing (see `ThreadTime::parked`), unless it
            // waits to take a lock: `/proc` cannot tell a pool thread waiting for work from a
            // waiter that the lock's holders keep from it (under load, for whole windows),
            // and its stack samples can. Their reading waits for those samples as long as
            // they come (see `Stacks::lock_fraction`).
            Hypothesis::SyncWait if t.parked => match &stacks {
                Some(s) if s.error().is_none() => s.lock_fraction(focus, t.tid, w.since, STACK_MIN),
                _ => Some(0.0),
            },
            _ if below => from_stacks(STACK_MIN),
            // Stack samples see time in calls on a CPU too; `/proc` only time off it, and a
            // thread writing a file in small calls is on a CPU throughout (`/proc` read
            // "running" in 400 samples of 400, its stacks were in `pwrite` in every one): an
            // I/O reading waits for the stack samples where there are any, or a search whose
            // first stops came slowly judged IOBlocking false at 0.0 and pruned it.
            Hypothesis::IOBlocking | Hypothesis::SmallIO if stacks.is_some() => {
                from_stacks(STACK_MIN)
            }
            // So does a lock wait: `/proc` sees a thread asleep in a futex, not the call it
            // sleeps in (a join is no lock wait) nor a lock wait's end (see `stacks::holds`).
            // Judged on `/proc` before its stacks came, a thread could be true (0.98) with no
            // stack sample to refine it by, and stayed a conclusion at the thread.
            // Unless the stops starve (an attached search at a load of 15 had no dozen in
            // 18 s): then `/proc`'s reading, after `STARVED`, is better than none.
            Hypothesis::SyncWait if stacks.is_some() => from_stacks(STACK_MIN).or_else(|| {
                (w.started.elapsed() >= STARVED)
                    .then(|| t.fractions.get(&h).copied().unwrap_or(0.0))
            }),
            _ => from_stacks(STACK_MIN).or_else(|| {
                let proc_file = match focus.last() {
                    Some(Resource::File { fd, .. }) => {
                        t.fds.iter().find(|(f, _)| f == fd).map_or(0.0, |(_, p)| *p)
                    }
                    _ => t.fractions.get(&h).copied().unwrap_or(0.0),
                };
                Some(proc_file)
            }),
        };
        match h {
            Hypothesis::CPUBound | Hypothesis::RunQueue => wait,
            _ => wait.map(|x| own_share(x, queued)),
        }
    }
}

/// The share `x` of a thread's wall time a wait took, as a share of the time the thread was
/// not waiting for a CPU (`queued` of its wall time): on a loaded machine the run queue takes
/// its share of a thread's time from its waits as much as from its running (a thread waiting
/// for a lock a third of its time on a machine of its own was seen waiting for it a fifth of
/// its wall time at a load of 15 on 2 CPUs, runnable the rest), and the thresholds are of the
/// thread's own time. At most twice `x`, so that a thread nearly always waiting for a CPU does
/// not make a few samples a wait.
pub fn own_share(x: f64, queued: f64) -> f64 {
    (x / (1.0 - queued).max(0.5)).min(1.0)
}

impl Drop for ProcLab {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

impl Lab for ProcLab {
    fn refine(&mut self, h: Hypothesis, focus: &Focus) -> Option<Vec<(Focus, f64)>> {
        // An experiment measured by something else (a call path timed by a probe of its whole
        // length) is refined from the samples of the one it refines, and those since.
        let e = Experiment {
            hypothesis: h,
            focus: focus.clone(),
        };
        let Some(w) = self
            .experiments
            .values()
            .rev()
            .find(|w| w.experiment == e)
            .or_else(|| self.ancestor(&e))
        else {
            return Some(Vec::new());
        };
        let threads = self
            .shared
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .sampler
            .since(&w.snapshot);
        Some(match (focus.last(), Self::thread_of(focus)) {
            // A fresh look at the process: its threads, each with how much of the hypothesis
            // it showed in the experiment just judged, as the priority.
            (Some(Resource::Program(_)), _) => threads
                .iter()
                .map(|t| {
                    let at = focus.with(Resource::Thread(t.tid as u32));
                    let p = self.thread_fraction(h, &at, t, w).unwrap_or(0.0);
                    (at, p)
                })
                .collect(),
            (_, Some(tid)) => match &self.stacks {
                Some(stacks) => {
                    let stacks = stacks.lock().unwrap_or_else(|e| e.into_inner());
                    // Too few samples in the judged window (stops are slow on a loaded
                    // machine): what the thread showed since the search began.
                    let since = if stacks.count(tid, w.since) >= STACK_MIN {
                        w.since
                    } else {
                        self.started
                    };
                    // Fewer samples of the thread than a reading needs (the first stops of a
                    // large program, or of any under load, are slow): ask again later, as
                    // long as they come (`preparing`). A refinement of nothing is final:
                    // refined from a handful, a thread judged waiting by `/proc` showed no
                    // wait below it (its one sample on a CPU), and the search concluded at
                    // the thread, naming no lock (1 search of 10 of `planted lock` at a load
                    // of 20), or ExternalWait at redis-server's main thread (3 runs of 5
                    // under redis-benchmark at a load of 15).
                    if stacks.count(tid, since) < STACK_MIN {
                        return None;
                    }
                    stacks.refine(h, focus, tid, since, LEAST)
                }
                None if h == Hypothesis::IOBlocking
                    && matches!(focus.last(), Some(Resource::Thread(_))) =>
                {
                    threads
                        .iter()
                        .filter(|t| t.tid == tid)
                        .flat_map(|t| t.fds.clone())
                        .map(|(fd, p)| {
                            let path = std::fs::read_link(format!("/proc/{}/fd/{fd}", self.pid))
                                .map(|p| p.to_string_lossy().into_owned())
                                .unwrap_or_else(|_| "?".into());
                            (focus.with(Resource::File { fd, path }), p)
                        })
                        .collect()
                }
                None => Vec::new(),
            },
            _ => Vec::new(),
        })
    }

    /// A focus at or below a thread is refined from a dozen stack samples of it: while it
    /// has fewer, the thread lives and the samples still come, its refinement is waited for.
    fn preparing(&mut self, _: Hypothesis, focus: &Focus) -> bool {
        let (Some(tid), Some(stacks)) = (Self::thread_of(focus), &self.stacks) else {
            return false;
        };
        let sampling = {
            let stacks = stacks.lock().unwrap_or_else(|e| e.into_inner());
            stacks.error().is_none() && stacks.count(tid, self.started) < STACK_MIN
        };
        sampling && super::sample::tids(self.pid).is_ok_and(|t| t.contains(&tid))
    }

    fn predicted_cost(&mut self, _: &Experiment) -> Option<f64> {
        // Every experiment reads the same samples, whose pace the cost limit already sets.
        Some(0.0)
    }

    fn ended(&mut self) -> bool {
        super::sample::ended(self.pid)
    }

    fn start(&mut self, e: &Experiment) -> Result<ProbeId, String> {
        match e.focus.last() {
            Some(Resource::Program(_) | Resource::Thread(_)) => {}
            Some(Resource::File { .. }) if e.hypothesis == Hypothesis::IOBlocking => {}
            Some(
                Resource::Function(_)
                | Resource::Code(_)
                | Resource::CallPath(_)
                | Resource::File { .. }
                | Resource::Lock { .. }
                | Resource::Wait(_),
            ) if self.stacks.is_some() => {}
            Some(r) => return Err(format!("{r} cannot be measured by sampling")),
            None => return Err("an empty focus".into()),
        }
        let (snapshot, since, from) = {
            let mut sh = self.shared.lock().unwrap_or_else(|e| e.into_inner());
            let at = Instant::now();
            sh.sampler
                .sample()
                .map_err(|err| format!("process {}: {err}", self.pid))?;
            sh.last = Some(at);
            // A refinement reads the samples its ancestor read, and those since: they were
            // taken passively, so they hold for the narrower focus too, and the child's
            // fraction is then never judged on fewer samples than the parent's.
            // A thread refined from the program reads the stack samples the program's
            // experiment read too (its `/proc` counts start afresh: the program's window began
            // before some threads existed): at a load of 16, with the probes' share of the
            // cost spent, stops came so seldom that lockers refined from a SyncWait true at
            // 1.4 s had their dozen samples of their own only at 16.5 s.
            match self.ancestor(e) {
                Some(w) => (w.snapshot.clone(), w.since, w.from),
                None => {
                    let program = self.program_window(e).map(|w| w.since);
                    (sh.sampler.snapshot(), program.unwrap_or(at), at)
                }
            }
        };
        self.next += 1;
        self.experiments.insert(
            self.next,
            Window {
                experiment: e.clone(),
                snapshot,
                since,
                started: Instant::now(),
                from,
            },
        );
        Ok(ProbeId(self.next))
    }

    fn read(&mut self, probe: ProbeId) -> Option<Reading> {
        let w = self.experiments.get(&probe.0)?;
        let (threads, last) = {
            let sh = self.shared.lock().unwrap_or_else(|e| e.into_inner());
            (sh.sampler.since(&w.snapshot), sh.last)
        };
        threads.first()?;
        let e = &w.experiment;
        let fraction = match Self::thread_of(&e.focus) {
            Some(tid) => {
                let t = threads.iter().find(|t| t.tid == tid);
                match t {
                    Some(t) => self.thread_fraction(e.hypothesis, &e.focus, t, w)?,
                    None => 0.0,
                }
            }
            // The program: its busiest thread for the hypothesis, since a thread's wall time
            // is what the thresholds are fractions of. No reading while the threads that may
            // wait have none (a reading that waits for stack samples, before the first came):
            // a parked thread's 0 alone judged SyncWait false at the program 1.1 s into
            // searches of `planted lock` at a load of 12, before its lockers had a reading.
            None => {
                let (mut busiest, mut unread) = (None, false);
                for t in &threads {
                    let at = e.focus.with(Resource::Thread(t.tid as u32));
                    match self.thread_fraction(e.hypothesis, &at, t, w) {
                        Some(x) if !(t.parked && x == 0.0) => {
                            busiest = Some(busiest.map_or(x, |b: f64| b.max(x)));
                        }
                        Some(_) => {}
                        None => unread = true,
                    }
                }
                match busiest {
                    Some(x) => x,
                    None if unread => return None,
                    None => 0.0,
                }
            }
        };
        // Up to the last sample: a process that ended was measured until then, however long
        // ago that is.
        let seconds = last.map_or(Duration::ZERO, |l| l.saturating_duration_since(w.from));
        Some(Reading {
            fraction,
            seconds: seconds.as_secs_f64(),
            note: None,
            opaque: false,
        })
    }

    /// A reading that has none yet waits for stack samples (`/proc`'s come every few
    /// milliseconds): they come as long as the sampler has met no error and the process runs.
    fn gathering(&mut self, probe: ProbeId) -> bool {
        // A thread that is gone gets no more samples: its experiments wait for nothing.
        let gone = self
            .experiments
            .get(&probe.0)
            .and_then(|w| Self::thread_of(&w.experiment.focus))
            .is_some_and(|tid| super::sample::tids(self.pid).is_ok_and(|t| !t.contains(&tid)));
        let sampling = !gone
            && self.experiments.contains_key(&probe.0)
            && self.stacks.as_ref().is_some_and(|s| {
                s.lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .error()
                    .is_none()
            });
        sampling && !super::sample::ended(self.pid)
    }

    fn stop(&mut self, probe: ProbeId) {
        // The window is kept until the lab is dropped: refinement reads the judged one.
        let _ = probe;
    }
}

#[cfg(test)]
mod tests {
    use super::super::{Search, Settings, State};
    use super::*;
    use std::process::{Command, Stdio};

    /// A frame of function `function` in `module`, the program's own when it is `app`.
    fn frame(module: &str, function: &str) -> super::super::stacks::FrameName {
        super::super::stacks::FrameName {
            module: module.into(),
            function: function.into(),
            main: module == "app",
        }
    }

    /// Thread `tid` stopped in `syscall` with `frames` (innermost first).
    fn stopped(
        tid: i32,
        syscall: Option<super::super::stacks::Syscall>,
        frames: Vec<super::super::stacks::FrameName>,
    ) -> super::super::stacks::ThreadStack {
        super::super::stacks::ThreadStack {
            tid,
            syscall,
            lock_name: None,
            frames,
            pcs: Vec::new(),
            held: Duration::ZERO,
            taken: super::super::stacks::Taken::Stopped,
        }
    }

    /// One stop of `threads`, held no time, into `stacks`.
    fn push(stacks: &Mutex<Stacks>, threads: Vec<super::super::stacks::ThreadStack>) {
        stacks.lock().unwrap().push(
            Instant::now(),
            super::super::stacks::Batch {
                stopped: Duration::ZERO,
                threads,
            },
        );
    }

    /// python3 with one thread spinning and the main thread sleeping: the search finds the
    /// spinning thread CPU-bound and the sleeping one waiting outside, and nothing else.
    #[test]
    fn a_spinning_thread_is_found_cpu_bound_and_a_sleeping_one_waiting() {
        let Ok(mut child) = Command::new("python3")
            .args([
                "-c",
                "import threading, time\n\
                 def spin():\n    while True: pass\n\
                 threading.Thread(target=spin, daemon=True).start()\n\
                 time.sleep(60)\n",
            ])
            .stdout(Stdio::null())
            .spawn()
        else {
            panic!("python3 is needed by this test");
        };
        let pid = child.id() as i32;
        // Python starts slowly on a busy machine: wait for its second thread.
        let waited = Instant::now();
        while std::fs::read_dir(format!("/proc/{pid}/task")).map_or(0, |d| d.count()) < 2 {
            assert!(
                waited.elapsed() < Duration::from_secs(20),
                "no thread started"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        let mut lab = ProcLab::new(pid);
        let settings = Settings {
            settle: 0.5,
            ..Settings::default()
        };
        let mut search = Search::new(settings, Focus(vec![Resource::Program("python3".into())]));
        let start = Instant::now();
        while search.step(&mut lab, start.elapsed().as_secs_f64()) {
            std::thread::sleep(Duration::from_millis(50));
            assert!(start.elapsed() < Duration::from_secs(30), "no end");
        }
        let overhead = lab.overhead();
        let _ = child.kill();
        let _ = child.wait();
        let found: Vec<(Hypothesis, usize)> = search
            .findings()
            .iter()
            .map(|f| (f.hypothesis, f.focus.0.len()))
            .collect();
        // On a busy machine the spinner waits for a CPU as much as it runs: either is right.
        let busy = |h: Hypothesis| matches!(h, Hypothesis::CPUBound | Hypothesis::RunQueue);
        assert!(
            found.iter().any(|&(h, depth)| busy(h) && depth == 2),
            "{:#?}",
            search.nodes()
        );
        assert!(found.contains(&(Hypothesis::ExternalWait, 2)), "{found:?}");
        assert!(
            !found
                .iter()
                .any(|(h, _)| matches!(h, Hypothesis::SyncWait | Hypothesis::IOBlocking)),
            "{found:?}"
        );
        let spinner = search
            .findings()
            .into_iter()
            .find(|f| busy(f.hypothesis))
            .unwrap();
        assert_ne!(
            spinner.focus.0[1],
            Resource::Thread(pid as u32),
            "the main thread sleeps"
        );
        assert!(search.nodes().iter().all(|n| n.state != State::Active));
        // Sampling five threads' /proc files every 5 ms takes a few percent of one CPU.
        assert!(overhead < 0.5, "sampling used {overhead} of a CPU");
    }

    /// A call path timed by a probe of its own (not started in this lab) is refined from the
    /// samples of the thread experiment it refines: into the chain of calls it is.
    #[test]
    fn a_call_path_measured_elsewhere_is_refined_from_its_threads_samples() {
        let pid = std::process::id() as i32;
        let stacks = Arc::new(Mutex::new(Stacks::new(pid)));
        let mut lab = ProcLab::with_stacks(pid, stacks.clone());
        let thread = Focus(vec![Resource::Program("app".into()), Resource::Thread(7)]);
        lab.start(&Experiment {
            hypothesis: Hypothesis::CPUBound,
            focus: thread.clone(),
        })
        .unwrap();
        for _ in 0..20 {
            let frames = vec![
                frame("app", "work"),
                frame("app", "crunch"),
                frame("app", "worker"),
                frame("libc.so.6", "start_thread"),
            ];
            push(&stacks, vec![stopped(7, None, frames)]);
        }
        let app = thread.with(Resource::Module("app".into()));
        let path = app
            .with(Resource::Code("work".into()))
            .with(Resource::CallPath(vec![
                "worker".into(),
                "crunch".into(),
                "work".into(),
            ]));
        let chain = app
            .with(Resource::Function("worker".into()))
            .with(Resource::Function("crunch".into()))
            .with(Resource::Function("work".into()));
        assert_eq!(
            lab.refine(Hypothesis::CPUBound, &path),
            Some(vec![(chain, 1.0)])
        );
    }

    /// A thread judged waiting outside from `/proc` before its stack samples came: its one
    /// sample so far shows it on a CPU, so nothing below the thread for the wait. The lab asks
    /// to be asked again rather than refine it to nothing, which was final (the search
    /// concluded at the thread); once its samples show the wait, it is refined below.
    #[test]
    fn a_thread_with_too_few_samples_to_show_its_wait_is_refined_later() {
        use super::super::stacks::{FrameName, Syscall};
        let pid = std::process::id() as i32;
        let stacks = Arc::new(Mutex::new(Stacks::new(pid)));
        let mut lab = ProcLab::with_stacks(pid, stacks.clone());
        let thread = Focus(vec![Resource::Program("app".into()), Resource::Thread(7)]);
        lab.start(&Experiment {
            hypothesis: Hypothesis::ExternalWait,
            focus: thread.clone(),
        })
        .unwrap();
        let push = |syscall: Option<Syscall>, inner: FrameName| {
            let frames = vec![
                inner,
                frame("app", "serve"),
                frame("app", "worker"),
                frame("libc.so.6", "start_thread"),
            ];
            push(&stacks, vec![stopped(7, syscall, frames)])
        };
        push(None, frame("app", "handle"));
        assert_eq!(lab.refine(Hypothesis::ExternalWait, &thread), None);
        let epoll_wait = Syscall {
            nr: 232,
            args: [5, 0, 0],
            asleep: true,
        };
        for _ in 0..20 {
            push(Some(epoll_wait), frame("libc.so.6", "epoll_wait"));
        }
        let refined = lab.refine(Hypothesis::ExternalWait, &thread).unwrap();
        assert!(
            refined
                .iter()
                .any(|(f, _)| f.call_path() == Some(vec!["worker", "serve"])),
            "{refined:?}"
        );
    }

    /// A reading that waits for stack samples (I/O, lock waits) has none at the program until
    /// some thread has them: not a reading of 0, which judged the hypothesis false before the
    /// first stops came.
    #[test]
    fn a_program_reading_waits_for_the_stack_samples_it_is_read_from() {
        let pid = std::process::id() as i32;
        let stacks = Arc::new(Mutex::new(Stacks::new(pid)));
        let mut lab = ProcLab::with_stacks(pid, stacks);
        for h in [Hypothesis::SyncWait, Hypothesis::IOBlocking] {
            let probe = lab
                .start(&Experiment {
                    hypothesis: h,
                    focus: Focus(vec![Resource::Program("me".into())]),
                })
                .unwrap();
            std::thread::sleep(Duration::from_millis(50));
            assert_eq!(lab.read(probe), None, "{h}");
        }
    }

    /// An experiment at a thread that has ended waits for no more samples of it: with too
    /// few to read, it held the search open until `--for` (the sampler goes on for the
    /// others, the process lives).
    #[test]
    fn an_experiment_at_a_thread_that_ended_gathers_nothing() {
        let pid = std::process::id() as i32;
        let stacks = Arc::new(Mutex::new(Stacks::new(pid)));
        let mut lab = ProcLab::with_stacks(pid, stacks);
        let (tx, rx) = std::sync::mpsc::channel::<()>();
        let (tid_tx, tid_rx) = std::sync::mpsc::channel();
        let t = std::thread::spawn(move || {
            // SAFETY: gettid has no preconditions.
            let _ = tid_tx.send(unsafe { libc::gettid() });
            let _ = rx.recv();
        });
        let tid = tid_rx.recv().unwrap();
        std::thread::sleep(Duration::from_millis(50));
        let probe = lab
            .start(&Experiment {
                hypothesis: Hypothesis::CPUBound,
                focus: Focus(vec![
                    Resource::Program("me".into()),
                    Resource::Thread(tid as u32),
                    Resource::Function("f".into()),
                ]),
            })
            .unwrap();
        assert!(lab.gathering(probe), "its samples still come");
        drop(tx);
        t.join().unwrap();
        // Joined, the thread may linger in /proc a moment longer.
        let asked = Instant::now();
        while lab.gathering(probe) && asked.elapsed() < Duration::from_secs(10) {
            std::thread::sleep(Duration::from_millis(10));
        }
        assert!(!lab.gathering(probe), "waits for a thread that is gone");
    }

    /// A thread refined from the program reads the stack samples the program's experiment
    /// read: its reading needs no dozen stops of its own (which on a loaded machine come
    /// seconds apart).
    #[test]
    fn a_thread_reads_the_stack_samples_of_the_program_it_was_refined_from() {
        use super::super::stacks::LOCK_WAIT;
        let pid = std::process::id() as i32;
        // SAFETY: gettid takes no arguments.
        let tid = unsafe { libc::gettid() };
        let stacks = Arc::new(Mutex::new(Stacks::new(pid)));
        let mut lab = ProcLab::with_stacks(pid, stacks.clone());
        let program = Focus(vec![Resource::Program("me".into())]);
        lab.start(&Experiment {
            hypothesis: Hypothesis::SyncWait,
            focus: program.clone(),
        })
        .unwrap();
        for _ in 0..20 {
            let futex = LOCK_WAIT;
            let frames = vec![
                frame("libc.so.6", "pthread_mutex_lock"),
                frame("app", "contend"),
                frame("libc.so.6", "start_thread"),
            ];
            push(&stacks, vec![stopped(tid, Some(futex), frames)]);
        }
        let probe = lab
            .start(&Experiment {
                hypothesis: Hypothesis::SyncWait,
                focus: program.with(Resource::Thread(tid as u32)),
            })
            .unwrap();
        // The `/proc` sampler's first samples of the window come when its thread gets a CPU:
        // 30 ms was not always enough with the other tests running.
        let since = Instant::now();
        let r = loop {
            std::thread::sleep(Duration::from_millis(30));
            if let Some(r) = lab.read(probe) {
                break r;
            }
            assert!(since.elapsed() < Duration::from_secs(10), "no reading");
        };
        assert_eq!(r.fraction, 1.0);
    }

    /// A thread `/proc` read as parked (no CPU, asleep in one futex wait) that its stack
    /// samples show waiting to take a lock is waiting for it, not idle: under load a locker
    /// kept from a lock its holders keep taking runs under 1% of a window. One waiting for a
    /// condition stays parked (0), and the reading waits for the samples that tell.
    #[test]
    fn a_parked_thread_waiting_to_take_a_lock_waits_for_it() {
        use super::super::stacks::LOCK_WAIT;
        let pid = std::process::id() as i32;
        let stacks = Arc::new(Mutex::new(Stacks::new(pid)));
        let lab = ProcLab::with_stacks(pid, stacks.clone());
        let thread = |tid: u32| Focus(vec![Resource::Program("me".into()), Resource::Thread(tid)]);
        let parked = |tid: i32| ThreadTime {
            tid,
            seconds: 1.0,
            fractions: BTreeMap::from([(Hypothesis::SyncWait, 0.0)]),
            fds: Vec::new(),
            parked: true,
            samples: 200,
        };
        let window = Window {
            experiment: Experiment {
                hypothesis: Hypothesis::SyncWait,
                focus: thread(7),
            },
            snapshot: Snapshot::default(),
            since: Instant::now(),
            started: Instant::now(),
            from: Instant::now(),
        };
        let waiting = |tid: i32, call: &str| {
            let futex = LOCK_WAIT;
            let frames = vec![
                frame("libc.so.6", call),
                frame("app", "locker"),
                frame("libc.so.6", "start_thread"),
            ];
            stopped(tid, Some(futex), frames)
        };
        let read = |tid: i32| {
            lab.thread_fraction(
                Hypothesis::SyncWait,
                &thread(tid as u32),
                &parked(tid),
                &window,
            )
        };
        // No samples yet: no reading (not a parked 0).
        assert_eq!(read(7), None);
        for _ in 0..STACK_MIN {
            push(
                &stacks,
                vec![
                    waiting(7, "pthread_mutex_lock"),
                    waiting(8, "pthread_cond_wait"),
                ],
            );
        }
        assert_eq!(read(7), Some(1.0));
        assert_eq!(read(8), Some(0.0));
    }

    /// A thread is refined from as many of its stack samples as a reading needs: from fewer,
    /// the lab cannot tell yet and says it is preparing (the samples still come), so that
    /// the search neither concludes at the thread for want of them nor stops waiting.
    #[test]
    fn a_thread_is_refined_only_once_it_has_the_samples_a_reading_needs() {
        use super::super::stacks::LOCK_WAIT;
        let pid = std::process::id() as i32;
        // SAFETY: gettid takes no arguments.
        let tid = unsafe { libc::gettid() };
        let stacks = Arc::new(Mutex::new(Stacks::new(pid)));
        let mut lab = ProcLab::with_stacks(pid, stacks.clone());
        let thread = Focus(vec![
            Resource::Program("me".into()),
            Resource::Thread(tid as u32),
        ]);
        lab.start(&Experiment {
            hypothesis: Hypothesis::SyncWait,
            focus: thread.clone(),
        })
        .unwrap();
        let push = |n: usize, waits: bool| {
            for _ in 0..n {
                let (syscall, frames) = if waits {
                    (
                        Some(LOCK_WAIT),
                        vec![
                            frame("libc.so.6", "pthread_mutex_lock"),
                            frame("app", "contend"),
                            frame("libc.so.6", "start_thread"),
                        ],
                    )
                } else {
                    (
                        None,
                        vec![frame("app", "work"), frame("libc.so.6", "start_thread")],
                    )
                };
                push(&stacks, vec![stopped(tid, syscall, frames)]);
            }
        };
        // A few samples that happen to show it running: no refinement from them.
        push(3, false);
        assert_eq!(lab.refine(Hypothesis::SyncWait, &thread), None);
        assert!(lab.preparing(Hypothesis::SyncWait, &thread));
        push(STACK_MIN, true);
        let refined = lab.refine(Hypothesis::SyncWait, &thread).unwrap();
        assert_eq!(
            refined.first().map(|(f, _)| f.last()),
            Some(Some(&Resource::Function("contend".into()))),
            "{refined:?}"
        );
        assert!(!lab.preparing(Hypothesis::SyncWait, &thread));
    }

    /// A refinement measured by samples reads its ancestor's window: its reading covers the
    /// time since that began, and counts once that is the settle time, not a settle time of
    /// its own (it inserts nothing; under load the chain from a thread to its lock took a
    /// second a level waiting for settle times).
    #[test]
    fn a_refinement_read_from_its_ancestors_window_covers_its_time() {
        let pid = std::process::id() as i32;
        // SAFETY: gettid takes no arguments.
        let tid = unsafe { libc::gettid() };
        let stacks = Arc::new(Mutex::new(Stacks::new(pid)));
        let mut lab = ProcLab::with_stacks(pid, stacks);
        let thread = Focus(vec![
            Resource::Program("me".into()),
            Resource::Thread(tid as u32),
        ]);
        lab.start(&Experiment {
            hypothesis: Hypothesis::CPUBound,
            focus: thread.clone(),
        })
        .unwrap();
        std::thread::sleep(Duration::from_millis(300));
        let child = lab
            .start(&Experiment {
                hypothesis: Hypothesis::RunQueue,
                focus: thread,
            })
            .unwrap();
        let r = lab.read(child).expect("a reading from /proc");
        assert!(r.seconds >= 0.3, "{r:?}");
    }

    /// A process that is gone ends the search: what could not start because of that did
    /// not fail, it stays untested (the caller says how the process ended).
    #[test]
    fn a_process_that_is_gone_ends_the_search_untested() {
        let mut c = Command::new("true").spawn().unwrap();
        let pid = c.id() as i32;
        c.wait().unwrap();
        let mut lab = ProcLab::new(pid);
        let mut search = Search::new(
            Settings::default(),
            Focus(vec![Resource::Program("true".into())]),
        );
        assert!(!search.step(&mut lab, 0.0), "the search goes on");
        assert!(
            search.nodes().iter().all(|n| n.state == State::Untested),
            "{:?}",
            search.nodes()[0]
        );
    }
}
