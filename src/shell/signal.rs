//! Stop signals to `lanes`: SIGINT, SIGTERM and SIGHUP as one stream. What each means (the
//! first a graceful shutdown, any later one SIGKILL now) is the core's decision
//! ([`crate::core::Scheduler::signal_received`]).

use nix::sys::signal::Signal;
use tokio::signal::unix::{signal, Signal as Stream, SignalKind};

/// The three stop signals, merged.
pub(crate) struct StopSignals {
    interrupt: Stream,
    terminate: Stream,
    /// `None` when SIGHUP was ignored at start (`nohup`): it stays ignored.
    hangup: Option<Stream>,
}

impl StopSignals {
    /// Installs the handlers; SIGHUP's only when `with_hangup`. Must run inside the tokio
    /// runtime.
    ///
    /// # Errors
    /// When a handler cannot be installed.
    pub(crate) fn install(with_hangup: bool) -> std::io::Result<Self> {
        Ok(StopSignals {
            interrupt: signal(SignalKind::interrupt())?,
            terminate: signal(SignalKind::terminate())?,
            hangup: if with_hangup {
                Some(signal(SignalKind::hangup())?)
            } else {
                None
            },
        })
    }

    /// Waits for the next stop signal.
    pub(crate) async fn next(&mut self) -> Signal {
        tokio::select! {
            _ = self.interrupt.recv() => Signal::SIGINT,
            _ = self.terminate.recv() => Signal::SIGTERM,
            Some(_) = recv_optional(&mut self.hangup) => Signal::SIGHUP,
        }
    }
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

/// After a stop signal, how long output still on its way to lanes' stdout or stderr may take
/// to be written before lanes exits without it.
pub(crate) const FORCED_WRITE_WAIT: std::time::Duration = std::time::Duration::from_millis(500);

/// The one way `lanes` waits for its last output (grouped blocks, `--json` records, the
/// writer threads): for `work` to finish, however long a reader takes, until a stop signal
/// comes; from then on (at once when already `stopping`), for at most [`FORCED_WRITE_WAIT`]
/// more; `stopping` is then set, so that the waits after this one are short too. Returns
/// what `work` gave, or `None` when it was given up (a reader that stopped reading would
/// otherwise keep `lanes` waiting for ever).
pub(crate) async fn until_stopped<F: std::future::Future>(
    work: F,
    stopping: &mut bool,
    signals: &mut Option<StopSignals>,
) -> Option<F::Output> {
    tokio::pin!(work);
    if !*stopping {
        tokio::select! {
            done = &mut work => return Some(done),
            Some(_) = next_signal(signals) => *stopping = true,
        }
    }
    tokio::time::timeout(FORCED_WRITE_WAIT, work).await.ok()
}
