//! The simulated network: each message is delivered after a drawn latency (so messages
//! reorder), or lost, or delivered twice; links may be cut one way or both, and heal.

use rand::Rng;
use rand_chacha::ChaCha8Rng;
use std::collections::BTreeSet;

pub struct Network {
    /// Per million messages.
    drop_ppm: u32,
    duplicate_ppm: u32,
    /// Latency is drawn in [1, max_latency_ms], with rare spikes (`latency`).
    max_latency_ms: u64,
    /// Cut links, (from, to): what is sent on them is lost.
    cut: BTreeSet<(usize, usize)>,
}

impl Network {
    pub fn draw(rng: &mut ChaCha8Rng) -> Network {
        Network {
            drop_ppm: rng.gen_range(0..50_000),
            duplicate_ppm: rng.gen_range(0..20_000),
            max_latency_ms: rng.gen_range(1..=20),
            cut: BTreeSet::new(),
        }
    }

    /// The delays after which a message sent now from `from` to `to` arrives: none when it is
    /// lost, two when it is duplicated.
    pub fn deliveries(&self, rng: &mut ChaCha8Rng, from: usize, to: usize) -> Vec<u64> {
        if from != to && self.cut.contains(&(from, to)) {
            return Vec::new();
        }
        let mut out = Vec::with_capacity(2);
        if from == to || rng.gen_range(0..1_000_000) >= self.drop_ppm {
            out.push(self.latency(rng));
        }
        if from != to && rng.gen_range(0..1_000_000) < self.duplicate_ppm {
            out.push(self.latency(rng));
        }
        out
    }

    /// A drawn latency; one message in a hundred is ten times late, and one in a thousand is
    /// held for seconds (a retransmission after loss, a stalled queue): it arrives after
    /// everything the world did meanwhile, failovers included.
    fn latency(&self, rng: &mut ChaCha8Rng) -> u64 {
        let ms = rng.gen_range(1..=self.max_latency_ms);
        match rng.gen_range(0..1000) {
            0 => rng.gen_range(1_000..5_000),
            1..=10 => ms * 10,
            _ => ms,
        }
    }

    pub fn cut(&mut self, from: usize, to: usize) {
        self.cut.insert((from, to));
    }

    pub fn heal(&mut self, from: usize, to: usize) {
        self.cut.remove(&(from, to));
    }

    pub fn heal_all(&mut self) {
        self.cut.clear();
    }
}
