//! The cold parts of functions in stripped binaries. gcc moves a function's unlikely paths
//! (error handling, calls to `cold` functions) into a separate range, named `f.cold` in
//! `.symtab` and given its own FDE. Stripped, that range looks like a nameless function of its
//! own: only `.eh_frame` knows it, nothing calls it or points to it, and its "entry" is the
//! target of its parent's branches. Left so, a parent's jump into it is a tail call and the
//! fragment is instrumented as a function of its own, whose entries and exits never balance.
//!
//! A fragment is recognised here by its parent, by the jump and not by any name: every direct
//! branch to its start comes from one other function (which may itself be known only by its
//! FDE, as a `static` function only tail-called is), and either one of them is conditional (a
//! tail call is a `jmp`), or the fragment branches back into the middle of that function (a
//! called function never does), or its FDE says the frame is already set up at its start (at a
//! function's entry the CFA is `rsp + 8`): gcc's isolated null dereferences (`mov rax, [8];
//! ud2`) are reached by a `jmp` and never come back. gcc may also order a cold part's blocks
//! so that no branch from outside goes to its start, only past it (python3.11's cold part at
//! 0x440f9c, whose parent at 0x6378a0 enters it at 0x440faa and on): when every such branch
//! comes from one function, the FDE decides. Branches past a start say nothing more, and
//! count only where none goes to the start: a cold part and its parent branch into each
//! other's middles, and the linear decode that finds branches also reads some from bytes
//! out of step with the code (python3.11's 0x460f19, inside `jmp 0x5b8dac`, "jumps" into the
//! middle of `PyGILState_Ensure.cold`).
//! It is then named after its parent (`f.cold`, `sub_1130.cold`), which is how the rest of gsh
//! knows a part split off a function: the parent's CFG takes it in, and globs skip it.

use iced_x86::{Decoder, DecoderOptions, FlowControl, OpKind};

use super::{Found, Function, NameSource};
use crate::addr::LinkAddr;
use crate::demangle::demangle;
use crate::elf::Binary;

/// Bytes of a fragment decoded at the most when looking for its branches back.
const MAX_FRAGMENT: u64 = 1 << 16;

/// What the branches into one candidate said.
#[derive(Clone, Copy)]
enum Seen {
    /// No branch to its start yet.
    Nothing,
    /// Every branch to its start came from the function at this index; `bool`: one was
    /// conditional.
    From(usize, bool),
    /// Branches came from several functions (or from nowhere known): not a fragment.
    Many,
}

/// True when `f` could be a fragment: nothing but its FDE knows it.
fn candidate(f: &Function) -> bool {
    f.name_source == NameSource::Synthetic && f.found == Found::EH_FRAME
}

/// Names the cold parts among `functions` (sorted by address) after their parents.
/// `branches` are the code's direct `jmp`s and `jcc`s as `(address, target, conditional)`.
pub fn name_fragments(
    binary: &Binary,
    functions: &mut [Function],
    branches: impl Iterator<Item = (u64, u64, bool)>,
) {
    let index: foldhash::HashMap<u64, usize> = functions
        .iter()
        .enumerate()
        .filter(|(_, f)| candidate(f))
        .map(|(i, f)| (f.addr.0, i))
        .collect();
    if index.is_empty() {
        return;
    }
    // The candidates in address order, `(start, end, highest end up to it)`: most branches
    // land in no candidate, or in the one they are in, and one search of this short list
    // tells so (a search of every function per branch made this step nine times slower on
    // cc1).
    let mut spans: Vec<(u64, u64, u64)> = Vec::with_capacity(index.len());
    for f in functions.iter().filter(|f| candidate(f)) {
        let reach = spans.last().map_or(0, |s| s.2).max(f.end().0);
        spans.push((f.addr.0, f.end().0, reach));
    }
    let mut seen = vec![Seen::Nothing; functions.len()];
    // The same for branches past a candidate's start (`bool` unused).
    let mut past = vec![Seen::Nothing; functions.len()];
    for (from, to, conditional) in branches {
        let (seen, i) = match index.get(&to) {
            Some(&i) => (&mut seen, i),
            None => {
                let k = spans.partition_point(|s| s.0 <= to);
                let Some(&(start, end, reach)) = k.checked_sub(1).map(|k| &spans[k]) else {
                    continue;
                };
                if to >= reach || (to < end && (start..end).contains(&from)) {
                    // In no candidate, or a branch within the one it is in.
                    continue;
                }
                match containing(functions, to) {
                    Some(i) if candidate(&functions[i]) => (&mut past, i),
                    _ => continue,
                }
            }
        };
        let parent = containing(functions, from);
        if parent == Some(i) {
            // The fragment's own loop back to its start.
            continue;
        }
        seen[i] = match (seen[i], parent) {
            (Seen::Nothing, Some(p)) => Seen::From(p, conditional),
            (Seen::From(p, c), Some(q)) if p == q => Seen::From(p, c || conditional),
            _ => Seen::Many,
        };
    }
    // Fragments by their parent, in address order; those only a `jmp` to their start, or only
    // branches past it, enter are decided after, by how they end or by their FDE, read once
    // for them all.
    let mut found = Vec::new();
    let mut unsure = Vec::new();
    for i in 0..functions.len() {
        match (seen[i], past[i]) {
            (Seen::From(p, conditional), _) => {
                if conditional || branches_into(binary, &functions[i], &functions[p]) {
                    found.push((i, p));
                } else {
                    unsure.push((i, p));
                }
            }
            (Seen::Nothing, Seen::From(p, _)) => unsure.push((i, p)),
            _ => {}
        }
    }
    if !unsure.is_empty() {
        let starts = unsure.iter().map(|&(i, _)| functions[i].addr.0).collect();
        let framed = super::ehframe::starts_inside_a_frame(binary, &starts);
        found.extend(
            unsure
                .into_iter()
                .filter(|&(i, _)| framed.contains(&functions[i].addr.0)),
        );
        found.sort_unstable();
    }
    // A parent only its FDE knows may itself be a fragment (a chain nothing names: leave it),
    // or a function of its own that another only tail-calls (gcc's `f.part.0`, entered by
    // `jmp` from `f`), which its fragment's jump attaches it to like any other.
    let fragments: foldhash::HashSet<usize> = found.iter().map(|&(i, _)| i).collect();
    found.retain(|&(_, p)| !fragments.contains(&p));
    let mut parts = foldhash::HashMap::<usize, u32>::default();
    for (i, p) in found {
        let n = parts.entry(p).or_default();
        let name = match *n {
            0 => format!("{}.cold", functions[p].name),
            k => format!("{}.cold.{k}", functions[p].name),
        };
        *n += 1;
        let f = &mut functions[i];
        f.demangled = demangle(&name);
        f.name = name;
        f.name_source = NameSource::Inferred;
    }
}

/// The index of the function whose range holds `addr`.
fn containing(functions: &[Function], addr: u64) -> Option<usize> {
    let i = functions.partition_point(|f| f.addr.0 <= addr);
    (i.saturating_sub(8)..i)
        .rev()
        .find(|&k| functions[k].contains(LinkAddr(addr)))
}

/// True when `fragment` has a direct branch into `parent` past its entry.
fn branches_into(binary: &Binary, fragment: &Function, parent: &Function) -> bool {
    let Some(bytes) = binary.bytes_at(fragment.addr, fragment.size.min(MAX_FRAGMENT)) else {
        return false;
    };
    let mut decoder = Decoder::with_ip(64, bytes, fragment.addr.0, DecoderOptions::NONE);
    decoder.iter().any(|insn| {
        insn.op0_kind() == OpKind::NearBranch64
            && matches!(
                insn.flow_control(),
                FlowControl::UnconditionalBranch | FlowControl::ConditionalBranch
            )
            && {
                let t = LinkAddr(insn.near_branch64());
                parent.contains(t) && t != parent.addr
            }
    })
}
