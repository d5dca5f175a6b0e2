//! The results file a saved binary writes at exit (`rt/LAYOUT.md`, "Exit output"), read into
//! the values and paths `report` shows for a live process: the runtime's per-thread slot and
//! path records ([`gsh_rt_abi::results`]'s types, the runtime's side of the format), given
//! meaning by the [`Meta`] text `save` wrote into the measuring descriptor and the runtime
//! copied verbatim, and return addresses named through the modules the program had loaded
//! ([`Names`]).
//!
//! Bad files get one clear error each: missing, unreadable, truncated (the program was killed
//! while writing), not a results file, another runtime ABI, or written for a program gsh did
//! not save with measuring.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use gsh_rt_abi::descriptor::META_VERSION;
use gsh_rt_abi::results::{Clock, Output};
use gsh_rt_abi::ABI_VERSION;

use crate::addr::LinkAddr;
use crate::session::Session;

use super::measure::{fold_iterations, CountValue, Counted, Metric, PathValue};

/// The JSON text `save` writes into the measuring descriptor: what each slot of the saved
/// code measures. The runtime copies it into the results file as `meta`.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Meta {
    /// [`META_VERSION`].
    pub version: u32,
    /// One entry per slot.
    pub slots: Vec<SavedSlot>,
    /// Which block each coverage counter belongs to, per coverage request.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub coverage: Vec<super::coverage::CoverageMap>,
}

/// A loaded object of the measured process, with its load bias.
pub use gsh_rt_abi::results::Module as LoadedModule;

/// Why a results file cannot be read.
#[derive(Debug, thiserror::Error)]
pub enum ResultsError {
    /// No file at the path.
    #[error("there is no results file {}: run the saved program first (it writes the file when it exits)", .path.display())]
    Missing {
        /// The file.
        path: PathBuf,
    },
    /// The file exists but cannot be read.
    #[error("cannot read results file {}: {source}", .path.display())]
    Unreadable {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// The JSON ends early.
    #[error("results file {} is truncated ({detail}): was the program killed while writing it?", .path.display())]
    Truncated {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        detail: String,
    },
    /// Not JSON, or not the runtime's.
    #[error("{} is not the results file of a binary gsh saved with measuring: {detail}", .path.display())]
    Foreign {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        detail: String,
    },
    /// Written by a runtime of another ABI version.
    #[error("results file {} was written by a runtime of ABI {found}; this gsh reads ABI {ABI_VERSION}", .path.display())]
    OtherAbi {
        /// The file.
        path: PathBuf,
        /// The version it has.
        found: u64,
    },
    /// The runtime wrote it, but for a program without a measuring descriptor.
    #[error("results file {} says nothing about what was measured: the runtime wrote it for a program gsh did not save with measuring (GSH_RT_OUTPUT?)", .path.display())]
    NoMeta {
        /// The file.
        path: PathBuf,
    },
    /// The descriptor's meta text has another version.
    #[error("results file {}: its measuring table has version {found}; this gsh reads version {META_VERSION}", .path.display())]
    OtherMeta {
        /// The file.
        path: PathBuf,
        /// The version it has.
        found: u32,
    },
}

/// A results file, read: every measured function's values summed over threads, the call
/// paths (per thread, not yet merged or named), and the modules to name them with.
#[derive(Clone, Debug)]
pub struct ResultsFile {
    /// One per measured function, in the meta table's order.
    pub values: Vec<CountValue>,
    /// Every thread's call-path records of profiled functions.
    pub paths: Vec<PathValue>,
    /// The loaded objects, the program first.
    pub modules: Vec<LoadedModule>,
    /// Coverage requests' block maps.
    pub coverage: Vec<super::coverage::CoverageMap>,
    /// Their counters' values (absent: zero), [`super::coverage::UNPROBED`] for blocks
    /// without a probe.
    pub coverage_counts: HashMap<u32, u64>,
    /// The measured loops' code by function, for [`Names::frames`].
    pub loops: LoopSpans,
}

/// Measured loops' code by function (as users name it): each loop's name and its `[start,
/// end)` link-address ranges.
pub type LoopSpans = HashMap<String, Vec<(String, Vec<[u64; 2]>)>>;

/// Reads the results file at `path`.
pub fn read(path: &Path) -> Result<ResultsFile, ResultsError> {
    let text = std::fs::read_to_string(path).map_err(|e| match e.kind() {
        std::io::ErrorKind::NotFound => ResultsError::Missing {
            path: path.to_owned(),
        },
        std::io::ErrorKind::InvalidData => ResultsError::Foreign {
            path: path.to_owned(),
            detail: "it is not text".into(),
        },
        _ => ResultsError::Unreadable {
            path: path.to_owned(),
            source: e,
        },
    })?;
    parse(&text, path)
}

/// Reads a results file's `text`; `path` names it in errors.
pub fn parse(text: &str, path: &Path) -> Result<ResultsFile, ResultsError> {
    let foreign = |detail: String| ResultsError::Foreign {
        path: path.to_owned(),
        detail,
    };
    if text.trim().is_empty() {
        return Err(ResultsError::Truncated {
            path: path.to_owned(),
            detail: "it is empty".into(),
        });
    }
    let value: serde_json::Value = serde_json::from_str(text).map_err(|e| {
        if e.classify() == serde_json::error::Category::Eof {
            ResultsError::Truncated {
                path: path.to_owned(),
                detail: format!("it ends at line {}", e.line()),
            }
        } else {
            foreign(format!("not JSON ({e})"))
        }
    })?;
    let abi = value
        .get("abi")
        .and_then(serde_json::Value::as_u64)
        .ok_or_else(|| foreign("it has no runtime ABI version (`abi`)".into()))?;
    if abi != u64::from(ABI_VERSION) {
        return Err(ResultsError::OtherAbi {
            path: path.to_owned(),
            found: abi,
        });
    }
    let file: Output<Meta> = serde_json::from_value(value).map_err(|e| foreign(format!("{e}")))?;
    let meta = file.meta.as_ref().ok_or_else(|| ResultsError::NoMeta {
        path: path.to_owned(),
    })?;
    if meta.version != META_VERSION {
        return Err(ResultsError::OtherMeta {
            path: path.to_owned(),
            found: meta.version,
        });
    }
    Ok(gather(&file, meta))
}

/// Sums the threads' slots per measured function and collects their paths.
fn gather(file: &Output<Meta>, meta: &Meta) -> ResultsFile {
    let mut values: Vec<CountValue> = meta
        .slots
        .iter()
        .map(|m| CountValue {
            id: m.id,
            function: m.function.clone(),
            loop_name: m.loop_name.clone(),
            calls: 0,
            iterations: None,
            metric: m.kind,
            ns: (m.kind.is_timed() && !m.kind.is_profile()).then_some(0),
        })
        .collect();
    let index: HashMap<u32, usize> = meta
        .slots
        .iter()
        .enumerate()
        .map(|(i, m)| (m.slot, i))
        .collect();
    let mut paths: Vec<PathValue> = Vec::new();
    for t in &file.threads {
        for s in &t.slots {
            let Some(&i) = index.get(&s.slot) else {
                continue;
            };
            if values[i].metric.is_profile() {
                // A profile's own record holds the activations on paths its thread's table
                // had no room for: a path with no return address.
                paths.push(PathValue {
                    id: values[i].id,
                    function: values[i].function.clone(),
                    metric: values[i].metric,
                    ras: Vec::new(),
                    calls: s.count,
                    ns: s.ns,
                });
                continue;
            }
            values[i].calls += s.count;
            let ticks = values[i].metric == Metric::Time && file.clock == Clock::Rdtsc;
            if let Some(ns) = values[i].ns.as_mut() {
                // Inline wall timers keep TSC ticks; the runtime's own timers, ns.
                *ns += if ticks {
                    (s.ns as f64 * file.ns_per_tick) as u64
                } else {
                    s.ns
                };
            }
        }
        for p in &t.paths {
            let Some(&i) = index.get(&p.slot) else {
                continue;
            };
            paths.push(PathValue {
                id: values[i].id,
                function: values[i].function.clone(),
                metric: values[i].metric,
                ras: p.ras.iter().map(|r| r.0).collect(),
                calls: p.count,
                ns: p.ns,
            });
        }
    }
    let counted: Vec<Counted> = meta.slots.iter().map(|m| m.counted).collect();
    let mut loops: LoopSpans = HashMap::new();
    for m in &meta.slots {
        let Some(name) = m.loop_name.as_ref().filter(|_| !m.spans.is_empty()) else {
            continue;
        };
        let of = loops.entry(m.function.clone()).or_default();
        if !of.iter().any(|(l, _)| l == name) {
            of.push((name.clone(), m.spans.clone()));
        }
    }
    ResultsFile {
        loops,
        values: fold_iterations(values, &counted),
        paths,
        modules: file.modules.clone(),
        coverage: meta.coverage.clone(),
        coverage_counts: file.coverage.iter().copied().collect(),
    }
}

/// Names return addresses through the modules the program had loaded, opened from their
/// paths (the session's own modules when it has them open).
pub struct Names {
    /// (load bias, module), highest bias first.
    modules: Vec<(u64, Arc<crate::Module>)>,
    /// The index in `modules` of the program (the first loaded module), if it was opened.
    program: usize,
}

impl Names {
    /// Opens (or finds open in `session`) each loaded module that still exists.
    pub fn new(session: &mut Session, loaded: &[LoadedModule]) -> Names {
        let mut modules = Vec::new();
        for (i, m) in loaded.iter().enumerate() {
            let module = session
                .module_for_path(Path::new(&m.name))
                .ok()
                .map(|id| session.module_arc(id));
            if let Some(module) = module {
                modules.push((m.base.0, module, i == 0));
            }
        }
        modules.sort_by_key(|m| std::cmp::Reverse(m.0));
        let program = modules.iter().position(|m| m.2).unwrap_or(usize::MAX);
        Names {
            modules: modules.into_iter().map(|(b, m, _)| (b, m)).collect(),
            program,
        }
    }

    /// The frames return address `ra` stands for, outermost first: the function it returns
    /// into, as users name it (the address itself when no module has it), then the loops of
    /// that function in `loops` that hold the call, outermost first. `loops` are the program's
    /// (the first module's).
    pub fn frames(&self, ra: u64, loops: &LoopSpans) -> Vec<String> {
        // The call is before `ra`: `ra` may be past the end of a function whose last
        // instruction is a call that does not return.
        let at = ra.wrapping_sub(1);
        for (i, (bias, m)) in self.modules.iter().enumerate() {
            if *bias > at {
                continue;
            }
            let link = at - bias;
            if let Some(f) = m.functions().containing(LinkAddr(link)) {
                let name = f.display_name().to_owned();
                let mut frames = vec![name];
                if i == self.program {
                    if let Some(of) = loops.get(&frames[0]) {
                        frames.extend(super::loop_measure::in_spans(of, link));
                    }
                }
                return frames;
            }
        }
        vec![format!("{ra:#x}")]
    }
}

/// What one slot of a saved file measures (also written into the descriptor's meta JSON,
/// [`Meta`]).
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct SavedSlot {
    /// The slot's index in the threads' blocks.
    pub slot: u32,
    /// The request's id.
    pub id: u32,
    /// `count`, `time`, `time-cpu`, `profile`, `profile-cpu` or `profile-count`.
    pub kind: Metric,
    /// The measured function, as users name it.
    pub function: String,
    /// The measured loop (`loop_1.2`), for a loop measure.
    #[serde(rename = "loop", default, skip_serializing_if = "Option::is_none")]
    pub loop_name: Option<String>,
    /// What the slot counts: calls or a loop's entries (the default), or a loop's
    /// iterations.
    #[serde(default, skip_serializing_if = "is_entries")]
    pub counted: Counted,
    /// For a loop measure, the loop's code as `[start, end)` link-address ranges (its blocks,
    /// nested loops' included): a profile's call paths show the loop as an element where a
    /// call lies in it (the saved file's own code no longer has the loop's shape).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub spans: Vec<[u64; 2]>,
}

fn is_entries(c: &Counted) -> bool {
    *c == Counted::Entries
}

#[cfg(test)]
#[path = "results_tests.rs"]
mod tests;
