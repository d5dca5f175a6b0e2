//! gsh's test harness: builds the C and C++ mutatees under `tests/mutatees/` with the machine's
//! gcc once per test run ([`Mutatee`], [`Variant`]), runs the `gsh` binary with a time limit
//! ([`Gsh`], [`gsh_c`], [`gsh_json`]), and reads ground truth about a binary from outside the
//! engine (`nm`, `objdump`, a direct `.symtab` read) so tests never grade the engine with its
//! own answers ([`truth`]).
//!
//! Everything panics with a message naming the command and its stderr when the machine's tools
//! fail: a test that cannot build its mutatee must fail loudly, never skip.

mod command;
pub mod ground_truth;
mod gsh;
mod mutatee;
mod packages;
mod paths;
mod program;
pub mod pty;
pub mod server;
pub mod switches;
pub mod truth;
pub mod whole;

pub use command::run_tool;
pub use gsh::{gsh_c, gsh_json, gsh_json_all, json_stream, Gsh, GshOutput};
pub use mutatee::{Mutatee, Variant, LIBRARIES, MUTATEES};
pub use packages::ensure_package;
pub use paths::{mutatee_source_dir, scripts_dir, target_dir, workspace_root};
pub use program::run_program;
