//! The transition executor: changes the code of a stored object (Okapi §4.5).
//!
//! Regroup data flow: meta plans (`POST /v1/transitions`: the new groups, where each new
//! parity unit goes under a fresh parity generation, which data blocks must move) → for each
//! new group, its data blocks are read once (degraded when a unit is unavailable), the new
//! parity is encoded and written, and the blocks to relocate are written at their new disk
//! from the bytes already read → `commit` swaps the object's layout and parity list in one
//! meta transaction → the old parity and the old copies of relocated blocks are deleted.
//! Restripe data flow: the object is read whole and written again under the new layout as a
//! new generation of the same key (a normal put; its commit replaces the old units).
//!
//! Invariants:
//! - Until `commit`, meta's record of the object is untouched: the old parity stays valid and
//!   readable, reads and repairs go on as before. New parity units have their own unit keys
//!   (parity generation = transition id), so nothing old is overwritten.
//! - Any failure before the commit aborts the transition in meta and deletes what was
//!   written; a crash leaves a pending transition that `resume`/`abort` finishes (its units
//!   are garbage until then, never referenced).
//! - Every byte is accounted: bytes fetched from nodes, data, parity and relocated bytes
//!   written; `network_bytes` is their sum (the executor is a client of every node).

use std::time::Instant;

use bytes::Bytes;
use serde::Serialize;
use serde_json::{json, Value};
use weft_layout::{StripedLayout, TransitionIo, TransitionMode, UnitId};

use crate::{read::UnitRebuilder, Client, ClientError, ObjectInfo, PutOptions, Result, UnitInfo};

/// What one transition did, measured, beside what meta predicted.
#[derive(Clone, Debug, Serialize)]
pub struct TransitionReport {
    pub bucket: String,
    pub key: String,
    pub mode: TransitionMode,
    pub from: StripedLayout,
    pub to: StripedLayout,
    pub size: u64,
    pub dry_run: bool,
    /// Measured bytes (zero for a dry run).
    pub io: TransitionIo,
    /// meta's predictions for both modes: `{"regroup": {...}, "restripe": {...}}`.
    pub predicted: Value,
    pub relocated_blocks: usize,
    pub elapsed_ms: u64,
}

/// A planned relocation as meta sends it.
struct PlannedMove {
    block: usize,
    /// The block's new home (same unit key, another disk); the old copy is in commit's
    /// delete list.
    to: UnitInfo,
}

fn field<'a>(value: &'a Value, name: &str) -> Result<&'a Value> {
    match &value[name] {
        Value::Null => Err(ClientError::Invalid(format!("meta's transition plan lacks {name:?}"))),
        found => Ok(found),
    }
}

fn units(value: &Value) -> Result<Vec<UnitInfo>> {
    value.as_array().into_iter().flatten().map(UnitInfo::from_json).collect()
}

/// A relocation entry: `{"unit","len","unit_key","from":{node_id,endpoint,disk},"to":{…}}`.
fn planned_move(value: &Value) -> Result<PlannedMove> {
    let bad = || ClientError::Invalid(format!("meta sent a bad relocation: {value}"));
    let unit = value["unit"].as_str().and_then(UnitId::parse_short_name).ok_or_else(bad)?;
    let UnitId::Data(block) = unit else { return Err(bad()) };
    let at = |side: &Value| -> Result<UnitInfo> {
        UnitInfo::from_json(&json!({
            "unit": unit.short_name(), "node_id": side["node_id"], "endpoint": side["endpoint"],
            "disk": side["disk"], "unit_key": value["unit_key"], "len": value["len"],
        }))
    };
    Ok(PlannedMove { block, to: at(&value["to"])? })
}

impl Client {
    /// Changes the code of (bucket, key) to `to` (which must keep the striping for a regroup).
    /// `dry_run` plans and reports the predicted IO without writing anything.
    pub async fn transition(
        &self,
        bucket: &str,
        key: &str,
        to: StripedLayout,
        mode: Option<TransitionMode>,
        dry_run: bool,
    ) -> Result<TransitionReport> {
        let object = self.meta.get_object(bucket, key).await?;
        let mode = mode.unwrap_or_else(|| TransitionMode::auto(&object.layout, &to));
        match mode {
            TransitionMode::Regroup => self.regroup(object, to, dry_run).await,
            TransitionMode::Restripe => self.restripe(object, to, dry_run).await,
        }
    }

    async fn regroup(
        &self,
        object: ObjectInfo,
        to: StripedLayout,
        dry_run: bool,
    ) -> Result<TransitionReport> {
        let started = Instant::now();
        let body =
            json!({"bucket": object.bucket, "key": object.key, "layout": to, "mode": "regroup"});
        let plan = self.meta.post_json("/v1/transitions", body).await?;
        let id = field(&plan, "transition")?["id"]
            .as_u64()
            .ok_or_else(|| ClientError::Invalid("meta's transition has no id".into()))?;
        if let Some(replaced) = plan["replaced"].as_object() {
            // An unfinished earlier transition: its parity and block copies are garbage now.
            for list in ["create", "relocation_copies"] {
                let left = units(replaced.get(list).unwrap_or(&Value::Null))?;
                self.delete_units(&left).await;
            }
        }
        let current = ObjectInfo::from_json(field(&plan, "object")?.clone())?;
        let create = units(field(&plan, "create")?)?;
        let moves: Vec<PlannedMove> = plan["relocations"]
            .as_array()
            .into_iter()
            .flatten()
            .map(planned_move)
            .collect::<Result<_>>()?;
        let mut report = TransitionReport {
            bucket: current.bucket.clone(),
            key: current.key.clone(),
            mode: TransitionMode::Regroup,
            from: current.layout,
            to,
            size: current.size,
            dry_run,
            io: TransitionIo::default(),
            predicted: plan["predicted"].clone(),
            relocated_blocks: moves.len(),
            elapsed_ms: 0,
        };
        if dry_run {
            self.abort_transition(&current, id).await?;
            report.elapsed_ms = started.elapsed().as_millis() as u64;
            return Ok(report);
        }
        let written = match self.write_regroup(&current, &to, &create, &moves, &mut report.io).await
        {
            Ok(()) => self.commit_transition(&current, id).await,
            Err(error) => Err(error),
        };
        if let Err(error) = written {
            // meta hands back what to delete; if it no longer knows the transition (object
            // replaced or deleted meanwhile), delete what this transition wrote ourselves.
            if self.abort_transition(&current, id).await.is_err() {
                let mut ours = create.clone();
                ours.extend(moves.iter().map(|m| m.to.clone()));
                self.delete_units(&ours).await;
            }
            return Err(error);
        }
        report.io.network_bytes = report.io.bytes_read
            + report.io.data_bytes_written
            + report.io.parity_bytes_written
            + report.io.relocated_bytes;
        report.elapsed_ms = started.elapsed().as_millis() as u64;
        Ok(report)
    }

    /// Reads each new group's data blocks once, writes its new parity and the blocks that move.
    async fn write_regroup(
        &self,
        object: &ObjectInfo,
        to: &StripedLayout,
        create: &[UnitInfo],
        moves: &[PlannedMove],
        io: &mut TransitionIo,
    ) -> Result<()> {
        let code = to.code.build()?;
        let size = object.size;
        let mut rebuilder = UnitRebuilder::new(self, object.clone(), true)?;
        for group in 0..to.groups(size) {
            let unit_len = to.unit_len(size, group) as usize;
            let blocks = to.group_blocks(size, group);
            let mut data: Vec<Vec<u8>> = vec![vec![0; unit_len]; to.k()];
            for x in blocks.clone() {
                let bytes = rebuilder.read_block(x).await?;
                data[x - blocks.start][..bytes.len()].copy_from_slice(&bytes);
                if let Some(planned) = moves.iter().find(|m| m.block == x) {
                    self.put_unit(&planned.to, bytes.clone()).await?;
                    io.relocated_bytes += bytes.len() as u64;
                }
            }
            let mut parity: Vec<Vec<u8>> = vec![vec![0; unit_len]; to.r()];
            {
                let inputs: Vec<&[u8]> = data.iter().map(|d| d.as_slice()).collect();
                let mut outputs: Vec<&mut [u8]> =
                    parity.iter_mut().map(|p| p.as_mut_slice()).collect();
                code.encode(&inputs, &mut outputs)?;
            }
            for (index, bytes) in parity.into_iter().enumerate() {
                let unit = UnitId::Parity { group, index };
                let target = create.iter().find(|u| u.unit == unit).ok_or_else(|| {
                    ClientError::Invalid(format!(
                        "meta's plan has no place for {}",
                        unit.short_name()
                    ))
                })?;
                io.parity_bytes_written += bytes.len() as u64;
                self.put_unit(target, Bytes::from(bytes)).await?;
            }
        }
        io.bytes_read = rebuilder.bytes_fetched;
        Ok(())
    }

    /// Writes a unit; an existing one with that key (left by an interrupted attempt of this
    /// same transition: same key, same content) is replaced.
    async fn put_unit(&self, unit: &UnitInfo, bytes: Bytes) -> Result<()> {
        match self.nodes.put(unit, bytes.clone()).await {
            Ok(()) => Ok(()),
            Err(failure) if failure.kind == crate::node::FailureKind::Exists => {
                self.nodes.delete(unit).await.map_err(|f| f.for_unit(unit))?;
                self.nodes.put(unit, bytes).await.map_err(|f| f.for_unit(unit))
            }
            Err(failure) => Err(failure.for_unit(unit)),
        }
    }

    async fn commit_transition(&self, object: &ObjectInfo, id: u64) -> Result<()> {
        let body = json!({"bucket": object.bucket, "key": object.key, "id": id});
        let done = self.meta.post_json("/v1/transitions/commit", body).await?;
        let garbage = units(&done["delete"])?;
        self.delete_units(&garbage).await;
        Ok(())
    }

    /// Abandons a pending transition and deletes what it wrote.
    pub async fn abort_transition(&self, object: &ObjectInfo, id: u64) -> Result<()> {
        let body = json!({"bucket": object.bucket, "key": object.key, "id": id});
        let done = self.meta.post_json("/v1/transitions/abort", body).await?;
        let garbage = units(&done["delete"])?;
        self.delete_units(&garbage).await;
        Ok(())
    }

    async fn restripe(
        &self,
        object: ObjectInfo,
        to: StripedLayout,
        dry_run: bool,
    ) -> Result<TransitionReport> {
        let started = Instant::now();
        let size = object.size;
        // Both predictions when a regroup could do it too (meta plans it; nothing written).
        let predicted = if TransitionMode::auto(&object.layout, &to) == TransitionMode::Regroup {
            Box::pin(self.regroup(object.clone(), to, true)).await?.predicted
        } else {
            json!({ "restripe": weft_layout::restripe_io(&to, size) })
        };
        let mut report = TransitionReport {
            bucket: object.bucket.clone(),
            key: object.key.clone(),
            mode: TransitionMode::Restripe,
            from: object.layout,
            to,
            size,
            dry_run,
            io: TransitionIo::default(),
            predicted,
            relocated_blocks: 0,
            elapsed_ms: 0,
        };
        if dry_run {
            return Ok(report);
        }
        // Read it all (to a temporary file: objects may be larger than memory), then write
        // it again as a new generation of the same key.
        let mut temp = tempfile_for_restripe()?;
        let stats = self.get_object_range(object.clone(), None, temp.file(), None).await?;
        let path = temp.path.clone();
        let options = PutOptions { policy: Some(to), progress: None };
        let put = self.put_file(&object.bucket, &object.key, &path, &options).await?;
        report.io = TransitionIo {
            bytes_read: stats.bytes_fetched,
            data_bytes_written: put.data_bytes,
            parity_bytes_written: put.parity_bytes,
            relocated_bytes: 0,
            network_bytes: stats.bytes_fetched + put.bytes_sent,
        };
        report.elapsed_ms = started.elapsed().as_millis() as u64;
        drop(temp);
        Ok(report)
    }
}

/// A temporary file removed on drop.
struct TempFile {
    path: std::path::PathBuf,
    file: std::fs::File,
}

impl TempFile {
    fn file(&mut self) -> &mut std::fs::File {
        &mut self.file
    }
}

impl Drop for TempFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

fn tempfile_for_restripe() -> Result<TempFile> {
    let dir = std::env::temp_dir();
    let stamp = Instant::now().elapsed().as_nanos() ^ u128::from(std::process::id());
    for attempt in 0..100u32 {
        let path = dir.join(format!("weft-restripe-{}-{stamp}-{attempt}.tmp", std::process::id()));
        match std::fs::OpenOptions::new().read(true).write(true).create_new(true).open(&path) {
            Ok(file) => return Ok(TempFile { path, file }),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
            Err(source) => {
                return Err(ClientError::Io {
                    what: format!("cannot create {}", path.display()),
                    source,
                })
            }
        }
    }
    Err(ClientError::Invalid("cannot create a temporary file for the restripe".into()))
}
