//! Counters behind `GET /metrics`, rendered in the Prometheus text format (version 0.0.4).
//!
//! Invariants:
//! - Counters only grow while the node runs; a restart resets them (Prometheus handles resets).
//! - Request labels are the route template (e.g. `/v1/disks/{disk}/units/{unit}`), never the
//!   raw path, so the number of series stays bounded by the number of routes.

use std::{
    collections::BTreeMap,
    fmt::Write,
    sync::{
        atomic::{AtomicU64, Ordering},
        Mutex,
    },
};

use crate::heartbeat::DiskReport;

#[derive(Debug, Default)]
pub(crate) struct Metrics {
    /// (method, route, status) → requests.
    requests: Mutex<BTreeMap<(String, String, u16), u64>>,
    bytes_in: AtomicU64,
    bytes_out: AtomicU64,
    heartbeats_sent: AtomicU64,
    heartbeats_failed: AtomicU64,
    scrub_bytes: AtomicU64,
    scrub_units: AtomicU64,
    scrub_bad_units: AtomicU64,
    scrub_passes: AtomicU64,
}

impl Metrics {
    pub(crate) fn request(&self, method: &str, route: &str, status: u16) {
        let mut requests = self.requests.lock().unwrap_or_else(|p| p.into_inner());
        *requests.entry((method.to_owned(), route.to_owned(), status)).or_default() += 1;
    }

    pub(crate) fn bytes_in(&self, bytes: u64) {
        self.bytes_in.fetch_add(bytes, Ordering::Relaxed);
    }

    pub(crate) fn bytes_out(&self, bytes: u64) {
        self.bytes_out.fetch_add(bytes, Ordering::Relaxed);
    }

    pub(crate) fn heartbeat(&self, ok: bool) {
        let counter = if ok { &self.heartbeats_sent } else { &self.heartbeats_failed };
        counter.fetch_add(1, Ordering::Relaxed);
    }

    /// One unit of `bytes` data bytes checked by the scrub.
    pub(crate) fn scrubbed(&self, bytes: u64) {
        self.scrub_units.fetch_add(1, Ordering::Relaxed);
        self.scrub_bytes.fetch_add(bytes, Ordering::Relaxed);
    }

    /// A scrub pass ended.
    pub(crate) fn scrub_pass(&self, summary: &crate::scrub::PassSummary) {
        self.scrub_passes.fetch_add(1, Ordering::Relaxed);
        self.scrub_bad_units.fetch_add(summary.bad, Ordering::Relaxed);
    }

    /// The text exposition of every counter plus the given disk state.
    pub(crate) fn render(&self, node_id: u32, disks: &[DiskReport]) -> String {
        let mut out = String::new();
        let node = format!("node=\"{node_id}\"");
        out.push_str(
            "# HELP weft_node_requests_total HTTP requests by method, route and status.\n",
        );
        out.push_str("# TYPE weft_node_requests_total counter\n");
        let requests = self.requests.lock().unwrap_or_else(|p| p.into_inner()).clone();
        for ((method, route, status), count) in requests {
            let _ = writeln!(
                out,
                "weft_node_requests_total{{{node},method=\"{method}\",route=\"{}\",status=\"{status}\"}} {count}",
                escape(&route)
            );
        }
        let counters = [
            ("weft_node_bytes_in_total", "Unit bytes received by PUT.", &self.bytes_in),
            ("weft_node_bytes_out_total", "Unit bytes sent by GET.", &self.bytes_out),
            ("weft_node_heartbeats_sent_total", "Heartbeats meta accepted.", &self.heartbeats_sent),
            (
                "weft_node_heartbeats_failed_total",
                "Heartbeats that failed.",
                &self.heartbeats_failed,
            ),
            ("weft_node_scrub_units_total", "Units the scrub checked.", &self.scrub_units),
            (
                "weft_node_scrub_bytes_total",
                "Bytes the scrub read and verified.",
                &self.scrub_bytes,
            ),
            (
                "weft_node_scrub_bad_units_total",
                "Bad units the scrub found.",
                &self.scrub_bad_units,
            ),
            ("weft_node_scrub_passes_total", "Scrub passes completed.", &self.scrub_passes),
        ];
        for (name, help, value) in counters {
            let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} counter");
            let _ = writeln!(out, "{name}{{{node}}} {}", value.load(Ordering::Relaxed));
        }
        let gauges: [Gauge; 6] = [
            ("weft_node_disk_units", "Units stored on the disk.", |d| d.units),
            ("weft_node_disk_bytes", "Bytes the disk's unit files take.", |d| d.bytes),
            ("weft_node_disk_failed", "1 if the disk refuses work.", |d| {
                u64::from(d.failed.is_some())
            }),
            ("weft_node_disk_free_bytes", "Bytes still writable on the disk's filesystem.", |d| {
                d.free_bytes.unwrap_or(0)
            }),
            ("weft_node_disk_total_bytes", "Size of the disk's filesystem.", |d| {
                d.total_bytes.unwrap_or(0)
            }),
            ("weft_node_disk_full", "0 ok, 1 nearfull, 2 full (read-only).", |d| match d.state {
                weft_wire::DiskState::Ok => 0,
                weft_wire::DiskState::Nearfull => 1,
                weft_wire::DiskState::Full => 2,
            }),
        ];
        let modeled: [Gauge; 5] = [
            ("weft_node_disk_model_ios_total", "IOs the disk's hardware model served.", |d| {
                d.model.as_ref().map_or(0, |m| m.ios)
            }),
            (
                "weft_node_disk_model_seeks_total",
                "Modeled IOs that paid a positioning time.",
                |d| d.model.as_ref().map_or(0, |m| m.seeks),
            ),
            ("weft_node_disk_model_bytes_total", "Bytes the modeled disk transferred.", |d| {
                d.model.as_ref().map_or(0, |m| m.bytes)
            }),
            ("weft_node_disk_model_busy_microseconds_total", "Modeled busy time.", |d| {
                d.model.as_ref().map_or(0, |m| m.busy_us)
            }),
            (
                "weft_node_disk_model_queue_wait_microseconds_total",
                "Time IOs waited for the modeled disk.",
                |d| d.model.as_ref().map_or(0, |m| m.queue_wait_us),
            ),
        ];
        let has_models = disks.iter().any(|d| d.model.is_some());
        let series = gauges
            .into_iter()
            .map(|g| (g, "gauge"))
            .chain(modeled.into_iter().filter(|_| has_models).map(|c| (c, "counter")));
        for ((name, help, value), kind) in series {
            let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} {kind}");
            for disk in disks {
                let _ = writeln!(
                    out,
                    "{name}{{{node},disk=\"{}\",dir=\"{}\"}} {}",
                    disk.index,
                    escape(&disk.dir),
                    value(disk)
                );
            }
        }
        out
    }
}

/// A per-disk gauge: name, help, value.
type Gauge = (&'static str, &'static str, fn(&DiskReport) -> u64);

/// Escapes a label value: backslash, double quote and newline.
fn escape(value: &str) -> String {
    value.replace('\\', "\\\\").replace('"', "\\\"").replace('\n', "\\n")
}
