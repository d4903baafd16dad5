//! Broker sessions on the active controller (pure: times come in as arguments).
//!
//! Each heartbeat renews its broker's session; a broker silent for the session timeout is
//! fenced. A heartbeat from a new incarnation of a node id whose registration is alive is a
//! second process with the same id, and is refused, unless the node says it is the restart of
//! that registration (its data dir remembers the incarnation it registered with). A controller
//! that has just taken over has not timed anyone's heartbeats: it gives every broker a full
//! session from that moment (as Kafka's does).
//!
//! Invariant: a broker is fenced only after this controller saw it silent for a whole session.
//! A broker it has no time for (registered in a record it applied after taking over, before
//! any heartbeat of that broker reached it) is given a session from the moment it is first
//! seen, never counted as silent since the start of time.

use crate::storage::catalog::BrokerRecord;
use std::collections::HashMap;

/// What to do with a heartbeat.
#[derive(Debug, PartialEq, Eq)]
pub enum Decision {
    /// The registration stands as it is.
    Renew,
    /// Write a (new) registration to the log: a first start, a restart, or unfencing.
    Register,
    /// Another live process holds the node id.
    Duplicate(String),
}

/// Heartbeat times of the brokers, by node id (monotonic ms).
#[derive(Default)]
pub struct Sessions {
    last_seen_ms: HashMap<i32, u64>,
}

impl Sessions {
    /// A controller taking over: every broker's session starts now, the registered ones and
    /// those whose heartbeats reached this node before it noticed its new term (their
    /// registrations may not be applied yet: dropping their times would fence them at the
    /// next pass).
    pub fn take_over(&mut self, brokers: &[BrokerRecord], now_ms: u64) {
        for t in self.last_seen_ms.values_mut() {
            *t = now_ms;
        }
        for b in brokers {
            self.last_seen_ms.insert(b.node_id, now_ms);
        }
    }

    fn alive(&self, node_id: i32, now_ms: u64, timeout_ms: u64) -> bool {
        self.last_seen_ms
            .get(&node_id)
            .is_some_and(|t| now_ms.saturating_sub(*t) < timeout_ms)
    }

    /// Decides a heartbeat from (`node_id`, `incarnation`), which says its data dir last
    /// registered as `previous`; renews the session unless it is refused.
    pub fn heartbeat(
        &mut self,
        existing: Option<&BrokerRecord>,
        node_id: i32,
        incarnation: u64,
        previous: u64,
        now_ms: u64,
        timeout_ms: u64,
    ) -> Decision {
        let decision = match existing {
            None => Decision::Register,
            Some(b) if b.incarnation == incarnation && !b.fenced => Decision::Renew,
            Some(b) if b.incarnation == incarnation => Decision::Register,
            Some(b) if b.fenced || b.incarnation == previous => Decision::Register,
            Some(b) if self.alive(node_id, now_ms, timeout_ms) => Decision::Duplicate(format!(
                "node id {node_id} is held by a live broker at {} (incarnation {})",
                crate::storage::catalog::describe_endpoints(&b.listeners),
                b.incarnation
            )),
            Some(_) => Decision::Register,
        };
        if !matches!(decision, Decision::Duplicate(_)) {
            self.last_seen_ms.insert(node_id, now_ms);
        }
        decision
    }

    /// Brokers registered, not fenced, and silent for `timeout_ms`: (node id, incarnation). A
    /// broker seen here for the first time starts its session now.
    pub fn expired(
        &mut self,
        brokers: &[BrokerRecord],
        now_ms: u64,
        timeout_ms: u64,
    ) -> Vec<(i32, u64)> {
        for b in brokers.iter().filter(|b| !b.fenced) {
            self.last_seen_ms.entry(b.node_id).or_insert(now_ms);
        }
        brokers
            .iter()
            .filter(|b| !b.fenced && !self.alive(b.node_id, now_ms, timeout_ms))
            .map(|b| (b.node_id, b.incarnation))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn broker(id: i32, incarnation: u64, fenced: bool) -> BrokerRecord {
        BrokerRecord {
            node_id: id,
            incarnation,
            listeners: Vec::new(),
            rack: None,
            fenced,
        }
    }

    #[test]
    fn sessions_renew_expire_and_refuse_duplicates() {
        let mut s = Sessions::default();
        let timeout = 9_000;
        assert_eq!(s.heartbeat(None, 1, 5, 0, 0, timeout), Decision::Register);
        let b = broker(1, 5, false);
        assert_eq!(
            s.heartbeat(Some(&b), 1, 5, 0, 1_000, timeout),
            Decision::Renew
        );
        assert!(s
            .expired(std::slice::from_ref(&b), 9_999, timeout)
            .is_empty());
        assert_eq!(
            s.expired(std::slice::from_ref(&b), 10_000, timeout),
            vec![(1, 5)]
        );
        // Another process with the same id, while the first is alive: refused.
        let d = s.heartbeat(Some(&b), 1, 6, 0, 2_000, timeout);
        assert!(matches!(d, Decision::Duplicate(m) if m.contains("node id 1")));
        // ... and its refused heartbeats did not renew the session.
        assert_eq!(
            s.expired(std::slice::from_ref(&b), 10_000, timeout),
            vec![(1, 5)]
        );
        // The restart of the same node takes over at once.
        assert_eq!(
            s.heartbeat(Some(&b), 1, 6, 5, 2_000, timeout),
            Decision::Register
        );
        // Once the old session expired, anyone may register the id.
        assert_eq!(
            s.heartbeat(Some(&b), 1, 7, 0, 20_000, timeout),
            Decision::Register
        );
        // A fenced broker that comes back is registered again.
        let fenced = broker(1, 7, true);
        assert_eq!(
            s.heartbeat(Some(&fenced), 1, 7, 0, 21_000, timeout),
            Decision::Register
        );
    }

    /// Issue 36: the controller's duty loop commits a fencing; one that fails (no quorum) is
    /// not remembered anywhere but the catalog, so the broker is listed again at every pass
    /// until its record says fenced.
    #[test]
    fn a_fencing_not_committed_is_asked_for_again() {
        let mut s = Sessions::default();
        let b = broker(1, 7, false);
        s.take_over(std::slice::from_ref(&b), 0);
        for pass_ms in [200, 250, 300] {
            assert_eq!(
                s.expired(std::slice::from_ref(&b), pass_ms, 100),
                vec![(1, 7)]
            );
        }
        let fenced = broker(1, 7, true);
        assert!(s
            .expired(std::slice::from_ref(&fenced), 350, 100)
            .is_empty());
    }

    #[test]
    fn a_new_controller_gives_every_broker_a_full_session() {
        let mut s = Sessions::default();
        let brokers = [broker(1, 1, false), broker(2, 1, false)];
        s.take_over(&brokers, 1_000);
        assert!(s.expired(&brokers, 1_050, 100).is_empty());
        assert_eq!(s.expired(&brokers, 1_100, 100).len(), 2);
    }

    /// CI, stop 52: the brokers registered with a new controller before its duty pass noticed
    /// the term; the take-over ran on an image without their registrations and dropped their
    /// heartbeat times, and the next pass fenced all three 0.4 s after they registered.
    #[test]
    fn heartbeats_before_the_take_over_and_unseen_brokers_keep_a_full_session() {
        let mut s = Sessions::default();
        assert_eq!(s.heartbeat(None, 1, 5, 0, 1_000, 100), Decision::Register);
        s.take_over(&[], 1_050);
        let registered = [broker(1, 5, false), broker(2, 8, false)];
        // Broker 1 heartbeated before the take-over; broker 2's registration was applied
        // without a heartbeat here: neither has been silent for a session.
        assert!(s.expired(&registered, 1_100, 100).is_empty());
        assert_eq!(s.expired(&registered, 1_150, 100), vec![(1, 5)]);
        assert_eq!(s.expired(&registered, 1_200, 100), vec![(1, 5), (2, 8)]);
    }
}
