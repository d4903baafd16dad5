//! Record batch v2 (magic 2) header: parsing, validation and the fields the broker rewrites.
//!
//! Layout (big-endian), offsets in bytes from the start of the batch:
//! ```text
//!  0 baseOffset i64        8 batchLength i32     12 partitionLeaderEpoch i32
//! 16 magic i8             17 crc u32            21 attributes i16
//! 23 lastOffsetDelta i32  27 baseTimestamp i64  35 maxTimestamp i64
//! 43 producerId i64       51 producerEpoch i16  53 baseSequence i32
//! 57 recordCount i32      61 records...
//! ```
//! The CRC32C covers bytes 21.. (attributes to the end), so the broker may rewrite baseOffset and
//! partitionLeaderEpoch without recomputing it; LogAppendTime rewrites covered fields and does.

/// Bytes before the records of a v2 batch.
pub const HEADER_BYTES: usize = 61;
/// Bytes of baseOffset plus batchLength: the prefix not counted in batchLength.
pub const LOG_OVERHEAD: usize = 12;
const CRC_START: usize = 21;
const ATTR_TIMESTAMP_TYPE: i16 = 1 << 3;
pub const ATTR_COMPRESSION_MASK: i16 = 0x7;
/// Written by a transactional producer (KIP-98).
pub const ATTR_TRANSACTIONAL: i16 = 1 << 4;
/// A control batch: a transaction marker.
pub const ATTR_CONTROL: i16 = 1 << 5;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BatchError {
    /// Fewer bytes than a header, or a batchLength that disagrees with the bytes present.
    Truncated,
    /// magic is not 2: the broker only stores the v2 format.
    UnsupportedMagic(i8),
    /// The CRC32C of the batch does not match its content.
    CorruptCrc,
    /// A field that can never hold in a valid batch (negative count, offset delta mismatch).
    Invalid(&'static str),
}

/// A parsed view of a batch header. Cheap: reads fixed offsets only.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BatchHeader {
    pub base_offset: i64,
    /// Whole batch size in bytes, LOG_OVERHEAD included.
    pub size_bytes: usize,
    pub partition_leader_epoch: i32,
    pub attributes: i16,
    pub last_offset_delta: i32,
    pub base_timestamp: i64,
    pub max_timestamp: i64,
    pub producer_id: i64,
    pub producer_epoch: i16,
    pub base_sequence: i32,
    pub record_count: i32,
}

impl BatchHeader {
    /// The batch's last offset. Saturating: the fields may come from a damaged file or a
    /// client, and a base offset near i64::MAX must read as out of range (recovery and the
    /// segment's offset bound refuse it), not wrap to a small offset.
    pub fn last_offset(&self) -> i64 {
        self.base_offset
            .saturating_add(self.last_offset_delta as i64)
    }
    pub fn next_offset(&self) -> i64 {
        self.last_offset().saturating_add(1)
    }
    /// Written by a transactional producer (or a marker of its transaction).
    pub fn is_transactional(&self) -> bool {
        self.attributes & ATTR_TRANSACTIONAL != 0
    }

    /// A control batch: a transaction marker (`control.rs`).
    pub fn is_control(&self) -> bool {
        self.attributes & ATTR_CONTROL != 0
    }

    /// Whether the batch comes from an idempotent (or transactional) producer.
    pub fn is_idempotent(&self) -> bool {
        self.producer_id >= 0
    }

    /// The sequence number of the batch's last record (sequences wrap at i32::MAX).
    pub fn last_sequence(&self) -> i32 {
        ((self.base_sequence as i64 + self.last_offset_delta as i64) % (i32::MAX as i64 + 1)) as i32
    }

    pub fn compression(&self) -> i16 {
        self.attributes & ATTR_COMPRESSION_MASK
    }
}

fn i16_at(b: &[u8], at: usize) -> i16 {
    i16::from_be_bytes([b[at], b[at + 1]])
}
fn i32_at(b: &[u8], at: usize) -> i32 {
    i32::from_be_bytes(b[at..at + 4].try_into().expect("4 bytes"))
}
fn i64_at(b: &[u8], at: usize) -> i64 {
    i64::from_be_bytes(b[at..at + 8].try_into().expect("8 bytes"))
}

/// Reads the size of the batch that starts at `buf[0]` from its first 12 bytes, without any
/// other check. None when fewer than 12 bytes are present or the length is impossible.
pub fn peek_size(buf: &[u8]) -> Option<usize> {
    if buf.len() < LOG_OVERHEAD {
        return None;
    }
    let len = i32_at(buf, 8);
    if len < (HEADER_BYTES - LOG_OVERHEAD) as i32 {
        return None;
    }
    Some(LOG_OVERHEAD + len as usize)
}

/// Parses the header of the batch at the start of `buf`. `buf` may extend past the batch.
pub fn parse_header(buf: &[u8]) -> Result<BatchHeader, BatchError> {
    if buf.len() < HEADER_BYTES {
        return Err(BatchError::Truncated);
    }
    let size_bytes = peek_size(buf).ok_or(BatchError::Truncated)?;
    let magic = buf[16] as i8;
    if magic != 2 {
        return Err(BatchError::UnsupportedMagic(magic));
    }
    let header = BatchHeader {
        base_offset: i64_at(buf, 0),
        size_bytes,
        partition_leader_epoch: i32_at(buf, 12),
        attributes: i16_at(buf, 21),
        last_offset_delta: i32_at(buf, 23),
        base_timestamp: i64_at(buf, 27),
        max_timestamp: i64_at(buf, 35),
        producer_id: i64_at(buf, 43),
        producer_epoch: i16_at(buf, 51),
        base_sequence: i32_at(buf, 53),
        record_count: i32_at(buf, 57),
    };
    if header.record_count <= 0 {
        return Err(BatchError::Invalid("record count is not positive"));
    }
    // A stored batch may span more offsets than it holds records: compaction removes records
    // and keeps the batch's offset range (as Kafka does). Producers' batches are dense
    // (checked in `validate_all`).
    if header.last_offset_delta < header.record_count - 1 {
        return Err(BatchError::Invalid(
            "lastOffsetDelta is less than recordCount - 1",
        ));
    }
    Ok(header)
}

/// Parses and fully validates one whole batch: `buf` must hold exactly the batch.
pub fn validate(buf: &[u8]) -> Result<BatchHeader, BatchError> {
    let header = parse_header(buf)?;
    if header.size_bytes != buf.len() {
        return Err(BatchError::Truncated);
    }
    let stored = u32::from_be_bytes(buf[17..21].try_into().expect("4 bytes"));
    if crc32c::crc32c(&buf[CRC_START..]) != stored {
        return Err(BatchError::CorruptCrc);
    }
    // The count decides how far the log's offsets advance, so it must be one the bytes can
    // hold. Records are not parsed on the produce path; a compressed batch is bounded only by
    // the offset range check at append (see PartitionLog::needs_roll).
    if header.compression() == 0
        && header.record_count as usize > (header.size_bytes - HEADER_BYTES) / MIN_RECORD_BYTES
    {
        return Err(BatchError::Invalid(
            "recordCount is more than the batch's bytes can hold",
        ));
    }
    Ok(header)
}

/// Splits a produce request's records field into validated batches. Kafka allows several
/// batches in one field; each must be whole.
pub fn validate_all(mut buf: &[u8]) -> Result<Vec<BatchHeader>, BatchError> {
    let mut out = Vec::new();
    if buf.is_empty() {
        return Err(BatchError::Truncated);
    }
    while !buf.is_empty() {
        let size = peek_size(buf).ok_or(BatchError::Truncated)?;
        if size > buf.len() {
            return Err(BatchError::Truncated);
        }
        let header = validate(&buf[..size])?;
        if header.last_offset_delta != header.record_count - 1 {
            return Err(BatchError::Invalid(
                "lastOffsetDelta does not match recordCount",
            ));
        }
        out.push(header);
        buf = &buf[size..];
    }
    Ok(out)
}

/// Rewrites the fields the broker owns in a stored copy of the batch: baseOffset and
/// partitionLeaderEpoch always; with `log_append_time_ms`, the timestamp type bit and
/// maxTimestamp too, followed by a fresh CRC (those fields are covered by it).
pub fn assign(
    batch: &mut [u8],
    base_offset: i64,
    leader_epoch: i32,
    log_append_time_ms: Option<i64>,
) {
    let (head, records) = batch.split_at_mut(HEADER_BYTES);
    let head: &mut [u8; HEADER_BYTES] = head.try_into().expect("a whole header");
    assign_header(head, records, base_offset, leader_epoch, log_append_time_ms);
}

/// `assign` for a batch kept in two pieces: a copy of its header, rewritten here, and its
/// records, left where they are (in the produce request) and only read for a new CRC.
pub fn assign_header(
    head: &mut [u8; HEADER_BYTES],
    records: &[u8],
    base_offset: i64,
    leader_epoch: i32,
    log_append_time_ms: Option<i64>,
) {
    head[0..8].copy_from_slice(&base_offset.to_be_bytes());
    head[12..16].copy_from_slice(&leader_epoch.to_be_bytes());
    if let Some(ts) = log_append_time_ms {
        let attrs = i16_at(head, 21) | ATTR_TIMESTAMP_TYPE;
        head[21..23].copy_from_slice(&attrs.to_be_bytes());
        head[35..43].copy_from_slice(&ts.to_be_bytes());
        let crc = crc32c::crc32c_append(crc32c::crc32c(&head[CRC_START..]), records);
        head[17..CRC_START].copy_from_slice(&crc.to_be_bytes());
    }
}

/// Writes the CRC32C of a whole batch's covered bytes into its crc field.
pub fn seal(batch: &mut [u8]) {
    let crc = crc32c::crc32c(&batch[CRC_START..]);
    batch[17..CRC_START].copy_from_slice(&crc.to_be_bytes());
}

/// A record's key and value as `build` takes them; None is null.
pub type KeyValue<'a> = (Option<&'a [u8]>, Option<&'a [u8]>);

/// Builds an uncompressed batch (base offset 0) of records with these keys and values (None is
/// null, a tombstone for a value), all stamped `timestamp`. Used for the broker's own internal
/// records, and by tests and benches.
pub fn build(records: &[KeyValue<'_>], timestamp: i64) -> Vec<u8> {
    assert!(!records.is_empty(), "a batch holds at least one record");
    let mut body = Vec::new();
    for (i, (key, value)) in records.iter().enumerate() {
        let mut rec = Vec::new();
        rec.push(0u8); // attributes
        put_varint(&mut rec, 0); // timestamp delta
        put_varint(&mut rec, i as i64); // offset delta
        for field in [key, value] {
            match field {
                Some(b) => {
                    put_varint(&mut rec, b.len() as i64);
                    rec.extend_from_slice(b);
                }
                None => put_varint(&mut rec, -1),
            }
        }
        put_varint(&mut rec, 0); // headers
        put_varint(&mut body, rec.len() as i64);
        body.extend(rec);
    }
    let count = records.len() as i32;
    let mut b = Vec::with_capacity(HEADER_BYTES + body.len());
    b.extend(0i64.to_be_bytes());
    b.extend(((HEADER_BYTES - LOG_OVERHEAD + body.len()) as i32).to_be_bytes());
    b.extend(0i32.to_be_bytes());
    b.push(2);
    b.extend(0u32.to_be_bytes());
    b.extend(0i16.to_be_bytes());
    b.extend((count - 1).to_be_bytes());
    b.extend(timestamp.to_be_bytes());
    b.extend(timestamp.to_be_bytes());
    b.extend((-1i64).to_be_bytes());
    b.extend((-1i16).to_be_bytes());
    b.extend((-1i32).to_be_bytes());
    b.extend(count.to_be_bytes());
    b.extend(body);
    seal(&mut b);
    b
}

/// A valid uncompressed batch of `count` keyless records of `value_len` bytes each.
pub fn synthetic(base_offset: i64, count: i32, value_len: usize, timestamp: i64) -> Vec<u8> {
    let value = vec![b'v'; value_len];
    let records: Vec<_> = (0..count).map(|_| (None, Some(&value[..]))).collect();
    let mut b = build(&records, timestamp);
    b[0..8].copy_from_slice(&base_offset.to_be_bytes());
    b
}

/// The smallest record: one byte each for its length, attributes, timestamp delta, offset
/// delta, key length, value length and header count.
const MIN_RECORD_BYTES: usize = 7;

/// One record of an uncompressed batch.
pub struct Record<'a> {
    pub offset: i64,
    pub timestamp: i64,
    pub key: Option<&'a [u8]>,
    pub value: Option<&'a [u8]>,
    /// The whole record as stored, its length prefix included.
    pub bytes: &'a [u8],
}

/// The records of one whole uncompressed batch; None if it is compressed or malformed: every
/// record must parse to exactly its length (headers included) and the records must fill the
/// batch, so that a record's bytes can be copied on their own (compaction).
pub fn records(batch: &[u8]) -> Option<Vec<Record<'_>>> {
    let h = parse_header(batch).ok()?;
    if h.compression() != 0 || h.size_bytes > batch.len() {
        return None;
    }
    // The count is untrusted: reserve no more records than the bytes could hold.
    let fit = h.size_bytes.saturating_sub(HEADER_BYTES) / MIN_RECORD_BYTES;
    let mut out = Vec::with_capacity((h.record_count as usize).min(fit));
    let mut at = HEADER_BYTES;
    let end = h.size_bytes;
    for _ in 0..h.record_count {
        let (len, n) = get_varint(batch.get(at..end)?)?;
        let rec_end = (at + n).checked_add(usize::try_from(len).ok()?)?;
        let mut p = at + n + 1; // attributes
        let (timestamp_delta, n) = get_varint(batch.get(p..rec_end)?)?;
        p += n;
        let (offset_delta, n) = get_varint(batch.get(p..rec_end)?)?;
        p += n;
        let mut fields = [None, None];
        for f in &mut fields {
            let (l, n) = get_varint(batch.get(p..rec_end)?)?;
            p += n;
            if l >= 0 {
                let field_end = p.checked_add(usize::try_from(l).ok()?)?;
                *f = Some(batch.get(p..field_end)?);
                p = field_end;
            }
        }
        // Headers: a count, then a key and a (nullable) value each. Every step reads at least
        // a byte, so an untrusted count runs out of bytes, not of time.
        let (headers, n) = get_varint(batch.get(p..rec_end)?)?;
        p += n;
        for _ in 0..headers.max(0) {
            for nullable in [false, true] {
                let (l, n) = get_varint(batch.get(p..rec_end)?)?;
                p += n;
                if l >= 0 {
                    p = p.checked_add(usize::try_from(l).ok()?)?;
                } else if !nullable {
                    return None;
                }
                if p > rec_end {
                    return None;
                }
            }
        }
        if headers < 0 || p != rec_end {
            return None;
        }
        out.push(Record {
            offset: h.base_offset.checked_add(offset_delta)?,
            timestamp: h.base_timestamp.checked_add(timestamp_delta)?,
            key: fields[0],
            value: fields[1],
            bytes: batch.get(at..rec_end)?,
        });
        at = rec_end;
    }
    (at == end).then_some(out)
}

/// Zig-zag varint: value and bytes read.
pub fn get_varint(b: &[u8]) -> Option<(i64, usize)> {
    let mut raw: u64 = 0;
    for (i, &byte) in b.iter().take(10).enumerate() {
        raw |= ((byte & 0x7f) as u64) << (7 * i);
        if byte & 0x80 == 0 {
            return Some((((raw >> 1) as i64) ^ -((raw & 1) as i64), i + 1));
        }
    }
    None
}

fn put_varint(out: &mut Vec<u8>, v: i64) {
    let mut z = ((v << 1) ^ (v >> 63)) as u64;
    loop {
        if z < 0x80 {
            out.push(z as u8);
            return;
        }
        out.push((z as u8 & 0x7f) | 0x80);
        z >>= 7;
    }
}

#[cfg(test)]
pub mod tests {
    use super::*;

    #[test]
    fn a_base_offset_near_the_end_of_the_range_saturates_instead_of_wrapping() {
        // Found by the recovery fuzz target: a damaged segment's base offset of i64::MAX
        // wrapped its last offset to a small one, which passed recovery's range check.
        let h = parse_header(&synthetic(i64::MAX - 1, 3, 10, 1000)).unwrap();
        assert_eq!(h.last_offset(), i64::MAX);
        assert_eq!(h.next_offset(), i64::MAX);
    }

    #[test]
    fn valid_batch_parses() {
        let b = synthetic(0, 3, 10, 1000);
        let h = validate(&b).unwrap();
        assert_eq!(h.record_count, 3);
        assert_eq!(h.next_offset(), 3);
        assert_eq!(h.size_bytes, b.len());
    }

    #[test]
    fn bad_crc_is_detected() {
        let mut b = synthetic(0, 3, 10, 1000);
        let last = b.len() - 1;
        b[last] ^= 1;
        assert_eq!(validate(&b), Err(BatchError::CorruptCrc));
    }

    #[test]
    fn truncation_and_magic() {
        let b = synthetic(0, 3, 10, 1000);
        assert_eq!(validate(&b[..b.len() - 1]), Err(BatchError::Truncated));
        assert_eq!(validate(&b[..20]), Err(BatchError::Truncated));
        let mut m = b.clone();
        m[16] = 1;
        assert_eq!(validate(&m), Err(BatchError::UnsupportedMagic(1)));
        assert_eq!(validate_all(&[]), Err(BatchError::Truncated));
    }

    #[test]
    fn several_batches() {
        let mut b = synthetic(0, 2, 5, 1);
        b.extend(synthetic(0, 4, 5, 2));
        let hs = validate_all(&b).unwrap();
        assert_eq!(hs.len(), 2);
        assert_eq!(hs[1].record_count, 4);
    }

    #[test]
    fn build_and_read_records() {
        let b = build(
            &[
                (Some(b"k1"), Some(b"v1")),
                (None, None),
                (Some(b""), Some(b"vv")),
            ],
            9,
        );
        validate(&b).unwrap();
        let r = records(&b).unwrap();
        assert_eq!(r.len(), 3);
        assert_eq!((r[0].key, r[0].value), (Some(&b"k1"[..]), Some(&b"v1"[..])));
        assert_eq!((r[1].key, r[1].value, r[1].offset), (None, None, 1));
        assert_eq!((r[2].key, r[2].value), (Some(&b""[..]), Some(&b"vv"[..])));
    }

    #[test]
    fn assign_keeps_crc_valid() {
        let mut b = synthetic(0, 3, 10, 1000);
        assign(&mut b, 42, 7, None);
        let h = validate(&b).unwrap();
        assert_eq!((h.base_offset, h.partition_leader_epoch), (42, 7));
        assign(&mut b, 42, 7, Some(5000));
        let h = validate(&b).unwrap();
        assert_eq!(h.max_timestamp, 5000);
        assert_ne!(h.attributes & ATTR_TIMESTAMP_TYPE, 0);
    }

    /// Found by the record_batch fuzz target: a header claiming 2^31-1 records made `records`
    /// reserve 45 GB before reading any.
    #[test]
    fn a_huge_record_count_reserves_nothing_unreasonable() {
        let mut b = build(&[(None, Some(b"v"))], 1);
        let count = i32::MAX;
        b[23..27].copy_from_slice(&(count - 1).to_be_bytes());
        b[57..61].copy_from_slice(&count.to_be_bytes());
        seal(&mut b);
        assert!(records(&b).is_none(), "one record present, not 2^31-1");
        // Nor may such a batch be appended: the count would move the log's offsets.
        assert!(matches!(validate(&b), Err(BatchError::Invalid(_))));
    }

    /// Found by the record_batch fuzz target: offset deltas and field lengths near their
    /// limits overflowed the arithmetic that places them.
    #[test]
    fn extreme_record_fields_are_rejected_not_overflowed() {
        let mut b = build(&[(None, Some(b"v"))], 1);
        b[0..8].copy_from_slice(&i64::MAX.to_be_bytes());
        // The record: length, attributes, timestamp delta, then offset delta = 1.
        let offset_delta_at = HEADER_BYTES + 3;
        assert_eq!(b[offset_delta_at], 0);
        b[offset_delta_at] = 2; // zigzag 1
        assert!(records(&b).is_none());
    }

    /// Found by the record_batch fuzz target once compaction copied records on their own: a
    /// record without its header count, or bytes after the last record, must not pass as
    /// records (a batch rebuilt from them would not validate).
    #[test]
    fn records_must_parse_exactly() {
        let b = build(&[(Some(b"k"), Some(b"v")), (Some(b"j"), Some(b"w"))], 1);
        let whole = records(&b).unwrap();
        assert_eq!(
            whole.iter().map(|r| r.bytes.len()).sum::<usize>(),
            b.len() - HEADER_BYTES
        );
        // Trailing bytes inside the batch.
        let mut longer = b.clone();
        longer.push(0);
        let length = (longer.len() - LOG_OVERHEAD) as i32;
        longer[8..12].copy_from_slice(&length.to_be_bytes());
        seal(&mut longer);
        assert!(records(&longer).is_none());
        // A record whose stated length leaves out its header count.
        let mut short = b.clone();
        short[HEADER_BYTES] -= 2; // zigzag: length one less
        assert!(records(&short).is_none());
    }
}
