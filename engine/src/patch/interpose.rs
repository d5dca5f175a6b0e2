//! Keeping gsh's SIGTRAP handler first in a rewritten file whose program manages signals
//! itself (issue 12). bash installs a handler for nearly every signal and blocks them around
//! critical sections; once its own SIGTRAP handler replaced gsh's, the next trap site ran
//! bash's handler, which returned to the byte after the `int3`, inside a displaced jump, and
//! interactive `bash -i` died of SIGSEGV.
//!
//! So `save`, when it writes traps, sends the program's calls to `sigaction`, `signal` (and
//! `bsd_signal`, `sysv_signal`), `sigprocmask` and `pthread_sigmask` through its PLT stubs to
//! small wrappers written here:
//!
//! ```text
//!   sigaction(SIGTRAP, act, old): old ← the program's recorded action; record act; return 0
//!                                 (the kernel keeps gsh's handler, which passes the traps
//!                                 that are not gsh's to the recorded handler)
//!   sigaction(other, act, old):   act's sa_mask without SIGTRAP, then the real sigaction
//!   signal(SIGTRAP, h):           record h, return the recorded handler
//!   sigprocmask / pthread_sigmask(how, set, old):
//!                                 unless how is SIG_UNBLOCK, set without SIGTRAP, then the
//!                                 real function
//!   the real function:            the stub's own instructions, relocated (`jmp [GOT]`, or a
//!                                 jump into the trampoline when the stub is instrumented)
//! ```
//!
//! The stub's first 5 bytes become a `jmp` to its wrapper. The recorded action is the
//! handler's `previous` slot ([`super::trap`]), in the kernel's layout (handler, flags,
//! restorer, first 8 bytes of the mask).
//!
//! Limits: calls that do not go through the rewritten file's PLT (from a library, through a
//! raw `syscall`, or `-fno-plt` code calling through the GOT) are not seen; the program's
//! SIGTRAP handler runs with gsh's handler's flags and mask, not its own (`SA_RESETHAND`,
//! `SA_NODEFER` and its `sa_mask` are recorded, not applied); and SIGTRAP is never blocked,
//! so a SIGTRAP the program sends itself while it believes SIGTRAP blocked arrives at once.

use super::trap::lea_rip;
use iced_x86::code_asm::*;
use iced_x86::Register;
use iced_x86::{BlockEncoderOptions, Code, Decoder, DecoderOptions, FlowControl, Instruction};

/// Which C library function a stub leads to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// `int sigaction(int, const struct sigaction *, struct sigaction *)`.
    Sigaction,
    /// `sighandler_t signal(int, sighandler_t)` and its BSD and System V spellings.
    Signal,
    /// `sigprocmask` and `pthread_sigmask`: `(int how, const sigset_t *, sigset_t *)`.
    Mask,
}

impl Kind {
    /// The kind of the import `name` (as in `name@plt`), if gsh wraps it.
    pub fn of(name: &str) -> Option<Kind> {
        match name {
            "sigaction" => Some(Kind::Sigaction),
            "signal" | "bsd_signal" | "sysv_signal" | "__sysv_signal" => Some(Kind::Signal),
            "sigprocmask" | "pthread_sigmask" => Some(Kind::Mask),
            _ => None,
        }
    }
}

const SIGTRAP: u32 = 5;
/// SIGTRAP's bit in the first word of a `sigset_t` (signal n is bit n - 1).
const TRAP_BIT: u32 = SIGTRAP - 1;
const SIG_UNBLOCK: u32 = 1;
const SA_RESTART: u32 = 0x1000_0000;
/// glibc's `struct sigaction`: handler, the 128-byte mask, `int sa_flags` (padded), restorer.
const ACT_MASK: i32 = 8;
const ACT_FLAGS: i32 = 136;
const ACT_RESTORER: i32 = 144;
const ACT_SIZE: i32 = 152;
/// `sigset_t`'s size in glibc.
const SET_SIZE: i32 = 128;

/// Decodes the stub at `ip` (its current bytes): the instructions up to and including the
/// first jump, which the wrapper runs to reach the real function. `None` when something else
/// comes first (a trap site's `int3`).
pub fn stub_path(bytes: &[u8], ip: u64) -> Option<Vec<Instruction>> {
    let mut out = Vec::new();
    for i in Decoder::with_ip(64, bytes, ip, DecoderOptions::NONE).iter() {
        match i.flow_control() {
            FlowControl::UnconditionalBranch | FlowControl::IndirectBranch => {
                out.push(i);
                return Some(out);
            }
            _ if i.code() == Code::Endbr64 => out.push(i),
            _ => return None,
        }
    }
    None
}

/// Copies `bytes` (a multiple of 8) from `[rsi]` to `[rsp]`, through rax.
fn copy_to_stack(a: &mut CodeAssembler, bytes: i32) -> Result<(), IcedError> {
    for off in (0..bytes).step_by(8) {
        a.mov(rax, qword_ptr(rsi + off))?;
        a.mov(qword_ptr(rsp + off), rax)?;
    }
    Ok(())
}

/// Assembles the wrapper for a stub of `kind` at `at`; `path` is [`stub_path`]'s result and
/// `previous` the recorded SIGTRAP action's address.
pub fn assemble(
    kind: Kind,
    at: u64,
    path: &[Instruction],
    previous: u64,
) -> Result<Vec<u8>, IcedError> {
    let mut a = CodeAssembler::new(64)?;
    let mut pass = a.create_label();
    match kind {
        Kind::Sigaction => {
            let mut other = a.create_label();
            let mut no_old = a.create_label();
            let mut no_new = a.create_label();
            a.cmp(edi, SIGTRAP)?;
            a.jne(other)?;
            lea_rip(&mut a, Register::R8, previous)?;
            a.test(rdx, rdx)?;
            a.je(no_old)?;
            a.xor(eax, eax)?;
            for off in (0..ACT_SIZE).step_by(8) {
                a.mov(qword_ptr(rdx + off), rax)?;
            }
            a.mov(rax, qword_ptr(r8))?;
            a.mov(qword_ptr(rdx), rax)?;
            a.mov(rax, qword_ptr(r8 + 24))?;
            a.mov(qword_ptr(rdx + ACT_MASK), rax)?;
            a.mov(eax, dword_ptr(r8 + 8))?;
            a.mov(dword_ptr(rdx + ACT_FLAGS), eax)?;
            a.mov(rax, qword_ptr(r8 + 16))?;
            a.mov(qword_ptr(rdx + ACT_RESTORER), rax)?;
            a.set_label(&mut no_old)?;
            a.test(rsi, rsi)?;
            a.je(no_new)?;
            a.mov(rax, qword_ptr(rsi))?;
            a.mov(qword_ptr(r8), rax)?;
            a.mov(eax, dword_ptr(rsi + ACT_FLAGS))?; // zero-extends
            a.mov(qword_ptr(r8 + 8), rax)?;
            a.mov(rax, qword_ptr(rsi + ACT_RESTORER))?;
            a.mov(qword_ptr(r8 + 16), rax)?;
            a.mov(rax, qword_ptr(rsi + ACT_MASK))?;
            a.mov(qword_ptr(r8 + 24), rax)?;
            a.set_label(&mut no_new)?;
            a.xor(eax, eax)?;
            a.ret()?;

            // Another signal: its handler's mask must not block SIGTRAP.
            a.set_label(&mut other)?;
            a.test(rsi, rsi)?;
            a.je(pass)?;
            a.bt(qword_ptr(rsi + ACT_MASK), TRAP_BIT)?;
            a.jae(pass)?; // carry clear: not in the mask
                          // rsp is 8 mod 16 here; the buffer keeps the call aligned.
            let frame = ACT_SIZE + 16;
            a.sub(rsp, frame)?;
            copy_to_stack(&mut a, ACT_SIZE)?;
            a.btr(qword_ptr(rsp + ACT_MASK), TRAP_BIT)?;
            a.mov(rsi, rsp)?;
            a.call(pass)?;
            a.add(rsp, frame)?;
            a.ret()?;
        }
        Kind::Signal => {
            a.cmp(edi, SIGTRAP)?;
            a.jne(pass)?;
            lea_rip(&mut a, Register::R8, previous)?;
            a.mov(rax, qword_ptr(r8))?;
            a.mov(qword_ptr(r8), rsi)?;
            a.mov(qword_ptr(r8 + 8), SA_RESTART as i32)?;
            a.mov(qword_ptr(r8 + 16), 0)?;
            a.mov(qword_ptr(r8 + 24), 0)?;
            a.ret()?;
        }
        Kind::Mask => {
            a.test(rsi, rsi)?;
            a.je(pass)?;
            a.cmp(edi, SIG_UNBLOCK)?;
            a.je(pass)?;
            a.bt(qword_ptr(rsi), TRAP_BIT)?;
            a.jae(pass)?;
            let frame = SET_SIZE + 8;
            a.sub(rsp, frame)?;
            copy_to_stack(&mut a, SET_SIZE)?;
            a.btr(qword_ptr(rsp), TRAP_BIT)?;
            a.mov(rsi, rsp)?;
            a.call(pass)?;
            a.add(rsp, frame)?;
            a.ret()?;
        }
    }
    a.set_label(&mut pass)?;
    for i in path {
        a.add_instruction(*i)?;
    }
    let result = a.assemble_options(at, BlockEncoderOptions::NONE)?;
    Ok(result.inner.code_buffer)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_signal_functions_are_wrapped() {
        assert_eq!(Kind::of("sigaction"), Some(Kind::Sigaction));
        assert_eq!(Kind::of("pthread_sigmask"), Some(Kind::Mask));
        assert_eq!(Kind::of("signal"), Some(Kind::Signal));
        assert_eq!(Kind::of("sigemptyset"), None);
    }

    #[test]
    fn the_stub_path_ends_at_its_jump_and_refuses_a_trap() {
        // endbr64; bnd jmp [rip+0x2f75]; nop dword [rax+rax]
        let ibt = [
            0xf3, 0x0f, 0x1e, 0xfa, 0xf2, 0xff, 0x25, 0x75, 0x2f, 0x00, 0x00, 0x0f, 0x1f, 0x44,
            0x00, 0x00,
        ];
        let path = stub_path(&ibt, 0x1000).expect("a path");
        assert_eq!(path.len(), 2);
        assert_eq!(path[1].memory_displacement64(), 0x1000 + 11 + 0x2f75);
        assert!(stub_path(&[0xcc, 0x90, 0x90], 0x1000).is_none());
        for kind in [Kind::Sigaction, Kind::Signal, Kind::Mask] {
            let code = assemble(kind, 0x40_0000, &path, 0x50_0000).expect("assembles");
            // The relocated jump still reads the same GOT slot.
            let tail: Vec<Instruction> = Decoder::with_ip(64, &code, 0x40_0000, 0).iter().collect();
            let last = tail.last().expect("instructions");
            assert_eq!(last.flow_control(), FlowControl::IndirectBranch, "{kind:?}");
            assert_eq!(
                last.memory_displacement64(),
                0x1000 + 11 + 0x2f75,
                "{kind:?}"
            );
        }
    }
}
