//! Heartbeats to meta: `POST {meta_url}/v1/heartbeat` with a [`Heartbeat`] as JSON, every
//! `heartbeat_interval_ms`.
//!
//! Invariants:
//! - The JSON shape of [`Heartbeat`] is the contract with meta (docs/node-api.md); fields are
//!   only ever added.
//! - A failed heartbeat (meta down, timeout, non-2xx) is logged and retried at the next tick;
//!   it never stops the node. Each request times out after one interval (at least 1 s), so
//!   heartbeats never pile up.
//! - Disk usage is gathered on a blocking task.
//! - Each disk's capacity (statvfs) is checked at every report: this is the "later check"
//!   that lets a disk that hit ENOSPC turn writable again once space is freed.

use std::{sync::Arc, time::Duration};
use weft_auth::sign_reqwest::SendSigned;

use tokio::sync::watch;

use weft_store::CapacityState;

use crate::Node;

pub use weft_wire::{DiskReport, DiskState, Heartbeat};

/// The state of every disk. Blocking: scans the disk directories.
pub(crate) fn disk_reports(node: &Node) -> Vec<DiskReport> {
    node.disks
        .iter()
        .enumerate()
        .map(|(index, disk)| {
            let (units, bytes, failed) = match disk.usage() {
                Ok(usage) => (usage.units, usage.file_bytes, None),
                Err(error) => (0, 0, Some(disk.failure().unwrap_or_else(|| error.to_string()))),
            };
            let capacity = disk.capacity();
            DiskReport {
                index: index as u32,
                dir: disk.dir().display().to_string(),
                units,
                bytes,
                failed,
                free_bytes: capacity.free_bytes,
                total_bytes: capacity.total_bytes,
                state: match capacity.state {
                    CapacityState::Ok => DiskState::Ok,
                    CapacityState::Nearfull => DiskState::Nearfull,
                    CapacityState::Full => DiskState::Full,
                },
                model: node.models[index].as_ref().map(|model| model.stats()),
                raidp: node.raidp[index].as_ref().map(|side| side.report()),
            }
        })
        .collect()
}

pub(crate) async fn run(
    node: Arc<Node>,
    meta_url: String,
    signer: weft_auth::Signer,
    endpoint: String,
    interval_ms: u64,
    mut stopped: watch::Receiver<bool>,
) {
    let mut metas = crate::scrub::Metas::new(&meta_url);
    let interval = Duration::from_millis(interval_ms);
    let client = match weft_auth::sign_reqwest::client_builder()
        .timeout(interval.max(Duration::from_secs(1)))
        .build()
    {
        Ok(client) => client,
        Err(error) => {
            tracing::error!(%error, "cannot build the heartbeat client; no heartbeats");
            return;
        }
    };
    let mut ticker = tokio::time::interval(interval);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = ticker.tick() => {}
            _ = stopped.wait_for(|stop| *stop) => return,
        }
        let reporting = node.clone();
        let disks = match tokio::task::spawn_blocking(move || disk_reports(&reporting)).await {
            Ok(disks) => disks,
            Err(error) => {
                tracing::warn!(%error, "gathering disk state for a heartbeat failed");
                continue;
            }
        };
        let heartbeat = Heartbeat {
            node_id: node.node_id,
            endpoint: endpoint.clone(),
            pid: std::process::id(),
            disks,
            rack: node.rack,
        };
        let body = serde_json::to_vec(&heartbeat).expect("a heartbeat always serialises");
        let url = format!("{}/v1/heartbeat", metas.base());
        let sent = client
            .post(url.as_str())
            .header(reqwest::header::CONTENT_TYPE, "application/json")
            .body(body)
            .send_signed(&signer)
            .await;
        match sent {
            Ok(response) if response.status().is_success() => {
                node.metrics.heartbeat(true);
            }
            Ok(response) => {
                node.metrics.heartbeat(false);
                metas.failed(Some(response.status()));
                tracing::warn!(%url, status = %response.status(), "meta refused a heartbeat");
            }
            Err(error) => {
                node.metrics.heartbeat(false);
                metas.failed(None);
                tracing::warn!(%url, %error, "heartbeat to meta failed; the next goes to the next meta");
            }
        }
    }
}
