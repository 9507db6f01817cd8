//! Service mode: `lanes serve` listens on a Unix socket instead of reading stdin and runs until
//! `lanes drain`, `lanes close` or a stop signal; `lanes submit`, `cancel`, `status`, `set`,
//! `drain` and `close` are its clients. The scheduling stays the core's; the event loop
//! (`shell/driver.rs`) answers each request.
//!
//! - [`protocol`]: the JSON Lines requests and answers, version 1;
//! - [`socket`]: where the socket lives and who may connect (`SO_PEERCRED`);
//! - [`server`]: the connections, handing requests to the event loop;
//! - [`journal`]: what was admitted, started and recorded, for a restart after a crash;
//! - [`client`]: the client commands.

pub(crate) mod client;
pub(crate) mod journal;
pub(crate) mod protocol;
pub(crate) mod server;
pub(crate) mod socket;

/// What a service run starts with: its socket's calls, its journal and what an earlier server
/// left in it.
pub(crate) struct ServiceStart {
    /// The socket, being listened on.
    pub listening: server::Listening,
    /// The journal, open for appending.
    pub journal: journal::Journal,
    /// The jobs an earlier server left without a record, and its last seq.
    pub recovered: journal::Recovered,
    /// `--requeue-lost`.
    pub requeue_lost: bool,
}
