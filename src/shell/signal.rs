//! Signals to `lanes` itself. The stop signals (SIGINT, SIGTERM, SIGHUP, SIGQUIT and SIGXCPU)
//! come as one stream; what each means (the first a graceful shutdown, any later one SIGKILL
//! now) is the core's decision ([`crate::core::Scheduler::signal_received`]). SIGUSR1 asks for
//! a status of the running jobs. Every other signal whose default action would end `lanes`
//! without stopping its jobs is ignored or blocked from the start ([`disarm_harmless`]),
//! except those that mean `lanes` itself is broken (SIGSEGV, SIGBUS, SIGILL, SIGFPE, SIGTRAP,
//! SIGABRT) and SIGKILL, which nothing can catch.

use nix::libc;
use nix::sys::signal::{SigSet, Signal};
use tokio::signal::unix::{signal, Signal as Stream, SignalKind};

use crate::output::sink::output_written;

/// The signals that are handled (the stop signals and SIGUSR1): blocked from the first thing
/// `main` does until their handlers stand ([`StopSignals::install`]), so that one that comes
/// early waits, pending, instead of ending `lanes` with its default action or being lost.
const HANDLED: [Signal; 6] = [
    Signal::SIGINT,
    Signal::SIGTERM,
    Signal::SIGHUP,
    Signal::SIGQUIT,
    Signal::SIGXCPU,
    Signal::SIGUSR1,
];

/// Blocks [`HANDLED`] in the calling thread, and so in every thread it starts. Call it first
/// thing in `main`, before any thread starts.
pub(crate) fn block_handled() {
    let _ = handled_set().thread_block();
}

/// The handled signals caught by [`hold_early`]'s handler, one bit per signal number.
static CAUGHT_EARLY: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

extern "C" fn catch_early(signal: libc::c_int) {
    // Async-signal-safe: one atomic operation.
    CAUGHT_EARLY.fetch_or(1 << signal, std::sync::atomic::Ordering::SeqCst);
}

/// The process's first step: from here on a handled signal is neither lost nor fatal. Each of
/// [`HANDLED`] is first caught by a handler that notes it (one `sigaction` turns an inherited
/// `SIG_IGN` or `SIG_DFL` into it, leaving no moment in which the signal would be discarded or
/// end `lanes`), then blocked, then set to its default action (a signal noted meanwhile is
/// raised again, and waits, pending, like any later one, for the handlers of a run or the
/// unblocking of a task). An inherited ignored SIGINT or SIGQUIT (a non-interactive shell's
/// background command) is thereby reset; SIGHUP stays ignored when it was (`nohup`), which
/// [`crate::shell::unix::reset_ignored_signals`] reads back later.
///
/// Runs before Rust's own start-up (an ELF constructor), so it uses `libc` alone and no
/// allocation.
pub(crate) fn hold_early() {
    let mut taken: u64 = 0;
    for signal in HANDLED {
        let number = signal as libc::c_int;
        // SAFETY: reads then installs an action for one signal, with a zeroed `sigaction` owned
        // here; the handler does one atomic operation. No other thread exists yet.
        unsafe {
            let mut current: libc::sigaction = std::mem::zeroed();
            if libc::sigaction(number, std::ptr::null(), &mut current) != 0 {
                continue;
            }
            if signal == Signal::SIGHUP && current.sa_sigaction == libc::SIG_IGN {
                continue;
            }
            let mut catch: libc::sigaction = std::mem::zeroed();
            catch.sa_sigaction = catch_early as *const () as libc::sighandler_t;
            libc::sigemptyset(&mut catch.sa_mask);
            if libc::sigaction(number, &catch, std::ptr::null_mut()) == 0 {
                taken |= 1 << number;
            }
        }
    }
    block_handled();
    block_harmless();
    let caught = CAUGHT_EARLY.load(std::sync::atomic::Ordering::SeqCst);
    for signal in HANDLED {
        let number = signal as libc::c_int;
        if taken & (1 << number) == 0 {
            continue;
        }
        // SAFETY: the signal is blocked: sending it to the process again leaves it pending
        // for whichever thread unblocks it, and its default action runs only if it is
        // unblocked without a handler of ours (a task, which then ends on it).
        unsafe {
            if caught & (1 << number) != 0 {
                libc::kill(libc::getpid(), number);
            }
            libc::signal(number, libc::SIG_DFL);
        }
    }
}

/// Blocks, from `lanes`' first instruction, the signals [`disarm_harmless`] makes harmless
/// later ([`HARMLESS`], the real-time ones, SIGPIPE and SIGXFSZ): one sent in `lanes`' first
/// moments waits, pending, instead of ending it by its default action, and is then blocked
/// for good or discarded (`SIG_IGN` discards a pending signal; POSIX, `sigaction`).
fn block_harmless() {
    change_mask(
        libc::SIG_BLOCK,
        HARMLESS
            .into_iter()
            .chain(REAL_TIME)
            .chain([libc::SIGPIPE, libc::SIGXFSZ]),
    );
}

/// Changes the calling thread's signal mask by `signals` (`how`: `SIG_BLOCK` adds them,
/// `SIG_SETMASK` makes them the whole mask; `pthread_sigmask(3)`). No allocation: it serves
/// [`hold_early`]'s constructor too.
fn change_mask(how: libc::c_int, signals: impl IntoIterator<Item = libc::c_int>) {
    // SAFETY: a zeroed set owned here, filled and handed to `pthread_sigmask`; glibc accepts
    // every number its callers add (none is one of its internal 32 and 33).
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        for signal in signals {
            libc::sigaddset(&mut set, signal);
        }
        libc::pthread_sigmask(how, &set, std::ptr::null_mut());
    }
}

/// Unblocks [`HANDLED`] with their actions as they are (the default, or SIGHUP ignored under
/// `nohup`): for the subcommands that are no run (`lanes submit`, `status`, `timeline`...),
/// which install no handler and so die on a stop signal like any command.
pub(crate) fn unblock_handled() {
    let _ = handled_set().thread_unblock();
}

/// Ends the process by SIGINT, at its default action, once a run that SIGINT stopped has
/// stopped and recorded every job: a shell that runs `lanes` in a loop or a script then stops
/// too, as for a program that never caught the signal, and still sees status 130 (the "wait
/// and cooperative exit" convention: bash goes on after a child that caught SIGINT and
/// exited, <https://www.cons.org/cracauer/sigint.html>). Returns only if the signal did not end
/// the process.
pub(crate) fn die_by_sigint() {
    die_by(Signal::SIGINT);
}

/// Ends the process by `signal` at its default action. Returns only if that did not end it.
fn die_by(signal: Signal) {
    use nix::sys::signal::{raise, sigaction, SaFlags, SigAction, SigHandler};
    let default = SigAction::new(SigHandler::SigDfl, SaFlags::empty(), SigSet::empty());
    // SAFETY: installs the default action, which runs no code of ours.
    let _ = unsafe { sigaction(signal, &default) };
    let _ = SigSet::from(signal).thread_unblock();
    let _ = raise(signal);
}

/// While nothing has started and no report can be written yet (a wait for an output FIFO's
/// reader): ends the process by the stop signal a handler noted first, if any, as the signal's
/// default action would have; exits 128+N if that does not end it. Returns when none was noted.
pub(crate) fn end_by_noted_stop() {
    use std::sync::atomic::Ordering::SeqCst;
    let noted = STOPS
        .into_iter()
        .filter_map(|stop| {
            let number = ARRIVED.get(stop as usize)?.load(SeqCst);
            (number != 0).then_some((number, stop))
        })
        .min();
    if let Some((_, stop)) = noted {
        die_by(stop);
        std::process::exit(128 + stop as i32);
    }
}

fn handled_set() -> SigSet {
    let mut set = SigSet::empty();
    for signal in HANDLED {
        set.add(signal);
    }
    set
}

/// The signals whose default action would end `lanes` and that it neither handles nor ignores:
/// blocked by [`disarm_harmless`], so that one sent to `lanes` does nothing.
const HARMLESS: [libc::c_int; 8] = [
    libc::SIGUSR2,
    libc::SIGALRM,
    libc::SIGVTALRM,
    libc::SIGPROF,
    libc::SIGIO,
    libc::SIGSYS,
    libc::SIGPWR,
    libc::SIGSTKFLT,
];

/// The real-time signals glibc leaves to programs (`SIGRTMIN..=SIGRTMAX`, 34..=64 on Linux;
/// 32 and 33 are glibc's own): blocked with [`HARMLESS`].
pub(crate) const REAL_TIME: std::ops::RangeInclusive<libc::c_int> = 34..=64;

/// Makes every signal whose default action ends the process and that `lanes` does not handle
/// harmless: SIGXFSZ and SIGPIPE are ignored (`SIG_IGN`), so that a write past `ulimit -f` is
/// an EFBIG error and a write to a closed pipe an EPIPE error; [`HARMLESS`] and the real-time
/// signals are blocked in the calling thread, and so in every thread it starts, so that one
/// sent to `lanes` stays pending and does nothing. Blocked rather than ignored, they keep
/// their default action, and a job's process need not reset them before its `exec` (a
/// disposition of `SIG_IGN` would survive the `exec`, a blocked signal does not: the child
/// empties its mask). Jobs start with every signal at its default and none blocked all the
/// same ([`super::spawn`]). Every other signal `lanes` inherited blocked is unblocked, but
/// for the handled ones, which stay blocked ([`block_handled`]). Call it before any thread
/// starts, after [`super::unix::reset_ignored_signals`].
pub(crate) fn disarm_harmless() {
    for signal in [libc::SIGXFSZ, libc::SIGPIPE] {
        // SAFETY: installs SIG_IGN, which runs no code of ours; no other thread exists yet.
        unsafe {
            libc::signal(signal, libc::SIG_IGN);
        }
    }
    // The whole mask is set: a signal inherited blocked that lanes needs (SIGCHLD for reaping,
    // SIGTSTP for Ctrl-Z, SIGWINCH) is unblocked here, and the handled ones stay blocked until
    // their handlers stand ([`block_handled`]). A run blocks SIGCHLD and SIGTSTP again, for
    // its `signalfd`s ([`hold_watched`]).
    change_mask(
        libc::SIG_SETMASK,
        HARMLESS
            .into_iter()
            .chain(REAL_TIME)
            .chain(HANDLED.map(|signal| signal as libc::c_int)),
    );
}

/// Bit N-1 for signal N: the kernel's signal set on 64-bit Linux.
pub(crate) const fn bit(signal: libc::c_int) -> u64 {
    1 << (signal - 1)
}

/// The [`bit`]s of `signals`.
const fn bits(signals: &[Signal]) -> u64 {
    let mut set = 0;
    let mut i = 0;
    while i < signals.len() {
        set |= bit(signals[i] as libc::c_int);
        i += 1;
    }
    set
}

/// The signals whose disposition `lanes` may have changed from the default, one bit per
/// signal ([`bit`]): the handled ones ([`HANDLED`], SIGHUP also when it stays ignored under
/// `nohup`), those the event loop takes (SIGCHLD, SIGWINCH, SIGCONT), the two ignored by
/// [`disarm_harmless`] (SIGPIPE, SIGXFSZ), SIGSEGV and SIGBUS (Rust's runtime catches them to
/// tell a stack overflow), and glibc's internal 32 and 33, whose handlers glibc installs. Every other signal is at its default in `lanes`: an inherited `SIG_IGN` is
/// reset ([`super::unix::reset_ignored_signals`]) and the rest are blocked, not ignored
/// ([`disarm_harmless`]). So a job's process resets only these before its `exec`
/// ([`super::spawn`]), and debug builds check the rest before every spawn
/// ([`unchanged_are_default`]).
pub(crate) const CHANGED_DISPOSITIONS: u64 = bits(&HANDLED)
    | bit(libc::SIGCHLD)
    | bit(libc::SIGWINCH)
    | bit(libc::SIGCONT)
    | bit(libc::SIGPIPE)
    | bit(libc::SIGXFSZ)
    | bit(libc::SIGSEGV)
    | bit(libc::SIGBUS)
    | bit(32)
    | bit(33);

/// Whether every signal outside [`CHANGED_DISPOSITIONS`] (SIGKILL and SIGSTOP aside) is at
/// its default action in `lanes`; `Err(N)` names the first that is not. What lets a job's
/// process reset only [`CHANGED_DISPOSITIONS`]: a handler of `lanes` left in place could run
/// in a `CLONE_VM` child on `lanes`' memory, and an ignored signal would reach the job.
pub(crate) fn unchanged_are_default() -> Result<(), libc::c_int> {
    for signal in 1..=64 {
        if CHANGED_DISPOSITIONS & bit(signal) != 0
            || signal == libc::SIGKILL
            || signal == libc::SIGSTOP
        {
            continue;
        }
        if disposition(signal).is_some_and(|action| action != libc::SIG_DFL) {
            return Err(signal);
        }
    }
    Ok(())
}

/// The current action of `signal` (`SIG_DFL`, `SIG_IGN` or a handler's address); `None` when
/// it cannot be read (glibc refuses its internal 32 and 33).
pub(crate) fn disposition(signal: libc::c_int) -> Option<libc::sighandler_t> {
    // SAFETY: only reads the current action (a null new action changes nothing), into a
    // zeroed `sigaction` owned here.
    unsafe {
        let mut current: libc::sigaction = std::mem::zeroed();
        (libc::sigaction(signal, std::ptr::null(), &mut current) == 0)
            .then_some(current.sa_sigaction)
    }
}

/// The stop signals, merged, and the status request (SIGUSR1).
pub(crate) struct StopSignals {
    interrupt: Stream,
    terminate: Stream,
    quit: Stream,
    /// SIGXCPU: `lanes`' own CPU-time soft limit (`ulimit -t`) was reached.
    cpu_limit: Stream,
    /// `None` when SIGHUP was ignored at start (`nohup`): it stays ignored.
    hangup: Option<Stream>,
    status: Option<Stream>,
    /// Stop signals that were pending, blocked, when the handlers were installed (sent before
    /// `lanes` could take them), in the order the kernel would have delivered them: the first
    /// ones [`StopSignals::next`] gives, before the event loop's first turn.
    early: std::collections::VecDeque<Signal>,
    /// A stop signal was taken ([`StopSignals::next`]): lanes' waits for its readers are
    /// bounded from then on ([`until_stopped`]).
    taken: bool,
}

impl StopSignals {
    /// Installs the handlers; SIGHUP's only when `with_hangup`; then unblocks the handled
    /// signals ([`block_handled`]), so that one that came before is taken now. Must run inside
    /// the tokio runtime.
    ///
    /// # Errors
    /// When a handler cannot be installed; the signals are unblocked all the same, and keep
    /// their default actions.
    pub(crate) fn install(with_hangup: bool) -> std::io::Result<Self> {
        let installed = Self::handlers(with_hangup).map(|mut signals| {
            signals.early = take_pending(with_hangup);
            signals
        });
        let _ = handled_set().thread_unblock();
        installed
    }

    fn handlers(with_hangup: bool) -> std::io::Result<Self> {
        let signals = StopSignals {
            interrupt: signal(SignalKind::interrupt())?,
            terminate: signal(SignalKind::terminate())?,
            quit: signal(SignalKind::quit())?,
            cpu_limit: signal(SignalKind::from_raw(libc::SIGXCPU))?,
            hangup: if with_hangup {
                Some(signal(SignalKind::hangup())?)
            } else {
                None
            },
            status: Some(signal(SignalKind::user_defined1())?),
            early: std::collections::VecDeque::new(),
            taken: false,
        };
        // SIGHUP's only with its stream: an action would install a handler, and SIGHUP stays
        // ignored under `nohup`.
        for stop in stops(with_hangup) {
            // SAFETY: the action makes two atomic operations on statics: async-signal-safe.
            // Registered after tokio's, it runs after it, for every delivery.
            unsafe {
                signal_hook_registry::register(stop as libc::c_int, move || note_arrival(stop))?;
            }
        }
        Ok(signals)
    }

    /// Waits for the next stop signal (at once for one that was pending at installation).
    /// Different signals come in the order they arrived: when several are there at once (the
    /// event loop was busy), each stream's own is taken and they are sorted by arrival.
    pub(crate) async fn next(&mut self) -> Signal {
        let signal = self.next_arrived().await;
        self.taken = true;
        signal
    }

    /// Whether a stop signal was taken ([`StopSignals::next`]) in this run.
    pub(crate) fn any_taken(&self) -> bool {
        self.taken
    }

    async fn next_arrived(&mut self) -> Signal {
        if let Some(signal) = self.early.pop_front() {
            return signal;
        }
        let first = tokio::select! {
            _ = self.interrupt.recv() => Signal::SIGINT,
            _ = self.terminate.recv() => Signal::SIGTERM,
            _ = self.quit.recv() => Signal::SIGQUIT,
            _ = self.cpu_limit.recv() => Signal::SIGXCPU,
            Some(_) = recv_optional(&mut self.hangup) => Signal::SIGHUP,
        };
        let mut context = std::task::Context::from_waker(std::task::Waker::noop());
        let mut arrived = vec![first];
        for (signal, stream) in [
            (Signal::SIGINT, Some(&mut self.interrupt)),
            (Signal::SIGTERM, Some(&mut self.terminate)),
            (Signal::SIGQUIT, Some(&mut self.quit)),
            (Signal::SIGXCPU, Some(&mut self.cpu_limit)),
            (Signal::SIGHUP, self.hangup.as_mut()),
        ] {
            if let Some(stream) = stream.filter(|_| signal != first) {
                if stream.poll_recv(&mut context).is_ready() {
                    arrived.push(signal);
                }
            }
        }
        let mut by_arrival: Vec<(u64, Signal)> = arrived
            .into_iter()
            .map(|signal| (take_arrival(signal), signal))
            .collect();
        by_arrival.sort_unstable();
        let mut order = by_arrival.into_iter().map(|(_, signal)| signal);
        let next = order.next().unwrap_or(first);
        self.early.extend(order);
        next
    }

    /// The status requests (SIGUSR1), to be listened to apart. Once that stream is dropped
    /// (every job has ended), SIGUSR1 does nothing.
    pub(crate) fn take_status_requests(&mut self) -> Option<Stream> {
        self.status.take()
    }
}

/// The signals the event loop reads through a `signalfd` instead of a handler: SIGCHLD
/// ([`ChildExits`]), SIGTSTP and SIGTTOU ([`TerminalStop`]). Blocked in every thread of a run
/// ([`hold_watched`]), so that one sent waits, pending, until the event loop acts on it.
const WATCHED: [Signal; 3] = [Signal::SIGCHLD, Signal::SIGTSTP, Signal::SIGTTOU];

/// The stops `lanes` takes only once its jobs are stopped ([`TerminalStop`]): Ctrl-Z, and a
/// SIGTTOU sent to it. The kernel sends none for `lanes`' own writes to its terminal from the
/// background under `stty tostop` while SIGTTOU is blocked: they are written, as a program that
/// ignores SIGTTOU writes them, rather than stopping `lanes` while its jobs run on with no one
/// to enforce their timeouts.
const TERMINAL_STOPS: [Signal; 2] = [Signal::SIGTSTP, Signal::SIGTTOU];

/// Blocks [`WATCHED`] in the calling thread, and so in every thread it starts. Call it in a
/// run's set-up, before any thread starts. (A job's process empties its mask before its
/// `exec`, as every other child of `lanes` does.)
pub(crate) fn hold_watched() {
    let _ = SigSet::from_iter(WATCHED).thread_block();
}

/// Unblocks `signal` (one of [`WATCHED`]) in the calling thread: it then acts at once, by its
/// handler or its default action, as in any program. For when its `signalfd` could not be
/// made, and for SIGTSTP once every job has ended.
pub(crate) fn release_watched(signal: Signal) {
    let _ = SigSet::from(signal).thread_unblock();
}

/// Unblocks the terminal stops ([`TERMINAL_STOPS`]) in the calling thread: they then stop
/// `lanes` at once, as any program, when their `signalfd` could not be made.
fn release_terminal_stops() {
    let _ = SigSet::from_iter(TERMINAL_STOPS).thread_unblock();
}

/// Runs `wait`, a wait of a run's start before anything has started (a FIFO's reader, the
/// database of `--coordinate`), with the handled signals unblocked at the actions they have
/// then (their defaults, SIGHUP ignored under `nohup`) and Ctrl-Z released: a stop signal ends
/// `lanes` at once, by its default action, as any program (or, when the run's handlers stand
/// already, by [`end_by_noted_stop`] in `wait`), and Ctrl-Z stops it. The signal mask is then
/// put back as it was.
pub(crate) fn stoppable_at_start<T>(wait: impl FnOnce() -> T) -> T {
    use nix::sys::signal::{pthread_sigmask, SigmaskHow};
    let mut unblocked = handled_set();
    for stop in TERMINAL_STOPS {
        unblocked.add(stop);
    }
    let mut before = SigSet::empty();
    let _ = pthread_sigmask(SigmaskHow::SIG_UNBLOCK, Some(&unblocked), Some(&mut before));
    let result = wait();
    // As it was: blocked until the run's handlers stand, or unblocked to them already.
    let _ = pthread_sigmask(SigmaskHow::SIG_SETMASK, Some(&before), None);
    result
}

/// A non-blocking `signalfd` for `signals`, registered with the event loop for reading. Must
/// run inside the tokio runtime.
fn watch(
    signals: &[Signal],
) -> std::io::Result<tokio::io::unix::AsyncFd<nix::sys::signalfd::SignalFd>> {
    use nix::sys::signalfd::{SfdFlags, SignalFd};
    let fd = SignalFd::with_flags(
        &SigSet::from_iter(signals.iter().copied()),
        SfdFlags::SFD_NONBLOCK | SfdFlags::SFD_CLOEXEC,
    )?;
    // SAFETY: `SignalFd` owns its descriptor and closes it only when dropped, with the
    // `AsyncFd` that holds it.
    let registered = unsafe {
        tokio::io::unix::AsyncFd::register_with_interest(fd, tokio::io::Interest::READABLE)
    };
    registered.map_err(std::io::Error::from)
}

/// Ctrl-Z (SIGTSTP), or a SIGTTOU sent to `lanes` ([`TERMINAL_STOPS`]), kept pending until
/// `lanes` has stopped its jobs, then let act as its default action (the whole process
/// stops). SIGTSTP has no handler and is blocked
/// ([`hold_watched`]): one sent waits, pending, and the `signalfd` tells the event loop that
/// it came, without taking it. A SIGCONT sent meanwhile (`kill -TSTP` then `kill -CONT`
/// before `lanes` could act) discards the pending SIGTSTP (POSIX, `kill`; Linux
/// `prepare_signal`), so the stop is called off by the kernel itself, at whatever moment the
/// SIGCONT comes: there is no look-then-stop gap in which a continue could be spent before
/// the stop it was meant to end.
pub(crate) struct TerminalStop(tokio::io::unix::AsyncFd<nix::sys::signalfd::SignalFd>);

impl TerminalStop {
    /// Listens for SIGTSTP and SIGTTOU. Must run inside the tokio runtime, after
    /// [`hold_watched`].
    ///
    /// # Errors
    /// When the `signalfd` cannot be made or registered: the caller then lets SIGTSTP and
    /// SIGTTOU act at once ([`Self::listen_or_release`]), as they would in any program.
    pub(crate) fn listen() -> std::io::Result<Self> {
        watch(&TERMINAL_STOPS).map(TerminalStop)
    }

    /// [`Self::listen`], or, when it cannot, `None` with SIGTSTP and SIGTTOU let act at once
    /// in the calling thread ([`release_terminal_stops`]).
    pub(crate) fn listen_or_release() -> Option<Self> {
        let listening = Self::listen().ok();
        if listening.is_none() {
            release_terminal_stops();
        }
        listening
    }

    /// Waits until a SIGTSTP is pending (at once for one that came before [`Self::listen`]).
    /// The readiness is cleared before the stop is acted on, so that a SIGTSTP that comes
    /// while `lanes` is stopped or resuming is seen at the next call.
    pub(crate) async fn requested(&self) {
        if let Ok(mut ready) = self.0.readable().await {
            ready.clear_ready();
        }
    }

    /// Stops `lanes` if the SIGTSTP is still pending, by unblocking it in this thread for one
    /// system call: the kernel then takes it with its default action (the whole process
    /// stops, and the shell sees it stopped) before that call returns to `lanes`. Returns once
    /// `lanes` is continued, or at once when a SIGCONT has called the stop off. As for any
    /// program, the kernel discards the SIGTSTP instead in an orphaned process group, which
    /// no job control could continue.
    pub(crate) fn stop_if_still_requested(&self) {
        let set = SigSet::from_iter(TERMINAL_STOPS);
        let _ = set.thread_unblock();
        let _ = set.thread_block();
    }

    /// Takes a pending SIGTSTP without stopping: for the first process of a PID namespace,
    /// which the kernel never stops.
    pub(crate) fn discard(&self) {
        let _ = self.0.get_ref().read_signal();
    }
}

/// Child exits (SIGCHLD), read from a `signalfd`: SIGCHLD has no handler and is blocked
/// ([`hold_watched`]), so that an exit costs the event loop one wake-up and one read, with no
/// handler to run and no pipe to write and read (a handler's way, tokio's, cost about 20 µs
/// of CPU more per job; `bench/README.md`).
pub(crate) struct ChildExits(tokio::io::unix::AsyncFd<nix::sys::signalfd::SignalFd>);

impl ChildExits {
    /// Listens for SIGCHLD. Must run inside the tokio runtime, after [`hold_watched`].
    ///
    /// # Errors
    /// When the `signalfd` cannot be made or registered: the caller then takes SIGCHLD with a
    /// handler ([`release_watched`]).
    pub(crate) fn listen() -> std::io::Result<Self> {
        watch(&[Signal::SIGCHLD]).map(ChildExits)
    }

    /// Waits for a SIGCHLD, and takes every one pending (at once for one that came before
    /// [`Self::listen`]): the caller then reaps every child that has exited, so that an exit
    /// after this returns brings another.
    pub(crate) async fn arrived(&self) {
        if let Ok(mut ready) = self.0.readable().await {
            while let Ok(Some(_)) = ready.get_inner().read_signal() {}
            ready.clear_ready();
        }
    }
}

/// The next SIGCHLD; never, without [`ChildExits`].
pub(crate) async fn child_exited(exits: &Option<ChildExits>) -> Option<()> {
    match exits {
        Some(exits) => {
            exits.arrived().await;
            Some(())
        }
        None => std::future::pending().await,
    }
}

/// The next SIGTSTP, with the [`TerminalStop`] that saw it; never, without one.
pub(crate) async fn terminal_stop_requested(stop: &Option<TerminalStop>) -> Option<&TerminalStop> {
    match stop {
        Some(stop) => {
            stop.requested().await;
            Some(stop)
        }
        None => std::future::pending().await,
    }
}

/// The stop signals, whose arrival order is noted.
const STOPS: [Signal; 5] = [
    Signal::SIGHUP,
    Signal::SIGINT,
    Signal::SIGQUIT,
    Signal::SIGTERM,
    Signal::SIGXCPU,
];

/// [`STOPS`], SIGHUP only when `with_hangup` (it stays ignored under `nohup` otherwise).
fn stops(with_hangup: bool) -> impl Iterator<Item = Signal> {
    STOPS
        .into_iter()
        .filter(move |&signal| with_hangup || signal != Signal::SIGHUP)
}

/// The next arrival's number.
static NEXT_ARRIVAL: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);

/// Per signal number, the arrival number of its earliest delivery not yet taken; 0 for none.
static ARRIVED: [std::sync::atomic::AtomicU64; 32] =
    [const { std::sync::atomic::AtomicU64::new(0) }; 32];

/// Notes a delivery of `signal` (in its handler): its arrival number, unless an earlier
/// delivery of it is still to be taken.
fn note_arrival(signal: Signal) {
    use std::sync::atomic::Ordering::SeqCst;
    let number = NEXT_ARRIVAL.fetch_add(1, SeqCst);
    if let Some(slot) = ARRIVED.get(signal as usize) {
        let _ = slot.compare_exchange(0, number, SeqCst, SeqCst);
    }
}

/// Takes the arrival number of `signal`'s earliest delivery not yet taken (`u64::MAX` when
/// none was noted: last).
fn take_arrival(signal: Signal) -> u64 {
    match ARRIVED
        .get(signal as usize)
        .map(|slot| slot.swap(0, std::sync::atomic::Ordering::SeqCst))
    {
        Some(0) | None => u64::MAX,
        Some(number) => number,
    }
}

/// Dequeues the stop signals pending while blocked (`sigpending`, then `sigtimedwait` with a
/// zero timeout for each; POSIX), lowest number first as the kernel delivers them; SIGHUP only
/// when `with_hangup`. Taken so, each counts once: unblocking would otherwise hand it to the
/// handler, whose delivery the event loop sees only at some later turn, after the first job
/// may have started.
fn take_pending(with_hangup: bool) -> std::collections::VecDeque<Signal> {
    let mut taken = std::collections::VecDeque::new();
    // SAFETY: `sigpending` and `sigismember` fill and read a zeroed set owned here.
    let pending = unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        if libc::sigpending(&mut set) != 0 {
            return taken;
        }
        set
    };
    for signal in stops(with_hangup) {
        // SAFETY: reads a set filled above; dequeues one signal that is blocked in this
        // thread (all handled signals are, until `install` unblocks them), without waiting.
        let dequeued = unsafe {
            if libc::sigismember(&pending, signal as libc::c_int) != 1 {
                continue;
            }
            let mut one: libc::sigset_t = std::mem::zeroed();
            libc::sigemptyset(&mut one);
            libc::sigaddset(&mut one, signal as libc::c_int);
            let now = libc::timespec {
                tv_sec: 0,
                tv_nsec: 0,
            };
            libc::sigtimedwait(&one, std::ptr::null_mut(), &now) == signal as libc::c_int
        };
        if dequeued {
            taken.push_back(signal);
        }
    }
    taken
}

/// The next stop signal; never, without handlers.
pub(crate) async fn next_signal(signals: &mut Option<StopSignals>) -> Option<Signal> {
    match signals {
        Some(signals) => Some(signals.next().await),
        None => std::future::pending().await,
    }
}

/// The next delivery of an optional signal stream; never, without one.
pub(crate) async fn recv_optional(stream: &mut Option<Stream>) -> Option<()> {
    match stream {
        Some(stream) => stream.recv().await,
        None => std::future::pending().await,
    }
}

/// After a stop signal that asks to stop now (a second one, or any once every job has
/// ended), how long output still on its way to lanes' stdout or stderr may take to be written
/// before lanes exits without it.
pub(crate) const FORCED_WRITE_WAIT: std::time::Duration = std::time::Duration::from_millis(500);

/// After the first stop signal, how long a reader of lanes' output may take nothing before
/// that output is dropped: a run that was told to stop ends even when its reader stalled for
/// good (a pipe nobody reads), and one that still reads gets its output, however slowly.
pub(crate) const UNREAD_AFTER_STOP: std::time::Duration = std::time::Duration::from_secs(5);

/// Whether lanes' stdout and stderr still take anything, after a stop signal: the reader
/// stalled once [`UNREAD_AFTER_STOP`] passed with nothing written ([`output_written`]).
pub(crate) struct ReaderWatch {
    seen: u64,
    since: tokio::time::Instant,
}

impl ReaderWatch {
    /// Watching from now on.
    pub(crate) fn new() -> Self {
        ReaderWatch {
            seen: output_written(),
            since: tokio::time::Instant::now(),
        }
    }

    /// When to look ([`ReaderWatch::stalled`]).
    pub(crate) fn deadline(&self) -> tokio::time::Instant {
        self.since + UNREAD_AFTER_STOP
    }

    /// The reader took something: the wait starts over.
    pub(crate) fn taken(&mut self) {
        self.since = tokio::time::Instant::now();
    }

    /// At the deadline: whether nothing was written since the watch began or last started
    /// over; when something was, it starts over.
    pub(crate) fn stalled(&mut self) -> bool {
        let written = output_written();
        if written <= self.seen {
            return true;
        }
        self.seen = written;
        self.taken();
        false
    }
}

/// The one way `lanes` waits for its last output (grouped blocks, `--json` records, the
/// writer threads): for `work` to finish, however long a reader takes, until a stop signal
/// comes; from then on (at once when already `stopping`), for at most [`FORCED_WRITE_WAIT`]
/// more; `stopping` is then set, so that the waits after this one are short too. When a stop
/// signal was already taken in the run (lanes was stopped, and its jobs have ended), `work`
/// is waited for while lanes' stdout or stderr takes something at least every
/// [`UNREAD_AFTER_STOP`] ([`output_written`]), then given up as after a signal. Returns what
/// `work` gave, or `None` when it was given up (a reader that stopped reading would otherwise
/// keep `lanes` waiting for ever).
pub(crate) async fn until_stopped<F: std::future::Future>(
    work: F,
    stopping: &mut bool,
    signals: &mut Option<StopSignals>,
) -> Option<F::Output> {
    tokio::pin!(work);
    if !*stopping {
        let mut watch = signals
            .as_ref()
            .is_some_and(StopSignals::any_taken)
            .then(ReaderWatch::new);
        loop {
            tokio::select! {
                done = &mut work => return Some(done),
                Some(_) = next_signal(signals) => {
                    *stopping = true;
                    break;
                }
                () = super::sleep_until_opt(watch.as_ref().map(ReaderWatch::deadline)) => {
                    if watch.as_mut().is_some_and(ReaderWatch::stalled) {
                        *stopping = true;
                        return None;
                    }
                }
            }
        }
    }
    tokio::time::timeout(FORCED_WRITE_WAIT, work).await.ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stop_signals_there_at_once_come_in_the_order_they_arrived() {
        // In a thread of its own, signals sent to that thread alone, after the handlers stand.
        std::thread::spawn(|| {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            runtime.block_on(async {
                let mut signals = StopSignals::install(true).unwrap();
                let send = |signal: Signal| {
                    // SAFETY: signals this thread, where a handler of the runtime stands.
                    let sent = unsafe { libc::pthread_kill(libc::pthread_self(), signal as i32) };
                    assert_eq!(sent, 0);
                };
                for round in 0..20 {
                    let pair = if round % 2 == 0 {
                        [Signal::SIGHUP, Signal::SIGTERM]
                    } else {
                        [Signal::SIGTERM, Signal::SIGHUP]
                    };
                    // Both delivered before the event loop looks: as when it was busy.
                    send(pair[0]);
                    send(pair[1]);
                    let got = [signals.next().await, signals.next().await];
                    assert_eq!(got, pair, "round {round}");
                }
            });
        })
        .join()
        .unwrap();
    }

    #[test]
    fn stop_signals_pending_while_blocked_are_taken_once_in_delivery_order() {
        // In a thread of its own, the signals sent to that thread alone: pending there, they
        // are dropped with it whatever happens, and reach no other test.
        std::thread::spawn(|| {
            let mut set = SigSet::empty();
            for signal in [Signal::SIGTERM, Signal::SIGINT, Signal::SIGHUP] {
                set.add(signal);
            }
            set.thread_block().unwrap();
            for signal in [Signal::SIGTERM, Signal::SIGINT, Signal::SIGHUP] {
                // SAFETY: signals this thread, which blocks `signal`.
                let sent =
                    unsafe { libc::pthread_kill(libc::pthread_self(), signal as libc::c_int) };
                assert_eq!(sent, 0);
            }
            let taken: Vec<Signal> = take_pending(false).into_iter().collect();
            assert_eq!(taken, [Signal::SIGINT, Signal::SIGTERM]);
            assert!(take_pending(false).is_empty(), "each is taken once");
            assert!(SigSet::thread_get_mask().unwrap().contains(Signal::SIGHUP));
            let mut pending: libc::sigset_t = unsafe { std::mem::zeroed() };
            // SAFETY: fills a set owned here.
            assert_eq!(unsafe { libc::sigpending(&mut pending) }, 0);
            // SAFETY: reads the set filled above.
            let hangup = unsafe { libc::sigismember(&pending, libc::SIGHUP) };
            assert_eq!(hangup, 1, "SIGHUP is left alone without its handler");
        })
        .join()
        .unwrap();
    }
}
