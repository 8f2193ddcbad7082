//! Put and get through real meta and node servers on loopback: sizes around every boundary
//! of the layout, ranges, several code families, the client buffer bound, degraded reads with
//! nodes down and a corrupt unit on disk.

use std::io::Cursor;

use crate::common::{pattern, policy, TestCluster};
use weft_client::{Coder, PutOptions, ReadMode};

const CELL: u64 = 4096;
const BLOCK: u64 = 4 * CELL;

async fn put(cluster: &TestCluster, bucket: &str, key: &str, data: &[u8]) -> weft_client::PutStats {
    cluster
        .client
        .put_reader(
            bucket,
            key,
            data.len() as u64,
            Cursor::new(data.to_vec()),
            &PutOptions::default(),
        )
        .await
        .unwrap_or_else(|e| panic!("put {key} ({} bytes): {e}", data.len()))
}

async fn get(cluster: &TestCluster, bucket: &str, key: &str, range: Option<(u64, u64)>) -> Vec<u8> {
    let mut out = Vec::new();
    cluster
        .client
        .get(bucket, key, range, &mut out, None)
        .await
        .unwrap_or_else(|e| panic!("get {key} {range:?}: {e}"));
    out
}

/// Sizes around the cell, block, stripe and group boundaries of (k, W).
fn sizes(k: u64, width: u64) -> Vec<u64> {
    let stripe = width * BLOCK;
    let group = k * BLOCK;
    let mut sizes = vec![0, 1, CELL - 1, CELL, CELL + 1, BLOCK, stripe - 1, stripe, stripe + 1];
    sizes.extend([group - 1, group, group + 1, 3 * group + 5 * CELL + 17, 7 * BLOCK + 3]);
    sizes
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_size_round_trips_for_every_code_family() {
    let cluster = TestCluster::start(12).await;
    let codes = [
        ("rs(6,3)", 2),
        ("rs(4,2)", 6),
        ("hh-xor+(4,2)", 3),
        ("clay(4,2,5)", 2),
        ("lrc(6,2,2)", 3),
    ];
    for (i, (code, width)) in codes.into_iter().enumerate() {
        let bucket = format!("bkt{i}");
        cluster.create_bucket(&bucket, policy(code, width, CELL, BLOCK)).await;
        let spec = weft_codes::CodeSpec::parse(code).unwrap();
        let k = spec.build().unwrap().data_units() as u64;
        for size in sizes(k, width as u64) {
            let data = pattern(size as usize, size ^ i as u64);
            let key = format!("obj-{size}");
            let stats = put(&cluster, &bucket, &key, &data).await;
            assert_eq!(stats.data_bytes, size);
            assert_eq!(stats.object.size, size);
            assert!(
                stats.peak_buffer_bytes <= stats.buffer_bound_bytes,
                "{code} size {size}: peak {} > bound {}",
                stats.peak_buffer_bytes,
                stats.buffer_bound_bytes
            );
            assert_eq!(get(&cluster, &bucket, &key, None).await, data, "{code} size {size}");
            if size > 2 {
                let (a, b) = (size / 3, size / 2);
                assert_eq!(
                    get(&cluster, &bucket, &key, Some((a, b - a + 1))).await,
                    data[a as usize..=b as usize]
                );
                assert_eq!(
                    get(&cluster, &bucket, &key, Some((size - 1, 1))).await,
                    data[size as usize - 1..]
                );
            }
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn partial_parities_keep_the_client_under_r_blocks_plus_k_cells() {
    // The acceptance shape scaled down: rs(20,3), stripe width 6, 1 cell = B/8.
    let cluster = TestCluster::start(24).await;
    let (cell, block) = (16 << 10, 128 << 10);
    cluster.create_bucket("wide", policy("rs(20,3)", 6, cell, block)).await;
    let size = 50 * block + 12345;
    let data = pattern(size as usize, 7);
    let stats = put(&cluster, "wide", "big", &data).await;
    let okapi = 3 * block + 20 * cell;
    assert_eq!(stats.okapi_buffer_bytes, okapi);
    assert!(stats.buffer_bound_bytes <= okapi);
    assert!(
        stats.peak_buffer_bytes <= stats.buffer_bound_bytes,
        "peak {} > {}",
        stats.peak_buffer_bytes,
        stats.buffer_bound_bytes
    );
    // And far below buffering whole groups.
    assert_eq!(stats.naive_buffer_bytes, 23 * block);
    assert!(stats.peak_buffer_bytes * 3 < stats.naive_buffer_bytes);
    assert_eq!(get(&cluster, "wide", "big", None).await, data);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reads_survive_r_nodes_down_and_a_corrupt_unit() {
    let mut cluster = TestCluster::start(10).await;
    cluster.create_bucket("bkt", policy("rs(6,3)", 2, CELL, BLOCK)).await;
    let mut objects = Vec::new();
    for (i, size) in
        [1u64, CELL + 1, 6 * BLOCK, 13 * BLOCK + 77, 40 * BLOCK + 5].into_iter().enumerate()
    {
        let data = pattern(size as usize, 100 + i as u64);
        put(&cluster, "bkt", &format!("o{i}"), &data).await;
        objects.push(data);
    }
    // Corrupt one byte of a unit file in the data region (past the header) on node 1.
    let victim = cluster
        .unit_files(1)
        .into_iter()
        .max_by_key(|p| std::fs::metadata(p).unwrap().len())
        .unwrap();
    let original = std::fs::read(&victim).unwrap();
    let mut bytes = original.clone();
    let at = bytes.len() - 10;
    bytes[at] ^= 0x40;
    std::fs::write(&victim, &bytes).unwrap();
    for (i, data) in objects.iter().enumerate() {
        assert_eq!(
            &get(&cluster, "bkt", &format!("o{i}"), None).await,
            data,
            "corrupt, object {i}"
        );
    }
    // Put it back: with three nodes down next, a fourth bad unit would be beyond rs(6,3).
    std::fs::write(&victim, &original).unwrap();
    // Three nodes down (the code's limit): everything still reads, also by ranges.
    for id in [2, 5, 9] {
        cluster.stop_node(id).await;
    }
    // Without a degraded-read cache, so the two modes below fetch from nodes alike.
    let uncached = cluster.client.with_degraded_cache(0);
    let mut decoded_together = 0;
    for (i, data) in objects.iter().enumerate() {
        let key = format!("o{i}");
        let mut out = Vec::new();
        let stats = uncached.get("bkt", &key, None, &mut out, None).await.unwrap();
        assert_eq!(&out, data, "3 down, object {i}");
        if data.len() as u64 > 6 * BLOCK {
            assert!(!stats.degraded_units.is_empty(), "object {i} should have read degraded");
        }
        let len = data.len() as u64;
        if len > 10 {
            let (a, n) = (len / 4, len / 2);
            assert_eq!(
                get(&cluster, "bkt", &key, Some((a, n))).await,
                data[a as usize..(a + n) as usize]
            );
        }
        // The blocking read (inline decodes, no overlap) returns the same bytes, fetching
        // the same ranges.
        let object = cluster.client.meta.get_object("bkt", &key).await.unwrap();
        let mut blocking = Vec::new();
        let blocking_stats = uncached
            .get_object_range_with(object, None, &mut blocking, None, ReadMode::Blocking)
            .await
            .unwrap();
        assert_eq!(&blocking, data, "3 down, blocking read of object {i}");
        assert_eq!(blocking_stats.bytes_fetched, stats.bytes_fetched, "object {i}");
        assert_eq!(blocking_stats.degraded_units, stats.degraded_units, "object {i}");
        assert_eq!(blocking_stats.decoded_together, 0, "inline decodes are one unit each");
        decoded_together += stats.decoded_together;
    }
    // Three of ten nodes hold ~2.7 units of each nine-unit group: lost blocks of one group
    // over the same rows were decoded together (and returned the right bytes above).
    assert!(decoded_together >= 2, "decoded together: {decoded_together}");
}

/// Reads (bucket, key) in `step`-byte ranges from start to end with `client`: the bytes, and
/// the bytes fetched from nodes and served from the degraded-read cache.
async fn read_sequentially(
    client: &weft_client::Client,
    key: &str,
    size: u64,
    step: u64,
) -> (Vec<u8>, u64, u64) {
    let (mut out, mut fetched, mut hits) = (Vec::new(), 0, 0);
    let mut at = 0;
    while at < size {
        let len = step.min(size - at);
        let stats = client.get("bkt", key, Some((at, len)), &mut out, None).await.unwrap();
        fetched += stats.bytes_fetched;
        hits += stats.cache_hit_bytes;
        at += len;
    }
    (out, fetched, hits)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_degraded_read_cache_lets_a_sequential_reader_fetch_each_byte_once() {
    let mut cluster = TestCluster::start(10).await;
    for (code, bucket) in [("rs(6,3)", "bkt"), ("hh-xor+(4,2)", "hhx")] {
        cluster.create_bucket(bucket, policy(code, 2, CELL, BLOCK)).await;
    }
    // Two groups of rs(6,3) (12 blocks), one of hh-xor+(4,2) (4 blocks).
    let size = 12 * BLOCK;
    let data = pattern(size as usize, 7);
    put(&cluster, "bkt", "seq", &data).await;
    put(&cluster, "hhx", "seq", &data[..4 * BLOCK as usize]).await;
    let object = cluster.client.meta.get_object("bkt", "seq").await.unwrap();
    let victim = object.units[&weft_layout::UnitId::Data(0)].node_id;
    cluster.stop_node(victim).await;
    // Without the cache every cell read of block 0 fetches the same range of five other data
    // blocks (and a parity), which their own reads then fetch again.
    let uncached = cluster.client.with_degraded_cache(0);
    let (bytes, fetched_without, hits) = read_sequentially(&uncached, "seq", size, CELL).await;
    assert_eq!(bytes, data);
    assert_eq!(hits, 0);
    assert!(fetched_without >= size + 5 * BLOCK, "fetched {fetched_without} of {size}");
    // With it, the data ranges a rebuild fetched serve the reads that follow: no byte is
    // fetched twice, so at most the object's size (the parity range stands in for block 0).
    let cached = cluster.client.with_degraded_cache(1 << 20);
    let (bytes, fetched_with, hits) = read_sequentially(&cached, "seq", size, CELL).await;
    assert_eq!(bytes, data);
    assert!(fetched_with <= size, "fetched {fetched_with} of {size}");
    assert!(hits >= 5 * BLOCK, "served {hits} from the cache");
    assert!(cached.degraded.counters().bytes <= 1 << 20);
    // A second pass is served from memory except the ranges no rebuild touched.
    let (bytes, again, _) = read_sequentially(&cached, "seq", size, CELL).await;
    assert_eq!(bytes, data);
    assert!(again < fetched_with, "the second pass fetched {again}");
    // A whole read holds whole rows of each group: its rebuild reads only what it fetches
    // itself, so the cache keeps just the rebuilt range (no copies of data or parity)...
    let whole = cluster.client.with_degraded_cache(64 << 20);
    let mut out = Vec::new();
    let first = whole.get("bkt", "seq", None, &mut out, None).await.unwrap();
    assert_eq!(out, data);
    let lost_blocks = object
        .units
        .values()
        .filter(|u| u.node_id == victim && matches!(u.unit, weft_layout::UnitId::Data(_)))
        .count() as u64;
    assert_eq!(first.bytes_fetched, size, "a parity range for each lost block");
    let kept = whole.degraded.counters().bytes as u64;
    assert_eq!(kept, lost_blocks * BLOCK, "only the {lost_blocks} lost blocks, rebuilt");
    // ...which the next whole read is served from, fetching only the healthy blocks.
    out.clear();
    let second = whole.get("bkt", "seq", None, &mut out, None).await.unwrap();
    assert_eq!(out, data);
    assert_eq!((second.cache_hit_bytes, second.bytes_fetched), (kept, size - kept));

    // Hitchhiker rebuilds whole units: without the cache every cell read of a lost block
    // decodes it anew; with it, once.
    let hh = cluster.client.meta.get_object("hhx", "seq").await.unwrap();
    let lost = hh.units.values().find(|u| u.node_id == victim).map(|u| u.unit);
    if let Some(weft_layout::UnitId::Data(_)) = lost {
        let hh_size = 4 * BLOCK;
        let read = |client: weft_client::Client| async move {
            let (mut out, mut fetched, mut at) = (Vec::new(), 0, 0);
            while at < hh_size {
                let stats =
                    client.get("hhx", "seq", Some((at, CELL)), &mut out, None).await.unwrap();
                fetched += stats.bytes_fetched;
                at += CELL;
            }
            (out, fetched)
        };
        let (without, fetched_without) = read(cluster.client.with_degraded_cache(0)).await;
        let (with, fetched_with) = read(cluster.client.with_degraded_cache(1 << 20)).await;
        assert_eq!(without, data[..hh_size as usize]);
        assert_eq!(with, data[..hh_size as usize]);
        assert!(
            fetched_without >= 2 * fetched_with,
            "hitchhiker: {fetched_without} without the cache, {fetched_with} with"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_put_right_after_a_node_dies_retries_around_it() {
    // Meta still reports the node up for DOWN_AFTER_MS, so placement may use it; put_file
    // must retry on other nodes rather than fail.
    let mut cluster = TestCluster::start(10).await;
    cluster.create_bucket("bkt", policy("rs(6,3)", 2, CELL, BLOCK)).await;
    cluster.stop_node(4).await;
    let dir = tempfile::tempdir().unwrap();
    for i in 0..4u64 {
        let data = pattern((7 * BLOCK + i) as usize, 40 + i);
        let path = dir.path().join(format!("f{i}"));
        std::fs::write(&path, &data).unwrap();
        let key = format!("k{i}");
        let stats = cluster
            .client
            .put_file("bkt", &key, &path, &PutOptions::default())
            .await
            .unwrap_or_else(|e| panic!("put {key} with node 4 just dead: {e}"));
        assert!(stats.object.units.values().all(|u| u.node_id != 4), "placed on the dead node");
        assert_eq!(get(&cluster, "bkt", &key, None).await, data);
    }
}

/// Every parity unit of an object, in unit order, read straight from its node.
async fn parity_units(cluster: &TestCluster, object: &weft_client::ObjectInfo) -> Vec<Vec<u8>> {
    let mut units = Vec::new();
    for (unit, info) in &object.units {
        if matches!(unit, weft_layout::UnitId::Parity { .. }) {
            let bytes = cluster.client.nodes.get_range(info, 0, info.len).await.unwrap();
            units.push(bytes.to_vec());
        }
    }
    units
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pipelined_and_blocking_coders_write_the_same_parity_and_noop_writes_zeros() {
    let cluster = TestCluster::start(12).await;
    let codes =
        [("rs(6,3)", 2), ("rs(4,2)", 6), ("lrc(6,2,2)", 3), ("rs(3,2)", 3), ("hh-xor+(4,2)", 2)];
    for (i, (code, width)) in codes.into_iter().enumerate() {
        let bucket = format!("coder{i}");
        cluster.create_bucket(&bucket, policy(code, width, CELL, BLOCK)).await;
        let k = weft_codes::CodeSpec::parse(code).unwrap().build().unwrap().data_units() as u64;
        for size in sizes(k, width as u64) {
            let data = pattern(size as usize, size * 31 + i as u64);
            let mut parities = Vec::new();
            for coder in [Coder::Blocking, Coder::Pipelined, Coder::Noop] {
                let key = format!("{}-{size}", coder.name());
                let options = PutOptions { coder, ..PutOptions::default() };
                let stats = cluster
                    .client
                    .put_reader(&bucket, &key, size, Cursor::new(data.clone()), &options)
                    .await
                    .unwrap_or_else(|e| panic!("{code} {coder:?} size {size}: {e}"));
                assert!(
                    stats.peak_buffer_bytes <= stats.buffer_bound_bytes,
                    "{code} {coder:?} size {size}: peak {} > bound {}",
                    stats.peak_buffer_bytes,
                    stats.buffer_bound_bytes
                );
                assert_eq!(get(&cluster, &bucket, &key, None).await, data, "{code} {coder:?}");
                parities.push(parity_units(&cluster, &stats.object).await);
            }
            assert_eq!(parities[0], parities[1], "{code} size {size}: pipelined parity differs");
            assert!(
                parities[2].iter().flatten().all(|&b| b == 0),
                "{code} size {size}: noop parity must be zeros"
            );
            if size > 0 {
                assert!(
                    parities[0].iter().flatten().any(|&b| b != 0),
                    "{code} size {size}: real parity of non-zero data is not all zeros"
                );
            }
        }
    }
}

/// Issue 15 item 3: an object of 16,500 units (more than one request's worth of digests and
/// more than one reply's worth of units) is written with its digests sent in pages, placed by
/// a repeated pattern, named by the client from it, and read back with every unit checked.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_object_of_sixteen_thousand_units_commits_its_digests_in_pages() {
    let cluster = TestCluster::start(4).await;
    cluster.create_bucket("big", policy("rs(2,1)", 2, CELL, CELL)).await;
    let blocks = 11_000u64;
    let data = pattern((blocks * CELL) as usize, 41);
    let stats = put(&cluster, "big", "o", &data).await;
    assert_eq!(stats.units, 16_500);
    let raw = &stats.object.raw;
    assert_eq!(raw["units_total"], 16_500);
    assert!(
        raw["placement"]["period"].as_u64().is_some(),
        "a tiled placement: {}",
        raw["placement"]
    );

    // Meta kept the digest of every unit, pages and commit alike.
    let object = cluster.client.meta.get_object("big", "o").await.unwrap();
    assert!(!object.digests_pending());
    assert_eq!(object.units.len(), 16_500);
    assert!(object.units.values().all(|u| u.digest.is_some()), "a unit without its digest");
    let (name, unit) = object.units.iter().next_back().unwrap();
    let bytes = cluster.client.nodes.get_range(unit, 0, unit.len).await.unwrap();
    let digest = cluster.client.nodes.digest_key().digest(&bytes);
    assert_eq!(Some(digest), unit.digest, "{name:?}");
    // Keyed on any CPU with a carry-less multiply (every x86-64 CI machine), else BLAKE3.
    let writes = cluster.client.nodes.digest_key().writes();
    assert_eq!(digest.kind(), writes, "writers record their key's kind");
    // The object's tail, read through units the client named from the pattern.
    let tail = data.len() as u64 - 64 * CELL;
    assert_eq!(get(&cluster, "big", "o", Some((tail, 64 * CELL))).await, data[tail as usize..]);
    // A page naming a unit the write does not have, or for no write in progress, is refused.
    let late = cluster.client.meta.begin("big", "p", 4 * CELL, None, &[]).await.unwrap();
    let path = "/v1/buckets/big/objects/p/digests";
    let hex = "00".repeat(16);
    let stranger = serde_json::json!({"generation": late.generation, "digests": {"d9": hex}});
    let refused = cluster.client.meta.post_json(path, stranger).await.unwrap_err().to_string();
    assert!(refused.contains("invalid_unit") && refused.contains("no data block 9"), "{refused}");
    let old = serde_json::json!({"generation": late.generation + 1, "digests": {"d0": hex}});
    let refused = cluster.client.meta.post_json(path, old).await.unwrap_err().to_string();
    assert!(refused.contains("no_such_write"), "{refused}");
}

/// How many writes in progress meta holds (a dry-run expiry of writes older than 0 ms counts
/// every one: those begun this millisecond as in progress).
async fn writes_in_progress(cluster: &TestCluster) -> u64 {
    let listed = cluster
        .client
        .meta
        .post_json("/v1/writes/expire", serde_json::json!({"older_than_ms": 0, "dry_run": true}))
        .await
        .unwrap();
    let expired = listed["expired"].as_array().unwrap_or_else(|| panic!("no list: {listed}"));
    expired.len() as u64 + listed["in_progress"].as_u64().unwrap()
}

/// A reader that yields `data` and then fails or keeps going, as a changing file would.
struct Yields {
    data: Cursor<Vec<u8>>,
    extra: usize,
}

impl std::io::Read for Yields {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        match self.data.read(buf)? {
            0 if self.extra > 0 && !buf.is_empty() => {
                let n = buf.len().min(self.extra);
                self.extra -= n;
                buf[..n].fill(7);
                Ok(n)
            }
            n => Ok(n),
        }
    }
}

/// Issue 16 items 2 and 3: an input longer or shorter than the size a write began with
/// fails the write — nothing is committed, the write is aborted in meta at once (not left to
/// the 6 h expiry) and its units are deleted — and an input of unknown length is stored
/// whole, in memory or spooled, never as fewer bytes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_changing_input_fails_the_write_and_leaves_nothing_behind() {
    use std::io::Read as _;
    let cluster = TestCluster::start(4).await;
    cluster.create_bucket("sizes", policy("rs(2,1)", 2, CELL, BLOCK)).await;
    let data = pattern((5 * BLOCK + 3) as usize, 11);
    let grew = Yields { data: Cursor::new(data.clone()), extra: 1 };
    let error = cluster
        .client
        .put_reader("sizes", "grew", data.len() as u64, grew, &PutOptions::default())
        .await
        .expect_err("an input longer than its size must fail the write");
    assert!(error.to_string().contains("longer than"), "{error}");
    let shrank = Cursor::new(data[..data.len() - 1].to_vec());
    let error = cluster
        .client
        .put_reader("sizes", "shrank", data.len() as u64, shrank, &PutOptions::default())
        .await
        .expect_err("an input shorter than its size must fail the write");
    assert!(error.to_string().contains("ended before"), "{error}");
    assert_eq!(writes_in_progress(&cluster).await, 0, "a failed write is still in progress");
    for key in ["grew", "shrank"] {
        assert!(cluster.client.meta.get_object("sizes", key).await.is_err(), "{key} was committed");
    }
    let left: usize = (1..=4).map(|id| cluster.unit_files(id).len()).sum();
    assert_eq!(left, 0, "units of the failed writes were left on disk");

    // Unknown length: small in memory, large spooled; every byte stored.
    let small = cluster
        .client
        .put_unsized("sizes", "small", Cursor::new(data.clone()), &PutOptions::default())
        .await
        .unwrap();
    assert_eq!((small.data_bytes, small.spooled_bytes), (data.len() as u64, 0));
    assert_eq!(get(&cluster, "sizes", "small", None).await, data);
    let large = pattern(weft_client::IN_MEMORY_PUT_BYTES + 3 * CELL as usize + 1, 12);
    let coarse = PutOptions {
        policy: Some(serde_json::from_value(policy("rs(2,1)", 2, 256 << 10, 1 << 20)).unwrap()),
        ..PutOptions::default()
    };
    let stats = cluster
        .client
        .put_unsized("sizes", "large", Cursor::new(large.clone()).take(u64::MAX), &coarse)
        .await
        .unwrap();
    assert_eq!((stats.data_bytes, stats.spooled_bytes), (large.len() as u64, large.len() as u64));
    assert!(get(&cluster, "sizes", "large", None).await == large, "the spooled object differs");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn units_on_this_host_are_read_from_their_files_and_verified() {
    // The test's nodes listen on 127.0.0.1: their units are read through the descriptors
    // their local sockets hand out (unless WEFT_LOCAL_READS=off).
    if matches!(std::env::var("WEFT_LOCAL_READS").as_deref(), Ok("off") | Ok("0")) {
        return;
    }
    let cluster = TestCluster::start(5).await;
    cluster.create_bucket("bkt", policy("rs(3,2)", 3, CELL, BLOCK)).await;
    let data = pattern((7 * BLOCK + 1234) as usize, 41);
    put(&cluster, "bkt", "o", &data).await;
    let before = cluster.client.nodes.local_read_counts();
    assert_eq!(get(&cluster, "bkt", "o", None).await, data);
    assert_eq!(get(&cluster, "bkt", "o", Some((5000, 20_000))).await, data[5000..25_000]);
    let (hits, fallbacks) = cluster.client.nodes.local_read_counts();
    assert!(hits > before.0, "ranges were read from the unit files");
    assert_eq!(fallbacks, before.1, "nothing fell back to HTTP");
    // A flipped byte in a data unit: the local read finds the mismatch and falls back to
    // HTTP, where the node names the unit corrupt; the object still reads whole.
    let object = cluster.client.meta.get_object("bkt", "o").await.unwrap();
    let unit = &object.units[&weft_layout::UnitId::Data(0)];
    let files = cluster.unit_files(unit.node_id);
    let name = format!("{}.unit", unit.unit_key);
    let path = files.iter().find(|p| p.ends_with(&name)).expect("the unit's file");
    let mut bytes = std::fs::read(path).unwrap();
    let at = bytes.len() - 3;
    bytes[at] ^= 0x01;
    std::fs::write(path, &bytes).unwrap();
    let fresh = cluster.client.with_degraded_cache(0);
    let mut out = Vec::new();
    let stats = fresh.get("bkt", "o", None, &mut out, None).await.unwrap();
    assert_eq!(out, data);
    assert!(!stats.degraded_units.is_empty(), "the corrupt unit was rebuilt: {stats:?}");
    assert!(cluster.client.nodes.local_read_counts().1 > fallbacks, "the mismatch fell back");
}

/// A stored unit file is whole: its header decodes and names the file's unit, the data is
/// as long as the header says, and every segment matches its stored CRC-32C.
fn assert_unit_file_sound(path: &std::path::Path) {
    use weft_store::format::{decode_fixed, Header, FIXED_HEADER_BYTES};
    let bytes = std::fs::read(path).unwrap();
    let fixed = decode_fixed(&bytes[..FIXED_HEADER_BYTES]).unwrap();
    let header = Header::decode(&bytes[..fixed.header_bytes as usize]).unwrap();
    let name = path.file_name().unwrap().to_string_lossy();
    assert_eq!(format!("{}.unit", header.key), name);
    let data = &bytes[fixed.header_bytes as usize..];
    assert_eq!(data.len() as u64, header.len_bytes, "{name}: the file holds the unit exactly");
    let segments: Vec<u32> =
        data.chunks(weft_store::SEGMENT_BYTES as usize).map(crc32c::crc32c).collect();
    assert_eq!(segments, header.checksums, "{name}: every segment matches its checksum");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn units_on_this_host_are_written_into_their_files_with_their_checksums() {
    // The test's nodes listen on 127.0.0.1: the client writes their units through the temp
    // files' descriptors their local sockets hand out (unless WEFT_LOCAL_WRITES=off).
    if matches!(std::env::var("WEFT_LOCAL_WRITES").as_deref(), Ok("off") | Ok("0")) {
        return;
    }
    let cluster = TestCluster::start(5).await;
    cluster.create_bucket("bkt", policy("rs(3,2)", 3, CELL, BLOCK)).await;
    let before = cluster.client.nodes.local_write_counts();
    // Objects written whole (one group) and streamed (many groups, a short last block), with
    // units shorter than, equal to and longer than a segment and a write stage.
    let sizes = [1usize, 5000, 3 * BLOCK as usize, 7 * BLOCK as usize + 1234, 3_000_000];
    for (i, &len) in sizes.iter().enumerate() {
        let data = pattern(len, 60 + i as u64);
        put(&cluster, "bkt", &format!("o{i}"), &data).await;
        assert_eq!(get(&cluster, "bkt", &format!("o{i}"), None).await, data, "o{i}");
    }
    let (hits, fallbacks) = cluster.client.nodes.local_write_counts();
    assert!(hits >= before.0 + 5 * 5, "units were written locally: {hits}");
    assert_eq!(fallbacks, before.1, "no node refused a local write");
    let mut files = 0;
    for id in 1..=5u32 {
        for path in cluster.unit_files(id) {
            assert_unit_file_sound(&path);
            files += 1;
        }
        let tmp = cluster.disk_dir(id).join("tmp");
        let left: Vec<_> =
            std::fs::read_dir(&tmp).map(|d| d.flatten().collect()).unwrap_or_default();
        assert!(left.is_empty(), "node {id} keeps no temp file: {left:?}");
    }
    assert!(files as u64 >= hits - before.0, "{files} unit files");

    // A unit that exists already: refused as over HTTP (409), the stored one untouched.
    let object = cluster.client.meta.get_object("bkt", "o3").await.unwrap();
    let unit = object.units[&weft_layout::UnitId::Data(0)].clone();
    let again =
        cluster.client.nodes.put(&unit, bytes::Bytes::from(vec![7u8; unit.len as usize])).await;
    assert_eq!(again.unwrap_err().kind, weft_client::node::FailureKind::Exists);
    assert_eq!(get(&cluster, "bkt", "o3", None).await, pattern(sizes[3], 63));

    // A stream that ends before the unit's length: the write fails, the node drops the temp
    // file, and the key stays free.
    let mut fresh = unit.clone();
    fresh.unit_key = weft_wire::key::UnitKey::data(0xfeed, 0, 1).to_string();
    fresh.len = 300_000;
    fresh.digest = None;
    let (tx, rx) = tokio::sync::mpsc::channel(4);
    tx.send(bytes::Bytes::from(vec![1u8; 200_000])).await.unwrap();
    drop(tx);
    let short = cluster.client.nodes.put_stream(&fresh, fresh.len, rx).await;
    assert!(short.is_err(), "a short stream stores nothing");
    let (tx, rx) = tokio::sync::mpsc::channel(4);
    tx.send(bytes::Bytes::from(vec![2u8; 300_000])).await.unwrap();
    drop(tx);
    cluster.client.nodes.put_stream(&fresh, fresh.len, rx).await.expect("the key is free");
    let read = cluster.client.nodes.get_range(&fresh, 0, fresh.len).await.unwrap();
    assert!(read.iter().all(|&b| b == 2));
    let tmp = cluster.disk_dir(fresh.node_id).join("tmp");
    assert_eq!(std::fs::read_dir(&tmp).map(|d| d.count()).unwrap_or(0), 0);

    // Cells of 256 KiB: once a local write told where a unit's bytes fall in its file's
    // blocks, the next object's cells are read in that phase and written uncopied.
    let (cell, block) = (256 << 10, 1 << 20);
    cluster.create_bucket("wide", policy("rs(3,2)", 3, cell, block)).await;
    let len = 6 * block as usize + 3 * cell as usize + 777;
    let mut direct = Vec::new();
    for round in 0..3u64 {
        let data = pattern(len, 90 + round);
        let key = format!("p{round}");
        let stats = put(&cluster, "wide", &key, &data).await;
        assert!(
            stats.peak_buffer_bytes <= stats.buffer_bound_bytes,
            "peak {} > bound {}",
            stats.peak_buffer_bytes,
            stats.buffer_bound_bytes
        );
        direct.push(cluster.client.nodes.local_direct_bytes());
        assert_eq!(get(&cluster, "wide", &key, None).await, data, "{key}");
    }
    assert!(direct[2] > direct[0], "cells were written where they lay: {direct:?}");
    for id in 1..=5u32 {
        for path in cluster.unit_files(id) {
            assert_unit_file_sound(&path);
        }
    }
}
