//! This process's open file descriptors against its limit (`RLIMIT_NOFILE`): how many more
//! it may open, and making sure of a few before code that cannot report running out.

/// How many more descriptors `lanes` may open now: its soft limit less those open (listed in
/// `/proc/self/fd`). `None` when either cannot be read.
pub(crate) fn free() -> Option<usize> {
    let (soft, _) =
        nix::sys::resource::getrlimit(nix::sys::resource::Resource::RLIMIT_NOFILE).ok()?;
    let open = std::fs::read_dir("/proc/self/fd").ok()?.count();
    Some(
        usize::try_from(soft)
            .unwrap_or(usize::MAX)
            .saturating_sub(open),
    )
}

/// Whether `err` is this process's (EMFILE) or the system's (ENFILE) shortage of descriptors,
/// itself or as the cause of another error (one naming the path it was met at, an error of
/// the run's made from it). An error that kept the OS error only in its text counts too: std
/// writes one as `… (os error N)`, and the temporary-file crate's error naming a path keeps it
/// only there (its `source` skips it), as does an error made into text.
pub(crate) fn ran_out(err: &(dyn std::error::Error + 'static)) -> bool {
    const CODES: [i32; 2] = [nix::libc::EMFILE, nix::libc::ENFILE];
    let mut cause = Some(err);
    while let Some(error) = cause {
        let text = error.to_string();
        if CODES
            .iter()
            .any(|code| text.contains(&format!("(os error {code})")))
        {
            return true;
        }
        if let Some(io) = error.downcast_ref::<std::io::Error>() {
            if io.raw_os_error().is_some_and(|code| CODES.contains(&code)) {
                return true;
            }
            if let Some(inner) = io.get_ref() {
                cause = Some(inner);
                continue;
            }
        }
        cause = error.source();
    }
    false
}

/// Makes sure `count` more descriptors can be opened now: opens that many duplicates of
/// /dev/null's, then closes them. For code that cannot report running out (tokio's event loop
/// panics when it cannot make its signal pipe).
///
/// # Errors
/// EMFILE (or ENFILE) when fewer are free: `ulimit -n` is too low.
pub(crate) fn ensure_free(count: usize) -> std::io::Result<()> {
    let null = std::fs::File::open("/dev/null")?;
    let mut held = Vec::with_capacity(count);
    for _ in 1..count {
        held.push(null.try_clone()?);
    }
    Ok(())
}

/// Whether `err` is a passing shortage of processes or descriptors (EAGAIN, EMFILE, ENFILE):
/// what met it (a spawn, a job's `--results` files) is tried again once a running job has
/// freed some.
pub(crate) fn is_passing_shortage(err: &std::io::Error) -> bool {
    matches!(
        err.raw_os_error(),
        Some(nix::libc::EAGAIN | nix::libc::EMFILE | nix::libc::ENFILE)
    )
}
