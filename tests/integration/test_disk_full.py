"""A disk that fills up: produce gets KAFKA_STORAGE_ERROR, nothing acknowledged is harmed, and
the broker serves again once space returns. The data dir is a fixed-size tmpfs, so this needs the
right to mount (root, as in CI); without it the test is skipped and says why."""
import hashlib
import socket
import struct
import subprocess

import pytest
from confluent_kafka import KafkaError, KafkaException, Producer

import ck
import kafka_wire as kw
from broker import Broker
from waiting import wait_until

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


def sync_group_v0(group: str, generation: int, member_id: str, assignments=()) -> bytes:
    """SyncGroup v0: the leader's assignments (member id, bytes), or none from a follower."""
    body = kw.string(group) + struct.pack(">i", generation) + kw.string(member_id)
    body += struct.pack(">i", len(assignments))
    for member, assignment in assignments:
        body += kw.string(member) + struct.pack(">i", len(assignment)) + assignment
    return body


def find_coordinator(port: int):
    """FindCoordinator v0 for the group until it answers (the first creates the offsets topic)."""
    def found():
        with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
            s.sendall(kw.request(10, 0, 1, kw.string("g36")))
            return struct.unpack(">h", kw.read_response(s)[4:6])[0] == 0
    wait_until(found, 30, "a group coordinator")


def join(port: int, member_id: str, correlation: int) -> socket.socket:
    """Sends a JoinGroup v0 on a connection of its own; the answer comes once the group
    rebalanced."""
    s = socket.create_connection(("127.0.0.1", port), timeout=60)
    s.sendall(kw.request(11, 0, correlation, kw.join_group_v0("g36", member_id, 30_000)))
    return s


def joined(s: socket.socket) -> tuple[int, str, str]:
    """(generation, leader, member id) of the JoinGroup answer on `s`."""
    r = kw.read_response(s)
    _corr, error, generation = struct.unpack(">ihi", r[:10])
    assert error == 0, f"JoinGroup error {error}"
    return member_fields(r, generation)


def first_join(port: int) -> tuple[socket.socket, tuple[int, str, str]]:
    """A new member's JoinGroup, sent again while the coordinator loads its partition
    (COORDINATOR_LOAD_IN_PROGRESS)."""
    joined = []

    def join_once():
        s = join(port, "", 1)
        r = kw.read_response(s)
        _corr, error, generation = struct.unpack(">ihi", r[:10])
        if error == 0:
            joined.append((s, member_fields(r, generation)))
            return True
        s.close()
        assert error == 14, f"JoinGroup error {error}"
        return False
    wait_until(join_once, 30, "the coordinator to load the group's partition")
    return joined[0]


def member_fields(r: bytes, generation: int) -> tuple[int, str, str]:
    at, fields = 10, []
    for _ in range(3):  # protocol, leader, member id
        n = struct.unpack(">h", r[at:at + 2])[0]
        fields.append(r[at + 2:at + 2 + n].decode())
        at += 2 + n
    return generation, fields[1], fields[2]


def sync(s: socket.socket, generation: int, member: str, assignments=()):
    s.sendall(kw.request(14, 0, 99, sync_group_v0("g36", generation, member, assignments)))


def synced(s: socket.socket):
    r = kw.read_response(s)
    assert struct.unpack(">h", r[4:6])[0] == 0, "SyncGroup error"


def fill(disk):
    """Writes a ballast file until the disk has not a byte left; returns its path."""
    ballast = disk / ".ballast"
    with open(ballast, "wb", buffering=0) as f:
        try:
            while True:
                f.write(b"\0" * (64 << 10))
        except OSError:
            pass
    return ballast


def test_a_group_whose_metadata_write_failed_on_a_full_disk_writes_it_again(small_disk):
    """Issue 36: a coordinator's write of its state that fails is made again. The disk is full
    when a group forms (one member, then a second: two generations), so both writes of its
    metadata fail (KAFKA_STORAGE_ERROR). Space returns: the coordinator writes the group again
    on its own, as it is then, so a restarted broker loads both members."""
    config = ("offsets_topic_partitions = 1\noffsets_topic_segment_bytes = 1048576\n"
              "group_initial_rebalance_delay_ms = 0\n")
    broker = Broker(small_disk, shards=1, config=config)
    try:
        broker.start()
        find_coordinator(broker.port)
        ballast = fill(small_disk)
        a, (generation, leader, member_a) = first_join(broker.port)
        sync(a, generation, member_a, [(member_a, b"")])
        synced(a)
        b = join(broker.port, "", 2)
        admin = ck.admin(broker.bootstrap)

        def state():
            return str(admin.describe_consumer_groups(["g36"])["g36"].result(10).state)
        wait_until(lambda: "PREPARING_REBALANC" in state(), 10, "the rebalance B's join begins")
        a.sendall(kw.request(11, 0, 3, kw.join_group_v0("g36", member_a, 30_000)))
        gen_a, leader, _ = joined(a)
        gen_b, _, member_b = joined(b)
        assert gen_a == gen_b > generation and leader == member_a
        sync(b, gen_b, member_b)  # answered once the leader's sync comes
        sync(a, gen_a, member_a, [(member_a, b""), (member_b, b"")])
        synced(a)
        synced(b)
        assert "group g36: metadata not persisted" in broker.log()
        ballast.unlink()
        wait_until(lambda: "group g36: metadata persisted after" in broker.log(), 10,
                   "the write made again")
        broker.kill()
        broker.start()
        admin = ck.admin(broker.bootstrap)
        members = []

        def loaded():
            try:
                group = admin.describe_consumer_groups(["g36"])["g36"].result(10)
            except KafkaException:
                return False  # COORDINATOR_LOAD_IN_PROGRESS, at first
            members[:] = [m.member_id for m in group.members]
            return True
        wait_until(loaded, 30, "the group's coordinator to load")
        assert sorted(members) == sorted([member_a, member_b])
        for s in (a, b):
            s.close()
    finally:
        broker.kill()
    broker.assert_no_panic()
