//! The coordinator driven by a fake clock: every state transition, each timeout reached by
//! moving the clock, never by sleeping.

use super::*;
use crate::clock::{Clock, ManualClock, SeededIds};

const SESSION_MS: i32 = 10_000;
const REBALANCE_MS: i32 = 20_000;

/// A coordinator and the clock that drives it.
struct Harness {
    c: Coordinator,
    clock: ManualClock,
}

impl Harness {
    fn new() -> Harness {
        Harness::with(CoordinatorConfig {
            initial_rebalance_delay_ms: 0,
            min_session_timeout_ms: 6000,
            max_groups: 100,
            max_member_timers: 1000,
        })
    }

    fn with(config: CoordinatorConfig) -> Harness {
        let clock = ManualClock::new(1_000, 1_700_000_000_000);
        Harness {
            c: Coordinator::new(clock.monotonic_ms(), config, Box::new(SeededIds::new(7))),
            clock,
        }
    }

    fn now(&self) -> u64 {
        self.clock.monotonic_ms()
    }

    /// Moves the clock and fires what is due.
    fn advance(&mut self, ms: u64) {
        self.clock.advance(ms);
        let now = self.now();
        self.c.tick(now);
    }

    fn join(&mut self, req: JoinRequest) -> Reply<JoinResponse> {
        let now = self.now();
        self.c.join(now, req)
    }

    /// A new member's first join (KIP-394): bounced with its member id, which it rejoins with.
    /// Returns the id; the rejoin is parked (or answered, in `outputs`).
    fn enter(&mut self, group: &str) -> String {
        let Reply::Now(r) = self.join(join_req(group, "", None)) else {
            panic!("a join without a member id is answered at once")
        };
        assert_eq!(r.error_code, ResponseError::MemberIdRequired.code());
        let Reply::Later(id) = self.join(join_req(group, &r.member_id, None)) else {
            panic!("the rejoin parks until the rebalance completes")
        };
        id
    }

    fn rejoin(&mut self, group: &str, member: &str) {
        let Reply::Later(_) = self.join(join_req(group, member, None)) else {
            panic!("a known member's join parks")
        };
    }

    fn sync(
        &mut self,
        group: &str,
        member: &str,
        generation: i32,
        assign: &[(&str, &str)],
    ) -> Reply<SyncResponse> {
        let now = self.now();
        let assignments = assign
            .iter()
            .map(|(m, a)| (m.to_string(), Bytes::copy_from_slice(a.as_bytes())))
            .collect();
        self.c
            .sync(now, group, member, generation, None, assignments)
    }

    fn heartbeat(&mut self, group: &str, member: &str, generation: i32) -> i16 {
        let now = self.now();
        self.c.heartbeat(now, group, member, generation, None)
    }

    fn leave(&mut self, group: &str, members: &[(&str, Option<&str>)]) -> Vec<i16> {
        let now = self.now();
        let members: Vec<_> = members
            .iter()
            .map(|(m, i)| (m.to_string(), i.map(str::to_string)))
            .collect();
        self.c.leave(now, group, &members).1
    }

    fn state(&self, group: &str) -> State {
        self.c.groups[group].state
    }

    /// One member, joined and synced: a Stable group at generation 1.
    fn stable_one(&mut self, group: &str) -> String {
        let a = self.enter(group);
        self.c.take_outputs();
        self.sync(group, &a, 1, &[(&a, "A")]);
        self.c.take_outputs();
        assert_eq!(self.state(group), State::Stable);
        a
    }
}

fn join_req(group: &str, member: &str, instance: Option<&str>) -> JoinRequest {
    JoinRequest {
        group_id: group.into(),
        member_id: member.into(),
        group_instance_id: instance.map(Into::into),
        client_id: "c".into(),
        client_host: "/127.0.0.1".into(),
        session_timeout_ms: SESSION_MS,
        rebalance_timeout_ms: REBALANCE_MS,
        protocol_type: "consumer".into(),
        protocols: vec![("range".into(), Bytes::from_static(b"meta"))],
        require_known_member_id: true,
    }
}

fn joined(outputs: &[Output], member: &str) -> Option<JoinResponse> {
    outputs.iter().find_map(|o| match o {
        Output::Join {
            member_id,
            response,
            ..
        } if member_id == member => Some(response.clone()),
        _ => None,
    })
}

fn synced(outputs: &[Output], member: &str) -> Option<SyncResponse> {
    outputs.iter().find_map(|o| match o {
        Output::Sync {
            member_id,
            response,
            ..
        } if member_id == member => Some(response.clone()),
        _ => None,
    })
}

fn code_of<T: std::fmt::Debug>(reply: Reply<T>) -> T {
    match reply {
        Reply::Now(r) => r,
        Reply::Later(m) => panic!("expected an answer now, {m} was parked"),
    }
}

// ---- join -------------------------------------------------------------------------------

#[test]
fn two_members_one_generation_then_stable() {
    let mut h = Harness::new();
    let a = h.enter("g");
    let out = h.c.take_outputs();
    let ra = joined(&out, &a).expect("a lone member completes the join at once");
    assert_eq!(
        (ra.error_code, ra.generation_id, ra.leader.as_str()),
        (0, 1, a.as_str())
    );
    assert_eq!(ra.members.len(), 1);
    // A second member triggers a rebalance: the first must rejoin.
    h.advance(10);
    let b = h.enter("g");
    assert_eq!(h.state("g"), State::PreparingRebalance);
    assert_eq!(
        h.heartbeat("g", &a, 1),
        ResponseError::RebalanceInProgress.code()
    );
    h.rejoin("g", &a);
    let out = h.c.take_outputs();
    assert_eq!(joined(&out, &a).unwrap().generation_id, 2);
    assert!(
        joined(&out, &b).unwrap().members.is_empty(),
        "only the leader gets the members"
    );
    // The follower's sync waits for the leader's.
    assert!(matches!(h.sync("g", &b, 2, &[]), Reply::Later(_)));
    assert!(matches!(
        h.sync("g", &a, 2, &[(&a, "A"), (&b, "B")]),
        Reply::Later(_)
    ));
    let out = h.c.take_outputs();
    assert_eq!(
        synced(&out, &a).unwrap().assignment,
        Bytes::from_static(b"A")
    );
    assert_eq!(
        synced(&out, &b).unwrap().assignment,
        Bytes::from_static(b"B")
    );
    assert_eq!(h.state("g"), State::Stable);
    assert_eq!(h.heartbeat("g", &b, 2), 0);
    assert_eq!(
        h.heartbeat("g", &b, 1),
        ResponseError::IllegalGeneration.code()
    );
    assert_eq!(
        h.heartbeat("g", "nobody", 2),
        ResponseError::UnknownMemberId.code()
    );
}

#[test]
fn a_join_without_member_id_is_bounced_with_a_fresh_one() {
    let mut h = Harness::new();
    let r = code_of(h.join(join_req("g", "", None)));
    assert_eq!(r.error_code, ResponseError::MemberIdRequired.code());
    assert!(
        r.member_id.starts_with("c-"),
        "client id, then a uuid: {}",
        r.member_id
    );
    assert_eq!(
        h.state("g"),
        State::Empty,
        "a pending member is not a member yet"
    );
    // Before v4 (no KIP-394) the member is admitted at once.
    let mut old = join_req("g", "", None);
    old.require_known_member_id = false;
    assert!(matches!(h.join(old), Reply::Later(_)));
}

#[test]
fn a_pending_member_that_never_rejoins_is_forgotten_after_its_session() {
    let mut h = Harness::new();
    let a = h.stable_one("g");
    let pending = code_of(h.join(join_req("g", "", None))).member_id;
    assert_eq!(h.c.groups["g"].pending_members.len(), 1);
    h.advance(SESSION_MS as u64 - 1);
    assert_eq!(h.heartbeat("g", &a, 1), 0);
    h.advance(1);
    assert!(h.c.groups["g"].pending_members.is_empty());
    // Its id is no longer known.
    let r = code_of(h.join(join_req("g", &pending, None)));
    assert_eq!(r.error_code, ResponseError::UnknownMemberId.code());
}

#[test]
fn bad_joins_are_refused_with_kafkas_codes() {
    let mut h = Harness::new();
    let mut short = join_req("g", "", None);
    short.session_timeout_ms = 5_999;
    assert_eq!(
        code_of(h.join(short)).error_code,
        ResponseError::InvalidSessionTimeout.code()
    );
    let mut long = join_req("g", "", None);
    long.session_timeout_ms = MAX_SESSION_TIMEOUT_MS + 1;
    assert_eq!(
        code_of(h.join(long)).error_code,
        ResponseError::InvalidSessionTimeout.code()
    );
    let mut untyped = join_req("g", "", None);
    untyped.protocol_type = String::new();
    assert_eq!(
        code_of(h.join(untyped)).error_code,
        ResponseError::InconsistentGroupProtocol.code()
    );
    let a = h.stable_one("g");
    let mut other = join_req("g", "", None);
    other.protocol_type = "connect".into();
    assert_eq!(
        code_of(h.join(other)).error_code,
        ResponseError::InconsistentGroupProtocol.code()
    );
    let mut disjoint = join_req("g", &a, None);
    disjoint.protocols = vec![("sticky".into(), Bytes::new())];
    let r = h.join(disjoint);
    assert!(
        matches!(r, Reply::Now(ref r) if r.error_code == ResponseError::InconsistentGroupProtocol.code()),
        "{r:?}"
    );
    let r = code_of(h.join(join_req("g", "stranger", None)));
    assert_eq!(r.error_code, ResponseError::UnknownMemberId.code());
}

#[test]
fn the_initial_rebalance_delay_gathers_members_starting_together() {
    let mut h = Harness::with(CoordinatorConfig {
        initial_rebalance_delay_ms: 3_000,
        min_session_timeout_ms: 6000,
        max_groups: 10,
        max_member_timers: 100,
    });
    let a = h.enter("g");
    h.advance(1_000);
    let b = h.enter("g");
    assert!(
        h.c.take_outputs()
            .iter()
            .all(|o| !matches!(o, Output::Join { .. })),
        "nobody answered yet"
    );
    h.advance(1_999);
    assert_eq!(h.state("g"), State::PreparingRebalance);
    h.advance(1);
    let out = h.c.take_outputs();
    assert_eq!(joined(&out, &a).unwrap().generation_id, 1);
    assert_eq!(
        joined(&out, &b).unwrap().generation_id,
        1,
        "one generation for both"
    );
    assert_eq!(h.state("g"), State::CompletingRebalance);
}

#[test]
fn the_leader_is_chosen_once_and_kept_while_it_stays() {
    let mut h = Harness::new();
    let a = h.stable_one("g");
    let b = h.enter("g");
    h.rejoin("g", &a);
    let out = h.c.take_outputs();
    assert_eq!(joined(&out, &b).unwrap().leader, a);
    assert_eq!(joined(&out, &a).unwrap().members.len(), 2);
}

#[test]
fn the_protocol_every_member_supports_wins_by_vote() {
    let mut h = Harness::new();
    let mut first = join_req("g", "", None);
    first.require_known_member_id = false;
    first.protocols = vec![
        ("range".into(), Bytes::new()),
        ("roundrobin".into(), Bytes::new()),
    ];
    let Reply::Later(a) = h.join(first) else {
        panic!()
    };
    h.c.take_outputs();
    let mut second = join_req("g", "", None);
    second.require_known_member_id = false;
    second.protocols = vec![("roundrobin".into(), Bytes::new())];
    let Reply::Later(b) = h.join(second) else {
        panic!()
    };
    let mut again = join_req("g", &a, None);
    again.protocols = vec![
        ("range".into(), Bytes::new()),
        ("roundrobin".into(), Bytes::new()),
    ];
    h.join(again);
    let out = h.c.take_outputs();
    assert_eq!(
        joined(&out, &b).unwrap().protocol_name.as_deref(),
        Some("roundrobin")
    );
}

#[test]
fn a_second_join_from_one_member_answers_the_first() {
    let mut h = Harness::new();
    let _a = h.stable_one("g");
    let b = h.enter("g"); // parked until a rejoins
    h.c.take_outputs();
    h.rejoin("g", &b); // the same member joins again: its first join is answered
    let out = h.c.take_outputs();
    let first = joined(&out, &b).expect("the replaced join is answered");
    assert_eq!(first.error_code, ResponseError::RebalanceInProgress.code());
    assert_eq!(h.state("g"), State::PreparingRebalance);
}

// ---- sync -------------------------------------------------------------------------------

#[test]
fn sync_checks_generation_member_and_state() {
    let mut h = Harness::new();
    let a = h.enter("g");
    h.c.take_outputs();
    let r = code_of(h.sync("g", &a, 7, &[]));
    assert_eq!(r.error_code, ResponseError::IllegalGeneration.code());
    let r = code_of(h.sync("g", "stranger", 1, &[]));
    assert_eq!(r.error_code, ResponseError::UnknownMemberId.code());
    let r = code_of(h.sync("nogroup", &a, 1, &[]));
    assert_eq!(r.error_code, ResponseError::UnknownMemberId.code());
    h.sync("g", &a, 1, &[(&a, "A")]);
    let _b = h.enter("g");
    let r = code_of(h.sync("g", &a, 1, &[]));
    assert_eq!(
        r.error_code,
        ResponseError::RebalanceInProgress.code(),
        "PreparingRebalance"
    );
}

#[test]
fn a_stable_group_answers_a_sync_at_once_with_the_stored_assignment() {
    let mut h = Harness::new();
    let a = h.stable_one("g");
    let r = code_of(h.sync("g", &a, 1, &[]));
    assert_eq!((r.error_code, r.assignment.as_ref()), (0, &b"A"[..]));
}

#[test]
fn a_rebalance_answers_parked_syncs_with_rebalance_in_progress() {
    let mut h = Harness::new();
    let a = h.enter("g");
    let b = h.enter("g");
    h.rejoin("g", &a);
    h.c.take_outputs();
    // b syncs and waits for the leader, which never syncs: a third member arrives.
    assert!(matches!(h.sync("g", &b, 2, &[]), Reply::Later(_)));
    let _c = h.enter("g");
    let out = h.c.take_outputs();
    assert_eq!(
        synced(&out, &b).unwrap().error_code,
        ResponseError::RebalanceInProgress.code()
    );
}

// ---- heartbeats and sessions --------------------------------------------------------------

#[test]
fn heartbeats_keep_a_member_alive_past_many_sessions() {
    let mut h = Harness::new();
    let a = h.stable_one("g");
    for _ in 0..20 {
        h.advance(SESSION_MS as u64 / 2);
        assert_eq!(h.heartbeat("g", &a, 1), 0);
    }
    assert_eq!(h.state("g"), State::Stable);
}

#[test]
fn a_silent_member_expires_at_its_session_timeout_and_the_rest_rebalance() {
    let mut h = Harness::new();
    let a = h.enter("g");
    let b = h.enter("g");
    h.rejoin("g", &a);
    h.c.take_outputs();
    h.sync("g", &b, 2, &[]);
    h.sync("g", &a, 2, &[(&a, "A"), (&b, "B")]);
    h.c.take_outputs();
    // a heartbeats, b is silent.
    h.advance(SESSION_MS as u64 / 2);
    assert_eq!(h.heartbeat("g", &a, 2), 0);
    h.advance(SESSION_MS as u64 / 2 - 1);
    assert!(h.c.groups["g"].members.contains_key(&b), "not yet");
    h.advance(1);
    assert!(!h.c.groups["g"].members.contains_key(&b));
    assert_eq!(h.state("g"), State::PreparingRebalance);
    assert_eq!(
        h.heartbeat("g", &a, 2),
        ResponseError::RebalanceInProgress.code()
    );
    h.rejoin("g", &a);
    let out = h.c.take_outputs();
    assert_eq!(joined(&out, &a).unwrap().generation_id, 3);
}

#[test]
fn the_last_member_expiring_empties_the_group() {
    let mut h = Harness::new();
    let _a = h.stable_one("g");
    h.advance(SESSION_MS as u64);
    assert_eq!(h.state("g"), State::Empty);
    assert!(h.c.groups["g"].members.is_empty());
}

#[test]
fn a_heartbeat_during_a_rebalance_keeps_the_member_alive() {
    let mut h = Harness::new();
    let a = h.stable_one("g");
    let _b = h.enter("g");
    for _ in 0..3 {
        h.advance(SESSION_MS as u64 / 2);
        assert_eq!(
            h.heartbeat("g", &a, 1),
            ResponseError::RebalanceInProgress.code()
        );
    }
    assert!(h.c.groups["g"].members.contains_key(&a));
}

// ---- rebalance timeout --------------------------------------------------------------------

#[test]
fn members_that_do_not_rejoin_within_the_rebalance_timeout_are_removed() {
    let mut h = Harness::new();
    let a = h.enter("g");
    let b = h.enter("g");
    h.rejoin("g", &a);
    h.c.take_outputs();
    h.sync("g", &b, 2, &[]);
    h.sync("g", &a, 2, &[]);
    h.c.take_outputs();
    // A third member joins; b rejoins, a keeps heartbeating but never rejoins.
    let c = h.enter("g");
    h.rejoin("g", &b);
    for _ in 0..3 {
        h.advance(REBALANCE_MS as u64 / 4);
        assert_eq!(
            h.heartbeat("g", &a, 2),
            ResponseError::RebalanceInProgress.code()
        );
    }
    h.advance(REBALANCE_MS as u64 / 4 - 1);
    assert_eq!(h.state("g"), State::PreparingRebalance, "not yet");
    h.advance(1);
    let out = h.c.take_outputs();
    assert!(joined(&out, &a).is_none(), "a had no join parked");
    assert!(!h.c.groups["g"].members.contains_key(&a));
    assert_eq!(
        h.heartbeat("g", &a, 3),
        ResponseError::UnknownMemberId.code()
    );
    assert_eq!(joined(&out, &b).unwrap().generation_id, 3);
    assert_eq!(joined(&out, &c).unwrap().generation_id, 3);
    assert_eq!(h.state("g"), State::CompletingRebalance);
}

// ---- leave --------------------------------------------------------------------------------

#[test]
fn a_leave_rebalances_the_rest_and_the_last_leave_empties_the_group() {
    let mut h = Harness::new();
    let a = h.enter("g");
    let b = h.enter("g");
    h.rejoin("g", &a);
    h.c.take_outputs();
    assert_eq!(h.leave("g", &[(&b, None)]), [0]);
    assert_eq!(h.state("g"), State::PreparingRebalance);
    h.rejoin("g", &a);
    let out = h.c.take_outputs();
    assert_eq!(joined(&out, &a).unwrap().generation_id, 3);
    assert_eq!(h.leave("g", &[(&a, None)]), [0]);
    assert_eq!(h.state("g"), State::Empty);
    assert_eq!(
        h.leave("g", &[(&a, None)]),
        [ResponseError::UnknownMemberId.code()]
    );
    assert_eq!(
        h.leave("nogroup", &[("x", None)]),
        [ResponseError::UnknownMemberId.code()]
    );
}

#[test]
fn a_batch_leave_by_instance_id_fences_a_wrong_member_id() {
    let mut h = Harness::new();
    let Reply::Later(a) = h.join(join_req("g", "", Some("i1"))) else {
        panic!()
    };
    h.c.take_outputs();
    let codes = h.leave("g", &[("not-a", Some("i1")), ("", Some("nope"))]);
    assert_eq!(
        codes,
        [
            ResponseError::FencedInstanceId.code(),
            ResponseError::UnknownMemberId.code()
        ]
    );
    assert_eq!(
        h.leave("g", &[("", Some("i1"))]),
        [0],
        "by instance id alone"
    );
    assert!(!h.c.groups["g"].members.contains_key(&a));
}

// ---- static members (KIP-345) ---------------------------------------------------------------

#[test]
fn static_member_rejoins_without_rebalance() {
    let mut h = Harness::new();
    let Reply::Later(a) = h.join(join_req("g", "", Some("i1"))) else {
        panic!("static members skip KIP-394")
    };
    h.c.take_outputs();
    h.sync("g", &a, 1, &[(&a, "mine")]);
    h.c.take_outputs();
    // Restart: same instance id, no member id.
    h.advance(100);
    let r = code_of(h.join(join_req("g", "", Some("i1"))));
    assert_eq!((r.error_code, r.generation_id), (0, 1));
    assert_ne!(r.member_id, a);
    assert_eq!(h.state("g"), State::Stable);
    let now = h.now();
    let Reply::Now(s) = h.c.sync(now, "g", &r.member_id, 1, Some("i1"), vec![]) else {
        panic!()
    };
    assert_eq!(s.assignment, Bytes::from_static(b"mine"));
    // The old incarnation is fenced.
    assert_eq!(
        h.c.heartbeat(now, "g", &a, 1, Some("i1")),
        ResponseError::FencedInstanceId.code()
    );
}

#[test]
fn a_replaced_static_member_s_parked_join_is_fenced() {
    // With an initial delay the first join parks; the member restarts meanwhile.
    let mut h = Harness::with(CoordinatorConfig {
        initial_rebalance_delay_ms: 3_000,
        min_session_timeout_ms: 6000,
        max_groups: 10,
        max_member_timers: 100,
    });
    let Reply::Later(a) = h.join(join_req("g", "", Some("i1"))) else {
        panic!()
    };
    h.advance(1_000);
    let Reply::Later(a2) = h.join(join_req("g", "", Some("i1"))) else {
        panic!("outside Stable the new incarnation joins the rebalance")
    };
    assert_ne!(a2, a);
    let out = h.c.take_outputs();
    let fenced = joined(&out, &a).expect("the old incarnation's join is answered");
    assert_eq!(fenced.error_code, ResponseError::FencedInstanceId.code());
    h.advance(2_000);
    let out = h.c.take_outputs();
    assert_eq!(joined(&out, &a2).unwrap().generation_id, 1);
    assert_eq!(h.c.groups["g"].members.len(), 1);
}

#[test]
fn a_static_member_with_a_stale_member_id_is_fenced() {
    let mut h = Harness::new();
    let Reply::Later(_a) = h.join(join_req("g", "", Some("i1"))) else {
        panic!()
    };
    h.c.take_outputs();
    let r = code_of(h.join(join_req("g", "old-id", Some("i1"))));
    assert_eq!(r.error_code, ResponseError::FencedInstanceId.code());
    let r = code_of(h.join(join_req("g", "some-id", Some("i2"))));
    assert_eq!(
        r.error_code,
        ResponseError::UnknownMemberId.code(),
        "an unknown instance with an id"
    );
}

// ---- cooperative rebalancing (KIP-429) ------------------------------------------------------

#[test]
fn cooperative_revocation_takes_two_rebalances_and_the_leader_sees_owned_partitions() {
    // The coordinator is protocol-agnostic: a cooperative member revokes what it lost after the
    // first rebalance and rejoins at once, with subscription metadata naming what it still
    // owns; the leader of the second rebalance must see that metadata.
    let mut h = Harness::new();
    let a = h.stable_one("g");
    let b = h.enter("g");
    let mut owning = join_req("g", &a, None);
    owning.protocols = vec![("range".into(), Bytes::from_static(b"owns p0 p1"))];
    h.join(owning);
    let out = h.c.take_outputs();
    assert_eq!(joined(&out, &a).unwrap().generation_id, 2);
    h.sync("g", &b, 2, &[]);
    h.sync("g", &a, 2, &[(&a, "p0"), (&b, "")]); // p1 revoked from a, not yet given to b
    let out = h.c.take_outputs();
    assert_eq!(
        synced(&out, &a).unwrap().assignment,
        Bytes::from_static(b"p0")
    );
    assert_eq!(h.state("g"), State::Stable);
    // a revoked p1 and rejoins at once: a second rebalance, b must rejoin too.
    let mut revoked = join_req("g", &a, None);
    revoked.protocols = vec![("range".into(), Bytes::from_static(b"owns p0"))];
    h.join(revoked);
    assert_eq!(h.state("g"), State::PreparingRebalance);
    assert_eq!(
        h.heartbeat("g", &b, 2),
        ResponseError::RebalanceInProgress.code()
    );
    h.rejoin("g", &b);
    let out = h.c.take_outputs();
    let leader = joined(&out, &a).unwrap();
    assert_eq!(leader.generation_id, 3);
    let seen: Vec<_> = leader
        .members
        .iter()
        .map(|(id, _, meta)| (id.clone(), meta.clone()))
        .collect();
    assert!(
        seen.contains(&(a.clone(), Bytes::from_static(b"owns p0"))),
        "{seen:?}"
    );
    h.sync("g", &b, 3, &[]);
    h.sync("g", &a, 3, &[(&a, "p0"), (&b, "p1")]);
    let out = h.c.take_outputs();
    assert_eq!(
        synced(&out, &b).unwrap().assignment,
        Bytes::from_static(b"p1")
    );
}

// ---- offsets, deletion ----------------------------------------------------------------------

#[test]
fn commits_are_checked_against_membership_and_generation() {
    let mut h = Harness::new();
    // A simple consumer (no member id, generation -1) commits only while the group is empty.
    assert_eq!(h.c.check_commit("s", "", -1, None), Ok(()));
    let a = h.stable_one("g");
    assert_eq!(
        h.c.check_commit("g", "", -1, None),
        Err(ResponseError::UnknownMemberId)
    );
    assert_eq!(h.c.check_commit("g", &a, 1, None), Ok(()));
    assert_eq!(
        h.c.check_commit("g", &a, 0, None),
        Err(ResponseError::IllegalGeneration)
    );
    assert_eq!(
        h.c.check_commit("g", "x", 1, None),
        Err(ResponseError::UnknownMemberId)
    );
    // A member of the current generation commits while the next rebalance is prepared (the
    // commit-on-revoke of cooperative consumers), but not while it completes.
    let b = h.enter("g");
    assert_eq!(h.state("g"), State::PreparingRebalance);
    assert_eq!(h.c.check_commit("g", &a, 1, None), Ok(()));
    h.rejoin("g", &a);
    assert_eq!(h.state("g"), State::CompletingRebalance);
    assert_eq!(
        h.c.check_commit("g", &b, 2, None),
        Err(ResponseError::RebalanceInProgress)
    );
}

#[test]
fn only_an_empty_group_can_be_deleted() {
    let mut h = Harness::new();
    assert_eq!(h.c.delete("nogroup"), Err(ResponseError::GroupIdNotFound));
    let a = h.stable_one("g");
    assert_eq!(h.c.delete("g"), Err(ResponseError::NonEmptyGroup));
    h.leave("g", &[(&a, None)]);
    assert_eq!(h.c.delete("g"), Ok(()));
    assert!(!h.c.groups.contains_key("g"));
}

#[test]
fn snapshot_restore_round_trip() {
    let mut h = Harness::new();
    let Reply::Later(a) = h.join(join_req("g", "", Some("i1"))) else {
        panic!()
    };
    h.c.take_outputs();
    h.sync("g", &a, 1, &[(&a, "x")]);
    let snap = h.c.snapshot("g", h.clock.wall_ms()).unwrap();
    assert_eq!(snap.current_state_timestamp_ms, 1_700_000_000_000);
    let mut d = Harness::new();
    let now = d.now();
    d.c.restore(now, "g", snap.clone());
    assert_eq!(d.state("g"), State::Stable);
    assert_eq!(d.c.snapshot("g", d.clock.wall_ms()), Some(snap));
    assert_eq!(d.c.heartbeat(now, "g", &a, 1, Some("i1")), 0);
    // Restored members must heartbeat within a session from the restore.
    d.advance(SESSION_MS as u64);
    assert_eq!(d.state("g"), State::Empty);
}

// ---- bounds and injected ids ---------------------------------------------------------------

#[test]
fn a_full_timer_wheel_is_answered_with_an_error_and_counted() {
    let mut h = Harness::with(CoordinatorConfig {
        initial_rebalance_delay_ms: 0,
        min_session_timeout_ms: 6000,
        max_groups: 10,
        max_member_timers: 2,
    });
    let a = h.enter("g");
    // The second member's pending timer takes the last room for members.
    let pending = code_of(h.join(join_req("g", "", None))).member_id;
    let r = code_of(h.join(join_req("g", "", None)));
    assert_eq!(r.error_code, ResponseError::CoordinatorNotAvailable.code());
    assert_eq!(h.c.take_refusals(), 1);
    assert_eq!(h.c.take_refusals(), 0, "taken");
    // Rebalance timers still fit: the room kept for groups is untouched.
    h.c.take_outputs();
    h.sync("g", &a, 1, &[(&a, "A")]);
    assert_eq!(h.state("g"), State::Stable);
    // Room comes back when the pending member leaves.
    assert_eq!(h.leave("g", &[(&pending, None)]), [0]);
    let r = code_of(h.join(join_req("g", "", None)));
    assert_eq!(r.error_code, ResponseError::MemberIdRequired.code());
}

#[test]
fn past_max_groups_a_new_group_is_refused_and_counted() {
    let mut h = Harness::with(CoordinatorConfig {
        initial_rebalance_delay_ms: 0,
        min_session_timeout_ms: 6000,
        max_groups: 1,
        max_member_timers: 100,
    });
    h.stable_one("g");
    let r = code_of(h.join(join_req("other", "", None)));
    assert_eq!(r.error_code, ResponseError::CoordinatorNotAvailable.code());
    assert_eq!(
        h.c.check_commit("other", "", -1, None),
        Err(ResponseError::CoordinatorNotAvailable)
    );
    assert_eq!(h.c.take_refusals(), 2);
    assert!(!h.c.groups.contains_key("other"));
    // The existing group still serves.
    let b = code_of(h.join(join_req("g", "", None)));
    assert_eq!(b.error_code, ResponseError::MemberIdRequired.code());
}

#[test]
fn member_ids_come_from_the_injected_source() {
    let ids = |seed| {
        let clock = ManualClock::new(0, 0);
        let mut c = Coordinator::new(
            clock.monotonic_ms(),
            CoordinatorConfig {
                initial_rebalance_delay_ms: 0,
                min_session_timeout_ms: 6000,
                max_groups: 10,
                max_member_timers: 10,
            },
            Box::new(SeededIds::new(seed)),
        );
        code_of(c.join(0, join_req("g", "", None))).member_id
    };
    assert_eq!(ids(1), ids(1), "reproducible");
    assert_ne!(ids(1), ids(2));
}

#[test]
fn a_wall_clock_jump_does_not_expire_sessions() {
    let mut h = Harness::new();
    let a = h.stable_one("g");
    h.clock.set_wall_ms(h.clock.wall_ms() + 3_600_000); // NTP steps the wall clock an hour on
    h.advance(1);
    assert_eq!(h.heartbeat("g", &a, 1), 0);
    assert_eq!(h.state("g"), State::Stable);
}
