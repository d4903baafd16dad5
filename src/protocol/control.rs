//! Control batches (KIP-98): the commit or abort marker a transaction coordinator writes into
//! each partition of a transaction. One record: key = version 0 and type (0 abort, 1 commit);
//! value = version 0 and the coordinator's epoch. The batch carries the producer's id and
//! epoch, and the transactional and control attribute bits.

use super::batch::{self, ATTR_CONTROL, ATTR_TRANSACTIONAL};

/// A marker batch (base offset 0, given on append) ending the transaction of
/// (`producer_id`, `producer_epoch`): commit or abort.
pub fn marker(
    producer_id: i64,
    producer_epoch: i16,
    commit: bool,
    coordinator_epoch: i32,
    timestamp_ms: i64,
) -> Vec<u8> {
    let key = [0, 0, 0, commit as u8];
    let mut value = vec![0, 0];
    value.extend_from_slice(&coordinator_epoch.to_be_bytes());
    let b = batch::build(&[(Some(&key[..]), Some(&value[..]))], timestamp_ms);
    stamp(
        b,
        producer_id,
        producer_epoch,
        ATTR_TRANSACTIONAL | ATTR_CONTROL,
    )
}

/// A batch of the broker's own records (`batch::build`) written in (`producer_id`,
/// `producer_epoch`)'s transaction: a transactional offset commit. It carries no sequence
/// number: the producer's sequences count its own batches, and the partition skips the
/// sequence check for the broker's coordinators (`partition::txn::Source::Coordinator`).
pub fn transactional(
    records: &[batch::KeyValue<'_>],
    producer_id: i64,
    producer_epoch: i16,
    timestamp_ms: i64,
) -> Vec<u8> {
    let b = batch::build(records, timestamp_ms);
    stamp(b, producer_id, producer_epoch, ATTR_TRANSACTIONAL)
}

/// Sets a built batch's attributes and producer, and seals it again.
fn stamp(mut b: Vec<u8>, producer_id: i64, producer_epoch: i16, attributes: i16) -> Vec<u8> {
    b[21..23].copy_from_slice(&attributes.to_be_bytes());
    b[43..51].copy_from_slice(&producer_id.to_be_bytes());
    b[51..53].copy_from_slice(&producer_epoch.to_be_bytes());
    batch::seal(&mut b);
    b
}

/// The transaction coordinator epoch the marker `b` carries (its value: version 0, then the
/// epoch); None when its record is not such a value.
pub fn coordinator_epoch(b: &[u8]) -> Option<i32> {
    let records = batch::records(b)?;
    match records.first()?.value? {
        [0, 0, a, b, c, d, ..] => Some(i32::from_be_bytes([*a, *b, *c, *d])),
        _ => None,
    }
}

/// Whether the control batch `b` commits (true) or aborts (false) its transaction; None when
/// its record is not a marker this broker knows.
pub fn commits(b: &[u8]) -> Option<bool> {
    let records = batch::records(b)?;
    match records.first()?.key? {
        [0, 0, 0, 1] => Some(true),
        [0, 0, 0, 0] => Some(false),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn markers_are_valid_control_batches_of_their_producer() {
        for commit in [true, false] {
            assert_eq!(
                coordinator_epoch(&marker(4000, 3, commit, 7, 1_700_000_000_000)),
                Some(7)
            );
            let b = marker(4000, 3, commit, 7, 1_700_000_000_000);
            let h = batch::validate(&b).expect("a valid batch");
            assert!(h.is_control() && h.is_transactional());
            assert_eq!(
                (h.producer_id, h.producer_epoch, h.record_count),
                (4000, 3, 1)
            );
            assert_eq!(commits(&b), Some(commit));
            let r = batch::records(&b).unwrap();
            assert_eq!(r[0].value, Some(&[0, 0, 0, 0, 0, 7][..]));
        }
        let plain = batch::build(&[(None, Some(&b"x"[..]))], 0);
        assert!(!batch::parse_header(&plain).unwrap().is_control());
        let t = transactional(&[(Some(&b"k"[..]), Some(&b"v"[..]))], 4000, 3, 0);
        let h = batch::validate(&t).expect("a valid batch");
        assert!(h.is_transactional() && !h.is_control());
        assert_eq!(
            (h.producer_id, h.producer_epoch, h.base_sequence),
            (4000, 3, -1)
        );
    }
}
