use super::*;
use crate::instrument::measure::KEPT_REQUESTS;

fn function(name: &str, entries: u64, lines: &[(u32, u64)]) -> FunctionCoverage {
    FunctionCoverage {
        id: 1,
        function: name.to_owned(),
        blocks: 2,
        covered: u32::from(entries > 0),
        unprobed: 0,
        entries,
        file: Some("/src/a.c".into()),
        line: Some(lines[0].0),
        lines: Some(
            lines
                .iter()
                .map(|&(line, count)| LineCount {
                    file: "/src/a.c".into(),
                    line,
                    count,
                })
                .collect(),
        ),
        block_counts: Vec::new(),
    }
}

#[test]
fn lcov_groups_functions_and_lines_by_file() {
    let fs = [
        function("main", 1, &[(10, 1), (11, 1), (12, 0)]),
        function("f,g", 0, &[(3, 0), (4, 0)]),
    ];
    let text = lcov("t", &fs);
    assert_eq!(
        text,
        "TN:t\nSF:/src/a.c\nFN:10,main\nFN:3,f_g\nFNDA:1,main\nFNDA:0,f_g\nFNF:2\nFNH:1\n\
         DA:3,0\nDA:4,0\nDA:10,1\nDA:11,1\nDA:12,0\nLF:5\nLH:2\nend_of_record\n"
    );
    assert_eq!(fs[0].line_totals(), Some((2, 3)));
}

#[test]
fn a_map_numbers_its_blocks_from_first() {
    let map = CoverageMap {
        id: 4,
        first: 10,
        functions: vec![
            FuncBlocks {
                function: "a".into(),
                addr: 0x100,
                blocks: vec![(0x100, 0x108), (0x108, 0x110)],
            },
            FuncBlocks {
                function: "b".into(),
                addr: 0x200,
                blocks: vec![(0x200, 0x204)],
            },
        ],
    };
    assert_eq!(map.len(), 3);
    let index = map.index();
    assert_eq!(index[&(0x100, 0x108)], 11);
    assert_eq!(index[&(0x200, 0x200)], 12);
    // Unprobed (None) is neither covered nor uncovered.
    let s = summarise(&map, None, |k| match k {
        10 => Some(5),
        11 => None,
        _ => Some(0),
    });
    assert_eq!(
        (s[0].blocks, s[0].covered, s[0].unprobed, s[0].entries),
        (2, 1, 1, 5)
    );
    assert_eq!((s[1].covered, s[1].unprobed), (0, 0));
    assert_eq!(s[0].lines, None);
}

/// A long attach inserting and deleting `coverage` over and over: the arrays of deleted
/// requests (kept for `report`) are bounded as measures' values are, the newest kept with
/// their counts as they were when deleted.
#[test]
fn deleted_requests_arrays_stay_bounded_over_many_insert_delete_cycles() {
    use crate::process::{Kept, KeptSource};
    let counts: Vec<u8> = [3u64, 0, 7].iter().flat_map(|c| c.to_le_bytes()).collect();
    let reader = MemReader::kept(
        0,
        vec![Kept {
            addr: 0x1000,
            source: KeptSource::Bytes(counts),
        }],
    );
    let mut live = LiveCoverage::default();
    for id in 1..=200u32 {
        live.arrays.push(CoverageArray {
            module: ModuleId(0),
            base: 0x1000,
            map: CoverageMap {
                id,
                first: 0,
                functions: vec![FuncBlocks {
                    function: "f".into(),
                    addr: 0x40_0000,
                    blocks: vec![
                        (0x40_0000, 0x40_0004),
                        (0x40_0004, 0x40_0008),
                        (0x40_0008, 0x40_000c),
                    ],
                }],
            },
            index: HashMap::new(),
            bias: 0,
            unprobed: BTreeMap::new(),
            last: None,
            once: false,
            retired: Default::default(),
        });
        live.keep(&reader, Some(id));
        assert!(
            live.arrays.len() <= KEPT_REQUESTS,
            "cycle {id}: {}",
            live.arrays.len()
        );
    }
    let oldest_kept = 200 - KEPT_REQUESTS as u32 + 1;
    assert!(live.arrays.iter().all(|a| a.map.id >= oldest_kept));
    assert_eq!(
        live.arrays.last().and_then(|a| a.last.clone()),
        Some(vec![3, 0, 7])
    );
}
