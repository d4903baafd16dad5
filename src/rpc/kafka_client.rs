//! A node's connection to another node's Kafka listener: one request at a time, encoded and
//! decoded with kafka-protocol. Followers replicate over it (the leader's ordinary Fetch path,
//! so the leader sends segment bytes with sendfile as it does to consumers; the response's
//! record bytes are sliced out of the frame buffer, never copied), and transaction
//! coordinators and partition leaders call each other over it (WriteTxnMarkers,
//! AddPartitionsToTxn's verification), as Kafka's brokers do.

use super::within;
use bytes::{BufMut, Bytes, BytesMut};
use futures::{AsyncReadExt, AsyncWriteExt};
use glommio::net::TcpStream;
use kafka_protocol::messages::{RequestHeader, ResponseHeader};
use kafka_protocol::protocol::{Decodable, Encodable, HeaderVersion, Request, StrBytes};
use std::io::{Error, ErrorKind};
use std::time::Duration;

/// Bound on a response frame a node accepts: a fetch's own max_bytes plus room for the
/// response's fields. A larger size is garbage, and closes the connection.
pub const MAX_RESPONSE_BYTES: usize = 256 << 20;
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

pub struct KafkaClient {
    pub addr: String,
    /// The client id its requests carry (who is calling, in the other node's logs).
    client_id: &'static str,
    stream: Option<TcpStream>,
    correlation: i32,
}

impl KafkaClient {
    pub fn new(addr: String, client_id: &'static str) -> KafkaClient {
        KafkaClient {
            addr,
            client_id,
            stream: None,
            correlation: 0,
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
                format!("no response from {} in {limit:?}", self.addr),
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
        self.correlation = self.correlation.wrapping_add(1);
        let frame = encode_request(self.correlation, self.client_id, version, req)?;
        let stream = self.connect().await?;
        stream.write_all(&frame).await?;
        let mut size = [0u8; 4];
        stream.read_exact(&mut size).await?;
        let size = i32::from_be_bytes(size);
        if size < 4 || size as usize > MAX_RESPONSE_BYTES {
            return Err(Error::new(
                ErrorKind::InvalidData,
                format!("response of {size} bytes from {}", self.addr),
            ));
        }
        let mut body = vec![0u8; size as usize];
        stream.read_exact(&mut body).await?;
        let mut body = Bytes::from(body);
        let header = ResponseHeader::decode(&mut body, R::Response::header_version(version))
            .map_err(invalid)?;
        if header.correlation_id != self.correlation {
            return Err(Error::new(
                ErrorKind::InvalidData,
                "response out of order".to_string(),
            ));
        }
        R::Response::decode(&mut body, version).map_err(invalid)
    }

    async fn connect(&mut self) -> std::io::Result<&mut TcpStream> {
        if self.stream.is_none() {
            let stream = within(CONNECT_TIMEOUT, TcpStream::connect(self.addr.as_str()))
                .await
                .ok_or_else(|| Error::new(ErrorKind::TimedOut, "connect timed out"))?
                .map_err(|e| Error::other(e.to_string()))?;
            let _ = stream.set_nodelay(true);
            self.stream = Some(stream);
        }
        Ok(self.stream.as_mut().expect("just connected"))
    }
}

fn invalid(e: impl std::fmt::Display) -> Error {
    Error::new(ErrorKind::InvalidData, e.to_string())
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
