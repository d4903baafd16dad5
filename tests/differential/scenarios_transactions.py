"""InitProducerId, AddPartitionsToTxn, AddOffsetsToTxn, EndTxn, TxnOffsetCommit,
DescribeTransactions, ListTransactions, transactional produce and read_committed fetch: the
transaction errors producers act on, spoken at transaction version 1 (client requests below
the KIP-890 part 2 versions) as librdkafka does."""
import time

from kafka_wire import record_batch
from registry import scenario
from side import Side


def _add_partitions(s: Side, txn, pid, epoch, topic, partitions=(0,), version=3):
    if version >= 4:
        return s.send("AddPartitionsToTxn", version, {"Transactions": [
            {"TransactionalId": txn, "ProducerId": pid, "ProducerEpoch": epoch, "VerifyOnly": False,
             "Topics": [{"Name": topic, "Partitions": list(partitions)}]}]})
    return s.send("AddPartitionsToTxn", version, {"V3AndBelowTransactionalId": txn, "V3AndBelowProducerId": pid,
                                                  "V3AndBelowProducerEpoch": epoch,
                                                  "V3AndBelowTopics": [{"Name": topic, "Partitions": list(partitions)}]})


def _end(s: Side, txn, pid, epoch, commit=True, version=3):
    return s.send("EndTxn", version, {"TransactionalId": txn, "ProducerId": pid, "ProducerEpoch": epoch,
                                      "Committed": commit})


def _txn_batch(pid, epoch, seq, values):
    return record_batch(values, producer_id=pid, producer_epoch=epoch, base_sequence=seq, attributes=0x10)


def _until_done(s: Side, txn):
    """DescribeTransactions until the transaction's markers are written (CompleteCommit or
    CompleteAbort, or Empty): the next transaction's requests would otherwise meet
    CONCURRENT_TRANSACTIONS on one broker and not the other."""
    deadline = time.monotonic() + 20
    while True:
        state = s.send("DescribeTransactions", 0, {"TransactionalIds": [txn]})["TransactionStates"][0]
        if state["TransactionState"] in ("CompleteCommit", "CompleteAbort", "Empty"):
            return state["TransactionState"]
        assert time.monotonic() < deadline, f"{s.name}: {txn} stays {state}"
        time.sleep(0.05)


def _begin(s: Side, txn, topic, partitions=1):
    s.create(topic, partitions=partitions)
    p = s.init_producer(txn)
    return p["ProducerId"], p["ProducerEpoch"]


@scenario
def init_producer_id_idempotent(s: Side):
    return s.init_producer(), s.init_producer(version=0)


@scenario
def init_producer_id_transactional_bumps_epoch(s: Side):
    first = s.init_producer("t-bump")
    second = s.init_producer("t-bump")
    return first, second, second["ProducerEpoch"] - first["ProducerEpoch"]


@scenario
def init_producer_id_invalid_timeout(s: Side):
    s.coordinator("t-timeout", key_type=1)
    return s.send("InitProducerId", 4, {"TransactionalId": "t-timeout", "TransactionTimeoutMs": 2_000_000_000,
                                        "ProducerId": -1, "ProducerEpoch": -1})


@scenario
def init_producer_id_with_wrong_current_epoch(s: Side):
    p = s.init_producer("t-kip360")
    return s.send("InitProducerId", 4, {"TransactionalId": "t-kip360", "TransactionTimeoutMs": 60_000,
                                        "ProducerId": p["ProducerId"], "ProducerEpoch": p["ProducerEpoch"] + 5})


@scenario
def find_coordinator_for_transactional_id(s: Side):
    return s.coordinator("t-find", key_type=1)


@scenario
def transaction_commit_and_read_committed(s: Side):
    pid, epoch = _begin(s, "t-commit", "tx-commit")
    added = _add_partitions(s, "t-commit", pid, epoch, "tx-commit")
    produced = s.produce("tx-commit", 0, _txn_batch(pid, epoch, 0, [b"a", b"b"]), transactional_id="t-commit")
    open_lso = s.fetch("tx-commit", 0, 0, isolation=1)
    ended = _end(s, "t-commit", pid, epoch)
    state = _until_done(s, "t-commit")
    return added, produced, open_lso, ended, state, s.read_all("tx-commit", 0, isolation=1)


@scenario
def transaction_abort_and_aborted_list(s: Side):
    pid, epoch = _begin(s, "t-abort", "tx-abort")
    _add_partitions(s, "t-abort", pid, epoch, "tx-abort")
    s.produce("tx-abort", 0, _txn_batch(pid, epoch, 0, [b"gone"]), transactional_id="t-abort")
    ended = _end(s, "t-abort", pid, epoch, commit=False)
    _until_done(s, "t-abort")
    s.produce_values("tx-abort", 0, [b"after"])
    return ended, s.read_all("tx-abort", 0, isolation=1), s.read_all("tx-abort", 0, isolation=0)


@scenario
def transaction_produce_without_add_partitions(s: Side):
    pid, epoch = _begin(s, "t-noadd", "tx-noadd")
    return s.produce("tx-noadd", 0, _txn_batch(pid, epoch, 0, [b"x"]), transactional_id="t-noadd")


@scenario
def transaction_end_without_transaction(s: Side):
    pid, epoch = _begin(s, "t-noop", "tx-noop")
    return _end(s, "t-noop", pid, epoch), _end(s, "t-noop", pid, epoch, commit=False)


@scenario
def transaction_fenced_producer(s: Side):
    pid, epoch = _begin(s, "t-fence", "tx-fence")
    s.init_producer("t-fence")
    return (_add_partitions(s, "t-fence", pid, epoch, "tx-fence"),
            _add_partitions(s, "t-fence", pid, epoch, "tx-fence", version=1),
            _end(s, "t-fence", pid, epoch))


@scenario
def transaction_unknown_producer_id_mapping(s: Side):
    _begin(s, "t-mapping", "tx-mapping")
    return _add_partitions(s, "t-mapping", 999_999, 0, "tx-mapping"), _end(s, "t-mapping", 999_999, 0)


@scenario
def transaction_add_unknown_partition(s: Side):
    pid, epoch = _begin(s, "t-unknown-part", "tx-unknown-part")
    return (_add_partitions(s, "t-unknown-part", pid, epoch, "tx-unknown-part", partitions=(0, 5)),
            _add_partitions(s, "t-unknown-part", pid, epoch, "tx-nowhere"))


@scenario
def transaction_concurrent_while_completing(s: Side):
    """A commit's markers are written after EndTxn answers: InitProducerId at once may meet
    CONCURRENT_TRANSACTIONS (retried by Side.init_producer), and afterwards the id is Empty
    or CompleteCommit with a bumped epoch."""
    pid, epoch = _begin(s, "t-concurrent", "tx-concurrent")
    _add_partitions(s, "t-concurrent", pid, epoch, "tx-concurrent")
    s.produce("tx-concurrent", 0, _txn_batch(pid, epoch, 0, [b"x"]), transactional_id="t-concurrent")
    _end(s, "t-concurrent", pid, epoch)
    again = s.init_producer("t-concurrent")
    return again["ErrorCode"], again["ProducerEpoch"] - epoch


@scenario
def transaction_offsets_committed_with_the_transaction(s: Side):
    pid, epoch = _begin(s, "t-offsets", "tx-offsets")
    s.coordinator("g-tx-offsets")
    added = s.send("AddOffsetsToTxn", 3, {"TransactionalId": "t-offsets", "ProducerId": pid, "ProducerEpoch": epoch,
                                          "GroupId": "g-tx-offsets"})
    committed = s.send("TxnOffsetCommit", 3, {
        "TransactionalId": "t-offsets", "GroupId": "g-tx-offsets", "ProducerId": pid, "ProducerEpoch": epoch,
        "GenerationIdOrMemberEpoch": -1, "MemberId": "", "GroupInstanceId": None,
        "Topics": [{"Name": "tx-offsets", "Partitions": [{"PartitionIndex": 0, "CommittedOffset": 17,
                                                          "CommittedLeaderEpoch": -1, "CommittedMetadata": ""}]}]})
    pending = s.send("OffsetFetch", 8, {"Groups": [{"GroupId": "g-tx-offsets", "Topics": [
        {"Name": "tx-offsets", "PartitionIndexes": [0]}]}], "RequireStable": True})
    ended = _end(s, "t-offsets", pid, epoch)
    _until_done(s, "t-offsets")
    after = s.send("OffsetFetch", 8, {"Groups": [{"GroupId": "g-tx-offsets", "Topics": [
        {"Name": "tx-offsets", "PartitionIndexes": [0]}]}], "RequireStable": True})
    return added, committed, pending, ended, after


@scenario
def txn_offset_commit_without_add_offsets(s: Side):
    pid, epoch = _begin(s, "t-offsets-noadd", "tx-offsets-noadd")
    s.coordinator("g-tx-noadd")
    return s.send("TxnOffsetCommit", 3, {
        "TransactionalId": "t-offsets-noadd", "GroupId": "g-tx-noadd", "ProducerId": pid, "ProducerEpoch": epoch,
        "GenerationIdOrMemberEpoch": -1, "MemberId": "", "GroupInstanceId": None,
        "Topics": [{"Name": "tx-offsets-noadd", "Partitions": [{"PartitionIndex": 0, "CommittedOffset": 1,
                                                                "CommittedLeaderEpoch": -1,
                                                                "CommittedMetadata": ""}]}]})


@scenario
def describe_and_list_transactions(s: Side):
    pid, epoch = _begin(s, "t-describe", "tx-describe")
    _add_partitions(s, "t-describe", pid, epoch, "tx-describe")
    d = s.send("DescribeTransactions", 0, {"TransactionalIds": ["t-describe", "t-describe-nobody"]})
    listed = s.send("ListTransactions", 1, {"StateFilters": ["Ongoing"], "ProducerIdFilters": [pid],
                                            "DurationFilter": -1})
    _end(s, "t-describe", pid, epoch, commit=False)
    for t in d["TransactionStates"]:
        t["TransactionStartTimeMs"] = t["TransactionStartTimeMs"] > 0
    return d, [t for t in listed["TransactionStates"] if t["TransactionalId"] == "t-describe"]


@scenario
def list_transactions_newest_version(s: Side):
    return s.send("ListTransactions", 2, {"StateFilters": [], "ProducerIdFilters": [], "DurationFilter": -1,
                                          "TransactionalIdPattern": "t-nothing-.*"})


@scenario
def list_transactions_by_id_pattern(s: Side):
    """v2's pattern (KIP-1152) matches whole ids; one that does not compile is refused."""
    pid, epoch = _begin(s, "t-pattern-1", "tx-pattern")
    _add_partitions(s, "t-pattern-1", pid, epoch, "tx-pattern")
    def listed(pattern):
        answer = s.send("ListTransactions", 2, {"StateFilters": ["Ongoing"], "ProducerIdFilters": [pid],
                                                "DurationFilter": -1, "TransactionalIdPattern": pattern})
        return answer["ErrorCode"], [t["TransactionalId"] for t in answer["TransactionStates"]]
    answers = [listed(p) for p in ("t-pattern-.*", "t-pattern", "pattern-1", "", "t-(pattern")]
    _end(s, "t-pattern-1", pid, epoch, commit=False)
    return answers


@scenario
def transactional_produce_newest_version(s: Side):
    """Produce v12 (transaction version 2): the batch adds its partition itself."""
    pid, epoch = _begin(s, "t-v12", "tx-v12")
    produced = s.send("Produce", 12, {"TransactionalId": "t-v12", "Acks": -1, "TimeoutMs": 5000, "TopicData": [
        {"Name": "tx-v12", "PartitionData": [{"Index": 0, "Records": _txn_batch(pid, epoch, 0, [b"v"])}]}]})
    ended = _end(s, "t-v12", pid, epoch, version=5)
    return produced, ended


@scenario
def transaction_produce_v11_without_add_partitions(s: Side):
    """Produce v11 (KIP-890's TRANSACTION_ABORTABLE) of a batch the coordinator never added."""
    pid, epoch = _begin(s, "t-noadd-v11", "tx-noadd-v11")
    return s.send("Produce", 11, {"TransactionalId": "t-noadd-v11", "Acks": -1, "TimeoutMs": 5000, "TopicData": [
        {"Name": "tx-noadd-v11", "PartitionData": [{"Index": 0, "Records": _txn_batch(pid, epoch, 0, [b"x"])}]}]})


@scenario
def describe_producers_of_idempotent_and_transactional_writers(s: Side):
    """DescribeProducers (kafka-transactions describe-producers): an idempotent producer's last
    sequence, an open transaction's first offset, and unknown partitions and topics."""
    s.create("dp-topic", partitions=2)
    pid = s.init_producer()["ProducerId"]
    s.produce("dp-topic", 0, record_batch([b"a", b"b"], producer_id=pid, producer_epoch=0, base_sequence=0))
    s.produce("dp-topic", 0, record_batch([b"c"], producer_id=pid, producer_epoch=0, base_sequence=2))
    txn_pid, txn_epoch = _begin(s, "t-dp", "dp-txn")
    _add_partitions(s, "t-dp", txn_pid, txn_epoch, "dp-txn")
    s.produce("dp-txn", 0, _txn_batch(txn_pid, txn_epoch, 0, [b"x"]))
    return s.send("DescribeProducers", 0, {"Topics": [
        {"Name": "dp-topic", "PartitionIndexes": [0, 1, 7]},
        {"Name": "dp-txn", "PartitionIndexes": [0]},
        {"Name": "dp-nowhere", "PartitionIndexes": [0]}]})
