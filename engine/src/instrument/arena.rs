//! The runtime's arena as gsh keeps it: the memfd whose shared mapping holds the threads'
//! blocks (`rt/LAYOUT.md`, `Root::arena`), taken into gsh with `pidfd_getfd` when the runtime
//! is loaded, so the values are read after the process is gone exactly as before it went.
//! That is what lets an attached process that measures run hands-off: gsh need not see its
//! exit to keep the final values.
//!
//! After the end, a [`MemReader::kept`] serves the root's head (copied at load; everything in
//! it is frozen by `gsh_rt_init` but the thread list's head, which the reader reads as empty)
//! and the arena's blocks from the memfd, each chunk at the address the process saw it (the
//! memfd's [`ArenaHeader`] lists them: the runtime grows the memfd when its blocks are all
//! handed out); the blocks are then found through that header rather than through the list.
//! A block the runtime could not put in the memfd (the kernel refused a growth) is counted in
//! the header's `lost`: then the values do not outlive the process, [`Arena::complete`] says
//! so, and gsh keeps (or takes back) the tracer to see the exit.

use std::mem::{offset_of, size_of};
use std::sync::Arc;

use std::os::unix::fs::FileExt;

use gsh_rt_abi::layout::{self, ArenaChunk, ArenaHeader, Root, ThreadHeader};

use crate::process::{Kept, KeptSource, MemReader, Process};

/// The arena of a loaded runtime, held open by gsh.
#[derive(Clone, Debug)]
pub struct Arena {
    /// gsh's descriptor of the memfd.
    file: Arc<std::fs::File>,
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
        let header = Self::read_header(&file)?;
        if u32::from_le_bytes(header[..4].try_into().ok()?) != layout::ARENA_MAGIC
            || u64_at(&header, offset_of!(ArenaHeader, block_size)) != block_size
        {
            return None;
        }

        let mut root_head = head.to_vec();
        // The list's head changes as threads come; read as kept, the list is empty and the
        // blocks are found in the arena.
        let threads = offset_of!(Root, threads);
        root_head[threads..threads + 8].fill(0);
        Some(Arena {
            file: Arc::new(file),
            block_size,
            root,
            root_head,
        })
    }

    fn read_header(file: &std::fs::File) -> Option<Vec<u8>> {
        let mut b = vec![0u8; layout::ARENA_HEADER_BYTES as usize];
        file.read_exact_at(&mut b, 0).ok()?;
        Some(b)
    }

    /// True while every thread block the runtime made is in the memfd, so the values outlive
    /// the process: false once a block had to be mapped privately (the header's `lost`), or
    /// when the header cannot be read.
    pub fn complete(&self) -> bool {
        self.lost() == Some(0)
    }

    /// How many thread blocks the runtime had to map privately (the header's `lost`): their
    /// values end with the process. `None` when the header cannot be read.
    pub fn lost(&self) -> Option<u64> {
        // Asked at each wakeup of the tracer while measuring: one 8-byte read.
        let mut lost = [0u8; 8];
        self.file
            .read_exact_at(&mut lost, offset_of!(ArenaHeader, lost) as u64)
            .ok()
            .map(|()| u64::from_le_bytes(lost))
    }

    /// The arena's chunks as the header lists them: (first block, blocks, address in the
    /// process), only the blocks handed out, and within the memfd's size.
    fn chunks(&self) -> Vec<(u64, u64, u64)> {
        let Some(h) = Self::read_header(&self.file) else {
            return Vec::new();
        };
        let used = u64_at(&h, offset_of!(ArenaHeader, used));
        let n =
            (u64_at(&h, offset_of!(ArenaHeader, chunk_count)) as usize).min(layout::ARENA_CHUNKS);
        (0..n)
            .map(|c| {
                let at = offset_of!(ArenaHeader, chunks) + c * size_of::<ArenaChunk>();
                (
                    u64_at(&h, at + offset_of!(ArenaChunk, first)),
                    u64_at(&h, at + offset_of!(ArenaChunk, count)),
                    u64_at(&h, at + offset_of!(ArenaChunk, addr)),
                )
            })
            .map(|(first, count, addr)| (first, count.min(used.saturating_sub(first)), addr))
            .filter(|&(_, count, _)| count > 0)
            .collect()
    }

    /// A reader of the arena and the root's head, for after the process is gone.
    pub fn reader(&self, pid: i32) -> MemReader {
        let mut kept = vec![Kept {
            addr: self.root,
            source: KeptSource::Bytes(self.root_head.clone()),
        }];
        kept.extend(self.chunks().into_iter().map(|(first, count, addr)| Kept {
            addr,
            source: KeptSource::File {
                file: self.file.clone(),
                offset: layout::ARENA_HEADER_BYTES + first * self.block_size,
                len: count * self.block_size,
            },
        }));
        MemReader::kept(pid, kept)
    }

    /// The blocks a thread ever had in the arena, read through [`Arena::reader`]'s kind of
    /// reader: every block handed out whose header says live or dead.
    pub fn blocks(&self, reader: &MemReader) -> Vec<u64> {
        let state = offset_of!(ThreadHeader, state) as u64;
        self.chunks()
            .into_iter()
            .flat_map(|(_, count, addr)| (0..count).map(move |k| addr + k * self.block_size))
            .filter(|&b| {
                reader.read(b + state, 4).is_ok_and(|s| {
                    let s = u32::from_le_bytes(s[..4].try_into().expect("4 bytes"));
                    s == layout::THREAD_LIVE || s == layout::THREAD_DEAD
                })
            })
            .collect()
    }
}
