//! The operator commands' command line (a contract, issue 20): every command takes
//! `--brokers` (default `$SLUICE_BROKERS`, else 127.0.0.1:9092), `--format table|json` and
//! `--timeout-s`.

pub use crate::config::key_value;
use clap::{Args, Subcommand, ValueEnum};

/// The operator commands, flattened into `sluice`'s own.
#[derive(Subcommand, Debug)]
pub enum Tool {
    /// Create, list, describe, alter and delete topics.
    #[command(subcommand)]
    Topic(TopicCommand),
    /// Produce one record per line of standard input; exit non-zero if any record failed.
    ///
    /// Examples:
    ///   printf 'a\nb\n' | sluice produce orders
    ///   printf 'k1:v1\n' | sluice produce orders --key-separator : -H source=cli
    Produce(ProduceArgs),
    /// Print a topic's records: values (table format) or one JSON object per line with key,
    /// headers, partition, offset and timestamp. Keys and values print as UTF-8, invalid bytes
    /// replaced.
    ///
    /// Examples:
    ///   sluice consume orders -n 10 --from earliest
    ///   sluice consume orders --group billing --format json
    ///   sluice consume orders -p 0 --from 42
    ///   sluice consume orders --from 2026-12-02T10:00:00Z
    Consume(ConsumeArgs),
    /// List, describe, seek and delete consumer groups.
    #[command(subcommand)]
    Group(GroupCommand),
    /// The cluster's brokers, controller and health.
    #[command(subcommand)]
    Cluster(ClusterCommand),
    /// Set, list and delete SCRAM users (a SASL cluster's logins).
    #[command(subcommand)]
    User(UserCommand),
    /// Add, list and remove ACLs (Kafka's `kafka-acls` flags).
    #[command(subcommand)]
    Acl(AclCommand),
}

#[derive(Subcommand, Debug)]
pub enum AclCommand {
    /// Add an ACL for each principal, host, operation and resource given.
    ///
    /// Example: sluice acl add --allow-principal User:alice --operation Read --operation Describe --topic orders
    Add {
        #[command(flatten)]
        acl: AclArgs,
        #[command(flatten)]
        common: Common,
    },
    /// The ACLs of the resources and principals given (every ACL when none is given).
    ///
    /// Example: sluice acl list --topic orders --format json
    List {
        #[command(flatten)]
        acl: AclArgs,
        #[command(flatten)]
        common: Common,
    },
    /// Remove the ACLs of a resource (those of the principals, hosts and operations given, or
    /// all of them), and print what was removed.
    ///
    /// Example: sluice acl remove --allow-principal User:alice --operation Read --topic orders
    Remove {
        #[command(flatten)]
        acl: AclArgs,
        #[command(flatten)]
        common: Common,
    },
}

/// An ACL command's principals, hosts, operations and resources, as `kafka-acls` names them.
#[derive(Args, Clone, Debug)]
pub struct AclArgs {
    /// A principal the ACLs allow (User:NAME; repeatable).
    #[arg(long = "allow-principal")]
    pub allow_principals: Vec<String>,
    /// A principal the ACLs deny (repeatable).
    #[arg(long = "deny-principal")]
    pub deny_principals: Vec<String>,
    /// `list`: the principal whose ACLs to show, allowed or denied (repeatable).
    #[arg(long = "principal")]
    pub principals: Vec<String>,
    /// The hosts the allowing ACLs name (default `*`, any host).
    #[arg(long = "allow-host")]
    pub allow_hosts: Vec<String>,
    /// The hosts the denying ACLs name (default `*`).
    #[arg(long = "deny-host")]
    pub deny_hosts: Vec<String>,
    #[arg(long = "operation", value_enum, ignore_case = true)]
    pub operations: Vec<AclOperation>,
    #[arg(long = "topic")]
    pub topics: Vec<String>,
    #[arg(long = "group")]
    pub groups: Vec<String>,
    #[arg(long = "transactional-id")]
    pub transactional_ids: Vec<String>,
    /// The cluster itself (its one resource, `kafka-cluster`).
    #[arg(long)]
    pub cluster: bool,
    /// How the resource names match: literal or prefixed; `list` and `remove` also take any
    /// (either) and match (every ACL that applies to the name).
    #[arg(long = "resource-pattern-type", value_enum, ignore_case = true, default_value_t = PatternType::Literal)]
    pub pattern: PatternType,
}

/// An ACL operation, by `kafka-acls`' name.
#[derive(ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum AclOperation {
    All,
    Read,
    Write,
    Create,
    Delete,
    Alter,
    Describe,
    #[value(name = "ClusterAction")]
    ClusterAction,
    #[value(name = "DescribeConfigs")]
    DescribeConfigs,
    #[value(name = "AlterConfigs")]
    AlterConfigs,
    #[value(name = "IdempotentWrite")]
    IdempotentWrite,
}

/// A resource pattern type, by `kafka-acls`' name.
#[derive(ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum PatternType {
    Literal,
    Prefixed,
    Any,
    Match,
}

#[derive(Subcommand, Debug)]
pub enum UserCommand {
    /// Create a user's SCRAM credential, or replace its password.
    ///
    /// Example: sluice user set alice --password 'alice-secret' --mechanism SCRAM-SHA-512
    Set {
        name: String,
        #[arg(long)]
        password: String,
        #[arg(long, value_enum, default_value_t = Mechanism::Sha512)]
        mechanism: Mechanism,
        /// PBKDF2 iterations (Kafka's minimum and default is 4096).
        #[arg(long, default_value_t = 4096)]
        iterations: i32,
        #[command(flatten)]
        common: Common,
    },
    /// Users and their SCRAM mechanisms (all users, or those named).
    ///
    /// Example: sluice user list --format json
    List {
        names: Vec<String>,
        #[command(flatten)]
        common: Common,
    },
    /// Delete a user's credentials (every mechanism it has, or those named).
    ///
    /// Example: sluice user delete alice --mechanism SCRAM-SHA-256
    Delete {
        name: String,
        #[arg(long = "mechanism", value_enum)]
        mechanisms: Vec<Mechanism>,
        #[command(flatten)]
        common: Common,
    },
}

/// A SCRAM mechanism, by Kafka's name.
#[derive(ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mechanism {
    #[value(name = "SCRAM-SHA-256")]
    Sha256,
    #[value(name = "SCRAM-SHA-512")]
    Sha512,
}

impl Mechanism {
    pub fn name(self) -> &'static str {
        match self {
            Mechanism::Sha256 => "SCRAM-SHA-256",
            Mechanism::Sha512 => "SCRAM-SHA-512",
        }
    }

    pub fn native(self) -> rdkafka::bindings::rd_kafka_ScramMechanism_t {
        use rdkafka::bindings::rd_kafka_ScramMechanism_t::*;
        match self {
            Mechanism::Sha256 => RD_KAFKA_SCRAM_MECHANISM_SHA_256,
            Mechanism::Sha512 => RD_KAFKA_SCRAM_MECHANISM_SHA_512,
        }
    }

    pub fn of(native: rdkafka::bindings::rd_kafka_ScramMechanism_t) -> Option<Mechanism> {
        use rdkafka::bindings::rd_kafka_ScramMechanism_t::*;
        match native {
            RD_KAFKA_SCRAM_MECHANISM_SHA_256 => Some(Mechanism::Sha256),
            RD_KAFKA_SCRAM_MECHANISM_SHA_512 => Some(Mechanism::Sha512),
            _ => None,
        }
    }
}

#[derive(Args, Clone, Debug)]
pub struct Common {
    /// Bootstrap brokers, HOST:PORT[,...].
    #[arg(long, env = "SLUICE_BROKERS", default_value = "127.0.0.1:9092")]
    pub brokers: String,
    /// Output: a table for people, JSON for scripts.
    #[arg(long, value_enum, default_value_t = Format::Table)]
    pub format: Format,
    /// How long one request to the cluster may take before the command fails, in seconds.
    #[arg(long, default_value_t = 10)]
    pub timeout_s: u64,
    /// A librdkafka setting for the command's clients, KEY=VALUE (repeatable), as kcat's -X:
    /// security.protocol, sasl.mechanism, sasl.username, ssl.ca.location, ...
    #[arg(short = 'X', long = "client-config", value_name = "KEY=VALUE", value_parser = key_value)]
    pub client_config: Vec<(String, String)>,
}

#[derive(ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    Table,
    Json,
}

#[derive(Subcommand, Debug)]
pub enum TopicCommand {
    /// Create a topic.
    ///
    /// Example: sluice topic create orders -p 6 -r 3 -c retention.ms=86400000
    Create {
        name: String,
        /// Partitions.
        #[arg(short, long, default_value_t = 1)]
        partitions: i32,
        /// Replicas of each partition.
        #[arg(short, long, default_value_t = 1)]
        replicas: i32,
        /// A topic config, KEY=VALUE (repeatable).
        #[arg(short, long = "config", value_name = "KEY=VALUE", value_parser = key_value)]
        configs: Vec<(String, String)>,
        #[command(flatten)]
        common: Common,
    },
    /// List topics with their partition and replica counts.
    ///
    /// Example: sluice topic list --format json
    List {
        #[command(flatten)]
        common: Common,
    },
    /// A topic's partitions (leader, replicas, ISR, log start, high watermark) and the configs
    /// that differ from their defaults.
    ///
    /// Example: sluice topic describe orders
    Describe {
        name: String,
        #[command(flatten)]
        common: Common,
    },
    /// Set or remove a topic's config overrides; the others stay as they are.
    ///
    /// Example: sluice topic alter-config orders --set retention.ms=3600000 --delete cleanup.policy
    AlterConfig {
        name: String,
        /// KEY=VALUE to set (repeatable).
        #[arg(long = "set", value_name = "KEY=VALUE", value_parser = key_value)]
        sets: Vec<(String, String)>,
        /// KEY to return to its default (repeatable).
        #[arg(long = "delete", value_name = "KEY")]
        deletes: Vec<String>,
        #[command(flatten)]
        common: Common,
    },
    /// Grow a topic to TOTAL partitions.
    ///
    /// Example: sluice topic add-partitions orders -n 12
    AddPartitions {
        name: String,
        /// The partition count after the change.
        #[arg(short = 'n', long = "total")]
        total: usize,
        #[command(flatten)]
        common: Common,
    },
    /// Delete topics.
    ///
    /// Example: sluice topic delete orders payments
    Delete {
        #[arg(required = true)]
        names: Vec<String>,
        #[command(flatten)]
        common: Common,
    },
}

/// `sluice produce`'s arguments (its help is `Tool::Produce`'s).
#[derive(Args, Debug)]
pub struct ProduceArgs {
    pub topic: String,
    /// Send every record to this partition (default: the partitioner's choice).
    #[arg(short, long)]
    pub partition: Option<i32>,
    /// The key of every record.
    #[arg(short, long, conflicts_with = "key_separator")]
    pub key: Option<String>,
    /// Split each line at the first SEP into key and value.
    #[arg(long, value_name = "SEP")]
    pub key_separator: Option<String>,
    /// A header of every record, KEY=VALUE (repeatable).
    #[arg(short = 'H', long = "header", value_name = "KEY=VALUE", value_parser = key_value)]
    pub headers: Vec<(String, String)>,
    /// Acknowledgements to wait for: 0, 1 or all.
    #[arg(long, default_value = "all", value_parser = ["0", "1", "all", "-1"])]
    pub acks: String,
    #[command(flatten)]
    pub common: Common,
}

/// `sluice consume`'s arguments (its help is `Tool::Consume`'s).
#[derive(Args, Debug)]
pub struct ConsumeArgs {
    pub topic: String,
    /// Read only this partition (default: all of them).
    #[arg(short, long)]
    pub partition: Option<i32>,
    /// Stop after COUNT records (default: run until interrupted).
    #[arg(short = 'n', long)]
    pub count: Option<u64>,
    /// Where to start: earliest, latest, an OFFSET, or a TIMESTAMP (RFC 3339, or @MILLIS).
    /// With --group, the group's committed offsets come first.
    #[arg(long)]
    pub from: Option<String>,
    /// Consume as a member of this group, committing what was printed.
    #[arg(short, long)]
    pub group: Option<String>,
    #[command(flatten)]
    pub common: Common,
}

#[derive(Subcommand, Debug)]
pub enum GroupCommand {
    /// List the groups.
    ///
    /// Example: sluice group list
    List {
        #[command(flatten)]
        common: Common,
    },
    /// A group's state, members and assignments, and per partition the committed offset, the
    /// end offset and the lag.
    ///
    /// Example: sluice group describe billing --format json
    Describe {
        group: String,
        #[command(flatten)]
        common: Common,
    },
    /// Move an empty group's committed offsets of a topic.
    ///
    /// Example: sluice group seek billing --topic orders --to earliest
    Seek {
        group: String,
        #[arg(long)]
        topic: String,
        /// earliest, latest, an OFFSET, or a TIMESTAMP (RFC 3339, or @MILLIS).
        #[arg(long)]
        to: String,
        #[command(flatten)]
        common: Common,
    },
    /// Delete groups (only empty ones: the broker refuses others).
    ///
    /// Example: sluice group delete billing
    Delete {
        #[arg(required = true)]
        groups: Vec<String>,
        #[command(flatten)]
        common: Common,
    },
}

#[derive(Subcommand, Debug)]
pub enum ClusterCommand {
    /// Brokers, the controller, the cluster id and versions.
    ///
    /// Example: sluice cluster info
    Info {
        #[command(flatten)]
        common: Common,
    },
    /// Under-replicated and leaderless partitions and unreachable brokers. Exit status 0 when
    /// healthy, 3 when not (1 when the cluster could not be asked).
    ///
    /// Example: sluice cluster health || page-someone
    Health {
        #[command(flatten)]
        common: Common,
    },
}
