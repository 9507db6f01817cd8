//! Job output on its way out: line framing, grouped capture, per-job result files and the
//! writer threads, and the record files' writer threads.

pub(crate) mod blocks;
pub(crate) mod capture;
pub(crate) mod framing;
pub(crate) mod pump;
pub(crate) mod results;
pub(crate) mod sink;
pub(crate) mod spool;
