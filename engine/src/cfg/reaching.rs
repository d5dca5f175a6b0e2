//! Constant registers by dataflow: the value a general-purpose register holds before an
//! instruction, when every definition that reaches it sets the same constant.
//!
//! A jump table's base is often set once before a loop (`lea r15, [rip+T]`) and read at the
//! jump inside it; the loop's header has many ways in, and a walk that enumerates paths back
//! from the jump runs out of paths before one reaches the definition (sqlite3's
//! `sqlite3_complete` under clang -O2). The definitions that reach an instruction are found
//! instead by one backward search over the predecessor map that stops at each definition: a
//! join over every way in, paths or not, memoised per `(instruction, register)`.

use iced_x86::{FlowControl, Instruction, InstructionInfoFactory, Mnemonic, OpAccess, OpKind};

use super::build::{Insns, Predecessors};

/// Instructions visited by one query at the most: past it the register is not known.
const MAX_VISITED: usize = 4096;
/// Copies (`mov r, r'`) followed from one definition to another at the most.
const MAX_COPIES: u32 = 4;

/// The memo of one round of jump resolution (the predecessor map stays the same within it).
pub(super) struct Reaching {
    /// `(instruction, register)` to the register's constant value before it, if it has one.
    memo: foldhash::HashMap<(u64, u8), Option<i64>>,
    /// The general-purpose registers each instruction writes, as a mask by number.
    writes: foldhash::HashMap<u64, u16>,
    info: InstructionInfoFactory,
}

impl Default for Reaching {
    fn default() -> Reaching {
        Reaching {
            memo: Default::default(),
            writes: Default::default(),
            info: InstructionInfoFactory::new(),
        }
    }
}

impl Reaching {
    /// The constant register `reg` (`rax` 0 .. `r15` 15) holds before the instruction at `at`,
    /// if every definition reaching it sets that same constant. A way in from the function's
    /// entry, or from code no explored branch reaches, makes it unknown.
    pub fn before(
        &mut self,
        insns: &Insns,
        preds: &Predecessors,
        at: u64,
        reg: usize,
    ) -> Option<i64> {
        self.query(insns, preds, at, reg, MAX_COPIES)
    }

    fn query(
        &mut self,
        insns: &Insns,
        preds: &Predecessors,
        at: u64,
        reg: usize,
        copies: u32,
    ) -> Option<i64> {
        let key = (at, reg as u8);
        if let Some(v) = self.memo.get(&key) {
            return *v;
        }
        let v = self.search(insns, preds, at, reg, copies);
        self.memo.insert(key, v);
        v
    }

    fn search(
        &mut self,
        insns: &Insns,
        preds: &Predecessors,
        at: u64,
        reg: usize,
        copies: u32,
    ) -> Option<i64> {
        let mut value = None;
        let mut visited: foldhash::HashSet<u64> = Default::default();
        let mut work = vec![at];
        visited.insert(at);
        while let Some(x) = work.pop() {
            let mut any = false;
            let falls_in = (preds.falls_in.get(&x))
                .and_then(|a| insns.get(a))
                .filter(|i| falls_through(i));
            let branches = preds.branches.get(&x).into_iter().flatten();
            for p in falls_in
                .into_iter()
                .chain(branches.filter_map(|a| insns.get(a)))
            {
                any = true;
                if self.writes(p) & (1 << reg) != 0 {
                    let v = self.definition(insns, preds, p, reg, copies)?;
                    if value.is_some_and(|k| k != v) {
                        return None;
                    }
                    value = Some(v);
                } else if matches!(
                    p.flow_control(),
                    FlowControl::Call | FlowControl::IndirectCall
                ) && matches!(reg, 0 | 2)
                {
                    // A call's value in rax and rdx; other registers read after a call without
                    // being set the callee kept, as the path evaluator takes them.
                    return None;
                } else if visited.insert(p.ip()) {
                    if visited.len() > MAX_VISITED {
                        return None;
                    }
                    work.push(p.ip());
                }
            }
            if !any {
                // The function's entry, or code reached only in ways not known yet.
                return None;
            }
        }
        value
    }

    /// The constant `p` writes to `reg`, if it writes one.
    fn definition(
        &mut self,
        insns: &Insns,
        preds: &Predecessors,
        p: &Instruction,
        reg: usize,
        copies: u32,
    ) -> Option<i64> {
        if p.op_count() == 0 || p.op0_kind() != OpKind::Register {
            return None;
        }
        let dst = p.op0_register();
        if gpr(dst.full_register()) != Some(reg) || dst.size() < 4 {
            return None;
        }
        match (p.mnemonic(), p.op1_kind()) {
            (Mnemonic::Lea, OpKind::Memory) if p.is_ip_rel_memory_operand() => {
                Some(p.ip_rel_memory_address() as i64)
            }
            (Mnemonic::Xor, OpKind::Register) if p.op1_register() == dst => Some(0),
            (
                Mnemonic::Mov,
                OpKind::Immediate32 | OpKind::Immediate64 | OpKind::Immediate32to64,
            ) => {
                let k = p.immediate(1);
                Some(match dst.size() {
                    4 => k as u32 as i64,
                    _ => k as i64,
                })
            }
            (Mnemonic::Mov, OpKind::Register) if dst.size() == 8 && copies > 0 => {
                let from = gpr(p.op1_register().full_register())?;
                self.query(insns, preds, p.ip(), from, copies - 1)
            }
            _ => None,
        }
    }

    /// The mask of general-purpose registers `insn` writes.
    fn writes(&mut self, insn: &Instruction) -> u16 {
        if let Some(&m) = self.writes.get(&insn.ip()) {
            return m;
        }
        let mut mask = 0u16;
        for r in self.info.info(insn).used_registers() {
            if matches!(
                r.access(),
                OpAccess::Write
                    | OpAccess::CondWrite
                    | OpAccess::ReadWrite
                    | OpAccess::ReadCondWrite
            ) {
                if let Some(n) = gpr(r.register().full_register()) {
                    mask |= 1 << n;
                }
            }
        }
        self.writes.insert(insn.ip(), mask);
        mask
    }
}

/// True when control goes on after `insn` to the instruction that follows it.
fn falls_through(insn: &Instruction) -> bool {
    matches!(
        insn.flow_control(),
        FlowControl::Next
            | FlowControl::ConditionalBranch
            | FlowControl::Call
            | FlowControl::IndirectCall
    )
}

/// The number of a general-purpose register (`rax` 0 .. `r15` 15).
pub(super) fn gpr(full: iced_x86::Register) -> Option<usize> {
    let n = (full as usize).wrapping_sub(iced_x86::Register::RAX as usize);
    (n < 16).then_some(n)
}
