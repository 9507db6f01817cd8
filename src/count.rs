//! Counts given on the command line (`-j`, `--max-queued`, `--batch-size`, weights): whole
//! numbers from 1, bounded as a manifest's setting of the same name is, with the same words.

/// The largest count a manifest can hold: TOML's integers are signed 64-bit (TOML 1.0,
/// "Integer"). Flags whose manifest setting is a 64-bit count stop there too, so that the
/// two ways of giving one setting accept the same numbers.
const LARGEST_TOML_INTEGER: u64 = i64::MAX as u64;

/// A whole number from 1 to `max`, or a message naming the range as a manifest's does.
fn count(text: &str, max: u64) -> Result<u64, String> {
    within(text, 1, max)
}

/// A whole number from `min` to `max`, or a message naming the range.
fn within(text: &str, min: u64, max: u64) -> Result<u64, String> {
    text.trim()
        .parse::<u64>()
        .ok()
        .filter(|n| (min..=max).contains(n))
        .ok_or_else(|| format!("must be a whole number between {min} and {max}"))
}

/// A 32-bit number of times that may be none (`--retries`): a whole number from 0 to
/// 4294967295.
///
/// # Errors
/// Anything else, with the range.
pub(crate) fn times_u32(text: &str) -> Result<u32, String> {
    within(text, 0, u64::from(u32::MAX)).map(|n| u32::try_from(n).unwrap_or(u32::MAX))
}

/// A 64-bit count: a whole number from 1 to 9223372036854775807 (see
/// [`LARGEST_TOML_INTEGER`]).
///
/// # Errors
/// Anything else, with the range.
pub(crate) fn count_u64(text: &str) -> Result<u64, String> {
    count(text, LARGEST_TOML_INTEGER)
}

/// A number of bytes in one argument (`--batch-bytes`): a whole number from 1. Its real bound
/// is what one argument can hold ([`crate::arg_limit::max_argument_bytes`]) less the
/// template's own text, checked where the template is known (with the most it may be); the
/// message says so rather than name the 64-bit bound, which no value near it passes.
///
/// # Errors
/// Anything else, with the range.
pub(crate) fn argument_bytes(text: &str) -> Result<u64, String> {
    let most = crate::arg_limit::max_argument_bytes();
    within(text, 1, LARGEST_TOML_INTEGER).map_err(|_| {
        format!(
            "must be a whole number of bytes from 1 to what one argument can hold ({most} here), \
             less the template's own text"
        )
    })
}

/// A 32-bit count: a whole number from 1 to 4294967295.
///
/// # Errors
/// Anything else, with the range.
pub(crate) fn count_u32(text: &str) -> Result<u32, String> {
    count(text, u64::from(u32::MAX)).map(|n| u32::try_from(n).unwrap_or(u32::MAX))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_count_is_a_whole_number_from_1_to_the_manifest_s_largest() {
        assert_eq!(count_u64("1"), Ok(1));
        assert_eq!(
            count_u64("9223372036854775807"),
            Ok(9_223_372_036_854_775_807)
        );
        assert_eq!(count_u32("4294967295"), Ok(u32::MAX));
        assert_eq!(times_u32("0"), Ok(0));
        for bad in ["-1", "4294967296", "18446744073709551616"] {
            assert_eq!(
                times_u32(bad),
                Err("must be a whole number between 0 and 4294967295".to_owned())
            );
        }
        for bad in ["0", "-2", "9223372036854775808", "1.5", "", "ten"] {
            assert_eq!(
                count_u64(bad),
                Err("must be a whole number between 1 and 9223372036854775807".to_owned()),
                "{bad:?}"
            );
        }
        assert_eq!(
            count_u32("4294967296"),
            Err("must be a whole number between 1 and 4294967295".to_owned())
        );
        let most = crate::arg_limit::max_argument_bytes();
        assert_eq!(argument_bytes("1"), Ok(1));
        for bad in ["0", "-1", "9223372036854775808", "1k"] {
            assert_eq!(
                argument_bytes(bad),
                Err(format!(
                    "must be a whole number of bytes from 1 to what one argument can hold \
                     ({most} here), less the template's own text"
                )),
                "{bad:?}"
            );
        }
    }
}
