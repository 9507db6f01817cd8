//! GNU parallel's replacement strings for one argument, shared by `--command` templates and
//! `--key` templates: `{}` the whole argument, `{.}` without its extension, `{/}` its
//! basename, `{//}` its directory, `{/.}` its basename without extension, and `{N}` (with
//! the same suffixes: `{N.}`, `{N/}`, `{N//}`, `{N/.}`) its N-th column, split at `--colsep`
//! (GNU parallel manual, "Replacement strings").

use std::borrow::Cow;

/// What a placeholder takes from the argument, before any path operation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Source {
    /// The whole argument.
    Whole,
    /// Column N (1-based) of the argument split at `--colsep`; without `--colsep` column 1 is
    /// the whole argument and later columns are empty.
    Column(usize),
}

/// The path operation applied to what the placeholder takes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum PathPart {
    /// As it is.
    All,
    /// `.`: without the extension of its last component (`a/b.tar.gz` → `a/b.tar`).
    NoExtension,
    /// `/`: the last component (`a/b.txt` → `b.txt`).
    Basename,
    /// `//`: everything before the last `/` (`a/b.txt` → `a`), `.` when there is none, as
    /// dirname(1).
    Dirname,
    /// `/.`: the last component without its extension (`a/b.txt` → `b`).
    BasenameNoExtension,
}

/// One argument placeholder: `{}`, `{.}`, `{/}`, `{//}`, `{/.}`, `{N}`, `{N.}`, ….
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Placeholder {
    pub source: Source,
    pub part: PathPart,
}

impl Placeholder {
    /// `{}`.
    pub(crate) const WHOLE: Placeholder = Placeholder {
        source: Source::Whole,
        part: PathPart::All,
    };

    /// The placeholder named `name` (the text between the braces), if `name` is one.
    pub(crate) fn parse(name: &str) -> Option<Placeholder> {
        let digits = name.bytes().take_while(u8::is_ascii_digit).count();
        let (number, suffix) = name.split_at(digits);
        let source = if number.is_empty() {
            Source::Whole
        } else {
            match number.parse::<usize>() {
                Ok(n) if n >= 1 => Source::Column(n),
                _ => return None,
            }
        };
        let part = match suffix {
            "" => PathPart::All,
            "." => PathPart::NoExtension,
            "/" => PathPart::Basename,
            "//" => PathPart::Dirname,
            "/." => PathPart::BasenameNoExtension,
            _ => return None,
        };
        Some(Placeholder { source, part })
    }

    /// What the placeholder stands for in `argument`, columns split at `colsep`.
    pub(crate) fn apply<'a>(&self, argument: &'a str, colsep: Option<&str>) -> Cow<'a, str> {
        let taken: &'a str = match self.source {
            Source::Whole => argument,
            Source::Column(n) => match colsep {
                Some(sep) if !sep.is_empty() => argument.split(sep).nth(n - 1).unwrap_or(""),
                _ if n == 1 => argument,
                _ => "",
            },
        };
        match self.part {
            PathPart::All => Cow::Borrowed(taken),
            PathPart::NoExtension => Cow::Borrowed(without_extension(taken)),
            PathPart::Basename => Cow::Borrowed(basename(taken)),
            PathPart::Dirname => Cow::Borrowed(dirname(taken)),
            PathPart::BasenameNoExtension => Cow::Borrowed(without_extension(basename(taken))),
        }
    }
}

fn basename(path: &str) -> &str {
    match path.rfind('/') {
        Some(slash) => &path[slash + 1..],
        None => path,
    }
}

/// The directory of `path` as POSIX dirname(1) gives it: trailing slashes are no component
/// (`a/b/` → `a`), and the slashes between the directory and the last component go with it
/// (`d//a.log` → `d`), so that every spelling of a directory is one key.
fn dirname(path: &str) -> &str {
    let trimmed = path.trim_end_matches('/');
    if trimmed.is_empty() {
        return if path.is_empty() { "." } else { "/" };
    }
    match trimmed.rfind('/') {
        None => ".",
        Some(slash) => match trimmed[..slash].trim_end_matches('/') {
            "" => "/",
            directory => directory,
        },
    }
}

fn without_extension(path: &str) -> &str {
    let name_start = path.rfind('/').map_or(0, |slash| slash + 1);
    match path[name_start..].rfind('.') {
        // A leading dot (`.bashrc`) is not an extension.
        Some(dot) if dot > 0 => &path[..name_start + dot],
        _ => path,
    }
}

/// The largest column any of `placeholders` names (`{2}`: 2); 0 when none names one.
pub(crate) fn largest_column<'a>(placeholders: impl Iterator<Item = &'a Placeholder>) -> usize {
    placeholders
        .filter_map(|placeholder| match placeholder.source {
            Source::Column(n) => Some(n),
            _ => None,
        })
        .max()
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn apply(name: &str, argument: &str, colsep: Option<&str>) -> String {
        Placeholder::parse(name)
            .unwrap_or_else(|| panic!("{name} is a placeholder"))
            .apply(argument, colsep)
            .into_owned()
    }

    #[test]
    fn path_parts_as_gnu_parallel_computes_them() {
        let path = "dir.d/sub/file.tar.gz";
        assert_eq!(apply("", path, None), path);
        assert_eq!(apply(".", path, None), "dir.d/sub/file.tar");
        assert_eq!(apply("/", path, None), "file.tar.gz");
        assert_eq!(apply("//", path, None), "dir.d/sub");
        assert_eq!(apply("/.", path, None), "file.tar");
        assert_eq!(apply("//", "file", None), ".");
        assert_eq!(apply("//", "/file", None), "/");
        // As dirname(1): doubled and trailing slashes.
        assert_eq!(apply("//", "d//a.log", None), "d");
        assert_eq!(apply("//", "d/a.log", None), "d");
        assert_eq!(apply("//", "a/b/", None), "a");
        assert_eq!(apply("//", "//x", None), "/");
        assert_eq!(apply("//", "///", None), "/");
        assert_eq!(apply("//", "", None), ".");
        assert_eq!(apply(".", "dir.d/.bashrc", None), "dir.d/.bashrc");
    }

    #[test]
    fn columns_split_at_the_separator() {
        assert_eq!(apply("1", "a,b/c.txt,d", Some(",")), "a");
        assert_eq!(apply("2/", "a,b/c.txt,d", Some(",")), "c.txt");
        assert_eq!(apply("4", "a,b,d", Some(",")), "");
        assert_eq!(apply("1", "a,b", None), "a,b");
        assert_eq!(apply("2", "a,b", None), "");
    }

    #[test]
    fn other_names_are_not_placeholders() {
        for name in ["key", "0", "1x", "...", "print $1", " "] {
            assert_eq!(Placeholder::parse(name), None, "{name}");
        }
    }
}
