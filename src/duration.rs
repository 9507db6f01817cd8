//! Parsing of durations as users type them: a number of seconds or a humantime string.

use std::time::Duration;

/// Parses a duration given as a non-negative number of seconds (`20`, `0.5`) or as a
/// humantime string (`250ms`, `1m30s`, `2h`; see the `humantime` crate for the units).
///
/// # Errors
/// A message fit to follow "invalid duration": names the text and the accepted forms.
pub(crate) fn parse_duration(text: &str) -> Result<Duration, String> {
    let trimmed = text.trim();
    if let Ok(seconds) = trimmed.parse::<f64>() {
        return seconds_to_duration(seconds).ok_or_else(|| {
            format!("`{text}` is not a non-negative, finite number of seconds up to {MAX_SECONDS}")
        });
    }
    let duration = humantime::parse_duration(trimmed).map_err(|err| {
        format!("`{text}` is not a duration ({err}); use seconds (`20`, `0.5`) or units (`250ms`, `1m30s`)")
    })?;
    if duration > MAX {
        return Err(format!(
            "`{text}` is longer than {MAX_SECONDS} seconds (about 31 years)"
        ));
    }
    Ok(duration)
}

/// The longest duration accepted, in seconds: about 31 years. Any longer one could not be
/// added to a point in time without overflow, and means "never" in practice: for no timeout,
/// say 0.
pub(crate) const MAX_SECONDS: u64 = 1_000_000_000;

const MAX: Duration = Duration::from_secs(MAX_SECONDS);

/// Converts a number of seconds to a [`Duration`]; `None` when negative, NaN, infinite or
/// longer than [`MAX_SECONDS`]. A positive number below a nanosecond is one nanosecond, not
/// zero: zero means "none" where a duration is a timeout.
pub(crate) fn seconds_to_duration(seconds: f64) -> Option<Duration> {
    if seconds.is_finite() && seconds >= 0.0 {
        Duration::try_from_secs_f64(seconds)
            .ok()
            .filter(|d| *d <= MAX)
            .map(|d| {
                if d.is_zero() && seconds > 0.0 {
                    Duration::from_nanos(1)
                } else {
                    d
                }
            })
    } else {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_are_seconds() {
        assert_eq!(parse_duration("20"), Ok(Duration::from_secs(20)));
        assert_eq!(parse_duration("0.5"), Ok(Duration::from_millis(500)));
    }

    #[test]
    fn humantime_units() {
        assert_eq!(parse_duration("250ms"), Ok(Duration::from_millis(250)));
        assert_eq!(parse_duration("1m30s"), Ok(Duration::from_secs(90)));
    }

    #[test]
    fn durations_too_long_to_add_to_a_point_in_time_are_refused() {
        assert_eq!(parse_duration("1e9"), Ok(Duration::from_secs(MAX_SECONDS)));
        assert!(parse_duration("1e19").unwrap_err().contains("up to"));
        assert!(parse_duration("10000000000000000000").is_err());
        assert!(parse_duration("40years")
            .unwrap_err()
            .contains("longer than"));
    }

    #[test]
    fn a_positive_number_below_a_nanosecond_is_no_zero() {
        assert_eq!(parse_duration("1e-12"), Ok(Duration::from_nanos(1)));
        assert_eq!(parse_duration("0.0000000001"), Ok(Duration::from_nanos(1)));
        assert_eq!(seconds_to_duration(5e-324), Some(Duration::from_nanos(1)));
        assert_eq!(parse_duration("0"), Ok(Duration::ZERO));
        assert_eq!(parse_duration("0.0"), Ok(Duration::ZERO));
    }

    #[test]
    fn rejects_negative_and_garbage() {
        assert!(parse_duration("-1").is_err());
        assert!(parse_duration("NaN").is_err());
        assert!(parse_duration("soon").unwrap_err().contains("soon"));
    }
}
