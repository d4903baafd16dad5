//! Sends a segment file range to a client socket with sendfile(2): the kernel hands page-cache
//! pages to the socket, and record bytes never enter user space.
//!
//! glommio has no sendfile and no public "wait until writable", so the socket is non-blocking
//! and a full socket buffer (EAGAIN) is waited out by writing the next small piece of the range
//! through glommio's own stream, which polls for writability. That piece is the one copy this
//! path keeps; it is counted (`sluice_sendfile_copied_bytes_total`) and stays a small fraction
//! unless the client reads slower than the broker sends.

use crate::metrics::ShardMetrics;
use crate::protocol::chunk::FileSlice;
use crate::storage::disk::borrow_file;
use futures::{AsyncWrite, AsyncWriteExt};
use std::io;
use std::os::fd::{AsRawFd, RawFd};
use std::os::unix::fs::FileExt;
use std::sync::atomic::Ordering;

/// Largest single sendfile call; the kernel caps one call near 2 GiB anyway.
const MAX_SENDFILE_BYTES: usize = 1 << 30;
/// Bytes written through the stream to wait for a full socket to drain.
const WAIT_PIECE_BYTES: usize = 16 * 1024;

/// Makes the connection's socket non-blocking, so that sendfile returns EAGAIN instead of
/// stalling the shard. glommio's own reads and writes poll first and pass MSG_DONTWAIT, so they
/// are unaffected.
pub fn set_nonblocking(socket: RawFd) -> io::Result<()> {
    // SAFETY: fcntl on a descriptor this connection owns, with no pointers involved.
    let flags = unsafe { libc::fcntl(socket, libc::F_GETFL) };
    if flags < 0 || unsafe { libc::fcntl(socket, libc::F_SETFL, flags | libc::O_NONBLOCK) } < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Sends all of `slice` on `socket`, which `stream` writes to as well. Every pass sends at
/// least one byte or returns, so the loop ends.
pub async fn send(
    socket: RawFd,
    stream: &mut (impl AsyncWrite + Unpin),
    slice: &FileSlice,
    metrics: &ShardMetrics,
) -> io::Result<()> {
    let file = slice.fd.as_raw_fd();
    let mut offset = slice.position as libc::off_t;
    let end = slice.position + slice.len as u64;
    while (offset as u64) < end {
        let want = ((end - offset as u64) as usize).min(MAX_SENDFILE_BYTES);
        // SAFETY: both descriptors are open; `offset` is a valid pointer the kernel advances.
        let sent = unsafe { libc::sendfile(socket, file, &mut offset, want) };
        if sent > 0 {
            metrics
                .sendfile_bytes
                .fetch_add(sent as u64, Ordering::Relaxed);
            continue;
        }
        if sent == 0 {
            return Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                "segment file ended before the planned range",
            ));
        }
        let err = io::Error::last_os_error();
        match err.kind() {
            io::ErrorKind::Interrupted => continue,
            io::ErrorKind::WouldBlock => {
                let piece = ((end - offset as u64) as usize).min(WAIT_PIECE_BYTES);
                let mut buf = vec![0u8; piece];
                let borrowed = borrow_file(file); // the slice's, open for this call
                borrowed.read_exact_at(&mut buf, offset as u64)?;
                let n = stream.write(&buf).await?;
                if n == 0 {
                    return Err(io::ErrorKind::WriteZero.into());
                }
                metrics
                    .sendfile_copied_bytes
                    .fetch_add(n as u64, Ordering::Relaxed);
                offset += n as libc::off_t;
            }
            _ => return Err(err),
        }
    }
    Ok(())
}

/// Bytes read from a segment file per write on the copying path.
const COPY_PIECE_BYTES: usize = 64 * 1024;

/// Writes all of `slice` through `stream` by reading it into memory: the path of a stream that
/// is not the socket itself (TLS encrypts in user space, so sendfile cannot serve it).
pub async fn copy(stream: &mut (impl AsyncWrite + Unpin), slice: &FileSlice) -> io::Result<()> {
    let file = borrow_file(slice.fd.as_raw_fd()); // the slice's, open for this call
    let mut buf = vec![0u8; COPY_PIECE_BYTES.min(slice.len)];
    let mut done = 0usize;
    while done < slice.len {
        let n = (slice.len - done).min(buf.len());
        file.read_exact_at(&mut buf[..n], slice.position + done as u64)?;
        stream.write_all(&buf[..n]).await?;
        done += n;
    }
    Ok(())
}
