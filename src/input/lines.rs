//! The line format: one `KEY<TAB>COMMAND` job per line, split at the first tab (SPEC §1.1).

use std::io::BufRead;

/// What a line that is neither blank nor a comment holds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum LineItem {
    /// A job: the key (before the first tab) and the command (everything after it).
    Job { key: String, command: String },
    /// A malformed line; it still takes a `seq` and gets a `rejected` record.
    Invalid {
        /// The key when the line has a tab and the key part is valid UTF-8.
        key: Option<String>,
        /// Why the line is invalid, fit for a person.
        message: String,
    },
}

/// Parses one line, given without its `\n`; a trailing `\r` is removed first (CRLF input).
/// `None` for a blank line (only whitespace) or a comment (`#` first): no job, no `seq`.
pub(crate) fn parse_line(raw: &[u8]) -> Option<LineItem> {
    let raw = raw.strip_suffix(b"\r").unwrap_or(raw);
    if raw.iter().all(u8::is_ascii_whitespace) || raw.first() == Some(&b'#') {
        return None;
    }
    let Some(tab) = raw.iter().position(|&b| b == b'\t') else {
        return Some(invalid(
            None,
            "no tab between key and command (expected KEY<TAB>COMMAND)",
        ));
    };
    let (key, command) = (&raw[..tab], &raw[tab + 1..]);
    let key = match std::str::from_utf8(key) {
        Ok(key) => key,
        Err(err) => return Some(invalid(None, &not_utf8("key", err))),
    };
    let key_for_record = Some(key.to_owned());
    if key.is_empty() {
        return Some(invalid(key_for_record, "empty key before the tab"));
    }
    let command = match std::str::from_utf8(command) {
        Ok(command) => command,
        Err(err) => return Some(invalid(key_for_record, &not_utf8("command", err))),
    };
    if command.trim().is_empty() {
        return Some(invalid(key_for_record, "empty command after the tab"));
    }
    Some(LineItem::Job {
        key: key.to_owned(),
        command: command.to_owned(),
    })
}

fn invalid(key: Option<String>, message: &str) -> LineItem {
    LineItem::Invalid {
        key,
        message: message.to_owned(),
    }
}

fn not_utf8(part: &str, err: std::str::Utf8Error) -> String {
    format!(
        "the {part} is not valid UTF-8 (bad byte at offset {})",
        err.valid_up_to()
    )
}

/// A numbered line of input that is neither blank nor a comment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct NumberedLine {
    /// 1-based number among lines that are neither blank nor comments.
    pub seq: u64,
    /// 1-based physical line number in the input.
    pub line: u64,
    pub item: LineItem,
}

/// Reads `KEY<TAB>COMMAND` lines one at a time (streaming), numbering jobs and skipping blank
/// and comment lines. A last line without `\n` is a job.
pub(crate) struct LineReader<R> {
    input: R,
    buffer: Vec<u8>,
    line: u64,
    seq: u64,
}

impl<R: BufRead> LineReader<R> {
    /// Wraps a buffered reader.
    pub(crate) fn new(input: R) -> Self {
        LineReader {
            input,
            buffer: Vec::with_capacity(256),
            line: 0,
            seq: 0,
        }
    }
}

impl<R: BufRead> Iterator for LineReader<R> {
    type Item = std::io::Result<NumberedLine>;

    fn next(&mut self) -> Option<Self::Item> {
        loop {
            self.buffer.clear();
            match self.input.read_until(b'\n', &mut self.buffer) {
                Ok(0) => return None,
                Ok(_) => {}
                Err(err) if err.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(err) => return Some(Err(err)),
            }
            self.line += 1;
            let mut raw = self.buffer.strip_suffix(b"\n").unwrap_or(&self.buffer);
            if self.line == 1 {
                // A UTF-8 byte order mark is not part of the first key.
                raw = raw.strip_prefix(b"\xEF\xBB\xBF").unwrap_or(raw);
            }
            if let Some(item) = parse_line(raw) {
                self.seq += 1;
                return Some(Ok(NumberedLine {
                    seq: self.seq,
                    line: self.line,
                    item,
                }));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn job(key: &str, command: &str) -> LineItem {
        LineItem::Job {
            key: key.into(),
            command: command.into(),
        }
    }

    #[test]
    fn splits_at_the_first_tab_only() {
        assert_eq!(parse_line(b"c\tprintf x\ty"), Some(job("c", "printf x\ty")));
    }

    #[test]
    fn strips_crlf_and_keeps_odd_keys() {
        assert_eq!(
            parse_line(b"a b/../\xc3\xbc\techo\r"),
            Some(job("a b/../ü", "echo"))
        );
    }

    #[test]
    fn skips_blank_and_comment_lines() {
        for raw in [&b""[..], b"   ", b"\t", b" \t \r", b"# x\techo"] {
            assert_eq!(parse_line(raw), None, "{raw:?}");
        }
    }

    #[test]
    fn invalid_lines_say_why() {
        let cases: [(&[u8], Option<&str>, &str); 5] = [
            (b"no-tab", None, "no tab"),
            (b"\techo x", Some(""), "empty key"),
            (b"b\t   ", Some("b"), "empty command"),
            (b"d\techo \xff", Some("d"), "not valid UTF-8"),
            (b"\xff\techo", None, "not valid UTF-8"),
        ];
        for (raw, want_key, want_msg) in cases {
            match parse_line(raw) {
                Some(LineItem::Invalid { key, message }) => {
                    assert_eq!(key.as_deref(), want_key, "{raw:?}");
                    assert!(message.contains(want_msg), "{raw:?}: {message}");
                }
                other => panic!("{raw:?} parsed as {other:?}"),
            }
        }
    }

    #[test]
    fn a_byte_order_mark_is_not_part_of_the_first_key() {
        let input = b"\xEF\xBB\xBFa\techo\n";
        let got: Vec<_> = LineReader::new(&input[..]).map(Result::unwrap).collect();
        assert_eq!(got[0].item, job("a", "echo"));
    }

    #[test]
    fn reader_numbers_lines_and_jobs() {
        let input = b"\na\techo 1\n# c\nnope\r\nb\techo 2";
        let got: Vec<_> = LineReader::new(&input[..]).map(Result::unwrap).collect();
        assert_eq!(got.len(), 3);
        assert_eq!((got[0].seq, got[0].line), (1, 2));
        assert_eq!((got[1].seq, got[1].line), (2, 4));
        assert!(matches!(got[1].item, LineItem::Invalid { .. }));
        assert_eq!((got[2].seq, got[2].line), (3, 5));
        assert_eq!(got[2].item, job("b", "echo 2"));
    }
}
