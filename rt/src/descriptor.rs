//! Measuring descriptors: how a binary that gsh rewrote (`save`) learns where the runtime is.
//!
//! Generated code in a saved file cannot inline the runtime's TLS offset or function addresses:
//! they are only known once `ld.so` has loaded both. So `save` puts a descriptor in the file's
//! new data segment and points a `PT_GSH_MEASURE` program header at it; the generated code
//! reads the fields RIP-relatively. This module's constructor (an `.init_array` entry, which
//! `ld.so` runs before the program's own constructors and `main`) walks the loaded objects with
//! `dl_iterate_phdr`, and fills in the descriptor of the first object that has one: the TLS
//! offset, `gsh_rt_thread`, the event functions, then configures the runtime for the slots the
//! file uses and sets the exit writer's output. `tls_offset` is stored last: generated code
//! treats 0 as "no runtime" and does nothing, so a program run without the runtime (or before
//! the fields are complete) computes the same results and only loses its measurements.
//!
//! Only objects present at start-up are served (a constructor runs once per process), and only
//! one per process: every saved file numbers its slots from 0, so a second descriptor is left
//! disabled (with a warning on stderr) rather than mixing two files' counts.
//! The layout is in `rt/LAYOUT.md` ("Measuring descriptor").

use crate::layout::{UnwindEntry, DEFAULT_MAX_SLOTS, DEFAULT_PATH_CAPACITY};
use crate::{events, output, path, thread, tls};
use gsh_rt_abi::descriptor::{Descriptor, HEADER_SIZE, MAGIC, PT_GSH_MEASURE, VERSION};
use gsh_rt_abi::exports::Event;
use std::sync::atomic::Ordering::{Acquire, Relaxed, Release};
use std::sync::atomic::{AtomicPtr, AtomicU64};

/// `PF_W`: the descriptor must lie in a writable segment.
const PF_W: u32 = 2;
/// `PT_LOAD` and `PT_GNU_RELRO` (the latter is made read-only before constructors run).
const PT_LOAD: u32 = 1;
const PT_GNU_RELRO: u32 = 0x6474_e552;

/// The address of event function `e`, for the descriptor's `fns` cell of `e`.
pub fn event_fn(e: Event) -> u64 {
    let f = match e {
        Event::Enter => events::gsh_rt_enter as *const (),
        Event::Exit => events::gsh_rt_exit as *const (),
        Event::EnterCpu => events::gsh_rt_enter_cpu as *const (),
        Event::ExitCpu => events::gsh_rt_exit_cpu as *const (),
        Event::PathEnter => path::gsh_rt_path_enter as *const (),
        Event::PathExit => path::gsh_rt_path_exit as *const (),
        Event::PathEnterCpu => path::gsh_rt_path_enter_cpu as *const (),
        Event::PathCount => path::gsh_rt_path_count as *const (),
    };
    f as u64
}

/// The event functions a descriptor's `fns` holds, in order.
pub fn fns() -> [u64; 8] {
    Event::ALL.map(event_fn)
}

/// The descriptor being served, with its size; null when none.
static SERVED: AtomicPtr<Descriptor> = AtomicPtr::new(std::ptr::null_mut());
static SERVED_LEN: AtomicU64 = AtomicU64::new(0);

/// Why a descriptor was not served.
#[derive(Debug, PartialEq, Eq)]
pub enum Refused {
    /// Too small, misaligned, wrong magic or version: not a descriptor this runtime knows.
    NotOurs,
    /// Its strings lie outside it.
    BadStrings,
    /// Another descriptor is served already.
    AlreadyServing,
    /// `gsh_rt_init` could not give it its slots.
    Config,
}

/// Serves the descriptor at `desc` (`len` bytes, writable) of an object loaded with bias
/// `bias`: fills it, configures the runtime and registers its unwind table. Called by the
/// constructor for each `PT_GSH_MEASURE` it finds.
///
/// # Safety
/// `desc` must point at `len` bytes of writable memory that stay mapped for the process's life.
pub unsafe fn serve(desc: *mut u8, len: usize, bias: u64) -> Result<(), Refused> {
    if len < HEADER_SIZE || desc.is_null() || !(desc as usize).is_multiple_of(8) {
        return Err(Refused::NotOurs);
    }
    // SAFETY: `len` bytes at `desc` are mapped and 8-aligned (checked), enough for the header.
    let d = unsafe { &*desc.cast::<Descriptor>() };
    if d.magic != MAGIC || d.version != VERSION {
        return Err(Refused::NotOurs);
    }
    let within = |off: u32, n: u32| {
        n == 0
            || (off as usize)
                .checked_add(n as usize)
                .is_some_and(|e| e <= len)
    };
    let unwind_bytes = d.unwind_count.checked_mul(UNWIND_ENTRY as u32);
    let coverage_bytes = d.coverage_count.checked_mul(8);
    if !within(d.output_off, d.output_len)
        || !within(d.meta_off, d.meta_len)
        || !unwind_bytes.is_some_and(|n| within(d.unwind_off, n))
        || !coverage_bytes.is_some_and(|n| within(d.coverage_off, n))
        || !d.coverage_off.is_multiple_of(8)
    {
        return Err(Refused::BadStrings);
    }
    if SERVED
        .compare_exchange(std::ptr::null_mut(), desc.cast(), Relaxed, Relaxed)
        .is_err()
    {
        return Err(Refused::AlreadyServing);
    }
    SERVED_LEN.store(len as u64, Relaxed);
    // At least the default slot count, so that a live gsh attaching later (which asks for the
    // defaults) finds the configuration it wants; untouched slot pages cost no memory.
    let slots = d.slots.max(DEFAULT_MAX_SLOTS);
    if thread::configure(slots, DEFAULT_PATH_CAPACITY) != 0
        && thread::GSH_RT_ROOT.max_slots.load(Relaxed) < d.slots
    {
        return Err(Refused::Config);
    }
    if std::env::var_os("GSH_RT_OUTPUT").is_none() {
        if let Some(p) = string(desc, d.output_off, d.output_len) {
            let mut c = p.to_vec();
            c.push(0);
            // SAFETY: `c` is NUL-terminated.
            unsafe { output::gsh_rt_set_output(c.as_ptr().cast()) };
        }
    }
    if d.unwind_count > 0 {
        // SAFETY: the range was checked to lie inside the descriptor.
        unsafe { register_unwind(desc.add(d.unwind_off as usize), d.unwind_count, bias) };
    }
    d.thread_fn
        .store(crate::gsh_rt_thread as *const () as u64, Relaxed);
    for (slot, f) in d.fns.iter().zip(fns()) {
        slot.store(f, Relaxed);
    }
    // Last: non-zero tells generated code that everything above is in place.
    d.tls_offset.store(tls::offset(), Release);
    Ok(())
}

/// Bytes per `UnwindEntry`.
const UNWIND_ENTRY: usize = std::mem::size_of::<UnwindEntry>();

/// Registers a copy of the `count` entries at `at` with `bias` added to each return address.
/// A table that cannot be registered (unsorted, no room) only costs profiles their depth.
///
/// # Safety
/// `at` must point at `count` readable entries.
unsafe fn register_unwind(at: *const u8, count: u32, bias: u64) {
    let n = count as usize;
    let Some(copy) = crate::sys::mmap_anon(n * UNWIND_ENTRY) else {
        return;
    };
    let copy = copy.cast::<UnwindEntry>();
    for i in 0..n {
        // SAFETY: entry `i` of the source is readable (maybe unaligned); the copy is a fresh
        // mapping of `n` entries.
        unsafe {
            let mut e = at
                .add(i * UNWIND_ENTRY)
                .cast::<UnwindEntry>()
                .read_unaligned();
            e.ra = e.ra.wrapping_add(bias);
            copy.add(i).write(e);
        }
    }
    // SAFETY: `copy` holds `n` entries, unmapped only when the library is unloaded.
    if unsafe { path::gsh_rt_add_unwind_table(copy, n) } != 0 {
        warn(b"the saved file's unwind table was refused; profiles walk by frame pointers\n");
    }
}

/// The bytes of a descriptor string (without its NUL), if present.
fn string<'a>(desc: *const u8, off: u32, len: u32) -> Option<&'a [u8]> {
    if len == 0 {
        return None;
    }
    // SAFETY: `serve` checked the range lies inside the descriptor, which stays mapped.
    let bytes = unsafe { std::slice::from_raw_parts(desc.add(off as usize), len as usize) };
    let end = bytes.iter().position(|&b| b == 0).unwrap_or(bytes.len());
    Some(&bytes[..end]).filter(|b| !b.is_empty())
}

/// The served descriptor's slot count, if one is served.
pub fn slots() -> Option<u32> {
    let d = SERVED.load(Acquire);
    // SAFETY: a served descriptor stays mapped for the process's life.
    (!d.is_null()).then(|| unsafe { (*d).slots })
}

/// The served descriptor's block-coverage counters (empty without any).
pub fn coverage() -> &'static [AtomicU64] {
    let d = SERVED.load(Acquire);
    if d.is_null() {
        return &[];
    }
    // SAFETY: a served descriptor stays mapped for the process's life.
    let desc = unsafe { &*d };
    if desc.coverage_count == 0 {
        return &[];
    }
    // SAFETY: `serve` checked that the 8-aligned array lies inside the descriptor (itself
    // 8-aligned); generated code increments the counters in place, hence atomics.
    unsafe {
        std::slice::from_raw_parts(
            d.cast::<u8>()
                .add(desc.coverage_off as usize)
                .cast::<AtomicU64>(),
            desc.coverage_count as usize,
        )
    }
}

/// The served descriptor's meta JSON text, if any.
pub fn meta() -> Option<&'static str> {
    let d = SERVED.load(Acquire);
    if d.is_null() {
        return None;
    }
    // SAFETY: a served descriptor stays mapped for the process's life.
    let desc = unsafe { &*d };
    let bytes = string(d.cast(), desc.meta_off, desc.meta_len)?;
    std::str::from_utf8(bytes).ok()
}

/// True when `desc..desc + len` lies in a writable `PT_LOAD` of the object and outside its
/// `PT_GNU_RELRO` (which `ld.so` has made read-only by the time constructors run).
fn writable(phdrs: &[libc::Elf64_Phdr], bias: u64, desc: u64, len: u64) -> bool {
    let Some(end) = desc.checked_add(len) else {
        return false;
    };
    let covers = |p: &libc::Elf64_Phdr| {
        let lo = bias.wrapping_add(p.p_vaddr);
        desc >= lo && end <= lo.saturating_add(p.p_memsz)
    };
    let overlaps = |p: &libc::Elf64_Phdr| {
        let lo = bias.wrapping_add(p.p_vaddr);
        desc < lo.saturating_add(p.p_memsz) && lo < end
    };
    phdrs
        .iter()
        .any(|p| p.p_type == PT_LOAD && p.p_flags & PF_W != 0 && covers(p))
        && !phdrs
            .iter()
            .any(|p| p.p_type == PT_GNU_RELRO && overlaps(p))
}

/// The program headers of one `dl_iterate_phdr` entry.
///
/// # Safety
/// `info` must come from `dl_iterate_phdr`.
unsafe fn phdrs<'a>(info: *const libc::dl_phdr_info) -> &'a [libc::Elf64_Phdr] {
    // SAFETY: dl_iterate_phdr passes a valid entry whose table has `dlpi_phnum` headers.
    unsafe {
        let info = &*info;
        if info.dlpi_phdr.is_null() {
            return &[];
        }
        std::slice::from_raw_parts(info.dlpi_phdr, usize::from(info.dlpi_phnum))
    }
}

unsafe extern "C" fn visit(
    info: *mut libc::dl_phdr_info,
    _size: libc::size_t,
    _data: *mut libc::c_void,
) -> libc::c_int {
    // SAFETY: called by dl_iterate_phdr with a valid entry.
    let (bias, headers) = unsafe { ((*info).dlpi_addr, phdrs(info)) };
    for p in headers.iter().filter(|p| p.p_type == PT_GSH_MEASURE) {
        let desc = bias.wrapping_add(p.p_vaddr);
        if !writable(headers, bias, desc, p.p_memsz) {
            warn(b"a PT_GSH_MEASURE header points outside writable memory; ignored\n");
            continue;
        }
        // SAFETY: the range lies in a writable, mapped segment of a loaded object.
        match unsafe { serve(desc as *mut u8, p.p_memsz as usize, bias) } {
            Ok(()) | Err(Refused::NotOurs) => {}
            Err(Refused::AlreadyServing) => warn(
                b"another rewritten object is already measured in this process; this one's measurements are off\n",
            ),
            Err(Refused::BadStrings) => warn(b"a measuring descriptor is malformed; ignored\n"),
            Err(Refused::Config) => warn(
                b"the runtime was configured with too few slots; measurements are off\n",
            ),
        }
    }
    0
}

/// One line on stderr, in one `write` (libc is initialised: the runtime depends on it).
fn warn(msg: &[u8]) {
    let mut line = b"gsh-rt: ".to_vec();
    line.extend_from_slice(msg);
    // SAFETY: writes a valid buffer to fd 2; a failure is ignored (nothing better to do).
    unsafe { libc::write(2, line.as_ptr().cast(), line.len()) };
}

/// The loaded objects as `(name, load bias)`; the main program's empty name is replaced by the
/// path of the running executable.
pub fn modules() -> Vec<(String, u64)> {
    unsafe extern "C" fn push(
        info: *mut libc::dl_phdr_info,
        _size: libc::size_t,
        data: *mut libc::c_void,
    ) -> libc::c_int {
        // SAFETY: `data` is the Vec passed below; `info` is valid during the callback.
        unsafe {
            let out = &mut *data.cast::<Vec<(String, u64)>>();
            let name = (*info).dlpi_name;
            let name = if name.is_null() {
                String::new()
            } else {
                std::ffi::CStr::from_ptr(name)
                    .to_string_lossy()
                    .into_owned()
            };
            out.push((name, (*info).dlpi_addr));
        }
        0
    }
    let mut out: Vec<(String, u64)> = Vec::new();
    // SAFETY: the callback only reads its entry and appends to `out`, which outlives the call.
    unsafe { libc::dl_iterate_phdr(Some(push), (&mut out as *mut Vec<(String, u64)>).cast()) };
    if let Some(first) = out.first_mut().filter(|m| m.0.is_empty()) {
        if let Ok(exe) = std::fs::read_link("/proc/self/exe") {
            first.0 = exe.to_string_lossy().into_owned();
        }
    }
    out
}

/// Runs when the library is loaded (after every object is relocated, before the program's
/// constructors): serve the descriptors of the objects loaded with it.
extern "C" fn on_load() {
    thread::init_clock();
    // SAFETY: `visit` only reads the entries it is given and writes descriptors it checked.
    unsafe { libc::dl_iterate_phdr(Some(visit), std::ptr::null_mut()) };
}

#[used]
#[link_section = ".init_array"]
static ON_LOAD: extern "C" fn() = on_load;

#[cfg(test)]
mod tests {
    use super::*;

    /// A descriptor with strings, in 64-aligned memory, as `save` writes it (with the same
    /// writer).
    #[repr(C, align(64))]
    struct Buf([u8; 256]);

    fn descriptor(output: &[u8], meta: &[u8]) -> Box<Buf> {
        let mut b = Box::new(Buf([0; 256]));
        let bytes = gsh_rt_abi::descriptor::encode(3, output, meta, &[]).expect("fits");
        b.0[..bytes.len()].copy_from_slice(&bytes);
        b
    }

    #[test]
    fn serving_fills_the_fields_and_refuses_a_second_or_foreign_one() {
        let mut foreign = descriptor(b"", b"");
        foreign.0[7] = b'X';
        // SAFETY: the buffer is 256 writable bytes that outlive the test (leaked below).
        assert_eq!(
            unsafe { serve(foreign.0.as_mut_ptr(), 256, 0) },
            Err(Refused::NotOurs)
        );
        let mut bad = descriptor(b"", b"");
        let output = std::mem::offset_of!(Descriptor, output_off);
        bad.0[output..output + 4].copy_from_slice(&250u32.to_le_bytes());
        bad.0[output + 4..output + 8].copy_from_slice(&10u32.to_le_bytes());
        // SAFETY: as above.
        assert_eq!(
            unsafe { serve(bad.0.as_mut_ptr(), 256, 0) },
            Err(Refused::BadStrings)
        );

        // Two unwind entries, with link-time return addresses 0x1100 and 0x1200.
        let unwind: Vec<u8> = [0x1100u64, 0x1200]
            .into_iter()
            .flat_map(|ra| {
                let e = UnwindEntry {
                    ra,
                    cfa_off: 16,
                    base: crate::layout::UNWIND_BASE_RSP,
                    reserved: 0,
                    rbp_save: 0,
                };
                e.to_le_bytes()
            })
            .collect();
        let meta_text = b"{\"version\":1,\"slots\":[]}";
        let bytes = gsh_rt_abi::descriptor::encode(3, b"", meta_text, &unwind).expect("fits");
        let d = Box::leak(Box::new(Buf([0; 256])));
        d.0[..bytes.len()].copy_from_slice(&bytes);
        let tables = thread::GSH_RT_ROOT.unwind_count.load(Relaxed) as usize;
        // SAFETY: leaked, so mapped for the process's life.
        unsafe { serve(d.0.as_mut_ptr(), 256, 0x1000) }.expect("served");
        let root = &thread::GSH_RT_ROOT;
        let t = (0..root.unwind_count.load(Relaxed) as usize)
            .skip(tables)
            .map(|i| &root.unwind[i])
            .find(|t| t.lo.load(Relaxed) == 0x2100)
            .expect("the table is registered, moved by the bias");
        assert_eq!(t.hi.load(Relaxed), 0x2200);
        assert_eq!(t.len.load(Relaxed), 2);
        let desc = unsafe { &*d.0.as_ptr().cast::<Descriptor>() };
        assert_eq!(desc.tls_offset.load(Relaxed), tls::offset());
        assert_ne!(desc.tls_offset.load(Relaxed), 0);
        assert_eq!(
            desc.thread_fn.load(Relaxed),
            crate::gsh_rt_thread as *const () as u64
        );
        let got: Vec<u64> = desc.fns.iter().map(|f| f.load(Relaxed)).collect();
        assert_eq!(got, fns());
        assert_eq!(meta(), Some("{\"version\":1,\"slots\":[]}"));
        assert!(thread::GSH_RT_ROOT.max_slots.load(Relaxed) >= 3);

        let again = Box::leak(descriptor(b"", b""));
        // SAFETY: leaked.
        assert_eq!(
            unsafe { serve(again.0.as_mut_ptr(), 256, 0) },
            Err(Refused::AlreadyServing)
        );
        assert_eq!(
            unsafe { &*again.0.as_ptr().cast::<Descriptor>() }
                .tls_offset
                .load(Relaxed),
            0
        );
    }

    /// Each descriptor cell holds the function the ABI names for it: the test binary's own
    /// symbol table, moved by its load bias, gives each name's address.
    #[test]
    fn event_cells_hold_the_named_functions() {
        use object::{Object, ObjectSymbol};
        let exe = std::fs::read("/proc/self/exe").expect("read the test binary");
        let file = object::File::parse(&*exe).expect("ELF");
        let addr = |name: &str| {
            file.symbols()
                .find(|s| s.name() == Ok(name))
                .map(|s| s.address())
                .unwrap_or_else(|| panic!("no symbol `{name}` in the test binary"))
        };
        let bias = (crate::gsh_rt_thread as *const () as u64).wrapping_sub(addr("gsh_rt_thread"));
        for e in Event::ALL {
            assert_eq!(event_fn(e), addr(e.name()).wrapping_add(bias), "{e:?}");
        }
    }

    #[test]
    fn writable_means_a_writable_load_outside_relro() {
        let ph = |p_type, p_flags, p_vaddr, p_memsz| libc::Elf64_Phdr {
            p_type,
            p_flags,
            p_offset: 0,
            p_vaddr,
            p_paddr: p_vaddr,
            p_filesz: p_memsz,
            p_memsz,
            p_align: 0x1000,
        };
        let rw = ph(PT_LOAD, 6, 0x10000, 0x2000);
        let ro = ph(PT_LOAD, 4, 0x1000, 0x1000);
        let relro = ph(PT_GNU_RELRO, 4, 0x10000, 0x800);
        assert!(writable(&[ro, rw], 0x5000_0000, 0x5001_1000, 128));
        assert!(!writable(&[ro, rw], 0x5000_0000, 0x5000_1000, 128));
        assert!(!writable(&[ro, rw, relro], 0x5000_0000, 0x5001_0400, 128));
        assert!(writable(&[ro, rw, relro], 0x5000_0000, 0x5001_0800, 128));
        assert!(!writable(&[rw], 0, 0x11f90, 128));
    }

    #[test]
    fn modules_start_with_the_program() {
        let m = modules();
        let exe = std::fs::read_link("/proc/self/exe").expect("exe");
        assert_eq!(m[0].0, exe.to_string_lossy());
        assert!(m.iter().any(|(n, _)| n.contains("libc.so")));
    }
}
