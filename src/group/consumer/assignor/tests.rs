use super::*;

fn topic(n: u8) -> TopicId {
    [n; 16]
}

fn member(id: &str, topics: &[u8], current: &[(u8, &[i32])]) -> MemberSpec {
    MemberSpec {
        member_id: id.to_string(),
        instance_id: None,
        subscribed: topics.iter().map(|&t| topic(t)).collect(),
        current: current
            .iter()
            .map(|(t, ps)| (topic(*t), ps.iter().copied().collect()))
            .collect(),
    }
}

fn topics(counts: &[(u8, i32)]) -> BTreeMap<TopicId, i32> {
    counts.iter().map(|&(t, n)| (topic(t), n)).collect()
}

fn count(p: &Partitions) -> usize {
    p.values().map(|s| s.len()).sum()
}

fn counts(targets: &Targets) -> Vec<usize> {
    targets.values().map(count).collect()
}

/// The partitions that changed hands: held by a member in `before` and by another after.
fn moved(before: &[MemberSpec], after: &Targets) -> usize {
    before
        .iter()
        .map(|m| {
            let now = after.get(&m.member_id);
            m.current
                .iter()
                .flat_map(|(t, ps)| ps.iter().map(move |p| (*t, *p)))
                .filter(|(t, p)| !now.is_some_and(|n| n.get(t).is_some_and(|s| s.contains(p))))
                .count()
        })
        .sum()
}

/// The members with their targets as their current assignment: the next round's input.
fn next_round(members: &[MemberSpec], targets: &Targets) -> Vec<MemberSpec> {
    members
        .iter()
        .map(|m| MemberSpec {
            current: targets[&m.member_id].clone(),
            ..m.clone()
        })
        .collect()
}

#[test]
fn uniform_spreads_a_new_group_evenly() {
    let members = [
        member("a", &[1, 2], &[]),
        member("b", &[1, 2], &[]),
        member("c", &[1, 2], &[]),
    ];
    let targets = Assignor::Uniform.assign(&members, &topics(&[(1, 5), (2, 6)]));
    let mut c = counts(&targets);
    c.sort();
    assert_eq!(c, vec![3, 4, 4]);
}

#[test]
fn uniform_moves_only_what_a_joiner_needs() {
    let t = topics(&[(1, 12)]);
    let three: Vec<MemberSpec> = ["a", "b", "c"]
        .iter()
        .map(|id| member(id, &[1], &[]))
        .collect();
    let first = Assignor::Uniform.assign(&three, &t);
    let mut four = next_round(&three, &first);
    four.push(member("d", &[1], &[]));
    let second = Assignor::Uniform.assign(&four, &t);
    assert_eq!(counts(&second), vec![3, 3, 3, 3]);
    // The joiner's 3 partitions come from the others; nothing else moves.
    assert_eq!(moved(&four, &second), 3);
}

#[test]
fn uniform_gives_away_only_the_leavers_partitions() {
    let t = topics(&[(1, 10)]);
    let four: Vec<MemberSpec> = ["a", "b", "c", "d"]
        .iter()
        .map(|id| member(id, &[1], &[]))
        .collect();
    let first = Assignor::Uniform.assign(&four, &t);
    let three: Vec<MemberSpec> = next_round(&four, &first)
        .into_iter()
        .filter(|m| m.member_id != "b")
        .collect();
    let second = Assignor::Uniform.assign(&three, &t);
    let mut c = counts(&second);
    c.sort();
    assert_eq!(c, vec![3, 3, 4]);
    assert_eq!(moved(&three, &second), 0, "the stayers keep all they had");
}

#[test]
fn uniform_assigns_a_topic_only_to_its_subscribers_and_balances_the_rest() {
    // a and b read topic 1 (4 partitions); b and c read topic 2 (4 partitions).
    let members = [
        member("a", &[1], &[]),
        member("b", &[1, 2], &[]),
        member("c", &[2], &[]),
    ];
    let targets = Assignor::Uniform.assign(&members, &topics(&[(1, 4), (2, 4)]));
    assert!(targets["a"].keys().all(|t| *t == topic(1)));
    assert!(targets["c"].keys().all(|t| *t == topic(2)));
    let mut c = counts(&targets);
    c.sort();
    assert!(c[2] - c[0] <= 1, "balanced: {c:?}");
}

#[test]
fn uniform_drops_unsubscribed_and_deleted_topics_and_missing_partitions() {
    let members = [
        member("a", &[1], &[(1, &[0, 1, 7]), (2, &[0])]), // 7: the topic has 4 now; topic 2: left
        member("b", &[1, 3], &[(3, &[0])]),               // topic 3 was deleted
    ];
    let targets = Assignor::Uniform.assign(&members, &topics(&[(1, 4), (2, 2)]));
    assert_eq!(counts(&targets), vec![2, 2]);
    assert!(targets["a"][&topic(1)].is_superset(&[0, 1].into_iter().collect()));
}

#[test]
fn uniform_settles_random_groups_balanced_and_sticky() {
    // A seeded walk of joins, leaves and subscription changes; the postcondition (every
    // subscribed partition held once, by a subscriber) is checked inside `assign`.
    let t = topics(&[(1, 7), (2, 16), (3, 1), (4, 30)]);
    let mut draw = crate::group::consumer::draws(0x5eed);
    let mut members: Vec<MemberSpec> = Vec::new();
    for round in 0..300 {
        match draw(4) {
            0 | 1 if members.len() < 12 => {
                let topics: Vec<u8> = (1..=4).filter(|_| draw(3) > 0).collect();
                members.push(member(&format!("m{round}"), &topics, &[]));
            }
            2 if !members.is_empty() => {
                let at = draw(members.len() as u64) as usize;
                members.remove(at);
            }
            _ if !members.is_empty() => {
                let at = draw(members.len() as u64) as usize;
                members[at].subscribed = (1..=4).filter(|_| draw(2) > 0).map(topic).collect();
            }
            _ => continue,
        }
        let targets = Assignor::Uniform.assign(&members, &t);
        let settled = Assignor::Uniform.assign(&next_round(&members, &targets), &t);
        assert_eq!(
            settled, targets,
            "round {round}: an unchanged group keeps its assignment"
        );
        members = next_round(&members, &targets);
    }
}

#[test]
fn uniform_keeps_homogeneous_counts_within_one() {
    let t = topics(&[(1, 7), (2, 16)]);
    let mut members: Vec<MemberSpec> = Vec::new();
    for n in 0..9 {
        members.push(member(&format!("m{n}"), &[1, 2], &[]));
        let targets = Assignor::Uniform.assign(&members, &t);
        let c = counts(&targets);
        assert!(
            c.iter().max().unwrap() - c.iter().min().unwrap() <= 1,
            "{c:?}"
        );
        members = next_round(&members, &targets);
    }
}

#[test]
fn range_co_partitions_equal_topics_as_kafka_does() {
    // Kafka's RangeAssignor example: M0 gets [T1P0, T1P1, T2P0, T2P1], M1 [T1P2, T2P2].
    let members = [member("m0", &[1, 2], &[]), member("m1", &[1, 2], &[])];
    let targets = Assignor::Range.assign(&members, &topics(&[(1, 3), (2, 3)]));
    let expect = |ps: &[i32]| -> BTreeSet<i32> { ps.iter().copied().collect() };
    assert_eq!(targets["m0"][&topic(1)], expect(&[0, 1]));
    assert_eq!(targets["m0"][&topic(2)], expect(&[0, 1]));
    assert_eq!(targets["m1"][&topic(1)], expect(&[2]));
    assert_eq!(targets["m1"][&topic(2)], expect(&[2]));
}

#[test]
fn range_orders_static_members_first_by_instance_id() {
    let mut a = member("zz", &[1], &[]);
    a.instance_id = Some("i0".into());
    let b = member("aa", &[1], &[]);
    let targets = Assignor::Range.assign(&[b, a], &topics(&[(1, 4)]));
    let expect = |ps: &[i32]| -> BTreeSet<i32> { ps.iter().copied().collect() };
    assert_eq!(
        targets["zz"][&topic(1)],
        expect(&[0, 1]),
        "the static member's range first"
    );
    assert_eq!(targets["aa"][&topic(1)], expect(&[2, 3]));
}

#[test]
fn range_leaves_members_past_the_partition_count_empty() {
    let members: Vec<MemberSpec> = ["a", "b", "c"]
        .iter()
        .map(|id| member(id, &[1], &[]))
        .collect();
    let targets = Assignor::Range.assign(&members, &topics(&[(1, 2)]));
    assert_eq!(counts(&targets), vec![1, 1, 0]);
}

#[test]
fn assignors_are_known_by_their_kafka_names() {
    assert_eq!(Assignor::by_name("uniform"), Some(Assignor::Uniform));
    assert_eq!(Assignor::by_name("range"), Some(Assignor::Range));
    assert_eq!(Assignor::by_name("sticky"), None);
    assert_eq!(Assignor::Range.name(), "range");
}
