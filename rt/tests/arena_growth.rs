//! More threads at once than the arena holds: the memfd grows and every thread's block is in
//! it, found by file offset through the header, so a reader holding only the memfd (gsh, after
//! an untraced exit) has every thread's counts. Before, the blocks past the arena's end were
//! mapped privately and their counts went with the process. Alone in its test binary: it sets
//! the arena's first size before the runtime starts.

mod common;

use gsh_rt::layout::*;
use gsh_rt::thread;
use std::mem::{offset_of, size_of};
use std::os::unix::fs::FileExt;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::{Arc, Barrier};

const SLOT: u32 = 5;
const THREADS: u64 = 21;

fn u64_at(b: &[u8], off: usize) -> u64 {
    u64::from_le_bytes(b[off..off + 8].try_into().expect("8 bytes"))
}

#[test]
fn threads_past_the_arena_grow_the_memfd_and_their_counts_are_in_it() {
    thread::set_arena_blocks(4);
    gsh_rt::events::gsh_rt_count(SLOT);
    let root = &thread::GSH_RT_ROOT;
    let fd = root.arena_fd.load(Relaxed);
    assert!(fd >= 0, "no arena");
    // All alive at once, so none takes another's block: every one needs a block of its own.
    let all = Arc::new(Barrier::new(THREADS as usize));
    let workers: Vec<_> = (1..=THREADS)
        .map(|i| {
            let all = all.clone();
            std::thread::spawn(move || {
                for _ in 0..i * 10 {
                    gsh_rt::events::gsh_rt_count(std::hint::black_box(SLOT));
                }
                all.wait();
                (gsh_rt::events::block().expect("block").header().tid, i * 10)
            })
        })
        .collect();
    let mut want: Vec<(u32, u64)> = workers
        .into_iter()
        .map(|w| w.join().expect("worker"))
        .collect();
    want.push((common::header().tid, 1));
    assert_eq!(
        root.arena_overflow.load(Relaxed),
        0,
        "blocks mapped privately"
    );

    // Read the memfd by file offset only, as gsh does once the process is gone.
    let path = format!("/proc/self/fd/{fd}");
    let file = std::fs::File::open(&path).expect("memfd");
    let mut head = vec![0u8; ARENA_HEADER_BYTES as usize];
    file.read_exact_at(&mut head, 0).expect("header");
    assert_eq!(&head[..4], b"GSAR");
    let bs = u64_at(&head, offset_of!(ArenaHeader, block_size));
    assert_eq!(bs, root.block_size.load(Relaxed));
    let used = u64_at(&head, offset_of!(ArenaHeader, used));
    assert_eq!(u64_at(&head, offset_of!(ArenaHeader, lost)), 0);
    assert!(used > 4, "{used} blocks: the arena did not grow");
    let chunks = u64_at(&head, offset_of!(ArenaHeader, chunk_count)) as usize;
    assert!(chunks > 1, "one chunk");
    let mut found = Vec::new();
    let mut next = 0;
    for c in 0..chunks {
        let at = offset_of!(ArenaHeader, chunks) + c * size_of::<ArenaChunk>();
        let first = u64_at(&head, at + offset_of!(ArenaChunk, first));
        let count = u64_at(&head, at + offset_of!(ArenaChunk, count));
        let addr = u64_at(&head, at + offset_of!(ArenaChunk, addr));
        assert_eq!(first, next, "chunks in block order");
        next = first + count;
        for k in first..(first + count).min(used) {
            // The chunk's address is where the process sees the block the file holds there.
            let block = addr + (k - first) * bs;
            assert!(
                thread::blocks().any(|b| b.as_ptr() as u64 == block),
                "block {k} at {block:#x} is no thread's"
            );
            let mut h = vec![0u8; SLOTS_OFFSET as usize + 32 * (SLOT as usize + 1)];
            file.read_exact_at(&mut h, ARENA_HEADER_BYTES + k * bs)
                .expect("block");
            let t = offset_of!(ThreadHeader, tid);
            let tid = u32::from_le_bytes(h[t..t + 4].try_into().expect("4 bytes"));
            let count = u64_at(
                &h,
                SLOTS_OFFSET as usize + 32 * SLOT as usize + offset_of!(SlotRecord, count),
            );
            found.push((tid, count));
        }
    }
    want.sort_unstable();
    found.sort_unstable();
    assert_eq!(found, want, "every thread's count, read from the memfd");
}
