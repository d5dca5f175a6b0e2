//! The snippet ABI, the contract between generated snippet code and the trampoline that runs
//! it. Codegen and trampolines both depend on these numbers; change them together.
//!
//! - On entry `rbx` points at a [`SavedRegs`] block (only when [`super::codegen::Requirements`]
//!   says the snippet reads or writes it). The snippet never writes `rbx`.
//! - When the snippet calls out (`Clobbers::calls_out`), `rsp` must be 16-byte aligned on
//!   entry; otherwise any `rsp` works. Either way the 128-byte red zone below `rsp` must
//!   already be skipped if the snippet uses the stack (`Clobbers::stack`).
//! - The snippet leaves by falling off the end of its code bytes, with `rsp` and `rbx` as on
//!   entry. Everything else it may clobber is listed in its `Clobbers`.

/// Register that holds the address of the [`SavedRegs`] block.
pub const BASE_REG: iced_x86::Register = iced_x86::Register::RBX;

/// The saved-register block the trampoline fills before the snippet and restores from after
/// it, so snippets read the arguments and return value as they were at the point, and writes
/// (`$return = 0;`, `$1 = 5;`) take effect when the trampoline restores registers.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SavedRegs {
    /// `rdi rsi rdx rcx r8 r9`: integer argument registers, `$0..$5`.
    pub args: [u64; 6],
    /// `rax`: the integer `$return`.
    pub rax: u64,
    /// `rsp` at the point, as the instrumented code had it (at a function's entry and at its
    /// `ret`, it points at the return address). Read-only; gsh's runtime operations use it.
    pub sp: u64,
    /// The low 64 bits of `xmm0..xmm7`: double arguments; `xmm[0]` is the double `$return`.
    pub xmm: [u64; 8],
}

/// Byte offset of `$N` (`args[n]`).
pub const fn arg_offset(n: u32) -> u32 {
    n * 8
}

/// Byte offset of the saved `rax`.
pub const RAX_OFFSET: u32 = 48;

/// Byte offset of `rsp` at the point.
pub const SP_OFFSET: u32 = 56;

/// Byte offset of the saved low half of `xmmN`.
pub const fn xmm_offset(n: u32) -> u32 {
    64 + n * 8
}

/// Size of the block in bytes.
pub const SAVED_REGS_SIZE: u32 = 128;

const _: () = assert!(std::mem::size_of::<SavedRegs>() == SAVED_REGS_SIZE as usize);
const _: () = assert!(std::mem::offset_of!(SavedRegs, rax) == RAX_OFFSET as usize);
const _: () = assert!(std::mem::offset_of!(SavedRegs, sp) == SP_OFFSET as usize);
const _: () = assert!(std::mem::offset_of!(SavedRegs, xmm) == xmm_offset(0) as usize);
