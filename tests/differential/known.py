"""Where Sluice differs from Kafka 4.4 on purpose (or not yet), per scenario: the paths of its
observation that may differ (test_differential.differences' paths, exact or a prefix ending
in "*"; "" is the whole observation) and the text of the README's conformance table row that names the
difference and its reason."""
from dataclasses import dataclass


@dataclass(frozen=True)
class Known:
    readme: str
    paths: tuple[str, ...]


VERSIONS = "API versions Kafka 4.4 serves and Sluice does not yet"
CLOSED = ("",)  # the connection is closed: "Kafka APIs served" lists the versions served

KNOWN: dict[str, Known] = {
    "api_versions_common_apis": Known(VERSIONS, (".*",)),
    "list_offsets_newest_version": Known(VERSIONS, CLOSED),
    "offset_fetch_newest_version": Known(VERSIONS, CLOSED),
    "offset_commit_newest_version": Known(VERSIONS, CLOSED),
    "txn_offset_commit_newest_version": Known(VERSIONS, CLOSED),
    "delete_topic_internal": Known("deleting `__consumer_offsets` or `__transaction_state`",
                                   (".Responses[0].ErrorCode",)),
    "produce_idempotent_then_duplicate": Known("a duplicate idempotent batch's answer",
                                               ("[2].LogAppendTimeMs",)),
    "incremental_alter_unknown_operation": Known("an unknown IncrementalAlterConfigs operation",
                                                 (".Responses[0].ErrorCode",)),
    "alter_configs_broker_logger": Known("BROKER_LOGGER configs", (".Responses[0].ErrorCode",)),
    "describe_configs_of_a_group_after_setting": Known("altering a group's configs",
                                                       (".Responses[0].ErrorCode",)),
    "describe_configs_broker_keys": Known("`offsets.topic.num.partitions` defaults to 16",
                                          ("[1].offsets.topic.num.partitions.Value",)),
    "describe_configs_topic_all": Known("`min.insync.replicas` is reported as a default",
                                        ("[1].min.insync.replicas.ConfigSource", "[1].message.format.version")),
    "create_topic_v7_with_configs": Known("`min.insync.replicas` is reported as a default",
                                          ("[3].min.insync.replicas[2]", "[3].message.format.version")),
    "create_topic_validate_only": Known("`min.insync.replicas` is reported as a default",
                                        ("[4].min.insync.replicas[2]", "[4].message.format.version")),
    "create_topic_manual_assignment": Known("`min.insync.replicas` is reported as a default",
                                            ("[0].Topics[0].Configs",)),
    "describe_producers_of_idempotent_and_transactional_writers": Known(
        "DescribeProducers' `LastTimestamp`", (".Topics[1].Partitions[0].ActiveProducers[0].LastTimestamp",
                                               ".Topics[0].Partitions[0].ActiveProducers[0].LastTimestamp")),
}
