"""Kafka 4.4's own command-line tools, run as the kafka-*.sh scripts run them: each script's
main class from tests/kafka/libs (scripts/kafka-install), in a JVM of its own.

    out = kafka_tools.run("kafka-topics", "--bootstrap-server", b, "--list").stdout
"""
import subprocess
from pathlib import Path

import peer  # tests/kafka, on the path by conftest

# Each kafka-*.sh script's main class (bin/ of Kafka 4.4's release).
MAIN = {
    "kafka-topics": "org.apache.kafka.tools.TopicCommand",
    "kafka-configs": "org.apache.kafka.tools.ConfigCommand",
    "kafka-consumer-groups": "org.apache.kafka.tools.consumer.group.ConsumerGroupCommand",
    "kafka-acls": "org.apache.kafka.tools.AclCommand",
    "kafka-reassign-partitions": "org.apache.kafka.tools.reassign.ReassignPartitionsCommand",
    "kafka-leader-election": "org.apache.kafka.tools.LeaderElectionCommand",
    "kafka-transactions": "org.apache.kafka.tools.TransactionsCommand",
    "kafka-get-offsets": "org.apache.kafka.tools.GetOffsetShell",
    "kafka-delete-records": "org.apache.kafka.tools.DeleteRecordsCommand",
    "kafka-log-dirs": "org.apache.kafka.tools.LogDirsCommand",
    "kafka-metadata-quorum": "org.apache.kafka.tools.MetadataQuorumCommand",
    "kafka-cluster": "org.apache.kafka.tools.ClusterTool",
    "kafka-broker-api-versions": "org.apache.kafka.tools.BrokerApiVersionsCommand",
    "kafka-features": "org.apache.kafka.tools.FeatureCommand",
    "kafka-producer-perf-test": "org.apache.kafka.tools.ProducerPerformance",
    "kafka-consumer-perf-test": "org.apache.kafka.tools.ConsumerPerformance",
    "kafka-verifiable-producer": "org.apache.kafka.tools.VerifiableProducer",
    "kafka-verifiable-consumer": "org.apache.kafka.tools.VerifiableConsumer",
}
# A short-lived tool's JVM: the C1 compiler alone starts faster (about a third off each run
# here), and these tools do little work.
QUICK_JVM = ["-XX:TieredStopAtLevel=1", "-XX:+UseSerialGC"]
# Kafka Connect and MirrorMaker 2, a release of their own (tests/kafka/connect/pom.xml says why).
CONNECT_LIBS = peer.HERE / "connect" / "libs"


def installed() -> bool:
    return peer.installed()


def java_command(main, *args, heap_mb: int = 256, libs: Path = peer.LIBS, jvm=()) -> list[str]:
    """The command line of a JVM running `main` (a class, or a single-file program's path)
    with `args`, on the jars in `libs` and the tests' log4j settings; `jvm`: more JVM flags."""
    return ["java", f"-Xmx{heap_mb}m", *jvm, f"-Dlog4j2.configurationFile={peer.LOG4J}", "-cp", f"{libs}/*",
            str(main), *map(str, args)]


def run(tool: str, *args, timeout: float = 120, check: bool = True, heap_mb: int = 256):
    """Runs `tool` (a script's name) to completion; with `check`, a non-zero exit fails with
    what the tool printed."""
    command = java_command(MAIN[tool], *args, heap_mb=heap_mb, jvm=QUICK_JVM)
    done = subprocess.run(command, capture_output=True, text=True, timeout=timeout)
    if check and done.returncode != 0:
        raise AssertionError(f"{tool} {' '.join(map(str, args))} exited {done.returncode}:\n"
                             f"{done.stdout}\n{done.stderr}")
    return done


def start(tool: str, *args, heap_mb: int = 256) -> subprocess.Popen:
    """Starts `tool` (a long-running one: the verifiable clients) with its output piped."""
    return subprocess.Popen(java_command(MAIN[tool], *args, heap_mb=heap_mb), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


def table(out: str, first: str) -> list[dict]:
    """The rows of a whitespace-separated table the tools print, from its header line (the
    line that starts with `first`), as dicts by column name."""
    lines = [line.split() for line in out.splitlines() if line.strip()]
    start_at = next(i for i, cols in enumerate(lines) if cols and cols[0] == first)
    header = lines[start_at]
    return [dict(zip(header, cols)) for cols in lines[start_at + 1:] if len(cols) == len(header)]
