//! An independent check of gsh's jump tables: every `switch` dispatch a linear sweep of the
//! binary finds, decoded by pattern rather than by gsh's symbolic evaluation, must have each
//! of its case targets start a block in gsh's CFGs.
//!
//! The method differs from the engine's on purpose. The engine walks back along control flow
//! and evaluates the index symbolically; this walks back over the instructions that precede the
//! jump in address order and matches the shapes compilers emit:
//!
//! - `jmp [T + r*8]`, or `mov r, [T + i*8]; jmp r` (absolute 8-byte entries);
//! - `jmp rA` after `add rA, rB` where the last write to `rB` before it is `lea rB, [rip+T]`
//!   (relative 4-byte entries, PIE), the entry loaded by `movsxd` or `mov` + `cdqe`;
//!
//! and takes the table's length from the nearest `cmp x, N` (or `sub x, N`) directly followed
//! by `ja`/`jae`/`jbe`/`jb`. A table whose entries do not all land in executable code is
//! counted as not understood, never as gsh's fault.

use std::collections::HashSet;
use std::path::Path;

use engine::session::Session;
use iced_x86::{Decoder, DecoderOptions, FlowControl, Instruction, Mnemonic, OpKind, Register};
use object::{Object, ObjectSection, SectionFlags, SectionKind};

/// One table the checker decoded.
#[derive(Clone, Debug)]
pub struct Table {
    /// The indirect `jmp`.
    pub jump: u64,
    /// Where its entries start.
    pub table: u64,
    /// Entries read (the guard's count).
    pub entries: u64,
    /// Distinct case targets that start no block in gsh's CFGs.
    pub missing: Vec<u64>,
}

/// The checker's findings on one binary.
#[derive(Clone, Debug, Default)]
pub struct Report {
    /// Tables decoded and checked.
    pub tables: Vec<Table>,
    /// Indirect jumps with a table's shape the checker could not bound or read.
    pub not_understood: Vec<u64>,
}

impl Report {
    /// Tables with at least one case target missing from gsh's CFGs.
    pub fn with_missing(&self) -> impl Iterator<Item = &Table> + '_ {
        self.tables.iter().filter(|t| !t.missing.is_empty())
    }
}

/// Instructions looked back over from the jump for its table's parts.
const WINDOW: usize = 16;
/// Instructions looked back over for the `lea` of a relative table's base.
const BASE_WINDOW: usize = 96;

/// Checks the binary at `path` against gsh's analysis of it.
pub fn check(path: &Path) -> Result<Report, String> {
    let data = std::fs::read(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let file = object::File::parse(&*data).map_err(|e| format!("{}: {e}", path.display()))?;
    let mut session = Session::new();
    session
        .open(path)
        .map_err(|e| format!("{}: {e}", path.display()))?;
    let module = session.main().map_err(|e| e.to_string())?;
    let analysis = module.analysis();
    let mut starts = HashSet::new();
    for f in module.functions().functions() {
        starts.extend(analysis.function(f.id).cfg.blocks.iter().map(|b| b.start.0));
    }

    let mut code = Vec::new();
    for section in file.sections() {
        let exec = match section.flags() {
            SectionFlags::Elf { sh_flags } => sh_flags & u64::from(object::elf::SHF_EXECINSTR) != 0,
            _ => false,
        };
        if exec && section.kind() == SectionKind::Text {
            code.push((section.address(), section.data().unwrap_or_default()));
        }
    }
    let in_code = |a: u64| {
        code.iter()
            .any(|(start, bytes)| a >= *start && a < start + bytes.len() as u64)
    };
    let read = |addr: u64, len: usize| -> Option<Vec<u8>> {
        file.sections().find_map(|s| {
            let start = s.address();
            (addr >= start && addr + len as u64 <= start + s.size()).then(|| {
                let d = s.data().ok()?;
                let off = (addr - start) as usize;
                d.get(off..off + len).map(<[u8]>::to_vec)
            })?
        })
    };

    let mut report = Report::default();
    for (start, bytes) in &code {
        let insns: Vec<Instruction> = Decoder::with_ip(64, bytes, *start, DecoderOptions::NONE)
            .into_iter()
            .collect();
        for (i, jump) in insns.iter().enumerate() {
            if jump.flow_control() != FlowControl::IndirectBranch || jump.is_ip_rel_memory_operand()
            {
                continue;
            }
            let Some((table, stride, index)) = table_of(&insns, i) else {
                continue;
            };
            let Some(count) = guard(&insns, i, index).or_else(|| byte_index(&insns, index)) else {
                report.not_understood.push(jump.ip());
                continue;
            };
            let mut targets = Vec::new();
            for k in 0..count.min(1 << 16) {
                let Some(entry) = read(table + k * stride, stride as usize) else {
                    break;
                };
                let t = if stride == 8 {
                    u64::from_le_bytes(entry.try_into().unwrap_or_default())
                } else {
                    let rel = i32::from_le_bytes(entry.try_into().unwrap_or_default());
                    table.wrapping_add(rel as i64 as u64)
                };
                targets.push(t);
            }
            if targets.len() as u64 != count || !targets.iter().all(|&t| in_code(t)) {
                report.not_understood.push(jump.ip());
                continue;
            }
            let mut missing: Vec<u64> = targets
                .iter()
                .copied()
                .filter(|t| !starts.contains(t))
                .collect();
            missing.sort_unstable();
            missing.dedup();
            report.tables.push(Table {
                jump: jump.ip(),
                table,
                entries: count,
                missing,
            });
        }
    }
    Ok(report)
}

/// The index register and the position of the instruction that loads through it.
type Index = Option<(Register, usize)>;

/// The table, entry size and index (when the checker sees it) of the jump at `insns[i]`, when
/// it has a table's shape.
fn table_of(insns: &[Instruction], i: usize) -> Option<(u64, u64, Index)> {
    let jump = &insns[i];
    let absolute = |insn: &Instruction, at: usize| {
        (insn.memory_base() == Register::None
            && insn.memory_index() != Register::None
            && insn.memory_index_scale() == 8)
            .then(|| {
                (
                    insn.memory_displacement64(),
                    8,
                    Some((insn.memory_index(), at)),
                )
            })
    };
    if jump.op0_kind() == OpKind::Memory {
        return absolute(jump, i);
    }
    let target = jump.op0_register();
    let before = &insns[i.saturating_sub(WINDOW)..i];
    let (at, writer) = last_write(before, target)?;
    match writer.mnemonic() {
        Mnemonic::Mov if writer.op1_kind() == OpKind::Memory => {
            absolute(writer, i.saturating_sub(WINDOW) + at)
        }
        Mnemonic::Add if writer.op1_kind() == OpKind::Register => {
            // `add rA, rB`: one of the two holds the table's address from a `lea`.
            let start = i.saturating_sub(WINDOW) + at;
            let lea_of = |r: Register| {
                let window = &insns[start.saturating_sub(BASE_WINDOW)..start];
                let (_, w) = last_write(window, r)?;
                (w.mnemonic() == Mnemonic::Lea && w.is_ip_rel_memory_operand())
                    .then(|| w.ip_rel_memory_address())
            };
            let base = lea_of(writer.op1_register()).or_else(|| lea_of(target))?;
            // The entry's load, `movsxd rA, [rB + rI*4]`, names the index.
            let (load, entry) = last_write(&insns[start.saturating_sub(WINDOW)..start], target)?;
            let index = (entry.op1_kind() == OpKind::Memory
                && entry.memory_index_scale() == 4
                && entry.memory_index() != Register::None)
                .then(|| (entry.memory_index(), start.saturating_sub(WINDOW) + load));
            Some((base, 4, index))
        }
        _ => None,
    }
}

/// The last instruction in `window` writing `reg` (any width of it), with its index.
fn last_write(window: &[Instruction], reg: Register) -> Option<(usize, &Instruction)> {
    let full = reg.full_register();
    window.iter().enumerate().rev().find(|(_, insn)| {
        insn.op_count() > 0
            && insn.op0_kind() == OpKind::Register
            && insn.op0_register().full_register() == full
            && !matches!(insn.mnemonic(), Mnemonic::Cmp | Mnemonic::Test)
    })
}

/// The number of entries the guard before the jump at `insns[i]` allows.
fn guard(insns: &[Instruction], i: usize, index: Index) -> Option<u64> {
    let start = i.saturating_sub(WINDOW);
    for j in (start + 1..i).rev() {
        let branch = &insns[j];
        if branch.flow_control() != FlowControl::ConditionalBranch {
            continue;
        }
        let cmp = &insns[j - 1];
        let imm = matches!(cmp.mnemonic(), Mnemonic::Cmp | Mnemonic::Sub)
            && matches!(
                cmp.op1_kind(),
                OpKind::Immediate8
                    | OpKind::Immediate16
                    | OpKind::Immediate8to16
                    | OpKind::Immediate8to32
                    | OpKind::Immediate32
                    | OpKind::Immediate8to64
                    | OpKind::Immediate32to64
            );
        // When the index register is known, the compare must be on it, or on the memory it
        // was loaded from.
        let on_index = index.is_none_or(|(r, load)| match cmp.op0_kind() {
            OpKind::Register => cmp.op0_register().full_register() == r.full_register(),
            OpKind::Memory => {
                let before = &insns[load.saturating_sub(WINDOW)..load];
                last_write(before, r)
                    .is_some_and(|(_, w)| w.op1_kind() == OpKind::Memory && same_memory(w, cmp))
            }
            _ => false,
        });
        if !imm || !on_index {
            continue;
        }
        let imm = match cmp.op1_kind() {
            OpKind::Immediate8 => cmp.immediate(1) & 0xff,
            OpKind::Immediate16 | OpKind::Immediate8to16 => cmp.immediate(1) & 0xffff,
            _ => cmp.immediate(1) & 0xffff_ffff,
        };
        return match branch.mnemonic() {
            Mnemonic::Ja | Mnemonic::Jbe => Some(imm + 1),
            Mnemonic::Jae | Mnemonic::Jb => Some(imm),
            _ => None,
        };
    }
    None
}

/// 256 when the index register of a table's load was last set from a byte by `movzx` (a
/// computed-goto dispatch on an opcode, which needs no compare).
fn byte_index(insns: &[Instruction], index: Index) -> Option<u64> {
    let (reg, load) = index?;
    let before = &insns[load.saturating_sub(WINDOW)..load];
    let (_, writer) = last_write(before, reg)?;
    let byte = match writer.op1_kind() {
        OpKind::Register => writer.op1_register().size() == 1,
        OpKind::Memory => writer.memory_size().size() == 1,
        _ => false,
    };
    (writer.mnemonic() == Mnemonic::Movzx && byte).then_some(256)
}

/// True when two instructions' memory operands name the same address.
fn same_memory(a: &Instruction, b: &Instruction) -> bool {
    if a.is_ip_rel_memory_operand() || b.is_ip_rel_memory_operand() {
        return a.is_ip_rel_memory_operand()
            && b.is_ip_rel_memory_operand()
            && a.ip_rel_memory_address() == b.ip_rel_memory_address();
    }
    a.memory_base() == b.memory_base()
        && a.memory_index() == b.memory_index()
        && a.memory_index_scale() == b.memory_index_scale()
        && a.memory_displacement64() == b.memory_displacement64()
}
