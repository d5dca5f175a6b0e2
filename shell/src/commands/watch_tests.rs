//! `watch`'s drawing: sparklines and bucket widths.

use std::time::Duration;

use super::{duration_text, sparkline};

#[test]
fn sparkline_scales_to_the_largest_rate_and_leaves_idle_buckets_blank() {
    assert_eq!(sparkline(&[], 64), "");
    assert_eq!(sparkline(&[0.0, 0.0], 64), "  ");
    assert_eq!(sparkline(&[1.0, 2.0, 4.0, 8.0, 0.0], 64), "▁▂▄█ ");
    assert_eq!(sparkline(&[0.01, 100.0], 64), "▁█");
}

#[test]
fn sparkline_merges_pairs_to_fit() {
    let rates: Vec<f64> = (0..64).map(|i| if i < 32 { 1.0 } else { 2.0 }).collect();
    assert_eq!(sparkline(&rates, 16), "▄▄▄▄▄▄▄▄████████");
    // An odd bucket out is averaged alone.
    assert_eq!(sparkline(&[2.0, 2.0, 4.0], 2), "▄█");
}

#[test]
fn bucket_widths_read_as_people_write_them() {
    assert_eq!(duration_text(Duration::from_millis(200)), "200ms");
    assert_eq!(duration_text(Duration::from_millis(1600)), "1.6s");
    assert_eq!(duration_text(Duration::from_secs(2)), "2s");
    assert_eq!(duration_text(Duration::from_secs(192)), "3m12s");
    assert_eq!(duration_text(Duration::from_secs(7500)), "2h05m");
}
