//! Kafka's record schemas for `__transaction_state`, so that its contents read as Kafka's do:
//! key v0: the transactional id → value v0: producer id, producer epoch, transaction timeout,
//! state, the transaction's partitions (per topic), last update and start timestamps. A null
//! value is a tombstone (an expired id).

use super::state::{State, TxnPartition, TxnRecord};
use crate::protocol::wire::{Reader, WireError, WireResult};
use bytes::{BufMut, Bytes, BytesMut};
use std::collections::{BTreeMap, BTreeSet};

const KEY_VERSION: i16 = 0;
const VALUE_VERSION: i16 = 0;
/// Bound on the partitions one record may name (a transaction spans at most this many).
pub const MAX_PARTITIONS: usize = 100_000;

fn put_string(b: &mut BytesMut, s: &str) {
    b.put_i16(s.len() as i16);
    b.put_slice(s.as_bytes());
}

pub fn encode_key(transactional_id: &str) -> Bytes {
    let mut b = BytesMut::new();
    b.put_i16(KEY_VERSION);
    put_string(&mut b, transactional_id);
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
    let mut b = BytesMut::new();
    b.put_i16(VALUE_VERSION);
    b.put_i64(t.producer_id);
    b.put_i16(t.producer_epoch);
    b.put_i32(t.timeout_ms);
    b.put_i8(t.state.code());
    let mut by_topic: BTreeMap<&str, Vec<i32>> = BTreeMap::new();
    for (topic, partition) in &t.partitions {
        by_topic.entry(topic).or_default().push(*partition);
    }
    b.put_i32(by_topic.len() as i32);
    for (topic, partitions) in by_topic {
        put_string(&mut b, topic);
        b.put_i32(partitions.len() as i32);
        for p in partitions {
            b.put_i32(p);
        }
    }
    b.put_i64(t.last_update_ms);
    b.put_i64(t.start_ms);
    b.freeze()
}

pub fn decode_value(raw: &[u8]) -> WireResult<TxnRecord> {
    let mut r = Reader::new(Bytes::copy_from_slice(raw), false);
    if r.i16()? != VALUE_VERSION {
        return Err(WireError("unknown __transaction_state value version"));
    }
    let producer_id = r.i64()?;
    let producer_epoch = r.i16()?;
    let timeout_ms = r.i32()?;
    let state = State::from_code(r.i8()?).ok_or(WireError("unknown transaction state"))?;
    let partitions = decode_partitions(&mut r)?;
    Ok(TxnRecord {
        producer_id,
        producer_epoch,
        timeout_ms,
        state,
        partitions,
        last_update_ms: r.i64()?,
        start_ms: r.i64()?,
    })
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
}
