//! gsh's measuring operations ([`crate::snippet::ir::Stmt::Rt`]: `count`, `time`, `profile`),
//! generated inline so that a count costs a TLS load, a test and an `inc`, and a wall-clock
//! timer two `rdtsc`s and a handful of loads and stores, rather than a call and the register
//! saves around it. Every operation starts by finding the calling thread's `gsh-rt` block
//! (`rt/LAYOUT.md`; every offset below comes from the `rt-abi` crate's structs):
//!
//! ```text
//!         mov  r11, fs:[TLS]                 ; the thread's block, 0 before its first event
//!                                            ; (rewritten binary: mov r11,[DESC+16]; test; jz done;
//!                                            ;  mov r11, fs:[r11] — no runtime, nothing done)
//!         test r11, r11
//!         jnz  have
//!   slow: push rax rcx rdx rsi rdi r8 r9 r10 ; caller-saved (r11 is ours)
//!         push rbp; mov rbp, rsp; and rsp, -64; xsave64 (x87, SSE, AVX, AVX-512)
//!         call gsh_rt_thread                 ; creates the block and the TLS word
//!         mov  r11, rax; xrstor64; mov rsp, rbp; pop rbp; pop r10 … rax
//!         test r11, r11
//!         jz   done                          ; NULL only when re-entered (a signal handler
//!   have: …the operation on r11…             ; inside gsh_rt_thread) or out of memory
//!   done:
//! ```
//!
//! - **count**: `inc qword ptr [r11 + 256 + 32*slot]`.
//! - **time** (wall, inline): the slot record `{count, total, open_sp, start}` holds TSC ticks.
//!   At entry: count; if an activation of the slot is open on this thread at a higher stack
//!   address than `sp` (the point's `rsp`), this is a recursive call, timed by the outer one;
//!   otherwise any open activation's frame is gone (`longjmp`, an exception, a tail call that
//!   reused it: iPath's active-stack check) and is closed now, and this one opens with
//!   `start = rdtsc`, `open_sp = sp`. At exit: if `sp` is at or above `open_sp`, the outermost
//!   activation returns (or is gone): `total += rdtsc - start`, `open_sp = 0`.
//! - **call** (`profile`, CPU time): `f(slot, sp, rbp)` with the caller-saved registers pushed,
//!   the stack aligned, and only the vector registers the callee may change saved (or all
//!   vector state, when it cannot be bounded).
//! - **path** (`profile` with the TSC as clock): the call's work done inline when the thread's
//!   walk memo applies, else the call (the `path` module).
//!
//! Slow paths and calls save everything they change themselves, so the snippet reports only
//! `r11`, the flags, its stack use (and `rax`/`rdx` for `rdtsc`): the trampoline around a count
//! stays a `push r11`/`pop r11` (plus `pushfq` where the flags are live), never a full save.
//! The instructions of those save regions are therefore left out of the clobber scan.

use std::mem::{offset_of, size_of};

use gsh_rt_abi::descriptor::{THREAD_FN_AT, TLS_OFFSET_AT};
use gsh_rt_abi::layout::{SlotRecord, SLOTS_OFFSET};
use iced_x86::{Code as Op, Instruction, MemoryOperand, Register as R};

use super::{disp32, Gen, Label, Res};
use crate::snippet::abi::SP_OFFSET;
use crate::snippet::ir::{Place, PlaceKind, RtAccess, RtFunc, RtOp, VectorSaving};
use crate::snippet::types::{IntKind, Type};

/// Bytes per slot record.
const SLOT_SIZE: i64 = size_of::<SlotRecord>() as i64;
/// Fields of a slot record as the inline timer uses them (`SlotRecord`'s doc): the calls, the
/// ticks of closed activations, the open activation's stack pointer, and its start.
const COUNT: i64 = offset_of!(SlotRecord, count) as i64;
const TICKS: i64 = offset_of!(SlotRecord, total_ns) as i64;
const OPEN_SP: i64 = offset_of!(SlotRecord, depth) as i64;
const START: i64 = offset_of!(SlotRecord, entry_ns) as i64;
/// The xsave mask and area of [`crate::patch`]'s trampolines (x87, SSE, AVX, opmask,
/// ZMM_Hi256, Hi16_ZMM; the standard-format area for them, rounded up to 64).
const XSAVE_MASK: u32 = 0xe7;
const XSAVE_AREA: i64 = 2752;
const SAVED: [R; 8] = [R::RAX, R::RCX, R::RDX, R::RSI, R::RDI, R::R8, R::R9, R::R10];
const XMM: [R; 16] = [
    R::XMM0,
    R::XMM1,
    R::XMM2,
    R::XMM3,
    R::XMM4,
    R::XMM5,
    R::XMM6,
    R::XMM7,
    R::XMM8,
    R::XMM9,
    R::XMM10,
    R::XMM11,
    R::XMM12,
    R::XMM13,
    R::XMM14,
    R::XMM15,
];

/// `r += frame` when the operation keys its activation by a frame other than the point's
/// `rsp` (flags are the operation's to change anyway).
fn add_frame(g: &mut Gen, r: R, frame: i32) -> Res {
    match frame {
        0 => Ok(()),
        d => op2!(g, Op::Add_rm64_imm32, r, d),
    }
}

fn at(base: R, displ: i64) -> MemoryOperand {
    MemoryOperand::with_base_displ(base, displ)
}

impl Gen {
    pub(super) fn rt(&mut self, op: RtOp, slot: u32, access: RtAccess, frame: i32) -> Res {
        let rec = disp32(SLOTS_OFFSET as i64 + SLOT_SIZE * i64::from(slot))?;
        let done = self.new_label();
        self.rt_block(access, done)?;
        match op {
            RtOp::Count => op1!(self, Op::Inc_rm64, at(R::R11, rec + COUNT))?,
            RtOp::TimeEnter => self.time_enter(rec, frame, done)?,
            RtOp::TimeExit => self.time_exit(rec, frame, done)?,
            RtOp::Call { func, save } => self.rt_call(func, save, slot, frame)?,
            RtOp::Path {
                event,
                func,
                save,
                layout,
            } => self.path_event(event, func, save, layout, slot, frame, done)?,
        }
        self.bind(done);
        Ok(())
    }

    /// A coverage probe: `inc qword ptr [rip+counter]` (through `r11` when out of reach).
    pub(super) fn hit(&mut self, counter: u64) -> Res {
        let m = self.abs_qword(counter)?;
        op1!(self, Op::Inc_rm64, m)
    }

    /// A memory operand for the 8 bytes at `addr`: RIP-relative when near, else through r11.
    fn abs_qword(&mut self, addr: u64) -> Res<MemoryOperand> {
        if self.is_near(addr) {
            Ok(at(R::RIP, addr as i64))
        } else {
            op2!(self, Op::Mov_r64_imm64, R::R11, addr)?;
            Ok(at(R::R11, 0))
        }
    }

    /// `r11` = the calling thread's block, created on its first event; jumps to `skip` when
    /// there is none (no runtime in a rewritten binary, or the runtime could not make one).
    fn rt_block(&mut self, access: RtAccess, skip: Label) -> Res {
        match access {
            RtAccess::Direct { tls_offset, .. } => {
                let tls = disp32(tls_offset)?;
                let fs = MemoryOperand::new(R::None, R::None, 1, tls, 8, false, R::FS);
                op2!(self, Op::Mov_r64_rm64, R::R11, fs)?;
            }
            RtAccess::Descriptor(desc) => {
                let m = self.abs_qword(desc + TLS_OFFSET_AT)?;
                op2!(self, Op::Mov_r64_rm64, R::R11, m)?;
                op2!(self, Op::Test_rm64_r64, R::R11, R::R11)?;
                self.jump(Op::Je_rel32_64, skip)?;
                let fs = MemoryOperand::new(R::R11, R::None, 1, 0, 0, false, R::FS);
                op2!(self, Op::Mov_r64_rm64, R::R11, fs)?;
            }
        }
        let have = self.new_label();
        op2!(self, Op::Test_rm64_r64, R::R11, R::R11)?;
        self.jump(Op::Jne_rel32_64, have)?;
        self.stack = true;
        let saved_from = self.insns.len();
        for r in SAVED {
            op1!(self, Op::Push_r64, r)?;
        }
        op1!(self, Op::Push_r64, R::RBP)?;
        op2!(self, Op::Mov_r64_rm64, R::RBP, R::RSP)?;
        self.xsave()?;
        match access {
            RtAccess::Direct { thread_fn, .. } => self.call_addr(thread_fn)?,
            RtAccess::Descriptor(desc) => self.call_cell(desc + THREAD_FN_AT)?,
        }
        op2!(self, Op::Mov_r64_rm64, R::R11, R::RAX)?;
        self.xrstor()?;
        op2!(self, Op::Mov_r64_rm64, R::RSP, R::RBP)?;
        op1!(self, Op::Pop_r64, R::RBP)?;
        for r in SAVED.iter().rev() {
            op1!(self, Op::Pop_r64, *r)?;
        }
        self.self_saved.push(saved_from..self.insns.len());
        op2!(self, Op::Test_rm64_r64, R::R11, R::R11)?;
        self.jump(Op::Je_rel32_64, skip)?;
        self.bind(have);
        Ok(())
    }

    /// Aligns `rsp` down (from `rbp`, which holds it) and saves all vector state below it.
    fn xsave(&mut self) -> Res {
        op2!(self, Op::And_rm64_imm8, R::RSP, -64i32)?;
        op2!(self, Op::Lea_r64_m, R::RSP, at(R::RSP, -XSAVE_AREA))?;
        // xrstor faults unless the header beyond XSTATE_BV is zero, and the stack holds
        // whatever was there.
        for k in 0..8 {
            op2!(self, Op::Mov_rm64_imm32, at(R::RSP, 512 + 8 * k), 0i32)?;
        }
        op2!(self, Op::Mov_r32_imm32, R::EAX, XSAVE_MASK)?;
        op2!(self, Op::Mov_r32_imm32, R::EDX, 0u32)?;
        op1!(self, Op::Xsave64_mem, MemoryOperand::with_base(R::RSP))
    }

    fn xrstor(&mut self) -> Res {
        op2!(self, Op::Mov_r32_imm32, R::EAX, XSAVE_MASK)?;
        op2!(self, Op::Mov_r32_imm32, R::EDX, 0u32)?;
        op1!(self, Op::Xrstor64_mem, MemoryOperand::with_base(R::RSP))
    }

    fn call_addr(&mut self, f: u64) -> Res {
        if self.is_near(f) {
            self.emit(Instruction::with_branch(Op::Call_rel32_64, f))
        } else {
            op2!(self, Op::Mov_r64_imm64, R::R11, f)?;
            op1!(self, Op::Call_rm64, R::R11)
        }
    }

    fn call_cell(&mut self, cell: u64) -> Res {
        let m = self.abs_qword(cell)?;
        op1!(self, Op::Call_rm64, m)
    }

    /// The activation's frame into `r`: the point's `rsp` (from the saved-register block)
    /// plus the operation's frame offset.
    pub(super) fn load_sp(&mut self, r: R, frame: i32) -> Res {
        let place = Place {
            kind: PlaceKind::Saved(SP_OFFSET),
            ty: Type::Int(IntKind::ULong),
        };
        let m = self.static_mem(&place, false)?;
        op2!(self, Op::Mov_r64_rm64, r, m)?;
        add_frame(self, r, frame)
    }

    /// `rax` = the TSC (`rdx` clobbered).
    pub(super) fn tsc(&mut self) -> Res {
        self.op0(Op::Rdtsc)?;
        op2!(self, Op::Shl_rm64_imm8, R::RDX, 32u32)?;
        op2!(self, Op::Or_r64_rm64, R::RAX, R::RDX)
    }

    fn time_enter(&mut self, rec: i64, frame: i32, done: Label) -> Res {
        let (total, open_sp, start) = (rec + TICKS, rec + OPEN_SP, rec + START);
        let open = self.new_label();
        op1!(self, Op::Inc_rm64, at(R::R11, rec + COUNT))?;
        self.load_sp(R::RAX, frame)?;
        op2!(self, Op::Mov_r64_rm64, R::RDX, at(R::R11, open_sp))?;
        op2!(self, Op::Test_rm64_r64, R::RDX, R::RDX)?;
        self.jump(Op::Je_rel32_64, open)?;
        op2!(self, Op::Cmp_r64_rm64, R::RAX, R::RDX)?;
        // Below the open activation's frame: a recursive call, timed by the outer one.
        self.jump(Op::Jb_rel32_64, done)?;
        // The open activation's frame is gone (it never returned through its exit): close it
        // here, and open this one at the same instant.
        self.tsc()?;
        op2!(self, Op::Mov_r64_rm64, R::RDX, R::RAX)?;
        op2!(self, Op::Sub_r64_rm64, R::RAX, at(R::R11, start))?;
        op2!(self, Op::Add_rm64_r64, at(R::R11, total), R::RAX)?;
        op2!(self, Op::Mov_rm64_r64, at(R::R11, start), R::RDX)?;
        self.load_sp(R::RAX, frame)?;
        op2!(self, Op::Mov_rm64_r64, at(R::R11, open_sp), R::RAX)?;
        self.jump(Op::Jmp_rel32_64, done)?;
        self.bind(open);
        self.tsc()?;
        op2!(self, Op::Mov_rm64_r64, at(R::R11, start), R::RAX)?;
        self.load_sp(R::RAX, frame)?;
        op2!(self, Op::Mov_rm64_r64, at(R::R11, open_sp), R::RAX)
    }

    fn time_exit(&mut self, rec: i64, frame: i32, done: Label) -> Res {
        let (total, open_sp, start) = (rec + TICKS, rec + OPEN_SP, rec + START);
        op2!(self, Op::Mov_r64_rm64, R::RDX, at(R::R11, open_sp))?;
        op2!(self, Op::Test_rm64_r64, R::RDX, R::RDX)?;
        // Nothing open: the function was entered before it was instrumented.
        self.jump(Op::Je_rel32_64, done)?;
        self.load_sp(R::RAX, frame)?;
        op2!(self, Op::Cmp_r64_rm64, R::RAX, R::RDX)?;
        // An inner (recursive) activation returns.
        self.jump(Op::Jb_rel32_64, done)?;
        self.tsc()?;
        op2!(self, Op::Sub_r64_rm64, R::RAX, at(R::R11, start))?;
        op2!(self, Op::Add_rm64_r64, at(R::R11, total), R::RAX)?;
        op2!(self, Op::Mov_rm64_imm32, at(R::R11, open_sp), 0i32)
    }

    pub(super) fn rt_call(
        &mut self,
        func: RtFunc,
        save: VectorSaving,
        slot: u32,
        frame: i32,
    ) -> Res {
        self.stack = true;
        // The block read below goes through the clobber-exempt region, so note it first.
        let sp_place = Place {
            kind: PlaceKind::Saved(SP_OFFSET),
            ty: Type::Int(IntKind::ULong),
        };
        let sp = self.static_mem(&sp_place, false)?;
        let saved_from = self.insns.len();
        for r in SAVED {
            op1!(self, Op::Push_r64, r)?;
        }
        op1!(self, Op::Push_r64, R::RBP)?;
        op2!(self, Op::Mov_r64_rm64, R::RBP, R::RSP)?;
        let xmms: Vec<R> = match save {
            VectorSaving::Full => {
                self.xsave()?;
                Vec::new()
            }
            VectorSaving::Xmm(mask) => {
                let xmms: Vec<R> = (0..16)
                    .filter(|i| mask & (1 << i) != 0)
                    .map(|i| XMM[i])
                    .collect();
                op2!(self, Op::And_rm64_imm8, R::RSP, -16i32)?;
                if !xmms.is_empty() {
                    op2!(
                        self,
                        Op::Lea_r64_m,
                        R::RSP,
                        at(R::RSP, -16 * xmms.len() as i64)
                    )?;
                }
                for (i, x) in xmms.iter().enumerate() {
                    op2!(self, Op::Movdqu_xmmm128_xmm, at(R::RSP, 16 * i as i64), *x)?;
                }
                xmms
            }
        };
        op2!(self, Op::Mov_r32_imm32, R::EDI, slot)?;
        op2!(self, Op::Mov_r64_rm64, R::RSI, sp)?;
        add_frame(self, R::RSI, frame)?;
        // rbp now points at the pushed rbp: the point's.
        op2!(self, Op::Mov_r64_rm64, R::RDX, at(R::RBP, 0))?;
        match func {
            RtFunc::Addr(f) => self.call_addr(f)?,
            RtFunc::Cell(c) => self.call_cell(c)?,
        }
        match save {
            VectorSaving::Full => self.xrstor()?,
            VectorSaving::Xmm(_) => {
                for (i, x) in xmms.iter().enumerate() {
                    op2!(self, Op::Movdqu_xmm_xmmm128, *x, at(R::RSP, 16 * i as i64))?;
                }
            }
        }
        op2!(self, Op::Mov_r64_rm64, R::RSP, R::RBP)?;
        op1!(self, Op::Pop_r64, R::RBP)?;
        for r in SAVED.iter().rev() {
            op1!(self, Op::Pop_r64, *r)?;
        }
        self.self_saved.push(saved_from..self.insns.len());
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
        assert!(
            text.iter().any(|l| l.ends_with("inc qword ptr [r11+160h]")),
            "{text:?}"
        );
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

    #[test]
    fn descriptor_count_reads_the_runtime_rip_relatively_and_skips_without_it() {
        let src = "__gsh_rt_count(1, 0, 0, 0x405000);";
        let c = compile(src, &internal_env(), 0x400000).expect("compiles");
        let text = c.code.disassemble();
        assert!(text[0].ends_with("mov r11,[405010h]"), "{text:?}");
        assert!(text[1].ends_with("test r11,r11"), "{text:?}");
        assert!(text[2].contains(" je "), "{text:?}");
        assert!(text[3].ends_with("mov r11,fs:[r11]"), "{text:?}");
        assert!(
            text.iter().any(|l| l.ends_with("call qword ptr [405018h]")),
            "{text:?}"
        );
        // RIP-relative, so a PIE needs no relocation.
        assert_eq!(&c.code.bytes[..3], &[0x4c, 0x8b, 0x1d]);
    }

    #[test]
    fn inline_timer_uses_rdtsc_and_the_points_stack_pointer() {
        for name in ["__gsh_rt_time_enter", "__gsh_rt_time_exit"] {
            let src = format!("{name}(2, 0xffffffffffffffc0, 0x401000);");
            let c = compile(&src, &internal_env(), 0x400000).expect("compiles");
            assert_eq!(c.code.clobbers.gprs, 1 | 1 << 2 | 1 << 11, "{name}");
            assert!(!c.code.clobbers.calls_out && !c.code.clobbers.vector());
            assert!(c.code.requirements.base, "{name}");
            assert_eq!(c.code.requirements.saved_reads, 1 << 7, "{name}");
            let text = c.code.disassemble().join("\n");
            assert_eq!(
                text.matches("rdtsc").count(),
                if name.ends_with("enter") { 2 } else { 1 }
            );
            assert!(text.contains("[rbx+38h]"), "{text}");
        }
    }

    #[test]
    fn a_frame_offset_moves_the_key_of_timers_and_calls() {
        // A loop's timer: the point's rsp plus 0x18, in a live process and a saved file.
        for src in [
            "__gsh_rt_time_enter(2, 0xffffffffffffffc0, 0x401000, 0, 0x18);",
            "__gsh_rt_time_exit(2, 0, 0, 0x405000, 0x18);",
        ] {
            let c = compile(src, &internal_env(), 0x400000).expect("compiles");
            let text = c.code.disassemble();
            let loads = text.iter().filter(|l| l.ends_with("mov rax,[rbx+38h]"));
            let adds = text.iter().filter(|l| l.ends_with("add rax,18h"));
            assert_eq!(loads.count(), adds.count(), "{src}: {text:?}");
            assert!(text.iter().any(|l| l.ends_with("add rax,18h")), "{text:?}");
        }
        // Negative, as its two's complement: -8.
        let src =
            "__gsh_rt_call(0x401100, 3, 5, 0xffffffffffffffc0, 0x401000, 0, 0xfffffffffffffff8);";
        let c = compile(src, &internal_env(), 0x400000).expect("compiles");
        let text = c.code.disassemble();
        let sp = text
            .iter()
            .position(|l| l.ends_with("mov rsi,[rbx+38h]"))
            .expect("the sp load");
        assert!(
            text[sp + 1].ends_with("add rsi,0FFFFFFFFFFFFFFF8h"),
            "{text:?}"
        );
        // Without one, nothing is added.
        let src = "__gsh_rt_time_enter(2, 0xffffffffffffffc0, 0x401000);";
        let c = compile(src, &internal_env(), 0x400000).expect("compiles");
        assert!(!c.code.disassemble().iter().any(|l| l.contains("add rax")));
        // Out of an i32's range, or DESC with TLS and THREAD: refused.
        for src in [
            "__gsh_rt_count(1, 0xffffffffffffffc0, 0x401000, 0, 0x100000000);",
            "__gsh_rt_count(1, 5, 6, 0x405000, 8);",
        ] {
            assert!(compile(src, &internal_env(), 0x400000).is_err(), "{src}");
        }
    }

    #[test]
    fn runtime_call_saves_only_what_it_is_told() {
        let src = "__gsh_rt_call(0x401100, 3, 5, 0xffffffffffffffc0, 0x401000);";
        let c = compile(src, &internal_env(), 0x400000).expect("compiles");
        assert_eq!(c.code.clobbers.gprs, 1 << 11);
        assert!(!c.code.clobbers.vector());
        let text = c.code.disassemble();
        let call = text
            .iter()
            .position(|l| l.ends_with("call 0000000000401100h"))
            .expect("the call");
        let before = text[..call].join("\n");
        assert!(before.contains("movdqu [rsp],xmm0"), "{before}");
        assert!(before.contains("movdqu [rsp+10h],xmm1"), "{before}");
        assert_eq!(
            before.matches("xsave").count(),
            1,
            "only the slow path's: {before}"
        );
        assert!(text[call - 1].ends_with("mov rdx,[rbp]"), "{text:?}");

        let full = "__gsh_rt_call(0x401100, 0x10000, 5, 0xffffffffffffffc0, 0x401000);";
        let c = compile(full, &internal_env(), 0x400000).expect("compiles");
        let text = c.code.disassemble().join("\n");
        assert_eq!(text.matches("xsave64").count(), 2, "{text}");
    }

    #[test]
    fn wrong_internal_arguments_are_errors() {
        for src in [
            "__gsh_rt_count(1, 2);",
            "__gsh_rt_call(1, 2, 3);",
            "__gsh_rt_time_enter(1, 5, 0, 0x405000);",
        ] {
            assert!(compile(src, &internal_env(), 0x400000).is_err(), "{src}");
        }
    }
}
