//! OffsetFetch: one group (v1–v7) or several (v8).

use super::authorize::{self, Caller};
use super::Services;
use super::{decode, encode, str_bytes, Reply};
use crate::group::{ops, route, OffsetEntry};
use crate::security::acl::{Operation, ResourceType::Topic};
use bytes::Bytes;
use kafka_protocol::messages::offset_fetch_response::{
    OffsetFetchResponseGroup, OffsetFetchResponsePartition, OffsetFetchResponsePartitions,
    OffsetFetchResponseTopic, OffsetFetchResponseTopics,
};
use kafka_protocol::messages::{GroupId, OffsetFetchRequest, OffsetFetchResponse, TopicName};
use kafka_protocol::ResponseError;
use std::collections::BTreeMap;

/// A committed offset and its partition's error code.
type Fetched = (OffsetEntry, i16);

/// A group's committed offsets: GROUP_AUTHORIZATION_FAILED without DESCRIBE on the group; of
/// topics the caller may not describe, TOPIC_AUTHORIZATION_FAILED where named and nothing where
/// all were asked for (Kafka's rule).
async fn fetch(
    services: &Services,
    caller: &Caller,
    group: &str,
    partitions: Option<Vec<(String, i32)>>,
    require_stable: bool,
) -> Result<Vec<Fetched>, i16> {
    let shard = &services.shard;
    if !authorize::group(shard, caller, Operation::Describe, group) {
        return Err(ResponseError::GroupAuthorizationFailed.code());
    }
    let named = partitions.is_some();
    let fetch = ops::FetchOffsets {
        group: group.to_string(),
        partitions,
        require_stable,
    };
    let mut entries = route(&services.groups, fetch).await?;
    let mut describable = std::collections::HashMap::new();
    entries.retain_mut(|((topic, _, offset, _, _), code)| {
        let allowed = *describable
            .entry(topic.clone())
            .or_insert_with(|| match named {
                true => authorize::topic(shard, caller, Operation::Describe, topic),
                // All of the group's topics: the others are left out, not refused.
                false => authorize::permits(shard, caller, Operation::Describe, Topic, topic),
            });
        if !allowed && named {
            (*offset, *code) = (-1, ResponseError::TopicAuthorizationFailed.code());
        }
        allowed || named
    });
    Ok(entries)
}

/// The (topic, partition) pairs a request names; the v8 and older layouts are different types
/// holding the same two fields.
fn requested<'a>(
    topics: impl Iterator<Item = (&'a TopicName, &'a Vec<i32>)>,
) -> Vec<(String, i32)> {
    topics
        .flat_map(|(name, partitions)| partitions.iter().map(|p| (name.0.to_string(), *p)))
        .collect()
}

/// Groups entries by topic, keeping their order.
fn by_topic(entries: Vec<Fetched>) -> BTreeMap<String, Vec<Fetched>> {
    let mut out: BTreeMap<String, Vec<Fetched>> = BTreeMap::new();
    for e in entries {
        out.entry(e.0 .0.clone()).or_default().push(e);
    }
    out
}

pub async fn handle(
    services: &Services,
    caller: &Caller,
    version: i16,
    body: Bytes,
) -> anyhow::Result<Reply> {
    let req: OffsetFetchRequest = decode(body, version)?;
    if version >= 8 {
        return handle_groups(services, caller, version, req).await;
    }
    handle_group(services, caller, version, req).await
}

/// v8+: several groups in one request.
async fn handle_groups(
    services: &Services,
    caller: &Caller,
    version: i16,
    req: OffsetFetchRequest,
) -> anyhow::Result<Reply> {
    let mut groups = Vec::with_capacity(req.groups.len());
    for g in &req.groups {
        let partitions = g
            .topics
            .as_ref()
            .map(|ts| requested(ts.iter().map(|t| (&t.name, &t.partition_indexes))));
        let group = g.group_id.0.as_str();
        let fetched = fetch(services, caller, group, partitions, req.require_stable).await;
        let group = match fetched {
            Ok(entries) => OffsetFetchResponseGroup::default()
                .with_group_id(g.group_id.clone())
                .with_topics(
                    by_topic(entries)
                        .into_iter()
                        .map(|(t, es)| {
                            OffsetFetchResponseTopics::default()
                                .with_name(TopicName(str_bytes(&t)))
                                .with_partitions(
                                    es.into_iter()
                                        .map(|((_, p, o, e, m), code)| {
                                            OffsetFetchResponsePartitions::default()
                                                .with_partition_index(p)
                                                .with_committed_offset(o)
                                                .with_committed_leader_epoch(e)
                                                .with_metadata(Some(str_bytes(&m)))
                                                .with_error_code(code)
                                        })
                                        .collect(),
                                )
                        })
                        .collect(),
                ),
            Err(c) => OffsetFetchResponseGroup::default()
                .with_group_id(g.group_id.clone())
                .with_error_code(c),
        };
        groups.push(group);
    }
    encode(&OffsetFetchResponse::default().with_groups(groups), version)
}

/// v1..=7: one group.
async fn handle_group(
    services: &Services,
    caller: &Caller,
    version: i16,
    req: OffsetFetchRequest,
) -> anyhow::Result<Reply> {
    let partitions = req
        .topics
        .as_ref()
        .map(|ts| requested(ts.iter().map(|t| (&t.name, &t.partition_indexes))));
    let group: &GroupId = &req.group_id;
    // Only v7+ asks for stable offsets.
    let require_stable = version >= 7 && req.require_stable;
    let resp = match fetch(
        services,
        caller,
        group.0.as_str(),
        partitions,
        require_stable,
    )
    .await
    {
        Ok(entries) => OffsetFetchResponse::default().with_topics(
            by_topic(entries)
                .into_iter()
                .map(|(t, es)| {
                    OffsetFetchResponseTopic::default()
                        .with_name(TopicName(str_bytes(&t)))
                        .with_partitions(
                            es.into_iter()
                                .map(|((_, p, o, e, m), code)| {
                                    let mut r = OffsetFetchResponsePartition::default()
                                        .with_partition_index(p)
                                        .with_committed_offset(o)
                                        .with_metadata(Some(str_bytes(&m)))
                                        .with_error_code(code);
                                    if version >= 5 {
                                        r = r.with_committed_leader_epoch(e);
                                    }
                                    r
                                })
                                .collect(),
                        )
                })
                .collect(),
        ),
        Err(c) if version >= 2 => OffsetFetchResponse::default().with_error_code(c),
        Err(_) => OffsetFetchResponse::default(),
    };
    encode(&resp, version)
}
