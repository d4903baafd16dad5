"""Controller measurements of a 3-node cluster on this machine (issue 15), with the production
defaults (100 ms Raft tick: elections after 1-2 s of silence; 1 s heartbeats; 9 s sessions):

1. Metadata write latency: N CreateTopics (1 partition, 3 replicas), one at a time, sent as raw
   Kafka requests to the active controller and, separately, to a node that forwards them.
   Answered once committed by a quorum and installed on the answering node's shards.
2. Controller failover: SIGKILL the active controller, then send CreateTopics to a survivor
   every 20 ms until one commits; the time from the kill to that commit. The killed node is
   restarted and rejoins before the next trial.

With --replication, partition replication instead (issue 16):

3. acks=all throughput and latency at replication factor 3 against 1, in one run: `sluice
   bench` (one librdkafka producer: on 2 cores a second one starves the brokers and its
   latencies measure the machine) on a 3-partition topic of each, rounds alternating, at a
   fixed rate and at full speed.
4. Partition failover: SIGKILL the leader of an RF 3 partition, then send an acks=all produce
   to whichever survivor its metadata names leader, every 20 ms, until one is acknowledged; the
   time from the kill to that acknowledgement. The killed node restarts and rejoins the
   in-sync set before the next trial.

Usage: perf/cluster.py [--replication] [--writes N] [--trials N] [--rounds N]
                       [--out perf/results/DATE-cluster.json]"""
import argparse
import json
import platform
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "integration"))
import kafka_wire as kw  # noqa: E402
from cluster import metadata_v1  # noqa: E402
from matrix import BINARY, bench, free_port, listening, percentile  # noqa: E402


def create_topic(port: int, name: str, replicas: int = 3, partitions: int = 1) -> int:
    """The error code of one CreateTopics v2 sent to the node on `port` (-1: no answer)."""
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=15) as s:
            s.sendall(kw.create_topics_v2(name, partitions, replicas))
            return kw.create_topics_v2_result(kw.read_response(s))[0]
    except OSError:
        return -1


class Node:
    def __init__(self, root: Path, node_id: int, voters: str, rpc_port: int):
        self.node_id, self.rpc_port = node_id, rpc_port
        self.port = free_port()
        self.data_dir = root / f"node-{node_id}"
        self.log = root / f"node-{node_id}.log"
        self.args = [str(BINARY), "serve", "--listen", f"127.0.0.1:{self.port}", "--data-dir",
                     str(self.data_dir), "--shards", "1", "--node-id", str(node_id), "--rpc-listen",
                     f"127.0.0.1:{rpc_port}", "--voters", voters]
        self.proc = None

    def start(self):
        self.proc = subprocess.Popen(self.args, stdout=open(self.log, "a"), stderr=subprocess.STDOUT)
        listening(self.proc, self.port, f"node {self.node_id} did not start: see {self.log}")

    def kill(self):
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait()


def summary(ms):
    return {"n": len(ms), "p50_ms": round(percentile(ms, 50), 2), "p99_ms": round(percentile(ms, 99), 2),
            "max_ms": round(max(ms), 2)}


def wait_for_three(nodes, timeout_s=60):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            views = [metadata_v1(n.port) for n in nodes.values()]
            if all(set(v.brokers) == {1, 2, 3} for v in views) and \
                    len({v.controller_id for v in views}) == 1 and views[0].controller_id > 0:
                return views[0].controller_id
        except OSError:
            pass
        time.sleep(0.1)
    sys.exit("the cluster did not form")


def write_latency(nodes, writes):
    controller = wait_for_three(nodes)
    other = next(i for i in nodes if i != controller)
    out = {}
    for label, node in (("to the controller", controller), ("forwarded", other)):
        ms = []
        for i in range(writes):
            t0 = time.perf_counter()
            code = create_topic(nodes[node].port, f"w-{node}-{i}")
            ms.append((time.perf_counter() - t0) * 1000)
            assert code == 0, f"CreateTopics failed with {code}"
        out[label] = summary(ms)
        print(f"CreateTopics {label}: {out[label]}", flush=True)
    return out


def failover(nodes, trials):
    ms = []
    for trial in range(trials):
        controller = wait_for_three(nodes)
        survivor = next(i for i in nodes if i != controller)
        nodes[controller].kill()
        t0 = time.perf_counter()
        while create_topic(nodes[survivor].port, f"f-{trial}") != 0:
            time.sleep(0.02)
        ms.append((time.perf_counter() - t0) * 1000)
        print(f"trial {trial}: controller {controller} killed, next write committed after {ms[-1]:.0f} ms",
              flush=True)
        nodes[controller].start()
    return summary(ms)


def produce_one(port: int, topic: str) -> int:
    """The error code of one acks=all produce of one record to partition 0 (-1: no answer)."""
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=15) as s:
            s.sendall(kw.request(0, 3, 1, kw.produce_v3(topic, 0, kw.record_batch([b"x"]), acks=-1,
                                                        timeout_ms=10000)))
            return kw.produce_v3_error_code(kw.read_response(s))[0]
    except OSError:
        return -1


def partition_view(nodes, node: int, topic: str):
    """(leader, isr) of partition 0 in node `node`'s metadata; None when it does not answer."""
    try:
        for index, _e, leader, _r, isr in metadata_v1(nodes[node].port).topics.get(topic, []):
            if index == 0:
                return leader, sorted(isr)
    except OSError:
        pass
    return None


def wait_in_sync(nodes, topic: str, timeout_s=120):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        views = [partition_view(nodes, i, topic) for i in nodes]
        if all(v and v[0] > 0 and v[1] == [1, 2, 3] for v in views):
            return views[0][0]
        time.sleep(0.1)
    sys.exit(f"{topic} never had every replica in sync")


def throughput(nodes, rounds: int, root: Path):
    """Fixed rate first, on fresh topics: the full-speed rows write gigabytes, whose writeback
    would otherwise stall the fixed-rate rows' fsyncs."""
    controller = wait_for_three(nodes)
    bootstrap = ",".join(f"127.0.0.1:{n.port}" for n in nodes.values())
    out = {}
    for label, opts in (("5000 records/s", {"rate": 5000}), ("full speed", {})):
        runs = {1: [], 3: []}
        for rf in runs:
            topic = f"{'rate' if opts else 'full'}-rf{rf}"
            assert create_topic(nodes[controller].port, topic, rf, partitions=3) == 0
        for r in range(rounds):
            for rf in runs:
                topic = f"{'rate' if opts else 'full'}-rf{rf}"
                res = bench(bootstrap, topic, root / f"{topic}-{r}.json", mode="produce", acks="all",
                            duration=10, warmup=2, producers=1, message_size=1024, **opts)
                runs[rf].append((res["records_per_sec"], res["latency_ms"]["p50"], res["latency_ms"]["p99"]))
                print(f"{label} rf {rf} round {r}: {runs[rf][-1]}", flush=True)
        out[label] = {f"rf{rf}": {"records_per_sec": sorted(x[0] for x in v)[len(v) // 2],
                                  "p50_ms": sorted(x[1] for x in v)[len(v) // 2],
                                  "p99_ms": sorted(x[2] for x in v)[len(v) // 2]} for rf, v in runs.items()}
    return out


def partition_failover(nodes, trials):
    controller = wait_for_three(nodes)
    assert create_topic(nodes[controller].port, "fo") == 0
    ms = []
    for trial in range(trials):
        leader = wait_in_sync(nodes, "fo")
        assert produce_one(nodes[leader].port, "fo") == 0
        survivors = [i for i in nodes if i != leader]
        nodes[leader].kill()
        t0 = time.perf_counter()
        while True:
            view = partition_view(nodes, survivors[trial % 2], "fo")
            if view and view[0] in survivors and produce_one(nodes[view[0]].port, "fo") == 0:
                break
            time.sleep(0.02)
        ms.append((time.perf_counter() - t0) * 1000)
        print(f"trial {trial}: leader {leader} killed, acknowledged by {view[0]} after {ms[-1]:.0f} ms",
              flush=True)
        nodes[leader].start()
    return summary(ms)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--replication", action="store_true")
    ap.add_argument("--writes", type=int, default=200)
    ap.add_argument("--trials", type=int, default=20)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()
    root = Path(tempfile.mkdtemp(prefix="sluice-perf-cluster-"))
    rpc = {i: free_port() for i in (1, 2, 3)}
    voters = ",".join(f"{i}@127.0.0.1:{rpc[i]}" for i in (1, 2, 3))
    nodes = {i: Node(root, i, voters, rpc[i]) for i in (1, 2, 3)}
    try:
        for n in nodes.values():
            n.start()
        report = {
            "machine": {"cpus": len(__import__("os").sched_getaffinity(0)), "platform": platform.platform()},
            "command": " ".join(sys.argv),
        }
        if args.replication:
            report["acks_all"] = throughput(nodes, args.rounds, root)
            if args.trials > 0:
                report["partition_failover"] = partition_failover(nodes, args.trials)
        else:
            report["create_topics"] = write_latency(nodes, args.writes)
            report["failover"] = failover(nodes, args.trials)
    finally:
        for n in nodes.values():
            n.kill()
        shutil.rmtree(root, ignore_errors=True)
    print(json.dumps(report, indent=2))
    if args.out:
        args.out.write_text(json.dumps(report, indent=2) + "\n")


if __name__ == "__main__":
    main()
