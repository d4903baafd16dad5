use super::*;

const LIMITS: Limits = Limits {
    max_members: 3,
    session_timeout_ms: 45_000,
};

fn tid(n: u8) -> TopicId {
    [n; 16]
}

fn catalog(topics: &[(&str, u8, i32)]) -> Topics {
    topics
        .iter()
        .map(|&(name, id, n)| (name.to_string(), (tid(id), n)))
        .collect()
}

fn join(id: &str, topics: &[&str]) -> Heartbeat {
    Heartbeat {
        member_id: id.to_string(),
        member_epoch: 0,
        rebalance_timeout_ms: 30_000,
        subscribed: Some(topics.iter().map(|t| t.to_string()).collect()),
        owned: Some(Partitions::new()),
        ..Heartbeat::default()
    }
}

/// A steady heartbeat: the member's epoch and what it owns.
fn beat(id: &str, epoch: i32, owned: &Partitions) -> Heartbeat {
    Heartbeat {
        member_id: id.to_string(),
        member_epoch: epoch,
        rebalance_timeout_ms: -1,
        owned: Some(owned.clone()),
        ..Heartbeat::default()
    }
}

fn count(p: &Partitions) -> usize {
    p.values().map(|s| s.len()).sum()
}

fn no_id() -> String {
    unreachable!("members here bring their ids")
}

/// Drives every member's heartbeats, each owning what it was last told, until nothing moves;
/// returns each member's (epoch, assignment).
fn settle(g: &mut ConsumerGroup, topics: &Topics) -> BTreeMap<String, (i32, Partitions)> {
    let mut seen: BTreeMap<String, (i32, Partitions)> = BTreeMap::new();
    for _ in 0..20 {
        let mut moved = false;
        let ids: Vec<String> = g.members().keys().cloned().collect();
        for id in ids {
            let (epoch, owned) = seen.get(&id).cloned().unwrap_or_else(|| {
                let m = &g.members()[&id];
                (m.at.member_epoch, m.at.assigned.clone())
            });
            let a = g
                .heartbeat(beat(&id, epoch, &owned), (topics, LIMITS, 0), no_id)
                .unwrap();
            let now = (a.member_epoch, a.assignment.unwrap_or(owned));
            moved |= seen.insert(id, now.clone()) != Some(now);
        }
        if !moved {
            return seen;
        }
    }
    panic!("the group did not settle");
}

#[test]
fn members_join_get_a_balanced_assignment_and_the_same_epoch() {
    let topics = catalog(&[("t", 1, 6)]);
    let mut g = ConsumerGroup::default();
    for id in ["a", "b", "c"] {
        let a = g
            .heartbeat(join(id, &["t"]), (&topics, LIMITS, 0), no_id)
            .unwrap();
        assert!(
            a.assignment.is_some(),
            "a join is a full request: the assignment is sent"
        );
    }
    let settled = settle(&mut g, &topics);
    for (id, (epoch, assigned)) in &settled {
        assert_eq!(*epoch, g.epoch(), "{id} reached the group epoch");
        assert_eq!(count(assigned), 2, "{id}");
    }
}

#[test]
fn the_group_epoch_moves_one_step_per_change_as_kafkas_does() {
    let topics = catalog(&[("t", 1, 2)]);
    let mut g = ConsumerGroup::default();
    let a = g
        .heartbeat(join("a", &["t"]), (&topics, LIMITS, 0), no_id)
        .unwrap();
    assert_eq!(
        (g.epoch(), a.member_epoch),
        (1, 1),
        "the first member joins epoch 1"
    );
    g.heartbeat(join("b", &["t"]), (&topics, LIMITS, 0), no_id)
        .unwrap();
    assert_eq!(g.epoch(), 2);
    g.remove("b", &topics);
    assert_eq!(g.epoch(), 3);
    let steady = beat("a", a.member_epoch, &a.assignment.unwrap());
    g.heartbeat(steady, (&topics, LIMITS, 0), no_id).unwrap();
    assert_eq!(
        g.epoch(),
        3,
        "a heartbeat that changes nothing moves nothing"
    );
}

#[test]
fn a_partition_changes_hands_only_after_its_owner_revokes_it() {
    let topics = catalog(&[("t", 1, 2)]);
    let mut g = ConsumerGroup::default();
    let a = g
        .heartbeat(join("a", &["t"]), (&topics, LIMITS, 0), no_id)
        .unwrap();
    let a_owns = a.assignment.unwrap();
    assert_eq!(count(&a_owns), 2);
    let b = g
        .heartbeat(join("b", &["t"]), (&topics, LIMITS, 0), no_id)
        .unwrap();
    assert_eq!(
        count(&b.assignment.clone().unwrap()),
        0,
        "a still owns both"
    );
    // a is told to give one up: its assignment shrinks, its epoch holds.
    let a2 = g
        .heartbeat(
            beat("a", a.member_epoch, &a_owns),
            (&topics, LIMITS, 0),
            no_id,
        )
        .unwrap();
    assert_eq!(a2.member_epoch, a.member_epoch);
    let a_keeps = a2.assignment.unwrap();
    assert_eq!(count(&a_keeps), 1);
    let b2 = g
        .heartbeat(
            beat("b", b.member_epoch, &Partitions::new()),
            (&topics, LIMITS, 0),
            no_id,
        )
        .unwrap();
    assert_eq!(
        b2.assignment.map(|p| count(&p)).unwrap_or(0),
        0,
        "not before a revokes"
    );
    // a reports it let go; then b gets it.
    let a3 = g
        .heartbeat(
            beat("a", a2.member_epoch, &a_keeps),
            (&topics, LIMITS, 0),
            no_id,
        )
        .unwrap();
    assert_eq!(a3.member_epoch, g.epoch());
    let b3 = g
        .heartbeat(
            beat("b", b2.member_epoch, &Partitions::new()),
            (&topics, LIMITS, 0),
            no_id,
        )
        .unwrap();
    assert_eq!(count(&b3.assignment.unwrap()), 1);
}

#[test]
fn a_leaver_frees_its_partitions_at_once() {
    let topics = catalog(&[("t", 1, 4)]);
    let mut g = ConsumerGroup::default();
    g.heartbeat(join("a", &["t"]), (&topics, LIMITS, 0), no_id)
        .unwrap();
    g.heartbeat(join("b", &["t"]), (&topics, LIMITS, 0), no_id)
        .unwrap();
    let settled = settle(&mut g, &topics);
    let leave = Heartbeat {
        member_id: "b".into(),
        member_epoch: LEAVE_EPOCH,
        ..Heartbeat::default()
    };
    let answer = g.heartbeat(leave, (&topics, LIMITS, 0), no_id).unwrap();
    assert_eq!(answer.member_epoch, LEAVE_EPOCH);
    let (epoch, owned) = settled["a"].clone();
    let a = g
        .heartbeat(beat("a", epoch, &owned), (&topics, LIMITS, 0), no_id)
        .unwrap();
    assert_eq!(count(&a.assignment.unwrap()), 4);
}

#[test]
fn wrong_epochs_and_unknown_members_are_refused_as_kafka_does() {
    let topics = catalog(&[("t", 1, 2)]);
    let mut g = ConsumerGroup::default();
    let a = g
        .heartbeat(join("a", &["t"]), (&topics, LIMITS, 0), no_id)
        .unwrap();
    let owned = a.assignment.unwrap();
    let ahead = beat("a", a.member_epoch + 1, &owned);
    assert_eq!(
        g.heartbeat(ahead, (&topics, LIMITS, 0), no_id),
        Err(ResponseError::FencedMemberEpoch)
    );
    let stranger = beat("z", 3, &Partitions::new());
    assert_eq!(
        g.heartbeat(stranger, (&topics, LIMITS, 0), no_id),
        Err(ResponseError::UnknownMemberId)
    );
    // b joins; a gives one partition up and moves to the new epoch.
    g.heartbeat(join("b", &["t"]), (&topics, LIMITS, 0), no_id)
        .unwrap();
    let a2 = g
        .heartbeat(
            beat("a", a.member_epoch, &owned),
            (&topics, LIMITS, 0),
            no_id,
        )
        .unwrap();
    let kept = a2.assignment.unwrap();
    let a3 = g
        .heartbeat(
            beat("a", a.member_epoch, &kept),
            (&topics, LIMITS, 0),
            no_id,
        )
        .unwrap();
    assert_eq!(a3.member_epoch, a.member_epoch + 1);
    // The previous epoch with a subset of the assignment is a lost answer: accepted; with
    // the partition it gave up, it is a member that missed its revocation: fenced.
    let lost = beat("a", a.member_epoch, &kept);
    assert!(g.heartbeat(lost, (&topics, LIMITS, 0), no_id).is_ok());
    let stale = beat("a", a.member_epoch, &owned);
    assert_eq!(
        g.heartbeat(stale, (&topics, LIMITS, 0), no_id),
        Err(ResponseError::FencedMemberEpoch)
    );
    // Fenced, it gives everything up and rejoins under its id with epoch 0: it gets its
    // assignment again (KAFKA-19233).
    let rejoin = g
        .heartbeat(join("a", &["t"]), (&topics, LIMITS, 0), no_id)
        .unwrap();
    assert_eq!(rejoin.assignment, Some(kept));
    assert_eq!(rejoin.member_epoch, a3.member_epoch);
}

#[test]
fn bad_fields_are_invalid_requests_and_unknown_assignors_unsupported() {
    let topics = catalog(&[("t", 1, 2)]);
    let mut g = ConsumerGroup::default();
    let refuse =
        |g: &mut ConsumerGroup, hb: Heartbeat| g.heartbeat(hb, (&topics, LIMITS, 0), no_id);
    let mut no_topics = join("a", &[]);
    no_topics.subscribed = Some(BTreeSet::new());
    assert_eq!(
        refuse(&mut g, no_topics),
        Err(ResponseError::InvalidRequest)
    );
    let mut no_timeout = join("a", &["t"]);
    no_timeout.rebalance_timeout_ms = -1;
    assert_eq!(
        refuse(&mut g, no_timeout),
        Err(ResponseError::InvalidRequest)
    );
    let mut owns = join("a", &["t"]);
    owns.owned = Some([(tid(1), [0].into_iter().collect())].into_iter().collect());
    assert_eq!(refuse(&mut g, owns), Err(ResponseError::InvalidRequest));
    let mut empty_instance = join("a", &["t"]);
    empty_instance.instance_id = Some(String::new());
    assert_eq!(
        refuse(&mut g, empty_instance),
        Err(ResponseError::InvalidRequest)
    );
    assert_eq!(
        refuse(&mut g, beat("", 1, &Partitions::new())),
        Err(ResponseError::InvalidRequest)
    );
    assert_eq!(
        refuse(&mut g, beat("a", -3, &Partitions::new())),
        Err(ResponseError::InvalidRequest)
    );
    let mut sticky = join("a", &["t"]);
    sticky.assignor = Some("sticky".into());
    assert_eq!(
        refuse(&mut g, sticky),
        Err(ResponseError::UnsupportedAssignor)
    );
    assert!(g.members().is_empty(), "nothing joined");
}

#[test]
fn a_full_group_refuses_a_new_member_but_not_its_own() {
    let topics = catalog(&[("t", 1, 6)]);
    let mut g = ConsumerGroup::default();
    for id in ["a", "b", "c"] {
        g.heartbeat(join(id, &["t"]), (&topics, LIMITS, 0), no_id)
            .unwrap();
    }
    let d = g.heartbeat(join("d", &["t"]), (&topics, LIMITS, 0), no_id);
    assert_eq!(d, Err(ResponseError::GroupMaxSizeReached));
    assert!(settle(&mut g, &topics).len() == 3);
}

#[test]
fn a_static_member_comes_back_to_its_assignment_under_a_new_id() {
    let topics = catalog(&[("t", 1, 4)]);
    let mut g = ConsumerGroup::default();
    let mut s = join("s1", &["t"]);
    s.instance_id = Some("inst".into());
    g.heartbeat(s.clone(), (&topics, LIMITS, 0), no_id).unwrap();
    g.heartbeat(join("d", &["t"]), (&topics, LIMITS, 0), no_id)
        .unwrap();
    let settled = settle(&mut g, &topics);
    let before = settled["s1"].1.clone();
    // Another process with the same instance id while s1 holds it: refused.
    let mut rival = s.clone();
    rival.member_id = "s2".into();
    assert_eq!(
        g.heartbeat(rival.clone(), (&topics, LIMITS, 0), no_id),
        Err(ResponseError::UnreleasedInstanceId)
    );
    // s1 leaves for a while (-2); s2 then takes its place, and its partitions, with no rebalance.
    let epoch = g.epoch();
    let leave = Heartbeat {
        member_id: "s1".into(),
        member_epoch: STATIC_LEAVE_EPOCH,
        instance_id: Some("inst".into()),
        ..Heartbeat::default()
    };
    g.heartbeat(leave, (&topics, LIMITS, 0), no_id).unwrap();
    let back = g.heartbeat(rival, (&topics, LIMITS, 0), no_id).unwrap();
    assert_eq!(back.assignment, Some(before));
    assert_eq!(g.epoch(), epoch, "a static member's return moves nothing");
    // The old id is fenced out by its instance.
    let mut old = beat("s1", 1, &Partitions::new());
    old.instance_id = Some("inst".into());
    assert_eq!(
        g.heartbeat(old, (&topics, LIMITS, 0), no_id),
        Err(ResponseError::FencedInstanceId)
    );
}

#[test]
fn a_new_topic_or_more_partitions_move_the_group_epoch_and_are_assigned() {
    let mut topics = catalog(&[("t", 1, 2)]);
    let mut g = ConsumerGroup::default();
    g.heartbeat(join("a", &["t", "later"]), (&topics, LIMITS, 0), no_id)
        .unwrap();
    settle(&mut g, &topics);
    let epoch = g.epoch();
    topics = catalog(&[("t", 1, 3), ("later", 2, 2)]);
    g.refresh_topics(&topics);
    assert_eq!(g.epoch(), epoch + 1);
    let settled = settle(&mut g, &topics);
    assert_eq!(count(&settled["a"].1), 5);
}

#[test]
fn the_most_named_assignor_is_the_groups() {
    let topics = catalog(&[("t", 1, 4), ("u", 2, 4)]);
    let mut g = ConsumerGroup::default();
    for id in ["a", "b"] {
        let mut hb = join(id, &["t", "u"]);
        hb.assignor = Some("range".into());
        g.heartbeat(hb, (&topics, LIMITS, 0), no_id).unwrap();
    }
    let settled = settle(&mut g, &topics);
    // range co-partitions: a holds 0 and 1 of both topics.
    let a: Vec<(TopicId, Vec<i32>)> = settled["a"]
        .1
        .iter()
        .map(|(t, s)| (*t, s.iter().copied().collect()))
        .collect();
    assert_eq!(a, vec![(tid(1), vec![0, 1]), (tid(2), vec![0, 1])]);
}

#[test]
fn a_dynamic_member_without_an_id_gets_one() {
    let topics = catalog(&[("t", 1, 1)]);
    let mut g = ConsumerGroup::default();
    let a = g
        .heartbeat(join("", &["t"]), (&topics, LIMITS, 0), || "drawn".into())
        .unwrap();
    assert_eq!(a.member_id, "drawn");
}

/// A client of the protocol as the invariant sees it: it starts on what an answer adds
/// at once, but gives up what an answer leaves out only later (its revocation callback runs,
/// it commits), owning it until then, and reports what it owns.
struct Client {
    id: String,
    epoch: i32,
    owns: Partitions,
    /// The last assignment it was told, while a revocation is still under way.
    told: Option<Partitions>,
}

impl Client {
    fn joined(id: String, a: Answer) -> Client {
        let mut c = Client {
            id,
            epoch: 0,
            owns: Partitions::new(),
            told: None,
        };
        c.answered(a);
        c
    }

    fn answered(&mut self, a: Answer) {
        self.epoch = a.member_epoch;
        let Some(assigned) = a.assignment else {
            return;
        };
        for (t, ps) in &assigned {
            self.owns.entry(*t).or_default().extend(ps.iter().copied());
        }
        self.told = Some(assigned);
    }

    /// Its revocation ends: it owns just what it was last told.
    fn revoked(&mut self) {
        if let Some(told) = self.told.take() {
            self.owns = told;
        }
    }
}

#[test]
fn random_joins_leaves_and_lagging_revocations_never_give_a_partition_to_two_clients() {
    let topics = catalog(&[("t", 1, 7), ("u", 2, 5)]);
    let limits = Limits {
        max_members: 6,
        session_timeout_ms: 45_000,
    };
    let mut draw = crate::group::consumer::draws(0x848);
    let mut g = ConsumerGroup::default();
    let mut clients: Vec<Client> = Vec::new();
    for step in 0..5000 {
        match draw(10) {
            0 if clients.len() < 6 => {
                let id = format!("c{step}");
                let subs: &[&str] = if draw(2) == 0 { &["t", "u"] } else { &["t"] };
                let a = g
                    .heartbeat(join(&id, subs), (&topics, limits, 0), no_id)
                    .unwrap();
                clients.push(Client::joined(id, a));
            }
            1 if !clients.is_empty() => {
                let at = draw(clients.len() as u64) as usize;
                let c = clients.remove(at);
                g.remove(&c.id, &topics); // its session ran out, or it left
            }
            2 | 3 if !clients.is_empty() => {
                let at = draw(clients.len() as u64) as usize;
                clients[at].revoked();
            }
            _ if !clients.is_empty() => {
                let at = draw(clients.len() as u64) as usize;
                let c = &mut clients[at];
                let hb = beat(&c.id, c.epoch, &c.owns);
                c.answered(g.heartbeat(hb, (&topics, limits, 0), no_id).unwrap());
            }
            _ => continue,
        }
        no_partition_with_two(&clients, step);
    }
    // Quiet: every client revokes and heartbeats until nothing moves; then every partition
    // is consumed, each by one client, all at the group's epoch.
    for _ in 0..10 {
        for c in clients.iter_mut() {
            c.revoked();
            let hb = beat(&c.id, c.epoch, &c.owns);
            c.answered(g.heartbeat(hb, (&topics, limits, 0), no_id).unwrap());
        }
    }
    if !clients.is_empty() {
        let held = |t: TopicId| -> usize {
            clients
                .iter()
                .map(|c| c.owns.get(&t).map_or(0, |s| s.len()))
                .sum()
        };
        assert_eq!(
            held(tid(1)),
            7,
            "every partition of t is consumed once the group is quiet"
        );
        assert!(clients.iter().all(|c| c.epoch == g.epoch()));
    }
}

fn no_partition_with_two(clients: &[Client], step: usize) {
    let mut seen = BTreeSet::new();
    for c in clients {
        for (t, ps) in &c.owns {
            for p in ps {
                assert!(
                    seen.insert((*t, *p)),
                    "step {step}: partition {p} with two clients"
                );
            }
        }
    }
}

#[test]
fn a_member_without_heartbeats_expires_after_its_session_and_each_heartbeat_renews_it() {
    let topics = catalog(&[("t", 1, 2)]);
    let mut g = ConsumerGroup::default();
    let a = g
        .heartbeat(join("a", &["t"]), (&topics, LIMITS, 1_000), no_id)
        .unwrap();
    assert!(g.expired(45_999).is_empty());
    let owned = a.assignment.unwrap();
    g.heartbeat(
        beat("a", a.member_epoch, &owned),
        (&topics, LIMITS, 40_000),
        no_id,
    )
    .unwrap();
    assert!(g.expired(46_000).is_empty(), "renewed at 40 s");
    assert_eq!(g.expired(85_000), vec![("a".to_string(), Expiry::Session)]);
}

#[test]
fn a_member_that_does_not_revoke_within_its_rebalance_timeout_expires() {
    let topics = catalog(&[("t", 1, 2)]);
    let mut g = ConsumerGroup::default();
    let mut slow = join("a", &["t"]);
    slow.rebalance_timeout_ms = 10_000;
    let a = g.heartbeat(slow, (&topics, LIMITS, 0), no_id).unwrap();
    let owned = a.assignment.unwrap();
    g.heartbeat(join("b", &["t"]), (&topics, LIMITS, 1_000), no_id)
        .unwrap();
    // Asked at 2 s to give one partition up; it keeps heartbeating without doing so.
    let a2 = g
        .heartbeat(
            beat("a", a.member_epoch, &owned),
            (&topics, LIMITS, 2_000),
            no_id,
        )
        .unwrap();
    let asked = g.members()["a"].revoke_deadline_ms;
    assert_eq!(asked, Some(12_000));
    g.heartbeat(
        beat("a", a2.member_epoch, &owned),
        (&topics, LIMITS, 11_000),
        no_id,
    )
    .unwrap();
    assert_eq!(
        g.members()["a"].revoke_deadline_ms,
        asked,
        "still the first ask's deadline"
    );
    assert!(g.expired(11_999).is_empty());
    assert_eq!(
        g.expired(12_000),
        vec![("a".to_string(), Expiry::Rebalance)]
    );
    // Had it revoked, the deadline would be gone.
    let kept = a2.assignment.unwrap();
    g.heartbeat(
        beat("a", a2.member_epoch, &kept),
        (&topics, LIMITS, 11_500),
        no_id,
    )
    .unwrap();
    assert_eq!(g.members()["a"].revoke_deadline_ms, None);
    assert!(g.expired(12_000).is_empty());
}
