"""Security in a three-node cluster (issue 19): every node has a PLAINTEXT listener, an
INTERNAL SASL_SSL listener the nodes replicate and call each other on (`inter_broker_listener`),
and an EXTERNAL SASL_SSL listener for clients; authorization is on and the nodes share a
`[cluster] secret`. Followers log in to their leaders as the node user (SCRAM derived from the
secret), transaction markers cross nodes the same way, ACLs made on one node hold on all, and
the RPC port admits only connections that prove the secret."""
import json
import os
import signal
import socket
import ssl
import struct
import threading
import time
import uuid

import ck
import kafka_wire as kw
import pytest
from cluster import FAST, Cluster
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer
from confluent_kafka.admin import (AclBinding, AclOperation, AclPermissionType, AdminClient, NewTopic,
                                   ResourcePatternType, ResourceType, ScramCredentialInfo, ScramMechanism,
                                   UserScramCredentialUpsertion)
from broker import free_port
from metrics import total
from waiting import wait_until

SECRET = "c2x1aWNlIHRlc3Qgc2VjcmV0IDEyMzQ1Njc4"
ADMIN = ("admin", "admin-secret")
BOB = ("bob", "bob-secret")
TOPIC = "secure"
PARTITIONS = 3


def node_config(pki, ports, metrics, secret=SECRET):
    """Node n's config: its INTERNAL and EXTERNAL ports are ports[n], metrics on metrics[n]."""
    def of(n):
        internal, external = ports[n]
        listeners = "".join(
            f'[[listeners]]\nname = "{name}"\naddress = "127.0.0.1:{port}"\nsecurity_protocol = "{proto}"\n'
            for name, port, proto in [("PLAINTEXT", "@PORT@", "PLAINTEXT"), ("INTERNAL", internal, "SASL_SSL"),
                                      ("EXTERNAL", external, "SASL_SSL")])
        return (
            f'metrics_listen = "{metrics[n]}"\ninter_broker_listener = "INTERNAL"\n{listeners}'
            f'[tls]\ncert_file = "{pki}/server.pem"\nkey_file = "{pki}/server-key.pem"\n'
            f'ca_file = "{pki}/ca.pem"\n'
            f'[sasl]\nbootstrap_users = [{{ name = "{ADMIN[0]}", password = "{ADMIN[1]}" }}, '
            f'{{ name = "{BOB[0]}", password = "{BOB[1]}" }}]\n'
            f'[authorization]\nenabled = true\nsuper_users = ["User:{ADMIN[0]}"]\n'
            f'{FAST}replica_lag_time_max_ms = 3000\nsecret = "{secret}"\n'
            "[transactions]\nstate_partitions = 2\ncheck_interval_ms = 200\n")
    return of


class Secured:
    def __init__(self, root, pki, nodes=3, secret=SECRET):
        self.pki = pki
        self.ports = {n: (free_port(), free_port()) for n in range(1, nodes + 1)}
        self.metrics = {n: f"127.0.0.1:{free_port()}" for n in range(1, nodes + 1)}
        self.cluster = Cluster(root, nodes, 0, node_config(pki, self.ports, self.metrics, secret))

    def conf(self, *nodes, user=ADMIN, **extra):
        servers = ",".join(f"127.0.0.1:{self.ports[n][1]}" for n in nodes or self.ports)
        return {"bootstrap.servers": servers, "security.protocol": "SASL_SSL",
                "ssl.ca.location": str(self.pki / "ca.pem"), "sasl.mechanism": "SCRAM-SHA-512",
                "sasl.username": user[0], "sasl.password": user[1], **extra}

    def admin(self, *nodes):
        return AdminClient(self.conf(*nodes))

    def partitions(self, admin):
        return admin.list_topics(TOPIC, timeout=10).topics[TOPIC].partitions


@pytest.fixture
def secured(tmp_path, pki):
    s = Secured(tmp_path / "cluster", pki)
    try:
        s.cluster.start()
        s.cluster.wait_for_brokers({1, 2, 3})
        yield s
    finally:
        for n in s.cluster.nodes.values():
            if n.proc is not None and n.alive():
                n.proc.send_signal(signal.SIGCONT)
        s.cluster.stop()


def produce(conf, values, **extra):
    """Produces `values` with acks=all; the delivery errors."""
    errors = []
    p = Producer({**conf, "acks": "all", "message.timeout.ms": 30000, **extra})
    for i, v in enumerate(values):
        p.produce(TOPIC, value=v, partition=i % PARTITIONS,
                  on_delivery=lambda err, msg: errors.append(err) if err else None)
    assert p.flush(45) == 0
    return errors


def consume(conf, count, timeout_s=45, **extra):
    c = Consumer({**conf, "group.id": f"g-{uuid.uuid4().hex[:8]}", "auto.offset.reset": "earliest",
                  "enable.auto.commit": False, **extra})
    c.subscribe([TOPIC])
    got, deadline = [], time.monotonic() + timeout_s
    try:
        while len(got) < count and time.monotonic() < deadline:
            m = c.poll(0.5)
            if m is not None and not m.error():
                got.append(m.value())
    finally:
        c.close()
    return got


def fully_in_sync(s, admin):
    try:
        return all(len(p.isrs) == 3 for p in s.partitions(admin).values())
    except Exception:
        return False


def values(n, start=0):
    return [b"%06d-" % i + bytes([65 + i % 26]) * (i % 900) for i in range(start, start + n)]


def test_a_secured_cluster_replicates_authorizes_and_survives_a_leader(secured):
    s = secured
    admin = s.admin(1)
    # Clients of the EXTERNAL listener are told every node's EXTERNAL port.
    brokers = admin.list_topics(timeout=10).brokers
    assert {b.port for b in brokers.values()} == {p[1] for p in s.ports.values()}
    for f in admin.create_topics([NewTopic(TOPIC, PARTITIONS, 3)]).values():
        f.result(20)
    # Followers fetch over SASL_SSL as the node user; they join every in-sync set.
    wait_until(lambda: fully_in_sync(s, admin), 30, "every replica in sync")
    first = values(300)
    assert produce(s.conf(), first) == []
    assert sorted(consume(s.conf(), 300)) == sorted(first)

    # bob has no ACL: refused. A grant made through node 2 holds on node 3.
    assert any(e.code() == 29 for e in produce(s.conf(3, user=BOB), values(1)))  # TOPIC_AUTHORIZATION_FAILED
    binding = AclBinding(ResourceType.TOPIC, TOPIC, ResourcePatternType.LITERAL, f"User:{BOB[0]}", "*",
                         AclOperation.WRITE, AclPermissionType.ALLOW)
    admin2 = s.admin(2)  # a client must outlive its futures
    for f in admin2.create_acls([binding]).values():
        f.result(15)
    wait_until(lambda: produce(s.conf(3, user=BOB), values(1, 5000)) == [], 10, "bob's grant on node 3")

    # A consumer posing as a follower is refused: CLUSTER_ACTION, not READ, serves a replica's fetch.
    binding = AclBinding(ResourceType.TOPIC, TOPIC, ResourcePatternType.LITERAL, "User:ANONYMOUS", "*",
                         AclOperation.READ, AclPermissionType.ALLOW)
    for f in admin.create_acls([binding]).values():
        f.result(15)
    p0 = s.partitions(admin)[0]
    leader = s.cluster.nodes[p0.leader]
    other = next(r for r in p0.replicas if r != p0.leader)
    wait_until(lambda: fetch_error(leader.port, -1) == 0, 10, "ANONYMOUS's READ grant")
    assert fetch_error(leader.port, other) == 29

    # Transaction markers cross nodes over the INTERNAL listener.
    txn = Producer({**s.conf(), "transactional.id": "secure-txn", "acks": "all"})
    txn.init_transactions(30)
    txn.begin_transaction()
    for i in range(PARTITIONS):
        txn.produce(TOPIC, value=b"txn-%d" % i, partition=i)
    txn.commit_transaction(30)
    committed = consume(s.conf(), 300 + 1 + PARTITIONS, **{"isolation.level": "read_committed"})
    assert {b"txn-%d" % i for i in range(PARTITIONS)} <= set(committed)

    # SIGKILL a leader; acknowledged records survive, and the node catches up when back.
    leader.kill()
    rest = [n for n in (1, 2, 3) if n != p0.leader]
    second = values(200, 300)
    assert produce(s.conf(*rest), second) == []
    got = consume(s.conf(*rest), 300 + 1 + PARTITIONS + 200)
    assert set(first + second) <= set(got)
    leader.start()
    survivors = s.admin(*rest)
    wait_until(lambda: fully_in_sync(s, survivors), 45, "the restarted node back in sync")
    # The operator's command line reaches a secured cluster with -X settings, and finds it
    # healthy once the restarted node has caught up on the internal topics too.
    def healthy():
        p = ck.sluice_cli(s.conf(), "cluster", "health", "--format", "json")
        assert p.returncode in (0, 3), p.stderr  # 3: it asked, and the cluster is not healthy yet
        return json.loads(p.stdout)["healthy"] is True

    wait_until(healthy, 45, "sluice cluster health to say healthy")
    # Topic commands too (librdkafka's C admin calls, for the broker's messages), as bob: refused
    # with the authorizer's code, then made as the admin.
    refused = ck.sluice_cli(s.conf(user=BOB), "topic", "create", "cli-made", "-p", "2", "-r", "3")
    assert refused.returncode != 0 and "TopicAuthorizationFailed" in refused.stderr, refused.stderr
    made = ck.sluice_cli(s.conf(), "topic", "create", "cli-made", "-p", "2", "-r", "3")
    assert made.returncode == 0, made.stderr
    assert len(survivors.list_topics(timeout=10).topics["cli-made"].partitions) == 2
    # ACLs through `sluice acl` on one node hold on the others: bob reads once granted READ
    # on the topic (and on groups named g-*) through node 3, and no longer once removed.
    bob_reads = lambda: len(consume(s.conf(1, user=BOB), 10, timeout_s=8)) >= 10  # noqa: E731
    assert not bob_reads()
    for grant in (["--topic", TOPIC], ["--group", "g-", "--resource-pattern-type", "prefixed"]):
        added = ck.sluice_cli(s.conf(3), "acl", "add", "--allow-principal", f"User:{BOB[0]}",
                              "--operation", "Read", *grant)
        assert added.returncode == 0, added.stderr
    wait_until(bob_reads, 30, "bob reading after sluice acl add")
    removed = ck.sluice_cli(s.conf(2), "acl", "remove", "--topic", TOPIC, "--allow-principal", f"User:{BOB[0]}",
                            "--operation", "Read")
    assert removed.returncode == 0 and "removed 1 ACLs" in removed.stdout, removed.stdout + removed.stderr
    wait_until(lambda: not bob_reads(), 30, "bob refused after sluice acl remove")
    for n, addr in s.metrics.items():
        assert total(addr, "sluice_authentication_failures_total") == 0, f"node {n}"
        assert "logging in as __sluice_node" not in s.cluster.nodes[n].log()
    # (Last: its refused logins count as authentication failures.) A SCRAM user set with
    # `sluice user` through node 2 logs in on every node; deleted through node 3, on none.
    dave = ("dave", "dave-pw")
    made = ck.sluice_cli(s.conf(2), "user", "set", dave[0], "--password", dave[1])
    assert made.returncode == 0, made.stderr
    wait_until(lambda: all(logs_in(s.conf(n, user=dave)) for n in (1, 2, 3)), 30, "dave logging in everywhere")
    gone = ck.sluice_cli(s.conf(3), "user", "delete", dave[0])
    assert gone.returncode == 0, gone.stderr
    wait_until(lambda: not any(logs_in(s.conf(n, user=dave)) for n in (1, 2, 3)), 30, "dave refused everywhere")


def logs_in(conf) -> bool:
    """Whether a client logs in with `conf` (SASL) and is answered Metadata."""
    try:
        AdminClient(conf).list_topics(timeout=5)
        return True
    except KafkaException:
        return False


def fetch_error(port, replica_id):
    """A Fetch v4 of partition 0 from offset 0 on `port` (PLAINTEXT) as `replica_id`: its error."""
    body = struct.pack(">i", replica_id) + kw.fetch_v4(TOPIC, 0, 0, 0)[4:]
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(kw.request(1, 4, 7, body))
        return kw.fetch_v4_partition(kw.read_response(sock))[0]


def rpc_frame(kind, payload):
    head = struct.pack(">HBBQI", 0x534C, 2, kind, 0, kw.crc32c(payload))
    return struct.pack(">I", len(head) + len(payload)) + head + payload


def rpc_tls(port: int, pki, cert: str | None = "server") -> ssl.SSLSocket:
    """A TLS connection to a node's RPC port as a node dials it: the cluster's CA, and the
    certificate `cert` (None: none)."""
    ctx = ssl.create_default_context(cafile=str(pki / "ca.pem"))
    if cert is not None:
        ctx.load_cert_chain(pki / f"{cert}.pem", pki / f"{cert}-key.pem")
    raw = socket.create_connection(("127.0.0.1", port), timeout=10)
    return ctx.wrap_socket(raw, server_hostname="127.0.0.1")


def read_to_close(sock, timeout_s=15) -> bytes:
    sock.settimeout(timeout_s)
    got = b""
    try:
        while chunk := sock.recv(4096):
            got += chunk
    except ConnectionResetError:
        pass
    return got


def test_the_rpc_port_and_the_node_user_need_the_secret(tmp_path, pki):
    """One node, then a second whose secret differs, then a third whose certificate the
    cluster's CA did not sign: neither joins. The RPC port speaks TLS only (the node has a CA):
    plaintext and certificates of another CA are refused at TLS; over TLS, raw RPC connections
    that skip the handshake or prove a wrong secret are closed; a client cannot log in as the
    node user without the secret."""
    s = Secured(tmp_path / "cluster", pki, nodes=1)
    wrong = Secured(tmp_path / "wrong", pki, nodes=1, secret="x" * 32).cluster
    mallory = Secured(tmp_path / "mallory", pki, nodes=1).cluster
    try:
        s.cluster.start()
        s.cluster.wait_for_brokers({1})
        node = s.cluster.nodes[1]
        # A first frame that claims 200 MiB is refused from its header, before any payload is
        # read or memory given to it (the first refusal, so the one logged).
        # (Over TLS, with a node's certificate: the port speaks TLS only, see below.)
        with rpc_tls(node.rpc_port, pki) as sock:
            sock.sendall(struct.pack(">IHBBQI", 200 << 20, 0x534C, 2, 0xF0, 0, 0))
            assert kw.closed_by_peer(sock, timeout_s=15)
        wait_until(lambda: "a frame of 209715184 bytes where at most 32 fit" in node.log(), 5,
                   "the refusal logged")
        with rpc_tls(node.rpc_port, pki) as sock:
            sock.sendall(rpc_frame(1, b"raft?"))
            assert kw.closed_by_peer(sock, timeout_s=15)
        with rpc_tls(node.rpc_port, pki) as sock:
            sock.sendall(rpc_frame(0xF0, b"\x00" * 32))
            challenge = kw.recv_exact(sock, 4 + 16 + 64)
            assert challenge[7] == 0xF1  # size, magic, version, then the kind
            sock.sendall(rpc_frame(0xF2, b"\x00" * 32))
            assert kw.closed_by_peer(sock, timeout_s=15)
        # Plaintext, or TLS without a certificate the cluster's CA signed: refused at TLS.
        with socket.create_connection(("127.0.0.1", node.rpc_port), timeout=10) as sock:
            sock.sendall(rpc_frame(0xF0, b"\x00" * 32))
            answer = read_to_close(sock)
            assert answer[:1] in (b"", b"\x15"), answer[:16]  # nothing, or a TLS alert
        for cert in (None, "mallory"):
            with rpc_tls(node.rpc_port, pki, cert) as sock:
                sock.sendall(rpc_frame(0xF0, b"\x00" * 32))
                assert kw.closed_by_peer(sock, timeout_s=15)
        # The node user, guessed: refused like any wrong password.
        p = Producer(s.conf(user=("__sluice_node", "guess")))
        with pytest.raises(Exception):
            p.list_topics(timeout=5)
        del p
        # Nor can anyone give the node user a stored credential.
        admin = s.admin(1)
        upsert = UserScramCredentialUpsertion("__sluice_node", ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 4096),
                                              b"guess")
        with pytest.raises(KafkaException) as refused:
            admin.alter_user_scram_credentials([upsert])["__sluice_node"].result(15)
        assert refused.value.args[0].code() == KafkaError.UNACCEPTABLE_CREDENTIAL
        assert total(s.metrics[1], "sluice_authentication_failures_total") >= 1
        # A broker with another secret: its heartbeats to node 1 (the controller) are refused at
        # the handshake, so it never registers.
        stranger = wrong.nodes[1]
        stranger.node_id, stranger.voters = 2, s.cluster.voters
        stranger.set_args()
        stranger.start()
        wait_until(lambda: "does not hold this cluster's secret: check that both have the same"
                   in stranger.log(), 20, "the stranger to be refused")
        assert set(s.cluster.metadata(1).brokers) == {1}
        # A node with the secret but a certificate the cluster's CA did not sign: refused at TLS
        # (its RPC and its inter-broker logins), so it never registers either.
        impostor = mallory.nodes[1]
        impostor.node_id, impostor.voters = 3, s.cluster.voters
        impostor.config = impostor.config.replace("/server.pem", "/mallory.pem").replace(
            "/server-key.pem", "/mallory-key.pem")
        impostor.set_args()
        impostor.start()
        wait_until(lambda: "refused: TLS handshake failed" in node.log(), 30, "the impostor refused at TLS")
        assert set(s.cluster.metadata(1).brokers) == {1}
    finally:
        wrong.stop()
        mallory.stop()
        s.cluster.stop()


class Sniffer:
    """Captures TCP payloads on the loopback interface (a raw packet socket: root only) to or
    from `ports`, as tcpdump would."""

    ETH_P_ALL = 0x0003

    def __init__(self, ports: set[int]):
        self.ports = ports
        self.payloads: dict[int, bytearray] = {p: bytearray() for p in ports}
        self.sock = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.ntohs(self.ETH_P_ALL))
        self.sock.bind(("lo", 0))
        self.sock.settimeout(0.2)
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self.run, daemon=True)
        self.thread.start()

    def run(self):
        while not self.stop.is_set():
            try:
                frame = self.sock.recv(1 << 16)
            except socket.timeout:
                continue
            if len(frame) < 34 or frame[12:14] != b"\x08\x00" or frame[23] != 6:  # IPv4, TCP
                continue
            ip = frame[14:]
            tcp = ip[(ip[0] & 0x0F) * 4:]
            sport, dport = struct.unpack(">HH", tcp[:4])
            payload = tcp[(tcp[12] >> 4) * 4:]
            for port in {sport, dport} & self.ports:
                self.payloads[port] += payload

    def close(self) -> dict[int, bytes]:
        self.stop.set()
        self.thread.join(5)
        self.sock.close()
        return {p: bytes(b) for p, b in self.payloads.items()}


def test_node_to_node_rpc_is_encrypted(secured):
    """A capture of every RPC port while a topic is created, its metadata replicated over Raft
    and records produced shows no plaintext: the topic's name, which the metadata log carries,
    never appears there, while the same capture finds it in a request on the PLAINTEXT client
    listener."""
    if os.geteuid() != 0:
        pytest.skip("a packet capture needs root")
    s = secured
    rpc = {n.rpc_port for n in s.cluster.nodes.values()}
    plaintext = s.cluster.nodes[1].port
    name = f"sniffed-{uuid.uuid4().hex}"
    sniffer = Sniffer(rpc | {plaintext})
    try:
        admin = s.admin(2)
        admin.create_topics([NewTopic(name, 3, 3)])[name].result(30)
        wait_until(lambda: name in admin.list_topics(timeout=10).topics, 30, "the topic")
        # A Metadata request naming the topic on the PLAINTEXT listener: the capture's control.
        with socket.create_connection(("127.0.0.1", plaintext), timeout=10) as sock:
            sock.sendall(kw.request(3, 1, 1, struct.pack(">i", 1) + kw.string(name)))
            kw.read_response(sock)
        p = Producer({**s.conf(), "acks": "all"})
        for i in range(100):
            p.produce(name, value=f"{name}-{i}".encode(), partition=i % 3)
        assert p.flush(45) == 0
    finally:
        captured = sniffer.close()
    assert name.encode() in captured[plaintext], "the capture missed the plaintext listener's request"
    rpc_bytes = b"".join(captured[port] for port in rpc)
    # Raft's entries, heartbeats and the forwarded CreateTopics: kilobytes, as TLS records.
    assert len(rpc_bytes) > 1000 and b"\x17\x03\x03" in rpc_bytes, rpc_bytes[:64]
    assert name.encode() not in rpc_bytes, "an RPC port carried the topic's name in plaintext"
    assert b"SL\x02" not in rpc_bytes, "an RPC port carried a plaintext frame header"
