"""Consumer groups with real clients: membership, rebalances, committed offsets."""
import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

from confluent_kafka import Consumer, KafkaException, TopicPartition

import ck
from waiting import wait_until

GROUP_CONFIG = "group_initial_rebalance_delay_ms = 1000\n"
CLIENTS = Path(__file__).resolve().parents[1] / "clients"


def group_broker(make_broker, shards=2):
    return make_broker(shards=shards, config=GROUP_CONFIG)


def wait_stable_with(bootstrap, group, assigned, what):
    """Waits until `group` is Stable and its members hold `assigned` partitions each (a sorted
    list), asking one AdminClient."""
    admin = ck.admin(bootstrap)

    def stable():
        g = admin.describe_consumer_groups([group])[group].result(10)
        held = sorted(len(m.assignment.topic_partitions) for m in g.members)
        return g.state.name == "STABLE" and held == assigned
    wait_until(stable, 30, what)


def wait_committed_at_end(bootstrap, group, topic, partitions):
    """Waits until `group` committed the end of every partition of `topic`, asking one
    Consumer of the group (it never joins: it only reads offsets)."""
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": group})
    try:
        tps = [TopicPartition(topic, p) for p in range(partitions)]
        ends = [c.get_watermark_offsets(tp, timeout=10)[1] for tp in tps]
        wait_until(lambda: [tp.offset for tp in c.committed(tps, timeout=10)] == ends, 30, "every end committed")
    finally:
        c.close()


class Member:
    """A confluent-kafka group member polling in a thread, recording what it sees."""

    def __init__(self, bootstrap, group, topic, **conf):
        base = {"bootstrap.servers": bootstrap, "group.id": group, "auto.offset.reset": "earliest",
                "enable.auto.commit": False, "session.timeout.ms": 6000, "heartbeat.interval.ms": 500}
        base.update(conf)
        self.c = Consumer(base)
        self.seen = []  # (partition, offset)
        self.revoked = []
        self.assigned = []
        # Kept from the rebalance callbacks: calling consumer.assignment() from another thread
        # while the poll thread runs a callback deadlocks on the GIL.
        self.current = set()
        self.stop = threading.Event()
        self.c.subscribe([topic], on_assign=self._on_assign, on_revoke=self._on_revoke, on_lost=self._on_revoke)
        self.t = threading.Thread(target=self._run, daemon=True)
        self.t.start()

    def _on_assign(self, consumer, partitions):
        self.assigned.append(sorted(p.partition for p in partitions))
        self.current |= {p.partition for p in partitions}

    def _on_revoke(self, consumer, partitions):
        self.revoked.append(sorted(p.partition for p in partitions))
        self.current -= {p.partition for p in partitions}

    def _run(self):
        while not self.stop.is_set():
            m = self.c.poll(0.2)
            if m is None or m.error():
                continue
            self.seen.append((m.partition(), m.offset()))
            self.c.commit(message=m, asynchronous=True)
        # Closed from its own polling thread: the others keep polling meanwhile, so the
        # rebalance this close triggers can complete (as it must in Kafka too).
        self.c.close()
        self.current = set()

    def assignment(self):
        return sorted(self.current)

    def close(self):
        self.stop.set()
        self.t.join()


def test_three_members_share_the_topic_exactly_once(make_broker):
    """Each member commits after every record (asynchronously): its heartbeats go on the same
    connection as its commits, and must not wait behind them (they did, one fsync per commit,
    until a member's session expired and the group rebalanced)."""
    broker = group_broker(make_broker)
    ck.create_topic(broker.bootstrap, "g3", 6)
    ck.produce(broker.bootstrap, "g3", 30_000, 6)
    members = [Member(broker.bootstrap, "three", "g3") for _ in range(3)]
    try:
        wait_until(lambda: sum(len(m.seen) for m in members) >= 30_000, what="30,000 records")
        # A record read twice comes from a rebalance that restarted a partition below its end:
        # once every partition's end is committed, all such reads are done.
        wait_committed_at_end(broker.bootstrap, "three", "g3", 6)
        everything = [s for m in members for s in m.seen]
        assert len(everything) == 30_000, ("no record twice", [(m.assigned, m.revoked) for m in members])
        assert len(set(everything)) == 30_000
        assignments = [m.assignment() for m in members]
        assert all(len(a) == 2 for a in assignments), assignments
        assert sorted(p for a in assignments for p in a) == list(range(6)), "disjoint and complete"
        # Each member read only from its own partitions.
        for m, a in zip(members, assignments):
            assert {p for p, _ in m.seen} <= set(a)
    finally:
        for m in members:
            m.close()


def test_member_leaves_and_the_rest_finish(make_broker):
    broker = group_broker(make_broker)
    ck.create_topic(broker.bootstrap, "gl", 6)
    members = [Member(broker.bootstrap, "leavers", "gl") for _ in range(3)]
    try:
        wait_until(lambda: all(len(m.assignment()) == 2 for m in members), what="three-way assignment")
        members[2].close()  # sends LeaveGroup
        wait_until(lambda: sorted(members[0].assignment() + members[1].assignment()) == list(range(6)),
                   what="the two survivors to own all six partitions")
        ck.produce(broker.bootstrap, "gl", 6_000, 6)
        wait_until(lambda: len({s for m in members[:2] for s in m.seen}) == 6_000, what="the rest of the topic")
    finally:
        for m in members[:2]:
            m.close()


def test_member_dies_and_its_partitions_move_after_session_timeout(make_broker, tmp_path):
    broker = group_broker(make_broker)
    ck.create_topic(broker.bootstrap, "gd", 4)
    # The doomed member runs in its own process, so it can be killed without a LeaveGroup.
    script = tmp_path / "member.py"
    script.write_text(
        "import sys, time\n"
        "from confluent_kafka import Consumer\n"
        f"c = Consumer({{'bootstrap.servers': '{broker.bootstrap}', 'group.id': 'dying', 'session.timeout.ms': 6000,"
        " 'heartbeat.interval.ms': 500, 'auto.offset.reset': 'earliest'})\n"
        "c.subscribe(['gd'])\n"
        "while True:\n    c.poll(0.2)\n")
    doomed = subprocess.Popen([sys.executable, str(script)])
    survivor = None
    try:
        wait_stable_with(broker.bootstrap, "dying", [4], "the doomed member to hold every partition")
        survivor = Member(broker.bootstrap, "dying", "gd")
        wait_until(lambda: len(survivor.assignment()) == 2, what="a two-way split")
        doomed.kill()
        doomed.wait()
        killed_at = time.monotonic()
        wait_until(lambda: survivor.assignment() == [0, 1, 2, 3], timeout_s=40, what="the dead member's partitions")
        # It took the session timeout (6 s), not a LeaveGroup, to notice.
        assert time.monotonic() - killed_at >= 4
        assert "session expired" in broker.log()
    finally:
        doomed.kill()
        if survivor:
            survivor.close()


def test_commit_survives_sigkill(make_broker):
    broker = group_broker(make_broker)
    ck.create_topic(broker.bootstrap, "gc", 3)
    ck.produce(broker.bootstrap, "gc", 3_000, 3)
    c = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "committer", "auto.offset.reset": "earliest",
                  "enable.auto.commit": False})
    c.subscribe(["gc"])
    n = 0
    while n < 500:
        m = c.poll(1.0)
        if m is not None and not m.error():
            n += 1
    # Commit positions of our choosing, mid-partition, as a consumer that processed that far.
    positions = {0: 100, 1: 200, 2: 300}
    c.commit(offsets=[TopicPartition("gc", p, o) for p, o in positions.items()], asynchronous=False)
    c.close()
    broker.kill()
    broker.start()
    c = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "committer", "auto.offset.reset": "earliest",
                  "enable.auto.commit": False})
    committed = c.committed([TopicPartition("gc", p) for p in range(3)], timeout=20)
    assert {tp.partition: tp.offset for tp in committed} == positions
    c.subscribe(["gc"])
    first = {}
    deadline = time.monotonic() + 60
    while len(first) < 3 and time.monotonic() < deadline:
        m = c.poll(0.5)
        if m is not None and not m.error():
            first.setdefault(m.partition(), m.offset())
    c.close()
    assert first == positions, "a new member resumes exactly at the committed offsets"


def test_cooperative_sticky_keeps_unmoved_partitions(make_broker):
    broker = group_broker(make_broker)
    ck.create_topic(broker.bootstrap, "gs", 6)
    conf = {"partition.assignment.strategy": "cooperative-sticky"}
    a = Member(broker.bootstrap, "sticky", "gs", **conf)
    b = None
    try:
        wait_until(lambda: a.assignment() == list(range(6)), what="the first member to own everything")
        b = Member(broker.bootstrap, "sticky", "gs", **conf)
        wait_until(lambda: len(a.assignment()) == 3 and len(b.assignment()) == 3, what="a 3/3 split")
        kept = set(a.assignment())
        # Incremental: a gave up only the partitions that moved to b, never its whole set.
        revoked = {p for r in a.revoked for p in r}
        assert revoked == set(range(6)) - kept, (a.revoked, kept)
        assert kept.isdisjoint(b.assignment())
    finally:
        a.close()
        if b:
            b.close()


def test_static_member_returns_without_rebalance(make_broker):
    broker = group_broker(make_broker)
    ck.create_topic(broker.bootstrap, "gst", 4)
    conf = {"session.timeout.ms": 15000}
    s1 = Member(broker.bootstrap, "statics", "gst", **{"group.instance.id": "s1", **conf})
    s2 = Member(broker.bootstrap, "statics", "gst", **{"group.instance.id": "s2", **conf})
    try:
        wait_until(lambda: len(s1.assignment()) == 2 and len(s2.assignment()) == 2, what="a 2/2 split")
        wait_stable_with(broker.bootstrap, "statics", [2, 2], "the group stable")
        before = s1.assignment()
        s2_revocations = len(s2.revoked)
        s1.close()  # a static member does not send LeaveGroup
        s1 = Member(broker.bootstrap, "statics", "gst", **{"group.instance.id": "s1", **conf})
        wait_until(lambda: s1.assignment() == before, what="s1 to get its partitions back")
        # Had s1's return started a rebalance, s2 would have revoked its partitions (eager
        # protocol) before the group could be stable again.
        wait_stable_with(broker.bootstrap, "statics", [2, 2], "the group stable again")
        assert len(s2.revoked) == s2_revocations, "s2 saw no rebalance"
        assert s2.assignment() and set(s2.assignment()).isdisjoint(before)
    finally:
        s1.close()
        s2.close()


def test_kafka_python_group(make_broker):
    from kafka import KafkaConsumer
    broker = group_broker(make_broker)
    ck.create_topic(broker.bootstrap, "gkp", 4)
    ck.produce(broker.bootstrap, "gkp", 2_000, 4)
    c = KafkaConsumer("gkp", bootstrap_servers=broker.bootstrap, group_id="kp-group", auto_offset_reset="earliest",
                      consumer_timeout_ms=20_000)
    seen = set()
    for m in c:
        seen.add((m.partition, m.offset))
        if len(seen) == 2_000:
            break
    c.commit()
    c.close()
    assert len(seen) == 2_000


def test_kafkajs_group(make_broker):
    broker = group_broker(make_broker)
    ck.create_topic(broker.bootstrap, "gjs", 4)
    ck.produce(broker.bootstrap, "gjs", 2_000, 4)
    env = dict(os.environ, BOOTSTRAP=broker.bootstrap, TOPIC="gjs", COUNT="2000", GROUP="js-group")
    p = subprocess.run(["node", str(CLIENTS / "kafkajs_group.js")], env=env, capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    r = json.loads(p.stdout.strip().splitlines()[-1])
    assert r["unique"] == 2000 and r["committed"] == 2000, r


def test_kcat_group(make_broker):
    broker = group_broker(make_broker)
    ck.create_topic(broker.bootstrap, "gkc", 2)
    ck.produce(broker.bootstrap, "gkc", 200, 2)
    out = subprocess.run(["kcat", "-b", broker.bootstrap, "-G", "kcat-group", "gkc", "-e", "-f", "%p:%o\n",
                          "-X", "auto.offset.reset=earliest"],
                         capture_output=True, text=True, timeout=60).stdout.split()
    assert sorted(out) == sorted(f"{p}:{o}" for p in range(2) for o in range(100))


def test_admin_client_groups(make_broker):
    from confluent_kafka import ConsumerGroupTopicPartitions
    broker = group_broker(make_broker)
    ck.create_topic(broker.bootstrap, "gadm", 2)
    ck.produce(broker.bootstrap, "gadm", 100, 2)
    admin = ck.admin(broker.bootstrap)
    m = Member(broker.bootstrap, "admins", "gadm")
    try:
        wait_until(lambda: len(m.seen) == 100, what="the member to read everything")
        listed = admin.list_consumer_groups().result(timeout=10)
        assert "admins" in {g.group_id for g in listed.valid}
        desc = admin.describe_consumer_groups(["admins"])["admins"].result(timeout=10)
        assert desc.state.name == "STABLE" and len(desc.members) == 1
        assert sorted(tp.partition for tp in desc.members[0].assignment.topic_partitions) == [0, 1]
        # Deleting a group with members fails.
        try:
            admin.delete_consumer_groups(["admins"])["admins"].result(timeout=10)
            raise AssertionError("deleted a live group")
        except KafkaException as e:
            assert e.args[0].code() == 68, e  # NON_EMPTY_GROUP
    finally:
        m.close()
    wait_until(lambda: admin.describe_consumer_groups(["admins"])["admins"].result(timeout=10).state.name == "EMPTY",
               what="the group to empty")
    offsets = admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions("admins")])["admins"].result(timeout=10)
    assert {(tp.partition, tp.offset) for tp in offsets.topic_partitions} == {(0, 50), (1, 50)}
    admin.alter_consumer_group_offsets([ConsumerGroupTopicPartitions("admins", [TopicPartition("gadm", 0, 7)])])[
        "admins"].result(timeout=10)
    offsets = admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions("admins")])["admins"].result(timeout=10)
    assert {(tp.partition, tp.offset) for tp in offsets.topic_partitions} == {(0, 7), (1, 50)}
    admin.delete_consumer_groups(["admins"])["admins"].result(timeout=10)
    listed = admin.list_consumer_groups().result(timeout=10)
    assert "admins" not in {g.group_id for g in listed.valid}
