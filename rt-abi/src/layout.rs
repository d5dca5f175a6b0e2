//! The shared memory layout: every `#[repr(C)]` struct the mutator reads from outside with
//! `process_vm_readv` or that generated code reaches into. The runtime uses these structs as
//! its own; offsets are asserted at compile time below and listed in `rt/LAYOUT.md` (a test
//! compares the two); moving any field means bumping [`ABI_VERSION`].
//!
//! Fields that other threads (or the exit writer) read while the owner writes are atomics used
//! with `Relaxed` loads and stores, which compile to plain `mov`s: no `lock` prefix anywhere on
//! the hot path, and no data race in Rust's memory model either.

use core::sync::atomic::{AtomicI32, AtomicI64, AtomicU32, AtomicU64};

/// Version of this layout and of the exports' contract. Bumped whenever a field that generated
/// code or the mutator reads moves, or an export is added or changes what it does (6: the
/// library can be unloaded, `gsh_rt_unloading`, and `gsh_rt_alloc`'s memory goes with it; 7:
/// `gsh_rt_path_loop_enter`, a loop timed along call paths).
pub const ABI_VERSION: u32 = 7;
/// `b"GSRT"` read as a little-endian u32: lets the mutator check it found the root.
pub const ROOT_MAGIC: u32 = u32::from_le_bytes(*b"GSRT");
/// Deepest call path recorded; walks stop here.
pub const MAX_PATH_DEPTH: usize = 32;
/// How many unwind tables (one per module) can be registered.
pub const MAX_UNWIND_TABLES: usize = 64;
/// Where the slot array starts inside every thread block; fixed so inlined code can use it.
pub const SLOTS_OFFSET: u64 = 256;
/// The root's scalar fields (everything before its unwind tables): all a reader needs to read.
pub const ROOT_HEAD: usize = core::mem::offset_of!(Root, unwind);

/// Default slot count when `gsh_rt_init` is not called before the first event.
pub const DEFAULT_MAX_SLOTS: u32 = 16384;
/// Default path records per thread (a power of two).
pub const DEFAULT_PATH_CAPACITY: u32 = 4096;
/// Entries in the per-thread cache of unwind-table lookups (16 bytes each, private to the
/// runtime; it sits between the shadow stack and the path table).
pub const RA_CACHE_ENTRIES: u64 = 256;
/// Bytes of the per-thread walk memo ([`WalkMemo`]; it follows the unwind-rule cache): the
/// last call-path walk's inputs, every stack word it read, and the record it found.
pub const WALK_MEMO_BYTES: u64 = 1088;
/// Thread blocks the arena's memfd holds at first (see [`ArenaHeader`]); it grows when they
/// are all handed out.
pub const ARENA_BLOCKS: u64 = 1024;
/// Bytes of the [`ArenaHeader`] at the start of the arena's memfd; block `k` is at file offset
/// `ARENA_HEADER_BYTES + k * block_size`.
pub const ARENA_HEADER_BYTES: u64 = 4096;
/// Chunks (separate mappings of the memfd) an arena can have: [`ArenaHeader::chunks`].
pub const ARENA_CHUNKS: usize = 168;
/// `b"GSAR"` read as a little-endian u32: [`ArenaHeader::magic`].
pub const ARENA_MAGIC: u32 = u32::from_le_bytes(*b"GSAR");
/// Shadow-stack entries per thread; deeper activations are counted but not timed.
pub const SHADOW_CAPACITY: u32 = 1024;

/// `Root::clock_kind`: wall time comes from `rdtsc`, converted with `tsc_mult`.
pub const CLOCK_RDTSC: u32 = 1;
/// `Root::clock_kind`: wall time comes from `clock_gettime(CLOCK_MONOTONIC)` (vDSO).
pub const CLOCK_MONOTONIC: u32 = 2;

/// `Root::state` values.
pub const STATE_UNINIT: u32 = 0;
/// Someone is initialising; others spin until [`STATE_READY`].
pub const STATE_BUSY: u32 = 1;
/// Configuration is frozen, clock calibrated: events are recorded.
pub const STATE_READY: u32 = 2;

/// `ThreadHeader::state`: the thread is running.
pub const THREAD_LIVE: u32 = 1;
/// `ThreadHeader::state`: the thread exited; its block stays in the list so its counts stay in
/// the totals.
pub const THREAD_DEAD: u32 = 2;

/// `UnwindEntry::base`: the caller's CFA is `rsp + cfa_off`, where `rsp` is the value just after
/// the call returned (so the next return address is at `[rsp_before_ret + cfa_off]`).
pub const UNWIND_BASE_RSP: u8 = 0;
/// `UnwindEntry::base`: the caller's CFA is `rbp + cfa_off` (a frame-pointer frame).
pub const UNWIND_BASE_RBP: u8 = 1;

abi_struct! {
    /// The one exported root (`GSH_RT_ROOT`); everything the mutator reads hangs off it.
    pub struct Root {
        /// [`ROOT_MAGIC`].
        pub magic: u32,
        /// [`ABI_VERSION`].
        pub abi_version: u32,
        /// [`STATE_UNINIT`], [`STATE_BUSY`] or [`STATE_READY`].
        pub state: AtomicU32,
        /// [`CLOCK_RDTSC`] or [`CLOCK_MONOTONIC`]: where wall times came from (all stored times are
        /// already nanoseconds).
        pub clock_kind: AtomicU32,
        /// Slots per thread block, fixed at initialisation.
        pub max_slots: AtomicU32,
        /// Path records per thread block (a power of two).
        pub path_capacity: AtomicU32,
        /// Shadow-stack entries per thread block.
        pub shadow_capacity: AtomicU32,
        /// [`MAX_PATH_DEPTH`].
        pub max_path_depth: u32,
        /// Bytes per thread block (page-rounded).
        pub block_size: AtomicU64,
        /// Offset of the slot array in a thread block ([`SLOTS_OFFSET`]).
        pub slots_offset: AtomicU64,
        /// Offset of the shadow stack in a thread block.
        pub shadow_offset: AtomicU64,
        /// Offset of the path-record table in a thread block.
        pub paths_offset: AtomicU64,
        /// Newest thread block (address of its [`ThreadHeader`]); follow `next` for older ones.
        pub threads: AtomicU64,
        /// Number of thread blocks ever created.
        pub thread_count: AtomicU64,
        /// Nanoseconds per TSC tick as a 32.32 fixed-point number (`ns = ticks * mult >> 32`).
        pub tsc_mult: AtomicU64,
        /// TSC value at calibration.
        pub tsc_base: AtomicU64,
        /// `CLOCK_MONOTONIC` nanoseconds at calibration (taken together with `tsc_base`).
        pub mono_base: AtomicU64,
        /// `fs`-relative offset of the initial-exec TLS word holding the thread block address.
        pub tls_offset: AtomicI64,
        /// Number of registered unwind tables in `unwind`.
        pub unwind_count: AtomicU32,
        /// The process's descriptor of the memfd that backs the arena, -1 without an arena
        /// (a forked child's runtime gives its parent's up).
        pub arena_fd: AtomicI32,
        /// Address of the arena's [`ArenaHeader`] (file offset 0 of `arena_fd`, mapped shared
        /// with the first chunk of blocks after it); the header says where every block is, by
        /// file offset and by address, so their values outlive the process in the mutator's
        /// copy of the descriptor. 0 without an arena.
        pub arena: AtomicU64,
        /// Arena blocks handed out so far (as [`ArenaHeader::used`]); blocks of exited threads
        /// are handed out again before new ones.
        pub arena_used: AtomicU64,
        /// Thread blocks mapped privately because the arena could not grow (as
        /// [`ArenaHeader::lost`]) or the process is not the one the arena was made for (a
        /// child forked without fork handlers): their values are read while the process lives,
        /// and lost with it.
        pub arena_overflow: AtomicU64,
        /// Registered unwind tables, the first `unwind_count` valid.
        pub unwind: [UnwindTable; MAX_UNWIND_TABLES],
    }
}

abi_struct! {
    /// The start of the arena's memfd ([`ARENA_HEADER_BYTES`] bytes, mapped shared at
    /// [`Root::arena`]): how a reader holding only the memfd finds every thread block. The
    /// memfd grows (`ftruncate`) when its blocks are all handed out, each growth mapped
    /// anywhere as a new chunk.
    pub struct ArenaHeader {
        /// [`ARENA_MAGIC`].
        pub magic: u32,
        /// The process the arena was made for (a child forked without fork handlers shares
        /// the mapping, and takes no block from it).
        pub pid: i32,
        /// Bytes per thread block (`Root::block_size`).
        pub block_size: u64,
        /// Blocks the memfd holds (block `k` at file offset `ARENA_HEADER_BYTES + k *
        /// block_size`).
        pub blocks: AtomicU64,
        /// Blocks handed out (`0..used` are, or were, some thread's).
        pub used: AtomicU64,
        /// Thread blocks that found the arena full and could not grow it, mapped privately:
        /// while non-zero the values do not outlive the process, and the mutator must see the
        /// exit to keep them.
        pub lost: AtomicU64,
        /// Chunks in `chunks` (written before it is raised).
        pub chunk_count: AtomicU64,
        /// Padding.
        pub reserved: [u64; 2],
        /// The mappings of the memfd's blocks, in block order.
        pub chunks: [ArenaChunk; ARENA_CHUNKS],
    }
}

abi_struct! {
    /// Consecutive blocks of the arena mapped together.
    pub struct ArenaChunk {
        /// Index of the chunk's first block.
        pub first: AtomicU64,
        /// Blocks in the chunk.
        pub count: AtomicU64,
        /// Address of its first block in the process.
        pub addr: AtomicU64,
    }
}

abi_struct! {
    /// One module's table of call-site unwind rules, registered with `gsh_rt_add_unwind_table`.
    pub struct UnwindTable {
        /// Address of the first [`UnwindEntry`] (sorted by `ra`, no duplicates).
        pub entries: AtomicU64,
        /// Number of entries.
        pub len: AtomicU64,
        /// Lowest `ra` in the table (a quick range check before the binary search).
        pub lo: AtomicU64,
        /// Highest `ra` in the table.
        pub hi: AtomicU64,
    }
}

abi_struct! {
    /// How to find the caller's frame when the walk meets return address `ra` (16 bytes).
    ///
    /// `ra` is a return address (the instruction after a call). At `ra` the frame of the function
    /// containing it has CFA `base + cfa_off`, where `base` is the stack pointer just after the call
    /// returned ([`UNWIND_BASE_RSP`]) or `rbp` ([`UNWIND_BASE_RBP`]). That function's own return
    /// address is at `CFA - 8`. If `rbp_save` is non-zero the caller's `rbp` was saved at
    /// `CFA + rbp_save` (e.g. -16), otherwise `rbp` passes through this frame unchanged.
    #[derive(Clone, Copy, Debug, PartialEq, Eq)]
    pub struct UnwindEntry {
        /// The return address.
        pub ra: u64,
        /// CFA offset from `base`.
        pub cfa_off: u32,
        /// [`UNWIND_BASE_RSP`] or [`UNWIND_BASE_RBP`].
        pub base: u8,
        /// Zero.
        pub reserved: u8,
        /// Offset of the saved caller `rbp` from the CFA, 0 when this frame does not save it.
        pub rbp_save: i16,
    }
}

impl UnwindEntry {
    /// The entry as it lies in memory (little-endian), for writers that build tables as bytes.
    pub fn to_le_bytes(&self) -> [u8; core::mem::size_of::<UnwindEntry>()] {
        use core::mem::offset_of;
        let mut b = [0u8; core::mem::size_of::<UnwindEntry>()];
        let ra = offset_of!(UnwindEntry, ra);
        b[ra..ra + 8].copy_from_slice(&self.ra.to_le_bytes());
        let cfa = offset_of!(UnwindEntry, cfa_off);
        b[cfa..cfa + 4].copy_from_slice(&self.cfa_off.to_le_bytes());
        b[offset_of!(UnwindEntry, base)] = self.base;
        b[offset_of!(UnwindEntry, reserved)] = self.reserved;
        let rbp = offset_of!(UnwindEntry, rbp_save);
        b[rbp..rbp + 2].copy_from_slice(&self.rbp_save.to_le_bytes());
        b
    }
}

abi_struct! {
    /// The start of every thread block (256 bytes; the slot array follows at [`SLOTS_OFFSET`]).
    pub struct ThreadHeader {
        /// Next (older) thread block, 0 at the end of the list.
        pub next: AtomicU64,
        /// Kernel thread id.
        pub tid: u32,
        /// [`THREAD_LIVE`] or [`THREAD_DEAD`].
        pub state: AtomicU32,
        /// Slots in this block (equal to `Root::max_slots`).
        pub max_slots: u32,
        /// Shadow-stack entries in this block.
        pub shadow_capacity: u32,
        /// Shadow-stack entries in use.
        pub shadow_top: AtomicU32,
        /// Activations deeper than the shadow stack (counted, not timed).
        pub shadow_overflow: AtomicU32,
        /// Path records minus one (capacity is a power of two).
        pub path_mask: u32,
        /// Path records in use.
        pub path_used: AtomicU32,
        /// Lowest address of the stack mapping last seen containing `rsp` (bounds the path walk).
        pub stack_lo: AtomicU64,
        /// End of that mapping.
        pub stack_hi: AtomicU64,
        /// Path activations that found the table full (or the probe too long) and whose slot is
        /// out of range; the others are counted in their slot's own record.
        pub other_count: AtomicU64,
        /// Inclusive nanoseconds of those activations.
        pub other_ns: AtomicU64,
        /// Exits that matched no shadow-stack entry (instrumented while active, or an unpaired exit).
        pub unmatched_exits: AtomicU64,
        /// Frames popped because a later event showed them gone (longjmp, exception, tail call).
        pub abandoned_frames: AtomicU64,
        /// Activations not timed because the shadow stack was full.
        pub untimed: AtomicU64,
        /// Events dropped because their slot was not below `max_slots`.
        pub bad_slots: AtomicU64,
        /// Private: the `Root::unwind_count` the return-address cache was filled under.
        pub ra_cache_gen: AtomicU64,
        /// Padding up to [`SLOTS_OFFSET`].
        pub reserved: [u64; 18],
    }
}

abi_struct! {
    /// Per slot, per thread (32 bytes): slot `i` is at `block + SLOTS_OFFSET + 32 * i`
    /// ([`slot_offset`]).
    ///
    /// A slot timed by generated code inline (`time` with the TSC as clock: the runtime never
    /// touches such a slot but to zero it) keeps TSC ticks instead: `total_ns` is the ticks of
    /// closed activations, `depth` the stack pointer of the open outermost activation (0 when
    /// none is open), and `entry_ns` its starting TSC value.
    pub struct SlotRecord {
        /// Calls (entries) seen.
        pub count: AtomicU64,
        /// Inclusive nanoseconds, counted once per outermost activation (recursion is not double
        /// counted).
        pub total_ns: AtomicU64,
        /// Activations currently open on this thread.
        pub depth: AtomicU64,
        /// Clock value (ns) at entry of the outermost open activation.
        pub entry_ns: AtomicU64,
    }
}

/// Offset of slot `slot`'s [`SlotRecord`] in a thread block.
pub const fn slot_offset(slot: u32) -> u64 {
    SLOTS_OFFSET + core::mem::size_of::<SlotRecord>() as u64 * slot as u64
}

/// Shadow-stack entry kinds.
pub const FRAME_WALL: u32 = 1;
/// A `gsh_rt_enter_cpu` activation.
pub const FRAME_CPU: u32 = 2;
/// A `gsh_rt_path_enter` activation (wall clock).
pub const FRAME_PATH_WALL: u32 = 3;
/// A `gsh_rt_path_enter_cpu` activation.
pub const FRAME_PATH_CPU: u32 = 4;
/// A frame whose slot was given to another measure after its own was deleted: gsh marks it
/// when it hands the slot out again, and closing it credits nothing.
pub const FRAME_DEAD: u32 = 5;
/// A loop timer's frame key lies this many bytes below its function's entry `rsp`: the key of
/// every activation of the loop, at its entries and exits alike, between the function's own key
/// and any callee's. A loop timed along call paths (`gsh_rt_path_loop_enter`) finds its
/// function's profiled activation on the shadow stack at exactly its key plus this.
pub const LOOP_KEY_BELOW_ENTRY: u64 = 8;
/// `ShadowEntry::record` for path activations whose path found no record: counted in their
/// slot's own record (or, for a slot out of range, in the header's `other_*`).
pub const RECORD_OTHER: u32 = u32::MAX;
/// `PathRecord::slot` of a record whose slot the mutator handed out again: never matched or
/// reported again, until its thread claims it again for a new path.
pub const RETIRED_SLOT: u32 = u32::MAX;

abi_struct! {
    /// One open activation on a thread's shadow stack (32 bytes).
    #[derive(Clone, Copy)]
    pub struct ShadowEntry {
        /// `rsp` at the function's first instruction (pointing at its return address).
        pub rsp: u64,
        /// Entry clock (ns) for path frames; unused for timer frames (the slot keeps it).
        pub start: u64,
        /// The slot.
        pub slot: u32,
        /// `FRAME_*` (the mutator may turn it into [`FRAME_DEAD`] at any time).
        pub kind: u32,
        /// Path record index, or [`RECORD_OTHER`].
        pub record: u32,
        /// Zero.
        pub reserved: u32,
    }
}

abi_struct! {
    /// One distinct call path of one slot on one thread (32 + 8 * [`MAX_PATH_DEPTH`] = 288 bytes).
    pub struct PathRecord {
        /// Hash of (slot, ras); 0 means the record is free. Written last (release) when a record is
        /// claimed, so a reader that sees it non-zero sees `slot`, `depth` and `ras` complete.
        pub hash: AtomicU64,
        /// The slot (measured function) this path ends in.
        pub slot: u32,
        /// Valid entries in `ras`.
        pub depth: u32,
        /// Activations along this path.
        pub count: AtomicU64,
        /// Inclusive nanoseconds of those activations.
        pub total_ns: AtomicU64,
        /// Return addresses, innermost first: `ras[0]` is the return address of the measured
        /// function's own call.
        pub ras: [u64; MAX_PATH_DEPTH],
    }
}

abi_struct! {
    /// The memo of a thread's last call-path walk, at [`memo_offset`] in its block: written
    /// only by the runtime (on a walk), read by the runtime and by generated code, which
    /// reuses `record` without walking when the walk's inputs and every word it read are
    /// unchanged. Never read by the mutator.
    pub struct WalkMemo {
        /// Even while the memo may be read; the runtime makes it odd while it uses the memo and
        /// even again after, so it changes across every use: a reader that sees it even and
        /// unchanged after its reads (a signal handler ran no walk in between) read a whole memo.
        pub seq: u64,
        /// The walk's `rsp`; 0: no memo.
        pub rsp: u64,
        /// The walk's `rbp`.
        pub rbp: u64,
        /// `ThreadHeader::stack_hi` when it walked.
        pub hi: u64,
        /// `Root::unwind_count` when it walked.
        pub gen: u64,
        /// The record's hash then.
        pub hash: u64,
        /// The slot it walked for.
        pub slot: u32,
        /// The path record it found (never [`RECORD_OTHER`]).
        pub record: u32,
        /// Words in `words`.
        pub n: u64,
        /// `words[..n]`: (address, value) of every stack word the walk read, in order.
        pub words: [[u64; 2]; 2 * MAX_PATH_DEPTH],
    }
}

/// Offset of the [`WalkMemo`] in a thread block whose shadow stack is at `shadow_offset`
/// (`Root::shadow_offset`): after the shadow stack and the unwind-rule cache.
pub const fn memo_offset(shadow_offset: u64) -> u64 {
    shadow_offset
        + SHADOW_CAPACITY as u64 * core::mem::size_of::<ShadowEntry>() as u64
        + RA_CACHE_ENTRIES * 16
}

const _: () = {
    use core::mem::{offset_of, size_of};
    assert!(offset_of!(Root, state) == 8);
    assert!(offset_of!(Root, max_slots) == 16);
    assert!(offset_of!(Root, block_size) == 32);
    assert!(offset_of!(Root, threads) == 64);
    assert!(offset_of!(Root, tsc_mult) == 80);
    assert!(offset_of!(Root, tls_offset) == 104);
    assert!(offset_of!(Root, unwind_count) == 112);
    assert!(offset_of!(Root, arena_fd) == 116);
    assert!(offset_of!(Root, arena) == 120);
    assert!(offset_of!(Root, unwind) == 144);
    assert!(size_of::<UnwindTable>() == 32);
    assert!(offset_of!(ArenaHeader, chunks) == 64);
    assert!(size_of::<ArenaChunk>() == 24);
    assert!(size_of::<ArenaHeader>() as u64 == ARENA_HEADER_BYTES);
    assert!(size_of::<Root>() == 144 + 32 * MAX_UNWIND_TABLES);
    assert!(size_of::<UnwindEntry>() == 16);
    assert!(offset_of!(ThreadHeader, shadow_top) == 24);
    assert!(offset_of!(ThreadHeader, path_mask) == 32);
    assert!(offset_of!(ThreadHeader, stack_lo) == 40);
    assert!(offset_of!(ThreadHeader, other_count) == 56);
    assert!(offset_of!(ThreadHeader, bad_slots) == 96);
    assert!(size_of::<ThreadHeader>() as u64 == SLOTS_OFFSET);
    assert!(size_of::<SlotRecord>() == 32);
    assert!(size_of::<ShadowEntry>() == 32);
    assert!(offset_of!(PathRecord, count) == 16);
    assert!(offset_of!(PathRecord, ras) == 32);
    assert!(size_of::<PathRecord>() == 32 + 8 * MAX_PATH_DEPTH);
    assert!(offset_of!(WalkMemo, words) == 64);
    assert!(size_of::<WalkMemo>() as u64 == WALK_MEMO_BYTES);
};
