"""Metadata names this broker consistently: its `node_id` is the only broker, the controller,
and every partition's leader, replica and in-sync replica."""
import ck
from confluent_kafka.admin import AdminClient


def test_node_id_is_the_broker_the_controller_and_every_leader(make_broker):
    broker = make_broker(shards=2, config="node_id = 7\n")
    ck.create_topic(broker.bootstrap, "placed", 3)
    md = AdminClient({"bootstrap.servers": broker.bootstrap}).list_topics(timeout=10)
    assert list(md.brokers) == [7]
    assert md.brokers[7].port == broker.port
    assert md.controller_id == 7
    for p in md.topics["placed"].partitions.values():
        assert (p.leader, p.replicas, p.isrs) == (7, [7], [7])
    # Clients route to that broker: a produce and a read back work.
    assert ck.produce_values(broker.bootstrap, "placed", 2, [b"a", b"b"]) == [0, 1]
