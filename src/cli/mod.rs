//! The operator's command line (`sluice topic|produce|consume|group|cluster|user|acl`), built on
//! librdkafka (the `rdkafka` crate) like `sluice bench`, so that it works against any
//! Kafka-compatible broker. Tables for people, JSON (`--format json`) for scripts; a failure is
//! one line on stderr naming its cause and a non-zero exit, bounded by `--timeout-s`.
//!
//! It uses nothing of the broker: it is a client, at the top layer beside `bench`.

mod acl;
pub mod args;
mod client;
mod cluster;
mod consume;
mod group;
mod native_admin;
mod output;
mod position;
mod produce;
mod topic;
mod topic_admin;
mod user;

pub use args::Tool;

/// Runs `tool`; the process's exit status on success (cluster health: 3 when unhealthy).
pub fn run(tool: Tool) -> anyhow::Result<i32> {
    match tool {
        Tool::Topic(c) => topic::run(c),
        Tool::Produce(a) => produce::run(a),
        Tool::Consume(a) => consume::run(a),
        Tool::Group(c) => group::run(c),
        Tool::Cluster(c) => cluster::run(c),
        Tool::User(c) => user::run(c),
        Tool::Acl(c) => acl::run(c),
    }
}
