//! `lanes`: run keyed shell jobs through per-key lanes. [`run`] is the whole program; the
//! binary only parses the command line and exits with what it returns.

#![warn(missing_docs, unreachable_pub)]

pub mod cli;
pub(crate) mod config;
pub mod core;
pub(crate) mod dry_run;
pub(crate) mod duration;
pub mod exit;
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
pub(crate) mod resume;
mod run;
pub mod settings;
pub(crate) mod shell;
pub(crate) mod template;
pub mod trailing_command;

pub use run::run;

/// Process-wide set-up that must happen before any thread starts; returns whether SIGHUP was
/// ignored at start (`nohup`). See [`shell::unix::reset_ignored_signals`].
pub fn prepare_process() -> bool {
    shell::unix::use_one_malloc_arena();
    let hangup_ignored = shell::unix::reset_ignored_signals();
    shell::unix::close_inherited_descriptors_on_exec();
    shell::unix::become_subreaper();
    hangup_ignored
}
