//! Random text as a snippet: parsed, checked against a small environment (declared variables
//! of several types, a pointer, a variadic function) and compiled. Must return code or
//! diagnostics, never panic.
#![no_main]

use engine::snippet::env::{MapEnv, PointInfo, PointKind, VarPlace};
use engine::snippet::types::{FnSig, Type};

fn env() -> MapEnv {
    let point = PointInfo {
        kind: PointKind::Exit,
        function: "work".into(),
        module: "app".into(),
        ..PointInfo::default()
    };
    MapEnv {
        point,
        ..MapEnv::default()
    }
    .var("n", Type::LONG, VarPlace::Absolute(0x60_1000))
    .var("i", Type::INT, VarPlace::Absolute(0x60_1008))
    .var("u", Type::ULONG, VarPlace::Absolute(0x60_1010))
    .var("d", Type::Double, VarPlace::Absolute(0x60_1018))
    .var("p", Type::Ptr(Box::new(Type::LONG)), VarPlace::Absolute(0x60_1020))
    .var("far", Type::LONG, VarPlace::Absolute(0x7fff_0000_0000))
    .func(
        "printf",
        0x40_1000,
        FnSig {
            ret: Type::INT,
            params: Some(vec![Type::Ptr(Box::new(Type::Int(engine::snippet::types::IntKind::Char)))]),
            variadic: true,
        },
    )
}

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else { return };
    let env = env();
    let _ = engine::snippet::parser::parse(text);
    if let Ok(compiled) = engine::snippet::compile(text, &env, 0x50_0000) {
        let _ = compiled.code.disassemble();
    }
});
