"""Issue 38: a broker told to stop (SIGTERM) at any moment of its start-up stops within a bounded
time, cleanly, and starts again with nothing lost.

The data dir is on a slow disk (the power-loss tests' FUSE disk, every fsync delayed), so that
start-up takes seconds and each stage is long enough to be hit: preparing the shards' journals,
creating `__consumer_offsets` across the shards, and reopening partitions. Seen before the fix
as a new user would: a SIGTERM while shard 0 created `__consumer_offsets` let shard 1 end, and
shard 0 waited for ever for shard 1's answer."""
import signal
import time

import pytest
from confluent_kafka import Consumer, TopicPartition

import ck
from broker import Broker
from lazy_disk import CannotMount, LazyDisk
from waiting import wait_until

# Each fsync waits this long: a fresh start takes about 10 s (two shards' journals, 16
# partitions of `__consumer_offsets`).
SYNC_DELAY_MS = 150
# A stop takes what is in progress to its end (a topic being created, a partition opening):
# seconds on this disk, never unbounded.
STOP_LIMIT_S = 60


@pytest.fixture
def slow_disk(tmp_path):
    try:
        disk = LazyDisk(tmp_path / "slow", sync_delay_ms=SYNC_DELAY_MS).start()
    except CannotMount as e:
        pytest.skip(str(e))
    yield disk
    disk.stop()


def stopped_at(broker: Broker, line: str) -> str:
    """Starts `broker`, sends SIGTERM as soon as its log (this start's part) shows `line`, and
    checks it ends cleanly within STOP_LIMIT_S. Returns this start's log."""
    broker.launch()
    this_start = lambda: broker.log().rsplit(f"==== start {broker.starts} ====", 1)[1]  # noqa: E731
    wait_until(lambda: line in this_start() or broker.proc.poll() is not None, 60, f"'{line}' in the log")
    assert broker.proc.poll() is None, f"the broker ended before '{line}':\n{this_start()}"
    broker.proc.send_signal(signal.SIGTERM)
    sent = time.monotonic()
    assert broker.proc.wait(STOP_LIMIT_S) == 0, this_start()
    log = this_start()
    assert "shut down cleanly" in log and "panicked" not in log, log
    print(f"stopped at '{line}' in {time.monotonic() - sent:.1f} s")
    return log


def test_a_sigterm_at_any_moment_of_start_up_stops_the_broker_and_loses_nothing(slow_disk, tmp_path):
    broker = Broker(slow_disk.mount / "data", shards=2, work_dir=tmp_path)
    try:
        # A new data dir: while the journals are written (16 MiB of zeroes each), and while
        # `__consumer_offsets` is created over both shards.
        log = stopped_at(broker, "writing 16777216 bytes of zeroes")
        assert "the broker is stopping: journal left unmade" in log
        log = stopped_at(broker, "creating topic __consumer_offsets")
        assert "shard 0: serving" not in log[:log.index("signal 15")], "the stop came after the creation"
        # A whole start, acknowledged records, a clean stop.
        broker.start(timeout_s=120)
        ck.create_topic(broker.bootstrap, "kept", 4)
        values = {p: [b"%d-%04d" % (p, i) for i in range(50)] for p in range(4)}
        for p, vs in values.items():
            assert ck.produce_values(broker.bootstrap, "kept", p, vs) == list(range(50))
        assert broker.stop(STOP_LIMIT_S) == 0
        # A restart stopped while it reopens its partitions.
        stopped_at(broker, "opened partition")
        broker.start(timeout_s=120)
        got = ck.consume_to_end(broker.bootstrap, "kept", range(4))
        assert {p: [v for _o, _k, v, *_ in recs] for p, recs in got.items()} == values
        # Groups work: `__consumer_offsets` is whole after the start that was stopped making it.
        c = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "after-stops", "enable.auto.commit": False})
        try:
            c.commit(offsets=[TopicPartition("kept", 0, 7)], asynchronous=False)
            assert c.committed([TopicPartition("kept", 0)], timeout=30)[0].offset == 7
        finally:
            c.close()
    finally:
        broker.kill()
        broker.assert_no_panic()
