"""Issue 16: replicated partitions. Followers pull from their leader, acks=all is answered once
every in-sync replica has fsynced the records, and the controller moves leadership to an
in-sync replica when a leader dies.

Real `sluice serve` processes (`cluster.py`), an idempotent librdkafka producer whose every send
and acknowledgement is recorded, and a checker over what a consumer reads back afterwards."""
import signal
import socket
import threading
import time

import kafka_wire as kw
import pytest
from cluster import Cluster
from confluent_kafka import Consumer, Producer, TopicPartition, OFFSET_BEGINNING
from waiting import wait_until

# Faster timing than production, so fencing and in-sync changes fit a test's bounds.
REPLICATED = """
[cluster]
broker_heartbeat_interval_ms = 300
broker_session_timeout_ms = 3000
metadata_write_timeout_ms = 5000
replica_lag_time_max_ms = 3000
"""


@pytest.fixture
def make_cluster(tmp_path):
    made = []

    def make(voters: int, config: str = REPLICATED) -> Cluster:
        c = Cluster(tmp_path / f"cluster-{len(made)}", voters, 0, config)
        made.append(c)
        return c.start()

    yield make
    for c in made:
        for n in c.nodes.values():
            if n.proc is not None and n.alive():
                n.proc.send_signal(signal.SIGCONT)
            n.kill()
    for c in made:
        c.stop()


def partition_state(cluster: Cluster, node: int, topic: str, partition: int):
    """(leader, replicas, isr) of a partition in node `node`'s metadata."""
    for index, _error, leader, replicas, isr in cluster.metadata(node).topics.get(topic, []):
        if index == partition:
            return leader, sorted(replicas), sorted(isr)
    return None


def create_replicated(cluster: Cluster, topic: str, partitions: int, min_isr: int):
    cluster.wait_for_brokers({1, 2, 3})
    cluster.create_topic(1, topic, partitions, 3)
    admin = cluster.admin(1)
    from confluent_kafka.admin import ConfigResource
    res = ConfigResource("topic", topic, set_config={"min.insync.replicas": str(min_isr)})
    admin.alter_configs([res])[res].result(15)
    for p in range(partitions):
        wait_until(lambda p=p: all(
            (s := partition_state(cluster, n.node_id, topic, p)) and s[0] > 0 and s[2] == [1, 2, 3]
            for n in cluster.live()), 30, f"{topic}[{p}] led with every replica in sync")


class History:
    """Every send and acknowledgement of one idempotent producer: value → acked offset."""

    def __init__(self, bootstrap: str, topic: str):
        self.topic = topic
        self.producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True,
                                  "linger.ms": 2, "message.timeout.ms": 120000,
                                  "topic.metadata.refresh.interval.ms": 500})
        self.sent, self.acked, self.failed = [], {}, []
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self.run, daemon=True)

    def run(self):
        i = 0
        while not self.stop.is_set():
            value = f"v{i:07d}".encode()
            try:
                self.producer.produce(self.topic, value=value, partition=0, on_delivery=self.delivered)
                self.sent.append(value)
                i += 1
            except BufferError:
                pass
            self.producer.poll(0.001)

    def delivered(self, err, msg):
        if err is not None:
            self.failed.append((msg.value(), err))
        else:
            self.acked[msg.value()] = msg.offset()

    def finish(self):
        self.stop.set()
        self.thread.join(30)
        assert self.producer.flush(120) == 0, "records never delivered"


def read_all(bootstrap: str, topic: str, end: int, timeout_s=60):
    """Everything in partition 0 below `end`, as (offset, value)."""
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "checker", "enable.auto.commit": False})
    c.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
    got = []
    deadline = time.monotonic() + timeout_s
    try:
        while (not got or got[-1][0] < end - 1) and time.monotonic() < deadline:
            msg = c.poll(0.5)
            if msg is not None and msg.error() is None:
                got.append((msg.offset(), msg.value()))
    finally:
        c.unsubscribe()
        c.poll(0)
        c.close()
    return got


def check_history(h: History, got):
    """No acknowledged record lost, none twice, offsets dense from 0, every read was sent,
    and each acknowledged record at the offset it was acknowledged with."""
    offsets = [o for o, _ in got]
    assert offsets == list(range(len(got))), "offsets increase without gaps"
    values = [v for _, v in got]
    assert len(set(values)) == len(values), "no duplicates with idempotence"
    sent = set(h.sent)
    assert all(v in sent for v in values), "every read record was written"
    at = dict((v, o) for o, v in got)
    lost = [v for v in h.acked if v not in at]
    assert not lost, f"{len(lost)} acknowledged records lost, first {lost[:3]}"
    moved = [(v, o, at[v]) for v, o in h.acked.items() if at[v] != o]
    assert not moved, f"records not at their acknowledged offsets: {moved[:3]}"


def test_leader_killed_under_load_loses_no_acknowledged_record(make_cluster):
    cluster = make_cluster(3)
    create_replicated(cluster, "load", 1, 2)
    leader = partition_state(cluster, 1, "load", 0)[0]
    others = [n for n in (1, 2, 3) if n != leader]
    bootstrap = ",".join(cluster.nodes[n].bootstrap for n in (1, 2, 3))
    h = History(bootstrap, "load")
    h.thread.start()
    wait_until(lambda: len(h.acked) > 2000, 60, "acknowledged records before the kill")
    cluster.nodes[leader].kill()
    wait_until(lambda: (s := partition_state(cluster, others[0], "load", 0)) and s[0] in others, 30,
               "a new leader among the in-sync followers")
    acked_at_failover = len(h.acked)
    wait_until(lambda: len(h.acked) > acked_at_failover + 2000, 60, "acknowledgements from the new leader")
    h.finish()
    cluster.nodes[leader].start()
    end = max(h.acked.values()) + 1
    got = read_all(",".join(cluster.nodes[n].bootstrap for n in others), "load", end)
    check_history(h, got)
    assert not h.failed, f"delivery errors: {h.failed[:3]}"
    # The restarted node catches up and rejoins the in-sync set.
    wait_until(lambda: partition_state(cluster, others[0], "load", 0)[2] == [1, 2, 3], 60,
               "the restarted node back in sync")


def test_whole_cluster_power_loss_loses_no_acknowledged_record(make_cluster):
    cluster = make_cluster(3)
    create_replicated(cluster, "power", 1, 2)
    bootstrap = ",".join(n.bootstrap for n in cluster.nodes.values())
    h = History(bootstrap, "power")
    h.thread.start()
    wait_until(lambda: len(h.acked) > 3000, 60, "acknowledged records")
    for n in cluster.nodes.values():
        n.proc.send_signal(signal.SIGKILL)
    h.stop.set()
    h.thread.join(30)
    acked = dict(h.acked)
    for n in cluster.nodes.values():
        n.kill()
        n.start()
    cluster.wait_for_brokers({1, 2, 3})
    h.acked = acked
    got = read_all(bootstrap, "power", max(acked.values()) + 1)
    check_history(h, got)


def produce_raw(port: int, topic: str, correlation: int) -> int:
    """One acks=all produce straight to a node; its error code."""
    with socket.create_connection(("127.0.0.1", port), timeout=20) as s:
        s.sendall(kw.request(0, 3, correlation, kw.produce_v3(topic, 0, kw.record_batch([b"x"]), acks=-1,
                                                                timeout_ms=3000)))
        return kw.produce_v3_error_code(kw.read_response(s))[0]


def test_min_insync_replicas_refuses_when_too_few_are_in_sync(make_cluster):
    cluster = make_cluster(3)
    create_replicated(cluster, "strict", 1, 3)
    leader = partition_state(cluster, 1, "strict", 0)[0]
    assert produce_raw(cluster.nodes[leader].port, "strict", 1) == 0
    follower = next(n for n in (1, 2, 3) if n != leader)
    cluster.nodes[follower].kill()
    # The follower is fenced and leaves the in-sync set; the leader keeps leading.
    wait_until(lambda: partition_state(cluster, leader, "strict", 0)[2] == sorted({1, 2, 3} - {follower}), 30,
               "the dead follower out of the in-sync set")
    assert produce_raw(cluster.nodes[leader].port, "strict", 2) == 19  # NOT_ENOUGH_REPLICAS
    cluster.nodes[follower].start()
    wait_until(lambda: partition_state(cluster, leader, "strict", 0)[2] == [1, 2, 3], 60,
               "the follower back in sync")
    assert produce_raw(cluster.nodes[leader].port, "strict", 3) == 0
