//! The transaction invariants (issue 36), beside the aborted-transaction index's agreement
//! below the high watermark (`replica_checks.rs`):
//!
//! - read_committed never returns a record of an aborted transaction, whichever replica leads:
//!   a record's transaction ends as the next marker of its producer after it in the
//!   partition's committed log says (checked once that marker is committed, if it is not yet
//!   when the record is read);
//! - transactions are atomic: every committed batch of one transaction ends the same way in
//!   every partition it wrote;
//! - every transaction that began ends once a quorum is back: at the end of the run no
//!   partition's leader holds an ongoing transaction, and the coordinator holds the
//!   transactional id neither prepared nor ongoing (the client began none in the run's last
//!   half of its quiet phase, and its timeout is shorter);
//! - replicas that hold the same log hold the same producer state and aborted-transaction
//!   index as its leader.

use super::batch::Batch;
use super::checks::Violation;
use super::replica::SimReplica;
use super::replication::{assignments, tp_name, Tp};
use super::txns::TXN_ID;
use super::world::World;
use crate::storage::producer_state::ProducerEntry;
use std::collections::{BTreeMap, BTreeSet};

fn violation<T>(invariant: &'static str, detail: String) -> Result<T, Violation> {
    Err(Violation { invariant, detail })
}

const ABORTED_READ: &str = "read_committed never returns a record of an aborted transaction";
const NEVER_ENDS: &str = "every transaction that began ends once a quorum is back";

impl World {
    /// How `producer_id`'s transaction holding the batch at `base` of `tp` ended: the next
    /// marker of that producer after it in the committed log (true: commit); None while no
    /// such marker is committed.
    fn txn_outcome(&self, tp: Tp, base: i64, producer_id: i64) -> Option<bool> {
        self.ledger
            .history
            .committed_after(tp, base)
            .find_map(
                |(_, payload)| match self.ledger.txns.markers.get(&payload) {
                    Some(&(pid, commit)) if pid == producer_id => Some(commit),
                    _ => None,
                },
            )
    }

    /// Leader `node` returned the transactional batch `b` of `tp` to the read_committed
    /// consumer: its transaction must not have aborted.
    pub(super) fn check_committed_read(
        &mut self,
        tp: Tp,
        b: &Batch,
        node: usize,
    ) -> Result<(), Violation> {
        let producer_id = b.txn_records_of().expect("a transaction's records");
        match self.txn_outcome(tp, b.base, producer_id) {
            Some(false) => violation(
                ABORTED_READ,
                format!(
                    "{}: node {node} returned batch {} (payload {}) of producer {producer_id}, whose transaction aborted",
                    tp_name(tp), b.base, b.payload
                ),
            ),
            Some(true) => Ok(()),
            None => {
                self.ledger.unresolved_reads.push((tp, b.base, producer_id, node));
                Ok(())
            }
        }
    }

    /// Every transaction invariant checked at the end of the run, once the cluster converged.
    pub(super) fn txns_converged(&self) -> Result<(), Violation> {
        for &(tp, base, producer_id, node) in &self.ledger.unresolved_reads {
            match self.txn_outcome(tp, base, producer_id) {
                Some(true) => {}
                Some(false) => violation(
                    ABORTED_READ,
                    format!("{}: node {node} returned batch {base} of producer {producer_id}, whose transaction aborted since", tp_name(tp)),
                )?,
                None => violation(
                    NEVER_ENDS,
                    format!("{}: batch {base} read_committed got from node {node} has no committed marker", tp_name(tp)),
                )?,
            }
        }
        self.transactions_are_atomic()?;
        self.no_transaction_left_open()?;
        self.replicas_hold_the_leaders_producer_state()
    }

    /// Every committed batch of one transaction ends the same way.
    fn transactions_are_atomic(&self) -> Result<(), Violation> {
        let mut outcomes: BTreeMap<u64, BTreeSet<Option<bool>>> = BTreeMap::new();
        for (&payload, &(number, producer_id)) in &self.txn_client.payload_txn {
            if let Some((tp, base)) = self.ledger.history.committed_at(payload) {
                let outcome = self.txn_outcome(tp, base, producer_id);
                outcomes.entry(number).or_default().insert(outcome);
            }
        }
        for (number, ends) in outcomes {
            if ends.contains(&None) {
                violation(
                    NEVER_ENDS,
                    format!(
                        "transaction {number}: a committed batch with no committed marker after it"
                    ),
                )?;
            }
            if ends.len() > 1 {
                violation(
                    "transactions are atomic",
                    format!(
                        "transaction {number} committed in one partition and aborted in another"
                    ),
                )?;
            }
        }
        Ok(())
    }

    /// The replicas each node leads, by partition, in the converged catalog.
    fn leaders(&self) -> Vec<(Tp, &SimReplica, usize)> {
        let Some(node) = self.slots[0].node.as_ref() else {
            return Vec::new();
        };
        let led: Vec<(Tp, i32)> = node
            .applied
            .read(|c| assignments(c).map(|(tp, a)| (tp, a.leader)).collect());
        led.into_iter()
            .filter_map(|(tp, leader)| {
                let l = usize::try_from(leader).ok()?;
                Some((tp, self.slots[l].partitions.replicas.get(&tp)?, l))
            })
            .collect()
    }

    /// No leader holds an ongoing transaction, and the coordinator holds none prepared or
    /// ongoing.
    fn no_transaction_left_open(&self) -> Result<(), Violation> {
        for (tp, r, l) in self.leaders() {
            if let Some(first) = r.log.view().producers.first_unstable_offset() {
                violation(
                    NEVER_ENDS,
                    format!(
                        "{} on leader node {l}: a transaction open from offset {first} (log end {})",
                        tp_name(tp),
                        r.log_end()
                    ),
                )?;
            }
        }
        let Some(node) = self.slots[0].node.as_ref() else {
            return Ok(());
        };
        let Some((_, leader)) = self.txn_state_partition(node.id as usize) else {
            return Ok(());
        };
        let Some(c) = usize::try_from(leader)
            .ok()
            .and_then(|l| self.slots[l].txn.as_ref())
        else {
            return Ok(());
        };
        let Some(record) = c.coordinator.get(TXN_ID) else {
            return Ok(());
        };
        use crate::txn::state::State;
        if matches!(
            record.state,
            State::Ongoing | State::PrepareCommit | State::PrepareAbort
        ) || c.loaded.is_none()
        {
            violation(
                NEVER_ENDS,
                format!(
                    "coordinator node {leader} (loaded: {}) holds {TXN_ID} {} (producer {} epoch {})",
                    c.loaded.is_some(),
                    record.state.name(),
                    record.producer_id,
                    record.producer_epoch
                ),
            )?;
        }
        Ok(())
    }

    /// A replica whose log is its leader's holds the leader's producer state and
    /// aborted-transaction index.
    fn replicas_hold_the_leaders_producer_state(&self) -> Result<(), Violation> {
        for (tp, leader, l) in self.leaders() {
            for (i, slot) in self.slots.iter().enumerate() {
                let Some(r) = slot.partitions.replicas.get(&tp) else {
                    continue;
                };
                if i == l || r.log.batches != leader.log.batches {
                    continue;
                }
                if entries(r) != entries(leader)
                    || r.log.view().aborted != leader.log.view().aborted
                {
                    violation(
                        "replicas that hold the same log hold the same producer state and aborted-transaction index",
                        format!(
                            "{} on node {i} and its leader node {l}: producers {:?} and {:?}, aborted {:?} and {:?}",
                            tp_name(tp),
                            entries(r),
                            entries(leader),
                            r.log.view().aborted,
                            leader.log.view().aborted
                        ),
                    )?;
                }
            }
        }
        Ok(())
    }
}

/// A replica's producer state, less the times of last updates (which differ between them).
fn entries(r: &SimReplica) -> Vec<ProducerEntry> {
    let mut out = r.log.view().producers.to_entries();
    out.iter_mut().for_each(|e| e.last_update_ms = 0);
    out.sort_by_key(|e| e.producer_id);
    out
}
