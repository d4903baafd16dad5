//! Fetch: decoded with kafka-protocol (no record bytes in a request), served by the owning
//! shards, encoded by the hand-written encoder so record bytes go out as read.
//!
//! Long poll: when fewer than min_bytes are available, the request parks on the owning shards
//! until a high watermark moves past a fetched offset or max_wait_ms passes, then re-reads.
//!
//! Fetch sessions (KIP-227, v7+): see `fetch_session.rs`. An incremental request is served over
//! every partition of its session (the long poll waits on all of them) and answered with those
//! that changed.

use super::fetch_session::{Answered, Begin, Key, Wanted, INVALID_SESSION_ID};
use super::{decode, Reply};
use crate::protocol::chunk::Chunk;
use crate::protocol::fetch::{self as codec, PartitionResponse, TopicResponse};
use crate::shard::messages::{FetchItem, FetchOutcome, ShardReply, ShardRequest};
use crate::shard::{now_ms, Shard};
use crate::storage::catalog::Catalog;
use bytes::Bytes;
use kafka_protocol::messages::FetchRequest;
use kafka_protocol::ResponseError;
use std::rc::Rc;

/// Upper bound on max_wait_ms, so a client cannot park a request for hours.
const MAX_WAIT_MS_LIMIT: i32 = 5 * 60 * 1000;

fn failed(e: ResponseError) -> FetchOutcome {
    FetchOutcome {
        error_code: e.code(),
        high_watermark: -1,
        log_start_offset: -1,
        records: None,
    }
}

/// One partition of the response: its topic, and the item that serves it (an index into the
/// items sent to the owning shards) or the error found before routing.
struct Entry {
    topic: String,
    topic_id: [u8; 16],
    partition: i32,
    slot: Result<usize, ResponseError>,
}

/// The name of a request's topic: by name before v13, by id from v13 (None: unknown id).
fn topic_name(catalog: &Catalog, version: i16, name: &str, id: &[u8; 16]) -> Option<String> {
    if version >= 13 {
        catalog.by_id.get(id).cloned()
    } else {
        Some(name.to_string())
    }
}

pub async fn handle(shard: &Rc<Shard>, version: i16, body: Bytes) -> anyhow::Result<Reply> {
    let req: FetchRequest = decode(body, version)?;
    let catalog = shard.catalog();
    let (requested, unknown) = listed(&catalog, version, &req);
    let Served {
        session_id,
        incremental,
        partitions,
    } = if version >= 7 {
        match join_session(shard, &catalog, version, &req, requested) {
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
    let (items, mut entries) = route(shard, &catalog, partitions, response_max_bytes);
    entries.extend(unknown);
    let deadline_ms = now_ms() + req.max_wait_ms.clamp(0, MAX_WAIT_MS_LIMIT) as u64;
    let outcomes = read_or_wait(shard, &items, req.min_bytes.max(0) as usize, deadline_ms).await;
    let topics = respond(shard, session_id, incremental, entries, outcomes);
    let resp = codec::FetchResponse {
        error_code: 0,
        session_id,
        topics,
    };
    Ok(Reply::Body(codec::encode(resp, version).0))
}

/// The partitions a request lists, and an error entry for each that does not exist: those
/// are kept out of any session, so that a session holds at most the partitions there are.
fn listed(catalog: &Catalog, version: i16, req: &FetchRequest) -> (Vec<(Key, Wanted)>, Vec<Entry>) {
    let mut requested: Vec<(Key, Wanted)> = Vec::new();
    let mut unknown = Vec::new();
    for topic in &req.topics {
        let id = topic.topic_id.as_bytes();
        let Some(name) = topic_name(catalog, version, &topic.topic.0, id) else {
            unknown.extend(topic.partitions.iter().map(|p| Entry {
                topic: String::new(),
                topic_id: *id,
                partition: p.partition,
                slot: Err(ResponseError::UnknownTopicId),
            }));
            continue;
        };
        let meta = catalog.topics.get(&name);
        for p in &topic.partitions {
            let key = (name.clone(), p.partition);
            match meta {
                Some(t) if (0..t.record.partitions as i32).contains(&p.partition) => {
                    let wanted = Wanted {
                        fetch_offset: p.fetch_offset,
                        max_bytes: p.partition_max_bytes,
                        leader_epoch: p.current_leader_epoch,
                    };
                    requested.push((key, wanted));
                }
                _ => unknown.push(Entry {
                    topic: key.0,
                    topic_id: meta.map_or([0; 16], |t| t.record.id),
                    partition: p.partition,
                    slot: Err(ResponseError::UnknownTopicOrPartition),
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
    catalog: &Catalog,
    version: i16,
    req: &FetchRequest,
    requested: Vec<(Key, Wanted)>,
) -> Result<Served, ResponseError> {
    let forgotten: Vec<Key> = req
        .forgotten_topics_data
        .iter()
        .filter_map(|t| {
            let name = topic_name(catalog, version, &t.topic.0, t.topic_id.as_bytes())?;
            Some(t.partitions.iter().map(move |&p| (name.clone(), p)))
        })
        .flatten()
        .collect();
    let begun = shard.fetch_sessions.borrow_mut().begin(
        req.session_id,
        req.session_epoch,
        &requested,
        &forgotten,
        now_ms(),
    );
    shard.count_fetch_sessions();
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
            crate::metrics::bump(&shard.metrics.incremental_fetches);
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
    response_max_bytes: usize,
) -> (Vec<FetchItem>, Vec<Entry>) {
    let mut items = Vec::new();
    let entries = partitions
        .into_iter()
        .map(|((topic, partition), wanted)| {
            let meta = catalog.topics.get(&topic);
            let slot = match meta {
                Some(t) if (0..t.record.partitions as i32).contains(&partition) => {
                    items.push(FetchItem {
                        topic: topic.clone(),
                        partition,
                        offset: wanted.fetch_offset,
                        max_bytes: (wanted.max_bytes.max(0) as usize).min(response_max_bytes),
                        leader_epoch: wanted.leader_epoch,
                        zero_copy: shard.config.fetch.zero_copy,
                    });
                    Ok(items.len() - 1)
                }
                // Only a session partition whose topic was deleted since it joined.
                _ => Err(ResponseError::UnknownTopicOrPartition),
            };
            Entry {
                topic_id: meta.map_or([0; 16], |t| t.record.id),
                topic,
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
    items: &[FetchItem],
    min_bytes: usize,
    deadline_ms: u64,
) -> Vec<FetchOutcome> {
    loop {
        let outcomes = read_all(shard, items).await;
        let bytes: usize = outcomes
            .iter()
            .filter_map(|o| o.records.as_ref())
            .map(Chunk::len)
            .sum();
        let any_error = outcomes.iter().any(|o| o.error_code != 0);
        if bytes >= min_bytes.max(1) || any_error || items.is_empty() || now_ms() >= deadline_ms {
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
    shard: &Shard,
    session_id: i32,
    incremental: bool,
    entries: Vec<Entry>,
    outcomes: Vec<FetchOutcome>,
) -> Vec<TopicResponse> {
    // Each outcome is used once: an item serves one entry.
    let mut outcomes: Vec<Option<FetchOutcome>> = outcomes.into_iter().map(Some).collect();
    let answers: Vec<(Entry, FetchOutcome)> = entries
        .into_iter()
        .map(|e| {
            let o = match e.slot {
                Ok(i) => outcomes[i].take().expect("each outcome is used once"),
                Err(err) => failed(err),
            };
            (e, o)
        })
        .collect();
    let send = session_filter(shard, session_id, incremental, &answers);
    let mut topics: Vec<TopicResponse> = Vec::new();
    for ((e, o), send) in answers.into_iter().zip(send) {
        if !send {
            continue;
        }
        let partition = PartitionResponse {
            partition: e.partition,
            error_code: o.error_code,
            high_watermark: o.high_watermark,
            last_stable_offset: o.high_watermark,
            log_start_offset: o.log_start_offset,
            records: o.records,
        };
        match topics.last_mut() {
            Some(t) if t.name == e.topic && t.topic_id == e.topic_id => {
                t.partitions.push(partition)
            }
            _ => topics.push(TopicResponse {
                name: e.topic,
                topic_id: e.topic_id,
                partitions: vec![partition],
            }),
        }
    }
    topics
}

/// Which answers go in the response (see `FetchSessions::finish`). Sessionless fetches
/// (librdkafka's, kafkajs's) send everything, without building session keys.
fn session_filter(
    shard: &Shard,
    session_id: i32,
    incremental: bool,
    answers: &[(Entry, FetchOutcome)],
) -> Vec<bool> {
    if session_id == INVALID_SESSION_ID {
        return vec![true; answers.len()];
    }
    let keys: Vec<Key> = answers
        .iter()
        .map(|(e, _)| (e.topic.clone(), e.partition))
        .collect();
    let answered: Vec<Answered> = answers
        .iter()
        .zip(&keys)
        .map(|((_, o), key)| Answered {
            key,
            high_watermark: o.high_watermark,
            log_start_offset: o.log_start_offset,
            news: o.error_code != 0 || o.records.as_ref().is_some_and(|r| !r.is_empty()),
        })
        .collect();
    shard
        .fetch_sessions
        .borrow_mut()
        .finish(session_id, incremental, &answered)
}

/// The answer to a request naming a session that is gone or out of step: the error alone, so
/// that the client starts over with a full request.
fn session_error(e: ResponseError, version: i16) -> Reply {
    let resp = codec::FetchResponse {
        error_code: e.code(),
        session_id: INVALID_SESSION_ID,
        topics: Vec::new(),
    };
    Reply::Body(codec::encode(resp, version).0)
}

async fn read_all(shard: &Rc<Shard>, items: &[FetchItem]) -> Vec<FetchOutcome> {
    shard
        .scatter(
            items.to_vec(),
            |i| shard.router.shard_of(&i.topic, i.partition),
            |items| ShardRequest::Fetch { items },
            |reply| match reply {
                ShardReply::Fetch(v) => v,
                _ => unreachable!("a fetch request gets a fetch reply"),
            },
            || failed(ResponseError::NotLeaderOrFollower),
        )
        .await
}

/// Waits until any owning shard reports new data for these items, or the deadline. False when
/// a shard could not park the wait (its bound on parked operations was hit).
async fn park(shard: &Rc<Shard>, items: &[FetchItem], deadline_ms: u64) -> bool {
    let mut by_shard: Vec<Vec<(String, i32, i64)>> = vec![Vec::new(); shard.router.shards()];
    for i in items {
        by_shard[shard.router.shard_of(&i.topic, i.partition)].push((
            i.topic.clone(),
            i.partition,
            i.offset,
        ));
    }
    let waits: Vec<_> = by_shard
        .into_iter()
        .enumerate()
        .filter(|(_, v)| !v.is_empty())
        .map(|(s, items)| Box::pin(shard.call(s, ShardRequest::WaitForData { items, deadline_ms })))
        .collect();
    // Which shard woke first does not matter: the caller re-reads them all.
    let (first, _, _) = futures::future::select_all(waits).await;
    !matches!(first, Ok(ShardReply::Parked(false)))
}
