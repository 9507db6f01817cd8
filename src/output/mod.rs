//! Job output on its way to lanes' own stdout and stderr: line framing and the writer threads.

pub mod framing;
pub mod sink;
