//! `--command TEMPLATE`: the command run for each job (or batch), with `{}` (the arguments),
//! `{key}`, `{seq}` and `{slot}` replaced, every substitution shell-quoted (SPEC §3.5); GNU
//! parallel's replacement strings (`{.}`, `{/}`, `{//}`, `{/.}`, `{N}`, `{#}`, `{%}`) too.

use crate::placeholder::Placeholder;

/// The placeholder `{NAME}` stands for, when NAME is one.
fn piece_of(name: &str) -> Option<Piece> {
    Some(match name {
        "key" => Piece::Key,
        "seq" | "#" => Piece::Seq,
        "slot" | "%" => Piece::Slot,
        other if other.starts_with("res.") => {
            let resource = &other["res.".len()..];
            crate::resources::check_name(resource).ok()?;
            Piece::Resource(resource.to_owned())
        }
        other => Piece::Args(Placeholder::parse(other)?),
    })
}

/// Whether `{NAME}` is a placeholder of a template (`{}`, `{.}`, `{N}`, `{key}`, `{seq}`,
/// `{#}`, `{slot}`, `{%}`, `{res.NAME}`…).
pub(crate) fn is_placeholder(name: &str) -> bool {
    piece_of(name).is_some()
}

/// Whether `{NAME}` is a placeholder whose text comes from the input: the argument (`{}`,
/// `{.}`, `{N}`…) or the key. `{seq}`, `{slot}` and `{res.NAME}` are lanes' own numbers and
/// names.
pub(crate) fn carries_input(name: &str) -> bool {
    matches!(piece_of(name), Some(Piece::Args(_) | Piece::Key))
}

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
    /// The template as given.
    source: String,
    pieces: Vec<Piece>,
    /// `--colsep`: where `{N}` splits an argument into columns.
    colsep: Option<String>,
    /// The byte of the first argument placeholder in an assignment word (`x={}`), if any.
    assigned_at: Option<usize>,
}

/// Why a template is not usable.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum TemplateError {
    #[error("unknown placeholder `{{{0}}}` in --command (known: {{}}, {{.}}, {{/}}, {{//}}, {{/.}}, {{1}}, {{key}}, {{seq}} or {{#}}, {{slot}} or {{%}}, {{res.NAME}} of a declared resource; write {{{{ and }}}} for literal braces)")]
    Unknown(String),
    /// A shell's `${NAME}` read as a placeholder: what to write instead.
    #[error("`${{{0}}}` in --command: lanes reads `{{{0}}}` as a placeholder, and knows none of that name; a shell's `${{{0}}}` is written `${{{{{doubled}}}}}` in a template (braces doubled)", doubled = doubled_braces(.0))]
    ShellBraces(String),
    /// A shell's `${NAME…{}…}`: a placeholder meant inside a parameter expansion, read as a
    /// placeholder of that whole name.
    #[error("`${{{0}}}` in --command: lanes reads `{{{0}}}` as a placeholder, and knows none of that name. A placeholder inside a shell's `${{…}}` is refused (lanes could not quote its text there): give the argument to a variable first, `v={{}}; echo \"${{{{x:-$v}}}}\"`; or, for the shell's own text `${{{0}}}`, double the braces: `${{{{{doubled}}}}}`", doubled = doubled_braces(.0))]
    ShellParameterWithPlaceholder(String),
    #[error("unclosed `{{` in --command at byte {0} (write {{{{ for a literal brace)")]
    Unclosed(usize),
    #[error("lone `}}` in --command at byte {0} (write }}}} for a literal brace)")]
    LoneClose(usize),
    #[error("placeholder `{0}` {2} in --command at byte {1}{advice}", advice = .2.advice())]
    Quoted(String, usize, Place),
    #[error("the template in --command has no `{{}}`, and the argument appended at its end would be {0}: end the template outside quotes, comments and here-documents, or write `{{}}` where the argument goes (there the quoted text could run as shell code)")]
    AppendedQuoted(Place),
}

/// Whether the `}` at byte `at` of `text` is a shell word by itself (`; }`, ` } `): after
/// white space or `;`, and before white space, a control or redirection operator's first
/// character (`}>out`) or the end.
fn is_word_of_its_own(text: &str, at: usize) -> bool {
    let before = text[..at].chars().next_back();
    let after = text[at + 1..].chars().next();
    before.is_some_and(|c| c.is_whitespace() || c == ';')
        && after.is_none_or(|c| c.is_whitespace() || matches!(c, ';' | '&' | '|' | ')' | '<' | '>'))
}

impl Template {
    /// Parses `text`. `{{` and `}}` stand for literal braces. A template without `{}` gets
    /// ` {}` appended, so the argument is always passed (as `xargs` and GNU parallel do).
    ///
    /// # Errors
    /// An unknown placeholder (named), an unclosed `{` or a lone `}`; a placeholder of input
    /// text (`{}`, `{key}`, `{res.NAME}`) inside quotes, a comment or a here-document, and a
    /// template without `{}` whose end is in one of them (the appended argument would be).
    pub(crate) fn parse(text: &str) -> Result<Self, TemplateError> {
        let mut pieces = Vec::new();
        let mut literal = String::new();
        let places = places(text);
        let mut assigned_at = None;
        let mut chars = text.char_indices().peekable();
        while let Some((at, c)) = chars.next() {
            match c {
                '{' if chars.peek().map(|&(_, n)| n) == Some('{') => {
                    chars.next();
                    literal.push('{');
                }
                '}' if chars.peek().map(|&(_, n)| n) == Some('}') => {
                    chars.next();
                    literal.push('}');
                }
                // A shell's brace group, `{ …; }`: its braces are words of their own, which no
                // placeholder is (none begins with a space).
                '{' if chars.peek().is_some_and(|&(_, n)| n.is_whitespace()) => literal.push('{'),
                '}' if is_word_of_its_own(text, at) => literal.push('}'),
                '}' => return Err(TemplateError::LoneClose(at)),
                '{' => {
                    let rest = &text[at + 1..];
                    let close = rest.find('}').ok_or(TemplateError::Unclosed(at))?;
                    let name = &rest[..close];
                    let place = places[at];
                    // Right after a `$` (inside double quotes too: `"${HOME}"`).
                    let after_dollar =
                        place == Place::AfterDollar || unescaped_dollar_before(text, at);
                    let piece = piece_of(name).ok_or_else(|| {
                        if after_dollar && name.contains('{') {
                            TemplateError::ShellParameterWithPlaceholder(name.to_owned())
                        } else if after_dollar {
                            TemplateError::ShellBraces(name.to_owned())
                        } else {
                            TemplateError::Unknown(name.to_owned())
                        }
                    })?;
                    // Numbers are safe anywhere; text from the input is not. Right after a `$`
                    // neither is what it looks like (`${#}` is no shell's count there).
                    if after_dollar {
                        return Err(TemplateError::Quoted(
                            format!("{{{name}}}"),
                            at,
                            Place::AfterDollar,
                        ));
                    }
                    if place != Place::Word
                        && matches!(piece, Piece::Args(_) | Piece::Key | Piece::Resource(_))
                    {
                        return Err(TemplateError::Quoted(format!("{{{name}}}"), at, place));
                    }
                    if assigned_at.is_none()
                        && matches!(piece, Piece::Args(_))
                        && in_assignment(text.as_bytes(), &places, at)
                    {
                        assigned_at = Some(at);
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
        let mut source = text.to_owned();
        if !pieces.iter().any(|piece| matches!(piece, Piece::Args(_))) {
            // The appended argument lands where the text ends: an open quote, a comment or a
            // here-document there would take it in as a written `{}` would be.
            let appended = format!("{text} {{}}");
            let place = self::places(&appended)[text.len() + 1];
            if place != Place::Word {
                return Err(TemplateError::AppendedQuoted(place));
            }
            pieces.push(Piece::Text(" ".to_owned()));
            pieces.push(Piece::Args(Placeholder::WHOLE));
            source.push_str(" {}");
        }
        Ok(Template {
            source,
            pieces,
            colsep: None,
            assigned_at,
        })
    }

    /// Where an argument placeholder stands in an assignment word (`x={}`), by byte: a batch's
    /// several arguments there would make the first the value and the next a command to run
    /// (`x='a' 'b' 'c'` runs `b c`).
    pub(crate) fn args_in_assignment(&self) -> Option<usize> {
        self.assigned_at
    }

    /// How many placeholders of the argument (`{}`, `{.}`, `{1}`…) the template holds: each
    /// is replaced by all of a batch's arguments, each at most as long quoted as the whole
    /// argument is.
    pub(crate) fn argument_placeholders(&self) -> usize {
        self.pieces
            .iter()
            .filter(|piece| matches!(piece, Piece::Args(_)))
            .count()
    }

    /// The largest column a placeholder names (`{2}`: 2); 0 when none names one.
    pub(crate) fn largest_column(&self) -> usize {
        crate::placeholder::largest_column(self.pieces.iter().filter_map(|piece| match piece {
            Piece::Args(placeholder) => Some(placeholder),
            _ => None,
        }))
    }

    /// The template as the run record tells it: its text as given (a trailing command's as
    /// [`crate::trailing_command`] makes it, with the ` {}` it is given when it has no argument
    /// placeholder), and `--colsep` when a column placeholder uses it (else it changes nothing
    /// the template makes).
    pub(crate) fn recorded(&self) -> (String, Option<String>) {
        let colsep = self.colsep.clone().filter(|_| self.largest_column() > 0);
        (self.source.clone(), colsep)
    }

    /// The template with `{N}` splitting arguments at `colsep` (`--colsep`).
    pub(crate) fn with_colsep(mut self, colsep: Option<String>) -> Self {
        self.colsep = colsep;
        self
    }

    /// The command for `args` (one job's argument, or a batch's in lane order), holding no
    /// resource.
    #[cfg(test)]
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

    /// Why the command this template makes of `arg` (the job `seq` of key `key`, in a slot of
    /// at most `max_slot`) cannot run: longer than one argument can hold
    /// ([`crate::arg_limit`]), as `SHELL -c COMMAND` passes it; `None` when it fits.
    pub(crate) fn too_long(
        &self,
        arg: &str,
        key: &str,
        seq: u64,
        max_slot: usize,
    ) -> Option<String> {
        let length = self.rendered_len(arg, key, seq, max_slot);
        let limit = crate::arg_limit::max_argument_bytes();
        (length > limit).then(|| {
            format!(
                "with the command template, the job's command would be {length} bytes, more \
                 than the {limit} the one argument of `SHELL -c COMMAND` can hold (the \
                 system's limit on one argument, MAX_ARG_STRLEN)"
            )
        })
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

/// Where a byte of shell text stands, for a substitution placed there (POSIX "Shell Command
/// Language" §2.2 quoting, §2.3 comments and here-documents, §2.6.3 command substitution).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Place {
    /// Where a single-quoted substitution is one literal word: at the top level, or inside a
    /// command substitution (`$(…)`, backquotes), even one within double quotes.
    Word,
    /// Inside single or double quotes: the substitution's quotes would end and start them.
    Quotes,
    /// In a comment: a newline in the substitution ends the comment, and what follows runs.
    Comment,
    /// In a here-document's body: expanded by the shell (`$(…)` runs), and a line of the
    /// substitution equal to the delimiter ends the body early, whatever the delimiter's quoting.
    HereDocument,
    /// After a `case` inside a command substitution: its patterns end in a `)` that does not
    /// end the substitution, which this scan does not follow (it is no parser), so where the
    /// text after it stands is not known.
    AfterCase,
    /// After an `alias` command: the alias's text is read again wherever it is used, as
    /// quotes, a comment or a here-document this scan cannot see.
    AfterAlias,
    /// Right after a `$`: the substitution's opening quote would start bash's `$'…'`, in
    /// which a backslash escapes the closing quote.
    AfterDollar,
    /// After a construct sh (dash) and bash read differently: `$'…'` (bash's quotes with
    /// backslash escapes; dash: a `$` and plain single quotes), `$[…]` (bash's old arithmetic;
    /// dash: words, in which a `<<` opens a here-document), quotes inside `$((…))` (dash ends
    /// it at the first `))`), single quotes inside a `${…}` within double quotes, and an array
    /// assignment inside `$(…)` or `<(…)` (which bash 5.2 misreads), so where the text after
    /// it stands depends on the shell.
    AfterDollarQuote,
}

/// `text` with every brace doubled: how a template writes it literally.
fn doubled_braces(text: &str) -> String {
    text.replace('{', "{{").replace('}', "}}")
}

impl Place {
    /// What to do about a placeholder here, when the place's own words do not say it.
    fn advice(&self) -> &'static str {
        match self {
            Place::Word | Place::Comment | Place::HereDocument => {
                ": write it unquoted, outside comments and here-documents; lanes quotes every \
                 substitution itself (there the quoted text could run as shell code)"
            }
            Place::Quotes => {
                " (a backslash, backquotes, `${…}` and `$((…))` quote it too): write it \
                 unquoted, outside comments and here-documents; lanes quotes every substitution \
                 itself (there the quoted text could run as shell code)"
            }
            Place::AfterAlias | Place::AfterDollar | Place::AfterCase | Place::AfterDollarQuote => {
                ""
            }
        }
    }
}

impl std::fmt::Display for Place {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Place::Word => "in a word",
            Place::Quotes => "inside quotes",
            Place::Comment => "in a comment",
            Place::HereDocument => "in a here-document",
            Place::AfterAlias => {
                "after an `alias` command (an alias's text is read again where it is used, \
                 which lanes does not follow: write the command itself)"
            }
            Place::AfterDollar => {
                "right after a `$` (`${}` would be bash's `$'…'`, where a backslash escapes \
                 the quote, and `${#}` a number where a shell's `${#}` was meant: write `$` and \
                 the placeholder apart, or drop the `$`; a shell's own `${NAME}` is written \
                 `${{NAME}}`)"
            }
            Place::AfterCase => {
                "after a `case` inside `$(…)` (lanes does not follow its patterns' `)`: move \
                 the case out of the command substitution, or the placeholder before it)"
            }
            Place::AfterDollarQuote => {
                "after a construct sh (dash) and bash read differently, so where the text after \
                 it stands depends on the shell (`$'…'`, `$[…]`, quotes inside `$((…))`, single \
                 quotes inside a `${…}` within double quotes, an array assignment `a=(…)` inside \
                 `$(…)` or `<(…)`, a `(#` with a quote after it): write it otherwise, or the \
                 placeholder before it"
            }
        })
    }
}

/// Whether a scan stands inside a command substitution, `$(…)` or backquotes, at any depth.
fn inside_substitution(nest: &[Nest]) -> bool {
    nest.iter()
        .any(|n| matches!(n, Nest::Substitution(_) | Nest::Backquote))
}

/// What a scan of shell text is inside of, innermost last.
enum Nest {
    /// Double quotes.
    Double,
    /// `$(`…`)`, with the parentheses opened inside it and not yet closed.
    Substitution(usize),
    /// Backquotes.
    Backquote,
}

/// Whether a `$` not escaped by a backslash stands right before byte `at` (inside double
/// quotes as well as outside, where the scan's [`Place::AfterDollar`] finds it).
fn unescaped_dollar_before(text: &str, at: usize) -> bool {
    let Some(before) = text[..at].strip_suffix('$') else {
        return false;
    };
    let backslashes = before.bytes().rev().take_while(|&b| b == b'\\').count();
    backslashes % 2 == 0
}

/// Whether the word around byte `at` (a placeholder's `{` in a word) begins as an assignment,
/// an unquoted `NAME=`, `NAME+=` or `NAME[…]=`: the word's start is the last unquoted blank
/// or operator before it outside the parentheses of a `$(…)` in the word.
fn in_assignment(b: &[u8], places: &[Place], at: usize) -> bool {
    let mut depth = 0usize;
    let mut start = 0;
    let mut k = at;
    while k > 0 {
        k -= 1;
        // A line continuation is no boundary: the shell removes it first.
        if b[k] == b'\n' && k > 0 && b[k - 1] == b'\\' {
            k -= 1;
            continue;
        }
        // A `$(`'s parenthesis opens a command, in or out of double quotes.
        let opens_command = b[k] == b'(' && k > 0 && b[k - 1] == b'$';
        if places[k] != Place::Word && !opens_command {
            continue;
        }
        match b[k] {
            b')' => depth += 1,
            b'(' if depth > 0 => depth -= 1,
            b' ' | b'\t' | b'\n' | b';' | b'&' | b'|' | b'(' | b'`' if depth == 0 => {
                start = k + 1;
                break;
            }
            _ => {}
        }
    }
    // The word as the shell reads it, its line continuations removed; up to its first `=`,
    // every byte must be unquoted.
    let mut word = Vec::with_capacity(at - start);
    let mut unquoted = true;
    let mut j = start;
    while j < at {
        if b[j] == b'\\' && b.get(j + 1) == Some(&b'\n') {
            j += 2;
            continue;
        }
        if !word.contains(&b'=') && b[j] != b'=' && places[j] != Place::Word {
            unquoted = false;
        }
        word.push(b[j]);
        j += 1;
    }
    let Some(eq) = word.iter().position(|&c| c == b'=') else {
        return false;
    };
    let mut name = word[..eq].strip_suffix(b"+").unwrap_or(&word[..eq]);
    // An array element's subscript (`a[0]=`, bash).
    if let Some(open) = name.iter().position(|&c| c == b'[') {
        if name.last() == Some(&b']') {
            name = &name[..open];
        }
    }
    unquoted
        && !name.is_empty()
        && !name[0].is_ascii_digit()
        && name.iter().all(|&c| c.is_ascii_alphanumeric() || c == b'_')
}

/// The [`Place`] of every byte of `text`. A plain scan, not a parser: it follows quotes,
/// backslashes, comments, `$(…)` and backquotes (nested), and here-documents (`<<` and `<<-`,
/// bodies from the next newline to the delimiter's line; `<<<` is no here-document). Text it
/// cannot follow, a `case` inside `$(…)` (a pattern's `)` would be taken for the
/// substitution's end, and a quote after it for the end of the quotes around the
/// substitution), makes the rest of the text [`Place::AfterCase`]: refused, never taken for
/// a word.
fn places(text: &str) -> Vec<Place> {
    // A line continuation (backslash-newline) is removed before the shell reads further
    // (POSIX §2.2.1): `#` or `<<` after one starts a comment or a here-document. The text is
    // scanned with them removed, and each byte keeps its place; the removed bytes are no
    // placeholder's. Removed in comments and quoted here-documents too, where the shell keeps
    // them: the scan then finds more text in a comment or a document, never less.
    let (joined, at) = without_continuations(text.as_bytes());
    let (mut found, documents) = places_joined(&joined);
    // A here-document whose body or delimiter line had a continuation removed: bash joins it
    // before it looks for the delimiter (unquoted), dash and every quoted document do not, so
    // where the body ends depends on the shell. The rest of the text is taken as the body.
    if let Some(document) = documents.iter().find(|document| {
        let last = document.end.min(joined.len());
        // A gap between neighbours in the original text, or the delimiter line's end itself.
        (document.start.max(1)..last).any(|j| at[j] != at[j - 1] + 1)
            || at
                .get(last)
                .zip(last.checked_sub(1).and_then(|l| at.get(l)))
                .is_some_and(|(after, before)| *after != before + 1)
    }) {
        found[document.start..].fill(Place::HereDocument);
    }
    let mut places = vec![Place::Quotes; text.len()];
    for (place, &original) in found.into_iter().zip(&at) {
        places[original] = place;
    }
    places
}

/// `b` without its line continuations (a backslash, not itself escaped, before a newline,
/// outside single quotes), and where each byte left was in `b`.
fn without_continuations(b: &[u8]) -> (Vec<u8>, Vec<usize>) {
    let mut joined = Vec::with_capacity(b.len());
    let mut at = Vec::with_capacity(b.len());
    let (mut single, mut double) = (false, false);
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b'\\' if !single => {
                if b.get(i + 1) == Some(&b'\n') {
                    i += 2;
                    continue;
                }
                joined.push(b[i]);
                at.push(i);
                if i + 1 < b.len() {
                    joined.push(b[i + 1]);
                    at.push(i + 1);
                }
                i += 2;
                continue;
            }
            b'\'' if !double => single = !single,
            b'"' if !single => double = !double,
            _ => {}
        }
        joined.push(b[i]);
        at.push(i);
        i += 1;
    }
    (joined, at)
}

/// [`places`] of a text without line continuations: [`scan`]'s, and from the first `alias`
/// command on, [`Place::AfterAlias`]; with the here-documents' bodies, each with its delimiter
/// line.
fn places_joined(b: &[u8]) -> (Vec<Place>, Vec<std::ops::Range<usize>>) {
    let (mut places, documents) = scan(b);
    if let Some(at) = alias_command(b) {
        places[at..].fill(Place::AfterAlias);
    }
    (places, documents)
}

/// Where the first word that may run `alias` starts: `alias` whose neighbours are a word's
/// edge or what expansion takes away (quotes, a backslash, an empty `` ` ` `` or `$(…)`
/// before it: ``` ``alias ``` runs it too), wherever the scan stands there (quotes around
/// it run it all the same). `alias.st`, a git argument, is no such word. A name made less
/// plainly (`a''lias`) is code made at run time, as `eval`'s is.
fn alias_command(b: &[u8]) -> Option<usize> {
    const WORD: &[u8] = b"alias";
    (0..b.len()).find(|&at| {
        b[at..].starts_with(WORD)
            && (at == 0
                || matches!(
                    b[at - 1],
                    b' ' | b'\t'
                        | b'\n'
                        | b';'
                        | b'&'
                        | b'|'
                        | b'('
                        | b')'
                        | b'`'
                        | b'\''
                        | b'"'
                        | b'\\'
                        | b'}'
                ))
            && b.get(at + WORD.len()).is_none_or(|n| {
                matches!(
                    n,
                    b' ' | b'\t'
                        | b'\n'
                        | b';'
                        | b'&'
                        | b'|'
                        | b')'
                        | b'`'
                        | b'\''
                        | b'"'
                        | b'\\'
                        | b'$'
                )
            })
    })
}

/// The [`Place`] of every byte of a text without line continuations, `alias` aside, and where
/// each here-document's body and delimiter line are.
fn scan(b: &[u8]) -> (Vec<Place>, Vec<std::ops::Range<usize>>) {
    let mut documents = Vec::new();
    let mut places = vec![Place::Word; b.len()];
    let mut nest: Vec<Nest> = Vec::new();
    let mut pending: Vec<(Vec<u8>, bool)> = Vec::new();
    let mut word_start = true;
    let mut i = 0;
    while i < b.len() {
        let c = b[i];
        let next = b.get(i + 1).copied();
        let mut word_goes_on = false;
        if c == b'$' && next == Some(b'[') {
            // bash's old `$[…]` arithmetic; sh (dash) reads `$[` and words, in which a `<<`
            // opens a here-document. Where it ends depends on the shell.
            places[i..].fill(Place::AfterDollarQuote);
            return (places, documents);
        }
        if let Some(end) = quoted_expansion_end(b, i) {
            // Quotes inside `$((…))` (dash ends it at the first `))`, quoted or not), and
            // single quotes inside a `${…}` within double quotes (literal to dash, quotes to
            // bash): where the text after them stands depends on the shell.
            let span = &b[i..end];
            let arithmetic = b.get(i + 1) == Some(&b'(');
            let parts_ways = if arithmetic {
                span.iter().any(|&q| q == b'\'' || q == b'"')
            } else {
                matches!(nest.last(), Some(Nest::Double)) && span.contains(&b'\'')
            };
            if parts_ways {
                places[i..].fill(Place::AfterDollarQuote);
                return (places, documents);
            }
            places[i..end].fill(Place::Quotes);
            i = end;
            word_start = false;
            continue;
        }
        let word_here = |word: &[u8]| {
            word_start
                && b[i..].starts_with(word)
                && b.get(i + word.len())
                    .is_none_or(|&n| !(n.is_ascii_alphanumeric() || n == b'_'))
        };
        if matches!(nest.last(), Some(Nest::Substitution(_))) && word_here(b"case") {
            places[i..].fill(Place::AfterCase);
            return (places, documents);
        }
        if matches!(nest.last(), Some(Nest::Double)) {
            places[i] = Place::Quotes;
            match c {
                b'\\' => {
                    if i + 1 < b.len() {
                        places[i + 1] = Place::Quotes;
                    }
                    i += 2;
                    continue;
                }
                b'"' => {
                    nest.pop();
                }
                b'$' if next == Some(b'(') => {
                    places[i + 1] = Place::Quotes;
                    nest.push(Nest::Substitution(0));
                    i += 2;
                    word_start = true;
                    continue;
                }
                b'`' => {
                    nest.push(Nest::Backquote);
                    word_start = true;
                }
                _ => {}
            }
            i += 1;
            continue;
        }
        if nest.iter().any(|n| matches!(n, Nest::Backquote)) {
            // Inside backquotes the shell takes backslashes out of the text before it runs
            // it, and a quote ends nothing: a quoted substitution is no literal word there.
            places[i] = Place::Quotes;
        }
        match c {
            b'\\' => {
                // The escaped byte is quoted: a placeholder's `{` there would leave the
                // substitution's opening quote escaped (`\'…'`).
                if i + 1 < b.len() {
                    places[i + 1] = Place::Quotes;
                }
                i += 2;
                word_start = false;
                continue;
            }
            b'$' if next == Some(b'\'') => {
                // `$'…'` (bash, ksh, zsh; POSIX 2024) has backslash escapes inside; sh (dash)
                // reads a `$` and plain quotes. Where it ends depends on the shell.
                places[i..].fill(Place::AfterDollarQuote);
                return (places, documents);
            }
            b'\'' => {
                let end = b[i + 1..]
                    .iter()
                    .position(|&q| q == b'\'')
                    .map_or(b.len(), |at| i + 1 + at + 1);
                places[i..end].fill(Place::Quotes);
                i = end;
                word_start = false;
                continue;
            }
            b'"' => nest.push(Nest::Double),
            b'#' if word_start => {
                let end = b[i..]
                    .iter()
                    .position(|&n| n == b'\n')
                    .map_or(b.len(), |at| i + at);
                // Right after a `(` (inside bash's `[[ … =~ … ]]`) or inside `(( … ))`, a `#`
                // starts no comment to bash: a quote in what this scan would take for one may
                // open quotes.
                let line_start = b[..i]
                    .iter()
                    .rposition(|&n| n == b'\n')
                    .map_or(0, |at| at + 1);
                let line = &b[line_start..i];
                let count = |pair: &[u8]| line.windows(2).filter(|w| *w == pair).count();
                let in_arithmetic = count(b"((") > count(b"))");
                if (i > 0 && b[i - 1] == b'(' || in_arithmetic)
                    && b[i..end].iter().any(|&q| matches!(q, b'\'' | b'"' | b'`'))
                {
                    places[i..].fill(Place::AfterDollarQuote);
                    return (places, documents);
                }
                places[i..end].fill(Place::Comment);
                i = end;
                continue;
            }
            b'$' if next == Some(b'(') => {
                nest.push(Nest::Substitution(0));
                i += 2;
                word_start = true;
                continue;
            }
            // A placeholder right after a `$` (`{{` is a literal brace, read above).
            b'$' if next == Some(b'{') => places[i + 1] = Place::AfterDollar,
            b'(' => {
                // An array assignment inside `$(…)`, backquotes or `<(…)`: bash 5.2 misreads
                // quoted text in it there, and may end the substitution inside an argument.
                if i > 0
                    && b[i - 1] == b'='
                    && (inside_substitution(&nest)
                        || b[..i].windows(2).any(|w| w == b"<(" || w == b">("))
                {
                    places[i..].fill(Place::AfterDollarQuote);
                    return (places, documents);
                }
                if let Some(Nest::Substitution(open)) = nest.last_mut() {
                    *open += 1;
                }
            }
            b')' => match nest.last_mut() {
                Some(Nest::Substitution(0)) => {
                    nest.pop();
                    // The substitution's end is no word's end: `$(true)#` goes on as one word,
                    // its `#` no comment.
                    word_goes_on = true;
                }
                Some(Nest::Substitution(open)) => *open -= 1,
                _ => {}
            },
            b'`' => {
                if matches!(nest.last(), Some(Nest::Backquote)) {
                    nest.pop();
                    word_goes_on = true;
                } else {
                    nest.push(Nest::Backquote);
                }
            }
            b'<' if next == Some(b'<') => {
                if b.get(i + 2) == Some(&b'<') {
                    i += 3;
                    word_start = true;
                    continue;
                }
                let (delimiter, strip, end) = here_document_delimiter(b, i + 2);
                if b[i + 2..end].windows(2).any(|w| w == b"$'" || w == b"$\"") {
                    // `$'EOF'` or `$"EOF"`: bash's delimiter is `EOF`, dash's `$EOF`, so
                    // where the body ends depends on the shell.
                    places[i..].fill(Place::HereDocument);
                    return (places, documents);
                }
                pending.push((delimiter, strip));
                // A substitution in the delimiter's word would be part of that word, its
                // quotes the word's, and the word can run on past it.
                places[i..end].fill(Place::Quotes);
                if inside_substitution(&nest) {
                    // Opened inside `$(…)` or backquotes, its body may be read (bash) from
                    // the next newline of the input, one inside a substitution's quotes
                    // included: the rest of the line is no place for one.
                    let eol = b[end..]
                        .iter()
                        .position(|&n| n == b'\n')
                        .map_or(b.len(), |at| end + at);
                    places[end..eol].fill(Place::HereDocument);
                }
                i = end;
                word_start = true;
                continue;
            }
            b'\n' if !pending.is_empty() => {
                let mut line = i + 1;
                for (delimiter, strip) in pending.drain(..) {
                    // A document before it may have run to the text's end.
                    let body = line.min(b.len());
                    // A `$(…)` or backquotes still open in the body: an unquoted body's
                    // substitution is code to dash, and a delimiter line inside it does not
                    // end the body there (bash ends it). Counted plainly; where one is open at
                    // the delimiter's line, the rest of the text is taken as the body.
                    let (mut open, mut backquote) = (0usize, false);
                    loop {
                        if line >= b.len() {
                            places[body..].fill(Place::HereDocument);
                            documents.push(body..b.len());
                            break;
                        }
                        let eol = b[line..]
                            .iter()
                            .position(|&n| n == b'\n')
                            .map_or(b.len(), |at| line + at);
                        let mut content = &b[line..eol];
                        if strip {
                            while let [b'\t', rest @ ..] = content {
                                content = rest;
                            }
                        }
                        if content == delimiter.as_slice() {
                            if open > 0 || backquote {
                                places[body..].fill(Place::HereDocument);
                                return (places, documents);
                            }
                            places[body..line].fill(Place::HereDocument);
                            documents.push(body..eol);
                            line = eol + 1;
                            break;
                        }
                        for (k, &byte) in b[line..eol].iter().enumerate() {
                            match byte {
                                b'(' if k > 0 && b[line + k - 1] == b'$' => open += 1,
                                b')' => open = open.saturating_sub(1),
                                b'`' => backquote = !backquote,
                                _ => {}
                            }
                        }
                        line = eol + 1;
                    }
                }
                i = line.min(b.len());
                word_start = true;
                continue;
            }
            _ => {}
        }
        word_start = !word_goes_on
            && matches!(
                c,
                b' ' | b'\t' | b'\n' | b';' | b'&' | b'|' | b'(' | b')' | b'<' | b'>' | b'`'
            );
        i += 1;
    }
    (places, documents)
}

/// Where an expansion that starts at `at` and takes a quoted substitution in as something
/// else than one literal word ends, at the top level and inside double quotes alike: `${…}`,
/// inside which quotes nest, and `$((…))`, read as if in double quotes (POSIX §2.6.4), so that
/// a substitution's `$(…)` would run. `None` for any other byte.
fn quoted_expansion_end(b: &[u8], at: usize) -> Option<usize> {
    if b[at] != b'$' {
        return None;
    }
    let rest = &b[at + 1..];
    if rest.starts_with(b"{{") {
        Some(parameter_end(b, at))
    } else if rest.starts_with(b"((") {
        Some(arithmetic_end(b, at))
    } else {
        None
    }
}

/// Where the parameter expansion `${…}` that starts at `at` ends (after its `}`), as the
/// template writes it: `${{` … `}}`, literal braces doubled, and `{name}` placeholders within.
/// Its first `}` closes it: a `{` in its word opens nothing (`${x:-{}` is `{` when x is unset,
/// in dash and bash alike), but a parameter expansion in its word is read whole
/// (`${x:-${y}}`). Quotes nest inside it, and a `}` within them, or escaped, closes nothing
/// (`${x:-"}"}` is one expansion). The text's end when it is not closed.
fn parameter_end(b: &[u8], at: usize) -> usize {
    let mut i = at + 3;
    while i < b.len() {
        if let Some(after) = past_quoted(b, i) {
            i = after;
            continue;
        }
        if b[i..].starts_with(b"${{") {
            i = parameter_end(b, i);
        } else if b[i..].starts_with(b"{{") {
            i += 2;
        } else if b[i..].starts_with(b"}}") {
            return i + 2;
        } else if b[i] == b'{' {
            // A placeholder, `{name}`: its `}` closes nothing.
            i = b[i..]
                .iter()
                .position(|&c| c == b'}')
                .map_or(b.len(), |end| i + end + 1);
        } else {
            i += 1;
        }
    }
    b.len()
}

/// Where the arithmetic expansion `$((…))` that starts at `at` ends (after its last `)`),
/// its parentheses counted; the text's end when it is not closed.
fn arithmetic_end(b: &[u8], at: usize) -> usize {
    closing_end(b, at, b'(', b')')
}

/// Where a bracketed expansion that starts at `at` (`$((…))`, `$[…]`) ends, after the
/// `close` that balances its first `open`: quotes nest inside it (bash reads `$(("))"))` as
/// one expansion), and escaped or quoted brackets count for nothing. The text's end when it
/// is not closed.
fn closing_end(b: &[u8], at: usize, open: u8, close: u8) -> usize {
    let mut depth = 0usize;
    let mut i = at + 1;
    while i < b.len() {
        if let Some(after) = past_quoted(b, i) {
            i = after;
            continue;
        }
        if b[i] == open {
            depth += 1;
        } else if b[i] == close {
            depth = depth.saturating_sub(1);
            if depth == 0 {
                return i + 1;
            }
        }
        i += 1;
    }
    b.len()
}

/// Past what starts at `i` when it is quoted or escaped inside an expansion: a backslash and
/// the byte after it, or a quoted string to its closing quote (in double quotes, past escaped
/// bytes); the text's end when it is not closed. `None` for any other byte.
fn past_quoted(b: &[u8], i: usize) -> Option<usize> {
    match b[i] {
        b'\\' => Some((i + 2).min(b.len())),
        quote @ (b'"' | b'\'') => {
            let mut end = i + 1;
            while end < b.len() && b[end] != quote {
                end += if quote == b'"' && b[end] == b'\\' {
                    2
                } else {
                    1
                };
            }
            Some((end + 1).min(b.len()))
        }
        _ => None,
    }
}

/// The delimiter of a here-document whose `<<` ends before `at`: its text with the quotes
/// removed (POSIX §2.7.4), whether the body's leading tabs are stripped (`<<-`), and where
/// the word ends.
fn here_document_delimiter(b: &[u8], mut at: usize) -> (Vec<u8>, bool, usize) {
    let strip = b.get(at) == Some(&b'-');
    if strip {
        at += 1;
    }
    while matches!(b.get(at), Some(b' ' | b'\t')) {
        at += 1;
    }
    let mut delimiter = Vec::new();
    let mut quote = None;
    while let Some(&c) = b.get(at) {
        match (quote, c) {
            (Some(q), c) if c == q => quote = None,
            (Some(_), c) => delimiter.push(c),
            // A substitution is part of the word, metacharacters in it too (its text is
            // the delimiter's, unexpanded).
            (None, b'\'' | b'"' | b'`') => quote = Some(c),
            (None, b'$') if b.get(at + 1) == Some(&b'(') => {
                let end = closing_end(b, at, b'(', b')');
                delimiter.extend_from_slice(&b[at..end]);
                at = end;
                continue;
            }
            (None, b'\\') => {
                at += 1;
                if let Some(&escaped) = b.get(at) {
                    delimiter.push(escaped);
                }
            }
            (None, b' ' | b'\t' | b'\n' | b';' | b'&' | b'|' | b'<' | b'>' | b'(' | b')') => break,
            (None, c) => delimiter.push(c),
        }
        at += 1;
    }
    (delimiter, strip, at.min(b.len()))
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
        assert_eq!(Template::parse("echo a}"), Err(TemplateError::LoneClose(6)));
        assert_eq!(
            Template::parse("echo {a }"),
            Err(TemplateError::Unknown("a ".into()))
        );
    }

    #[test]
    fn a_shell_s_brace_group_passes_as_it_is() {
        let t = Template::parse("f() { echo {}; }; f").unwrap();
        assert_eq!(t.render(&["x y"], "k", 1, 1), "f() { echo 'x y'; }; f");
        let t = Template::parse("{ echo {}\n} >> out").unwrap();
        assert_eq!(t.render(&["a"], "k", 1, 1), "{ echo 'a'\n} >> out");
        // The argument is appended after a group that does not place it.
        let t = Template::parse("{ date; } ").unwrap();
        assert_eq!(t.render(&["a"], "k", 1, 1), "{ date; }  'a'");
        assert_eq!(
            Template::parse("echo }").unwrap().render(&["a"], "k", 1, 1),
            "echo } 'a'"
        );
        let t = Template::parse("{ echo {}; }>out").unwrap();
        assert_eq!(t.render(&["a"], "k", 1, 1), "{ echo 'a'; }>out");
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
            Err(TemplateError::Quoted("{}".into(), 11, Place::Quotes))
        );
        assert!(matches!(
            Template::parse("echo '{key}'"),
            Err(TemplateError::Quoted(..))
        ));
        assert!(Template::parse("echo \"a\" {} 'b' \\\" {key}").is_ok());
        assert!(Template::parse("echo \"{seq}/{slot}\" {}").is_ok());
    }

    #[test]
    fn a_placeholder_after_a_case_inside_a_command_substitution_is_refused() {
        // The pattern's `)` is no end of the substitution: the `"` after it opens quotes
        // inside it, and the `{}` there would run its argument's `$(…)`.
        let hostile = "echo \"$(case x in x) echo \" {} \" ;; esac)\"";
        assert_eq!(
            Template::parse(hostile),
            Err(TemplateError::Quoted("{}".into(), 28, Place::AfterCase))
        );
        for refused in [
            "echo $(case {} in a) echo;; esac)",
            "echo \"$( (case x in (x) true;; esac) )\" {}",
            "x=$(true; case y in y) :;; esac) {key}",
        ] {
            assert!(
                matches!(
                    Template::parse(refused),
                    Err(TemplateError::Quoted(_, _, Place::AfterCase))
                ),
                "{refused}"
            );
        }
        // A case at the top level, one before the placeholder's substitution, and words that
        // only begin with `case`, are followed as before.
        for accepted in [
            "case {} in *[!0-9]*) exit 2;; esac; echo {}",
            "echo {} \"$(case x in x) echo hi;; esac)\"",
            "echo \"$(cases {})\"",
            "echo \"$(basename {})\" case",
        ] {
            assert!(Template::parse(accepted).is_ok(), "{accepted}");
        }
    }

    #[test]
    fn an_argument_in_an_assignment_word_is_found() {
        for (text, at) in [
            ("x={}; echo \"$x\"", Some(2)),
            ("a=1 b+={}/x cmd", Some(7)),
            ("echo {}; y=\"$(cat {})\"", None),
            ("echo \"a=\"{} 'b='{}", None),
            ("cmd {} x=1", None),
            ("x=({})", None),
            ("f=$(pwd)/{} true", Some(9)),
            ("arr[0]={} true", Some(7)),
            ("x=1 x[1]={} true", Some(9)),
            ("echo \"$(x={} true)\"", Some(10)),
            ("echo \"size: $(FILE={} ./m)\"", Some(19)),
            ("LC_ALL=C \\\nFILE={} ./m", Some(16)),
            ("FILE\\\n={} ./m", Some(7)),
        ] {
            let template = Template::parse(text).unwrap();
            assert_eq!(template.args_in_assignment(), at, "{text}");
        }
    }

    #[test]
    fn a_placeholder_right_after_a_dollar_or_after_an_alias_is_refused() {
        // `$'…'` is bash's quoting with backslash escapes: `\'` in the argument ends nothing.
        // And lanes' numbers there would stand for a shell's `${#}` or `${seq}`.
        for refused in [
            "echo ${}",
            "echo a${key}b",
            "echo $\\\n{}",
            "echo ${2}",
            "echo ${#} {}",
            "echo ${seq} {}",
            "echo ${%}",
            "echo \"${seq}\" {}",
            "echo \\\\${}",
        ] {
            assert!(
                matches!(
                    Template::parse(refused),
                    Err(TemplateError::Quoted(_, _, Place::AfterDollar))
                ),
                "{refused}"
            );
        }
        // A shell's `${NAME}` is no placeholder lanes knows: the error says how to write it.
        assert_eq!(
            Template::parse("echo ${HOME}/{}"),
            Err(TemplateError::ShellBraces("HOME".into()))
        );
        assert!(TemplateError::ShellBraces("HOME".into())
            .to_string()
            .contains("is written `${{HOME}}` in a template"));
        assert!(Template::parse("echo ${{HOME}}/{} $ {seq}").is_ok());
        // A placeholder meant inside `${…}`: the error says how to pass the argument, and,
        // every brace of the name doubled, how to write the shell's own text.
        let message = Template::parse("echo ${x:-{}}").unwrap_err().to_string();
        assert!(
            message.contains("give the argument to a variable first, `v={}; echo \"${{x:-$v}}\"`")
                && message.contains("double the braces: `${{x:-{{}}`"),
            "{message}"
        );
        // What it suggests is accepted, and is what was meant.
        let suggested = Template::parse("v={}; echo \"${{x:-$v}}\"").unwrap();
        assert_eq!(
            suggested.render(&["a b"], "a b", 1, 1),
            "v='a b'; echo \"${x:-$v}\""
        );
        assert_eq!(
            Template::parse("echo \"${HOME}\" {}"),
            Err(TemplateError::ShellBraces("HOME".into()))
        );
        // An alias's text is read again where it is used: here a `"` before `{}`.
        for refused in [
            "alias q='echo \"'\nq {}",
            "alias c='#'\nc {}",
            "x; alias;{}",
            "``alias q='#'\nq {}",
            "\\alias c='#'\nc {}",
            "'alias' c='#'\nc {}",
        ] {
            assert!(
                matches!(
                    Template::parse(refused),
                    Err(TemplateError::Quoted(_, _, Place::AfterAlias))
                ),
                "{refused}"
            );
        }
        assert!(matches!(
            Template::parse("echo hi; alias q=x"),
            Err(TemplateError::AppendedQuoted(Place::AfterAlias))
        ));
        for accepted in [
            "echo \\${}",
            "echo ${{HOME}} {}",
            "echo $ {}",
            "git config alias.st {}",
            "echo {}; alias q=x",
        ] {
            assert!(Template::parse(accepted).is_ok(), "{accepted}");
        }
    }

    #[test]
    fn placeholders_in_comments_and_here_documents_are_refused() {
        let refused = [
            ("cat <<EOF\n{}\nEOF", Place::HereDocument),
            ("cat <<'EOF'\nline {key}\nEOF", Place::HereDocument),
            (
                "cat <<-\"END\" >out\n\t{}\n\tEND\necho done",
                Place::HereDocument,
            ),
            ("cat <<A; cat <<B\na\nA\n{}\nB", Place::HereDocument),
            ("echo hi # {}", Place::Comment),
            ("echo hi\n# the file {}\n", Place::Comment),
            ("echo \"$(echo \"{}\")\"", Place::Quotes),
            ("printf '%s' '{res.gpu}'", Place::Quotes),
            // The escaped opening quote of the substitution.
            ("echo \\{}", Place::Quotes),
            // Backquotes take backslashes out, and a quote ends nothing there.
            ("echo \"`basename {}`\"", Place::Quotes),
            ("echo `basename {}`", Place::Quotes),
            // A line continuation before `#` or between `<` and `<`.
            ("echo x \\\n#{}", Place::Comment),
            ("cat <\\\n<EOF\n{}\nEOF", Place::HereDocument),
            // A body line ending in a backslash joins the delimiter's line to it.
            ("cat <<EOF\nx\\\nEOF\n{}\nEOF", Place::HereDocument),
            ("echo $'\\' {} '", Place::AfterDollarQuote),
            // dash reads `$` and a plain quote: `'{}` would open a quote there.
            ("echo $'don\\'t '{}", Place::AfterDollarQuote),
            // A continuation in a document's delimiter line: bash joins it, dash and a quoted
            // document do not, so the body may go on.
            ("cat <<'EOF'\nE\\\nOF\necho {}\nEOF", Place::HereDocument),
            ("cat <<EOF\nE\\\nOF\necho {}\nEOF", Place::HereDocument),
            // Opened inside `$(…)`: bash may read its body from the next newline, one inside
            // the argument's quotes included.
            ("echo $(cat <<EOF) {}\nEOF", Place::HereDocument),
            // A delimiter line inside a `$(…)` of an unquoted body ends the body in bash, not
            // in dash.
            (
                "cat <<EOF\nS: $(cat <<EOF\ninner\nEOF\n)\nItem: {}\nEOF",
                Place::HereDocument,
            ),
            // `$"EOF"` is bash's `EOF` and dash's `$EOF`.
            ("cat <<$\"EOF\"\nhead\n$EOF\necho {}", Place::HereDocument),
            ("cat <<$'EOF'\nhead\n$EOF\necho {}", Place::HereDocument),
            // `$[` is bash's arithmetic, dash's word with a here-document in it.
            ("echo $[1<<2]\necho {}", Place::AfterDollarQuote),
            // bash: no comment inside `[[ =~ ]]`, so the `"` opens quotes over the newline.
            (
                "[[ {} =~ ^(#|;) ]] && echo \"c:\n {}\"",
                Place::AfterDollarQuote,
            ),
            ("((1 #));\"\necho {}\n\"", Place::AfterDollarQuote),
            // (In backquotes the delimiter word runs on through the closing backquote.)
            ("echo `cat <<EOF` {}\nEOF", Place::Quotes),
            ("echo `cat <<EOF ` {}\nEOF", Place::HereDocument),
            ("echo \"${{x:-\"{}\"}}\"", Place::Quotes),
            ("echo \"${{HOME#'{}'}}\"", Place::AfterDollarQuote),
            ("echo ${{x:-{}}}", Place::Quotes),
            // A quote opened inside `${…}` runs past a `}` within it.
            ("echo ${{x:-\"}}{}}}", Place::Quotes),
            ("echo ${{x:-'}}{}'}}", Place::Quotes),
            ("echo $(( {} ))", Place::Quotes),
            // bash's old arithmetic reads its text as in double quotes.
            ("echo $[ {} ]", Place::AfterDollarQuote),
            ("echo $[{}]", Place::AfterDollarQuote),
            // Quotes nest inside arithmetic: the expansion runs past the `))` in them.
            ("echo \"$((\"))\")){}\"", Place::AfterDollarQuote),
            // A substitution's end is no word's end: the `#` after it is no comment, and
            // the quote after that opens one.
            ("echo $(true)#\"\n{}\"", Place::Quotes),
            ("echo `true`#\"\n{}\"", Place::Quotes),
            // A here-document's delimiter word runs on through a substitution in it.
            ("cat <<E`&{}`", Place::Quotes),
            ("cat <<E$(&{})", Place::Quotes),
            ("echo \"$(( {} ))\"", Place::Quotes),
            ("cat <<E{}", Place::Quotes),
        ];
        for (text, place) in refused {
            match Template::parse(text) {
                Err(TemplateError::Quoted(_, _, found)) => assert_eq!(found, place, "{text:?}"),
                other => panic!("{text:?}: {other:?}"),
            }
        }
        let accepted = [
            "echo \"$(echo {})\"",
            "echo {} # a \"comment\" that quotes",
            "rsync -a \\\n  {} host:",
            "echo '\\\n' {}",
            "echo \"${{HOME}}\" {}",
            "x=a#b; echo {}",
            "cat <<< {}",
            "cat <<EOF\nfixed text {seq}\nEOF\necho {}",
            "cat <<EOF >out\nno placeholder\nEOF\ngzip {}",
            "echo $((1 + {seq})) {}",
        ];
        for text in accepted {
            assert!(Template::parse(text).is_ok(), "{text:?}");
        }
    }

    #[test]
    fn a_template_whose_end_would_take_in_the_appended_argument_is_refused() {
        let refused = [
            ("echo \"", Place::Quotes),
            ("printf '%s", Place::Quotes),
            ("echo hi # note", Place::Comment),
            ("cat <<E\nbody", Place::HereDocument),
            // The appended argument is on the delimiter's line, which is then no delimiter.
            ("cat <<E\nbody\nE", Place::HereDocument),
            // `${x:-{}` ends at its first `}`: the `#` after the `;` starts a comment.
            ("${{x:-{{}};#}}", Place::Comment),
        ];
        for (text, place) in refused {
            match Template::parse(text) {
                Err(TemplateError::AppendedQuoted(found)) => assert_eq!(found, place, "{text:?}"),
                other => panic!("{text:?}: {other:?}"),
            }
        }
        let accepted = [
            "gzip -t",
            "echo \"done\" # ok\necho",
            "cat <<E\nbody\nE\necho",
            "echo \"$(basename x)\"",
        ];
        for text in accepted {
            let template = Template::parse(text).unwrap_or_else(|err| panic!("{text:?}: {err}"));
            assert!(
                template.render(&["a"], "k", 1, 1).ends_with(" 'a'"),
                "{text:?}"
            );
        }
    }

    #[test]
    fn a_refused_appended_argument_would_have_run() {
        // What the refusal prevents, shown with the shell: appended after an open double
        // quote, the argument's own quote ends it and the rest runs.
        let rendered = format!("echo \" {}", shell_quote("\"; echo PWNED #"));
        let out = std::process::Command::new("sh")
            .args(["-c", &rendered])
            .output()
            .expect("sh runs");
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(stdout.lines().any(|line| line == "PWNED"), "{stdout:?}");
    }

    /// An argument that runs `touch` wherever it is not one literal word: quotes of both
    /// kinds, a backquote, `$(…)`, a newline, a here-document's delimiter line, a backslash.
    const HOSTILE: &str =
        "a'b\"c`touch p1`$(touch p2);touch p3 #\ntouch p4\nE\ntouch p5\n${x:-$(touch p6)}\\";

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(300))]
        /// Every template lanes accepts, rendered with a hostile argument and run by the
        /// shells at hand, runs none of the argument: the check and the shell agree.
        #[test]
        fn no_accepted_template_runs_its_argument(
            tokens in proptest::collection::vec(proptest::sample::select(&[
                "{}", " ", "q", "'", "\"", "`", "$(", ")", "\\", "\n", "#", "<<E", "<<-E",
                "<<'E'", "E", "${{x:-", "}}", "$'", ";", "|", "{key}", "\t", "<", "$((", "))",
                "\nE\n", "<<\\E", "{{", "(", "{seq}", "\"$(", "\"$((", "=", "&", "<<<", "!",
                "$[", "]", "$(true)", "case x in x) ", ";; esac", "$", "alias q='#'\nq ",
            ][..]), 0..16)
        ) {
            let text: String = tokens.concat();
            if let Ok(template) = Template::parse(&text) {
                let command = template.render(&[HOSTILE], HOSTILE, 1, 1);
                for shell in ["sh", "bash"] {
                    let dir = tempfile::tempdir().unwrap();
                    let ran = std::process::Command::new("timeout")
                        .args(["5", shell, "-c", &command])
                        .current_dir(dir.path())
                        .stdin(std::process::Stdio::null())
                        .stdout(std::process::Stdio::null())
                        .stderr(std::process::Stdio::null())
                        .status();
                    if ran.is_err() {
                        continue;
                    }
                    let touched: Vec<_> = std::fs::read_dir(dir.path())
                        .unwrap()
                        .filter_map(|entry| entry.ok())
                        .map(|entry| entry.file_name())
                        .collect();
                    proptest::prop_assert!(
                        touched.is_empty(),
                        "{shell} ran the argument of {text:?}: {touched:?}\n{command}"
                    );
                }
            }
        }

        #[test]
        fn any_shell_text_is_parsed_or_refused_without_a_panic(
            text in "[a-z {}#<>'\"`$()\\\\\n\t;|&-]{0,48}"
        ) {
            let _ = Template::parse(&text);
        }
    }

    #[test]
    fn here_documents_that_run_to_the_text_s_end_are_read_without_a_panic() {
        // Two documents on one line, the first running to the end: the second has no body.
        for text in [
            "<<\\-<<\na",
            "cat <<A <<B\nx",
            "cat <<A <<B <<C\nA\n",
            "<<A<<B\n",
        ] {
            let _ = Template::parse(text);
        }
        // An argument inside such a document is still refused.
        assert!(Template::parse("cat <<A <<B\n{}").is_err());
    }

    #[test]
    fn a_refused_here_document_would_have_run_the_argument() {
        // What the refusal prevents, shown with the shell: the argument's `$(…)` runs inside
        // an unquoted here-document, and a line equal to the delimiter ends a quoted one.
        let dir = tempfile::tempdir().unwrap();
        let argument = format!("$(touch {}/ran)", dir.path().display());
        let command = format!("cat <<EOF\n{}\nEOF", shell_quote(&argument));
        std::process::Command::new("sh")
            .arg("-c")
            .arg(command)
            .output()
            .unwrap();
        assert!(dir.path().join("ran").exists());
        assert!(Template::parse("cat <<EOF\n{}\nEOF").is_err());
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
