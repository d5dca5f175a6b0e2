//! A stopped frame's variables, where they are at its pc: the parameters and the locals of
//! every lexical block around the pc (inner blocks first, so an inner `i` hides an outer
//! one), each located by evaluating its `DW_AT_location` — one expression, or the entry of
//! its location list that covers the pc (optimized code) — against the frame's registers,
//! its frame base (`DW_AT_frame_base`, usually the CFA) and memory.
//!
//! What cannot be located is [`VarLocation::OptimizedOut`]: no location, no list entry at
//! the pc, or an expression needing what a stopped frame does not give (`DW_OP_entry_value`
//! of a register the callee has changed, TLS, another DIE's location).

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
}

/// Where a variable is at the frame's pc.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum VarLocation {
    /// In memory at this runtime address.
    Address(u64),
    /// Its bytes (held in registers, or computed: `DW_OP_stack_value`, pieces).
    Value(Vec<u8>),
    OptimizedOut,
}

/// A parameter or local of a frame, and where it is.
#[derive(Clone, Debug)]
pub struct FrameVariable {
    pub info: VariableInfo,
    pub location: VarLocation,
}

/// Steps a location expression may take (a loop in malformed DWARF ends here).
const MAX_STEPS: u32 = 10_000;

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
    let Some(func_die) = units.entry(func) else {
        return Vec::new();
    };
    let frame_base = func_die
        .attr_value(gimli::DW_AT_frame_base)
        .and_then(|v| match v {
            AttributeValue::Exprloc(e) => evaluate(units, func.unit, e, None, frame),
            _ => None,
        })
        .and_then(|loc| match loc {
            VarLocation::Address(a) => Some(a),
            VarLocation::Value(v) if v.len() >= 8 => {
                Some(u64::from_le_bytes(v[..8].try_into().ok()?))
            }
            _ => None,
        });
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
                Some(AttributeValue::Exprloc(e)) => {
                    evaluate(units, func.unit, e, frame_base, frame)
                }
                Some(
                    v @ (AttributeValue::LocationListsRef(_)
                    | AttributeValue::DebugLocListsIndex(_)),
                ) => list_entry(units, loclists, func.unit, v, pc)
                    .and_then(|e| evaluate(units, func.unit, e, frame_base, frame)),
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
    units: &Units,
    unit_index: usize,
    expr: gimli::Expression<R>,
    frame_base: Option<u64>,
    frame: &dyn FrameRegs,
) -> Option<VarLocation> {
    let unit = &units.get(unit_index)?.unit;
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
            // Entry values, TLS, other DIEs' locations: not known in a stopped frame.
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
