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
//! - A lost connection (the server restarted, the network broke) fails the operation with
//!   [`MetaError::StoreUnavailable`] and is not retried here: a COMMIT whose answer was lost
//!   may or may not have happened, and only the caller knows whether to ask again. Broken
//!   connections leave the pool; the next operation connects anew.
//! - The URL's password never appears in an error, a log line or `Debug` output.
//! - Connections are pooled, at most `max_connections` at once; an operation waits for one.
//! - Dropping a store closes its connections off any async runtime (see `Drop`).

use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::ops::Bound;
use std::str::FromStr;
use std::sync::{Condvar, Mutex};
use std::time::Duration;

use postgres::error::SqlState;
use postgres::{Client, IsolationLevel, NoTls, Statement};

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

/// One pooled connection with its prepared statements.
struct Conn {
    client: Client,
    tables: HashMap<Table, TableStatements>,
    /// [`prefetch_sql`] of each list of tables asked so far.
    prefetch: RefCell<HashMap<Vec<Table>, Statement>>,
}

impl Conn {
    fn prepare(mut client: Client) -> Result<Conn, postgres::Error> {
        let mut tables = HashMap::new();
        for table in Table::ALL {
            let t = format!("weft_{}", table.name());
            let mut prepare = |sql: String| client.prepare(&sql);
            let range = |lower: &str, upper: &str| {
                format!("SELECT k, v FROM {t} WHERE k {lower} $1 {upper} ORDER BY k LIMIT $2")
            };
            let ranges = [
                [prepare(range(">", ""))?, prepare(range(">", "AND k < $3"))?],
                [prepare(range(">=", ""))?, prepare(range(">=", "AND k < $3"))?],
            ];
            let statements = TableStatements {
                get: prepare(format!("SELECT v FROM {t} WHERE k = $1"))?,
                range: ranges,
                count: prepare(format!("SELECT count(*) FROM {t}"))?,
                put_many: prepare(format!(
                    "INSERT INTO {t} (k, v) SELECT * FROM unnest($1::bytea[], $2::bytea[]) \
                     ON CONFLICT (k) DO UPDATE SET v = EXCLUDED.v"
                ))?,
                remove_many: prepare(format!("DELETE FROM {t} WHERE k = ANY($1::bytea[])"))?,
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
    config: postgres::Config,
    /// The URL without its password, for messages.
    shown: String,
    pool: Mutex<Pool>,
    freed: Condvar,
    max_connections: usize,
}

impl Drop for PgStore {
    /// Closes the idle connections on a plain thread: the driver's blocking client closes
    /// by running a runtime of its own, which panics on an async runtime's worker (where the
    /// last reference to a store, meta's, may be dropped).
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

fn classify(error: &postgres::Error) -> Failure {
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
fn describe(error: &postgres::Error) -> String {
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
        let mut config = postgres::Config::from_str(url).map_err(|e| MetaError::Store {
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

    fn unavailable(&self, error: &postgres::Error) -> MetaError {
        MetaError::StoreUnavailable {
            reason: format!("PostgreSQL at {}: {}", self.shown, describe(error)),
        }
    }

    fn failed(&self, error: &postgres::Error) -> MetaError {
        match classify(error) {
            Failure::Lost => self.unavailable(error),
            _ => MetaError::Store {
                reason: format!("PostgreSQL at {}: {}", self.shown, describe(error)),
            },
        }
    }

    /// Applies the migrations the database lacks, each in one transaction, retried on
    /// conflicts (two replicas may start at once); refuses a database from a newer build.
    fn migrate(&self) -> Result<(), MetaError> {
        let mut client = self.config.connect(NoTls).map_err(|e| self.unavailable(&e))?;
        for attempt in 1..=MAX_ATTEMPTS {
            match self.migrate_once(&mut client) {
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
    /// the database.
    fn migrate_once(&self, client: &mut Client) -> Result<(), Result<MetaError, postgres::Error>> {
        let mut txn = client
            .build_transaction()
            .isolation_level(IsolationLevel::Serializable)
            .start()
            .map_err(Err)?;
        txn.batch_execute(
            "CREATE TABLE IF NOT EXISTS weft_migrations (
                 version BIGINT PRIMARY KEY,
                 description TEXT NOT NULL,
                 applied_at TIMESTAMPTZ NOT NULL DEFAULT now())",
        )
        .map_err(Err)?;
        let row = txn.query_one("SELECT max(version) FROM weft_migrations", &[]).map_err(Err)?;
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
            txn.batch_execute(sql).map_err(Err)?;
            txn.execute(
                "INSERT INTO weft_migrations (version, description) VALUES ($1, $2)",
                &[&(version as i64), &description],
            )
            .map_err(Err)?;
            tracing::info!(version, description, "PostgreSQL schema migrated");
        }
        txn.commit().map_err(Err)
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
        let connected = self.config.connect(NoTls).and_then(Conn::prepare);
        connected.map_err(|e| {
            self.give_back(None);
            self.unavailable(&e)
        })
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
        let mut attempt = 0;
        loop {
            attempt += 1;
            let mut conn = self.take()?;
            let outcome = self.attempt(&mut conn, read_only, op);
            let lost = matches!(outcome, Err(Attempt::Failed(Failure::Lost, _)));
            self.give_back((!lost).then_some(conn));
            match outcome {
                Ok(done) => return Ok(done),
                Err(Attempt::Refused(error)) => return Err(error),
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
            client: RefCell::new(client),
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
        let (client, begun) = (client.into_inner(), begun.get());
        if let Some((kind, error)) = failure.into_inner() {
            // Whatever `op` made of it, a failed statement failed the transaction.
            return Err(self.rolled_back(client, Attempt::Failed(kind, error)));
        }
        match done {
            Ok(done) => {
                let local = local.map(RefCell::into_inner).unwrap_or_default();
                self.commit(client, tables, &local, (!begun).then_some(begin))?;
                Ok(done)
            }
            Err(error) if !begun => Err(Attempt::Refused(error)),
            Err(error) => Err(self.rolled_back(client, Attempt::Refused(error))),
        }
    }

    /// Rolls the transaction back and returns `outcome`, or the connection's failure if the
    /// rollback failed (the connection is then not to be used again).
    fn rolled_back(&self, client: &mut Client, outcome: Attempt) -> Attempt {
        match client.batch_execute("ROLLBACK") {
            Ok(()) => outcome,
            Err(e) => Attempt::Failed(Failure::Lost, self.failed(&e)),
        }
    }

    /// Sends the transaction's own changes and its COMMIT: in one round trip (one batch of
    /// statements with the changes as hex literals) when they are small, else through the
    /// prepared many-row statements first.
    /// `begin`: the transaction's BEGIN, when no statement has sent it yet (a transaction
    /// that read nothing and changed nothing then costs no round trip at all).
    fn commit(
        &self,
        client: &mut Client,
        tables: &HashMap<Table, TableStatements>,
        local: &Overlay,
        begin: Option<&str>,
    ) -> Result<(), Attempt> {
        if begin.is_some() && local.is_empty() {
            return Ok(());
        }
        let fail = |client: &mut Client, e: postgres::Error| {
            // A failed statement of the batch left the transaction open and failed (a failed
            // COMMIT ended it: the ROLLBACK then only warns).
            let failed = Attempt::Failed(classify(&e), self.failed(&e));
            self.rolled_back(client, failed)
        };
        let begin = begin.map(|begin| format!("{begin}; ")).unwrap_or_default();
        let sql = match inline_changes(local) {
            Some(changes) => format!("{begin}{changes}COMMIT"),
            None => {
                if !begin.is_empty() {
                    client.batch_execute(&begin).map_err(|e| fail(client, e))?;
                }
                for table in Table::ALL {
                    let (keys, values, removed) = columns(local, table);
                    let statements = &tables[&table];
                    if !keys.is_empty() {
                        client
                            .execute(&statements.put_many, &[&keys, &values])
                            .map_err(|e| fail(client, e))?;
                    }
                    if !removed.is_empty() {
                        client
                            .execute(&statements.remove_many, &[&removed])
                            .map_err(|e| fail(client, e))?;
                    }
                }
                "COMMIT".to_owned()
            }
        };
        client.batch_execute(&sql).map_err(|e| fail(client, e))
    }
}

/// Appends `bytes` as a bytea literal made of hex digits only (`decode('…', 'hex')`),
/// whatever the bytes or the server's string settings.
fn hex_literal(sql: &mut String, bytes: &[u8]) {
    use std::fmt::Write;
    sql.push_str("decode('");
    bytes.iter().for_each(|b| write!(sql, "{b:02x}").expect("a String takes writes"));
    sql.push_str("', 'hex')");
}

/// The most bytes of changes sent as literals with the COMMIT; more go as parameters.
const INLINE_CHANGE_BYTES: usize = 64 << 10;

/// The statements making `local`'s changes, keys and values as hex literals (`decode('…',
/// 'hex')`: hex digits only, whatever the bytes or the server's string settings); `None`
/// when they exceed [`INLINE_CHANGE_BYTES`].
fn inline_changes(local: &Overlay) -> Option<String> {
    if local.changed_bytes() > INLINE_CHANGE_BYTES {
        return None;
    }
    let mut sql = String::new();
    for table in Table::ALL {
        let name = table.name();
        let (puts, removes): (Vec<_>, Vec<_>) =
            local.encoded_changes_of(table).partition(|(_, value)| value.is_some());
        for (i, (key, value)) in puts.iter().enumerate() {
            match i {
                0 => sql.push_str(&format!("INSERT INTO weft_{name} (k, v) VALUES (")),
                _ => sql.push_str(", ("),
            }
            hex_literal(&mut sql, key);
            sql.push_str(", ");
            hex_literal(&mut sql, value.unwrap_or_default());
            sql.push(')');
        }
        if !puts.is_empty() {
            sql.push_str(" ON CONFLICT (k) DO UPDATE SET v = EXCLUDED.v; ");
        }
        for (i, (key, _)) in removes.iter().enumerate() {
            match i {
                0 => sql.push_str(&format!("DELETE FROM weft_{name} WHERE k IN (")),
                _ => sql.push_str(", "),
            }
            hex_literal(&mut sql, key);
        }
        if !removes.is_empty() {
            sql.push_str("); ");
        }
    }
    Some(sql)
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
}

/// The server's answer for one key: its value, or absent.
type Seen = Option<Vec<u8>>;

/// One transaction of a [`PgStore`]: its reads go to the server (each key once), its
/// changes stay here until the commit sends them (`overlay`).
struct PgTxn<'c> {
    store: &'c PgStore,
    client: RefCell<&'c mut Client>,
    tables: &'c HashMap<Table, TableStatements>,
    prefetch: &'c RefCell<HashMap<Vec<Table>, Statement>>,
    /// The transaction's BEGIN statement.
    begin: &'static str,
    /// Whether BEGIN was sent: before the first statement ([`PgTxn::begun`]), or with the
    /// changes and COMMIT when the transaction read nothing. (Sending it with the first reads
    /// as one batch of literal SQL saved the round trip but cost more in parsing: measured
    /// 780 against 985 begin+commits a second.)
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
    fn fail(&self, error: postgres::Error) -> MetaError {
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

    /// Sends BEGIN unless it was sent (before the transaction's first statement).
    fn begun(&self) -> Result<(), MetaError> {
        if !self.begun.replace(true) {
            self.client.borrow_mut().batch_execute(self.begin).map_err(|e| self.fail(e))?;
        }
        Ok(())
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
        self.begun()?;
        let rows = self
            .client
            .borrow_mut()
            .query(&self.statements(table).get, &[&k])
            .map_err(|e| self.fail(e))?;
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
        self.begun()?;
        let tables: Vec<Table> = wanted.iter().map(|(table, _)| *table).collect();
        let statement = self.prefetch.borrow().get(&tables).cloned();
        let statement = match statement {
            Some(statement) => statement,
            None => {
                let sql = prefetch_sql(&tables);
                let prepared = self.client.borrow_mut().prepare(&sql).map_err(|e| self.fail(e))?;
                self.prefetch.borrow_mut().insert(tables, prepared.clone());
                prepared
            }
        };
        let params: Vec<&(dyn postgres::types::ToSql + Sync)> =
            wanted.iter().map(|(_, k)| k as &(dyn postgres::types::ToSql + Sync)).collect();
        let rows = self.client.borrow_mut().query(&statement, &params).map_err(|e| self.fail(e))?;
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
        self.begun()?;
        let row = self
            .client
            .borrow_mut()
            .query_one(&self.statements(table).count, &[])
            .map_err(|e| self.fail(e))?;
        let committed = u64::try_from(row.get::<_, i64>(0)).unwrap_or(0);
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
        self.begun()?;
        let statements = &self.statements(table).range[usize::from(inclusive)];
        let limit = limit_param(limit);
        let rows = match &upper {
            Some(upper) => self.client.borrow_mut().query(&statements[1], &[&from, &limit, upper]),
            None => self.client.borrow_mut().query(&statements[0], &[&from, &limit]),
        }
        .map_err(|e| self.fail(e))?;
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

    /// The bytes of a hex string (as `encode(…, 'hex')` answers).
    fn from_hex(text: &str) -> Option<Vec<u8>> {
        if !text.len().is_multiple_of(2) {
            return None;
        }
        (0..text.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(text.get(i..i + 2)?, 16).ok())
            .collect()
    }

    #[test]
    fn hex_literals_carry_any_bytes_and_read_back() {
        let bytes: Vec<u8> = (0..=255).collect();
        let mut sql = String::new();
        hex_literal(&mut sql, &bytes);
        let digits = sql.strip_prefix("decode('").unwrap().strip_suffix("', 'hex')").unwrap();
        assert!(digits.bytes().all(|b| b.is_ascii_hexdigit()));
        assert_eq!(from_hex(digits).unwrap(), bytes);
        assert_eq!(from_hex("0"), None);
        assert_eq!(from_hex("zz"), None);
        assert_eq!(from_hex(""), Some(Vec::new()));
    }

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
