//! Functions that never return. Missing one makes analysis run past the call into whatever
//! follows, producing overlapping functions whose "exits" fire for the wrong function.
//!
//! Two sources: a list of library functions known never to return, matched by name (also as
//! `name@plt`), and functions whose own CFG has no way out but through such calls, found by
//! iterating to a fixpoint over the module.

/// Library functions that never return.
const KNOWN: &[&str] = &[
    "exit",
    "_exit",
    "_Exit",
    "quick_exit",
    "abort",
    "__assert_fail",
    "__assert_perror_fail",
    "__stack_chk_fail",
    "__stack_chk_fail_local",
    "__fortify_fail",
    "__chk_fail",
    "__libc_fatal",
    "__cxa_throw",
    "__cxa_rethrow",
    "__cxa_bad_cast",
    "__cxa_bad_typeid",
    "__cxa_throw_bad_array_new_length",
    "__cxa_pure_virtual",
    "__cxa_call_unexpected",
    "_Unwind_Resume",
    "longjmp",
    "_longjmp",
    "siglongjmp",
    "__longjmp_chk",
    "pthread_exit",
    "err",
    "errx",
    "verr",
    "verrx",
    "error_exit",
    "_ZSt9terminatev",
    "__ubsan_handle_builtin_unreachable",
];

/// True when `name` (raw, possibly with `@plt` or a symbol version) is a library function
/// known never to return.
pub fn is_known(name: &str) -> bool {
    let base = name.split('@').next().unwrap_or(name);
    KNOWN.contains(&base)
        // libstdc++'s std::__throw_logic_error(char const*) and friends.
        || base.starts_with("_ZSt19__throw_")
        || base.starts_with("_ZSt20__throw_")
        || base.starts_with("_ZSt21__throw_")
        || base.starts_with("_ZSt24__throw_")
        || base.starts_with("_ZSt25__throw_")
        || (base.starts_with("_ZSt") && base.contains("__throw_"))
}

#[cfg(test)]
mod tests {
    #[test]
    fn knows_the_usual_suspects() {
        assert!(super::is_known("exit"));
        assert!(super::is_known("abort@plt"));
        assert!(super::is_known("_ZSt20__throw_length_errorPKc"));
        assert!(!super::is_known("printf"));
    }
}
