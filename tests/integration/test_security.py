"""Security (issue 19) with real clients: listeners of every security protocol on one broker,
SASL (SCRAM-SHA-256, SCRAM-SHA-512, PLAIN) over TLS with confluent-kafka, kafka-python and
kafkajs, users managed over the Kafka API, mutual TLS, ACLs, and bad input on the secured
ports. Certificates are made per test session with openssl."""
import json
import os
import signal
import socket
import ssl
import struct
import subprocess
import time
import uuid
from pathlib import Path

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer
from confluent_kafka.admin import (AclBinding, AclBindingFilter, AclOperation, AclPermissionType,
                                   AdminClient, ConfigResource, NewPartitions, NewTopic,
                                   ResourcePatternType, ResourceType, ScramCredentialInfo,
                                   ScramMechanism, UserScramCredentialDeletion,
                                   UserScramCredentialUpsertion)

import ck
import kafka_wire
from broker import free_port
from conftest import openssl
from metrics import metrics_config, total
from waiting import wait_until

CLIENTS = Path(__file__).resolve().parents[1] / "clients"
MECHANISMS = ["SCRAM-SHA-256", "SCRAM-SHA-512", "PLAIN"]
ADMIN = ("admin", "admin-secret")


class Secure:
    """A broker with four listeners: PLAINTEXT (its own port), SASL_SSL, SASL_PLAINTEXT and
    SSL (client certificates required)."""

    def __init__(self, make_broker, pki, authorization=False, extra="", reauth_ms=0):
        top, self.metrics = metrics_config()
        self.ports = {"SASL_SSL": free_port(), "SASL_PLAINTEXT": free_port(), "SSL": free_port()}
        self.pki = pki
        listeners = "".join(
            f'[[listeners]]\nname = "{proto.replace("_", "-")}"\naddress = "127.0.0.1:{port}"\n'
            f'security_protocol = "{proto}"\n'
            for proto, port in [("PLAINTEXT", "@PORT@"), *self.ports.items()])
        config = (
            f"{top}{listeners}"
            f'[tls]\ncert_file = "{pki}/server.pem"\nkey_file = "{pki}/server-key.pem"\n'
            f'client_ca_file = "{pki}/ca.pem"\n'
            f'[sasl]\nbootstrap_users = [{{ name = "{ADMIN[0]}", password = "{ADMIN[1]}" }}]\n'
            f"connections_max_reauth_ms = {reauth_ms}\n"
            f"[authorization]\nenabled = {'true' if authorization else 'false'}\n"
            f'super_users = ["User:{ADMIN[0]}"]\n{extra}')
        self.broker = make_broker(config=config)
        wait_until(lambda: "bootstrap users: 1 ready" in self.broker.log(), 20, "bootstrap users")

    def conf(self, protocol="SASL_SSL", mechanism="SCRAM-SHA-512", user=ADMIN, **extra):
        port = self.broker.port if protocol == "PLAINTEXT" else self.ports[protocol]
        c = {"bootstrap.servers": f"127.0.0.1:{port}", "security.protocol": protocol}
        if "SSL" in protocol:
            c["ssl.ca.location"] = str(self.pki / "ca.pem")
        if "SASL" in protocol:
            c.update({"sasl.mechanism": mechanism, "sasl.username": user[0], "sasl.password": user[1]})
        c.update(extra)
        return c

    def admin(self, **kw):
        return AdminClient(self.conf(**kw))


def create(admin, topic, partitions=2):
    for f in admin.create_topics([NewTopic(topic, partitions, 1)]).values():
        f.result(15)


def produce(conf, topic, values, **extra):
    """Produces `values` with acks=all; the delivery errors, if any."""
    errors = []
    p = Producer({**conf, "acks": "all", "message.timeout.ms": 10000, **extra})
    for v in values:
        p.produce(topic, value=v, key=v[:8],
                  on_delivery=lambda err, msg: errors.append(err) if err else None)
    assert p.flush(20) == 0
    return errors


def consume(conf, topic, count, group=None, timeout_s=30):
    """Reads `count` records with a consumer group; their values, or the first error."""
    c = Consumer({**conf, "group.id": group or f"g-{uuid.uuid4().hex[:8]}",
                  "auto.offset.reset": "earliest", "enable.auto.commit": False})
    c.subscribe([topic])
    got, deadline = [], time.monotonic() + timeout_s
    try:
        while len(got) < count and time.monotonic() < deadline:
            m = c.poll(0.5)
            if m is None:
                continue
            if m.error():
                return m.error()
            got.append(m.value())
    finally:
        c.close()
    return got


def values(n, size=1500):
    return [b"%06d-" % i + bytes([65 + i % 26]) * (i % size) for i in range(n)]


def login_error(conf):
    """The first error a client gets logging in with `conf`, or None if it logs in."""
    errors = []
    p = Producer({**conf, "error_cb": errors.append})
    try:
        p.list_topics(timeout=5)
        return None
    except KafkaException as e:
        p.poll(0.5)  # serves error_cb
        return errors[0] if errors else e.args[0]


@pytest.mark.parametrize("mechanism", MECHANISMS)
def test_confluent_kafka_over_sasl_ssl_and_sasl_plaintext(make_broker, pki, mechanism):
    """librdkafka logs in with each mechanism over TLS and over plain TCP; records come back
    byte-equal (fetched through TLS's copying path); a wrong password is refused with
    SASL_AUTHENTICATION_FAILED and counted."""
    s = Secure(make_broker, pki)
    for protocol in ["SASL_SSL", "SASL_PLAINTEXT"]:
        conf = s.conf(protocol, mechanism)
        topic = f"ck-{mechanism}-{protocol}".replace("_", "-").lower()
        create(AdminClient(conf), topic)
        sent = values(300)
        assert produce(conf, topic, sent) == []
        assert sorted(consume(conf, topic, len(sent))) == sorted(sent)
    wrong = s.conf("SASL_SSL", mechanism, user=("admin", "wrong"))
    err = login_error(wrong)
    assert err is not None and err.code() == KafkaError._AUTHENTICATION, err
    assert "Authentication failed" in err.str()
    unknown = login_error(s.conf("SASL_SSL", mechanism, user=("nobody", "x")))
    assert unknown is not None and unknown.code() == KafkaError._AUTHENTICATION
    wait_until(lambda: "authentication failed" in s.broker.log(), 10, "the failure logged")
    assert total(s.metrics, "sluice_authentication_failures_total") >= 2


@pytest.mark.parametrize("mechanism", MECHANISMS)
def test_kafka_python_over_sasl_ssl(make_broker, pki, mechanism):
    from kafka import KafkaConsumer, KafkaProducer
    from kafka.errors import KafkaError as PyKafkaError
    s = Secure(make_broker, pki)
    common = dict(bootstrap_servers=f"127.0.0.1:{s.ports['SASL_SSL']}", security_protocol="SASL_SSL",
                  ssl_cafile=str(pki / "ca.pem"), sasl_mechanism=mechanism,
                  sasl_plain_username=ADMIN[0], sasl_plain_password=ADMIN[1])
    topic = f"kp-{mechanism}".lower()
    create(s.admin(), topic)
    producer = KafkaProducer(acks="all", **common)
    sent = values(200)
    for v in sent:
        producer.send(topic, value=v)
    producer.flush(30)
    producer.close()
    consumer = KafkaConsumer(topic, auto_offset_reset="earliest", consumer_timeout_ms=15000,
                             group_id=f"kp-{mechanism}", **common)
    got = []
    for m in consumer:
        got.append(m.value)
        if len(got) == len(sent):
            break
    consumer.close()
    assert sorted(got) == sorted(sent)
    with pytest.raises(PyKafkaError):
        bad = dict(common, sasl_plain_password="wrong")
        KafkaProducer(request_timeout_ms=5000, max_block_ms=5000, **bad).partitions_for(topic)


@pytest.mark.parametrize("mechanism", ["scram-sha-256", "scram-sha-512", "plain"])
def test_kafkajs_over_sasl_ssl(make_broker, pki, mechanism):
    s = Secure(make_broker, pki)

    def run(password, topic):
        env = dict(os.environ, BOOTSTRAP=f"127.0.0.1:{s.ports['SASL_SSL']}", CA=str(pki / "ca.pem"),
                   MECHANISM=mechanism, USERNAME=ADMIN[0], PASSWORD=password, TOPIC=topic, COUNT="500")
        proc = subprocess.run(["node", str(CLIENTS / "kafkajs_secure.js")], env=env,
                              capture_output=True, text=True, timeout=120)
        assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
        return json.loads(proc.stdout.strip().splitlines()[-1])

    result = run(ADMIN[1], f"js-{mechanism}")
    assert (result["produced"], result["consumed"], result["mismatches"]) == (500, 500, [])
    refused = run("wrong", f"js-{mechanism}-refused")
    assert refused.get("error") == "KafkaJSSASLAuthenticationError", refused


def test_users_are_managed_over_the_kafka_api(make_broker, pki):
    """AlterUserScramCredentials creates a user who then logs in with SCRAM and with PLAIN
    (checked against the same stored credential); Describe lists mechanisms and iterations,
    never keys; a deleted credential no longer logs in; a restart keeps the users."""
    s = Secure(make_broker, pki)
    admin = s.admin()
    alice = ("alice", "alice-pw")
    upserts = [UserScramCredentialUpsertion("alice", ScramCredentialInfo(m, 8192), alice[1].encode())
               for m in (ScramMechanism.SCRAM_SHA_256, ScramMechanism.SCRAM_SHA_512)]
    for f in admin.alter_user_scram_credentials(upserts).values():
        f.result(15)
    described = admin.describe_user_scram_credentials(["alice"])["alice"].result(15)
    infos = sorted((i.mechanism, i.iterations) for i in described.scram_credential_infos)
    assert infos == [(ScramMechanism.SCRAM_SHA_256, 8192), (ScramMechanism.SCRAM_SHA_512, 8192)]
    everyone = admin.describe_user_scram_credentials().result(15)
    assert set(everyone) == {"admin", "alice"}
    for mechanism in MECHANISMS:
        assert login_error(s.conf("SASL_SSL", mechanism, user=alice)) is None, mechanism
    deletion = [UserScramCredentialDeletion("alice", ScramMechanism.SCRAM_SHA_256)]
    for f in admin.alter_user_scram_credentials(deletion).values():
        f.result(15)
    assert login_error(s.conf("SASL_SSL", "SCRAM-SHA-256", user=alice)) is not None
    assert login_error(s.conf("SASL_SSL", "SCRAM-SHA-512", user=alice)) is None
    again = admin.alter_user_scram_credentials(deletion)["alice"]
    with pytest.raises(KafkaException) as missing:
        again.result(15)
    assert missing.value.args[0].code() == KafkaError.RESOURCE_NOT_FOUND
    s.broker.restart()
    assert login_error(s.conf("SASL_SSL", "SCRAM-SHA-512", user=alice)) is None
    assert login_error(s.conf("SASL_SSL", "PLAIN", user=alice)) is None


def allow(admin, restype, name, principal, op, pattern=ResourcePatternType.LITERAL,
          permission=AclPermissionType.ALLOW):
    binding = AclBinding(restype, name, pattern, principal, "*", op, permission)
    for f in admin.create_acls([binding]).values():
        f.result(15)


def test_mutual_tls_principal_is_authorized_by_acl(make_broker, pki):
    """A client certificate's subject is the principal (RFC 2253, last RDN first): an ACL for it
    lets carol write one topic and not another; a client without a certificate, or with one no
    trusted CA signed, is refused at the handshake and counted."""
    s = Secure(make_broker, pki, authorization=True)
    admin = s.admin()
    create(admin, "carol-logs")
    create(admin, "secrets")
    carol = s.conf("SSL", **{"ssl.certificate.location": str(pki / "carol.pem"),
                             "ssl.key.location": str(pki / "carol-key.pem")})
    principal = "User:CN=carol,OU=eng,O=acme"
    allow(admin, ResourceType.TOPIC, "carol-logs", principal, AclOperation.WRITE)
    assert produce(carol, "carol-logs", [b"hello"]) == []
    denied = produce(carol, "secrets", [b"hello"])
    assert [e.code() for e in denied] == [KafkaError.TOPIC_AUTHORIZATION_FAILED]
    for extra in [{}, {"ssl.certificate.location": str(pki / "mallory.pem"),
                       "ssl.key.location": str(pki / "mallory-key.pem")}]:
        err = login_error(s.conf("SSL", **extra))
        assert err is not None and err.code() in (
            KafkaError._TRANSPORT, KafkaError._SSL, KafkaError._ALL_BROKERS_DOWN), err
    wait_until(lambda: "TLS handshake failed" in s.broker.log(), 10, "the refusal logged")
    assert total(s.metrics, "sluice_tls_handshake_failures_total") >= 2
    assert total(s.metrics, "sluice_tls_handshakes_total") >= 1


def test_a_version_1_client_certificate_is_refused_with_what_to_do(make_broker, pki):
    """Kafka (Java's TLS) accepts X.509 version 1 client certificates; Sluice's TLS (rustls,
    webpki) cannot check them, so it refuses them at the handshake with a log line that says
    to reissue them as version 3 (the README says so too)."""
    assert "Version: 1 (0x0)" in openssl("x509", "-in", "dave.pem", "-noout", "-text", cwd=pki)
    s = Secure(make_broker, pki)
    dave = s.conf("SSL", **{"ssl.certificate.location": str(pki / "dave.pem"),
                            "ssl.key.location": str(pki / "dave-key.pem")})
    err = login_error(dave)
    assert err is not None and err.code() in (
        KafkaError._TRANSPORT, KafkaError._SSL, KafkaError._ALL_BROKERS_DOWN), err
    wait_until(lambda: "is X.509 version 1, which Sluice does not accept; reissue it as version 3"
               in s.broker.log(), 10, "the refusal explained")


def bob_conf(s):
    return s.conf("SASL_SSL", "SCRAM-SHA-256", user=("bob", "bob-pw"))


def make_bob(admin):
    upsert = UserScramCredentialUpsertion("bob", ScramCredentialInfo(ScramMechanism.SCRAM_SHA_256, 4096),
                                          b"bob-pw")
    admin.alter_user_scram_credentials([upsert])["bob"].result(15)


def granted_within_a_second(check, grant):
    """`check()` fails, `grant()` runs, and `check()` then passes within a second."""
    assert not check(), "allowed before the grant"
    grant()
    wait_until(check, 1.0, "the grant to take effect within a second", every_s=0.05)


def test_acl_matrix(make_broker, pki):
    """A principal without a permission gets Kafka's error for each API and gets through once
    granted (within a second); DENY beats ALLOW; PREFIXED patterns match; ACLs are listed and
    deleted with the AdminClient."""
    s = Secure(make_broker, pki, authorization=True)
    admin = s.admin()
    make_bob(admin)
    bob = bob_conf(s)
    bob_admin = AdminClient(bob)
    create(admin, "logs-a")
    assert produce(s.conf(), "logs-a", values(5)) == []
    user = "User:bob"
    T, G = ResourceType.TOPIC, ResourceType.GROUP

    # Metadata hides topics without DESCRIBE (a filter, not a refusal: nothing is counted);
    # Produce needs WRITE (PREFIXED here).
    before = total(s.metrics, "sluice_authorization_denials_total")
    assert "logs-a" not in bob_admin.list_topics(timeout=10).topics
    assert total(s.metrics, "sluice_authorization_denials_total") == before
    granted_within_a_second(
        lambda: produce(bob, "logs-a", [b"x"]) == [],
        lambda: allow(admin, T, "logs-", user, AclOperation.WRITE, ResourcePatternType.PREFIXED))
    assert "logs-a" in bob_admin.list_topics(timeout=10).topics  # WRITE implies DESCRIBE

    # Fetch needs READ on the topic, a consumer group READ on the group.
    err = consume(bob, "logs-a", 6, group="bob-group")
    assert isinstance(err, KafkaError) and err.code() in (
        KafkaError.TOPIC_AUTHORIZATION_FAILED, KafkaError.GROUP_AUTHORIZATION_FAILED), err
    allow(admin, T, "logs-a", user, AclOperation.READ)
    err = consume(bob, "logs-a", 6, group="bob-group")
    assert isinstance(err, KafkaError) and err.code() == KafkaError.GROUP_AUTHORIZATION_FAILED, err
    allow(admin, G, "bob-", user, AclOperation.READ, ResourcePatternType.PREFIXED)
    assert len(consume(bob, "logs-a", 6, group="bob-group")) == 6

    # DENY beats ALLOW.
    allow(admin, T, "logs-a", user, AclOperation.WRITE, permission=AclPermissionType.DENY)
    wait_until(lambda: [e.code() for e in produce(bob, "logs-a", [b"y"])]
               == [KafkaError.TOPIC_AUTHORIZATION_FAILED], 5, "the DENY")

    # CreateTopics needs CREATE; DeleteTopics DELETE; CreatePartitions ALTER.
    f = bob_admin.create_topics([NewTopic("bobs", 1, 1)])["bobs"]
    with pytest.raises(KafkaException) as e:
        f.result(15)
    assert e.value.args[0].code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
    allow(admin, T, "bobs", user, AclOperation.CREATE)
    bob_admin.create_topics([NewTopic("bobs", 1, 1)])["bobs"].result(15)
    expect_refused(lambda: bob_admin.create_partitions([NewPartitions("bobs", 2)])["bobs"],
                   KafkaError.TOPIC_AUTHORIZATION_FAILED)
    allow(admin, T, "bobs", user, AclOperation.ALTER)
    bob_admin.create_partitions([NewPartitions("bobs", 2)])["bobs"].result(15)

    # DescribeConfigs / AlterConfigs need DESCRIBE_CONFIGS / ALTER_CONFIGS (ALTER_CONFIGS
    # implies DESCRIBE_CONFIGS); a broker's configs need them on the cluster.
    res = ConfigResource("topic", "logs-a")
    expect_refused(lambda: bob_admin.describe_configs([res])[res], KafkaError.TOPIC_AUTHORIZATION_FAILED)
    broker_res = ConfigResource("broker", "0")
    expect_refused(lambda: bob_admin.describe_configs([broker_res])[broker_res],
                   KafkaError.CLUSTER_AUTHORIZATION_FAILED)
    allow(admin, T, "logs-a", user, AclOperation.DESCRIBE_CONFIGS)
    assert "retention.ms" in bob_admin.describe_configs([res])[res].result(15)

    # DeleteTopics needs DELETE.
    expect_refused(lambda: bob_admin.delete_topics(["bobs"])["bobs"], KafkaError.TOPIC_AUTHORIZATION_FAILED)
    allow(admin, T, "bobs", user, AclOperation.DELETE)
    bob_admin.delete_topics(["bobs"])["bobs"].result(15)

    # Transactions need WRITE on the transactional id.
    txn = Producer({**bob, "transactional.id": "bob-txn", "transaction.timeout.ms": 10000})
    with pytest.raises(KafkaException) as e:
        txn.init_transactions(10)
    assert e.value.args[0].code() == KafkaError.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
    allow(admin, ResourceType.TRANSACTIONAL_ID, "bob-txn", user, AclOperation.WRITE)
    txn = Producer({**bob, "transactional.id": "bob-txn", "transaction.timeout.ms": 10000})
    txn.init_transactions(15)

    # The ACL APIs and user management need the cluster; the super user sees and deletes ACLs.
    # (librdkafka drops DescribeAcls' top-level error, so kafka-python asks.)
    from kafka.admin import ACLFilter, KafkaAdminClient, ResourcePatternFilter
    from kafka.admin import ACLOperation as Op, ACLPermissionType as Perm
    from kafka.admin import ACLResourcePatternType as Pattern, ResourceType as Kind
    from kafka.errors import ClusterAuthorizationFailedError
    py_admin = KafkaAdminClient(
        bootstrap_servers=bob["bootstrap.servers"], security_protocol="SASL_SSL",
        ssl_cafile=str(pki / "ca.pem"), sasl_mechanism="SCRAM-SHA-256",
        sasl_plain_username="bob", sasl_plain_password="bob-pw")
    everything = ACLFilter(principal=None, host="*", operation=Op.ANY, permission_type=Perm.ANY,
                           resource_pattern=ResourcePatternFilter(Kind.ANY, None, Pattern.ANY))
    with pytest.raises(ClusterAuthorizationFailedError):
        py_admin.describe_acls(everything)
    py_admin.close()
    # (librdkafka 2.16 crashes on any top-level DescribeUserScramCredentials error, Kafka's
    # too: it frees a string it did not allocate. AlterUserScramCredentials answers per user.)
    other = UserScramCredentialUpsertion(
        "eve", ScramCredentialInfo(ScramMechanism.SCRAM_SHA_256, 4096), b"eve-pw")
    expect_refused(lambda: bob_admin.alter_user_scram_credentials([other])["eve"],
                   KafkaError.CLUSTER_AUTHORIZATION_FAILED)
    bobs = AclBindingFilter(ResourceType.ANY, None, ResourcePatternType.ANY, user, None,
                            AclOperation.ANY, AclPermissionType.ANY)
    listed = admin.describe_acls(bobs).result(15)
    assert len(listed) == 9, listed
    deleted = admin.delete_acls([bobs])[bobs].result(15)
    assert sorted(map(str, deleted)) == sorted(map(str, listed))
    assert admin.describe_acls(bobs).result(15) == []
    wait_until(lambda: [e.code() for e in produce(bob, "logs-a", [b"z"])]
               == [KafkaError.TOPIC_AUTHORIZATION_FAILED], 5, "the deletion")
    assert total(s.metrics, "sluice_authorization_denials_total") >= 10
    assert "denied: User:bob" in s.broker.log()


def expect_refused(call, code):
    with pytest.raises(KafkaException) as e:
        call().result(15)
    assert e.value.args[0].code() == code, e.value


def frame(api_key, version, correlation, body=b"", client="raw"):
    cid = client.encode()
    header = struct.pack(">hhih", api_key, version, correlation, len(cid)) + cid
    payload = header + body
    return struct.pack(">i", len(payload)) + payload


def closed(sock, timeout_s=5.0):
    sock.settimeout(timeout_s)
    try:
        while sock.recv(4096):
            pass
        return True
    except (ConnectionError, socket.timeout, ssl.SSLError):
        return False


def test_bad_input_on_secured_ports(make_broker, pki):
    """Plaintext and garbage on a TLS port, requests before authentication, a token before the
    handshake, an unknown mechanism and an oversized unauthenticated frame: each gets a clean
    error or a closed connection, and the broker serves on."""
    s = Secure(make_broker, pki)
    ssl_port, sasl_port = s.ports["SASL_SSL"], s.ports["SASL_PLAINTEXT"]
    # A plaintext Kafka request and random bytes on the TLS port: closed.
    for junk in [frame(18, 0, 1), os.urandom(300)]:
        with socket.create_connection(("127.0.0.1", ssl_port)) as sock:
            sock.sendall(junk)
            assert closed(sock)
    # Metadata before authenticating on a SASL listener: closed.
    with socket.create_connection(("127.0.0.1", sasl_port)) as sock:
        sock.sendall(frame(3, 1, 1, struct.pack(">i", -1)))
        assert closed(sock)
    # SaslAuthenticate before the handshake: ILLEGAL_SASL_STATE (34), then closed.
    with socket.create_connection(("127.0.0.1", sasl_port)) as sock:
        sock.sendall(frame(36, 0, 7, struct.pack(">i", 3) + b"abc"))
        body = kafka_wire.read_response(sock)
        assert struct.unpack(">ih", body[:6]) == (7, 34)
        assert closed(sock)
    # An unknown mechanism: UNSUPPORTED_SASL_MECHANISM (33) with the enabled ones listed.
    with socket.create_connection(("127.0.0.1", sasl_port)) as sock:
        mech = b"GSSAPI"
        sock.sendall(frame(17, 1, 2, struct.pack(">h", len(mech)) + mech))
        body = kafka_wire.read_response(sock)
        assert struct.unpack(">ih", body[:6]) == (2, 33)
        for m in MECHANISMS:
            assert m.encode() in body
    # A SaslHandshake whose body does not decode: closed, as any undecodable request.
    with socket.create_connection(("127.0.0.1", sasl_port)) as sock:
        sock.sendall(frame(17, 1, 5, struct.pack(">h", 50) + b"PL"))
        assert closed(sock)
    # An unauthenticated frame past 512 KiB: closed before it is read.
    with socket.create_connection(("127.0.0.1", sasl_port)) as sock:
        sock.sendall(struct.pack(">i", 10 << 20) + b"\0" * 1024)
        assert closed(sock)
    # Still serving, and SaslHandshake v0's bare-token form logs in with PLAIN.
    with socket.create_connection(("127.0.0.1", sasl_port)) as sock:
        sock.sendall(frame(17, 0, 3, struct.pack(">h", 5) + b"PLAIN"))
        body = kafka_wire.read_response(sock)
        assert struct.unpack(">ih", body[:6]) == (3, 0)
        token = b"\0admin\0admin-secret"
        sock.sendall(struct.pack(">i", len(token)) + token)
        assert kafka_wire.read_response(sock) == b""
        sock.sendall(frame(18, 0, 4))
        body = kafka_wire.read_response(sock)
        assert struct.unpack(">ih", body[:6]) == (4, 0)
    assert login_error(s.conf("SASL_SSL")) is None
    s.broker.assert_no_panic()


def test_each_listener_is_advertised_to_its_own_clients(make_broker, pki):
    """Metadata through a listener names that listener's address."""
    s = Secure(make_broker, pki)
    for protocol in ["PLAINTEXT", "SASL_SSL", "SASL_PLAINTEXT"]:
        md = AdminClient(s.conf(protocol)).list_topics(timeout=10)
        port = s.broker.port if protocol == "PLAINTEXT" else s.ports[protocol]
        assert [(b.host, b.port) for b in md.brokers.values()] == [("127.0.0.1", port)], protocol


def test_certificate_reloads_on_sighup(make_broker, pki):
    """New connections get the certificate the files hold after SIGHUP; a reload of unusable
    files keeps the previous certificate."""
    s = Secure(make_broker, pki)
    port = s.ports["SASL_SSL"]

    def served_certificate():
        ctx = ssl.create_default_context(cafile=str(pki / "ca.pem"))
        with socket.create_connection(("127.0.0.1", port)) as raw:
            with ctx.wrap_socket(raw, server_hostname="localhost") as tls:
                return tls.getpeercert(binary_form=True)

    first = served_certificate()
    # A new certificate for the same name, written over the configured files.
    openssl("req", "-newkey", "rsa:2048", "-nodes", "-keyout", "new-key.pem", "-out", "new.csr",
            "-subj", "/CN=localhost", cwd=pki)
    openssl("x509", "-req", "-in", "new.csr", "-CA", "ca.pem", "-CAkey", "ca.key", "-CAcreateserial",
            "-out", "new.pem", "-days", "2", "-extfile", "server.ext", cwd=pki)
    original = {f: (pki / f).read_bytes() for f in ["server.pem", "server-key.pem"]}
    try:
        (pki / "server.pem").write_bytes((pki / "new.pem").read_bytes())
        (pki / "server-key.pem").write_bytes((pki / "new-key.pem").read_bytes())
        s.broker.proc.send_signal(signal.SIGHUP)
        wait_until(lambda: served_certificate() != first, 10, "the new certificate")
        second = served_certificate()
        (pki / "server.pem").write_text("not a certificate")
        s.broker.proc.send_signal(signal.SIGHUP)
        wait_until(lambda: "reload failed" in s.broker.log(), 10, "the failed reload logged")
        assert served_certificate() == second
    finally:
        for f, data in original.items():
            (pki / f).write_bytes(data)


def test_sessions_are_reauthenticated(make_broker, pki):
    """With connections_max_reauth_ms, SaslAuthenticate gives each session that lifetime;
    librdkafka logs in again on its connections before the lifetime ends (KIP-368), so a
    producer sending across several lifetimes loses nothing; a raw client that does not is
    disconnected at its next request."""
    s = Secure(make_broker, pki, reauth_ms=1500)
    conf = s.conf("SASL_SSL", "SCRAM-SHA-256")
    create(AdminClient(conf), "reauth")
    errors, sent = [], []
    p = Producer({**conf, "acks": "all", "linger.ms": 5})
    end = time.monotonic() + 6
    while time.monotonic() < end:
        v = b"v%06d" % len(sent)
        p.produce("reauth", value=v, on_delivery=lambda e, m: errors.append(e) if e else None)
        sent.append(v)
        p.poll(0.05)
    assert p.flush(20) == 0 and errors == []
    assert total(s.metrics, "sluice_reauthentications_total") >= 2
    assert sorted(consume(conf, "reauth", len(sent))) == sorted(sent)
    with socket.create_connection(("127.0.0.1", s.ports["SASL_PLAINTEXT"])) as sock:
        sock.sendall(frame(17, 1, 1, struct.pack(">h", 5) + b"PLAIN"))
        assert struct.unpack(">ih", kafka_wire.read_response(sock)[:6]) == (1, 0)
        token = b"\0admin\0admin-secret"
        sock.sendall(frame(36, 1, 2, struct.pack(">i", len(token)) + token))
        body = kafka_wire.read_response(sock)
        # v1: correlation, error code, error message (null), auth bytes (empty), lifetime.
        assert struct.unpack(">ihhiq", body[:20]) == (2, 0, -1, 0, 1500)
        time.sleep(2)  # the session's 1.5 s lifetime passes (time itself is what is tested)
        sock.sendall(frame(3, 1, 3, struct.pack(">i", -1)))
        assert closed(sock)


def test_sluice_user_manages_scram_logins(make_broker, pki):
    """`sluice user set|list|delete` over SASL_SSL as the admin: a user it sets logs in with that
    mechanism and password (and no other password), `list` shows mechanisms and iterations,
    `delete` ends the logins; a user without ALTER on the cluster is refused with the
    authorizer's code; an unknown user's `list` names it."""
    s = Secure(make_broker, pki, authorization=True)

    def user(who, *args):
        return ck.sluice_cli(s.conf("SASL_SSL", "SCRAM-SHA-512", user=who), "user", *args)

    alice = ("alice", "alice-pw")
    made = user(ADMIN, "set", "alice", "--password", alice[1], "--mechanism", "SCRAM-SHA-256")
    assert made.returncode == 0 and "set SCRAM-SHA-256 credential of user alice" in made.stdout, made.stderr
    assert login_error(s.conf("SASL_SSL", "SCRAM-SHA-256", user=alice)) is None
    assert login_error(s.conf("SASL_SSL", "SCRAM-SHA-256", user=("alice", "guess"))) is not None
    assert login_error(s.conf("SASL_SSL", "SCRAM-SHA-512", user=alice)) is not None
    assert user(ADMIN, "set", "bob", "--password", "bob-pw", "--iterations", "8192").returncode == 0
    listed = user(ADMIN, "list", "--format", "json")
    assert listed.returncode == 0, listed.stderr
    rows = {(r["user"], r["mechanism"], r["iterations"]) for r in json.loads(listed.stdout)}
    assert {r for r in rows if r[0] != "admin"} == {("alice", "SCRAM-SHA-256", 4096), ("bob", "SCRAM-SHA-512", 8192)}
    assert any(r[0] == "admin" for r in rows), rows
    # Bob logs in, but may not manage users: the cluster authorizer's refusal, by name.
    refused = user(("bob", "bob-pw"), "set", "mallory", "--password", "x")
    assert refused.returncode != 0 and "ClusterAuthorizationFailed" in refused.stderr, refused.stderr
    gone = user(ADMIN, "delete", "alice")
    assert gone.returncode == 0 and "deleted SCRAM-SHA-256 of user alice" in gone.stdout, gone.stderr
    assert login_error(s.conf("SASL_SSL", "SCRAM-SHA-256", user=alice)) is not None
    unknown = user(ADMIN, "list", "alice")
    assert unknown.returncode != 0 and "alice" in unknown.stderr and "ResourceNotFound" in unknown.stderr, \
        unknown.stderr


def test_sluice_acl_adds_lists_and_removes_acls(make_broker, pki):
    """`sluice acl add|list|remove` with kafka-acls' flags over SASL_SSL as the admin: bob
    reads a topic once allowed (carol, never allowed, stays refused), a DENY beats the ALLOW,
    `list` shows each ACL (filtered by resource and principal), `remove` takes them away and
    prints them, and bob is refused again; bob may not manage ACLs (the authorizer's code)."""
    s = Secure(make_broker, pki, authorization=True)
    admin = s.admin()
    make_bob(admin)
    create(admin, "ledger", 1)
    assert produce(s.conf(), "ledger", values(5)) == []
    user = ck.sluice_cli(s.conf(), "user", "set", "carol", "--password", "carol-pw", "--mechanism", "SCRAM-SHA-256")
    assert user.returncode == 0, user.stderr
    carol = s.conf("SASL_SSL", "SCRAM-SHA-256", user=("carol", "carol-pw"))

    def acl(who, *args):
        return ck.sluice_cli(who, "acl", *args)

    def reads(conf):
        got = consume(conf, "ledger", 5, group="readers", timeout_s=10)
        return isinstance(got, list) and len(got) == 5

    added = acl(s.conf(), "add", "--allow-principal", "User:bob", "--operation", "Read", "--operation", "Describe",
                "--topic", "ledger", "--group", "readers")
    assert added.returncode == 0 and "added 4 ACLs" in added.stdout, added.stdout + added.stderr
    assert reads(bob_conf(s)) and not reads(carol)
    listed = acl(s.conf(), "list", "--topic", "ledger", "--format", "json")
    assert listed.returncode == 0, listed.stderr
    rows = {(r["principal"], r["permission"], r["operation"], r["resource_type"], r["name"], r["pattern_type"],
             r["host"]) for r in json.loads(listed.stdout)}
    assert rows == {("User:bob", "ALLOW", "READ", "TOPIC", "ledger", "LITERAL", "*"),
                    ("User:bob", "ALLOW", "DESCRIBE", "TOPIC", "ledger", "LITERAL", "*")}, rows
    table = acl(s.conf(), "list", "--principal", "User:bob")
    assert table.returncode == 0 and table.stdout.count("User:bob") == 4 and "readers" in table.stdout, table.stdout
    # A DENY beats the ALLOW; bob may not manage ACLs himself.
    assert acl(s.conf(), "add", "--deny-principal", "User:bob", "--operation", "Read", "--topic", "ledger").returncode == 0
    assert not reads(bob_conf(s))
    refused = acl(bob_conf(s), "add", "--allow-principal", "User:bob", "--operation", "All", "--cluster")
    assert refused.returncode != 0 and "ClusterAuthorizationFailed" in refused.stderr, refused.stderr
    removed = acl(s.conf(), "remove", "--deny-principal", "User:bob", "--operation", "Read", "--topic", "ledger")
    assert removed.returncode == 0 and "removed 1 ACLs" in removed.stdout and "DENY" in removed.stdout, removed.stdout
    assert reads(bob_conf(s))
    removed = acl(s.conf(), "remove", "--topic", "ledger", "--format", "json")
    assert removed.returncode == 0 and len(json.loads(removed.stdout)) == 2, removed.stdout
    assert not reads(bob_conf(s))
    assert acl(s.conf(), "list", "--topic", "ledger").stdout.startswith("0 ACLs")
    bad = acl(s.conf(), "add", "--allow-principal", "User:bob", "--topic", "ledger")
    assert bad.returncode != 0 and "--operation" in bad.stderr, bad.stderr
