//! Making the mutatee do things: injected system calls and function calls (`dlopen` of a
//! library) run by one stopped thread while the others stay stopped. The memory they need
//! comes from `pools.rs`.
//!
//! **An injection survives gsh's death at any instant.** A thread running injected code must
//! never depend on the tracer to get back to what it was doing: gsh can be SIGKILLed at any
//! moment, and the kernel then resumes the thread untraced. So the thread's own state is never
//! held only in gsh's memory. Before changing a register, gsh writes a *frame* on the thread's
//! stack (below the red zone): the call's target and arguments, and the registers the thread
//! must resume with. Then one `PTRACE_SETREGS` changes only `rip` and `rsp`, to the *stub* (in
//! a code pool) and the frame. The stub saves the vector state (`xsave`, the area sized by
//! `cpuid`), makes the call or the system call, restores the vector state, announces the end
//! with a `getpid` system call, then restores every general register from the frame and
//! returns with `iretq`, which sets `rip`, `rflags` and `rsp` at once. Traced, gsh resumes the
//! thread with `PTRACE_SYSCALL` and takes it back at that `getpid`'s entry stop: it skips the
//! call and puts the registers back itself. Untraced, the stub finishes on its own; the
//! `getpid` harms nothing, and neither does a syscall stop the tracer died in
//! (`PTRACE_O_TRACESYSGOOD`, see `ptrace::OPTIONS`). No `int3` is ever left in the thread's
//! path, since an untraced `int3` kills the process with SIGTRAP.
//!
//! A thread stopped inside a system call holds `orig_rax` and a `-ERESTART*` value that make
//! the kernel restart the call when the thread resumes from its stop. The frame holds the
//! registers as they are after that restart (`resumed`), so the untraced path restarts the
//! call too; traced, gsh puts back the exact registers once the thread is in an ordinary
//! interrupt stop again, where the kernel's own restart applies.
//!
//! Since the stub needs no tracer, an interrupt (Ctrl-C during `load library`,
//! `Process::with_call_interrupt`) need not abandon a call half done: gsh stops the thread in
//! an interrupt stop, resumes every thread without tracing its system calls, and the call and
//! the stub finish on their own.
//!
//! A function call runs only in a thread outside libc's allocator and the dynamic linker
//! (`thread_for_call`): the call may allocate, and glibc's `malloc` takes no lock in a process
//! of one thread, so a call injected into a thread stopped inside `malloc` ran `malloc` again
//! over a half-updated heap (the call crashed with SIGSEGV, or the program aborted later).
//! While every thread is inside one, the program runs on a moment and is stopped again.
//! System calls need no such care.
//!
//! Before a pool holds the stub (the `mmap` of the first pools), a stub is written, for one
//! system call at a time, where an executable mapping has room the program never runs: past
//! the end of a module's executable segment in its last page (`code_slack`), then put back.
//! Only where no module has that room are the bytes at the thread's `rip` borrowed for
//! `syscall; int3`, the old way that a gsh dying then would leave fatal.

use std::path::Path;
use std::time::{Duration, Instant};

use object::{Object, ObjectSymbol};

use super::control::{is_fault, Process};
use super::error::ProcessError;
use super::ptrace::{self, WaitEvent, SI_KERNEL, SYSCALL_STOP};
use super::{AllocKind, State, ThreadState};

/// An injected call that runs longer than this is abandoned (it may be waiting for a lock a
/// stopped thread holds).
const CALL_DEADLINE: Duration = Duration::from_secs(10);

/// What the first injected system call borrows the thread's `rip` for.
const BORROWED: [u8; 3] = [0x0f, 0x05, 0xcc];

/// The system call that tells gsh the stub is done (`getpid`: no effect, cannot fail).
const DONE_SYSCALL: u64 = libc::SYS_getpid as u64;
/// `__NR_restart_syscall`, what the kernel restarts an `-ERESTART_RESTARTBLOCK` call with.
const RESTART_SYSCALL: u64 = libc::SYS_restart_syscall as u64;

/// The frame's layout, in bytes from its start (the `rsp` the stub starts with, 64-aligned).
mod frame {
    /// The function to call, or the system call's number.
    pub const TARGET: i32 = 0;
    /// Six arguments, in the order of `rdi rsi rdx rcx|r10 r8 r9`.
    pub const ARGS: i32 = 8;
    /// Where the stub keeps the result.
    pub const RESULT: i32 = 56;
    /// The general registers the thread resumes with, in `GPRS` order.
    pub const GPRS: i32 = 64;
    /// `iretq`'s frame: `rip cs rflags rsp ss`.
    pub const IRET: i32 = GPRS + 8 * 15;
    /// The vector-state save area (64-aligned).
    pub const SAVE: i32 = 256;
    /// The XSAVE header bytes (`XCOMP_BV` and reserved) that must be zero for `xrstor`.
    pub const SAVE_HEADER_END: usize = 576;
}

/// How the stub saves the vector state, chosen by the CPU (`cpuid`), same for every process.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum SaveInsn {
    /// `xsave64`/`xrstor64` of every component XCR0 enables; the area is this many bytes.
    Xsave(u32),
    /// `fxsave64`/`fxrstor64` (x87 and SSE) where the OS does not enable XSAVE: 512 bytes.
    Fxsave,
}

impl Stub {
    /// An address inside the stub (its system call entry), to tell which pool holds it.
    pub(super) fn inside(&self) -> u64 {
        self.syscall
    }

    /// The stub's code at `at`, and where its parts are.
    fn at(at: u64, save: SaveInsn) -> Result<(Stub, Vec<u8>), iced_x86::IcedError> {
        let (code, syscall, call, done) = assemble_stub(at, save)?;
        Ok((
            Stub {
                syscall,
                call,
                done,
                save,
            },
            code,
        ))
    }
}

impl SaveInsn {
    fn of_this_cpu() -> SaveInsn {
        use std::arch::x86_64::__cpuid_count;
        let leaf1 = __cpuid_count(1, 0);
        // XSAVE (bit 26) supported and enabled by the OS (OSXSAVE, bit 27).
        if leaf1.ecx & (3 << 26) == 3 << 26 {
            SaveInsn::Xsave(__cpuid_count(0xd, 0).ebx)
        } else {
            SaveInsn::Fxsave
        }
    }

    fn size(self) -> u64 {
        match self {
            SaveInsn::Xsave(n) => u64::from(n).max(frame::SAVE_HEADER_END as u64),
            SaveInsn::Fxsave => 512,
        }
    }
}

/// The injection stub in a code pool: where its entries and its end announcement are.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Stub {
    /// Entry for a system call: `rsp` at the frame.
    syscall: u64,
    /// Entry for a function call: `rsp` at the frame.
    call: u64,
    /// Right after the announcing `syscall` instruction: the `rip` of its entry stop.
    done: u64,
    save: SaveInsn,
}

/// The general registers the stub restores, in the frame's order.
fn gprs(r: &libc::user_regs_struct) -> [u64; 15] {
    [
        r.r15, r.r14, r.r13, r.r12, r.rbp, r.rbx, r.r11, r.r10, r.r9, r.r8, r.rax, r.rcx, r.rdx,
        r.rsi, r.rdi,
    ]
}

/// The stub's code, assembled at `ip`: (bytes, syscall entry, call entry, done).
fn assemble_stub(ip: u64, save: SaveInsn) -> Result<(Vec<u8>, u64, u64, u64), iced_x86::IcedError> {
    use iced_x86::code_asm::*;
    use iced_x86::BlockEncoderOptions;
    let mut a = CodeAssembler::new(64)?;
    let mut syscall_entry = a.create_label();
    let mut call_entry = a.create_label();
    let mut tail = a.create_label();
    let mut done = a.create_label();
    let gpr_order = [
        r15, r14, r13, r12, rbp, rbx, r11, r10, r9, r8, rax, rcx, rdx, rsi, rdi,
    ];

    // System call: number and arguments from the frame; `syscall` keeps vector registers.
    a.set_label(&mut syscall_entry)?;
    a.mov(rax, qword_ptr(rsp + frame::TARGET))?;
    for (i, reg) in [rdi, rsi, rdx, r10, r8, r9].into_iter().enumerate() {
        a.mov(reg, qword_ptr(rsp + frame::ARGS + 8 * i as i32))?;
    }
    a.syscall()?;
    a.mov(qword_ptr(rsp + frame::RESULT), rax)?;
    a.jmp(tail)?;

    // Function call: save the vector state, call with `rsp` 16-aligned, restore it.
    a.set_label(&mut call_entry)?;
    let every = |a: &mut CodeAssembler| -> Result<(), IcedError> {
        a.mov(eax, -1i32)?;
        a.mov(edx, -1i32)
    };
    match save {
        SaveInsn::Xsave(_) => {
            every(&mut a)?;
            a.xsave64(ptr(rsp + frame::SAVE))?;
        }
        SaveInsn::Fxsave => a.fxsave64(ptr(rsp + frame::SAVE))?,
    }
    for (i, reg) in [rdi, rsi, rdx, rcx, r8, r9].into_iter().enumerate() {
        a.mov(reg, qword_ptr(rsp + frame::ARGS + 8 * i as i32))?;
    }
    a.xor(eax, eax)?;
    a.cld()?;
    a.call(qword_ptr(rsp + frame::TARGET))?;
    a.mov(qword_ptr(rsp + frame::RESULT), rax)?;
    match save {
        SaveInsn::Xsave(_) => {
            every(&mut a)?;
            a.xrstor64(ptr(rsp + frame::SAVE))?;
        }
        SaveInsn::Fxsave => a.fxrstor64(ptr(rsp + frame::SAVE))?,
    }

    // Announce the end with the result in rdi, then resume the thread as it was.
    a.set_label(&mut tail)?;
    a.mov(rdi, qword_ptr(rsp + frame::RESULT))?;
    a.mov(eax, DONE_SYSCALL as u32)?;
    a.syscall()?;
    a.set_label(&mut done)?;
    for (i, reg) in gpr_order.into_iter().enumerate() {
        a.mov(reg, qword_ptr(rsp + frame::GPRS + 8 * i as i32))?;
    }
    a.lea(rsp, ptr(rsp + frame::IRET))?;
    a.iretq()?;

    let out = a.assemble_options(ip, BlockEncoderOptions::RETURN_NEW_INSTRUCTION_OFFSETS)?;
    let at = |l: &CodeLabel| out.label_ip(l);
    Ok((
        out.inner.code_buffer.clone(),
        at(&syscall_entry)?,
        at(&call_entry)?,
        at(&done)?,
    ))
}

/// The registers thread `saved` resumes with once the kernel has applied its restart of an
/// interrupted system call (x86 `arch_do_signal_or_restart` with no handler), and with
/// `orig_rax = -1` so nothing restarts it again.
fn resumed(saved: &libc::user_regs_struct) -> libc::user_regs_struct {
    const ERESTARTSYS: i64 = -512;
    const ERESTARTNOINTR: i64 = -513;
    const ERESTARTNOHAND: i64 = -514;
    const ERESTART_RESTARTBLOCK: i64 = -516;
    let mut r = *saved;
    if saved.orig_rax as i64 != -1 {
        match saved.rax as i64 {
            ERESTARTSYS | ERESTARTNOINTR | ERESTARTNOHAND => {
                r.rax = saved.orig_rax;
                r.rip = saved.rip.wrapping_sub(2);
            }
            ERESTART_RESTARTBLOCK => {
                r.rax = RESTART_SYSCALL;
                r.rip = saved.rip.wrapping_sub(2);
            }
            _ => {}
        }
    }
    r.orig_rax = u64::MAX;
    r
}

/// The registers stopped thread `tid` must resume with once gsh has run injected code on it.
/// Its registers now, except at a fork, vfork or clone event stop: the thread is inside that
/// system call, which the kernel finishes as soon as the thread runs (the injected run), and
/// what the thread must then see is the call's result, the child's id, not the `-ENOSYS` its
/// `rax` holds at the stop. A halt holds a thread creating a thread at its clone event;
/// injected code run there made glibc's `clone3` seem to fail with ENOSYS, glibc created the
/// thread a second time with `clone`, and the two threads on one stack crashed the program.
fn registers_to_restore(tid: i32) -> Result<libc::user_regs_struct, ProcessError> {
    let mut r = ptrace::regs(tid)?;
    let info = ptrace::siginfo(tid)?;
    let event = info.si_code >> 8;
    if info.si_signo == libc::SIGTRAP
        && info.si_code & 0xff == libc::SIGTRAP
        && matches!(
            event,
            libc::PTRACE_EVENT_CLONE | libc::PTRACE_EVENT_FORK | libc::PTRACE_EVENT_VFORK
        )
    {
        r.rax = ptrace::event_msg(tid)?;
    }
    Ok(r)
}

/// How many times gsh lets the program run a moment ([`SAFE_POINT_RUN`]) for a thread to
/// leave the allocator or the dynamic linker before it injects a function call.
const SAFE_POINT_TRIES: u32 = 200;
/// How long the program runs between two looks for a thread at a safe point.
const SAFE_POINT_RUN: Duration = Duration::from_micros(300);

/// The system calls glibc's allocator makes (a thread in one may be inside `malloc`).
const ALLOCATOR_SYSCALLS: [i64; 8] = [
    libc::SYS_brk,
    libc::SYS_mmap,
    libc::SYS_munmap,
    libc::SYS_mremap,
    libc::SYS_mprotect,
    libc::SYS_madvise,
    libc::SYS_futex,
    libc::SYS_getrandom,
];

/// glibc's allocator functions, the exported ones; the code between them (`_int_malloc`,
/// `sysmalloc` and the rest of `malloc.o`, which are not exported) is the allocator too.
const ALLOCATOR_FUNCTIONS: [&str; 17] = [
    "malloc",
    "free",
    "calloc",
    "realloc",
    "memalign",
    "aligned_alloc",
    "posix_memalign",
    "valloc",
    "pvalloc",
    "malloc_trim",
    "malloc_usable_size",
    "mallinfo",
    "mallinfo2",
    "malloc_stats",
    "mallopt",
    "malloc_info",
    "__default_morecore",
];

/// How many words from a thread's `rsp` up are looked at for a return address into the
/// allocator or the dynamic linker: those of a leaf that `malloc` calls (`memset`, `__brk`,
/// `__mmap`, `__lll_lock_wait`), whose frames hold little more than their return address.
const RETURN_WORDS: usize = 4;

/// How long gsh waits for a thread it interrupted to stop. An interrupt stops any thread that
/// is not in an uninterruptible sleep within microseconds; past this, gsh reports it.
const STOP_DEADLINE: Duration = Duration::from_secs(5);

/// For tests that kill gsh at the worst moment: with `GSH_TEST_PAUSE_INJECTED=MS` in the
/// environment, gsh says so on stderr and sleeps MS milliseconds each time a thread holds
/// injected registers and has not yet run any of the injected code.
fn test_pause(what: &str, tid: i32) {
    static PAUSE: std::sync::OnceLock<Option<u64>> = std::sync::OnceLock::new();
    let pause = PAUSE.get_or_init(|| {
        std::env::var("GSH_TEST_PAUSE_INJECTED")
            .ok()
            .and_then(|v| v.parse().ok())
    });
    if let Some(ms) = *pause {
        eprintln!("gsh: test pause: {what} on thread {tid}");
        std::thread::sleep(Duration::from_millis(ms));
    }
}

/// For the tests that show what the choice of a thread outside the allocator prevents: with
/// `GSH_TEST_UNCHECKED_CALLS=1` in the environment, a function call runs on the first stopped
/// thread wherever it is, as before that choice.
fn unchecked_calls() -> bool {
    static UNCHECKED: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *UNCHECKED
        .get_or_init(|| std::env::var_os("GSH_TEST_UNCHECKED_CALLS").is_some_and(|v| v == "1"))
}

/// How an injected run ends.
#[derive(Clone, Copy)]
enum End {
    /// The borrowed `syscall; int3` traps with `rip` here.
    Trap(u64),
    /// The stub announces its end: a `getpid` entry stop at `done` with `rsp` at `frame`.
    /// When `may_finish_alone` (a call through a pool's stub, which stays), an interrupt
    /// (`Process::with_call_interrupt`) lets the call finish in the process on its own.
    Announced {
        done: u64,
        frame: u64,
        may_finish_alone: bool,
    },
}

impl End {
    /// Resumes the injected thread so that the end is seen.
    fn resume(self, tid: i32) -> Result<(), ProcessError> {
        match self {
            End::Trap(_) => ptrace::cont(tid, 0),
            End::Announced { .. } => ptrace::cont_to_syscall(tid),
        }
    }
}

/// What one stop of a thread running injected code means.
enum Seen {
    /// The injected run ended: the thread's registers there.
    Ended(Box<libc::user_regs_struct>),
    /// An interrupt stop (`PTRACE_EVENT_STOP`).
    Interrupted,
    /// Anything else, dealt with: the thread is to run on.
    RunOn,
}

/// How an injected run came out.
enum Ran {
    /// It ended; the thread is stopped there with these registers.
    Ended(Box<libc::user_regs_struct>),
    /// Interrupted (`Process::with_call_interrupt`): the thread, in an interrupt stop, is to
    /// finish the call and the stub on its own.
    LeftToFinish,
}

impl Ran {
    /// The registers at the end; an error for a run left to finish alone.
    fn ended(self, what: &str, tid: i32) -> Result<libc::user_regs_struct, ProcessError> {
        match self {
            Ran::Ended(r) => Ok(*r),
            Ran::LeftToFinish => Err(ProcessError::Inject {
                what: what.to_owned(),
                tid,
                detail: "interrupted; it finishes in the process on its own".into(),
            }),
        }
    }
}

impl Process {
    /// The injection stub, mapping a small code pool for it on first use.
    fn stub(&mut self, near: u64) -> Result<Stub, ProcessError> {
        if let Some(s) = self.pools.stub {
            return Ok(s);
        }
        let save = SaveInsn::of_this_cpu();
        let pid = self.pid;
        let fail = move |e: iced_x86::IcedError| ProcessError::Inject {
            what: "the injection stub".into(),
            tid: pid,
            detail: e.to_string(),
        };
        let len = assemble_stub(0, save).map_err(fail)?.0.len() as u64;
        let at = self.allocate(near, len, AllocKind::Code)?;
        let (s, code) = Stub::at(at, save).map_err(fail)?;
        self.mem.write(at, &code)?;
        self.pools.stub = Some(s);
        Ok(s)
    }

    /// Room for `len` bytes of code in an executable mapping that the program never runs:
    /// the rest of the last page of a module's executable segment, past the segment's end.
    fn code_slack(&mut self, len: u64) -> Result<Option<u64>, ProcessError> {
        for m in self.modules()? {
            for end in self.exec_segment_ends(m.base, m.bias) {
                let at = end.next_multiple_of(16);
                if let Some(r) = m.text.iter().find(|r| r.contains(&end)) {
                    if at + len <= r.end {
                        return Ok(Some(at));
                    }
                }
            }
        }
        Ok(None)
    }

    /// The runtime ends of the executable `PT_LOAD` segments of the module mapped at `base`
    /// with `bias`, by the ELF header and program headers as mapped (not the file, which may
    /// differ). None when they cannot be read.
    ///
    /// `object`'s ELF header reader, not `crate::elf::Binary`: a `Binary` is a whole file,
    /// validated with its section headers (at the file's end, never mapped) and every
    /// section's bytes, where the process holds only the first page's headers.
    fn exec_segment_ends(&self, base: u64, bias: u64) -> Vec<u64> {
        use object::read::elf::{FileHeader, ProgramHeader};
        type Header = object::elf::FileHeader64<object::Endianness>;
        let ehdr_len = std::mem::size_of::<Header>();
        let Some(head) = self.mem.read(base, ehdr_len).ok() else {
            return Vec::new();
        };
        let Ok(ehdr) = Header::parse(&*head) else {
            return Vec::new();
        };
        let Ok(endian) = ehdr.endian() else {
            return Vec::new();
        };
        // The header with its program header table, as one image from the module's start.
        let table_end = ehdr
            .e_phoff(endian)
            .saturating_add(u64::from(ehdr.e_phnum(endian)) * u64::from(ehdr.e_phentsize(endian)));
        if table_end > 64 << 10 {
            return Vec::new();
        }
        let Ok(image) = self.mem.read(base, table_end as usize) else {
            return Vec::new();
        };
        let Ok(phdrs) = ehdr.program_headers(endian, &*image) else {
            return Vec::new();
        };
        phdrs
            .iter()
            .filter(|ph| {
                ph.p_type(endian) == object::elf::PT_LOAD
                    && ph.p_flags(endian) & object::elf::PF_X != 0
            })
            .map(|ph| {
                bias.wrapping_add(ph.p_vaddr(endian))
                    .wrapping_add(ph.p_memsz(endian))
            })
            .collect()
    }

    /// Whether a thread can run injected code now (one is plainly stopped, no stop of its
    /// own still to handle): else a call or system call fails saying why.
    pub fn can_inject(&self) -> bool {
        self.inject_thread().is_ok()
    }

    /// The thread injections run on: the leader when it is plainly stopped, else another.
    fn inject_thread(&self) -> Result<i32, ProcessError> {
        let usable = |tid: &i32| {
            self.threads
                .get(tid)
                .is_some_and(|t| t.state == ThreadState::Stopped && !t.job)
                && !self.deferred.iter().any(|(d, _)| d == tid)
        };
        if usable(&self.pid) {
            return Ok(self.pid);
        }
        self.threads
            .keys()
            .copied()
            .find(usable)
            .ok_or_else(|| ProcessError::Inject {
                what: "code".into(),
                tid: self.pid,
                detail: self.why_no_inject_thread(),
            })
    }

    /// The code ranges a thread lending itself to an injected *function call* must not be
    /// in: the dynamic linker's (a thread inside `dlopen` or a lazy binding) and libc's
    /// allocator. An injected call may allocate (`dlopen` does, and so may any function a
    /// snippet calls); glibc's `malloc` takes no lock while the process has one thread, so a
    /// call injected into a thread stopped inside `malloc` runs `malloc` again over a heap
    /// half updated: the heap is corrupted, the call crashes with SIGSEGV or the program
    /// aborts later ("malloc(): unsorted double linked list corrupted"). With several threads
    /// the same thread would wait for a lock it holds itself. Found once per process.
    fn unsafe_code(&mut self) -> Result<Vec<(u64, u64, &'static str)>, ProcessError> {
        if let Some(u) = &self.pools.unsafe_code {
            return Ok(u.clone());
        }
        let base = super::maps::auxv(self.pid)?
            .get(&libc::AT_BASE)
            .copied()
            .unwrap_or(0);
        let mut out = Vec::new();
        for m in self.modules()? {
            if base != 0 && m.base == base {
                out.extend(
                    m.text
                        .iter()
                        .map(|t| (t.start, t.end, "the dynamic linker")),
                );
                continue;
            }
            let is_libc = m
                .path
                .file_name()
                .is_some_and(|f| f.to_string_lossy().starts_with("libc.so"));
            if !is_libc {
                continue;
            }
            let Ok(data) = std::fs::read(&m.path) else {
                continue;
            };
            let Ok(file) = object::File::parse(&*data) else {
                continue;
            };
            // Every exported function's start, sorted: the allocator runs from the end of
            // the last other function before its first one to the start of the first other
            // function after its last one.
            let mut starts: Vec<(u64, u64, bool)> = file
                .dynamic_symbols()
                .filter(|s| s.kind() == object::SymbolKind::Text && s.address() != 0)
                .map(|s| {
                    let alloc = s.name().is_ok_and(|n| ALLOCATOR_FUNCTIONS.contains(&n));
                    (s.address(), s.address() + s.size(), alloc)
                })
                .collect();
            starts.sort();
            let first = starts.iter().position(|s| s.2);
            let last = starts.iter().rposition(|s| s.2);
            if let (Some(first), Some(last)) = (first, last) {
                let lo = starts[..first]
                    .iter()
                    .rev()
                    .find(|s| s.0 < starts[first].0)
                    .map_or(starts[first].0, |s| s.1);
                let hi = starts[last + 1..]
                    .iter()
                    .find(|s| s.0 > starts[last].0 && !s.2)
                    .map_or(starts[last].1, |s| s.0);
                out.push((
                    m.bias.wrapping_add(lo),
                    m.bias.wrapping_add(hi),
                    "libc's allocator",
                ));
            }
        }
        self.pools.unsafe_code = Some(out.clone());
        Ok(out)
    }

    /// Why stopped thread `tid` must not run an injected function call now (inside the
    /// allocator or the dynamic linker, see [`Process::unsafe_code`]), or None. A thread in
    /// a system call the allocator never makes (`read`, `epoll_wait`, `nanosleep`...) is
    /// outside it; else its `rip` and the return addresses nearest its `rsp` are looked at.
    fn inside_unsafe_code(
        &self,
        tid: i32,
        code: &[(u64, u64, &'static str)],
    ) -> Result<Option<String>, ProcessError> {
        let r = ptrace::regs(tid)?;
        let inside = |a: u64| code.iter().find(|c| c.0 <= a && a < c.1).map(|c| c.2);
        if let Some(what) = inside(r.rip) {
            return Ok(Some(format!("in {what} at {:#x}", r.rip)));
        }
        let nr = r.orig_rax as i64;
        // Only `malloc` moves the break (through `sbrk`, whose frame hides the return
        // address into the allocator from the words looked at below).
        if nr == libc::SYS_brk {
            return Ok(Some(format!("in brk, at {:#x}", r.rip)));
        }
        if nr != -1 && !ALLOCATOR_SYSCALLS.contains(&nr) {
            return Ok(None);
        }
        let Ok(words) = self.mem.read(r.rsp, RETURN_WORDS * 8) else {
            return Ok(None);
        };
        for w in words.chunks_exact(8) {
            let a = u64::from_le_bytes(w.try_into().unwrap_or_default());
            if let Some(what) = inside(a) {
                return Ok(Some(format!("called from {what} (return address {a:#x})")));
            }
        }
        Ok(None)
    }

    /// A thread that can run an injected function call: stopped plainly (as
    /// [`Process::thread_for_injection`]) and outside the allocator and the dynamic linker.
    /// While every such thread is inside one, the program runs a moment and is stopped again,
    /// up to [`SAFE_POINT_TRIES`] times; then the call is refused, the program untouched.
    fn thread_for_call(&mut self, what: &str) -> Result<i32, ProcessError> {
        let code = self.unsafe_code()?;
        // Where an attach met in the start-up leaves the program (`startup.rs`): the link map
        // consistent, libc initialised, the point debuggers are told to use. Running on from
        // there meets gsh's own rendezvous hook, a stop only the hooks can handle.
        let r_brk = self
            .find_r_debug()
            .ok()
            .flatten()
            .and_then(|d| self.read_u64(d + 16).ok())
            .filter(|a| *a != 0);
        let mut why = String::new();
        for _ in 0..SAFE_POINT_TRIES {
            let first = self.thread_for_injection()?;
            let mut candidates = vec![first];
            candidates.extend(
                self.threads
                    .iter()
                    .filter(|(t, s)| **t != first && s.state == ThreadState::Stopped && !s.job)
                    .map(|(t, _)| *t)
                    .filter(|t| !self.deferred.iter().any(|(d, _)| d == t)),
            );
            for tid in candidates {
                let at_r_brk = ptrace::regs(tid).is_ok_and(|r| Some(r.rip) == r_brk);
                match if at_r_brk {
                    None
                } else {
                    self.inside_unsafe_code(tid, &code)?
                } {
                    None => {
                        if tid == first || !self.surface_pending_trap(tid)? {
                            return Ok(tid);
                        }
                    }
                    Some(w) => why = format!("thread {tid} was {w}"),
                }
            }
            // Every thread is where a call must not run: let them run on a moment.
            self.resume()?;
            std::thread::sleep(SAFE_POINT_RUN);
            self.halt()?;
        }
        Err(ProcessError::Inject {
            what: what.to_owned(),
            tid: self.pid,
            detail: format!(
                "no thread left the allocator or the dynamic linker in {SAFE_POINT_TRIES} \
                 tries (last: {why}); a call injected there would corrupt the heap, so none \
                 was; try again"
            ),
        })
    }

    /// Lets threads whose stop still to handle is a signal sent to them (`kill`, `raise`,
    /// `sigqueue`) or one that is no fault (a child's SIGCHLD, whose `si_code` is the kernel's
    /// `CLD_*`: a program that forks all the time had its only thread caught at one by nearly
    /// every halt) lend themselves to injected code: the signal is kept for its thread
    /// (`signals.rs`) and reaches the program when it runs again, as one that comes during an
    /// injected run. A program that signals itself often had every thread caught at such a
    /// stop by the halt, and no thread could run a call. A fault or a trap stays a stop for
    /// the hooks; the dynamic linker's hook passed on the way (a program in its start-up) is
    /// noted as an injected run notes it, its signal dropped.
    fn keep_deferred_signals(&mut self) -> Result<(), ProcessError> {
        let deferred = std::mem::take(&mut self.deferred);
        for (tid, ev) in deferred {
            match ev {
                WaitEvent::Signal(sig) if self.is_rendezvous_signal(tid, sig) => {
                    self.note_rendezvous()?;
                }
                WaitEvent::Signal(sig)
                    if sig != libc::SIGTRAP
                        && sig != SYSCALL_STOP
                        && (!is_fault(sig)
                            || ptrace::fault(tid).is_ok_and(|(code, _)| code <= 0)) =>
                {
                    self.keep_signal(tid, sig);
                }
                _ => self.deferred.push_back((tid, ev)),
            }
        }
        Ok(())
    }

    /// [`Process::inject_thread`], once it has no SIGTRAP queued: one that has takes it first,
    /// as a deferred stop (`stale.rs`), and another is chosen.
    fn thread_for_injection(&mut self) -> Result<i32, ProcessError> {
        self.keep_deferred_signals()?;
        loop {
            let tid = self.inject_thread()?;
            if !self.surface_pending_trap(tid)? {
                return Ok(tid);
            }
        }
    }

    /// Why no thread can run injected code, with what to do.
    fn why_no_inject_thread(&self) -> String {
        let job = self.threads.values().filter(|t| t.job).count();
        if job > 0 && job == self.threads.len() {
            return "every thread is in a job-control stop (SIGSTOP or a terminal stop); \
                    send it SIGCONT and try again"
                .into();
        }
        let stops: Vec<String> = self
            .deferred
            .iter()
            .map(|(tid, ev)| format!("thread {tid}: {ev:?}"))
            .collect();
        format!(
            "no thread is stopped in a state that can run injected code ({} threads: {} in a \
             job-control stop, {} with a stop still to handle{}); let it run (`continue &`) \
             and try again",
            self.threads.len(),
            job,
            self.deferred.len(),
            if stops.is_empty() {
                String::new()
            } else {
                format!(": {}", stops.join(", "))
            }
        )
    }

    /// Runs `f` with every thread stopped, restoring the running state afterwards.
    pub(super) fn stopped<R>(
        &mut self,
        f: impl FnOnce(&mut Process) -> Result<R, ProcessError>,
    ) -> Result<R, ProcessError> {
        let was_running = self.state == State::Running;
        if was_running {
            self.halt()?;
        }
        let r = f(self);
        if was_running && self.state.is_alive() {
            self.resume()?;
        }
        r
    }

    /// Executes system call `nr` with `args` (at most 6) in a stopped thread; returns the raw
    /// result (`-errno` on failure).
    pub fn syscall(&mut self, nr: i64, args: &[u64]) -> Result<i64, ProcessError> {
        self.alive("injecting a syscall")?;
        if args.len() > 6 {
            return Err(ProcessError::Inject {
                what: format!("syscall {nr}"),
                tid: self.pid,
                detail: "a syscall takes at most 6 arguments".into(),
            });
        }
        let what = format!("syscall {nr}");
        self.stopped(|p| match p.pools.stub {
            Some(stub) => p.through_stub(stub, false, nr as u64, args, &what),
            None => p.first_syscall(nr, args, &what),
        })
        .map(|r| r as i64)
    }

    /// A system call before the stub has a pool: through a stub written for it where an
    /// executable mapping has room the program never runs (see `code_slack`), put back after.
    /// Else the bytes at the thread's `rip` are borrowed.
    fn first_syscall(&mut self, nr: i64, args: &[u64], what: &str) -> Result<u64, ProcessError> {
        let save = SaveInsn::of_this_cpu();
        let len = assemble_stub(0, save)
            .map(|c| c.0.len() as u64)
            .unwrap_or(u64::MAX);
        let Some(at) = self.code_slack(len)? else {
            return self.borrowed_syscall(nr, args, what);
        };
        let Ok((stub, code)) = Stub::at(at, save) else {
            return self.borrowed_syscall(nr, args, what);
        };
        let before = self.mem.read(at, code.len())?;
        self.mem.write(at, &code)?;
        let r = self.through_stub(stub, false, nr as u64, args, what);
        if self.state.is_alive() {
            self.mem.write(at, &before)?;
        }
        r
    }

    /// The first system call where no module has room for the stub: `syscall; int3` over
    /// the bytes at the thread's `rip`, put back afterwards.
    fn borrowed_syscall(&mut self, nr: i64, args: &[u64], what: &str) -> Result<u64, ProcessError> {
        let tid = self.thread_for_injection()?;
        let saved = registers_to_restore(tid)?;
        let at = saved.rip;
        let bytes = self.mem.read(at, BORROWED.len())?;
        self.mem.write(at, &BORROWED)?;
        let mut r = resumed(&saved);
        r.rip = at;
        r.rax = nr as u64;
        let mut a = [0u64; 6];
        a[..args.len()].copy_from_slice(args);
        (r.rdi, r.rsi, r.rdx, r.r10, r.r8, r.r9) = (a[0], a[1], a[2], a[3], a[4], a[5]);
        let result = self.run_injected(tid, &r, End::Trap(at + 3), what);
        if self.state.is_alive() {
            self.mem.write(at, &bytes)?;
        }
        let out = result?.ended(what, tid)?;
        ptrace::set_regs(tid, &saved)?;
        Ok(out.rax)
    }

    /// Calls the function at `func` with integer `args` (at most 6) on a stopped thread, on
    /// its own stack below the red zone, through the stub; returns `rax`.
    pub fn call(&mut self, func: u64, args: &[u64]) -> Result<u64, ProcessError> {
        self.alive("injecting a call")?;
        if args.len() > 6 {
            return Err(ProcessError::Inject {
                what: format!("call of {func:#x}"),
                tid: self.pid,
                detail: "gsh passes at most 6 arguments, in registers".into(),
            });
        }
        let what = format!("call of {}", self.describe_address(func));
        self.call_named(&what, func, args)
    }

    /// [`Process::call`], its errors naming the call `what` (`dlopen of /x/libgsh_rt.so`).
    pub fn call_named(&mut self, what: &str, func: u64, args: &[u64]) -> Result<u64, ProcessError> {
        self.alive("injecting a call")?;
        if args.len() > 6 {
            return Err(ProcessError::Inject {
                what: what.to_owned(),
                tid: self.pid,
                detail: "gsh passes at most 6 arguments, in registers".into(),
            });
        }
        self.stopped(|p| {
            let stub = p.stub(func)?;
            p.through_stub(stub, true, func, args, what)
        })
    }

    /// Runs `stub` on a stopped thread, a function call of `target` when `call` (with a
    /// vector save area in the frame), else system call `target`, with `args`; returns the
    /// result the stub announces. Every register, vector ones included, is as it was
    /// afterwards, whether gsh lives or not.
    fn through_stub(
        &mut self,
        stub: Stub,
        call: bool,
        target: u64,
        args: &[u64],
        what: &str,
    ) -> Result<u64, ProcessError> {
        let tid = if call && !unchecked_calls() {
            self.thread_for_call(what)?
        } else {
            self.thread_for_injection()?
        };
        let saved = registers_to_restore(tid)?;
        // The called function may use any vector register (dlopen's string functions do);
        // the stub puts them back, and so does gsh, with the rest, once it has the thread.
        let vectors = ptrace::vector_state(tid)?;
        let resume = resumed(&saved);
        let (entry, save) = if call {
            (stub.call, stub.save.size())
        } else {
            (stub.syscall, 0)
        };
        // Below the red zone, 64-aligned for the save area; the callee's stack starts below.
        let len = frame::SAVE as u64 + save;
        let at = (saved.rsp.wrapping_sub(256 + len)) & !63;
        let mut bytes =
            vec![0u8; frame::SAVE as usize + (save as usize).min(frame::SAVE_HEADER_END)];
        let mut put = |off: i32, v: u64| {
            bytes[off as usize..off as usize + 8].copy_from_slice(&v.to_le_bytes());
        };
        put(frame::TARGET, target);
        for (i, v) in args.iter().enumerate() {
            put(frame::ARGS + 8 * i as i32, *v);
        }
        for (i, v) in gprs(&resume).into_iter().enumerate() {
            put(frame::GPRS + 8 * i as i32, v);
        }
        for (i, v) in [resume.rip, saved.cs, resume.eflags, resume.rsp, saved.ss]
            .into_iter()
            .enumerate()
        {
            put(frame::IRET + 8 * i as i32, v);
        }
        self.mem.write(at, &bytes)?;
        // From here the thread needs gsh no more: its state is in the frame.
        let mut r = resume;
        r.rip = entry;
        r.rsp = at;
        let end = End::Announced {
            done: stub.done,
            frame: at,
            may_finish_alone: call && self.pools.stub.is_some(),
        };
        let result = match self.run_injected(tid, &r, end, what) {
            Ok(Ran::LeftToFinish) => {
                // Interrupted: the thread, stopped somewhere in the call, finishes it and the
                // stub on its own, with every other thread running too.
                self.resume()?;
                return Err(ProcessError::Inject {
                    what: what.to_owned(),
                    tid,
                    detail: "interrupted; the call finishes in the process on its own, which \
                             runs on (`halt` stops it)"
                        .into(),
                });
            }
            r => r.and_then(|ran| ran.ended(what, tid)),
        };
        // A crash says where the thread had been stopped before it was lent (in which
        // function, in which system call), which is what tells why the call could not run.
        let result = result.map_err(|e| match e {
            ProcessError::Inject {
                what,
                tid,
                mut detail,
            } if detail.starts_with("it crashed") => {
                detail.push_str(&format!(
                    "; the thread had been stopped at {} with rsp={:#x}{}",
                    self.describe_address(saved.rip),
                    saved.rsp,
                    match saved.orig_rax as i64 {
                        -1 => String::new(),
                        nr => format!(", in system call {nr}"),
                    }
                ));
                ProcessError::Inject { what, tid, detail }
            }
            e => e,
        });
        if self.state.is_alive() {
            // At the announcement the stub has put the vector state back; gsh takes the
            // thread back to an ordinary stop, then writes the exact registers.
            if result.is_ok() {
                self.settle(tid, &resume, what)?;
            }
            ptrace::set_regs(tid, &saved)?;
            ptrace::set_vector_state(tid, &vectors)?;
        }
        Ok(result?.rdi)
    }

    /// Runs `f` with `flag` as the interrupt of injected calls: once it is set, a call
    /// through the stub is not waited for any longer; the call finishes in the process on
    /// its own (the stub needs no tracer), every thread runs on, and the call's result is an
    /// error saying so. A call that ends while gsh stops its thread is finished as usual.
    /// For Ctrl-C during `load library`.
    pub fn with_call_interrupt<R>(
        &mut self,
        flag: std::sync::Arc<std::sync::atomic::AtomicBool>,
        f: impl FnOnce(&mut Process) -> R,
    ) -> R {
        let before = self.pools.call_interrupt.replace(flag);
        let r = f(self);
        self.pools.call_interrupt = before;
        r
    }

    fn call_interrupted(&self) -> bool {
        self.pools
            .call_interrupt
            .as_ref()
            .is_some_and(|f| f.load(std::sync::atomic::Ordering::SeqCst))
    }

    /// Brings thread `tid`, running injected code (or stopped where `PTRACE_CONT` lets it
    /// run on correctly, when `stopped`), to an interrupt stop, the stop from which it runs
    /// on correctly whether gsh traces it further or not. When the injected run reaches
    /// `end` first, the thread stays there and its registers are returned.
    ///
    /// The kernel ends a pending interrupt at *any* ptrace stop (`ptrace_stop` clears
    /// `JOBCTL_TRAP_STOP`), so a thread that stops for something else first, above all a
    /// syscall-exit stop (its system call cut short by the interrupt itself, while gsh was
    /// tracing its system calls), never reaches the interrupt stop by itself: it runs on.
    /// Hence the interrupt is sent again at every other stop before the thread is resumed.
    /// Waiting for the first interrupt alone hung gsh for good once the thread had finished
    /// the call (Ctrl-C during `load library`).
    fn interrupt_stop(
        &mut self,
        tid: i32,
        stopped: bool,
        end: Option<End>,
        what: &str,
    ) -> Result<Option<libc::user_regs_struct>, ProcessError> {
        ptrace::interrupt(tid)?;
        if stopped {
            ptrace::cont(tid, 0)?;
        }
        let started = Instant::now();
        loop {
            let ev = match ptrace::wait(tid, true) {
                Ok(Some((_, ev))) => ev,
                Ok(None) if started.elapsed() > STOP_DEADLINE => {
                    return Err(ProcessError::Inject {
                        what: what.to_owned(),
                        tid,
                        detail: format!(
                            "the thread did not stop within {} s of an interrupt",
                            STOP_DEADLINE.as_secs()
                        ),
                    });
                }
                Ok(None) => {
                    self.waker
                        .wait(Some(STOP_DEADLINE.saturating_sub(started.elapsed())));
                    continue;
                }
                Err(_) => return Err(self.lost(what)),
            };
            match self.seen(tid, ev, end, what)? {
                Seen::Ended(r) => return Ok(Some(*r)),
                Seen::Interrupted => return Ok(None),
                Seen::RunOn => {
                    ptrace::interrupt(tid)?;
                    ptrace::cont(tid, 0)?;
                }
            }
        }
    }

    /// Brings thread `tid`, at the stub's announcing syscall entry, to an interrupt stop with
    /// `resume`'s registers, each step leaving a thread that runs on correctly untraced.
    fn settle(
        &mut self,
        tid: i32,
        resume: &libc::user_regs_struct,
        what: &str,
    ) -> Result<(), ProcessError> {
        // `orig_rax = -1`: the announcing `getpid` is skipped.
        ptrace::set_regs(tid, resume)?;
        self.interrupt_stop(tid, true, None, what).map(|_| ())
    }

    /// Records that thread `tid` died with `ev` while running injected code.
    fn thread_died(&mut self, tid: i32, ev: WaitEvent, what: &str) -> ProcessError {
        // The process is exiting (exit_group, or a SIGKILL from outside). The leader's
        // status tells how, when it is the one.
        if tid == self.pid {
            self.state = match ev {
                WaitEvent::Exited(code) => State::Exited(code),
                WaitEvent::Signaled(sig) => State::Signaled(sig),
                _ => self.state,
            };
            self.threads.clear();
        } else {
            self.threads.remove(&tid);
        }
        ProcessError::Gone {
            pid: self.pid,
            during: what.to_owned(),
            how: "the thread running it died".into(),
        }
    }

    /// The process is no longer ours to wait for (`waitpid` failed): recorded as killed.
    fn lost(&mut self, what: &str) -> ProcessError {
        self.state = State::Signaled(libc::SIGKILL);
        self.threads.clear();
        self.gone(what)
    }

    /// Sets `regs` on `tid`, runs it alone until `end`, and returns its registers there. The
    /// thread is left stopped; the caller restores its registers. An interrupted call that
    /// may finish alone (see `End::Announced`) is left to, in an interrupt stop.
    fn run_injected(
        &mut self,
        tid: i32,
        regs: &libc::user_regs_struct,
        end: End,
        what: &str,
    ) -> Result<Ran, ProcessError> {
        ptrace::set_regs(tid, regs)?;
        test_pause(what, tid);
        end.resume(tid)?;
        let started = Instant::now();
        let may_finish_alone = matches!(
            end,
            End::Announced {
                may_finish_alone: true,
                ..
            }
        );
        loop {
            let ev = match ptrace::wait(tid, true) {
                Ok(Some((_, ev))) => ev,
                Ok(None) if started.elapsed() > CALL_DEADLINE => {
                    // Get the thread back (or its end, reached meanwhile) before giving up.
                    if let Some(r) = self.interrupt_stop(tid, false, Some(end), what)? {
                        return Ok(Ran::Ended(Box::new(r)));
                    }
                    return Err(ProcessError::Inject {
                        what: what.to_owned(),
                        tid,
                        detail: format!(
                            "it did not finish within {} s (waiting for a lock another, \
                             stopped thread holds?); its registers were restored",
                            CALL_DEADLINE.as_secs()
                        ),
                    });
                }
                Ok(None) if may_finish_alone && self.call_interrupted() => {
                    return Ok(match self.interrupt_stop(tid, false, Some(end), what)? {
                        Some(r) => Ran::Ended(Box::new(r)),
                        None => Ran::LeftToFinish,
                    });
                }
                Ok(None) => {
                    // In slices, so an interrupt is seen without an event.
                    self.waker.wait(Some(
                        CALL_DEADLINE
                            .saturating_sub(started.elapsed())
                            .min(Duration::from_millis(50)),
                    ));
                    continue;
                }
                Err(_) => return Err(self.lost(what)),
            };
            match self.seen(tid, ev, Some(end), what)? {
                Seen::Ended(r) => return Ok(Ran::Ended(r)),
                // A stray interrupt stop (one sent after the thread had stopped otherwise).
                Seen::Interrupted | Seen::RunOn => end.resume(tid)?,
            }
        }
    }

    /// Deals with stop `ev` of thread `tid`, which runs injected code that ends at `end`.
    /// Signals not ours are kept for the thread; a breakpoint or a fault in the injected code
    /// is an error (the caller restores the thread's registers).
    fn seen(
        &mut self,
        tid: i32,
        ev: WaitEvent,
        end: Option<End>,
        what: &str,
    ) -> Result<Seen, ProcessError> {
        let fail = |detail: String| ProcessError::Inject {
            what: what.to_owned(),
            tid,
            detail,
        };
        match ev {
            WaitEvent::Exited(_) | WaitEvent::Signaled(_) => {
                return Err(self.thread_died(tid, ev, what));
            }
            // SIGKILL from outside, or exit() inside the call: let it die, report.
            WaitEvent::Event(libc::PTRACE_EVENT_EXIT) => {}
            WaitEvent::Event(libc::PTRACE_EVENT_CLONE) => {
                if let Ok(new) = ptrace::event_msg(tid) {
                    // Unless its first stop came first (see `Process::handle`).
                    if !self.early_threads.remove(&(new as i32)) {
                        self.threads
                            .entry(new as i32)
                            .or_insert(super::control::Thread::new(ThreadState::Starting));
                    }
                }
            }
            WaitEvent::Event(_) => {}
            WaitEvent::EventStop(_) => return Ok(Seen::Interrupted),
            WaitEvent::Signal(SYSCALL_STOP) => {
                if let Some(End::Announced { done, frame, .. }) = end {
                    let r = ptrace::regs(tid)?;
                    if r.rip == done && r.rsp == frame && r.orig_rax == DONE_SYSCALL {
                        return Ok(Seen::Ended(Box::new(r)));
                    }
                }
            }
            // A kept signal gsh sent again (`signals.rs`): kept again, for the program.
            WaitEvent::Signal(sig) if self.kept_again(tid, sig) => {}
            WaitEvent::Signal(libc::SIGTRAP) => {
                let r = ptrace::regs(tid)?;
                let kernel = ptrace::sig_code(tid)? == SI_KERNEL;
                if let Some(End::Trap(done)) = end {
                    if kernel && r.rip == done {
                        return Ok(Seen::Ended(Box::new(r)));
                    }
                }
                if !(kernel && self.is_rendezvous_hit(r.rip)) {
                    return Err(fail(format!(
                        "it hit a breakpoint at {:#x}; its registers were restored",
                        r.rip - 1
                    )));
                }
                self.step_over_rendezvous(tid)?;
            }
            WaitEvent::Signal(
                sig @ (libc::SIGSEGV | libc::SIGBUS | libc::SIGILL | libc::SIGFPE),
            ) if ptrace::fault(tid).is_ok_and(|(code, _)| code > 0) => {
                return Err(fail(self.crash_detail(tid, sig)));
            }
            // dlopen inside the call passed the dynamic linker's hook.
            WaitEvent::Signal(sig) if self.is_rendezvous_signal(tid, sig) => {
                self.note_rendezvous()?;
            }
            // Not ours to take: kept for the thread, which gets it once it runs again
            // (`signals.rs`: sent again then, its delivery-stop long left).
            WaitEvent::Signal(sig) => self.keep_signal(tid, sig),
        }
        Ok(Seen::RunOn)
    }

    /// What an injected run's fault says: the signal, the faulting address, where the
    /// thread was (as a module and offset) and its registers, so that a crash seen once can
    /// be understood from its message alone.
    fn crash_detail(&self, tid: i32, sig: i32) -> String {
        let (code, addr) = ptrace::fault(tid).unwrap_or((0, 0));
        let Ok(r) = ptrace::regs(tid) else {
            return format!(
                "it crashed with {} (code {code}) at address {addr:#x}; its registers were \
                 restored",
                ptrace::signal_name(sig)
            );
        };
        format!(
            "it crashed with {} (code {code}) at address {addr:#x}, executing {}; registers \
             rax={:#x} rbx={:#x} rcx={:#x} rdx={:#x} rsi={:#x} rdi={:#x} rbp={:#x} rsp={:#x} \
             r8={:#x} r9={:#x} r10={:#x} r11={:#x} r12={:#x} r13={:#x} r14={:#x} r15={:#x} \
             eflags={:#x} fs_base={:#x}; its registers were restored",
            ptrace::signal_name(sig),
            self.describe_address(r.rip),
            r.rax,
            r.rbx,
            r.rcx,
            r.rdx,
            r.rsi,
            r.rdi,
            r.rbp,
            r.rsp,
            r.r8,
            r.r9,
            r.r10,
            r.r11,
            r.r12,
            r.r13,
            r.r14,
            r.r15,
            r.eflags,
            r.fs_base,
        )
    }

    /// `addr` as `0x… (libc.so.6+0x…)`, naming the mapping it is in when there is one.
    pub(crate) fn describe_address(&self, addr: u64) -> String {
        let maps = self.mappings().unwrap_or_default();
        match maps.iter().find(|m| m.start <= addr && addr < m.end) {
            Some(m) if !m.name.is_empty() => {
                let name = m.deleted.as_deref().unwrap_or(&m.name);
                let file = name.rsplit('/').next().unwrap_or(name);
                format!("{addr:#x} ({file}+{:#x})", addr - m.start + m.offset)
            }
            Some(_) => format!("{addr:#x} (anonymous memory)"),
            None => format!("{addr:#x} (unmapped)"),
        }
    }

    /// Loads the shared library at `path` into the process with `dlopen(path, RTLD_NOW)`;
    /// returns the handle. The hooks see its modules (`modules_changed`) when the command ends.
    pub fn load_library(&mut self, path: &Path) -> Result<u64, ProcessError> {
        self.alive("loading a library")?;
        let abs = std::fs::canonicalize(path).map_err(|e| ProcessError::Dlopen {
            path: path.to_owned(),
            detail: e.to_string(),
        })?;
        let dlopen = self.dynamic_symbol("dlopen")?;
        let dlerror = self.dynamic_symbol("dlerror")?;
        let mut text = abs.as_os_str().as_encoded_bytes().to_vec();
        text.push(0);
        let at = self.allocate(dlopen, text.len() as u64, AllocKind::Data)?;
        self.write(at, &text)?;
        let what = format!("dlopen of {}", abs.display());
        let handle = self.call_named(&what, dlopen, &[at, libc::RTLD_NOW as u64])?;
        if handle != 0 {
            return Ok(handle);
        }
        let msg = self.call_named("dlerror", dlerror, &[])?;
        let detail = if msg == 0 {
            "dlopen returned NULL and dlerror says nothing".to_owned()
        } else {
            self.c_string(msg)?
        };
        Err(ProcessError::Dlopen { path: abs, detail })
    }

    /// Unloads the library the process maps from `path` (as its maps name it): takes a handle
    /// with `dlopen(path, RTLD_NOW | RTLD_NOLOAD)` and closes it twice, until `dlopen` no
    /// longer finds it (each session that loaded it holds a reference) or `dlclose` refuses
    /// (a library the program itself needs: `ld.so` keeps it). Returns whether it is gone
    /// from the process's maps. Call it only once nothing runs or returns into its code.
    pub fn unload_library(&mut self, path: &Path) -> Result<bool, ProcessError> {
        self.alive("unloading a library")?;
        let dlopen = self.dynamic_symbol("dlopen")?;
        let dlclose = self.dynamic_symbol("dlclose")?;
        let mut text = path.as_os_str().as_encoded_bytes().to_vec();
        text.push(0);
        let at = self.allocate(dlopen, text.len() as u64, AllocKind::Data)?;
        self.write(at, &text)?;
        let what = format!("dlclose of {}", path.display());
        // Bounded: each round drops one reference (64 sessions' worth).
        for _ in 0..64 {
            let flags = libc::RTLD_NOW | libc::RTLD_NOLOAD;
            let handle = self.call_named(&what, dlopen, &[at, flags as u64])?;
            if handle == 0 {
                break;
            }
            self.call_named(&what, dlclose, &[handle])?;
            if self.call_named(&what, dlclose, &[handle])? as i32 != 0 {
                break;
            }
        }
        Ok(!self.modules()?.iter().any(|m| m.path == path))
    }

    /// The NUL-terminated string at `addr` (at most 4 KiB).
    fn c_string(&self, addr: u64) -> Result<String, ProcessError> {
        let mut out = Vec::new();
        let mut at = addr;
        while out.len() < 4096 {
            // Read up to the page end so a string near an unmapped page still reads.
            let chunk = (0x1000 - (at & 0xfff)) as usize;
            let bytes = self.mem.read(at, chunk)?;
            if let Some(n) = bytes.iter().position(|&b| b == 0) {
                out.extend_from_slice(&bytes[..n]);
                return Ok(String::from_utf8_lossy(&out).into_owned());
            }
            out.extend_from_slice(&bytes);
            at += chunk as u64;
        }
        Ok(String::from_utf8_lossy(&out).into_owned())
    }

    /// The runtime address of `name` in libc's dynamic symbols (glibc 2.34+ exports `dlopen`
    /// there), else in libdl's.
    fn dynamic_symbol(&mut self, name: &str) -> Result<u64, ProcessError> {
        let modules = self.modules()?;
        let mut looked = Vec::new();
        for lib in ["libc.so", "libdl.so"] {
            for m in modules.iter().filter(|m| {
                m.path
                    .file_name()
                    .is_some_and(|f| f.to_string_lossy().starts_with(lib))
            }) {
                looked.push(m.path.display().to_string());
                let data = std::fs::read(&m.path).map_err(|e| ProcessError::Io {
                    path: m.path.clone(),
                    detail: e.to_string(),
                })?;
                let file = object::File::parse(&*data).map_err(|e| ProcessError::Io {
                    path: m.path.clone(),
                    detail: e.to_string(),
                })?;
                if let Some(s) = file
                    .dynamic_symbols()
                    .find(|s| s.is_definition() && s.name() == Ok(name))
                {
                    return Ok(m.bias.wrapping_add(s.address()));
                }
            }
        }
        Err(ProcessError::NoSymbol {
            symbol: name.to_owned(),
            detail: if looked.is_empty() {
                "no libc.so or libdl.so is mapped; is the program static?".into()
            } else {
                format!("looked in {}", looked.join(", "))
            },
        })
    }
}
