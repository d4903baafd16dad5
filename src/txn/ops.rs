//! One typed request per transaction operation, each run on its id's coordinator shard
//! (`service::route`).

use super::service::{persist, start_markers, when_settled, TxnRequest, Txns};
use super::state::{ListFilter, State, TxnPartition, TxnRecord};
use crate::shard::mesh::Request;
use futures::future::LocalBoxFuture;
use kafka_protocol::ResponseError;
use std::rc::Rc;

/// How long AddPartitionsToTxn waits for the transaction before to complete before it answers
/// CONCURRENT_TRANSACTIONS (`service::when_settled`).
const SETTLE_WAIT_MS: u64 = 50;

fn now_ms(txns: &Txns) -> i64 {
    let shard = &txns.shard;
    shard.clock().wall_ms() as i64
}

/// A producer id from the controller, for a new transactional id or one whose epoch is used
/// up.
async fn new_producer_id(txns: &Rc<Txns>) -> Result<i64, ResponseError> {
    match crate::controller::allocate_producer_id(&txns.controllers).await {
        Ok(Ok(id)) => Ok(id),
        Ok(Err(code)) => {
            Err(ResponseError::try_from_code(code)
                .unwrap_or(ResponseError::CoordinatorNotAvailable))
        }
        Err(_) => Err(ResponseError::CoordinatorNotAvailable),
    }
}

/// InitProducerId with a transactional id: Ok((producer id, epoch)).
pub struct Init {
    pub id: String,
    pub timeout_ms: i32,
    /// The producer id and epoch the producer has (v3+, KIP-360), if any.
    pub producer: Option<(i64, i16)>,
}

impl TxnRequest for Init {
    type Reply = Result<(i64, i16), ResponseError>;
    fn transactional_id(&self) -> &str {
        &self.id
    }
    fn run(self, txns: Rc<Txns>) -> LocalBoxFuture<'static, Self::Reply> {
        Box::pin(async move {
            if let Some((producer_id, epoch)) = self.producer {
                let c = txns.coordinator.borrow();
                if c.is_init_retry(&self.id, producer_id, epoch)? {
                    let r = c
                        .get(&self.id)
                        .ok_or(ResponseError::CoordinatorNotAvailable)?;
                    return Ok((r.producer_id, r.producer_epoch));
                }
            }
            // A fresh producer id only where one is needed: a new id, or an epoch used up.
            let needs_id = txns
                .coordinator
                .borrow()
                .get(&self.id)
                .is_none_or(TxnRecord::epoch_exhausted);
            let new_id = if needs_id {
                new_producer_id(&txns).await?
            } else {
                -1
            };
            let (step, fenced) = txns.coordinator.borrow_mut().init_producer_id(
                &self.id,
                self.timeout_ms,
                new_id,
                now_ms(&txns),
            )?;
            persist(&txns, &self.id, step).await?;
            if fenced {
                // The ongoing transaction of the previous instance is aborted first; the
                // client retries once its markers are written.
                start_markers(&txns, &self.id);
                return Err(ResponseError::ConcurrentTransactions);
            }
            let r = txns.coordinator.borrow().get(&self.id).cloned();
            let r: TxnRecord = r.ok_or(ResponseError::CoordinatorNotAvailable)?;
            Ok((r.producer_id, r.producer_epoch))
        })
    }
}

/// AddPartitionsToTxn and AddOffsetsToTxn (with the group's offsets partition).
pub struct AddPartitions {
    pub id: String,
    pub producer_id: i64,
    pub epoch: i16,
    pub partitions: Vec<TxnPartition>,
}

impl TxnRequest for AddPartitions {
    type Reply = Result<(), ResponseError>;
    fn transactional_id(&self) -> &str {
        &self.id
    }
    fn run(self, txns: Rc<Txns>) -> LocalBoxFuture<'static, Self::Reply> {
        Box::pin(async move {
            let step = when_settled(&txns, SETTLE_WAIT_MS, || {
                txns.coordinator.borrow_mut().add_partitions(
                    &self.id,
                    self.producer_id,
                    self.epoch,
                    &self.partitions,
                    now_ms(&txns),
                )
            })
            .await?;
            persist(&txns, &self.id, step).await
        })
    }
}

/// Whether each partition is in the producer's ongoing transaction, or why not (see
/// `Coordinator::in_transaction`): asked by Produce before it takes transactional batches
/// (KIP-890 part 1), and by TxnOffsetCommit for the group's offsets partition. With `add`
/// (transaction version 2, KIP-890 part 2: Produce v12, TxnOffsetCommit v5), the partitions
/// are added to the transaction first, beginning it if none is ongoing, as AddPartitionsToTxn
/// would: the producer sends no AddPartitionsToTxn of its own.
pub struct Verify {
    pub id: String,
    pub producer_id: i64,
    pub epoch: i16,
    pub partitions: Vec<TxnPartition>,
    pub add: bool,
}

impl TxnRequest for Verify {
    type Reply = Vec<Result<(), ResponseError>>;
    fn transactional_id(&self) -> &str {
        &self.id
    }
    fn run(self, txns: Rc<Txns>) -> LocalBoxFuture<'static, Self::Reply> {
        if self.add {
            return Box::pin(async move {
                let n = self.partitions.len();
                let add = AddPartitions {
                    id: self.id,
                    producer_id: self.producer_id,
                    epoch: self.epoch,
                    partitions: self.partitions,
                };
                vec![add.run(txns.clone()).await; n]
            });
        }
        let c = txns.coordinator.borrow();
        let out = self
            .partitions
            .iter()
            .map(|p| c.in_transaction(&self.id, self.producer_id, self.epoch, p))
            .collect();
        Box::pin(async move { out })
    }
}

/// EndTxn: the Prepare state is persisted, then answered; markers follow in the background.
/// Ok: the producer id and epoch the producer goes on with (EndTxn v5 answers them).
pub struct End {
    pub id: String,
    pub producer_id: i64,
    pub epoch: i16,
    pub commit: bool,
    /// Transaction version 2 (EndTxn v5+, KIP-890 part 2): the end bumps the epoch.
    pub bump_epoch: bool,
}

impl TxnRequest for End {
    type Reply = Result<(i64, i16), ResponseError>;
    fn transactional_id(&self) -> &str {
        &self.id
    }
    fn run(self, txns: Rc<Txns>) -> LocalBoxFuture<'static, Self::Reply> {
        Box::pin(async move {
            let exhausted = txns.coordinator.borrow().epoch_exhausted(&self.id);
            let next_id = if self.bump_epoch && exhausted {
                new_producer_id(&txns).await?
            } else {
                -1
            };
            let step = {
                let mut c = txns.coordinator.borrow_mut();
                let (id, pid, epoch, commit) =
                    (&self.id, self.producer_id, self.epoch, self.commit);
                if self.bump_epoch {
                    c.end_txn_bumping(id, pid, epoch, commit, next_id, now_ms(&txns))
                } else {
                    c.end_txn(id, pid, epoch, commit, now_ms(&txns))
                }
            }?;
            // None: a retry of an end already complete.
            if let Some(step) = step {
                persist(&txns, &self.id, step).await?;
                start_markers(&txns, &self.id);
            }
            let answer = txns.coordinator.borrow().producer_for_client(&self.id);
            answer.ok_or(ResponseError::CoordinatorNotAvailable)
        })
    }
}

/// DescribeTransactions (KIP-664): an id's record, if it is known here.
pub struct Describe {
    pub id: String,
}

impl TxnRequest for Describe {
    type Reply = Option<TxnRecord>;
    fn transactional_id(&self) -> &str {
        &self.id
    }
    fn run(self, txns: Rc<Txns>) -> LocalBoxFuture<'static, Self::Reply> {
        let r = txns
            .coordinator
            .borrow()
            .get(&self.id)
            .filter(|r| r.producer_id >= 0) // still being created: not known yet
            .cloned();
        Box::pin(async move { r })
    }
}

/// ListTransactions (KIP-664), on one shard: the ids it coordinates that pass the filter, or
/// COORDINATOR_LOAD_IN_PROGRESS while one of its `__transaction_state` partitions loads.
pub struct List {
    pub filter: ListFilter,
}

impl Request<Txns> for List {
    type Reply = Result<Vec<(String, i64, State)>, ResponseError>;
    fn run(self, txns: Rc<Txns>) -> LocalBoxFuture<'static, Self::Reply> {
        let listed = if super::service::loading(&txns) {
            Err(ResponseError::CoordinatorLoadInProgress)
        } else {
            let listed = txns.coordinator.borrow().list(&self.filter, now_ms(&txns));
            Ok(listed)
        };
        Box::pin(async move { listed })
    }
}
