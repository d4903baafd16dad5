"""The transaction coordinator's answers to crafted requests, one error code at a time
(encoded and decoded with kafka-python's protocol classes over a plain socket), transaction
version 2 (KIP-890 part 2: EndTxn v5, Produce v12, TxnOffsetCommit v5) the way Java 4.x
producers speak it, and DescribeTransactions / ListTransactions (KIP-664) through
kafka-python's admin client."""
import socket
import time

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from kafka.protocol.metadata.api_versions import ApiVersionsRequest, ApiVersionsResponse
from kafka.protocol.metadata.find_coordinator import FindCoordinatorRequest, FindCoordinatorResponse
from kafka.protocol.producer.produce import ProduceRequest, ProduceResponse
from kafka.protocol.producer.transaction import (
    AddOffsetsToTxnRequest, AddOffsetsToTxnResponse, AddPartitionsToTxnRequest,
    AddPartitionsToTxnResponse, EndTxnRequest, EndTxnResponse, InitProducerIdRequest,
    InitProducerIdResponse, TxnOffsetCommitRequest, TxnOffsetCommitResponse, WriteTxnMarkersRequest,
    WriteTxnMarkersResponse)

import ck
import kafka_wire
from test_transactions import read_all
from waiting import wait_until

NONE = 0
INVALID_PRODUCER_EPOCH = 47
INVALID_TXN_STATE = 48
INVALID_PRODUCER_ID_MAPPING = 49
INVALID_TRANSACTION_TIMEOUT = 50
CONCURRENT_TRANSACTIONS = 51
PRODUCER_FENCED = 90
TRANSACTIONAL_ID_NOT_FOUND = 105
TRANSACTION_COORDINATOR_FENCED = 52
API_PRODUCE, API_TXN_OFFSET_COMMIT, API_END_TXN = 0, 28, 26
RETRIABLE = {14, 15, 51}  # COORDINATOR_LOAD_IN_PROGRESS, COORDINATOR_NOT_AVAILABLE, CONCURRENT_TRANSACTIONS


class Raw:
    """One connection that sends kafka-python request objects and decodes their responses."""

    def __init__(self, broker):
        self.sock = socket.create_connection(("127.0.0.1", broker.port), timeout=30)
        self.correlation_id = 0

    def call(self, request, response_class, version):
        self.correlation_id += 1
        request.API_VERSION = version
        request.with_header(correlation_id=self.correlation_id, client_id="raw-txn")
        self.sock.sendall(request.encode(header=True, framed=True))
        response = response_class.decode(kafka_wire.read_response(self.sock), version=version, header=True)
        assert response.header.correlation_id == self.correlation_id
        return response

    def until_settled(self, make, response_class, version, code_of, timeout_s=30):
        """Sends make() until its answer is not a retriable coordinator error."""
        responses = []

        def settled():
            responses.append(self.call(make(), response_class, version))
            return code_of(responses[-1]) not in RETRIABLE
        wait_until(settled, timeout_s, f"a {response_class.__name__} without a retriable error",
                   state=lambda: code_of(responses[-1]))
        return responses[-1]

    def init(self, tid, timeout_ms=60_000, version=3, producer=(-1, -1)):
        """InitProducerId: (error code, producer id, epoch). `producer`: the (id, epoch) the
        producer names (KIP-360)."""
        r = self.until_settled(
            lambda: InitProducerIdRequest(transactional_id=tid, transaction_timeout_ms=timeout_ms,
                                          producer_id=producer[0], producer_epoch=producer[1]),
            InitProducerIdResponse, version, lambda r: r.error_code)
        return r.error_code, r.producer_id, r.producer_epoch

    def add(self, tid, pid, epoch, topic, partitions, version=3):
        """AddPartitionsToTxn: each partition's code."""
        request = AddPartitionsToTxnRequest(
            v3_and_below_transactional_id=tid, v3_and_below_producer_id=pid,
            v3_and_below_producer_epoch=epoch,
            v3_and_below_topics=[AddPartitionsToTxnRequest.AddPartitionsToTxnTopic(name=topic, partitions=partitions)])
        r = self.call(request, AddPartitionsToTxnResponse, version)
        return [p.partition_error_code for t in r.results_by_topic_v3_and_below for p in t.results_by_partition]

    def end(self, tid, pid, epoch, commit, version=3):
        request = EndTxnRequest(transactional_id=tid, producer_id=pid, producer_epoch=epoch, committed=commit)
        return self.call(request, EndTxnResponse, version).error_code

    def close(self):
        self.sock.close()


def coordinator_ready(raw, tid):
    """FindCoordinator for a transactional id creates `__transaction_state` on first use."""
    r = raw.until_settled(lambda: FindCoordinatorRequest(key=tid, key_type=1), FindCoordinatorResponse, 2,
                          lambda r: r.error_code)
    assert r.error_code == NONE, r


def transactional_produce(raw, tid, topic, pid, epoch, partition=0, sequence=0, value=b"v"):
    """A Produce v3 of one transactional batch: its error code."""
    batch = kafka_wire.record_batch([value], producer_id=pid, producer_epoch=epoch, base_sequence=sequence,
                                    attributes=0x10)
    raw.correlation_id += 1
    body = kafka_wire.produce_v3(topic, partition, batch, transactional_id=tid)
    raw.sock.sendall(kafka_wire.request(0, 3, raw.correlation_id, body))
    return kafka_wire.produce_v3_error_code(kafka_wire.read_response(raw.sock))[0]


def test_each_coordinator_error_for_crafted_requests(broker):
    ck.create_topic(broker.bootstrap, "raw-tx", 2)
    raw = Raw(broker)
    try:
        coordinator_ready(raw, "raw-t")
        assert raw.init("raw-t", timeout_ms=0)[0] == INVALID_TRANSACTION_TIMEOUT
        assert raw.init("raw-t", timeout_ms=3_600_000)[0] == INVALID_TRANSACTION_TIMEOUT
        code, pid, epoch = raw.init("raw-t")
        assert code == NONE and pid >= 0 and epoch >= 0

        # Nothing begun: no end, and no transactional write the coordinator has not verified.
        assert raw.end("raw-t", pid, epoch, commit=True) == INVALID_TXN_STATE
        assert transactional_produce(raw, "raw-t", "raw-tx", pid, epoch) == INVALID_TXN_STATE
        # Another producer id under this transactional id, or an id nobody initialised.
        assert raw.add("raw-t", pid + 1, epoch, "raw-tx", [0]) == [INVALID_PRODUCER_ID_MAPPING]
        assert raw.add("raw-unknown", pid, epoch, "raw-tx", [0]) == [INVALID_PRODUCER_ID_MAPPING]
        assert raw.end("raw-unknown", pid, epoch, commit=False) == INVALID_PRODUCER_ID_MAPPING

        assert raw.add("raw-t", pid, epoch, "raw-tx", [0, 1]) == [NONE, NONE]
        assert transactional_produce(raw, "raw-t", "raw-tx", pid, epoch) == NONE
        # A transaction takes no group offsets before AddOffsetsToTxn puts the group in it.
        offsets = TxnOffsetCommitRequest(
            transactional_id="raw-t", group_id="raw-g", producer_id=pid, producer_epoch=epoch,
            generation_id=-1, member_id="", group_instance_id=None,
            topics=[TxnOffsetCommitRequest.TxnOffsetCommitRequestTopic(
                name="raw-tx",
                partitions=[TxnOffsetCommitRequest.TxnOffsetCommitRequestTopic.TxnOffsetCommitRequestPartition(
                    partition_index=0, committed_offset=1, committed_leader_epoch=-1,
                    committed_metadata="")])])
        r = raw.call(offsets, TxnOffsetCommitResponse, 3)
        assert [p.error_code for t in r.topics for p in t.partitions] == [INVALID_TXN_STATE]

        # A second instance fences this one: its first InitProducerId aborts the ongoing
        # transaction and answers CONCURRENT_TRANSACTIONS; the retry gets a newer epoch.
        second = Raw(broker)
        try:
            r = second.call(InitProducerIdRequest(transactional_id="raw-t", transaction_timeout_ms=60_000,
                                                  producer_id=-1, producer_epoch=-1), InitProducerIdResponse, 3)
            assert r.error_code == CONCURRENT_TRANSACTIONS
            code, pid2, epoch2 = second.init("raw-t")
            assert code == NONE and pid2 == pid and epoch2 > epoch
        finally:
            second.close()

        # The fenced instance: PRODUCER_FENCED from v2 on, INVALID_PRODUCER_EPOCH before (KIP-588).
        assert raw.add("raw-t", pid, epoch, "raw-tx", [0]) == [PRODUCER_FENCED]
        assert raw.add("raw-t", pid, epoch, "raw-tx", [0], version=1) == [INVALID_PRODUCER_EPOCH]
        assert raw.end("raw-t", pid, epoch, commit=True) == PRODUCER_FENCED
        assert raw.end("raw-t", pid, epoch, commit=True, version=1) == INVALID_PRODUCER_EPOCH
        add_offsets = AddOffsetsToTxnRequest(transactional_id="raw-t", producer_id=pid, producer_epoch=epoch,
                                             group_id="raw-g")
        assert raw.call(add_offsets, AddOffsetsToTxnResponse, 3).error_code == PRODUCER_FENCED
        assert transactional_produce(raw, "raw-t", "raw-tx", pid, epoch) == INVALID_PRODUCER_EPOCH
        # KIP-360: an InitProducerId naming an older epoch is fenced too...
        assert raw.init("raw-t", producer=(pid, epoch), version=4)[0] == PRODUCER_FENCED
        assert raw.init("raw-t", producer=(pid, epoch), version=3)[0] == INVALID_PRODUCER_EPOCH
        # ...one naming the current epoch bumps it, and its retry (the answer lost) gets the same.
        bumped = raw.init("raw-t", producer=(pid2, epoch2), version=4)
        assert bumped == (NONE, pid2, epoch2 + 1)
        assert raw.init("raw-t", producer=(pid2, epoch2), version=4) == bumped
        _, pid2, epoch2 = bumped
        # The new instance's transaction ends normally; a retried end of it is answered again.
        assert raw.add("raw-t", pid2, epoch2, "raw-tx", [1]) == [NONE]
        assert raw.end("raw-t", pid2, epoch2, commit=False) == NONE
        retried = raw.until_settled(lambda: EndTxnRequest(transactional_id="raw-t", producer_id=pid2,
                                                          producer_epoch=epoch2, committed=False),
                                    EndTxnResponse, 3, lambda r: r.error_code)
        assert retried.error_code == NONE
        assert raw.end("raw-t", pid2, epoch2, commit=True) == INVALID_TXN_STATE
    finally:
        raw.close()


def produce_v12(raw, tid, topic, partition, pid, epoch, sequence, value):
    """A Produce v12 (transaction version 2) of one transactional batch: its error code."""
    batch = kafka_wire.record_batch([value], producer_id=pid, producer_epoch=epoch, base_sequence=sequence,
                                    attributes=0x10)
    data = ProduceRequest.TopicProduceData(name=topic, partition_data=[
        ProduceRequest.TopicProduceData.PartitionProduceData(index=partition, records=batch)])
    request = ProduceRequest(transactional_id=tid, acks=-1, timeout_ms=10_000, topic_data=[data])
    r = raw.call(request, ProduceResponse, 12)
    return r.responses[0].partition_responses[0].error_code


def end_v5(raw, tid, pid, epoch, commit):
    """EndTxn v5, retried while the coordinator is busy: (error code, producer id, epoch)."""
    r = raw.until_settled(lambda: EndTxnRequest(transactional_id=tid, producer_id=pid, producer_epoch=epoch,
                                                committed=commit),
                          EndTxnResponse, 5, lambda r: r.error_code)
    return r.error_code, r.producer_id, r.producer_epoch


def offsets_v5(raw, tid, group, pid, epoch, topic, offset):
    """TxnOffsetCommit v5 of `topic`-0 at `offset`, with no AddOffsetsToTxn before: its code."""
    request = TxnOffsetCommitRequest(
        transactional_id=tid, group_id=group, producer_id=pid, producer_epoch=epoch,
        generation_id=-1, member_id="", group_instance_id=None,
        topics=[TxnOffsetCommitRequest.TxnOffsetCommitRequestTopic(
            name=topic,
            partitions=[TxnOffsetCommitRequest.TxnOffsetCommitRequestTopic.TxnOffsetCommitRequestPartition(
                partition_index=0, committed_offset=offset, committed_leader_epoch=-1,
                committed_metadata="")])])
    r = raw.call(request, TxnOffsetCommitResponse, 5)
    return [p.error_code for t in r.topics for p in t.partitions][0]


def read_values(broker, topic, partitions, isolation, expect):
    """The values readable at `isolation`, sorted (test_transactions.read_all: it reads on a
    moment past `expect`, so that an extra value would show)."""
    return sorted(read_all(broker, topic, partitions, isolation, expect=expect))


def test_transaction_version_2_bumps_the_epoch_per_transaction(broker):
    """KIP-890 part 2 as Java 4.x producers speak it: the feature is finalized in ApiVersions;
    Produce v12 and TxnOffsetCommit v5 add their partitions (no AddPartitionsToTxn or
    AddOffsetsToTxn); EndTxn v5 bumps the epoch and answers it, a retry at the old epoch is
    recognised (also after a SIGKILL); a late write of the transaction before is fenced; an
    abort with nothing ongoing bumps too. read_committed sees exactly the committed records."""
    ck.create_topic(broker.bootstrap, "tv2", 2)
    ck.create_topic(broker.bootstrap, "tv2-src", 1)
    raw = Raw(broker)
    try:
        versions = raw.call(ApiVersionsRequest(client_software_name="raw", client_software_version="1"),
                            ApiVersionsResponse, 4)
        # Beside metadata.version (a new broker's is 2, test_upgrade.py).
        assert [(f.name, f.min_version_level, f.max_version_level) for f in versions.finalized_features] == \
            [("metadata.version", 2, 2), ("transaction.version", 2, 2)]
        assert [(f.name, f.min_version, f.max_version) for f in versions.supported_features] == \
            [("metadata.version", 1, 2), ("transaction.version", 0, 2)]
        # Below v4 a supported feature whose lowest level is 0 is left out, as Kafka leaves it
        # out (KAFKA-17011); the finalized level still goes out.
        v3 = raw.call(ApiVersionsRequest(client_software_name="raw", client_software_version="1"),
                      ApiVersionsResponse, 3)
        assert [f.name for f in v3.supported_features] == ["metadata.version"]
        assert len(v3.finalized_features) == 2
        served = {k.api_key: k.max_version for k in versions.api_keys}
        assert (served[API_PRODUCE], served[API_END_TXN], served[API_TXN_OFFSET_COMMIT]) == (13, 5, 5)

        coordinator_ready(raw, "tv2-t")
        code, pid, epoch = raw.init("tv2-t")
        assert code == NONE
        # The first writes add their partitions; the v3 form still only verifies.
        assert produce_v12(raw, "tv2-t", "tv2", 0, pid, epoch, 0, b"c0") == NONE
        assert transactional_produce(raw, "tv2-t", "tv2", pid, epoch, 0, 1, b"v") == NONE, "0 is in it now"
        assert transactional_produce(raw, "tv2-t", "tv2", pid, epoch, 1, 0, b"x") == INVALID_TXN_STATE
        assert produce_v12(raw, "tv2-t", "tv2", 1, pid, epoch, 0, b"c1") == NONE
        assert offsets_v5(raw, "tv2-t", "tv2-g", pid, epoch, "tv2-src", 42) == NONE

        assert end_v5(raw, "tv2-t", pid, epoch, commit=True) == (NONE, pid, epoch + 1)
        assert end_v5(raw, "tv2-t", pid, epoch, commit=True) == (NONE, pid, epoch + 1), "a retry"
        broker.kill()
        broker.start()
        raw.close()
        raw = Raw(broker)
        assert end_v5(raw, "tv2-t", pid, epoch, commit=True) == (NONE, pid, epoch + 1), "a retry after SIGKILL"
        assert end_v5(raw, "tv2-t", pid, epoch, commit=False)[0] == INVALID_TXN_STATE
        # A late write of the committed transaction is fenced by the bump.
        assert produce_v12(raw, "tv2-t", "tv2", 0, pid, epoch, 2, b"late") == INVALID_PRODUCER_EPOCH

        # The next transaction, under the bumped epoch, aborts.
        epoch += 1
        assert produce_v12(raw, "tv2-t", "tv2", 0, pid, epoch, 0, b"a0") == NONE
        assert end_v5(raw, "tv2-t", pid, epoch, commit=False) == (NONE, pid, epoch + 1)
        epoch += 1
        # Nothing ongoing: an abort still bumps, a commit is refused.
        assert end_v5(raw, "tv2-t", pid, epoch, commit=True)[0] == INVALID_TXN_STATE
        assert end_v5(raw, "tv2-t", pid, epoch, commit=False) == (NONE, pid, epoch + 1)
        assert end_v5(raw, "tv2-t", pid, epoch - 1, commit=False)[0] == PRODUCER_FENCED
    finally:
        raw.close()
    assert read_values(broker, "tv2", 2, "read_committed", 3) == [b"c0", b"c1", b"v"]
    assert read_values(broker, "tv2", 2, "read_uncommitted", 4) == [b"a0", b"c0", b"c1", b"v"]
    c = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "tv2-g", "isolation.level": "read_committed"})
    try:
        assert c.committed([TopicPartition("tv2-src", 0)], 10)[0].offset == 42
    finally:
        c.close()
    broker.assert_no_panic()


def write_marker(raw, pid, epoch, topic, commit, coordinator_epoch):
    """WriteTxnMarkers v1 for `topic`-0, as a transaction coordinator sends it: its code."""
    marker = WriteTxnMarkersRequest.WritableTxnMarker(
        producer_id=pid, producer_epoch=epoch, transaction_result=commit, coordinator_epoch=coordinator_epoch,
        topics=[WriteTxnMarkersRequest.WritableTxnMarker.WritableTxnMarkerTopic(name=topic, partition_indexes=[0])])
    r = raw.call(WriteTxnMarkersRequest(markers=[marker]), WriteTxnMarkersResponse, 1)
    return r.markers[0].topics[0].partitions[0].error_code


def test_markers_of_an_older_coordinator_are_fenced(broker):
    """A partition remembers the newest coordinator epoch of each producer's markers (also
    across a SIGKILL) and refuses a marker from an older coordinator: a zombie coordinator's
    late marker gets TRANSACTION_COORDINATOR_FENCED and changes nothing."""
    ck.create_topic(broker.bootstrap, "fence-tx", 1)
    raw = Raw(broker)
    try:
        coordinator_ready(raw, "fence-t")
        code, pid, epoch = raw.init("fence-t")
        assert code == NONE
        assert raw.add("fence-t", pid, epoch, "fence-tx", [0]) == [NONE]
        assert transactional_produce(raw, "fence-t", "fence-tx", pid, epoch, 0, 0, b"one") == NONE
        assert write_marker(raw, pid, epoch, "fence-tx", True, coordinator_epoch=5) == NONE
        broker.kill()
        broker.start()
        raw.close()
        raw = Raw(broker)
        coordinator_ready(raw, "fence-t")
        assert transactional_produce(raw, "fence-t", "fence-tx", pid, epoch, 0, 1, b"two") == NONE
        assert write_marker(raw, pid, epoch, "fence-tx", False, coordinator_epoch=4) == \
            TRANSACTION_COORDINATOR_FENCED
        assert write_marker(raw, pid, epoch, "fence-tx", True, coordinator_epoch=5) == NONE
    finally:
        raw.close()
    assert read_values(broker, "fence-tx", 1, "read_committed", 2) == [b"one", b"two"]


def test_transactions_are_described_and_listed_by_the_admin_client(make_broker):
    from kafka import KafkaAdminClient
    from kafka.errors import TransactionalIdNotFoundError
    broker = make_broker(config="[transactions]\ncheck_interval_ms = 100\n")
    ck.create_topic(broker.bootstrap, "adm-tx", 3)
    producers = {}
    for tid in ("adm-open", "adm-done"):
        p = Producer({"bootstrap.servers": broker.bootstrap, "transactional.id": tid, "linger.ms": 5,
                      "transaction.timeout.ms": 120_000})
        p.init_transactions(60)
        p.begin_transaction()
        for partition in (0, 2):
            p.produce("adm-tx", value=b"x", partition=partition)
        assert p.flush(30) == 0
        producers[tid] = p
    producers["adm-done"].commit_transaction(30)
    began_ms = time.time() * 1000
    admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap)
    try:
        described = admin.describe_transactions(["adm-open", "adm-done"])
        open_txn, done = described["adm-open"], described["adm-done"]
        assert str(open_txn.state.value) == "Ongoing"
        assert {(tp.topic, tp.partition) for tp in open_txn.topic_partitions} == {("adm-tx", 0), ("adm-tx", 2)}
        assert open_txn.transaction_timeout_ms == 120_000
        assert 0 < open_txn.transaction_start_time_ms <= began_ms
        assert str(done.state.value) == "CompleteCommit" and not done.topic_partitions
        assert open_txn.producer_id != done.producer_id and open_txn.producer_epoch >= 0
        with pytest.raises(TransactionalIdNotFoundError):
            admin.describe_transactions(["adm-never-initialised"])

        def listed(**filters):
            return sorted((t.transactional_id, str(t.state.value))
                          for ts in admin.list_transactions(**filters).values() for t in ts)
        assert listed() == [("adm-done", "CompleteCommit"), ("adm-open", "Ongoing")]
        assert listed(state_filters=["Ongoing"]) == [("adm-open", "Ongoing")]
        assert listed(producer_id_filters=[done.producer_id]) == [("adm-done", "CompleteCommit")]
        # Hanging-transaction search: ongoing for longer than a duration.
        time.sleep(1.5)  # the transaction's age is what the filter reads
        assert listed(state_filters=["Ongoing"], duration_filter_ms=1_000) == [("adm-open", "Ongoing")]
        assert listed(state_filters=["Ongoing"], duration_filter_ms=600_000) == []
        producers["adm-open"].abort_transaction(30)
        wait_until(lambda: not listed(state_filters=["Ongoing", "PrepareAbort"]), 30, "the abort to complete")
        assert listed(state_filters=["CompleteAbort"]) == [("adm-open", "CompleteAbort")]
    finally:
        admin.close()


def test_the_offered_transaction_version_follows_the_config(make_broker):
    """`transactions.version` sets the finalized feature level clients read in ApiVersions."""
    broker = make_broker(config="[transactions]\nversion = 1\n")
    raw = Raw(broker)
    try:
        versions = raw.call(ApiVersionsRequest(client_software_name="raw", client_software_version="1"),
                            ApiVersionsResponse, 3)
        finalized = {f.name: f.max_version_level for f in versions.finalized_features}
        assert finalized["transaction.version"] == 1, finalized
    finally:
        raw.close()
