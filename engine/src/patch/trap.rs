//! The SIGTRAP handler that makes the `trap` tactic work in a rewritten file, written as machine
//! code by gsh so the output needs no runtime library and no environment variable (issue 5).
//!
//! A trap site is one `int3` over the first byte of a point's instruction. Executing it raises
//! SIGTRAP with `rip` just past the `int3`; the handler looks `rip - 1` up in a sorted table of
//! trap sites and, when found, sets the interrupted `rip` to the site's trampoline and returns.
//! The kernel's `rt_sigreturn` (through our own `sa_restorer`) then restores every register,
//! the flags and the signal mask, and execution continues in the trampoline exactly as if a
//! jump had led there. The kernel builds the signal frame below the red zone, so a leaf
//! function's live data below `rsp` survives.
//!
//! ```text
//!   install:  push the argument registers; rt_sigaction(SIGTRAP, {handler, SA_SIGINFO |
//!             SA_RESTORER, restorer, {}}, &previous, 8); pop them; jmp <original entry or
//!             DT_INIT> (or ret when there was no DT_INIT)
//!   handler:  key = uc.rip - 1 - &table; binary search; found: uc.rip = &table + entry; ret
//!             not found, previous handler is a function: jmp to it (same arguments)
//!             not found, previous is SIG_IGN and a process sent it: ret
//!             not found, previous is SIG_DFL/SIG_IGN: rt_sigaction(SIGTRAP, SIG_DFL);
//!             tgkill(self, SIGTRAP); ret  (pending until sigreturn unblocks it: the process
//!             dies of SIGTRAP, and dumps core, exactly as an unhandled int3 would)
//!   restorer: mov eax, 15 (rt_sigreturn); syscall
//! ```
//!
//! The table holds pairs of signed 64-bit offsets from the table itself (the site, then its
//! trampoline), sorted by site, so it needs no relocation in a PIE or a shared library: the
//! handler finds the table RIP-relatively and works in differences only.
//!
//! A program that installs its own SIGTRAP handler or blocks SIGTRAP would replace this one,
//! or make the kernel kill it at the next trap; [`super::interpose`] keeps both from happening
//! for calls through the file's PLT, and records the program's handler in `previous`, where
//! the handler above finds it. Limits: such calls made elsewhere (libraries, raw system
//! calls) still replace or block it; code that runs before the install stub (IFUNC
//! resolvers, other objects' constructors that call in early) must not hit a trap.

use iced_x86::code_asm::*;
use iced_x86::{BlockEncoderOptions, Code, Instruction, MemoryOperand, Register};

/// Bytes of the kernel's `struct sigaction` on x86-64: handler, flags, restorer, mask.
pub const ACTION_SIZE: u64 = 32;
/// Bytes of one table entry: the site and its trampoline, as offsets from the table.
pub const ENTRY_SIZE: u64 = 16;

const SIGTRAP: i32 = 5;
const SA_SIGINFO: i32 = 4;
const SA_RESTORER: i32 = 0x0400_0000;
const SYS_RT_SIGACTION: i32 = 13;
const SYS_RT_SIGRETURN: i32 = 15;
const SYS_GETPID: i32 = 39;
const SYS_GETTID: i32 = 186;
const SYS_TGKILL: i32 = 234;
/// `offsetof(ucontext_t, uc_mcontext.gregs[REG_RIP])`: flags, link and the 24-byte stack_t
/// come first, then `gregs`, where `REG_RIP` is entry 16.
const UC_RIP: i32 = 40 + 16 * 8;
/// `offsetof(siginfo_t, si_code)`, after `si_signo` and `si_errno`.
const SI_CODE: i32 = 8;

/// Where the handler's pieces go: all link addresses of the output (runtime addresses when
/// the bias is 0, as in the static rewriter).
#[derive(Clone, Copy, Debug)]
pub struct HandlerLayout {
    /// Where the code is assembled.
    pub code: u64,
    /// The table written by [`table`].
    pub table: u64,
    /// How many entries it has.
    pub entries: usize,
    /// [`ACTION_SIZE`] writable bytes that receive the previous SIGTRAP action.
    pub previous: u64,
    /// Where the install stub continues: the original entry point or `DT_INIT` function;
    /// `None` makes it return (a library without `DT_INIT`).
    pub then: Option<u64>,
}

/// The assembled handler.
#[derive(Clone, Debug)]
pub struct HandlerCode {
    /// The install stub, the handler and the restorer, encoded for where they were placed.
    pub bytes: Vec<u8>,
    /// The install stub (the first byte of `bytes`).
    pub install: u64,
    /// The SIGTRAP handler's address.
    pub handler: u64,
    /// The `sa_restorer` (`rt_sigreturn`) the handler returns through.
    pub restorer: u64,
}

/// The table for `sites` (pairs of a trap site and its trampoline entry), placed at `at`.
pub fn table(at: u64, sites: &[(u64, u64)]) -> Vec<u8> {
    let mut sorted = sites.to_vec();
    sorted.sort_unstable();
    let mut out = Vec::with_capacity(sorted.len() * ENTRY_SIZE as usize);
    for (site, tramp) in sorted {
        out.extend_from_slice(&(site.wrapping_sub(at) as i64).to_le_bytes());
        out.extend_from_slice(&(tramp.wrapping_sub(at) as i64).to_le_bytes());
    }
    out
}

/// `lea reg, [rip + to]`, for addresses outside the assembled block (the data segment).
pub(super) fn lea_rip(a: &mut CodeAssembler, reg: Register, to: u64) -> Result<(), IcedError> {
    a.add_instruction(Instruction::with2(
        Code::Lea_r64_m,
        reg,
        MemoryOperand::with_base_displ(Register::RIP, to as i64),
    )?)
}

/// Assembles the install stub, the handler and the restorer at `l.code`.
pub fn assemble(l: &HandlerLayout) -> Result<HandlerCode, IcedError> {
    let mut a = CodeAssembler::new(64)?;
    let mut handler = a.create_label();
    let mut restorer = a.create_label();

    // Install. `_start` reads rdx (ld.so's finalizer) and rsp; a DT_INIT function gets argc,
    // argv and envp in rdi, rsi, rdx. The syscall itself clobbers rax, rcx and r11 only.
    a.push(rdi)?;
    a.push(rsi)?;
    a.push(rdx)?;
    a.push(r10)?;
    a.sub(rsp, ACTION_SIZE as i32)?;
    a.lea(rax, ptr(handler))?;
    a.mov(qword_ptr(rsp), rax)?;
    a.mov(qword_ptr(rsp + 8), SA_SIGINFO | SA_RESTORER)?;
    a.lea(rax, ptr(restorer))?;
    a.mov(qword_ptr(rsp + 16), rax)?;
    a.mov(qword_ptr(rsp + 24), 0)?;
    a.mov(edi, SIGTRAP)?;
    a.mov(rsi, rsp)?;
    lea_rip(&mut a, Register::RDX, l.previous)?;
    a.mov(r10d, 8)?;
    a.mov(eax, SYS_RT_SIGACTION)?;
    a.syscall()?;
    a.add(rsp, ACTION_SIZE as i32)?;
    a.pop(r10)?;
    a.pop(rdx)?;
    a.pop(rsi)?;
    a.pop(rdi)?;
    match l.then {
        Some(t) => a.jmp(t)?,
        None => a.ret()?,
    }

    // The handler: rdi = signal, rsi = siginfo, rdx = ucontext; those three stay intact for
    // a previous handler. rsp is 8 mod 16 here, as after a call.
    let mut search = a.create_label();
    let mut below = a.create_label();
    let mut found = a.create_label();
    let mut missing = a.create_label();
    let mut default = a.create_label();
    a.set_label(&mut handler)?;
    lea_rip(&mut a, Register::R8, l.table)?;
    a.mov(rax, qword_ptr(rdx + UC_RIP))?;
    a.dec(rax)?;
    a.sub(rax, r8)?;
    a.xor(ecx, ecx)?; // lo
    a.mov(r9, l.entries as u64)?; // hi (exclusive)
    a.set_label(&mut search)?;
    a.cmp(rcx, r9)?;
    a.jae(missing)?;
    a.lea(r10, ptr(rcx + r9))?;
    a.shr(r10, 1)?;
    a.mov(r11, r10)?;
    a.shl(r11, 4)?;
    a.cmp(rax, qword_ptr(r8 + r11))?;
    a.je(found)?;
    a.jl(below)?;
    a.lea(rcx, ptr(r10 + 1))?;
    a.jmp(search)?;
    a.set_label(&mut below)?;
    a.mov(r9, r10)?;
    a.jmp(search)?;
    a.set_label(&mut found)?;
    a.mov(rax, qword_ptr(r8 + r11 + 8))?;
    a.add(rax, r8)?;
    a.mov(qword_ptr(rdx + UC_RIP), rax)?;
    a.ret()?;

    // Not ours: a genuine int3, or a trap of another object rewritten separately.
    a.set_label(&mut missing)?;
    lea_rip(&mut a, Register::RAX, l.previous)?;
    a.mov(rax, qword_ptr(rax))?;
    let mut not_ignored = a.create_label();
    let mut ignore = a.create_label();
    // SIG_IGN (recorded from the program's own sigaction or signal): a SIGTRAP sent by a
    // process (si_code <= 0: kill, tgkill, sigqueue) is ignored as the program asked; an
    // int3's (SI_KERNEL) is fatal, as the kernel makes it.
    a.cmp(rax, 1)?;
    a.jne(not_ignored)?;
    a.cmp(dword_ptr(rsi + SI_CODE), 0)?;
    a.jle(ignore)?;
    a.set_label(&mut not_ignored)?;
    a.cmp(rax, 1)?;
    a.jbe(default)?;
    a.jmp(rax)?;
    a.set_label(&mut ignore)?;
    a.ret()?;
    a.set_label(&mut default)?;
    a.sub(rsp, ACTION_SIZE as i32)?;
    a.xor(eax, eax)?;
    for k in 0..4 {
        a.mov(qword_ptr(rsp + 8 * k), rax)?;
    }
    a.mov(edi, SIGTRAP)?;
    a.mov(rsi, rsp)?;
    a.xor(edx, edx)?;
    a.mov(r10d, 8)?;
    a.mov(eax, SYS_RT_SIGACTION)?;
    a.syscall()?;
    a.add(rsp, ACTION_SIZE as i32)?;
    a.mov(eax, SYS_GETPID)?;
    a.syscall()?;
    a.mov(r8, rax)?;
    a.mov(eax, SYS_GETTID)?;
    a.syscall()?;
    a.mov(rdi, r8)?;
    a.mov(rsi, rax)?;
    a.mov(edx, SIGTRAP)?;
    a.mov(eax, SYS_TGKILL)?;
    a.syscall()?;
    a.ret()?;

    a.set_label(&mut restorer)?;
    a.mov(eax, SYS_RT_SIGRETURN)?;
    a.syscall()?;

    let result = a.assemble_options(l.code, BlockEncoderOptions::RETURN_NEW_INSTRUCTION_OFFSETS)?;
    let handler_at = result.label_ip(&handler)?;
    let restorer_at = result.label_ip(&restorer)?;
    Ok(HandlerCode {
        bytes: result.inner.code_buffer,
        install: l.code,
        handler: handler_at,
        restorer: restorer_at,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_table_is_sorted_and_relative_to_itself() {
        let t = table(0x1000, &[(0x3000, 0x9000), (0x800, 0x8000)]);
        let words: Vec<i64> = t
            .chunks_exact(8)
            .map(|c| i64::from_le_bytes(c.try_into().expect("8 bytes")))
            .collect();
        assert_eq!(words, vec![-0x800, 0x7000, 0x2000, 0x8000]);
    }

    #[test]
    fn the_code_assembles_at_any_address() {
        for base in [0x1000u64, 0x7fff_0000_0000] {
            let code = assemble(&HandlerLayout {
                code: base,
                table: base + 0x1_0000,
                entries: 3,
                previous: base + 0x2_0000,
                then: Some(base - 0x800),
            })
            .expect("assembles");
            assert_eq!(code.install, base);
            assert!(code.handler > base && code.restorer > code.handler);
            let end = base + code.bytes.len() as u64;
            assert!(
                code.restorer + 7 == end,
                "restorer is mov eax, 15; syscall at the end"
            );
        }
    }
}
