//! The root, one-time initialisation, and per-thread blocks: made on a thread's first event,
//! pushed onto a lock-free list that is never popped, marked dead (but kept, so its counts stay
//! in the totals) by a pthread-key destructor when the thread exits, and handed to the next new
//! thread that needs one (its counts carry on in the totals, under the new thread's id).
//!
//! Blocks live in the *arena*: a memfd made at initialisation with room for [`ARENA_BLOCKS`]
//! blocks after its [`ArenaHeader`], mapped `MAP_SHARED`. gsh takes a descriptor of that memfd
//! (`pidfd_getfd`), so the values stay readable after the process is gone, without gsh seeing
//! its exit: an attached process that measures runs untraced. When every block is handed out
//! the memfd grows (`ftruncate`) and the new part is mapped anywhere as a new chunk, listed in
//! the header, which is how gsh finds every block by file offset. Only a growth the kernel
//! refuses puts a block in private memory, counted in the header's `lost` (gsh then keeps the
//! process traced, so it sees the exit). A forked child maps the arena privately
//! (copy-on-write from the file) before it returns from `fork`, so its counts never reach its
//! parent's; a child forked without fork handlers (`_Fork`, raw `clone`) keeps counting into
//! the blocks its threads had at the fork, which are its parent's, until its first new thread
//! (see `rt/LAYOUT.md`).

use crate::layout::*;
use crate::{clock, sys, tls};
use std::sync::atomic::Ordering::{AcqRel, Acquire, Relaxed, Release};
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicI64, AtomicU32, AtomicU64};
use std::sync::Once;

/// The root of everything the mutator reads. Find it through the dynamic symbol table of the
/// loaded `libgsh_rt.so` (or call `gsh_rt_root()`).
#[no_mangle]
pub static GSH_RT_ROOT: Root = Root {
    magic: ROOT_MAGIC,
    abi_version: ABI_VERSION,
    state: AtomicU32::new(STATE_UNINIT),
    clock_kind: AtomicU32::new(0),
    max_slots: AtomicU32::new(0),
    path_capacity: AtomicU32::new(0),
    shadow_capacity: AtomicU32::new(0),
    max_path_depth: MAX_PATH_DEPTH as u32,
    block_size: AtomicU64::new(0),
    slots_offset: AtomicU64::new(SLOTS_OFFSET),
    shadow_offset: AtomicU64::new(0),
    paths_offset: AtomicU64::new(0),
    threads: AtomicU64::new(0),
    thread_count: AtomicU64::new(0),
    tsc_mult: AtomicU64::new(0),
    tsc_base: AtomicU64::new(0),
    mono_base: AtomicU64::new(0),
    tls_offset: AtomicI64::new(0),
    unwind_count: AtomicU32::new(0),
    arena_fd: AtomicI32::new(-1),
    arena: AtomicU64::new(0),
    arena_used: AtomicU64::new(0),
    arena_overflow: AtomicU64::new(0),
    unwind: [const {
        UnwindTable {
            entries: AtomicU64::new(0),
            len: AtomicU64::new(0),
            lo: AtomicU64::new(0),
            hi: AtomicU64::new(0),
        }
    }; MAX_UNWIND_TABLES],
};

static CLOCK: Once = Once::new();
static CONFIG: Once = Once::new();
/// What `gsh_rt_init` asked for; read once by the configuration step.
static WANT_SLOTS: AtomicU32 = AtomicU32::new(DEFAULT_MAX_SLOTS);
static WANT_PATHS: AtomicU32 = AtomicU32::new(DEFAULT_PATH_CAPACITY);
/// Hot-path copies of root fields (same cache line, read with plain loads).
pub static SHADOW_OFF: AtomicU64 = AtomicU64::new(0);
/// Offset of the return-address cache in a block.
pub static RA_CACHE_OFF: AtomicU64 = AtomicU64::new(0);
/// Offset of the walk memo in a block.
pub static MEMO_OFF: AtomicU64 = AtomicU64::new(0);
/// Offset of the path table in a block.
pub static PATHS_OFF: AtomicU64 = AtomicU64::new(0);
/// The pthread key whose destructor marks a block dead.
static KEY: AtomicU32 = AtomicU32::new(u32::MAX);
/// Blocks marked dead and not yet handed on: while none is, a new thread does not walk the
/// list looking for one (a program with many live threads would pay the walk at each start).
static DEAD: AtomicU64 = AtomicU64::new(0);

/// Calibrates the clock (once per process).
pub fn init_clock() {
    CLOCK.call_once(|| {
        let c = clock::calibrate();
        let r = &GSH_RT_ROOT;
        r.tsc_mult.store(c.mult, Relaxed);
        r.tsc_base.store(c.tsc, Relaxed);
        r.mono_base.store(c.mono, Relaxed);
        r.clock_kind.store(c.kind, Relaxed);
        r.tls_offset.store(tls::offset(), Relaxed);
    });
}

/// Freezes the configuration (once per process): slot count, path capacity, block layout.
pub fn init() {
    init_clock();
    CONFIG.call_once(|| {
        let r = &GSH_RT_ROOT;
        r.state.store(STATE_BUSY, Relaxed);
        let slots = WANT_SLOTS.load(Relaxed).max(1);
        let paths = WANT_PATHS.load(Relaxed).max(2).next_power_of_two();
        let shadow = SLOTS_OFFSET + slots as u64 * 32;
        let ra_cache = shadow + SHADOW_CAPACITY as u64 * 32;
        let memo = memo_offset(shadow);
        let path_off = (memo + WALK_MEMO_BYTES).next_multiple_of(64);
        let size = (path_off + paths as u64 * std::mem::size_of::<PathRecord>() as u64)
            .next_multiple_of(4096);
        r.max_slots.store(slots, Relaxed);
        r.path_capacity.store(paths, Relaxed);
        r.shadow_capacity.store(SHADOW_CAPACITY, Relaxed);
        r.shadow_offset.store(shadow, Relaxed);
        r.paths_offset.store(path_off, Relaxed);
        r.block_size.store(size, Relaxed);
        make_arena(size);
        SHADOW_OFF.store(shadow, Relaxed);
        PATHS_OFF.store(path_off, Relaxed);
        RA_CACHE_OFF.store(ra_cache, Relaxed);
        MEMO_OFF.store(memo, Relaxed);
        let mut key: libc::pthread_key_t = 0;
        // SAFETY: `key` is a valid out-pointer; `thread_exit` has the destructor signature.
        if unsafe { libc::pthread_key_create(&mut key, Some(thread_exit)) } == 0 {
            KEY.store(key, Relaxed);
        }
        r.state.store(STATE_READY, Release);
    });
}

/// Requests a configuration. Returns 0 if it is (now) in force, -1 if the runtime was already
/// initialised with different values (the first event freezes the defaults).
pub fn configure(max_slots: u32, path_capacity: u32) -> i32 {
    let paths = path_capacity.max(2).next_power_of_two();
    WANT_SLOTS.store(max_slots.max(1), Relaxed);
    WANT_PATHS.store(paths, Relaxed);
    init();
    let r = &GSH_RT_ROOT;
    if r.max_slots.load(Relaxed) == max_slots.max(1) && r.path_capacity.load(Relaxed) == paths {
        0
    } else {
        -1
    }
}

/// Runs when a thread with a block exits: marks the block dead. The block stays in the list.
extern "C" fn thread_exit(block: *mut libc::c_void) {
    if let Some(b) = Block::from_trusted(block.cast()) {
        b.header().state.store(THREAD_DEAD, Relaxed);
        DEAD.fetch_add(1, Relaxed);
    }
}

/// A thread block: a pointer that came from `create`, so it is mapped for the life of the
/// process and laid out as the root says.
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct Block(std::ptr::NonNull<u8>);

impl Block {
    /// Wraps a pointer read from the TLS word or the thread list (null gives `None`).
    #[inline(always)]
    pub fn from_trusted(p: *mut u8) -> Option<Block> {
        std::ptr::NonNull::new(p).map(Block)
    }

    /// The block's address.
    #[inline(always)]
    pub fn as_ptr(self) -> *mut u8 {
        self.0.as_ptr()
    }

    /// The block's header.
    #[inline(always)]
    pub fn header<'a>(self) -> &'a ThreadHeader {
        // SAFETY: blocks come from `create` (via the TLS word or the list) and are never
        // unmapped; the header is the start of the block.
        unsafe { &*self.0.as_ptr().cast::<ThreadHeader>() }
    }
}

/// The calling thread's block, creating it on first use. Null if the thread is already inside
/// this slow path (an instrumented function called from it) or memory is exhausted.
#[cold]
#[inline(never)]
pub fn slow() -> Option<Block> {
    if let Some(b) = Block::from_trusted(tls::block()) {
        return Some(b);
    }
    if tls::busy() {
        return None;
    }
    tls::set_busy(true);
    let b = create();
    tls::set_busy(false);
    Block::from_trusted(b)
}

/// Blocks the arena holds at first: [`ARENA_BLOCKS`] unless a test asked for fewer
/// ([`set_arena_blocks`]) or `GSH_RT_ARENA_BLOCKS` says otherwise.
static WANT_ARENA: AtomicU64 = AtomicU64::new(ARENA_BLOCKS);
/// Chunks the arena may have: [`ARENA_CHUNKS`] unless `GSH_RT_ARENA_CHUNKS` says fewer (tests
/// see what happens when the arena cannot grow).
static MAX_CHUNKS: AtomicU64 = AtomicU64::new(ARENA_CHUNKS as u64);
/// Held while a block is taken from the arena or the arena grows.
static ARENA_LOCK: AtomicBool = AtomicBool::new(false);

/// Sets how many blocks the arena holds at first (before the runtime is initialised; later
/// calls do nothing): tests fill an arena of a few blocks to see it grow.
pub fn set_arena_blocks(n: u64) {
    WANT_ARENA.store(n.max(1), Relaxed);
}

/// The arena's header, when the process has an arena of its own.
fn arena_header<'a>() -> Option<&'a ArenaHeader> {
    let r = &GSH_RT_ROOT;
    let at = r.arena.load(Acquire);
    if at == 0 || r.arena_fd.load(Relaxed) < 0 {
        return None;
    }
    // SAFETY: `arena` is set once, to the start of the shared mapping of the memfd's first
    // chunk, which begins with the header and is never unmapped (only remapped in place).
    Some(unsafe { &*(at as *const ArenaHeader) })
}

/// Gives back what the threads' blocks hold in the process, for the library's unloading once
/// no code uses it any more (`unload.rs`): the pthread key (whose destructor is this
/// library's code), the blocks mapped on their own (when the arena could not grow, or had
/// none), every chunk of the arena and its memfd. The mutator keeps its own descriptor of the
/// memfd, so the values stay readable there.
pub fn give_back() {
    let key = KEY.swap(u32::MAX, Relaxed);
    if key != u32::MAX {
        // SAFETY: `key` came from pthread_key_create; deleting it runs no destructor.
        unsafe { libc::pthread_key_delete(key) };
    }
    let r = &GSH_RT_ROOT;
    let bs = r.block_size.load(Relaxed);
    let header = arena_header();
    let in_arena = |b: u64| {
        header.is_some_and(|h| {
            let n = (h.chunk_count.load(Acquire) as usize).min(ARENA_CHUNKS);
            h.chunks[..n].iter().any(|c| {
                let (at, count) = (c.addr.load(Relaxed), c.count.load(Relaxed));
                (at..at + count * bs).contains(&b)
            })
        })
    };
    // The list is read before anything is unmapped: a block's `next` may be in the arena.
    let mut cur = r.threads.swap(0, AcqRel);
    while let Some(b) = Block::from_trusted(cur as *mut u8) {
        cur = b.header().next.load(Relaxed);
        if !in_arena(b.as_ptr() as u64) {
            // SAFETY: a block `claim` mapped on its own (`mmap_anon` of `bs` bytes); the
            // probes are gone and no thread is in the runtime, so nothing reaches it.
            unsafe { sys::munmap(b.as_ptr() as u64, bs) };
        }
    }
    let Some(h) = header else {
        return;
    };
    let fd = r.arena_fd.swap(-1, Relaxed);
    let n = (h.chunk_count.load(Acquire) as usize).min(ARENA_CHUNKS);
    let head = r.arena.swap(0, Release);
    // The first chunk last: it holds the header this loop reads. It is mapped with the header
    // in front of its blocks.
    for c in h.chunks[..n].iter().rev() {
        let (first, count, addr) = (
            c.first.load(Relaxed),
            c.count.load(Relaxed),
            c.addr.load(Relaxed),
        );
        let (at, len) = match first {
            0 => (head, ARENA_HEADER_BYTES + count * bs),
            _ => (addr, count * bs),
        };
        // SAFETY: no code of the process reaches the arena any more: the probes are gone, no
        // thread is in the runtime, and the key whose destructor marked blocks is deleted.
        unsafe { sys::munmap(at, len) };
    }
    sys::close(fd);
}

/// A number from the environment, read without allocating (malloc may be the very function
/// being measured).
fn env_number(name: &std::ffi::CStr) -> Option<u64> {
    // SAFETY: `name` is NUL-terminated; getenv only reads the environment.
    let env = unsafe { libc::getenv(name.as_ptr()) };
    if env.is_null() {
        return None;
    }
    // SAFETY: a non-null getenv result is a NUL-terminated string.
    let v = unsafe { std::ffi::CStr::from_ptr(env) };
    v.to_str().ok()?.parse().ok()
}

/// Makes the arena (see the module documentation); without it every block is private.
fn make_arena(block_size: u64) {
    let blocks = env_number(c"GSH_RT_ARENA_BLOCKS")
        .filter(|&n| n > 0)
        .unwrap_or_else(|| WANT_ARENA.load(Relaxed));
    if let Some(n) = env_number(c"GSH_RT_ARENA_CHUNKS").filter(|&n| n > 0) {
        MAX_CHUNKS.store(n.min(ARENA_CHUNKS as u64), Relaxed);
    }
    let Some(len) = block_size
        .checked_mul(blocks)
        .and_then(|l| l.checked_add(ARENA_HEADER_BYTES))
    else {
        return;
    };
    let Some(fd) = sys::memfd(c"gsh-rt-arena", len) else {
        return;
    };
    let fd = sys::move_high(fd);
    let Some(at) = sys::mmap_shared(fd, len as usize, 0) else {
        sys::close(fd);
        return;
    };
    // SAFETY: `at` is a fresh shared mapping of a zeroed file that starts with the header;
    // nobody else sees it before `arena` is published below.
    let h = unsafe { &mut *at.cast::<ArenaHeader>() };
    h.magic = ARENA_MAGIC;
    h.pid = sys::getpid();
    h.block_size = block_size;
    h.blocks.store(blocks, Relaxed);
    let c = &h.chunks[0];
    c.first.store(0, Relaxed);
    c.count.store(blocks, Relaxed);
    c.addr.store(at as u64 + ARENA_HEADER_BYTES, Relaxed);
    h.chunk_count.store(1, Release);
    let r = &GSH_RT_ROOT;
    r.arena_fd.store(fd, Relaxed);
    r.arena.store(at as u64, Release);
    // SAFETY: `in_child` has the handler signature and touches only the runtime's own state.
    unsafe { libc::pthread_atfork(None, None, Some(in_child)) };
}

/// In a forked child, before `fork` returns there: every chunk of the arena is remapped
/// copy-on-write from the memfd (its blocks as they were at the fork, the forking thread's
/// block included, now the child's own), and the memfd is given up, so nothing the child
/// counts reaches the parent's blocks or a mutator reading them. A child forked without fork
/// handlers (`_Fork`, a raw `clone`) gets here when its first new thread needs a block.
extern "C" fn in_child() {
    let r = &GSH_RT_ROOT;
    let Some(h) = arena_header() else {
        return;
    };
    let fd = r.arena_fd.load(Relaxed);
    let bs = h.block_size;
    let n = (h.chunk_count.load(Acquire) as usize).min(ARENA_CHUNKS);
    let mut all = true;
    // The first chunk last: it holds the header this loop reads.
    for c in h.chunks[..n].iter().rev() {
        let (first, count, addr) = (
            c.first.load(Relaxed),
            c.count.load(Relaxed),
            c.addr.load(Relaxed),
        );
        let (at, off) = if first == 0 {
            (addr - ARENA_HEADER_BYTES, 0)
        } else {
            (addr, ARENA_HEADER_BYTES + first * bs)
        };
        let len = (count * bs + (addr - at)) as usize;
        all &= sys::mmap_private_over(at as *mut u8, len, fd, off);
    }
    if all {
        r.arena_fd.store(-1, Relaxed);
        sys::close(fd);
    }
}

/// The next block of the arena, growing it when all are handed out; `None` without an arena
/// of this process's own, or when it cannot grow (counted in `lost`).
fn from_arena(size: u64) -> Option<*mut u8> {
    let h = arena_header()?;
    if h.pid != sys::getpid() {
        // A child forked without fork handlers: the mapping is its parent's.
        in_child();
        return None;
    }
    while ARENA_LOCK
        .compare_exchange_weak(false, true, Acquire, Relaxed)
        .is_err()
    {
        std::thread::yield_now();
    }
    let k = h.used.load(Relaxed);
    let got = (k < h.blocks.load(Relaxed) || grow(h, size)).then(|| {
        h.used.store(k + 1, Relaxed);
        GSH_RT_ROOT.arena_used.store(k + 1, Relaxed);
        let n = h.chunk_count.load(Relaxed) as usize;
        let c = h.chunks[..n]
            .iter()
            .rev()
            .find(|c| c.first.load(Relaxed) <= k)
            .expect("chunk 0 starts at block 0");
        (c.addr.load(Relaxed) + (k - c.first.load(Relaxed)) * size) as *mut u8
    });
    if got.is_none() {
        h.lost.fetch_add(1, Relaxed);
    }
    ARENA_LOCK.store(false, Release);
    got
}

/// Grows the arena by as many blocks as it holds (or by one, when that fails), mapped as a
/// new chunk. Called with the arena locked. False when the memfd or the address space
/// refuses, or the header has no room for another chunk.
fn grow(h: &ArenaHeader, size: u64) -> bool {
    let n = h.chunk_count.load(Relaxed) as usize;
    if n >= ARENA_CHUNKS || n as u64 >= MAX_CHUNKS.load(Relaxed) {
        return false;
    }
    let fd = GSH_RT_ROOT.arena_fd.load(Relaxed);
    let have = h.blocks.load(Relaxed);
    let off = ARENA_HEADER_BYTES + have * size;
    for more in [have.max(1), 1] {
        let Some(len) = more.checked_mul(size) else {
            continue;
        };
        if !off
            .checked_add(len)
            .is_some_and(|end| sys::ftruncate(fd, end))
        {
            continue;
        }
        let Some(at) = sys::mmap_shared(fd, len as usize, off) else {
            continue;
        };
        let c = &h.chunks[n];
        c.first.store(have, Relaxed);
        c.count.store(more, Relaxed);
        c.addr.store(at as u64, Relaxed);
        h.chunk_count.store(n as u64 + 1, Release);
        h.blocks.store(have + more, Relaxed);
        return true;
    }
    // A failed growth leaves the file longer than its blocks; the next growth sets its size.
    false
}

/// A block for a new thread: an exited thread's (already on the list: `true`), else a fresh
/// one from the arena (grown if need be), else a private mapping. Null when memory is exhausted.
fn claim(size: usize) -> (*mut u8, bool) {
    for b in blocks().take_while(|_| DEAD.load(Relaxed) > 0) {
        let state = &b.header().state;
        if state.load(Relaxed) == THREAD_DEAD
            && state
                .compare_exchange(THREAD_DEAD, THREAD_LIVE, Acquire, Relaxed)
                .is_ok()
        {
            DEAD.fetch_sub(1, Relaxed);
            let h = b.header();
            // Its counts stay (they are part of the totals); what belonged to the old thread's
            // stack goes. SAFETY: the block is ours since the exchange above; `tid` is a
            // plain field only the owning thread writes.
            unsafe { (*b.as_ptr().cast::<ThreadHeader>()).tid = sys::gettid() };
            h.shadow_top.store(0, Relaxed);
            h.stack_lo.store(0, Relaxed);
            h.stack_hi.store(0, Relaxed);
            return (b.as_ptr(), true);
        }
    }
    if let Some(b) = from_arena(size as u64) {
        return (b, false);
    }
    GSH_RT_ROOT.arena_overflow.fetch_add(1, Relaxed);
    (sys::mmap_anon(size).unwrap_or(std::ptr::null_mut()), false)
}

fn create() -> *mut u8 {
    init();
    let r = &GSH_RT_ROOT;
    let size = r.block_size.load(Relaxed) as usize;
    let (b, reused) = claim(size);
    if b.is_null() {
        return b;
    }
    let key = KEY.load(Relaxed);
    if reused {
        if key != u32::MAX {
            // SAFETY: as below.
            unsafe { libc::pthread_setspecific(key, b.cast()) };
        }
        tls::set_block(b);
        return b;
    }
    // SAFETY: `b` is a fresh zeroed block of `size` bytes, larger than the header; nobody
    // else can see it until it is pushed below. The stack bounds stay 0 until a call-path
    // walk needs them (reading /proc/self/maps at every thread's start cost it 10 µs or more).
    unsafe {
        let h = b.cast::<ThreadHeader>();
        (*h).tid = sys::gettid();
        (*h).state.store(THREAD_LIVE, Relaxed);
        (*h).max_slots = r.max_slots.load(Relaxed);
        (*h).shadow_capacity = r.shadow_capacity.load(Relaxed);
        (*h).path_mask = r.path_capacity.load(Relaxed) - 1;
    }
    let mut head = r.threads.load(Relaxed);
    loop {
        // SAFETY: as above, the block is still private to this thread.
        unsafe { (*b.cast::<ThreadHeader>()).next.store(head, Relaxed) };
        match r
            .threads
            .compare_exchange_weak(head, b as u64, Release, Relaxed)
        {
            Ok(_) => break,
            Err(h) => head = h,
        }
    }
    r.thread_count.fetch_add(1, Relaxed);
    if key != u32::MAX {
        // SAFETY: `key` came from pthread_key_create; the first 32 keys live inside the thread
        // descriptor, so this does not allocate.
        unsafe { libc::pthread_setspecific(key, b.cast()) };
    }
    tls::set_block(b);
    b
}

/// Iterates over all thread blocks, newest first.
pub fn blocks() -> impl Iterator<Item = Block> {
    let mut cur = GSH_RT_ROOT.threads.load(Acquire);
    std::iter::from_fn(move || {
        let b = Block::from_trusted(cur as *mut u8)?;
        cur = b.header().next.load(Relaxed);
        Some(b)
    })
}

/// Runs when the library is loaded: calibrate the clock now rather than on the first event.
extern "C" fn on_load() {
    init_clock();
}

#[used]
#[link_section = ".init_array"]
static ON_LOAD: extern "C" fn() = on_load;
