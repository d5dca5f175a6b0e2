//! What differs between a process's code and its files: the text of every module, compared
//! byte for byte with the file it was mapped from. A gsh killed while attached (SIGKILL, a
//! crash) leaves its changes behind: the `int3` at the dynamic linker's `r_brk` and at
//! breakpoints, and the jumps into trampolines. Those are recognised as gsh's (an `int3` over
//! another byte; a `jmp` into an anonymous executable mapping, gsh's pools, or to such a
//! jump) and can be put back from the files; anything else is only reported.

use std::io::Read;
use std::os::unix::fs::FileExt;
use std::path::PathBuf;

use super::control::Process;
use super::error::ProcessError;
use super::maps::{self, Mapping};

/// How much text is compared at a time.
const CHUNK: usize = 1 << 20;
/// Differences closer than this are one change (a jump's rel32 often shares bytes with the
/// original instructions).
const JOIN: u64 = 8;

/// What a change looks like.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ChangeKind {
    /// An `int3` where the file has another instruction (a breakpoint or `r_brk`'s hook).
    Breakpoint,
    /// A jump into gsh's trampoline memory (or to such a jump in padding).
    Jump,
    /// Anything else: not gsh's doing, as far as it can tell.
    Other,
}

impl ChangeKind {
    /// True for the changes gsh makes.
    pub fn is_gsh(self) -> bool {
        !matches!(self, ChangeKind::Other)
    }
}

/// One run of text bytes that differ from the file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TextChange {
    /// The module's file.
    pub path: PathBuf,
    /// Runtime address of the first differing byte.
    pub addr: u64,
    /// The file's bytes there.
    pub file: Vec<u8>,
    /// The process's bytes there.
    pub now: Vec<u8>,
    /// Whose change it looks like.
    pub kind: ChangeKind,
}

impl Process {
    /// Every run of bytes in the process's module text that differs from the module's file,
    /// classified. Our own rendezvous `int3` is not a difference (detaching removes it).
    pub fn text_changes(&mut self) -> Result<Vec<TextChange>, ProcessError> {
        self.alive("comparing code with the files")?;
        let all = maps::read_maps(self.pid)?;
        let mut out = Vec::new();
        for m in all
            .iter()
            .filter(|m| m.exec && maps::may_be_module(m) && m.end > m.start)
        {
            self.compare_mapping(m, &all, &mut out)?;
        }
        // Unless an earlier gsh left it: then it is reported (and `restore_text` skips it).
        if let Some(rv) = self.rendezvous.as_ref().filter(|rv| !rv.inherited) {
            let (at, len) = (rv.address(), rv.len() as u64);
            out.retain(|c| !(c.addr >= at && c.addr < at + len));
        }
        Ok(out)
    }

    fn compare_mapping(
        &self,
        m: &Mapping,
        all: &[Mapping],
        out: &mut Vec<TextChange>,
    ) -> Result<(), ProcessError> {
        let io = |e: std::io::Error| ProcessError::Io {
            path: m.name.clone().into(),
            detail: e.to_string(),
        };
        let mut file = std::fs::File::open(&m.name).map_err(io)?;
        std::io::Seek::seek(&mut file, std::io::SeekFrom::Start(m.offset)).map_err(io)?;
        let len = (m.end - m.start) as usize;
        let mut runs: Vec<(u64, u64)> = Vec::new();
        let mut done = 0usize;
        while done < len {
            let want = CHUNK.min(len - done);
            let mut from_file = Vec::with_capacity(want);
            (&mut file)
                .take(want as u64)
                .read_to_end(&mut from_file)
                .map_err(io)?;
            if from_file.is_empty() {
                // The mapping runs past the end of the file (zero fill): nothing to compare.
                break;
            }
            let at = m.start + done as u64;
            let mem = self.mem.read(at, from_file.len())?;
            for (i, (a, b)) in mem.iter().zip(&from_file).enumerate() {
                if a != b {
                    let addr = at + i as u64;
                    match runs.last_mut() {
                        Some((_, end)) if addr < *end + JOIN => *end = addr + 1,
                        _ => runs.push((addr, addr + 1)),
                    }
                }
            }
            done += from_file.len();
        }
        for (start, end) in runs {
            let now = self.mem.read(start, (end - start) as usize)?;
            let offset = m.offset + (start - m.start);
            let mut file_bytes = vec![0u8; now.len()];
            file.read_exact_at(&mut file_bytes, offset).map_err(io)?;
            let kind = classify(self, start, &now, all);
            out.push(TextChange {
                path: m.name.clone().into(),
                addr: start,
                file: file_bytes,
                now,
                kind,
            });
        }
        Ok(())
    }

    /// Takes out the dynamic linker hook before detaching (which would), so the text can be
    /// compared with the files one last time. Every thread must be stopped.
    pub fn remove_rendezvous(&mut self) -> Result<(), ProcessError> {
        if let Some(rv) = self.rendezvous.take() {
            rv.remove_from(&self.mem)?;
        }
        Ok(())
    }

    /// The bytes the file mapped at `addr` has there, when a module's file is mapped there.
    pub(crate) fn file_bytes_at(&self, addr: u64, len: usize) -> Option<Vec<u8>> {
        let all = maps::read_maps(self.pid).ok()?;
        let m = all
            .iter()
            .find(|m| (m.start..m.end).contains(&addr) && maps::may_be_module(m))?;
        let file = std::fs::File::open(&m.name).ok()?;
        let mut buf = vec![0u8; len];
        file.read_exact_at(&mut buf, m.offset + (addr - m.start))
            .ok()?;
        Some(buf)
    }

    /// Puts the file's bytes back over `changes`; every thread must be stopped. Our rendezvous
    /// `int3` stays (detaching removes it, with the file's byte).
    pub fn restore_text(&mut self, changes: &[TextChange]) -> Result<(), ProcessError> {
        let hook = self
            .rendezvous
            .as_ref()
            .map(|rv| rv.address()..rv.address() + rv.len() as u64);
        let in_hook = |a: u64| hook.as_ref().is_some_and(|h| h.contains(&a));
        for c in changes {
            // Around the hook, which may sit inside a change.
            let mut i = 0;
            while i < c.file.len() {
                if in_hook(c.addr + i as u64) {
                    i += 1;
                    continue;
                }
                let start = i;
                while i < c.file.len() && !in_hook(c.addr + i as u64) {
                    i += 1;
                }
                self.write(c.addr + start as u64, &c.file[start..i])?;
            }
        }
        Ok(())
    }
}

/// Whether the bytes `now` at `addr` look like gsh's doing.
fn classify(p: &Process, addr: u64, now: &[u8], all: &[Mapping]) -> ChangeKind {
    let in_pool = |target: u64| {
        all.iter()
            .any(|m| m.exec && m.name.is_empty() && (m.start..m.end).contains(&target))
    };
    let jump_at = |at: u64, bytes: &[u8]| -> Option<u64> {
        match bytes {
            [0xe9, a, b, c, d, ..] => {
                Some((at as i64 + 5 + i64::from(i32::from_le_bytes([*a, *b, *c, *d]))) as u64)
            }
            [0xeb, d, ..] => Some((at as i64 + 2 + i64::from(*d as i8)) as u64),
            _ => None,
        }
    };
    // The jump may start a little before the first differing byte (its opcode equal to an
    // original byte): look at the few bytes before too.
    for back in 0..4u64 {
        let at = addr.saturating_sub(back);
        let Ok(bytes) = p.mem.read(at, 5 + back as usize) else {
            continue;
        };
        if let Some(target) = jump_at(at, &bytes) {
            if in_pool(target) {
                return ChangeKind::Jump;
            }
            // A short jump to a pun: a jump into a pool in nearby padding.
            if let Ok(pun) = p.mem.read(target, 5) {
                if jump_at(target, &pun).is_some_and(in_pool) {
                    return ChangeKind::Jump;
                }
            }
        }
    }
    if now.first() == Some(&0xcc) {
        return ChangeKind::Breakpoint;
    }
    ChangeKind::Other
}
