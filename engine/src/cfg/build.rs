//! Building one function's CFG: recursive traversal from the entry, then block formation.

use std::collections::BTreeMap;

use iced_x86::{Decoder, DecoderOptions, FlowControl, Instruction, Mnemonic, OpKind};

use super::jumptable::Unresolved;
use super::landing::LandingPads;
use super::reaching::Reaching;
use super::{jumptable, Block, BlockId, CallSite, Cfg, Edge, EdgeKind, Exit, JumpTable};
use crate::addr::LinkAddr;
use crate::elf::Binary;
use crate::symbols::{Found, Function, FunctionTable, NameSource};

/// Instructions decoded for one function at the most; past it the traversal stops, so that a
/// misidentified function cannot make analysis run away.
const MAX_INSNS: usize = 200_000;

/// The decoded instructions of a function, by address. A hash map with a fast hasher: for a
/// module the size of cc1 these lookups, one or more per instruction, were most of the
/// analysis's time in a `BTreeMap`.
pub(super) type Insns = foldhash::HashMap<u64, Instruction>;

/// The ways into each instruction of a function, for walking back into a jump table's index.
#[derive(Default)]
pub(super) struct Predecessors {
    /// The direct branches (`jmp` and `jcc`) and resolved table jumps by target.
    pub branches: foldhash::HashMap<u64, Vec<u64>>,
    /// The instruction ending where each instruction starts (the one nearest, should two
    /// decodings overlap), whatever its kind.
    pub falls_in: foldhash::HashMap<u64, u64>,
}

/// What a CFG build needs besides the function itself.
pub struct Context<'a> {
    /// The file the function's bytes are read from.
    pub binary: &'a Binary,
    /// The module's functions: a direct jump to another function's start is a tail call.
    pub functions: &'a FunctionTable,
    /// True when a call to this address never returns.
    pub is_noreturn: &'a (dyn Fn(LinkAddr) -> bool + Sync),
    /// The executable sections' `(start, end)` ranges, sorted: see [`code_ranges`].
    pub code: &'a [(u64, u64)],
    /// Where calls that throw land.
    pub landing_pads: &'a LandingPads,
    /// What ends a jump table no compare bounds.
    pub table_limits: &'a jumptable::Limits,
}

/// True for a function only `.eh_frame` knows: no name, no call, no pointer to it (a stripped
/// binary's cold part).
fn unclaimed(f: &Function) -> bool {
    f.name_source == NameSource::Synthetic && f.found == Found::EH_FRAME
}

/// The `(start, end)` of every executable section of `binary`, sorted by address.
pub fn code_ranges(binary: &Binary) -> Vec<(u64, u64)> {
    let mut v: Vec<(u64, u64)> = binary
        .code_sections()
        .map(|s| (s.addr.0, s.addr.0 + s.size))
        .collect();
    v.sort_unstable();
    v
}

impl Context<'_> {
    /// The end of the executable section holding `addr`, if it is in one.
    fn code_end(&self, addr: u64) -> Option<u64> {
        let i = self.code.partition_point(|r| r.0 <= addr);
        let (start, end) = *self.code.get(i.checked_sub(1)?)?;
        (addr >= start && addr < end).then_some(end)
    }
}

/// Where a decoded instruction sends control.
#[derive(Clone, Copy, Debug)]
enum Flow {
    Next,
    Cond(u64),
    Jump(u64),
    JumpIndirect,
    Call(Option<u64>),
    Ret,
    Trap,
}

fn flow_of(insn: &Instruction) -> Flow {
    let direct = || (insn.op0_kind() == OpKind::NearBranch64).then(|| insn.near_branch64());
    match insn.flow_control() {
        FlowControl::Next | FlowControl::XbeginXabortXend => match insn.mnemonic() {
            Mnemonic::Hlt => Flow::Trap,
            _ => Flow::Next,
        },
        FlowControl::ConditionalBranch => match direct() {
            Some(t) => Flow::Cond(t),
            None => Flow::Next,
        },
        FlowControl::UnconditionalBranch => match direct() {
            Some(t) => Flow::Jump(t),
            None => Flow::JumpIndirect,
        },
        FlowControl::IndirectBranch => Flow::JumpIndirect,
        FlowControl::Call => Flow::Call(direct()),
        FlowControl::IndirectCall => Flow::Call(None),
        FlowControl::Return => Flow::Ret,
        FlowControl::Interrupt => match insn.mnemonic() {
            Mnemonic::Int3 | Mnemonic::Int1 => Flow::Trap,
            _ => Flow::Next,
        },
        FlowControl::Exception => Flow::Trap,
    }
}

/// Builds the CFG of `func`.
pub fn build(ctx: &Context<'_>, func: &Function) -> Cfg {
    let cfg = Builder::new(ctx, func, Vec::new()).run();
    // A table no guard bounds ends at the next table, but only at one found already: a switch
    // reached through another's cases has its table found after that one was read, which may
    // have run on into it (redis-server's `checkPrefixCollisionsOrReply`: a masked index read
    // 8 entries of a 5-entry table, the next 3 being the second table's offsets, taken from
    // the wrong base as cases inside other instructions). Built again with every table's start
    // known from the outset, each ends where it should; rare, so the first build is kept
    // otherwise.
    let mut tables: Vec<u64> = cfg.jump_tables.iter().map(|t| t.table.0).collect();
    tables.sort_unstable();
    let runs_into_another = |t: &super::JumpTable| {
        let end = t.table.0.saturating_add(t.entries.saturating_mul(t.stride));
        tables.iter().any(|&s| s > t.table.0 && s < end)
    };
    if cfg.jump_tables.iter().any(runs_into_another) {
        return Builder::new(ctx, func, tables).run();
    }
    cfg
}

/// A map capacity for `n` expected entries, bounded so a bogus size cannot allocate much.
fn capacity(n: u64) -> usize {
    n.clamp(4, MAX_INSNS as u64) as usize
}

struct Builder<'a, 'c> {
    ctx: &'a Context<'c>,
    func: &'a Function,
    insns: Insns,
    /// Addresses where a block must start (branch targets, fall-throughs, the entry).
    starts: foldhash::HashSet<u64>,
    work: Vec<u64>,
    tables: BTreeMap<u64, JumpTable>,
    /// Indirect jumps not resolved yet: tables are read once the code around them is known.
    /// With each, once tried, the instructions its paths went through.
    pending: Vec<(Instruction, Option<foldhash::HashSet<u64>>)>,
    /// Once indirect jumps have been tried: the instructions that got a new predecessor since
    /// (a jump is tried again only when one of its paths' instructions did).
    fresh: Option<foldhash::HashSet<u64>>,
    /// Indirect jumps left unresolved, and why.
    unresolved: BTreeMap<u64, Unresolved>,
    /// Where the function's tables start, when known before its code is explored (a second
    /// build, see [`build`]): each table ends at the next.
    known_tables: Vec<u64>,
}

impl<'a, 'c> Builder<'a, 'c> {
    fn new(ctx: &'a Context<'c>, func: &'a Function, known_tables: Vec<u64>) -> Self {
        let mut b = Builder {
            ctx,
            func,
            // Sized for the function's own bytes (about 4 per instruction, a block every 16
            // or so), so the maps rarely grow: rehashing showed in profiles.
            insns: Insns::with_capacity_and_hasher(capacity(func.size / 4), Default::default()),
            starts: foldhash::HashSet::with_capacity_and_hasher(
                capacity(func.size / 16),
                Default::default(),
            ),
            work: vec![func.addr.0],
            tables: BTreeMap::new(),
            pending: Vec::new(),
            fresh: None,
            unresolved: BTreeMap::new(),
            known_tables,
        };
        b.starts.insert(func.addr.0);
        b
    }

    fn run(mut self) -> Cfg {
        self.explore();
        self.finish()
    }
}

impl Builder<'_, '_> {
    /// True when a branch to `target` stays in this function (rather than being a tail call).
    fn is_local(&self, target: u64) -> bool {
        if self.func.contains(LinkAddr(target)) {
            return true;
        }
        if self.ctx.code_end(target).is_none() {
            return false;
        }
        // Outside our bounds: another function's entry is a tail call; a `.cold` part split
        // off by gcc, or code no function claims, is still ours. A stripped binary's FDEs show
        // a cold part as a function of its own that nothing calls or names: a jump into its
        // middle is ours too (tail calls go to entries). The cold part's jumps back into its
        // parent stay exits of the cold part, or each would explore its parent again. A cold
        // part is named so from `.symtab`, or in a stripped binary from its parent's branches
        // (`symbols::cold`); a jump to its start is then no tail call either.
        match self.ctx.functions.containing(LinkAddr(target)) {
            None => true,
            Some(other) => other.is_cold_part() || other.addr.0 != target && unclaimed(other),
        }
    }

    /// True when straight-line flow from the instruction at `from` to `next` would leave the
    /// function's region for another function's (or from a function into the padding before
    /// the next one). Compilers never fall into the next function: a call there never
    /// returns (`call [handler]` to an abort routine), and plain flow there is a tail call.
    fn falls_out(&self, from: u64, next: u64) -> bool {
        if self.func.contains(LinkAddr(from)) && self.func.contains(LinkAddr(next)) {
            return false;
        }
        let region = |a: u64| self.ctx.functions.containing(LinkAddr(a)).map(|f| f.id);
        region(from) != region(next)
    }

    /// The landing pad, in this function, of the call at `addr`.
    fn landing_pad(&self, addr: u64) -> Option<u64> {
        let pad = self.ctx.landing_pads.for_call(LinkAddr(addr))?.0;
        self.is_local(pad).then_some(pad)
    }

    fn push_start(&mut self, addr: u64) {
        if self.starts.insert(addr) {
            self.work.push(addr);
        }
    }

    /// Explores from the work list, then resolves the indirect jumps met with all the code
    /// found so far (a table's guard may sit in a block found later), and explores their
    /// targets, until no more resolve.
    fn explore(&mut self) {
        loop {
            self.explore_work();
            if self.pending.is_empty() || self.insns.len() >= MAX_INSNS {
                break;
            }
            let preds = self.predecessors();
            let mut reaching = Reaching::default();
            let fresh = self.fresh.replace(Default::default());
            let mut resolved = false;
            for (insn, seen) in std::mem::take(&mut self.pending) {
                // Nothing new leads into the paths tried last time: the same walk would fail
                // the same way.
                if let (Some(seen), Some(fresh)) = (&seen, &fresh) {
                    if !seen.iter().any(|a| fresh.contains(a)) {
                        self.pending.push((insn, Some(seen.clone())));
                        continue;
                    }
                }
                // The function's own code: its range, the region the jump is in, and cold
                // parts (split off from it).
                let region = |a: LinkAddr| self.ctx.functions.containing(a).map(|f| f.id);
                let home = region(LinkAddr(insn.ip()));
                let ours = |t: LinkAddr| {
                    self.func.contains(t)
                        || region(t) == home
                        || self
                            .ctx
                            .functions
                            .containing(t)
                            .is_some_and(|f| unclaimed(f) || f.is_cold_part())
                };
                let mut tables: Vec<u64> = self
                    .tables
                    .values()
                    .map(|t| t.table.0)
                    .chain(self.known_tables.iter().copied())
                    .collect();
                tables.sort_unstable();
                tables.dedup();
                let ends = jumptable::Ends {
                    limits: self.ctx.table_limits,
                    tables: &tables,
                };
                let (found, seen) = jumptable::resolve(
                    self.ctx.binary,
                    &ours,
                    &ends,
                    &self.insns,
                    &preds,
                    &mut reaching,
                    &insn,
                );
                match found {
                    Ok(table) => {
                        // A switch's cases are its own code, even in a part of it split off
                        // (`.cold`) that a stripped binary's FDEs show as a function of its own.
                        for &t in &table.targets {
                            if self.ctx.code_end(t.0).is_some() {
                                self.push_start(t.0);
                            }
                            self.got_predecessor(t.0);
                        }
                        self.tables.insert(insn.ip(), table);
                        self.unresolved.remove(&insn.ip());
                        resolved = true;
                    }
                    Err(why) => {
                        self.unresolved.insert(insn.ip(), why);
                        self.pending.push((insn, Some(seen)));
                    }
                }
            }
            if !resolved {
                break;
            }
        }
    }

    /// Notes that the instruction at `addr` has a new way in.
    fn got_predecessor(&mut self, addr: u64) {
        if let Some(fresh) = &mut self.fresh {
            fresh.insert(addr);
        }
    }

    fn predecessors(&self) -> Predecessors {
        let mut preds = Predecessors::default();
        preds.falls_in.reserve(self.insns.len());
        for (&addr, insn) in &self.insns {
            if let Flow::Cond(t) | Flow::Jump(t) = flow_of(insn) {
                preds.branches.entry(t).or_default().push(addr);
            }
            let nearest = preds.falls_in.entry(insn.next_ip()).or_insert(addr);
            *nearest = (*nearest).max(addr);
        }
        // A case block's way in is its table's jump.
        for (&jump, table) in &self.tables {
            for t in &table.targets {
                preds.branches.entry(t.0).or_default().push(jump);
            }
        }
        preds
    }

    fn explore_work(&mut self) {
        while let Some(start) = self.work.pop() {
            if self.insns.len() >= MAX_INSNS {
                return;
            }
            let Some(end) = self.ctx.code_end(start) else {
                continue;
            };
            let Some(bytes) = self.ctx.binary.bytes_at(LinkAddr(start), end - start) else {
                continue;
            };
            let mut decoder = Decoder::with_ip(64, bytes, start, DecoderOptions::NONE);
            // Straight-line flow below this address stays in the region it started in: code
            // outside the function (a cold part) asks the function table once per run, not
            // once per instruction.
            let mut same_region_until = 0;
            loop {
                let addr = decoder.ip();
                if addr != start && self.insns.contains_key(&addr) {
                    break;
                }
                if !decoder.can_decode() {
                    break;
                }
                let insn = decoder.decode();
                if insn.is_invalid() {
                    break;
                }
                let next = insn.next_ip();
                let flow = flow_of(&insn);
                self.insns.insert(addr, insn);
                if self.fresh.is_some() {
                    self.got_predecessor(next);
                    if let Flow::Cond(t) | Flow::Jump(t) = flow {
                        self.got_predecessor(t);
                    }
                }
                match flow {
                    Flow::Next if next < same_region_until => continue,
                    Flow::Next if !self.falls_out(addr, next) => {
                        if !self.func.contains(LinkAddr(addr)) {
                            same_region_until =
                                self.ctx.functions.same_region_until(LinkAddr(addr)).0;
                        }
                        continue;
                    }
                    Flow::Next => {}
                    Flow::Cond(t) => {
                        if self.is_local(t) {
                            self.push_start(t);
                        }
                        if !self.falls_out(addr, next) {
                            self.push_start(next);
                        }
                    }
                    Flow::Jump(t) => {
                        if self.is_local(t) {
                            self.push_start(t);
                        }
                    }
                    Flow::JumpIndirect => self.indirect_jump(&insn),
                    Flow::Call(target) => {
                        let noreturn = target.is_some_and(|t| (self.ctx.is_noreturn)(LinkAddr(t)))
                            || self.falls_out(addr, next);
                        if !noreturn {
                            self.push_start(next);
                        }
                        if let Some(pad) = self.landing_pad(addr) {
                            self.push_start(pad);
                        }
                    }
                    Flow::Ret | Flow::Trap => {}
                }
                break;
            }
        }
    }

    fn indirect_jump(&mut self, insn: &Instruction) {
        // `jmp [rip+slot]` goes through a pointer (a PLT stub, a GOT tail call), not a table.
        if insn.is_ip_rel_memory_operand() {
            return;
        }
        self.pending.push((*insn, None));
    }

    /// How an indirect jump that is no table ends its block: a tail call when the stack is
    /// as at entry, else a jump inside the function whose targets are unknown. A jump through
    /// a read-only table none of whose entries leads into the function (taken for a misread
    /// switch) is a tail call only when the frame is torn down just before it, as cc1's
    /// `maybe_gen_insn` tail-calls its `genfun` through a table of other functions: its exits
    /// went uncounted.
    fn unresolved_exit(&self, jump: u64, heights: &mut Option<StackHeights>) -> Exit {
        let switch = match self.unresolved.get(&jump) {
            None => return Exit::Indirect,
            Some(u) => *u == Unresolved::Switch,
        };
        let heights = heights.get_or_insert_with(|| self.stack_heights());
        match heights.get(&jump) {
            Some(0) if !switch || self.unwinds_before(jump) => Exit::Indirect,
            _ => Exit::Unresolved,
        }
    }

    /// True when one of the few instructions falling through to `at` pops the stack (`pop`,
    /// `leave`, `add rsp, N`): an epilogue.
    fn unwinds_before(&self, mut at: u64) -> bool {
        use iced_x86::Register;
        for _ in 0..4 {
            let Some(prev) = (1..=15u64)
                .filter_map(|k| self.insns.get(&at.wrapping_sub(k)))
                .find(|i| i.next_ip() == at && i.flow_control() == FlowControl::Next)
            else {
                return false;
            };
            let pops = match prev.mnemonic() {
                Mnemonic::Pop | Mnemonic::Leave => true,
                Mnemonic::Add => {
                    prev.op0_kind() == OpKind::Register && prev.op0_register() == Register::RSP
                }
                _ => false,
            };
            if pops {
                return true;
            }
            at = prev.ip();
        }
        false
    }

    /// The stack pointer before each instruction, relative to its value at entry (0 there,
    /// -8 after a `push`), where flow from the entry determines it.
    fn stack_heights(&self) -> StackHeights {
        let mut heights = StackHeights::default();
        // (address, rsp height, rbp height when rbp holds a stack address)
        let mut work = vec![(self.func.addr.0, 0i64, None::<i64>)];
        while let Some((mut addr, mut sp, mut bp)) = work.pop() {
            while let Some(insn) = self.insns.get(&addr) {
                if heights.insert(addr, sp).is_some() {
                    break;
                }
                let Some((next_sp, next_bp)) = stack_effect(insn, sp, bp) else {
                    break;
                };
                let next = insn.next_ip();
                match flow_of(insn) {
                    Flow::Next => {}
                    Flow::Cond(t) => work.push((t, next_sp, next_bp)),
                    Flow::Jump(t) => {
                        work.push((t, next_sp, next_bp));
                        break;
                    }
                    Flow::JumpIndirect => {
                        for t in self.tables.get(&addr).into_iter().flat_map(|t| &t.targets) {
                            work.push((t.0, next_sp, next_bp));
                        }
                        break;
                    }
                    Flow::Call(_) => {}
                    Flow::Ret | Flow::Trap => break,
                }
                (addr, sp, bp) = (next, next_sp, next_bp);
            }
        }
        heights
    }

    fn finish(self) -> Cfg {
        let mut blocks = Vec::new();
        let mut last_flow = Vec::new();
        let mut starts: Vec<u64> = self.starts.iter().copied().collect();
        starts.sort_unstable();
        for &start in &starts {
            let mut addr = start;
            let mut count = 0u32;
            let (last, flow) = loop {
                let Some(insn) = self.insns.get(&addr) else {
                    // Nothing decodable here: an empty block ending in an invalid exit.
                    break (addr, None);
                };
                count += 1;
                let flow = flow_of(insn);
                let next = insn.next_ip();
                let ends = !matches!(flow, Flow::Next)
                    || self.starts.contains(&next)
                    || !self.insns.contains_key(&next);
                if ends {
                    break (addr, Some((flow, next)));
                }
                addr = next;
            };
            let end = self.insns.get(&last).map_or(last, |i| i.next_ip());
            blocks.push(Block {
                id: BlockId(blocks.len() as u32),
                start: LinkAddr(start),
                end: LinkAddr(end),
                last: LinkAddr(last),
                instructions: count,
                exit: None,
                call: None,
            });
            last_flow.push((last, flow));
        }
        let id_of = |addr: u64| -> Option<BlockId> {
            starts.binary_search(&addr).ok().map(|i| BlockId(i as u32))
        };
        let mut edges = Vec::new();
        let mut heights = None;
        for (i, (last, flow)) in last_flow.into_iter().enumerate() {
            let from = BlockId(i as u32);
            let first_edge = edges.len();
            let block = &mut blocks[i];
            let Some((flow, next)) = flow else {
                block.exit = Some(Exit::Invalid);
                continue;
            };
            let mut edge = |to: u64, kind: EdgeKind, block: &mut Block| match id_of(to) {
                Some(to) => edges.push(Edge { from, to, kind }),
                None => block.exit = Some(Exit::Invalid),
            };
            match flow {
                Flow::Next if self.falls_out(last, next) => {
                    block.exit = Some(Exit::TailCall {
                        target: LinkAddr(next),
                    });
                }
                Flow::Next => {
                    if self.insns.contains_key(&next) {
                        edge(next, EdgeKind::FallThrough, block);
                    } else {
                        block.exit = Some(Exit::Invalid);
                    }
                }
                Flow::Cond(t) => {
                    if self.is_local(t) {
                        edge(t, EdgeKind::Taken, block);
                    } else {
                        block.exit = Some(Exit::TailCall {
                            target: LinkAddr(t),
                        });
                    }
                    if self.falls_out(last, next) {
                        block.exit = Some(Exit::TailCall {
                            target: LinkAddr(next),
                        });
                    } else {
                        edge(next, EdgeKind::FallThrough, block);
                    }
                }
                Flow::Jump(t) => {
                    if self.is_local(t) {
                        edge(t, EdgeKind::Taken, block);
                    } else {
                        block.exit = Some(Exit::TailCall {
                            target: LinkAddr(t),
                        });
                    }
                }
                Flow::JumpIndirect => match self.tables.get(&last) {
                    Some(table) => {
                        for &t in &table.targets {
                            if self.ctx.code_end(t.0).is_some() {
                                edge(t.0, EdgeKind::JumpTable, block);
                            }
                        }
                    }
                    None => block.exit = Some(self.unresolved_exit(last, &mut heights)),
                },
                Flow::Call(target) => {
                    let noreturn = target.is_some_and(|t| (self.ctx.is_noreturn)(LinkAddr(t)))
                        || self.falls_out(last, next);
                    block.call = Some(CallSite {
                        addr: LinkAddr(last),
                        target: target.map(LinkAddr),
                        noreturn,
                    });
                    if noreturn {
                        block.exit = Some(Exit::NoReturnCall {
                            target: LinkAddr(target.unwrap_or_default()),
                        });
                    } else {
                        edge(next, EdgeKind::CallFallThrough, block);
                    }
                    if let Some(pad) = self.landing_pad(last) {
                        edge(pad, EdgeKind::Catch, block);
                    }
                }
                Flow::Ret => block.exit = Some(Exit::Return),
                Flow::Trap => block.exit = Some(Exit::Trap),
            }
            // Blocks come in order, so sorting each one's edges sorts them all, at a fraction
            // of the cost for a module's jump tables.
            edges[first_edge..].sort_unstable_by_key(|e| (e.to, e.kind as u8));
        }
        // Duplicate targets in a jump table give one edge per distinct target.
        edges.dedup();
        let unresolved = blocks
            .iter()
            .filter(|b| b.exit == Some(Exit::Unresolved))
            .map(|b| b.last)
            .collect();
        Cfg {
            unresolved,
            entry: self.func.addr,
            blocks,
            edges,
            jump_tables: self.tables.into_values().collect(),
            degrees: Default::default(),
        }
    }
}

/// Stack heights by instruction address: see [`Builder::stack_heights`].
type StackHeights = foldhash::HashMap<u64, i64>;

/// The `(rsp, rbp)` heights after `insn`, or `None` when rsp's becomes unknown.
pub(crate) fn stack_effect(
    insn: &Instruction,
    sp: i64,
    bp: Option<i64>,
) -> Option<(i64, Option<i64>)> {
    use iced_x86::Register::{RBP, RSP};
    let op0 =
        |r| insn.op_count() > 0 && insn.op0_kind() == OpKind::Register && insn.op0_register() == r;
    let imm = || match insn.op1_kind() {
        OpKind::Immediate8to64
        | OpKind::Immediate32to64
        | OpKind::Immediate8
        | OpKind::Immediate32 => Some(insn.immediate(1) as i64),
        _ => None,
    };
    let lea_from = |base| {
        (insn.memory_base() == base && insn.memory_index() == iced_x86::Register::None)
            .then(|| insn.memory_displacement64() as i64)
    };
    match insn.mnemonic() {
        // A call returns with the stack as it was.
        _ if matches!(flow_of(insn), Flow::Call(_)) => return Some((sp, bp)),
        Mnemonic::Leave => return Some((bp? + 8, None)),
        Mnemonic::Sub if op0(RSP) => return Some((sp - imm()?, bp)),
        Mnemonic::Add if op0(RSP) => return Some((sp + imm()?, bp)),
        Mnemonic::Lea if op0(RSP) => {
            return match (lea_from(RSP), lea_from(RBP)) {
                (Some(d), _) => Some((sp + d, bp)),
                (None, Some(d)) => Some((bp? + d, bp)),
                _ => None,
            }
        }
        Mnemonic::Mov if op0(RSP) => {
            return (insn.op1_kind() == OpKind::Register && insn.op1_register() == RBP)
                .then_some(())
                .and(bp.map(|b| (b, bp)));
        }
        Mnemonic::Mov
            if op0(RBP) && insn.op1_kind() == OpKind::Register && insn.op1_register() == RSP =>
        {
            return Some((sp, Some(sp)));
        }
        Mnemonic::Lea if op0(RBP) => return Some((sp, lea_from(RSP).map(|d| sp + d))),
        _ => {}
    }
    let sp = sp + i64::from(insn.stack_pointer_increment());
    // Anything else that writes rbp leaves it no stack address we know; a `pop rbp` restores
    // the caller's.
    let writes = |r| {
        insn.op_count() > 0
            && insn.op0_kind() == OpKind::Register
            && insn.op0_register().full_register() == r
    };
    if writes(RSP) && insn.stack_pointer_increment() == 0 {
        return None;
    }
    let bp = if writes(RBP) { None } else { bp };
    Some((sp, bp))
}
