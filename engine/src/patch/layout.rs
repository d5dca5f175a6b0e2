//! Laying out one site's trampoline at its final address: for each copied original
//! instruction, the point's save/snippets/restore code (if any) and then the instruction
//! relocated; a `jmp` back after each run of code that falls off its end.
//!
//! ```text
//!   trampoline:  [point code for insn 1]  relocated insn 1
//!                (an exit at a conditional tail call: j!cc over; [its code]; jmp target; over:)
//!                [point code for insn 2]  relocated insn 2   (e.g. the `ret` of an exit)
//!                …
//!                jmp <first original instruction after the run>   (only if it falls through)
//!                (a jump table's edges: per target, [its code]; jmp target   — a stub
//!                 then the private copy of the table, the stubs in place of the target's
//!                 entries; the copied load reads it instead of the original)
//! ```
//!
//! Branches between copied instructions go to the copies (to the point code before them, past
//! code that runs only on arrival from outside: [`PointCode::on_arrival`]), so
//! layout depends on its own result; it is repeated until every address is stable (two rounds
//! in practice: sizes change only when a snippet's variables move in or out of RIP-relative
//! reach).

use std::collections::HashMap;
use std::ops::Range;

use iced_x86::{Decoder, DecoderOptions, Instruction};

use super::reloc::{falls_through, jmp_rel32, relocate};
use super::tramp::{epilogue, prologue, saves_code, Needs, SavePlan, VectorSave};
use super::PatchError;
use crate::snippet::{self, Env};

/// Where a trampoline byte came from, for reporting and moving threads stopped inside one.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Origin {
    /// Save/snippet/restore code that runs before the original instruction at this address.
    Before(u64),
    /// The relocated copy of the original instruction at this address.
    Copy(u64),
    /// The jump back to this original address.
    JumpBack(u64),
}

/// One snippet to run at a point.
pub struct SnippetSrc<'e> {
    /// The snippet's text.
    pub source: &'e str,
    /// What its names mean at the point.
    pub env: &'e dyn Env,
    /// The program checked from them before, when the patcher kept it: only its code is
    /// generated for each address.
    pub checked: Option<&'e crate::snippet::ir::Program>,
    /// With `checked`: its code kept through the trampoline's layouts, generated once and
    /// moved to each address tried ([`super::movable`]); `None` generates it at each.
    pub memo: Option<&'e super::movable::Memo>,
}

/// Everything that runs before one original instruction.
pub struct PointCode<'e> {
    /// The snippets, in the order they run.
    pub snippets: Vec<SnippetSrc<'e>>,
    /// For a conditional branch: snippets that run only when it is taken (an exit at a
    /// conditional tail call), laid out as `j!cc over; save; snippets; restore; jmp target;
    /// over:` in place of the branch's copy.
    pub on_taken: Vec<SnippetSrc<'e>>,
    /// For a conditional branch: snippets that run only when it falls through (an edge
    /// trampoline's fall-through block), laid out right after the branch's copy.
    pub on_fall: Vec<SnippetSrc<'e>>,
    /// Snippets that run only when control enters the trampoline here from outside it (the
    /// caller, at a relocated function's first instruction), laid out before everything else
    /// for the instruction; branches inside the trampoline to the instruction land after them.
    pub on_arrival: Vec<SnippetSrc<'e>>,
    /// True when the original code may read the status flags after the point, so a snippet
    /// that clobbers them must save them.
    pub flags_live: bool,
    /// The same for `on_taken`: whether the flags may be read where the taken path goes.
    pub taken_flags_live: bool,
    /// The same for `on_fall`: whether the flags may be read where the branch falls through.
    /// (An edge trampoline's snippets run after the branch has read the flags, so only the
    /// code at the edge's target decides whether they must be kept.)
    pub fall_flags_live: bool,
    /// How vector state is saved if a snippet calls out.
    pub vector: VectorSave,
    /// For the instruction reading a jump table's entry: the private copy of the table it
    /// reads instead, whose entries for each edge's target lead to that edge's snippets.
    pub table: Option<TableCopy<'e>>,
    /// Assemble the save and restore code at every layout rather than take it from
    /// [`super::tramp::saves_code`]'s cache (`PatchOptions::code_per_layout`).
    pub fresh_saves: bool,
}

impl PointCode<'_> {
    /// Nothing to run yet, vector state saved by `vector` if a snippet calls out.
    pub fn empty(vector: VectorSave) -> Self {
        PointCode {
            snippets: Vec::new(),
            on_taken: Vec::new(),
            on_fall: Vec::new(),
            on_arrival: Vec::new(),
            flags_live: false,
            taken_flags_live: false,
            fall_flags_live: false,
            vector,
            table: None,
            fresh_saves: false,
        }
    }
}

/// A private copy of a jump table, read by the relocated instruction that read the original.
pub struct TableCopy<'e> {
    /// The original table's start (runtime address).
    pub table: u64,
    /// Bytes per entry: 8 (absolute addresses) or 4 (offsets from `base`).
    pub stride: u64,
    /// What 4-byte entries are relative to (runtime address); `None` for absolute entries.
    pub base: Option<u64>,
    /// The original's bytes, every entry the index can reach, as the process has them.
    pub original: Vec<u8>,
    /// The edges instrumented: the entries leading to each target lead to its snippets.
    pub cases: Vec<TableCase<'e>>,
    /// True in a function copied whole: every other entry leads to the copy of its target
    /// in the same trampoline (the original body no longer runs).
    pub whole: bool,
}

/// The snippets of the jump-table edges into one target.
pub struct TableCase<'e> {
    /// The target (runtime address).
    pub target: u64,
    /// The snippets, in the order they run.
    pub snippets: Vec<SnippetSrc<'e>>,
    /// Whether the code at the target may read the flags.
    pub flags_live: bool,
}

impl TableCopy<'_> {
    /// The runtime address entry `i` of the original leads to.
    fn target(&self, i: usize) -> u64 {
        let at = i * self.stride as usize;
        let raw = &self.original[at..at + self.stride as usize];
        match self.base {
            None => u64::from_le_bytes(raw.try_into().expect("8-byte entry")),
            Some(b) => {
                let off = i32::from_le_bytes(raw.try_into().expect("4-byte entry"));
                b.wrapping_add(off as i64 as u64)
            }
        }
    }

    /// The copy's bytes, with the entries of each case's target leading to `stubs[case]`, and
    /// when [`TableCopy::whole`], every other entry to its target's copy (`copy_of`).
    fn bytes(
        &self,
        stubs: &[u64],
        copy_of: &dyn Fn(u64) -> Option<u64>,
    ) -> Result<Vec<u8>, PatchError> {
        let mut out = self.original.clone();
        let n = self.original.len() / self.stride as usize;
        for i in 0..n {
            let t = self.target(i);
            let to = match self.cases.iter().position(|c| c.target == t) {
                Some(k) => stubs[k],
                None => match copy_of(t).filter(|_| self.whole) {
                    Some(c) => c,
                    None => continue,
                },
            };
            let at = i * self.stride as usize;
            match self.base {
                None => out[at..at + 8].copy_from_slice(&to.to_le_bytes()),
                Some(b) => {
                    let off = i32::try_from(to.wrapping_sub(b) as i64).map_err(|_| {
                        PatchError::Layout(format!(
                            "a jump table's target at {to:#x} is beyond ±2 GiB of its base {b:#x}"
                        ))
                    })?;
                    out[at..at + 4].copy_from_slice(&off.to_le_bytes());
                }
            }
        }
        Ok(out)
    }
}

/// `insn` (reading the jump table `table`'s entry) reading the copy at `copy` instead.
fn read_copy(insn: &Instruction, table: u64, copy: u64) -> Result<Instruction, PatchError> {
    let mut i = *insn;
    let disp = i
        .memory_displacement64()
        .wrapping_add(copy.wrapping_sub(table));
    // Without a base register the displacement is the address, sign-extended from 32 bits.
    if i64::from(disp as i32) as u64 != disp {
        return Err(PatchError::Layout(format!(
            "the private copy of the jump table at {table:#x} is at {copy:#x}, out of reach of \
             `{insn}`'s 32-bit displacement"
        )));
    }
    i.set_memory_displacement64(disp);
    // The long form, whatever the value: iced's size for a 32-bit displacement in 64-bit
    // addressing is 8, and the copy's place moves between layout rounds.
    i.set_memory_displ_size(8);
    Ok(i)
}

/// A trampoline ready to write.
#[derive(Clone, Debug)]
pub struct Laid {
    /// The trampoline's code, encoded for the address it was laid out at.
    pub bytes: Vec<u8>,
    /// Where each range of `bytes` (as runtime addresses) came from.
    pub map: Vec<(Range<u64>, Origin)>,
    /// The save plan of each point's code, by original runtime address.
    pub saves: Vec<(u64, SavePlan)>,
}

fn compile_err(src: &SnippetSrc, e: Vec<snippet::Diagnostic>) -> PatchError {
    PatchError::Snippet(snippet::diag::render_all(&e, src.source))
}

/// The code for the snippets `list` of one point, at `at`, where the flags are live after
/// them or not.
fn snippets_code(
    pc: &PointCode,
    list: &[SnippetSrc],
    flags_live: bool,
    at: u64,
) -> Result<(Vec<u8>, SavePlan), PatchError> {
    point_code(
        &PointCode {
            snippets: list
                .iter()
                .map(|s| SnippetSrc {
                    source: s.source,
                    env: s.env,
                    checked: s.checked,
                    memo: s.memo,
                })
                .collect(),
            on_taken: Vec::new(),
            on_fall: Vec::new(),
            on_arrival: Vec::new(),
            flags_live,
            taken_flags_live: flags_live,
            fall_flags_live: flags_live,
            vector: pc.vector,
            table: None,
            fresh_saves: pc.fresh_saves,
        },
        at,
    )
}

/// `insn` (a conditional branch) with `on_taken` snippets, at `at`: the inverted branch over
/// the snippets and a jump to the original target (or its copy, per `copy_of`).
fn taken_code(
    pc: &PointCode,
    insn: &Instruction,
    at: u64,
    copy_of: &dyn Fn(u64) -> Option<u64>,
) -> Result<Option<(Vec<u8>, SavePlan)>, PatchError> {
    use iced_x86::{Code, Encoder};
    let negated = insn.code().negate_condition_code().as_near_branch();
    if negated == Code::INVALID || negated == insn.code() {
        return Ok(None);
    }
    const JCC: u64 = 6;
    let (code, plan) = snippets_code(pc, &pc.on_taken, pc.taken_flags_live, at + JCC)?;
    let target = insn.near_branch_target();
    let to = copy_of(target).unwrap_or(target);
    let jmp_at = at + JCC + code.len() as u64;
    let jmp = jmp_rel32(jmp_at, to)?;
    let over = jmp_at + jmp.len() as u64;
    let branch = Instruction::with_branch(negated, over)?;
    let mut enc = Encoder::new(64);
    let n = enc.encode(&branch, at)?;
    if n as u64 != JCC {
        return Err(PatchError::Layout(
            "an inverted branch is not 6 bytes".into(),
        ));
    }
    let mut bytes = enc.take_buffer();
    bytes.extend(code);
    bytes.extend(jmp);
    Ok(Some((bytes, plan)))
}

/// The code for one point at `at`.
fn point_code(pc: &PointCode, at: u64) -> Result<(Vec<u8>, SavePlan), PatchError> {
    let compile = |s: &SnippetSrc, addr| {
        match (s.checked, s.memo) {
            (Some(program), Some(memo)) => super::movable::code_at(memo, program, s.source, addr),
            (Some(program), None) => snippet::generate(program, s.source, addr),
            (None, _) => snippet::compile(s.source, s.env, addr).map(|c| c.code),
        }
        .map_err(|e| compile_err(s, e))
    };
    let first: Vec<_> = pc
        .snippets
        .iter()
        .map(|s| compile(s, at))
        .collect::<Result<_, _>>()?;
    let mut needs = Needs::of(&first);
    for _ in 0..4 {
        let plan = SavePlan::new(&needs, pc.flags_live, pc.vector);
        let saves = (!pc.fresh_saves)
            .then(|| saves_code(&plan, &needs))
            .transpose()?;
        let mut bytes = match &saves {
            Some(s) => s.save.clone(),
            None => prologue(&plan, &needs)?.assemble(at)?,
        };
        let mut codes = Vec::new();
        for s in &pc.snippets {
            let c = compile(s, at + bytes.len() as u64)?;
            bytes.extend_from_slice(&c.bytes);
            codes.push(c);
        }
        let got = Needs::of(&codes);
        if got == needs {
            match &saves {
                Some(s) => bytes.extend_from_slice(&s.restore),
                None => bytes.extend(epilogue(&plan, &needs)?.assemble(at + bytes.len() as u64)?),
            }
            return Ok((bytes, plan));
        }
        needs = got;
    }
    Err(PatchError::Layout("snippet clobbers did not settle".into()))
}

/// Lays out `segments` (original code, decoded at runtime addresses) at `base`.
pub fn lay_out(
    segments: &[Vec<Instruction>],
    points: &HashMap<u64, PointCode>,
    base: u64,
) -> Result<Laid, PatchError> {
    let mut starts: HashMap<u64, u64> = HashMap::new();
    // Where each table copy (by its load's address) and its stubs were put in the last round.
    let mut copies: HashMap<u64, (u64, Vec<u64>)> = HashMap::new();
    for _ in 0..8 {
        let mut bytes = Vec::new();
        let mut map = Vec::new();
        let mut saves = Vec::new();
        let mut now: HashMap<u64, u64> = HashMap::new();
        let mut tables: Vec<(&Instruction, &TableCopy)> = Vec::new();
        for (n, seg) in segments.iter().enumerate() {
            for insn in seg {
                if let Some(pc) = points
                    .get(&insn.ip())
                    .filter(|pc| !pc.on_arrival.is_empty())
                {
                    // Entered from outside only: branches within the copy skip it.
                    let at = base + bytes.len() as u64;
                    let (code, plan) = snippets_code(pc, &pc.on_arrival, pc.flags_live, at)?;
                    map.push((at..at + code.len() as u64, Origin::Before(insn.ip())));
                    saves.push((insn.ip(), plan));
                    bytes.extend(code);
                }
                let at = base + bytes.len() as u64;
                now.insert(insn.ip(), at);
                if let Some(pc) = points.get(&insn.ip()).filter(|pc| !pc.snippets.is_empty()) {
                    let (code, plan) = point_code(pc, at)?;
                    map.push((at..at + code.len() as u64, Origin::Before(insn.ip())));
                    saves.push((insn.ip(), plan));
                    bytes.extend(code);
                }
                let at = base + bytes.len() as u64;
                let mut copied = false;
                if let Some(pc) = points.get(&insn.ip()).filter(|pc| !pc.on_taken.is_empty()) {
                    let copy_of = |t: u64| starts.get(&t).copied();
                    if let Some((code, plan)) = taken_code(pc, insn, at, &copy_of)? {
                        map.push((at..at + code.len() as u64, Origin::Copy(insn.ip())));
                        saves.push((insn.ip(), plan));
                        bytes.extend(code);
                        copied = true;
                    } else {
                        // A branch with no inverse (jrcxz, loop): the snippets run before it,
                        // where it is still to read the flags.
                        let (code, plan) = snippets_code(pc, &pc.on_taken, true, at)?;
                        map.push((at..at + code.len() as u64, Origin::Before(insn.ip())));
                        saves.push((insn.ip(), plan));
                        bytes.extend(code);
                    }
                }
                let table = points
                    .get(&insn.ip())
                    .and_then(|pc| pc.table.as_ref())
                    .filter(|t| !t.cases.is_empty() || t.whole);
                if let (Some(t), false) = (table, copied) {
                    tables.push((insn, t));
                    // The first round has no copy yet: any address gives the size.
                    let copy = copies.get(&insn.ip()).map_or(t.table, |c| c.0);
                    let at = base + bytes.len() as u64;
                    let code = relocate(&read_copy(insn, t.table, copy)?, at, &|t| {
                        starts.get(&t).copied()
                    })?;
                    map.push((at..at + code.len() as u64, Origin::Copy(insn.ip())));
                    bytes.extend(code);
                    copied = true;
                }
                if !copied {
                    let at = base + bytes.len() as u64;
                    let code = relocate(insn, at, &|t| starts.get(&t).copied())?;
                    map.push((at..at + code.len() as u64, Origin::Copy(insn.ip())));
                    bytes.extend(code);
                }
                if let Some(pc) = points.get(&insn.ip()).filter(|pc| !pc.on_fall.is_empty()) {
                    // The branch's fall-through block: what follows runs only when it is not
                    // taken.
                    let at = base + bytes.len() as u64;
                    let (code, plan) = snippets_code(pc, &pc.on_fall, pc.fall_flags_live, at)?;
                    map.push((at..at + code.len() as u64, Origin::Copy(insn.ip())));
                    saves.push((insn.ip(), plan));
                    bytes.extend(code);
                }
            }
            let Some(last) = seg.last() else { continue };
            let next = segments.get(n + 1).and_then(|s| s.first()).map(|i| i.ip());
            if falls_through(last) && next != Some(last.next_ip()) {
                let at = base + bytes.len() as u64;
                let code = jmp_rel32(at, last.next_ip())?;
                map.push((at..at + code.len() as u64, Origin::JumpBack(last.next_ip())));
                bytes.extend(code);
            }
        }
        // Each table's stubs, then the copy (8-aligned), after all the copied code.
        let mut placed: HashMap<u64, (u64, Vec<u64>)> = HashMap::new();
        for (insn, t) in tables {
            let pc = &points[&insn.ip()];
            let mut stubs = Vec::new();
            for case in &t.cases {
                let at = base + bytes.len() as u64;
                let (code, plan) = snippets_code(pc, &case.snippets, case.flags_live, at)?;
                let to = starts.get(&case.target).copied().unwrap_or(case.target);
                let jmp = jmp_rel32(at + code.len() as u64, to)?;
                let end = at + (code.len() + jmp.len()) as u64;
                // On the way to the target, but no copy of it: a thread found at the target
                // in bytes about to change must not be moved here, into the edge's snippets.
                map.push((at..end, Origin::JumpBack(case.target)));
                saves.push((insn.ip(), plan));
                bytes.extend(code);
                bytes.extend(jmp);
                stubs.push(at);
            }
            while bytes.len() % 8 != 0 {
                bytes.push(0xcc);
            }
            let copy = base + bytes.len() as u64;
            bytes.extend(t.bytes(&stubs, &|a| starts.get(&a).copied())?);
            placed.insert(insn.ip(), (copy, stubs));
        }
        if now == starts && placed == copies {
            return Ok(Laid { bytes, map, saves });
        }
        starts = now;
        copies = placed;
    }
    Err(PatchError::Layout(
        "trampoline layout did not converge".into(),
    ))
}

/// Decodes original code bytes at their runtime address.
pub fn decode_at(bytes: &[u8], ip: u64) -> Vec<Instruction> {
    Decoder::with_ip(64, bytes, ip, DecoderOptions::NONE)
        .iter()
        .collect()
}
