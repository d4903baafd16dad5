//! WriteTxnMarkers v1: a transaction coordinator on another node asks this node, the leader of
//! the partitions, to write the markers that end a transaction there. Each partition's marker
//! is answered once committed (as acks=all), so the coordinator completes the transaction only
//! after every marker is durable; a partition led elsewhere answers NOT_LEADER_OR_FOLLOWER and
//! the coordinator tries again at its new leader. Only brokers send it.

use super::authorize::{self, Caller};
use super::Services;
use super::{decode, encode, per_partition, Reply};
use crate::security::acl::Operation;
use crate::txn::markers::{Marker, MarkersOnOwner};
use bytes::Bytes;
use kafka_protocol::messages::write_txn_markers_response::{
    WritableTxnMarkerPartitionResult, WritableTxnMarkerResult, WritableTxnMarkerTopicResult,
};
use kafka_protocol::messages::{WriteTxnMarkersRequest, WriteTxnMarkersResponse};
use kafka_protocol::ResponseError;

pub async fn handle(
    services: &Services,
    caller: &Caller,
    version: i16,
    body: Bytes,
) -> anyhow::Result<Reply> {
    let shard = &services.shard;
    let req: WriteTxnMarkersRequest = decode(body, version)?;
    if crate::rpc::cut_off() {
        anyhow::bail!("a coordinator's markers while cut off from the other nodes (fault hook)");
    }
    // Only brokers write markers: CLUSTER_ACTION, else every partition is refused.
    let allowed = authorize::cluster(shard, caller, Operation::ClusterAction);
    let writes = req.markers.iter().map(|m| async move {
        let listed = m
            .topics
            .iter()
            .map(|t| (&t.name, t.partition_indexes.as_slice()));
        let outcomes = match allowed {
            true => {
                per_partition(
                    &services.txns,
                    (listed, |_: &str| true),
                    |p| *p,
                    |tp, _| Marker {
                        tp,
                        producer_id: m.producer_id.0,
                        producer_epoch: m.producer_epoch,
                        commit: m.transaction_result,
                        coordinator_epoch: m.coordinator_epoch,
                    },
                    MarkersOnOwner,
                    |e: ResponseError| e.code(),
                )
                .await
            }
            false => listed
                .map(|(name, ps)| {
                    let denied = ResponseError::ClusterAuthorizationFailed.code();
                    (name.clone(), ps.iter().map(|p| (*p, denied)).collect())
                })
                .collect(),
        };
        let topics = outcomes
            .into_iter()
            .map(|(name, row)| {
                let partitions = row
                    .into_iter()
                    .map(|(p, code)| {
                        WritableTxnMarkerPartitionResult::default()
                            .with_partition_index(p)
                            .with_error_code(code)
                    })
                    .collect();
                WritableTxnMarkerTopicResult::default()
                    .with_name(name)
                    .with_partitions(partitions)
            })
            .collect();
        WritableTxnMarkerResult::default()
            .with_producer_id(m.producer_id)
            .with_topics(topics)
    });
    let markers = futures::future::join_all(writes).await;
    encode(
        &WriteTxnMarkersResponse::default().with_markers(markers),
        version,
    )
}
