//! Kafka's record schemas for `__consumer_offsets`, so that its contents read as Kafka's do:
//! - key v1 (offset commit): group, topic, partition → value v3: offset, leader epoch,
//!   metadata, commit timestamp;
//! - key v2 (group metadata): group → value v3: protocol type, generation, protocol, leader,
//!   state timestamp, members.
//!
//! A null value is a tombstone.

use super::state::{CommittedOffset, StoredGroup, StoredMember};
use crate::protocol::wire::{Reader, WireResult};
use bytes::{BufMut, Bytes, BytesMut};

const OFFSET_KEY_VERSION: i16 = 1;
const GROUP_KEY_VERSION: i16 = 2;
const OFFSET_VALUE_VERSION: i16 = 3;
const GROUP_VALUE_VERSION: i16 = 3;

#[derive(Debug, Clone, PartialEq)]
pub enum Key {
    Offset {
        group: String,
        topic: String,
        partition: i32,
    },
    Group {
        group: String,
    },
}

fn put_string(b: &mut BytesMut, s: &str) {
    b.put_i16(s.len() as i16);
    b.put_slice(s.as_bytes());
}

fn put_nullable_string(b: &mut BytesMut, s: Option<&str>) {
    match s {
        Some(s) => put_string(b, s),
        None => b.put_i16(-1),
    }
}

fn put_bytes(b: &mut BytesMut, v: &[u8]) {
    b.put_i32(v.len() as i32);
    b.put_slice(v);
}

impl Key {
    pub fn encode(&self) -> Bytes {
        let mut b = BytesMut::new();
        match self {
            Key::Offset {
                group,
                topic,
                partition,
            } => {
                b.put_i16(OFFSET_KEY_VERSION);
                put_string(&mut b, group);
                put_string(&mut b, topic);
                b.put_i32(*partition);
            }
            Key::Group { group } => {
                b.put_i16(GROUP_KEY_VERSION);
                put_string(&mut b, group);
            }
        }
        b.freeze()
    }

    pub fn decode(raw: &[u8]) -> WireResult<Key> {
        let mut r = Reader::new(Bytes::copy_from_slice(raw), false);
        match r.i16()? {
            0 | 1 => Ok(Key::Offset {
                group: r.string()?,
                topic: r.string()?,
                partition: r.i32()?,
            }),
            2 => Ok(Key::Group { group: r.string()? }),
            _ => Err(crate::protocol::wire::WireError(
                "unknown __consumer_offsets key version",
            )),
        }
    }
}

pub fn encode_offset(o: &CommittedOffset) -> Bytes {
    let mut b = BytesMut::new();
    b.put_i16(OFFSET_VALUE_VERSION);
    b.put_i64(o.offset);
    b.put_i32(o.leader_epoch);
    put_string(&mut b, &o.metadata);
    b.put_i64(o.commit_timestamp_ms);
    b.freeze()
}

pub fn decode_offset(raw: &[u8]) -> WireResult<CommittedOffset> {
    let mut r = Reader::new(Bytes::copy_from_slice(raw), false);
    let version = r.i16()?;
    let offset = r.i64()?;
    let leader_epoch = if version >= 3 { r.i32()? } else { -1 };
    let metadata = r.string()?;
    let commit_timestamp_ms = r.i64()?;
    Ok(CommittedOffset {
        offset,
        leader_epoch,
        metadata,
        commit_timestamp_ms,
    })
}

pub fn encode_group(g: &StoredGroup) -> Bytes {
    let mut b = BytesMut::new();
    b.put_i16(GROUP_VALUE_VERSION);
    put_string(&mut b, &g.protocol_type);
    b.put_i32(g.generation);
    put_nullable_string(&mut b, g.protocol.as_deref());
    put_nullable_string(&mut b, g.leader.as_deref());
    b.put_i64(g.current_state_timestamp_ms);
    b.put_i32(g.members.len() as i32);
    for m in &g.members {
        put_string(&mut b, &m.member_id);
        put_nullable_string(&mut b, m.group_instance_id.as_deref());
        put_string(&mut b, &m.client_id);
        put_string(&mut b, &m.client_host);
        b.put_i32(m.rebalance_timeout_ms);
        b.put_i32(m.session_timeout_ms);
        put_bytes(&mut b, &m.subscription);
        put_bytes(&mut b, &m.assignment);
    }
    b.freeze()
}

pub fn decode_group(raw: &[u8]) -> WireResult<StoredGroup> {
    let mut r = Reader::new(Bytes::copy_from_slice(raw), false);
    let version = r.i16()?;
    let protocol_type = r.string()?;
    let generation = r.i32()?;
    let protocol = r.nullable_string()?;
    let leader = r.nullable_string()?;
    let current_state_timestamp_ms = if version >= 2 { r.i64()? } else { -1 };
    let n = r.array_len()?.unwrap_or(0);
    let mut members = Vec::with_capacity(n);
    for _ in 0..n {
        let member_id = r.string()?;
        let group_instance_id = if version >= 3 {
            r.nullable_string()?
        } else {
            None
        };
        let client_id = r.string()?;
        let client_host = r.string()?;
        let rebalance_timeout_ms = if version >= 1 { r.i32()? } else { 0 };
        let session_timeout_ms = r.i32()?;
        let subscription = r.nullable_bytes()?.unwrap_or_default();
        let assignment = r.nullable_bytes()?.unwrap_or_default();
        members.push(StoredMember {
            member_id,
            group_instance_id,
            client_id,
            client_host,
            rebalance_timeout_ms,
            session_timeout_ms,
            subscription,
            assignment,
        });
    }
    Ok(StoredGroup {
        protocol_type,
        generation,
        protocol,
        leader,
        current_state_timestamp_ms,
        members,
    })
}

/// The topics a consumer-protocol subscription names (empty if it cannot be read).
pub fn subscribed_topics(subscription: &[u8]) -> Vec<String> {
    use kafka_protocol::messages::ConsumerProtocolSubscription;
    use kafka_protocol::protocol::Decodable;
    if subscription.len() < 2 {
        return Vec::new();
    }
    let version = i16::from_be_bytes([subscription[0], subscription[1]]);
    let mut body = Bytes::copy_from_slice(&subscription[2..]);
    match ConsumerProtocolSubscription::decode(&mut body, version.clamp(0, 3)) {
        Ok(s) => s.topics.iter().map(|t| t.to_string()).collect(),
        Err(_) => Vec::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_and_values_round_trip() {
        for k in [
            Key::Offset {
                group: "g".into(),
                topic: "t".into(),
                partition: 3,
            },
            Key::Group { group: "g".into() },
        ] {
            assert_eq!(Key::decode(&k.encode()).unwrap(), k);
        }
        let o = CommittedOffset {
            offset: 42,
            leader_epoch: 0,
            metadata: "m".into(),
            commit_timestamp_ms: 7,
        };
        assert_eq!(decode_offset(&encode_offset(&o)).unwrap(), o);
        let g = StoredGroup {
            protocol_type: "consumer".into(),
            generation: 3,
            protocol: Some("range".into()),
            leader: Some("a".into()),
            current_state_timestamp_ms: 9,
            members: vec![StoredMember {
                member_id: "a".into(),
                group_instance_id: Some("i".into()),
                client_id: "c".into(),
                client_host: "/h".into(),
                rebalance_timeout_ms: 1,
                session_timeout_ms: 2,
                subscription: Bytes::from_static(b"s"),
                assignment: Bytes::from_static(b"x"),
            }],
        };
        assert_eq!(decode_group(&encode_group(&g)).unwrap(), g);
    }
}
