"""Transactions against idempotent produce, in one run on one fresh broker (issue 18): `sluice
bench` with one librdkafka producer (1 KiB records, acks=all, 8 partitions), rounds alternating
between idempotent produce and transactions of 100 and of 1,000 records (each commits every N
records). Reports records/s, MB/s and ack latency per mode, and for transactions the commits per
second and the commit latency (librdkafka's commit_transaction: the flush of the transaction's
last records, then EndTxn, answered once the coordinator's PrepareCommit is durable).

Usage: perf/run --transactions [--rounds N] [--duration S] [--out perf/results/DATE-transactions.md]"""
import argparse
import platform
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

from matrix import ROOT, bench, delete_topic, head_commit, publish, start_sluice

MODES = [("idempotent", {"idempotence": True}),
         ("transactions of 100", {"transaction_records": 100}),
         ("transactions of 1,000", {"transaction_records": 1000})]


def run_mode(bootstrap, work, name, extra, a, round_no):
    topic = f"txn-{round_no}-{name.split()[-1].replace(',', '')}"
    opts = dict(mode="produce", duration=a.duration, warmup=a.warmup, partitions=8, message_size=1024,
                acks="all", linger_ms=5)
    opts.update(extra)
    r = bench(bootstrap, topic, work / f"{topic}.json", **opts)
    delete_topic(bootstrap, topic)
    return r


def median(rows, key):
    values = [key(r) for r in rows if r is not None]
    return statistics.median(values) if values else float("nan")


def write_markdown(path, results, a, commit):
    lines = [f"# Transactions against idempotent produce ({time.strftime('%Y-%m-%d')}, {commit})", "",
             f"Command: `perf/run --transactions --rounds {a.rounds} --duration {a.duration}`. Machine: "
             f"{platform.node()}, {platform.machine()}, kernel {platform.release()}, "
             f"{shutil.os.cpu_count()} CPUs; broker and bench share them. One librdkafka producer, "
             "1 KiB records, acks=all, linger 5 ms, 8 partitions; medians of the rounds, which "
             "alternate between the modes.", "",
             "| mode | records/s | MB/s | ack p50 ms | ack p99 ms | commits/s | commit p50 ms | commit p99 ms |",
             "|---|---|---|---|---|---|---|---|"]
    base = median(results[MODES[0][0]], lambda r: r["records_per_sec"])
    for name, _ in MODES:
        rows = results[name]
        t = [r for r in rows if r and r.get("transactions")]
        txn = (f"{median(t, lambda r: r['transactions']['commits_per_sec']):.1f} | "
               f"{median(t, lambda r: r['transactions']['commit_latency_ms']['p50']):.2f} | "
               f"{median(t, lambda r: r['transactions']['commit_latency_ms']['p99']):.2f}") if t else "– | – | –"
        lines.append(f"| {name} | {median(rows, lambda r: r['records_per_sec']):,.0f} | "
                     f"{median(rows, lambda r: r['mb_per_sec']):.1f} | "
                     f"{median(rows, lambda r: r['latency_ms']['p50']):.2f} | "
                     f"{median(rows, lambda r: r['latency_ms']['p99']):.2f} | {txn} |")
    lines += ["", "Throughput as a ratio of idempotent produce, same run: " + ", ".join(
        f"{name} {median(results[name], lambda r: r['records_per_sec']) / base:.2f}x" for name, _ in MODES[1:]),
        "", "Errors (all rounds): " + ", ".join(
            f"{name} {sum(r['errors'] for r in results[name] if r)}" for name, _ in MODES), ""]
    publish(lines, path)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--duration", type=float, default=5.0)
    ap.add_argument("--warmup", type=float, default=1.0)
    ap.add_argument("--out", default=str(ROOT / "perf" / "results" / f"{time.strftime('%Y-%m-%d')}-transactions.md"))
    a = ap.parse_args()
    commit = head_commit()
    work = Path(tempfile.mkdtemp(prefix="sluice-perf-txn-"))
    proc, bootstrap = start_sluice(work / "data", work / "broker.log")
    results = {name: [] for name, _ in MODES}
    try:
        for round_no in range(a.rounds):
            for name, extra in MODES:
                results[name].append(run_mode(bootstrap, work, name, extra, a, round_no))
    finally:
        proc.kill()
        proc.wait()
    write_markdown(Path(a.out), results, a, commit)
    shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
