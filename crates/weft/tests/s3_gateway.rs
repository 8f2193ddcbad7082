//! The S3 gateway of a real `weft up` (meta, nodes, repair executor and `weft serve s3` as
//! processes), driven by the AWS SDK for Rust over real sockets. Objects stay small so the
//! suite takes seconds; the acceptance sizes run in crates/weft-s3/scripts (from .ci/run).
//!
//! What could fail and is asserted: bytes identical (whole, ranged, copied, completed from
//! parts), listings exact page by page, ETags (MD5, md5-of-md5s-N), exact S3 error codes and
//! statuses, and that failed requests (bad signature, unknown key, bad Content-MD5) create
//! nothing; S3 and `weft get/ls` agree on what exists.

use crate::common::{bytes, cluster::Cluster};
use aws_sdk_s3::{
    config::{BehaviorVersion, Credentials, Region},
    primitives::ByteStream,
    types::{CompletedMultipartUpload, CompletedPart, Delete, ObjectIdentifier},
    Client,
};
use serde_json::Value;

/// rs(2,1), stripe width 2, 64 KiB cells, 256 KiB blocks: objects of a few hundred KiB
/// span several blocks and groups.
pub(crate) const POLICY: &str = "rs(2,1),stripe=2,cell=64K,block=256K";

fn md5_hex(data: &[u8]) -> String {
    use md5::{Digest, Md5};
    hex::encode(Md5::digest(data))
}

/// The cluster's S3 endpoint and default key, from DIR/s3.json.
pub(crate) fn s3_conf(cluster: &Cluster) -> Value {
    let text =
        std::fs::read_to_string(cluster.dir().join("s3.json")).expect("weft up wrote s3.json");
    serde_json::from_str(&text).expect("s3.json is JSON")
}

pub(crate) fn client(conf: &Value, access_key: &str, secret_key: &str) -> Client {
    let config = aws_sdk_s3::Config::builder()
        .behavior_version(BehaviorVersion::latest())
        .endpoint_url(conf["endpoint"].as_str().unwrap())
        .region(Region::new(conf["region"].as_str().unwrap().to_owned()))
        .credentials_provider(Credentials::new(access_key, secret_key, None, None, "test"))
        .force_path_style(true)
        .http_client(aws_smithy_http_client::Builder::new().build_http())
        .build();
    Client::from_conf(config)
}

pub(crate) fn default_client(conf: &Value) -> Client {
    client(conf, conf["access_key"].as_str().unwrap(), conf["secret_key"].as_str().unwrap())
}

/// The S3 error code and HTTP status of a failed SDK call.
pub(crate) fn error_of<E, R>(
    result: Result<impl std::fmt::Debug, aws_sdk_s3::error::SdkError<E, R>>,
) -> (String, u16)
where
    E: aws_sdk_s3::error::ProvideErrorMetadata + std::fmt::Debug,
    R: std::fmt::Debug,
    aws_sdk_s3::error::SdkError<E, R>: std::fmt::Debug,
{
    let error = result.expect_err("the call should fail");
    let status = match &error {
        aws_sdk_s3::error::SdkError::ServiceError(service) => {
            let raw: &R = service.raw();
            format!("{raw:?}")
        }
        other => panic!("not a service error: {other:?}"),
    };
    let code = aws_sdk_s3::error::ProvideErrorMetadata::code(&error).unwrap_or("").to_owned();
    // The raw response's Debug names its status as `StatusCode(NNN)`.
    let status = status
        .split("StatusCode(")
        .nth(1)
        .and_then(|rest| rest.get(..3))
        .and_then(|digits| digits.parse().ok())
        .unwrap_or(0);
    (code, status)
}

pub(crate) async fn get_bytes(
    s3: &Client,
    bucket: &str,
    key: &str,
    range: Option<&str>,
) -> Vec<u8> {
    let mut request = s3.get_object().bucket(bucket).key(key);
    if let Some(range) = range {
        request = request.range(range);
    }
    let answer = request.send().await.unwrap_or_else(|e| panic!("get {key} {range:?}: {e:?}"));
    answer.body.collect().await.unwrap().into_bytes().to_vec()
}

async fn list_all(
    s3: &Client,
    bucket: &str,
    prefix: Option<&str>,
    delimiter: Option<&str>,
    max_keys: i32,
) -> (Vec<String>, Vec<String>, usize) {
    let (mut keys, mut prefixes, mut pages) = (Vec::new(), Vec::new(), 0);
    let mut token: Option<String> = None;
    loop {
        let page = s3
            .list_objects_v2()
            .bucket(bucket)
            .set_prefix(prefix.map(str::to_owned))
            .set_delimiter(delimiter.map(str::to_owned))
            .max_keys(max_keys)
            .set_continuation_token(token.clone())
            .send()
            .await
            .expect("list");
        pages += 1;
        let page_keys: Vec<String> =
            page.contents().iter().filter_map(|o| o.key().map(str::to_owned)).collect();
        let page_prefixes: Vec<String> =
            page.common_prefixes().iter().filter_map(|p| p.prefix().map(str::to_owned)).collect();
        assert!(page_keys.len() + page_prefixes.len() <= max_keys as usize);
        assert_eq!(page.key_count(), Some((page_keys.len() + page_prefixes.len()) as i32));
        keys.extend(page_keys);
        prefixes.extend(page_prefixes);
        if page.is_truncated() != Some(true) {
            return (keys, prefixes, pages);
        }
        token = page.next_continuation_token().map(str::to_owned);
        assert!(token.is_some(), "a truncated page names the next");
    }
}

/// PutObject of `body` under `key` with `x-weft-policy: policy`.
async fn put_with_policy(
    s3: &Client,
    bucket: &str,
    key: &str,
    body: &'static [u8],
    policy: &'static str,
) -> Result<
    aws_sdk_s3::operation::put_object::PutObjectOutput,
    aws_sdk_s3::error::SdkError<aws_sdk_s3::operation::put_object::PutObjectError>,
> {
    s3.put_object()
        .bucket(bucket)
        .key(key)
        .body(ByteStream::from_static(body))
        .customize()
        .mutate_request(move |request| {
            request.headers_mut().insert("x-weft-policy", policy);
        })
        .send()
        .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn objects_round_trip_with_ranges_listings_copies_and_exact_errors() {
    let cluster = Cluster::start(4, &[]);
    let conf = s3_conf(&cluster);
    let s3 = default_client(&conf);
    let bucket = "photos";
    s3.create_bucket()
        .bucket(bucket)
        .customize()
        .mutate_request(|request| {
            request.headers_mut().insert("x-weft-policy", POLICY);
        })
        .send()
        .await
        .expect("create bucket");
    let buckets = s3.list_buckets().send().await.unwrap();
    let names: Vec<&str> = buckets.buckets().iter().filter_map(|b| b.name()).collect();
    assert_eq!(names, [bucket]);
    s3.head_bucket().bucket(bucket).send().await.expect("head bucket");
    assert_eq!(error_of(s3.head_bucket().bucket("nope-bucket").send().await).1, 404);
    // S3's naming rule (3–63 characters) and its error code; a policy the 4 nodes cannot
    // hold is the request's fault, and nothing is created either way.
    let short = error_of(s3.create_bucket().bucket("ab").send().await);
    assert_eq!(short, ("InvalidBucketName".to_owned(), 400));
    let wide = s3
        .create_bucket()
        .bucket("too-wide")
        .customize()
        .mutate_request(|request| {
            request.headers_mut().insert("x-weft-policy", "rs(6,3)");
        })
        .send()
        .await;
    assert_eq!(error_of(wide), ("InvalidArgument".to_owned(), 400));

    // Objects of 0 B, 1 B and several blocks, under two prefixes.
    let sizes = [0usize, 1, 300_000, 700_001, 65_536];
    let keys = ["a/empty", "a/one", "b/x/three", "b/y/seven", "top"];
    for (index, (&key, &size)) in keys.iter().zip(&sizes).enumerate() {
        let data = bytes(index as u64, size);
        let put = s3
            .put_object()
            .bucket(bucket)
            .key(key)
            .content_type("image/x-test")
            .metadata("origin", format!("test-{index}"))
            .body(ByteStream::from(data.clone()))
            .send()
            .await
            .unwrap_or_else(|e| panic!("put {key}: {e:?}"));
        assert_eq!(put.e_tag(), Some(format!("\"{}\"", md5_hex(&data)).as_str()));
        let head = s3.head_object().bucket(bucket).key(key).send().await.unwrap();
        assert_eq!(head.content_length(), Some(size as i64));
        assert_eq!(head.content_type(), Some("image/x-test"));
        assert_eq!(head.metadata().unwrap()["origin"], format!("test-{index}"));
        assert_eq!(get_bytes(&s3, bucket, key, None).await, data, "{key}");
        // weft's own CLI reads what S3 wrote.
        assert_eq!(cluster.get(&format!("{bucket}/{key}")), data, "weft get {key}");
    }

    let big = bytes(3, 700_001);
    for (range, expect) in [
        ("bytes=0-0", &big[..1]),
        ("bytes=700000-700000", &big[700_000..]),
        ("bytes=262140-262150", &big[262_140..262_151]),
        ("bytes=-70000", &big[700_001 - 70_000..]),
        ("bytes=600000-", &big[600_000..]),
    ] {
        assert_eq!(get_bytes(&s3, bucket, "b/y/seven", Some(range)).await, expect, "{range}");
    }
    let bad = s3.get_object().bucket(bucket).key("b/y/seven").range("bytes=700001-").send().await;
    assert_eq!(error_of(bad), ("InvalidRange".into(), 416));
    let no_bucket = s3
        .put_object()
        .bucket("no-such-bucket")
        .key("k")
        .body(ByteStream::from(bytes(5, 3 << 20)))
        .send()
        .await;
    assert_eq!(error_of(no_bucket), ("NoSuchBucket".into(), 404));
    let missing = s3.get_object().bucket(bucket).key("no/such").send().await;
    assert_eq!(error_of(missing), ("NoSuchKey".into(), 404));
    let etag = format!("\"{}\"", md5_hex(&big));
    let not_modified =
        s3.get_object().bucket(bucket).key("b/y/seven").if_none_match(&etag).send().await;
    assert_eq!(error_of(not_modified).1, 304);
    let failed = s3.get_object().bucket(bucket).key("b/y/seven").if_match("\"other\"").send().await;
    assert_eq!(error_of(failed), ("PreconditionFailed".into(), 412));

    // A weft put object is an S3 object too.
    let file = cluster.dir().join("from-weft.bin");
    let from_weft = bytes(9, 123_457);
    std::fs::write(&file, &from_weft).unwrap();
    let out = cluster.weft(&["put", file.to_str().unwrap(), &format!("{bucket}/w/from-weft")]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(get_bytes(&s3, bucket, "w/from-weft", None).await, from_weft);

    // Listings, page by page.
    let mut all: Vec<String> = keys.iter().map(|k| k.to_string()).collect();
    all.push("w/from-weft".into());
    all.sort();
    let (listed, prefixes, pages) = list_all(&s3, bucket, None, None, 2).await;
    assert_eq!((listed, prefixes, pages), (all.clone(), Vec::new(), 3));
    let (listed, prefixes, _) = list_all(&s3, bucket, None, Some("/"), 1).await;
    assert_eq!(listed, ["top"]);
    assert_eq!(prefixes, ["a/", "b/", "w/"]);
    let (listed, prefixes, _) = list_all(&s3, bucket, Some("b/"), Some("/"), 1000).await;
    assert_eq!((listed.len(), prefixes), (0, vec!["b/x/".to_owned(), "b/y/".to_owned()]));
    let (listed, _, _) = list_all(&s3, bucket, Some("a/"), None, 1000).await;
    assert_eq!(listed, ["a/empty", "a/one"]);

    // Copy keeps bytes and metadata; DeleteObjects removes exactly what it names.
    s3.copy_object()
        .bucket(bucket)
        .key("copies/seven")
        .copy_source(format!("{bucket}/b/y/seven"))
        .send()
        .await
        .expect("copy");
    assert_eq!(get_bytes(&s3, bucket, "copies/seven", None).await, big);
    let head = s3.head_object().bucket(bucket).key("copies/seven").send().await.unwrap();
    assert_eq!(head.metadata().unwrap()["origin"], "test-3");
    assert_eq!(head.e_tag(), Some(etag.as_str()));
    let doomed = ["a/one", "top", "not/there"];
    let delete = Delete::builder()
        .set_objects(Some(
            doomed.iter().map(|k| ObjectIdentifier::builder().key(*k).build().unwrap()).collect(),
        ))
        .build()
        .unwrap();
    let deleted = s3.delete_objects().bucket(bucket).delete(delete).send().await.unwrap();
    let mut names: Vec<&str> = deleted.deleted().iter().filter_map(|d| d.key()).collect();
    names.sort();
    assert_eq!(names, ["a/one", "not/there", "top"]);
    assert!(deleted.errors().is_empty());
    let (listed, _, _) = list_all(&s3, bucket, None, None, 1000).await;
    assert_eq!(listed, ["a/empty", "b/x/three", "b/y/seven", "copies/seven", "w/from-weft"]);
    let weft_ls = cluster.weft_json(&["ls", bucket, "--json"]);
    let weft_keys: Vec<&str> =
        weft_ls["objects"].as_array().unwrap().iter().map(|o| o["key"].as_str().unwrap()).collect();
    assert_eq!(weft_keys, listed, "weft ls and S3 agree");
    let not_empty = s3.delete_bucket().bucket(bucket).send().await;
    assert_eq!(error_of(not_empty), ("BucketNotEmpty".into(), 409));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn multipart_uploads_keys_and_failed_requests_that_create_nothing() {
    let cluster = Cluster::start(3, &[]);
    let conf = s3_conf(&cluster);
    let s3 = default_client(&conf);
    let bucket = "uploads";
    let out = cluster.weft(&["bucket", "create", bucket, "--k", "2", "--r", "1"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));

    // Two parts, the first uploaded twice; the object is their concatenation.
    let key = "big/object";
    let upload = s3
        .create_multipart_upload()
        .bucket(bucket)
        .key(key)
        .content_type("x/y")
        .send()
        .await
        .unwrap();
    let id = upload.upload_id().unwrap().to_owned();
    let part_one = bytes(1, 5 << 20);
    let part_two = bytes(2, 1234);
    let mut completed = Vec::new();
    for (number, data) in [(1, bytes(7, 5 << 20)), (1, part_one.clone()), (2, part_two.clone())] {
        let answer = s3
            .upload_part()
            .bucket(bucket)
            .key(key)
            .upload_id(&id)
            .part_number(number)
            .body(ByteStream::from(data.clone()))
            .send()
            .await
            .unwrap();
        assert_eq!(answer.e_tag(), Some(format!("\"{}\"", md5_hex(&data)).as_str()));
        completed.retain(|p: &CompletedPart| p.part_number() != Some(number));
        completed.push(
            CompletedPart::builder().part_number(number).e_tag(answer.e_tag().unwrap()).build(),
        );
    }
    let parts = s3.list_parts().bucket(bucket).key(key).upload_id(&id).send().await.unwrap();
    let sizes: Vec<(i32, i64)> =
        parts.parts().iter().map(|p| (p.part_number().unwrap(), p.size().unwrap())).collect();
    assert_eq!(sizes, [(1, 5 << 20), (2, 1234)]);
    let uploads = s3.list_multipart_uploads().bucket(bucket).send().await.unwrap();
    assert_eq!(
        uploads.uploads().iter().filter_map(|u| u.upload_id()).collect::<Vec<_>>(),
        [id.as_str()]
    );
    let done = s3
        .complete_multipart_upload()
        .bucket(bucket)
        .key(key)
        .upload_id(&id)
        .multipart_upload(CompletedMultipartUpload::builder().set_parts(Some(completed)).build())
        .send()
        .await
        .unwrap();
    let mut md5s = hex::decode(md5_hex(&part_one)).unwrap();
    md5s.extend(hex::decode(md5_hex(&part_two)).unwrap());
    assert_eq!(done.e_tag(), Some(format!("\"{}-2\"", md5_hex(&md5s)).as_str()));
    let mut whole = part_one.clone();
    whole.extend_from_slice(&part_two);
    assert_eq!(get_bytes(&s3, bucket, key, None).await, whole);
    assert_eq!(
        get_bytes(&s3, bucket, key, Some("bytes=5242879-5242880")).await,
        &whole[5_242_879..5_242_881]
    );
    assert_eq!(cluster.get(&format!("{bucket}/{key}")), whole, "weft get of a completed upload");
    assert!(s3.list_multipart_uploads().bucket(bucket).send().await.unwrap().uploads().is_empty());

    // A small middle part is refused; abort leaves no upload and no part object.
    let small = s3.create_multipart_upload().bucket(bucket).key("small").send().await.unwrap();
    let small_id = small.upload_id().unwrap().to_owned();
    let mut parts = Vec::new();
    for number in [1, 2] {
        let answer = s3
            .upload_part()
            .bucket(bucket)
            .key("small")
            .upload_id(&small_id)
            .part_number(number)
            .body(ByteStream::from(bytes(number as u64, 100)))
            .send()
            .await
            .unwrap();
        parts.push(
            CompletedPart::builder().part_number(number).e_tag(answer.e_tag().unwrap()).build(),
        );
    }
    let refused = s3
        .complete_multipart_upload()
        .bucket(bucket)
        .key("small")
        .upload_id(&small_id)
        .multipart_upload(CompletedMultipartUpload::builder().set_parts(Some(parts)).build())
        .send()
        .await;
    assert_eq!(error_of(refused), ("EntityTooSmall".into(), 400));
    s3.abort_multipart_upload()
        .bucket(bucket)
        .key("small")
        .upload_id(&small_id)
        .send()
        .await
        .unwrap();
    let gone = s3.list_parts().bucket(bucket).key("small").upload_id(&small_id).send().await;
    assert_eq!(error_of(gone), ("NoSuchUpload".into(), 404));
    let internal = cluster.weft_json(&["ls", ".weft-s3-parts", "--json"]);
    assert_eq!(internal["objects"], serde_json::json!([]), "abort and complete leave no part");

    // A key from `weft key create --json` works; a wrong secret or an unknown key does not,
    // and neither creates anything.
    let key_json = cluster.weft_json(&["key", "create", "tester", "--json"]);
    let (access, secret) =
        (key_json["access_key"].as_str().unwrap(), key_json["secret_key"].as_str().unwrap());
    let tester = client(&conf, access, secret);
    // The bucket (made by `weft bucket create`) has no owner until an ACL is set: the one
    // who sets it owns it, and grants the other users what they do below.
    s3.put_bucket_acl().bucket(bucket).grant_full_control("id=\"tester\"").send().await.unwrap();
    // The bucket's default policy, changed with `weft bucket policy`, applies to S3 writes;
    // `x-weft-policy` chooses one object's.
    let changed = cluster.weft_json(&["bucket", "policy", bucket, "--stripe-width", "1", "--json"]);
    assert_eq!(changed["default_policy"]["stripe_width"], 1);
    assert_eq!(changed["default_policy"]["code"], "rs(2,1)");
    let block = changed["default_policy"]["block_bytes"].as_u64().unwrap();
    tester
        .put_object()
        .bucket(bucket)
        .key("by-tester")
        // k blocks, so the object takes the policy's own layout (a smaller one would be
        // fitted to its size).
        .body(ByteStream::from(vec![b'h'; 2 * block as usize]))
        .send()
        .await
        .unwrap();
    let stat = cluster.stat(&format!("{bucket}/by-tester"));
    assert_eq!(
        (stat["layout"]["code"].as_str(), stat["layout"]["stripe_width"].as_u64()),
        (Some("rs(2,1)"), Some(1)),
        "{stat}"
    );
    // Issue 15 item 3: a key may choose a policy only when created with --allow-policy;
    // otherwise every request carrying x-weft-policy is AccessDenied and writes nothing.
    let with_policy = |header: &'static str| {
        move |request: &mut aws_sdk_s3::config::http::HttpRequest| {
            request.headers_mut().insert("x-weft-policy", header);
        }
    };
    let refused = put_with_policy(&tester, bucket, "by-header", b"hello", "rs(1,2),stripe=1").await;
    let (code, status) = error_of(refused);
    assert_eq!((code.as_str(), status), ("AccessDenied", 403));
    let missing = tester.head_object().bucket(bucket).key("by-header").send().await;
    assert_eq!(error_of(missing).1, 404, "a refused put writes nothing");
    let refused = tester
        .create_multipart_upload()
        .bucket(bucket)
        .key("by-header")
        .customize()
        .mutate_request(with_policy("rs(1,2)"))
        .send()
        .await;
    assert_eq!(error_of(refused), ("AccessDenied".into(), 403));
    let refused = tester
        .copy_object()
        .bucket(bucket)
        .key("by-header")
        .copy_source(format!("{bucket}/by-tester"))
        .customize()
        .mutate_request(with_policy("rs(1,2)"))
        .send()
        .await;
    assert_eq!(error_of(refused), ("AccessDenied".into(), 403));
    let refused = tester
        .create_bucket()
        .bucket("tester-bucket")
        .customize()
        .mutate_request(with_policy("rs(1,2)"))
        .send()
        .await;
    assert_eq!(error_of(refused), ("AccessDenied".into(), 403));
    assert_eq!(error_of(s3.head_bucket().bucket("tester-bucket").send().await).1, 404);
    let listed = cluster.weft_json(&["key", "ls", "--json"]);
    let tester_listed =
        listed["keys"].as_array().unwrap().iter().find(|k| k["access_key"] == access);
    assert_eq!(tester_listed.unwrap()["may_set_policy"], false, "{listed}");

    let ops_json = cluster.weft_json(&["key", "create", "ops", "--allow-policy", "--json"]);
    assert_eq!(ops_json["may_set_policy"], true, "{ops_json}");
    let ops = client(
        &conf,
        ops_json["access_key"].as_str().unwrap(),
        ops_json["secret_key"].as_str().unwrap(),
    );
    let both = "id=\"tester\", id=\"ops\"";
    s3.put_bucket_acl().bucket(bucket).grant_full_control(both).send().await.unwrap();
    put_with_policy(&ops, bucket, "by-header", b"hello", "rs(1,2),stripe=1").await.unwrap();
    let stat = cluster.stat(&format!("{bucket}/by-header"));
    assert_eq!(stat["layout"]["code"].as_str(), Some("rs(1,2)"), "{stat}");
    let refused = put_with_policy(&ops, bucket, "bad-policy", b"x", "rs(2,1),width=3").await;
    assert_eq!(error_of(refused), ("InvalidArgument".into(), 400));
    let tiny = put_with_policy(&ops, bucket, "tiny-cells", b"x", "rs(2,1),cell=1,block=1").await;
    assert_eq!(error_of(tiny).1, 400, "cells under 4 KiB are refused even to allowed keys");
    let wrong = client(&conf, access, "0000000000000000000000000000000000000000");
    let refused = wrong
        .put_object()
        .bucket(bucket)
        .key("nope1")
        .body(ByteStream::from_static(b"x"))
        .send()
        .await;
    assert_eq!(error_of(refused), ("SignatureDoesNotMatch".into(), 403));
    let unknown = client(&conf, "WKNOSUCHKEY000000000", secret);
    let refused = unknown
        .put_object()
        .bucket(bucket)
        .key("nope2")
        .body(ByteStream::from_static(b"x"))
        .send()
        .await;
    assert_eq!(error_of(refused), ("InvalidAccessKeyId".into(), 403));
    let refused = s3
        .put_object()
        .bucket(bucket)
        .key("nope3")
        .content_md5("AAAAAAAAAAAAAAAAAAAAAA==")
        .body(ByteStream::from(bytes(4, 200_000)))
        .send()
        .await;
    assert_eq!(error_of(refused), ("BadDigest".into(), 400));
    // A body of 1 MiB or more is hashed on a thread of its own: a wrong Content-MD5 is still
    // refused before anything commits, and a right one commits with its MD5 as ETag.
    let large = bytes(6, 1_500_000);
    let refused = s3
        .put_object()
        .bucket(bucket)
        .key("nope4")
        .content_md5("AAAAAAAAAAAAAAAAAAAAAA==")
        .body(ByteStream::from(large.clone()))
        .send()
        .await;
    assert_eq!(error_of(refused), ("BadDigest".into(), 400));
    let (listed, _, _) = list_all(&s3, bucket, None, None, 1000).await;
    assert_eq!(listed, ["big/object", "by-header", "by-tester"], "failed requests created nothing");
    use base64::Engine as _;
    let right = {
        use md5::{Digest, Md5};
        base64::engine::general_purpose::STANDARD.encode(Md5::digest(&large))
    };
    let put = s3
        .put_object()
        .bucket(bucket)
        .key("large-with-md5")
        .content_md5(right)
        .body(ByteStream::from(large.clone()))
        .send()
        .await
        .expect("a right Content-MD5 is taken");
    assert_eq!(put.e_tag(), Some(format!("\"{}\"", md5_hex(&large)).as_str()));
}

/// Issue 17: a gateway started with `--trace-reads` appends every GET's range as one JSON
/// line (the advisor's input), and its degraded-read cache flag is taken.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gateway_records_its_reads_in_a_trace() {
    use std::io::BufRead;
    let cluster = Cluster::start(4, &[]);
    let conf = s3_conf(&cluster);
    let dir = tempfile::tempdir().unwrap();
    let trace = dir.path().join("reads.jsonl");
    let secret = cluster.dir().join("cluster.secret");
    let mut gateway = std::process::Command::new(crate::common::cluster::weft_bin())
        .args(["serve", "s3", "--meta", &cluster.meta_url(), "--listen", "127.0.0.1:0"])
        .args(["--secret-file", secret.to_str().unwrap()])
        .args(["--trace-reads", trace.to_str().unwrap(), "--degraded-cache", "1MiB"])
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    std::io::BufReader::new(gateway.stdout.take().unwrap()).read_line(&mut line).unwrap();
    let endpoint = line.trim().rsplit(' ').next().unwrap().to_owned();
    assert!(endpoint.starts_with("http://"), "{line}");
    let mut traced_conf = conf.clone();
    traced_conf["endpoint"] = Value::String(endpoint);
    let s3 = default_client(&traced_conf);
    s3.create_bucket().bucket("traced").send().await.expect("create bucket");
    let data = bytes(5, 300_000);
    s3.put_object()
        .bucket("traced")
        .key("a/b")
        .body(ByteStream::from(data.clone()))
        .send()
        .await
        .unwrap();
    assert_eq!(get_bytes(&s3, "traced", "a/b", Some("bytes=1000-1999")).await, data[1000..2000]);
    assert_eq!(get_bytes(&s3, "traced", "a/b", None).await, data);
    let _ = gateway.kill();
    let _ = gateway.wait();
    let lines: Vec<Value> = std::fs::read_to_string(&trace)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let reads: Vec<(u64, u64)> = lines
        .iter()
        .map(|l| (l["offset"].as_u64().unwrap(), l["length"].as_u64().unwrap()))
        .collect();
    assert_eq!(reads, [(1000, 1000), (0, 300_000)], "{lines:?}");
    for line in &lines {
        assert_eq!((line["bucket"].as_str(), line["key"].as_str()), (Some("traced"), Some("a/b")));
        assert_eq!(line["object_size"], 300_000);
        assert!(line["timestamp"].as_f64().unwrap() > 1.7e9, "{line}");
    }
}

/// Milliseconds since the epoch, now.
fn now_ms() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_millis() as u64
}

/// Every (key, version id, is delete marker) of a bucket.
async fn versions_of(s3: &Client, bucket: &str) -> Vec<(String, String, bool)> {
    let listed = s3.list_object_versions().bucket(bucket).send().await.expect("list versions");
    let mut all: Vec<(String, String, bool)> = listed
        .versions()
        .iter()
        .map(|v| (v.key().unwrap().to_owned(), v.version_id().unwrap().to_owned(), false))
        .chain(
            listed
                .delete_markers()
                .iter()
                .map(|m| (m.key().unwrap().to_owned(), m.version_id().unwrap().to_owned(), true)),
        )
        .collect();
    all.sort();
    all
}

/// Lifecycle rules as set through S3 and carried out by a pass at chosen times (the
/// executor's own pass is off: `--lifecycle-interval 0`), with 10 s days so that "later"
/// is a few tens of seconds: expiration by prefix and by size, a disabled rule that does
/// nothing, aborted uploads, noncurrent versions, a lone delete marker, and object lock,
/// which no rule gets past.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lifecycle_rules_remove_what_they_cover_when_due_and_never_a_locked_version() {
    use aws_sdk_s3::types::{
        AbortIncompleteMultipartUpload, BucketLifecycleConfiguration, BucketVersioningStatus,
        ExpirationStatus, LifecycleExpiration, LifecycleRule, LifecycleRuleFilter,
        NoncurrentVersionExpiration, ObjectLockLegalHoldStatus, VersioningConfiguration,
    };
    use weft_s3::lifecycle::{run_pass, PassOptions};
    const DAY: u64 = 10_000;
    let cluster = Cluster::start(4, &["--lifecycle-interval", "0"]);
    let conf = s3_conf(&cluster);
    let s3 = default_client(&conf);
    let weft = weft_client::Client::new(&cluster.meta_url(), &cluster.secret()).unwrap();
    let pass = |at: u64| {
        let weft = weft.clone();
        async move { run_pass(&weft, &PassOptions { now_ms: at, day_ms: DAY }).await.unwrap() }
    };
    let rule = |id: &str, filter: LifecycleRuleFilter, enabled: bool| {
        LifecycleRule::builder().id(id).filter(filter).status(if enabled {
            ExpirationStatus::Enabled
        } else {
            ExpirationStatus::Disabled
        })
    };
    let prefix = |p: &str| LifecycleRuleFilter::builder().prefix(p).build();
    let days = |d: i32| LifecycleExpiration::builder().days(d).build();

    // An unversioned bucket: prefix and size rules, a disabled rule, uploads.
    s3.create_bucket().bucket("plain").send().await.unwrap();
    for (key, size) in [("tmp/a", 10), ("tmp/b", 10), ("keep/c", 10), ("big", 5000), ("small", 10)]
    {
        let body = ByteStream::from(vec![7u8; size]);
        s3.put_object().bucket("plain").key(key).body(body).send().await.unwrap();
    }
    let started = now_ms();
    let upload = |key: &'static str| s3.create_multipart_upload().bucket("plain").key(key).send();
    upload("up/x").await.unwrap();
    upload("other/y").await.unwrap();
    let rules = [
        rule("tmp", prefix("tmp/"), true).expiration(days(1)).build().unwrap(),
        rule("large", LifecycleRuleFilter::builder().object_size_greater_than(1000).build(), true)
            .expiration(days(2))
            .build()
            .unwrap(),
        rule("off", prefix("keep/"), false).expiration(days(1)).build().unwrap(),
        rule("uploads", prefix("up/"), true)
            .abort_incomplete_multipart_upload(
                AbortIncompleteMultipartUpload::builder().days_after_initiation(1).build(),
            )
            .build()
            .unwrap(),
    ];
    let config = BucketLifecycleConfiguration::builder().set_rules(Some(rules.to_vec())).build();
    s3.put_bucket_lifecycle_configuration()
        .bucket("plain")
        .lifecycle_configuration(config.unwrap())
        .send()
        .await
        .unwrap();
    let keys = || async { list_all(&s3, "plain", None, None, 1000).await.0 };
    let uploads = || async {
        let listed = s3.list_multipart_uploads().bucket("plain").send().await.unwrap();
        listed.uploads().iter().map(|u| u.key().unwrap().to_owned()).collect::<Vec<_>>()
    };

    let early = pass(started).await;
    assert_eq!((early.buckets, early.expired, early.uploads_aborted), (1, 0, 0), "{early:?}");
    assert_eq!(keys().await, ["big", "keep/c", "small", "tmp/a", "tmp/b"]);

    let one_day = pass(started + DAY + 2_000).await;
    assert_eq!(
        (one_day.expired, one_day.uploads_aborted, one_day.errors),
        (2, 1, 0),
        "{one_day:?}"
    );
    assert_eq!(keys().await, ["big", "keep/c", "small"], "tmp/ expired, big is 1 day short");
    assert_eq!(uploads().await, ["other/y"], "only the upload under up/ was aborted");

    let three_days = pass(started + 3 * DAY).await;
    assert_eq!(three_days.expired, 1, "{three_days:?}");
    assert_eq!(keys().await, ["keep/c", "small"], "the disabled rule kept keep/c");

    // A versioned bucket with object lock: noncurrent versions go when due, unless locked.
    s3.create_bucket().bucket("locked").object_lock_enabled_for_bucket(true).send().await.unwrap();
    let mut ids = Vec::new();
    for (i, hold) in [false, true, false, false].into_iter().enumerate() {
        let mut put =
            s3.put_object().bucket("locked").key("k").body(ByteStream::from(vec![i as u8; 10]));
        if hold {
            put = put.object_lock_legal_hold_status(ObjectLockLegalHoldStatus::On);
        }
        ids.push(put.send().await.unwrap().version_id().unwrap().to_owned());
    }
    let noncurrent = NoncurrentVersionExpiration::builder().noncurrent_days(1).build();
    let rules = [rule("old", prefix(""), true)
        .noncurrent_version_expiration(noncurrent)
        .expiration(days(5))
        .build()
        .unwrap()];
    let config = BucketLifecycleConfiguration::builder().set_rules(Some(rules.to_vec())).build();
    s3.put_bucket_lifecycle_configuration()
        .bucket("locked")
        .lifecycle_configuration(config.unwrap())
        .send()
        .await
        .unwrap();
    let written = now_ms();
    let report = pass(written + 2 * DAY).await;
    assert_eq!((report.noncurrent_removed, report.kept_locked), (2, 1), "{report:?}");
    let left = versions_of(&s3, "locked").await;
    let mut want =
        vec![("k".to_owned(), ids[1].clone(), false), ("k".to_owned(), ids[3].clone(), false)];
    want.sort();
    assert_eq!(left, want, "the held version stays, the unlocked noncurrent ones went");
    // Five days on, the current version expires behind a delete marker; the held one stays.
    let report = pass(written + 6 * DAY).await;
    assert_eq!(report.expired, 1, "{report:?}");
    let left = versions_of(&s3, "locked").await;
    assert_eq!(left.iter().filter(|v| v.2).count(), 1, "a delete marker: {left:?}");
    assert!(left.iter().any(|v| v.1 == ids[1]), "{left:?}");

    // A delete marker left alone goes with ExpiredObjectDeleteMarker.
    s3.create_bucket().bucket("markers").send().await.unwrap();
    let enabled = VersioningConfiguration::builder().status(BucketVersioningStatus::Enabled);
    s3.put_bucket_versioning()
        .bucket("markers")
        .versioning_configuration(enabled.build())
        .send()
        .await
        .unwrap();
    let put = s3.put_object().bucket("markers").key("m").body(ByteStream::from_static(b"x"));
    let version = put.send().await.unwrap().version_id().unwrap().to_owned();
    s3.delete_object().bucket("markers").key("m").send().await.unwrap();
    let marker_rule = rule("markers", prefix(""), true)
        .expiration(LifecycleExpiration::builder().expired_object_delete_marker(true).build())
        .build()
        .unwrap();
    let config = BucketLifecycleConfiguration::builder().rules(marker_rule).build();
    s3.put_bucket_lifecycle_configuration()
        .bucket("markers")
        .lifecycle_configuration(config.unwrap())
        .send()
        .await
        .unwrap();
    let report = pass(now_ms()).await;
    assert_eq!(report.markers_removed, 0, "a marker with a version behind it stays");
    s3.delete_object().bucket("markers").key("m").version_id(&version).send().await.unwrap();
    let report = pass(now_ms()).await;
    assert_eq!(report.markers_removed, 1, "{report:?}");
    assert_eq!(versions_of(&s3, "markers").await, []);

    // The configuration reads back as given; a deleted one is gone.
    let got = s3.get_bucket_lifecycle_configuration().bucket("plain").send().await.unwrap();
    let ids: Vec<&str> = got.rules().iter().map(|r| r.id().unwrap()).collect();
    assert_eq!(ids, ["tmp", "large", "off", "uploads"]);
    s3.delete_bucket_lifecycle().bucket("plain").send().await.unwrap();
    let (code, status) =
        error_of(s3.get_bucket_lifecycle_configuration().bucket("plain").send().await);
    assert_eq!((code.as_str(), status), ("NoSuchLifecycleConfiguration", 404));
}

/// Issue 22 item 4: `weft bench s3` drives the gateway with its own SigV4 requests (signed
/// and unsigned payloads), verifies every GET, reads the cluster's server CPU from weft up's
/// cluster.json, and leaves nothing behind; bad targets are clear errors.
#[test]
fn bench_s3_measures_puts_and_verified_gets_with_server_cpu_and_cleans_up() {
    let cluster = Cluster::start(4, &[]);
    for payload in ["signed", "unsigned"] {
        let output = cluster.weft(&[
            "bench",
            "s3",
            "--object-sizes",
            "300KiB,70000",
            "--clients",
            "1,3",
            "--duration",
            "400ms",
            "--policy",
            "rs(2,1)",
            "--payload",
            payload,
            "--json",
        ]);
        assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
        let rows: Vec<Value> = serde_json::from_slice(&output.stdout).unwrap();
        // Two sizes × two client counts × put and get, weft only.
        assert_eq!(rows.len(), 8, "{rows:?}");
        for row in &rows {
            assert_eq!(row["target"], "weft", "{row}");
            assert!(row["requests"].as_u64().unwrap() >= 1, "{row}");
            assert!(row["mib_per_s"].as_f64().unwrap() > 0.0, "{row}");
            // The gateway, nodes and meta did the work: their CPU is seen.
            assert!(row["server_cpu_s_per_gib"].as_f64().unwrap() > 0.0, "{row}");
            // ...split by role: the gateway and the nodes each did some of it, and the
            // roles add up to the total.
            let roles = row["server_cpu_s_per_gib_by_role"].as_object().unwrap();
            for role in ["s3", "node", "meta"] {
                assert!(roles.contains_key(role), "{row}");
            }
            assert!(roles["s3"].as_f64().unwrap() > 0.0, "{row}");
            let sum: f64 = roles.values().map(|v| v.as_f64().unwrap()).sum();
            let total = row["server_cpu_s_per_gib"].as_f64().unwrap();
            assert!((sum - total).abs() <= 0.01 * total + 0.01, "{sum} vs {total}: {row}");
            assert!(row["p99_ms"].as_f64().unwrap() >= row["p50_ms"].as_f64().unwrap(), "{row}");
            assert!(row.get("throughput_ratio").is_none(), "{row}");
            // The machine it ran on: this one.
            let cores = std::thread::available_parallelism().unwrap().get() as u64;
            assert_eq!(row["machine"]["cores"].as_u64(), Some(cores), "{row}");
            assert!(!row["machine"]["cpu"].as_str().unwrap().is_empty(), "{row}");
            #[cfg(target_arch = "x86_64")]
            {
                let features = row["machine"]["features"].as_array().unwrap();
                let avx2 = features.contains(&serde_json::json!("avx2"));
                assert_eq!(avx2, std::is_x86_feature_detected!("avx2"), "{row}");
            }
            // What the nodes' disks grew by per byte put: rs(2,1)'s 1.5, plus unit headers,
            // within the 5% the issue allows; reads store nothing.
            match row["op"].as_str().unwrap() {
                "put" => {
                    let stored = row["stored_bytes_per_user_byte"].as_f64().unwrap();
                    assert!((1.5..=1.575).contains(&stored), "{row}");
                }
                _ => assert!(row.get("stored_bytes_per_user_byte").is_none(), "{row}"),
            }
        }
        let sizes: Vec<u64> = rows.iter().map(|r| r["object_size"].as_u64().unwrap()).collect();
        assert!(sizes.contains(&307_200) && sizes.contains(&70_000), "{sizes:?}");
    }
    // --checksum: every PUT carries a signed x-amz-checksum-crc32c the gateway checks (a
    // wrong value or signature would fail the run), side by side with PUTs without one.
    let output = cluster.weft(&[
        "bench",
        "s3",
        "--object-sizes",
        "300KiB",
        "--clients",
        "1",
        "--duration",
        "300ms",
        "--ops",
        "put",
        "--checksum",
        "crc32c",
        "--compare-checksum",
        "--json",
    ]);
    assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
    let rows: Vec<Value> = serde_json::from_slice(&output.stdout).unwrap();
    let named: Vec<(&str, Option<&str>)> =
        rows.iter().map(|r| (r["target"].as_str().unwrap(), r["checksum"].as_str())).collect();
    assert_eq!(named, [("weft-crc32c", Some("CRC32C")), ("weft", None)], "{rows:?}");
    assert!(rows[0]["throughput_ratio"].as_f64().unwrap() > 0.0, "{rows:?}");
    assert!(rows.iter().all(|r| r["requests"].as_u64().unwrap() >= 1), "{rows:?}");
    // The bucket was made with the policy asked, and every object written was deleted.
    let bucket = cluster.weft_json(&["bucket", "policy", "bench-s3", "--json"]);
    assert_eq!(bucket["default_policy"]["code"], "rs(2,1)", "{bucket}");
    let left = cluster.weft_json(&["ls", "bench-s3", "--json"]);
    assert_eq!(left["objects"], serde_json::json!([]), "{left}");

    // A wrong secret is refused by the gateway and reported, not measured.
    let refused = cluster.weft(&[
        "bench",
        "s3",
        "--object-sizes",
        "4KiB",
        "--clients",
        "1",
        "--duration",
        "100ms",
        "--secret-key",
        "not-the-secret",
    ]);
    assert!(!refused.status.success());
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert!(stderr.contains("403"), "{stderr}");
    // A peer that is not installed is named, with where to get it, and the drives made
    // for it are removed again.
    let tmp = cluster.dir().join("bench-tmp");
    std::fs::create_dir_all(&tmp).unwrap();
    // The drives of a bench killed before it could remove them (no such pid) go too.
    let abandoned = tmp.join(format!("weft-bench-minio-{}", u32::MAX - 1));
    std::fs::create_dir_all(abandoned.join("d1")).unwrap();
    let missing = std::process::Command::new(crate::common::cluster::weft_bin())
        .args(["bench", "s3", "--duration", "100ms", "--compare", "minio"])
        .args(["--minio-bin", "/nonexistent/minio"])
        .env("WEFT_META", cluster.meta_url())
        .env("WEFT_SECRET_FILE", cluster.secret_file())
        .env("TMPDIR", &tmp)
        .output()
        .unwrap();
    assert!(!missing.status.success());
    let stderr = String::from_utf8_lossy(&missing.stderr);
    assert!(stderr.contains("go build") && stderr.contains("/nonexistent/minio"), "{stderr}");
    let left: Vec<_> = std::fs::read_dir(&tmp).unwrap().collect();
    assert!(left.is_empty(), "left behind in TMPDIR: {left:?}");

    signed_payloads_are_checked_once_and_unsigned_bytes_never_stored(&cluster);

    // --down-nodes stops nodes for good, so it takes one cell and no peer.
    let refused = cluster.weft(&["bench", "s3", "--clients", "1,8", "--down-nodes", "1"]);
    assert!(!refused.status.success());
    assert!(String::from_utf8_lossy(&refused.stderr).contains("one --clients"));
    // Degraded: after the healthy get, one of the four nodes is stopped and the get phase
    // runs again, every byte still verified; its row follows the healthy one.
    let output = cluster.weft(&[
        "bench",
        "s3",
        "--object-sizes",
        "300KiB",
        "--clients",
        "2",
        "--duration",
        "400ms",
        "--down-nodes",
        "1",
        "--json",
    ]);
    assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
    let rows: Vec<Value> = serde_json::from_slice(&output.stdout).unwrap();
    let ops: Vec<(&str, &str)> =
        rows.iter().map(|r| (r["target"].as_str().unwrap(), r["op"].as_str().unwrap())).collect();
    assert_eq!(ops, [("weft", "put"), ("weft", "get"), ("weft-down", "get")], "{rows:?}");
    let degraded = &rows[2];
    assert_eq!(degraded["down_nodes"], 1, "{degraded}");
    assert!(degraded["requests"].as_u64().unwrap() >= 1, "{degraded}");
    let ratio = degraded["degraded_ratio"].as_f64().unwrap();
    let expected = degraded["mib_per_s"].as_f64().unwrap() / rows[1]["mib_per_s"].as_f64().unwrap();
    assert!((ratio - expected).abs() <= 0.01 * expected + 0.01, "{degraded}");
    let status = cluster.weft_json(&["status", "--json"]);
    assert_eq!(status["nodes_up"], 3, "the stopped node stays down: {status}");
}

/// A raw SigV4 request to the cluster's gateway with `declared` as its payload hash.
fn raw_signed(
    conf: &Value,
    method: &str,
    path: &str,
    body: Vec<u8>,
    declared: &str,
) -> reqwest::blocking::Response {
    raw_signed_with(conf, method, path, body, declared, &[], None)
}

/// [`raw_signed`] with `extra` headers (signed too) and, for an https endpoint, the CA
/// file to trust.
pub(crate) fn raw_signed_with(
    conf: &Value,
    method: &str,
    path: &str,
    body: Vec<u8>,
    declared: &str,
    extra: &[(&str, String)],
    ca: Option<&std::path::Path>,
) -> reqwest::blocking::Response {
    use weft_s3::sigv4;
    let endpoint = conf["endpoint"].as_str().unwrap();
    let host = endpoint.split("://").nth(1).unwrap().trim_end_matches('/');
    let region = conf["region"].as_str().unwrap();
    let date = sigv4::amz_date(std::time::SystemTime::now());
    let mut headers = reqwest::header::HeaderMap::new();
    headers.insert("host", host.parse().unwrap());
    headers.insert("x-amz-content-sha256", declared.parse().unwrap());
    headers.insert("x-amz-date", date.parse().unwrap());
    for (name, value) in extra {
        headers.insert(
            reqwest::header::HeaderName::from_bytes(name.as_bytes()).unwrap(),
            value.parse().unwrap(),
        );
    }
    let mut names: Vec<&str> = headers.keys().map(|n| n.as_str()).collect();
    names.sort_unstable();
    let signed = names.join(";");
    let (path_only, query) = path.split_once('?').unwrap_or((path, ""));
    let canonical =
        sigv4::canonical_request(method, path_only, query, &headers, &signed, declared).unwrap();
    let scope = format!("{}/{region}/s3/aws4_request", &date[..8]);
    let key = sigv4::signing_key(conf["secret_key"].as_str().unwrap(), &date[..8], region, "s3");
    let authorization = format!(
        "AWS4-HMAC-SHA256 Credential={}/{scope}, SignedHeaders={signed}, Signature={}",
        conf["access_key"].as_str().unwrap(),
        sigv4::signature(&key, &date, &scope, &canonical)
    );
    headers.insert("authorization", authorization.parse().unwrap());
    headers.remove("host");
    let mut client = reqwest::blocking::Client::builder();
    if let Some(ca) = ca {
        let pem = std::fs::read(ca).unwrap();
        client = client.add_root_certificate(reqwest::Certificate::from_pem(&pem).unwrap());
    }
    client
        .build()
        .unwrap()
        .request(method.parse().unwrap(), format!("{endpoint}{path}"))
        .headers(headers)
        .body(body)
        .send()
        .unwrap()
}

/// Signed payloads (x-amz-content-sha256 = the body's SHA-256) of PUTs large enough to be
/// checked and MD5-hashed in one pass (weft_s3::signed_payload): the bytes and the MD5 ETag
/// are right, a body that is not the one signed is refused with XAmzContentSHA256Mismatch
/// and stores nothing, and a wrong signature is still refused.
fn signed_payloads_are_checked_once_and_unsigned_bytes_never_stored(cluster: &Cluster) {
    use sha2::{Digest, Sha256};
    let conf = s3_conf(cluster);
    let bucket_made =
        raw_signed(&conf, "PUT", "/one-pass", vec![], &hex::encode(Sha256::digest(b"")));
    assert!(bucket_made.status().is_success(), "{:?}", bucket_made.text());
    let data = bytes(29, 700_001);
    let declared = hex::encode(Sha256::digest(&data));
    let put = raw_signed(&conf, "PUT", "/one-pass/a%20key", data.clone(), &declared);
    assert_eq!(put.status(), 200, "{:?}", put.text());
    let etag = put.headers()["etag"].to_str().unwrap().to_owned();
    assert_eq!(etag, format!("\"{}\"", md5_hex(&data)));
    let empty = hex::encode(Sha256::digest(b""));
    let got = raw_signed(&conf, "GET", "/one-pass/a%20key", vec![], &empty);
    assert_eq!(got.status(), 200);
    assert!(got.bytes().unwrap().as_ref() == data.as_slice(), "the bytes read back differ");

    // One bit differs from the body signed: refused, and nothing is stored.
    let mut other = data.clone();
    other[654_321] ^= 0x10;
    let refused = raw_signed(&conf, "PUT", "/one-pass/tampered", other, &declared);
    assert_eq!(refused.status(), 400);
    let text = refused.text().unwrap();
    assert!(text.contains("XAmzContentSHA256Mismatch"), "{text}");
    let absent = raw_signed(&conf, "GET", "/one-pass/tampered", vec![], &empty);
    assert_eq!(absent.status(), 404);
    // A replaced object keeps its old bytes when the new body is not the signed one.
    let mut other = data.clone();
    other[0] ^= 1;
    let refused = raw_signed(&conf, "PUT", "/one-pass/a%20key", other, &declared);
    assert_eq!(refused.status(), 400);
    let got = raw_signed(&conf, "GET", "/one-pass/a%20key", vec![], &empty);
    assert!(got.bytes().unwrap().as_ref() == data.as_slice(), "the old bytes stay");

    // A wrong signature is refused as ever.
    let mut wrong = conf.clone();
    wrong["secret_key"] = Value::from("not-the-secret");
    let refused = raw_signed(&wrong, "PUT", "/one-pass/forged", data, &declared);
    assert_eq!(refused.status(), 403);
    let absent = raw_signed(&conf, "GET", "/one-pass/forged", vec![], &empty);
    assert_eq!(absent.status(), 404);
    let cleaned = raw_signed(&conf, "DELETE", "/one-pass/a%20key", vec![], &empty);
    assert!(cleaned.status().is_success());

    // Bodies received at once are hashed together (weft_s3::md5_lanes): two rounds of six
    // concurrent PUTs, one of each round not the body signed. Every ETag is its own body's
    // MD5, the tampered ones are refused and absent, the rest read back.
    for round in 0..2 {
        let puts: Vec<_> = (0..6)
            .map(|i| {
                let conf = conf.clone();
                std::thread::spawn(move || {
                    let data = bytes(100 + 10 * round + i, 1_500_000 + 70_001 * i as usize);
                    let declared = hex::encode(Sha256::digest(&data));
                    let mut sent = data.clone();
                    if i == 3 {
                        sent[1_000_000] ^= 4;
                    }
                    let path = format!("/one-pass/round{round}-{i}");
                    let answer = raw_signed(&conf, "PUT", &path, sent, &declared);
                    let etag = answer.headers().get("etag").map(|e| e.to_str().unwrap().to_owned());
                    (i, path, data, answer.status().as_u16(), etag)
                })
            })
            .collect();
        for put in puts {
            let (i, path, data, status, etag) = put.join().expect("a PUT thread");
            let got = raw_signed(&conf, "GET", &path, vec![], &empty);
            if i == 3 {
                assert_eq!(status, 400, "{path}: not the signed body");
                assert_eq!(got.status(), 404, "{path}: nothing stored");
                continue;
            }
            assert_eq!(status, 200, "{path}");
            assert_eq!(etag, Some(format!("\"{}\"", md5_hex(&data))), "{path}");
            assert!(got.bytes().unwrap().as_ref() == data.as_slice(), "{path}: bytes differ");
            let cleaned = raw_signed(&conf, "DELETE", &path, vec![], &empty);
            assert!(cleaned.status().is_success(), "{path}");
        }
    }
}

/// The leaf certificate a TLS listener at `at` serves (PEM), as openssl sees it.
fn served_certificate(at: &str, ca: &std::path::Path) -> String {
    let out = std::process::Command::new("openssl")
        .args(["s_client", "-connect", at, "-CAfile", ca.to_str().unwrap(), "-showcerts"])
        .stdin(std::process::Stdio::null())
        .output()
        .expect("openssl runs");
    let text = String::from_utf8_lossy(&out.stdout);
    let begin = text.find("-----BEGIN CERTIFICATE-----").unwrap_or_else(|| panic!("{at}: {text}"));
    let end = text[begin..].find("-----END CERTIFICATE-----").unwrap() + begin;
    text[begin..end + "-----END CERTIFICATE-----".len()].to_owned()
}

/// `weft cert rotate` under load, as `weft bench s3 --rotate-certs` drives it against a TLS
/// cluster (a new connection and handshake per request): no request fails, every listener
/// serves its newest certificate afterwards, and the same load runs side by side against a
/// plain-HTTP cluster (`--compare-cluster`), rows named by the clusters' schemes (their
/// directories share a name).
#[test]
fn certificates_rotate_under_load_with_no_failed_request() {
    let tls = Cluster::start(3, &["--tls"]);
    let plain = Cluster::start(3, &[]);
    // `weft bench s3` of 200 KiB objects, rs(2,1), on the TLS cluster: its JSON rows.
    let bench = |extra: &[&str]| -> Vec<Value> {
        let mut args = vec!["bench", "s3", "--object-sizes", "200KiB", "--policy", "rs(2,1)"];
        args.extend(extra);
        args.push("--json");
        let output = tls.weft(&args);
        assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
        serde_json::from_slice(&output.stdout).unwrap()
    };
    let rows = bench(&[
        "--clients",
        "3",
        "--duration",
        "1500ms",
        "--rotate-certs",
        "250ms",
        "--no-keepalive",
    ]);
    assert_eq!(rows.len(), 2, "{rows:?}");
    let mut rotations = 0;
    for row in &rows {
        assert!(row["requests"].as_u64().unwrap() >= 3, "{row}");
        rotations += row["cert_rotations"].as_u64().expect("rows count rotations");
    }
    assert!(rotations >= 4, "{rotations} rotations during 3 s of load at one per 250 ms");
    // Each listener reloads its files at its next handshake a second after its last look.
    std::thread::sleep(std::time::Duration::from_millis(1500));
    let dir = tls.dir();
    let ca = dir.join("tls/ca.pem");
    let s3: Value = serde_json::from_slice(&std::fs::read(dir.join("s3.json")).unwrap()).unwrap();
    let node_1 = tls.node_endpoint(1);
    for (host, endpoint) in [
        ("s3-1", s3["endpoint"].as_str().unwrap().to_owned()),
        ("meta-1", tls.meta_url()),
        ("node-1", node_1),
    ] {
        let at = endpoint.trim_start_matches("https://").trim_end_matches('/').to_owned();
        let newest = std::fs::read_to_string(dir.join("tls").join(host).join("cert.pem")).unwrap();
        // Twice: the first handshake after the pause may be the one that reloads.
        let _ = served_certificate(&at, &ca);
        assert_eq!(served_certificate(&at, &ca).trim(), newest.trim(), "{host} at {at}");
    }

    // Side by side: TLS ÷ plain HTTP, every request verified on both.
    let plain_dir = plain.dir();
    let rows = bench(&[
        "--clients",
        "2",
        "--duration",
        "400ms",
        "--compare-cluster",
        plain_dir.to_str().unwrap(),
    ]);
    // Both directories are named `cluster`: the rows are named by scheme instead.
    assert_eq!(tls.dir().file_name(), plain.dir().file_name());
    let targets: Vec<&str> = rows.iter().map(|r| r["target"].as_str().unwrap()).collect();
    assert_eq!(targets, ["weft-https", "weft-http", "weft-https", "weft-http"], "{rows:?}");
    for row in rows.iter().step_by(2) {
        assert!(row["throughput_ratio"].as_f64().unwrap() > 0.0, "{row}");
    }
    // Bad input: rotations on a cluster with no CA are refused before any load, and a
    // directory that is no cluster's is named.
    let no_ca = plain.weft(&["bench", "s3", "--rotate-certs", "1s", "--duration", "10s"]);
    let said = String::from_utf8_lossy(&no_ca.stderr);
    assert!(!no_ca.status.success() && said.contains("not a TLS cluster"), "{said}");
    let missing = tls.weft(&["bench", "s3", "--compare-cluster", "/nonexistent/cluster"]);
    let said = String::from_utf8_lossy(&missing.stderr);
    assert!(!missing.status.success() && said.contains("/nonexistent/cluster"), "{said}");
}
