//! The simulated clients, each taking its metadata from one node and sending from there:
//! - plain producers: one batch, acks=all or acks=1, never retried;
//! - idempotent producers (acks=all, as Kafka requires for idempotence): one batch in flight
//!   per partition, retried with the same sequence until acknowledged, as librdkafka does with
//!   `enable.idempotence`; the leader checks each against the production producer state
//!   (`ProducerTable`), so a retry of a batch already written is answered, not written again;
//! - a consumer per partition: fetches from the leader from its position, and every batch it
//!   gets must be the committed history's batch at that offset (it never reads above the high
//!   watermark).
//!
//! Answers to clients cross the network like any message (latency, loss, duplicates) but no
//! cut: a client is not a node.

use super::batch::{Batch, Stamp, TxnPart};
use super::replica::Appended;
use super::replication::{assignments, Answer, Tp, Waiting};
use super::world::{Event, World};
use super::{checks::Violation, node::Wire};
use crate::group::state::{JoinResponse, SyncResponse};
use crate::storage::catalog::{CatalogRecord, OFFSETS_TOPIC, TXN_STATE_TOPIC};
use rand::Rng;
use std::collections::BTreeMap;

/// Idempotent producers in every run.
const IDEMPOTENT_PRODUCERS: usize = 2;
/// An unacknowledged idempotent batch is sent again after this (librdkafka's retry after a
/// request timeout or an error).
const RETRY_MS: u64 = 1_500;

/// What reaches a client.
#[derive(Debug)]
pub enum ClientEvent {
    /// Idempotent producer `producer`'s batch at `sequence` of `tp` is acknowledged.
    Acked {
        producer: usize,
        tp: Tp,
        sequence: i32,
    },
    /// The consumer of `tp` gets these batches.
    Records {
        tp: Tp,
        batches: Vec<Batch>,
    },
    /// The group client's commit of `offset` for `tp` is acknowledged.
    OffsetCommitted {
        tp: Tp,
        offset: i64,
    },
    /// The coordinator's answers to the group member.
    Joined(JoinResponse),
    Synced(SyncResponse),
    Heartbeat(i16),
    /// The transaction coordinator's answer to the transactional producer's request
    /// `request`: its producer id and epoch, or the error's name.
    TxnAnswer {
        request: u64,
        result: Result<(i64, i16), String>,
    },
    /// The transactional producer's batch of `tp` at `sequence` is acknowledged.
    TxnAcked {
        tp: Tp,
        sequence: i32,
    },
    /// Leader `node`'s answer to the read_committed consumer: batches below the last stable
    /// offset, and the aborted transactions of their range (producer id, first offset).
    CommittedRecords {
        tp: Tp,
        batches: Vec<Batch>,
        aborted: Vec<(i64, i64)>,
        node: usize,
    },
    /// Coordinator `node` answers an OffsetFetch of `tp` asked once `floor` was acknowledged;
    /// `current`: it led the offsets partition's newest epoch then.
    Offset {
        tp: Tp,
        floor: i64,
        offset: i64,
        current: bool,
        node: usize,
    },
}

/// An idempotent producer's batch on its way to the leader.
#[derive(Clone, Copy)]
struct InFlight {
    payload: u64,
    sequence: i32,
    sent_ms: u64,
}

#[derive(Default)]
struct Sequences {
    next: i32,
    in_flight: Option<InFlight>,
}

/// The clients' state: it outlives every node.
#[derive(Default)]
pub struct Clients {
    /// Per idempotent producer, per partition.
    producers: Vec<BTreeMap<Tp, Sequences>>,
    /// The consumer's next offset per partition.
    positions: BTreeMap<Tp, i64>,
    next_payload: u64,
}

impl Clients {
    pub fn new() -> Clients {
        Clients {
            producers: (0..IDEMPOTENT_PRODUCERS).map(|_| BTreeMap::new()).collect(),
            positions: BTreeMap::new(),
            next_payload: 1,
        }
    }

    /// The consumer's positions past 0.
    pub fn positions(&self) -> Vec<(Tp, i64)> {
        self.positions
            .iter()
            .filter(|(_, o)| **o > 0)
            .map(|(t, o)| (*t, *o))
            .collect()
    }

    pub fn payload(&mut self) -> u64 {
        self.next_payload += 1;
        self.next_payload - 1
    }
}

/// Records per batch, from its payload (a retry sends the same batch).
pub fn records_in(payload: u64) -> i64 {
    1 + (payload % 3) as i64
}

/// The producer id of idempotent producer `k` (the controller's blocks start at 0; these are
/// fixed so that a seed's trace names them).
fn producer_id(k: usize) -> i64 {
    1_000 + k as i64
}

/// Partitions with a leader in `c` (the group offsets' aside), those of topics allowing
/// unclean elections left out when `clean_only` (an unclean election may lose acknowledged
/// batches, and idempotence with them).
fn led(c: &CatalogRecord, clean_only: bool) -> Vec<(Tp, i32)> {
    let excluded = |id: [u8; 16]| {
        c.topics.iter().any(|t| {
            t.id == id
                && (t.name == OFFSETS_TOPIC
                    || t.name == TXN_STATE_TOPIC
                    || clean_only
                        && t.configs
                            .iter()
                            .any(|(k, v)| k == "unclean.leader.election.enable" && v == "true"))
        })
    };
    assignments(c)
        .filter(|(tp, a)| a.leader >= 0 && !excluded(tp.0))
        .map(|(tp, a)| (tp, a.leader))
        .collect()
}

impl World {
    /// A partition led in node `i`'s metadata, drawn from the seed.
    fn pick_led(&mut self, i: usize, clean_only: bool) -> Option<(Tp, i32)> {
        let node = self.slots[i].node.as_ref()?;
        let led = node.applied.read(|c| led(c, clean_only));
        (!led.is_empty()).then(|| led[self.rng.gen_range(0..led.len())])
    }

    /// A plain producer that took its metadata from node `i` sends one batch to the leader
    /// that names, acks=all or acks=1.
    pub(super) fn produce(&mut self, i: usize) {
        let Some((tp, leader)) = self.pick_led(i, false) else {
            return;
        };
        let acks_all = self.rng.gen_bool(0.8);
        // Now and then several requests in flight at once (librdkafka's default allows 5).
        let burst = if self.rng.gen_bool(0.2) {
            self.rng.gen_range(2..=5)
        } else {
            1
        };
        for _ in 0..burst {
            let wire = Wire::Produce {
                tp,
                payload: self.clients.payload(),
                acks_all,
                stamp: None,
                producer: None,
            };
            self.send(i, leader as usize, wire);
        }
    }

    /// An idempotent producer, with node `i`'s metadata, sends its next batch of a partition
    /// or, once the one in flight is overdue, that one again.
    pub(super) fn produce_idempotent(&mut self, i: usize) {
        let k = self.rng.gen_range(0..IDEMPOTENT_PRODUCERS);
        let Some((tp, leader)) = self.pick_led(i, true) else {
            return;
        };
        let now_ms = self.now_ms;
        let fresh = self.clients.payload();
        let s = self.clients.producers[k].entry(tp).or_default();
        let batch = match s.in_flight {
            Some(f) if now_ms < f.sent_ms + RETRY_MS => return,
            Some(f) => f,
            None => InFlight {
                payload: fresh,
                sequence: s.next,
                sent_ms: now_ms,
            },
        };
        s.in_flight = Some(InFlight {
            sent_ms: now_ms,
            ..batch
        });
        let wire = Wire::Produce {
            tp,
            payload: batch.payload,
            acks_all: true,
            stamp: Some(Stamp {
                producer_id: producer_id(k),
                epoch: 0,
                sequence: batch.sequence,
                txn: None,
            }),
            producer: Some(k),
        };
        self.send(i, leader as usize, wire);
    }

    /// The consumer of a partition led in node `i`'s metadata fetches from its position.
    pub(super) fn consume(&mut self, i: usize) {
        let Some((tp, leader)) = self.pick_led(i, true) else {
            return;
        };
        let offset = *self.clients.positions.entry(tp).or_insert(0);
        self.send(i, leader as usize, Wire::Consume { tp, offset });
    }

    /// A produce reaching node `i`.
    pub(super) fn on_produce(
        &mut self,
        i: usize,
        tp: Tp,
        payload: u64,
        acks_all: bool,
        stamp: Option<Stamp>,
        producer: Option<usize>,
    ) -> Result<(), Violation> {
        let answer = match (producer, stamp) {
            (Some(producer), Some(s)) => Answer::Producer {
                producer,
                sequence: s.sequence,
            },
            (None, Some(s)) if s.txn.is_some() => {
                // Written once its coordinator says the transaction holds the partition.
                self.verify_txn_write(i, tp, (payload, s));
                return Ok(());
            }
            _ => Answer::Nobody,
        };
        self.append(i, tp, (payload, stamp), acks_all, answer, None);
        Ok(())
    }

    /// A batch appended on leader `i` (or found already written, for an idempotent retry),
    /// waiting for the commit when acks=all, after which `answer` learns of it. A marker is
    /// one record, and like every write of the broker's own coordinators not held to
    /// `min.insync.replicas` (`Source::Coordinator`). `timeout_ms`: how long the broker's own
    /// write waits for its commit. Returns whether the leader took it.
    pub(super) fn append(
        &mut self,
        i: usize,
        tp: Tp,
        (payload, stamp): (u64, Option<Stamp>),
        acks_all: bool,
        answer: Answer,
        timeout_ms: Option<u64>,
    ) -> bool {
        let marker = stamp.is_some_and(|s| matches!(s.txn, Some(TxnPart::Marker { .. })));
        let min_insync = if marker { 1 } else { self.min_insync(i, tp) };
        let deadline_ms = timeout_ms.map_or(u64::MAX, |t| self.clock_ms(i) + t);
        let Some(r) = self.slots[i].partitions.replicas.get_mut(&tp) else {
            return false;
        };
        let count = if marker { 1 } else { records_in(payload) };
        let (rolls, unsynced) = (r.log.rolls, r.synced_end() < r.log_end());
        let Ok(appended) = r.append(payload, count, stamp, acks_all, min_insync) else {
            return false;
        };
        if r.log.rolls > rolls && unsynced {
            self.now_and_then_power_cut(i);
        }
        let r = &self.slots[i].partitions.replicas[&tp];
        let (generation, _) = r.leadership().expect("appended as leader");
        let (base, what) = match appended {
            Appended::New(base) => (base, "append"),
            Appended::Duplicate(base) => (base, "duplicate of"),
        };
        let note = format!(
            "node {i}: {} {what} {base}+{count} payload {payload} (acks all {acks_all}, {stamp:?})",
            super::replication::tp_name(tp)
        );
        self.trace.note(self.now_ms, note);
        if acks_all {
            self.waiting.push(Waiting {
                node: i,
                tp,
                base,
                end: base + count,
                payload,
                generation,
                answer,
                deadline_ms,
            });
        }
        self.schedule_flush(i);
        // A duplicate may be committed already.
        self.answer_waiters();
        true
    }

    /// A consumer's fetch on node `i`, if it leads (`SimReplica::serve_consumer`).
    pub(super) fn on_consume(&mut self, i: usize, tp: Tp, offset: i64) -> Result<(), Violation> {
        let Some(r) = self.slots[i].partitions.replicas.get(&tp) else {
            return Ok(());
        };
        if !r.is_leader() {
            return Ok(());
        }
        // The history learns what this replica committed since it last changed (a new role
        // may have moved its high watermark).
        self.replica_changed(i, tp)?;
        let (batches, _) = self.slots[i].partitions.replicas[&tp].serve_consumer(offset, false);
        self.answer_client(i, ClientEvent::Records { tp, batches });
        Ok(())
    }

    /// Sends `event` from node `i` to a client.
    pub(super) fn answer_client(&mut self, i: usize, event: ClientEvent) {
        let deliveries = self.net.deliveries(&mut self.rng, i, usize::MAX);
        if let Some(&delay_ms) = deliveries.first() {
            self.schedule(delay_ms, Event::Client(event));
        }
    }

    pub(super) fn on_client(&mut self, event: ClientEvent) -> Result<(), Violation> {
        match event {
            ClientEvent::Acked {
                producer,
                tp,
                sequence,
            } => {
                let s = self.clients.producers[producer].entry(tp).or_default();
                if let Some(f) = s.in_flight.filter(|f| f.sequence == sequence) {
                    s.next = f.sequence + records_in(f.payload) as i32;
                    s.in_flight = None;
                    self.ledger.stats.idempotent_acked += 1;
                }
                Ok(())
            }
            ClientEvent::Records { tp, batches } => self.check_read(tp, &batches),
            ClientEvent::TxnAnswer { request, result } => {
                self.on_txn_answer(request, result);
                Ok(())
            }
            ClientEvent::TxnAcked { tp, sequence } => {
                self.on_txn_acked(tp, sequence);
                Ok(())
            }
            ClientEvent::CommittedRecords {
                tp,
                batches,
                aborted,
                node,
            } => self.on_committed_records(tp, &batches, aborted, node),
            member @ (ClientEvent::Joined(_)
            | ClientEvent::Synced(_)
            | ClientEvent::Heartbeat(_)) => {
                self.on_member_answer(member);
                Ok(())
            }
            other => self.on_offset_answer(other),
        }
    }

    /// The consumer of `tp` got `batches`: each must be the committed batch at its offset.
    fn check_read(&mut self, tp: Tp, batches: &[Batch]) -> Result<(), Violation> {
        let position = self.clients.positions.entry(tp).or_insert(0);
        for b in batches {
            if b.base < *position {
                continue;
            }
            if !self.ledger.history.is_committed(tp, b) {
                return Err(Violation {
                    invariant: "a consumer never reads above the high watermark",
                    detail: format!(
                        "{} read batch {}+{} payload {}, not the committed one there",
                        super::replication::tp_name(tp),
                        b.base,
                        b.count,
                        b.payload
                    ),
                });
            }
            *position = b.end();
            self.ledger.stats.consumed += 1;
        }
        Ok(())
    }
}
