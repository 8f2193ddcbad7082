//! `weft transition` on a real cluster (`weft up` processes): one object, a whole bucket with
//! a final IO summary, dry runs and refusals, every object byte-identical afterwards.

use crate::common::{bytes, cluster::Cluster};

/// rs(6,3), stripe width 3, 4 KiB cells, 16 KiB blocks.
const POLICY: [&str; 12] = [
    "--code",
    "rs",
    "--k",
    "6",
    "--r",
    "3",
    "--stripe-width",
    "3",
    "--cell",
    "4KiB",
    "--block",
    "16KiB",
];

#[test]
fn transition_one_object_then_a_whole_bucket() {
    let cluster = Cluster::start(20, &[]);
    let mut create = vec!["bucket", "create", "bkt", "--json"];
    create.extend(POLICY);
    cluster.weft_json(&create);
    let dir = tempfile::tempdir().unwrap();
    let mut stored = Vec::new();
    for i in 0..24u64 {
        let data = bytes(i, (i as usize * 37_000) % 400_000 + 1);
        let file = dir.path().join(format!("f{i}"));
        std::fs::write(&file, &data).unwrap();
        let key = format!("bkt/o{i:02}");
        cluster.weft_json(&["put", file.to_str().unwrap(), &key, "--json"]);
        stored.push((key, data));
    }
    let (first, data) = &stored[23];

    // Dry run: both predictions, nothing changes.
    let dry =
        cluster.weft_json(&["transition", first, "--k", "12", "--r", "3", "--dry-run", "--json"]);
    assert_eq!(dry["mode"], "regroup", "{dry}");
    assert_eq!(dry["dry_run"], true);
    assert!(dry["predicted"]["regroup"]["parity_bytes_written"].as_u64() > Some(0), "{dry}");
    let regroup_total: u64 = ["bytes_read", "parity_bytes_written", "relocated_bytes"]
        .iter()
        .map(|f| dry["predicted"]["regroup"][*f].as_u64().unwrap())
        .sum();
    let restripe_total: u64 =
        ["bytes_read", "data_bytes_written", "parity_bytes_written", "relocated_bytes"]
            .iter()
            .map(|f| dry["predicted"]["restripe"][*f].as_u64().unwrap())
            .sum();
    assert!(regroup_total < restripe_total, "{dry}");
    let stat = cluster.weft_json(&["stat", first, "--json"]);
    assert_eq!(stat["layout"]["code"], "rs(6,3)");

    // One object: the issue's JSON shape, measured.
    let one = cluster.weft_json(&["transition", first, "--k", "12", "--r", "3", "--json"]);
    for field in [
        "mode",
        "bytes_read",
        "data_bytes_written",
        "parity_bytes_written",
        "relocated_bytes",
        "network_bytes",
    ] {
        assert!(!one[field].is_null(), "{field} missing: {one}");
    }
    assert_eq!(one["data_bytes_written"], 0, "{one}");
    assert_eq!(one["bytes_read"], data.len() as u64, "{one}");
    assert_eq!(cluster.weft_json(&["stat", first, "--json"])["layout"]["code"], "rs(12,3)");
    assert_eq!(&cluster.get(first), data);

    // Refusals: nothing to change; a regroup that changes the striping.
    let none = cluster.weft(&["transition", first]);
    assert!(!none.status.success());
    let wider = cluster.weft(&["transition", first, "--stripe-width", "4", "--mode", "regroup"]);
    assert!(!wider.status.success());
    assert!(String::from_utf8_lossy(&wider.stderr).contains("restripe"), "{wider:?}");

    // The whole bucket to hh-xor+(6,3): the one already at rs(12,3) goes too.
    let all = cluster.weft_json(&[
        "transition",
        "--bucket",
        "bkt",
        "--code",
        "hh-xor+",
        "--k",
        "6",
        "--r",
        "3",
        "--json",
    ]);
    assert_eq!(all["objects"], 24, "{all}");
    assert_eq!(all["transitioned"], 24, "{all}");
    assert_eq!(all["failed"], 0, "{all}");
    assert_eq!(all["io"]["data_bytes_written"], 0, "{all}");
    let total: u64 = stored.iter().map(|(_, d)| d.len() as u64).sum();
    assert_eq!(all["io"]["bytes_read"], total, "every object read once: {all}");
    assert_eq!(all["bytes"], total, "the work done: {all}");
    // Issue 16 item 6: objects already at the target are no work: they count against no
    // rate (at 1 KiB/s this would otherwise sleep for hours) and not in "bytes".
    let again = cluster.weft_json(&[
        "transition",
        "--bucket",
        "bkt",
        "--code",
        "hh-xor+",
        "--k",
        "6",
        "--r",
        "3",
        "--rate",
        "1KiB",
        "--json",
    ]);
    assert_eq!(
        (again["transitioned"].as_u64(), again["already"].as_u64()),
        (Some(0), Some(24)),
        "{again}"
    );
    assert_eq!(
        (again["bytes"].as_u64(), again["already_bytes"].as_u64()),
        (Some(0), Some(total)),
        "{again}"
    );
    assert_eq!(again["bucket_bytes"], total, "{again}");
    for (key, data) in &stored {
        assert_eq!(cluster.weft_json(&["stat", key, "--json"])["layout"]["code"], "hh-xor+(6,3)");
        assert_eq!(&cluster.get(key), data, "{key}");
    }
    // A restripe to a new stripe width rewrites the data of an object with the policy's
    // striping: one of whole groups (four of 6 × 16 KiB), which is not fitted to its size.
    let big_data = bytes(99, 4 * 6 * 16384);
    let file = dir.path().join("whole");
    std::fs::write(&file, &big_data).unwrap();
    let big = &"bkt/whole".to_string();
    cluster.weft_json(&["put", file.to_str().unwrap(), big, "--json"]);
    let layout = &cluster.weft_json(&["stat", big, "--json"])["layout"];
    assert_eq!(
        (layout["stripe_width"].as_u64(), layout["block_bytes"].as_u64()),
        (Some(3), Some(16384))
    );
    let restripe = cluster.weft_json(&["transition", big, "--stripe-width", "4", "--json"]);
    assert_eq!(restripe["mode"], "restripe", "{restripe}");
    assert_eq!(restripe["data_bytes_written"], big_data.len() as u64, "{restripe}");
    assert_eq!(&cluster.get(big), &big_data);
    // A smaller object is written one way under either stripe width (fitted to its size:
    // one stripe of k blocks), so it is already there.
    let same = cluster.weft_json(&["transition", first, "--stripe-width", "4", "--json"]);
    assert_eq!(same["unchanged"], true, "{same}");
    assert_eq!(&cluster.get(first), data);
}
