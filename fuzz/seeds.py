#!/usr/bin/env python3
"""Writes the checked-in seed corpus (corpus/<target>/) from hand-built valid inputs, so that
each fuzzer starts from frames, batches and partition directories the broker really accepts.
Run from anywhere: python3 fuzz/seeds.py"""
import hashlib
import struct
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "tests" / "integration"))
import kafka_wire as kw  # noqa: E402



def write(target: str, data: bytes):
    out = HERE / "corpus" / target
    out.mkdir(parents=True, exist_ok=True)
    (out / hashlib.sha1(data).hexdigest()).write_bytes(data)


def section(b: bytes) -> bytes:
    return struct.pack(">H", len(b)) + b


def with_offsets(batches, base=0) -> bytes:
    """Concatenates batches, giving each its base offset as the broker would."""
    out, nxt = b"", base
    for b in batches:
        count = struct.unpack(">i", b[57:61])[0]
        out += struct.pack(">q", nxt) + b[8:]
        nxt += count
    return out


def main():
    for frame in kw.templates():
        write("request", frame[4:])  # without the size prefix, as the target takes it
    batches = [kw.record_batch([b"v%d" % i * (i + 1) for i in range(n)]) for n in (1, 3, 10)]
    batches.append(kw.record_batch([b"idem"], producer_id=7, producer_epoch=0, base_sequence=0))
    for b in batches:
        write("record_batch", b"\x00" + b)
        write("record_batch", b"\x01" + b)
    write("record_batch", b"\x00" + b"".join(batches))
    seg = with_offsets(batches)
    index = struct.pack(">II", 0, 0)
    times = struct.pack(">qI", 1_700_000_000_000, 0)
    seg1 = with_offsets(batches[:2], base=14)
    write("recovery", b"\x00" + section(seg))
    write("recovery", b"\x03" + section(seg) + section(index) + section(times) + section(seg1))
    write("recovery", b"\x02" + section(seg) + section(index) + section(times) + section(b"")
          + section(b"") + section(b"") + section(b"\x00\x01" + b"\x00" * 20))
    rpc_seeds()
    metadata_log_seeds()
    transaction_seeds()
    sasl_seeds()


def rpc_frame(kind: int, correlation: int, payload: bytes) -> bytes:
    """An inter-node RPC frame (src/rpc/frame.rs)."""
    head = struct.pack(">HBBQI", 0x534C, 2, kind, correlation, kw.crc32c(payload))
    return struct.pack(">I", len(head) + len(payload)) + head + payload


def rpc_seeds():
    write("rpc_frame", b"\x00" + rpc_frame(1, 0, b"\x00" * 24))
    write("rpc_frame", b"\x00" + rpc_frame(3, 9, bytes(range(64))))
    write("rpc_frame", b"\x07" + bytes(range(48)))
    # The cluster-secret handshake: HELLO (a nonce), CHALLENGE (nonce and proof).
    write("rpc_frame", b"\x00" + rpc_frame(0xF0, 0, bytes(range(32))))
    write("rpc_frame", b"\x00" + rpc_frame(0xF1, 0, bytes(range(64))))


def raft_log_record(kind: int, body: bytes) -> bytes:
    """A record of the controller's Raft log file (src/controller/raft_store.rs)."""
    data = bytes([kind]) + body
    return struct.pack(">II", len(data), kw.crc32c(data)) + data


def metadata_log_seeds():
    write("metadata_log", b"\x01" + bytes(range(1, 40)))
    write("metadata_log", b"\x00" + raft_log_record(1, b"\x08\x01") + raft_log_record(2, b"\x08\x02"))



def transaction_seeds():
    """`__transaction_state` key and value (src/txn/records.rs) and an aborted-transaction
    index of two entries (src/storage/txn_index.rs)."""
    write("transactions", struct.pack(">hh", 0, 5) + b"txn-1")
    topic = b"orders"
    value = struct.pack(">hqhib", 0, 4000, 2, 60000, 1) + struct.pack(">i", 1)
    value += struct.pack(">h", len(topic)) + topic + struct.pack(">iii", 2, 0, 3)
    value += struct.pack(">qq", 1_700_000_000_000, 1_700_000_000_000)
    write("transactions", value)
    write("transactions", struct.pack(">hqqqq", 0, 7, 10, 20, 21) + struct.pack(">hqqqq", 0, 8, 5, 30, 31))



def sasl_seeds():
    """A PLAIN message, and SCRAM client-first and client-final messages joined by a NUL as the
    target splits them (src/security/): RFC 7677's exchange and one with an authorization id."""
    write("sasl", b"\x00alice\x00alice-secret")
    nonce = b"rOprNGfwEbeRWgbNEkqOserver-nonce"
    write("sasl", b"n,,n=user,r=rOprNGfwEbeRWgbNEkqO\x00c=biws,r=" + nonce + b",p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ=")
    write("sasl", b"n,a=user,n=user,r=abc\x00c=bixhPXVzZXIs,r=abcserver-nonce,p=AAAA")


if __name__ == "__main__":
    main()
