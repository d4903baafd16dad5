//! Hand-written Fetch response encoder (v4..=18). The response is a list of chunks: small
//! framing chunks built here, and each partition's records as the log located them (a file
//! range to sendfile, or bytes read on the copying path), so that record bytes are never copied
//! into a response buffer.

use super::chunk::Chunk;
use super::wire::Writer;
use bytes::{BufMut, BytesMut};

pub const MIN_VERSION: i16 = 4;
/// v14–18 answer as v13: v14 adds an error tiered storage raises, v15 moves the replica id
/// into the request's replica state, v16 adds leader hints (tagged fields, KIP-951, left out
/// as a broker may), v17 and v18 add request fields a follower sends (tagged).
pub const MAX_VERSION: i16 = 18;
const FIRST_FLEXIBLE: i16 = 12;
const FIRST_TOPIC_ID: i16 = 13;

pub struct FetchResponse {
    pub error_code: i16,
    pub session_id: i32,
    pub topics: Vec<TopicResponse>,
}

pub struct TopicResponse {
    pub name: std::sync::Arc<str>,
    pub topic_id: [u8; 16],
    pub partitions: Vec<PartitionResponse>,
}

pub struct PartitionResponse {
    pub partition: i32,
    pub error_code: i16,
    pub high_watermark: i64,
    pub last_stable_offset: i64,
    pub log_start_offset: i64,
    /// read_committed: the aborted transactions of the range, (producer id, first offset);
    /// None (a null array) for read_uncommitted.
    pub aborted: Option<Vec<(i64, i64)>>,
    /// Whole record batches, from one segment.
    pub records: Option<Chunk>,
    /// v11+: the replica the consumer should fetch from instead (KIP-392); -1: none.
    pub preferred_read_replica: i32,
}

/// Encodes the body (after the response header) into chunks. Returns the chunks and their
/// total size in bytes.
pub fn encode(resp: FetchResponse, version: i16) -> (Vec<Chunk>, usize) {
    debug_assert!((MIN_VERSION..=MAX_VERSION).contains(&version));
    let flexible = version >= FIRST_FLEXIBLE;
    let mut chunks = Vec::new();
    let mut buf = BytesMut::with_capacity(256);
    let mut w = Writer {
        buf: &mut buf,
        flexible,
    };
    w.buf.put_i32(0); // throttle_time_ms
    if version >= 7 {
        w.buf.put_i16(resp.error_code);
        w.buf.put_i32(resp.session_id);
    }
    w.array_len(resp.topics.len());
    for topic in resp.topics {
        if version >= FIRST_TOPIC_ID {
            w.buf.put_slice(&topic.topic_id);
        } else {
            w.string(&topic.name);
        }
        w.array_len(topic.partitions.len());
        for p in topic.partitions {
            w.buf.put_i32(p.partition);
            w.buf.put_i16(p.error_code);
            w.buf.put_i64(p.high_watermark);
            w.buf.put_i64(p.last_stable_offset);
            if version >= 5 {
                w.buf.put_i64(p.log_start_offset);
            }
            match &p.aborted {
                None => w.null_array(),
                Some(aborted) => {
                    w.array_len(aborted.len());
                    for &(producer_id, first_offset) in aborted {
                        w.buf.put_i64(producer_id);
                        w.buf.put_i64(first_offset);
                        w.empty_tagged_fields();
                    }
                }
            }
            if version >= 11 {
                w.buf.put_i32(p.preferred_read_replica);
            }
            let records = p.records.filter(|c| !c.is_empty());
            w.bytes_len(Some(records.as_ref().map_or(0, Chunk::len)));
            if let Some(records) = records {
                // Flush the framing so far, then hand over the records untouched.
                chunks.push(w.buf.split().freeze().into());
                chunks.push(records);
            }
            w.empty_tagged_fields(); // partition
        }
        w.empty_tagged_fields(); // topic
    }
    w.empty_tagged_fields(); // response
    chunks.push(buf.freeze().into());
    let total = chunks.iter().map(Chunk::len).sum();
    (chunks, total)
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;
    use kafka_protocol::messages::FetchResponse as KpFetch;
    use kafka_protocol::protocol::Decodable;

    /// Our encoder must produce what the reference codec reads back, on every version we serve.
    #[test]
    fn agrees_with_kafka_protocol() {
        let batch = Bytes::from(crate::protocol::batch::synthetic(5, 2, 8, 7));
        for version in MIN_VERSION..=MAX_VERSION {
            let resp = FetchResponse {
                error_code: 0,
                session_id: 0,
                topics: vec![TopicResponse {
                    name: "t".into(),
                    topic_id: [7; 16],
                    partitions: vec![
                        PartitionResponse {
                            partition: 1,
                            error_code: 0,
                            high_watermark: 7,
                            last_stable_offset: 7,
                            log_start_offset: 0,
                            aborted: Some(vec![(4000, 3), (4001, 5)]),
                            records: Some(batch.clone().into()),
                            preferred_read_replica: -1,
                        },
                        PartitionResponse {
                            partition: 2,
                            error_code: 1,
                            high_watermark: -1,
                            last_stable_offset: -1,
                            log_start_offset: -1,
                            aborted: None,
                            records: None,
                            preferred_read_replica: 3,
                        },
                    ],
                }],
            };
            let (chunks, total) = encode(resp, version);
            let mut all = BytesMut::new();
            for c in &chunks {
                match c {
                    Chunk::Bytes(b) => all.extend_from_slice(b),
                    Chunk::File(_) => unreachable!("the test passes bytes"),
                }
            }
            assert_eq!(all.len(), total);
            let decoded = KpFetch::decode(&mut all.freeze(), version).unwrap();
            let p = &decoded.responses[0].partitions;
            assert_eq!(p[0].high_watermark, 7);
            assert_eq!(p[0].records.as_ref().unwrap(), &batch);
            assert_eq!(p[1].error_code, 1);
            let aborted = p[0].aborted_transactions.as_ref().expect("a list");
            let aborted: Vec<(i64, i64)> = aborted
                .iter()
                .map(|a| (a.producer_id.0, a.first_offset))
                .collect();
            assert_eq!(aborted, vec![(4000, 3), (4001, 5)]);
            assert!(p[1].aborted_transactions.is_none());
            if version >= 11 {
                assert_eq!(p[1].preferred_read_replica.0, 3);
            }
            if version >= 13 {
                assert_eq!(decoded.responses[0].topic_id.as_bytes(), &[7; 16]);
            } else {
                assert_eq!(decoded.responses[0].topic.0.as_str(), "t");
            }
        }
    }
}
