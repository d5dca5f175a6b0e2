//! Taking gsh's runtime library out of a process gsh lets go, so a detach leaves the process as
//! it was where nothing is in use: once the probes are gone and the files' code is back, a
//! runtime (this session's or an earlier one's) that no thread is in is unloaded with
//! `dlclose`, its destructor first told to give back what the runtime made in the process (its
//! pthread key, counter arena and memfd, unwind tables; `rt/src/unload.rs`). The values gsh
//! read are already kept; the arena's memfd stays readable through gsh's own descriptor.
//!
//! The runtime stays, with a note saying why, when a thread is still inside its code (by the
//! rule for freeing a trampoline: a thread's `rip` or other register is in it, or a frame of the
//! thread's call chain returns into it; see [`Chains`]), when it predates unloading (no
//! `gsh_rt_unloading`), or when the program itself needs it (a file `save`d with measures
//! loads it as a `DT_NEEDED` library, which `ld.so` keeps).
//!
//! The call chain is gsh's unwinder's, over the CFI of the modules the session knows, walked
//! from where the thread is (a `rip` in a trampoline is not mapped to the instruction it
//! stands for: the thread is in gsh's code). Only a walk that reaches the thread's outermost
//! frame by CFI alone, through no runtime's code, is taken as the whole chain: then the words
//! its frames keep and never wrote since (an old return address into a trampoline left in a
//! buffer by a call that returned long ago) do not keep anything. Where the walk cannot
//! finish, every word of the top of the thread's stack that points into gsh's memory keeps it,
//! as a return address might.

use std::path::Path;

use gsh_rt_abi::exports;

use crate::process::{CallChains, MappedModule, Process, ProcessError};
use crate::unwind::{FoundBy, Frame, Unwinder};

use super::Live;

/// Whether `m` is a gsh runtime library, by its file's name (`libgsh_rt.so`).
pub fn is_runtime(m: &MappedModule) -> bool {
    m.path
        .file_name()
        .is_some_and(|n| n.to_string_lossy().starts_with("libgsh_rt"))
}

/// The runtimes' text in the process, as `(start, end)`.
fn runtime_text(p: &mut Process) -> Result<Vec<(u64, u64)>, ProcessError> {
    let mut ranges = Vec::new();
    for m in p.modules()?.into_iter().filter(is_runtime) {
        ranges.extend(m.text.iter().map(|r| (r.start, r.end)));
    }
    Ok(ranges)
}

/// The deepest call chain [`Chains`] walks; a deeper one is searched conservatively.
const MAX_CHAIN: usize = 1024;

/// The threads' call chains for the test of whether a thread is in gsh's memory
/// ([`CallChains`], through [`Chains::of`]): each stopped thread walked by gsh's unwinder over
/// the modules `live` knows, from its own registers. A chain is given only when the walk
/// reached the thread's outermost frame with every step by CFI (a signal frame's included,
/// whose interrupted `rip` is then a pc of the chain) and no pc in a runtime's text: a frame
/// pointer, a stack scan, a pc in no module (a trampoline), the depth limit or unreadable
/// memory leave the thread to the conservative search, and so does a thread in the runtime's
/// code, where nothing is assumed about what it holds.
pub(super) struct Chains<'a> {
    unwinder: Unwinder<'a>,
    /// The runtimes' text, as `(start, end)`.
    runtimes: Vec<(u64, u64)>,
}

impl<'a> Chains<'a> {
    /// The chains over the modules `live` knows, their CFI indexed now: made while the
    /// process runs, the pauses that test it do not wait for a large library's index.
    pub(super) fn new(live: &'a Live, p: &mut Process) -> Result<Chains<'a>, ProcessError> {
        let unwinder = super::frames::unwinder(live);
        unwinder.index_all();
        Ok(Chains {
            unwinder,
            runtimes: runtime_text(p)?,
        })
    }

    /// The call chain of the stopped thread of `p` with registers `r`, when whole.
    pub(super) fn of(&self, p: &Process, r: &libc::user_regs_struct) -> Option<Vec<u64>> {
        let top = super::frames::thread_regs(r);
        let (frames, outermost) =
            self.unwinder
                .walk_to_outermost(&super::frames::proc_memory(p), top, MAX_CHAIN);
        whole_chain(&frames, outermost, &self.runtimes)
            .then(|| frames.iter().map(|f| f.pc).collect())
    }
}

/// Whether a walk's `frames` are a thread's whole call chain, outside `runtimes`: it reached
/// the `outermost` frame, every frame found by CFI (or the top one, where it started).
fn whole_chain(frames: &[Frame], outermost: bool, runtimes: &[(u64, u64)]) -> bool {
    outermost
        && frames
            .iter()
            .all(|f| matches!(f.how, FoundBy::Top | FoundBy::Cfi | FoundBy::SignalFrame))
        && !frames
            .iter()
            .any(|f| runtimes.iter().any(|&(lo, hi)| (lo..hi).contains(&f.pc)))
}

/// Whether a stopped thread is in gsh's code, or returns into it: a pool (a trampoline, the
/// injection stub) or a runtime's text, the threads' call chains found by `chains`
/// ([`Chains`]). Trampolines use the runtime (its calls, its thread blocks in the arena),
/// so the runtime goes only when no thread is in either.
pub fn gsh_code_in_use(p: &mut Process, chains: &mut CallChains<'_>) -> Result<bool, ProcessError> {
    let mut ranges = p.pool_ranges();
    ranges.extend(runtime_text(p)?);
    Ok(p.in_use(&ranges, chains)?.into_iter().any(|b| b))
}

/// Unloads every gsh runtime the process maps that nothing uses (the threads' call chains
/// found by `chains`); call it with no probe left and the files' code back, every thread
/// stopped. Returns a note for each runtime that stays, with why (an injected call that could
/// not run is one reason, not an error: the detach goes on without it).
pub fn unload_runtimes(
    p: &mut Process,
    chains: &mut CallChains<'_>,
) -> Result<Vec<String>, ProcessError> {
    let mut notes = Vec::new();
    for m in p.modules()?.into_iter().filter(is_runtime) {
        let why = match unload(p, &m, chains) {
            Ok(why) => why,
            Err(e) => Some(e.to_string()),
        };
        if let Some(why) = why {
            notes.push(format!(
                "note: gsh's runtime ({}) stays loaded in process {}: {why}",
                m.path.display(),
                p.pid()
            ));
        }
    }
    Ok(notes)
}

/// Unloads runtime `m`; returns why not when it stays.
fn unload(
    p: &mut Process,
    m: &MappedModule,
    chains: &mut CallChains<'_>,
) -> Result<Option<String>, ProcessError> {
    let mut ranges = p.pool_ranges();
    ranges.extend(m.text.iter().map(|r| (r.start, r.end)));
    if p.in_use(&ranges, chains)?.into_iter().any(|b| b) {
        return Ok(Some(
            "a thread is still inside its code or a trampoline that uses it (or returns into \
             one); its memory stays as well"
                .into(),
        ));
    }
    let Some(unloading) = export(&m.path, exports::UNLOADING) else {
        return Ok(Some(format!(
            "it is an older runtime, without `{}` to give its memory back",
            exports::UNLOADING
        )));
    };
    let unloading = unloading.wrapping_add(m.bias);
    p.call(unloading, &[1])?;
    let gone = p.unload_library(&m.path);
    if matches!(gone, Ok(true)) {
        return Ok(None);
    }
    // Still loaded: its destructor must not give anything back at the process's exit.
    p.call(unloading, &[0])?;
    gone?;
    Ok(Some(
        "the program itself needs it (a file saved with measures loads it at start-up)".into(),
    ))
}

/// The link address of the dynamic symbol `name` in the ELF file at `path`.
fn export(path: &Path, name: &str) -> Option<u64> {
    use object::{Object, ObjectSymbol};
    let data = std::fs::read(path).ok()?;
    let file = object::File::parse(&*data).ok()?;
    let addr = file
        .dynamic_symbols()
        .find(|s| s.is_definition() && s.name() == Ok(name))
        .map(|s| s.address());
    addr
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::unwind::Regs;

    fn frame(pc: u64, how: FoundBy) -> Frame {
        Frame {
            pc,
            cfa: 0,
            regs: Regs::default(),
            how,
        }
    }

    #[test]
    fn only_a_walk_to_the_outermost_frame_by_cfi_outside_the_runtime_is_a_whole_chain() {
        let runtimes = [(0x7f00_0000, 0x7f10_0000)];
        let chain = |hows: &[(u64, FoundBy)]| -> Vec<Frame> {
            hows.iter().map(|&(pc, how)| frame(pc, how)).collect()
        };
        let cfi = chain(&[
            (0x7e00_1000, FoundBy::Top),
            (0x5555_1000, FoundBy::Cfi),
            (0x7e00_2000, FoundBy::Cfi),
        ]);
        assert!(whole_chain(&cfi, true, &runtimes));
        assert!(
            !whole_chain(&cfi, false, &runtimes),
            "not to the outermost frame"
        );
        let signal = chain(&[
            (0x7e00_1000, FoundBy::Top),
            (0x7e00_3000, FoundBy::Cfi),
            (0x5555_1000, FoundBy::SignalFrame),
            (0x7e00_2000, FoundBy::Cfi),
        ]);
        assert!(
            whole_chain(&signal, true, &runtimes),
            "through a signal frame"
        );
        for how in [FoundBy::FramePointer, FoundBy::Scan] {
            let guessed = chain(&[
                (0x7e00_1000, FoundBy::Top),
                (0x5555_1000, how),
                (0x7e00_2000, FoundBy::Cfi),
            ]);
            assert!(!whole_chain(&guessed, true, &runtimes), "{how:?}");
        }
        let in_runtime = chain(&[
            (0x7e00_1000, FoundBy::Top),
            (0x7f00_1000, FoundBy::Cfi),
            (0x7e00_2000, FoundBy::Cfi),
        ]);
        assert!(
            !whole_chain(&in_runtime, true, &runtimes),
            "through the runtime"
        );
    }
}
