//! The one exit-status policy of `lanes` (SPEC §6). Every exit status the binary returns comes
//! from here.

/// Every job succeeded, or was superseded under `--coalesce`/`--cancel-in-progress`.
pub const SUCCESS: u8 = 0;
/// At least one job failed, was rejected, or was interrupted for any reason but `superseded`;
/// or the input could not be read to its end.
pub const JOBS_FAILED: u8 = 1;
/// Usage error, invalid manifest, or `--strict` input error: nothing ran. Also clap's own
/// status for a bad command line.
pub const USAGE: u8 = 2;

/// `lanes submit`: the job was admitted and waits (`queued`). `started` is [`SUCCESS`].
pub const QUEUED: u8 = 10;
/// `lanes submit`: the job was admitted in the place of a waiting one (`coalesced`).
pub const COALESCED: u8 = 11;
/// `lanes submit`: the job was not admitted (`rejected`, `queue_full`); it has its record.
pub const REJECTED: u8 = 12;
/// `lanes submit` (and the other client commands): the server admits nothing more (`closed`:
/// draining, closing or ending); nothing was recorded.
pub const CLOSED: u8 = 13;

/// `lanes` itself failed (a panic: a bug); its message on stderr says where. Rust's own status
/// for a panic in `main`.
pub const INTERNAL_ERROR: u8 = 101;

/// The status after `lanes` was stopped by signal number `signal`: 128 + N, the shell
/// convention (130 for SIGINT, 143 for SIGTERM, 129 for SIGHUP).
pub fn for_signal(signal: i32) -> u8 {
    u8::try_from(128 + signal.clamp(1, 127)).unwrap_or(u8::MAX)
}

/// The status of a run that started: the first stop signal wins, then any bad job outcome.
pub fn for_run(stop_signal: Option<i32>, any_bad: bool) -> u8 {
    match stop_signal {
        Some(signal) => for_signal(signal),
        None if any_bad => JOBS_FAILED,
        None => SUCCESS,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn signals_map_to_128_plus_n() {
        assert_eq!(for_signal(2), 130);
        assert_eq!(for_signal(15), 143);
        assert_eq!(for_signal(1), 129);
    }

    #[test]
    fn a_signal_wins_over_job_outcomes() {
        assert_eq!(for_run(Some(2), false), 130);
        assert_eq!(for_run(None, true), JOBS_FAILED);
        assert_eq!(for_run(None, false), SUCCESS);
    }
}
