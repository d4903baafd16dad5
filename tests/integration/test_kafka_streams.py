"""Kafka Streams 4.4 with processing.guarantee=exactly_once_v2 against a three-node Sluice
cluster (tests/java/WordCount.java): a word count with a repartition topic and a state store
whose changelog is a compacted topic, three instances. While lines flow in, one Sluice node and
one Streams instance are SIGKILLed and restarted; every word's final count must equal its
occurrences in the input exactly, and each word's committed counts only ever grow. Streams
creates its internal topics with the AdminClient and relies on transactions, read_committed,
compaction and group rebalancing at once."""
import random
import struct
import subprocess
from pathlib import Path

import pytest
from confluent_kafka import Producer

import ck
import kafka_tools
from cluster import REPLICATED, Cluster
from waiting import wait_until

pytestmark = pytest.mark.skipif(not kafka_tools.installed(), reason="scripts/kafka-install has not run")

PROGRAM = Path(__file__).resolve().parents[1] / "java" / "WordCount.java"
WORDS = [f"w{i:02d}" for i in range(40)]
LINES = 2400


class Instance:
    """One WordCount process; its output (state changes) in a file."""

    def __init__(self, root: Path, name: str, bootstrap: str):
        self.root, self.name, self.bootstrap = root, name, bootstrap
        self.state_dir = root / f"state-{name}"
        self.proc = None
        self.starts = 0

    def start(self):
        self.starts += 1
        out = open(self.root / f"{self.name}-{self.starts}.log", "w")
        self.log_path = out.name
        self.proc = subprocess.Popen(
            # RocksDB unpacks its native library into java.io.tmpdir at every start and leaves it
            # there when killed: into the test's directory, which goes with the test.
            kafka_tools.java_command(PROGRAM, self.bootstrap, "wordcount", "lines", "counts", self.state_dir,
                                     jvm=[f"-Djava.io.tmpdir={self.root}"]),
            stdout=out, stderr=subprocess.STDOUT)
        return self

    def log(self) -> str:
        return Path(self.log_path).read_text(errors="replace")

    def running(self) -> bool:
        return self.log().rstrip().endswith("RUNNING")

    def kill(self):
        if self.proc and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


def lines(seed=7):
    rng = random.Random(seed)
    return [" ".join(rng.choice(WORDS) for _ in range(rng.randint(1, 8))) for _ in range(LINES)]


def produce(bootstrap, batch, first):
    p = Producer({"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True})
    for i, line in enumerate(batch, first):
        p.produce("lines", key=b"%d" % i, value=line.encode())
    assert p.flush(60) == 0


def counts_so_far(bootstrap):
    """The committed output: per word, its counts in the order written."""
    seen = {}
    for _, _, word, count, _ in ck.read_everything(bootstrap, "counts", 3):
        seen.setdefault(word.decode(), []).append(struct.unpack(">q", count)[0])
    return seen


@pytest.fixture
def three(tmp_path):
    c = Cluster(tmp_path / "cluster", 3, config=REPLICATED).start()
    instances = []
    try:
        c.wait_for_brokers({1, 2, 3})
        yield c, instances
    finally:
        for i in instances:
            i.kill()
        c.stop()


def test_word_count_is_exactly_once_through_a_node_and_an_instance_killed(three, tmp_path):
    cluster, instances = three
    bootstrap = ",".join(n.bootstrap for n in cluster.nodes.values())
    ck.create_topic(bootstrap, "lines", 3, replicas=3)
    ck.create_topic(bootstrap, "counts", 3, replicas=3)
    instances += [Instance(tmp_path, f"i{n}", bootstrap).start() for n in range(3)]
    wait_until(lambda: all(i.running() for i in instances), 120, "three Streams instances running",
               state=lambda: {i.name: i.log()[-300:] for i in instances})
    text = lines()
    expected = {}
    for line in text:
        for w in line.split():
            expected[w] = expected.get(w, 0) + 1
    third = LINES // 3
    produce(bootstrap, text[:third], 0)
    wait_until(lambda: counts_so_far(bootstrap), 60, "counting under way")

    # A Sluice node and a Streams instance die mid-stream and come back.
    victim = cluster.nodes[2]
    victim.kill()
    instances[0].kill()
    produce(",".join(n.bootstrap for n in cluster.live()), text[third:2 * third], third)
    victim.start()
    instances[0].start()
    produce(bootstrap, text[2 * third:], 2 * third)
    wait_until(instances[0].running, 120, "the restarted instance running again",
               state=lambda: instances[0].log()[-500:])

    def complete():
        got = counts_so_far(bootstrap)
        return {w: v[-1] for w, v in got.items()} == expected
    wait_until(complete, 180, "every word counted exactly",
               state=lambda: {"missing_or_off": {w: (counts_so_far(bootstrap).get(w, [None])[-1], n)
                                                  for w, n in expected.items()
                                                  if counts_so_far(bootstrap).get(w, [None])[-1] != n},
                              "instances": {i.name: i.log()[-500:] for i in instances}})
    # The survivors took the killed instance's tasks: each went through a rebalance.
    assert all(i.log().count("RUNNING") >= 2 for i in instances[1:]), [i.log()[-300:] for i in instances]
    for word, values in counts_so_far(bootstrap).items():
        assert values == sorted(set(values)), f"{word}'s committed counts went back: {values}"
    # Streams made its internal topics: the changelog compacted, the repartition topic not.
    configs = kafka_tools.run("kafka-configs", "--bootstrap-server", cluster.nodes[1].bootstrap, "--describe",
                              "--entity-type", "topics", "--entity-name", "wordcount-counts-changelog").stdout
    assert "cleanup.policy=compact" in configs, configs
    topics = kafka_tools.run("kafka-topics", "--bootstrap-server", cluster.nodes[1].bootstrap, "--list").stdout.split()
    assert "wordcount-counts-repartition" in topics, topics
