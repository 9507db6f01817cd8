//! Integration tests of the `lanes` binary against the behaviour contract (`SPEC.md`): every
//! test starts the real binary, runs real shell jobs and checks exit status, output, the JSON
//! Lines report and that no process is left behind.
//!
//! `support` holds the runner and the report types.

mod support;

mod execution;
mod exit_status;
mod input;
mod lanes;
mod limits;
mod manifest;
mod output;
mod queue;
mod report;
mod signals;
mod timeouts;

// Reports with superseded_by, batch or skipped, and event files, for the modules below.
mod records;

mod arguments;
mod backpressure;
mod batching;
mod containment;
mod coordinate;
mod dry_run;
mod events_schema;
mod examples;
mod flaky;
mod fleet;
mod hints;
mod hygiene;
mod job_control;
mod lock_dir;
mod outputs;
mod policies;
mod readme_table;
mod resources;
mod resume;
mod serve;
mod slurm;
mod terminal;
mod timeline;
