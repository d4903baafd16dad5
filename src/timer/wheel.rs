//! A hierarchical timing wheel, as Kafka's purgatory uses (Varghese & Lauck, with Kafka's
//! bucket queue): pure logic, no clock and no I/O. The caller passes the time as a value.
//!
//! - Level 0 has `wheel_size` buckets of `tick_ms` each; level k+1 has buckets as wide as all of
//!   level k. Levels are added on demand ("overflow wheels") for long delays.
//! - Timers live in a slab and are linked into their bucket's doubly linked list, so insert and
//!   cancel are O(1) and need no allocation once the slab has grown.
//! - A min-heap holds one entry per non-empty bucket (by its expiration), not per timer, so the
//!   driver knows the next deadline without scanning and an idle wheel does no work.
//! - `poll(now)` pops due buckets; each timer in one either expires or moves to a finer level.

use std::cmp::Reverse;
use std::collections::BinaryHeap;

const NIL: u32 = u32::MAX;
/// Levels beyond this would span more than the u64 millisecond range for any sane wheel.
const MAX_LEVELS: usize = 16;

/// Handle to cancel a timer; stale handles (fired or cancelled) are detected by generation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TimerId {
    index: u32,
    generation: u32,
}

#[derive(Debug, PartialEq, Eq)]
pub enum InsertError {
    /// The wheel holds `capacity` timers already.
    Full,
}

struct Slot<T> {
    deadline_ms: u64,
    payload: Option<T>,
    generation: u32,
    prev: u32,
    next: u32,
    /// (level, bucket) it is linked into; NIL level when free.
    level: u32,
    bucket: u32,
}

struct Bucket {
    head: u32,
    /// Expiration of the bucket's current round, or u64::MAX when it has no heap entry.
    expiration_ms: u64,
}

struct Level {
    tick_ms: u64,
    current_ms: u64,
    buckets: Vec<Bucket>,
}

pub struct TimingWheel<T> {
    wheel_size: u64,
    levels: Vec<Level>,
    slots: Vec<Slot<T>>,
    free: Vec<u32>,
    heap: BinaryHeap<Reverse<(u64, u32, u32)>>,
    len: usize,
    capacity: usize,
}

impl<T> TimingWheel<T> {
    /// `tick_ms` ≥ 1, `wheel_size` ≥ 2; time starts at `now_ms`; at most `capacity` timers.
    pub fn new(tick_ms: u64, wheel_size: usize, now_ms: u64, capacity: usize) -> TimingWheel<T> {
        assert!(tick_ms >= 1 && wheel_size >= 2 && capacity < NIL as usize);
        let mut w = TimingWheel {
            wheel_size: wheel_size as u64,
            levels: Vec::new(),
            slots: Vec::new(),
            free: Vec::new(),
            heap: BinaryHeap::new(),
            len: 0,
            capacity,
        };
        w.push_level(tick_ms, now_ms);
        w
    }

    fn push_level(&mut self, tick_ms: u64, now_ms: u64) {
        let buckets = (0..self.wheel_size)
            .map(|_| Bucket {
                head: NIL,
                expiration_ms: u64::MAX,
            })
            .collect();
        self.levels.push(Level {
            tick_ms,
            current_ms: now_ms - now_ms % tick_ms,
            buckets,
        });
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Earliest time at which a timer is due. Drops heap entries of buckets that were emptied
    /// by cancels or moved on to a later round, so an idle wheel reports nothing.
    pub fn next_expiration(&mut self) -> Option<u64> {
        while let Some(&Reverse((expiration, level, bucket))) = self.heap.peek() {
            let b = &mut self.levels[level as usize].buckets[bucket as usize];
            if b.expiration_ms == expiration && b.head != NIL {
                return Some(expiration);
            }
            if b.expiration_ms == expiration {
                b.expiration_ms = u64::MAX; // emptied by cancels
            }
            self.heap.pop();
        }
        None
    }

    /// Adds a timer. A deadline within the current tick is already due: it is returned by the
    /// next `poll`.
    pub fn insert(&mut self, deadline_ms: u64, payload: T) -> Result<TimerId, InsertError> {
        if self.len >= self.capacity {
            return Err(InsertError::Full);
        }
        let index = match self.free.pop() {
            Some(i) => i,
            None => {
                self.slots.push(Slot {
                    deadline_ms: 0,
                    payload: None,
                    generation: 0,
                    prev: NIL,
                    next: NIL,
                    level: NIL,
                    bucket: NIL,
                });
                (self.slots.len() - 1) as u32
            }
        };
        let slot = &mut self.slots[index as usize];
        slot.deadline_ms = deadline_ms;
        slot.payload = Some(payload);
        self.len += 1;
        let generation = slot.generation;
        self.place(index);
        Ok(TimerId { index, generation })
    }

    /// Removes a timer; returns its payload if it had neither fired nor been cancelled.
    pub fn cancel(&mut self, id: TimerId) -> Option<T> {
        let slot = self.slots.get(id.index as usize)?;
        if slot.generation != id.generation || slot.payload.is_none() {
            return None;
        }
        self.unlink(id.index);
        Some(self.release(id.index))
    }

    /// Advances time to `now_ms` and returns the payloads of every timer due by then, in
    /// deadline order within each bucket's tick.
    pub fn poll(&mut self, now_ms: u64) -> Vec<T> {
        let mut fired: Vec<(u64, T)> = Vec::new();
        while let Some(&Reverse((expiration, level, bucket))) = self.heap.peek() {
            if expiration > now_ms {
                break;
            }
            self.heap.pop();
            let b = &mut self.levels[level as usize].buckets[bucket as usize];
            if b.expiration_ms != expiration {
                continue; // a stale entry from an earlier round
            }
            b.expiration_ms = u64::MAX;
            let mut cursor = std::mem::replace(&mut b.head, NIL);
            self.advance_levels(expiration);
            // Re-place each timer: it fires, or drops to a finer level.
            while cursor != NIL {
                let next = self.slots[cursor as usize].next;
                self.slots[cursor as usize].level = NIL;
                if self.slots[cursor as usize].deadline_ms
                    < self.levels[0].current_ms + self.levels[0].tick_ms
                {
                    let deadline = self.slots[cursor as usize].deadline_ms;
                    fired.push((deadline, self.release(cursor)));
                } else {
                    self.place(cursor);
                }
                cursor = next;
            }
        }
        self.advance_levels(now_ms);
        fired.sort_by_key(|(d, _)| *d);
        fired.into_iter().map(|(_, p)| p).collect()
    }

    fn advance_levels(&mut self, now_ms: u64) {
        for level in &mut self.levels {
            if now_ms >= level.current_ms + level.tick_ms {
                level.current_ms = now_ms - now_ms % level.tick_ms;
            }
        }
    }

    /// Links a timer into the finest level whose span holds its deadline; a due timer goes into
    /// the current level-0 bucket and is returned by the next poll.
    fn place(&mut self, index: u32) {
        let deadline = self.slots[index as usize].deadline_ms;
        let mut level = 0;
        loop {
            let (tick, current) = (self.levels[level].tick_ms, self.levels[level].current_ms);
            let span = tick.saturating_mul(self.wheel_size);
            if deadline < current.saturating_add(span) || level + 1 == MAX_LEVELS {
                let virtual_id = deadline.max(current) / tick;
                let bucket = (virtual_id % self.wheel_size) as u32;
                let expiration = virtual_id * tick;
                self.link(index, level as u32, bucket);
                let b = &mut self.levels[level].buckets[bucket as usize];
                if b.expiration_ms != expiration {
                    b.expiration_ms = expiration;
                    self.heap.push(Reverse((expiration, level as u32, bucket)));
                }
                return;
            }
            if level + 1 == self.levels.len() {
                self.push_level(span, current);
            }
            level += 1;
        }
    }

    fn link(&mut self, index: u32, level: u32, bucket: u32) {
        let head = self.levels[level as usize].buckets[bucket as usize].head;
        {
            let s = &mut self.slots[index as usize];
            s.prev = NIL;
            s.next = head;
            s.level = level;
            s.bucket = bucket;
        }
        if head != NIL {
            self.slots[head as usize].prev = index;
        }
        self.levels[level as usize].buckets[bucket as usize].head = index;
    }

    fn unlink(&mut self, index: u32) {
        let (prev, next, level, bucket) = {
            let s = &self.slots[index as usize];
            (s.prev, s.next, s.level, s.bucket)
        };
        if level == NIL {
            return;
        }
        if prev != NIL {
            self.slots[prev as usize].next = next;
        } else {
            self.levels[level as usize].buckets[bucket as usize].head = next;
        }
        if next != NIL {
            self.slots[next as usize].prev = prev;
        }
        self.slots[index as usize].level = NIL;
    }

    fn release(&mut self, index: u32) -> T {
        let s = &mut self.slots[index as usize];
        s.generation = s.generation.wrapping_add(1);
        s.prev = NIL;
        s.next = NIL;
        self.free.push(index);
        self.len -= 1;
        s.payload.take().expect("a live timer has a payload")
    }

    /// Bytes of bookkeeping held, for the memory-growth test and metrics.
    pub fn footprint_slots(&self) -> (usize, usize) {
        (self.slots.len(), self.heap.len())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fires_in_order_across_levels() {
        let mut w = TimingWheel::new(1, 8, 0, 1000);
        // Level 0 spans 8 ms, level 1 64 ms, level 2 512 ms.
        for d in [5u64, 3, 70, 600, 9, 64, 1000, 2] {
            w.insert(d, d).unwrap();
        }
        assert_eq!(w.next_expiration(), Some(2));
        let mut seen = Vec::new();
        for now in 0..=1000 {
            for p in w.poll(now) {
                assert_eq!(p, now, "timer {p} fired at {now}");
                seen.push(p);
            }
        }
        assert_eq!(seen, vec![2, 3, 5, 9, 64, 70, 600, 1000]);
        assert!(w.is_empty());
        assert_eq!(w.next_expiration(), None);
    }

    #[test]
    fn poll_jumps_over_idle_time() {
        let mut w = TimingWheel::new(1, 16, 100, 10);
        w.insert(150, "a").unwrap();
        w.insert(10_000, "b").unwrap();
        assert!(w.poll(149).is_empty());
        assert_eq!(w.poll(5_000), vec!["a"]);
        assert_eq!(w.poll(100_000), vec!["b"]);
    }

    #[test]
    fn cancel_and_stale_handles() {
        let mut w = TimingWheel::new(1, 8, 0, 10);
        let a = w.insert(5, 'a').unwrap();
        let b = w.insert(500, 'b').unwrap();
        assert_eq!(w.cancel(a), Some('a'));
        assert_eq!(w.cancel(a), None, "already cancelled");
        let c = w.insert(7, 'c').unwrap(); // reuses a's slot
        assert_eq!(
            w.cancel(a),
            None,
            "a stale handle does not cancel the slot's new timer"
        );
        assert_eq!(w.poll(10), vec!['c']);
        assert_eq!(w.cancel(c), None, "already fired");
        assert_eq!(w.cancel(b), Some('b'));
        assert!(w.poll(1000).is_empty());
    }

    #[test]
    fn overflow_wheels_hold_long_delays() {
        let mut w = TimingWheel::new(1, 4, 0, 10);
        w.insert(1 << 40, 1).unwrap(); // far beyond any level created so far
        assert!(w.poll((1 << 40) - 1).is_empty());
        assert_eq!(w.poll(1 << 40), vec![1]);
    }

    #[test]
    fn past_deadlines_fire_on_next_poll() {
        let mut w = TimingWheel::new(10, 8, 1000, 10);
        w.insert(500, 'x').unwrap();
        assert_eq!(w.poll(1000), vec!['x']);
    }

    #[test]
    fn capacity_is_a_bound() {
        let mut w = TimingWheel::new(1, 8, 0, 2);
        w.insert(1, ()).unwrap();
        w.insert(2, ()).unwrap();
        assert_eq!(w.insert(3, ()), Err(InsertError::Full));
        w.poll(1);
        w.insert(3, ()).unwrap();
    }

    #[test]
    fn a_million_timers_reuse_memory() {
        const N: u64 = 1_000_000;
        let mut w = TimingWheel::new(1, 512, 0, N as usize);
        let mut rng = 12345u64;
        let mut next = |w: &mut TimingWheel<u64>, now: u64| {
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            let d = now + 1 + rng % 120_000;
            w.insert(d, d).unwrap()
        };
        let ids: Vec<_> = (0..N).map(|_| next(&mut w, 0)).collect();
        for id in ids.iter().step_by(2) {
            w.cancel(*id).unwrap();
        }
        let mut fired = 0;
        let mut last = 0;
        for now in (0..=120_001).step_by(997).chain([120_001]) {
            for d in w.poll(now) {
                assert!(
                    d <= now && d >= last,
                    "deadline {d} fired at {now} after {last}"
                );
                last = d;
                fired += 1;
            }
        }
        assert_eq!(fired, N / 2);
        let (slots_after_first, _) = w.footprint_slots();
        // A second million in steady state: the slab and heap do not grow past the first round.
        for round in 0..4 {
            let base = 200_000 * (round + 1);
            for _ in 0..N / 4 {
                next(&mut w, base);
            }
            w.poll(base + 200_000);
        }
        let (slots, heap) = w.footprint_slots();
        assert_eq!(slots, slots_after_first);
        assert!(heap <= 512 * 4, "heap holds buckets, not timers: {heap}");
    }
}
