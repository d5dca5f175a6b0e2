//! The exit writer: counts, times and paths from two threads (one exited) written as JSON and
//! parsed back, including a timed activation still open at the time of writing; the reader's
//! types in `rt-abi` read it without losing a field.

mod common;

use gsh_rt::events::{gsh_rt_count, gsh_rt_enter, gsh_rt_exit};
use gsh_rt::output::{gsh_rt_set_output, gsh_rt_write};
use gsh_rt::path::{gsh_rt_path_enter, gsh_rt_path_exit};
use serde_json::Value;

#[test]
fn written_output_parses_back() {
    // This thread has its block before the worker starts, so the worker's stays dead (a
    // thread starting after it ended would have taken it).
    for _ in 0..7 {
        gsh_rt_count(3);
    }
    std::thread::spawn(|| {
        for _ in 0..5 {
            gsh_rt_count(3);
        }
    })
    .join()
    .expect("worker");
    gsh_rt_enter(4, 0x8000);
    std::thread::sleep(std::time::Duration::from_millis(5));
    gsh_rt_exit(4, 0x8000);
    // A fake frame-pointer stack: ra 0x401234, then caller frame [rbp]=0, [rbp+8]=0x405678.
    let mut stack = vec![0u64; 64];
    let base = stack.as_ptr() as u64;
    stack[8] = 0x40_1234;
    stack[12] = 0;
    stack[13] = 0x40_5678;
    gsh_rt_path_enter(6, base + 64, base + 96);
    gsh_rt_path_exit(6, base + 64);
    // Still open when written: `main` under `time main` never returns before exit().
    gsh_rt_enter(5, 0x9000);
    std::thread::sleep(std::time::Duration::from_millis(5));

    let dir = std::env::temp_dir().join(format!("gsh-rt-out-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let file = dir.join("out.json");
    let c = std::ffi::CString::new(file.to_str().expect("utf-8 path")).expect("path");
    // SAFETY: NUL-terminated strings.
    assert_eq!(unsafe { gsh_rt_set_output(c.as_ptr()) }, 0);
    assert_eq!(unsafe { gsh_rt_write(c.as_ptr()) }, 0);
    let text = std::fs::read_to_string(&file).expect("output file");
    std::fs::remove_dir_all(&dir).expect("cleanup");
    let v: Value = serde_json::from_str(&text).expect("valid JSON");
    // The reader's types (rt-abi) read every field and lose none: written back, the same JSON.
    let typed: gsh_rt_abi::results::Output<Value> =
        serde_json::from_str(&text).expect("the results types read the runtime's output");
    assert_eq!(serde_json::to_value(&typed).expect("serialise"), v);

    assert_eq!(v["abi"], gsh_rt::ABI_VERSION);
    let slot = |n: u64| {
        v["slots"]
            .as_array()
            .expect("slots")
            .iter()
            .find(|s| s["slot"] == n)
            .cloned()
    };
    assert_eq!(slot(3).expect("slot 3")["count"], 12);
    let timed = slot(4).expect("slot 4");
    assert_eq!(timed["count"], 1);
    assert!(timed["ns"].as_u64().expect("ns") >= 5_000_000);
    let open = slot(5).expect("slot 5");
    assert!(
        open["ns"].as_u64().expect("ns") >= 5_000_000,
        "open activation credited"
    );

    let threads = v["threads"].as_array().expect("threads");
    assert!(threads
        .iter()
        .any(|t| t["alive"] == false && t["slots"][0]["count"] == 5));
    let paths: Vec<&Value> = threads
        .iter()
        .flat_map(|t| t["paths"].as_array().expect("paths"))
        .collect();
    assert_eq!(paths.len(), 1);
    assert_eq!(paths[0]["slot"], 6);
    assert_eq!(paths[0]["count"], 1);
    assert_eq!(paths[0]["ras"], serde_json::json!(["0x401234", "0x405678"]));
    gsh_rt_exit(5, 0x9000);
}
