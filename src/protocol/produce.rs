//! Hand-written Produce request decoder (v3..=13). Record bytes stay `Bytes` slices of the
//! request frame: they are not copied here. v10–12 read as v9: they change only what a
//! response may carry (KIP-951's leader hints, KIP-890's errors) and, with v12, what a
//! transactional batch means (it adds its partition: `kafka/produce.rs`). v13 names topics by
//! id (KIP-516), which the handler resolves.

use super::wire::{Reader, WireResult};
use bytes::Bytes;

pub const MIN_VERSION: i16 = 3;
pub const MAX_VERSION: i16 = 13;
const FIRST_TOPIC_ID: i16 = 13;
const FIRST_FLEXIBLE: i16 = 9;

#[derive(Debug)]
pub struct ProduceRequest {
    pub transactional_id: Option<String>,
    pub acks: i16,
    pub timeout_ms: i32,
    pub topics: Vec<TopicData>,
}

#[derive(Debug)]
pub struct TopicData {
    /// The topic's name: from the request before v13, from its id (by the handler) from v13;
    /// empty while unresolved.
    pub name: String,
    /// v13+: the id the request names the topic by.
    pub topic_id: Option<[u8; 16]>,
    pub partitions: Vec<PartitionData>,
}

#[derive(Debug)]
pub struct PartitionData {
    pub index: i32,
    pub records: Option<Bytes>,
}

pub fn decode(body: Bytes, version: i16) -> WireResult<ProduceRequest> {
    let mut r = Reader::new(body, version >= FIRST_FLEXIBLE);
    let transactional_id = r.nullable_string()?;
    let acks = r.i16()?;
    let timeout_ms = r.i32()?;
    let topic_count = r.array_len()?.unwrap_or(0);
    let mut topics = Vec::with_capacity(topic_count);
    for _ in 0..topic_count {
        let (name, topic_id) = if version >= FIRST_TOPIC_ID {
            (String::new(), Some(r.uuid()?))
        } else {
            (r.string()?, None)
        };
        let partition_count = r.array_len()?.unwrap_or(0);
        let mut partitions = Vec::with_capacity(partition_count);
        for _ in 0..partition_count {
            let index = r.i32()?;
            let records = r.nullable_bytes()?;
            r.skip_tagged_fields()?;
            partitions.push(PartitionData { index, records });
        }
        r.skip_tagged_fields()?;
        topics.push(TopicData {
            name,
            topic_id,
            partitions,
        });
    }
    r.skip_tagged_fields()?;
    Ok(ProduceRequest {
        transactional_id,
        acks,
        timeout_ms,
        topics,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use kafka_protocol::messages::produce_request::{PartitionProduceData, TopicProduceData};
    use kafka_protocol::messages::{ProduceRequest as KpProduce, TopicName};
    use kafka_protocol::protocol::{Encodable, StrBytes};

    /// Our decoder must agree with the reference codec on every version we serve.
    #[test]
    fn agrees_with_kafka_protocol() {
        let records = Bytes::from(crate::protocol::batch::synthetic(0, 2, 8, 7));
        for version in MIN_VERSION..=MAX_VERSION {
            let req = KpProduce::default()
                .with_acks(-1)
                .with_timeout_ms(1500)
                .with_topic_data(vec![TopicProduceData::default()
                    .with_name(TopicName(StrBytes::from_static_str("t")))
                    .with_topic_id(uuid::Uuid::from_bytes([7; 16]))
                    .with_partition_data(vec![PartitionProduceData::default()
                        .with_index(3)
                        .with_records(Some(records.clone()))])]);
            let mut buf = bytes::BytesMut::new();
            req.encode(&mut buf, version).unwrap();
            let got = decode(buf.freeze(), version).unwrap();
            assert_eq!((got.acks, got.timeout_ms), (-1, 1500));
            if version >= FIRST_TOPIC_ID {
                assert_eq!(got.topics[0].topic_id, Some([7; 16]));
            } else {
                assert_eq!(
                    (got.topics[0].name.as_str(), got.topics[0].topic_id),
                    ("t", None)
                );
            }
            assert_eq!(got.topics[0].partitions[0].index, 3);
            assert_eq!(got.topics[0].partitions[0].records.as_ref(), Some(&records));
        }
    }

    #[test]
    fn truncated_is_an_error() {
        assert!(decode(Bytes::from_static(&[0xff, 0xff, 0, 1]), 3).is_err());
    }
}
