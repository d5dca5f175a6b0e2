//! gsh's own work during a search, held to the search's cost limit.
//!
//! The stack sampler paces its stops by the cost limit ([`super::stacks::sample_stacks`]), and
//! the search starts no probe once the probes have spent their share. The rest of what gsh
//! does during a search was not paced: analysing the code a loop timer goes into, planning
//! and inserting the timers. On a loaded machine every CPU second of it is taken from the
//! program ([`super::sample::Competition::took`]): attached to redis-server under
//! `redis-benchmark`, gsh's competition alone was 7.2% of the server's running time against
//! the default `--cost 5`, most of it the analysis of redis-server's code.
//!
//! A [`Pace`] is told what the whole search has cost so far (the stops, gsh's competition
//! and the probes: what its report will say) and holds that work while it is at [`HOLD_AT`] of
//! the limit: the analysis waits between functions ([`crate::symbols::Progress::pace`]), and
//! the search starts no probe (its lab's `spent`). The program's running time grows while
//! they wait, and the share falls back under the aim. Where the CPUs have room, gsh's work
//! takes nothing from the program, the share stays low, and nothing waits.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// The share of `--cost` the sampler's stops, the probes and gsh's other work aim at: what
/// they cost is measured by turns a few seconds long and readings a few hundred milliseconds
/// apart, with the noise of a shared machine, and the aim leaves room for it.
pub const AIM: f64 = 0.8;

/// The share of `--cost` at which gsh's other work is held: above [`AIM`], which the sampler's
/// stops fill by themselves where nothing else costs (held at the aim, the analysis behind
/// loop timers never ran: a search of redis-server under load held it 29.6 s of its 30), and
/// under the limit. Between the two the sampler backs off as gsh's other work grows (it counts
/// that work against its stops, which keep a tenth of the limit), and that work goes on.
pub const HOLD_AT: f64 = 0.9;

/// How long a held piece of work sleeps before it looks again.
const LOOK_EVERY: Duration = Duration::from_millis(10);

/// What a search has cost so far against its limit, shared by the threads whose work it holds.
#[derive(Debug)]
pub struct Pace {
    /// The search's cost limit, a share of the program's running time.
    limit: f64,
    /// What the search has cost so far, the same share, as `f64` bits.
    spent: AtomicU64,
    /// Set once the search is over: nothing is held any more.
    released: AtomicBool,
    /// How long gsh's work has been held so far, and since when it is held, where it is.
    held: Mutex<(Duration, Option<Instant>)>,
}

impl Pace {
    /// A pace for a search limited to `limit` of the program's running time, nothing spent yet.
    pub fn new(limit: f64) -> Pace {
        Pace {
            limit,
            spent: AtomicU64::new(0f64.to_bits()),
            released: AtomicBool::new(false),
            held: Mutex::new((Duration::ZERO, None)),
        }
    }

    /// Tells what the search has cost so far ([`super::Shares::overhead`]).
    pub fn tell(&self, spent: f64) {
        self.spent.store(spent.to_bits(), Ordering::Relaxed);
        let holding = self.holding();
        let mut held = self.held.lock().unwrap_or_else(|e| e.into_inner());
        match (held.1, holding) {
            (None, true) => held.1 = Some(Instant::now()),
            (Some(since), false) => *held = (held.0 + since.elapsed(), None),
            _ => {}
        }
    }

    /// How long gsh's work has been held so far, as told: the time its cost limit added to
    /// the search (the report's `held`).
    pub fn held(&self) -> Duration {
        let held = self.held.lock().unwrap_or_else(|e| e.into_inner());
        held.0 + held.1.map_or(Duration::ZERO, |since| since.elapsed())
    }

    /// The search's cost limit, a share of the program's running time.
    pub fn limit(&self) -> f64 {
        self.limit
    }

    /// What the search has cost so far, as last told.
    pub fn spent(&self) -> f64 {
        f64::from_bits(self.spent.load(Ordering::Relaxed))
    }

    /// True while gsh's own work waits: the search has spent [`HOLD_AT`] of its limit or
    /// more, and is not over.
    pub fn holding(&self) -> bool {
        !self.released.load(Ordering::Relaxed) && self.spent() >= self.limit * HOLD_AT
    }

    /// Returns once the work may go on ([`Pace::holding`] false).
    pub fn wait(&self) {
        while self.holding() {
            std::thread::sleep(LOOK_EVERY);
        }
    }

    /// The search is over: whatever waits goes on, and nothing waits again.
    pub fn release(&self) {
        self.released.store(true, Ordering::Relaxed);
        let mut held = self.held.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(since) = held.1.take() {
            held.0 += since.elapsed();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[test]
    fn work_is_held_while_the_search_is_at_its_aim_and_goes_on_once_it_is_under() {
        let pace = Arc::new(Pace::new(0.05));
        assert!(!pace.holding(), "nothing spent yet");
        pace.tell(0.05 * HOLD_AT * 0.99);
        assert!(!pace.holding());
        pace.tell(0.05 * HOLD_AT);
        assert!(pace.holding());
        let held = {
            let pace = pace.clone();
            std::thread::spawn(move || pace.wait())
        };
        std::thread::sleep(Duration::from_millis(100));
        assert!(
            !held.is_finished(),
            "the work went on while the search was over its aim"
        );
        pace.tell(0.01);
        held.join().unwrap();
        assert!(!pace.holding());
        // Held from the tell that held it to the one that let go, and no longer.
        let was = pace.held();
        assert!(was >= Duration::from_millis(100), "{was:?}");
        std::thread::sleep(Duration::from_millis(20));
        assert_eq!(pace.held(), was);
    }

    #[test]
    fn a_search_that_is_over_holds_nothing() {
        let pace = Arc::new(Pace::new(0.05));
        pace.tell(1.0);
        let held = {
            let pace = pace.clone();
            std::thread::spawn(move || pace.wait())
        };
        std::thread::sleep(Duration::from_millis(50));
        assert!(!held.is_finished());
        pace.release();
        held.join().unwrap();
        assert!(
            !pace.holding(),
            "released, it holds nothing whatever it is told"
        );
    }
}
