//! Call-path profiles (iPath): on entry to a profiled function, walk the return addresses on the
//! stack, hash them with the slot, and count the activation (and later its inclusive time) in a
//! per-thread open-addressing table of path records that the mutator reads and symbolises.
//!
//! The walk starts at `rsp` at the function's first instruction, so `ras[0] = [rsp]`. For each
//! return address `ra` it finds the caller's frame by one of two rules:
//! - a registered unwind table (`gsh_rt_add_unwind_table`, computed by gsh from `.eh_frame` per
//!   call site) gives `ra`'s CFA rule: for the usual `rsp`-based frame, the next return address
//!   is at `p + cfa_off` where `p` is where `ra` was found (`ra = [p]; p += size(ra)`);
//! - otherwise the frame-pointer chain: next return address at `rbp + 8`, next `rbp = [rbp]`.
//!
//! It stops at [`MAX_PATH_DEPTH`], at an implausible return address, or when the next address
//! would leave the mapping that holds `rsp` (every address between `rsp` and the end of that
//! mapping is readable, which is what makes reading arbitrary `rbp` values safe).
//!
//! The walk is a pure function of its inputs: `rsp`, `rbp`, the end of the stack mapping, the
//! registered unwind tables (which only grow: their count names them), and the stack words it
//! reads. Each thread keeps a memo of its last walk ([`WalkMemo`]): those inputs, every word
//! read with its address, and the record the path found. An entry whose inputs are the same and
//! whose stack still holds the same words at the same addresses has the same path, so it reuses
//! the record without walking, hashing or probing: the common case of a function called in a
//! loop costs a few loads and compares per frame. The result is exactly the full walk's.

use crate::events::{
    block_for, block_with, bump, close_gone, exit, pop_gone, push, same_frame, shadow, Now,
};
use crate::layout::*;
use crate::sys;
use crate::thread::{Block, GSH_RT_ROOT, MEMO_OFF, PATHS_OFF, RA_CACHE_OFF};
use std::sync::atomic::compiler_fence;
use std::sync::atomic::Ordering::{Acquire, Relaxed, Release, SeqCst};

/// Linear-probe limit before an activation goes to the "other" record.
const MAX_PROBE: u32 = 32;

/// Pointer to path record `i` of block `b`.
#[inline(always)]
fn record_ptr(b: Block, i: u32) -> *mut PathRecord {
    // SAFETY: callers keep `i <= path_mask`; the table lies inside the block mapping.
    unsafe {
        b.as_ptr()
            .add(PATHS_OFF.load(Relaxed) as usize + i as usize * size_of::<PathRecord>())
            .cast()
    }
}

/// Path record `i` of block `b`.
#[inline(always)]
pub fn record<'a>(b: Block, i: u32) -> &'a PathRecord {
    // SAFETY: see `record_ptr`; non-atomic fields are written only before `hash` is published.
    unsafe { &*record_ptr(b, i) }
}

/// The unwind rule for return address `ra`, if a registered table has one.
#[inline(always)]
fn lookup(ra: u64) -> Option<UnwindEntry> {
    let r = &GSH_RT_ROOT;
    let n = r.unwind_count.load(Acquire) as usize;
    for t in &r.unwind[..n.min(MAX_UNWIND_TABLES)] {
        if ra < t.lo.load(Relaxed) || ra > t.hi.load(Relaxed) {
            continue;
        }
        let base = t.entries.load(Relaxed) as *const UnwindEntry;
        let len = t.len.load(Relaxed) as usize;
        // SAFETY: the registrant promised `len` sorted entries that stay mapped.
        let entries = unsafe { std::slice::from_raw_parts(base, len) };
        if let Ok(i) = entries.binary_search_by_key(&ra, |e| e.ra) {
            return Some(entries[i]);
        }
    }
    None
}

/// Per-thread memo of [`lookup`]: a direct-mapped cache of return address -> packed rule
/// (bit 63 set when found; then `cfa_off` in bits 0..32, `base` in 32..40, `rbp_save` in
/// 40..56), 0 when the address is in no table. Binary searches over big tables cost far more
/// than the rest of the walk. Registering a table flushes it (the generation changes).
struct RaCache {
    base: *mut [u64; 2],
    tables: bool,
}

impl RaCache {
    #[inline(always)]
    fn new(b: Block) -> RaCache {
        let gen = GSH_RT_ROOT.unwind_count.load(Acquire) as u64;
        // SAFETY: the cache lies inside the block, `RA_CACHE_ENTRIES` entries of 16 bytes.
        let base =
            unsafe { b.as_ptr().add(RA_CACHE_OFF.load(Relaxed) as usize) }.cast::<[u64; 2]>();
        let h = b.header();
        if h.ra_cache_gen.load(Relaxed) != gen {
            // Word by word with volatile stores: `write_bytes` compiles to a call of libc's
            // `memset`, which the `_tsc` entry points must not reach.
            for i in 0..RA_CACHE_ENTRIES as usize * 2 {
                // SAFETY: as above (two words per entry); only the owning thread touches its
                // cache.
                unsafe { base.cast::<u64>().add(i).write_volatile(0) };
            }
            h.ra_cache_gen.store(gen, Relaxed);
        }
        RaCache {
            base,
            tables: gen != 0,
        }
    }

    #[inline(always)]
    fn get(&self, ra: u64) -> Option<UnwindEntry> {
        if !self.tables {
            return None;
        }
        let i = (ra ^ (ra >> 17)).wrapping_mul(0x9E37_79B9_7F4A_7C15)
            >> (64 - RA_CACHE_ENTRIES.trailing_zeros());
        // SAFETY: `i < RA_CACHE_ENTRIES`.
        let slot = unsafe { &mut *self.base.add(i as usize) };
        let rule = if slot[0] == ra {
            slot[1]
        } else {
            let rule = lookup(ra).map_or(0, |e| {
                1 << 63
                    | e.cfa_off as u64
                    | (e.base as u64) << 32
                    | (e.rbp_save as u16 as u64) << 40
            });
            *slot = [ra, rule];
            rule
        };
        (rule >> 63 != 0).then_some(UnwindEntry {
            ra,
            cfa_off: rule as u32,
            base: (rule >> 32) as u8,
            reserved: 0,
            rbp_save: (rule >> 40) as u16 as i16,
        })
    }
}

/// Reads a stack word already checked to lie in the readable range.
#[inline(always)]
fn word(p: u64) -> u64 {
    // SAFETY: callers check `lo <= p && p + 8 <= hi` for the mapping holding the stack.
    unsafe { (p as *const u64).read() }
}

/// Walks the return addresses above `rsp` into `ras`; returns how many were found.
pub fn walk(b: Block, rsp: u64, rbp: u64, ras: &mut [u64; MAX_PATH_DEPTH]) -> usize {
    walk_logged(b, rsp, rbp, ras, None)
}

/// The walk memo of block `b` ([`WalkMemo`], at `MEMO_OFF`; zero, as a fresh or cleared block
/// is, means empty).
#[inline(always)]
fn memo(b: Block) -> *mut WalkMemo {
    // SAFETY: the memo region lies inside the block, `WALK_MEMO_BYTES` long, 8-aligned.
    unsafe { b.as_ptr().add(MEMO_OFF.load(Relaxed) as usize) }.cast()
}

/// As [`walk`], logging every word read into `log` (its `words` and `n`).
#[inline(always)]
fn walk_logged(
    b: Block,
    rsp: u64,
    rbp: u64,
    ras: &mut [u64; MAX_PATH_DEPTH],
    log: Option<*mut WalkMemo>,
) -> usize {
    let mut logged = 0usize;
    let mut read = |p: u64| {
        let v = word(p);
        if let Some(m) = log {
            // SAFETY: at most two words are read per frame, so `logged < 2 * MAX_PATH_DEPTH`;
            // `m` is this thread's memo, kept odd-`seq` by the caller. Volatile: a loop of plain
            // stores may compile to a call of libc's `memcpy`.
            unsafe { (&raw mut (*m).words[logged]).write_volatile([p, v]) };
            logged += 1;
        }
        v
    };
    let n = walk_inner(b, rsp, rbp, ras, &mut read);
    if let Some(m) = log {
        // SAFETY: as above.
        unsafe { (&raw mut (*m).n).write_volatile(logged as u64) };
    }
    n
}

/// The walk itself; every stack word it reads goes through `word` (which shadows the plain
/// [`word`] here).
#[inline(always)]
fn walk_inner(
    b: Block,
    rsp: u64,
    rbp: u64,
    ras: &mut [u64; MAX_PATH_DEPTH],
    word: &mut impl FnMut(u64) -> u64,
) -> usize {
    let h = b.header();
    let cache = RaCache::new(b);
    let (mut lo, mut hi) = (h.stack_lo.load(Relaxed), h.stack_hi.load(Relaxed));
    if rsp < lo || rsp >= hi {
        // Stack grew, or this is another stack (a signal or coroutine stack, a test's fake one).
        let (l, e) = sys::mapping_containing(rsp).unwrap_or((0, 0));
        (lo, hi) = (l, e);
        h.stack_lo.store(lo, Relaxed);
        h.stack_hi.store(hi, Relaxed);
    }
    let ok = |p: u64| p >= rsp && p & 7 == 0 && p.checked_add(8).is_some_and(|e| e <= hi);
    let (mut p, mut fp, mut n) = (rsp, rbp, 0);
    while n < MAX_PATH_DEPTH && ok(p) {
        let ra = word(p);
        if ra < 0x1000 {
            break;
        }
        ras[n] = ra;
        n += 1;
        let next = match cache.get(ra) {
            Some(e) => {
                let cfa = if e.base == UNWIND_BASE_RBP {
                    fp.wrapping_add(e.cfa_off as u64)
                } else {
                    p.wrapping_add(8).wrapping_add(e.cfa_off as u64)
                };
                if e.rbp_save != 0 {
                    let at = cfa.wrapping_add(e.rbp_save as i64 as u64);
                    if !ok(at) {
                        break;
                    }
                    fp = word(at);
                }
                cfa.wrapping_sub(8)
            }
            None => {
                if fp <= p || !ok(fp) || !ok(fp + 8) {
                    break;
                }
                let next = fp + 8;
                fp = word(fp);
                next
            }
        };
        if next <= p {
            break;
        }
        p = next;
    }
    n
}

/// Hash of a path: the slot and its return addresses. Never 0 (0 marks a free record).
#[inline(always)]
pub fn hash(slot: u32, ras: &[u64]) -> u64 {
    const K: u64 = 0x9E37_79B9_7F4A_7C15;
    let mut x = (slot as u64 + 1).wrapping_mul(K);
    for &ra in ras {
        x = (x.rotate_left(23) ^ ra).wrapping_mul(K);
    }
    x ^= x >> 32;
    x.max(1)
}

/// Finds or claims the record for this path; [`RECORD_OTHER`] when the table is full.
///
/// A record the mutator retired (its slot handed to a new owner: `RETIRED_SLOT`) is claimed
/// again, for a path not found further along its probe sequence. Without that, a path
/// profiled again in each of many sessions (the same return addresses, so the same hash)
/// met one more retired record each time and went to [`RECORD_OTHER`] after [`MAX_PROBE`]
/// of them (redis's `pingCommand` in the 33rd cycle of `xtask soak-redis`).
#[inline(always)]
fn find(b: Block, h: &ThreadHeader, slot: u32, ras: &[u64]) -> u32 {
    let hv = hash(slot, ras);
    let mut i = hv as u32 & h.path_mask;
    let mut retired = None;
    for _ in 0..MAX_PROBE.min(h.path_mask + 1) {
        let p = record_ptr(b, i);
        // SAFETY: `p` is a record inside the block (see `record_ptr`); only the atomic field is
        // borrowed while the record may still be written below.
        let rh = unsafe { (*p).hash.load(Relaxed) };
        if rh == 0 {
            if let Some(r) = retired {
                return claim(b, r, hv, slot, ras);
            }
            let used = h.path_used.load(Relaxed);
            if used >= (h.path_mask + 1) / 4 * 3 {
                return RECORD_OTHER;
            }
            h.path_used.store(used + 1, Relaxed);
            return claim(b, i, hv, slot, ras);
        }
        // SAFETY: a published record is no longer written except for its atomic counters, or
        // by this thread when it claims a retired one again.
        let r = unsafe { &*p };
        if r.slot == RETIRED_SLOT {
            retired.get_or_insert(i);
        } else if rh == hv
            && r.slot == slot
            && r.depth as usize == ras.len()
            // Compared word by word: a slice comparison compiles to a call of libc's `bcmp`.
            && r.ras.iter().zip(ras).all(|(a, b)| a == b)
        {
            return i;
        }
        i = (i + 1) & h.path_mask;
    }
    match retired {
        Some(r) => claim(b, r, hv, slot, ras),
        None => RECORD_OTHER,
    }
}

/// Makes record `i` (free, or retired by the mutator) this path's, with no activations yet.
#[inline(always)]
fn claim(b: Block, i: u32, hv: u64, slot: u32, ras: &[u64]) -> u32 {
    let p = record_ptr(b, i);
    // SAFETY: `p` is a record inside the block. A free or retired record is written only by
    // its owning thread (this one); its hash is cleared first and published again last, with
    // release order, so a reader ignores it while it changes. The mutator writes only
    // records it reads as claimed by a live slot, never a retired one.
    unsafe {
        (*p).hash.store(0, Relaxed);
        compiler_fence(SeqCst);
        (&raw mut (*p).slot).write(slot);
        (&raw mut (*p).depth).write(ras.len() as u32);
        (*p).count.store(0, Relaxed);
        (*p).total_ns.store(0, Relaxed);
        // Word by word with volatile stores: a `copy_nonoverlapping` of unknown length
        // compiles to a call of libc's `memcpy`, which the `_tsc` entry points must
        // not reach (and which may be the very function being measured).
        let dst = (&raw mut (*p).ras).cast::<u64>();
        for (k, &ra) in ras.iter().enumerate() {
            dst.add(k).write_volatile(ra);
        }
        (*p).hash.store(hv, Release);
    }
    i
}

/// The memo's record if the walk from (`rsp`, `rbp`) would read what the memo's did.
#[inline(always)]
fn memo_hit(
    b: Block,
    h: &ThreadHeader,
    m: &WalkMemo,
    slot: u32,
    rsp: u64,
    rbp: u64,
) -> Option<u32> {
    if m.rsp != rsp
        || m.rbp != rbp
        || m.slot != slot
        || m.hi != h.stack_hi.load(Relaxed)
        || rsp < h.stack_lo.load(Relaxed)
        || m.gen != GSH_RT_ROOT.unwind_count.load(Acquire) as u64
    {
        return None;
    }
    // Each address was in the stack mapping's readable range for this same `rsp` and end.
    if !m.words[..m.n as usize].iter().all(|&[p, v]| word(p) == v) {
        return None;
    }
    // The record is still this path's: not cleared or retired by the mutator since.
    let r = record(b, m.record);
    (r.hash.load(Relaxed) == m.hash && r.slot == slot).then_some(m.record)
}

/// The path record (or [`RECORD_OTHER`]) of an activation of `slot` entered with `rsp`, `rbp`:
/// from the memo when it applies, else by walking, remembering the walk.
///
/// The memo's `seq` is odd while this runs and changes across every run, so generated code
/// that reads the memo (`rt/LAYOUT.md`, `WalkMemo`) and is interrupted by a signal handler
/// whose profiled entry comes here sees `seq` changed and does not trust what it read.
#[inline(always)]
fn record_for(b: Block, h: &ThreadHeader, slot: u32, rsp: u64, rbp: u64) -> u32 {
    let mp = memo(b);
    // SAFETY: `mp` is this thread's memo; only this thread (or a signal handler interrupting
    // it, which an odd `seq` keeps out) writes it.
    let seq = unsafe { (&raw const (*mp).seq).read_volatile() };
    if seq & 1 != 0 {
        let mut ras = [0u64; MAX_PATH_DEPTH];
        let n = walk(b, rsp, rbp, &mut ras);
        return find(b, h, slot, &ras[..n]);
    }
    // SAFETY: as above; the fences keep the memo's use between the two stores of `seq`.
    unsafe { (&raw mut (*mp).seq).write_volatile(seq.wrapping_add(1)) };
    compiler_fence(SeqCst);
    // SAFETY: as above; no other reference to the memo exists while `seq` is odd.
    let hit = memo_hit(b, h, unsafe { &*mp }, slot, rsp, rbp);
    let idx = match hit {
        Some(i) => i,
        None => {
            // SAFETY: as above.
            unsafe { (&raw mut (*mp).rsp).write_volatile(0) };
            // Only a miss walks: a hit does not clear the return-address buffer.
            let mut ras = [0u64; MAX_PATH_DEPTH];
            let n = walk_logged(b, rsp, rbp, &mut ras, Some(mp));
            let idx = find(b, h, slot, &ras[..n]);
            if idx != RECORD_OTHER {
                // SAFETY: as above.
                unsafe {
                    let m = &mut *mp;
                    m.rbp = rbp;
                    m.hi = h.stack_hi.load(Relaxed);
                    m.gen = GSH_RT_ROOT.unwind_count.load(Acquire) as u64;
                    m.hash = record(b, idx).hash.load(Relaxed);
                    m.slot = slot;
                    m.record = idx;
                    m.rsp = rsp;
                }
            }
            idx
        }
    };
    compiler_fence(SeqCst);
    // SAFETY: as above.
    unsafe { (&raw mut (*mp).seq).write_volatile(seq.wrapping_add(2)) };
    idx
}

#[inline(always)]
fn path_enter<const TSC: bool>(slot: u32, rsp: u64, rbp: u64, kind: u32) {
    let Some(b) = block_for::<TSC>() else {
        return;
    };
    let h = b.header();
    let mut now = Now::<TSC>::default();
    let top = pop_gone(b, h, rsp, true, &mut now);
    let idx = record_for(b, h, slot, rsp, rbp);
    if idx == RECORD_OTHER {
        // In the slot's own record (unused by profiles otherwise), so a reader knows which
        // profile the activations beyond the table belong to.
        if slot < h.max_slots {
            bump(&crate::events::slot(b, slot).count, 1);
        } else {
            bump(&h.other_count, 1);
        }
    } else {
        bump(&record(b, idx).count, 1);
    }
    if kind == 0 {
        return;
    }
    let start = Now::<TSC>::default().for_kind(kind);
    push(
        b,
        h,
        top,
        ShadowEntry {
            rsp,
            start,
            slot,
            kind,
            record: idx,
            reserved: 0,
        },
    );
}

/// The path record of the profiled activation of a loop's function that the loop with frame
/// key `key` runs in: the path frame at exactly `key + LOOP_KEY_BELOW_ENTRY` (the function's
/// entry `rsp`), the innermost frame open above `key` below `top` (the frames at `key` are the
/// loops of the same function this one is nested in). [`RECORD_OTHER`] when that activation is
/// not profiled (it began before its profile went in) or its path found no record.
#[inline(always)]
fn enclosing_record(b: Block, top: u32, key: u64) -> u32 {
    let at = key.wrapping_add(LOOP_KEY_BELOW_ENTRY);
    let mut i = top;
    while i > 0 {
        i -= 1;
        // SAFETY: `i < top <= shadow_capacity`; the entry was written by this thread.
        let e = unsafe { *shadow(b, i) };
        if e.rsp <= key {
            continue;
        }
        let profiled = e.kind == FRAME_PATH_WALL || e.kind == FRAME_PATH_CPU;
        return if e.rsp == at && profiled {
            e.record
        } else {
            RECORD_OTHER
        };
    }
    RECORD_OTHER
}

/// Opens an activation of loop slot `slot`, frame key `key`, in the path record of `slot` whose
/// return addresses are those of its function's profiled activation ([`enclosing_record`]):
/// the loop's time and entries along each call path of its function, read as a profile's are,
/// closed as a path frame by the path exit. An activation in no known path is counted in the
/// slot's own record and timed there ("other paths"), as a profile's are.
#[inline(always)]
fn path_loop_enter<const TSC: bool>(slot: u32, key: u64) {
    let Some(b) = block_with::<TSC>(slot) else {
        return;
    };
    let h = b.header();
    let mut now = Now::<TSC>::default();
    // Frames below the key are gone, and at the key this loop's own earlier activation that
    // never saw its exit (with any loop nested in it); the loops of the same function it is
    // nested in share its key and stay open.
    let mut top = pop_gone(b, h, key, false, &mut now);
    if let Some(i) = same_frame(b, h, top, key, slot, &mut now) {
        // SAFETY: `i < top <= shadow_capacity`; written by this thread.
        let e = unsafe { *shadow(b, i) };
        h.shadow_top.store(i, Relaxed);
        close_gone(b, h, &e, &mut now);
        top = i;
    }
    let function = enclosing_record(b, top, key);
    let idx = if function == RECORD_OTHER {
        RECORD_OTHER
    } else {
        let r = record(b, function);
        let n = (r.depth as usize).min(MAX_PATH_DEPTH);
        // Copied word by word: a slice copy compiles to a call of libc's `memcpy`.
        let mut ras = [0u64; MAX_PATH_DEPTH];
        for (k, slot) in ras.iter_mut().enumerate().take(n) {
            // SAFETY: `k < n <= MAX_PATH_DEPTH`; a published record's `ras` no longer change
            // while its activation is open (only this thread claims records again).
            *slot = unsafe { (&raw const r.ras[k]).read_volatile() };
        }
        find(b, h, slot, &ras[..n])
    };
    if idx == RECORD_OTHER {
        bump(&crate::events::slot(b, slot).count, 1);
    } else {
        bump(&record(b, idx).count, 1);
    }
    let start = Now::<TSC>::default().wall();
    push(
        b,
        h,
        top,
        ShadowEntry {
            rsp: key,
            start,
            slot,
            kind: FRAME_PATH_WALL,
            record: idx,
            reserved: 0,
        },
    );
}

/// Opens an activation of a loop timed along call paths: `slot` is the loop's, `key` its frame
/// key (its function's entry `rsp` less `LOOP_KEY_BELOW_ENTRY`), `rbp` unused. Its entries
/// and wall time go to the path record of `slot` with the return addresses of its function's
/// profiled activation (`gsh_rt_path_enter` at `key + LOOP_KEY_BELOW_ENTRY`), so a reader
/// tells the loop's time along one call path from its time along another; closed by
/// `gsh_rt_path_exit(slot, key)`.
#[no_mangle]
pub extern "C" fn gsh_rt_path_loop_enter(slot: u32, key: u64, _rbp: u64) {
    path_loop_enter::<false>(slot, key);
}

/// As `gsh_rt_path_loop_enter`, under the conditions of `gsh_rt_path_enter_tsc`.
#[no_mangle]
pub extern "C" fn gsh_rt_path_loop_enter_tsc(slot: u32, key: u64, _rbp: u64) {
    path_loop_enter::<true>(slot, key);
}

/// Profiles an activation of `slot` by call path with wall time. `rsp` is the stack pointer at
/// the function's first instruction, `rbp` the frame pointer there (the caller's).
#[no_mangle]
pub extern "C" fn gsh_rt_path_enter(slot: u32, rsp: u64, rbp: u64) {
    path_enter::<false>(slot, rsp, rbp, FRAME_PATH_WALL);
}

/// As `gsh_rt_path_enter`, with thread CPU time.
#[no_mangle]
pub extern "C" fn gsh_rt_path_enter_cpu(slot: u32, rsp: u64, rbp: u64) {
    path_enter::<false>(slot, rsp, rbp, FRAME_PATH_CPU);
}

/// Counts an activation of `slot` by call path, untimed: needs no `gsh_rt_path_exit`.
#[no_mangle]
pub extern "C" fn gsh_rt_path_count(slot: u32, rsp: u64, rbp: u64) {
    path_enter::<false>(slot, rsp, rbp, 0);
}

/// Closes the activation opened by `gsh_rt_path_enter(_cpu)(slot, rsp, _)`.
#[no_mangle]
pub extern "C" fn gsh_rt_path_exit(slot: u32, rsp: u64) {
    exit::<false>(slot, rsp);
}

/// As `gsh_rt_path_enter`, reading the wall clock with `rdtsc` only and never calling out of
/// the library, so a trampoline need save only the registers `engine::callee` finds it writes.
/// Use only when the root's `clock_kind` is 1 (rdtsc), and only once the thread has its block
/// (`gsh_rt_thread`): without one the event is dropped.
#[no_mangle]
pub extern "C" fn gsh_rt_path_enter_tsc(slot: u32, rsp: u64, rbp: u64) {
    path_enter::<true>(slot, rsp, rbp, FRAME_PATH_WALL);
}

/// As `gsh_rt_path_enter_cpu`, under the conditions of `gsh_rt_path_enter_tsc`; the thread CPU
/// clock is read with a raw `syscall`.
#[no_mangle]
pub extern "C" fn gsh_rt_path_enter_cpu_tsc(slot: u32, rsp: u64, rbp: u64) {
    path_enter::<true>(slot, rsp, rbp, FRAME_PATH_CPU);
}

/// As `gsh_rt_path_count`, under the conditions of `gsh_rt_path_enter_tsc`.
#[no_mangle]
pub extern "C" fn gsh_rt_path_count_tsc(slot: u32, rsp: u64, rbp: u64) {
    path_enter::<true>(slot, rsp, rbp, 0);
}

/// As `gsh_rt_path_exit`, under the conditions of `gsh_rt_path_enter_tsc`.
#[no_mangle]
pub extern "C" fn gsh_rt_path_exit_tsc(slot: u32, rsp: u64) {
    exit::<true>(slot, rsp);
}

/// Registers a module's unwind table: `len` [`UnwindEntry`]s sorted by `ra` without duplicates,
/// which must stay mapped and unchanged for the life of the process. Returns 0, or -1 if the
/// table is unsorted or the 64 table slots are used up.
///
/// # Safety
/// `entries` must point at `len` readable entries.
#[no_mangle]
pub unsafe extern "C" fn gsh_rt_add_unwind_table(entries: *const UnwindEntry, len: usize) -> i32 {
    if entries.is_null() || len == 0 {
        return -1;
    }
    // SAFETY: the caller guarantees `len` readable entries.
    let s = unsafe { std::slice::from_raw_parts(entries, len) };
    if s.windows(2).any(|w| w[0].ra >= w[1].ra) {
        return -1;
    }
    let r = &GSH_RT_ROOT;
    // Registration is rare and may race with itself (two mutator-injected calls): claim an index
    // with a CAS loop, fill it, then bump the count that readers trust in order. A slot claimed
    // but not yet counted is invisible.
    static CLAIMED: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    let i = CLAIMED.fetch_add(1, Relaxed) as usize;
    if i >= MAX_UNWIND_TABLES {
        return -1;
    }
    let t = &r.unwind[i];
    t.entries.store(entries as u64, Relaxed);
    t.len.store(len as u64, Relaxed);
    t.lo.store(s[0].ra, Relaxed);
    t.hi.store(s[len - 1].ra, Relaxed);
    while r
        .unwind_count
        .compare_exchange_weak(i as u32, i as u32 + 1, Release, Relaxed)
        .is_err()
    {
        std::hint::spin_loop();
    }
    0
}
