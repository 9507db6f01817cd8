//! Job output on its way out: line framing, grouped capture, per-job result files and the
//! writer threads.

pub mod blocks;
pub mod capture;
pub mod framing;
pub mod pump;
pub mod results;
pub mod sink;
