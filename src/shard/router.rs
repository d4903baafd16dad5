//! The deterministic map from a partition to the shard that owns it.

use crate::config::Config;
use std::collections::HashMap;

#[derive(Debug, Clone)]
pub struct Router {
    shards: usize,
    pins: HashMap<String, Vec<usize>>,
}

/// FNV-1a: stable across builds and platforms, unlike std's randomized hasher, so a partition's
/// owner does not move between restarts.
pub fn fnv1a(data: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for &b in data {
        h ^= b as u64;
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    h
}

impl Router {
    pub fn new(config: &Config) -> Router {
        let pins = config
            .sharding
            .pin
            .iter()
            .map(|p| (p.topic.clone(), p.shards.clone()))
            .collect();
        Router {
            shards: config.shards,
            pins,
        }
    }

    pub fn shards(&self) -> usize {
        self.shards
    }

    /// Pinned topics use their shard list round-robin; others start at a hash of the name and
    /// take consecutive shards, so a topic's partitions spread evenly.
    pub fn shard_of(&self, topic: &str, partition: i32) -> usize {
        assert!(
            partition >= 0,
            "partition indexes are checked before routing"
        );
        if let Some(list) = self.pins.get(topic) {
            return list[partition as usize % list.len()];
        }
        ((fnv1a(topic.as_bytes()) % self.shards as u64 + partition as u64) % self.shards as u64)
            as usize
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::TopicPin;

    #[test]
    fn hash_spreads_and_is_stable() {
        let c = Config {
            shards: 4,
            ..Config::default()
        };
        let r = Router::new(&c);
        let owners: Vec<_> = (0..8).map(|p| r.shard_of("orders", p)).collect();
        for s in 0..4 {
            assert_eq!(owners.iter().filter(|&&o| o == s).count(), 2);
        }
        assert_eq!(
            owners,
            (0..8)
                .map(|p| Router::new(&c).shard_of("orders", p))
                .collect::<Vec<_>>()
        );
    }

    #[test]
    fn pins_win() {
        let mut c = Config {
            shards: 4,
            ..Config::default()
        };
        c.sharding.pin.push(TopicPin {
            topic: "hot".into(),
            shards: vec![3, 1],
        });
        let r = Router::new(&c);
        assert_eq!(
            (0..4).map(|p| r.shard_of("hot", p)).collect::<Vec<_>>(),
            vec![3, 1, 3, 1]
        );
    }
}
