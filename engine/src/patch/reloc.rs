//! Relocating one displaced original instruction into a trampoline (PATCHING.md,
//! "Relocating displaced instructions"): RIP-relative operands are re-displaced for the new
//! address, short branches become near ones, branches to other displaced instructions of the
//! same site go to their copies, and a `call` becomes `push <original return address>; jmp
//! target`, so the callee, unwinders and `__builtin_return_address` see the original address.
//!
//! Every output has a size that does not depend on where it is placed, except through the
//! targets it is given; the layout in [`super::layout`] relies on that to converge.

use iced_x86::{Code, Encoder, FlowControl, Instruction, MemoryOperand, OpKind, Register};

/// Why an instruction cannot be moved.
#[derive(Debug, thiserror::Error)]
pub enum RelocError {
    /// `loop`, `jrcxz` and friends have no near form.
    #[error("`{0}` has only a short form and cannot be moved")]
    ShortOnly(String),
    /// The encoder refused (typically a RIP-relative operand out of ±2 GiB).
    #[error("cannot re-encode `{insn}` at {at:#x}: {detail}")]
    Encode {
        /// The instruction, in Intel syntax.
        insn: String,
        /// Where it was to be encoded.
        at: u64,
        /// What the encoder said.
        detail: String,
    },
}

/// Does execution continue with the next instruction after `insn`?
pub fn falls_through(insn: &Instruction) -> bool {
    !matches!(
        insn.flow_control(),
        FlowControl::Return | FlowControl::UnconditionalBranch | FlowControl::IndirectBranch
    ) && !matches!(
        insn.mnemonic(),
        iced_x86::Mnemonic::Ud2 | iced_x86::Mnemonic::Hlt
    )
}

fn encode(insns: &[Instruction], at: u64, original: &Instruction) -> Result<Vec<u8>, RelocError> {
    let mut enc = Encoder::new(64);
    let mut ip = at;
    for i in insns {
        let n = enc.encode(i, ip).map_err(|e| RelocError::Encode {
            insn: original.to_string(),
            at,
            detail: e.to_string(),
        })?;
        ip += n as u64;
    }
    Ok(enc.take_buffer())
}

/// Pushes the address `v`, as seen from code placed at `at`, without touching flags or
/// registers. Within ±2 GiB the address is computed RIP-relatively, so the trampoline stays
/// position independent (a rewritten PIE is loaded at an address unknown when it is written);
/// farther away (live processes only) it is pushed as an immediate.
fn push_addr(v: u64, at: u64) -> Vec<Instruction> {
    let near = (v as i128 - at as i128).abs() < 0x7000_0000;
    if !near {
        return push_u64(v);
    }
    let rsp = |d: i64| MemoryOperand::with_base_displ(Register::RSP, d);
    vec![
        // lea, push, mov and pop leave the flags alone, unlike sub.
        Instruction::with2(Code::Lea_r64_m, Register::RSP, rsp(-8)).expect("lea rsp"),
        Instruction::with1(Code::Push_r64, Register::RAX).expect("push rax"),
        Instruction::with2(
            Code::Lea_r64_m,
            Register::RAX,
            MemoryOperand::with_base_displ(Register::RIP, v as i64),
        )
        .expect("lea rax, [rip+v]"),
        Instruction::with2(Code::Mov_rm64_r64, rsp(8), Register::RAX).expect("mov [rsp+8], rax"),
        Instruction::with1(Code::Pop_r64, Register::RAX).expect("pop rax"),
    ]
}

/// `push imm` of a full 64-bit value without touching flags or registers.
fn push_u64(v: u64) -> Vec<Instruction> {
    let lo = v as u32 as i32;
    let mut out = vec![Instruction::with1(Code::Pushq_imm32, lo).expect("push imm32 is valid")];
    if i64::from(lo) as u64 != v {
        let hi = (v >> 32) as u32;
        out.push(
            Instruction::with2(
                Code::Mov_rm32_imm32,
                MemoryOperand::with_base_displ(Register::RSP, 4),
                hi,
            )
            .expect("mov dword [rsp+4], imm32 is valid"),
        );
    }
    out
}

/// The bytes that do what `insn` (decoded at its original address) did, placed at `at`.
/// `internal` maps an original branch target to its copy in the same trampoline.
pub fn relocate(
    insn: &Instruction,
    at: u64,
    internal: &dyn Fn(u64) -> Option<u64>,
) -> Result<Vec<u8>, RelocError> {
    let mut i = *insn;
    let is_call = matches!(
        i.flow_control(),
        FlowControl::Call | FlowControl::IndirectCall
    );
    if is_call {
        // Calls always go to the original target: a call to the function's own entry must
        // pass its (patched) entry again.
        let mut out = push_addr(insn.next_ip(), at);
        if i.op0_kind() == OpKind::NearBranch64 {
            out.push(
                Instruction::with_branch(Code::Jmp_rel32_64, i.near_branch64()).map_err(|e| {
                    RelocError::Encode {
                        insn: insn.to_string(),
                        at,
                        detail: e.to_string(),
                    }
                })?,
            );
        } else {
            i.set_code(Code::Jmp_rm64);
            if i.op0_kind() == OpKind::Memory && i.memory_base() == Register::RSP {
                // The pushed return address moved `rsp` down by 8.
                i.set_memory_displacement64(i.memory_displacement64().wrapping_add(8));
            }
            out.push(i);
        }
        return encode(&out, at, insn);
    }
    if i.op0_kind() == OpKind::NearBranch64 || i.op0_kind() == OpKind::NearBranch32 {
        if matches!(
            i.mnemonic(),
            iced_x86::Mnemonic::Loop
                | iced_x86::Mnemonic::Loope
                | iced_x86::Mnemonic::Loopne
                | iced_x86::Mnemonic::Jrcxz
                | iced_x86::Mnemonic::Jecxz
        ) {
            return Err(RelocError::ShortOnly(insn.to_string()));
        }
        i.as_near_branch();
        let target = i.near_branch64();
        if let Some(copy) = internal(target) {
            i.set_near_branch64(copy);
        }
    }
    encode(&[i], at, insn)
}

/// `jmp rel32` from `at` to `to`.
pub fn jmp_rel32(at: u64, to: u64) -> Result<Vec<u8>, RelocError> {
    let j = Instruction::with_branch(Code::Jmp_rel32_64, to).map_err(|e| RelocError::Encode {
        insn: "jmp".into(),
        at,
        detail: e.to_string(),
    })?;
    encode(&[j], at, &j)
}
