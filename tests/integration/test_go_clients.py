"""franz-go (kgo, kadm, GroupTransactSession) and sarama against Sluice (tests/go: Go programs
built by scripts/test, their modules fetched once into tests/go/.modcache): idempotent acks=all
producers, consumer groups, exactly-once consume-transform-produce, and the admin calls; on
one node and on three at replication factor 3. What each printed is checked against the log,
read back with confluent-kafka."""
from pathlib import Path

import pytest

import ck
from client_programs import acked_is_the_log, log_ends, read_text, run_json

BIN = Path(__file__).resolve().parents[1] / "go" / "bin"
pytestmark = pytest.mark.skipif(not (BIN / "franz").exists() or not (BIN / "saramacheck").exists(),
                                reason="scripts/test builds tests/go")


def go(program, *args) -> dict:
    return run_json([BIN / program, *args])


def produced_exactly(bootstrap, program, topic, partitions, count):
    """`program`'s idempotent producer: its acknowledgements are exactly the log, gapless."""
    return acked_is_the_log(go(program, "produce", bootstrap, topic, count)["acked"], bootstrap, topic, partitions)


def group_read_everything(bootstrap, program, topic, log):
    """A group member of `program` reads every record once and commits the log's end."""
    group = go(program, "group", bootstrap, topic, f"{topic}-{program}", len(log))
    assert sorted(map(tuple, group["read"])) == sorted(log)
    assert group["committed"] == log_ends(topic, log)
    return group


def exactly_once(bootstrap, topic, count, replicas=1):
    """franz-go's GroupTransactSession copies `count` records of IN to OUT upper-cased, in
    transactions with their offsets: OUT holds each once, committed."""
    ck.create_topic(bootstrap, f"{topic}-in", 2, replicas=replicas)
    ck.create_topic(bootstrap, f"{topic}-out", 2, replicas=replicas)
    source = produced_exactly(bootstrap, "franz", f"{topic}-in", 2, count)
    done = go("franz", "transact", bootstrap, f"{topic}-in", f"{topic}-out", f"{topic}-eos", count)
    assert done["transformed"] == count and done["transactions"] >= 1, done
    copied = read_text(bootstrap, f"{topic}-out", 2)
    assert sorted((k, v) for k, v, _, _ in copied) == sorted((k, v.upper()) for k, v, _, _ in source)


# ---- one node -------------------------------------------------------------------------------



def test_franz_go_producer_group_and_lag(node):
    ck.create_topic(node.bootstrap, "franz-orders", 3)
    log = produced_exactly(node.bootstrap, "franz", "franz-orders", 3, 2000)
    assert group_read_everything(node.bootstrap, "franz", "franz-orders", log)["lag"] == 0


def test_franz_go_group_transact_session_is_exactly_once(node):
    exactly_once(node.bootstrap, "franz-eos", 600)


def test_franz_go_kadm(node):
    seen = go("franz", "admin", node.bootstrap, "franz-admin", "franz-orders-franz")
    assert seen["brokers"] == [0] and seen["cluster_id"], seen
    assert seen["create_again"].startswith("TOPIC_ALREADY_EXISTS"), seen["create_again"]
    assert seen["before"] == {"partitions": 2, "configs": {"retention.ms": "3600000"},
                              "end_offsets": {"0": 0, "1": 0}, "has_id": True}, seen["before"]
    assert seen["after"] == {"partitions": 3, "configs": {"retention.ms": "3600000", "segment.bytes": "1048576"},
                             "end_offsets": {"0": 0, "1": 0, "2": 0}, "has_id": True}, seen["after"]


def test_sarama_producer_group_and_cluster_admin(node):
    ck.create_topic(node.bootstrap, "sarama-orders", 3)
    log = produced_exactly(node.bootstrap, "saramacheck", "sarama-orders", 3, 500)
    group_read_everything(node.bootstrap, "saramacheck", "sarama-orders", log)
    seen = go("saramacheck", "admin", node.bootstrap, "sarama-admin")
    assert seen["brokers"] == [0] and seen["controller"] == 0, seen
    assert "already exists" in seen["create_again"], seen
    assert seen["listed_partitions"] == 3 and seen["described_partitions"] == 3, seen
    assert seen["configs"] == {"retention.ms": "3600000", "segment.bytes": "1048576"}, seen


# ---- three nodes, replication factor 3 ------------------------------------------------------



def test_go_clients_on_three_nodes_at_replication_factor_3(three):
    bootstrap = ",".join(n.bootstrap for n in three.nodes.values())
    ck.create_topic(bootstrap, "go-replicated", 3, replicas=3)
    log = produced_exactly(bootstrap, "franz", "go-replicated", 3, 2000)
    group_read_everything(bootstrap, "franz", "go-replicated", log)
    exactly_once(bootstrap, "go-replicated-eos", 600, 3)
    ck.create_topic(bootstrap, "sarama-replicated", 3, replicas=3)
    log = produced_exactly(bootstrap, "saramacheck", "sarama-replicated", 3, 300)
    group_read_everything(bootstrap, "saramacheck", "sarama-replicated", log)
