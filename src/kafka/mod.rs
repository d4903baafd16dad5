//! Kafka API handlers, one file per API, and the dispatch table. Each handler decodes its
//! request, routes per-partition work to the owning shards, and encodes the response body.

pub mod api_versions;
pub mod controller;
pub mod create_partitions;
pub mod create_topics;
pub mod delete_groups;
pub mod delete_records;
pub mod delete_topics;
pub mod describe_configs;
pub mod describe_groups;
pub mod fetch;
pub mod find_coordinator;
pub mod heartbeat;
pub mod init_producer_id;
pub mod join_group;
pub mod leave_group;
pub mod list_groups;
pub mod list_offsets;
pub mod metadata;
pub mod offset_commit;
pub mod offset_delete;
pub mod offset_fetch;
pub mod produce;
pub mod sync_group;

use crate::protocol::chunk::Chunk;
use crate::protocol::frame::RequestHeader;
use crate::shard::Shard;
use crate::storage::catalog::Catalog;
use bytes::{Bytes, BytesMut};
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
    (ApiKey::ListOffsets, 1, 6),
    (ApiKey::Metadata, 0, 12),
    (ApiKey::ApiVersions, 0, 3),
    (ApiKey::CreateTopics, 2, 7),
    (ApiKey::DeleteTopics, 1, 6),
    (ApiKey::DescribeConfigs, 1, 4),
    (ApiKey::CreatePartitions, 0, 3),
    (ApiKey::FindCoordinator, 0, 4),
    (ApiKey::JoinGroup, 0, 9),
    (ApiKey::SyncGroup, 0, 5),
    (ApiKey::Heartbeat, 0, 4),
    (ApiKey::LeaveGroup, 0, 5),
    (ApiKey::OffsetCommit, 2, 9),
    (ApiKey::OffsetFetch, 1, 8),
    (ApiKey::DescribeGroups, 0, 5),
    (ApiKey::ListGroups, 0, 4),
    (ApiKey::DeleteGroups, 0, 2),
    (ApiKey::OffsetDelete, 0, 0),
    (ApiKey::InitProducerId, 0, 4),
    (ApiKey::DeleteRecords, 0, 2),
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
}

/// Runs the handler for a request whose version was checked by `supported`. An Err means the
/// request could not be decoded: the connection is closed, as Kafka does.
pub async fn dispatch(
    shard: &Rc<Shard>,
    header: &RequestHeader,
    body: Bytes,
    peer_host: &str,
) -> anyhow::Result<Reply> {
    let v = header.api_version;
    let client_id = header.client_id.as_deref().unwrap_or_default();
    match header.api_key {
        ApiKey::Produce => produce::handle(shard, v, body).await,
        ApiKey::Fetch => fetch::handle(shard, v, body).await,
        ApiKey::ListOffsets => list_offsets::handle(shard, v, body).await,
        ApiKey::Metadata => metadata::handle(shard, v, body).await,
        ApiKey::ApiVersions => api_versions::handle(v),
        ApiKey::CreateTopics => create_topics::handle(shard, v, body).await,
        ApiKey::DeleteTopics => delete_topics::handle(shard, v, body).await,
        ApiKey::DescribeConfigs => describe_configs::handle(shard, v, body).await,
        ApiKey::CreatePartitions => create_partitions::handle(shard, v, body).await,
        ApiKey::FindCoordinator => find_coordinator::handle(shard, v, body).await,
        ApiKey::JoinGroup => join_group::handle(shard, v, body, client_id, peer_host).await,
        ApiKey::SyncGroup => sync_group::handle(shard, v, body).await,
        ApiKey::Heartbeat => heartbeat::handle(shard, v, body).await,
        ApiKey::LeaveGroup => leave_group::handle(shard, v, body).await,
        ApiKey::OffsetCommit => offset_commit::handle(shard, v, body).await,
        ApiKey::OffsetFetch => offset_fetch::handle(shard, v, body).await,
        ApiKey::DescribeGroups => describe_groups::handle(shard, v, body).await,
        ApiKey::ListGroups => list_groups::handle(shard, v, body).await,
        ApiKey::DeleteGroups => delete_groups::handle(shard, v, body).await,
        ApiKey::OffsetDelete => offset_delete::handle(shard, v, body).await,
        ApiKey::InitProducerId => init_producer_id::handle(shard, v, body).await,
        ApiKey::DeleteRecords => delete_records::handle(shard, v, body).await,
        other => anyhow::bail!("no handler for {other:?}"),
    }
}

/// Where a requested partition's answer comes from: the item at this index of the work sent to
/// the owning shards, or an error found before routing.
pub type Slot = Result<usize, ResponseError>;

/// The partitions a request names, per topic in request order, each with its slot.
pub type Layout = Vec<(TopicName, Vec<(i32, Slot)>)>;

/// Checks each requested partition against the catalog and turns the known ones into items for
/// their owning shards: `make(topic, partition)` builds one. Unknown topics and partitions get
/// UNKNOWN_TOPIC_OR_PARTITION without leaving this shard.
pub fn route_partitions<'a, P: 'a, T>(
    catalog: &Catalog,
    topics: impl IntoIterator<Item = (&'a TopicName, &'a [P])>,
    index: impl Fn(&P) -> i32,
    make: impl Fn(&str, &P) -> T,
) -> (Vec<T>, Layout) {
    let mut items = Vec::new();
    let layout = topics
        .into_iter()
        .map(|(name, partitions)| {
            let known = catalog.topics.get(name.0.as_str());
            let row = partitions
                .iter()
                .map(|p| {
                    let i = index(p);
                    let slot = match known {
                        Some(t) if (0..t.record.partitions as i32).contains(&i) => {
                            items.push(make(name.0.as_str(), p));
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
    (items, layout)
}

pub fn decode<M: Decodable>(mut body: Bytes, version: i16) -> anyhow::Result<M> {
    M::decode(&mut body, version)
}

pub fn encode<M: Encodable>(message: &M, version: i16) -> anyhow::Result<Reply> {
    let mut buf = BytesMut::new();
    message.encode(&mut buf, version)?;
    Ok(Reply::Body(vec![buf.freeze().into()]))
}

pub fn str_bytes(s: &str) -> StrBytes {
    StrBytes::from_string(s.to_string())
}
