//! Callee effects of gsh's runtime library: the `_tsc` entry points that profiling trampolines
//! call must be analysable by `engine::callee` ("bounded": only GPRs, legacy-SSE `xmm`s and
//! flags written, nothing leaving the module), in the debug build the tests use and in the
//! release build when one exists, so that a trampoline can save only what they write instead
//! of the whole vector state.

use std::path::{Path, PathBuf};

use engine::callee::{self, CalleeEffects, Unknown};
use engine::Session;
use gsh_rt_abi::exports::{self, Event};
use gsh_tests::{target_dir, Gsh};

/// The runtime's entry points meant to be called with only the registers they write saved:
/// the events' bounded variants, and the loop along call paths' (`consult`'s).
fn bounded() -> Vec<&'static str> {
    Event::ALL
        .map(Event::bounded)
        .into_iter()
        .chain([exports::PATH_LOOP_ENTER_TSC])
        .collect()
}

/// Entry points that may read `CLOCK_MONOTONIC` or create the thread's block through libc:
/// reported for information, not required to be bounded.
const OTHERS: [&str; 6] = [
    "gsh_rt_count",
    "gsh_rt_enter",
    "gsh_rt_exit",
    "gsh_rt_path_enter",
    "gsh_rt_path_exit",
    "gsh_rt_thread",
];

/// The effects of `names` in the library at `so`, printed one per line.
fn effects(so: &Path, names: &[&str]) -> Vec<(String, Result<CalleeEffects, Unknown>)> {
    let mut session = Session::new();
    let id = session
        .open(so)
        .unwrap_or_else(|e| panic!("cannot open {}: {e}", so.display()));
    let module = session.module(id);
    names
        .iter()
        .map(|&name| {
            let f = module
                .functions()
                .by_name(name)
                .next()
                .unwrap_or_else(|| panic!("{name} is not exported by {}", so.display()));
            let fx = callee::effects(module, f.addr);
            match &fx {
                Ok(fx) => println!("{name}: {fx}"),
                Err(why) => println!(
                    "{name}: unknown: {why} (in {})",
                    module.describe(why.at()).unwrap_or_default()
                ),
            }
            (name.to_owned(), fx)
        })
        .collect()
}

/// Asserts every `_tsc` entry point of `so` is bounded and writes no vector register beyond
/// xmm0..15 (the analysis rejects anything else).
fn assert_bounded(so: &Path) {
    println!("{}", so.display());
    let mut unbounded = Vec::new();
    for (name, fx) in effects(so, &bounded()) {
        match fx {
            Ok(fx) => assert!(fx.functions >= 1 && fx.instructions > 0, "{name}: {fx}"),
            Err(why) => unbounded.push(format!("{name}: {why} (at {:#x})", why.at().0)),
        }
    }
    effects(so, &OTHERS);
    assert!(
        unbounded.is_empty(),
        "{}: entry points that must be bounded are not:\n{}",
        so.display(),
        unbounded.join("\n")
    );
}

/// `libgsh_rt.so` of the tests' own profile, built beside the gsh binary.
fn profile_library() -> PathBuf {
    let so = Gsh::binary()
        .parent()
        .expect("gsh's directory")
        .join("libgsh_rt.so");
    assert!(so.is_file(), "{} was not built with gsh", so.display());
    so
}

#[test]
fn tsc_entry_points_are_bounded() {
    assert_bounded(&profile_library());
}

#[test]
fn tsc_entry_points_are_bounded_in_the_release_build() {
    let so = target_dir().join("release/libgsh_rt.so");
    if !so.is_file() {
        eprintln!(
            "NOT CHECKED: {} does not exist; build it with `cargo build --release -p gsh-rt` \
             to check the release runtime too",
            so.display()
        );
        return;
    }
    assert_bounded(&so);
}
