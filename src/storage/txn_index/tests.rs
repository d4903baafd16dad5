use super::*;
use crate::protocol::batch::{ATTR_CONTROL, ATTR_TRANSACTIONAL};

fn batch(pid: i64, base_offset: i64, count: i32, attributes: i16) -> BatchHeader {
    BatchHeader {
        base_offset,
        size_bytes: 100,
        partition_leader_epoch: 0,
        attributes,
        last_offset_delta: count - 1,
        base_timestamp: 0,
        max_timestamp: 0,
        producer_id: pid,
        producer_epoch: 0,
        base_sequence: 0,
        record_count: count,
    }
}

fn data(pid: i64, base_offset: i64, count: i32) -> BatchHeader {
    batch(pid, base_offset, count, ATTR_TRANSACTIONAL)
}

fn marker(pid: i64, offset: i64) -> BatchHeader {
    batch(pid, offset, 1, ATTR_TRANSACTIONAL | ATTR_CONTROL)
}

#[test]
fn entries_round_trip_in_kafkas_layout() {
    let e = AbortedTxn {
        producer_id: 7,
        first_offset: 10,
        last_offset: 20,
        last_stable_offset: 21,
    };
    let raw = e.encode();
    assert_eq!(&raw[0..2], &[0, 0], "version 0");
    assert_eq!(&raw[2..10], &7i64.to_be_bytes());
    assert_eq!(&raw[26..34], &21i64.to_be_bytes());
    assert_eq!(decode(&raw), (vec![e], true));
}

#[test]
fn aborts_are_indexed_and_commits_and_plain_batches_are_not() {
    let mut r = Rebuilder::default();
    r.note(&batch(9, 0, 5, 0), None); // not transactional
    r.note(&data(1, 5, 3), None); // producer 1 opens at 5
    r.note(&data(2, 8, 2), None); // producer 2 opens at 8
    r.note(&data(1, 10, 1), None); // still the transaction from 5
    r.note(&marker(2, 11), Some(false)); // 2 aborts: 1 still open at 5
    r.note(&marker(1, 12), Some(true)); // 1 commits
    r.note(&data(1, 13, 1), None);
    r.note(&marker(1, 14), Some(false)); // 1 aborts with nothing else open
    let (entries, open) = r.finish();
    let e = |producer_id, first_offset, last_offset, last_stable_offset| AbortedTxn {
        producer_id,
        first_offset,
        last_offset,
        last_stable_offset,
    };
    assert_eq!(entries, vec![e(2, 8, 11, 5), e(1, 13, 14, 15)]);
    assert!(open.is_empty());
    // A fetch of 9..13 returns records of producer 2's aborted transaction; one from 14 none.
    assert_eq!(aborted_between(&entries, 9, 13), vec![(2, 8)]);
    assert_eq!(aborted_between(&entries, 0, 20), vec![(2, 8), (1, 13)]);
    assert_eq!(aborted_between(&entries, 15, 20), vec![]);
}

#[test]
fn a_transaction_open_at_the_start_is_carried_in_and_out() {
    let mut r = Rebuilder::new([(3, 40)]);
    r.note(&data(4, 50, 1), None);
    r.note(&marker(3, 51), Some(false));
    let (entries, open) = r.finish();
    assert_eq!(entries[0].first_offset, 40);
    assert_eq!(
        entries[0].last_stable_offset, 50,
        "producer 4 is still open"
    );
    assert_eq!(open.into_iter().collect::<Vec<_>>(), vec![(4, 50)]);
}

#[test]
fn a_damaged_file_keeps_its_good_prefix_and_says_so() {
    let a = AbortedTxn {
        producer_id: 1,
        first_offset: 0,
        last_offset: 4,
        last_stable_offset: 5,
    };
    let b = AbortedTxn {
        last_offset: 9,
        last_stable_offset: 10,
        ..a
    };
    let mut raw = [a.encode(), b.encode()].concat();
    assert_eq!(decode(&raw), (vec![a, b], true));
    // A torn tail.
    assert_eq!(decode(&raw[..ENTRY_BYTES + 10]), (vec![a], false));
    // Out of order: b's marker before a's.
    let swapped = [b.encode(), a.encode()].concat();
    assert_eq!(decode(&swapped), (vec![b], false));
    // An unknown version, and offsets that could not have been written.
    raw[ENTRY_BYTES] = 9;
    assert_eq!(decode(&raw), (vec![a], false));
    let backwards = AbortedTxn {
        first_offset: 8,
        last_offset: 3,
        ..a
    };
    assert_eq!(decode(&backwards.encode()), (vec![], false));
    assert_eq!(decode(&[]), (vec![], true));
}

#[test]
fn an_index_left_aside_by_a_swap_is_adopted_only_if_the_swap_ran() {
    let entry = |last_offset| AbortedTxn {
        producer_id: 5,
        first_offset: last_offset - 1,
        last_offset,
        last_stable_offset: last_offset + 1,
    };
    let dir = tempfile::tempdir().unwrap();
    let dir = dir.path();
    rewrite(
        &crate::storage::disk::OsDisk::default(),
        dir,
        &[entry(10), entry(20), entry(30)],
    )
    .unwrap();
    // A swap of segment 0 that removes marker 10, and one of segment 25 that removes 30; the
    // first ran (its copy is gone), the second did not.
    write_next(
        &crate::storage::disk::OsDisk::default(),
        dir,
        0,
        &[entry(20), entry(30)],
    )
    .unwrap();
    write_next(
        &crate::storage::disk::OsDisk::default(),
        dir,
        25,
        &[entry(10), entry(20)],
    )
    .unwrap();
    settle_swaps(&crate::storage::disk::OsDisk::default(), dir, |base| {
        base == 25
    })
    .unwrap();
    assert_eq!(
        load(&crate::storage::disk::OsDisk::default(), dir, 0, 100).entries,
        vec![entry(20), entry(30)]
    );
    let left: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    assert_eq!(left, vec![FILE.to_string()], "nothing left aside");
    // After a swap: adopted at once.
    write_next(
        &crate::storage::disk::OsDisk::default(),
        dir,
        40,
        &[entry(30)],
    )
    .unwrap();
    adopt_next(&crate::storage::disk::OsDisk::default(), dir, 40).unwrap();
    assert_eq!(
        load(&crate::storage::disk::OsDisk::default(), dir, 0, 100).entries,
        vec![entry(30)]
    );
}
