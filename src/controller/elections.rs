//! Leader elections the controller makes on request (ElectLeaders, KIP-460) and by itself
//! (preferred-leader rebalancing, Kafka's auto.leader.rebalance.enable). Pure: over the
//! applied catalog record.
//!
//! - Preferred: the first replica leads again if it is a live, in-sync broker.
//! - Unclean (asked for explicitly; never automatic): a partition with no leader gets a live
//!   replica that is not in sync, and the in-sync set restarts from it. Records only the old
//!   in-sync replicas held are lost: the operator chose availability.

use super::records::MetadataRecord;
use super::{err, Outcome};
use crate::storage::catalog::{CatalogRecord, PartitionAssignment};
use kafka_protocol::ResponseError;

pub const PREFERRED: i8 = 0;
pub const UNCLEAN: i8 = 1;

/// The records for electing leaders of `partitions` (topic, index), and one outcome each.
pub fn elect(
    record: &CatalogRecord,
    partitions: &[(String, i32)],
    election_type: i8,
) -> (Vec<MetadataRecord>, Vec<Outcome>) {
    let mut records = Vec::new();
    let outcomes = partitions
        .iter()
        .map(
            |(topic, index)| match elect_one(record, topic, *index, election_type) {
                Ok(r) => {
                    records.push(r);
                    (0, None)
                }
                Err(o) => o,
            },
        )
        .collect();
    (records, outcomes)
}

fn elect_one(
    record: &CatalogRecord,
    topic: &str,
    index: i32,
    election_type: i8,
) -> Result<MetadataRecord, Outcome> {
    let t = record
        .topics
        .iter()
        .find(|t| t.name == topic)
        .ok_or_else(|| err(ResponseError::UnknownTopicOrPartition, "no such topic"))?;
    if t.assignment.is_empty() && index >= 0 && (index as u32) < t.partitions {
        return Err(err(
            ResponseError::ElectionNotNeeded,
            "a single node leads it",
        ));
    }
    let a = usize::try_from(index)
        .ok()
        .and_then(|i| t.assignment.get(i))
        .ok_or_else(|| err(ResponseError::UnknownTopicOrPartition, "no such partition"))?;
    let live = |n: &i32| record.brokers.iter().any(|b| b.node_id == *n && !b.fenced);
    let (leader, isr) = match election_type {
        PREFERRED => (preferred(a, &live)?, None),
        UNCLEAN => {
            if a.leader >= 0 {
                return Err(err(
                    ResponseError::ElectionNotNeeded,
                    "the partition has a leader",
                ));
            }
            let n = a
                .replicas
                .iter()
                .copied()
                .find(|n| live(n))
                .ok_or_else(|| {
                    err(
                        ResponseError::EligibleLeadersNotAvailable,
                        "no live replica",
                    )
                })?;
            (n, Some(vec![n]))
        }
        other => {
            return Err(err(
                ResponseError::InvalidRequest,
                format!("election type {other}"),
            ))
        }
    };
    Ok(MetadataRecord::ElectLeader {
        id: t.id,
        partition: index,
        leader,
        isr,
    })
}

/// The preferred replica, when it can lead and does not.
fn preferred(a: &PartitionAssignment, live: &dyn Fn(&i32) -> bool) -> Result<i32, Outcome> {
    let want = *a.replicas.first().expect("a partition has replicas");
    if a.leader == want {
        return Err(err(
            ResponseError::ElectionNotNeeded,
            "the preferred replica leads",
        ));
    }
    if !a.isr.contains(&want) || !live(&want) {
        return Err(err(
            ResponseError::PreferredLeaderNotAvailable,
            format!("replica {want} is not a live in-sync replica"),
        ));
    }
    Ok(want)
}

/// Partitions whose preferred replica is a live in-sync broker that does not lead: what the
/// periodic rebalance moves back.
pub fn imbalanced(record: &CatalogRecord) -> Vec<(String, i32)> {
    let live = |n: &i32| record.brokers.iter().any(|b| b.node_id == *n && !b.fenced);
    record
        .topics
        .iter()
        .flat_map(|t| {
            t.assignment
                .iter()
                .enumerate()
                .filter(|(_, a)| preferred(a, &live).is_ok())
                .map(|(i, _)| (t.name.clone(), i as i32))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::controller::records::apply;
    use crate::storage::catalog::{BrokerRecord, TopicRecord};

    fn catalog(leader: i32, isr: &[i32], fenced: &[i32]) -> CatalogRecord {
        let brokers = (1..=3)
            .map(|id| BrokerRecord {
                node_id: id,
                incarnation: 1,
                listeners: Vec::new(),
                rack: None,
                fenced: fenced.contains(&id),
            })
            .collect();
        CatalogRecord {
            cluster_id: "c".into(),
            topics: vec![TopicRecord {
                name: "t".into(),
                id: [1; 16],
                partitions: 1,
                configs: Vec::new(),
                assignment: vec![PartitionAssignment {
                    replicas: vec![1, 2, 3],
                    leader,
                    leader_epoch: 4,
                    isr: isr.to_vec(),
                    ..Default::default()
                }],
            }],
            producer_id_block_end: 0,
            broker_configs: Vec::new(),
            brokers,
            ..CatalogRecord::default()
        }
    }

    fn code(o: &Outcome) -> i16 {
        o.0
    }

    #[test]
    fn the_preferred_replica_leads_again_when_live_and_in_sync() {
        let mut c = catalog(2, &[1, 2, 3], &[]);
        assert_eq!(imbalanced(&c), vec![("t".to_string(), 0)]);
        let (records, outcomes) = elect(&c, &[("t".into(), 0)], PREFERRED);
        assert_eq!(code(&outcomes[0]), 0);
        apply(&mut c, &records).unwrap();
        let a = &c.topics[0].assignment[0];
        assert_eq!((a.leader, a.leader_epoch), (1, 5));
        assert!(imbalanced(&c).is_empty());
        let (_, again) = elect(&c, &[("t".into(), 0)], PREFERRED);
        assert_eq!(code(&again[0]), ResponseError::ElectionNotNeeded.code());
    }

    #[test]
    fn a_preferred_replica_out_of_sync_or_fenced_is_not_elected() {
        for c in [catalog(2, &[2, 3], &[]), catalog(2, &[1, 2, 3], &[1])] {
            assert!(imbalanced(&c).is_empty());
            let (records, outcomes) = elect(&c, &[("t".into(), 0)], PREFERRED);
            assert!(records.is_empty());
            assert_eq!(
                code(&outcomes[0]),
                ResponseError::PreferredLeaderNotAvailable.code()
            );
        }
        let (_, unknown) = elect(&catalog(2, &[2], &[]), &[("x".into(), 0)], PREFERRED);
        assert_eq!(
            code(&unknown[0]),
            ResponseError::UnknownTopicOrPartition.code()
        );
    }

    #[test]
    fn an_unclean_election_only_for_a_leaderless_partition_restarts_the_isr() {
        let (_, led) = elect(&catalog(2, &[2], &[]), &[("t".into(), 0)], UNCLEAN);
        assert_eq!(code(&led[0]), ResponseError::ElectionNotNeeded.code());
        let mut c = catalog(-1, &[3], &[3]);
        let (records, outcomes) = elect(&c, &[("t".into(), 0)], UNCLEAN);
        assert_eq!(code(&outcomes[0]), 0);
        apply(&mut c, &records).unwrap();
        let a = &c.topics[0].assignment[0];
        assert_eq!((a.leader, &a.isr[..], a.leader_epoch), (1, &[1][..], 5));
    }
}
