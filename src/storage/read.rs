//! Reading whole batches from a planned range of a segment file.

use super::log::ReadPlan;
use crate::protocol::batch::{self, HEADER_BYTES};
use bytes::Bytes;
use std::os::fd::{AsRawFd, OwnedFd};

/// Where the batches a fetch returns lie in a segment file: `len` bytes from `position`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Span {
    pub position: u64,
    pub len: u64,
}

/// How much a read returns.
#[derive(Debug, Clone, Copy)]
pub struct Limit {
    pub max_bytes: usize,
    /// Return the first batch whole even when larger than `max_bytes` (KIP-74: the first
    /// partition of a fetch that has records, so that a consumer always makes progress).
    pub whole_first_batch: bool,
}

impl Limit {
    /// No bound but `max_bytes`, the first batch whole.
    pub fn bytes(max_bytes: usize) -> Limit {
        Limit {
            max_bytes,
            whole_first_batch: true,
        }
    }
}

/// Finds the whole batches a fetch returns, reading batch headers only: the batch that holds
/// `offset`, then as many following batches as fit in `max_bytes`. The first batch is returned
/// whole even when larger if the limit says so; otherwise such a read returns nothing.
///
/// `boundary(limit)` names a batch start at or before `limit` in the plan's segment (from the
/// sparse offset index), so the end is found with a walk of at most one index interval of
/// headers, not one read per batch. None means nothing at or after `offset` is readable.
pub async fn locate_batches(
    plan: &ReadPlan,
    offset: i64,
    limit: Limit,
    boundary: impl Fn(u64) -> u64,
) -> std::io::Result<Option<Span>> {
    let end = plan.position + plan.readable;
    let max_bytes = limit.max_bytes as u64;
    // The index entry before `offset` is at most one interval of batches away: skip them.
    let mut start = plan.position;
    let first_len = loop {
        if start >= end {
            return Ok(None);
        }
        let header = read_header(plan, start, end).await?;
        if header.last_offset() >= offset {
            break header.size_bytes as u64;
        }
        start += header.size_bytes as u64;
    };
    if end - start <= max_bytes {
        return Ok(Some(Span {
            position: start,
            len: end - start,
        }));
    }
    if first_len > max_bytes && !limit.whole_first_batch {
        return Ok(None);
    }
    if first_len >= max_bytes {
        return Ok(Some(Span {
            position: start,
            len: first_len,
        }));
    }
    // Jump to the last indexed batch start that fits, then walk the few headers after it.
    let limit = start + max_bytes;
    let mut cut = boundary(limit).clamp(start + first_len, limit);
    while cut < end {
        let header = read_header(plan, cut, end).await?;
        if cut + header.size_bytes as u64 > limit {
            break;
        }
        cut += header.size_bytes as u64;
    }
    Ok(Some(Span {
        position: start,
        len: cut - start,
    }))
}

/// Where the batch that begins at `offset` starts in the plan's segment: a walk of at most one
/// index interval of headers from the plan's start (the index entry at or before it). Used for
/// the last stable offset, always a batch start below the high watermark.
pub async fn batch_start(plan: &ReadPlan, offset: i64) -> std::io::Result<u64> {
    let end = plan.position + plan.readable;
    let mut at = plan.position;
    while at < end {
        let header = read_header(plan, at, end).await?;
        if header.base_offset >= offset {
            return Ok(at);
        }
        at += header.size_bytes as u64;
    }
    Ok(end)
}

/// Reads the batches of a fetch into memory: the copying path, and the broker's own replays.
pub async fn read_batches(
    plan: &ReadPlan,
    offset: i64,
    limit: Limit,
    boundary: impl Fn(u64) -> u64,
) -> std::io::Result<Bytes> {
    match locate_batches(plan, offset, limit, boundary).await? {
        Some(span) => read_span(plan, span).await,
        None => Ok(Bytes::new()),
    }
}

/// Whether every page of a span is in the page cache. sendfile of pages that are not would read
/// the disk on the shard's thread, stalling every partition it owns; such spans take the
/// asynchronous read instead.
///
/// Asked with cachestat(2) (Linux 6.5+): one call over the whole range, touching no page. On
/// older kernels, only the span's first and last bytes are probed, with non-waiting reads.
pub fn in_page_cache(send_fd: &OwnedFd, span: Span) -> bool {
    let fd = send_fd.as_raw_fd();
    match cached_pages(fd, span) {
        Some((cached, pages)) => cached >= pages,
        None => ends_in_page_cache(fd, span),
    }
}

/// cachestat(2)'s number: new system calls share one number on every architecture.
const SYS_CACHESTAT: libc::c_long = 451;

#[repr(C)]
struct CachestatRange {
    off: u64,
    len: u64,
}

#[repr(C)]
#[derive(Default)]
struct Cachestat {
    nr_cache: u64,
    nr_dirty: u64,
    nr_writeback: u64,
    nr_evicted: u64,
    nr_recently_evicted: u64,
}

/// Set once cachestat(2) is found missing, so that older kernels pay for the failed call once.
static NO_CACHESTAT: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// (pages of the span in the page cache, pages the span covers), or None without cachestat(2).
fn cached_pages(fd: std::os::fd::RawFd, span: Span) -> Option<(u64, u64)> {
    use std::sync::atomic::Ordering::Relaxed;
    if NO_CACHESTAT.load(Relaxed) || span.len == 0 {
        return None;
    }
    // SAFETY: sysconf reads a constant of the running system.
    let page_bytes = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    let page_bytes = if page_bytes > 0 {
        page_bytes as u64
    } else {
        4096
    };
    let first = span.position / page_bytes;
    let last = (span.position + span.len - 1) / page_bytes;
    let pages = last - first + 1;
    let range = CachestatRange {
        off: first * page_bytes,
        len: pages * page_bytes,
    };
    let mut stat = Cachestat::default();
    // SAFETY: both structs are repr(C) as the kernel defines them and live for the call.
    let r = unsafe {
        libc::syscall(
            SYS_CACHESTAT,
            fd,
            &range as *const CachestatRange,
            &mut stat as *mut Cachestat,
            0u32,
        )
    };
    if r != 0 {
        if std::io::Error::last_os_error().raw_os_error() == Some(libc::ENOSYS) {
            NO_CACHESTAT.store(true, Relaxed);
        }
        return None;
    }
    Some((stat.nr_cache, pages))
}

/// Whether a span's first and last bytes are in the page cache, asked with preadv2 and
/// RWF_NOWAIT: a cold range is nearly always cold at its start.
fn ends_in_page_cache(fd: std::os::fd::RawFd, span: Span) -> bool {
    let ends = [span.position, span.position + span.len.saturating_sub(1)];
    ends.iter().all(|&at| {
        let mut byte = 0u8;
        let iov = libc::iovec {
            iov_base: (&mut byte as *mut u8).cast(),
            iov_len: 1,
        };
        // SAFETY: one valid iovec over a live local byte.
        let n = unsafe { libc::preadv2(fd, &iov, 1, at as libc::off_t, libc::RWF_NOWAIT) };
        // Only EAGAIN means "not cached"; a kernel without RWF_NOWAIT support keeps sendfile.
        n >= 0 || std::io::Error::last_os_error().kind() != std::io::ErrorKind::WouldBlock
    })
}

/// Reads a located span into memory, asynchronously through io_uring.
pub async fn read_span(plan: &ReadPlan, span: Span) -> std::io::Result<Bytes> {
    let data = plan.file.read_at(span.position, span.len as usize).await?;
    // glommio's read buffer cannot leave this thread; a fetch answered by another shard needs
    // bytes it can own.
    Ok(Bytes::copy_from_slice(&data))
}

/// The header of the batch at `position`, which must end by `end`.
async fn read_header(
    plan: &ReadPlan,
    position: u64,
    end: u64,
) -> std::io::Result<batch::BatchHeader> {
    let header = plan.file.read_header(position).await?;
    if position + header.size_bytes as u64 > end {
        return Err(std::io::Error::other(format!(
            "batch at {position} extends past the readable range"
        )));
    }
    Ok(header)
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
        let head = plan.file.read_at(position, HEADER_BYTES).await?;
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
            let body = plan.file.read_at(position, header.size_bytes).await?;
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
