//! Demangling of C++ (Itanium) and Rust names. Names keep their raw form; the demangled form
//! is stored beside it so searches can match either.

/// The demangled form of `name`, or `None` when it is not a mangled name. A `@plt` or symbol
/// version suffix (`_ZN3foo3barEv@plt`) is kept on the demangled name.
pub fn demangle(name: &str) -> Option<String> {
    let (base, suffix) = match name.find('@') {
        Some(i) => name.split_at(i),
        None => (name, ""),
    };
    if !base.starts_with("_Z") && !base.starts_with("_R") {
        return None;
    }
    if let Ok(rust) = rustc_demangle::try_demangle(base) {
        return Some(format!("{rust:#}{suffix}"));
    }
    let sym = cpp_demangle::Symbol::new(base).ok()?;
    let options = cpp_demangle::DemangleOptions::new();
    sym.demangle_with_options(&options)
        .ok()
        .map(|d| format!("{d}{suffix}"))
}

#[cfg(test)]
mod tests {
    use super::demangle;

    #[test]
    fn demangles_cpp_rust_and_leaves_c_alone() {
        assert_eq!(demangle("_ZN3foo3barEi").as_deref(), Some("foo::bar(int)"));
        assert_eq!(demangle("_Z4workv@plt").as_deref(), Some("work()@plt"));
        assert_eq!(
            demangle("_ZN4core3fmt5write17h0123456789abcdefE").as_deref(),
            Some("core::fmt::write")
        );
        assert_eq!(demangle("main"), None);
        assert_eq!(demangle("_Zgarbage"), None);
    }
}
