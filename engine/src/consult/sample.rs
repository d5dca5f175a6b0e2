//! What each thread of a process spends its wall time on, measured without instrumentation: the
//! root and thread levels of the search.
//!
//! Two sources, both in `/proc/PID/task/TID/`:
//! - `schedstat`: nanoseconds on a CPU and nanoseconds runnable but waiting for one, as the
//!   scheduler counts them: [`Hypothesis::CPUBound`] (both) and [`Hypothesis::RunQueue`]
//!   (the second) exactly.
//! - `syscall`: the system call a blocked thread is in, with its arguments, sampled: futex and
//!   semaphore waits are [`Hypothesis::SyncWait`]; read/write-family and file system calls on a
//!   file are [`Hypothesis::IOBlocking`] (on a socket, pipe or terminal they wait for the outside
//!   world); poll, select, epoll, sleeps, accept, wait are [`Hypothesis::ExternalWait`].
//!
//! Reading another process's `syscall` file needs the right to trace it, which a session that
//! started or attached to the process has.

use std::collections::BTreeMap;
use std::fs::File;
use std::os::unix::fs::FileExt;
use std::time::{Duration, Instant};

use super::cpus::Placement;
use super::Hypothesis;

/// The kernel's limit on a task's name (`TASK_COMM_LEN` less its NUL): a longer one is cut.
const COMM_LEN: usize = 15;

/// The name users know process `pid` by: its `comm` (the base name of the path it was
/// started through, so `redis-server` for Debian's link to `redis-check-rdb`), completed from
/// `argv[0]` where the kernel cut it at [`COMM_LEN`]; `None` when `/proc` does not say.
pub fn program_name(pid: i32) -> Option<String> {
    let comm = std::fs::read_to_string(format!("/proc/{pid}/comm")).ok()?;
    let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
    let arg0 = cmdline.split(|&b| b == 0).next().unwrap_or_default();
    name_of(comm.trim_end_matches('\n'), &String::from_utf8_lossy(arg0))
}

/// [`program_name`] from the process's `comm` and `argv[0]`. A program that rewrites its
/// arguments (redis' `redis-server *:6379`) keeps its `comm`.
pub fn name_of(comm: &str, arg0: &str) -> Option<String> {
    if comm.is_empty() {
        return None;
    }
    let base = arg0.rsplit('/').next().unwrap_or(arg0);
    let cut = comm.len() == COMM_LEN
        && base.len() > COMM_LEN
        && base.starts_with(comm)
        && !base.contains(char::is_whitespace);
    Some(if cut { base } else { comm }.to_owned())
}

/// What a thread was doing when sampled.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Activity {
    /// On a CPU or runnable (`schedstat` says which).
    Running,
    /// Blocked in a system call of this kind; `fd` and `path` for calls on a descriptor.
    Blocked {
        /// The hypothesis the call's kind supports (lock, file or outside wait).
        hypothesis: Hypothesis,
        /// The system call's number.
        syscall: u64,
        /// The descriptor it blocks on, for calls on one.
        fd: Option<i32>,
    },
    /// Blocked in a call no hypothesis covers.
    Other(u64),
}

/// The kind of wait a blocked system call is, before looking at its descriptor.
fn kind_of(syscall: u64) -> Option<(Hypothesis, bool)> {
    // (hypothesis, whether the first argument is a descriptor that decides it)
    Some(match syscall {
        // futex, futex_waitv, semop, semtimedop, msgrcv, msgsnd
        202 | 449 | 65 | 220 | 70 | 69 => (Hypothesis::SyncWait, false),
        // read, write, pread64, pwrite64, readv, writev, preadv, pwritev, preadv2, pwritev2,
        // sendfile, copy_file_range, splice, fsync, fdatasync, sync_file_range, fallocate,
        // ftruncate, getdents64
        0 | 1 | 17 | 18 | 19 | 20 | 295 | 296 | 327 | 328 | 40 | 326 | 275 | 74 | 75 | 277
        | 285 | 77 | 217 => (Hypothesis::IOBlocking, true),
        // open, openat, openat2, close, stat, fstat, lstat, newfstatat, statx, unlink(at),
        // rename(at/2), mkdir(at), sync, syncfs, io_uring_enter, io_getevents
        2 | 257 | 437 | 3 | 4 | 5 | 6 | 262 | 332 | 87 | 263 | 82 | 264 | 316 | 83 | 258 | 162
        | 306 | 426 | 208 => (Hypothesis::IOBlocking, false),
        // poll, select, pselect6, ppoll, epoll_wait, epoll_pwait, epoll_pwait2, nanosleep,
        // clock_nanosleep, pause, accept, accept4, connect, recvfrom, recvmsg, recvmmsg,
        // sendto, sendmsg, wait4, waitid, rt_sigsuspend, rt_sigtimedwait
        7 | 23 | 270 | 271 | 232 | 281 | 441 | 35 | 230 | 34 | 43 | 288 | 42 | 45 | 47 | 299
        | 44 | 46 | 61 | 247 | 130 | 128 => (Hypothesis::ExternalWait, false),
        _ => return None,
    })
}

/// What `/proc/PID/fd/FD` names.
fn fd_target(pid: i32, fd: i32) -> Option<String> {
    std::fs::read_link(format!("/proc/{pid}/fd/{fd}"))
        .ok()
        .map(|p| p.to_string_lossy().into_owned())
}

/// True when a descriptor naming `target` is a file whose reads and writes are I/O, not a wait
/// for another party (sockets, pipes, terminals, event and timer descriptors are the latter).
fn is_file(target: &str) -> bool {
    !(target.starts_with("socket:")
        || target.starts_with("pipe:")
        || target.starts_with("anon_inode:")
        || target.starts_with("/dev/pts/")
        || target.starts_with("/dev/tty")
        || target == "/dev/console")
}

/// What a thread blocked in system call `nr` with arguments `args` (the first two) is doing:
/// the hypothesis its wait counts for, with the descriptor when the call is on one. Reads and
/// writes on sockets, pipes and terminals wait for another party, not for I/O; a futex call
/// that wakes others (an unlock) waits for nothing.
pub fn classify(pid: i32, nr: u64, args: [u64; 2]) -> Activity {
    let Some((hypothesis, by_fd)) = kind_of(nr) else {
        return Activity::Other(nr);
    };
    if nr == FUTEX && !futex_waits(args[1]) {
        return Activity::Other(nr);
    }
    if !by_fd {
        return Activity::Blocked {
            hypothesis,
            syscall: nr,
            fd: None,
        };
    }
    let fd = args[0] as i32;
    let hypothesis = match fd_target(pid, fd) {
        Some(t) if !is_file(&t) => Hypothesis::ExternalWait,
        _ => hypothesis,
    };
    Activity::Blocked {
        hypothesis,
        syscall: nr,
        fd: Some(fd),
    }
}

/// True for the futex operations that wait: `FUTEX_WAIT`, `FUTEX_LOCK_PI`,
/// `FUTEX_WAIT_BITSET`, `FUTEX_WAIT_REQUEUE_PI`, `FUTEX_LOCK_PI2` (the private and clock flags
/// masked off).
fn futex_waits(op: u64) -> bool {
    matches!(op & 0x7f, 0 | 6 | 9 | 11 | 13)
}

/// Reads one `syscall` file's contents as an activity, with the call's number and first
/// argument when it is blocked in one.
fn parse_syscall(pid: i32, text: &str) -> (Activity, Option<(u64, u64)>) {
    let mut words = text.split_whitespace();
    let Some(first) = words.next() else {
        return (Activity::Running, None);
    };
    let Ok(nr) = first.parse::<u64>() else {
        // "running", or "-1 ..." for a thread stopped outside a system call.
        return (Activity::Running, None);
    };
    let mut arg = || {
        words
            .next()
            .and_then(|a| u64::from_str_radix(a.trim_start_matches("0x"), 16).ok())
            .unwrap_or(0)
    };
    let args = [arg(), arg()];
    (classify(pid, nr, args), Some((nr, args[0])))
}

/// Nanoseconds on a CPU and waiting for one, from a `schedstat` file.
fn parse_schedstat(text: &str) -> Option<(u64, u64)> {
    let mut w = text.split_whitespace().map(|x| x.parse::<u64>().ok());
    Some((w.next()??, w.next()??))
}

/// Thread `tid` of `pid`'s nanoseconds on a CPU and runnable waiting for one, from its
/// `schedstat`; `None` when it is gone.
pub fn schedstat(pid: i32, tid: i32) -> Option<(u64, u64)> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/task/{tid}/schedstat")).ok()?;
    parse_schedstat(&text)
}

/// True when process `pid` has ended: its `/proc` entry is gone (ENOENT, ESRCH: its exit
/// status was collected), or it is a zombie or dying, its threads gone. Whatever reading
/// `/proc` or stopping it meets then is the end of the search, not an error of it.
pub fn ended(pid: i32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => stat_ended(&stat),
        Err(e) => e.kind() == std::io::ErrorKind::NotFound || e.raw_os_error() == Some(libc::ESRCH),
    }
}

/// True when a `/proc/PID/stat` line's state is a zombie's or a dying process's (`Z`, `X`).
/// The state follows the command name in parentheses, which may hold anything, `)` too.
fn stat_ended(stat: &str) -> bool {
    let state = stat
        .rsplit_once(')')
        .and_then(|(_, rest)| rest.trim_start().chars().next());
    matches!(state, Some('Z' | 'X' | 'x'))
}

/// The threads of `pid`.
pub fn tids(pid: i32) -> std::io::Result<Vec<i32>> {
    let mut out: Vec<i32> = std::fs::read_dir(format!("/proc/{pid}/task"))?
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok())
        .collect();
    out.sort_unstable();
    Ok(out)
}

/// One thread's counts from its first sample to some moment: what a window subtracts.
#[derive(Clone, Debug)]
struct Counts {
    at: Instant,
    /// `schedstat`: nanoseconds on a CPU and runnable without one.
    sched: (u64, u64),
    samples: u32,
    /// Blocked samples by hypothesis.
    blocked: BTreeMap<Hypothesis, u32>,
    /// Blocked samples by descriptor, for refinement to the file.
    fds: BTreeMap<i32, u32>,
    /// Blocked samples by (system call, first argument): one key taking every sample of a
    /// window is a thread parked on one wait.
    waits: BTreeMap<(u64, u64), u32>,
}

/// One thread's record: its first sample and its latest counts.
#[derive(Clone, Debug)]
struct Record {
    first: Counts,
    now: Counts,
}

/// Every thread's counts at one moment; a window starts at one ([`Sampler::since`]).
#[derive(Clone, Debug, Default)]
pub struct Snapshot {
    threads: BTreeMap<i32, Counts>,
}

/// Samples a process's threads and says, per thread, what fraction of its wall time each
/// hypothesis took, since its first sample or since a [`Snapshot`]. One sampler serves any
/// number of experiments, each measuring from the snapshot taken when it started.
#[derive(Debug)]
pub struct Sampler {
    pid: i32,
    threads: BTreeMap<i32, Record>,
    /// Each thread's last system call other than `restart_syscall`, as (activity, call).
    last_call: BTreeMap<i32, (Activity, (u64, u64))>,
    /// The files read at each sample, kept open (see [`Files`]).
    files: Option<Files>,
    /// Files opened so far.
    opens: u64,
    /// A thread could not be read at the last sample: list them again.
    relist: bool,
}

/// The `/proc` files a sample reads, kept open: read again from offset 0, a `/proc` file is
/// generated anew. Opening each at every sample (200 a second: the task directory, then two
/// files per thread) was most of the sampler's CPU time, the kernel's path walks above all.
#[derive(Debug)]
struct Files {
    /// `/proc/PID/stat`, for the number of threads.
    stat: File,
    /// The threads listed last, with their `schedstat` and `syscall` files (none past
    /// [`KEPT_THREADS`]: those are opened at each sample).
    threads: BTreeMap<i32, Option<(File, File)>>,
}

/// One thread's sample: its `schedstat` (none when it ended) and its `syscall` file.
type Reading = (i32, Option<(u64, u64)>, Option<String>);

/// Threads whose files a sampler keeps open, two each: a process of thousands of threads
/// must not take gsh's descriptors.
const KEPT_THREADS: usize = 256;

/// All of `f`, read from its start into `buf`.
fn read_from_start(f: &File, buf: &mut Vec<u8>) -> std::io::Result<()> {
    buf.clear();
    let mut chunk = [0u8; 1024];
    loop {
        let n = f.read_at(&mut chunk, buf.len() as u64)?;
        if n == 0 {
            return Ok(());
        }
        buf.extend_from_slice(&chunk[..n]);
    }
}

/// The number of threads in a `/proc/PID/stat` line (its 20th field; the command name in
/// parentheses may hold anything, `)` too).
fn stat_threads(stat: &str) -> Option<usize> {
    stat.rsplit_once(')')?
        .1
        .split_whitespace()
        .nth(17)?
        .parse()
        .ok()
}

/// Fractions of one thread's wall time over a window.
#[derive(Clone, Debug, PartialEq)]
pub struct ThreadTime {
    /// The thread's id.
    pub tid: i32,
    /// Wall seconds the window covered for this thread.
    pub seconds: f64,
    /// Each hypothesis' fraction of that wall time (0 to 1).
    pub fractions: BTreeMap<Hypothesis, f64>,
    /// Descriptors the thread blocked on, with the fraction of samples on each.
    pub fds: Vec<(i32, f64)>,
    /// The thread used almost no CPU and sat in one futex wait (same address) for the window:
    /// it is parked (a pool thread waiting for work, a condition nobody signals, a join), so its wait
    /// slows nothing and does not count as [`Hypothesis::SyncWait`].
    pub parked: bool,
    /// Samples in the window.
    pub samples: u32,
}

/// CPU time below which a thread counts as having done nothing over a window: 1% of it (a
/// parked thread woken by each stack sample's stop uses a little).
const PARKED_CPU: f64 = 0.01;

impl Sampler {
    /// A sampler of process `pid`; nothing is read until [`Sampler::sample`].
    pub fn new(pid: i32) -> Sampler {
        Sampler {
            pid,
            threads: BTreeMap::new(),
            last_call: BTreeMap::new(),
            files: None,
            opens: 0,
            relist: false,
        }
    }

    /// How many files the sampler has opened (each sample's are kept open, see [`Files`]).
    pub fn opens(&self) -> u64 {
        self.opens
    }

    /// `/proc/PID/task/TID/NAME`, opened.
    fn open(&mut self, tid: i32, name: &str) -> std::io::Result<File> {
        self.opens += 1;
        File::open(format!("/proc/{}/task/{tid}/{name}", self.pid))
    }

    /// The threads to sample, each with its files when they are kept open: listed again when
    /// their number changed or `relist` (one of them could not be read: it ended, and another
    /// may have started). True with them when they were listed now.
    fn thread_files(&mut self, relist: bool, buf: &mut Vec<u8>) -> std::io::Result<(Files, bool)> {
        let mut files = match self.files.take() {
            Some(f) => f,
            None => {
                self.opens += 1;
                Files {
                    stat: File::open(format!("/proc/{}/stat", self.pid))?,
                    threads: BTreeMap::new(),
                }
            }
        };
        read_from_start(&files.stat, buf)?;
        let count = stat_threads(&String::from_utf8_lossy(buf));
        let listed = relist || count != Some(files.threads.len());
        if listed {
            self.opens += 1;
            let now = tids(self.pid)?;
            let mut threads = BTreeMap::new();
            for tid in now {
                let kept = match files.threads.remove(&tid) {
                    Some(Some(kept)) => Some(kept),
                    _ if threads.len() < KEPT_THREADS => {
                        match (self.open(tid, "schedstat"), self.open(tid, "syscall")) {
                            (Ok(a), Ok(b)) => Some((a, b)),
                            _ => None,
                        }
                    }
                    _ => None,
                };
                threads.insert(tid, kept);
            }
            files.threads = threads;
        }
        Ok((files, listed))
    }

    /// Each of `files`' threads with its `schedstat` reading (none when it ended) and its
    /// `syscall` file's text.
    fn read_threads(&mut self, files: &Files, buf: &mut Vec<u8>) -> Vec<Reading> {
        let pid = self.pid;
        let mut out = Vec::with_capacity(files.threads.len());
        for (&tid, kept) in &files.threads {
            let mut read = |i: usize, name: &str| -> Option<String> {
                match kept {
                    Some(f) => read_from_start(if i == 0 { &f.0 } else { &f.1 }, buf).ok()?,
                    None => {
                        self.opens += 1;
                        *buf = std::fs::read(format!("/proc/{pid}/task/{tid}/{name}")).ok()?;
                    }
                }
                Some(String::from_utf8_lossy(buf).into_owned())
            };
            let sched = read(0, "schedstat").and_then(|t| parse_schedstat(&t));
            let syscall = sched.and_then(|_| read(1, "syscall"));
            out.push((tid, sched, syscall));
        }
        out
    }

    /// Takes one sample of every thread. Threads that ended keep what they had; an error means
    /// the process is gone or not readable.
    pub fn sample(&mut self) -> std::io::Result<()> {
        let now = Instant::now();
        let mut buf = Vec::new();
        let relist = std::mem::take(&mut self.relist);
        let (mut files, listed) = self.thread_files(relist, &mut buf)?;
        let mut read = self.read_threads(&files, &mut buf);
        let ended = |read: &[Reading]| read.iter().any(|r| r.1.is_none());
        if ended(&read) && !listed {
            // One ended: another may have started in its place, the number the same.
            self.files = Some(files);
            (files, _) = self.thread_files(true, &mut buf)?;
            read = self.read_threads(&files, &mut buf);
        }
        self.relist = ended(&read);
        self.files = Some(files);
        for (tid, sched, syscall) in read {
            let Some(sched) = sched else {
                continue;
            };
            let (activity, call) = syscall
                .map(|t| parse_syscall(self.pid, &t))
                .unwrap_or((Activity::Running, None));
            // A call interrupted by a stop (gsh's stack samples) resumes as
            // `restart_syscall`: it is still the call the thread was last seen in.
            let (activity, call) = match call {
                Some((nr, _)) if nr == super::stacks::RESTART_SYSCALL => {
                    match self.last_call.get(&tid) {
                        Some((a, c)) => (a.clone(), Some(*c)),
                        None => (activity, call),
                    }
                }
                Some(c) => {
                    self.last_call.insert(tid, (activity.clone(), c));
                    (activity, call)
                }
                None => (activity, call),
            };
            let Some(r) = self.threads.get_mut(&tid) else {
                let first = Counts {
                    at: now,
                    sched,
                    samples: 0,
                    blocked: BTreeMap::new(),
                    fds: BTreeMap::new(),
                    waits: BTreeMap::new(),
                };
                self.threads.insert(
                    tid,
                    Record {
                        first: first.clone(),
                        now: first,
                    },
                );
                continue;
            };
            let c = &mut r.now;
            c.at = now;
            c.sched = sched;
            c.samples += 1;
            if let Activity::Blocked { hypothesis, fd, .. } = activity {
                *c.blocked.entry(hypothesis).or_default() += 1;
                if let Some(fd) = fd {
                    *c.fds.entry(fd).or_default() += 1;
                }
            }
            if let Some(call) = call {
                *c.waits.entry(call).or_default() += 1;
            }
        }
        Ok(())
    }

    /// Every thread's counts now, to measure a window from.
    pub fn snapshot(&self) -> Snapshot {
        Snapshot {
            threads: self
                .threads
                .iter()
                .map(|(&tid, r)| (tid, r.now.clone()))
                .collect(),
        }
    }

    /// Each thread's fractions since its first sample, for threads sampled at least twice.
    pub fn threads(&self) -> Vec<ThreadTime> {
        self.since(&Snapshot::default())
    }

    /// Each thread's fractions since `snap` (since its first sample for a thread that started
    /// later), for threads sampled at least once in the window.
    pub fn since(&self, snap: &Snapshot) -> Vec<ThreadTime> {
        self.threads
            .iter()
            .filter_map(|(&tid, r)| {
                let base = snap.threads.get(&tid).unwrap_or(&r.first);
                let end = &r.now;
                let wall = end.at.duration_since(base.at).as_secs_f64();
                let samples = end.samples - base.samples;
                if wall <= 0.0 || samples == 0 {
                    return None;
                }
                let ns = |a: u64, b: u64| b.saturating_sub(a) as f64 / 1e9 / wall;
                let cpu = ns(base.sched.0, end.sched.0).min(1.0);
                // Nine samples in ten: a sample may catch the thread in the moment a stack
                // sample's stop woke it.
                let parked = cpu < PARKED_CPU
                    && end.waits.iter().any(|(k, _)| {
                        k.0 == FUTEX && 10 * delta(&end.waits, &base.waits, k) >= 9 * samples
                    });
                let mut fractions = BTreeMap::new();
                let queued = ns(base.sched.1, end.sched.1).min(1.0);
                fractions.insert(Hypothesis::CPUBound, (cpu + queued).min(1.0));
                fractions.insert(Hypothesis::RunQueue, queued);
                for h in [
                    Hypothesis::SyncWait,
                    Hypothesis::IOBlocking,
                    Hypothesis::ExternalWait,
                ] {
                    let n = delta(&end.blocked, &base.blocked, &h);
                    let x = f64::from(n) / f64::from(samples);
                    fractions.insert(
                        h,
                        if parked && h == Hypothesis::SyncWait {
                            0.0
                        } else {
                            x
                        },
                    );
                }
                let fds = end
                    .fds
                    .keys()
                    .map(|fd| (*fd, delta(&end.fds, &base.fds, fd)))
                    .filter(|(_, n)| *n > 0)
                    .map(|(fd, n)| (fd, f64::from(n) / f64::from(samples)))
                    .collect();
                Some(ThreadTime {
                    tid,
                    seconds: wall,
                    fractions,
                    fds,
                    parked,
                    samples,
                })
            })
            .collect()
    }
}

/// The futex system call's number.
const FUTEX: u64 = 202;

/// How much a count grew between two moments.
fn delta<K: Ord>(end: &BTreeMap<K, u32>, base: &BTreeMap<K, u32>, k: &K) -> u32 {
    end.get(k)
        .copied()
        .unwrap_or(0)
        .saturating_sub(base.get(k).copied().unwrap_or(0))
}

/// What gsh, the program and the machine had used at one moment: the ends of the interval
/// over which [`Competition`] is measured.
#[derive(Clone, Debug)]
pub struct Usage {
    /// gsh's CPU time, all its threads (not the program, when it is gsh's child).
    gsh: Duration,
    /// Each of the program's threads' nanoseconds on a CPU and runnable waiting for one.
    program: BTreeMap<i32, (u64, u64)>,
    /// The busy time of the CPUs the program may run on, from `/proc/stat`, in clock ticks.
    busy: u64,
    /// False when gsh's threads run on none of the program's CPUs.
    shared: bool,
    at: Instant,
}

impl Usage {
    /// What gsh, program `pid` and the CPUs it may run on (`placement`) have used so far.
    pub fn now(pid: i32, placement: &Placement) -> Usage {
        let program = tids(pid)
            .unwrap_or_default()
            .into_iter()
            .filter_map(|tid| Some((tid, schedstat(pid, tid)?)))
            .collect();
        Usage {
            gsh: own_cpu(),
            program,
            busy: std::fs::read_to_string("/proc/stat")
                .ok()
                .and_then(|t| placement.busy(&t))
                .unwrap_or(0),
            shared: placement.shared,
            at: Instant::now(),
        }
    }

    /// What was used from `before` to this moment. A thread started since counts from its
    /// start (its counts begin at zero); one that ended since is lost for the interval, which
    /// [`Meter`] keeps short.
    pub fn since(&self, before: &Usage) -> Competition {
        let (mut run, mut waited) = (0, 0);
        for (tid, (r, w)) in &self.program {
            let (r0, w0) = match before.program.get(tid) {
                Some(&at) => at,
                // Unless `before` read no thread at all: its `/proc` read failed, and every
                // thread's whole life would count.
                None if !before.program.is_empty() => (0, 0),
                None => continue,
            };
            run += r.saturating_sub(r0);
            waited += w.saturating_sub(w0);
        }
        // SAFETY: sysconf has no preconditions.
        let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as f64;
        let gsh = self.gsh.saturating_sub(before.gsh).as_secs_f64();
        Competition {
            wall: self.at.saturating_duration_since(before.at).as_secs_f64(),
            gsh,
            gsh_there: if self.shared { gsh } else { 0.0 },
            program: run as f64 / 1e9,
            waited: waited as f64 / 1e9,
            busy: self.busy.saturating_sub(before.busy) as f64 / hz,
        }
    }
}

/// What gsh, the program and the machine used since a search began, read round by round: a
/// thread of the program that ended between two readings keeps what it used up to the first.
/// Read once over the whole search, `sort --parallel=2`'s merge threads, each living a few
/// seconds, were never counted: the report said its threads waited for a CPU 0.0% of the
/// time, beside RunQueue findings of 0.4 to 0.6 for them.
pub struct Meter {
    pid: i32,
    placement: Placement,
    last: Usage,
    total: Competition,
}

impl Meter {
    /// How often [`Meter::read`] reads `/proc` again.
    const EVERY: Duration = Duration::from_millis(250);

    /// A meter of process `pid` from now, over the CPUs it may run on, gsh's counted there
    /// where the calling thread may run there too ([`Placement::of`]).
    pub fn new(pid: i32) -> Meter {
        let placement = Placement::of(pid);
        Meter {
            pid,
            last: Usage::now(pid, &placement),
            placement,
            total: Competition::default(),
        }
    }

    /// What was used since the meter began, read again when it was last read
    /// [`Meter::EVERY`] or longer ago.
    pub fn read(&mut self) -> Competition {
        if self.last.at.elapsed() >= Meter::EVERY {
            self.read_now();
        }
        self.total
    }

    /// What was used since the meter began, read now.
    pub fn read_now(&mut self) -> Competition {
        let now = Usage::now(self.pid, &self.placement);
        self.total.add(&now.since(&self.last));
        // A failed read (the process ended) keeps the threads last seen to measure from.
        if !now.program.is_empty() {
            self.last = now;
        } else {
            self.last.gsh = now.gsh;
            self.last.busy = now.busy;
            self.last.at = now.at;
        }
        self.total
    }
}

/// gsh's CPU time so far, all its threads.
fn own_cpu() -> Duration {
    // SAFETY: an all-zero rusage is a valid value for the call to overwrite.
    let mut u: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: `u` is a valid, writable rusage for the call.
    if unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut u) } != 0 {
        return Duration::ZERO;
    }
    let tv = |t: libc::timeval| Duration::new(t.tv_sec as u64, t.tv_usec as u32 * 1000);
    tv(u.ru_utime) + tv(u.ru_stime)
}

/// The CPU time gsh, the program and the machine used over an interval, in seconds: how
/// much of the program's running gsh's own work took by competing with it for the CPUs
/// ([`Competition::took`]).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Competition {
    /// The interval's wall seconds.
    pub wall: f64,
    /// gsh's CPU seconds.
    pub gsh: f64,
    /// gsh's CPU seconds where its threads could run on the program's CPUs: all of them, or
    /// none where gsh kept off them ([`super::cpus`]).
    pub gsh_there: f64,
    /// The program's threads' CPU seconds.
    pub program: f64,
    /// Seconds the program's threads were runnable without a CPU, summed.
    pub waited: f64,
    /// The busy CPU seconds of the CPUs the program may run on, together.
    pub busy: f64,
}

impl Competition {
    /// The program's running time gsh's CPU time took from it. Where the program's CPUs
    /// were all busy, the time gsh ran there came out of what everything else would have run
    /// there, each in proportion to what it did run: the program's share of those CPUs' busy
    /// time not gsh's. Never more than the time the program's threads waited for a CPU (with
    /// a CPU free whenever they wanted one, gsh took nothing from them), nor than gsh's own
    /// time there (none, where gsh kept off the program's CPUs, [`super::cpus`]). gsh's time
    /// is counted as all on the program's CPUs where it may run there: left to the scheduler,
    /// it runs mostly where the threads it stops run.
    ///
    /// On python3 computing beside a busy twin on 2 CPUs (`xtask bench-consult --python`),
    /// gsh used 0.2 of a CPU during a search while its stops held the program 1% of the
    /// time; the program lost 13% to 15% of its running against its twin, waiting for a CPU,
    /// which no other part of the estimate counted.
    pub fn took(&self) -> f64 {
        let others = self.busy - self.gsh_there;
        if self.gsh_there <= 0.0 || others <= 0.0 {
            return 0.0;
        }
        (self.gsh_there * (self.program / others).min(1.0)).min(self.waited.max(0.0))
    }

    /// Adds what was used over the interval that follows this one's.
    pub fn add(&mut self, next: &Competition) {
        self.wall += next.wall;
        self.gsh += next.gsh;
        self.gsh_there += next.gsh_there;
        self.program += next.program;
        self.waited += next.waited;
        self.busy += next.busy;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::process::{Command, Stdio};
    use std::time::Duration;

    #[test]
    fn system_calls_are_classified_by_kind_and_descriptor() {
        let me = std::process::id() as i32;
        let futex = parse_syscall(me, "202 0x7f00 0x80 0x2 0x0 0x0 0x0 0x7ffc 0x7f00").0;
        // FUTEX_WAKE_PRIVATE: an unlock waking a waiter, not a wait.
        let wake = parse_syscall(me, "202 0x7f00 0x81 0x1 0x0 0x0 0x0 0x7ffc 0x7f00").0;
        assert_eq!(wake, Activity::Other(202));
        assert!(matches!(
            futex,
            Activity::Blocked {
                hypothesis: Hypothesis::SyncWait,
                ..
            }
        ));
        let sleep = parse_syscall(me, "230 0x0 0x0 0x7ffc 0x0 0x0 0x0 0x7ffc 0x7f00").0;
        assert!(matches!(
            sleep,
            Activity::Blocked {
                hypothesis: Hypothesis::ExternalWait,
                ..
            }
        ));
        assert_eq!(parse_syscall(me, "running").0, Activity::Running);
        assert_eq!(parse_syscall(me, "-1 0x7ffc 0x40").0, Activity::Running);
        assert_eq!(parse_syscall(me, "39 0x0").0, Activity::Other(39));
        // A read on a pipe waits for the writer; on a file it is I/O.
        let (r, _w) = std::io::pipe().unwrap();
        let file = std::fs::File::open("/proc/self/exe").unwrap();
        use std::os::fd::AsRawFd;
        let on = |fd: i32| parse_syscall(me, &format!("0 {fd:#x} 0x7ffc 0x1000 0 0 0 0 0")).0;
        assert!(matches!(
            on(r.as_raw_fd()),
            Activity::Blocked {
                hypothesis: Hypothesis::ExternalWait,
                ..
            }
        ));
        assert_eq!(
            on(file.as_raw_fd()),
            Activity::Blocked {
                hypothesis: Hypothesis::IOBlocking,
                syscall: 0,
                fd: Some(file.as_raw_fd()),
            }
        );
    }

    /// A spinning shell is CPU-bound, a sleeping one waits outside, and `cat` on an idle pipe
    /// waits for its writer.
    #[test]
    fn real_processes_are_measured_as_what_they_do() {
        let spin = Command::new("sh")
            .args(["-c", "while :; do :; done"])
            .spawn()
            .unwrap();
        let sleep = Command::new("sleep").arg("30").spawn().unwrap();
        let cat = Command::new("cat")
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .spawn()
            .unwrap();
        let mut samplers: Vec<Sampler> = [spin.id(), sleep.id(), cat.id()]
            .iter()
            .map(|&p| Sampler::new(p as i32))
            .collect();
        for _ in 0..60 {
            for s in &mut samplers {
                s.sample().unwrap();
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        let fraction = |s: &Sampler, h: Hypothesis| s.threads()[0].fractions[&h];
        for mut c in [spin, sleep, cat] {
            let _ = c.kill();
            let _ = c.wait();
        }
        // The spinner shares two cores with the test suite: it is on a CPU or waiting for one,
        // which is what CPUBound measures.
        let busy = fraction(&samplers[0], Hypothesis::CPUBound);
        assert!(busy > 0.8, "spinning: {busy}");
        assert!(fraction(&samplers[1], Hypothesis::ExternalWait) > 0.9);
        assert!(fraction(&samplers[1], Hypothesis::CPUBound) < 0.1);
        assert!(fraction(&samplers[2], Hypothesis::ExternalWait) > 0.9);
        assert!(fraction(&samplers[2], Hypothesis::IOBlocking) < 0.1);
    }

    /// A sample reads again the files the one before read, without opening them: opening
    /// the task directory and each thread's two files at every sample (200 a second) was
    /// most of the sampler's CPU time. Fails so: 3 files opened per sample.
    #[test]
    fn samples_read_their_files_again_without_opening_them() {
        let mut sleep = Command::new("sleep").arg("30").spawn().unwrap();
        let mut s = Sampler::new(sleep.id() as i32);
        s.sample().unwrap();
        let opened = s.opens();
        for _ in 0..50 {
            std::thread::sleep(Duration::from_millis(5));
            s.sample().unwrap();
        }
        let threads = s.threads();
        let _ = sleep.kill();
        let _ = sleep.wait();
        assert_eq!(s.opens(), opened);
        assert_eq!(threads.len(), 1);
        assert_eq!(threads[0].samples, 50);
        assert!(threads[0].fractions[&Hypothesis::ExternalWait] > 0.9);
    }

    /// With its files kept open, a sampler still sees a thread that starts later, and one
    /// that ended keeps what it had, as when it listed the threads at every sample.
    #[test]
    fn a_sampler_with_its_files_open_sees_threads_come_and_go() {
        let mut s = Sampler::new(std::process::id() as i32);
        let start = || {
            let (tx, rx) = std::sync::mpsc::channel::<()>();
            let (tid_tx, tid_rx) = std::sync::mpsc::channel();
            let t = std::thread::spawn(move || {
                // SAFETY: gettid has no preconditions.
                tid_tx.send(unsafe { libc::gettid() }).unwrap();
                let _ = rx.recv();
            });
            (tid_rx.recv().unwrap(), tx, t)
        };
        let sampled = |s: &Sampler, tid: i32| s.threads().iter().any(|t| t.tid == tid);
        s.sample().unwrap();
        let (first, stop, t) = start();
        s.sample().unwrap();
        s.sample().unwrap();
        assert!(sampled(&s, first));
        stop.send(()).unwrap();
        t.join().unwrap();
        let (second, stop, t) = start();
        s.sample().unwrap();
        s.sample().unwrap();
        stop.send(()).unwrap();
        t.join().unwrap();
        assert!(sampled(&s, second));
        assert!(sampled(&s, first));
    }

    #[test]
    fn a_gone_process_is_an_error() {
        let mut c = Command::new("true").spawn().unwrap();
        let pid = c.id() as i32;
        c.wait().unwrap();
        assert!(Sampler::new(pid).sample().is_err());
    }
}

#[cfg(test)]
mod usage_tests {
    use super::*;

    #[test]
    fn usage_since_an_earlier_moment_counts_the_threads_seen_at_both_and_those_started_since() {
        let now = Instant::now();
        let before = Usage {
            gsh: Duration::from_millis(100),
            program: [(1, (1_000_000_000, 0)), (2, (0, 0))].into(),
            busy: 100,
            shared: true,
            at: now,
        };
        let after = Usage {
            gsh: Duration::from_millis(600),
            program: [(1, (3_000_000_000, 500_000_000)), (3, (9_000_000_000, 0))].into(),
            busy: 700,
            shared: true,
            at: now + Duration::from_secs(3),
        };
        let c = after.since(&before);
        assert!((c.gsh - 0.5).abs() < 1e-9);
        assert_eq!(c.gsh_there, c.gsh);
        // Kept off the program's CPUs, gsh ran none of its time there.
        let apart = Usage {
            shared: false,
            ..after.clone()
        }
        .since(&before);
        assert_eq!((apart.gsh, apart.gsh_there), (c.gsh, 0.0));
        assert_eq!(apart.took(), 0.0);
        // Thread 2 ended meanwhile; thread 3 started: all of its time is the interval's.
        assert!((c.program - 11.0).abs() < 1e-9);
        assert!((c.waited - 0.5).abs() < 1e-9);
        assert!((c.wall - 3.0).abs() < 1e-9);
        // SAFETY: sysconf has no preconditions.
        let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as f64;
        assert!((c.busy - 600.0 / hz).abs() < 1e-9);
    }

    /// A before that read no thread (its `/proc` read failed) counts nothing of the program's.
    #[test]
    fn usage_since_a_failed_read_counts_no_thread() {
        let now = Instant::now();
        let before = Usage {
            gsh: Duration::ZERO,
            program: BTreeMap::new(),
            busy: 0,
            shared: true,
            at: now,
        };
        let after = Usage {
            program: [(1, (5_000_000_000, 1_000_000_000))].into(),
            at: now + Duration::from_secs(1),
            ..before.clone()
        };
        assert_eq!(after.since(&before).program, 0.0);
    }

    /// Threads that live a few tenths of a second each, one after the other, all between
    /// the meter's first reading and its last: each counts from its start to the reading
    /// made while it ran (counted only where seen at both ends, none counted).
    #[test]
    fn a_meter_counts_threads_that_came_and_went_between_its_first_and_last_reading() {
        let mut meter = Meter::new(std::process::id() as i32);
        for _ in 0..4 {
            let t = std::thread::spawn(|| {
                let t = Instant::now();
                while t.elapsed() < Duration::from_millis(300) {
                    std::hint::spin_loop();
                }
            });
            std::thread::sleep(Duration::from_millis(150));
            meter.read_now();
            t.join().unwrap();
        }
        let c = meter.read_now();
        // Each was runnable, on a CPU or waiting for one, from its start to that reading.
        assert!(c.program + c.waited > 0.4, "{c:?}");
    }
}

#[cfg(test)]
mod ended_tests {
    use super::*;

    /// A process gone from `/proc` (ENOENT) and a zombie have ended; one running has not.
    #[test]
    fn ended_tells_a_zombie_and_a_collected_process_from_a_running_one() {
        assert!(!ended(std::process::id() as i32));
        let mut child = std::process::Command::new("/bin/true")
            .spawn()
            .expect("run /bin/true");
        let pid = child.id() as i32;
        // A zombie until collected: it has ended already.
        let since = std::time::Instant::now();
        while !ended(pid) {
            assert!(since.elapsed().as_secs() < 10, "/bin/true did not end");
            std::thread::sleep(std::time::Duration::from_millis(2));
        }
        child.wait().expect("collect /bin/true");
        assert!(ended(pid));
    }

    #[test]
    fn a_stat_line_tells_its_state_after_the_last_parenthesis() {
        assert!(stat_ended("42 (a) Z 1 42 42"));
        assert!(stat_ended("42 (odd) R (name)) X 1"));
        assert!(!stat_ended("42 (odd) Z (name)) S 1"));
        assert!(!stat_ended("42 (sleep) S 1 42 42"));
        assert!(!stat_ended(""));
    }
}
