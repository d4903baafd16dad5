"""Latency against throughput, the way the OpenMessaging Benchmark reports it: one paced
producer of 1 KiB records at fixed rates (1k, 5k, 20k, 50k, 100k, 200k records/s), acks=all
and acks=1, linger.ms 0 and 5, with a consumer reading along. For each point: the rate
achieved, produce-to-ack latency and end-to-end (send to receipt) latency, p50, p99 and p99.9,
both measured from each record's intended send time (no coordinated omission). With
--compare-to (a running broker) or --compare-binary (another Sluice build) every point runs
against the other broker right after Sluice; --compare-to kafka starts Apache Kafka 4.4 twice,
with its defaults and durable (as perf/matrix.py does). For a Sluice, the broker's own share too: the p99 of
its Produce requests' time from last byte read to response written
(`sluice_request_duration_seconds`, bucket bounds, warm-up included), so that the broker's part
of a p99 stands apart from the client's and the CPU queue's. --cluster runs three nodes of each
broker (as perf/matrix.py's --cluster) with every topic at replication factor 3; --pin as
perf/matrix.py's.

Writes perf/results/<date>-<commit>-latency.md (-latency-cluster.md) and a PNG of p99 against rate.

Usage: perf/run --latency [--compare-to HOST:PORT|kafka | --compare-binary PATH] [--compare-name NAME]
                          [--rates 5000,20000,50000] [--cluster] [--pin BROKER_CPUS:CLIENT_CPUS]
"""
import argparse
import datetime
import os
import platform
import shutil
import sys
import tempfile
import time
from pathlib import Path

from matrix import (BINARY, KAFKA_CONFIGS, ROOT, bench, cpu_model, delete_topic, free_port, head_commit, pin,
                    run_kind, sharing, start_kafka, start_sluice, taskset)

sys.path.insert(0, str(ROOT / "tests" / "integration"))
from metrics import scrape  # noqa: E402  (the tests' reader of the endpoint)

RATES = [1_000, 5_000, 20_000, 50_000, 100_000, 200_000]
ACKS = ["all", "1"]
LINGERS = [0, 5]
PARTITIONS = 8


def point(bootstrap, metrics, name, work, a, acks, linger, rate):
    topic = f"lat-{acks}-{linger}-{rate}-{int(time.time() * 1000)}"
    before = produce_buckets(metrics)
    r = bench(bootstrap, topic, work / f"{name}.json", mode="e2e", duration=a.duration, warmup=a.warmup,
              producers=1, consumers=1, partitions=PARTITIONS, message_size=1024, acks=acks,
              linger_ms=linger, rate=rate, replication_factor=3 if a.cluster else 1)
    if r is not None and metrics:
        r["broker_p99_at_most_ms"] = broker_p99_ms(before, produce_buckets(metrics))
    delete_topic(bootstrap, topic)
    return r


def start_with_metrics(work: Path, name: str, binary=None):
    """(proc, bootstrap, metrics address) of a Sluice with its metrics endpoint on."""
    metrics = f"127.0.0.1:{free_port()}"
    config = work / f"{name}.toml"
    config.write_text(f'metrics_listen = "{metrics}"\n')
    proc, bootstrap = start_sluice(work / f"data-{name}", work / f"{name}.log", config=config,
                                   binary=Path(binary or BINARY))
    return proc, bootstrap, metrics


def produce_buckets(metrics) -> dict:
    """{le: Produce requests at or under it}, every shard together; {} without an endpoint."""
    if not metrics:
        return {}
    out = {}
    for (name, labels), count in scrape(metrics).items():  # in the endpoint's order
        if name == "sluice_request_duration_seconds_bucket" and 'api="Produce"' in labels:
            le = labels.rsplit('le="', 1)[1].rstrip('"')
            out[le] = out.get(le, 0) + count
    return out


def broker_p99_ms(before: dict, after: dict):
    """The least bucket bound (ms) under which 99% of the point's Produce requests finished."""
    served = after.get("+Inf", 0) - before.get("+Inf", 0)
    for le, count in after.items():  # in the endpoint's order: ascending bounds, then +Inf
        if served and count - before.get(le, 0) >= 0.99 * served:
            return None if le == "+Inf" else float(le) * 1000
    return None


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--compare-to")
    ap.add_argument("--compare-binary")
    ap.add_argument("--compare-name", default="other")
    ap.add_argument("--duration", type=float, default=10.0)
    ap.add_argument("--warmup", type=float, default=2.0)
    ap.add_argument("--rates", default=",".join(str(r) for r in RATES))
    ap.add_argument("--cluster", action="store_true", help="three nodes of each broker, topics at RF 3")
    ap.add_argument("--pin", metavar="BROKER_CPUS:CLIENT_CPUS", help="brokers on some CPUs, the load generator on others")
    ap.add_argument("--out-dir", default=str(ROOT / "perf" / "results"))
    a = ap.parse_args()
    pin(a.pin)
    rates = [int(r) for r in a.rates.split(",")]
    work = Path(tempfile.mkdtemp(prefix="sluice-latency-"))
    procs, targets, kafkas = [], [], []  # kafkas: started clusters, Sluice's with --cluster
    if a.cluster:
        from sluice_cluster import SluiceCluster
        kafkas.append(SluiceCluster(work / "sluice", free_port, command_prefix=taskset("broker")).start())
        targets.append(("sluice", kafkas[0].bootstrap(), None))
    else:
        proc, sluice, metrics = start_with_metrics(work, "sluice")
        procs, targets = [proc], [("sluice", sluice, metrics)]
    if a.compare_binary:
        other, addr, other_metrics = start_with_metrics(work, "other", a.compare_binary)
        procs.append(other)
        targets.append((a.compare_name, addr, other_metrics))
    elif a.compare_to == "kafka":
        for name, configs in KAFKA_CONFIGS.items():
            kafkas.append(start_kafka(work / name, configs, nodes=3 if a.cluster else 1))
            targets.append((name, kafkas[-1].bootstrap(), None))
    elif a.compare_to:
        targets.append((a.compare_name, a.compare_to, None))
    points = []
    try:
        for acks in ACKS:
            for linger in LINGERS:
                for rate in rates:
                    row = {"acks": acks, "linger": linger, "rate": rate}
                    for name, bootstrap, metrics in targets:
                        row[name] = point(bootstrap, metrics, name, work, a, acks, linger, rate)
                    points.append(row)
    finally:
        for p in procs:
            p.terminate()
            p.wait(timeout=30)
        for k in kafkas:
            k.stop()
    commit = head_commit()
    out_dir = Path(a.out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    stem = out_dir / f"{datetime.date.today().isoformat()}-{commit}-latency{run_kind(a)}"
    write_markdown(stem.with_suffix(".md"), points, targets, a, commit)
    plot(stem.with_suffix(".png"), points, targets)
    shutil.rmtree(work, ignore_errors=True)
    print(f"wrote {stem}.md and {stem}.png")


def cells(r):
    if r is None:
        return ["failed"] * 8
    ack, e2e = r.get("ack_latency_ms") or {}, r["latency_ms"]
    broker = r.get("broker_p99_at_most_ms")
    return [f"{r['records_per_sec']:,.0f}"] + [f"{ack.get(k, 0):.2f}" for k in ("p50", "p99", "p99_9")] + \
        ["—" if broker is None else f"≤ {broker:g}"] + [f"{e2e[k]:.2f}" for k in ("p50", "p99", "p99_9")]


def write_markdown(path, points, targets, a, commit):
    cpu = cpu_model()
    names = [n for n, _, _ in targets]
    other = ""
    if a.compare_binary:
        other = f" --compare-binary {a.compare_binary} --compare-name {a.compare_name}"
    elif a.compare_to == "kafka":
        other = " --compare-to kafka"
    elif a.compare_to:
        other = f" --compare-to {a.compare_to} --compare-name {a.compare_name}"
    if a.rates != ",".join(str(r) for r in RATES):
        other += f" --rates {a.rates}"
    other += (" --cluster" if a.cluster else "") + (f" --pin {a.pin}" if a.pin else "")
    lines = [
        f"# Latency against throughput, {datetime.date.today().isoformat()}, commit {commit}"
        + (": three nodes each, replication factor 3" if a.cluster else ""), "",
        f"- Command: `perf/run --latency{other}` (each point: `sluice bench --mode e2e --rate R --duration {a.duration}"
        f" --warmup {a.warmup} --producers 1 --consumers 1 --partitions {PARTITIONS} --message-size 1024"
        f" --acks A --linger-ms L{' --replication-factor 3' if a.cluster else ''}`)",
        f"- Machine: `nproc` = {os.cpu_count()}, {cpu}, kernel `{platform.release()}`; {sharing('brokers and clients share it.')}",
        "- Latency in ms from each record's intended send time: `ack` to its delivery report, `e2e` to its"
        " receipt by the consumer. The rate column is what was achieved. `broker p99`: the bucket bound"
        " under which 99% of a Sluice's Produce requests went from last byte read to response written"
        " (its `sluice_request_duration_seconds`, warm-up included; — where the broker has none).", "",
    ]
    head = "| acks | linger | rate | " + " | ".join(
        f"{n} rec/s | {n} ack p50 | {n} ack p99 | {n} ack p99.9 | {n} broker p99 | {n} e2e p50 | {n} e2e p99"
        f" | {n} e2e p99.9" for n in names)
    lines += [head + " |", "|" + "---|" * (3 + 8 * len(names))]
    for p in points:
        row = [p["acks"], str(p["linger"]), f"{p['rate']:,}"]
        for n in names:
            row += cells(p[n])
        lines.append("| " + " | ".join(row) + " |")
    lines.append("")
    path.write_text("\n".join(lines))


def plot(path, points, targets):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, axes = plt.subplots(2, 2, figsize=(11, 8), sharex=True)
    for i, acks in enumerate(ACKS):
        for j, linger in enumerate(LINGERS):
            ax = axes[i][j]
            mine = [p for p in points if p["acks"] == acks and p["linger"] == linger]
            for n, _, _ in targets:
                for key, style in (("ack_latency_ms", "-"), ("latency_ms", "--")):
                    pts = [(p["rate"], (p[n] or {}).get(key)) for p in mine]
                    pts = [(r, l["p99"]) for r, l in pts if l]
                    if pts:
                        label = f"{n} {'ack' if key == 'ack_latency_ms' else 'e2e'} p99"
                        ax.plot([r for r, _ in pts], [l for _, l in pts], style, marker="o", label=label)
            ax.set(xscale="log", yscale="log", title=f"acks={acks}, linger.ms={linger}",
                   xlabel="records/s (1 KiB)", ylabel="p99 latency (ms)")
            ax.grid(True, alpha=0.3)
            ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


if __name__ == "__main__":
    main()
