//! Jump-table resolution for `switch` statements.
//!
//! The instructions that fall through into an indirect `jmp` are evaluated symbolically, each
//! register holding a linear form `k + Σ cᵢ·sᵢ` over opaque symbols (a register's unknown value,
//! or a load from memory). The jump's target must come out as one of the shapes gcc and clang
//! emit at `-O0`..`-O3`:
//!
//! - absolute: `load64(T + 8·i)` — non-PIE `jmp [T + rax*8]`, or via a register at `-O0`;
//! - relative: `B + sext(load32(T + 4·i))` — PIE `lea; movsxd; add; jmp reg` (and `-O0`'s
//!   `mov eax, [..]; cdqe`).
//!
//! The table's length comes from the guarding `cmp i, N` + `ja`/`jae` before it; without one,
//! entries are read while they point into the function.

use std::collections::HashMap;

use iced_x86::{FlowControl, Instruction, Mnemonic, OpKind, Register};

use super::build::Insns;
use super::JumpTable;
use crate::addr::LinkAddr;
use crate::elf::Binary;
use crate::symbols::Function;

/// Instructions looked at before the jump.
const LOOKBACK: usize = 24;
/// Entries read from an unbounded table at the most.
const MAX_UNBOUNDED: u64 = 512;
/// Entries read from a bounded table at the most.
const MAX_BOUNDED: u64 = 4096;

/// A linear form over symbols: `konst + Σ scale·sym`.
#[derive(Clone, Debug, PartialEq, Default)]
struct Lin {
    konst: i64,
    terms: Vec<(u32, i64)>,
}

impl Lin {
    fn konst(k: i64) -> Lin {
        Lin {
            konst: k,
            terms: Vec::new(),
        }
    }

    fn sym(s: u32) -> Lin {
        Lin {
            konst: 0,
            terms: vec![(s, 1)],
        }
    }

    fn add(&self, other: &Lin) -> Lin {
        let mut out = self.clone();
        out.konst = out.konst.wrapping_add(other.konst);
        for &(s, c) in &other.terms {
            match out.terms.iter_mut().find(|t| t.0 == s) {
                Some(t) => t.1 = t.1.wrapping_add(c),
                None => out.terms.push((s, c)),
            }
        }
        out.terms.retain(|t| t.1 != 0);
        out
    }

    fn scale(&self, by: i64) -> Lin {
        Lin {
            konst: self.konst.wrapping_mul(by),
            terms: self
                .terms
                .iter()
                .map(|&(s, c)| (s, c.wrapping_mul(by)))
                .collect(),
        }
    }

    /// The constant of `konst + stride·(index)`, when every symbol's coefficient is a multiple
    /// of `stride`: the table's address. The index may be a sum of several symbols: for
    /// `switch (v % 12)` gcc computes `v - 12·(v / 12)`.
    fn table_base(&self, stride: i64) -> Option<i64> {
        (!self.terms.is_empty() && self.terms.iter().all(|&(_, c)| c % stride == 0))
            .then_some(self.konst)
    }

    /// `konst + scale·s` with a single symbol, if that is the form.
    fn single(&self) -> Option<(i64, u32, i64)> {
        match self.terms.as_slice() {
            [(s, c)] => Some((self.konst, *s, *c)),
            _ => None,
        }
    }
}

/// What a symbol stands for.
#[derive(Clone, Debug)]
enum Sym {
    Unknown,
    Load { addr: Lin, size: u32, signed: bool },
}

struct Eval {
    regs: HashMap<Register, Lin>,
    syms: Vec<Sym>,
}

impl Eval {
    fn fresh(&mut self, sym: Sym) -> Lin {
        self.syms.push(sym);
        Lin::sym(self.syms.len() as u32 - 1)
    }

    fn reg(&mut self, r: Register) -> Lin {
        let full = r.full_register();
        if let Some(v) = self.regs.get(&full) {
            return v.clone();
        }
        let v = self.fresh(Sym::Unknown);
        self.regs.insert(full, v.clone());
        v
    }

    fn set(&mut self, r: Register, v: Lin) {
        self.regs.insert(r.full_register(), v);
    }

    fn clobber(&mut self, r: Register) {
        let v = self.fresh(Sym::Unknown);
        self.set(r, v);
    }

    /// The address a memory operand computes, or `None` for segment-based addressing.
    fn address(&mut self, insn: &Instruction) -> Option<Lin> {
        if insn.segment_prefix() == Register::FS || insn.segment_prefix() == Register::GS {
            return None;
        }
        if insn.is_ip_rel_memory_operand() {
            return Some(Lin::konst(insn.ip_rel_memory_address() as i64));
        }
        let mut a = Lin::konst(insn.memory_displacement64() as i64);
        if insn.memory_base() != Register::None {
            let b = self.reg(insn.memory_base());
            a = a.add(&b);
        }
        if insn.memory_index() != Register::None {
            let i = self
                .reg(insn.memory_index())
                .scale(i64::from(insn.memory_index_scale()));
            a = a.add(&i);
        }
        Some(a)
    }

    /// The value of operand `n` as a source.
    fn operand(&mut self, insn: &Instruction, n: u32) -> Lin {
        match insn.op_kind(n) {
            OpKind::Register => self.reg(insn.op_register(n)),
            OpKind::Immediate8
            | OpKind::Immediate16
            | OpKind::Immediate32
            | OpKind::Immediate64
            | OpKind::Immediate8to16
            | OpKind::Immediate8to32
            | OpKind::Immediate8to64
            | OpKind::Immediate32to64 => Lin::konst(insn.immediate(n) as i64),
            OpKind::Memory => match self.address(insn) {
                Some(addr) => {
                    let size = insn.memory_size().size() as u32;
                    self.fresh(Sym::Load {
                        addr,
                        size,
                        signed: false,
                    })
                }
                None => self.fresh(Sym::Unknown),
            },
            _ => self.fresh(Sym::Unknown),
        }
    }

    /// Interprets one instruction; anything not modelled clobbers what it writes.
    fn step(&mut self, insn: &Instruction) {
        let dst_reg = (insn.op_count() > 0 && insn.op0_kind() == OpKind::Register)
            .then(|| insn.op0_register());
        match (insn.mnemonic(), dst_reg) {
            (Mnemonic::Mov, Some(d)) => {
                let v = self.operand(insn, 1);
                self.set(d, v);
            }
            (Mnemonic::Movsxd | Mnemonic::Movsx, Some(d)) => {
                let v = self.operand(insn, 1);
                let v = self.signed(v);
                self.set(d, v);
            }
            (Mnemonic::Movzx, Some(d)) => {
                let v = self.operand(insn, 1);
                self.set(d, v);
            }
            (Mnemonic::Cdqe, _) => {
                let v = self.reg(Register::RAX);
                let v = self.signed(v);
                self.set(Register::RAX, v);
            }
            (Mnemonic::Lea, Some(d)) => match self.address(insn) {
                Some(a) => self.set(d, a),
                None => self.clobber(d),
            },
            (Mnemonic::Add, Some(d)) => {
                let a = self.reg(d);
                let b = self.operand(insn, 1);
                self.set(d, a.add(&b));
            }
            (Mnemonic::Sub, Some(d)) => {
                let a = self.reg(d);
                let b = self.operand(insn, 1);
                self.set(d, a.add(&b.scale(-1)));
            }
            (Mnemonic::Shl, Some(d)) if insn.op1_kind() == OpKind::Immediate8 => {
                let a = self.reg(d);
                self.set(d, a.scale(1i64 << (insn.immediate8() & 63)));
            }
            (Mnemonic::Cmp | Mnemonic::Test | Mnemonic::Nop | Mnemonic::Endbr64, _) => {}
            _ => {
                if insn.flow_control() == FlowControl::ConditionalBranch {
                    return;
                }
                if let Some(d) = dst_reg {
                    self.clobber(d);
                }
            }
        }
    }

    /// Marks a 32-bit load as sign-extended (`movsxd`, `cdqe`).
    fn signed(&mut self, v: Lin) -> Lin {
        if let Some((0, s, 1)) = v.single() {
            if let Sym::Load { addr, size: 4, .. } = self.syms[s as usize].clone() {
                return self.fresh(Sym::Load {
                    addr,
                    size: 4,
                    signed: true,
                });
            }
        }
        v
    }
}

/// Resolves the indirect jump `jump` of `func`, if it is a jump table.
pub fn resolve(
    binary: &Binary,
    func: &Function,
    insns: &Insns,
    jump: &Instruction,
) -> Option<JumpTable> {
    // The straight-line run of instructions that falls into the jump, oldest first.
    let mut run = vec![*jump];
    let mut at = jump.ip();
    while run.len() < LOOKBACK {
        // The instruction ending at `at`: x86 instructions are 1 to 15 bytes long.
        let Some(prev) =
            (1..=15u64).find_map(|k| insns.get(&at.wrapping_sub(k)).filter(|i| i.next_ip() == at))
        else {
            break;
        };
        let falls_in = prev.next_ip() == at
            && matches!(
                prev.flow_control(),
                FlowControl::Next | FlowControl::ConditionalBranch
            );
        if !falls_in {
            break;
        }
        at = prev.ip();
        run.push(*prev);
    }
    run.reverse();

    let mut eval = Eval {
        regs: HashMap::new(),
        syms: Vec::new(),
    };
    for insn in &run[..run.len() - 1] {
        eval.step(insn);
    }
    let target = eval.operand(jump, 0);
    let (table, stride, base) = match_shape(&eval, &target)?;
    let bound = guard_bound(&run);
    let limit = bound.unwrap_or(MAX_UNBOUNDED).min(MAX_BOUNDED);
    let mut targets = Vec::new();
    for i in 0..limit {
        let entry_addr = LinkAddr(table.wrapping_add(i * stride));
        let Some(bytes) = binary.bytes_at(entry_addr, stride) else {
            break;
        };
        if bytes.len() < stride as usize {
            break;
        }
        let t = match base {
            None => u64::from_le_bytes(bytes.try_into().ok()?),
            Some(b) => {
                let rel = i32::from_le_bytes(bytes.try_into().ok()?);
                b.wrapping_add(rel as i64 as u64)
            }
        };
        let in_code = binary.section_at(LinkAddr(t)).is_some_and(|s| s.is_exec());
        if !in_code || (bound.is_none() && !func.contains(LinkAddr(t))) {
            if bound.is_none() {
                break;
            }
            continue;
        }
        if !targets.contains(&LinkAddr(t)) {
            targets.push(LinkAddr(t));
        }
    }
    (!targets.is_empty()).then(|| JumpTable {
        jump: LinkAddr(jump.ip()),
        table: LinkAddr(table),
        targets,
        bounded: bound.is_some(),
    })
}

/// `(table address, entry size, base for relative entries)` when `target` has a table shape.
fn match_shape(eval: &Eval, target: &Lin) -> Option<(u64, u64, Option<u64>)> {
    let (k, s, c) = target.single()?;
    if c != 1 {
        return None;
    }
    let Sym::Load { addr, size, signed } = &eval.syms[s as usize] else {
        return None;
    };
    match (k, *size, *signed) {
        (0, 8, _) => Some((addr.table_base(8)? as u64, 8, None)),
        (base, 4, true) if base != 0 => Some((addr.table_base(4)? as u64, 4, Some(base as u64))),
        _ => None,
    }
}

/// The number of table entries a guarding `cmp x, N` + unsigned branch allows.
fn guard_bound(run: &[Instruction]) -> Option<u64> {
    let n = run.len();
    for j in (1..n).rev() {
        let branch = &run[j];
        if branch.flow_control() != FlowControl::ConditionalBranch {
            continue;
        }
        let cmp = &run[j - 1];
        if cmp.mnemonic() != Mnemonic::Cmp || !is_imm(cmp.op1_kind()) {
            return None;
        }
        let imm = cmp.immediate(1);
        return match branch.mnemonic() {
            // Out of range when above N: entries 0..=N.
            Mnemonic::Ja | Mnemonic::Jbe => imm.checked_add(1),
            // Out of range when N or above: entries 0..N.
            Mnemonic::Jae | Mnemonic::Jb => Some(imm),
            _ => None,
        };
    }
    None
}

fn is_imm(kind: OpKind) -> bool {
    matches!(
        kind,
        OpKind::Immediate8
            | OpKind::Immediate16
            | OpKind::Immediate32
            | OpKind::Immediate8to16
            | OpKind::Immediate8to32
            | OpKind::Immediate8to64
            | OpKind::Immediate32to64
    )
}
