//! `--key TEMPLATE`: a job's key computed from its input record with GNU parallel's
//! replacement strings (`{}`, `{.}`, `{/}`, `{//}`, `{/.}`, `{N}` with `--colsep`). A key is
//! not shell text: substitutions are not quoted.

use crate::placeholder::Placeholder;

#[derive(Debug, Clone, PartialEq, Eq)]
enum Piece {
    Text(String),
    Arg(Placeholder),
}

/// A parsed `--key` template.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct KeyTemplate {
    pieces: Vec<Piece>,
    colsep: Option<String>,
}

/// Why a `--key` template is not usable.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum KeyTemplateError {
    #[error("unknown placeholder `{{{0}}}` in --key (known: {{}}, {{.}}, {{/}}, {{//}}, {{/.}}, {{1}}, {{2}}… with --colsep; write {{{{ and }}}} for literal braces)")]
    Unknown(String),
    #[error("unclosed `{{` in --key at byte {0} (write {{{{ for a literal brace)")]
    Unclosed(usize),
    #[error("lone `}}` in --key at byte {0} (write }}}} for a literal brace)")]
    LoneClose(usize),
    #[error("--key '{0}' has no placeholder: every job would have the same key (use {{}} for the whole line, {{1}} for its first column); for one job at a time, give -j 1")]
    Constant(String),
}

impl KeyTemplate {
    /// Parses `text`; `{{` and `}}` are literal braces. `colsep` splits records into the
    /// columns `{N}` names.
    ///
    /// # Errors
    /// An unknown placeholder, an unclosed `{`, a lone `}`, or no placeholder at all.
    pub(crate) fn parse(text: &str, colsep: Option<String>) -> Result<Self, KeyTemplateError> {
        let mut pieces = Vec::new();
        let mut literal = String::new();
        let mut rest = text.char_indices().peekable();
        while let Some((at, c)) = rest.next() {
            match c {
                '{' if rest.peek().map(|&(_, n)| n) == Some('{') => {
                    rest.next();
                    literal.push('{');
                }
                '}' if rest.peek().map(|&(_, n)| n) == Some('}') => {
                    rest.next();
                    literal.push('}');
                }
                '}' => return Err(KeyTemplateError::LoneClose(at)),
                '{' => {
                    let after = &text[at + 1..];
                    let close = after.find('}').ok_or(KeyTemplateError::Unclosed(at))?;
                    let name = &after[..close];
                    let placeholder = Placeholder::parse(name)
                        .ok_or_else(|| KeyTemplateError::Unknown(name.to_owned()))?;
                    for _ in 0..=name.chars().count() {
                        rest.next();
                    }
                    if !literal.is_empty() {
                        pieces.push(Piece::Text(std::mem::take(&mut literal)));
                    }
                    pieces.push(Piece::Arg(placeholder));
                }
                c => literal.push(c),
            }
        }
        if !literal.is_empty() {
            pieces.push(Piece::Text(literal));
        }
        if !pieces.iter().any(|piece| matches!(piece, Piece::Arg(_))) {
            return Err(KeyTemplateError::Constant(text.to_owned()));
        }
        Ok(KeyTemplate { pieces, colsep })
    }

    /// The largest column a placeholder names (`{2}`: 2); 0 when none names one.
    pub(crate) fn largest_column(&self) -> usize {
        crate::placeholder::largest_column(self.pieces.iter().filter_map(|piece| match piece {
            Piece::Arg(placeholder) => Some(placeholder),
            Piece::Text(_) => None,
        }))
    }

    /// The key of `record`; may be empty (the caller rejects the record then).
    pub(crate) fn render(&self, record: &str) -> String {
        let mut key = String::new();
        for piece in &self.pieces {
            match piece {
                Piece::Text(text) => key.push_str(text),
                Piece::Arg(placeholder) => {
                    key.push_str(&placeholder.apply(record, self.colsep.as_deref()));
                }
            }
        }
        key
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_from_paths_and_columns() {
        let dir = KeyTemplate::parse("{//}", None).unwrap();
        assert_eq!(dir.render("a/b/c.txt"), "a/b");
        assert_eq!(dir.render("c.txt"), ".");
        let column = KeyTemplate::parse("host-{2}{{x}}", Some(" ".into())).unwrap();
        assert_eq!(column.render("deploy web1 now"), "host-web1{x}");
        assert_eq!(column.render("deploy"), "host-{x}");
    }

    #[test]
    fn errors_name_the_problem() {
        assert_eq!(
            KeyTemplate::parse("{key}", None),
            Err(KeyTemplateError::Unknown("key".into()))
        );
        assert_eq!(
            KeyTemplate::parse("x{", None),
            Err(KeyTemplateError::Unclosed(1))
        );
        assert_eq!(
            KeyTemplate::parse("x}", None),
            Err(KeyTemplateError::LoneClose(1))
        );
        assert!(matches!(
            KeyTemplate::parse("all", None),
            Err(KeyTemplateError::Constant(_))
        ));
    }
}
