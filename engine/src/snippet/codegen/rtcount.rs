//! gsh's inline per-thread counter ([`crate::snippet::ir::Stmt::RtCount`], used by `count`):
//! the increment of a slot in the calling thread's `gsh-rt` block, inline so that a count
//! costs a TLS load, a test and an `inc` rather than a call and the register saves around it.
//!
//! ```text
//!         mov  r11, fs:[TLS]                 ; the thread's block, 0 before its first event
//!         test r11, r11
//!         jz   slow
//!   inc:  inc  qword ptr [r11 + 256 + 32*slot]
//!         jmp  done
//!   slow: push rax rcx rdx rsi rdi r8 r9 r10 ; caller-saved (r11 is ours)
//!         push rbp; mov rbp, rsp; and rsp, -64; xsave64 (x87, SSE, AVX, AVX-512)
//!         call gsh_rt_thread                 ; creates the block and the TLS word
//!         mov  r11, rax; xrstor64; mov rsp, rbp; pop rbp; pop r10 … rax
//!         test r11, r11
//!         jnz  inc                           ; NULL only when re-entered (a signal handler
//!   done:                                    ; inside gsh_rt_thread) or out of memory
//! ```
//!
//! The slow path runs once per thread and saves everything the call may change itself, so the
//! snippet reports only `r11`, the flags and its stack use: the trampoline around it stays a
//! `push r11`/`pop r11` (plus `pushfq` where the flags are live), never a full save. The
//! instructions of the slow path's save region are therefore left out of the clobber scan.

use iced_x86::{Code as Op, MemoryOperand, Register as R};

use super::{disp32, Gen, Res};

/// Offset of slot 0 in a thread block (`rt/LAYOUT.md`: `SlotRecord[max_slots]` at 256).
pub const SLOTS_OFFSET: i64 = 256;
/// Bytes per slot record (`{count, total_ns, depth, entry_ns}`); `count` comes first.
pub const SLOT_SIZE: i64 = 32;
/// The xsave mask and area of [`crate::patch`]'s trampolines (x87, SSE, AVX, opmask,
/// ZMM_Hi256, Hi16_ZMM; the standard-format area for them, rounded up to 64).
const XSAVE_MASK: u32 = 0xe7;
const XSAVE_AREA: i64 = 2752;
const SAVED: [R; 8] = [R::RAX, R::RCX, R::RDX, R::RSI, R::RDI, R::R8, R::R9, R::R10];

impl Gen {
    pub(super) fn rt_count(&mut self, slot: u32, tls_offset: i64, thread_fn: u64) -> Res {
        let tls = disp32(tls_offset)?;
        let count_at = disp32(SLOTS_OFFSET + SLOT_SIZE * i64::from(slot))?;
        let slow = self.new_label();
        let inc = self.new_label();
        let done = self.new_label();
        let fs = MemoryOperand::new(R::None, R::None, 1, tls, 8, false, R::FS);
        op2!(self, Op::Mov_r64_rm64, R::R11, fs)?;
        op2!(self, Op::Test_rm64_r64, R::R11, R::R11)?;
        self.jump(Op::Je_rel32_64, slow)?;
        self.bind(inc);
        op1!(
            self,
            Op::Inc_rm64,
            MemoryOperand::with_base_displ(R::R11, count_at)
        )?;
        self.jump(Op::Jmp_rel32_64, done)?;
        self.bind(slow);
        self.stack = true;
        let saved_from = self.insns.len();
        for r in SAVED {
            op1!(self, Op::Push_r64, r)?;
        }
        op1!(self, Op::Push_r64, R::RBP)?;
        op2!(self, Op::Mov_r64_rm64, R::RBP, R::RSP)?;
        op2!(self, Op::And_rm64_imm8, R::RSP, -64i32)?;
        op2!(
            self,
            Op::Lea_r64_m,
            R::RSP,
            MemoryOperand::with_base_displ(R::RSP, -XSAVE_AREA)
        )?;
        // xrstor faults unless the header beyond XSTATE_BV is zero, and the stack holds
        // whatever was there.
        for k in 0..8 {
            op2!(
                self,
                Op::Mov_rm64_imm32,
                MemoryOperand::with_base_displ(R::RSP, 512 + 8 * k),
                0i32
            )?;
        }
        op2!(self, Op::Mov_r32_imm32, R::EAX, XSAVE_MASK)?;
        op2!(self, Op::Mov_r32_imm32, R::EDX, 0u32)?;
        op1!(self, Op::Xsave64_mem, MemoryOperand::with_base(R::RSP))?;
        if self.is_near(thread_fn) {
            self.emit(iced_x86::Instruction::with_branch(
                Op::Call_rel32_64,
                thread_fn,
            ))?;
        } else {
            op2!(self, Op::Mov_r64_imm64, R::R11, thread_fn)?;
            op1!(self, Op::Call_rm64, R::R11)?;
        }
        op2!(self, Op::Mov_r64_rm64, R::R11, R::RAX)?;
        op2!(self, Op::Mov_r32_imm32, R::EAX, XSAVE_MASK)?;
        op2!(self, Op::Mov_r32_imm32, R::EDX, 0u32)?;
        op1!(self, Op::Xrstor64_mem, MemoryOperand::with_base(R::RSP))?;
        op2!(self, Op::Mov_r64_rm64, R::RSP, R::RBP)?;
        op1!(self, Op::Pop_r64, R::RBP)?;
        for r in SAVED.iter().rev() {
            op1!(self, Op::Pop_r64, *r)?;
        }
        self.self_saved.push(saved_from..self.insns.len());
        op2!(self, Op::Test_rm64_r64, R::R11, R::R11)?;
        self.jump(Op::Jne_rel32_64, inc)?;
        self.bind(done);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use crate::snippet::{compile, Clobbers, MapEnv, PointInfo};

    fn internal_env() -> MapEnv {
        MapEnv {
            point: PointInfo {
                internal: true,
                ..PointInfo::default()
            },
            ..MapEnv::default()
        }
    }

    #[test]
    fn inline_count_reports_only_r11_flags_and_stack() {
        let src = "__gsh_rt_count(3, 0xffffffffffffffc0, 0x401000);";
        let c = compile(src, &internal_env(), 0x400000).expect("compiles");
        assert_eq!(
            c.code.clobbers,
            Clobbers {
                gprs: 1 << 11,
                xmms: 0,
                flags: true,
                calls_out: false,
                stack: true,
            }
        );
        let text = c.code.disassemble();
        assert!(
            text[0].ends_with("mov r11,fs:[0FFFFFFFFFFFFFFC0h]"),
            "{text:?}"
        );
        // fs prefix, REX, opcode, ModRM, SIB, disp32: no address-size prefix (which would
        // zero-extend the negative offset).
        assert_eq!(
            &c.code.bytes[..9],
            &[0x64, 0x4c, 0x8b, 0x1c, 0x25, 0xc0, 0xff, 0xff, 0xff]
        );
        assert!(text[1].ends_with("test r11,r11"), "{text:?}");
        assert!(text[3].ends_with("inc qword ptr [r11+160h]"), "{text:?}");
        assert!(
            text.iter().any(|l| l.ends_with("call 0000000000401000h")),
            "{text:?}"
        );
    }

    #[test]
    fn user_snippets_cannot_use_it() {
        let src = "__gsh_rt_count(3, 0, 0);";
        let Err(diags) = compile(src, &MapEnv::default(), 0x400000) else {
            panic!("a user snippet compiled the reserved counter");
        };
        assert!(diags[0].message.contains("reserved for gsh"), "{diags:?}");
    }
}
