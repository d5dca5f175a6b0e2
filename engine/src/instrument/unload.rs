//! Taking gsh's runtime library out of a process gsh lets go, so a detach leaves the process as
//! it was where nothing is in use: once the probes are gone and the files' code is back, a
//! runtime (this session's or an earlier one's) that no thread is in is unloaded with
//! `dlclose`, its destructor first told to give back what the runtime made in the process (its
//! pthread key, counter arena and memfd, unwind tables; `rt/src/unload.rs`). The values gsh
//! read are already kept; the arena's memfd stays readable through gsh's own descriptor.
//!
//! The runtime stays, with a note saying why, when a thread is still inside its code (by the
//! rule for freeing a trampoline: no thread's `rip`, other register or stack word points into
//! it), when it predates unloading (no `gsh_rt_unloading`), or when the program itself needs
//! it (a file `save`d with measures loads it as a `DT_NEEDED` library, which `ld.so` keeps).

use std::path::Path;

use gsh_rt_abi::exports;

use crate::process::{MappedModule, Process, ProcessError};

/// Whether `m` is a gsh runtime library, by its file's name (`libgsh_rt.so`).
pub fn is_runtime(m: &MappedModule) -> bool {
    m.path
        .file_name()
        .is_some_and(|n| n.to_string_lossy().starts_with("libgsh_rt"))
}

/// Whether a stopped thread is in gsh's code, or returns into it: a pool (a trampoline, the
/// injection stub) or a runtime's text. Trampolines use the runtime (its calls, its thread
/// blocks in the arena), so the runtime goes only when no thread is in either.
pub fn gsh_code_in_use(p: &mut Process) -> Result<bool, ProcessError> {
    let mut ranges = p.pool_ranges();
    for m in p.modules()?.into_iter().filter(is_runtime) {
        ranges.extend(m.text.iter().map(|r| (r.start, r.end)));
    }
    Ok(p.in_use(&ranges)?.into_iter().any(|b| b))
}

/// Unloads every gsh runtime the process maps that nothing uses; call it with no probe left
/// and the files' code back, every thread stopped. Returns a note for each runtime that stays,
/// with why (an injected call that could not run is one reason, not an error: the detach goes
/// on without it).
pub fn unload_runtimes(p: &mut Process) -> Result<Vec<String>, ProcessError> {
    let mut notes = Vec::new();
    for m in p.modules()?.into_iter().filter(is_runtime) {
        let why = match unload(p, &m) {
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
fn unload(p: &mut Process, m: &MappedModule) -> Result<Option<String>, ProcessError> {
    let mut ranges = p.pool_ranges();
    ranges.extend(m.text.iter().map(|r| (r.start, r.end)));
    if p.in_use(&ranges)?.into_iter().any(|b| b) {
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
