//! The gateway-record routes of the meta service (`/v1/records`), against a real in-process
//! server over real HTTP: create-only puts, names with slashes, paging, unknown namespaces,
//! that deleting an object deletes its `object_attributes` record, and that deleting a bucket
//! deletes its `bucket_config` records (and only its own).

use serde_json::{json, Value};
use weft_auth::{sign_reqwest::SendSigned, Audience, ClusterSecret, Signer};
use weft_meta::service::{bind, MetaConfig};

async fn call(
    client: &reqwest::Client,
    signer: &Signer,
    method: reqwest::Method,
    url: String,
    body: Option<Value>,
) -> (u16, Value) {
    let mut request = client.request(method, url);
    if let Some(body) = body {
        request = request.json(&body);
    }
    let response = request.send_signed(signer).await.unwrap();
    let status = response.status().as_u16();
    let text = response.text().await.unwrap();
    (status, serde_json::from_str(&text).unwrap_or(Value::Null))
}

#[tokio::test]
async fn records_are_created_once_listed_in_pages_and_refused_outside_their_namespaces() {
    let dir = tempfile::tempdir().unwrap();
    let secret = ClusterSecret::generate();
    let signer = secret.signer_for(Audience::Meta);
    let config = MetaConfig::new("127.0.0.1:0".parse().unwrap(), dir.path(), secret.clone());
    let meta = bind(config).await.unwrap();
    let base = format!("{}/v1/records", meta.endpoint());
    let client = reqwest::Client::new();
    use reqwest::Method;

    // Access-key records hold their secret sealed (a plain `secret_key` is refused: auth.rs).
    let seal = secret.seal_key();
    let (first, second) = (seal.seal("WK1", b"s"), seal.seal("WK1", b"t"));
    let url = format!("{base}/access_keys/WK1?if_absent=true");
    let (status, _) =
        call(&client, &signer, Method::PUT, url.clone(), Some(json!({"sealed_secret": first})))
            .await;
    assert_eq!(status, 204);
    let (status, body) =
        call(&client, &signer, Method::PUT, url, Some(json!({"sealed_secret": second}))).await;
    assert_eq!((status, body["error"].as_str()), (409, Some("record_exists")));
    let (status, body) =
        call(&client, &signer, Method::GET, format!("{base}/access_keys/WK1"), None).await;
    assert_eq!((status, body), (200, json!({"name": "WK1", "value": {"sealed_secret": first}})));

    for i in 0..5 {
        let url = format!("{base}/object_attributes/b/dir%2Fx/k{i}");
        let (status, _) = call(&client, &signer, Method::PUT, url, Some(json!(i))).await;
        assert_eq!(status, 204);
    }
    let (_, page) = call(
        &client,
        &signer,
        Method::GET,
        format!("{base}/object_attributes?prefix=b%2F&limit=3"),
        None,
    )
    .await;
    let names: Vec<&str> =
        page["records"].as_array().unwrap().iter().map(|r| r["name"].as_str().unwrap()).collect();
    assert_eq!(names, ["b/dir/x/k0", "b/dir/x/k1", "b/dir/x/k2"]);
    assert_eq!(page["next_start_after"], "b/dir/x/k2");
    let (_, page) = call(
        &client,
        &signer,
        Method::GET,
        format!("{base}/object_attributes?prefix=b%2F&start_after=b%2Fdir%2Fx%2Fk2"),
        None,
    )
    .await;
    assert_eq!(page["records"].as_array().unwrap().len(), 2);
    assert_eq!(page["next_start_after"], Value::Null);

    let (status, body) = call(
        &client,
        &signer,
        Method::DELETE,
        format!("{base}/object_attributes/b/dir/x/k0"),
        None,
    )
    .await;
    assert_eq!((status, body["value"].clone()), (200, json!(0)));
    let (status, body) =
        call(&client, &signer, Method::GET, format!("{base}/object_attributes/b/dir/x/k0"), None)
            .await;
    assert_eq!((status, body["error"].as_str()), (404, Some("no_such_record")));
    let (status, body) =
        call(&client, &signer, Method::GET, format!("{base}/secrets/x"), None).await;
    assert_eq!((status, body["error"].as_str()), (404, Some("no_such_namespace")));
    meta.stop().await.unwrap();
}

#[tokio::test]
async fn deleting_a_bucket_deletes_its_config_records_and_no_other_buckets() {
    let dir = tempfile::tempdir().unwrap();
    let secret = ClusterSecret::generate();
    let signer = secret.signer_for(Audience::Meta);
    let config = MetaConfig::new("127.0.0.1:0".parse().unwrap(), dir.path(), secret.clone());
    let meta = bind(config).await.unwrap();
    let base = meta.endpoint().to_string();
    let client = reqwest::Client::new();
    use reqwest::Method;
    let records = format!("{base}/v1/records/bucket_config");
    // `cfg` and `cfg-2` share a name prefix: only `cfg/…` is the deleted bucket's.
    for bucket in ["cfg", "cfg-2"] {
        let (status, body) =
            call(&client, &signer, Method::PUT, format!("{base}/v1/buckets/{bucket}"), None).await;
        assert_eq!(status, 201, "{body}");
        let url = format!("{records}/{bucket}/cors");
        let (status, _) =
            call(&client, &signer, Method::PUT, url, Some(json!({"rules": [bucket]}))).await;
        assert_eq!(status, 204);
    }
    let (status, _) =
        call(&client, &signer, Method::DELETE, format!("{base}/v1/buckets/cfg"), None).await;
    assert_eq!(status, 204);
    let (status, body) =
        call(&client, &signer, Method::GET, format!("{records}/cfg/cors"), None).await;
    assert_eq!((status, body["error"].as_str()), (404, Some("no_such_record")));
    let (status, body) =
        call(&client, &signer, Method::GET, format!("{records}/cfg-2/cors"), None).await;
    assert_eq!((status, body["value"].clone()), (200, json!({"rules": ["cfg-2"]})));

    // A record left behind (a deletion cut short) does not pass to a new bucket of the name.
    let (status, _) = call(
        &client,
        &signer,
        Method::PUT,
        format!("{records}/gone/cors"),
        Some(json!({"rules": []})),
    )
    .await;
    assert_eq!(status, 204);
    let (status, _) =
        call(&client, &signer, Method::PUT, format!("{base}/v1/buckets/gone"), None).await;
    assert_eq!(status, 201);
    let (status, _) =
        call(&client, &signer, Method::GET, format!("{records}/gone/cors"), None).await;
    assert_eq!(status, 404);
    meta.stop().await.unwrap();
}
