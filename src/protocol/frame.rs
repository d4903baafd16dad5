//! Request framing: the size prefix, the request header (v0..=2), and response framing.

use super::chunk::Chunk;
use super::wire::Reader;
use bytes::{BufMut, Bytes, BytesMut};
use kafka_protocol::messages::ApiKey;

/// Smallest request header: api_key, api_version, correlation_id.
pub const MIN_HEADER_BYTES: usize = 8;

#[derive(Debug)]
pub struct RequestHeader {
    pub api_key: ApiKey,
    pub api_version: i16,
    pub correlation_id: i32,
    pub client_id: Option<String>,
}

#[derive(Debug, PartialEq, Eq)]
pub enum FrameError {
    /// Too short to hold even api_key, api_version and correlation_id.
    Truncated,
    /// An API key Sluice does not know; Kafka closes the connection too.
    UnknownApiKey(i16),
    /// A known API at a version not served. Its header past the correlation id is not parsed:
    /// its layout depends on the version.
    UnsupportedVersion {
        api_key: ApiKey,
        api_version: i16,
        correlation_id: i32,
    },
    /// The header's client id or tagged fields are malformed.
    BadHeader(&'static str),
}

/// Splits a request frame (without its size prefix) into header and body; `served` says which
/// (API, version) pairs the broker serves.
pub fn parse_request(
    mut frame: Bytes,
    served: impl Fn(ApiKey, i16) -> bool,
) -> Result<(RequestHeader, Bytes), FrameError> {
    if frame.len() < MIN_HEADER_BYTES {
        return Err(FrameError::Truncated);
    }
    let raw_key = i16::from_be_bytes([frame[0], frame[1]]);
    let api_version = i16::from_be_bytes([frame[2], frame[3]]);
    let correlation_id = i32::from_be_bytes([frame[4], frame[5], frame[6], frame[7]]);
    let api_key = ApiKey::try_from(raw_key).map_err(|_| FrameError::UnknownApiKey(raw_key))?;
    if !served(api_key, api_version) {
        return Err(FrameError::UnsupportedVersion {
            api_key,
            api_version,
            correlation_id,
        });
    }
    let header_version = api_key.request_header_version(api_version);
    let rest = frame.split_off(MIN_HEADER_BYTES);
    // The client id is a classic (non-compact) nullable string even in flexible headers.
    let mut r = Reader::new(rest, false);
    let client_id = if header_version >= 1 {
        r.nullable_string()
            .map_err(|e| FrameError::BadHeader(e.0))?
    } else {
        None
    };
    let mut r = into_flexible(r);
    if header_version >= 2 {
        r.skip_tagged_fields()
            .map_err(|e| FrameError::BadHeader(e.0))?;
    }
    Ok((
        RequestHeader {
            api_key,
            api_version,
            correlation_id,
            client_id,
        },
        r.into_rest(),
    ))
}

fn into_flexible(r: Reader) -> Reader {
    let rest = r.into_rest();
    Reader::new(rest, true)
}

/// Frames a response: size prefix, correlation id, the header's empty tagged-field section for
/// flexible response headers (v1), then the body chunks.
pub fn frame_response(
    api_key: ApiKey,
    api_version: i16,
    correlation_id: i32,
    mut body: Vec<Chunk>,
) -> Vec<Chunk> {
    let header_version = api_key.response_header_version(api_version);
    let header_len = 4 + usize::from(header_version >= 1);
    let body_len: usize = body.iter().map(Chunk::len).sum();
    // The head goes out with a small first chunk in one write (one syscall, one segment):
    // most responses are one small chunk.
    let joined = match body.first() {
        Some(Chunk::Bytes(b)) if b.len() <= JOIN_FIRST_CHUNK_MAX_BYTES => b.len(),
        _ => 0,
    };
    let mut head = BytesMut::with_capacity(4 + header_len + joined);
    head.put_i32((header_len + body_len) as i32);
    head.put_i32(correlation_id);
    if header_version >= 1 {
        head.put_u8(0);
    }
    if joined > 0 {
        if let Chunk::Bytes(b) = body.remove(0) {
            head.extend_from_slice(&b);
        }
    }
    let mut out = Vec::with_capacity(body.len() + 1);
    out.push(head.freeze().into());
    out.extend(body);
    out
}

/// A first body chunk up to this size is copied behind the response header, so that both go
/// out in one write; a larger one (records read on the copying fetch path) is written apart.
const JOIN_FIRST_CHUNK_MAX_BYTES: usize = 64 * 1024;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_v1_and_v2_headers() {
        // Metadata v1 uses header v1: key, version, correlation, client id.
        let mut f = BytesMut::new();
        f.put_i16(3);
        f.put_i16(1);
        f.put_i32(77);
        f.put_i16(2);
        f.put_slice(b"me");
        f.put_slice(b"BODY");
        let (h, body) = parse_request(f.freeze(), |_, _| true).unwrap();
        assert_eq!(
            (h.api_key, h.correlation_id, h.client_id.as_deref()),
            (ApiKey::Metadata, 77, Some("me"))
        );
        assert_eq!(&body[..], b"BODY");
        // Metadata v12 uses header v2: a tagged-field section follows the client id.
        let mut f = BytesMut::new();
        f.put_i16(3);
        f.put_i16(12);
        f.put_i32(1);
        f.put_i16(-1);
        f.put_u8(0);
        f.put_slice(b"X");
        let (h, body) = parse_request(f.freeze(), |_, _| true).unwrap();
        assert_eq!(h.client_id, None);
        assert_eq!(&body[..], b"X");
    }

    #[test]
    fn rejects_bad_frames() {
        assert_eq!(
            parse_request(Bytes::from_static(&[0, 3, 0]), |_, _| true).unwrap_err(),
            FrameError::Truncated
        );
        let unknown = Bytes::from_static(&[0x7f, 0x00, 0, 0, 0, 0, 0, 1]);
        assert_eq!(
            parse_request(unknown, |_, _| true).unwrap_err(),
            FrameError::UnknownApiKey(0x7f00)
        );
        let torn = Bytes::from_static(&[0, 3, 0, 1, 0, 0, 0, 1, 0, 9, b'a']);
        assert!(matches!(
            parse_request(torn, |_, _| true),
            Err(FrameError::BadHeader(_))
        ));
    }
}
