//! ElectLeaders (KIP-183, KIP-460): preferred-replica elections, and unclean elections of
//! partitions without a leader, by the controller. No partitions named: every partition.

use super::authorize::{self, Caller};
use super::Services;
use super::{decode, encode, str_bytes, Reply};
use crate::controller::{self, ControllerOp};
use crate::protocol::topics::group_by_topic;
use crate::security::acl::Operation;
use bytes::Bytes;
use kafka_protocol::messages::elect_leaders_response::{PartitionResult, ReplicaElectionResult};
use kafka_protocol::messages::{ElectLeadersRequest, ElectLeadersResponse};
use kafka_protocol::ResponseError;

pub async fn handle(
    services: &Services,
    caller: &Caller,
    version: i16,
    body: Bytes,
) -> anyhow::Result<Reply> {
    let shard = &services.shard;
    let req: ElectLeadersRequest = decode(body, version)?;
    if !authorize::cluster(shard, caller, Operation::Alter) {
        let code = ResponseError::ClusterAuthorizationFailed.code();
        return encode(
            &ElectLeadersResponse::default().with_error_code(code),
            version,
        );
    }
    let partitions: Vec<(String, i32)> = match &req.topic_partitions {
        Some(topics) => topics
            .iter()
            .flat_map(|t| t.partitions.iter().map(|&p| (t.topic.0.to_string(), p)))
            .collect(),
        None => {
            let catalog = shard.catalog();
            let mut all: Vec<(String, i32)> = catalog
                .topics
                .values()
                .flat_map(|t| (0..t.record.partitions as i32).map(|p| (t.name.to_string(), p)))
                .collect();
            all.sort();
            all
        }
    };
    // v0 has no election type: preferred.
    let election_type = if version >= 1 { req.election_type } else { 0 };
    let op = ControllerOp::ElectLeaders {
        election_type,
        partitions: partitions.clone(),
    };
    let outcomes = controller::submit(&services.controllers, op)
        .await
        .unwrap_or_else(|_| vec![(ResponseError::NotController.code(), None); partitions.len()]);
    let answers = partitions
        .into_iter()
        .zip(outcomes)
        .map(|((topic, index), (code, message))| {
            let r = PartitionResult::default()
                .with_partition_id(index)
                .with_error_code(code)
                .with_error_message(message.as_deref().map(str_bytes));
            (topic, r)
        });
    let results = group_by_topic(answers)
        .into_iter()
        .map(|(topic, partitions)| {
            ReplicaElectionResult::default()
                .with_topic(topic)
                .with_partition_result(partitions)
        })
        .collect();
    encode(
        &ElectLeadersResponse::default().with_replica_election_results(results),
        version,
    )
}
