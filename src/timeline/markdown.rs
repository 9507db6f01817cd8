//! The timeline as Markdown, for `$GITHUB_STEP_SUMMARY`: a Mermaid Gantt chart of the keys
//! (each key's chain, from its first wait to its last end; at most [`GANTT_KEYS`] keys, the
//! slowest, so that the chart stays readable and within what renderers accept) and short
//! tables of the run's figures. Report text goes into the chart only as letters, digits and a
//! few safe marks (Mermaid has no escaping that every renderer honours), and into the tables
//! with Markdown and HTML markup escaped.

use std::collections::BTreeMap;
use std::io::{self, Write};

use super::html::{duration, shortened};
use super::model::{Body, Timeline};
use crate::output::framing::is_hidden;

/// The most keys the Gantt chart shows.
pub(crate) const GANTT_KEYS: usize = 30;

/// The chart's time axis. Mermaid reads the times (`dateFormat x`) as moments since 1970 and
/// labels them in the reader's time zone, in which only the minutes and seconds of a time are
/// those of the run's elapsed time: a run of an hour or more is drawn with its times divided
/// (a minute of the chart an hour of the run, or a day), the title saying so.
struct Axis {
    /// The run's milliseconds per millisecond of the chart.
    per_ms: u64,
    /// Mermaid's `axisFormat`.
    format: &'static str,
    /// Appended to the title: the axis's unit, when it is not minutes and seconds.
    unit: &'static str,
}

impl Axis {
    /// The axis for a run of `wall_ms`.
    fn for_wall(wall_ms: u64) -> Axis {
        const HOUR_MS: u64 = 3_600_000;
        if wall_ms < HOUR_MS {
            Axis {
                per_ms: 1,
                format: "%M:%S",
                unit: "",
            }
        } else if wall_ms < 60 * HOUR_MS {
            Axis {
                per_ms: 60,
                format: "%M:%S",
                unit: " (axis in hours:minutes)",
            }
        } else {
            Axis {
                per_ms: 24 * 60,
                format: "%M",
                unit: " (axis in days)",
            }
        }
    }
}

/// What every task name of the chart begins with: Mermaid's Gantt lexer reads a line that
/// begins with one of its keywords (`title`, `section`, `dateFormat`, `excludes`, `click`,
/// `todayMarker`...) as that directive, and `key` is none of them.
const TASK_PREFIX: &str = "key ";

/// The most characters of a key a chart's task name shows (then `…`).
const NAME_CHARS: usize = 40;

/// The most characters of a key a table cell shows (then `…`).
const CELL_CHARS: usize = 80;

/// `text` reduced to what is safe in a Mermaid task name: other characters become `_`; at
/// most [`NAME_CHARS`] characters (the last then `…`); after [`TASK_PREFIX`], so that no key
/// is read as a directive.
fn mermaid_name(text: &str) -> String {
    let mut name: String = shortened(text, NAME_CHARS)
        .chars()
        .map(|c| {
            if c.is_alphanumeric() || " _-./+=@()[]…".contains(c) {
                c
            } else {
                '_'
            }
        })
        .collect();
    if name.trim().is_empty() {
        name = "_".into();
    }
    format!("{TASK_PREFIX}{name}")
}

/// `text` for a Markdown table cell: markup characters as HTML entities, control characters
/// shown as `\u{..}`.
fn cell(text: &str) -> String {
    let mut out = String::new();
    for c in text.chars() {
        match c {
            '|' => out.push_str("&#124;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '&' => out.push_str("&amp;"),
            '`' => out.push_str("&#96;"),
            '*' | '_' | '[' | ']' | '\\' | '#' | '~' | '!' => {
                out.push('\\');
                out.push(c);
            }
            c if is_hidden(c) => out.push_str(&format!("\\u{{{:x}}}", c as u32)),
            c => out.push(c),
        }
    }
    out
}

/// Per key row: (label, first ms, last ms, failed, running).
fn key_spans(timeline: &Timeline) -> Vec<(String, u64, u64, bool, bool)> {
    let mut spans: BTreeMap<u32, (u64, u64, bool, bool)> = BTreeMap::new();
    let mut add = |row: u32, start: u64, end: u64, class: u8, run: bool| {
        let entry = spans.entry(row).or_insert((u64::MAX, 0, false, false));
        entry.0 = entry.0.min(start);
        entry.1 = entry.1.max(end);
        // Failed for good (a retried try is class 11).
        if run && class == 1 {
            entry.2 = true;
        }
        if run && class == 5 {
            entry.3 = true;
        }
    };
    let rows = match &timeline.body {
        Body::Detail(detail) => {
            for bar in &detail.bars {
                add(bar.0, bar.1, bar.2, bar.4, bar.3 == 0);
            }
            &detail.rows
        }
        Body::Aggregate(aggregate) => {
            for c in &aggregate.cells {
                let start = u64::from(c.1) * aggregate.bucket_ms;
                add(c.0, start, start + aggregate.bucket_ms, c.3, c.2 == 0);
            }
            &aggregate.rows
        }
    };
    spans
        .into_iter()
        .filter(|(row, _)| rows[*row as usize].kind == "key")
        .map(|(row, (a, b, failed, running))| {
            (rows[row as usize].label.clone(), a, b, failed, running)
        })
        .collect()
}

/// Writes the Markdown.
pub(crate) fn write(timeline: &Timeline, out: &mut impl Write) -> io::Result<()> {
    let f = &timeline.figures;
    writeln!(out, "## lanes timeline\n")?;
    let outcomes: Vec<String> = f.outcomes.iter().map(|(o, n)| format!("{n} {o}")).collect();
    writeln!(
        out,
        "{}{} over {}; wall time {}; utilisation {:.0}% of `{}`{}.\n",
        crate::plural::plural(f.jobs, "job"),
        if outcomes.is_empty() {
            String::new()
        } else {
            format!(" ({})", outcomes.join(", "))
        },
        crate::plural::plural(f.keys, "key"),
        duration(f.wall_ms),
        f.utilisation * 100.0,
        f.cap_text(),
        match (f.finished, f.running + f.waiting + f.ended) {
            (true, _) if f.exit_code.unwrap_or(0) == 0 => String::new(),
            (true, _) => format!(" ({})", f.end_text()),
            (false, 0) => " (the run had not finished)".to_owned(),
            (false, _) => format!(
                " (the run had not finished; jobs with no record yet: {})",
                f.unrecorded_text()
            ),
        }
    )?;
    let mut keys = key_spans(timeline);
    let total = keys.len();
    keys.sort_by(|a, b| (b.2 - b.1).cmp(&(a.2 - a.1)).then(a.0.cmp(&b.0)));
    keys.truncate(GANTT_KEYS);
    keys.sort_by(|a, b| a.1.cmp(&b.1).then(a.0.cmp(&b.0)));
    let axis = Axis::for_wall(f.wall_ms);
    writeln!(out, "```mermaid\ngantt")?;
    writeln!(
        out,
        "    title Keys, from first wait to last end{}",
        axis.unit
    )?;
    writeln!(out, "    dateFormat x\n    axisFormat {}", axis.format)?;
    writeln!(out, "    section keys")?;
    for &(ref label, start, end, failed, running) in &keys {
        // An aggregated run's cells end on a bucket's end, which may be past the run's.
        let end = end.min(f.wall_ms.max(start)) / axis.per_ms;
        let start = start / axis.per_ms;
        let tag = if failed {
            "crit, "
        } else if running {
            "active, "
        } else {
            ""
        };
        writeln!(
            out,
            "    {} :{tag}{start}, {}",
            mermaid_name(label),
            end.max(start + 1)
        )?;
    }
    writeln!(out, "```\n")?;
    let aggregated = matches!(timeline.body, Body::Aggregate(_));
    if aggregated {
        // Its rows are the busiest keys, not every key: the slowest of them, said so.
        writeln!(
            out,
            "The run is drawn aggregated ({}: too many to draw one by one): the chart shows \
             the {} slowest of its {total} busiest keys (the run has {}), to the resolution of \
             {} time buckets; the table below names the slowest of all its keys.\n",
            f.jobs_text(),
            keys.len(),
            f.keys,
            super::model::BUCKETS
        )?;
    } else if total > keys.len() {
        writeln!(
            out,
            "The chart shows the {} slowest of {total} keys.\n",
            keys.len()
        )?;
    }
    if !f.slowest_keys.is_empty() {
        writeln!(out, "| slowest key | chain | jobs | running | waiting |")?;
        writeln!(out, "|---|---:|---:|---:|---:|")?;
        for key in &f.slowest_keys {
            writeln!(
                out,
                "| {} | {} | {} | {} | {} |",
                cell(&shortened(&key.key, CELL_CHARS)),
                duration(key.chain_ms),
                key.jobs,
                duration(key.busy_ms),
                duration(key.wait_ms)
            )?;
        }
        writeln!(out)?;
    }
    if !f.longest_waits.is_empty() {
        writeln!(out, "| longest wait | key | waited | mostly |")?;
        writeln!(out, "|---:|---|---:|---|")?;
        for wait in &f.longest_waits {
            let behind = wait
                .behind
                .map(|b| format!(" behind job {b}"))
                .unwrap_or_default();
            writeln!(
                out,
                "| job {} | {} | {} | {}{behind} |",
                wait.seq,
                cell(&shortened(&wait.key, CELL_CHARS)),
                duration(wait.wait_ms),
                cell(&wait.cause)
            )?;
        }
        writeln!(out)?;
    }
    if !f.waits.is_empty() {
        let causes: Vec<String> = f
            .waits
            .iter()
            .map(|(cause, ms)| format!("{} {}", cell(cause), duration(*ms)))
            .collect();
        writeln!(out, "Waiting by cause: {}.", causes.join(", "))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mermaid_names_keep_no_syntax() {
        assert_eq!(mermaid_name("a:b;c#d<e>\n"), "key a_b_c_d_e__");
        assert_eq!(mermaid_name(""), "key _");
        assert_eq!(
            mermaid_name(&"x".repeat(50)),
            format!("key {}…", "x".repeat(39))
        );
    }

    /// Every directive of Mermaid's Gantt grammar (`gantt.jison`), as a key: none may begin
    /// a task line.
    #[test]
    fn the_axis_of_a_long_run_is_in_hours_or_days_and_says_so() {
        let short = Axis::for_wall(3_599_999);
        assert_eq!((short.per_ms, short.format, short.unit), (1, "%M:%S", ""));
        // Two hours: a chart minute per hour of the run, so 02:00 on the axis.
        let hours = Axis::for_wall(7_200_000);
        assert_eq!(
            7_200_000 / hours.per_ms,
            120_000,
            "two minutes of the chart"
        );
        assert_eq!(hours.unit, " (axis in hours:minutes)");
        // Forty days: a chart minute per day.
        let days = Axis::for_wall(40 * 86_400_000);
        assert_eq!(
            40 * 86_400_000 / days.per_ms,
            40 * 60_000,
            "forty minutes of the chart"
        );
        assert_eq!((days.format, days.unit), ("%M", " (axis in days)"));
    }

    #[test]
    fn no_key_becomes_a_mermaid_directive() {
        for key in [
            "dateFormat YYYY",
            "title pwned",
            "section x",
            "excludes weekends",
            "includes 2026-01-01",
            "todayMarker off",
            "click x href javascript:alert(1)",
            "axisFormat %Y",
            "tickInterval 1day",
            "inclusiveEndDates",
            "topAxis",
            "weekday monday",
            "weekend friday",
            "accTitle: x",
            "accDescr: x",
            "%% comment",
            "  title indented",
        ] {
            let name = mermaid_name(key);
            assert!(name.starts_with("key "), "{key:?} -> {name:?}");
            assert!(!name.contains([':', ';', '#', '%', '\n']), "{name:?}");
        }
    }

    #[test]
    fn table_cells_escape_markup() {
        assert_eq!(cell("a|<b>*`\u{7}"), "a&#124;&lt;b&gt;\\*&#96;\\u{7}");
        assert_eq!(cell("a\u{202e}b\u{2028}"), "a\\u{202e}b\\u{2028}");
    }
}
