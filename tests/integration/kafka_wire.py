"""Minimal hand-built Kafka frames for raw-socket tests of malformed input. Only what the tests
need: a request header v1, a Produce v3 body, and reading a response."""
import socket
import ssl
import struct


def _crc32c_table() -> list[int]:
    table = []
    for n in range(256):
        c = n
        for _ in range(8):
            c = (c >> 1) ^ (0x82F63B78 if c & 1 else 0)
        table.append(c)
    return table


_CRC32C = _crc32c_table()


def crc32c(data: bytes) -> int:
    crc = 0xFFFFFFFF
    for b in data:
        crc = _CRC32C[(crc ^ b) & 0xFF] ^ (crc >> 8)
    return crc ^ 0xFFFFFFFF


def string(s: str | None) -> bytes:
    if s is None:
        return struct.pack(">h", -1)
    b = s.encode()
    return struct.pack(">h", len(b)) + b


def varint(v: int) -> bytes:
    """A zigzag varint, as record fields use."""
    return varint_unsigned((v << 1) ^ (v >> 63))


def record_batch(values, timestamp=1_700_000_000_000, producer_id=-1, producer_epoch=-1, base_sequence=-1,
                 keys=None, attributes=0, headers=None) -> bytes:
    """An uncompressed batch of these values; keys: one per value (None: keyless), or all keyless;
    headers: one [(name, value)] per value, or none. attributes: 0x10 transactional, 0x20 control."""
    records = b""
    for i, v in enumerate(values):
        k = keys[i] if keys else None
        key = varint(-1) if k is None else varint(len(k)) + k
        hs = headers[i] if headers else []
        header_bytes = varint(len(hs)) + b"".join(varint(len(n)) + n + (varint(-1) if hv is None else varint(len(hv)) + hv)
                                        for n, hv in hs)
        body = b"\x00" + varint(0) + varint(i) + key + (varint(-1) if v is None else varint(len(v)) + v) + header_bytes
        records += varint(len(body)) + body
    after_crc = struct.pack(">hiqqqhii", attributes, len(values) - 1, timestamp, timestamp, producer_id, producer_epoch,
                            base_sequence, len(values)) + records
    crc = crc32c(after_crc)
    head = struct.pack(">iB", 0, 2) + struct.pack(">I", crc)  # partitionLeaderEpoch, magic, crc
    batch_len = len(head) + len(after_crc)
    return struct.pack(">qi", 0, batch_len) + head + after_crc


def request(api_key: int, version: int, correlation_id: int, body: bytes, client_id="raw") -> bytes:
    payload = struct.pack(">hhi", api_key, version, correlation_id) + string(client_id) + body
    return struct.pack(">i", len(payload)) + payload


def produce_v3(topic: str, partition: int, records: bytes, acks=-1, timeout_ms=5000, transactional_id=None) -> bytes:
    return produce_v3_partitions(topic, [(partition, records)], acks, timeout_ms, transactional_id)


def produce_v3_partitions(topic: str, partitions, acks=-1, timeout_ms=5000, transactional_id=None) -> bytes:
    """One topic's [(partition, records)], in that order."""
    body = string(transactional_id) + struct.pack(">hi", acks, timeout_ms) + struct.pack(">i", 1) + string(topic)
    body += struct.pack(">i", len(partitions))
    for partition, records in partitions:
        body += struct.pack(">i", partition) + struct.pack(">i", len(records)) + records
    return body


def create_topics_v2(name: str, partitions: int, replicas: int, timeout_ms=10_000) -> bytes:
    """A CreateTopics v2 request frame for one topic."""
    body = struct.pack(">i", 1) + string(name) + struct.pack(">ihi", partitions, replicas, 0)
    body += struct.pack(">i", 0) + struct.pack(">i", timeout_ms) + b"\x00"
    return request(19, 2, 1, body)


def create_topics_v2_result(response: bytes) -> tuple[int, str | None]:
    """(error code, error message) of the single topic in a CreateTopics v2 response."""
    pos = 4 + 4 + 4  # correlation id, throttle, topics array length
    pos += 2 + struct.unpack(">h", response[pos:pos + 2])[0]
    code = struct.unpack(">h", response[pos:pos + 2])[0]
    message, _ = nullable_string_at(response, pos + 2)
    return code, message


def read_response(sock: socket.socket) -> bytes:
    size = struct.unpack(">i", recv_exact(sock, 4))[0]
    return recv_exact(sock, size)


def recv_exact(sock: socket.socket, n: int) -> bytes:
    buf = b""
    while len(buf) < n:
        chunk = sock.recv(n - len(buf))
        if not chunk:
            raise ConnectionError("closed")
        buf += chunk
    return buf


def produce_v3_error_code(response: bytes) -> tuple[int, int]:
    """(error_code, base_offset) of the single partition in a Produce v3 response."""
    return produce_v3_results(response)[0][1:]


def produce_v3_results(response: bytes) -> list[tuple[int, int, int]]:
    """[(partition, error_code, base_offset)] of the single topic in a Produce v3 response."""
    pos = 4  # correlation id
    pos += 4  # topics array length
    name_len = struct.unpack(">h", response[pos:pos + 2])[0]
    pos += 2 + name_len
    count = struct.unpack(">i", response[pos:pos + 4])[0]
    pos += 4
    out = []
    for _ in range(count):  # index, error, base offset, log append time
        out.append(struct.unpack(">ihq", response[pos:pos + 14]))
        pos += 22
    return out


def nullable_string_at(response: bytes, pos: int) -> tuple[str | None, int]:
    (n,) = struct.unpack_from(">h", response, pos)
    if n < 0:
        return None, pos + 2
    return response[pos + 2:pos + 2 + n].decode(), pos + 2 + n


def produce_v8_result(response: bytes) -> tuple[int, list[tuple[int, str]], str | None]:
    """(error_code, [(batch_index, message)], error_message) of the single partition of a
    Produce v8 response (the request body is produce_v3's: v3 to v8 share it)."""
    pos = 4 + 4  # correlation id, topics array length
    (name_len,) = struct.unpack_from(">h", response, pos)
    pos += 2 + name_len + 4  # name, partitions array length
    _index, error = struct.unpack_from(">ih", response, pos)
    pos += 4 + 2 + 8 + 8 + 8  # index, error, base offset, log append time, log start offset
    (count,) = struct.unpack_from(">i", response, pos)
    pos += 4
    record_errors = []
    for _ in range(max(count, 0)):
        (batch_index,) = struct.unpack_from(">i", response, pos)
        message, pos = nullable_string_at(response, pos + 4)
        record_errors.append((batch_index, message))
    message, _ = nullable_string_at(response, pos)
    return error, record_errors, message


def closed_by_peer(sock: socket.socket, timeout_s=5.0) -> bool:
    """Whether the peer closes `sock` (on a TLS socket, an alert first counts: it ends the
    session)."""
    sock.settimeout(timeout_s)
    try:
        return sock.recv(1) == b""
    except (ConnectionResetError, ssl.SSLError):
        return True


def fetch_v4(topic: str, partition: int, offset: int, max_wait_ms: int, min_bytes=1, max_bytes=1 << 20) -> bytes:
    """A Fetch v4 body for one partition (replica -1, read_uncommitted)."""
    body = struct.pack(">iiiib", -1, max_wait_ms, min_bytes, max_bytes, 0)
    body += struct.pack(">i", 1) + string(topic) + struct.pack(">i", 1)
    body += struct.pack(">iqi", partition, offset, max_bytes)
    return body


def fetch_v4_partition(response: bytes) -> tuple[int, int, int]:
    """(error_code, high_watermark, records bytes) of the single partition in a Fetch v4 response."""
    pos = 4 + 4 + 4  # correlation id, throttle, topics array length
    name_len = struct.unpack(">h", response[pos:pos + 2])[0]
    pos += 2 + name_len + 4  # name, partitions array length
    _p, error, hw, _lso = struct.unpack(">ihqq", response[pos:pos + 22])
    pos += 22
    aborted = struct.unpack(">i", response[pos:pos + 4])[0]
    pos += 4 + max(aborted, 0) * 16
    records = struct.unpack(">i", response[pos:pos + 4])[0]
    return error, hw, records


def fetch_v7(session_id: int, epoch: int, partitions, forgotten=(), max_wait_ms=0, min_bytes=1,
             max_bytes=1 << 20) -> bytes:
    """A Fetch v7 body (fetch sessions, KIP-227). partitions: [(topic, partition, offset)], each
    topic's partitions listed together, each read up to 1 MiB; forgotten: [(topic, [partition])];
    max_bytes: the whole response's limit."""
    body = struct.pack(">iiiibii", -1, max_wait_ms, min_bytes, max_bytes, 0, session_id, epoch)
    topics = {}
    for topic, p, offset in partitions:
        topics.setdefault(topic, []).append((p, offset))
    body += struct.pack(">i", len(topics))
    for topic, parts in topics.items():
        body += string(topic) + struct.pack(">i", len(parts))
        body += b"".join(struct.pack(">iqqi", p, offset, -1, 1 << 20) for p, offset in parts)
    body += struct.pack(">i", len(forgotten))
    for topic, parts in forgotten:
        body += string(topic) + struct.pack(">i", len(parts)) + b"".join(struct.pack(">i", p) for p in parts)
    return body


def fetch_v7_response(response: bytes) -> tuple[int, int, dict]:
    """(error_code, session_id, {(topic, partition): (error_code, high_watermark, records bytes)})."""
    error, session_id = struct.unpack_from(">hi", response, 4 + 4)
    at = 4 + 4 + 6
    (n_topics,) = struct.unpack_from(">i", response, at)
    at += 4
    out = {}
    for _ in range(n_topics):
        (name_len,) = struct.unpack_from(">h", response, at)
        topic = response[at + 2:at + 2 + name_len].decode()
        at += 2 + name_len
        (n_parts,) = struct.unpack_from(">i", response, at)
        at += 4
        for _ in range(n_parts):
            p, perr, hw, _lso, _log_start, aborted = struct.unpack_from(">ihqqqi", response, at)
            at += 34 + max(aborted, 0) * 16
            (size,) = struct.unpack_from(">i", response, at)
            at += 4 + max(size, 0)
            out[(topic, p)] = (perr, hw, size)
    return error, session_id, out


def fetch_v4_batches(response: bytes) -> list[bytes]:
    """The record batches of the single partition in a Fetch v4 response, split by their
    length fields (a trailing partial batch would come back short)."""
    pos = 4 + 4 + 4
    name_len = struct.unpack(">h", response[pos:pos + 2])[0]
    pos += 2 + name_len + 4 + 22
    aborted = struct.unpack(">i", response[pos:pos + 4])[0]
    pos += 4 + max(aborted, 0) * 16
    size = struct.unpack(">i", response[pos:pos + 4])[0]
    return split_batches(response[pos + 4:pos + 4 + size])


def split_batches(records: bytes) -> list[bytes]:
    """Record batches split by their length fields (a trailing partial batch comes back short)."""
    out = []
    while records:
        n = struct.unpack(">i", records[8:12])[0] + 12 if len(records) >= 12 else len(records)
        out.append(records[:n])
        records = records[n:]
    return out


def whole_batches(records: bytes) -> list[bytes]:
    """The batches of a fetch's records that arrived whole (a fetch may end inside one)."""
    return [b for b in split_batches(records) if len(b) >= 12 and len(b) == struct.unpack(">i", b[8:12])[0] + 12]


def batch_offsets(batch: bytes) -> tuple[int, int]:
    """A batch's (base offset, last offset delta)."""
    return struct.unpack_from(">q", batch, 0)[0], struct.unpack_from(">i", batch, 23)[0]


def join_group_v0(group: str, member_id="", session_timeout_ms=10_000) -> bytes:
    """JoinGroup v0: one "range" protocol with empty metadata."""
    body = string(group) + struct.pack(">i", session_timeout_ms) + string(member_id) + string("consumer")
    return body + struct.pack(">i", 1) + string("range") + struct.pack(">i", 0)


def join_group_v0_response(response: bytes) -> tuple[int, int, str]:
    """(correlation id, error code, member id) of a JoinGroup v0 response."""
    corr, error, _generation = struct.unpack(">ihi", response[:10])
    at = 10
    fields = []
    for _ in range(3):  # protocol name, leader, member id
        n = struct.unpack(">h", response[at:at + 2])[0]
        fields.append(response[at + 2:at + 2 + max(n, 0)].decode())
        at += 2 + max(n, 0)
    return corr, error, fields[2]


def init_producer_id_v1() -> bytes:
    """An InitProducerId v1 body for an idempotent (non-transactional) producer."""
    return string(None) + struct.pack(">i", 60_000)


def init_producer_id_v1_response(response: bytes) -> tuple[int, int, int]:
    """(error_code, producer_id, producer_epoch)"""
    _corr, _throttle, error, pid, epoch = struct.unpack(">iihqh", response[:20])
    return error, pid, epoch


def delete_records_v1(topic: str, offsets: dict[int, int], timeout_ms=5000) -> bytes:
    """A DeleteRecords v1 body: move each partition's log start up to its offset (-1: the high
    watermark)."""
    parts = b"".join(struct.pack(">iq", p, o) for p, o in offsets.items())
    return struct.pack(">i", 1) + string(topic) + struct.pack(">i", len(offsets)) + parts + struct.pack(">i", timeout_ms)


def delete_records_v1_response(response: bytes) -> dict[int, tuple[int, int]]:
    """{partition: (error_code, low_watermark)} of the single topic in a DeleteRecords v1 response."""
    at = 4 + 4 + 4  # correlation id, throttle time, topics count
    (name_len,) = struct.unpack_from(">h", response, at)
    at += 2 + name_len
    (n,) = struct.unpack_from(">i", response, at)
    at += 4
    out = {}
    for _ in range(n):
        p, low, code = struct.unpack_from(">iqh", response, at)
        out[p] = (code, low)
        at += 14
    return out


def varint_unsigned(v: int) -> bytes:
    out = bytearray()
    while v >= 0x80:
        out.append((v & 0x7F) | 0x80)
        v >>= 7
    out.append(v)
    return bytes(out)


def compact_string(s: str) -> bytes:
    b = s.encode()
    return varint_unsigned(len(b) + 1) + b


def flexible_request(api_key: int, version: int, body: bytes) -> bytes:
    """A frame with request header v2 (client id, then empty tagged fields)."""
    payload = struct.pack(">hhi", api_key, version, 7) + string("storm") + b"\x00" + body
    return struct.pack(">i", len(payload)) + payload


def templates() -> list[bytes]:
    """Valid frames of several APIs, to mutate."""
    batch = record_batch([b"storm-value-%d" % i for i in range(5)])
    return [
        request(0, 3, 1, produce_v3("storm", 0, batch)),
        request(1, 4, 2, fetch_v4("storm", 0, 0, max_wait_ms=10)),
        request(3, 1, 3, struct.pack(">i", -1)),  # Metadata v1, all topics
        request(18, 0, 4, b""),
        flexible_request(18, 3, compact_string("storm") + compact_string("1.0") + b"\x00"),
        request(19, 2, 5, struct.pack(">i", 1) + string("storm-new") + struct.pack(">ihii", 2, 1, 0, 0)
                   + struct.pack(">ib", 1000, 0)),  # CreateTopics v2
        request(11, 0, 6, string("storm-group") + struct.pack(">i", 6000) + string("")
                   + string("consumer") + struct.pack(">i", 1) + string("range")
                   + struct.pack(">i", 4) + b"\x00\x01\x00\x00"),  # JoinGroup v0
        request(10, 0, 8, string("storm-group")),  # FindCoordinator v0
        request(22, 1, 9, init_producer_id_v1()),
        request(21, 1, 10, delete_records_v1("storm", {0: 0})),
    ]


def incremental_alter_configs_v0(resource_type: int, name: str, edits) -> bytes:
    """IncrementalAlterConfigs v0 for one resource; edits: [(key, op, value)] (op 0 SET, 1 DELETE)."""
    body = struct.pack(">i", 1) + struct.pack(">b", resource_type) + string(name) + struct.pack(">i", len(edits))
    for key, op, value in edits:
        body += string(key) + struct.pack(">b", op) + string(value)
    return body + b"\x00"  # validate_only


def alter_configs_v0_result(response: bytes) -> tuple[int, str | None]:
    """(error_code, error_message) of the single resource of an (Incremental)AlterConfigs v0 response."""
    (error,) = struct.unpack_from(">h", response, 4 + 4 + 4)
    message, _ = nullable_string_at(response, 4 + 4 + 4 + 2)
    return error, message


def describe_configs_v1(resource_type: int, name: str) -> bytes:
    return struct.pack(">i", 1) + struct.pack(">b", resource_type) + string(name) + struct.pack(">i", -1) + b"\x00"


def describe_configs_v1_result(response: bytes) -> dict:
    """{key: (value, source, read_only)} of the single resource of a DescribeConfigs v1 response."""
    pos = 4 + 4 + 4  # correlation id, throttle, results array length
    (error,) = struct.unpack_from(">h", response, pos)
    assert error == 0, error
    _message, pos = nullable_string_at(response, pos + 2)
    _name, pos = nullable_string_at(response, pos + 1)
    (count,) = struct.unpack_from(">i", response, pos)
    pos += 4
    out = {}
    for _ in range(count):
        key, pos = nullable_string_at(response, pos)
        value, pos = nullable_string_at(response, pos)
        read_only, source, _sensitive = struct.unpack_from(">?b?", response, pos)
        pos += 3
        (synonyms,) = struct.unpack_from(">i", response, pos)
        pos += 4
        for _ in range(max(synonyms, 0)):
            _, pos = nullable_string_at(response, pos)
            _, pos = nullable_string_at(response, pos)
            pos += 1
        out[key] = (value, source, read_only)
    return out
