//! Metadata: the brokers, the active controller, and topics with each partition's leader,
//! replicas and ISR. On a single node, this broker is all of them. In a cluster, all from this
//! node's applied metadata: the live (unfenced) brokers and the assignments the controller made.
//! With auto-creation on (Kafka's default), unknown topics asked for by name are created.

use super::authorize::{self, Caller};
use super::Services;
use super::{authorized_operations, decode, encode, str_bytes, Reply};
use crate::config::ListenerConfig;
use crate::controller::{self, ControllerOp, NewTopic};
use crate::security::acl::{Operation, ResourceType::Cluster, ResourceType::Topic, CLUSTER_NAME};
use crate::shard::Shard;
use crate::storage::catalog::{Catalog, TopicMeta, SINGLE_NODE_LEADER_EPOCH};
use bytes::Bytes;
use kafka_protocol::messages::metadata_response::{
    MetadataResponseBroker, MetadataResponsePartition, MetadataResponseTopic,
};
use kafka_protocol::messages::{BrokerId, MetadataRequest, MetadataResponse, TopicName};
use kafka_protocol::ResponseError;

pub async fn handle(
    services: &Services,
    caller: &Caller,
    version: i16,
    body: Bytes,
) -> anyhow::Result<Reply> {
    let shard = &services.shard;
    let req: MetadataRequest = decode(body, version)?;
    // None: every topic. v0 used an empty list for that. A topic asked for by id is looked up
    // by its id alone, as Kafka does: the Java AdminClient sends an empty name beside it.
    let requested: Option<Vec<(Option<String>, uuid::Uuid)>> = match &req.topics {
        None => None,
        Some(list) if list.is_empty() && version == 0 => None,
        Some(list) => Some(
            list.iter()
                .map(|t| match t.topic_id.is_nil() {
                    true => (t.name.as_ref().map(|n| n.0.to_string()), t.topic_id),
                    false => (None, t.topic_id),
                })
                .collect(),
        ),
    };
    let auto_create =
        shard.config.auto_create_topics && (version < 4 || req.allow_auto_topic_creation);
    if let (true, Some(list)) = (auto_create, &requested) {
        create_missing(services, caller, list).await;
    }
    let catalog = shard.catalog();
    let mut topics = topic_entries(shard, caller, &catalog, requested, version);
    if version >= 8 && req.include_topic_authorized_operations {
        for t in topics.iter_mut().filter(|t| t.error_code == 0) {
            t.topic_authorized_operations = authorized_operations::topic();
        }
    }
    let brokers = brokers(shard, &catalog, &caller.listener)
        .into_iter()
        .map(|(id, host, port, rack)| {
            let mut b = MetadataResponseBroker::default()
                .with_node_id(BrokerId(id))
                .with_host(str_bytes(&host))
                .with_port(port);
            if version >= 1 {
                b = b.with_rack(rack.as_deref().map(str_bytes));
            }
            b
        })
        .collect();
    let mut resp = MetadataResponse::default()
        .with_brokers(brokers)
        .with_topics(topics);
    if version >= 1 {
        resp = resp.with_controller_id(BrokerId(catalog.here.controller_id));
    }
    if version >= 2 {
        resp = resp.with_cluster_id(Some(str_bytes(&catalog.cluster_id)));
    }
    if (8..=10).contains(&version) && req.include_cluster_authorized_operations {
        resp.cluster_authorized_operations = authorized_operations::cluster();
    }
    encode(&resp, version)
}

/// The topics' entries: every topic the caller may describe, or the named ones (a named one it
/// may not describe is TOPIC_AUTHORIZATION_FAILED, whether it exists or not).
fn topic_entries(
    shard: &Shard,
    caller: &Caller,
    catalog: &Catalog,
    requested: Option<Vec<(Option<String>, uuid::Uuid)>>,
    version: i16,
) -> Vec<MetadataResponseTopic> {
    let describable = |t: &str| authorize::topic(shard, caller, Operation::Describe, t);
    let Some(list) = requested else {
        // Every topic: those the caller may not describe are left out, not refused.
        let listed = |t: &str| authorize::permits(shard, caller, Operation::Describe, Topic, t);
        return catalog
            .topics
            .values()
            .filter(|t| listed(&t.name))
            .map(|t| topic_entry(catalog, t, version))
            .collect();
    };
    list.iter()
        .map(|(name, id)| {
            let mut entry = lookup(catalog, name.as_deref(), id, version);
            let named = entry.name.as_ref().map(|n| n.0.to_string());
            if named.is_some_and(|n| !describable(&n)) {
                // Nothing of the topic goes out, not even its id (as from Kafka).
                entry.error_code = ResponseError::TopicAuthorizationFailed.code();
                entry.partitions.clear();
                entry.topic_id = uuid::Uuid::nil();
            }
            entry
        })
        .collect()
}

/// Creates the named topics that do not exist (`auto_create_topics`), those the caller may
/// create (CREATE on the cluster or the topic). Outcomes show in the catalog read after; a race
/// with another creator (TOPIC_ALREADY_EXISTS) is success here.
async fn create_missing(
    services: &Services,
    caller: &Caller,
    list: &[(Option<String>, uuid::Uuid)],
) {
    let shard = &services.shard;
    let catalog = shard.catalog();
    let anywhere = authorize::permits(shard, caller, Operation::Create, Cluster, CLUSTER_NAME);
    let missing: Vec<NewTopic> = list
        .iter()
        .filter_map(|(n, _)| n.as_ref())
        .filter(|n| {
            !catalog.topics.contains_key(*n)
                && crate::storage::catalog::validate_topic_name(n).is_ok()
                && (anywhere || authorize::topic(shard, caller, Operation::Create, n))
        })
        .map(|n| NewTopic {
            name: n.clone(),
            partitions: -1,
            replication_factor: -1,
            assignments: Vec::new(),
            configs: Vec::new(),
        })
        .collect();
    if !missing.is_empty() {
        let op = ControllerOp::CreateTopics {
            topics: missing,
            validate_only: false,
        };
        let _ = controller::submit(&services.controllers, op).await;
    }
}

/// The brokers clients of `listener` are told about: (node id, host, port, rack). This one
/// alone on a single node, at the listener's advertised address; in a cluster, the live
/// registered brokers at their listener of the same name (one without it is left out, as
/// Kafka does).
pub fn brokers(
    shard: &Shard,
    catalog: &Catalog,
    listener: &ListenerConfig,
) -> Vec<(i32, String, i32, Option<String>)> {
    if !catalog.is_clustered() {
        let (host, port) = listener.advertised();
        return vec![(shard.config.node_id, host, port, shard.config.rack.clone())];
    }
    catalog
        .listed_brokers()
        .filter_map(|b| {
            let e = b.endpoint(&listener.name)?;
            Some((b.node_id, e.host.clone(), e.port, b.rack.clone()))
        })
        .collect()
}

fn lookup(
    catalog: &Catalog,
    name: Option<&str>,
    id: &uuid::Uuid,
    version: i16,
) -> MetadataResponseTopic {
    let found = match name {
        Some(n) => catalog.topics.get(n),
        None => catalog.by_id.get(id.as_bytes()),
    };
    match found {
        Some(t) => topic_entry(catalog, t, version),
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

/// A topic's entry: each partition's leader, replicas and ISR (on a single node, this broker
/// alone). A partition without a leader is LEADER_NOT_AVAILABLE, which clients retry.
fn topic_entry(catalog: &Catalog, t: &TopicMeta, version: i16) -> MetadataResponseTopic {
    let node = catalog.here.node_id;
    let partitions = (0..t.record.partitions as i32)
        .map(|p| {
            let (leader, epoch, replicas, isr) = match t.assignment(p) {
                Some(a) => (a.leader, a.leader_epoch, a.replicas.clone(), a.isr.clone()),
                None => (node, SINGLE_NODE_LEADER_EPOCH, vec![node], vec![node]),
            };
            let ids = |v: Vec<i32>| v.into_iter().map(BrokerId).collect();
            let mut e = MetadataResponsePartition::default()
                .with_partition_index(p)
                .with_leader_id(BrokerId(leader))
                .with_replica_nodes(ids(replicas))
                .with_isr_nodes(ids(isr));
            if leader < 0 {
                e = e.with_error_code(ResponseError::LeaderNotAvailable.code());
            }
            if version >= 7 {
                e = e.with_leader_epoch(epoch);
            }
            e
        })
        .collect();
    let mut entry = MetadataResponseTopic::default()
        .with_name(Some(TopicName(str_bytes(&t.record.name))))
        .with_partitions(partitions);
    if version >= 1 {
        entry = entry.with_is_internal(crate::storage::catalog::is_internal(&t.record.name));
    }
    if version >= 10 {
        entry = entry.with_topic_id(uuid::Uuid::from_bytes(t.record.id));
    }
    entry
}
