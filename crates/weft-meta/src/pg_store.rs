//! [`PgStore`]: the metadata store on PostgreSQL (or a database that speaks its wire
//! protocol and SQL), for clusters whose metadata must outlive one machine.
//!
//! Invariants:
//! - Every table of [`crate::kv::Table`] is one SQL table `weft_<name>(k BYTEA PRIMARY KEY,
//!   v BYTEA NOT NULL)`, keys as [`Key::encode`] (so `ORDER BY k` is the key order) and
//!   values exactly as redb keeps them (records with their format version, numbers as 8
//!   big-endian bytes). The SQL is deliberately plain (`ON CONFLICT … DO UPDATE`,
//!   `RETURNING`, `LIMIT`, no stored procedures, sequences or advisory locks): the dialect
//!   CockroachDB and YugabyteDB accept too. Only PostgreSQL is tested (docs/meta-schema.md).
//! - The schema is created and upgraded by numbered migrations ([`MIGRATIONS`]), each applied
//!   once in its own transaction and recorded in `weft_migrations`; a database migrated by a
//!   newer build (a version this build does not know) is refused at open, never guessed at.
//! - Every write runs in one SERIALIZABLE transaction; a transaction that loses a
//!   serialization conflict (SQLSTATE 40001, or a deadlock, 40P01) is rolled back and run
//!   again from the start, at most [`MAX_ATTEMPTS`] times, so concurrent meta replicas on
//!   one database never interleave two operations. Reads run in REPEATABLE READ, READ ONLY
//!   transactions: one snapshot each.
//! - A transaction in which any statement failed is never reported committed (PostgreSQL
//!   answers COMMIT of a failed transaction with a silent ROLLBACK).
//! - Statements are pipelined: a transaction's BEGIN leaves with its first statement, and its
//!   changes (prepared many-row statements) with its COMMIT, each group in one round trip
//!   (`pipeline`), so a begin+commit of an object costs four. A pipeline answers with its
//!   first failed statement's error, never with the later ones the failure caused.
//! - A connection found lost (the server restarted, the network broke) leaves the pool with
//!   every idle one. An operation whose connection was lost before its COMMIT was sent did
//!   not happen: it runs again on a new connection (at most [`MAX_RECONNECTS`] times). One
//!   lost while a write's COMMIT was on its way fails with [`MetaError::StoreUnavailable`] and
//!   is not retried here: the COMMIT may or may not have happened, and only the caller knows
//!   whether to ask again.
//! - The URL's password never appears in an error, a log line or `Debug` output.
//! - Connections are pooled, at most `max_connections` at once; an operation waits for one.
//! - Dropping a store closes its connections off any async runtime (see `Drop`).

use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::future::Future;
use std::ops::Bound;
use std::pin::Pin;
use std::str::FromStr;
use std::sync::{Condvar, Mutex};
use std::task::Poll;
use std::time::Duration;

use tokio_postgres::error::SqlState;
use tokio_postgres::types::ToSql;
use tokio_postgres::{Client, Config, Error, NoTls, Row, Statement};

use crate::kv::{prefix_end, End, Entry, Key, KvBackend, Table, Txn};
use crate::overlay::{Found, Layers, Overlay};
use crate::MetaError;

/// The schema migrations, in order: (version, what it does, its SQL).
pub const MIGRATIONS: &[(u64, &str, &str)] = &[
    (
        1,
        "the tables of the metadata (buckets, objects, writes in progress, nodes, the repair \
     queue and its index, transitions, store-wide numbers, gateway records)",
        "CREATE TABLE IF NOT EXISTS weft_buckets (k BYTEA PRIMARY KEY, v BYTEA NOT NULL);
     CREATE TABLE IF NOT EXISTS weft_objects (k BYTEA PRIMARY KEY, v BYTEA NOT NULL);
     CREATE TABLE IF NOT EXISTS weft_pending_writes (k BYTEA PRIMARY KEY, v BYTEA NOT NULL);
     CREATE TABLE IF NOT EXISTS weft_nodes (k BYTEA PRIMARY KEY, v BYTEA NOT NULL);
     CREATE TABLE IF NOT EXISTS weft_repairs (k BYTEA PRIMARY KEY, v BYTEA NOT NULL);
     CREATE TABLE IF NOT EXISTS weft_repair_index (k BYTEA PRIMARY KEY, v BYTEA NOT NULL);
     CREATE TABLE IF NOT EXISTS weft_transitions (k BYTEA PRIMARY KEY, v BYTEA NOT NULL);
     CREATE TABLE IF NOT EXISTS weft_meta (k BYTEA PRIMARY KEY, v BYTEA NOT NULL);
     CREATE TABLE IF NOT EXISTS weft_gateway (k BYTEA PRIMARY KEY, v BYTEA NOT NULL);",
    ),
    (
        2,
        "the placed-units index (every unit of every committed object by node and disk); \
         it and the object totals are built from the objects at the next open",
        "CREATE TABLE IF NOT EXISTS weft_placed_units (k BYTEA PRIMARY KEY, v BYTEA NOT NULL);",
    ),
];

/// The newest migration this build knows.
pub const PG_SCHEMA_VERSION: u64 = MIGRATIONS[MIGRATIONS.len() - 1].0;

/// Most times one operation runs before it gives up on serialization conflicts.
pub const MAX_ATTEMPTS: u32 = 30;

/// Most times one operation is run again on a new connection after its connection was found
/// lost before its COMMIT (a server restart leaves every pooled connection dead).
const MAX_RECONNECTS: u32 = 2;

/// Connections a store opens by default.
pub const DEFAULT_MAX_CONNECTIONS: usize = 8;

/// How long connecting to the server may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// The statements of one table, prepared on one connection.
struct TableStatements {
    get: Statement,
    /// Ranges by (lower bound inclusive?, with an upper bound?).
    range: [[Statement; 2]; 2],
    count: Statement,
    /// Many puts, or removes, in one statement (keys and values as arrays).
    put_many: Statement,
    remove_many: Statement,
}

/// Reads one key of each of `tables` in one statement, parameter `$i` the key of
/// `tables[i - 1]`: rows (i - 1, value) for the keys found. Each part is a primary-key
/// lookup by equality, a plan that stays an index lookup whatever the table's size.
fn prefetch_sql(tables: &[Table]) -> String {
    let parts: Vec<String> = tables
        .iter()
        .enumerate()
        .map(|(i, table)| {
            format!("SELECT {i}::INT4, v FROM weft_{} WHERE k = ${}", table.name(), i + 1)
        })
        .collect();
    parts.join(" UNION ALL ")
}

/// A statement on its way to the server: see [`pipeline`].
type Step<'a, T> = Pin<Box<dyn Future<Output = Result<T, Error>> + 'a>>;

/// Runs `steps` as one pipeline: each is polled once, in order, before any answer is awaited,
/// so their requests leave in that order, in one write, and the server answers them in that
/// order (one round trip for all). The answers come back in the same order; an error is the
/// first failed step's, not those after it that the server refused because the transaction
/// had already failed.
async fn pipeline<T>(mut steps: Vec<Step<'_, T>>) -> Result<Vec<T>, Error> {
    let mut done: Vec<Option<Result<T, Error>>> = steps.iter().map(|_| None).collect();
    std::future::poll_fn(|cx| {
        let mut waiting = false;
        for (step, slot) in steps.iter_mut().zip(done.iter_mut()) {
            if slot.is_none() {
                match step.as_mut().poll(cx) {
                    Poll::Ready(outcome) => *slot = Some(outcome),
                    Poll::Pending => waiting = true,
                }
            }
        }
        if waiting {
            Poll::Pending
        } else {
            Poll::Ready(())
        }
    })
    .await;
    done.into_iter().map(|slot| slot.expect("every step finished")).collect()
}

/// One connection to the server, driven by a runtime of its own on the calling thread (the
/// store's callers are plain or blocking threads): the async driver lets statements be
/// pipelined, which the blocking one cannot.
struct PgClient {
    client: Client,
    runtime: tokio::runtime::Runtime,
}

impl PgClient {
    fn connect(config: &Config) -> Result<PgClient, Result<Error, std::io::Error>> {
        let runtime =
            tokio::runtime::Builder::new_current_thread().enable_all().build().map_err(Err)?;
        let (client, connection) = runtime.block_on(config.connect(NoTls)).map_err(Ok)?;
        // The connection's reads and writes run whenever the runtime does: while a statement
        // of this client is waited for.
        runtime.spawn(connection);
        Ok(PgClient { client, runtime })
    }

    /// Waits for `work` (statements of this client).
    fn wait<T>(&self, work: impl Future<Output = T>) -> T {
        self.runtime.block_on(work)
    }

    /// Runs `batch` (statements without parameters), as one round trip.
    fn batch(&self, batch: &str) -> Result<(), Error> {
        self.wait(self.client.batch_execute(batch))
    }

    /// Runs `statement`, after `begin` when it is given, both in one round trip.
    fn query_after(
        &self,
        begin: Option<&str>,
        statement: &Statement,
        params: &[&(dyn ToSql + Sync)],
    ) -> Result<Vec<Row>, Error> {
        let Some(begin) = begin else {
            return self.wait(self.client.query(statement, params));
        };
        let steps: Vec<Step<'_, Vec<Row>>> = vec![
            Box::pin(async move { self.client.batch_execute(begin).await.map(|()| Vec::new()) }),
            Box::pin(self.client.query(statement, params)),
        ];
        let mut answers = self.wait(pipeline(steps))?;
        Ok(answers.pop().unwrap_or_default())
    }

    fn is_closed(&self) -> bool {
        self.client.is_closed()
    }
}

/// One pooled connection with its prepared statements.
struct Conn {
    client: PgClient,
    tables: HashMap<Table, TableStatements>,
    /// [`prefetch_sql`] of each list of tables asked so far.
    prefetch: RefCell<HashMap<Vec<Table>, Statement>>,
}

impl Conn {
    /// Prepares every table's statements, all in one pipeline.
    fn prepare(client: PgClient) -> Result<Conn, Error> {
        let mut sql = Vec::new();
        for table in Table::ALL {
            let t = format!("weft_{}", table.name());
            let range = |lower: &str, upper: &str| {
                format!("SELECT k, v FROM {t} WHERE k {lower} $1 {upper} ORDER BY k LIMIT $2")
            };
            sql.extend([
                range(">", ""),
                range(">", "AND k < $3"),
                range(">=", ""),
                range(">=", "AND k < $3"),
                format!("SELECT v FROM {t} WHERE k = $1"),
                format!("SELECT count(*) FROM {t}"),
                format!(
                    "INSERT INTO {t} (k, v) SELECT * FROM unnest($1::bytea[], $2::bytea[]) \
                     ON CONFLICT (k) DO UPDATE SET v = EXCLUDED.v"
                ),
                format!("DELETE FROM {t} WHERE k = ANY($1::bytea[])"),
            ]);
        }
        let steps: Vec<Step<'_, Statement>> =
            sql.iter().map(|sql| Box::pin(client.client.prepare(sql)) as Step<'_, _>).collect();
        let prepared = client.wait(pipeline(steps))?;
        let mut prepared = prepared.into_iter();
        let mut next = || prepared.next().expect("one statement per SQL text");
        let mut tables = HashMap::new();
        for table in Table::ALL {
            let ranges = [[next(), next()], [next(), next()]];
            let statements = TableStatements {
                range: ranges,
                get: next(),
                count: next(),
                put_many: next(),
                remove_many: next(),
            };
            tables.insert(table, statements);
        }
        Ok(Conn { client, tables, prefetch: RefCell::new(HashMap::new()) })
    }
}

/// The pool's state: idle connections and how many exist in all.
struct Pool {
    idle: Vec<Conn>,
    open: usize,
}

/// The metadata store on a PostgreSQL database.
pub struct PgStore {
    config: Config,
    /// The URL without its password, for messages.
    shown: String,
    pool: Mutex<Pool>,
    freed: Condvar,
    max_connections: usize,
}

impl Drop for PgStore {
    /// Closes the idle connections on a plain thread: each has a runtime of its own, and
    /// dropping a runtime panics on an async runtime's worker (where the last reference to a
    /// store, meta's, may be dropped).
    fn drop(&mut self) {
        let idle = std::mem::take(&mut self.pool.get_mut().expect("pool lock").idle);
        if idle.is_empty() {
            return;
        }
        match tokio::runtime::Handle::try_current() {
            Ok(_) => {
                let closing = std::thread::spawn(move || drop(idle));
                let _ = closing.join();
            }
            Err(_) => drop(idle),
        }
    }
}

impl std::fmt::Debug for PgStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PgStore").field("url", &self.shown).finish_non_exhaustive()
    }
}

/// `url` with any password replaced by `***`.
pub fn redacted(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else { return url.to_string() };
    let (authority, tail) = match rest.find(['/', '?']) {
        Some(at) => rest.split_at(at),
        None => (rest, ""),
    };
    match authority.rsplit_once('@') {
        Some((user_info, host)) => match user_info.split_once(':') {
            Some((user, _)) => format!("{scheme}://{user}:***@{host}{tail}"),
            None => url.to_string(),
        },
        None => url.to_string(),
    }
}

/// `url` with the password of `$PGPASSWORD` when it names none (as libpq's clients do).
pub fn with_env_password(url: &str) -> String {
    let Ok(password) = std::env::var("PGPASSWORD") else { return url.to_string() };
    let Some((scheme, rest)) = url.split_once("://") else { return url.to_string() };
    let authority_end = rest.find(['/', '?']).unwrap_or(rest.len());
    match rest[..authority_end].rsplit_once('@') {
        Some((user, _)) if !user.contains(':') => {
            let encoded: String = password
                .bytes()
                .map(|b| match b {
                    b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'~' => {
                        (b as char).to_string()
                    }
                    _ => format!("%{b:02X}"),
                })
                .collect();
            format!("{scheme}://{user}:{encoded}@{}", &rest[user.len() + 1..])
        }
        _ => url.to_string(),
    }
}

/// What a failed statement means for the transaction it ran in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Failure {
    /// A serialization conflict: run the transaction again.
    Conflict,
    /// The connection is gone: give up, and drop the connection.
    Lost,
    /// Anything else: give up.
    Other,
}

fn classify(error: &Error) -> Failure {
    match error.code() {
        Some(code)
            if *code == SqlState::T_R_SERIALIZATION_FAILURE
                || *code == SqlState::T_R_DEADLOCK_DETECTED =>
        {
            Failure::Conflict
        }
        // Class 08: connection exceptions; 57: the server shutting down or restarting (an
        // administrator ended the session, a crash, a start not finished); 28: the server
        // refused us (a wrong password) — it is there, but not for us.
        Some(code) if ["08", "57", "28"].iter().any(|class| code.code().starts_with(class)) => {
            Failure::Lost
        }
        Some(_) => Failure::Other,
        None if error.is_closed() => Failure::Lost,
        // No SQLSTATE: an IO error or a protocol failure; the connection is not to be trusted.
        None => Failure::Lost,
    }
}

/// A number below `ceiling`, from a per-thread xorshift seeded by the clock and the thread
/// (for back-off jitter only).
fn random_below(ceiling: u64) -> u64 {
    use std::hash::{BuildHasher, Hasher};
    thread_local! {
        static STATE: Cell<u64> = Cell::new({
            let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
            hasher.write_u128(std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_nanos()));
            hasher.finish() | 1
        });
    }
    STATE.with(|state| {
        let mut x = state.get();
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        state.set(x);
        x % ceiling.max(1)
    })
}

/// What went wrong, in words: the server's message and SQLSTATE for an error the server
/// sent (the driver's own text is only "db error"), else the driver's error and its causes.
fn describe(error: &Error) -> String {
    if let Some(db) = error.as_db_error() {
        return format!("{} (SQLSTATE {})", db.message(), db.code().code());
    }
    let mut text = error.to_string();
    let mut source = std::error::Error::source(error);
    while let Some(cause) = source {
        text = format!("{text}: {cause}");
        source = cause.source();
    }
    text
}

impl PgStore {
    /// Connects to the database at `url` (`postgres://user:password@host:port/db`), creates
    /// or upgrades the schema, and checks its version.
    pub fn open(url: &str) -> Result<PgStore, MetaError> {
        PgStore::open_with(url, DEFAULT_MAX_CONNECTIONS)
    }

    /// [`PgStore::open`] with at most `max_connections` (at least 1) connections at once.
    pub fn open_with(url: &str, max_connections: usize) -> Result<PgStore, MetaError> {
        let shown = redacted(url);
        let mut config = Config::from_str(url).map_err(|e| MetaError::Store {
            reason: format!("{shown} is not a PostgreSQL URL: {e}"),
        })?;
        config.connect_timeout(CONNECT_TIMEOUT);
        if config.get_application_name().is_none() {
            config.application_name("weft-meta");
        }
        let store = PgStore {
            config,
            shown,
            pool: Mutex::new(Pool { idle: Vec::new(), open: 0 }),
            freed: Condvar::new(),
            max_connections: max_connections.max(1),
        };
        store.migrate()?;
        crate::kv::build_indexes(&store)?;
        Ok(store)
    }

    /// The URL it was opened with, password hidden.
    pub fn url(&self) -> &str {
        &self.shown
    }

    fn unavailable(&self, error: &Error) -> MetaError {
        MetaError::StoreUnavailable {
            reason: format!("PostgreSQL at {}: {}", self.shown, describe(error)),
        }
    }

    fn failed(&self, error: &Error) -> MetaError {
        match classify(error) {
            Failure::Lost => self.unavailable(error),
            _ => MetaError::Store {
                reason: format!("PostgreSQL at {}: {}", self.shown, describe(error)),
            },
        }
    }

    /// A new connection, not yet pooled.
    fn connect(&self) -> Result<PgClient, MetaError> {
        PgClient::connect(&self.config).map_err(|error| match error {
            Ok(error) => self.unavailable(&error),
            Err(error) => MetaError::StoreUnavailable {
                reason: format!(
                    "PostgreSQL at {}: no runtime for a connection: {error}",
                    self.shown
                ),
            },
        })
    }

    /// Applies the migrations the database lacks, each in one transaction, retried on
    /// conflicts (two replicas may start at once); refuses a database from a newer build.
    fn migrate(&self) -> Result<(), MetaError> {
        let client = self.connect()?;
        for attempt in 1..=MAX_ATTEMPTS {
            let outcome = self.migrate_once(&client);
            if outcome.is_err() {
                // Whatever failed, the transaction is not to be kept (a lost connection
                // makes this fail too, and then it does not matter).
                let _ = client.batch("ROLLBACK");
            }
            match outcome {
                Ok(()) => return Ok(()),
                Err(Ok(error)) => return Err(error),
                Err(Err(error)) => match classify(&error) {
                    Failure::Conflict if attempt < MAX_ATTEMPTS => continue,
                    // Two first starts at once both create `weft_migrations`.
                    Failure::Other
                        if error.code() == Some(&SqlState::UNIQUE_VIOLATION)
                            && attempt < MAX_ATTEMPTS =>
                    {
                        continue
                    }
                    _ => return Err(self.failed(&error)),
                },
            }
        }
        unreachable!("the last attempt returns")
    }

    /// One pass of [`PgStore::migrate`]: `Err(Ok(_))` is a refusal, `Err(Err(_))` an error of
    /// the database. The caller rolls back a pass that failed.
    fn migrate_once(&self, client: &PgClient) -> Result<(), Result<MetaError, Error>> {
        let c = &client.client;
        client.wait(async {
            c.batch_execute(
                "BEGIN ISOLATION LEVEL SERIALIZABLE;
                 CREATE TABLE IF NOT EXISTS weft_migrations (
                     version BIGINT PRIMARY KEY,
                     description TEXT NOT NULL,
                     applied_at TIMESTAMPTZ NOT NULL DEFAULT now())",
            )
            .await
            .map_err(Err)?;
            let row =
                c.query_one("SELECT max(version) FROM weft_migrations", &[]).await.map_err(Err)?;
            let found = row.get::<_, Option<i64>>(0).unwrap_or(0);
            let found = u64::try_from(found).unwrap_or(u64::MAX);
            if found > PG_SCHEMA_VERSION {
                return Err(Ok(MetaError::UnsupportedVersion {
                    table: "weft_migrations",
                    key: "version".into(),
                    found,
                    supported: PG_SCHEMA_VERSION,
                }));
            }
            for &(version, description, sql) in MIGRATIONS.iter().filter(|m| m.0 > found) {
                c.batch_execute(sql).await.map_err(Err)?;
                c.execute(
                    "INSERT INTO weft_migrations (version, description) VALUES ($1, $2)",
                    &[&(version as i64), &description],
                )
                .await
                .map_err(Err)?;
                tracing::info!(version, description, "PostgreSQL schema migrated");
            }
            c.batch_execute("COMMIT").await.map_err(Err)
        })
    }

    /// A connection from the pool (waiting while `max_connections` are in use), connecting a
    /// new one when none is idle.
    fn take(&self) -> Result<Conn, MetaError> {
        let mut pool = self.pool.lock().expect("pool lock");
        loop {
            while let Some(conn) = pool.idle.pop() {
                if !conn.client.is_closed() {
                    return Ok(conn);
                }
                pool.open -= 1;
            }
            if pool.open < self.max_connections {
                pool.open += 1;
                break;
            }
            pool = self.freed.wait(pool).expect("pool lock");
        }
        drop(pool);
        let connected = self
            .connect()
            .and_then(|client| Conn::prepare(client).map_err(|e| self.unavailable(&e)));
        connected.inspect_err(|_| self.give_back(None))
    }

    /// Closes every idle connection.
    fn forget_idle(&self) {
        let mut pool = self.pool.lock().expect("pool lock");
        let idle = std::mem::take(&mut pool.idle);
        pool.open -= idle.len();
        drop(pool);
        self.freed.notify_all();
        drop(idle);
    }

    /// Returns a connection to the pool; `None` (or a closed one) frees its place.
    fn give_back(&self, conn: Option<Conn>) {
        let mut pool = self.pool.lock().expect("pool lock");
        match conn.filter(|c| !c.client.is_closed()) {
            Some(conn) => pool.idle.push(conn),
            None => pool.open -= 1,
        }
        drop(pool);
        self.freed.notify_one();
    }

    /// Runs `op` in one transaction at `isolation`, retrying conflicts when `retry`.
    fn run<T>(
        &self,
        read_only: bool,
        op: &mut dyn FnMut(&dyn Txn) -> Result<T, MetaError>,
    ) -> Result<T, MetaError> {
        let (mut attempt, mut reconnects) = (0, 0);
        loop {
            attempt += 1;
            let mut conn = self.take()?;
            let outcome = self.attempt(&mut conn, read_only, op);
            let lost =
                matches!(outcome, Err(Attempt::Failed(Failure::Lost, _) | Attempt::CommitLost(_)));
            self.give_back((!lost).then_some(conn));
            if lost {
                // The server went away (a restart, a failover): the idle connections are
                // to the server that was, so none is tried again.
                self.forget_idle();
            }
            match outcome {
                Ok(done) => return Ok(done),
                Err(Attempt::Refused(error)) => return Err(error),
                // Lost before its COMMIT was sent, the transaction did not happen: run it
                // again on a new connection (which fails at once if the server is down).
                Err(Attempt::Failed(Failure::Lost, _)) if reconnects < MAX_RECONNECTS => {
                    reconnects += 1;
                }
                Err(Attempt::CommitLost(error)) => return Err(error),
                Err(Attempt::Failed(Failure::Conflict, _)) if attempt < MAX_ATTEMPTS => {
                    // Back off a random while, up to twice as long each time (from 0.5 ms,
                    // at most 64 ms), so the transactions that conflicted spread out.
                    let ceiling_us = 500u64 << attempt.min(7);
                    std::thread::sleep(Duration::from_micros(random_below(ceiling_us)));
                }
                Err(Attempt::Failed(Failure::Conflict, error)) => {
                    return Err(MetaError::Store {
                        reason: format!(
                            "PostgreSQL at {}: gave up after {attempt} serialization conflicts \
                             in a row (the last: {error})",
                            self.shown
                        ),
                    })
                }
                Err(Attempt::Failed(_, error)) => return Err(error),
            }
        }
    }

    fn attempt<T>(
        &self,
        conn: &mut Conn,
        read_only: bool,
        op: &mut dyn FnMut(&dyn Txn) -> Result<T, MetaError>,
    ) -> Result<T, Attempt> {
        let Conn { client, tables, prefetch } = conn;
        let begin = match read_only {
            true => "BEGIN ISOLATION LEVEL REPEATABLE READ, READ ONLY",
            false => "BEGIN ISOLATION LEVEL SERIALIZABLE",
        };
        // BEGIN goes with the transaction's first statement (`PgTxn::begun`).
        let pg = PgTxn {
            store: self,
            client,
            tables,
            prefetch,
            begin,
            begun: Cell::new(false),
            failure: Cell::new(None),
            local: (!read_only).then(|| RefCell::new(Overlay::default())),
            seen: RefCell::new(HashMap::new()),
        };
        let done = op(&pg);
        let PgTxn { client, failure, local, begun, .. } = pg;
        let begun = begun.get();
        if let Some((kind, error)) = failure.into_inner() {
            // Whatever `op` made of it, a failed statement failed the transaction.
            return Err(self.rolled_back(client, Attempt::Failed(kind, error)));
        }
        match done {
            Ok(done) => {
                let local = local.map(RefCell::into_inner).unwrap_or_default();
                self.commit(client, tables, &local, (!begun).then_some(begin)).map_err(
                    |failed| match failed {
                        // A write's COMMIT may have happened; a read-only one changed nothing.
                        Attempt::Failed(Failure::Lost, error) if !read_only => {
                            Attempt::CommitLost(error)
                        }
                        other => other,
                    },
                )?;
                Ok(done)
            }
            Err(error) if !begun => Err(Attempt::Refused(error)),
            Err(error) => Err(self.rolled_back(client, Attempt::Refused(error))),
        }
    }

    /// Rolls the transaction back and returns `outcome`, or the connection's failure if the
    /// rollback failed (the connection is then not to be used again).
    fn rolled_back(&self, client: &PgClient, outcome: Attempt) -> Attempt {
        match client.batch("ROLLBACK") {
            Ok(()) => outcome,
            Err(e) => Attempt::Failed(Failure::Lost, self.failed(&e)),
        }
    }

    /// Sends the transaction's own changes and its COMMIT in one round trip: a pipeline of
    /// the prepared many-row statements (one per table and kind of change) and COMMIT.
    /// (Measured against one batch of literal SQL with the changes as hex: 1,166–1,690
    /// against 812–825 begin+commits a second, the literals' parsing being the difference.)
    /// `begin`: the transaction's BEGIN, when no statement has sent it yet (a transaction
    /// that read nothing and changed nothing then costs no round trip at all).
    fn commit(
        &self,
        client: &PgClient,
        tables: &HashMap<Table, TableStatements>,
        local: &Overlay,
        begin: Option<&str>,
    ) -> Result<(), Attempt> {
        if begin.is_some() && local.is_empty() {
            return Ok(());
        }
        let c = &client.client;
        let columns: Vec<_> = Table::ALL.iter().map(|&t| (t, columns(local, t))).collect();
        let mut steps: Vec<Step<'_, u64>> = Vec::new();
        if let Some(begin) = begin {
            steps.push(Box::pin(async move { c.batch_execute(begin).await.map(|()| 0) }));
        }
        for (table, (keys, values, removed)) in &columns {
            let statements = &tables[table];
            if !keys.is_empty() {
                let put = &statements.put_many;
                steps.push(Box::pin(async move { c.execute(put, &[keys, values]).await }));
            }
            if !removed.is_empty() {
                let remove = &statements.remove_many;
                steps.push(Box::pin(async move { c.execute(remove, &[removed]).await }));
            }
        }
        steps.push(Box::pin(async move { c.batch_execute("COMMIT").await.map(|()| 0) }));
        let sent = client.wait(pipeline(steps)).map(drop);
        // A failed statement left the transaction open and failed (a failed COMMIT ended it:
        // the ROLLBACK then only warns).
        sent.map_err(|e| self.rolled_back(client, Attempt::Failed(classify(&e), self.failed(&e))))
    }
}

/// Keys put, their values, and keys removed.
type Columns<'a> = (Vec<&'a [u8]>, Vec<&'a [u8]>, Vec<&'a [u8]>);

/// `local`'s changes of `table` as statement parameters: the keys and values put, and the
/// keys removed.
fn columns(local: &Overlay, table: Table) -> Columns<'_> {
    let (mut keys, mut values, mut removed) = (Vec::new(), Vec::new(), Vec::new());
    for (key, value) in local.encoded_changes_of(table) {
        match value {
            Some(value) => {
                keys.push(key);
                values.push(value);
            }
            None => removed.push(key),
        }
    }
    (keys, values, removed)
}

/// How one attempt of a transaction ended, when not with a commit.
enum Attempt {
    /// `op` refused (a `MetaError` of the rules): nothing to retry.
    Refused(MetaError),
    /// A statement or the commit failed.
    Failed(Failure, MetaError),
    /// The connection was lost while a write's COMMIT was on its way: it may have happened,
    /// so it is not run again here.
    CommitLost(MetaError),
}

/// The server's answer for one key: its value, or absent.
type Seen = Option<Vec<u8>>;

/// One transaction of a [`PgStore`]: its reads go to the server (each key once), its
/// changes stay here until the commit sends them (`overlay`).
struct PgTxn<'c> {
    store: &'c PgStore,
    client: &'c PgClient,
    tables: &'c HashMap<Table, TableStatements>,
    prefetch: &'c RefCell<HashMap<Vec<Table>, Statement>>,
    /// The transaction's BEGIN statement.
    begin: &'static str,
    /// Whether BEGIN was sent: in one pipeline with the first statement ([`PgTxn::query`]),
    /// or with the changes and COMMIT when the transaction read nothing.
    begun: Cell<bool>,
    /// The first statement that failed, if one did.
    failure: Cell<Option<(Failure, MetaError)>>,
    /// A write transaction's own changes (`None` in a read-only one).
    local: Option<RefCell<Overlay>>,
    /// The server's answers so far, by table and encoded key: the snapshot does not change
    /// under the transaction, and its own changes are in `local`.
    seen: RefCell<HashMap<(Table, Vec<u8>), Seen>>,
}

impl PgTxn<'_> {
    fn statements(&self, table: Table) -> &TableStatements {
        &self.tables[&table]
    }

    /// Notes a failed statement (the transaction is lost with it) and returns its error.
    fn fail(&self, error: Error) -> MetaError {
        let kind = classify(&error);
        let meta_error = self.store.failed(&error);
        let earlier = self.failure.take();
        self.failure.set(Some(earlier.unwrap_or((kind, meta_error.clone()))));
        meta_error
    }

    fn check_key(&self, table: Table, key: &Key) -> Result<Vec<u8>, MetaError> {
        key.fitting(table)?;
        Ok(key.encode())
    }

    /// Runs `statement`; the transaction's first statement takes BEGIN with it, in the same
    /// round trip.
    fn query(
        &self,
        statement: &Statement,
        params: &[&(dyn ToSql + Sync)],
    ) -> Result<Vec<Row>, MetaError> {
        let begin = (!self.begun.replace(true)).then_some(self.begin);
        self.client.query_after(begin, statement, params).map_err(|e| self.fail(e))
    }

    /// The transaction's own changes, or an error in a read-only one.
    fn local(&self) -> Result<std::cell::RefMut<'_, Overlay>, MetaError> {
        match &self.local {
            Some(local) => Ok(local.borrow_mut()),
            None => Err(MetaError::Store { reason: "a write in a read-only transaction".into() }),
        }
    }

    /// The committed value of `key` in the transaction's snapshot (its own changes aside).
    fn server_get(&self, table: Table, key: &Key) -> Result<Option<Vec<u8>>, MetaError> {
        let k = self.check_key(table, key)?;
        if let Some(seen) = self.seen.borrow().get(&(table, k.clone())) {
            return Ok(seen.clone());
        }
        let rows = self.query(&self.statements(table).get, &[&k])?;
        let value: Option<Vec<u8>> = rows.first().map(|row| row.get(0));
        self.seen.borrow_mut().insert((table, k), value.clone());
        Ok(value)
    }

    /// Runs `with` on the transaction's own changes (none in a read-only one).
    fn layers<T>(&self, with: impl FnOnce(Layers<'_>) -> T) -> T {
        match &self.local {
            Some(local) => {
                let local = local.borrow();
                with(Layers(&[&*local]))
            }
            None => with(Layers(&[])),
        }
    }
}

fn limit_param(limit: usize) -> i64 {
    i64::try_from(limit).unwrap_or(i64::MAX)
}

impl Txn for PgTxn<'_> {
    fn get(&self, table: Table, key: &Key) -> Result<Option<Vec<u8>>, MetaError> {
        let own = self.layers(|layers| match layers.get(table, key) {
            Found::Below => None,
            Found::Removed => Some(None),
            Found::Value(value) => Some(Some(value.to_vec())),
        });
        match own {
            Some(own) => Ok(own),
            None => self.server_get(table, key),
        }
    }

    fn put(&self, table: Table, key: &Key, value: &[u8]) -> Result<(), MetaError> {
        self.check_key(table, key)?;
        self.local()?.set(table, key, Some(value.to_vec()));
        Ok(())
    }

    fn remove(&self, table: Table, key: &Key) -> Result<Option<Vec<u8>>, MetaError> {
        self.local()?;
        let old = self.get(table, key)?;
        if old.is_some() {
            self.local()?.set(table, key, None);
        }
        Ok(old)
    }

    /// The keys not read yet, in one statement; their answers go where reads look first.
    fn prefetch(&self, keys: &[(Table, Key)]) -> Result<(), MetaError> {
        let mut wanted: Vec<(Table, Vec<u8>)> = Vec::new();
        {
            let seen = self.seen.borrow();
            for (table, key) in keys {
                let k = self.check_key(*table, key)?;
                let asked = (*table, k);
                if !seen.contains_key(&asked) && !wanted.contains(&asked) {
                    wanted.push(asked);
                }
            }
        }
        if wanted.len() < 2 {
            return Ok(()); // One key is one round trip either way.
        }
        let tables: Vec<Table> = wanted.iter().map(|(table, _)| *table).collect();
        let statement = self.prefetch.borrow().get(&tables).cloned();
        let statement = match statement {
            Some(statement) => statement,
            None => {
                let sql = prefetch_sql(&tables);
                let prepared = self.client.wait(self.client.client.prepare(&sql));
                let prepared = prepared.map_err(|e| self.fail(e))?;
                self.prefetch.borrow_mut().insert(tables, prepared.clone());
                prepared
            }
        };
        let params: Vec<&(dyn ToSql + Sync)> =
            wanted.iter().map(|(_, k)| k as &(dyn ToSql + Sync)).collect();
        let rows = self.query(&statement, &params)?;
        let mut found: Vec<Option<Vec<u8>>> = vec![None; wanted.len()];
        for row in rows {
            let at: i32 = row.get(0);
            let slot = usize::try_from(at).ok().and_then(|i| found.get_mut(i));
            let slot = slot.ok_or_else(|| MetaError::Store {
                reason: format!("PostgreSQL answered a prefetch with row {at}"),
            })?;
            *slot = Some(row.get(1));
        }
        self.seen.borrow_mut().extend(wanted.into_iter().zip(found));
        Ok(())
    }

    /// Blind removals (`overlay`): no read of what they remove.
    fn remove_many(&self, table: Table, keys: &[Key]) -> Result<(), MetaError> {
        let mut local = self.local()?;
        for key in keys {
            self.check_key(table, key)?;
            local.set(table, key, None);
        }
        Ok(())
    }

    fn range(
        &self,
        table: Table,
        lower: Bound<&Key>,
        end: End<'_>,
        limit: usize,
    ) -> Result<Vec<Entry>, MetaError> {
        if limit == 0 {
            return Ok(Vec::new());
        }
        // Each own change hides at most one committed entry: that many more make up for it.
        let own = self.layers(|layers| layers.0.iter().map(|l| l.changes_in(table)).sum());
        let rows = self.server_range(table, lower, end, limit.saturating_add(own))?;
        if own == 0 {
            return Ok(rows);
        }
        self.layers(|layers| layers.range(table, rows.into_iter().map(Ok), lower, end, limit))
    }

    fn count(&self, table: Table) -> Result<u64, MetaError> {
        let rows = self.query(&self.statements(table).count, &[])?;
        let counted = rows.first().map_or(0, |row| row.get::<_, i64>(0));
        let committed = u64::try_from(counted).unwrap_or(0);
        let delta = self.layers(|layers| {
            layers.count_delta(table, |key| Ok(self.server_get(table, key)?.is_some()))
        })?;
        Ok(committed.checked_add_signed(delta).unwrap_or(0))
    }
}

impl PgTxn<'_> {
    /// The committed entries of a range, in the transaction's snapshot.
    fn server_range(
        &self,
        table: Table,
        lower: Bound<&Key>,
        end: End<'_>,
        limit: usize,
    ) -> Result<Vec<Entry>, MetaError> {
        let (inclusive, from) = match lower {
            Bound::Included(key) => (true, self.check_key(table, key)?),
            Bound::Excluded(key) => (false, self.check_key(table, key)?),
            Bound::Unbounded => (true, Vec::new()),
        };
        let (from, upper) = match end {
            End::Open => (from, None),
            End::Before(key) => (from, Some(self.check_key(table, key)?)),
            // Keys starting with the prefix are exactly [prefix, prefix_end).
            End::Prefix(prefix) => {
                let (inclusive, from) = match from.as_slice() < prefix {
                    true => (true, prefix.to_vec()),
                    false => (inclusive, from),
                };
                return self.range_rows(table, inclusive, from, prefix_end(prefix), limit);
            }
        };
        self.range_rows(table, inclusive, from, upper, limit)
    }

    fn range_rows(
        &self,
        table: Table,
        inclusive: bool,
        from: Vec<u8>,
        upper: Option<Vec<u8>>,
        limit: usize,
    ) -> Result<Vec<Entry>, MetaError> {
        let statements = &self.statements(table).range[usize::from(inclusive)];
        let limit = limit_param(limit);
        let rows = match &upper {
            Some(upper) => self.query(&statements[1], &[&from, &limit, upper])?,
            None => self.query(&statements[0], &[&from, &limit])?,
        };
        rows.iter()
            .map(|row| {
                let k: Vec<u8> = row.get(0);
                Ok((Key::decode(table, &k)?, row.get(1)))
            })
            .collect()
    }
}

impl KvBackend for PgStore {
    fn read<T>(
        &self,
        op: &mut dyn FnMut(&dyn Txn) -> Result<T, MetaError>,
    ) -> Result<T, MetaError> {
        self.run(true, op)
    }

    fn write<T>(
        &self,
        op: &mut dyn FnMut(&dyn Txn) -> Result<T, MetaError>,
    ) -> Result<T, MetaError> {
        self.run(false, op)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn passwords_never_show() {
        assert_eq!(
            redacted("postgres://weft:s3cret@127.0.0.1:5432/weft"),
            "postgres://weft:***@127.0.0.1:5432/weft"
        );
        assert_eq!(redacted("postgres://weft:s3cret@host"), "postgres://weft:***@host");
        assert_eq!(
            redacted("postgres://weft@host/db?sslmode=disable"),
            "postgres://weft@host/db?sslmode=disable"
        );
        assert_eq!(redacted("postgres://a:b:c@h/d"), "postgres://a:***@h/d");
        let refused = PgStore::open("postgres://weft:s3cret@127.0.0.1:1/weft").unwrap_err();
        assert!(!refused.to_string().contains("s3cret"), "{refused}");
        assert!(matches!(refused, MetaError::StoreUnavailable { .. }), "{refused}");
    }
}
