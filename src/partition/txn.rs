//! A partition's side of transactions (KIP-98): who may write transactional and control
//! batches, the last stable offset (LSO) and where it lies in the log, what a read_committed
//! read answers, and the markers a transaction coordinator writes.
//!
//! The LSO is the smaller of the high watermark and the first offset of the oldest ongoing
//! transaction (`ProducerTable::first_unstable_offset`). A marker ends its transaction when it
//! is written: the coordinator decided the outcome and made it durable before writing any
//! marker, and it writes them again after a crash, so exposing the records then agrees with
//! what every later read sees.

use super::{Partition, ReadRequest, ReadResult, Watch};
use crate::protocol::batch::BatchHeader;
use crate::protocol::control;
use crate::storage::positions::LogPosition;
use crate::storage::read;
use crate::storage::txn_index;
use bytes::Bytes;
use kafka_protocol::ResponseError;
use std::rc::Rc;

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

impl Partition {
    /// Below this offset every transaction has ended: what read_committed readers may see.
    pub fn last_stable_offset(&self) -> i64 {
        let log = self.log.borrow();
        let hw = log.high_watermark();
        log.producers
            .first_unstable_offset()
            .map_or(hw, |first| first.min(hw))
    }

    /// Wakes read_committed waiters up to the current LSO (after the high watermark moved or
    /// a marker ended a transaction).
    pub(super) fn advance_stable(&self) {
        self.watchers
            .advance(Watch::Stable, self.last_stable_offset());
    }

    /// The LSO and its place in the log: the high watermark's, or the start of the batch that
    /// begins the oldest ongoing transaction (looked up once per LSO, in at most one index
    /// interval of headers).
    pub(super) async fn stable_bound(&self) -> std::io::Result<LogPosition> {
        let lso = self.last_stable_offset();
        let (hw, cached) = {
            let log = self.log.borrow();
            (log.hw_position(), self.stable_position.get())
        };
        if lso >= hw.offset {
            return Ok(hw);
        }
        if let Some(p) = cached.filter(|p| p.offset == lso) {
            return Ok(p);
        }
        let plan = self.log.borrow().plan_read_below(lso, hw);
        let Ok(Some(plan)) = plan else {
            return Ok(hw); // the transaction's batches were removed (DeleteRecords): none
        };
        let file_position = read::batch_start(&plan, lso).await?;
        let found = LogPosition {
            offset: lso,
            segment_base: plan.segment_base,
            file_position,
        };
        self.stable_position.set(Some(found));
        Ok(found)
    }

    /// A read's answer: its records, the offsets, and for read_committed the aborted
    /// transactions of the range it covers (from the read offset to the LSO).
    pub(super) fn read_result(
        &self,
        req: &ReadRequest,
        hw: i64,
        lso: i64,
        log_start_offset: i64,
        records: Option<crate::protocol::chunk::Chunk>,
    ) -> ReadResult {
        let aborted = req.read_committed.then(|| {
            let log = self.log.borrow();
            txn_index::aborted_between(&log.aborted, req.offset, lso)
        });
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

    /// Writes the marker that ends (`producer_id`, `epoch`)'s transaction here: commit or
    /// abort. `coordinator_epoch` is the coordinator's leader epoch, as Kafka records it. The
    /// caller waits for the commit it needs.
    pub async fn append_marker(
        self: &Rc<Self>,
        producer_id: i64,
        epoch: i16,
        commit: bool,
        coordinator_epoch: i32,
    ) -> Result<super::Appended, ResponseError> {
        let now_ms = self.env.clock.wall_ms() as i64;
        let marker =
            crate::protocol::control::marker(producer_id, epoch, commit, coordinator_epoch, now_ms);
        self.append_from(Bytes::from(marker), Source::Coordinator)
            .await
            .map_err(|r| r.error)
    }

    /// A coordinator's markers among `headers` (whole batches of `records`) are refused where
    /// a newer coordinator already wrote one for the producer here: a zombie coordinator is
    /// fenced (TRANSACTION_COORDINATOR_FENCED). Checked under the append turn.
    pub(super) fn check_markers(
        &self,
        records: &[u8],
        headers: &[BatchHeader],
    ) -> Result<(), ResponseError> {
        let log = self.log.borrow();
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

    /// The producer's epoch as this partition knows it (None: unknown here).
    pub fn producer_epoch(&self, producer_id: i64) -> Option<i16> {
        self.log.borrow().producers.epoch_of(producer_id)
    }
}
