//! Without cgroups: a job's processes that left its process group (`setsid`, `setpgid`,
//! `timeout(1)`, `set -m`, a double fork) found through `/proc`. `lanes` is the child
//! subreaper, so every process a job starts stays a descendant of `lanes`, whoever its parent
//! dies; of those, the job's are the ones whose environment still carries the job's
//! `LANES_SEQ` and `LANES_ATTEMPT` (proc(5): `/proc/PID/stat`, `/proc/PID/environ`).
//!
//! What this cannot see: a process that cleared or replaced its environment, one started
//! through another subreaper or a service manager (`systemd-run`, a container runtime), and
//! one that moved to another PID namespace. Cgroup containment sees them all.

use std::collections::{HashMap, HashSet};
use std::fs;

use super::unix::{proc_pids, proc_snapshot, proc_stat, ProcStat};

/// Whether any child of `lanes` is not the direct child of a running job (`watched`): only then
/// can a job have processes outside its group whose group-mates are all gone.
pub(crate) fn has_orphans(watched: impl Fn(i32) -> bool) -> bool {
    super::unix::main_thread_children()
        .into_iter()
        .any(|pid| !watched(pid))
}

/// The live processes of job `seq`'s try `attempt` outside its process group `pgid`, from a
/// fresh look at `/proc`: the descendants of `lanes` whose environment carries the job's
/// `LANES_SEQ` and `LANES_ATTEMPT`, and those whose environment cannot be read at this moment
/// (a running `execve`), so that "is the job over" is not answered yes while one of its
/// processes may run.
pub(crate) fn strays(pgid: i32, seq: u64, attempt: u32) -> Vec<i32> {
    Snapshot::take().map_or_else(Vec::new, |mut snapshot| {
        snapshot.strays(pgid, seq, attempt, true)
    })
}

/// How long after its last use a `/proc` snapshot still serves [`strays_to_signal`], and the
/// oldest it may be: a stop that reaches hundreds of jobs at once (Ctrl-C, timeouts falling
/// due together) then reads `/proc` once, and each process's environment once, instead of
/// once per job, which grew with the square of the jobs running (300 jobs and their 300
/// processes: seconds of lanes' CPU per stop, and the last jobs stopped seconds late).
const SNAPSHOT_REUSE: std::time::Duration = std::time::Duration::from_millis(20);
const SNAPSHOT_MAX_AGE: std::time::Duration = std::time::Duration::from_millis(250);

thread_local! {
    /// The event loop's last snapshot for [`strays_to_signal`] (supervisors run on its thread).
    static SNAPSHOT: std::cell::RefCell<Option<Snapshot>> = const { std::cell::RefCell::new(None) };
}

/// The processes of job `seq`'s try `attempt` outside its process group `pgid`, to be
/// signalled along with the group: as [`strays`] without the unreadable ones, from a `/proc`
/// snapshot last used at most [`SNAPSHOT_REUSE`] ago and at most [`SNAPSHOT_MAX_AGE`] old. A
/// process started after the snapshot is missed by this pass, as one started after a fresh
/// scan would be; the next pass (SIGKILL after the grace period) looks again.
pub(crate) fn strays_to_signal(pgid: i32, seq: u64, attempt: u32) -> Vec<i32> {
    SNAPSHOT.with(|cell| {
        let mut cell = cell.borrow_mut();
        let stale = cell.as_ref().is_none_or(|snapshot| {
            snapshot.used.elapsed() > SNAPSHOT_REUSE || snapshot.taken.elapsed() > SNAPSHOT_MAX_AGE
        });
        if stale {
            *cell = Snapshot::take();
        }
        let Some(snapshot) = cell.as_mut() else {
            return Vec::new();
        };
        let found = snapshot.strays(pgid, seq, attempt, false);
        snapshot.used = std::time::Instant::now();
        found
    })
}

/// A look at `/proc`: every process then, which of them descend from `lanes` (memoised as
/// asked), and the job variables of each descendant looked at so far (`None`: its
/// environment could not be read).
struct Snapshot {
    taken: std::time::Instant,
    used: std::time::Instant,
    procs: HashMap<i32, ProcStat>,
    descends: HashMap<i32, bool>,
    vars: HashMap<i32, Option<JobVars>>,
}

impl Snapshot {
    /// The processes now; `None` when `/proc` cannot be listed.
    fn take() -> Option<Snapshot> {
        let procs = proc_pids()
            .ok()?
            .filter_map(|pid| proc_stat(pid).map(|stat| (pid, stat)))
            .collect();
        let now = std::time::Instant::now();
        Some(Snapshot {
            taken: now,
            used: now,
            procs,
            descends: HashMap::new(),
            vars: HashMap::new(),
        })
    }

    /// The live descendants of `lanes` outside process group `pgid` whose environment carries
    /// job `seq`'s try `attempt`, sorted; with `with_unreadable`, also those whose environment
    /// cannot be read and that are still alive now: right for "is the job over", wrong for
    /// signalling.
    fn strays(&mut self, pgid: i32, seq: u64, attempt: u32, with_unreadable: bool) -> Vec<i32> {
        let me = std::process::id() as i32;
        let (seq, attempt) = (seq.to_string(), attempt.to_string());
        let mut found = Vec::new();
        for (&pid, info) in &self.procs {
            if zombie(info) || info.pgid == pgid || pid == me {
                continue;
            }
            if !descends_from(pid, me, &self.procs, &mut self.descends) {
                continue;
            }
            let vars = self
                .vars
                .entry(pid)
                .or_insert_with(|| environ(pid).map(|environ| JobVars::of(&environ)));
            match vars {
                Some(vars) if vars.name(&seq, &attempt) => found.push(pid),
                Some(_) => {}
                // A live descendant whose environment cannot be read (it is in the middle of
                // an `execve`): counted as the job's, so that the job does not end while one
                // of its processes may run; the next look settles it.
                None if with_unreadable && proc_stat(pid).is_some_and(|s| !zombie(&s)) => {
                    found.push(pid);
                }
                None => {}
            }
        }
        found.sort_unstable();
        found
    }
}

/// Every `LANES_SEQ` and `LANES_ATTEMPT` value an environment (`/proc/PID/environ`) carries,
/// as written.
struct JobVars {
    seqs: Vec<Box<[u8]>>,
    attempts: Vec<Box<[u8]>>,
}

impl JobVars {
    fn of(environ: &[u8]) -> JobVars {
        let values = |name: &[u8]| -> Vec<Box<[u8]>> {
            environ
                .split(|&b| b == 0)
                .filter_map(|var| var.strip_prefix(name))
                .map(Box::from)
                .collect()
        };
        JobVars {
            seqs: values(b"LANES_SEQ="),
            attempts: values(b"LANES_ATTEMPT="),
        }
    }

    /// Whether they name the job `seq`'s try `attempt` (both as written in decimal).
    fn name(&self, seq: &str, attempt: &str) -> bool {
        self.seqs.iter().any(|value| **value == *seq.as_bytes())
            && self
                .attempts
                .iter()
                .any(|value| **value == *attempt.as_bytes())
    }
}

/// The processes that left the process groups of the runs `runs` (first seq, process group):
/// the live descendants of `lanes` outside those groups carrying one of their `LANES_SEQ`s.
pub(crate) fn strays_of(runs: &[(u64, i32)]) -> Vec<i32> {
    let Some(procs) = proc_snapshot() else {
        return Vec::new();
    };
    let groups: HashSet<i32> = runs.iter().map(|&(_, pgid)| pgid).collect();
    let seqs: HashSet<u64> = runs.iter().map(|&(seq, _)| seq).collect();
    strays_by_seq(&procs, &groups)
        .into_iter()
        .filter(|(_, seq)| seqs.contains(seq))
        .map(|(pid, _)| pid)
        .collect()
}

/// The live descendants of `lanes` in `procs` outside the process groups `groups` that carry
/// a job's `LANES_SEQ`, with that seq.
pub(crate) fn strays_by_seq(
    procs: &HashMap<i32, ProcStat>,
    groups: &HashSet<i32>,
) -> Vec<(i32, u64)> {
    let me = std::process::id() as i32;
    let mut descends: HashMap<i32, bool> = HashMap::new();
    let mut found = Vec::new();
    for (&pid, info) in procs {
        if zombie(info) || groups.contains(&info.pgid) || pid == me {
            continue;
        }
        if !descends_from(pid, me, procs, &mut descends) {
            continue;
        }
        if let Some(seq) = environ(pid).as_deref().and_then(seq_in) {
            found.push((pid, seq));
        }
    }
    found
}

/// The job of `lanes` that process `pid` runs in: found on its chain of parents
/// (`/proc/PID/stat`), the child of `lanes` it descends from is the job's process (its shell,
/// or a process of the job that outlived its parent: `lanes` is the child subreaper), and that
/// process's environment, set by `lanes` as it started the job, names the job (`LANES_SEQ`).
/// `pid`'s own environment is not read: a `lanes` run inside the job gives its own jobs
/// `LANES_SEQ`s of its own. `None` for a process outside `lanes`' tree, a child of `lanes`
/// whose environment names no job, or one already gone.
pub(crate) fn job_of(pid: i32) -> Option<u64> {
    let me = std::process::id() as i32;
    let mut at = pid;
    for _ in 0..4096 {
        match proc_stat(at)?.ppid {
            parent if parent == me => return environ(at).as_deref().and_then(seq_in),
            parent if parent > 0 => at = parent,
            _ => return None,
        }
    }
    None
}

/// The `LANES_SEQ` an environment (`/proc/PID/environ`: `NAME=value` entries, each ended by
/// a NUL) carries.
fn seq_in(environ: &[u8]) -> Option<u64> {
    environ
        .split(|&b| b == 0)
        .find_map(|var| var.strip_prefix(b"LANES_SEQ="))
        .and_then(|value| std::str::from_utf8(value).ok()?.parse().ok())
}

/// Whether a process is a zombie (or dead): no longer a process of anyone's.
fn zombie(stat: &ProcStat) -> bool {
    matches!(stat.state, 'Z' | 'X')
}

/// The environment of `pid` (`/proc/PID/environ`), read again a few times while a running
/// `execve` leaves it empty or unreadable. `None` only when it could not be read at all: an
/// environment that reads empty every time is the process's own (`env -i`), which carries no
/// job's variables, not an `execve` under way; counted as unreadable, it would hold every job
/// that has processes outside its group until it ends, and be signalled by none of them.
fn environ(pid: i32) -> Option<Vec<u8>> {
    let mut read_empty = false;
    for attempt in 0..5 {
        if let Ok(environ) = fs::read(format!("/proc/{pid}/environ")) {
            if !environ.is_empty() {
                return Some(environ);
            }
            read_empty = true;
        }
        if attempt < 4 {
            std::thread::sleep(std::time::Duration::from_micros(200));
        }
    }
    read_empty.then(Vec::new)
}

/// Whether `ancestor` is on `pid`'s chain of parents (memoised in `known`).
fn descends_from(
    pid: i32,
    ancestor: i32,
    procs: &HashMap<i32, ProcStat>,
    known: &mut HashMap<i32, bool>,
) -> bool {
    let mut chain = Vec::new();
    let mut at = pid;
    let answer = loop {
        if let Some(&answer) = known.get(&at) {
            break answer;
        }
        chain.push(at);
        match procs.get(&at).map(|s| s.ppid) {
            Some(parent) if parent == ancestor => break true,
            Some(parent) if parent > 0 && chain.len() < 4096 => at = parent,
            _ => break false,
        }
    };
    for pid in chain {
        known.insert(pid, answer);
    }
    answer
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_descendant_is_told_by_the_job_its_environment_names_and_others_by_none() {
        let spawn = |seq: Option<&str>| {
            let mut command = std::process::Command::new("sleep");
            command.arg("30").env_remove("LANES_SEQ");
            if let Some(seq) = seq {
                command.env("LANES_SEQ", seq);
            }
            command.spawn().unwrap()
        };
        let mut children = [spawn(Some("7")), spawn(None), spawn(Some("x"))];
        let pid = |child: &std::process::Child| i32::try_from(child.id()).unwrap();
        // The environment is readable once `sleep` has been exec'd.
        let told: Vec<Option<u64>> = children.iter().map(|c| job_of(pid(c))).collect();
        for child in &mut children {
            child.kill().unwrap();
            child.wait().unwrap();
        }
        assert_eq!(told, [Some(7), None, None]);
        // A process below a child of this process is told by that child's environment, not
        // by its own (a `lanes` run inside a job numbers its own jobs).
        let mut nested = std::process::Command::new("sh")
            .args(["-c", "LANES_SEQ=1 sleep 30 & echo $!; wait"])
            .env("LANES_SEQ", "9")
            .stdout(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let mut line = String::new();
        std::io::BufRead::read_line(
            &mut std::io::BufReader::new(nested.stdout.take().unwrap()),
            &mut line,
        )
        .unwrap();
        let grandchild: i32 = line.trim().parse().unwrap();
        // Its `sleep` has been exec'd once its environment names seq 1.
        for _ in 0..500 {
            if environ(grandchild).as_deref().and_then(seq_in) == Some(1) {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(2));
        }
        let told = job_of(grandchild);
        let _ = nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(grandchild),
            nix::sys::signal::Signal::SIGKILL,
        );
        nested.wait().unwrap();
        assert_eq!(told, Some(9));
        // Not a descendant (init, outside every PID namespace's tree of this process), and
        // this process itself.
        assert_eq!(job_of(1), None);
        assert_eq!(job_of(std::process::id() as i32), None);
    }
}
