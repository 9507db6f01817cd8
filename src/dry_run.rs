//! `--dry-run`: reads the whole input, plans it with the core's own decisions
//! ([`crate::core::plan`]) and prints what would run, per key in order, with its round, slot and
//! batch. Nothing runs and no report is written.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::Arc;

use anyhow::Context as _;
use schemars::JsonSchema;
use serde::Serialize;

use crate::config::RunConfig;
use crate::core::{plan, Limits};
use crate::input::{InputItem, JobSpec};
use crate::output::framing::{escape_controls, is_hidden};
use crate::plural::plural;
use crate::resume::Resume;
use crate::shell::input::Feed;

/// Prints the plan of `feed` on stdout (as JSON Lines under `--json`, [`PlanRecord`]), leaving
/// out the jobs `resume` says were done before; returns the exit status (0, or 1 when stdout
/// could not be written).
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
            InputItem::Invalid { line, message, .. } => invalid.push((line, message)),
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
    let mut by_key: Vec<(Arc<str>, Vec<PlannedRun>)> = Vec::new();
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
        let (weight, resources) = run.grant.as_deref().map_or_else(
            || (1, BTreeMap::new()),
            |grant| {
                let resources = crate::resources::granted_values(grant)
                    .map(|(name, value)| (name.to_owned(), value))
                    .collect();
                (grant.weight, resources)
            },
        );
        by_key[order[&first.key]].1.push(PlannedRun {
            seq: first.seq,
            // As the report's `batch`: set for every run when batching, one of one job too.
            batch: config.policy.batching().then(|| run.batch.clone()),
            key: first.key.to_string(),
            round: run.round,
            slot: run.slot,
            weight,
            resources,
            command,
            superseded_by: run.superseded_by,
        });
    }
    // Jobs of another weight than 1 share -j by weight: not "at most N at once".
    let weighed = planned
        .runs
        .iter()
        .any(|run| run.grant.as_deref().is_some_and(|grant| grant.weight != 1));
    let reserve_after = config.policy.reserve_after;
    let rounds_noted =
        !reserve_after.is_zero() && planned.runs.iter().any(|run| run.grant.is_some());
    let header = PlanHeader {
        jobs: jobs.len() as u64,
        keys: by_key.len() as u64,
        max_concurrent: config.max_concurrent,
        shared_by_weight: weighed,
    };
    let skipped = skipped
        .into_iter()
        .map(|(seq, why)| {
            let reason = match why {
                crate::core::SkipReason::SucceededBefore => Before::SucceededBefore,
                crate::core::SkipReason::SupersededBefore => Before::SupersededBefore,
            };
            (seq, reason)
        })
        .collect::<Vec<_>>();
    let out = if config.json {
        let mut lines = vec![PlanRecord::Plan(header)];
        lines.extend(
            by_key
                .into_iter()
                .flat_map(|(_, runs)| runs)
                .map(PlanRecord::Planned),
        );
        lines.extend(
            planned
                .dropped
                .iter()
                .map(|&seq| PlanRecord::NotRun { seq }),
        );
        lines.extend(
            skipped
                .into_iter()
                .map(|(seq, reason)| PlanRecord::Skipped { seq, reason }),
        );
        lines.extend(
            invalid
                .into_iter()
                .map(|(line, error)| PlanRecord::Invalid { line, error }),
        );
        lines
            .iter()
            .flat_map(crate::report::json::to_line)
            .collect::<Vec<u8>>()
    } else {
        let text = Text {
            header,
            reserve_after: rounds_noted.then_some(reserve_after),
            by_key,
            dropped: &planned.dropped,
            skipped,
            invalid,
        };
        text.render().into_bytes()
    };
    Ok(write_plan(&out))
}

/// Writes the plan on stdout; returns the exit status. A reader that went away (`| head`)
/// decides nothing, as for any filter; a plan that could not be written whole (a full disk, a
/// stdout closed when lanes started) makes it 1, as a run's output does.
fn write_plan(out: &[u8]) -> u8 {
    use std::io::Write as _;
    let mut stdout = crate::output::sink::stdout_destination();
    match stdout.write_all(out).and_then(|()| stdout.flush()) {
        Ok(()) => crate::exit::SUCCESS,
        Err(err) if err.kind() == std::io::ErrorKind::BrokenPipe => {
            eprintln!("lanes: stdout closed (broken pipe): the rest of the plan is not written");
            crate::exit::SUCCESS
        }
        Err(err) => {
            eprintln!("lanes: cannot write the plan to stdout: {err}");
            crate::exit::JOBS_FAILED
        }
    }
}

/// The first line of `--dry-run --json`.
#[derive(Debug, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct PlanHeader {
    /// Jobs planned (those `--resume` skips and invalid lines not counted).
    jobs: u64,
    /// Distinct keys among them.
    keys: u64,
    /// `-j`.
    max_concurrent: usize,
    /// Whether `-j` is shared by weight (a job of a weight other than 1 is planned).
    shared_by_weight: bool,
}

/// One run the plan would start: a job, or a batch of jobs run as one.
#[derive(Debug, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct PlannedRun {
    /// Its first job's seq.
    seq: u64,
    /// Every job of the batch, in lane order, when batching (`--batch-size`, `--batch-bytes`);
    /// `null` otherwise.
    batch: Option<Vec<u64>>,
    /// The key.
    key: String,
    /// 1-based: runs of one round would start together, each round after the one before.
    round: u64,
    /// The slot it would take (`LANES_SLOT`).
    slot: u32,
    /// The share of `-j` it would hold.
    weight: u32,
    /// Each named resource it would hold, as its `LANES_RESOURCE_<NAME>` would say (units
    /// joined by commas, or an amount).
    resources: BTreeMap<String, String>,
    /// The command as it would run (a template's expanded).
    command: String,
    /// `--cancel-in-progress`: the newer job of its key whose arrival stops it as it starts
    /// (recorded `interrupted`, reason `superseded`); `null` when it runs to its end.
    superseded_by: Option<u64>,
}

/// Why `--resume` skips a job (as a report's `skipped` record says).
#[derive(Debug, Serialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub(crate) enum Before {
    /// It succeeded in the report resumed from.
    SucceededBefore,
    /// A newer job of its key replaced it there.
    SupersededBefore,
}

/// One line of `--dry-run --json` (JSON Lines): a `plan` header, then one `planned` line per
/// run in the text plan's order, then the jobs that would never start (`not_run`), those
/// `--resume` skips (`skipped`) and the invalid lines (`invalid`).
#[derive(Debug, Serialize, JsonSchema)]
#[serde(tag = "type", rename_all = "snake_case")]
pub(crate) enum PlanRecord {
    /// What the plan holds.
    Plan(PlanHeader),
    /// A run it would start.
    Planned(PlannedRun),
    /// A job that would never start: superseded (`--coalesce latest`) or rejected (a full
    /// queue).
    NotRun {
        /// Its seq.
        seq: u64,
    },
    /// A job `--resume` skips.
    Skipped {
        /// Its seq.
        seq: u64,
        /// Why.
        reason: Before,
    },
    /// An input line that is no job.
    Invalid {
        /// Its 1-based line (a manifest's `[[job]]` header line).
        line: u64,
        /// Why, as the report's `error` says.
        error: String,
    },
}

/// The JSON Schema (draft 2020-12) of one line of `--dry-run --json`,
/// `schema/plan.schema.json`.
#[cfg(test)]
pub(crate) fn schema() -> schemars::Schema {
    let mut generator = schemars::generate::SchemaSettings::draft2020_12()
        .for_serialize()
        .with_transform(schemars::transform::RecursiveTransform(
            crate::report::json::unwrap_description,
        ))
        .into_generator();
    let line = generator.subschema_for::<PlanRecord>();
    let mut schema = schemars::json_schema!({
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "$id": "lanes/plan.schema.json",
        "title": "lanes --dry-run --json line",
        "description": "Each line of `lanes --dry-run --json` is one of these, told apart by \
            their `type`: a `plan` header first, then `planned`, `not_run`, `skipped` and \
            `invalid` lines.",
        "allOf": [line],
    });
    schema.insert("$defs".to_owned(), generator.take_definitions(true).into());
    schema
}

/// The plan for people.
struct Text<'a> {
    header: PlanHeader,
    reserve_after: Option<std::time::Duration>,
    by_key: Vec<(Arc<str>, Vec<PlannedRun>)>,
    dropped: &'a [u64],
    skipped: Vec<(u64, Before)>,
    invalid: Vec<(u64, String)>,
}

impl Text<'_> {
    fn render(&self) -> String {
        let header = &self.header;
        let cap = if header.shared_by_weight {
            format!("-j {} shared by weight", header.max_concurrent)
        } else {
            format!("at most {} at once", header.max_concurrent)
        };
        let mut out = format!(
            "lanes: dry run of {} in {}, {cap}: nothing runs\n",
            plural(header.jobs, "job"),
            plural(header.keys, "key"),
        );
        if let Some(reserve_after) = self.reserve_after {
            // Rounds of 1 ms: a share is set aside only after many rounds.
            let _ = writeln!(
                out,
                "lanes: --reserve-after {} counts the plan's rounds of 1 ms: a job short of its \
                 share is planned behind the lighter jobs that fit, as in a run whose jobs end \
                 one by one, until it has waited that long; a run of longer jobs sets its share \
                 aside after fewer of them",
                humantime::format_duration(reserve_after)
            );
        }
        // A key whose every job would never start (rejected, superseded) has no rows.
        for (key, runs) in self.by_key.iter().filter(|(_, runs)| !runs.is_empty()) {
            // Keys and commands shown with their control characters escaped, as in prefixes:
            // a line of the plan is one line, and nothing in it moves the cursor.
            let _ = writeln!(out, "[{}]", escape_controls(key));
            for run in runs {
                let _ = write!(out, "  seq {}", run.seq);
                if let Some(batch) = run.batch.as_ref().filter(|batch| batch.len() > 1) {
                    let _ = write!(out, " (batch of {}: {batch:?})", batch.len());
                }
                let _ = write!(out, "  round {}  slot {}", run.round, run.slot);
                // What it would hold, as its `LANES_RESOURCE_<NAME>` would say.
                if run.weight != 1 || !run.resources.is_empty() {
                    out.push_str("  holds");
                    if run.weight != 1 {
                        let _ = write!(out, " weight={}", run.weight);
                    }
                    for (name, value) in &run.resources {
                        let _ = write!(out, " {name}={value}");
                    }
                }
                let _ = write!(out, "  {}", shown_command(&run.command));
                if let Some(newer) = run.superseded_by {
                    let _ = write!(
                        out,
                        "  (stopped as it starts: superseded by seq {newer}, \
                         --cancel-in-progress)"
                    );
                }
                out.push('\n');
            }
        }
        for seq in self.dropped {
            let _ = writeln!(out, "not run: seq {seq} (superseded or rejected)");
        }
        for (seq, why) in &self.skipped {
            let done = match why {
                Before::SucceededBefore => "succeeded",
                Before::SupersededBefore => "superseded by a newer job of its key",
            };
            let _ = writeln!(out, "skipped: seq {seq} ({done} in the --resume report)");
        }
        for (line, message) in &self.invalid {
            let _ = writeln!(out, "invalid: line {line}: {}", escape_controls(message));
        }
        out
    }
}

/// A command as a row of the plan shows it: as it is, unless it holds a character that
/// [`is_hidden`] would escape (or starts with `$'`, and so would look like one that did). Then
/// it is quoted as bash's ANSI-C quoting reads it (`$'…'`, bash(1), "QUOTING"): `\\` for a
/// backslash, `\'` for a quote, `\n`, `\t`, `\r`, `\e`, `\xHH` for the other C0 controls and
/// DEL, and for each UTF-8 byte of the rest. A newline and a backslash followed by `n` then
/// never look alike, and `bash -c $'…'` runs exactly the command, in any locale.
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
            // Its UTF-8 bytes: bash reads `\uHHHH` as the character only in a UTF-8 locale.
            c if is_hidden(c) => {
                for byte in c.encode_utf8(&mut [0; 4]).bytes() {
                    let _ = write!(shown, "\\x{byte:02x}");
                }
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
            "$'x\\e[1m\\xe2\\x80\\xae\\x7f'"
        );
        // Starting like a quoted row, it is quoted too.
        assert_eq!(shown_command("$'a'"), "$'$\\'a\\''");
    }
}
