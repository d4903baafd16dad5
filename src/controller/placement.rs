//! Replica placement (pure): which brokers hold a new partition's replicas, and which leads.
//!
//! Replicas of one partition go on distinct brokers, and on distinct racks while there are
//! racks enough. Leaders (each partition's first replica) rotate over the brokers, starting
//! from the one that leads fewest partitions now, so leadership spreads across topics too.
//! Like Kafka's rack-aware assignment, brokers are visited in a rack-alternating order
//! (one broker of each rack in turn), so that consecutive replicas fall on different racks.

use crate::storage::catalog::PartitionAssignment;

/// A live broker as placement sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Candidate {
    pub node_id: i32,
    pub rack: Option<String>,
    /// Partitions it leads now.
    pub leaders: usize,
}

/// Assignments for `count` new partitions of `replication_factor` replicas each. Err: fewer
/// live brokers than replicas.
pub fn assign(
    brokers: &[Candidate],
    count: usize,
    replication_factor: usize,
) -> Result<Vec<PartitionAssignment>, String> {
    if replication_factor == 0 {
        return Err("replication factor must be at least 1".into());
    }
    if replication_factor > brokers.len() {
        return Err(format!(
            "replication factor {replication_factor} is larger than the {} live brokers",
            brokers.len()
        ));
    }
    let order = rack_alternating(brokers);
    let n = order.len();
    // Start where leadership is thinnest (the lowest id on a tie), so topics spread.
    let start = (0..n)
        .min_by_key(|&i| (order[i].leaders, order[i].node_id))
        .expect("at least one broker");
    let racks = distinct_racks(brokers);
    let out = (0..count)
        .map(|p| {
            let first = (start + p) % n;
            // Later replicas shift with p / n too, as Kafka's do, so that followers of one
            // leader spread over several brokers.
            let shift = 1 + (p / n) % (n - 1).max(1);
            let replicas = pick_replicas(&order, first, shift, replication_factor, racks);
            // Every replica of a new partition is in sync: they all hold its (empty) log.
            PartitionAssignment {
                leader: replicas[0],
                leader_epoch: 0,
                isr: replicas.clone(),
                replicas,
                ..Default::default()
            }
        })
        .collect();
    Ok(out)
}

/// Replicas starting at `order[first]`, then every `shift`-th broker after it (then any the
/// shift's cycle skips), keeping racks distinct while `racks` allows.
fn pick_replicas(
    order: &[&Candidate],
    first: usize,
    shift: usize,
    want: usize,
    racks: usize,
) -> Vec<i32> {
    let n = order.len();
    let mut visit: Vec<usize> = (1..n).map(|k| (first + k * shift) % n).collect();
    visit.extend(0..n);
    let mut chosen: Vec<&Candidate> = vec![order[first]];
    for distinct in [true, false] {
        for &i in &visit {
            let c = order[i];
            let taken = chosen.iter().any(|x| x.node_id == c.node_id);
            let rack_used = c.rack.is_some() && chosen.iter().any(|x| x.rack == c.rack);
            if chosen.len() < want && !taken && !(distinct && rack_used && chosen.len() < racks) {
                chosen.push(c);
            }
        }
    }
    assert_eq!(
        chosen.len(),
        want,
        "enough brokers were checked by the caller"
    );
    chosen.iter().map(|c| c.node_id).collect()
}

fn distinct_racks(brokers: &[Candidate]) -> usize {
    let mut racks: Vec<&str> = brokers.iter().filter_map(|b| b.rack.as_deref()).collect();
    racks.sort_unstable();
    racks.dedup();
    racks.len()
}

/// Brokers ordered by id within their rack, racks interleaved: r1b1, r2b1, r1b2, r2b2, ...
/// Brokers without a rack count as one rack each.
fn rack_alternating(brokers: &[Candidate]) -> Vec<&Candidate> {
    let mut sorted: Vec<&Candidate> = brokers.iter().collect();
    sorted.sort_by_key(|b| b.node_id);
    let mut groups: Vec<Vec<&Candidate>> = Vec::new();
    for b in sorted {
        match groups
            .iter_mut()
            .find(|g| b.rack.is_some() && g[0].rack == b.rack)
        {
            Some(g) => g.push(b),
            None => groups.push(vec![b]),
        }
    }
    let longest = groups.iter().map(Vec::len).max().unwrap_or(0);
    (0..longest)
        .flat_map(|i| groups.iter().filter_map(move |g| g.get(i).copied()))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn brokers(racks: &[Option<&str>]) -> Vec<Candidate> {
        racks
            .iter()
            .enumerate()
            .map(|(i, r)| Candidate {
                node_id: i as i32 + 1,
                rack: r.map(str::to_string),
                leaders: 0,
            })
            .collect()
    }

    fn leaders_of(a: &[PartitionAssignment]) -> Vec<i32> {
        a.iter().map(|p| p.leader).collect()
    }

    #[test]
    fn replicas_are_distinct_and_leaders_spread() {
        let b = brokers(&[None, None, None]);
        let a = assign(&b, 6, 3).unwrap();
        for p in &a {
            let mut r = p.replicas.clone();
            r.sort_unstable();
            r.dedup();
            assert_eq!(r.len(), 3, "{p:?}");
            assert_eq!(p.isr, p.replicas);
        }
        let mut count = [0; 4];
        for l in leaders_of(&a) {
            count[l as usize] += 1;
        }
        assert_eq!(&count[1..], &[2, 2, 2]);
    }

    #[test]
    fn racks_are_distinct_while_there_are_enough() {
        let b = brokers(&[
            Some("a"),
            Some("a"),
            Some("b"),
            Some("b"),
            Some("c"),
            Some("c"),
        ]);
        for p in assign(&b, 12, 3).unwrap() {
            let mut racks: Vec<_> = p
                .replicas
                .iter()
                .map(|id| b[*id as usize - 1].rack.clone())
                .collect();
            racks.sort();
            racks.dedup();
            assert_eq!(racks.len(), 3, "{p:?}");
        }
        // Four replicas over three racks: brokers stay distinct, one rack repeats.
        for p in assign(&b, 6, 4).unwrap() {
            let mut r = p.replicas.clone();
            r.sort_unstable();
            r.dedup();
            assert_eq!(r.len(), 4);
        }
    }

    #[test]
    fn a_new_topic_starts_where_leadership_is_thinnest() {
        let mut b = brokers(&[None, None, None]);
        b[0].leaders = 5;
        b[1].leaders = 1;
        b[2].leaders = 3;
        assert_eq!(leaders_of(&assign(&b, 1, 1).unwrap()), vec![2]);
    }

    #[test]
    fn too_few_brokers_is_refused() {
        let b = brokers(&[None, None]);
        assert!(assign(&b, 1, 3).unwrap_err().contains("2 live brokers"));
        assert!(assign(&b, 1, 0).is_err());
        assert_eq!(assign(&b, 3, 2).unwrap().len(), 3);
    }
}
