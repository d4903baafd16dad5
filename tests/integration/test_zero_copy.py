"""Fetch answered by sendfile (fetch.zero_copy = true) and by the copying path (false): the
same records come back byte for byte across segments, at max_bytes limits, and from many
partitions in one response. The metrics show which path carried the bytes."""
import socket
import struct

import pytest

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
