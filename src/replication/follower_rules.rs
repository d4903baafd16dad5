//! The follower's decisions for one partition, without I/O: what it asks its leader next, and
//! what it does with the leader's fetch answer. Production's fetch loop (`fetcher.rs`) and the
//! simulator's (`sim/replication.rs`) both run them, so a change here is tested by both.

use crate::partition::replica_state::FollowerView;
use kafka_protocol::ResponseError;

/// What a follower sends its leader next for one partition.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ask {
    /// OffsetsForLeaderEpoch: where the follower's newest epoch (`latest`) ends on the leader,
    /// asked in the follower's current leader epoch `epoch` (a tail to check first).
    EpochEnd { epoch: i32, latest: i32 },
    /// Fetch from `offset` (the log end, which the follower synced before asking: the offset
    /// tells the leader what is durable here) in leader epoch `epoch`.
    Fetch { epoch: i32, offset: i64 },
}

/// The next request for a followed partition.
pub fn next_ask(view: &FollowerView) -> Ask {
    match view.needs_truncation {
        true => Ask::EpochEnd {
            epoch: view.epoch,
            latest: view.latest_epoch,
        },
        false => Ask::Fetch {
            epoch: view.epoch,
            offset: view.log_end_offset,
        },
    }
}

/// One partition of the leader's fetch answer, as a follower reads it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Fetched {
    pub error: Option<ResponseError>,
    /// The base offset of the first batch sent, if any came.
    pub first_base: Option<i64>,
    pub high_watermark: i64,
    pub log_start_offset: i64,
}

impl Fetched {
    /// One partition of a Fetch response: its error code, the records that came (the first
    /// batch's base offset is their first 8 bytes), the leader's high watermark and log start.
    pub fn of(
        error_code: i16,
        records: Option<&bytes::Bytes>,
        (high_watermark, log_start_offset): (i64, i64),
    ) -> Fetched {
        let first_base = records
            .and_then(|r| r.get(..8))
            .map(|head| i64::from_be_bytes(head.try_into().expect("8 bytes")));
        Fetched {
            error: ResponseError::try_from_code(error_code),
            first_base,
            high_watermark,
            log_start_offset,
        }
    }
}

/// What a follower does with one partition's fetch answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reaction {
    /// Append the batches; an empty log first moves back to `restart_at`, the base of the
    /// batch holding the leader's log start (DeleteRecords moves a log start inside a batch),
    /// as Kafka's follower does on an UnexpectedAppendOffsetException.
    Append { restart_at: Option<i64> },
    /// Nothing new: the log end stands; the leader's high watermark and log start are taken.
    Nothing,
    /// Everything here is older than what the leader keeps: start over, empty, at its log
    /// start (Kafka's rule for a fetch below the leader's log start).
    RestartAt(i64),
    /// The leader has no records where this log ends (a tail it never had): cut to its high
    /// watermark and fetch again.
    TruncateTo(i64),
    /// Not the leader any more, or a newer epoch there: back off until the catalog catches up.
    Stale,
}

/// The follower's reaction to `fetched`, for a partition whose log spans
/// `log_start..view.log_end_offset`.
pub fn react(view: &FollowerView, log_start: i64, fetched: &Fetched) -> Reaction {
    let end = view.log_end_offset;
    match fetched.error {
        Some(ResponseError::OffsetOutOfRange) if end < fetched.log_start_offset => {
            Reaction::RestartAt(fetched.log_start_offset)
        }
        Some(ResponseError::OffsetOutOfRange) => Reaction::TruncateTo(fetched.high_watermark),
        Some(_) => Reaction::Stale,
        None => match fetched.first_base {
            None => Reaction::Nothing,
            Some(base) => Reaction::Append {
                restart_at: (log_start == end && base < end).then_some(base),
            },
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn view(log_end_offset: i64, needs_truncation: bool) -> FollowerView {
        FollowerView {
            leader: 1,
            epoch: 4,
            log_end_offset,
            latest_epoch: 2,
            needs_truncation,
        }
    }

    fn fetched(error: Option<ResponseError>, first_base: Option<i64>) -> Fetched {
        Fetched {
            error,
            first_base,
            high_watermark: 30,
            log_start_offset: 10,
        }
    }

    #[test]
    fn a_follower_checks_its_tail_before_it_fetches_from_its_end() {
        let latest = 2;
        assert_eq!(
            next_ask(&view(20, true)),
            Ask::EpochEnd { epoch: 4, latest }
        );
        assert_eq!(
            next_ask(&view(20, false)),
            Ask::Fetch {
                epoch: 4,
                offset: 20
            }
        );
    }

    #[test]
    fn out_of_range_below_the_leaders_start_restarts_and_past_its_end_truncates() {
        let out_of_range = fetched(Some(ResponseError::OffsetOutOfRange), None);
        assert_eq!(
            react(&view(5, false), 0, &out_of_range),
            Reaction::RestartAt(10)
        );
        assert_eq!(
            react(&view(40, false), 0, &out_of_range),
            Reaction::TruncateTo(30)
        );
        let fenced = fetched(Some(ResponseError::FencedLeaderEpoch), None);
        assert_eq!(react(&view(20, false), 0, &fenced), Reaction::Stale);
    }

    #[test]
    fn an_empty_log_moves_back_to_the_batch_holding_the_leaders_start() {
        let sent = fetched(None, Some(8));
        let restart_at = Some(8);
        assert_eq!(
            react(&view(10, false), 10, &sent),
            Reaction::Append { restart_at }
        );
        let continuing = fetched(None, Some(20));
        let appended = Reaction::Append { restart_at: None };
        assert_eq!(react(&view(20, false), 10, &continuing), appended);
        assert_eq!(
            react(&view(20, false), 10, &fetched(None, None)),
            Reaction::Nothing
        );
    }
}
