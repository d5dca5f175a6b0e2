//! Targets of direct calls, found by decoding every code section. In stripped binaries this
//! names the static functions that `.eh_frame` missed (hand-written assembly, code built with
//! `-fno-asynchronous-unwind-tables`).

use iced_x86::{Decoder, DecoderOptions, FlowControl, Mnemonic, OpKind, Register};
use rayon::prelude::*;

use super::Progress;
use crate::addr::LinkAddr;
use crate::elf::Binary;

/// Bytes decoded per parallel work unit.
const CHUNK: usize = 256 * 1024;

/// The direct branches of the binary's code sections, from one linear decode.
#[derive(Default)]
pub struct Branches {
    /// Every direct call's target (unsorted, may repeat).
    pub calls: Vec<LinkAddr>,
    /// Every direct unconditional `jmp` as `(address, target)`: tail calls among them.
    pub jumps: Vec<(u64, u64)>,
    /// Every direct conditional jump as `(address, target)`: ways into cold parts.
    pub conditional: Vec<(u64, u64)>,
}

/// Every direct call and jump in the binary's code sections.
pub fn branches(binary: &Binary, progress: &dyn Progress) -> Branches {
    // Split each section into chunks; a chunk decodes from its start, so an instruction that
    // straddles a chunk boundary is decoded by the chunk it starts in (the decoder runs past the
    // chunk's end until the instruction that crosses it is done).
    let mut work = Vec::new();
    for section in binary.code_sections() {
        let bytes = binary.section_data(section);
        let mut start = 0;
        while start < bytes.len() {
            let end = (start + CHUNK).min(bytes.len());
            work.push((section.addr.0, bytes, start, end));
            start = end;
        }
    }
    let total: u64 = work.iter().map(|w| (w.3 - w.2) as u64).sum();
    let done = std::sync::atomic::AtomicU64::new(0);
    let parts: Vec<Branches> = work
        .par_iter()
        .map(|&(base, bytes, start, end)| {
            let mut found = Branches::default();
            let mut decoder = Decoder::with_ip(
                64,
                &bytes[start..],
                base + start as u64,
                DecoderOptions::NONE,
            );
            let stop = base + end as u64;
            while decoder.can_decode() && decoder.ip() < stop {
                let insn = decoder.decode();
                if insn.op0_kind() != OpKind::NearBranch64 {
                    continue;
                }
                match insn.flow_control() {
                    FlowControl::Call => found.calls.push(LinkAddr(insn.near_branch64())),
                    FlowControl::UnconditionalBranch => {
                        found.jumps.push((insn.ip(), insn.near_branch64()))
                    }
                    FlowControl::ConditionalBranch => {
                        found.conditional.push((insn.ip(), insn.near_branch64()))
                    }
                    _ => {}
                }
            }
            let n = (end - start) as u64;
            let so_far = done.fetch_add(n, std::sync::atomic::Ordering::Relaxed) + n;
            progress.update(so_far, total);
            found
        })
        .collect();
    let mut all = Branches::default();
    for p in parts {
        all.calls.extend(p.calls);
        all.jumps.extend(p.jumps);
        all.conditional.extend(p.conditional);
    }
    all
}

/// The address of `main` in an executable, from crt1's `_start`: the first argument it passes
/// to `__libc_start_main` (`lea rdi, [rip+main]` in PIEs, `mov rdi, main` otherwise).
pub fn main_from_entry(binary: &Binary) -> Option<LinkAddr> {
    if !matches!(
        binary.kind(),
        crate::elf::BinaryKind::Executable | crate::elf::BinaryKind::PieExecutable
    ) {
        return None;
    }
    let entry = binary.entry();
    let bytes = binary.bytes_at(entry, 64)?;
    let mut decoder = Decoder::with_ip(64, bytes, entry.0, DecoderOptions::NONE);
    let mut rdi = None;
    for insn in decoder.iter().take(24) {
        if insn.is_invalid() {
            return None;
        }
        let writes_rdi = insn.op_count() == 2
            && insn.op0_kind() == OpKind::Register
            && matches!(insn.op0_register(), Register::RDI | Register::EDI);
        if writes_rdi {
            rdi = match insn.mnemonic() {
                Mnemonic::Lea if insn.is_ip_rel_memory_operand() => {
                    Some(insn.ip_rel_memory_address())
                }
                Mnemonic::Mov
                    if insn.op1_kind() != OpKind::Register && insn.op1_kind() != OpKind::Memory =>
                {
                    Some(insn.immediate(1))
                }
                _ => None,
            };
        }
        match insn.flow_control() {
            FlowControl::Call | FlowControl::IndirectCall => return rdi.map(LinkAddr),
            FlowControl::Next => {}
            _ => return None,
        }
    }
    None
}
