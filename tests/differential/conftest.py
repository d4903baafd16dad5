"""Kafka 4.4 and Sluice, one node each, started once for the whole differential suite (a JVM
takes seconds and about 350 MiB to start) and stopped when it ends; a secured pair and a pair of
three-node clusters, each started only if a scenario needs it."""
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE), str(HERE.parent / "kafka"), str(HERE.parent / "integration")]

from broker import Broker, free_port  # noqa: E402
from cluster import Cluster  # noqa: E402
from peer import KafkaCluster  # noqa: E402
from waiting import wait_until  # noqa: E402

NODE_ID = 1  # Kafka's node id, given to Sluice too so that leader and replica ids compare
# Both brokers as a test wants them and Kafka's defaults otherwise: no auto topic creation, a
# group's first rebalance not delayed, the session timeouts' lower bound Kafka's.
KAFKA_CONFIGS = {"group.initial.rebalance.delay.ms": 0, "auto.create.topics.enable": "false"}
SLUICE_CONFIG = """
auto_create_topics = false
group_initial_rebalance_delay_ms = 0
group_min_session_timeout_ms = 6000
"""


@pytest.fixture(scope="session")
def brokers(tmp_path_factory):
    root = tmp_path_factory.mktemp("differential")
    kafka = KafkaCluster(root / "kafka", nodes=1, configs=KAFKA_CONFIGS, heap_mb=512, free_port=free_port)
    sluice = Broker(root / "sluice" / "data", shards=2, config=SLUICE_CONFIG, extra_args=["--node-id", str(NODE_ID)])
    (root / "sluice").mkdir(parents=True, exist_ok=True)
    kafka.start()
    try:
        sluice.start()
        yield {"kafka": (kafka.nodes[0].port, NODE_ID), "sluice": (sluice.port, NODE_ID)}
    finally:
        sluice.kill()
        kafka.stop()
    sluice.assert_no_panic()


# The secured pair: a SASL_PLAINTEXT listener (PLAIN) and ACLs, admin a super user, alice not.
ADMIN = ("admin", "admin-secret")
ALICE = ("alice", "alice-secret")
JAAS = ('org.apache.kafka.common.security.plain.PlainLoginModule required '
        f'username="{ADMIN[0]}" password="{ADMIN[1]}" user_{ADMIN[0]}="{ADMIN[1]}" user_{ALICE[0]}="{ALICE[1]}";')
SECURE_KAFKA_CONFIGS = {
    **KAFKA_CONFIGS,
    "sasl.enabled.mechanisms": "PLAIN",
    "listener.name.sasl_plaintext.plain.sasl.jaas.config": JAAS,
    "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
    # The node's own requests come in on its PLAINTEXT and CONTROLLER listeners as ANONYMOUS.
    "super.users": f"User:{ADMIN[0]};User:ANONYMOUS",
}
SECURE_SLUICE_CONFIG = SLUICE_CONFIG + f"""
[[listeners]]
name = "PLAINTEXT"
address = "127.0.0.1:@PORT@"
security_protocol = "PLAINTEXT"
[[listeners]]
name = "SASL_PLAINTEXT"
address = "127.0.0.1:@SASL_PORT@"
security_protocol = "SASL_PLAINTEXT"

[sasl]
mechanisms = ["PLAIN"]
bootstrap_users = [{{ name = "{ADMIN[0]}", password = "{ADMIN[1]}" }}, {{ name = "{ALICE[0]}", password = "{ALICE[1]}" }}]

[authorization]
enabled = true
super_users = ["User:{ADMIN[0]}"]
"""


@pytest.fixture(scope="session")
def secure_brokers(tmp_path_factory):
    """Kafka and Sluice with SASL/PLAIN and ACLs (started only if a secured scenario runs)."""
    root = tmp_path_factory.mktemp("differential-secure")
    kafka = KafkaCluster(root / "kafka", nodes=1, configs=SECURE_KAFKA_CONFIGS, free_port=free_port, sasl=True)
    sasl_port = free_port()
    config = SECURE_SLUICE_CONFIG.replace("@SASL_PORT@", str(sasl_port))
    (root / "sluice").mkdir(parents=True, exist_ok=True)
    sluice = Broker(root / "sluice" / "data", shards=2, config=config, extra_args=["--node-id", str(NODE_ID)])
    kafka.start()
    try:
        sluice.start()
        # Sluice gives the bootstrap users their credentials just after it starts serving.
        wait_until(lambda: "bootstrap users: 2 ready" in sluice.log(), 30, "Sluice's bootstrap users")
        yield {"kafka": (kafka.nodes[0].sasl_port, NODE_ID), "sluice": (sasl_port, NODE_ID)}
    finally:
        sluice.kill()
        kafka.stop()
    sluice.assert_no_panic()


@pytest.fixture(scope="session")
def cluster_brokers(tmp_path_factory):
    """Three Kafka nodes and three Sluice nodes (node ids 1 to 3, every one a voter; the
    internal topics with three replicas on both), for the coordinator errors that need another
    node. Each side: (node id: port, a controlled shutdown of one node)."""
    root = tmp_path_factory.mktemp("differential-cluster")
    kafka = KafkaCluster(root / "kafka", nodes=3, configs=KAFKA_CONFIGS, heap_mb=384, free_port=free_port)
    sluice = Cluster(root / "sluice", voters=3, config=SLUICE_CONFIG)
    kafka.start()
    try:
        sluice.start()
        sluice.wait_for_brokers({1, 2, 3})
        yield {"kafka": ({n.node_id: n.port for n in kafka.nodes}, lambda i: kafka.nodes[i - 1].stop()),
               "sluice": ({i: n.port for i, n in sluice.nodes.items()}, lambda i: sluice.nodes[i].stop())}
    finally:
        kafka.stop()
        sluice.stop()  # and every node's log is checked for a panic
