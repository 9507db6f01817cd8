//! The line format: one `KEY<TAB>COMMAND` job per line, split at the first tab (SPEC §1.1).

use std::io::BufRead;

use crate::arg_limit::{max_argument_bytes, max_key_bytes};

/// How long a key and a command may be, in bytes: longer ones could never be started
/// ([`crate::arg_limit`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Limits {
    /// The most bytes of a key (it is passed as `LANES_KEY=KEY`).
    pub key: usize,
    /// The most bytes of a command (it is passed as the one argument of `SHELL -c`).
    pub command: usize,
}

impl Limits {
    /// The system's limits.
    pub(crate) fn of_system() -> Self {
        Limits {
            key: max_key_bytes(),
            command: max_argument_bytes(),
        }
    }
}

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
/// `None` for a blank line (only whitespace) or a comment (`#` first): no job, no `seq`. A key
/// or command longer than `limits`, or holding a NUL byte, is invalid: no process could be
/// given it.
pub(crate) fn parse_line(raw: &[u8], limits: Limits) -> Option<LineItem> {
    parse_keyed(raw, limits, "command")
}

/// A UTF-8 byte order mark.
pub(crate) const BOM: &[u8] = b"\xEF\xBB\xBF";

/// [`parse_line`] for a record whose text after the tab is `after_tab` (`command`, or
/// `argument` under `--command`), as its messages name it.
pub(crate) fn parse_keyed(raw: &[u8], limits: Limits, after_tab: &str) -> Option<LineItem> {
    let raw = raw.strip_suffix(b"\r").unwrap_or(raw);
    if raw.iter().all(u8::is_ascii_whitespace) || raw.first() == Some(&b'#') {
        return None;
    }
    let Some(tab) = raw.iter().position(|&b| b == b'\t') else {
        return Some(invalid(
            None,
            &format!(
                "no tab between key and {after_tab} (expected KEY<TAB>{})",
                after_tab.to_ascii_uppercase()
            ),
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
    if let Some(problem) = unpassable("key", key.as_bytes(), limits.key) {
        return Some(invalid(None, &problem));
    }
    let command = match std::str::from_utf8(command) {
        Ok(command) => command,
        Err(err) => return Some(invalid(key_for_record, &not_utf8(after_tab, err))),
    };
    if command.trim().is_empty() {
        return Some(invalid(
            key_for_record,
            &format!("empty {after_tab} after the tab"),
        ));
    }
    if let Some(problem) = unpassable(after_tab, command.as_bytes(), limits.command) {
        return Some(invalid(key_for_record, &problem));
    }
    // A manifest's line with a tab in it would run its text as a command (under --command it
    // is only an argument).
    if after_tab == "command" {
        if let Some(refused) = toml_line_with_a_tab(key, command) {
            return Some(refused);
        }
    }
    Some(LineItem::Job {
        key: key.to_owned(),
        command: command.to_owned(),
    })
}

/// The hint after the reason of a `KEY<TAB>COMMAND` line without a tab, from the line `raw`:
/// a line of a TOML manifest (a `[table]` header, or `name = value` with a TOML value) points
/// to `--manifest`; any other line to the forms that take lines without keys.
pub(crate) fn no_tab_hint(raw: &[u8]) -> &'static str {
    let line = String::from_utf8_lossy(raw);
    let line = line.trim();
    let header = line.starts_with('[') && line.ends_with(']');
    if header || is_toml_setting(line) {
        TOML_HINT
    } else {
        "; for lines without keys, add --key '{}' (each line a command, its own key) or give \
         the command after the options (lanes [OPTIONS] -- COMMAND)"
    }
}

/// The hint for a line of a TOML manifest given as `KEY<TAB>COMMAND` lines.
const TOML_HINT: &str = "; it looks like a line of a TOML manifest: give a manifest with \
                         --manifest FILE (or --manifest - for stdin)";

/// Whether `text` looks like a TOML setting, `name = value` with a TOML value (a string, an
/// array, a table, a number or a boolean).
fn is_toml_setting(text: &str) -> bool {
    text.split_once('=').is_some_and(|(name, value)| {
        let name = name.trim();
        let value = value.trim_start();
        // A bare name (`max_concurrent`, `a.b`), or a quoted one, which may hold spaces.
        let quoted = name.starts_with(['"', '\'']) && name.len() > 1;
        !name.is_empty()
            && (quoted
                || name
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || "_-.".contains(c)))
            && (value.starts_with(['"', '\'', '[', '{']) || is_toml_scalar(value))
    })
}

/// Whether `value` (with what follows it: a comment) begins with a TOML number or boolean:
/// a digit, a sign before a digit, `inf` or `nan` (signed or not), `true` or `false`, each
/// ending the text or followed by white space or a comment.
fn is_toml_scalar(value: &str) -> bool {
    let unsigned = value.strip_prefix(['+', '-']).unwrap_or(value);
    if unsigned.starts_with(|c: char| c.is_ascii_digit()) {
        return true;
    }
    // `text` begins with the word `w`, which ends it or is followed by a blank or a comment.
    let word = |text: &str, w: &str| {
        text.strip_prefix(w)
            .is_some_and(|rest| rest.is_empty() || rest.starts_with([' ', '\t', '#']))
    };
    word(value, "true") || word(value, "false") || word(unsigned, "inf") || word(unsigned, "nan")
}

/// Whether a key looks like a TOML setting rather than a key of its own: a value that is a
/// string, an array or a table (`cmd = "make"`, `key='a'`), or a number or boolean with spaces
/// around its `=` (`max_concurrent = 4`). A parameter sweep's `seed=42`, `lr=0.1` or
/// `d=2024-01-01` is a key.
fn is_toml_setting_key(key: &str) -> bool {
    is_toml_setting(key)
        && key.split_once('=').is_some_and(|(name, value)| {
            value.trim_start().starts_with(['"', '\'', '[', '{'])
                || (name.ends_with([' ', '\t']) && value.starts_with([' ', '\t']))
        })
}

/// A `KEY<TAB>COMMAND` line that is a line of a TOML manifest with a tab in it, whose text
/// after the tab would run as a command: refused, not run, as the manifest's other lines are
/// (they have no tab). Its key looks like a setting (`cmd = "make"<TAB># a comment`;
/// [`is_toml_setting_key`]), or is a setting's name and `=` with the value after the tab
/// (`cmd =<TAB>"make"`), or an array-of-tables header, a comment after it or not
/// (`[[job]]<TAB># first`), or its command is a setting's value after a name aligned with a
/// tab (`key<TAB>= "api"`). A `[name]` key is a key.
fn toml_line_with_a_tab(given: &str, command: &str) -> Option<LineItem> {
    let key = given.trim();
    // A header may have a comment after it.
    let header = key
        .split_once('#')
        .map_or(key, |(before, _)| before)
        .trim_end();
    let why = if is_toml_setting_key(key) {
        "the key looks like a TOML setting"
    } else if key.ends_with('=') && is_toml_setting_key(&format!("{key} {}", command.trim())) {
        "the line looks like a TOML setting with a tab after its `=`"
    } else if header.starts_with("[[") && header.ends_with("]]") {
        "the key looks like a TOML array-of-tables header"
    } else if command
        .strip_prefix('=')
        .is_some_and(|value| is_toml_setting(&format!("x ={value}")))
        && is_toml_setting(&format!("{key} = 0"))
    {
        "the line looks like a TOML setting aligned with a tab"
    } else {
        return None;
    };
    Some(invalid(
        Some(given.to_owned()),
        &format!("{why}, and what follows its tab would run as a command{TOML_HINT}"),
    ))
}

fn invalid(key: Option<String>, message: &str) -> LineItem {
    LineItem::Invalid {
        key,
        message: message.to_owned(),
    }
}

/// Why a key or command (`part`) cannot be passed to a process, if it cannot: longer than
/// `limit` bytes, or holding a NUL byte (which ends a C string: `execve(2)` would cut it).
pub(crate) fn unpassable(part: &str, bytes: &[u8], limit: usize) -> Option<String> {
    if bytes.len() > limit {
        return Some(too_long(part, limit));
    }
    memchr::memchr(0, bytes).map(|offset| {
        format!("the {part} holds a NUL byte (at offset {offset}), which no process can be given")
    })
}

/// Why a key or command (`part`) longer than `limit` bytes is invalid.
fn too_long(part: &str, limit: usize) -> String {
    let what = if part == "key" {
        "the most `LANES_KEY=KEY` can hold"
    } else {
        "the most the one argument of `SHELL -c COMMAND` can hold"
    };
    format!(
        "the {part} is longer than {limit} bytes, {what} (the system's limit on one argument, \
         MAX_ARG_STRLEN)"
    )
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
///
/// Memory is bounded whatever the input: a line is kept only as long as it may still hold a
/// key and a command within [`Limits`]. Once it cannot, it is invalid at once (a `key` is
/// kept when its tab was seen), and the rest of it is read and dropped up to its `\n`.
pub(crate) struct LineReader<R> {
    input: R,
    buffer: Vec<u8>,
    limits: Limits,
    /// The rest of a line cut short is still to be dropped.
    skipping: bool,
    line: u64,
    seq: u64,
    /// What the text after the tab is, as messages name it ([`parse_keyed`]).
    after_tab: &'static str,
}

impl<R: BufRead> LineReader<R> {
    /// Wraps a buffered reader, with the system's [`Limits`].
    pub(crate) fn new(input: R) -> Self {
        Self::with_limits(input, Limits::of_system())
    }

    /// Names the text after the tab `after_tab` in messages (`argument` under `--command`);
    /// `command` unless told.
    pub(crate) fn naming_after_tab(mut self, after_tab: &'static str) -> Self {
        self.after_tab = after_tab;
        self
    }

    /// Wraps a buffered reader, with `limits`.
    pub(crate) fn with_limits(input: R, limits: Limits) -> Self {
        LineReader {
            input,
            buffer: Vec::with_capacity(256),
            limits,
            skipping: false,
            line: 0,
            seq: 0,
            after_tab: "command",
        }
    }

    /// Reads the next line into `buffer`, without its `\n`. Returns `None` at the end of the
    /// input, else whether the line was cut short (too long to be a job: only its beginning
    /// is in `buffer`; the rest is dropped on the next call). `buffer` holds at most the
    /// longest key, a tab, the longest command and a `\r`.
    fn read_line(&mut self) -> std::io::Result<Option<bool>> {
        self.buffer.clear();
        while self.skipping {
            let available = match self.input.fill_buf() {
                Ok(available) => available,
                Err(err) if err.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(err) => return Err(err),
            };
            if available.is_empty() {
                return Ok(None);
            }
            let (used, done) = match memchr::memchr(b'\n', available) {
                Some(newline) => (newline + 1, true),
                None => (available.len(), false),
            };
            self.input.consume(used);
            self.skipping = !done;
        }
        let (mut any, mut cut, mut tab) = (false, false, None);
        loop {
            let available = match self.input.fill_buf() {
                Ok(available) => available,
                Err(err) if err.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(err) => return Err(err),
            };
            if available.is_empty() {
                return Ok(any.then_some(cut));
            }
            any = true;
            let (mut chunk, used) = match memchr::memchr(b'\n', available) {
                Some(newline) => (&available[..newline], Some(newline + 1)),
                None => (available, None),
            };
            if !cut && tab.is_none() {
                // Still in the key: at most the longest key, then its tab; on the first line
                // after a byte order mark, which is no part of it.
                let bom = if self.line == 0 { BOM.len() } else { 0 };
                let room = (bom + self.limits.key + 1).saturating_sub(self.buffer.len());
                let head = &chunk[..chunk.len().min(room)];
                if let Some(at) = memchr::memchr(b'\t', head) {
                    tab = Some(self.buffer.len() + at);
                    self.buffer.extend_from_slice(&chunk[..=at]);
                    chunk = &chunk[at + 1..];
                } else {
                    self.buffer.extend_from_slice(head);
                    cut = chunk.len() > room;
                    chunk = &[];
                }
            }
            if let (false, Some(tab)) = (cut, tab) {
                // In the command: at most the longest command and a `\r`.
                let room = (tab + 1 + self.limits.command + 1).saturating_sub(self.buffer.len());
                self.buffer
                    .extend_from_slice(&chunk[..chunk.len().min(room)]);
                cut = chunk.len() > room;
            }
            if cut {
                // Known now: the rest of the line is dropped when the next line is read.
                self.skipping = true;
                return Ok(Some(true));
            }
            let done = used.is_some();
            let used = used.unwrap_or(available.len());
            self.input.consume(used);
            if done {
                return Ok(Some(false));
            }
        }
    }

    /// The invalid item of a line cut short, from its beginning in `buffer`.
    fn cut_line(&self, raw: &[u8]) -> LineItem {
        let Some(tab) = memchr::memchr(b'\t', raw) else {
            return invalid(
                None,
                &format!(
                    "no tab in the first {} bytes: {}; the rest of the line was skipped",
                    self.limits.key,
                    too_long("key", self.limits.key)
                ),
            );
        };
        let key = std::str::from_utf8(&raw[..tab])
            .ok()
            .filter(|key| !key.is_empty() && !key.contains('\0'))
            .map(str::to_owned);
        invalid(
            key,
            &format!(
                "{}; the rest of the line was skipped",
                too_long(self.after_tab, self.limits.command)
            ),
        )
    }
}

impl<R: BufRead> Iterator for LineReader<R> {
    type Item = std::io::Result<NumberedLine>;

    fn next(&mut self) -> Option<Self::Item> {
        loop {
            let cut = match self.read_line() {
                Ok(None) => return None,
                Ok(Some(cut)) => cut,
                Err(err) => return Some(Err(err)),
            };
            self.line += 1;
            let mut raw = &self.buffer[..];
            if self.line == 1 {
                // A UTF-8 byte order mark is not part of the first key.
                raw = raw.strip_prefix(BOM).unwrap_or(raw);
            }
            let item = if cut {
                // A comment may be of any length.
                (raw.first() != Some(&b'#')).then(|| self.cut_line(raw))
            } else {
                parse_keyed(raw, self.limits, self.after_tab).map(|item| match item {
                    // The default form's lines: say what else the line may have been meant as.
                    LineItem::Invalid { key: None, message }
                        if self.after_tab == "command" && message.starts_with("no tab") =>
                    {
                        invalid(None, &(message + no_tab_hint(raw)))
                    }
                    item => item,
                })
            };
            if let Some(item) = item {
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

    #[test]
    fn a_line_without_a_tab_is_told_apart_as_toml_or_a_line_without_a_key() {
        for toml in [
            "[[job]]",
            " [run] ",
            "key = \"a\"",
            "cmd='make'",
            "max_concurrent = 4",
            "env = { A = \"1\" }",
            "\"odd key\" = true",
            "needs = [\"gpu\"]",
        ] {
            assert!(
                no_tab_hint(toml.as_bytes()).contains("--manifest"),
                "{toml}"
            );
        }
        for plain in ["make all", "FOO=bar make", "1", "x = y", "echo a=1", "a==1"] {
            assert!(
                no_tab_hint(plain.as_bytes()).contains("--key '{}'"),
                "{plain}"
            );
        }
        // The line reader adds it to a line without a tab; not to other faults.
        let lines: Vec<_> = LineReader::with_limits(&b"[[job]]\nmake\n\tx\n"[..], LIMITS)
            .map(|line| match line.unwrap().item {
                LineItem::Invalid { message, .. } => message,
                LineItem::Job { .. } => String::new(),
            })
            .collect();
        assert!(
            lines[0].contains("no tab") && lines[0].contains("--manifest"),
            "{lines:?}"
        );
        assert!(
            lines[1].contains("no tab") && lines[1].contains("--key"),
            "{lines:?}"
        );
        assert_eq!(lines[2], "empty key before the tab");
        // A manifest aligned with tabs: its settings are no keys; a bracketed key is one.
        let items: Vec<_> = LineReader::with_limits(
            &b"cmd = \"make\"\t# comment\n[web]\tmake\nx = y\tz\n"[..],
            Limits {
                key: 40,
                command: 40,
            },
        )
        .map(|line| line.unwrap().item)
        .collect();
        assert!(
            matches!(&items[0], LineItem::Invalid { message, .. } if message.contains("TOML setting")),
            "{items:?}"
        );
        assert!(matches!(&items[1], LineItem::Job { key, .. } if key == "[web]"));
        assert!(matches!(&items[2], LineItem::Job { key, .. } if key == "x = y"));
    }

    const LIMITS: Limits = Limits {
        key: 20,
        command: 30,
    };

    fn parse(raw: &[u8]) -> Option<LineItem> {
        parse_line(raw, LIMITS)
    }

    fn job(key: &str, command: &str) -> LineItem {
        LineItem::Job {
            key: key.into(),
            command: command.into(),
        }
    }

    #[test]
    fn splits_at_the_first_tab_only() {
        assert_eq!(parse(b"c\tprintf x\ty"), Some(job("c", "printf x\ty")));
    }

    #[test]
    fn strips_crlf_and_keeps_odd_keys() {
        assert_eq!(
            parse(b"a b/../\xc3\xbc\techo\r"),
            Some(job("a b/../ü", "echo"))
        );
    }

    #[test]
    fn skips_blank_and_comment_lines() {
        for raw in [&b""[..], b"   ", b"\t", b" \t \r", b"# x\techo"] {
            assert_eq!(parse(raw), None, "{raw:?}");
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
            match parse(raw) {
                Some(LineItem::Invalid { key, message }) => {
                    assert_eq!(key.as_deref(), want_key, "{raw:?}");
                    assert!(message.contains(want_msg), "{raw:?}: {message}");
                }
                other => panic!("{raw:?} parsed as {other:?}"),
            }
        }
    }

    #[test]
    fn a_key_that_looks_like_a_toml_setting_is_refused_and_a_sweep_s_key_is_not() {
        for toml in [
            "cmd = \"make\"",
            "key='a'",
            "x = [1, 2]",
            "env = { A = \"1\" }",
            "max_concurrent = 4",
            "fail_fast = true",
            "a = -1",
            "x = +1",
            "x = -0.5",
            "x = inf",
            "x = -inf",
            "x = nan",
            "x = true # c",
            "x = 1 # c",
            "[[job]]",
        ] {
            assert!(toml_line_with_a_tab(toml, "true").is_some(), "{toml}");
        }
        // A name aligned with a tab before its `=`, or a tab after it: the value is what
        // would run.
        for (key, command) in [
            ("key", "= \"api\""),
            ("retries", "= 2"),
            ("cmd", "=\"make\""),
            ("cmd =", "\"make V=$(touch x)\""),
            ("fail_fast =", "true"),
            ("key=", "'a'"),
            ("[[job]] # api", "touch x"),
        ] {
            assert!(
                toml_line_with_a_tab(key, command).is_some(),
                "{key}<TAB>{command}"
            );
        }
        for (key, command) in [
            ("k", "=foo"),
            ("k", "== 1"),
            ("k", "echo = 1"),
            ("seed=", "42 python train.py"),
            ("mode =", "fast"),
        ] {
            assert!(
                toml_line_with_a_tab(key, command).is_none(),
                "{key}<TAB>{command}"
            );
        }
        // Read whole, the `-0` records are checked as the lines are.
        assert!(matches!(
            parse_keyed(b"name = \"x\"\techo PWN", Limits::of_system(), "command"),
            Some(LineItem::Invalid { .. })
        ));
        assert!(matches!(
            parse_keyed(b"name = \"x\"\tPWN", Limits::of_system(), "argument"),
            Some(LineItem::Job { .. })
        ));
        for key in [
            "seed=42",
            "lr=0.1",
            "v=1.2.3",
            "x=1 y=2",
            "d=2024-01-01",
            "env=prod",
            "flag=true",
            "[name]",
            "x = information",
            "x = nano",
            "x = -",
            "a = b",
        ] {
            assert!(toml_line_with_a_tab(key, "true").is_none(), "{key}");
        }
    }

    #[test]
    fn a_byte_order_mark_is_not_part_of_the_first_key() {
        let input = b"\xEF\xBB\xBFa\techo\n";
        let got: Vec<_> = LineReader::new(&input[..]).map(Result::unwrap).collect();
        assert_eq!(got[0].item, job("a", "echo"));
        // Nor does it count toward the longest key: the key of the limit's length is read.
        let key = "k".repeat(LIMITS.key);
        let input = format!("\u{feff}{key}\techo\n{key}k\techo\n");
        let got: Vec<_> = LineReader::with_limits(input.as_bytes(), LIMITS)
            .map(Result::unwrap)
            .collect();
        assert_eq!(got[0].item, job(&key, "echo"));
        assert!(
            matches!(&got[1].item, LineItem::Invalid { message, .. } if message.contains("longer")),
            "{:?}",
            got[1].item
        );
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

    #[test]
    fn a_nul_byte_or_an_overlong_part_is_invalid() {
        let long_command = format!("k\t{}", "x".repeat(31));
        let long_key = format!("{}\techo", "k".repeat(21));
        let cases: [(&[u8], Option<&str>, &str); 4] = [
            (b"k\techo a\0b", Some("k"), "NUL byte (at offset 6)"),
            (b"k\0\techo", None, "key holds a NUL byte"),
            (long_command.as_bytes(), Some("k"), "longer than 30 bytes"),
            (long_key.as_bytes(), None, "longer than 20 bytes"),
        ];
        for (raw, want_key, want_msg) in cases {
            match parse(raw) {
                Some(LineItem::Invalid { key, message }) => {
                    assert_eq!(key.as_deref(), want_key, "{raw:?}");
                    assert!(message.contains(want_msg), "{raw:?}: {message}");
                }
                other => panic!("{raw:?} parsed as {other:?}"),
            }
        }
        let longest = format!("{}\t{}", "k".repeat(20), "x".repeat(30));
        assert!(matches!(
            parse(longest.as_bytes()),
            Some(LineItem::Job { .. })
        ));
    }

    /// Hands out `chunk`-byte reads, to cut lines at every place.
    fn reader_in_chunks(input: &[u8], chunk: usize) -> Vec<NumberedLine> {
        let reader = std::io::BufReader::with_capacity(chunk, input);
        LineReader::with_limits(reader, LIMITS)
            .map(Result::unwrap)
            .collect()
    }

    #[test]
    fn overlong_lines_are_cut_and_the_next_line_is_read_whole() {
        let input = format!(
            "a\t{}\n{}\nb\techo {}\n#{}\nc\techo\r\nd\t{}",
            "x".repeat(1000),
            "y".repeat(1000),
            "z".repeat(25),
            "#".repeat(1000),
            "x".repeat(40),
        );
        for chunk in [1, 2, 7, 64, 4096] {
            let got = reader_in_chunks(input.as_bytes(), chunk);
            let lines: Vec<_> = got.iter().map(|l| (l.seq, l.line)).collect();
            assert_eq!(lines, [(1, 1), (2, 2), (3, 3), (4, 5), (5, 6)], "{chunk}");
            match &got[0].item {
                LineItem::Invalid { key, message } => {
                    assert_eq!(key.as_deref(), Some("a"));
                    assert!(
                        message.contains("command is longer than 30 bytes"),
                        "{message}"
                    );
                    assert!(
                        message.contains("rest of the line was skipped"),
                        "{message}"
                    );
                }
                other => panic!("{other:?}"),
            }
            match &got[1].item {
                LineItem::Invalid { key, message } => {
                    assert_eq!(key, &None);
                    assert!(
                        message.contains("no tab in the first 20 bytes"),
                        "{message}"
                    );
                }
                other => panic!("{other:?}"),
            }
            assert_eq!(got[2].item, job("b", &format!("echo {}", "z".repeat(25))));
            assert_eq!(got[3].item, job("c", "echo"));
            assert!(matches!(got[4].item, LineItem::Invalid { .. }), "{chunk}");
        }
    }

    #[test]
    fn a_command_of_the_longest_length_with_crlf_is_a_job() {
        let input = format!("k\t{}\r\n", "x".repeat(30));
        let got = reader_in_chunks(input.as_bytes(), 3);
        assert_eq!(got[0].item, job("k", &"x".repeat(30)));
    }

    #[test]
    fn an_endless_line_is_refused_before_it_ends() {
        use std::io::Read;
        let endless = std::io::BufReader::new((&b"k\t"[..]).chain(std::io::repeat(b'x')));
        let first = LineReader::with_limits(endless, LIMITS).next();
        match first {
            Some(Ok(NumberedLine {
                line: 1,
                item: LineItem::Invalid { key, .. },
                ..
            })) => assert_eq!(key.as_deref(), Some("k")),
            other => panic!("{other:?}"),
        }
    }
}
