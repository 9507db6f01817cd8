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
    let hangup_ignored = lanes::prepare_process();
    lanes::report_panics_briefly();
    let cli = lanes::trailing_command::parse_args(std::env::args_os());
    match lanes::run(cli, hangup_ignored) {
        Ok(code) => ExitCode::from(code),
        Err(err) => {
            eprintln!("lanes: {err:#}");
            ExitCode::from(lanes::exit::USAGE)
        }
    }
}
