//! `--command TEMPLATE`: the command run for each job (or batch), with `{}` (the arguments),
//! `{key}`, `{seq}` and `{slot}` replaced, every substitution shell-quoted (SPEC §3.5); GNU
//! parallel's replacement strings (`{.}`, `{/}`, `{//}`, `{/.}`, `{N}`, `{#}`, `{%}`) too.

use crate::placeholder::Placeholder;

/// One piece of a parsed template.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Piece {
    Text(String),
    /// `{}` (or `{.}`, `{/}`, `{N}`…): the job's argument, or every argument of a batch, each
    /// transformed, quoted, space-separated.
    Args(Placeholder),
    /// `{key}`
    Key,
    /// `{seq}` or `{#}`: the job's number (the first job's, for a batch).
    Seq,
    /// `{slot}` or `{%}`
    Slot,
    /// `{res.NAME}`: the named units (or the amount) of resource NAME granted to the run,
    /// comma-separated.
    Resource(String),
}

/// A parsed `--command` template.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Template {
    pieces: Vec<Piece>,
    /// `--colsep`: where `{N}` splits an argument into columns.
    colsep: Option<String>,
}

/// Why a template is not usable.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum TemplateError {
    #[error("unknown placeholder `{{{0}}}` in --command (known: {{}}, {{.}}, {{/}}, {{//}}, {{/.}}, {{1}}, {{key}}, {{seq}} or {{#}}, {{slot}} or {{%}}; write {{{{ and }}}} for literal braces)")]
    Unknown(String),
    #[error("unclosed `{{` in --command at byte {0} (write {{{{ for a literal brace)")]
    Unclosed(usize),
    #[error("lone `}}` in --command at byte {0} (write }}}} for a literal brace)")]
    LoneClose(usize),
    #[error("placeholder `{0}` inside quotes in --command at byte {1}: write it unquoted, lanes quotes every substitution itself (inside double quotes a substitution could run as shell code)")]
    Quoted(String, usize),
}

impl Template {
    /// Parses `text`. `{{` and `}}` stand for literal braces. A template without `{}` gets
    /// ` {}` appended, so the argument is always passed (as `xargs` and GNU parallel do).
    ///
    /// # Errors
    /// An unknown placeholder (named), an unclosed `{` or a lone `}`.
    pub(crate) fn parse(text: &str) -> Result<Self, TemplateError> {
        let mut pieces = Vec::new();
        let mut literal = String::new();
        let mut quotes = Quotes::default();
        let mut chars = text.char_indices().peekable();
        while let Some((at, c)) = chars.next() {
            let quoted = quotes.inside();
            quotes.see(c);
            match c {
                '{' if chars.peek().map(|&(_, n)| n) == Some('{') => {
                    chars.next();
                    literal.push('{');
                }
                '}' if chars.peek().map(|&(_, n)| n) == Some('}') => {
                    chars.next();
                    literal.push('}');
                }
                '}' => return Err(TemplateError::LoneClose(at)),
                '{' => {
                    let rest = &text[at + 1..];
                    let close = rest.find('}').ok_or(TemplateError::Unclosed(at))?;
                    let name = &rest[..close];
                    let piece = match name {
                        "key" => Piece::Key,
                        "seq" | "#" => Piece::Seq,
                        "slot" | "%" => Piece::Slot,
                        other if other.starts_with("res.") => {
                            let name = &other["res.".len()..];
                            crate::resources::check_name(name)
                                .map_err(|_| TemplateError::Unknown(other.to_owned()))?;
                            Piece::Resource(name.to_owned())
                        }
                        other => match Placeholder::parse(other) {
                            Some(placeholder) => Piece::Args(placeholder),
                            None => return Err(TemplateError::Unknown(other.to_owned())),
                        },
                    };
                    // Numbers are safe anywhere; text from the input is not.
                    if quoted && matches!(piece, Piece::Args(_) | Piece::Key | Piece::Resource(_)) {
                        return Err(TemplateError::Quoted(format!("{{{name}}}"), at));
                    }
                    for _ in 0..=name.chars().count() {
                        chars.next();
                    }
                    if !literal.is_empty() {
                        pieces.push(Piece::Text(std::mem::take(&mut literal)));
                    }
                    pieces.push(piece);
                }
                c => literal.push(c),
            }
        }
        if !literal.is_empty() {
            pieces.push(Piece::Text(literal));
        }
        if !pieces.iter().any(|piece| matches!(piece, Piece::Args(_))) {
            pieces.push(Piece::Text(" ".to_owned()));
            pieces.push(Piece::Args(Placeholder::WHOLE));
        }
        Ok(Template {
            pieces,
            colsep: None,
        })
    }

    /// The template with `{N}` splitting arguments at `colsep` (`--colsep`).
    pub(crate) fn with_colsep(mut self, colsep: Option<String>) -> Self {
        self.colsep = colsep;
        self
    }

    /// The command for `args` (one job's argument, or a batch's in lane order).
    pub(crate) fn render(&self, args: &[&str], key: &str, seq: u64, slot: u32) -> String {
        self.render_granted(args, key, seq, slot, None)
    }

    /// [`Template::render`] for a run holding `grant` (`{res.NAME}`; empty for a resource it
    /// does not hold).
    pub(crate) fn render_granted(
        &self,
        args: &[&str],
        key: &str,
        seq: u64,
        slot: u32,
        grant: Option<&crate::core::Grant>,
    ) -> String {
        let mut out = String::new();
        for piece in &self.pieces {
            match piece {
                Piece::Text(text) => out.push_str(text),
                Piece::Args(placeholder) => {
                    for (i, arg) in args.iter().enumerate() {
                        if i > 0 {
                            out.push(' ');
                        }
                        out.push_str(&shell_quote(
                            &placeholder.apply(arg, self.colsep.as_deref()),
                        ));
                    }
                }
                Piece::Key => out.push_str(&shell_quote(key)),
                Piece::Seq => out.push_str(&seq.to_string()),
                Piece::Slot => out.push_str(&slot.to_string()),
                Piece::Resource(name) => out.push_str(&shell_quote(
                    &grant
                        .and_then(|g| crate::resources::granted_value(g, name))
                        .unwrap_or_default(),
                )),
            }
        }
        out
    }

    /// The resource names `{res.NAME}` placeholders use.
    pub(crate) fn resource_names(&self) -> impl Iterator<Item = &String> {
        self.pieces.iter().filter_map(|piece| match piece {
            Piece::Resource(name) => Some(name),
            _ => None,
        })
    }
}

impl Template {
    /// The length in bytes of the template's own text (all but its placeholders).
    pub(crate) fn text_len(&self) -> usize {
        self.pieces
            .iter()
            .map(|piece| match piece {
                Piece::Text(text) => text.len(),
                _ => 0,
            })
            .sum()
    }

    /// The length in bytes of [`Template::render`] for one job (`arg`, `key`, `seq`) in a slot
    /// of at most `max_slot`, without rendering it: whether the job's command can be passed
    /// to a process at all ([`crate::arg_limit`]).
    pub(crate) fn rendered_len(&self, arg: &str, key: &str, seq: u64, max_slot: usize) -> usize {
        let digits = |n: u64| n.checked_ilog10().map_or(1, |d| d as usize + 1);
        self.pieces
            .iter()
            .map(|piece| match piece {
                Piece::Text(text) => text.len(),
                // A replacement string ({.}, {/}, a column) is never longer than the argument.
                Piece::Args(_) => quoted_len(arg),
                Piece::Key => quoted_len(key),
                Piece::Seq => digits(seq),
                Piece::Slot => digits(max_slot as u64),
                // Not known before the job starts, and not counted: unit ids are short, and a
                // command they push past the limit fails to start (E2BIG, `spawn_error`).
                Piece::Resource(_) => 0,
            })
            .sum()
    }
}

/// The length of [`shell_quote`]`(text)`: two quotes, and three more bytes per quote inside.
fn quoted_len(text: &str) -> usize {
    text.len() + 2 + 3 * memchr::memchr_iter(b'\'', text.as_bytes()).count()
}

/// Where a scan of shell text stands: inside single quotes, double quotes, or after a
/// backslash (POSIX "Shell Command Language" §2.2).
#[derive(Debug, Default)]
struct Quotes {
    single: bool,
    double: bool,
    escaped: bool,
}

impl Quotes {
    fn inside(&self) -> bool {
        self.single || self.double
    }

    fn see(&mut self, c: char) {
        if self.escaped {
            self.escaped = false;
        } else if self.single {
            self.single = c != '\'';
        } else if c == '\\' {
            self.escaped = true;
        } else if c == '\'' && !self.double {
            self.single = true;
        } else if c == '"' {
            self.double = !self.double;
        }
    }
}

/// Quotes `text` for a POSIX shell: inside single quotes nothing is special, and a single
/// quote is written `'\''` (POSIX "Shell Command Language" §2.2.2). The result is always one
/// word, whatever `text` holds (`$(…)`, backticks, `;`, newlines, a leading `-`).
pub(crate) fn shell_quote(text: &str) -> String {
    let mut quoted = String::with_capacity(text.len() + 2);
    quoted.push('\'');
    for c in text.chars() {
        if c == '\'' {
            quoted.push_str("'\\''");
        } else {
            quoted.push(c);
        }
    }
    quoted.push('\'');
    quoted
}

/// A job's share of a batch's byte bound: its quoted length plus the separating space.
pub(crate) fn weight(arg: &str) -> usize {
    shell_quote(arg).len() + 1
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn placeholders_are_replaced_and_quoted() {
        let t = Template::parse("printf '%s\\n' {} >> out/{key}.{seq}.{slot}").unwrap();
        assert_eq!(
            t.render(&["a b", "c"], "r/1", 7, 2),
            "printf '%s\\n' 'a b' 'c' >> out/'r/1'.7.2"
        );
    }

    #[test]
    fn gnu_parallel_replacement_strings() {
        let t = Template::parse("mv {} {//}/{/.}.old {#} {%} {2.}")
            .unwrap()
            .with_colsep(Some(",".into()));
        assert_eq!(
            t.render(&["d/a.txt,b.c"], "k", 3, 1),
            "mv 'd/a.txt,b.c' 'd'/'a.txt,b'.old 3 1 'b'"
        );
        let appended = Template::parse("gzip -t").unwrap();
        assert_eq!(appended.render(&["x"], "k", 1, 1), "gzip -t 'x'");
        let no_append = Template::parse("convert {.}").unwrap();
        assert_eq!(no_append.render(&["a.png"], "k", 1, 1), "convert 'a'");
    }

    #[test]
    fn literal_braces_and_appended_argument() {
        let t = Template::parse("echo {{x}}").unwrap();
        assert_eq!(t.render(&["y"], "k", 1, 1), "echo {x} 'y'");
    }

    #[test]
    fn errors_name_the_problem() {
        assert_eq!(
            Template::parse("echo {file}"),
            Err(TemplateError::Unknown("file".into()))
        );
        assert!(Template::parse("echo {file}")
            .unwrap_err()
            .to_string()
            .contains("`{file}`"));
        assert_eq!(Template::parse("echo {"), Err(TemplateError::Unclosed(5)));
        assert_eq!(Template::parse("echo }"), Err(TemplateError::LoneClose(5)));
    }

    #[test]
    fn hostile_text_stays_one_literal_word() {
        let hostile = [
            "$(touch pwned)",
            "`id`",
            "; rm -rf x",
            "it's",
            "a\nb",
            "-rf",
            "",
        ];
        for text in hostile {
            let out = std::process::Command::new("sh")
                .arg("-c")
                .arg(format!("printf '%s' {}", shell_quote(text)))
                .output()
                .unwrap();
            assert_eq!(String::from_utf8(out.stdout).unwrap(), text);
        }
    }

    #[test]
    fn placeholders_inside_quotes_are_refused() {
        assert_eq!(
            Template::parse("echo \"arg: {}\""),
            Err(TemplateError::Quoted("{}".into(), 11))
        );
        assert!(matches!(
            Template::parse("echo '{key}'"),
            Err(TemplateError::Quoted(..))
        ));
        assert!(Template::parse("echo \"a\" {} 'b' \\\" {key}").is_ok());
        assert!(Template::parse("echo \"{seq}/{slot}\" {}").is_ok());
    }

    #[test]
    fn rendered_len_is_the_length_of_the_rendered_command() {
        let template = Template::parse("cp {} /dst/{key}-{seq}-{slot}").unwrap();
        for (arg, key, seq, slot) in [("a b", "k", 7, 3), ("it's", "o'k", 12345, 16)] {
            let rendered = template.render(&[arg], key, seq, slot);
            assert_eq!(
                template.rendered_len(arg, key, seq, slot as usize),
                rendered.len(),
                "{rendered}"
            );
        }
    }

    #[test]
    fn weight_counts_quoting_and_a_space() {
        assert_eq!(weight("abc"), 6);
        assert_eq!(weight("'"), 7);
    }
}
