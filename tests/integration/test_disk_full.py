"""A disk that fills up: produce gets KAFKA_STORAGE_ERROR, nothing acknowledged is harmed, and
the broker serves again once space returns. The data dir is a fixed-size tmpfs, so this needs the
right to mount (root, as in CI); without it the test is skipped and says why."""
import hashlib
import subprocess

import pytest
from confluent_kafka import KafkaError, Producer

import ck
from broker import Broker

DISK_BYTES = 8 << 20
BALLAST_BYTES = 3 << 20
VALUE_BYTES = 16 << 10


def value(i: int) -> bytes:
    return hashlib.sha256(str(i).encode()).digest() * (VALUE_BYTES // 32)


@pytest.fixture
def small_disk(tmp_path):
    mount = tmp_path / "disk"
    mount.mkdir()
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={DISK_BYTES}", "tmpfs", str(mount)],
                       capture_output=True, text=True)
    if r.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here ({r.stderr.strip()}); run as root to test disk-full")
    yield mount
    subprocess.run(["umount", "-l", str(mount)], check=False)


def produce_batch(bootstrap, first: int, count: int):
    """Produces values first..first+count one flush at a time, without retries; returns
    ({i: offset} acknowledged, [error codes])."""
    p = Producer({"bootstrap.servers": bootstrap, "acks": "all", "retries": 0, "linger.ms": 0,
                  "message.timeout.ms": 10000})
    acked, errors = {}, []

    def done(err, msg, i):
        if err is None:
            acked[i] = msg.offset()
        else:
            errors.append(err.code())

    for i in range(first, first + count):
        p.produce("full", value=value(i), partition=0, on_delivery=lambda e, m, i=i: done(e, m, i))
        p.flush(15)
    return acked, errors


def check_log(bootstrap, acked: dict):
    """The partition holds exactly the acknowledged values, at their offsets, with no gaps."""
    got = ck.consume(bootstrap, "full", [0], len(acked))[0]
    by_offset = {offset: i for i, offset in acked.items()}
    assert [r[0] for r in got] == list(range(len(acked))), "offsets are dense and exact"
    for offset, _key, v, _h, _ts in got:
        assert v == value(by_offset[offset]), f"offset {offset}"


def test_disk_full_then_space_returns(small_disk, tmp_path):
    ballast = small_disk / ".ballast"
    ballast.write_bytes(b"\0" * BALLAST_BYTES)
    # The broker's log file lives beside the data dir, off the small disk.
    broker = Broker(small_disk, shards=1, config="[log]\nsegment_bytes = 1048576\n")
    try:
        broker.start()
        # No room for the 16 MiB journal: the broker starts without it, saying so, and
        # syncs every append in its own file.
        assert "cannot open the journal" in broker.log()
        assert not list(small_disk.glob("__journal/*.tmp")), "the partial journal is removed"
        ck.create_topic(broker.bootstrap, "full", 1)
        # ~5 MiB is free: 16 KiB records run out of it well within 600.
        acked, errors = {}, []
        first = 0
        while not errors and first < 600:
            a, errors = produce_batch(broker.bootstrap, first, 50)
            acked.update(a)
            first += 50
        assert errors, "the disk never filled"
        assert set(errors) == {KafkaError.KAFKA_STORAGE_ERROR}, errors
        assert broker.alive()
        assert "No space left on device" in broker.log()
        # More writes still fail cleanly while the disk is full, and what was acked is intact.
        _, more_errors = produce_batch(broker.bootstrap, first, 3)
        assert set(more_errors) == {KafkaError.KAFKA_STORAGE_ERROR}
        check_log(broker.bootstrap, acked)

        # Space returns: the same partition takes writes again, right after the last acked one.
        ballast.unlink()
        again, errors = produce_batch(broker.bootstrap, 1000, 20)
        assert not errors, errors
        assert sorted(again.values()) == list(range(len(acked), len(acked) + 20))
        acked.update(again)
        check_log(broker.bootstrap, acked)

        # And all of it survives a SIGKILL.
        broker.kill()
        broker.start()
        check_log(broker.bootstrap, acked)
        broker.assert_no_panic()
    finally:
        broker.kill()
