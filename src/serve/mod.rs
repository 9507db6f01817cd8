//! Service mode: `lanes serve` listens on a Unix socket instead of reading stdin and runs until
//! `lanes drain`, `lanes close` or a stop signal; `lanes submit`, `cancel`, `status`, `set`,
//! `drain` and `close` are its clients. The scheduling stays the core's; the event loop
//! (`shell/driver.rs`) answers each request.
//!
//! - [`protocol`]: the JSON Lines requests and answers, version 1;
//! - [`socket`]: where the socket lives and who may connect (`SO_PEERCRED`);
//! - [`server`]: the connections, handing requests to the event loop;
//! - [`client`]: the client commands.

pub(crate) mod client;
pub(crate) mod protocol;
pub(crate) mod server;
pub(crate) mod socket;
