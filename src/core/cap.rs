//! `lanes set -j N` (service mode): the cap on running jobs changed while jobs run. Raising it
//! starts more at once; lowering it stops nothing: fewer start until fewer than N run.

use super::state::Scheduler;

impl Scheduler {
    /// Sets the cap (`--max-concurrent`) to `max_concurrent` (raised to 1); returns the cap it
    /// replaces. Running jobs keep their slots, also those above a lowered cap; such a slot is
    /// not handed out again while above the cap, so slots stay 1..=N for every job started
    /// from now on. Not allowed under `--sticky-slots`, where a key bound to a slot above the
    /// cap could never start again: the shell refuses it there.
    pub fn set_max_concurrent(&mut self, max_concurrent: usize) -> usize {
        let previous = self.limits.max_concurrent;
        let cap = max_concurrent.max(1);
        self.capacity_changed(self.clock);
        self.limits.max_concurrent = cap;
        self.last_slot = u32::try_from(cap).unwrap_or(u32::MAX);
        // The slots handed out so far are those below `next_slot`, plus running ones above a
        // cap lowered earlier: every slot up to the highest in use, capped, is listed
        // explicitly as free or running; the slots above are never-used (lazy) again.
        let used: std::collections::BTreeSet<u32> =
            self.running.values().map(|run| run.slot).collect();
        let highest_used = used.last().copied().unwrap_or(0);
        let listed_up_to = self
            .next_slot
            .max(highest_used.saturating_add(1))
            .min(self.last_slot.saturating_add(1));
        self.free_slots = (1..listed_up_to).filter(|s| !used.contains(s)).collect();
        self.next_slot = listed_up_to;
        previous
    }
}
