//! Why each admitted, not-yet-started job is not running, at every moment: its [`WaitCause`],
//! decided from the state of its lane (and the host-wide locks), and its wait as a list of
//! [`WaitSpan`]s from its admission to its start.
//!
//! A waiting job's cause depends only on its own lane, its position in it and its key's
//! host-wide lock, never on other keys: a key whose jobs could start now and do not is waiting
//! for the cap (the shell takes every job it can after every change). So a change to one lane
//! only re-decides the causes of that lane's first jobs (the next batch and the one after it)
//! and of the neighbours of a job put in or taken out: cost independent of how many jobs wait.
//!
//! Causes that end with time (a retry's delay, a batch's delay) are split at the moment they
//! ended when the lane is next looked at, so that a span never tells of a delay that was over.

use std::sync::Arc;

use super::state::{Lane, Scheduler, Seq, Tick};
use super::transition::batch_len;

/// Why an admitted job has not started (the names are the `cause` strings of the `waiting`
/// event and of a record's `waits`).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum WaitCause {
    /// `key_busy`: a job of its own key is in flight or ahead of it in its lane; `behind` is
    /// the seq of the job just ahead of it (the one in flight when none waits ahead: for a
    /// batch, the batch's first job).
    KeyBusy {
        /// The job it waits behind.
        behind: Seq,
    },
    /// `cap`: its key is free but every slot is taken (`-j`), or the weight it needs does not
    /// fit in what is free of the cap. Also while new starts are held
    /// back by a spawn shortage's pause or by grouped output waiting for its reader: the
    /// run's capacity, not the job's key, holds it.
    Cap,
    /// `lock`: its key is held by another `lanes` process (`--lock-dir`), or not asked for
    /// yet (at most `-j` + [`super::HOST_LOOKAHEAD`] keys are asked for at once).
    Lock,
    /// `shared_cap`: its key's host-wide lock is held, and every shared slot
    /// (`--shared-max-concurrent`) is taken.
    SharedCap,
    /// `batch_delay`: its batch is not full and waits out `--batch-delay`.
    BatchDelay,
    /// `retry_delay`: a retry waiting out `--retry-delay` (or a job of its key behind it is
    /// not: those wait `key_busy`).
    RetryDelay,
    /// `resource`: its key is free and its weight fits, but a named resource it needs
    /// (`--resource`, `needs`) is short, or set aside for an earlier job that does not fit
    /// (`--reserve-after`).
    Resource {
        /// The resource's name, as declared.
        name: Arc<str>,
    },
}

impl WaitCause {
    /// Every cause's name, in the order of the schema.
    pub const NAMES: [&'static str; 7] = [
        "key_busy",
        "cap",
        "lock",
        "shared_cap",
        "batch_delay",
        "retry_delay",
        "resource",
    ];

    /// The cause's name in JSON (`key_busy`, `cap`, ...).
    pub fn name(&self) -> &'static str {
        match self {
            WaitCause::KeyBusy { .. } => "key_busy",
            WaitCause::Cap => "cap",
            WaitCause::Lock => "lock",
            WaitCause::SharedCap => "shared_cap",
            WaitCause::BatchDelay => "batch_delay",
            WaitCause::RetryDelay => "retry_delay",
            WaitCause::Resource { .. } => "resource",
        }
    }

    /// The resource waited for, for `resource`.
    pub fn resource(&self) -> Option<&str> {
        match self {
            WaitCause::Resource { name } => Some(name),
            _ => None,
        }
    }

    /// The job waited behind, for `key_busy`.
    pub fn behind(&self) -> Option<Seq> {
        match self {
            WaitCause::KeyBusy { behind } => Some(*behind),
            _ => None,
        }
    }
}

/// One stretch of a job's wait with one cause: from `started_at` to `ended_at` (times since the
/// run started). Consecutive spans of a job never have the same cause.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WaitSpan {
    /// Why it waited.
    pub cause: WaitCause,
    /// When this cause began.
    pub started_at: Tick,
    /// When it ended: the next span's start, or the job's start (or the end of its wait).
    pub ended_at: Tick,
}

/// A waiting job's cause changed (its first cause included, at its admission): one `waiting`
/// event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WaitChange {
    /// The job.
    pub seq: Seq,
    /// Its key.
    pub key: Arc<str>,
    /// Why it waits from `at` on.
    pub cause: WaitCause,
    /// When the cause began.
    pub at: Tick,
}

/// A change waiting in the log to be told: `change` is `None` once taken back (its cause
/// lasted under a millisecond of its record's count, [`WaitChanges::untell_young`]).
#[derive(Debug, Clone)]
struct Pending {
    /// Its place in the log: ids grow in the order changes are decided.
    id: u64,
    /// When its job's wait began (its admission, or its retry's).
    begun: Tick,
    /// When its cause ends at the latest, when known (a delay's end).
    ends_by: Option<Tick>,
    change: Option<WaitChange>,
}

impl Pending {
    /// When it is settled: once its span has reached the next whole millisecond of its
    /// wait's count, it shows in its record however its job goes on. `None`: taken back, or a
    /// delay that ends before then (it is taken back when its lane is next looked at).
    fn settles_at(&self) -> Option<Tick> {
        let at = self.change.as_ref()?.at;
        let whole = Tick::from_millis(whole_ms(at.saturating_sub(self.begun)));
        let settles = self.begun + whole + Tick::from_millis(1);
        self.ends_by
            .is_none_or(|end| end >= settles)
            .then_some(settles)
    }
}

/// The `waiting` changes decided and not yet told ([`Scheduler::report_wait_changes`]), in the
/// order they were decided.
#[derive(Debug, Clone, Default)]
pub(crate) struct WaitChanges {
    pending: Vec<Pending>,
    next_id: u64,
}

/// Whole milliseconds of `elapsed`, as a record counts them.
fn whole_ms(elapsed: Tick) -> u64 {
    u64::try_from(elapsed.as_millis()).unwrap_or(u64::MAX)
}

/// Whether a cause given at `from` in a wait that began at `begun` and ending at `to` shows in
/// the wait's record: a record counts each span's milliseconds as the difference of its ends'
/// whole milliseconds since the wait began (`WaitEntry::of`), and leaves out a span of none.
fn shows_in_record(begun: Tick, from: Tick, to: Tick) -> bool {
    whole_ms(to.saturating_sub(begun)) > whole_ms(from.saturating_sub(begun))
}

impl WaitChanges {
    /// Tells of `wait`'s new cause `cause` from `at` on (already set on `wait`). The cause told
    /// before it is taken back if it lasted no millisecond of the record's count, and `cause`
    /// is not told if it goes on from the last cause still told: the record joins the two.
    /// `ends_by`: when the cause ends at the latest, when known (a delay's end).
    fn tell(
        &mut self,
        wait: &mut WaitLog,
        seq: Seq,
        key: &Arc<str>,
        cause: WaitCause,
        at: Tick,
        ends_by: Option<Tick>,
    ) {
        self.untell_young(wait, at);
        // Made at the wait's first cause, before any span: `since` is still its start.
        let since = wait.since;
        let told = wait.told.get_or_insert_with(|| {
            Box::new(Told {
                begun: since,
                cause: None,
                young: None,
            })
        });
        if told.cause.as_ref() == Some(&cause) {
            return;
        }
        let id = self.next_id;
        self.next_id += 1;
        self.pending.push(Pending {
            id,
            begun: told.begun,
            ends_by,
            change: Some(WaitChange {
                seq,
                key: Arc::clone(key),
                cause: cause.clone(),
                at,
            }),
        });
        told.young = Some((id, at, told.cause.replace(cause)));
    }

    /// The wait's last told cause ends at `at` (its job starts or leaves, or its cause
    /// changes): taken back when it does not show in its record, so that the events and the
    /// record tell the same causes.
    fn untell_young(&mut self, wait: &mut WaitLog, at: Tick) {
        let Some(told) = wait.told.as_mut() else {
            return;
        };
        let Some((id, from, before)) = told.young.take() else {
            return;
        };
        if shows_in_record(told.begun, from, at) {
            return;
        }
        if let Ok(i) = self.pending.binary_search_by_key(&id, |p| p.id) {
            self.pending[i].change = None;
        }
        told.cause = before;
    }

    /// Takes the changes for which `pick` holds, in order; the others stay.
    fn take_where(&mut self, mut pick: impl FnMut(&Pending) -> bool) -> Vec<WaitChange> {
        let mut taken = Vec::new();
        self.pending.retain_mut(|p| {
            if p.change.is_none() {
                return false;
            }
            if !pick(p) {
                return true;
            }
            taken.extend(p.change.take());
            false
        });
        taken
    }
}

/// One waiting job's wait so far: its current cause since when, and the spans before it.
#[derive(Debug, Clone, Default)]
pub(crate) struct WaitLog {
    /// The current cause; `None` before the job's lane was first looked at.
    cause: Option<WaitCause>,
    /// When the current cause began.
    since: Tick,
    /// The spans before the current one, oldest first.
    spans: Vec<WaitSpan>,
    /// A retry's: the spans of the wait before its last try (what its record tells of should
    /// the run stop before the retry starts).
    before_retry: Vec<WaitSpan>,
    /// What `waiting` events told of this wait, when events are kept (boxed: a waiting job
    /// pays one word for it otherwise).
    told: Option<Box<Told>>,
}

/// What `waiting` events told of one wait ([`WaitChanges`]).
#[derive(Debug, Clone)]
struct Told {
    /// When the wait began (its first span's start), as its record counts from.
    begun: Tick,
    /// The last cause told.
    cause: Option<WaitCause>,
    /// The last cause told, while it may yet last no millisecond of the record's count: its id
    /// in the log, when it began, and the cause told before it.
    young: Option<(u64, Tick, Option<WaitCause>)>,
}

impl WaitLog {
    /// A wait beginning at `at`.
    pub(crate) fn new(at: Tick) -> Self {
        WaitLog {
            since: at,
            ..WaitLog::default()
        }
    }

    /// The current cause.
    pub(crate) fn cause(&self) -> Option<&WaitCause> {
        self.cause.as_ref()
    }

    /// Sets the cause from `at` on; whether it changed. A span of no length is dropped, and a
    /// span that would repeat the one before it extends it instead.
    fn set(&mut self, cause: WaitCause, at: Tick) -> bool {
        if self.cause.as_ref() == Some(&cause) {
            return false;
        }
        let at = at.max(self.since);
        if let Some(old) = self.cause.take() {
            if at > self.since {
                if self.spans.capacity() == 0 {
                    // Most waits have two causes (their key, then the cap): not the four
                    // spans a first push would make room for.
                    self.spans.reserve_exact(1);
                }
                self.spans.push(WaitSpan {
                    cause: old,
                    started_at: self.since,
                    ended_at: at,
                });
                self.since = at;
            }
        }
        if let Some(last) = self.spans.last() {
            if last.cause == cause && last.ended_at == self.since {
                let last = self.spans.pop().expect("just seen");
                self.since = last.started_at;
            }
        }
        self.cause = Some(cause);
        true
    }

    /// Ends the wait at `at` (the job starts, or is dropped): its spans, oldest first, from its
    /// admission to `at`.
    pub(crate) fn close(&mut self, at: Tick) -> Vec<WaitSpan> {
        let mut spans = std::mem::take(&mut self.spans);
        if let Some(cause) = self.cause.take() {
            if at > self.since {
                spans.push(WaitSpan {
                    cause,
                    started_at: self.since,
                    ended_at: at,
                });
            }
        }
        self.since = at;
        spans
    }

    /// The wait ends at `at` (its job starts, or leaves its lane unstarted): a cause told of
    /// it in `changes` that does not show in its record is taken back. Most often it is the
    /// `cap` a job is given as its key becomes ready just before it is taken: it waited for
    /// nothing.
    pub(crate) fn end_told(&mut self, at: Tick, changes: &mut Option<WaitChanges>) {
        if let Some(log) = changes.as_mut() {
            log.untell_young(self, at);
        }
    }

    /// The current cause, a delay, lasted past the end it was told with: its `waiting` change,
    /// not told yet, no longer waits for that end to be settled.
    pub(crate) fn outlasted(&mut self, changes: &mut Option<WaitChanges>) {
        let (Some(log), Some(told)) = (changes.as_mut(), self.told.as_ref()) else {
            return;
        };
        let Some((id, _, _)) = told.young else {
            return;
        };
        if let Ok(i) = log.pending.binary_search_by_key(&id, |p| p.id) {
            log.pending[i].ends_by = None;
        }
    }

    /// Ends the wait at `at` as [`WaitLog::close`] does, for a job that leaves its lane
    /// unstarted, after [`WaitLog::end_told`].
    pub(crate) fn close_told(
        &mut self,
        at: Tick,
        changes: &mut Option<WaitChanges>,
    ) -> Vec<WaitSpan> {
        self.end_told(at, changes);
        self.close(at)
    }

    /// Sets the cause of the job `seq` (of `key`) from `at` on, and tells it in `changes`
    /// from when its span now begins (a span that repeats the one before it goes on from
    /// that one's start), unless it is the cause last told. A take may have taken back a
    /// cause that goes on after all (a start that did not happen): it is told again.
    /// `change`: the cause, from when, and the time by which it ends at the latest when
    /// that is known (a delay's end).
    pub(crate) fn set_told(
        &mut self,
        seq: Seq,
        key: &Arc<str>,
        change: (WaitCause, Tick, Option<Tick>),
        changes: &mut Option<WaitChanges>,
    ) {
        let (cause, at, ends_by) = change;
        self.set(cause.clone(), at);
        if let Some(log) = changes.as_mut() {
            let since = self.since;
            log.tell(self, seq, key, cause, since, ends_by);
        }
    }

    /// A new wait from `at` for a retry; `last` is the wait before the try that failed.
    pub(crate) fn retry(&mut self, last: Vec<WaitSpan>, at: Tick) {
        *self = WaitLog {
            before_retry: last,
            ..WaitLog::new(at)
        };
    }

    /// The spans of the wait before the last try, for a retry never started.
    pub(crate) fn take_before_retry(&mut self) -> Vec<WaitSpan> {
        std::mem::take(&mut self.before_retry)
    }
}

/// How many ready keys are looked at for what they are short of (weights, named
/// resources): the cost of telling `resource` from `cap` stays bounded in a run with many
/// ready keys, whose keys further back wait `cap`.
pub(crate) const READY_LOOK: usize = 64;

/// A lane's next batch, as [`Scheduler::batch_view`] found it.
#[derive(Debug, Clone, Copy)]
struct BatchView {
    /// How many of the lane's first jobs it holds (1 without batching).
    len: usize,
    /// When it may be taken, if not at once ([`Scheduler::batch_ready_at`]).
    ready_at: Option<Tick>,
}

/// Where in a lane a change happened, so that the jobs around it are looked at again.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Touched {
    /// Only the lane's first jobs (its next batch and the job after it).
    Front,
    /// Also the job at this index and the one after it.
    At(usize),
    /// Nothing but time: the lane is as it was when its jobs were last looked at (before a
    /// change to it, so that a delay that ran out meanwhile ends when it did).
    Elapsed,
}

impl Scheduler {
    /// Records every change of a waiting job's cause as a [`WaitChange`], for the `waiting`
    /// events; take them with [`Scheduler::take_wait_changes`]. Off by default (no cost).
    ///
    /// The changes told are those its record's `waits` show: a cause that lasted no
    /// millisecond of the record's count (whole milliseconds since the wait began) is taken
    /// back before it is told, and a cause that goes on from the last one told is not told
    /// again.
    pub fn report_wait_changes(&mut self) {
        self.wait_changes.get_or_insert_with(WaitChanges::default);
    }

    /// The cause changes since the last call, settled or not, in the order they were decided
    /// (those taken back left out).
    pub fn take_wait_changes(&mut self) -> Vec<WaitChange> {
        self.wait_changes
            .as_mut()
            .map(|log| log.take_where(|_| true))
            .unwrap_or_default()
    }

    /// The cause changes not yet taken that are settled at `now` (they show in their records
    /// however their jobs go on), in the order they were decided; the others stay, as their
    /// jobs may yet start or their causes change within the same millisecond of the record's
    /// count.
    pub fn take_settled_wait_changes(&mut self, now: Tick) -> Vec<WaitChange> {
        let Some(log) = self.wait_changes.as_mut() else {
            return Vec::new();
        };
        log.take_where(|p| p.settles_at().is_some_and(|at| at <= now))
    }

    /// When the oldest cause change not yet taken is settled: the shell tells it then, if
    /// nothing else has.
    pub fn wait_changes_settle_at(&self) -> Option<Tick> {
        let log = self.wait_changes.as_ref()?;
        log.pending.iter().filter_map(Pending::settles_at).min()
    }

    /// The cause changes of the job `seq` not yet taken, in the order they were decided; the
    /// other jobs' stay (a record about to be closed has its job's causes told first, while
    /// another job's cause may still turn out to last no time).
    pub fn take_wait_changes_of(&mut self, seq: Seq) -> Vec<WaitChange> {
        let Some(log) = self.wait_changes.as_mut() else {
            return Vec::new();
        };
        log.take_where(|p| p.change.as_ref().is_some_and(|c| c.seq == seq))
    }

    /// The next batch of a lane as it is now (`None` where the lane is busy, and a batch
    /// is not looked at).
    fn batch_view(&self, lane: &Lane) -> Option<BatchView> {
        if lane.busy {
            return None;
        }
        let len = if self.policy.batching() {
            batch_len(
                &lane.waiting,
                self.policy.batch_size,
                self.policy.batch_bytes,
            )
        } else {
            1
        };
        Some(BatchView {
            len,
            ready_at: self.batch_ready_after(&lane.waiting, || len),
        })
    }

    /// Why the job at `index` of `key`'s lane waits at time `at`, the lane as it is now;
    /// `view`, its next batch when already looked at ([`Scheduler::batch_view`]).
    fn cause_of(
        &self,
        key: &str,
        lane: &Lane,
        index: usize,
        at: Tick,
        view: Option<BatchView>,
    ) -> WaitCause {
        let behind_previous = || WaitCause::KeyBusy {
            behind: lane.waiting[index - 1].seq,
        };
        if lane.busy {
            return match index {
                0 => WaitCause::KeyBusy {
                    behind: lane.running_seq.unwrap_or(0),
                },
                _ => behind_previous(),
            };
        }
        let view = view
            .or_else(|| self.batch_view(lane))
            .expect("a lane not busy has a next batch");
        if index >= view.len {
            return behind_previous();
        }
        if lane.held_until.is_some_and(|until| until > at) {
            return WaitCause::RetryDelay;
        }
        if let Some(cause) = self.host_cause(key) {
            return cause;
        }
        if view.ready_at.is_some_and(|ready| ready > at) {
            return WaitCause::BatchDelay;
        }
        self.capacity_cause(key, at)
    }

    /// Why a ready key's first job waits for the run's capacity: `cap`, or in a run that
    /// declares weights or named resources, what it is short of ([`Scheduler::short_of`]),
    /// looked for among the first [`READY_LOOK`] ready keys only (beyond them, `cap`).
    fn capacity_cause(&self, key: &str, at: Tick) -> WaitCause {
        if !self.weighs() {
            return WaitCause::Cap;
        }
        match self.short_of_within(key, at, READY_LOOK) {
            Some(super::Shortage::Resource(name)) => WaitCause::Resource { name },
            Some(super::Shortage::Cap) => WaitCause::Cap,
            // It fits (it is about to be taken), or lies beyond the keys looked at: what it
            // waited for so far still holds.
            None => match self
                .lanes
                .get(key)
                .and_then(|lane| lane.waiting.front())
                .and_then(|job| job.wait.cause())
            {
                Some(cause @ WaitCause::Resource { .. }) => cause.clone(),
                _ => WaitCause::Cap,
            },
        }
    }

    /// In a run that declares weights or named resources, what the ready keys wait for
    /// changes as other keys' jobs start and end: decides again the cause of the first job of
    /// each of the first [`READY_LOOK`] ready keys (called when nothing more can start).
    pub(crate) fn refresh_ready_waits(&mut self, now: Tick) {
        if !self.weighs() || self.wait_changes.is_none() && self.ready.is_empty() {
            return;
        }
        let keys: Vec<Arc<str>> = self.ready.iter().take(READY_LOOK).cloned().collect();
        for key in keys {
            self.refresh_wait(&key, 0, now, None);
        }
    }

    /// When the timed cause of the lane's first jobs ends, the lane as it is now: the end of
    /// the retry delay, or when the batch's delay is out.
    fn timed_end(&self, lane: &Lane, cause: &WaitCause, view: Option<BatchView>) -> Option<Tick> {
        match cause {
            WaitCause::RetryDelay => lane.held_until,
            WaitCause::BatchDelay => match view {
                Some(view) => view.ready_at,
                None => self.batch_ready_at(&lane.waiting),
            },
            _ => None,
        }
    }

    /// A run's capacity changed at `at` ([`Scheduler::capacity_changed_at`]).
    pub(crate) fn capacity_changed(&mut self, at: Tick) {
        self.capacity_changed_at = self.capacity_changed_at.max(at);
    }

    /// Whether `key`'s next run had the cap free for it from `since` to `now`: nothing changed
    /// the run's capacity in between (in a run with weights or named resources, no job ended
    /// either), and it is free for the run now (a slot, its sticky slot, no pause after a
    /// spawn shortage, no backlog of grouped output, its weight and needs fitting).
    fn cap_was_free(&self, key: &str, since: Tick, now: Tick) -> bool {
        let fits = if self.weighs() {
            self.fits_now(key, now)
        } else {
            self.used_weight < self.limits.max_concurrent
                && self
                    .candidate(key, now)
                    .is_some_and(|(slot, _)| slot.is_some())
        };
        self.capacity_changed_at <= since
            && self.cap_full_until <= since
            && !self.draining
            && self.output_backlog < self.limits.max_concurrent
            && self.spawn_hold.is_none_or(|until| until <= since)
            && fits
    }

    /// Decides again the causes of the jobs of `key`'s lane around `touched` at `now`. Called
    /// before a change to the lane (so that a delay that ran out meanwhile ends when it did)
    /// and after it.
    pub(crate) fn refresh_waits(&mut self, key: &str, touched: Touched, now: Tick) {
        let Some(lane) = self.lanes.get(key) else {
            return;
        };
        // In a busy lane every waiting job waits behind the one before it, whatever the
        // batches: a change at the back (an admission) changes the cause of no job before it.
        // The lane itself does not change while its jobs' causes are decided: its next batch
        // is looked at once.
        let view = self.batch_view(lane);
        let front = view.map_or(1, |view| view.len);
        let extra = match touched {
            Touched::Front | Touched::Elapsed => None,
            Touched::At(i) => Some([i, i + 1]),
        };
        // The jobs of the next batch share one cause, their key's. Time passing, or a change
        // elsewhere in the lane (an admission at its back, a cancel), that leaves the first
        // job's cause as it was leaves the others' too, but for the batch's end, which may
        // have moved: each admission to a forming batch costs its length, not its length
        // squared. (Not with weights or named resources, where only the first job is looked
        // at again as others start and end.)
        let first_changed = self.refresh_wait(key, 0, now, view);
        let middle_unchanged = !first_changed
            && !matches!(touched, Touched::Front)
            && !self.weighs()
            && self.policy.batching();
        let rest = if middle_unchanged {
            front.saturating_sub(1).max(1)..=front
        } else {
            1..=front
        };
        let extra = extra
            .into_iter()
            .flatten()
            .filter(|&j| j > 0 && !rest.contains(&j));
        for index in rest.clone().chain(extra) {
            self.refresh_wait(key, index, now, view);
        }
    }

    /// Decides again the cause of the job at `index` of `key`'s lane, at `now`; whether it
    /// changed. `view`: the lane's next batch, when already looked at.
    fn refresh_wait(
        &mut self,
        key: &str,
        index: usize,
        now: Tick,
        view: Option<BatchView>,
    ) -> bool {
        let Some(lane) = self.lanes.get(key) else {
            return false;
        };
        let Some(job) = lane.waiting.get(index) else {
            return false;
        };
        let cause = self.cause_of(key, lane, index, now, view);
        if job.wait.cause() == Some(&cause) {
            return false;
        }
        // A retry delay that ran out while the job is free to go lasts until the job starts: the
        // time the shell takes to come to it (other jobs' ends and records handled first) is
        // no wait for the cap. Should a start take what it needs meanwhile, the look at the
        // ready keys after the take finds it short, and its wait for the cap begins then.
        if cause == WaitCause::Cap
            && job.wait.cause() == Some(&WaitCause::RetryDelay)
            && self.may_take(now)
            && self.cap_was_free(key, now, now)
        {
            if let Some(job) = self
                .lanes
                .get_mut(key)
                .and_then(|lane| lane.waiting.get_mut(index))
            {
                job.wait.outlasted(&mut self.wait_changes);
            }
            return false;
        }
        // A delay that ran out before now ends when it did, and the job waited for what held
        // it then. Not for the cap, though, when the cap was not short then: the job was
        // free to go, and the delay lasted until the shell came to it.
        let mut outlasted = false;
        let ran_out = job.wait.cause().and_then(|old| {
            let end = self.timed_end(lane, old, view)?;
            if end >= now {
                return None;
            }
            let between = self.cause_of(key, lane, index, end, view);
            if between == WaitCause::Cap && self.cap_was_free(key, end, now) {
                outlasted = true;
                return None;
            }
            let ends_by = self.timed_end(lane, &between, view);
            Some((between, end, ends_by))
        });
        // A delay ends by a time known now: until then it may still give way within the
        // millisecond it began in.
        let ends_by = self.timed_end(lane, &cause, view);
        let (key, lane) = self
            .lanes
            .get_key_value(key)
            .map(|(k, _)| Arc::clone(k))
            .zip(self.lanes.get_mut(key))
            .expect("seen above");
        let job = &mut lane.waiting[index];
        let seq = job.seq;
        if outlasted {
            job.wait.outlasted(&mut self.wait_changes);
        }
        if let Some((between, end, between_ends_by)) = ran_out {
            job.wait.set_told(
                seq,
                &key,
                (between, end, between_ends_by),
                &mut self.wait_changes,
            );
        }
        job.wait
            .set_told(seq, &key, (cause, now, ends_by), &mut self.wait_changes);
        true
    }
}
