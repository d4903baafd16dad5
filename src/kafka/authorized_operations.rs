//! Authorized operations (KIP-430): the bit field Metadata, DescribeCluster and DescribeGroups
//! answer when a client asks (`include_*_authorized_operations`), one bit per ACL operation
//! code. With no authorizer, Kafka reports every operation a resource type supports as
//! allowed, and so does Sluice until it has one (issue 19 gives each principal its own set).

/// ACL operation codes (Kafka's `AclOperation`).
const READ: u8 = 3;
const WRITE: u8 = 4;
const CREATE: u8 = 5;
const DELETE: u8 = 6;
const ALTER: u8 = 7;
const DESCRIBE: u8 = 8;
const CLUSTER_ACTION: u8 = 9;
const DESCRIBE_CONFIGS: u8 = 10;
const ALTER_CONFIGS: u8 = 11;
const IDEMPOTENT_WRITE: u8 = 12;

/// What a response carries when the client did not ask (Kafka's `Integer.MIN_VALUE`).
pub const NOT_REQUESTED: i32 = i32::MIN;

fn field(operations: &[u8]) -> i32 {
    operations.iter().fold(0, |bits, &op| bits | 1 << op)
}

/// Every operation on a topic.
pub fn topic() -> i32 {
    field(&[
        READ,
        WRITE,
        CREATE,
        DELETE,
        ALTER,
        DESCRIBE,
        DESCRIBE_CONFIGS,
        ALTER_CONFIGS,
    ])
}

/// Every operation on a consumer group.
pub fn group() -> i32 {
    field(&[READ, DELETE, DESCRIBE])
}

/// Every operation on the cluster.
pub fn cluster() -> i32 {
    field(&[
        CREATE,
        ALTER,
        DESCRIBE,
        CLUSTER_ACTION,
        DESCRIBE_CONFIGS,
        ALTER_CONFIGS,
        IDEMPOTENT_WRITE,
    ])
}

#[cfg(test)]
mod tests {
    /// The values Kafka answers without an authorizer.
    #[test]
    fn kafka_values() {
        assert_eq!(super::topic(), 3576);
        assert_eq!(super::group(), 328);
        assert_eq!(super::cluster(), 8096);
    }
}
