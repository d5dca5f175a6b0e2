//! Tests for the unwinder on real code: walks of this test process's own stack (captured with
//! inline assembly inside a chain of `#[inline(never)]` functions, and from inside a signal
//! handler), a frame-pointer walk over a gcc binary built without CFI, and garbage registers.

use std::arch::asm;
use std::hint::black_box;
use std::path::Path;
use std::sync::{Mutex, OnceLock};

use object::{Object, ObjectSymbol};
use proptest::prelude::*;

use super::*;
use crate::testutil;
use crate::LinkAddr;

/// One line of `/proc/self/maps`.
struct Mapping {
    start: u64,
    end: u64,
    offset: u64,
    exec: bool,
    path: String,
}

fn maps() -> Vec<Mapping> {
    let text = std::fs::read_to_string("/proc/self/maps").expect("read /proc/self/maps");
    text.lines()
        .filter_map(|line| {
            let mut parts = line.split_whitespace();
            let (start, end) = parts.next()?.split_once('-')?;
            let perms = parts.next()?;
            let offset = u64::from_str_radix(parts.next()?, 16).ok()?;
            let _dev = parts.next()?;
            let _inode = parts.next()?;
            Some(Mapping {
                start: u64::from_str_radix(start, 16).ok()?,
                end: u64::from_str_radix(end, 16).ok()?,
                offset,
                exec: perms.contains('x'),
                path: parts.next().unwrap_or("").to_owned(),
            })
        })
        .collect()
}

/// Reads this thread's own stack by pointer, refusing anything outside the mapping that holds
/// the current stack pointer, so a garbage address never faults.
#[derive(Clone, Copy)]
struct OwnStack {
    lo: u64,
    hi: u64,
}

impl OwnStack {
    fn current() -> OwnStack {
        // A local, not `&0u8`, which would be promoted to a static.
        let local = black_box(0u8);
        let here = black_box(&local) as *const u8 as u64;
        let m = maps()
            .into_iter()
            .find(|m| m.start <= here && here < m.end)
            .expect("the current stack is mapped");
        OwnStack {
            lo: m.start,
            hi: m.end,
        }
    }
}

impl Memory for OwnStack {
    fn read_u64(&self, addr: u64) -> Option<u64> {
        if addr < self.lo || addr.checked_add(8)? > self.hi {
            return None;
        }
        // SAFETY: [addr, addr+8) lies inside this thread's stack mapping (checked above), which
        // stays mapped while the thread runs; an unaligned read is allowed by read_unaligned.
        Some(unsafe { std::ptr::read_unaligned(addr as *const u64) })
    }
}

/// The ELF files mapped into this process (the test binary, libc, ld.so, ...) with their load
/// biases, opened once and leaked so unwinders over them can be `'static`.
fn own_modules() -> &'static [(Binary, u64)] {
    static MODULES: OnceLock<Vec<(Binary, u64)>> = OnceLock::new();
    MODULES.get_or_init(mapped_modules)
}

/// The ELF files loaded into this process now, with their load biases. A file can also be
/// mapped whole from offset 0 (our own `Binary::open` maps libc and the test binary to read
/// them), so a bias counts only if it puts the file's executable segment on one of the file's
/// executable mappings.
fn mapped_modules() -> Vec<(Binary, u64)> {
    let maps = maps();
    {
        let mut out: Vec<(Binary, u64)> = Vec::new();
        for m in &maps {
            if m.offset != 0 || !m.path.starts_with('/') {
                continue;
            }
            if out.iter().any(|(b, _)| b.path() == Path::new(&m.path)) {
                continue;
            }
            let Ok(binary) = Binary::open(Path::new(&m.path)) else {
                continue;
            };
            let Some(bias) = load_bias(&binary, m.start, 0) else {
                continue;
            };
            let loaded = binary
                .segments()
                .iter()
                .filter(|seg| seg.flags & object::elf::PF_X != 0)
                .all(|seg| {
                    let start = (seg.vaddr.0 & !0xfff).wrapping_add(bias);
                    maps.iter()
                        .any(|x| x.exec && x.path == m.path && x.start == start)
                });
            if loaded {
                out.push((binary, bias));
            }
        }
        out
    }
}

fn own_unwinder() -> Unwinder<'static> {
    Unwinder::new(
        own_modules()
            .iter()
            .map(|(binary, bias)| UnwindModule {
                binary,
                bias: *bias,
            })
            .collect(),
    )
}

/// The runtime range `[start, end)` of the function at runtime address `entry`, from the
/// symbol table of the module holding it.
fn function_range(entry: u64) -> (u64, u64) {
    for (binary, bias) in own_modules() {
        let link = entry.wrapping_sub(*bias);
        for sym in binary.elf().symbols() {
            if sym.address() == link && sym.size() > 0 && sym.kind() == object::SymbolKind::Text {
                return (entry, entry + sym.size());
            }
        }
    }
    panic!("no symbol at {entry:#x}");
}

fn module_path(addr: u64) -> Option<&'static Path> {
    let u = own_unwinder();
    u.module_at(addr).map(|i| own_modules()[i].0.path())
}

/// The registers at the point of the `lea`, for the walk to start from. A macro, not a
/// function, so the registers are the caller's own.
macro_rules! capture_regs {
    () => {{
        let mut buf = [0u64; 8];
        // SAFETY: the asm only stores eight registers into `buf` (eight u64s, through the
        // pointer in `p`) and clobbers `t`; it touches no other memory and leaves rsp alone.
        unsafe {
            asm!(
                "lea {t}, [rip]",
                "mov [{p}], {t}",
                "mov [{p} + 8], rsp",
                "mov [{p} + 16], rbp",
                "mov [{p} + 24], rbx",
                "mov [{p} + 32], r12",
                "mov [{p} + 40], r13",
                "mov [{p} + 48], r14",
                "mov [{p} + 56], r15",
                p = in(reg) buf.as_mut_ptr(),
                t = out(reg) _,
                options(nostack, preserves_flags),
            );
        }
        Regs {
            rip: buf[0],
            rsp: buf[1],
            rbp: buf[2],
            rbx: buf[3],
            r12: buf[4],
            r13: buf[5],
            r14: buf[6],
            r15: buf[7],
            // Caller-saved registers were not captured: say so.
            unknown: 0b1111_0011_0111,
            ..Regs::default()
        }
    }};
}

#[inline(never)]
fn leaf(unwinder: &Unwinder<'_>, mem: &OwnStack, out: &mut Vec<Frame>) -> u64 {
    let regs = capture_regs!();
    *out = unwinder.walk(mem, regs, 128);
    black_box(regs.rip)
}

// Each link does work after its call so the call is not a tail call (which would drop the
// frame from the real stack, not just from the walk).
#[inline(never)]
fn chain_c(unwinder: &Unwinder<'_>, mem: &OwnStack, out: &mut Vec<Frame>) -> u64 {
    black_box(leaf(unwinder, black_box(mem), out)).wrapping_add(1)
}

#[inline(never)]
fn chain_b(unwinder: &Unwinder<'_>, mem: &OwnStack, out: &mut Vec<Frame>) -> u64 {
    black_box(chain_c(unwinder, black_box(mem), out)).wrapping_add(2)
}

#[inline(never)]
fn chain_a(unwinder: &Unwinder<'_>, mem: &OwnStack, out: &mut Vec<Frame>) -> u64 {
    black_box(chain_b(unwinder, black_box(mem), out)).wrapping_add(3)
}

#[inline(never)]
fn run_chain(unwinder: &Unwinder<'_>, mem: &OwnStack) -> Vec<Frame> {
    let mut frames = Vec::new();
    black_box(chain_a(unwinder, mem, &mut frames));
    frames
}

fn describe(frames: &[Frame]) -> String {
    frames
        .iter()
        .map(|f| {
            let module = module_path(f.pc)
                .and_then(|p| p.file_name())
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_else(|| "?".into());
            format!("{:#x} {module} {:?} cfa={:#x}\n", f.pc, f.how, f.cfa)
        })
        .collect()
}

fn in_function(pc: u64, entry: u64) -> bool {
    let (start, end) = function_range(entry);
    start <= pc && pc < end
}

#[test]
fn walks_own_stack_through_the_chain_to_libc() {
    let unwinder = own_unwinder();
    let mem = OwnStack::current();
    let frames = run_chain(&unwinder, &mem);
    let shown = describe(&frames);
    eprintln!("{shown}");

    // Frame 0 is exact; the rest are return addresses, so each is checked at pc - 1.
    assert!(
        in_function(frames[0].pc, leaf as *const () as u64),
        "{shown}"
    );
    let chain = [
        chain_c as *const () as u64,
        chain_b as *const () as u64,
        chain_a as *const () as u64,
        run_chain as *const () as u64,
    ];
    for (i, entry) in chain.iter().enumerate() {
        let frame = &frames[i + 1];
        assert!(
            in_function(frame.lookup_pc(), *entry),
            "frame {} is not in function {entry:#x}:\n{shown}",
            i + 1
        );
        assert_eq!(frame.how, FoundBy::Cfi, "{shown}");
    }
    // Everything was found by CFI, the CFAs grow, and the walk ended at libc's outermost
    // frame (clone3 for a test thread, __libc_start_call_main's caller for the main thread),
    // where the CFI marks the return address undefined: so that last frame has a CFA too.
    assert!(frames[1..].iter().all(|f| f.how == FoundBy::Cfi), "{shown}");
    assert!(
        frames
            .windows(2)
            .all(|w| w[0].cfa < w[1].cfa || w[1].cfa == 0),
        "{shown}"
    );
    let last = frames.last().expect("frames");
    let libc = module_path(last.pc).expect("last frame in a module");
    assert!(
        libc.to_string_lossy().contains("libc"),
        "last frame is not in libc:\n{shown}"
    );
    assert_ne!(
        last.cfa, 0,
        "walk did not reach the outermost frame:\n{shown}"
    );
    // The recovered registers are consistent: each frame's rsp is the CFA of the one below.
    for w in frames.windows(2) {
        assert_eq!(w[1].regs.rsp, w[0].cfa, "{shown}");
    }
}

#[test]
fn max_bounds_the_walk_and_zero_pc_stops_it() {
    let unwinder = own_unwinder();
    let mem = OwnStack::current();
    let full = run_chain(&unwinder, &mem);
    assert!(full.len() > 5);
    let mut frames = Vec::new();
    black_box(leaf(&unwinder, &mem, &mut frames));
    let regs = frames[0].regs;
    assert_eq!(unwinder.walk(&mem, regs, 3).len(), 3);
    assert!(unwinder.walk(&mem, regs, 0).is_empty());
    let zero = Regs::default();
    assert_eq!(unwinder.walk(&mem, zero, 10).len(), 1);
}

#[test]
fn a_walk_says_whether_it_reached_the_outermost_frame() {
    let unwinder = own_unwinder();
    let mem = OwnStack::current();
    let mut frames = Vec::new();
    black_box(leaf(&unwinder, &mem, &mut frames));
    let regs = frames[0].regs;
    let (whole, outermost) = unwinder.walk_to_outermost(&mem, regs, 1024);
    assert!(outermost, "{}", describe(&whole));
    let (cut, outermost) = unwinder.walk_to_outermost(&mem, regs, 3);
    assert_eq!(cut.len(), 3);
    assert!(!outermost, "a walk cut short by its limit");
    let (_, outermost) = unwinder.walk_to_outermost(&mem, Regs::default(), 10);
    assert!(!outermost, "a pc of 0");
}

/// Walks from `leaf`'s registers, all of them and its pc and stack pointer alone, while its
/// frames are live: the full walk, the exact one, and the exact one cut at 4 frames.
#[inline(never)]
fn leaf_exact(unwinder: &Unwinder<'_>, mem: &OwnStack) -> [Option<Vec<Frame>>; 3] {
    let regs = capture_regs!();
    black_box([
        Some(unwinder.walk(mem, regs, 128)),
        unwinder.walk_exact(mem, regs.rip, regs.rsp, 128),
        unwinder.walk_exact(mem, regs.rip, regs.rsp, 4),
    ])
}

/// A walk from the pc and stack pointer alone (a thread asleep in a system call, as /proc
/// shows it) finds exactly the frames a walk from every register does where each step is the
/// CFI's and needs no other register, and is no walk where one needs `rbp` (Rust's standard
/// library keeps frame pointers: the test harness's frames' CFA is `rbp`'s).
#[test]
fn a_walk_from_pc_and_sp_alone_is_exactly_the_full_walk_or_none() {
    let unwinder = own_unwinder();
    let mem = OwnStack::current();
    let [full, exact, cut] = black_box(leaf_exact(&unwinder, &mem));
    let full = full.unwrap();
    let pcs = |frames: &[Frame]| frames.iter().map(|f| f.pc).collect::<Vec<_>>();
    let cut = cut.unwrap_or_else(|| panic!("no exact walk of 4 frames:\n{}", describe(&full)));
    assert_eq!(pcs(&cut), pcs(&full[..4]), "{}", describe(&cut));
    if let Some(exact) = exact {
        assert_eq!(pcs(&exact), pcs(&full), "{}", describe(&exact));
    }
    // A pc in no module: nothing to step by.
    assert!(unwinder.walk_exact(&mem, 8, full[0].regs.rsp, 16).is_none());
}

/// What the signal handler saw: the unwinder and stack it walks with, and its walk.
struct SignalTest {
    unwinder: Unwinder<'static>,
    mem: OwnStack,
    frames: Vec<Frame>,
}

static SIGNAL_TEST: Mutex<Option<SignalTest>> = Mutex::new(None);

extern "C" fn on_signal(_sig: libc::c_int, _info: *mut libc::siginfo_t, _ctx: *mut libc::c_void) {
    let regs = capture_regs!();
    // The test thread raised this signal while not holding the lock, so it cannot deadlock.
    let mut guard = SIGNAL_TEST.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(t) = guard.as_mut() {
        t.frames = t.unwinder.walk(&t.mem, regs, 128);
    }
}

#[inline(never)]
fn raise_chain() -> u64 {
    // SAFETY: raise sends SIGUSR1 to this thread, whose handler (installed by the test) only
    // walks the stack and records the frames.
    let rc = unsafe { libc::raise(libc::SIGUSR1) };
    black_box(rc as u64).wrapping_add(1)
}

#[test]
fn walks_through_a_signal_frame() {
    *SIGNAL_TEST.lock().unwrap() = Some(SignalTest {
        unwinder: own_unwinder(),
        mem: OwnStack::current(),
        frames: Vec::new(),
    });
    // SAFETY: a zeroed sigaction is a valid "no flags, empty mask" value; the handler has the
    // SA_SIGINFO signature, and SIGUSR1 is used by no other test in this process.
    unsafe {
        let mut action: libc::sigaction = std::mem::zeroed();
        action.sa_sigaction = on_signal as *const () as usize;
        action.sa_flags = libc::SA_SIGINFO;
        libc::sigemptyset(&mut action.sa_mask);
        assert_eq!(
            libc::sigaction(libc::SIGUSR1, &action, std::ptr::null_mut()),
            0
        );
    }
    black_box(raise_chain());
    let frames = SIGNAL_TEST.lock().unwrap().take().expect("state").frames;
    let shown = describe(&frames);
    eprintln!("{shown}");

    assert!(
        in_function(frames[0].pc, on_signal as *const () as u64),
        "{shown}"
    );
    // Above the handler: glibc's __restore_rt (via CFI), then the interrupted frame, whose
    // registers come from the ucontext.
    let signal = frames
        .iter()
        .position(|f| f.how == FoundBy::SignalFrame)
        .unwrap_or_else(|| panic!("no signal frame:\n{shown}"));
    assert!(frames[signal].pc_is_exact(), "{shown}");
    assert_eq!(frames[signal].lookup_pc(), frames[signal].pc);
    // The walk gets back to raise_chain through the interrupted libc frames.
    let raiser = frames[signal..]
        .iter()
        .position(|f| in_function(f.lookup_pc(), raise_chain as *const () as u64))
        .unwrap_or_else(|| panic!("raise_chain not found above the signal frame:\n{shown}"));
    assert!(raiser > 0, "{shown}");
    let last = frames.last().expect("frames");
    assert_ne!(
        last.cfa, 0,
        "walk did not reach the outermost frame:\n{shown}"
    );
}

/// A gcc binary without any CFI for its own functions, compiled with frame pointers: the walk
/// falls back to the rbp chain (and to the prologue check at a function's entry).
#[test]
fn falls_back_to_frame_pointers_without_cfi() {
    let path = testutil::compile(
        "unwind-fp",
        "__attribute__((noinline)) int leaf(int x) { return x * 3; }\n\
         __attribute__((noinline)) int middle(int x) { return leaf(x) + 1; }\n\
         int main(int argc, char **argv) { (void)argv; return middle(argc) + 2; }\n\
         __asm__(\".text\\n.globl my_restore\\nmy_restore: mov $15, %rax\\n syscall\\n\");\n",
        false,
        &[
            // -O0 so even the leaf keeps `push %rbp; mov %rsp,%rbp`.
            "-O0",
            "-fno-omit-frame-pointer",
            "-fno-asynchronous-unwind-tables",
            "-fno-unwind-tables",
            "-no-pie",
        ],
    );
    let binary = Binary::open(&path).expect("open");
    let symbol = |name: &str| -> u64 {
        binary
            .elf()
            .symbols()
            .find(|s| s.name() == Ok(name))
            .map(|s| s.address())
            .unwrap_or_else(|| panic!("no symbol {name}"))
    };
    // The address just after the first call in a function: a real return address.
    let after_call = |func: u64| -> u64 {
        let code = binary.bytes_at(LinkAddr(func), 64).expect("code");
        let mut decoder = Decoder::with_ip(64, code, func, DecoderOptions::NONE);
        loop {
            let insn = decoder.decode();
            assert!(!insn.is_invalid(), "no call in {func:#x}");
            if insn.flow_control() == FlowControl::Call {
                return insn.next_ip();
            }
        }
    };
    let (leaf_fn, middle_fn, main_fn) = (symbol("leaf"), symbol("middle"), symbol("main"));
    let ret_in_middle = after_call(middle_fn);
    let ret_in_main = after_call(main_fn);

    /// A fake stack of 128 words at 0x7000_0000.
    struct FakeStack(Vec<u64>);
    const BASE: u64 = 0x7000_0000;
    impl Memory for FakeStack {
        fn read_u64(&self, addr: u64) -> Option<u64> {
            let i = addr.checked_sub(BASE)? / 8;
            addr.is_multiple_of(8).then_some(())?;
            self.0.get(i as usize).copied()
        }
    }
    // leaf, stopped at its entry (push %rbp not yet run): [rsp] = return into middle.
    // middle's frame: rbp = BASE+0x40, [rbp] = main's rbp (BASE+0x80), [rbp+8] = into main.
    // main's frame: [rbp] = 0 (end of the chain), [rbp+8] = 0.
    let mut words = vec![0u64; 128];
    words[0] = ret_in_middle;
    words[8] = BASE + 0x80;
    words[9] = ret_in_main;
    let mem = FakeStack(words);
    let unwinder = Unwinder::new(vec![UnwindModule {
        binary: &binary,
        bias: 0,
    }]);
    let top = Regs {
        rip: leaf_fn,
        rsp: BASE,
        rbp: BASE + 0x40,
        ..Regs::default()
    };
    let frames = unwinder.walk(&mem, top, 16);
    let pcs: Vec<u64> = frames.iter().map(|f| f.pc).collect();
    assert_eq!(pcs, [leaf_fn, ret_in_middle, ret_in_main], "{frames:#?}");
    // From the pc and stack pointer alone (a thread asleep, as /proc shows it) no frame
    // pointer is known, and a walk by the chain is not exact.
    assert!(unwinder.walk_exact(&mem, leaf_fn, BASE, 16).is_none());
    assert_eq!(frames[1].how, FoundBy::FramePointer);
    assert_eq!(frames[2].how, FoundBy::FramePointer);
    assert_eq!(frames[2].regs.rsp, BASE + 0x50);
    assert_eq!(frames[2].regs.rbp, BASE + 0x80);

    // Past the prologue with rbp garbage, the scan finds the return address on the stack.
    assert_eq!(
        binary.bytes_at(LinkAddr(leaf_fn), 4),
        Some(&[0x55, 0x48, 0x89, 0xe5][..])
    );
    let top = Regs {
        rip: leaf_fn + 4,
        rsp: BASE,
        rbp: 3,
        ..Regs::default()
    };
    let frames = unwinder.walk(&mem, top, 2);
    assert_eq!(frames[1].pc, ret_in_middle, "{frames:#?}");
    assert_eq!(frames[1].how, FoundBy::Scan);

    // A signal handler stopped at its entry, returning into a `sigreturn` stub with no CFI:
    // the stub's rsp points at a ucontext whose mcontext says the signal interrupted middle
    // just after its prologue, with rsp at BASE+0x180 and rbp at BASE+0x200.
    let restore = symbol("my_restore");
    let mut words = vec![0u64; 128];
    words[0] = restore;
    let mcontext = 1 + 5; // the ucontext at BASE+8, its mcontext 40 bytes in
    words[mcontext + 10] = BASE + 0x200; // rbp
    words[mcontext + 11] = 0xb0b; // rbx
    words[mcontext + 15] = BASE + 0x180; // rsp
    words[mcontext + 16] = middle_fn + 4; // rip
    words[0x200 / 8 + 1] = ret_in_main;
    let mem = FakeStack(words);
    let top = Regs {
        rip: leaf_fn,
        rsp: BASE,
        rbp: 5,
        ..Regs::default()
    };
    let frames = unwinder.walk(&mem, top, 4);
    let pcs: Vec<u64> = frames.iter().map(|f| f.pc).collect();
    assert_eq!(
        pcs,
        [leaf_fn, restore, middle_fn + 4, ret_in_main],
        "{frames:#?}"
    );
    assert_eq!(frames[2].how, FoundBy::SignalFrame);
    assert_eq!(
        (
            frames[2].regs.rsp,
            frames[2].regs.rbx,
            frames[2].regs.unknown
        ),
        (BASE + 0x180, 0xb0b, 0)
    );
    assert_eq!(frames[3].how, FoundBy::FramePointer);
}

#[test]
fn load_bias_matches_the_offset_zero_mapping() {
    for m in maps() {
        if m.offset != 0 || !m.path.contains("libc.so") {
            continue;
        }
        let binary = Binary::open(Path::new(&m.path)).expect("open libc");
        let bias = load_bias(&binary, m.start, 0).expect("bias");
        // libc is a shared library linked at 0: its bias is where it was mapped.
        assert_eq!(bias, m.start - (binary.segments()[0].vaddr.0 & !0xfff));
        return;
    }
    panic!("libc is not mapped into the test process");
}

#[test]
fn regs_get_and_set_track_unknown_registers() {
    let mut r = Regs::default();
    assert_eq!(r.get(3), Some(0));
    r.set(3, Some(7));
    assert_eq!((r.rbx, r.get(3)), (7, Some(7)));
    r.set(3, None);
    assert_eq!(r.get(3), None);
    r.set(16, Some(0x1234));
    assert_eq!(r.rip, 0x1234);
    assert_eq!(r.get(17), None);
    r.set(40, Some(1));
}

/// Per-frame cost of repeated walks (the profile case: rules cached). Prints, asserts only
/// that the walks are stable.
#[test]
fn repeated_walks_are_cheap() {
    let unwinder = own_unwinder();
    let mem = OwnStack::current();
    let mut frames = Vec::new();
    black_box(leaf(&unwinder, &mem, &mut frames));
    let top = frames[0].regs;
    // A fresh unwinder: its first walk builds the FDE index of every module it touches.
    let unwinder = own_unwinder();
    let cold = std::time::Instant::now();
    let first = unwinder.walk(&mem, top, 128);
    let cold = cold.elapsed();
    // Indexes built, rules forgotten: the cost of evaluating CFI for each pc.
    unwinder.rules.lock().unwrap().clear();
    let uncached = std::time::Instant::now();
    let _ = unwinder.walk(&mem, top, 128);
    let uncached = uncached.elapsed();
    let start = std::time::Instant::now();
    let runs = 2000;
    let mut total = 0;
    for _ in 0..runs {
        let again = unwinder.walk(&mem, top, 128);
        assert_eq!(again.len(), first.len());
        total += again.len();
    }
    let per_frame = start.elapsed().as_nanos() / total as u128;
    eprintln!(
        "unwind: {} frames per walk; first walk {cold:?} (builds FDE indexes), \
         with indexes but no cached rules {uncached:?}, then {per_frame} ns per frame (cached)",
        first.len()
    );
}

/// Random memory, some of it pointing into real code, under a stack pointer inside it.
struct GarbageStack {
    base: u64,
    words: Vec<u64>,
}

impl Memory for GarbageStack {
    fn read_u64(&self, addr: u64) -> Option<u64> {
        let i = addr.checked_sub(self.base)? / 8;
        self.words.get(usize::try_from(i).ok()?).copied()
    }
}

fn code_address(pick: u64) -> u64 {
    let u = own_unwinder();
    let ranges = &u.code;
    let (start, end, _) = ranges[(pick as usize) % ranges.len()];
    start + (pick >> 8) % (end - start)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(200))]

    #[test]
    fn garbage_never_panics_or_runs_away(
        words in proptest::collection::vec(any::<u64>(), 0..256),
        code_picks in proptest::collection::vec(any::<u64>(), 0..64),
        rip_pick in any::<u64>(),
        rip_in_code in any::<bool>(),
        rsp_word in 0u64..300,
        rbp in any::<u64>(),
        rbx in any::<u64>(),
        max in 0usize..64,
    ) {
        static UNWINDER: OnceLock<Unwinder<'static>> = OnceLock::new();
        let unwinder = UNWINDER.get_or_init(own_unwinder);
        let base = 0x10_0000u64;
        let mut words = words;
        // Plant code addresses among the garbage so CFI, frame-pointer and scan paths run.
        for (i, pick) in code_picks.iter().enumerate() {
            if let Some(slot) = words.get_mut((pick % 256) as usize) {
                *slot = code_address(pick.wrapping_add(i as u64));
            }
        }
        let mem = GarbageStack { base, words };
        let rip = if rip_in_code { code_address(rip_pick) } else { rip_pick };
        let top = Regs { rip, rsp: base + rsp_word * 8, rbp, rbx, ..Regs::default() };
        let frames = unwinder.walk(&mem, top, max);
        prop_assert!(frames.len() <= max);
        prop_assert!(max == 0 || frames[0].pc == rip);
    }
}

/// What the callback from the gcc library saw.
struct CallbackTest {
    unwinder: Unwinder<'static>,
    mem: OwnStack,
    frames: Vec<Frame>,
}

static CALLBACK_TEST: Mutex<Option<CallbackTest>> = Mutex::new(None);

extern "C" fn walk_from_callback(x: libc::c_long) -> libc::c_long {
    let regs = capture_regs!();
    let mut guard = CALLBACK_TEST.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(t) = guard.as_mut() {
        t.frames = t.unwinder.walk(&t.mem, regs, 128);
    }
    black_box(x + 1)
}

#[inline(never)]
fn call_into_gcc_code(
    outer: extern "C" fn(extern "C" fn(libc::c_long) -> libc::c_long, libc::c_long) -> libc::c_long,
) -> libc::c_long {
    black_box(outer(walk_from_callback, black_box(4))).wrapping_add(1)
}

/// gcc -O2 code without frame pointers, loaded into this process with dlopen: the walk from a
/// callback it calls goes back through its frames by CFI alone, and on into ours.
#[test]
fn walks_through_gcc_o2_code_without_frame_pointers() {
    let path = testutil::compile(
        "unwind-o2.so",
        "typedef long (*cb_t)(long);\n\
         __attribute__((noinline)) long inner(cb_t cb, long x) { long r = cb(x * 3); return r ^ x; }\n\
         __attribute__((noinline)) long outer(cb_t cb, long x) { long r = inner(cb, x + 1); return r * 2 + x; }\n",
        false,
        &["-O2", "-fomit-frame-pointer", "-shared", "-fPIC"],
    );
    let cpath = std::ffi::CString::new(path.to_string_lossy().as_bytes()).expect("path");
    // SAFETY: dlopen of a library we just built, with no constructors; it stays loaded for
    // the rest of the process (never dlclosed), so its code outlives every use below.
    let handle = unsafe { libc::dlopen(cpath.as_ptr(), libc::RTLD_NOW) };
    assert!(!handle.is_null(), "dlopen {} failed", path.display());
    // SAFETY: `outer` is defined by the library above with exactly this C signature.
    let outer: extern "C" fn(
        extern "C" fn(libc::c_long) -> libc::c_long,
        libc::c_long,
    ) -> libc::c_long = unsafe {
        let sym = libc::dlsym(handle, c"outer".as_ptr());
        assert!(!sym.is_null(), "no outer in the library");
        std::mem::transmute::<*mut libc::c_void, _>(sym)
    };

    let modules: &'static [(Binary, u64)] = Box::leak(mapped_modules().into_boxed_slice());
    let lib = modules
        .iter()
        .find(|(b, _)| b.path() == path.as_path())
        .expect("the library is mapped");
    let range = |name: &str| -> (u64, u64) {
        let elf = lib.0.elf();
        let sym = elf
            .symbols()
            .find(|s| s.name() == Ok(name))
            .unwrap_or_else(|| panic!("no symbol {name}"));
        (sym.address() + lib.1, sym.address() + lib.1 + sym.size())
    };
    // Their code really has no frame pointer setup.
    let (outer_start, outer_end) = range("outer");
    let (inner_start, inner_end) = range("inner");
    for (start, end) in [(outer_start, outer_end), (inner_start, inner_end)] {
        let code = lib
            .0
            .bytes_at(LinkAddr(start - lib.1), end - start)
            .expect("code");
        assert!(
            !code.windows(3).any(|w| w == [0x48, 0x89, 0xe5]),
            "gcc set up rbp"
        );
    }

    *CALLBACK_TEST.lock().unwrap() = Some(CallbackTest {
        unwinder: Unwinder::new(
            modules
                .iter()
                .map(|(binary, bias)| UnwindModule {
                    binary,
                    bias: *bias,
                })
                .collect(),
        ),
        mem: OwnStack::current(),
        frames: Vec::new(),
    });
    black_box(call_into_gcc_code(outer));
    let frames = CALLBACK_TEST.lock().unwrap().take().expect("state").frames;
    let shown = describe(&frames);
    eprintln!("{shown}");
    assert!(
        in_function(frames[0].pc, walk_from_callback as *const () as u64),
        "{shown}"
    );
    let within =
        |f: &Frame, (start, end): (u64, u64)| start <= f.lookup_pc() && f.lookup_pc() < end;
    assert!(within(&frames[1], (inner_start, inner_end)), "{shown}");
    assert!(within(&frames[2], (outer_start, outer_end)), "{shown}");
    assert!(
        in_function(
            frames[3].lookup_pc(),
            call_into_gcc_code as *const () as u64
        ),
        "{shown}"
    );
    assert!(frames[1..].iter().all(|f| f.how == FoundBy::Cfi), "{shown}");
    assert_ne!(frames.last().expect("frames").cfa, 0, "{shown}");
}

/// Three pages of words whose value is their address, the middle one unreadable; `reads`
/// counts the pages asked for.
fn paged(reads: &std::cell::Cell<usize>) -> Pages<impl Fn(u64) -> Option<Vec<u8>> + '_> {
    const BASE: u64 = 0x7000_0000;
    Pages::new(move |page| {
        reads.set(reads.get() + 1);
        if !(BASE..BASE + 3 * PAGE).contains(&page) || page == BASE + PAGE {
            return None;
        }
        Some(
            (0..PAGE)
                .map(|i| ((page + i) >> (8 * (i % 8))) as u8)
                .collect(),
        )
    })
}

#[test]
fn memory_read_by_pages_reads_each_page_once() {
    let reads = std::cell::Cell::new(0);
    let mem = paged(&reads);
    let base = 0x7000_0000u64;
    for addr in [
        base,
        base + 8,
        base + 0xff8,
        base + 2 * PAGE + 16,
        base + 2 * PAGE,
    ] {
        assert_eq!(mem.read_u64(addr), Some(addr), "{addr:#x}");
    }
    assert_eq!(reads.get(), 2);
    // An unaligned word within a page: its bytes as the page holds them.
    let b: Vec<u8> = (base + 3..base + 11)
        .map(|a| (a & !7) >> (8 * (a % 8)))
        .map(|x| x as u8)
        .collect();
    assert_eq!(
        mem.read_u64(base + 3),
        Some(u64::from_le_bytes(b.try_into().unwrap()))
    );
    assert_eq!(mem.pages_read(), 2);
}

#[test]
fn memory_read_by_pages_fails_where_a_word_touches_an_unreadable_page() {
    let reads = std::cell::Cell::new(0);
    let mem = paged(&reads);
    let base = 0x7000_0000u64;
    // In the unreadable page, and across into it from either side.
    assert_eq!(mem.read_u64(base + PAGE + 64), None);
    assert_eq!(mem.read_u64(base + PAGE - 4), None);
    assert_eq!(mem.read_u64(base + 2 * PAGE - 4), None);
    assert_eq!(mem.read_u64(u64::MAX - 3), None);
    // The pages beside it read as they are, each once.
    assert_eq!(mem.read_u64(base + PAGE - 8), Some(base + PAGE - 8));
    assert_eq!(mem.read_u64(base + 2 * PAGE), Some(base + 2 * PAGE));
    assert_eq!(reads.get(), 4);
}
