//! Reading whole batches from a planned range of a segment file.

use super::log::ReadPlan;
use crate::protocol::batch::{self, HEADER_BYTES};
use bytes::Bytes;

/// Reads whole batches starting with the batch that holds `offset`, at most `max_bytes` of
/// them, except that the first batch is returned whole even when larger (KIP-74), so that a
/// consumer always makes progress.
pub async fn read_batches(
    plan: &ReadPlan,
    offset: i64,
    max_bytes: usize,
    interval: u32,
) -> std::io::Result<Bytes> {
    let mut position = plan.position;
    let end = plan.position + plan.readable;
    // One index interval of batches may precede the target; read them with the data.
    let mut chunk_len = (max_bytes as u64 + interval as u64).max(HEADER_BYTES as u64);
    // Each pass either finds the target or moves `position` forward by at least one batch, and
    // the range is finite: the loop is bounded by the number of batches in it.
    while position < end {
        let len = chunk_len.min(end - position) as usize;
        let chunk = plan
            .file
            .read_at(position, len)
            .await
            .map_err(std::io::Error::from)?;
        let mut at = 0usize;
        let mut first: Option<usize> = None;
        let mut taken_end = 0usize;
        while at + HEADER_BYTES <= chunk.len() {
            let header = batch::parse_header(&chunk[at..]).map_err(|e| {
                std::io::Error::other(format!("corrupt batch at {}: {e:?}", position + at as u64))
            })?;
            let whole = at + header.size_bytes <= chunk.len();
            match first {
                None if header.last_offset() < offset => {
                    if !whole {
                        break; // skip it by moving `position` past it below
                    }
                    at += header.size_bytes;
                    continue;
                }
                None => {
                    if !whole {
                        // The target batch does not fit: read exactly it.
                        let whole_batch = plan
                            .file
                            .read_at(position + at as u64, header.size_bytes)
                            .await
                            .map_err(std::io::Error::from)?;
                        return Ok(Bytes::copy_from_slice(&whole_batch));
                    }
                    first = Some(at);
                    taken_end = at + header.size_bytes;
                }
                Some(start) => {
                    if !whole || at + header.size_bytes - start > max_bytes {
                        break;
                    }
                    taken_end = at + header.size_bytes;
                }
            }
            at += header.size_bytes;
        }
        if let Some(start) = first {
            return Ok(Bytes::copy_from_slice(&chunk[start..taken_end]));
        }
        if at == 0 {
            // Not even one header fit: the batch at `position` is bigger than the chunk.
            let head = plan
                .file
                .read_at(position, HEADER_BYTES)
                .await
                .map_err(std::io::Error::from)?;
            let size = batch::peek_size(&head)
                .ok_or_else(|| std::io::Error::other("corrupt batch length"))?;
            if size as u64 > end - position {
                return Err(std::io::Error::other(
                    "batch extends past the readable range",
                ));
            }
            chunk_len = chunk_len.max(size as u64);
            let header =
                batch::parse_header(&head).map_err(|e| std::io::Error::other(format!("{e:?}")))?;
            if header.last_offset() >= offset {
                continue; // re-read with a chunk large enough for the target batch
            }
            position += size as u64;
        } else {
            position += at as u64;
        }
    }
    Ok(Bytes::new())
}

/// Finds the first record in the planned range whose timestamp is >= `timestamp`: its offset
/// and its timestamp. For compressed batches the batch's base offset and base timestamp are
/// returned: the records inside are not decompressed.
pub async fn find_offset_for_timestamp(
    plan: &ReadPlan,
    timestamp: i64,
) -> std::io::Result<Option<(i64, i64)>> {
    let end = plan.position + plan.readable;
    let mut position = plan.position;
    while position < end {
        let head = plan
            .file
            .read_at(position, HEADER_BYTES)
            .await
            .map_err(std::io::Error::from)?;
        let header =
            batch::parse_header(&head).map_err(|e| std::io::Error::other(format!("{e:?}")))?;
        if header.max_timestamp >= timestamp {
            let log_append_time = header.attributes & (1 << 3) != 0;
            // The first record's own timestamp: the batch's max under LogAppendTime (all records
            // share it), else its base timestamp (for compressed batches the records are not
            // decompressed, so the batch's first offset and base timestamp stand for them).
            let first = if log_append_time {
                header.max_timestamp
            } else {
                header.base_timestamp
            };
            if header.compression() != 0 || log_append_time || header.base_timestamp >= timestamp {
                return Ok(Some((header.base_offset, first)));
            }
            let body = plan
                .file
                .read_at(position, header.size_bytes)
                .await
                .map_err(std::io::Error::from)?;
            return Ok(Some(
                first_record_at_or_after(&body, &header, timestamp)
                    .unwrap_or((header.base_offset, first)),
            ));
        }
        position += (header.size_bytes as u64).max(1);
    }
    Ok(None)
}

/// Walks the records of an uncompressed batch for the first timestamp >= `timestamp`.
fn first_record_at_or_after(
    body: &[u8],
    header: &batch::BatchHeader,
    timestamp: i64,
) -> Option<(i64, i64)> {
    let mut at = HEADER_BYTES;
    for _ in 0..header.record_count {
        let (len, n) = batch::get_varint(&body[at..])?;
        let record_start = at + n;
        let mut p = record_start + 1; // attributes
        let (ts_delta, n) = batch::get_varint(body.get(p..)?)?;
        p += n;
        let (offset_delta, _) = batch::get_varint(body.get(p..)?)?;
        if header.base_timestamp + ts_delta >= timestamp {
            return Some((
                header.base_offset + offset_delta,
                header.base_timestamp + ts_delta,
            ));
        }
        at = record_start.checked_add(usize::try_from(len).ok()?)?;
        if at > body.len() {
            return None;
        }
    }
    None
}
