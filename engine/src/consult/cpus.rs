//! The CPUs a program may run on, and gsh's own threads kept off them while a search runs.
//!
//! Left to the scheduler, gsh's threads run mostly on the CPU of the thread they stop or read
//! (the kernel wakes a tracer where its tracee ran). For a program pinned to some of the
//! machine's CPUs (`taskset`, a cgroup's cpuset, a server's own affinity setting) that is the
//! CPU it has: attached to a redis-server pinned to one CPU of two, a search took 0.05 to 0.13
//! of a CPU from the server and its load out of gsh's 0.11 to 0.13, and the server's
//! throughput fell 6.1% to 15.6% (`xtask bench-consult --redis`). The program then loses
//! what gsh runs there, which it cannot get back elsewhere. So a search keeps gsh's threads
//! on the CPUs the program may not use, where there are any ([`keep_off`]); a program free to
//! run anywhere leaves gsh free too. What gsh's CPU time takes from the program is counted
//! over the program's CPUs alone, and as nothing where gsh ran on none of them
//! ([`Placement`], [`super::sample::Competition::took`]).

use nix::sched::{sched_getaffinity, sched_setaffinity, CpuSet};
use nix::unistd::Pid;

/// A set of CPUs by number, in order.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Cpus(Vec<usize>);

impl Cpus {
    /// A list as `/proc`'s `Cpus_allowed_list` and `taskset -c` write it: `0-3,5`.
    pub fn parse(list: &str) -> Option<Cpus> {
        let mut cpus = Vec::new();
        for part in list.trim().split(',').filter(|p| !p.is_empty()) {
            let (from, to): (usize, usize) = match part.split_once('-') {
                Some((a, b)) => (a.trim().parse().ok()?, b.trim().parse().ok()?),
                None => {
                    let n = part.trim().parse().ok()?;
                    (n, n)
                }
            };
            if to < from || to >= CpuSet::count() {
                return None;
            }
            cpus.extend(from..=to);
        }
        Some(Cpus::from(cpus))
    }

    /// The CPUs any thread of process `pid` may run on; `None` when `/proc` does not say.
    pub fn of_program(pid: i32) -> Option<Cpus> {
        let mut all = Vec::new();
        for tid in super::sample::tids(pid).ok()? {
            let Ok(status) = std::fs::read_to_string(format!("/proc/{pid}/task/{tid}/status"))
            else {
                continue;
            };
            let list = status
                .lines()
                .find_map(|l| l.strip_prefix("Cpus_allowed_list:"))?;
            all.extend(Cpus::parse(list)?.0);
        }
        (!all.is_empty()).then(|| Cpus::from(all))
    }

    /// The CPUs the calling thread may run on.
    pub fn of_this_thread() -> Option<Cpus> {
        sched_getaffinity(Pid::from_raw(0))
            .ok()
            .map(|set| Cpus::of_set(&set))
    }

    fn of_set(set: &CpuSet) -> Cpus {
        Cpus(
            (0..CpuSet::count())
                .filter(|&c| set.is_set(c).unwrap_or(false))
                .collect(),
        )
    }

    fn to_set(&self) -> CpuSet {
        let mut set = CpuSet::new();
        for &c in &self.0 {
            // Within CpuSet::count(): every set was parsed or read against it.
            let _ = set.set(c);
        }
        set
    }

    /// These CPUs but `other`'s.
    pub fn without(&self, other: &Cpus) -> Cpus {
        Cpus(
            self.0
                .iter()
                .copied()
                .filter(|c| !other.0.contains(c))
                .collect(),
        )
    }

    /// True when some CPU is in both sets.
    pub fn meets(&self, other: &Cpus) -> bool {
        self.0.iter().any(|c| other.0.contains(c))
    }

    /// True when the set has no CPU.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// The busy time of these CPUs together, in clock ticks, from `/proc/stat`'s `cpuN`
    /// lines: all but idle, I/O wait and the time stolen by the hypervisor (which ran no
    /// task here). A CPU without a line (offline) was busy for none of it.
    pub fn busy(&self, stat: &str) -> Option<u64> {
        let mut sum = 0;
        let mut any = false;
        for line in stat.lines() {
            let Some(rest) = line.strip_prefix("cpu") else {
                continue;
            };
            let (n, times) = rest.split_once(' ')?;
            // The first line, `cpu  …`, is all of them together.
            let Ok(n) = n.parse::<usize>() else { continue };
            if self.0.contains(&n) {
                sum += busy_ticks(times)?;
                any = true;
            }
        }
        any.then_some(sum)
    }
}

impl From<Vec<usize>> for Cpus {
    fn from(mut cpus: Vec<usize>) -> Cpus {
        cpus.sort_unstable();
        cpus.dedup();
        Cpus(cpus)
    }
}

impl std::fmt::Display for Cpus {
    /// As [`Cpus::parse`] reads it: `0-3,5`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut i = 0;
        while i < self.0.len() {
            let from = self.0[i];
            let mut to = from;
            while i + 1 < self.0.len() && self.0[i + 1] == to + 1 {
                i += 1;
                to += 1;
            }
            if from > self.0[0] {
                f.write_str(",")?;
            }
            if to > from {
                write!(f, "{from}-{to}")?;
            } else {
                write!(f, "{from}")?;
            }
            i += 1;
        }
        Ok(())
    }
}

/// A CPU's busy ticks from the times of its `/proc/stat` line (user nice system idle iowait
/// irq softirq steal; guest time is within user).
fn busy_ticks(times: &str) -> Option<u64> {
    let t: Vec<u64> = times
        .split_whitespace()
        .map(|x| x.parse().ok())
        .collect::<Option<_>>()?;
    let at = |i: usize| t.get(i).copied().unwrap_or(0);
    Some(at(0) + at(1) + at(2) + at(5) + at(6))
}

/// Where a program may run and whether gsh's CPU time can take from it there: what
/// [`super::sample::Usage`] measures the competition over.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Placement {
    /// The program's CPUs; `None` when `/proc` did not say, and the whole machine counts.
    pub program: Option<Cpus>,
    /// False when gsh's threads run on none of the program's CPUs.
    pub shared: bool,
}

impl Placement {
    /// Process `pid`'s CPUs, and whether the calling thread (and the threads it starts) may
    /// run on them.
    pub fn of(pid: i32) -> Placement {
        let program = Cpus::of_program(pid);
        let shared = match (&program, Cpus::of_this_thread()) {
            (Some(p), Some(mine)) => mine.meets(p),
            _ => true,
        };
        Placement { program, shared }
    }

    /// The busy time of the program's CPUs, in clock ticks, from `/proc/stat`.
    pub fn busy(&self, stat: &str) -> Option<u64> {
        match &self.program {
            Some(cpus) => cpus.busy(stat),
            None => {
                let line = stat.lines().find(|l| l.starts_with("cpu "))?;
                busy_ticks(line.strip_prefix("cpu ")?)
            }
        }
    }
}

/// gsh's threads kept on the CPUs a program may not use ([`keep_off`]) until this is
/// dropped, when every thread of gsh's may run where gsh's could before.
#[derive(Debug)]
pub struct KeptOff {
    before: CpuSet,
    /// Where gsh's threads run meanwhile.
    pub on: Cpus,
}

/// Keeps every thread of gsh's, and every thread they start, off `program`'s CPUs, where gsh
/// may run on others; `None` (nothing changed) where it may not, or runs on none of them
/// already.
pub fn keep_off(program: &Cpus) -> Option<KeptOff> {
    let before = sched_getaffinity(Pid::from_raw(0)).ok()?;
    let mine = Cpus::of_set(&before);
    let rest = mine.without(program);
    if rest.is_empty() || rest == mine {
        return None;
    }
    place_all(&rest.to_set());
    Some(KeptOff { before, on: rest })
}

impl Drop for KeptOff {
    fn drop(&mut self) {
        place_all(&self.before);
    }
}

/// Lets every thread of gsh's run on `set` alone. A thread started meanwhile by one not yet
/// moved would keep the old set: the threads are read again until a pass finds no new one.
fn place_all(set: &CpuSet) {
    let me = std::process::id() as i32;
    let mut done: Vec<i32> = Vec::new();
    for _ in 0..4 {
        let tids = super::sample::tids(me).unwrap_or_default();
        let new: Vec<i32> = tids.iter().copied().filter(|t| !done.contains(t)).collect();
        if new.is_empty() {
            return;
        }
        for tid in new {
            // A thread that ended meanwhile has nowhere to run.
            let _ = sched_setaffinity(Pid::from_raw(tid), set);
            done.push(tid);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lists_read_and_write_as_taskset_and_proc_do() {
        let c = Cpus::parse("0-3,5,7-8").unwrap();
        assert_eq!(c, Cpus::from(vec![0, 1, 2, 3, 5, 7, 8]));
        assert_eq!(c.to_string(), "0-3,5,7-8");
        assert_eq!(Cpus::parse("1\n").unwrap().to_string(), "1");
        assert_eq!(Cpus::parse("").unwrap(), Cpus::default());
        for bad in ["x", "3-1", "1-", "0-99999"] {
            assert_eq!(Cpus::parse(bad), None, "{bad}");
        }
        assert_eq!(c.without(&Cpus::parse("1-5").unwrap()).to_string(), "0,7-8");
        assert!(c.meets(&Cpus::parse("8").unwrap()));
        assert!(!c.meets(&Cpus::parse("4,6").unwrap()));
    }

    #[test]
    fn busy_time_is_counted_over_the_cpus_asked_for() {
        let stat = "cpu  100 2 30 5000 40 5 6 700 0 0\n\
                    cpu0 60 1 20 2500 20 2 3 350 0 0\n\
                    cpu1 40 1 10 2500 20 3 3 350 0 0\n\
                    intr 1 2 3\n";
        let whole = Placement::default();
        assert_eq!(whole.busy(stat), Some(100 + 2 + 30 + 5 + 6));
        let first = Placement {
            program: Some(Cpus::parse("0").unwrap()),
            shared: true,
        };
        assert_eq!(first.busy(stat), Some(60 + 1 + 20 + 2 + 3));
        // Both, line by line: the whole machine's.
        assert_eq!(Cpus::parse("0-1").unwrap().busy(stat), Some(143));
        // A CPU with no line (offline, or past the machine's) adds nothing.
        assert_eq!(Cpus::parse("1,9").unwrap().busy(stat), Some(57));
        assert_eq!(Cpus::parse("9").unwrap().busy(stat), None);
        assert_eq!(whole.busy("cpu0 1 2 3\n"), None);
        assert_eq!(whole.busy("cpu  1 x 3\n"), None);
    }

    #[test]
    fn a_thread_reads_its_own_cpus_and_a_processes() {
        let mine = Cpus::of_this_thread().expect("sched_getaffinity");
        assert!(!mine.is_empty());
        let me = std::process::id() as i32;
        let program = Cpus::of_program(me).expect("this process's threads' CPUs");
        assert!(program.meets(&mine));
        assert!(Placement::of(me).shared);
        assert_eq!(Cpus::of_program(i32::MAX), None);
    }
}
