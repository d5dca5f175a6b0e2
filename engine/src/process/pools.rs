//! gsh's memory in a process: pools mapped near the code with an injected `mmap` (read+exec
//! for code, written through /proc/PID/mem; read+write for data; never both), sub-allocated
//! upwards, unmapped only when gsh lets the process go. An inaccessible page before each pool
//! keeps the process's own memory from joining the pool's mapping in front of it.
//!
//! A session that detaches with the files' code back ([`Process::let_go_of_pools`]) unmaps
//! every pool, guard page included, that no thread is in (see [`CallChains`]): no thread's
//! `rip` or other register is in it and no frame of a thread's call chain returns into it (a
//! trampoline that called out, a signal frame whose interrupted `rip` is in one). The chain is
//! the caller's unwinder's, over call-frame information; where it cannot be walked to the
//! thread's outermost frame, any word of the top of the thread's stack that points into a pool
//! keeps it, as a return address might. The rest, which nothing jumps to any more, it marks
//! *released*.
//!
//! Each pool begins with a header (magic, version, kind, size, state), so a later session
//! recognises gsh's memory in the process. The next session reuses a released pool from its
//! start, by the same rule with every stack searched (it finds the pools at its first
//! allocation, with no unwinder at hand). A pool whose session ended otherwise (gsh was killed) may still be
//! jumped to, so it is kept as it is until the code is put back (`attach --clean`, then
//! [`Process::reclaim_kept_pools`]). So sessions one after another map no more memory than one
//! did.

use super::control::Process;
use super::error::ProcessError;
use super::{maps, ptrace, AllocKind};

/// Pools are mapped in pieces of at least this size: virtual memory, touched only where
/// written, and few mappings (each pool is two, with its guard page) for a `time '*'`.
const POOL_SIZE: u64 = 1 << 20;
/// The inaccessible page mapped before each pool.
const GUARD: u64 = 0x1000;
/// The header's size; allocations start after it.
pub(crate) const HEADER: u64 = 64;
/// The header's first bytes.
const MAGIC: [u8; 8] = *b"gsh-pool";
/// The header's layout version.
const VERSION: u32 = 1;
/// A session is using the pool (or died using it).
const IN_USE: u32 = 1;
/// The session that used the pool detached with nothing pointing into it.
const RELEASED: u32 = 2;
/// How much of a thread's stack, from `rsp` up, is searched for words pointing into a pool
/// when its call chain is not known (see [`CallChains`]).
const STACK_SCAN: u64 = 256 << 10;

/// How the caller finds a stopped thread's call chain, for the test of whether a thread is in
/// gsh's memory (the process layer does not unwind): given the process and the thread's
/// registers, the pcs of the thread's frames, innermost first (its `rip`, then each return
/// address, a signal frame's interrupted `rip`), when the walk reached the thread's outermost
/// frame through call-frame information alone; `None` when it could not (code without CFI, a
/// frame it could not step, a depth limit, unreadable memory). A thread whose chain is known
/// is in a range only when a register or a frame is: the stale words its frames keep (old
/// return addresses into trampolines, in buffers and padding never written since) do not
/// count. A thread whose chain is not known is searched as before, every word of the top of
/// its stack. [`no_call_chains`] knows none.
pub type CallChains<'a> = dyn FnMut(&Process, &libc::user_regs_struct) -> Option<Vec<u64>> + 'a;

/// A [`CallChains`] that knows no thread's chain: every stack is searched.
fn no_call_chains(_: &Process, _: &libc::user_regs_struct) -> Option<Vec<u64>> {
    None
}

fn kind_code(kind: AllocKind) -> u32 {
    match kind {
        AllocKind::Code => 1,
        AllocKind::Data => 2,
    }
}

/// A pool's header: magic, version, kind, size, state.
fn header(kind: AllocKind, size: u64, state: u32) -> [u8; HEADER as usize] {
    let mut h = [0u8; HEADER as usize];
    h[..8].copy_from_slice(&MAGIC);
    h[8..12].copy_from_slice(&VERSION.to_le_bytes());
    h[12..16].copy_from_slice(&kind_code(kind).to_le_bytes());
    h[16..24].copy_from_slice(&size.to_le_bytes());
    h[24..28].copy_from_slice(&state.to_le_bytes());
    h
}

/// Where the state word sits in a header.
const STATE_AT: u64 = 24;

/// A header read back: its kind, size and state, when `h` is one.
fn parse_header(h: &[u8]) -> Option<(AllocKind, u64, u32)> {
    let u32_at = |at: usize| u32::from_le_bytes(h[at..at + 4].try_into().unwrap_or_default());
    if h.len() < HEADER as usize || h[..8] != MAGIC || u32_at(8) != VERSION {
        return None;
    }
    let kind = match u32_at(12) {
        1 => AllocKind::Code,
        2 => AllocKind::Data,
        _ => return None,
    };
    let size = u64::from_le_bytes(h[16..24].try_into().unwrap_or_default());
    Some((kind, size, u32_at(24)))
}

/// One mapped pool.
#[derive(Clone, Copy, Debug)]
struct Pool {
    start: u64,
    size: u64,
    /// Bytes from `start` handed out (the header included).
    used: u64,
    kind: AllocKind,
    /// An earlier session's pool that may still be jumped to: nothing is allocated in it.
    kept: bool,
}

/// The process's pools, and the injection stub (`inject.rs`).
#[derive(Default, Debug)]
pub(crate) struct Pools {
    pools: Vec<Pool>,
    /// The stub injected system calls and calls run through, once written.
    pub(crate) stub: Option<super::inject::Stub>,
    /// Set to stop waiting for an injected call (`Process::with_call_interrupt`).
    pub(crate) call_interrupt: Option<std::sync::Arc<std::sync::atomic::AtomicBool>>,
    /// Code a thread must not be inside of when it runs an injected call (see
    /// `inject::SafePoint`), found once per process.
    pub(crate) unsafe_code: Option<Vec<(u64, u64, &'static str)>>,
    /// The process's maps have been searched for an earlier session's pools.
    scanned: bool,
    earlier: EarlierPools,
}

/// What this session found of the memory earlier gsh sessions left in the process.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct EarlierPools {
    /// Released pools, reused by this session.
    pub reused: usize,
    /// Their bytes.
    pub reused_bytes: u64,
    /// Pools of a session that did not detach (or that a thread is still in), left alone.
    pub kept: usize,
    /// Their bytes.
    pub kept_bytes: u64,
}

/// What [`Process::let_go_of_pools`] did with gsh's pools.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PoolsLetGo {
    /// Pools unmapped.
    pub unmapped: usize,
    /// Their bytes.
    pub unmapped_bytes: u64,
    /// Pools a thread is still in, left mapped and released for a later session.
    pub released: usize,
    /// Their bytes.
    pub released_bytes: u64,
    /// Why the pools from some point on were released rather than unmapped: the `munmap`
    /// could not be injected (no thread could run it) or failed.
    pub failed: Option<String>,
}

fn within(near: u64, start: u64, size: u64) -> bool {
    crate::space::within_rel32(near, start) && crate::space::within_rel32(near, start + size)
}

impl Process {
    /// Memory within ±2 GiB of `near`, from pools mapped with an injected `mmap` (or left by
    /// an earlier session and released): read+exec for code (written through /proc/PID/mem),
    /// read+write for data, never both. Aligned to 16 (64 for data). Never freed.
    pub fn allocate(&mut self, near: u64, size: u64, kind: AllocKind) -> Result<u64, ProcessError> {
        self.alive("allocating memory")?;
        self.adopt_pools()?;
        let align = match kind {
            AllocKind::Code => 16,
            AllocKind::Data => 64,
        };
        for p in &mut self.pools.pools {
            let at = (p.start + p.used).next_multiple_of(align);
            if p.kind == kind && !p.kept && at + size <= p.start + p.size && within(near, at, size)
            {
                p.used = at + size - p.start;
                return Ok(at);
            }
        }
        let pool_size = (size + HEADER).next_multiple_of(0x1000).max(POOL_SIZE);
        let start = self.map_pool(near, pool_size, kind)?;
        self.mem.write(start, &header(kind, pool_size, IN_USE))?;
        self.pools.pools.push(Pool {
            start,
            size: pool_size,
            used: HEADER + size,
            kind,
            kept: false,
        });
        Ok(start + HEADER)
    }

    /// What this session found of earlier sessions' memory (searching for it now if nothing
    /// was allocated yet).
    pub fn earlier_pools(&mut self) -> Result<EarlierPools, ProcessError> {
        self.alive("looking for gsh's memory")?;
        self.adopt_pools()?;
        Ok(self.pools.earlier)
    }

    /// Gives back every pool of this session (and every one it found): call it once no code
    /// jumps into any of them (the files' code is back, the `r_brk` hook removed, the runtime
    /// unloaded or not), with every thread stopped, just before detaching. A pool no thread is
    /// in (the rule for reusing one, the threads' call chains found by `chains`) is unmapped
    /// with its guard page; the rest are marked released, for a later session to reuse.
    pub fn let_go_of_pools(
        &mut self,
        chains: &mut CallChains<'_>,
    ) -> Result<PoolsLetGo, ProcessError> {
        self.alive("unmapping gsh's memory")?;
        let mut done = PoolsLetGo::default();
        if self.pools.pools.is_empty() {
            return Ok(done);
        }
        let ranges = self.pool_ranges();
        let busy = self.in_use(&ranges, chains)?;
        let maps = maps::read_maps(self.pid)?;
        let stub = self.pools.stub.map(|s| s.inside());
        let mut unmapped = vec![false; ranges.len()];
        let holds_stub = |p: &Pool| stub.is_some_and(|s| (p.start..p.start + p.size).contains(&s));
        // The pool holding the injection stub goes last, its `munmap` through a stub written
        // elsewhere for it: the stub cannot unmap the page it returns to.
        let mut order: Vec<usize> = (0..ranges.len()).filter(|&i| !busy[i]).collect();
        order.sort_by_key(|&i| holds_stub(&self.pools.pools[i]));
        for &i in &order {
            let p = self.pools.pools[i];
            if holds_stub(&p) {
                self.pools.stub = None;
            }
            // Its guard page, when the page before it is still an inaccessible anonymous one.
            let guarded = maps.iter().any(|m| {
                (m.start..m.end).contains(&(p.start - GUARD))
                    && m.name.is_empty()
                    && m.inode == 0
                    && !(m.read || m.write || m.exec)
            });
            let from = if guarded { p.start - GUARD } else { p.start };
            match self.syscall(libc::SYS_munmap, &[from, p.start + p.size - from]) {
                Ok(0) => {}
                got => {
                    done.failed = Some(match got {
                        Ok(e) => std::io::Error::from_raw_os_error(-e as i32).to_string(),
                        Err(e) => e.to_string(),
                    });
                    break;
                }
            }
            unmapped[i] = true;
            done.unmapped += 1;
            done.unmapped_bytes += p.size;
        }
        // What is left is released; what was unmapped is forgotten.
        for (i, p) in self.pools.pools.iter().enumerate() {
            if !unmapped[i] {
                self.mem
                    .write(p.start + STATE_AT, &RELEASED.to_le_bytes())?;
                done.released += 1;
                done.released_bytes += p.size;
            }
        }
        let mut i = 0;
        self.pools.pools.retain(|_| {
            i += 1;
            !unmapped[i - 1]
        });
        Ok(done)
    }

    /// The process's children (its threads' `/proc` `children` lists; forked while gsh was
    /// hands-off as well as traced) that still map a copy of gsh's memory: the runtime
    /// library, or an anonymous mapping where one of `pools` (this process's, as `(start,
    /// end)`) starts. A child that has exec'd maps none.
    pub fn children_keeping_gsh_memory(&self, pools: &[(u64, u64)]) -> Vec<i32> {
        let mut pids: Vec<i32> = Vec::new();
        for tid in self.threads.keys() {
            let path = format!("/proc/{}/task/{tid}/children", self.pid);
            if let Ok(text) = std::fs::read_to_string(path) {
                pids.extend(
                    text.split_whitespace()
                        .filter_map(|w| w.parse::<i32>().ok()),
                );
            }
        }
        pids.sort_unstable();
        pids.dedup();
        pids.into_iter()
            .filter(|&pid| {
                maps::read_maps(pid).is_ok_and(|maps| {
                    maps.iter().any(|m| {
                        m.name.contains("libgsh_rt")
                            || (m.name.is_empty()
                                && pools.iter().any(|&(start, _)| {
                                    m.start == start || m.start + GUARD == start
                                }))
                    })
                })
            })
            .collect()
    }

    /// Where gsh's pools are, as `(start, end)`.
    pub fn pool_ranges(&self) -> Vec<(u64, u64)> {
        self.pools
            .pools
            .iter()
            .map(|p| (p.start, p.start + p.size))
            .collect()
    }

    /// [`Process::ranges_in_use`] with every thread stopped, for code gsh may free besides its
    /// pools (the runtime library's), the threads' call chains found by `chains`.
    pub fn in_use(
        &mut self,
        ranges: &[(u64, u64)],
        chains: &mut CallChains<'_>,
    ) -> Result<Vec<bool>, ProcessError> {
        self.alive("looking for threads in gsh's code")?;
        self.stopped(|p| p.ranges_in_use(ranges, chains))
    }

    /// Makes the pools an earlier, killed session left usable again, once the code is as the
    /// files have it (after `attach --clean` put its jumps back): those no thread is in (the
    /// threads' call chains found by `chains`, as for [`Process::let_go_of_pools`]). Returns
    /// how many.
    pub fn reclaim_kept_pools(
        &mut self,
        chains: &mut CallChains<'_>,
    ) -> Result<usize, ProcessError> {
        self.alive("reclaiming gsh's memory")?;
        self.adopt_pools()?;
        let kept: Vec<usize> = (0..self.pools.pools.len())
            .filter(|&i| self.pools.pools[i].kept)
            .collect();
        if kept.is_empty() {
            return Ok(0);
        }
        let ranges: Vec<(u64, u64)> = kept
            .iter()
            .map(|&i| {
                let p = self.pools.pools[i];
                (p.start, p.start + p.size)
            })
            .collect();
        let busy = self.stopped(|p| p.ranges_in_use(&ranges, chains))?;
        let mut n = 0;
        for (&i, busy) in kept.iter().zip(busy) {
            if !busy {
                self.reuse(i)?;
                self.pools.earlier.kept -= 1;
                self.pools.earlier.kept_bytes -= self.pools.pools[i].size;
                n += 1;
            }
        }
        Ok(n)
    }

    /// Pool `i` starts afresh: its header says in use, data pools are zeroed.
    fn reuse(&mut self, i: usize) -> Result<(), ProcessError> {
        let p = &mut self.pools.pools[i];
        p.used = HEADER;
        p.kept = false;
        let p = *p;
        if p.kind == AllocKind::Data {
            self.mem
                .write(p.start + HEADER, &vec![0u8; (p.size - HEADER) as usize])?;
        }
        self.mem.write(p.start, &header(p.kind, p.size, IN_USE))
    }

    /// Once per session, before the first allocation: finds the pools earlier sessions left
    /// (anonymous mappings, read+exec or read+write, that start with a header; adjacent pools
    /// of one kind share a mapping) and takes them over.
    fn adopt_pools(&mut self) -> Result<(), ProcessError> {
        if self.pools.scanned {
            return Ok(());
        }
        self.pools.scanned = true;
        let mut found: Vec<(u64, u64, AllocKind, bool)> = Vec::new();
        for m in maps::read_maps(self.pid)? {
            if !m.name.is_empty() || m.inode != 0 || !m.read || m.exec == m.write {
                continue;
            }
            let mut at = m.start;
            while at + HEADER <= m.end {
                let Ok(h) = self.mem.read(at, HEADER as usize) else {
                    break;
                };
                let Some((kind, size, state)) = parse_header(&h) else {
                    break;
                };
                if size < HEADER || at + size > m.end || (kind == AllocKind::Code) != m.exec {
                    break;
                }
                found.push((at, size, kind, state == RELEASED));
                at += size;
            }
        }
        if found.is_empty() {
            return Ok(());
        }
        // Found at the first allocation, where no caller's unwinder is at hand: every stack is
        // searched. A pool a stale word keeps is only kept, not reused.
        let ranges: Vec<(u64, u64)> = found.iter().map(|f| (f.0, f.0 + f.1)).collect();
        let busy = self.stopped(|p| p.ranges_in_use(&ranges, &mut no_call_chains))?;
        for ((start, size, kind, released), busy) in found.into_iter().zip(busy) {
            self.pools.pools.push(Pool {
                start,
                size,
                used: size,
                kind,
                kept: true,
            });
            if released && !busy {
                let i = self.pools.pools.len() - 1;
                self.reuse(i)?;
                self.pools.earlier.reused += 1;
                self.pools.earlier.reused_bytes += size;
            } else {
                self.pools.earlier.kept += 1;
                self.pools.earlier.kept_bytes += size;
            }
        }
        Ok(())
    }

    /// For each range, whether a stopped thread is in it ([`thread_in`]): memory gsh may free
    /// (a pool, the runtime's code) only when no thread may run or return into it. A thread
    /// whose registers cannot be read makes every range busy.
    fn ranges_in_use(
        &mut self,
        ranges: &[(u64, u64)],
        chains: &mut CallChains<'_>,
    ) -> Result<Vec<bool>, ProcessError> {
        let mut busy = vec![false; ranges.len()];
        let maps = maps::read_maps(self.pid)?;
        let tids: Vec<i32> = self.threads.keys().copied().collect();
        for tid in tids {
            let Ok(r) = ptrace::regs(tid) else {
                return Ok(vec![true; ranges.len()]);
            };
            let registers = [
                r.rip, r.rax, r.rbx, r.rcx, r.rdx, r.rsi, r.rdi, r.rbp, r.r8, r.r9, r.r10, r.r11,
                r.r12, r.r13, r.r14, r.r15,
            ];
            let chain = chains(self, &r);
            let stack = || {
                let Some(stack) = maps.iter().find(|m| (m.start..m.end).contains(&r.rsp)) else {
                    return Some(Vec::new());
                };
                let from = r.rsp & !7;
                let len = (stack.end - from).min(STACK_SCAN) as usize;
                self.mem.read(from, len).ok()
            };
            let thread = thread_in(ranges, &registers, chain.as_deref(), stack);
            for (b, t) in busy.iter_mut().zip(thread) {
                *b |= t;
            }
        }
        Ok(busy)
    }

    /// Maps a fresh pool within reach of `near`, behind an inaccessible guard page: memory
    /// the process maps later with the pool's protection may join the pool's mapping after
    /// its end, never before its header, so the next session finds the header where a
    /// mapping starts.
    fn map_pool(&mut self, near: u64, size: u64, kind: AllocKind) -> Result<u64, ProcessError> {
        let prot = match kind {
            AllocKind::Code => libc::PROT_READ | libc::PROT_EXEC,
            AllocKind::Data => libc::PROT_READ | libc::PROT_WRITE,
        };
        let flags = libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_FIXED_NOREPLACE;
        let total = size + GUARD;
        // A gap may close between reading the maps and mapping (another thread's mmap is not
        // possible, all are stopped, but be tolerant): try a few times.
        for _ in 0..4 {
            let maps = maps::read_maps(self.pid)?;
            let Some(at) = maps::free_gap(&maps, near, total) else {
                break;
            };
            let got = self.syscall(
                libc::SYS_mmap,
                &[at, total, libc::PROT_NONE as u64, flags as u64, u64::MAX, 0],
            )?;
            if got as u64 == at {
                let done = self.syscall(libc::SYS_mprotect, &[at + GUARD, size, prot as u64])?;
                if done != 0 {
                    return Err(ProcessError::Inject {
                        what: "mprotect".into(),
                        tid: self.pid,
                        detail: std::io::Error::from_raw_os_error(-done as i32).to_string(),
                    });
                }
                return Ok(at + GUARD);
            }
            if got >= 0 {
                // An old kernel that ignores MAP_FIXED_NOREPLACE put it elsewhere.
                self.syscall(libc::SYS_munmap, &[got as u64, total])?;
            } else if got != -(libc::EEXIST as i64) {
                return Err(ProcessError::Inject {
                    what: "mmap".into(),
                    tid: self.pid,
                    detail: std::io::Error::from_raw_os_error(-got as i32).to_string(),
                });
            }
        }
        Err(ProcessError::NoRoom {
            pid: self.pid,
            near,
            size,
        })
    }
}

/// For each range, whether one stopped thread is in it: one of its `registers` (`rip` and
/// the other general registers) or a pc of its call `chain` (see [`CallChains`]) is in it, or,
/// when the chain is not known or reaches into a range (a thread in gsh's code, about which
/// nothing is assumed), a word of `stack` (the top of its stack, read only then; `None` when it
/// cannot be read, which makes every range busy) points into it.
fn thread_in(
    ranges: &[(u64, u64)],
    registers: &[u64],
    chain: Option<&[u64]>,
    stack: impl FnOnce() -> Option<Vec<u8>>,
) -> Vec<bool> {
    let mut busy = vec![false; ranges.len()];
    let mut mark = |v: u64| {
        let mut hit = false;
        for (b, (lo, hi)) in busy.iter_mut().zip(ranges) {
            if (*lo..*hi).contains(&v) {
                *b = true;
                hit = true;
            }
        }
        hit
    };
    for &v in registers {
        mark(v);
    }
    if let Some(pcs) = chain {
        let mut in_gsh = false;
        for &pc in pcs {
            in_gsh |= mark(pc);
        }
        if !in_gsh {
            return busy;
        }
    }
    let Some(words) = stack() else {
        return vec![true; ranges.len()];
    };
    for w in words.chunks_exact(8) {
        mark(u64::from_le_bytes(w.try_into().unwrap_or_default()));
    }
    busy
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The stack of a thread that waits, its frames keeping an old return address into a pool
    /// (0x1000..0x2000) and another into the runtime's text (0x8000..0x9000).
    fn stale_stack() -> Option<Vec<u8>> {
        let words = [
            0x7ffd_0000_u64,
            0x1234,
            0x8040,
            0x5555_0000,
            0x1a40,
            0x7ffd_0100,
        ];
        Some(words.iter().flat_map(|w| w.to_le_bytes()).collect())
    }

    const RANGES: [(u64, u64); 2] = [(0x1000, 0x2000), (0x8000, 0x9000)];
    /// Registers in the program's code and stack.
    const REGISTERS: [u64; 3] = [0x5555_1000, 0x7ffd_0000, 3];

    #[test]
    fn a_whole_call_chain_outside_gsh_frees_what_stale_stack_words_point_into() {
        let chain = [0x7f00_1000, 0x5555_2000, 0x7f00_0100];
        let searched = std::cell::Cell::new(false);
        let busy = thread_in(&RANGES, &REGISTERS, Some(&chain), || {
            searched.set(true);
            stale_stack()
        });
        assert_eq!(busy, vec![false, false]);
        assert!(
            !searched.get(),
            "a whole chain needs no search of the stack"
        );
    }

    #[test]
    fn an_unknown_call_chain_keeps_what_any_stack_word_points_into() {
        assert_eq!(
            thread_in(&RANGES, &REGISTERS, None, stale_stack),
            vec![true, true]
        );
        assert_eq!(
            thread_in(&RANGES, &REGISTERS, None, || None),
            vec![true, true],
            "a stack that cannot be read keeps everything"
        );
        assert_eq!(
            thread_in(&RANGES, &REGISTERS, None, || Some(Vec::new())),
            vec![false, false]
        );
    }

    #[test]
    fn a_thread_in_gsh_code_keeps_it_and_is_searched_for_the_rest() {
        // A return into a trampoline of the first range: that range, and by the stack search
        // the runtime's text its stale word points into.
        let chain = [0x7f00_1000, 0x1a40, 0x5555_2000];
        assert_eq!(
            thread_in(&RANGES, &REGISTERS, Some(&chain), stale_stack),
            vec![true, true]
        );
        // Stopped in a trampoline: its rip.
        let registers = [0x1010, 0x7ffd_0000];
        assert_eq!(
            thread_in(&RANGES, &registers, Some(&[0x1010]), || Some(Vec::new())),
            vec![true, false]
        );
        // Another register pointing into the runtime's text keeps it, chain or not.
        let registers = [0x5555_1000, 0x8100];
        assert_eq!(
            thread_in(&RANGES, &registers, Some(&[0x5555_1000]), stale_stack),
            vec![false, true]
        );
    }

    #[test]
    fn a_header_reads_back_and_nothing_else_is_one() {
        let h = header(AllocKind::Code, 0x10000, RELEASED);
        assert_eq!(parse_header(&h), Some((AllocKind::Code, 0x10000, RELEASED)));
        assert_eq!(parse_header(&[0u8; 64]), None);
        let mut other = h;
        other[8] = 9;
        assert_eq!(parse_header(&other), None, "another version");
        assert_eq!(parse_header(&h[..32]), None, "too short");
    }
}
