//! The engine's error type. Every variant reads as a sentence after `gsh: `, names the thing at
//! fault, and, where there is one, the fix.

#![warn(missing_docs)]

use std::path::PathBuf;

/// Errors from reading and analysing binaries.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The file could not be opened or read.
    #[error("cannot read {path}: {source}")]
    Io {
        /// The file gsh tried to read.
        path: PathBuf,
        /// What the operating system said.
        #[source]
        source: std::io::Error,
    },
    /// The file is not an ELF file at all.
    #[error("{path}: not an ELF file")]
    NotElf {
        /// The file that was opened.
        path: PathBuf,
    },
    /// An ELF file for a machine or class gsh does not handle.
    #[error("{path}: {what} ELF file; gsh handles only 64-bit x86-64 ELF")]
    Unsupported {
        /// The file that was opened.
        path: PathBuf,
        /// What it is instead (`32-bit`, `AArch64`...).
        what: String,
    },
    /// An ELF file whose structures are truncated or inconsistent.
    #[error("{path}: malformed ELF: {detail}")]
    Malformed {
        /// The file that was opened.
        path: PathBuf,
        /// Which structure is wrong, and how.
        detail: String,
    },
    /// No function matched what the user named.
    #[error("no function matches `{name}`{hint}")]
    UnknownFunction {
        /// The name or pattern as typed.
        name: String,
        /// A clause starting `; ` that suggests a near name or where to look (`; did you mean ...?`).
        hint: String,
    },
    /// No module matched what the user named.
    #[error("no module named `{name}`; `show modules` lists them")]
    UnknownModule {
        /// The module name as typed.
        name: String,
    },
    /// No variable or type matched what the user named.
    #[error("nothing named `{name}`{hint}")]
    UnknownName {
        /// The name as typed.
        name: String,
        /// A clause starting `; ` that suggests a near name or where to look.
        hint: String,
    },
    /// A glob or regular expression the user typed does not parse.
    #[error("bad pattern `{pattern}`: {detail}")]
    BadPattern {
        /// The pattern as typed.
        pattern: String,
        /// The glob or regex parser's complaint.
        detail: String,
    },
    /// An address outside every mapped section of the module.
    #[error("address {addr} is not in any section of {module}")]
    BadAddress {
        /// The address as typed.
        addr: String,
        /// The module's name.
        module: String,
    },
    /// No binary is open yet.
    #[error("no file is open; use `open FILE` first")]
    NothingOpen,
}

/// Result with the engine's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;
