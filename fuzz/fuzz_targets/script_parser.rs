//! Random text as a gsh script: splitting into commands, and the prompt's "needs more input"
//! check, must return, never panic or loop.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else { return };
    let _ = gsh::script::split(text);
    let _ = gsh::script::needs_more(text);
});
