//! The faults the world draws while `faulting`: a process crash (restarted later), every node
//! losing power at once (each restarted later), a process
//! stopped for a while (SIGSTOP), a link cut one way or a node cut off both ways (healed
//! later), a node's monotonic clock jumping ahead. Disk faults are drawn by each `SimDisk`, message loss by the `Network`.

use super::world::{Event, World};
use rand::Rng;

impl World {
    pub(super) fn on_fault(&mut self) -> Result<(), super::checks::Violation> {
        if !self.workload.faulting {
            return Ok(());
        }
        let next = self.rng.gen_range(200..3_000);
        self.schedule(next, Event::Fault);
        let n = self.slots.len();
        let i = self.rng.gen_range(0..n);
        match self.rng.gen_range(0..5) {
            0 if self.rng.gen_bool(0.1) => self.power_cut(),
            0 => {
                self.crash(i, "killed", false);
                self.schedule_restart(i);
            }
            1 => {
                let for_ms = self.rng.gen_range(100..15_000);
                self.pause(i, for_ms);
                self.ledger.stats.pauses += 1;
                self.trace
                    .note(self.now_ms, format!("node {i} stopped for {for_ms} ms"));
            }
            2 => {
                let j = (i + self.rng.gen_range(1..n)) % n;
                self.net.cut(i, j);
                self.ledger.stats.cuts += 1;
                let for_ms = self.rng.gen_range(100..10_000);
                self.trace
                    .note(self.now_ms, format!("link {i}→{j} cut for {for_ms} ms"));
                self.schedule(for_ms, Event::Heal(vec![(i, j)]));
            }
            3 => {
                let by_ms = self.rng.gen_range(500..20_000);
                self.slots[i].clock_jump_ms += by_ms;
                self.ledger.stats.clock_jumps += 1;
                self.trace.note(
                    self.now_ms,
                    format!("node {i}'s clock jumps {by_ms} ms ahead"),
                );
            }
            _ => {
                let links: Vec<(usize, usize)> = (0..n)
                    .filter(|j| *j != i)
                    .flat_map(|j| [(i, j), (j, i)])
                    .collect();
                for (a, b) in &links {
                    self.net.cut(*a, *b);
                }
                self.ledger.stats.cuts += 1;
                let for_ms = self.rng.gen_range(100..12_000);
                self.trace
                    .note(self.now_ms, format!("node {i} cut off for {for_ms} ms"));
                self.schedule(for_ms, Event::Heal(links));
            }
        }
        Ok(())
    }

    /// Every node loses power at once: each keeps only what its disk made durable, and each
    /// comes back on its own.
    fn power_cut(&mut self) {
        self.ledger.stats.power_cuts += 1;
        self.trace.note(self.now_ms, "power cut: every node".into());
        for i in 0..self.slots.len() {
            self.crash(i, "power cut", true);
            self.schedule_restart(i);
        }
    }

    /// A crashed node restarts: half at once, as a supervisor restarts a crashed broker
    /// (inside its session), half after a while.
    fn schedule_restart(&mut self, i: usize) {
        let after = if self.rng.gen_bool(0.5) {
            self.rng.gen_range(100..1_500)
        } else {
            self.rng.gen_range(100..8_000)
        };
        self.schedule(after, Event::Restart(i));
    }

    pub(super) fn on_heal(&mut self, links: Vec<(usize, usize)>) {
        for (a, b) in links {
            self.net.heal(a, b);
        }
    }
}
