//! [`ProcLab`]: a [`Lab`] that measures a live process's program and thread foci by sampling
//! `/proc` ([`super::sample`]), with no probe in the process: such experiments cost the program
//! nothing but a share of a CPU for the sampling thread, which [`ProcLab::overhead`] reports.
//!
//! Foci below a thread (module, function, loop, call path) need instrumentation; this lab
//! refines a thread only to the descriptors it blocks on ([`Resource::File`]) and leaves deeper
//! refinement to a lab that inserts probes.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use super::sample::Sampler;
use super::{Experiment, Focus, Hypothesis, Lab, ProbeId, Reading, Resource};

/// How often every running experiment's sampler looks at the process.
const PERIOD: Duration = Duration::from_millis(5);

struct Shared {
    /// Each experiment's sampler, and when it started.
    samplers: BTreeMap<u64, (Sampler, Instant)>,
    /// The last sampling error: the process is gone or unreadable.
    error: Option<String>,
}

/// Measures program and thread foci of process `pid` by sampling.
pub struct ProcLab {
    pid: i32,
    shared: Arc<Mutex<Shared>>,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<Duration>>,
    started: Instant,
    next: u64,
    experiments: BTreeMap<u64, Experiment>,
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
    /// A lab for process `pid`, sampling from a thread of its own until dropped.
    pub fn new(pid: i32) -> ProcLab {
        let shared = Arc::new(Mutex::new(Shared {
            samplers: BTreeMap::new(),
            error: None,
        }));
        let stop = Arc::new(AtomicBool::new(false));
        let (s, st) = (shared.clone(), stop.clone());
        let thread = std::thread::Builder::new()
            .name("gsh-consult-sampler".into())
            .spawn(move || {
                while !st.load(Ordering::Relaxed) {
                    {
                        let mut sh = s.lock().unwrap_or_else(|e| e.into_inner());
                        let mut failed = None;
                        for (sampler, _) in sh.samplers.values_mut() {
                            if let Err(e) = sampler.sample() {
                                failed = Some(e.to_string());
                            }
                        }
                        if failed.is_some() {
                            sh.error = failed;
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
        }
    }

    /// The thread a focus names, if any.
    fn thread_of(focus: &Focus) -> Option<i32> {
        focus.0.iter().find_map(|r| match r {
            Resource::Thread(t) => Some(*t as i32),
            _ => None,
        })
    }

    /// Why sampling stopped, when the process went away or became unreadable.
    pub fn error(&self) -> Option<String> {
        self.shared
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .error
            .clone()
    }

    /// Stops sampling and returns the share of one CPU the sampling thread used while it ran.
    pub fn overhead(mut self) -> f64 {
        self.stop.store(true, Ordering::Relaxed);
        let cpu = self
            .thread
            .take()
            .and_then(|t| t.join().ok())
            .unwrap_or_default();
        cpu.as_secs_f64() / self.started.elapsed().as_secs_f64().max(1e-9)
    }
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
    fn refine(&mut self, h: Hypothesis, focus: &Focus) -> Vec<(Focus, f64)> {
        // A fresh look at the process: its threads, each with how much of the hypothesis it
        // showed in the experiment just judged, as the priority.
        let sh = self.shared.lock().unwrap_or_else(|e| e.into_inner());
        let judged = self
            .experiments
            .iter()
            .rev()
            .find(|(_, e)| e.hypothesis == h && &e.focus == focus)
            .and_then(|(id, _)| sh.samplers.get(id));
        let Some((sampler, _)) = judged else {
            return Vec::new();
        };
        match focus.last() {
            Some(Resource::Program(_)) => sampler
                .threads()
                .into_iter()
                .map(|t| {
                    let p = t.fractions.get(&h).copied().unwrap_or(0.0);
                    (focus.with(Resource::Thread(t.tid as u32)), p)
                })
                .collect(),
            Some(Resource::Thread(tid)) if matches!(h, Hypothesis::IOBlocking) => sampler
                .threads()
                .into_iter()
                .filter(|t| t.tid == *tid as i32)
                .flat_map(|t| t.fds)
                .map(|(fd, p)| {
                    let path = std::fs::read_link(format!("/proc/{}/fd/{fd}", self.pid))
                        .map(|p| p.to_string_lossy().into_owned())
                        .unwrap_or_else(|_| "?".into());
                    (focus.with(Resource::File { fd, path }), p)
                })
                .collect(),
            _ => Vec::new(),
        }
    }

    fn predicted_cost(&mut self, _: &Experiment) -> f64 {
        0.0
    }

    fn start(&mut self, e: &Experiment) -> Result<ProbeId, String> {
        match e.focus.last() {
            Some(Resource::Program(_) | Resource::Thread(_)) => {}
            Some(Resource::File { .. }) if e.hypothesis == Hypothesis::IOBlocking => {}
            Some(r) => return Err(format!("{r} cannot be measured by sampling")),
            None => return Err("an empty focus".into()),
        }
        let mut sampler = Sampler::new(self.pid);
        sampler
            .sample()
            .map_err(|err| format!("process {}: {err}", self.pid))?;
        self.next += 1;
        self.shared
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .samplers
            .insert(self.next, (sampler, Instant::now()));
        self.experiments.insert(self.next, e.clone());
        Ok(ProbeId(self.next))
    }

    fn read(&mut self, probe: ProbeId) -> Option<Reading> {
        let e = self.experiments.get(&probe.0)?;
        let sh = self.shared.lock().unwrap_or_else(|e| e.into_inner());
        let (sampler, since) = sh.samplers.get(&probe.0)?;
        let threads = sampler.threads();
        let thread = Self::thread_of(&e.focus);
        let fraction = match (e.focus.last(), thread) {
            (Some(Resource::File { fd, .. }), Some(tid)) => threads
                .iter()
                .filter(|t| t.tid == tid)
                .flat_map(|t| &t.fds)
                .find(|(f, _)| f == fd)
                .map_or(0.0, |(_, p)| *p),
            (_, Some(tid)) => threads
                .iter()
                .find(|t| t.tid == tid)
                .and_then(|t| t.fractions.get(&e.hypothesis).copied())
                .unwrap_or(0.0),
            // The program: its busiest thread for the hypothesis, since a thread's wall time
            // is what the thresholds are fractions of.
            (_, None) => threads
                .iter()
                .filter_map(|t| t.fractions.get(&e.hypothesis).copied())
                .fold(0.0, f64::max),
        };
        threads.first()?;
        Some(Reading {
            fraction,
            seconds: since.elapsed().as_secs_f64(),
        })
    }

    fn stop(&mut self, probe: ProbeId) {
        // The sampler is kept until the lab is dropped: refinement reads the judged one.
        let _ = probe;
    }
}

#[cfg(test)]
mod tests {
    use super::super::{Search, Settings, State};
    use super::*;
    use std::process::{Command, Stdio};

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

    #[test]
    fn a_process_that_is_gone_fails_the_experiment_with_why() {
        let mut c = Command::new("true").spawn().unwrap();
        let pid = c.id() as i32;
        c.wait().unwrap();
        let mut lab = ProcLab::new(pid);
        let mut search = Search::new(
            Settings::default(),
            Focus(vec![Resource::Program("true".into())]),
        );
        assert!(!search.step(&mut lab, 0.0));
        assert!(search.nodes().iter().all(|n| n.state == State::Failed));
        assert!(
            search.nodes()[0]
                .note
                .as_deref()
                .unwrap()
                .contains(&format!("process {pid}")),
            "{:?}",
            search.nodes()[0].note
        );
    }
}
