//! The effectful side: the tokio event loop, processes, pipes, signals and reaping. It applies
//! the pure core's decisions and never makes scheduling decisions of its own.

pub(crate) mod backend;
pub(crate) mod cgroup;
pub(crate) mod coordinate;
pub(crate) mod driver;
pub(crate) mod input;
pub(crate) mod key_locks;
pub(crate) mod launch;
pub(crate) mod lineage;
pub(crate) mod lock_dir;
pub(crate) mod reap;
pub(crate) mod signal;
pub(crate) mod spawn;
pub(crate) mod spawner;
pub(crate) mod stopped;
pub(crate) mod strict;
pub(crate) mod supervise;
pub(crate) mod unix;

/// Sleeps until `at`, or forever when there is no deadline (a `select!` branch that never
/// fires).
pub(crate) async fn sleep_until_opt(at: Option<tokio::time::Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}
