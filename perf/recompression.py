"""Measures what broker-side recompression costs the other partitions of its shard: the acks=all
latency of a quiet partition (1,000 records/s of 100 B, acks=1) alone, then while another topic of the
same shard (`compression.type=gzip`) takes uncompressed batches of about 1 MiB that the broker
converts to gzip. One shard, so both partitions share it; each binary given runs both phases, so
the comparison is same-run (the machine is shared and noisy).

Usage: .venv/bin/python perf/recompression.py [--binary NAME=PATH ...] [--duration S] [--rounds N]
(default: the release build as `current`)."""
import argparse
import json
import os
import random
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from confluent_kafka import Producer

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "integration"))
sys.path.insert(0, str(ROOT / "perf"))
import ck  # noqa: E402
from broker import BINARY, Broker  # noqa: E402
from matrix import bench, pin  # noqa: E402

# acks=1: the partition's own fsyncs (up to 4 ms on a busy VM) would hide the shard's stalls.
QUIET = dict(mode="produce", acks="1", rate=1000, message_size=100, partitions=1, producers=1, linger_ms=0)
# About 1 MiB per batch: 20,000 records/s of 1 KiB lingering 50 ms, sent uncompressed.
LOAD_RATE = 20_000
LOAD_CONFIG = {"acks": "1", "linger.ms": 50, "batch.size": 1 << 20, "compression.type": "none",
               "queue.buffering.max.kbytes": 64 << 10}


def log_lines(count: int) -> list[bytes]:
    """Log-like JSON records of 1 KiB (timestamps, levels, services, trace ids, messages), as
    gzip meets them in practice (`sluice bench`'s repeated filler compresses far faster), the
    input of benches/compression.rs."""
    rng = random.Random(38)
    words = "request handled user cache miss retry timeout connection pool query order payment".split()
    out = []
    for i in range(count):
        line = b""
        while len(line) < 1024:
            line += json.dumps({"ts": 1_700_000_000_000 + i * 7 + rng.randrange(1000),
                                "level": rng.choice(["INFO", "WARN", "DEBUG", "ERROR"]),
                                "service": rng.choice(["api", "billing", "search", "auth"]),
                                "trace": "%032x" % rng.getrandbits(128),
                                "msg": " ".join(rng.choice(words) for _ in range(rng.randrange(4, 12))),
                                "latency_ms": rng.randrange(1, 5000)}).encode() + b"\n"
        out.append(line[:1024])
    return out


def gzip_load(bootstrap: str, seconds: float, stop: threading.Event, sent: list):
    """Produces log lines to `gz` at LOAD_RATE for `seconds` (or until `stop`)."""
    lines = log_lines(2000)
    p = Producer({"bootstrap.servers": bootstrap, **LOAD_CONFIG})
    start = time.monotonic()
    n = 0
    while not stop.is_set() and time.monotonic() - start < seconds:
        due = int((time.monotonic() - start) * LOAD_RATE)
        while n < due:
            try:
                p.produce("gz", lines[n % len(lines)], partition=0)
                n += 1
            except BufferError:
                p.poll(0.01)
        p.poll(0.001)
    p.flush(30)
    sent.append(n / (time.monotonic() - start))


def phase(broker: Broker, work: Path, name: str, duration: float, with_load: bool) -> dict:
    """The quiet partition's bench result, with or without the gzip load beside it."""
    stop, sent = threading.Event(), []
    load = None
    if with_load:
        load = threading.Thread(target=gzip_load, args=(broker.bootstrap, duration + 4, stop, sent))
        load.start()
    result = bench(broker.bootstrap, "quiet", work / f"{name}-quiet.json", warmup=2, duration=duration, **QUIET)
    if load is not None:
        stop.set()
        load.join()
        result["load"] = sent[0]
    return result


def run(binary: Path, work: Path, label: str, duration: float) -> dict:
    broker = Broker(work / f"data-{label}", shards=1, binary=binary, work_dir=work)
    broker.start()
    try:
        ck.create_topic(broker.bootstrap, "quiet", 1)
        ck.create_topic(broker.bootstrap, "gz", 1, {"compression.type": "gzip"})
        return {"alone": phase(broker, work, f"{label}-alone", duration, False),
                "beside": phase(broker, work, f"{label}-beside", duration, True)}
    finally:
        broker.stop()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--binary", action="append", default=[], metavar="NAME=PATH")
    ap.add_argument("--duration", type=float, default=15.0)
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--client-cpus", help="keep the load generators on these CPUs (taskset); the broker "
                    "keeps every CPU, its one shard pinned to the first")
    a = ap.parse_args()
    pin(f"all:{a.client_cpus}" if a.client_cpus else None)
    binaries = [tuple(b.split("=", 1)) for b in a.binary] or [("current", str(BINARY))]
    work = Path(tempfile.mkdtemp(prefix="sluice-perf-recompression-"))
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True,
                            text=True).stdout.strip()
    print(f"machine: nproc={os.cpu_count()} kernel={os.uname().release} commit={commit}")
    print(f"load generators on CPUs {a.client_cpus or 'any'}")
    print("quiet partition, acks=1 p50 / p99 / p99.9 ms (1,000 rec/s of 100 B); gzip load rec/s")
    for r in range(a.rounds):
        for label, path in binaries:
            res = run(Path(path), work, f"{label}-{r}", a.duration)
            alone, beside = res["alone"]["latency_ms"], res["beside"]["latency_ms"]
            load = res["beside"]["load"]
            print(f"round {r} {label:>10}: alone {alone['p50']:.2f} / {alone['p99']:.2f} / "
                  f"{alone['p99_9']:.2f}; beside gzip {beside['p50']:.2f} / {beside['p99']:.2f} / "
                  f"{beside['p99_9']:.2f} (load {load:.0f} rec/s)", flush=True)
    subprocess.run(["rm", "-rf", str(work)])


if __name__ == "__main__":
    main()
