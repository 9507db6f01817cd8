//! The man page's reference sections (input formats, how jobs run, signals, the report and
//! events fields, exit statuses, environment), rendered to roff from the README's sections of
//! the same names, so that both say the same: the README is their one source and the
//! generated-files test keeps `man/lanes.1` current with it.
//!
//! Only the Markdown the README uses is understood: `###` headings, paragraphs, `-` lists (one
//! level of nesting), fenced code blocks, tables, `` `code` `` and `**bold**`.

/// The README sections in the man page, as (man section name, README `##` heading).
pub(crate) const SECTIONS: [(&str, &str); 6] = [
    ("INPUT", "Input"),
    ("HOW JOBS RUN", "How jobs run"),
    ("SIGNALS", "Ctrl-C and other signals"),
    ("REPORT", "The report (JSON Lines)"),
    ("EXIT STATUS", "Exit status"),
    ("ENVIRONMENT", "Environment"),
];

/// The roff of every section in [`SECTIONS`], taken from `readme`.
///
/// # Errors
/// A heading of [`SECTIONS`] is not in `readme`.
pub(crate) fn render(readme: &str) -> Result<String, String> {
    let mut out = String::new();
    for (name, heading) in SECTIONS {
        let body = section(readme, heading)
            .ok_or_else(|| format!("README.md has no `## {heading}` section"))?;
        out.push_str(&format!(".SH \"{name}\"\n"));
        out.push_str(&to_roff(body));
    }
    Ok(out)
}

/// The text of the `## heading` section, up to the next `## ` heading.
fn section<'a>(readme: &'a str, heading: &str) -> Option<&'a str> {
    let title = format!("## {heading}\n");
    let start = if readme.starts_with(&title) {
        title.len()
    } else {
        readme.find(&format!("\n{title}"))? + 1 + title.len()
    };
    let rest = &readme[start..];
    let end = rest.find("\n## ").map_or(rest.len(), |at| at + 1);
    Some(&rest[..end])
}

/// What the lines being gathered are.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Block {
    Paragraph,
    Item { nested: bool },
}

fn to_roff(markdown: &str) -> String {
    let mut out = String::new();
    let mut text = String::new();
    let mut block = Block::Paragraph;
    let mut in_code = false;
    let mut table_row = 0;
    let flush = |out: &mut String, text: &mut String, block: Block| {
        if text.is_empty() {
            return;
        }
        match block {
            Block::Paragraph => out.push_str(".PP\n"),
            Block::Item { nested: false } => out.push_str(".IP \\(bu 2\n"),
            Block::Item { nested: true } => out.push_str(".IP \\(bu 4\n"),
        }
        out.push_str(&line(&inline(text.trim())));
        out.push('\n');
        text.clear();
    };
    for raw in markdown.lines() {
        if raw.starts_with("```") {
            flush(&mut out, &mut text, block);
            out.push_str(if in_code {
                ".fi\n.RE\n"
            } else {
                ".RS 4\n.nf\n"
            });
            in_code = !in_code;
            continue;
        }
        if in_code {
            out.push_str(&line(&escape(raw)));
            out.push('\n');
            continue;
        }
        if raw.starts_with("<!--") {
            continue;
        }
        if let Some(row) = raw.strip_prefix('|') {
            flush(&mut out, &mut text, block);
            table_row += 1;
            // The header and the separator are the first two rows.
            if table_row > 2 {
                let cells = split_row(row);
                out.push_str(".TP\n");
                out.push_str(&line(&inline(cells[0].trim())));
                out.push('\n');
                let rest: Vec<String> = cells[1..]
                    .iter()
                    .map(|cell| inline(cell.trim()))
                    .filter(|cell| !cell.is_empty())
                    .collect();
                out.push_str(&line(&rest.join(" \\(em ")));
                out.push('\n');
            }
            continue;
        }
        table_row = 0;
        if raw.trim().is_empty() {
            flush(&mut out, &mut text, block);
            block = Block::Paragraph;
            continue;
        }
        if let Some(heading) = raw.strip_prefix("### ") {
            flush(&mut out, &mut text, block);
            out.push_str(&format!(
                ".SS \"{}\"\n",
                inline(heading).replace('"', "\\(dq")
            ));
            block = Block::Paragraph;
            continue;
        }
        let item = if let Some(item) = raw.strip_prefix("- ") {
            Some((item, false))
        } else {
            raw.strip_prefix("  - ").map(|item| (item, true))
        };
        if let Some((item, nested)) = item {
            flush(&mut out, &mut text, block);
            block = Block::Item { nested };
            text.push_str(item);
            continue;
        }
        text.push(' ');
        text.push_str(raw.trim());
    }
    flush(&mut out, &mut text, block);
    out
}

/// The cells of a table row (without its leading `|`), `\|` unescaped.
fn split_row(row: &str) -> Vec<String> {
    let row = row.strip_suffix('|').unwrap_or(row);
    let mut cells = vec![String::new()];
    let mut chars = row.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '\\' if chars.peek() == Some(&'|') => {
                chars.next();
                cells.last_mut().expect("never empty").push('|');
            }
            '|' => cells.push(String::new()),
            c => cells.last_mut().expect("never empty").push(c),
        }
    }
    cells
}

/// Inline Markdown to roff: code spans and bold in bold, the rest escaped.
fn inline(text: &str) -> String {
    let mut out = String::new();
    for (i, part) in text.split('`').enumerate() {
        if i % 2 == 1 {
            out.push_str("\\fB");
            out.push_str(&escape(part).replace('-', "\\-"));
            out.push_str("\\fR");
            continue;
        }
        for (j, piece) in part.split("**").enumerate() {
            if j % 2 == 1 {
                out.push_str("\\fB");
                out.push_str(&escape(piece));
                out.push_str("\\fR");
            } else {
                out.push_str(&escape(piece));
            }
        }
    }
    out
}

/// Escapes roff's escape character.
fn escape(text: &str) -> String {
    text.replace('\\', "\\e")
}

/// A roff text line: one that starts with a control character is protected with `\&`.
fn line(text: &str) -> String {
    if text.starts_with('.') || text.starts_with('\'') {
        format!("\\&{text}")
    } else {
        text.to_owned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn markdown_becomes_roff() {
        let readme = "# t\n\n## Exit status\nSome `--x` text\nand **more**.\n\n\
                      - item `a\\b`\n  continued\n  - nested\n\n\
                      | a | b |\n|---|---|\n| `x \\| y` | z |\n\n```sh\n.dot\n```\n## Next\nno\n";
        let body = section(readme, "Exit status").unwrap();
        assert!(!body.contains("Next"));
        assert_eq!(
            to_roff(body),
            ".PP\nSome \\fB\\-\\-x\\fR text and \\fBmore\\fR.\n\
             .IP \\(bu 2\nitem \\fBa\\eb\\fR continued\n\
             .IP \\(bu 4\nnested\n\
             .TP\n\\fBx | y\\fR\nz\n\
             .RS 4\n.nf\n\\&.dot\n.fi\n.RE\n"
        );
    }

    #[test]
    fn a_missing_section_is_named() {
        let err = render("## Input\n").unwrap_err();
        assert!(err.contains("How jobs run"), "{err}");
    }
}
