//! AlterPartitionReassignments and ListPartitionReassignments (KIP-455): move a partition's
//! replicas to other brokers, by the controller (`controller/reassignment.rs`), and list the
//! moves in progress from this node's catalog.

use super::authorize::{self, Caller};
use super::Services;
use super::{decode, encode, str_bytes, Reply};
use crate::controller::{self, ControllerOp};
use crate::protocol::topics::group_by_topic;
use crate::security::acl::Operation;
use crate::shard::Shard;
use bytes::Bytes;
use kafka_protocol::messages::alter_partition_reassignments_response::{
    ReassignablePartitionResponse, ReassignableTopicResponse,
};
use kafka_protocol::messages::list_partition_reassignments_response::{
    OngoingPartitionReassignment, OngoingTopicReassignment,
};
use kafka_protocol::messages::{
    AlterPartitionReassignmentsRequest, AlterPartitionReassignmentsResponse, BrokerId,
    ListPartitionReassignmentsRequest, ListPartitionReassignmentsResponse, TopicName,
};
use kafka_protocol::ResponseError;
use std::rc::Rc;

/// A single node's answer to one partition's reassignment: its one replica is already where
/// a target of this node alone puts it; any other broker is not registered, and there is never
/// a reassignment to cancel.
fn alone(
    shard: &Shard,
    (topic, index, target): &(String, i32, Option<Vec<i32>>),
) -> (i16, Option<String>) {
    let node = shard.config.node_id;
    let exists = shard
        .catalog()
        .topics
        .get(topic)
        .is_some_and(|t| t.has_partition(*index));
    let outcome = |e: ResponseError, m: String| (e.code(), Some(m));
    match target {
        _ if !exists => outcome(
            ResponseError::UnknownTopicOrPartition,
            format!("no partition {topic}-{index}"),
        ),
        None => outcome(ResponseError::NoReassignmentInProgress, "none".into()),
        Some(t) if t.as_slice() == [node] => (0, None),
        Some(t) => outcome(
            ResponseError::InvalidReplicaAssignment,
            format!("replicas {t:?}: this broker ({node}) runs alone"),
        ),
    }
}

pub async fn alter(
    services: &Services,
    caller: &Caller,
    version: i16,
    body: Bytes,
) -> anyhow::Result<Reply> {
    let shard = &services.shard;
    let req: AlterPartitionReassignmentsRequest = decode(body, version)?;
    if !authorize::cluster(shard, caller, Operation::Alter) {
        let code = ResponseError::ClusterAuthorizationFailed.code();
        return encode(
            &AlterPartitionReassignmentsResponse::default().with_error_code(code),
            version,
        );
    }
    let partitions: Vec<(String, i32, Option<Vec<i32>>)> = req
        .topics
        .iter()
        .flat_map(|t| {
            t.partitions.iter().map(|p| {
                let target = p.replicas.as_ref().map(|r| r.iter().map(|b| b.0).collect());
                (t.name.0.to_string(), p.partition_index, target)
            })
        })
        .collect();
    let allow_rf_change = req.allow_replication_factor_change;
    let refused: Vec<Option<(i16, Option<String>)>> = partitions
        .iter()
        .map(|p| changes_rf(shard, p).filter(|_| !allow_rf_change))
        .collect();
    let asked: Vec<_> = (partitions.iter().zip(&refused))
        .filter(|(_, r)| r.is_none())
        .map(|(p, _)| p.clone())
        .collect();
    let mut decided = decide(services, asked).await.into_iter();
    let outcomes: Vec<_> = refused
        .into_iter()
        .map(|r| r.unwrap_or_else(|| decided.next().expect("one outcome per partition asked")))
        .collect();
    let answers =
        partitions
            .into_iter()
            .zip(outcomes)
            .map(|((topic, index, _), (code, message))| {
                let r = ReassignablePartitionResponse::default()
                    .with_partition_index(index)
                    .with_error_code(code)
                    .with_error_message(message.as_deref().map(str_bytes));
                (topic, r)
            });
    let topics = group_by_topic(answers)
        .into_iter()
        .map(|(name, partitions)| {
            ReassignableTopicResponse::default()
                .with_name(name)
                .with_partitions(partitions)
        })
        .collect();
    let response = AlterPartitionReassignmentsResponse::default()
        .with_allow_replication_factor_change(allow_rf_change)
        .with_responses(topics);
    encode(&response, version)
}

/// The outcome of each move asked: the controller's, or (a single node) this broker's own.
async fn decide(
    services: &Services,
    asked: Vec<(String, i32, Option<Vec<i32>>)>,
) -> Vec<(i16, Option<String>)> {
    let shard = &services.shard;
    if !shard.config.is_clustered() {
        return asked.iter().map(|p| alone(shard, p)).collect();
    }
    let n = asked.len();
    let op = ControllerOp::Reassign { partitions: asked };
    controller::submit(&services.controllers, op)
        .await
        .unwrap_or_else(|_| vec![(ResponseError::NotController.code(), None); n])
}

/// The refusal of a target that changes the partition's replication factor (Kafka's answer
/// to such a move when v1's `AllowReplicationFactorChange` is false); None when it keeps it,
/// cancels a move, names brokers there are not, or names a partition that does not exist
/// (answered as before).
fn changes_rf(
    shard: &Shard,
    (topic, index, target): &(String, i32, Option<Vec<i32>>),
) -> Option<(i16, Option<String>)> {
    let target = target.as_ref()?;
    let catalog = shard.catalog();
    // A target naming brokers there are not is refused as an invalid assignment first, as
    // Kafka does.
    let registered = |node: &i32| match catalog.is_clustered() {
        true => catalog.brokers.iter().any(|b| b.node_id == *node),
        false => *node == shard.config.node_id,
    };
    if !target.iter().all(registered) {
        return None;
    }
    let meta = catalog
        .topics
        .get(topic)
        .filter(|t| t.has_partition(*index))?;
    let current = match meta.assignment(*index) {
        // During a move the replicas are the target then those being removed.
        Some(a) => a.replicas.len() - a.removing.len(),
        None => 1, // a single node's partition: its one replica
    };
    (target.len() != current).then(|| {
        let message = format!(
            "the replication factor would change from {current} to {}, and \
             AllowReplicationFactorChange is false",
            target.len()
        );
        (
            ResponseError::InvalidReplicationFactor.code(),
            Some(message),
        )
    })
}

pub async fn list(
    shard: &Rc<Shard>,
    caller: &Caller,
    version: i16,
    body: Bytes,
) -> anyhow::Result<Reply> {
    let req: ListPartitionReassignmentsRequest = decode(body, version)?;
    if !authorize::cluster(shard, caller, Operation::Describe) {
        let code = ResponseError::ClusterAuthorizationFailed.code();
        return encode(
            &ListPartitionReassignmentsResponse::default().with_error_code(code),
            version,
        );
    }
    let catalog = shard.catalog();
    let wanted = |topic: &str, p: i32| {
        req.topics.as_ref().is_none_or(|ts| {
            ts.iter()
                .any(|t| *t.name.0 == *topic && t.partition_indexes.contains(&p))
        })
    };
    let ids = |v: &[i32]| v.iter().map(|&n| BrokerId(n)).collect::<Vec<_>>();
    let mut topics: Vec<OngoingTopicReassignment> = catalog
        .topics
        .values()
        .filter_map(|t| {
            let partitions: Vec<OngoingPartitionReassignment> = (0..t.record.partitions as i32)
                .filter_map(|p| t.assignment(p).map(|a| (p, a)))
                .filter(|(p, a)| {
                    (!a.adding.is_empty() || !a.removing.is_empty()) && wanted(&t.name, *p)
                })
                .map(|(p, a)| {
                    OngoingPartitionReassignment::default()
                        .with_partition_index(p)
                        .with_replicas(ids(&a.replicas))
                        .with_adding_replicas(ids(&a.adding))
                        .with_removing_replicas(ids(&a.removing))
                })
                .collect();
            (!partitions.is_empty()).then(|| {
                OngoingTopicReassignment::default()
                    .with_name(TopicName(str_bytes(&t.name)))
                    .with_partitions(partitions)
            })
        })
        .collect();
    topics.sort_by(|a, b| a.name.0.cmp(&b.name.0));
    encode(
        &ListPartitionReassignmentsResponse::default().with_topics(topics),
        version,
    )
}
