//! The trailing command, xargs-style: `lanes [OPTIONS] [--] COMMAND [ARGS…] [::: ARG…]`.
//!
//! The command line is split before clap sees it: options (with their values) go to clap; the
//! first word that is not an option starts the command, unless it is `-` or an existing file
//! (or a name ending in `.toml`), which is the FILE of jobs. After `--` the first word always
//! starts the command. `:::` ends the command; every word after it is an input argument
//! (GNU parallel). Which options take a value is read from the clap definition itself.

use std::ffi::OsString;
use std::path::{Path, PathBuf};

use clap::{CommandFactory, FromArgMatches};

use crate::cli::{Cli, Task};
use crate::template::shell_quote;

/// The command line split into what clap parses and what it does not.
#[derive(Debug, Default, PartialEq, Eq)]
pub(crate) struct Invocation {
    /// The program name, the options and their values, and FILE when one is given.
    pub options: Vec<OsString>,
    /// The trailing command's words.
    pub command: Option<Vec<String>>,
    /// The words after `:::`, as bytes (input, which need not be text).
    pub arguments: Option<Vec<Vec<u8>>>,
    /// The command came after `--` (so it cannot be a file of jobs).
    pub after_dashes: bool,
}

/// Parses the process's command line as [`Cli`], the trailing command and `:::` arguments
/// included, for a command line that names no task (those are [`parse_task`]'s). Like clap's
/// own `parse`, prints the error (with a hint) and exits with status 2 on a usage error, and
/// prints help or the version and exits 0 when asked.
pub fn parse_args(argv: impl IntoIterator<Item = OsString>) -> Cli {
    let mut argv: Vec<OsString> = argv.into_iter().collect();
    // `lanes help serve` is `lanes serve --help`.
    if argv.len() == 3 && argv[1] == "help" && argv[2] == "serve" {
        argv.truncate(1);
        argv.extend(["serve".into(), "--help".into()]);
    }
    // `lanes serve [OPTIONS]`: a run's options, its jobs from the socket.
    let serve = argv.get(1).is_some_and(|first| first == "serve");
    if serve {
        argv.remove(1);
    }
    let mut command = if serve {
        serve_command()
    } else {
        Cli::command()
    };
    // `lanes help [TASK]`: clap's help over the whole command line (it prints and exits). A
    // task's command line is [`parse_task`]'s.
    if !serve && argv.get(1).is_some_and(|first| first == "help") {
        let matches = command
            .try_get_matches_from_mut(argv)
            .unwrap_or_else(|err| exit_on(&err));
        return Cli::from_arg_matches(&matches).unwrap_or_else(|err| exit_on(&err));
    }
    // A directory is no FILE of jobs (`lanes test -x` in a tree with a `test/` directory).
    let invocation = match split(argv, &command, |path| path.exists() && !path.is_dir()) {
        Ok(invocation) => invocation,
        Err(message) => {
            // It quotes the words given (file names too): their control characters escaped.
            eprintln!(
                "error: {}",
                crate::output::framing::escape_controls(&message)
            );
            std::process::exit(i32::from(crate::exit::USAGE));
        }
    };
    let matches = match command.try_get_matches_from_mut(&invocation.options) {
        Ok(matches) => matches,
        Err(err) => {
            let unknown = err.kind() == clap::error::ErrorKind::UnknownArgument;
            if unknown {
                let hint = xargs_hint(&invocation.options);
                eprint!("{}", without_dash_dash_tip(&err, hint.is_some()));
                if let Some(hint) = hint {
                    eprintln!("{}", crate::output::framing::escape_controls(hint));
                }
                eprintln!("{UNKNOWN_ARGUMENT_HINT}");
                std::process::exit(i32::from(crate::exit::USAGE));
            }
            exit_on(&err);
        }
    };
    let mut cli = Cli::from_arg_matches(&matches).unwrap_or_else(|err| exit_on(&err));
    cli.trailing_command = invocation.command;
    cli.trailing_after_dashes = invocation.after_dashes;
    cli.arguments = invocation.arguments;
    cli.serve = serve;
    cli
}

/// The options of a run that `lanes serve` refuses (its jobs come from the socket; see
/// `config::check_serve`): left out of its help.
const REFUSED_BY_SERVE: [&str; 18] = [
    "file",
    "manifest",
    "arg_file",
    "null",
    "key",
    "dry_run",
    "strict",
    "resume",
    "lock_dir",
    "shared_max_concurrent",
    "coordinate",
    "namespace",
    "coordinate_records",
    "host_id",
    "no_null",
    "no_dry_run",
    "no_strict",
    "no_coordinate_records",
];

/// `lanes serve`'s command line: a run's options under a server's usage, description and
/// examples, without the options a server refuses.
fn serve_command() -> clap::Command {
    let mut command = Cli::command()
        .override_usage("lanes serve [OPTIONS]")
        .about(
            "Serve jobs submitted on a Unix socket (`lanes submit`, `cancel`, `status`, `set`, \
             `drain`, `close`) with a run's options, until `lanes drain`, `lanes close` or a \
             stop signal. See the README's \"Service mode\".",
        )
        .long_about(None)
        .after_help(
            "Examples:\n  lanes serve -j 4 --report served.jsonl &\n  lanes submit deploy-api -- \
             ./deploy.sh api\n  lanes status\n  lanes drain",
        );
    for id in REFUSED_BY_SERVE {
        if command.get_arguments().any(|arg| arg.get_id() == id) {
            command = command.mut_arg(id, |arg| arg.hide(true));
        }
    }
    // The tasks are not a server's.
    let tasks: Vec<String> = command
        .get_subcommands()
        .map(|task| task.get_name().to_owned())
        .collect();
    for task in tasks {
        command = command.mut_subcommand(task, |task| task.hide(true));
    }
    command.disable_help_subcommand(true)
}

/// Parses a task's command line (`lanes submit …`: its first word names a [`Task`]) with
/// only that task's definition. Building the run's hundred options too would be most of a
/// client command's start-up (about 1.8 ms of 3.7 for a `lanes submit` on a 2-CPU machine),
/// and building every task's, about 0.1 ms of 1.8 of a dynamic build. `None` when the first
/// word names no task (a run, `lanes serve`, `lanes help`). Usage errors and help are printed
/// as by [`parse_args`], with the same texts, and end the process.
pub fn parse_task(argv: &[OsString]) -> Option<Task> {
    let name = argv.get(1)?.to_str()?;
    let command = task_command(name)?;
    let matches = match command.try_get_matches_from(argv) {
        Ok(matches) => matches,
        Err(err) => {
            let hint = (err.kind() == clap::error::ErrorKind::UnknownArgument)
                .then(|| task_hint(name, &err))
                .flatten();
            let Some(hint) = hint else { exit_on(&err) };
            eprint!("{}", without_dash_dash_tip(&err, true));
            eprintln!("{}", crate::output::framing::escape_controls(&hint));
            std::process::exit(i32::from(crate::exit::USAGE));
        }
    };
    Some(Task::from_arg_matches(&matches).unwrap_or_else(|err| exit_on(&err)))
}

/// clap's error text (its commands are unstyled), with what it quotes of the command line (a
/// value, an unknown option) escaped as lanes escapes keys: an argument holding escape
/// sequences does not act on the terminal, nor vanish from the message through a pipe.
fn plain_error(err: &clap::Error) -> String {
    crate::output::framing::escape_controls_by_line(&err.render().ansi().to_string())
}

/// Ends the process on clap's `err`: help and the version as clap prints them (stdout,
/// status 0); a usage error as [`plain_error`] says it, on stderr, with clap's status (2).
fn exit_on(err: &clap::Error) -> ! {
    if !err.use_stderr() {
        err.exit();
    }
    eprint!("{}", plain_error(err));
    std::process::exit(err.exit_code());
}

/// What to write instead, for an argument a task does not take (`err`, clap's "unexpected
/// argument"): `lanes submit KEY echo hi` (the command needs `--` before it), `lanes submit
/// -j 2 …` (a run's option: the server's). `None` for a task without such a hint.
fn task_hint(name: &str, err: &clap::Error) -> Option<String> {
    if name != "submit" {
        return None;
    }
    let word = match err.get(clap::error::ContextKind::InvalidArg) {
        Some(clap::error::ContextValue::String(word)) => word.as_str(),
        _ => "",
    };
    Some(if word.starts_with('-') {
        format!(
            "hint: `{word}` is no option of `lanes submit`; a run's options (-j, --timeout, \
             ...) are given to `lanes serve`, and a command's own come after `--`: `lanes \
             submit KEY -- COMMAND [ARGS...]`"
        )
    } else {
        "hint: the command comes after `--`: `lanes submit KEY -- COMMAND [ARGS...]` (a single \
         word is shell text: `lanes submit KEY -- 'make && make test'`)"
            .to_owned()
    })
}

/// The task named `name` alone, under the settings of [`Cli`] that reach a task's parsing and
/// help; `None` when `name` names no task.
fn task_command(name: &str) -> Option<clap::Command> {
    use crate::cli::{
        CancelArgs, CloseArgs, DrainArgs, LocksArgs, SetArgs, StatusArgs, SubmitArgs, TimelineArgs,
    };
    use clap::Args as _;
    let (name, options): (&'static str, fn(clap::Command) -> clap::Command) = match name {
        "locks" => ("locks", LocksArgs::augment_args),
        "submit" => ("submit", SubmitArgs::augment_args),
        "cancel" => ("cancel", CancelArgs::augment_args),
        "status" => ("status", StatusArgs::augment_args),
        "set" => ("set", SetArgs::augment_args),
        "drain" => ("drain", DrainArgs::augment_args),
        "close" => ("close", CloseArgs::augment_args),
        "timeline" => ("timeline", TimelineArgs::augment_args),
        _ => return None,
    };
    Some(
        clap::Command::new("lanes")
            .styles(clap::builder::Styles::plain())
            .max_term_width(100)
            .args_override_self(true)
            .subcommand_required(true)
            .subcommand(options(clap::Command::new(name))),
    )
}

/// clap's "unexpected argument" error as [`plain_error`] says it, without the
/// tip it gives of an argument that begins with a dash ("to pass '-P' as a value, use '--
/// -P'"): after `--` lanes reads a command, which `-P` would then be; nor, when lanes has a
/// hint of its own (`hinted`), the one of a similar argument (`--joblog`: `--color`).
fn without_dash_dash_tip(err: &clap::Error, hinted: bool) -> String {
    let text = plain_error(err);
    let mut kept = String::with_capacity(text.len());
    let mut lines = text.split_inclusive('\n').peekable();
    while let Some(line) = lines.next() {
        if (line.contains("to pass '") && line.contains("as a value, use '-- "))
            || (hinted && line.contains("a similar argument exists"))
        {
            // The blank line before it stays; the one after it goes with it.
            if lines.peek().is_some_and(|next| next.trim().is_empty()) {
                lines.next();
            }
            continue;
        }
        kept.push_str(line);
    }
    kept
}

/// Printed after clap's "unexpected argument" error.
const UNKNOWN_ARGUMENT_HINT: &str = "hint: to run a command for each input line, put it after \
the options: `lanes [OPTIONS] -- COMMAND [ARGS...]`; its own options then belong to it";

/// What an xargs or GNU parallel option lanes does not take is here, for the first such
/// option in `options`.
fn xargs_hint(options: &[OsString]) -> Option<&'static str> {
    options.iter().skip(1).find_map(|option| {
        let option = option.to_str()?;
        let name = option.split('=').next()?;
        // `-P`, `-P4`.
        let procs = option
            .strip_prefix("-P")
            .is_some_and(|count| count.bytes().all(|b| b.is_ascii_digit()));
        // `-I{}`, `-I%`: the replacement string attached.
        let replace = option.len() > 2 && option.starts_with("-I");
        Some(match name {
            _ if procs => "hint: xargs' `-P N` is `-j N` here",
            _ if replace => {
                "hint: the argument is `{}` in the command (xargs' `-I {}`), appended when the \
                 command has none"
            }
            "--max-procs" => "hint: xargs' `-P N` is `-j N` here",
            "--jobs" => "hint: GNU parallel's `--jobs N` is `-j N` here",
            "--halt" | "--halt-on-error" => {
                "hint: GNU parallel's `--halt now,fail=1` is `--fail-fast` here (and \
                 `--halt soon,fail=1` too: lanes stops the running jobs)"
            }
            "--joblog" => {
                "hint: GNU parallel's `--joblog FILE` is `--report FILE` here (JSON Lines, one \
                 record per job)"
            }
            "-k" => "hint: GNU parallel's `-k` is `--output grouped --keep-order` here",
            "--tag" | "--tagstring" | "--line-buffer" | "--lb" => {
                "hint: GNU parallel's `--tag` and `--line-buffer` are lanes' default output \
                 (`--output prefixed`: each whole line starts with its job's key)"
            }
            "-u" | "--ungroup" => "hint: GNU parallel's `--ungroup` is `--output raw` here",
            "--group" => "hint: GNU parallel's `--group` is `--output grouped` here",
            "--bar" | "--eta" => {
                "hint: GNU parallel's `--bar` and `--eta` are the live display here (drawn on a \
                 terminal by default; `--progress always` elsewhere): done/total, running, queued"
            }
            "-X" | "-m" | "--xargs" => {
                "hint: GNU parallel's `-X` and `-m` are `--batch-size N` (or `--batch-bytes N`) \
                 here: up to N of a key's arguments in one job"
            }
            "-s" | "--max-chars" => {
                "hint: xargs' `-s N` is `--batch-bytes N` here (with `--batch-size`, or alone)"
            }
            "-r" | "--no-run-if-empty" => {
                "hint: xargs' `-r` is what lanes does: empty input runs nothing (exit 0)"
            }
            "-d" | "--delimiter" => {
                "hint: records end at a newline, or at a NUL byte with `-0` (xargs' `-0`); \
                 other delimiters are not taken"
            }
            "--verbose" | "-t" => {
                "hint: every job's command is in its record (`--report FILE`, or `--json`); \
                 `--dry-run` prints them without running"
            }
            "--resume-failed" => {
                "hint: GNU parallel's `--resume-failed` is `--resume REPORT` here (it runs again \
                 every job that did not succeed)"
            }
            "-n" | "--max-args" | "-L" | "--max-lines" => {
                "hint: one argument per job is what lanes does (xargs' `-n 1`); \
                 `--batch-size N` runs up to N of a key's arguments as one job"
            }
            "-I" | "-i" | "--replace" => {
                "hint: the argument is `{}` in the command (xargs' `-I {}`), appended when the \
                 command has none"
            }
            _ => return None,
        })
    })
}

/// Splits `argv` (program name first). `exists` tells whether a path names a file.
///
/// # Errors
/// `--` with nothing after it; a second word after a FILE that exists (is it the FILE or a
/// command?); a command word that is not UTF-8.
pub(crate) fn split(
    argv: Vec<OsString>,
    command: &clap::Command,
    exists: impl Fn(&Path) -> bool,
) -> Result<Invocation, String> {
    let mut words = argv.into_iter();
    let mut invocation = Invocation {
        options: words.next().into_iter().collect(),
        ..Invocation::default()
    };
    let mut file: Option<OsString> = None;
    let mut forced = false;
    let mut rest: Vec<OsString> = Vec::new();
    while let Some(word) = words.next() {
        let text = word.to_string_lossy();
        if text == "--" {
            forced = true;
            rest.extend(words.by_ref());
            break;
        }
        if text == ":::" {
            rest.push(word);
            rest.extend(words.by_ref());
            break;
        }
        if let Some(long) = text.strip_prefix("--") {
            let takes_value = !long.contains('=') && long_takes_value(command, long);
            invocation.options.push(word);
            if takes_value {
                invocation.options.extend(words.next());
            }
            continue;
        }
        if text.len() > 1 && text.starts_with('-') {
            let shorts: Vec<char> = text[1..].chars().collect();
            let mut takes_next = false;
            for (i, &short) in shorts.iter().enumerate() {
                if short_takes_value(command, short) {
                    takes_next = i + 1 == shorts.len();
                    break;
                }
            }
            invocation.options.push(word);
            if takes_next {
                invocation.options.extend(words.next());
            }
            continue;
        }
        // The first word that is not an option.
        if let Some(file) = file
            .as_ref()
            .filter(|file| crate::input::manifest::is_manifest_name(Path::new(file)))
        {
            let file = file.to_string_lossy();
            return Err(format!(
                "`{file}` is a manifest, so `{text}` is not expected after it: a manifest's \
                 jobs have their own commands (its `command` setting, a template, gives one to \
                 every job, each job's `cmd` its argument)"
            ));
        }
        if file.as_ref().is_some_and(|file| file == "-") {
            return Err(format!(
                "`-` is stdin, read as jobs, so `{text}` is not expected after it; to run \
                 `{text}` for each line of stdin (xargs' `-a -`), write `lanes [OPTIONS] -a - {} \
                 ...`",
                suggested_word(&text),
            ));
        }
        if let Some(file) = &file {
            let file = file.to_string_lossy();
            return Err(format!(
                "`{file}` is an existing file, read as jobs, so `{text}` is not expected after \
                 it; to run `{text}` for each line of `{file}` (xargs' `-a`, GNU parallel's \
                 `::::`), write `lanes [OPTIONS] -a {} {} ...`; to run `{file}` as a \
                 command for each input line, write `lanes [OPTIONS] -- {} {} ...`",
                suggested_word(&file),
                suggested_word(&text),
                runnable(&file),
                suggested_word(&text),
            ));
        }
        let path = Path::new(&word);
        let is_file = text == "-" || exists(path) || crate::input::manifest::is_manifest_name(path);
        if is_file
            && text != "-"
            && !text.contains('/')
            && is_program_on_path(&text, std::env::var_os("PATH").as_deref())
        {
            return Err(format!(
                "`{text}` is both a file here and a command on PATH: write `./{text}` to read \
                 the file as jobs, or `lanes [OPTIONS] -- {text} ...` to run the command for \
                 each input line"
            ));
        }
        if let Some(program) = is_file.then(|| program_kind(path)).flatten() {
            // Quoted where a shell would need it, so that the form can be pasted back.
            let after: String = words
                .map(|word| format!(" {}", suggested_word(&word.to_string_lossy())))
                .collect();
            return Err(format!(
                "`{text}` is {program}, not a file of jobs: to run it for each \
                 input line, write `lanes [OPTIONS] -- {}{after}`; to read its lines as \
                 KEY<TAB>COMMAND jobs all the same, give it on stdin (`lanes < {text}`)",
                runnable(&text)
            ));
        }
        if is_file {
            invocation.options.push(word.clone());
            file = Some(word);
            continue;
        }
        rest.push(word);
        rest.extend(words.by_ref());
        break;
    }
    let mut rest = rest.into_iter();
    let mut command_words = Vec::new();
    let mut arguments = None;
    while let Some(word) = rest.next() {
        if word == ":::" {
            // Input, as bytes: one that is not UTF-8 is an invalid record, as on stdin.
            let list: Vec<Vec<u8>> = rest
                .by_ref()
                .map(std::os::unix::ffi::OsStringExt::into_vec)
                .collect();
            if let Some(linked) = list
                .iter()
                .find(|word| [&b":::+"[..], b"::::+"].contains(&word.as_slice()))
            {
                return Err(linked_arguments(&String::from_utf8_lossy(linked)));
            }
            if list.iter().any(|word| word == b":::" || word == b"::::") {
                return Err(
                    "one `:::` list only: GNU parallel runs every combination of several lists, \
                     lanes one job per argument of one list"
                        .to_owned(),
                );
            }
            arguments = Some(list);
            break;
        }
        if word == ":::+" || word == "::::+" {
            return Err(linked_arguments(&word.to_string_lossy()));
        }
        if word == "::::" {
            return Err(
                "`::::` (arguments from a file) is written `-a FILE` (`--arg-file`) here"
                    .to_owned(),
            );
        }
        let word = word
            .into_string()
            .map_err(|word| format!("{word:?} is not valid UTF-8: a command must be text"))?;
        command_words.push(word);
    }
    if forced && command_words.is_empty() {
        return Err(if arguments.is_some() {
            "no command between `--` and `:::`: give the command to run for each argument \
             there (`lanes [OPTIONS] -- COMMAND [ARGS...] ::: ARG...`), or leave `--` out to \
             run each argument as a command (`lanes ::: 'echo a' 'echo b'`)"
        } else {
            "nothing after `--`: give the command to run for each input line \
             (`lanes [OPTIONS] -- COMMAND [ARGS...]`)"
        }
        .to_owned());
    }
    if let (Some(file), false) = (&file, command_words.is_empty()) {
        return Err(format!(
            "`{}` is an existing file, read as jobs, and `{}` a command for them: give one or \
             the other (write `lanes [OPTIONS] -- COMMAND [ARGS...]` to run a command)",
            file.to_string_lossy(),
            command_words.join(" "),
        ));
    }
    invocation.command = (!command_words.is_empty()).then_some(command_words);
    invocation.after_dashes = forced;
    invocation.arguments = arguments;
    Ok(invocation)
}

/// `path` as a shell runs it: as it is with a `/` in it, else from the current directory
/// (`./proc.sh`: a bare name is looked for on `PATH`); quoted where a shell needs it.
fn runnable(path: &str) -> String {
    if path.contains('/') {
        suggested_word(path)
    } else {
        suggested_word(&format!("./{path}"))
    }
}

/// The refusal of GNU parallel's linked arguments (`:::+`, `::::+`), which have no form here.
fn linked_arguments(word: &str) -> String {
    format!(
        "`{word}` (GNU parallel's linked arguments) has no form here: lanes takes one list; put \
         the linked values on one line and split it with --colsep (`lanes --colsep , -a \
         pairs.csv -- cmd {{1}} {{2}}`)"
    )
}

/// `word` as it is written in a suggested command line: as it is where a shell leaves it one
/// word unchanged (letters, digits, `_@%+=:,./-`, and lanes' `{…}` placeholders), else
/// single-quoted ([`crate::template::shell_quote`]).
fn suggested_word(word: &str) -> String {
    let plain = !word.is_empty()
        && word
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "_@%+=:,./-{}".contains(c));
    if plain {
        word.to_owned()
    } else {
        crate::template::shell_quote(word)
    }
}

/// What the regular file at `path` is when it is a program given where xargs takes its
/// command, not a file of jobs: `a script (`#!…`)` when it starts with a `#!` line whose
/// program is not lanes ([`runs_lanes`]; a job file may start `#!/usr/bin/env lanes`: `#`
/// lines are comments), `an ELF executable` (its first bytes `\x7fELF`), `a binary
/// executable` (an execute bit, and a NUL byte in its first 256 bytes, which no text has), or
/// `an executable file` (an execute bit and no `#!` line: a shell runs it as a script).
fn program_kind(path: &Path) -> Option<String> {
    use std::io::Read as _;
    use std::os::unix::fs::PermissionsExt as _;
    // Looked at before it is opened: opening a FIFO would wait for its writer, and take
    // what the writer wrote before the open that reads it.
    let meta = std::fs::metadata(path).ok()?;
    if !meta.is_file() {
        return None;
    }
    let file = std::fs::File::open(path).ok()?;
    let mut head = Vec::with_capacity(256);
    file.take(256).read_to_end(&mut head).ok()?;
    if head.starts_with(b"\x7fELF") {
        return Some("an ELF executable".to_owned());
    }
    if meta.permissions().mode() & 0o111 != 0 && head.contains(&0) {
        return Some("a binary executable".to_owned());
    }
    let line = head.split(|&b| b == b'\n').next()?;
    let line = String::from_utf8_lossy(line).trim_end().to_owned();
    let Some(interpreter) = line.strip_prefix("#!") else {
        // Without a `#!` line, a shell runs an executable file as its own script.
        return (meta.permissions().mode() & 0o111 != 0)
            .then(|| "an executable file (a script without a `#!` line)".to_owned());
    };
    (!runs_lanes(interpreter)).then(|| format!("a script (`{line}`)"))
}

/// Whether a `#!` line's interpreter (the text after `#!`) is lanes: `lanes` by name or path,
/// or `env` (its options and `NAME=VALUE` words passed over) running it.
fn runs_lanes(interpreter: &str) -> bool {
    let is = |word: &str, name: &str| Path::new(word).file_name().is_some_and(|f| f == name);
    let mut words = interpreter.split_whitespace();
    match words.next() {
        Some(program) if is(program, "lanes") => true,
        Some(program) if is(program, "env") => words
            .find(|word| !word.starts_with('-') && !is_assignment(word))
            .is_some_and(|word| is(word, "lanes")),
        _ => false,
    }
}

/// Whether `name` (no `/` in it) is an executable file in a directory of `path` (`PATH`):
/// what the shell would run for it (a file without an execute bit it skips).
fn is_program_on_path(name: &str, path: Option<&std::ffi::OsStr>) -> bool {
    program_on_path(name, path).is_some()
}

/// The file the shell would run for `name` (no `/` in it): the first executable file of that
/// name in a directory of `path` (`PATH`), a file without an execute bit passed over.
fn program_on_path(name: &str, path: Option<&std::ffi::OsStr>) -> Option<PathBuf> {
    use std::os::unix::fs::PermissionsExt as _;
    std::env::split_paths(path.unwrap_or_default())
        .map(|dir| dir.join(name))
        .find(|file| {
            std::fs::metadata(file)
                .is_ok_and(|meta| meta.is_file() && meta.permissions().mode() & 0o111 != 0)
        })
}

/// Checks that the program a trailing command names can be found, so that a mistyped FILE of
/// jobs is not run as a command for every input line. One word with shell syntax in it is
/// shell text and is not checked; nor are shell builtins. `after_dashes`: the command came
/// after `--`, so the word was never a file of jobs.
///
/// # Errors
/// The program is a path that is not an executable file (missing, a directory, no execute
/// bit), or is not on `PATH`.
pub(crate) fn check_program(
    words: &[String],
    path: Option<&std::ffi::OsStr>,
    after_dashes: bool,
) -> Result<(), String> {
    if words.first().is_some_and(|word| word.trim().is_empty()) {
        return Err(
            "the trailing command's first word is empty or blank: give the command \
                    to run for each input line"
                .to_owned(),
        );
    }
    let program = match words {
        [one] if one.contains(|c: char| !(c.is_alphanumeric() || "_-./+".contains(c))) => {
            return Ok(())
        }
        words => match words.iter().find(|word| !is_assignment(word)) {
            Some(program) => program,
            None => return Ok(()),
        },
    };
    const BUILTINS: &[&str] = &[
        ":", ".", "[", "alias", "break", "cd", "command", "continue", "echo", "eval", "exec",
        "exit", "export", "false", "getopts", "kill", "local", "printf", "pwd", "read", "readonly",
        "return", "set", "shift", "test", "times", "trap", "true", "type", "ulimit", "umask",
        "unset", "wait",
    ];
    if program == "." && words.len() == 1 && !after_dashes {
        // The shell's `.` would source each input line; a directory is what was meant.
        return Err(
            "`.` is the current directory, not a command nor a file of jobs; to source each \
             input line as a script (the shell's `.`), write `lanes [OPTIONS] -- .`"
                .to_owned(),
        );
    }
    if BUILTINS.contains(&program.as_str()) || program.contains('{') {
        return Ok(());
    }
    if program.contains('/') {
        use std::os::unix::fs::PermissionsExt as _;
        match std::fs::metadata(program) {
            Ok(meta) if meta.is_dir() => {
                return Err(format!(
                    "`{program}` is a directory, not a command{}",
                    if after_dashes {
                        ""
                    } else {
                        " nor a file of jobs (give a file of KEY<TAB>COMMAND lines, or the \
                         command to run for each input line: `lanes [OPTIONS] -- COMMAND \
                         [ARGS...]`)"
                    }
                ));
            }
            Ok(meta) if meta.permissions().mode() & 0o111 == 0 => {
                return Err(format!(
                    "`{program}` is not executable: make it so (`chmod +x`), or name its \
                     interpreter first (`sh {program} ...`)"
                ));
            }
            Ok(_) => return Ok(()),
            Err(_) => {}
        }
    } else if is_program_on_path(program, path) {
        return Ok(());
    }
    let directory = Path::new(program).is_dir();
    // `lanes -j 2 status`: a task named after a run's options.
    let task = if program == "serve"
        || <crate::cli::Task as clap::Subcommand>::has_subcommand(program)
    {
        format!("; `lanes {program}` is named first, before its own options: `lanes {program} [OPTIONS]`")
    } else {
        String::new()
    };
    if after_dashes {
        return Err(if program.contains('/') {
            format!("`{program}` does not exist: no command to run")
        } else {
            format!(
                "`{program}` is {}not a command on PATH",
                if directory { "a directory here, " } else { "" }
            )
        });
    }
    let what = if directory {
        "is a directory here: neither a file of jobs nor a command on PATH"
    } else {
        "is neither an existing file of jobs nor a command on PATH"
    };
    Err(format!(
        "`{program}` {what} (a trailing command runs for each input line: `lanes [OPTIONS] -- \
         COMMAND [ARGS...]`){task}"
    ))
}

/// `NAME=VALUE` before the program: an environment assignment for it (POSIX 2.9.1).
fn is_assignment(word: &str) -> bool {
    word.split_once('=').is_some_and(|(name, _)| {
        !name.is_empty()
            && !name.starts_with(|c: char| c.is_ascii_digit())
            && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
    })
}

fn long_takes_value(command: &clap::Command, name: &str) -> bool {
    command
        .get_arguments()
        .any(|arg| arg.get_long() == Some(name) && arg.get_action().takes_values())
}

fn short_takes_value(command: &clap::Command, name: char) -> bool {
    command
        .get_arguments()
        .any(|arg| arg.get_short() == Some(name) && arg.get_action().takes_values())
}

/// Shells, by the program's file name: the first operand after a `-c` among their options is a
/// script. A name with a version after it (`bash5`, `bash-5.2`, `ksh93`) is the shell's too
/// ([`is_shell`]).
const SHELLS: &[&str] = &[
    "sh", "bash", "rbash", "dash", "zsh", "ksh", "mksh", "lksh", "pdksh", "oksh", "loksh", "ash",
    "yash", "posh", "busybox", "fish", "csh", "tcsh", "osh", "ysh", "elvish", "xonsh", "pwsh",
    "nu", "rc",
];

/// Whether `name` (a program's file name) is a shell of [`SHELLS`], alone or followed by a
/// version: digits, dots, `-` or `_` (`bash5`, `bash-5.2`, `zsh-5.9`, `ksh93`).
fn is_shell(name: &str) -> bool {
    SHELLS.iter().any(|shell| {
        name.strip_prefix(shell).is_some_and(|version| {
            version.is_empty()
                || (version.starts_with(|c: char| c.is_ascii_digit() || c == '-' || c == '_')
                    && version
                        .chars()
                        .all(|c| c.is_ascii_digit() || matches!(c, '.' | '-' | '_')))
        })
    })
}

/// The file names a program word may run as: its own, and that of the file it leads to (a
/// symbolic link followed: `./mysh` linked to `/bin/dash` is `dash`), found on `PATH` when the
/// word has no `/`, as `execvp` finds it ([`program_on_path`]). A renamed copy of a shell is
/// not found.
fn program_names(word: &str) -> Vec<String> {
    let own = word.rsplit('/').next().unwrap_or(word).to_owned();
    let path = if word.contains('/') {
        Some(PathBuf::from(word))
    } else {
        program_on_path(word, std::env::var_os("PATH").as_deref())
    };
    let target = path
        .and_then(|path| std::fs::canonicalize(path).ok())
        .and_then(|real| real.file_name().map(|n| n.to_string_lossy().into_owned()));
    match target {
        Some(target) if target != own => vec![own, target],
        _ => vec![own],
    }
}

/// Programs whose `-c WORD` (or `--command WORD`) is a command line for a shell.
const COMMAND_OPTIONS: &[&str] = &["su", "runuser", "script", "flock"];

/// Refuses a placeholder of the input (`{}`, `{key}`…) where a program of the words would run
/// it as code, the words being passed as they are: inside the script of a shell's `-c` (the
/// first operand after its options; `lanes sh -c 'echo {}' ::: ARG`) with other text, in the
/// `-c` command of `su`, `runuser`, `script` or `flock`, and anywhere in the string of `env
/// -S`. A shell is found anywhere among the words (after `env`, `sudo`, `timeout`…, whatever
/// their options), which refuses a few harmless commands (`echo sh -c '{}'`) rather than
/// miss one. A script that is the placeholder alone (`sh -c {}`) runs the argument as code on
/// purpose, and is left as it is, as `eval {}` is in `--command`.
///
/// # Errors
/// The message says which word and how to pass the argument instead.
pub(crate) fn check_shell_scripts(words: &[String]) -> Result<(), String> {
    for (i, word) in words.iter().enumerate() {
        let names = program_names(word);
        let after = &words[i + 1..];
        if let Some(shell) = names.iter().find(|name| is_shell(name)) {
            if let Some(script) = shell_script(after) {
                check_script_word(shell, script, true)?;
            }
            continue;
        }
        let program = names[0].clone();
        if COMMAND_OPTIONS.contains(&program.as_str()) {
            // su's and runuser's `--session-command` hands its value to the shell's `-c` too.
            let session = matches!(program.as_str(), "su" | "runuser");
            for j in 0..after.len() {
                let script = option_value(after, j, Some('c'), "command").or_else(|| {
                    session
                        .then(|| option_value(after, j, None, "session-command"))
                        .flatten()
                });
                if let Some((script, _)) = script {
                    check_script_word(&program, script, true)?;
                }
            }
        } else if program == "env" {
            // env's options end at its first operand (`NAME=VALUE` or the command), whose own
            // `-S` is no env option (`env ls -S {}`), or at `--`.
            let mut j = 0;
            while after
                .get(j)
                .is_some_and(|o| o.starts_with('-') && o != "--")
            {
                if let Some((string, next)) = option_value(after, j, Some('S'), "split-string") {
                    check_script_word("env -S", string, false)?;
                    // The string's words come before the words after it (`env -S'sh -c'
                    // 'echo {}'`: the shell and its `-c` are in the string).
                    let mut split: Vec<String> =
                        string.split_ascii_whitespace().map(str::to_owned).collect();
                    split.extend(after.iter().skip(next).cloned());
                    check_shell_scripts(&split)?;
                    break;
                }
                // Past an option's value, read as the option is (`-u NAME`, `-uNAME`, `-iu
                // NAME`, `--chd DIR`), or past an option that takes none.
                j = [('u', "unset"), ('C', "chdir"), ('a', "argv0")]
                    .into_iter()
                    .find_map(|(short, long)| option_value(after, j, Some(short), long))
                    .map_or(j + 1, |(_, next)| next);
            }
        }
    }
    Ok(())
}

/// The value of the option that `words[at]` gives, if it is the short option `short` (if any)
/// or the long option `long`, as `getopt_long` reads them: `-c VALUE`, `-cVALUE`, in a cluster
/// (`-lc VALUE`, `-iSVALUE`), `--command VALUE`, `--command=VALUE`, or the long name cut
/// short to any prefix (`--comm`, `--split-str=VALUE`), with the index of the word after the
/// value. Options of other letters before it in a cluster are taken to take no value, which
/// may find a value where there is none (refusing a harmless command rather than missing one).
fn option_value<'w>(
    words: &'w [String],
    at: usize,
    short: Option<char>,
    long: &str,
) -> Option<(&'w str, usize)> {
    let word = words[at].as_str();
    let next = || words.get(at + 1).map(|value| (value.as_str(), at + 2));
    if let Some(given) = word.strip_prefix("--") {
        let (name, value) = match given.split_once('=') {
            Some((name, value)) => (name, Some(value)),
            None => (given, None),
        };
        if name.is_empty() || !long.starts_with(name) {
            return None;
        }
        return match value {
            Some(value) => Some((value, at + 1)),
            None => next(),
        };
    }
    let (cluster, short) = (word.strip_prefix('-')?, short?);
    let rest = &cluster[cluster.find(short)? + short.len_utf8()..];
    if rest.is_empty() {
        next()
    } else {
        Some((rest, at + 1))
    }
}

/// The script of a shell whose arguments are `words`: the first operand after its options, if
/// one of them is `-c` (alone or in a cluster, `-ec`).
fn shell_script(words: &[String]) -> Option<&str> {
    let mut command = false;
    let mut words = words.iter();
    while let Some(word) = words.next() {
        if word == "--" {
            break;
        }
        // Options that take the next word (`-o pipefail`, bash's `-O extglob`, `--rcfile F`).
        if ["-o", "+o", "-O", "+O", "--rcfile", "--init-file"].contains(&word.as_str()) {
            words.next();
            continue;
        }
        if word.starts_with("--") {
            continue;
        }
        if let Some(cluster) = word.strip_prefix('-').or_else(|| word.strip_prefix('+')) {
            command |= word.starts_with('-') && cluster.contains('c');
            continue;
        }
        return command.then_some(word.as_str());
    }
    words.next().filter(|_| command).map(String::as_str)
}

/// [`check_shell_scripts`] for `script`, a word that `runner` runs as code; the placeholder
/// alone as the whole word is let through when `whole_allowed`.
fn check_script_word(runner: &str, script: &str, whole_allowed: bool) -> Result<(), String> {
    let pieces = word_pieces(script);
    let whole = whole_allowed && matches!(pieces.as_slice(), [WordPiece::Placeholder(_)]);
    let input = pieces.iter().find_map(|piece| match piece {
        WordPiece::Placeholder(name) if crate::template::carries_input(name) => Some(name),
        _ => None,
    });
    match input {
        Some(_) if whole => Ok(()),
        Some(name) => Err(format!(
            "the placeholder `{{{name}}}` is inside a word `{runner}` runs as code: the words \
             of a trailing command are passed as they are, so the argument would run as \
             code. Pass it to a script as an argument instead: `sh -c '... \"$1\" ...' sh \
             {{{name}}}`"
        )),
        None => Ok(()),
    }
}

/// The `--command` template text for a trailing command. One word is shell text, as a
/// `--command` template (`lanes 'gunzip -c {} > {.}'`). Several words are a program and its
/// arguments, each passed as it is (as xargs passes them): every word is quoted for the shell
/// except the placeholders in it (`{}`, `{.}`, `{/}`, `{//}`, `{/.}`, `{N}`, `{key}`, `{seq}`,
/// `{#}`, `{slot}`, `{%}`, `{res.NAME}`), which are substituted, quoted, in place.
pub(crate) fn template_text(words: &[String]) -> String {
    if let [one] = words {
        return one.clone();
    }
    let mut text = String::new();
    for (i, word) in words.iter().enumerate() {
        if i > 0 {
            text.push(' ');
        }
        text.push_str(&word_template(word));
    }
    text
}

/// One argument word as template text: literal runs quoted (braces doubled), placeholders as
/// they are; `{{` and `}}` in the word are literal braces, and a brace of no placeholder
/// passes as it is.
fn word_template(word: &str) -> String {
    if word.is_empty() {
        return "''".to_owned();
    }
    let mut out = String::new();
    for piece in word_pieces(word) {
        match piece {
            WordPiece::Literal(text) => push_literal(&mut out, &text),
            WordPiece::Placeholder(name) => {
                out.push('{');
                out.push_str(name);
                out.push('}');
            }
        }
    }
    out
}

/// A piece of a word of a trailing command ([`word_pieces`]).
enum WordPiece<'w> {
    /// Text as it is (`{{` and `}}` read as braces, and a brace of no placeholder kept).
    Literal(String),
    /// A placeholder, by its name (`{.}` is `.`).
    Placeholder(&'w str),
}

/// `word` as literal runs and placeholders, in order, adjacent literal text in one piece:
/// `{{` and `}}` are literal braces, as in `--command`, and a brace of no placeholder passes
/// as it is.
fn word_pieces(word: &str) -> Vec<WordPiece<'_>> {
    let mut pieces = Vec::new();
    let mut literal = String::new();
    let mut rest = word;
    while !rest.is_empty() {
        if let Some(brace) = ["{{", "}}"].into_iter().find(|pair| rest.starts_with(pair)) {
            literal.push_str(&brace[..1]);
            rest = &rest[2..];
            continue;
        }
        if rest.starts_with('{') {
            if let Some(close) = rest.find('}') {
                let name = &rest[1..close];
                if crate::template::is_placeholder(name) {
                    if !literal.is_empty() {
                        pieces.push(WordPiece::Literal(std::mem::take(&mut literal)));
                    }
                    pieces.push(WordPiece::Placeholder(name));
                    rest = &rest[close + 1..];
                    continue;
                }
            }
        }
        let c = rest.chars().next().expect("rest is not empty");
        literal.push(c);
        rest = &rest[c.len_utf8()..];
    }
    if !literal.is_empty() {
        pieces.push(WordPiece::Literal(literal));
    }
    pieces
}

/// Appends `literal`, quoted when it holds anything a shell treats specially, braces doubled.
fn push_literal(out: &mut String, literal: &str) {
    if literal.is_empty() {
        return;
    }
    let plain = literal
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || "_-./:=@%+,".contains(c));
    let quoted = if plain {
        literal.to_owned()
    } else {
        shell_quote(literal)
    };
    out.push_str(&quoted.replace('{', "{{").replace('}', "}}"));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_placeholder_inside_a_shells_script_word_is_refused() {
        let words = |text: &str| -> Vec<String> { shell_words(text) };
        for refused in [
            "sh -c 'echo {}'",
            "bash -c 'echo x{}y'",
            "/bin/dash -ec 'cat {.}.txt'",
            "zsh -c 'echo {key}'",
            "env A=1 B=2 sh -c 'echo {}'",
            "timeout 5 bash -lc 'echo {}'",
            "sudo -n nice -n 5 sh -xc 'echo {1}'",
            "bash -O extglob -o pipefail -c 'echo {}'",
            "bash --rcfile x -c 'echo {}'",
            "sh -c -- 'echo {}'",
            "bash -c -x 'echo {}'",
            "sh -ce -- 'echo {}'",
            "bash -c -o errexit 'echo {}'",
            "env -u HOME sh -c 'echo {}'",
            "env -C / sh -c 'echo {}'",
            "timeout -s KILL 5 sh -c 'echo {}'",
            "sudo -u root sh -c 'echo {}'",
            "flock f sh -c 'echo {}'",
            "flock f -c 'echo {}'",
            "xargs sh -c 'echo {}'",
            "su -c 'echo {}'",
            "su -lc 'echo {}'",
            "script -qc 'echo {}' /dev/null",
            "script --command='echo {}' /dev/null",
            "runuser -u root -- sh -c 'echo {}'",
            "rbash -c 'echo {}'",
            "env -S 'sh -c \"echo {}\"'",
            "env --split-string={}",
            "env '-Scat {}'",
            "env '-Ssh -c' 'echo {}'",
            "env --split-string='sh -c' 'echo {}'",
            "env '-iSsh -c' 'echo {}'",
            "env -S '/bin/sh -e -c' 'echo {}'",
            // Long options cut short, and short ones in clusters or with their value attached,
            // as `getopt_long` reads them.
            "su --comm 'echo {}'",
            "su --comm='echo {}'",
            "su '-cecho {}'",
            "runuser root --c 'echo {}'",
            "script --comm 'echo {}' /dev/null",
            "flock f --com 'echo {}'",
            "env -iS 'sh -c {}'",
            "env -vS 'sh -c {}'",
            "env --split-str 'sh -c {}'",
            "env --sp='sh -c {}'",
            "env -iS 'sh -c' 'echo {}'",
            // After an option's value, given in any spelling.
            "env --chd /tmp -S 'sh -c {}'",
            "env -iu HOME -S 'sh -c {}'",
            "env -uHOME -S 'sh -c {}'",
            "su --session-command='echo {}' root",
            "su --session-command 'echo {}' root",
            "su --sess 'echo {}' root",
            "runuser --session-command 'echo {}' root",
            "nice su --session-command='echo {}' root",
            // A literal brace before it: the script is not the placeholder alone.
            "sh -c '{{{}'",
            // Harmless, refused all the same: a shell is looked for among all the words.
            "echo sh -c 'x {}'",
            "X=1 sh -c 'echo {}; echo {}'",
            "busybox sh -c 'echo {}'",
        ] {
            let said = check_shell_scripts(&words(refused)).expect_err(refused);
            assert!(
                said.contains("the argument would run as code"),
                "{refused}: {said}"
            );
        }
        for accepted in [
            "sh -c {}",
            "sh -c 'echo \"$1\"' sh {}",
            "sh -c 'echo {seq} {slot} {res.gpu}'",
            "sh script.sh {}",
            "sh -- -c{} {}",
            "bash --norc script {}",
            "gcc -c src/{}.c",
            "python3 -c 'print(1)' {}",
            "sh -c 'echo {{}}'",
            "flock /tmp/lock-{} make {}",
            "su -l user {}",
            "env -i PATH=/bin printf %s {}",
            "env ls -S {}",
            "env -u HOME ls -lS {}",
            "su --shell /bin/sh root {}",
        ] {
            assert_eq!(check_shell_scripts(&words(accepted)), Ok(()), "{accepted}");
        }
    }

    #[test]
    fn a_shell_under_a_versioned_name_or_behind_a_link_is_a_shell() {
        for shell in [
            "bash5", "bash-5.2", "zsh-5.9", "ksh93", "oksh", "loksh", "mksh", "pwsh",
        ] {
            assert!(is_shell(shell), "{shell}");
        }
        for other in [
            "bashful", "shx", "shred", "zshdb", "rsync", "fishy", "sh.py",
        ] {
            assert!(!is_shell(other), "{other}");
        }
        for refused in [
            "bash5 -c 'echo {}'",
            "/opt/bash-5.2/bin/bash-5.2 -lc 'x {}'",
        ] {
            assert!(
                check_shell_scripts(&shell_words(refused)).is_err(),
                "{refused}"
            );
        }
        // A link to a shell, under any name, runs the shell: `./mysh -c 'echo {}'`.
        let Some(shell) = ["/bin/sh", "/usr/bin/sh"]
            .into_iter()
            .find(|p| std::path::Path::new(p).exists())
        else {
            return;
        };
        let dir = tempfile::tempdir().unwrap();
        let link = dir.path().join("mysh");
        std::os::unix::fs::symlink(shell, &link).unwrap();
        let link = link.to_str().unwrap().to_owned();
        let said = check_shell_scripts(&[link.clone(), "-c".into(), "echo {}".into()])
            .expect_err("a link to sh");
        assert!(said.contains("the argument would run as code"), "{said}");
        assert_eq!(
            check_shell_scripts(&[link, "script.sh".into(), "{}".into()]),
            Ok(()),
            "a script given to it is no `-c`"
        );
    }

    /// `text` split into words as a shell would (single and double quotes only).
    fn shell_words(text: &str) -> Vec<String> {
        let mut words = Vec::new();
        let mut word: Option<String> = None;
        let mut quote: Option<char> = None;
        for c in text.chars() {
            match (quote, c) {
                (Some(q), c) if c == q => quote = None,
                (Some(_), c) => word.get_or_insert_with(String::new).push(c),
                (None, '\'' | '"') => {
                    quote = Some(c);
                    word.get_or_insert_with(String::new);
                }
                (None, ' ') => words.extend(word.take()),
                (None, c) => word.get_or_insert_with(String::new).push(c),
            }
        }
        words.extend(word);
        words
    }

    fn split_words(words: &[&str], files: &[&str]) -> Result<Invocation, String> {
        let argv = std::iter::once("lanes")
            .chain(words.iter().copied())
            .map(OsString::from)
            .collect();
        split(argv, &Cli::command(), |path| {
            files.iter().any(|f| Path::new(f) == path)
        })
    }

    fn os(words: &[&str]) -> Vec<OsString> {
        words.iter().map(OsString::from).collect()
    }

    fn strings(words: &[&str]) -> Option<Vec<String>> {
        Some(words.iter().map(|w| (*w).to_owned()).collect())
    }

    fn bytes(words: &[&str]) -> Option<Vec<Vec<u8>>> {
        Some(words.iter().map(|w| w.as_bytes().to_vec()).collect())
    }

    #[test]
    fn options_then_a_command_that_is_not_a_file() {
        let got = split_words(&["-j4", "--timeout", "5", "gzip", "-t", "--x"], &[]).unwrap();
        assert_eq!(got.options, os(&["lanes", "-j4", "--timeout", "5"]));
        assert_eq!(got.command, strings(&["gzip", "-t", "--x"]));
        assert_eq!(got.arguments, None);
    }

    #[test]
    fn an_existing_file_is_the_file_and_options_may_follow_it() {
        let got = split_words(&["jobs.tsv", "-j", "2"], &["jobs.tsv"]).unwrap();
        assert_eq!(got.options, os(&["lanes", "jobs.tsv", "-j", "2"]));
        assert_eq!(got.command, None);
        let got = split_words(&["missing.toml"], &[]).unwrap();
        assert_eq!(got.options, os(&["lanes", "missing.toml"]));
    }

    #[test]
    fn after_a_double_dash_even_a_file_is_the_command() {
        let got = split_words(
            &["-0", "--", "./run.sh", "{}", ":::", "a", "b"],
            &["./run.sh"],
        )
        .unwrap();
        assert_eq!(got.options, os(&["lanes", "-0"]));
        assert_eq!(got.command, strings(&["./run.sh", "{}"]));
        assert_eq!(got.arguments, bytes(&["a", "b"]));
    }

    #[test]
    fn arguments_without_a_command() {
        let got = split_words(&["-j", "2", ":::", "echo a", "-j"], &[]).unwrap();
        assert_eq!(got.options, os(&["lanes", "-j", "2"]));
        assert_eq!(got.command, None);
        assert_eq!(got.arguments, bytes(&["echo a", "-j"]));
    }

    #[test]
    fn option_values_are_not_commands() {
        let got = split_words(&["--command", "echo", "--key={//}", "-a", "list"], &[]).unwrap();
        assert_eq!(got.command, None);
        assert_eq!(got.options.len(), 6);
    }

    #[test]
    fn ambiguous_and_empty_forms_are_explained() {
        let err = split_words(&["run.sh", "arg"], &["run.sh"]).unwrap_err();
        assert!(
            err.contains("-- ./run.sh arg") && err.contains("-a run.sh arg"),
            "{err}"
        );
        let err = split_words(&["-j", "2", "--"], &[]).unwrap_err();
        assert!(err.contains("nothing after `--`"), "{err}");
    }

    #[test]
    fn a_program_that_cannot_be_found_is_named() {
        let path = std::ffi::OsString::from("/bin:/usr/bin");
        let check = |words: &[&str]| check_program(&strings(words).unwrap(), Some(&path), false);
        assert!(check(&["sh", "-c", "true"]).is_ok());
        assert!(check(&["cd", "x"]).is_ok());
        assert!(check(&["LC_ALL=C", "sort", "-c"]).is_ok());
        assert!(check(&["LC_ALL=C", "no-such-program-x"]).is_err());
        assert!(check(&["echo {} > {.}"]).is_ok());
        let err = check(&["jobs.tsv"]).unwrap_err();
        assert!(err.contains("`jobs.tsv` is neither"), "{err}");
        assert!(check(&["./missing/prog", "x"]).is_err());
    }

    #[test]
    fn a_shebang_runs_lanes_only_when_its_program_is_lanes() {
        for lanes in [
            "/usr/bin/env lanes",
            "/usr/bin/env -S lanes -j 2",
            "/usr/local/bin/lanes",
            " /usr/bin/env LANES_LOCK_DIR=/tmp lanes",
        ] {
            assert!(runs_lanes(lanes), "{lanes}");
        }
        for other in [
            "/bin/sh",
            "/usr/bin/env lanesx",
            "/opt/lanes/bin/sh",
            "/bin/sh lanes",
            "/usr/bin/env",
            "",
        ] {
            assert!(!runs_lanes(other), "{other}");
        }
    }

    #[test]
    fn a_path_that_is_no_executable_file_is_refused_and_said_why() {
        use std::os::unix::fs::PermissionsExt as _;
        let dir = tempfile::tempdir().unwrap();
        let path = std::ffi::OsString::from("/bin:/usr/bin");
        let check =
            |words: &[&str], dashes| check_program(&strings(words).unwrap(), Some(&path), dashes);
        let shown = dir.path().to_str().unwrap().to_owned();
        let err = check(&[&shown, "x"], false).unwrap_err();
        assert!(err.contains("is a directory, not a command"), "{err}");
        let script = dir.path().join("run.sh");
        std::fs::write(&script, "echo hi\n").unwrap();
        let script = script.to_str().unwrap().to_owned();
        let err = check(&[&script], false).unwrap_err();
        assert!(err.contains("not executable"), "{err}");
        std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
        assert!(check(&[&script], false).is_ok());
        // After `--` the word was never a file of jobs: the message does not say it was.
        let err = check(&["no-such-program-x", "y"], true).unwrap_err();
        assert_eq!(err, "`no-such-program-x` is not a command on PATH");
        let err = check(&["./missing/prog"], true).unwrap_err();
        assert!(err.contains("does not exist"), "{err}");
    }

    #[test]
    fn words_become_a_template_of_literal_arguments() {
        let words = |w: &[&str]| template_text(&strings(w).unwrap());
        assert_eq!(words(&["gzip", "-t"]), "gzip -t");
        assert_eq!(words(&["grep", "-l", "a b", "{}"]), "grep -l 'a b' {}");
        assert_eq!(
            words(&["run", "--gpu={res.gpu}", "{res.}"]),
            "run --gpu={res.gpu} '{{res.}}'"
        );
        assert_eq!(
            words(&["awk", "{print $1}", "{/}.out", ""]),
            "awk '{{print $1}}' {/}.out ''"
        );
        assert_eq!(words(&["echo {} > {.}"]), "echo {} > {.}");
    }

    /// A task parsed alone reads and helps exactly as under the whole command line.
    #[test]
    fn a_task_parsed_alone_is_parsed_and_helped_as_under_the_whole_command_line() {
        let mut whole = Cli::command();
        whole.build();
        let names: Vec<String> = whole
            .get_subcommands()
            .map(|task| task.get_name().to_owned())
            .filter(|name| name != "help")
            .collect();
        assert!(names.iter().any(|name| name == "submit"), "{names:?}");
        for name in &names {
            let mut alone = task_command(name).unwrap_or_else(|| panic!("{name}: no task"));
            alone.build();
            let mut a = whole.find_subcommand_mut(name).unwrap().clone();
            let mut b = alone.find_subcommand_mut(name).unwrap().clone();
            assert_eq!(
                a.render_long_help().to_string(),
                b.render_long_help().to_string(),
                "{name}"
            );
            assert_eq!(a.render_usage().to_string(), b.render_usage().to_string());
        }
        assert!(task_command("help").is_none() && task_command("serve").is_none());
        let lines: [&[&str]; 12] = [
            &[
                "lanes", "submit", "--socket", "s", "--json", "k", "--", "a", "b",
            ],
            &["lanes", "submit", "--wait", "--wait", "k", "--", "true"],
            &["lanes", "submit", "--bogus"],
            &["lanes", "submit", "--help"],
            &["lanes", "cancel", "k"],
            &["lanes", "cancel"],
            &["lanes", "status", "--json"],
            &["lanes", "set", "-j", "0"],
            &["lanes", "drain", "--socket", "s"],
            &["lanes", "close", "extra"],
            &["lanes", "locks", "dir", "--coordinate", "x"],
            &[
                "lanes",
                "timeline",
                "report.jsonl",
                "--format",
                "svg",
                "-o",
                "t",
            ],
        ];
        for line in lines {
            let whole = Cli::command()
                .try_get_matches_from(os(line))
                .map(|matches| format!("{:?}", Cli::from_arg_matches(&matches).unwrap().task));
            let alone = task_command(line[1])
                .unwrap()
                .try_get_matches_from(os(line))
                .map(|matches| format!("{:?}", Some(Task::from_arg_matches(&matches).unwrap())));
            match (whole, alone) {
                (Ok(a), Ok(b)) => assert_eq!(a, b, "{line:?}"),
                (Err(a), Err(b)) => assert_eq!(a.to_string(), b.to_string(), "{line:?}"),
                (a, b) => panic!("{line:?}: {a:?} but alone {b:?}"),
            }
        }
        assert!(parse_task(&os(&["lanes", "-j", "2"])).is_none());
        assert!(parse_task(&os(&["lanes", "serve"])).is_none());
        assert!(parse_task(&os(&["lanes", "help"])).is_none());
        assert!(parse_task(&os(&["lanes", "./submit"])).is_none());
    }
}
