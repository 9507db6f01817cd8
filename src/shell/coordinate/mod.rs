//! `--coordinate postgres://…`: key lanes (and nothing else yet) shared by every lanes process
//! on every host that names the same database and `--namespace`, through PostgreSQL's own
//! primitives. The core's decisions are those of `--lock-dir` (`core::hostwide`); this is the
//! second backend that carries them out.
//!
//! - A key is a session-level advisory lock, `pg_advisory_lock(id)`, `id` the first eight bytes
//!   of SHA-256("lanes", namespace, key) ([`lock_id`]). A waiter blocks in the server, whose
//!   lock queue grants a lock to its waiters in the order they asked: first come, first served
//!   across hosts, and no polling. Each key waited for or held has a session of its own (a
//!   blocked session can do nothing else); sessions are reused.
//! - lanes opens each session's socket itself and hands a duplicate to the job as descriptor 3:
//!   the session (and the key) lives for as long as the job's processes hold it, even when
//!   lanes is killed with SIGKILL.
//! - A session lost while it holds a key (its connection ended, or no answer to a heartbeat
//!   within [`HEARTBEAT_TIMEOUT`]) is reported as [`Acquired::Lost`]; the key's job is stopped
//!   with reason `lock_lost`. The holder's row in `lanes_holds` stays, with its last sign of
//!   life (`seen_at`, written by each heartbeat); the next holder of the key finds it and waits
//!   until that time plus the lost holder's `--grace` plus [`NOTICE_BOUND`] before its job may
//!   start, so that the lost holder's job is gone first; an older row makes no one wait.
//! - `lanes_sessions` says which key each session asks for; `lanes_holds` who holds which key
//!   (`lanes locks --coordinate`).

mod params;
mod records;
mod schema;
mod session;
mod statements;

use std::fmt::Write as _;
use std::os::fd::OwnedFd;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use sha2::{Digest, Sha256};
use tokio::sync::mpsc;
use tokio_postgres::types::ToSql;
use tokio_postgres::Client;

use self::params::Params;
use self::session::{error_text, Session};
use crate::report::entry::HostWait;
use crate::report::json::LockHolder;
use crate::shell::lock_dir::{Acquired, Grant};

/// How often the errors of a key's lock, tried again and again (the database down, say), are
/// said on stderr.
const NOTICE_REPEAT: Duration = Duration::from_secs(30);

/// How often a session that holds a key is asked whether it is alive.
pub(crate) const HEARTBEAT: Duration = Duration::from_secs(2);

/// How long a heartbeat may go unanswered before the key counts as lost.
pub(crate) const HEARTBEAT_TIMEOUT: Duration = Duration::from_secs(3);

/// The longest a lanes process that is alive takes to notice that it lost a key: a heartbeat's
/// period and timeout, and a second for the stop to be sent. The next holder of a key whose
/// holder was lost waits this plus the lost holder's `--grace`.
pub(crate) const NOTICE_BOUND: Duration = Duration::from_secs(6);

/// What `--coordinate` needs to know besides the URL.
#[derive(Debug, Clone)]
pub(crate) struct FleetSettings {
    /// `--namespace`: fleets sharing one database stay apart.
    pub(crate) namespace: String,
    /// `--host-id`: how this host is named to others (default: the host name).
    pub(crate) host_id: String,
    /// `--grace`: told to the next holder of a key this process loses.
    pub(crate) grace: Duration,
    /// `--shared-max-concurrent`: the fleet's shared slots.
    pub(crate) shared_slots: Option<usize>,
    /// `--coordinate-records`: the records' session is opened with the check, before any key's.
    pub(crate) records: bool,
}

/// Why the database cannot be used; never carries a password.
#[derive(Debug, thiserror::Error)]
pub(crate) enum CoordinateError {
    /// The URL is not valid.
    #[error(transparent)]
    Params(#[from] params::ParamsError),
    /// Connecting, logging in or the migration failed.
    #[error("--coordinate: {0}")]
    Unusable(String),
}

/// Resolves `url` with this process's environment and user.
fn resolve(url: &str) -> Result<Params, CoordinateError> {
    let os_user = nix::unistd::User::from_uid(nix::unistd::geteuid())
        .ok()
        .flatten()
        .map_or_else(|| "postgres".to_owned(), |user| user.name);
    let home = std::env::var_os("HOME").map(std::path::PathBuf::from);
    Ok(params::resolve(
        url,
        &|name| std::env::var(name).ok(),
        &os_user,
        home.as_deref(),
    )?)
}

/// The host's name, for `--host-id`'s default.
pub(crate) fn host_name() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|name| name.trim().to_owned())
        .ok()
        .filter(|name| !name.is_empty())
        .unwrap_or_else(|| "localhost".to_owned())
}

/// The advisory lock of `key` in `namespace`: the first eight bytes of
/// SHA-256("lanes\0" namespace "\0" key), big-endian. Two distinct keys share a lock with a
/// probability of 2⁻⁶⁴; they would then only wait for each other.
pub(crate) fn lock_id(namespace: &str, key: &str) -> i64 {
    let mut hash = Sha256::new();
    hash.update(b"lanes\0");
    hash.update(namespace.as_bytes());
    hash.update(b"\0");
    hash.update(key.as_bytes());
    let digest = hash.finalize();
    i64::from_be_bytes(digest[..8].try_into().expect("eight bytes"))
}

/// How often a process waiting for a shared slot looks again without being told that one was
/// let go: a slot whose session ended without letting it go (its lanes and job gone) sends no
/// notification.
pub(crate) const SLOT_RECHECK: Duration = Duration::from_secs(1);

/// The advisory lock of shared slot `slot` in `namespace`, as [`lock_id`] is a key's.
pub(crate) fn slot_id(namespace: &str, slot: usize) -> i64 {
    let mut hash = Sha256::new();
    hash.update(b"lanes-slot\0");
    hash.update(namespace.as_bytes());
    hash.update(b"\0");
    hash.update(slot.to_string().as_bytes());
    let digest = hash.finalize();
    i64::from_be_bytes(digest[..8].try_into().expect("eight bytes"))
}

/// Takes one of the shared slots `slots` on `session` (which holds its key already): the
/// first free one, else waits until one is let go (a notification on `lanes_slots`, or
/// [`SLOT_RECHECK`]).
async fn take_slot(
    session: &mut Session,
    slots: &[i64],
    grace: Duration,
    last_sign: &mut Instant,
) -> Result<i64, String> {
    if !session.listening {
        session
            .client
            .batch_execute("LISTEN lanes_slots")
            .await
            .map_err(|err| error_text(&err))?;
        session.listening = true;
    }
    loop {
        while session.notified.try_recv().is_ok() {}
        let free = session
            .client
            .query_opt(
                "SELECT id FROM unnest($1::bigint[]) AS t(id) \
                 WHERE pg_try_advisory_lock(id) LIMIT 1",
                &[&slots],
            )
            .await
            .map_err(|err| error_text(&err))?;
        if let Some(row) = free {
            let slot: i64 = row.get(0);
            // A row of another session says that the slot's last holder lost it: its job may
            // still be stopping, and counts against the cap until it must be gone.
            let grace_ms = sql_ms(grace);
            let notice_ms = sql_ms(NOTICE_BOUND);
            let lost: Option<i64> = session
                .client
                .query_one(statements::CLAIM_SLOT, &[&slot, &grace_ms, &notice_ms])
                .await
                .map_err(|err| error_text(&err))?
                .get(0);
            if let Some(wait_ms) = lost.filter(|&ms| ms > 0) {
                let wait = Duration::from_millis(u64::try_from(wait_ms).unwrap_or(0));
                wait_held(&session.client, wait, last_sign).await?;
            }
            return Ok(slot);
        }
        let _ = tokio::time::timeout(SLOT_RECHECK, session.notified.recv()).await;
    }
}

/// The database checked (reachable, tables current) before the run starts.
pub(crate) struct CheckedCoordinator {
    params: Params,
    settings: FleetSettings,
    /// `--coordinate-records`: the records' session, opened before the run asks for any key,
    /// so that keys waited for on a server short of connections cannot take its place.
    records: Option<Session>,
}

impl CheckedCoordinator {
    /// Connects once to `url`, and creates or upgrades the tables.
    ///
    /// # Errors
    /// The URL is not valid, the server cannot be reached or refuses the login, or the tables
    /// cannot be created.
    pub(crate) async fn open(url: &str, settings: FleetSettings) -> Result<Self, CoordinateError> {
        let params = resolve(url)?;
        let check = async {
            let session = check_session(&params).await?;
            let mut client = Arc::into_inner(session.client).expect("one client");
            schema::migrate(&mut client)
                .await
                .map_err(|err| CoordinateError::Unusable(format!("{params}: {err}")))?;
            if !settings.records {
                return Ok(None);
            }
            schema::check_records_index(&client)
                .await
                .map_err(|err| CoordinateError::Unusable(format!("--coordinate-records: {err}")))?;
            let (report, _) = mpsc::unbounded_channel();
            session::connect(&params, report)
                .await
                .map(Some)
                .map_err(|err| CoordinateError::Unusable(format!("--coordinate-records: {err}")))
        };
        let records = tokio::time::timeout(START_TIMEOUT, check)
            .await
            .map_err(|_| unanswered(&params))??;
        Ok(CheckedCoordinator {
            params,
            settings,
            records,
        })
    }

    /// Connects once to `url`, logs in and reads the tables' version, making nothing (no
    /// table created or upgraded): what `--dry-run` checks of a run's database.
    ///
    /// # Errors
    /// As [`CheckedCoordinator::open`], as far as can be told without writing: the URL is not
    /// valid, the server cannot be reached, refuses the login, does not answer within
    /// [`START_TIMEOUT`], or holds tables of a newer lanes.
    pub(crate) async fn reach(url: &str) -> Result<(), CoordinateError> {
        let params = resolve(url)?;
        let check = async {
            let session = check_session(&params).await?;
            schema::check_not_newer_tables(&session.client)
                .await
                .map_err(|err| CoordinateError::Unusable(format!("{params}: {err}")))
        };
        tokio::time::timeout(START_TIMEOUT, check)
            .await
            .map_err(|_| unanswered(&params))?
    }

    /// The database in use by run `run` (the `started_at` of this process's run record);
    /// grants and losses are reported on `report`.
    pub(crate) fn start(self, run: String, report: mpsc::UnboundedSender<Acquired>) -> Coordinator {
        Coordinator {
            records: Mutex::new(self.records),
            shared: Arc::new(Shared {
                params: self.params,
                settings: self.settings,
                pid: std::process::id(),
                run,
                pool: Mutex::new(Vec::new()),
                report,
                grants: AtomicU64::new(1),
                releases: Mutex::new(Vec::new()),
                claimed: Mutex::new(std::collections::HashMap::new()),
                claims: AtomicU64::new(0),
                noticed: Mutex::new(std::collections::HashMap::new()),
            }),
        }
    }
}

/// The database in use.
pub(crate) struct Coordinator {
    shared: Arc<Shared>,
    /// `--coordinate-records`: the records' session opened at the start, until the writer
    /// takes it.
    records: Mutex<Option<Session>>,
}

struct Shared {
    params: Params,
    settings: FleetSettings,
    pid: u32,
    run: String,
    /// Idle sessions, for the next keys.
    pool: Mutex<Vec<Session>>,
    report: mpsc::UnboundedSender<Acquired>,
    /// The next grant's number.
    grants: AtomicU64,
    /// The keys being let go.
    releases: Mutex<Vec<tokio::task::JoinHandle<()>>>,
    /// The keys claimed (their rows written) whose grant has not been handed over yet: they
    /// wait for a shared slot or for a lost holder's job. By claim number: the session and the
    /// lock.
    claimed: Mutex<std::collections::HashMap<u64, (Arc<Client>, i64)>>,
    /// The next claim's number.
    claims: AtomicU64,
    /// When each key's last error was said (those said within [`NOTICE_REPEAT`]): a key's
    /// errors are said once per `NOTICE_REPEAT`, whichever of its jobs asks.
    noticed: Mutex<std::collections::HashMap<Arc<str>, Instant>>,
}

impl Shared {
    /// Whether an error of `key` is to be said now (none said within [`NOTICE_REPEAT`]);
    /// noted as said if so.
    fn notice_due(&self, key: &Arc<str>) -> bool {
        let mut noticed = self.noticed.lock().unwrap_or_else(|e| e.into_inner());
        let now = Instant::now();
        if noticed
            .get(key)
            .is_some_and(|&at| now.duration_since(at) < NOTICE_REPEAT)
        {
            return false;
        }
        if noticed.len() >= 1024 {
            // Many keys in trouble: those said long enough ago go.
            noticed.retain(|_, at| now.duration_since(*at) < NOTICE_REPEAT);
        }
        noticed.insert(Arc::clone(key), now);
        true
    }
}

/// A claimed key not yet granted ([`Shared::claimed`]), until the grant is handed over or the
/// wait ends, however it ends.
struct Claim<'a> {
    shared: &'a Shared,
    number: u64,
}

impl<'a> Claim<'a> {
    fn new(shared: &'a Shared, client: &Arc<Client>, lock_id: i64) -> Self {
        let number = shared.claims.fetch_add(1, Ordering::Relaxed);
        shared
            .claimed
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(number, (Arc::clone(client), lock_id));
        Claim { shared, number }
    }
}

impl Drop for Claim<'_> {
    fn drop(&mut self) {
        self.shared
            .claimed
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&self.number);
    }
}

impl Coordinator {
    /// `--coordinate-records`: starts the writer of this run's job records into the database.
    pub(crate) fn records(&self, feed: crate::report::mirror::MirrorFeed) {
        let session = self
            .records
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .take();
        records::start(Arc::clone(&self.shared), session, feed);
    }

    /// Waits until every key let go so far is let go in the database, so that a run that ends
    /// leaves no row saying it holds a key (the next holder would take it for a lost one); then
    /// removes the rows of its idle sessions from `lanes_sessions` and closes them.
    pub(crate) async fn settle(&self) {
        // Keys claimed whose jobs never started (the run stops while they wait for a shared
        // slot or a lost holder's job): their rows go, so that the next holder does not wait
        // out this lanes' `--grace` for a job that never ran.
        let claimed: Vec<(Arc<Client>, i64)> = self
            .shared
            .claimed
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .values()
            .cloned()
            .collect();
        let notice_ms = sql_ms(NOTICE_BOUND);
        for (client, id) in claimed {
            let _ = tokio::time::timeout(
                HEARTBEAT_TIMEOUT,
                client.execute(statements::FORGET, &[&id, &notice_ms]),
            )
            .await;
        }
        loop {
            let pending: Vec<_> = std::mem::take(
                &mut *self
                    .shared
                    .releases
                    .lock()
                    .unwrap_or_else(|e| e.into_inner()),
            );
            if pending.is_empty() {
                break;
            }
            for release in pending {
                let _ = release.await;
            }
        }
        // The idle sessions' rows go with them; the rows of sessions that were still waiting
        // for a key go when their sessions end (the next lanes to connect sweeps them).
        let idle: Vec<Session> =
            std::mem::take(&mut *self.shared.pool.lock().unwrap_or_else(|e| e.into_inner()));
        for session in &idle {
            let _ = session
                .client
                .execute(
                    "DELETE FROM lanes_sessions WHERE backend_pid = pg_backend_pid()",
                    &[],
                )
                .await;
        }
    }

    /// Starts acquiring `key`'s lock on a task of its own, which reports the grant as
    /// [`Acquired::Granted`] (an error, as a notice, is retried with a growing delay).
    pub(crate) fn acquire(&self, key: Arc<str>) {
        let shared = Arc::clone(&self.shared);
        tokio::spawn(async move {
            let asked = Instant::now();
            let mut delay = Duration::from_millis(10);
            loop {
                match acquire(&shared, &key, asked).await {
                    Ok(grant) => {
                        let _ = shared.report.send(Acquired::Granted(key, grant));
                        return;
                    }
                    Err(err) => {
                        // Said once per NOTICE_REPEAT for the key, not at every try nor for
                        // each of its jobs (a server short of connections alternates between
                        // two texts of one refusal).
                        if shared.notice_due(&key) {
                            let _ = shared.report.send(Acquired::Notice(format!(
                                "cannot lock key {key:?} in {}: {err}; trying again",
                                shared.params
                            )));
                        }
                        tokio::time::sleep(delay).await;
                        delay = (delay * 2).min(Duration::from_secs(1));
                    }
                }
            }
        });
    }
}

/// An idle session from the pool, or a new one.
async fn session(shared: &Shared) -> Result<Session, String> {
    loop {
        let idle = shared.pool.lock().unwrap_or_else(|e| e.into_inner()).pop();
        match idle {
            Some(session) if !session.client.is_closed() => return Ok(session),
            Some(_) => continue,
            None => break,
        }
    }
    let session = session::connect(&shared.params, shared.report.clone()).await?;
    // Rows of sessions that are gone go, so that the table stays as small as the fleet.
    let sweep = session.client.execute(
        "DELETE FROM lanes_sessions WHERE backend_pid NOT IN (SELECT pid FROM pg_stat_activity)",
        &[],
    );
    let pid = shared.pid as i32;
    let register_params: [&(dyn ToSql + Sync); 4] = [
        &shared.settings.namespace,
        &shared.settings.host_id,
        &pid,
        &shared.run,
    ];
    let register = session.client.execute(
        "INSERT INTO lanes_sessions (backend_pid, namespace, host, pid, run) \
             VALUES (pg_backend_pid(), $1, $2, $3, $4) \
             ON CONFLICT (backend_pid) DO UPDATE SET namespace = excluded.namespace, \
             host = excluded.host, pid = excluded.pid, run = excluded.run, key = NULL, \
             lock_id = NULL, asked_at = NULL",
        &register_params,
    );
    // A session waits for a lock as long as the key is held elsewhere, and holds it idle as
    // long as its job runs: a role's or the URL's time limits would cancel those waits (and
    // lose the session's place in the queue) or end the session.
    let unlimited = session.client.batch_execute(
        "SET statement_timeout = 0; SET lock_timeout = 0; \
         SET idle_in_transaction_session_timeout = 0",
    );
    let prepare = statements::Statements::prepare(&session.client);
    let (_, _, _, prepared) =
        tokio::try_join!(unlimited, sweep, register, prepare).map_err(|err| error_text(&err))?;
    let mut session = session;
    session.prepared = Some(prepared);
    Ok(session)
}

/// Waits for `key`'s lock on a session of its own, first come first served.
async fn acquire(shared: &Arc<Shared>, key: &Arc<str>, asked: Instant) -> Result<Grant, String> {
    let mut session = session(shared).await?;
    let id = lock_id(&shared.settings.namespace, key);
    let client = Arc::clone(&session.client);
    let prepared = session
        .prepared
        .clone()
        .ok_or_else(|| "the session has no prepared statements".to_owned())?;
    let key_text: &str = key;
    let ask_params: [&(dyn ToSql + Sync); 2] = [&key_text, &id];
    let id_param: [&(dyn ToSql + Sync); 1] = [&id];
    let ask = client.execute(&prepared.ask, &ask_params);
    let attempt = client.query_one(&prepared.attempt, &id_param);
    let (_, got) = tokio::try_join!(ask, attempt).map_err(|err| error_text(&err))?;
    let grace_ms = sql_ms(shared.settings.grace);
    let pid = shared.pid as i32;
    let notice_ms = sql_ms(NOTICE_BOUND);
    let claim_params: [&(dyn ToSql + Sync); 8] = [
        &id,
        &shared.settings.namespace,
        &key_text,
        &shared.settings.host_id,
        &pid,
        &shared.run,
        &grace_ms,
        &notice_ms,
    ];
    let mut holder = None;
    let claimed = if got.get::<_, bool>(0) {
        client
            .query_one(&prepared.claim, &claim_params)
            .await
            .map_err(|err| error_text(&err))?
    } else {
        // One pipeline: who holds it, the wait in the server's queue, and the claim, which
        // the server runs as soon as the lock is granted.
        let who = async {
            let holder_params: [&(dyn ToSql + Sync); 3] = [&id, &pid, &shared.run];
            let who = client.query_opt(&prepared.holder, &holder_params).await?;
            let holder = who.map(|row| LockHolder {
                pid: row.get::<_, i32>(1) as u32,
                run: row.get(2),
                host: Some(row.get(0)),
            });
            if let Some(holder) = &holder {
                let _ = shared
                    .report
                    .send(Acquired::HeldBy(Arc::clone(key), holder.clone()));
            }
            Ok(holder)
        };
        let wait = client.query_one(&prepared.lock, &id_param);
        let claim = client.query_one(&prepared.claim, &claim_params);
        let (who, _, claimed) =
            tokio::try_join!(who, wait, claim).map_err(|err| error_text(&err))?;
        holder = who;
        claimed
    };
    same_backend(session.backend_pid, claimed.get(0))?;
    if !claimed.get::<_, bool>(5) {
        return Err(format!(
            "the server did not grant the lock of key {key:?} to this session"
        ));
    }
    // Until the grant is handed over, a stop lets the claim go ([`Coordinator::settle`]).
    let _claim = Claim::new(shared, &session.client, id);
    // The rows' last sign of life: the claim, then each heartbeat while the key waits.
    let mut last_sign = Instant::now();
    let lost: Option<i64> = claimed.get(1);
    if let Some(wait_ms) = lost.filter(|&ms| ms > 0) {
        // The last holder lost the key without letting it go, and not long enough ago: its
        // job may still be stopping. The job waits for it, and names it.
        if holder.is_none() {
            holder = Some(LockHolder {
                pid: claimed.get::<_, i32>(3) as u32,
                run: claimed.get(4),
                host: Some(claimed.get(2)),
            });
        }
        let wait = Duration::from_millis(u64::try_from(wait_ms).unwrap_or(0));
        wait_held(&session.client, wait, &mut last_sign).await?;
    }
    let slot = match shared.settings.shared_slots {
        Some(count) => {
            let slots: Vec<i64> = (0..count)
                .map(|i| slot_id(&shared.settings.namespace, i))
                .collect();
            Some(take_slot(&mut session, &slots, shared.settings.grace, &mut last_sign).await?)
        }
        None => None,
    };
    if last_sign.elapsed() >= HEARTBEAT {
        // The key waited, held, for a shared slot, with no heartbeat meanwhile: before its job
        // may start, the session must still be alive (if it was lost, another host may hold
        // the key already), and its rows' sign of life fresh (a host granted the key after
        // this point waits from it).
        beat_waiting(&session.client).await?;
    }
    let grant = shared.grants.fetch_add(1, Ordering::Relaxed);
    *session.holding.lock().unwrap_or_else(|e| e.into_inner()) = Some((Arc::clone(key), grant));
    heartbeat(&session, grant, shared.report.clone());
    let socket: OwnedFd = session
        .socket
        .try_clone()
        .map(crate::shell::lock_dir::above_placements)
        .map_err(|err| format!("cannot duplicate the session's socket: {err}"))?;
    Ok(Grant {
        key: socket,
        slot: None,
        released: None,
        wait: Some(HostWait {
            waited: asked.elapsed(),
            holder,
        }),
        fleet: Some(Box::new(FleetHold {
            session: Some(session),
            lock_id: id,
            slot,
            grant,
            shared: Arc::clone(shared),
        })),
    })
}

/// Waits `wait` while a key (and maybe a shared slot) is held on `client`'s session but its
/// job may not start yet (a lost holder's job may still run), asking the session every
/// [`HEARTBEAT`] whether it is alive and renewing its rows' sign of life (`last_sign`: when it
/// was last renewed). A session lost meanwhile ends the wait at once with an error, so that
/// its lanes asks for the key again at once rather than when the wait would have ended.
///
/// # Errors
/// The session is lost, or does not answer within [`HEARTBEAT_TIMEOUT`].
async fn wait_held(client: &Client, wait: Duration, last_sign: &mut Instant) -> Result<(), String> {
    let until = Instant::now() + wait;
    loop {
        let left = until.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Ok(());
        }
        tokio::time::sleep(left.min(HEARTBEAT)).await;
        beat_waiting(client).await?;
        *last_sign = Instant::now();
    }
}

/// One heartbeat on `client`'s session (the holder's rows' `seen_at` renewed): the session
/// must answer within [`HEARTBEAT_TIMEOUT`]. Sent by a hold's heartbeat task ([`heartbeat`])
/// and by a key that waits while held ([`wait_held`]).
///
/// # Errors
/// Why the session counts as lost: the connection ended, or it did not answer in time.
async fn beat(client: &Client) -> Result<(), String> {
    match tokio::time::timeout(
        HEARTBEAT_TIMEOUT,
        client.simple_query(statements::HEARTBEAT),
    )
    .await
    {
        Ok(Ok(_)) => Ok(()),
        Ok(Err(err)) => Err(format!("connection lost: {}", error_text(&err))),
        Err(_) => Err(format!(
            "the database did not answer for {} s",
            HEARTBEAT_TIMEOUT.as_secs()
        )),
    }
}

/// [`beat`] for a key that waits while held: its error says so.
async fn beat_waiting(client: &Client) -> Result<(), String> {
    beat(client)
        .await
        .map_err(|why| format!("the session was lost while the key waited ({why})"))
}

/// Checks that a session's server process is the one it opened with: a connection pooler in
/// transaction or statement mode hands each transaction to any of its server connections, and
/// a session-level advisory lock then stays with a connection other clients use.
fn same_backend(opened: i32, now: i32) -> Result<(), String> {
    if opened == now {
        return Ok(());
    }
    Err(format!(
        "the session's server process changed (pid {opened} then {now}): a connection pooler \
         in transaction or statement mode is between lanes and the database; session-level \
         advisory locks need a direct connection (or a pooler in session mode)"
    ))
}

/// Asks the session every [`HEARTBEAT`] whether it is alive while it holds grant `grant`; no
/// answer within [`HEARTBEAT_TIMEOUT`], or an error, loses the key.
fn heartbeat(session: &Session, grant: u64, report: mpsc::UnboundedSender<Acquired>) {
    let client = Arc::clone(&session.client);
    let holding = Arc::clone(&session.holding);
    tokio::spawn(async move {
        loop {
            tokio::time::sleep(HEARTBEAT).await;
            let current = || {
                holding
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .as_ref()
                    .is_some_and(|(_, g)| *g == grant)
            };
            if !current() {
                return;
            }
            let Err(why) = beat(&client).await else {
                continue;
            };
            let mut holding = holding.lock().unwrap_or_else(|e| e.into_inner());
            if holding.as_ref().is_some_and(|(_, g)| *g == grant) {
                if let Some((key, grant)) = holding.take() {
                    let _ = report.send(Acquired::Lost { key, grant, why });
                }
            }
            return;
        }
    });
}

/// A key held in the database, until dropped: dropping it lets the key go (on a task) and puts
/// the session back in the pool; a session lost meanwhile is closed instead.
pub(crate) struct FleetHold {
    session: Option<Session>,
    lock_id: i64,
    /// The shared slot held with the key (`--shared-max-concurrent`).
    slot: Option<i64>,
    /// This grant's number, as [`Acquired::Lost`] names it.
    pub(crate) grant: u64,
    shared: Arc<Shared>,
}

impl std::fmt::Debug for FleetHold {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FleetHold")
            .field("lock_id", &self.lock_id)
            .field("grant", &self.grant)
            .finish_non_exhaustive()
    }
}

impl FleetHold {
    /// A job `seq` started under the key: the holder's row says so (`lanes locks`).
    pub(crate) fn started(&self, seq: u64) {
        let Some(session) = &self.session else {
            return;
        };
        let Some(prepared) = session.prepared.clone() else {
            return;
        };
        let client = Arc::clone(&session.client);
        let id = self.lock_id;
        tokio::spawn(async move {
            let _ = client
                .execute(&prepared.started, &[&(seq as i64), &id])
                .await;
        });
    }
}

impl Drop for FleetHold {
    fn drop(&mut self) {
        let Some(session) = self.session.take() else {
            return;
        };
        let still_held = session
            .holding
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take()
            .is_some_and(|(_, g)| g == self.grant);
        // Lost (or no runtime to let it go on): the session closes as it drops, and the
        // server lets the key go once no process holds its socket.
        if !still_held || session.client.is_closed() {
            return;
        }
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let id = self.lock_id;
        let slot = self.slot;
        let shared = Arc::clone(&self.shared);
        let releases = Arc::clone(&self.shared);
        let release = runtime.spawn(async move {
            let client = &session.client;
            let Some(prepared) = session.prepared.clone() else {
                return;
            };
            let slot_id = slot.unwrap_or_default();
            let id_param: [&(dyn ToSql + Sync); 1] = [&id];
            let both: [&(dyn ToSql + Sync); 2] = [&id, &slot_id];
            let notice_ms = sql_ms(NOTICE_BOUND);
            let forget_params: [&(dyn ToSql + Sync); 2] = [&id, &notice_ms];
            // The row first: a new holder that finds one takes it for a lost holder's.
            let forget = client.execute(&prepared.forget, &forget_params);
            // Then the key, and the slot with a word to the processes waiting for one.
            let unlock = match slot {
                None => client.execute(&prepared.unlock, &id_param),
                Some(_) => client.execute(&prepared.unlock_slot, &both),
            };
            let idle = client.execute(&prepared.idle, &[]);
            if tokio::try_join!(forget, unlock, idle).is_ok() {
                shared
                    .pool
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .push(session);
            }
        });
        let mut pending = releases.releases.lock().unwrap_or_else(|e| e.into_inner());
        pending.retain(|release| !release.is_finished());
        pending.push(release);
    }
}

/// How long the database may take at a run's start to connect and check (or create) its
/// tables, and for `lanes locks`: a server that takes connections but never answers (stopped,
/// swapping, a connection half open) is a usage error, not a hang that holds back the signals.
pub(crate) const START_TIMEOUT: Duration = Duration::from_secs(10);

/// `duration` in whole milliseconds, as the statements take it (a `bigint`; saturating).
fn sql_ms(duration: Duration) -> i64 {
    i64::try_from(duration.as_millis()).unwrap_or(i64::MAX)
}

/// A session for the start's checks of the database, which holds no key (its losses go
/// nowhere).
async fn check_session(params: &Params) -> Result<session::Session, CoordinateError> {
    let (report, _) = mpsc::unbounded_channel();
    session::connect(params, report)
        .await
        .map_err(CoordinateError::Unusable)
}

/// The error of a database that did not answer within [`START_TIMEOUT`].
fn unanswered(params: &Params) -> CoordinateError {
    CoordinateError::Unusable(format!(
        "{params}: the database did not answer within {} s",
        START_TIMEOUT.as_secs()
    ))
}

/// `lanes locks --coordinate URL`: the keys held in `namespace`, their holders and their
/// waiters in the order the server will grant them (the order they asked).
///
/// # Errors
/// The database cannot be reached, does not answer within [`START_TIMEOUT`], or has no lanes
/// tables.
pub(crate) async fn describe(url: &str, namespace: &str) -> Result<String, CoordinateError> {
    let params = resolve(url)?;
    tokio::time::timeout(START_TIMEOUT, describe_at(&params, namespace))
        .await
        .map_err(|_| unanswered(&params))?
}

/// [`describe`] on the database of `params`.
async fn describe_at(params: &Params, namespace: &str) -> Result<String, CoordinateError> {
    let (report, _) = mpsc::unbounded_channel();
    let session = session::connect(params, report)
        .await
        .map_err(CoordinateError::Unusable)?;
    let unusable = |err: tokio_postgres::Error| {
        CoordinateError::Unusable(format!("{params}: {}", error_text(&err)))
    };
    schema::check_current(&session.client)
        .await
        .map_err(|err| CoordinateError::Unusable(format!("{params}: {err}")))?;
    let lock_of = statements::LOCK_OF;
    // Every slot `--shared-max-concurrent` can name (1 to 1024).
    let slot_ids: Vec<i64> = (0..1024).map(|slot| slot_id(namespace, slot)).collect();
    let holders = session
        .client
        .query(
            &format!(
                "SELECT h.key, h.host, h.pid, h.run, h.seq, EXISTS (SELECT 1 FROM pg_locks l \
                 WHERE l.pid = h.backend_pid AND l.granted AND {lock_of} = ANY($2)), \
                 COALESCE(h.lost_until > clock_timestamp(), false) OR EXISTS (SELECT 1 \
                 FROM lanes_slot_holds s WHERE s.backend_pid = h.backend_pid \
                 AND s.lost_until > clock_timestamp()) \
                 FROM lanes_holds h \
                 JOIN pg_locks l ON l.pid = h.backend_pid AND l.granted AND {lock_of} = h.lock_id \
                 WHERE h.namespace = $1 ORDER BY h.key"
            ),
            &[&namespace, &slot_ids],
        )
        .await
        .map_err(unusable)?;
    let slots_held: i64 = session
        .client
        .query_one(
            &format!("SELECT count(*) FROM pg_locks l WHERE l.granted AND {lock_of} = ANY($1)"),
            &[&slot_ids],
        )
        .await
        .map_err(unusable)?
        .get(0);
    let waiters = session
        .client
        .query(
            &format!(
                "SELECT s.key, s.host, s.pid, s.run FROM lanes_sessions s \
                 JOIN pg_locks l ON l.pid = s.backend_pid AND NOT l.granted AND {lock_of} = s.lock_id \
                 WHERE s.namespace = $1 ORDER BY s.key, s.asked_at"
            ),
            &[&namespace],
        )
        .await
        .map_err(unusable)?;
    let mut keys: Vec<String> = holders
        .iter()
        .chain(&waiters)
        .map(|row| row.get::<_, String>(0))
        .collect();
    keys.sort();
    keys.dedup();
    let mut text = String::new();
    for key in &keys {
        let holder = holders.iter().find(|row| row.get::<_, String>(0) == *key);
        match holder {
            Some(row) => {
                let seq: Option<i64> = row.get(4);
                let _ = write!(
                    text,
                    "{key:?}: held by host {} pid {} (run {}",
                    shown(row.get(1)),
                    row.get::<_, i32>(2),
                    shown(row.get(3))
                );
                let slot: bool = row.get(5);
                let lost_job_runs: bool = row.get(6);
                match seq {
                    Some(seq) => {
                        let _ = write!(text, ", seq {seq})");
                    }
                    None if lost_job_runs => {
                        text.push_str("), its job waiting for a lost holder's job to end");
                    }
                    // Held, but its job has not started: it waits for a shared slot (or for
                    // a lost holder's grace).
                    None if slots_held > 0 && !slot => {
                        text.push_str("), its job waiting for a shared slot");
                    }
                    None => text.push_str("), its job not started yet"),
                }
                text.push('\n');
            }
            None => {
                let _ = writeln!(text, "{key:?}: being handed over");
            }
        }
        let before = usize::from(holder.is_some());
        for (i, row) in waiters
            .iter()
            .filter(|row| row.get::<_, String>(0) == *key)
            .enumerate()
        {
            let _ = writeln!(
                text,
                "  waiting: host {} pid {} (run {}), {} ahead",
                shown(row.get(1)),
                row.get::<_, i32>(2),
                shown(row.get(3)),
                before + i
            );
        }
    }
    if keys.is_empty() {
        text.push_str("no key is held\n");
    }
    if slots_held > 0 {
        let _ = writeln!(text, "shared slots: {slots_held} held");
    }
    Ok(text)
}

/// A host's name or a run as written into the tables by any member of the fleet, as shown by
/// `lanes locks`: control characters escaped, so that none can break a line or move the
/// cursor.
fn shown(text: String) -> String {
    crate::output::framing::escape_controls(&text)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_session_whose_server_process_changed_is_refused_as_behind_a_pooler() {
        assert_eq!(same_backend(41, 41), Ok(()));
        let err = same_backend(41, 42).unwrap_err();
        assert!(
            err.starts_with(
                "the session's server process changed (pid 41 then 42): a connection pooler \
                 in transaction or statement mode is between lanes and the database"
            ),
            "{err}"
        );
    }

    #[test]
    fn a_key_s_lock_depends_on_its_namespace_and_nothing_else() {
        assert_eq!(lock_id("lanes", "a"), lock_id("lanes", "a"));
        assert_ne!(lock_id("lanes", "a"), lock_id("lanes", "b"));
        assert_ne!(lock_id("lanes", "a"), lock_id("other", "a"));
        // The separator keeps ("ab", "c") and ("a", "bc") apart.
        assert_ne!(lock_id("ab", "c"), lock_id("a", "bc"));
        assert_ne!(lock_id("lanes", "a"), schema::MIGRATION_LOCK);
    }
}
