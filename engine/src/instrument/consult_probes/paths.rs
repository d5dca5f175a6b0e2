//! Whole call paths timed for `consult` (iPath): a call path's last function is profiled
//! (`profile FUNC`, whose runtime walks the return addresses at each entry and keeps the
//! activations of each distinct path apart), and a path timer reads, for one thread, the
//! activations whose callers are the path's ([`stacks::on_path`]), with their inclusive time.
//! Paths ending in the same function share its one profile, taken out with the last of them.

use std::collections::{BTreeMap, HashMap};

use gsh_rt_abi::layout::MAX_PATH_DEPTH;

use super::LiveProbes;
use crate::consult::probes::TimerValue;
use crate::consult::stacks::{self, FrameName};
use crate::instrument::action::Measured;
use crate::instrument::{Live, Metric};

/// The first id a path timer gets: above every request id a session hands out.
const FIRST_ID: u32 = 1 << 31;

/// One path timer: the profile of its path's function, its path, and for a loop timed along
/// the path, the loop's own request (`measure::add_path_loop`), read in the profile's stead.
#[derive(Clone, Debug)]
struct PathTimer {
    profile: u32,
    path: Vec<String>,
    lp: Option<u32>,
}

/// The path timers in, over the profiles they read.
#[derive(Debug, Default)]
pub(super) struct PathTimers {
    /// Each path timer, by id.
    timers: BTreeMap<u32, PathTimer>,
    /// The profiles in, by (module, function): the request and how many path timers read it.
    profiles: BTreeMap<(String, String), (u32, usize)>,
    next: u32,
}

impl PathTimers {
    /// The requests removing timer `id` takes out: `id` itself when it is no path timer; else
    /// its loop's request, if any, and its profile when it is the last path timer reading it.
    pub(super) fn remove(&mut self, id: u32) -> Vec<u32> {
        let Some(t) = self.timers.remove(&id) else {
            return vec![id];
        };
        let mut out: Vec<u32> = t.lp.into_iter().collect();
        let Some(key) = self
            .profiles
            .iter()
            .find(|(_, (p, _))| *p == t.profile)
            .map(|(k, _)| k.clone())
        else {
            return out;
        };
        if let Some((_, users)) = self.profiles.get_mut(&key) {
            *users -= 1;
            if *users == 0 {
                self.profiles.remove(&key);
                out.push(t.profile);
            }
        }
        out
    }
}

impl LiveProbes<'_> {
    /// Inserts a timer of `path` (caller first, ending in the function profiled, of
    /// `module`): the function's profile, inserted unless another path's timer has it in.
    pub(super) fn insert_path_timer(
        &mut self,
        module: &str,
        path: &[String],
    ) -> Result<u32, String> {
        let profile = self.profile_of(module, path)?;
        Ok(self.add_timer(profile, path, None))
    }

    /// Inserts a timer of loop `lp` of `path`'s last function (of `module`) that counts only
    /// its activations along `path`: the function's profile (shared, as a path timer's), and
    /// the loop timed along its call paths (`measure::add_path_loop`), read for `path`.
    pub(super) fn insert_path_loop_timer(
        &mut self,
        module: &str,
        path: &[String],
        lp: &str,
    ) -> Result<u32, String> {
        let Some(function) = path.last() else {
            return Err("an empty call path has nothing to time".into());
        };
        // The loop's request is checked first: a loop that cannot be timed along paths puts
        // no profile in.
        self.resolve(module, function)?;
        let glob = format!("{module}!{function}");
        let what = format!("loop {lp} along {}", path.join(" > "));
        let id = crate::instrument::measure::add_path_loop(self.plan, self.session, &glob, lp)
            .map_err(|e| format!("{function} {what}: {e}"))?
            .id;
        let profile = match self.profile_of(module, path) {
            Ok(p) => p,
            Err(e) => {
                let _ = self.plan.delete(id);
                return Err(e);
            }
        };
        match self.place(id, Metric::Profile, function, &what) {
            Ok(id) => Ok(self.add_timer(profile, path, Some(id))),
            Err(e) => {
                // Its profile comes out again unless another path reads it.
                let fake = self.add_timer(profile, path, None);
                for r in self.paths.remove(fake) {
                    let _ = self.tracer.with(|p, live| live.undo(p, r));
                    let _ = self.plan.delete(r);
                }
                Err(e)
            }
        }
    }

    /// A new path timer of `path` over `profile` (and loop request `lp`); its id.
    fn add_timer(&mut self, profile: u32, path: &[String], lp: Option<u32>) -> u32 {
        let id = FIRST_ID + self.paths.next;
        self.paths.next += 1;
        self.paths.timers.insert(
            id,
            PathTimer {
                profile,
                path: path.to_vec(),
                lp,
            },
        );
        id
    }

    /// The profile of `path`'s last function, inserted unless a path timer has it in, now
    /// read by one more.
    fn profile_of(&mut self, module: &str, path: &[String]) -> Result<u32, String> {
        let Some(function) = path.last() else {
            return Err("an empty call path has nothing to time".into());
        };
        let key = (module.to_owned(), function.clone());
        let profile = match self.paths.profiles.get_mut(&key) {
            Some((id, users)) => {
                *users += 1;
                *id
            }
            None => {
                let id = self.timer(module, function, Metric::Profile, Measured::Function, "")?;
                self.paths.profiles.insert(key, (id, 1));
                id
            }
        };
        Ok(profile)
    }

    /// What path timer `id` has measured: with `tid`, that thread's activations along its
    /// path (of its loop, for a loop's); without, every activation of its profile in every
    /// thread, whatever its path (what the profile costs: for a loop's, each call of its
    /// function runs the profile and the loop's entries in it). `None` when `id` is no path
    /// timer.
    pub(super) fn read_path_timer(
        &mut self,
        id: u32,
        tid: Option<i32>,
    ) -> Option<Result<TimerValue, String>> {
        let PathTimer { profile, path, lp } = self.paths.timers.get(&id)?.clone();
        let read = match (tid, lp) {
            (Some(_), Some(lp)) => lp,
            _ => profile,
        };
        let reader = self.tracer.reader();
        let read = self.tracer.with(|_, live| {
            let paths = match tid {
                Some(t) => live.measure.thread_paths(&reader, t as u32),
                None => live.measure.paths(&reader),
            }
            .map_err(|e| e.to_string())?;
            let mut names: HashMap<u64, FrameName> = HashMap::new();
            let mut on = |ras: &[u64]| {
                let callers: Vec<FrameName> = ras
                    .iter()
                    .map(|&ra| names.entry(ra).or_insert_with(|| frame(live, ra)).clone())
                    .collect();
                stacks::on_path(&callers, &path, ras.len() < MAX_PATH_DEPTH)
            };
            Ok(paths
                .iter()
                .filter(|p| p.id == read && (tid.is_none() || on(&p.ras)))
                .fold(TimerValue::default(), |a, p| TimerValue {
                    entries: a.entries + p.calls,
                    ns: a.ns + p.ns,
                }))
        });
        Some(read.map_err(|e| e.to_string()).and_then(|r| r))
    }
}

/// The function return address `ra` returns into, named as the stack samples name frames
/// (`instrument::sampling`): the module's name and the function's display name; the address
/// where no loaded module's function holds it. A return address into a trampoline (a caller
/// whose code gsh moved) is named after the code it was moved from.
fn frame(live: &Live, ra: u64) -> FrameName {
    // The call is before `ra`, which may lie past the end of a function ending in a call.
    let at = ra.wrapping_sub(1);
    let at = live.origin(at).map_or(at, |(_, orig)| orig);
    crate::instrument::sampling::frame_name(live.loaded(), at, ra)
}
