"""Every Kafka request and response, at every version Kafka 4.4 defines, encoded and decoded from
Kafka's own message schemas (the `common/message/*.json` files inside the installed
kafka-clients jar; scripts/kafka-install). Requests are built from plain dicts keyed by the
schemas' field names (a field left out takes its schema default); responses decode to dicts
with every field of that version, tagged fields included. Used by the differential suite
(tests/differential) to send the same request to Kafka and to Sluice and compare all of each
answer, and by tests/kafka/peer.py to see that a node is up.

    with Connection("127.0.0.1", 9092) as c:
        meta = c.send("Metadata", 12, {"Topics": None})
"""
import json
import re
import socket
import struct
import zipfile
from functools import lru_cache
from pathlib import Path

LIBS = Path(__file__).resolve().parent / "libs"
MAX_FRAME_BYTES = 64 << 20  # a response larger than this is a broken peer, not an answer
DEFAULT_TIMEOUT_S = 30


def _versions(spec: str | None) -> tuple[int, int] | None:
    """"3+", "0-7", "2" or "none" as an inclusive range (None: no version)."""
    if spec is None or spec == "none":
        return None
    if spec.endswith("+"):
        return int(spec[:-1]), 1 << 15
    low, _, high = spec.partition("-")
    return int(low), int(high or low)


def _in(spec, version: int) -> bool:
    r = _versions(spec) if isinstance(spec, str) or spec is None else spec
    return r is not None and r[0] <= version <= r[1]


@lru_cache(maxsize=1)
def schemas() -> dict[str, dict]:
    """Every message schema by name ("MetadataRequest"), from the kafka-clients jar."""
    jars = sorted(LIBS.glob("kafka-clients-*.jar"))
    if not jars:
        raise FileNotFoundError(f"no kafka-clients jar in {LIBS}: run scripts/kafka-install")
    out = {}
    with zipfile.ZipFile(jars[-1]) as jar:
        for name in jar.namelist():
            if name.startswith("common/message/") and name.endswith(".json"):
                text = re.sub(r"^\s*//.*$", "", jar.read(name).decode(), flags=re.M)
                schema = json.loads(text)
                out[schema["name"]] = schema
    return out


@lru_cache(maxsize=None)
def api(name: str) -> tuple[int, dict, dict]:
    """(api key, request schema, response schema) of an API by name ("Fetch")."""
    req, resp = schemas()[name + "Request"], schemas()[name + "Response"]
    return req["apiKey"], req, resp


class _Struct:
    """A schema's field list, with the common structs its types may name."""

    def __init__(self, fields, commons):
        self.fields = fields
        self.commons = commons

    def child(self, field) -> "_Struct":
        if "fields" in field:
            return _Struct(field["fields"], self.commons)
        kind = field["type"].removeprefix("[]")
        return _Struct(self.commons[kind], self.commons)


def _root(schema) -> _Struct:
    commons = {c["name"]: c["fields"] for c in schema.get("commonStructs", [])}
    return _Struct(schema["fields"], commons)


PRIMITIVES = {"int8": ">b", "int16": ">h", "int32": ">i", "int64": ">q", "uint16": ">H", "uint32": ">I",
              "float64": ">d"}


def _default(field, version):
    kind, d = field["type"], field.get("default")
    if kind.startswith("[]"):
        return None if d == "null" else []
    if d == "null":
        return None
    if kind in PRIMITIVES:
        if d is None:
            return 0
        return float(d) if kind == "float64" else int(d, 0) if isinstance(d, str) else int(d)
    if kind == "bool":
        return d == "true"
    if kind == "string":
        return d or ""
    if kind == "uuid":
        return "AAAAAAAAAAAAAAAAAAAAAA"
    if kind in ("bytes", "records"):
        return b""
    return {}  # a struct: its own fields' defaults


def uuid_text(raw: bytes) -> str:
    """A topic id as Kafka prints it (URL-safe base64, no padding)."""
    import base64
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def uuid_bytes(text: str) -> bytes:
    import base64
    return base64.urlsafe_b64decode(text + "==")


# --- encoding ---------------------------------------------------------------------------

def _uvarint(v: int) -> bytes:
    out = bytearray()
    while True:
        b = v & 0x7F
        v >>= 7
        if v:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


class _Writer:
    def __init__(self, version: int, flexible: bool):
        self.version = version
        self.flexible = flexible
        self.out = bytearray()

    def struct(self, s: _Struct, value: dict):
        # A misspelt key would silently send the field's default (a CreateTopics "ValidateOnly"
        # for Kafka's "validateOnly" once sent a real create): refuse it.
        unknown = set(value or {}) - {f["name"] for f in s.fields}
        if unknown:
            raise KeyError(f"no such field {sorted(unknown)}; fields are {[f['name'] for f in s.fields]}")
        tagged = []
        for f in s.fields:
            if not _in(f.get("versions"), self.version):
                continue
            v = value.get(f["name"], _default(f, self.version)) if value is not None else _default(f, self.version)
            if self.flexible and _in(f.get("taggedVersions"), self.version):
                if v != _default(f, self.version):
                    w = _Writer(self.version, self.flexible)
                    w.field(s, f, v)
                    tagged.append((f["tag"], bytes(w.out)))
                continue
            self.field(s, f, v)
        if self.flexible:
            self.out += _uvarint(len(tagged))
            for tag, data in sorted(tagged):
                self.out += _uvarint(tag) + _uvarint(len(data)) + data

    def field(self, s: _Struct, f, v):
        kind = f["type"]
        flexible = self.flexible and f.get("flexibleVersions") != "none"
        if kind.startswith("[]"):
            inner = kind[2:]
            if v is None:
                self._len(None, flexible)
                return
            self._len(len(v), flexible)
            for item in v:
                if inner in PRIMITIVES or inner in ("string", "bool", "uuid", "bytes"):
                    self.scalar(inner, item, flexible)
                else:
                    self.struct(s.child(f), item)
            return
        if kind in PRIMITIVES or kind in ("string", "bool", "uuid", "bytes", "records"):
            self.scalar(kind, v, flexible)
        else:
            self.struct(s.child(f), v)

    def _len(self, n, flexible):
        if flexible:
            self.out += _uvarint(0 if n is None else n + 1)
        else:
            self.out += struct.pack(">i", -1 if n is None else n)

    def scalar(self, kind, v, flexible):
        if kind in PRIMITIVES:
            self.out += struct.pack(PRIMITIVES[kind], v)
        elif kind == "bool":
            self.out += b"\x01" if v else b"\x00"
        elif kind == "uuid":
            self.out += uuid_bytes(v)
        elif kind == "string":
            raw = None if v is None else v.encode()
            if flexible:
                self.out += _uvarint(0 if raw is None else len(raw) + 1)
            else:
                self.out += struct.pack(">h", -1 if raw is None else len(raw))
            self.out += raw or b""
        else:  # bytes, records
            self._len(None if v is None else len(v), flexible)
            self.out += v or b""


def _flexible(schema, version: int) -> bool:
    return _in(schema.get("flexibleVersions"), version)


def encode_request(name: str, version: int, correlation_id: int, body: dict, client_id: str | None = "differential") -> bytes:
    key, req, _ = api(name)
    lo, hi = _versions(req["validVersions"])
    assert lo <= version <= hi, f"{name} v{version} is not defined by Kafka 4.4 ({req['validVersions']})"
    flexible = _flexible(req, version)
    w = _Writer(version, flexible)
    w.out += struct.pack(">hhi", key, version, correlation_id)
    w.out += struct.pack(">h", -1) if client_id is None else struct.pack(">h", len(client_id.encode())) + client_id.encode()
    if flexible:
        w.out += _uvarint(0)  # the header's tagged fields
    w.struct(_root(req), body)
    return struct.pack(">i", len(w.out)) + bytes(w.out)


# --- decoding ---------------------------------------------------------------------------

class _Reader:
    def __init__(self, data: bytes, version: int, flexible: bool):
        self.data = data
        self.pos = 0
        self.version = version
        self.flexible = flexible

    def take(self, n: int) -> bytes:
        if n < 0 or self.pos + n > len(self.data):
            raise ValueError(f"truncated: need {n} bytes at {self.pos} of {len(self.data)}")
        out = self.data[self.pos:self.pos + n]
        self.pos += n
        return out

    def uvarint(self) -> int:
        shift = value = 0
        while True:
            b = self.take(1)[0]
            value |= (b & 0x7F) << shift
            if not b & 0x80:
                return value
            shift += 7
            if shift > 35:
                raise ValueError("varint too long")

    def struct(self, s: _Struct) -> dict:
        out = {}
        by_tag = {}
        for f in s.fields:
            if not _in(f.get("versions"), self.version):
                continue
            if self.flexible and _in(f.get("taggedVersions"), self.version):
                out[f["name"]] = _default(f, self.version)
                by_tag[f["tag"]] = f
                continue
            out[f["name"]] = self.field(s, f)
        if self.flexible:
            for _ in range(self.uvarint()):
                tag, size = self.uvarint(), self.uvarint()
                raw = self.take(size)
                if tag in by_tag:
                    sub = _Reader(raw, self.version, self.flexible)
                    out[by_tag[tag]["name"]] = sub.field(s, by_tag[tag])
                else:
                    out.setdefault("_unknown_tags", {})[tag] = raw.hex()
        return out

    def field(self, s: _Struct, f):
        kind = f["type"]
        flexible = self.flexible and f.get("flexibleVersions") != "none"
        if kind.startswith("[]"):
            inner = kind[2:]
            n = self._len(flexible)
            if n is None:
                return None
            if inner in PRIMITIVES or inner in ("string", "bool", "uuid", "bytes"):
                return [self.scalar(inner, flexible) for _ in range(n)]
            child = s.child(f)
            return [self.struct(child) for _ in range(n)]
        if kind in PRIMITIVES or kind in ("string", "bool", "uuid", "bytes", "records"):
            return self.scalar(kind, flexible)
        return self.struct(s.child(f))

    def _len(self, flexible) -> int | None:
        if flexible:
            n = self.uvarint() - 1
        else:
            n = struct.unpack(">i", self.take(4))[0]
        return None if n < 0 else n

    def scalar(self, kind, flexible):
        if kind in PRIMITIVES:
            fmt = PRIMITIVES[kind]
            return struct.unpack(fmt, self.take(struct.calcsize(fmt)))[0]
        if kind == "bool":
            return self.take(1) != b"\x00"
        if kind == "uuid":
            return uuid_text(self.take(16))
        if kind == "string":
            if flexible:
                n = self.uvarint() - 1
            else:
                n = struct.unpack(">h", self.take(2))[0]
            return None if n < 0 else self.take(n).decode()
        n = self._len(flexible)
        return None if n is None else self.take(n)


def decode_response(name: str, version: int, frame: bytes) -> tuple[int, dict]:
    """(correlation id, body) of a response frame without its length prefix."""
    _, _, resp = api(name)
    flexible = _flexible(resp, version)
    r = _Reader(frame, version, flexible)
    correlation_id = struct.unpack(">i", r.take(4))[0]
    if flexible and name != "ApiVersions":  # ApiVersions answers with header v0 always (KIP-511)
        for _ in range(r.uvarint()):
            r.uvarint()
            r.take(r.uvarint())
    body = r.struct(_root(resp))
    if r.pos != len(frame):
        raise ValueError(f"{name} v{version}: {len(frame) - r.pos} bytes left over after the response")
    return correlation_id, body


# --- a connection -----------------------------------------------------------------------

class Closed(ConnectionError):
    """The broker closed the connection instead of answering."""


class Connection:
    def __init__(self, host: str, port: int, timeout_s: float = DEFAULT_TIMEOUT_S, client_id="differential"):
        self.sock = socket.create_connection((host, port), timeout=timeout_s)
        self.correlation_id = 0
        self.client_id = client_id

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def close(self):
        self.sock.close()

    def write(self, name: str, version: int, body: dict) -> int:
        self.correlation_id += 1
        self.sock.sendall(encode_request(name, version, self.correlation_id, body, self.client_id))
        return self.correlation_id

    def read_frame(self) -> bytes:
        size = struct.unpack(">i", self._exactly(4))[0]
        if not 0 <= size <= MAX_FRAME_BYTES:
            raise ValueError(f"response frame of {size} bytes")
        return self._exactly(size)

    def read(self, name: str, version: int, correlation_id: int) -> dict:
        got, body = decode_response(name, version, self.read_frame())
        assert got == correlation_id, f"correlation id {got}, expected {correlation_id}"
        return body

    def send(self, name: str, version: int, body: dict | None = None) -> dict:
        return self.read(name, version, self.write(name, version, body or {}))

    def send_raw(self, frame: bytes) -> bytes:
        self.sock.sendall(frame)
        return self.read_frame()

    def _exactly(self, n: int) -> bytes:
        out = bytearray()
        while len(out) < n:
            chunk = self.sock.recv(n - len(out))
            if not chunk:
                raise Closed(f"closed after {len(out)} of {n} bytes")
            out += chunk
        return bytes(out)

