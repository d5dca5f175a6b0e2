//! The hot path: counting, timing, and the per-thread shadow stack of open activations.
//!
//! Every entry point loads the thread block from the initial-exec TLS word, falls back to the
//! cold `thread::slow` once per thread, and then touches only that thread's memory with plain
//! loads and stores: no locks, no `lock` prefix, no system calls other than clock reads.
//!
//! The shadow stack holds `(slot, kind, rsp at entry)` per open activation. Frames that a
//! `longjmp`, an exception or a tail call abandoned never see their exit; they are recognised by
//! their `rsp`: at an enter with stack pointer `sp`, every open entry with `rsp <= sp` is gone
//! (a live caller's `rsp` is strictly above its callee's, and an equal `rsp` means the return
//! address slot was reused); at an exit, every entry with `rsp < sp` is gone. Such a frame is
//! closed as if it had returned at the moment of that later event, so it is credited with its
//! time up to then: an overestimate bounded by the time between the unwinding and the next
//! event on the same thread.

use crate::layout::*;
use crate::thread::{self, Block};
use crate::{clock, tls};
use std::sync::atomic::Ordering::Relaxed;

/// Bumps a counter with a plain load and store: only the owning thread ever writes it.
#[inline(always)]
pub fn bump(c: &std::sync::atomic::AtomicU64, by: u64) {
    c.store(c.load(Relaxed).wrapping_add(by), Relaxed);
}

/// The calling thread's block, creating it on first use; `None` if none can be had.
#[inline(always)]
pub fn block() -> Option<Block> {
    match Block::from_trusted(tls::block()) {
        Some(b) => Some(b),
        None => thread::slow(),
    }
}

/// The calling thread's block for an entry point of flavour `TSC`: the `_tsc` entry points
/// never create it (that calls libc: `mmap` aside, `pthread_setspecific`), so that nothing
/// outside the library is reachable from them; their events are dropped until the thread's
/// first `gsh_rt_thread` (or other entry point).
#[inline(always)]
pub fn block_for<const TSC: bool>() -> Option<Block> {
    if TSC {
        Block::from_trusted(tls::block())
    } else {
        block()
    }
}

/// [`block_for`], when `slot` is one of its slots; a slot out of range is counted
/// (`bad_slots`) and gets none.
#[inline(always)]
pub fn block_with<const TSC: bool>(slot: u32) -> Option<Block> {
    let b = block_for::<TSC>()?;
    let h = b.header();
    if slot >= h.max_slots {
        bump(&h.bad_slots, 1);
        return None;
    }
    Some(b)
}

/// The record of `slot` in block `b`.
#[inline(always)]
pub fn slot<'a>(b: Block, slot: u32) -> &'a SlotRecord {
    // SAFETY: callers check `slot < max_slots`; the slot array lies inside the block mapping.
    unsafe {
        &*b.as_ptr()
            .add(SLOTS_OFFSET as usize + slot as usize * 32)
            .cast::<SlotRecord>()
    }
}

/// Pointer to shadow-stack entry `i` of block `b`.
#[inline(always)]
pub fn shadow(b: Block, i: u32) -> *mut ShadowEntry {
    // SAFETY: callers keep `i < shadow_capacity`; the shadow stack lies inside the block.
    unsafe {
        b.as_ptr()
            .add(thread::SHADOW_OFF.load(Relaxed) as usize + i as usize * 32)
            .cast()
    }
}

/// Clock readings taken at most once per event, on demand. With `TSC` the wall clock is
/// `rdtsc` alone and the CPU clock a raw system call: what the `_tsc` entry points read.
#[derive(Default)]
pub struct Now<const TSC: bool> {
    wall: Option<u64>,
    cpu: Option<u64>,
}

impl<const TSC: bool> Now<TSC> {
    /// The wall clock (ns).
    #[inline(always)]
    pub fn wall(&mut self) -> u64 {
        *self.wall.get_or_insert_with(|| {
            if TSC {
                clock::tsc_ns()
            } else {
                clock::wall_ns()
            }
        })
    }

    /// The thread CPU clock (ns).
    #[inline(always)]
    pub fn cpu(&mut self) -> u64 {
        *self.cpu.get_or_insert_with(|| {
            if TSC {
                clock::cpu_ns_raw()
            } else {
                clock::cpu_ns()
            }
        })
    }

    /// The clock that frame kind `kind` measures with.
    #[inline(always)]
    pub fn for_kind(&mut self, kind: u32) -> u64 {
        if kind == FRAME_CPU || kind == FRAME_PATH_CPU {
            self.cpu()
        } else {
            self.wall()
        }
    }
}

/// Closes one activation: credits its slot (outermost activation only) or its path record.
#[inline(always)]
fn close<const TSC: bool>(b: Block, h: &ThreadHeader, e: &ShadowEntry, now: &mut Now<TSC>) {
    if e.kind == FRAME_WALL || e.kind == FRAME_CPU {
        let rec = slot(b, e.slot);
        let depth = rec.depth.load(Relaxed).saturating_sub(1);
        rec.depth.store(depth, Relaxed);
        if depth == 0 {
            let t = now
                .for_kind(e.kind)
                .saturating_sub(rec.entry_ns.load(Relaxed));
            bump(&rec.total_ns, t);
        }
    } else if e.kind != FRAME_DEAD {
        // A dead frame (rare: its slot was handed to another measure) credits nothing.
        let t = now.for_kind(e.kind).saturating_sub(e.start);
        if e.record == RECORD_OTHER && e.slot < h.max_slots {
            bump(&slot(b, e.slot).total_ns, t);
        } else if e.record == RECORD_OTHER {
            bump(&h.other_ns, t);
        } else {
            bump(&crate::path::record(b, e.record).total_ns, t);
        }
    }
}

/// Closes activation `e`, just taken off the shadow stack, as gone (its exit never ran).
#[inline(always)]
pub fn close_gone<const TSC: bool>(
    b: Block,
    h: &ThreadHeader,
    e: &ShadowEntry,
    now: &mut Now<TSC>,
) {
    close(b, h, e, now);
    bump(&h.abandoned_frames, 1);
    // Activations beyond the shadow stack's capacity were deeper than this one.
    h.shadow_overflow.store(0, Relaxed);
}

/// Pops every open activation whose frame is gone given stack pointer `sp` (`rsp <= sp` when
/// `inclusive`, else `rsp < sp`), crediting it up to now. Returns the new top.
#[inline(always)]
pub fn pop_gone<const TSC: bool>(
    b: Block,
    h: &ThreadHeader,
    sp: u64,
    inclusive: bool,
    now: &mut Now<TSC>,
) -> u32 {
    let mut top = h.shadow_top.load(Relaxed);
    while top > 0 {
        // SAFETY: `top - 1 < shadow_capacity`; the entry was written by this thread.
        let e = unsafe { *shadow(b, top - 1) };
        let gone = if inclusive { e.rsp <= sp } else { e.rsp < sp };
        if !gone {
            break;
        }
        top -= 1;
        close(b, h, &e, now);
        bump(&h.abandoned_frames, 1);
        // Activations beyond the shadow stack's capacity were deeper than this one.
        h.shadow_overflow.store(0, Relaxed);
    }
    h.shadow_top.store(top, Relaxed);
    top
}

/// The open activation of `slot` keyed `rsp` among the frames at `rsp` on top of the shadow
/// stack (below `top`), if any, every frame above it closed as gone. Frames share a key only
/// where loops of one function are timed along call paths (all keyed by the function's entry
/// `rsp` less 8, `gsh_rt_path_loop_enter`): a loop nested in another is above it, and left
/// without its own exit (a `break` out of both) it is gone when the outer one exits or is
/// entered again. Otherwise the top frame is the one, or none is.
#[inline(always)]
pub fn same_frame<const TSC: bool>(
    b: Block,
    h: &ThreadHeader,
    top: u32,
    rsp: u64,
    slot: u32,
    now: &mut Now<TSC>,
) -> Option<u32> {
    let mut i = top;
    while i > 0 {
        // SAFETY: `i - 1 < top <= shadow_capacity`; written by this thread.
        let e = unsafe { *shadow(b, i - 1) };
        if e.rsp != rsp {
            return None;
        }
        if e.slot == slot {
            break;
        }
        i -= 1;
    }
    let found = i.checked_sub(1)?;
    for k in (i..top).rev() {
        // SAFETY: as above.
        let e = unsafe { *shadow(b, k) };
        h.shadow_top.store(k, Relaxed);
        close_gone(b, h, &e, now);
    }
    Some(found)
}

/// Pushes an activation; false (and counted as untimed) if the shadow stack is full.
#[inline(always)]
pub fn push(b: Block, h: &ThreadHeader, top: u32, e: ShadowEntry) -> bool {
    if top >= h.shadow_capacity {
        h.shadow_overflow
            .store(h.shadow_overflow.load(Relaxed) + 1, Relaxed);
        bump(&h.untimed, 1);
        return false;
    }
    // SAFETY: `top < shadow_capacity`.
    unsafe { shadow(b, top).write(e) };
    h.shadow_top.store(top + 1, Relaxed);
    true
}

/// Counts one call of `slot` on the calling thread.
#[no_mangle]
pub extern "C" fn gsh_rt_count(slot: u32) {
    let Some(b) = block() else { return };
    let h = b.header();
    if slot >= h.max_slots {
        bump(&h.bad_slots, 1);
        return;
    }
    bump(&self::slot(b, slot).count, 1);
}

#[inline(always)]
fn enter<const TSC: bool>(slot: u32, rsp: u64, kind: u32) {
    let Some(b) = block_with::<TSC>(slot) else {
        return;
    };
    let h = b.header();
    let mut now = Now::<TSC>::default();
    let top = pop_gone(b, h, rsp, true, &mut now);
    let rec = self::slot(b, slot);
    bump(&rec.count, 1);
    let e = ShadowEntry {
        rsp,
        start: 0,
        slot,
        kind,
        record: 0,
        reserved: 0,
    };
    if push(b, h, top, e) {
        let depth = rec.depth.load(Relaxed);
        if depth == 0 {
            rec.entry_ns.store(now.for_kind(kind), Relaxed);
        }
        rec.depth.store(depth.wrapping_add(1), Relaxed);
    }
}

/// Closes the activation of `slot` whose entry had stack pointer `rsp`, after popping deeper
/// abandoned ones. Shared by the timers and the path profile.
#[inline(always)]
pub fn exit<const TSC: bool>(slot: u32, rsp: u64) {
    let Some(b) = Block::from_trusted(tls::block()) else {
        return;
    };
    let h = b.header();
    let mut now = Now::<TSC>::default();
    let top = pop_gone(b, h, rsp, false, &mut now);
    if let Some(i) = same_frame(b, h, top, rsp, slot, &mut now) {
        // SAFETY: `i < top <= shadow_capacity`; written by this thread.
        let e = unsafe { *shadow(b, i) };
        h.shadow_top.store(i, Relaxed);
        close(b, h, &e, &mut now);
        return;
    }
    let over = h.shadow_overflow.load(Relaxed);
    if over > 0 {
        h.shadow_overflow.store(over - 1, Relaxed);
    } else {
        bump(&h.unmatched_exits, 1);
    }
}

/// Counts a call of `slot` and opens a wall-clock activation. `rsp` is the stack pointer at the
/// function's first instruction (pointing at its return address).
#[no_mangle]
pub extern "C" fn gsh_rt_enter(slot: u32, rsp: u64) {
    enter::<false>(slot, rsp, FRAME_WALL);
}

/// Closes the activation opened by `gsh_rt_enter(slot, rsp)`; `rsp` is the stack pointer at the
/// `ret` (the same value as at entry). Inclusive time goes to the outermost activation only.
#[no_mangle]
pub extern "C" fn gsh_rt_exit(slot: u32, rsp: u64) {
    exit::<false>(slot, rsp);
}

/// As `gsh_rt_enter`, timing thread CPU time (`CLOCK_THREAD_CPUTIME_ID`).
#[no_mangle]
pub extern "C" fn gsh_rt_enter_cpu(slot: u32, rsp: u64) {
    enter::<false>(slot, rsp, FRAME_CPU);
}

/// As `gsh_rt_exit`; the entry remembers which clock it used, so this is the same function.
#[no_mangle]
pub extern "C" fn gsh_rt_exit_cpu(slot: u32, rsp: u64) {
    exit::<false>(slot, rsp);
}

/// As `gsh_rt_enter`, reading the wall clock with `rdtsc` only and never calling out of the
/// library, so a trampoline need save only the registers `engine::callee` finds it writes. Use
/// only when the root's `clock_kind` is 1 (rdtsc), and only once the thread has its block
/// (`gsh_rt_thread`): without one the event is dropped.
#[no_mangle]
pub extern "C" fn gsh_rt_enter_tsc(slot: u32, rsp: u64) {
    enter::<true>(slot, rsp, FRAME_WALL);
}

/// As `gsh_rt_exit`, under the conditions of `gsh_rt_enter_tsc`. Closing a CPU-time frame
/// found abandoned reads the thread CPU clock with a raw system call.
#[no_mangle]
pub extern "C" fn gsh_rt_exit_tsc(slot: u32, rsp: u64) {
    exit::<true>(slot, rsp);
}

/// As `gsh_rt_enter_cpu`, under the conditions of `gsh_rt_enter_tsc`: the thread CPU clock is
/// read with a raw `syscall` (which the kernel makes preserve all but `rax`, `rcx`, `r11`).
#[no_mangle]
pub extern "C" fn gsh_rt_enter_cpu_tsc(slot: u32, rsp: u64) {
    enter::<true>(slot, rsp, FRAME_CPU);
}

/// As `gsh_rt_exit_cpu`, under the conditions of `gsh_rt_enter_tsc` (the same function as
/// `gsh_rt_exit_tsc`).
#[no_mangle]
pub extern "C" fn gsh_rt_exit_cpu_tsc(slot: u32, rsp: u64) {
    exit::<true>(slot, rsp);
}
