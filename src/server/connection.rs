//! One client connection, as two halves joined in one task:
//! - the reader reads size-prefixed frames and parses their headers, at most
//!   `max_in_flight_requests_per_connection` ahead of the responses, each frame's bytes counted
//!   against the shard's `max_request_memory_bytes_per_shard`;
//! - the processor dispatches them one at a time, in arrival order, and writes the responses
//!   in request order (`serve_requests`): a request whose remainder runs later (a produce
//!   waiting for its commit, a fetch's long poll) does not hold up the ones after it.
//!
//! Every wait on the client is bounded: the idle timeout between requests, and
//! `request_read_timeout_ms` from a request's first byte to its last (and, on a TLS listener,
//! from the connection's first byte to the end of the TLS handshake).
//!
//! A connection is served over any stream: the TCP socket itself, where records are received
//! with recv(2) straight into their frame and fetched records go out with sendfile(2), or a TLS
//! stream (`server/tls.rs`), where both pass through rustls (the copying path). On a SASL
//! listener only ApiVersions and the SASL requests are served until the client authenticates
//! (`server/authenticate.rs`).

use super::authenticate::{self, Auth};
use crate::clock::Clock;
use crate::config::ListenerConfig;
use crate::kafka::Services;
use crate::kafka::{self, Caller, Reply};
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
    ApiVersionsFallback { correlation_id: i32, held: Held },
    /// A SASL token without a Kafka header, after SaslHandshake v0.
    BareToken { token: Bytes, held: Held },
}

/// What one request holds from being read until its response is written: its in-flight slot and
/// its bytes of the shard's request memory. Dropping it gives both back.
pub(super) struct Held {
    _slot: StaticPermit,
    _memory: StaticPermit,
    bytes: u64,
    metrics: Arc<ShardMetrics>,
    /// When the request's last byte was read (the shard clock's µs): where its duration starts.
    read_us: u64,
}

impl Held {
    /// Notes the request's duration, from its last byte read to now, under `api_key`.
    fn observe(&self, clock: &dyn Clock, api_key: ApiKey) {
        let took_us = clock.monotonic_us().saturating_sub(self.read_us);
        self.metrics.observe_request(api_key as i16, took_us);
    }
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

pub(super) struct Conn {
    /// What the connection's handlers reach (`kafka::Services`), its shard among them.
    services: Rc<Services>,
    pub(super) peer: String,
    /// The TCP socket, for recv and sendfile, where the stream is the socket itself (None
    /// under TLS); valid while the connection's stream lives.
    socket: Option<RawFd>,
    in_flight: Rc<Semaphore>,
    /// Who this connection is, and where its SASL exchange stands.
    pub(super) auth: Auth,
}

/// Serves one connection on `listener` until it closes; `_admission` holds its slot in the
/// connection limits.
pub async fn serve(
    services: Rc<Services>,
    listener: Rc<ListenerConfig>,
    stream: TcpStream,
    _admission: super::limits::Admission,
) {
    let peer_addr = stream.peer_addr().ok();
    let peer = peer_addr
        .map(|a| a.to_string())
        .unwrap_or_else(|| "?".into());
    let host = peer_addr.map(|a| a.ip().to_string()).unwrap_or_default();
    if let Err(e) = stream.set_nodelay(true) {
        log::warn!("{peer}: cannot set TCP_NODELAY: {e}");
    }
    let anonymous = || kafka::authorize::ANONYMOUS.to_string();
    if !listener.security_protocol.tls() {
        let socket = stream.as_raw_fd();
        if let Err(e) = super::sendfile::set_nonblocking(socket) {
            log::warn!("{peer}: closing: cannot make the socket non-blocking: {e}");
            return;
        }
        let caller = Caller::new(listener, anonymous(), host);
        return run(&Conn::new(services, peer, caller, Some(socket)), stream).await;
    }
    let protocol = listener.security_protocol;
    let Some(stream) = super::tls::handshake(&services.shard, &peer, protocol, stream).await else {
        return;
    };
    // Mutual TLS: the client certificate's subject names the principal.
    let certificate = stream
        .get_ref()
        .1
        .peer_certificates()
        .and_then(|c| c.first());
    let principal = certificate
        .and_then(|c| crate::security::principal::of_certificate(c))
        .unwrap_or_else(anonymous);
    let caller = Caller::new(listener, principal, host);
    run(&Conn::new(services, peer, caller, None), stream).await
}

impl Conn {
    /// The shard serving the connection.
    pub(super) fn shard(&self) -> &Rc<Shard> {
        &self.services.shard
    }

    /// `socket`: the TCP socket where the stream is the socket itself (None under TLS).
    fn new(services: Rc<Services>, peer: String, caller: Caller, socket: Option<RawFd>) -> Conn {
        let max_in_flight = services.shard.config.max_in_flight_requests_per_connection;
        Conn {
            in_flight: Rc::new(Semaphore::new(max_in_flight as u64)),
            auth: Auth::new(&services.shard, caller),
            services,
            peer,
            socket,
        }
    }
}

/// Serves the connection's requests over `stream` until it closes.
async fn run<S: AsyncRead + AsyncWrite + Unpin>(conn: &Conn, stream: S) {
    let max_in_flight = conn.shard().config.max_in_flight_requests_per_connection;
    let (read_half, write_half) = stream.split();
    // Never holds more than max_in_flight items: each one holds an in-flight slot.
    let (tx, rx) = local_channel::new_bounded(max_in_flight);
    let reader = read_requests(conn, read_half, tx);
    let processor = serve_requests(conn, write_half, rx);
    futures::pin_mut!(reader, processor);
    // When the reader stops, the processor still answers what was read; when the processor stops
    // (the socket broke), reading more is pointless.
    if let Either::Left(((), processor)) = futures::future::select(reader, processor).await {
        processor.await;
    }
}

/// Bytes read from the socket ahead of the frame being parsed, so that one read brings in
/// several small requests (a pipelining client sends them back to back). Bounded by
/// `READ_AHEAD_BYTES` per connection; a frame larger than what is buffered is read straight
/// into its own buffer.
struct ReadAhead {
    buf: Box<[u8]>,
    start: usize,
    end: usize,
}

/// Bytes a connection reads ahead of the frame it is parsing.
const READ_AHEAD_BYTES: usize = 16 * 1024;

impl ReadAhead {
    fn new() -> ReadAhead {
        ReadAhead {
            buf: vec![0u8; READ_AHEAD_BYTES].into_boxed_slice(),
            start: 0,
            end: 0,
        }
    }

    fn buffered(&self) -> &[u8] {
        &self.buf[self.start..self.end]
    }

    fn consume(&mut self, n: usize) {
        assert!(n <= self.end - self.start, "consumes only what is buffered");
        self.start += n;
    }

    /// The free space after the buffered bytes, moved to the front first.
    fn free(&mut self) -> &mut [u8] {
        if self.start > 0 {
            self.buf.copy_within(self.start..self.end, 0);
            self.end -= self.start;
            self.start = 0;
        }
        &mut self.buf[self.end..]
    }
}

async fn read_requests<S: AsyncRead + AsyncWrite + Unpin>(
    conn: &Conn,
    mut stream: ReadHalf<S>,
    tx: LocalSender<Incoming>,
) {
    let shard = conn.shard();
    let mut ahead = ReadAhead::new();
    loop {
        let Ok(slot) = conn.in_flight.acquire_static_permit(1).await else {
            return;
        };
        let Ok((size, memory)) = read_frame_size(conn, &mut stream, &mut ahead).await else {
            return;
        };
        adjust(&shard.metrics().requests_queued, 1);
        adjust(&shard.metrics().request_memory_bytes, size as i64);
        let mut held = Held {
            _slot: slot,
            _memory: memory,
            bytes: size as u64,
            metrics: shard.env.metrics.clone(),
            read_us: 0,
        };
        let Ok(frame) = read_frame_body(conn, &mut stream, &mut ahead, size).await else {
            return;
        };
        held.read_us = shard.clock().monotonic_us();
        let Some(item) = incoming(conn, frame, held) else {
            return;
        };
        if shard.is_shutting_down() {
            log::info!("{}: closing: the broker is shutting down", conn.peer);
            return;
        }
        if tx.send(item).await.is_err() {
            return; // the processor stopped
        }
    }
}

/// A frame's body: what is buffered ahead, then the rest read straight into its buffer within
/// `request_read_timeout_ms`.
async fn read_frame_body<S: AsyncRead + AsyncWrite + Unpin>(
    conn: &Conn,
    stream: &mut ReadHalf<S>,
    ahead: &mut ReadAhead,
    size: usize,
) -> Result<Bytes, Stop> {
    let mut frame = BytesMut::with_capacity(size);
    let take = size.min(ahead.buffered().len());
    frame.extend_from_slice(&ahead.buffered()[..take]);
    ahead.consume(take);
    if take < size {
        let config = &conn.shard().config;
        let deadline_ms = conn.shard().clock().monotonic_ms() + config.request_read_timeout_ms;
        fill(conn, stream, &mut frame, size, deadline_ms).await?;
    }
    Ok(frame.freeze())
}

/// Bytes read through glommio to wait for an empty socket to be readable.
const WAIT_PIECE_BYTES: usize = 4096;

/// Reads a frame's remaining bytes into its buffer's spare capacity with recv(2) on the
/// non-blocking socket, so that no pass zeroes the buffer first (a produce request's records
/// are copied once, from the socket). While the socket is empty, a small zeroed piece is read
/// through glommio, which waits until the socket is readable.
async fn fill<S: AsyncRead + AsyncWrite + Unpin>(
    conn: &Conn,
    stream: &mut ReadHalf<S>,
    frame: &mut BytesMut,
    size: usize,
    deadline_ms: u64,
) -> Result<(), Stop> {
    let Some(socket) = conn.socket else {
        return fill_through(conn, stream, frame, size, deadline_ms).await;
    };
    while frame.len() < size {
        let want = size - frame.len();
        let spare = frame.spare_capacity_mut();
        assert!(
            spare.len() >= want,
            "the frame's buffer holds the whole frame"
        );
        // SAFETY: recv writes at most `want` bytes into the spare capacity, which is ours and
        // at least that long; only the bytes it reports written are then counted as the
        // buffer's.
        let n = unsafe {
            libc::recv(
                socket,
                spare.as_mut_ptr().cast::<libc::c_void>(),
                want,
                libc::MSG_DONTWAIT,
            )
        };
        if n > 0 {
            // SAFETY: recv initialized these `n` bytes.
            unsafe { frame.set_len(frame.len() + n as usize) };
            continue;
        }
        let err = std::io::Error::last_os_error();
        match (n, err.kind()) {
            (0, _) => {
                log::warn!("{}: closing: client vanished mid-request", conn.peer);
                return Err(Stop);
            }
            (_, std::io::ErrorKind::Interrupted) => continue,
            (_, std::io::ErrorKind::WouldBlock) => {
                let at = frame.len();
                frame.resize(at + want.min(WAIT_PIECE_BYTES), 0);
                let n = within_deadline(conn, stream.read(&mut frame[at..]), deadline_ms).await?;
                frame.truncate(at + n);
                if n == 0 {
                    log::warn!("{}: closing: client vanished mid-request", conn.peer);
                    return Err(Stop);
                }
            }
            _ => {
                log::warn!("{}: closing: reading a request failed: {err}", conn.peer);
                return Err(Stop);
            }
        }
    }
    Ok(())
}

/// Reads a frame's remaining bytes through the stream (TLS: the bytes are decrypted into the
/// frame's buffer, zeroed first).
async fn fill_through<S: AsyncRead + AsyncWrite + Unpin>(
    conn: &Conn,
    stream: &mut ReadHalf<S>,
    frame: &mut BytesMut,
    size: usize,
    deadline_ms: u64,
) -> Result<(), Stop> {
    let mut at = frame.len();
    frame.resize(size, 0);
    while at < size {
        let n = within_deadline(conn, stream.read(&mut frame[at..]), deadline_ms).await?;
        if n == 0 {
            log::warn!("{}: closing: client vanished mid-request", conn.peer);
            return Err(Stop);
        }
        at += n;
    }
    Ok(())
}

/// The request a frame holds, or None when the connection must close (logged).
fn incoming(conn: &Conn, frame: Bytes, held: Held) -> Option<Incoming> {
    let peer = &conn.peer;
    if conn.auth.bare_tokens() {
        return Some(Incoming::BareToken { token: frame, held });
    }
    match frame::parse_request(frame, kafka::supported) {
        Ok((header, body)) => Some(Incoming::Request { header, body, held }),
        Err(FrameError::UnsupportedVersion {
            api_key: ApiKey::ApiVersions,
            correlation_id,
            ..
        }) => Some(Incoming::ApiVersionsFallback {
            correlation_id,
            held,
        }),
        Err(FrameError::UnsupportedVersion {
            api_key,
            api_version,
            ..
        }) => {
            log::warn!("{peer}: closing: {api_key:?} v{api_version} is not supported");
            None
        }
        Err(FrameError::UnknownApiKey(k)) => {
            log::warn!("{peer}: closing: unknown API key {k}");
            None
        }
        Err(e) => {
            log::warn!("{peer}: closing: malformed request header: {e:?}");
            None
        }
    }
}

/// Reads the next frame's size prefix, then reserves that many bytes of the shard's request
/// memory (waiting for room if need be: backpressure on this client alone).
async fn read_frame_size<S: AsyncRead + AsyncWrite + Unpin>(
    conn: &Conn,
    stream: &mut ReadHalf<S>,
    ahead: &mut ReadAhead,
) -> Result<(usize, StaticPermit), Stop> {
    let shard = conn.shard();
    let peer = &conn.peer;
    if ahead.buffered().is_empty() {
        wait_for_first_bytes(conn, stream, ahead).await?;
    }
    let deadline_ms = shard.clock().monotonic_ms() + shard.config.request_read_timeout_ms;
    while ahead.buffered().len() < 4 {
        read_more_before(conn, stream, ahead, deadline_ms).await?;
    }
    let size = i32::from_be_bytes(ahead.buffered()[..4].try_into().expect("4 bytes"));
    ahead.consume(4);
    // Before authentication a frame is a SASL exchange's (bounded as Kafka's
    // sasl.server.max.receive.size), and after SaslHandshake v0 a bare token (at least a byte).
    let max = match conn.auth.authenticated() {
        true => shard.config.request_max_bytes,
        false => authenticate::MAX_UNAUTHENTICATED_FRAME_BYTES,
    };
    let min = match conn.auth.bare_tokens() {
        true => 1,
        false => frame::MIN_HEADER_BYTES,
    };
    if size < min as i32 || size as usize > max {
        log::warn!("{peer}: closing: frame size {size} is outside {min}..={max}");
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

/// Waits for the first bytes of a request and reads what has arrived ahead. Between requests
/// a connection may idle for connections_max_idle_ms, timed on the shard's wheel; it counts
/// as idle only while no earlier request is still being served.
async fn wait_for_first_bytes<S: AsyncRead + AsyncWrite + Unpin>(
    conn: &Conn,
    stream: &mut ReadHalf<S>,
    ahead: &mut ReadAhead,
) -> Result<(), Stop> {
    let shard = conn.shard();
    let idle_ms = shard.config.connections_max_idle_ms;
    let read = stream.read(ahead.free());
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
        Ok(n) => {
            ahead.end += n;
            Ok(())
        }
        Err(e) => {
            log::info!("{}: connection lost between requests: {e}", conn.peer);
            Err(Stop)
        }
    }
}

/// Reads at least one more byte ahead before `deadline_ms` (a request's bytes are arriving).
async fn read_more_before<S: AsyncRead + AsyncWrite + Unpin>(
    conn: &Conn,
    stream: &mut ReadHalf<S>,
    ahead: &mut ReadAhead,
    deadline_ms: u64,
) -> Result<(), Stop> {
    let read = stream.read(ahead.free());
    let n = within_deadline(conn, read, deadline_ms).await?;
    if n == 0 {
        log::warn!("{}: closing: client vanished mid-request", conn.peer);
        return Err(Stop);
    }
    ahead.end += n;
    Ok(())
}

fn busy(conn: &Conn) -> bool {
    let max = conn.shard().config.max_in_flight_requests_per_connection as u64;
    conn.in_flight.available() + 1 < max
}

/// Runs a read of a request's bytes until `deadline_ms` (`request_read_timeout_ms`): a client
/// that trickles a request (slowloris) loses it, and one that vanishes mid-request is logged.
async fn within_deadline<T>(
    conn: &Conn,
    read: impl std::future::Future<Output = std::io::Result<T>>,
    deadline_ms: u64,
) -> Result<T, Stop> {
    let shard = conn.shard();
    let result = match shard.timers.sleep_until_idle(deadline_ms) {
        Ok(deadline) => {
            futures::pin_mut!(read, deadline);
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

/// A response to write, in request order, with what its request holds until it is written.
pub(super) struct Outgoing {
    pub(super) api_key: ApiKey,
    pub(super) api_version: i16,
    pub(super) correlation_id: i32,
    pub(super) answer: Answer,
    /// A bare SASL token (after SaslHandshake v0): written with its size alone, no header.
    pub(super) bare: bool,
    /// Close once this answer is written (a failed authentication).
    pub(super) then_close: bool,
    pub(super) held: Held,
}

impl Outgoing {
    pub(super) fn now(header: &RequestHeader, body: Vec<Chunk>, held: Held) -> Outgoing {
        Outgoing {
            api_key: header.api_key,
            api_version: header.api_version,
            correlation_id: header.correlation_id,
            answer: Answer::Now(body),
            bare: false,
            then_close: false,
            held,
        }
    }
}

pub(super) enum Answer {
    Now(Vec<Chunk>),
    /// A request still in progress in its own task (a produce waiting for its commit, a long
    /// poll); dropping it (the connection broke) cancels the task.
    Later(glommio::Task<anyhow::Result<Vec<Chunk>>>),
    /// The request could not be served: close once the earlier responses are written.
    Close,
}

/// Serves the connection's requests: the dispatcher runs each request's ordered part in
/// arrival order (so a partition's appends keep the order of their requests) and queues its
/// answer; the writer writes the answers in request order, waiting for those still in
/// progress. Requests whose remainder runs later (a produce's commit, a fetch's long poll) so
/// overlap with the requests after them, up to `max_in_flight_requests_per_connection`.
async fn serve_requests<S: AsyncRead + AsyncWrite + Unpin>(
    conn: &Conn,
    stream: WriteHalf<S>,
    rx: LocalReceiver<Incoming>,
) {
    let max_in_flight = conn.shard().config.max_in_flight_requests_per_connection;
    // Never holds more than max_in_flight items: each holds its request's in-flight slot.
    let (tx, queued) = local_channel::new_bounded(max_in_flight);
    let dispatcher = dispatch_requests(conn, rx, tx);
    let writer = write_responses(conn, stream, queued);
    futures::pin_mut!(dispatcher, writer);
    // When the dispatcher stops, the writer still writes what was queued; when the writer
    // stops (the socket broke, or a request could not be served), dispatching more is pointless.
    if let Either::Left(((), writer)) = futures::future::select(dispatcher, writer).await {
        writer.await;
    }
}

async fn dispatch_requests(conn: &Conn, rx: LocalReceiver<Incoming>, tx: LocalSender<Outgoing>) {
    while let Some(item) = rx.recv().await {
        let out = match item {
            Incoming::Request { header, body, held } => match header.api_key {
                ApiKey::SaslHandshake | ApiKey::SaslAuthenticate => {
                    Some(authenticate::request(conn, &header, body, held))
                }
                ApiKey::ApiVersions => dispatch(conn, header, body, held).await,
                key if !conn.auth.authenticated() => {
                    log::warn!("{}: closing: {key:?} before SASL authentication", conn.peer);
                    return;
                }
                _ if conn.auth.expired(conn.shard().clock()) => {
                    let why = "the SASL session expired (connections_max_reauth_ms)";
                    log::info!("{}: closing: {why}", conn.peer);
                    return;
                }
                _ => dispatch(conn, header, body, held).await,
            },
            Incoming::BareToken { token, held } => {
                Some(authenticate::bare_token(conn, token, held))
            }
            Incoming::ApiVersionsFallback {
                correlation_id,
                held,
            } => {
                let Ok(Reply::Body(body)) = kafka::api_versions::unsupported() else {
                    return;
                };
                let header = RequestHeader {
                    api_key: ApiKey::ApiVersions,
                    api_version: 0,
                    correlation_id,
                    client_id: None,
                };
                Some(Outgoing::now(&header, body, held))
            }
        };
        let Some(out) = out else { continue };
        let close = matches!(out.answer, Answer::Close) || out.then_close;
        if tx.send(out).await.is_err() || close {
            return;
        }
    }
}

/// Runs a request's handler: its answer, or None when nothing is written (acks=0).
async fn dispatch(conn: &Conn, header: RequestHeader, body: Bytes, held: Held) -> Option<Outgoing> {
    let shard = conn.shard();
    log::debug!(
        "{}: {:?} v{} correlation {}",
        conn.peer,
        header.api_key,
        header.api_version,
        header.correlation_id
    );
    shard.metrics().count_request(header.api_key as i16);
    let caller = conn.auth.caller();
    let answer = match kafka::dispatch(&conn.services, &header, body, &caller).await {
        Ok(Reply::None) => {
            held.observe(shard.clock(), header.api_key);
            return None; // `held` goes: nothing to write
        }
        Ok(Reply::Body(body)) => Answer::Now(body),
        Ok(Reply::Later(rest)) => Answer::Later(glommio::spawn_local(rest)),
        Err(e) => {
            log::warn!(
                "{}: closing: cannot serve {:?} v{}: {e}",
                conn.peer,
                header.api_key,
                header.api_version
            );
            Answer::Close
        }
    };
    let mut out = Outgoing::now(&header, Vec::new(), held);
    out.answer = answer;
    Some(out)
}

/// Writes the queued answers in request order; returns when the queue ends, the socket breaks,
/// or an answer says to close.
async fn write_responses<S: AsyncRead + AsyncWrite + Unpin>(
    conn: &Conn,
    mut stream: WriteHalf<S>,
    queued: LocalReceiver<Outgoing>,
) {
    while let Some(out) = queued.recv().await {
        let body = match out.answer {
            Answer::Now(body) => body,
            Answer::Later(task) => match task.await {
                Ok(body) => body,
                Err(e) => {
                    log::warn!(
                        "{}: closing: cannot serve {:?} v{}: {e}",
                        conn.peer,
                        out.api_key,
                        out.api_version
                    );
                    return;
                }
            },
            Answer::Close => return,
        };
        let chunks = match out.bare {
            true => bare_frame(body),
            false => frame::frame_response(out.api_key, out.api_version, out.correlation_id, body),
        };
        if !write_chunks(conn, &mut stream, chunks).await {
            return;
        }
        out.held.observe(conn.shard().clock(), out.api_key);
        if out.then_close {
            return;
        }
    }
}

/// A bare SASL token's frame: its size, then the token.
fn bare_frame(body: Vec<Chunk>) -> Vec<Chunk> {
    let len: usize = body.iter().map(Chunk::len).sum();
    let size = Bytes::copy_from_slice(&(len as i32).to_be_bytes());
    std::iter::once(Chunk::Bytes(size)).chain(body).collect()
}

/// Writes a framed response; false if the connection is gone. glommio's stream does not
/// buffer, so each chunk is in the socket before the next one (maybe a sendfile) starts. Under
/// TLS a file range is read and written through the stream (encrypted in user space).
async fn write_chunks(
    conn: &Conn,
    stream: &mut (impl AsyncWrite + Unpin),
    chunks: Vec<Chunk>,
) -> bool {
    let peer = &conn.peer;
    for chunk in chunks {
        let sent = match (&chunk, conn.socket) {
            (Chunk::Bytes(b), _) => stream.write_all(b).await,
            (Chunk::File(f), Some(socket)) => {
                super::sendfile::send(socket, stream, f, conn.shard().metrics()).await
            }
            (Chunk::File(f), None) => super::sendfile::copy(stream, f).await,
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
