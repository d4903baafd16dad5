"""A cluster of `sluice serve` processes on 127.0.0.1: each node a Broker with its own Kafka
port, RPC port and data dir, the voters given by `--voters` (the CLI contract of issue 15)."""
import socket
import struct
import sys
from pathlib import Path

import ck
import kafka_wire as kw

from broker import Broker, free_port
from waiting import wait_until
from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import AdminClient, ConfigResource, NewTopic

# Kafka's own schemas (any request at any version); the perf scripts and the chaos test import
# this module outside pytest, so it puts tests/kafka on the path itself.
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "kafka"))
import protocol  # noqa: E402

# Faster than production timing, so fencing and elections fit a test's bounds.
FAST = """
[cluster]
broker_heartbeat_interval_ms = 300
broker_session_timeout_ms = 3000
metadata_write_timeout_ms = 5000
"""

# FAST, and a replica lagging 3 s leaves the in-sync set: in-sync changes fit a test's bounds.
REPLICATED = FAST + "replica_lag_time_max_ms = 3000\n"


class Metadata:
    """A Metadata v1 answer from one node: brokers {id: (host, port, rack)}, the controller,
    and per topic [(partition, error, leader, replicas, isr)]."""

    def __init__(self, brokers, controller_id, topics):
        self.brokers, self.controller_id, self.topics = brokers, controller_id, topics


def metadata_v1(port: int, timeout_s: float = 5) -> Metadata:
    """Asks exactly the node on `port` (a client library would pick any broker it knows)."""
    with socket.create_connection(("127.0.0.1", port), timeout=timeout_s) as s:
        s.sendall(kw.request(3, 1, 1, struct.pack(">i", -1)))
        r = kw.read_response(s)
    pos = 4

    def i32():
        nonlocal pos
        pos += 4
        return struct.unpack(">i", r[pos - 4:pos])[0]

    def i16():
        nonlocal pos
        pos += 2
        return struct.unpack(">h", r[pos - 2:pos])[0]

    def string():
        nonlocal pos
        n = i16()
        if n < 0:
            return None
        pos += n
        return r[pos - n:pos].decode()

    brokers = {}
    for _ in range(i32()):
        node, host, port_, rack = i32(), string(), i32(), string()
        brokers[node] = (host, port_, rack)
    controller = i32()
    topics = {}
    for _ in range(i32()):
        i16()  # the topic's error code
        name = string()
        pos += 1  # is_internal
        parts = []
        for _ in range(i32()):
            error, index, leader = i16(), i32(), i32()
            replicas = [i32() for _ in range(i32())]
            isr = [i32() for _ in range(i32())]
            parts.append((index, error, leader, replicas, isr))
        topics[name] = sorted(parts)
    return Metadata(brokers, controller, topics)


class Node(Broker):
    def __init__(self, root: Path, node_id: int, voters: str | None, rpc_port: int, config: str,
                 data_root: Path | None = None):
        root.mkdir(parents=True, exist_ok=True)
        super().__init__((data_root or root) / f"node-{node_id}", shards=2, config=config, work_dir=root)
        self.node_id = node_id
        self.rpc_port = rpc_port
        self.voters = voters
        self.set_args()

    def set_args(self, data_dir: Path | None = None):
        if data_dir is not None:
            self.data_dir = Path(data_dir)
        self.extra_args = ["--node-id", str(self.node_id), "--rpc-listen", f"127.0.0.1:{self.rpc_port}",
                           "--voters", self.voters]


class Cluster:
    def __init__(self, root: Path, voters: int, brokers: int = 0, config=FAST, data_root: Path | None = None):
        """`config`: every node's config, or a function of the node id giving each its own;
        `data_root`: where the nodes' data dirs go (default `root`, with their logs)."""
        root.mkdir(parents=True, exist_ok=True)
        ids = list(range(1, voters + brokers + 1))
        rpc = {i: free_port() for i in ids}
        self.voters = ",".join(f"{i}@127.0.0.1:{rpc[i]}" for i in ids[:voters])
        of = config if callable(config) else lambda _: config
        self.nodes = {i: Node(root, i, self.voters, rpc[i], of(i), data_root) for i in ids}

    def start(self):
        for n in self.nodes.values():
            n.start()
        return self

    def stop(self):
        # Every node is killed before any is checked, so a failed check leaves none running.
        for n in self.nodes.values():
            n.kill()
        for n in self.nodes.values():
            n.assert_no_panic()

    def live(self):
        return [n for n in self.nodes.values() if n.alive()]

    def admin(self, node: int) -> AdminClient:
        """An admin client of node `node`, past its bootstrap (`ck.admin`)."""
        return ck.admin(self.nodes[node].bootstrap)

    def metadata(self, node: int, timeout_s: float = 5) -> Metadata:
        """Node `node`'s own Metadata answer."""
        return metadata_v1(self.nodes[node].port, timeout_s)

    def wait_for_brokers(self, expected: set[int], nodes=None, timeout_s: float = 30):
        """Waits until every node in `nodes` lists exactly `expected` and one controller; returns
        the controller's id."""
        nodes = nodes or [n.node_id for n in self.live()]
        agreed = []

        def agree():
            try:
                seen = [self.metadata(i) for i in nodes]
            except Exception:
                return False  # a node not answering yet, or one that closed on us
            controllers = {m.controller_id for m in seen}
            if all(set(m.brokers) == expected for m in seen) and len(controllers) == 1 and controllers <= expected:
                agreed.append(seen[0].controller_id)
            return bool(agreed)

        def state():
            return {i: (sorted(self.metadata(i).brokers), self.metadata(i).controller_id) for i in nodes}
        wait_until(agree, timeout_s, f"the brokers to agree on {expected}", state=state, every_s=0.2)
        return agreed[0]

    def create_topic(self, via: int, name: str, partitions: int, replicas: int, timeout_s: float = 30,
                     configs: dict | None = None):
        """Creates a topic through node `via` (with `configs`, in effect from its first record),
        retrying while no controller answers. A retry told the topic exists is done: the attempt
        before it timed out on the client but was committed (seen on a loaded machine)."""
        errors = []

        def created():
            # The client must outlive its futures, or they never complete.
            admin = self.admin(via)
            try:
                admin.create_topics([NewTopic(name, partitions, replicas, config=configs or {})],
                                   request_timeout=10)[name].result(15)
                return True
            except Exception as e:
                if "already exists" in str(e).lower():
                    if errors:
                        return True
                    raise
                errors.append(e)
                return False
        wait_until(created, timeout_s, f"topic {name} created through node {via}", state=lambda: errors[-3:],
                   every_s=0.2)

    def alter_topic_config(self, via: int, topic: str, configs: dict, timeout_s: float = 30):
        """Sets `configs` on `topic` through node `via`. Retried only when the client itself lost
        the request (a broker handle it retired: _DESTROY_BROKER or _TRANSPORT, see `ck.admin`); an
        error from the broker fails at once."""
        errors = []

        def altered():
            admin = self.admin(via)  # outlives its future
            res = ConfigResource("topic", topic, set_config=configs)
            try:
                admin.alter_configs([res])[res].result(15)
                return True
            except KafkaException as e:
                if e.args[0].code() not in (KafkaError._DESTROY_BROKER, KafkaError._TRANSPORT):
                    raise
                errors.append(e)
                return False
        wait_until(altered, timeout_s, f"{topic}'s configs altered through node {via}", state=lambda: errors[-3:],
                   every_s=0.2)
        # The controller answers once the change is committed; each node applies it when it reads
        # the record, as Kafka's brokers do. Callers go on to rely on it on every node.
        wait_until(lambda: all(configs.items() <= self.topic_configs(n.node_id, topic).items() for n in self.live()),
                   timeout_s, f"every node to apply {topic}'s configs {configs}",
                   state=lambda: {n.node_id: self.topic_configs(n.node_id, topic) for n in self.live()}, every_s=0.2)

    def topic_configs(self, node: int, topic: str) -> dict[str, str]:
        """`topic`'s configs as node `node` has applied them (its DescribeConfigs reads its own
        catalog); empty while it does not know the topic."""
        body = {"Resources": [{"ResourceType": 2, "ResourceName": topic, "ConfigurationKeys": None}]}
        with protocol.Connection("127.0.0.1", self.nodes[node].port) as conn:
            result = conn.send("DescribeConfigs", 4, body)["Results"][0]
        return {c["Name"]: c["Value"] for c in result["Configs"]} if result["ErrorCode"] == 0 else {}
