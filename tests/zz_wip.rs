//! Temporary: compiles the new modules apart from tests/cli.rs while they are written.
#![allow(dead_code)]
#[path = "cli/support.rs"]
mod support;
#[path = "cli/records.rs"]
mod records;
#[path = "cli/policies.rs"]
mod policies;
#[path = "cli/batching.rs"]
mod batching;
#[path = "cli/outputs.rs"]
mod outputs;
#[path = "cli/resume.rs"]
mod resume;
