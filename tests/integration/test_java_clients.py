"""Kafka 4.4's Java clients against Sluice (tests/java/JavaClients.java, run with Java's
single-file launcher and the jars scripts/kafka-install fetched): an idempotent acks=all
producer, a transactional producer, a consumer group of two, the AdminClient's calls that
Kafka's tools do not already make, and fenceProducers; on one node and on three at replication
factor 3. What each printed is checked against the log, read back with confluent-kafka."""
from pathlib import Path

import pytest
from confluent_kafka import Producer

import ck
import kafka_tools
from client_programs import acked_is_the_log, log_ends, read_text, run_json
from waiting import wait_until

pytestmark = pytest.mark.skipif(not kafka_tools.installed(), reason="scripts/kafka-install has not run")

PROGRAM = Path(__file__).resolve().parents[1] / "java" / "JavaClients.java"


def java(*args) -> dict:
    """Runs one JavaClients command; the JSON object it printed."""
    return run_json(kafka_tools.java_command(PROGRAM, *args))


def in_sync(bootstrap, topic):
    """Whether every replica of `topic` is in sync."""
    admin = ck.admin(bootstrap)
    described = admin.list_topics(topic, timeout=10).topics[topic].partitions.values()
    return all(sorted(p.isrs) == sorted(p.replicas) for p in described)


def producer_and_group(bootstrap, topic, partitions, records):
    """The idempotent producer's acknowledgements are exactly the log; a group of two reads every
    record, each once unless a commit lost a race with a rebalance, and commits the end."""
    log = acked_is_the_log(java("produce", bootstrap, topic, records)["acked"], bootstrap, topic, partitions)

    group = java("group", bootstrap, topic, f"{topic}-readers", records, 2)
    read = [(k, v, p, o) for _, k, v, p, o in group["read"]]
    assert set(read) == set(log), "the group read other records than the log holds"
    if group["commits_failed"] == 0:
        assert len(read) == len(set(read)), "a record read twice with every commit taken"
    assert {m for m, *_ in group["read"]} == {0, 1}, "both members read"
    assert group["committed"] == log_ends(topic, log)


def transactional(bootstrap, topic, replicas=1):
    ck.create_topic(bootstrap, topic, 1, replicas=replicas)
    assert java("transactions", bootstrap, topic, f"{topic}-txn")["sent"] == 18
    committed = [v for _, v, _, _ in read_text(bootstrap, topic, 1)]
    assert committed == [f"commit-{i}" for i in range(10)] + [f"commit-{i}" for i in range(15, 18)], committed
    everything = read_text(bootstrap, topic, 1, "read_uncommitted")
    # 10 records, a marker, 5, a marker, 3, a marker.
    assert [o for *_, o in everything] == [*range(10), *range(11, 16), *range(17, 20)], everything


# ---- one node -------------------------------------------------------------------------------



def test_java_idempotent_producer_and_a_group_of_two(node):
    ck.create_topic(node.bootstrap, "java-orders", 3)
    producer_and_group(node.bootstrap, "java-orders", 3, 3000)


def test_java_transactional_producer_commits_and_aborts(node):
    transactional(node.bootstrap, "java-txn")


def test_java_admin_client_calls(node):
    ck.create_topic(node.bootstrap, "java-admin", 2)
    plain = Producer({"bootstrap.servers": node.bootstrap, "acks": "all"})
    for i in range(5):
        plain.produce("java-admin", key=b"k", value=b"%d" % i, partition=0)
    assert plain.flush(30) == 0
    # An open transaction holds the last stable offset at 5 while the high watermark is 8.
    open_txn = Producer({"bootstrap.servers": node.bootstrap, "transactional.id": "java-admin-open"})
    open_txn.init_transactions(30)
    open_txn.begin_transaction()
    for i in range(3):
        open_txn.produce("java-admin", key=b"t", value=b"%d" % i, partition=0)
    assert open_txn.flush(30) == 0

    seen = java("admin", node.bootstrap, "java-admin", "java-admin-group")
    open_txn.abort_transaction(30)
    assert seen["cluster"]["nodes"] == [0] and seen["cluster"]["controller"] == 0, seen["cluster"]
    assert seen["finalized_features"] == {"metadata.version": 2, "transaction.version": 2}, seen
    assert seen["described_by_id"] == {"name": "java-admin", "partitions": 2}
    assert seen["list_offsets"] == {"read_uncommitted": 8, "read_committed": 5, "earliest": 0}, seen["list_offsets"]
    assert seen["retention_ms"] == "123456789"
    assert seen["altered_offsets"] == {"java-admin-0": [2, "by-admin"], "java-admin-1": [1, ""]}
    assert seen["offsets_after_delete"] == {"java-admin-0": 2}
    assert seen["scram"] == [["SCRAM_SHA_512", 8192]]


def test_java_admin_fences_a_transactional_producer(node):
    ck.create_topic(node.bootstrap, "java-fenced", 1)
    assert java("fence", node.bootstrap, "java-fenced", "java-zombie") == {"commit": "ProducerFencedException"}
    assert read_text(node.bootstrap, "java-fenced", 1) == []


# ---- three nodes, replication factor 3 ------------------------------------------------------



def test_java_clients_on_three_nodes_at_replication_factor_3(three):
    bootstrap = ",".join(n.bootstrap for n in three.nodes.values())
    ck.create_topic(bootstrap, "java-replicated", 3, replicas=3)
    wait_until(lambda: in_sync(bootstrap, "java-replicated"), 30, "every replica in sync")
    producer_and_group(bootstrap, "java-replicated", 3, 3000)
    transactional(bootstrap, "java-replicated-txn", 3)
