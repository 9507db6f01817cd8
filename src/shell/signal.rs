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
