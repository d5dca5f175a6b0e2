//! A point as users write it (`work entry`, `main call puts before`, `main loop loop_1
//! iter-begin`, `main block 0x401136`), parsed once here and printed back the same way. What
//! a specification finds in a function's CFG is [`super::find`]'s business.

use std::fmt;

use crate::addr::LinkAddr;

/// Where in a loop.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum LoopAt {
    /// On the edges entering the loop from outside, once per entry.
    Entry,
    /// On the edges leaving the loop.
    Exit,
    /// At the header, each iteration.
    IterBegin,
    /// On the back edges and exits, each iteration.
    IterEnd,
}

impl LoopAt {
    /// The word users write.
    pub fn as_str(self) -> &'static str {
        match self {
            LoopAt::Entry => "entry",
            LoopAt::Exit => "exit",
            LoopAt::IterBegin => "iter-begin",
            LoopAt::IterEnd => "iter-end",
        }
    }
}

/// Where in a function.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "kebab-case", tag = "kind")]
pub enum Where {
    /// `entry`.
    Entry,
    /// `exit`: every return, tail call and call that never returns.
    Exit,
    /// Before every call, or only calls to `callee`.
    CallBefore {
        /// The callee's name, raw or demangled, without `@plt`.
        callee: Option<String>,
    },
    /// After every call, or only calls to `callee`.
    CallAfter {
        /// The callee's name, raw or demangled, without `@plt`.
        callee: Option<String>,
    },
    /// `loop LOOP entry|exit|iter-begin|iter-end`.
    Loop {
        /// The loop's name (`loop_1.2`).
        name: String,
        /// Where in it.
        at: LoopAt,
    },
    /// On entry to the basic block starting at `addr`.
    Block {
        /// The block's first instruction.
        addr: LinkAddr,
    },
    /// Just before (or, with `after`, just after) the instruction at `addr`.
    Insn {
        /// The instruction.
        addr: LinkAddr,
        /// After it rather than before.
        after: bool,
    },
    /// On the CFG edge from the block starting at `from` to the block starting at `to`.
    Edge {
        /// The start of the block control leaves.
        from: LinkAddr,
        /// The start of the block control enters.
        to: LinkAddr,
    },
}

/// A point as the user names it: a function (name, `MODULE!NAME`, address or glob) and where.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct PointSpec {
    /// The function part, as written: a name, `MODULE!NAME`, an address or a glob.
    pub func: String,
    /// Where in each function.
    pub at: Where,
}

/// The grammar, for error messages and `help`.
pub const SHAPE: &str = "a point is `FUNC entry`, `FUNC exit`, `FUNC call [CALLEE] before|after`, \
     `FUNC loop LOOP entry|exit|iter-begin|iter-end`, `FUNC block ADDR`, \
     `FUNC insn ADDR before|after` or `FUNC edge FROM TO`";

fn addr(word: &str) -> Result<LinkAddr, String> {
    word.strip_prefix("0x")
        .and_then(|h| u64::from_str_radix(h, 16).ok())
        .map(LinkAddr)
        .ok_or_else(|| format!("`{word}` is not an address; write it in hex, `0x401136`"))
}

impl PointSpec {
    /// Parses the words of a point: see [`SHAPE`].
    pub fn parse(words: &[&str]) -> Result<PointSpec, String> {
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
            ["block", a] => Where::Block { addr: addr(a)? },
            ["insn", a, when] => Where::Insn {
                addr: addr(a)?,
                after: match *when {
                    "before" => false,
                    "after" => true,
                    other => {
                        return Err(format!(
                            "`{other}`: instructions are instrumented `before` or `after`"
                        ))
                    }
                },
            },
            ["edge", from, to] => Where::Edge {
                from: addr(from)?,
                to: addr(to)?,
            },
            [] => return Err(format!("`{func}` needs a point after it; {SHAPE}")),
            _ => return Err(format!("`{}` is not a point; {SHAPE}", words.join(" "))),
        };
        Ok(PointSpec {
            func: func.to_string(),
            at,
        })
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
            Where::Loop { name, at } => write!(f, "loop {name} {}", at.as_str()),
            Where::Block { addr } => write!(f, "block {addr}"),
            Where::Insn { addr, after } => {
                write!(f, "insn {addr} {}", if *after { "after" } else { "before" })
            }
            Where::Edge { from, to } => write!(f, "edge {from} {to}"),
        }
    }
}
