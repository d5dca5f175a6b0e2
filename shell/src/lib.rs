//! The gsh shell: the command language, its REPL and its output, over the engine.
//!
//! `main.rs` only calls [`cli::main`]. Command text is split by [`script`], dispatched through
//! the one command table in [`commands`] against the state in [`context`], and printed by
//! [`output`]. [`repl`] is thin glue over rustyline; [`docgen`] writes help, the man page and
//! the shell completions from the same table.

pub mod cli;
pub mod commands;
pub mod context;
pub mod docgen;
pub mod output;
pub mod progress;
pub mod repl;
pub mod script;
pub mod target;
