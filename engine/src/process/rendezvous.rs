//! The dynamic linker's rendezvous (`struct r_debug`, found through the executable's
//! `DT_DEBUG` entry, which ld.so fills in at startup): `r_debug.r_brk`, the function ld.so
//! calls before and after every change to the list of loaded objects, tells the tracer when
//! `dlopen` mapped a library. When `r_state` is `RT_CONSISTENT` the new modules are read from
//! /proc/PID/maps and handed to the hooks.
//!
//! `r_brk` is glibc's `_dl_debug_state`, an empty function (`endbr64; ret`, or `ret` and
//! padding). Where its 5 bytes allow, it becomes a jump to a trampoline that sends the calling
//! thread a SIGURG (`tgkill`) and returns: traced, the tracer sees the signal stop, knows it by
//! the thread's `rip` and `si_code`, and suppresses it; if gsh dies without detaching, the
//! signal is ignored (SIGURG's default) and the program loses nothing. An `int3` there would
//! kill it with SIGTRAP at its next `dlopen`. Anything else at `r_brk` gets the `int3`, stepped
//! over by emulating the `ret` when it is one, or the classic way (restore, single-step,
//! re-insert) with every other thread halted.

use super::control::Process;
use super::error::ProcessError;
use super::maps;
use super::memory::MemFile;
use super::ptrace::{self, WaitEvent};
use super::signals::SI_TKILL;
use super::{AllocKind, Hooks};

/// `r_debug.r_state` values (glibc `link.h`).
pub(crate) const RT_CONSISTENT: i32 = 0;
const DT_DEBUG: u64 = 21;
const PT_DYNAMIC: u32 = 2;
const PT_PHDR: u32 = 6;

/// The signal the trampoline hook sends (default action: ignore).
pub(crate) const HOOK_SIGNAL: i32 = libc::SIGURG;

/// The word before the jump hook's count of link-map changes, xored with its own address: a
/// word that merely holds a number there (another program's memory after an untraced `exec`)
/// is never taken for the count.
const LOADS_TAG: u64 = u64::from_le_bytes(*b"gsh-load");

/// True when `bytes` (at `from`) are `nop`s or `int3`s (a function's alignment padding) at
/// least up to `to`.
fn padding(bytes: &[u8], from: u64, to: u64) -> bool {
    use iced_x86::{Decoder, DecoderOptions, Mnemonic};
    let mut d = Decoder::with_ip(64, bytes, from, DecoderOptions::NONE);
    while d.ip() < to {
        let i = d.decode();
        if i.is_invalid() || !matches!(i.mnemonic(), Mnemonic::Nop | Mnemonic::Int3) {
            return false;
        }
    }
    true
}

/// The installed rendezvous hook.
#[derive(Clone, Debug)]
pub(crate) struct Rendezvous {
    r_debug: u64,
    r_brk: u64,
    /// The byte our `int3` replaced.
    orig: u8,
    /// The jump hook instead of the `int3`: the 5 original bytes, and the address right
    /// after the trampoline's `tgkill` (where a notifying thread stops).
    jump: Option<([u8; 5], u64)>,
    /// Where the trampoline counts its calls (a tag, then the count), when it does: what
    /// tells, untraced, that the link map may have changed.
    loads: Option<u64>,
    /// `_dl_debug_state` is a bare return, so a hit is stepped over by emulating it.
    plain_ret: bool,
    /// The `int3` was there already, left by an earlier gsh (`orig` comes from the file).
    pub(crate) inherited: bool,
}

impl Rendezvous {
    /// Where the `int3` is (`r_brk`).
    pub(crate) fn address(&self) -> u64 {
        self.r_brk
    }

    /// Puts the original byte back in `mem` (the process, or a fork child's copy).
    pub(crate) fn remove_from(&self, mem: &MemFile) -> Result<(), ProcessError> {
        match &self.jump {
            Some((orig, _)) => mem.write(self.r_brk, orig),
            None => mem.write(self.r_brk, &[self.orig]),
        }
    }

    /// True when the hook is the trampoline's jump (harmless untraced), not an `int3`.
    pub(crate) fn is_jump(&self) -> bool {
        self.jump.is_some()
    }

    /// How many bytes at `r_brk` are ours.
    pub(crate) fn len(&self) -> usize {
        if self.jump.is_some() {
            5
        } else {
            1
        }
    }
}

impl Process {
    /// The address of `struct r_debug`, from the executable's dynamic section at run time;
    /// `None` for a static executable or before ld.so ran.
    pub(crate) fn find_r_debug(&self) -> Result<Option<u64>, ProcessError> {
        let aux = maps::auxv(self.pid)?;
        let (Some(&phdr), Some(&phnum)) = (aux.get(&libc::AT_PHDR), aux.get(&libc::AT_PHNUM))
        else {
            return Ok(None);
        };
        let table = self.mem.read(phdr, phnum as usize * 56)?;
        let field =
            |e: &[u8], at: usize| u64::from_le_bytes(e[at..at + 8].try_into().unwrap_or_default());
        let mut bias = None;
        let mut dynamic = None;
        for e in table.chunks_exact(56) {
            let kind = u32::from_le_bytes(e[..4].try_into().unwrap_or_default());
            match kind {
                PT_PHDR => bias = Some(phdr.wrapping_sub(field(e, 16))),
                PT_DYNAMIC => dynamic = Some((field(e, 16), field(e, 40))),
                _ => {}
            }
        }
        let Some((vaddr, size)) = dynamic else {
            return Ok(None);
        };
        let bias = match bias {
            Some(b) => b,
            None => self
                .clone_modules()?
                .into_iter()
                .find(|m| m.is_main)
                .map(|m| m.bias)
                .unwrap_or(0),
        };
        // A dynamic section is a few hundred bytes; a corrupt size must not become a huge read.
        let entries = self
            .mem
            .read(vaddr.wrapping_add(bias), size.min(64 << 10) as usize)?;
        for e in entries.chunks_exact(16) {
            let (tag, val) = (field(e, 0), field(e, 8));
            if tag == 0 {
                break;
            }
            if tag == DT_DEBUG {
                return Ok((val != 0).then_some(val));
            }
        }
        Ok(None)
    }

    fn clone_modules(&self) -> Result<Vec<maps::MappedModule>, ProcessError> {
        let maps = maps::read_maps(self.pid)?;
        let exe = std::fs::read_link(format!("/proc/{}/exe", self.pid)).ok();
        maps::ModuleCache::default().modules(&maps, exe.as_deref())
    }

    /// Installs the `int3` at `r_brk`, if the program has a dynamic linker. Every thread must
    /// be stopped.
    pub(crate) fn install_rendezvous(&mut self) -> Result<(), ProcessError> {
        if self.rendezvous.is_some() {
            return Ok(());
        }
        let Some(r_debug) = self.find_r_debug()? else {
            return Ok(());
        };
        let r_brk = self.read_u64(r_debug + 16)?;
        if r_brk == 0 {
            return Ok(());
        }
        let mut code = self.mem.read(r_brk, 16)?;
        let file = self.file_bytes_at(r_brk, 16);
        // An earlier gsh's hook (an int3 or a jump), left when it was killed: the file says
        // what was there.
        let inherited = matches!(code[0], 0xcc | 0xe9) && file.as_ref().is_some_and(|f| *f != code);
        if inherited {
            if let Some(f) = file {
                code = f;
            }
        }
        let endbr_ret = code[..5] == [0xf3, 0x0f, 0x1e, 0xfa, 0xc3];
        let plain_ret = code[0] == 0xc3 || endbr_ret;
        // `endbr64; ret`, or `ret` then alignment padding (nops) past 5 bytes: room for the
        // jump.
        let room = endbr_ret || (code[0] == 0xc3 && padding(&code[1..], r_brk + 1, r_brk + 5));
        // Without memory near ld.so, the int3 will do.
        let hook = if room {
            self.install_jump_hook(r_brk, &code).ok()
        } else {
            None
        };
        let (jump, loads) = match hook {
            Some((orig, notify, loads)) => (Some((orig, notify)), loads),
            None => (None, None),
        };
        if jump.is_none() {
            self.mem.write(r_brk, &[0xcc])?;
        }
        self.rendezvous = Some(Rendezvous {
            r_debug,
            r_brk,
            orig: code[0],
            jump,
            loads,
            plain_ret,
            inherited,
        });
        Ok(())
    }

    /// How many times the dynamic linker has called `r_brk` (before and after each change of
    /// its link map) since the jump hook went in, read from the process; `None` when nothing
    /// counts them (an `int3` hook, no dynamic linker, no memory for the count) or the count
    /// is not there to read.
    pub(crate) fn link_map_changes(&self) -> Option<u64> {
        let at = self.rendezvous.as_ref()?.loads?;
        let b = self.mem.read(at, 16).ok()?;
        let word = |i: usize| u64::from_le_bytes(b[i..i + 8].try_into().unwrap_or_default());
        (word(0) == at ^ LOADS_TAG).then(|| word(8))
    }

    /// While gsh is hands-off (the hook's signal goes unseen, ignored untraced): notes a
    /// pending module change when the dynamic linker may have changed its link map since the
    /// mappings were last compared, its hook's count having moved or nothing counting. A
    /// library is mapped before the linker's call that says the map is consistent, and the
    /// count is read before the mappings, so no library is missed; reading the mappings at
    /// every stack sample instead cost a quarter of gsh's CPU time during `consult`.
    pub(crate) fn note_untraced_loads(&mut self) {
        let now = self.link_map_changes();
        if now.is_none() || now != self.loads_seen {
            self.modules_dirty = true;
        }
    }

    /// Writes the trampoline that counts its calls, signals the tracer, and the jump to it at
    /// `r_brk`; returns the original bytes, where a notifying thread stops and where the
    /// count is (none without memory for it).
    fn install_jump_hook(
        &mut self,
        r_brk: u64,
        code: &[u8],
    ) -> Result<([u8; 5], u64, Option<u64>), ProcessError> {
        let loads = self
            .allocate(r_brk, 16, AllocKind::Data)
            .ok()
            .filter(|&at| {
                let mut w = [0u8; 16];
                w[..8].copy_from_slice(&(at ^ LOADS_TAG).to_le_bytes());
                self.mem.write(at, &w).is_ok()
            });
        // Saves what the system calls touch; flags are left alone (mov, lea and push do not
        // change them), and the caller's red zone is above the return address `call` pushed.
        // `dlopen` and `dlclose` call `r_brk` holding the linker's lock: the count needs no
        // atomic add, and any change of it is all the tracer looks for.
        #[rustfmt::skip]
        let mut t: Vec<u8> = vec![
            0x50, 0x57, 0x56, 0x52, 0x51, 0x41, 0x53, // push rax, rdi, rsi, rdx, rcx, r11
        ];
        if let Some(at) = loads {
            t.extend_from_slice(&[0x48, 0xb8]); // movabs rax, COUNT
            t.extend_from_slice(&(at + 8).to_le_bytes());
            #[rustfmt::skip]
            t.extend_from_slice(&[
                0x48, 0x8b, 0x38,                     // mov rdi, [rax]
                0x48, 0x8d, 0x7f, 0x01,               // lea rdi, [rdi+1]
                0x48, 0x89, 0x38,                     // mov [rax], rdi
            ]);
        }
        #[rustfmt::skip]
        t.extend_from_slice(&[
            0xb8, 0x27, 0, 0, 0,                      // mov eax, SYS_getpid
            0x0f, 0x05,                               // syscall
            0x89, 0xc7,                               // mov edi, eax
            0xb8, 0xba, 0, 0, 0,                      // mov eax, SYS_gettid
            0x0f, 0x05,                               // syscall
            0x89, 0xc6,                               // mov esi, eax
            0xba, HOOK_SIGNAL as u8, 0, 0, 0,         // mov edx, SIGURG
            0xb8, 0xea, 0, 0, 0,                      // mov eax, SYS_tgkill
            0x0f, 0x05,                               // syscall
        ]);
        let notify = t.len() as u64;
        t.extend_from_slice(&[
            0x41, 0x5b, 0x59, 0x5a, 0x5e, 0x5f, 0x58, // pop r11, rcx, rdx, rsi, rdi, rax
            0xc3, // ret
        ]);
        let at = self.allocate(r_brk, t.len() as u64, AllocKind::Code)?;
        self.mem.write(at, &t)?;
        let rel = (at as i64 - (r_brk as i64 + 5)) as i32;
        let mut jmp = [0xe9, 0, 0, 0, 0];
        jmp[1..].copy_from_slice(&rel.to_le_bytes());
        self.mem.write(r_brk, &jmp)?;
        let mut orig = [0u8; 5];
        orig.copy_from_slice(&code[..5]);
        Ok((orig, at + notify, loads))
    }

    /// True when thread `tid`, stopped with `signal`, is our trampoline hook's notification.
    pub(crate) fn is_rendezvous_signal(&self, tid: i32, signal: i32) -> bool {
        let Some((_, notify)) = self.rendezvous.as_ref().and_then(|rv| rv.jump) else {
            return false;
        };
        signal == HOOK_SIGNAL
            && ptrace::sig_code(tid).ok() == Some(SI_TKILL)
            && ptrace::regs(tid).is_ok_and(|r| r.rip == notify)
    }

    /// A thread signalled through the trampoline hook: the signal is dropped, and the hooks
    /// hear about new modules (every thread stopped) when the link map is consistent.
    pub(crate) fn rendezvous_signal(
        &mut self,
        tid: i32,
        hooks: &mut dyn Hooks,
    ) -> Result<(), ProcessError> {
        if self.note_rendezvous()? {
            self.halt()?;
            self.flush_module_changes(hooks)?;
            return self.resume();
        }
        self.resume_thread(tid)
    }

    /// Reads `r_state`; when the link map is consistent, notes a module change.
    pub(crate) fn note_rendezvous(&mut self) -> Result<bool, ProcessError> {
        let Some(rv) = self.rendezvous.clone() else {
            return Ok(false);
        };
        let state = self.mem.read(rv.r_debug + 24, 4)?;
        let consistent = i32::from_le_bytes(state.try_into().unwrap_or_default()) == RT_CONSISTENT;
        if consistent {
            self.modules_dirty = true;
        }
        Ok(consistent)
    }

    /// True when a thread trapped at `rip` (just after an `int3`) hit the rendezvous.
    pub(crate) fn is_rendezvous_hit(&self, rip: u64) -> bool {
        self.rendezvous
            .as_ref()
            .is_some_and(|rv| rv.jump.is_none() && rip.wrapping_sub(1) == rv.r_brk)
    }

    /// Steps thread `tid` over the rendezvous `int3` without telling anyone; notes a pending
    /// module change when the link map is consistent. Used inside injected calls too.
    pub(crate) fn step_over_rendezvous(&mut self, tid: i32) -> Result<bool, ProcessError> {
        let Some(rv) = self.rendezvous.clone() else {
            return Ok(false);
        };
        let state = self.mem.read(rv.r_debug + 24, 4)?;
        let consistent = i32::from_le_bytes(state.try_into().unwrap_or_default()) == RT_CONSISTENT;
        let mut r = ptrace::regs(tid)?;
        if rv.plain_ret {
            r.rip = self.read_u64(r.rsp)?;
            r.rsp += 8;
            ptrace::set_regs(tid, &r)?;
        } else {
            // Restore, single-step this thread alone, re-insert; the caller has every other
            // thread stopped.
            r.rip = rv.r_brk;
            ptrace::set_regs(tid, &r)?;
            self.mem.write(rv.r_brk, &[rv.orig])?;
            ptrace::step(tid)?;
            loop {
                match ptrace::wait(tid, false) {
                    Ok(Some((_, WaitEvent::Signal(libc::SIGTRAP)))) => break,
                    Ok(Some((_, WaitEvent::Exited(_) | WaitEvent::Signaled(_)))) | Err(_) => {
                        return Err(self.gone("stepping over the dynamic linker's breakpoint"));
                    }
                    Ok(Some((_, WaitEvent::Signal(sig)))) => {
                        self.keep_signal(tid, sig);
                        ptrace::step(tid)?;
                    }
                    Ok(_) => ptrace::step(tid)?,
                }
            }
            self.mem.write(rv.r_brk, &[0xcc])?;
        }
        if consistent {
            self.modules_dirty = true;
        }
        Ok(consistent)
    }

    /// A thread hit `r_brk` while the process runs: step it over, tell the hooks about new
    /// modules (with every thread stopped), and let it run on.
    pub(crate) fn rendezvous_hit(
        &mut self,
        tid: i32,
        hooks: &mut dyn Hooks,
    ) -> Result<(), ProcessError> {
        let plain = self.rendezvous.as_ref().is_some_and(|rv| rv.plain_ret);
        if !plain {
            self.halt()?;
        }
        let consistent = self.step_over_rendezvous(tid)?;
        if consistent && self.modules_dirty {
            // The hooks may inject code (allocate near the new library): every thread, this
            // one included, stays stopped until they are done.
            if plain {
                self.halt()?;
            }
            self.flush_module_changes(hooks)?;
            return self.resume();
        }
        if plain {
            self.resume_thread(tid)
        } else {
            self.resume()
        }
    }
}
