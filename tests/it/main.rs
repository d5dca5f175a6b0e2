//! gsh's integration tests, one binary with a module per area: the mutatees themselves, the
//! engine's function discovery graded against `nm`/`objdump`/`.symtab`, bad input, and gsh
//! end to end (script tests and command-line behaviour).

mod analysis;
mod architecture;
mod bad_input;
mod callee;
mod cli;
mod consult;
mod consult_loops;
mod coverage;
mod discovery;
mod dwarf;
mod instrument;
mod live;
mod loop_measure;
mod loop_points;
mod measure;
mod mutatees;
mod print;
mod process;
mod profile_loops;
mod prompt;
mod rewrite;
mod rewritten_measure;
mod scripts;
mod session;
mod sites;
mod stripped;
mod traps;
mod watch;
mod whole_program;
