//! A stopped frame's variables, where they are at its pc: the parameters and the locals of
//! every lexical block around the pc (inner blocks first, so an inner `i` hides an outer
//! one), each located by evaluating its `DW_AT_location` — one expression, or the entry of
//! its location list that covers the pc (optimized code) — against the frame's registers,
//! its frame base (`DW_AT_frame_base`, usually the CFA) and memory.
//!
//! An entry value (`DW_OP_entry_value(DW_OP_regN)`, what a register held when the function
//! was entered) is the register itself while the frame is at its entry, else the value the
//! caller's call site says it passed (`DW_TAG_call_site_parameter`), evaluated in the
//! caller's frame, as gdb finds `x@entry`.
//!
//! What cannot be located is [`VarLocation::OptimizedOut`]: no location, no list entry at
//! the pc, or an expression needing what a stopped frame does not give (an entry value with
//! no call site to say it, TLS, another DIE's location).

use gimli::{AttributeValue, EvaluationResult, Location, Reader as _};

use super::functions::local_info;
use super::load::{Die, DieRef, State, Units, R};
use super::types::children;
use super::{VariableInfo, VariableKind};

/// What a frame gives a location expression.
pub trait FrameRegs {
    /// DWARF register `n` (x86-64 numbering: rax=0 rdx=1 rcx=2 rbx=3 rsi=4 rdi=5 rbp=6
    /// rsp=7 r8..r15=8..15, rip=16), when known in this frame.
    fn reg(&self, n: u16) -> Option<u64>;
    /// The frame's canonical frame address (its caller's `rsp` before the call).
    fn cfa(&self) -> Option<u64>;
    /// Reads `len` bytes of memory.
    fn read(&self, addr: u64, len: usize) -> Option<Vec<u8>>;
    /// The module's load bias (added to `DW_OP_addr` operands).
    fn bias(&self) -> u64;
    /// The frame that called this one, when it was unwound and is in the same module: an
    /// entry value (`DW_OP_entry_value`) is found at its call site.
    fn caller(&self) -> Option<&dyn FrameRegs> {
        None
    }
    /// This frame's return address (a runtime address in the caller).
    fn return_address(&self) -> Option<u64> {
        None
    }
}

/// What evaluating one frame's expressions needs besides the frame.
struct Ctx<'s> {
    state: &'s State,
    loclists: &'s gimli::LocationLists<R>,
    /// The function's DIE and its entry (link address).
    func: DieRef,
    entry: Option<u64>,
    /// The pc (link address) the frame is at.
    pc: u64,
    frame_base: Option<u64>,
    /// Entry values followed through callers so far.
    depth: u32,
}

/// Where a variable is at the frame's pc.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum VarLocation {
    /// In memory at this runtime address.
    Address(u64),
    /// Its bytes (held in registers, or computed: `DW_OP_stack_value`, pieces).
    Value(Vec<u8>),
    /// Not recoverable at this pc: no location covers it, or it needs what gsh cannot read (TLS, a register the unwinder lost).
    OptimizedOut,
}

/// A parameter or local of a frame, and where it is.
#[derive(Clone, Debug)]
pub struct FrameVariable {
    /// What DWARF says of the variable (name, type, kind).
    pub info: VariableInfo,
    /// Where its value is at the frame's pc.
    pub location: VarLocation,
}

/// Steps a location expression may take (a loop in malformed DWARF ends here).
const MAX_STEPS: u32 = 10_000;

/// Entry values followed through callers at the most.
const MAX_ENTRY_DEPTH: u32 = 4;

/// The context of the frame at link address `pc` in the function whose DIE is `func`.
fn context<'s>(
    state: &'s State,
    loclists: &'s gimli::LocationLists<R>,
    func: DieRef,
    pc: u64,
    frame: &dyn FrameRegs,
    depth: u32,
) -> Option<Ctx<'s>> {
    let units = &state.units;
    let unit = &units.get(func.unit)?.unit;
    let func_die = units.entry(func)?;
    let entry = func_die
        .attr_value(gimli::DW_AT_low_pc)
        .and_then(|v| units.dwarf.attr_address(unit, v).ok().flatten());
    let mut ctx = Ctx {
        state,
        loclists,
        func,
        entry,
        pc,
        frame_base: None,
        depth,
    };
    ctx.frame_base = func_die
        .attr_value(gimli::DW_AT_frame_base)
        .and_then(|v| match v {
            AttributeValue::Exprloc(e) => evaluate(&ctx, e, frame),
            _ => None,
        })
        .and_then(|loc| match loc {
            VarLocation::Address(a) => Some(a),
            VarLocation::Value(v) if v.len() >= 8 => {
                Some(u64::from_le_bytes(v[..8].try_into().ok()?))
            }
            _ => None,
        });
    Some(ctx)
}

/// The variables visible at link address `pc` in the function whose DIE is `func`.
pub(super) fn frame_variables(
    state: &State,
    loclists: &gimli::LocationLists<R>,
    func: DieRef,
    pc: u64,
    frame: &dyn FrameRegs,
) -> Vec<FrameVariable> {
    let units = &state.units;
    let Some(data) = units.get(func.unit) else {
        return Vec::new();
    };
    let unit = &data.unit;
    let Some(ctx) = context(state, loclists, func, pc, frame, 0) else {
        return Vec::new();
    };
    // Scopes around the pc, outermost first.
    let mut scopes = vec![func];
    let mut at = func;
    for _ in 0..64 {
        let inner = children(units, at)
            .into_iter()
            .find(|(_, d)| d.tag() == gimli::DW_TAG_lexical_block && covers(units, unit, d, pc));
        match inner {
            Some((r, _)) => {
                scopes.push(r);
                at = r;
            }
            None => break,
        }
    }
    let mut out: Vec<FrameVariable> = Vec::new();
    for scope in scopes.iter().rev() {
        for (r, die) in children(units, *scope) {
            let kind = match die.tag() {
                gimli::DW_TAG_formal_parameter if *scope == func => VariableKind::Param,
                gimli::DW_TAG_variable => VariableKind::Local,
                _ => continue,
            };
            let Some(mut info) = local_info(units, r, kind) else {
                continue;
            };
            if out.iter().any(|v| v.info.name == info.name) {
                continue;
            }
            let location = match die.attr_value(gimli::DW_AT_location) {
                Some(AttributeValue::Exprloc(e)) => evaluate(&ctx, e, frame),
                Some(
                    v @ (AttributeValue::LocationListsRef(_)
                    | AttributeValue::DebugLocListsIndex(_)),
                ) => list_entry(units, loclists, func.unit, v, pc)
                    .and_then(|e| evaluate(&ctx, e, frame)),
                _ => None,
            };
            // A static local's address is its location.
            let location = match (location, info.addr) {
                (Some(l), _) => l,
                (None, Some(a)) => {
                    info.kind = VariableKind::StaticLocal;
                    VarLocation::Address(a.0.wrapping_add(frame.bias()))
                }
                (None, None) => VarLocation::OptimizedOut,
            };
            out.push(FrameVariable { info, location });
        }
    }
    // Parameters first, in order, as `info locals`/`info args` show them.
    out.sort_by_key(|v| v.info.kind != VariableKind::Param);
    out
}

/// True when the DIE's address ranges contain `pc`.
fn covers(units: &Units, unit: &gimli::Unit<R>, die: &Die, pc: u64) -> bool {
    let Ok(mut ranges) = units.dwarf.die_ranges(unit, die) else {
        return false;
    };
    while let Ok(Some(r)) = ranges.next() {
        if r.begin <= pc && pc < r.end {
            return true;
        }
    }
    false
}

/// The expression of the location-list entry that covers `pc`.
fn list_entry(
    units: &Units,
    loclists: &gimli::LocationLists<R>,
    unit_index: usize,
    value: AttributeValue<R>,
    pc: u64,
) -> Option<gimli::Expression<R>> {
    let unit = &units.get(unit_index)?.unit;
    let offset = match value {
        AttributeValue::LocationListsRef(o) => o,
        AttributeValue::DebugLocListsIndex(i) => loclists
            .get_offset(unit.encoding(), unit.loclists_base, i)
            .ok()?,
        _ => return None,
    };
    let mut iter = loclists
        .locations(
            offset,
            unit.encoding(),
            unit.low_pc,
            &units.dwarf.debug_addr,
            unit.addr_base,
        )
        .ok()?;
    while let Ok(Some(entry)) = iter.next() {
        if entry.range.begin <= pc && pc < entry.range.end {
            return Some(entry.data);
        }
    }
    None
}

/// Evaluates a location expression; `None` when it cannot be (the variable is then
/// optimized out here).
fn evaluate(
    ctx: &Ctx<'_>,
    expr: gimli::Expression<R>,
    frame: &dyn FrameRegs,
) -> Option<VarLocation> {
    let units = &ctx.state.units;
    let frame_base = ctx.frame_base;
    let unit = &units.get(ctx.func.unit)?.unit;
    let mut eval = expr.evaluation(unit.encoding());
    eval.set_max_iterations(MAX_STEPS);
    let mut result = eval.evaluate().ok()?;
    loop {
        result = match result {
            EvaluationResult::Complete => break,
            EvaluationResult::RequiresMemory { address, size, .. } => {
                let bytes = frame.read(address, usize::from(size))?;
                let mut b = [0u8; 8];
                b[..bytes.len().min(8)].copy_from_slice(&bytes[..bytes.len().min(8)]);
                eval.resume_with_memory(gimli::Value::Generic(u64::from_le_bytes(b)))
                    .ok()?
            }
            EvaluationResult::RequiresRegister { register, .. } => {
                let v = frame.reg(register.0)?;
                eval.resume_with_register(gimli::Value::Generic(v)).ok()?
            }
            EvaluationResult::RequiresFrameBase => eval.resume_with_frame_base(frame_base?).ok()?,
            EvaluationResult::RequiresCallFrameCfa => {
                eval.resume_with_call_frame_cfa(frame.cfa()?).ok()?
            }
            EvaluationResult::RequiresRelocatedAddress(a) => eval
                .resume_with_relocated_address(a.wrapping_add(frame.bias()))
                .ok()?,
            EvaluationResult::RequiresIndexedAddress { index, relocate } => {
                let a = units
                    .dwarf
                    .debug_addr
                    .get_address(unit.encoding().address_size, unit.addr_base, index)
                    .ok()?;
                let a = if relocate {
                    a.wrapping_add(frame.bias())
                } else {
                    a
                };
                eval.resume_with_indexed_address(a).ok()?
            }
            EvaluationResult::RequiresBaseType(offset) => {
                let die = unit.entry(offset).ok()?;
                let size = super::load::attr_u64(&die, gimli::DW_AT_byte_size)?;
                let encoding = match die.attr_value(gimli::DW_AT_encoding) {
                    Some(AttributeValue::Encoding(e)) => e,
                    _ => return None,
                };
                let value_type = gimli::ValueType::from_encoding(encoding, size)?;
                eval.resume_with_base_type(value_type).ok()?
            }
            EvaluationResult::RequiresEntryValue(e) => {
                let v = entry_value(ctx, e, frame)?;
                eval.resume_with_entry_value(gimli::Value::Generic(v))
                    .ok()?
            }
            // TLS, other DIEs' locations: not known in a stopped frame.
            _ => return None,
        };
    }
    let pieces = eval.result();
    if let [piece] = &pieces[..] {
        if piece.size_in_bits.is_none() {
            return match &piece.location {
                Location::Address { address } => Some(VarLocation::Address(*address)),
                Location::Empty => None,
                other => piece_bytes(other, 8, frame).map(VarLocation::Value),
            };
        }
    }
    let mut bytes = Vec::new();
    for piece in &pieces {
        let len = piece.size_in_bits.map_or(8, |b| b.div_ceil(8)) as usize;
        bytes.extend(piece_bytes(&piece.location, len, frame)?);
    }
    Some(VarLocation::Value(bytes))
}

/// The value register `DW_OP_regN` (the whole of `expr`) had when the frame's function was
/// entered: the register itself while the frame is still at the entry, else what the caller's
/// call site says it passed (`DW_TAG_call_site_parameter`'s `DW_AT_call_value`, evaluated in
/// the caller's frame), as gdb finds `x@entry`.
fn entry_value(ctx: &Ctx<'_>, expr: gimli::Expression<R>, frame: &dyn FrameRegs) -> Option<u64> {
    let units = &ctx.state.units;
    let unit = &units.get(ctx.func.unit)?.unit;
    let mut ops = expr.operations(unit.encoding());
    let reg = match ops.next().ok()?? {
        gimli::Operation::Register { register } => register.0,
        _ => return None,
    };
    if ops.next().ok()?.is_some() {
        return None;
    }
    if ctx.entry == Some(ctx.pc) {
        return frame.reg(reg);
    }
    if ctx.depth >= MAX_ENTRY_DEPTH {
        return None;
    }
    let caller = frame.caller()?;
    let ra = frame.return_address()?.wrapping_sub(caller.bias());
    let caller_func = ctx.state.function_die(ra.wrapping_sub(1))?;
    let site = find_call_site(units, caller_func, ra, 0)?;
    let caller_ctx = context(
        ctx.state,
        ctx.loclists,
        caller_func,
        ra.wrapping_sub(1),
        caller,
        ctx.depth + 1,
    )?;
    for (_, param) in children(units, site) {
        if !matches!(
            param.tag(),
            gimli::DW_TAG_call_site_parameter | gimli::DW_TAG_GNU_call_site_parameter
        ) {
            continue;
        }
        let Some(AttributeValue::Exprloc(loc)) = param.attr_value(gimli::DW_AT_location) else {
            continue;
        };
        let names_reg = matches!(
            loc.operations(unit.encoding()).next(),
            Ok(Some(gimli::Operation::Register { register })) if register.0 == reg
        );
        if !names_reg {
            continue;
        }
        let value = param
            .attr_value(gimli::DW_AT_call_value)
            .or_else(|| param.attr_value(gimli::DW_AT_GNU_call_site_value));
        let Some(AttributeValue::Exprloc(value)) = value else {
            return None;
        };
        return match evaluate(&caller_ctx, value, caller)? {
            VarLocation::Address(v) => Some(v),
            VarLocation::Value(b) if b.len() >= 8 => {
                Some(u64::from_le_bytes(b[..8].try_into().ok()?))
            }
            _ => None,
        };
    }
    None
}

/// The call site in the function (or block) `r` whose return address is `ra` (link).
fn find_call_site(units: &Units, r: DieRef, ra: u64, depth: u32) -> Option<DieRef> {
    if depth > 16 {
        return None;
    }
    let unit = &units.get(r.unit)?.unit;
    for (child, die) in children(units, r) {
        match die.tag() {
            gimli::DW_TAG_call_site | gimli::DW_TAG_GNU_call_site => {
                let at = die
                    .attr_value(gimli::DW_AT_call_return_pc)
                    .or_else(|| die.attr_value(gimli::DW_AT_low_pc))
                    .and_then(|v| units.dwarf.attr_address(unit, v).ok().flatten());
                if at == Some(ra) {
                    return Some(child);
                }
            }
            gimli::DW_TAG_lexical_block | gimli::DW_TAG_inlined_subroutine => {
                if let Some(found) = find_call_site(units, child, ra, depth + 1) {
                    return Some(found);
                }
            }
            _ => {}
        }
    }
    None
}

/// `len` bytes of one piece.
fn piece_bytes(loc: &Location<R>, len: usize, frame: &dyn FrameRegs) -> Option<Vec<u8>> {
    let mut bytes = match loc {
        Location::Register { register } => frame.reg(register.0)?.to_le_bytes().to_vec(),
        Location::Address { address } => frame.read(*address, len)?,
        Location::Value { value } => value.to_u64(u64::MAX).ok()?.to_le_bytes().to_vec(),
        Location::Bytes { value } => value.to_slice().ok()?.to_vec(),
        Location::Empty | Location::ImplicitPointer { .. } => return None,
    };
    bytes.resize(len, 0);
    Some(bytes)
}
