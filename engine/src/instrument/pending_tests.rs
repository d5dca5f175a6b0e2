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
