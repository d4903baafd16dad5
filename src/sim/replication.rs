//! Partition replication in the simulated world: the glommio tasks around each node's
//! partitions (`SimReplica`, production's `Partition`), played as events. Roles from the node's
//! applied catalog; followers pull from their leader as production's fetcher decides
//! (`replication::follower_rules`: an epoch query first when they must truncate, then fetches
//! from their synced end) and take each answer with the fetcher's own code
//! (`fetcher::take_fetched`); a leader parks a fetch that finds nothing new, as its Fetch
//! handler does; a flusher syncs each node's appends; leaders ask the controller for the
//! in-sync set they want (`Replication::isr_request_due`, sent as AlterPartition); producers send
//! batches with acks=all or acks=1.
//!
//! What a leader acknowledges at acks=all is recorded; the checks (`replica_checks.rs`) hold
//! every replica's committed records to one history, and every new leader to every
//! acknowledged record.

use super::disk::DiskFaults;
use super::node::Wire;
use super::replica::{FetchAnswer, SimReplica};
use super::replica_log::{topic_meta, SimLog};
use super::world::{Event, World};
use crate::controller::{records, ControllerOp, IsrChange};
use crate::partition::commit::IsrRequest;
use crate::replication::fetcher::Taken;
use crate::replication::follower_rules::{next_ask, Ask};
use crate::storage::catalog::{self, BrokerRecord, PartitionAssignment};
use kafka_protocol::ResponseError;
use rand::Rng;
use rand_chacha::ChaCha8Rng;
use std::collections::BTreeMap;

/// (topic id, partition).
pub type Tp = ([u8; 16], i32);

/// How often each node runs its replication pass.
pub const REPLICATE_MS: u64 = 20;
/// A fetch without an answer for this long is given up (lost on the way) and sent again.
const FETCH_RETRY_MS: u64 = 2_000;
/// The high-watermark checkpoint's period (`Shard::checkpoint_high_watermarks`).
const HW_CHECKPOINT_MS: u64 = 5_000;

/// How long a leader holds a follower's fetch that finds nothing new (`fetcher::MAX_WAIT_MS`).
const FETCH_MAX_WAIT_MS: u64 = 500;

/// A follower's fetch a leader holds until data comes or it waited long enough.
struct ParkedFetch {
    follower: usize,
    tp: Tp,
    epoch: i32,
    offset: i64,
    until_ms: u64,
}

/// A node's partition replicas: on its disk, so they outlive its process.
#[derive(Default)]
pub struct NodeReplicas {
    pub replicas: BTreeMap<Tp, SimReplica>,
    /// The catalog generation last assigned to the replicas.
    assigned_generation: u64,
    flush_scheduled: bool,
    isr_asked_ms: BTreeMap<Tp, u64>,
    checkpointed_ms: u64,
    /// Follower fetches this node holds as leader (its process's state: lost in a crash).
    parked: Vec<ParkedFetch>,
}

impl NodeReplicas {
    /// The node crashed: every replica keeps what its disk kept. Returns how many replicas'
    /// recoveries cut a torn tail.
    pub fn crash(&mut self, rng: &mut ChaCha8Rng, power_cut: bool) -> u64 {
        let mut tails_cut = 0;
        for r in self.replicas.values_mut() {
            tails_cut += u64::from(r.crash(rng, power_cut) > 0);
        }
        self.assigned_generation = 0;
        self.flush_scheduled = false;
        self.isr_asked_ms.clear();
        self.parked.clear();
        tails_cut
    }
}

/// An acks=all produce waiting for the high watermark on its leader.
pub struct Waiting {
    pub node: usize,
    pub tp: Tp,
    pub base: i64,
    pub end: i64,
    pub payload: u64,
    pub generation: u64,
    pub answer: Answer,
    /// Given up on then (node `node`'s clock), as the broker's own appends time out; never for
    /// a client's produce (the client retries on its own).
    pub deadline_ms: u64,
}

/// Who learns of an acks=all produce's commit.
#[derive(Clone, Debug)]
pub enum Answer {
    /// A plain producer: the history only.
    Nobody,
    /// An idempotent producer, of its batch at `sequence`.
    Producer { producer: usize, sequence: i32 },
    /// The coordinator's cache and the committing client, of this offset of `tp`.
    OffsetCommit { tp: Tp, offset: i64 },
    /// The transactional producer, of its batch of `tp` at `sequence`.
    TxnRecords { tp: Tp, sequence: i32 },
    /// The transaction coordinator on this node: `record` of `id` is durable, then `then`.
    TxnState {
        id: String,
        record: crate::txn::state::TxnRecord,
        then: super::txns::AfterPersist,
    },
    /// The coordinator on node `coordinator`: the marker it asked for is committed.
    Marker {
        coordinator: usize,
        marker: super::txns::MarkerRequest,
    },
}

impl World {
    /// The replication pass of node `i`: roles from its catalog, fetches, in-sync set
    /// requests, the high-watermark checkpoint.
    pub(super) fn on_replicate(&mut self, i: usize) -> Result<(), super::checks::Violation> {
        self.schedule(REPLICATE_MS, Event::Replicate(i));
        self.assign_replicas(i)?;
        self.answer_parked_fetches(i);
        self.fetch_from_leaders(i);
        self.ask_for_isr(i);
        self.follow_offsets_leadership(i);
        self.coordinator_tick(i);
        self.txn_tick(i);
        let parts = &mut self.slots[i].partitions;
        if self.now_ms >= parts.checkpointed_ms + HW_CHECKPOINT_MS {
            parts.checkpointed_ms = self.now_ms;
            for r in parts.replicas.values() {
                r.log.checkpoint();
            }
        }
        Ok(())
    }

    /// Node `i`'s replica of `tp`, made (empty, on a disk of its own that finds itself full
    /// now and then while the node's disk does) if the node had none.
    fn replica_or_new(&mut self, i: usize, tp: Tp) -> &mut SimReplica {
        if !self.slots[i].partitions.replicas.contains_key(&tp) {
            let disk = &self.slots[i].disk;
            let no_space_ppm = match disk.no_space_ppm() {
                0 => 0,
                _ => self.workload.faults.log_no_space_ppm,
            };
            let faults = DiskFaults {
                no_space_ppm,
                ..disk.faults()
            };
            let min_insync = self.min_insync(i, tp);
            let log = SimLog::new(self.rng.gen(), faults, topic_meta(tp.0, tp.1, min_insync));
            let replicas = &mut self.slots[i].partitions.replicas;
            replicas.insert(tp, SimReplica::new(log));
        }
        let replicas = &mut self.slots[i].partitions.replicas;
        replicas.get_mut(&tp).expect("made above")
    }

    /// Installs node `i`'s catalog on its replicas when it changed (`Replication::assign`).
    fn assign_replicas(&mut self, i: usize) -> Result<(), super::checks::Violation> {
        let Some(node) = &self.slots[i].node else {
            return Ok(());
        };
        let generation = node.applied.generation();
        if generation == self.slots[i].partitions.assigned_generation {
            return Ok(());
        }
        // As `Shard::install` does: roles wait for this incarnation's registration.
        type Assigned = (Tp, (PartitionAssignment, Option<i32>));
        let (mine, brokers): (Vec<Assigned>, Vec<BrokerRecord>) = node.applied.read(|c| {
            let registered = catalog::registers(c, i as i32, node.incarnation);
            let mine = assignments(c)
                .filter(|(_, a)| a.replicas.contains(&(i as i32)))
                .map(|(tp, a)| {
                    let epoch = records::partition_epoch(c, &tp.0, tp.1);
                    let a = if registered { a.clone() } else { a.held_back() };
                    (tp, (a, epoch))
                })
                .collect();
            (mine, c.brokers.clone())
        });
        self.slots[i].partitions.assigned_generation = generation;
        for (tp, (a, partition_epoch)) in mine {
            let newest = self
                .ledger
                .history
                .newest_epoch
                .entry(tp)
                .or_insert(a.leader_epoch);
            *newest = (*newest).max(a.leader_epoch);
            let now_ms = self.clock_ms(i);
            let r = self.replica_or_new(i, tp);
            if r.assign(i as i32, (&a, partition_epoch), &brokers, now_ms) && r.is_leader() {
                self.trace.note(
                    self.now_ms,
                    format!(
                        "node {i} leads {} epoch {} isr {:?}",
                        tp_name(tp),
                        a.leader_epoch,
                        a.isr
                    ),
                );
                self.became_leader(i, tp)?;
            }
        }
        // Waiters of leaderships that ended fail.
        self.answer_waiters();
        Ok(())
    }

    /// Sends each followed partition's next epoch query or fetch to its leader.
    fn fetch_from_leaders(&mut self, i: usize) {
        let now_ms = self.clock_ms(i);
        let mut out = Vec::new();
        for (tp, r) in self.slots[i].partitions.replicas.iter_mut() {
            // What production's fetcher reads of the partition (`Replication::follower_view`).
            let Some(view) = r.follower_view() else {
                continue;
            };
            let idle = r
                .fetch_sent_ms
                .is_none_or(|at| now_ms >= at + FETCH_RETRY_MS);
            // A follower fetches from its synced end: the offset tells the leader it is durable.
            if view.leader < 0 || !idle || r.synced_end() < view.log_end_offset {
                continue;
            }
            r.fetch_sent_ms = Some(now_ms);
            let tp = *tp;
            let wire = match next_ask(&view) {
                Ask::EpochEnd { epoch, latest } => {
                    r.epoch_query = Some(latest);
                    Wire::EpochQuery { tp, epoch, latest }
                }
                Ask::Fetch { epoch, offset } => Wire::Fetch { tp, epoch, offset },
            };
            out.push((view.leader as usize, wire));
        }
        for (to, wire) in out {
            self.send(i, to, wire);
        }
    }

    /// Each partition node `i` leads asks the controller for the in-sync set it wants.
    fn ask_for_isr(&mut self, i: usize) {
        let Some(node) = &self.slots[i].node else {
            return;
        };
        let controller = node.applied.controller_id();
        let lag_max_ms = self.slots[i].config().cluster.replica_lag_time_max_ms;
        let now_ms = self.clock_ms(i);
        let parts = &mut self.slots[i].partitions;
        let mut asks = Vec::new();
        for (tp, r) in parts.replicas.iter_mut() {
            if controller < 0 {
                break;
            }
            let last = parts.isr_asked_ms.get(tp).copied();
            if let Some(request) = r.ask_isr(now_ms, lag_max_ms, last) {
                asks.push((*tp, request));
            }
        }
        for (tp, request) in asks {
            let note = format!(
                "node {i} asks for {} in sync {:?} → {:?} (epoch {}, sending {})",
                tp_name(tp),
                request.from,
                request.isr,
                request.epoch,
                request.sent
            );
            self.trace.note(self.now_ms, note);
            self.slots[i].partitions.isr_asked_ms.insert(tp, now_ms);
            // An RPC to the controller: one connection, in order.
            let c = controller as usize;
            let ask = Wire::AlterPartition(tp, request);
            self.send_ordered((i, c), i, c, ask);
        }
    }

    pub(super) fn min_insync(&self, i: usize, tp: Tp) -> usize {
        let Some(node) = &self.slots[i].node else {
            return 1;
        };
        node.applied.read(|c| {
            c.topics
                .iter()
                .find(|t| t.id == tp.0)
                .and_then(|t| t.configs.iter().find(|(k, _)| k == "min.insync.replicas"))
                .and_then(|(_, v)| v.parse().ok())
                .unwrap_or(1)
        })
    }

    /// Wakes node `i`'s flusher for its next pass, unless one is due or in flight.
    pub(super) fn schedule_flush(&mut self, i: usize) {
        if !std::mem::replace(&mut self.slots[i].partitions.flush_scheduled, true) {
            // It starts at once (production's `log.flush_interval_ms` is 0); now and then it
            // is late (a stalled task, a busy core).
            let late = self.workload.faults.flush_late_permille;
            let after_ms = if self.rng.gen_ratio(late, 1_000) {
                self.rng.gen_range(20..=200)
            } else {
                0
            };
            self.schedule(after_ms, Event::Flush(i));
        }
    }

    /// The flusher's pass on node `i` (`shard::flusher::sync_once`): it plans a sync of every
    /// replica's writes, then one fdatasync covers them all.
    pub(super) fn on_flush(&mut self, i: usize) -> Result<(), super::checks::Violation> {
        let mut planned = false;
        for r in self.slots[i].partitions.replicas.values_mut() {
            planned |= r.start_sync();
        }
        if !planned {
            self.slots[i].partitions.flush_scheduled = false;
            return Ok(());
        }
        // Now and then an fdatasync stalls (a busy disk, writeback of another file).
        let after_ms = if self.rng.gen_bool(0.05) {
            self.rng.gen_range(100..=500)
        } else {
            self.rng.gen_range(1..=self.slots[i].flush_max_ms)
        };
        self.schedule(after_ms, Event::Synced(i));
        Ok(())
    }

    /// Node `i`'s fdatasync returned: each replica it covered learns it, and the flusher's
    /// next pass takes what was written meanwhile.
    pub(super) fn on_synced(&mut self, i: usize) -> Result<(), super::checks::Violation> {
        self.slots[i].partitions.flush_scheduled = false;
        let tps: Vec<Tp> = self.slots[i].partitions.replicas.keys().copied().collect();
        let mut unsynced = false;
        for tp in tps {
            let r = self.slots[i]
                .partitions
                .replicas
                .get_mut(&tp)
                .expect("listed");
            let synced = r.finish_sync();
            unsynced |= r.synced_end() < r.log_end();
            if synced {
                self.replica_changed(i, tp)?;
            }
        }
        if unsynced {
            self.schedule_flush(i);
        }
        Ok(())
    }

    /// A follower's fetch on leader `i`.
    pub(super) fn on_fetch(
        &mut self,
        i: usize,
        from: usize,
        tp: Tp,
        epoch: i32,
        offset: i64,
    ) -> Result<(), super::checks::Violation> {
        let now_ms = self.clock_ms(i);
        let Some(r) = self.slots[i].partitions.replicas.get_mut(&tp) else {
            return Ok(());
        };
        let answer = r.serve_fetch(from as i32, epoch, offset, now_ms);
        if answer.is_empty() {
            // Nothing new: a long poll, as the leader's Fetch handler holds it.
            self.slots[i].partitions.parked.push(ParkedFetch {
                follower: from,
                tp,
                epoch,
                offset,
                until_ms: now_ms + FETCH_MAX_WAIT_MS,
            });
        } else {
            self.send(i, from, Wire::FetchReply { tp, epoch, answer });
        }
        self.replica_changed(i, tp)
    }

    /// Answers the fetches node `i` holds that have data now, lost their leadership, or waited
    /// long enough.
    fn answer_parked_fetches(&mut self, i: usize) {
        let now_ms = self.clock_ms(i);
        let parts = &mut self.slots[i].partitions;
        let mut answers = Vec::new();
        parts.parked.retain(|f| {
            let answer = match parts.replicas.get(&f.tp) {
                // The handler reads again what it parked (noting the follower's position).
                Some(r) => r.serve_fetch(f.follower as i32, f.epoch, f.offset, now_ms),
                None => FetchAnswer::refused(ResponseError::NotLeaderOrFollower),
            };
            let due = now_ms >= f.until_ms || !answer.is_empty();
            if due {
                answers.push((f.follower, f.tp, f.epoch, answer));
            }
            !due
        });
        for (follower, tp, epoch, answer) in answers {
            self.send(i, follower, Wire::FetchReply { tp, epoch, answer });
        }
    }

    /// The leader's answer to a fetch, on follower `i`, taken by production's fetcher code
    /// (`fetcher::take_fetched`).
    pub(super) fn on_fetch_reply(
        &mut self,
        i: usize,
        tp: Tp,
        epoch: i32,
        answer: FetchAnswer,
    ) -> Result<(), super::checks::Violation> {
        let Some(r) = self.slots[i].partitions.replicas.get_mut(&tp) else {
            return Ok(());
        };
        let Some(view) = r.follower_view() else {
            return Ok(());
        };
        if view.epoch != epoch || matches!(next_ask(&view), Ask::EpochEnd { .. }) {
            return Ok(());
        }
        r.fetch_sent_ms = None;
        let (end, leader_hw) = (r.log_end(), answer.high_watermark);
        let note = match r.take_fetched(&view, &answer) {
            Taken::WaitSynced(now) if now > end => {
                self.schedule_flush(i);
                format!("fetched {end}..{now} (leader hw {leader_hw})")
            }
            Taken::Rewritten => format!("past the leader's end: cut {end} → {}", r.log_end()),
            Taken::WaitSynced(_) | Taken::BackOff => return self.replica_changed(i, tp),
        };
        self.trace
            .note(self.now_ms, format!("node {i}: {} {note}", tp_name(tp)));
        self.replica_changed(i, tp)
    }

    /// A leader's AlterPartition on controller node `to` (the production controller's
    /// `alter_partition`). Accepted only from the partition's leader in its current epoch, as
    /// the node's applied catalog had it (KIP-497's fencing: a deposed leader's view of who is
    /// in sync is stale).
    pub(super) fn on_alter_partition(
        &mut self,
        from: usize,
        to: usize,
        tp: Tp,
        request: IsrRequest,
    ) -> Result<(), super::checks::Violation> {
        let node = self.slots[to].node.as_mut().expect("checked");
        if node.raft.status().ready && !node.settled() {
            // It waits for the controller's turn (dropped when too many wait).
            if node.waiting_asks.len() < super::node::WAITING_ASKS_MAX {
                node.waiting_asks.push_back((from, tp, request));
            }
            return Ok(());
        }
        let partition_epoch = request.partition_epoch;
        let change = IsrChange::new(tp.0, tp.1, from as i32, request.clone());
        let led = node.applied.read(|c| {
            let (_, a) = assignments(c).find(|(t, _)| *t == tp)?;
            Some((a.leader, a.leader_epoch))
        });
        let op = ControllerOp::alter_partition(change.clone(), partition_epoch);
        // No outcome: the node was not ready to act as the controller, and proposed nothing.
        let code = node.execute(op).first().map(|(code, _)| *code);
        let asker = (change.leader, change.leader_epoch);
        if code == Some(0) && led.is_some_and(|led| led != asker) {
            let detail = format!(
                "{}: node {to} accepted {:?} → {:?} from leader {} epoch {}, but {led:?} leads",
                tp_name(tp),
                change.from_isr,
                change.isr,
                asker.0,
                asker.1
            );
            let invariant = "only a partition's current leader changes its in-sync set";
            return Err(super::checks::Violation { invariant, detail });
        }
        if code.is_some_and(crate::replication::isr::refused_for_good) {
            let note = format!(
                "node {to} refuses {} in sync {:?} → {:?} for good (sending {})",
                tp_name(tp),
                request.from,
                request.isr,
                request.sent
            );
            self.trace.note(self.now_ms, note);
            let refused = Wire::IsrRefused(tp, request);
            self.send_ordered((from, to), to, from, refused);
        }
        Ok(())
    }

    /// Decides the asks waiting on controller node `i` while it is settled (each one it takes
    /// proposes a change, which unsettles it until the change applies).
    pub(super) fn decide_waiting_asks(&mut self, i: usize) -> Result<(), super::checks::Violation> {
        loop {
            let Some(node) = self.slots[i].node.as_mut() else {
                return Ok(());
            };
            if !node.raft.status().ready {
                node.waiting_asks.clear();
                return Ok(());
            }
            if !node.settled() {
                return Ok(());
            }
            let Some((from, tp, request)) = node.waiting_asks.pop_front() else {
                return Ok(());
            };
            self.on_alter_partition(from, i, tp, request)?;
        }
    }

    /// The controller refused leader `i`'s ask for good: its joiners stop counting.
    pub(super) fn on_isr_refused(
        &mut self,
        i: usize,
        tp: Tp,
        request: &IsrRequest,
    ) -> Result<(), super::checks::Violation> {
        let Some(r) = self.slots[i].partitions.replicas.get_mut(&tp) else {
            return Ok(());
        };
        r.isr_refused(request);
        self.replica_changed(i, tp)
    }

    /// An epoch query on leader `i`: where the follower's newest epoch ends here.
    pub(super) fn on_epoch_query(
        &mut self,
        i: usize,
        from: usize,
        tp: Tp,
        epoch: i32,
        latest: i32,
    ) {
        let Some(r) = self.slots[i].partitions.replicas.get(&tp) else {
            return;
        };
        let answer = if r.is_leader() && r.epoch() == epoch {
            Ok(r.epoch_end(latest))
        } else {
            Err("NOT_LEADER_OR_FOLLOWER".to_string())
        };
        let answer = Wire::EpochAnswer {
            tp,
            epoch,
            latest,
            answer,
        };
        self.send(i, from, answer);
    }

    /// The leader's epoch answer, on follower `i`: cut the divergent tail.
    pub(super) fn on_epoch_answer(
        &mut self,
        i: usize,
        tp: Tp,
        epoch: i32,
        latest: i32,
        answer: Result<(i32, i64), String>,
    ) -> Result<(), super::checks::Violation> {
        let Some(r) = self.slots[i].partitions.replicas.get_mut(&tp) else {
            return Ok(());
        };
        // Only the answer to the query outstanding: the fetcher awaits its own request's
        // response, and a restarted process never gets its predecessor's (seed 127276: an
        // answer for an older newest epoch, delivered late, cut a tail the leader had
        // committed).
        let outstanding = r.epoch_query == Some(latest);
        if r.epoch() != epoch || r.is_leader() || !r.needs_truncation() || !outstanding {
            return Ok(());
        }
        r.epoch_query = None;
        r.fetch_sent_ms = None;
        if let Ok(answer) = answer {
            let end = r.log_end();
            let (offset, complete) = r.cut_point(answer);
            r.truncate_diverged(offset, complete);
            let now = r.log_end();
            let note = format!(
                "node {i}: {} answer {answer:?}, log end {end} → {now}",
                tp_name(tp)
            );
            self.trace.note(self.now_ms, note);
        }
        self.replica_changed(i, tp)
    }
}

pub fn tp_name(tp: Tp) -> String {
    format!("{:02x}{:02x}-{}", tp.0[0], tp.0[1], tp.1)
}

/// Every partition's assignment in a catalog record, by (topic id, partition).
pub fn assignments(c: &catalog::CatalogRecord) -> impl Iterator<Item = (Tp, &PartitionAssignment)> {
    c.topics.iter().flat_map(|t| {
        t.assignment
            .iter()
            .enumerate()
            .map(move |(p, a)| ((t.id, p as i32), a))
    })
}
