//! Inter-node RPC over TCP: framed, versioned, checksummed messages (`frame.rs`), a server that
//! hands each frame to the layer above, and `Peer`, an outgoing connection that carries
//! one-way messages and calls (a request and its reply, paired by correlation id).
//!
//! With a cluster secret, each connection opens with a handshake that proves it both ways
//! (`handshake.rs`); without one, nodes trust their network.
//!
//! Bounds, as on the Kafka listener: a frame size limit, a deadline on a frame's bytes once its
//! first arrived, a bound on connections and on calls in flight per connection, and garbage
//! closes the connection with a log line (never a panic).

pub mod frame;
mod handshake;
pub mod kafka_client;
mod stream;
pub mod tls;

use crate::metrics::LogLimiter;
use crate::security::node::NodeSecret;
use frame::{FrameError, Header, HEADER_BYTES};
use futures::channel::oneshot;
use futures::future::{Either, LocalBoxFuture};
use futures::io::{AsyncReadExt, AsyncWriteExt, ReadHalf, WriteHalf};
use glommio::net::{TcpListener, TcpStream};
use glommio::sync::Semaphore;
use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::rc::Rc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};
use stream::RpcStream;

/// A fault hook for tests (a cut network link): while set, this node sends and accepts no
/// inter-node traffic: no RPC frames (Raft, heartbeats, forwarded writes) and no replication
/// fetches either way; clients still reach it. Only the `server` sets it, on SIGUSR1 (SIGUSR2
/// clears it), and only in a process started with SLUICE_FAULT_HOOKS=1.
static CUT_OFF: AtomicBool = AtomicBool::new(false);

pub fn cut_off() -> bool {
    CUT_OFF.load(Ordering::Relaxed)
}

pub fn set_cut_off(on: bool) {
    CUT_OFF.store(on, Ordering::Relaxed);
}

fn cut_off_error() -> std::io::Error {
    std::io::Error::new(
        std::io::ErrorKind::NotConnected,
        "cut off from the other nodes (fault hook)",
    )
}

/// What the layer above does with an incoming frame (kind, payload): nothing more for a
/// one-way message (None), or a future of the reply (kind, payload) to send back.
pub type Handler = Rc<dyn Fn(u8, Vec<u8>) -> Option<LocalBoxFuture<'static, (u8, Vec<u8>)>>>;

/// Bound on RPC connections one node accepts (peers and brokers of one cluster).
pub const MAX_CONNECTIONS: usize = 1024;
/// Bound on calls a connection has in progress; past it the server stops reading it.
pub const MAX_CALLS_PER_CONNECTION: usize = 256;
/// Time allowed from a frame's first byte to its last.
const FRAME_READ_TIMEOUT: Duration = Duration::from_secs(10);
/// How long a connection attempt to a peer may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(1);
/// At most one line per this interval about connections refused at the handshake.
const REFUSALS_LOG_INTERVAL_MS: u64 = 10_000;

/// Runs `f` until `limit`; None if the time ran out first.
pub async fn within<T>(limit: Duration, f: impl std::future::Future<Output = T>) -> Option<T> {
    let sleep = glommio::timer::sleep(limit);
    futures::pin_mut!(f, sleep);
    match futures::future::select(f, sleep).await {
        Either::Left((v, _)) => Some(v),
        Either::Right(_) => None,
    }
}

/// Binds `addr` for RPC (on any thread; `serve` takes it on the executor that serves it).
/// Bound without SO_REUSEPORT, so a port another process holds is an error here rather than
/// traffic silently split between two processes.
pub fn bind(addr: &str) -> std::io::Result<std::net::TcpListener> {
    let listener = std::net::TcpListener::bind(addr)?;
    listener.set_nonblocking(true)?;
    Ok(listener)
}

/// Accepts connections for as long as the executor runs, serving each with `handler`; with a
/// cluster secret, only connections that prove it (`handshake.rs`).
pub async fn serve(listener: std::net::TcpListener, handler: Handler, secret: Option<NodeSecret>) {
    use std::os::fd::{FromRawFd, IntoRawFd};
    // SAFETY: the descriptor is a listening socket handed over whole.
    let listener = unsafe { TcpListener::from_raw_fd(listener.into_raw_fd()) };
    let open = Rc::new(Cell::new(0usize));
    // A node with another secret retries every heartbeat: its refusals are logged at most once
    // per `REFUSALS_LOG_INTERVAL_MS`.
    let refusals = Rc::new((LogLimiter::new(REFUSALS_LOG_INTERVAL_MS), Instant::now()));
    loop {
        let stream = match listener.accept().await {
            Ok(s) => s,
            Err(e) => {
                log::warn!("rpc: accept failed: {e}");
                glommio::timer::sleep(Duration::from_millis(100)).await;
                continue;
            }
        };
        if open.get() >= MAX_CONNECTIONS {
            log::warn!("rpc: {MAX_CONNECTIONS} connections open (the limit); closing a new one");
            continue;
        }
        open.set(open.get() + 1);
        let (open, handler, secret) = (open.clone(), handler.clone(), secret.clone());
        let refusals = refusals.clone();
        glommio::spawn_local(async move {
            let peer = stream
                .peer_addr()
                .map_or_else(|_| "?".to_string(), |a| a.to_string());
            match serve_connection(stream, handler, secret).await {
                Err(e) if e.kind() == std::io::ErrorKind::PermissionDenied => {
                    let (limiter, born) = &*refusals;
                    if let Some(n) = limiter.admit(born.elapsed().as_millis() as u64) {
                        log::warn!(
                            "rpc: connection from {peer} refused: {e} ({n} more not logged)"
                        );
                    }
                }
                Err(e) => log::warn!("rpc: connection from {peer} closed: {e}"),
                Ok(()) => {}
            }
            open.set(open.get() - 1);
        })
        .detach();
    }
}

async fn serve_connection(
    stream: TcpStream,
    handler: Handler,
    secret: Option<NodeSecret>,
) -> std::io::Result<()> {
    let _ = stream.set_nodelay(true);
    let stream = match tls::rpc_acceptor() {
        None => RpcStream::Plain(stream),
        Some(acceptor) => {
            let accepted = within(FRAME_READ_TIMEOUT, acceptor.accept(stream)).await;
            let tls = accepted.unwrap_or_else(|| Err(timed_out("no TLS handshake in time")));
            // A dialer without a certificate of the cluster's CA is refused here.
            let tls = tls.map_err(|e| denied_by_tls(&e))?;
            RpcStream::Accepted(Box::new(tls))
        }
    };
    let (mut reader, writer) = stream.split();
    let writer = Rc::new(Writer::new(writer));
    if let Some(secret) = &secret {
        handshake::answer(&mut reader, &writer, secret).await?;
    }
    let calls = Rc::new(Semaphore::new(MAX_CALLS_PER_CONNECTION as u64));
    loop {
        let Some((header, payload)) = read_frame(&mut reader).await? else {
            return Ok(());
        };
        if cut_off() {
            return Err(cut_off_error());
        }
        let Some(reply) = handler(header.kind, payload) else {
            continue;
        };
        let permit = calls.clone().acquire_static_permit(1).await;
        let writer = writer.clone();
        glommio::spawn_local(async move {
            let (kind, payload) = reply.await;
            let _ = writer.write(kind, header.correlation, &payload).await;
            drop(permit);
        })
        .detach();
    }
}

/// Reads one whole frame; None at a clean end of stream (between frames).
async fn read_frame(
    reader: &mut ReadHalf<RpcStream>,
) -> std::io::Result<Option<(Header, Vec<u8>)>> {
    read_frame_of(reader, frame::MAX_FRAME_BYTES).await
}

/// `read_frame`, refusing a frame whose payload is over `max_payload_bytes` before its payload
/// is read: before the cluster-secret handshake a dialer is owed no more memory than a
/// handshake frame.
async fn read_frame_of(
    reader: &mut ReadHalf<RpcStream>,
    max_payload_bytes: usize,
) -> std::io::Result<Option<(Header, Vec<u8>)>> {
    let mut head = [0u8; HEADER_BYTES];
    let n = reader.read(&mut head[..1]).await?;
    if n == 0 {
        return Ok(None);
    }
    let rest = async {
        reader.read_exact(&mut head[1..]).await?;
        let header = frame::decode_header(&head).map_err(invalid)?;
        if header.payload_bytes > max_payload_bytes {
            let n = header.payload_bytes;
            let why = format!("a frame of {n} bytes where at most {max_payload_bytes} fit");
            return Err(std::io::Error::new(
                std::io::ErrorKind::PermissionDenied,
                why,
            ));
        }
        let payload = read_payload(reader, header.payload_bytes).await?;
        frame::check_payload(&header, &payload).map_err(invalid)?;
        Ok::<_, std::io::Error>((header, payload))
    };
    match within(FRAME_READ_TIMEOUT, rest).await {
        Some(r) => r.map(Some),
        None => Err(timed_out("a frame's bytes did not arrive in time")),
    }
}

/// What a payload's buffer grows by as its bytes arrive.
const PAYLOAD_CHUNK_BYTES: usize = 1 << 20;

/// Reads a payload of `len_bytes`, its buffer growing only as bytes arrive, so that a header
/// claiming a large frame (up to `MAX_FRAME_BYTES`) costs no more memory than what was sent.
async fn read_payload(
    reader: &mut ReadHalf<RpcStream>,
    len_bytes: usize,
) -> std::io::Result<Vec<u8>> {
    let mut payload = Vec::with_capacity(len_bytes.min(PAYLOAD_CHUNK_BYTES));
    while payload.len() < len_bytes {
        let start = payload.len();
        payload.resize(start + (len_bytes - start).min(PAYLOAD_CHUNK_BYTES), 0);
        reader.read_exact(&mut payload[start..]).await?;
    }
    Ok(payload)
}

fn timed_out(why: &str) -> std::io::Error {
    std::io::Error::new(std::io::ErrorKind::TimedOut, why.to_string())
}

/// A TLS handshake refused: logged as a refusal (PermissionDenied), at most once per interval.
fn denied_by_tls(e: &std::io::Error) -> std::io::Error {
    let why = format!("TLS handshake failed: {e}: check that every node's certificate is signed by the cluster's CA ([tls] ca_file) for the address it is dialed at");
    std::io::Error::new(std::io::ErrorKind::PermissionDenied, why)
}

fn invalid(e: FrameError) -> std::io::Error {
    std::io::Error::new(std::io::ErrorKind::InvalidData, e.to_string())
}

/// A connection's sending side: whole frames, one at a time.
struct Writer {
    half: RefCell<Option<WriteHalf<RpcStream>>>,
    lock: Semaphore,
}

impl Writer {
    fn new(half: WriteHalf<RpcStream>) -> Writer {
        Writer {
            half: RefCell::new(Some(half)),
            lock: Semaphore::new(1),
        }
    }

    async fn write(&self, kind: u8, correlation: u64, payload: &[u8]) -> std::io::Result<()> {
        let bytes = frame::encode(kind, correlation, payload);
        let _turn = self
            .lock
            .acquire_permit(1)
            .await
            .map_err(|e| std::io::Error::other(e.to_string()))?;
        // Taken out while writing (the lock makes this the only writer), so no borrow is held
        // across the await.
        let mut half = self.half.borrow_mut().take().ok_or_else(closed)?;
        // Flushed: TLS holds written bytes until then.
        let result = match half.write_all(&bytes).await {
            Ok(()) => half.flush().await,
            Err(e) => Err(e),
        };
        if result.is_ok() {
            *self.half.borrow_mut() = Some(half);
        }
        result
    }
}

fn closed() -> std::io::Error {
    std::io::Error::new(std::io::ErrorKind::NotConnected, "connection closed")
}

/// An outgoing connection to one peer, opened on first use and again after a failure.
pub struct Peer {
    pub addr: String,
    conn: RefCell<Option<Rc<Conn>>>,
    next_correlation: Cell<u64>,
    /// The cluster secret each new connection proves, and has the peer prove.
    secret: Option<NodeSecret>,
    /// A peer that fails the handshake is a configuration error, said loudly but at most once
    /// per `REFUSALS_LOG_INTERVAL_MS` (callers retry every heartbeat); the Instant is the
    /// limiter's clock origin.
    refusals: (LogLimiter, Instant),
}

/// A reply: (kind, payload).
type Frame = (u8, Vec<u8>);

struct Conn {
    writer: Writer,
    waiters: RefCell<HashMap<u64, oneshot::Sender<Frame>>>,
    broken: Cell<bool>,
}

impl Peer {
    pub fn new(addr: String, secret: Option<NodeSecret>) -> Peer {
        Peer {
            addr,
            conn: RefCell::new(None),
            next_correlation: Cell::new(1),
            secret,
            refusals: (LogLimiter::new(REFUSALS_LOG_INTERVAL_MS), Instant::now()),
        }
    }

    /// Sends a one-way message.
    pub async fn send(&self, kind: u8, payload: &[u8]) -> std::io::Result<()> {
        let conn = self.connection().await?;
        let sent = conn.writer.write(kind, 0, payload).await;
        self.drop_if_failed(&conn, &sent);
        sent
    }

    /// Sends a request and waits for its reply, at most `limit`.
    pub async fn call(
        &self,
        kind: u8,
        payload: &[u8],
        limit: Duration,
    ) -> std::io::Result<(u8, Vec<u8>)> {
        let conn = self.connection().await?;
        let correlation = self.next_correlation.get();
        self.next_correlation.set(correlation + 1);
        let (tx, rx) = oneshot::channel();
        conn.waiters.borrow_mut().insert(correlation, tx);
        let sent = conn.writer.write(kind, correlation, payload).await;
        self.drop_if_failed(&conn, &sent);
        if let Err(e) = sent {
            conn.waiters.borrow_mut().remove(&correlation);
            return Err(e);
        }
        let reply = within(limit, rx).await;
        conn.waiters.borrow_mut().remove(&correlation);
        match reply {
            Some(Ok(r)) => Ok(r),
            Some(Err(_)) => Err(closed()),
            None => Err(timed_out(&format!(
                "no reply from {} in {limit:?}",
                self.addr
            ))),
        }
    }

    fn drop_if_failed(&self, conn: &Rc<Conn>, result: &std::io::Result<()>) {
        if result.is_err() {
            conn.broken.set(true);
            self.conn.borrow_mut().take();
        }
    }

    /// Logs a refusal at the handshake (TLS or the secret's), with `hint` on what to check.
    fn log_refusal(&self, e: &std::io::Error, hint: &str) {
        let (limiter, born) = &self.refusals;
        if e.kind() != std::io::ErrorKind::PermissionDenied {
            return;
        }
        if let Some(n) = limiter.admit(born.elapsed().as_millis() as u64) {
            log::error!(
                "rpc: node at {} refused: {e}{hint} ({n} more not logged)",
                self.addr
            );
        }
    }

    async fn connection(&self) -> std::io::Result<Rc<Conn>> {
        if cut_off() {
            if let Some(c) = self.conn.borrow_mut().take() {
                c.broken.set(true);
            }
            return Err(cut_off_error());
        }
        let current = self.conn.borrow().clone();
        if let Some(c) = current.filter(|c| !c.broken.get()) {
            return Ok(c);
        }
        let stream = within(CONNECT_TIMEOUT, TcpStream::connect(self.addr.as_str()))
            .await
            .ok_or_else(|| timed_out("connect timed out"))?
            .map_err(|e| std::io::Error::other(e.to_string()))?;
        let _ = stream.set_nodelay(true);
        let stream = match self.dial_tls(stream).await {
            Ok(s) => s,
            Err(e) => {
                self.log_refusal(&e, "");
                return Err(e);
            }
        };
        let (mut reader, writer) = stream.split();
        let writer = Writer::new(writer);
        if let Some(secret) = &self.secret {
            let proven = within(
                CONNECT_TIMEOUT,
                handshake::open(&mut reader, &writer, secret),
            );
            let proven = proven
                .await
                .unwrap_or_else(|| Err(timed_out("RPC handshake timed out")));
            if let Err(e) = proven {
                self.log_refusal(&e, ": check that both have the same [cluster] secret");
                return Err(e);
            }
        }
        let conn = Rc::new(Conn {
            writer,
            waiters: RefCell::new(HashMap::new()),
            broken: Cell::new(false),
        });
        glommio::spawn_local(read_replies(reader, conn.clone())).detach();
        *self.conn.borrow_mut() = Some(conn.clone());
        Ok(conn)
    }

    /// A new connection as RPC is spoken on this cluster: TLS where it is encrypted, the peer's
    /// certificate checked against the CA for the address dialed.
    async fn dial_tls(&self, stream: TcpStream) -> std::io::Result<RpcStream> {
        let Some(dialer) = tls::rpc_dialer() else {
            return Ok(RpcStream::Plain(stream));
        };
        let host = self
            .addr
            .rsplit_once(':')
            .map_or(self.addr.as_str(), |(h, _)| h);
        let host = host.trim_start_matches('[').trim_end_matches(']');
        let name = rustls_pki_types::ServerName::try_from(host.to_string()).map_err(|e| {
            std::io::Error::new(std::io::ErrorKind::InvalidInput, format!("{host}: {e}"))
        })?;
        let dialed = within(CONNECT_TIMEOUT, dialer.connect(name, stream)).await;
        let tls = dialed.unwrap_or_else(|| Err(timed_out("TLS handshake timed out")));
        Ok(RpcStream::Dialed(Box::new(
            tls.map_err(|e| denied_by_tls(&e))?,
        )))
    }
}

/// Hands each reply on an outgoing connection to its caller; a broken stream fails them all.
async fn read_replies(mut reader: ReadHalf<RpcStream>, conn: Rc<Conn>) {
    while let Ok(Some((header, payload))) = read_frame(&mut reader).await {
        let waiter = conn.waiters.borrow_mut().remove(&header.correlation);
        if let Some(tx) = waiter {
            let _ = tx.send((header.kind, payload));
        }
    }
    conn.broken.set(true);
    conn.waiters.borrow_mut().clear();
}
