//! Line framing of a job's output stream: whole lines, each with the job's prefix, never split
//! or mixed with another job's; over-long lines cut into prefixed pieces (SPEC §5.1).

/// The longest piece of a line written at once: longer lines are cut into pieces this size.
pub(crate) const MAX_PIECE: usize = 64 * 1024;

/// Turns a byte stream into prefixed whole lines. Bytes are passed through unchanged, valid
/// UTF-8 or not; only a missing final newline is added.
#[derive(Debug)]
pub(crate) struct LineFramer {
    prefix: Vec<u8>,
    partial: Vec<u8>,
}

impl LineFramer {
    /// A framer that puts `prefix` before each line.
    pub(crate) fn new(prefix: Vec<u8>) -> Self {
        LineFramer {
            prefix,
            partial: Vec::new(),
        }
    }

    /// The prefix's length in bytes.
    pub(crate) fn prefix_len(&self) -> usize {
        self.prefix.len()
    }

    /// Appends to `out` every line completed by `chunk`, prefixed; keeps the unfinished rest.
    pub(crate) fn push(&mut self, mut chunk: &[u8], out: &mut Vec<u8>) {
        while let Some(newline) = memchr::memchr(b'\n', chunk) {
            let (line, rest) = chunk.split_at(newline + 1);
            if self.partial.is_empty() {
                self.emit(line, out);
            } else {
                let mut whole = std::mem::take(&mut self.partial);
                whole.extend_from_slice(line);
                self.emit(&whole, out);
                whole.clear();
                self.partial = whole;
            }
            chunk = rest;
        }
        self.partial.extend_from_slice(chunk);
        // A piece goes only once more than a piece is held: a line of exactly a piece (or of
        // a multiple) waits for its newline, which ends it, not an empty piece after it.
        while self.partial.len() > MAX_PIECE {
            let rest = self.partial.split_off(MAX_PIECE);
            let piece = std::mem::replace(&mut self.partial, rest);
            self.emit_piece(&piece, out);
        }
    }

    /// Appends the unfinished last line, if any, with a newline added.
    pub(crate) fn finish(&mut self, out: &mut Vec<u8>) {
        if !self.partial.is_empty() {
            let piece = std::mem::take(&mut self.partial);
            self.emit_piece(&piece, out);
        }
    }

    /// `line` ends with `\n`; cut into pieces when longer than [`MAX_PIECE`].
    fn emit(&self, line: &[u8], out: &mut Vec<u8>) {
        let body = &line[..line.len() - 1];
        if body.len() <= MAX_PIECE {
            out.extend_from_slice(&self.prefix);
            out.extend_from_slice(line);
        } else {
            for piece in body.chunks(MAX_PIECE) {
                self.emit_piece(piece, out);
            }
        }
    }

    fn emit_piece(&self, piece: &[u8], out: &mut Vec<u8>) {
        out.extend_from_slice(&self.prefix);
        out.extend_from_slice(piece);
        out.push(b'\n');
    }
}

/// The colours key prefixes cycle through (the key's hash picks one), as ANSI escapes.
const PALETTE: [anstyle::AnsiColor; 6] = [
    anstyle::AnsiColor::Cyan,
    anstyle::AnsiColor::Magenta,
    anstyle::AnsiColor::Yellow,
    anstyle::AnsiColor::Green,
    anstyle::AnsiColor::Blue,
    anstyle::AnsiColor::BrightCyan,
];

/// The prefix shown before each output line of the job with `key`: `[key] `, with control
/// characters escaped so that a key can never break a line or move the cursor; in the key's
/// colour when `color`.
pub(crate) fn prefix_for(key: &str, color: bool) -> Vec<u8> {
    let plain = plain_prefix(key);
    if !color {
        return plain.into_bytes();
    }
    // A stable colour per key across runs.
    let hash = stable_hash(key);
    let index = usize::try_from(hash % PALETTE.len() as u64).unwrap_or(0);
    let style = anstyle::Style::new().fg_color(Some(PALETTE[index].into()));
    let body = plain.trim_end();
    format!("{}{body}{} ", style.render(), style.render_reset()).into_bytes()
}

/// A hash of `key` that is the same in every run and on every machine (64-bit FNV-1a, see
/// <http://www.isthe.com/chongo/tech/comp/fnv/>), for per-key colours and Slurm job names.
pub(crate) fn stable_hash(key: &str) -> u64 {
    key.bytes().fold(0xcbf2_9ce4_8422_2325_u64, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    })
}

fn plain_prefix(key: &str) -> String {
    format!("[{}] ", escape_controls(key))
}

/// Whether `c` is shown as `\u{..}` rather than as itself: C0 and C1 controls, the bidi
/// embeddings, overrides and isolates (U+202A–U+202E, U+2066–U+2069) and marks (U+200E,
/// U+200F, U+061C), the line and paragraph separators U+2028 and U+2029, and the characters
/// that show as nothing (Unicode's default-ignorable code points that no script shapes with:
/// U+200B zero width space, U+2060–U+2064 word joiner and invisible operators, U+206A–U+206F,
/// U+FEFF byte order mark, U+00AD soft hyphen, U+034F, the Hangul fillers U+115F, U+1160,
/// U+3164 and U+FFA0, U+17B4, U+17B5, U+180E, U+FFF9–U+FFFB, the shorthand and musical format
/// controls, and the tags U+E0000–U+E007F); so that a key or a command shown can neither hide,
/// reorder nor break what follows it, two keys that differ only by an invisible character look
/// different, and no character a terminal draws wider than its width counts goes out (the
/// bidi controls are the ones of the "Trojan Source" attack, CVE-2021-42574). The joiners
/// U+200C and U+200D and the variation selectors are left: scripts and emoji sequences need
/// them.
pub(crate) fn is_hidden(c: char) -> bool {
    c.is_control()
        || matches!(
            c,
            '\u{202a}'..='\u{202e}'
                | '\u{2066}'..='\u{2069}'
                | '\u{200e}'
                | '\u{200f}'
                | '\u{061c}'
                | '\u{2028}'
                | '\u{2029}'
                | '\u{200b}'
                | '\u{2060}'..='\u{2064}'
                | '\u{206a}'..='\u{206f}'
                | '\u{feff}'
                | '\u{00ad}'
                | '\u{034f}'
                | '\u{115f}'
                | '\u{1160}'
                | '\u{17b4}'
                | '\u{17b5}'
                | '\u{180e}'
                | '\u{3164}'
                | '\u{ffa0}'
                | '\u{fff9}'..='\u{fffb}'
                | '\u{1bca0}'..='\u{1bca3}'
                | '\u{1d173}'..='\u{1d17a}'
                | '\u{e0000}'..='\u{e007f}'
        )
}

/// The most characters of a key (escaped) a line for people shows (a run's summary, a
/// client's answers); the report and `--json` have it whole.
pub(crate) const KEY_SHOWN: usize = 80;

/// `text` cut after [`KEY_SHOWN`] characters, `…` added, when longer: a key shown to people
/// stays one line to read.
pub(crate) fn cut_key(text: String) -> String {
    match text.char_indices().nth(KEY_SHOWN) {
        Some((cut, _)) => format!("{}…", &text[..cut]),
        None => text,
    }
}

/// `key` as shown to people: control characters escaped (`\n`, `\u{1}`), and the other
/// characters of [`is_hidden`] (`\u{202e}`), so a key can never break a line, move the cursor
/// or reorder what follows it; everything else, Unicode included, as it is.
pub(crate) fn escape_controls(key: &str) -> String {
    let mut shown = String::with_capacity(key.len());
    for c in key.chars() {
        if is_hidden(c) {
            shown.extend(c.escape_default());
        } else {
            shown.push(c);
        }
    }
    shown
}

/// [`escape_controls`] of each line of `text`, its line breaks kept: a message of several
/// lines, whatever it quotes.
pub(crate) fn escape_controls_by_line(text: &str) -> String {
    text.split('\n')
        .map(escape_controls)
        .collect::<Vec<_>>()
        .join("\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn characters_that_show_as_nothing_are_escaped_and_the_joiners_are_not() {
        assert_eq!(
            escape_controls("a\u{2062}b\u{ad}c\u{3164}d\u{e0067}e\u{34f}f"),
            "a\\u{2062}b\\u{ad}c\\u{3164}d\\u{e0067}e\\u{34f}f"
        );
        // Persian's ZWNJ, an emoji family's ZWJ and an emoji's presentation selector stay.
        for kept in ["می\u{200c}خواهم", "👨\u{200d}👩\u{200d}👧", "❤\u{fe0f}"] {
            assert_eq!(escape_controls(kept), kept);
        }
    }

    fn frame(chunks: &[&[u8]]) -> Vec<u8> {
        let mut framer = LineFramer::new(b"[k] ".to_vec());
        let mut out = Vec::new();
        for chunk in chunks {
            framer.push(chunk, &mut out);
        }
        framer.finish(&mut out);
        out
    }

    #[test]
    fn whole_lines_across_chunks() {
        assert_eq!(
            frame(&[b"a\nb", b"c\n", b"\xf0\x9f", b"\x9a\x80 r\n"]),
            b"[k] a\n[k] bc\n[k] \xf0\x9f\x9a\x80 r\n"
        );
    }

    #[test]
    fn unterminated_last_line_gets_a_newline() {
        assert_eq!(frame(&[b"x\ntail"]), b"[k] x\n[k] tail\n");
        assert_eq!(frame(&[b""]), b"");
    }

    #[test]
    fn long_lines_come_in_prefixed_pieces() {
        let line = vec![b'x'; MAX_PIECE * 2 + 10];
        let mut input = line.clone();
        input.push(b'\n');
        let out = frame(&[&input[..1000], &input[1000..]]);
        let pieces: Vec<&[u8]> = out
            .split(|&b| b == b'\n')
            .filter(|p| !p.is_empty())
            .collect();
        assert_eq!(pieces.len(), 3);
        assert!(pieces.iter().all(|p| p.starts_with(b"[k] ")));
        let total: usize = pieces.iter().map(|p| p.len() - 4).sum();
        assert_eq!(total, line.len());
    }

    #[test]
    fn a_line_of_exactly_one_or_two_pieces_is_followed_by_no_empty_line() {
        for pieces in [1, 2] {
            let mut input = vec![b'x'; MAX_PIECE * pieces];
            input.extend_from_slice(b"\nnext\n");
            // The newline in a chunk of its own, and with the line.
            for cut in [MAX_PIECE * pieces, 1000] {
                let out = frame(&[&input[..cut], &input[cut..]]);
                let lines: Vec<usize> = out.split(|&b| b == b'\n').map(<[u8]>::len).collect();
                let mut want = vec![4 + MAX_PIECE; pieces];
                want.extend([4 + 4, 0]);
                assert_eq!(lines, want, "{pieces} pieces, cut at {cut}");
            }
        }
    }

    #[test]
    fn prefixes_escape_bidi_controls_and_keep_other_unicode() {
        assert_eq!(
            prefix_for("bidi\u{202e}evil", false),
            b"[bidi\\u{202e}evil] "
        );
        assert_eq!(
            escape_controls("a\u{2066}b\u{200f}c\u{2028}"),
            "a\\u{2066}b\\u{200f}c\\u{2028}"
        );
        assert_eq!(escape_controls("zé🙂"), "zé🙂");
        // Invisible ones: a key with a byte order mark inside looks unlike the key without.
        assert_eq!(
            escape_controls("\u{feff}db\u{200b}x\u{2060}"),
            "\\u{feff}db\\u{200b}x\\u{2060}"
        );
        // The joiners stay: an emoji sequence and a Persian word need them.
        assert_eq!(
            escape_controls("👨\u{200d}👩 می\u{200c}خواهم"),
            "👨\u{200d}👩 می\u{200c}خواهم"
        );
    }

    #[test]
    fn prefixes_escape_control_characters() {
        assert_eq!(prefix_for("a\nb\u{1}", false), b"[a\\nb\\u{1}] ".to_vec());
        assert_eq!(prefix_for("ünï/x", false), "[ünï/x] ".as_bytes().to_vec());
    }

    #[test]
    fn coloured_prefixes_wrap_the_plain_one() {
        let coloured = String::from_utf8(prefix_for("web", true)).unwrap();
        assert!(coloured.starts_with("\x1b["), "{coloured:?}");
        assert!(coloured.contains("[web]"));
        assert!(coloured.ends_with("\x1b[0m "), "{coloured:?}");
        assert_eq!(prefix_for("web", true), prefix_for("web", true));
    }
}
