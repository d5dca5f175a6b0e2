//! Slot bookkeeping: slots freed by deleted or failed requests are handed out again (and
//! marked for zeroing), so repeated big requests never run out.

use super::*;

fn function_probe() -> Probe {
    Probe {
        loop_name: None,
        counted: Counted::Entries,
        at_exit: false,
    }
}

fn claim(m: &mut Measure, id: u32, func: usize) -> Result<u32, MeasureError> {
    m.slot(
        || format!("f{func}"),
        id,
        ModuleId(0),
        FuncId(func as u32),
        Metric::Count,
        &function_probe(),
    )
}

#[test]
fn a_loop_gets_a_slot_for_entries_and_one_for_iterations_and_its_exits_share_the_first() {
    let mut m = Measure::default();
    let probe = |l: &str, counted, at_exit| Probe {
        loop_name: Some(l.into()),
        counted,
        at_exit,
    };
    let mut at = |p: Probe| {
        m.slot(|| "f".into(), 1, ModuleId(0), FuncId(3), Metric::Count, &p)
            .expect("room")
    };
    let function = at(function_probe());
    let entries = at(probe("loop_1", Counted::Entries, false));
    let exits = at(probe("loop_1", Counted::Entries, true));
    let iterations = at(probe("loop_1", Counted::Iterations, false));
    let inner = at(probe("loop_1.1", Counted::Entries, false));
    assert_eq!(entries, exits);
    let mut all = vec![function, entries, iterations, inner];
    all.sort_unstable();
    all.dedup();
    assert_eq!(all.len(), 4, "{all:?}");
    let c = &m.counters[2];
    assert_eq!(
        (c.loop_name.as_deref(), c.counted),
        (Some("loop_1"), Counted::Iterations)
    );
}

#[test]
fn slots_freed_by_a_request_are_reused_and_must_be_zeroed_again() {
    let mut m = Measure::default();
    let reader = MemReader::new(i32::MAX);
    // Four rounds of a request as big as a quarter of all slots, each deleted after.
    for round in 0..8u32 {
        let id = round + 1;
        for f in 0..(MAX_SLOTS / 4) as usize {
            claim(&mut m, id, f).unwrap_or_else(|e| panic!("round {round}: {e}"));
        }
        assert_eq!(m.slots_in_use(), (MAX_SLOTS / 4) as usize);
        // Each claim is listed for zeroing before code uses it.
        assert_eq!(m.unprepared.len(), (MAX_SLOTS / 4) as usize);
        m.unprepared.clear();
        m.release(&reader, id, false);
        assert_eq!(m.slots_in_use(), 0);
    }
    // Only the first quarter was ever handed out.
    assert_eq!(m.next_slot, MAX_SLOTS / 4);
}

#[test]
fn a_full_table_refuses_and_a_failed_request_gives_its_slots_back() {
    let mut m = Measure::default();
    let reader = MemReader::new(i32::MAX);
    for f in 0..MAX_SLOTS as usize {
        claim(&mut m, 1, f).expect("room");
    }
    // The same function of the same request keeps its slot (entry and exits share it).
    assert_eq!(claim(&mut m, 1, 7).expect("same"), 7);
    assert!(matches!(claim(&mut m, 2, 0), Err(MeasureError::SlotsFull)));
    // Request 2 failed half-way: nothing of it stays.
    m.release(&reader, 2, false);
    m.forget(2);
    m.release(&reader, 1, false);
    assert_eq!(claim(&mut m, 3, 0).expect("freed"), 0);
    // A slot freed before it was prepared is not prepared for its old owner.
    m.release(&reader, 3, false);
    assert!(m.unprepared.is_empty());
    assert_eq!(m.free.len(), MAX_SLOTS as usize);
}

#[test]
fn a_loop_without_an_entries_slot_has_its_iterations_less_its_back_edges_as_entries() {
    let v = |function: &str, calls: u64| CountValue {
        id: 1,
        function: function.into(),
        loop_name: Some("loop_1".into()),
        calls,
        iterations: None,
        metric: Metric::Count,
        ns: None,
    };
    // Two threads' slots, as read: f's loop by back edges, g's with an entries slot.
    let values = vec![
        v("f", 5),
        v("f", 4),
        v("g", 2),
        v("g", 9),
        v("f", 7),
        v("f", 5),
    ];
    let counted = [
        Counted::Iterations,
        Counted::BackEdges,
        Counted::Entries,
        Counted::Iterations,
        Counted::Iterations,
        Counted::BackEdges,
    ];
    let out = fold_iterations(values, &counted);
    let got: Vec<(&str, u64, Option<u64>)> = out
        .iter()
        .map(|v| (v.function.as_str(), v.calls, v.iterations))
        .collect();
    assert_eq!(got, vec![("f", 3, Some(12)), ("g", 2, Some(9))]);
}

fn values_of(id: u32, functions: usize) -> Vec<CountValue> {
    (0..functions)
        .map(|f| CountValue {
            id,
            function: format!("f{f}"),
            loop_name: None,
            calls: u64::from(id) * 1000 + f as u64,
            iterations: None,
            metric: Metric::Count,
            ns: None,
        })
        .collect()
}

#[test]
fn deleted_requests_values_stay_bounded_over_many_insert_delete_cycles() {
    let mut m = Measure::default();
    // 500 cycles of a 100-function request inserted and deleted, each keeping its values.
    for id in 1..=500u32 {
        let path = PathValue {
            id,
            function: "f0".into(),
            metric: Metric::Count,
            ras: vec![0x1000, 0x2000],
            calls: 1,
            ns: 0,
        };
        m.keep_values(id, Some(values_of(id, 100)), Some(vec![path]));
        assert!(
            m.kept.len() <= KEPT_REQUESTS * 100,
            "cycle {id}: {}",
            m.kept.len()
        );
        assert!(m.kept_paths.len() <= KEPT_REQUESTS);
        assert!(m.kept.capacity() <= KEPT_REQUESTS * 100 * 2);
    }
    // The last KEPT_REQUESTS deleted are kept, exactly as they were; older ones are gone.
    assert_eq!(m.kept.len(), KEPT_REQUESTS * 100);
    let oldest_kept = 500 - KEPT_REQUESTS as u32 + 1;
    assert!(m.kept.iter().all(|v| v.id >= oldest_kept));
    assert!(m.kept_paths.iter().all(|p| p.id >= oldest_kept));
    let last: Vec<&CountValue> = m.kept.iter().filter(|v| v.id == 500).collect();
    assert_eq!(last.len(), 100);
    assert_eq!(last[7].calls, 500_007);
    // A request deleted again (its values read again) replaces its own, not another's.
    m.keep_values(500, Some(values_of(500, 100)), None);
    assert_eq!(m.kept.len(), KEPT_REQUESTS * 100);
    assert!(m.kept.iter().any(|v| v.id == oldest_kept));
}

/// A runtime at made-up addresses, with the entry points `syms` names (link addresses; the
/// load bias 0x7000_0000), its clock not the TSC: calls go to the plain entry points, every
/// vector register saved.
fn runtime(syms: &[&'static str]) -> Runtime {
    Runtime {
        path: PathBuf::from("/nonexistent/libgsh_rt.so"),
        root: 0x7000_1000,
        thread_fn: 0x7000_2000,
        tls_offset: -64,
        tsc: false,
        tsc_mult: 1 << 32,
        shadow_offset: 0x8000,
        paths_offset: 0x10000,
        fns: HashMap::new(),
        syms: syms
            .iter()
            .enumerate()
            .map(|(i, n)| (*n, 0x100 * (i as u64 + 1)))
            .collect(),
        bias: 0x7000_0000,
        arena: None,
    }
}

/// A loop profiled (`consult`'s loop along call paths, `add_path_loop`) enters through
/// `gsh_rt_path_loop_enter` with its frame key (the point's `rsp` plus its frame offset) and
/// leaves through the path exit with the same key; the snippets compile to the calls. Without
/// that entry point in the runtime, the measure fails rather than timing something else.
#[test]
fn a_loop_timed_along_call_paths_enters_through_its_own_entry_point_and_leaves_as_a_path() {
    let mut m = Measure {
        runtime: Some(runtime(&[exports::PATH_LOOP_ENTER, Event::PathExit.name()])),
        ..Measure::default()
    };
    let probe = |at_exit| Probe {
        loop_name: Some("loop_1".into()),
        counted: Counted::Entries,
        at_exit,
    };
    let src = |m: &mut Measure, at_exit| {
        m.source(
            || "work".into(),
            7,
            ModuleId(0),
            FuncId(3),
            Metric::Profile,
            &probe(at_exit),
            0x18,
        )
    };
    let enter = src(&mut m, false).expect("entry");
    let exit = src(&mut m, true).expect("exit");
    let slot = m.counters[0].slot;
    assert_eq!(m.counters.len(), 1, "entries and exits share the slot");
    assert_eq!(
        enter,
        format!("__gsh_rt_call(0x70000100, {RT_SAVE_FULL:#x}, {slot}, 0xffffffffffffffc0, 0x70002000, 0, 0x18);")
    );
    assert_eq!(
        exit,
        format!("__gsh_rt_call(0x70000200, {RT_SAVE_FULL:#x}, {slot}, 0xffffffffffffffc0, 0x70002000, 0, 0x18);")
    );
    let env = crate::snippet::MapEnv {
        point: crate::snippet::PointInfo {
            internal: true,
            ..Default::default()
        },
        ..Default::default()
    };
    for s in [&enter, &exit] {
        let c = crate::snippet::compile(s, &env, 0x7000_0000).expect("compiles");
        let text = c.code.disassemble();
        let sp = text
            .iter()
            .position(|l| l.ends_with("mov rsi,[rbx+38h]"))
            .unwrap_or_else(|| panic!("{text:?}"));
        assert!(text[sp + 1].ends_with("add rsi,18h"), "{text:?}");
    }
    // A function's profile still enters as a path.
    let mut bare = Measure {
        runtime: Some(runtime(&[Event::PathEnter.name()])),
        ..Measure::default()
    };
    let f = bare.source(
        || "work".into(),
        8,
        ModuleId(0),
        FuncId(3),
        Metric::Profile,
        &function_probe(),
        0,
    );
    assert!(f.expect("profile").starts_with("__gsh_rt_call(0x70000100,"));
    let e = src(&mut bare, false).expect_err("no path-loop entry point");
    assert!(e.to_string().contains(exports::PATH_LOOP_ENTER), "{e}");
}
