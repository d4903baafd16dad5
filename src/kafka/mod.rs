//! Kafka API handlers, one file per API, and the dispatch table. Each handler decodes its
//! request, routes per-partition work to the owning shards, and encodes the response body.

pub mod add_offsets_to_txn;
pub mod add_partitions_to_txn;
pub mod alter_configs;
pub mod alter_user_scram_credentials;
pub mod api_versions;
pub mod authorize;
pub mod authorized_operations;
pub mod create_acls;
pub mod create_partitions;
pub mod create_topics;
pub mod delete_acls;
pub mod delete_groups;
pub mod delete_records;
pub mod delete_topics;
pub mod describe_acls;
pub mod describe_cluster;
pub mod describe_configs;
pub mod describe_groups;
pub mod describe_quorum;
pub mod describe_transactions;
pub mod describe_user_scram_credentials;
pub mod elect_leaders;
pub mod end_txn;
pub mod fetch;
pub mod fetch_session;
pub mod find_coordinator;
pub mod heartbeat;
pub mod incremental_alter_configs;
pub mod init_producer_id;
pub mod join_group;
pub mod leave_group;
pub mod list_groups;
pub mod list_offsets;
pub mod list_transactions;
pub mod metadata;
pub mod offset_commit;
pub mod offset_delete;
pub mod offset_fetch;
pub mod offset_for_leader_epoch;
pub mod partition_reassignments;
pub mod produce;
pub mod sasl_authenticate;
pub mod sasl_handshake;
pub mod sync_group;
pub mod txn_offset_commit;
pub mod write_txn_markers;

pub use authorize::Caller;

use crate::partition::TopicPartition;
use crate::protocol::chunk::Chunk;
use crate::protocol::frame::RequestHeader;
use crate::shard::mesh::Request;
use crate::shard::Shard;
use bytes::{Bytes, BytesMut};
use futures::future::LocalBoxFuture;
use kafka_protocol::messages::{ApiKey, TopicName};
use kafka_protocol::protocol::{Decodable, Encodable, StrBytes};
use kafka_protocol::ResponseError;
use std::rc::Rc;

/// The versions served, per API: ApiVersions advertises exactly this table.
pub const SUPPORTED: &[(ApiKey, i16, i16)] = &[
    (
        ApiKey::Produce,
        crate::protocol::produce::MIN_VERSION,
        crate::protocol::produce::MAX_VERSION,
    ),
    (
        ApiKey::Fetch,
        crate::protocol::fetch::MIN_VERSION,
        crate::protocol::fetch::MAX_VERSION,
    ),
    (ApiKey::ListOffsets, 1, 10),
    (ApiKey::Metadata, 0, 13),
    (ApiKey::ApiVersions, 0, api_versions::MAX_VERSION),
    (ApiKey::CreateTopics, 2, 7),
    (ApiKey::DeleteTopics, 1, 6),
    (ApiKey::DescribeConfigs, 1, 4),
    (ApiKey::CreatePartitions, 0, 3),
    (ApiKey::FindCoordinator, 0, 6),
    (ApiKey::JoinGroup, 0, 9),
    (ApiKey::SyncGroup, 0, 5),
    (ApiKey::Heartbeat, 0, 4),
    (ApiKey::LeaveGroup, 0, 5),
    (ApiKey::OffsetCommit, 2, 9),
    (ApiKey::OffsetFetch, 1, 9),
    (ApiKey::DescribeGroups, 0, 6),
    (ApiKey::ListGroups, 0, 5),
    (ApiKey::DeleteGroups, 0, 3),
    (ApiKey::OffsetDelete, 0, 0),
    (ApiKey::InitProducerId, 0, 5),
    (ApiKey::AddPartitionsToTxn, 0, 5),
    (ApiKey::AddOffsetsToTxn, 0, 4),
    (ApiKey::EndTxn, 0, 5),
    (ApiKey::TxnOffsetCommit, 0, 5),
    (ApiKey::WriteTxnMarkers, 1, 1),
    (ApiKey::DescribeTransactions, 0, 0),
    (ApiKey::ListTransactions, 0, 2),
    (ApiKey::DeleteRecords, 0, 2),
    (ApiKey::AlterConfigs, 0, 2),
    (ApiKey::IncrementalAlterConfigs, 0, 1),
    (ApiKey::DescribeCluster, 0, 2),
    (ApiKey::DescribeQuorum, 0, 1),
    (ApiKey::OffsetForLeaderEpoch, 0, 4),
    (ApiKey::ElectLeaders, 0, 2),
    (ApiKey::AlterPartitionReassignments, 0, 1),
    (ApiKey::ListPartitionReassignments, 0, 0),
    (ApiKey::SaslHandshake, 0, 1),
    (ApiKey::SaslAuthenticate, 0, 2),
    (ApiKey::DescribeUserScramCredentials, 0, 0),
    (ApiKey::AlterUserScramCredentials, 0, 0),
    (ApiKey::CreateAcls, 0, 3),
    (ApiKey::DescribeAcls, 0, 3),
    (ApiKey::DeleteAcls, 0, 3),
];

pub fn supported(key: ApiKey, version: i16) -> bool {
    SUPPORTED
        .iter()
        .any(|&(k, lo, hi)| k == key && (lo..=hi).contains(&version))
}

/// What a handler answers.
pub enum Reply {
    /// No response at all (Produce with acks=0).
    None,
    /// The response body, in chunks.
    Body(Vec<Chunk>),
    /// The request's ordered part is done (a produce's appends); the rest (waiting for the
    /// commit, a long poll) completes later, while the connection serves its next requests.
    /// The connection still writes responses in request order.
    Later(LocalBoxFuture<'static, anyhow::Result<Vec<Chunk>>>),
}

/// Runs the handler for a request whose version was checked by `supported`. An Err means the
/// request could not be decoded: the connection is closed, as Kafka does. SaslHandshake and
/// SaslAuthenticate change the connection's state, so the connection serves them itself.
pub async fn dispatch(
    shard: &Rc<Shard>,
    header: &RequestHeader,
    body: Bytes,
    caller: &Caller,
) -> anyhow::Result<Reply> {
    let v = header.api_version;
    let client_id = header.client_id.as_deref().unwrap_or_default();
    match header.api_key {
        ApiKey::Produce => produce::handle(shard, caller, v, body).await,
        ApiKey::Fetch => fetch::handle(shard, caller, v, body).await,
        ApiKey::ListOffsets => list_offsets::handle(shard, caller, v, body).await,
        ApiKey::OffsetForLeaderEpoch => {
            offset_for_leader_epoch::handle(shard, caller, v, body).await
        }
        ApiKey::Metadata => metadata::handle(shard, caller, v, body).await,
        ApiKey::ApiVersions => api_versions::handle(shard, v, body),
        ApiKey::CreateTopics => create_topics::handle(shard, caller, v, body).await,
        ApiKey::DeleteTopics => delete_topics::handle(shard, caller, v, body).await,
        ApiKey::DescribeConfigs => describe_configs::handle(shard, caller, v, body).await,
        ApiKey::DescribeCluster => describe_cluster::handle(shard, caller, v, body).await,
        ApiKey::DescribeQuorum => describe_quorum::handle(shard, caller, v, body).await,
        ApiKey::ElectLeaders => elect_leaders::handle(shard, caller, v, body).await,
        ApiKey::AlterPartitionReassignments => {
            partition_reassignments::alter(shard, caller, v, body).await
        }
        ApiKey::ListPartitionReassignments => {
            partition_reassignments::list(shard, caller, v, body).await
        }
        ApiKey::CreatePartitions => create_partitions::handle(shard, caller, v, body).await,
        ApiKey::FindCoordinator => find_coordinator::handle(shard, caller, v, body).await,
        ApiKey::JoinGroup => join_group::handle(shard, caller, v, body, client_id).await,
        ApiKey::SyncGroup => sync_group::handle(shard, caller, v, body).await,
        ApiKey::Heartbeat => heartbeat::handle(shard, caller, v, body).await,
        ApiKey::LeaveGroup => leave_group::handle(shard, caller, v, body).await,
        ApiKey::OffsetCommit => offset_commit::handle(shard, caller, v, body).await,
        ApiKey::OffsetFetch => offset_fetch::handle(shard, caller, v, body).await,
        ApiKey::DescribeGroups => describe_groups::handle(shard, caller, v, body).await,
        ApiKey::ListGroups => list_groups::handle(shard, caller, v, body).await,
        ApiKey::DeleteGroups => delete_groups::handle(shard, caller, v, body).await,
        ApiKey::OffsetDelete => offset_delete::handle(shard, caller, v, body).await,
        ApiKey::InitProducerId => init_producer_id::handle(shard, caller, v, body).await,
        ApiKey::AddPartitionsToTxn => add_partitions_to_txn::handle(shard, caller, v, body).await,
        ApiKey::AddOffsetsToTxn => add_offsets_to_txn::handle(shard, caller, v, body).await,
        ApiKey::EndTxn => end_txn::handle(shard, caller, v, body).await,
        ApiKey::TxnOffsetCommit => txn_offset_commit::handle(shard, caller, v, body).await,
        ApiKey::WriteTxnMarkers => write_txn_markers::handle(shard, caller, v, body).await,
        ApiKey::DescribeTransactions => describe_transactions::handle(shard, caller, v, body).await,
        ApiKey::ListTransactions => list_transactions::handle(shard, caller, v, body).await,
        ApiKey::DeleteRecords => delete_records::handle(shard, caller, v, body).await,
        ApiKey::AlterConfigs => alter_configs::handle(shard, caller, v, body).await,
        ApiKey::IncrementalAlterConfigs => {
            incremental_alter_configs::handle(shard, caller, v, body).await
        }
        ApiKey::CreateAcls => create_acls::handle(shard, caller, v, body).await,
        ApiKey::DescribeAcls => describe_acls::handle(shard, caller, v, body),
        ApiKey::DeleteAcls => delete_acls::handle(shard, caller, v, body).await,
        ApiKey::DescribeUserScramCredentials => {
            describe_user_scram_credentials::handle(shard, caller, v, body)
        }
        ApiKey::AlterUserScramCredentials => {
            alter_user_scram_credentials::handle(shard, caller, v, body).await
        }
        other => anyhow::bail!("no handler for {other:?}"),
    }
}

/// The APIs served, as the metrics endpoint names them: (key number, name).
pub fn api_names() -> crate::metrics::ApiNames {
    SUPPORTED
        .iter()
        .map(|&(k, _, _)| (k as i16, format!("{k:?}")))
        .collect()
}

/// Runs a request's per-partition work on the partitions' owners and returns, per topic in
/// request order, each partition's index and outcome. `make(partition, p)` builds the item an
/// owner executes, `request` wraps a shard's items (its reply: one answer per item, in order).
/// Unknown topics and partitions are answered `failed(UNKNOWN_TOPIC_OR_PARTITION)` without
/// leaving this shard, and partitions another node leads (in a cluster)
/// `failed(NOT_LEADER_OR_FOLLOWER)`, so that clients refresh their metadata; so are partitions
/// of a shard that has stopped (shutdown), so that clients retry elsewhere. Topics `allowed`
/// refuses are answered `failed(TOPIC_AUTHORIZATION_FAILED)`.
pub async fn per_partition<'a, P: 'a, T, R: Copy + 'static, Q>(
    shard: &Rc<Shard>,
    (topics, allowed): (
        impl IntoIterator<Item = (&'a TopicName, &'a [P])>,
        impl Fn(&str) -> bool,
    ),
    index: impl Fn(&P) -> i32,
    make: impl Fn(TopicPartition, &P) -> T,
    request: impl Fn(Vec<T>) -> Q,
    failed: impl Fn(ResponseError) -> R,
) -> Vec<(TopicName, Vec<(i32, R)>)>
where
    Q: Request<Reply = Vec<R>>,
{
    let catalog = shard.catalog();
    // Each item with its owning shard; the layout says which item (or error) answers what.
    type Slot = Result<usize, ResponseError>;
    let mut items: Vec<(usize, T)> = Vec::new();
    let layout: Vec<(TopicName, Vec<(i32, Slot)>)> = topics
        .into_iter()
        .map(|(name, partitions)| {
            let known = catalog.topics.get(name.0.as_str());
            let denied = !allowed(name.0.as_str());
            let row = partitions
                .iter()
                .map(|p| {
                    let i = index(p);
                    let slot = match known {
                        _ if denied => Err(ResponseError::TopicAuthorizationFailed),
                        Some(t) if t.has_partition(i) && !catalog.leads(t, i) => {
                            Err(ResponseError::NotLeaderOrFollower)
                        }
                        Some(t) if t.has_partition(i) => {
                            let tp = TopicPartition {
                                topic_id: t.record.id,
                                partition: i,
                            };
                            items.push((shard.owner(&t.name, i), make(tp, p)));
                            Ok(items.len() - 1)
                        }
                        _ => Err(ResponseError::UnknownTopicOrPartition),
                    };
                    (i, slot)
                })
                .collect();
            (name.clone(), row)
        })
        .collect();
    let outcomes = shard
        .scatter(items, request, || {
            failed(ResponseError::NotLeaderOrFollower)
        })
        .await;
    layout
        .into_iter()
        .map(|(name, row)| {
            let row = row
                .into_iter()
                .map(|(i, slot)| (i, slot.map_or_else(&failed, |k| outcomes[k])))
                .collect();
            (name, row)
        })
        .collect()
}

pub fn decode<M: Decodable>(mut body: Bytes, version: i16) -> anyhow::Result<M> {
    M::decode(&mut body, version)
}

pub fn encode<M: Encodable>(message: &M, version: i16) -> anyhow::Result<Reply> {
    encode_body(message, version).map(Reply::Body)
}

/// A response body encoded with kafka-protocol, as one chunk.
pub fn encode_body<M: Encodable>(message: &M, version: i16) -> anyhow::Result<Vec<Chunk>> {
    let mut buf = BytesMut::new();
    message.encode(&mut buf, version)?;
    Ok(vec![buf.freeze().into()])
}

/// `e`'s code as a transactional API at `version` may answer it: versions before `since`
/// predate PRODUCER_FENCED (KIP-588) and get INVALID_PRODUCER_EPOCH, as Kafka answers them.
pub fn txn_error_code(e: ResponseError, version: i16, since: i16) -> i16 {
    match e {
        ResponseError::ProducerFenced if version < since => {
            ResponseError::InvalidProducerEpoch.code()
        }
        e => e.code(),
    }
}

pub fn str_bytes(s: &str) -> StrBytes {
    StrBytes::from_string(s.to_string())
}

/// Runs `op`, of `n` items, on the controller: one outcome per item, NOT_CONTROLLER for each
/// when the controller shard is stopping.
pub async fn submit_op(
    shard: &Rc<Shard>,
    op: crate::controller::ControllerOp,
    n: usize,
) -> Vec<crate::controller::Outcome> {
    crate::controller::submit(shard, op)
        .await
        .unwrap_or_else(|_| {
            let gone = ResponseError::NotController.code();
            vec![(gone, Some("broker is shutting down".into())); n]
        })
}

/// Runs credential and ACL changes on the controller: one outcome each.
pub async fn submit_security(
    shard: &Rc<Shard>,
    changes: Vec<crate::controller::security_ops::SecurityChange>,
) -> Vec<crate::controller::Outcome> {
    match changes.len() {
        0 => Vec::new(),
        n => submit_op(shard, crate::controller::ControllerOp::Security(changes), n).await,
    }
}

/// Runs on the controller the items the authorizer lets through (`allowed`, one flag per
/// item), as the operation `op` builds from them; the others are answered `refused`. One
/// outcome per item, in order; NOT_CONTROLLER for each when the controller shard is stopping.
pub async fn submit_allowed<T>(
    shard: &Rc<Shard>,
    items: Vec<T>,
    allowed: &[bool],
    op: impl FnOnce(Vec<T>) -> crate::controller::ControllerOp,
    refused: ResponseError,
) -> Vec<crate::controller::Outcome> {
    assert_eq!(items.len(), allowed.len(), "one flag per item");
    let permitted: Vec<T> = items
        .into_iter()
        .zip(allowed)
        .filter_map(|(t, ok)| ok.then_some(t))
        .collect();
    let n = permitted.len();
    let mut done = match n {
        0 => Vec::new(),
        _ => submit_op(shard, op(permitted), n).await,
    }
    .into_iter();
    allowed
        .iter()
        .map(|ok| match ok {
            true => done.next().expect("one outcome per permitted item"),
            false => (refused.code(), None),
        })
        .collect()
}
