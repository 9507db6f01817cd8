//! `lanes`: run keyed shell jobs through per-key lanes. [`run`] is the whole program; the
//! binary only parses the command line and exits with what it returns.

#![warn(missing_docs, unreachable_pub)]

/// `eprintln!` that never panics: a line to `lanes`' stderr that cannot be written (a closed
/// pipe, a full disk, `ulimit -f`) is dropped, as output that cannot be written is. `eprintln!`
/// panics then, and on a writer thread that ended `lanes` with status 101. The line is
/// formatted first and written whole, with one `write`: formatted straight into the unbuffered
/// stderr, each of its pieces was a `write` of its own, and a line written meanwhile by
/// another thread (the sink of lanes' stderr) could land in the middle of it.
macro_rules! eprintln {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        let mut line = format!($($arg)*);
        line.push('\n');
        let _ = std::io::stderr().lock().write_all(line.as_bytes());
    }};
}

pub(crate) mod arg_limit;
pub mod cli;
pub(crate) mod closed_stdin;
pub(crate) mod config;
pub(crate) mod containing_dir;
pub mod core;
pub(crate) mod count;
pub(crate) mod descriptors;
pub(crate) mod dry_run;
pub(crate) mod duration;
pub mod exit;
pub(crate) mod file_lock;
#[cfg(test)]
mod generate;
pub(crate) mod input;
pub(crate) mod key_template;
#[cfg(test)]
mod man_sections;
pub(crate) mod output;
pub(crate) mod placeholder;
pub(crate) mod plural;
pub(crate) mod report;
pub(crate) mod resources;
pub(crate) mod resume;
mod run;
pub(crate) mod serve;
pub mod settings;
pub(crate) mod shell;
pub(crate) mod template;
pub(crate) mod timeline;
pub mod trailing_command;

pub use run::{run, run_task};

/// Takes the signals `lanes` handles over from what it inherited: caught, then blocked, then
/// set to their default actions, with none lost or fatal meanwhile (see [`prepare_process`]):
/// for the binary's first instruction, an ELF constructor.
pub fn block_handled_signals() {
    shell::signal::hold_early();
    output::sink::note_closed_stdout();
    closed_stdin::note();
}

/// Process-wide set-up that must happen before any thread starts; returns whether SIGHUP was
/// ignored at start (`nohup`). The signals `lanes` handles are blocked first, until their
/// handlers stand, so that one that comes early waits ([`shell::signal`]); inherited ignored
/// signals are reset ([`shell::unix::reset_ignored_signals`]), and the signals whose default
/// action would end `lanes` without stopping its jobs are ignored or blocked
/// ([`shell::signal::disarm_harmless`]). SIGCHLD and SIGTSTP are blocked too, and read by the
/// event loop from `signalfd`s ([`shell::signal::hold_watched`]).
pub fn prepare_process() -> bool {
    shell::signal::block_handled();
    shell::unix::use_one_malloc_arena();
    let hangup_ignored = shell::unix::reset_ignored_signals();
    shell::signal::disarm_harmless();
    shell::signal::hold_watched();
    shell::unix::close_inherited_descriptors_on_exec();
    shell::unix::raise_descriptor_limit();
    shell::unix::become_subreaper();
    hangup_ignored
}

/// After a run: when SIGINT stopped it (status 130), ends the process by SIGINT instead of
/// returning (see [`shell::signal::die_by_sigint`]); else returns at once.
pub fn end_by_sigint_if_it_stopped_the_run(code: u8) {
    if code == exit::for_signal(nix::sys::signal::Signal::SIGINT as i32) {
        use std::io::Write as _;
        let _ = std::io::stdout().flush();
        shell::signal::die_by_sigint();
    }
}

/// Process-wide set-up for a task (`lanes submit`, `lanes locks`, …: see [`run_task`]),
/// which starts no job: the signals whose default action would end `lanes` are ignored or
/// blocked as in a run, and the signals `lanes` handles are unblocked, so that a stop signal ends the task at
/// once. A run's other set-up (resetting inherited dispositions for jobs, descriptors,
/// subreaper) is for jobs and is skipped.
pub fn prepare_task_process() {
    shell::unix::use_one_malloc_arena();
    shell::signal::disarm_harmless();
    shell::signal::unblock_handled();
}

/// What `lanes` says of the error it ends on: the error and its causes (`{:#}`), its control,
/// bidi and invisible characters escaped (`\u{1b}`) but for line breaks, and, when it was a
/// shortage of descriptors wherever it struck and does not say so already, the way out (raise
/// `ulimit -n`).
pub fn error_message(err: &anyhow::Error) -> String {
    // What it quotes of a manifest, an argument or a file (a field's name, a value) shown with
    // its control, bidi and invisible characters escaped, as keys are: an error never moves
    // the cursor or reorders the line, and `cmd\u{200b}` does not look like `cmd`.
    let text = output::framing::escape_controls_by_line(&format!("{err:#}"));
    if descriptors::ran_out(err.as_ref()) && !text.contains("ulimit -n") {
        format!("{text} (raise `ulimit -n`)")
    } else {
        text
    }
}

/// Makes a panic (a bug in `lanes`) print one line naming where it happened, without a raw
/// backtrace (unless `RUST_BACKTRACE` asks for one); the process then exits with status 101
/// ([`exit::INTERNAL_ERROR`]): the main thread's panic unwinds to that end, and a panic on any
/// other thread (a spawning thread, the input's) ends the process from the hook, since the run
/// would otherwise wait forever for what that thread was doing.
pub fn report_panics_briefly() {
    let default = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        if std::env::var_os("RUST_BACKTRACE").is_some_and(|v| v != "0") {
            default(info);
        } else {
            let message = info
                .payload()
                .downcast_ref::<&str>()
                .map(|s| (*s).to_owned())
                .or_else(|| info.payload().downcast_ref::<String>().cloned())
                .unwrap_or_default();
            let place = info
                .location()
                .map(|l| format!(" at {}:{}", l.file(), l.line()))
                .unwrap_or_default();
            eprintln!("lanes: internal error{place}: {message} (a bug in lanes; please report it)");
        }
        if std::thread::current().name() != Some("main") {
            std::process::exit(i32::from(exit::INTERNAL_ERROR));
        }
    }));
}
