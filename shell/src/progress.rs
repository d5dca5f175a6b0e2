//! A progress bar for long analysis (building a big binary's function table), on stderr.
//!
//! It appears only when stderr is a terminal and only once the work has taken half a second,
//! so quick commands and piped output never see it. Each step of the work (finding functions,
//! building control-flow graphs, finding loops...) names itself and counts from 0 again, and
//! the clock ticks on its own, so a step after the bar's last update never looks frozen.

use std::io::IsTerminal;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

/// Raised by Ctrl-C while a command runs at the prompt (see `repl.rs`): long analysis stops at
/// its next progress report.
pub static CANCEL: AtomicBool = AtomicBool::new(false);

/// The panic payload that unwinds a cancelled analysis back to the prompt. The engine keeps
/// its results in `OnceLock`s, which stay empty when their initializer unwinds, so the work
/// simply runs again next time.
pub struct Cancelled;

/// Unwinds with [`Cancelled`] once Ctrl-C was pressed.
fn check_cancel() {
    if CANCEL.load(Ordering::Relaxed) {
        std::panic::panic_any(Cancelled);
    }
}

/// How long work runs before a bar is worth showing.
const DELAY: Duration = Duration::from_millis(500);

/// An [`engine::symbols::Progress`] drawing an indicatif bar after [`DELAY`].
pub struct Bar {
    label: String,
    started: Instant,
    enabled: bool,
    bar: Mutex<Option<ProgressBar>>,
    /// The step running now, shown after the label.
    phase: Mutex<Option<String>>,
}

impl Bar {
    /// A bar labelled `label` (e.g. `analysing cc1`); it stays hidden off a terminal.
    pub fn new(label: impl Into<String>) -> Bar {
        Bar {
            label: label.into(),
            started: Instant::now(),
            enabled: std::io::stderr().is_terminal(),
            bar: Mutex::new(None),
            phase: Mutex::new(None),
        }
    }

    /// `analysing cc1: building control-flow graphs`.
    fn message(&self) -> String {
        match self.phase.lock().ok().and_then(|p| p.clone()) {
            Some(p) => format!("{}: {p}", self.label),
            None => self.label.clone(),
        }
    }
}

impl engine::symbols::Progress for Bar {
    fn update(&self, done: u64, total: u64) {
        check_cancel();
        if !self.enabled || self.started.elapsed() < DELAY {
            return;
        }
        // A poisoned lock only means another update panicked; drawing is best effort.
        let Ok(mut slot) = self.bar.lock() else {
            return;
        };
        let bar = slot.get_or_insert_with(|| {
            let bar = ProgressBar::with_draw_target(Some(total), ProgressDrawTarget::stderr());
            let style = ProgressStyle::with_template("{msg} [{bar:40}] {percent}% ({elapsed})")
                .unwrap_or_else(|_| ProgressStyle::default_bar())
                .progress_chars("=> ");
            bar.set_style(style);
            bar.set_message(self.message());
            // Redraw (and so advance the clock) even between updates.
            bar.enable_steady_tick(Duration::from_millis(250));
            bar
        });
        bar.set_length(total);
        bar.set_position(done);
    }

    fn phase(&self, what: &str) {
        check_cancel();
        if let Ok(mut p) = self.phase.lock() {
            *p = Some(what.to_owned());
        }
        if !self.enabled || self.started.elapsed() < DELAY {
            return;
        }
        // A step starts at 0% under its own name; one that never reports units stays there
        // with the clock running, which is true, unlike a bar stuck at 100%.
        self.update(0, 1);
        if let Ok(slot) = self.bar.lock() {
            if let Some(bar) = slot.as_ref() {
                bar.set_message(self.message());
            }
        }
    }
}

impl Drop for Bar {
    fn drop(&mut self) {
        if let Ok(mut slot) = self.bar.lock() {
            if let Some(bar) = slot.take() {
                bar.finish_and_clear();
            }
        }
    }
}
