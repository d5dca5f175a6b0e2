//! The snippet compiler: what users write at an instrumentation point, in a subset of C, from
//! text to checked program to x86-64 machine code.

pub mod ast;
pub mod diag;
pub mod lexer;
pub mod parser;

#[cfg(test)]
mod parser_tests;
