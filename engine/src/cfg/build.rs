//! Building one function's CFG: recursive traversal from the entry, then block formation.

use std::collections::BTreeMap;

use iced_x86::{Decoder, DecoderOptions, FlowControl, Instruction, Mnemonic, OpKind};

use super::landing::LandingPads;
use super::{jumptable, Block, BlockId, CallSite, Cfg, Edge, EdgeKind, Exit, JumpTable};
use crate::addr::LinkAddr;
use crate::elf::Binary;
use crate::symbols::{Function, FunctionTable};

/// Instructions decoded for one function at the most; past it the traversal stops, so that a
/// misidentified function cannot make analysis run away.
const MAX_INSNS: usize = 200_000;

/// The decoded instructions of a function, by address. A hash map with a fast hasher: for a
/// module the size of cc1 these lookups, one or more per instruction, were most of the
/// analysis's time in a `BTreeMap`.
pub(super) type Insns = foldhash::HashMap<u64, Instruction>;

/// What a CFG build needs besides the function itself.
pub struct Context<'a> {
    pub binary: &'a Binary,
    pub functions: &'a FunctionTable,
    /// True when a call to this address never returns.
    pub is_noreturn: &'a (dyn Fn(LinkAddr) -> bool + Sync),
    /// The executable sections' `(start, end)` ranges, sorted: see [`code_ranges`].
    pub code: &'a [(u64, u64)],
    /// Where calls that throw land.
    pub landing_pads: &'a LandingPads,
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
    let mut b = Builder {
        ctx,
        func,
        // Sized for the function's own bytes (about 4 per instruction, a block every 16 or
        // so), so the maps rarely grow: rehashing showed in profiles.
        insns: Insns::with_capacity_and_hasher(capacity(func.size / 4), Default::default()),
        starts: foldhash::HashSet::with_capacity_and_hasher(
            capacity(func.size / 16),
            Default::default(),
        ),
        work: vec![func.addr.0],
        tables: BTreeMap::new(),
        unresolved: Vec::new(),
    };
    b.starts.insert(func.addr.0);
    b.explore();
    b.finish()
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
    unresolved: Vec<LinkAddr>,
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
        // off by gcc, or code no function claims, is still ours.
        match self.ctx.functions.containing(LinkAddr(target)) {
            None => true,
            Some(other) => {
                other.addr.0 != target && other.name.contains(".cold")
                    || other.addr.0 == target && other.name.ends_with(".cold")
            }
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

    fn explore(&mut self) {
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
                match flow {
                    Flow::Next if !self.falls_out(addr, next) => continue,
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
        match jumptable::resolve(self.ctx.binary, self.func, &self.insns, insn) {
            Some(table) => {
                for &t in &table.targets {
                    if self.is_local(t.0) {
                        self.push_start(t.0);
                    }
                }
                self.tables.insert(insn.ip(), table);
            }
            None => self.unresolved.push(LinkAddr(insn.ip())),
        }
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
        for (i, (last, flow)) in last_flow.into_iter().enumerate() {
            let from = BlockId(i as u32);
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
                            if self.is_local(t.0) {
                                edge(t.0, EdgeKind::JumpTable, block);
                            }
                        }
                    }
                    None => block.exit = Some(Exit::Indirect),
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
        }
        // Duplicate targets in a jump table give one edge per distinct target.
        edges.sort_by_key(|e| (e.from, e.to, e.kind as u8));
        edges.dedup();
        Cfg {
            entry: self.func.addr,
            blocks,
            edges,
            jump_tables: self.tables.into_values().collect(),
            unresolved: self.unresolved,
        }
    }
}
