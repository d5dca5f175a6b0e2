//! Test harness: builds mutatees and runs gsh.
