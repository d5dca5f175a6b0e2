//! Staged writes read back as if written in order.

use super::Pending;

fn read(p: &Pending, at: u64, len: usize) -> Vec<u8> {
    let mut bytes = vec![0u8; len];
    p.overlay(at, &mut bytes);
    bytes
}

#[test]
fn later_writes_win_wherever_they_start() {
    let mut p = Pending::default();
    p.push(10, &[1, 2, 3]);
    p.push(11, &[9]);
    assert_eq!(read(&p, 10, 4), [1, 9, 3, 0]);
    // A later write that starts lower still wins (a map keyed by address alone would replay
    // the higher, older one last).
    p.push(20, &[5, 5]);
    p.push(19, &[7, 7, 7]);
    assert_eq!(read(&p, 19, 3), [7, 7, 7]);
    // A long write far below still reaches a read.
    p.push(0, &[4; 32]);
    assert_eq!(read(&p, 30, 2), [4, 4]);
    assert_eq!(read(&p, 40, 2), [0, 0]);
    assert_eq!(p.writes().len(), 5);
}

#[test]
fn batches_hold_whole_changes_of_bounded_size() {
    let mut p = Pending::default();
    assert!(p.batches(4).is_empty(), "nothing to write");
    // Changes of 1, 3, 2, 6 and 1 writes, then 2 writes with no end.
    for len in [1, 3, 2, 6, 1] {
        for k in 0..len {
            p.push(100 * len + k, &[1]);
        }
        p.end_change();
        p.end_change();
    }
    p.push(1, &[1]);
    p.push(2, &[1]);
    let b = p.batches(4);
    assert_eq!(
        b,
        [0..4, 4..6, 6..12, 12..15],
        "a change is never cut; the 6 stand alone"
    );
    assert_eq!(
        p.batches(usize::MAX),
        vec![0..15],
        "one batch when unbounded"
    );
    assert_eq!(p.batches(1).len(), 6, "one change per batch");
}
