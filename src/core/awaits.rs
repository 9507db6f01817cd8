//! `lanes submit --wait` from inside a server's jobs: whether a new job's wait would come back
//! to the run that asks it, so that the asking job would wait for its own end.
//!
//! A job ends only after every job ahead of it in its lane has ended (the run in flight, the
//! waiting jobs before it), and a run whose job waits through `submit --wait` ends only after
//! the jobs it waits for. A wait that these edges lead back to the asking run can never end:
//! a job of key `a` waiting for a job of key `b` whose job waits for a new job of `a` is the
//! shortest such loop through another key. Waits for a slot or a resource are not edges: those
//! free up as any run ends, so they form no certain loop.

use std::collections::hash_map::Entry;
use std::collections::{HashMap, VecDeque};

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
        let mut run_of: HashMap<Seq, Seq> = HashMap::new();
        for (&first, run) in &self.running {
            for member in run.members() {
                run_of.insert(member, first);
            }
        }
        // Where each waiting job stands: its lane and its place in it, read once (a lane's
        // line searched for each job would take the square of a long queue).
        let mut place: HashMap<Seq, (&str, usize)> = HashMap::new();
        for (lane_key, lane) in &self.lanes {
            for (at, waiting) in lane.waiting.iter().enumerate() {
                place.insert(waiting.seq, (&**lane_key, at));
            }
        }
        // How many of each lane's waiting jobs, from its front, were given as ahead of some job
        // already: a job ahead of others is given once, whatever the jobs behind it.
        let mut given: HashMap<&str, usize> = HashMap::new();
        // The jobs of lane `key` before its waiting job at `upto` (the run in flight, then the
        // waiting ones) not given before.
        let mut ahead_in_lane = |key: &str, upto: usize| -> Vec<Seq> {
            let Some((lane_key, lane)) = self.lanes.get_key_value(key) else {
                return Vec::new();
            };
            let from = given.get(&**lane_key).copied().unwrap_or(0);
            let mut before: Vec<Seq> = lane.running_seq.filter(|_| lane.busy).into_iter().collect();
            if upto > from {
                before.extend(
                    lane.waiting
                        .iter()
                        .skip(from)
                        .take(upto - from)
                        .map(|w| w.seq),
                );
                given.insert(lane_key, upto);
            }
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
            ahead_in_lane(key, lane.waiting.len())
        };
        // Breadth first from the line, remembering how each job was reached.
        let mut came_from: HashMap<Seq, Option<Seq>> = HashMap::new();
        let mut queue: VecDeque<Seq> = VecDeque::new();
        for seq in line {
            came_from.insert(seq, None);
            queue.push_back(seq);
        }
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
            // A running job ends after the jobs its run waits for; a waiting one after those
            // ahead of it in its lane.
            let next_ones = match (run_of.get(&seq), place.get(&seq)) {
                (Some(first), _) => awaits.get(first).cloned().unwrap_or_default(),
                (None, Some(&(lane_key, at))) => ahead_in_lane(lane_key, at),
                (None, None) => Vec::new(),
            };
            for next in next_ones {
                if let Entry::Vacant(unseen) = came_from.entry(next) {
                    unseen.insert(Some(seq));
                    queue.push_back(next);
                }
            }
        }
        None
    }
}
