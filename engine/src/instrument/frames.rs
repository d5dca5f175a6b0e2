//! The stack of a stopped thread for the shell's `where`/`up`/`down` (and the frames `print`
//! and `info locals` look into): the unwinder over the process's memory and the modules the
//! live process has loaded, each frame named as `disas` names addresses, with the source line
//! when there is debug information. A frame in a trampoline is shown at the original
//! instruction it stands for. The shell only prints what this returns.

#![warn(missing_docs)]

use crate::addr::LinkAddr;
use crate::process::Process;
use crate::unwind::{Frame, Pages, Regs, UnwindModule, Unwinder, PAGE};

use super::Live;

/// The most frames [`walk`] returns.
pub const MAX_FRAMES: usize = 256;

/// A stopped process's memory as the unwinder reads it, a page at a time ([`Pages`]).
pub(super) fn proc_memory(p: &Process) -> Pages<impl Fn(u64) -> Option<Vec<u8>> + '_> {
    Pages::new(move |page| p.read(page, PAGE as usize).ok())
}

pub(super) fn unwinder(live: &Live) -> Unwinder<'_> {
    let modules: Vec<UnwindModule<'_>> = live
        .loaded()
        .map(|(m, bias)| UnwindModule {
            binary: &m.binary,
            bias,
        })
        .collect();
    Unwinder::new(modules)
}

/// The registers a walk starts from. A thread stopped inside a trampoline is unwound from
/// the instruction it stands for: the trampoline's own code has no call-frame information.
pub fn top_regs(live: &Live, r: &libc::user_regs_struct) -> Regs {
    let rip = live.origin(r.rip).map_or(r.rip, |(_, a)| a);
    Regs {
        rip,
        ..thread_regs(r)
    }
}

/// A stopped thread's registers as the unwinder takes them, `rip` where the thread is.
pub fn thread_regs(r: &libc::user_regs_struct) -> Regs {
    Regs {
        rip: r.rip,
        rsp: r.rsp,
        rbp: r.rbp,
        rbx: r.rbx,
        r12: r.r12,
        r13: r.r13,
        r14: r.r14,
        r15: r.r15,
        rax: r.rax,
        rdx: r.rdx,
        rcx: r.rcx,
        rsi: r.rsi,
        rdi: r.rdi,
        r8: r.r8,
        r9: r.r9,
        r10: r.r10,
        r11: r.r11,
        ..Regs::default()
    }
}

/// The frames of the thread with registers `r` up to frame `n + 1` (the caller of frame
/// `n`), innermost first, with their registers and CFAs as the unwinder recovered them.
pub fn frames_to(live: &Live, p: &Process, r: &libc::user_regs_struct, n: usize) -> Vec<Frame> {
    unwinder(live).walk(&proc_memory(p), top_regs(live, r), n + 3)
}

/// (pc, one-line description) per frame of the thread with registers `r`, innermost first,
/// at most [`MAX_FRAMES`].
pub fn walk(live: &Live, p: &Process, r: &libc::user_regs_struct) -> Vec<(u64, String)> {
    unwinder(live)
        .walk(&proc_memory(p), top_regs(live, r), MAX_FRAMES)
        .iter()
        .map(|f| {
            // A return address is named by its call instruction's function and line.
            let look = f.lookup_pc();
            let mut text = where_is(live, look);
            if look != f.pc {
                text = text.replace(&format!("({look:#x})"), &format!("({:#x})", f.pc));
            }
            if let Some(src) = source_line(live, look) {
                text.push_str(&format!(" at {src}"));
            }
            (f.pc, text)
        })
        .collect()
}

/// Address `rip` of the live process named as `disas` names it (`func+off (addr)`), at the
/// instruction it stands for when it is in instrumentation.
pub fn where_is(live: &Live, rip: u64) -> String {
    let (rip, note) = match live.origin(rip) {
        Some((_, orig)) => (orig, " (in instrumentation)"),
        None => (rip, ""),
    };
    for (m, bias) in live.loaded() {
        if let Some(d) = m.describe(LinkAddr(rip.wrapping_sub(bias))) {
            return format!("{d} ({rip:#x}){note}");
        }
    }
    format!("{rip:#x}{note}")
}

/// `file:line` of `pc` when its module has line information.
fn source_line(live: &Live, pc: u64) -> Option<String> {
    for (m, bias) in live.loaded() {
        let link = LinkAddr(pc.wrapping_sub(bias));
        if m.functions().containing(link).is_some() {
            let loc = m.debug_info()?.location(link)?;
            let file = std::path::Path::new(&loc.file)
                .file_name()
                .map_or(loc.file.clone(), |n| n.to_string_lossy().into_owned());
            return Some(format!("{file}:{}", loc.line));
        }
    }
    None
}
