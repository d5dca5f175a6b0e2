//! What users ask for: points named in the shell's words (`work entry`, `main call puts
//! before`, `main loop loop_1 iter-begin`), and the plan of declared variables and snippet
//! requests that `save` (or a live process) turns into trampolines.
//!
//! A request is checked when it is made: its functions resolve, each has the points asked for,
//! and the snippet type-checks at every one of them, so `at` fails at once with a diagnostic
//! rather than at `save`.

use std::fmt;

use crate::cfg::Exit;
use crate::session::{FuncRef, Session};
use crate::snippet::diag::render_all;
use crate::snippet::env::{PointInfo, PointKind};
use crate::snippet::{self, Declared};

use super::env::{Declaration, SessionEnv};
use super::save::{point_info, points_of};

/// Where in a loop.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum LoopAt {
    Entry,
    Exit,
    IterBegin,
    IterEnd,
}

/// Where in a function.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "kebab-case", tag = "kind")]
pub enum Where {
    Entry,
    Exit,
    /// Before every call, or only calls to `callee`.
    CallBefore {
        callee: Option<String>,
    },
    /// After every call, or only calls to `callee`.
    CallAfter {
        callee: Option<String>,
    },
    Loop {
        name: String,
        at: LoopAt,
    },
}

/// A point as the user names it: a function (name, `MODULE!NAME`, address or glob) and where.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct PointSpec {
    pub func: String,
    pub at: Where,
}

impl PointSpec {
    /// Parses `FUNC entry`, `FUNC exit`, `FUNC call [CALLEE] before|after`,
    /// `FUNC loop LOOP entry|exit|iter-begin|iter-end`.
    pub fn parse(words: &[&str]) -> Result<PointSpec, String> {
        const SHAPE: &str = "a point is `FUNC entry`, `FUNC exit`, `FUNC call [CALLEE] \
                             before|after` or `FUNC loop LOOP entry|exit|iter-begin|iter-end`";
        let (func, rest) = words
            .split_first()
            .ok_or_else(|| format!("missing point; {SHAPE}"))?;
        let at = match rest {
            ["entry"] => Where::Entry,
            ["exit"] => Where::Exit,
            ["call", when] | ["call", _, when] => {
                let callee = (rest.len() == 3).then(|| rest[1].to_string());
                match *when {
                    "before" => Where::CallBefore { callee },
                    "after" => Where::CallAfter { callee },
                    other => {
                        return Err(format!(
                            "`{other}`: calls are instrumented `before` or `after`"
                        ))
                    }
                }
            }
            ["loop", name, at] => Where::Loop {
                name: name.to_string(),
                at: match *at {
                    "entry" => LoopAt::Entry,
                    "exit" => LoopAt::Exit,
                    "iter-begin" => LoopAt::IterBegin,
                    "iter-end" => LoopAt::IterEnd,
                    other => {
                        return Err(format!(
                            "`{other}`: a loop point is entry, exit, iter-begin or iter-end"
                        ))
                    }
                },
            },
            [] => return Err(format!("`{func}` needs a point after it; {SHAPE}")),
            _ => return Err(format!("`{}` is not a point; {SHAPE}", words.join(" "))),
        };
        Ok(PointSpec {
            func: func.to_string(),
            at,
        })
    }

    /// The snippet point kind, which decides what `$0..$5` and `$return` mean.
    pub fn kind(&self) -> PointKind {
        match self.at {
            Where::Entry => PointKind::Entry,
            Where::Exit => PointKind::Exit,
            Where::CallBefore { .. } => PointKind::CallBefore,
            Where::CallAfter { .. } => PointKind::CallAfter,
            Where::Loop { .. } => PointKind::Other,
        }
    }
}

impl fmt::Display for PointSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} ", self.func)?;
        match &self.at {
            Where::Entry => write!(f, "entry"),
            Where::Exit => write!(f, "exit"),
            Where::CallBefore { callee } | Where::CallAfter { callee } => {
                write!(f, "call ")?;
                if let Some(c) = callee {
                    write!(f, "{c} ")?;
                }
                let when = if matches!(self.at, Where::CallBefore { .. }) {
                    "before"
                } else {
                    "after"
                };
                write!(f, "{when}")
            }
            Where::Loop { name, at } => {
                let at = match at {
                    LoopAt::Entry => "entry",
                    LoopAt::Exit => "exit",
                    LoopAt::IterBegin => "iter-begin",
                    LoopAt::IterEnd => "iter-end",
                };
                write!(f, "loop {name} {at}")
            }
        }
    }
}

/// Why a request was refused.
#[derive(Debug, thiserror::Error)]
pub enum RequestError {
    /// The function part did not resolve.
    #[error(transparent)]
    Engine(#[from] crate::Error),
    /// A function has no point of the kind asked for.
    #[error("{0}")]
    NoPoint(String),
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

/// One `at` request.
#[derive(Clone, Debug, serde::Serialize)]
pub struct Request {
    pub id: u32,
    pub spec: PointSpec,
    pub cond: Option<String>,
    pub body: String,
    /// The functions the spec resolved to.
    #[serde(skip)]
    pub funcs: Vec<FuncRef>,
    /// Things worth telling the user that do not stop the request.
    pub warnings: Vec<String>,
}

impl Request {
    /// The snippet as compiled: the body, guarded by the condition when there is one.
    pub fn source(&self) -> String {
        snippet_source(self.cond.as_deref(), &self.body)
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

/// What the snippet constants say at each point of `func` that `spec` names: the same facts
/// `save` and a live process compile with ([`point_info`]). Loop points, which are not
/// enumerated yet, get the loop's name and its header's source line.
fn point_infos(
    module: &crate::session::Module,
    func: crate::symbols::FuncId,
    spec: &PointSpec,
    id: u32,
    declared: &[Declaration],
) -> Vec<PointInfo> {
    let f = module.functions().get(func);
    let base = SessionEnv::new(module, Some(f), declared, PointInfo::default(), 0);
    if let Where::Loop { name, .. } = &spec.at {
        let analysis = module.analysis().function(func);
        let Some(l) = analysis.loops.by_name(name) else {
            return Vec::new();
        };
        let header = analysis.cfg.block(l.header).start;
        let loc = module.debug_info().and_then(|d| d.location(header));
        return vec![PointInfo {
            kind: PointKind::Other,
            function: f.display_name().to_owned(),
            module: module.name.clone(),
            file: loc.as_ref().map(|l| l.file.clone()),
            line: loc.map(|l| l.line),
            loop_name: Some(l.name.clone()),
            id,
            ..PointInfo::default()
        }];
    }
    let probe = Request {
        id,
        spec: spec.clone(),
        cond: None,
        body: String::new(),
        funcs: Vec::new(),
        warnings: Vec::new(),
    };
    points_of(module, &probe, func)
        .unwrap_or_default()
        .iter()
        .map(|p| point_info(module, &base, &probe, p))
        .collect()
}

/// True for the parts gcc and clang split off a function (`f.cold`, `f.cold.1`).
fn is_fragment(name: &str) -> bool {
    name.contains(".cold")
}

fn snippet_source(cond: Option<&str>, body: &str) -> String {
    match cond {
        Some(c) => format!("if ({c}) {{ {body} }}"),
        None => body.to_owned(),
    }
}

/// Declared variables and snippet requests, in the order they were made.
#[derive(Debug, Default)]
pub struct Plan {
    pub declared: Vec<Declared>,
    pub requests: Vec<Request>,
    next_id: u32,
}

/// Where declared variables sit while snippets are only checked, not compiled: far from any
/// code, so checking never depends on a real layout.
const CHECK_DATA_BASE: u64 = 0x7f00_0000_0000;

impl Plan {
    /// The declared variables laid out from `base`, each aligned to its size.
    pub fn layout(&self, base: u64) -> (Vec<Declaration>, u64) {
        let mut off = 0u64;
        let mut out = Vec::new();
        for d in &self.declared {
            let size = d.ty.size().max(1);
            let align = size.next_power_of_two().min(16);
            off = off.next_multiple_of(align);
            out.push(Declaration {
                name: d.name.clone(),
                ty: d.ty.clone(),
                addr: base + off,
            });
            off += size;
        }
        (out, off)
    }

    /// `declare TYPE NAME [= INIT]`.
    pub fn declare(&mut self, session: &Session, text: &str) -> Result<&Declared, RequestError> {
        let (declared, _) = self.layout(CHECK_DATA_BASE);
        let env = SessionEnv::for_session(session, &declared).ok_or(crate::Error::NothingOpen)?;
        let d = snippet::declare(text, &env)
            .map_err(|diags| RequestError::Snippet(render_all(&diags, text)))?;
        if self.declared.iter().any(|x| x.name == d.name) {
            return Err(RequestError::Redeclared(d.name));
        }
        self.declared.push(d);
        Ok(self.declared.last().expect("just pushed"))
    }

    /// `at POINT [if (COND)] { BODY }`: resolves and checks, then records the request.
    pub fn add(
        &mut self,
        session: &mut Session,
        spec: PointSpec,
        cond: Option<String>,
        body: String,
    ) -> Result<&Request, RequestError> {
        let funcs = session.resolve_functions(&spec.func)?;
        let source = snippet_source(cond.as_deref(), &body);
        let (declared, _) = self.layout(CHECK_DATA_BASE);
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
            let analysis = module.analysis().function(r.func);
            let table = module.functions();
            let callee_matches =
                |callee: &Option<String>, target: Option<crate::LinkAddr>| match callee {
                    None => true,
                    Some(want) => target.and_then(|t| table.at(t)).is_some_and(|f| {
                        f.name == *want
                            || f.name.strip_suffix("@plt") == Some(want)
                            || f.display_name() == want
                    }),
                };
            let has_point = match &spec.at {
                Where::Entry => true,
                Where::Exit => analysis.cfg.blocks.iter().any(|b| {
                    matches!(
                        b.exit,
                        Some(
                            Exit::Return
                                | Exit::TailCall { .. }
                                | Exit::NoReturnCall { .. }
                                | Exit::Indirect
                        )
                    )
                }),
                Where::CallBefore { callee } | Where::CallAfter { callee } => analysis
                    .cfg
                    .calls()
                    .any(|c| callee_matches(callee, c.target)),
                Where::Loop { name, .. } => analysis.loops.by_name(name).is_some(),
            };
            if !has_point {
                // With a glob, functions without the point are simply not selected; a single
                // named function without it is an error.
                if funcs.len() == 1 {
                    let what = match &spec.at {
                        Where::Entry => "no entry point".to_owned(),
                        Where::Exit => "no exit point (it never returns)".to_owned(),
                        Where::CallBefore { callee: Some(c) }
                        | Where::CallAfter { callee: Some(c) } => {
                            format!("no call to `{c}`")
                        }
                        Where::CallBefore { .. } | Where::CallAfter { .. } => "no calls".to_owned(),
                        Where::Loop { name, .. } => {
                            format!(
                                "no loop named `{name}` (`loops {}` lists them)",
                                func.display_name()
                            )
                        }
                    };
                    return Err(RequestError::NoPoint(format!(
                        "{} has {what}",
                        func.display_name()
                    )));
                }
                continue;
            }
            // Each point is checked with its own facts (`$line`, `$callee`, `$return`'s
            // type differ from point to point); points with the same facts check alike.
            let mut checked: Vec<PointInfo> = Vec::new();
            for point in point_infos(module, r.func, &spec, self.next_id + 1, &declared) {
                let key = PointInfo {
                    file: point.file.as_ref().map(|_| String::new()),
                    line: point.line.map(|_| 0),
                    ..point.clone()
                };
                if checked.contains(&key) {
                    continue;
                }
                checked.push(key);
                let env =
                    SessionEnv::new(module, Some(func), &declared, point, 0).with_session(session);
                let (_, diags) = snippet::check_source(&source, &env);
                if diags.iter().any(|d| d.is_error()) {
                    return Err(RequestError::Snippet(format!(
                        "in the snippet at {} ({}):\n{}",
                        spec,
                        func.display_name(),
                        render_all(&diags, &source).trim_end()
                    )));
                }
            }
            if spec.kind() == PointKind::Entry {
                warnings.extend(shadowed(module, func, &declared, &source));
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
        self.next_id += 1;
        self.requests.push(Request {
            id: self.next_id,
            spec,
            cond,
            body,
            funcs: selected,
            warnings,
        });
        Ok(self.requests.last().expect("just pushed"))
    }

    /// A fresh id from the same sequence as `at` requests (breakpoints share it, so that
    /// `delete ID` is never ambiguous).
    pub fn new_id(&mut self) -> u32 {
        self.next_id += 1;
        self.next_id
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
