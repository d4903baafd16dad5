//! The transactional clients of the simulated world (issue 36):
//!
//! - one transactional producer (id `txns::TXN_ID`): InitProducerId, then transactions one at
//!   a time, each over one or two partitions: AddPartitionsToTxn, one transactional batch per
//!   partition (acks=all, retried with its sequence until acknowledged, as librdkafka does),
//!   then EndTxn, committing or aborting as the seed draws. A fenced producer initialises
//!   again; a request without an answer is sent again, as clients retry. The seed draws the
//!   transaction version it speaks: under version 2 (KIP-890 part 2) each EndTxn bumps the
//!   epoch, so its requests may travel as any message does (late, twice); under version 1 the
//!   epoch stays, and a late EndTxn of the transaction before would end the current one (the
//!   hole version 2 closes), so its requests travel as TCP carries them, in order and once,
//!   and a retry goes on a new connection (what the old one carried is never delivered);
//! - one read_committed consumer: fetches each partition from its leader below the last stable
//!   offset, with the aborted transactions of the range, and drops their records as Kafka's
//!   consumers do (KIP-98: a producer's records from an aborted transaction's first offset
//!   until its abort marker).
//!
//! What the consumer returns is checked in `txn_checks.rs`.

use super::batch::{Batch, Stamp, TxnPart};
use super::clients::ClientEvent;
use super::node::Wire;
use super::replication::Tp;
use super::txns::TxnOp;
use super::world::{World, TXN_CLIENT};
use crate::storage::catalog::{CatalogRecord, OFFSETS_TOPIC, TXN_STATE_TOPIC};
use crate::txn::state::TxnPartition;
use kafka_protocol::ResponseError;
use rand::Rng;
use std::collections::{BTreeMap, BTreeSet};

/// The producer's transaction timeout (short, so that a transaction left behind by a fault is
/// aborted by its coordinator within a run).
pub const TIMEOUT_MS: i32 = 6_000;
/// A request or batch without an answer is sent again after this.
const RETRY_MS: u64 = 1_000;

/// One transaction of the producer.
struct OpenTxn {
    number: u64,
    commit: bool,
    partitions: Vec<(TxnPartition, Tp)>,
    added: bool,
    /// Per partition: the batch's payload, sequence, when last sent, whether acknowledged.
    batches: BTreeMap<Tp, (u64, i32, Option<u64>, bool)>,
    began_ms: u64,
}

/// A request on its way to the coordinator.
struct Outstanding {
    id: u64,
    op: TxnOp,
    sent_ms: u64,
}

/// The transactional clients' state: it outlives every node.
pub struct TxnClient {
    /// Transaction version 2: each EndTxn bumps the epoch.
    version2: bool,
    producer: Option<(i64, i16)>,
    /// The next sequence per partition, under the current producer id and epoch.
    sequences: BTreeMap<Tp, i32>,
    txn: Option<OpenTxn>,
    request: Option<Outstanding>,
    next_request: u64,
    next_number: u64,
    /// Each of its batches' payloads: (transaction number, producer id).
    pub payload_txn: BTreeMap<u64, (u64, i64)>,
    /// The read_committed consumer's next offset per partition.
    positions: BTreeMap<Tp, i64>,
    /// Transactions ended with an answer.
    pub ended: u64,
}

impl TxnClient {
    pub fn new(version2: bool) -> TxnClient {
        TxnClient {
            version2,
            producer: None,
            sequences: BTreeMap::new(),
            txn: None,
            request: None,
            next_request: 0,
            next_number: 0,
            payload_txn: BTreeMap::new(),
            positions: BTreeMap::new(),
            ended: 0,
        }
    }
}

/// Partitions of topics a transaction may write: led, not internal, never unclean (an unclean
/// election may lose acknowledged batches).
fn txn_partitions(c: &CatalogRecord) -> Vec<(TxnPartition, Tp, i32)> {
    c.topics
        .iter()
        .filter(|t| t.name != OFFSETS_TOPIC && t.name != TXN_STATE_TOPIC)
        .filter(|t| {
            !t.configs
                .iter()
                .any(|(k, v)| k == "unclean.leader.election.enable" && v == "true")
        })
        .flat_map(|t| {
            t.assignment.iter().enumerate().map(move |(p, a)| {
                let p = p as i32;
                ((t.name.clone(), p), (t.id, p), a.leader)
            })
        })
        .filter(|(_, _, leader)| *leader >= 0)
        .collect()
}

impl World {
    /// The producer's next step, with node `i`'s metadata: a request due (or overdue), or its
    /// batches. No transaction begins once operations stop.
    pub(super) fn txn_step(&mut self, i: usize) {
        let now_ms = self.now_ms;
        let client = &mut self.txn_client;
        if let Some(r) = &client.request {
            if now_ms < r.sent_ms + RETRY_MS {
                return;
            }
            let (id, op) = (r.id, r.op.clone());
            return self.send_txn_request(i, id, op, true);
        }
        let Some((producer_id, epoch)) = client.producer else {
            let op = TxnOp::Init {
                timeout_ms: TIMEOUT_MS,
            };
            return self.new_txn_request(i, op);
        };
        let Some(t) = &client.txn else {
            return self.begin_txn(i);
        };
        if !t.added {
            let op = TxnOp::Add {
                producer_id,
                epoch,
                partitions: t.partitions.iter().map(|(p, _)| p.clone()).collect(),
            };
            return self.new_txn_request(i, op);
        }
        // A batch not acknowledged by the transaction's timeout is given up, and with it the
        // producer's epoch (whether the batch was written is unknown, so its sequences are):
        // it initialises again, which aborts the transaction if its coordinator has not yet
        // (KIP-360).
        if now_ms >= t.began_ms + TIMEOUT_MS as u64 {
            let note = format!("client gives up transaction {}", t.number);
            self.trace.note(now_ms, note);
            self.txn_client.producer = None;
            self.txn_client.txn = None;
            return;
        }
        if t.batches.values().all(|b| b.3) {
            let op = TxnOp::End {
                producer_id,
                epoch,
                commit: t.commit,
                bump_epoch: self.txn_client.version2,
            };
            return self.new_txn_request(i, op);
        }
        self.send_txn_batches(i, producer_id, epoch);
    }

    /// A new transaction over one or two partitions led in node `i`'s metadata.
    fn begin_txn(&mut self, i: usize) {
        if self.now_ms >= self.operations_until_ms() {
            return;
        }
        let (Some(node), Some((producer_id, _))) =
            (self.slots[i].node.as_ref(), self.txn_client.producer)
        else {
            return;
        };
        let mut all = node.applied.read(txn_partitions);
        if all.is_empty() {
            return;
        }
        let count = self.rng.gen_range(1..=2).min(all.len());
        let mut partitions = Vec::new();
        for _ in 0..count {
            let (p, tp, _) = all.swap_remove(self.rng.gen_range(0..all.len()));
            partitions.push((p, tp));
        }
        let client = &mut self.txn_client;
        client.next_number += 1;
        let commit = self.rng.gen_bool(0.6);
        let mut batches = BTreeMap::new();
        for (_, tp) in &partitions {
            let payload = self.clients.payload();
            let client = &mut self.txn_client;
            let sequence = *client.sequences.entry(*tp).or_insert(0);
            let txn = (client.next_number, producer_id);
            client.payload_txn.insert(payload, txn);
            batches.insert(*tp, (payload, sequence, None, false));
        }
        let client = &mut self.txn_client;
        let note = format!(
            "client begins transaction {} over {:?} ({})",
            client.next_number,
            partitions.iter().map(|(p, _)| p).collect::<Vec<_>>(),
            if commit { "to commit" } else { "to abort" }
        );
        client.txn = Some(OpenTxn {
            number: client.next_number,
            commit,
            partitions,
            added: false,
            batches,
            began_ms: self.now_ms,
        });
        self.trace.note(self.now_ms, note);
    }

    fn send_txn_batches(&mut self, i: usize, producer_id: i64, epoch: i16) {
        let now_ms = self.now_ms;
        let Some(t) = self.txn_client.txn.as_mut() else {
            return;
        };
        let mut due = Vec::new();
        for (tp, (payload, sequence, sent, acked)) in t.batches.iter_mut() {
            if !*acked && sent.is_none_or(|at| now_ms >= at + RETRY_MS) {
                *sent = Some(now_ms);
                due.push((*tp, *payload, *sequence));
            }
        }
        let partitions = t.partitions.clone();
        for (tp, payload, sequence) in due {
            let Some((p, _)) = partitions.iter().find(|(_, t)| *t == tp) else {
                continue;
            };
            let Some((_, leader)) = self.tp_of(i, p) else {
                continue;
            };
            let Ok(leader) = usize::try_from(leader) else {
                continue;
            };
            let stamp = Stamp {
                producer_id,
                epoch,
                sequence,
                txn: Some(TxnPart::Records),
            };
            let wire = Wire::Produce {
                tp,
                payload,
                acks_all: true,
                stamp: Some(stamp),
                producer: None,
            };
            self.send(i, leader, wire);
        }
    }

    fn new_txn_request(&mut self, i: usize, op: TxnOp) {
        let client = &mut self.txn_client;
        client.next_request += 1;
        let id = client.next_request;
        self.send_txn_request(i, id, op, false);
    }

    /// Sends request `id` to the coordinator in node `i`'s metadata; a `retry` after no
    /// answer, which under version 1 goes on a new connection, as a client that timed out
    /// reconnects (the old request is then never delivered).
    fn send_txn_request(&mut self, i: usize, id: u64, op: TxnOp, retry: bool) {
        self.txn_client.request = Some(Outstanding {
            id,
            op: op.clone(),
            sent_ms: self.now_ms,
        });
        let Some((_, leader)) = self.txn_state_partition(i) else {
            return;
        };
        let Ok(coordinator) = usize::try_from(leader) else {
            return;
        };
        let wire = Wire::Txn { request: id, op };
        if self.txn_client.version2 {
            self.send(i, coordinator, wire);
            return;
        }
        if retry {
            self.net.reconnect((TXN_CLIENT, coordinator));
        }
        self.send_ordered((TXN_CLIENT, coordinator), i, coordinator, wire);
    }

    /// The coordinator's answer to request `request`.
    pub(super) fn on_txn_answer(&mut self, request: u64, result: Result<(i64, i16), String>) {
        let client = &mut self.txn_client;
        let Some(r) = client.request.take_if(|r| r.id == request) else {
            return; // a late answer to a request sent again since
        };
        let fenced = [
            ResponseError::ProducerFenced,
            ResponseError::InvalidProducerEpoch,
            ResponseError::InvalidProducerIdMapping,
            ResponseError::InvalidTxnState,
        ]
        .iter()
        .any(|e| result.as_ref().err() == Some(&format!("{e:?}")));
        let note = format!("client: {:?} answered {result:?}", r.op);
        match (&r.op, result) {
            (TxnOp::Init { .. }, Ok(producer)) => {
                client.producer = Some(producer);
                client.sequences.clear();
                client.txn = None;
            }
            (TxnOp::Add { .. }, Ok(_)) => {
                if let Some(t) = client.txn.as_mut() {
                    t.added = true;
                }
            }
            (TxnOp::End { bump_epoch, .. }, Ok(producer)) => {
                if client.txn.take().is_some() {
                    client.ended += 1;
                }
                // Version 2: the producer goes on at the bumped epoch, its sequences from 0.
                if *bump_epoch {
                    client.producer = Some(producer);
                    client.sequences.clear();
                }
            }
            (_, Err(_)) if fenced => {
                client.producer = None;
                client.txn = None;
            }
            (_, Err(_)) => {} // retried at its next step
        }
        self.trace.note(self.now_ms, note);
    }

    /// A transactional batch of the producer is acknowledged: its partition's sequence goes on
    /// past it.
    pub(super) fn on_txn_acked(&mut self, tp: Tp, sequence: i32) {
        let client = &mut self.txn_client;
        let Some(t) = client.txn.as_mut() else {
            return;
        };
        if let Some(b) = t.batches.get_mut(&tp).filter(|b| b.1 == sequence && !b.3) {
            b.3 = true;
            let next = sequence + super::clients::records_in(b.0) as i32;
            client.sequences.insert(tp, next);
        }
    }

    /// The read_committed consumer fetches a partition a transaction may write, from its
    /// leader in node `i`'s metadata.
    pub(super) fn consume_committed(&mut self, i: usize) {
        let Some(node) = self.slots[i].node.as_ref() else {
            return;
        };
        let all = node.applied.read(txn_partitions);
        if all.is_empty() {
            return;
        }
        let (_, tp, leader) = all[self.rng.gen_range(0..all.len())].clone();
        let offset = *self.txn_client.positions.entry(tp).or_insert(0);
        self.send(i, leader as usize, Wire::ConsumeCommitted { tp, offset });
    }

    /// A read_committed fetch on node `i`, if it leads (`SimReplica::serve_consumer`): the
    /// batches from `offset` below the last stable offset, and the aborted transactions of
    /// that range.
    pub(super) fn on_consume_committed(
        &mut self,
        i: usize,
        tp: Tp,
        offset: i64,
    ) -> Result<(), super::checks::Violation> {
        let leads = self.slots[i]
            .partitions
            .replicas
            .get(&tp)
            .is_some_and(|r| r.is_leader());
        if !leads {
            return Ok(());
        }
        self.replica_changed(i, tp)?;
        let r = &self.slots[i].partitions.replicas[&tp];
        let (batches, aborted) = r.serve_consumer(offset, true);
        let answer = ClientEvent::CommittedRecords {
            tp,
            batches,
            aborted,
            node: i,
        };
        self.answer_client(i, answer);
        Ok(())
    }

    /// What the read_committed consumer keeps of a fetch's batches (KIP-98's consumer): a
    /// producer's records from its aborted transaction's first offset until its abort marker
    /// are dropped, and markers are never returned. Each record returned is checked.
    pub(super) fn on_committed_records(
        &mut self,
        tp: Tp,
        batches: &[Batch],
        mut aborted: Vec<(i64, i64)>,
        node: usize,
    ) -> Result<(), super::checks::Violation> {
        let position = *self.txn_client.positions.entry(tp).or_insert(0);
        aborted.reverse(); // popped in first-offset order
        let mut skipping = BTreeSet::new();
        let mut next = position;
        for b in batches.iter().filter(|b| b.base >= position) {
            while aborted.last().is_some_and(|(_, first)| *first <= b.base) {
                let (producer_id, _) = aborted.pop().expect("checked");
                skipping.insert(producer_id);
            }
            match (b.ends_txn(), b.txn_records_of()) {
                (Some((producer_id, false)), _) => {
                    skipping.remove(&producer_id);
                }
                (_, Some(producer_id)) if !skipping.contains(&producer_id) => {
                    self.check_committed_read(tp, b, node)?;
                }
                _ => {}
            }
            next = b.end();
            self.ledger.stats.read_committed += 1;
        }
        self.txn_client.positions.insert(tp, next);
        Ok(())
    }
}
