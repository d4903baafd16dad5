//! DescribeQuorum (KIP-595): the controller quorum's leader, term (as the leader epoch),
//! commit index (as the high watermark) and each voter's replicated log end, for the one
//! partition of the metadata log, `__cluster_metadata`-0, as the quorum's leader sees it: any
//! node answers (one that does not lead asks the active controller, as a Kafka broker forwards
//! the request to it), NOT_LEADER_OR_FOLLOWER while none answers. A single node is a quorum of one, as a Kafka
//! node in combined mode is: it leads, in term 1, a log it keeps no entries in.
//! Brokers that are not voters are listed as observers.

use super::authorize::{self, Caller};
use super::Services;
use super::{decode, encode, Reply};
use crate::controller::QuorumView;
use crate::security::acl::Operation;
use crate::storage::catalog::Catalog;
use bytes::Bytes;
use kafka_protocol::messages::describe_quorum_response::{PartitionData, ReplicaState, TopicData};
use kafka_protocol::messages::{BrokerId, DescribeQuorumRequest, DescribeQuorumResponse};
use kafka_protocol::ResponseError;

const METADATA_TOPIC: &str = "__cluster_metadata";

pub async fn handle(
    services: &Services,
    caller: &Caller,
    version: i16,
    body: Bytes,
) -> anyhow::Result<Reply> {
    let shard = &services.shard;
    let req: DescribeQuorumRequest = decode(body, version)?;
    if !authorize::cluster(shard, caller, Operation::Describe) {
        let code = ResponseError::ClusterAuthorizationFailed.code();
        return encode(
            &DescribeQuorumResponse::default().with_error_code(code),
            version,
        );
    }
    let view = match shard.config.is_clustered() {
        true => crate::controller::quorum_view(&services.controllers)
            .await
            .ok()
            .flatten(),
        false => Some(QuorumView {
            leader_id: shard.config.node_id,
            term: 1,
            commit: 0,
            voters: vec![(shard.config.node_id, 0)],
        }),
    };
    let catalog = shard.catalog();
    let mut topics = Vec::with_capacity(req.topics.len());
    for t in &req.topics {
        let metadata_log = t.topic_name.0.as_str() == METADATA_TOPIC;
        let partitions = t
            .partitions
            .iter()
            .map(|p| partition(&catalog, view.as_ref(), metadata_log, p.partition_index))
            .collect();
        topics.push(
            TopicData::default()
                .with_topic_name(t.topic_name.clone())
                .with_partitions(partitions),
        );
    }
    encode(
        &DescribeQuorumResponse::default().with_topics(topics),
        version,
    )
}

/// One partition's answer: the quorum for `__cluster_metadata`-0 on its leader.
fn partition(
    catalog: &Catalog,
    view: Option<&QuorumView>,
    metadata_log: bool,
    index: i32,
) -> PartitionData {
    let e = PartitionData::default().with_partition_index(index);
    if !metadata_log || index != 0 {
        return e.with_error_code(ResponseError::UnknownTopicOrPartition.code());
    }
    let Some(v) = view else {
        return e.with_error_code(ResponseError::NotLeaderOrFollower.code());
    };
    let observers = catalog
        .brokers
        .iter()
        .filter(|b| v.voters.iter().all(|(id, _)| *id != b.node_id))
        .map(|b| replica(b.node_id, -1))
        .collect();
    e.with_leader_id(BrokerId(v.leader_id))
        .with_leader_epoch(v.term as i32)
        .with_high_watermark(v.commit as i64)
        .with_current_voters(
            v.voters
                .iter()
                .map(|&(id, end)| replica(id, end as i64))
                .collect(),
        )
        .with_observers(observers)
}

fn replica(id: i32, log_end: i64) -> ReplicaState {
    ReplicaState::default()
        .with_replica_id(BrokerId(id))
        .with_log_end_offset(log_end)
        .with_last_fetch_timestamp(-1)
        .with_last_caught_up_timestamp(-1)
}
