//! The patcher: inserts snippets at points of a module, read through a [`CodeView`], by writing
//! through an [`AddressSpace`] (Dyninst's PatchAPI layer). For each group of points it plans a *site* ([`plan`]): where a jump into a
//! trampoline is written, which original instructions the trampoline copies, and which tactic
//! made room for the jump. It then lays out the trampoline ([`layout`], [`tramp`]), allocates
//! it near the code, writes it, and only then writes the jump.
//!
//! ```text
//!   original code                          trampoline (within ±2 GiB)
//!   f:   jmp tramp ───────────────────────► lea rsp,[rsp-128]; save what the snippets clobber
//!        int3 (rest of displaced bytes)     [fill SavedRegs, rbx = block] [align, xsave]
//!   f+k: …  ◄──────────────┐                snippet 1; snippet 2 …   (compiled for here)
//!                          │                restore; write back $return/$N
//!                          │                displaced instructions, relocated
//!                          └─────────────── jmp f+k
//!
//!   pun:  f: jmp rel8 pad ──► pad (int3/nop padding): jmp rel32 tramp
//!   evict: f: jmp rel8 g+5 ──► g: jmp rel32 (g's instructions, moved into f's trampoline)
//!                              g+5: jmp rel32 tramp
//! ```
//!
//! Several snippets at one point run in insertion order inside one save/restore. Every site
//! keeps the original bytes it overwrote ([`Patcher::remove_all`] puts them back) and a map
//! from trampoline addresses back to original ones ([`Patcher::origin`]), so a thread stopped
//! inside a trampoline can be reported and moved.
//!
//! Addresses: planning is in link addresses; everything written is at runtime addresses (link
//! plus the module's bias, which is 0 for the static rewriter). See [`crate::space`].
//!
//! Traps (`int3`, the last resort) need a SIGTRAP handler that sends each trap site to its
//! trampoline; [`Patcher::traps`] lists the pairs and [`trap`] assembles the handler that the
//! static rewriter writes into the output (`instrument::save`). Live processes refuse traps.
//!
//! Future work: a recursion guard (a snippet calling a function that is itself instrumented
//! recurses forever today; Dyninst's `setTrampRecursive`, Frida's skip-while-in-handler).
//! Points on CFG edges are placed by [`edge`] (at the target, at the source's last
//! instruction, or through an edge trampoline around a conditional branch).

#![warn(missing_docs)]

mod applied;
pub mod edge;
pub mod interpose;
pub mod layout;
mod movable;
pub mod plan;
pub mod reloc;
pub mod tramp;
pub mod trap;

#[cfg(test)]
mod tests;

use std::collections::{BTreeMap, HashMap, HashSet};
use std::ops::Range;
use std::sync::{Arc, OnceLock};

use crate::addr::{LinkAddr, RuntimeAddr};
use crate::code::CodeView;
use crate::point::Point;
use crate::snippet::cache::CheckCache;
use crate::snippet::Env;
use crate::symbols::FuncId;

pub use crate::space::{within_rel32, AddressSpace, AllocKind, SpaceError};
pub use layout::Origin;
pub use plan::{Site, Tactic};
pub use tramp::VectorSave;

use applied::{Applied, AppliedSites};
use layout::{PointCode, SnippetSrc};
use plan::{Claimed, Except, Planner};

/// Why instrumentation could not be inserted.
#[derive(Debug, thiserror::Error)]
pub enum PatchError {
    /// A snippet did not compile for its trampoline.
    #[error("snippet does not compile:\n{0}")]
    Snippet(String),
    /// Only a trap could reach the point, and traps were not allowed.
    #[error("{point} at {addr} needs a trap (int3), and no SIGTRAP handler can be installed here: {why}")]
    NeedsTrap {
        /// The point, as users write it (`main entry`).
        point: String,
        /// Its address.
        addr: LinkAddr,
        /// Why no jump fits there.
        why: String,
    },
    /// An original instruction cannot be moved into a trampoline.
    #[error(transparent)]
    Reloc(#[from] reloc::RelocError),
    /// The address space refused.
    #[error(transparent)]
    Space(#[from] SpaceError),
    /// Assembling trampoline code failed.
    #[error("cannot assemble trampoline code: {0}")]
    Asm(#[from] iced_x86::IcedError),
    /// The trampoline could not be laid out.
    #[error("trampoline layout failed: {0}")]
    Layout(String),
    /// The code in the address space is not the code in the file.
    #[error("the code at {0} differs from the file; was it patched by something else?")]
    Mismatch(RuntimeAddr),
    /// The point is not in the function's CFG.
    #[error("no instruction at {0} in the function's CFG")]
    NoInstruction(LinkAddr),
}

/// Choices the user can make.
#[derive(Clone, Copy, Debug, Default)]
pub struct PatchOptions {
    /// Accept `int3` traps as a last resort; whoever sets this installs the SIGTRAP handler
    /// that sends [`Patcher::traps`] to their trampolines.
    pub allow_traps: bool,
    /// Save the flags whenever a snippet clobbers them, even where the ABI or a scan of the
    /// following instructions says they are dead.
    pub always_save_flags: bool,
    /// How vector state is saved around snippets that call out.
    pub vector: VectorSave,
    /// Parse and check every snippet each time a trampoline is laid out, as gsh did before
    /// it kept checked snippets ([`crate::snippet::cache`]); a benchmark compares.
    pub recheck_snippets: bool,
    /// Generate each checked snippet's code afresh at every address a trampoline's layout
    /// tries, as gsh did before it moved the code generated once ([`movable`]); a benchmark
    /// compares.
    pub generate_at_each_address: bool,
    /// Generate each snippet's code once per trampoline layout and assemble each point's save
    /// and restore code at every layout, as gsh did before it kept both across layouts
    /// (`Patcher::memos`, [`tramp::saves_code`]); a benchmark compares.
    pub code_per_layout: bool,
    /// Nothing is laid out again after the insert (a file written once): each site's checked
    /// snippets and their generated code are dropped as soon as it is written, and made again
    /// should a later site absorb it (a relocated function). `coverage '*'` of cc1 kept 1.35
    /// million of each until the file was written.
    pub one_shot: bool,
}

/// One snippet to insert at one point. The patcher keeps it, to lay the trampoline out again
/// when more snippets come to the same site later.
#[derive(Clone)]
pub struct Request {
    /// Who asked (the shell's instrumentation id): [`Patcher::remove`] takes snippets out by it.
    pub tag: u32,
    /// Where the snippet runs.
    pub point: Point,
    /// The snippet's text, shared by every point it goes to (a whole-program `coverage '*'`
    /// makes over a million requests, cloned as they are planned and written).
    pub source: Arc<str>,
    /// What the snippet's names mean at the point, for compiling it into each trampoline.
    pub env: Arc<dyn Env + Send + Sync>,
}

/// What happened to one point.
#[derive(Clone, Debug, serde::Serialize)]
pub struct PointReport {
    /// The point.
    pub point: Point,
    /// How control reaches its trampoline.
    pub tactic: Tactic,
    /// Where the jump (or trap) into the trampoline is written.
    pub patch_at: LinkAddr,
    /// Where the trampoline runs.
    pub trampoline: RuntimeAddr,
    /// What its save area holds (`flags rcx r11 xsave`, or `nothing`).
    pub saves: String,
    /// Why the planner chose this tactic.
    pub why: String,
}

/// A site as written.
/// Inserts instrumentation into one module and remembers what it did. A clone is a snapshot
/// of its records, to put back when the code could not be changed as they say.
#[derive(Clone)]
pub struct Patcher {
    bias: u64,
    options: PatchOptions,
    claimed: Claimed,
    applied: AppliedSites,
    map: BTreeMap<u64, (u64, Origin)>,
    /// What each point's save area holds, by runtime address.
    saves: HashMap<u64, String>,
    /// What planning reads of the module as a whole, computed once and shared by the
    /// patcher's clones: a snapshot taken before each change copied them, maps over every
    /// function and edge of the module (python3: 381,575 edges).
    facts: Arc<ModuleFacts>,
    /// The written sites' snippets, checked once: laying a trampoline out again only
    /// generates their code for its new address.
    checks: CheckCache,
    /// Each trampoline in use (relocated code, or a site's current one), by its start.
    tramps: HashMap<u64, Tramp>,
    /// How many times a trampoline was laid out ([`Patcher::layouts`]).
    layouts: usize,
    /// Trampolines replaced or taken out since the last [`Patcher::take_retired`]: no site
    /// enters them once the change is written, but a thread may still be inside one.
    retired: Vec<Range<u64>>,
    /// Each checked program's code as first generated, to move to every address any later
    /// layout tries (a relay lays out every shared site again): keyed by the program's
    /// identity, holding the program so that its address is not reused while the entry
    /// lives; pruned with [`Patcher::checks`].
    memos: HashMap<usize, (Arc<crate::snippet::ir::Program>, Arc<movable::Memo>)>,
}

/// A trampoline in use ([`Patcher::tramps`]).
#[derive(Clone, Copy, Debug)]
struct Tramp {
    /// The end of its allocation.
    end: u64,
    /// How many bytes its code took.
    laid: u64,
}

/// Facts about a module's code that planning reads, each computed on first use. They
/// depend only on the file's code and CFGs, which never change, so they are never
/// invalidated. Computed on first use they are a pass over the whole module (every CFG, the
/// gaps between blocks decoded), which a caller may run beforehand on a thread of its own
/// ([`Patcher::facts`], [`ModuleFacts::compute`]).
#[derive(Default)]
pub struct ModuleFacts {
    /// The module's [`plan::foreign_targets`].
    foreign: OnceLock<HashSet<u64>>,
    /// The module's [`plan::prefix_ends`].
    prefix_end: OnceLock<Vec<u64>>,
    /// The module's [`plan::code_bytes`].
    code: OnceLock<Claimed>,
    /// The module's [`plan::ways_in`], computed when a function is first copied whole.
    ways_in: OnceLock<plan::WaysIn>,
    /// Whether the status flags are live at each place a layout asked ([`plan::flags_live`]),
    /// found the first time: every layout of a site asked again for each of its points, and
    /// a loop timer in python3's interpreter lays out again the 228 sites it shares with
    /// another timer (183 points in one), each ask a walk of the function's CFG. Those walks
    /// were 13 to 15% of gsh's CPU time during `consult` on python3.
    flags: std::sync::Mutex<HashMap<FlagsAt, bool>>,
    /// How many of those walks were made (what the tests count).
    flag_walks: std::sync::atomic::AtomicUsize,
}

/// Where [`ModuleFacts::flags_live`] was asked: a function's instruction, or the start of one
/// of its blocks (an edge's target).
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
enum FlagsAt {
    Insn(FuncId, u64),
    Block(FuncId, crate::cfg::BlockId),
}

impl ModuleFacts {
    /// Computes the facts every plan reads (not [`plan::ways_in`], which only a function
    /// copied whole needs): python3's took 10 to 16 s of a debug gsh's tracer thread under
    /// a load of 20, which its first probe waited for, the whole search with it.
    pub fn compute(&self, view: &dyn CodeView) {
        self.code.get_or_init(|| plan::code_bytes(view));
        self.foreign.get_or_init(|| plan::foreign_targets(view));
        self.prefix_end
            .get_or_init(|| plan::prefix_ends(view.functions()));
    }

    /// True once [`ModuleFacts::compute`] is done (or plans have computed them all).
    pub fn ready(&self) -> bool {
        self.code.get().is_some() && self.foreign.get().is_some() && self.prefix_end.get().is_some()
    }

    /// [`plan::flags_live`] at `at` in `func`: the status flags may be read before they are
    /// written again. Found once per place; the code never changes.
    fn flags_live(&self, view: &dyn CodeView, func: FuncId, at: FlagsAt) -> bool {
        let known = |m: &HashMap<FlagsAt, bool>| m.get(&at).copied();
        if let Some(live) = known(&self.flags.lock().unwrap_or_else(|e| e.into_inner())) {
            return live;
        }
        let cfg = view.cfg(func);
        let addr = match at {
            FlagsAt::Insn(_, a) => LinkAddr(a),
            FlagsAt::Block(_, b) => cfg.block(b).start,
        };
        self.flag_walks
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let live = plan::flags_live(view, cfg, addr);
        self.flags
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(at, live);
        live
    }

    /// How many times [`ModuleFacts::flags_live`] walked a CFG.
    pub fn flag_walks(&self) -> usize {
        self.flag_walks.load(std::sync::atomic::Ordering::Relaxed)
    }
}

/// What [`Patcher::plan`] decided.
#[derive(Clone, Debug, Default)]
pub struct Planned {
    /// The sites, each with the points it serves.
    pub sites: Vec<Site>,
    /// Points no site may take, and why (doubtful code, or bytes another site owns).
    pub refused: Vec<(LinkAddr, String)>,
}

impl Planned {
    /// Points without a jump: refused, or left to a trap.
    fn unjumped(&self) -> usize {
        let traps = self.sites.iter().filter(|s| s.tactic == Tactic::Trap);
        self.refused.len() + traps.map(|s| s.points.len()).sum::<usize>()
    }
}

/// What [`Patcher::insert`] did.
#[derive(Clone, Debug, Default)]
pub struct Inserted {
    /// The points inserted at, one report each.
    pub points: Vec<PointReport>,
    /// Points left alone, and why; everything else was inserted.
    pub skipped: Vec<(Point, String)>,
}

/// For the sites planned so far in one [`Patcher::plan`] call, the first one that copies the
/// instruction starting at each address into its trampoline. Built on the first question and
/// kept up to date as sites are added: a scan of every site per question made a
/// whole-program plan quadratic (cc1's coverage, 1.35 million sites).
#[derive(Default)]
struct CopiedBy {
    /// Instruction address → index of the first site copying it.
    first: HashMap<u64, usize>,
    /// How many sites (a prefix of the list) are in `first`.
    indexed: usize,
    /// The indexed sites' entries and segments: a site written already is listed once for
    /// each of the points it holds, and the first of those copies answers for all.
    seen: HashSet<(LinkAddr, Vec<Range<LinkAddr>>)>,
}

impl CopiedBy {
    /// The index of the first of `sites` that copies an instruction starting at `addr`.
    fn find(&mut self, view: &dyn CodeView, sites: &[Site], addr: LinkAddr) -> Option<usize> {
        for (i, site) in sites.iter().enumerate().skip(self.indexed) {
            if !self.seen.insert((site.patch_at, site.segments.clone())) {
                continue;
            }
            for r in &site.segments {
                for insn in plan::decode(view, r.start, r.end.0 - r.start.0) {
                    self.first.entry(insn.ip()).or_insert(i);
                }
            }
        }
        self.indexed = sites.len();
        self.first.get(&addr.0).copied()
    }
}

impl Patcher {
    /// A patcher for a module whose runtime addresses are its link addresses plus `bias`.
    pub fn new(bias: u64, options: PatchOptions) -> Patcher {
        Patcher {
            bias,
            options,
            claimed: Claimed::default(),
            applied: AppliedSites::default(),
            map: BTreeMap::new(),
            saves: HashMap::new(),
            facts: Arc::default(),
            checks: CheckCache::default(),
            tramps: HashMap::new(),
            layouts: 0,
            retired: Vec::new(),
            memos: HashMap::new(),
        }
    }

    /// What planning reads of the module as a whole, shared with this patcher: computed
    /// ([`ModuleFacts::compute`]) on another thread, they are not computed again by the
    /// first plan, which runs where the process waits on it.
    pub fn facts(&self) -> Arc<ModuleFacts> {
        self.facts.clone()
    }

    /// Records that the trampoline at `tramp` is no longer entered by any site.
    fn retire(&mut self, tramp: RuntimeAddr) {
        if let Some(Tramp { end, .. }) = self.tramps.remove(&tramp.0) {
            self.retired.push(tramp.0..end);
        }
    }

    /// The trampolines retired since the last call (see [`Patcher::retired`]): once the
    /// change that retired them is written, no code enters them. The caller frees each once
    /// no thread can be inside it, and tells the patcher with [`Patcher::forget_trampoline`].
    pub fn take_retired(&mut self) -> Vec<Range<u64>> {
        std::mem::take(&mut self.retired)
    }

    /// Forgets the address map of a retired trampoline whose memory is being reused.
    pub fn forget_trampoline(&mut self, r: &Range<u64>) {
        let keys: Vec<u64> = self.map.range(r.clone()).map(|(k, _)| *k).collect();
        for k in keys {
            self.map.remove(&k);
        }
    }

    /// How many times a trampoline was laid out (each layout generates the code of its
    /// snippets and encodes its relocated instructions).
    pub fn layouts(&self) -> usize {
        self.layouts
    }

    /// How many address-map records the patcher keeps (each trampoline in use or retired
    /// and not yet forgotten holds some).
    pub fn map_records(&self) -> usize {
        self.map.len()
    }

    fn rt(&self, a: LinkAddr) -> RuntimeAddr {
        a.to_runtime(self.bias)
    }

    /// The applied site whose copied code holds the instruction at `addr`.
    fn applied_at(&self, addr: LinkAddr) -> Option<usize> {
        self.applied.at(addr)
    }

    /// The sites the points would get, without writing anything (for `show points`). Points
    /// inside a site written already are reported with that site, and so are points inside
    /// a site this call plans for another function, when their instruction is one the site
    /// copies; points no site can take are refused, with why.
    pub fn plan(&self, view: &dyn CodeView, points: &[Point]) -> Planned {
        let (planned, crowded) = self.plan_ordered(view, points, &HashSet::new());
        if crowded.is_empty() {
            return planned;
        }
        // Some function got traps or refusals because a neighbour's pun or eviction, planned
        // before it in this call, took bytes of it that relocating it whole needed: plan those
        // first, and keep whichever plan leaves fewer points without a jump.
        let (again, _) = self.plan_ordered(view, points, &crowded);
        if again.unjumped() < planned.unjumped() {
            again
        } else {
            planned
        }
    }

    /// [`Patcher::plan`] with the functions of `first` planned before the others (after those
    /// copied whole); also returns the functions that got a trap or a refusal while sites
    /// planned before them in this call held bytes of their code.
    fn plan_ordered(
        &self,
        view: &dyn CodeView,
        points: &[Point],
        first: &HashSet<FuncId>,
    ) -> (Planned, HashSet<FuncId>) {
        let mut crowded: HashSet<FuncId> = HashSet::new();
        let mut fresh = plan::Claimed::default();
        let mut by_func: BTreeMap<FuncId, Vec<LinkAddr>> = BTreeMap::new();
        let mut out: Vec<Site> = Vec::new();
        let mut refused: Vec<(LinkAddr, String)> = Vec::new();
        // Functions with a point that runs only on arrival from the caller at a looping
        // entry: only a copy of the whole function keeps the back edges out of it.
        let mut whole: HashSet<FuncId> = HashSet::new();
        let mut on_arrival: HashSet<LinkAddr> = HashSet::new();
        for p in points {
            if edge::from_caller(view, p) {
                whole.insert(p.func);
                on_arrival.insert(p.addr);
            }
        }
        // Written sites that take points here, as they are: their claims stay outside
        // whichever function is relocated below.
        let mut reused: HashSet<usize> = HashSet::new();
        for p in points {
            match self.applied_at(p.addr).filter(|&i| {
                !whole.contains(&p.func) || self.applied[i].site.tactic == Tactic::RelocateFunction
            }) {
                Some(i) => {
                    reused.insert(i);
                    let mut s = self.applied[i].site.clone();
                    s.points = vec![p.addr];
                    out.push(s);
                }
                None => by_func.entry(p.func).or_default().push(p.addr),
            }
        }
        let mut claimed = self.claimed.clone();
        let mut wanted: Vec<u64> = points.iter().map(|p| p.addr.0).collect();
        wanted.sort_unstable();
        wanted.dedup();
        let code = self.facts.code.get_or_init(|| plan::code_bytes(view));
        // Functions copied whole first: a neighbour's pun or eviction planned earlier in this
        // call could take bytes of theirs, and a copy needs all of them.
        let mut by_func: Vec<(FuncId, Vec<LinkAddr>)> = by_func.into_iter().collect();
        by_func.sort_by_key(|(f, _)| (!whole.contains(f), !first.contains(f)));
        let mut copied = CopiedBy::default();
        for (f, mut addrs) in by_func {
            addrs.sort();
            addrs.dedup();
            // A point another function's new site copies (functions sharing code, or a
            // block the CFG got wrong) runs its snippets in that site's trampoline.
            // (The claims answer first, then an index of the sites' copied instructions.)
            addrs.retain(|&a| {
                if !claimed.overlaps(&(a.0..a.0 + 1)) {
                    return true;
                }
                let Some(i) = copied.find(view, &out, a) else {
                    return true;
                };
                let s = &mut out[i];
                if !s.points.contains(&a) {
                    s.points.push(a);
                }
                false
            });
            if addrs.is_empty() {
                continue;
            }
            let func = view.function(f);
            let planner = Planner {
                view,
                func,
                cfg: view.cfg(f),
                foreign: self
                    .facts
                    .foreign
                    .get_or_init(|| plan::foreign_targets(view)),
                prefix_end: self
                    .facts
                    .prefix_end
                    .get_or_init(|| plan::prefix_ends(view.functions())),
                wanted: &wanted,
                code,
                ways_in: &self.facts.ways_in,
                pads: std::cell::OnceCell::new(),
                table_targets: std::cell::OnceCell::new(),
            };
            // A site holding points of another function too (in instructions it evicted, or
            // in code two functions share) is not its own: absorbed into its copy, those
            // points would no longer run.
            let own_sites: Vec<usize> = self
                .applied
                .of_func(f)
                .iter()
                .copied()
                .filter(|&i| self.applied[i].holds_only(f))
                .collect();
            let inside: Vec<LinkAddr> = own_sites
                .iter()
                .flat_map(|&i| self.applied[i].site.points.iter().copied())
                .collect();
            // Relocating the function would absorb its own sites, so they do not count
            // against it; sites planned in this call for other functions do (an eviction
            // may have claimed bytes of this function).
            let mut own = Claimed::default();
            for &i in own_sites.iter().filter(|i| !reused.contains(i)) {
                own.add(&self.applied[i].site);
            }
            let outside = &Except {
                all: &claimed,
                own: &own,
            };
            let (sites, no) = if whole.contains(&f) {
                planner.plan_whole(&addrs, &on_arrival, &claimed, outside, &inside)
            } else {
                planner.plan(&addrs, &claimed, outside, &inside)
            };
            let trapped = sites.iter().any(|s| s.tactic == Tactic::Trap);
            if (trapped || !no.is_empty()) && !first.contains(&f) {
                let blocks = &view.cfg(f).blocks;
                let lo = blocks.iter().map(|b| b.start.0).min().unwrap_or(0);
                let hi = blocks.iter().map(|b| b.end.0).max().unwrap_or(0);
                if fresh.overlaps(&(lo..hi)) {
                    crowded.insert(f);
                }
            }
            refused.extend(no);
            for s in sites {
                claimed.add(&s);
                fresh.add(&s);
                out.push(s);
            }
        }
        let planned = Planned {
            sites: out,
            refused,
        };
        (planned, crowded)
    }

    /// Inserts every request (several at one point run in the order given, after any inserted
    /// there before). Points the planner refuses ([`Planned::refused`]) are left alone and
    /// listed in [`Inserted::skipped`]; nothing is written unless every other point can be
    /// placed.
    pub fn insert(
        &mut self,
        view: &dyn CodeView,
        space: &mut dyn AddressSpace,
        requests: &[Request],
    ) -> Result<Inserted, PatchError> {
        // Points on edges move to where their snippets run ([`edge`]), or are skipped.
        let mut skipped: Vec<(Point, String)> = Vec::new();
        // The points in `skipped`, each listed once (a whole-program save skips 100,000).
        let mut listed: HashSet<Point> = HashSet::new();
        let mut placed: Vec<Request> = Vec::with_capacity(requests.len());
        for r in requests {
            match edge::place(view, &r.point) {
                Ok(point) => placed.push(Request { point, ..r.clone() }),
                Err(why) => {
                    if listed.insert(r.point.clone()) {
                        skipped.push((r.point.clone(), why));
                    }
                }
            }
        }
        let requests = &placed[..];
        // A snippet for the caller's arrival at a looping entry joins a site only when that
        // site is the whole function's copy; otherwise the function is copied now, absorbing
        // its sites.
        let (old, new): (Vec<&Request>, Vec<&Request>) = requests.iter().partition(|r| {
            self.applied_at(r.point.addr).is_some_and(|i| {
                !edge::from_caller(view, &r.point)
                    || self.applied[i].site.tactic == Tactic::RelocateFunction
            })
        });
        let points: Vec<Point> = new.iter().map(|r| r.point.clone()).collect();
        let Planned { sites, refused } = self.plan(view, &points);
        let refused: HashMap<u64, String> = refused.into_iter().map(|(a, w)| (a.0, w)).collect();
        // Maps, not scans: a whole-program insert has 200k requests and 90k sites.
        let mut site_of: HashMap<u64, usize> = HashMap::new();
        for (i, s) in sites.iter().enumerate() {
            for a in &s.points {
                site_of.entry(a.0).or_insert(i);
            }
        }
        let mut by_addr: HashMap<u64, Vec<&Request>> = HashMap::new();
        for r in &new {
            by_addr.entry(r.point.addr.0).or_default().push(r);
        }
        for p in &points {
            let Some(site) = site_of.get(&p.addr.0).map(|&i| &sites[i]) else {
                match refused.get(&p.addr.0) {
                    Some(why) => {
                        if listed.insert(p.clone()) {
                            skipped.push((p.clone(), why.clone()));
                        }
                        continue;
                    }
                    None => return Err(PatchError::NoInstruction(p.addr)),
                }
            };
            if site.tactic == Tactic::Trap && !self.options.allow_traps {
                return Err(PatchError::NeedsTrap {
                    point: p.kind.as_str().to_owned(),
                    addr: p.addr,
                    why: site.why.clone(),
                });
            }
        }
        let mut touched = Vec::new();
        for r in old {
            let i = self.applied_at(r.point.addr).expect("partitioned on this");
            self.applied.add_request(i, r.clone());
            if !touched.contains(&i) {
                touched.push(i);
            }
        }
        for i in touched {
            self.relay(view, space, i)?;
        }
        // Sites a relocated function absorbs leave the list in one pass at the end, whether
        // or not every site could be written: removing each from the middle of the list, and
        // claiming every other site's bytes again after each, was quadratic in the sites
        // written before (loops counted after `coverage '*'` on python3: 219,000 of them).
        let mut gone = vec![false; self.applied.len()];
        let written = self.write_sites(view, space, sites, &by_addr, &mut gone);
        if gone.contains(&true) {
            let mut k = 0;
            self.applied.edit().retain(|_| {
                k += 1;
                !gone[k - 1]
            });
            self.claimed = Claimed::default();
            for a in self.applied.iter() {
                self.claimed.add(&a.site);
            }
        }
        // A site that could not be written keeps no checked snippet.
        if written.is_err() {
            self.forget_unused();
        }
        written?;
        let mut applied_of: HashMap<u64, usize> = HashMap::new();
        for (i, a) in self.applied.iter().enumerate() {
            for r in &a.requests {
                applied_of.insert(r.point.addr.0, i);
            }
        }
        let mut reports = Vec::new();
        for r in requests {
            let Some(&i) = applied_of.get(&r.point.addr.0) else {
                continue;
            };
            let a = &self.applied[i];
            let saves = self
                .saves
                .get(&self.rt(r.point.addr).0)
                .cloned()
                .unwrap_or_default();
            reports.push(PointReport {
                point: r.point.clone(),
                tactic: a.site.tactic,
                patch_at: a.site.patch_at,
                trampoline: a.tramp,
                saves,
                why: a.site.why.clone(),
            });
        }
        Ok(Inserted {
            points: reports,
            skipped,
        })
    }

    /// Writes each new site with its snippets (`by_addr`, by point address). A relocated
    /// function absorbs the sites written in it before: their original bytes come back, their
    /// snippets move into the copy, and they are marked in `gone` (one flag per site, new
    /// ones included) for the caller to drop.
    fn write_sites(
        &mut self,
        view: &dyn CodeView,
        space: &mut dyn AddressSpace,
        sites: Vec<Site>,
        by_addr: &HashMap<u64, Vec<&Request>>,
        gone: &mut Vec<bool>,
    ) -> Result<(), PatchError> {
        // The sites written in each function: only those can be absorbed.
        let mut of_func: HashMap<FuncId, Vec<usize>> = HashMap::new();
        for (i, a) in self.applied.iter().enumerate() {
            if a.holds_only(a.func) {
                of_func.entry(a.func).or_default().push(i);
            }
        }
        for site in sites {
            let mut reqs: Vec<Request> = Vec::new();
            if site.tactic == Tactic::RelocateFunction {
                let func = site
                    .points
                    .iter()
                    .find_map(|a| by_addr.get(&a.0))
                    .and_then(|v| v.first())
                    .map(|r| r.point.func);
                for k in func.and_then(|f| of_func.remove(&f)).unwrap_or_default() {
                    let a = &mut self.applied.edit()[k];
                    for (at, bytes) in a.originals.iter().rev() {
                        space.write(*at, bytes)?;
                    }
                    reqs.append(&mut a.requests);
                    gone[k] = true;
                    let old = a.tramp;
                    self.retire(old);
                }
            }
            for a in &site.points {
                if let Some(rs) = by_addr.get(&a.0) {
                    reqs.extend(rs.iter().map(|r| (*r).clone()));
                }
            }
            let func = match reqs.first() {
                Some(r) => r.point.func,
                None => continue,
            };
            let (tramp, copies) = self.lay(view, space, &site, &reqs, None)?;
            let originals = self.enter(space, &site, &copies, true)?;
            // With the sites it absorbed, if any.
            space.end_change();
            self.claimed.add(&site);
            of_func.entry(func).or_default().push(self.applied.len());
            gone.push(false);
            if self.options.one_shot {
                for r in &reqs {
                    if let Some(p) = self.checks.forget(&r.source, &r.env) {
                        self.memos.remove(&(Arc::as_ptr(&p) as usize));
                    }
                }
            }
            self.applied.edit().push(Applied {
                func,
                site,
                requests: reqs,
                tramp,
                originals,
                copies,
            });
        }
        Ok(())
    }

    /// Lays out applied site `i` again with all its snippets, and points its entry at the new
    /// trampoline.
    fn relay(
        &mut self,
        view: &dyn CodeView,
        space: &mut dyn AddressSpace,
        i: usize,
    ) -> Result<(), PatchError> {
        let site = self.applied[i].site.clone();
        let reqs = self.applied[i].requests.clone();
        let old = self.applied[i].tramp.0;
        let size = self.tramps.get(&old).map_or(0, |t| t.laid);
        let (tramp, copies) = self.lay(view, space, &site, &reqs, Some(size))?;
        self.enter(space, &site, &copies, false)?;
        space.end_change();
        let a = &mut self.applied.edit()[i];
        let old = std::mem::replace(&mut a.tramp, tramp);
        a.copies = copies;
        self.retire(old);
        Ok(())
    }

    /// Takes out every snippet inserted with `tag`. A site left with no snippet gets its
    /// original bytes back; one that keeps others gets a new trampoline without the removed
    /// ones. Old trampolines are retired ([`Patcher::take_retired`]), not freed: a thread may
    /// still be running in one, and each ends by jumping back to original code; the caller
    /// frees them once no thread can be inside. Returns how many points lost a snippet.
    pub fn remove(
        &mut self,
        view: &dyn CodeView,
        space: &mut dyn AddressSpace,
        tag: u32,
    ) -> Result<usize, PatchError> {
        self.remove_matching(view, space, |r| r.tag == tag)
    }

    /// Takes out the snippets inserted with `tag` at the points at `points` (link addresses)
    /// only, as [`Patcher::remove`] does (`coverage --once` retires the probes of blocks that
    /// ran).
    pub fn remove_points(
        &mut self,
        view: &dyn CodeView,
        space: &mut dyn AddressSpace,
        tag: u32,
        points: &std::collections::HashSet<LinkAddr>,
    ) -> Result<usize, PatchError> {
        self.remove_matching(view, space, |r| {
            r.tag == tag && points.contains(&r.point.addr)
        })
    }

    fn remove_matching(
        &mut self,
        view: &dyn CodeView,
        space: &mut dyn AddressSpace,
        gone: impl Fn(&Request) -> bool,
    ) -> Result<usize, PatchError> {
        let mut removed = 0;
        // Rebuilt in one pass, in order: removing sites one by one from the vector cost a
        // move of every later site each time, minutes for `coverage '*'` on a large program.
        let mut rest = std::mem::take(self.applied.edit()).into_iter();
        let mut result: Result<(), PatchError> = Ok(());
        // Copies of whole functions that lost a snippet and keep others: planned again below.
        let mut copies: Vec<Applied> = Vec::new();
        for mut a in rest.by_ref() {
            let before = a.requests.len();
            a.requests.retain(|r| !gone(r));
            let after = a.requests.len();
            removed += before - after;
            if after == before {
                self.applied.edit().push(a);
            } else if after > 0
                && a.site.tactic == Tactic::RelocateFunction
                && !a.requests.iter().any(|r| edge::from_caller(view, &r.point))
            {
                copies.push(a);
            } else if after == 0 {
                result = a
                    .originals
                    .iter()
                    .rev()
                    .try_for_each(|(at, bytes)| space.write(*at, bytes))
                    .map_err(PatchError::from);
                space.end_change();
                self.retire(a.tramp);
            } else {
                self.applied.edit().push(a);
                result = self.relay(view, space, self.applied.len() - 1);
            }
            if result.is_err() {
                break;
            }
        }
        // After a failure, the sites not reached are kept as they were.
        self.applied.edit().extend(rest);
        self.claimed = Claimed::default();
        for a in self.applied.iter() {
            self.claimed.add(&a.site);
        }
        for a in copies {
            result = match result {
                Ok(()) => self.uncopy(view, space, a),
                Err(e) => {
                    self.claimed.add(&a.site);
                    self.applied.edit().push(a);
                    Err(e)
                }
            };
        }
        self.forget_unused();
        result.map(|()| removed)
    }

    /// Puts back the whole-function copy `a` (taken out of the list, its claims too) with the
    /// snippets it keeps after a removal: in sites of their own when they can all have one
    /// with a jump (the copy was for a point now gone), else as the copy again.
    ///
    /// A copy costs where its snippets do not run: each call in it returns to the original,
    /// which jumps back, mispredicted. Python3's loop_4 of `_PyEval_EvalFrameDefault`, whose
    /// exit has no room for a jump, copied the interpreter, 25% of its time; kept for a
    /// counter of the function's calls left in after the timer came out, that went on with
    /// nothing to show for it (`consult`'s turns measured the timer against it).
    fn uncopy(
        &mut self,
        view: &dyn CodeView,
        space: &mut dyn AddressSpace,
        a: Applied,
    ) -> Result<(), PatchError> {
        let points: Vec<Point> = a.requests.iter().map(|r| r.point.clone()).collect();
        let Planned { sites, refused } = self.plan(view, &points);
        let cheaper = refused.is_empty()
            && sites
                .iter()
                .all(|s| !matches!(s.tactic, Tactic::RelocateFunction | Tactic::Trap));
        if !cheaper {
            self.claimed.add(&a.site);
            self.applied.edit().push(a);
            return self.relay(view, space, self.applied.len() - 1);
        }
        a.originals
            .iter()
            .rev()
            .try_for_each(|(at, bytes)| space.write(*at, bytes))?;
        space.end_change();
        self.retire(a.tramp);
        let mut by_addr: HashMap<u64, Vec<&Request>> = HashMap::new();
        for r in &a.requests {
            by_addr.entry(r.point.addr.0).or_default().push(r);
        }
        let mut gone = vec![false; self.applied.len()];
        self.write_sites(view, space, sites, &by_addr, &mut gone)
    }

    /// Where the code standing for the original instruction at `orig` starts in its current
    /// trampoline (its snippets first, then its relocated copy), if a site displaced it. A
    /// thread stopped at `orig` inside bytes about to be overwritten moves there.
    pub fn relocated(&self, orig: RuntimeAddr) -> Option<RuntimeAddr> {
        self.applied.copy_of(orig.0).map(RuntimeAddr)
    }

    /// The ranges of original code the written sites cover (jumps, puns and their pads), at
    /// runtime addresses.
    pub fn written(&self) -> Vec<Range<u64>> {
        self.applied
            .iter()
            .flat_map(|a| a.originals.iter())
            .map(|(at, b)| at.0..at.0 + b.len() as u64)
            .collect()
    }

    /// True when any site is written.
    pub fn is_empty(&self) -> bool {
        self.applied.is_empty()
    }

    /// Lays out, allocates and writes the trampoline of `site` holding `reqs`: a new site's
    /// (`replaces` is `None`), whose code in the address space is checked against the file
    /// first, or a site's laid out again, replacing its trampoline of `replaces` bytes.
    fn lay(
        &mut self,
        view: &dyn CodeView,
        space: &mut dyn AddressSpace,
        site: &Site,
        reqs: &[Request],
        replaces: Option<u64>,
    ) -> Result<(RuntimeAddr, Vec<(u64, u64)>), PatchError> {
        // Checked once per snippet, not at every layout (each lays a trampoline out twice,
        // and a relay lays it out again).
        let checked: Vec<Option<Arc<crate::snippet::ir::Program>>> = reqs
            .iter()
            .map(|r| {
                (!self.options.recheck_snippets)
                    .then(|| self.checks.checked(&r.source, &r.env))
                    .flatten()
            })
            .collect();
        // Each snippet's code, generated once and moved to every address the layouts try:
        // kept with its checked program for later layouts too, unless `code_per_layout`.
        let memos: Vec<Arc<movable::Memo>> = checked
            .iter()
            .map(|program| match program {
                Some(p) if !self.options.code_per_layout => {
                    let key = Arc::as_ptr(p) as usize;
                    self.memos
                        .entry(key)
                        .or_insert_with(|| (p.clone(), Arc::default()))
                        .1
                        .clone()
                }
                _ => Arc::default(),
            })
            .collect();
        let move_code = !self.options.generate_at_each_address;
        let mut codes: HashMap<u64, PointCode> = HashMap::new();
        for ((r, checked), memo) in reqs.iter().zip(&checked).zip(&memos) {
            let a = r.point.addr;
            // At call boundaries the ABI leaves the flags dead, unless the instruction at the
            // point reads them (a conditional tail call).
            let func = r.point.func;
            let live = self.options.always_save_flags
                || ((!r.point.kind.at_call_boundary() || plan::reads_flags(view, a))
                    && self.facts.flags_live(view, func, FlagsAt::Insn(func, a.0)));
            let vector = self.options.vector;
            let pc = codes
                .entry(self.rt(a).0)
                .or_insert_with(|| PointCode::empty(vector));
            pc.fresh_saves = self.options.code_per_layout;
            // An exit at a conditional branch (`js other_function`, a conditional tail call)
            // is left only when the branch is taken: its snippets run on that path alone.
            // Run before the branch, they counted every pass through it (python3's
            // PyObject_Malloc had twice as many exits as entries).
            let conditional_exit = matches!(r.point.kind, crate::point::PointKind::Exit { .. })
                && plan::decode(view, a, 15)
                    .first()
                    .is_some_and(|i| i.is_jcc_short_or_near());
            // On an edge trampoline's path the branch has read the flags already: they need
            // keeping only if the edge's target may read them.
            let at_target = || {
                let to = match r.point.edge {
                    Some(crate::point::OnEdge::Edge { to, .. }) => to,
                    _ => return true,
                };
                self.options.always_save_flags
                    || self.facts.flags_live(view, func, FlagsAt::Block(func, to))
            };
            let list = match edge::way(view, &r.point) {
                edge::Way::Taken => {
                    pc.taken_flags_live |= at_target();
                    &mut pc.on_taken
                }
                edge::Way::FallThrough => {
                    pc.fall_flags_live |= at_target();
                    &mut pc.on_fall
                }
                edge::Way::FromCaller => {
                    pc.flags_live |= live;
                    &mut pc.on_arrival
                }
                edge::Way::Table => {
                    let flags = at_target();
                    let bias = self.bias;
                    &mut table_case(view, space, bias, &r.point, pc, flags)?.snippets
                }
                edge::Way::Before if conditional_exit => {
                    pc.taken_flags_live |= live;
                    &mut pc.on_taken
                }
                edge::Way::Before => {
                    pc.flags_live |= live;
                    &mut pc.snippets
                }
            };
            list.push(SnippetSrc {
                source: &r.source,
                env: &*r.env,
                checked: checked.as_deref(),
                memo: move_code.then_some(&**memo),
            });
        }
        // A function copied whole reads private copies of its jump tables.
        if let (plan::Tactic::RelocateFunction, Some(r)) = (site.tactic, reqs.first()) {
            edge::copy_tables(
                view,
                space,
                self.bias,
                r.point.func,
                &mut codes,
                self.options.vector,
            )?;
        }
        let mut segments = Vec::new();
        for s in &site.segments {
            let len = (s.end.0 - s.start.0) as usize;
            let at = self.rt(s.start);
            // A site laid out again has its jump there: the file's bytes were checked when
            // it was first written (a read of the process's memory per site, each relay).
            if replaces.is_none() {
                let live = space.read(at, len)?;
                if view.bytes_at(s.start, len as u64) != Some(&live[..]) {
                    return Err(PatchError::Mismatch(at));
                }
            }
            let bytes = view
                .bytes_at(s.start, len as u64)
                .ok_or(PatchError::Mismatch(at))?;
            segments.push(layout::decode_at(bytes, at.0));
        }
        for a in codes.keys() {
            if !segments.iter().flatten().any(|i| i.ip() == *a) {
                return Err(PatchError::NoInstruction(
                    RuntimeAddr(*a).to_link(self.bias),
                ));
            }
        }
        let (tramp, laid) =
            self.place(space, &segments, &codes, self.rt(site.patch_at), replaces)?;
        for (a, plan) in &laid.saves {
            self.saves.insert(*a, plan.describe());
        }
        // Where the copy of each original instruction starts (its point code first).
        let mut copies: Vec<(u64, u64)> = Vec::new();
        for (r, o) in &laid.map {
            if let Origin::Before(a) | Origin::Copy(a) = o {
                if !copies.iter().any(|c| c.0 == *a) {
                    copies.push((*a, r.start));
                }
            }
        }
        Ok((tramp, copies))
    }

    /// Writes the jumps (or puns, or trap) that enter the trampoline at the copies of their
    /// instructions; returns the original bytes when `first` (a re-laid site keeps the
    /// originals it saved the first time).
    fn enter(
        &mut self,
        space: &mut dyn AddressSpace,
        site: &Site,
        copies: &[(u64, u64)],
        first: bool,
    ) -> Result<Vec<(RuntimeAddr, Vec<u8>)>, PatchError> {
        let mut originals = Vec::new();
        // Evicted instructions are entered at their copy here, by a jump written before the
        // pun's pad inside them (a later layout rewrites just the jump's 5 bytes).
        let evicted = site.evict.as_ref().map(|ev| plan::Arrival {
            at: ev.start,
            overwrite: if first { ev.end.0 - ev.start.0 } else { 5 },
            pad: None,
        });
        let main = plan::Arrival {
            at: site.patch_at,
            overwrite: site.overwrite,
            pad: site.pad,
        };
        for arrival in evicted
            .iter()
            .chain(std::iter::once(&main))
            .chain(&site.arrivals)
        {
            let at = self.rt(arrival.at);
            let to = copies
                .iter()
                .find(|c| c.0 == at.0)
                .map(|c| c.1)
                .ok_or(PatchError::NoInstruction(arrival.at))?;
            let mut put = |space: &mut dyn AddressSpace, at: RuntimeAddr, bytes: Vec<u8>| {
                if first {
                    originals.push((at, space.read(at, bytes.len())?));
                }
                space.write(at, &bytes)
            };
            let mut entry = match (site.tactic, arrival.pad) {
                // The SIGTRAP handler finds the trampoline through [`Patcher::traps`].
                (Tactic::Trap, _) => vec![0xcc],
                (_, Some(pad)) => {
                    let pad = self.rt(pad);
                    put(space, pad, reloc::jmp_rel32(pad.0, to)?)?;
                    if !first {
                        continue;
                    }
                    let d = pad.0 as i64 - (at.0 as i64 + 2);
                    vec![0xeb, d as i8 as u8]
                }
                _ => reloc::jmp_rel32(at.0, to)?,
            };
            entry.resize(arrival.overwrite as usize, 0xcc);
            put(space, at, entry)?;
        }
        Ok(originals)
    }

    /// Lays out a trampoline for `segments` (with the point code in `codes`), allocates it
    /// within reach of `near`, writes it and records its address map. A new one is laid out
    /// twice: once to learn its size, once for the address it got (branch forms may differ).
    /// One replacing a trampoline whose code took `replaces` bytes is laid out once where
    /// room for that and some more was allocated: a loop timer of python3's interpreter lays
    /// out again the 228 sites it shares with another timer, at its insert and at its
    /// removal, and each layout generates every snippet's code and encodes the relocated
    /// instructions.
    fn place(
        &mut self,
        space: &mut dyn AddressSpace,
        segments: &[Vec<iced_x86::Instruction>],
        codes: &HashMap<u64, PointCode>,
        near: RuntimeAddr,
        replaces: Option<u64>,
    ) -> Result<(RuntimeAddr, layout::Laid), PatchError> {
        // Room for what a relay adds (a timer's exit is about 150 bytes); the rest of the
        // allocation is freed with the trampoline.
        let mut size = match replaces {
            Some(laid) => laid + (laid / 2).clamp(512, 8192),
            None => {
                self.layouts += 1;
                layout::lay_out(segments, codes, near.0)?.bytes.len() as u64 + 64
            }
        };
        // Branches back to the original code that were short at the guess may need their long
        // forms where the trampoline lands: a whole function copied with many ways back (a
        // python3 function copied for an edge after a call) grew by more than the margin.
        // Then the trampoline goes where its real size fits; the first place stays unused.
        let mut tries = 0;
        let (tramp, laid) = loop {
            let tramp = space.allocate(near, size, AllocKind::Code)?;
            self.layouts += 1;
            let laid = layout::lay_out(segments, codes, tramp.0)?;
            if laid.bytes.len() as u64 <= size {
                break (tramp, laid);
            }
            tries += 1;
            if tries == 4 {
                return Err(PatchError::Layout(
                    "trampoline grew past its allocation".into(),
                ));
            }
            size = laid.bytes.len() as u64 + laid.bytes.len() as u64 / 8 + 64;
        };
        space.write(tramp, &laid.bytes)?;
        for (r, o) in &laid.map {
            self.map.insert(r.start, (r.end, *o));
        }
        self.tramps.insert(
            tramp.0,
            Tramp {
                end: tramp.0 + size,
                laid: laid.bytes.len() as u64,
            },
        );
        Ok((tramp, laid))
    }

    /// Where a trampoline address came from, or `None` outside every trampoline.
    pub fn origin(&self, addr: RuntimeAddr) -> Option<Origin> {
        let (_, (end, o)) = self.map.range(..=addr.0).next_back()?;
        (addr.0 < *end).then_some(*o)
    }

    /// Every trap site written, with the trampoline its SIGTRAP handler must resume at:
    /// `(address of the int3, trampoline entry)`, runtime addresses, sorted by site.
    pub fn traps(&self) -> Vec<(RuntimeAddr, RuntimeAddr)> {
        let mut v: Vec<(RuntimeAddr, RuntimeAddr)> = self
            .applied
            .iter()
            .filter(|a| a.site.tactic == Tactic::Trap)
            // A trap site copies just its own instruction, and the trampoline begins with the
            // point's code before that copy.
            .map(|a| (self.rt(a.site.patch_at), a.tramp))
            .collect();
        v.sort_by_key(|p| p.0 .0);
        v
    }

    /// True when a trap site's `int3` is at `at`: a thread stopped by it goes on at
    /// [`Patcher::relocated`] of `at`.
    pub fn is_trap(&self, at: RuntimeAddr) -> bool {
        self.applied.is_trap(LinkAddr(at.0.wrapping_sub(self.bias)))
    }

    /// True when any trap site is written.
    pub fn has_traps(&self) -> bool {
        self.applied.has_traps()
    }

    /// How many sites each tactic placed.
    pub fn tactic_counts(&self) -> BTreeMap<Tactic, usize> {
        let mut m = BTreeMap::new();
        for a in self.applied.iter() {
            *m.entry(a.site.tactic).or_insert(0) += 1;
        }
        m
    }

    /// The sites written so far.
    pub fn sites(&self) -> impl Iterator<Item = &Site> + '_ {
        self.applied.iter().map(|a| &a.site)
    }

    /// Puts back every original byte, newest site first. Trampolines stay allocated: a thread
    /// may still be running in one.
    pub fn remove_all(&mut self, space: &mut dyn AddressSpace) -> Result<(), PatchError> {
        while let Some(a) = self.applied.edit().pop() {
            for (at, bytes) in a.originals.iter().rev() {
                space.write(*at, bytes)?;
            }
            space.end_change();
        }
        self.claimed = Claimed::default();
        self.map.clear();
        self.saves.clear();
        self.checks = CheckCache::default();
        self.memos.clear();
        // Every trampoline is retired; the caller may still free them as threads leave.
        let tramps: Vec<u64> = self.tramps.keys().copied().collect();
        for t in tramps {
            self.retire(RuntimeAddr(t));
        }
        Ok(())
    }

    /// Drops what is kept only for snippets no written site holds any more.
    fn forget_unused(&mut self) {
        let used = self
            .applied
            .iter()
            .flat_map(|a| a.requests.iter())
            .map(|r| (&r.source, &r.env));
        self.checks.keep_only(used);
        let kept: HashSet<usize> = self
            .checks
            .programs()
            .map(|p| Arc::as_ptr(p) as usize)
            .collect();
        self.memos.retain(|k, _| kept.contains(k));
    }

    /// Sets [`PatchOptions::code_per_layout`].
    pub fn code_per_layout(&mut self, on: bool) {
        self.options.code_per_layout = on;
    }

    /// Sets [`PatchOptions::generate_at_each_address`].
    pub fn generate_at_each_address(&mut self, on: bool) {
        self.options.generate_at_each_address = on;
    }

    /// Sets [`PatchOptions::recheck_snippets`].
    pub fn recheck_snippets(&mut self, on: bool) {
        self.options.recheck_snippets = on;
    }

    /// How many checked snippets the patcher keeps (every one a written site holds).
    pub fn checked_snippets(&self) -> usize {
        self.checks.len()
    }
}

/// The case of `pc`'s private table copy for the edge point `p` (placed with
/// [`edge::Way::Table`]), made with the copy when it is the first.
fn table_case<'p, 'e>(
    view: &dyn CodeView,
    space: &mut dyn AddressSpace,
    bias: u64,
    p: &Point,
    pc: &'p mut PointCode<'e>,
    flags_live: bool,
) -> Result<&'p mut layout::TableCase<'e>, PatchError> {
    let (t, target) = edge::table_of(view, p).ok_or(PatchError::NoInstruction(p.addr))?;
    let reach = t.reach.ok_or(PatchError::NoInstruction(p.addr))?;
    if pc.table.is_none() {
        pc.table = Some(edge::table_copy(space, bias, t, reach)?);
    }
    let copy = pc.table.as_mut().expect("made above");
    let target = target.to_runtime(bias).0;
    let k = match copy.cases.iter().position(|c| c.target == target) {
        Some(k) => k,
        None => {
            copy.cases.push(layout::TableCase {
                target,
                snippets: Vec::new(),
                flags_live: false,
            });
            copy.cases.len() - 1
        }
    };
    let case = &mut copy.cases[k];
    case.flags_live |= flags_live;
    Ok(case)
}

/// One row of `show points`.
#[derive(Clone, Debug, serde::Serialize)]
pub struct PointRow {
    /// The point's kind, as users write it (`entry`, `call-before`).
    pub kind: &'static str,
    /// Its function's display name.
    pub function: String,
    /// Its address.
    pub addr: LinkAddr,
    /// The called function, at a call site.
    pub callee: Option<String>,
    /// The loop, at a loop point.
    pub loop_name: Option<String>,
    /// The edge the point is on, as `FROM->TO` (block starts), or `from the caller`.
    pub edge: Option<String>,
    /// The original instructions the site copies (Intel syntax).
    pub displaced: Vec<String>,
    /// `None` when the point would be skipped (`why` says why).
    pub tactic: Option<Tactic>,
    /// Why that tactic, or why the point would be skipped.
    pub why: String,
}

/// How each point would be instrumented, given what `patcher` has written already.
pub fn describe_points(view: &dyn CodeView, patcher: &Patcher, points: &[Point]) -> Vec<PointRow> {
    let placed: Vec<Result<Point, String>> = points.iter().map(|p| edge::place(view, p)).collect();
    let ok: Vec<Point> = placed
        .iter()
        .filter_map(|p| p.as_ref().ok().cloned())
        .collect();
    let planned = patcher.plan(view, &ok);
    let sites = &planned.sites;
    points
        .iter()
        .zip(&placed)
        .map(|(p, placed)| {
            let (site, refused) = match placed {
                Ok(q) => (
                    sites.iter().find(|s| s.points.contains(&q.addr)),
                    planned
                        .refused
                        .iter()
                        .find(|r| r.0 == q.addr)
                        .map(|r| r.1.clone()),
                ),
                Err(why) => (None, Some(why.clone())),
            };
            let displaced = site
                .map(|s| {
                    s.segments
                        .iter()
                        .flat_map(|r: &Range<LinkAddr>| {
                            let len = r.end.0 - r.start.0;
                            let bytes = view.bytes_at(r.start, len).unwrap_or(&[]);
                            crate::disasm::disassemble(bytes, r.start, usize::MAX, &|_| None)
                        })
                        // The same spelling as `disas`: `call 0x1168`, `mov rax, [0x40a0]`.
                        .map(|l| {
                            let text = l.text.split_whitespace().collect::<Vec<_>>().join(" ");
                            format!("{}: {text}", l.addr)
                        })
                        .collect()
                })
                .unwrap_or_default();
            PointRow {
                kind: p.kind.as_str(),
                function: view.function(p.func).display_name().to_owned(),
                addr: p.addr,
                callee: p.callee_name.clone(),
                loop_name: p.loop_name.clone(),
                edge: p.edge.map(|e| match e {
                    crate::point::OnEdge::Edge { from, to, .. } => {
                        let cfg = view.cfg(p.func);
                        format!("{}->{}", cfg.block(from).start, cfg.block(to).start)
                    }
                    crate::point::OnEdge::FromCaller => "from the caller".to_owned(),
                }),
                displaced,
                tactic: site.map(|s| s.tactic),
                why: match (site, refused) {
                    (Some(s), _) => s.why.clone(),
                    (None, Some(r)) => r,
                    (None, None) => "no instruction there".to_owned(),
                },
            }
        })
        .collect()
}
