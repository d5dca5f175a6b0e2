//! Instrumentation: where the session's knowledge (functions, DWARF, points) meets the snippet
//! compiler and the patcher. This is gsh's equivalent of Dyninst's BPatch layer: it alone may
//! import `session`, `snippet` and `dwarf` together.

pub mod action;
pub mod arena;
pub mod build;
pub mod consult_probes;
pub mod control;
pub mod coverage;

pub use crate::patch::{PointRow, Tactic};
pub use build::{describe_points, listed_points};
pub mod env;

pub use action::{Action, Metric};

pub use env::{Declaration, SessionEnv};
pub mod request;

pub use request::{LoopAt, Plan, PointSpec, Request, RequestError, Where};
pub mod sampling;
pub mod save;
mod source;
pub mod unload;

pub use save::{save, SaveError, SaveReport};
pub mod eval;
pub mod frames;
pub mod histogram;
pub mod inferior;
pub mod inspect;
pub mod live;
pub mod loop_measure;
pub mod measure;
mod pending;
pub mod results;
pub mod scope;
pub mod values;

/// What `consult`'s stack samples read a waiting thread's descriptors with
/// ([`crate::consult::stacks::Stacks::reading_waits`]).
pub use crate::process::waits::waited;

/// What `consult`'s stack samples name the descriptors of a wait on several with
/// ([`crate::consult::stacks::Stacks::describing`]): what each of `fds` of process `pid` is,
/// as its `/proc` tells ([`crate::process::fds::describe`]).
pub fn described(pid: i32, fds: &[i32]) -> Vec<crate::consult::Watched> {
    crate::process::fds::describe(pid, fds)
        .into_iter()
        .map(|d| crate::consult::Watched {
            fd: d.fd,
            kind: d.kind,
            at: d.at,
            what: d.what,
        })
        .collect()
}
pub use inferior::Inferior;
pub use live::Live;
