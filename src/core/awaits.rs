//! `lanes submit --wait` from inside a server's jobs: whether a new job's wait would come back
//! to the run that asks it, so that the asking job would wait for its own end.
//!
//! A job ends only after every job ahead of it in its lane has ended (the run in flight, the
//! waiting jobs before it), and a run whose job waits through `submit --wait` ends only after
//! the jobs it waits for. A wait that these edges lead back to the asking run can never end:
//! a job of key `a` waiting for a job of key `b` whose job waits for a new job of `a` is the
//! shortest such loop through another key. Waits for a slot or a resource are not edges: those
//! free up as any run ends, so they form no certain loop.

use std::collections::{HashMap, HashSet, VecDeque};

use super::state::{Scheduler, Seq};

impl Scheduler {
    /// The chain of jobs through which a new job of `key` would wait for run `caller` (by its
    /// first seq) to end, given which runs wait for which jobs' records (`awaits`: a run by its
    /// first seq → the jobs it waits for): `[caller, …, a job of key]`, shortest first found.
    /// `None` when the new job's wait leads back to no run of `caller`: it may wait.
    pub fn awaited_back(
        &self,
        key: &str,
        caller: Seq,
        awaits: &HashMap<Seq, Vec<Seq>>,
    ) -> Option<Vec<Seq>> {
        // Each job in a lane: the run it waits for first (its lane's in flight) and the jobs
        // ahead of it, as what must end before it.
        let mut run_of: HashMap<Seq, Seq> = HashMap::new();
        for (&first, run) in &self.running {
            for member in run.members() {
                run_of.insert(member, first);
            }
        }
        let ahead_of = |seq: Seq| -> Vec<Seq> {
            if let Some(&first) = run_of.get(&seq) {
                // A running job ends after the jobs its run waits for.
                return awaits.get(&first).cloned().unwrap_or_default();
            }
            let Some((_, lane)) = self
                .lanes
                .iter()
                .find(|(_, lane)| lane.waiting.iter().any(|w| w.seq == seq))
            else {
                return Vec::new();
            };
            let mut before: Vec<Seq> = lane.running_seq.filter(|_| lane.busy).into_iter().collect();
            before.extend(
                lane.waiting
                    .iter()
                    .map(|w| w.seq)
                    .take_while(|&waiting| waiting != seq),
            );
            before
        };
        // The new job waits behind its lane's whole line; under `--coalesce latest` it takes
        // the waiting jobs' place (behind the run in flight only), and under
        // `--cancel-in-progress` it stops that run too instead of waiting for its end.
        let lane = self.lanes.get(key)?;
        let running = lane.running_seq.filter(|_| lane.busy);
        let line: Vec<Seq> = if self.policy.cancel_in_progress {
            running
                .filter(|&first| first == caller)
                .into_iter()
                .collect()
        } else if self.policy.coalesce_latest {
            running.into_iter().collect()
        } else {
            running
                .into_iter()
                .chain(lane.waiting.iter().map(|w| w.seq))
                .collect()
        };
        // Breadth first from the line, remembering how each job was reached.
        let mut came_from: HashMap<Seq, Option<Seq>> = HashMap::new();
        let mut queue: VecDeque<Seq> = VecDeque::new();
        for seq in line {
            came_from.insert(seq, None);
            queue.push_back(seq);
        }
        let mut seen: HashSet<Seq> = came_from.keys().copied().collect();
        while let Some(seq) = queue.pop_front() {
            if run_of.get(&seq) == Some(&caller) {
                let mut chain = vec![seq];
                let mut at = seq;
                while let Some(Some(previous)) = came_from.get(&at) {
                    chain.push(*previous);
                    at = *previous;
                }
                return Some(chain);
            }
            for next in ahead_of(seq) {
                if seen.insert(next) {
                    came_from.insert(next, Some(seq));
                    queue.push_back(next);
                }
            }
        }
        None
    }
}
