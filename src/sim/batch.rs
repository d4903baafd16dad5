//! The simulator's batches: what its clients and coordinators write, and their bytes on the
//! simulated disk. A batch is a real Kafka record batch (magic 2, CRC32C) with the producer's
//! id, epoch and sequence, the transactional and control bits and, for a marker, the control
//! record the production `protocol::control` writes; its `payload` (which names the produce
//! that wrote it) rides in the batch's timestamps and fills its records' values. So the production recovery scan, CRC check
//! and marker parsing read exactly what the simulator's replicas write.

use crate::protocol::batch::{self, BatchHeader};
use crate::protocol::control;
use crate::storage::txn_index::Marker;

/// Each record's value: the payload again and again, so that a batch is mostly records, as a
/// client's is, and a torn sector more often falls among them than in a header.
const VALUE_BYTES: usize = 256;

/// A batch of `count` records from one produce (`payload` identifies it).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Batch {
    pub base: i64,
    pub count: i64,
    pub epoch: i32,
    pub payload: u64,
    /// An idempotent producer's batch: its id, epoch and first sequence.
    pub stamp: Option<Stamp>,
}

/// What an idempotent producer writes into a batch's header; a transactional producer's
/// batches and its coordinator's markers are marked `txn`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Stamp {
    pub producer_id: i64,
    pub epoch: i16,
    pub sequence: i32,
    pub txn: Option<TxnPart>,
}

/// What part of a transaction a batch is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TxnPart {
    /// The producer's records.
    Records,
    /// The marker that ends the transaction here (a control batch of one record).
    Marker {
        commit: bool,
        coordinator_epoch: i32,
    },
}

impl Batch {
    pub fn end(&self) -> i64 {
        self.base + self.count
    }

    /// The header the production producer state reads (only the fields it uses).
    pub fn header(&self) -> BatchHeader {
        use batch::{ATTR_CONTROL, ATTR_TRANSACTIONAL};
        let stamp = self.stamp.unwrap_or(Stamp {
            producer_id: -1,
            epoch: -1,
            sequence: -1,
            txn: None,
        });
        let attributes = match stamp.txn {
            None => 0,
            Some(TxnPart::Records) => ATTR_TRANSACTIONAL,
            Some(TxnPart::Marker { .. }) => ATTR_TRANSACTIONAL | ATTR_CONTROL,
        };
        BatchHeader {
            base_offset: self.base,
            size_bytes: 0,
            partition_leader_epoch: self.epoch,
            attributes,
            last_offset_delta: (self.count - 1) as i32,
            base_timestamp: 0,
            max_timestamp: 0,
            producer_id: stamp.producer_id,
            producer_epoch: stamp.epoch,
            base_sequence: stamp.sequence,
            record_count: self.count as i32,
        }
    }

    /// What a marker batch says (`txn_index::Marker`); None for other batches.
    pub fn marker(&self) -> Option<Marker> {
        match self.stamp?.txn? {
            TxnPart::Marker {
                commit,
                coordinator_epoch,
            } => Some(Marker {
                coordinator_epoch,
                commits: Some(commit),
            }),
            TxnPart::Records => None,
        }
    }

    /// (producer id, whether it commits) of a marker batch.
    pub fn ends_txn(&self) -> Option<(i64, bool)> {
        let commits = self.marker()?.commits?;
        Some((self.stamp?.producer_id, commits))
    }

    /// The producer id of a transaction's records.
    pub fn txn_records_of(&self) -> Option<i64> {
        let s = self.stamp?;
        (s.txn == Some(TxnPart::Records)).then_some(s.producer_id)
    }

    /// The batch's bytes, as its leader wrote them into its log.
    pub fn encode(&self) -> Vec<u8> {
        let h = self.header();
        let timestamp = self.payload as i64;
        let mut bytes = match self.marker() {
            Some(m) => {
                let commits = m.commits.expect("a simulated marker commits or aborts");
                control::marker(
                    h.producer_id,
                    h.producer_epoch,
                    commits,
                    m.coordinator_epoch,
                    timestamp,
                )
            }
            None => {
                let value = self.payload.to_be_bytes().repeat(VALUE_BYTES / 8);
                let records: Vec<batch::KeyValue<'_>> =
                    (0..self.count).map(|_| (None, Some(&value[..]))).collect();
                batch::build(&records, timestamp)
            }
        };
        bytes[21..23].copy_from_slice(&h.attributes.to_be_bytes());
        bytes[43..51].copy_from_slice(&h.producer_id.to_be_bytes());
        bytes[51..53].copy_from_slice(&h.producer_epoch.to_be_bytes());
        bytes[53..57].copy_from_slice(&h.base_sequence.to_be_bytes());
        batch::seal(&mut bytes);
        batch::assign(&mut bytes, self.base, self.epoch, None);
        bytes
    }

    /// The batch `bytes` hold (one whole batch), checked as a broker checks what it reads
    /// back: Err names what is wrong with them.
    pub fn decode(bytes: &[u8]) -> Result<Batch, String> {
        let h = batch::validate(bytes).map_err(|e| format!("{e:?}"))?;
        if h.size_bytes != bytes.len() {
            return Err(format!(
                "{} bytes hold a batch of {}",
                bytes.len(),
                h.size_bytes
            ));
        }
        let txn = match (h.is_transactional(), h.is_control()) {
            (false, _) => None,
            (true, false) => Some(TxnPart::Records),
            (true, true) => Some(TxnPart::Marker {
                commit: control::commits(bytes).ok_or("a control batch that is no marker")?,
                coordinator_epoch: control::coordinator_epoch(bytes)
                    .ok_or("a marker without a coordinator epoch")?,
            }),
        };
        let stamp = (h.producer_id >= 0).then_some(Stamp {
            producer_id: h.producer_id,
            epoch: h.producer_epoch,
            sequence: h.base_sequence,
            txn,
        });
        Ok(Batch {
            base: h.base_offset,
            count: h.last_offset_delta as i64 + 1,
            epoch: h.partition_leader_epoch,
            payload: h.base_timestamp as u64,
            stamp,
        })
    }
}
