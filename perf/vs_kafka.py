"""Sluice against Apache Kafka 4.4, everything issue 37 asks for in one run and one file:
the standard matrix, the latency curve and cost per GiB and per record, each on one node and on
three (RF 3); the matrix again with the brokers on one CPU and the load generator on the other
(--pin 0:1, so that throughput is the broker's, not its share of CPUs contended by the
clients); and partition failover; each against Kafka with its defaults and durable
(`log.flush.interval.messages=1`) where the configuration matters. Runs perf/matrix.py,
perf/latency.py, perf/cost.py and perf/failover.py one after another (never two at once: they
would measure each other) and joins their reports into
perf/results/<date>-<commit>-vs-kafka.md, with their plots beside it.

Usage: perf/run --vs-kafka [--rounds N] [--cost-rounds N] [--cluster-cost-rounds N]
                           [--failover-trials N] [--pin BROKER_CPUS:CLIENT_CPUS] [--parts SLUG,...]"""
import argparse
import datetime
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from matrix import ROOT, head_commit, publish

PERF = ROOT / "perf"


def run(script: str, out_dir: Path, *args) -> list[Path]:
    """Runs one perf script into `out_dir`; the reports it wrote (markdown, then plots)."""
    before = set(out_dir.iterdir())
    cmd = [sys.executable, str(PERF / script), "--out-dir", str(out_dir), *map(str, args)]
    print("+", " ".join(cmd[1:]), flush=True)
    t0 = time.monotonic()
    code = subprocess.run(cmd, cwd=ROOT).returncode
    print(f"{script}: {time.monotonic() - t0:.0f} s, exit {code}", flush=True)
    return sorted(set(out_dir.iterdir()) - before)


def demoted(text: str) -> list[str]:
    """A part's report under its section of the joined file: its headings two levels down."""
    return [("##" + line if line.startswith("#") else line) for line in text.splitlines()]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=1, help="matrix rounds")
    ap.add_argument("--cost-rounds", type=int, default=3)
    ap.add_argument("--cluster-cost-rounds", type=int, default=1, help="three nodes take minutes a round")
    ap.add_argument("--pin", default="0:1", help="the pinned matrix's BROKER_CPUS:CLIENT_CPUS")
    ap.add_argument("--parts", help="only these parts (slugs: matrix, cluster, matrix-pinned, latency, "
                    "latency-cluster, cost, cost-cluster, failover)")
    ap.add_argument("--failover-trials", type=int, default=20)
    ap.add_argument("--rates", default="5000,20000,50000", help="the latency curve's rates")
    ap.add_argument("--out-dir", default=str(PERF / "results"))
    a = ap.parse_args()
    parts_dir = Path(tempfile.mkdtemp(prefix="sluice-perf-vs-kafka-"))
    commit, date = head_commit(), datetime.date.today().isoformat()
    parts = [
        ("One node: the standard matrix", "matrix", "matrix.py", ["--compare-to", "kafka", "--rounds", a.rounds]),
        ("Three nodes, replication factor 3: the standard matrix", "cluster", "matrix.py",
         ["--compare-to", "kafka", "--cluster", "--rounds", a.rounds]),
        (f"One node, brokers on CPUs {a.pin.split(':')[0]} and the load generator on CPUs {a.pin.split(':')[1]}:"
         " the standard matrix", "matrix-pinned", "matrix.py", ["--compare-to", "kafka", "--pin", a.pin,
                                                                "--rounds", a.rounds]),
        ("One node: latency against throughput", "latency", "latency.py",
         ["--compare-to", "kafka", "--rates", a.rates]),
        ("Three nodes, replication factor 3: latency against throughput", "latency-cluster", "latency.py",
         ["--compare-to", "kafka", "--cluster", "--rates", a.rates]),
        ("One node: cost per GiB and per record", "cost", "cost.py",
         ["--compare-to", "kafka", "--rounds", a.cost_rounds]),
        ("Three nodes, replication factor 3: cost per GiB and per record", "cost-cluster", "cost.py",
         ["--compare-to", "kafka", "--cluster", "--rounds", a.cluster_cost_rounds]),
        ("Three nodes: partition failover", "failover", "failover.py", ["--trials", a.failover_trials]),
    ]
    if a.parts:
        wanted = a.parts.split(",")
        unknown = set(wanted) - {slug for _, slug, _, _ in parts}
        if unknown:
            ap.error(f"unknown parts: {', '.join(sorted(unknown))}")
        parts = [p for p in parts if p[1] in wanted]
    out_dir = Path(a.out_dir)
    lines = [f"# Sluice against Apache Kafka 4.4, {date}, commit {commit}", "",
             f"- Command: `perf/run --vs-kafka --rounds {a.rounds} --cost-rounds {a.cost_rounds}"
             f" --cluster-cost-rounds {a.cluster_cost_rounds} --failover-trials {a.failover_trials}"
             f" --rates {a.rates} --pin {a.pin}" + (f" --parts {a.parts}" if a.parts else "")
             + "` (perf/vs_kafka.py), one part after"
             " another on the same machine; each part alternates the brokers row by row.",
             "- `kafka`: Kafka 4.4 with its defaults (acknowledges before any fsync); `kafka-durable`:"
             " `log.flush.interval.messages=1`, every acknowledged write fsynced, as Sluice does.", ""]
    try:
        for title, slug, script, args in parts:
            written = run(script, parts_dir, *args)
            lines += [f"## {title}", ""]
            if not any(f.suffix == ".md" for f in written):
                lines += [f"`{script}` failed: no report (its output is in the run's log).", ""]
            for f in written:
                if f.suffix == ".md":
                    lines += demoted(f.read_text()) + [""]
                elif f.suffix == ".png":
                    plot = f"{date}-{commit}-vs-kafka-{slug}.png"
                    shutil.copy(f, out_dir / plot)
                    lines += [f"![{title}]({plot})", ""]
    finally:
        shutil.rmtree(parts_dir, ignore_errors=True)
    publish(lines, out_dir / f"{date}-{commit}-vs-kafka.md")


if __name__ == "__main__":
    main()
