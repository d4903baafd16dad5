"""Is the broker the bottleneck? For some rows of the standard matrix, with each broker on CPU 0
and the load generator on CPU 1 (`--pin 0:1`, as perf/matrix.py): the records per second, the
share of its CPU the broker used (utime+stime of every thread over the row's wall time; 1.0 is
the CPU saturated), and for Sluice the produce requests per second and records per request
(its `sluice_request_duration_seconds_count`). Sluice and Kafka 4.4 (defaults) in the same run,
alternating row by row.

Usage: .venv/bin/python perf/broker_share.py [--pin 0:1] [--out-dir perf/results]"""
import argparse
import datetime
import os
import platform
import shutil
import sys
import tempfile
import time
from pathlib import Path

from matrix import (ROOT, bench, cpu_model, cpu_seconds, delete_topic, free_port, head_commit, pin, publish,
                    sharing, start_kafka, start_sluice)

sys.path.insert(0, str(ROOT / "tests" / "integration"))
from metrics import scrape  # noqa: E402  (the tests' reader of the endpoint)

# (acks, producers, partitions): rows Sluice trailed in the pinned matrix, and one it led.
ROWS = [("1", 4, 1), ("1", 16, 8), ("all", 16, 64), ("1", 1, 1)]
DURATION_S = 5


def produce_requests(metrics: str) -> int:
    return sum(v for (name, labels), v in scrape(metrics).items()
               if name == "sluice_request_duration_seconds_count" and 'api="Produce"' in labels)


def row(name, bootstrap, pids, metrics, work, acks, producers, partitions) -> str:
    topic = f"share-{acks}-{producers}-{partitions}-{int(time.time() * 1000)}"
    cpu0, requests0, t0 = sum(cpu_seconds(p) for p in pids), metrics and produce_requests(metrics), time.monotonic()
    r = bench(bootstrap, topic, work / f"{name}.json", mode="produce", duration=DURATION_S, warmup=1,
              producers=producers, partitions=partitions, message_size=1024, acks=acks)
    wall = time.monotonic() - t0
    share = (sum(cpu_seconds(p) for p in pids) - cpu0) / wall
    delete_topic(bootstrap, topic)
    if r is None:
        return f"| {acks} | {producers} | {partitions} | {name} | failed | | | |"
    cells = [f"{r['records_per_sec']:,.0f}", f"{share:.2f}"]
    if metrics:
        requests = produce_requests(metrics) - requests0
        cells += [f"{requests / wall:,.0f}", f"{r['records'] / max(requests, 1):,.0f}"]
    else:
        cells += ["—", "—"]
    return f"| {acks} | {producers} | {partitions} | {name} | " + " | ".join(cells) + " |"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--pin", default="0:1")
    ap.add_argument("--out-dir", default=str(ROOT / "perf" / "results"))
    a = ap.parse_args()
    pin(a.pin)
    work = Path(tempfile.mkdtemp(prefix="sluice-share-"))
    metrics = f"127.0.0.1:{free_port()}"
    config = work / "sluice.toml"
    config.write_text(f'metrics_listen = "{metrics}"\n')
    proc, sluice = start_sluice(work / "data", work / "sluice.log", config=config)
    kafka = start_kafka(work / "kafka", {})
    targets = [("sluice", sluice, [proc.pid], metrics), ("kafka", kafka.bootstrap(), kafka.pids(), None)]
    lines = [f"# Broker CPU share with the broker on its own CPU, {datetime.date.today().isoformat()},"
             f" commit {head_commit()}", "",
             f"- Command: `.venv/bin/python perf/broker_share.py --pin {a.pin}` (each row: `sluice bench --mode"
             f" produce --duration {DURATION_S} --warmup 1 --message-size 1024`)",
             f"- Machine: `nproc` = {os.cpu_count()}, {cpu_model()}, kernel `{platform.release()}`;"
             f" {sharing('')}",
             "- `CPU share`: the broker's utime+stime over the row's wall time (bench start-up and warm-up"
             " included); 1.00 is its CPU saturated. Requests per second and records per request from"
             " Sluice's own metrics (warm-up included).", "",
             "| acks | producers | partitions | broker | rec/s | CPU share | produce requests/s | records per request |",
             "|---|---|---|---|---|---|---|---|"]
    try:
        for acks, producers, partitions in ROWS:
            for name, bootstrap, pids, m in targets:
                lines.append(row(name, bootstrap, pids, m, work, acks, producers, partitions))
    finally:
        proc.terminate()
        proc.wait(timeout=30)
        kafka.stop()
        shutil.rmtree(work, ignore_errors=True)
    publish(lines + [""], Path(a.out_dir) / f"{datetime.date.today().isoformat()}-{head_commit()}-broker-share.md")


if __name__ == "__main__":
    main()
