//! Partition reassignment (KIP-455), on the controller (pure: over the applied catalog).
//!
//! Moving a partition from replicas R to a target T: the replicas become T then R − T
//! (`adding` T − R, `removing` R − T); the added brokers open the partition as followers and
//! catch up from the leader, whose in-sync set takes them in (`replication/isr.rs`); once every
//! added replica is in sync, the controller's pass (`completions`) drops the removed ones from
//! the replicas and the in-sync set (and elects a leader from T if the leader was removed),
//! and their brokers delete their copies. At no point does the in-sync set hold fewer of the
//! partition's data than before.

use super::records::MetadataRecord;
use super::{err, Outcome};
use crate::storage::catalog::{CatalogRecord, PartitionAssignment};
use kafka_protocol::ResponseError;

/// The assignment that starts moving `a` to `target`, None when it is there already. A new
/// target replaces one in progress (whose added replicas that are not in it are dropped).
pub fn start(
    record: &CatalogRecord,
    a: &PartitionAssignment,
    target: &[i32],
) -> Result<Option<PartitionAssignment>, Outcome> {
    let mut seen = std::collections::HashSet::new();
    let known = |n: &i32| record.brokers.iter().any(|b| b.node_id == *n);
    if target.is_empty() || !target.iter().all(|n| seen.insert(*n) && known(n)) {
        return Err(err(
            ResponseError::InvalidReplicaAssignment,
            format!("target {target:?}: distinct registered brokers, at least one"),
        ));
    }
    let original: Vec<i32> = a
        .replicas
        .iter()
        .copied()
        .filter(|n| !a.adding.contains(n))
        .collect();
    if original == target && a.adding.is_empty() && a.removing.is_empty() {
        return Ok(None);
    }
    let removing: Vec<i32> = original
        .iter()
        .copied()
        .filter(|n| !target.contains(n))
        .collect();
    let mut replicas = target.to_vec();
    replicas.extend(&removing);
    Ok(Some(PartitionAssignment {
        isr: a
            .isr
            .iter()
            .copied()
            .filter(|n| replicas.contains(n))
            .collect(),
        adding: target
            .iter()
            .copied()
            .filter(|n| !original.contains(n))
            .collect(),
        removing,
        replicas,
        leader: a.leader,
        leader_epoch: a.leader_epoch,
    }))
}

/// The assignment that cancels the reassignment of `a`: back to its original replica set
/// (in the order the target left them: the preferred leader may differ from before, and the
/// periodic rebalance follows the new order).
pub fn cancel(a: &PartitionAssignment) -> Result<PartitionAssignment, Outcome> {
    if a.adding.is_empty() && a.removing.is_empty() {
        return Err(err(ResponseError::NoReassignmentInProgress, "none"));
    }
    let keep = |n: &i32| !a.adding.contains(n);
    let isr: Vec<i32> = a.isr.iter().copied().filter(keep).collect();
    if isr.is_empty() {
        return Err(err(
            ResponseError::InvalidRequest,
            "only added replicas are in sync; let the reassignment finish",
        ));
    }
    let (leader, leader_epoch) = if keep(&a.leader) && a.leader >= 0 {
        (a.leader, a.leader_epoch)
    } else {
        (isr[0], a.leader_epoch + 1)
    };
    Ok(PartitionAssignment {
        replicas: a.replicas.iter().copied().filter(keep).collect(),
        leader,
        leader_epoch,
        isr,
        adding: Vec::new(),
        removing: Vec::new(),
    })
}

/// The assignment that completes the reassignment of `a` once every added replica is in sync
/// (and an in-sync, live member of the target can lead); None while it cannot.
pub fn complete(
    a: &PartitionAssignment,
    live: &dyn Fn(i32) -> bool,
) -> Option<PartitionAssignment> {
    if a.adding.is_empty() && a.removing.is_empty() {
        return None;
    }
    if !a.adding.iter().all(|n| a.isr.contains(n)) {
        return None;
    }
    let keep = |n: &i32| !a.removing.contains(n);
    let replicas: Vec<i32> = a.replicas.iter().copied().filter(keep).collect();
    let isr: Vec<i32> = a.isr.iter().copied().filter(keep).collect();
    let (leader, leader_epoch) = if a.leader >= 0 && keep(&a.leader) {
        (a.leader, a.leader_epoch)
    } else {
        let next = replicas
            .iter()
            .copied()
            .find(|n| isr.contains(n) && live(*n))?;
        (next, a.leader_epoch + 1)
    };
    Some(PartitionAssignment {
        replicas,
        leader,
        leader_epoch,
        isr,
        adding: Vec::new(),
        removing: Vec::new(),
    })
}

/// The records that complete every reassignment that can complete now.
pub fn completions(record: &CatalogRecord) -> Vec<MetadataRecord> {
    let live = |n: i32| record.brokers.iter().any(|b| b.node_id == n && !b.fenced);
    record
        .topics
        .iter()
        .flat_map(|t| {
            t.assignment.iter().enumerate().filter_map(move |(i, a)| {
                complete(a, &live).map(|assignment| MetadataRecord::SetAssignment {
                    id: t.id,
                    partition: i as i32,
                    epoch: a.leader_epoch,
                    assignment,
                })
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::storage::catalog::BrokerRecord;

    fn catalog() -> CatalogRecord {
        CatalogRecord {
            brokers: (1..=4)
                .map(|id| BrokerRecord {
                    node_id: id,
                    incarnation: 1,
                    listeners: Vec::new(),
                    rack: None,
                    fenced: false,
                })
                .collect(),
            ..Default::default()
        }
    }

    fn assignment(replicas: &[i32], leader: i32, isr: &[i32]) -> PartitionAssignment {
        PartitionAssignment {
            replicas: replicas.to_vec(),
            leader,
            leader_epoch: 2,
            isr: isr.to_vec(),
            ..Default::default()
        }
    }

    #[test]
    fn a_move_adds_first_and_removes_once_the_new_replica_is_in_sync() {
        let c = catalog();
        let a = assignment(&[1, 2, 3], 1, &[1, 2, 3]);
        let moving = start(&c, &a, &[4, 2, 3]).unwrap().unwrap();
        assert_eq!(moving.replicas, vec![4, 2, 3, 1]);
        assert_eq!(
            (&moving.adding[..], &moving.removing[..]),
            (&[4][..], &[1][..])
        );
        assert_eq!(moving.isr, vec![1, 2, 3]);
        let live = |_| true;
        assert_eq!(complete(&moving, &live), None, "4 is not in sync yet");
        let mut caught_up = moving.clone();
        caught_up.isr.push(4);
        let done = complete(&caught_up, &live).unwrap();
        assert_eq!(done.replicas, vec![4, 2, 3]);
        assert_eq!(done.isr, vec![2, 3, 4]);
        // The leader was removed: the first in-sync live target replica leads, a new epoch.
        assert_eq!((done.leader, done.leader_epoch), (4, 3));
        assert!(done.adding.is_empty() && done.removing.is_empty());
    }

    #[test]
    fn bad_targets_no_ops_and_cancels() {
        let c = catalog();
        let a = assignment(&[1, 2, 3], 1, &[1, 2, 3]);
        for bad in [&[][..], &[1, 1][..], &[1, 9][..]] {
            assert_eq!(
                start(&c, &a, bad).unwrap_err().0,
                ResponseError::InvalidReplicaAssignment.code()
            );
        }
        assert_eq!(start(&c, &a, &[1, 2, 3]).unwrap(), None);
        assert_eq!(
            cancel(&a).unwrap_err().0,
            ResponseError::NoReassignmentInProgress.code()
        );
        let moving = start(&c, &a, &[4, 2, 3]).unwrap().unwrap();
        let cancelled = cancel(&moving).unwrap();
        assert_eq!(
            cancelled.replicas,
            vec![2, 3, 1],
            "the original set, in the target's order"
        );
        assert_eq!((cancelled.leader, &cancelled.isr[..]), (1, &[1, 2, 3][..]));
        assert!(cancelled.adding.is_empty() && cancelled.removing.is_empty());
        // A new target replaces the one in progress.
        let again = start(&c, &moving, &[1, 2, 4]).unwrap().unwrap();
        assert_eq!(again.replicas, vec![1, 2, 4, 3]);
        assert_eq!(
            (&again.adding[..], &again.removing[..]),
            (&[4][..], &[3][..])
        );
    }
}
