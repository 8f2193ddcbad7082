//! A process writing to a `RedbStore` is killed (SIGKILL) at random moments: every write it
//! was told had succeeded is there when the store is opened again (replayed from the redo
//! log when the tree file lacks it), and no generation it was given is given again.

use std::collections::{BTreeMap, BTreeSet};
use std::io::{BufRead, BufReader, Write};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::common::{small_layout, small_placement};
use rand::{Rng, SeedableRng};
use weft_meta::{MetaError, MetaStore, RedbStore};

const CHILD_ENV: &str = "WEFT_TEST_REDB_CRASH_DIR";

/// The writer the test kills: puts `k<i>` for i from the first free index on, deletes every
/// fourth one again, and prints each acknowledgement as it gets it. Does nothing unless the
/// parent test started it.
#[test]
fn crash_child_writer() {
    let Ok(dir) = std::env::var(CHILD_ENV) else { return };
    let store = RedbStore::open(std::path::Path::new(&dir).join("meta.redb")).unwrap();
    match store.create_bucket("bkt", small_layout(), 1) {
        Ok(_) | Err(MetaError::BucketExists { .. }) => {}
        Err(other) => panic!("{other}"),
    }
    let first = std::env::var("WEFT_TEST_FIRST").unwrap().parse::<u64>().unwrap();
    let mut out = std::io::stdout().lock();
    for i in first.. {
        let key = format!("k{i}");
        let write = store.begin_object("bkt", &key, small_placement(i), i).unwrap();
        writeln!(out, "began {i} {}", write.generation).unwrap();
        out.flush().unwrap();
        store.commit_object("bkt", &key, write.generation, &Default::default()).unwrap();
        writeln!(out, "put {i} {}", write.generation).unwrap();
        out.flush().unwrap();
        if i % 4 == 3 {
            writeln!(out, "deleting {i}").unwrap();
            out.flush().unwrap();
            store.delete_object("bkt", &key).unwrap();
            writeln!(out, "deleted {i}").unwrap();
            out.flush().unwrap();
        }
    }
}

#[test]
fn a_killed_writer_loses_no_acknowledged_write_and_reuses_no_generation() {
    let dir = tempfile::tempdir().unwrap();
    let mut rng = rand::rngs::StdRng::seed_from_u64(7);
    // Everything acknowledged so far: key index → generation (puts), and the deletions.
    let mut put: BTreeMap<u64, u64> = BTreeMap::new();
    let mut deleted: BTreeSet<u64> = BTreeSet::new();
    let mut generations: BTreeSet<u64> = BTreeSet::new();
    let mut next = 0u64;
    for round in 0..4 {
        let mut child = Command::new(std::env::current_exe().unwrap())
            .args(["--exact", "redb_crash::crash_child_writer", "--nocapture", "--test-threads=1"])
            .env(CHILD_ENV, dir.path())
            .env("WEFT_TEST_FIRST", next.to_string())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let stdout = child.stdout.take().unwrap();
        let reader = std::thread::spawn(move || {
            BufReader::new(stdout).lines().map_while(Result::ok).collect::<Vec<String>>()
        });
        // Let it write for a while (past a checkpoint in some rounds), then kill it.
        let started = Instant::now();
        std::thread::sleep(Duration::from_millis(rng.gen_range(300..1500)));
        child.kill().unwrap(); // SIGKILL
        child.wait().unwrap();
        let lines = reader.join().unwrap();
        let (mut puts, mut in_flight_delete) = (0, None);
        for line in &lines {
            let words: Vec<&str> = line.split_whitespace().collect();
            match words.as_slice() {
                ["began", i, g] => {
                    let (i, g): (u64, u64) = (i.parse().unwrap(), g.parse().unwrap());
                    assert!(
                        generations.insert(g),
                        "round {round}: generation {g} given twice (k{i})"
                    );
                    next = next.max(i + 1);
                }
                ["put", i, g] => {
                    put.insert(i.parse().unwrap(), g.parse().unwrap());
                    puts += 1;
                }
                ["deleting", i] => in_flight_delete = Some(i.parse::<u64>().unwrap()),
                ["deleted", i] => {
                    deleted.insert(i.parse().unwrap());
                    in_flight_delete = None;
                }
                _ => {}
            }
        }
        assert!(
            puts > 0,
            "round {round}: the writer acknowledged nothing in {:?}",
            started.elapsed()
        );

        let store = RedbStore::open(dir.path().join("meta.redb")).unwrap();
        for (&i, &generation) in &put {
            let found = store.get_object("bkt", &format!("k{i}"));
            if deleted.contains(&i) {
                assert!(matches!(found, Err(MetaError::NoSuchKey { .. })), "k{i}: {found:?}");
            } else if in_flight_delete == Some(i) {
                // Killed during its delete: either outcome, but whole.
                if let Ok(object) = found {
                    assert_eq!(object.generation, generation);
                }
            } else {
                let object = found.unwrap_or_else(|e| panic!("round {round}: k{i} lost: {e}"));
                assert_eq!(object.generation, generation, "k{i}");
            }
        }
        if let Some(i) = in_flight_delete {
            // Settle it, so later rounds know its state.
            let _ = store.delete_object("bkt", &format!("k{i}"));
            deleted.insert(i);
        }
        // A new write after the crash takes a generation never given before.
        let write = store.begin_object("bkt", "after", small_placement(round), 1).unwrap();
        assert!(
            generations.iter().all(|g| *g < write.generation),
            "round {round}: generation {} after the crash, {:?} given before",
            write.generation,
            generations.last()
        );
        generations.insert(write.generation);
        store.abort_write("bkt", "after", write.generation).unwrap();
    }
    // The rounds together wrote past several checkpoints.
    assert!(put.len() > 200, "only {} puts in all", put.len());
}

/// Writers on several threads, past many checkpoints, all finish: a checkpoint never waits
/// for redb's write lock while another writer holds it and waits for the log.
#[test]
fn concurrent_writers_pass_checkpoints_without_deadlock() {
    let dir = tempfile::tempdir().unwrap();
    let store = std::sync::Arc::new(RedbStore::open(dir.path().join("meta.redb")).unwrap());
    store.create_bucket("bkt", small_layout(), 1).unwrap();
    let (done, finished) = std::sync::mpsc::channel();
    for thread in 0..4u64 {
        let (store, done) = (store.clone(), done.clone());
        std::thread::spawn(move || {
            for i in 0..600 {
                let key = format!("t{thread}-{i}");
                let write = store.begin_object("bkt", &key, small_placement(i), i).unwrap();
                store.commit_object("bkt", &key, write.generation, &Default::default()).unwrap();
            }
            done.send(thread).unwrap();
        });
    }
    for _ in 0..4 {
        let thread = finished.recv_timeout(Duration::from_secs(120));
        assert!(thread.is_ok(), "a writer did not finish in 120 s (a deadlock?)");
    }
    // Every object is listed once, paging through reads that merge overlay and tree file.
    let mut keys = Vec::new();
    loop {
        let after = keys.last().cloned();
        let page = store.list_objects("bkt", "", after.as_deref(), 1000).unwrap();
        if page.objects.is_empty() {
            break;
        }
        keys.extend(page.objects.into_iter().map(|o| o.key));
    }
    let distinct: std::collections::BTreeSet<_> = keys.iter().collect();
    assert_eq!((keys.len(), distinct.len()), (2400, 2400));
    assert_eq!(store.object_totals().unwrap().objects, 2400);
}
