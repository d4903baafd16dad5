use super::*;

fn topic(n: u8) -> TopicId {
    [n; 16]
}

fn parts(ps: &[(u8, &[i32])]) -> Partitions {
    ps.iter()
        .map(|(t, ps)| (topic(*t), ps.iter().copied().collect()))
        .collect()
}

fn free(_: TopicId, _: i32) -> bool {
    false
}

#[test]
fn a_new_member_takes_its_free_target_at_the_target_epoch() {
    let m = Reconciliation::joined(0);
    let target = parts(&[(1, &[0, 1])]);
    let next = m.reconcile((3, &target), Some(&Partitions::new()), free);
    assert_eq!(next.state, MemberState::Stable);
    assert_eq!(next.member_epoch, 3);
    assert_eq!(next.assigned, target);
}

#[test]
fn a_stable_member_at_the_target_epoch_stays_as_it_is() {
    let target = parts(&[(1, &[0])]);
    let m = Reconciliation::joined(0).reconcile((2, &target), None, free);
    assert_eq!(m.reconcile((2, &target), None, free), m);
}

#[test]
fn partitions_leave_before_new_ones_come_and_the_epoch_waits_for_them() {
    let old = parts(&[(1, &[0, 1, 2])]);
    let m = Reconciliation::joined(0).reconcile((1, &old), None, free);
    // The target moves partition 2 away and adds partition 5 (free).
    let target = parts(&[(1, &[0, 1, 5])]);
    let revoking = m.reconcile((2, &target), Some(&old), free);
    assert_eq!(revoking.state, MemberState::UnrevokedPartitions);
    assert_eq!(
        revoking.member_epoch, 1,
        "the epoch holds until the revocation is done"
    );
    assert_eq!(
        revoking.assigned,
        parts(&[(1, &[0, 1])]),
        "nothing new while revoking"
    );
    assert_eq!(revoking.pending_revocation, parts(&[(1, &[2])]));
    // Still owning partition 2: no progress.
    assert_eq!(revoking.reconcile((2, &target), Some(&old), free), revoking);
    assert_eq!(
        revoking.reconcile((2, &target), None, free),
        revoking,
        "unreported: owns all"
    );
    // Partition 2 let go: the member moves to the target epoch with the new partition.
    let done = revoking.reconcile((2, &target), Some(&parts(&[(1, &[0, 1])])), free);
    assert_eq!(done.state, MemberState::Stable);
    assert_eq!(done.member_epoch, 2);
    assert_eq!(done.assigned, target);
    assert!(done.pending_revocation.is_empty());
}

#[test]
fn a_member_that_already_let_go_skips_the_revocation_step() {
    let old = parts(&[(1, &[0, 1])]);
    let m = Reconciliation::joined(0).reconcile((1, &old), None, free);
    let target = parts(&[(1, &[0])]);
    let next = m.reconcile((2, &target), Some(&target), free);
    assert_eq!(next.state, MemberState::Stable);
    assert_eq!(next.member_epoch, 2);
}

#[test]
fn a_partition_another_member_still_owns_waits_for_its_release() {
    let m = Reconciliation::joined(0);
    let target = parts(&[(1, &[0, 1])]);
    let held_by_other = |t: TopicId, p: i32| t == topic(1) && p == 1;
    let waiting = m.reconcile((4, &target), Some(&Partitions::new()), held_by_other);
    assert_eq!(waiting.state, MemberState::UnreleasedPartitions);
    assert_eq!(
        waiting.member_epoch, 4,
        "it is at the target epoch meanwhile"
    );
    assert_eq!(waiting.assigned, parts(&[(1, &[0])]));
    let still = waiting.reconcile((4, &target), None, held_by_other);
    assert_eq!(still, waiting);
    let released = waiting.reconcile((4, &target), None, free);
    assert_eq!(released.state, MemberState::Stable);
    assert_eq!(released.assigned, target);
}

#[test]
fn a_target_that_moves_again_during_revocation_is_followed_one_epoch_at_a_time() {
    let old = parts(&[(1, &[0, 1, 2, 3])]);
    let m = Reconciliation::joined(0).reconcile((1, &old), None, free);
    let second = parts(&[(1, &[0, 1, 2])]);
    let revoking = m.reconcile((2, &second), Some(&old), free);
    assert_eq!(revoking.pending_revocation, parts(&[(1, &[3])]));
    // The target moves on (epoch 3) before the member revoked 3: once it does, it must also
    // give up 2, at epoch 2, before it may reach epoch 3.
    let third = parts(&[(1, &[0, 1])]);
    let owned = parts(&[(1, &[0, 1, 2])]);
    let again = revoking.reconcile((3, &third), Some(&owned), free);
    assert_eq!(again.state, MemberState::UnrevokedPartitions);
    assert_eq!(again.member_epoch, 2);
    assert_eq!(again.pending_revocation, parts(&[(1, &[2])]));
    let done = again.reconcile((3, &third), Some(&third), free);
    assert_eq!((done.state, done.member_epoch), (MemberState::Stable, 3));
    assert_eq!(done.assigned, third);
}
