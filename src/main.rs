//! The `lanes` binary: parse the command line, run, exit.

use std::process::ExitCode;

fn main() -> ExitCode {
    let hangup_ignored = lanes::prepare_process();
    let cli = lanes::trailing_command::parse_args(std::env::args_os());
    match lanes::run(cli, hangup_ignored) {
        Ok(code) => ExitCode::from(code),
        Err(err) => {
            eprintln!("lanes: {err:#}");
            ExitCode::from(lanes::exit::USAGE)
        }
    }
}
