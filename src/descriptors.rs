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
