//! The inter-node RPC frame (pure): framed, versioned, checksummed.
//!
//! ```text
//! size: u32      bytes after this field (header rest + payload)
//! magic: u16     0x534C ("SL"): a Kafka client or garbage on the port is told apart at once
//! version: u8    1
//! kind: u8       what the payload is (the layer above names kinds)
//! correlation: u64  pairs a reply with its call; 0 for one-way messages
//! crc32c: u32    of the payload
//! payload
//! ```
//! All integers big-endian. A frame over `MAX_FRAME_BYTES`, a wrong magic or version, or a bad
//! checksum is refused; the connection is then closed (the stream cannot be resynchronized).
//!
//! Kinds from `HELLO` up belong to this layer: the cluster-secret handshake that opens a
//! connection when the cluster has a secret (`security::node`). Version 2 came with it and with
//! brokers' listener lists in heartbeats; a version 1 node is refused by name.

/// Bytes before the payload, the size field included.
pub const HEADER_BYTES: usize = 4 + 2 + 1 + 1 + 8 + 4;
/// Bound on one frame: a metadata snapshot is the largest message, and the catalog it holds
/// is bounded by `max_topics` and partitions far below this.
pub const MAX_FRAME_BYTES: usize = 256 << 20;
const MAGIC: u16 = 0x534C;
const VERSION: u8 = 2;
/// The dialer's first frame: its nonce.
pub const HELLO: u8 = 0xF0;
/// The server's answer: its nonce and its proof.
pub const CHALLENGE: u8 = 0xF1;
/// The dialer's proof.
pub const PROOF: u8 = 0xF2;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Header {
    pub kind: u8,
    pub correlation: u64,
    /// Payload length.
    pub payload_bytes: usize,
    pub crc32c: u32,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FrameError {
    TooLarge(usize),
    TooSmall(usize),
    BadMagic(u16),
    BadVersion(u8),
    BadChecksum,
}

impl std::fmt::Display for FrameError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            FrameError::TooLarge(n) => write!(f, "frame of {n} bytes (limit {MAX_FRAME_BYTES})"),
            FrameError::TooSmall(n) => write!(f, "frame of {n} bytes is shorter than a header"),
            FrameError::BadMagic(m) => write!(f, "not a Sluice RPC frame (magic {m:#06x})"),
            FrameError::BadVersion(v) => {
                write!(f, "RPC frame version {v}; this Sluice speaks {VERSION}")
            }
            FrameError::BadChecksum => write!(f, "RPC payload checksum mismatch"),
        }
    }
}

/// A whole frame's bytes.
pub fn encode(kind: u8, correlation: u64, payload: &[u8]) -> Vec<u8> {
    assert!(
        payload.len() + HEADER_BYTES <= MAX_FRAME_BYTES,
        "RPC payload too large"
    );
    let mut out = Vec::with_capacity(HEADER_BYTES + payload.len());
    out.extend_from_slice(&((HEADER_BYTES - 4 + payload.len()) as u32).to_be_bytes());
    out.extend_from_slice(&MAGIC.to_be_bytes());
    out.push(VERSION);
    out.push(kind);
    out.extend_from_slice(&correlation.to_be_bytes());
    out.extend_from_slice(&crc32c::crc32c(payload).to_be_bytes());
    out.extend_from_slice(payload);
    out
}

/// Reads a frame's header from its first `HEADER_BYTES` bytes.
pub fn decode_header(raw: &[u8; HEADER_BYTES]) -> Result<Header, FrameError> {
    let size = u32::from_be_bytes(raw[0..4].try_into().expect("4 bytes")) as usize;
    if size + 4 > MAX_FRAME_BYTES {
        return Err(FrameError::TooLarge(size + 4));
    }
    if size + 4 < HEADER_BYTES {
        return Err(FrameError::TooSmall(size + 4));
    }
    let magic = u16::from_be_bytes([raw[4], raw[5]]);
    if magic != MAGIC {
        return Err(FrameError::BadMagic(magic));
    }
    if raw[6] != VERSION {
        return Err(FrameError::BadVersion(raw[6]));
    }
    Ok(Header {
        kind: raw[7],
        correlation: u64::from_be_bytes(raw[8..16].try_into().expect("8 bytes")),
        payload_bytes: size + 4 - HEADER_BYTES,
        crc32c: u32::from_be_bytes(raw[16..20].try_into().expect("4 bytes")),
    })
}

/// Checks a payload against its header's checksum.
pub fn check_payload(header: &Header, payload: &[u8]) -> Result<(), FrameError> {
    if payload.len() != header.payload_bytes || crc32c::crc32c(payload) != header.crc32c {
        return Err(FrameError::BadChecksum);
    }
    Ok(())
}

/// Decodes one whole frame from `raw` (the fuzz target's entry): (header, payload).
pub fn decode(raw: &[u8]) -> Result<(Header, &[u8]), FrameError> {
    let head: &[u8; HEADER_BYTES] = raw
        .get(..HEADER_BYTES)
        .and_then(|h| h.try_into().ok())
        .ok_or(FrameError::TooSmall(raw.len()))?;
    let header = decode_header(head)?;
    let payload = raw
        .get(HEADER_BYTES..HEADER_BYTES + header.payload_bytes)
        .ok_or(FrameError::TooSmall(raw.len()))?;
    check_payload(&header, payload)?;
    Ok((header, payload))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames_round_trip_and_damage_is_caught() {
        let f = encode(7, 42, b"hello");
        let (h, p) = decode(&f).unwrap();
        assert_eq!((h.kind, h.correlation, p), (7, 42, &b"hello"[..]));
        let mut bad = f.clone();
        *bad.last_mut().unwrap() ^= 1;
        assert_eq!(decode(&bad), Err(FrameError::BadChecksum));
        let mut bad = f.clone();
        bad[4] = 0;
        assert!(matches!(decode(&bad), Err(FrameError::BadMagic(_))));
        let mut bad = f.clone();
        bad[6] = 9;
        assert_eq!(decode(&bad), Err(FrameError::BadVersion(9)));
        let mut huge = f.clone();
        huge[0] = 0x7f;
        assert!(matches!(decode(&huge), Err(FrameError::TooLarge(_))));
        assert!(matches!(decode(&f[..10]), Err(FrameError::TooSmall(10))));
        assert!(matches!(
            decode(&f[..f.len() - 1]),
            Err(FrameError::TooSmall(_))
        ));
        // A Kafka request on the RPC port: its API key is where the magic is.
        let mut kafka = vec![0, 0, 0, 20, 0, 18, 0, 3];
        kafka.resize(HEADER_BYTES, 0);
        assert!(matches!(decode(&kafka), Err(FrameError::BadMagic(0x0012))));
    }
}
