//! DescribeLogDirs v1-4 (KIP-113, KIP-827): this node's log directory (Sluice has one, the data
//! dir), the size on disk of every replica it holds there (of the topics asked for, or all),
//! and from v4 the file system's total and usable bytes. `kafka-log-dirs` and the AdminClient's
//! `describeLogDirs` read it. Needs DESCRIBE on the cluster, as in Kafka: a caller without it
//! gets CLUSTER_AUTHORIZATION_FAILED and no directories.

use super::authorize::{self, Caller};
use super::{decode, encode, Reply};
use crate::partition::TopicPartition;
use crate::security::acl::Operation;
use crate::shard::mesh::{Peer, Request};
use crate::shard::Shard;
use crate::storage::catalog::TopicMeta;
use bytes::Bytes;
use futures::future::LocalBoxFuture;
use kafka_protocol::messages::describe_log_dirs_response::{
    DescribeLogDirsPartition, DescribeLogDirsResult, DescribeLogDirsTopic,
};
use kafka_protocol::messages::{DescribeLogDirsRequest, DescribeLogDirsResponse, TopicName};
use kafka_protocol::ResponseError;
use std::collections::{HashMap, HashSet};
use std::rc::Rc;
use std::sync::Arc;

/// A replica's size in bytes and offset lag, or None where its shard has not opened it.
type Sized = Option<(i64, i64)>;

/// Reads the sizes of replicas of one shard.
struct SizeOnOwner(Vec<TopicPartition>);

impl Request for SizeOnOwner {
    type Reply = Vec<Sized>;
    fn run(self, shard: Rc<Shard>) -> LocalBoxFuture<'static, Vec<Sized>> {
        Box::pin(async move {
            let sized = |tp| {
                let p = shard.partition(tp)?;
                // Kafka's lag for a current (not future) replica: how far its end is below its
                // high watermark, never negative.
                let lag = (p.high_watermark() - p.log_end_offset()).max(0);
                Some((p.size_bytes() as i64, lag))
            };
            self.0.into_iter().map(sized).collect()
        })
    }
}

pub async fn handle(
    shard: &Rc<Shard>,
    caller: &Caller,
    version: i16,
    body: Bytes,
) -> anyhow::Result<Reply> {
    let req: DescribeLogDirsRequest = decode(body, version)?;
    let mut response = DescribeLogDirsResponse::default();
    if !authorize::cluster(shard, caller, Operation::Describe) {
        let denied = response.with_error_code(ResponseError::ClusterAuthorizationFailed.code());
        return encode(&denied, version);
    }
    // None: every topic.
    let wanted: Option<HashMap<&str, HashSet<i32>>> = req.topics.as_ref().map(|topics| {
        let partitions = |t: &[i32]| t.iter().copied().collect();
        topics
            .iter()
            .map(|t| (t.topic.0.as_str(), partitions(&t.partitions)))
            .collect()
    });
    let catalog = shard.catalog();
    let mut replicas: Vec<(Arc<TopicMeta>, i32)> = Vec::new();
    for topic in catalog.topics.values() {
        let asked = wanted.as_ref().map(|w| w.get(&*topic.name));
        for p in 0..topic.record.partitions as i32 {
            let in_request = asked.is_none_or(|a| a.is_some_and(|ps| ps.contains(&p)));
            if in_request && catalog.holds(topic, p) {
                replicas.push((topic.clone(), p));
            }
        }
    }
    let items = replicas
        .iter()
        .map(|(t, p)| {
            let tp = TopicPartition {
                topic_id: t.record.id,
                partition: *p,
            };
            (shard.owner(&t.name, *p), tp)
        })
        .collect();
    let sizes = shard.scatter(items, SizeOnOwner, || None).await;
    let described = replicas
        .iter()
        .zip(sizes)
        .filter_map(|((t, p), s)| Some((t, *p, s?)));
    response.results = vec![log_dir(shard, described)];
    encode(&response, version)
}

/// The data dir's entry: its path, space and replicas, grouped by topic.
fn log_dir<'a>(
    shard: &Shard,
    replicas: impl Iterator<Item = (&'a Arc<TopicMeta>, i32, (i64, i64))>,
) -> DescribeLogDirsResult {
    let mut topics: Vec<DescribeLogDirsTopic> = Vec::new();
    for (topic, index, (size_bytes, lag)) in replicas {
        let partition = DescribeLogDirsPartition::default()
            .with_partition_index(index)
            .with_partition_size(size_bytes)
            .with_offset_lag(lag);
        match topics.last_mut() {
            Some(t) if t.name.0.as_str() == &*topic.name => t.partitions.push(partition),
            _ => topics.push(
                DescribeLogDirsTopic::default()
                    .with_name(TopicName(super::str_bytes(&topic.name)))
                    .with_partitions(vec![partition]),
            ),
        }
    }
    let dir = &shard.config.data_dir;
    let path = std::path::absolute(dir).unwrap_or_else(|_| dir.clone());
    let (total_bytes, usable_bytes) = match crate::storage::disk::space_bytes(dir) {
        Ok((total, usable)) => (total as i64, usable as i64),
        Err(e) => {
            log::warn!("describe log dirs: the space of {}: {e}", dir.display());
            (-1, -1)
        }
    };
    DescribeLogDirsResult::default()
        .with_log_dir(super::str_bytes(&path.to_string_lossy()))
        .with_topics(topics)
        .with_total_bytes(total_bytes)
        .with_usable_bytes(usable_bytes)
}
