//! The faults the world draws while `faulting`: a process crash (restarted later), every node
//! losing power at once (each restarted later), a process
//! stopped for a while (SIGSTOP), a link cut one way or a node cut off both ways (healed
//! later), a node's monotonic clock jumping ahead. Disk faults are drawn by each `SimDisk`, message loss by the `Network`.

use super::world::{Event, World};
use rand::Rng;
use rand_chacha::ChaCha8Rng;

/// Which faults a run draws, and how often. Each seed weights the kinds its own way (swarm
/// testing): a run of nothing but crashes and power cuts, or one without cut links, reaches
/// orders of events that an even mix reaches only once in thousands of seeds.
#[derive(Clone, Copy, Debug)]
pub struct FaultMix {
    /// Relative weights of: a crash, a pause, a cut link, a clock jump, a node cut off.
    weights: [u32; 5],
    /// The share of crashes that are power cuts of every node (per mille).
    power_cut_permille: u32,
    /// The most time between two faults.
    interval_max_ms: u64,
    /// The share of the flusher's passes that start late (per mille; a stalled task, a busy
    /// core): writes pile up unsynced meanwhile.
    pub flush_late_permille: u32,
    /// The share of segment rolls over an unsynced tail that a power cut follows within a
    /// sync's time (per mille): a roll is where a log's files change shape, and a cut then
    /// finds out whether every file it needs was durable in time.
    power_cut_after_roll_permille: u32,
    /// How often a replica log's append finds its disk full (per million appends to any of
    /// its files), on the nodes whose disks fill up.
    pub log_no_space_ppm: u32,
}

impl FaultMix {
    pub fn draw(rng: &mut ChaCha8Rng) -> FaultMix {
        let mut weights = [0; 5];
        for w in &mut weights {
            *w = if rng.gen_bool(0.8) {
                rng.gen_range(1..=4)
            } else {
                0
            };
        }
        if weights.iter().all(|w| *w == 0) {
            weights[0] = 1;
        }
        FaultMix {
            weights,
            power_cut_permille: [100, 100, 400, 900][rng.gen_range(0..4)],
            interval_max_ms: if rng.gen_bool(0.3) { 1_000 } else { 3_000 },
            flush_late_permille: if rng.gen_bool(0.3) { 400 } else { 50 },
            power_cut_after_roll_permille: if rng.gen_bool(0.3) { 200 } else { 0 },
            log_no_space_ppm: [5_000, 20_000, 50_000][rng.gen_range(0..3)],
        }
    }

    /// The kind of the next fault: an index into `weights`.
    fn pick(&self, rng: &mut ChaCha8Rng) -> usize {
        let total: u32 = self.weights.iter().sum();
        assert!(total > 0, "a fault mix draws some fault");
        let mut at = rng.gen_range(0..total);
        for (kind, w) in self.weights.iter().enumerate() {
            if at < *w {
                return kind;
            }
            at -= w;
        }
        unreachable!("{at} within the weights' total {total}")
    }
}

impl World {
    pub(super) fn on_fault(&mut self) -> Result<(), super::checks::Violation> {
        if !self.workload.faulting {
            return Ok(());
        }
        let mix = self.workload.faults;
        let next = self.rng.gen_range(200..mix.interval_max_ms);
        self.schedule(next, Event::Fault);
        let n = self.slots.len();
        let i = self.rng.gen_range(0..n);
        match mix.pick(&mut self.rng) {
            0 if self.rng.gen_ratio(mix.power_cut_permille, 1_000) => self.power_cut(),
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

    /// After leader `i`'s log rolled over an unsynced tail: now and then a power cut, before
    /// or while its next sync runs (`FaultMix::power_cut_after_roll_permille`).
    pub(super) fn now_and_then_power_cut(&mut self, i: usize) {
        let permille = self.workload.faults.power_cut_after_roll_permille;
        if !self.workload.faulting || !self.rng.gen_ratio(permille, 1_000) {
            return;
        }
        let after_ms = self.rng.gen_range(0..=self.slots[i].flush_max_ms);
        self.schedule(after_ms, Event::PowerCut);
    }

    /// Every node loses power at once: each keeps only what its disk made durable, and each
    /// comes back on its own.
    pub(super) fn power_cut(&mut self) {
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
