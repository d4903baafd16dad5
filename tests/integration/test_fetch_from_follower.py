"""KIP-392: consumers fetch from the closest replica. Three nodes in racks r1, r2 and r3; nodes 1
and 2 select replicas by rack (`fetch.replica_selector = "rack-aware"`, Kafka's
`RackAwareReplicaSelector`), node 3 keeps Kafka's default (the leader serves everyone).

A leader answers a Fetch v11+ that names a rack it is not in with the in-sync replica of that
rack to read from (`preferred_read_replica`) and no records; that follower serves the consumer
below its own high watermark. Checked with raw requests (Kafka's own schemas, tests/kafka/
protocol.py) and end to end with librdkafka's `client.rack`, whose reads must come back
byte-equal from the follower."""

import ck
import pytest
from cluster import FAST, Cluster
from confluent_kafka import KafkaException, Producer
from confluent_kafka.admin import NewTopic
from metrics import metrics_config, total
from waiting import wait_until

import protocol

NOT_LEADER_OR_FOLLOWER, OFFSET_OUT_OF_RANGE = 6, 1
RECORDS = 300


@pytest.fixture
def racks(tmp_path):
    """The three-node cluster, with each node's metrics address."""
    configs = {i: metrics_config() for i in (1, 2, 3)}

    def config(i):
        selector = "rack-aware" if i in (1, 2) else "leader"
        return f'rack = "r{i}"\n{configs[i][0]}{FAST}[fetch]\nreplica_selector = "{selector}"\n'

    c = Cluster(tmp_path / "cluster", 3, config=config).start()
    try:
        c.wait_for_brokers({1, 2, 3})
        c.metrics = {i: configs[i][1] for i in configs}
        yield c
    finally:
        c.stop()


def create(c: Cluster, name: str, replicas: list[int]):
    """One partition on `replicas` (the first leads), all of them in sync."""
    def created():
        admin = c.admin(1)
        try:
            admin.create_topics([NewTopic(name, 1, replica_assignment=[replicas])])[name].result(15)
        except KafkaException as e:
            # A retry after a timed-out attempt that was committed finds the topic there.
            return "already exists" in str(e).lower()
        return True

    wait_until(created, timeout_s=30, what=f"{name} created")
    wait_in_sync(c, name, replicas)


def wait_in_sync(c: Cluster, name: str, replicas: list[int]):
    """Until every node is live and says `name` is led by its first replica with all of them in
    sync (on this shared machine a loaded follower can drop out of the ISR, or a node miss
    its heartbeats, for a moment: a leader sends consumers only to a live in-sync replica)."""
    def settled(i):
        parts = c.metadata(i).topics.get(name)
        return bool(parts) and parts[0][2] == replicas[0] and sorted(parts[0][4]) == sorted(replicas)

    c.wait_for_brokers({1, 2, 3})
    wait_until(lambda: all(settled(i) for i in (1, 2, 3)), timeout_s=30,
               what=f"{name} led by {replicas[0]} with every replica in sync")


def produce(c: Cluster, topic: str) -> list[tuple[bytes, bytes, list]]:
    sent = [(b"k%d" % i, b"value-%d-" % i + bytes(range(256)) * (i % 5), [("h", b"%d" % i)])
            for i in range(RECORDS)]
    p = Producer({"bootstrap.servers": c.nodes[1].bootstrap, "acks": "all", "linger.ms": 5})
    for k, v, h in sent:
        p.produce(topic, key=k, value=v, headers=h, partition=0)
    assert p.flush(30) == 0
    return sent


def fetch(c: Cluster, node: int, topic: str, offset: int, version: int = 11, rack: str = "") -> dict:
    body = {"ReplicaId": -1, "MaxWaitMs": 0, "MinBytes": 1, "MaxBytes": 1 << 20, "IsolationLevel": 0,
            "SessionId": 0, "SessionEpoch": -1, "RackId": rack,
            "Topics": [{"Topic": topic, "Partitions": [{"Partition": 0, "FetchOffset": offset,
                                                        "PartitionMaxBytes": 1 << 20}]}]}
    with protocol.Connection("127.0.0.1", c.nodes[node].port) as conn:
        return conn.send("Fetch", version, body)["Responses"][0]["Partitions"][0]


def test_a_leader_sends_a_consumer_to_the_in_sync_replica_of_its_rack(racks):
    c = racks
    create(c, "near", [1, 2, 3])
    produce(c, "near")
    # Each follower learns the leader's high watermark with its next fetch.
    for node in (2, 3):
        wait_until(lambda node=node: fetch(c, node, "near", 0, rack=f"r{node}")["HighWatermark"] == RECORDS,
                   timeout_s=20, what=f"node {node} knows the high watermark")
    wait_in_sync(c, "near", [1, 2, 3])
    sent_there = fetch(c, 1, "near", 0, rack="r2")
    assert (sent_there["ErrorCode"], sent_there["PreferredReadReplica"]) == (0, 2)
    assert not sent_there["Records"], "a consumer sent elsewhere gets no records"
    assert (sent_there["HighWatermark"], sent_there["LogStartOffset"]) == (RECORDS, 0)
    assert fetch(c, 1, "near", 0, rack="r3")["PreferredReadReplica"] == 3
    from_leader = fetch(c, 1, "near", 0, rack="r1")
    assert (from_leader["ErrorCode"], from_leader["PreferredReadReplica"]) == (0, -1)
    assert from_leader["Records"], "the leader serves its own rack"
    for other in ("", "r9"):  # no rack, or one with no replica: the leader serves
        answer = fetch(c, 1, "near", 0, rack=other)
        assert (answer["PreferredReadReplica"], answer["Records"]) == (-1, from_leader["Records"])
    assert fetch(c, 1, "near", 0, version=10, rack="r2")["Records"] == from_leader["Records"]

    # The follower serves the same bytes from v11, and refuses older consumers as Kafka does.
    from_follower = fetch(c, 2, "near", 0, rack="r2")
    assert (from_follower["ErrorCode"], from_follower["PreferredReadReplica"]) == (0, -1)
    assert from_follower["Records"] == from_leader["Records"]
    assert fetch(c, 2, "near", 0, version=10)["ErrorCode"] == NOT_LEADER_OR_FOLLOWER
    at_end = fetch(c, 2, "near", RECORDS, rack="r2")
    assert (at_end["ErrorCode"], at_end["Records"] or b"") == (0, b"")
    assert fetch(c, 2, "near", RECORDS + 1, rack="r2")["ErrorCode"] == OFFSET_OUT_OF_RANGE

    # Node 3 keeps Kafka's default selector: as the leader, it serves every rack itself.
    create(c, "led-by-3", [3, 1, 2])
    produce(c, "led-by-3")
    answer = fetch(c, 3, "led-by-3", 0, rack="r1")
    assert (answer["ErrorCode"], answer["PreferredReadReplica"]) == (0, -1) and answer["Records"]


def test_librdkafka_with_client_rack_reads_every_record_from_its_racks_follower(racks):
    c = racks
    create(c, "racked", [1, 2, 3])
    sent = produce(c, "racked")
    before = {i: total(c.metrics[i], "sluice_follower_consumer_reads_total") for i in (1, 2, 3)}
    got = ck.consume(c.nodes[1].bootstrap, "racked", [0], RECORDS,
                     extra={"client.rack": "r3", "topic.metadata.refresh.interval.ms": 1000})[0]
    assert [g[0] for g in got] == list(range(RECORDS)), "every offset once, in order"
    assert [(k, v, h) for _, k, v, h, _ in got] == sent, "byte-equal keys, values and headers"
    assert total(c.metrics[1], "sluice_preferred_replica_redirects_total") > 0
    served = {i: total(c.metrics[i], "sluice_follower_consumer_reads_total") - before[i] for i in (1, 2, 3)}
    assert served[3] > 0 and served[2] == 0, f"reads served as a follower, by node: {served}"
