//! `profile`'s events inline ([`RtOp::Path`]): the common case of a call-path entry or exit
//! without calling the runtime, with the runtime's own `_tsc` entry point as the fallback for
//! everything else.
//!
//! An entry is inline when the thread's walk memo (`rt-abi`'s `WalkMemo`) applies: the memo
//! is not in use (`seq` even), it was made for this slot, `rsp` and `rbp` (`rsp` at or above
//! the known stack mapping's start, whose end and the unwind-table count are as then), every
//! stack word its walk read still holds what it read, and its record still has the hash and
//! slot it had; and no open activation is gone (the shadow stack's top lies above `rsp`) and
//! the shadow stack has room. Then the runtime's walk would find that same record, pop
//! nothing and push the frame, which is what the code does: count the record, read the TSC
//! as nanoseconds (`rdtsc` × `tsc_mult` >> 32, as the runtime's `tsc_ns`) and push
//! `{rsp, start, slot, FRAME_PATH_WALL, record}`. `seq` is read again before anything is
//! written: a signal handler that interrupted the checks and walked (changing the memo)
//! changed it too, and the entry goes the long way.
//!
//! An exit is inline when the shadow stack's top is this activation's path frame (its `rsp`,
//! slot and kind, a record not the "other" one): the runtime would pop nothing else and
//! close it. The code pops it and adds the elapsed nanoseconds (saturating at 0) to its
//! record.
//!
//! ```text
//! entry:  mov rcx,[r11+M.seq]; test cl,1; jnz slow
//!         mov rax,[rbx+SP]; cmp rax,[r11+M.rsp]; jne slow; cmp rax,[r11+H.stack_lo]; jb slow
//!         cmp rbp,[r11+M.rbp]; jne slow; cmp dword [r11+M.slot],SLOT; jne slow
//!         mov rdx,[r11+H.stack_hi]; cmp rdx,[r11+M.hi]; jne slow
//!         mov edx,[unwind_count]; cmp rdx,[r11+M.gen]; jne slow
//!         mov edx,[r11+H.top]; cmp edx,[r11+H.cap]; jae slow; test edx,edx; jz 1f
//!         shl edx,5; cmp rax,[r11+rdx+S-32]; jae slow             ; a gone frame
//!      1: mov rdx,[r11+M.n]; shl rdx,4; jz 3f
//!      2: mov rax,[r11+rdx+M.words-16]; mov rax,[rax]; cmp rax,[r11+rdx+M.words-8]; jne slow
//!         sub rdx,16; jnz 2b
//!      3: mov esi,[r11+M.record]; imul rdx,rsi,288
//!         mov rax,[r11+M.hash]; cmp rax,[r11+rdx+P]; jne slow
//!         cmp dword [r11+rdx+P+8],SLOT; jne slow
//!         cmp rcx,[r11+M.seq]; jne slow
//!         inc qword [r11+rdx+P+16]                                ; count
//!         rdtsc; shl rdx,32; or rax,rdx; mov rdx,MULT; mul rdx; shrd rax,rdx,32
//!         mov ecx,[r11+H.top]; shl ecx,5; mov [r11+rcx+S+8],rax   ; start
//!         mov rax,[rbx+SP]; mov [r11+rcx+S],rax; mov dword [..+16],SLOT; [..+20],3; [..+24],esi
//!         mov dword [..+28],0; add dword [r11+H.top],1; jmp done
//!   slow: <the runtime call, every register it may change saved>
//! ```

use std::mem::{offset_of, size_of};

use gsh_rt_abi::layout::{
    memo_offset, PathRecord, ShadowEntry, ThreadHeader, WalkMemo, FRAME_PATH_WALL,
};
use iced_x86::{Code as Op, Instruction, MemoryOperand, Register as R};

use super::{disp32, Gen, Label, Res};
use crate::snippet::ir::{PathEvent, PathLayout, RtFunc, VectorSaving};

/// Header fields.
const TOP: i64 = offset_of!(ThreadHeader, shadow_top) as i64;
const CAP: i64 = offset_of!(ThreadHeader, shadow_capacity) as i64;
const LO: i64 = offset_of!(ThreadHeader, stack_lo) as i64;
const HI: i64 = offset_of!(ThreadHeader, stack_hi) as i64;
/// Walk-memo fields.
const M_SEQ: i64 = offset_of!(WalkMemo, seq) as i64;
const M_RSP: i64 = offset_of!(WalkMemo, rsp) as i64;
const M_RBP: i64 = offset_of!(WalkMemo, rbp) as i64;
const M_HI: i64 = offset_of!(WalkMemo, hi) as i64;
const M_GEN: i64 = offset_of!(WalkMemo, gen) as i64;
const M_HASH: i64 = offset_of!(WalkMemo, hash) as i64;
const M_SLOT: i64 = offset_of!(WalkMemo, slot) as i64;
const M_RECORD: i64 = offset_of!(WalkMemo, record) as i64;
const M_N: i64 = offset_of!(WalkMemo, n) as i64;
const M_WORDS: i64 = offset_of!(WalkMemo, words) as i64;
/// Path-record fields and size.
const R_HASH: i64 = offset_of!(PathRecord, hash) as i64;
const R_SLOT: i64 = offset_of!(PathRecord, slot) as i64;
const R_COUNT: i64 = offset_of!(PathRecord, count) as i64;
const R_TOTAL: i64 = offset_of!(PathRecord, total_ns) as i64;
const R_SIZE: i32 = size_of::<PathRecord>() as i32;
/// Shadow-entry fields and size (a power of two: entries are indexed by a shift).
const E_RSP: i64 = offset_of!(ShadowEntry, rsp) as i64;
const E_START: i64 = offset_of!(ShadowEntry, start) as i64;
const E_SLOT: i64 = offset_of!(ShadowEntry, slot) as i64;
const E_KIND: i64 = offset_of!(ShadowEntry, kind) as i64;
const E_RECORD: i64 = offset_of!(ShadowEntry, record) as i64;
const E_RESERVED: i64 = offset_of!(ShadowEntry, reserved) as i64;
const E_SHIFT: u32 = size_of::<ShadowEntry>().trailing_zeros();
const _: () = assert!(1 << E_SHIFT == size_of::<ShadowEntry>());
/// `[[address, value]; _]`: 16 bytes a logged word.
const W_SHIFT: u32 = 4;
const _: () = assert!(1 << W_SHIFT == size_of::<[u64; 2]>());

/// `[r11 + displ]`.
fn blk(displ: i64) -> MemoryOperand {
    MemoryOperand::with_base_displ(R::R11, displ)
}

/// `[r11 + index + displ]`.
fn blk_at(index: R, displ: i64) -> MemoryOperand {
    MemoryOperand::with_base_index_scale_displ_size(R::R11, index, 1, displ, 1)
}

impl Gen {
    /// A call-path event for `slot` (the thread's block in `r11`), inline when it can be,
    /// else by calling `func`; ends at `done`.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn path_event(
        &mut self,
        event: PathEvent,
        func: RtFunc,
        save: VectorSaving,
        layout: PathLayout,
        slot: u32,
        frame: i32,
        done: Label,
    ) -> Res {
        let slow = self.new_label();
        match event {
            PathEvent::Enter | PathEvent::Count => {
                self.path_enter(event, layout, slot, frame, slow, done)?
            }
            PathEvent::Exit => self.path_exit(layout, slot, frame, slow, done)?,
        }
        self.bind(slow);
        self.rt_call(func, save, slot, frame)
    }

    fn path_enter(
        &mut self,
        event: PathEvent,
        layout: PathLayout,
        slot: u32,
        frame: i32,
        slow: Label,
        done: Label,
    ) -> Res {
        let memo = i64::try_from(memo_offset(u64::from(layout.shadow_offset)))
            .map_err(|_| super::CodegenError::Offset(i64::MAX))?;
        let m = |f: i64| disp32(memo + f).map(blk);
        let shadow = i64::from(layout.shadow_offset);
        let paths = i64::from(layout.paths_offset);
        // The memo is not in use, and its `seq` now, to see it unchanged at the end.
        op2!(self, Op::Mov_r64_rm64, R::RCX, m(M_SEQ)?)?;
        op2!(self, Op::Test_rm8_imm8, R::CL, 1u32)?;
        self.jump(Op::Jne_rel32_64, slow)?;
        // The walk's inputs.
        self.load_sp(R::RAX, frame)?;
        op2!(self, Op::Cmp_r64_rm64, R::RAX, m(M_RSP)?)?;
        self.jump(Op::Jne_rel32_64, slow)?;
        op2!(self, Op::Cmp_r64_rm64, R::RAX, blk(LO))?;
        self.jump(Op::Jb_rel32_64, slow)?;
        op2!(self, Op::Cmp_r64_rm64, R::RBP, m(M_RBP)?)?;
        self.jump(Op::Jne_rel32_64, slow)?;
        op2!(self, Op::Cmp_rm32_imm32, m(M_SLOT)?, slot)?;
        self.jump(Op::Jne_rel32_64, slow)?;
        op2!(self, Op::Mov_r64_rm64, R::RDX, blk(HI))?;
        op2!(self, Op::Cmp_r64_rm64, R::RDX, m(M_HI)?)?;
        self.jump(Op::Jne_rel32_64, slow)?;
        if self.is_near(layout.unwind_count) {
            let at = MemoryOperand::with_base_displ(R::RIP, layout.unwind_count as i64);
            op2!(self, Op::Mov_r32_rm32, R::EDX, at)?;
        } else {
            op2!(self, Op::Mov_r64_imm64, R::RDX, layout.unwind_count)?;
            op2!(
                self,
                Op::Mov_r32_rm32,
                R::EDX,
                MemoryOperand::with_base(R::RDX)
            )?;
        }
        op2!(self, Op::Cmp_r64_rm64, R::RDX, m(M_GEN)?)?;
        self.jump(Op::Jne_rel32_64, slow)?;
        // No open activation is gone (the top one lies above `rsp`), and a frame fits.
        let none_open = self.new_label();
        op2!(self, Op::Mov_r32_rm32, R::EDX, blk(TOP))?;
        if event == PathEvent::Enter {
            op2!(self, Op::Cmp_r32_rm32, R::EDX, blk(CAP))?;
            self.jump(Op::Jae_rel32_64, slow)?;
        }
        op2!(self, Op::Test_rm32_r32, R::EDX, R::EDX)?;
        self.jump(Op::Je_rel32_64, none_open)?;
        op2!(self, Op::Shl_rm32_imm8, R::EDX, E_SHIFT)?;
        let top_rsp = disp32(shadow - (1 << E_SHIFT) + E_RSP)?;
        op2!(self, Op::Cmp_r64_rm64, R::RAX, blk_at(R::RDX, top_rsp))?;
        self.jump(Op::Jae_rel32_64, slow)?;
        self.bind(none_open);
        // Every word the walk read, last first, still holds what it read.
        let (same, next) = (self.new_label(), self.new_label());
        op2!(self, Op::Mov_r64_rm64, R::RDX, m(M_N)?)?;
        op2!(self, Op::Shl_rm64_imm8, R::RDX, W_SHIFT)?;
        self.jump(Op::Je_rel32_64, same)?;
        self.bind(next);
        let word = disp32(memo + M_WORDS - 16)?;
        op2!(self, Op::Mov_r64_rm64, R::RAX, blk_at(R::RDX, word))?;
        op2!(
            self,
            Op::Mov_r64_rm64,
            R::RAX,
            MemoryOperand::with_base(R::RAX)
        )?;
        op2!(self, Op::Cmp_r64_rm64, R::RAX, blk_at(R::RDX, word + 8))?;
        self.jump(Op::Jne_rel32_64, slow)?;
        op2!(self, Op::Sub_rm64_imm8, R::RDX, 16i32)?;
        self.jump(Op::Jne_rel32_64, next)?;
        self.bind(same);
        // The record is still this path's (not cleared or retired since).
        op2!(self, Op::Mov_r32_rm32, R::ESI, m(M_RECORD)?)?;
        self.emit(Instruction::with3(
            Op::Imul_r64_rm64_imm32,
            R::RDX,
            R::RSI,
            R_SIZE,
        ))?;
        op2!(self, Op::Mov_r64_rm64, R::RAX, m(M_HASH)?)?;
        op2!(
            self,
            Op::Cmp_r64_rm64,
            R::RAX,
            blk_at(R::RDX, disp32(paths + R_HASH)?)
        )?;
        self.jump(Op::Jne_rel32_64, slow)?;
        op2!(
            self,
            Op::Cmp_rm32_imm32,
            blk_at(R::RDX, disp32(paths + R_SLOT)?),
            slot
        )?;
        self.jump(Op::Jne_rel32_64, slow)?;
        // Nothing walked while the memo was read.
        op2!(self, Op::Cmp_r64_rm64, R::RCX, m(M_SEQ)?)?;
        self.jump(Op::Jne_rel32_64, slow)?;
        op1!(self, Op::Inc_rm64, blk_at(R::RDX, disp32(paths + R_COUNT)?))?;
        if event == PathEvent::Count {
            return self.jump(Op::Jmp_rel32_64, done);
        }
        self.tsc_ns(layout.tsc_mult)?;
        op2!(self, Op::Mov_r32_rm32, R::ECX, blk(TOP))?;
        op2!(self, Op::Shl_rm32_imm8, R::ECX, E_SHIFT)?;
        let e = |f: i64| disp32(shadow + f).map(|d| blk_at(R::RCX, d));
        op2!(self, Op::Mov_rm64_r64, e(E_START)?, R::RAX)?;
        self.load_sp(R::RAX, frame)?;
        op2!(self, Op::Mov_rm64_r64, e(E_RSP)?, R::RAX)?;
        op2!(self, Op::Mov_rm32_imm32, e(E_SLOT)?, slot)?;
        op2!(self, Op::Mov_rm32_imm32, e(E_KIND)?, FRAME_PATH_WALL)?;
        op2!(self, Op::Mov_rm32_r32, e(E_RECORD)?, R::ESI)?;
        op2!(self, Op::Mov_rm32_imm32, e(E_RESERVED)?, 0u32)?;
        op2!(self, Op::Add_rm32_imm8, blk(TOP), 1i32)?;
        self.jump(Op::Jmp_rel32_64, done)
    }

    fn path_exit(
        &mut self,
        layout: PathLayout,
        slot: u32,
        frame: i32,
        slow: Label,
        done: Label,
    ) -> Res {
        let shadow = i64::from(layout.shadow_offset);
        let paths = i64::from(layout.paths_offset);
        // The top entry, `[r11 + rax + S - 32]`, is this activation's path frame.
        op2!(self, Op::Mov_r32_rm32, R::EAX, blk(TOP))?;
        op2!(self, Op::Test_rm32_r32, R::EAX, R::EAX)?;
        self.jump(Op::Je_rel32_64, slow)?;
        op2!(self, Op::Shl_rm32_imm8, R::EAX, E_SHIFT)?;
        let e = |f: i64| disp32(shadow - (1 << E_SHIFT) + f).map(|d| blk_at(R::RAX, d));
        self.load_sp(R::RDX, frame)?;
        op2!(self, Op::Cmp_r64_rm64, R::RDX, e(E_RSP)?)?;
        self.jump(Op::Jne_rel32_64, slow)?;
        op2!(self, Op::Cmp_rm32_imm32, e(E_SLOT)?, slot)?;
        self.jump(Op::Jne_rel32_64, slow)?;
        op2!(self, Op::Cmp_rm32_imm32, e(E_KIND)?, FRAME_PATH_WALL)?;
        self.jump(Op::Jne_rel32_64, slow)?;
        op2!(self, Op::Mov_r32_rm32, R::ECX, e(E_RECORD)?)?;
        op2!(self, Op::Cmp_rm32_imm8, R::ECX, -1i32)?;
        self.jump(Op::Je_rel32_64, slow)?;
        op2!(self, Op::Mov_r64_rm64, R::RSI, e(E_START)?)?;
        self.emit(Instruction::with3(
            Op::Imul_r64_rm64_imm32,
            R::RCX,
            R::RCX,
            R_SIZE,
        ))?;
        // Popped before it is credited, as the runtime does.
        op2!(self, Op::Sub_rm32_imm8, blk(TOP), 1i32)?;
        self.tsc_ns(layout.tsc_mult)?;
        let later = self.new_label();
        op2!(self, Op::Sub_r64_rm64, R::RAX, R::RSI)?;
        self.jump(Op::Jae_rel32_64, later)?;
        op2!(self, Op::Xor_r32_rm32, R::EAX, R::EAX)?;
        self.bind(later);
        op2!(
            self,
            Op::Add_rm64_r64,
            blk_at(R::RCX, disp32(paths + R_TOTAL)?),
            R::RAX
        )?;
        self.jump(Op::Jmp_rel32_64, done)
    }

    /// `rax` = the TSC in nanoseconds, as the runtime's `tsc_ns` computes it (`rdx`
    /// clobbered).
    fn tsc_ns(&mut self, mult: u64) -> Res {
        self.tsc()?;
        op2!(self, Op::Mov_r64_imm64, R::RDX, mult)?;
        op1!(self, Op::Mul_rm64, R::RDX)?;
        self.emit(Instruction::with3(
            Op::Shrd_rm64_r64_imm8,
            R::RAX,
            R::RDX,
            32u32,
        ))
    }
}

#[cfg(test)]
mod tests {
    use crate::snippet::{compile, MapEnv, PointInfo};

    fn internal_env() -> MapEnv {
        MapEnv {
            point: PointInfo {
                internal: true,
                ..PointInfo::default()
            },
            ..MapEnv::default()
        }
    }

    /// FUNC SAVE TSC_MULT SHADOW PATHS UNWIND_COUNT, then SLOT TLS THREAD.
    const ARGS: &str = "0x401100, 3, 0x80000000, 0x80100, 0x89540, 0x402070, 5, \
        0xffffffffffffffc0, 0x401000";

    #[test]
    fn an_entry_checks_the_memo_inline_and_calls_the_runtime_otherwise() {
        let c = compile(
            &format!("__gsh_rt_path_enter({ARGS});"),
            &internal_env(),
            0x400000,
        )
        .expect("compiles");
        // rax, rcx, rdx, rsi and r11: never a call's registers or the vector state.
        assert_eq!(c.code.clobbers.gprs, 1 | 1 << 1 | 1 << 2 | 1 << 6 | 1 << 11);
        assert!(!c.code.clobbers.calls_out && !c.code.clobbers.vector());
        let text = c.code.disassemble().join("\n");
        // The memo at shadow + 32768 + 4096 = 0x89100: its seq read twice, its slot compared.
        assert_eq!(text.matches("mov rcx,[r11+89100h]").count(), 1, "{text}");
        assert!(text.contains("cmp rcx,[r11+89100h]"), "{text}");
        assert!(text.contains("cmp dword ptr [r11+89130h],5"), "{text}");
        assert!(text.contains("mov edx,[402070h]"), "{text}");
        assert!(text.contains("imul rdx,rsi,120h"), "{text}");
        assert!(text.contains("inc qword ptr [r11+rdx+89550h]"), "{text}");
        assert_eq!(text.matches("rdtsc").count(), 1, "{text}");
        assert!(text.contains("mov dword ptr [r11+rcx+80114h],3"), "{text}");
        assert!(text.contains("call 0000000000401100h"), "{text}");

        let count = compile(
            &format!("__gsh_rt_path_count({ARGS});"),
            &internal_env(),
            0x400000,
        )
        .expect("compiles");
        let text = count.code.disassemble().join("\n");
        assert!(!text.contains("rdtsc"), "a count reads no clock: {text}");
    }

    #[test]
    fn an_exit_closes_the_top_frame_inline() {
        let c = compile(
            &format!("__gsh_rt_path_exit({ARGS});"),
            &internal_env(),
            0x400000,
        )
        .expect("compiles");
        let text = c.code.disassemble().join("\n");
        // The top entry is at shadow - 32 + top * 32: its rsp, slot and kind.
        assert!(text.contains("cmp rdx,[r11+rax+800E0h]"), "{text}");
        assert!(text.contains("cmp dword ptr [r11+rax+800F0h],5"), "{text}");
        assert!(text.contains("cmp dword ptr [r11+rax+800F4h],3"), "{text}");
        assert!(text.contains("sub dword ptr [r11+18h],1"), "{text}");
        assert!(text.contains("add [r11+rcx+89558h],rax"), "{text}");
        assert_eq!(text.matches("rdtsc").count(), 1, "{text}");
        assert!(text.contains("call 0000000000401100h"), "{text}");
    }

    #[test]
    fn path_events_need_a_live_runtime_and_all_their_arguments() {
        for src in [
            "__gsh_rt_path_enter(0x401100, 3, 1, 2, 3, 4, 5, 0, 0, 0x405000);",
            "__gsh_rt_path_exit(0x401100, 3, 1, 2, 3, 5, 0xffffffffffffffc0, 0x401000);",
            "__gsh_rt_path_count(1, 2, 3);",
            "__gsh_rt_path_enter(0x401100, 3, 1, 0x100000000, 3, 4, 5, 6, 7);",
        ] {
            assert!(compile(src, &internal_env(), 0x400000).is_err(), "{src}");
        }
        let user = format!("__gsh_rt_path_enter({ARGS});");
        assert!(compile(&user, &MapEnv::default(), 0x400000).is_err());
    }
}
