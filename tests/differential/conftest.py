"""Kafka 4.4 and Sluice, one node each, started once for the whole differential suite (a JVM
takes seconds and about 350 MiB to start) and stopped when it ends."""
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE), str(HERE.parent / "kafka"), str(HERE.parent / "integration")]

from broker import Broker, free_port  # noqa: E402
from peer import KafkaCluster  # noqa: E402

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
