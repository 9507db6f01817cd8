//! `--dry-run`: reads the whole input, plans it with the core's own decisions
//! ([`crate::core::plan`]) and prints what would run, per key in order, with its round, slot and
//! batch. Nothing runs and no report is written.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::Arc;

use anyhow::Context as _;

use crate::config::RunConfig;
use crate::core::{plan, Limits};
use crate::input::{InputItem, JobSpec};
use crate::output::framing::{escape_controls, is_hidden};
use crate::plural::plural;
use crate::resume::Resume;
use crate::shell::input::Feed;

/// Prints the plan of `feed` on stdout, leaving out the jobs `resume` says were done before;
/// returns the exit status (0).
///
/// # Errors
/// The input could not be read to its end.
pub(crate) fn print(
    config: &RunConfig,
    feed: Feed,
    mut resume: Option<Resume>,
) -> anyhow::Result<u8> {
    let mut jobs: BTreeMap<u64, JobSpec> = BTreeMap::new();
    let mut invalid = Vec::new();
    let mut skipped = Vec::new();
    // The order jobs are offered in, as the run offers them: a manifest's by rank.
    let mut arrival = Vec::new();
    let commands = crate::shell::input::Commands::of(config);
    let mut rx = crate::shell::input::start(feed, usize::MAX, commands)
        .context("cannot start the thread that reads the input (raise `ulimit -u`)")?;
    while let Some(item) = rx.blocking_recv() {
        match item {
            InputItem::Job(job) => {
                if let Some(why) = resume
                    .as_mut()
                    .and_then(|resume| resume.skip(&job.key, &job.command))
                {
                    skipped.push((job.seq, why));
                } else {
                    arrival.push(job.seq);
                    jobs.insert(job.seq, job);
                }
            }
            InputItem::Invalid { line, message, .. } => {
                invalid.push(format!("line {line}: {message}"));
            }
            InputItem::ReadError(message) => anyhow::bail!(message),
        }
    }
    let copies = config.batch_copies();
    let requests = arrival
        .iter()
        .map(|seq| jobs[seq].request(copies))
        .collect();
    let limits = Limits {
        max_concurrent: config.max_concurrent,
        max_queued: config.max_queued,
    };
    let planned = plan(limits, config.policy, config.resources.clone(), requests);
    let mut by_key: Vec<(Arc<str>, Vec<String>)> = Vec::new();
    let mut order: BTreeMap<Arc<str>, usize> = BTreeMap::new();
    for job in jobs.values() {
        order.entry(Arc::clone(&job.key)).or_insert_with(|| {
            by_key.push((Arc::clone(&job.key), Vec::new()));
            by_key.len() - 1
        });
    }
    let mut runs = planned.runs.clone();
    runs.sort_by_key(|run| (order[&jobs[&run.batch[0]].key], run.round));
    for run in &runs {
        let first = &jobs[&run.batch[0]];
        let members = run.batch.iter().filter_map(|seq| jobs.get(seq));
        let command = match &config.template {
            Some(template) => {
                let args: Vec<&str> = members.map(|job| job.command.as_str()).collect();
                template.render_granted(
                    &args,
                    &first.key,
                    first.seq,
                    run.slot,
                    run.grant.as_deref(),
                )
            }
            None => first.command.clone(),
        };
        let mut row = format!("  seq {}", first.seq);
        if run.batch.len() > 1 {
            let _ = write!(row, " (batch of {}: {:?})", run.batch.len(), run.batch);
        }
        // Keys and commands shown with their control characters escaped, as in prefixes: a
        // line of the plan is one line, and nothing in it moves the cursor.
        let _ = write!(row, "  round {}  slot {}", run.round, run.slot);
        // What it would hold, as its `LANES_RESOURCE_<NAME>` would say.
        if let Some(grant) = run.grant.as_deref() {
            row.push_str("  holds");
            if grant.weight != 1 {
                let _ = write!(row, " weight={}", grant.weight);
            }
            for (name, value) in crate::resources::granted_values(grant) {
                let _ = write!(row, " {name}={value}");
            }
        }
        let _ = write!(row, "  {}", shown_command(&command));
        by_key[order[&first.key]].1.push(row);
    }
    // Jobs of another weight than 1 share -j by weight: not "at most N at once".
    let weighed = planned
        .runs
        .iter()
        .any(|run| run.grant.as_deref().is_some_and(|grant| grant.weight != 1));
    let cap = if weighed {
        format!("-j {} shared by weight", config.max_concurrent)
    } else {
        format!("at most {} at once", config.max_concurrent)
    };
    let mut out = format!(
        "lanes: dry run of {} in {}, {cap}: nothing runs\n",
        plural(jobs.len() as u64, "job"),
        plural(by_key.len() as u64, "key"),
    );
    let reserve_after = config.policy.reserve_after;
    if !reserve_after.is_zero() && planned.runs.iter().any(|run| run.grant.is_some()) {
        // Rounds of 1 ms: a share is set aside only after many rounds.
        let _ = writeln!(
            out,
            "lanes: --reserve-after {} counts the plan's rounds of 1 ms: a job short of its \
             share is planned behind the lighter jobs that fit, as in a run whose jobs end one \
             by one, until it has waited that long; a run of longer jobs sets its share aside \
             after fewer of them",
            humantime::format_duration(reserve_after)
        );
    }
    for (key, rows) in &by_key {
        let _ = writeln!(out, "[{}]", escape_controls(key));
        for row in rows {
            let _ = writeln!(out, "{row}");
        }
    }
    for seq in &planned.dropped {
        let _ = writeln!(out, "not run: seq {seq} (superseded or rejected)");
    }
    for (seq, why) in &skipped {
        let done = match why {
            crate::core::SkipReason::SucceededBefore => "succeeded",
            crate::core::SkipReason::SupersededBefore => "superseded by a newer job of its key",
        };
        let _ = writeln!(out, "skipped: seq {seq} ({done} in the --resume report)");
    }
    for line in &invalid {
        let _ = writeln!(out, "invalid: {}", escape_controls(line));
    }
    use std::io::Write as _;
    let mut stdout = std::io::stdout().lock();
    stdout.write_all(out.as_bytes())?;
    stdout.flush()?;
    Ok(0)
}

/// A command as a row of the plan shows it: as it is, unless it holds a character that
/// [`is_hidden`] would escape (or starts with `$'`, and so would look like one that did). Then
/// it is quoted as bash's ANSI-C quoting reads it (`$'…'`, bash(1), "QUOTING"): `\\` for a
/// backslash, `\'` for a quote, `\n`, `\t`, `\r`, `\e`, `\xHH` for the other C0 controls and
/// DEL, `\uHHHH` for the rest. A newline and a backslash followed by `n` then never look alike,
/// and `bash -c $'…'` runs exactly the command.
fn shown_command(command: &str) -> String {
    if !command.starts_with("$'") && !command.chars().any(is_hidden) {
        return command.to_owned();
    }
    let mut shown = String::with_capacity(command.len() + 8);
    shown.push_str("$'");
    for c in command.chars() {
        match c {
            '\\' => shown.push_str("\\\\"),
            '\'' => shown.push_str("\\'"),
            '\n' => shown.push_str("\\n"),
            '\t' => shown.push_str("\\t"),
            '\r' => shown.push_str("\\r"),
            '\u{1b}' => shown.push_str("\\e"),
            c if (c as u32) < 0x20 || c == '\u{7f}' => {
                let _ = write!(shown, "\\x{:02x}", c as u32);
            }
            c if is_hidden(c) => {
                let _ = write!(shown, "\\u{:04x}", c as u32);
            }
            c => shown.push(c),
        }
    }
    shown.push('\'');
    shown
}

#[cfg(test)]
mod tests {
    use super::shown_command;

    #[test]
    fn a_command_with_nothing_hidden_is_shown_as_it_is() {
        assert_eq!(
            shown_command("printf 'a\\n' \"$x\""),
            "printf 'a\\n' \"$x\""
        );
    }

    #[test]
    fn a_newline_and_a_backslash_n_are_shown_apart() {
        assert_eq!(shown_command("echo 'a\nb'"), "$'echo \\'a\\nb\\''");
        assert_eq!(
            shown_command("echo 'a\\nb\u{1}'"),
            "$'echo \\'a\\\\nb\\x01\\''"
        );
        assert_eq!(
            shown_command("x\u{1b}[1m\u{202e}\u{7f}"),
            "$'x\\e[1m\\u202e\\x7f'"
        );
        // Starting like a quoted row, it is quoted too.
        assert_eq!(shown_command("$'a'"), "$'$\\'a\\''");
    }
}
