//! The statements a session of `--coordinate` runs, prepared once per session: each then takes
//! one round trip (an unprepared one takes two), and the server plans it once.

use tokio_postgres::{Client, Error, Statement};

/// Says which key the session asks for: `$1` the key, `$2` its lock.
const ASK: &str = "UPDATE lanes_sessions SET key = $1, lock_id = $2, asked_at = clock_timestamp() \
                   WHERE backend_pid = pg_backend_pid()";

/// Takes the lock `$1` when it is free.
const ATTEMPT: &str = "SELECT pg_try_advisory_lock($1)";

/// The advisory lock a `pg_locks` row `l` is, as the bigint `pg_advisory_lock` takes (its
/// high half in `classid`, its low half in `objid`, `objsubid` 1: PostgreSQL's `pg_locks`
/// documentation), in this database; compare it with a lock id.
pub(crate) const LOCK_OF: &str = "l.locktype = 'advisory' AND l.objsubid = 1 \
     AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database()) \
     AND ((l.classid::bigint << 32) | l.objid::bigint)";

/// Who holds the lock `$1` now, for this lanes (pid `$2`, run `$3`): the session the server
/// granted it to, as that session registered itself (not the holder's row, which a hand-over
/// writes a moment after the grant). A hold of this lanes itself is one being let go (the
/// key's previous job): then the other process that asked first, which gets it next.
const HOLDER: &str = "SELECT s.host, s.pid, s.run FROM pg_locks l \
     JOIN lanes_sessions s ON s.backend_pid = l.pid \
     WHERE LOCK_OF = $1 AND NOT (s.pid = $2 AND s.run = $3) \
     ORDER BY l.granted DESC, s.asked_at LIMIT 1";

/// Waits for the lock `$1`, in the server's queue.
const LOCK: &str = "SELECT pg_advisory_lock($1)";

/// Records this session as the holder of lock `$1` (namespace `$2`, key `$3`, host `$4`, pid
/// `$5`, run `$6`, `--grace` in ms `$7`; `$8` the notice bound in ms), replacing any earlier
/// holder's row, but only while the session holds the lock: it runs right behind the wait for
/// the lock, in one pipeline, and a wait that failed (cancelled, a `statement_timeout`) must
/// not overwrite the real holder's row (its last column says whether it held it); returns the session's server process (to check that no pooler switched it)
/// and, when the last holder's session ended without letting the key go (its row is still
/// there: a clean release deletes it before it lets the key go), how long in ms its job may
/// still run, and its host, pid and run. That job may run until its last sign of life
/// (`seen_at`, its heartbeat; a row without one counts as alive now) plus its `--grace` plus
/// `$8`, or until the `lost_until` its row inherited from a holder lost before it, whichever is
/// later. The new row inherits that time while it is to come, so that a holder lost in turn
/// while it waits passes the wait on, whatever its own `--grace`. A row of this very lanes (its
/// session lost while the key waited, before any job of it started: a lost session's job is
/// stopped before its lane asks again) counts only for the time it inherited.
const CLAIM: &str = "
WITH mine AS (
    SELECT 1 FROM pg_locks l WHERE l.pid = pg_backend_pid() AND l.granted AND LOCK_OF = $1
), lost AS (
    SELECT h.host, h.pid, h.run, GREATEST(
               CASE WHEN h.host = $4::text AND h.pid = $5::integer AND h.run = $6::text
                    THEN NULL
                    ELSE COALESCE(h.seen_at, clock_timestamp())
                       + make_interval(secs => (h.grace_ms + $8::bigint)::double precision / 1000)
               END,
               h.lost_until) AS until
    FROM lanes_holds h
    WHERE h.lock_id = $1 AND h.backend_pid <> pg_backend_pid() AND EXISTS (SELECT 1 FROM mine)
), claimed AS (
    INSERT INTO lanes_holds (lock_id, namespace, key, host, pid, run, seq, backend_pid,
                             backend_start, grace_ms, granted_at, seen_at, lost_until)
    SELECT $1::bigint, $2::text, $3::text, $4::text, $5::integer, $6::text, NULL,
           pg_backend_pid(), NULL, $7::bigint, clock_timestamp(), clock_timestamp(),
           (SELECT until FROM lost WHERE until > clock_timestamp())
    WHERE EXISTS (SELECT 1 FROM mine)
    ON CONFLICT (lock_id) DO UPDATE SET namespace = excluded.namespace, key = excluded.key,
        host = excluded.host, pid = excluded.pid, run = excluded.run, seq = NULL,
        backend_pid = excluded.backend_pid, backend_start = excluded.backend_start,
        grace_ms = excluded.grace_ms, granted_at = excluded.granted_at,
        seen_at = excluded.seen_at, lost_until = excluded.lost_until
)
SELECT pg_backend_pid(),
       (SELECT GREATEST(0::bigint, ceil(EXTRACT(EPOCH FROM (until - clock_timestamp())) * 1000)
                                   ::bigint) FROM lost),
       (SELECT host FROM lost), (SELECT pid FROM lost), (SELECT run FROM lost),
       EXISTS (SELECT 1 FROM mine)";

/// The heartbeat of a session that holds a key (and maybe a shared slot): its rows' last sign
/// of life.
pub(crate) const HEARTBEAT: &str =
    "UPDATE lanes_holds SET seen_at = clock_timestamp() WHERE backend_pid = pg_backend_pid();
     UPDATE lanes_slot_holds SET seen_at = clock_timestamp() WHERE backend_pid = pg_backend_pid()";

/// Records this session as the holder of shared slot `$1` (`--grace` in ms `$2`, the notice
/// bound in ms `$3`), which it has just locked; returns how long in ms the job of a lost
/// earlier holder of the slot may still run, and passes that time on, as [`CLAIM`] does for a
/// key.
pub(crate) const CLAIM_SLOT: &str = "
WITH lost AS (
    SELECT GREATEST(
               h.seen_at
                   + make_interval(secs => (h.grace_ms + $3::bigint)::double precision / 1000),
               h.lost_until) AS until
    FROM lanes_slot_holds h
    WHERE h.slot_id = $1 AND h.backend_pid <> pg_backend_pid()
), claimed AS (
    INSERT INTO lanes_slot_holds (slot_id, backend_pid, grace_ms, seen_at, lost_until)
    VALUES ($1, pg_backend_pid(), $2, clock_timestamp(),
            (SELECT until FROM lost WHERE until > clock_timestamp()))
    ON CONFLICT (slot_id) DO UPDATE SET backend_pid = excluded.backend_pid,
        grace_ms = excluded.grace_ms, seen_at = excluded.seen_at,
        lost_until = excluded.lost_until
)
SELECT (SELECT GREATEST(0::bigint, ceil(EXTRACT(EPOCH FROM (until - clock_timestamp())) * 1000)
                                   ::bigint) FROM lost)";

/// The job `$1` started under lock `$2`.
const STARTED: &str = "UPDATE lanes_holds SET seq = $1 \
                       WHERE lock_id = $2 AND backend_pid = pg_backend_pid()";

/// Deletes this session's row of lock `$1` and of its shared slot, if any (before letting them
/// go, in a statement of its own: committed before they are free): its job has ended, or never
/// started (the run stopped while the key waited for a shared slot or for a lost holder's
/// job). A row that inherited a lost holder's time still to come (`lost_until`: the key let go
/// before its wait was over) stays, so that the next holder waits for that job as this one
/// would have, but with its own sign of life moved back so that only that time counts (`$2`:
/// the notice bound in ms, as in [`CLAIM`]): no job of this session's is left to wait out.
pub(crate) const FORGET: &str = "
WITH slot AS (
    DELETE FROM lanes_slot_holds WHERE backend_pid = pg_backend_pid()
        AND (lost_until IS NULL OR lost_until <= clock_timestamp())
), slot_kept AS (
    UPDATE lanes_slot_holds
        SET seen_at = lost_until
            - make_interval(secs => (grace_ms + $2::bigint)::double precision / 1000)
        WHERE backend_pid = pg_backend_pid() AND lost_until > clock_timestamp()
), gone AS (
    DELETE FROM lanes_holds WHERE lock_id = $1 AND backend_pid = pg_backend_pid()
        AND (lost_until IS NULL OR lost_until <= clock_timestamp())
)
UPDATE lanes_holds
    SET seen_at = lost_until
        - make_interval(secs => (grace_ms + $2::bigint)::double precision / 1000)
    WHERE lock_id = $1 AND backend_pid = pg_backend_pid() AND lost_until > clock_timestamp()";

/// Lets lock `$1` go.
const UNLOCK: &str = "SELECT pg_advisory_unlock($1)";

/// Lets lock `$1` and shared slot `$2` go, with a word to the processes waiting for a slot.
const UNLOCK_SLOT: &str =
    "SELECT pg_advisory_unlock($1), pg_advisory_unlock($2), pg_notify('lanes_slots', '')";

/// Says that the session asks for nothing.
const IDLE: &str = "UPDATE lanes_sessions SET key = NULL, lock_id = NULL, asked_at = NULL \
                    WHERE backend_pid = pg_backend_pid()";

/// A session's prepared statements.
#[derive(Clone)]
pub(crate) struct Statements {
    pub(crate) ask: Statement,
    pub(crate) attempt: Statement,
    pub(crate) holder: Statement,
    pub(crate) lock: Statement,
    pub(crate) claim: Statement,
    pub(crate) started: Statement,
    pub(crate) forget: Statement,
    pub(crate) unlock: Statement,
    pub(crate) unlock_slot: Statement,
    pub(crate) idle: Statement,
}

impl Statements {
    /// Prepares them all on `client`, in one pipeline.
    ///
    /// # Errors
    /// A statement does not prepare (the tables are missing, say).
    pub(crate) async fn prepare(client: &Client) -> Result<Statements, Error> {
        let (holder_text, claim_text) = (
            HOLDER.replace("LOCK_OF", LOCK_OF),
            CLAIM.replace("LOCK_OF", LOCK_OF),
        );
        let (ask, attempt, holder, lock, claim) = tokio::try_join!(
            client.prepare(ASK),
            client.prepare(ATTEMPT),
            client.prepare(&holder_text),
            client.prepare(LOCK),
            client.prepare(&claim_text),
        )?;
        let (started, forget, unlock, unlock_slot, idle) = tokio::try_join!(
            client.prepare(STARTED),
            client.prepare(FORGET),
            client.prepare(UNLOCK),
            client.prepare(UNLOCK_SLOT),
            client.prepare(IDLE),
        )?;
        Ok(Statements {
            ask,
            attempt,
            holder,
            lock,
            claim,
            started,
            forget,
            unlock,
            unlock_slot,
            idle,
        })
    }
}
