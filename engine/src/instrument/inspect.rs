//! What `print`, `x`, `show locals` and `show registers` look at in a process gsh controls:
//! the [`Scope`] of a frame (its registers, its parameters and locals located by DWARF at its
//! pc, every loaded module's globals) and `print` itself, whether the process runs (memory
//! only), is stopped (a thread's frame), or is gone (the declared variables' last values). The
//! shell parses the command, calls here and prints the answer.

use crate::addr::LinkAddr;
use crate::process::{Process, State};
use crate::session::{Module, Session};

use super::eval::{self, EvalError, Printed};
use super::frames::frames_to;
use super::scope::{preserved_register, Scope, StoppedFrame};
use super::Live;

/// The names `print` sees: every module's globals (the frame's module first, then the main
/// program's, then the others the process has loaded), and the frame at `pc` (its function's
/// parameters by name). Without `pc`, globals and declared variables only.
pub fn scope<'a>(session: &'a Session, live: &'a Live, pc: Option<u64>) -> Scope<'a> {
    let bias = |id| live.bias(id).unwrap_or(0);
    let frame = pc.and_then(|pc| {
        session.modules().iter().find_map(|m| {
            let link = LinkAddr(pc.wrapping_sub(live.bias(m.id)?));
            m.functions().containing(link).map(|f| (&**m, f.addr))
        })
    });
    let mut modules: Vec<(&Module, u64)> = Vec::new();
    let first = frame.map(|(m, _)| m.id);
    let main = session.main().ok().map(|m| m.id);
    for id in [first, main].into_iter().flatten() {
        if !modules.iter().any(|(m, _)| m.id == id) {
            modules.push((session.module(id), bias(id)));
        }
    }
    for m in session.modules() {
        let loaded = live.bias(m.id).is_some() || Some(m.id) == main;
        if loaded && !modules.iter().any(|(x, _)| x.id == m.id) {
            modules.push((&**m, bias(m.id)));
        }
    }
    let mut scope = Scope::new(modules, live.declared());
    scope.frame = frame;
    scope
}

/// The scope of frame `n` of thread `tid` in a stopped process: its registers, and its
/// parameters and locals located by DWARF at its pc. Also the innermost frame's `rip` when
/// `n` is 0 (`print`'s snippets see `$0..$5` and parameters at a function's entry there).
/// Without a thread, or past the outermost frame, globals and declared variables only.
pub fn frame_scope<'a>(
    session: &'a Session,
    live: &'a Live,
    p: &Process,
    tid: Option<i32>,
    n: usize,
) -> (Scope<'a>, Option<u64>) {
    let regs = tid.and_then(|t| p.regs(t).ok());
    let rip = regs.filter(|_| n == 0).map(|r| r.rip);
    let frames = regs.map(|r| frames_to(live, p, &r, n)).unwrap_or_default();
    let found = frames.get(n).map(|f| (*f, frames.get(n + 1).copied()));
    let selected = found.map(|(f, _)| f);
    let mut scope = scope(session, live, selected.map(|f| f.lookup_pc()));
    scope.regs = selected.map(|f| f.regs);
    if let (Some((f, caller)), Some((module, _))) = (found, scope.frame) {
        let bias = live.bias(module.id).unwrap_or(0);
        let read = |a: u64, len: usize| p.read(a, len).ok();
        // Entry values are looked up at the caller's call site, in the same module's DWARF.
        let in_module = |pc: u64| {
            module
                .functions()
                .containing(LinkAddr(pc.wrapping_sub(bias)))
                .is_some()
        };
        let caller = caller
            .filter(|c| c.cfa != 0 || c.regs.get(7).is_some())
            .filter(|c| in_module(c.lookup_pc()))
            .map(|c| {
                Box::new(StoppedFrame {
                    regs: c.regs,
                    cfa: c.cfa,
                    bias,
                    read: &read,
                    caller: None,
                    return_address: None,
                    recover: None,
                })
            });
        let modules = scope.modules.clone();
        let recover = |reg: u16| preserved_register(&modules, &frames, n, reg);
        let stopped = StoppedFrame {
            regs: f.regs,
            cfa: f.cfa,
            bias,
            read: &read,
            return_address: caller.as_ref().map(|c| c.regs.rip),
            caller,
            recover: Some(&recover),
        };
        let pc = LinkAddr(f.lookup_pc().wrapping_sub(bias));
        scope.locals = module
            .debug_info()
            .map(|d| d.frame_variables(pc, &stopped))
            .unwrap_or_default();
    }
    (scope, rip)
}

/// `print EXPR` (gdb's `print/F EXPR` with `format`) in a process gsh controls. While it
/// runs, only memory is read: globals and declared variables, no registers, no calls. When
/// it is stopped, in frame `frame` of thread `tid`; a thread that has exited since is none
/// (globals and declared variables only).
#[allow(clippy::too_many_arguments)]
pub fn print(
    session: &Session,
    live: &Live,
    p: &mut Process,
    tid: Option<i32>,
    frame: usize,
    format: Option<char>,
    expr: &str,
) -> Result<Printed, EvalError> {
    if p.state() == State::Running {
        let (env, _) = eval::live_env(session, live, None)?;
        let mut scope = scope(session, live, None);
        scope.format = format;
        return eval::print_running(&p.reader(), &env, &mut scope, expr);
    }
    let tid = tid.filter(|t| p.threads().iter().any(|th| th.tid == *t));
    let (mut scope, rip) = frame_scope(session, live, p, tid, frame);
    scope.format = format;
    let (env, near) = eval::live_env(session, live, rip)?;
    eval::print_stopped(p, tid, &env, &mut scope, near, expr)
}

/// `print EXPR` after the process ended: over the declared variables' last values, which
/// [`Live`] kept when it exited.
pub fn print_after_exit(
    session: &Session,
    live: &Live,
    format: Option<char>,
    expr: &str,
) -> Result<Printed, EvalError> {
    let (base, bytes) = live.last_data.as_ref().ok_or(EvalError::NothingLeft)?;
    let (env, _) = eval::live_env(session, live, None)?;
    let mut scope = scope(session, live, None);
    scope.format = format;
    eval::print_exited(*base, bytes, &env, &mut scope, expr)
}
