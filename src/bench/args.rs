//! `sluice bench` options.

use clap::{Args, ValueEnum};
use std::path::PathBuf;

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Mode {
    /// Producers only; latency is send to acknowledgement.
    Produce,
    /// Consumers only; latency is the record's timestamp to its receipt.
    Consume,
    /// Producers and consumers; latency is send to receipt, from a timestamp in the payload.
    E2e,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Acks {
    #[value(name = "0")]
    Zero,
    #[value(name = "1")]
    One,
    #[value(name = "all")]
    All,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Compression {
    None,
    Gzip,
    Snappy,
    Lz4,
    Zstd,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum From {
    Earliest,
    Latest,
}

/// Keys: `none`, `random`, or a number N for N distinct keys used round-robin.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Keys {
    None,
    Random,
    Distinct(u64),
}

pub fn parse_keys(s: &str) -> Result<Keys, String> {
    match s {
        "none" => Ok(Keys::None),
        "random" => Ok(Keys::Random),
        n => match n.strip_suffix("-distinct").unwrap_or(n).parse::<u64>() {
            Ok(k) if k > 0 => Ok(Keys::Distinct(k)),
            _ => Err(format!("{s:?} is not none, random or N-distinct")),
        },
    }
}

#[derive(Debug, Clone, Args)]
pub struct BenchArgs {
    /// Broker to drive: any Kafka-compatible broker.
    #[arg(long)]
    pub bootstrap: String,
    #[arg(long)]
    pub topic: String,
    #[arg(long, value_enum, default_value = "produce")]
    pub mode: Mode,
    /// Run this long (after the warm-up). Default 10 s when --count is not given.
    #[arg(long, conflicts_with = "count")]
    pub duration: Option<f64>,
    /// Stop after this many records (produced, or consumed in consume mode).
    #[arg(long)]
    pub count: Option<u64>,
    /// Seconds measured but not reported, at the start of a --duration run.
    #[arg(long, default_value_t = 0.0)]
    pub warmup: f64,
    #[arg(long, default_value_t = 1)]
    pub producers: usize,
    #[arg(long, default_value_t = 1)]
    pub consumers: usize,
    /// Partitions of the topic, when the bench creates it.
    #[arg(long, default_value_t = 8)]
    pub partitions: i32,
    /// Replicas of each partition, when the bench creates the topic.
    #[arg(long, default_value_t = 1)]
    pub replication_factor: i32,
    #[arg(long, default_value_t = 1024)]
    pub message_size: usize,
    #[arg(long, default_value = "none", value_parser = parse_keys)]
    pub keys: Keys,
    #[arg(long, value_enum, default_value = "all")]
    pub acks: Acks,
    #[arg(long, value_enum, default_value = "none")]
    pub compression: Compression,
    #[arg(long, default_value_t = 5)]
    pub linger_ms: u64,
    #[arg(long, default_value_t = 1_000_000)]
    pub batch_size: usize,
    /// Total send rate across producers; latency is then measured from each record's intended
    /// send time, so a stalled broker is not hidden (no coordinated omission).
    #[arg(long)]
    pub rate: Option<f64>,
    /// Pin producer and consumer threads to cores, one each in turn. Only where the bench has
    /// cores of its own: sharing a core with a pinned broker shard adds scheduler slices to
    /// every latency.
    #[arg(long)]
    pub pin: bool,
    /// Where consume mode starts.
    #[arg(long, value_enum, default_value = "earliest")]
    pub from: From,
    /// Write every figure as JSON to this file.
    #[arg(long)]
    pub json: Option<PathBuf>,
    /// Idempotent producers (librdkafka's `enable.idempotence`): the baseline that
    /// --transaction-records is compared with. Needs --acks all.
    #[arg(long)]
    pub idempotence: bool,
    /// Transactional producers: each commits a transaction every N records (and at the end);
    /// the report adds commits per second and the commit latency (the flush of the
    /// transaction's last records, then EndTxn). Needs --acks all.
    #[arg(long)]
    pub transaction_records: Option<u64>,
    /// Any librdkafka setting for the bench's clients, applied last (repeatable): for a secured
    /// broker, `-X security.protocol=SASL_SSL -X sasl.mechanism=SCRAM-SHA-512 ...`.
    #[arg(short = 'X', long = "client-config", value_name = "KEY=VALUE", value_parser = crate::config::key_value)]
    pub client_config: Vec<(String, String)>,
}

/// The largest --transaction-records: a transaction's records are held by the client until it
/// commits.
pub const TRANSACTION_RECORDS_MAX: u64 = 1_000_000;

/// Bytes at the start of each payload: intended send time (ns since the run's epoch),
/// producer id, sequence number.
pub const PAYLOAD_HEADER_BYTES: usize = 20;

impl BenchArgs {
    pub fn validate(&self) -> Result<(), String> {
        if self.message_size < PAYLOAD_HEADER_BYTES {
            return Err(format!(
                "--message-size must be at least {PAYLOAD_HEADER_BYTES}"
            ));
        }
        if self.producers == 0
            || self.producers > 1024
            || self.consumers == 0
            || self.consumers > 1024
        {
            return Err("--producers and --consumers must be in 1..=1024".into());
        }
        if self.partitions < 1 {
            return Err("--partitions must be at least 1".into());
        }
        if !(1..=16).contains(&self.replication_factor) {
            return Err("--replication-factor must be in 1..=16".into());
        }
        if let Some(d) = self.duration {
            if !(d > 0.0 && d.is_finite()) {
                return Err("--duration must be positive".into());
            }
        }
        if self.count == Some(0) {
            return Err("--count must be positive".into());
        }
        if let Some(r) = self.rate {
            if !(r > 0.0 && r.is_finite()) {
                return Err("--rate must be positive".into());
            }
        }
        if let Some(n) = self.transaction_records {
            if !(1..=TRANSACTION_RECORDS_MAX).contains(&n) {
                return Err(format!(
                    "--transaction-records must be in 1..={TRANSACTION_RECORDS_MAX}"
                ));
            }
        }
        if (self.idempotence || self.transaction_records.is_some()) && self.acks != Acks::All {
            return Err("--idempotence and --transaction-records need --acks all".into());
        }
        if !(self.warmup >= 0.0 && self.warmup.is_finite()) {
            return Err("--warmup must be zero or positive".into());
        }
        Ok(())
    }

    pub fn acks_str(&self) -> &'static str {
        match self.acks {
            Acks::Zero => "0",
            Acks::One => "1",
            Acks::All => "all",
        }
    }

    pub fn compression_str(&self) -> &'static str {
        match self.compression {
            Compression::None => "none",
            Compression::Gzip => "gzip",
            Compression::Snappy => "snappy",
            Compression::Lz4 => "lz4",
            Compression::Zstd => "zstd",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys() {
        assert_eq!(parse_keys("none"), Ok(Keys::None));
        assert_eq!(parse_keys("random"), Ok(Keys::Random));
        assert_eq!(parse_keys("100-distinct"), Ok(Keys::Distinct(100)));
        assert_eq!(parse_keys("7"), Ok(Keys::Distinct(7)));
        assert!(parse_keys("0").is_err());
        assert!(parse_keys("lots").is_err());
    }
}
