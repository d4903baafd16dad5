//! Where to start reading or where to move a group: earliest, latest, an offset or a time.

use super::client::{self, Context};
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::{Offset, TopicPartitionList};
use std::time::Duration;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Position {
    Earliest,
    Latest,
    Offset(i64),
    /// Milliseconds since the epoch: the first record at or after it.
    Timestamp(i64),
}

impl std::str::FromStr for Position {
    type Err = String;

    /// `earliest`, `latest`, an offset (digits), `@MILLIS` or an RFC 3339 time such as
    /// 2026-12-02T10:00:00Z.
    fn from_str(s: &str) -> Result<Position, String> {
        match s {
            "earliest" | "beginning" => return Ok(Position::Earliest),
            "latest" | "end" => return Ok(Position::Latest),
            _ => {}
        }
        if let Ok(offset) = s.parse::<i64>() {
            return match offset >= 0 {
                true => Ok(Position::Offset(offset)),
                false => Err(format!("{s:?}: an offset is not negative")),
            };
        }
        if let Some(ms) = s.strip_prefix('@') {
            return ms
                .parse::<i64>()
                .map(Position::Timestamp)
                .map_err(|_| format!("{s:?}: @ takes milliseconds since the epoch"));
        }
        s.parse::<jiff::Timestamp>()
            .map(|t| Position::Timestamp(t.as_millisecond()))
            .map_err(|_| {
                format!("{s:?}: not earliest, latest, an offset, @MILLIS or an RFC 3339 time")
            })
    }
}

/// The offset `position` names in each of `partitions` of `topic`. An offset beyond the log
/// is clamped to it, and a time after the last record is the log's end, as Kafka's
/// kafka-consumer-groups tool does.
pub fn resolve(
    consumer: &BaseConsumer<Context>,
    topic: &str,
    partitions: &[i32],
    position: Position,
    timeout: Duration,
) -> anyhow::Result<Vec<(i32, i64)>> {
    let mut out = Vec::with_capacity(partitions.len());
    let times = match position {
        Position::Timestamp(ms) => {
            Some(offsets_for_time(consumer, topic, partitions, ms, timeout)?)
        }
        _ => None,
    };
    for (i, &p) in partitions.iter().enumerate() {
        let (low, high) = consumer
            .fetch_watermarks(topic, p, timeout)
            .map_err(|e| client::failed(consumer, &format!("offsets of {topic}-{p}"), e))?;
        let offset = match position {
            Position::Earliest => low,
            Position::Latest => high,
            Position::Offset(o) => o.clamp(low, high),
            Position::Timestamp(_) => times.as_ref().map_or(high, |t| t[i]).clamp(low, high),
        };
        out.push((p, offset));
    }
    Ok(out)
}

/// Per partition, the first offset whose record's time is at or after `ms` (the log end when
/// there is none).
fn offsets_for_time(
    consumer: &BaseConsumer<Context>,
    topic: &str,
    partitions: &[i32],
    ms: i64,
    timeout: Duration,
) -> anyhow::Result<Vec<i64>> {
    let mut tpl = TopicPartitionList::new();
    for &p in partitions {
        tpl.add_partition_offset(topic, p, Offset::Offset(ms))?;
    }
    let found = consumer
        .offsets_for_times(tpl, timeout)
        .map_err(|e| client::failed(consumer, &format!("offsets of {topic} at {ms} ms"), e))?;
    partitions
        .iter()
        .map(
            |&p| match found.find_partition(topic, p).map(|e| e.offset()) {
                Some(Offset::Offset(o)) => Ok(o),
                _ => Ok(i64::MAX),
            },
        )
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_form_parses_and_nonsense_is_named() {
        assert_eq!("earliest".parse(), Ok(Position::Earliest));
        assert_eq!("latest".parse(), Ok(Position::Latest));
        assert_eq!("42".parse(), Ok(Position::Offset(42)));
        assert_eq!(
            "@1700000000000".parse(),
            Ok(Position::Timestamp(1_700_000_000_000))
        );
        assert_eq!(
            "2023-11-14T22:13:20Z".parse(),
            Ok(Position::Timestamp(1_700_000_000_000))
        );
        let bad = "yesterday".parse::<Position>().unwrap_err();
        assert!(bad.contains("yesterday"), "{bad}");
        assert!("-3".parse::<Position>().is_err());
    }
}
