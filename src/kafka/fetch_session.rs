//! Incremental fetch sessions (KIP-227): a consumer sends its partition list once, then only
//! what changed (a new fetch offset, a forgotten partition), and the broker answers only the
//! partitions that have something new. With many partitions this saves most of the bytes of
//! each idle fetch, both ways.
//!
//! Each shard keeps the sessions of the connections it accepted; a session id encodes its shard,
//! so an id shown to another shard (a reconnect landed elsewhere) is simply not found and the
//! client starts over with a full fetch, as the protocol intends. Pure: the clock is a value.

use indexmap::IndexMap;
use kafka_protocol::ResponseError;
use std::collections::{HashMap, HashSet};

pub const INVALID_SESSION_ID: i32 = 0;
/// A full request that opens a session.
pub const INITIAL_EPOCH: i32 = 0;
/// A full request without a session (closing the named one, if any).
pub const FINAL_EPOCH: i32 = -1;
/// A full cache evicts its least recently used session only if it has been idle this long
/// (Kafka's `min.incremental.fetch.session.eviction.ms`), so busy consumers keep theirs.
pub const EVICTION_IDLE_MS: u64 = 120_000;

/// A partition in a session: topic id and partition index (a topic deleted and created again
/// under the same name is another topic).
pub type Key = (crate::storage::catalog::TopicId, i32);

/// What the client asks of a partition.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Wanted {
    pub fetch_offset: i64,
    pub max_bytes: i32,
    pub leader_epoch: i32,
}

#[derive(Debug, Clone)]
struct Cached {
    wanted: Wanted,
    /// What the client was last told, so that unchanged partitions can be left out.
    high_watermark: i64,
    log_start_offset: i64,
}

#[derive(Debug)]
struct Session {
    /// The epoch the next incremental request must carry.
    next_epoch: i32,
    partitions: IndexMap<Key, Cached>,
    last_used_ms: u64,
}

/// Moves `served` to the end of the order, keeping the relative order of both parts.
fn rotate(partitions: &mut IndexMap<Key, Cached>, served: &HashSet<&Key>) {
    if served.is_empty() {
        return;
    }
    let mut tail = Vec::with_capacity(served.len());
    partitions.retain(|k, c| {
        let keep = !served.contains(k);
        if !keep {
            tail.push((*k, c.clone()));
        }
        keep
    });
    partitions.extend(tail);
}

/// How to serve a fetch request, decided by `FetchSessions::begin`.
#[derive(Debug, PartialEq, Eq)]
pub enum Begin {
    /// Serve the request's partitions and answer all of them under `session_id`: 0 when
    /// sessionless (the client asked for none, or the cache had no room), else a new session.
    Full { session_id: i32 },
    /// Serve every partition of the session, in its order; answer only those that changed.
    Incremental {
        session_id: i32,
        partitions: Vec<(Key, Wanted)>,
    },
}

/// One partition's answer, for `finish` to compare with what the client was last told.
pub struct Answered<'a> {
    pub key: &'a Key,
    pub high_watermark: i64,
    pub log_start_offset: i64,
    /// Records or an error: always sent.
    pub news: bool,
    /// Records: the partition goes to the end of the session's order (see `finish`).
    pub has_records: bool,
}

pub struct FetchSessions {
    sessions: HashMap<i32, Session>,
    /// Sessions created on this shard so far; ids are derived from it.
    created: u64,
    shard: u64,
    shards: u64,
    capacity: usize,
}

impl FetchSessions {
    pub fn new(shard: usize, shards: usize, capacity: usize) -> FetchSessions {
        assert!(shard < shards);
        FetchSessions {
            sessions: HashMap::new(),
            created: 0,
            shard: shard as u64,
            shards: shards as u64,
            capacity,
        }
    }

    pub fn len(&self) -> usize {
        self.sessions.len()
    }

    pub fn is_empty(&self) -> bool {
        self.sessions.is_empty()
    }

    /// Applies a request's session fields. `requested` are the partitions it lists (new or
    /// changed ones, for an incremental request), `forgotten` those it drops.
    pub fn begin(
        &mut self,
        session_id: i32,
        epoch: i32,
        requested: &[(Key, Wanted)],
        forgotten: &[Key],
        now_ms: u64,
    ) -> Result<Begin, ResponseError> {
        if epoch == FINAL_EPOCH || epoch == INITIAL_EPOCH {
            // A full request replaces the session it names.
            self.sessions.remove(&session_id);
            let session_id = if epoch == INITIAL_EPOCH {
                self.create(requested, now_ms)
            } else {
                INVALID_SESSION_ID
            };
            return Ok(Begin::Full { session_id });
        }
        let session = self
            .sessions
            .get_mut(&session_id)
            .ok_or(ResponseError::FetchSessionIdNotFound)?;
        if epoch != session.next_epoch {
            return Err(ResponseError::InvalidFetchSessionEpoch);
        }
        session.next_epoch = next_epoch(epoch);
        session.last_used_ms = now_ms;
        for (key, wanted) in requested {
            match session.partitions.get_mut(key) {
                Some(cached) => cached.wanted = *wanted,
                None => {
                    session.partitions.insert(*key, Cached::new(*wanted));
                }
            }
        }
        for key in forgotten {
            session.partitions.shift_remove(key);
        }
        let partitions = session
            .partitions
            .iter()
            .map(|(k, c)| (*k, c.wanted))
            .collect();
        Ok(Begin::Incremental {
            session_id,
            partitions,
        })
    }

    /// Records what a response tells the client and returns, per answered partition, whether it
    /// goes in the response: all of them for a full request, for an incremental one those with
    /// records, an error, or a high watermark or log start offset the client has not seen.
    ///
    /// After an incremental answer, the partitions that returned records move to the end of
    /// the session's order, as Kafka does: the response's `max_bytes` is filled in that order,
    /// so the partitions behind a busy one get their turn at the next fetch.
    pub fn finish(
        &mut self,
        session_id: i32,
        incremental: bool,
        answered: &[Answered],
    ) -> Vec<bool> {
        let Some(session) = self.sessions.get_mut(&session_id) else {
            // Sessionless, or the session was replaced meanwhile: answer everything.
            return vec![true; answered.len()];
        };
        let sent = answered
            .iter()
            .map(|a| match session.partitions.get_mut(a.key) {
                Some(c) => {
                    let send = !incremental
                        || a.news
                        || c.high_watermark != a.high_watermark
                        || c.log_start_offset != a.log_start_offset;
                    if send {
                        c.high_watermark = a.high_watermark;
                        c.log_start_offset = a.log_start_offset;
                    }
                    send
                }
                None => true, // not in the session (an unknown topic id): its error goes out
            })
            .collect();
        if incremental {
            let served: HashSet<&Key> = answered
                .iter()
                .filter(|a| a.has_records)
                .map(|a| a.key)
                .collect();
            rotate(&mut session.partitions, &served);
        }
        sent
    }

    /// A new session holding `requested`, or 0 when the cache is full of sessions in use.
    fn create(&mut self, requested: &[(Key, Wanted)], now_ms: u64) -> i32 {
        if self.sessions.len() >= self.capacity {
            let idlest = self
                .sessions
                .iter()
                .min_by_key(|(_, s)| s.last_used_ms)
                .map(|(&id, s)| (id, s.last_used_ms));
            match idlest {
                Some((id, used)) if now_ms.saturating_sub(used) >= EVICTION_IDLE_MS => {
                    self.sessions.remove(&id);
                }
                _ => return INVALID_SESSION_ID,
            }
        }
        // Ids are positive and distinct across shards: shard + 1 + k·shards for the k-th
        // session, wrapping within i32. At most `capacity` ids are taken, so the search ends.
        let id = loop {
            self.created += 1;
            let raw = (self.created * self.shards + self.shard + 1) % (i32::MAX as u64 + 1);
            let id = raw as i32;
            if id != INVALID_SESSION_ID && !self.sessions.contains_key(&id) {
                break id;
            }
        };
        let partitions = requested
            .iter()
            .map(|(k, w)| (*k, Cached::new(*w)))
            .collect();
        self.sessions.insert(
            id,
            Session {
                next_epoch: 1,
                partitions,
                last_used_ms: now_ms,
            },
        );
        id
    }
}

impl Cached {
    fn new(wanted: Wanted) -> Cached {
        Cached {
            wanted,
            high_watermark: -1,
            log_start_offset: -1,
        }
    }
}

/// Epochs run 1, 2, … and wrap back to 1 (0 and -1 mean full requests).
fn next_epoch(epoch: i32) -> i32 {
    if epoch == i32::MAX {
        1
    } else {
        epoch + 1
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn w(offset: i64) -> Wanted {
        Wanted {
            fetch_offset: offset,
            max_bytes: 1000,
            leader_epoch: -1,
        }
    }

    fn key(t: &str, p: i32) -> Key {
        let mut id = [0u8; 16];
        id[..t.len()].copy_from_slice(t.as_bytes());
        (id, p)
    }

    fn answered(key: &Key, hw: i64, news: bool) -> Answered<'_> {
        Answered {
            key,
            high_watermark: hw,
            log_start_offset: 0,
            news,
            has_records: news,
        }
    }

    fn open(cache: &mut FetchSessions, parts: &[(Key, Wanted)]) -> i32 {
        match cache.begin(0, INITIAL_EPOCH, parts, &[], 0).unwrap() {
            Begin::Full { session_id } => session_id,
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn incremental_requests_update_and_forget_and_keep_order() {
        let mut cache = FetchSessions::new(1, 4, 10);
        let id = open(&mut cache, &[(key("a", 0), w(0)), (key("a", 1), w(0))]);
        assert_ne!(id, INVALID_SESSION_ID);
        assert_eq!(id % 4, 2, "the id names shard 1 of 4");
        let got = cache
            .begin(
                id,
                1,
                &[(key("a", 1), w(5)), (key("b", 0), w(0))],
                &[key("a", 0)],
                1,
            )
            .unwrap();
        assert_eq!(
            got,
            Begin::Incremental {
                session_id: id,
                partitions: vec![(key("a", 1), w(5)), (key("b", 0), w(0))],
            }
        );
        // Epochs must follow on.
        assert_eq!(
            cache.begin(id, 1, &[], &[], 2),
            Err(ResponseError::InvalidFetchSessionEpoch)
        );
        assert!(cache.begin(id, 2, &[], &[], 2).is_ok());
        assert_eq!(
            cache.begin(id + 4, 1, &[], &[], 2),
            Err(ResponseError::FetchSessionIdNotFound)
        );
    }

    #[test]
    fn incremental_answers_only_what_changed() {
        let mut cache = FetchSessions::new(0, 1, 10);
        let (a, b) = (key("t", 0), key("t", 1));
        let id = open(&mut cache, &[(a, w(0)), (b, w(0))]);
        // The full response tells the client everything.
        let sent = cache.finish(id, false, &[answered(&a, 5, true), answered(&b, 0, false)]);
        assert_eq!(sent, [true, true]);
        cache.begin(id, 1, &[], &[], 1).unwrap();
        assert_eq!(
            cache.finish(id, true, &[answered(&a, 5, false), answered(&b, 0, false)]),
            [false, false]
        );
        cache.begin(id, 2, &[], &[], 1).unwrap();
        // New records on a; a high watermark move on b.
        assert_eq!(
            cache.finish(id, true, &[answered(&a, 5, true), answered(&b, 3, false)]),
            [true, true]
        );
        cache.begin(id, 3, &[], &[], 1).unwrap();
        assert_eq!(
            cache.finish(id, true, &[answered(&a, 5, false), answered(&b, 3, false)]),
            [false, false]
        );
    }

    /// Partitions that returned records go to the back of the session's order after an
    /// incremental answer (not a full one), so that a response filled to `max_bytes` by the
    /// first partitions does not starve the rest.
    #[test]
    fn partitions_with_records_move_to_the_end() {
        let mut cache = FetchSessions::new(0, 1, 10);
        let (a, b, c) = (key("t", 0), key("t", 1), key("t", 2));
        let id = open(&mut cache, &[(a, w(0)), (b, w(0)), (c, w(0))]);
        let order = |cache: &mut FetchSessions, epoch| match cache.begin(id, epoch, &[], &[], 1) {
            Ok(Begin::Incremental { partitions, .. }) => {
                partitions.into_iter().map(|(k, _)| k).collect::<Vec<_>>()
            }
            other => panic!("{other:?}"),
        };
        cache.finish(
            id,
            false,
            &[
                answered(&a, 1, true),
                answered(&b, 0, false),
                answered(&c, 0, false),
            ],
        );
        assert_eq!(
            order(&mut cache, 1),
            [a, b, c],
            "a full answer keeps the order"
        );
        cache.finish(
            id,
            true,
            &[
                answered(&a, 2, true),
                answered(&b, 0, false),
                answered(&c, 1, true),
            ],
        );
        assert_eq!(order(&mut cache, 2), [b, a, c]);
        cache.finish(
            id,
            true,
            &[
                answered(&b, 1, true),
                answered(&a, 2, false),
                answered(&c, 1, false),
            ],
        );
        assert_eq!(order(&mut cache, 3), [a, c, b]);
    }

    #[test]
    fn a_final_epoch_closes_and_an_initial_one_replaces() {
        let mut cache = FetchSessions::new(0, 1, 10);
        let id = open(&mut cache, &[(key("t", 0), w(0))]);
        assert_eq!(
            cache.begin(id, FINAL_EPOCH, &[], &[], 0),
            Ok(Begin::Full {
                session_id: INVALID_SESSION_ID
            })
        );
        assert!(cache.is_empty());
        let id = open(&mut cache, &[(key("t", 0), w(0))]);
        let Ok(Begin::Full { session_id: again }) = cache.begin(id, INITIAL_EPOCH, &[], &[], 0)
        else {
            panic!()
        };
        assert_ne!(again, id);
        assert_eq!(cache.len(), 1);
    }

    #[test]
    fn a_full_cache_evicts_only_idle_sessions() {
        let mut cache = FetchSessions::new(0, 1, 2);
        let first = open(&mut cache, &[]);
        // A second session, last used a little later than the first.
        assert!(cache.begin(0, INITIAL_EPOCH, &[], &[], 500).is_ok());
        // Both in use: no room, the client goes sessionless.
        let Ok(Begin::Full { session_id }) = cache.begin(0, INITIAL_EPOCH, &[], &[], 1000) else {
            panic!()
        };
        assert_eq!(session_id, INVALID_SESSION_ID);
        // Once the oldest has idled long enough, it makes room.
        let Ok(Begin::Full { session_id }) =
            cache.begin(0, INITIAL_EPOCH, &[], &[], EVICTION_IDLE_MS)
        else {
            panic!()
        };
        assert_ne!(session_id, INVALID_SESSION_ID);
        assert_eq!(cache.len(), 2);
        assert_eq!(
            cache.begin(first, 1, &[], &[], EVICTION_IDLE_MS),
            Err(ResponseError::FetchSessionIdNotFound)
        );
    }

    #[test]
    fn epochs_wrap_to_one() {
        assert_eq!(next_epoch(1), 2);
        assert_eq!(next_epoch(i32::MAX), 1);
    }
}
