//! The tables `--coordinate` keeps in the database, created on first use and versioned. The
//! migration runs in one transaction under a transaction-level advisory lock
//! ([`MIGRATION_LOCK`]), so that two hosts starting at once apply it once: the second waits,
//! then finds the version current.

use tokio_postgres::Client;

/// The advisory lock (one `bigint`) the migration holds for its transaction: the first eight
/// bytes of SHA-256("lanes schema migration").
pub(crate) const MIGRATION_LOCK: i64 = 0x6c61_6e65_735f_6d69;

/// The newest version this lanes knows.
pub(crate) const VERSION: i32 = 5;

/// Each version's statements, in order; version N is `STEPS[N - 1]`.
const STEPS: [&str; VERSION as usize] = [
    // 1: sessions (who asks for which key) and holds (who holds which key).
    "CREATE TABLE lanes_sessions (
        backend_pid integer PRIMARY KEY,
        namespace text NOT NULL,
        host text NOT NULL,
        pid integer NOT NULL,
        run text NOT NULL,
        key text,
        lock_id bigint,
        asked_at timestamptz
    );
    CREATE TABLE lanes_holds (
        lock_id bigint PRIMARY KEY,
        namespace text NOT NULL,
        key text NOT NULL,
        host text NOT NULL,
        pid integer NOT NULL,
        run text NOT NULL,
        seq bigint,
        backend_pid integer NOT NULL,
        backend_start timestamptz,
        grace_ms bigint NOT NULL,
        granted_at timestamptz NOT NULL
    );",
    // 2: the fleet's job records (`--coordinate-records`).
    "CREATE TABLE lanes_records (
        id bigserial PRIMARY KEY,
        namespace text NOT NULL,
        host text NOT NULL,
        run text NOT NULL,
        seq bigint,
        key text,
        outcome text,
        reason text,
        record jsonb NOT NULL,
        recorded_at timestamptz NOT NULL DEFAULT now()
    );
    CREATE INDEX lanes_records_outcome ON lanes_records (namespace, outcome);",
    // 3: a holder's last sign of life (its heartbeat), which bounds the wait after its loss;
    // who holds which shared slot, so that a lost slot holder's job is waited for too.
    "ALTER TABLE lanes_holds ADD COLUMN seen_at timestamptz;
    CREATE TABLE lanes_slot_holds (
        slot_id bigint PRIMARY KEY,
        backend_pid integer NOT NULL,
        grace_ms bigint NOT NULL,
        seen_at timestamptz NOT NULL
    );",
    // 4: until when the job of a lost earlier holder may still run, as the holder that claimed
    // the row over it found: a later holder waits for it too, whatever this holder's grace.
    "ALTER TABLE lanes_holds ADD COLUMN lost_until timestamptz;
    ALTER TABLE lanes_slot_holds ADD COLUMN lost_until timestamptz;",
    // 5: the writer's pid, and one record per job of a run (a run is its host, pid and start):
    // an insert tried again after its answer was lost (a commit held by a synchronous standby)
    // finds the one that went in. Copies written before (the same record twice) are removed,
    // the first kept; their pid is unknown.
    "ALTER TABLE lanes_records ADD COLUMN pid integer;
    DELETE FROM lanes_records AS later USING lanes_records AS first
        WHERE later.id > first.id AND later.namespace = first.namespace
        AND later.host = first.host AND later.run = first.run AND later.seq = first.seq
        AND later.record = first.record;
    CREATE UNIQUE INDEX lanes_records_once ON lanes_records (namespace, host, pid, run, seq);",
];

/// The version of the tables in the session's schema search path; `None` without any.
async fn current_version(client: &Client) -> Result<Option<i32>, String> {
    let cannot = |err: tokio_postgres::Error| {
        format!(
            "cannot read lanes_schema: {}",
            super::session::error_text(&err)
        )
    };
    let exists: bool = client
        .query_one("SELECT to_regclass('lanes_schema') IS NOT NULL", &[])
        .await
        .map_err(cannot)?
        .get(0);
    if !exists {
        return Ok(None);
    }
    let found: Option<i32> = client
        .query_one("SELECT max(version) FROM lanes_schema", &[])
        .await
        .map_err(cannot)?
        .get(0);
    Ok(found)
}

/// Refuses, without changing anything, tables of a newer version than this lanes knows, as
/// [`migrate`] would (no tables, or older ones, are what it creates or upgrades).
///
/// # Errors
/// Tables of a newer version, or `lanes_schema` that cannot be read.
pub(crate) async fn check_not_newer_tables(client: &Client) -> Result<(), String> {
    match current_version(client).await? {
        Some(found) => check_not_newer(found),
        None => Ok(()),
    }
}

/// Refuses tables of a newer version than this lanes knows.
fn check_not_newer(found: i32) -> Result<(), String> {
    if found > VERSION {
        return Err(format!(
            "the database's lanes tables are version {found}, newer than this lanes knows \
             ({VERSION}): use a newer lanes"
        ));
    }
    Ok(())
}

/// Checks, without changing anything, that the database's tables are those this lanes reads
/// (`lanes locks`).
///
/// # Errors
/// No lanes tables, tables of an older version (a run with `--coordinate` upgrades them), or
/// of a newer one.
pub(crate) async fn check_current(client: &Client) -> Result<(), String> {
    let found: Option<i32> = client
        .query_opt("SELECT max(version) FROM lanes_schema", &[])
        .await
        .map_err(|err| {
            format!(
                "cannot read lanes_schema (no lanes tables here? a run with --coordinate \
                 creates them): {}",
                super::session::error_text(&err)
            )
        })?
        .and_then(|row| row.get(0));
    let found = found.unwrap_or(0);
    check_not_newer(found)?;
    if found < VERSION {
        return Err(format!(
            "the database's lanes tables are version {found}, older than this lanes reads \
             ({VERSION}): a run with --coordinate upgrades them"
        ));
    }
    Ok(())
}

/// Checks that `lanes_records` has its unique index `lanes_records_once`, on which every
/// record's insert relies (`ON CONFLICT`): one dropped by hand would make each insert fail.
///
/// # Errors
/// The index is missing (with the statement that makes it again), or the catalog cannot be
/// read.
pub(crate) async fn check_records_index(client: &Client) -> Result<(), String> {
    let there: bool = client
        .query_one("SELECT to_regclass('lanes_records_once') IS NOT NULL", &[])
        .await
        .map_err(|err| {
            format!(
                "cannot look for lanes_records' index: {}",
                super::session::error_text(&err)
            )
        })?
        .get(0);
    if there {
        return Ok(());
    }
    Err(
        "the table lanes_records has lost its unique index lanes_records_once, which every \
         record's insert relies on (was it dropped by hand?): make it again with `CREATE \
         UNIQUE INDEX lanes_records_once ON lanes_records (namespace, host, pid, run, seq)` \
         (remove copies of a record first, should it refuse)"
            .to_owned(),
    )
}

/// Brings the tables to [`VERSION`].
///
/// # Errors
/// A statement fails (no right to create tables, say), or the database's tables are of a
/// newer version than this lanes knows.
pub(crate) async fn migrate(client: &mut Client) -> Result<(), String> {
    // Tables already current need nothing, not even the right to create tables: a role that
    // may only read and write them (the usual grant for a fleet) uses them as they are.
    if current_version(client).await? == Some(VERSION) {
        return Ok(());
    }
    let tx = client.transaction().await.map_err(|err| {
        format!(
            "cannot start the migration: {}",
            super::session::error_text(&err)
        )
    })?;
    tx.execute("SELECT pg_advisory_xact_lock($1)", &[&MIGRATION_LOCK])
        .await
        .map_err(|err| {
            format!(
                "cannot lock the migration: {}",
                super::session::error_text(&err)
            )
        })?;
    tx.batch_execute("CREATE TABLE IF NOT EXISTS lanes_schema (version integer NOT NULL)")
        .await
        .map_err(|err| {
            format!(
                "cannot create table lanes_schema: {}",
                super::session::error_text(&err)
            )
        })?;
    let found: Option<i32> = tx
        .query_opt("SELECT max(version) FROM lanes_schema", &[])
        .await
        .map_err(|err| {
            format!(
                "cannot read lanes_schema: {}",
                super::session::error_text(&err)
            )
        })?
        .and_then(|row| row.get(0));
    let found = found.unwrap_or(0);
    check_not_newer(found)?;
    for version in found + 1..=VERSION {
        tx.batch_execute(STEPS[(version - 1) as usize])
            .await
            .map_err(|err| {
                format!(
                    "cannot create the version {version} tables: {}",
                    super::session::error_text(&err)
                )
            })?;
        tx.execute(
            "INSERT INTO lanes_schema (version) VALUES ($1)",
            &[&version],
        )
        .await
        .map_err(|err| {
            format!(
                "cannot record version {version}: {}",
                super::session::error_text(&err)
            )
        })?;
    }
    tx.commit().await.map_err(|err| {
        format!(
            "cannot commit the migration: {}",
            super::session::error_text(&err)
        )
    })
}
