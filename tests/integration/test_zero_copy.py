"""Fetch answered by sendfile (fetch.zero_copy = true) and by the copying path (false): the
same records come back byte for byte across segments, at max_bytes limits, and from many
partitions in one response. The metrics show which path carried the bytes."""
import hashlib
import socket
import struct
import time

import pytest
from confluent_kafka import Producer

import ck
import kafka_wire as kw
from metrics import metrics_config, total
from records import check_partition, expected_by_partition

MODES = [pytest.param(True, id="zero_copy"), pytest.param(False, id="copying")]


def start(make_broker, zero_copy: bool, extra=""):
    config, metrics = metrics_config(f"[fetch]\nzero_copy = {str(zero_copy).lower()}\n" + extra)
    return make_broker(shards=2, config=config), metrics


def check_path(metrics, zero_copy: bool):
    sent = total(metrics, "sluice_sendfile_bytes_total")
    assert (sent > 0) == zero_copy, f"sendfile carried {sent} bytes with zero_copy={zero_copy}"


@pytest.mark.parametrize("zero_copy", MODES)
def test_fetch_across_segments(make_broker, zero_copy):
    broker, metrics = start(make_broker, zero_copy, "[log]\nsegment_bytes = 32768\n")
    ck.create_topic(broker.bootstrap, "segs", 1)
    ck.produce(broker.bootstrap, "segs", 3000, 1, extra={"batch.size": 8192})
    assert len(list((broker.data_dir / "segs-0").glob("*.log"))) > 5
    got = ck.consume(broker.bootstrap, "segs", [0], 3000)
    check_partition(got[0], expected_by_partition(3000, 1)[0], "segs[0]")
    check_path(metrics, zero_copy)


@pytest.mark.parametrize("zero_copy", MODES)
def test_fetch_at_max_bytes(make_broker, zero_copy):
    broker, metrics = start(make_broker, zero_copy)
    ck.create_topic(broker.bootstrap, "small", 1)
    ck.produce(broker.bootstrap, "small", 2000, 1, extra={"batch.size": 4096})
    # Limits below one batch: each fetch still returns the first batch whole (KIP-74).
    got = ck.consume(broker.bootstrap, "small", [0], 2000,
                     extra={"fetch.max.bytes": 1024, "message.max.bytes": 1024,
                            "max.partition.fetch.bytes": 512})
    check_partition(got[0], expected_by_partition(2000, 1)[0], "small[0]")
    # On the wire: whole batches only, as many as fit in partition_max_bytes.
    with socket.create_connection(("127.0.0.1", broker.port), timeout=10) as s:
        for limit in (100, 5000, 20000, 65536):
            s.sendall(kw.request(1, 4, limit, kw.fetch_v4("small", 0, 37, max_wait_ms=0, max_bytes=limit)))
            resp = kw.read_response(s)
            batches = kw.fetch_v4_batches(resp)
            sizes = [len(b) for b in batches]
            assert sizes and sum(b for b in sizes) <= max(limit, sizes[0]), (limit, sizes)
            first_base, first_count = struct.unpack(">q", batches[0][:8])[0], struct.unpack(">i", batches[0][57:61])[0]
            assert first_base <= 37 < first_base + first_count, "starts with the batch holding offset 37"
            for b in batches:
                assert len(b) == struct.unpack(">i", b[8:12])[0] + 12, "no partial batch"
    check_path(metrics, zero_copy)


@pytest.mark.parametrize("zero_copy", MODES)
def test_many_partitions_in_one_response(make_broker, zero_copy):
    broker, metrics = start(make_broker, zero_copy)
    ck.create_topic(broker.bootstrap, "wide", 64)
    ck.produce(broker.bootstrap, "wide", 64 * 40, 64)
    got = ck.consume(broker.bootstrap, "wide", list(range(64)), 64 * 40)
    want = expected_by_partition(64 * 40, 64)
    for p in range(64):
        check_partition(got[p], want[p], f"wide[{p}]")
    check_path(metrics, zero_copy)


def test_slow_reader_and_vanishing_clients(make_broker):
    """A client whose socket buffer fills (sendfile meets EAGAIN over and over) still gets every
    byte, in order; clients that vanish mid-response cost nothing to anyone else."""
    broker, metrics = start(make_broker, True)
    ck.create_topic(broker.bootstrap, "big", 1)
    # 16 MiB: more than the kernel's largest send buffer (tcp_wmem, 4 MiB here) can hold.
    values = [hashlib.sha256(str(i).encode()).digest() * 2048 for i in range(256)]  # 64 KiB each
    p = Producer({"bootstrap.servers": broker.bootstrap, "acks": "all", "linger.ms": 20})
    for v in values:
        p.produce("big", value=v, partition=0)
    assert p.flush(60) == 0
    count = len(values)

    slow = socket.socket()
    slow.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    slow.connect(("127.0.0.1", broker.port))
    slow.settimeout(30)
    slow.sendall(kw.request(1, 4, 1, kw.fetch_v4("big", 0, 0, max_wait_ms=0, max_bytes=32 << 20)))
    body = b""
    size = struct.unpack(">i", kw.recv_exact(slow, 4))[0]
    chunks = []
    got_bytes = 0
    time.sleep(1)  # let the broker fill its send buffer and meet EAGAIN
    while got_bytes < size:
        chunk = slow.recv(min(1 << 16, size - got_bytes))
        assert chunk, "the broker closed mid-response"
        chunks.append(chunk)
        got_bytes += len(chunk)
    body = b"".join(chunks)
    slow.close()
    batches = kw.fetch_v4_batches(body)
    assert sum(struct.unpack(">i", b[57:61])[0] for b in batches) == count, "every record, whole"
    for b in batches:
        assert struct.unpack(">I", b[17:21])[0] == kw.crc32c(b[21:]), "batch bytes intact"
    assert total(metrics, "sluice_sendfile_copied_bytes_total") > 0, "the full-socket path ran"

    for _ in range(20):
        gone = socket.create_connection(("127.0.0.1", broker.port), timeout=10)
        gone.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        gone.sendall(kw.request(1, 4, 2, kw.fetch_v4("big", 0, 0, max_wait_ms=0, max_bytes=32 << 20)))
        gone.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))  # RST on close
        gone.close()
    got = ck.consume(broker.bootstrap, "big", [0], count)
    assert [r[2] for r in got[0]] == values
    assert [r[0] for r in got[0]] == list(range(count))
    assert broker.alive()


def test_cold_data_is_read_not_sendfiled(make_broker):
    """Data evicted from the page cache would make sendfile read the disk on the shard's thread;
    the broker notices (a non-waiting probe) and reads it asynchronously instead."""
    import os

    broker, metrics = start(make_broker, True)
    ck.create_topic(broker.bootstrap, "cold", 1)
    ck.produce(broker.bootstrap, "cold", 2000, 1)  # acks=all: synced, so the pages are clean
    for seg in (broker.data_dir / "cold-0").glob("*.log"):
        fd = os.open(seg, os.O_RDONLY)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        try:
            os.preadv(fd, [bytearray(1)], 0, os.RWF_NOWAIT)
            cached = True
        except BlockingIOError:
            cached = False
        os.close(fd)
        if cached:  # tmpfs, for one, has no disk to evict to
            pytest.skip("this filesystem keeps the segment in memory; nothing to evict")
    got = ck.consume(broker.bootstrap, "cold", [0], 2000)
    check_partition(got[0], expected_by_partition(2000, 1)[0], "cold[0]")
    assert total(metrics, "sluice_cold_fetches_total") > 0


def cached_pages(fd: int, offset: int, length: int):
    """cachestat(2): pages of the range in the page cache, without reading (and so without
    triggering readahead, as a non-waiting read would). None where the kernel lacks it."""
    import ctypes

    class Range(ctypes.Structure):
        _fields_ = [("off", ctypes.c_uint64), ("len", ctypes.c_uint64)]

    class Stat(ctypes.Structure):
        _fields_ = [(n, ctypes.c_uint64) for n in ("cache", "dirty", "writeback", "evicted", "recently_evicted")]

    libc = ctypes.CDLL(None, use_errno=True)
    stat = Stat()
    if libc.syscall(451, fd, ctypes.byref(Range(offset, length)), ctypes.byref(stat), 0) != 0:
        return None
    return stat.cache


def test_a_range_cold_only_in_its_middle_is_read_not_sendfiled(make_broker):
    """Every page of a range is checked (cachestat), not only its ends: a fetch over a segment
    whose middle alone was evicted takes the asynchronous read too."""
    import os

    broker, metrics = start(make_broker, True)
    ck.create_topic(broker.bootstrap, "middle", 1)
    ck.produce(broker.bootstrap, "middle", 2000, 1)
    (seg,) = (broker.data_dir / "middle-0").glob("*.log")
    size = seg.stat().st_size
    assert size > 256 * 1024
    page = 4096
    fd = os.open(seg, os.O_RDONLY)
    try:
        if cached_pages(fd, 0, size) is None:
            pytest.skip("this kernel has no cachestat(2) (Linux < 6.5): only range ends are probed")
        # Evict it all, then read back just the first and last pages (no readahead).
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_RANDOM)
        os.pread(fd, page, 0)
        os.pread(fd, 1, size - 1)
        middle_cached = cached_pages(fd, size // 2, 64 * 1024)
        ends_cached = cached_pages(fd, 0, page) == 1 and cached_pages(fd, size - 1, 1) == 1
    finally:
        os.close(fd)
    if middle_cached == 16:
        pytest.skip("this filesystem keeps the segment in memory; nothing to evict")
    assert ends_cached
    got = ck.consume(broker.bootstrap, "middle", [0], 2000)
    check_partition(got[0], expected_by_partition(2000, 1)[0], "middle[0]")
    assert total(metrics, "sluice_cold_fetches_total") > 0
