//! The run's event trace: the last `KEPT` notable events (starts, crashes, faults, elections,
//! applied proposals), with virtual times only, so a seed always prints the same trace.

use std::collections::VecDeque;

const KEPT: usize = 2000;

#[derive(Default)]
pub struct Trace {
    lines: VecDeque<String>,
}

impl Trace {
    pub fn note(&mut self, now_ms: u64, what: String) {
        if self.lines.len() == KEPT {
            self.lines.pop_front();
        }
        self.lines
            .push_back(format!("{:>4}.{:03}s {what}", now_ms / 1000, now_ms % 1000));
    }

    /// The last `n` lines.
    pub fn tail(&self, n: usize) -> impl Iterator<Item = &String> {
        self.lines.iter().skip(self.lines.len().saturating_sub(n))
    }
}
