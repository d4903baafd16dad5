"""Partition failover, Sluice against Apache Kafka 4.4 (issue 37): three nodes of each, one
partition at replication factor 3, acks=all, both on the same session timeouts (9 s broker
sessions, Kafka's KRaft default and Sluice's).

Each trial signals the partition's leader and, from that moment, sends an acks=all produce of
one record every 20 ms (a paced load) to whichever survivor the survivors' metadata names
leader, until one is acknowledged; the time from the signal to that acknowledgement is the
partition's unavailability. Two kinds, 20 trials each (alternating systems):
- SIGKILL: a crash. The controller moves leadership once the broker's session expires.
- SIGTERM: a controlled shutdown (Kafka's, and Sluice's `controller/cluster.rs`): leadership
  moves before the process exits.
The signalled node restarts and every replica is back in sync before the next trial.

Usage: perf/run --failover [--trials N] [--out-dir DIR]"""
import argparse
import datetime
import os
import platform
import shutil
import signal
import sys
import tempfile
import time
from pathlib import Path

from matrix import ROOT, cpu_model, free_port, head_commit, percentile, publish, start_kafka
from sluice_cluster import SluiceCluster

sys.path.insert(0, str(ROOT / "tests" / "kafka"))
sys.path.insert(0, str(ROOT / "tests" / "integration"))
import kafka_wire  # noqa: E402
from protocol import Closed, Connection  # noqa: E402

TOPIC = "failover"
PROBE_INTERVAL_S = 0.02
TRIAL_TIMEOUT_S = 60
IN_SYNC_TIMEOUT_S = 180


def view(port: int):
    """(leader, sorted in-sync set) of partition 0 as the node on `port` sees it; None when it
    does not answer."""
    try:
        with Connection("127.0.0.1", port, timeout_s=2) as c:
            meta = c.send("Metadata", 12, {"Topics": [{"Name": TOPIC}]})
        for t in meta["Topics"]:
            for p in t["Partitions"]:
                if p["PartitionIndex"] == 0 and p["ErrorCode"] == 0:
                    return p["LeaderId"], sorted(p["IsrNodes"])
    except (OSError, Closed, ValueError):
        pass
    return None


def produce_one(port: int) -> int:
    """The error code of an acks=all produce of one record to partition 0 (-1: no answer)."""
    batch = kafka_wire.record_batch([b"x"], timestamp=int(time.time() * 1000))
    body = {"Acks": -1, "TimeoutMs": 10_000, "TopicData": [
        {"Name": TOPIC, "PartitionData": [{"Index": 0, "Records": batch}]}]}
    try:
        with Connection("127.0.0.1", port, timeout_s=12) as c:
            return c.send("Produce", 9, body)["Responses"][0]["PartitionResponses"][0]["ErrorCode"]
    except (OSError, Closed, ValueError):
        return -1


def create_topic(cluster):
    port = cluster.nodes[0].port
    with Connection("127.0.0.1", port, timeout_s=30) as c:
        answer = c.send("CreateTopics", 7, {"Topics": [{"Name": TOPIC, "NumPartitions": 1, "ReplicationFactor": 3,
                                                        "Assignments": [], "Configs": []}], "timeoutMs": 30_000})
    assert answer["Topics"][0]["ErrorCode"] == 0, answer


def wait_in_sync(cluster) -> int:
    """Waits until every node names the same leader and all three replicas in sync; the leader."""
    deadline = time.monotonic() + IN_SYNC_TIMEOUT_S
    while time.monotonic() < deadline:
        views = [view(n.port) for n in cluster.nodes]
        if all(v and v[0] > 0 and v[1] == [1, 2, 3] for v in views) and len({v[0] for v in views}) == 1:
            return views[0][0]
        time.sleep(0.1)
    raise TimeoutError("the partition never had every replica in sync")


def trial(cluster, restart, sig: int) -> float:
    """Seconds from signalling the leader to the first acknowledgement by another node."""
    leader = wait_in_sync(cluster)
    node = next(n for n in cluster.nodes if n.node_id == leader)
    survivors = [n for n in cluster.nodes if n.node_id != leader]
    assert produce_one(node.port) == 0, "the leader acknowledges before the trial"
    t0 = time.perf_counter()
    node.signal(sig)
    i = 0
    while time.perf_counter() - t0 < TRIAL_TIMEOUT_S:
        seen = view(survivors[i % 2].port)
        i += 1
        by = next((n for n in survivors if seen and n.node_id == seen[0]), None)
        if by is not None and produce_one(by.port) == 0:
            elapsed = time.perf_counter() - t0
            break
        time.sleep(PROBE_INTERVAL_S)
    else:
        raise TimeoutError(f"no survivor acknowledged within {TRIAL_TIMEOUT_S} s")
    node.stop() if sig == signal.SIGTERM else node.kill()
    restart(node)
    return elapsed


def start_systems(work: Path):
    """(name, cluster, restart) for three-node Sluice and Kafka (its defaults: how it flushes
    does not change how it fails over)."""
    sluice = SluiceCluster(work / "sluice", free_port).start()
    kafka = start_kafka(work / "kafka", {}, nodes=3)

    def restart_kafka(node):
        node.start(kafka.heap_mb, kafka.jvm_args)

    return [("sluice", sluice, lambda node: node.start()), ("kafka", kafka, restart_kafka)]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--trials", type=int, default=20)
    ap.add_argument("--out-dir", default=str(ROOT / "perf" / "results"))
    a = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="sluice-perf-failover-"))
    systems = start_systems(work)
    results = {}
    try:
        for _, cluster, _ in systems:
            create_topic(cluster)
        for sig in (signal.SIGKILL, signal.SIGTERM):
            for t in range(a.trials):
                order = systems if t % 2 == 0 else list(reversed(systems))
                for name, cluster, restart in order:
                    s = trial(cluster, restart, sig)
                    results.setdefault((name, sig.name), []).append(s)
                    print(f"{sig.name} trial {t}: {name} acknowledged after {s * 1000:.0f} ms", flush=True)
    finally:
        for _, cluster, _ in systems:
            cluster.stop()
        shutil.rmtree(work, ignore_errors=True)
    write(a, results)


def write(a, results):
    commit = head_commit()
    lines = [
        f"# Partition failover against Kafka 4.4, {datetime.date.today().isoformat()}, commit {commit}", "",
        f"- Command: `perf/run --failover --trials {a.trials}` (perf/failover.py)",
        f"- Machine: `nproc` = {os.cpu_count()}, {cpu_model()}, kernel `{platform.release()}`; three nodes of"
        " each system and the client share it.",
        "- Three nodes each, one partition at replication factor 3, acks=all; 9 s broker sessions on both"
        " (Kafka's KRaft default, Sluice's default). Kafka with its default configuration.",
        "- Time from signalling the leader to the first acknowledgement by a survivor, probing every 20 ms.", "",
        "| signal | system | trials | p50 | p99 (max) | min | p99 ratio sluice/kafka |", "|---|---|---|---|---|---|---|",
    ]
    for sig in ("SIGKILL", "SIGTERM"):
        base = results.get(("kafka", sig))
        for name in ("sluice", "kafka"):
            v = results.get((name, sig))
            if not v:
                continue
            ratio = f"{percentile(v, 99) / percentile(base, 99):.2f}" if name == "sluice" and base else ""
            lines.append(f"| {sig} | {name} | {len(v)} | {percentile(v, 50) * 1000:,.0f} ms | "
                         f"{percentile(v, 99) * 1000:,.0f} ms | {min(v) * 1000:,.0f} ms | {ratio} |")
    lines.append("")
    publish(lines, Path(a.out_dir) / f"{datetime.date.today().isoformat()}-{commit}-failover.md")


if __name__ == "__main__":
    main()
