//! Whether a node is down: the one judgement every route and the repair detector use, over
//! meta's *running* clock, so that time meta did not run never counts as a node's silence.
//!
//! Invariants:
//! - The running clock ([`RunningClock`]) is monotonic and advances only while meta runs: each
//!   observation adds the monotonic time since the previous one, capped at
//!   [`MAX_RUNNING_STEP_MS`]. A ticker observes it every [`RUNNING_TICK_MS`], so while meta
//!   runs it keeps pace with real time; a pause of meta (SIGSTOP, a host asleep, a stalled
//!   runtime) adds at most one step however long it lasted.
//! - Per node, meta keeps in memory the running time of its last heartbeat received by this
//!   process. A node heard by this process is down when it has been silent for more than
//!   `down_after_ms` of running time *and* of wall-clock time; a node not heard since meta
//!   started is judged by the wall-clock age of its stored heartbeat, as before restarts had
//!   anything better (nodes heartbeat far more often than `down_after_ms`, so a live node is
//!   heard again within one heartbeat of a restart).
//! - Silence is judged for repair only once meta has *run* for more than `down_after_ms`
//!   ([`Liveness::judging_silence`]); see `repairs`.
//! - Nothing here is stored: after a restart the running clock starts at 0 again.
//! - "Heard since start" counts heartbeats this process received and, for metas sharing a
//!   store, heartbeats recorded in the store (by any of them) since this process started.

use std::{
    collections::HashMap,
    sync::{Mutex, RwLock},
    time::{Duration, Instant},
};

use tokio::sync::watch;

use super::now_ms;
use crate::NodeRecord;

/// How often the ticker advances the running clock.
pub const RUNNING_TICK_MS: u64 = 100;

/// The most one observation may advance the running clock: a gap longer than this means meta
/// did not run (or was starved), and the rest of the gap does not count as anyone's silence.
pub const MAX_RUNNING_STEP_MS: u64 = 500;

/// Meta's running clock and the running time of each node's last heartbeat.
#[derive(Debug)]
pub(crate) struct RunningClock {
    /// (last observation, running ms at it).
    state: Mutex<(Instant, u64)>,
    /// Node id → running ms of its last heartbeat received by this process.
    heard: RwLock<HashMap<u32, u64>>,
    /// Wall-clock ms at this process's start.
    started_wall_ms: u64,
}

impl RunningClock {
    pub(crate) fn new() -> RunningClock {
        RunningClock {
            state: Mutex::new((Instant::now(), 0)),
            heard: RwLock::new(HashMap::new()),
            started_wall_ms: now_ms(),
        }
    }

    /// Advances the clock by the time since the last observation (capped) and returns it.
    pub(crate) fn now(&self) -> u64 {
        let mut state = self.state.lock().expect("running clock");
        let at = Instant::now();
        let step = at.saturating_duration_since(state.0).as_millis() as u64;
        state.1 = state.1.saturating_add(step.min(MAX_RUNNING_STEP_MS));
        state.0 = at;
        state.1
    }

    /// Records that node `id` was heard now.
    pub(crate) fn heard(&self, id: u32) {
        let now = self.now();
        self.heard.write().expect("heard").insert(id, now);
    }

    /// The judgement at this instant.
    pub(crate) fn liveness(&self, down_after_ms: u64) -> Liveness {
        let running_ms = self.now();
        Liveness {
            wall_ms: now_ms(),
            running_ms,
            down_after_ms,
            heard: self.heard.read().expect("heard").clone(),
            started_wall_ms: self.started_wall_ms,
        }
    }

    /// Observes the clock every [`RUNNING_TICK_MS`] until `stopped` turns true.
    pub(crate) async fn tick(
        clock: std::sync::Arc<RunningClock>,
        mut stopped: watch::Receiver<bool>,
    ) {
        let mut interval = tokio::time::interval(Duration::from_millis(RUNNING_TICK_MS));
        interval.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = interval.tick() => {
                    clock.now();
                }
                _ = stopped.wait_for(|stop| *stop) => return,
            }
        }
    }
}

/// Who is down at one instant (see the module invariants).
#[derive(Debug, Clone)]
pub(crate) struct Liveness {
    /// Wall-clock ms since the Unix epoch at the judgement.
    pub(crate) wall_ms: u64,
    /// Meta's running ms at the judgement.
    pub(crate) running_ms: u64,
    pub(crate) down_after_ms: u64,
    heard: HashMap<u32, u64>,
    started_wall_ms: u64,
}

impl Liveness {
    /// Whether `node` is down.
    pub(crate) fn is_down(&self, node: &NodeRecord) -> bool {
        let wall_silent = node.is_down(self.wall_ms, self.down_after_ms);
        match self.heard.get(&node.node_id) {
            Some(&at) => wall_silent && self.running_ms.saturating_sub(at) > self.down_after_ms,
            None => wall_silent,
        }
    }

    /// Whether `node` has been heard since this meta process started: by this process, or
    /// by another meta of the same store (its stored heartbeat is newer than the start).
    pub(crate) fn heard_since_start(&self, node: &NodeRecord) -> bool {
        self.heard.contains_key(&node.node_id) || node.last_heartbeat_ms >= self.started_wall_ms
    }

    /// Meta has run long enough to have heard every live node: silence means down.
    pub(crate) fn judging_silence(&self) -> bool {
        self.running_ms > self.down_after_ms
    }

    /// A judgement at given instants, for tests.
    #[cfg(test)]
    pub(crate) fn at(
        wall_ms: u64,
        running_ms: u64,
        down_after_ms: u64,
        heard: &[(u32, u64)],
    ) -> Liveness {
        Liveness {
            wall_ms,
            running_ms,
            down_after_ms,
            heard: heard.iter().copied().collect(),
            started_wall_ms: u64::MAX,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(id: u32, last_heartbeat_ms: u64) -> NodeRecord {
        NodeRecord {
            node_id: id,
            endpoint: "http://e".into(),
            pid: 1,
            last_heartbeat_ms,
            disks: Vec::new(),
            rack: None,
        }
    }

    #[test]
    fn a_pause_of_meta_is_no_silence_but_running_silence_is() {
        // Heard at running 1000 / wall 10_000; meta paused 60 s, then ran 200 ms.
        let after_pause = Liveness::at(70_200, 1_700, 5_000, &[(1, 1_000)]);
        assert!(!after_pause.is_down(&node(1, 10_000)));
        // Really silent: 6 s of running time too.
        let silent = Liveness::at(76_000, 7_100, 5_000, &[(1, 1_000)]);
        assert!(silent.is_down(&node(1, 10_000)));
        // Not heard since start: the wall clock judges.
        assert!(after_pause.is_down(&node(2, 10_000)));
        assert!(!after_pause.is_down(&node(2, 70_000)));
    }

    #[test]
    fn the_running_clock_caps_each_step() {
        let clock = RunningClock::new();
        std::thread::sleep(Duration::from_millis(MAX_RUNNING_STEP_MS + 300));
        let after = clock.now();
        assert!(after <= MAX_RUNNING_STEP_MS, "advanced {after} ms in one step");
        assert!(after >= MAX_RUNNING_STEP_MS);
    }
}
