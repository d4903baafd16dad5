//! One client connection, as two halves joined in one task:
//! - the reader reads size-prefixed frames and parses their headers, at most
//!   `max_in_flight_requests_per_connection` ahead of the responses, each frame's bytes counted
//!   against the shard's `max_request_memory_bytes_per_shard`;
//! - the processor serves them one at a time and writes each response, in request order.
//!
//! Like Kafka, a connection has one request in progress at a time, which keeps responses in
//! request order without reordering buffers; reading ahead lets the next request's bytes arrive
//! while the current one is served. Every wait on the client is bounded: the idle timeout between
//! requests, and `request_read_timeout_ms` from a request's first byte to its last.

use crate::kafka::{self, Reply};
use crate::metrics::{adjust, bump, ShardMetrics};
use crate::protocol::chunk::Chunk;
use crate::protocol::frame::{self, FrameError, RequestHeader};
use crate::shard::Shard;
use bytes::{Bytes, BytesMut};
use futures::future::Either;
use futures::io::{ReadHalf, WriteHalf};
use futures::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use glommio::channels::local_channel::{self, LocalReceiver, LocalSender};
use glommio::net::TcpStream;
use glommio::sync::{Semaphore, StaticPermit};
use kafka_protocol::messages::ApiKey;
use std::os::fd::{AsRawFd, RawFd};
use std::rc::Rc;
use std::sync::Arc;

/// A request read and not yet answered.
enum Incoming {
    Request {
        header: RequestHeader,
        body: Bytes,
        held: Held,
    },
    /// An ApiVersions at a version not served: answered in v0 (KIP-511).
    ApiVersionsFallback { correlation_id: i32, _held: Held },
}

/// What one request holds from being read until its response is written: its in-flight slot and
/// its bytes of the shard's request memory. Dropping it gives both back.
struct Held {
    _slot: StaticPermit,
    _memory: StaticPermit,
    bytes: u64,
    metrics: Arc<ShardMetrics>,
}

impl Drop for Held {
    fn drop(&mut self) {
        adjust(&self.metrics.request_memory_bytes, -(self.bytes as i64));
        adjust(&self.metrics.requests_queued, -1);
    }
}

/// Reading stops for good: the client closed between requests (a normal goodbye), or the
/// connection must close and the reason was logged. The reader ends either way.
struct Stop;

struct Conn {
    shard: Rc<Shard>,
    peer: String,
    /// The socket, for sendfile; valid while the connection's stream lives.
    socket: RawFd,
    /// Kafka reports a member's host as "/<ip>".
    client_host: String,
    in_flight: Rc<Semaphore>,
}

/// Serves one connection until it closes; `_admission` holds its slot in the connection limits.
pub async fn serve(shard: Rc<Shard>, stream: TcpStream, _admission: super::limits::Admission) {
    let peer_addr = stream.peer_addr().ok();
    let peer = peer_addr
        .map(|a| a.to_string())
        .unwrap_or_else(|| "?".into());
    let client_host = peer_addr
        .map(|a| format!("/{}", a.ip()))
        .unwrap_or_default();
    if let Err(e) = stream.set_nodelay(true) {
        log::warn!("{peer}: cannot set TCP_NODELAY: {e}");
    }
    let socket = stream.as_raw_fd();
    if let Err(e) = super::sendfile::set_nonblocking(socket) {
        log::warn!("{peer}: closing: cannot make the socket non-blocking: {e}");
        return;
    }
    let max_in_flight = shard.config.max_in_flight_requests_per_connection;
    let conn = Conn {
        shard,
        peer,
        socket,
        client_host,
        in_flight: Rc::new(Semaphore::new(max_in_flight as u64)),
    };
    let (read_half, write_half) = stream.split();
    // Never holds more than max_in_flight items: each one holds an in-flight slot.
    let (tx, rx) = local_channel::new_bounded(max_in_flight);
    let reader = read_requests(&conn, read_half, tx);
    let processor = serve_requests(&conn, write_half, rx);
    futures::pin_mut!(reader, processor);
    // When the reader stops, the processor still answers what was read; when the processor stops
    // (the socket broke), reading more is pointless.
    if let Either::Left(((), processor)) = futures::future::select(reader, processor).await {
        processor.await;
    }
}

async fn read_requests(conn: &Conn, mut stream: ReadHalf<TcpStream>, tx: LocalSender<Incoming>) {
    let shard = &conn.shard;
    let peer = &conn.peer;
    loop {
        let Ok(slot) = conn.in_flight.acquire_static_permit(1).await else {
            return;
        };
        let Ok((size, memory)) = read_frame_size(conn, &mut stream).await else {
            return;
        };
        adjust(&shard.metrics().requests_queued, 1);
        adjust(&shard.metrics().request_memory_bytes, size as i64);
        let held = Held {
            _slot: slot,
            _memory: memory,
            bytes: size as u64,
            metrics: shard.env.metrics.clone(),
        };
        let mut buf = BytesMut::zeroed(size);
        let deadline_ms = shard.clock().monotonic_ms() + shard.config.request_read_timeout_ms;
        if read_before(conn, &mut stream, &mut buf, deadline_ms)
            .await
            .is_err()
        {
            return;
        }
        let item = match frame::parse_request(buf.freeze(), kafka::supported) {
            Ok((header, body)) => Incoming::Request { header, body, held },
            Err(FrameError::UnsupportedVersion {
                api_key: ApiKey::ApiVersions,
                correlation_id,
                ..
            }) => Incoming::ApiVersionsFallback {
                correlation_id,
                _held: held,
            },
            Err(FrameError::UnsupportedVersion {
                api_key,
                api_version,
                ..
            }) => {
                log::warn!("{peer}: closing: {api_key:?} v{api_version} is not supported");
                return;
            }
            Err(FrameError::UnknownApiKey(k)) => {
                log::warn!("{peer}: closing: unknown API key {k}");
                return;
            }
            Err(e) => {
                log::warn!("{peer}: closing: malformed request header: {e:?}");
                return;
            }
        };
        if shard.is_shutting_down() {
            log::info!("{peer}: closing: the broker is shutting down");
            return;
        }
        if tx.send(item).await.is_err() {
            return; // the processor stopped
        }
    }
}

/// Reads the next frame's size prefix, then reserves that many bytes of the shard's request
/// memory (waiting for room if need be: backpressure on this client alone).
async fn read_frame_size(
    conn: &Conn,
    stream: &mut ReadHalf<TcpStream>,
) -> Result<(usize, StaticPermit), Stop> {
    let shard = &conn.shard;
    let peer = &conn.peer;
    let mut size_buf = [0u8; 4];
    let first = wait_for_first_bytes(conn, stream, &mut size_buf).await?;
    let deadline_ms = shard.clock().monotonic_ms() + shard.config.request_read_timeout_ms;
    read_before(conn, stream, &mut size_buf[first..], deadline_ms).await?;
    let size = i32::from_be_bytes(size_buf);
    let max = shard.config.request_max_bytes;
    if size < frame::MIN_HEADER_BYTES as i32 || size as usize > max {
        log::warn!(
            "{peer}: closing: frame size {size} is outside {}..={max}",
            frame::MIN_HEADER_BYTES
        );
        return Err(Stop);
    }
    let size = size as usize;
    let memory = match shard.request_memory.try_acquire_static_permit(size as u64) {
        Ok(p) => p,
        Err(_) => {
            bump(&shard.metrics().request_memory_waits);
            log::debug!("{peer}: waiting for {size} bytes of request memory");
            shard
                .request_memory
                .acquire_static_permit(size as u64)
                .await
                .map_err(|_| Stop)?
        }
    };
    Ok((size, memory))
}

/// Waits for the first bytes of a request; returns how many of `buf` were filled. Between
/// requests a connection may idle for connections_max_idle_ms, timed on the shard's wheel; it
/// counts as idle only while no earlier request is still being served.
async fn wait_for_first_bytes(
    conn: &Conn,
    stream: &mut ReadHalf<TcpStream>,
    buf: &mut [u8],
) -> Result<usize, Stop> {
    let shard = &conn.shard;
    let idle_ms = shard.config.connections_max_idle_ms;
    let read = stream.read(buf);
    futures::pin_mut!(read);
    let n = loop {
        let deadline_ms = shard.clock().monotonic_ms() + idle_ms;
        let Ok(idle) = shard.timers.sleep_until_idle(deadline_ms) else {
            break read.await;
        };
        match futures::future::select(read.as_mut(), idle).await {
            Either::Left((r, _)) => break r,
            // This reader holds one slot; any other is a request still being served.
            Either::Right(_) if busy(conn) => continue,
            Either::Right(_) => {
                log::info!(
                    "{}: closing: idle for {idle_ms} ms (connections_max_idle_ms)",
                    conn.peer
                );
                return Err(Stop);
            }
        }
    };
    match n {
        Ok(0) => Err(Stop), // closed between requests: a normal goodbye, not logged
        Ok(n) => Ok(n),
        Err(e) => {
            log::info!("{}: connection lost between requests: {e}", conn.peer);
            Err(Stop)
        }
    }
}

fn busy(conn: &Conn) -> bool {
    let max = conn.shard.config.max_in_flight_requests_per_connection as u64;
    conn.in_flight.available() + 1 < max
}

/// Fills `buf` before `deadline_ms`, or gives up on the connection: a client that trickles a
/// request (slowloris) loses it, and one that vanishes mid-request is logged.
async fn read_before(
    conn: &Conn,
    stream: &mut (impl AsyncRead + Unpin),
    buf: &mut [u8],
    deadline_ms: u64,
) -> Result<(), Stop> {
    let shard = &conn.shard;
    let read = stream.read_exact(buf);
    let result = match shard.timers.sleep_until_idle(deadline_ms) {
        Ok(deadline) => {
            futures::pin_mut!(read);
            match futures::future::select(read, deadline).await {
                Either::Left((r, _)) => r,
                Either::Right(_) => {
                    bump(&shard.metrics().slow_requests_closed);
                    log::warn!(
                        "{}: closing: a request took over {} ms to arrive (request_read_timeout_ms)",
                        conn.peer,
                        shard.config.request_read_timeout_ms
                    );
                    return Err(Stop);
                }
            }
        }
        Err(_) => read.await,
    };
    result.map_err(|e| {
        log::warn!("{}: closing: client vanished mid-request: {e}", conn.peer);
        Stop
    })
}

async fn serve_requests(
    conn: &Conn,
    mut stream: WriteHalf<TcpStream>,
    rx: LocalReceiver<Incoming>,
) {
    let shard = &conn.shard;
    let peer = &conn.peer;
    while let Some(item) = rx.recv().await {
        // `held` is dropped once the response is written, or the request given up.
        let (header, body, held) = match item {
            Incoming::Request { header, body, held } => (header, body, held),
            Incoming::ApiVersionsFallback { correlation_id, .. } => {
                let Ok(Reply::Body(body)) = kafka::api_versions::unsupported() else {
                    return;
                };
                let key = ApiKey::ApiVersions;
                if !write_response(conn, &mut stream, key, 0, correlation_id, body).await {
                    return;
                }
                continue;
            }
        };
        log::debug!(
            "{peer}: {:?} v{} correlation {}",
            header.api_key,
            header.api_version,
            header.correlation_id
        );
        shard.metrics().count_request(header.api_key as i16);
        let reply = kafka::dispatch(shard, &header, body, &conn.client_host).await;
        let body = match reply {
            Ok(Reply::None) => continue,
            Ok(Reply::Body(body)) => body,
            Err(e) => {
                log::warn!(
                    "{peer}: closing: cannot serve {:?} v{}: {e}",
                    header.api_key,
                    header.api_version
                );
                return;
            }
        };
        let (key, version, id) = (header.api_key, header.api_version, header.correlation_id);
        if !write_response(conn, &mut stream, key, version, id, body).await {
            return;
        }
        drop(held);
    }
}

/// Writes a framed response; false if the connection is gone. glommio's stream does not
/// buffer, so each chunk is in the socket before the next one (maybe a sendfile) starts.
async fn write_response(
    conn: &Conn,
    stream: &mut (impl AsyncWrite + Unpin),
    api_key: ApiKey,
    api_version: i16,
    correlation_id: i32,
    body: Vec<Chunk>,
) -> bool {
    let peer = &conn.peer;
    for chunk in frame::frame_response(api_key, api_version, correlation_id, body) {
        let sent = match &chunk {
            Chunk::Bytes(b) => stream.write_all(b).await,
            Chunk::File(f) => {
                super::sendfile::send(conn.socket, stream, f, conn.shard.metrics()).await
            }
        };
        if let Err(e) = sent {
            log::info!("{peer}: connection lost writing a response: {e}");
            return false;
        }
    }
    if let Err(e) = stream.flush().await {
        log::info!("{peer}: connection lost flushing a response: {e}");
        return false;
    }
    true
}
