"""An exactly-once consume-transform-produce processor, as Kafka's transactions guide writes
one with confluent-kafka: read SOURCE with read_committed in GROUP, write each value with an
"out-" prefix to DEST, and commit the consumed offsets in the same transaction
(send_offsets_to_transaction). On any error (the broker was killed) it drops both clients and
starts again: the new producer's init_transactions fences the old instance and aborts its open
transaction, and the new consumer resumes from the offsets the last committed transaction
wrote. Prints one JSON line per committed transaction, one per restart, and "done" once the
committed positions reach TOTAL.

Usage: eos_processor.py BOOTSTRAP SOURCE DEST GROUP TRANSACTIONAL_ID TOTAL
"""
import faulthandler
import json
import signal
import sys
import time

from confluent_kafka import Consumer, KafkaException, Producer

BATCH = 20
# A bound on the whole run, so that a broker that never recovers fails the test instead of
# hanging it.
RUN_LIMIT_S = 240


def say(**what):
    print(json.dumps(what), flush=True)


# librdkafka 2.10+ re-bootstraps once every broker is unreachable (a single node restarting),
# which decommissions the broker objects it knew; one cached as the group coordinator then
# leaves send_offsets_to_transaction waiting forever, past its timeout (librdkafka issues
# #5511 and #5456, open). The processor keeps the brokers it knows instead.
COMMON = {"metadata.recovery.strategy": "none"}


def run_once(bootstrap, source, dest, group, tid, total):
    """Processes until the committed positions reach `total` (True) or an error (raised)."""
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "isolation.level": "read_committed",
                  "enable.auto.commit": False, "auto.offset.reset": "earliest",
                  "session.timeout.ms": 6000, "enable.partition.eof": False, **COMMON})
    p = Producer({"bootstrap.servers": bootstrap, "transactional.id": tid, "linger.ms": 5,
                  "transaction.timeout.ms": 10000, **COMMON})
    try:
        p.init_transactions(60)
        c.subscribe([source])
        while True:
            msgs = c.consume(num_messages=BATCH, timeout=1.0)
            if not msgs:
                assigned = c.assignment()
                if assigned and sum(max(tp.offset, 0) for tp in c.committed(assigned, 10)) >= total:
                    return True
                continue
            p.begin_transaction()
            for m in msgs:
                if m.error():
                    raise KafkaException(m.error())
                p.produce(dest, value=b"out-" + m.value(), partition=m.partition())
            p.send_offsets_to_transaction(c.position(c.assignment()), c.consumer_group_metadata(), 30)
            p.commit_transaction(30)
            say(committed=len(msgs))
            time.sleep(0.05)
    finally:
        c.close()


def main():
    # A watchdog that finds it stalled asks for every thread's stack (tests/integration/eos.py).
    faulthandler.register(signal.SIGUSR1)
    bootstrap, source, dest, group, tid, total = sys.argv[1:7]
    deadline = time.monotonic() + RUN_LIMIT_S
    while time.monotonic() < deadline:
        try:
            if run_once(bootstrap, source, dest, group, tid, int(total)):
                say(done=True)
                return 0
        except KafkaException as e:
            say(restart=str(e)[:200])
            time.sleep(0.5)
    say(gave_up=True)
    return 1


if __name__ == "__main__":
    sys.exit(main())
