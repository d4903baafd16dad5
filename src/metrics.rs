//! Counters each shard keeps about itself, and a tiny Prometheus text endpoint that reads them.
//! A shard only ever writes its own counters (relaxed atomics, no locks); the endpoint's
//! thread only reads.

use crate::kafka::SUPPORTED;
use std::io::{Read, Write};
use std::net::TcpListener;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// Bytes of an HTTP request the endpoint reads before answering.
const MAX_REQUEST_BYTES: usize = 8192;
const IO_TIMEOUT: Duration = Duration::from_secs(2);

#[derive(Default)]
pub struct ShardMetrics {
    /// Requests served, per entry of `kafka::SUPPORTED`.
    pub requests: [AtomicU64; SUPPORTED.len()],
    pub parked: AtomicU64,
    pub parked_rejected: AtomicU64,
}

impl ShardMetrics {
    pub fn count_request(&self, api_key: kafka_protocol::messages::ApiKey) {
        if let Some(i) = SUPPORTED.iter().position(|&(k, _, _)| k == api_key) {
            self.requests[i].fetch_add(1, Ordering::Relaxed);
        }
    }
}

pub fn render(shards: &[Arc<ShardMetrics>]) -> String {
    let mut out = String::new();
    out.push_str("# HELP sluice_requests_total Kafka requests served.\n# TYPE sluice_requests_total counter\n");
    for (s, m) in shards.iter().enumerate() {
        for (i, &(key, _, _)) in SUPPORTED.iter().enumerate() {
            out.push_str(&format!(
                "sluice_requests_total{{shard=\"{s}\",api=\"{key:?}\"}} {}\n",
                m.requests[i].load(Ordering::Relaxed)
            ));
        }
    }
    out.push_str("# HELP sluice_parked_operations Operations parked on the shard's timing wheel.\n# TYPE sluice_parked_operations gauge\n");
    for (s, m) in shards.iter().enumerate() {
        out.push_str(&format!(
            "sluice_parked_operations{{shard=\"{s}\"}} {}\n",
            m.parked.load(Ordering::Relaxed)
        ));
    }
    out.push_str("# HELP sluice_parked_rejected_total Operations not parked because the shard's bound was reached.\n# TYPE sluice_parked_rejected_total counter\n");
    for (s, m) in shards.iter().enumerate() {
        out.push_str(&format!(
            "sluice_parked_rejected_total{{shard=\"{s}\"}} {}\n",
            m.parked_rejected.load(Ordering::Relaxed)
        ));
    }
    out
}

/// Serves `GET /metrics` on `listener` from a thread of its own, one connection at a time.
pub fn serve(listener: TcpListener, shards: Vec<Arc<ShardMetrics>>) -> std::io::Result<()> {
    std::thread::Builder::new().name("metrics".into()).spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { continue };
            let _ = stream.set_read_timeout(Some(IO_TIMEOUT));
            let _ = stream.set_write_timeout(Some(IO_TIMEOUT));
            let mut buf = vec![0u8; MAX_REQUEST_BYTES];
            let mut n = 0;
            while n < buf.len() {
                match stream.read(&mut buf[n..]) {
                    Ok(0) | Err(_) => break,
                    Ok(k) => n += k,
                }
                if buf[..n].windows(4).any(|w| w == b"\r\n\r\n") {
                    break;
                }
            }
            let request = String::from_utf8_lossy(&buf[..n]);
            let response = if request.starts_with("GET /metrics ") {
                let body = render(&shards);
                format!("HTTP/1.1 200 OK\r\nContent-Type: text/plain; version=0.0.4\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}", body.len())
            } else {
                "HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\nConnection: close\r\n\r\n".to_string()
            };
            let _ = stream.write_all(response.as_bytes());
        }
    })?;
    Ok(())
}
