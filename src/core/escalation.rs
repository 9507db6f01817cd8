//! The escalation of one running job's stop, as a step function of events and time: the first
//! signal, the grace period, SIGKILL, and the leak window after the direct child exits
//! (SPEC §2, §4). The shell feeds it what it observed and carries out the actions.

use std::time::Duration;

use nix::sys::signal::Signal;

use super::state::Tick;

/// What happened to a supervised job.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Event {
    /// The core ordered a stop with this signal ([`super::StopOrder`]).
    Stop(Signal),
    /// A second stop signal to `lanes`: kill now.
    Kill,
    /// The direct child exited (was reaped).
    Exited,
    /// Time passed: a deadline of [`Escalation::next_deadline`] may be due. `group_alive`
    /// says whether the job's process group still has members.
    Due {
        /// The job's process group still has members.
        group_alive: bool,
    },
}

/// What the shell must do to the job.
#[must_use]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    /// Deliver the stop signal to the job: to its whole process group locally; the backend
    /// may translate it (Slurm: SIGINT to `srun`).
    Deliver(Signal),
    /// SIGTERM to what is left of the process group (the direct child has exited, or leftover
    /// processes outlived it past the leak window).
    TermGroup,
    /// The end of the grace period or a second Ctrl-C: SIGKILL to the group (Slurm: cancel the
    /// job when `running`, i.e. its direct child has not exited).
    Force {
        /// The direct child has not exited.
        running: bool,
    },
}

/// The escalation state of one job. Times are [`Tick`]s on any one monotonic clock.
#[derive(Debug, Clone)]
pub struct Escalation {
    grace: Duration,
    leak_window: Duration,
    /// The signal of the first stop ordered.
    stop: Option<Signal>,
    /// The first stop came while the direct child ran.
    stopped_while_running: bool,
    exited: bool,
    leak_at: Option<Tick>,
    window_over: bool,
    grace_at: Option<Tick>,
    leaked: bool,
}

impl Escalation {
    /// A running job: `grace` from the first signal to SIGKILL, `leak_window` for the rest of
    /// the group after the direct child exits.
    pub fn new(grace: Duration, leak_window: Duration) -> Self {
        Escalation {
            grace,
            leak_window,
            stop: None,
            stopped_while_running: false,
            exited: false,
            leak_at: None,
            window_over: false,
            grace_at: None,
            leaked: false,
        }
    }

    /// Feeds one event at `now`; returns what to do, in order.
    pub fn on(&mut self, event: Event, now: Tick) -> Vec<Action> {
        let mut actions = Vec::new();
        match event {
            Event::Stop(signal) => {
                // Only the first stop counts: later ones neither signal again nor restart
                // the grace period.
                if self.stop.is_none() {
                    self.stop = Some(signal);
                    // The job runs until none of its processes is left: a stop in the leak
                    // window, after its shell exited, still stops the job.
                    self.stopped_while_running = true;
                    if self.grace_at.is_some() {
                        // The leftovers past the leak window already got SIGTERM and their
                        // grace period runs: the stop neither signals again nor restarts it.
                        return actions;
                    }
                    if self.exited {
                        // The shell is gone; what is left (background processes of a
                        // non-interactive shell ignore SIGINT) gets SIGTERM at once.
                        actions.push(Action::TermGroup);
                    } else {
                        actions.push(Action::Deliver(signal));
                    }
                    self.grace_at = Some(now.saturating_add(self.grace));
                }
            }
            Event::Kill => {
                self.grace_at = None;
                actions.push(Action::Force {
                    running: !self.exited,
                });
            }
            Event::Exited => {
                if !self.exited {
                    self.exited = true;
                    self.leak_at = Some(now.saturating_add(self.leak_window));
                    if self
                        .stop
                        .is_some_and(|s| s != Signal::SIGTERM && s != Signal::SIGKILL)
                    {
                        // A forwarded SIGINT/SIGHUP: the rest of the group gets SIGTERM.
                        actions.push(Action::TermGroup);
                    }
                }
            }
            Event::Due { group_alive } => {
                if self.leak_at.is_some_and(|at| at <= now) {
                    self.leak_at = None;
                    self.window_over = true;
                    if group_alive {
                        // Left over past the window, unless lanes itself was already
                        // stopping the job when its shell exited.
                        if !self.stopped_while_running {
                            self.leaked = true;
                        }
                        if self.stop.is_none() {
                            actions.push(Action::TermGroup);
                            self.grace_at = Some(now.saturating_add(self.grace));
                        }
                    }
                }
                if self.grace_at.is_some_and(|at| at <= now) {
                    self.grace_at = None;
                    actions.push(Action::Force {
                        running: !self.exited,
                    });
                }
            }
        }
        actions
    }

    /// The next time an [`Event::Due`] is needed: the end of the leak window or of the grace
    /// period.
    pub fn next_deadline(&self) -> Option<Tick> {
        match (self.leak_at, self.grace_at) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// Whether the job may be over: its direct child has exited and its pipes are closed, or
    /// the leak window is over, or a pipe is not being read (its output waits for a full
    /// sink, so its end cannot wait for EOF). The shell then checks the group for members.
    pub fn may_be_over(&self, pipes_open: bool, pipe_held_back: bool) -> bool {
        self.exited && (!pipes_open || self.window_over || pipe_held_back)
    }

    /// The job's process group is empty (and what it left in the pipes was read): the job is
    /// over unless a pipe is still open, held by a process that left the group, and the leak
    /// window is not over yet. Returns whether it is over.
    pub fn group_gone(&mut self, pipes_still_open: bool) -> bool {
        if !pipes_still_open {
            return true;
        }
        if self.window_over {
            self.leaked = true;
            return true;
        }
        false
    }

    /// Whether the direct child has exited.
    pub fn exited(&self) -> bool {
        self.exited
    }

    /// Whether the first stop came while the job still ran (its direct child, or processes it
    /// left in the leak window): the fact the core classifies the outcome with.
    pub fn stopped_while_running(&self) -> bool {
        self.stopped_while_running
    }

    /// Whether processes outlived the direct child past the leak window, or held its pipes.
    pub fn leaked(&self) -> bool {
        self.leaked
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    fn escalation() -> Escalation {
        Escalation::new(ms(5000), ms(200))
    }

    #[test]
    fn a_stop_signals_once_and_kills_after_the_grace_period() {
        let mut e = escalation();
        assert_eq!(
            e.on(Event::Stop(Signal::SIGTERM), ms(100)),
            [Action::Deliver(Signal::SIGTERM)]
        );
        assert_eq!(e.next_deadline(), Some(ms(5100)));
        // A second stop neither signals again nor moves the deadline.
        assert_eq!(e.on(Event::Stop(Signal::SIGINT), ms(200)), []);
        assert_eq!(e.next_deadline(), Some(ms(5100)));
        assert_eq!(e.on(Event::Due { group_alive: true }, ms(5099)), []);
        assert_eq!(
            e.on(Event::Due { group_alive: true }, ms(5100)),
            [Action::Force { running: true }]
        );
        assert!(e.stopped_while_running());
        assert_eq!(e.next_deadline(), None);
    }

    #[test]
    fn a_stop_while_leftovers_are_being_terminated_keeps_their_grace_period() {
        let mut e = escalation();
        let _ = e.on(Event::Exited, ms(10));
        assert_eq!(
            e.on(Event::Due { group_alive: true }, ms(210)),
            [Action::TermGroup]
        );
        assert_eq!(e.next_deadline(), Some(ms(5210)));
        // A timeout comes a second later: no second signal, the same SIGKILL time.
        assert_eq!(e.on(Event::Stop(Signal::SIGTERM), ms(1210)), []);
        assert_eq!(e.next_deadline(), Some(ms(5210)));
        assert_eq!(
            e.on(Event::Due { group_alive: true }, ms(5210)),
            [Action::Force { running: false }]
        );
    }

    #[test]
    fn a_forwarded_interrupt_is_followed_by_sigterm_to_the_rest_once_the_shell_exits() {
        let mut e = escalation();
        let _ = e.on(Event::Stop(Signal::SIGINT), ms(0));
        assert_eq!(e.on(Event::Exited, ms(10)), [Action::TermGroup]);
        let mut t = escalation();
        let _ = t.on(Event::Stop(Signal::SIGTERM), ms(0));
        assert_eq!(t.on(Event::Exited, ms(10)), []);
    }

    #[test]
    fn a_stop_after_the_exit_terms_the_leftovers_and_still_stops_the_job() {
        let mut e = escalation();
        let _ = e.on(Event::Exited, ms(10));
        assert_eq!(
            e.on(Event::Stop(Signal::SIGTERM), ms(20)),
            [Action::TermGroup]
        );
        assert!(e.stopped_while_running(), "its leftovers still ran");
        assert_eq!(
            e.on(Event::Due { group_alive: true }, ms(5020)),
            [Action::Force { running: false }]
        );
    }

    #[test]
    fn leftovers_past_the_leak_window_are_leaked_and_terminated() {
        let mut e = escalation();
        let _ = e.on(Event::Exited, ms(1000));
        assert_eq!(e.next_deadline(), Some(ms(1200)));
        assert!(!e.may_be_over(true, false));
        assert_eq!(
            e.on(Event::Due { group_alive: true }, ms(1200)),
            [Action::TermGroup]
        );
        assert!(e.leaked());
        assert!(e.may_be_over(true, false));
        assert_eq!(e.next_deadline(), Some(ms(6200)));
        assert_eq!(
            e.on(Event::Due { group_alive: true }, ms(6200)),
            [Action::Force { running: false }]
        );
    }

    #[test]
    fn an_empty_group_at_the_end_of_the_window_is_no_leak() {
        let mut e = escalation();
        let _ = e.on(Event::Exited, ms(0));
        assert_eq!(e.on(Event::Due { group_alive: false }, ms(200)), []);
        assert!(!e.leaked());
        assert!(e.group_gone(false));
    }

    #[test]
    fn a_pipe_held_open_outside_the_group_ends_the_job_as_leaked_after_the_window() {
        let mut e = escalation();
        let _ = e.on(Event::Exited, ms(0));
        assert!(!e.group_gone(true), "the holder may still close it");
        let _ = e.on(Event::Due { group_alive: false }, ms(200));
        assert!(e.group_gone(true));
        assert!(e.leaked());
    }

    #[test]
    fn leftovers_of_a_job_lanes_was_stopping_are_not_leaked() {
        let mut e = escalation();
        let _ = e.on(Event::Stop(Signal::SIGTERM), ms(0));
        let _ = e.on(Event::Exited, ms(10));
        assert_eq!(e.on(Event::Due { group_alive: true }, ms(210)), []);
        assert!(!e.leaked());
    }

    #[test]
    fn a_kill_forces_at_once_and_cancels_the_grace_deadline() {
        let mut e = escalation();
        let _ = e.on(Event::Stop(Signal::SIGINT), ms(0));
        assert_eq!(e.on(Event::Kill, ms(50)), [Action::Force { running: true }]);
        assert_eq!(e.next_deadline(), None);
    }

    #[test]
    fn a_held_back_pipe_lets_the_end_be_checked_before_eof() {
        let mut e = escalation();
        assert!(!e.may_be_over(false, false), "the direct child runs");
        let _ = e.on(Event::Exited, ms(0));
        assert!(e.may_be_over(false, false));
        assert!(e.may_be_over(true, true));
        assert!(!e.may_be_over(true, false));
    }
}
