//! The writers in `rt-abi` produce the bytes the structs read: an encoded descriptor seen
//! through `Descriptor`, an unwind entry's bytes seen through `UnwindEntry`.

use std::sync::atomic::Ordering::Relaxed;

use gsh_rt_abi::descriptor::{self, Descriptor, HEADER_SIZE, MAGIC, VERSION};
use gsh_rt_abi::exports::Event;
use gsh_rt_abi::layout::{UnwindEntry, UNWIND_BASE_RBP};

/// `bytes` copied into 64-aligned memory, as the data segment holds them.
#[repr(C, align(64))]
struct Aligned([u8; 512]);

#[test]
fn an_encoded_descriptor_reads_back_through_the_struct() {
    let entry = UnwindEntry {
        ra: 0x1234,
        cfa_off: 24,
        base: UNWIND_BASE_RBP,
        reserved: 0,
        rbp_save: -16,
    };
    let unwind = [entry.to_le_bytes(), entry.to_le_bytes()].concat();
    let bytes = descriptor::encode(7, b"/tmp/out.json", b"{}", &unwind).expect("fits");
    let mut buf = Box::new(Aligned([0; 512]));
    buf.0[..bytes.len()].copy_from_slice(&bytes);
    // SAFETY: 512 aligned bytes hold the 128-byte header; every bit pattern is valid for it.
    let d = unsafe { &*buf.0.as_ptr().cast::<Descriptor>() };
    assert_eq!(d.magic, MAGIC);
    assert_eq!(d.version, VERSION);
    assert_eq!(d.slots, 7);
    assert_eq!(d.tls_offset.load(Relaxed), 0, "the runtime's to fill");
    let at = |off: u32, len: u32| &bytes[off as usize..(off + len) as usize];
    assert_eq!(at(d.output_off, d.output_len), b"/tmp/out.json");
    assert_eq!(bytes[(d.output_off + d.output_len) as usize], 0, "NUL");
    assert_eq!(at(d.meta_off, d.meta_len), b"{}");
    assert!(d.output_off as usize >= HEADER_SIZE);
    assert_eq!(d.unwind_off % 16, 0);
    assert_eq!(d.unwind_count, 2);
    // SAFETY: the table lies inside the buffer (checked by the slice above), 16-aligned.
    let e = unsafe {
        buf.0
            .as_ptr()
            .add(d.unwind_off as usize + 16)
            .cast::<UnwindEntry>()
            .read()
    };
    assert_eq!(e, entry);
    let cell = descriptor::fn_at(Event::PathCount) as usize;
    assert_eq!(
        cell,
        std::ptr::addr_of!(d.fns[7]) as usize - d as *const _ as usize
    );
    assert_eq!(
        descriptor::TLS_OFFSET_AT as usize,
        std::ptr::addr_of!(d.tls_offset) as usize - d as *const _ as usize
    );
}

#[test]
fn no_unwind_table_means_offset_zero() {
    let bytes = descriptor::encode(1, b"", b"", &[]).expect("fits");
    assert_eq!(&bytes[112..120], &[0; 8]);
    assert_eq!(bytes.len(), HEADER_SIZE + 2);
}

#[test]
fn event_names_are_distinct_and_in_descriptor_order() {
    for (k, e) in Event::ALL.into_iter().enumerate() {
        assert_eq!(e.index(), k);
        assert_eq!(e.bounded(), format!("{}_tsc", e.name()));
    }
    let mut names: Vec<&str> = gsh_rt_abi::exports::all().map(|e| e.0).collect();
    let n = names.len();
    names.sort_unstable();
    names.dedup();
    assert_eq!(names.len(), n, "an export listed twice");
}

#[test]
fn coverage_counters_come_last_zeroed_and_aligned() {
    let bytes = descriptor::encode_with_coverage(1, b"/o", b"{}", &[], 5).expect("fits");
    let mut buf = Box::new(Aligned([0; 512]));
    buf.0[..bytes.len()].copy_from_slice(&bytes);
    // SAFETY: 512 aligned bytes hold the 128-byte header; every bit pattern is valid for it.
    let d = unsafe { &*buf.0.as_ptr().cast::<Descriptor>() };
    assert_eq!(d.coverage_count, 5);
    assert_eq!(d.coverage_off, descriptor::coverage_off(&bytes));
    assert_eq!(d.coverage_off % 8, 0);
    assert_eq!(bytes.len(), d.coverage_off as usize + 5 * 8, "last");
    assert!(bytes[d.coverage_off as usize..].iter().all(|&b| b == 0));
    // Without counters the fields stay zero, as in files saved before they existed.
    let plain = descriptor::encode(1, b"/o", b"{}", &[]).expect("fits");
    assert_eq!(descriptor::coverage_off(&plain), 0);
    assert_eq!(&plain[120..128], &[0; 8]);
}
