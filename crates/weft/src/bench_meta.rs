//! `weft bench meta`: what metadata operations cost as the number of objects grows, on each
//! durable store (redb, PostgreSQL), measured on the store itself, in this process.
//!
//! Invariants:
//! - Every store starts empty and is filled to N committed objects by a bulk load
//!   (`weft_meta::kv::load_objects`: the same records, index entries and totals a commit
//!   keeps, many per transaction), each object placed by meta's placement on a model cluster
//!   of `--nodes` × `--disks-per-node` disks. The timed operations then run one at a time,
//!   as one client: `begin_commit` (a begin and its commit of a new object, one op),
//!   `get`, `list` (a page of 1000 keys from a random start) and `plan_disk_repair` (every
//!   unit of one failed disk, read from the placed-units index), beside
//!   `plan_disk_repair_scan` (the same units found by walking every object, as meta's
//!   detector did before the index). The two plans must find the same units, or the bench
//!   fails.
//! - PostgreSQL is a throwaway server of the bench's own (started from the installed server
//!   programs, removed afterwards), one database per N. Durability is each store's default
//!   (fsync at commit), as meta runs them. After its load PostgreSQL is vacuumed, analysed
//!   and checkpointed before anything is timed, so that the load's aftermath (autovacuum of
//!   a million new rows, a checkpoint) is not measured as the operations' cost.
//! - `bytes_per_object` is the store's size on disk (redb's file, PostgreSQL's database)
//!   divided by N.
//! - `--plot` draws the rows printed, nothing else: per-op time is `seconds / ops`, a plan's
//!   is `seconds / units` (both plans of one N find the same units).

use std::time::Instant;

use clap::Args;
use rand::{Rng, SeedableRng};
use serde::Serialize;
use weft_layout::{place, DiskLocation, FailureDomain, StripedLayout, Topology};
use weft_meta::pg_local::{Lifetime, LocalPostgres};
use weft_meta::{MetaStore, ObjectRecord, ObjectState, PgStore, PlacedUnit, RedbStore};

use crate::rows::JsonRows;
use crate::{cli_error, CliError};

#[derive(Debug, Args)]
pub struct MetaBenchArgs {
    /// Numbers of committed objects to measure at (each a fresh store).
    #[arg(long, value_delimiter = ',', default_value = "10000,100000")]
    pub objects: Vec<u64>,
    /// Stores to measure: redb, postgres.
    #[arg(long, value_delimiter = ',', default_value = "redb,postgres")]
    pub store: Vec<String>,
    /// Operations timed of each kind (begin_commit, get, list) at each N.
    #[arg(long, default_value_t = 1000)]
    pub ops: usize,
    /// Nodes of the model cluster objects are placed on.
    #[arg(long, default_value_t = 12)]
    pub nodes: u32,
    /// Disks per node of the model cluster.
    #[arg(long, default_value_t = 4)]
    pub disks_per_node: u32,
    /// Where the stores live [default: a temporary directory, removed afterwards].
    #[arg(long)]
    pub dir: Option<std::path::PathBuf>,
    /// Print the rows as one JSON array.
    #[arg(long)]
    pub json: bool,
    /// Print each row as a JSON line as soon as it is measured.
    #[arg(long)]
    pub json_lines: bool,
    /// Also draw the cost of each operation against N as a line chart (SVG).
    #[arg(long, value_name = "FILE.svg")]
    pub plot: Option<std::path::PathBuf>,
}

#[derive(Debug, Serialize)]
struct Row {
    op: &'static str,
    store: String,
    objects: u64,
    ops: u64,
    ops_per_sec: f64,
    seconds: f64,
    /// Units the plan found (plan rows).
    #[serde(skip_serializing_if = "Option::is_none")]
    units: Option<u64>,
    bytes_per_object: f64,
}

/// The policy objects are stored with: weft's default (rs(6,3), stripe width 2, 1 MiB
/// cells, 8 MiB blocks), objects of one group (48 MiB: 9 units).
fn policy() -> StripedLayout {
    StripedLayout {
        code: "rs(6,3)".parse().expect("a valid code"),
        stripe_width: 2,
        cell_bytes: 1 << 20,
        block_bytes: 8 << 20,
    }
}

const OBJECT_BYTES: u64 = 48 << 20;
const BUCKET: &str = "bench-meta";
const LOAD_BATCH: u64 = 2000;

fn key_of(i: u64) -> String {
    format!("obj/{i:010}")
}

fn record(i: u64, topology: &Topology) -> Result<ObjectRecord, CliError> {
    let placement = place(&policy(), OBJECT_BYTES, topology, i, FailureDomain::Node)
        .map_err(|e| cli_error!("placing object {i}: {e}"))?;
    Ok(ObjectRecord {
        bucket: BUCKET.into(),
        key: key_of(i),
        placement,
        state: ObjectState::Committed,
        created_ms: 1,
        generation: i + 1,
        parity_generation: 0,
        digests: Default::default(),
        raidp: None,
        geometric: None,
        owners: Vec::new(),
        attributes: None,
        versioned: false,
        delete_marker: false,
        lock: Default::default(),
    })
}

/// A store being measured, and how to learn its size on disk.
enum Opened {
    Redb(RedbStore, std::path::PathBuf),
    Postgres(Box<PgStore>, String),
}

impl Opened {
    fn store(&self) -> &dyn MetaStore {
        match self {
            Opened::Redb(store, _) => store,
            Opened::Postgres(store, _) => store.as_ref(),
        }
    }

    fn load(&self, records: &[ObjectRecord]) -> Result<(), CliError> {
        match self {
            Opened::Redb(store, _) => weft_meta::kv::load_objects(store, records)?,
            Opened::Postgres(store, _) => weft_meta::kv::load_objects(store.as_ref(), records)?,
        }
        Ok(())
    }

    /// After a bulk load: PostgreSQL's own upkeep of the load (statistics, vacuum, a
    /// checkpoint) done now, so that its autovacuum and checkpointer do not run inside the
    /// timed operations. redb has none to do (its load ends with a checkpoint of its own).
    fn settle(&self) -> Result<(), CliError> {
        let Opened::Postgres(_, url) = self else { return Ok(()) };
        let mut client = postgres::Client::connect(url, postgres::NoTls)
            .map_err(|e| cli_error!("settling PostgreSQL after the load: {e}"))?;
        // One statement at a time: VACUUM refuses to run inside a multi-statement batch.
        for statement in ["VACUUM (ANALYZE)", "CHECKPOINT"] {
            client.batch_execute(statement).map_err(|e| {
                let why =
                    e.as_db_error().map_or_else(|| e.to_string(), |db| db.message().to_owned());
                cli_error!("settling PostgreSQL after the load ({statement}): {why}")
            })?;
        }
        Ok(())
    }

    fn bytes_on_disk(&self) -> Result<u64, CliError> {
        match self {
            Opened::Redb(_, path) => Ok(std::fs::metadata(path).map(|m| m.len()).unwrap_or(0)),
            Opened::Postgres(_, url) => {
                let mut client = postgres::Client::connect(url, postgres::NoTls)
                    .map_err(|e| cli_error!("measuring PostgreSQL's size: {e}"))?;
                let row = client
                    .query_one("SELECT pg_database_size(current_database())", &[])
                    .map_err(|e| cli_error!("measuring PostgreSQL's size: {e}"))?;
                Ok(row.get::<_, i64>(0).max(0) as u64)
            }
        }
    }
}

pub fn run(args: MetaBenchArgs) -> Result<(), CliError> {
    if args.nodes < 9 {
        return Err(cli_error!("--nodes must be at least 9 (rs(6,3) on distinct nodes)"));
    }
    let temporary = std::env::temp_dir().join(format!("weft-bench-meta-{}", std::process::id()));
    let dir = args.dir.clone().unwrap_or_else(|| temporary.clone());
    std::fs::create_dir_all(&dir).map_err(|e| cli_error!("{}: {e}", dir.display()))?;
    let result = run_in(&args, &dir);
    if args.dir.is_none() {
        let _ = std::fs::remove_dir_all(&temporary);
    }
    result
}

fn run_in(args: &MetaBenchArgs, dir: &std::path::Path) -> Result<(), CliError> {
    let disks: Vec<DiskLocation> = (0..args.nodes)
        .flat_map(|node| {
            (0..args.disks_per_node).map(move |disk| DiskLocation { rack: node, node, disk })
        })
        .collect();
    let topology = Topology::new(disks).map_err(|e| cli_error!("{e}"))?;
    let mut postgres: Option<LocalPostgres> = None;
    let mut rows = match args.json || args.json_lines {
        true => JsonRows::new(args.json_lines),
        false => JsonRows::silent(),
    };
    let human = !(args.json || args.json_lines);
    if human {
        println!(
            "{:<22} {:>8} {:>10} {:>12} {:>12} {:>10} {:>10}",
            "op", "store", "objects", "ops/s", "s/op", "units", "B/object"
        );
    }
    for store_name in &args.store {
        for &n in &args.objects {
            let opened = match store_name.as_str() {
                "redb" => {
                    let path = dir.join(format!("bench-{n}.redb"));
                    let _ = std::fs::remove_file(&path);
                    Opened::Redb(RedbStore::open(&path)?, path)
                }
                "postgres" => {
                    if postgres.is_none() {
                        eprintln!("weft bench meta: starting a throwaway PostgreSQL");
                        postgres = Some(
                            LocalPostgres::start(&dir.join("postgres"), Lifetime::Throwaway)
                                .map_err(|e| cli_error!("{e}"))?,
                        );
                    }
                    let server = postgres.as_ref().expect("started above");
                    let database = format!("bench_{n}");
                    server.create_database(&database).map_err(|e| cli_error!("{e}"))?;
                    let url = server.url(&database);
                    Opened::Postgres(Box::new(PgStore::open(&url)?), url)
                }
                other => {
                    return Err(cli_error!("--store {other}: the stores are redb and postgres"))
                }
            };
            measure(&opened, store_name, n, args, &topology, &mut rows, human)?;
        }
    }
    rows.finish();
    if let Some(server) = postgres {
        server.stop();
    }
    if let Some(path) = &args.plot {
        chart(rows.rows()).write(path)?;
    }
    Ok(())
}

/// Each operation's cost against N (log axis): µs per begin+commit and get, ms per page of
/// a listing, and µs per unit of a failed disk's repair plan (index and walk).
fn chart(rows: &[serde_json::Value]) -> crate::plot::Chart {
    let points = |ops: &[&str], per_unit: bool, scale: f64| -> Vec<(String, f64, f64)> {
        rows.iter()
            .filter(|row| ops.contains(&row["op"].as_str().unwrap_or_default()))
            .map(|row| {
                let seconds = row["seconds"].as_f64().unwrap_or(f64::NAN);
                let count = match per_unit {
                    true => row["units"].as_f64(),
                    false => row["ops"].as_f64(),
                };
                let name = format!(
                    "{} {}",
                    row["store"].as_str().unwrap_or_default(),
                    row["op"].as_str().unwrap_or_default()
                );
                let x = row["objects"].as_f64().unwrap_or(f64::NAN);
                (name, x, seconds / count.unwrap_or(f64::NAN) * scale)
            })
            .collect()
    };
    crate::plot::Chart {
        title: "weft bench meta: cost per operation as objects grow".into(),
        x_label: "committed objects (N)".into(),
        x_log: true,
        x_names: Vec::new(),
        panels: vec![
            crate::plot::Panel::from_points(
                "µs per op",
                points(&["begin_commit", "get"], false, 1e6),
            ),
            crate::plot::Panel::from_points("ms per 1000-key page", points(&["list"], false, 1e3)),
            crate::plot::Panel::from_points(
                "µs per unit planned",
                points(&["plan_disk_repair", "plan_disk_repair_scan"], true, 1e6),
            ),
        ],
    }
}

fn measure(
    opened: &Opened,
    store_name: &str,
    n: u64,
    args: &MetaBenchArgs,
    topology: &Topology,
    rows: &mut JsonRows,
    human: bool,
) -> Result<(), CliError> {
    let store = opened.store();
    store.create_bucket(BUCKET, policy(), 1)?;
    let started = Instant::now();
    let mut next = 0;
    while next < n {
        let end = (next + LOAD_BATCH).min(n);
        let batch: Vec<ObjectRecord> =
            (next..end).map(|i| record(i, topology)).collect::<Result<_, _>>()?;
        opened.load(&batch)?;
        next = end;
    }
    let totals = store.object_totals()?;
    if totals.objects != n {
        return Err(cli_error!("loaded {n} objects, the store counts {}", totals.objects));
    }
    eprintln!(
        "weft bench meta: {store_name}: {n} objects loaded in {:.1} s",
        started.elapsed().as_secs_f64()
    );
    opened.settle()?;
    let bytes_per_object = opened.bytes_on_disk()? as f64 / n.max(1) as f64;
    let mut emit = |op: &'static str, ops: u64, seconds: f64, units: Option<u64>| {
        let row = Row {
            op,
            store: store_name.to_owned(),
            objects: n,
            ops,
            ops_per_sec: ops as f64 / seconds.max(1e-9),
            seconds,
            units,
            bytes_per_object,
        };
        if human {
            println!(
                "{:<22} {:>8} {:>10} {:>12.0} {:>12.6} {:>10} {:>10.0}",
                row.op,
                row.store,
                row.objects,
                row.ops_per_sec,
                seconds / ops.max(1) as f64,
                units.map(|u| u.to_string()).unwrap_or_default(),
                bytes_per_object
            );
        }
        rows.push(&row);
    };
    let mut rng = rand::rngs::StdRng::seed_from_u64(n);
    let ops = args.ops as u64;

    // Begin and commit of new objects, one client.
    let started = Instant::now();
    for i in 0..ops {
        let key = format!("new/{i:08}");
        let placement = place(&policy(), OBJECT_BYTES, topology, n + i, FailureDomain::Node)
            .map_err(|e| cli_error!("{e}"))?;
        let write = store.begin_object(BUCKET, &key, placement, 2)?;
        store.commit_object(BUCKET, &key, write.generation, &Default::default())?;
    }
    emit("begin_commit", ops, started.elapsed().as_secs_f64(), None);

    let started = Instant::now();
    for _ in 0..ops {
        let i = rng.gen_range(0..n.max(1));
        let object = store.get_object(BUCKET, &key_of(i))?;
        if object.generation != i + 1 {
            return Err(cli_error!("object {i} read back with generation {}", object.generation));
        }
    }
    emit("get", ops, started.elapsed().as_secs_f64(), None);

    let pages = (ops / 10).max(1);
    let started = Instant::now();
    for _ in 0..pages {
        let from = key_of(rng.gen_range(0..n.max(1)));
        let page = store.list_objects(BUCKET, "obj/", Some(&from), 1000)?;
        if page.objects.is_empty() && n > 1 && from < key_of(n - 1) {
            return Err(cli_error!("an empty page after {from}"));
        }
    }
    emit("list", pages, started.elapsed().as_secs_f64(), None);

    // One failed disk: its units from the index, then from a walk of every object.
    let failed = (0, 0);
    let started = Instant::now();
    let mut from_index = 0u64;
    let mut after: Option<PlacedUnit> = None;
    loop {
        let page = store.placed_units(failed.0, Some(failed.1), after.as_ref(), 1000)?;
        from_index += page.len() as u64;
        if page.len() < 1000 {
            break;
        }
        after = page.last().cloned();
    }
    emit("plan_disk_repair", 1, started.elapsed().as_secs_f64(), Some(from_index));
    let started = Instant::now();
    let mut from_scan = 0u64;
    let mut after: Option<String> = None;
    loop {
        let page = store.list_objects(BUCKET, "", after.as_deref(), 1000)?;
        for object in &page.objects {
            from_scan +=
                object.placement.units().filter(|(_, d)| (d.node, d.disk) == failed).count() as u64;
        }
        match page.next_start_after {
            Some(next) => after = Some(next),
            None => break,
        }
    }
    emit("plan_disk_repair_scan", 1, started.elapsed().as_secs_f64(), Some(from_scan));
    if from_index != from_scan {
        return Err(cli_error!(
            "the index finds {from_index} units on disk {}/{}, a walk of the objects {from_scan}",
            failed.0,
            failed.1
        ));
    }
    Ok(())
}
