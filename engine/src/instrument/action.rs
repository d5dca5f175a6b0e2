//! What to do at a point: the one type every plan request's action is. A user's snippet, a
//! measure (gsh's own runtime operation for a [`Metric`]), block coverage, or a breakpoint.
//!
//! Extension point: call replacement (`replace FUNC call CALLEE with OTHER`) and rule-selected
//! adapter fragments become variants here. Every consumer matches [`Action`] exhaustively
//! (checking in [`super::request`], patch requests in [`super::build`], `show instrumentation`
//! through [`Action::describe`]), so a new variant makes the compiler name each place that must
//! say what it does.

#![warn(missing_docs)]

/// What a measuring request measures.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Metric {
    /// Calls (`count`).
    Count,
    /// Calls and inclusive wall time (`time`).
    Time,
    /// Calls and inclusive thread CPU time (`time --cpu`).
    TimeCpu,
    /// Calls and wall time per distinct call path (`profile`).
    Profile,
    /// Calls and thread CPU time per call path (`profile --cpu`).
    ProfileCpu,
    /// Calls per call path (`profile --count`).
    ProfileCount,
}

impl Metric {
    /// The command that asks for it, as `show instrumentation` shows it.
    pub fn command(self) -> &'static str {
        match self {
            Metric::Count => "count",
            Metric::Time => "time",
            Metric::TimeCpu => "time --cpu",
            Metric::Profile => "profile",
            Metric::ProfileCpu => "profile --cpu",
            Metric::ProfileCount => "profile --count",
        }
    }

    /// Does it need the function's exits too?
    pub fn has_exit(self) -> bool {
        !matches!(self, Metric::Count | Metric::ProfileCount)
    }

    /// Does it keep call paths?
    pub fn is_profile(self) -> bool {
        matches!(
            self,
            Metric::Profile | Metric::ProfileCpu | Metric::ProfileCount
        )
    }

    /// Does it measure time?
    pub fn is_timed(self) -> bool {
        !matches!(self, Metric::Count | Metric::ProfileCount)
    }
}

/// Which loops of a function a loop measure takes: as `loops FUNC` names them, by header
/// address, or all of them.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "kebab-case", tag = "by", content = "value")]
pub enum LoopSel {
    /// `loop_1.2`.
    Named(String),
    /// The loop whose header block starts at this address.
    Header(crate::addr::LinkAddr),
    /// `'*'`: every loop of the function.
    All,
}

impl LoopSel {
    /// The selector as users write it: `loop_1.2`, `0x401136` or `*`.
    pub fn parse(word: &str) -> LoopSel {
        if word == "*" {
            return LoopSel::All;
        }
        match word
            .strip_prefix("0x")
            .and_then(|h| u64::from_str_radix(h, 16).ok())
        {
            Some(a) => LoopSel::Header(crate::addr::LinkAddr(a)),
            None => LoopSel::Named(word.to_owned()),
        }
    }
}

impl std::fmt::Display for LoopSel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            LoopSel::Named(n) => write!(f, "{n}"),
            LoopSel::Header(a) => write!(f, "{a}"),
            LoopSel::All => write!(f, "*"),
        }
    }
}

/// What a measure is taken over.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "kebab-case", tag = "of")]
pub enum Measured {
    /// Each function: its calls (at its entry) and, for timers, the time to its exits.
    Function,
    /// Loops of each function: their entries and iterations (`count`), or the time from
    /// each entry to the exit that leaves the loop (`time`).
    Loop {
        /// Which loops.
        loops: LoopSel,
    },
    /// Each function's direct calls to `callee`: how often it calls it (`count`), or the
    /// time from each such call to its return (`time`): the time `callee` runs when called
    /// from these functions, one step of a call path (iPath). Named `FUNC call CALLEE`.
    Call {
        /// The function called, as users name it.
        callee: String,
    },
}

/// A measure: what is measured, over what.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct Measurement {
    /// What is measured.
    pub metric: Metric,
    /// Over what: functions or loops.
    pub of: Measured,
}

/// What a plan request does at its points.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "kebab-case", tag = "kind")]
pub enum Action {
    /// Run a user's snippet, only when `cond` holds if there is one.
    Snippet {
        /// A snippet expression; the body runs only when it is true.
        cond: Option<String>,
        /// The statements, as typed.
        body: String,
    },
    /// Measure the functions (at their entries, and exits for the metrics that time), or
    /// their loops (at their entries and headers, or entries and exits).
    Measure(Measurement),
    /// Count the executions of every basic block of the functions (`coverage`): one counter
    /// per block, incremented by a probe at the block's entry ([`super::coverage`]). It is not
    /// a [`Metric`]: its points are every block, not the function's entry, and its counters
    /// live in an array of their own rather than in the runtime's per-thread slots.
    Coverage {
        /// `--once`: each probe is taken out once its block has run (live only).
        once: bool,
    },
    /// Stop a live process, only when `cond` holds if there is one.
    Breakpoint {
        /// A snippet expression, checked at each point against the stopped frame.
        cond: Option<String>,
    },
}

impl Action {
    /// The metric, for a measure.
    pub fn metric(&self) -> Option<Metric> {
        match self {
            Action::Measure(m) => Some(m.metric),
            _ => None,
        }
    }

    /// The measure, for a measure.
    pub fn measurement(&self) -> Option<&Measurement> {
        match self {
            Action::Measure(m) => Some(m),
            _ => None,
        }
    }

    /// Does the action keep values for `report` (a measure or coverage)? A saved file then
    /// loads the runtime, which writes them at exit.
    pub fn reports(&self) -> bool {
        matches!(self, Action::Measure(_) | Action::Coverage { .. })
    }

    /// The condition, for the actions that have one.
    pub fn cond(&self) -> Option<&str> {
        match self {
            Action::Snippet { cond, .. } | Action::Breakpoint { cond } => cond.as_deref(),
            Action::Measure(_) | Action::Coverage { .. } => None,
        }
    }

    /// The snippet as compiled: the body, guarded by the condition when there is one.
    pub fn snippet_source(&self) -> Option<String> {
        match self {
            Action::Snippet { cond, body } => Some(snippet_source(cond.as_deref(), body)),
            _ => None,
        }
    }

    /// What `show instrumentation` prints in its Snippet column: the snippet on one line, or
    /// the command that made a measure or breakpoint.
    pub fn describe(&self) -> String {
        match self {
            Action::Snippet { body, .. } => body.split_whitespace().collect::<Vec<_>>().join(" "),
            Action::Measure(Measurement {
                metric,
                of: Measured::Function,
            }) => format!("({})", metric.command()),
            Action::Measure(Measurement {
                metric,
                of: Measured::Loop { loops },
            }) => format!("({} loop {loops})", metric.command()),
            Action::Measure(Measurement {
                metric,
                of: Measured::Call { callee },
            }) => format!("({} call {callee})", metric.command()),
            Action::Coverage { once: false } => "(coverage)".to_owned(),
            Action::Coverage { once: true } => "(coverage --once)".to_owned(),
            Action::Breakpoint { .. } => "(breakpoint)".to_owned(),
        }
    }
}

/// `if (COND) { BODY }`, or `BODY`.
pub fn snippet_source(cond: Option<&str>, body: &str) -> String {
    match cond {
        Some(c) => format!("if ({c}) {{ {body} }}"),
        None => body.to_owned(),
    }
}
