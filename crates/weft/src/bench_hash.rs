//! `weft bench hash`: the hashes every stored and every uploaded byte goes through, weft's
//! kernels beside the crates they replace, in the same run.
//!
//! Rows: the end-to-end unit digest every writer records now (keyed,
//! [`weft_client::digest::DigestKey`]) beside the BLAKE3 it replaced (the `blake3` crate);
//! the BLAKE3 digest older units carry ([`weft_client::digest::blake3_digest`]) beside the
//! `blake3` crate's pure-Rust build; MD5 and SHA-256 of an upload in one pass
//! ([`weft_s3::md5_sha256::Md5Sha256`]) beside the `md-5` and `sha2` crates one after the
//! other; MD5 alone ([`weft_s3::md5`]) beside `md-5`.
//!
//! Invariants:
//! - Every pair's outputs are compared before anything is timed: a faster wrong answer is an
//!   error, not a result. The keyed digest has no outside twin: its check is the same digest
//!   by the portable kernel.
//! - The input is one buffer of `--size` bytes, touched before the first timed pass; each
//!   round times every implementation once, the order rotating from round to round, and a
//!   row reports its median round (GB/s, 10^9 bytes) and the median of same-round ratios.
//! - `--json` prints an array of the rows, each naming its size, rounds and machine.

use std::time::Instant;

use clap::Args;
use md5::Digest as _;
use serde::Serialize;

use crate::{cli_error, CliError};

/// Largest input (the buffer is allocated whole).
const MAX_SIZE: usize = 4 << 30;

#[derive(Debug, Args)]
pub struct HashBenchArgs {
    /// Bytes hashed per pass, e.g. 64MiB (at most 4GiB).
    #[arg(long, default_value = "64MiB", value_parser = crate::parse_size)]
    size: usize,
    /// Rounds; each row reports its median.
    #[arg(long, default_value_t = 5)]
    rounds: usize,
    /// Print JSON instead of a table.
    #[arg(long)]
    json: bool,
}

#[derive(Debug, Serialize)]
struct Row {
    hash: &'static str,
    weft: &'static str,
    peer: &'static str,
    weft_gb_s: f64,
    peer_gb_s: f64,
    /// Median of the rounds' weft ÷ peer.
    ratio: f64,
    size_bytes: usize,
    rounds: usize,
    machine: crate::bench::Machine,
}

/// One way to hash the input: a name and a function returning its digest bytes.
type Hasher = (&'static str, fn(&[u8]) -> Vec<u8>);

/// A fixed digest key (the timing does not depend on it).
fn bench_key() -> &'static weft_client::digest::DigestKey {
    static KEY: std::sync::OnceLock<std::sync::Arc<weft_client::digest::DigestKey>> =
        std::sync::OnceLock::new();
    KEY.get_or_init(|| {
        let text = format!("weft-cluster-secret-v1 {}\n", "5a".repeat(32));
        let secret = weft_auth::ClusterSecret::parse(&text).expect("a well-formed secret");
        weft_client::digest::DigestKey::of(&secret)
    })
}

fn weft_keyed(data: &[u8]) -> Vec<u8> {
    let keyed = weft_client::digest::DigestKind::Keyed;
    bench_key().digest_of(keyed, data).bytes().to_vec()
}

fn weft_keyed_portable(data: &[u8]) -> Vec<u8> {
    let portable = bench_key().with_kernel(weft_client::polyval::Kernel::Soft);
    portable.digest_of(weft_client::digest::DigestKind::Keyed, data).bytes().to_vec()
}

fn weft_digest(data: &[u8]) -> Vec<u8> {
    weft_client::digest::blake3_digest(data).bytes().to_vec()
}

fn crate_digest(data: &[u8]) -> Vec<u8> {
    // A unit digest is BLAKE3's hash cut to its first 16 bytes.
    blake3::hash(data).as_bytes()[..16].to_vec()
}

fn weft_md5_sha256(data: &[u8]) -> Vec<u8> {
    let mut both = weft_s3::md5_sha256::Md5Sha256::new();
    both.update(data);
    let (md5, sha) = both.finalize();
    [&md5[..], &sha[..]].concat()
}

fn crates_md5_sha256(data: &[u8]) -> Vec<u8> {
    let md5 = md5::Md5::digest(data);
    let sha = <sha2::Sha256 as sha2::Digest>::digest(data);
    [&md5[..], &sha[..]].concat()
}

fn weft_md5(data: &[u8]) -> Vec<u8> {
    weft_s3::md5::digest(data).to_vec()
}

fn crate_md5(data: &[u8]) -> Vec<u8> {
    md5::Md5::digest(data).to_vec()
}

fn median(values: &mut [f64]) -> f64 {
    values.sort_by(f64::total_cmp);
    values[values.len() / 2]
}

pub fn run(args: HashBenchArgs) -> Result<(), CliError> {
    if args.size == 0 || args.size > MAX_SIZE {
        return Err(cli_error!("--size must be 1 byte to 4GiB"));
    }
    if args.rounds == 0 || args.rounds > 100 {
        return Err(cli_error!("--rounds must be 1 to 100"));
    }
    let mut state = 0x9E37_79B9_7F4A_7C15u64;
    let data: Vec<u8> = (0..args.size)
        .map(|_| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state as u8
        })
        .collect();
    // Each row: what is hashed, weft's kernel, its peer, and what weft's output must equal
    // before anything is timed: the peer's, or for the keyed digest (another function than
    // its peer's) its own portable kernel, on the first MiB (that kernel is slow).
    let pairs: [(&'static str, Hasher, Hasher, Option<Hasher>); 4] = [
        (
            "unit digest (keyed)",
            ("weft POLYVAL MAC", weft_keyed),
            ("blake3 crate", crate_digest),
            Some(("weft portable kernel", weft_keyed_portable)),
        ),
        (
            "old unit digest (BLAKE3)",
            ("weft batch kernels", weft_digest),
            ("blake3 crate", crate_digest),
            None,
        ),
        (
            "upload (MD5 + SHA-256)",
            ("weft one pass", weft_md5_sha256),
            ("md-5 + sha2 crates", crates_md5_sha256),
            None,
        ),
        ("MD5", ("weft", weft_md5), ("md-5 crate", crate_md5), None),
    ];
    for (hash, (_, ours), peer, twin) in &pairs {
        let ((name, theirs), input) = match twin {
            Some(twin) => (twin, &data[..data.len().min(1 << 20)]),
            None => (peer, &data[..]),
        };
        if ours(input) != theirs(input) {
            return Err(cli_error!("{hash}: weft's digest differs from the {name}'s"));
        }
    }
    let gb = args.size as f64 / 1e9;
    let machine = crate::bench::Machine::this();
    let mut rows = Vec::new();
    for (hash, (weft, ours), (peer, theirs), _) in pairs {
        let (mut mine, mut others, mut ratios) = (Vec::new(), Vec::new(), Vec::new());
        for round in 0..args.rounds {
            let time = |f: fn(&[u8]) -> Vec<u8>| {
                let start = Instant::now();
                std::hint::black_box(f(std::hint::black_box(&data)));
                gb / start.elapsed().as_secs_f64()
            };
            let (a, b) = if round % 2 == 0 {
                let a = time(ours);
                (a, time(theirs))
            } else {
                let b = time(theirs);
                (time(ours), b)
            };
            mine.push(a);
            others.push(b);
            ratios.push(a / b);
        }
        rows.push(Row {
            hash,
            weft,
            peer,
            weft_gb_s: median(&mut mine),
            peer_gb_s: median(&mut others),
            ratio: median(&mut ratios),
            size_bytes: args.size,
            rounds: args.rounds,
            machine: machine.clone(),
        });
    }
    if args.json {
        println!("{}", serde_json::to_string_pretty(&rows).expect("rows serialize"));
        return Ok(());
    }
    println!(
        "{:<24} {:<20} {:>8}  {:<20} {:>8}  {:>7}",
        "hash", "weft", "GB/s", "peer", "GB/s", "ratio"
    );
    for row in &rows {
        println!(
            "{:<24} {:<20} {:>8.3}  {:<20} {:>8.3}  {:>6.2}×",
            row.hash, row.weft, row.weft_gb_s, row.peer, row.peer_gb_s, row.ratio
        );
    }
    println!("{}", machine.line());
    Ok(())
}
