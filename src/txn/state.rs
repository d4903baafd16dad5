//! The transaction coordinator's state machine (KIP-98), without I/O: requests and the time
//! come in as values; what to persist, which markers to write and what to answer come out.
//!
//! Per transactional id: its producer id and epoch, the transaction timeout, a state, and the
//! partitions of the ongoing transaction. States and their moves (Kafka's
//! `TransactionState`):
//! - Empty → Ongoing (AddPartitionsToTxn / AddOffsetsToTxn) → PrepareCommit or PrepareAbort
//!   (EndTxn, or PrepareAbort on a timeout or a fencing InitProducerId) → CompleteCommit or
//!   CompleteAbort (once every partition has its marker) → Ongoing again, or Empty (a new
//!   InitProducerId), and Dead once the id expires.
//! - Every move is first persisted (a `TxnRecord` in `__transaction_state`) and only then
//!   applied (`complete`), so that what a client was told survives a crash. While a move is
//!   being persisted, or markers are being written, other requests for the id answer
//!   CONCURRENT_TRANSACTIONS, which clients retry.
//!
//! Epochs fence zombies: InitProducerId bumps the epoch (a new producer id once it would
//! overflow), so requests from an older instance answer PRODUCER_FENCED. A transaction that
//! outlives its timeout is aborted with a bumped epoch, so its producer is fenced too.
//!
//! Transaction version 2 (KIP-890 part 2, EndTxn v5) bumps the epoch at every EndTxn: the
//! Prepare state and the markers carry the bumped epoch, and the producer writes its next
//! transaction under it, so a late write of the transaction before is fenced at the
//! partitions. Once the epoch is used up, the Prepare state names the next producer id
//! (`next_producer_id`) and the completion moves to it at epoch 0, remembering the old one
//! (`previous_producer_id`) so that a retried EndTxn is still recognised.

use kafka_protocol::ResponseError;
use std::collections::{BTreeMap, BTreeSet};

/// Kafka's transaction.max.timeout.ms: the longest transaction timeout a producer may ask for.
pub const MAX_TIMEOUT_MS: i32 = 900_000;

/// The last epoch a producer is given: a bump past it moves to a new producer id (i16::MAX
/// itself only marks an overflowing end's markers).
const LAST_EPOCH: i16 = i16::MAX - 1;

/// A transaction's state, with Kafka's codes in `__transaction_state`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum State {
    Empty,
    Ongoing,
    PrepareCommit,
    PrepareAbort,
    CompleteCommit,
    CompleteAbort,
    Dead,
}

impl State {
    pub fn code(self) -> i8 {
        match self {
            State::Empty => 0,
            State::Ongoing => 1,
            State::PrepareCommit => 2,
            State::PrepareAbort => 3,
            State::CompleteCommit => 4,
            State::CompleteAbort => 5,
            State::Dead => 6,
        }
    }

    const ALL: [State; 7] = [
        State::Empty,
        State::Ongoing,
        State::PrepareCommit,
        State::PrepareAbort,
        State::CompleteCommit,
        State::CompleteAbort,
        State::Dead,
    ];

    pub fn from_code(code: i8) -> Option<State> {
        State::ALL.into_iter().find(|s| s.code() == code)
    }

    /// Kafka's names, as DescribeTransactions and ListTransactions give them.
    pub fn name(self) -> &'static str {
        match self {
            State::Empty => "Empty",
            State::Ongoing => "Ongoing",
            State::PrepareCommit => "PrepareCommit",
            State::PrepareAbort => "PrepareAbort",
            State::CompleteCommit => "CompleteCommit",
            State::CompleteAbort => "CompleteAbort",
            State::Dead => "Dead",
        }
    }

    /// The state Kafka calls `name` (ListTransactions' state filters), if any.
    pub fn from_name(name: &str) -> Option<State> {
        State::ALL.into_iter().find(|s| s.name() == name)
    }

    fn preparing(self) -> bool {
        matches!(self, State::PrepareCommit | State::PrepareAbort)
    }
}

/// A partition of a transaction: (topic, partition).
pub type TxnPartition = (String, i32);

/// One transactional id's metadata, as persisted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TxnRecord {
    pub producer_id: i64,
    pub producer_epoch: i16,
    pub timeout_ms: i32,
    pub state: State,
    pub partitions: BTreeSet<TxnPartition>,
    /// Wall times (ms): the last change, and when the ongoing transaction began (-1: none).
    pub last_update_ms: i64,
    pub start_ms: i64,
    /// The producer id before an epoch overflow moved a version-2 producer to a new one
    /// (-1: none), and the one it moves to once the prepared transaction completes (-1: none).
    pub previous_producer_id: i64,
    pub next_producer_id: i64,
}

impl TxnRecord {
    /// Whether the next bump of this producer's epoch needs a new producer id.
    pub fn epoch_exhausted(&self) -> bool {
        self.producer_epoch >= LAST_EPOCH
    }
}

/// ListTransactions' filters: an empty list, or a negative duration, lets everything through.
#[derive(Debug, Clone, Default)]
pub struct ListFilter {
    pub states: Vec<State>,
    pub producer_ids: Vec<i64>,
    /// Only transactions that began longer ago than this (ms); < 0: no filter.
    pub min_duration_ms: i64,
}

impl ListFilter {
    fn matches(&self, r: &TxnRecord, now_ms: i64) -> bool {
        let state = self.states.is_empty() || self.states.contains(&r.state);
        let producer = self.producer_ids.is_empty() || self.producer_ids.contains(&r.producer_id);
        // An id with no transaction begun (start -1) has run for no time at all.
        let duration = self.min_duration_ms < 0
            || (r.start_ms >= 0 && now_ms - r.start_ms > self.min_duration_ms);
        state && producer && duration
    }
}

/// What the shell must do for a request it was told to carry out.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Step {
    /// Persist `record` for the id, then call `complete`, then answer (or, for a fencing
    /// InitProducerId, answer CONCURRENT_TRANSACTIONS so that the client retries).
    Persist(TxnRecord),
    /// Nothing to persist: answer now.
    Done,
}

/// Markers the shell must write once a Prepare state is persisted: to each partition, for
/// the producer id and epoch, commit or abort.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Markers {
    pub transactional_id: String,
    pub producer_id: i64,
    pub producer_epoch: i16,
    pub commit: bool,
    pub partitions: BTreeSet<TxnPartition>,
}

/// An EndTxn v5+'s epoch: the one before the bump of the end just done (a retry of it), or
/// the current one.
struct EndAt {
    retry: bool,
    current: bool,
}

#[derive(Debug, Clone)]
struct Txn {
    record: TxnRecord,
    /// A move persisted but not yet applied.
    pending: Option<TxnRecord>,
}

/// The coordinator's transactions (of the `__transaction_state` partitions it leads).
#[derive(Debug)]
pub struct Coordinator {
    txns: BTreeMap<String, Txn>,
    /// The longest transaction timeout a producer may ask for.
    max_timeout_ms: i32,
}

impl Default for Coordinator {
    fn default() -> Self {
        Coordinator::new(MAX_TIMEOUT_MS)
    }
}

fn fail<T>(e: ResponseError) -> Result<T, ResponseError> {
    Err(e)
}

/// Whether `r` is an end past the last epoch whose markers are being written, and
/// `producer_id` the id it moves to: the producer, told of it, waits for the move rather than
/// being taken for a stranger.
fn moving_to(r: &TxnRecord, producer_id: i64) -> bool {
    r.state.preparing() && r.next_producer_id >= 0 && r.next_producer_id == producer_id
}

impl Coordinator {
    pub fn new(max_timeout_ms: i32) -> Coordinator {
        Coordinator {
            txns: BTreeMap::new(),
            max_timeout_ms,
        }
    }

    pub fn get(&self, id: &str) -> Option<&TxnRecord> {
        self.txns.get(id).map(|t| &t.record)
    }

    /// Every id, with its record.
    pub fn iter(&self) -> impl Iterator<Item = (&String, &TxnRecord)> {
        self.txns.iter().map(|(id, t)| (id, &t.record))
    }

    /// The ids ListTransactions (KIP-664) answers for `filter` at `now_ms`: (id, producer id,
    /// state). An id still being created (its first record not yet durable) is not listed.
    pub fn list(&self, filter: &ListFilter, now_ms: i64) -> Vec<(String, i64, State)> {
        self.iter()
            .filter(|(_, r)| r.producer_id >= 0 && filter.matches(r, now_ms))
            .map(|(id, r)| (id.clone(), r.producer_id, r.state))
            .collect()
    }

    /// A record read back from `__transaction_state` (the latest per id wins; Dead removes).
    pub fn restore(&mut self, id: &str, record: TxnRecord) {
        if record.state == State::Dead {
            self.txns.remove(id);
        } else {
            let txn = Txn {
                record,
                pending: None,
            };
            self.txns.insert(id.to_string(), txn);
        }
    }

    /// Forgets the ids `which` names: their partition is no longer led here.
    pub fn unload(&mut self, which: impl Fn(&str) -> bool) {
        self.txns.retain(|id, _| !which(id));
    }

    /// The move persisted for `id` is durable: apply it.
    pub fn complete(&mut self, id: &str, record: &TxnRecord) {
        let Some(t) = self.txns.get_mut(id) else {
            return;
        };
        if t.pending.as_ref() == Some(record) {
            // An id's epoch never goes back while it keeps its producer id (fencing relies
            // on it; a new producer id starts again).
            assert!(
                t.record.producer_id != record.producer_id
                    || t.record.producer_epoch <= record.producer_epoch,
                "transaction {id}: epoch {} after {}",
                record.producer_epoch,
                t.record.producer_epoch
            );
            t.pending = None;
            t.record = record.clone();
            if record.state == State::Dead {
                self.txns.remove(id);
            }
        }
    }

    /// The move for `id` could not be persisted: the id stays as it was.
    pub fn abandon(&mut self, id: &str, record: &TxnRecord) {
        if let Some(t) = self.txns.get_mut(id) {
            if t.pending.as_ref() == Some(record) {
                t.pending = None;
            }
        }
        if self.txns.get(id).is_some_and(|t| t.record.producer_id < 0) {
            self.txns.remove(id);
        }
    }

    fn begin(&mut self, id: &str, record: TxnRecord) -> Step {
        let t = self.txns.entry(id.to_string()).or_insert_with(|| Txn {
            record: TxnRecord {
                producer_id: -1,
                ..record.clone()
            },
            pending: None,
        });
        // One move at a time: while one is being persisted, requests for the id answer
        // CONCURRENT_TRANSACTIONS (each caller checks), so none begins another.
        assert!(
            t.pending.is_none(),
            "transaction {id}: a move begun while another is persisted"
        );
        t.pending = Some(record.clone());
        Step::Persist(record)
    }

    /// InitProducerId for `id`: `new_producer_id` is a fresh id the shell allocated, used for a
    /// new transactional id or when the epoch would overflow. Ok((step, fenced)): `fenced`
    /// means an ongoing transaction is being aborted first (answer CONCURRENT_TRANSACTIONS
    /// once persisted; the client retries).
    pub fn init_producer_id(
        &mut self,
        id: &str,
        timeout_ms: i32,
        new_producer_id: i64,
        now_ms: i64,
    ) -> Result<(Step, bool), ResponseError> {
        if timeout_ms <= 0 || timeout_ms > self.max_timeout_ms {
            return fail(ResponseError::InvalidTransactionTimeout);
        }
        let fresh = TxnRecord {
            producer_id: new_producer_id,
            producer_epoch: 0,
            timeout_ms,
            state: State::Empty,
            partitions: BTreeSet::new(),
            last_update_ms: now_ms,
            start_ms: -1,
            previous_producer_id: -1,
            next_producer_id: -1,
        };
        let Some(t) = self.txns.get(id) else {
            return Ok((self.begin(id, fresh), false));
        };
        if t.pending.is_some() || t.record.state.preparing() {
            return fail(ResponseError::ConcurrentTransactions);
        }
        let r = &t.record;
        let bumped = if r.epoch_exhausted() {
            fresh
        } else {
            TxnRecord {
                producer_epoch: r.producer_epoch + 1,
                timeout_ms,
                last_update_ms: now_ms,
                ..r.clone()
            }
        };
        if r.state == State::Ongoing {
            let abort = TxnRecord {
                state: State::PrepareAbort,
                timeout_ms: r.timeout_ms,
                ..bumped
            };
            return Ok((self.begin(id, abort), true));
        }
        let empty = TxnRecord {
            state: State::Empty,
            partitions: BTreeSet::new(),
            start_ms: -1,
            ..bumped
        };
        Ok((self.begin(id, empty), false))
    }

    /// KIP-360: an InitProducerId (v3+) that names the producer id and epoch its producer has.
    /// Ok(false): go on and bump the epoch, as for any InitProducerId. Ok(true): a retry of
    /// the bump that produced the current epoch (its answer was lost), answered with the
    /// current epoch and nothing persisted. PRODUCER_FENCED: an older instance, or one whose
    /// transaction was aborted on its timeout (which bumped the epoch past it).
    pub fn is_init_retry(
        &self,
        id: &str,
        producer_id: i64,
        epoch: i16,
    ) -> Result<bool, ResponseError> {
        let Some(t) = self.txns.get(id).filter(|t| t.record.producer_id >= 0) else {
            return Ok(false); // an id not known here: it gets a producer id as a new one
        };
        let r = &t.record;
        if r.producer_id != producer_id {
            return fail(ResponseError::ProducerFenced);
        }
        if epoch == r.producer_epoch {
            return Ok(false);
        }
        // Only an InitProducerId leaves a bumped epoch in Empty: a timeout's or a fencing
        // instance's abort leaves CompleteAbort.
        let bumped_by_init = r.state == State::Empty && t.pending.is_none();
        if bumped_by_init && epoch.checked_add(1) == Some(r.producer_epoch) {
            return Ok(true);
        }
        fail(ResponseError::ProducerFenced)
    }

    /// The checks every request of an ongoing producer passes: its id maps to this producer,
    /// its epoch is current, and no move is in flight.
    fn check(&self, id: &str, producer_id: i64, epoch: i16) -> Result<&TxnRecord, ResponseError> {
        let Some(t) = self.txns.get(id) else {
            return fail(ResponseError::InvalidProducerIdMapping);
        };
        let r = &t.record;
        if moving_to(r, producer_id) {
            return fail(ResponseError::ConcurrentTransactions);
        }
        if r.producer_id != producer_id {
            return fail(ResponseError::InvalidProducerIdMapping);
        }
        if epoch != r.producer_epoch {
            return fail(ResponseError::ProducerFenced);
        }
        if t.pending.is_some() || r.state.preparing() {
            return fail(ResponseError::ConcurrentTransactions);
        }
        Ok(r)
    }

    /// AddPartitionsToTxn (and AddOffsetsToTxn, with the group's offsets partition).
    pub fn add_partitions(
        &mut self,
        id: &str,
        producer_id: i64,
        epoch: i16,
        partitions: &[TxnPartition],
        now_ms: i64,
    ) -> Result<Step, ResponseError> {
        let r = self.check(id, producer_id, epoch)?;
        if r.state == State::Dead {
            return fail(ResponseError::InvalidTxnState);
        }
        let ongoing = r.state == State::Ongoing;
        if ongoing && partitions.iter().all(|p| r.partitions.contains(p)) {
            return Ok(Step::Done);
        }
        let mut next = r.clone();
        if !ongoing {
            next.partitions.clear();
            next.start_ms = now_ms;
        }
        next.state = State::Ongoing;
        next.partitions.extend(partitions.iter().cloned());
        next.last_update_ms = now_ms;
        Ok(self.begin(id, next))
    }

    /// Whether `id`'s ongoing transaction of (`producer_id`, `epoch`) holds `partition`: the
    /// check a partition leader makes before it takes a transactional write (KIP-890).
    ///
    /// Refused: the id maps to another producer (INVALID_PRODUCER_ID_MAPPING), the epoch is old
    /// (PRODUCER_FENCED), or the partition is not in an ongoing transaction
    /// (INVALID_TXN_STATE).
    pub fn in_transaction(
        &self,
        id: &str,
        producer_id: i64,
        epoch: i16,
        partition: &TxnPartition,
    ) -> Result<(), ResponseError> {
        let Some(t) = self.txns.get(id) else {
            return fail(ResponseError::InvalidProducerIdMapping);
        };
        let r = &t.record;
        if r.producer_id != producer_id {
            return fail(ResponseError::InvalidProducerIdMapping);
        }
        if r.producer_epoch != epoch {
            return fail(ResponseError::ProducerFenced);
        }
        if r.state != State::Ongoing || !r.partitions.contains(partition) {
            return fail(ResponseError::InvalidTxnState);
        }
        Ok(())
    }

    /// EndTxn: Ok(Some(step)) prepares the commit or abort (markers follow once persisted);
    /// Ok(None) is a retry of an end already complete.
    pub fn end_txn(
        &mut self,
        id: &str,
        producer_id: i64,
        epoch: i16,
        commit: bool,
        now_ms: i64,
    ) -> Result<Option<Step>, ResponseError> {
        // An end retried while its markers are written is CONCURRENT_TRANSACTIONS: the
        // client retries until they are.
        let state = self.check(id, producer_id, epoch)?.state;
        match (state, commit) {
            (State::Ongoing, _) => {}
            (State::CompleteCommit, true) | (State::CompleteAbort, false) => return Ok(None),
            _ => return fail(ResponseError::InvalidTxnState),
        }
        let r = &self.txns[id].record;
        let next = TxnRecord {
            state: if commit {
                State::PrepareCommit
            } else {
                State::PrepareAbort
            },
            last_update_ms: now_ms,
            ..r.clone()
        };
        Ok(Some(self.begin(id, next)))
    }

    /// Who an EndTxn v5+ of (`producer_id`, `epoch`) comes from, with Kafka's checks in their
    /// order: an unknown producer (INVALID_PRODUCER_ID_MAPPING), an epoch that is neither the
    /// current one nor, after an end, the one before the bump (PRODUCER_FENCED), a move in
    /// flight (CONCURRENT_TRANSACTIONS).
    fn end_at(&self, id: &str, producer_id: i64, epoch: i16) -> Result<EndAt, ResponseError> {
        let Some(t) = self.txns.get(id) else {
            return fail(ResponseError::InvalidProducerIdMapping);
        };
        let r = &t.record;
        if moving_to(r, producer_id) {
            return fail(ResponseError::ConcurrentTransactions);
        }
        let same = r.producer_id == producer_id;
        let retry_on_bump = same && epoch.checked_add(1) == Some(r.producer_epoch);
        let retry_on_overflow =
            r.previous_producer_id == producer_id && epoch == LAST_EPOCH && r.producer_epoch == 0;
        if !same && !retry_on_overflow {
            return fail(ResponseError::InvalidProducerIdMapping);
        }
        let at = EndAt {
            retry: retry_on_bump || retry_on_overflow,
            current: same && epoch == r.producer_epoch,
        };
        let valid = match r.state {
            State::Empty | State::Ongoing | State::Dead => at.current,
            _ => at.retry || at.current,
        };
        if !valid {
            return fail(ResponseError::ProducerFenced);
        }
        if t.pending.is_some() {
            return fail(ResponseError::ConcurrentTransactions);
        }
        Ok(at)
    }

    /// EndTxn v5+ (transaction version 2, KIP-890 part 2): the epoch is bumped with the
    /// Prepare state, so Ok(Some(step)) persists the bumped epoch (and, once the epoch is used
    /// up, the next producer id: `next_producer_id`, allocated by the shell, -1 otherwise).
    /// Ok(None) is a retry, at the epoch before the bump, of an end already complete. An
    /// abort with no transaction ongoing (the producer cannot know whether its first write
    /// added a partition) is a transaction of no partitions, bumped as any other (Kafka's
    /// table in TransactionCoordinator.endTransaction).
    pub fn end_txn_bumping(
        &mut self,
        id: &str,
        producer_id: i64,
        epoch: i16,
        commit: bool,
        next_producer_id: i64,
        now_ms: i64,
    ) -> Result<Option<Step>, ResponseError> {
        let EndAt { retry, current } = self.end_at(id, producer_id, epoch)?;
        let r = &self.txns[id].record;
        match (r.state, commit) {
            (State::Ongoing, _) => {}
            // The producer's next end while the markers of the one before are written: it
            // waits for them (Kafka answers PRODUCER_FENCED here, which would be fatal to a
            // producer that did nothing wrong).
            (State::PrepareCommit | State::PrepareAbort, _) if current => {
                return fail(ResponseError::ConcurrentTransactions)
            }
            (State::CompleteCommit, true) | (State::CompleteAbort, false) if retry => {
                return Ok(None)
            }
            (State::Empty | State::CompleteCommit | State::CompleteAbort, false) if !retry => {}
            (State::PrepareCommit, true) | (State::PrepareAbort, false) => {
                return fail(ResponseError::ConcurrentTransactions)
            }
            _ => return fail(ResponseError::InvalidTxnState),
        }
        let exhausted = r.epoch_exhausted();
        assert!(
            !exhausted || next_producer_id >= 0,
            "the shell allocates the next producer id once the epoch is used up"
        );
        let ongoing = r.state == State::Ongoing;
        let next = TxnRecord {
            // Below i16::MAX: only a Prepare state holds i16::MAX, and it returned above.
            producer_epoch: r.producer_epoch + 1,
            next_producer_id: if exhausted { next_producer_id } else { -1 },
            state: if commit {
                State::PrepareCommit
            } else {
                State::PrepareAbort
            },
            partitions: if ongoing {
                r.partitions.clone()
            } else {
                BTreeSet::new()
            },
            start_ms: if ongoing { r.start_ms } else { now_ms },
            last_update_ms: now_ms,
            ..r.clone()
        };
        Ok(Some(self.begin(id, next)))
    }

    /// Whether an EndTxn v5+ for `id` needs a new producer id allocated first: its epoch is
    /// used up, so the bump moves the producer to a new id.
    pub fn epoch_exhausted(&self, id: &str) -> bool {
        self.get(id).is_some_and(TxnRecord::epoch_exhausted)
    }

    /// The producer id and epoch an EndTxn v5+ answers: those the producer writes its next
    /// transaction under (the next producer id at epoch 0 while an overflowing end completes).
    pub fn producer_for_client(&self, id: &str) -> Option<(i64, i16)> {
        let r = self.get(id)?;
        if r.state.preparing() && r.next_producer_id >= 0 {
            return Some((r.next_producer_id, 0));
        }
        Some((r.producer_id, r.producer_epoch))
    }

    /// The markers a persisted Prepare state of `id` calls for (also after a restart).
    pub fn markers(&self, id: &str) -> Option<Markers> {
        let r = &self.txns.get(id)?.record;
        r.state.preparing().then(|| Markers {
            transactional_id: id.to_string(),
            producer_id: r.producer_id,
            producer_epoch: r.producer_epoch,
            commit: r.state == State::PrepareCommit,
            partitions: r.partitions.clone(),
        })
    }

    /// Whether a failed write of the completion of `markers`' transaction is tried again: for
    /// as long as this coordinator holds the transaction prepared with those markers (Kafka
    /// retries until the write succeeds or the coordinator loses its epoch). A completion given
    /// up on leaves the id answering CONCURRENT_TRANSACTIONS until its coordinator moves.
    pub fn retries_completion(&self, markers: &Markers) -> bool {
        !crate::inject::active(crate::inject::Bug::CompletionNotRetried)
            && self.markers(&markers.transactional_id).as_ref() == Some(markers)
    }

    /// Every marker of `markers` is written: the transaction completes.
    pub fn markers_written(&mut self, markers: &Markers, now_ms: i64) -> Option<Step> {
        let t = self.txns.get(&markers.transactional_id)?;
        let r = &t.record;
        let same = r.producer_id == markers.producer_id
            && r.producer_epoch == markers.producer_epoch
            && r.state.preparing();
        if !same || t.pending.is_some() {
            return None;
        }
        let complete = TxnRecord {
            state: if markers.commit {
                State::CompleteCommit
            } else {
                State::CompleteAbort
            },
            partitions: BTreeSet::new(),
            last_update_ms: now_ms,
            ..r.clone()
        };
        // A version-2 end whose epoch overflowed moves the producer to its next id.
        let next = if r.next_producer_id >= 0 {
            TxnRecord {
                producer_id: r.next_producer_id,
                producer_epoch: 0,
                previous_producer_id: r.producer_id,
                next_producer_id: -1,
                ..complete
            }
        } else {
            complete
        };
        Some(self.begin(&markers.transactional_id, next))
    }

    /// Transactions ongoing for longer than their timeout at `now_ms`: each is aborted with
    /// its epoch bumped, fencing its producer (Kafka's abortTimedOutTransactions). Bumped
    /// twice where the epochs allow, as Kafka's fence and then its version-2 abort do: an
    /// EndTxn v5 at the producer's epoch must read as fenced, not as a retry of an end (which
    /// a single bump would make it look like).
    pub fn expire_timed_out(&mut self, now_ms: i64) -> Vec<(String, Step)> {
        let due: Vec<String> = self
            .txns
            .iter()
            .filter(|(_, t)| {
                t.pending.is_none()
                    && t.record.state == State::Ongoing
                    && now_ms - t.record.start_ms > t.record.timeout_ms as i64
            })
            .map(|(id, _)| id.clone())
            .collect();
        let mut out = Vec::with_capacity(due.len());
        for id in due {
            let r = &self.txns[&id].record;
            let bumped = |n| r.producer_epoch.checked_add(n).filter(|e| *e < i16::MAX);
            let Some(epoch) = bumped(2).or_else(|| bumped(1)) else {
                continue; // no epoch left to fence with; the producer's own end will settle it
            };
            let next = TxnRecord {
                producer_epoch: epoch,
                state: State::PrepareAbort,
                last_update_ms: now_ms,
                ..r.clone()
            };
            let step = self.begin(&id, next);
            out.push((id, step));
        }
        out
    }

    /// Ids idle in a settled state for longer than `expiration_ms` (Kafka's
    /// transactional.id.expiration.ms): each is removed (a Dead record).
    pub fn expire_idle(&mut self, now_ms: i64, expiration_ms: i64) -> Vec<(String, Step)> {
        let settled = |s: State| {
            matches!(
                s,
                State::Empty | State::CompleteCommit | State::CompleteAbort
            )
        };
        let due: Vec<String> = self
            .txns
            .iter()
            .filter(|(_, t)| {
                t.pending.is_none()
                    && settled(t.record.state)
                    && now_ms - t.record.last_update_ms > expiration_ms
            })
            .map(|(id, _)| id.clone())
            .collect();
        due.into_iter()
            .map(|id| {
                let next = TxnRecord {
                    state: State::Dead,
                    last_update_ms: now_ms,
                    ..self.txns[&id].record.clone()
                };
                let step = self.begin(&id, next);
                (id, step)
            })
            .collect()
    }
}

#[cfg(test)]
mod tests;
