"""Malformed and hostile input over raw sockets: each gets an error code or a closed
connection and a log line; the broker keeps serving everyone else and loses nothing."""
import socket
import struct

import ck
import kafka_wire as kw
from records import check_partition, expected_by_partition


def connect(broker) -> socket.socket:
    return socket.create_connection(("127.0.0.1", broker.port), timeout=10)


def test_each_bad_input_then_normal_clients_still_work(broker):
    ck.create_topic(broker.bootstrap, "victim", 2)
    before = ck.produce(broker.bootstrap, "victim", 200, 2)
    # A connection that stays open and idle through all of it, then is used normally.
    bystander = connect(broker)

    cases = {
        "negative frame size": struct.pack(">i", -5),
        "oversized frame size": struct.pack(">i", 200 * 1024 * 1024),
        "truncated header": struct.pack(">i", 3) + b"\x00\x03\x00",
        "unknown api key": kw.request(999, 0, 1, b""),
        "unsupported version": kw.request(3, 99, 1, b""),  # Metadata v99
        "garbage in a known api": kw.request(3, 9, 1, b"\xff" * 7),
        # Array counts far beyond the frame: must not drive an allocation (it would abort).
        "huge array count": kw.request(3, 1, 1, struct.pack(">i", 2**31 - 1) + bytes(20)),
        "huge compact array count": kw.request(19, 5, 1, b"\x00" + b"\xff\xff\xff\xff\x07" + bytes(20)),
    }
    for name, frame in cases.items():
        s = connect(broker)
        s.sendall(frame)
        assert kw.closed_by_peer(s), f"{name}: connection not closed"
        s.close()
    log = broker.log()
    assert "frame size -5" in log
    assert f"frame size {200 * 1024 * 1024}" in log
    assert "unknown API key 999" in log
    assert "Metadata v99 is not supported" in log

    # ApiVersions at a version the broker does not serve: UNSUPPORTED_VERSION, in v0 form.
    s = connect(broker)
    s.sendall(kw.request(18, 77, 42, b""))
    resp = kw.read_response(s)
    assert struct.unpack(">ih", resp[:6]) == (42, 35)
    s.close()

    # A client that vanishes mid-request.
    s = connect(broker)
    s.sendall(struct.pack(">i", 1000) + b"\x00\x00\x00\x03" + b"x" * 10)
    s.close()

    # Garbage and corrupt record batches: CORRUPT_MESSAGE, the partition unharmed.
    s = connect(broker)
    good = kw.record_batch([b"a", b"b"])
    corrupt = bytearray(good)
    corrupt[-1] ^= 0xFF  # breaks the CRC
    for corr, records in [(1, b"\x00" * 70), (2, bytes(corrupt)), (3, good[:-5])]:
        s.sendall(kw.request(0, 3, corr, kw.produce_v3("victim", 0, records)))
        resp = kw.read_response(s)
        assert struct.unpack(">i", resp[:4])[0] == corr
        assert kw.produce_v3_error_code(resp)[0] == 2, f"case {corr}: expected CORRUPT_MESSAGE"
    # A magic other than 2.
    old = bytearray(good)
    old[16] = 1
    s.sendall(kw.request(0, 3, 4, kw.produce_v3("victim", 0, bytes(old))))
    assert kw.produce_v3_error_code(kw.read_response(s))[0] == 43  # UNSUPPORTED_FOR_MESSAGE_FORMAT
    # Unknown partition and bad acks.
    s.sendall(kw.request(0, 3, 5, kw.produce_v3("victim", 7, good)))
    assert kw.produce_v3_error_code(kw.read_response(s))[0] == 3  # UNKNOWN_TOPIC_OR_PARTITION
    s.sendall(kw.request(0, 3, 6, kw.produce_v3("victim", 0, good, acks=5)))
    assert kw.produce_v3_error_code(kw.read_response(s))[0] == 21  # INVALID_REQUIRED_ACKS
    # And a valid batch on the same connection still lands right after the earlier records.
    s.sendall(kw.request(0, 3, 7, kw.produce_v3("victim", 0, good)))
    error, base = kw.produce_v3_error_code(kw.read_response(s))
    assert (error, base) == (0, 100)
    s.close()

    # The idle bystander connection still works.
    bystander.sendall(kw.request(18, 0, 9, b""))
    assert struct.unpack(">ih", kw.read_response(bystander)[:6]) == (9, 0)
    bystander.close()

    # Normal clients produce and consume; everything acknowledged before is intact.
    assert len(before) == 200
    ck.produce(broker.bootstrap, "victim", 0, 2)
    got = ck.consume_to_end(broker.bootstrap, "victim", [0, 1])
    want = expected_by_partition(200, 2)
    check_partition(got[0][:100], want[0], "victim[0]")
    check_partition(got[1], want[1], "victim[1]")
    assert [v for _, _, v, _, _ in got[0][100:]] == [b"a", b"b"]
    assert broker.alive()
