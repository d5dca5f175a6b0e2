//! What users ask for: points named in the shell's words (`work entry`, `main call puts
//! before`, `main loop loop_1 iter-begin`), and the plan of declared variables and snippet
//! requests that `save` (or a live process) turns into trampolines.
//!
//! A request is checked when it is made: its functions resolve, each has the points asked for,
//! and the snippet type-checks at every one of them, so `at` fails at once with a diagnostic
//! rather than at `save`.

#![warn(missing_docs)]

use std::collections::HashMap;

use crate::point::{self, Point};
use crate::session::{FuncRef, Module, Session};
use crate::snippet::diag::render_all;
use crate::snippet::env::PointInfo;
use crate::snippet::{self, Declared};
use crate::symbols::FuncId;

pub use crate::point::{LoopAt, PointSpec, Where};

use super::action::Action;
use super::env::{Declaration, SessionEnv};

/// Why a request was refused.
#[derive(Debug, thiserror::Error)]
pub enum RequestError {
    /// The function part did not resolve.
    #[error(transparent)]
    Engine(#[from] crate::Error),
    /// A function has no point of the kind asked for.
    #[error("{0}")]
    NoPoint(String),
    /// The point exists but the patcher cannot place it yet.
    #[error("`{spec}`: {why}")]
    Unplaceable {
        /// The point as the user wrote it.
        spec: String,
        /// Why it cannot be placed.
        why: point::Unplaceable,
    },
    /// The snippet does not check; the text is the rendered diagnostics.
    #[error("{0}")]
    Snippet(String),
    /// `delete` of an id that is not there.
    #[error("no instrumentation with id {0}; `show instrumentation` lists them")]
    UnknownId(u32),
    /// `declare` of a name already declared.
    #[error("`{0}` is declared already")]
    Redeclared(String),
}

/// One request of the plan: an action at the points a specification names.
#[derive(Clone, Debug, serde::Serialize)]
pub struct Request {
    /// Its id, shared with `delete` and `show instrumentation`.
    pub id: u32,
    /// Where, as the user wrote it.
    pub spec: PointSpec,
    /// What to do there.
    pub action: Action,
    /// The functions the spec resolved to.
    #[serde(skip)]
    pub funcs: Vec<FuncRef>,
    /// Things worth telling the user that do not stop the request.
    pub warnings: Vec<String>,
}

impl Request {
    /// The snippet as compiled, for a snippet request.
    pub fn source(&self) -> Option<String> {
        self.action.snippet_source()
    }
}

/// Warnings for declared variables that `func`'s parameters hide in `source` at its entry:
/// `at '*' entry { n++; }` increments a parameter named `n` wherever there is one.
fn shadowed(
    module: &crate::session::Module,
    func: &crate::symbols::Function,
    declared: &[Declaration],
    source: &str,
) -> Vec<String> {
    let Some(info) = module.debug_info().and_then(|d| d.function(func.addr)) else {
        return Vec::new();
    };
    let (tokens, _) = crate::snippet::lexer::lex(source);
    let named = |n: &str| {
        tokens
            .iter()
            .any(|t| matches!(&t.kind, crate::snippet::lexer::TokenKind::Ident(i) if i == n))
    };
    info.params
        .iter()
        .filter_map(|p| p.name.as_deref())
        .filter(|p| declared.iter().any(|d| d.name == *p) && named(p))
        .map(|p| {
            format!(
                "in {}, `{p}` is its parameter, not the declared variable `{p}`",
                func.display_name()
            )
        })
        .collect()
}

/// What the snippet constants say at each of `points` (of one function): the same facts
/// `save` and a live process compile with ([`point::facts`]).
fn point_infos(
    module: &Module,
    func: FuncId,
    points: &[Point],
    id: u32,
    declared: &[Declaration],
) -> Vec<PointInfo> {
    let f = module.functions().get(func);
    let base = SessionEnv::new(module, Some(f), declared, PointInfo::default(), 0);
    points
        .iter()
        .map(|p| point::facts(module, p, id, &|c| base.c_type(c)))
        .collect()
}

/// True for the parts gcc and clang split off a function (`f.cold`, `f.cold.1`).
fn is_fragment(name: &str) -> bool {
    name.contains(".cold")
}

/// Declared variables and snippet requests, in the order they were made.
#[derive(Debug, Default)]
pub struct Plan {
    /// `declare`d variables, in order.
    pub declared: Vec<Declared>,
    /// Requests, in the order they were made.
    pub requests: Vec<Request>,
    next_id: u32,
    /// `declared` laid out from [`CHECK_DATA_BASE`], for checking snippets, kept up to date
    /// as variables come and go ([`Plan::checking`]): laying every variable out again for
    /// each `declare` and `at` made a whole-program script quadratic (cc1's loop counters
    /// are 121,520 variables and as many requests).
    checking: Checking,
}

/// [`Plan::declared`] as laid out for checking, with an index by name.
#[derive(Debug, Default)]
struct Checking {
    vars: Vec<Declaration>,
    /// The offset after the last variable.
    end: u64,
    /// Each name's variable, by index in `vars`.
    by_name: HashMap<String, usize>,
}

/// Where declared variables sit while snippets are only checked, not compiled: far from any
/// code, so checking never depends on a real layout.
const CHECK_DATA_BASE: u64 = 0x7f00_0000_0000;

/// Lays `d` out at the first offset from `off` aligned to its size; returns it (at `base`
/// plus that offset) and the offset after it.
fn lay_one(d: &Declared, base: u64, off: u64) -> (Declaration, u64) {
    let size = d.ty.size().max(1);
    let align = size.next_power_of_two().min(16);
    let off = off.next_multiple_of(align);
    let v = Declaration {
        name: d.name.clone(),
        ty: d.ty.clone(),
        addr: base + off,
    };
    (v, off + size)
}

impl Plan {
    /// The declared variables laid out from `base`, each aligned to its size.
    pub fn layout(&self, base: u64) -> (Vec<Declaration>, u64) {
        let mut off = 0u64;
        let mut out = Vec::with_capacity(self.declared.len());
        for d in &self.declared {
            let (v, next) = lay_one(d, base, off);
            out.push(v);
            off = next;
        }
        (out, off)
    }

    /// The declared variables laid out from [`CHECK_DATA_BASE`] (as [`Plan::layout`] would),
    /// brought up to date with `declared`: only the variables added since the last call are
    /// laid out, unless `declared` changed otherwise.
    fn checking(&mut self) -> &Checking {
        let c = &mut self.checking;
        let kept = c.vars.len() <= self.declared.len()
            && c.vars.last().map(|v| (&v.name, &v.ty))
                == c.vars
                    .len()
                    .checked_sub(1)
                    .map(|i| (&self.declared[i].name, &self.declared[i].ty));
        if !kept {
            *c = Checking::default();
        }
        for d in &self.declared[c.vars.len()..] {
            let (v, next) = lay_one(d, CHECK_DATA_BASE, c.end);
            c.by_name.insert(v.name.clone(), c.vars.len());
            c.vars.push(v);
            c.end = next;
        }
        c
    }

    /// `declare TYPE NAME [= INIT]`.
    pub fn declare(&mut self, session: &Session, text: &str) -> Result<&Declared, RequestError> {
        let checking = self.checking();
        let env = SessionEnv::for_session(session, &checking.vars)
            .ok_or(crate::Error::NothingOpen)?
            .with_index(&checking.by_name);
        let d = snippet::declare(text, &env)
            .map_err(|diags| RequestError::Snippet(render_all(&diags, text)))?;
        if checking.by_name.contains_key(&d.name) {
            return Err(RequestError::Redeclared(d.name));
        }
        self.declared.push(d);
        Ok(self.declared.last().expect("just pushed"))
    }

    /// Places the variable [`Plan::declare`] just added with `place` (typically written into
    /// a live process); when placing fails the declaration leaves the plan, as if never made.
    pub fn place_declared<R, E>(
        &mut self,
        place: impl FnOnce(&Plan) -> Result<R, E>,
    ) -> Result<R, E> {
        let placed = place(self);
        if placed.is_err() {
            self.declared.pop();
        }
        placed
    }

    /// `at POINT [if (COND)] { BODY }`: resolves and checks, then records the request.
    pub fn add(
        &mut self,
        session: &mut Session,
        spec: PointSpec,
        cond: Option<String>,
        body: String,
    ) -> Result<&Request, RequestError> {
        self.add_action(session, spec, Action::Snippet { cond, body })
    }

    /// A request for `action` at `spec`: resolves the functions, finds their points (refusing
    /// those that cannot be placed yet) and checks a snippet at each, then records it.
    pub fn add_action(
        &mut self,
        session: &mut Session,
        spec: PointSpec,
        action: Action,
    ) -> Result<&Request, RequestError> {
        let funcs = session.resolve_functions(&spec.func)?;
        // Breakpoint conditions are checked where they are placed, against the frame.
        let source = action.snippet_source();
        self.checking();
        let declared = &self.checking.vars;
        let index = &self.checking.by_name;
        let mut selected = Vec::new();
        let mut warnings = Vec::new();
        for r in &funcs {
            let module = session.module(r.module);
            let func = module.functions().get(r.func);
            // `main.cold` is not a function but the cold part of main, already in main's CFG;
            // a glob instrumenting both would patch the same bytes twice.
            if funcs.len() > 1 && is_fragment(&func.name) {
                continue;
            }
            let points = match point::find(module, r.func, &spec.at) {
                Ok(points) => points,
                // With a glob, functions without the point are simply not selected; a single
                // named function without it is an error.
                Err(why) if funcs.len() == 1 => {
                    return Err(RequestError::NoPoint(format!(
                        "{} has {why}",
                        func.display_name()
                    )))
                }
                Err(_) => continue,
            };
            if let Some(why) = points.iter().find_map(|p| p.placeable().err()) {
                return Err(RequestError::Unplaceable {
                    spec: spec.to_string(),
                    why,
                });
            }
            let Some(source) = &source else {
                selected.push(*r);
                continue;
            };
            // Each point is checked with its own facts (`$line`, `$callee`, `$return`'s
            // type differ from point to point); points with the same facts check alike.
            let mut checked: Vec<PointInfo> = Vec::new();
            for point in point_infos(module, r.func, &points, self.next_id + 1, declared) {
                let key = PointInfo {
                    file: point.file.as_ref().map(|_| String::new()),
                    line: point.line.map(|_| 0),
                    ..point.clone()
                };
                if checked.contains(&key) {
                    continue;
                }
                checked.push(key);
                let env = SessionEnv::new(module, Some(func), declared, point, 0)
                    .with_index(index)
                    .with_session(session);
                let (_, diags) = snippet::check_source(source, &env);
                if diags.iter().any(|d| d.is_error()) {
                    return Err(RequestError::Snippet(format!(
                        "in the snippet at {} ({}):\n{}",
                        spec,
                        func.display_name(),
                        render_all(&diags, source).trim_end()
                    )));
                }
            }
            if spec.at == Where::Entry {
                warnings.extend(shadowed(module, func, declared, source));
            }
            selected.push(*r);
        }
        if selected.is_empty() {
            return Err(RequestError::NoPoint(format!(
                "none of the {} functions matching `{}` has that point",
                funcs.len(),
                spec.func
            )));
        }
        Ok(self.push(spec, action, selected, warnings))
    }

    /// Records a request made elsewhere (measures), with the next id.
    pub(super) fn push(
        &mut self,
        spec: PointSpec,
        action: Action,
        funcs: Vec<FuncRef>,
        warnings: Vec<String>,
    ) -> &Request {
        self.next_id += 1;
        self.requests.push(Request {
            id: self.next_id,
            spec,
            action,
            funcs,
            warnings,
        });
        self.requests.last().expect("just pushed")
    }

    /// A fresh id from the same sequence as `at` requests (breakpoints share it, so that
    /// `delete ID` is never ambiguous).
    pub fn new_id(&mut self) -> u32 {
        self.next_id += 1;
        self.next_id
    }

    /// Places request `id` (already in the plan) with `place`, typically into a live process;
    /// when placing fails the request leaves the plan, as if never made, so nothing is left
    /// half-done and no caller writes the rollback.
    pub fn place<R, E>(
        &mut self,
        id: u32,
        place: impl FnOnce(&Plan) -> Result<R, E>,
    ) -> Result<R, E> {
        let placed = place(self);
        if placed.is_err() {
            let _ = self.delete(id);
        }
        placed
    }

    /// `delete ID`.
    pub fn delete(&mut self, id: u32) -> Result<Request, RequestError> {
        let i = self
            .requests
            .iter()
            .position(|r| r.id == id)
            .ok_or(RequestError::UnknownId(id))?;
        Ok(self.requests.remove(i))
    }
}

#[cfg(test)]
#[path = "request_tests.rs"]
mod tests;
