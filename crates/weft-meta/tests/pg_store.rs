//! PgStore beyond the shared suite (tests/store.rs): what only a database shared by several
//! processes can get wrong — concurrent writers on one database (as meta replicas are),
//! exactly-once repair leases, a server restart under a client, a schema from a newer build.
//! Each test skips with its reason printed when PostgreSQL cannot run here (CI insists with
//! `WEFT_REQUIRE_POSTGRES=1`).

use std::collections::BTreeSet;
use std::sync::{Arc, Barrier};

use crate::common::{small_layout, small_placement};
use weft_layout::UnitId;
use weft_meta::pg_local::{test_database, Lifetime, LocalPostgres};
use weft_meta::{MetaError, MetaStore, ObjectName, PgStore, RepairKind, RepairRequest};

/// Two stores (two "replicas") on one fresh database, as many connections each as threads.
fn two_replicas() -> Option<(Arc<PgStore>, Arc<PgStore>)> {
    let url = test_database()?;
    let a = Arc::new(PgStore::open_with(&url, 4).unwrap());
    let b = Arc::new(PgStore::open_with(&url, 4).unwrap());
    Some((a, b))
}

#[test]
fn concurrent_replicas_never_interleave_two_operations() {
    let Some((a, b)) = two_replicas() else { return };
    a.create_bucket("bkt", small_layout(), 1).unwrap();
    const THREADS: usize = 6;
    const PUTS: u64 = 15;
    let start = Arc::new(Barrier::new(THREADS));
    let workers: Vec<_> = (0..THREADS)
        .map(|t| {
            let store = if t % 2 == 0 { a.clone() } else { b.clone() };
            let start = start.clone();
            std::thread::spawn(move || {
                start.wait();
                let mut committed = Vec::new();
                for i in 0..PUTS {
                    // Three keys shared by every thread: commits race on them.
                    let key = format!("k{}", i % 3);
                    let write =
                        store.begin_object("bkt", &key, small_placement(i), 10 + i).unwrap();
                    let (record, _) = store
                        .commit_object("bkt", &key, write.generation, &Default::default())
                        .unwrap();
                    committed.push((key, record.generation));
                }
                committed
            })
        })
        .collect();
    let committed: Vec<(String, u64)> =
        workers.into_iter().flat_map(|w| w.join().unwrap()).collect();
    let generations: BTreeSet<u64> = committed.iter().map(|(_, g)| *g).collect();
    assert_eq!(generations.len(), committed.len(), "every begin drew its own generation");
    assert_eq!(
        generations.iter().copied().collect::<Vec<_>>(),
        (1..=committed.len() as u64).collect::<Vec<_>>(),
        "the counter advanced once per begin, with no gap and no repeat"
    );
    // Each key's current object is the newest commit of it, and nothing is left in progress.
    for key in ["k0", "k1", "k2"] {
        let current = a.get_object("bkt", key).unwrap();
        assert_eq!(b.get_object("bkt", key).unwrap(), current, "both replicas read one state");
        assert!(committed.iter().any(|(k, g)| k == key && *g == current.generation));
    }
    assert_eq!(a.list_writes(None, 100).unwrap(), vec![]);
}

#[test]
fn a_repair_task_is_leased_to_one_replica_at_a_time() {
    let Some((a, b)) = two_replicas() else { return };
    a.create_bucket("bkt", small_layout(), 1).unwrap();
    let mut requests = Vec::new();
    for i in 0..8 {
        let key = format!("k{i}");
        let write = a.begin_object("bkt", &key, small_placement(i), 2).unwrap();
        let (object, _) =
            a.commit_object("bkt", &key, write.generation, &Default::default()).unwrap();
        for unit in [UnitId::Data(0), UnitId::Data(1)] {
            requests.push(RepairRequest {
                object: ObjectName { bucket: "bkt".into(), key: key.clone() },
                generation: object.generation,
                unit,
                kind: RepairKind::Damaged,
                reason: "test".into(),
                seen_on: object.placement.disk_of(unit),
            });
        }
    }
    assert_eq!(b.enqueue_repairs(&requests, 3).unwrap(), requests.len());
    const THREADS: usize = 6;
    let start = Arc::new(Barrier::new(THREADS));
    let workers: Vec<_> = (0..THREADS)
        .map(|t| {
            let store = if t % 2 == 0 { a.clone() } else { b.clone() };
            let start = start.clone();
            std::thread::spawn(move || {
                start.wait();
                let mut taken = Vec::new();
                while let Some(lease) = store.take_repair(4, 60_000).unwrap() {
                    taken.push(lease.task_id);
                    store.complete_repair(&lease).unwrap();
                }
                taken
            })
        })
        .collect();
    let taken: Vec<u64> = workers.into_iter().flat_map(|w| w.join().unwrap()).collect();
    let distinct: BTreeSet<u64> = taken.iter().copied().collect();
    assert_eq!(taken.len(), requests.len(), "every task was taken once: {taken:?}");
    assert_eq!(distinct.len(), requests.len(), "no task was leased twice: {taken:?}");
    assert_eq!(a.repair_queue_len().unwrap(), 0);
}

#[test]
fn a_server_restart_fails_operations_clearly_and_the_store_recovers() {
    let Some(_) = test_database() else { return };
    let dir = tempfile::tempdir().unwrap();
    let server = LocalPostgres::start(dir.path(), Lifetime::Kept).unwrap();
    server.create_database("weft").unwrap();
    let url = server.url("weft");
    let password = url.split(':').nth(2).unwrap().split('@').next().unwrap().to_string();
    let store = PgStore::open(&url).unwrap();
    store.create_bucket("bkt", small_layout(), 1).unwrap();
    let write = store.begin_object("bkt", "k", small_placement(1), 2).unwrap();
    server.stop();
    // The server is gone: a clear error, no password, and nothing half-done.
    let refused = store.commit_object("bkt", "k", write.generation, &Default::default());
    let Err(error) = refused else { panic!("a commit without a server succeeded") };
    assert!(matches!(error, MetaError::StoreUnavailable { .. }), "{error:?}");
    assert!(!error.to_string().contains(&password), "{error}");
    // The same data directory again (on a new port): the store is opened anew on it and
    // finds the write in progress, never committed; committing it now works.
    let server = LocalPostgres::start(dir.path(), Lifetime::Kept).unwrap();
    let store = PgStore::open(&server.url("weft")).unwrap();
    assert!(matches!(store.get_object("bkt", "k"), Err(MetaError::NoSuchKey { .. })));
    let (committed, _) =
        store.commit_object("bkt", "k", write.generation, &Default::default()).unwrap();
    assert_eq!(committed.generation, write.generation);
    server.stop();
}

/// Ends every session of the database but `admin`'s own, as an administrator (or a
/// failover) would; checks the store had one open.
fn end_other_sessions(admin: &mut postgres::Client) {
    let ended = admin
        .query(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity \
             WHERE datname = current_database() AND pid <> pg_backend_pid()",
            &[],
        )
        .unwrap();
    assert!(!ended.is_empty(), "the store's connection was open");
}

#[test]
fn an_operation_whose_connection_was_dropped_runs_again_on_a_new_one() {
    let Some(url) = test_database() else { return };
    let store = PgStore::open_with(&url, 1).unwrap();
    store.create_bucket("bkt", small_layout(), 1).unwrap();
    // Another session ends every connection of this database but its own, as an
    // administrator (or a failover) would.
    let mut admin = postgres::Client::connect(&url, postgres::NoTls).unwrap();
    end_other_sessions(&mut admin);
    // The first operation finds its connection dead before anything was committed: it runs
    // again on a new connection, and the caller sees only its answer.
    assert_eq!(store.get_bucket("bkt").unwrap().name, "bkt");
    // Likewise a write, after every connection was ended again.
    end_other_sessions(&mut admin);
    let write = store.begin_object("bkt", "k", small_placement(1), 2).unwrap();
    let (committed, _) =
        store.commit_object("bkt", "k", write.generation, &Default::default()).unwrap();
    assert_eq!(committed.generation, write.generation);
}

#[test]
fn a_database_of_a_newer_schema_is_refused() {
    let Some(url) = test_database() else { return };
    drop(PgStore::open(&url).unwrap());
    let mut admin = postgres::Client::connect(&url, postgres::NoTls).unwrap();
    admin
        .execute("INSERT INTO weft_migrations (version, description) VALUES (99, 'future')", &[])
        .unwrap();
    let refused = PgStore::open(&url).unwrap_err();
    assert!(matches!(refused, MetaError::UnsupportedVersion { found: 99, .. }), "{refused:?}");
}

#[test]
fn a_wrong_password_is_refused_without_showing_either() {
    let Some(url) = test_database() else { return };
    let (head, tail) = url.split_once('@').unwrap();
    let right = head.rsplit(':').next().unwrap();
    let wrong = format!("{}:not-{right}@{tail}", head.rsplit_once(':').unwrap().0);
    let refused = PgStore::open(&wrong).unwrap_err();
    let text = refused.to_string();
    assert!(!text.contains(right) && !text.contains("not-"), "{text}");
    assert!(text.contains("password"), "the reason is named: {text}");
}

#[test]
fn replicas_asking_for_one_lease_at_once_get_one_holder() {
    let Some((a, b)) = two_replicas() else { return };
    for round in 0..20u64 {
        let now = 10_000 * (round + 1);
        let start = Arc::new(Barrier::new(4));
        let askers: Vec<_> = (0..4)
            .map(|i| {
                let store = if i % 2 == 0 { a.clone() } else { b.clone() };
                let start = start.clone();
                std::thread::spawn(move || {
                    start.wait();
                    store.hold_lease("leader", &format!("m{i}"), now, 5_000).unwrap()
                })
            })
            .collect();
        let seen: Vec<_> = askers.into_iter().map(|t| t.join().unwrap()).collect();
        // Every asker was told of the same lease, and it is one of theirs.
        assert!(seen.iter().all(|lease| *lease == seen[0]), "round {round}: {seen:?}");
        assert!(seen[0].holder.starts_with('m') && seen[0].deadline_ms == now + 5_000);
    }
}

/// Meta drops its store on an async worker when it stops; the driver's blocking client must
/// not be closed there (it runs a runtime of its own, which panics inside another).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_store_dropped_on_an_async_worker_closes_its_connections_quietly() {
    let Some(url) = tokio::task::spawn_blocking(test_database).await.unwrap() else { return };
    let store = tokio::task::spawn_blocking(move || {
        let store = PgStore::open(&url).unwrap();
        store.create_bucket("bkt", small_layout(), 1).unwrap();
        store
    })
    .await
    .unwrap();
    // Idle connections are in the pool now; dropping here panicked before.
    drop(store);
}
