//! Kafka's record schemas for `__transaction_state`, so that its contents read as Kafka's do:
//! key v0: the transactional id → value v0: producer id, producer epoch, transaction timeout,
//! state, the transaction's partitions (per topic), last update and start timestamps; value
//! v1 (flexible) adds, as tagged fields, the previous and next producer ids of a version-2
//! producer whose epoch overflowed (KIP-890 part 2). A value is written as v0 unless it needs
//! those fields. A null value is a tombstone (an expired id).

use super::state::{State, TxnPartition, TxnRecord};
use crate::protocol::wire::{Reader, WireError, WireResult, Writer};
use bytes::{BufMut, Bytes, BytesMut};
use std::collections::{BTreeMap, BTreeSet};

const KEY_VERSION: i16 = 0;
/// The value versions: v1 is flexible, with tagged fields.
const VALUE_V0: i16 = 0;
const VALUE_V1: i16 = 1;
/// Value v1's tags: PreviousProducerId, NextProducerId (ClientTransactionVersion, tag 2, is
/// read past: nothing here depends on it).
const TAG_PREVIOUS_PRODUCER_ID: u32 = 0;
const TAG_NEXT_PRODUCER_ID: u32 = 1;
/// Bound on the partitions one record may name (a transaction spans at most this many).
pub const MAX_PARTITIONS: usize = 100_000;

pub fn encode_key(transactional_id: &str) -> Bytes {
    let mut b = BytesMut::new();
    b.put_i16(KEY_VERSION);
    Writer {
        buf: &mut b,
        flexible: false,
    }
    .string(transactional_id);
    b.freeze()
}

pub fn decode_key(raw: &[u8]) -> WireResult<String> {
    let mut r = Reader::new(Bytes::copy_from_slice(raw), false);
    match r.i16()? {
        KEY_VERSION => r.string(),
        _ => Err(WireError("unknown __transaction_state key version")),
    }
}

pub fn encode_value(t: &TxnRecord) -> Bytes {
    let tags: Vec<(u32, i64)> = [
        (TAG_PREVIOUS_PRODUCER_ID, t.previous_producer_id),
        (TAG_NEXT_PRODUCER_ID, t.next_producer_id),
    ]
    .into_iter()
    .filter(|&(_, id)| id != -1)
    .collect();
    let flexible = !tags.is_empty();
    let mut b = BytesMut::new();
    b.put_i16(if flexible { VALUE_V1 } else { VALUE_V0 });
    b.put_i64(t.producer_id);
    b.put_i16(t.producer_epoch);
    b.put_i32(t.timeout_ms);
    b.put_i8(t.state.code());
    let mut by_topic: BTreeMap<&str, Vec<i32>> = BTreeMap::new();
    for (topic, partition) in &t.partitions {
        by_topic.entry(topic).or_default().push(*partition);
    }
    let mut w = Writer {
        buf: &mut b,
        flexible,
    };
    w.array_len(by_topic.len());
    for (topic, partitions) in by_topic {
        w.string(topic);
        w.array_len(partitions.len());
        for p in partitions {
            w.buf.put_i32(p);
        }
        w.empty_tagged_fields();
    }
    w.buf.put_i64(t.last_update_ms);
    w.buf.put_i64(t.start_ms);
    if flexible {
        w.uvarint(tags.len() as u32);
        for (tag, id) in tags {
            w.uvarint(tag);
            w.uvarint(8);
            w.buf.put_i64(id);
        }
    }
    b.freeze()
}

pub fn decode_value(raw: &[u8]) -> WireResult<TxnRecord> {
    let mut r = Reader::new(Bytes::copy_from_slice(raw), false);
    let flexible = match r.i16()? {
        VALUE_V0 => false,
        VALUE_V1 => true,
        _ => return Err(WireError("unknown __transaction_state value version")),
    };
    let mut r = Reader::new(r.into_rest(), flexible);
    let producer_id = r.i64()?;
    let producer_epoch = r.i16()?;
    let timeout_ms = r.i32()?;
    let state = State::from_code(r.i8()?).ok_or(WireError("unknown transaction state"))?;
    let partitions = decode_partitions(&mut r)?;
    let mut t = TxnRecord {
        producer_id,
        producer_epoch,
        timeout_ms,
        state,
        partitions,
        last_update_ms: r.i64()?,
        start_ms: r.i64()?,
        previous_producer_id: -1,
        next_producer_id: -1,
    };
    r.tagged_fields(|tag, value| {
        let id = || Reader::new(value.clone(), false).i64();
        match tag {
            TAG_PREVIOUS_PRODUCER_ID => t.previous_producer_id = id()?,
            TAG_NEXT_PRODUCER_ID => t.next_producer_id = id()?,
            _ => {}
        }
        Ok(())
    })?;
    Ok(t)
}

fn decode_partitions(r: &mut Reader) -> WireResult<BTreeSet<TxnPartition>> {
    let mut out = BTreeSet::new();
    for _ in 0..r.array_len()?.unwrap_or(0) {
        let topic = r.string()?;
        for _ in 0..r.array_len()?.unwrap_or(0) {
            if out.len() >= MAX_PARTITIONS {
                return Err(WireError("too many partitions in a transaction record"));
            }
            out.insert((topic.clone(), r.i32()?));
        }
        r.skip_tagged_fields()?;
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_round_trip_in_kafkas_layout() {
        let t = TxnRecord {
            producer_id: 4000,
            producer_epoch: 3,
            timeout_ms: 60_000,
            state: State::Ongoing,
            partitions: [
                ("a".to_string(), 1),
                ("a".to_string(), 0),
                ("b".to_string(), 2),
            ]
            .into_iter()
            .collect(),
            last_update_ms: 1_700_000_000_123,
            start_ms: 1_700_000_000_000,
            previous_producer_id: -1,
            next_producer_id: -1,
        };
        let v = encode_value(&t);
        // version, pid, epoch, timeout, state, then 2 topics: "a" [0, 1], "b" [2].
        assert_eq!(&v[..2], &[0, 0]);
        assert_eq!(&v[2..10], &4000i64.to_be_bytes());
        assert_eq!(v[16], 1, "Ongoing");
        assert_eq!(&v[17..21], &2i32.to_be_bytes());
        assert_eq!(decode_value(&v).unwrap(), t);
        assert_eq!(decode_key(&encode_key("my-txn")).unwrap(), "my-txn");
        assert!(decode_value(&v[..v.len() - 3]).is_err(), "truncated");
        assert!(decode_key(&[0, 9, 0, 0]).is_err(), "unknown key version");
    }

    #[test]
    fn an_overflowing_producer_is_written_as_flexible_v1_with_tagged_ids() {
        let t = TxnRecord {
            producer_id: 4000,
            producer_epoch: i16::MAX,
            timeout_ms: 60_000,
            state: State::PrepareCommit,
            partitions: [("a".to_string(), 0), ("b".to_string(), 2)]
                .into_iter()
                .collect(),
            last_update_ms: 5,
            start_ms: 4,
            previous_producer_id: 3000,
            next_producer_id: 5000,
        };
        let v = encode_value(&t);
        assert_eq!(&v[..2], &[0, 1], "version 1");
        // After the fixed fields: a compact array of 2 topics, "a" as a compact string.
        assert_eq!(&v[17..20], &[3, 2, b'a']);
        // Ends with 2 tagged fields: tag 0 of 8 bytes (3000), tag 1 of 8 bytes (5000).
        let tail = &v[v.len() - 21..];
        assert_eq!(&tail[..3], &[2, 0, 8]);
        assert_eq!(&tail[3..11], &3000i64.to_be_bytes());
        assert_eq!(&tail[11..13], &[1, 8]);
        assert_eq!(&tail[13..], &5000i64.to_be_bytes());
        assert_eq!(decode_value(&v).unwrap(), t);
        // Unknown tags (Kafka's ClientTransactionVersion, tag 2) are read past.
        let mut with_tv = v[..v.len() - 21].to_vec();
        with_tv.extend_from_slice(&[1, 2, 2, 0, 2]);
        let read = decode_value(&with_tv).unwrap();
        assert_eq!((read.previous_producer_id, read.next_producer_id), (-1, -1));
        assert!(decode_value(&v[..v.len() - 4]).is_err(), "truncated tag");
    }
}
