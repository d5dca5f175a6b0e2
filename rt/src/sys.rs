//! The few system services the runtime needs, called with raw `syscall` instructions rather than
//! through libc: the mutatee's own libc functions (`mmap`, `open`, `read`) may be the ones being
//! instrumented, and calling them from the runtime's slow path would recurse into it.

use std::arch::asm;

const SYS_READ: u64 = 0;
const SYS_OPEN: u64 = 2;
const SYS_CLOSE: u64 = 3;
const SYS_MMAP: u64 = 9;
const SYS_MUNMAP: u64 = 11;
const SYS_FCNTL: u64 = 72;
const SYS_FTRUNCATE: u64 = 77;
const SYS_GETRLIMIT: u64 = 97;
const SYS_GETTID: u64 = 186;
const SYS_GETPID: u64 = 39;
const SYS_MEMFD_CREATE: u64 = 319;
const SYS_CLOCK_GETTIME: u64 = 228;

/// Issues a raw system call with up to six arguments and returns the kernel's result (negative
/// errno on failure).
///
/// # Safety
/// The caller must pass arguments valid for `nr`, as the kernel documents them.
unsafe fn syscall6(nr: u64, a: [u64; 6]) -> i64 {
    let ret: i64;
    // SAFETY: the x86-64 Linux syscall convention: number in rax, arguments in rdi, rsi, rdx,
    // r10, r8, r9; the kernel clobbers rcx and r11 and returns in rax. Memory effects are the
    // caller's contract.
    unsafe {
        asm!("syscall",
            inlateout("rax") nr as i64 => ret,
            in("rdi") a[0], in("rsi") a[1], in("rdx") a[2],
            in("r10") a[3], in("r8") a[4], in("r9") a[5],
            lateout("rcx") _, lateout("r11") _,
            options(nostack));
    }
    ret
}

/// Maps `len` bytes of zeroed anonymous read-write memory, or returns `None`.
pub fn mmap_anon(len: usize) -> Option<*mut u8> {
    let prot = (libc::PROT_READ | libc::PROT_WRITE) as u64;
    let flags = (libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE) as u64;
    // SAFETY: an anonymous private mapping at a kernel-chosen address touches no existing
    // memory; the kernel returns a page-aligned address or -errno.
    let ret = unsafe { syscall6(SYS_MMAP, [0, len as u64, prot, flags, u64::MAX, 0]) };
    if (-4095..0).contains(&ret) {
        None
    } else {
        Some(ret as *mut u8)
    }
}

/// A new memfd of `len` bytes (sparse: pages appear when first touched), closed on exec;
/// `None` when the kernel refuses.
pub fn memfd(name: &std::ffi::CStr, len: u64) -> Option<i32> {
    // SAFETY: `name` is NUL-terminated; memfd_create only reads it and returns a new fd.
    let fd = unsafe {
        syscall6(
            SYS_MEMFD_CREATE,
            [name.as_ptr() as u64, libc::MFD_CLOEXEC as u64, 0, 0, 0, 0],
        )
    };
    if fd < 0 {
        return None;
    }
    if !ftruncate(fd as i32, len) {
        close(fd as i32);
        return None;
    }
    Some(fd as i32)
}

/// The lowest descriptor [`move_high`] moves the runtime's to, where the limit allows.
const HIGH_FD: u64 = 512;

/// Moves descriptor `fd` (the runtime's own) to a number at or above [`HIGH_FD`] (half the
/// descriptor limit when that is lower, never below 10), closing the original; `fd` where none
/// is free there. The program keeps the descriptor numbers it has without gsh: `open` returns
/// the lowest free one (a program opening a file got 4, not 3, beside the arena's memfd), and a
/// program that `dup2`s onto a low number would close the runtime's under it.
pub fn move_high(fd: i32) -> i32 {
    let mut lim = [0u64; 2];
    // SAFETY: getrlimit writes one rlimit (two u64) into `lim`.
    let got = unsafe {
        syscall6(
            SYS_GETRLIMIT,
            [
                libc::RLIMIT_NOFILE as u64,
                lim.as_mut_ptr() as u64,
                0,
                0,
                0,
                0,
            ],
        )
    };
    let floor = if got == 0 {
        HIGH_FD.min(lim[0] / 2).max(10)
    } else {
        10
    };
    // SAFETY: F_DUPFD_CLOEXEC duplicates the runtime's own descriptor to a free number.
    let high = unsafe {
        syscall6(
            SYS_FCNTL,
            [fd as u64, libc::F_DUPFD_CLOEXEC as u64, floor, 0, 0, 0],
        )
    };
    if high < 0 {
        return fd;
    }
    close(fd);
    high as i32
}

/// Sets the size of the file `fd` (a memfd the runtime made). True when done.
pub fn ftruncate(fd: i32, len: u64) -> bool {
    // SAFETY: `fd` is the runtime's own memfd; ftruncate only sets its size.
    unsafe { syscall6(SYS_FTRUNCATE, [fd as u64, len, 0, 0, 0, 0]) == 0 }
}

/// Maps `len` bytes of `fd` from file offset `offset` (page-aligned) shared, read-write, at a
/// kernel-chosen address.
pub fn mmap_shared(fd: i32, len: usize, offset: u64) -> Option<*mut u8> {
    let prot = (libc::PROT_READ | libc::PROT_WRITE) as u64;
    let flags = (libc::MAP_SHARED | libc::MAP_NORESERVE) as u64;
    // SAFETY: a new mapping at a kernel-chosen address touches no existing memory; the kernel
    // returns a page-aligned address or -errno.
    let ret = unsafe { syscall6(SYS_MMAP, [0, len as u64, prot, flags, fd as u64, offset]) };
    if (-4095..0).contains(&ret) {
        None
    } else {
        Some(ret as *mut u8)
    }
}

/// Replaces the mapping at `at` (`len` bytes, mapped shared from `fd` at `offset`) with a
/// private, copy-on-write mapping of the same file range: the same bytes, whose later writes
/// stay in this process. True when done.
pub fn mmap_private_over(at: *mut u8, len: usize, fd: i32, offset: u64) -> bool {
    let prot = (libc::PROT_READ | libc::PROT_WRITE) as u64;
    let flags = (libc::MAP_PRIVATE | libc::MAP_FIXED | libc::MAP_NORESERVE) as u64;
    // SAFETY: MAP_FIXED replaces exactly one of the runtime's own arena mappings
    // `[at, at + len)` with one of the same file range, so every address stays mapped with
    // the same bytes.
    let ret = unsafe {
        syscall6(
            SYS_MMAP,
            [at as u64, len as u64, prot, flags, fd as u64, offset],
        )
    };
    ret == at as i64
}

/// Unmaps `[at, at + len)`.
///
/// # Safety
/// Nothing may use that memory afterwards.
pub unsafe fn munmap(at: u64, len: u64) {
    // SAFETY: the caller guarantees the range is no longer used; a failure unmaps nothing.
    unsafe { syscall6(SYS_MUNMAP, [at, len, 0, 0, 0, 0]) };
}

/// The calling process's id.
pub fn getpid() -> i32 {
    // SAFETY: getpid takes no arguments and cannot fail.
    unsafe { syscall6(SYS_GETPID, [0; 6]) as i32 }
}

/// Closes `fd`.
pub fn close(fd: i32) {
    // SAFETY: closing a descriptor the runtime owns; errors leave nothing to undo.
    unsafe { syscall6(SYS_CLOSE, [fd as u64, 0, 0, 0, 0, 0]) };
}

/// Reads a POSIX clock in nanoseconds with the raw system call (0 if the clock is
/// unavailable).
#[inline(always)]
pub fn clock_gettime(clock: libc::clockid_t) -> u64 {
    let mut ts = [0i64; 2];
    // SAFETY: `ts` has the layout of a `struct timespec` (two i64s on x86-64) and the kernel
    // only writes it.
    let ret = unsafe {
        syscall6(
            SYS_CLOCK_GETTIME,
            [clock as u64, ts.as_mut_ptr() as u64, 0, 0, 0, 0],
        )
    };
    if ret != 0 {
        return 0;
    }
    (ts[0] as u64)
        .wrapping_mul(1_000_000_000)
        .wrapping_add(ts[1] as u64)
}

/// The calling thread's kernel thread id.
pub fn gettid() -> u32 {
    // SAFETY: gettid takes no arguments and cannot fail.
    unsafe { syscall6(SYS_GETTID, [0; 6]) as u32 }
}

/// Reads the whole of a small file (e.g. under /proc or /sys) into `buf`, calling `sink` with
/// each chunk. Returns false if the file could not be opened.
pub fn read_file_chunks(
    path: &std::ffi::CStr,
    buf: &mut [u8],
    mut sink: impl FnMut(&[u8]),
) -> bool {
    // SAFETY: `path` is NUL-terminated; O_RDONLY|O_CLOEXEC opens without side effects.
    let fd = unsafe {
        syscall6(
            SYS_OPEN,
            [
                path.as_ptr() as u64,
                (libc::O_RDONLY | libc::O_CLOEXEC) as u64,
                0,
                0,
                0,
                0,
            ],
        )
    };
    if fd < 0 {
        return false;
    }
    loop {
        // SAFETY: `buf` is writable for `buf.len()` bytes and `fd` is open.
        let n = unsafe {
            syscall6(
                SYS_READ,
                [
                    fd as u64,
                    buf.as_mut_ptr() as u64,
                    buf.len() as u64,
                    0,
                    0,
                    0,
                ],
            )
        };
        if n <= 0 {
            break;
        }
        sink(&buf[..n as usize]);
    }
    // SAFETY: `fd` was opened above and is closed once.
    unsafe { syscall6(SYS_CLOSE, [fd as u64, 0, 0, 0, 0, 0]) };
    true
}

/// Finds the readable mapping containing `addr` in `/proc/self/maps`: `(start, end)`.
///
/// Used to bound the call-path walk: every address in `[rsp, end)` of the mapping that holds the
/// stack pointer is readable, since stacks grow down and their guard page lies below.
pub fn mapping_containing(addr: u64) -> Option<(u64, u64)> {
    let mut words = std::mem::MaybeUninit::<[u64; 256]>::uninit();
    // Zeroed word by word with volatile stores: `[0u8; 2048]` compiles to a call of libc's
    // `memset`, which the call-path walk of the `_tsc` entry points must not reach.
    for i in 0..256 {
        // SAFETY: `i < 256` words of the local buffer.
        unsafe { words.as_mut_ptr().cast::<u64>().add(i).write_volatile(0) };
    }
    // SAFETY: every word was initialised above; borrowed in place (a move could copy it with
    // `memcpy`), and any byte pattern is a valid `u8`.
    let buf = unsafe {
        let words = words.assume_init_mut();
        std::slice::from_raw_parts_mut(words.as_mut_ptr().cast::<u8>(), 2048)
    };
    let mut line = [0u8; 64];
    let mut len = 0usize;
    let mut skipping = false;
    let mut found = None;
    let ok = read_file_chunks(c"/proc/self/maps", buf, |chunk| {
        for &b in chunk {
            if found.is_some() {
                return;
            }
            if b == b'\n' {
                if let Some((lo, hi, readable)) = parse_maps_prefix(&line[..len]) {
                    if readable && lo <= addr && addr < hi {
                        found = Some((lo, hi));
                    }
                }
                len = 0;
                skipping = false;
            } else if !skipping {
                if len < line.len() {
                    line[len] = b;
                    len += 1;
                } else {
                    skipping = true;
                }
            }
        }
    });
    if ok {
        found
    } else {
        None
    }
}

/// Parses `start-end perms` at the front of a maps line.
fn parse_maps_prefix(line: &[u8]) -> Option<(u64, u64, bool)> {
    let mut it = line.split(|&b| b == b' ');
    let range = it.next()?;
    let perms = it.next()?;
    let dash = range.iter().position(|&b| b == b'-')?;
    let lo = parse_hex(&range[..dash])?;
    let hi = parse_hex(&range[dash + 1..])?;
    Some((lo, hi, perms.first() == Some(&b'r')))
}

fn parse_hex(s: &[u8]) -> Option<u64> {
    if s.is_empty() || s.len() > 16 {
        return None;
    }
    let mut v = 0u64;
    for &b in s {
        let d = (b as char).to_digit(16)?;
        v = (v << 4) | d as u64;
    }
    Some(v)
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_stack_is_in_a_mapping() {
        let local = 0u64;
        let addr = &local as *const u64 as u64;
        let (lo, hi) = super::mapping_containing(addr).expect("stack mapping");
        assert!(lo <= addr && addr < hi);
    }

    #[test]
    fn maps_prefix_parses() {
        let line = b"7ffd0000-7ffe1000 rw-p 00000000 00:00 0 [stack]";
        assert_eq!(
            super::parse_maps_prefix(line),
            Some((0x7ffd0000, 0x7ffe1000, true))
        );
        assert_eq!(super::parse_maps_prefix(b"zz-1 r"), None);
    }
}
