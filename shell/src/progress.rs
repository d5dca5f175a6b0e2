//! A progress bar for long analysis (building a big binary's function table), on stderr.
//!
//! It appears only when stderr is a terminal and only once the work has taken half a second,
//! so quick commands and piped output never see it.

use std::io::IsTerminal;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

/// How long work runs before a bar is worth showing.
const DELAY: Duration = Duration::from_millis(500);

/// An [`engine::symbols::Progress`] drawing an indicatif bar after [`DELAY`].
pub struct Bar {
    label: String,
    started: Instant,
    enabled: bool,
    bar: Mutex<Option<ProgressBar>>,
}

impl Bar {
    /// A bar labelled `label` (e.g. `analysing cc1`); it stays hidden off a terminal.
    pub fn new(label: impl Into<String>) -> Bar {
        Bar {
            label: label.into(),
            started: Instant::now(),
            enabled: std::io::stderr().is_terminal(),
            bar: Mutex::new(None),
        }
    }
}

impl engine::symbols::Progress for Bar {
    fn update(&self, done: u64, total: u64) {
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
            bar.set_message(self.label.clone());
            bar
        });
        bar.set_length(total);
        bar.set_position(done);
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
