//! `weft repair mark-lost BUCKET KEY`: give up on an object whose lost units no repair can
//! rebuild (like Ceph's `mark_unfound_lost`). Semantics (docs/meta-api.md, "Unfound units and
//! lost objects"): meta deletes the object's record, drops its repair tasks and keeps a
//! tombstone, so it stops counting as unfound and reads fail clearly with `object_lost`
//! (until the key is written again or removed with `weft rm`); the copies of its units still
//! readable are then deleted from their nodes (those on nodes that are down are left to gc).
//!
//! Invariants:
//! - Nothing changes without `--yes`: without it the command says what would be given up and
//!   exits non-zero.
//! - Meta refuses an object with no unfound unit (`not_unfound`): a readable object is
//!   deleted with `weft rm`, never given up.
//! - With `--json`, stdout is one JSON object; errors go to stderr with a non-zero exit.

use clap::{Args, Subcommand};
use serde_json::json;
use weft_client::{ObjectInfo, UnitInfo};

use crate::{
    cli_error,
    cluster_cli::{print_json, MetaUrlArgs},
    CliError,
};

#[derive(Debug, Subcommand)]
pub enum RepairCommand {
    /// Give up on an object some of whose units are unfound (too few units of a group are
    /// readable to rebuild them): meta forgets the object and remembers it lost, so reads
    /// fail with "lost"; the readable copies of its units are deleted. Needs --yes.
    ///
    /// Example: weft repair mark-lost photos cat.jpg --yes --json
    #[command(verbatim_doc_comment)]
    MarkLost(MarkLostArgs),
}

#[derive(Debug, Args)]
pub struct MarkLostArgs {
    /// The object's bucket.
    pub bucket: String,
    /// The object's key.
    pub key: String,
    /// Confirm: the object's data is gone for good.
    #[arg(long)]
    pub yes: bool,
    /// Print the result as one JSON object.
    #[arg(long)]
    pub json: bool,
    #[command(flatten)]
    pub meta: MetaUrlArgs,
}

pub fn run(command: RepairCommand) -> Result<(), CliError> {
    match command {
        RepairCommand::MarkLost(args) => mark_lost(args),
    }
}

fn mark_lost(args: MarkLostArgs) -> Result<(), CliError> {
    let client = args.meta.cluster()?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(|e| cli_error!("cannot start the async runtime: {e}"))?;
    let path = format!("{}/{}", args.bucket, args.key);
    if !args.yes {
        let object = runtime.block_on(client.meta.get_object(&args.bucket, &args.key))?;
        let unfound = object.raw["unfound_units"].clone();
        return Err(cli_error!(
            "{path} (generation {}) has unfound units {unfound}; marking it lost deletes its \
             record and its readable units for good, and reads will fail with \"lost\". Run \
             again with --yes to confirm",
            object.generation
        ));
    }
    let reply = runtime.block_on(client.meta.mark_lost(&args.bucket, &args.key))?;
    let object = ObjectInfo::from_json(reply["object"].clone())?;
    let units: Vec<UnitInfo> = object.units.values().filter(|u| !u.is_down()).cloned().collect();
    let failed = runtime.block_on(client.delete_units(&units));
    let deleted = units.len() - failed;
    let left = object.units.len() - deleted;
    if args.json {
        print_json(&json!({
            "bucket": reply["bucket"],
            "key": reply["key"],
            "generation": reply["generation"],
            "lost": true,
            "unfound_units": reply["unfound_units"],
            "dropped_repairs": reply["dropped_repairs"],
            "units_deleted": deleted,
            "units_left": left,
        }));
        return Ok(());
    }
    println!(
        "{path} (generation {}) marked lost: unfound units {}, {} repair tasks dropped; {deleted} \
         readable units deleted, {left} left to gc (their nodes are down or unfound)",
        reply["generation"], reply["unfound_units"], reply["dropped_repairs"]
    );
    Ok(())
}
