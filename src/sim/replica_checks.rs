//! The replication invariants, checked whenever a replica changed:
//!
//! - committed logs of the replicas are prefixes of one another: every batch below a
//!   replica's high watermark is the batch the history holds at that offset (the first
//!   replica to commit an offset writes the history), in topics that do not allow unclean
//!   elections;
//! - a leader's high watermark never goes back while it leads;
//! - no acknowledged acks=all write is lost: a replica that becomes leader holds every
//!   record acknowledged so far (topics that allow unclean elections excepted: they trade
//!   that for availability), and at the end every leader does;
//! - at most one replica leads a partition in one epoch;
//! - no duplicate with idempotence: an idempotent producer's batch, however often it is
//!   retried, is committed at one offset only;
//! - the aborted-transaction index agrees below the high watermark: a replica that commits a
//!   marker holds the index entry for it that the first replica to commit it held (or none, as
//!   it did).

use super::batch::Batch;
use super::checks::Violation;
use super::clients::ClientEvent;
use super::replication::{tp_name, Answer, Tp};
use super::world::World;
use crate::storage::txn_index::AbortedTxn;
use std::collections::BTreeMap;

/// What the replicas committed and the leaders acknowledged.
#[derive(Default)]
pub struct History {
    /// (partition, base offset) → (payload, records): the committed batches.
    committed: BTreeMap<(Tp, i64), (u64, i64)>,
    /// (partition, base offset) → payload: acknowledged at acks=all.
    pub acked: BTreeMap<(Tp, i64), u64>,
    /// An idempotent producer's payload → where it was committed: once only.
    idempotent: BTreeMap<u64, (Tp, i64)>,
    /// (partition, epoch) → the node that led it.
    leaders: BTreeMap<(Tp, i32), usize>,
    /// (node, partition) → (leader generation, high watermark) last seen while leading.
    leader_hw: BTreeMap<(usize, Tp), (u64, i64)>,
    /// Partition → the newest leader epoch any node's catalog has shown.
    pub newest_epoch: BTreeMap<Tp, i32>,
    /// (partition, marker offset) → the aborted-transaction index entry the first replica to
    /// commit the marker held for it.
    marker_entries: BTreeMap<(Tp, i64), Option<AbortedTxn>>,
}

fn violation(invariant: &'static str, detail: String) -> Result<(), Violation> {
    Err(Violation { invariant, detail })
}

impl History {
    /// Node `i` restarted: its leaderships' high watermarks start again from its checkpoint.
    pub fn restarted(&mut self, i: usize) {
        self.leader_hw.retain(|(node, _), _| *node != i);
    }

    /// Whether `b` is the batch committed at its offset of `tp`.
    pub fn is_committed(&self, tp: Tp, b: &Batch) -> bool {
        self.committed.get(&(tp, b.base)) == Some(&(b.payload, b.count))
    }

    /// The committed batches of `tp` after offset `offset`, in order: (base, payload).
    pub fn committed_after(&self, tp: Tp, offset: i64) -> impl Iterator<Item = (i64, u64)> + '_ {
        let range = (tp, offset.saturating_add(1))..=(tp, i64::MAX);
        self.committed
            .range(range)
            .map(|(&(_, base), &(payload, _))| (base, payload))
    }

    /// A committed batch `b` of `tp` on node `i` (whose aborted-transaction index is
    /// `aborted`): a marker's index entry agrees with the first replica's to commit it; an
    /// idempotent batch is committed at one offset only.
    fn check_stamped(
        &mut self,
        i: usize,
        tp: Tp,
        b: &Batch,
        aborted: &[AbortedTxn],
    ) -> Result<(), Violation> {
        if b.marker().is_some() {
            let entry = aborted.iter().find(|e| e.last_offset == b.base).copied();
            let first = *self.marker_entries.entry((tp, b.base)).or_insert(entry);
            if first != entry {
                let detail = format!(
                    "{} on node {i}: the marker at {} ({:?}) has index entry {entry:?}; the first replica to commit it had {first:?}",
                    tp_name(tp), b.base, b.stamp
                );
                return violation(
                    "the aborted-transaction index agrees below the high watermark",
                    detail,
                );
            }
        } else if b.stamp.is_some() {
            let at = *self.idempotent.entry(b.payload).or_insert((tp, b.base));
            if at != (tp, b.base) {
                let detail = format!(
                    "{} on node {i}: payload {} ({:?}) committed at {} and at {}",
                    tp_name(tp),
                    b.payload,
                    b.stamp,
                    at.1,
                    b.base
                );
                return violation("no duplicate with idempotence", detail);
            }
        }
        Ok(())
    }

    /// Where an idempotent (or transactional) producer's batch `payload` was committed.
    pub fn committed_at(&self, payload: u64) -> Option<(Tp, i64)> {
        self.idempotent.get(&payload).copied()
    }
}

impl World {
    /// After replica `tp` of node `i` changed: check it, and answer the produces it commits.
    pub(super) fn replica_changed(&mut self, i: usize, tp: Tp) -> Result<(), Violation> {
        self.check_committed(i, tp)?;
        self.check_leader_hw(i, tp)?;
        self.answer_waiters();
        Ok(())
    }

    fn check_committed(&mut self, i: usize, tp: Tp) -> Result<(), Violation> {
        if self.unclean_topic(i, tp) {
            // An unclean election elects a replica without the committed tail, which its
            // own history then overwrites: Kafka's trade for availability.
            return Ok(());
        }
        let r = self.slots[i]
            .partitions
            .replicas
            .get_mut(&tp)
            .expect("a replica of the node");
        let hw = r.high_watermark();
        for b in r
            .log
            .batches
            .iter()
            .filter(|b| b.base >= r.checked_to && b.end() <= hw)
        {
            let first = *self
                .ledger
                .history
                .committed
                .entry((tp, b.base))
                .or_insert_with(|| {
                    let note = format!(
                        "node {i}: {} commits {}+{} payload {} (hw {hw})",
                        tp_name(tp),
                        b.base,
                        b.count,
                        b.payload
                    );
                    self.trace.note(self.now_ms, note);
                    (b.payload, b.count)
                });
            if first != (b.payload, b.count) {
                let detail = format!(
                    "{} on node {i}: batch {} (payload {}, {} records) below high watermark {hw}; committed before: payload {}, {} records",
                    tp_name(tp), b.base, b.payload, b.count, first.0, first.1
                );
                return violation(
                    "committed logs of the replicas are prefixes of one another",
                    detail,
                );
            }
            self.ledger
                .history
                .check_stamped(i, tp, b, &r.log.view().aborted)?;
        }
        r.checked_to = r.checked_to.max(hw);
        Ok(())
    }

    fn check_leader_hw(&mut self, i: usize, tp: Tp) -> Result<(), Violation> {
        let r = &self.slots[i].partitions.replicas[&tp];
        if !r.is_leader() {
            return Ok(());
        }
        let (generation, _) = r.leadership().expect("a leader");
        let now = (generation, r.high_watermark());
        let before = self.ledger.history.leader_hw.insert((i, tp), now);
        if let Some((generation, hw)) = before {
            if generation == now.0 && now.1 < hw {
                let detail = format!("{} on node {i}: {hw} then {}", tp_name(tp), now.1);
                return violation("a leader's high watermark never goes back", detail);
            }
        }
        Ok(())
    }

    /// Replica `tp` of node `i` has just become leader.
    pub(super) fn became_leader(&mut self, i: usize, tp: Tp) -> Result<(), Violation> {
        let r = &self.slots[i].partitions.replicas[&tp];
        let epoch = r.epoch();
        let first = *self.ledger.history.leaders.entry((tp, epoch)).or_insert(i);
        if first != i {
            let detail = format!("{} epoch {epoch}: node {first} and node {i}", tp_name(tp));
            return violation("at most one replica leads a partition per epoch", detail);
        }
        if self
            .ledger
            .history
            .newest_epoch
            .get(&tp)
            .is_some_and(|e| *e > epoch)
        {
            // A restarted node acting on the catalog it recovered, before it has caught up:
            // the controller elected others since. The history checks hold it to what it
            // commits.
            self.trace.note(
                self.now_ms,
                format!(
                    "node {i} leads {} in a superseded epoch {epoch}",
                    tp_name(tp)
                ),
            );
            return Ok(());
        }
        self.check_holds_acked(i, tp)
    }

    /// Node `i`'s replica of `tp` holds every record acknowledged at acks=all.
    pub(super) fn check_holds_acked(&self, i: usize, tp: Tp) -> Result<(), Violation> {
        if self.unclean_topic(i, tp) {
            return Ok(());
        }
        let r = &self.slots[i].partitions.replicas[&tp];
        for (&(_, base), &payload) in self
            .ledger
            .history
            .acked
            .range((tp, i64::MIN)..=(tp, i64::MAX))
        {
            if r.batch_at(base).is_none_or(|b| b.payload != payload) {
                let detail = format!(
                    "{} led by node {i} (epoch {}, log end {}): acknowledged batch at {base} (payload {payload}) missing",
                    tp_name(tp), r.epoch(), r.log_end()
                );
                return violation("no acknowledged acks=all write is lost", detail);
            }
        }
        Ok(())
    }

    /// Node `i` is the first to apply the controller's entries up to `applied`: every member
    /// of an in-sync set there holds every record committed so far (of a topic without
    /// unclean elections). No node acts on a later entry yet, so each record was committed
    /// under an in-sync set of an entry at or below this one, all of whose members had synced
    /// it, and a replica joins only once caught up (its leader counts it while it asks).
    pub(super) fn check_isr_holds_acked(&self, i: usize, applied: u64) -> Result<(), Violation> {
        let Some(node) = &self.slots[i].node else {
            return Ok(());
        };
        let isrs: Vec<(Tp, Vec<i32>)> = node.applied.read(|c| {
            super::replication::assignments(c)
                .map(|(tp, a)| (tp, a.isr.clone()))
                .collect()
        });
        for (tp, isr) in isrs {
            if self.unclean_topic(i, tp) {
                continue;
            }
            for &m in &isr {
                let r = self.slots[m as usize].partitions.replicas.get(&tp);
                let mut committed = self.ledger.history.committed_after(tp, -1);
                let lacks = |&(base, payload): &(i64, u64)| {
                    r.and_then(|r| r.batch_at(base))
                        .is_none_or(|b| b.payload != payload)
                };
                if let Some((base, payload)) = committed.find(lacks) {
                    let detail = format!(
                        "{} at applied index {applied} (node {i}): in sync {isr:?}, but node {m} lacks committed batch at {base} (payload {payload})",
                        tp_name(tp)
                    );
                    return violation("every in-sync replica holds every committed record", detail);
                }
            }
        }
        Ok(())
    }

    fn unclean_topic(&self, i: usize, tp: Tp) -> bool {
        self.slots[i].node.as_ref().is_some_and(|n| {
            n.applied.read(|c| {
                c.topics.iter().any(|t| {
                    t.id == tp.0
                        && t.configs
                            .iter()
                            .any(|(k, v)| k == "unclean.leader.election.enable" && v == "true")
                })
            })
        })
    }

    /// Acknowledges the acks=all produces their leader committed; drops those whose leader
    /// lost its leadership (the producer is told NOT_LEADER_OR_FOLLOWER and retries) and the
    /// broker's own writes past their deadline (its coordinator learns they failed).
    pub(super) fn answer_waiters(&mut self) {
        let mut keep = Vec::with_capacity(self.waiting.len());
        let mut failed = Vec::new();
        for w in std::mem::take(&mut self.waiting) {
            let r = self.slots[w.node].partitions.replicas.get(&w.tp);
            let current = self.slots[w.node].node.is_some()
                && r.is_some_and(|r| r.leadership().is_some_and(|(g, _)| g == w.generation));
            if r.is_some_and(|r| current && r.high_watermark() >= w.end) {
                self.ledger.history.acked.insert((w.tp, w.base), w.payload);
                self.committed_answer(w.node, w.tp, w.answer);
            } else if !current || self.clock_ms(w.node) >= w.deadline_ms {
                failed.push((w.node, w.answer));
            } else {
                keep.push(w);
            }
        }
        self.waiting = keep;
        for (node, answer) in failed {
            self.failed_answer(node, answer);
        }
    }

    /// An acks=all write committed on leader `node`: who learns of it.
    fn committed_answer(&mut self, node: usize, tp: Tp, answer: Answer) {
        match answer {
            Answer::Nobody => {}
            Answer::Producer { producer, sequence } => {
                let acked = ClientEvent::Acked {
                    producer,
                    tp,
                    sequence,
                };
                self.answer_client(node, acked);
            }
            Answer::OffsetCommit { tp, offset } => self.offset_committed(node, tp, offset),
            Answer::TxnRecords { tp, sequence } => {
                self.answer_client(node, ClientEvent::TxnAcked { tp, sequence })
            }
            Answer::TxnState { id, record, then } => self.txn_persisted(node, &id, record, then),
            Answer::Marker {
                coordinator,
                marker,
            } => self.marker_answer(node, coordinator, marker, Ok(())),
        }
    }

    /// An acks=all write that will not be acknowledged: its leader lost the leadership, or the
    /// broker's own write timed out. Clients retry on their own; coordinators learn of it.
    fn failed_answer(&mut self, node: usize, answer: Answer) {
        match answer {
            Answer::TxnState { id, record, then } => {
                self.txn_persist_failed(node, &id, record, then)
            }
            Answer::Marker {
                coordinator,
                marker,
            } => {
                let why = "NOT_LEADER_OR_FOLLOWER or REQUEST_TIMED_OUT".to_string();
                self.marker_answer(node, coordinator, marker, Err(why))
            }
            _ => {}
        }
    }
}
