//! The automated bottleneck search: Paradyn's Performance Consultant, made loop-aware as in the
//! loop-aware search seed, with priorities seeded by stack samples ("Deep Start").
//!
//! The search tests *hypotheses* (why the program is slow: [`Hypothesis`]) at *foci* (where:
//! process, thread, module, function, loop, call path, outermost first: [`Focus`]). A pair is an
//! *experiment*: it is true when the measured fraction of wall time passes the hypothesis'
//! threshold. A true experiment is *refined*: its focus' children (the callees of a function not
//! under a loop and its outermost loops; the calls and nested loops of a loop) become new
//! experiments, the likeliest first. A false one is pruned with everything below it. The record
//! of every experiment is the *search history graph* ([`Search::nodes`]).
//!
//! This module is the search alone, over a [`Lab`]: whatever measures an experiment (live
//! instrumentation of a process, or a model of a program in the tests) and knows the program's
//! structure. It decides what to measure, when a measurement is conclusive, and how much
//! measuring may cost at once; it inserts nothing itself.

#![warn(missing_docs)]

use std::fmt;

pub mod cpus;
pub mod pace;
pub mod probes;
pub mod proclab;
pub mod sample;
pub mod stacks;

/// Why a program may be slow: one of the "why" axis' hypotheses.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize)]
pub enum Hypothesis {
    /// The thread computes or wants to: time on a CPU or runnable waiting for one. (On a
    /// shared machine the split between the two follows the other load; the demand does not.)
    CPUBound,
    /// The thread waits for a lock, a condition or a futex.
    SyncWait,
    /// The thread waits in read/write-family and file system calls.
    IOBlocking,
    /// Refines [`Hypothesis::IOBlocking`]: its calls move fewer than 4096 bytes each.
    SmallIO,
    /// The thread waits for the outside world: poll, select, epoll, sleep, accept.
    ExternalWait,
    /// Refines [`Hypothesis::CPUBound`]: the thread was runnable and got no CPU.
    RunQueue,
}

impl Hypothesis {
    /// The hypotheses tested first, at the whole program.
    pub const TOP: [Hypothesis; 4] = [
        Hypothesis::CPUBound,
        Hypothesis::SyncWait,
        Hypothesis::IOBlocking,
        Hypothesis::ExternalWait,
    ];

    /// Every hypothesis, the refinements included.
    pub const ALL: [Hypothesis; 6] = [
        Hypothesis::CPUBound,
        Hypothesis::RunQueue,
        Hypothesis::SyncWait,
        Hypothesis::IOBlocking,
        Hypothesis::SmallIO,
        Hypothesis::ExternalWait,
    ];

    /// Its name, as users type it in `--threshold NAME=F` and read it in results.
    pub fn name(self) -> &'static str {
        match self {
            Hypothesis::CPUBound => "CPUBound",
            Hypothesis::SyncWait => "SyncWait",
            Hypothesis::IOBlocking => "IOBlocking",
            Hypothesis::SmallIO => "SmallIO",
            Hypothesis::ExternalWait => "ExternalWait",
            Hypothesis::RunQueue => "RunQueue",
        }
    }

    /// The hypothesis named `name` (case-insensitive).
    pub fn by_name(name: &str) -> Option<Hypothesis> {
        Hypothesis::ALL
            .into_iter()
            .find(|h| h.name().eq_ignore_ascii_case(name))
    }

    /// The fraction of a thread's wall time above which the hypothesis holds, by default.
    pub fn default_threshold(self) -> f64 {
        match self {
            Hypothesis::CPUBound => 0.30,
            Hypothesis::SyncWait | Hypothesis::IOBlocking => 0.20,
            Hypothesis::SmallIO => 0.10,
            Hypothesis::ExternalWait => 0.20,
            Hypothesis::RunQueue => 0.20,
        }
    }

    /// True when, holding, this refinement replaces its parent as the conclusion (an I/O
    /// problem that is small I/O); false when it only qualifies it (CPU demand partly unmet
    /// is still CPU demand).
    pub fn replaces_parent(self) -> bool {
        self != Hypothesis::RunQueue
    }

    /// The hypothesis this one refines along the "why" axis, if any.
    pub fn parent(self) -> Option<Hypothesis> {
        match self {
            Hypothesis::RunQueue => Some(Hypothesis::CPUBound),
            Hypothesis::SmallIO => Some(Hypothesis::IOBlocking),
            _ => None,
        }
    }

    /// The more precise hypotheses a true one is refined into along the "why" axis.
    pub fn children(self) -> &'static [Hypothesis] {
        match self {
            Hypothesis::CPUBound => &[Hypothesis::RunQueue],
            Hypothesis::IOBlocking => &[Hypothesis::SmallIO],
            _ => &[],
        }
    }
}

impl fmt::Display for Hypothesis {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// One resource of the "where" axis.
#[derive(Clone, Debug, PartialEq, Eq, Hash, serde::Serialize)]
#[serde(rename_all = "kebab-case", tag = "kind", content = "name")]
pub enum Resource {
    /// The whole program (the executable's name).
    Program(String),
    /// One thread, by its id.
    Thread(u32),
    /// A loaded module, by name.
    Module(String),
    /// A function, by the name users type: one step of a call path from the thread's entry
    /// (each `Function` of a focus is called directly by the one before it).
    Function(String),
    /// A function wherever it is called from: its time over every call path reaching it
    /// (Paradyn's code hierarchy). Refined into those call paths (iPath).
    Code(String),
    /// A loop, named as `loops` names it (`loop_1.2`).
    Loop(String),
    /// One call path reaching the [`Resource::Code`] function before it: the functions from
    /// the thread's entry to that function, caller first.
    CallPath(Vec<String>),
    /// A lock or condition, by its address, with the symbol it lies in when known.
    Lock {
        /// The futex's runtime address.
        addr: u64,
        /// The symbol and offset it lies in (`big_lock`, `queue+8`).
        name: Option<String>,
    },
    /// A file descriptor and what it refers to.
    File {
        /// The descriptor.
        fd: i32,
        /// What `/proc/PID/fd/FD` links to (a path, `socket:[...]`, `pipe:[...]`).
        path: String,
    },
    /// A wait on several descriptors at once (`poll`, `select`, `epoll_wait`): one focus, the
    /// descriptors it waits on named in it, not one focus for each.
    Wait(WaitSet),
}

/// A wait on several descriptors: the call, the epoll instance waited on, and the descriptors
/// the samples showed it waiting on. It is the same wait whatever those were (a server's
/// clients come and go): a sample is in it when it waits in the same call on the same epoll
/// instance (see `stacks::on`).
#[derive(Clone, Debug, PartialEq, Eq, Hash, serde::Serialize)]
pub struct WaitSet {
    /// The call: `epoll_wait` (its `epoll_pwait` kin too), `poll` (`ppoll`), `select`
    /// (`pselect6`).
    pub call: String,
    /// The epoll instance's descriptor, for `epoll_wait`.
    pub epfd: Option<i32>,
    /// The descriptors waited on (polled, or watched by the epoll instance) in any of the
    /// samples, ascending, each with what it is.
    pub fds: Vec<Watched>,
}

/// One descriptor of a [`WaitSet`] and what it is, as the process's `/proc` tells (given to
/// the stack store: [`stacks::Describer`]).
#[derive(Clone, Debug, PartialEq, Eq, Hash, serde::Serialize)]
pub struct Watched {
    /// The descriptor.
    pub fd: i32,
    /// What kind of thing it is, singular (`listening socket`, `client connection`, `pipe`,
    /// `file`).
    pub kind: String,
    /// Where among its kind, with its leading word (` to 127.0.0.1:6379`; empty for kinds
    /// with no place): descriptors of one kind and place are summarised together.
    #[serde(skip)]
    pub at: String,
    /// It alone, in full (`client connection to 127.0.0.1:6379 from 127.0.0.1:41234`).
    pub what: String,
}

/// How many kinds of descriptor a [`WaitSet`]'s text lists before it counts the rest.
const WAIT_GROUPS: usize = 4;

impl fmt::Display for WaitSet {
    /// `epoll fd 5 watching 21 fds: listening socket *:6379, 20 client connections to
    /// 127.0.0.1:6379`; `poll on 3 fds: ...`: the descriptors by kind and place, in the order
    /// of their first descriptor, each alone where it is the only one of its kind there.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let n = self.fds.len();
        let fds = if n == 1 { "fd" } else { "fds" };
        match self.epfd {
            Some(ep) => write!(f, "epoll fd {ep} watching {n} {fds}")?,
            None => write!(f, "{} on {n} {fds}", self.call)?,
        }
        let mut groups: Vec<(&str, &str, Vec<&Watched>)> = Vec::new();
        for w in &self.fds {
            match groups
                .iter_mut()
                .find(|(k, a, _)| *k == w.kind && *a == w.at)
            {
                Some((_, _, ws)) => ws.push(w),
                None => groups.push((&w.kind, &w.at, vec![w])),
            }
        }
        for (i, (kind, at, ws)) in groups.iter().take(WAIT_GROUPS).enumerate() {
            f.write_str(if i == 0 { ": " } else { ", " })?;
            match ws.as_slice() {
                [one] => f.write_str(&one.what)?,
                many => write!(f, "{} {kind}s{at}", many.len())?,
            }
        }
        let rest: usize = groups.iter().skip(WAIT_GROUPS).map(|g| g.2.len()).sum();
        if rest > 0 {
            write!(f, ", and {rest} more")?;
        }
        Ok(())
    }
}

impl fmt::Display for Resource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Resource::Program(n)
            | Resource::Module(n)
            | Resource::Function(n)
            | Resource::Code(n) => f.write_str(n),
            Resource::Loop(n) => f.write_str(n),
            Resource::Thread(t) => write!(f, "thread {t}"),
            Resource::CallPath(p) => f.write_str(&p.join(" > ")),
            Resource::Lock {
                addr,
                name: Some(n),
            } => write!(f, "lock {n} ({addr:#x})"),
            Resource::Lock { addr, name: None } => write!(f, "lock {addr:#x}"),
            Resource::File { fd, path } => write!(f, "fd {fd} ({path})"),
            Resource::Wait(w) => write!(f, "{w}"),
        }
    }
}

/// Where an experiment measures: resources from the outermost in.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, serde::Serialize)]
#[serde(transparent)]
pub struct Focus(pub Vec<Resource>);

impl Focus {
    /// This focus narrowed by one more resource.
    pub fn with(&self, r: Resource) -> Focus {
        let mut v = self.0.clone();
        v.push(r);
        Focus(v)
    }

    /// The innermost resource.
    pub fn last(&self) -> Option<&Resource> {
        self.0.last()
    }

    /// The thread named, if any.
    pub fn thread(&self) -> Option<u32> {
        self.0.iter().find_map(|r| match r {
            Resource::Thread(t) => Some(*t),
            _ => None,
        })
    }

    /// The call path from the thread's entry this focus selects, if it selects one: its
    /// `Function` steps, or the [`Resource::CallPath`] below a [`Resource::Code`] function.
    /// `None` for a function wherever it is called from.
    pub fn call_path(&self) -> Option<Vec<&str>> {
        if let Some(p) = self.0.iter().find_map(|r| match r {
            Resource::CallPath(p) => Some(p),
            _ => None,
        }) {
            return Some(p.iter().map(String::as_str).collect());
        }
        if self.0.iter().any(|r| matches!(r, Resource::Code(_))) {
            return None;
        }
        Some(
            self.0
                .iter()
                .filter_map(|r| match r {
                    Resource::Function(f) => Some(f.as_str()),
                    _ => None,
                })
                .collect(),
        )
    }
}

impl fmt::Display for Focus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, r) in self.0.iter().enumerate() {
            if i > 0 {
                f.write_str(" > ")?;
            }
            write!(f, "{r}")?;
        }
        Ok(())
    }
}

/// A hypothesis at a focus.
#[derive(Clone, Debug, PartialEq, Eq, Hash, serde::Serialize)]
pub struct Experiment {
    /// Why the program might be slow.
    pub hypothesis: Hypothesis,
    /// Where it might be.
    pub focus: Focus,
}

/// What a [`Lab`] has measured of a running experiment.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Reading {
    /// The fraction of wall time the hypothesis' metric took at the focus, since the
    /// instrumentation settled.
    pub fraction: f64,
    /// Seconds measured.
    pub seconds: f64,
    /// Why the reading may mislead, kept in the graph when the experiment is judged false.
    pub note: Option<&'static str>,
    /// The measurement could not see the focus at all (a loop running since before its timer
    /// went in): judged false, the experiment is refined all the same, since its parts may be
    /// measurable where it was not.
    pub opaque: bool,
}

/// How a [`Lab`] measures an experiment.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Method {
    /// From samples: `/proc`'s counts, and the program's stacks for foci below a thread.
    Samples,
    /// With instrumentation inserted for it: a loop timer, or a timer of a call path's last
    /// call.
    Probe,
    /// A call path, with instrumentation inserted for its whole length (iPath): a timer of the
    /// path's function whose activations count only when the return addresses on their
    /// stack are the path's.
    PathProbe,
}

/// A running experiment's handle in its [`Lab`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct ProbeId(pub u64);

/// What the search needs of the world: the program's structure, and measurements.
pub trait Lab {
    /// The children of `focus` worth testing for `hypothesis`, each with a priority (higher is
    /// tested first; stack samples are a good source). Empty when the focus cannot be refined;
    /// `None` when the lab cannot tell yet (it lacks samples), so the search asks again.
    fn refine(&mut self, hypothesis: Hypothesis, focus: &Focus) -> Option<Vec<(Focus, f64)>>;
    /// True while the lab is preparing what `focus`' refinement for `hypothesis` needs and
    /// will have it (the analysis of a large module, which finds its loops, runs in the
    /// background): the search keeps asking past its bounded wait, within its time limit,
    /// rather than concluding at the focus for want of its parts.
    fn preparing(&mut self, hypothesis: Hypothesis, focus: &Focus) -> bool {
        let _ = (hypothesis, focus);
        false
    }
    /// The predicted cost of measuring `e`: a fraction of the program's time. `None` when it
    /// cannot be predicted until the experiments running now have told more (how often their
    /// probes are entered): it waits for them.
    fn predicted_cost(&mut self, e: &Experiment) -> Option<f64>;
    /// The cost the running experiment `probe` has been measured to take, a fraction of the
    /// program's time, once known: the search removes a probe that turns out over its budget.
    fn measured_cost(&mut self, probe: ProbeId) -> Option<f64> {
        let _ = probe;
        None
    }
    /// The share of the program's time the lab's probes have taken since the search began
    /// (what the ones taken out paid and what the ones in have paid so far), over the share
    /// of the limit the lab leaves its probes (the stack samples keep the rest): while it is
    /// at the cost limit, nothing that costs starts, so that the search's cost over its whole
    /// run stays under the limit too, however many probes turn out too costly and come out.
    fn spent(&mut self) -> f64 {
        0.0
    }
    /// True once the process measured has ended: an experiment that cannot start then did
    /// not fail, the search is over (it stays untested).
    fn ended(&mut self) -> bool {
        false
    }
    /// False while `e` cannot start at once, and what it waits for is being prepared in the
    /// background (what a probe's placement in a large module is planned from): the search
    /// goes on with the other experiments and asks again at its next step, rather than wait
    /// inside [`Lab::start`], the whole search and the program's stack samples with it.
    fn can_start(&mut self, e: &Experiment) -> bool {
        let _ = e;
        true
    }
    /// Starts measuring `e`.
    fn start(&mut self, e: &Experiment) -> Result<ProbeId, String>;
    /// What `probe` has measured since it settled; `None` before it has.
    fn read(&mut self, probe: ProbeId) -> Option<Reading>;
    /// True while what the running experiment `probe`'s first reading waits for is still
    /// coming in (stack samples, which a loaded machine leaves the sampler time for slowly):
    /// the search waits for that reading past its bounded waits, within its time limit,
    /// rather than judging the experiment false for the machine's slowness.
    fn gathering(&mut self, probe: ProbeId) -> bool {
        let _ = probe;
        false
    }
    /// Stops measuring and removes the instrumentation.
    fn stop(&mut self, probe: ProbeId);
    /// How the experiment `probe` is measured.
    fn method(&self, probe: ProbeId) -> Method {
        let _ = probe;
        Method::Samples
    }
}

/// How the search runs.
#[derive(Clone, Debug, PartialEq)]
pub struct Settings {
    /// The largest predicted cost of all running experiments together (fraction).
    pub cost_limit: f64,
    /// Seconds a reading must cover before it counts.
    pub settle: f64,
    /// A reading within `threshold * (1 ± hysteresis)` is not conclusive yet.
    pub hysteresis: f64,
    /// Seconds after which an inconclusive experiment is judged false.
    pub max_wait: f64,
    /// Thresholds by hypothesis; the default where one is missing.
    pub thresholds: Vec<(Hypothesis, f64)>,
}

impl Default for Settings {
    fn default() -> Settings {
        Settings {
            cost_limit: 0.05,
            settle: 1.0,
            hysteresis: 0.05,
            max_wait: 6.0,
            thresholds: Vec::new(),
        }
    }
}

impl Settings {
    /// The threshold of `h`.
    pub fn threshold(&self, h: Hypothesis) -> f64 {
        self.thresholds
            .iter()
            .rev()
            .find(|(x, _)| *x == h)
            .map_or_else(|| h.default_threshold(), |(_, t)| *t)
    }
}

/// Where an experiment stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum State {
    /// Not started (waiting for its turn under the cost limit, or never reached).
    Untested,
    /// Measuring.
    Active,
    /// Judged true: the measured fraction passed the threshold (beyond the hysteresis band).
    True,
    /// Judged false: the fraction stayed below the threshold, or no conclusive reading came in the bounded wait.
    False,
    /// Its instrumentation could not be inserted.
    Failed,
    /// Not tested: its instrumentation costs (or, from what it was measured to cost before,
    /// would cost) more than the cost limit allows; removed as soon as that was known.
    Refused,
}

/// One node of the search history graph.
#[derive(Clone, Debug, serde::Serialize)]
pub struct Node {
    /// The hypothesis and focus tested.
    pub experiment: Experiment,
    /// Where it stands.
    pub state: State,
    /// The last fraction measured.
    pub fraction: Option<f64>,
    /// The node this one refines.
    pub parent: Option<usize>,
    /// The order untested nodes start in, highest first: the lab's priority for a refinement, infinity for the roots.
    pub priority: f64,
    /// Why a node failed or was judged without a conclusive reading.
    pub note: Option<String>,
    /// Seconds into the search when it was judged true or false.
    pub judged: Option<f64>,
    /// How it was measured, once started.
    pub measured: Option<Method>,
    #[serde(skip)]
    probe: Option<ProbeId>,
    #[serde(skip)]
    started: f64,
    /// When its lab first gave a reading (samples enough to tell): the bounded wait for a
    /// conclusive one counts from then.
    #[serde(skip)]
    first_read: Option<f64>,
    /// Its last reading: what it is judged on if the program ends while it runs.
    #[serde(skip)]
    last: Option<Reading>,
    /// For a true node: when it was judged, while the lab has not yet refined it along the
    /// "where" axis (it may lack the samples to; it is asked again each step).
    #[serde(skip)]
    unrefined: Option<f64>,
}

/// A conclusion: a true experiment none of whose refinements is true.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct Finding {
    /// Why the program is slow.
    pub hypothesis: Hypothesis,
    /// Where.
    pub focus: Focus,
    /// The fraction of wall time last measured there (0 to 1, per thread).
    pub fraction: f64,
    /// How it was measured.
    pub measured: Option<Method>,
}

/// A search in progress.
#[derive(Debug)]
pub struct Search {
    settings: Settings,
    nodes: Vec<Node>,
    /// The longest an experiment took to start so far (inserting its probes, analysing the
    /// code they go into): none starts that would not be in before the deadline.
    slowest_start: std::time::Duration,
    /// The process ended under the search ([`Lab::ended`]): nothing more starts, and the
    /// search is over.
    ended: bool,
}

impl Search {
    /// A search testing every top-level hypothesis at `root` (the program or one thread).
    pub fn new(settings: Settings, root: Focus) -> Search {
        let nodes = Hypothesis::TOP
            .into_iter()
            .map(|hypothesis| Node {
                experiment: Experiment {
                    hypothesis,
                    focus: root.clone(),
                },
                state: State::Untested,
                fraction: None,
                parent: None,
                priority: f64::INFINITY,
                note: None,
                probe: None,
                started: 0.0,
                first_read: None,
                last: None,
                unrefined: None,
                judged: None,
                measured: None,
            })
            .collect();
        Search {
            settings,
            nodes,
            slowest_start: std::time::Duration::ZERO,
            ended: false,
        }
    }

    /// The search history graph so far, roots first, each node after its parent.
    pub fn nodes(&self) -> &[Node] {
        &self.nodes
    }

    /// True when nothing is measuring and nothing is left to test or refine.
    pub fn done(&self) -> bool {
        !self
            .nodes
            .iter()
            .any(|n| matches!(n.state, State::Active | State::Untested) || n.unrefined.is_some())
    }

    /// The cost of the running experiments: each one's measured cost where known, its
    /// predicted cost otherwise.
    fn running_cost(&self, lab: &mut dyn Lab) -> f64 {
        self.nodes
            .iter()
            .filter(|n| n.state == State::Active)
            .map(|n| {
                n.probe
                    .and_then(|p| lab.measured_cost(p))
                    .or_else(|| lab.predicted_cost(&n.experiment))
                    .unwrap_or(0.0)
            })
            .sum()
    }

    /// Keeps what runs within the cost limit, from what the running experiments were measured
    /// to cost: one that alone costs more than the limit is removed and refused; while all
    /// together cost more, the latest started of those measured is removed and waits again
    /// (its cost now known, it starts when there is room for it).
    fn enforce_budget(&mut self, lab: &mut dyn Lab, now: f64) {
        let limit = self.settings.cost_limit;
        let mut measured: Vec<(usize, f64)> = Vec::new();
        for i in 0..self.nodes.len() {
            let Some(probe) = self.nodes[i].probe else {
                continue;
            };
            let Some(c) = lab.measured_cost(probe) else {
                continue;
            };
            if c <= limit {
                measured.push((i, c));
                continue;
            }
            lab.stop(probe);
            let n = &mut self.nodes[i];
            n.probe = None;
            n.state = State::Refused;
            n.judged = Some(now);
            n.note = Some(format!(
                "its probe cost {:.1}% of the program's time, over the {:.1}% the cost limit \
                 allows: removed",
                c * 100.0,
                limit * 100.0
            ));
        }
        let mut total = self.running_cost(lab);
        while total > limit {
            let Some(k) = (0..measured.len()).max_by(|&a, &b| {
                let (na, nb) = (&self.nodes[measured[a].0], &self.nodes[measured[b].0]);
                na.started
                    .total_cmp(&nb.started)
                    .then(measured[a].0.cmp(&measured[b].0))
            }) else {
                break;
            };
            let (i, c) = measured.swap_remove(k);
            if let Some(probe) = self.nodes[i].probe.take() {
                lab.stop(probe);
            }
            let n = &mut self.nodes[i];
            n.state = State::Untested;
            n.fraction = None;
            n.first_read = None;
            n.last = None;
            n.measured = None;
            n.note = Some(format!(
                "deferred: its probe cost {:.1}% of the program's time, more than the cost \
                 limit left beside the others",
                c * 100.0
            ));
            total -= c;
        }
    }

    /// Advances the search at time `now` (seconds): judges the experiments whose readings are
    /// conclusive, refines the true ones, and starts waiting experiments, likeliest first, as
    /// far as the cost limit allows. Returns true while there is work left.
    pub fn step(&mut self, lab: &mut dyn Lab, now: f64) -> bool {
        self.step_until(lab, now, None)
    }

    /// [`Search::step`], starting no experiment once `deadline` has passed, nor one that would
    /// not be in by then, as long as the slowest start so far took: starting one inserts its
    /// probes, which in a large program can take seconds, and the search's time limit counts
    /// them.
    pub fn step_until(
        &mut self,
        lab: &mut dyn Lab,
        now: f64,
        deadline: Option<std::time::Instant>,
    ) -> bool {
        self.step_within(lab, now, deadline, None)
    }

    /// [`Search::step_until`], starting nothing more once `interrupted` is set (Ctrl-C: an
    /// insertion going on when it came ends first, then the search). Returns false, the
    /// search over, once nothing is measuring and nothing more can start before the
    /// deadline: the experiments left untested would never start, and the search used to
    /// wait for the deadline all the same.
    pub fn step_within(
        &mut self,
        lab: &mut dyn Lab,
        now: f64,
        deadline: Option<std::time::Instant>,
        interrupted: Option<&std::sync::atomic::AtomicBool>,
    ) -> bool {
        for i in 0..self.nodes.len() {
            if self.nodes[i].state != State::Active {
                continue;
            }
            let probe = self.nodes[i].probe.expect("an active node has a probe");
            let h = self.nodes[i].experiment.hypothesis;
            let threshold = self.settings.threshold(h);
            let reading = lab.read(probe);
            if let Some(r) = reading {
                self.nodes[i].fraction = Some(r.fraction);
                self.nodes[i].last = Some(r);
                self.nodes[i].first_read.get_or_insert(now);
            }
            let verdict = match reading {
                Some(r) if r.seconds >= self.settings.settle => {
                    if r.fraction >= threshold * (1.0 + self.settings.hysteresis) {
                        Some(State::True)
                    } else if r.fraction <= threshold * (1.0 - self.settings.hysteresis) {
                        self.nodes[i].note = r.note.map(str::to_owned);
                        if r.opaque {
                            self.nodes[i].unrefined = Some(now);
                        }
                        Some(State::False)
                    } else {
                        None
                    }
                }
                _ => None,
            };
            // The bounded wait counts from the first reading: on a loaded machine the samples
            // an experiment needs come slowly, and a lack of them is no evidence. One that
            // never gets a reading is given up after a few such waits, unless what it waits
            // for is still coming in ([`Lab::gathering`]): at a load of 25 the dozen stack
            // samples a thread's reading needs took 16 s.
            let max = self.settings.max_wait;
            let unread = verdict.is_none()
                && self.nodes[i].first_read.is_none()
                && now - self.nodes[i].started >= UNREAD_WAITS * max
                && !lab.gathering(probe);
            let verdict = verdict.or_else(|| {
                let note = match self.nodes[i].first_read {
                    Some(t) if now - t >= max => format!("no conclusive reading within {max} s"),
                    None if unread => format!("no reading within {} s", UNREAD_WAITS * max),
                    _ => return None,
                };
                self.nodes[i].note = Some(note);
                Some(State::False)
            });
            let Some(verdict) = verdict else { continue };
            lab.stop(probe);
            self.nodes[i].probe = None;
            self.nodes[i].state = verdict;
            self.nodes[i].judged = Some(now);
            // A qualifying refinement (RunQueue) is asked at every focus what it qualifies
            // reaches, a "why" child of each true CPUBound, and not refined along "where" by
            // itself: its own chain, from stack samples that skip loops, named the same place
            // a second way (xz: RunQueue three times over one call chain, with and without
            // the loops the CPU's refinement went through).
            if verdict == State::True && self.nodes[i].experiment.hypothesis.replaces_parent() {
                let Experiment { hypothesis, focus } = self.nodes[i].experiment.clone();
                let why = hypothesis
                    .children()
                    .iter()
                    .map(|&h| {
                        (
                            Experiment {
                                hypothesis: h,
                                focus: focus.clone(),
                            },
                            f64::INFINITY,
                        )
                    })
                    .collect();
                self.add_children(i, why);
                self.nodes[i].unrefined = Some(now);
            }
        }
        self.enforce_budget(lab, now);
        self.refine_where(lab, now);
        let out_of_time = !self.start_waiting(lab, now, deadline, interrupted);
        let measuring = self.nodes.iter().any(|n| n.state == State::Active);
        !self.done() && !self.ended && (!out_of_time || measuring)
    }

    /// Asks the lab for the "where" refinements of every true node that has none yet; a node
    /// the lab still cannot refine after the bounded wait stays a conclusion, unless the lab
    /// is still preparing its refinement ([`Lab::preparing`]).
    fn refine_where(&mut self, lab: &mut dyn Lab, now: f64) {
        for i in 0..self.nodes.len() {
            let Some(judged) = self.nodes[i].unrefined else {
                continue;
            };
            let Experiment { hypothesis, focus } = self.nodes[i].experiment.clone();
            let refined = lab.refine(hypothesis, &focus);
            if refined.is_some()
                || (now - judged >= self.settings.max_wait && !lab.preparing(hypothesis, &focus))
            {
                self.nodes[i].unrefined = None;
            }
            let children: Vec<(Experiment, f64)> = refined
                .unwrap_or_default()
                .into_iter()
                .map(|(f, p)| {
                    (
                        Experiment {
                            hypothesis,
                            focus: f,
                        },
                        p,
                    )
                })
                .collect();
            self.add_children(i, children);
        }
    }

    /// Adds `children` of node `i` that the graph does not hold yet.
    fn add_children(&mut self, i: usize, children: Vec<(Experiment, f64)>) {
        for (experiment, priority) in children {
            if self.nodes.iter().any(|n| n.experiment == experiment) {
                continue;
            }
            self.nodes.push(Node {
                experiment,
                state: State::Untested,
                fraction: None,
                parent: Some(i),
                priority,
                note: None,
                probe: None,
                started: 0.0,
                first_read: None,
                last: None,
                unrefined: None,
                judged: None,
                measured: None,
            });
        }
    }

    /// Starts untested experiments in priority order while the predicted cost stays under the
    /// limit. One whose predicted cost alone is over the limit is refused without being
    /// started; one whose cost cannot be predicted yet waits for the running experiments to
    /// tell more, unless nothing runs. False when it stopped for the deadline or
    /// `interrupted`: nothing more will start.
    fn start_waiting(
        &mut self,
        lab: &mut dyn Lab,
        now: f64,
        deadline: Option<std::time::Instant>,
        interrupted: Option<&std::sync::atomic::AtomicBool>,
    ) -> bool {
        let mut waiting: Vec<usize> = (0..self.nodes.len())
            .filter(|&i| self.nodes[i].state == State::Untested)
            .collect();
        waiting.sort_by(|&a, &b| {
            self.nodes[b]
                .priority
                .total_cmp(&self.nodes[a].priority)
                .then(a.cmp(&b))
        });
        let mut cost = self.running_cost(lab);
        let mut running = self
            .nodes
            .iter()
            .filter(|n| n.state == State::Active)
            .count();
        // What the probes have spent so far, asked once a step.
        let mut spent: Option<f64> = None;
        let stopped = || interrupted.is_some_and(|f| f.load(std::sync::atomic::Ordering::SeqCst));
        if stopped()
            || deadline.is_some_and(|d| std::time::Instant::now() + self.slowest_start >= d)
        {
            return false;
        }
        for i in waiting {
            let begun = std::time::Instant::now();
            if stopped() || deadline.is_some_and(|d| begun + self.slowest_start >= d) {
                return false;
            }
            if !lab.can_start(&self.nodes[i].experiment) {
                continue;
            }
            let limit = self.settings.cost_limit;
            let predicted = lab.predicted_cost(&self.nodes[i].experiment);
            if predicted != Some(0.0) && *spent.get_or_insert_with(|| lab.spent()) >= limit {
                continue;
            }
            let c = match predicted {
                None if running > 0 => continue,
                None => 0.0,
                Some(c) if c > limit => {
                    let n = &mut self.nodes[i];
                    n.state = State::Refused;
                    n.judged = Some(now);
                    n.note = Some(format!(
                        "its probe would cost {:.1}% of the program's time (as measured \
                         before), over the {:.1}% the cost limit allows: not inserted",
                        c * 100.0,
                        limit * 100.0
                    ));
                    continue;
                }
                Some(c) if running > 0 && cost + c > limit => continue,
                Some(c) => c,
            };
            let started = lab.start(&self.nodes[i].experiment);
            self.slowest_start = self.slowest_start.max(begun.elapsed());
            match started {
                Ok(probe) => {
                    self.nodes[i].measured = Some(lab.method(probe));
                    self.nodes[i].probe = Some(probe);
                    self.nodes[i].state = State::Active;
                    // Started once its probes are in: a start that took long (a timer
                    // inserted under load took 26 s) leaves its reading the waits it is due,
                    // rather than finding them spent ("no reading within 18 s" as it began).
                    self.nodes[i].started = now + begun.elapsed().as_secs_f64();
                    cost += c;
                    running += 1;
                }
                // The process ended under the search: nothing more starts.
                Err(_) if lab.ended() => {
                    self.ended = true;
                    break;
                }
                Err(why) => {
                    self.nodes[i].state = State::Failed;
                    self.nodes[i].note = Some(why);
                }
            }
        }
        true
    }

    /// The program ended under the search, at `now`: no more readings will come, so each
    /// running experiment with enough of one is judged on what it read: started at least the
    /// settle time ago, with a reading of at least [`END_WINDOW`] of it (a step waits for a
    /// whole settle time of reading, which a probe taking turns or a refinement waiting for
    /// samples may not have had), true above the threshold's hysteresis band, false below it.
    /// The lab's reading now (what it sampled up to the end) is taken where it still has one,
    /// else the last one the search saw (a probe's values went with the process). An
    /// experiment judged so is not refined (its parts can no longer be measured); one whose
    /// reading was inside the band, or too short, or none, stays untested. Each says, in its
    /// note, that the program ended. Then every experiment is stopped ([`Search::stop`]).
    pub fn program_ended(&mut self, lab: &mut dyn Lab, now: f64) {
        let (settle, band) = (self.settings.settle, self.settings.hysteresis);
        for i in 0..self.nodes.len() {
            let n = &self.nodes[i];
            let Some(probe) = n.probe.filter(|_| n.state == State::Active) else {
                continue;
            };
            let threshold = self.settings.threshold(n.experiment.hypothesis);
            let reading = lab.read(probe).or(n.last);
            let n = &mut self.nodes[i];
            if let Some(r) = reading {
                n.fraction = Some(r.fraction);
                n.last = Some(r);
            }
            let started = n.started;
            let enough = |r: &Reading| now - started >= settle && r.seconds >= settle * END_WINDOW;
            let (state, note) = match reading {
                Some(r) if enough(&r) && r.fraction >= threshold * (1.0 + band) => (
                    State::True,
                    format!(
                        "judged as the program ended, on {:.1} s of reading; not refined",
                        r.seconds
                    ),
                ),
                Some(r) if enough(&r) && r.fraction <= threshold * (1.0 - band) => (
                    State::False,
                    format!(
                        "judged as the program ended, on {:.1} s of reading{}",
                        r.seconds,
                        r.note.map_or_else(String::new, |x| format!("; {x}"))
                    ),
                ),
                Some(r) if enough(&r) => (
                    State::Untested,
                    format!(
                        "the program ended with its reading inside the hysteresis band, \
                         after {:.1} s",
                        r.seconds
                    ),
                ),
                Some(r) => (
                    State::Untested,
                    format!(
                        "the program ended {:.1} s into its reading, {:.1} s after it \
                         started: too short to judge",
                        r.seconds,
                        now - started
                    ),
                ),
                None => (
                    State::Untested,
                    "the program ended before its first reading".to_owned(),
                ),
            };
            lab.stop(probe);
            n.probe = None;
            n.state = state;
            n.note = Some(note);
            if state != State::Untested {
                n.judged = Some(now);
            }
        }
        self.ended = true;
        self.stop(lab);
    }

    /// Stops every running experiment (the search was cut short); their nodes stay untested.
    pub fn stop(&mut self, lab: &mut dyn Lab) {
        for n in &mut self.nodes {
            n.unrefined = None;
            if let Some(p) = n.probe.take() {
                lab.stop(p);
                n.state = State::Untested;
            }
        }
    }

    /// The conclusions: true nodes with no true refinement, largest fraction first.
    pub fn findings(&self) -> Vec<Finding> {
        let mut out: Vec<Finding> = self
            .nodes
            .iter()
            .enumerate()
            .filter(|(i, n)| {
                // A qualifying refinement (RunQueue) stands only where what it qualifies
                // (CPUBound) was not judged false at the same focus.
                let h = n.experiment.hypothesis;
                let unqualified = !h.replaces_parent()
                    && self.nodes.iter().any(|p| {
                        Some(p.experiment.hypothesis) == h.parent()
                            && p.experiment.focus == n.experiment.focus
                            && p.state == State::False
                    });
                // Not a conclusion when a true node refines it: a child, or a deeper focus
                // for the same hypothesis reached another way.
                !unqualified
                    && n.state == State::True
                    && !self.nodes.iter().any(|c| {
                        c.state == State::True
                            && ((c.parent == Some(*i)
                                && (c.experiment.hypothesis == n.experiment.hypothesis
                                    || c.experiment.hypothesis.replaces_parent()))
                                || (c.experiment.hypothesis == n.experiment.hypothesis
                                    && c.experiment.focus.0.len() > n.experiment.focus.0.len()
                                    && c.experiment.focus.0.starts_with(&n.experiment.focus.0))
                                || (c.experiment.hypothesis == n.experiment.hypothesis
                                    && extends_path(&c.experiment.focus, &n.experiment.focus))
                                || (c.experiment.hypothesis == n.experiment.hypothesis
                                    && along_path(&c.experiment.focus, &n.experiment.focus)))
                    })
            })
            .map(|(_, n)| Finding {
                hypothesis: n.experiment.hypothesis,
                focus: n.experiment.focus.clone(),
                fraction: n.fraction.unwrap_or(0.0),
                measured: n.measured,
            })
            .collect();
        out.sort_by(|a, b| b.fraction.total_cmp(&a.fraction));
        out
    }

    /// How many experiments were judged.
    pub fn tested(&self) -> usize {
        self.nodes
            .iter()
            .filter(|n| matches!(n.state, State::True | State::False))
            .count()
    }
}

/// True when `deeper` is a call path reached through a [`Resource::Code`] function (iPath) that
/// goes on below the call path `chain` selects, in the same thread: the function found by
/// its callers covers the caller that led to it.
fn extends_path(deeper: &Focus, chain: &Focus) -> bool {
    if !deeper.0.iter().any(|r| matches!(r, Resource::CallPath(_)))
        || deeper.thread() != chain.thread()
        || !matches!(chain.last(), Some(Resource::Function(_)))
    {
        return false;
    }
    match (deeper.call_path(), chain.call_path()) {
        (Some(d), Some(c)) => d.len() > c.len() && d.starts_with(&c),
        _ => false,
    }
}

/// True when `chain`, a chain of calls from the thread's entry, names along one call path what
/// `anywhere` names of a function wherever it is called from: `anywhere` is a
/// [`Resource::Code`] function (with no call path chosen) and its loops, `chain` ends in the same
/// function, called directly, and the same loops, in the same thread. The path names which
/// caller the time comes through (`main > crunch > work > loop_1`, not a decoy calling `work`
/// too), which `work > loop_1` does not.
fn along_path(chain: &Focus, anywhere: &Focus) -> bool {
    /// The resource before a focus' trailing loops, and those loops.
    fn tail(f: &Focus) -> (Option<&Resource>, &[Resource]) {
        let n =
            f.0.iter()
                .rev()
                .take_while(|r| matches!(r, Resource::Loop(_)))
                .count();
        let at = f.0.len() - n;
        (at.checked_sub(1).map(|i| &f.0[i]), &f.0[at..])
    }
    if chain.thread() != anywhere.thread()
        || anywhere
            .0
            .iter()
            .any(|r| matches!(r, Resource::CallPath(_)))
        || chain.0.iter().any(|r| matches!(r, Resource::Code(_)))
    {
        return false;
    }
    match (tail(chain), tail(anywhere)) {
        ((Some(Resource::Function(a)), la), (Some(Resource::Code(b)), lb)) => a == b && la == lb,
        _ => false,
    }
}

/// A finding as scripts read it: the hypothesis, the focus outermost first (the thread apart),
/// and the fraction measured.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct FindingOut {
    /// Why the program is slow.
    pub hypothesis: Hypothesis,
    /// The focus's resources as text, outermost first, the thread left out.
    pub focus: Vec<String>,
    /// The fraction of wall time measured there.
    pub fraction: f64,
    /// The thread the focus names, if any.
    pub thread: Option<u32>,
    /// How it was measured: `samples`, or `probe` (a loop timer or a call path's timer).
    pub measured: Option<Method>,
    /// For a call path measured by a probe: the call its timer timed, `CALLER > CALLEE`, the
    /// path's last step alone (its earlier steps are not checked: the timer times every path
    /// ending in that call).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub timed_call: Option<String>,
    /// For a wait on several descriptors (the focus ends in one): the call, the epoll
    /// instance, and each descriptor with what it is; the focus' last entry summarises them.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub waits_on: Option<WaitSet>,
}

/// The call a probe timed for a call path focus measured by one: its last step.
fn timed_call(focus: &Focus, measured: Option<Method>) -> Option<String> {
    let Some(Resource::CallPath(p)) = focus.last() else {
        return None;
    };
    match (measured, p.as_slice()) {
        (Some(Method::Probe), [.., caller, callee]) => Some(format!("{caller} > {callee}")),
        _ => None,
    }
}

/// How a node or finding measured by `measured` is marked in text: `  [probe]`, or with the
/// call a call path's timer timed, or `  [probe of the whole path]`.
fn mark(measured: Option<Method>, timed_call: Option<&str>) -> String {
    match (measured, timed_call) {
        (Some(Method::Probe), Some(c)) => format!("  [probe of {c} only]"),
        (Some(Method::Probe), None) => "  [probe]".into(),
        (Some(Method::PathProbe), _) => "  [probe of the whole path]".into(),
        _ => String::new(),
    }
}

impl From<&Finding> for FindingOut {
    fn from(f: &Finding) -> FindingOut {
        FindingOut {
            hypothesis: f.hypothesis,
            focus: f
                .focus
                .0
                .iter()
                .filter(|r| !matches!(r, Resource::Thread(_)))
                .map(Resource::to_string)
                .collect(),
            fraction: f.fraction,
            thread: f.focus.0.iter().find_map(|r| match r {
                Resource::Thread(t) => Some(*t),
                _ => None,
            }),
            measured: f.measured,
            timed_call: timed_call(&f.focus, f.measured),
            waits_on: match f.focus.last() {
                Some(Resource::Wait(w)) => Some(w.clone()),
                _ => None,
            },
        }
    }
}

/// One node of the search history graph as scripts read it.
#[derive(Clone, Debug, serde::Serialize)]
pub struct NodeOut {
    /// Its index in [`Report::graph`].
    pub id: usize,
    /// The node it refines; `None` for a root.
    pub parent: Option<usize>,
    /// The hypothesis tested.
    pub hypothesis: Hypothesis,
    /// The focus as text, outermost first (the thread included).
    pub focus: Vec<String>,
    /// Where the experiment stands.
    pub state: State,
    /// The last fraction measured, if any.
    pub fraction: Option<f64>,
    /// Why it failed or was judged without a conclusive reading.
    pub note: Option<String>,
    /// Seconds into the search when it was judged, if it was.
    pub judged: Option<f64>,
    /// How it was measured, once started: `samples` or `probe`.
    pub measured: Option<Method>,
    /// For a call path measured by a probe: the call its timer timed (see
    /// [`FindingOut::timed_call`]).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub timed_call: Option<String>,
}

/// The CPUs gsh kept its threads on during a search, off the program's ([`cpus::keep_off`]).
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct KeptOffOut {
    /// gsh's, as `taskset -c` lists them.
    pub gsh: String,
    /// The program's.
    pub program: String,
}

/// `seconds` of running time in the unit that reads best: of a program that hardly ran, a
/// large share of its running may be a fraction of a millisecond.
fn lost_time(seconds: f64) -> String {
    if seconds >= 0.1 {
        format!("{seconds:.2} s")
    } else if seconds >= 1e-4 {
        format!("{:.1} ms", seconds * 1e3)
    } else {
        format!("{:.0} us", seconds * 1e6)
    }
}

/// What a finished (or interrupted) search reports.
#[derive(Clone, Debug, serde::Serialize)]
pub struct Report {
    /// The conclusions, largest fraction first.
    pub findings: Vec<FindingOut>,
    /// How many experiments were judged true or false.
    pub tested: usize,
    /// The search's estimate of how much it slowed the program: the running time its stops
    /// took from the program's threads ([`Report::stop_cost`]) plus the time its probes ran
    /// ([`probes::ProbeStats::cost`]) and the time their inserts and removals held it
    /// ([`probes::ProbeStats::change_cost`]), as a share of the time the threads would have
    /// run without the search (see [`Cost`]).
    pub overhead: f64,
    /// The fraction of the wall time the program was stopped for stack samples: at each
    /// stop, the mean over its threads of the time each was held, from when the tracer saw
    /// it stopped to its resume (`--cost` limits each stop's longest, so this stays under
    /// it). Not from asking for the stop: a thread not on a CPU then waits for one to take
    /// the stop, and its `schedstat` counts that as waiting, as it does the wait to run
    /// again after the resume.
    pub stopped: f64,
    /// The share of the threads' running time the stops took: what they ran less while
    /// sampled than in the sampler's quiet turns ([`stacks::StopTurns`]), and never less
    /// than what they would have run while held ([`stacks::imposed`]).
    pub stop_cost: f64,
    /// The share of one CPU gsh's `/proc` sampling used meanwhile.
    pub sampler_cpu: f64,
    /// Seconds gsh's own work (analysis, starting probes) waited for the search's cost to
    /// fall under its limit ([`pace::Pace`]): what the limit added to the search's time.
    pub held: f64,
    /// The share of one CPU gsh used meanwhile, all its work together.
    pub gsh_cpu: f64,
    /// The program's threads' time runnable without a CPU, summed, as a share of the wall
    /// time.
    pub waited: f64,
    /// The share of the threads' running time gsh's own CPU time took by competing with them
    /// for the CPUs ([`sample::Competition::took`]), where it counted in
    /// [`Report::stop_cost`] (which holds it).
    pub competed: f64,
    /// Seconds the program's threads would have run without the search, summed: what
    /// [`Report::overhead`] is a share of (of a program that hardly ran, a large share of
    /// little: an idle redis-server read 56.9% of its 0.01 s).
    pub running: f64,
    /// How many times the process was stopped for stack samples.
    pub stack_samples: u64,
    /// Where gsh kept its threads off the program's CPUs during the search
    /// ([`cpus::keep_off`]): the CPUs it ran on and the program's (`taskset`'s lists).
    pub kept_off: Option<KeptOffOut>,
    /// How many of the threads' samples in them were given again without stopping the
    /// thread: it had not run since its last sample ([`stacks::Taken::Again`]).
    pub reused: u64,
    /// How many were walked without stopping the thread, asleep in a system call
    /// ([`stacks::Taken::Asleep`]).
    pub asleep: u64,
    /// The loop timers the search inserted and removed, and what they cost.
    pub probes: probes::ProbeStats,
    /// Wall seconds the search ran.
    pub seconds: f64,
    /// Every node of the search history graph, in creation order.
    pub graph: Vec<NodeOut>,
}

impl Search {
    /// The report of this search after `seconds`, with the overhead observed.
    pub fn report(&self, seconds: f64, overhead: f64) -> Report {
        Report {
            findings: self.findings().iter().map(FindingOut::from).collect(),
            tested: self.tested(),
            overhead,
            stopped: 0.0,
            stop_cost: 0.0,
            sampler_cpu: 0.0,
            held: 0.0,
            gsh_cpu: 0.0,
            waited: 0.0,
            competed: 0.0,
            running: 0.0,
            stack_samples: 0,
            kept_off: None,
            reused: 0,
            asleep: 0,
            probes: probes::ProbeStats::default(),
            seconds,
            graph: self
                .nodes
                .iter()
                .enumerate()
                .map(|(id, n)| NodeOut {
                    id,
                    parent: n.parent,
                    hypothesis: n.experiment.hypothesis,
                    focus: n
                        .experiment
                        .focus
                        .0
                        .iter()
                        .map(Resource::to_string)
                        .collect(),
                    state: n.state,
                    fraction: n.fraction,
                    note: n.note.clone(),
                    judged: n.judged,
                    measured: n.measured,
                    timed_call: timed_call(&n.experiment.focus, n.measured),
                })
                .collect(),
        }
    }
}

/// What the search cost the program, from what it measured of itself: the inputs of a
/// [`Report`]'s overhead.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Cost {
    /// Seconds the process was stopped for stack samples ([`Report::stopped`]).
    pub stopped: f64,
    /// Running seconds the stops took from its threads: what the sampler's turns measured,
    /// and never less than [`Cost::imposed`] ([`stacks::Stacks::cost`]).
    pub lost: f64,
    /// Running seconds the stops took by holding its threads alone ([`stacks::imposed`],
    /// summed).
    pub imposed: f64,
    /// CPU seconds its threads used over the same intervals.
    pub used: f64,
    /// Seconds its probes ran: their hits times the measured cost of one.
    pub probes: f64,
    /// Seconds the probes' inserts and removals held the whole program
    /// ([`probes::Changes::held`]).
    pub changes: f64,
    /// Wall seconds the search ran.
    pub wall: f64,
    /// What gsh, the program and the machine used over the search: what gsh's own CPU time
    /// took from the program's ([`sample::Competition::took`]).
    pub competition: sample::Competition,
}

impl Cost {
    /// The running seconds the stops and gsh's own work took: what the turns measured, or
    /// what the stops held plus what gsh's CPU time took by competing, whichever is more.
    /// The turns see gsh's work done while it samples (a sampling turn against a quiet one)
    /// but not what it does throughout (analysing code for timers, reading them, sampling
    /// `/proc`); the competition counts all of it, so the two overlap and are not added.
    pub fn stops(&self) -> f64 {
        self.lost.max(self.imposed + self.competition.took())
    }

    /// The shares of the program's running time the stops (with gsh's competition,
    /// [`Cost::stops`]), the probes and gsh's competition alone took, each over the time its
    /// threads would have run without the search (what they ran, plus what the stops took);
    /// over the wall time (one thread's) when no running time was measured.
    pub fn shares(&self) -> Shares {
        let stops = self.stops();
        let base = if self.used > 0.0 {
            self.used + stops
        } else {
            self.wall
        };
        if base <= 0.0 {
            return Shares::default();
        }
        // A hold of the whole program takes from each thread what it would have run
        // meanwhile: at their mean rate over the search (one thread's worth when none was
        // measured).
        let rate = if self.used > 0.0 && self.wall > 0.0 {
            self.used / self.wall
        } else {
            1.0
        };
        Shares {
            stops: stops / base,
            probes: self.probes / base,
            changes: self.changes * rate / base,
            competed: self.competition.took().min(stops) / base,
            running: base,
        }
    }
}

/// The shares of the program's running time the parts of a search took ([`Cost::shares`]).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Shares {
    /// The stops, with gsh's competition.
    pub stops: f64,
    /// The probes.
    pub probes: f64,
    /// The probes' inserts and removals, holding the whole program.
    pub changes: f64,
    /// gsh's competition for the CPUs, within `stops`.
    pub competed: f64,
    /// The seconds the shares are of: what the threads would have run without the search.
    pub running: f64,
}

impl Shares {
    /// What the search cost the program in all: the stops (with gsh's competition), the
    /// probes and their changes.
    pub fn overhead(&self) -> f64 {
        self.stops + self.probes + self.changes
    }
}

impl Report {
    /// Sets the report's overhead and its parts from `cost` ([`Report::probes`] first, so
    /// its cost is set too).
    pub fn set_cost(&mut self, cost: Cost) {
        let shares = cost.shares();
        let per_wall = |x: f64| if cost.wall > 0.0 { x / cost.wall } else { 0.0 };
        self.stopped = per_wall(cost.stopped);
        self.gsh_cpu = per_wall(cost.competition.gsh);
        self.waited = per_wall(cost.competition.waited);
        self.competed = shares.competed;
        self.stop_cost = shares.stops;
        self.probes.cost = shares.probes;
        self.probes.change_cost = shares.changes;
        self.overhead = shares.overhead();
        self.running = shares.running;
    }

    /// The conclusions, then the search history graph as an indented tree.
    pub fn text(&self) -> String {
        use std::fmt::Write as _;
        let mut out = String::new();
        if self.findings.is_empty() {
            out.push_str("no hypothesis held\n");
        }
        for f in &self.findings {
            let thread = f
                .thread
                .map_or_else(String::new, |t| format!(" (thread {t})"));
            let _ = writeln!(
                out,
                "{:<13}{:.2}  {}{thread}{}",
                f.hypothesis.name(),
                f.fraction,
                f.focus.join(" > "),
                mark(f.measured, f.timed_call.as_deref())
            );
        }
        let _ = writeln!(
            out,
            "\n{} experiments in {:.1} s{}; the search slowed the program by about {:.1}% of \
             the {:.2} s its threads would have run ({}, its estimate). The program was stopped {:.1}% of the time for {} stack samples; gsh \
             used {:.1}% of a CPU (sampling /proc {:.1}%), and the program's threads waited \
             for a CPU {:.1} s in all. The stops and gsh's competition for the CPUs took \
             {:.1}% of the threads' running time ({:.1}% by the competition)\n",
            self.tested,
            self.seconds,
            if self.held >= 0.05 {
                format!(
                    " ({:.1} s of it holding gsh's own work to the cost limit)",
                    self.held
                )
            } else {
                String::new()
            },
            self.overhead * 100.0,
            self.running,
            lost_time(self.overhead * self.running),
            self.stopped * 100.0,
            self.stack_samples,
            self.gsh_cpu * 100.0,
            self.sampler_cpu * 100.0,
            // Summed over the threads: as a share of the time, three threads of python3
            // taking turns at its lock read 131.5%.
            self.waited * self.seconds,
            self.stop_cost * 100.0,
            self.competed * 100.0
        );
        if let Some(k) = &self.kept_off {
            let cpu = |list: &str| {
                if list.contains([',', '-']) {
                    format!("CPUs {list}")
                } else {
                    format!("CPU {list}")
                }
            };
            let _ = writeln!(
                out,
                "gsh kept its threads on {}, off the program's {}\n",
                cpu(&k.gsh),
                cpu(&k.program)
            );
        }
        if self.probes.inserted > 0 {
            let _ = writeln!(
                out,
                "{} timers inserted ({} of loops, {} of whole call paths, {} of call paths' \
                 last calls), {} removed; they ran {:.2}% of the program's running time (each \
                 timed entry at what its timer added in situ, by turns in and out, where that \
                 could be told, else at {:.0} ns, its cost measured back to back as the search \
                 began); inserting and removing them held the whole program {:.0} ms in all, \
                 {:.2}% of its running time. Experiments marked [probe] were measured by them, \
                 the others by samples{}\n",
                self.probes.inserted,
                self.probes
                    .inserted
                    .saturating_sub(self.probes.call_timers + self.probes.path_timers),
                self.probes.path_timers,
                self.probes.call_timers,
                self.probes.removed,
                self.probes.cost * 100.0,
                self.probes.timer_ns,
                self.probes.changes.held * 1e3,
                self.probes.change_cost * 100.0,
                if self.probes.call_timers > 0 {
                    ". A call path's timer times its last call alone (`[probe of CALLER > \
                     CALLEE only]`): the path's earlier steps are not checked, so it times \
                     every path ending in that call"
                } else {
                    ""
                }
            );
        }
        for e in &self.probes.errors {
            let _ = writeln!(out, "probe error: {e}");
        }
        fn walk(r: &Report, parent: Option<usize>, depth: usize, out: &mut String) {
            for n in r.graph.iter().filter(|n| n.parent == parent) {
                let value = n.fraction.map_or_else(|| "-".into(), |f| format!("{f:.2}"));
                let state = match n.state {
                    State::True => "true",
                    State::False => "false",
                    State::Untested => "untested",
                    State::Active => "testing",
                    State::Failed => "failed",
                    State::Refused => "refused",
                };
                let note = n
                    .note
                    .as_deref()
                    .map_or_else(String::new, |x| format!("  ({x})"));
                let by = mark(n.measured, n.timed_call.as_deref());
                let by = by.strip_prefix(' ').unwrap_or(&by);
                let _ = writeln!(
                    out,
                    "{:indent$}{} {}  {state} {value}{by}{note}",
                    "",
                    n.hypothesis.name(),
                    n.focus.last().map_or("", String::as_str),
                    indent = depth * 2
                );
                walk(r, Some(n.id), depth + 1, out);
            }
        }
        walk(self, None, 0, &mut out);
        out
    }

    /// The search history graph in Graphviz's language: true nodes filled, failed ones dashed.
    pub fn dot(&self) -> String {
        use std::fmt::Write as _;
        let mut out = String::from("digraph consult {\n  node [shape=box];\n");
        for n in &self.graph {
            let label = format!(
                "{}\\n{}\\n{}",
                n.hypothesis.name(),
                n.focus.join(" > ").replace('"', "\\\""),
                n.fraction.map_or_else(|| "-".into(), |f| format!("{f:.2}"))
            );
            let style = match n.state {
                State::True => "style=filled, fillcolor=\"#f4a3a3\"",
                State::False => "style=filled, fillcolor=\"#b9e3b9\"",
                State::Failed | State::Refused => "style=dashed",
                State::Untested | State::Active => "style=filled, fillcolor=\"#f5d7a3\"",
            };
            let _ = writeln!(out, "  n{} [label=\"{label}\", {style}];", n.id);
            if let Some(p) = n.parent {
                let _ = writeln!(out, "  n{p} -> n{};", n.id);
            }
        }
        out.push_str("}\n");
        out
    }
}

/// Runs `search` on `lab` until it ends, `limit` passes, `interrupted` is set, or `alive` says
/// the program is gone; stops every running experiment before returning the seconds it ran,
/// judging them on what they read when the program ended ([`Search::program_ended`]).
pub fn run<L: Lab>(
    search: &mut Search,
    lab: &mut L,
    limit: std::time::Duration,
    interrupted: &std::sync::atomic::AtomicBool,
    alive: impl FnMut() -> bool,
) -> f64 {
    run_watched(search, lab, limit, interrupted, alive, |_, _, _| {})
}

/// [`run`], calling `watch` with the search, the lab and the seconds since it began after each
/// step, so a caller can show the search as it goes and keep the lab's view of the program
/// current (libraries loaded meanwhile).
pub fn run_watched<L: Lab>(
    search: &mut Search,
    lab: &mut L,
    limit: std::time::Duration,
    interrupted: &std::sync::atomic::AtomicBool,
    mut alive: impl FnMut() -> bool,
    mut watch: impl FnMut(&Search, &mut L, f64),
) -> f64 {
    let start = std::time::Instant::now();
    let deadline = start + limit;
    loop {
        let now = start.elapsed();
        let more = search.step_within(lab, now.as_secs_f64(), Some(deadline), Some(interrupted));
        watch(search, lab, now.as_secs_f64());
        // After the step: starting experiments (inserting their probes) takes time too.
        if !more
            || start.elapsed() >= limit
            || interrupted.load(std::sync::atomic::Ordering::SeqCst)
            || !alive()
        {
            break;
        }
        std::thread::sleep(STEP);
    }
    // A program that ended leaves what its experiments read to be judged.
    if search.ended || lab.ended() {
        search.program_ended(lab, start.elapsed().as_secs_f64());
    }
    search.stop(lab);
    start.elapsed().as_secs_f64()
}

/// How many bounded waits ([`Settings::max_wait`]) an experiment that has no reading at all
/// (its lab lacks the samples to tell) is given before it is judged false.
const UNREAD_WAITS: f64 = 3.0;

/// The share of the settle time a reading cut short by the program's end must cover to be
/// judged ([`Search::program_ended`]).
pub const END_WINDOW: f64 = 0.5;

/// How often [`run`] judges and starts experiments.
const STEP: std::time::Duration = std::time::Duration::from_millis(100);

#[cfg(test)]
mod tests;
