//! `weft kms key create|ls|rotate` and `weft kms master-key create`: the keys of SSE-KMS,
//! kept in meta as gateway records `kms_keys/<id>/<version>`, each version's material sealed
//! by the gateway's master key (weft-s3 `sse`: the key hierarchy).
//!
//! Invariants:
//! - Material is made here and sealed at once with the master key; neither it nor the
//!   master key is ever printed, sent to meta in clear, or written anywhere else.
//! - Versions are created create-only (`if_absent`): a version is never overwritten, so an
//!   object sealed under it always opens. A rotation racing another makes the next number.
//! - `--json` prints exactly one JSON object on stdout.

use std::{
    path::{Path, PathBuf},
    time::{SystemTime, UNIX_EPOCH},
};

use clap::{Args, Subcommand};
use serde_json::{json, Value};
use weft_s3::sse::{self, KmsKey, KmsVersion, MasterKey};

use crate::{
    cli_error,
    cluster_cli::{print_json, secret_path, MetaClient, MetaUrlArgs, DEFAULT_SECRET_FILE},
    CliError,
};

/// The master key's file in `weft up`'s DIR, beside the cluster secret.
pub const MASTER_KEY_FILE_NAME: &str = "sse.key";
/// The environment variable naming the master key file.
pub const MASTER_KEY_ENV: &str = "WEFT_MASTER_KEY_FILE";
/// Most versions one rotation tries before it gives up (others rotating at the same time).
const ROTATE_ATTEMPTS: u32 = 16;

#[derive(Debug, Subcommand)]
pub enum KmsCommand {
    /// KMS keys of SSE-KMS: create, list, rotate.
    #[command(subcommand)]
    Key(KeyCommand),
    /// The gateway's master key.
    #[command(subcommand)]
    MasterKey(MasterKeyCommand),
}

#[derive(Debug, Subcommand)]
pub enum KeyCommand {
    /// Create a KMS key (its first version) for SSE-KMS writes to name.
    ///
    /// Examples:
    ///   weft kms key create photos
    ///   aws s3 cp cat.jpg s3://pics/cat.jpg --sse aws:kms --sse-kms-key-id photos
    ///   aws s3api put-bucket-encryption --bucket pics --server-side-encryption-configuration \
    ///     '{"Rules":[{"ApplyServerSideEncryptionByDefault":{"SSEAlgorithm":"aws:kms","KMSMasterKeyID":"photos"}}]}'
    #[command(verbatim_doc_comment)]
    Create(CreateArgs),
    /// List KMS keys: ids, versions and when each was made (never material).
    Ls(LsArgs),
    /// Give a key a new version: new objects are sealed with it, older objects keep
    /// theirs (they are not rewritten, and still open).
    Rotate(CreateArgs),
}

#[derive(Debug, Subcommand)]
pub enum MasterKeyCommand {
    /// Write a fresh master key to FILE (which must not exist; mode 0600), for `weft serve
    /// s3 --master-key FILE`. Every gateway of a cluster needs the same one; keep it off
    /// the data nodes, and keep a copy: without it no encrypted object opens.
    Create(MasterKeyCreateArgs),
}

#[derive(Debug, Args)]
pub struct MasterKeyFlag {
    /// The gateway's master key [default: $WEFT_MASTER_KEY_FILE, else sse.key beside the
    /// secret file, where `weft up` writes it].
    #[arg(long, value_name = "FILE")]
    pub master_key: Option<PathBuf>,
}

#[derive(Debug, Args)]
pub struct CreateArgs {
    /// The key id: 1–64 of A-Z a-z 0-9 _ . - (what requests name in
    /// x-amz-server-side-encryption-aws-kms-key-id).
    pub id: String,
    /// Print {"id","version","created_ms"} as one JSON object.
    #[arg(long)]
    pub json: bool,
    #[command(flatten)]
    pub master: MasterKeyFlag,
    #[command(flatten)]
    pub meta: MetaUrlArgs,
}

#[derive(Debug, Args)]
pub struct LsArgs {
    /// One JSON object: {"keys":[{"id","current_version","versions":[{"version","created_ms"}]}]}.
    #[arg(long)]
    pub json: bool,
    #[command(flatten)]
    pub meta: MetaUrlArgs,
}

#[derive(Debug, Args)]
pub struct MasterKeyCreateArgs {
    pub file: PathBuf,
}

fn now_ms() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_millis() as u64)
}

/// The master key: `--master-key`, else `$WEFT_MASTER_KEY_FILE`, else beside the secret.
fn master_key(flag: &MasterKeyFlag, meta: &MetaUrlArgs) -> Result<MasterKey, CliError> {
    let path = match (&flag.master_key, std::env::var_os(MASTER_KEY_ENV)) {
        (Some(path), _) => path.clone(),
        (None, Some(path)) if !path.is_empty() => path.into(),
        _ => {
            let (secret, _) =
                secret_path(meta.secret_file.as_deref(), Path::new(DEFAULT_SECRET_FILE));
            secret.parent().unwrap_or(Path::new(".")).join(MASTER_KEY_FILE_NAME)
        }
    };
    MasterKey::read_file(&path).map_err(|e| {
        cli_error!(
            "{e}. KMS keys are sealed with the S3 gateway's master key: pass --master-key FILE \
             (the gateway's --master-key) or set {MASTER_KEY_ENV}"
        )
    })
}

/// Every version record of the `kms_keys` namespace, by key id (ids in order).
fn load_all(meta: &MetaClient) -> Result<Vec<KmsKey>, CliError> {
    let mut versions: Vec<KmsVersion> = Vec::new();
    let mut after: Option<String> = None;
    loop {
        let mut query = String::from("limit=1000");
        if let Some(after) = &after {
            query.push_str("&start_after=");
            weft_s3::sigv4::uri_encode(&mut query, after, true);
        }
        let page = meta.get_query(&["records", sse::KMS_KEYS], &query)?;
        for record in page["records"].as_array().into_iter().flatten() {
            if let Ok(version) = serde_json::from_value(record["value"].clone()) {
                versions.push(version);
            }
        }
        match page["next_start_after"].as_str() {
            Some(next) => after = Some(next.to_string()),
            None => break,
        }
    }
    let mut ids: Vec<String> = versions.iter().map(|v| v.id.clone()).collect();
    ids.sort();
    ids.dedup();
    Ok(ids.iter().map(|id| KmsKey::of_versions(id, versions.iter().cloned())).collect())
}

/// Creates version `version` of `id` (create-only); Ok(false) when it exists already.
fn put_version(meta: &MetaClient, version: &KmsVersion) -> Result<bool, CliError> {
    let name = sse::kms_record_name(&version.id, version.version);
    let value = serde_json::to_value(version).expect("KMS versions serialize");
    match meta.put_query(&["records", sse::KMS_KEYS, &name], "if_absent=true", &value) {
        Ok(_) => Ok(true),
        Err(error) if error.0.contains("[record_exists]") => Ok(false),
        Err(error) => Err(error),
    }
}

fn check_id(id: &str) -> Result<(), CliError> {
    if sse::valid_kms_key_id(id) {
        return Ok(());
    }
    Err(cli_error!("KMS key id {id:?} must be 1–64 of A-Z a-z 0-9 _ . -"))
}

fn print_version(version: &KmsVersion, json: bool, verb: &str) {
    if json {
        print_json(&json!({
            "id": version.id, "version": version.version, "created_ms": version.created_ms,
        }));
    } else {
        println!("{verb} KMS key {} version {}", version.id, version.version);
    }
}

pub fn run(command: KmsCommand) -> Result<(), CliError> {
    match command {
        KmsCommand::MasterKey(MasterKeyCommand::Create(args)) => {
            MasterKey::create_file(&args.file).map_err(|e| cli_error!("{e}"))?;
            println!("wrote a master key to {} (mode 0600)", args.file.display());
            Ok(())
        }
        KmsCommand::Key(KeyCommand::Create(args)) => {
            check_id(&args.id)?;
            let master = master_key(&args.master, &args.meta)?;
            let meta = args.meta.client()?;
            let version = KmsVersion::generate(&master, &args.id, 1, now_ms());
            if !put_version(&meta, &version)? {
                return Err(cli_error!(
                    "KMS key {:?} exists already (`weft kms key rotate {}` gives it a new version)",
                    args.id,
                    args.id
                ));
            }
            print_version(&version, args.json, "created");
            Ok(())
        }
        KmsCommand::Key(KeyCommand::Rotate(args)) => {
            check_id(&args.id)?;
            let master = master_key(&args.master, &args.meta)?;
            let meta = args.meta.client()?;
            let keys = load_all(&meta)?;
            let Some(key) = keys.into_iter().find(|k| k.id == args.id) else {
                return Err(cli_error!(
                    "no KMS key {:?} (create it with `weft kms key create {}`)",
                    args.id,
                    args.id
                ));
            };
            // The material of the current version must open with this master key: a
            // rotation with the wrong one would make a version no gateway can use.
            let current = key.current().expect("a listed key has a version");
            if key.material(&master, current).is_none() {
                return Err(cli_error!(
                    "version {current} of KMS key {:?} does not open with this master key: \
                     is it the gateway's?",
                    args.id
                ));
            }
            let first = key.next_version();
            for number in first..first + ROTATE_ATTEMPTS {
                let version = KmsVersion::generate(&master, &args.id, number, now_ms());
                if put_version(&meta, &version)? {
                    print_version(&version, args.json, "rotated");
                    return Ok(());
                }
            }
            Err(cli_error!(
                "KMS key {:?}: gave up after {ROTATE_ATTEMPTS} versions taken by other rotations",
                args.id
            ))
        }
        KmsCommand::Key(KeyCommand::Ls(args)) => {
            let meta = args.meta.client()?;
            let keys = load_all(&meta)?;
            let rows: Vec<Value> = keys
                .iter()
                .map(|key| {
                    json!({
                        "id": key.id,
                        "current_version": key.current(),
                        "versions": key.versions.iter().map(|v| json!({
                            "version": v.version, "created_ms": v.created_ms,
                        })).collect::<Vec<_>>(),
                    })
                })
                .collect();
            if args.json {
                print_json(&json!({ "keys": rows }));
            } else if keys.is_empty() {
                println!("no KMS keys (create one with `weft kms key create ID`)");
            } else {
                for key in &keys {
                    println!(
                        "{}  version {} of {}",
                        key.id,
                        key.current().unwrap_or(0),
                        key.versions.len()
                    );
                }
            }
            Ok(())
        }
    }
}
