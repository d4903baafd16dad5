//! The simulated network: each message is delivered after a drawn latency (so messages
//! reorder), or lost, or delivered twice; links may be cut one way or both, and heal.

use rand::Rng;
use rand_chacha::ChaCha8Rng;
use std::collections::{BTreeMap, BTreeSet};

pub struct Network {
    /// Per million messages.
    drop_ppm: u32,
    duplicate_ppm: u32,
    /// Latency is drawn in [1, max_latency_ms], with rare spikes (`latency`).
    max_latency_ms: u64,
    /// Cut links, (from, to): what is sent on them is lost.
    cut: BTreeSet<(usize, usize)>,
    /// Whether rare latency spikes happen (`latency`).
    spikes: bool,
    /// Per pair of ends (`ordered`): the current connection's generation, and when the last
    /// message sent on it arrives.
    connections: BTreeMap<(usize, usize), (u64, u64)>,
}

/// One connection between two ends: a later one between the same ends (`reconnect`) has a
/// higher generation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Connection {
    ends: (usize, usize),
    generation: u64,
}

impl Network {
    pub fn draw(rng: &mut ChaCha8Rng) -> Network {
        Network {
            drop_ppm: rng.gen_range(0..50_000),
            duplicate_ppm: rng.gen_range(0..20_000),
            max_latency_ms: rng.gen_range(1..=20),
            cut: BTreeSet::new(),
            spikes: true,
            connections: BTreeMap::new(),
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
    /// The delay after which a message sent at `now_ms` from `from` to `to` on the current
    /// connection between `ends` arrives, as TCP delivers: lost (the connection broke) but
    /// never reordered behind a later one or repeated; and the connection it travels on. RPC
    /// requests and client requests travel so; Raft's messages, which tolerate anything, do
    /// not.
    pub fn ordered(
        &mut self,
        rng: &mut ChaCha8Rng,
        (from, to): (usize, usize),
        ends: (usize, usize),
        now_ms: u64,
    ) -> Option<(u64, Connection)> {
        let delay_ms = *self.deliveries(rng, from, to).first()?;
        let (generation, last_ms) = self.connections.entry(ends).or_insert((0, 0));
        let at_ms = (now_ms + delay_ms).max(*last_ms);
        *last_ms = at_ms;
        let connection = Connection {
            ends,
            generation: *generation,
        };
        Some((at_ms - now_ms, connection))
    }

    /// A sender that gave up waiting closes its connection between `ends` and opens a new one:
    /// what the old one still carried is never delivered (as a closed socket's unsent bytes).
    pub fn reconnect(&mut self, ends: (usize, usize)) {
        let (generation, last_ms) = self.connections.entry(ends).or_insert((0, 0));
        *generation += 1;
        *last_ms = 0;
    }

    /// Whether `connection` is still the current one between its ends.
    pub fn is_open(&self, connection: Connection) -> bool {
        self.connections
            .get(&connection.ends)
            .is_some_and(|(generation, _)| *generation == connection.generation)
    }

    fn latency(&self, rng: &mut ChaCha8Rng) -> u64 {
        let ms = rng.gen_range(1..=self.max_latency_ms);
        match rng.gen_range(0..1000) {
            0 if self.spikes => rng.gen_range(1_000..5_000),
            1..=10 if self.spikes => ms * 10,
            _ => ms,
        }
    }

    pub fn cut(&mut self, from: usize, to: usize) {
        self.cut.insert((from, to));
    }

    pub fn heal(&mut self, from: usize, to: usize) {
        self.cut.remove(&(from, to));
    }

    /// Faults are over: every link heals, and no message is lost, repeated or held for
    /// seconds any more (a session of a few heartbeats would otherwise still expire now and
    /// then, and the cluster never be seen settled).
    pub fn heal_all(&mut self) {
        self.cut.clear();
        self.drop_ppm = 0;
        self.duplicate_ppm = 0;
        self.spikes = false;
    }
}
