//! Produce: decoded by the hand-written decoder (record bytes stay slices of the request),
//! split by owning shard, appended there, and answered per acks: not at all for acks=0, after
//! the append for acks=1, after the covering commit for acks=all.
//!
//! A connection pipelines its produce requests (see `server/connection.rs`): each request's
//! appends are sent to their owners in arrival order, and the connection moves on to the next
//! request while the owners append and, for acks=all, wait for the commit. So one fsync covers
//! every request a connection has in flight, and a partition's appends keep the order their
//! requests arrived in (the mesh delivers in order, and an owner takes each append's place in
//! its partition's order as the request arrives: see `ProduceOnOwner`).

use super::authorize::{self, Caller};
use super::Reply;
use super::Services;
use crate::partition::ingest::Rejected;
use crate::partition::{Source, TopicPartition};
use crate::protocol::batch;
use crate::protocol::produce::{self, ProduceRequest};
use crate::security::acl::{Operation, ResourceType};
use crate::shard::mesh::{Peer, Request};
use crate::shard::Shard;
use crate::storage::catalog::is_internal;
use crate::txn::service::Txns;
use crate::txn::{ops, remote};
use bytes::Bytes;
use futures::future::LocalBoxFuture;
use kafka_protocol::messages::produce_response::{
    BatchIndexAndErrorMessage, PartitionProduceResponse, TopicProduceResponse,
};
use kafka_protocol::messages::{ProduceResponse, TopicName};
use kafka_protocol::ResponseError;
use std::collections::{HashMap, HashSet};
use std::rc::Rc;
use uuid::Uuid;

/// The first Produce version of transaction version 2 (KIP-890 part 2): a transactional
/// batch adds its partition to the producer's transaction, which sends no AddPartitionsToTxn.
const IMPLICIT_ADD_VERSION: i16 = 12;
/// The first Produce version answered TRANSACTION_ABORTABLE (KIP-890) where older ones get
/// INVALID_TXN_STATE.
const ABORTABLE_VERSION: i16 = 11;

/// One partition's answer.
#[derive(Debug, Clone)]
struct ProduceOutcome {
    error_code: i16,
    base_offset: i64,
    /// One past the last offset appended: what the commit must reach (acks=all).
    end_offset: i64,
    log_append_time_ms: i64,
    log_start_offset: i64,
    /// The records a record-level rule refused, and why (v8+); None for other outcomes.
    rejected: Option<Box<Rejected>>,
}

impl ProduceOutcome {
    fn failed(e: ResponseError) -> ProduceOutcome {
        ProduceOutcome {
            error_code: e.code(),
            base_offset: -1,
            end_offset: -1,
            log_append_time_ms: -1,
            log_start_offset: -1,
            rejected: None,
        }
    }

    fn rejected(r: Rejected) -> ProduceOutcome {
        let error = r.error;
        let detailed = !r.record_errors.is_empty() || r.message.is_some();
        ProduceOutcome {
            rejected: detailed.then(|| Box::new(r)),
            ..ProduceOutcome::failed(error)
        }
    }
}

/// Appends to the partitions of one shard, then waits for what `acks` asks: for -1 (all), each
/// append's commit until the deadline (monotonic ms). One outcome per item. None records: the
/// request's records for that partition were not a record set.
///
/// `run` takes the request's place in every partition's append order before it returns (see
/// `Partition::append`), and the owner calls `run` in arrival order, so a connection's
/// requests land in the order it sent them even when one request's appends wait on another
/// partition, a roll or the disk. The appends themselves then run concurrently.
struct ProduceOnOwner {
    acks: i16,
    deadline_ms: u64,
    items: Vec<(TopicPartition, Option<Bytes>, Source)>,
}

impl Request for ProduceOnOwner {
    type Reply = Vec<ProduceOutcome>;
    fn run(self, shard: Rc<Shard>) -> LocalBoxFuture<'static, Vec<ProduceOutcome>> {
        let (acks, deadline_ms) = (self.acks, self.deadline_ms);
        let appends: Vec<_> = self
            .items
            .into_iter()
            .map(|(tp, records, source)| {
                let shard = shard.clone();
                let append = append_one(&shard, tp, (records, source), acks);
                async move {
                    let outcome = append.await;
                    if acks != -1 {
                        return outcome;
                    }
                    committed(&shard, tp, outcome, deadline_ms).await
                }
            })
            .collect();
        Box::pin(futures::future::join_all(appends))
    }
}

/// Starts one append: its place in the partition's order is taken now.
fn append_one(
    shard: &Shard,
    tp: TopicPartition,
    (records, source): (Option<Bytes>, Source),
    acks: i16,
) -> LocalBoxFuture<'static, ProduceOutcome> {
    let Some(partition) = shard.partition(tp) else {
        return Box::pin(async { ProduceOutcome::failed(ResponseError::UnknownTopicOrPartition) });
    };
    let Some(records) = records else {
        return Box::pin(async { ProduceOutcome::failed(ResponseError::CorruptMessage) });
    };
    let append = partition.append_acked(records, source, acks);
    use ResponseError::{CorruptMessage, KafkaStorageError, MessageTooLarge, NotEnoughReplicas};
    Box::pin(async move {
        match append.await {
            Ok(a) => ProduceOutcome {
                error_code: 0,
                base_offset: a.base_offset,
                end_offset: a.end_offset,
                log_append_time_ms: a.log_append_time_ms,
                log_start_offset: partition.log_start_offset(),
                rejected: None,
            },
            // A batch the log refused for its records or sequence: the partition's log start
            // still goes out, as from Kafka (whose replica manager leaves it out, -1, for
            // oversized and corrupt batches alone). Too few in sync is refused before the log.
            Err(r)
                if !matches!(
                    r.error,
                    MessageTooLarge | CorruptMessage | KafkaStorageError | NotEnoughReplicas
                ) =>
            {
                ProduceOutcome {
                    log_start_offset: partition.log_start_offset(),
                    ..ProduceOutcome::rejected(r)
                }
            }
            Err(r) => ProduceOutcome::rejected(r),
        }
    })
}

/// An acks=all outcome: the append's, once its commit is in (or its timeout or storage error).
async fn committed(
    shard: &Shard,
    tp: TopicPartition,
    outcome: ProduceOutcome,
    deadline_ms: u64,
) -> ProduceOutcome {
    if outcome.error_code != 0 {
        return outcome;
    }
    let Some(partition) = shard.partition(tp) else {
        return ProduceOutcome::failed(ResponseError::UnknownTopicOrPartition);
    };
    match shard
        .wait_committed(&partition, outcome.end_offset, deadline_ms)
        .await
    {
        Ok(()) => outcome,
        Err(e) => ProduceOutcome::failed(e),
    }
}

/// Per request topic, each partition's index and either an index into the routed items or the
/// error found before routing.
type Slots = Vec<Vec<(i32, Result<usize, ResponseError>)>>;

/// A partition's records with the shard that owns it.
type Routed = Vec<(usize, (TopicPartition, Option<Bytes>, Source))>;

pub async fn handle(
    services: &Services,
    caller: &Caller,
    version: i16,
    body: Bytes,
) -> anyhow::Result<Reply> {
    let shard = &services.shard;
    let mut req =
        produce::decode(body, version).map_err(|e| anyhow::anyhow!("produce request: {}", e.0))?;
    name_topics(shard, &mut req);
    let refused = refusals(shard, caller, &req);
    let verified = match refused.transaction {
        false => verify_transactional(&services.txns, &req, version).await,
        true => Verdicts::new(),
    };
    let (items, slots) = route(shard, &req, &verified, &refused);
    let (acks, timeout_ms) = (req.acks, req.timeout_ms.max(0) as u64);
    let deadline_ms = shard.clock().monotonic_ms() + timeout_ms;
    let started = shard
        .scatter_start(items, |items| ProduceOnOwner {
            acks,
            deadline_ms,
            items,
        })
        .await;
    let gone = || ProduceOutcome::failed(ResponseError::NotLeaderOrFollower);
    if acks == 0 {
        // No response: the appends finish before the connection takes its next request, so
        // that their bytes stay counted against its request memory until then.
        started.gather(gone).await;
        return Ok(Reply::None);
    }
    Ok(Reply::Later(Box::pin(async move {
        let outcomes = started.gather(gone).await;
        respond(&req, slots, &outcomes, version)
    })))
}

/// Names the topics a v13+ request gives by id (an unknown id leaves the name empty).
fn name_topics(shard: &Shard, req: &mut ProduceRequest) {
    let catalog = shard.catalog();
    for t in &mut req.topics {
        if let Some(meta) = t.topic_id.and_then(|id| catalog.by_id.get(&id)) {
            t.name = meta.name.to_string();
        }
    }
}

/// What the authorizer refuses: the whole request (a transactional producer without WRITE on
/// its transactional id), or the topics without WRITE.
struct Refused {
    transaction: bool,
    topics: HashSet<String>,
}

fn refusals(shard: &Shard, caller: &Caller, req: &ProduceRequest) -> Refused {
    let write = Operation::Write;
    // Transactional batches without a transactional id are refused whole, as Kafka does
    // (its authorizer has no id to check WRITE on).
    let transaction = match &req.transactional_id {
        Some(id) => !authorize::allowed(shard, caller, write, ResourceType::TransactionalId, id),
        None => has_transactional_batches(req),
    };
    let topics = req
        .topics
        .iter()
        .filter(|t| !authorize::allowed(shard, caller, write, ResourceType::Topic, &t.name))
        .map(|t| t.name.clone())
        .collect();
    Refused {
        transaction,
        topics,
    }
}

fn has_transactional_batches(req: &ProduceRequest) -> bool {
    req.topics.iter().flat_map(|t| &t.partitions).any(|p| {
        let header = p.records.as_ref().and_then(|r| batch::parse_header(r).ok());
        header.is_some_and(|h| h.is_transactional())
    })
}

/// The items to route (with their owners) and the response's layout.
fn route(
    shard: &Shard,
    req: &ProduceRequest,
    verified: &Verdicts,
    refused: &Refused,
) -> (Routed, Slots) {
    let catalog = shard.catalog();
    let acks_valid = matches!(req.acks, -1..=1);
    let mut items = Vec::new();
    let mut slots: Slots = Vec::with_capacity(req.topics.len());
    for topic in &req.topics {
        let known = catalog.topics.get(&topic.name);
        let mut row = Vec::with_capacity(topic.partitions.len());
        for p in &topic.partitions {
            let slot = match shard.locate(&catalog, known.map(|t| &**t), p.index, false) {
                _ if !acks_valid => Err(ResponseError::InvalidRequiredAcks),
                _ if topic.topic_id.is_some() && topic.name.is_empty() => {
                    Err(ResponseError::UnknownTopicId)
                }
                _ if refused.transaction => Err(ResponseError::TransactionalIdAuthorizationFailed),
                _ if refused.topics.contains(&topic.name) => {
                    Err(ResponseError::TopicAuthorizationFailed)
                }
                // The broker writes its own topics; a client may not (Kafka allows its own
                // AdminClient id alone).
                _ if known.is_some() && is_internal(&topic.name) => {
                    Err(ResponseError::InvalidTopicException)
                }
                Ok((owner, tp)) => 'routed: {
                    // Transactional batches go in only where the coordinator verified them.
                    let source = match verified.get(&(topic.name.clone(), p.index)) {
                        Some(Err(e)) => break 'routed Err(*e),
                        Some(Ok(())) => Source::VerifiedTransaction,
                        None => Source::Client,
                    };
                    items.push((owner, (tp, p.records.clone(), source)));
                    Ok(items.len() - 1)
                }
                Err(e) => Err(e),
            };
            row.push((p.index, slot));
        }
        slots.push(row);
    }
    (items, slots)
}

/// Per partition of a transactional producer's request: whether its coordinator has the
/// partition in the producer's ongoing transaction at the batches' epoch (KIP-890 part 1), or
/// the error Produce answers instead.
type Verdicts = HashMap<(String, i32), Result<(), ResponseError>>;

/// Asks the coordinator about the request's transactional batches, once per request (from
/// v12, it adds their partitions to the transaction first). A fenced producer gets
/// INVALID_PRODUCER_EPOCH (Produce has no PRODUCER_FENCED), a partition outside the
/// transaction INVALID_TXN_STATE (from v11 TRANSACTION_ABORTABLE, KIP-890, which the
/// producer answers by aborting), and a coordinator that cannot answer now, or is busy ending
/// the transaction before, NOT_ENOUGH_REPLICAS, which producers retry (as Kafka's
/// verification answers).
async fn verify_transactional(txns: &Rc<Txns>, req: &ProduceRequest, version: i16) -> Verdicts {
    let add = version >= IMPLICIT_ADD_VERSION;
    let Some(id) = &req.transactional_id else {
        return Verdicts::new();
    };
    let mut producer = None;
    let mut partitions = Vec::new();
    for t in &req.topics {
        for p in &t.partitions {
            let header = p.records.as_ref().and_then(|r| batch::parse_header(r).ok());
            if let Some(h) = header.filter(|h| h.is_transactional() && !h.is_control()) {
                producer.get_or_insert((h.producer_id, h.producer_epoch));
                partitions.push((t.name.clone(), p.index));
            }
        }
    }
    let Some((producer_id, epoch)) = producer else {
        return Verdicts::new();
    };
    let verify = ops::Verify {
        id: id.clone(),
        producer_id,
        epoch,
        partitions: partitions.clone(),
        add,
    };
    let as_produce = |e| match e {
        ResponseError::ProducerFenced => ResponseError::InvalidProducerEpoch,
        ResponseError::ConcurrentTransactions => ResponseError::NotEnoughReplicas,
        _ if version >= ABORTABLE_VERSION => ResponseError::TransactionAbortable,
        _ => ResponseError::InvalidTxnState,
    };
    let verdicts: Vec<_> = match remote::verify(txns, verify).await {
        Ok(answers) => answers.into_iter().map(|v| v.map_err(as_produce)).collect(),
        Err(_) => vec![Err(ResponseError::NotEnoughReplicas); partitions.len()],
    };
    partitions.into_iter().zip(verdicts).collect()
}

fn partition_response(index: i32, o: ProduceOutcome, version: i16) -> PartitionProduceResponse {
    let mut r = PartitionProduceResponse::default()
        .with_index(index)
        .with_error_code(o.error_code)
        .with_base_offset(o.base_offset)
        .with_log_append_time_ms(o.log_append_time_ms);
    if version >= 5 {
        r = r.with_log_start_offset(o.log_start_offset);
    }
    match o.rejected {
        Some(rejected) if version >= 8 => {
            let errors = rejected.record_errors.into_iter().map(|e| {
                BatchIndexAndErrorMessage::default()
                    .with_batch_index(e.batch_index)
                    .with_batch_index_error_message(Some(super::str_bytes(&e.message)))
            });
            r.with_record_errors(errors.collect())
                .with_error_message(rejected.message.as_deref().map(super::str_bytes))
        }
        _ => r,
    }
}

/// The response body: per request topic and partition, its outcome or the error found before
/// routing.
fn respond(
    req: &ProduceRequest,
    slots: Slots,
    outcomes: &[ProduceOutcome],
    version: i16,
) -> anyhow::Result<Vec<crate::protocol::chunk::Chunk>> {
    let responses = req
        .topics
        .iter()
        .zip(slots)
        .map(|(topic, row)| {
            let partitions = row
                .into_iter()
                .map(|(index, slot)| {
                    let o = slot.map_or_else(ProduceOutcome::failed, |i| outcomes[i].clone());
                    partition_response(index, o, version)
                })
                .collect();
            TopicProduceResponse::default()
                .with_name(TopicName(super::str_bytes(&topic.name)))
                .with_topic_id(Uuid::from_bytes(topic.topic_id.unwrap_or_default()))
                .with_partition_responses(partitions)
        })
        .collect();
    super::encode_body(
        &ProduceResponse::default().with_responses(responses),
        version,
    )
}
