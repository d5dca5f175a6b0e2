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

/// The path timers in, over the profiles they read.
#[derive(Debug, Default)]
pub(super) struct PathTimers {
    /// Each path timer's profile request and path.
    timers: BTreeMap<u32, (u32, Vec<String>)>,
    /// The profiles in, by (module, function): the request and how many path timers read it.
    profiles: BTreeMap<(String, String), (u32, usize)>,
    next: u32,
}

impl PathTimers {
    /// The request removing timer `id` takes out: `id` itself when it is no path timer, its
    /// profile when it is the last path timer reading it, else none.
    pub(super) fn remove(&mut self, id: u32) -> Option<u32> {
        let Some((profile, _)) = self.timers.remove(&id) else {
            return Some(id);
        };
        let key = self
            .profiles
            .iter()
            .find(|(_, (p, _))| *p == profile)
            .map(|(k, _)| k.clone())?;
        let users = &mut self.profiles.get_mut(&key)?.1;
        *users -= 1;
        if *users > 0 {
            return None;
        }
        self.profiles.remove(&key);
        Some(profile)
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
        let id = FIRST_ID + self.paths.next;
        self.paths.next += 1;
        self.paths.timers.insert(id, (profile, path.to_vec()));
        Ok(id)
    }

    /// What path timer `id` has measured: with `tid`, that thread's activations along its
    /// path; without, every activation of its profile in every thread, whatever its path
    /// (what the profile costs). `None` when `id` is no path timer.
    pub(super) fn read_path_timer(
        &mut self,
        id: u32,
        tid: Option<i32>,
    ) -> Option<Result<TimerValue, String>> {
        let (profile, path) = self.paths.timers.get(&id)?.clone();
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
                .filter(|p| p.id == profile && (tid.is_none() || on(&p.ras)))
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
