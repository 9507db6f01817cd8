//! The HTML timeline: one self-contained page (no network): a header of the run's figures
//! written here as escaped text, and the rows and bars drawn as SVG by a small script from
//! the data embedded in the page as JSON (escaped so that no text of the report can end the
//! script element or open a comment).

use std::io::{self, Write};

use super::model::{Body, Timeline, CAUSES, OUTCOMES};

use crate::output::framing::is_hidden;

const STYLE: &str = include_str!("page.css");
const SCRIPT: &str = include_str!("page.js");

/// `text` shortened to `limit` characters, the last of them `…`, when longer.
pub(crate) fn shortened(text: &str, limit: usize) -> std::borrow::Cow<'_, str> {
    if text.chars().nth(limit).is_none() {
        return text.into();
    }
    let mut short: String = text.chars().take(limit - 1).collect();
    short.push('…');
    short.into()
}

/// The most characters of a key the header's tables show (the whole key on hover).
const KEY_CHARS: usize = 60;

/// A key for the header's tables: cut to [`KEY_CHARS`], the whole key as its title.
fn key_html(key: &str) -> String {
    let short = shortened(key, KEY_CHARS);
    if short.len() == key.len() {
        escape(key)
    } else {
        format!("<span title=\"{}\">{}</span>", escape(key), escape(&short))
    }
}

/// `text` escaped for HTML text and attribute values; control characters (tab and newline
/// too: HTML shows them as a space) and the other [`hidden`] characters shown as `\u{..}`, so
/// that nothing of a key or command is hidden or taken as markup.
pub(crate) fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c if is_hidden(c) => out.push_str(&format!("\\u{{{:x}}}", c as u32)),
            c => out.push(c),
        }
    }
    out
}

/// JSON to embed in a `<script type="application/json">` element: `<`, `>` and `&` as
/// `\u003c`, `\u003e`, `\u0026` (so neither `</script>` nor `<!--` can appear), and the line
/// separators U+2028 and U+2029 escaped too.
pub(crate) fn embeddable_json(value: &impl serde::Serialize) -> String {
    let json = serde_json::to_string(value).expect("timeline data serialises");
    let mut out = String::with_capacity(json.len() + json.len() / 16);
    for c in json.chars() {
        match c {
            '<' => out.push_str("\\u003c"),
            '>' => out.push_str("\\u003e"),
            '&' => out.push_str("\\u0026"),
            '\u{2028}' => out.push_str("\\u2028"),
            '\u{2029}' => out.push_str("\\u2029"),
            c => out.push(c),
        }
    }
    out
}

/// `ms` for people.
pub(crate) fn duration(ms: u64) -> String {
    match ms {
        0..1_000 => format!("{ms} ms"),
        1_000..60_000 => format!("{:.2} s", ms as f64 / 1000.0),
        60_000..3_600_000 => format!("{} min {} s", ms / 60_000, (ms % 60_000) / 1000),
        3_600_000..86_400_000 => format!("{} h {} min", ms / 3_600_000, (ms % 3_600_000) / 60_000),
        _ => format!("{} d {} h", ms / 86_400_000, (ms % 86_400_000) / 3_600_000),
    }
}

/// Writes the page.
pub(crate) fn write(timeline: &Timeline, out: &mut impl Write) -> io::Result<()> {
    let f = &timeline.figures;
    let title = format!("lanes timeline: {}", f.report);
    writeln!(out, "<!DOCTYPE html>")?;
    writeln!(out, "<html lang=\"en\"><head><meta charset=\"utf-8\">")?;
    writeln!(
        out,
        "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">"
    )?;
    writeln!(
        out,
        "<meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'; \
         style-src 'unsafe-inline'; script-src 'unsafe-inline'\">"
    )?;
    writeln!(out, "<title>{}</title>", escape(&title))?;
    writeln!(out, "<style>{STYLE}</style></head><body>")?;
    writeln!(out, "<h1>{}</h1>", escape(&title))?;
    writeln!(
        out,
        "<p class=\"note\">Run started {}; {}.</p>",
        escape(&f.started_at),
        f.end_text()
    )?;
    writeln!(out, "<div id=\"figures\"><table>")?;
    let outcomes: Vec<String> = f
        .outcomes
        .iter()
        .map(|(o, n)| format!("{n} {}", escape(o)))
        .collect();
    let rows = [
        ("wall time", duration(f.wall_ms)),
        (
            "jobs",
            if outcomes.is_empty() {
                f.jobs.to_string()
            } else {
                format!("{} ({})", f.jobs, outcomes.join(", "))
            },
        ),
        ("keys", f.keys.to_string()),
        (
            "utilisation",
            format!(
                "{:.0}% of {} ({} busy)",
                f.utilisation * 100.0,
                f.cap_text(),
                duration(f.busy_ms)
            ),
        ),
        ("retried tries", f.retries.to_string()),
        ("superseded", f.superseded.to_string()),
        ("no record yet", f.unrecorded_text()),
    ];
    for (name, value) in rows {
        writeln!(out, "<tr><th>{name}</th><td>{value}</td></tr>")?;
    }
    writeln!(
        out,
        "</table><table><tr><th colspan=\"2\">waiting, by cause</th></tr>"
    )?;
    for (cause, ms) in &f.waits {
        writeln!(
            out,
            "<tr><td>{}</td><td>{}</td></tr>",
            escape(cause),
            duration(*ms)
        )?;
    }
    writeln!(
        out,
        "</table><table><tr><th colspan=\"3\">slowest keys (first wait to last end: the key's \
         critical path)</th></tr>"
    )?;
    for key in &f.slowest_keys {
        writeln!(
            out,
            "<tr><td>{}</td><td>{}</td><td>{} job{}, {} running, {} waiting</td></tr>",
            key_html(&key.key),
            duration(key.chain_ms),
            key.jobs,
            if key.jobs == 1 { "" } else { "s" },
            duration(key.busy_ms),
            duration(key.wait_ms)
        )?;
    }
    writeln!(
        out,
        "</table><table><tr><th colspan=\"3\">longest waits</th></tr>"
    )?;
    for wait in &f.longest_waits {
        let behind = wait
            .behind
            .map(|b| format!(" behind job {b}"))
            .unwrap_or_default();
        writeln!(
            out,
            "<tr><td>job {} ({})</td><td>{}</td><td>mostly {}{}</td></tr>",
            wait.seq,
            key_html(&wait.key),
            duration(wait.wait_ms),
            escape(&wait.cause),
            behind
        )?;
    }
    writeln!(out, "</table></div>")?;
    if let Body::Aggregate(aggregate) = &timeline.body {
        let keys = aggregate.rows.iter().filter(|r| r.kind == "key").count();
        // A row for the other keys only when there are others.
        let rows = if aggregate.rows.iter().any(|r| r.kind == "keys") {
            format!("a row for each of the {keys} busiest keys, one for the others")
        } else {
            format!(
                "a row for each of the {}",
                crate::plural::plural(keys as u64, "key")
            )
        };
        writeln!(
            out,
            "<p class=\"note\" id=\"aggregated\">{}: too many to draw one by one, so this \
             timeline is aggregated: {rows} and a row per slot (or group of slots), in buckets \
             of {}; a cell's shade is the share of its row's capacity that was running (or \
             waiting).</p>",
            f.jobs_text(),
            duration(aggregate.bucket_ms)
        )?;
    }
    write!(out, "<div id=\"legend\">")?;
    for outcome in OUTCOMES {
        write!(
            out,
            "<span style=\"--c: var(--{outcome})\">{outcome}</span>"
        )?;
    }
    for cause in CAUSES {
        write!(
            out,
            "<span class=\"wait\" style=\"--c: var(--{cause})\">waiting: {cause}</span>"
        )?;
    }
    writeln!(
        out,
        "<span class=\"note\">dashed: a try that was retried; faded: superseded; a thin line: \
         a job that never ran</span></div>"
    )?;
    writeln!(
        out,
        "<p class=\"note\">Wheel to zoom, drag to pan; or focus the chart and use <kbd>+</kbd> \
         <kbd>-</kbd> <kbd>0</kbd> to zoom, <kbd>\u{2190}</kbd> <kbd>\u{2192}</kbd> to pan, \
         <kbd>n</kbd> <kbd>p</kbd> to step through the bars, <kbd>Esc</kbd> to clear.</p>"
    )?;
    writeln!(
        out,
        "<div id=\"chart\" tabindex=\"0\" aria-label=\"timeline chart; keys: plus and minus \
         zoom, arrows pan, n and p select bars\"></div>"
    )?;
    writeln!(
        out,
        "<div id=\"details\" aria-live=\"polite\">Select a bar (click, or n and p) to see its \
         record.</div><div id=\"tip\"></div>"
    )?;
    writeln!(
        out,
        "<p id=\"status\" class=\"note\" data-state=\"loading\" data-errors=\"0\">The timeline \
         needs JavaScript to draw.</p>"
    )?;
    let data = serde_json::json!({
        "figures": &timeline.figures,
        "body": &timeline.body,
        "outcomes": OUTCOMES,
        "causes": CAUSES,
    });
    write!(
        out,
        "<script type=\"application/json\" id=\"timeline-data\">"
    )?;
    out.write_all(embeddable_json(&data).as_bytes())?;
    writeln!(out, "</script>")?;
    writeln!(out, "<script>{SCRIPT}</script>")?;
    writeln!(out, "</body></html>")?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn markup_in_text_is_escaped_and_controls_are_shown() {
        assert_eq!(
            escape("<script>\"x\"&'y'\u{1}</script>"),
            "&lt;script&gt;&quot;x&quot;&amp;&#39;y&#39;\\u{1}&lt;/script&gt;"
        );
    }

    #[test]
    fn bidi_overrides_and_line_separators_are_shown() {
        assert_eq!(
            escape("a\u{202e}b\u{2066}c\u{2028}d\u{2029}e\u{1b}[31m\u{85}"),
            "a\\u{202e}b\\u{2066}c\\u{2028}d\\u{2029}e\\u{1b}[31m\\u{85}"
        );
        assert_eq!(escape("a\tb\nc"), "a\\u{9}b\\u{a}c");
    }

    #[test]
    fn long_keys_are_cut_with_the_whole_key_on_hover() {
        let key = "k".repeat(100);
        let html = key_html(&key);
        assert!(html.contains(&format!("title=\"{key}\"")), "{html}");
        assert!(
            html.contains(&format!(">{}…<", "k".repeat(KEY_CHARS - 1))),
            "{html}"
        );
        assert_eq!(key_html("short"), "short");
    }

    #[test]
    fn long_durations_are_told_in_hours_and_days() {
        assert_eq!(duration(61_000), "1 min 1 s");
        assert_eq!(duration(3 * 3_600_000 + 5 * 60_000), "3 h 5 min");
        assert_eq!(duration(2_117_822 * 60_000), "1470 d 17 h");
    }

    /// Every outcome and cause has a colour of its own in both themes: no two closer than 50
    /// (Euclidean distance in RGB, 0–255 each).
    #[test]
    fn outcomes_and_causes_have_distinct_colours_in_both_themes() {
        let (light, dark) = STYLE
            .split_once("@media (prefers-color-scheme: dark)")
            .unwrap();
        for theme in [light, dark] {
            let colour = |name: &str| -> [i32; 3] {
                let at = theme.find(&format!("--{name}: #")).unwrap() + name.len() + 5;
                let hex = &theme[at..at + 6];
                let byte = |i: usize| i32::from_str_radix(&hex[i..i + 2], 16).unwrap();
                [byte(0), byte(2), byte(4)]
            };
            let names: Vec<&str> = OUTCOMES.iter().chain(CAUSES.iter()).copied().collect();
            for (i, a) in names.iter().enumerate() {
                for b in &names[i + 1..] {
                    let (x, y) = (colour(a), colour(b));
                    let d2: i32 = (0..3).map(|k| (x[k] - y[k]).pow(2)).sum();
                    assert!(d2 >= 50 * 50, "{a} and {b} look alike: {x:?} {y:?}");
                }
            }
        }
    }

    #[test]
    fn embedded_json_cannot_end_its_script_or_open_a_comment() {
        let json = embeddable_json(&serde_json::json!({"k": "</script><!--\u{2028}&"}));
        assert!(!json.contains('<') && !json.contains('>') && !json.contains('&'));
        assert!(!json.contains('\u{2028}'));
        let back: serde_json::Value = serde_json::from_str(&json).unwrap();
        assert_eq!(back["k"], "</script><!--\u{2028}&");
    }
}
