//! The topic rules an append applies to a producer's validated batches before they are
//! written, as Kafka's log validator does:
//! - a compacted topic refuses records without a key (compaction could never clean them):
//!   INVALID_RECORD, with one record error per keyless record;
//! - `message.timestamp.before.max.ms` / `after.max.ms` (KIP-937) refuse CreateTime records
//!   whose timestamp is that far before or after the broker's clock: INVALID_TIMESTAMP, with
//!   record errors;
//! - `compression.type` other than `producer` converts each batch whose codec differs.
//!
//! Most appends need none of this and pass through untouched (no record is parsed). Records
//! inside a compressed batch are read by decompressing it, bounded by
//! `MAX_DECOMPRESSED_BATCH_BYTES`.

use crate::protocol::batch::{self, BatchHeader};
use crate::protocol::compression::{self, Codec, CodecError, Target};
use crate::storage::topic_config::TopicConfig;
use bytes::Bytes;
use kafka_protocol::ResponseError;

/// The most bytes one batch's records may inflate to when the broker must read or convert
/// them. Clients cap a batch near 1 MiB before compression (librdkafka's `batch.size`), so
/// this is far above any real batch while bounding what a hostile one can allocate.
pub const MAX_DECOMPRESSED_BATCH_BYTES: usize = 32 << 20;

/// Record errors a response reports at most per partition (Kafka shows the first few too).
const MAX_RECORD_ERRORS: usize = 100;

/// A topic's append rules (from its config; see `Partition::configure`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Rules {
    pub compacted: bool,
    /// None: `compression.type=producer`, batches kept as sent.
    pub codec: Option<Target>,
    /// Under LogAppendTime the broker's clock stamps the batch; producer timestamps are moot.
    pub log_append_time: bool,
    pub timestamp_before_max_ms: i64,
    pub timestamp_after_max_ms: i64,
    /// The topic's `max.message.bytes`: the largest batch an append takes, as sent and again
    /// after a conversion.
    pub max_message_bytes: u32,
}

impl Rules {
    /// The rules of a topic's configuration.
    pub fn of(config: &TopicConfig) -> Rules {
        Rules {
            compacted: config.compacts(),
            codec: Codec::from_topic_config(&config.compression_type).map(|codec| Target {
                codec,
                level: match codec {
                    Codec::Gzip if config.gzip_level > 0 => Some(config.gzip_level),
                    Codec::Zstd => Some(config.zstd_level),
                    _ => None,
                },
            }),
            log_append_time: config.log_append_time,
            timestamp_before_max_ms: config.timestamp_before_max_ms,
            timestamp_after_max_ms: config.timestamp_after_max_ms,
            max_message_bytes: config.max_message_bytes,
        }
    }

    fn checks_timestamps(&self) -> bool {
        !self.log_append_time
            && (self.timestamp_before_max_ms < i64::MAX || self.timestamp_after_max_ms < i64::MAX)
    }

    fn reads_records(&self) -> bool {
        self.compacted || self.checks_timestamps()
    }

    fn converts(&self, h: &BatchHeader) -> bool {
        self.codec
            .is_some_and(|t| t.codec as i16 != h.compression())
    }

    /// Whether `apply` decompresses or compresses any of these batches: milliseconds of CPU
    /// per megabyte, worth running off the shard's thread (`Partition::ingest`).
    pub fn inflates(&self, headers: &[BatchHeader]) -> bool {
        let compressed = |h: &BatchHeader| h.compression() != Codec::None as i16;
        headers
            .iter()
            .any(|h| self.converts(h) || (self.reads_records() && compressed(h)))
    }
}

/// One refused record: its index in its batch and why (ProduceResponse v8+ `record_errors`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecordError {
    pub batch_index: i32,
    pub message: String,
}

/// Why an append was refused: the partition's error code, and for record-level rules the
/// records at fault and a message (ProduceResponse v8+).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rejected {
    pub error: ResponseError,
    pub record_errors: Vec<RecordError>,
    pub message: Option<String>,
}

impl From<ResponseError> for Rejected {
    fn from(error: ResponseError) -> Rejected {
        Rejected {
            error,
            record_errors: Vec::new(),
            message: None,
        }
    }
}

/// Applies `rules` to validated batches (`headers` describe `records`, in order). Returns the
/// bytes to write and their headers: the same ones when nothing changed.
pub fn apply(
    name: &str,
    records: Bytes,
    headers: Vec<BatchHeader>,
    rules: &Rules,
    now_ms: i64,
) -> Result<(Bytes, Vec<BatchHeader>), Rejected> {
    let converts = |h: &BatchHeader| rules.converts(h);
    if !rules.reads_records() && !headers.iter().any(converts) {
        return Ok((records, headers));
    }
    // A batch a record rule reads, or that is converted, has its records parsed (a compressed
    // batch whose records do not parse is refused, not stored or converted), in place when they
    // are not compressed: the common append, checked for timestamps, copies nothing.
    let mut at = 0;
    let mut converted = Vec::new();
    for h in &headers {
        let raw = &records[at..at + h.size_bytes];
        at += h.size_bytes;
        if !rules.reads_records() && !converts(h) {
            converted.push(None);
            continue;
        }
        let plain = match h.compression() == Codec::None as i16 {
            true => std::borrow::Cow::Borrowed(raw),
            false => std::borrow::Cow::Owned(decompressed(name, raw, h)?),
        };
        check_records(name, &plain, rules, now_ms)?;
        converted.push(match rules.codec {
            Some(to) if converts(h) => {
                let plain_header = batch::parse_header(&plain).expect("parsed above");
                Some(convert(name, &plain, &plain_header, to)?)
            }
            _ => None,
        });
    }
    if converted.iter().all(Option::is_none) {
        return Ok((records, headers));
    }
    let mut out = Vec::with_capacity(records.len());
    let mut at = 0;
    for (h, c) in headers.iter().zip(converted) {
        let raw = &records[at..at + h.size_bytes];
        at += h.size_bytes;
        out.extend_from_slice(c.as_deref().unwrap_or(raw));
    }
    let out = Bytes::from(out);
    let headers =
        batch::validate_all(&out).expect("batches whose records parse convert to valid batches");
    Ok((out, headers))
}

/// The batch with its records uncompressed.
fn decompressed(name: &str, raw: &[u8], h: &BatchHeader) -> Result<Vec<u8>, Rejected> {
    convert(name, raw, h, Codec::None)
}

fn convert(
    name: &str,
    raw: &[u8],
    h: &BatchHeader,
    to: impl Into<Target>,
) -> Result<Vec<u8>, Rejected> {
    compression::convert(raw, h, to, MAX_DECOMPRESSED_BATCH_BYTES).map_err(|e| {
        log::warn!("produce to {name}: batch refused: {e:?}");
        match e {
            CodecError::TooLarge { max_bytes } => Rejected {
                error: ResponseError::InvalidRecord,
                record_errors: Vec::new(),
                message: Some(format!(
                    "the batch's records inflate past {max_bytes} bytes"
                )),
            },
            CodecError::UnknownCodec(_) | CodecError::Corrupt(_) => {
                ResponseError::CorruptMessage.into()
            }
        }
    })
}

/// Parses each record of an uncompressed batch and checks it against the record rules.
fn check_records(name: &str, plain: &[u8], rules: &Rules, now_ms: i64) -> Result<(), Rejected> {
    let Some(records) = batch::records(plain) else {
        log::warn!("produce to {name}: a record does not parse");
        return Err(ResponseError::CorruptMessage.into());
    };
    let earliest_ms = now_ms.saturating_sub(rules.timestamp_before_max_ms);
    let latest_ms = now_ms.saturating_add(rules.timestamp_after_max_ms);
    let mut keyless = Vec::new();
    let mut mistimed = Vec::new();
    for (i, r) in records.iter().enumerate() {
        let batch_index = i as i32;
        if rules.compacted && r.key.is_none() {
            let message = format!("Compacted topic cannot accept message without key in {name}");
            keyless.push(RecordError {
                batch_index,
                message,
            });
        }
        let out_of_range = !(earliest_ms..=latest_ms).contains(&r.timestamp);
        if rules.checks_timestamps() && out_of_range {
            let message = format!(
                "timestamp {} of the record at index {i} is outside [{earliest_ms}, {latest_ms}]",
                r.timestamp
            );
            mistimed.push(RecordError {
                batch_index,
                message,
            });
        }
    }
    match (keyless.is_empty(), mistimed.is_empty()) {
        (true, true) => Ok(()),
        (false, _) => Err(rejected(name, ResponseError::InvalidRecord, keyless)),
        (true, false) => Err(rejected(name, ResponseError::InvalidTimestamp, mistimed)),
    }
}

fn rejected(name: &str, error: ResponseError, mut record_errors: Vec<RecordError>) -> Rejected {
    let total = record_errors.len();
    log::warn!(
        "produce to {name}: {total} records refused: {}",
        record_errors[0].message
    );
    let first: Vec<&str> = record_errors
        .iter()
        .take(3)
        .map(|e| e.message.as_str())
        .collect();
    let message = format!("{total} records refused; the first: {}", first.join("; "));
    record_errors.truncate(MAX_RECORD_ERRORS);
    Rejected {
        error,
        record_errors,
        message: Some(message),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::batch::{build, validate_all};

    const NOW_MS: i64 = 1_700_000_000_000;

    fn rules() -> Rules {
        Rules {
            compacted: false,
            codec: None,
            log_append_time: false,
            timestamp_before_max_ms: i64::MAX,
            timestamp_after_max_ms: i64::MAX,
            max_message_bytes: u32::MAX,
        }
    }

    fn run(raw: Vec<u8>, rules: Rules) -> Result<(Bytes, Vec<BatchHeader>), Rejected> {
        let raw = Bytes::from(raw);
        let headers = validate_all(&raw).unwrap();
        apply("t-0", raw, headers, &rules, NOW_MS)
    }

    #[test]
    fn nothing_to_do_passes_the_same_bytes() {
        let raw = Bytes::from(build(&[(None, Some(b"v"))], NOW_MS));
        let headers = validate_all(&raw).unwrap();
        let (out, _) = apply("t-0", raw.clone(), headers, &rules(), NOW_MS).unwrap();
        assert_eq!(out.as_ptr(), raw.as_ptr(), "not copied");
    }

    #[test]
    fn keyless_records_on_a_compacted_topic_are_each_named() {
        let compacted = Rules {
            compacted: true,
            ..rules()
        };
        let raw = build(
            &[(Some(b"k"), Some(b"a")), (None, Some(b"b")), (None, None)],
            NOW_MS,
        );
        let err = run(raw.clone(), compacted).unwrap_err();
        assert_eq!(err.error, ResponseError::InvalidRecord);
        let at: Vec<i32> = err.record_errors.iter().map(|e| e.batch_index).collect();
        assert_eq!(at, [1, 2]);
        assert!(err.record_errors[0].message.contains("without key"));
        // Inside a compressed batch too.
        let h = validate_all(&raw).unwrap()[0];
        let zipped = compression::convert(&raw, &h, Codec::Gzip, 1 << 20).unwrap();
        assert_eq!(run(zipped, compacted).unwrap_err().record_errors.len(), 2);
        let keyed = build(&[(Some(b"k"), Some(b"a"))], NOW_MS);
        assert!(run(keyed, compacted).is_ok());
    }

    #[test]
    fn timestamps_outside_the_bounds_are_refused() {
        let bounded = Rules {
            timestamp_before_max_ms: 1000,
            timestamp_after_max_ms: 10,
            ..rules()
        };
        assert!(run(build(&[(None, Some(b"v"))], NOW_MS - 1000), bounded).is_ok());
        let early = run(build(&[(None, Some(b"v"))], NOW_MS - 1001), bounded).unwrap_err();
        assert_eq!(early.error, ResponseError::InvalidTimestamp);
        let late = run(build(&[(None, Some(b"v"))], NOW_MS + 11), bounded).unwrap_err();
        assert_eq!(late.record_errors[0].batch_index, 0);
        let stamped = Rules {
            log_append_time: true,
            ..bounded
        };
        assert!(run(build(&[(None, Some(b"v"))], 0), stamped).is_ok());
    }

    /// A compressed batch whose records do not fill it (its count promises more) is refused
    /// whatever the rules: found by fuzzing, it used to become an invalid stored batch.
    #[test]
    fn compressed_records_that_do_not_parse_are_refused() {
        let raw = build(&[(None, Some(b"a")), (None, Some(b"b"))], NOW_MS);
        let h = validate_all(&raw).unwrap()[0];
        let mut zipped = compression::convert(&raw, &h, Codec::Gzip, 1 << 20).unwrap();
        zipped[57..61].copy_from_slice(&3i32.to_be_bytes()); // one record more than inside
        zipped[23..27].copy_from_slice(&2i32.to_be_bytes()); // lastOffsetDelta to match
        batch::seal(&mut zipped);
        for rules in [
            Rules {
                codec: Some(Codec::None.into()),
                ..rules()
            },
            Rules {
                compacted: true,
                ..rules()
            },
        ] {
            assert_eq!(
                run(zipped.clone(), rules).unwrap_err().error,
                ResponseError::CorruptMessage
            );
        }
        assert!(
            run(zipped, rules()).is_ok(),
            "no rule: stored as sent, as before"
        );
    }

    #[test]
    fn batches_are_converted_to_the_topic_codec() {
        let value = b"compressible ".repeat(100);
        let raw = build(
            &[(None, Some(&value[..])), (Some(b"k"), Some(&value[..]))],
            NOW_MS,
        );
        for codec in [Codec::Gzip, Codec::Snappy, Codec::Lz4, Codec::Zstd] {
            let to_codec = Rules {
                codec: Some(codec.into()),
                ..rules()
            };
            let (out, headers) = run(raw.clone(), to_codec).unwrap();
            assert_eq!(headers[0].compression(), codec as i16);
            let back = Rules {
                codec: Some(Codec::None.into()),
                ..rules()
            };
            let (plain, _) = run(out.to_vec(), back).unwrap();
            assert_eq!(&plain[..], &raw[..], "{codec:?}");
        }
    }
}
