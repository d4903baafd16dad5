"""Issue 15: several nodes form one cluster whose metadata survives the loss of any minority.

Real `sluice serve` processes on 127.0.0.1 (`cluster.py`), driven with confluent-kafka's admin
client and producer/consumer, and with raw Kafka requests where a client would hide the error."""
import socket
import struct
import subprocess
from pathlib import Path

import ck
import kafka_wire as kw
import pytest
from broker import free_port
from cluster import FAST, Cluster, Node
from confluent_kafka import KafkaException
from confluent_kafka.admin import (AlterConfigOpType, ConfigEntry, ConfigResource, NewPartitions,
                                  NewTopic)
from metrics import metrics_config, scrape
from records import check_partition, expected_by_partition
from waiting import wait_until

import protocol  # Kafka's own schemas: any request at any version (on the path by conftest)

COORDINATOR_NOT_AVAILABLE = 15


@pytest.fixture
def make_cluster(tmp_path):
    made = []

    def make(voters: int, brokers: int = 0, config: str = FAST) -> Cluster:
        return track(Cluster(tmp_path / f"cluster-{len(made)}", voters, brokers, config)).start()

    def track(c: Cluster) -> Cluster:
        """Stops `c` with the test's clusters, even when the test fails."""
        made.append(c)
        return c

    make.track = track

    yield make
    for c in made:
        for n in c.nodes.values():
            n.kill()
    for c in made:
        c.stop()


def topic_ids(cluster: Cluster, node: int) -> dict:
    """Node `node`'s view: per topic, [(partition, leader, replicas)]."""
    return {name: [(p[0], p[2], p[3]) for p in parts] for name, parts in cluster.metadata(node).topics.items()}


def round_trip(produce_via: str, consume_via: str, topic: str, count: int, partitions: int):
    """Produces through one node and consumes through another: byte-equal, offsets exact."""
    acked = ck.produce(produce_via, topic, count, partitions)
    assert len(acked) == count
    got = ck.consume(consume_via, topic, range(partitions), count)
    want = expected_by_partition(count, partitions)
    for p in range(partitions):
        check_partition(got[p], want[p], f"{topic}[{p}]")


def wait_for_topic(cluster: Cluster, node: int, name: str, timeout_s=15):
    wait_until(lambda: name in cluster.metadata(node).topics, timeout_s, f"{name} on node {node}")


def test_three_nodes_agree_and_place_replicas_on_distinct_brokers(make_cluster):
    c = make_cluster(3)
    controller = c.wait_for_brokers({1, 2, 3})
    for via, name in [(1, "via-one"), (2, "via-two"), (3, "via-three")]:
        c.create_topic(via, name, 6, 3)
    for node in (1, 2, 3):
        for name in ("via-one", "via-two", "via-three"):
            wait_for_topic(c, node, name)
    same = lambda: topic_ids(c, 1) == topic_ids(c, 2) == topic_ids(c, 3)  # noqa: E731
    wait_until(same, 15, "every node to serve the same metadata")
    assert {c.metadata(n).controller_id for n in (1, 2, 3)} == {controller}
    for name in ("via-one", "via-two", "via-three"):
        leaders = {}
        for _, error, leader, replicas, isr in c.metadata(1).topics[name]:
            assert error == 0 and sorted(replicas) == [1, 2, 3], "three replicas on distinct brokers"
            # A new partition's replicas are all in sync (issue 16: they hold its empty log).
            assert leader == replicas[0] and sorted(isr) == [1, 2, 3]
            leaders[leader] = leaders.get(leader, 0) + 1
        assert leaders == {1: 2, 2: 2, 3: 2}, f"leaders spread evenly: {leaders}"
    # Too many replicas for the live brokers: Kafka's error code, through any node.
    admin = c.admin(2)
    fut = admin.create_topics([NewTopic("too-wide", 1, 4)], request_timeout=10)["too-wide"]
    with pytest.raises(Exception, match="INVALID_REPLICATION_FACTOR"):
        fut.result(15)
    # Records go to each partition's leader and come back byte-equal from any bootstrap node.
    round_trip(c.nodes[1].bootstrap, c.nodes[3].bootstrap, "via-two", 600, 6)


def test_manual_replica_assignments_are_placed_exactly(make_cluster):
    """CreateTopics and CreatePartitions with explicit assignments (librdkafka's test 0081
    pattern): each partition's replicas exactly as assigned, the first its leader; an
    unregistered broker, a repeated one or uneven replica counts are INVALID_REPLICA_ASSIGNMENT."""
    c = make_cluster(3)
    c.wait_for_brokers({1, 2, 3})
    admin = c.admin(2)
    even_odd = [[1, 2, 3] if p % 2 == 0 else [3, 2, 1] for p in range(4)]
    admin.create_topics([NewTopic("assigned", len(even_odd), replica_assignment=even_odd)], request_timeout=15)["assigned"].result(20)
    wait_for_topic(c, 1, "assigned")
    grown = admin.create_partitions([NewPartitions("assigned", 6, replica_assignment=[[2, 3, 1], [2, 1, 3]])],
                                    request_timeout=15)
    grown["assigned"].result(20)
    want = even_odd + [[2, 3, 1], [2, 1, 3]]

    def placed():
        parts = sorted(c.metadata(1).topics.get("assigned", []))
        return [(replicas, leader) for _, _, leader, replicas, _ in parts] == [(w, w[0]) for w in want]
    wait_until(placed, 15, "every partition placed as assigned, its first replica leading")
    for bad in ([[1, 7, 2]], [[1, 1, 2]], [[1, 2, 3], [1, 2]]):
        fut = admin.create_topics([NewTopic("misassigned", len(bad), replica_assignment=bad)], request_timeout=10)
        with pytest.raises(KafkaException) as e:
            fut["misassigned"].result(15)
        assert e.value.args[0].name() == "INVALID_REPLICA_ASSIGNMENT", (bad, e.value)
    fut = admin.create_partitions([NewPartitions("assigned", 8, replica_assignment=[[1, 2, 3]])], request_timeout=10)
    with pytest.raises(KafkaException) as e:
        fut["assigned"].result(15)
    assert e.value.args[0].name() == "INVALID_REPLICA_ASSIGNMENT"


def test_a_partition_request_to_a_node_that_does_not_lead_it_is_refused(make_cluster):
    c = make_cluster(3)
    c.wait_for_brokers({1, 2, 3})
    c.create_topic(1, "led", 3, 2)
    # Each shard installs a new catalog on its own, a moment apart: a node's connections may see
    # the topic on one shard before another, so the partitions are taken from the answer that
    # showed the topic everywhere.
    seen = {}

    def everywhere():
        seen.update({n: c.metadata(n).topics.get("led") for n in (1, 2, 3)})
        return all(seen.values())
    wait_until(everywhere, 15, "topic everywhere")

    def codes(node, index):
        with socket.create_connection(("127.0.0.1", c.nodes[node].port), timeout=10) as s:
            s.sendall(kw.request(0, 3, 7, kw.produce_v3("led", index, kw.record_batch([b"x"]))))
            code, _ = kw.produce_v3_error_code(kw.read_response(s))
            s.sendall(kw.request(1, 4, 8, kw.fetch_v4("led", index, 0, 0)))
            return code, kw.fetch_v4_partition(kw.read_response(s))[0]

    def answers(node, index, want):
        # A connection may land on a shard that has not switched to the new catalog yet (the
        # shards switch a moment apart): it answers UNKNOWN_TOPIC_OR_PARTITION (3), which
        # clients retry. Any other answer than `want` fails at once.
        got = codes(node, index)
        assert all(code in (want, 3) for code in got), (index, node, got)
        return got == (want, want)

    last = []

    def leads(node, index):
        last.append(codes(node, index))
        return last[-1] == (0, 0)

    for index, _, leader, _, _ in seen[1]:
        # A node's metadata names the leader as soon as the controller's record is applied;
        # the leader's shard takes the leadership a moment later and answers 6 until then, as
        # Kafka does (clients retry). Wait for that, then every node must answer exactly.
        wait_until(lambda: leads(leader, index), 15, f"node {leader} leads {index}", lambda: (last[-5:], seen))
        for node in (1, 2, 3):
            # NOT_LEADER_OR_FOLLOWER (6) sends clients back to Metadata.
            want = 0 if node == leader else 6
            wait_until(lambda: answers(node, index, want), 15, f"node {node} answers {want}")


def test_controller_death_elects_a_new_one_and_the_old_one_catches_up(make_cluster):
    c = make_cluster(3)
    old = c.wait_for_brokers({1, 2, 3})
    c.create_topic(old, "before", 3, 3)  # each node leads one partition
    c.nodes[old].kill()
    survivors = [n for n in (1, 2, 3) if n != old]
    # The survivors elect a new controller (how fast is measured in perf/cluster.py).
    c.create_topic(survivors[0], "after", 2, 2)
    new = c.metadata(survivors[0]).controller_id
    assert new in survivors
    # The killed broker is fenced after its session and left out of Metadata and out of every
    # in-sync set; the partition it led moves to an in-sync survivor, in a new leader epoch.
    c.wait_for_brokers(set(survivors), nodes=survivors)
    before = c.metadata(survivors[0]).topics["before"]
    assert all(p[1] == 0 and p[2] in survivors and sorted(p[4]) == survivors for p in before), before
    # Restarted, it catches up on the change it missed, from the log.
    c.nodes[old].start()
    c.wait_for_brokers({1, 2, 3})
    wait_for_topic(c, old, "after")
    wait_until(lambda: topic_ids(c, old) == topic_ids(c, survivors[0]), 15, "the old controller's view")
    assert all(p[2] != -1 for p in c.metadata(old).topics["before"])


def test_a_far_behind_node_catches_up_by_snapshot(make_cluster):
    c = make_cluster(3, config=FAST + "snapshot_after_entries = 4\n")
    c.wait_for_brokers({1, 2, 3})
    c.nodes[3].kill()
    for i in range(12):
        c.create_topic(1, f"missed-{i}", 1, 1)
    leader = c.metadata(1).controller_id
    assert "snapshot at index" in c.nodes[leader].log()
    c.nodes[3].start()
    wait_until(lambda: "missed-11" in c.metadata(3).topics, 20, "node 3 to catch up")
    assert "installed the leader's snapshot" in c.nodes[3].log()
    # The controller may be creating __consumer_offsets meanwhile: the views converge.
    wait_until(lambda: topic_ids(c, 3) == topic_ids(c, 1), 15, "node 3's view to match node 1's")
    # Its own restart now starts from the snapshot it installed.
    c.nodes[3].restart()
    c.wait_for_brokers({1, 2, 3})
    wait_until(lambda: topic_ids(c, 3) == topic_ids(c, 1), 15, "node 3's view to match after its restart")
    assert "missed-11" in topic_ids(c, 3)


def test_a_node_of_another_cluster_or_a_duplicate_node_id_is_refused(make_cluster, tmp_path):
    c = make_cluster(3, brokers=1)
    c.wait_for_brokers({1, 2, 3, 4})
    # A second process claiming node id 4 (its own data dir and ports) is refused by name.
    dup = Node(tmp_path / "dup", 4, c.voters, free_port(), FAST)
    try:
        dup.start(timeout_s=20)
    except RuntimeError:
        pass  # it may stop before it serves
    wait_until(lambda: not dup.alive(), 15, "the duplicate to stop")
    assert "node id 4 is held by a live broker" in dup.log(), dup.log()[-2000:]
    assert c.nodes[4].alive()
    # A one-node cluster B, then node 3 of cluster A started on B's data dir: refused.
    other = make_cluster.track(Cluster(tmp_path / "other", 1))
    other.nodes[1].node_id = 3
    b = other.nodes[1]
    b.voters = f"3@127.0.0.1:{b.rpc_port}"
    b.set_args()
    b.start()
    b_admin = ck.admin(b.bootstrap)

    def b_cluster_id():
        try:
            return b_admin.list_topics(timeout=5).cluster_id
        except KafkaException:
            return None  # no broker registered yet

    wait_until(b_cluster_id, 15, "cluster B to commit its id")
    b.stop()
    node3 = c.nodes[3]
    node3.kill()
    config = node3.work_dir / f"sluice-{node3.port}.toml"
    args = [str(node3.binary), "serve", "--listen", node3.bootstrap, "--data-dir", str(b.data_dir),
            "--shards", "2", "--config", str(config), *node3.extra_args]
    out = subprocess.run(args, capture_output=True, text=True, timeout=60)
    assert out.returncode != 0
    assert "refusing to join" in out.stderr or "refused this node" in out.stderr, out.stderr[-2000:]
    # Cluster A is unharmed, and node 3 rejoins with its own data dir.
    node3.start()
    c.create_topic(1, "still-fine", 1, 3)
    c.wait_for_brokers({1, 2, 3, 4})


def test_a_broker_that_is_not_a_voter_learns_the_metadata_and_serves(make_cluster):
    c = make_cluster(3, brokers=1)
    c.wait_for_brokers({1, 2, 3, 4})
    c.create_topic(4, "wide", 8, 1)
    # Each shard installs a new catalog on its own, and a connection lands on either shard: one
    # answer that names the topic is taken whole, not a second that may come from the other.
    def leaders():
        return {p[2] for p in c.metadata(4).topics.get("wide", [])}

    wait_until(lambda: leaders(), 15, "node 4 to learn the topic")
    wait_until(lambda: 4 in leaders(), 5, "the broker-only node to lead partitions too")
    round_trip(c.nodes[4].bootstrap, c.nodes[2].bootstrap, "wide", 400, 8)


def test_five_nodes_commit_with_two_down_and_refuse_with_three_down(make_cluster):
    c = make_cluster(5)
    c.wait_for_brokers({1, 2, 3, 4, 5})
    c.create_topic(1, "five", 5, 3)
    controller = c.metadata(1).controller_id
    down = [controller] + [n for n in (1, 2, 3, 4, 5) if n != controller][:1]
    for n in down:
        c.nodes[n].kill()
    up = [n for n in (1, 2, 3, 4, 5) if n not in down]
    c.create_topic(up[0], "two-down", 2, 3)
    # A third node down: no quorum. The write fails with an error, in bounded time.
    c.nodes[up[0]].kill()
    down.append(up.pop(0))
    # The node answers itself, within metadata_write_timeout_ms (5 s here): REQUEST_TIMED_OUT (7)
    # when no controller answers, or NOT_CONTROLLER (41) when it was the controller and resigned
    # (check-quorum: it hears from no quorum) with the write pending. Clients retry both.
    with socket.create_connection(("127.0.0.1", c.nodes[up[0]].port), timeout=30) as s:
        s.sendall(kw.create_topics_v2("no-quorum", 1, 1))
        code, message = kw.create_topics_v2_result(kw.read_response(s))
    assert code in (7, 41), (code, message)
    # A client gives up too (it finds no controller to send to).
    admin = c.admin(up[1])
    fut = admin.create_topics([NewTopic("no-quorum", 1, 1)], request_timeout=10)["no-quorum"]
    with pytest.raises(Exception, match="(?i)timed.out"):
        fut.result(40)
    # The nodes return: one controller again, and every node agrees on the topics.
    for n in down:
        c.nodes[n].start()
    c.wait_for_brokers({1, 2, 3, 4, 5}, timeout_s=60)
    c.create_topic(down[0], "after-return", 1, 5)
    for n in (1, 2, 3, 4, 5):
        wait_for_topic(c, n, "after-return")
    agree = lambda: all(topic_ids(c, n) == topic_ids(c, 1) for n in (2, 3, 4, 5))  # noqa: E731
    wait_until(agree, 15, "all five nodes to agree on the topics")
    assert {"five", "two-down", "after-return"} <= set(topic_ids(c, 1))


def test_single_node_data_dir_is_not_taken_into_a_cluster(make_broker, tmp_path):
    single = make_broker()
    single.stop()
    node = Node(tmp_path / "c", 1, None, free_port(), FAST)
    node.voters = f"1@127.0.0.1:{node.rpc_port}"
    node.set_args(single.data_dir)
    args = [str(node.binary), "serve", "--listen", node.bootstrap, "--data-dir", str(single.data_dir),
            *node.extra_args]
    out = subprocess.run(args, capture_output=True, text=True, timeout=30)
    assert out.returncode != 0
    assert "belongs to a single-node broker" in out.stderr


def describe_quorum_v0(port: int):
    """DescribeQuorum v0 for __cluster_metadata-0: (error, leader, epoch, high watermark,
    [(voter, log end)], [observers])."""
    body = b"\x02" + kw.compact_string("__cluster_metadata") + b"\x02" + struct.pack(">i", 0) + b"\x00\x00\x00"
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        s.sendall(kw.flexible_request(55, 0, body))
        r = kw.read_response(s)
    pos = 4 + 1 + 2 + 1  # correlation id, header tags, error code, topics (one)
    pos += r[pos]  # topic name: its one-byte compact length (len + 1), then len bytes
    pos += 1  # partitions (one)
    _index, error, leader, epoch, hw = struct.unpack(">ihiiq", r[pos:pos + 22])
    pos += 22

    def replicas():
        nonlocal pos
        n = r[pos] - 1
        pos += 1
        out = []
        for _ in range(n):
            out.append(struct.unpack(">iq", r[pos:pos + 12]))
            pos += 13  # and its empty tags
        return out

    return error, leader, epoch, hw, replicas(), replicas()


def test_describe_quorum_names_the_leader_and_each_voters_progress(make_cluster):
    c = make_cluster(3, brokers=1)
    controller = c.wait_for_brokers({1, 2, 3, 4})
    c.create_topic(1, "q", 1, 1)
    error, leader, epoch, hw, voters, observers = describe_quorum_v0(c.nodes[controller].port)
    assert (error, leader) == (0, controller) and epoch >= 1 and hw > 0
    assert [v[0] for v in voters] == [1, 2, 3] and [o[0] for o in observers] == [4]
    wait_until(lambda: all(v[1] >= hw for v in describe_quorum_v0(c.nodes[controller].port)[4]), 10,
               "every voter to replicate the log")
    # Every other node answers the same, a follower voter and the observer alike: it asks the
    # active controller, as a Kafka broker forwards DescribeQuorum to it.
    for other in (n for n in (1, 2, 3, 4) if n != controller):
        error, leader, _, _, voters, observers = describe_quorum_v0(c.nodes[other].port)
        assert (error, leader) == (0, controller), other
        assert [v[0] for v in voters] == [1, 2, 3] and [o[0] for o in observers] == [4], other


def test_garbage_on_the_rpc_port_closes_that_connection_only(make_cluster):
    c = make_cluster(3)
    c.wait_for_brokers({1, 2, 3})
    rpc = c.nodes[2].rpc_port
    # A Kafka client that dialled the wrong port, random bytes, an oversized frame, a frame with
    # a bad checksum, and a half-open connection: each closed by node 2, which stays healthy.
    garbage = [
        kw.request(18, 0, 1, b""),
        bytes(range(256)) * 4,
        struct.pack(">IHBBQI", 0x7FFFFFF0, 0x534C, 2, 2, 0, 0),
        struct.pack(">IHBBQI", 20, 0x534C, 2, 2, 5, 12345) + b"\x00" * 4,
    ]
    for g in garbage:
        with socket.create_connection(("127.0.0.1", rpc), timeout=10) as s:
            s.sendall(g)
            assert kw.closed_by_peer(s, timeout_s=15), g[:16]
    half_open = socket.create_connection(("127.0.0.1", rpc), timeout=10)
    half_open.sendall(b"\x00\x00")
    # Frames that claim nearly the limit (256 MiB) and stop after their first bytes: the node's
    # memory (its address space, which a buffer of the claimed size would take at once) grows
    # with the bytes that came, not with the 4 GiB claimed.
    before_kib = virtual_memory_kib(c.nodes[2].proc.pid)
    claims = [socket.create_connection(("127.0.0.1", rpc), timeout=10) for _ in range(16)]
    for s in claims:
        s.sendall(struct.pack(">IHBBQI", 250 << 20, 0x534C, 2, 2, 0, 0) + b"\x00" * 1000)
    wait_until(lambda: unread_by_server(rpc, claims) == 0, 15, "node 2 to read every byte that came",
               state=lambda: unread_by_server(rpc, claims))
    grown_kib = virtual_memory_kib(c.nodes[2].proc.pid) - before_kib
    assert grown_kib < 1 << 20, f"{grown_kib} KiB more for 16 frames of which 16 KB came"
    c.create_topic(2, "unharmed", 3, 3)
    wait_for_topic(c, 2, "unharmed")
    half_open.close()
    for s in claims:
        s.close()
    assert "rpc: connection from" in c.nodes[2].log()


def unread_by_server(port: int, clients) -> int | None:
    """Bytes the server on `port` has not read yet from `clients` (the kernel's receive queues of
    its ends of their connections); None while it has not accepted them all."""
    out = subprocess.run(["ss", "-tnH", "state", "established", f"( sport = :{port} )"],
                         capture_output=True, text=True, check=True).stdout
    wanted = {s.getsockname()[1] for s in clients}
    queued = {}
    for line in out.splitlines():
        recv_q, _send_q, _local, peer = line.split()[:4]
        peer_port = int(peer.rsplit(":", 1)[1])
        if peer_port in wanted:
            queued[peer_port] = int(recv_q)
    return sum(queued.values()) if set(queued) == wanted else None


def virtual_memory_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmSize:"):
            return int(line.split()[1])
    raise AssertionError("no VmSize")


def test_the_raft_state_is_on_metrics(tmp_path):
    c = Cluster(tmp_path / "metrics", 3)
    addrs = {}
    for i, node in c.nodes.items():
        node.config, addrs[i] = metrics_config(FAST)
    try:
        c.start()
        controller = c.wait_for_brokers({1, 2, 3})
        c.create_topic(1, "m", 1, 3)
        leader = scrape(addrs[controller])
        assert leader[("sluice_raft_role", "")] == 2
        assert leader[("sluice_raft_leader_plus_one", "")] == controller + 1
        assert leader[("sluice_raft_term", "")] >= 1 and leader[("sluice_raft_elections_total", "")] >= 1
        assert leader[("sluice_raft_commit_index", "")] >= 3  # cluster id, registrations, topics
        lags = {labels for (name, labels) in leader if name == "sluice_raft_follower_lag_entries"}
        assert lags == {f'node="{n}"' for n in (1, 2, 3) if n != controller}
        follower = next(n for n in (1, 2, 3) if n != controller)
        wait_until(lambda: scrape(addrs[follower])[("sluice_raft_applied_index", "")]
                   >= leader[("sluice_raft_commit_index", "")], 10, "the follower to apply")
        f = scrape(addrs[follower])
        assert (f[("sluice_raft_role", "")], f[("sluice_raft_leader_plus_one", "")]) == (0, controller + 1)
    finally:
        c.stop()


def test_every_metadata_write_goes_through_the_controller_from_any_node(make_cluster):
    c = make_cluster(3)
    controller = c.wait_for_brokers({1, 2, 3})
    via = next(n for n in (1, 2, 3) if n != controller)
    admin = c.admin(via)
    c.create_topic(via, "grow", 2, 2)
    c.create_topic(via, "doomed", 1, 1)
    admin.create_partitions([NewPartitions("grow", 5)])["grow"].result(15)
    res = ConfigResource(ConfigResource.Type.TOPIC, "grow")
    admin.incremental_alter_configs([ConfigResource(
        ConfigResource.Type.TOPIC, "grow",
        incremental_configs=[ConfigEntry("retention.ms", "123456",
                                         incremental_operation=AlterConfigOpType.SET)])])[res].result(15)
    admin.delete_topics(["doomed"])["doomed"].result(15)
    for n in (1, 2, 3):
        wait_until(lambda n=n: "doomed" not in c.metadata(n).topics and len(c.metadata(n).topics.get("grow", [])) == 5,
                   15, f"node {n} to apply every change")
        node_admin = c.admin(n)  # outlives its future
        configs = node_admin.describe_configs([res])[res].result(15)
        assert configs["retention.ms"].value == "123456"
    grow = c.metadata(via).topics["grow"]
    assert all(len(set(p[3])) == 2 for p in grow), "new partitions get the topic's replication factor"
    # Idempotent producers on every node get distinct producer ids (blocks from the controller).
    for n in (1, 2, 3):
        acked = ck.produce(c.nodes[n].bootstrap, "grow", 50, 5, extra={"enable.idempotence": True})
        assert len(acked) == 50
    ids = set()
    for n in (1, 2, 3):
        with socket.create_connection(("127.0.0.1", c.nodes[n].port), timeout=10) as s:
            s.sendall(kw.request(22, 1, 1, kw.init_producer_id_v1()))
            error, pid, _epoch = kw.init_producer_id_v1_response(kw.read_response(s))
        assert error == 0
        ids.add(pid)
    assert len(ids) == 3


def find_coordinator(port: int, key: str, key_type: int) -> int:
    """FindCoordinator v1's error code for a group (key type 0) or transactional id (1)."""
    with protocol.Connection("127.0.0.1", port) as conn:
        return conn.send("FindCoordinator", 1, {"Key": key, "KeyType": key_type})["ErrorCode"]


def replica_counts(c: Cluster, node: int, topic: str) -> set:
    return {len(p[3]) for p in c.metadata(node).topics.get(topic, [])}


def test_internal_topics_wait_for_their_replication_factor(make_cluster, tmp_path):
    """Kafka's rule: `__consumer_offsets` and `__transaction_state` are created only once as
    many brokers are live as their replication factor (3 here), however long that takes, so
    that they never end with fewer replicas; until then groups and transactional ids have no
    coordinator, which clients retry."""
    c = make_cluster.track(Cluster(tmp_path / "partial", 3))
    for n in (1, 2):
        c.nodes[n].start()
    controller = c.wait_for_brokers({1, 2}, nodes=[1, 2])
    # The controller checked (once a second) with two of three brokers live, and waits;
    # `__transaction_state` is checked for at each FindCoordinator of a transactional id.
    wait_until(lambda: "__consumer_offsets waits for 3 live brokers (2 live)" in c.nodes[controller].log(), 30,
               "the controller's check for __consumer_offsets")
    for n in (1, 2):
        assert find_coordinator(c.nodes[n].port, "g", 0) == COORDINATOR_NOT_AVAILABLE
        assert find_coordinator(c.nodes[n].port, "t", 1) == COORDINATOR_NOT_AVAILABLE
    assert not {"__consumer_offsets", "__transaction_state"} & set(c.metadata(1).topics)
    c.nodes[3].start()
    c.wait_for_brokers({1, 2, 3})
    wait_until(lambda: find_coordinator(c.nodes[3].port, "g", 0) == 0, 30, "a group coordinator")
    wait_until(lambda: find_coordinator(c.nodes[3].port, "t", 1) == 0, 30, "a transaction coordinator")
    for topic in ("__consumer_offsets", "__transaction_state"):
        assert replica_counts(c, 3, topic) == {3}, topic
