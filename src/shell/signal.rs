//! Stop signals to `lanes`: SIGINT, SIGTERM and SIGHUP as one stream. The first asks for a
//! graceful shutdown (forward, grace period, SIGKILL); any later one forces it (SIGKILL now).

use nix::sys::signal::Signal;
use tokio::signal::unix::{signal, Signal as Stream, SignalKind};

/// How hard a stop signal asks `lanes` to stop. Ordered: a later, more severe level wins.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum ShutdownLevel {
    /// Keep running.
    Running,
    /// Stop intake, forward the signal to every running job's group, SIGKILL after the grace.
    Graceful,
    /// SIGKILL every running job's group at once.
    Forced,
}

/// The three stop signals, merged.
pub struct StopSignals {
    interrupt: Stream,
    terminate: Stream,
    /// `None` when SIGHUP was ignored at start (`nohup`): it stays ignored.
    hangup: Option<Stream>,
    received: usize,
}

impl StopSignals {
    /// Installs the handlers; SIGHUP's only when `with_hangup`. Must run inside the tokio
    /// runtime.
    ///
    /// # Errors
    /// When a handler cannot be installed.
    pub fn install(with_hangup: bool) -> std::io::Result<Self> {
        Ok(StopSignals {
            interrupt: signal(SignalKind::interrupt())?,
            terminate: signal(SignalKind::terminate())?,
            hangup: if with_hangup {
                Some(signal(SignalKind::hangup())?)
            } else {
                None
            },
            received: 0,
        })
    }

    /// Waits for the next stop signal; returns it and the level it raises the shutdown to.
    pub async fn next(&mut self) -> (Signal, ShutdownLevel) {
        let signal = tokio::select! {
            _ = self.interrupt.recv() => Signal::SIGINT,
            _ = self.terminate.recv() => Signal::SIGTERM,
            Some(_) = recv_optional(&mut self.hangup) => Signal::SIGHUP,
        };
        self.received += 1;
        let level = if self.received == 1 {
            ShutdownLevel::Graceful
        } else {
            ShutdownLevel::Forced
        };
        (signal, level)
    }
}

/// The next stop signal and the level it raises the shutdown to; never, without handlers.
pub async fn next_signal(signals: &mut Option<StopSignals>) -> Option<(Signal, ShutdownLevel)> {
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
