//! Transactions in the simulated world (issue 36): the transaction coordinator's side. Each
//! node that leads `__transaction_state` runs the production coordinator
//! (`txn::state::Coordinator`), in the shell the broker's `txn::service` and `txn::markers`
//! put around it, step by step:
//!
//! - it loads the partition's ids once its epoch start is committed (`shard::coordinator_load::may_load`),
//!   replaying every committed record, and forgets them when the leadership goes;
//! - each move is appended acks=all (`min.insync.replicas` 2 where the partition has three
//!   replicas: `controller::with_internal_min_isr`) and applied once committed, or abandoned
//!   when refused, deposed or timed out (`service::persist`);
//! - a persisted Prepare state's markers go to each partition's leader, retried until each is
//!   committed there, and then the completion is persisted, a failed write tried again while
//!   `Coordinator::retries_completion` allows (`markers::complete`);
//! - transactions past their timeout are aborted every `transactions.check_interval_ms`.
//!
//! The client (`txn_client.rs`) and the checks (`txn_checks.rs`) stand beside it.

use super::batch::{Stamp, TxnPart};
use super::node::Wire;
use super::replication::{tp_name, Answer, Tp};
use super::world::World;
use crate::storage::catalog::TXN_STATE_TOPIC;
use crate::txn::state::{Coordinator, Markers, Step, TxnPartition, TxnRecord};
use kafka_protocol::ResponseError;
use std::collections::BTreeMap;

/// The one transactional id of every run.
pub const TXN_ID: &str = "sim-tx";
/// A marker refused by its partition is sent again after this (`markers::RETRY_MS`).
const MARKER_RETRY_MS: u64 = 100;
/// A marker without an answer (lost on the way) is sent again after this.
const MARKER_RESEND_MS: u64 = 1_000;
/// A coordinator's append waits this long for its commit (`service::APPEND_TIMEOUT_MS`).
const PERSIST_TIMEOUT_MS: u64 = 30_000;
/// The longest wait before a failed completion is written again (`markers::RETRY_MAX_MS`).
const COMPLETION_RETRY_MAX_MS: u64 = 1_000;

/// A transactional producer's request.
#[derive(Clone, Debug)]
pub enum TxnOp {
    /// InitProducerId with the transactional id and `timeout_ms`.
    Init { timeout_ms: i32 },
    /// AddPartitionsToTxn.
    Add {
        producer_id: i64,
        epoch: i16,
        partitions: Vec<TxnPartition>,
    },
    /// EndTxn: under transaction version 1 (`bump_epoch` false) the epoch stays; under
    /// version 2 (EndTxn v5, KIP-890 part 2) the end bumps it.
    End {
        producer_id: i64,
        epoch: i16,
        commit: bool,
        bump_epoch: bool,
    },
}

/// A coordinator's marker for one partition.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MarkerRequest {
    pub coordinator: usize,
    pub tp: Tp,
    pub partition: TxnPartition,
    pub producer_id: i64,
    pub epoch: i16,
    pub commit: bool,
    pub coordinator_epoch: i32,
}

/// What follows a persisted move.
#[derive(Clone, Debug)]
pub enum AfterPersist {
    /// Answer the client's request `request` (of `op`); `fenced`: an InitProducerId that
    /// aborts the ongoing transaction first (answered CONCURRENT_TRANSACTIONS).
    Answer {
        request: u64,
        op: TxnOp,
        fenced: bool,
    },
    /// A timed-out transaction's abort: write its markers.
    Markers,
    /// The completion of `Markers`' transaction: nothing more, or (failed) maybe again.
    Completion(Markers),
}

/// A node's transaction coordinator: lost with its process.
pub struct SimTxnCoordinator {
    pub coordinator: Coordinator,
    /// The `__transaction_state` leader generation it is loaded for.
    pub loaded: Option<u64>,
    /// The markers being written, per transactional id.
    writing: BTreeMap<String, Progress>,
    /// When the last timeout pass ran (this node's clock).
    expired_ms: u64,
}

/// One prepared transaction's markers on their way.
struct Progress {
    markers: Markers,
    /// Partitions whose marker is not committed yet: when it was last sent (None: now).
    pending: BTreeMap<TxnPartition, Option<u64>>,
    /// Once every marker is: when the completion is (next) persisted, and how often it failed.
    complete_at_ms: Option<u64>,
    failures: u32,
    persisting: bool,
}

impl SimTxnCoordinator {
    pub fn new(config: &crate::config::Config, now_ms: u64) -> SimTxnCoordinator {
        SimTxnCoordinator {
            coordinator: Coordinator::new(config.transactions.max_timeout_ms),
            loaded: None,
            writing: BTreeMap::new(),
            expired_ms: now_ms,
        }
    }

    fn unload(&mut self) {
        self.loaded = None;
        self.coordinator.unload(|_| true);
        self.writing.clear();
    }
}

/// The world's transaction bookkeeping: `__transaction_state` records by payload (a simulated
/// batch carries only its payload), and the producer ids the coordinators hand out.
pub struct TxnRecords {
    pub records: BTreeMap<u64, (String, Option<TxnRecord>)>,
    /// Marker batches by payload: (producer id, commit).
    pub markers: BTreeMap<u64, (i64, bool)>,
    next_producer_id: i64,
}

impl Default for TxnRecords {
    fn default() -> Self {
        TxnRecords {
            records: BTreeMap::new(),
            markers: BTreeMap::new(),
            // Clear of the idempotent producers' fixed ids (1000 on).
            next_producer_id: 5_000,
        }
    }
}

impl World {
    /// `__transaction_state` and its leader in node `i`'s catalog.
    pub(super) fn txn_state_partition(&self, i: usize) -> Option<(Tp, i32)> {
        let node = self.slots[i].node.as_ref()?;
        node.applied.read(|c| {
            let t = c.topics.iter().find(|t| t.name == TXN_STATE_TOPIC)?;
            Some(((t.id, 0), t.assignment.first()?.leader))
        })
    }

    /// The wall time transaction states carry (start, last update) and their timeouts are
    /// measured in: NTP keeps the nodes' wall clocks within milliseconds of one another, unlike
    /// the monotonic clocks the faults jump, so the world's time stands for every node's.
    fn txn_wall_ms(&self) -> i64 {
        self.now_ms as i64
    }

    /// A partition of a transaction, by its name, in node `i`'s catalog.
    pub(super) fn tp_of(&self, i: usize, partition: &TxnPartition) -> Option<(Tp, i32)> {
        let node = self.slots[i].node.as_ref()?;
        node.applied.read(|c| {
            let t = c.topics.iter().find(|t| t.name == partition.0)?;
            let a = t.assignment.get(usize::try_from(partition.1).ok()?)?;
            Some(((t.id, partition.1), a.leader))
        })
    }

    /// Node `i`'s coordinator, if it leads `__transaction_state` and has loaded it.
    fn txn_serving(&mut self, i: usize) -> Option<&mut SimTxnCoordinator> {
        let (tp, _) = self.txn_state_partition(i)?;
        let slot = &mut self.slots[i];
        let (generation, _) = slot.partitions.replicas.get(&tp)?.leadership()?;
        let c = slot.txn.as_mut()?;
        (c.loaded == Some(generation)).then_some(c)
    }

    /// Node `i`'s coordinator's periodic work (on its replication pass): follow the
    /// leadership, abort timed-out transactions, write markers and completions.
    pub(super) fn txn_tick(&mut self, i: usize) {
        self.follow_txn_leadership(i);
        self.expire_txns(i);
        self.drive_markers(i);
    }

    /// Loads or forgets the ids as `txn::service::load_led` does.
    fn follow_txn_leadership(&mut self, i: usize) {
        let Some((tp, _)) = self.txn_state_partition(i) else {
            return;
        };
        let slot = &mut self.slots[i];
        let (Some(r), Some(c)) = (slot.partitions.replicas.get(&tp), slot.txn.as_mut()) else {
            return;
        };
        let Some((generation, epoch_start)) = r.leadership() else {
            if c.loaded.is_some() {
                c.unload();
            }
            return;
        };
        if c.loaded == Some(generation) {
            return;
        }
        if c.loaded.is_some() {
            c.unload();
        }
        if !crate::shard::coordinator_load::may_load(r.high_watermark(), epoch_start) {
            return;
        }
        // The latest record per id wins; a tombstone forgets the id.
        for b in r
            .log
            .batches
            .iter()
            .filter(|b| b.end() <= r.high_watermark())
        {
            match self.ledger.txns.records.get(&b.payload) {
                Some((id, Some(record))) => c.coordinator.restore(id, record.clone()),
                Some((id, None)) => c.coordinator.unload(|x| x == id),
                None => {}
            }
        }
        c.loaded = Some(generation);
        let preparing: Vec<String> = c
            .coordinator
            .iter()
            .filter(|(id, _)| c.coordinator.markers(id).is_some())
            .map(|(id, _)| id.clone())
            .collect();
        let note = format!("node {i} loads the transactional ids (generation {generation})");
        self.trace.note(self.now_ms, note);
        for id in preparing {
            self.start_markers(i, &id);
        }
    }

    /// `txn::service::expire`: transactions past their timeout are aborted.
    fn expire_txns(&mut self, i: usize) {
        let now_ms = self.clock_ms(i);
        let wall_ms = self.txn_wall_ms();
        let every_ms = self.slots[i].config().transactions.check_interval_ms;
        let Some(c) = self.txn_serving(i) else {
            return;
        };
        if now_ms < c.expired_ms + every_ms {
            return;
        }
        c.expired_ms = now_ms;
        let timed_out = c.coordinator.expire_timed_out(wall_ms);
        for (id, step) in timed_out {
            let note = format!("node {i}: transaction of {id} timed out; aborting it");
            self.trace.note(self.now_ms, note);
            self.txn_persist(i, &id, step, AfterPersist::Markers);
        }
    }

    /// Makes a move durable (`service::persist`): appended to `__transaction_state` acks=all,
    /// then applied (`txn_persisted`) or abandoned (`txn_persist_failed`).
    pub(super) fn txn_persist(&mut self, i: usize, id: &str, step: Step, then: AfterPersist) {
        let Step::Persist(record) = step else {
            return self.txn_applied(i, id, then);
        };
        let Some((tp, _)) = self.txn_state_partition(i) else {
            return self.txn_persist_failed(i, id, record, then);
        };
        let payload = self.clients.payload();
        let value = (record.state != crate::txn::state::State::Dead).then(|| record.clone());
        self.ledger
            .txns
            .records
            .insert(payload, (id.to_string(), value));
        let note = format!(
            "node {i}: {id} → {} (pid {} epoch {}) is payload {payload}",
            record.state.name(),
            record.producer_id,
            record.producer_epoch
        );
        self.trace.note(self.now_ms, note);
        let answer = Answer::TxnState {
            id: id.to_string(),
            record: record.clone(),
            then: then.clone(),
        };
        if !self.append(
            i,
            tp,
            (payload, None),
            true,
            answer,
            Some(PERSIST_TIMEOUT_MS),
        ) {
            self.txn_persist_failed(i, id, record, then);
        }
    }

    /// A move of `id` is committed on node `i`: applied, then what follows it.
    pub(super) fn txn_persisted(
        &mut self,
        i: usize,
        id: &str,
        record: TxnRecord,
        then: AfterPersist,
    ) {
        if let Some(c) = self.slots[i].txn.as_mut() {
            c.coordinator.complete(id, &record);
        }
        self.txn_applied(i, id, then);
    }

    fn txn_applied(&mut self, i: usize, id: &str, then: AfterPersist) {
        match then {
            AfterPersist::Answer {
                request,
                op,
                fenced,
            } => {
                if fenced || matches!(op, TxnOp::End { .. }) {
                    self.start_markers(i, id);
                }
                let answer = if fenced {
                    Err(format!("{:?}", ResponseError::ConcurrentTransactions))
                } else {
                    self.txn_producer(i, id)
                };
                self.txn_answer(i, request, answer);
            }
            AfterPersist::Markers => self.start_markers(i, id),
            AfterPersist::Completion(m) => {
                if let Some(c) = self.slots[i].txn.as_mut() {
                    if c.writing.get(id).is_some_and(|p| p.markers == m) {
                        c.writing.remove(id);
                    }
                }
                let note = format!("node {i}: the transaction of {id} is complete");
                self.trace.note(self.now_ms, note);
            }
        }
    }

    /// A move of `id` could not be persisted on node `i`: abandoned, and a completion maybe
    /// tried again.
    pub(super) fn txn_persist_failed(
        &mut self,
        i: usize,
        id: &str,
        record: TxnRecord,
        then: AfterPersist,
    ) {
        let now_ms = self.clock_ms(i);
        let note = format!(
            "node {i}: {id}: state not persisted ({})",
            record.state.name()
        );
        self.trace.note(self.now_ms, note);
        let Some(c) = self.slots[i].txn.as_mut() else {
            return;
        };
        c.coordinator.abandon(id, &record);
        match then {
            AfterPersist::Answer { request, .. } => {
                let why = format!("{:?}", ResponseError::CoordinatorNotAvailable);
                self.txn_answer(i, request, Err(why));
            }
            AfterPersist::Markers => {}
            AfterPersist::Completion(m) => {
                let retry = c.coordinator.retries_completion(&m);
                let Some(p) = c.writing.get_mut(id).filter(|p| p.markers == m) else {
                    return;
                };
                p.persisting = false;
                p.failures += 1;
                if retry {
                    let backoff_ms =
                        (MARKER_RETRY_MS << p.failures.min(4)).min(COMPLETION_RETRY_MAX_MS);
                    p.complete_at_ms = Some(now_ms + backoff_ms);
                } else {
                    c.writing.remove(id);
                }
            }
        }
    }

    /// The producer id and epoch the client goes on with.
    fn txn_producer(&self, i: usize, id: &str) -> Result<(i64, i16), String> {
        let c = self.slots[i]
            .txn
            .as_ref()
            .map(|c| c.coordinator.producer_for_client(id));
        c.flatten()
            .ok_or_else(|| format!("{:?}", ResponseError::CoordinatorNotAvailable))
    }

    /// Starts writing the markers `id`'s persisted Prepare state calls for
    /// (`service::start_markers`).
    fn start_markers(&mut self, i: usize, id: &str) {
        let Some(c) = self.slots[i].txn.as_mut() else {
            return;
        };
        let Some(markers) = c.coordinator.markers(id) else {
            return;
        };
        if c.writing.get(id).is_some_and(|p| p.markers == markers) {
            return;
        }
        let pending = markers
            .partitions
            .iter()
            .map(|p| (p.clone(), None))
            .collect();
        let progress = Progress {
            markers,
            pending,
            complete_at_ms: None,
            failures: 0,
            persisting: false,
        };
        c.writing.insert(id.to_string(), progress);
    }

    /// Sends the markers due, and persists the completions due.
    fn drive_markers(&mut self, i: usize) {
        let now_ms = self.clock_ms(i);
        let Some((state_tp, _)) = self.txn_state_partition(i) else {
            return;
        };
        let coordinator_epoch = self.slots[i]
            .partitions
            .replicas
            .get(&state_tp)
            .map_or(0, |r| r.epoch());
        let Some(c) = self.txn_serving(i) else {
            return;
        };
        // Only while the transaction is still the one prepared (`markers::still_preparing`).
        let coordinator = &c.coordinator;
        c.writing
            .retain(|id, p| coordinator.markers(id).as_ref() == Some(&p.markers));
        let mut sends = Vec::new();
        let mut completions = Vec::new();
        for (id, p) in c.writing.iter_mut() {
            for (partition, sent) in p.pending.iter_mut() {
                if sent.is_none_or(|at| now_ms >= at + MARKER_RESEND_MS) {
                    let resend = sent.replace(now_ms).is_some();
                    sends.push((partition.clone(), p.markers.clone(), resend));
                }
            }
            if p.pending.is_empty()
                && !p.persisting
                && p.complete_at_ms.is_some_and(|at| now_ms >= at)
            {
                p.persisting = true;
                completions.push((id.clone(), p.markers.clone()));
            }
        }
        // A marker unanswered for long: the connection to its leader is given up for a new
        // one, as a timed-out request's (what the old one carried is never delivered; a late
        // marker of a finished transaction would end the producer's next one there).
        for (partition, _, _) in sends.iter().filter(|s| s.2) {
            let leader = self.tp_of(i, partition).map(|(_, l)| usize::try_from(l));
            if let Some(Ok(leader)) = leader {
                self.net.reconnect((i, leader));
            }
        }
        for (partition, m, _) in sends {
            self.send_marker(i, partition, &m, coordinator_epoch);
        }
        for (id, m) in completions {
            let now = self.txn_wall_ms();
            let step = self
                .txn_serving(i)
                .and_then(|c| c.coordinator.markers_written(&m, now));
            match step {
                Some(step) => self.txn_persist(i, &id, step, AfterPersist::Completion(m)),
                None => {
                    if let Some(c) = self.txn_serving(i) {
                        c.writing.remove(&id);
                    }
                }
            }
        }
    }

    /// One partition's marker, to its leader in node `i`'s catalog.
    fn send_marker(
        &mut self,
        i: usize,
        partition: TxnPartition,
        m: &Markers,
        coordinator_epoch: i32,
    ) {
        let Some((tp, leader)) = self.tp_of(i, &partition) else {
            return; // no such partition: retried, as a leaderless one
        };
        let Ok(leader) = usize::try_from(leader) else {
            return;
        };
        let marker = MarkerRequest {
            coordinator: i,
            tp,
            partition,
            producer_id: m.producer_id,
            epoch: m.producer_epoch,
            commit: m.commit,
            coordinator_epoch,
        };
        if leader == i {
            self.on_write_marker(i, marker);
        } else {
            self.send_ordered((i, leader), i, leader, Wire::WriteMarker(marker));
        }
    }

    /// A marker on its partition's leader `i` (`MarkersOnOwner`): appended, answered once
    /// committed (`Answer::Marker`), or refused at once.
    pub(super) fn on_write_marker(&mut self, i: usize, marker: MarkerRequest) {
        let payload = self.clients.payload();
        self.ledger
            .txns
            .markers
            .insert(payload, (marker.producer_id, marker.commit));
        let stamp = Stamp {
            producer_id: marker.producer_id,
            epoch: marker.epoch,
            sequence: -1,
            txn: Some(TxnPart::Marker {
                commit: marker.commit,
                coordinator_epoch: marker.coordinator_epoch,
            }),
        };
        let tp = marker.tp;
        let answer = Answer::Marker {
            coordinator: marker.coordinator,
            marker: marker.clone(),
        };
        if !self.append(
            i,
            tp,
            (payload, Some(stamp)),
            true,
            answer,
            Some(PERSIST_TIMEOUT_MS),
        ) {
            let why = "NOT_LEADER_OR_FOLLOWER or TRANSACTION_COORDINATOR_FENCED".to_string();
            self.marker_answer(i, marker.coordinator, marker, Err(why));
        }
    }

    /// Leader `i`'s answer to a marker, on its way to the coordinator.
    pub(super) fn marker_answer(
        &mut self,
        i: usize,
        coordinator: usize,
        marker: MarkerRequest,
        result: Result<(), String>,
    ) {
        if coordinator == i {
            self.on_marker_written(i, marker, result);
        } else {
            self.send(i, coordinator, Wire::MarkerWritten { marker, result });
        }
    }

    /// The answer to a marker, on coordinator `i`.
    pub(super) fn on_marker_written(
        &mut self,
        i: usize,
        marker: MarkerRequest,
        result: Result<(), String>,
    ) {
        let now_ms = self.clock_ms(i);
        let Some(c) = self.slots[i].txn.as_mut() else {
            return;
        };
        let ours = |p: &&mut Progress| {
            p.markers.producer_id == marker.producer_id
                && p.markers.producer_epoch == marker.epoch
                && p.markers.commit == marker.commit
        };
        let Some((id, p)) = c.writing.iter_mut().find(|(_, p)| ours(p)) else {
            return;
        };
        let Some(sent) = p.pending.get_mut(&marker.partition) else {
            return;
        };
        let id = id.clone();
        match result {
            Ok(()) => {
                p.pending.remove(&marker.partition);
                if p.pending.is_empty() {
                    p.complete_at_ms = Some(now_ms);
                }
            }
            // Sent again after the refusal's short wait, not the lost message's.
            Err(_) => *sent = Some((now_ms + MARKER_RETRY_MS).saturating_sub(MARKER_RESEND_MS)),
        }
        let note = format!(
            "node {i}: marker of {id} for {} ({}): {result:?}",
            tp_name(marker.tp),
            if marker.commit { "commit" } else { "abort" }
        );
        self.trace.note(self.now_ms, note);
    }

    /// A client's request on node `i`, the coordinator in its metadata.
    pub(super) fn on_txn_request(&mut self, i: usize, request: u64, op: TxnOp) {
        let now_ms = self.txn_wall_ms();
        let fresh_id = self.ledger.txns.next_producer_id;
        let Some(c) = self.txn_serving(i) else {
            let why = format!("{:?}", ResponseError::NotCoordinator);
            return self.txn_answer(i, request, Err(why));
        };
        let c = &mut c.coordinator;
        let outcome = match &op {
            TxnOp::Init { timeout_ms } => {
                let needs_id = c.get(TXN_ID).is_none_or(TxnRecord::epoch_exhausted);
                let new_id = if needs_id { fresh_id } else { -1 };
                c.init_producer_id(TXN_ID, *timeout_ms, new_id, now_ms)
                    .map(|(step, fenced)| (Some(step), fenced, needs_id))
            }
            TxnOp::Add {
                producer_id,
                epoch,
                partitions,
            } => c
                .add_partitions(TXN_ID, *producer_id, *epoch, partitions, now_ms)
                .map(|step| (Some(step), false, false)),
            TxnOp::End {
                producer_id,
                epoch,
                commit,
                bump_epoch: false,
            } => c
                .end_txn(TXN_ID, *producer_id, *epoch, *commit, now_ms)
                .map(|step| (step, false, false)),
            TxnOp::End {
                producer_id,
                epoch,
                commit,
                bump_epoch: true,
            } => {
                // As `txn::ops::End`: a new producer id once the epoch is used up.
                let needs_id = c.epoch_exhausted(TXN_ID);
                let new_id = if needs_id { fresh_id } else { -1 };
                c.end_txn_bumping(TXN_ID, *producer_id, *epoch, *commit, new_id, now_ms)
                    .map(|step| (step, false, needs_id))
            }
        };
        match outcome {
            Err(e) => self.txn_answer(i, request, Err(format!("{e:?}"))),
            Ok((step, fenced, used_id)) => {
                if used_id {
                    self.ledger.txns.next_producer_id += 1;
                }
                let then = AfterPersist::Answer {
                    request,
                    op,
                    fenced,
                };
                // None: a retried end already complete, answered as it was.
                self.txn_persist(i, TXN_ID, step.unwrap_or(Step::Done), then);
            }
        }
    }

    /// Leader `i` asks the coordinator its metadata names whether the transaction of the
    /// producer's batch holds `tp` (`kafka::produce::verify_transactional`); without a
    /// coordinator the batch gets no answer, and the producer sends it again.
    pub(super) fn verify_txn_write(&mut self, i: usize, tp: Tp, (payload, stamp): (u64, Stamp)) {
        let Some((_, coordinator)) = self.txn_state_partition(i) else {
            return;
        };
        let name = self.slots[i].node.as_ref().and_then(|n| {
            n.applied
                .read(|c| Some(c.topics.iter().find(|t| t.id == tp.0)?.name.clone()))
        });
        let (Ok(c), Some(name)) = (usize::try_from(coordinator), name) else {
            return;
        };
        let wire = Wire::VerifyTxn {
            tp,
            partition: (name, tp.1),
            payload,
            stamp,
        };
        self.send(i, c, wire);
    }

    /// A leader's check on node `i`: the coordinator's answer from its state
    /// (`Coordinator::in_transaction`), NOT_COORDINATOR when it serves none.
    pub(super) fn on_verify_txn(
        &mut self,
        i: usize,
        leader: usize,
        (tp, partition): (Tp, TxnPartition),
        (payload, stamp): (u64, Stamp),
    ) {
        let result = match self.txn_serving(i) {
            None => Err(format!("{:?}", ResponseError::NotCoordinator)),
            Some(c) => c
                .coordinator
                .in_transaction(TXN_ID, stamp.producer_id, stamp.epoch, &partition)
                .map_err(|e| format!("{e:?}")),
        };
        let wire = Wire::TxnVerified {
            tp,
            payload,
            stamp,
            result,
        };
        self.send(i, leader, wire);
    }

    /// The coordinator's answer on leader `i`: the batch is written, or refused (the producer
    /// sends it again until its transaction times out).
    pub(super) fn on_txn_verified(
        &mut self,
        i: usize,
        tp: Tp,
        (payload, stamp): (u64, Stamp),
        result: Result<(), String>,
    ) {
        if let Err(why) = result {
            let note = format!(
                "node {i}: {} refuses payload {payload}: not verified ({why})",
                tp_name(tp)
            );
            return self.trace.note(self.now_ms, note);
        }
        let answer = Answer::TxnRecords {
            tp,
            sequence: stamp.sequence,
        };
        self.append(i, tp, (payload, Some(stamp)), true, answer, None);
    }

    fn txn_answer(&mut self, i: usize, request: u64, result: Result<(i64, i16), String>) {
        let answer = super::clients::ClientEvent::TxnAnswer { request, result };
        self.answer_client(i, answer);
    }
}
