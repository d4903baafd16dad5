"""One side of a differential scenario: a broker (Kafka 4.4 or Sluice) and the requests a
scenario sends it. A scenario is a function of a Side that returns what it observed (response
bodies, or the parts of them it is about); the suite runs it on both sides and compares the
two observations after `normalise`.

What `normalise` hides, because it must differ between two brokers and clients never act on it:
- cluster ids, broker hosts and ports, error messages (free text, and whether there is one;
  the codes are compared);
- ids a broker generates (topic ids, member ids, producer ids, fetch session ids): each is
  replaced by its order of first appearance in the scenario's observation, so that "the same
  id twice" and "two different ids" still compare;
- the order of lists of named things (ORDER_KEYS);
- the broker's clock where it is reported (LogAppendTime, the timestamps of latest offsets,
  of markers): replaced by "<clock>" unless -1;
- a batch's CRC where it covers a producer id or the broker's clock (the other fields of the
  batch, its records' bytes included, are compared).
"""
import struct
import time

import protocol
from kafka_wire import record_batch

# Ids a broker generates, by field, and the kind each is numbered among (a group's Leader is
# one of its member ids).
GENERATED_IDS = {"TopicId": "TopicId", "MemberId": "MemberId", "Leader": "MemberId", "ProducerId": "ProducerId",
                 "producer_id": "ProducerId", "SessionId": "SessionId"}
MASKED = {"ClusterId", "Host", "Port", "ErrorMessage", "BatchIndexErrorMessage", "ClientHost"}
CLOCKS = {"LogAppendTimeMs", "Timestamp", "first_timestamp", "max_timestamp"}
# Scenarios stamp their records before this (record_batch's 2023 default); a later timestamp
# in a clock field is the broker's.
BROKER_CLOCK_AFTER_MS = 1_750_000_000_000
DEADLINE_S = 30
# COORDINATOR_NOT_AVAILABLE, NOT_COORDINATOR, COORDINATOR_LOAD_IN_PROGRESS
NOT_READY = (15, 16, 14)


class Side:
    def __init__(self, name: str, port: int, node_id: int, nodes: dict[int, int] | None = None, stop_node=None):
        self.name = name
        self.port = port
        self.node_id = node_id
        self.connections = []
        self._conn = None
        # (user, password): connections log in with SASL/PLAIN first (the secured pair).
        self.credentials = None
        # Every node of the broker's cluster (node id: port), and `stop_node(node_id)`, a
        # controlled shutdown of one (the three-node pair; one node otherwise).
        self.nodes = nodes or {node_id: port}
        self.stop_node = stop_node
        self._at = {node_id: self}

    def at(self, node_id: int) -> "Side":
        """The same broker's node `node_id`, as a Side of its own (closed with this one)."""
        if node_id not in self._at:
            other = Side(self.name, self.nodes[node_id], node_id, self.nodes, self.stop_node)
            other.credentials = self.credentials
            self._at[node_id] = other
        return self._at[node_id]

    def connect(self, client_id="differential", credentials=None) -> protocol.Connection:
        c = protocol.Connection("127.0.0.1", self.port, client_id=client_id)
        self.connections.append(c)
        credentials = credentials or self.credentials
        if credentials is not None:
            answers = login(c, *credentials)
            assert answers[1]["ErrorCode"] == 0, f"{self.name}: login as {credentials[0]}: {answers}"
        return c

    @property
    def conn(self) -> protocol.Connection:
        if self._conn is None:
            self._conn = self.connect()
        return self._conn

    def close(self):
        for c in self.connections:
            c.close()
        for node_id, other in self._at.items():
            if node_id != self.node_id:
                other.close()

    def send(self, api: str, version: int, body: dict | None = None) -> dict:
        return self.conn.send(api, version, body)

    # --- helpers most scenarios need -------------------------------------------------------

    def create(self, topic: str, partitions: int = 1, configs: dict | None = None) -> dict:
        """CreateTopics v7 of one topic; its result (the caller checks the error code)."""
        body = {"Topics": [{"Name": topic, "NumPartitions": partitions, "ReplicationFactor": -1,
                            "Configs": [{"Name": k, "Value": str(v)} for k, v in (configs or {}).items()]}],
                "timeoutMs": 30_000}
        result = self.send("CreateTopics", 7, body)["Topics"][0]
        if result["ErrorCode"] == 0:
            self.wait_leaders(topic, partitions)
        return result

    def topic_id(self, topic: str) -> str:
        return self.send("Metadata", 12, {"Topics": [{"Name": topic}]})["Topics"][0]["TopicId"]

    def wait_leaders(self, topic: str, partitions: int):
        """Until every partition answers ListOffsets without an error (on some node: its
        leader): Kafka's broker learns a new topic from its controller, and becomes each
        partition's leader, a moment after CreateTopics answers (its Metadata may name the
        leader before the leader serves)."""
        deadline = time.monotonic() + DEADLINE_S
        body = {"ReplicaId": -1, "Topics": [{"Name": topic, "Partitions": [
            {"PartitionIndex": p, "Timestamp": -1} for p in range(partitions)]}]}
        while True:
            answers = [self.at(n).send("ListOffsets", 1, body)["Topics"][0]["Partitions"] for n in self.nodes]
            answer = [min(a, key=lambda p: p["ErrorCode"] != 0) for a in zip(*answers)]
            if all(p["ErrorCode"] == 0 for p in answer) and self._known_everywhere(topic, partitions):
                return
            assert time.monotonic() < deadline, f"{self.name}: {topic} has no leaders: {answer}"
            time.sleep(0.05)

    def eventually(self, read, settled):
        """`read()` again until `settled` holds of its value, for at most DEADLINE_S; the last
        value either way (an unsettled one is the difference to report). Kafka's broker applies
        what its controller committed a moment after the request that changed it is answered
        (a config, a deletion); Sluice answers once every shard has it: a read right after the
        change may differ by timing alone."""
        deadline = time.monotonic() + DEADLINE_S
        while True:
            value = read()
            if settled(value) or time.monotonic() > deadline:
                return value
            time.sleep(0.05)

    def _known_everywhere(self, topic: str, partitions: int) -> bool:
        """Whether every node's Metadata names the topic's partitions and their leaders (each
        node learns a topic on its own: a request about it to one that has not yet is answered
        UNKNOWN_TOPIC_OR_PARTITION)."""
        for n in self.nodes:
            t = self.at(n).send("Metadata", 12, {"Topics": [{"Name": topic}]})["Topics"][0]
            if t["ErrorCode"] or len(t["Partitions"]) != partitions or any(p["LeaderId"] < 0 for p in t["Partitions"]):
                return False
        return True

    def produce(self, topic: str, partition: int, records: bytes, acks: int = -1, version: int = 9,
                transactional_id: str | None = None) -> dict:
        """One partition's produce; its partition response."""
        body = {"TransactionalId": transactional_id, "Acks": acks, "TimeoutMs": 10_000,
                "TopicData": [{"Name": topic, "PartitionData": [{"Index": partition, "Records": records}]}]}
        if acks == 0:
            self.conn.write("Produce", version, body)
            return {}
        return self.send("Produce", version, body)["Responses"][0]["PartitionResponses"][0]

    def produce_values(self, topic: str, partition: int, values: list[bytes], **kw) -> dict:
        return self.produce(topic, partition, record_batch(values, **kw))

    def fetch(self, topic: str, partition: int, offset: int, version: int = 12, max_wait_ms: int = 0,
              isolation: int = 0, max_bytes: int = 1 << 20, leader_epoch: int = -1) -> dict:
        """One partition's fetch (outside any fetch session); its partition response."""
        body = {"ReplicaId": -1, "MaxWaitMs": max_wait_ms, "MinBytes": 1, "MaxBytes": max_bytes,
                "IsolationLevel": isolation, "SessionId": 0, "SessionEpoch": -1,
                "Topics": [{"Topic": topic, "Partitions": [{"Partition": partition, "FetchOffset": offset,
                                                            "CurrentLeaderEpoch": leader_epoch,
                                                            "PartitionMaxBytes": max_bytes}]}]}
        resp = self.send("Fetch", version, body)
        return resp["Responses"][0]["Partitions"][0]

    def read_all(self, topic: str, partition: int, isolation: int = 0) -> dict:
        """Fetches from offset 0 until the high watermark (or, read_committed, the last stable
        offset), as a consumer does: a fetch may return fewer batches than there are (Kafka
        returns only what lies below its high watermark's known file position, which trails
        a marker's append for a moment; and now and then Kafka answers a fetch at its log end,
        just after a marker, OFFSET_OUT_OF_RANGE once: an error is asked again, and only one
        that persists is the answer). The last answer, with every batch read."""
        records, offset = b"", 0
        deadline = time.monotonic() + DEADLINE_S
        while True:
            answer = self.eventually(lambda: self.fetch(topic, partition, offset, isolation=isolation),
                                     lambda a: a["ErrorCode"] == 0)
            records += answer["Records"] or b""
            if batches(records):
                last = batches(records)[-1]
                offset = last["base_offset"] + last["last_offset_delta"] + 1
            end = answer["LastStableOffset"] if isolation else answer["HighWatermark"]
            if answer["ErrorCode"] or offset >= end:
                return {**answer, "Records": records}
            assert time.monotonic() < deadline, f"{self.name}: {topic}-{partition} stops at {offset} < {end}"
            time.sleep(0.02)

    def coordinator(self, key: str, key_type: int = 0) -> dict:
        """FindCoordinator v4, retried while the coordinator is not available yet (both
        brokers create their internal topic at the first such request), then, for a group,
        until the coordinator has loaded it (Kafka answers NOT_COORDINATOR or
        COORDINATOR_LOAD_IN_PROGRESS a moment longer); the FindCoordinator answer."""
        deadline = time.monotonic() + DEADLINE_S
        while True:
            c = self.send("FindCoordinator", 4, {"KeyType": key_type, "CoordinatorKeys": [key]})["Coordinators"][0]
            loaded = c["ErrorCode"] == 0 and (key_type != 0 or self.at(c["NodeId"]).send(
                "DescribeGroups", 5, {"Groups": [key]})["Groups"][0]["ErrorCode"] not in NOT_READY)
            if loaded or c["ErrorCode"] not in (0, *NOT_READY):
                return c
            assert time.monotonic() < deadline, f"{self.name}: no coordinator for {key}: {c}"
            time.sleep(0.1)

    def init_producer(self, transactional_id: str | None = None, timeout_ms: int = 60_000, version: int = 4) -> dict:
        at = self
        if transactional_id is not None:
            at = self.at(self.coordinator(transactional_id, key_type=1)["NodeId"])
        deadline = time.monotonic() + DEADLINE_S
        while True:
            r = at.send("InitProducerId", version, {"TransactionalId": transactional_id,
                                                      "TransactionTimeoutMs": timeout_ms,
                                                      "ProducerId": -1, "ProducerEpoch": -1})
            if r["ErrorCode"] not in (*NOT_READY, 51):  # or concurrent transactions
                return r
            assert time.monotonic() < deadline, f"{self.name}: InitProducerId: {r}"
            time.sleep(0.1)

    def join(self, group: str, member_id: str = "", version: int = 9, protocol_type: str = "consumer",
             session_timeout_ms: int = 10_000, instance_id: str | None = None, conn=None,
             metadata: bytes = b"\x00\x01") -> dict:
        body = {"GroupId": group, "SessionTimeoutMs": session_timeout_ms, "RebalanceTimeoutMs": 10_000,
                "MemberId": member_id, "GroupInstanceId": instance_id, "ProtocolType": protocol_type,
                "Protocols": [{"Name": "range", "Metadata": metadata}], "Reason": None}
        return (conn or self.conn).send("JoinGroup", version, body)

    def join_member(self, group: str, conn=None, **kw) -> dict:
        """A v9 join with KIP-394's second round: MEMBER_ID_REQUIRED, then the id it named."""
        first = self.join(group, conn=conn, **kw)
        if first["ErrorCode"] == 79:
            return self.join(group, member_id=first["MemberId"], conn=conn, **kw)
        return first

    def sync(self, group: str, generation: int, member_id: str, assignments=(), version: int = 5, conn=None) -> dict:
        body = {"GroupId": group, "GenerationId": generation, "MemberId": member_id, "GroupInstanceId": None,
                "ProtocolType": "consumer", "ProtocolName": "range",
                "Assignments": [{"MemberId": m, "Assignment": a} for m, a in assignments]}
        return (conn or self.conn).send("SyncGroup", version, body)

    def stable_member(self, group: str, subscribed: tuple[str, ...] | None = None) -> tuple[str, int]:
        """A group with one member through join and sync: (member id, generation). With
        `subscribed`, the member's metadata is a consumer subscription to those topics."""
        home = self.at(self.coordinator(group)["NodeId"])
        kw = {} if subscribed is None else {"metadata": subscription(subscribed)}
        j = home.join_member(group, **kw)
        assert j["ErrorCode"] == 0, f"{self.name}: join {j}"
        s = home.sync(group, j["GenerationId"], j["MemberId"], [(j["MemberId"], b"")])
        assert s["ErrorCode"] == 0, f"{self.name}: sync {s}"
        return j["MemberId"], j["GenerationId"]


def subscription(topics) -> bytes:
    """A ConsumerProtocolSubscription v0: the topics, no user data."""
    out = struct.pack(">hi", 0, len(topics))
    for t in topics:
        out += struct.pack(">h", len(t)) + t.encode()
    return out + struct.pack(">i", -1)


def login(c: protocol.Connection, user: str, password: str, mechanism: str = "PLAIN") -> tuple[dict, dict]:
    """SaslHandshake v1 and SaslAuthenticate v2 (PLAIN): both answers."""
    handshake = c.send("SaslHandshake", 1, {"Mechanism": mechanism})
    if handshake["ErrorCode"]:
        return handshake, {}
    token = b"\x00" + user.encode() + b"\x00" + password.encode()
    return handshake, c.send("SaslAuthenticate", 2, {"AuthBytes": token})


def batches(records: bytes | None) -> list[dict]:
    """A fetch's record bytes as its batches' headers and records (offsets, keys, values,
    headers, timestamps), to compare without the batch CRC's own bytes hiding which field differs."""
    out = []
    data = records or b""
    pos = 0
    while pos + 12 <= len(data):
        base_offset, length = struct.unpack_from(">qi", data, pos)
        end = pos + 12 + length
        if end > len(data):
            out.append({"partial_batch_bytes": len(data) - pos})
            break
        (epoch, magic, crc, attrs, last_delta, first_ts, max_ts, pid, pepoch, base_seq,
         count) = struct.unpack_from(">ibIhiqqqhii", data, pos + 12)
        if pid != -1 or attrs & 0x20:
            crc = "<covers a producer id or the broker's clock>"
        out.append({"base_offset": base_offset, "length": length, "leader_epoch": epoch, "magic": magic,
                    "crc": crc, "attributes": attrs, "last_offset_delta": last_delta, "first_timestamp": first_ts,
                    "max_timestamp": max_ts, "producer_id": pid, "producer_epoch": pepoch,
                    "base_sequence": base_seq, "count": count, "body": data[pos + 61:end].hex()})
        pos = end
    return out


# Lists of named things (topics, configs, groups, APIs) compare as sets: brokers answer them in
# their own order (Kafka from hash maps), and clients look them up by name.
ORDER_KEYS = ("Name", "Topic", "GroupId", "ApiKey", "ResourceName", "TransactionalId")


def _order(item: dict):
    return tuple(str(item.get(k, "")) for k in ORDER_KEYS)


def normalise(observation):
    ids: dict = {}

    def walk(value, key=None):
        if isinstance(value, dict):
            return {k: walk(v, k) for k, v in value.items()}
        if isinstance(value, (list, tuple)):
            items = [walk(v, key) for v in value]
            return sorted(items, key=_order) if all(isinstance(i, dict) for i in items) else items
        if key in MASKED:
            return f"<{key}>"
        if key in GENERATED_IDS and value not in (None, "", -1, "AAAAAAAAAAAAAAAAAAAAAA"):
            kind = GENERATED_IDS[key]
            return f"<{kind} {ids.setdefault((kind, value), len([i for i in ids if i[0] == kind]) + 1)}>"
        if key in CLOCKS and isinstance(value, int) and value > BROKER_CLOCK_AFTER_MS:
            return "<clock>"
        if key in ("Records", "RecordSet") and isinstance(value, bytes):
            return walk(batches(value))
        if isinstance(value, bytes):
            return value.hex()
        return value

    return walk(observation)
