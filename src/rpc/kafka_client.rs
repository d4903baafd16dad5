//! A node's connection to another node's Kafka listener: one request at a time, encoded and
//! decoded with kafka-protocol. Followers replicate over it (the leader's ordinary Fetch path,
//! so the leader sends segment bytes with sendfile as it does to consumers; the response's
//! record bytes are sliced out of the frame buffer, never copied), and transaction
//! coordinators and partition leaders call each other over it (WriteTxnMarkers,
//! AddPartitionsToTxn's verification), as Kafka's brokers do.
//!
//! On a TLS inter-broker listener the connection is TLS (`tls.rs`); on a SASL one the node
//! logs in as the cluster's node user with SCRAM (`security::node`) before its first request,
//! and connects again before the session's lifetime (KIP-368) runs out.

use super::within;
use crate::config::SecurityProtocol;
use crate::security::node::{NodeLogin, NODE_USER};
use crate::security::scram;
use bytes::{BufMut, Bytes, BytesMut};
use futures::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use glommio::net::TcpStream;
use kafka_protocol::messages::{
    RequestHeader, ResponseHeader, SaslAuthenticateRequest, SaslAuthenticateResponse,
    SaslHandshakeRequest,
};
use kafka_protocol::protocol::{Decodable, Encodable, HeaderVersion, Request, StrBytes};
use std::io::{Error, ErrorKind};
use std::rc::Rc;
use std::time::{Duration, Instant};

/// Bound on a response frame a node accepts: a fetch's own max_bytes plus room for the
/// response's fields. A larger size is garbage, and closes the connection.
pub const MAX_RESPONSE_BYTES: usize = 256 << 20;
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// SaslHandshake and SaslAuthenticate versions a node logs in with (v1: the session lifetime).
const SASL_VERSION: i16 = 1;

/// Where and how to reach another node's inter-broker listener.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Target {
    /// HOST:PORT.
    pub addr: String,
    /// The name its certificate must carry (TLS).
    host: String,
    protocol: SecurityProtocol,
}

impl Target {
    pub fn new(host: &str, port: i32, protocol: SecurityProtocol) -> Target {
        Target {
            addr: format!("{host}:{port}"),
            host: host.to_string(),
            protocol,
        }
    }
}

/// A plain or TLS stream.
trait Duplex: AsyncRead + AsyncWrite + Unpin {}
impl<T: AsyncRead + AsyncWrite + Unpin> Duplex for T {}
type Stream = Box<dyn Duplex>;

pub struct KafkaClient {
    pub target: Target,
    /// The client id its requests carry (who is calling, in the other node's logs).
    client_id: &'static str,
    login: Rc<NodeLogin>,
    stream: Option<Stream>,
    correlation: i32,
    /// When to connect again: before the SASL session's lifetime ends.
    renew_at: Option<Instant>,
}

impl KafkaClient {
    pub fn new(target: Target, client_id: &'static str, login: Rc<NodeLogin>) -> KafkaClient {
        KafkaClient {
            target,
            client_id,
            login,
            stream: None,
            correlation: 0,
            renew_at: None,
        }
    }

    /// Sends `req` at `version` and waits at most `limit` for its response. Any failure drops
    /// the connection; the next call opens a new one.
    pub async fn call<R: Request>(
        &mut self,
        version: i16,
        req: &R,
        limit: Duration,
    ) -> std::io::Result<R::Response> {
        if super::cut_off() {
            self.stream = None;
            return Err(Error::new(ErrorKind::NotConnected, "cut off (fault hook)"));
        }
        let result = within(limit, self.exchange(version, req)).await;
        let result = result.unwrap_or_else(|| {
            Err(Error::new(
                ErrorKind::TimedOut,
                format!("no response from {} in {limit:?}", self.target.addr),
            ))
        });
        if result.is_err() {
            self.stream = None;
        }
        result
    }

    async fn exchange<R: Request>(
        &mut self,
        version: i16,
        req: &R,
    ) -> std::io::Result<R::Response> {
        if self.renew_at.is_some_and(|at| Instant::now() >= at) {
            self.stream = None;
        }
        if self.stream.is_none() {
            self.stream = Some(self.connect().await?);
        }
        let stream = self.stream.as_mut().expect("just connected");
        self.correlation = self.correlation.wrapping_add(1);
        round_trip(stream, self.correlation, self.client_id, version, req).await
    }

    /// A new connection, through TLS and logged in as the listener asks.
    async fn connect(&mut self) -> std::io::Result<Stream> {
        let addr = self.target.addr.as_str();
        let tcp = within(CONNECT_TIMEOUT, TcpStream::connect(addr))
            .await
            .ok_or_else(|| Error::new(ErrorKind::TimedOut, "connect timed out"))?
            .map_err(|e| Error::other(e.to_string()))?;
        let _ = tcp.set_nodelay(true);
        let mut stream: Stream = if self.target.protocol.tls() {
            Box::new(self.tls(tcp).await?)
        } else {
            Box::new(tcp)
        };
        self.renew_at = None;
        if self.target.protocol.sasl() {
            let lifetime = self.log_in(&mut stream).await?;
            // Renewed at 90% of its lifetime, so a request never meets the end of it.
            self.renew_at = lifetime.map(|d| Instant::now() + d * 9 / 10);
        }
        Ok(stream)
    }

    async fn tls(
        &self,
        tcp: TcpStream,
    ) -> std::io::Result<futures_rustls::client::TlsStream<TcpStream>> {
        let connector = super::tls::connector().ok_or_else(|| {
            Error::other("no TLS client configuration ([tls] ca_file or client_ca_file)")
        })?;
        let name = rustls_pki_types::ServerName::try_from(self.target.host.clone())
            .map_err(|e| Error::new(ErrorKind::InvalidInput, e.to_string()))?;
        within(CONNECT_TIMEOUT, connector.connect(name, tcp))
            .await
            .ok_or_else(|| Error::new(ErrorKind::TimedOut, "TLS handshake timed out"))?
    }

    /// SASL SCRAM as the node user; Ok: the session's lifetime, if the peer gave one.
    async fn log_in(&mut self, stream: &mut Stream) -> std::io::Result<Option<Duration>> {
        let login = self.login.clone();
        let secret = login.secret.as_ref().ok_or_else(|| {
            Error::other("a SASL inter-broker listener, but no [cluster] secret to log in with")
        })?;
        let m = login.mechanism;
        let handshake =
            SaslHandshakeRequest::default().with_mechanism(StrBytes::from_static_str(m.name()));
        self.correlation = self.correlation.wrapping_add(1);
        let (c, id) = (self.correlation, self.client_id);
        let r = round_trip(stream, c, id, SASL_VERSION, &handshake).await?;
        if r.error_code != 0 {
            return Err(refused(format!(
                "SaslHandshake {}: error {}",
                m.name(),
                r.error_code
            )));
        }
        let nonce = uuid::Uuid::new_v4().simple().to_string();
        let (started, first) = scram::client::start(m, NODE_USER, &secret.password(), &nonce);
        let server_first = self.authenticate(stream, first).await?.auth_bytes;
        let (proven, last) = started
            .answer(&server_first)
            .map_err(|e| refused(e.0.into()))?;
        let done = self.authenticate(stream, last).await?;
        proven
            .verify(&done.auth_bytes)
            .map_err(|e| refused(e.0.into()))?;
        let lifetime_ms = u64::try_from(done.session_lifetime_ms).unwrap_or(0);
        Ok((lifetime_ms > 0).then(|| Duration::from_millis(lifetime_ms)))
    }

    async fn authenticate(
        &mut self,
        stream: &mut Stream,
        token: Vec<u8>,
    ) -> std::io::Result<SaslAuthenticateResponse> {
        let req = SaslAuthenticateRequest::default().with_auth_bytes(Bytes::from(token));
        self.correlation = self.correlation.wrapping_add(1);
        let (c, id) = (self.correlation, self.client_id);
        let r = round_trip(stream, c, id, SASL_VERSION, &req).await?;
        if r.error_code != 0 {
            let why = r.error_message.as_deref().unwrap_or("").to_string();
            return Err(refused(format!(
                "SaslAuthenticate: error {}: {why}",
                r.error_code
            )));
        }
        Ok(r)
    }
}

fn refused(why: String) -> Error {
    Error::new(
        ErrorKind::PermissionDenied,
        format!("logging in as {NODE_USER}: {why}"),
    )
}

fn invalid(e: impl std::fmt::Display) -> Error {
    Error::new(ErrorKind::InvalidData, e.to_string())
}

/// Writes one request and reads its response.
async fn round_trip<R: Request>(
    stream: &mut Stream,
    correlation: i32,
    client_id: &'static str,
    version: i16,
    req: &R,
) -> std::io::Result<R::Response> {
    let frame = encode_request(correlation, client_id, version, req)?;
    stream.write_all(&frame).await?;
    let mut size = [0u8; 4];
    stream.read_exact(&mut size).await?;
    let size = i32::from_be_bytes(size);
    if size < 4 || size as usize > MAX_RESPONSE_BYTES {
        return Err(invalid(format!("response of {size} bytes")));
    }
    let mut body = vec![0u8; size as usize];
    stream.read_exact(&mut body).await?;
    let mut body = Bytes::from(body);
    let header =
        ResponseHeader::decode(&mut body, R::Response::header_version(version)).map_err(invalid)?;
    if header.correlation_id != correlation {
        return Err(invalid("response out of order"));
    }
    R::Response::decode(&mut body, version).map_err(invalid)
}

/// A whole request frame: size, header, body.
fn encode_request<R: Request>(
    correlation: i32,
    client_id: &'static str,
    version: i16,
    req: &R,
) -> std::io::Result<Bytes> {
    let header = RequestHeader::default()
        .with_request_api_key(R::KEY)
        .with_request_api_version(version)
        .with_correlation_id(correlation)
        .with_client_id(Some(StrBytes::from_static_str(client_id)));
    let mut buf = BytesMut::new();
    buf.put_i32(0);
    header
        .encode(&mut buf, R::header_version(version))
        .map_err(invalid)?;
    req.encode(&mut buf, version).map_err(invalid)?;
    let size = (buf.len() - 4) as i32;
    buf[..4].copy_from_slice(&size.to_be_bytes());
    Ok(buf.freeze())
}
