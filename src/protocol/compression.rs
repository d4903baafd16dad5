//! Record batch compression: a v2 batch compresses its records section (everything after the
//! 61-byte header) as one stream, with the codec in attributes bits 0..2. The broker converts a
//! batch only when a topic's `compression.type` names a codec other than the producer's, and
//! reads inside a compressed batch only when a topic rule needs its records (see
//! `partition/ingest.rs`).
//!
//! The codecs are the well-kept crates, in the framings Kafka's clients write and read: gzip
//! (flate2), snappy (snap: Kafka's xerial framing when written, xerial or raw when read, as the
//! Java client does), lz4 (lz4_flex, the LZ4 frame format) and zstd (zstd, one frame).
//!
//! Decompression is bounded by the caller's `max_bytes`: a batch that would inflate past it is
//! refused, not allocated.

use super::batch::{self, BatchHeader, HEADER_BYTES, LOG_OVERHEAD};
use std::io::Read;

/// Kafka's codec ids (attributes bits 0..2, and `compression.type` names).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Codec {
    None = 0,
    Gzip = 1,
    Snappy = 2,
    Lz4 = 3,
    Zstd = 4,
}

impl Codec {
    pub fn from_id(id: i16) -> Option<Codec> {
        Some(match id {
            0 => Codec::None,
            1 => Codec::Gzip,
            2 => Codec::Snappy,
            3 => Codec::Lz4,
            4 => Codec::Zstd,
            _ => return None,
        })
    }

    /// The codec a topic's `compression.type` names; None for `producer` (keep the producer's).
    pub fn from_topic_config(name: &str) -> Option<Codec> {
        Some(match name {
            "uncompressed" => Codec::None,
            "gzip" => Codec::Gzip,
            "snappy" => Codec::Snappy,
            "lz4" => Codec::Lz4,
            "zstd" => Codec::Zstd,
            _ => return None,
        })
    }
}

/// A codec to write and its level (KIP-390's `compression.gzip.level` and
/// `compression.zstd.level`); None: the codec's default as Kafka sets it (gzip 6, zstd 3).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Target {
    pub codec: Codec,
    pub level: Option<i32>,
}

impl From<Codec> for Target {
    fn from(codec: Codec) -> Target {
        Target { codec, level: None }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CodecError {
    /// The attributes name no codec Kafka defines.
    UnknownCodec(i16),
    /// The records section is not a valid stream of its codec.
    Corrupt(String),
    /// The records would inflate past the caller's bound.
    TooLarge { max_bytes: usize },
}

/// xerial snappy-java's stream header (magic, version 1, compatible version 1), which Kafka's
/// clients write before length-prefixed raw snappy blocks.
const XERIAL_MAGIC: &[u8; 16] = b"\x82SNAPPY\x00\x00\x00\x00\x01\x00\x00\x00\x01";
/// The uncompressed bytes per xerial block, as snappy-java writes them.
const XERIAL_BLOCK_BYTES: usize = 32 * 1024;

/// Compresses `data` as one stream of the target's codec, at its level. lz4_flex has one
/// level only, so an lz4 level changes nothing.
pub fn compress(to: impl Into<Target>, data: &[u8]) -> Vec<u8> {
    let Target { codec, level } = to.into();
    match codec {
        Codec::None => data.to_vec(),
        Codec::Gzip => {
            use std::io::Write;
            let level = level.map_or(flate2::Compression::default(), |l| {
                flate2::Compression::new(l.clamp(1, 9) as u32)
            });
            let mut e = flate2::write::GzEncoder::new(Vec::new(), level);
            e.write_all(data).expect("writing to a Vec");
            e.finish().expect("writing to a Vec")
        }
        Codec::Snappy => {
            let mut out = XERIAL_MAGIC.to_vec();
            let mut encoder = snap::raw::Encoder::new();
            for block in data.chunks(XERIAL_BLOCK_BYTES) {
                let compressed = encoder
                    .compress_vec(block)
                    .expect("a block within snappy's size");
                out.extend_from_slice(&(compressed.len() as u32).to_be_bytes());
                out.extend_from_slice(&compressed);
            }
            out
        }
        Codec::Lz4 => {
            use std::io::Write;
            let mut e = lz4_flex::frame::FrameEncoder::new(Vec::new());
            e.write_all(data).expect("writing to a Vec");
            e.finish().expect("writing to a Vec")
        }
        Codec::Zstd => zstd::bulk::compress(data, level.unwrap_or(zstd::DEFAULT_COMPRESSION_LEVEL))
            .expect("zstd compresses any input at any level it takes"),
    }
}

/// Decompresses one stream of `codec`, refusing to produce more than `max_bytes`.
pub fn decompress(codec: Codec, data: &[u8], max_bytes: usize) -> Result<Vec<u8>, CodecError> {
    let corrupt = |e: std::io::Error| CodecError::Corrupt(e.to_string());
    match codec {
        Codec::None => bounded(data.to_vec(), max_bytes),
        Codec::Gzip => {
            read_bounded(flate2::read::GzDecoder::new(data), max_bytes).map_err(corrupt)?
        }
        Codec::Snappy => decompress_snappy(data, max_bytes),
        Codec::Lz4 => {
            read_bounded(lz4_flex::frame::FrameDecoder::new(data), max_bytes).map_err(corrupt)?
        }
        Codec::Zstd => read_bounded(
            zstd::stream::read::Decoder::new(data).map_err(corrupt)?,
            max_bytes,
        )
        .map_err(corrupt)?,
    }
}

fn bounded(out: Vec<u8>, max_bytes: usize) -> Result<Vec<u8>, CodecError> {
    if out.len() > max_bytes {
        return Err(CodecError::TooLarge { max_bytes });
    }
    Ok(out)
}

/// Reads a decoder to its end, or to one byte past `max_bytes` (then TooLarge).
fn read_bounded(
    reader: impl Read,
    max_bytes: usize,
) -> std::io::Result<Result<Vec<u8>, CodecError>> {
    let mut out = Vec::new();
    reader.take(max_bytes as u64 + 1).read_to_end(&mut out)?;
    Ok(bounded(out, max_bytes))
}

/// xerial-framed snappy (magic, then blocks of u32 length + raw snappy), or one raw snappy
/// block when the magic is absent.
fn decompress_snappy(data: &[u8], max_bytes: usize) -> Result<Vec<u8>, CodecError> {
    let corrupt = |e: snap::Error| CodecError::Corrupt(e.to_string());
    let mut decoder = snap::raw::Decoder::new();
    let mut raw_block = |block: &[u8], out: &mut Vec<u8>| {
        let len = snap::raw::decompress_len(block).map_err(corrupt)?;
        if out.len() + len > max_bytes {
            return Err(CodecError::TooLarge { max_bytes });
        }
        let at = out.len();
        out.resize(at + len, 0);
        decoder.decompress(block, &mut out[at..]).map_err(corrupt)?;
        Ok(())
    };
    let mut out = Vec::new();
    let Some(mut rest) = data.strip_prefix(&XERIAL_MAGIC[..]) else {
        raw_block(data, &mut out)?;
        return Ok(out);
    };
    while !rest.is_empty() {
        let short = || CodecError::Corrupt("truncated xerial snappy block".into());
        let len_bytes: [u8; 4] = rest
            .get(..4)
            .ok_or_else(short)?
            .try_into()
            .expect("4 bytes");
        let len = u32::from_be_bytes(len_bytes) as usize;
        let block = rest.get(4..4 + len).ok_or_else(short)?;
        raw_block(block, &mut out)?;
        rest = &rest[4 + len..];
    }
    Ok(out)
}

/// The same batch with its records section in `to`: header fields kept (offsets, timestamps,
/// producer and sequence), codec bits, length and CRC32C rewritten. `max_bytes` bounds the
/// decompressed records.
pub fn convert(
    raw: &[u8],
    h: &BatchHeader,
    to: impl Into<Target>,
    max_bytes: usize,
) -> Result<Vec<u8>, CodecError> {
    let to = to.into();
    let from = Codec::from_id(h.compression()).ok_or(CodecError::UnknownCodec(h.compression()))?;
    let section = &raw[HEADER_BYTES..h.size_bytes];
    let records = decompress(from, section, max_bytes)?;
    let section = compress(to, &records);
    let mut out = Vec::with_capacity(HEADER_BYTES + section.len());
    out.extend_from_slice(&raw[..HEADER_BYTES]);
    out.extend_from_slice(&section);
    let batch_length = (out.len() - LOG_OVERHEAD) as i32;
    out[8..12].copy_from_slice(&batch_length.to_be_bytes());
    let attributes = (h.attributes & !batch::ATTR_COMPRESSION_MASK) | to.codec as i16;
    out[21..23].copy_from_slice(&attributes.to_be_bytes());
    batch::seal(&mut out);
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::batch::{build, records, validate};

    const ALL: [Codec; 5] = [
        Codec::None,
        Codec::Gzip,
        Codec::Snappy,
        Codec::Lz4,
        Codec::Zstd,
    ];

    fn sample() -> Vec<u8> {
        let value = b"a value that repeats, a value that repeats, a value that repeats".repeat(50);
        let rows: Vec<_> = (0..40)
            .map(|i| {
                (
                    Some(if i % 2 == 0 { &b"k1"[..] } else { &b"k2"[..] }),
                    Some(&value[..]),
                )
            })
            .collect();
        build(&rows, 1_700_000_000_000)
    }

    /// Every codec to every other and back gives the original records, and a valid batch.
    #[test]
    fn every_codec_round_trips_a_batch() {
        let plain = sample();
        let h = validate(&plain).unwrap();
        for to in ALL {
            let converted = convert(&plain, &h, to, 1 << 20).unwrap();
            let ch = validate(&converted).unwrap();
            assert_eq!(ch.compression(), to as i16);
            assert_eq!(
                (ch.record_count, ch.base_timestamp),
                (h.record_count, h.base_timestamp)
            );
            if to != Codec::None {
                assert!(converted.len() < plain.len() / 4, "{to:?} compresses");
            }
            for back in ALL {
                let again = convert(&converted, &ch, back, 1 << 20).unwrap();
                let bh = validate(&again).unwrap();
                let plain_again = convert(&again, &bh, Codec::None, 1 << 20).unwrap();
                assert_eq!(plain_again, plain, "{to:?} then {back:?}");
            }
        }
        assert_eq!(records(&plain).unwrap().len(), 40);
    }

    /// A stream that inflates past the bound is refused, whichever codec.
    #[test]
    fn decompression_is_bounded() {
        let zeros = vec![0u8; 1 << 20];
        for codec in ALL {
            let packed = compress(codec, &zeros);
            assert_eq!(decompress(codec, &packed, 1 << 20).unwrap().len(), 1 << 20);
            assert_eq!(
                decompress(codec, &packed, (1 << 20) - 1),
                Err(CodecError::TooLarge {
                    max_bytes: (1 << 20) - 1
                }),
                "{codec:?}"
            );
        }
    }

    #[test]
    fn garbage_is_corrupt_not_a_panic() {
        let garbage = b"\x82SNAPPY\x00\x00\x00\x00\x01\x00\x00\x00\x01\xff\xff\xff\xff junk";
        for codec in [Codec::Gzip, Codec::Snappy, Codec::Lz4, Codec::Zstd] {
            assert!(matches!(
                decompress(codec, garbage, 1 << 20),
                Err(CodecError::Corrupt(_))
            ));
        }
    }

    /// Raw snappy (no xerial framing), as some clients write it, is read too.
    /// A level changes the bytes, not the records.
    #[test]
    fn levels_apply() {
        let data = b"level test, level test, level test ".repeat(2000);
        for (codec, low, high) in [(Codec::Gzip, 1, 9), (Codec::Zstd, 1, 19)] {
            let fast = compress(
                Target {
                    codec,
                    level: Some(low),
                },
                &data,
            );
            let small = compress(
                Target {
                    codec,
                    level: Some(high),
                },
                &data,
            );
            assert_ne!(fast, small, "{codec:?}");
            for packed in [fast, small] {
                assert_eq!(decompress(codec, &packed, 1 << 20).unwrap(), data);
            }
        }
    }

    #[test]
    fn raw_snappy_is_read() {
        let data = b"raw snappy block, raw snappy block".repeat(10);
        let packed = snap::raw::Encoder::new().compress_vec(&data).unwrap();
        assert_eq!(decompress(Codec::Snappy, &packed, 1 << 20).unwrap(), data);
    }
}
