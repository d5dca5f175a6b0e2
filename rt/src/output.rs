//! The exit writer for rewritten binaries, where no mutator is around to read memory: on
//! process exit (a `.fini_array` entry) the whole root is written as JSON to the file named by
//! `gsh_rt_set_output` or, failing that, the `GSH_RT_OUTPUT` environment variable.
//!
//! The format (`rt/LAYOUT.md` has an example) is one object: `abi`, `clock`, `ns_per_tick`,
//! `slots` (totals over all threads, non-zero slots only: `slot`, `count`, `ns`), and `threads`
//! (per thread block: `tid` of the last thread that had it, `alive`, the same `slots`, `paths` with `slot`, `count`, `ns`, `ras` as
//! hex strings innermost first, `other`, and the anomaly counters). Times include activations
//! still open on the exiting thread (e.g. `main`, which never returns when the program calls
//! `exit`), credited up to the moment of writing. Then `meta`, the JSON text `save` stored in
//! the measuring descriptor ([`crate::descriptor`]; `null` without one), and `modules`, the
//! loaded objects with their load bias, so return addresses can be symbolised later.
//!
//! The process that loaded the runtime writes the named file; a forked child that exits
//! writes `FILE.PID` instead of overwriting its parent's. This code allocates freely: it runs
//! once, outside any instrumented function.

use crate::events::Now;
use crate::layout::*;
use crate::thread::{self, Block, GSH_RT_ROOT};
use crate::{descriptor, path, tls};
use std::fmt::Write;
use std::sync::atomic::Ordering::{Acquire, Relaxed};
use std::sync::atomic::{AtomicI32, AtomicU8};

const PATH_MAX: usize = 4096;
/// The output path, NUL-terminated; empty when unset. Bytes are atomics so setting it needs no
/// lock and no allocation.
static OUTPUT: [AtomicU8; PATH_MAX] = [const { AtomicU8::new(0) }; PATH_MAX];

/// Sets the file the exit writer writes to. Returns 0, or -1 if the path is null or too long.
///
/// # Safety
/// `path` must be a NUL-terminated string (or null).
#[no_mangle]
pub unsafe extern "C" fn gsh_rt_set_output(path: *const libc::c_char) -> i32 {
    if path.is_null() {
        return -1;
    }
    // SAFETY: the caller passes a NUL-terminated string.
    let bytes = unsafe { std::ffi::CStr::from_ptr(path) }.to_bytes();
    if bytes.len() >= PATH_MAX {
        return -1;
    }
    for (i, &b) in bytes.iter().chain(std::iter::once(&0)).enumerate() {
        OUTPUT[i].store(b, Relaxed);
    }
    0
}

/// Writes everything to `path` now. Returns 0 on success, -1 on failure.
///
/// # Safety
/// `path` must be a NUL-terminated string (or null).
#[no_mangle]
pub unsafe extern "C" fn gsh_rt_write(path: *const libc::c_char) -> i32 {
    if path.is_null() {
        return -1;
    }
    // SAFETY: the caller passes a NUL-terminated string.
    let p = unsafe { std::ffi::CStr::from_ptr(path) };
    use std::os::unix::ffi::OsStrExt;
    match std::fs::write(std::ffi::OsStr::from_bytes(p.to_bytes()), render()) {
        Ok(()) => 0,
        Err(_) => -1,
    }
}

/// The configured output path, from `gsh_rt_set_output` or `GSH_RT_OUTPUT`.
fn output_path() -> Option<std::ffi::CString> {
    let bytes: Vec<u8> = OUTPUT
        .iter()
        .map(|b| b.load(Relaxed))
        .take_while(|&b| b != 0)
        .collect();
    if !bytes.is_empty() {
        return std::ffi::CString::new(bytes).ok();
    }
    let env = std::env::var_os("GSH_RT_OUTPUT")?;
    use std::os::unix::ffi::OsStringExt;
    std::ffi::CString::new(env.into_vec()).ok()
}

/// The process that loaded the runtime (0 until its constructor ran).
static LOAD_PID: AtomicI32 = AtomicI32::new(0);

extern "C" fn on_load() {
    // SAFETY: getpid has no preconditions.
    LOAD_PID.store(unsafe { libc::getpid() }, Relaxed);
}

#[used]
#[link_section = ".init_array"]
static ON_LOAD: extern "C" fn() = on_load;

extern "C" fn on_exit() {
    let Some(p) = output_path() else {
        return;
    };
    // SAFETY: getpid has no preconditions.
    let pid = unsafe { libc::getpid() };
    let mut bytes = p.into_bytes();
    if LOAD_PID.load(Relaxed) != pid {
        bytes.extend_from_slice(format!(".{pid}").as_bytes());
    }
    use std::os::unix::ffi::OsStrExt;
    let path = std::ffi::OsStr::from_bytes(&bytes);
    if let Err(e) = std::fs::write(path, render()) {
        // The program's own output is not ours to change, but a lost result must be said.
        eprintln!(
            "gsh-rt: cannot write the results to {}: {e}",
            path.to_string_lossy()
        );
    }
}

#[used]
#[link_section = ".fini_array"]
static ON_EXIT: extern "C" fn() = on_exit;

/// Extra nanoseconds per slot and per path record.
type OpenCredits = (Vec<(u32, u64)>, Vec<(u32, u64)>);

/// Credits of activations still open on the calling thread: (slot, ns) and (record, ns).
fn open_credits(b: Block) -> OpenCredits {
    let (mut slots, mut paths) = (Vec::new(), Vec::new());
    let h = b.header();
    let mut now = Now::<false>::default();
    let top = h.shadow_top.load(Relaxed).min(h.shadow_capacity);
    let off = GSH_RT_ROOT.shadow_offset.load(Relaxed) as usize;
    for i in 0..top as usize {
        // SAFETY: entries below the top were written by this (the calling) thread.
        let e = unsafe {
            *b.as_ptr()
                .add(off + i * std::mem::size_of::<ShadowEntry>())
                .cast::<ShadowEntry>()
        };
        if e.kind == FRAME_DEAD {
            continue;
        }
        let t = now.for_kind(e.kind);
        if e.kind == FRAME_WALL || e.kind == FRAME_CPU {
            // Only the outermost open activation of a slot carries its time.
            if !slots.iter().any(|&(s, _)| s == e.slot) {
                let entry = crate::events::slot(b, e.slot).entry_ns.load(Relaxed);
                slots.push((e.slot, t.saturating_sub(entry)));
            }
        } else if e.record == RECORD_OTHER && e.slot < h.max_slots {
            // Beyond the path table: the slot's own record holds it (`path::path_enter`).
            slots.push((e.slot, t.saturating_sub(e.start)));
        } else {
            paths.push((e.record, t.saturating_sub(e.start)));
        }
    }
    (slots, paths)
}

/// Renders the JSON document.
pub fn render() -> String {
    let r = &GSH_RT_ROOT;
    let mut out = String::new();
    let clock = if r.clock_kind.load(Relaxed) == CLOCK_RDTSC {
        "rdtsc"
    } else {
        "monotonic"
    };
    let ns_per_tick = r.tsc_mult.load(Relaxed) as f64 / 4294967296.0;
    let _ = write!(
        out,
        "{{\"abi\":{},\"clock\":\"{clock}\",\"ns_per_tick\":{ns_per_tick}",
        r.abi_version
    );
    // A saved file uses only its descriptor's slots: scanning the rest of every thread's slot
    // array would fault in zero pages by the hundred.
    let max_slots = descriptor::slots().map_or(r.max_slots.load(Relaxed), |s| {
        s.min(r.max_slots.load(Relaxed))
    }) as usize;
    let mut totals = vec![(0u64, 0u64); max_slots];
    let mut threads = String::new();
    let me = Block::from_trusted(tls::block());
    for b in thread::blocks() {
        let h = b.header();
        let (open_slots, open_paths) = if Some(b) == me {
            open_credits(b)
        } else {
            Default::default()
        };
        let alive = h.state.load(Relaxed) == THREAD_LIVE;
        if !threads.is_empty() {
            threads.push(',');
        }
        let _ = write!(threads, "{{\"tid\":{},\"alive\":{alive},\"slots\":[", h.tid);
        let mut first = true;
        for (i, total) in totals.iter_mut().enumerate().take(h.max_slots as usize) {
            let rec = crate::events::slot(b, i as u32);
            let count = rec.count.load(Relaxed);
            let extra: u64 = open_slots
                .iter()
                .filter(|o| o.0 as usize == i)
                .map(|o| o.1)
                .sum();
            let ns = rec.total_ns.load(Relaxed) + extra;
            if count == 0 && ns == 0 {
                continue;
            }
            total.0 += count;
            total.1 += ns;
            let sep = if first { "" } else { "," };
            first = false;
            let _ = write!(
                threads,
                "{sep}{{\"slot\":{i},\"count\":{count},\"ns\":{ns}}}"
            );
        }
        threads.push_str("],\"paths\":[");
        let mut first = true;
        // No record claimed: skip the table (reading it would fault in every page).
        let records = if h.path_used.load(Relaxed) == 0 {
            0
        } else {
            h.path_mask + 1
        };
        for i in 0..records {
            let rec = path::record(b, i);
            if rec.hash.load(Acquire) == 0 {
                continue;
            }
            let extra: u64 = open_paths.iter().filter(|o| o.0 == i).map(|o| o.1).sum();
            let sep = if first { "" } else { "," };
            first = false;
            let _ = write!(
                threads,
                "{sep}{{\"slot\":{},\"count\":{},\"ns\":{},\"ras\":[",
                rec.slot,
                rec.count.load(Relaxed),
                rec.total_ns.load(Relaxed) + extra
            );
            for (k, ra) in rec.ras[..(rec.depth as usize).min(MAX_PATH_DEPTH)]
                .iter()
                .enumerate()
            {
                let sep = if k == 0 { "" } else { "," };
                let _ = write!(threads, "{sep}\"{ra:#x}\"");
            }
            threads.push_str("]}");
        }
        let other_extra: u64 = open_paths
            .iter()
            .filter(|o| o.0 == RECORD_OTHER)
            .map(|o| o.1)
            .sum();
        let _ = write!(
            threads,
            "],\"other\":{{\"count\":{},\"ns\":{}}},\"abandoned\":{},\"unmatched\":{},\"untimed\":{},\"bad_slots\":{}}}",
            h.other_count.load(Relaxed),
            h.other_ns.load(Relaxed) + other_extra,
            h.abandoned_frames.load(Relaxed),
            h.unmatched_exits.load(Relaxed),
            h.untimed.load(Relaxed),
            h.bad_slots.load(Relaxed),
        );
    }
    out.push_str(",\"slots\":[");
    let mut first = true;
    for (i, (count, ns)) in totals.iter().enumerate() {
        if *count == 0 && *ns == 0 {
            continue;
        }
        let sep = if first { "" } else { "," };
        first = false;
        let _ = write!(out, "{sep}{{\"slot\":{i},\"count\":{count},\"ns\":{ns}}}");
    }
    let _ = write!(out, "],\"threads\":[{threads}]");
    let coverage = descriptor::coverage();
    if coverage.iter().any(|c| c.load(Relaxed) != 0) {
        out.push_str(",\"coverage\":[");
        let mut first = true;
        for (i, c) in coverage.iter().enumerate() {
            let c = c.load(Relaxed);
            if c == 0 {
                continue;
            }
            let sep = if first { "" } else { "," };
            first = false;
            let _ = write!(out, "{sep}[{i},{c}]");
        }
        out.push(']');
    }
    let _ = write!(out, ",\"meta\":{}", descriptor::meta().unwrap_or("null"));
    out.push_str(",\"modules\":[");
    for (i, (name, base)) in descriptor::modules().iter().enumerate() {
        let sep = if i == 0 { "" } else { "," };
        let _ = write!(
            out,
            "{sep}{{\"name\":\"{}\",\"base\":\"{base:#x}\"}}",
            escape(name)
        );
    }
    out.push_str("]}\n");
    out
}

/// `s` as the inside of a JSON string.
fn escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c if (c as u32) < 0x20 => {
                let _ = write!(out, "\\u{:04x}", c as u32);
            }
            c => out.push(c),
        }
    }
    out
}
