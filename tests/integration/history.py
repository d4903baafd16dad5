"""One idempotent acks=all producer's history, and the check that a log kept it: every
acknowledged record present once, at the offset it was acknowledged with."""
import threading
import time

from confluent_kafka import Consumer, Producer, TopicPartition, OFFSET_BEGINNING


class History:
    """Every send and acknowledgement of one idempotent producer: value → acked offset."""

    def __init__(self, bootstrap: str, topic: str):
        self.topic = topic
        self.producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True,
                                  "linger.ms": 2, "message.timeout.ms": 120000,
                                  "topic.metadata.refresh.interval.ms": 500})
        self.sent, self.acked, self.failed = [], {}, []
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self.run, daemon=True)

    def run(self):
        i = 0
        while not self.stop.is_set():
            value = f"v{i:07d}".encode()
            try:
                self.producer.produce(self.topic, value=value, partition=0, on_delivery=self.delivered)
                self.sent.append(value)
                i += 1
            except BufferError:
                pass
            self.producer.poll(0.001)

    def delivered(self, err, msg):
        if err is not None:
            self.failed.append((msg.value(), err))
        else:
            self.acked[msg.value()] = msg.offset()

    def finish(self):
        self.stop.set()
        self.thread.join(30)
        assert self.producer.flush(120) == 0, "records never delivered"


def read_all(bootstrap: str, topic: str, end: int, timeout_s=60):
    """Everything in partition 0 below `end`, as (offset, value)."""
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "checker", "enable.auto.commit": False})
    c.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
    got = []
    deadline = time.monotonic() + timeout_s
    try:
        while (not got or got[-1][0] < end - 1) and time.monotonic() < deadline:
            msg = c.poll(0.5)
            if msg is not None and msg.error() is None:
                got.append((msg.offset(), msg.value()))
    finally:
        c.unsubscribe()
        c.poll(0)
        c.close()
    return got


def check_history(h: History, got):
    """No acknowledged record lost, none twice, offsets dense from 0, every read was sent,
    and each acknowledged record at the offset it was acknowledged with."""
    offsets = [o for o, _ in got]
    assert offsets == list(range(len(got))), "offsets increase without gaps"
    values = [v for _, v in got]
    assert len(set(values)) == len(values), "no duplicates with idempotence"
    sent = set(h.sent)
    assert all(v in sent for v in values), "every read record was written"
    at = dict((v, o) for o, v in got)
    lost = [v for v in h.acked if v not in at]
    assert not lost, f"{len(lost)} acknowledged records lost, first {lost[:3]}"
    moved = [(v, o, at[v]) for v, o in h.acked.items() if at[v] != o]
    assert not moved, f"records not at their acknowledged offsets: {moved[:3]}"
