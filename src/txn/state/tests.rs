use super::*;

fn p(topic: &str, partition: i32) -> TxnPartition {
    (topic.to_string(), partition)
}

/// Carries out a step as the shell would: persisted at once.
fn persist(c: &mut Coordinator, id: &str, step: Step) {
    if let Step::Persist(r) = step {
        c.complete(id, &r);
    }
}

fn initialised(c: &mut Coordinator, id: &str) -> (i64, i16) {
    let (step, fenced) = c.init_producer_id(id, 60_000, 7, 0).expect("init");
    assert!(!fenced);
    persist(c, id, step);
    let r = c.get(id).expect("known");
    (r.producer_id, r.producer_epoch)
}

#[test]
fn a_transaction_commits_through_prepare_and_markers() {
    let mut c = Coordinator::default();
    let (pid, epoch) = initialised(&mut c, "t");
    assert_eq!((pid, epoch), (7, 0));
    let step = c
        .add_partitions("t", pid, epoch, &[p("a", 0), p("b", 1)], 10)
        .unwrap();
    persist(&mut c, "t", step);
    assert_eq!(c.get("t").unwrap().state, State::Ongoing);
    assert_eq!(c.get("t").unwrap().start_ms, 10);
    // Adding a partition already in the transaction persists nothing.
    assert_eq!(
        c.add_partitions("t", pid, epoch, &[p("a", 0)], 11),
        Ok(Step::Done)
    );
    let step = c
        .end_txn("t", pid, epoch, true, 20)
        .unwrap()
        .expect("prepares");
    // While the Prepare state is being persisted, and while markers are written, others wait.
    assert_eq!(
        c.add_partitions("t", pid, epoch, &[p("c", 0)], 21),
        Err(ResponseError::ConcurrentTransactions)
    );
    persist(&mut c, "t", step);
    let markers = c.markers("t").expect("markers due");
    assert!(markers.commit);
    assert_eq!(markers.partitions.len(), 2);
    assert_eq!(
        c.end_txn("t", pid, epoch, true, 22),
        Err(ResponseError::ConcurrentTransactions),
        "a retried EndTxn waits for the markers"
    );
    let step = c.markers_written(&markers, 30).expect("completes");
    persist(&mut c, "t", step);
    let r = c.get("t").unwrap();
    assert_eq!((r.state, r.partitions.len()), (State::CompleteCommit, 0));
    assert_eq!(
        c.end_txn("t", pid, epoch, true, 31),
        Ok(None),
        "a retry of a done commit"
    );
    assert_eq!(
        c.end_txn("t", pid, epoch, false, 31),
        Err(ResponseError::InvalidTxnState)
    );
    // The next transaction starts afresh.
    let step = c.add_partitions("t", pid, epoch, &[p("c", 0)], 40).unwrap();
    persist(&mut c, "t", step);
    assert_eq!(c.get("t").unwrap().partitions.len(), 1);
}

#[test]
fn requests_are_checked_against_the_id_producer_and_epoch() {
    let mut c = Coordinator::default();
    let (pid, epoch) = initialised(&mut c, "t");
    let add =
        |c: &mut Coordinator, id, pid, epoch| c.add_partitions(id, pid, epoch, &[p("a", 0)], 1);
    assert_eq!(
        add(&mut c, "nope", pid, epoch),
        Err(ResponseError::InvalidProducerIdMapping)
    );
    assert_eq!(
        add(&mut c, "t", pid + 1, epoch),
        Err(ResponseError::InvalidProducerIdMapping)
    );
    assert_eq!(
        add(&mut c, "t", pid, epoch + 1),
        Err(ResponseError::ProducerFenced)
    );
    assert_eq!(
        c.end_txn("t", pid, epoch, true, 1),
        Err(ResponseError::InvalidTxnState),
        "nothing to end"
    );
    assert_eq!(
        c.init_producer_id("t", MAX_TIMEOUT_MS + 1, 8, 1),
        Err(ResponseError::InvalidTransactionTimeout)
    );
}

#[test]
fn a_second_producer_fences_the_first_and_aborts_its_transaction() {
    let mut c = Coordinator::default();
    let (pid, epoch) = initialised(&mut c, "t");
    let step = c.add_partitions("t", pid, epoch, &[p("a", 0)], 10).unwrap();
    persist(&mut c, "t", step);
    // The new instance: the ongoing transaction is aborted under a bumped epoch first.
    let (step, fenced) = c.init_producer_id("t", 60_000, 99, 20).unwrap();
    assert!(fenced);
    persist(&mut c, "t", step);
    let markers = c.markers("t").expect("abort markers");
    assert!(!markers.commit);
    assert_eq!(markers.producer_epoch, epoch + 1);
    assert_eq!(
        c.init_producer_id("t", 60_000, 99, 21),
        Err(ResponseError::ConcurrentTransactions),
        "the new instance retries until the abort is done"
    );
    let step = c.markers_written(&markers, 22).unwrap();
    persist(&mut c, "t", step);
    let (step, fenced) = c.init_producer_id("t", 60_000, 99, 23).unwrap();
    assert!(!fenced);
    persist(&mut c, "t", step);
    let r = c.get("t").unwrap();
    assert_eq!(
        (r.producer_id, r.producer_epoch, r.state),
        (pid, epoch + 2, State::Empty)
    );
    // The old instance is fenced.
    assert_eq!(
        c.end_txn("t", pid, epoch, true, 24),
        Err(ResponseError::ProducerFenced)
    );
}

#[test]
fn an_exhausted_epoch_moves_to_a_new_producer_id() {
    let mut c = Coordinator::default();
    initialised(&mut c, "t");
    let mut r = c.get("t").unwrap().clone();
    r.producer_epoch = i16::MAX - 1;
    c.restore("t", r);
    let (step, _) = c.init_producer_id("t", 60_000, 42, 5).unwrap();
    persist(&mut c, "t", step);
    let r = c.get("t").unwrap();
    assert_eq!((r.producer_id, r.producer_epoch), (42, 0));
}

#[test]
fn a_transaction_past_its_timeout_is_aborted_and_its_producer_fenced() {
    let mut c = Coordinator::default();
    let (pid, epoch) = initialised(&mut c, "t");
    let step = c
        .add_partitions("t", pid, epoch, &[p("a", 0)], 1_000)
        .unwrap();
    persist(&mut c, "t", step);
    assert!(c.expire_timed_out(61_000).is_empty(), "not past 60 s yet");
    let due = c.expire_timed_out(61_001);
    assert_eq!(due.len(), 1);
    let (id, step) = due.into_iter().next().unwrap();
    persist(&mut c, &id, step);
    let markers = c.markers("t").unwrap();
    assert!(!markers.commit);
    let step = c.markers_written(&markers, 61_002).unwrap();
    persist(&mut c, "t", step);
    assert_eq!(
        c.end_txn("t", pid, epoch, true, 61_003),
        Err(ResponseError::ProducerFenced)
    );
    // A version-2 producer too: its abort is no retry of an end of its own.
    for commit in [true, false] {
        assert_eq!(
            c.end_txn_bumping("t", pid, epoch, commit, -1, 61_004),
            Err(ResponseError::ProducerFenced)
        );
    }
}

#[test]
fn idle_ids_expire_and_a_failed_persist_changes_nothing() {
    let mut c = Coordinator::default();
    initialised(&mut c, "t");
    assert!(c.expire_idle(100, 1_000).is_empty());
    let due = c.expire_idle(2_000, 1_000);
    assert_eq!(due.len(), 1);
    let (id, step) = due.into_iter().next().unwrap();
    persist(&mut c, &id, step);
    assert!(c.get("t").is_none());
    // A new id whose first record could not be persisted is forgotten.
    let (step, _) = c.init_producer_id("u", 60_000, 3, 0).unwrap();
    let Step::Persist(r) = step else {
        panic!("a new id persists")
    };
    c.abandon("u", &r);
    assert!(c.get("u").is_none());
}

#[test]
fn verification_holds_only_partitions_of_the_ongoing_transaction() {
    let mut c = Coordinator::default();
    let (pid, epoch) = initialised(&mut c, "t");
    let txn_state = Err(ResponseError::InvalidTxnState);
    assert_eq!(c.in_transaction("t", pid, epoch, &p("a", 0)), txn_state);
    let step = c.add_partitions("t", pid, epoch, &[p("a", 0)], 1).unwrap();
    persist(&mut c, "t", step);
    assert_eq!(c.in_transaction("t", pid, epoch, &p("a", 0)), Ok(()));
    assert_eq!(c.in_transaction("t", pid, epoch, &p("a", 1)), txn_state);
    let fenced = Err(ResponseError::ProducerFenced);
    assert_eq!(c.in_transaction("t", pid, epoch + 1, &p("a", 0)), fenced);
    let mapping = Err(ResponseError::InvalidProducerIdMapping);
    assert_eq!(c.in_transaction("t", pid + 1, epoch, &p("a", 0)), mapping);
    assert_eq!(c.in_transaction("unknown", pid, epoch, &p("a", 0)), mapping);
}

#[test]
fn listing_filters_by_state_producer_and_how_long_a_transaction_has_run() {
    let mut c = Coordinator::default();
    for (id, pid) in [("a", 1), ("b", 2), ("c", 3)] {
        let (step, _) = c.init_producer_id(id, 60_000, pid, 0).expect("init");
        persist(&mut c, id, step);
    }
    for (id, pid, at_ms) in [("a", 1, 100), ("b", 2, 900)] {
        let step = c.add_partitions(id, pid, 0, &[p("t", 0)], at_ms).unwrap();
        persist(&mut c, id, step);
    }
    let ids_of = |c: &Coordinator, f: ListFilter| -> Vec<String> {
        c.list(&f, 1_000).into_iter().map(|(id, _, _)| id).collect()
    };
    let ids = |f: ListFilter| ids_of(&c, f);
    let all = ListFilter {
        min_duration_ms: -1,
        ..ListFilter::default()
    };
    assert_eq!(ids(all.clone()), ["a", "b", "c"]);
    let ongoing = ListFilter {
        states: vec![State::Ongoing],
        ..all.clone()
    };
    assert_eq!(ids(ongoing), ["a", "b"]);
    let of_producer = ListFilter {
        producer_ids: vec![3, 9],
        ..all.clone()
    };
    assert_eq!(ids(of_producer), ["c"]);
    // Began 900 ms and 100 ms before; "c" has no transaction at all.
    let long_running = ListFilter {
        min_duration_ms: 500,
        ..all.clone()
    };
    assert_eq!(ids(long_running), ["a"]);
    assert_eq!(c.list(&all, 1_000)[0], ("a".to_string(), 1, State::Ongoing));
    // An id whose first record is not yet durable is not listed.
    let (_pending, _) = c.init_producer_id("d", 60_000, 4, 0).expect("init");
    assert_eq!(ids_of(&c, all), ["a", "b", "c"]);
    assert_eq!(
        State::from_name("PrepareCommit"),
        Some(State::PrepareCommit)
    );
    assert_eq!(State::from_name("prepareCommit"), None);
}

#[test]
fn an_init_naming_its_producer_must_hold_the_current_epoch_or_retry_the_last_bump() {
    let mut c = Coordinator::default();
    assert_eq!(
        c.is_init_retry("new", 5, 0),
        Ok(false),
        "unknown ids start afresh"
    );
    let (pid, epoch) = initialised(&mut c, "t");
    assert_eq!(
        c.is_init_retry("t", pid, epoch),
        Ok(false),
        "current: bump it"
    );
    let (step, _) = c.init_producer_id("t", 60_000, 99, 1).unwrap();
    persist(&mut c, "t", step);
    // The bump's answer was lost: the retry names the epoch before it and gets the current.
    assert_eq!(c.is_init_retry("t", pid, epoch), Ok(true));
    assert_eq!(
        c.is_init_retry("t", pid + 1, epoch + 1),
        Err(ResponseError::ProducerFenced),
        "another producer id"
    );
    // After a timeout's abort the old epoch is fenced, not a retry.
    let current = epoch + 1;
    let step = c
        .add_partitions("t", pid, current, &[p("a", 0)], 10)
        .unwrap();
    persist(&mut c, "t", step);
    let (id, step) = c.expire_timed_out(70_000).into_iter().next().expect("due");
    persist(&mut c, &id, step);
    let markers = c.markers("t").unwrap();
    let step = c.markers_written(&markers, 70_001).unwrap();
    persist(&mut c, "t", step);
    assert_eq!(
        c.is_init_retry("t", pid, current),
        Err(ResponseError::ProducerFenced)
    );
    assert_eq!(
        c.is_init_retry("t", pid, epoch),
        Err(ResponseError::ProducerFenced)
    );
}

/// An EndTxn v5 (transaction version 2) of `id`'s transaction, carried out with its markers.
fn end_bumping(c: &mut Coordinator, id: &str, producer: (i64, i16), commit: bool) -> Markers {
    let step = c
        .end_txn_bumping(id, producer.0, producer.1, commit, -1, 50)
        .unwrap()
        .expect("prepares");
    persist(c, id, step);
    let markers = c.markers(id).expect("markers due");
    let step = c.markers_written(&markers, 60).expect("completes");
    persist(c, id, step);
    markers
}

#[test]
fn a_version_2_end_bumps_the_epoch_and_recognises_its_retry() {
    let mut c = Coordinator::default();
    let (pid, epoch) = initialised(&mut c, "t");
    let step = c.add_partitions("t", pid, epoch, &[p("a", 0)], 10).unwrap();
    persist(&mut c, "t", step);
    let step = c
        .end_txn_bumping("t", pid, epoch, true, -1, 20)
        .unwrap()
        .expect("prepares");
    persist(&mut c, "t", step);
    assert_eq!(c.producer_for_client("t"), Some((pid, epoch + 1)));
    let markers = c.markers("t").unwrap();
    assert_eq!(
        (markers.producer_epoch, markers.commit),
        (epoch + 1, true),
        "the markers carry the bumped epoch"
    );
    assert_eq!(
        c.end_txn_bumping("t", pid, epoch, true, -1, 21),
        Err(ResponseError::ConcurrentTransactions),
        "a retry while the markers are written waits"
    );
    assert_eq!(
        c.end_txn_bumping("t", pid, epoch + 1, false, -1, 21),
        Err(ResponseError::ConcurrentTransactions),
        "the next end, under the bumped epoch, waits for the markers too"
    );
    assert_eq!(
        c.end_txn_bumping("t", pid, epoch + 2, true, -1, 21),
        Err(ResponseError::ProducerFenced)
    );
    let step = c.markers_written(&markers, 30).unwrap();
    persist(&mut c, "t", step);
    let r = c.get("t").unwrap();
    assert_eq!(
        (r.state, r.producer_epoch),
        (State::CompleteCommit, epoch + 1)
    );
    assert_eq!(
        c.end_txn_bumping("t", pid, epoch, true, -1, 31),
        Ok(None),
        "a retry"
    );
    assert_eq!(
        c.end_txn_bumping("t", pid, epoch, false, -1, 31),
        Err(ResponseError::InvalidTxnState),
        "a retry of the other outcome"
    );
    assert_eq!(
        c.end_txn_bumping("t", pid, epoch + 1, true, -1, 31),
        Err(ResponseError::InvalidTxnState),
        "a commit with nothing ongoing"
    );
    assert_eq!(
        c.add_partitions("t", pid, epoch, &[p("a", 0)], 32),
        Err(ResponseError::ProducerFenced),
        "the transaction before is fenced"
    );
    let step = c
        .add_partitions("t", pid, epoch + 1, &[p("b", 0)], 33)
        .unwrap();
    persist(&mut c, "t", step);
    assert_eq!(c.get("t").unwrap().state, State::Ongoing);
}

#[test]
fn a_version_2_abort_with_nothing_ongoing_bumps_the_epoch() {
    let mut c = Coordinator::default();
    let (pid, epoch) = initialised(&mut c, "t");
    assert_eq!(
        c.end_txn_bumping("t", pid, epoch, true, -1, 1),
        Err(ResponseError::InvalidTxnState),
        "no commit from Empty"
    );
    let markers = end_bumping(&mut c, "t", (pid, epoch), false);
    assert!(markers.partitions.is_empty());
    let r = c.get("t").unwrap();
    assert_eq!(
        (r.state, r.producer_epoch),
        (State::CompleteAbort, epoch + 1)
    );
    assert_eq!(
        c.end_txn_bumping("t", pid, epoch, false, -1, 70),
        Ok(None),
        "a retry"
    );
    // An abort at the current epoch is a new (empty) transaction's: bumped again.
    end_bumping(&mut c, "t", (pid, epoch + 1), false);
    assert_eq!(c.get("t").unwrap().producer_epoch, epoch + 2);
    assert_eq!(
        c.end_txn_bumping("t", pid, epoch, false, -1, 80),
        Err(ResponseError::ProducerFenced),
        "two bumps back is another transaction's producer"
    );
}

#[test]
fn a_version_2_end_past_the_last_epoch_moves_to_the_next_producer_id() {
    let mut c = Coordinator::default();
    let last = i16::MAX - 1;
    let ongoing = TxnRecord {
        producer_id: 7,
        producer_epoch: last,
        timeout_ms: 60_000,
        state: State::Ongoing,
        partitions: [p("a", 0)].into_iter().collect(),
        last_update_ms: 0,
        start_ms: 0,
        previous_producer_id: -1,
        next_producer_id: -1,
    };
    c.restore("t", ongoing);
    assert!(c.epoch_exhausted("t"));
    let step = c
        .end_txn_bumping("t", 7, last, true, 99, 10)
        .unwrap()
        .expect("prepares");
    persist(&mut c, "t", step);
    assert_eq!(
        c.producer_for_client("t"),
        Some((99, 0)),
        "what the client is told"
    );
    assert_eq!(
        c.add_partitions("t", 99, 0, &[p("a", 0)], 11),
        Err(ResponseError::ConcurrentTransactions),
        "the new producer id waits for the move"
    );
    assert_eq!(
        c.end_txn_bumping("t", 99, 0, false, -1, 11),
        Err(ResponseError::ConcurrentTransactions)
    );
    let markers = c.markers("t").unwrap();
    assert_eq!((markers.producer_id, markers.producer_epoch), (7, i16::MAX));
    let step = c.markers_written(&markers, 20).unwrap();
    persist(&mut c, "t", step);
    let r = c.get("t").unwrap();
    assert_eq!(
        (
            r.producer_id,
            r.producer_epoch,
            r.previous_producer_id,
            r.next_producer_id
        ),
        (99, 0, 7, -1)
    );
    assert!(!c.epoch_exhausted("t"));
    assert_eq!(
        c.end_txn_bumping("t", 7, last, true, -1, 21),
        Ok(None),
        "a retry"
    );
    assert_eq!(c.producer_for_client("t"), Some((99, 0)));
    assert_eq!(
        c.add_partitions("t", 7, last, &[p("a", 0)], 22),
        Err(ResponseError::InvalidProducerIdMapping)
    );
    let step = c.add_partitions("t", 99, 0, &[p("a", 0)], 23).unwrap();
    persist(&mut c, "t", step);
    assert_eq!(c.get("t").unwrap().state, State::Ongoing);
}

/// Issue 36: every write of coordinator state that fails is made again. A timed-out
/// transaction's abort and an idle id's tombstone are found again at the next pass (nothing
/// changed); a completion is retried while the transaction is still the one prepared, and no
/// longer once the coordinator lost the id.
#[test]
fn failed_writes_of_coordinator_state_are_made_again() {
    let mut c = Coordinator::default();
    let (pid, epoch) = initialised(&mut c, "t");
    let step = c.add_partitions("t", pid, epoch, &[p("a", 0)], 0).unwrap();
    persist(&mut c, "t", step);
    for pass in 0..2 {
        let due = c.expire_timed_out(61_000 + pass);
        assert_eq!(due.len(), 1, "pass {pass}");
        let (id, Step::Persist(r)) = due.into_iter().next().unwrap() else {
            panic!("an abort persists")
        };
        if pass == 0 {
            c.abandon(&id, &r);
        } else {
            c.complete(&id, &r);
        }
    }
    let markers = c.markers("t").expect("the abort is prepared");
    for attempt in 0..2 {
        let Some(Step::Persist(r)) = c.markers_written(&markers, 62_000) else {
            panic!("the completion persists (attempt {attempt})")
        };
        assert!(c.retries_completion(&markers));
        c.abandon("t", &r);
    }
    c.unload(|_| true);
    assert!(
        !c.retries_completion(&markers),
        "the coordinator lost the id"
    );
    let mut c = Coordinator::default();
    initialised(&mut c, "idle");
    for pass in 0..2 {
        let due = c.expire_idle(10_000, 1_000);
        assert_eq!(due.len(), 1, "pass {pass}");
        let (id, Step::Persist(r)) = due.into_iter().next().unwrap() else {
            panic!("a tombstone persists")
        };
        c.abandon(&id, &r);
    }
}
