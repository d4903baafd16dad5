//! One client connection: read a size-prefixed frame, dispatch it, write the response, in
//! order. Like Kafka, a connection has one request in progress at a time, which keeps
//! responses in request order without reordering buffers.

use crate::kafka::{self, Reply};
use crate::protocol::frame::{self, FrameError};
use crate::shard::Shard;
use bytes::BytesMut;
use futures::{AsyncReadExt, AsyncWriteExt};
use glommio::net::TcpStream;
use kafka_protocol::messages::ApiKey;
use std::rc::Rc;

/// Serves one connection until it closes; `_admission` holds its slot in the connection limits.
pub async fn serve(shard: Rc<Shard>, mut stream: TcpStream, _admission: super::limits::Admission) {
    let peer_addr = stream.peer_addr().ok();
    let peer = peer_addr
        .map(|a| a.to_string())
        .unwrap_or_else(|| "?".into());
    // Kafka reports a member's host as "/<ip>".
    let client_host = peer_addr
        .map(|a| format!("/{}", a.ip()))
        .unwrap_or_default();
    if let Err(e) = stream.set_nodelay(true) {
        log::warn!("{peer}: cannot set TCP_NODELAY: {e}");
    }
    let max = shard.config.request_max_bytes;
    loop {
        let mut size_buf = [0u8; 4];
        // Between requests a connection may idle for connections_max_idle_ms, timed on the
        // shard's wheel; the timer is cancelled as soon as a request starts.
        let idle_deadline = crate::shard::now_ms() + shard.config.connections_max_idle_ms;
        let next = match shard.timers.sleep_until_idle(idle_deadline) {
            Ok(idle) => {
                let read = read_exact_or_eof(&mut stream, &mut size_buf);
                futures::pin_mut!(read);
                match futures::future::select(read, idle).await {
                    futures::future::Either::Left((r, _)) => r,
                    futures::future::Either::Right(_) => {
                        log::info!(
                            "{peer}: closing: idle for {} ms (connections_max_idle_ms)",
                            shard.config.connections_max_idle_ms
                        );
                        return;
                    }
                }
            }
            Err(_) => read_exact_or_eof(&mut stream, &mut size_buf).await,
        };
        match next {
            Ok(true) => {}
            Ok(false) => return, // closed between requests: a normal goodbye
            Err(e) => {
                log::info!("{peer}: connection lost reading a frame size: {e}");
                return;
            }
        }
        let size = i32::from_be_bytes(size_buf);
        if size < frame::MIN_HEADER_BYTES as i32 || size as usize > max {
            log::warn!(
                "{peer}: closing: frame size {size} is outside {}..={max}",
                frame::MIN_HEADER_BYTES
            );
            return;
        }
        let mut buf = BytesMut::zeroed(size as usize);
        if let Err(e) = stream.read_exact(&mut buf).await {
            log::warn!(
                "{peer}: closing: client vanished mid-request ({size} bytes announced): {e}"
            );
            return;
        }
        let (header, body) = match frame::parse_request(buf.freeze(), kafka::supported) {
            Ok(x) => x,
            Err(FrameError::UnsupportedVersion {
                api_key: ApiKey::ApiVersions,
                correlation_id,
                ..
            }) => {
                // KIP-511: answer in v0 with the versions served, so the client can downgrade.
                let body = match kafka::api_versions::unsupported() {
                    Ok(Reply::Body(body)) => body,
                    _ => return,
                };
                if write_response(
                    &mut stream,
                    &peer,
                    ApiKey::ApiVersions,
                    0,
                    correlation_id,
                    body,
                )
                .await
                {
                    continue;
                }
                return;
            }
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
        if shard.shutting_down.get() {
            log::info!("{peer}: closing: the broker is shutting down");
            return;
        }
        log::debug!(
            "{peer}: {:?} v{} correlation {}",
            header.api_key,
            header.api_version,
            header.correlation_id
        );
        shard
            .requests_in_progress
            .set(shard.requests_in_progress.get() + 1);
        shard.metrics.count_request(header.api_key);
        let reply = kafka::dispatch(&shard, &header, body, &client_host).await;
        shard
            .requests_in_progress
            .set(shard.requests_in_progress.get() - 1);
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
        if !write_response(&mut stream, &peer, key, version, id, body).await {
            return;
        }
    }
}

/// Writes a framed response; false if the connection is gone.
async fn write_response(
    stream: &mut TcpStream,
    peer: &str,
    api_key: ApiKey,
    api_version: i16,
    correlation_id: i32,
    body: Vec<bytes::Bytes>,
) -> bool {
    for chunk in frame::frame_response(api_key, api_version, correlation_id, body) {
        if let Err(e) = stream.write_all(&chunk).await {
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

/// Fills `buf`; Ok(false) if the stream ended before the first byte.
async fn read_exact_or_eof(stream: &mut TcpStream, buf: &mut [u8]) -> std::io::Result<bool> {
    let mut filled = 0;
    while filled < buf.len() {
        let n = stream.read(&mut buf[filled..]).await?;
        if n == 0 {
            if filled == 0 {
                return Ok(false);
            }
            return Err(std::io::Error::new(
                std::io::ErrorKind::UnexpectedEof,
                "stream ended mid-size",
            ));
        }
        filled += n;
    }
    Ok(true)
}
