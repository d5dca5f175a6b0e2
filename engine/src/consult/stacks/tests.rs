//! Paths, fractions and refinements over synthetic stacks.

use super::*;
use std::sync::atomic::{AtomicBool, Ordering};

fn frame(module: &str, function: &str) -> FrameName {
    FrameName {
        module: module.into(),
        function: function.into(),
        main: module == "app",
    }
}

/// A stack given outermost first, as people read call paths.
fn stack(tid: i32, outer_first: &[(&str, &str)], syscall: Option<Syscall>) -> ThreadStack {
    ThreadStack {
        tid,
        syscall,
        lock_name: syscall.filter(|s| s.nr == FUTEX).map(|_| "big_lock".into()),
        frames: outer_first.iter().rev().map(|(m, f)| frame(m, f)).collect(),
        pcs: Vec::new(),
        held: Duration::ZERO,
        taken: Taken::Stopped,
    }
}

const WORKER: [(&str, &str); 2] = [("libc.so.6", "clone3"), ("libc.so.6", "start_thread")];

fn worker(tail: &[(&str, &str)], syscall: Option<Syscall>) -> ThreadStack {
    let mut v = WORKER.to_vec();
    v.push(("app", "worker"));
    v.extend_from_slice(tail);
    stack(2, &v, syscall)
}

fn focus(path: &[Resource]) -> Focus {
    let mut v = vec![Resource::Program("app".into()), Resource::Thread(2)];
    v.extend_from_slice(path);
    Focus(v)
}

fn func(name: &str) -> Resource {
    Resource::Function(name.into())
}

#[test]
fn a_path_starts_at_the_threads_own_code_and_ends_at_its_first_library_call() {
    let main = [
        frame("libc.so.6", "__lll_lock_wait"),
        frame("libc.so.6", "pthread_mutex_lock"),
        frame("app", "contend"),
        frame("app", "main"),
        frame("libc.so.6", "__libc_start_call_main"),
        frame("libc.so.6", "__libc_start_main"),
        frame("app", "_start"),
    ];
    let names: Vec<&str> = path_of(&main)
        .iter()
        .map(|&i| main[i].function.as_str())
        .collect();
    assert_eq!(names, ["main", "contend", "pthread_mutex_lock"]);
    // A thread with no frame of the program keeps all of its frames.
    let lib = [
        frame("libc.so.6", "poll"),
        frame("libc.so.6", "start_thread"),
    ];
    let names: Vec<&str> = path_of(&lib)
        .iter()
        .map(|&i| lib[i].function.as_str())
        .collect();
    assert_eq!(names, ["start_thread", "poll"]);
    assert!(path_of(&[]).is_empty());
}

/// 60 samples of a worker: 40 computing in `crunch`, 10 in `decoy`, 10 waiting for a lock in
/// `contend`.
fn store() -> Stacks {
    let mut s = Stacks::new(std::process::id() as i32);
    let t0 = Instant::now();
    let futex = LOCK_WAIT;
    for i in 0..60 {
        let t = if i < 40 {
            worker(&[("app", "crunch")], None)
        } else if i < 50 {
            worker(&[("app", "decoy")], None)
        } else {
            worker(
                &[
                    ("app", "contend"),
                    ("libc.so.6", "pthread_mutex_lock"),
                    ("libc.so.6", "__lll_lock_wait"),
                ],
                Some(futex),
            )
        };
        s.push(
            t0,
            Batch {
                stopped: Duration::from_micros(100),
                threads: vec![t],
            },
        );
    }
    s
}

#[test]
fn a_function_takes_the_share_of_samples_at_it_and_below() {
    let s = store();
    let since = s.samples[0].at;
    let at = |h, path: &[Resource]| s.fraction(h, &focus(path), 2, since, 1).unwrap();
    // Running samples: 50, of which 40 in crunch.
    assert_eq!(at(Hypothesis::CPUBound, &[func("worker")]), 1.0);
    assert_eq!(
        at(Hypothesis::CPUBound, &[func("worker"), func("crunch")]),
        0.8
    );
    // All samples: 60, of which 10 wait for the lock.
    let lock = Resource::Lock {
        addr: 0x4040,
        name: Some("big_lock".into()),
    };
    let waits = at(
        Hypothesis::SyncWait,
        &[func("worker"), func("contend"), lock],
    );
    assert!((waits - 10.0 / 60.0).abs() < 1e-9, "{waits}");
    assert_eq!(at(Hypothesis::IOBlocking, &[func("worker")]), 0.0);
    // Too few samples: no reading yet.
    assert_eq!(
        s.fraction(Hypothesis::CPUBound, &focus(&[]), 2, since, 61),
        None
    );
    // Another thread has none.
    assert_eq!(s.count(3, since), 0);
}

#[test]
fn refinement_proposes_callees_likeliest_first_then_the_lock_waited_on() {
    let s = store();
    let since = s.samples[0].at;
    let names = |h, path: &[Resource]| -> Vec<(String, f64)> {
        s.refine(h, &focus(path), 2, since, 0.05)
            .into_iter()
            .map(|(f, p)| {
                (
                    f.0[2..]
                        .iter()
                        .map(|r| r.to_string())
                        .collect::<Vec<_>>()
                        .join(" > "),
                    p,
                )
            })
            .collect()
    };
    // Every CPU sample of the thread is in `worker`, which branches: Deep Start stops there.
    assert_eq!(
        names(Hypothesis::CPUBound, &[]),
        [("app > worker".into(), 1.0)]
    );
    let callees = names(
        Hypothesis::CPUBound,
        &[Resource::Module("app".into()), func("worker")],
    );
    assert_eq!(callees[0], ("app > worker > crunch".into(), 0.8));
    assert_eq!(callees[1], ("app > worker > decoy".into(), 0.2));
    // The library call is a leaf in its own module; the lock is named below it, where the
    // wait happens, not beside it.
    let waits = names(
        Hypothesis::SyncWait,
        &[
            Resource::Module("app".into()),
            func("worker"),
            func("contend"),
        ],
    );
    assert_eq!(
        waits.iter().map(|w| w.0.as_str()).collect::<Vec<_>>(),
        ["app > worker > contend > libc.so.6 > pthread_mutex_lock"]
    );
    let lock = names(
        Hypothesis::SyncWait,
        &[
            Resource::Module("app".into()),
            func("worker"),
            func("contend"),
            Resource::Module("libc.so.6".into()),
            func("pthread_mutex_lock"),
        ],
    );
    assert_eq!(
        lock.iter().map(|w| w.0.as_str()).collect::<Vec<_>>(),
        ["app > worker > contend > libc.so.6 > pthread_mutex_lock > lock big_lock (0x4040)"]
    );
    // Below the least share nothing is proposed.
    assert!(s
        .refine(
            Hypothesis::CPUBound,
            &focus(&[func("worker")]),
            2,
            since,
            0.9
        )
        .iter()
        .all(|(f, _)| f.0.len() == 4 && f.0[3] == func("crunch") || f.0.len() < 4));
}

/// A source that stops for 2 ms per sample: with a 10% limit the sampler keeps the stopped
/// time near a tenth of the wall time.
struct Slow(u32);

impl StackSource for Slow {
    fn sample(&mut self) -> Result<Option<Batch>, String> {
        self.0 += 1;
        std::thread::sleep(Duration::from_millis(2));
        Ok(Some(Batch {
            stopped: Duration::from_millis(2),
            threads: vec![ThreadStack {
                held: Duration::from_millis(2),
                taken: Taken::Stopped,
                ..worker(&[("app", "crunch")], None)
            }],
        }))
    }
}

#[test]
fn sampling_keeps_the_stopped_time_under_the_cost_limit() {
    let stacks = Mutex::new(Stacks::new(std::process::id() as i32));
    let stop = AtomicBool::new(false);
    let mut source = Slow(0);
    let t = std::time::Instant::now();
    std::thread::scope(|s| {
        s.spawn(|| sample_stacks(&mut source, &stacks, 0.1, &|| stop.load(Ordering::Relaxed)));
        // Half a second, or on a loaded machine until the sampler has had the CPU for ten
        // samples (at most 10 s).
        while t.elapsed() < Duration::from_secs(10)
            && (t.elapsed() < Duration::from_millis(500) || stacks.lock().unwrap().batches() < 10)
        {
            std::thread::sleep(Duration::from_millis(10));
        }
        stop.store(true, Ordering::Relaxed);
    });
    let elapsed = t.elapsed().as_secs_f64();
    let stacks = stacks.into_inner().unwrap();
    let f = stacks.stopped_fraction();
    assert!(f <= 0.11, "stopped {f}");
    // 2 ms stops at a 10% budget: one every 20 ms at most (about 25 in half a second).
    let most = (elapsed / 0.02 * 1.2) as u32 + 2;
    assert!(
        (10..=most).contains(&source.0),
        "{} samples in {elapsed} s",
        source.0
    );
    assert!(
        f <= 0.1,
        "stopped {f}: the next stop is budgeted before it is taken"
    );
}

struct Failing;

impl StackSource for Failing {
    fn sample(&mut self) -> Result<Option<Batch>, String> {
        Err("the process exited".into())
    }
}

#[test]
fn a_failing_source_ends_sampling_and_says_why() {
    let stacks = Mutex::new(Stacks::new(1));
    sample_stacks(&mut Failing, &stacks, 0.05, &|| false);
    assert_eq!(stacks.lock().unwrap().error(), Some("the process exited"));
}

/// A chain of calls no sample leaves (`start_thread > run > step > crunch`): Deep Start
/// proposes its last function at once, not one level per experiment.
#[test]
fn deep_start_goes_down_a_chain_to_where_it_branches() {
    let mut s = Stacks::new(std::process::id() as i32);
    let t0 = Instant::now();
    for i in 0..40 {
        let leaf = if i % 2 == 0 { "add" } else { "mul" };
        s.push(
            t0,
            Batch {
                stopped: Duration::ZERO,
                threads: vec![worker(
                    &[
                        ("app", "run"),
                        ("app", "step"),
                        ("app", "crunch"),
                        ("app", leaf),
                    ],
                    None,
                )],
            },
        );
    }
    let since = s.samples[0].at;
    let got: Vec<String> = s
        .refine(Hypothesis::CPUBound, &focus(&[]), 2, since, 0.05)
        .iter()
        .map(|(f, _)| f.to_string())
        .collect();
    assert_eq!(got, ["app > thread 2 > app > worker > run > step > crunch"]);
    // Too few samples to trust: one level at a time.
    let few = Stacks {
        samples: s.samples[..10].to_vec(),
        ..Stacks::new(1)
    };
    let got: Vec<String> = few
        .refine(Hypothesis::CPUBound, &focus(&[]), 2, since, 0.05)
        .iter()
        .map(|(f, _)| f.to_string())
        .collect();
    assert_eq!(got, ["app > thread 2 > app > worker"]);
}

/// `hot` called from `a` (80 samples) and from `b` (20): followed down no chain, it is
/// proposed at the thread wherever it is called from, and refined into the two call paths
/// reaching it, each with its share; the chain through `a` stops above it.
#[test]
fn a_function_reached_by_several_paths_is_refined_into_those_paths() {
    let mut s = Stacks::new(std::process::id() as i32);
    let t0 = Instant::now();
    for i in 0..100 {
        let caller = if i < 80 { "a" } else { "b" };
        s.push(
            t0,
            Batch {
                stopped: Duration::ZERO,
                threads: vec![worker(&[("app", caller), ("app", "hot")], None)],
            },
        );
    }
    let since = s.samples[0].at;
    let show = |v: Vec<(Focus, f64)>| -> Vec<(String, f64)> {
        v.into_iter()
            .map(|(f, p)| {
                let tail: Vec<String> = f.0[2..].iter().map(|r| r.to_string()).collect();
                (tail.join(" > "), p)
            })
            .collect()
    };
    let at_thread = show(s.refine(Hypothesis::CPUBound, &focus(&[]), 2, since, 0.05));
    assert_eq!(
        at_thread,
        [("app > worker".into(), 1.0), ("app > hot".into(), 1.0)]
    );
    let code = focus(&[Resource::Module("app".into()), Resource::Code("hot".into())]);
    let paths = s.refine(Hypothesis::CPUBound, &code, 2, since, 0.05);
    assert_eq!(
        show(paths.clone()),
        [
            ("app > hot > worker > a > hot".into(), 0.8),
            ("app > hot > worker > b > hot".into(), 0.2)
        ]
    );
    let share = |f: &Focus| s.fraction(Hypothesis::CPUBound, f, 2, since, 1).unwrap();
    assert_eq!(share(&code), 1.0);
    assert_eq!(share(&paths[0].0), 0.8);
    assert_eq!(share(&paths[1].0), 0.2);
    // A call path is where iPath ends: it goes on as the chain of calls it is, so that its
    // function's loops are named along it; and the chain above both paths proposes `hot` too
    // (the thread's first samples may not have shown both paths yet; the graph holds it once).
    let along = s.refine(Hypothesis::CPUBound, &paths[0].0, 2, since, 0.05);
    assert_eq!(
        along,
        [(
            focus(&[
                Resource::Module("app".into()),
                func("worker"),
                func("a"),
                func("hot")
            ]),
            0.8
        )]
    );
    assert_eq!(share(&along[0].0), 0.8);
    assert!(s
        .refine(Hypothesis::CPUBound, &paths[1].0, 2, since, 0.25)
        .is_empty());
    let chain = focus(&[Resource::Module("app".into()), func("worker")]);
    assert_eq!(
        show(s.refine(Hypothesis::CPUBound, &chain, 2, since, 0.05)),
        [
            ("app > worker > a".into(), 0.8),
            ("app > worker > b".into(), 0.2),
            ("app > hot".into(), 1.0)
        ]
    );
    // Below `a`, `hot` is no chain step but the function found wherever it is called from.
    let below_a = focus(&[Resource::Module("app".into()), func("worker"), func("a")]);
    assert_eq!(
        show(s.refine(Hypothesis::CPUBound, &below_a, 2, since, 0.05)),
        [("app > hot".into(), 1.0)]
    );
    // One path holding all but a sliver of the samples is no spread: the chain goes on.
    assert!(s
        .refine(Hypothesis::CPUBound, &below_a, 2, since, 0.25)
        .iter()
        .all(|(f, _)| f.0.last() == Some(&func("hot"))));
}

/// A stop costs a thread what it would have run meanwhile: all of it for a thread computing
/// on a CPU of its own, nothing for one asleep, and nothing for one that waited for a CPU at
/// least that long (the scheduler gives its turn back); in between, its running rate.
#[test]
fn a_stop_costs_a_thread_the_running_it_would_have_done_less_its_waiting() {
    let ms = Duration::from_millis;
    // Computing alone: 10 ms stopped in an interval of 100 ms free, all of it on a CPU.
    assert_eq!(imposed(ms(10), ms(100), ms(100), ms(0)), ms(10));
    // Asleep: no running to lose.
    assert_eq!(imposed(ms(10), ms(100), ms(0), ms(0)), ms(0));
    // Half a CPU, waiting the other half: the 5 ms it would have run come back.
    assert_eq!(imposed(ms(10), ms(100), ms(50), ms(50)), ms(0));
    // Half a CPU, waiting 2 ms: it loses 5 ms less the 2 ms it gets back.
    assert_eq!(imposed(ms(10), ms(100), ms(50), ms(2)), ms(3));
    // Never more than the stop, even when `schedstat` and the clock disagree.
    assert_eq!(imposed(ms(10), ms(100), ms(150), ms(0)), ms(10));
    assert_eq!(imposed(ms(10), ms(0), ms(0), ms(0)), ms(0));
}

/// The store reads each sampled thread's scheduler counts after each batch and adds what the
/// stops took from it: a thread that slept between its batches lost nearly nothing however long
/// the stops were said to be; one that computed lost at most the stops, and its running time
/// is counted.
#[test]
fn the_store_counts_what_stops_took_from_each_thread_from_its_schedstat() {
    // SAFETY: gettid has no preconditions.
    let tid = unsafe { libc::gettid() };
    let mut stacks = Stacks::new(std::process::id() as i32);
    let batch = |stopped| Batch {
        stopped,
        threads: vec![ThreadStack {
            held: stopped,
            taken: Taken::Stopped,
            ..stack(tid, &[("app", "main")], None)
        }],
    };
    stacks.push(Instant::now(), batch(Duration::ZERO));
    for _ in 0..3 {
        std::thread::sleep(Duration::from_millis(30));
        stacks.push(Instant::now(), batch(Duration::from_millis(10)));
    }
    let (lost, used) = stacks.cost();
    assert!(lost < Duration::from_millis(3), "asleep, it lost {lost:?}");
    assert!(used < Duration::from_millis(10), "asleep, it ran {used:?}");
    let t = Instant::now();
    let mut x = 1u64;
    for _ in 0..3 {
        while t.elapsed() < Duration::from_millis(30) {
            x = std::hint::black_box(x.wrapping_mul(6364136223846793005).wrapping_add(1));
        }
        stacks.push(Instant::now(), batch(Duration::from_millis(10)));
    }
    let (lost2, used2) = stacks.cost();
    assert!(used2 > used, "computing, it ran");
    assert!(lost2 - lost <= Duration::from_millis(30), "{lost2:?}");
}

/// A path goes on through the libraries the program brings (their functions are where its
/// time goes: an interpreter's, a codec's) and stops at the first call into the C runtime; a
/// library function reached by two paths is found wherever it is called from, with its
/// module, and refined into those paths. Paths used to end at the first frame outside the
/// executable, so nothing below a library's entry point was ever named.
#[test]
fn paths_go_through_the_programs_libraries_to_the_c_runtime() {
    let frames: Vec<FrameName> = [
        ("libc.so.6", "__libc_start_call_main"),
        ("app", "main"),
        ("libpython3.so", "run"),
        ("libpython3.so", "eval"),
        ("libc.so.6", "write"),
        ("libc.so.6", "__write_nocancel"),
    ]
    .iter()
    .rev()
    .map(|(m, f)| frame(m, f))
    .collect();
    let names: Vec<&str> = path_of(&frames)
        .iter()
        .map(|&i| frames[i].function.as_str())
        .collect();
    assert_eq!(names, ["main", "run", "eval", "write"]);
    let mut s = Stacks::new(std::process::id() as i32);
    let t0 = Instant::now();
    for i in 0..100 {
        let caller = if i < 70 { "a" } else { "b" };
        let t = worker(
            &[
                ("libz.so", caller),
                ("libz.so", "deflate"),
                ("libc.so.6", "memcpy"),
            ],
            None,
        );
        s.push(
            t0,
            Batch {
                stopped: Duration::ZERO,
                threads: vec![t],
            },
        );
    }
    let since = s.samples[0].at;
    let found = s.refine(Hypothesis::CPUBound, &focus(&[]), 2, since, 0.05);
    let code = focus(&[
        Resource::Module("libz.so".into()),
        Resource::Code("deflate".into()),
    ]);
    assert!(
        found.iter().any(|(f, p)| *f == code && *p == 1.0),
        "{found:?}"
    );
    let paths: Vec<String> = s
        .refine(Hypothesis::CPUBound, &code, 2, since, 0.05)
        .into_iter()
        .map(|(f, _)| f.last().unwrap().to_string())
        .collect();
    assert_eq!(paths, ["worker > a > deflate", "worker > b > deflate"]);
}

/// A thread is charged for the stops it was held in, not for how long the process took to
/// stop: between two marks 100 ms apart a thread computing on a CPU of its own lost the 2 ms
/// it was held, though the stop lasted 10 ms from asking to resume (another thread waited
/// 8 ms for a CPU to take it); one that waited for a CPU 30 ms of the interval lost nothing.
#[test]
fn a_thread_is_charged_the_time_it_was_held_not_the_whole_stop() {
    let ms = Duration::from_millis;
    let t0 = Instant::now();
    let mark = |at: Duration, run: Duration, wait: Duration, held: Duration| SchedMark {
        at: t0 + at,
        run: run.as_nanos() as u64,
        wait: wait.as_nanos() as u64,
        held,
    };
    let prev = mark(ms(0), ms(500), ms(40), ms(7));
    // Held 2 ms more; free for the other 98 ms, all of them on a CPU.
    let computing = mark(ms(100), ms(598), ms(40), ms(9));
    assert_eq!(charge(&prev, &computing), (ms(2), ms(98)));
    // Ran 68 ms, waited 30: the 2 ms held come back from the waiting.
    let waiting = mark(ms(100), ms(568), ms(70), ms(9));
    assert_eq!(charge(&prev, &waiting), (ms(0), ms(68)));
    // Asleep: nothing lost however long it was held.
    let asleep = mark(ms(100), ms(500), ms(40), ms(17));
    assert_eq!(charge(&prev, &asleep), (ms(0), ms(0)));
}

/// The store keeps each thread's held time apart from the stops' length: the stopped time it
/// reports is the mean of its threads' held time at each stop, and a thread that took a stop
/// late is charged only its own part (here none at all: it was held for no time).
#[test]
fn the_store_charges_each_thread_its_own_held_time() {
    // SAFETY: gettid has no preconditions.
    let tid = unsafe { libc::gettid() };
    let mut stacks = Stacks::new(std::process::id() as i32);
    let batch = || Batch {
        stopped: Duration::from_millis(10),
        threads: vec![stack(tid, &[("app", "main")], None)],
    };
    stacks.push(Instant::now(), batch());
    let t = Instant::now();
    let mut x = 1u64;
    for _ in 0..3 {
        while t.elapsed() < Duration::from_millis(20) {
            x = std::hint::black_box(x.wrapping_mul(6364136223846793005).wrapping_add(1));
        }
        stacks.push(Instant::now(), batch());
    }
    // Held for no time at all: the process was stopped, its one thread was not.
    assert_eq!(stacks.stopped(), Duration::ZERO);
    let (lost, used) = stacks.cost();
    assert_eq!(lost, Duration::ZERO, "held for no time, it lost {lost:?}");
    assert!(used > Duration::ZERO, "computing, it ran");
}

/// At each stop the store counts the mean of its threads' held time: two threads held 4 ms
/// and 2 ms make 3 ms, though the stop (its longest-held thread, what the sampler paces by)
/// lasted 4 ms; a stop whose stacks were dropped counts as long as it lasted.
#[test]
fn a_stop_counts_the_mean_of_its_threads_held_time() {
    let mut stacks = Stacks::new(std::process::id() as i32);
    let held = |tid, ms| ThreadStack {
        held: Duration::from_millis(ms),
        taken: Taken::Stopped,
        ..stack(tid, &[("app", "main")], None)
    };
    stacks.push(
        Instant::now(),
        Batch {
            stopped: Duration::from_millis(4),
            threads: vec![held(-1, 4), held(-2, 2)],
        },
    );
    assert_eq!(stacks.stopped(), Duration::from_millis(3));
    stacks.push(
        Instant::now(),
        Batch {
            stopped: Duration::from_millis(5),
            threads: Vec::new(),
        },
    );
    assert_eq!(stacks.stopped(), Duration::from_millis(8));
}

/// Adds `n` cycles to `s`: 2 s sampling at `sampled` of a CPU, held 24 ms, then 250 ms quiet
/// at `quiet`; no calls counted.
fn cycles(s: &mut Stacks, n: usize, sampled: f64, quiet: f64) {
    cycles_calling(s, n, (sampled, None), (quiet, None));
}

/// [`cycles`], the program making the read and write calls given per second in each turn.
fn cycles_calling(
    s: &mut Stacks,
    n: usize,
    sampled: (f64, Option<f64>),
    quiet: (f64, Option<f64>),
) {
    let ms = Duration::from_millis;
    let work = |(cpu, calls): (f64, Option<f64>), secs: f64| Work {
        run: (secs * 1e9 * cpu) as u64,
        calls: calls.map(|c| (c * secs) as u64),
    };
    for _ in 0..n {
        s.turn(false, ms(2000), work(sampled, 2.0), ms(24));
        s.turn(true, ms(250), work(quiet, 0.25), Duration::ZERO);
    }
}

/// A server's stops cost it more of its work than of its CPU time: where it makes enough read
/// and write calls, what it made fewer of them while sampled counts when that is more. (redis
/// under `redis-benchmark` answered 1.1% to 2.5% fewer requests during a search of stops
/// alone, while its CPU time per wall second fell 0.05% to 0.75%; the turns saw only the
/// latter.) Too few calls to tell, or none counted, and the CPU time alone counts.
#[test]
fn the_stops_cost_the_calls_the_sampling_turns_lost_where_that_is_more() {
    let mut s = Stacks::new(1);
    // 0.5 of a CPU in both turns; 160000 calls a second quiet, 2% fewer sampled.
    cycles_calling(&mut s, 4, (0.5, Some(156_800.0)), (0.5, Some(160_000.0)));
    let lost = s.turns.lost().unwrap().as_secs_f64();
    // Three cycles of 2 s sampled, each 2% of 0.5 of a CPU short.
    let want = 0.02 * 0.5 * 6.0;
    assert!(
        (lost - want).abs() < 1e-3 * want,
        "lost {lost}, want {want}"
    );
    // Where the CPU time lost more, that counts.
    let mut s = Stacks::new(1);
    cycles_calling(&mut s, 4, (0.45, Some(156_800.0)), (0.5, Some(160_000.0)));
    let lost = s.turns.lost().unwrap().as_secs_f64();
    assert!((lost - 0.1 * 0.5 * 6.0).abs() < 1e-6, "lost {lost}");
    // 300 calls a second: 75 in a quiet turn, too few to tell.
    let mut s = Stacks::new(1);
    cycles_calling(&mut s, 4, (0.5, Some(150.0)), (0.5, Some(300.0)));
    assert_eq!(s.turns.lost(), Some(Duration::ZERO));
    // Not counted (a kernel without I/O accounting).
    let mut s = Stacks::new(1);
    cycles_calling(&mut s, 4, (0.5, None), (0.5, Some(160_000.0)));
    assert_eq!(s.turns.lost(), Some(Duration::ZERO));
}

#[test]
fn io_calls_are_read_from_proc() {
    let text = "rchar: 4000\nwchar: 220\nsyscr: 31\nsyscw: 7\nread_bytes: 0\n";
    assert_eq!(parse_io_calls(text), Some(38));
    assert_eq!(parse_io_calls("rchar: 1\n"), None);
    let me = process_calls(std::process::id() as i32).expect("this process's io");
    let _ = std::fs::read_to_string("/proc/self/stat").unwrap();
    assert!(process_calls(std::process::id() as i32).unwrap() > me);
}

/// What the stops took is the running the sampling turns lost against the quiet turns' rate:
/// a program that ran 0.99 of a CPU quiet and 0.93 while sampled lost 0.06 of each sampled
/// second, whatever it was held ([`imposed`] said 0 for such a thread, which waited for a CPU
/// more than it was held). Before the turns, `cost` gave that model's figure alone.
#[test]
fn the_stops_cost_what_the_sampling_turns_lost_against_the_quiet_ones() {
    let mut s = Stacks::new(1);
    // The first cycle is the search's start, and the turns need three more.
    cycles(&mut s, 3, 0.93, 0.99);
    assert_eq!(s.cost().0, Duration::ZERO);
    cycles(&mut s, 1, 0.93, 0.99);
    let (lost, _) = s.cost();
    // Three cycles of 2 s sampled, each 0.06 of a CPU short: they agree, so all of it.
    let want = 0.06 * 6.0;
    assert!(
        (lost.as_secs_f64() - want).abs() < 1e-6,
        "lost {lost:?}, want {want} s"
    );
    // A program that ran more while sampled lost nothing.
    let mut s = Stacks::new(1);
    cycles(&mut s, 4, 0.9, 0.6);
    assert_eq!(s.turns.lost(), Some(Duration::ZERO));
}

/// Cycles that disagree tell nothing: under a load that came and went, a program ran 0.88 of
/// a CPU sampled and 0.99 quiet in two cycles and 0.43 quiet in the third, while its stops held
/// it a hundredth of that. Their mean said a tenth of its running was lost and, paced by that,
/// the sampler stopped sampling for seconds, and the search reported 24% at `--cost 5`; the
/// loss counted is what the cycles agree on.
#[test]
fn cycles_that_disagree_count_no_loss() {
    let mut s = Stacks::new(1);
    cycles(&mut s, 1, 0.2, 0.5);
    cycles(&mut s, 2, 0.88, 0.99);
    cycles(&mut s, 1, 0.88, 0.43);
    assert_eq!(s.turns.lost(), Some(Duration::ZERO));
    assert_eq!(s.stop_weight(), 1.0);
    // Cycles that agree closely count nearly all of their loss.
    let mut s = Stacks::new(1);
    cycles(&mut s, 1, 0.2, 0.5);
    for q in [0.99, 0.98, 0.99, 0.97] {
        cycles(&mut s, 1, 0.93, q);
    }
    let lost = s.turns.lost().unwrap().as_secs_f64();
    assert!(lost > 0.5 * 0.05 * 8.0, "lost {lost} s");
}

/// A held second costs what the turns measured per held second: a thread that ran 0.99 of a
/// CPU quiet and 0.93 sampled lost 6% of its running while held 1.2% of the sampled time, so
/// a held second costs 5; and the sampler spaces its stops 5 times as far apart as by held
/// time alone (it paced by held time, so one computing thread beside a busy twin lost 6% of
/// its progress at `--cost 5`: the stops' cost measured by turns then read over the limit).
#[test]
fn the_sampler_paces_its_stops_by_what_a_held_second_cost() {
    let ms = Duration::from_millis;
    let mut s = Stacks::new(1);
    assert_eq!(s.stop_weight(), PRIOR_WEIGHT);
    cycles(&mut s, 4, 0.93, 0.99);
    let w = s.stop_weight();
    let want = (0.06 / 0.99) / 0.012;
    assert!((w - want).abs() < 1e-6, "weight {w}, want {want}");
    let none = Duration::ZERO;
    let by_held = stop_due(ms(10), none, 0.05);
    let (stops, competing) = stops_cost(ms(10), w, none);
    assert_eq!(competing, none);
    let by_cost = stop_due(stops, competing, 0.05);
    assert!(
        (by_cost.as_secs_f64() / by_held.as_secs_f64() - w).abs() < 1e-6,
        "{by_held:?} {by_cost:?}"
    );
    // Held 10 ms at 5 a second is 50 ms of running: at an aim of 0.8 of 5%, due after 1.25 s.
    let (stops, _) = stops_cost(ms(10), 5.0, none);
    assert!((stop_due(stops, none, 0.05).as_secs_f64() - 1.25).abs() < 1e-9);
    // gsh's own CPU time took 90 ms of the program's running by competing for the CPUs:
    // with the 10 ms held, 50 ms more than the turns' 50; the stops and it cost 100 ms, due
    // after 2.5 s.
    assert_eq!(stops_cost(ms(10), 5.0, ms(90)), (ms(50), ms(50)));
    assert!((stop_due(ms(50), ms(50), 0.05).as_secs_f64() - 2.5).abs() < 1e-9);
    // However much it took, the stops keep a tenth of the limit: 50 ms of stops are due
    // after 12.5 s.
    assert!((stop_due(ms(50), ms(5000), 0.05).as_secs_f64() - 12.5).abs() < 1e-9);
    // A program that ran as much while sampled costs its held time.
    let mut s = Stacks::new(1);
    cycles(&mut s, 4, 0.6, 0.6);
    assert_eq!(s.stop_weight(), 1.0);
}

/// A source whose one stop held the process 300 ms (a tracer waiting for a CPU under load).
struct Long;

impl StackSource for Long {
    fn sample(&mut self) -> Result<Option<Batch>, String> {
        Ok(Some(Batch {
            stopped: Duration::from_millis(300),
            threads: vec![ThreadStack {
                held: Duration::from_millis(300),
                taken: Taken::Stopped,
                ..worker(&[("app", "crunch")], None)
            }],
        }))
    }
}

/// The turns go on while the sampler waits for its next stop: after one stop held 300 ms the
/// next is due tens of seconds later at the weight assumed before the turns tell, and the
/// turns must tell meanwhile (they were ended only between stops, so a blocked program's
/// search took one stack sample in 20 s).
#[test]
fn the_turns_go_on_while_the_sampler_waits_for_its_next_stop() {
    let stacks = Mutex::new(Stacks::new(std::process::id() as i32));
    let stop = AtomicBool::new(false);
    let t = std::time::Instant::now();
    std::thread::scope(|s| {
        s.spawn(|| sample_stacks(&mut Long, &stacks, 0.05, &|| stop.load(Ordering::Relaxed)));
        // Four short cycles take two seconds; at most 20 s on a loaded machine.
        while t.elapsed() < Duration::from_secs(20) && stacks.lock().unwrap().turns.cycles() < 3 {
            std::thread::sleep(Duration::from_millis(20));
        }
        stop.store(true, Ordering::Relaxed);
    });
    let stacks = stacks.into_inner().unwrap();
    assert!(stacks.turns.cycles() >= 3, "{:?}", stacks.turns);
    assert_eq!(stacks.batches(), 1);
}

/// A worker asleep in `poll` on one end of a pipe, then in `epoll_wait` on an instance watching
/// the other end: each wait is refined below the call to the descriptors it waits on, named by
/// what they are, and each such descriptor holds the wait's share.
#[test]
fn a_wait_in_poll_or_epoll_is_refined_to_the_descriptors_it_waits_on() {
    use std::os::fd::AsRawFd;
    let (r, w) = std::io::pipe().unwrap();
    let polled = [libc::pollfd {
        fd: r.as_raw_fd(),
        events: libc::POLLIN,
        revents: 0,
    }];
    // SAFETY: epoll_create1 takes no pointers; the descriptor is closed below.
    let ep = unsafe { libc::epoll_create1(0) };
    let mut ev = libc::epoll_event {
        events: libc::EPOLLOUT as u32,
        u64: 0,
    };
    // SAFETY: `ep` and the pipe's end are open descriptors; `ev` is a valid event.
    assert_eq!(
        unsafe { libc::epoll_ctl(ep, libc::EPOLL_CTL_ADD, w.as_raw_fd(), &mut ev) },
        0
    );
    // What the process side reads of these two calls (`process::waits`, tested there): the
    // polled pipe's end, and the other end the epoll instance watches.
    fn read(_: i32, nr: u64, args: [u64; 3]) -> Vec<i32> {
        match nr {
            7 => vec![unsafe_first_fd(args[0])],
            232 => vec![WATCHED.load(Ordering::Relaxed)],
            _ => Vec::new(),
        }
    }
    /// The descriptor of the first `pollfd` at `addr`, in this process.
    fn unsafe_first_fd(addr: u64) -> i32 {
        // SAFETY: `addr` is the test's own `polled` array, alive while the store is filled.
        unsafe { (*(addr as *const libc::pollfd)).fd }
    }
    static WATCHED: std::sync::atomic::AtomicI32 = std::sync::atomic::AtomicI32::new(-1);
    WATCHED.store(w.as_raw_fd(), Ordering::Relaxed);
    let mut s = Stacks::new(std::process::id() as i32).reading_waits(read);
    let t0 = Instant::now();
    let poll = Syscall {
        nr: 7,
        args: [polled.as_ptr() as u64, 1, 1000],
        asleep: true,
    };
    let epoll = Syscall {
        nr: 232,
        args: [ep as u64, 0x7000, 16],
        asleep: true,
    };
    for i in 0..40 {
        let (f, call, syscall) = if i < 30 {
            ("await_input", "poll", poll)
        } else {
            ("serve", "epoll_wait", epoll)
        };
        s.push(
            t0,
            Batch {
                stopped: Duration::from_micros(100),
                threads: vec![worker(&[("app", f), ("libc.so.6", call)], Some(syscall))],
            },
        );
    }
    // SAFETY: `ep` is ours and not used after.
    unsafe { libc::close(ep) };
    let since = s.samples[0].at;
    let below = |f: &str, call: &str| {
        focus(&[
            Resource::Module("app".into()),
            func("worker"),
            func(f),
            Resource::Module("libc.so.6".into()),
            func(call),
        ])
    };
    let pipe = |fd: i32| {
        std::fs::read_link(format!("/proc/self/fd/{fd}"))
            .unwrap()
            .to_string_lossy()
            .into_owned()
    };
    for (f, call, fd, share) in [
        ("await_input", "poll", r.as_raw_fd(), 0.75),
        ("serve", "epoll_wait", w.as_raw_fd(), 0.25),
    ] {
        let at = below(f, call);
        let refined = s.refine(Hypothesis::ExternalWait, &at, 2, since, 0.05);
        let file = Resource::File { fd, path: pipe(fd) };
        assert!(pipe(fd).starts_with("pipe:["), "{}", pipe(fd));
        assert_eq!(refined, [(at.with(file.clone()), share)], "{call}");
        let x = s
            .fraction(Hypothesis::ExternalWait, &at.with(file), 2, since, 1)
            .unwrap();
        assert!((x - share).abs() < 1e-9, "{call}: {x}");
    }
}

/// Three samples of a worker in `pthread_mutex_lock`: asleep in the futex, woken and stopped
/// as the wait returned (waiting for a CPU on a loaded machine), and computing; and one of
/// the main thread in `pthread_join`. The lock wait counts from the call to its return, both
/// of the first two, and names the lock; the join is no lock wait.
#[test]
fn a_lock_wait_counts_until_its_return_and_a_join_is_none() {
    let mut s = Stacks::new(std::process::id() as i32);
    let t0 = Instant::now();
    let futex = |asleep| Syscall {
        asleep,
        ..LOCK_WAIT
    };
    let lock = [
        ("app", "contend"),
        ("libc.so.6", "pthread_mutex_lock"),
        ("libc.so.6", "__lll_lock_wait"),
    ];
    let main = [
        ("libc.so.6", "__libc_start_call_main"),
        ("app", "main"),
        ("libc.so.6", "__pthread_clockjoin_ex"),
    ];
    for t in [
        worker(&lock, Some(futex(true))),
        worker(&lock, Some(futex(false))),
        worker(&[("app", "contend"), ("app", "work")], None),
        stack(1, &main, Some(futex(true))),
    ] {
        s.push(
            t0,
            Batch {
                stopped: Duration::ZERO,
                threads: vec![t],
            },
        );
    }
    let since = s.samples[0].at;
    let at = |tid: u32, path: &[Resource]| {
        let mut v = vec![Resource::Program("app".into()), Resource::Thread(tid)];
        v.extend_from_slice(path);
        s.fraction(Hypothesis::SyncWait, &Focus(v), tid as i32, since, 1)
            .unwrap()
    };
    let big_lock = Resource::Lock {
        addr: 0x4040,
        name: Some("big_lock".into()),
    };
    let x = at(2, &[func("worker"), func("contend"), big_lock]);
    assert!((x - 2.0 / 3.0).abs() < 1e-9, "{x}");
    assert_eq!(at(1, &[]), 0.0);
    assert_eq!(at(1, &[func("main")]), 0.0);
}

/// What the fake process side of [`a_wait_on_many_descriptors_is_one_refinement_naming_them`]
/// says each descriptor is: 6 and 7 the listening sockets, 3 to 5 pipes, the rest clients.
fn describe_fake(_: i32, fds: &[i32]) -> Vec<Watched> {
    fds.iter()
        .map(|&fd| {
            let (kind, at, what) = match fd {
                6 => (
                    "listening socket",
                    " *:6379",
                    "listening socket *:6379".into(),
                ),
                7 => (
                    "listening socket",
                    " [::]:6379",
                    "listening socket [::]:6379".into(),
                ),
                3..=5 => ("pipe", "", format!("pipe:[{fd}00]")),
                _ => (
                    "client connection",
                    " to 127.0.0.1:6379",
                    format!(
                        "client connection to 127.0.0.1:6379 from 127.0.0.1:{}",
                        40000 + fd
                    ),
                ),
            };
            Watched {
                fd,
                kind: kind.into(),
                at: at.into(),
                what,
            }
        })
        .collect()
}

/// A server's event loop: `serve` asleep in `epoll_wait` on instance 5, watching its two
/// listening sockets and the clients connected at the time (they come and go: 8 and 9, then
/// 8 and 10), 30 samples; in `epoll_wait` on instance 12 (another loop's, watching 20 and 21),
/// 6 samples; and `tick` in `poll` on three pipes, 24 samples. Each wait is one refinement
/// below its call, named by the call, its epoll instance and every descriptor any of its
/// samples showed, summarised by kind: not one refinement per descriptor, each with the
/// wait's whole share (redis-server under redis-benchmark had eight findings, one per client
/// socket, for its one epoll_wait). Its fraction is the wait's, whatever descriptors each
/// sample showed.
#[test]
fn a_wait_on_many_descriptors_is_one_refinement_naming_them() {
    static CALLS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    fn read(_: i32, nr: u64, args: [u64; 3]) -> Vec<i32> {
        match (nr, args[0]) {
            (232, 5) if CALLS.fetch_add(1, Ordering::Relaxed).is_multiple_of(2) => vec![6, 7, 8, 9],
            (232, 5) => vec![6, 7, 8, 10],
            (232, _) => vec![20, 21],
            (7, _) => vec![3, 4, 5],
            _ => Vec::new(),
        }
    }
    let mut s = Stacks::new(std::process::id() as i32)
        .reading_waits(read)
        .describing(describe_fake);
    let t0 = Instant::now();
    let call = |nr: u64, arg0: u64| Syscall {
        nr,
        args: [arg0, 0x7000, 16],
        asleep: true,
    };
    for i in 0..60 {
        let (f, name, syscall) = match i {
            0..30 => ("serve", "epoll_wait", call(232, 5)),
            30..36 => ("serve", "epoll_wait", call(232, 12)),
            _ => ("tick", "poll", call(7, 0x8000)),
        };
        s.push(
            t0,
            Batch {
                stopped: Duration::from_micros(100),
                threads: vec![worker(&[("app", f), ("libc.so.6", name)], Some(syscall))],
            },
        );
    }
    let since = s.samples[0].at;
    let below = |f: &str, call: &str| {
        focus(&[
            Resource::Module("app".into()),
            func("worker"),
            func(f),
            Resource::Module("libc.so.6".into()),
            func(call),
        ])
    };
    let wait = |call: &str, epfd: Option<i32>, fds: &[i32]| {
        Resource::Wait(WaitSet {
            call: call.into(),
            epfd,
            fds: describe_fake(0, fds),
        })
    };
    let served = wait("epoll_wait", Some(5), &[6, 7, 8, 9, 10]);
    let other = wait("epoll_wait", Some(12), &[20, 21]);
    let polled = wait("poll", None, &[3, 4, 5]);
    let at = below("serve", "epoll_wait");
    assert_eq!(
        s.refine(Hypothesis::ExternalWait, &at, 2, since, 0.05),
        [
            (at.with(served.clone()), 0.5),
            (at.with(other.clone()), 0.1)
        ]
    );
    assert_eq!(
        served.to_string(),
        "epoll fd 5 watching 5 fds: listening socket *:6379, listening socket [::]:6379, \
         3 client connections to 127.0.0.1:6379"
    );
    assert_eq!(
        other.to_string(),
        "epoll fd 12 watching 2 fds: 2 client connections to 127.0.0.1:6379"
    );
    let x = s
        .fraction(Hypothesis::ExternalWait, &at.with(served), 2, since, 1)
        .unwrap();
    assert!((x - 0.5).abs() < 1e-9, "{x}");
    let at = below("tick", "poll");
    assert_eq!(
        s.refine(Hypothesis::ExternalWait, &at, 2, since, 0.05),
        [(at.with(polled.clone()), 0.4)]
    );
    assert_eq!(polled.to_string(), "poll on 3 fds: 3 pipes");
    let x = s
        .fraction(Hypothesis::ExternalWait, &at.with(polled), 2, since, 1)
        .unwrap();
    assert!((x - 0.4).abs() < 1e-9, "{x}");
}

/// Of a thread's waits, those to take a lock (`pthread_mutex_lock`, however many underscores
/// its name has) count for `lock_fraction`; one for a condition does not, nor a join.
#[test]
fn only_waits_to_take_a_lock_count_as_lock_waits() {
    let mut s = Stacks::new(std::process::id() as i32);
    let t0 = Instant::now();
    let futex = LOCK_WAIT;
    for call in [
        "pthread_mutex_lock",
        "___pthread_mutex_lock",
        "pthread_cond_wait",
        "pthread_cond_wait",
    ] {
        s.push(
            t0,
            Batch {
                stopped: Duration::ZERO,
                threads: vec![worker(
                    &[("app", "contend"), ("libc.so.6", call)],
                    Some(futex),
                )],
            },
        );
    }
    let since = s.samples[0].at;
    let thread = focus(&[]);
    assert_eq!(
        s.fraction(Hypothesis::SyncWait, &thread, 2, since, 4),
        Some(1.0)
    );
    assert_eq!(s.lock_fraction(&thread, 2, since, 4), Some(0.5));
    assert_eq!(
        s.lock_fraction(&focus(&[func("worker"), func("contend")]), 2, since, 4),
        Some(0.5)
    );
    assert_eq!(s.lock_fraction(&thread, 2, since, 5), None);
}

/// A condition variable's two futex words are one wait on the variable; a mutex's futex, and
/// a function of the program's own that happens to be called so, are left as they are.
#[test]
fn a_condition_variables_two_words_are_one_wait() {
    let futex = |addr: u64| Syscall {
        nr: FUTEX,
        args: [addr, 0x189, 0],
        asleep: true,
    };
    let cond = |wait: &str| {
        vec![
            frame("libc.so.6", "__futex_abstimed_wait_common"),
            frame("libc.so.6", wait),
            frame("app", "take_turn"),
        ]
    };
    // python3's lock: `_PyRuntime+432` and `+436`, one condition at `+392`.
    let runtime = 0xa5b7c0;
    for wait in [
        "pthread_cond_timedwait",
        "___pthread_cond_timedwait64",
        "pthread_cond_wait",
    ] {
        for word in [runtime + 432, runtime + 436] {
            assert_eq!(
                waited_object(futex(word), &cond(wait)).args[0],
                runtime + 392,
                "{wait} {word:#x}"
            );
        }
    }
    let mutex = vec![
        frame("libc.so.6", "__lll_lock_wait"),
        frame("libc.so.6", "pthread_mutex_lock"),
        frame("app", "take_turn"),
    ];
    assert_eq!(waited_object(futex(0x4044), &mutex).args[0], 0x4044);
    let own = vec![
        frame("app", "pthread_cond_wait_for_work"),
        frame("app", "main"),
    ];
    assert_eq!(waited_object(futex(0x4044), &own).args[0], 0x4044);
}
