//! Latency histograms and the figures a run reports.

use hdrhistogram::Histogram;
use serde::Serialize;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

/// Latencies are recorded in microseconds, from 1 µs to 10 minutes, 3 significant digits.
const MAX_LATENCY_US: u64 = 600_000_000;

pub fn new_histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, MAX_LATENCY_US, 3).expect("valid histogram bounds")
}

/// Counters and a histogram shared by the worker threads of one side (producers or consumers).
/// Each worker owns one `Mutex<Histogram>`; the progress printer locks them once a second.
pub struct Meter {
    pub records: AtomicU64,
    pub bytes: AtomicU64,
    pub errors: AtomicU64,
    pub histograms: Vec<Mutex<Histogram<u64>>>,
}

impl Meter {
    pub fn new(workers: usize) -> Meter {
        Meter {
            records: AtomicU64::new(0),
            bytes: AtomicU64::new(0),
            errors: AtomicU64::new(0),
            histograms: (0..workers).map(|_| Mutex::new(new_histogram())).collect(),
        }
    }

    pub fn record(&self, worker: usize, bytes: usize, latency_us: u64) {
        self.records.fetch_add(1, Ordering::Relaxed);
        self.bytes.fetch_add(bytes as u64, Ordering::Relaxed);
        self.histograms[worker]
            .lock()
            .expect("histogram lock")
            .saturating_record(latency_us.max(1));
    }

    pub fn error(&self) {
        self.errors.fetch_add(1, Ordering::Relaxed);
    }

    pub fn merged(&self) -> Histogram<u64> {
        let mut all = new_histogram();
        for h in &self.histograms {
            all.add(&*h.lock().expect("histogram lock"))
                .expect("same bounds");
        }
        all
    }

    /// Forgets everything measured so far (end of the warm-up).
    pub fn reset(&self) {
        self.records.store(0, Ordering::Relaxed);
        self.bytes.store(0, Ordering::Relaxed);
        self.errors.store(0, Ordering::Relaxed);
        for h in &self.histograms {
            h.lock().expect("histogram lock").reset();
        }
    }
}

#[derive(Debug, Clone, Serialize)]
pub struct Latency {
    pub p50: f64,
    pub p90: f64,
    pub p99: f64,
    pub p99_9: f64,
    pub p99_99: f64,
    pub max: f64,
}

impl Latency {
    pub fn from_histogram(h: &Histogram<u64>) -> Latency {
        let ms = |us: u64| us as f64 / 1000.0;
        Latency {
            p50: ms(h.value_at_quantile(0.50)),
            p90: ms(h.value_at_quantile(0.90)),
            p99: ms(h.value_at_quantile(0.99)),
            p99_9: ms(h.value_at_quantile(0.999)),
            p99_99: ms(h.value_at_quantile(0.9999)),
            max: ms(h.max()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_are_ordered() {
        let m = Meter::new(2);
        for i in 1..=10_000u64 {
            m.record((i % 2) as usize, 10, i);
        }
        let l = Latency::from_histogram(&m.merged());
        assert!(
            l.p50 <= l.p90
                && l.p90 <= l.p99
                && l.p99 <= l.p99_9
                && l.p99_9 <= l.p99_99
                && l.p99_99 <= l.max
        );
        assert!((l.p50 - 5.0).abs() < 0.1, "{l:?}");
        assert_eq!(m.records.load(Ordering::Relaxed), 10_000);
        m.reset();
        assert_eq!(m.merged().len(), 0);
    }
}
