//! A thread whose path table is full counts further paths in the slot's own record, so the
//! reader knows whose they are. Alone in its test
//! binary: the thread's block, table full, is handed to the next thread that starts (see
//! `reuse.rs`), which would find no room for its own paths.

mod common;

use gsh_rt::path::gsh_rt_path_count;
use std::sync::atomic::Ordering::Relaxed;

#[test]
fn a_full_table_counts_further_paths_in_the_slots_record() {
    std::thread::spawn(|| {
        let h = common::header();
        let cap = h.path_mask as u64 + 1;
        // A frame-pointer chain of two return addresses: [rsp] = ra, rbp -> [saved rbp = 0,
        // caller's ra].
        let mut stack = vec![0u64; 64];
        let base = stack.as_ptr() as u64;
        let (rsp, rbp) = (base + 8 * 16, base + 8 * 20);
        // Three quarters of the table fills up; the rest go to "other".
        for i in 0..cap {
            stack[16] = 0x60_0000 + 16 * i;
            stack[20] = 0;
            stack[21] = 0x61_0000;
            gsh_rt_path_count(230, std::hint::black_box(rsp), rbp);
        }
        assert_eq!(h.path_used.load(Relaxed) as u64, cap / 4 * 3);
        let beyond = gsh_rt::events::slot(common::me(), 230).count.load(Relaxed);
        assert_eq!(beyond, cap - cap / 4 * 3);
        assert_eq!(h.other_count.load(Relaxed), 0);
        drop(stack);
    })
    .join()
    .expect("filling thread");
}
