//! The test's own process as an [`AddressSpace`]: a shared library built from C at test time
//! and `dlopen`ed, trampolines and data `mmap`ed in a free gap within reach of it (found in
//! `/proc/self/maps`, mapped with `MAP_FIXED_NOREPLACE`), code written with `mprotect`
//! RW → write → RX, never RWX.

use std::ffi::CString;
use std::path::{Path, PathBuf};
use std::process::Command;

use crate::addr::RuntimeAddr;
use crate::space::{within_rel32, AddressSpace, AllocKind, SpaceError};

const PAGE: u64 = 4096;
const REGION: u64 = 1 << 21;

/// Builds `name.so` from C and assembly sources in a fresh directory (one per test, so every
/// test `dlopen`s its own copy and patches nobody else's code).
pub fn build(name: &str, c: &str, asm: &str, opt: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("gsh-patch-{}-{name}{opt}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let (cs, ss, so) = (
        dir.join("lib.c"),
        dir.join("lib.S"),
        dir.join(format!("{name}.so")),
    );
    std::fs::write(&cs, c).expect("write C");
    std::fs::write(&ss, asm).expect("write asm");
    let out = Command::new("gcc")
        .args([opt, "-shared", "-fPIC", "-g", "-o"])
        .arg(&so)
        .arg(&cs)
        .arg(&ss)
        .output()
        .expect("gcc runs (the patch tests need gcc)");
    assert!(
        out.status.success(),
        "gcc failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    so
}

/// A `dlopen`ed library, closed on drop.
pub struct Lib {
    handle: *mut libc::c_void,
}

impl Lib {
    pub fn open(path: &Path) -> Lib {
        let p = CString::new(path.to_string_lossy().as_bytes()).expect("path without NUL");
        // SAFETY: dlopen of a library we just built; its constructors are gcc's defaults.
        let handle = unsafe { libc::dlopen(p.as_ptr(), libc::RTLD_NOW | libc::RTLD_LOCAL) };
        assert!(!handle.is_null(), "dlopen {} failed", path.display());
        Lib { handle }
    }

    pub fn sym(&self, name: &str) -> u64 {
        let n = CString::new(name).expect("name without NUL");
        // SAFETY: looks a symbol up in a handle we own.
        let p = unsafe { libc::dlsym(self.handle, n.as_ptr()) };
        assert!(!p.is_null(), "no symbol {name}");
        p as u64
    }
}

impl Drop for Lib {
    fn drop(&mut self) {
        // SAFETY: closes the handle we opened; no function pointers into it outlive the test.
        unsafe { libc::dlclose(self.handle) };
    }
}

/// Free gaps between mappings, from `/proc/self/maps`.
fn gaps() -> Vec<(u64, u64)> {
    let maps = std::fs::read_to_string("/proc/self/maps").expect("read /proc/self/maps");
    let mut spans: Vec<(u64, u64)> = maps
        .lines()
        .filter_map(|l| {
            let (a, b) = l.split_whitespace().next()?.split_once('-')?;
            Some((
                u64::from_str_radix(a, 16).ok()?,
                u64::from_str_radix(b, 16).ok()?,
            ))
        })
        .collect();
    spans.sort();
    spans
        .windows(2)
        .map(|w| (w[0].1, w[1].0))
        .filter(|g| g.1 > g.0)
        .collect()
}

/// Trampoline (first half) and data (second half) memory near one library.
pub struct InProcess {
    base: u64,
    code_used: u64,
    data_used: u64,
}

impl InProcess {
    pub fn near(lib: u64) -> InProcess {
        let mut candidates: Vec<u64> = gaps()
            .into_iter()
            .filter(|g| g.1 - g.0 >= REGION + 2 * PAGE)
            .map(|(lo, hi)| {
                if hi <= lib {
                    (hi - REGION - PAGE) & !(PAGE - 1)
                } else {
                    (lo + PAGE + PAGE - 1) & !(PAGE - 1)
                }
            })
            .filter(|&a| {
                within_rel32(lib, a) && within_rel32(lib, a + REGION) && within_rel32(a, lib)
            })
            .collect();
        candidates.sort_by_key(|&a| a.abs_diff(lib));
        for a in candidates {
            // SAFETY: MAP_FIXED_NOREPLACE never replaces an existing mapping; it fails instead.
            let p = unsafe {
                libc::mmap(
                    a as *mut libc::c_void,
                    REGION as usize,
                    libc::PROT_READ | libc::PROT_WRITE,
                    libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_FIXED_NOREPLACE,
                    -1,
                    0,
                )
            };
            if p as u64 == a {
                let s = InProcess {
                    base: a,
                    code_used: 0,
                    data_used: 0,
                };
                protect(a, REGION / 2, libc::PROT_READ | libc::PROT_EXEC);
                return s;
            }
            if p != libc::MAP_FAILED {
                // SAFETY: an old kernel treated the flag as a hint; unmap what it gave us.
                unsafe { libc::munmap(p, REGION as usize) };
            }
        }
        panic!("no free gap within ±2 GiB of {lib:#x}");
    }
}

impl Drop for InProcess {
    fn drop(&mut self) {
        // SAFETY: unmaps our own region; the patched library was restored or closed first.
        unsafe { libc::munmap(self.base as *mut libc::c_void, REGION as usize) };
    }
}

fn protect(addr: u64, len: u64, prot: libc::c_int) {
    let lo = addr & !(PAGE - 1);
    let hi = (addr + len).div_ceil(PAGE) * PAGE;
    // SAFETY: changes protection of pages of our own region or of the test library's text,
    // which no other thread executes (each test loads its own copy).
    let r = unsafe { libc::mprotect(lo as *mut libc::c_void, (hi - lo) as usize, prot) };
    assert_eq!(r, 0, "mprotect: {}", std::io::Error::last_os_error());
}

impl AddressSpace for InProcess {
    fn read(&self, addr: RuntimeAddr, len: usize) -> Result<Vec<u8>, SpaceError> {
        // SAFETY: the patcher reads only the library's text and our region, both mapped
        // readable for the life of the test.
        Ok(unsafe { std::slice::from_raw_parts(addr.0 as *const u8, len) }.to_vec())
    }

    fn allocate(
        &mut self,
        near: RuntimeAddr,
        size: u64,
        kind: AllocKind,
    ) -> Result<RuntimeAddr, SpaceError> {
        let half = REGION / 2;
        let (start, used, align) = match kind {
            AllocKind::Code => (self.base, &mut self.code_used, 16),
            AllocKind::Data => (self.base + half, &mut self.data_used, 64),
        };
        let at = used.div_ceil(align) * align;
        if at + size > half
            || !within_rel32(near.0, start + at)
            || !within_rel32(near.0, start + at + size)
        {
            return Err(SpaceError::NoRoom { near, size });
        }
        *used = at + size;
        Ok(RuntimeAddr(start + at))
    }

    fn write(&mut self, addr: RuntimeAddr, bytes: &[u8]) -> Result<(), SpaceError> {
        let data = self.base + REGION / 2..self.base + REGION;
        let is_data = data.contains(&addr.0);
        if !is_data {
            protect(
                addr.0,
                bytes.len() as u64,
                libc::PROT_READ | libc::PROT_WRITE,
            );
        }
        // SAFETY: the range is mapped writable now (data, or code just made RW).
        unsafe { std::ptr::copy_nonoverlapping(bytes.as_ptr(), addr.0 as *mut u8, bytes.len()) };
        if !is_data {
            protect(
                addr.0,
                bytes.len() as u64,
                libc::PROT_READ | libc::PROT_EXEC,
            );
        }
        Ok(())
    }
}
