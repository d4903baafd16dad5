"""Issue 16: replicated partitions. Followers pull from their leader, acks=all is answered once
every in-sync replica has fsynced the records, and the controller moves leadership to an
in-sync replica when a leader dies.

Real `sluice serve` processes (`cluster.py`), an idempotent librdkafka producer whose every send
and acknowledgement is recorded, and a checker over what a consumer reads back afterwards."""
import collections
import logging
import shutil
import signal
import socket
import threading
import time


import kafka_wire as kw
import pytest
from cluster import REPLICATED, Cluster
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from history import History, check_history, read_all
from waiting import wait_until

import protocol  # Kafka's own schemas: any request at any version (on the path by conftest)

INVALID_REPLICATION_FACTOR = 38



@pytest.fixture
def make_cluster(tmp_path):
    made = []

    def make(voters: int, config: str = REPLICATED, start: bool = True, brokers: int = 0,
             data_root=None) -> Cluster:
        c = Cluster(tmp_path / f"cluster-{len(made)}", voters, brokers, config, data_root)
        made.append(c)
        return c.start() if start else c

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
    cluster.alter_topic_config(1, topic, {"min.insync.replicas": str(min_isr)})
    for p in range(partitions):
        wait_until(lambda p=p: all(
            (s := partition_state(cluster, n.node_id, topic, p)) and s[0] > 0 and s[2] == [1, 2, 3]
            for n in cluster.live()), 30, f"{topic}[{p}] led with every replica in sync")


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


def test_whole_cluster_power_loss_loses_no_acknowledged_record(lazy_disk, make_cluster):
    """Every node's data dir is on one disk that loses what was not synced (lazyfs.py): all
    nodes are SIGKILLed at once, then the power is cut, then they start again."""
    # Group commit waits 50 ms before each pass, so that some written bytes always await their
    # fsync and the cut has something to take.
    cluster = make_cluster(3, REPLICATED + "[log]\nflush_interval_ms = 50\n", data_root=lazy_disk.mount)
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
    assert lazy_disk.cut() > 0, "the cut lost nothing, so it tested nothing"
    for n in cluster.nodes.values():
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
    # The other follower knows the in-sync set is short too, but it does not lead: it sends the
    # producer back to Metadata (NOT_LEADER_OR_FOLLOWER) rather than have it retry there, as
    # Kafka checks leadership first.
    other = next(n for n in (1, 2, 3) if n not in (leader, follower))
    wait_until(lambda: partition_state(cluster, other, "strict", 0)[2] == sorted({1, 2, 3} - {follower}), 30,
               "the other follower told of the shorter in-sync set")
    assert produce_raw(cluster.nodes[other].port, "strict", 3) == 6  # NOT_LEADER_OR_FOLLOWER
    cluster.nodes[follower].start()
    wait_until(lambda: partition_state(cluster, leader, "strict", 0)[2] == [1, 2, 3], 60,
               "the follower back in sync")
    assert produce_raw(cluster.nodes[leader].port, "strict", 4) == 0


LOG_LINES_MAX = 300


class KeepLines(logging.Handler):
    """Keeps a logger's lines in a bounded deque."""

    def __init__(self, lines: collections.deque):
        super().__init__()
        self.lines = lines

    def emit(self, record):
        self.lines.append(f"{record.created:.3f} {record.getMessage()}")


class GroupReader:
    """A consumer in group `group` reading `topic` in a thread: every record it gets, and every
    error the client reports to the application."""

    def __init__(self, bootstrap: str, topic: str, group: str):
        # The client's own account of its fetching, the last lines only, for a reader that stalls.
        self.log = collections.deque(maxlen=LOG_LINES_MAX)
        logger = logging.getLogger(f"reader-{group}")
        logger.propagate = False
        logger.setLevel(logging.DEBUG)
        logger.addHandler(KeepLines(self.log))
        self.consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group,
                                  "auto.offset.reset": "earliest", "enable.auto.commit": True,
                                  "auto.commit.interval.ms": 200, "topic.metadata.refresh.interval.ms": 500,
                                  "debug": "fetch,topic,consumer", "logger": logger})
        # What the group assigned, as the poll thread's callbacks saw it (the consumer's own
        # methods block while another thread polls it).
        self.assigned = []
        self.consumer.subscribe([topic], on_assign=lambda _c, ps: self.assigned.append(("+", ps)),
                                on_revoke=lambda _c, ps: self.assigned.append(("-", ps)))
        self.topic, self.group = topic, group
        self.got, self.errors = [], []
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self.run, daemon=True)
        self.thread.start()

    def run(self):
        while not self.stop.is_set():
            msg = self.consumer.poll(0.2)
            if msg is None:
                continue
            if msg.error() is not None:
                self.errors.append(msg.error())
            else:
                self.got.append((msg.offset(), msg.value()))

    def state(self, cluster: Cluster, end: int) -> str:
        """Where the reader stands, for a test that waited for it in vain."""
        try:
            admin = cluster.admin(1)  # held: a client dropped at once never completes its future
            group = admin.describe_consumer_groups([self.group])[self.group].result(10)
            group = (group.state, [(m.member_id, m.assignment.topic_partitions) for m in group.members])
        except Exception as e:  # noqa: BLE001 (a post-mortem reports whatever it can)
            group = repr(e)
        ends = []
        for n in (1, 2, 3):
            try:
                ends.append(read_committed_end(cluster, n, self.topic))
            except Exception as e:  # noqa: BLE001 (as above)
                ends.append(repr(e))
        return (f"end {end}, read up to {self.got[-1][0] if self.got else None}, assignments "
                f"{self.assigned[-4:]}, group {group}, errors "
                f"{self.errors[:3]}, {[partition_state(cluster, n, self.topic, 0) for n in (1, 2, 3)]}, "
                f"read_committed ends by node {ends}, the client's last lines:\n" + "\n".join(self.log))

    def close(self):
        self.stop.set()
        self.thread.join(30)
        self.consumer.unsubscribe()
        self.consumer.poll(0)
        self.consumer.close()


def list_offset(cluster: Cluster, node: int, topic: str, timestamp: int, isolation: int = 0) -> dict:
    """Node `node`'s ListOffsets (v2) answer for partition 0 at `timestamp` (-1 latest, -2
    earliest), read_committed when `isolation` is 1."""
    body = {"ReplicaId": -1, "IsolationLevel": isolation,
            "Topics": [{"Name": topic, "Partitions": [{"PartitionIndex": 0, "Timestamp": timestamp}]}]}
    with protocol.Connection("127.0.0.1", cluster.nodes[node].port) as conn:
        return conn.send("ListOffsets", 2, body)["Topics"][0]["Partitions"][0]


def read_committed_end(cluster: Cluster, node: int, topic: str) -> tuple[int, int]:
    """(error, offset) of node `node`'s answer for partition 0's last stable offset."""
    p = list_offset(cluster, node, topic, -1, isolation=1)
    return p["ErrorCode"], p["Offset"]


def all_in_sync(cluster: Cluster, topic: str, partitions: int) -> bool:
    try:
        return all(partition_state(cluster, n.node_id, topic, p)[2] == [1, 2, 3]
                   for n in cluster.live() for p in range(partitions))
    except Exception:
        return False


def test_rolling_restart_under_load_shows_clients_no_errors(make_cluster):
    cluster = make_cluster(3)
    create_replicated(cluster, "rolling", 1, 2)
    bootstrap = ",".join(n.bootstrap for n in cluster.nodes.values())
    h = History(bootstrap, "rolling")
    h.thread.start()
    reader = GroupReader(bootstrap, "rolling", "rollers")
    wait_until(lambda: len(h.acked) > 500 and len(reader.got) > 0, 60, "load flowing")
    for node in (1, 2, 3):
        before = len(h.acked)
        assert cluster.nodes[node].stop() == 0, "a clean exit after SIGTERM"
        cluster.nodes[node].start()
        wait_until(lambda: all_in_sync(cluster, "rolling", 1), 60, f"node {node} back in sync")
        wait_until(lambda: len(h.acked) > before + 500, 60, "acknowledgements after the restart")
    finish_without_client_errors(cluster, h, reader, bootstrap, "rolling")


def finish_without_client_errors(cluster: Cluster, h: History, reader: GroupReader, bootstrap: str,
                                 topic: str):
    """Ends a load: the producer saw no delivery error, the group read every acknowledged
    record (a rebalance may deliver some twice) with no error, and the log holds exactly what
    was acknowledged."""
    h.finish()
    end = max(h.acked.values()) + 1
    wait_until(lambda: reader.got and reader.got[-1][0] >= end - 1, 60, "the group read everything",
               lambda: reader.state(cluster, end))
    reader.close()
    assert not h.failed, f"delivery errors: {h.failed[:3]}"
    assert not reader.errors, f"consumer errors: {reader.errors[:3]}"
    check_history(h, read_all(bootstrap, topic, end))
    assert set(h.acked) <= {v for _, v in reader.got}


def committed(bootstrap: str, group: str, topic: str) -> int:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False})
    try:
        return c.committed([TopicPartition(topic, 0)], timeout=20)[0].offset
    finally:
        c.close()


# While the coordinator moves, Kafka answers these and its clients find the coordinator again.
COORDINATOR_MOVING = (KafkaError.COORDINATOR_LOAD_IN_PROGRESS, KafkaError.COORDINATOR_NOT_AVAILABLE,
                      KafkaError.NOT_COORDINATOR)


def committed_once_moved(bootstrap: str, group: str, topic: str):
    """`committed`, or None while the group's coordinator is moving."""
    try:
        return committed(bootstrap, group, topic)
    except KafkaException as e:
        if e.args[0].code() in COORDINATOR_MOVING:
            return None
        raise


def test_coordinator_failover_keeps_committed_offsets_and_the_group_carries_on(make_cluster):
    cluster = make_cluster(3)
    create_replicated(cluster, "orders", 1, 2)
    bootstrap = ",".join(n.bootstrap for n in cluster.nodes.values())
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True})
    for i in range(200):
        producer.produce("orders", value=f"o{i}".encode(), partition=0)
    assert producer.flush(30) == 0
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "billing", "auto.offset.reset": "earliest",
                  "enable.auto.commit": False})
    c.subscribe(["orders"])
    seen = []
    while len(seen) < 120:
        msg = c.poll(1)
        if msg is not None and msg.error() is None:
            seen.append(msg)
    c.commit(message=seen[119], asynchronous=False)
    c.unsubscribe()
    c.poll(0)
    c.close()
    assert committed(bootstrap, "billing", "orders") == 120
    # The coordinator is the leader of the group's __consumer_offsets partition.
    admin = cluster.admin(1)  # outlives its futures
    coordinator = admin.describe_consumer_groups(["billing"])["billing"].result(20).coordinator.id
    cluster.nodes[coordinator].kill()
    survivors = ",".join(n.bootstrap for n in cluster.live())
    wait_until(lambda: committed_once_moved(survivors, "billing", "orders") == 120, 60,
               "the committed offset served by the new coordinator")
    # The group carries on from there.
    c = Consumer({"bootstrap.servers": survivors, "group.id": "billing", "enable.auto.commit": False})
    c.subscribe(["orders"])
    msg = None
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and (msg is None or msg.error() is not None):
        msg = c.poll(1)
    c.unsubscribe()
    c.poll(0)
    c.close()
    assert msg is not None and msg.error() is None and msg.offset() == 120 and msg.value() == b"o120"


def check_an_isolated_leader(cluster: Cluster, topic: str, isolate, heal, heal_before_answer: bool,
                             value_bytes: int = 0, disk=None):
    """The frozen-leader and cut-link tests: the leader, isolated from the others, takes an
    acks=all produce but never acknowledges it; the others elect a new leader and go on; healed,
    the old leader cuts the record it took and every replica holds the same log. With `disk`
    (the lazy disk under every node) the power is then cut on all nodes, and after the restart
    the logs are still identical and the cut record still gone."""
    create_replicated(cluster, topic, 1, 2)
    leader = partition_state(cluster, 1, topic, 0)[0]
    others = [n for n in (1, 2, 3) if n != leader]
    bootstrap = ",".join(cluster.nodes[n].bootstrap for n in others)

    def produce(values):
        # A new client each time learns the current leader at once (one that sent to the
        # isolated node would wait out those requests first).
        producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True})
        for v in values:
            producer.produce(topic, value=v, partition=0)
        assert producer.flush(60) == 0

    values = [f"{topic}{i}".encode() + b"v" * value_bytes for i in range(200)]
    produce(values[:100])
    s = socket.create_connection(("127.0.0.1", cluster.nodes[leader].port), timeout=60)
    isolate(cluster.nodes[leader])
    s.sendall(kw.request(0, 3, 1, kw.produce_v3(topic, 0, kw.record_batch([b"stale"]), acks=-1,
                                                timeout_ms=15000)))
    wait_until(lambda: (st := partition_state(cluster, others[0], topic, 0)) and st[0] in others, 30,
               "a new leader among the others")
    produce(values[100:])
    if heal_before_answer:
        heal(cluster.nodes[leader])
    code = kw.produce_v3_error_code(kw.read_response(s))[0]
    s.close()
    assert code in (6, 7), f"the isolated leader answered {code}, not NOT_LEADER_OR_FOLLOWER or a timeout"
    if not heal_before_answer:
        heal(cluster.nodes[leader])
    wait_until(lambda: all_in_sync(cluster, topic, 1), 60, "the old leader back in sync")
    path = lambda n: cluster.nodes[n].data_dir / f"{topic}-0" / "00000000000000000000.log"  # noqa: E731
    wait_until(lambda: len({path(n).read_bytes() for n in (1, 2, 3)}) == 1, 30, "identical logs on every replica")
    assert b"stale" not in path(leader).read_bytes()
    if disk is not None:
        for n in cluster.nodes.values():
            n.kill()
        disk.cut()
        for n in cluster.nodes.values():
            n.start()
        # Journals are replayed before a node serves anything.
        cluster.wait_for_brokers({1, 2, 3})
        came_back = b"stale" in path(leader).read_bytes()
        assert not came_back, "the cut record came back from the journal"
        wait_until(lambda: all_in_sync(cluster, topic, 1), 60, "every replica in sync after the cut")
        wait_until(lambda: len({path(n).read_bytes() for n in (1, 2, 3)}) == 1, 30, "identical logs after the cut")
    got = read_all(bootstrap, topic, 200)
    assert [v for _, v in got] == values


def test_a_frozen_leader_acknowledges_nothing_and_truncates_its_divergent_tail(make_cluster):
    # Frozen past its session; it reads the produce waiting in its socket only once thawed.
    check_an_isolated_leader(make_cluster(3), "frozen",
                             isolate=lambda n: n.freeze(),
                             heal=lambda n: n.proc.send_signal(signal.SIGCONT), heal_before_answer=True)


def leaders(cluster: Cluster, node: int, topic: str) -> dict:
    return {p[0]: (p[2], p[3][0]) for p in cluster.metadata(node).topics[topic]}  # leader, preferred


def move_leadership_off_node_1(cluster: Cluster, topic: str, partitions: int):
    """Node 1 stops cleanly (its partitions move to other replicas) and comes back in sync."""
    assert cluster.nodes[1].stop() == 0
    wait_until(lambda: all(leader != 1 for leader, _ in leaders(cluster, 2, topic).values()), 30,
               "leadership off the stopped node")
    cluster.nodes[1].start()
    wait_until(lambda: all_in_sync(cluster, topic, partitions), 60, "node 1 back in sync")


def test_the_periodic_rebalance_returns_leadership_to_preferred_replicas(make_cluster):
    cluster = make_cluster(3, REPLICATED + "leader_imbalance_check_interval_ms = 1500\n")
    create_replicated(cluster, "pref", 3, 1)
    assert all(leader == preferred for leader, preferred in leaders(cluster, 1, "pref").values())
    move_leadership_off_node_1(cluster, "pref", 3)
    wait_until(lambda: all(leader == preferred for leader, preferred in leaders(cluster, 2, "pref").values()), 30,
               "preferred leaders again")


def test_elect_leaders_moves_leadership_to_preferred_replicas(make_cluster):
    from confluent_kafka import ElectionType
    cluster = make_cluster(3, REPLICATED + "auto_leader_rebalance_enable = false\n")
    create_replicated(cluster, "pref", 3, 1)
    move_leadership_off_node_1(cluster, "pref", 3)
    moved = [p for p, (leader, preferred) in leaders(cluster, 2, "pref").items() if leader != preferred]
    assert moved, "node 1 led a partition before it stopped"
    admin = cluster.admin(2)  # outlives its futures
    asked = [TopicPartition("pref", p) for p in range(3)] + [TopicPartition("pref", 7)]
    outcome = admin.elect_leaders(ElectionType.PREFERRED, asked).result(15)
    errors = {tp.partition: (e.code() if e is not None else 0) for tp, e in outcome.items()}
    want = {p: 0 if p in moved else 84 for p in range(3)} | {7: 3}  # ELECTION_NOT_NEEDED, UNKNOWN_...
    assert errors == want, errors
    wait_until(lambda: all(leader == preferred for leader, preferred in leaders(cluster, 2, "pref").values()), 15,
               "preferred leaders after ElectLeaders")


def check_a_cut_off_leader(make_cluster, topic: str, data_root=None, **check):
    """`check_an_isolated_leader` with the link between the leader and the others cut (the
    fault hooks' SIGUSR1; clients still reach it) and healed after the produce's answer."""
    cluster = make_cluster(3, start=False, data_root=data_root)
    for n in cluster.nodes.values():
        n.env = {"SLUICE_FAULT_HOOKS": "1"}
    cluster.start()

    def cut(node):
        node.proc.send_signal(signal.SIGUSR1)
        wait_until(lambda: "cut off from the other nodes: true" in node.log(), 10, "the cut")

    check_an_isolated_leader(cluster, topic, isolate=cut, heal=lambda n: n.proc.send_signal(signal.SIGUSR2),
                             heal_before_answer=False, **check)


def test_a_leader_cut_off_from_the_others_acknowledges_nothing_and_truncates_on_return(make_cluster):
    check_a_cut_off_leader(make_cluster, "cut")


def test_a_truncated_tail_stays_gone_after_a_power_cut(lazy_disk, make_cluster):
    """The old leader's cut record went through its shard journal (a small append); the records
    it then fetches from the new leader in its place are large, so they are synced in their file
    rather than journaled. Truncating must have fenced the journal: replaying the cut record
    after a power cut would write it over those fetched records."""
    check_a_cut_off_leader(make_cluster, "truncated", data_root=lazy_disk.mount, value_bytes=1024, disk=lazy_disk)


def test_records_deleted_on_the_leader_are_gone_from_its_followers(make_cluster):
    cluster = make_cluster(3)
    create_replicated(cluster, "trimmed", 1, 2)
    bootstrap = ",".join(n.bootstrap for n in cluster.nodes.values())
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True})
    for i in range(100):
        producer.produce("trimmed", value=f"t{i}".encode(), partition=0)
    assert producer.flush(30) == 0
    admin = cluster.admin(1)  # outlives its futures
    deleted = admin.delete_records([TopicPartition("trimmed", 0, 60)])
    assert list(deleted.values())[0].result(15).low_watermark == 60
    # The followers take the leader's log start from their fetches; a new leader keeps it.
    leader, replicas, _ = partition_state(cluster, 1, "trimmed", 0)
    followers = [n for n in replicas if n != leader]
    wait_until(lambda: all(replica_log_start(cluster, n, "trimmed", 100) == 60 for n in followers), 30,
               "the followers to take the leader's log start")
    cluster.nodes[leader].kill()
    survivors = [n for n in (1, 2, 3) if n != leader]
    wait_until(lambda: (s := partition_state(cluster, survivors[0], "trimmed", 0)) and s[0] in survivors, 30,
               "a new leader")
    c = Consumer({"bootstrap.servers": ",".join(cluster.nodes[n].bootstrap for n in survivors),
                  "group.id": "trim-check"})
    try:
        low, high = c.get_watermark_offsets(TopicPartition("trimmed", 0), timeout=20)
    finally:
        c.close()
    assert (low, high) == (60, 100)


# Retention every 200 ms, so that a test sees the first segments go.
AGED = REPLICATED + "[log]\nretention_check_interval_ms = 200\n"


def log_start(cluster: Cluster, node: int, topic: str) -> int:
    """Partition 0's log start offset as its leader, node `node`, answers ListOffsets (earliest)."""
    p = list_offset(cluster, node, topic, -2)
    assert p["ErrorCode"] == 0, p
    return p["Offset"]


def settled_log_start(cluster: Cluster, node: int, topic: str, above: int) -> int:
    """The leader's log start once retention has moved it past `above` and stopped moving it
    (five retention passes without a change)."""
    def settled():
        first = log_start(cluster, node, topic)
        time.sleep(1)  # five retention passes (200 ms each) on a cluster without a metrics port
        return first > above and log_start(cluster, node, topic) == first

    wait_until(settled, 60, f"retention to move {topic}'s log start past {above} and settle",
               state=lambda: (log_start(cluster, node, topic), partition_state(cluster, node, topic, 0),
                              cluster.topic_configs(node, topic)))
    return log_start(cluster, node, topic)


def replica_log_start(cluster: Cluster, node: int, topic: str, end: int) -> int | None:
    """Node `node`'s log start of partition 0 (a follower's too: a consumer Fetch v11 at `end`,
    which a follower serves from its own log, KIP-392); None while it cannot answer."""
    body = {"ReplicaId": -1, "MaxWaitMs": 0, "MinBytes": 0, "MaxBytes": 1024, "IsolationLevel": 0,
            "SessionId": 0, "SessionEpoch": -1, "RackId": "", "Topics": [{"Topic": topic, "Partitions": [
                {"Partition": 0, "FetchOffset": end, "PartitionMaxBytes": 1024}]}]}
    with protocol.Connection("127.0.0.1", cluster.nodes[node].port) as conn:
        p = conn.send("Fetch", 11, body)["Responses"][0]["Partitions"][0]
    return p["LogStartOffset"] if p["ErrorCode"] == 0 else None


def replica_copy(cluster: Cluster, node: int, topic: str, offset: int) -> tuple[int, bytes] | None:
    """Node `node`'s copy of partition 0 from `offset` to its high watermark, read with consumer
    Fetches v11 (which a follower serves from its own log, KIP-392): (high watermark, bytes);
    None while it has no records at `offset`."""
    out, high = b"", None
    with protocol.Connection("127.0.0.1", cluster.nodes[node].port) as conn:
        while high is None or offset < high:
            body = {"ReplicaId": -1, "MaxWaitMs": 0, "MinBytes": 1, "MaxBytes": 1 << 20, "IsolationLevel": 0,
                    "SessionId": 0, "SessionEpoch": -1, "RackId": "", "Topics": [{"Topic": topic, "Partitions": [
                        {"Partition": 0, "FetchOffset": offset, "PartitionMaxBytes": 1 << 20}]}]}
            p = conn.send("Fetch", 11, body)["Responses"][0]["Partitions"][0]
            if p["ErrorCode"] != 0:
                return None  # not there yet (a restarted replica has yet to start over)
            high, batches = p["HighWatermark"], kw.whole_batches(p["Records"] or b"")
            if not batches:
                break
            out += b"".join(batches)
            base, last_delta = kw.batch_offsets(batches[-1])
            offset = base + last_delta + 1
    return high, out


def wait_same_copy(cluster: Cluster, leader: int, node: int, topic: str, offset: int):
    """Until node `node` holds byte for byte what the leader holds from `offset` on."""
    def same():
        theirs = replica_copy(cluster, leader, topic, offset)
        assert theirs is not None and theirs[1], f"the leader, node {leader}, has no records at {offset}"
        return replica_copy(cluster, node, topic, offset) == theirs

    wait_until(same, 30, f"node {node}'s copy of {topic} equal to its leader's")


def reassign(bootstrap: str, topic: str, target: list[int]):
    """Moves partition 0 of `topic` to `target` with kafka-python's AlterPartitionReassignments,
    and waits until no reassignment is in progress."""
    import kafka
    from kafka.admin import KafkaAdminClient
    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    try:
        assert admin.alter_partition_reassignments({kafka.TopicPartition(topic, 0): target}) == \
            {kafka.TopicPartition(topic, 0): None}
        wait_until(lambda: not admin.list_partition_reassignments(), 60, "the reassignment to complete")
    finally:
        admin.close()


def wait_moved(cluster: Cluster, topic: str, target: list[int]):
    """Until node 1's metadata shows partition 0 of `topic` on `target`, all in sync: the
    controller's node lists no move once it applied the completion, and node 1 applies it a
    moment later (CI once saw node 1 at the old replicas right after the list came back empty)."""
    wait_until(lambda: (s := partition_state(cluster, 1, topic, 0)) and s[1:] == (sorted(target), sorted(target)),
               30, f"node 1 to learn that {topic} moved to {target}")


def test_a_replica_below_the_leaders_log_start_starts_over_there(make_cluster):
    """Kafka's rule for a follower whose log ends below its leader's log start: a replica added
    to a topic that retention has trimmed, or a node whose partition directory was lost, starts
    over at the leader's log start (or, when that lies inside a batch, at the batch's base),
    catches up and joins the ISR, instead of staying behind for ever."""
    cluster = make_cluster(3, config=AGED, brokers=1)
    cluster.wait_for_brokers({1, 2, 3, 4})
    # Small segments from the first record: retention can then drop all but the newest few.
    cluster.create_topic(1, "aged", 1, 3, configs={"segment.bytes": "4096", "retention.bytes": "8192"})
    wait_until(lambda: all((s := partition_state(cluster, n, "aged", 0)) and s[0] > 0 and s[2] == s[1]
                           for n in (1, 2, 3, 4)), 30, "the partition led, every replica in sync")
    leader, replicas, _ = partition_state(cluster, 1, "aged", 0)
    bootstrap = ",".join(n.bootstrap for n in cluster.nodes.values())
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "batch.size": 2000, "linger.ms": 5})
    for i in range(2000):
        producer.produce("aged", value=b"%05d-" % i + b"x" * 200, partition=0)
    assert producer.flush(30) == 0
    low = settled_log_start(cluster, leader, "aged", 1000)

    # A new replica in place of a follower: it fetches from 0, which the leader no longer has.
    outsider = next(n for n in (1, 2, 3, 4) if n not in replicas)
    dropped, kept = [r for r in replicas if r != leader]
    target = [leader, kept, outsider]
    reassign(bootstrap, "aged", target)
    wait_moved(cluster, "aged", target)
    assert partition_state(cluster, 1, "aged", 0)[1:] == (sorted(target), sorted(target))
    assert partition_state(cluster, 1, "aged", 0)[0] == leader
    wait_same_copy(cluster, leader, outsider, "aged", low)
    assert "starting over there" in cluster.nodes[outsider].log()

    # The leader's start moves inside a batch; then a follower loses its copy of the partition.
    _, records = replica_copy(cluster, leader, "aged", low)
    # The first batch of two records or more.
    base = next(b for b, delta in map(kw.batch_offsets, kw.whole_batches(records)) if delta > 0)
    trimmer = cluster.admin(1)  # outlives its futures
    deleted = trimmer.delete_records([TopicPartition("aged", 0, base + 1)])
    assert list(deleted.values())[0].result(15).low_watermark == base + 1
    cluster.nodes[kept].kill()
    shutil.rmtree(cluster.nodes[kept].data_dir / "aged-0")
    cluster.nodes[kept].start()
    wait_same_copy(cluster, leader, kept, "aged", base + 1)
    assert f"the leader's batch holding {base + 1} begins at {base}" in cluster.nodes[kept].log()
    wait_until(lambda: (s := partition_state(cluster, leader, "aged", 0)) and s[2] == sorted(target), 60,
               f"node {kept} back in sync")
    for n in target:
        assert "cannot catch up" not in cluster.nodes[n].log()
    got = read_all(bootstrap, "aged", 2000)
    assert [v for _, v in got] == [b"%05d-" % i + b"x" * 200 for i in range(base + 1, 2000)]


def test_reassignment_moves_a_partition_to_a_new_node_and_removes_the_old_replica(make_cluster):
    cluster = make_cluster(3, brokers=1)
    cluster.wait_for_brokers({1, 2, 3, 4})
    cluster.create_topic(1, "moved", 1, 3)
    wait_until(lambda: all((s := partition_state(cluster, n, "moved", 0)) and s[0] > 0 and s[2] == s[1]
                           for n in (1, 2, 3, 4)), 30, "the partition led, every replica in sync")
    leader, replicas, _ = partition_state(cluster, 1, "moved", 0)
    outsider = next(n for n in (1, 2, 3, 4) if n not in replicas)
    bootstrap = ",".join(n.bootstrap for n in cluster.nodes.values())
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True})
    for i in range(300):
        producer.produce("moved", value=f"m{i}".encode(), partition=0)
    assert producer.flush(30) == 0
    # AlterPartitionReassignments v1 may forbid a change of replication factor (KIP-860).
    grow = {"TimeoutMs": 10_000, "AllowReplicationFactorChange": False, "Topics": [
        {"Name": "moved", "Partitions": [{"PartitionIndex": 0, "Replicas": replicas + [outsider]}]}]}
    with protocol.Connection("127.0.0.1", cluster.nodes[1].port) as conn:
        refused = conn.send("AlterPartitionReassignments", 1, grow)
    assert refused["Responses"][0]["Partitions"][0]["ErrorCode"] == INVALID_REPLICATION_FACTOR, refused
    assert refused["AllowReplicationFactorChange"] is False
    # The leader's replica moves to the node that had none.
    target = [outsider] + [r for r in replicas if r != leader]
    reassign(bootstrap, "moved", target)
    wait_moved(cluster, "moved", target)
    state = partition_state(cluster, 1, "moved", 0)
    assert state[1] == sorted(target) and state[2] == sorted(target) and state[0] in target, state
    # The removed replica's copy is deleted; the new one holds the same bytes as the others.
    gone = cluster.nodes[leader].data_dir / "moved-0"
    wait_until(lambda: not gone.exists(), 30, "the old replica deleted")
    path = lambda n: cluster.nodes[n].data_dir / "moved-0" / "00000000000000000000.log"  # noqa: E731
    wait_until(lambda: len({path(n).read_bytes() for n in target}) == 1, 30, "identical copies")
    got = read_all(bootstrap, "moved", 300)
    assert [v for _, v in got] == [f"m{i}".encode() for i in range(300)]


def test_an_unclean_election_happens_only_where_the_topic_allows_it(make_cluster):
    import kafka
    from kafka.admin import KafkaAdminClient
    # Voters 1-3 keep the controller up; the partitions live on brokers 4 and 5.
    cluster = make_cluster(3, brokers=2)
    cluster.wait_for_brokers({1, 2, 3, 4, 5})
    admin = cluster.admin(1)  # outlives its futures
    for name, unclean in (("strict", "false"), ("loose", "true")):
        cluster.create_topic(1, name, 1, 2)
        cluster.alter_topic_config(1, name, {"unclean.leader.election.enable": unclean})
    bootstrap = ",".join(n.bootstrap for n in cluster.nodes.values())
    mover = KafkaAdminClient(bootstrap_servers=bootstrap)
    try:
        mover.alter_partition_reassignments({kafka.TopicPartition(t, 0): [4, 5] for t in ("strict", "loose")})
        wait_until(lambda: all((s := partition_state(cluster, 1, t, 0)) and s[1] == [4, 5] and s[2] == [4, 5]
                               for t in ("strict", "loose")), 60, "both partitions on 4 and 5, in sync")
    finally:
        mover.close()
    # 4, the first replica, leads both (a preferred election where the move left 5 leading).
    from confluent_kafka import ElectionType
    admin.elect_leaders(ElectionType.PREFERRED, [TopicPartition(t, 0) for t in ("strict", "loose")]).result(15)
    wait_until(lambda: all(partition_state(cluster, 1, t, 0)[0] == 4 for t in ("strict", "loose")), 15,
               "4 leading both")
    # 5 falls out of sync (frozen past its session), then 4, the last in-sync replica, dies.
    cluster.nodes[5].freeze()
    wait_until(lambda: all(partition_state(cluster, 1, t, 0)[2] == [4] for t in ("strict", "loose")), 30,
               "5 out of the in-sync sets")
    cluster.nodes[4].kill()
    wait_until(lambda: all(partition_state(cluster, 1, t, 0)[0] == -1 for t in ("strict", "loose")), 30,
               "no leader while no replica is live")
    # 5 returns: only the topic that allows it elects 5, losing what only 4 held.
    cluster.nodes[5].proc.send_signal(signal.SIGCONT)
    wait_until(lambda: partition_state(cluster, 1, "loose", 0)[0] == 5, 30, "an unclean election of 5")
    assert partition_state(cluster, 1, "loose", 0)[2] == [5]
    # 5's registration record, which elected it for "loose", decided "strict" too.
    assert partition_state(cluster, 1, "strict", 0)[:3:2] == (-1, [4]), "strict waits for its data"


def test_a_restarted_leader_does_not_serve_its_uncommitted_tail(make_cluster):
    cluster = make_cluster(3)
    create_replicated(cluster, "tail", 1, 1)
    leader = partition_state(cluster, 1, "tail", 0)[0]
    others = [n for n in (1, 2, 3) if n != leader]
    port = cluster.nodes[leader].port
    producer = Producer({"bootstrap.servers": cluster.nodes[leader].bootstrap, "acks": "all"})
    for i in range(100):
        producer.produce("tail", value=f"k{i}".encode(), partition=0)
    assert producer.flush(30) == 0
    # The followers freeze; acks=1 records reach the leader's log only, never committed.
    for n in others:
        cluster.nodes[n].freeze()
    with socket.create_connection(("127.0.0.1", port), timeout=20) as s:
        for i in range(5):
            s.sendall(kw.request(0, 3, i, kw.produce_v3("tail", 0, kw.record_batch([b"u"] * 10), acks=1)))
            assert kw.produce_v3_error_code(kw.read_response(s))[0] == 0

    def high_watermark():
        c = Consumer({"bootstrap.servers": cluster.nodes[leader].bootstrap, "group.id": "hw"})
        try:
            return c.get_watermark_offsets(TopicPartition("tail", 0), timeout=20)[1]
        finally:
            c.close()

    assert high_watermark() == 100
    # SIGKILL and restart: the recovered log ends at 150, but only 100 were ever committed.
    cluster.nodes[leader].kill()
    cluster.nodes[leader].start()
    # A restarted node takes up no role until the controller registers its new incarnation
    # (its recovered roles belong to the old one), and with both followers frozen there is no
    # controller quorum: it refuses to serve rather than serve its tail.
    try:
        assert high_watermark() <= 100
    except KafkaException as e:
        assert e.args[0].code() == KafkaError.NOT_LEADER_FOR_PARTITION, e
    for n in others:
        cluster.nodes[n].proc.send_signal(signal.SIGCONT)
    # Once the quorum is back, the partition serves again with every acknowledged record.
    got = read_all(cluster.nodes[others[0]].bootstrap, "tail", 100)
    assert got[:100] == [(i, f"k{i}".encode()) for i in range(100)]
