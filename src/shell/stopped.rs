//! Stopped jobs: which runs in flight have every process stopped — a job that read the
//! terminal from its background process group (SIGTTIN), wrote to it or changed its settings
//! (SIGTTOU), SIGSTOP, a debugger — and why, where that can be told. A stopped job never ends
//! by itself: the display and the summary say so, so that the user knows what hangs.
//!
//! A job's processes are its process group and the processes that left it, traced by their
//! `LANES_SEQ` ([`lineage`]); a job is stopped when every one of them is in state `T` or `t`
//! (proc(5)). The terminal stops a whole process group at once, so a shell waiting for the
//! command that read the terminal is stopped with it. Why: the signal that stopped the job's
//! direct child, peeked at without reaping ([`stop_signal`]); `t` is a debugger's stop.

use std::collections::{HashMap, HashSet};

use nix::sys::signal::Signal;

use super::lineage;
use super::reap::stop_signal;
use super::unix::{proc_snapshot, proc_stat, ProcStat};
use crate::core::Seq;

/// Of the runs in flight (`runs`: first seq and process group), those whose processes are all
/// stopped, and why (for people). One pass over `/proc`; the environments of processes
/// outside the groups are read only when a group is found stopped.
pub(crate) fn stopped_runs(runs: &[(Seq, i32)]) -> HashMap<Seq, &'static str> {
    let groups: HashMap<i32, Seq> = runs.iter().map(|&(seq, pgid)| (pgid, seq)).collect();
    let Some(procs) = proc_snapshot() else {
        return HashMap::new();
    };
    // Per group: whether every live member is stopped, and whether one is traced.
    let mut seen: HashMap<Seq, (bool, bool)> = HashMap::new();
    for stat in procs.values() {
        let Some(&seq) = groups.get(&stat.pgid) else {
            continue;
        };
        if matches!(stat.state, 'Z' | 'X') {
            continue;
        }
        let entry = seen.entry(seq).or_insert((true, false));
        entry.0 &= is_stopped(stat.state);
        entry.1 |= stat.state == 't';
    }
    let mut stopped: HashMap<Seq, bool> = seen
        .into_iter()
        .filter_map(|(seq, (all, traced))| all.then_some((seq, traced)))
        .collect();
    if stopped.is_empty() {
        return HashMap::new();
    }
    let pgids: HashSet<i32> = groups.keys().copied().collect();
    for (pid, seq) in lineage::strays_by_seq(&procs, &pgids) {
        if let (Some(traced), Some(stat)) = (stopped.get_mut(&seq), procs.get(&pid)) {
            if !is_stopped(stat.state) {
                stopped.remove(&seq);
            } else if stat.state == 't' {
                *traced = true;
            }
        }
    }
    let leaders: HashMap<Seq, i32> = runs.iter().map(|&(seq, pgid)| (seq, pgid)).collect();
    stopped
        .into_iter()
        .map(|(seq, traced)| {
            let why = if traced {
                "stopped by a debugger"
            } else {
                describe(leaders.get(&seq).and_then(|&pid| stop_signal(pid)))
            };
            (seq, why)
        })
        .collect()
}

/// The processes of the runs in flight (`runs`: first seq and process group) that are stopped
/// now by a stop signal (state `T`), whether or not the rest of their job is: members of the
/// runs' process groups, and processes that left them ([`lineage`]). One pass over `/proc`;
/// environments are read only when a stopped process is outside the groups. What a Ctrl-Z
/// must leave stopped when it continues the jobs it stopped.
///
/// Not a process a debugger holds (`t`): SIGCONT does not end a trace stop, and the SIGSTOP of
/// the Ctrl-Z waits, pending, until the debugger lets go, when it would stop the process for
/// good unless the SIGCONT of `fg` (which discards a pending stop signal) reached it too.
pub(crate) fn stopped_processes(runs: &[(Seq, i32)]) -> HashSet<i32> {
    let Some(procs) = proc_snapshot() else {
        return HashSet::new();
    };
    let by_signal = |stat: &ProcStat| stat.state == 'T';
    let groups: HashSet<i32> = runs.iter().map(|&(_, pgid)| pgid).collect();
    let mut stopped: HashSet<i32> = procs
        .iter()
        .filter(|(_, stat)| groups.contains(&stat.pgid) && by_signal(stat))
        .map(|(&pid, _)| pid)
        .collect();
    let outside = procs
        .values()
        .any(|stat| !groups.contains(&stat.pgid) && by_signal(stat));
    if outside {
        let seqs: HashSet<Seq> = runs.iter().map(|&(seq, _)| seq).collect();
        stopped.extend(
            lineage::strays_by_seq(&procs, &groups)
                .into_iter()
                .filter(|&(pid, seq)| seqs.contains(&seq) && procs.get(&pid).is_some_and(by_signal))
                .map(|(pid, _)| pid),
        );
    }
    stopped
}

/// Whether the job's direct child `pid` is stopped, and then its whole job: a cheap first look
/// (one `/proc/PID/stat`) before [`stopped_runs`].
pub(crate) fn why_stopped(seq: Seq, pid: i32) -> Option<&'static str> {
    if !proc_stat(pid).is_some_and(|stat| is_stopped(stat.state)) {
        return None;
    }
    stopped_runs(&[(seq, pid)]).remove(&seq)
}

/// Stopped (`T`), or stopped by a debugger (`t`).
fn is_stopped(state: char) -> bool {
    matches!(state, 'T' | 't')
}

/// Why a job is stopped, from the signal that stopped its direct child.
fn describe(signal: Option<Signal>) -> &'static str {
    match signal {
        Some(Signal::SIGTTIN) => "SIGTTIN: waiting for terminal input",
        Some(Signal::SIGTTOU) => "SIGTTOU: waiting to use the terminal",
        Some(Signal::SIGSTOP) => "SIGSTOP",
        Some(Signal::SIGTSTP) => "SIGTSTP",
        _ => "a stop signal",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_terminal_signals_are_told_by_what_the_job_waits_for() {
        assert_eq!(
            describe(Some(Signal::SIGTTIN)),
            "SIGTTIN: waiting for terminal input"
        );
        assert_eq!(describe(None), "a stop signal");
    }
}
