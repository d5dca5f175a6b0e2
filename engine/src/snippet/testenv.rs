//! Test support: executable memory and the `extern "C"` shim that runs a snippet under the
//! snippet ABI, the declared variables the differential tests use, and an interpreter
//! [`Machine`] over a copy of them.

use iced_x86::code_asm::*;

use super::abi::SavedRegs;
use super::env::{MapEnv, PointInfo, PointKind, VarPlace};
use super::interp::{Addr, Machine, Value};
use super::types::{IntKind, Type};

/// A private anonymous mapping, unmapped on drop.
pub struct Mapping {
    ptr: *mut u8,
    len: usize,
}

impl Mapping {
    /// Maps `len` bytes read-write, near `hint` when the kernel agrees.
    pub fn new(len: usize, hint: u64) -> Mapping {
        // SAFETY: an anonymous private mapping with no fixed address cannot alias existing
        // memory; the kernel treats `hint` only as a preference.
        let ptr = unsafe {
            libc::mmap(
                hint as *mut libc::c_void,
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        assert_ne!(
            ptr,
            libc::MAP_FAILED,
            "mmap failed: {}",
            std::io::Error::last_os_error()
        );
        Mapping {
            ptr: ptr.cast(),
            len,
        }
    }

    pub fn addr(&self) -> u64 {
        self.ptr as u64
    }

    pub fn bytes(&mut self) -> &mut [u8] {
        // SAFETY: the mapping is `len` bytes, readable and writable while we hold `&mut self`
        // (only the code mapping is ever made read-execute, through `protect`, and it is not
        // accessed through this method then).
        unsafe { std::slice::from_raw_parts_mut(self.ptr, self.len) }
    }

    pub fn protect(&mut self, prot: libc::c_int) {
        // SAFETY: changes protection of exactly our own mapping.
        let r = unsafe { libc::mprotect(self.ptr.cast(), self.len, prot) };
        assert_eq!(r, 0, "mprotect failed: {}", std::io::Error::last_os_error());
    }
}

impl Drop for Mapping {
    fn drop(&mut self) {
        // SAFETY: unmaps exactly what `new` mapped; no references into it outlive `self`.
        unsafe { libc::munmap(self.ptr.cast(), self.len) };
    }
}

/// The general registers a snippet left behind, indexed by register number.
pub type RegDump = [u64; 16];

/// The value the shim puts in register N before the snippet runs.
pub fn sentinel(n: usize) -> u64 {
    0x5e00_0000_0000_0000 | (n as u64) << 40 | 0x1234_5678
}

const GPRS: [AsmRegister64; 16] = [
    rax, rcx, rdx, rbx, rsp, rbp, rsi, rdi, r8, r9, r10, r11, r12, r13, r14, r15,
];

/// Code memory holding `shim prologue; snippet; shim epilogue`. The shim is an
/// `extern "C" fn(*mut SavedRegs, *mut RegDump)`: it saves the callee-saved registers, aligns
/// the stack to 16 bytes, points `rbx` at the block, fills every other register with a
/// sentinel, runs the snippet, and dumps all registers so tests can check the clobber report.
pub struct Runner {
    code: Mapping,
    prologue: Vec<u8>,
}

const CODE_SIZE: usize = 1 << 16;

impl Runner {
    pub fn new(hint: u64) -> Runner {
        let code = Mapping::new(CODE_SIZE, hint);
        let prologue = Self::prologue(code.addr()).expect("shim prologue assembles");
        Runner { code, prologue }
    }

    fn prologue(at: u64) -> Result<Vec<u8>, IcedError> {
        let mut a = CodeAssembler::new(64)?;
        for r in [rbx, rbp, r12, r13, r14, r15] {
            a.push(r)?;
        }
        // Entry rsp is 8 mod 16; six pushes and this make it 0 mod 16.
        a.sub(rsp, 8)?;
        a.mov(rbx, rdi)?;
        a.mov(rbp, rsi)?;
        for (n, r) in GPRS.iter().enumerate() {
            if ![3, 4, 5].contains(&n) {
                a.mov(*r, sentinel(n))?;
            }
        }
        a.assemble(at)
    }

    fn epilogue(at: u64) -> Result<Vec<u8>, IcedError> {
        let mut a = CodeAssembler::new(64)?;
        for (n, r) in GPRS.iter().enumerate() {
            if n != 5 {
                a.mov(qword_ptr(rbp + 8 * n as i32), *r)?;
            }
        }
        a.add(rsp, 8)?;
        for r in [r15, r14, r13, r12, rbp, rbx] {
            a.pop(r)?;
        }
        a.ret()?;
        a.assemble(at)
    }

    /// Where the snippet will be placed: compile for this address.
    pub fn snippet_addr(&self) -> u64 {
        self.code.addr() + self.prologue.len() as u64
    }

    /// Runs `snippet` (compiled for [`Runner::snippet_addr`]) with `regs` as the saved block.
    pub fn run(&mut self, snippet: &[u8], regs: &mut SavedRegs) -> RegDump {
        let at = self.snippet_addr() + snippet.len() as u64;
        let epilogue = Self::epilogue(at).expect("shim epilogue assembles");
        let total = self.prologue.len() + snippet.len() + epilogue.len();
        assert!(total <= CODE_SIZE, "snippet too large for the test runner");
        self.code.protect(libc::PROT_READ | libc::PROT_WRITE);
        let p = self.prologue.len();
        let bytes = self.code.bytes();
        bytes[..p].copy_from_slice(&self.prologue);
        bytes[p..p + snippet.len()].copy_from_slice(snippet);
        bytes[p + snippet.len()..total].copy_from_slice(&epilogue);
        // Never writable and executable at once.
        self.code.protect(libc::PROT_READ | libc::PROT_EXEC);
        let mut dump: RegDump = [0; 16];
        // SAFETY: the mapping now holds the shim around the snippet, read-execute; the shim
        // follows the SysV ABI for `extern "C" fn(*mut SavedRegs, *mut RegDump)` (it restores
        // every callee-saved register and rsp), and the snippet touches only memory the test
        // gave it addresses of.
        let f: extern "C" fn(*mut SavedRegs, *mut RegDump) =
            unsafe { std::mem::transmute(self.code.addr() as *const u8) };
        f(regs, &mut dump);
        dump
    }
}

/// A declared test variable: name, type and byte offset in the data area.
pub const VARS: [(&str, Type, u64); 12] = [
    ("c", Type::Int(IntKind::Char), 0),
    ("uc", Type::Int(IntKind::UChar), 1),
    ("s", Type::Int(IntKind::Short), 2),
    ("us", Type::Int(IntKind::UShort), 4),
    ("i", Type::Int(IntKind::Int), 8),
    ("u", Type::Int(IntKind::UInt), 12),
    ("l", Type::Int(IntKind::Long), 16),
    ("ul", Type::Int(IntKind::ULong), 24),
    ("d", Type::Double, 32),
    ("i2", Type::Int(IntKind::Int), 40),
    ("l2", Type::Int(IntKind::Long), 48),
    ("d2", Type::Double, 56),
];

/// Offsets of `p` (a `long *` to `l2`) and `q` (an `int *` to `i2`).
pub const P_OFFSET: u64 = 64;
pub const Q_OFFSET: u64 = 72;
pub const DATA_SIZE: usize = 80;

/// The environment of the differential tests: the variables above at `data`, at an entry
/// point (so `$0..$5` work).
pub fn var_env(data: u64) -> MapEnv {
    let mut env = MapEnv {
        point: PointInfo {
            kind: PointKind::Entry,
            function: "work".into(),
            module: "a.out".into(),
            ..PointInfo::default()
        },
        ..MapEnv::default()
    };
    for (name, ty, off) in VARS {
        env = env.var(name, ty, VarPlace::Absolute(data + off));
    }
    env.var(
        "p",
        Type::ptr(Type::LONG),
        VarPlace::Absolute(data + P_OFFSET),
    )
    .var(
        "q",
        Type::ptr(Type::INT),
        VarPlace::Absolute(data + Q_OFFSET),
    )
}

/// An interpreter machine over a copy of the data area at the same addresses.
pub struct CopyMachine {
    pub base: u64,
    pub mem: Vec<u8>,
    pub saved: SavedRegs,
}

fn saved_bytes(s: &mut SavedRegs) -> &mut [u8] {
    // SAFETY: `SavedRegs` is `repr(C)` plain old data of u64s with no padding; viewing it as
    // bytes is sound, and the borrow keeps it exclusive.
    unsafe {
        std::slice::from_raw_parts_mut(
            (s as *mut SavedRegs).cast::<u8>(),
            std::mem::size_of::<SavedRegs>(),
        )
    }
}

impl CopyMachine {
    fn slice(&mut self, addr: Addr, size: u32) -> Result<&mut [u8], String> {
        let size = size as usize;
        match addr {
            Addr::Saved(o) => saved_bytes(&mut self.saved)
                .get_mut(o as usize..o as usize + size)
                .ok_or_else(|| format!("saved offset {o} out of range")),
            Addr::Mem(a) => {
                let off = a.wrapping_sub(self.base) as usize;
                self.mem
                    .get_mut(off..off.wrapping_add(size))
                    .ok_or_else(|| format!("address {a:#x} outside the test data"))
            }
        }
    }
}

impl Machine for CopyMachine {
    fn read(&mut self, addr: Addr, size: u32) -> Result<u64, String> {
        let s = self.slice(addr, size)?;
        let mut b = [0u8; 8];
        b[..s.len()].copy_from_slice(s);
        Ok(u64::from_le_bytes(b))
    }

    fn write(&mut self, addr: Addr, size: u32, bits: u64) -> Result<(), String> {
        let s = self.slice(addr, size)?;
        let n = s.len();
        s.copy_from_slice(&bits.to_le_bytes()[..n]);
        Ok(())
    }

    fn string_addr(&mut self, index: usize) -> u64 {
        index as u64
    }

    fn call(&mut self, _addr: u64, _args: &[(Value, Type)], _ret: &Type) -> Result<Value, String> {
        Err("the copy machine cannot call functions".into())
    }

    fn tid(&mut self) -> u64 {
        // SAFETY: gettid has no preconditions.
        (unsafe { libc::gettid() }) as u64
    }
}
