//! Time and identifiers, injected: nothing below the server reads a clock or draws a random
//! number itself, so that tests (and later a simulator) can drive every state machine with a
//! fake clock and reproducible ids.
//!
//! Two clocks, for two purposes:
//! - the monotonic clock (`monotonic_ms`) never goes back: every deadline and timeout uses it
//!   (timing wheels, request deadlines, session timeouts, idle timers, rate limits);
//! - the wall clock (`wall_ms`, ms since the Unix epoch) may jump: it is used only for what is
//!   wall time by definition (record timestamps, LogAppendTime, retention by age, segment age,
//!   commit timestamps, producer expiry, which Kafka also measures in wall time).
//!
//! Pure state machines take the time as a value (`Now`, or one of its fields) on every call.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;
use std::time::Instant;

/// One reading of both clocks, handed to pure state machines as a value.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Now {
    pub monotonic_ms: u64,
    pub wall_ms: u64,
}

/// A source of time. Shared by the shards of one process (`Send + Sync`).
pub trait Clock: Send + Sync {
    /// Milliseconds on a clock that never goes back; its origin is arbitrary but common to
    /// every shard of the process, so a deadline computed on one shard holds on another.
    fn monotonic_ms(&self) -> u64;
    /// The same clock in microseconds, for measuring short durations (fsync, metrics).
    fn monotonic_us(&self) -> u64 {
        self.monotonic_ms() * 1000
    }
    /// Milliseconds since the Unix epoch.
    fn wall_ms(&self) -> u64;

    fn now(&self) -> Now {
        Now {
            monotonic_ms: self.monotonic_ms(),
            wall_ms: self.wall_ms(),
        }
    }
}

/// The operating system's clocks.
#[derive(Debug, Default, Clone, Copy)]
pub struct SystemClock;

/// The monotonic origin: the first reading in this process. Readings start at
/// `MONOTONIC_ORIGIN_MS`, not 0, so that "deadline = now - x" arithmetic never underflows in
/// the first moments of a process.
static ORIGIN: OnceLock<Instant> = OnceLock::new();
const MONOTONIC_ORIGIN_MS: u64 = 1_000_000;

impl Clock for SystemClock {
    fn monotonic_ms(&self) -> u64 {
        self.monotonic_us() / 1000
    }

    fn monotonic_us(&self) -> u64 {
        let origin = ORIGIN.get_or_init(Instant::now);
        MONOTONIC_ORIGIN_MS * 1000 + origin.elapsed().as_micros() as u64
    }

    fn wall_ms(&self) -> u64 {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_millis() as u64)
            .unwrap_or(0)
    }
}

/// A clock that moves only when told: for unit tests and simulation.
#[derive(Debug)]
pub struct ManualClock {
    monotonic_ms: AtomicU64,
    wall_ms: AtomicU64,
}

impl ManualClock {
    pub fn new(monotonic_ms: u64, wall_ms: u64) -> ManualClock {
        ManualClock {
            monotonic_ms: AtomicU64::new(monotonic_ms),
            wall_ms: AtomicU64::new(wall_ms),
        }
    }

    /// Moves both clocks forward by `ms`.
    pub fn advance(&self, ms: u64) {
        self.monotonic_ms.fetch_add(ms, Ordering::SeqCst);
        self.wall_ms.fetch_add(ms, Ordering::SeqCst);
    }

    /// Sets the wall clock alone (a jump, as NTP may make); the monotonic clock is unmoved.
    pub fn set_wall_ms(&self, wall_ms: u64) {
        self.wall_ms.store(wall_ms, Ordering::SeqCst);
    }
}

impl Clock for ManualClock {
    fn monotonic_ms(&self) -> u64 {
        self.monotonic_ms.load(Ordering::SeqCst)
    }

    fn wall_ms(&self) -> u64 {
        self.wall_ms.load(Ordering::SeqCst)
    }
}

/// A source of 128-bit identifiers (member ids, topic ids, cluster ids).
pub trait Ids {
    fn uuid(&mut self) -> [u8; 16];
}

/// Random version-4 UUIDs, for production.
#[derive(Debug, Default)]
pub struct RandomIds;

impl Ids for RandomIds {
    fn uuid(&mut self) -> [u8; 16] {
        *uuid::Uuid::new_v4().as_bytes()
    }
}

/// Reproducible ids from a seed (splitmix64), for tests and simulation. They carry the
/// version-4 bits, so they look like any other UUID to clients.
#[derive(Debug)]
pub struct SeededIds {
    state: u64,
}

impl SeededIds {
    pub fn new(seed: u64) -> SeededIds {
        SeededIds { state: seed }
    }

    fn next_u64(&mut self) -> u64 {
        self.state = self.state.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.state;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
}

impl Ids for SeededIds {
    fn uuid(&mut self) -> [u8; 16] {
        let mut out = [0u8; 16];
        out[..8].copy_from_slice(&self.next_u64().to_be_bytes());
        out[8..].copy_from_slice(&self.next_u64().to_be_bytes());
        *uuid::Builder::from_random_bytes(out).as_uuid().as_bytes()
    }
}

/// An id as the protocol writes it in text (member ids): hyphenated lower-case hex.
pub fn uuid_text(id: [u8; 16]) -> String {
    uuid::Uuid::from_bytes(id).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn system_monotonic_never_goes_back() {
        let c = SystemClock;
        let a = c.monotonic_ms();
        let b = c.monotonic_ms();
        assert!(a >= MONOTONIC_ORIGIN_MS && b >= a);
    }

    #[test]
    fn manual_clock_moves_only_when_told() {
        let c = ManualClock::new(10, 1_000);
        assert_eq!(
            c.now(),
            Now {
                monotonic_ms: 10,
                wall_ms: 1_000
            }
        );
        c.advance(5);
        assert_eq!(
            c.now(),
            Now {
                monotonic_ms: 15,
                wall_ms: 1_005
            }
        );
        c.set_wall_ms(0);
        assert_eq!(
            c.now(),
            Now {
                monotonic_ms: 15,
                wall_ms: 0
            }
        );
    }

    #[test]
    fn seeded_ids_repeat_per_seed_and_differ_between_draws() {
        let (mut a, mut b) = (SeededIds::new(7), SeededIds::new(7));
        let (x, y) = (a.uuid(), a.uuid());
        assert_ne!(x, y);
        assert_eq!(x, b.uuid());
        assert_eq!(uuid::Uuid::from_bytes(x).get_version_num(), 4);
    }
}
