//! Metadata: brokers (this one, as `node_id`), and topics with their partitions, all led by
//! this broker: leader, replicas and ISR name `node_id`, and the controller is `node_id` too.
//! With auto-creation on (Kafka's default), unknown topics asked for by name are created.

use super::{authorized_operations, decode, encode, str_bytes, Reply};
use crate::controller::{self, ControllerOp, NewTopic};
use crate::shard::Shard;
use crate::storage::catalog::{Catalog, TopicMeta, SINGLE_NODE_LEADER_EPOCH};
use bytes::Bytes;
use kafka_protocol::messages::metadata_response::{
    MetadataResponseBroker, MetadataResponsePartition, MetadataResponseTopic,
};
use kafka_protocol::messages::{BrokerId, MetadataRequest, MetadataResponse, TopicName};
use kafka_protocol::ResponseError;
use std::rc::Rc;

pub async fn handle(shard: &Rc<Shard>, version: i16, body: Bytes) -> anyhow::Result<Reply> {
    let req: MetadataRequest = decode(body, version)?;
    // None: every topic. v0 used an empty list for that.
    let requested: Option<Vec<(Option<String>, uuid::Uuid)>> = match &req.topics {
        None => None,
        Some(list) if list.is_empty() && version == 0 => None,
        Some(list) => Some(
            list.iter()
                .map(|t| (t.name.as_ref().map(|n| n.0.to_string()), t.topic_id))
                .collect(),
        ),
    };
    let auto_create =
        shard.config.auto_create_topics && (version < 4 || req.allow_auto_topic_creation);
    if let (true, Some(list)) = (auto_create, &requested) {
        let catalog = shard.catalog();
        let missing: Vec<NewTopic> = list
            .iter()
            .filter_map(|(n, _)| n.as_ref())
            .filter(|n| {
                !catalog.topics.contains_key(*n)
                    && crate::storage::catalog::validate_topic_name(n).is_ok()
            })
            .map(|n| NewTopic {
                name: n.clone(),
                partitions: -1,
                replication_factor: -1,
                configs: Vec::new(),
            })
            .collect();
        if !missing.is_empty() {
            // Outcomes are reflected in the catalog read below; a race with another creator
            // (TOPIC_ALREADY_EXISTS) is success here.
            let op = ControllerOp::CreateTopics {
                topics: missing,
                validate_only: false,
            };
            let _ = controller::submit(shard, op).await;
        }
    }
    let catalog = shard.catalog();
    let node = shard.config.node_id;
    let mut topics: Vec<MetadataResponseTopic> = match requested {
        None => catalog
            .topics
            .values()
            .map(|t| topic_entry(t, node, version))
            .collect(),
        Some(list) => list
            .iter()
            .map(|(name, id)| lookup(&catalog, name.as_deref(), id, node, version))
            .collect(),
    };
    if version >= 8 && req.include_topic_authorized_operations {
        for t in topics.iter_mut().filter(|t| t.error_code == 0) {
            t.topic_authorized_operations = authorized_operations::topic();
        }
    }
    let (host, port) = shard.config.advertised();
    let mut resp = MetadataResponse::default()
        .with_brokers(vec![MetadataResponseBroker::default()
            .with_node_id(BrokerId(shard.config.node_id))
            .with_host(str_bytes(&host))
            .with_port(port)])
        .with_topics(topics);
    if version >= 1 {
        resp = resp.with_controller_id(BrokerId(shard.config.node_id));
    }
    if version >= 2 {
        resp = resp.with_cluster_id(Some(str_bytes(&catalog.cluster_id)));
    }
    if (8..=10).contains(&version) && req.include_cluster_authorized_operations {
        resp.cluster_authorized_operations = authorized_operations::cluster();
    }
    encode(&resp, version)
}

fn lookup(
    catalog: &Catalog,
    name: Option<&str>,
    id: &uuid::Uuid,
    node: i32,
    version: i16,
) -> MetadataResponseTopic {
    let found = match name {
        Some(n) => catalog.topics.get(n),
        None => catalog.by_id.get(id.as_bytes()),
    };
    match found {
        Some(t) => topic_entry(t, node, version),
        None => {
            // Kafka answers a name no topic can have INVALID_TOPIC_EXCEPTION, which clients
            // treat as final; UNKNOWN_TOPIC_OR_PARTITION would have them retry until their
            // messages time out.
            let code = match name {
                None => ResponseError::UnknownTopicId,
                Some(n) if crate::storage::catalog::validate_topic_name(n).is_err() => {
                    ResponseError::InvalidTopicException
                }
                Some(_) => ResponseError::UnknownTopicOrPartition,
            };
            let mut t = MetadataResponseTopic::default()
                .with_error_code(code.code())
                .with_name(name.map(|n| TopicName(str_bytes(n))));
            if version >= 10 {
                t = t.with_topic_id(*id);
            }
            t
        }
    }
}

/// A topic's entry: every partition led by this broker, its only replica.
fn topic_entry(t: &TopicMeta, node: i32, version: i16) -> MetadataResponseTopic {
    let partitions = (0..t.record.partitions as i32)
        .map(|p| {
            let mut e = MetadataResponsePartition::default()
                .with_partition_index(p)
                .with_leader_id(BrokerId(node))
                .with_replica_nodes(vec![BrokerId(node)])
                .with_isr_nodes(vec![BrokerId(node)]);
            if version >= 7 {
                e = e.with_leader_epoch(SINGLE_NODE_LEADER_EPOCH);
            }
            e
        })
        .collect();
    let mut entry = MetadataResponseTopic::default()
        .with_name(Some(TopicName(str_bytes(&t.record.name))))
        .with_partitions(partitions);
    if version >= 1 {
        entry = entry.with_is_internal(t.record.name.starts_with("__"));
    }
    if version >= 10 {
        entry = entry.with_topic_id(uuid::Uuid::from_bytes(t.record.id));
    }
    entry
}
