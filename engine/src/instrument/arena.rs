//! The runtime's arena as gsh keeps it: the memfd whose shared mapping holds the threads'
//! blocks (`rt/LAYOUT.md`, `Root::arena`), taken into gsh with `pidfd_getfd` when the runtime
//! is loaded, so the values are read after the process is gone exactly as before it went.
//! That is what lets an attached process that measures run hands-off: gsh need not see its
//! exit to keep the final values.
//!
//! After the end, a [`MemReader::kept`] serves the root's head (copied at load; everything in
//! it is frozen by `gsh_rt_init` but the thread list's head, which the reader reads as empty)
//! and the arena's blocks from the memfd; the blocks are then found by their headers in the
//! arena rather than through the list (which may run through blocks mapped privately once the
//! arena was full, `Root::arena_overflow`: their values go with the process).

use std::mem::offset_of;
use std::sync::Arc;

use gsh_rt_abi::layout::{self, Root, ThreadHeader};

use crate::process::{Kept, KeptSource, MemReader, Process};

/// The arena of a loaded runtime, held open by gsh.
#[derive(Clone, Debug)]
pub struct Arena {
    /// gsh's descriptor of the memfd.
    file: Arc<std::fs::File>,
    /// Where the arena is mapped in the process.
    addr: u64,
    /// Bytes per thread block.
    block_size: u64,
    /// The root's address and its head as `gsh_rt_init` left it.
    root: u64,
    root_head: Vec<u8>,
}

fn u64_at(b: &[u8], off: usize) -> u64 {
    u64::from_le_bytes(b[off..off + 8].try_into().expect("8 bytes"))
}

impl Arena {
    /// Takes hold of the arena of the runtime whose root is at `root` with head `head`; `None`
    /// when the runtime has none (a forked child's, or memfds refused) or the descriptor
    /// cannot be had: then the final values need the tracer at the exit.
    pub fn take(p: &Process, root: u64, head: &[u8]) -> Option<Arena> {
        let fd = i32::from_le_bytes(
            head[offset_of!(Root, arena_fd)..offset_of!(Root, arena_fd) + 4]
                .try_into()
                .ok()?,
        );
        let addr = u64_at(head, offset_of!(Root, arena));
        let block_size = u64_at(head, offset_of!(Root, block_size));
        if fd < 0 || addr == 0 || block_size == 0 {
            return None;
        }
        let file = p.take_fd(fd).ok()?;
        // The descriptor must still be the arena's: the program may have closed it and opened
        // something else under its number.
        let maps = std::fs::read_to_string(format!("/proc/{}/maps", p.pid())).ok()?;
        let ino = {
            use std::os::unix::fs::MetadataExt;
            file.metadata().ok()?.ino()
        };
        let mapped = maps.lines().any(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            f.len() >= 5
                && f[0]
                    .split('-')
                    .next()
                    .and_then(|s| u64::from_str_radix(s, 16).ok())
                    == Some(addr)
                && f[4].parse::<u64>().ok() == Some(ino)
        });
        if !mapped {
            return None;
        }
        let mut root_head = head.to_vec();
        // The list's head changes as threads come; read as kept, the list is empty and the
        // blocks are found in the arena.
        let threads = offset_of!(Root, threads);
        root_head[threads..threads + 8].fill(0);
        Some(Arena {
            file: Arc::new(file),
            addr,
            block_size,
            root,
            root_head,
        })
    }

    /// A reader of the arena and the root's head, for after the process is gone.
    pub fn reader(&self, pid: i32) -> MemReader {
        MemReader::kept(
            pid,
            vec![
                Kept {
                    addr: self.root,
                    source: KeptSource::Bytes(self.root_head.clone()),
                },
                Kept {
                    addr: self.addr,
                    source: KeptSource::File {
                        file: self.file.clone(),
                        offset: 0,
                        len: self.block_size * layout::ARENA_BLOCKS,
                    },
                },
            ],
        )
    }

    /// The blocks a thread ever had in the arena, read through [`Arena::reader`]'s kind of
    /// reader: every block whose header says live or dead.
    pub fn blocks(&self, reader: &MemReader) -> Vec<u64> {
        let state = offset_of!(ThreadHeader, state) as u64;
        (0..layout::ARENA_BLOCKS)
            .map(|k| self.addr + k * self.block_size)
            .filter(|&b| {
                reader.read(b + state, 4).is_ok_and(|s| {
                    let s = u32::from_le_bytes(s[..4].try_into().expect("4 bytes"));
                    s == layout::THREAD_LIVE || s == layout::THREAD_DEAD
                })
            })
            .collect()
    }
}
