//! Paradyn's time histogram (Miller et al., "The Paradyn Parallel Performance Measurement
//! Tool", 1995, §2.1): how one metric varied over time, in a fixed number of buckets of equal
//! width. Samples of a cumulative metric arrive as "by time `at`, it grew by `amount`"; the
//! amount is spread over the buckets the interval since the previous sample covers, in
//! proportion to the overlap. When time runs past the last bucket the histogram *folds*:
//! adjacent pairs of buckets merge into the first half and the bucket width doubles, as many
//! times as needed. A run of hours therefore costs the same memory as a run of seconds, and the
//! resolution degrades gracefully (logarithmically) instead of the oldest data being dropped.
//!
//! The histogram knows nothing about processes or metrics; `watch` in the shell keeps one per
//! metric and draws it.

#![warn(missing_docs)]

use std::time::Duration;

/// Buckets per histogram unless the caller asks otherwise: enough for a sparkline to show a
/// shape, few enough to fit beside a table.
pub const DEFAULT_BUCKETS: usize = 64;

/// Why a histogram could not be made or fed.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum HistogramError {
    /// Folding merges pairs of buckets, so their number must be even (and not zero).
    #[error("a time histogram needs an even number of buckets, at least 2, not {0}")]
    BucketCount(usize),
    /// A bucket must span some time.
    #[error("a time histogram's bucket width must be more than zero")]
    ZeroWidth,
    /// Samples must come in time order: the interval before `at` is recorded already.
    #[error("a sample at {at:?} is earlier than the {end:?} already recorded")]
    Backwards {
        /// The sample's time, since the histogram's start.
        at: Duration,
        /// The end of what is recorded already, since the start.
        end: Duration,
    },
}

/// One metric's values over time, since time zero (the histogram's start), in constant space.
#[derive(Clone, Debug, PartialEq)]
pub struct TimeHistogram {
    /// The amount that accrued in each bucket; bucket `i` covers `[i·width, (i+1)·width)`.
    /// Fractions come from spreading a sample over several buckets.
    buckets: Vec<f64>,
    width: Duration,
    /// How far time has been recorded: the end of the last sample's interval.
    end: Duration,
    /// The sum of every amount recorded, kept exactly (the buckets hold it up to rounding).
    total: u64,
    folds: u32,
}

impl TimeHistogram {
    /// An empty histogram of `buckets` buckets (even, at least 2) of `width` each.
    pub fn new(buckets: usize, width: Duration) -> Result<TimeHistogram, HistogramError> {
        if buckets < 2 || !buckets.is_multiple_of(2) {
            return Err(HistogramError::BucketCount(buckets));
        }
        if width.is_zero() {
            return Err(HistogramError::ZeroWidth);
        }
        Ok(TimeHistogram {
            buckets: vec![0.0; buckets],
            width,
            end: Duration::ZERO,
            total: 0,
            folds: 0,
        })
    }

    /// Records that the metric grew by `amount` between the previous sample (or time zero)
    /// and `at`, both measured from the histogram's start. The amount is spread evenly over
    /// that interval; an empty interval puts it all in the bucket holding the instant just
    /// before `at` (bucket 0 at time zero), the bucket a non-empty interval ending at `at`
    /// would end in. Folds first when `at` lies beyond the last bucket.
    pub fn record(&mut self, at: Duration, amount: u64) -> Result<(), HistogramError> {
        if at < self.end {
            return Err(HistogramError::Backwards { at, end: self.end });
        }
        while self.span().is_some_and(|span| at > span) {
            self.fold();
        }
        self.spread(self.end, at, amount);
        self.end = at;
        self.total = self.total.saturating_add(amount);
        Ok(())
    }

    /// The amount in each bucket, oldest first. Always [`Self::bucket_count`] long; buckets
    /// time has not reached yet hold zero.
    pub fn buckets(&self) -> &[f64] {
        &self.buckets
    }

    /// How many buckets there are; it never changes.
    pub fn bucket_count(&self) -> usize {
        self.buckets.len()
    }

    /// The time one bucket covers now: the initial width doubled once per fold.
    pub fn width(&self) -> Duration {
        self.width
    }

    /// How far time has been recorded (the last sample's `at`).
    pub fn end(&self) -> Duration {
        self.end
    }

    /// Every amount recorded, summed exactly.
    pub fn total(&self) -> u64 {
        self.total
    }

    /// How many times the histogram has folded (Paradyn's "fold events": a display drawing
    /// the buckets redraws with the doubled width).
    pub fn folds(&self) -> u32 {
        self.folds
    }

    /// How many buckets time has reached: the last of them may be only partly covered. A
    /// sample at time zero reaches the first bucket though no time has passed.
    pub fn filled(&self) -> usize {
        let reached = self.end.as_nanos().div_ceil(self.width.as_nanos());
        let n = if self.total > 0 {
            reached.max(1)
        } else {
            reached
        };
        usize::try_from(n).map_or(self.buckets.len(), |n| n.min(self.buckets.len()))
    }

    /// The rate in each bucket time has reached, in amount per second: a bucket's amount
    /// divided by how much of the bucket has elapsed, so the current, partly covered bucket
    /// is not understated. A bucket no time has elapsed in yet (samples at time zero only) is
    /// divided by its whole width: a rate over no time has no finite value.
    pub fn rates(&self) -> Vec<f64> {
        let (w, end) = (self.width.as_nanos(), self.end.as_nanos());
        (0..self.filled())
            .map(|i| {
                // `filled` guarantees the bucket starts before `end`.
                let covered = match end.saturating_sub(i as u128 * w).min(w) {
                    0 => w,
                    covered => covered,
                };
                self.buckets[i] / (covered as f64 / 1e9)
            })
            .collect()
    }

    /// The time all buckets cover at the current width; `None` when it exceeds what a
    /// [`Duration`] holds (nothing can lie beyond it then).
    fn span(&self) -> Option<Duration> {
        self.width.checked_mul(self.buckets.len() as u32)
    }

    /// Merges adjacent pairs into the first half, empties the second and doubles the width.
    fn fold(&mut self) {
        let half = self.buckets.len() / 2;
        for i in 0..half {
            // In place is safe: bucket `i` is written only after `2i` and `2i + 1` were read,
            // and no later step reads an index below `2(i + 1)`.
            self.buckets[i] = self.buckets[2 * i] + self.buckets[2 * i + 1];
        }
        self.buckets[half..].fill(0.0);
        // `record` folds only while `at` lies past the span, so the span (and twice the
        // width) is representable here.
        self.width = self.width.saturating_mul(2);
        self.folds += 1;
    }

    /// Adds `amount` over `[from, to)`, in proportion to each bucket's share of it. The last
    /// bucket touched takes what rounding left over, so the buckets sum to the amount.
    /// Bucket boundaries are computed in whole nanoseconds, so a sample taken exactly at a
    /// boundary never spills a sliver into the next bucket.
    fn spread(&mut self, from: Duration, to: Duration, amount: u64) {
        if amount == 0 {
            return;
        }
        let last_index = self.buckets.len() - 1;
        let w = self.width.as_nanos();
        let (from, to) = (from.as_nanos(), to.as_nanos());
        let index = |t: u128| usize::try_from(t / w).map_or(last_index, |i| i.min(last_index));
        let amount = amount as f64;
        if to <= from {
            self.buckets[index(from.saturating_sub(1))] += amount;
            return;
        }
        let len = (to - from) as f64;
        // The bucket holding the interval's last instant: `to` itself belongs to the next.
        let (first, last) = (index(from), index(to - 1));
        let mut given = 0.0;
        for i in first..last {
            let lo = from.max(i as u128 * w);
            let hi = to.min((i as u128 + 1) * w);
            let share = amount * (hi.saturating_sub(lo) as f64 / len);
            self.buckets[i] += share;
            given += share;
        }
        self.buckets[last] += (amount - given).max(0.0);
    }
}

#[cfg(test)]
#[path = "histogram_tests.rs"]
mod tests;
