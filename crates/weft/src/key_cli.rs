//! `weft key create|ls|rm`: the access keys of the S3 gateway, kept in meta as gateway
//! records (`access_keys/<access key id>`).
//!
//! Invariants:
//! - A key is created only in meta (create-only put: an id already taken is refused, never
//!   overwritten); the secret is printed once, here, and otherwise meta holds it only sealed
//!   with the cluster's seal key (only holders of the cluster secret can open it).
//! - `--json` prints exactly one JSON object on stdout.

use std::time::{SystemTime, UNIX_EPOCH};

use clap::{Args, Subcommand};
use serde_json::{json, Value};

use crate::{
    cli_error,
    cluster_cli::{print_json, MetaClient, MetaUrlArgs},
    CliError,
};

#[derive(Debug, Subcommand)]
pub enum KeyCommand {
    /// Create an access key for the S3 gateway and print it (the secret is shown only now).
    ///
    /// Examples:
    ///   weft key create alice
    ///   weft key create ci --json      # {"access_key":"WK…","secret_key":"…","name":"ci",…}
    ///   weft key create ops --allow-policy   # may send x-weft-policy
    ///   weft key create alice --bucket photos --read-only   # alice's rights, photos, reads
    ///   AWS_ACCESS_KEY_ID=WK… AWS_SECRET_ACCESS_KEY=… \
    ///     aws --endpoint-url http://127.0.0.1:9000 s3 ls
    #[command(verbatim_doc_comment)]
    Create(KeyCreateArgs),
    /// List access keys (ids and names, never secrets).
    Ls(KeyLsArgs),
    /// Delete an access key; gateways stop accepting it within 10 s.
    Rm(KeyRmArgs),
}

#[derive(Debug, Args)]
pub struct KeyCreateArgs {
    /// A name for people: who or what uses the key.
    pub name: String,
    /// Let requests signed with this key choose a policy (the `x-weft-policy` header on
    /// CreateBucket, PutObject, CopyObject and CreateMultipartUpload). Without it such
    /// requests are refused with AccessDenied: a policy decides how many unit files an
    /// object makes and how much a failure costs, so it is an operator's choice.
    #[arg(long)]
    pub allow_policy: bool,
    /// An email address of the key's user: S3 ACL grants by email name this user.
    #[arg(long, value_name = "ADDRESS")]
    pub email: Option<String>,
    /// Limit the key to this bucket: it may not use any other, nor create buckets. (It never
    /// has more rights than its user, NAME: in a bucket NAME does not own, grant NAME access
    /// with the bucket's ACL.)
    #[arg(long, value_name = "BUCKET")]
    pub bucket: Option<String>,
    /// Limit the key to reads (S3 operations named Get*, Head*, List*).
    #[arg(long)]
    pub read_only: bool,
    /// Print {"access_key","secret_key","name","may_set_policy"} as one JSON object.
    #[arg(long)]
    pub json: bool,
    /// Print shell `export` lines for S3 clients (AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY,
    /// AWS_DEFAULT_REGION and, when `weft up`'s s3.json lies beside the secret file,
    /// AWS_ENDPOINT_URL, and AWS_CA_BUNDLE and CURL_CA_BUNDLE when the gateway serves HTTPS
    /// with a certificate of the cluster CA): `eval "$(weft key create me --env)"`. `weft
    /// init --hosts` writes an s3.json beside its secret too.
    #[arg(long, conflicts_with = "json")]
    pub env: bool,
    #[command(flatten)]
    pub meta: MetaUrlArgs,
}

#[derive(Debug, Args)]
pub struct KeyLsArgs {
    /// One JSON object: {"keys":[{"access_key","name","created_ms","may_set_policy"}...]}.
    #[arg(long)]
    pub json: bool,
    #[command(flatten)]
    pub meta: MetaUrlArgs,
}

#[derive(Debug, Args)]
pub struct KeyRmArgs {
    /// The access key id (WK…).
    pub access_key: String,
    #[command(flatten)]
    pub meta: MetaUrlArgs,
}

pub fn run(command: KeyCommand) -> Result<(), CliError> {
    match command {
        KeyCommand::Create(args) => {
            let meta = args.meta.client()?;
            let scope =
                weft_s3::KeyScope { bucket: args.bucket.clone(), read_only: args.read_only };
            let (access_key, secret_key) =
                create_key(&meta, &args.name, args.allow_policy, args.email.as_deref(), scope)?;
            if args.json {
                print_json(&json!({
                    "access_key": access_key, "secret_key": secret_key, "name": args.name,
                    "may_set_policy": args.allow_policy,
                    "bucket": args.bucket, "read_only": args.read_only,
                }));
            } else if args.env {
                // Keys are [A-Za-z0-9+/] only: no quoting needed, but quote anyway.
                // What `weft up` wrote to DIR/s3.json (endpoint, region), if it is there.
                let conf = crate::cluster_cli::file_beside_secret(&args.meta, crate::up::S3_FILE)
                    .map_or(Value::Null, |(_, conf)| conf);
                let region = conf["region"].as_str().unwrap_or(weft_s3::DEFAULT_REGION);
                println!("export AWS_ACCESS_KEY_ID='{access_key}'");
                println!("export AWS_SECRET_ACCESS_KEY='{secret_key}'");
                println!("export AWS_DEFAULT_REGION='{region}'");
                if let Some(endpoint) = conf["endpoint"].as_str() {
                    println!("export AWS_ENDPOINT_URL='{endpoint}'");
                    // An HTTPS gateway with a certificate of weft's cluster CA: S3 clients
                    // need that CA.
                    let cluster =
                        crate::cluster_cli::file_beside_secret(&args.meta, crate::up::CLUSTER_FILE)
                            .map_or(Value::Null, |(_, cluster)| cluster);
                    let ca = crate::cert_cli::gateway_ca(&conf, &cluster);
                    if let (true, Some(ca)) = (endpoint.starts_with("https://"), ca) {
                        let ca = ca.display();
                        // The AWS SDKs and CLI read the first, curl the second.
                        println!("export AWS_CA_BUNDLE='{ca}'");
                        println!("export CURL_CA_BUNDLE='{ca}'");
                    }
                }
            } else {
                println!("access key  {access_key}");
                println!("secret key  {secret_key}");
                if args.allow_policy {
                    println!("may choose policies (x-weft-policy)");
                }
                println!("(the secret is shown only now; `weft key rm {access_key}` revokes it)");
            }
            Ok(())
        }
        KeyCommand::Ls(args) => {
            let meta = args.meta.client()?;
            let answer = meta.get(&["records", weft_s3::ACCESS_KEYS])?;
            let keys: Vec<Value> = answer["records"]
                .as_array()
                .into_iter()
                .flatten()
                .map(|r| {
                    json!({
                        "access_key": r["name"], "name": r["value"]["name"],
                        "created_ms": r["value"]["created_ms"],
                        "may_set_policy": r["value"]["may_set_policy"].as_bool().unwrap_or(false),
                    })
                })
                .collect();
            if args.json {
                print_json(&json!({ "keys": keys }));
            } else if keys.is_empty() {
                println!("no access keys (create one with `weft key create NAME`)");
            } else {
                for key in keys {
                    let policy =
                        if key["may_set_policy"] == true { "  (may set policy)" } else { "" };
                    println!(
                        "{}  {}{policy}",
                        key["access_key"].as_str().unwrap_or("?"),
                        key["name"].as_str().unwrap_or("")
                    );
                }
            }
            Ok(())
        }
        KeyCommand::Rm(args) => {
            let meta = args.meta.client()?;
            meta.delete(&["records", weft_s3::ACCESS_KEYS, &args.access_key])
                .map_err(|e| cli_error!("cannot delete access key {}: {}", args.access_key, e.0))?;
            println!("deleted access key {}", args.access_key);
            Ok(())
        }
    }
}

/// Creates a key named `name` (its user: see the S3 gateway's ACLs) in meta, allowed to
/// choose policies if `may_set_policy`, with the user's `email` if given, limited to
/// `scope`; returns (access key id, secret).
pub fn create_key(
    meta: &MetaClient,
    name: &str,
    may_set_policy: bool,
    email: Option<&str>,
    scope: weft_s3::KeyScope,
) -> Result<(String, String), CliError> {
    let (access_key, secret_key) = weft_s3::new_key();
    let created_ms =
        SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_millis() as u64);
    let mut record = weft_s3::KeyRecord::new(
        meta.seal_key(),
        &access_key,
        name,
        &secret_key,
        created_ms,
        may_set_policy,
    );
    record.email = email.map(str::to_string);
    record.scope = scope;
    let value = serde_json::to_value(&record).expect("key records serialize");
    // A random 18-character id is never taken in practice; create-only all the same.
    meta.put_query(&["records", weft_s3::ACCESS_KEYS, &access_key], "if_absent=true", &value)
        .map_err(|e| cli_error!("cannot create the access key in meta: {}", e.0))?;
    Ok((access_key, secret_key))
}
