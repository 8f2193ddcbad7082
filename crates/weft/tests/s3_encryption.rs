//! Encryption at rest through the S3 gateway of a real `weft up` (weft-s3 `sse` and
//! `encryption`): SSE-S3 and SSE-KMS with the AWS SDK for Rust on a plain-HTTP cluster,
//! SSE-C with raw signed requests on a `--tls` cluster.
//!
//! What could fail and is asserted: bytes identical (whole, ranged, across parts, copied
//! between modes); sizes S3 shows are plaintext sizes; the headers S3 answers; no unit file
//! on any node holds a 16-byte run of a sealed object's plaintext; a 1-byte range reads one
//! package (the gateway's read trace); a wrong or missing SSE-C key gets no data, and SSE-C
//! over plain HTTP is refused; KMS rotation keeps old objects readable.

use std::path::Path;

use crate::{
    common::{bytes, cluster::Cluster},
    s3_gateway::{default_client, error_of, get_bytes, raw_signed_with, s3_conf},
};
use aws_sdk_s3::{
    primitives::ByteStream,
    types::{
        CompletedMultipartUpload, CompletedPart, ServerSideEncryption,
        ServerSideEncryptionByDefault, ServerSideEncryptionConfiguration, ServerSideEncryptionRule,
    },
};
use serde_json::Value;

/// Stored bytes of a full package (64 KiB and its 16-byte tag).
const SEALED_PACKAGE: u64 = (64 << 10) + 16;

/// Every file under `dir`.
fn walk(dir: &Path) -> Vec<std::path::PathBuf> {
    let mut found = Vec::new();
    let mut pending = vec![dir.to_path_buf()];
    while let Some(path) = pending.pop() {
        if path.is_dir() {
            let entries = std::fs::read_dir(&path).unwrap();
            pending.extend(entries.filter_map(|e| e.ok().map(|e| e.path())));
        } else {
            found.push(path);
        }
    }
    found
}

/// Every file under the cluster's node directories (their unit files and anything else).
fn node_files(dir: &Path) -> Vec<std::path::PathBuf> {
    let under_node = |p: &Path| {
        let first = p.strip_prefix(dir).unwrap().components().next();
        first.is_some_and(|c| c.as_os_str().to_string_lossy().starts_with("node-"))
    };
    walk(dir).into_iter().filter(|p| under_node(p)).collect()
}

/// Asserts that no file on any node holds any 16-byte run of any of `sealed` (every run,
/// not a sample: each plaintext window is a set entry, each file window is looked up), and
/// that the nodes hold at least as many bytes as the plaintexts (they were stored there).
fn assert_sealed_on_disk(cluster: &Cluster, sealed: &[(&str, &[u8])]) {
    let window = |bytes: &[u8]| u128::from_le_bytes(bytes.try_into().unwrap());
    let mut runs = std::collections::HashMap::new();
    for (what, plain) in sealed {
        for (offset, run) in plain.windows(16).enumerate() {
            runs.entry(window(run)).or_insert((*what, offset));
        }
    }
    let mut stored = 0;
    for file in node_files(&cluster.dir()) {
        let content = std::fs::read(&file).unwrap();
        stored += content.len();
        if let Some((what, offset)) = content.windows(16).find_map(|w| runs.get(&window(w))) {
            panic!("{what}: the plaintext run at {offset} is in {}", file.display());
        }
    }
    let plain: usize = sealed.iter().map(|(_, p)| p.len()).sum();
    assert!(stored >= plain, "the nodes hold {stored} bytes of {plain} written");
}

/// Starts a second gateway over the cluster's meta with the cluster's master key and a
/// read trace at `trace`; returns it and its endpoint.
fn traced_gateway(cluster: &Cluster, trace: &Path) -> (std::process::Child, String) {
    use std::io::BufRead;
    let secret = cluster.dir().join("cluster.secret");
    let master = cluster.dir().join("sse.key");
    let mut gateway = std::process::Command::new(crate::common::cluster::weft_bin())
        .args(["serve", "s3", "--meta", &cluster.meta_url(), "--listen", "127.0.0.1:0"])
        .args(["--secret-file", secret.to_str().unwrap()])
        .args(["--master-key", master.to_str().unwrap()])
        .args(["--trace-reads", trace.to_str().unwrap()])
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    std::io::BufReader::new(gateway.stdout.take().unwrap()).read_line(&mut line).unwrap();
    let endpoint = line.trim().rsplit(' ').next().unwrap().to_owned();
    assert!(endpoint.starts_with("http://"), "{line}");
    (gateway, endpoint)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sse_s3_and_kms_objects_are_sealed_on_disk_and_open_whole_ranged_copied_and_completed() {
    let cluster = Cluster::start(4, &[]);
    let conf = s3_conf(&cluster);
    let s3 = default_client(&conf);
    s3.create_bucket().bucket("sealed").send().await.unwrap();
    let data = bytes(41, 300_000);
    let put = s3
        .put_object()
        .bucket("sealed")
        .key("s3")
        .server_side_encryption(ServerSideEncryption::Aes256)
        .body(ByteStream::from(data.clone()))
        .send()
        .await
        .unwrap();
    assert_eq!(put.server_side_encryption(), Some(&ServerSideEncryption::Aes256));
    assert_eq!(get_bytes(&s3, "sealed", "s3", None).await, data);
    for (start, end) in [(0, 0), (65_535, 65_536), (150_000, 150_000), (299_999, 299_999)] {
        let range = format!("bytes={start}-{end}");
        assert_eq!(
            get_bytes(&s3, "sealed", "s3", Some(&range)).await,
            data[start..=end],
            "{range}"
        );
    }
    let head = s3.head_object().bucket("sealed").key("s3").send().await.unwrap();
    assert_eq!(head.content_length(), Some(300_000));
    assert_eq!(head.server_side_encryption(), Some(&ServerSideEncryption::Aes256));
    let listed = s3.list_objects_v2().bucket("sealed").send().await.unwrap();
    assert_eq!(listed.contents()[0].size(), Some(300_000));
    // Nothing but sizes: `weft stat` shows the stored size (plaintext + a tag a package).
    let stat = cluster.stat("sealed/s3");
    assert_eq!(stat["size"], 300_000 + 16 * 5, "{stat}");

    // SSE-KMS: a key of weft's own, rotated; objects of either version open.
    let created = cluster.weft_json(&["kms", "key", "create", "photos", "--json"]);
    assert_eq!((created["id"].as_str(), created["version"].as_u64()), (Some("photos"), Some(1)));
    let kms_data = bytes(42, 200_000);
    let put_kms = |key: &'static str, body: Vec<u8>| {
        s3.put_object()
            .bucket("sealed")
            .key(key)
            .server_side_encryption(ServerSideEncryption::AwsKms)
            .ssekms_key_id("photos")
            .body(ByteStream::from(body))
            .send()
    };
    let put = put_kms("kms-1", kms_data.clone()).await.unwrap();
    assert_eq!(put.server_side_encryption(), Some(&ServerSideEncryption::AwsKms));
    assert_eq!(put.ssekms_key_id(), Some("photos"));
    let rotated = cluster.weft_json(&["kms", "key", "rotate", "photos", "--json"]);
    assert_eq!(rotated["version"], 2);
    put_kms("kms-2", kms_data[..1000].to_vec()).await.unwrap();
    assert_eq!(get_bytes(&s3, "sealed", "kms-1", None).await, kms_data);
    assert_eq!(get_bytes(&s3, "sealed", "kms-2", None).await, kms_data[..1000]);
    let listed = cluster.weft_json(&["kms", "key", "ls", "--json"]);
    assert_eq!(listed["keys"][0]["current_version"], 2, "{listed}");
    assert!(!listed.to_string().contains("sealed"), "ls shows no material: {listed}");
    let unknown = s3
        .put_object()
        .bucket("sealed")
        .key("nope")
        .server_side_encryption(ServerSideEncryption::AwsKms)
        .ssekms_key_id("no-such-key")
        .body(ByteStream::from(vec![1; 10]))
        .send()
        .await;
    assert_eq!(error_of(unknown), ("KMS.NotFoundException".into(), 400));

    // A multipart upload: parts sealed as they come, the object opened across them.
    let upload = s3
        .create_multipart_upload()
        .bucket("sealed")
        .key("parts")
        .server_side_encryption(ServerSideEncryption::Aes256)
        .send()
        .await
        .unwrap();
    assert_eq!(upload.server_side_encryption(), Some(&ServerSideEncryption::Aes256));
    let id = upload.upload_id().unwrap();
    let parts = [bytes(43, 5 << 20), bytes(44, 70_001)];
    let mut completed = Vec::new();
    for (index, part) in parts.iter().enumerate() {
        let number = index as i32 + 1;
        let answer = s3
            .upload_part()
            .bucket("sealed")
            .key("parts")
            .upload_id(id)
            .part_number(number)
            .body(ByteStream::from(part.clone()))
            .send()
            .await
            .unwrap();
        completed.push(
            CompletedPart::builder().part_number(number).e_tag(answer.e_tag().unwrap()).build(),
        );
    }
    let listed = s3.list_parts().bucket("sealed").key("parts").upload_id(id).send().await.unwrap();
    let sizes: Vec<i64> = listed.parts().iter().map(|p| p.size().unwrap()).collect();
    assert_eq!(sizes, [5 << 20, 70_001], "ListParts shows plaintext sizes");
    s3.complete_multipart_upload()
        .bucket("sealed")
        .key("parts")
        .upload_id(id)
        .multipart_upload(CompletedMultipartUpload::builder().set_parts(Some(completed)).build())
        .send()
        .await
        .unwrap();
    let whole = parts.concat();
    assert_eq!(get_bytes(&s3, "sealed", "parts", None).await, whole);
    let across = (5 << 20) - 5..(5 << 20) + 5;
    let range = format!("bytes={}-{}", across.start, across.end - 1);
    assert_eq!(get_bytes(&s3, "sealed", "parts", Some(&range)).await, whole[across]);
    let head = s3.head_object().bucket("sealed").key("parts").send().await.unwrap();
    assert_eq!(head.content_length(), Some(whole.len() as i64));
    assert_eq!(head.server_side_encryption(), Some(&ServerSideEncryption::Aes256));

    // Bucket default encryption: a PUT without SSE headers is sealed with the bucket's KMS key.
    let rule = ServerSideEncryptionRule::builder()
        .apply_server_side_encryption_by_default(
            ServerSideEncryptionByDefault::builder()
                .sse_algorithm(ServerSideEncryption::AwsKms)
                .kms_master_key_id("photos")
                .build()
                .unwrap(),
        )
        .build();
    let config = ServerSideEncryptionConfiguration::builder().rules(rule).build().unwrap();
    s3.put_bucket_encryption()
        .bucket("sealed")
        .server_side_encryption_configuration(config)
        .send()
        .await
        .unwrap();
    let default_data = bytes(45, 100_000);
    let put = s3
        .put_object()
        .bucket("sealed")
        .key("by-default")
        .body(ByteStream::from(default_data.clone()))
        .send()
        .await
        .unwrap();
    assert_eq!(put.server_side_encryption(), Some(&ServerSideEncryption::AwsKms));
    assert_eq!(put.ssekms_key_id(), Some("photos"));
    let got = s3.get_bucket_encryption().bucket("sealed").send().await.unwrap();
    let rules = got.server_side_encryption_configuration().unwrap().rules();
    let by_default = rules[0].apply_server_side_encryption_by_default().unwrap();
    assert_eq!(by_default.kms_master_key_id(), Some("photos"));
    let empty = s3.put_object().bucket("sealed").key("empty").body(ByteStream::from(vec![])).send();
    assert_eq!(empty.await.unwrap().server_side_encryption(), Some(&ServerSideEncryption::AwsKms));
    assert!(get_bytes(&s3, "sealed", "empty", None).await.is_empty());

    // Nodes hold no plaintext of any sealed object.
    let sealed: [(&str, &[u8]); 4] = [
        ("SSE-S3", &data),
        ("SSE-KMS", &kms_data),
        ("multipart", &whole),
        ("default", &default_data),
    ];
    assert_sealed_on_disk(&cluster, &sealed);

    // A 1-byte range reads one package's stored bytes (the gateway's read trace).
    let trace_dir = tempfile::tempdir().unwrap();
    let trace = trace_dir.path().join("reads.jsonl");
    let (mut gateway, endpoint) = traced_gateway(&cluster, &trace);
    let mut traced = conf.clone();
    traced["endpoint"] = Value::String(endpoint);
    let traced_s3 = default_client(&traced);
    let one = get_bytes(&traced_s3, "sealed", "parts", Some("bytes=5242881-5242881")).await;
    assert_eq!(one, whole[5_242_881..5_242_882]);
    let _ = gateway.kill();
    let _ = gateway.wait();
    let reads: Vec<Value> = std::fs::read_to_string(&trace)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(reads.len(), 1, "{reads:?}");
    let length = reads[0]["length"].as_u64().unwrap();
    assert!((17..=SEALED_PACKAGE).contains(&length), "a 1-byte GET read {length} stored bytes");

    // Copies between modes: sealed → clear (the copy has no encryption), clear → SSE-S3.
    s3.create_bucket().bucket("clear").send().await.unwrap();
    let copied = s3
        .copy_object()
        .bucket("clear")
        .key("from-kms")
        .copy_source("sealed/kms-1")
        .send()
        .await
        .unwrap();
    assert_eq!(copied.server_side_encryption(), None);
    assert_eq!(get_bytes(&s3, "clear", "from-kms", None).await, kms_data);
    let head = s3.head_object().bucket("clear").key("from-kms").send().await.unwrap();
    assert_eq!(head.server_side_encryption(), None);
    let resealed = s3
        .copy_object()
        .bucket("clear")
        .key("resealed")
        .copy_source("clear/from-kms")
        .server_side_encryption(ServerSideEncryption::Aes256)
        .send()
        .await
        .unwrap();
    assert_eq!(resealed.server_side_encryption(), Some(&ServerSideEncryption::Aes256));
    assert_eq!(get_bytes(&s3, "clear", "resealed", None).await, kms_data);

    // Deleting the bucket's default leaves new objects in clear.
    s3.delete_bucket_encryption().bucket("sealed").send().await.unwrap();
    let gone = s3.get_bucket_encryption().bucket("sealed").send().await;
    assert_eq!(error_of(gone), ("ServerSideEncryptionConfigurationNotFoundError".into(), 404));

    // SSE-C needs HTTPS: refused over plain HTTP before anything is stored.
    let refused = s3
        .put_object()
        .bucket("clear")
        .key("customer")
        .sse_customer_algorithm("AES256")
        .sse_customer_key("MDEyMzQ1Njc4OWFiY2RlZjAxMjM0NTY3ODlhYmNkZWY=")
        .body(ByteStream::from(vec![7; 100]))
        .send()
        .await;
    assert_eq!(error_of(refused), ("InvalidRequest".into(), 400));
    let absent = s3.head_object().bucket("clear").key("customer").send().await;
    assert_eq!(error_of(absent).1, 404);
}

/// SSE-C headers of the 32-byte `key`: algorithm, base64 key, base64 MD5 of the key.
fn customer_headers(key: &[u8; 32], prefix: &str) -> Vec<(String, String)> {
    use base64::Engine;
    use md5::{Digest, Md5};
    let b64 = |bytes: &[u8]| base64::engine::general_purpose::STANDARD.encode(bytes);
    vec![
        (format!("{prefix}algorithm"), "AES256".to_string()),
        (format!("{prefix}key"), b64(key)),
        (format!("{prefix}key-md5"), b64(&Md5::digest(key))),
    ]
}

#[test]
fn sse_c_objects_open_only_with_their_key_and_only_over_tls() {
    use sha2::{Digest, Sha256};
    let cluster = Cluster::start(3, &["--tls"]);
    let conf = s3_conf(&cluster);
    assert!(conf["endpoint"].as_str().unwrap().starts_with("https://"), "{conf}");
    let ca = cluster.dir().join("tls/ca.pem");
    let send = |method: &str, path: &str, body: Vec<u8>, headers: &[(String, String)]| {
        let declared = hex::encode(Sha256::digest(&body));
        let extra: Vec<(&str, String)> =
            headers.iter().map(|(n, v)| (n.as_str(), v.clone())).collect();
        raw_signed_with(&conf, method, path, body, &declared, &extra, Some(&ca))
    };
    assert!(send("PUT", "/customer", vec![], &[]).status().is_success());
    let key: [u8; 32] = bytes(47, 32).try_into().unwrap();
    let other: [u8; 32] = bytes(48, 32).try_into().unwrap();
    let sse_c = customer_headers(&key, "x-amz-server-side-encryption-customer-");
    let wrong = customer_headers(&other, "x-amz-server-side-encryption-customer-");
    let data = bytes(46, 200_000);
    let put = send("PUT", "/customer/obj", data.clone(), &sse_c);
    assert_eq!(put.status(), 200, "{:?}", put.text());
    assert_eq!(put.headers()["x-amz-server-side-encryption-customer-algorithm"], "AES256");
    assert_eq!(
        put.headers()["x-amz-server-side-encryption-customer-key-md5"].to_str().unwrap(),
        sse_c[2].1
    );
    // The right key opens it, whole and ranged.
    let got = send("GET", "/customer/obj", vec![], &sse_c);
    assert_eq!(got.status(), 200);
    assert_eq!(got.bytes().unwrap().to_vec(), data);
    let mut ranged = sse_c.clone();
    ranged.push(("range".into(), "bytes=131072-131072".into()));
    let got = send("GET", "/customer/obj", vec![], &ranged);
    assert_eq!(got.status(), 206);
    assert_eq!(got.bytes().unwrap().to_vec(), data[131_072..131_073]);
    // Without the key: 400; with another key: 403 — and no byte of the object either way.
    for (headers, status) in [(&Vec::new(), 400), (&wrong, 403)] {
        let got = send("GET", "/customer/obj", vec![], headers);
        assert_eq!(got.status(), status);
        let body = got.bytes().unwrap();
        assert!(!body.windows(16).any(|w| w == &data[..16]), "an error body holds no data");
        let head = send("HEAD", "/customer/obj", vec![], headers);
        assert_eq!(head.status(), status);
    }
    // The nodes hold no plaintext, and meta never the key: only its salted HMAC.
    assert_sealed_on_disk(&cluster, &[("SSE-C", &data)]);
    let mut meta_bytes = Vec::new();
    for file in walk(&cluster.dir().join("meta")) {
        meta_bytes.extend(std::fs::read(file).unwrap());
    }
    assert!(meta_bytes.len() > 1000, "meta's store is on disk");
    let secrets: [(&str, &[u8]); 3] = [
        ("key", &key),
        ("key in base64", sse_c[1].1.as_bytes()),
        ("key's MD5", sse_c[2].1.as_bytes()),
    ];
    for (what, secret) in secrets {
        let held = meta_bytes.windows(secret.len()).any(|w| w == secret);
        assert!(!held, "meta's store holds the {what}");
    }
    // A copy to SSE-S3 (the source opened with the copy-source key) opens without one.
    let mut copy = customer_headers(&key, "x-amz-copy-source-server-side-encryption-customer-");
    copy.push(("x-amz-copy-source".into(), "/customer/obj".into()));
    copy.push(("x-amz-server-side-encryption".into(), "AES256".into()));
    let copied = send("PUT", "/customer/copy", vec![], &copy);
    assert_eq!(copied.status(), 200, "{:?}", copied.text());
    let got = send("GET", "/customer/copy", vec![], &[]);
    assert_eq!(got.headers()["x-amz-server-side-encryption"], "AES256");
    assert_eq!(got.bytes().unwrap().to_vec(), data);
}
