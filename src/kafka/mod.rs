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
pub mod describe_client_quotas;
pub mod describe_cluster;
pub mod describe_configs;
pub mod describe_groups;
pub mod describe_log_dirs;
pub mod describe_producers;
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
pub mod services;
pub mod sync_group;
pub mod txn_offset_commit;
pub mod update_features;
pub mod write_txn_markers;

pub use authorize::Caller;
pub use services::Services;

use crate::controller::Controllers;
use crate::partition::TopicPartition;
use crate::protocol;
use crate::protocol::chunk::Chunk;
use crate::protocol::frame::RequestHeader;
use crate::shard::mesh::{Peer, Request};
use bytes::{Bytes, BytesMut};
use futures::future::LocalBoxFuture;
use kafka_protocol::messages::{ApiKey, TopicName};
use kafka_protocol::protocol::{Decodable, Encodable, StrBytes};
use kafka_protocol::ResponseError;
use std::rc::Rc;

/// The served APIs as one list: each key, the versions served (ApiVersions advertises exactly
/// these) and its handler. `SUPPORTED` and `dispatch` are both made from it, so an API cannot be
/// advertised without a handler or handled at a version not advertised.
macro_rules! served_apis {
    (($services:ident, $shard:ident, $caller:ident, $v:ident, $body:ident, $client_id:ident)
     $($key:ident ($lo:expr, $hi:expr) => $handle:expr,)*) => {
        /// The versions served, per API.
        pub const SUPPORTED: &[(ApiKey, i16, i16)] = &[$((ApiKey::$key, $lo, $hi),)*];

        /// Runs the handler for a request whose version was checked by `supported`. An Err
        /// means the request could not be decoded: the connection is closed, as Kafka does.
        pub async fn dispatch(
            $services: &Rc<Services>,
            header: &RequestHeader,
            $body: Bytes,
            $caller: &Caller,
        ) -> anyhow::Result<Reply> {
            let $shard = &$services.shard;
            let $v = header.api_version;
            let $client_id = header.client_id.as_deref().unwrap_or_default();
            match header.api_key {
                $(ApiKey::$key => $handle,)*
                other => anyhow::bail!("no handler for {other:?}"),
            }
        }
    };
}

served_apis! {
    (services, shard, caller, v, body, client_id)
    Produce (protocol::produce::MIN_VERSION, protocol::produce::MAX_VERSION) =>
        produce::handle(services, caller, v, body).await,
    Fetch (protocol::fetch::MIN_VERSION, protocol::fetch::MAX_VERSION) =>
        fetch::handle(services, caller, v, body).await,
    ListOffsets (1, 10) => list_offsets::handle(shard, caller, v, body).await,
    Metadata (0, 13) => metadata::handle(services, caller, v, body).await,
    ApiVersions (0, api_versions::MAX_VERSION) => api_versions::handle(shard, v, body),
    CreateTopics (2, 7) => create_topics::handle(services, caller, v, body).await,
    DeleteTopics (1, 6) => delete_topics::handle(services, caller, v, body).await,
    DescribeConfigs (1, 4) => describe_configs::handle(shard, caller, v, body).await,
    CreatePartitions (0, 3) => create_partitions::handle(services, caller, v, body).await,
    FindCoordinator (0, 6) => find_coordinator::handle(services, caller, v, body).await,
    JoinGroup (0, 9) => join_group::handle(services, caller, v, body, client_id).await,
    SyncGroup (0, 5) => sync_group::handle(services, caller, v, body).await,
    Heartbeat (0, 4) => heartbeat::handle(services, caller, v, body).await,
    LeaveGroup (0, 5) => leave_group::handle(services, caller, v, body).await,
    OffsetCommit (2, 9) => offset_commit::handle(services, caller, v, body).await,
    OffsetFetch (1, 9) => offset_fetch::handle(services, caller, v, body).await,
    DescribeGroups (0, 6) => describe_groups::handle(services, caller, v, body).await,
    ListGroups (0, 5) => list_groups::handle(services, caller, v, body).await,
    DeleteGroups (0, 3) => delete_groups::handle(services, caller, v, body).await,
    OffsetDelete (0, 0) => offset_delete::handle(services, caller, v, body).await,
    InitProducerId (0, 5) => init_producer_id::handle(services, caller, v, body).await,
    AddPartitionsToTxn (0, 5) => add_partitions_to_txn::handle(services, caller, v, body).await,
    AddOffsetsToTxn (0, 4) => add_offsets_to_txn::handle(services, caller, v, body).await,
    EndTxn (0, 5) => end_txn::handle(services, caller, v, body).await,
    TxnOffsetCommit (0, 5) => txn_offset_commit::handle(services, caller, v, body).await,
    WriteTxnMarkers (1, 1) => write_txn_markers::handle(services, caller, v, body).await,
    DescribeTransactions (0, 0) => describe_transactions::handle(services, caller, v, body).await,
    ListTransactions (0, 2) => list_transactions::handle(services, caller, v, body).await,
    DescribeProducers (0, 0) => describe_producers::handle(shard, caller, v, body).await,
    DescribeLogDirs (1, 4) => describe_log_dirs::handle(shard, caller, v, body).await,
    DescribeClientQuotas (0, 1) => describe_client_quotas::handle(shard, caller, v, body),
    DeleteRecords (0, 2) => delete_records::handle(shard, caller, v, body).await,
    AlterConfigs (0, 2) => alter_configs::handle(services, caller, v, body).await,
    IncrementalAlterConfigs (0, 1) =>
        incremental_alter_configs::handle(services, caller, v, body).await,
    DescribeCluster (0, 2) => describe_cluster::handle(shard, caller, v, body).await,
    DescribeQuorum (0, 1) => describe_quorum::handle(services, caller, v, body).await,
    OffsetForLeaderEpoch (0, 4) => offset_for_leader_epoch::handle(shard, caller, v, body).await,
    ElectLeaders (0, 2) => elect_leaders::handle(services, caller, v, body).await,
    AlterPartitionReassignments (0, 1) =>
        partition_reassignments::alter(services, caller, v, body).await,
    ListPartitionReassignments (0, 0) =>
        partition_reassignments::list(shard, caller, v, body).await,
    // They change the connection's state: the connection serves them (`server/authenticate.rs`).
    SaslHandshake (0, 1) => anyhow::bail!("SaslHandshake is the connection's to serve"),
    SaslAuthenticate (0, 2) => anyhow::bail!("SaslAuthenticate is the connection's to serve"),
    DescribeUserScramCredentials (0, 0) =>
        describe_user_scram_credentials::handle(shard, caller, v, body),
    AlterUserScramCredentials (0, 0) =>
        alter_user_scram_credentials::handle(services, caller, v, body).await,
    CreateAcls (0, 3) => create_acls::handle(services, caller, v, body).await,
    DescribeAcls (0, 3) => describe_acls::handle(shard, caller, v, body),
    DeleteAcls (0, 3) => delete_acls::handle(services, caller, v, body).await,
    UpdateFeatures (0, 2) => update_features::handle(services, caller, v, body).await,
}

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
pub async fn per_partition<'a, C: Peer, P: 'a, T, R: Clone + 'static, Q>(
    on: &Rc<C>,
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
    Q: Request<C, Reply = Vec<R>>,
{
    let shard = on.home();
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
                    let slot = match shard.locate(&catalog, known.map(|t| &**t), i, false) {
                        _ if denied => Err(ResponseError::TopicAuthorizationFailed),
                        Ok((owner, tp)) => {
                            items.push((owner, make(tp, p)));
                            Ok(items.len() - 1)
                        }
                        Err(e) => Err(e),
                    };
                    (i, slot)
                })
                .collect();
            (name.clone(), row)
        })
        .collect();
    let outcomes = on
        .scatter(items, request, || {
            failed(ResponseError::NotLeaderOrFollower)
        })
        .await;
    layout
        .into_iter()
        .map(|(name, row)| {
            let row = row
                .into_iter()
                .map(|(i, slot)| (i, slot.map_or_else(&failed, |k| outcomes[k].clone())))
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
    controllers: &Rc<Controllers>,
    op: crate::controller::ControllerOp,
    n: usize,
) -> Vec<crate::controller::Outcome> {
    crate::controller::submit(controllers, op)
        .await
        .unwrap_or_else(|_| {
            let gone = ResponseError::NotController.code();
            vec![(gone, Some("broker is shutting down".into())); n]
        })
}

/// Runs credential and ACL changes on the controller: one outcome each.
pub async fn submit_security(
    controllers: &Rc<Controllers>,
    changes: Vec<crate::controller::security_ops::SecurityChange>,
) -> Vec<crate::controller::Outcome> {
    match changes.len() {
        0 => Vec::new(),
        n => {
            submit_op(
                controllers,
                crate::controller::ControllerOp::Security(changes),
                n,
            )
            .await
        }
    }
}

/// Runs on the controller the items the authorizer lets through (`allowed`, one flag per
/// item), as the operation `op` builds from them; the others are answered `refused`. One
/// outcome per item, in order; NOT_CONTROLLER for each when the controller shard is stopping.
pub async fn submit_allowed<T>(
    controllers: &Rc<Controllers>,
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
        _ => submit_op(controllers, op(permitted), n).await,
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
