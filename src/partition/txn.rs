//! A partition's side of transactions (KIP-98): who may write transactional and control
//! batches, the last stable offset (LSO) and where it lies in the log, what a read_committed
//! read answers, and the markers a transaction coordinator writes.
//!
//! The LSO is the smaller of the high watermark and the first offset of the oldest ongoing
//! transaction (`ProducerTable::first_unstable_offset`). A marker ends its transaction when it
//! is written: the coordinator decided the outcome and made it durable before writing any
//! marker, and it writes them again after a crash, so exposing the records then agrees with
//! what every later read sees.

use super::{ReadRequest, ReadResult};
use crate::protocol::batch::BatchHeader;
use crate::protocol::control;
use crate::storage::log::PartitionLog;
use crate::storage::positions::LogPosition;
use crate::storage::read;
use crate::storage::txn_index;
use kafka_protocol::ResponseError;
use std::cell::{Cell, RefCell};

/// Who sends a partition batches, and so what it may write.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Source {
    /// A producer's Produce: no control batches, no transactional ones (no coordinator has
    /// verified them: KIP-890 part 1).
    Client,
    /// A producer's Produce whose transactional batches the transaction coordinator verified:
    /// the partition is in the producer's ongoing transaction, at its current epoch.
    VerifiedTransaction,
    /// The broker's own coordinators: markers and transactional offset commits, which carry no
    /// sequence numbers.
    Coordinator,
}

/// What `source` may not write: a client's control batch is INVALID_RECORD (as Kafka), an
/// unverified transactional batch INVALID_TXN_STATE (it would open a transaction here that no
/// coordinator knows, holding back the LSO: a hanging transaction).
pub fn check_source(
    name: &str,
    headers: &[BatchHeader],
    source: Source,
) -> Result<(), ResponseError> {
    let refused = match source {
        Source::Coordinator => return Ok(()),
        _ if headers.iter().any(|h| h.is_control()) => ResponseError::InvalidRecord,
        Source::Client if headers.iter().any(|h| h.is_transactional()) => {
            ResponseError::InvalidTxnState
        }
        _ => return Ok(()),
    };
    log::warn!("produce to {name}: refused a client's transactional or control batch: {refused:?}");
    Err(refused)
}

/// Below this offset every transaction has ended: what read_committed readers may see.
pub fn last_stable_offset(log: &PartitionLog) -> i64 {
    let hw = log.high_watermark();
    log.producers
        .first_unstable_offset()
        .map_or(hw, |first| first.min(hw))
}

/// The last stable offset's place in the log, once looked up: the high watermark's, or the
/// start of the batch that begins the oldest ongoing transaction.
#[derive(Default)]
pub struct StableBound {
    cached: Cell<Option<LogPosition>>,
}

impl StableBound {
    /// The LSO and its place (looked up once per LSO, in at most one index interval of
    /// headers).
    pub async fn find(&self, log: &RefCell<PartitionLog>) -> std::io::Result<LogPosition> {
        let (lso, hw, cached) = {
            let log = log.borrow();
            (
                last_stable_offset(&log),
                log.hw_position(),
                self.cached.get(),
            )
        };
        if lso >= hw.offset {
            return Ok(hw);
        }
        if let Some(p) = cached.filter(|p| p.offset == lso) {
            return Ok(p);
        }
        let plan = log.borrow().plan_read_below(lso, hw);
        let Ok(Some(plan)) = plan else {
            return Ok(hw); // the transaction's batches were removed (DeleteRecords): none
        };
        let file_position = read::batch_start(&plan, lso).await?;
        let found = LogPosition {
            offset: lso,
            segment_base: plan.segment_base,
            file_position,
        };
        self.cached.set(Some(found));
        Ok(found)
    }

    /// Forgets the place found: a segment swapped by compaction has other byte positions.
    pub fn forget(&self) {
        self.cached.set(None);
    }
}

/// A read's answer: its records, the offsets (`hw`, `lso`, the log start), and for
/// read_committed the aborted transactions of the range it covers (from the read offset to
/// the LSO).
pub fn read_result(
    log: &PartitionLog,
    req: &ReadRequest,
    (hw, lso, log_start_offset): (i64, i64, i64),
    records: Option<crate::protocol::chunk::Chunk>,
) -> ReadResult {
    let aborted = req
        .read_committed
        .then(|| txn_index::aborted_between(&log.aborted, req.offset, lso));
    ReadResult {
        error_code: 0,
        high_watermark: hw,
        last_stable_offset: lso,
        log_start_offset,
        aborted,
        records,
        preferred_read_replica: -1,
    }
}

/// A coordinator's markers among `headers` (whole batches of `records`) are refused where a
/// newer coordinator already wrote one for the producer here: a zombie coordinator is fenced
/// (TRANSACTION_COORDINATOR_FENCED). Checked under the append turn.
pub fn check_markers(
    log: &PartitionLog,
    records: &[u8],
    headers: &[BatchHeader],
) -> Result<(), ResponseError> {
    let mut at = 0;
    for h in headers {
        let bytes = &records[at..at + h.size_bytes];
        at += h.size_bytes;
        if let (true, Some(epoch)) = (h.is_control(), control::coordinator_epoch(bytes)) {
            log.producers.check_marker(h.producer_id, epoch)?;
        }
    }
    Ok(())
}
