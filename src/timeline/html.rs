//! The HTML timeline: one self-contained page (no network): a header of the run's figures
//! written here as escaped text, and the rows and bars drawn as SVG by a small script from
//! the data embedded in the page as JSON (escaped so that no text of the report can end the
//! script element or open a comment).

use std::io::{self, Write};

use super::model::{Body, Timeline, CAUSES, OUTCOMES};

const STYLE: &str = include_str!("page.css");
const SCRIPT: &str = include_str!("page.js");

/// `text` escaped for HTML text and attribute values; control characters other than tab and
/// newline shown as `\u{..}`, so that nothing of a key or command is hidden or taken as markup.
pub(crate) fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            '\t' | '\n' => out.push(c),
            c if c.is_control() => out.push_str(&format!("\\u{{{:x}}}", c as u32)),
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
        _ => format!("{} min {} s", ms / 60_000, (ms % 60_000 + 500) / 1000),
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
    let state = if f.finished {
        "finished"
    } else {
        "not finished (no summary: interrupted, or still being written)"
    };
    writeln!(
        out,
        "<p class=\"note\">Run started {}; {}.</p>",
        escape(&f.started_at),
        state
    )?;
    writeln!(out, "<div id=\"figures\"><table>")?;
    let outcomes: Vec<String> = f
        .outcomes
        .iter()
        .map(|(o, n)| format!("{n} {}", escape(o)))
        .collect();
    let rows = [
        ("wall time", duration(f.wall_ms)),
        ("jobs", format!("{} ({})", f.jobs, outcomes.join(", "))),
        ("keys", f.keys.to_string()),
        (
            "utilisation",
            format!(
                "{:.0}% of -j {} ({} busy)",
                f.utilisation * 100.0,
                f.max_concurrent,
                duration(f.busy_ms)
            ),
        ),
        ("retried tries", f.retries.to_string()),
        ("superseded", f.superseded.to_string()),
        ("still in flight", f.in_flight.to_string()),
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
            escape(&key.key),
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
            escape(&wait.key),
            duration(wait.wait_ms),
            escape(&wait.cause),
            behind
        )?;
    }
    writeln!(out, "</table></div>")?;
    if let Body::Aggregate(aggregate) = &timeline.body {
        writeln!(
            out,
            "<p class=\"note\" id=\"aggregated\">{} jobs: too many to draw one by one, so this \
             timeline is aggregated: a row for each of the {} busiest keys, one for the others \
             and a row per slot (or group of slots), in buckets of {}; a cell's shade is the \
             share of its row's capacity that was running (or waiting).</p>",
            f.jobs,
            aggregate.rows.iter().filter(|r| r.kind == "key").count(),
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
    fn embedded_json_cannot_end_its_script_or_open_a_comment() {
        let json = embeddable_json(&serde_json::json!({"k": "</script><!--\u{2028}&"}));
        assert!(!json.contains('<') && !json.contains('>') && !json.contains('&'));
        assert!(!json.contains('\u{2028}'));
        let back: serde_json::Value = serde_json::from_str(&json).unwrap();
        assert_eq!(back["k"], "</script><!--\u{2028}&");
    }
}
