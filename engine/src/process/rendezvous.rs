//! The dynamic linker's rendezvous (`struct r_debug`, found through the executable's
//! `DT_DEBUG` entry, which ld.so fills in at startup): an `int3` at `r_debug.r_brk`, the function
//! ld.so calls before and after every change to the list of loaded objects, tells the tracer
//! when `dlopen` mapped a library. When `r_state` is `RT_CONSISTENT` the new modules are read
//! from /proc/PID/maps and handed to the hooks.
//!
//! `r_brk` is glibc's `_dl_debug_state`, an empty function (`ret`, or `endbr64; ret`), so the
//! trap is stepped over by emulating that `ret`: no byte is restored and no other thread needs to
//! stop. Any other code there is stepped over the classic way (restore, single-step, re-insert)
//! with every other thread halted.

use super::control::Process;
use super::error::ProcessError;
use super::maps;
use super::memory::MemFile;
use super::ptrace::{self, WaitEvent};
use super::Hooks;

/// `r_debug.r_state` values (glibc `link.h`).
const RT_CONSISTENT: i32 = 0;
const DT_DEBUG: u64 = 21;
const PT_DYNAMIC: u32 = 2;
const PT_PHDR: u32 = 6;

/// The installed rendezvous breakpoint.
#[derive(Clone, Debug)]
pub(crate) struct Rendezvous {
    r_debug: u64,
    r_brk: u64,
    /// The byte our `int3` replaced.
    orig: u8,
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
        mem.write(self.r_brk, &[self.orig])
    }
}

impl Process {
    /// The address of `struct r_debug`, from the executable's dynamic section at run time;
    /// `None` for a static executable or before ld.so ran.
    fn find_r_debug(&self) -> Result<Option<u64>, ProcessError> {
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
        let mut code = self.mem.read(r_brk, 5)?;
        let inherited = code[0] == 0xcc;
        if inherited {
            // An earlier gsh's hook, left when it was killed: the file says what was there.
            if let Some(file) = self.file_bytes_at(r_brk, 5) {
                code = file;
            }
        }
        let plain_ret = code[0] == 0xc3 || code == [0xf3, 0x0f, 0x1e, 0xfa, 0xc3];
        self.mem.write(r_brk, &[0xcc])?;
        self.rendezvous = Some(Rendezvous {
            r_debug,
            r_brk,
            orig: code[0],
            plain_ret,
            inherited,
        });
        Ok(())
    }

    /// True when a thread trapped at `rip` (just after an `int3`) hit the rendezvous.
    pub(crate) fn is_rendezvous_hit(&self, rip: u64) -> bool {
        self.rendezvous
            .as_ref()
            .is_some_and(|rv| rip.wrapping_sub(1) == rv.r_brk)
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
                        if let Some(t) = self.threads.get_mut(&tid) {
                            t.pending.push(sig);
                        }
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
