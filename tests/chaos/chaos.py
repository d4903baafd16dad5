"""A Jepsen-style chaos run against a three-node Sluice cluster (issue 36), as real processes
over loopback, driven by real clients (confluent-kafka on librdkafka).

While a seeded nemesis faults one node at a time (SIGKILL then restart, SIGSTOP then SIGCONT,
SIGTERM then restart, or cut off from the other nodes through the fault hooks, SIGUSR1 then
SIGUSR2), every 8-12 s:
- two idempotent producers (acks=all) write numbered values to `chaos-idem`;
- a transactional producer commits even transactions and aborts odd ones, each over every
  partition of `chaos-tx`;
- a consumer group reads both topics read_committed and commits its offsets.
Then the nemesis heals everything, the writers stop, and all is read back. The anomalies
checked are Jepsen's for Kafka: acknowledged writes lost, duplicated or reordered; reads of
data later lost; committed offsets past the log end; aborted reads; partial transactions;
transactions that never end (a partition whose last stable offset stays behind its high
watermark, a transactional id left Ongoing or Prepare*, a producer that cannot commit again).

Usage: scripts/chaos --seed S --duration SECS [--out DIR] [--keep]
Exit 0 when no anomaly was found, 1 otherwise; the summary is printed as one JSON line (and
written to DIR/chaos-SEED.json with --out)."""
import argparse
import json
import random
import shutil
import signal
import sys
import tempfile
import threading
import time
from collections import defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "integration"))

from cluster import FAST, Cluster  # noqa: E402
from confluent_kafka import (OFFSET_BEGINNING, Consumer, KafkaError, KafkaException,  # noqa: E402
                             Producer, TopicPartition)

CONFIG = FAST + """replica_lag_time_max_ms = 3000

[transactions]
check_interval_ms = 1000
"""
PARTITIONS = 3
IDEM, TX = "chaos-idem", "chaos-tx"
TXN_TIMEOUT_MS = 10_000
# Transactions begun per second, at most.
TXNS_PER_S = 20
# How long a healed cluster gets to end every transaction and answer every read.
SETTLE_S = 60


def log(msg):
    print(f"{time.strftime('%H:%M:%S')} {msg}", file=sys.stderr, flush=True)


class Nemesis:
    """One fault at a time on one node, drawn from the seed, each healed before the next."""

    FAULTS = ("kill", "freeze", "term", "cut")

    def __init__(self, cluster: Cluster, rng: random.Random):
        self.cluster, self.rng = cluster, rng
        self.events = []
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self.run, daemon=True)

    def run(self):
        while not self.stop.wait(self.rng.uniform(8, 12)):
            node = self.rng.choice(sorted(self.cluster.nodes))
            fault = self.rng.choice(self.FAULTS)
            held_s = self.rng.uniform(2, 6)
            self.events.append((round(time.monotonic(), 1), node, fault, round(held_s, 1)))
            log(f"nemesis: {fault} node {node} for {held_s:.1f} s")
            try:
                self.fault(self.cluster.nodes[node], fault, held_s)
            except Exception as e:  # a node that would not restart is the run's finding
                self.events.append((round(time.monotonic(), 1), node, f"{fault} failed: {e}", 0))
                log(f"nemesis: {fault} of node {node} failed: {e}")

    def fault(self, n, fault, held_s):
        if fault == "kill":
            n.kill()
            time.sleep(held_s)
            n.start(timeout_s=60)
        elif fault == "term":
            n.stop(timeout_s=30)
            time.sleep(held_s)
            n.start(timeout_s=60)
        elif fault == "freeze":
            n.proc.send_signal(signal.SIGSTOP)
            time.sleep(held_s)
            n.proc.send_signal(signal.SIGCONT)
        else:
            n.proc.send_signal(signal.SIGUSR1)
            time.sleep(held_s)
            n.proc.send_signal(signal.SIGUSR2)

    def heal(self):
        self.stop.set()
        self.thread.join(120)
        for n in self.cluster.nodes.values():
            if n.alive():
                n.proc.send_signal(signal.SIGCONT)
                n.proc.send_signal(signal.SIGUSR2)
            else:
                n.start(timeout_s=60)


class IdempotentWriter:
    """Numbered values `k:seq` to partition seq % 3, acks=all with idempotence; each
    acknowledgement's offset kept."""

    def __init__(self, bootstrap, k, rate_per_s=100):
        self.k, self.rate = k, rate_per_s
        self.p = Producer({"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True,
                           "linger.ms": 5, "message.timeout.ms": 300_000, "request.timeout.ms": 10_000})
        self.acked, self.failed, self.sent = {}, [], 0
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self.run, daemon=True)

    def run(self):
        started = time.monotonic()
        while not self.stop.is_set():
            due = started + self.sent / self.rate
            if time.monotonic() < due:
                # Never a negative timeout: librdkafka would wait for the next event.
                self.p.poll(max(0.0, min(0.01, due - time.monotonic())))
                continue
            value = f"{self.k}:{self.sent}"
            try:
                self.p.produce(IDEM, value=value.encode(), partition=self.sent % PARTITIONS,
                               on_delivery=self.delivered)
                self.sent += 1
            except BufferError:
                self.p.poll(0.05)
            self.p.poll(0)

    def delivered(self, err, msg):
        if err is not None:
            self.failed.append((msg.value().decode(), str(err)))
        else:
            self.acked[msg.value().decode()] = (msg.partition(), msg.offset())

    def finish(self):
        self.stop.set()
        self.thread.join(30)
        return self.p.flush(300)


class TxWriter:
    """Transactions over every partition of `chaos-tx`: even ones committed, odd ones aborted.
    Each outcome is what the client was told: committed, aborted, or unknown (a fatal error:
    the producer is replaced, which fences the old one and aborts what it left open)."""

    def __init__(self, bootstrap):
        self.bootstrap = bootstrap
        self.outcome = {}
        self.stop = threading.Event()
        self.errors = []
        self.thread = threading.Thread(target=self.run, daemon=True)
        self.p = None

    def producer(self):
        p = Producer({"bootstrap.servers": self.bootstrap, "transactional.id": "chaos-tx-1",
                      "transaction.timeout.ms": TXN_TIMEOUT_MS, "linger.ms": 5,
                      "message.timeout.ms": TXN_TIMEOUT_MS})
        deadline = time.monotonic() + SETTLE_S
        while True:
            try:
                p.init_transactions(30)
                return p
            except KafkaException as e:
                self.errors.append(str(e))
                if not e.args[0].retriable() or time.monotonic() > deadline:
                    raise
                time.sleep(0.5)

    def run(self):
        n = 0
        while not self.stop.wait(1 / TXNS_PER_S):
            self.outcome[n] = self.one(n)
            n += 1

    def one(self, n) -> str:
        if self.p is None:
            try:
                self.p = self.producer()
            except KafkaException:
                return "not begun"
        commit = n % 2 == 0
        try:
            self.p.begin_transaction()
            for part in range(PARTITIONS):
                self.p.produce(TX, value=f"t{n}:{part}".encode(), partition=part)
            return self.end(commit)
        except KafkaException as e:
            self.errors.append(f"{n}: {e}")
            return self.recover(e)

    def end(self, commit) -> str:
        for tries in range(1, 11):
            try:
                if commit:
                    self.p.commit_transaction(30)
                    return "committed"
                self.p.abort_transaction(30)
                return "aborted"
            except KafkaException as e:
                err = e.args[0]
                if err.retriable() and tries < 10:
                    continue
                if err.txn_requires_abort():
                    commit = False
                    continue
                raise
        raise KafkaException(KafkaError(KafkaError._TIMED_OUT, "the end never went through"))

    def recover(self, e) -> str:
        err = e.args[0]
        if err.txn_requires_abort():
            try:
                self.p.abort_transaction(30)
                return "aborted"
            except KafkaException as e2:
                self.errors.append(f"abort: {e2}")
        self.p = None  # fatal, or the abort failed: a new producer fences this one
        return "unknown"

    def finish(self):
        self.stop.set()
        self.thread.join(120)


class GroupReader:
    """A consumer group member reading both topics read_committed, committing every second.
    Every record it gets and every commit acknowledged is kept."""

    def __init__(self, bootstrap):
        self.c = Consumer({"bootstrap.servers": bootstrap, "group.id": "chaos-group",
                           "isolation.level": "read_committed", "enable.auto.commit": False,
                           "auto.offset.reset": "earliest", "session.timeout.ms": 10_000})
        self.read = []  # (topic, partition, offset, value)
        self.commits = {}  # (topic, partition) -> the highest offset acknowledged
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self.run, daemon=True)

    def run(self):
        self.c.subscribe([IDEM, TX])
        last_commit = time.monotonic()
        while not self.stop.is_set():
            m = self.c.poll(0.2)
            if m is not None and m.error() is None:
                self.read.append((m.topic(), m.partition(), m.offset(), m.value().decode()))
            if time.monotonic() - last_commit > 1:
                last_commit = time.monotonic()
                self.commit()
        self.commit()
        self.c.close()

    def commit(self):
        try:
            for tp in self.c.commit(asynchronous=False) or []:
                if tp.error is None and tp.offset >= 0:
                    key = (tp.topic, tp.partition)
                    self.commits[key] = max(self.commits.get(key, -1), tp.offset)
        except KafkaException:
            pass  # nothing to commit, or the coordinator moved: the next one goes again

    def finish(self):
        self.stop.set()
        self.thread.join(60)


def read_all(bootstrap, topic, isolation, ends):
    """Every record of `topic` below `ends[partition]`: {partition: [(offset, value)]}."""
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"chaos-check-{isolation}",
                  "enable.auto.commit": False, "isolation.level": isolation})
    assignment = [TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(PARTITIONS)]
    c.assign(assignment)
    got = defaultdict(list)
    deadline = time.monotonic() + SETTLE_S
    try:
        while time.monotonic() < deadline:
            # The consumer's position, not the last record's offset: it moves past the markers
            # (never returned) that often end a transactional partition.
            done = [ends[tp.partition] == 0 or tp.offset >= ends[tp.partition] for tp in c.position(assignment)]
            if all(done):
                break
            m = c.poll(0.5)
            if m is None or m.error() is not None:
                continue
            got[m.partition()].append((m.offset(), m.value().decode()))
    finally:
        c.close()
    return got


def ends_of(bootstrap, topic, isolation):
    """The end offsets of `topic`: the high watermarks (read_uncommitted) or the last stable
    offsets (read_committed), from ListOffsets (kafka-python names the isolation level)."""
    from kafka import KafkaConsumer
    from kafka import TopicPartition as KTP
    c = KafkaConsumer(bootstrap_servers=bootstrap.split(","), isolation_level=isolation,
                      request_timeout_ms=15_000)
    try:
        ends = c.end_offsets([KTP(topic, p) for p in range(PARTITIONS)])
        return {tp.partition: o for tp, o in ends.items()}
    finally:
        c.close()


def settle(bootstrap):
    """Waits (up to SETTLE_S) until no transaction holds a partition's last stable offset
    behind its high watermark; returns the last (high watermarks, last stable offsets)."""
    deadline = time.monotonic() + SETTLE_S
    while True:
        try:
            hw, lso = ends_of(bootstrap, TX, "read_uncommitted"), ends_of(bootstrap, TX, "read_committed")
            if hw == lso or time.monotonic() > deadline:
                return hw, lso
        except Exception as e:
            if time.monotonic() > deadline:
                return {"error": str(e)}, {}
        time.sleep(1)


def commits_again(bootstrap):
    """Seconds until a fresh producer with the transactional id commits a transaction (a
    coordinator holding the id prepared answers CONCURRENT_TRANSACTIONS for good), or None."""
    started = time.monotonic()
    w = TxWriter(bootstrap)
    w.stop.set()  # one transaction, no loop
    try:
        w.p = w.producer()
        w.p.begin_transaction()
        w.p.produce(TX, value=b"final", partition=0)
        w.p.commit_transaction(SETTLE_S)
        return round(time.monotonic() - started, 1)
    except KafkaException as e:
        log(f"the transactional id cannot commit again: {e}")
        return None


def check(idem, tx, group, final, ends, commits, again):
    """Jepsen's anomalies over what the clients were told and what the cluster holds."""
    a = defaultdict(list)
    hw, lso = ends
    log_idem = {(p, o): v for p, rows in final["idem"].items() for o, v in rows}
    where = defaultdict(list)
    for (p, o), v in log_idem.items():
        where[v].append((p, o))
    for w in idem:
        for v, at in w.acked.items():
            if v not in where:
                a["lost"].append(v)
            elif where[v] != [at]:
                a["moved or duplicated"].append((v, at, where[v]))
    a["duplicated"] = [(v, at) for v, at in where.items() if len(at) > 1]
    # Per producer and partition, values in log order carry increasing numbers.
    last = {}
    for (p, o), v in sorted(log_idem.items()):
        k, n = v.split(":")
        if last.get((k, p), -1) > int(n):
            a["reordered"].append((p, o, v))
        last[(k, p)] = int(n)
    log_tx = {(p, o): v for p, rows in final["tx_all"].items() for o, v in rows}
    for topic, p, o, v in group:
        if topic == IDEM and log_idem.get((p, o)) != v:
            a["read, then lost"].append((topic, p, o, v, log_idem.get((p, o))))
        if topic == TX and log_tx.get((p, o)) != v:
            a["read, then lost"].append((topic, p, o, v, log_tx.get((p, o))))
    for (topic, p), offset in commits.items():
        end = hw.get(p) if topic == TX else final["idem_hw"].get(p)
        if end is not None and offset > end:
            a["commit past the log end"].append((topic, p, offset, end))
    committed_view = defaultdict(set)
    for rows in final["tx_committed"].values():
        for _, v in rows:
            if v != "final":
                n, part = v[1:].split(":")
                committed_view[int(n)].add(int(part))
    seen_by_group = {v for topic, _, _, v in group if topic == TX}
    for n, outcome in tx.outcome.items():
        parts = committed_view.get(n, set())
        if outcome == "aborted" and (parts or any(v.startswith(f"t{n}:") for v in seen_by_group)):
            a["aborted read"].append(n)
        if outcome == "committed" and len(parts) != PARTITIONS:
            a["partial transaction"].append((n, outcome, sorted(parts)))
        if outcome == "unknown" and 0 < len(parts) < PARTITIONS:
            a["partial transaction"].append((n, outcome, sorted(parts)))
    if hw != lso:
        a["transaction never ends"].append({"high watermarks": hw, "last stable offsets": lso})
    if again is None:
        a["transaction never ends"].append("a fresh producer could not commit after the heal")
    return {k: v for k, v in a.items() if v}


def run(seed, duration_s, work: Path):
    rng = random.Random(seed)
    cluster = Cluster(work, 3, 0, CONFIG)
    for n in cluster.nodes.values():
        n.env = {"SLUICE_FAULT_HOOKS": "1"}
    cluster.start()
    nemesis = None
    try:
        cluster.wait_for_brokers({1, 2, 3})
        for topic in (IDEM, TX):
            cluster.create_topic(1, topic, PARTITIONS, 3)
            cluster.alter_topic_config(1, topic, {"min.insync.replicas": "2"})
        bootstrap = ",".join(n.bootstrap for n in cluster.nodes.values())
        idem = [IdempotentWriter(bootstrap, k) for k in (1, 2)]
        tx, group = TxWriter(bootstrap), GroupReader(bootstrap)
        nemesis = Nemesis(cluster, rng)
        for w in (*idem, tx, group, nemesis):
            w.thread.start()
        time.sleep(duration_s)
        log("healing")
        nemesis.heal()
        cluster.wait_for_brokers({1, 2, 3}, timeout_s=SETTLE_S)
        unflushed = [w.finish() for w in idem]
        tx.finish()
        log("writers stopped")
        again = commits_again(bootstrap)
        group.finish()
        ends = settle(bootstrap)
        log("settled; reading back")
        idem_hw = ends_of(bootstrap, IDEM, "read_uncommitted")
        final = {"idem": read_all(bootstrap, IDEM, "read_uncommitted", idem_hw),
                 "tx_all": read_all(bootstrap, TX, "read_uncommitted", ends[0]),
                 "tx_committed": read_all(bootstrap, TX, "read_committed", ends[1]),
                 "idem_hw": idem_hw}
        anomalies = check(idem, tx, group.read, final, ends, group.commits, again)
        outcomes = defaultdict(int)
        for o in tx.outcome.values():
            outcomes[o] += 1
        summary = {
            "seed": seed, "duration_s": duration_s, "faults": nemesis.events,
            "idempotent acknowledged": sum(len(w.acked) for w in idem),
            "idempotent failed": sum(len(w.failed) for w in idem), "unflushed": unflushed,
            "transactions": dict(outcomes), "group reads": len(group.read),
            "group commits": len(group.commits), "fresh producer committed after (s)": again,
            "anomalies": anomalies,
        }
        failed = [e for e in nemesis.events if "failed" in str(e[2])]
        if failed:
            summary["anomalies"]["a node that did not come back"] = failed
        panics = [n.node_id for n in cluster.nodes.values() if "panicked" in n.log()]
        if panics:
            summary["anomalies"]["panic"] = panics
        return summary
    finally:
        if nemesis is not None:
            nemesis.stop.set()
        for n in cluster.nodes.values():
            if n.alive():
                n.proc.send_signal(signal.SIGCONT)
        cluster.stop()


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seed", type=int, required=True)
    ap.add_argument("--duration", type=float, required=True, help="seconds of faults")
    ap.add_argument("--out", type=Path, help="write chaos-SEED.json here")
    ap.add_argument("--keep", action="store_true", help="keep the nodes' data dirs and logs")
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix=f"chaos-{args.seed}-"))
    try:
        summary = run(args.seed, args.duration, work)
    except Exception:
        log(f"the run failed; nodes' logs in {work}")
        raise
    line = json.dumps(summary)
    print(line, flush=True)
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / f"chaos-{args.seed}.json").write_text(line + "\n")
    if summary["anomalies"] or args.keep:
        log(f"nodes' data dirs and logs kept in {work}")
    else:
        shutil.rmtree(work, ignore_errors=True)
    return 1 if summary["anomalies"] else 0


if __name__ == "__main__":
    sys.exit(main())
