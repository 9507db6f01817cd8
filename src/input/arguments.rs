//! Input records other than newline-separated `KEY<TAB>COMMAND` lines: records separated by
//! NUL bytes (`-0`, as `find -print0` writes them), and plain records — one argument (or, with
//! no command, one command) per record, its key computed by `--key` (by default the record
//! itself) — from stdin, a file (`-a FILE`) or the command line (`::: ARG…`).

use std::io::BufRead;

use crate::input::lines::{
    no_tab_hint, parse_keyed, unpassable, Limits, LineItem, LineReader, NumberedLine, BOM,
};
use crate::key_template::KeyTemplate;

/// How records are separated and what a record holds.
#[derive(Debug, Clone)]
pub(crate) struct RecordFormat {
    /// `b'\n'`, or `b'\0'` with `-0`.
    pub delimiter: u8,
    /// `None`: `KEY<TAB>TEXT` records. `Some`: the whole record is the text and the key is
    /// computed from it.
    pub key: Option<KeyTemplate>,
    /// `KEY<TAB>ARGUMENT` records under `--command`: a record without a tab also says how to
    /// give one argument per line instead.
    pub hint_no_tab: bool,
    /// `--colsep SEP` and the largest column the templates name (2 or more): an argument
    /// with fewer columns is refused, not run with the missing ones empty.
    pub columns: Option<(String, usize)>,
    /// Each plain record is a whole command (no command template): one that begins as a
    /// `KEY<TAB>COMMAND` line does (a word, then a tab) is refused, not run with its key as
    /// the program.
    pub whole_commands: bool,
}

/// Added to the reason of a `KEY<TAB>ARGUMENT` record without a tab.
const NO_TAB_HINT: &str = "; for one argument per line, each its own key, put the command \
after the options instead of --command (`lanes [OPTIONS] -- COMMAND`) or add --key '{}'";

impl RecordFormat {
    /// Newline-separated `KEY<TAB>COMMAND` lines: the default.
    pub(crate) fn is_tab_lines(&self) -> bool {
        self.delimiter == b'\n' && self.key.is_none()
    }

    /// What one record is; `None` when it is no job (empty, blank or a comment).
    pub(crate) fn item(&self, record: &[u8]) -> Option<LineItem> {
        match &self.key {
            None => parse_keyed(record, Limits::of_system(), self.after_tab())
                .map(|i| self.checked(self.hinted(Some(record), i))),
            Some(_) if self.whole_commands && begins_keyed(record) => Some(LineItem::Invalid {
                key: None,
                message: "it begins with a word and a tab, as a KEY<TAB>COMMAND line does, but \
                          here each line is a whole command and that word would run as a program: \
                          give a file of KEY<TAB>COMMAND lines as FILE (`lanes jobs.tsv`) or on \
                          stdin without --key, not with -a, :::, or --key"
                    .to_owned(),
            }),
            Some(key) => plain(record, key).map(|i| self.checked(i)),
        }
    }

    /// `item`, refused when its argument has fewer columns than the templates name: a missing
    /// column would be an empty word (`rm -rf dir/{2}` with `--colsep '\t'`, a literal
    /// backslash and `t`, removed `dir/`).
    fn checked(&self, item: LineItem) -> LineItem {
        let LineItem::Job { command, key } = &item else {
            return item;
        };
        match self.missing_columns(command) {
            Some(message) => LineItem::Invalid {
                key: Some(key.clone()),
                message: format!("the argument {message}"),
            },
            None => item,
        }
    }

    /// Why `argument` cannot be split into the columns the templates name, if it cannot:
    /// `has N column(s) split at --colsep …`, to follow what the argument is.
    pub(crate) fn missing_columns(&self, argument: &str) -> Option<String> {
        let (sep, named) = self.columns.as_ref()?;
        let has = argument.split(sep.as_str()).count();
        if has >= *named {
            return None;
        }
        let escape = ["\\t", "\\s", "\\n", "\\|", "\\,"]
            .iter()
            .any(|escape| sep.contains(escape))
            || sep.contains(['[', '+', '*']);
        Some(format!(
            "has {has} column{} split at --colsep `{sep}`, but column {{{named}}} is named: a \
             missing column would be empty{}",
            if has == 1 { "" } else { "s" },
            if escape {
                "; --colsep is a literal string, not a regular expression (for a tab, give a \
                 tab: --colsep $'\\t')"
            } else {
                ""
            }
        ))
    }

    /// What the text after a record's tab is: the template's argument under `--command`.
    fn after_tab(&self) -> &'static str {
        if self.hint_no_tab {
            "argument"
        } else {
            "command"
        }
    }

    /// `item` (of `record`, when not hinted by the [`LineReader`] that read it), with a hint
    /// after the reason of a record without a tab: [`NO_TAB_HINT`] under `--command`, else
    /// [`no_tab_hint`].
    fn hinted(&self, record: Option<&[u8]>, item: LineItem) -> LineItem {
        match item {
            LineItem::Invalid { key: None, message } if message.starts_with("no tab") => {
                let hint = match record {
                    _ if self.hint_no_tab => NO_TAB_HINT,
                    Some(record) => no_tab_hint(record),
                    None => "",
                };
                LineItem::Invalid {
                    key: None,
                    message: message + hint,
                }
            }
            item => item,
        }
    }
}

/// Whether `record` begins as a `KEY<TAB>COMMAND` line does: a word, then a tab (the first
/// blank after the word). A command whose words are separated by tabs is taken for one too:
/// rare, and the refusal says why.
fn begins_keyed(record: &[u8]) -> bool {
    let record = record.strip_prefix(b"\xEF\xBB\xBF").unwrap_or(record);
    match record.iter().position(u8::is_ascii_whitespace) {
        Some(at) => at > 0 && record[at] == b'\t' && record[0] != b'#',
        None => false,
    }
}

/// A plain record: the text is the record; the key is `key` rendered for it. An empty record
/// (under `-0`: blank lines never get here) is invalid: its job would get an empty argument
/// (`rm -rf dir/{}`).
fn plain(record: &[u8], key: &KeyTemplate) -> Option<LineItem> {
    if record.is_empty() {
        return Some(LineItem::Invalid {
            key: None,
            message: "an empty record (a NUL at the start, or right after another): no job is \
                      run with an empty argument"
                .to_owned(),
        });
    }
    let text = match std::str::from_utf8(record) {
        Ok(text) => text,
        Err(err) => {
            return Some(LineItem::Invalid {
                key: None,
                message: format!(
                    "the record is not valid UTF-8 (bad byte at offset {})",
                    err.valid_up_to()
                ),
            })
        }
    };
    let limits = Limits::of_system();
    if let Some(problem) = unpassable("argument", record, limits.command) {
        return Some(LineItem::Invalid {
            key: None,
            message: problem,
        });
    }
    let computed = key.render(text);
    if let Some(problem) = unpassable("key", computed.as_bytes(), limits.key) {
        return Some(LineItem::Invalid {
            key: None,
            message: format!(
                "its key (the record, or what --key makes of it) cannot be passed on: {problem}"
            ),
        });
    }
    if computed.is_empty() {
        return Some(LineItem::Invalid {
            key: None,
            message: "--key gives an empty key for this record".to_owned(),
        });
    }
    Some(LineItem::Job {
        key: computed,
        command: text.to_owned(),
    })
}

/// Reads records one at a time (streaming), numbering jobs; `line` is the record's number
/// (the physical line for newline-separated input).
pub(crate) enum RecordReader<R> {
    /// Newline-separated `KEY<TAB>COMMAND` lines (with the format, for its hint).
    Lines(LineReader<R>, RecordFormat),
    /// Anything else.
    Records {
        input: R,
        format: RecordFormat,
        buffer: Vec<u8>,
        record: u64,
        seq: u64,
    },
}

impl<R: BufRead> RecordReader<R> {
    /// Reads `input` as `format` says.
    pub(crate) fn new(input: R, format: RecordFormat) -> Self {
        if format.is_tab_lines() {
            let lines = LineReader::new(input).naming_after_tab(format.after_tab());
            return RecordReader::Lines(lines, format);
        }
        RecordReader::Records {
            input,
            format,
            buffer: Vec::with_capacity(256),
            record: 0,
            seq: 0,
        }
    }
}

impl<R: BufRead> Iterator for RecordReader<R> {
    type Item = std::io::Result<NumberedLine>;

    fn next(&mut self) -> Option<Self::Item> {
        let (input, format, buffer, record, seq) = match self {
            RecordReader::Lines(lines, format) => {
                return lines.next().map(|numbered| {
                    numbered.map(|numbered| NumberedLine {
                        item: format.checked(format.hinted(None, numbered.item)),
                        ..numbered
                    })
                })
            }
            RecordReader::Records {
                input,
                format,
                buffer,
                record,
                seq,
            } => (input, format, buffer, record, seq),
        };
        // The longest record that can be a job: a key, a tab and a command, or an argument
        // (and a `\r` where records are lines).
        let limits = Limits::of_system();
        let carriage_return = usize::from(format.delimiter == b'\n');
        let longest = match format.key {
            None => limits.key + 1 + limits.command + carriage_return,
            Some(_) => limits.command + carriage_return,
        };
        // Newline-separated input given -0: the whole input is one record, which would run as
        // one job (or as none if its first line is a comment), or, longer than a job can be,
        // be refused as too long without a word about -0.
        let newlines_under_nul = |record: u64, delimited: bool, raw: &[u8]| {
            record == 1 && format.delimiter == 0 && !delimited && raw.contains(&b'\n')
        };
        const NEWLINES_UNDER_NUL: &str = "under -0 records end with a NUL byte, and the input \
                                          has none but has newlines: it would be one record; \
                                          leave -0 out for one record per line";
        loop {
            // The first record may begin with a byte order mark, which is no part of it.
            let bom = if *record == 0 { BOM.len() } else { 0 };
            let (cut, delimited) = match read_record(input, format.delimiter, buffer, bom + longest)
            {
                Ok(None) => return None,
                Ok(Some(read)) => read,
                Err(err) => return Some(Err(err)),
            };
            *record += 1;
            if cut {
                *seq += 1;
                let message = if newlines_under_nul(*record, delimited, buffer) {
                    NEWLINES_UNDER_NUL.to_owned()
                } else {
                    // The limit without the `\r` a line may end with.
                    let most = longest - carriage_return;
                    format!(
                        "the record is longer than any job can be ({most} bytes); the rest of \
                         it was skipped"
                    )
                };
                return Some(Ok(NumberedLine {
                    seq: *seq,
                    line: *record,
                    item: LineItem::Invalid { key: None, message },
                }));
            }
            let mut raw = buffer.strip_suffix(&[format.delimiter]).unwrap_or(buffer);
            if *record == 1 {
                raw = raw.strip_prefix(BOM).unwrap_or(raw);
                if newlines_under_nul(*record, delimited, raw) {
                    *seq += 1;
                    return Some(Ok(NumberedLine {
                        seq: *seq,
                        line: *record,
                        item: LineItem::Invalid {
                            key: None,
                            message: NEWLINES_UNDER_NUL.to_owned(),
                        },
                    }));
                }
            }
            if format.delimiter == b'\n' {
                // CRLF input; a blank line is no argument (as for xargs).
                raw = raw.strip_suffix(b"\r").unwrap_or(raw);
                if raw.iter().all(u8::is_ascii_whitespace) {
                    continue;
                }
            }
            if let Some(item) = format.item(raw) {
                *seq += 1;
                return Some(Ok(NumberedLine {
                    seq: *seq,
                    line: *record,
                    item,
                }));
            }
        }
    }
}

/// Reads the next record, up to `delimiter` (dropped), into `buffer`, keeping at most
/// `longest` bytes of it: `None` at the end of the input, else whether the record was longer
/// (its beginning is in `buffer`; the rest is read and dropped, in bounded memory) and whether
/// it ended with `delimiter` (not with the input).
fn read_record(
    input: &mut impl BufRead,
    delimiter: u8,
    buffer: &mut Vec<u8>,
    longest: usize,
) -> std::io::Result<Option<(bool, bool)>> {
    buffer.clear();
    let (mut any, mut cut) = (false, false);
    loop {
        let available = match input.fill_buf() {
            Ok(available) => available,
            Err(err) if err.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(err) => return Err(err),
        };
        if available.is_empty() {
            return Ok(any.then_some((cut, false)));
        }
        any = true;
        let (chunk, used, done) = match memchr::memchr(delimiter, available) {
            Some(at) => (&available[..at], at + 1, true),
            None => (available, available.len(), false),
        };
        let room = longest.saturating_sub(buffer.len());
        if chunk.len() > room {
            cut = true;
        }
        if !cut {
            buffer.extend_from_slice(chunk);
        }
        input.consume(used);
        if done {
            return Ok(Some((cut, true)));
        }
    }
}

/// The jobs of `::: ARG…`, numbered from 1; `line` is the argument's position.
pub(crate) fn from_list(arguments: &[Vec<u8>], format: &RecordFormat) -> Vec<NumberedLine> {
    let mut numbered = Vec::with_capacity(arguments.len());
    for (index, argument) in arguments.iter().enumerate() {
        // A blank word is no argument, as a blank line of input is none (not under `-0`,
        // which takes every record as it is).
        if format.delimiter == b'\n' && argument.iter().all(u8::is_ascii_whitespace) {
            continue;
        }
        if let Some(item) = format.item(argument) {
            numbered.push(NumberedLine {
                seq: numbered.len() as u64 + 1,
                line: index as u64 + 1,
                item,
            });
        }
    }
    numbered
}

#[cfg(test)]
mod tests {
    use super::*;

    fn plain_format(delimiter: u8) -> RecordFormat {
        RecordFormat {
            delimiter,
            key: Some(KeyTemplate::parse("{}", None).unwrap()),
            hint_no_tab: false,
            columns: None,
            whole_commands: false,
        }
    }

    #[test]
    fn blank_words_after_three_colons_are_no_arguments_as_blank_lines_are_none() {
        let words: Vec<Vec<u8>> = ["a", "", "b", " ", "\t"]
            .map(|w| w.as_bytes().to_vec())
            .to_vec();
        let jobs = from_list(&words, &plain_format(b'\n'));
        let got: Vec<(u64, u64)> = jobs.iter().map(|n| (n.seq, n.line)).collect();
        assert_eq!(got, [(1, 1), (2, 3)]);
        // Under -0 every record is kept, an empty one as invalid (no empty argument).
        let kept = from_list(&words, &plain_format(b'\0'));
        assert_eq!(kept.len(), 5);
        assert!(
            matches!(&kept[1].item, LineItem::Invalid { message, .. } if message.contains("empty record"))
        );
    }

    fn read(input: &[u8], format: RecordFormat) -> Vec<NumberedLine> {
        RecordReader::new(input, format)
            .map(Result::unwrap)
            .collect()
    }

    fn job(key: &str, command: &str) -> LineItem {
        LineItem::Job {
            key: key.into(),
            command: command.into(),
        }
    }

    #[test]
    fn nul_records_keep_newlines_tabs_and_spaces() {
        let got = read(b"a b\nc\0d\te\0\0", plain_format(b'\0'));
        assert_eq!(got.len(), 3);
        assert_eq!(got[0].item, job("a b\nc", "a b\nc"));
        assert_eq!((got[1].seq, got[1].line), (2, 2));
        assert_eq!(got[1].item, job("d\te", "d\te"));
        assert!(
            matches!(&got[2].item, LineItem::Invalid { .. }),
            "{:?}",
            got[2]
        );
    }

    #[test]
    fn nul_separated_tab_lines_split_at_the_tab() {
        let format = RecordFormat {
            delimiter: b'\0',
            key: None,
            hint_no_tab: false,
            columns: None,
            whole_commands: false,
        };
        let got = read(b"k\techo a\necho b\0", format);
        assert_eq!(got[0].item, job("k", "echo a\necho b"));
    }

    #[test]
    fn plain_lines_skip_blank_ones_and_say_why_a_record_is_bad() {
        let format = RecordFormat {
            delimiter: b'\n',
            key: Some(KeyTemplate::parse("{2}", Some(",".into())).unwrap()),
            hint_no_tab: false,
            columns: None,
            whole_commands: false,
        };
        let got = read(b"a,b\r\n  \nonly\n\xff,x\n", format);
        assert_eq!(got.len(), 3);
        assert_eq!(got[0].item, job("b", "a,b"));
        assert_eq!(got[1].line, 3);
        assert!(
            matches!(&got[1].item, LineItem::Invalid { message, .. } if message.contains("empty key"))
        );
        assert!(
            matches!(&got[2].item, LineItem::Invalid { message, .. } if message.contains("UTF-8"))
        );
    }

    #[test]
    fn a_line_without_a_tab_under_a_template_says_what_to_do() {
        let format = RecordFormat {
            delimiter: b'\n',
            key: None,
            hint_no_tab: true,
            columns: None,
            whole_commands: false,
        };
        let got = read(b"1\nk\tx\n", format);
        assert!(
            matches!(&got[0].item, LineItem::Invalid { message, .. }
                if message.starts_with("no tab") && message.contains("-- COMMAND")),
            "{:?}",
            got[0].item
        );
        assert_eq!(got[1].item, job("k", "x"));
    }

    #[test]
    fn list_arguments_are_numbered() {
        let list = [b"x".to_vec(), b"y z".to_vec()];
        let got = from_list(&list, &plain_format(b'\n'));
        assert_eq!(got[1].seq, 2);
        assert_eq!(got[1].item, job("y z", "y z"));
    }

    #[test]
    fn a_list_argument_that_is_not_text_is_an_invalid_record_and_the_rest_are_jobs() {
        let list = [b"\xff".to_vec(), b"a".to_vec()];
        let got = from_list(&list, &plain_format(b'\n'));
        assert_eq!(got.len(), 2);
        assert!(
            matches!(got[0].item, LineItem::Invalid { .. }),
            "{:?}",
            got[0].item
        );
        assert_eq!(got[1].item, job("a", "a"));
    }
}
