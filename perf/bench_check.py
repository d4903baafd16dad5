"""`sluice bench` checked against an independent load generator: Kafka's own
`kafka-producer-perf-test` (org.apache.kafka.tools.ProducerPerformance, Java, from the Kafka
4.4 that scripts/kafka-install puts in tests/kafka/libs), both at the same fixed rate, record
size, acks and linger, one producer, against one fresh Sluice broker and a one-partition
topic each. The two measure latency differently: ProducerPerformance from each send() call to
its callback, `sluice bench --rate` from each record's intended send time (so a stall is not
hidden); at a rate the broker keeps up with the two should agree, and the issue's bar is
within 20% at p50 and p99. --broker kafka runs both against Kafka 4.4 (one node, its defaults)
instead of Sluice; --java-props adds producer settings to ProducerPerformance's (to widen its
in-flight window: `enable.idempotence=false max.in.flight.requests.per.connection=100`).

Usage: perf/bench_check.py [--rates 5000,20000] [--lingers 0,5] [--seconds 10] [--broker sluice|kafka]
                           [--java-props "KEY=VALUE ..."] [--out perf/results/DATE-COMMIT-bench-check.md]"""
import argparse
import datetime
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from matrix import ROOT, bench, cpu_model, head_commit, publish, start_kafka, start_sluice  # noqa: E402

LIBS = ROOT / "tests" / "kafka" / "libs"
# The steady-state summary (after --warmup-records); the overall one includes the JVM's warm-up.
SUMMARY = re.compile(r"(\d+) steady state records sent, ([\d.]+) records/sec .*?, ([\d.]+) ms avg latency, ([\d.]+) ms max "
                     r"latency, (\d+) ms 50th, (\d+) ms 95th, (\d+) ms 99th, (\d+) ms 99.9th")


def producer_perf(bootstrap: str, topic: str, rate: int, seconds: float, linger_ms: int, props: list[str]) -> dict:
    """ProducerPerformance's summary line: records/s and latency percentiles (whole ms)."""
    records = int(rate * seconds)
    args = ["java", "-Xmx512m", f"-Dlog4j2.configurationFile={ROOT / 'tests' / 'kafka' / 'log4j2.properties'}",
            "-cp", f"{LIBS}/*", "org.apache.kafka.tools.ProducerPerformance",
            "--topic", topic, "--num-records", str(records), "--record-size", "1024", "--throughput", str(rate),
            "--warmup-records", str(rate),
            "--producer-props", f"bootstrap.servers={bootstrap}", "acks=all", f"linger.ms={linger_ms}", *props]
    print("+", " ".join(args[4:]), flush=True)
    out = subprocess.run(args, capture_output=True, text=True, timeout=seconds * 6 + 60).stdout
    m = list(SUMMARY.finditer(out))
    if not m:
        sys.exit(f"no steady-state summary from ProducerPerformance:\n{out[-2000:]}")
    g = m[-1].groups()
    return {"records_per_sec": float(g[1]), "p50": float(g[4]), "p99": float(g[6]), "p99_9": float(g[7])}


def create_topic(bootstrap: str, topic: str):
    from confluent_kafka.admin import AdminClient, NewTopic
    admin = AdminClient({"bootstrap.servers": bootstrap})  # alive until the creation is answered
    admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(30)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rates", default="5000,20000")
    ap.add_argument("--lingers", default="0,5")
    ap.add_argument("--seconds", type=float, default=10.0)
    ap.add_argument("--broker", choices=["sluice", "kafka"], default="sluice")
    ap.add_argument("--java-props", default="", help="more producer settings for ProducerPerformance")
    ap.add_argument("--out")
    a = ap.parse_args()
    if not (LIBS / ".installed").exists():
        subprocess.run([str(ROOT / "scripts" / "kafka-install")], check=True)
    work = Path(tempfile.mkdtemp(prefix="sluice-bench-check-"))
    if a.broker == "kafka":
        kafka = start_kafka(work / "kafka", {})
        bootstrap, stop = kafka.bootstrap(), kafka.stop
    else:
        proc, bootstrap = start_sluice(work / "data", work / "broker.log")

        def stop():
            proc.terminate()
            proc.wait(timeout=30)
    props = a.java_props.split()
    rows = []
    try:
        for rate in map(int, a.rates.split(",")):
            for linger in map(int, a.lingers.split(",")):
                stamp = int(time.time() * 1000)
                create_topic(bootstrap, f"check-ppt-{stamp}")
                java = producer_perf(bootstrap, f"check-ppt-{stamp}", rate, a.seconds, linger, props)
                create_topic(bootstrap, f"check-bench-{stamp}")
                ours = bench(bootstrap, f"check-bench-{stamp}", work / "bench.json", mode="produce", rate=rate,
                             duration=a.seconds, warmup=1, producers=1, message_size=1024, acks="all",
                             linger_ms=linger)
                rows.append((rate, linger, java, ours))
    finally:
        stop()
    write(rows, a)


def write(rows, a):
    commit = head_commit()
    date = datetime.date.today().isoformat()
    suffix = ("-kafka" if a.broker == "kafka" else "") + ("-wide" if a.java_props else "")
    out = Path(a.out or ROOT / "perf" / "results" / f"{date}-{commit}-bench-check{suffix}.md")
    broker = "one Kafka 4.4 node (its defaults)" if a.broker == "kafka" else "one Sluice broker"
    lines = [f"# `sluice bench` against Kafka's ProducerPerformance, {date}, commit {commit}", "",
             f"- Command: `perf/bench_check.py --rates {a.rates} --lingers {a.lingers} --seconds {a.seconds}"
             f" --broker {a.broker}" + (f" --java-props '{a.java_props}'" if a.java_props else "") + "`",
             f"- Machine: 2 cores shared by the broker and the load generator ({cpu_model()}); {broker}, "
             "a fresh one-partition topic per run, 1 KiB records, acks=all, one producer.",
             "- ProducerPerformance measures send() to callback (whole ms), its steady state after `--warmup-records` "
             "(one second of records); `sluice bench --rate` measures from each record's intended send time, after "
             "`--warmup 1`.", "",
             "| rate/s | linger ms | ProducerPerformance rec/s | p50 | p99 | sluice bench rec/s | p50 | p99 | "
             "p50 ratio bench/ppt | p99 ratio bench/ppt |", "|---|---|---|---|---|---|---|---|---|---|"]
    for rate, linger, java, ours in rows:
        if ours is None:
            lines.append(f"| {rate} | {linger} | {java['records_per_sec']:,.0f} | {java['p50']} | {java['p99']} | failed | | | | |")
            continue
        l = ours["latency_ms"]
        ratio = lambda x, y: f"{x / y:.2f}" if y else "-"  # noqa: E731
        lines.append(f"| {rate} | {linger} | {java['records_per_sec']:,.0f} | {java['p50']:.0f} | {java['p99']:.0f} | "
                     f"{ours['records_per_sec']:,.0f} | {l['p50']:.2f} | {l['p99']:.2f} | "
                     f"{ratio(l['p50'], java['p50'])} | {ratio(l['p99'], java['p99'])} |")
    publish(lines, out)


if __name__ == "__main__":
    main()
