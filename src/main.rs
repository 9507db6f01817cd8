//! The `lanes` binary: parse the command line, run, exit.

use std::process::ExitCode;

/// Blocks the signals lanes handles before any other code of the program runs (an ELF
/// constructor, run as soon as the dynamic loader is done, before Rust's own start-up), so
/// that a Ctrl-C in lanes' first moments waits for the handlers instead of killing it.
#[used]
#[link_section = ".init_array"]
static BLOCK_HANDLED_SIGNALS: extern "C" fn() = block_handled_signals;

extern "C" fn block_handled_signals() {
    lanes::block_handled_signals();
}

fn main() -> ExitCode {
    let argv: Vec<std::ffi::OsString> = std::env::args_os().collect();
    lanes::report_panics_briefly();
    // A task (`lanes submit …`) starts no job, so it needs neither a run's set-up nor its
    // options: its start-up is a client's whole cost.
    if let Some(task) = lanes::trailing_command::parse_task(&argv) {
        lanes::prepare_task_process();
        return finish(lanes::run_task(task));
    }
    let hangup_ignored = lanes::prepare_process();
    let cli = lanes::trailing_command::parse_args(argv);
    let result = lanes::run(cli, hangup_ignored);
    if let Ok(code) = result {
        lanes::end_by_sigint_if_it_stopped_the_run(code);
    }
    finish(result)
}

fn finish(result: anyhow::Result<u8>) -> ExitCode {
    match result {
        Ok(code) => ExitCode::from(code),
        Err(err) => {
            // Not `eprintln!`, which panics when stderr cannot be written.
            use std::io::Write as _;
            let _ = writeln!(std::io::stderr(), "lanes: {}", lanes::error_message(&err));
            ExitCode::from(lanes::exit::USAGE)
        }
    }
}
