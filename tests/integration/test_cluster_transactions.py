"""Transactions in a three-node cluster (issue 18): the coordinator on the leader of the id's
`__transaction_state` partition (replicated), markers written to partitions other nodes lead
(WriteTxnMarkers), transactional batches verified with a coordinator on another node
(AddPartitionsToTxn v4, KIP-890). The coordinator's node is SIGKILLed mid-transaction: the
survivors elect new leaders, a new coordinator loads the id, and every transaction commits or
aborts as a whole."""
import signal
import threading
import time

import ck
import eos
import pytest
from cluster import Cluster
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition, OFFSET_BEGINNING
from confluent_kafka.admin import ConfigResource
from waiting import wait_until

CONFIG = """
[cluster]
broker_heartbeat_interval_ms = 300
broker_session_timeout_ms = 3000
metadata_write_timeout_ms = 5000
replica_lag_time_max_ms = 3000

[transactions]
state_partitions = 4
check_interval_ms = 200
"""
PARTITIONS = 6


@pytest.fixture
def cluster(tmp_path):
    c = Cluster(tmp_path / "cluster", 3, 0, CONFIG).start()
    try:
        c.wait_for_brokers({1, 2, 3})
        yield c
    finally:
        for n in c.nodes.values():
            if n.proc is not None and n.alive():
                n.proc.send_signal(signal.SIGCONT)
        c.stop()


def fnv1a(data: bytes) -> int:
    h = 0xcbf29ce484222325
    for b in data:
        h = ((h ^ b) * 0x100000001b3) & 0xFFFFFFFFFFFFFFFF
    return h


def coordinator_of(cluster: Cluster, tid: str) -> int:
    """The node that leads `tid`'s `__transaction_state` partition (txn/service.rs)."""
    node = cluster.live()[0].node_id
    rows = cluster.metadata(node).topics["__transaction_state"]
    partition = fnv1a(tid.encode()) % len(rows)
    return next(leader for index, _e, leader, _r, _i in rows if index == partition)


def leaders(cluster: Cluster, topic: str) -> set:
    return {leader for _i, _e, leader, _r, _isr in cluster.metadata(1).topics.get(topic, [])}


def read_committed(bootstrap: str, topic: str, settle_s=3.0, timeout_s=90.0, expect=0):
    """Every value a read_committed consumer sees, once `expect` came and nothing new for
    `settle_s`."""
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "checker", "enable.auto.commit": False,
                  "isolation.level": "read_committed"})
    c.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(PARTITIONS)])
    got, last_new = [], time.monotonic()
    deadline = time.monotonic() + timeout_s
    try:
        while time.monotonic() < deadline:
            m = c.poll(0.2)
            if m is not None and m.error() is None:
                got.append(m.value())
                last_new = time.monotonic()
            if time.monotonic() - last_new > settle_s and len(got) >= expect:
                break
    finally:
        c.close()
    return got


def send(p: Producer, values):
    for i, v in enumerate(values):
        p.produce("tx", value=v, partition=i % PARTITIONS)


def test_a_transaction_survives_its_coordinators_death_whole(cluster):
    """Transactions over six partitions led by all three nodes. Mid-transaction (records sent,
    no commit yet) the coordinator's node is SIGKILLed; the producer goes on with the survivors
    and ends that transaction: committed or aborted, read_committed sees all of it or none."""
    cluster.create_topic(1, "tx", PARTITIONS, 3)
    wait_until(lambda: leaders(cluster, "tx") == {1, 2, 3}, 30, "leaders on every node")
    bootstrap = ",".join(n.bootstrap for n in cluster.nodes.values())
    tid = "cluster-tx"
    p = Producer({"bootstrap.servers": bootstrap, "transactional.id": tid, "linger.ms": 5,
                  "transaction.timeout.ms": 20000})
    p.init_transactions(60)
    # Three replicas, and a commit decision on two of them before anyone hears of it (Kafka's
    # transaction.state.log.min.isr).
    admin = ck.admin(bootstrap)
    resource = ConfigResource(ConfigResource.Type.TOPIC, "__transaction_state")
    configs = admin.describe_configs([resource])[resource].result(timeout=30)
    assert configs["min.insync.replicas"].value == "2"
    txns = {k: [b"t%d-%d" % (k, i) for i in range(3 * PARTITIONS)] for k in range(6)}
    outcome = {}
    for k in (0, 1):
        p.begin_transaction()
        send(p, txns[k])
        p.commit_transaction(60)
        outcome[k] = "committed"
    # Transaction 2: sent (and acknowledged), then its coordinator dies before the commit.
    p.begin_transaction()
    send(p, txns[2])
    assert p.flush(30) == 0
    coordinator = coordinator_of(cluster, tid)
    cluster.nodes[coordinator].kill()
    try:
        p.commit_transaction(60)
        outcome[2] = "committed"
    except KafkaException as e:
        assert e.args[0].txn_requires_abort(), e
        p.abort_transaction(60)
        outcome[2] = "aborted"
    # The producer carries on with the survivors: one committed, one aborted, one committed.
    for k, commit in ((3, True), (4, False), (5, True)):
        p.begin_transaction()
        send(p, txns[k])
        if commit:
            p.commit_transaction(60)
        else:
            p.abort_transaction(60)
        outcome[k] = "committed" if commit else "aborted"
    survivors = ",".join(n.bootstrap for n in cluster.live())
    expected = [v for k, vs in txns.items() if outcome[k] == "committed" for v in vs]
    got = read_committed(survivors, "tx", expect=len(expected))
    assert sorted(got) == sorted(expected), (outcome, len(got), len(set(got)))
    assert coordinator_of(cluster, tid) != coordinator


def test_exactly_once_processing_survives_the_transaction_coordinators_death(cluster):
    """tests/clients/eos_processor.py reads `eos-in` and writes `eos-out` with its consumed
    offsets in each transaction (the group's coordinator, the transaction's coordinator and the
    partitions' leaders on different nodes). Halfway, the transaction coordinator's node is
    SIGKILLed. The output, read with read_committed, holds each input exactly once."""
    total = 400
    for topic in ("eos-in", "tx"):
        cluster.create_topic(1, topic, PARTITIONS, 3)
    bootstrap = ",".join(n.bootstrap for n in cluster.nodes.values())
    plain = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "acks": "all"})
    inputs = [b"in-%d" % i for i in range(total)]
    for i, v in enumerate(inputs):
        plain.produce("eos-in", value=v, partition=i % PARTITIONS)
    assert plain.flush(30) == 0
    tid = "cluster-eos"
    # A processor that commits nothing for 60 s is started again (see eos.py: librdkafka can
    # hang once the node it cached as the group coordinator leaves the metadata).
    proc = eos.Processor(bootstrap, "eos-in", "tx", "eos-group", tid, total, stall_s=60)
    try:
        proc.wait_for_committed(total // 2)
        cluster.nodes[coordinator_of(cluster, tid)].kill()
        proc.finish()
    finally:
        proc.stop()
    if proc.stalls():
        print("the processor stalled and was started again:\n" + proc.stalls())
    survivors = ",".join(n.bootstrap for n in cluster.live())
    got = read_committed(survivors, "tx", expect=total)
    assert sorted(got) == sorted(b"out-" + v for v in inputs), (len(got), len(set(got)), proc.restarts())


class CommitLoop:
    """A transactional producer committing transactions over every partition of `tx`, one after
    another, for as long as it runs; an error aborts the transaction, or (fatal) starts a new
    producer. `commits` holds the time of each commit."""

    def __init__(self, bootstrap: str, tid: str):
        self.bootstrap, self.tid = bootstrap, tid
        self.commits, self.errors = [], []
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self.run, daemon=True)

    def producer(self) -> Producer:
        p = Producer({"bootstrap.servers": self.bootstrap, "transactional.id": self.tid,
                      "linger.ms": 1, "transaction.timeout.ms": 60_000})
        p.init_transactions(60)
        return p

    def run(self):
        p = None
        while not self.stop.is_set():
            try:
                p = p or self.producer()
                p.begin_transaction()
                send(p, [b"loop"] * PARTITIONS)
                p.commit_transaction(60)
                self.commits.append(time.monotonic())
            except KafkaException as e:
                self.errors.append(str(e))
                try:
                    if e.args[0].txn_requires_abort():
                        p.abort_transaction(60)
                    elif not e.args[0].retriable():
                        p = None
                except KafkaException:
                    p = None


def txn_state_isr(cluster: Cluster, via: int, tid: str) -> set:
    rows = cluster.metadata(via).topics["__transaction_state"]
    partition = fnv1a(tid.encode()) % len(rows)
    return next(set(isr) for index, _e, _l, _r, isr in rows if index == partition)


def test_a_transaction_whose_completion_was_refused_completes_once_a_quorum_is_back(cluster):
    """Issue 36's second bug. A producer commits in a loop. One node that is not the id's
    coordinator is SIGKILLed; once it has left the `__transaction_state` partition's in-sync
    set, the other (which leads partitions of the transactions) is SIGTERMed: its controlled
    shutdown moves its leaderships to the coordinator's node and takes it out of the in-sync
    set, so a transaction prepared before it can have its markers written and its completion
    refused (NOT_ENOUGH_REPLICAS: min.insync.replicas 2, one in sync). Both come back. Twice
    over: each time the producer commits again within 30 s of the quorum's return (a coordinator
    that never wrote the completion again answered CONCURRENT_TRANSACTIONS for good)."""
    cluster.create_topic(1, "tx", PARTITIONS, 3)
    wait_until(lambda: leaders(cluster, "tx") == {1, 2, 3}, 30, "leaders on every node")
    bootstrap = ",".join(n.bootstrap for n in cluster.nodes.values())
    tid = "refused-completion"
    loop = CommitLoop(bootstrap, tid)
    loop.thread.start()
    try:
        wait_until(lambda: len(loop.commits) >= 5, 60, "the first commits")
        coordinator = coordinator_of(cluster, tid)
        for trial in range(2):
            killed, stopped = [n for n in (1, 2, 3) if n != coordinator]
            cluster.nodes[killed].kill()
            wait_until(lambda: killed not in txn_state_isr(cluster, coordinator, tid), 30,
                       f"node {killed} to leave the in-sync set")
            assert cluster.nodes[stopped].stop() == 0
            time.sleep(1)  # the fault's length: the coordinator's node alone for a moment
            for n in (killed, stopped):
                cluster.nodes[n].start()
            cluster.wait_for_brokers({1, 2, 3})
            back = time.monotonic()
            wait_until(lambda: txn_state_isr(cluster, coordinator, tid) == {1, 2, 3}, 60, "a full in-sync set")
            wait_until(lambda: any(t > back for t in loop.commits), 30,
                       f"a commit after the quorum came back (trial {trial}; errors {loop.errors[-3:]})")
            assert coordinator_of(cluster, tid) == coordinator, "the coordinator never moved"
    finally:
        loop.stop.set()
        loop.thread.join(120)
