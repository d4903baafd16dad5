//! Fetch: decoded with kafka-protocol (no record bytes in a request), served by the owning
//! shards, encoded by the hand-written encoder so record bytes go out as read.
//!
//! Long poll: when fewer than min_bytes are available, the request parks on the owning shards
//! (on the fetched partitions' offset monitors) until a high watermark moves past a fetched
//! offset or max_wait_ms passes, then re-reads.
//!
//! Fetch sessions (KIP-227, v7+): see `fetch_session.rs`. An incremental request is served over
//! every partition of its session (the long poll waits on all of them) and answered with those
//! that changed.

use super::authorize::{self, Caller};
use super::fetch_session::{Answered, Begin, FetchSessions, Key, Wanted, INVALID_SESSION_ID};
use super::{decode, Reply, Services};
use crate::config::ReplicaSelector;
use crate::partition::{Partition, ReadRequest, ReadResult, TopicPartition, Watch};
use crate::protocol::chunk::Chunk;
use crate::protocol::fetch::{self as codec, PartitionResponse, TopicResponse};
use crate::security::acl::{Operation, ResourceType};
use crate::shard::mesh::{Peer, Request};
use crate::shard::{Shard, Wait};
use crate::storage::catalog::{Catalog, TopicMeta};
use bytes::Bytes;
use futures::future::LocalBoxFuture;
use kafka_protocol::messages::FetchRequest;
use kafka_protocol::ResponseError;
use std::cell::RefCell;
use std::rc::Rc;
use std::sync::Arc;

/// Upper bound on max_wait_ms, so a client cannot park a request for hours.
const MAX_WAIT_MS_LIMIT: i32 = 5 * 60 * 1000;

/// One partition to read, with its owner.
#[derive(Clone, Copy)]
struct Item {
    owner: usize,
    tp: TopicPartition,
    read: ReadRequest,
}

/// One partition of the response: its topic, and the item that serves it (an index into the
/// items sent to the owning shards) or the error found before routing.
struct Entry {
    /// The topic's name as answered ("" for an unknown topic id).
    name: Arc<str>,
    topic_id: [u8; 16],
    partition: i32,
    slot: Result<usize, ResponseError>,
}

/// Reads partitions of one shard; one result per item, in order, within the response's
/// `max_bytes` (KIP-74): after the first partition that returns records, each read gets what
/// is left of the budget and no batch past it. Only that first partition's first batch may go
/// over, so that a consumer always makes progress.
struct ReadOnOwner {
    items: Vec<(TopicPartition, ReadRequest)>,
    max_bytes: usize,
    /// The nodes of the consumer's rack a leader may send it to (KIP-392); None: read here.
    closest: Option<Arc<[i32]>>,
}

impl Request for ReadOnOwner {
    type Reply = Vec<ReadResult>;
    fn run(self, shard: Rc<Shard>) -> LocalBoxFuture<'static, Vec<ReadResult>> {
        Box::pin(async move {
            let mut out = Vec::with_capacity(self.items.len());
            let mut left_bytes = self.max_bytes;
            let mut filled = false;
            for (tp, mut read) in self.items {
                read.max_bytes = read.max_bytes.min(left_bytes);
                read.whole_first_batch = !filled;
                let result = match shard.partition(tp) {
                    Some(p) => read_or_redirect(&shard, &p, read, self.closest.as_deref()).await,
                    None => ReadResult::unknown(ResponseError::UnknownTopicOrPartition),
                };
                let len = result.records.as_ref().map_or(0, Chunk::len);
                if len > 0 {
                    filled = true;
                    left_bytes = left_bytes.saturating_sub(len);
                }
                out.push(result);
            }
            out
        })
    }
}

/// A consumer's read, or the leader's answer that sends it to `closest`'s best replica
/// (KIP-392), counted either way.
async fn read_or_redirect(
    shard: &Shard,
    p: &Partition,
    read: ReadRequest,
    closest: Option<&[i32]>,
) -> ReadResult {
    let metrics = shard.metrics();
    if let Some(replica) =
        closest.and_then(|c| p.replication().preferred_read_replica(c, read.offset))
    {
        crate::metrics::bump(&metrics.preferred_replica_redirects);
        return p.redirect(read, replica).await;
    }
    let result = p.read(read).await;
    if read.replica < 0 && result.error_code == 0 && p.is_follower() {
        crate::metrics::bump(&metrics.follower_consumer_reads);
    }
    result
}

/// Holds the whole response to `max_bytes` across shards: each owner kept its own partitions
/// within it, so in request order, a partition whose records would take the response past it
/// is answered without records (its offsets and error still go out; it is read next time),
/// unless nothing came before it. Returns the bytes kept.
fn hold_to_max_bytes(outcomes: &mut [ReadResult], max_bytes: usize) -> usize {
    let mut total_bytes = 0usize;
    for o in outcomes.iter_mut() {
        let len = o.records.as_ref().map_or(0, Chunk::len);
        if len == 0 {
            continue;
        }
        if total_bytes > 0 && total_bytes + len > max_bytes {
            o.records = None;
        } else {
            total_bytes += len;
        }
    }
    total_bytes
}

/// Parks until any listed partition of one shard has data past its offset (or fails), or the
/// deadline (monotonic ms). Answers whether the shard could park (false: its bound was hit).
struct WaitOnOwner {
    items: Vec<(TopicPartition, i64)>,
    /// Which end moving past the offset is new data: the written end for a follower's fetch,
    /// the last stable offset for read_committed, else the high watermark.
    what: Watch,
    deadline_ms: u64,
}

impl Request for WaitOnOwner {
    type Reply = bool;
    fn run(self, shard: Rc<Shard>) -> LocalBoxFuture<'static, bool> {
        Box::pin(async move {
            let mut watched = Vec::with_capacity(self.items.len());
            for (tp, offset) in self.items {
                match shard.partition(tp) {
                    // New data is a high watermark past the fetched offset.
                    Some(p) => watched.push((p, offset + 1)),
                    None => return true, // gone: the re-read reports the error
                }
            }
            shard
                .wait_for_any(&watched, self.what, self.deadline_ms)
                .await
                != Wait::Refused
        })
    }
}

/// A fetch runs beside the connection's later requests (its long poll would otherwise hold
/// them up); its answer still goes out in request order.
pub async fn handle(
    services: &Rc<Services>,
    caller: &Caller,
    version: i16,
    body: Bytes,
) -> anyhow::Result<Reply> {
    let req: FetchRequest = decode(body, version)?;
    let services = services.clone();
    let caller = caller.clone();
    Ok(Reply::Later(Box::pin(async move {
        serve(&services, &caller, version, req).await
    })))
}

async fn serve(
    services: &Services,
    caller: &Caller,
    version: i16,
    req: FetchRequest,
) -> anyhow::Result<Vec<Chunk>> {
    let (shard, sessions) = (&services.shard, &services.sessions);
    let catalog = shard.catalog();
    let replica = replica_of(&catalog, version, &req);
    // A follower's fetch moves high watermarks and in-sync sets, so Kafka asks CLUSTER_ACTION
    // for it, not READ (a consumer posing as a follower is refused every partition).
    let follower_allowed =
        replica >= 0 && authorize::cluster(shard, caller, Operation::ClusterAction);
    let readable = |name: &str| match replica {
        0.. => follower_allowed,
        _ => authorize::allowed(shard, caller, Operation::Read, ResourceType::Topic, name),
    };
    let (requested, unknown) = listed(&catalog, version, &req, &readable);
    let served = if version >= 7 {
        match join_session(shard, sessions, &catalog, version, &req, requested) {
            Ok(served) => served,
            Err(e) => return Ok(session_error(e, version)),
        }
    } else {
        Served {
            session_id: INVALID_SESSION_ID,
            incremental: false,
            partitions: requested,
        }
    };
    let response_max_bytes = if req.max_bytes <= 0 {
        usize::MAX
    } else {
        req.max_bytes as usize
    };
    if replica >= 0 && crate::rpc::cut_off() {
        anyhow::bail!("a follower's fetch while cut off from the other nodes (fault hook)");
    }
    let reader = Reader {
        replica,
        // A follower replicates everything; a consumer's isolation level 1 is read_committed.
        read_committed: replica < 0 && req.isolation_level == 1,
        // From v11 a consumer may fetch from a follower (KIP-392).
        any_replica: replica < 0 && version >= 11,
        closest: closest_replicas(shard, &catalog, caller, version, &req),
    };
    let (items, mut entries) = route(shard, &catalog, served.partitions, &reader);
    entries.extend(unknown);
    let wait_ms = req.max_wait_ms.clamp(0, MAX_WAIT_MS_LIMIT) as u64;
    let deadline_ms = shard.clock().monotonic_ms() + wait_ms;
    let min_bytes = req.min_bytes.max(0) as usize;
    let bounds = (min_bytes, response_max_bytes, deadline_ms);
    let outcomes = read_or_wait(shard, &items, &reader.closest, bounds).await;
    if replica >= 0 && crate::rpc::cut_off() {
        anyhow::bail!("a follower's parked fetch while cut off from the other nodes (fault hook)");
    }
    let (session_id, incremental) = (served.session_id, served.incremental);
    let topics = respond(sessions, session_id, incremental, entries, outcomes);
    let resp = codec::FetchResponse {
        error_code: 0,
        session_id,
        topics,
    };
    Ok(codec::encode(resp, version).0)
}

/// The node id of a follower fetching to replicate, -1 for a consumer. A replica id from a
/// node that is not another broker of this cluster is a consumer's (Kafka treats ids below 0
/// as consumers; a single node has no followers).
fn replica_of(catalog: &Catalog, version: i16, req: &FetchRequest) -> i32 {
    let id = if version >= 15 {
        req.replica_state.replica_id.0
    } else {
        req.replica_id.0
    };
    let known = catalog.is_clustered()
        && id != catalog.here.node_id
        && catalog.brokers.iter().any(|b| b.node_id == id);
    if known {
        id
    } else {
        -1
    }
}

/// Who reads, and how.
struct Reader {
    /// A follower's node id, -1 for a consumer.
    replica: i32,
    read_committed: bool,
    /// Whether a follower may serve this consumer (KIP-392).
    any_replica: bool,
    /// The nodes a leader may send this consumer to (see `closest_replicas`).
    closest: Option<Arc<[i32]>>,
}

/// The live nodes of a consumer's rack (its Fetch v11+ `rack_id`) that it can reach on the
/// listener it came in on, when this broker selects replicas by rack
/// (`fetch.replica_selector = "rack-aware"`, Kafka's `RackAwareReplicaSelector`) and is not in
/// that rack itself. None: the leader serves the consumer.
fn closest_replicas(
    shard: &Shard,
    catalog: &Catalog,
    caller: &Caller,
    version: i16,
    req: &FetchRequest,
) -> Option<Arc<[i32]>> {
    let rack = req.rack_id.as_str();
    let selects = shard.config.fetch.replica_selector == ReplicaSelector::RackAware;
    if !selects || version < 11 || rack.is_empty() || !catalog.is_clustered() {
        return None;
    }
    if shard.config.rack.as_deref() == Some(rack) {
        return None;
    }
    let nodes: Arc<[i32]> = catalog
        .live_brokers()
        .filter(|b| b.rack.as_deref() == Some(rack) && b.endpoint(&caller.listener.name).is_some())
        .map(|b| b.node_id)
        .collect();
    (!nodes.is_empty()).then_some(nodes)
}

/// The topic a request names: by name before v13, by id from v13.
fn topic_of(catalog: &Catalog, version: i16, name: &str, id: &[u8; 16]) -> Option<Arc<TopicMeta>> {
    if version >= 13 {
        catalog.by_id.get(id).cloned()
    } else {
        catalog.topics.get(name).cloned()
    }
}

/// The partitions a request lists, and an error entry for each that does not exist or whose
/// topic the caller may not read (TOPIC_AUTHORIZATION_FAILED): those are kept out of any
/// session, so that a session holds at most the partitions there are.
fn listed(
    catalog: &Catalog,
    version: i16,
    req: &FetchRequest,
    readable: &dyn Fn(&str) -> bool,
) -> (Vec<(Key, Wanted)>, Vec<Entry>) {
    let mut requested: Vec<(Key, Wanted)> = Vec::new();
    let mut unknown = Vec::new();
    for topic in &req.topics {
        let id = topic.topic_id.as_bytes();
        let meta = topic_of(catalog, version, &topic.topic.0, id);
        let denied = meta.as_ref().is_some_and(|t| !readable(&t.name));
        for p in &topic.partitions {
            match &meta {
                Some(t) if denied => unknown.push(Entry {
                    name: t.name.clone(),
                    topic_id: *id,
                    partition: p.partition,
                    slot: Err(ResponseError::TopicAuthorizationFailed),
                }),
                Some(t) if t.has_partition(p.partition) => {
                    let wanted = Wanted {
                        fetch_offset: p.fetch_offset,
                        max_bytes: p.partition_max_bytes,
                        leader_epoch: p.current_leader_epoch,
                    };
                    requested.push(((t.record.id, p.partition), wanted));
                }
                _ => unknown.push(Entry {
                    name: match &meta {
                        Some(t) => t.name.clone(),
                        None if version >= 13 => Arc::from(""),
                        None => Arc::from(topic.topic.0.as_str()),
                    },
                    topic_id: *id,
                    partition: p.partition,
                    slot: Err(if version >= 13 && meta.is_none() {
                        ResponseError::UnknownTopicId
                    } else {
                        ResponseError::UnknownTopicOrPartition
                    }),
                }),
            }
        }
    }
    (requested, unknown)
}

/// What a request is served over.
struct Served {
    /// The session id to answer with (0: none).
    session_id: i32,
    /// Whether the answer leaves out partitions with nothing new.
    incremental: bool,
    partitions: Vec<(Key, Wanted)>,
}

/// Applies the request's session fields (v7+).
fn join_session(
    shard: &Shard,
    sessions: &RefCell<FetchSessions>,
    catalog: &Catalog,
    version: i16,
    req: &FetchRequest,
    requested: Vec<(Key, Wanted)>,
) -> Result<Served, ResponseError> {
    let forgotten: Vec<Key> = req
        .forgotten_topics_data
        .iter()
        .filter_map(|t| {
            let topic = topic_of(catalog, version, &t.topic.0, t.topic_id.as_bytes())?;
            Some(t.partitions.iter().map(move |&p| (topic.record.id, p)))
        })
        .flatten()
        .collect();
    let begun = sessions.borrow_mut().begin(
        req.session_id,
        req.session_epoch,
        &requested,
        &forgotten,
        shard.clock().monotonic_ms(),
    );
    let held = sessions.borrow().len() as u64;
    shard
        .metrics()
        .fetch_sessions
        .store(held, std::sync::atomic::Ordering::Relaxed);
    Ok(match begun? {
        Begin::Full { session_id } => Served {
            session_id,
            incremental: false,
            partitions: requested,
        },
        Begin::Incremental {
            session_id,
            partitions,
        } => {
            crate::metrics::bump(&shard.metrics().incremental_fetches);
            Served {
                session_id,
                incremental: true,
                partitions,
            }
        }
    })
}

/// The items to send to the owning shards, and the response entry each serves.
fn route(
    shard: &Shard,
    catalog: &Catalog,
    partitions: Vec<(Key, Wanted)>,
    reader: &Reader,
) -> (Vec<Item>, Vec<Entry>) {
    let mut items = Vec::new();
    let entries = partitions
        .into_iter()
        .map(|((topic_id, partition), wanted)| {
            let meta = catalog.by_id.get(&topic_id).cloned();
            // Only the leader serves a follower, and a consumer that may not fetch from a
            // follower (before v11); a replica this node does not hold serves no one. An
            // unknown partition is one of a session whose topic was deleted since it joined.
            let located = shard.locate(catalog, meta.as_deref(), partition, reader.any_replica);
            let slot = located.map(|(owner, tp)| {
                items.push(Item {
                    owner,
                    tp,
                    read: ReadRequest {
                        offset: wanted.fetch_offset,
                        max_bytes: wanted.max_bytes.max(0) as usize,
                        leader_epoch: wanted.leader_epoch,
                        zero_copy: shard.config.fetch.zero_copy,
                        whole_first_batch: true,
                        replica: reader.replica,
                        read_committed: reader.read_committed,
                        any_replica: reader.any_replica,
                    },
                });
                items.len() - 1
            });
            Entry {
                name: meta.map_or_else(|| Arc::from(""), |t| t.name.clone()),
                topic_id,
                partition,
                slot,
            }
        })
        .collect();
    (items, entries)
}

/// Reads every item; while fewer than `min_bytes` came back and nothing failed, parks until new
/// data or the deadline, then reads again.
async fn read_or_wait(
    shard: &Rc<Shard>,
    items: &[Item],
    closest: &Option<Arc<[i32]>>,
    (min_bytes, max_bytes, deadline_ms): (usize, usize, u64),
) -> Vec<ReadResult> {
    loop {
        let mut outcomes = read_all(shard, items, max_bytes, closest).await;
        let bytes = hold_to_max_bytes(&mut outcomes, max_bytes);
        // A consumer sent to another replica is answered at once (as Kafka does).
        let any_error = outcomes
            .iter()
            .any(|o| o.error_code != 0 || o.preferred_read_replica >= 0);
        let expired = shard.clock().monotonic_ms() >= deadline_ms;
        if bytes >= min_bytes.max(1) || any_error || items.is_empty() || expired {
            return outcomes;
        }
        if !park(shard, items, deadline_ms).await {
            return outcomes; // no room to park: answer with what there is
        }
    }
}

/// The response's topics: each entry with its outcome, less those an incremental answer leaves
/// out (see `FetchSessions::finish`), consecutive partitions of a topic grouped.
fn respond(
    sessions: &RefCell<FetchSessions>,
    session_id: i32,
    incremental: bool,
    entries: Vec<Entry>,
    outcomes: Vec<ReadResult>,
) -> Vec<TopicResponse> {
    // Each outcome is used once: an item serves one entry.
    let mut outcomes: Vec<Option<ReadResult>> = outcomes.into_iter().map(Some).collect();
    let answers: Vec<(Entry, ReadResult)> = entries
        .into_iter()
        .map(|e| {
            let o = match e.slot {
                Ok(i) => outcomes[i].take().expect("each outcome is used once"),
                // Refused by the partition's leader check, as Kafka's replica manager does.
                Err(e @ ResponseError::NotLeaderOrFollower) => ReadResult::failed(e, -1, -1),
                Err(err) => ReadResult::unknown(err),
            };
            (e, o)
        })
        .collect();
    let send = session_filter(sessions, session_id, incremental, &answers);
    let mut topics: Vec<TopicResponse> = Vec::new();
    for ((e, o), send) in answers.into_iter().zip(send) {
        if !send {
            continue;
        }
        let partition = PartitionResponse {
            partition: e.partition,
            error_code: o.error_code,
            high_watermark: o.high_watermark,
            last_stable_offset: o.last_stable_offset,
            log_start_offset: o.log_start_offset,
            aborted: o.aborted,
            records: o.records,
            preferred_read_replica: o.preferred_read_replica,
        };
        match topics.last_mut() {
            Some(t) if t.topic_id == e.topic_id && t.name == e.name => t.partitions.push(partition),
            _ => topics.push(TopicResponse {
                name: e.name,
                topic_id: e.topic_id,
                partitions: vec![partition],
            }),
        }
    }
    topics
}

/// Which answers go in the response (see `FetchSessions::finish`). Sessionless fetches
/// (librdkafka's, kafkajs's) send everything.
fn session_filter(
    sessions: &RefCell<FetchSessions>,
    session_id: i32,
    incremental: bool,
    answers: &[(Entry, ReadResult)],
) -> Vec<bool> {
    if session_id == INVALID_SESSION_ID {
        return vec![true; answers.len()];
    }
    let keys: Vec<Key> = answers
        .iter()
        .map(|(e, _)| (e.topic_id, e.partition))
        .collect();
    let answered: Vec<Answered> = answers
        .iter()
        .zip(&keys)
        .map(|((_, o), key)| Answered {
            key,
            high_watermark: o.high_watermark,
            log_start_offset: o.log_start_offset,
            // A consumer sent to another replica must hear it (as in Kafka's sessions).
            news: o.error_code != 0
                || o.preferred_read_replica >= 0
                || o.records.as_ref().is_some_and(|r| !r.is_empty()),
            has_records: o.records.as_ref().is_some_and(|r| !r.is_empty()),
        })
        .collect();
    sessions
        .borrow_mut()
        .finish(session_id, incremental, &answered)
}

/// The answer to a request naming a session that is gone or out of step: the error alone, so
/// that the client starts over with a full request.
fn session_error(e: ResponseError, version: i16) -> Vec<Chunk> {
    let resp = codec::FetchResponse {
        error_code: e.code(),
        session_id: INVALID_SESSION_ID,
        topics: Vec::new(),
    };
    codec::encode(resp, version).0
}

async fn read_all(
    shard: &Rc<Shard>,
    items: &[Item],
    max_bytes: usize,
    closest: &Option<Arc<[i32]>>,
) -> Vec<ReadResult> {
    let routed = items.iter().map(|i| (i.owner, (i.tp, i.read))).collect();
    let request = |items| ReadOnOwner {
        items,
        max_bytes,
        closest: closest.clone(),
    };
    shard
        .scatter(routed, request, || {
            ReadResult::failed(ResponseError::NotLeaderOrFollower, -1, -1)
        })
        .await
}

/// Waits until any owning shard reports new data for these items, or the deadline. False when
/// a shard could not park the wait (its bound on parked operations was hit).
async fn park(shard: &Rc<Shard>, items: &[Item], deadline_ms: u64) -> bool {
    let mut by_shard: Vec<Vec<(TopicPartition, i64)>> = vec![Vec::new(); shard.router.shards()];
    for i in items {
        by_shard[i.owner].push((i.tp, i.read.offset));
    }
    let what = match items.first().map(|i| i.read) {
        Some(r) if r.replica >= 0 => Watch::Written,
        Some(r) if r.read_committed => Watch::Stable,
        _ => Watch::Committed,
    };
    let waits: Vec<_> = by_shard
        .into_iter()
        .enumerate()
        .filter(|(_, v)| !v.is_empty())
        .map(|(s, items)| {
            let wait = WaitOnOwner {
                items,
                what,
                deadline_ms,
            };
            Box::pin(shard.call(s, wait))
        })
        .collect();
    // Which shard woke first does not matter: the caller re-reads them all.
    let (first, _, _) = futures::future::select_all(waits).await;
    !matches!(first, Ok(false))
}
