//! Checked snippets kept for laying trampolines out again. Parsing and checking a snippet
//! depends only on its text and its environment, never on where its code goes, so a
//! trampoline laid out again (a site's snippets changed: `delete` of one of two requests
//! sharing every site) or laid out twice (once to learn its size, once where it landed) needs
//! only the code generated again for its address.
//!
//! Entries are keyed by the identity of the shared text and environment (`Arc` pointers) and
//! hold both, so neither allocation can be freed and its address reused by another snippet
//! while its entry lives; [`CheckCache::keep_only`] drops the entries no request uses any more.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use super::env::Env;
use super::ir::Program;

/// A snippet's environment as requests share it.
pub type SharedEnv = Arc<dyn Env + Send + Sync>;

/// The identity of a (text, environment) pair.
type Key = (usize, usize);

fn key(source: &Arc<str>, env: &SharedEnv) -> Key {
    (
        Arc::as_ptr(source) as *const u8 as usize,
        Arc::as_ptr(env) as *const () as usize,
    )
}

/// One checked snippet, with the text and environment it was checked against.
#[derive(Clone)]
struct Entry {
    _source: Arc<str>,
    _env: SharedEnv,
    program: Arc<Program>,
}

/// Checked programs by (text, environment). A clone shares the programs.
#[derive(Clone, Default)]
pub struct CheckCache {
    entries: HashMap<Key, Entry>,
}

impl CheckCache {
    /// The checked program of `source` against `env`, checked now if it was not before.
    /// `None` when it does not check: compile it with [`super::compile`] for the diagnostics
    /// (failures are not kept).
    pub fn checked(&mut self, source: &Arc<str>, env: &SharedEnv) -> Option<Arc<Program>> {
        let k = key(source, env);
        if let Some(e) = self.entries.get(&k) {
            return Some(e.program.clone());
        }
        let (program, _) = super::check_source(source, &**env);
        let program = Arc::new(program?);
        self.entries.insert(
            k,
            Entry {
                _source: source.clone(),
                _env: env.clone(),
                program: program.clone(),
            },
        );
        Some(program)
    }

    /// Drops the entry of `source` against `env`; returns its program, if it had one.
    pub fn forget(&mut self, source: &Arc<str>, env: &SharedEnv) -> Option<Arc<Program>> {
        self.entries.remove(&key(source, env)).map(|e| e.program)
    }

    /// Keeps only the entries of the (text, environment) pairs in `used`.
    pub fn keep_only<'a>(&mut self, used: impl Iterator<Item = (&'a Arc<str>, &'a SharedEnv)>) {
        let used: HashSet<Key> = used.map(|(s, e)| key(s, e)).collect();
        self.entries.retain(|k, _| used.contains(k));
    }

    /// The kept checked programs.
    pub fn programs(&self) -> impl Iterator<Item = &Arc<Program>> + '_ {
        self.entries.values().map(|e| &e.program)
    }

    /// How many checked snippets are kept.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// True when none is.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }
}
