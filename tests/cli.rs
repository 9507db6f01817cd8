//! Integration tests of the `lanes` binary against the behaviour contract (`SPEC.md`): every
//! test starts the real binary, runs real shell jobs and checks exit status, output, the JSON
//! Lines report and that no process is left behind.
//!
//! The modules live in `tests/cli/`; `support` holds the runner and the report types.

#[path = "cli/support.rs"]
mod support;

#[path = "cli/execution.rs"]
mod execution;
#[path = "cli/exit_status.rs"]
mod exit_status;
#[path = "cli/input.rs"]
mod input;
#[path = "cli/lanes.rs"]
mod lanes;
#[path = "cli/manifest.rs"]
mod manifest;
#[path = "cli/output.rs"]
mod output;
#[path = "cli/queue.rs"]
mod queue;
#[path = "cli/report.rs"]
mod report;
#[path = "cli/signals.rs"]
mod signals;
#[path = "cli/timeouts.rs"]
mod timeouts;

// Reports with superseded_by, batch or skipped, and event files, for the modules below.
#[path = "cli/records.rs"]
mod records;

#[path = "cli/backpressure.rs"]
mod backpressure;
#[path = "cli/batching.rs"]
mod batching;
#[path = "cli/examples.rs"]
mod examples;
#[path = "cli/hygiene.rs"]
mod hygiene;
#[path = "cli/outputs.rs"]
mod outputs;
#[path = "cli/policies.rs"]
mod policies;
#[path = "cli/resume.rs"]
mod resume;
#[path = "cli/slurm.rs"]
mod slurm;
