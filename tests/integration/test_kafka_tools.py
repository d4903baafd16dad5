"""Kafka 4.4's own tools against Sluice, as an operator runs them (kafka_tools.py runs each
kafka-*.sh script's main class): what each command prints is checked against what the broker
holds. One broker serves the module's single-node tests (a JVM per command is the slow part);
each test has its own topics and groups."""
import json
import time

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

import ck
import kafka_tools
from cluster import REPLICATED
from test_security import ADMIN, Secure, bob_conf, consume, produce, values
from waiting import wait_until

pytestmark = pytest.mark.skipif(not kafka_tools.installed(), reason="scripts/kafka-install has not run")




def tool(name, b, *args, **kwargs):
    return kafka_tools.run(name, "--bootstrap-server", b.bootstrap, *args, **kwargs).stdout


def described_partitions(out: str) -> dict[int, dict]:
    """kafka-topics --describe's partition lines ("Partition: 0\tLeader: 1\t..."), by index."""
    rows = {}
    for line in out.splitlines():
        if "Partition:" not in line:
            continue
        fields = dict(f.split(": ", 1) for f in line.strip().split("\t"))
        rows[int(fields["Partition"])] = fields
    return rows


def test_kafka_topics_creates_lists_describes_alters_and_deletes(node):
    out = tool("kafka-topics", node, "--create", "--topic", "orders", "--partitions", "3",
               "--replication-factor", "1", "--config", "cleanup.policy=compact", "--config", "retention.ms=60000")
    assert "Created topic orders." in out, out
    assert "orders" in tool("kafka-topics", node, "--list").split()
    described = tool("kafka-topics", node, "--describe", "--topic", "orders")
    head = described.splitlines()[0]
    assert "PartitionCount: 3" in head and "ReplicationFactor: 1" in head, described
    assert "cleanup.policy=compact" in head and "retention.ms=60000" in head, described
    assert sorted(described_partitions(described)) == [0, 1, 2]
    assert all(p["Leader"] == "0" and p["Replicas"] == "0" and p["Isr"] == "0"
               for p in described_partitions(described).values()), described
    # Creating it again is refused with Kafka's message; --if-not-exists makes it a no-op.
    again = kafka_tools.run("kafka-topics", "--bootstrap-server", node.bootstrap, "--create", "--topic", "orders",
                            check=False)
    assert again.returncode != 0 and "already exists" in again.stdout + again.stderr, again
    tool("kafka-topics", node, "--create", "--topic", "orders", "--if-not-exists")

    tool("kafka-topics", node, "--alter", "--topic", "orders", "--partitions", "5")
    assert sorted(described_partitions(tool("kafka-topics", node, "--describe", "--topic", "orders"))) == [0, 1, 2, 3, 4]
    fewer = kafka_tools.run("kafka-topics", "--bootstrap-server", node.bootstrap, "--alter", "--topic", "orders",
                            "--partitions", "2", check=False)
    assert fewer.returncode != 0 and "InvalidPartitionsException" in fewer.stdout + fewer.stderr, fewer

    tool("kafka-topics", node, "--delete", "--topic", "orders")
    wait_until(lambda: "orders" not in tool("kafka-topics", node, "--list").split(), 30, "orders deleted")


def test_kafka_configs_describes_and_alters_topics_brokers_the_cluster_default_and_users(node):
    tool("kafka-topics", node, "--create", "--topic", "tuned", "--partitions", "1")

    def topic_configs():
        out = tool("kafka-configs", node, "--describe", "--entity-type", "topics", "--entity-name", "tuned")
        return {line.split()[0] for line in out.splitlines()[1:] if line.strip()}

    assert topic_configs() == set()
    # --add-config and --delete-config go as IncrementalAlterConfigs: only the named keys move.
    tool("kafka-configs", node, "--alter", "--entity-type", "topics", "--entity-name", "tuned",
         "--add-config", "retention.ms=100000,max.message.bytes=200000")
    assert topic_configs() == {"retention.ms=100000", "max.message.bytes=200000"}
    tool("kafka-configs", node, "--alter", "--entity-type", "topics", "--entity-name", "tuned",
         "--delete-config", "max.message.bytes")
    assert topic_configs() == {"retention.ms=100000"}
    bad = kafka_tools.run("kafka-configs", "--bootstrap-server", node.bootstrap, "--alter", "--entity-type",
                          "topics", "--entity-name", "tuned", "--add-config", "retention.ms=soon", check=False)
    assert bad.returncode != 0 and "InvalidConfigurationException" in bad.stdout + bad.stderr, bad

    # The cluster default of a broker setting, then the broker's own value (kafka-configs'
    # --entity-default and --entity-name 0), each shown with its source.
    tool("kafka-configs", node, "--alter", "--entity-type", "brokers", "--entity-default",
         "--add-config", "log.retention.ms=3600000")
    default = tool("kafka-configs", node, "--describe", "--entity-type", "brokers", "--entity-default")
    assert "log.retention.ms=3600000" in default, default
    every = tool("kafka-configs", node, "--describe", "--entity-type", "brokers", "--entity-name", "0", "--all")
    assert "log.retention.ms=3600000" in every and "broker.id=0" in every, every
    tool("kafka-configs", node, "--alter", "--entity-type", "brokers", "--entity-default",
         "--delete-config", "log.retention.ms")
    default = tool("kafka-configs", node, "--describe", "--entity-type", "brokers", "--entity-default")
    assert "log.retention.ms" not in default, default

    # SCRAM credentials (AlterUserScramCredentials; the describe also asks DescribeClientQuotas,
    # which finds none: Sluice sets no quotas).
    tool("kafka-configs", node, "--alter", "--entity-type", "users", "--entity-name", "alice",
         "--add-config", "SCRAM-SHA-256=[iterations=8192,password=alice-secret],SCRAM-SHA-512=[password=alice-pw]")
    alice = tool("kafka-configs", node, "--describe", "--entity-type", "users", "--entity-name", "alice")
    assert "SCRAM-SHA-256=iterations=8192" in alice and "SCRAM-SHA-512=iterations=4096" in alice, alice
    tool("kafka-configs", node, "--alter", "--entity-type", "users", "--entity-name", "alice",
         "--delete-config", "SCRAM-SHA-512")
    alice = tool("kafka-configs", node, "--describe", "--entity-type", "users")
    assert "SCRAM-SHA-256=iterations=8192" in alice and "SCRAM-SHA-512" not in alice, alice


def produce_at(bootstrap, topic, partition, count, timestamp_ms):
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all"})
    for i in range(count):
        producer.produce(topic, value=b"v%d" % i, partition=partition, timestamp=timestamp_ms)
    assert producer.flush(30) == 0


def test_kafka_consumer_groups_lists_describes_resets_and_deletes(node, tmp_path):
    tool("kafka-topics", node, "--create", "--topic", "ledger", "--partitions", "2")
    hour_ms = 3_600_000
    t0 = (int(time.time() * 1000) // hour_ms - 3) * hour_ms
    for p in (0, 1):
        produce_at(node.bootstrap, "ledger", p, 10, t0)
        produce_at(node.bootstrap, "ledger", p, 10, t0 + hour_ms)
    consumer = Consumer({"bootstrap.servers": node.bootstrap, "group.id": "auditors", "enable.auto.commit": False})
    consumer.commit(offsets=[TopicPartition("ledger", 0, 15), TopicPartition("ledger", 1, 4)], asynchronous=False)
    consumer.close()

    assert "auditors" in tool("kafka-consumer-groups", node, "--list").split()
    rows = kafka_tools.table(tool("kafka-consumer-groups", node, "--describe", "--group", "auditors"), "GROUP")
    got = {(r["PARTITION"], r["CURRENT-OFFSET"], r["LOG-END-OFFSET"], r["LAG"]) for r in rows}
    assert got == {("0", "15", "20", "5"), ("1", "4", "20", "16")}, rows
    state = kafka_tools.table(tool("kafka-consumer-groups", node, "--describe", "--group", "auditors", "--state"),
                              "GROUP")
    assert [(r["STATE"], r["#MEMBERS"]) for r in state] == [("Empty", "0")], state

    def reset(*how):
        out = tool("kafka-consumer-groups", node, "--reset-offsets", "--group", "auditors", *how, "--execute")
        return {r["PARTITION"]: r["NEW-OFFSET"] for r in kafka_tools.table(out, "GROUP")}

    assert reset("--topic", "ledger", "--to-earliest") == {"0": "0", "1": "0"}
    assert reset("--topic", "ledger", "--to-latest") == {"0": "20", "1": "20"}
    assert reset("--all-topics", "--shift-by", "-3") == {"0": "17", "1": "17"}
    half_past = time.strftime("%Y-%m-%dT%H:%M:%S.000", time.gmtime((t0 + hour_ms // 2) / 1000))
    assert reset("--topic", "ledger:0", "--to-datetime", half_past) == {"0": "10"}
    plan = tmp_path / "plan.csv"
    plan.write_text("ledger,0,7\nledger,1,12\n")
    assert reset("--from-file", plan) == {"0": "7", "1": "12"}
    # A dry run changes nothing.
    tool("kafka-consumer-groups", node, "--reset-offsets", "--group", "auditors", "--topic", "ledger",
         "--to-earliest", "--dry-run")
    rows = kafka_tools.table(tool("kafka-consumer-groups", node, "--describe", "--group", "auditors"), "GROUP")
    assert {(r["PARTITION"], r["CURRENT-OFFSET"]) for r in rows} == {("0", "7"), ("1", "12")}, rows

    out = tool("kafka-consumer-groups", node, "--delete-offsets", "--group", "auditors", "--topic", "ledger:1")
    assert "Successful" in out, out
    rows = kafka_tools.table(tool("kafka-consumer-groups", node, "--describe", "--group", "auditors"), "GROUP")
    assert {(r["PARTITION"], r["CURRENT-OFFSET"]) for r in rows} == {("0", "7")}, rows
    out = tool("kafka-consumer-groups", node, "--delete", "--group", "auditors")
    assert "Deletion of requested consumer groups ('auditors') was successful." in out, out
    assert "auditors" not in tool("kafka-consumer-groups", node, "--list").split()


def test_kafka_get_offsets_delete_records_and_log_dirs(node, tmp_path):
    tool("kafka-topics", node, "--create", "--topic", "metered", "--partitions", "2")
    produce_at(node.bootstrap, "metered", 0, 50, int(time.time() * 1000))
    produce_at(node.bootstrap, "metered", 1, 30, int(time.time() * 1000))

    def offsets(*args):
        out = tool("kafka-get-offsets", node, "--topic", "metered", *args)
        return dict(line.rsplit(":", 1) for line in out.split())

    assert offsets() == {"metered:0": "50", "metered:1": "30"}
    assert offsets("--time", "-2") == {"metered:0": "0", "metered:1": "0"}
    # -3: the offset of the record with the largest timestamp (KIP-734): all share one here,
    # so the first of them.
    assert offsets("--time", "-3") == {"metered:0": "0", "metered:1": "0"}

    plan = tmp_path / "delete.json"
    plan.write_text(json.dumps({"version": 1, "partitions": [{"topic": "metered", "partition": 0, "offset": 20}]}))
    out = tool("kafka-delete-records", node, "--offset-json-file", plan)
    assert "partition: metered-0\tlow_watermark: 20" in out, out
    assert offsets("--time", "-2") == {"metered:0": "20", "metered:1": "0"}

    out = tool("kafka-log-dirs", node, "--describe", "--topic-list", "metered")
    described = json.loads(out.splitlines()[-1])
    [broker] = described["brokers"]
    [log_dir] = broker["logDirs"]
    assert broker["broker"] == 0 and log_dir["error"] is None and log_dir["logDir"] == str(node.data_dir), described
    sizes = {p["partition"]: p["size"] for p in log_dir["partitions"]}
    assert set(sizes) == {"metered-0", "metered-1"} and all(s > 0 for s in sizes.values()), sizes
    assert all(p["offsetLag"] == 0 and not p["isFuture"] for p in log_dir["partitions"]), log_dir


def test_kafka_transactions_lists_describes_and_aborts_an_open_transaction(node):
    tool("kafka-topics", node, "--create", "--topic", "payments", "--partitions", "1")
    produce_at(node.bootstrap, "payments", 0, 3, int(time.time() * 1000))
    producer = Producer({"bootstrap.servers": node.bootstrap, "transactional.id": "payer",
                         "transaction.timeout.ms": 600_000})
    producer.init_transactions(30)
    producer.begin_transaction()
    for i in range(5):
        producer.produce("payments", value=b"p%d" % i, partition=0)
    assert producer.flush(30) == 0

    listed = kafka_tools.table(tool("kafka-transactions", node, "list"), "TransactionalId")
    assert [(r["TransactionalId"], r["TransactionState"]) for r in listed] == [("payer", "Ongoing")], listed
    [described] = kafka_tools.table(tool("kafka-transactions", node, "describe", "--transactional-id", "payer"),
                                    "CoordinatorId")
    assert described["TransactionState"] == "Ongoing" and described["TopicPartitions"] == "payments-0", described
    [producing] = kafka_tools.table(tool("kafka-transactions", node, "describe-producers", "--topic", "payments",
                                         "--partition", "0"), "ProducerId")
    assert producing["ProducerId"] == described["ProducerId"], (producing, described)
    assert producing["CurrentTransactionStartOffset"] == "3" and producing["LastSequence"] == "4", producing
    # Open for seconds, not past the longest transaction timeout: not hanging.
    hanging = tool("kafka-transactions", node, "find-hanging", "--broker-id", "0")
    assert kafka_tools.table(hanging, "Topic") == [], hanging

    # An operator aborts it by its first offset (DescribeProducers, then WriteTxnMarkers): the
    # partition's last stable offset moves past the marker, and a read_committed consumer sees
    # the records before it and none of the transaction's.
    tool("kafka-transactions", node, "abort", "--topic", "payments", "--partition", "0", "--start-offset", "3")
    [after] = kafka_tools.table(tool("kafka-transactions", node, "describe-producers", "--topic", "payments",
                                     "--partition", "0"), "ProducerId")
    assert after["CurrentTransactionStartOffset"] == "None", after
    reader = Consumer({"bootstrap.servers": node.bootstrap, "group.id": "committed-reader",
                       "isolation.level": "read_committed", "enable.auto.commit": False})
    try:
        reader.assign([TopicPartition("payments", 0, 0)])
        wait_until(lambda: reader.get_watermark_offsets(TopicPartition("payments", 0), timeout=5)[1] == 9, 15,
                   "the marker written")
        got = [m.value() for m in reader.consume(10, timeout=5) if m.error() is None]
        assert got == [b"v0", b"v1", b"v2"], got
        assert reader.position([TopicPartition("payments", 0)])[0].offset == 9
    finally:
        reader.close()


def test_kafka_cluster_tools_describe_the_node(node):
    status = dict(line.split(":", 1) for line in tool("kafka-metadata-quorum", node, "describe", "--status").splitlines()
                  if ":" in line)
    assert status["LeaderId"].strip() == "0" and status["CurrentVoters"].strip() == '[{"id": 0}]', status
    replication = kafka_tools.table(tool("kafka-metadata-quorum", node, "describe", "--replication"), "NodeId")
    assert [(r["NodeId"], r["Status"]) for r in replication] == [("0", "Leader")], replication
    cluster_id = kafka_tools.run("kafka-cluster", "cluster-id", "--bootstrap-server", node.bootstrap).stdout.strip()
    admin = ck.admin(node.bootstrap)  # referenced until its answer is in
    assert cluster_id == f"Cluster ID: {admin.describe_cluster().result(15).cluster_id}"
    versions = tool("kafka-broker-api-versions", node)
    assert f"{node.bootstrap} (id: 0 rack: null" in versions, versions
    for api in ["Produce(0)", "Fetch(1)", "DescribeProducers(61)", "DescribeLogDirs(35)", "UpdateFeatures(57)"]:
        line = next(line for line in versions.splitlines() if api in line)
        assert "UNSUPPORTED" not in line, line
    features = tool("kafka-features", node, "describe")
    assert "Feature: metadata.version" in features and "Feature: transaction.version" in features, features


def test_kafka_perf_tests_and_the_verifiable_clients_count_every_record(node):
    tool("kafka-topics", node, "--create", "--topic", "perf", "--partitions", "3")
    out = kafka_tools.run("kafka-producer-perf-test", "--topic", "perf", "--num-records", 20000, "--record-size", 100,
                          "--throughput", -1, "--bootstrap-server", node.bootstrap,
                          "--command-property", "acks=all").stdout
    assert "20000 records sent" in out, out
    out = tool("kafka-consumer-perf-test", node, "--topic", "perf", "--num-records", 20000, "--group", "perf-readers",
               "--timeout", 60000)
    row = out.strip().splitlines()[-1].split(", ")
    # data.consumed.in.nMsg: every record.
    assert row[4] == "20000", out

    # Kafka's system tests count lost and duplicated records with these two.
    tool("kafka-topics", node, "--create", "--topic", "verified", "--partitions", "2")
    out = kafka_tools.run("kafka-verifiable-producer", "--bootstrap-server", node.bootstrap, "--topic", "verified",
                          "--max-messages", 2000, "--acks", -1).stdout
    events = [json.loads(line) for line in out.splitlines() if line.startswith("{")]
    acked = {(e["partition"], e["offset"]) for e in events if e["name"] == "producer_send_success"}
    assert len(acked) == 2000 and events[-1]["acked"] == 2000, events[-1]
    consumer = kafka_tools.start("kafka-verifiable-consumer", "--bootstrap-server", node.bootstrap, "--topic",
                                 "verified", "--group-id", "verifiers", "--max-messages", 2000,
                                 "--reset-policy", "earliest")
    try:
        out, err = consumer.communicate(timeout=120)
    finally:
        consumer.kill()
    events = [json.loads(line) for line in out.splitlines() if line.startswith("{")]
    consumed = [(p["partition"], o) for e in events if e["name"] == "records_consumed" for p in e["partitions"]
                for o in range(p["minOffset"], p["maxOffset"] + 1)]
    assert sorted(consumed) == sorted(acked), (len(consumed), err[-2000:])
    assert any(e["name"] == "offsets_committed" and e["success"] for e in events), events[-3:]


# ---- three nodes ----------------------------------------------------------------------------

# The `three` fixture's cluster (conftest.py): leadership moves back only when asked.
THREE_NODE_CONFIG = REPLICATED + "auto_leader_rebalance_enable = false\n"




def replicas_of(c, topic):
    """kafka-topics --describe's partitions: index -> (leader, replicas, in-sync replicas)."""
    out = tool("kafka-topics", c.live()[0], "--describe", "--topic", topic)
    return {i: (int(p["Leader"]), [int(r) for r in p["Replicas"].split(",")], sorted(int(r) for r in p["Isr"].split(",")))
            for i, p in described_partitions(out).items()}


def test_kafka_reassign_partitions_generates_executes_and_verifies_on_three_nodes(three, tmp_path):
    tool("kafka-topics", three.nodes[2], "--create", "--topic", "moved", "--partitions", "2",
         "--replication-factor", "1")
    produce_at(three.nodes[1].bootstrap, "moved", 0, 100, int(time.time() * 1000))
    produce_at(three.nodes[1].bootstrap, "moved", 1, 50, int(time.time() * 1000))
    topics = tmp_path / "topics.json"
    topics.write_text(json.dumps({"version": 1, "topics": [{"topic": "moved"}]}))
    out = tool("kafka-reassign-partitions", three.nodes[1], "--generate", "--topics-to-move-json-file", topics,
               "--broker-list", "1,2,3")
    current = json.loads(out.split("Current partition replica assignment")[1].split("Proposed")[0])
    proposed = json.loads(out.split("Proposed partition reassignment configuration")[1])
    assert {p["partition"] for p in current["partitions"]} == {0, 1} == {p["partition"] for p in proposed["partitions"]}
    assert all(set(p["replicas"]) <= {1, 2, 3} for p in proposed["partitions"]), proposed

    # The operator's own plan: each partition onto three replicas, then verified to completion.
    plan = tmp_path / "plan.json"
    plan.write_text(json.dumps({"version": 1, "partitions": [
        {"topic": "moved", "partition": 0, "replicas": [2, 3, 1]},
        {"topic": "moved", "partition": 1, "replicas": [3, 1, 2]}]}))
    out = tool("kafka-reassign-partitions", three.nodes[1], "--execute", "--reassignment-json-file", plan)
    assert "Successfully started partition reassignments for moved-0,moved-1" in out, out

    def verified():
        out = tool("kafka-reassign-partitions", three.nodes[1], "--verify", "--reassignment-json-file", plan)
        return "Reassignment of partition moved-0 is completed." in out and \
            "Reassignment of partition moved-1 is completed." in out
    wait_until(verified, 60, "the reassignment verified complete")
    after = replicas_of(three, "moved")
    assert after[0][1] == [2, 3, 1] and after[1][1] == [3, 1, 2], after
    wait_until(lambda: all(isr == [1, 2, 3] for _, _, isr in replicas_of(three, "moved").values()), 30,
               "every new replica in sync")
    # The records came along.
    offsets = tool("kafka-get-offsets", three.nodes[3], "--topic", "moved")
    assert sorted(offsets.split()) == ["moved:0:100", "moved:1:50"], offsets


def test_kafka_leader_election_moves_leadership_back_to_the_preferred_replica(three):
    tool("kafka-topics", three.nodes[1], "--create", "--topic", "elected", "--partitions", "3",
         "--replication-factor", "3")
    wait_until(lambda: all(isr == [1, 2, 3] for _, _, isr in replicas_of(three, "elected").values()), 30,
               "every replica in sync")
    before = replicas_of(three, "elected")
    assert all(leader == replicas[0] for leader, replicas, _ in before.values()), before
    # Partition 0's preferred leader stops; another replica takes over; it comes back in sync
    # and stays a follower (automatic rebalancing is off here).
    preferred = before[0][1][0]
    three.nodes[preferred].kill()
    wait_until(lambda: replicas_of(three, "elected")[0][0] not in (preferred, -1), 30, "a new leader of elected-0")
    three.nodes[preferred].start()
    wait_until(lambda: replicas_of(three, "elected")[0][2] == [1, 2, 3], 60, "the preferred replica back in sync")
    assert replicas_of(three, "elected")[0][0] != preferred

    via = next(n for n in (1, 2, 3) if n != preferred)
    out = tool("kafka-leader-election", three.nodes[via], "--election-type", "preferred", "--topic", "elected",
               "--partition", "0")
    assert "Successfully completed leader election (PREFERRED) for partitions elected-0" in out, out
    assert replicas_of(three, "elected")[0][0] == preferred
    # Once it leads, another election is not needed (Kafka's ELECTION_NOT_NEEDED).
    out = tool("kafka-leader-election", three.nodes[1], "--election-type", "preferred", "--all-topic-partitions")
    assert "Valid replica already elected for partitions" in out, out


def test_kafka_metadata_quorum_and_topics_describe_three_nodes(three):
    status = dict(line.split(":", 1) for line in tool("kafka-metadata-quorum", three.nodes[2], "describe",
                                                       "--status").splitlines() if ":" in line)
    voters = sorted(v["id"] for v in json.loads(status["CurrentVoters"]))
    assert voters == [1, 2, 3] and int(status["LeaderId"]) in voters, status
    replication = kafka_tools.table(tool("kafka-metadata-quorum", three.nodes[2], "describe", "--replication"),
                                    "NodeId")
    assert sorted(int(r["NodeId"]) for r in replication) == [1, 2, 3], replication
    assert sorted(r["Status"] for r in replication) == ["Follower", "Follower", "Leader"], replication
    tool("kafka-topics", three.nodes[3], "--create", "--topic", "wide", "--partitions", "3",
         "--replication-factor", "3")
    wait_until(lambda: all(isr == [1, 2, 3] for _, _, isr in replicas_of(three, "wide").values()), 30,
               "every replica in sync")
    assert all(sorted(replicas) == [1, 2, 3] for _, replicas, _ in replicas_of(three, "wide").values())
    logs = json.loads(tool("kafka-log-dirs", three.nodes[1], "--describe", "--topic-list", "wide").splitlines()[-1])
    assert sorted(b["broker"] for b in logs["brokers"]) == [1, 2, 3], logs
    assert all(len(b["logDirs"][0]["partitions"]) == 3 for b in logs["brokers"]), logs


# ---- a secured node -------------------------------------------------------------------------

def test_kafka_acls_and_scram_users_over_sasl_ssl_as_a_super_user(make_broker, pki, tmp_path):
    """kafka-configs makes a SCRAM user and kafka-acls grants, lists and removes its ACLs, both
    logged in over SASL_SSL as the super user (a Java client's properties file, as operators
    pass with --command-config); the grants take effect for the user's own client."""
    s = Secure(make_broker, pki, authorization=True)
    admin_props = tmp_path / "admin.properties"
    admin_props.write_text(
        "security.protocol=SASL_SSL\nsasl.mechanism=SCRAM-SHA-512\n"
        "sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required "
        f'username="{ADMIN[0]}" password="{ADMIN[1]}";\n'
        f"ssl.truststore.type=PEM\nssl.truststore.location={pki / 'ca.pem'}\n")
    bootstrap = f"127.0.0.1:{s.ports['SASL_SSL']}"

    def secured(name, *args, check=True):
        return kafka_tools.run(name, "--bootstrap-server", bootstrap, "--command-config", admin_props, *args,
                               check=check)

    secured("kafka-configs", "--alter", "--entity-type", "users", "--entity-name", "bob",
            "--add-config", "SCRAM-SHA-256=[password=bob-pw]")
    secured("kafka-topics", "--create", "--topic", "ledger", "--partitions", "1")
    assert produce(s.conf(), "ledger", values(5)) == []
    reads = lambda: consume(bob_conf(s), "ledger", 5, group="readers", timeout_s=10)  # noqa: E731
    assert not isinstance(reads(), list), "bob reads before any grant"

    out = secured("kafka-acls", "--add", "--allow-principal", "User:bob", "--operation", "Read",
                  "--operation", "Describe", "--topic", "ledger", "--group", "readers").stdout
    assert "Adding ACLs for resource `ResourcePattern(resourceType=TOPIC, name=ledger, patternType=LITERAL)`" in out
    assert reads() == values(5)
    listed = secured("kafka-acls", "--list", "--topic", "ledger").stdout
    assert "(principal=User:bob, host=*, operation=READ, permissionType=ALLOW)" in listed, listed
    assert "(principal=User:bob, host=*, operation=DESCRIBE, permissionType=ALLOW)" in listed, listed
    by_principal = secured("kafka-acls", "--list", "--principal", "User:bob").stdout
    assert "name=readers" in by_principal and by_principal.count("principal=User:bob") == 4, by_principal

    # bob may not manage ACLs: the tool reports the authorizer's refusal.
    bob_props = tmp_path / "bob.properties"
    bob_props.write_text(admin_props.read_text().replace("SCRAM-SHA-512", "SCRAM-SHA-256")
                         .replace(f'username="{ADMIN[0]}" password="{ADMIN[1]}"', 'username="bob" password="bob-pw"'))
    refused = kafka_tools.run("kafka-acls", "--bootstrap-server", bootstrap, "--command-config", bob_props, "--add",
                              "--allow-principal", "User:bob", "--operation", "All", "--cluster", check=False)
    assert "ClusterAuthorizationException" in refused.stdout + refused.stderr, refused

    secured("kafka-acls", "--remove", "--force", "--allow-principal", "User:bob", "--operation", "Read",
            "--operation", "Describe", "--topic", "ledger", "--group", "readers")
    assert "principal=User:bob" not in secured("kafka-acls", "--list").stdout
    assert not isinstance(reads(), list), "bob reads after the ACLs went"
