//! The controller's metadata log: an entry's bytes (records::decode) applied to a catalog
//! (records::apply, which must never panic on records that contradict it), and the Raft log
//! file's framing (raft_store::parse_records). The first byte chooses the input's form: raw
//! bytes, or a valid entry built from the input with one byte flipped (so that the fuzzer
//! reaches rkyv's validation of nearly valid entries without a seed corpus).
#![no_main]

use libfuzzer_sys::fuzz_target;
use sluice::controller::raft_store;
use sluice::controller::records::{self, MetadataRecord};
use sluice::storage::catalog::{
    BrokerRecord, CatalogRecord, EndpointRecord, PartitionAssignment, TopicRecord,
};

/// Records derived from the input, each from a few bytes.
fn built(data: &[u8]) -> Vec<MetadataRecord> {
    data.chunks(4)
        .map(|c| {
            let id = [c[0] % 4; 16];
            let n = *c.get(1).unwrap_or(&0) as i32 % 5;
            match c[0] % 12 {
                0 => MetadataRecord::ClusterId(format!("c{n}")),
                1 => MetadataRecord::RegisterBroker(Box::new(BrokerRecord {
                    node_id: n,
                    incarnation: c.len() as u64,
                    listeners: vec![EndpointRecord {
                        name: "PLAINTEXT".into(),
                        host: "h".into(),
                        port: n,
                        security_protocol: 0,
                    }],
                    rack: None,
                    fenced: false,
                })),
                2 => MetadataRecord::FenceBroker {
                    node_id: n,
                    incarnation: c.len() as u64,
                },
                3 => MetadataRecord::CreateTopic(TopicRecord {
                    name: format!("t{}", c[0] % 4),
                    id,
                    partitions: 1,
                    configs: Vec::new(),
                    assignment: vec![PartitionAssignment {
                        replicas: vec![n, n + 1],
                        leader: n,
                        leader_epoch: 0,
                        isr: vec![n],
                        ..Default::default()
                    }],
                }),
                4 => MetadataRecord::DeleteTopic { id },
                5 => MetadataRecord::CreatePartitions {
                    id,
                    count: n as u32 + 1,
                    added: Vec::new(),
                },
                6 => MetadataRecord::SetTopicConfigs {
                    id,
                    configs: vec![("retention.ms".into(), n.to_string())],
                },
                7 => MetadataRecord::ElectLeader {
                    id,
                    partition: n % 2,
                    leader: n,
                    isr: (c.len() % 2 == 0).then(|| vec![n]),
                },
                8 => MetadataRecord::ChangeIsr {
                    id,
                    partition: n % 2,
                    epoch: n % 3,
                    isr: vec![n, (n + 1) % 5],
                },
                9 => MetadataRecord::SetAssignment {
                    id,
                    partition: n % 2,
                    epoch: n % 3,
                    assignment: PartitionAssignment {
                        replicas: vec![n, n + 1, n + 2],
                        leader: if c.len() > 2 { n } else { -1 },
                        leader_epoch: n,
                        isr: vec![n],
                        adding: vec![n + 2],
                        removing: vec![n + 1],
                    },
                },
                10 => MetadataRecord::AlterIsr {
                    id,
                    partition: n % 2,
                    epoch: n % 3,
                    from: vec![n],
                    isr: vec![n, (n + 1) % 5],
                },
                _ => MetadataRecord::ProducerIdBlock { end: n as i64 },
            }
        })
        .collect()
}

fuzz_target!(|data: &[u8]| {
    let Some((&mode, rest)) = data.split_first() else {
        return;
    };
    let _ = raft_store::parse_records(rest);
    let entry = if mode & 1 == 1 {
        let mut e = records::encode(&built(rest));
        let at = rest.first().map_or(0, |&b| b as usize) % e.len();
        e[at] ^= mode | 1;
        e
    } else {
        rest.to_vec()
    };
    let mut catalog = CatalogRecord::default();
    if let Ok(recs) = records::decode(&entry) {
        let before = catalog.clone();
        if records::apply(&mut catalog, &recs).is_err() {
            assert_eq!(catalog, before, "a failed entry changes nothing");
        }
    }
    // Every built entry applies record by record without a panic.
    for r in built(rest) {
        let _ = records::apply(&mut catalog, std::slice::from_ref(&r));
    }
});
