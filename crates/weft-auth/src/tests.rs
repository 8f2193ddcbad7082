use super::*;

fn head<'a>(authorization: Option<&'a str>, content: Option<&'a str>) -> RequestHead<'a> {
    RequestHead {
        method: "PUT",
        path: "/v1/buckets/b",
        query: "x=1",
        authorization,
        content_sha256: content,
    }
}

#[test]
fn a_signed_request_is_accepted_once_and_its_replay_refused() {
    let secret = ClusterSecret::generate();
    let verifier = Verifier::for_meta(&secret);
    let hash = content_hash(b"{}");
    let signer = secret.signer_for(Audience::Meta);
    let auth = signer.authorization("PUT", "/v1/buckets/b", "x=1", &hash);
    let (principal, body) = verifier.verify(head(Some(&auth), Some(&hash)), now_ms()).unwrap();
    assert_eq!(principal, Principal::Client);
    assert_eq!(body, BodyCheck::Hash(hash.clone()));
    assert!(check_body(&body, b"{}").is_ok());
    assert_eq!(check_body(&body, b"{ }"), Err(AuthError::BodyMismatch));
    assert_eq!(verifier.verify(head(Some(&auth), Some(&hash)), now_ms()), Err(AuthError::Replayed));
}

#[test]
fn every_altered_field_breaks_the_signature() {
    let secret = ClusterSecret::generate();
    let verifier = Verifier::for_meta(&secret);
    let hash = content_hash(b"body");
    let signer = secret.signer_for(Audience::Meta);
    let now = now_ms();
    let good =
        |nonce: &str| signer.authorization_at("PUT", "/v1/buckets/b", "x=1", &hash, now, nonce);
    let a = good("00000000000000000000000000000001");
    for (method, path, query) in [
        ("GET", "/v1/buckets/b", "x=1"),
        ("PUT", "/v1/buckets/c", "x=1"),
        ("PUT", "/v1/buckets/b", "x=2"),
    ] {
        let head = RequestHead {
            method,
            path,
            query,
            authorization: Some(&a),
            content_sha256: Some(&hash),
        };
        assert_eq!(
            verifier.verify(head, now),
            Err(AuthError::BadSignature),
            "{method} {path}?{query}"
        );
    }
    let other_hash = content_hash(b"other");
    assert_eq!(
        verifier.verify(head(Some(&a), Some(&other_hash)), now),
        Err(AuthError::BadSignature)
    );
    // Another cluster's secret.
    let stranger = ClusterSecret::generate().signer_for(Audience::Meta);
    let b = stranger.authorization_at(
        "PUT",
        "/v1/buckets/b",
        "x=1",
        &hash,
        now,
        "00000000000000000000000000000002",
    );
    assert_eq!(verifier.verify(head(Some(&b), Some(&hash)), now), Err(AuthError::BadSignature));
    // A changed timestamp in the header (signature made for another one).
    let c = good("00000000000000000000000000000003")
        .replace(&format!("Timestamp={now}"), &format!("Timestamp={}", now + 1));
    assert_eq!(verifier.verify(head(Some(&c), Some(&hash)), now), Err(AuthError::BadSignature));
    // The refused attempts did not use up the real request's nonce.
    assert!(verifier.verify(head(Some(&a), Some(&hash)), now).is_ok());
}

#[test]
fn missing_malformed_stale_and_unsigned_bodies_are_refused() {
    let secret = ClusterSecret::generate();
    let verifier = Verifier::for_meta(&secret).started_at(0);
    let hash = content_hash(b"");
    let now = now_ms();
    assert_eq!(verifier.verify(head(None, Some(&hash)), now), Err(AuthError::Missing));
    for bad in ["Basic abc", "WEFT1-HMAC-SHA256 Credential=client", "WEFT1-HMAC-SHA256 Credential=client, Timestamp=x, Nonce=00000000000000000000000000000001, Signature=00"] {
        assert!(matches!(verifier.verify(head(Some(bad), Some(&hash)), now), Err(AuthError::Malformed(_))), "{bad}");
    }
    let signer = secret.signer_for(Audience::Meta);
    for skew in [MAX_SKEW_MS + 1, 3_600_000] {
        let old = signer.authorization_at(
            "PUT",
            "/v1/buckets/b",
            "x=1",
            &hash,
            now - skew,
            "00000000000000000000000000000004",
        );
        assert!(matches!(
            verifier.verify(head(Some(&old), Some(&hash)), now),
            Err(AuthError::Skewed { .. })
        ));
        let future = signer.authorization_at(
            "PUT",
            "/v1/buckets/b",
            "x=1",
            &hash,
            now + skew,
            "00000000000000000000000000000005",
        );
        assert!(matches!(
            verifier.verify(head(Some(&future), Some(&hash)), now),
            Err(AuthError::Skewed { .. })
        ));
    }
    // Meta never takes unsigned bodies; no content hash at all is malformed.
    let unsigned = signer.authorization("PUT", "/v1/buckets/b", "x=1", UNSIGNED_PAYLOAD);
    assert!(matches!(
        verifier.verify(head(Some(&unsigned), Some(UNSIGNED_PAYLOAD)), now),
        Err(AuthError::Malformed(_))
    ));
    let signed = signer.authorization("PUT", "/v1/buckets/b", "x=1", &hash);
    assert!(matches!(
        verifier.verify(head(Some(&signed), None), now),
        Err(AuthError::Malformed(_))
    ));
}

#[test]
fn a_node_accepts_only_its_own_key_and_meta_accepts_every_node() {
    let secret = ClusterSecret::generate();
    let node3 = Verifier::for_node(secret.node_key(3));
    let now = now_ms();
    let ok = secret.signer_for(Audience::Node(3)).authorization(
        "GET",
        "/v1/health",
        "",
        UNSIGNED_PAYLOAD,
    );
    fn get(auth: &str) -> RequestHead<'_> {
        RequestHead {
            method: "GET",
            path: "/v1/health",
            query: "",
            authorization: Some(auth),
            content_sha256: Some(UNSIGNED_PAYLOAD),
        }
    }
    assert_eq!(node3.verify(get(&ok), now).unwrap(), (Principal::Node(3), BodyCheck::Unsigned));
    // Node 4's key, the client key, and node 3's key signed for node 4 are all refused.
    let as4 = secret.signer_for(Audience::Node(4)).authorization(
        "GET",
        "/v1/health",
        "",
        UNSIGNED_PAYLOAD,
    );
    assert!(matches!(node3.verify(get(&as4), now), Err(AuthError::UnknownPrincipal(_))));
    let client =
        secret.signer_for(Audience::Meta).authorization("GET", "/v1/health", "", UNSIGNED_PAYLOAD);
    assert!(matches!(node3.verify(get(&client), now), Err(AuthError::UnknownPrincipal(_))));
    let wrong_audience = Signer::new(secret.node_key(3), Audience::Node(4)).authorization(
        "GET",
        "/v1/health",
        "",
        UNSIGNED_PAYLOAD,
    );
    assert_eq!(node3.verify(get(&wrong_audience), now), Err(AuthError::BadSignature));
    // Node 3 signing to meta: meta derives node 3's key.
    let meta = Verifier::for_meta(&secret);
    let hash = content_hash(b"hb");
    let heartbeat = Signer::new(secret.node_key(3), Audience::Meta).authorization(
        "POST",
        "/v1/heartbeat",
        "",
        &hash,
    );
    let post = RequestHead {
        method: "POST",
        path: "/v1/heartbeat",
        query: "",
        authorization: Some(&heartbeat),
        content_sha256: Some(&hash),
    };
    assert_eq!(meta.verify(post, now).unwrap().0, Principal::Node(3));
    // A non-canonical principal spelling is refused outright.
    for who in ["node/03", "node/", "node/-1", "admin"] {
        let auth = format!("{SCHEME} Credential={who}, Timestamp={now}, Nonce=00000000000000000000000000000009, Signature={}", "0".repeat(64));
        assert!(
            matches!(meta.verify(get(&auth), now), Err(AuthError::UnknownPrincipal(_))),
            "{who}"
        );
    }
}

#[test]
fn replay_memory_is_bounded_and_forgets_what_cannot_be_accepted_anymore() {
    let secret = ClusterSecret::generate();
    let verifier = Verifier::for_meta(&secret).with_nonce_limit(3).started_at(0);
    let signer = secret.signer_for(Audience::Meta);
    let hash = content_hash(b"");
    let now = now_ms();
    let sign = |at: u64, n: u32| {
        signer.authorization_at("GET", "/v1/status", "", &hash, at, &format!("{n:032x}"))
    };
    fn status<'a>(auth: &'a str, hash: &'a str) -> RequestHead<'a> {
        RequestHead {
            method: "GET",
            path: "/v1/status",
            query: "",
            authorization: Some(auth),
            content_sha256: Some(hash),
        }
    }
    for n in 0..3 {
        verifier.verify(status(&sign(now, n), &hash), now).unwrap();
    }
    assert_eq!(verifier.verify(status(&sign(now, 3), &hash), now), Err(AuthError::Busy));
    assert_eq!(verifier.remembered(), 3);
    // Later, the old nonces are too old to be accepted, so they are forgotten.
    let later = now + 2 * MAX_SKEW_MS + 2 * NONCE_BUCKET_MS;
    verifier.verify(status(&sign(later, 4), &hash), later).unwrap();
    assert_eq!(verifier.remembered(), 1);
}

#[test]
fn key_files_round_trip_and_loose_permissions_are_refused() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("cluster.secret");
    let secret = ClusterSecret::read_or_create(&path).unwrap();
    assert_eq!(
        ClusterSecret::read_or_create(&path).unwrap(),
        secret,
        "a second call reads the first secret"
    );
    assert_eq!(std::fs::metadata(&path).unwrap().permissions().mode() & 0o777, 0o600);
    assert!(ClusterSecret::create_file(&path).is_err(), "never replaced");
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
    let error = ClusterSecret::read_file(&path).unwrap_err().to_string();
    assert!(error.contains("chmod 600"), "{error}");

    let node_path = dir.path().join("node.key");
    let key = secret.node_key(7);
    key.write_node_file(&node_path).unwrap();
    assert_eq!(Key::read_node_file(&node_path).unwrap(), key);
    assert!(ClusterSecret::parse("weft-cluster-secret-v1 abcd").is_err());
    assert!(Key::parse_node_file(&key.to_node_file_text().replace("node=7", "node=x")).is_err());
    // Debug output never shows key bytes.
    assert_eq!(format!("{secret:?} {key:?}"), "ClusterSecret(redacted) Key(node/7, redacted)");
}

#[test]
fn sealed_secrets_open_only_with_the_same_key_and_context() {
    let secret = ClusterSecret::generate();
    let seal = secret.seal_key();
    let sealed = seal.seal("WKABC", b"the secret");
    assert!(SealKey::is_sealed(&sealed));
    assert!(!sealed.contains("the secret"));
    assert_eq!(seal.open("WKABC", &sealed).unwrap(), b"the secret");
    assert!(seal.open("WKXYZ", &sealed).is_err(), "bound to its record");
    assert!(ClusterSecret::generate().seal_key().open("WKABC", &sealed).is_err());
    let mut altered = sealed.clone().into_bytes();
    let last = altered.len() - 1;
    altered[last] = if altered[last] == b'0' { b'1' } else { b'0' };
    assert!(seal.open("WKABC", std::str::from_utf8(&altered).unwrap()).is_err());
    assert_ne!(seal.seal("WKABC", b"the secret"), sealed, "fresh nonce each time");
}

#[test]
fn a_request_signed_before_the_verifier_started_is_refused() {
    let secret = ClusterSecret::generate();
    let signer = secret.signer_for(Audience::Meta);
    let hash = content_hash(b"");
    let before = now_ms() - 10;
    let auth = signer.authorization_at(
        "PUT",
        "/v1/buckets/b",
        "x=1",
        &hash,
        before,
        &format!("{:032x}", 1),
    );
    // A verifier running when it was signed accepts it once...
    let old = Verifier::for_meta(&secret).started_at(before - 1000);
    assert!(old.verify(head(Some(&auth), Some(&hash)), now_ms()).is_ok());
    // ...and one started since (a restarted meta, its replay memory empty) refuses it.
    let restarted = Verifier::for_meta(&secret).started_at(before + 1);
    assert!(matches!(
        restarted.verify(head(Some(&auth), Some(&hash)), now_ms()),
        Err(AuthError::BeforeStart { .. })
    ));
}

#[test]
fn hex_is_two_lower_case_digits_a_byte_and_round_trips() {
    let all: Vec<u8> = (0..=255).collect();
    let text = hex(&all);
    assert_eq!(text.len(), 512);
    assert_eq!((&text[..8], &text[504..]), ("00010203", "fcfdfeff"));
    assert_eq!(text, all.iter().map(|b| format!("{b:02x}")).collect::<String>());
    assert_eq!(unhex(&text), Some(all));
    assert_eq!(unhex(&text.to_uppercase()).map(|b| b.len()), Some(256));
    assert_eq!(hex(&[]), "");
}
