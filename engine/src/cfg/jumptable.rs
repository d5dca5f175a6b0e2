//! Jump-table resolution for `switch` statements.
//!
//! A path of instructions leading to an indirect `jmp` (straight-line flow, over calls, and
//! taken branches when a block has one predecessor) is evaluated symbolically, each register and
//! each spilled stack slot holding a linear form `k + Σ cᵢ·sᵢ` over opaque symbols (a
//! register's unknown value, or a load from memory). The jump's target must come out as one of
//! the shapes gcc and clang emit at `-O0`..`-O3`:
//!
//! - absolute: `load64(A)` — non-PIE `jmp [T + rax*8]`, or via a register at `-O0`;
//! - relative: `B + sext(load32(A))` — PIE `lea; movsxd; add; jmp reg` (and `-O0`'s
//!   `mov eax, [..]; cdqe`).
//!
//! The table is found from the access itself, never by folding the index's bias into it: the
//! guarding compare (`cmp i, N` or clang's `sub i, N` then `ja`/`jae` falling through, or
//! `jbe`/`jb` taken) gives the index `g` the table is bounded by, and the table starts at
//! `A - stride·g`, which must be a constant. A switch on `c - 'a'` computes `g = c - 0x61`
//! before the compare; `A` is `T + 4·(c - 0x61)` and the table is `T`, not `T - 0x184`. With
//! no guard the table is the constant part of the access's own operands, and entries are read
//! while they point into the function, up to the table's real end ([`Limits`]): the next symbol, a word that has (or, in
//! a table of absolute addresses in a PIE, lacks) a dynamic relocation, or another table's start.
//! An index bounded only by a zero-extended byte or by an `and` mask is read the same way, at
//! most 256 entries or the mask's count: they bound the index, not the table (clang drops the
//! compare when it knows the range; lua indexes its 83-entry `disptab` by `op & 0x7f`).

use iced_x86::{
    FlowControl, Instruction, InstructionInfoFactory, Mnemonic, OpAccess, OpKind, Register,
};

use super::build::{Insns, Predecessors};
use super::reaching::{gpr, Reaching};
use super::{JumpTable, TableEntry};
use crate::addr::LinkAddr;
use crate::elf::Binary;
use crate::symbols::FunctionTable;

/// Instructions looked at before the jump, on one path.
const LOOKBACK: usize = 64;
/// Entries read from an unbounded table at the most.
const MAX_UNBOUNDED: u64 = 512;
/// Entries read from a bounded table at the most.
const MAX_BOUNDED: u64 = 4096;

/// What ends a table no guard bounds, besides an entry leading out of the function: the next
/// symbol (a variable, or a function for a table in code), and the dynamic linker's
/// relocations. In a PIE or a library every entry of a table of absolute addresses is
/// relocated, and no entry of a table of relative offsets is.
#[derive(Debug, Default)]
pub struct Limits {
    /// Addresses of symbols and function starts, sorted.
    starts: Vec<u64>,
    /// Words with an `R_X86_64_RELATIVE` relocation, sorted.
    relocated: Vec<u64>,
}

impl Limits {
    /// The limits in `binary`: its variables and function starts, and the words its
    /// `R_X86_64_RELATIVE` relocations fill.
    pub fn read(binary: &Binary, functions: &FunctionTable) -> Limits {
        let mut starts: Vec<u64> = functions
            .variables()
            .iter()
            .filter(|v| !v.tls)
            .map(|v| v.addr.0)
            .chain(functions.functions().iter().map(|f| f.addr.0))
            .collect();
        starts.sort_unstable();
        starts.dedup();
        // Packed relative relocations (`DT_RELR`) are not read: with them, relocations say
        // nothing of where tables end.
        let packed = binary
            .sections()
            .iter()
            .any(|s| s.kind == object::elf::SHT_RELR);
        Limits {
            starts,
            relocated: match packed {
                true => Vec::new(),
                false => crate::symbols::relocated_words(binary),
            },
        }
    }

    /// The first symbol after `table`, or another table's start among `tables` (sorted).
    fn end(&self, table: u64, tables: &[u64]) -> u64 {
        let after = |v: &[u64]| {
            let i = v.partition_point(|&a| a <= table);
            v.get(i).copied().unwrap_or(u64::MAX)
        };
        after(&self.starts).min(after(tables))
    }

    /// The first function start (or symbol) after `at`.
    fn next_start(&self, at: u64) -> u64 {
        let i = self.starts.partition_point(|&a| a <= at);
        self.starts.get(i).copied().unwrap_or(u64::MAX)
    }

    /// True when the `stride`-byte entry at `at` cannot be one: relocations say it is no
    /// absolute address (`stride` 8), or that a pointer overlaps it (`stride` 4).
    fn refuses(&self, at: u64, stride: u64) -> bool {
        if self.relocated.is_empty() {
            return false;
        }
        let i = self.relocated.partition_point(|&r| r + 8 <= at);
        let overlapping = self.relocated.get(i).is_some_and(|&r| r < at + stride);
        if stride == 8 {
            self.relocated.get(i) != Some(&at)
        } else {
            overlapping
        }
    }
}

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

    fn sub(&self, other: &Lin) -> Lin {
        self.add(&other.scale(-1))
    }

    fn scale(&self, by: i64) -> Lin {
        let mut out = Lin {
            konst: self.konst.wrapping_mul(by),
            terms: self
                .terms
                .iter()
                .map(|&(s, c)| (s, c.wrapping_mul(by)))
                .collect(),
        };
        out.terms.retain(|t| t.1 != 0);
        out
    }

    fn as_konst(&self) -> Option<i64> {
        self.terms.is_empty().then_some(self.konst)
    }

    /// `konst + scale·s` with a single symbol, if that is the form.
    fn single(&self) -> Option<(i64, u32, i64)> {
        match self.terms.as_slice() {
            [(s, c)] => Some((self.konst, *s, *c)),
            _ => None,
        }
    }

    /// True when both forms have the same symbols with the same coefficients.
    fn same_terms(&self, other: &Lin) -> bool {
        self.terms.len() == other.terms.len() && self.terms.iter().all(|t| other.terms.contains(t))
    }
}

/// What a symbol stands for.
#[derive(Clone, Debug)]
enum Sym {
    Unknown,
    /// A general-purpose register's value where the path starts (by number).
    Entry(u8),
    Load {
        /// The instruction that loads it.
        at: u64,
        addr: Lin,
        /// The constant part of the access's own operands (displacement plus any base or index
        /// register holding a constant), when some operand is not constant: the table's start
        /// as the instruction itself names it.
        anchor: Option<i64>,
        /// The index register's value and scale, when the operand has one.
        index: Option<(Lin, u32)>,
        size: u32,
        signed: bool,
    },
}

/// An address computed by a memory operand.
struct Address {
    lin: Lin,
    anchor: Option<i64>,
    index: Option<(Lin, u32)>,
}

/// One step of the path into the jump.
#[derive(Clone, Copy)]
struct Step {
    insn: Instruction,
    /// For a conditional branch: the path continues at its target rather than after it.
    taken: bool,
}

struct Eval<'i> {
    /// The general-purpose registers' values by number (`rax` 0 .. `r15` 15).
    gprs: [Option<Lin>; 16],
    /// Other registers' values (vector registers moved into general ones).
    regs: Vec<(Register, Lin)>,
    /// Values stored to memory on the path (spills), by address.
    mem: Vec<(Lin, Lin)>,
    syms: Vec<Sym>,
    /// The operands of the last compare: `(value, immediate)`.
    flags: Option<(Lin, u64)>,
    /// Values known to be below a count: `(value, count)`, oldest first.
    /// `(value, count, by a compare)`: a compare bounds a table exactly, a mask only the index.
    bounds: Vec<(Lin, u64, bool)>,
    /// Values below 256 because a byte was zero-extended: bounds to fall back on when no
    /// compare or mask bounds the index.
    bytes: Vec<Lin>,
    /// The low bytes of values (`al` of `rax`): `(value, size, symbol)`, so that `cmp al, N`
    /// and a later `movzx eax, al` name the same thing.
    narrowed: Vec<(Lin, u32, Lin)>,
    /// Loads already made since the last store: `(address, size, symbol)`.
    loads: Vec<(Lin, u32, Lin)>,
    /// Shared by the paths into one jump: it owns buffers worth reusing.
    info: &'i mut InstructionInfoFactory,
}

impl<'i> Eval<'i> {
    fn new(info: &'i mut InstructionInfoFactory) -> Eval<'i> {
        Eval {
            gprs: Default::default(),
            regs: Vec::new(),
            mem: Vec::new(),
            syms: Vec::new(),
            flags: None,
            bounds: Vec::new(),
            bytes: Vec::new(),
            narrowed: Vec::new(),
            loads: Vec::new(),
            info,
        }
    }

    fn fresh(&mut self, sym: Sym) -> Lin {
        self.syms.push(sym);
        Lin::sym(self.syms.len() as u32 - 1)
    }

    fn reg(&mut self, r: Register) -> Lin {
        let full = r.full_register();
        let known = match gpr(full) {
            Some(n) => self.gprs[n].as_ref(),
            None => self.regs.iter().find(|(at, _)| *at == full).map(|(_, v)| v),
        };
        if let Some(v) = known {
            return v.clone();
        }
        let v = self.fresh(match gpr(full) {
            Some(n) => Sym::Entry(n as u8),
            None => Sym::Unknown,
        });
        self.set(full, v.clone());
        v
    }

    fn set(&mut self, r: Register, v: Lin) {
        let full = r.full_register();
        match gpr(full) {
            Some(n) => self.gprs[n] = Some(v),
            None => match self.regs.iter_mut().find(|(at, _)| *at == full) {
                Some(slot) => slot.1 = v,
                None => self.regs.push((full, v)),
            },
        }
    }

    /// The low `size` bytes of `v`, as one symbol per value and size.
    fn narrow(&mut self, v: Lin, size: u32) -> Lin {
        if size >= 4 {
            return v;
        }
        if let Some(k) = v.as_konst() {
            return Lin::konst(k & ((1i64 << (8 * size)) - 1));
        }
        if let Some((0, s, 1)) = v.single() {
            if matches!(self.syms[s as usize], Sym::Load { size: loaded, .. } if loaded <= size) {
                return v;
            }
        }
        // A value already bounded below 2^(8·size) is its own low bytes: by a compare, by a
        // zero-extended byte (`movzx ecx, r12b; cmp cl, 3`), or as the low bytes of another
        // value taken no wider.
        let limit = 1u64 << (8 * size);
        if self.bounds.iter().any(|(b, n, _)| *b == v && *n <= limit)
            || (size == 1 && self.bytes.contains(&v))
            || self
                .narrowed
                .iter()
                .any(|(_, sz, n)| *n == v && *sz <= size)
        {
            return v;
        }
        if let Some((_, _, n)) = self
            .narrowed
            .iter()
            .find(|(at, sz, _)| *sz == size && *at == v)
        {
            return n.clone();
        }
        let n = self.fresh(Sym::Unknown);
        self.narrowed.push((v, size, n.clone()));
        n
    }

    /// The value of a register operand of any width: the full register's, narrowed.
    fn reg_narrow(&mut self, r: Register) -> Option<Lin> {
        if matches!(r, Register::AH | Register::BH | Register::CH | Register::DH) {
            return None;
        }
        let v = self.reg(r);
        Some(self.narrow(v, r.size() as u32))
    }

    fn clobber(&mut self, r: Register) {
        let v = self.fresh(Sym::Unknown);
        self.set(r, v);
    }

    /// The address a memory operand computes, or `None` for segment-based addressing.
    fn address(&mut self, insn: &Instruction) -> Option<Address> {
        if insn.segment_prefix() == Register::FS || insn.segment_prefix() == Register::GS {
            return None;
        }
        if insn.is_ip_rel_memory_operand() {
            return Some(Address {
                lin: Lin::konst(insn.ip_rel_memory_address() as i64),
                anchor: None,
                index: None,
            });
        }
        let disp = insn.memory_displacement64() as i64;
        let base = (insn.memory_base() != Register::None).then(|| self.reg(insn.memory_base()));
        let scale = insn.memory_index_scale();
        let index =
            (insn.memory_index() != Register::None).then(|| (self.reg(insn.memory_index()), scale));
        let zero = Lin::konst(0);
        let b = base.as_ref().unwrap_or(&zero);
        let i = index
            .as_ref()
            .map_or(zero.clone(), |(v, s)| v.scale(i64::from(*s)));
        let lin = Lin::konst(disp).add(b).add(&i);
        // The anchor is what stays when the index is taken away: the displacement plus the
        // base, or at -O0 (`[rdx + rax]`, rdx the scaled index, rax the table) the other way
        // round. A constant index (a loop's first pass, `xor r9d, r9d`) still is the index.
        let anchor = match (b.as_konst(), i.as_konst()) {
            (Some(kb), _) if index.is_some() => Some(disp.wrapping_add(kb)),
            (None, Some(ki)) => Some(disp.wrapping_add(ki)),
            _ => None,
        };
        Some(Address { lin, anchor, index })
    }

    /// The value loaded by `insn`'s memory operand: what the path stored there, or a fresh load.
    fn load(&mut self, insn: &Instruction) -> Lin {
        let Some(a) = self.address(insn) else {
            return self.fresh(Sym::Unknown);
        };
        let size = insn.memory_size().size() as u32;
        if let Some((_, v)) = self.mem.iter().rev().find(|(at, _)| *at == a.lin) {
            return self.narrow(v.clone(), size);
        }
        if let Some((_, _, v)) = self
            .loads
            .iter()
            .find(|(at, sz, _)| *sz == size && *at == a.lin)
        {
            return v.clone();
        }
        let v = self.fresh(Sym::Load {
            at: insn.ip(),
            addr: a.lin.clone(),
            anchor: a.anchor,
            index: a.index,
            size,
            signed: false,
        });
        self.loads.push((a.lin, size, v.clone()));
        v
    }

    /// Records a store of `value` to `insn`'s memory operand; stores the path cannot place
    /// forget every spill.
    fn store(&mut self, insn: &Instruction, value: Option<Lin>) {
        self.loads.clear();
        let Some(a) = self.address(insn) else {
            self.mem.clear();
            return;
        };
        let size = insn.memory_size().size() as i64;
        // Slots at the same symbolic base a known distance away survive; others may alias.
        self.mem.retain(|(at, _)| {
            at.same_terms(&a.lin) && (at.konst.wrapping_sub(a.lin.konst)).abs() >= size.max(8)
        });
        if let Some(v) = value {
            self.mem.push((a.lin, v));
        }
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
            OpKind::Memory => self.load(insn),
            _ => self.fresh(Sym::Unknown),
        }
    }

    /// Interprets one instruction; anything not modelled clobbers what it writes.
    fn step(&mut self, step: &Step) {
        let insn = &step.insn;
        if insn.flow_control() == FlowControl::ConditionalBranch {
            self.branch(step);
            return;
        }
        if matches!(
            insn.flow_control(),
            FlowControl::UnconditionalBranch | FlowControl::IndirectBranch
        ) {
            return;
        }
        if matches!(
            insn.flow_control(),
            FlowControl::Call | FlowControl::IndirectCall
        ) {
            // A call returns its value in rax (and rdx). Any other register the code after it
            // reads without setting the callee kept: the System V ABI's rbx, rbp and r12-r15,
            // or more when gcc's interprocedural allocation knows the callee (`-fipa-ra`).
            self.clobber(Register::RAX);
            self.clobber(Register::RDX);
            self.mem.clear();
            self.loads.clear();
            self.flags = None;
            return;
        }
        let op0 = (insn.op_count() > 0).then(|| insn.op0_kind());
        // A destination narrower than 32 bits keeps the register's upper bits: not modelled.
        let dst = match op0 {
            Some(OpKind::Register) if insn.op0_register().size() >= 4 => Some(insn.op0_register()),
            _ => None,
        };
        let mut flags = None;
        let handled = match (insn.mnemonic(), dst) {
            (Mnemonic::Xor | Mnemonic::Sub, Some(d))
                if insn.op1_kind() == OpKind::Register
                    && insn.op1_register().full_register() == d.full_register() =>
            {
                self.set(d, Lin::konst(0));
                true
            }
            (Mnemonic::Mov, Some(d)) => {
                let v = self.operand(insn, 1);
                self.set(d, v);
                true
            }
            (Mnemonic::Mov, None) if op0 == Some(OpKind::Memory) => {
                let v = (insn.memory_size().size() >= 4).then(|| self.operand(insn, 1));
                self.store(insn, v);
                true
            }
            (Mnemonic::Movsxd | Mnemonic::Movsx, Some(d)) => {
                let v = self.operand(insn, 1);
                let v = self.signed(v);
                self.set(d, v);
                true
            }
            (Mnemonic::Movzx, Some(d)) => {
                let v = match insn.op1_kind() {
                    OpKind::Register => self.reg_narrow(insn.op1_register()),
                    _ => Some(self.operand(insn, 1)),
                };
                match v {
                    Some(v) => {
                        // A byte indexes at most 256 entries (CPython's computed-goto
                        // dispatch: `movzx eax, sil; mov rax, [T + rax*8]; jmp rax`).
                        let byte = match insn.op1_kind() {
                            OpKind::Register => insn.op1_register().size() == 1,
                            _ => insn.memory_size().size() == 1,
                        };
                        if byte && v.as_konst().is_none() {
                            self.bytes.push(v.clone());
                        }
                        self.set(d, v);
                    }
                    None => self.clobber(d),
                }
                true
            }
            (Mnemonic::Cdqe, _) => {
                let v = self.reg(Register::RAX);
                let v = self.signed(v);
                self.set(Register::RAX, v);
                true
            }
            (Mnemonic::Lea, Some(d)) => {
                match self.address(insn) {
                    Some(a) => self.set(d, a.lin),
                    None => self.clobber(d),
                }
                true
            }
            (Mnemonic::Add, Some(d)) => {
                let a = self.reg(d);
                let b = self.operand(insn, 1);
                self.set(d, a.add(&b));
                true
            }
            (Mnemonic::Sub, Some(d)) => {
                let a = self.reg(d);
                let b = self.operand(insn, 1);
                // clang compares with `sub i, N` when it keeps `i - N` for nothing else.
                if let Some(k) = b.as_konst() {
                    flags = Some((a.clone(), k as u64));
                }
                self.set(d, a.sub(&b));
                true
            }
            (Mnemonic::Inc | Mnemonic::Dec, Some(d)) => {
                let k = if insn.mnemonic() == Mnemonic::Inc {
                    1
                } else {
                    -1
                };
                let a = self.reg(d);
                self.set(d, a.add(&Lin::konst(k)));
                true
            }
            (Mnemonic::Neg, Some(d)) => {
                let a = self.reg(d);
                self.set(d, a.scale(-1));
                true
            }
            (Mnemonic::Shl, Some(d)) if insn.op1_kind() == OpKind::Immediate8 => {
                let a = self.reg(d);
                self.set(d, a.scale(1i64 << (insn.immediate8() & 63)));
                true
            }
            (Mnemonic::Imul, Some(d)) if insn.op_count() == 3 => {
                let a = self.operand(insn, 1);
                self.set(d, a.scale(insn.immediate(2) as i64));
                true
            }
            (Mnemonic::And, Some(d)) if is_imm(insn.op1_kind()) => {
                // `i & (2^k - 1)` is below 2^k: a guard, but of the index, not of the table
                // (lua's `disptab[op & 0x7f]` has 83 entries).
                let mask = insn.immediate(1);
                let v = self.fresh(Sym::Unknown);
                if mask > 0 && mask < 1 << 20 && (mask + 1).is_power_of_two() {
                    self.bounds.push((v.clone(), mask + 1, false));
                }
                self.set(d, v);
                true
            }
            (Mnemonic::Cmp, _) if is_imm(insn.op1_kind()) => {
                // `cmp al, N` bounds the low byte, which a `movzx` then takes as the index.
                let (v, width) = match insn.op0_kind() {
                    OpKind::Register => (
                        self.reg_narrow(insn.op0_register()),
                        insn.op0_register().size(),
                    ),
                    _ => (Some(self.operand(insn, 0)), insn.memory_size().size()),
                };
                let mask = if width >= 8 {
                    u64::MAX
                } else {
                    (1u64 << (8 * width)) - 1
                };
                flags = v.map(|v| (v, insn.immediate(1) & mask));
                true
            }
            (Mnemonic::Push, _) => {
                let v = self.operand(insn, 0);
                let sp = self.reg(Register::RSP).add(&Lin::konst(-8));
                self.set(Register::RSP, sp.clone());
                self.mem.retain(|(at, _)| *at != sp);
                self.mem.push((sp, v));
                true
            }
            (Mnemonic::Pop, Some(d)) => {
                let sp = self.reg(Register::RSP);
                let v = match self.mem.iter().rev().find(|(at, _)| *at == sp) {
                    Some((_, v)) => v.clone(),
                    None => self.fresh(Sym::Unknown),
                };
                self.set(Register::RSP, sp.add(&Lin::konst(8)));
                self.set(d, v);
                true
            }
            (Mnemonic::Nop | Mnemonic::Endbr64 | Mnemonic::Test, _) => true,
            _ => false,
        };
        if !handled {
            self.clobber_written(insn);
        }
        // A `mov` between the compare and its branch keeps the flags; anything writing them
        // replaces them with what is known of its compare, usually nothing.
        if flags.is_some() || insn.rflags_modified() != 0 {
            self.flags = flags;
        }
    }

    /// Forgets every register and memory slot `insn` writes.
    fn clobber_written(&mut self, insn: &Instruction) {
        let info = self.info.info(insn);
        let mut written = Vec::new();
        for r in info.used_registers() {
            if matches!(
                r.access(),
                OpAccess::Write
                    | OpAccess::CondWrite
                    | OpAccess::ReadWrite
                    | OpAccess::ReadCondWrite
            ) {
                written.push(r.register());
            }
        }
        let writes_memory = info.used_memory().iter().any(|m| {
            matches!(
                m.access(),
                OpAccess::Write
                    | OpAccess::CondWrite
                    | OpAccess::ReadWrite
                    | OpAccess::ReadCondWrite
            )
        });
        for r in written {
            if r.is_gpr() {
                self.clobber(r);
            }
        }
        if writes_memory {
            if insn.op_count() > 0 && insn.op0_kind() == OpKind::Memory {
                self.store(insn, None);
            } else {
                self.mem.clear();
                self.loads.clear();
            }
        }
    }

    /// A conditional branch on the path: after `cmp v, N`, the way the path goes bounds `v`.
    fn branch(&mut self, step: &Step) {
        let Some((v, imm)) = self.flags.clone() else {
            return;
        };
        let count = match (step.insn.mnemonic(), step.taken) {
            // Out of range when above N (`ja` falls through to the table, `jbe` jumps to it).
            (Mnemonic::Ja, false) | (Mnemonic::Jbe, true) => imm.checked_add(1),
            // Out of range when N or above.
            (Mnemonic::Jae, false) | (Mnemonic::Jb, true) => Some(imm),
            _ => None,
        };
        if let Some(n) = count.filter(|&n| n > 0) {
            self.bounds.push((v, n, true));
        }
    }

    /// The registers (a mask by number) whose values where the path starts `v` depends on,
    /// directly or through the address of a load it is made of.
    fn entries(&self, v: &Lin) -> u16 {
        let mut mask = 0;
        let mut todo: Vec<u32> = v.terms.iter().map(|t| t.0).collect();
        while let Some(s) = todo.pop() {
            match &self.syms[s as usize] {
                Sym::Entry(n) => mask |= 1 << n,
                Sym::Load { addr, .. } if todo.len() < 64 => {
                    todo.extend(addr.terms.iter().map(|t| t.0));
                }
                _ => {}
            }
        }
        mask
    }

    /// Marks a 32-bit load as sign-extended (`movsxd`, `cdqe`).
    fn signed(&mut self, v: Lin) -> Lin {
        if let Some((0, s, 1)) = v.single() {
            if let Sym::Load {
                at,
                addr,
                anchor,
                index,
                size: 4,
                ..
            } = self.syms[s as usize].clone()
            {
                return self.fresh(Sym::Load {
                    at,
                    addr,
                    anchor,
                    index,
                    size: 4,
                    signed: true,
                });
            }
        }
        v
    }
}

/// Why an indirect jump was not resolved.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Unresolved {
    /// Its target is loaded from a table indexed by a register, as a `switch` does, but the
    /// table could not be placed or read: the jump stays inside the function.
    Switch,
    /// Its target has no table's shape (a pointer from memory or a register: maybe a tail call).
    Other,
}

/// Paths looked at into one jump at the most. A register set before a loop, which a path may
/// never reach, comes from the definitions reaching the path's start ([`Reaching`]), so a few
/// paths suffice: 8 and 64 instructions find every table 24 and 160 did on python3.11, cc1,
/// bash, sqlite3, redis-server, nginx, gzip and the ground-truth corpora.
const MAX_PATHS: usize = 8;

/// Walks the paths of instructions that lead to `jump`, from the most likely: where a block has
/// several predecessors (a loop's head), the fall-through one first, then the branches by
/// address. A table's base set before a loop and its guard inside it are both on the path that
/// enters the loop. `visit` gets each complete path, newest step first, and ends the walk by
/// returning true; most tables resolve on the first.
struct Walk<'a> {
    insns: &'a Insns,
    preds: &'a Predecessors,
    run: Vec<Step>,
    on_run: foldhash::HashSet<u64>,
    paths: usize,
    /// Every instruction some path went through.
    seen: foldhash::HashSet<u64>,
}

impl Walk<'_> {
    fn extend(&mut self, visit: &mut dyn FnMut(&[Step]) -> bool) -> bool {
        if self.paths >= MAX_PATHS {
            return true;
        }
        let at = self.run.last().map_or(0, |s| s.insn.ip());
        let mut before = Vec::new();
        if self.run.len() < LOOKBACK {
            // The instruction ending at `at`.
            let falls_in = (self.preds.falls_in.get(&at))
                .and_then(|a| self.insns.get(a))
                .filter(|i| {
                    matches!(
                        i.flow_control(),
                        FlowControl::Next
                            | FlowControl::ConditionalBranch
                            | FlowControl::Call
                            | FlowControl::IndirectCall
                    )
                });
            before.extend(falls_in.map(|i| Step {
                insn: *i,
                taken: false,
            }));
            if let Some(jumps) = self.preds.branches.get(&at) {
                let first = before.len();
                before.extend(
                    jumps
                        .iter()
                        .filter_map(|a| self.insns.get(a))
                        .map(|i| Step {
                            insn: *i,
                            taken: true,
                        }),
                );
                before[first..].sort_unstable_by_key(|s| s.insn.ip());
            }
            before.retain(|s| !self.on_run.contains(&s.insn.ip()));
        }
        if before.is_empty() {
            self.paths += 1;
            return visit(&self.run);
        }
        for step in before {
            self.on_run.insert(step.insn.ip());
            self.seen.insert(step.insn.ip());
            self.run.push(step);
            let done = self.extend(visit);
            self.run.pop();
            self.on_run.remove(&step.insn.ip());
            if done {
                return true;
            }
        }
        false
    }
}

/// Resolves the indirect jump `jump`, if it is a jump table; `ours` tells the addresses of the
/// function's own code (its range, and the part of it the jump is in). Also gives every
/// instruction the paths went through: the walk, and so its answer, stays the same until one
/// of them gets a new predecessor.
pub fn resolve(
    binary: &Binary,
    ours: &dyn Fn(LinkAddr) -> bool,
    ends: &Ends<'_>,
    insns: &Insns,
    preds: &Predecessors,
    reaching: &mut Reaching,
    jump: &Instruction,
) -> (Result<JumpTable, Unresolved>, foldhash::HashSet<u64>) {
    let mut info = InstructionInfoFactory::new();
    let mut why = Unresolved::Other;
    let mut found = None;
    let mut walk = Walk {
        insns,
        preds,
        run: vec![Step {
            insn: *jump,
            taken: false,
        }],
        on_run: Default::default(),
        paths: 0,
        seen: Default::default(),
    };
    walk.on_run.insert(jump.ip());
    walk.seen.insert(jump.ip());
    // A path may miss the table's base (a register set before a loop), so even one that shows
    // no table's shape does not rule the others out.
    walk.extend(&mut |run: &[Step]| {
        let mut seeds = [None; 16];
        let mut outcome = resolve_path(binary, ours, ends, run, jump, &mut info, &seeds);
        // A register the table's address or base depends on may hold a constant set where
        // no path reaches (a table's base set before a loop with many ways in): take its
        // value from every definition reaching the path's start, and try again.
        if let Err(Failed::NoShape(entries) | Failed::Unplaced(entries)) = &outcome {
            let start = run.last().map_or(jump.ip(), |s| s.insn.ip());
            let mut any = false;
            for n in (0..16).filter(|n| entries & (1 << n) != 0) {
                seeds[n] = reaching.before(insns, preds, start, n);
                any |= seeds[n].is_some();
            }
            if any {
                outcome = resolve_path(binary, ours, ends, run, jump, &mut info, &seeds);
            }
        }
        match outcome {
            Ok(table) => {
                found = Some(table);
                return true;
            }
            Err(Failed::Unreadable) => why = Unresolved::Switch,
            Err(Failed::NoShape(_) | Failed::Unplaced(_)) => {}
        }
        false
    });
    (found.ok_or(why), walk.seen)
}

/// Why one path did not resolve a jump.
enum Failed {
    /// The target is not read from a table; with the registers (a mask by number) whose
    /// values where the path starts the target depends on.
    NoShape(u16),
    /// It is, but the table could not be placed in the file; with the registers the entry's
    /// address and the base depend on where the path starts.
    Unplaced(u16),
    /// The table was placed, but no entry leads into the function.
    Unreadable,
}

/// Resolves `jump` as the newest step of `run` (newest first).
fn resolve_path(
    binary: &Binary,
    ours: &dyn Fn(LinkAddr) -> bool,
    ends: &Ends<'_>,
    run: &[Step],
    jump: &Instruction,
    info: &mut InstructionInfoFactory,
    seeds: &[Option<i64>; 16],
) -> Result<JumpTable, Failed> {
    let mut eval = Eval::new(info);
    for (n, k) in seeds.iter().enumerate() {
        eval.gprs[n] = k.map(Lin::konst);
    }
    for step in run[1..].iter().rev() {
        eval.step(step);
    }
    let target = eval.operand(jump, 0);
    let entries = eval.entries(&target);
    let Some(Shape {
        addr,
        anchor,
        index,
        stride,
        base,
        load,
    }) = match_shape(&eval, &target)
    else {
        return Err(Failed::NoShape(entries));
    };
    // The table from the latest bound whose value the access scales: `A - stride·g`. The
    // latest, since the path may pass unrelated compares of the same value's relatives
    // before (and one may even contradict the guard on a path that cannot run). A constant
    // bounded value must be the index itself. A zero-extended byte bounds it only when no
    // compare does.
    let place = |g: &Lin| {
        if g.as_konst().is_some() && index.as_ref() != Some(g) {
            return None;
        }
        Some(addr.sub(&g.scale(stride as i64)).as_konst()? as u64)
    };
    let placed = eval
        .bounds
        .iter()
        .rev()
        .find_map(|(g, n, compare)| {
            let extent = match compare {
                true => Extent::Guarded(*n),
                false => Extent::Masked(*n),
            };
            Some((place(g)?, extent))
        })
        .or_else(|| {
            let bytes = eval.bytes.iter().rev();
            bytes.clone().find_map(|g| Some((place(g)?, Extent::Byte)))
        });
    // Only a table in the file is one: an anchor elsewhere is a structure's offset.
    let in_file = |a: u64| binary.section_at(LinkAddr(a)).is_some_and(|s| s.is_alloc());
    let (table, extent) = match (placed, anchor) {
        (Some(p), _) if in_file(p.0) => p,
        (None, Some(a)) if in_file(a as u64) => (a as u64, Extent::Open),
        _ => return Err(Failed::Unplaced(entries)),
    };
    let access = Access {
        table,
        stride,
        base,
        load,
    };
    read_table(binary, ours, ends, jump, &access, extent)
}

/// Where and how a jump reads its table.
struct Access {
    /// The entry for index 0.
    table: u64,
    /// Bytes per entry.
    stride: u64,
    /// What relative entries are added to (`None` for absolute ones).
    base: Option<u64>,
    /// The instruction reading the entry.
    load: u64,
}

/// How far a table may run.
#[derive(Clone, Copy, Debug)]
enum Extent {
    /// A compare bounds the index below this: exactly that many entries.
    Guarded(u64),
    /// A mask bounds the index below this: at most that many entries, and fewer where the
    /// table ends as an unguarded one does (a mask bounds the index, not the table).
    Masked(u64),
    /// Only a zero-extended byte bounds the index: at most 256 entries, and fewer where the
    /// table ends as an unguarded one does. A byte says nothing of a table's size; clang
    /// drops the compare when it knows the value's range, and reading 256 entries then runs
    /// on into the next table and gives the function blocks of other functions.
    Byte,
    /// Nothing bounds the index: entries while they lead into the function, up to the end.
    Open,
}

/// What ends a table: [`Limits`], and the starts of the function's other tables (sorted).
pub struct Ends<'a> {
    pub limits: &'a Limits,
    pub tables: &'a [u64],
}

/// Reads the table at `table` for `jump` as far as `extent` lets it run: a guarded table's
/// entries, or entries while they lead into the function, up to the table's end.
fn read_table(
    binary: &Binary,
    ours: &dyn Fn(LinkAddr) -> bool,
    ends: &Ends<'_>,
    jump: &Instruction,
    access: &Access,
    extent: Extent,
) -> Result<JumpTable, Failed> {
    let &Access {
        table,
        stride,
        base,
        load,
    } = access;
    let (limit, bound) = match extent {
        Extent::Guarded(n) => (n.min(MAX_BOUNDED), Some(n)),
        Extent::Masked(n) => (n.min(MAX_BOUNDED), None),
        Extent::Byte => (256, None),
        Extent::Open => (MAX_UNBOUNDED, None),
    };
    let end = match bound {
        Some(_) => u64::MAX,
        None => ends.limits.end(table, ends.tables),
    };
    let mut targets = Vec::new();
    let mut entries = 0;
    for i in 0..limit {
        let entry_addr = LinkAddr(table.wrapping_add(i * stride));
        if bound.is_none() && (entry_addr.0 >= end || ends.limits.refuses(entry_addr.0, stride)) {
            break;
        }
        let Some(bytes) = binary.bytes_at(entry_addr, stride) else {
            break;
        };
        let Ok(bytes) = <[u8; 8]>::try_from(bytes)
            .map(u64::from_le_bytes)
            .or_else(|_| <[u8; 4]>::try_from(bytes).map(|b| i32::from_le_bytes(b) as i64 as u64))
        else {
            break;
        };
        let t = match base {
            None => bytes,
            Some(b) => b.wrapping_add(bytes),
        };
        let in_code = binary.section_at(LinkAddr(t)).is_some_and(|s| s.is_exec());
        // clang puts an unreachable default's label after the function's last instruction,
        // in the padding before the next function: still this switch's, and its table runs on.
        let tail = t > jump.ip() && t < ends.limits.next_start(jump.ip());
        if !in_code || (bound.is_none() && !ours(LinkAddr(t)) && !tail) {
            if bound.is_none() {
                break;
            }
            continue;
        }
        entries = i + 1;
        if !targets.contains(&LinkAddr(t)) {
            targets.push(LinkAddr(t));
        }
    }
    if !targets.iter().any(|t| ours(*t)) {
        // A switch's table leads into its own function; a read-only table that does not is
        // misread, while a writable array of code pointers is a dispatch to other functions.
        let read_only = binary
            .section_at(LinkAddr(table))
            .is_some_and(|s| s.flags & u64::from(object::elf::SHF_WRITE) == 0);
        return Err(if read_only {
            Failed::Unreadable
        } else {
            Failed::NoShape(0)
        });
    }
    Ok(JumpTable {
        jump: LinkAddr(jump.ip()),
        table: LinkAddr(table),
        entries,
        targets,
        bounded: matches!(extent, Extent::Guarded(_) | Extent::Masked(_)),
        stride,
        entry: match base {
            Some(b) => TableEntry::Relative { base: LinkAddr(b) },
            None => TableEntry::Absolute {
                relocated: binary.is_position_independent(),
            },
        },
        load: LinkAddr(load),
        reach: match extent {
            Extent::Guarded(n) | Extent::Masked(n) => Some(n),
            Extent::Byte => Some(256),
            Extent::Open => None,
        },
    })
}

/// How a jump's target is read from a table.
struct Shape {
    /// The entry's address.
    addr: Lin,
    /// The table's start as the access names it (see [`Sym::Load`]).
    anchor: Option<i64>,
    /// The index register's value.
    index: Option<Lin>,
    /// The entry size.
    stride: u64,
    /// The base relative entries are added to.
    base: Option<u64>,
    /// The instruction reading the entry.
    load: u64,
}

/// The table shape of `target`, if it has one.
fn match_shape(eval: &Eval, target: &Lin) -> Option<Shape> {
    let (k, s, c) = target.single()?;
    if c != 1 {
        return None;
    }
    let Sym::Load {
        at,
        addr,
        anchor,
        index,
        size,
        signed,
    } = &eval.syms[s as usize]
    else {
        return None;
    };
    let stride = match (k, *size, *signed) {
        (0, 8, _) => 8,
        (base, 4, true) if base != 0 => 4,
        _ => return None,
    };
    // A table is indexed by a scaled index: an address with no variable part is a pointer,
    // and one with a variable part not scaled by the entry size a structure's field (a call
    // through a vtable, `jmp [rax+0x10]`).
    let indexed = !addr.terms.is_empty() && addr.terms.iter().all(|&(_, c)| c % stride == 0)
        || index.as_ref().is_some_and(|(_, s)| i64::from(*s) == stride);
    indexed.then(|| Shape {
        addr: addr.clone(),
        anchor: *anchor,
        index: index.as_ref().map(|(v, _)| v.clone()),
        stride: stride as u64,
        base: (stride == 4).then_some(k as u64),
        load: *at,
    })
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

#[cfg(test)]
mod tests;
