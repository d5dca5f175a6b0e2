//! The search over a model program: a tree of foci with the fraction of time each hypothesis
//! takes at each, a clock the tests advance, and a record of what was measured at once.

use std::collections::HashMap;

use super::*;

/// A program's structure and behaviour, as a lab that measures it exactly.
struct Model {
    /// Children of each focus (by its display form), with priorities.
    tree: HashMap<String, Vec<(Focus, f64)>>,
    /// The true fraction of each (hypothesis, focus).
    truth: HashMap<(Hypothesis, String), f64>,
    cost: f64,
    now: f64,
    running: HashMap<u64, (Experiment, f64)>,
    next: u64,
    /// The largest number of experiments measured at once.
    peak: usize,
    started: Vec<Experiment>,
    refuse: Option<String>,
    /// Foci the lab cannot refine the first time it is asked (it lacks samples).
    not_yet: std::collections::HashSet<String>,
    /// Foci the lab has no reading of until this many seconds after they start (their
    /// samples come slowly).
    slow: HashMap<String, f64>,
    /// Whether the samples the slow foci wait for are still coming ([`Lab::gathering`]).
    gathering: bool,
    /// How long starting an experiment takes (inserting probes into a large program).
    start_delay: std::time::Duration,
    /// What measuring a focus really costs, known once it runs; predicted as `cost` before.
    hidden_cost: HashMap<String, f64>,
    /// Costs measured so far, by focus: what the model predicts from then on.
    known_cost: HashMap<String, f64>,
    /// Refinements of one hypothesis at one focus that differ from the tree's (the stack
    /// samples' chains skip the loops that the CPU's refinement goes through).
    tree_for: HashMap<(Hypothesis, String), Vec<(Focus, f64)>>,
    /// The largest cost measured of what ran at once, after each step.
    peak_cost: f64,
    /// The share of the program's time the probes have taken so far.
    spent: f64,
    /// Foci that cannot start before this time ([`Lab::can_start`]: what their probe's
    /// placement is planned from is being prepared).
    unprepared: HashMap<String, f64>,
    /// Set as the first experiment starts (Ctrl-C during an insertion).
    interrupt: Option<std::sync::Arc<std::sync::atomic::AtomicBool>>,
}

fn f(path: &[&str]) -> Focus {
    let mut out = vec![Resource::Program(path[0].into())];
    for p in &path[1..] {
        out.push(if p.starts_with("loop_") {
            Resource::Loop((*p).into())
        } else {
            Resource::Function((*p).into())
        });
    }
    Focus(out)
}

impl Model {
    fn new(cost: f64) -> Model {
        Model {
            tree: HashMap::new(),
            truth: HashMap::new(),
            cost,
            now: 0.0,
            running: HashMap::new(),
            next: 0,
            peak: 0,
            started: Vec::new(),
            refuse: None,
            not_yet: Default::default(),
            slow: HashMap::new(),
            gathering: false,
            start_delay: std::time::Duration::ZERO,
            hidden_cost: HashMap::new(),
            known_cost: HashMap::new(),
            tree_for: HashMap::new(),
            peak_cost: 0.0,
            spent: 0.0,
            unprepared: HashMap::new(),
            interrupt: None,
        }
    }

    fn child(&mut self, parent: &[&str], name: &str, priority: f64) -> &mut Self {
        let mut path = parent.to_vec();
        path.push(name);
        self.tree
            .entry(f(parent).to_string())
            .or_default()
            .push((f(&path), priority));
        self
    }

    fn truth(&mut self, h: Hypothesis, path: &[&str], fraction: f64) -> &mut Self {
        self.truth.insert((h, f(path).to_string()), fraction);
        self
    }

    /// Runs the search to its end, one tenth of a second a step; returns the seconds it took.
    fn run(&mut self, search: &mut Search) -> f64 {
        loop {
            let now = self.now;
            let more = search.step(self, now);
            let running: f64 = self
                .running
                .values()
                .map(|(e, _)| self.known_cost.get(&e.focus.to_string()).unwrap_or(&0.0))
                .sum();
            self.peak_cost = self.peak_cost.max(running);
            if !more {
                break;
            }
            self.now += 0.1;
            assert!(self.now < 600.0, "the search does not end");
        }
        self.now
    }
}

impl Lab for Model {
    fn refine(&mut self, h: Hypothesis, focus: &Focus) -> Option<Vec<(Focus, f64)>> {
        if self.not_yet.remove(&focus.to_string()) {
            return None;
        }
        if let Some(v) = self.tree_for.get(&(h, focus.to_string())) {
            return Some(v.clone());
        }
        Some(
            self.tree
                .get(&focus.to_string())
                .cloned()
                .unwrap_or_default(),
        )
    }

    fn predicted_cost(&mut self, e: &Experiment) -> Option<f64> {
        Some(
            *self
                .known_cost
                .get(&e.focus.to_string())
                .unwrap_or(&self.cost),
        )
    }

    fn spent(&mut self) -> f64 {
        self.spent
    }

    fn measured_cost(&mut self, probe: ProbeId) -> Option<f64> {
        let focus = self.running[&probe.0].0.focus.to_string();
        let c = *self.hidden_cost.get(&focus)?;
        self.known_cost.insert(focus, c);
        Some(c)
    }

    fn can_start(&mut self, e: &Experiment) -> bool {
        self.unprepared
            .get(&e.focus.to_string())
            .is_none_or(|t| self.now >= *t)
    }

    fn start(&mut self, e: &Experiment) -> Result<ProbeId, String> {
        assert!(self.can_start(e), "{e:?} started before it could");
        std::thread::sleep(self.start_delay);
        if let Some(flag) = &self.interrupt {
            flag.store(true, std::sync::atomic::Ordering::SeqCst);
        }
        if let Some(why) = &self.refuse {
            if e.focus.to_string().contains(why.as_str()) {
                return Err(format!("cannot instrument {why}"));
            }
        }
        self.next += 1;
        self.running.insert(self.next, (e.clone(), self.now));
        self.peak = self.peak.max(self.running.len());
        self.started.push(e.clone());
        Ok(ProbeId(self.next))
    }

    fn read(&mut self, probe: ProbeId) -> Option<Reading> {
        let (e, since) = &self.running[&probe.0];
        if self
            .slow
            .get(&e.focus.to_string())
            .is_some_and(|s| self.now - since < *s)
        {
            return None;
        }
        let fraction = *self
            .truth
            .get(&(e.hypothesis, e.focus.to_string()))
            .unwrap_or(&0.0);
        Some(Reading {
            fraction,
            seconds: self.now - since,
            note: None,
            opaque: false,
        })
    }

    fn gathering(&mut self, probe: ProbeId) -> bool {
        let focus = self.running[&probe.0].0.focus.to_string();
        self.gathering && self.slow.contains_key(&focus)
    }

    fn stop(&mut self, probe: ProbeId) {
        assert!(self.running.remove(&probe.0).is_some(), "stopped twice");
    }
}

/// CPU time in one inner loop of one function, a decoy function beside it.
fn cpu_in_an_inner_loop() -> Model {
    let mut m = Model::new(0.01);
    m.child(&["app"], "main", 1.0)
        .child(&["app", "main"], "crunch", 0.9)
        .child(&["app", "main"], "decoy", 0.1)
        .child(&["app", "main", "crunch"], "loop_1", 1.0)
        .child(&["app", "main", "crunch", "loop_1"], "loop_1.1", 1.0)
        .child(&["app", "main", "crunch", "loop_1"], "loop_1.2", 0.5);
    m.truth(Hypothesis::CPUBound, &["app"], 0.95)
        .truth(Hypothesis::CPUBound, &["app", "main"], 0.95)
        .truth(Hypothesis::CPUBound, &["app", "main", "crunch"], 0.85)
        .truth(Hypothesis::CPUBound, &["app", "main", "decoy"], 0.05)
        .truth(
            Hypothesis::CPUBound,
            &["app", "main", "crunch", "loop_1"],
            0.84,
        )
        .truth(
            Hypothesis::CPUBound,
            &["app", "main", "crunch", "loop_1", "loop_1.1"],
            0.80,
        )
        .truth(
            Hypothesis::CPUBound,
            &["app", "main", "crunch", "loop_1", "loop_1.2"],
            0.04,
        );
    m
}

#[test]
fn cpu_in_an_inner_loop_is_found_at_the_loop_and_the_decoy_is_not_named() {
    let mut m = cpu_in_an_inner_loop();
    let mut search = Search::new(Settings::default(), f(&["app"]));
    let seconds = m.run(&mut search);
    let findings = search.findings();
    assert_eq!(
        findings,
        vec![Finding {
            hypothesis: Hypothesis::CPUBound,
            focus: f(&["app", "main", "crunch", "loop_1", "loop_1.1"]),
            fraction: 0.80,
            measured: Some(Method::Samples),
        }]
    );
    // Five levels, a second or so each: the search does not wait for what it can decide.
    assert!(seconds < 8.0, "took {seconds} s");
    // The other hypotheses were tested false at the root and never refined.
    for h in [Hypothesis::SyncWait, Hypothesis::IOBlocking] {
        let n = search
            .nodes()
            .iter()
            .find(|n| n.experiment.hypothesis == h)
            .unwrap();
        assert_eq!(n.state, State::False);
    }
    assert!(m.running.is_empty(), "every probe is removed at the end");
    assert_eq!(search.tested(), search.nodes().len());
}

#[test]
fn the_cost_limit_bounds_what_runs_at_once_and_likelier_foci_go_first() {
    let mut m = Model::new(0.02);
    for i in 0..10 {
        m.child(&["app"], &format!("f{i}"), i as f64);
    }
    m.truth(Hypothesis::CPUBound, &["app"], 0.9);
    let mut search = Search::new(Settings::default(), f(&["app"]));
    m.run(&mut search);
    // 5 root experiments at 0.02 each exceed 0.05: two at once, then more as they finish.
    assert!(m.peak <= 2, "{} experiments ran at once", m.peak);
    let order: Vec<String> = m
        .started
        .iter()
        .filter(|e| e.focus.0.len() == 2)
        .map(|e| e.focus.to_string())
        .collect();
    assert_eq!(order.first().map(String::as_str), Some("app > f9"));
    assert_eq!(order.last().map(String::as_str), Some("app > f0"));
    assert_eq!(
        search.findings(),
        vec![Finding {
            hypothesis: Hypothesis::CPUBound,
            focus: f(&["app"]),
            fraction: 0.9,
            measured: Some(Method::Samples),
        }]
    );
}

/// A probe that turns out to cost more than the limit alone (a loop entered millions of times
/// a second) is removed at the first step that knows it, and refused; the search goes on
/// beside it. One predicted, from an earlier measurement, to cost more is never started.
#[test]
fn a_probe_over_the_cost_limit_is_removed_and_refused_and_never_started_again() {
    let mut m = cpu_in_an_inner_loop();
    let hot = f(&["app", "main", "crunch", "loop_1", "loop_1.1"]).to_string();
    m.hidden_cost.insert(hot.clone(), 0.4);
    let mut search = Search::new(Settings::default(), f(&["app"]));
    m.run(&mut search);
    let n = search
        .nodes()
        .iter()
        .find(|n| n.experiment.focus.to_string() == hot)
        .unwrap();
    assert_eq!(n.state, State::Refused);
    assert!(n.note.as_deref().unwrap().contains("40.0%"), "{:?}", n.note);
    assert!(m.peak_cost <= 0.05, "{} ran at once", m.peak_cost);
    // Its sibling was tested, and the loop around them stands as the conclusion.
    assert_eq!(
        search.findings()[0].focus,
        f(&["app", "main", "crunch", "loop_1"])
    );
    assert!(m.running.is_empty());
    // Known to cost that much, the same probe is refused before it goes in.
    let started = m.started.len();
    let mut again = Search::new(Settings::default(), f(&["app"]));
    m.run(&mut again);
    let n = again
        .nodes()
        .iter()
        .find(|n| n.experiment.focus.to_string() == hot)
        .unwrap();
    assert_eq!(n.state, State::Refused);
    assert!(n.note.as_deref().unwrap().contains("not inserted"));
    assert!(!m.started[started..]
        .iter()
        .any(|e| e.focus.to_string() == hot));
}

/// While the probes have taken the limit's share of the program's time so far (many tried and
/// found too costly), nothing that costs starts; what the samples measure goes on.
#[test]
fn nothing_that_costs_starts_while_the_probes_have_spent_the_limit() {
    let mut m = cpu_in_an_inner_loop();
    m.spent = 0.05;
    let mut search = Search::new(Settings::default(), f(&["app"]));
    for step in 0..20 {
        search.step(&mut m, f64::from(step) * 0.1);
    }
    assert!(m.started.is_empty(), "{:?}", m.started);
    // Samples cost nothing more: a lab that predicts 0 starts them.
    m.cost = 0.0;
    search.step(&mut m, 2.0);
    assert!(!m.started.is_empty());
    // Once the share has fallen below the limit, what costs starts again.
    m.cost = 0.01;
    m.spent = 0.01;
    let mut again = Search::new(Settings::default(), f(&["app"]));
    let before = m.started.len();
    again.step(&mut m, 0.0);
    assert!(m.started.len() > before);
}

/// Probes that each fit the limit but together do not: the latest started is removed and
/// waits until there is room for its measured cost, then runs to its verdict.
#[test]
fn probes_over_the_limit_together_are_deferred_until_there_is_room() {
    let mut m = Model::new(0.001);
    for i in 0..4 {
        let name = format!("f{i}");
        m.child(&["app"], &name, i as f64);
        m.hidden_cost.insert(f(&["app", &name]).to_string(), 0.03);
        m.truth(Hypothesis::CPUBound, &["app", &name], 0.1 * i as f64);
    }
    m.truth(Hypothesis::CPUBound, &["app"], 0.9);
    let mut search = Search::new(Settings::default(), f(&["app"]));
    m.run(&mut search);
    assert!(m.peak_cost <= 0.05, "{} ran at once", m.peak_cost);
    let below: Vec<&Node> = search
        .nodes()
        .iter()
        .filter(|n| n.experiment.focus.0.len() == 2)
        .collect();
    assert_eq!(below.len(), 4);
    for n in below {
        assert_eq!(n.state, State::False, "{n:?}");
    }
    // Each deferred one started again later.
    assert!(m.started.len() > search.nodes().len(), "{:?}", m.started);
}

#[test]
fn a_reading_inside_the_hysteresis_band_is_judged_false_after_the_bounded_wait() {
    let mut m = Model::new(0.01);
    m.truth(Hypothesis::CPUBound, &["app"], 0.30);
    let mut search = Search::new(Settings::default(), f(&["app"]));
    let seconds = m.run(&mut search);
    let n = &search.nodes()[0];
    assert_eq!(n.state, State::False);
    assert!(n.note.as_deref().unwrap().contains("no conclusive reading"));
    assert!((6.0..7.0).contains(&seconds), "{seconds}");
    assert!(search.findings().is_empty());
}

/// A focus whose samples come slowly (a loaded machine) has no reading for longer than the
/// bounded wait: it is judged on its reading once it has one, not false for the wait. It was
/// judged false ("no conclusive reading within 6 s") before its first reading came.
#[test]
fn the_bounded_wait_counts_from_the_first_reading() {
    let mut m = Model::new(0.01);
    m.truth(Hypothesis::CPUBound, &["app"], 0.8);
    m.slow.insert(f(&["app"]).to_string(), 7.0);
    let mut search = Search::new(Settings::default(), f(&["app"]));
    m.run(&mut search);
    let n = &search.nodes()[0];
    assert_eq!(n.state, State::True, "{n:?}");
    assert!(n.judged.unwrap() >= 7.0, "{n:?}");
    // One that never gets a reading is given up, after three bounded waits.
    let mut m = Model::new(0.01);
    m.truth(Hypothesis::CPUBound, &["app"], 0.8);
    m.slow.insert(f(&["app"]).to_string(), f64::INFINITY);
    let mut search = Search::new(Settings::default(), f(&["app"]));
    let seconds = m.run(&mut search);
    let n = &search.nodes()[0];
    assert_eq!(n.state, State::False);
    assert!(
        n.note
            .as_deref()
            .unwrap()
            .contains("no reading within 18 s"),
        "{n:?}"
    );
    assert!((18.0..19.0).contains(&seconds), "{seconds}");
}

/// An experiment whose first reading waits for samples still coming in (a loaded machine
/// gives the stack sampler little time) is waited for past the bounded waits, within the
/// search's time limit, and judged on that reading: not false for the machine's slowness.
#[test]
fn an_experiment_waiting_for_samples_still_coming_is_judged_on_them() {
    let mut m = Model::new(0.01);
    m.truth(Hypothesis::IOBlocking, &["app"], 0.9);
    m.slow.insert(f(&["app"]).to_string(), 25.0);
    m.gathering = true;
    let mut search = Search::new(Settings::default(), f(&["app"]));
    m.run(&mut search);
    let n = &search.nodes()[2];
    assert_eq!(n.experiment.hypothesis, Hypothesis::IOBlocking);
    assert_eq!(n.state, State::True, "{n:?}");
    assert!(n.judged.unwrap() >= 25.0, "{n:?}");
}

#[test]
fn io_blocking_refines_along_the_why_axis_to_small_io() {
    let mut m = Model::new(0.01);
    m.child(&["app"], "logger", 1.0);
    m.truth(Hypothesis::IOBlocking, &["app"], 0.5)
        .truth(Hypothesis::IOBlocking, &["app", "logger"], 0.5)
        .truth(Hypothesis::SmallIO, &["app"], 0.45);
    let mut search = Search::new(Settings::default(), f(&["app"]));
    m.run(&mut search);
    let hs: Vec<(Hypothesis, String)> = search
        .findings()
        .into_iter()
        .map(|x| (x.hypothesis, x.focus.to_string()))
        .collect();
    assert_eq!(
        hs,
        vec![
            (Hypothesis::IOBlocking, "app > logger".to_string()),
            (Hypothesis::SmallIO, "app".to_string()),
        ]
    );
}

#[test]
fn a_focus_that_cannot_be_instrumented_is_recorded_and_the_search_goes_on() {
    let mut m = cpu_in_an_inner_loop();
    m.refuse = Some("decoy".into());
    let mut search = Search::new(Settings::default(), f(&["app"]));
    m.run(&mut search);
    let failed: Vec<&Node> = search
        .nodes()
        .iter()
        .filter(|n| n.state == State::Failed)
        .collect();
    assert_eq!(failed.len(), 1);
    assert_eq!(failed[0].note.as_deref(), Some("cannot instrument decoy"));
    assert_eq!(search.findings().len(), 1);
}

#[test]
fn thresholds_can_be_set_and_the_last_setting_wins() {
    let mut m = cpu_in_an_inner_loop();
    let settings = Settings {
        thresholds: vec![(Hypothesis::CPUBound, 0.5), (Hypothesis::CPUBound, 0.9)],
        ..Settings::default()
    };
    let mut search = Search::new(settings, f(&["app"]));
    m.run(&mut search);
    // True needs 0.9 * 1.05 = 0.945: the root and main (0.95) pass, crunch (0.85) does not.
    let found: Vec<String> = search
        .findings()
        .iter()
        .map(|x| x.focus.to_string())
        .collect();
    assert_eq!(found, vec!["app > main".to_string()]);
    assert_eq!(Hypothesis::by_name("cpubound"), Some(Hypothesis::CPUBound));
}

/// An experiment's waits count from when it is in, not from when its start began: a start
/// that took longer than the wait for a first reading (a loop timer inserted under a load of
/// 15 took 26 s) left the experiment judged false as it began, before it could read anything.
#[test]
fn the_wait_for_a_first_reading_counts_from_when_the_experiment_is_in() {
    let mut m = Model::new(0.01);
    m.truth(Hypothesis::CPUBound, &["app"], 0.8);
    // No reading until 0.35 s (the model's clock) after it starts; the search gives up on
    // one with no reading after three waits of 0.1 s, and its start takes 0.4 s.
    m.slow.insert(f(&["app"]).to_string(), 0.35);
    m.start_delay = std::time::Duration::from_millis(400);
    let settings = Settings {
        settle: 0.05,
        max_wait: 0.1,
        ..Settings::default()
    };
    let mut search = Search::new(settings, f(&["app"]));
    m.run(&mut search);
    let n = &search.nodes()[0];
    assert_eq!(n.experiment.hypothesis, Hypothesis::CPUBound);
    assert_eq!(n.state, State::True, "{n:?}");
}

#[test]
fn stopping_removes_every_probe() {
    let mut m = cpu_in_an_inner_loop();
    let mut search = Search::new(Settings::default(), f(&["app"]));
    search.step(&mut m, 0.0);
    assert!(!m.running.is_empty());
    search.stop(&mut m);
    assert!(m.running.is_empty());
    assert!(!search.done());
}

/// Starting an experiment can take long (python3's first loop timer planned over a 7 MB
/// interpreter): the search starts none once its time is up, nor one that would not be in by
/// then as long as the slowest start so far took, and ends on time with what it has. It used
/// to start every waiting experiment in one step, and look at the clock only before it, so
/// `consult --for 25` ran on for minutes; then it started one whenever the clock was short of
/// the limit, and ran on for as long as that one took.
#[test]
fn slow_probe_insertion_counts_against_the_time_limit() {
    let mut m = cpu_in_an_inner_loop();
    m.start_delay = std::time::Duration::from_millis(300);
    let mut search = Search::new(Settings::default(), f(&["app"]));
    let t = std::time::Instant::now();
    let seconds = run(
        &mut search,
        &mut m,
        std::time::Duration::from_millis(800),
        &std::sync::atomic::AtomicBool::new(false),
        || true,
    );
    // Two starts at most (0.3 s each): the third would end after the limit.
    assert!(m.started.len() <= 2, "{:?}", m.started);
    assert!(
        t.elapsed().as_secs_f64() < 1.5 && seconds < 1.5,
        "{seconds}"
    );
    assert!(m.running.is_empty(), "every probe is out");
}

/// A probe whose placement is still being planned (python3's first: the planning facts of
/// the whole interpreter, 10 to 16 s of the tracer thread under load) waits, not started, while
/// the search judges what it can meanwhile; it starts once its lab can start it, and the
/// search goes on to the same conclusion. Started at once, its insertion held the whole
/// search and the program's stack samples for as long.
#[test]
fn an_experiment_its_lab_cannot_start_yet_waits_while_the_others_are_judged() {
    let mut m = cpu_in_an_inner_loop();
    let lp = f(&["app", "main", "crunch", "loop_1"]);
    m.unprepared.insert(lp.to_string(), 10.0);
    let mut search = Search::new(Settings::default(), f(&["app"]));
    m.run(&mut search);
    let node = |h: Hypothesis, focus: &Focus| {
        search
            .nodes()
            .iter()
            .find(|n| n.experiment.hypothesis == h && &n.experiment.focus == focus)
            .unwrap_or_else(|| panic!("no {h} at {focus}"))
            .clone()
    };
    let crunch = f(&["app", "main", "crunch"]);
    let beside = node(Hypothesis::RunQueue, &crunch);
    assert_eq!(beside.state, State::False, "{beside:?}");
    assert!(beside.judged.unwrap() < 10.0, "{beside:?}");
    let waited = node(Hypothesis::CPUBound, &lp);
    assert_eq!(waited.state, State::True, "{waited:?}");
    assert!(waited.judged.unwrap() >= 10.0, "{waited:?}");
    assert_eq!(
        search.findings()[0].focus,
        f(&["app", "main", "crunch", "loop_1", "loop_1.1"])
    );
    assert!(m.running.is_empty());
}

/// Once its deadline leaves no time for another start (as long as the slowest start took)
/// and nothing is measuring, nothing more can be learnt: the search is over at once. It
/// used to go on stepping until the deadline, with refinements it would never start.
#[test]
fn a_search_that_can_start_nothing_more_ends_before_its_deadline() {
    let mut m = cpu_in_an_inner_loop();
    let mut search = Search::new(Settings::default(), f(&["app"]));
    assert!(search.step(&mut m, 0.0));
    assert_eq!(m.running.len(), 4);
    let passed = std::time::Instant::now();
    m.now = 2.0;
    // The roots are judged, CPUBound true and refined; nothing more starts.
    assert!(
        !search.step_until(&mut m, 2.0, Some(passed)),
        "the search goes on"
    );
    assert!(m.running.is_empty());
    assert_eq!(m.started.len(), 4);
    assert!(!search.done(), "refinements are left untested");
}

/// Ctrl-C during an insertion: the insertion going on ends, nothing more starts, and the
/// search ends with every probe out. The search looked at Ctrl-C after each step only, and
/// a step started every experiment it could, each an insertion.
#[test]
fn ctrl_c_during_a_start_starts_nothing_more() {
    let mut m = cpu_in_an_inner_loop();
    let flag = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    m.interrupt = Some(flag.clone());
    let mut search = Search::new(Settings::default(), f(&["app"]));
    run(
        &mut search,
        &mut m,
        std::time::Duration::from_secs(60),
        &flag,
        || true,
    );
    assert_eq!(m.started.len(), 1, "{:?}", m.started);
    assert!(m.running.is_empty(), "every probe is out");
}

#[test]
fn a_true_node_the_lab_cannot_refine_yet_is_refined_later() {
    let mut m = cpu_in_an_inner_loop();
    m.not_yet.insert(f(&["app", "main"]).to_string());
    let mut search = Search::new(Settings::default(), f(&["app"]));
    m.run(&mut search);
    assert_eq!(
        search.findings()[0].focus,
        f(&["app", "main", "crunch", "loop_1", "loop_1.1"])
    );
}

#[test]
fn run_queue_qualifies_a_cpu_conclusion_and_small_io_replaces_an_io_one() {
    let mut m = Model::new(0.01);
    m.truth(Hypothesis::CPUBound, &["app"], 0.9)
        .truth(Hypothesis::RunQueue, &["app"], 0.5)
        .truth(Hypothesis::IOBlocking, &["app"], 0.5)
        .truth(Hypothesis::SmallIO, &["app"], 0.5);
    let mut search = Search::new(Settings::default(), f(&["app"]));
    m.run(&mut search);
    let mut hs: Vec<Hypothesis> = search.findings().iter().map(|x| x.hypothesis).collect();
    hs.sort();
    assert_eq!(
        hs,
        [
            Hypothesis::CPUBound,
            Hypothesis::SmallIO,
            Hypothesis::RunQueue
        ]
    );
}

/// The search's conclusions as `HYPOTHESIS FOCUS`.
fn conclusions(search: &Search) -> Vec<String> {
    search
        .findings()
        .iter()
        .map(|x| format!("{} {}", x.hypothesis, x.focus))
        .collect()
}

/// RunQueue is asked at each focus the CPU's refinement reaches, not refined along "where"
/// by itself: its own chain, from stack samples that skip loops (`sub_15320 > sub_1ee90`
/// where the CPU's went `sub_15320 > loop_1 > sub_1ee90`), was a second conclusion for the
/// same place (xz: RunQueue findings three times over one call chain).
#[test]
fn run_queue_follows_the_cpus_refinement_and_concludes_once() {
    let mut m = Model::new(0.01);
    m.child(&["app"], "main", 1.0)
        .child(&["app", "main"], "loop_1", 1.0)
        .child(&["app", "main", "loop_1"], "work", 1.0);
    m.tree_for.insert(
        (Hypothesis::RunQueue, f(&["app", "main"]).to_string()),
        vec![(f(&["app", "main", "work"]), 1.0)],
    );
    for at in [
        &["app"][..],
        &["app", "main"],
        &["app", "main", "loop_1"],
        &["app", "main", "loop_1", "work"],
        &["app", "main", "work"],
    ] {
        m.truth(Hypothesis::CPUBound, at, 0.9)
            .truth(Hypothesis::RunQueue, at, 0.5);
    }
    let mut search = Search::new(Settings::default(), f(&["app"]));
    m.run(&mut search);
    let found = conclusions(&search);
    assert_eq!(
        found,
        [
            "CPUBound app > main > loop_1 > work",
            "RunQueue app > main > loop_1 > work"
        ]
    );
    assert!(
        !m.started
            .iter()
            .any(|e| e.focus == f(&["app", "main", "work"])),
        "{:?}",
        m.started
    );
}

#[test]
fn run_queue_is_no_conclusion_where_the_thread_is_not_cpu_bound() {
    let mut m = Model::new(0.01);
    m.child(&["app"], "poller", 1.0)
        .child(&["app"], "cruncher", 1.0);
    m.truth(Hypothesis::CPUBound, &["app"], 0.9)
        .truth(Hypothesis::CPUBound, &["app", "cruncher"], 0.9)
        .truth(Hypothesis::CPUBound, &["app", "poller"], 0.1)
        .truth(Hypothesis::RunQueue, &["app"], 0.5)
        .truth(Hypothesis::RunQueue, &["app", "cruncher"], 0.5)
        .truth(Hypothesis::RunQueue, &["app", "poller"], 0.3);
    let mut search = Search::new(Settings::default(), f(&["app"]));
    m.run(&mut search);
    let found = conclusions(&search);
    assert_eq!(
        found,
        ["CPUBound app > cruncher", "RunQueue app > cruncher"]
    );
}

/// iPath: `hot`, called from `a` and `b`, is found wherever it is called from and refined into
/// the two call paths reaching it; the path through `a` is the conclusion, and it covers the
/// chain `main > a` that led there (which stops above `hot`), so that is no finding apart.
#[test]
fn a_hot_function_is_concluded_at_the_call_path_that_is_hot() {
    let mut m = Model::new(0.01);
    let code = Focus(vec![
        Resource::Program("app".into()),
        Resource::Code("hot".into()),
    ]);
    let path = |caller: &str| {
        code.with(Resource::CallPath(vec![
            "main".into(),
            caller.into(),
            "hot".into(),
        ]))
    };
    m.child(&["app"], "main", 1.0)
        .child(&["app", "main"], "a", 0.8)
        .child(&["app", "main"], "b", 0.15);
    m.tree.get_mut("app").unwrap().push((code.clone(), 0.95));
    m.tree
        .insert(code.to_string(), vec![(path("a"), 0.8), (path("b"), 0.15)]);
    m.truth(Hypothesis::CPUBound, &["app"], 0.95)
        .truth(Hypothesis::CPUBound, &["app", "main"], 0.95)
        .truth(Hypothesis::CPUBound, &["app", "main", "a"], 0.8)
        .truth(Hypothesis::CPUBound, &["app", "main", "b"], 0.15);
    m.truth
        .insert((Hypothesis::CPUBound, code.to_string()), 0.95);
    m.truth
        .insert((Hypothesis::CPUBound, path("a").to_string()), 0.8);
    m.truth
        .insert((Hypothesis::CPUBound, path("b").to_string()), 0.15);
    let mut search = Search::new(Settings::default(), f(&["app"]));
    m.run(&mut search);
    assert_eq!(
        search.findings(),
        vec![Finding {
            hypothesis: Hypothesis::CPUBound,
            focus: path("a"),
            fraction: 0.8,
            measured: Some(Method::Samples),
        }]
    );
    let out = FindingOut::from(&search.findings()[0]);
    assert_eq!(out.focus, ["app", "hot", "main > a > hot"]);
    // Sampled: no timed call is named.
    assert_eq!(out.timed_call, None);
    // Measured by a timer, it says which call was timed: the path's last step alone.
    let mut timed = search.findings()[0].clone();
    timed.measured = Some(Method::Probe);
    let out = FindingOut::from(&timed);
    assert_eq!(out.timed_call.as_deref(), Some("a > hot"));
    let mut report = search.report(1.0, 0.0);
    report.findings = vec![out];
    report.probes.inserted = 1;
    report.probes.call_timers = 1;
    let text = report.text();
    assert!(
        text.contains("main > a > hot  [probe of a > hot only]"),
        "{text}"
    );
    assert!(text.contains("earlier steps are not checked"), "{text}");
    let json = serde_json::to_value(&report).unwrap();
    assert_eq!(json["findings"][0]["timed_call"], "a > hot");
}

/// `work`, called from `crunch` (95%) and a decoy (5%), found wherever it is called from: its
/// loop is true there (`work > loop_1`, the decoy's share in it), and the hot call path,
/// followed as the chain of calls it is, down to the same loop. The conclusion is the loop
/// along the path, which names `crunch`; the loop wherever `work` is called from is no
/// finding beside it.
#[test]
fn a_loop_found_along_the_hot_path_covers_the_same_loop_found_anywhere() {
    let mut m = Model::new(0.01);
    let code = Focus(vec![
        Resource::Program("app".into()),
        Resource::Code("work".into()),
    ]);
    let path = code.with(Resource::CallPath(vec![
        "main".into(),
        "crunch".into(),
        "work".into(),
    ]));
    let anywhere = code.with(Resource::Loop("loop_1".into()));
    let chain = ["app", "main", "crunch", "work"];
    m.tree.insert(
        "app".into(),
        vec![(f(&["app", "main"]), 1.0), (code.clone(), 0.95)],
    );
    m.tree.insert(
        code.to_string(),
        vec![(path.clone(), 0.95), (anywhere.clone(), 1.0)],
    );
    m.tree.insert(path.to_string(), vec![(f(&chain), 0.95)]);
    m.child(&chain, "loop_1", 1.0);
    m.truth(Hypothesis::CPUBound, &["app"], 1.0)
        .truth(Hypothesis::CPUBound, &["app", "main"], 1.0)
        .truth(Hypothesis::CPUBound, &chain, 0.95)
        .truth(
            Hypothesis::CPUBound,
            &["app", "main", "crunch", "work", "loop_1"],
            0.95,
        );
    for (focus, x) in [(&code, 1.0), (&path, 0.95), (&anywhere, 1.0)] {
        m.truth.insert((Hypothesis::CPUBound, focus.to_string()), x);
    }
    let mut search = Search::new(Settings::default(), f(&["app"]));
    m.run(&mut search);
    let found: Vec<String> = search
        .findings()
        .iter()
        .map(|x| x.focus.to_string())
        .collect();
    assert_eq!(
        found,
        ["app > main > crunch > work > loop_1"],
        "{:#?}",
        search.nodes()
    );
    assert!(along_path(
        &f(&["app", "main", "loop_1", "crunch", "work", "loop_1"]),
        &anywhere
    ));
    assert!(!along_path(
        &f(&["app", "main", "crunch", "work"]),
        &anywhere
    ));
    assert!(!along_path(
        &f(&["app", "main", "decoy", "loop_1"]),
        &anywhere
    ));
}

/// The overhead a report gives is its parts' sum, each a share of the time the program's
/// threads would have run without the search: a probe's share is its hits times the measured
/// cost of one over that time, and a stop's what it took over the same time.
#[test]
fn the_reported_overhead_is_the_stops_and_probes_share_of_the_programs_running_time() {
    let search = Search::new(Settings::default(), f(&["app"]));
    let mut r = search.report(10.0, 0.0);
    // A million timed entries at 50 ns each: 50 ms of timers; the threads ran 9.95 s and
    // the stops took 50 ms of their running, in a search that stopped them 0.3 s in all.
    r.probes.spent = 1e6 * 50e-9;
    r.set_cost(Cost {
        stopped: 0.3,
        lost: 0.05,
        used: 9.95,
        probes: r.probes.spent,
        wall: 10.0,
        ..Cost::default()
    });
    assert!((r.probes.cost - 0.005).abs() < 1e-12, "{}", r.probes.cost);
    assert!((r.stop_cost - 0.005).abs() < 1e-12, "{}", r.stop_cost);
    assert!((r.overhead - 0.01).abs() < 1e-12, "{}", r.overhead);
    assert!((r.stopped - 0.03).abs() < 1e-12, "{}", r.stopped);
    // No running time measured (no stack samples): a share of one thread's wall time.
    let alone = Cost {
        probes: 0.05,
        wall: 10.0,
        ..Cost::default()
    };
    let shares = alone.shares();
    assert_eq!((shares.stops, shares.probes), (0.0, 0.005));
    assert_eq!(Cost::default().shares(), Shares::default());
}

/// gsh's own CPU time takes the program's running where the CPUs are all busy: python3
/// beside a busy twin on 2 CPUs lost 13% to 15% of its running while the stops held it 1% of
/// the time and gsh used 0.2 of a CPU. Where a CPU was free whenever the program wanted one,
/// gsh took nothing from it.
#[test]
fn gshs_own_cpu_time_counts_where_the_program_waited_for_a_cpu() {
    // 30 s on 2 CPUs, all busy: gsh 6 CPU s, the program 25.5, its twin and the rest 28.5;
    // the program waited 4.2 s for a CPU.
    let busy = sample::Competition {
        wall: 30.0,
        gsh: 6.0,
        gsh_there: 6.0,
        program: 25.5,
        waited: 4.2,
        busy: 60.0,
    };
    // Its share of what was not gsh's: 25.5 / 54 of gsh's 6 s.
    assert!(
        (busy.took() - 6.0 * 25.5 / 54.0).abs() < 1e-9,
        "{}",
        busy.took()
    );
    // Never more than it waited.
    let waited_less = sample::Competition {
        waited: 1.0,
        ..busy
    };
    assert_eq!(waited_less.took(), 1.0);
    // A CPU free: the program never waited, gsh took nothing.
    let idle = sample::Competition {
        wall: 30.0,
        gsh: 3.0,
        gsh_there: 3.0,
        program: 29.9,
        waited: 0.0,
        busy: 33.0,
    };
    assert_eq!(idle.took(), 0.0);
    assert_eq!(sample::Competition::default().took(), 0.0);

    // In the report: added to what the stops held, unless the turns measured more.
    let search = Search::new(Settings::default(), f(&["app"]));
    let mut r = search.report(30.0, 0.0);
    let cost = Cost {
        stopped: 0.3,
        lost: 0.1,
        imposed: 0.1,
        used: 25.5,
        wall: 30.0,
        competition: busy,
        ..Cost::default()
    };
    r.set_cost(cost);
    let took = busy.took();
    let base = 25.5 + 0.1 + took;
    assert!(
        (r.stop_cost - (0.1 + took) / base).abs() < 1e-12,
        "{}",
        r.stop_cost
    );
    assert!((r.competed - took / base).abs() < 1e-12, "{}", r.competed);
    assert!((r.gsh_cpu - 0.2).abs() < 1e-12, "{}", r.gsh_cpu);
    assert!((r.waited - 0.14).abs() < 1e-12, "{}", r.waited);
    assert!(r.text().contains("gsh used 20.0% of a CPU"), "{}", r.text());
    // Summed over the threads, in seconds: a share of the time passes 100% with threads.
    assert!(
        r.text().contains("waited for a CPU 4.2 s in all"),
        "{}",
        r.text()
    );
    // The time the cost limit held gsh's own work is told with the search's.
    assert!(!r.text().contains("holding gsh's own work"), "{}", r.text());
    r.held = 12.5;
    assert!(
        r.text()
            .contains("in 30.0 s (12.5 s of it holding gsh's own work to the cost limit)"),
        "{}",
        r.text()
    );
    // The seconds the overhead is a share of are told beside it.
    assert!((r.running - base).abs() < 1e-12, "{}", r.running);
    assert!(
        r.text()
            .contains(&format!("of the {base:.2} s its threads would have run")),
        "{}",
        r.text()
    );
    // The turns measured more than both: they hold gsh's work while it sampled already.
    r.set_cost(Cost { lost: 5.0, ..cost });
    assert!((r.stop_cost - 5.0 / 30.5).abs() < 1e-12, "{}", r.stop_cost);
    assert!((r.overhead - 5.0 / 30.5).abs() < 1e-12, "{}", r.overhead);
    assert!((r.running - 30.5).abs() < 1e-12, "{}", r.running);
}

/// iPath's test of one activation: its callers (innermost first, as its return addresses
/// name them) must be the call path's, from the path's last caller up to its entry, and what
/// called the entry must be the C runtime (or nothing), as the stack samples name a path. A
/// path ending in the same call through another caller (the decoy) is no match; a walk cut at
/// its depth limit matches where the callers it holds agree.
#[test]
fn an_activation_is_on_a_call_path_when_its_callers_are_the_paths_up_to_the_entry() {
    use stacks::{on_path, FrameName};
    let frame = |module: &str, function: &str| FrameName {
        module: module.into(),
        function: function.into(),
        main: module == "app",
    };
    let path = |p: &[&str]| p.iter().map(|s| (*s).to_owned()).collect::<Vec<_>>();
    let stack = |fs: &[&str]| {
        let mut v: Vec<FrameName> = fs.iter().map(|f| frame("app", f)).collect();
        v.push(frame("libc.so.6", "__libc_start_call_main"));
        v.push(frame("libc.so.6", "__libc_start_main"));
        v.push(frame("app", "_start"));
        v
    };
    let hot = path(&["main", "heavy", "common", "leaf"]);
    let decoy = path(&["main", "light", "common", "leaf"]);
    let through_heavy = stack(&["common", "heavy", "main"]);
    assert!(on_path(&through_heavy, &hot, true));
    assert!(!on_path(&through_heavy, &decoy, true));
    assert!(on_path(&stack(&["common", "light", "main"]), &decoy, true));
    // A recursive entry: `main` called from `main` is another path than the entry's own.
    let again = stack(&["common", "heavy", "main", "main"]);
    assert!(!on_path(&again, &hot, true));
    // A thread's entry with no caller at all (the walk ended at the stack's end).
    let worker = [frame("app", "common"), frame("app", "worker")];
    assert!(on_path(&worker, &path(&["worker", "common", "leaf"]), true));
    // A walk that ended before the path's entry: a match only when cut at its depth limit.
    let cut = [frame("app", "common"), frame("app", "heavy")];
    assert!(!on_path(&cut, &hot, true));
    assert!(on_path(&cut, &hot, false));
    assert!(!on_path(
        &[frame("app", "common"), frame("app", "light")],
        &hot,
        false
    ));
    // No path, or a path of its function alone from a caller that is the program's.
    assert!(!on_path(&through_heavy, &[], true));
    assert!(!on_path(&through_heavy, &path(&["leaf"]), true));
}

/// A lab whose refinement of `app > main > crunch` needs something it prepares in the
/// background (a large module's analysis) and has only at `ready_at` seconds.
struct Preparing {
    model: Model,
    slow: String,
    ready_at: f64,
}

impl Lab for Preparing {
    fn refine(&mut self, h: Hypothesis, focus: &Focus) -> Option<Vec<(Focus, f64)>> {
        if focus.to_string() == self.slow && self.model.now < self.ready_at {
            return None;
        }
        self.model.refine(h, focus)
    }
    fn preparing(&mut self, _: Hypothesis, focus: &Focus) -> bool {
        focus.to_string() == self.slow && self.model.now < self.ready_at
    }
    fn predicted_cost(&mut self, e: &Experiment) -> Option<f64> {
        self.model.predicted_cost(e)
    }
    fn start(&mut self, e: &Experiment) -> Result<ProbeId, String> {
        self.model.start(e)
    }
    fn read(&mut self, probe: ProbeId) -> Option<Reading> {
        self.model.read(probe)
    }
    fn stop(&mut self, probe: ProbeId) {
        self.model.stop(probe)
    }
}

/// A true function whose loops the lab can name only once a background analysis is done,
/// longer after it was judged than the bounded wait (python3's interpreter on a loaded
/// machine): the search waits for it and concludes at the loop, not at the function. A lab
/// that is preparing nothing is waited for only the bounded wait.
#[test]
fn a_refinement_the_lab_is_preparing_is_waited_for_past_the_bounded_wait() {
    let slow = f(&["app", "main", "crunch"]).to_string();
    let mut lab = Preparing {
        model: cpu_in_an_inner_loop(),
        slow: slow.clone(),
        ready_at: 3.0 * Settings::default().max_wait,
    };
    let mut search = Search::new(Settings::default(), f(&["app"]));
    loop {
        let now = lab.model.now;
        if !search.step(&mut lab, now) {
            break;
        }
        lab.model.now += 0.1;
        assert!(lab.model.now < 600.0, "the search does not end");
    }
    let found: Vec<String> = search
        .findings()
        .iter()
        .map(|f| f.focus.to_string())
        .collect();
    assert!(
        found
            .iter()
            .any(|f| f.starts_with(&format!("{slow} > loop_1"))),
        "{found:?}"
    );
    assert!(!found.contains(&slow), "{found:?}");
}

/// The program is named as its process is: its `comm`, whole from `argv[0]` where the kernel
/// cut it at 15 characters, and never from arguments a program rewrote (redis' title).
#[test]
fn a_program_is_named_by_its_comm_completed_from_argv0() {
    use sample::name_of;
    assert_eq!(
        name_of("redis-server", "/usr/bin/redis-server *:6379").as_deref(),
        Some("redis-server")
    );
    assert_eq!(
        name_of("decoy-through-a", "./decoy-through-a-long-link").as_deref(),
        Some("decoy-through-a-long-link")
    );
    // Cut, but argv[0] is another name (a renamed thread or rewritten arguments).
    assert_eq!(
        name_of("decoy-through-a", "something-else-entirely").as_deref(),
        Some("decoy-through-a")
    );
    assert_eq!(name_of("python3", "").as_deref(), Some("python3"));
    assert_eq!(name_of("", "/bin/true"), None);
}

/// A lab on a process that has ended: nothing starts, for the reason sampling `/proc` gives.
struct Ended {
    /// Whether the lab knows the process ended (a lab that cannot tell reports failures).
    knows: bool,
}

impl Lab for Ended {
    fn refine(&mut self, _: Hypothesis, _: &Focus) -> Option<Vec<(Focus, f64)>> {
        Some(Vec::new())
    }

    fn predicted_cost(&mut self, _: &Experiment) -> Option<f64> {
        Some(0.0)
    }

    fn ended(&mut self) -> bool {
        self.knows
    }

    fn start(&mut self, _: &Experiment) -> Result<ProbeId, String> {
        Err("process 42: No such file or directory (os error 2)".into())
    }

    fn read(&mut self, _: ProbeId) -> Option<Reading> {
        None
    }

    fn stop(&mut self, _: ProbeId) {}
}

/// An experiment that cannot start because the program ended under the search did not fail:
/// it stays untested, with no note about the gone process (`consult` on a program exiting
/// mid-search listed "failed ... No such file or directory"). A start that fails while the
/// process lives is still a failure.
#[test]
fn experiments_a_program_that_ended_cannot_start_stay_untested() {
    let mut search = Search::new(Settings::default(), f(&["app"]));
    search.step(&mut Ended { knows: true }, 0.0);
    assert!(!search.nodes().is_empty());
    for n in search.nodes() {
        assert_eq!(n.state, State::Untested, "{n:?}");
        assert_eq!(n.note, None, "{n:?}");
    }
    let mut search = Search::new(Settings::default(), f(&["app"]));
    search.step(&mut Ended { knows: false }, 0.0);
    assert!(search.nodes().iter().all(|n| n.state == State::Failed));
}

/// A model program that ends `ends` seconds (real time) after its lab is made, as `run`
/// measures time: from then on its lab reads nothing (a probe's values go with the process)
/// and says the program ended. Readings of the foci in `lag` cover that many seconds less
/// than their experiment has run (a timer that took turns with a counter first, a refinement
/// waiting for stack samples).
struct EndsAt {
    model: Model,
    begun: std::time::Instant,
    ends: f64,
    lag: HashMap<String, f64>,
}

impl EndsAt {
    fn clock(&mut self) -> bool {
        self.model.now = self.begun.elapsed().as_secs_f64();
        self.model.now >= self.ends
    }
}

impl Lab for EndsAt {
    fn refine(&mut self, h: Hypothesis, focus: &Focus) -> Option<Vec<(Focus, f64)>> {
        self.model.refine(h, focus)
    }
    fn predicted_cost(&mut self, e: &Experiment) -> Option<f64> {
        self.model.predicted_cost(e)
    }
    fn ended(&mut self) -> bool {
        self.clock()
    }
    fn start(&mut self, e: &Experiment) -> Result<ProbeId, String> {
        if self.clock() {
            return Err("process 42: No such file or directory (os error 2)".into());
        }
        self.model.start(e)
    }
    fn read(&mut self, probe: ProbeId) -> Option<Reading> {
        if self.clock() {
            return None;
        }
        let lag = *self
            .lag
            .get(&self.model.running[&probe.0].0.focus.to_string())
            .unwrap_or(&0.0);
        let r = self.model.read(probe)?;
        (r.seconds >= lag).then_some(Reading {
            seconds: r.seconds - lag,
            ..r
        })
    }
    fn stop(&mut self, probe: ProbeId) {
        self.model.stop(probe)
    }
}

/// A program that ends while experiments run: each that ran the settle time with a reading of
/// at least half of it is judged on what it read (`main`, well above the threshold, is a
/// conclusion), one inside the hysteresis band stays untested, and each says the program
/// ended. They were all left untested, with no word why, and the search concluded at the
/// program. (Real time, as `run` keeps it: a settle time of 2 s leaves the clocks' jitter on
/// a loaded machine ±0.4 s of room.)
#[test]
fn experiments_running_when_the_program_ends_are_judged_on_what_they_read() {
    let mut model = Model::new(0.0);
    model
        .child(&["app"], "main", 1.0)
        .child(&["app"], "banded", 0.5);
    model
        .truth(Hypothesis::CPUBound, &["app"], 0.95)
        .truth(Hypothesis::CPUBound, &["app", "main"], 0.9)
        .truth(Hypothesis::CPUBound, &["app", "banded"], 0.3);
    // The root is judged at about 2 s and its children start then; `main`'s reading, 0.8 s
    // behind, covers about 1.6 s when the program ends at 4.5 s: short of the settle time,
    // more than half of it.
    let begun = std::time::Instant::now();
    let mut lab = EndsAt {
        model,
        begun,
        ends: 4.5,
        lag: HashMap::from([(f(&["app", "main"]).to_string(), 0.8)]),
    };
    let settings = Settings {
        settle: 2.0,
        ..Settings::default()
    };
    let mut search = Search::new(settings, f(&["app"]));
    let seconds = run(
        &mut search,
        &mut lab,
        std::time::Duration::from_secs(30),
        &std::sync::atomic::AtomicBool::new(false),
        || begun.elapsed().as_secs_f64() < 4.5,
    );
    assert!((4.5..8.0).contains(&seconds), "{seconds}");
    assert!(lab.model.running.is_empty(), "every probe is out");
    let node = |path: &[&str]| {
        search
            .nodes()
            .iter()
            .find(|n| {
                n.experiment.hypothesis == Hypothesis::CPUBound && n.experiment.focus == f(path)
            })
            .unwrap_or_else(|| panic!("{path:?} not tested: {:#?}", search.nodes()))
    };
    let main = node(&["app", "main"]);
    assert_eq!(main.state, State::True, "{main:?}");
    assert!(
        main.note.as_deref().unwrap().contains("program ended"),
        "{main:?}"
    );
    let banded = node(&["app", "banded"]);
    assert_eq!(banded.state, State::Untested, "{banded:?}");
    assert!(
        banded.note.as_deref().unwrap().contains("hysteresis band"),
        "{banded:?}"
    );
    let found: Vec<String> = search
        .findings()
        .iter()
        .map(|x| x.focus.to_string())
        .collect();
    assert_eq!(found, vec!["app > main".to_string()]);
}

/// A wait is a share of the time its thread was not waiting for a CPU: three threads taking
/// turns at a lock at a load of 15 on 2 CPUs were seen waiting 0.17 to 0.25 of their wall
/// time (0.19 to 0.23 in the function and at the lock), runnable 0.56 to 0.65 of it, and the
/// search, judging against SyncWait's 0.20 of the wall time, named the lock in one search of
/// ten. Of their own time it is 0.38 to 0.50. The share is at most doubled, and a thread that
/// never waited for a CPU is as measured.
#[test]
fn a_wait_is_a_share_of_the_time_its_thread_was_not_waiting_for_a_cpu() {
    use proclab::own_share;
    let t = Hypothesis::SyncWait.default_threshold() * (1.0 + Settings::default().hysteresis);
    for (seen, queued) in [(0.17, 0.65), (0.19, 0.56), (0.2, 0.63)] {
        assert!(seen < t && own_share(seen, queued) > t, "{seen} {queued}");
    }
    assert_eq!(own_share(0.3, 0.0), 0.3);
    assert_eq!(own_share(0.1, 0.95), 0.2);
    assert_eq!(own_share(0.9, 0.5), 1.0);
}

/// A finding at a wait on several descriptors: its focus lists the module, the functions and
/// then the wait, once, summarised (each kind of descriptor at each place once, the first
/// four kinds, the rest counted); its JSON names the call, the epoll instance and every
/// descriptor with what it is beside the focus; a finding of any other kind has no such field.
#[test]
fn a_wait_on_several_descriptors_is_one_focus_entry_and_a_json_field() {
    let w = |fd: i32, kind: &str, at: &str, what: &str| Watched {
        fd,
        kind: kind.into(),
        at: at.into(),
        what: what.into(),
    };
    let mut fds = vec![
        w(3, "pipe", "", "pipe:[300]"),
        w(6, "listening socket", " *:6379", "listening socket *:6379"),
    ];
    fds.extend((8..28).map(|fd| {
        w(
            fd,
            "client connection",
            " to 127.0.0.1:6379",
            &format!("client connection to 127.0.0.1:6379 from 127.0.0.1:{fd}"),
        )
    }));
    let set = WaitSet {
        call: "epoll_wait".into(),
        epfd: Some(5),
        fds,
    };
    let mut focus = f(&["redis-server"]).with(Resource::Thread(7));
    for r in [
        Resource::Module("redis-server".into()),
        Resource::Function("main".into()),
        Resource::Function("aeMain".into()),
        Resource::Module("libc.so.6".into()),
        Resource::Function("epoll_wait".into()),
        Resource::Wait(set.clone()),
    ] {
        focus = focus.with(r);
    }
    let finding = Finding {
        hypothesis: Hypothesis::ExternalWait,
        focus,
        fraction: 0.4,
        measured: Some(Method::Samples),
    };
    let out = FindingOut::from(&finding);
    assert_eq!(
        out.focus,
        [
            "redis-server",
            "redis-server",
            "main",
            "aeMain",
            "libc.so.6",
            "epoll_wait",
            "epoll fd 5 watching 22 fds: pipe:[300], listening socket *:6379, \
             20 client connections to 127.0.0.1:6379"
        ]
    );
    let json = serde_json::to_value(&out).unwrap();
    assert_eq!(json["thread"], 7);
    assert_eq!(json["waits_on"]["call"], "epoll_wait");
    assert_eq!(json["waits_on"]["epfd"], 5);
    assert_eq!(json["waits_on"]["fds"].as_array().unwrap().len(), 22);
    assert_eq!(
        json["waits_on"]["fds"][1],
        serde_json::json!({"fd": 6, "kind": "listening socket", "what": "listening socket *:6379"})
    );
    // Many kinds: the first four listed, the rest counted.
    let poll = WaitSet {
        call: "poll".into(),
        epfd: None,
        fds: (0..6)
            .map(|fd| w(fd, "file", &format!(" /f{fd}"), &format!("/f{fd}")))
            .collect(),
    };
    assert_eq!(
        poll.to_string(),
        "poll on 6 fds: /f0, /f1, /f2, /f3, and 2 more"
    );
    let plain = FindingOut::from(&Finding {
        focus: f(&["app", "main"]),
        ..finding
    });
    let json = serde_json::to_value(&plain).unwrap();
    assert!(json.get("waits_on").is_none(), "{json}");
}

/// Inserting and removing probes hold the whole program: each thread loses what it would have
/// run meanwhile, at the threads' mean rate over the search, and that is part of the overhead.
/// (On redis-server under load, the changes of a 6 s search took 147 ms, the first, loading
/// the runtime, 66 ms; the estimate, counting none of it, read 0.02% where the server lost
/// 3% to 5%.)
#[test]
fn changes_cost_what_holding_the_whole_program_took_from_its_threads() {
    let cost = Cost {
        used: 12.0,
        wall: 10.0,
        changes: 0.5,
        ..Cost::default()
    };
    let s = cost.shares();
    // 1.2 threads' worth running, held 0.5 s: 0.6 s of the 12 they ran.
    assert!((s.changes - 0.6 / 12.0).abs() < 1e-12, "{s:?}");
    assert!((s.overhead() - (s.stops + s.probes + s.changes)).abs() < 1e-12);
    assert!(s.changes > 0.0 && s.overhead() >= s.changes);
    // No running measured: one thread's worth of the wall time.
    let bare = Cost {
        wall: 10.0,
        changes: 0.5,
        ..Cost::default()
    }
    .shares();
    assert!((bare.changes - 0.05).abs() < 1e-12, "{bare:?}");
    // In the report, beside the probes' own cost.
    let search = Search::new(Settings::default(), f(&["app"]));
    let mut r = search.report(10.0, 0.0);
    r.set_cost(cost);
    assert!((r.probes.change_cost - 0.05).abs() < 1e-12);
    assert!((r.overhead - 0.05).abs() < 1e-12, "{}", r.overhead);
}

/// The running time a search took reads in the unit that suits it: of a program that hardly
/// ran (an event loop waiting on a timer), 55% may be a fraction of a millisecond.
#[test]
fn the_running_time_lost_reads_in_its_unit() {
    assert_eq!(lost_time(0.156), "0.16 s");
    assert_eq!(lost_time(0.00154), "1.5 ms");
    assert_eq!(lost_time(0.000_042), "42 us");
}
