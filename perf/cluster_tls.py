"""Replication over a SASL_SSL inter-broker listener against PLAINTEXT, in one run (issue 19).

Two 3-node clusters (1 shard per node) on this machine, alike but for the listener the nodes
replicate over: PLAINTEXT in one; in the other an INTERNAL SASL_SSL listener (`inter_broker_listener`,
the node user's SCRAM login from the `[cluster] secret`, rustls, RSA 2048). Clients use each
node's PLAINTEXT listener in both, so only the followers' fetches differ. Per round, on each
cluster in turn (alternating which goes first): `sluice bench` produces N records of 1 KiB with
acks=all from one producer to a 3-partition topic of replication factor 3 (answered only once
the followers have the records). Reported: throughput, ack latency p50/p99, and the three
nodes' CPU (utime+stime) per GiB produced, as medians of the rounds, and TLS over plaintext as
ratios.

Usage: perf/run --cluster-tls [--records N] [--rounds R]
"""
import argparse
import datetime
import os
import platform
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "integration"))
import kafka_wire as kw  # noqa: E402
from cluster import metadata_v1  # noqa: E402
from cost import GIB  # noqa: E402
from matrix import (BINARY, ROOT, bench, cpu_model, cpu_seconds, free_port,  # noqa: E402
                    head_commit, listening, publish)
from tls import certificates  # noqa: E402

SECRET = "perf-cluster-secret-0123456789"


class PerfCluster:
    def __init__(self, root: Path, pki: Path, secure: bool):
        self.root, self.pki, self.secure = root, pki, secure
        self.rpc = {i: free_port() for i in (1, 2, 3)}
        self.ports = {i: free_port() for i in (1, 2, 3)}
        voters = ",".join(f"{i}@127.0.0.1:{self.rpc[i]}" for i in (1, 2, 3))
        self.procs = {}
        for i in (1, 2, 3):
            config = root / f"node-{i}.toml"
            config.write_text(self.config(i))
            args = [str(BINARY), "serve", "--config", str(config), "--data-dir", str(root / f"node-{i}"),
                    "--shards", "1", "--node-id", str(i), "--rpc-listen", f"127.0.0.1:{self.rpc[i]}",
                    "--voters", voters]
            self.procs[i] = subprocess.Popen(args, stdout=open(root / f"node-{i}.log", "w"),
                                             stderr=subprocess.STDOUT)
        for i, p in self.procs.items():
            listening(p, self.ports[i], f"node {i} did not start: see {root}/node-{i}.log")

    def config(self, i: int) -> str:
        plain = f'[[listeners]]\nname = "PLAINTEXT"\naddress = "127.0.0.1:{self.ports[i]}"\n' \
                'security_protocol = "PLAINTEXT"\n'
        if not self.secure:
            return plain
        return (f'inter_broker_listener = "INTERNAL"\n{plain}'
                f'[[listeners]]\nname = "INTERNAL"\naddress = "127.0.0.1:{free_port()}"\n'
                'security_protocol = "SASL_SSL"\n'
                f'[tls]\ncert_file = "{self.pki}/cert.pem"\nkey_file = "{self.pki}/key.pem"\n'
                f'ca_file = "{self.pki}/ca.pem"\n[cluster]\nsecret = "{SECRET}"\n')

    @property
    def bootstrap(self) -> str:
        return ",".join(f"127.0.0.1:{p}" for p in self.ports.values())

    def cpu(self) -> float:
        return sum(cpu_seconds(p.pid) for p in self.procs.values())

    def wait_in_sync(self, topic: str, timeout_s=60):
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            try:
                rows = metadata_v1(self.ports[1]).topics.get(topic, [])
                if len(rows) == 3 and all(sorted(r[4]) == [1, 2, 3] and r[2] > 0 for r in rows):
                    return
            except OSError:
                pass
            time.sleep(0.2)
        sys.exit(f"{topic} never had every replica in sync (see {self.root})")

    def create(self, topic: str):
        deadline = time.monotonic() + 60
        while True:
            try:
                with __import__("socket").create_connection(("127.0.0.1", self.ports[1]), timeout=15) as s:
                    s.sendall(kw.create_topics_v2(topic, 3, 3))
                    if kw.create_topics_v2_result(kw.read_response(s))[0] == 0:
                        break
            except OSError:
                pass
            if time.monotonic() > deadline:
                sys.exit(f"could not create {topic} (see {self.root})")
            time.sleep(0.5)
        self.wait_in_sync(topic)

    def stop(self):
        for p in self.procs.values():
            if p.poll() is None:
                p.send_signal(signal.SIGKILL)
                p.wait()


def one_round(c: PerfCluster, topic: str, records: int, work: Path) -> dict:
    """5,000 records/s for 10 s (latency at a moderate load), then `records` at full speed."""
    c.create(topic)
    out = {}
    for label, opts in (("rate", {"rate": 5000, "duration": 10, "warmup": 2}), ("full", {"count": records})):
        before = c.cpu()
        res = bench(c.bootstrap, topic, work / f"{topic}-{label}.json", mode="produce", producers=1,
                    message_size=1024, acks="all", **opts)
        cpu = c.cpu() - before
        assert res and res["errors"] == 0, res
        out[label] = {"rec_s": res["records_per_sec"], "p50_ms": res["latency_ms"]["p50"],
                      "p99_ms": res["latency_ms"]["p99"], "cpu_s_per_gib": cpu / (res["bytes"] / GIB)}
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--records", type=int, default=300_000)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--out-dir", default=str(ROOT / "perf" / "results"))
    a = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="sluice-cluster-tls-"))
    certificates(work)
    clusters = {}
    runs = {"PLAINTEXT": [], "SASL_SSL": []}
    try:
        for name in runs:
            (work / name).mkdir()
            clusters[name] = PerfCluster(work / name, work, name == "SASL_SSL")
        for r in range(a.rounds):
            order = list(runs) if r % 2 == 0 else list(runs)[::-1]
            for name in order:
                runs[name].append(one_round(clusters[name], f"rep-{r}", a.records, work))
                print(name, r, runs[name][-1], flush=True)
    finally:
        for c in clusters.values():
            c.stop()
        shutil.rmtree(work, ignore_errors=True)
    write(a, runs)


def median(rounds, label, key):
    values = sorted(r[label][key] for r in rounds)
    return values[len(values) // 2]


def write(a, runs):
    commit = head_commit()
    cpu = cpu_model()
    lines = [
        f"# Replication over SASL_SSL against PLAINTEXT, {datetime.date.today().isoformat()}, commit {commit}", "",
        f"- Command: `perf/run --cluster-tls --records {a.records} --rounds {a.rounds}`",
        f"- Machine: `nproc` = {os.cpu_count()}, {cpu}, kernel `{platform.release()}`; six nodes (two",
        "  clusters of three, 1 shard each) and the client share it.",
        "- Inter-broker listener PLAINTEXT in one cluster, SASL_SSL (node user, SCRAM-SHA-512, rustls,",
        "  RSA 2048) in the other; clients on PLAINTEXT in both. 1 KiB records, acks=all, one producer,",
        "  3 partitions × 3 replicas; medians of the rounds, clusters alternating first. CPU: utime+stime",
        "  of the three nodes, from /proc, per GiB produced.", "",
        "| load | inter-broker listener | rec/s | ack p50 ms | ack p99 ms | nodes' CPU s/GiB |",
        "|---|---|---|---|---|---|",
    ]
    keys = ("rec_s", "p50_ms", "p99_ms", "cpu_s_per_gib")
    for label, load in (("rate", "5,000 rec/s"), ("full", "full speed")):
        med = {name: {k: median(rs, label, k) for k in keys} for name, rs in runs.items()}
        for name, m in med.items():
            lines.append(f"| {load} | {name} | {m['rec_s']:,.0f} | {m['p50_ms']:.2f} | {m['p99_ms']:.2f} | "
                         f"{m['cpu_s_per_gib']:.2f} |")
        p, t = med["PLAINTEXT"], med["SASL_SSL"]
        lines.append(f"| {load} | SASL_SSL / PLAINTEXT | {t['rec_s'] / p['rec_s']:.2f}× | "
                     f"{t['p50_ms'] / p['p50_ms']:.2f}× | {t['p99_ms'] / p['p99_ms']:.2f}× | "
                     f"{t['cpu_s_per_gib'] / p['cpu_s_per_gib']:.2f}× |")
    lines += ["", "Every round (rec/s, ack p50 and p99 ms, CPU s/GiB), to show this machine's spread:", ""]
    for name, rs in runs.items():
        for i, r in enumerate(rs):
            each = "; ".join(f"{label}: {r[label]['rec_s']:,.0f}, {r[label]['p50_ms']:.1f}, "
                             f"{r[label]['p99_ms']:.1f}, {r[label]['cpu_s_per_gib']:.1f}" for label in r)
            lines.append(f"- {name} round {i}: {each}")
    lines.append("")
    out = Path(a.out_dir) / f"{datetime.date.today().isoformat()}-cluster-tls.md"
    publish(lines, out)


if __name__ == "__main__":
    main()
