"""The broker's bounds derived from its file-descriptor budget (topics, partitions per shard) and
its bound on consumer groups: hitting one is a clear error for the client, a log line and a
metric for the operator, and nothing already served is harmed."""
import socket

import ck
import kafka_wire as kw
from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import AdminClient, NewPartitions, NewTopic
from metrics import metrics_config, total

# With 2,000 descriptors and 2 shards the budget leaves (2000 - 256 - 2*64) / 2 = 808 for
# partitions, 4 each: 202 partitions, 101 per shard (see src/server/fd_budget.rs).
NOFILE = 2000
PER_SHARD = 101


def create(admin: AdminClient, topic: str, partitions: int):
    futures = admin.create_topics([NewTopic(topic, num_partitions=partitions, replication_factor=1)])
    return futures[topic].result(timeout=30)


def test_partitions_past_the_descriptor_budget_are_refused_by_name(make_broker):
    cfg, metrics = metrics_config()
    broker = make_broker(shards=2, config=cfg, nofile=NOFILE)
    log = broker.log()
    assert f"descriptor limit {NOFILE}: at most {PER_SHARD} partitions per shard" in log
    assert "cannot hold max_connections (10000)" in log, "the cut connection reserve is reported"
    admin = ck.admin(broker.bootstrap)
    # __consumer_offsets holds 16 (8 a shard); 150 more fit, 75 a shard.
    create(admin, "fits", 150)
    try:
        create(admin, "too-many", 60)
        raise AssertionError("a topic past the budget was created")
    except KafkaException as e:
        err = e.args[0]
        assert err.code() == KafkaError.POLICY_VIOLATION, err
        assert "max_partitions_per_shard" in err.str(), err.str()
    grow = admin.create_partitions([NewPartitions("fits", 200)])
    try:
        grow["fits"].result(timeout=30)
        raise AssertionError("partitions past the budget were added")
    except KafkaException as e:
        assert e.args[0].code() == KafkaError.POLICY_VIOLATION
    md = admin.list_topics(timeout=10)
    assert "too-many" not in md.topics
    assert len(md.topics["fits"].partitions) == 150
    # Every partition that exists opened and serves: a produce to the last one is acknowledged.
    assert ck.produce_values(broker.bootstrap, "fits", 149, [b"x"]) == [0]
    assert total(metrics, "sluice_descriptor_limit") == NOFILE
    assert total(metrics, "sluice_segment_descriptors") >= 2 * 166
    assert "EMFILE" not in broker.log() and "Too many open files" not in broker.log()


def test_max_topics_refuses_one_more_topic(make_broker):
    broker = make_broker(shards=1, config="max_topics = 3\n")
    admin = ck.admin(broker.bootstrap)
    create(admin, "one", 1)  # __consumer_offsets is the first
    create(admin, "two", 1)
    try:
        create(admin, "three", 1)
        raise AssertionError("a topic past max_topics was created")
    except KafkaException as e:
        assert e.args[0].code() == KafkaError.POLICY_VIOLATION
        assert "max_topics" in e.args[0].str()


def test_a_new_group_past_max_groups_per_shard_is_refused_loudly(make_broker):
    cfg, metrics = metrics_config("max_groups_per_shard = 1\n")
    broker = make_broker(shards=1, config=cfg)
    s = socket.create_connection(("127.0.0.1", broker.port), timeout=10)
    s.sendall(kw.request(11, 0, 1, kw.join_group_v0("first")))
    corr, error, member = kw.join_group_v0_response(kw.read_response(s))
    assert (corr, error) == (1, 0), "the first group is admitted"
    s.sendall(kw.request(11, 0, 2, kw.join_group_v0("second")))
    corr, error, _ = kw.join_group_v0_response(kw.read_response(s))
    assert (corr, error) == (2, 15), "COORDINATOR_NOT_AVAILABLE: retriable once there is room"
    assert total(metrics, "sluice_groups_refused_total") == 1
    assert "refused 1 new group members or groups" in broker.log()
    # The admitted group still works: its member rejoins.
    s.sendall(kw.request(11, 0, 3, kw.join_group_v0("first", member_id=member)))
    assert kw.join_group_v0_response(kw.read_response(s))[:2] == (3, 0)
