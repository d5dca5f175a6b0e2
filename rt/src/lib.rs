//! The runtime library that gsh loads into instrumented programs.
//!
//! It exports a C ABI whose layout the code generator depends on. For now it only carries the
//! layout version: trampolines, counters and the trap handler arrive with the instrumentation
//! issues. Nothing here allocates or locks, and nothing ever will on the hot path.

/// Version of the layout shared between the code generator and this library. Bumped whenever a
/// field that generated code reaches into moves.
#[no_mangle]
pub static GSH_RT_ABI_VERSION: u32 = 1;

/// Returns [`GSH_RT_ABI_VERSION`]; lets the mutator check what it loaded.
#[no_mangle]
pub extern "C" fn gsh_rt_abi_version() -> u32 {
    GSH_RT_ABI_VERSION
}

#[cfg(test)]
mod tests {
    #[test]
    fn abi_version_is_exported() {
        assert_eq!(super::gsh_rt_abi_version(), super::GSH_RT_ABI_VERSION);
    }
}
