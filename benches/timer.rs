//! The timing wheel against a BinaryHeap baseline, in the same run: insert, cancel and expire
//! of one million timers with deadlines spread over two minutes (a purgatory's typical range).

use criterion::{criterion_group, criterion_main, BatchSize, Criterion, Throughput};
use sluice::timer::wheel::TimingWheel;
use std::cmp::Reverse;
use std::collections::BinaryHeap;

const N: usize = 1_000_000;
const SPREAD_MS: u64 = 120_000;

fn deadlines() -> Vec<u64> {
    let mut x = 0x2545_f491_4f6c_dd1du64;
    (0..N)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            1 + x % SPREAD_MS
        })
        .collect()
}

fn wheel() -> TimingWheel<u32> {
    TimingWheel::new(1, 512, 0, N)
}

fn bench(c: &mut Criterion) {
    let ds = deadlines();
    let mut g = c.benchmark_group("timers_1M");
    g.throughput(Throughput::Elements(N as u64));
    g.sample_size(10);

    g.bench_function("insert/wheel", |b| {
        b.iter_batched(
            wheel,
            |mut w| {
                for (i, &d) in ds.iter().enumerate() {
                    w.insert(d, i as u32).unwrap();
                }
                w
            },
            BatchSize::PerIteration,
        )
    });
    g.bench_function("insert/heap", |b| {
        b.iter_batched(
            || BinaryHeap::with_capacity(N),
            |mut h| {
                for (i, &d) in ds.iter().enumerate() {
                    h.push(Reverse((d, i as u32)));
                }
                h
            },
            BatchSize::PerIteration,
        )
    });

    // Cancel every timer. A heap cannot remove from the middle: the usual baseline marks a
    // tombstone (O(1)) and leaves the entry in place until it would have fired.
    g.bench_function("cancel/wheel", |b| {
        b.iter_batched(
            || {
                let mut w = wheel();
                let ids: Vec<_> = ds
                    .iter()
                    .enumerate()
                    .map(|(i, &d)| w.insert(d, i as u32).unwrap())
                    .collect();
                (w, ids)
            },
            |(mut w, ids)| {
                for id in ids {
                    w.cancel(id);
                }
                w
            },
            BatchSize::PerIteration,
        )
    });
    g.bench_function("cancel/heap_tombstone", |b| {
        b.iter_batched(
            || {
                let h: BinaryHeap<_> = ds
                    .iter()
                    .enumerate()
                    .map(|(i, &d)| Reverse((d, i as u32)))
                    .collect();
                (h, vec![false; N])
            },
            |(h, mut dead)| {
                for d in dead.iter_mut() {
                    *d = true;
                }
                (h, dead)
            },
            BatchSize::PerIteration,
        )
    });

    // Expire everything, advancing time 1 ms at a time as a driver woken each tick would.
    g.bench_function("expire/wheel", |b| {
        b.iter_batched(
            || {
                let mut w = wheel();
                for (i, &d) in ds.iter().enumerate() {
                    w.insert(d, i as u32).unwrap();
                }
                w
            },
            |mut w| {
                let mut fired = 0;
                for now in 0..=SPREAD_MS {
                    fired += w.poll(now).len();
                }
                assert_eq!(fired, N);
                w
            },
            BatchSize::PerIteration,
        )
    });
    g.bench_function("expire/heap", |b| {
        b.iter_batched(
            || {
                ds.iter()
                    .enumerate()
                    .map(|(i, &d)| Reverse((d, i as u32)))
                    .collect::<BinaryHeap<_>>()
            },
            |mut h| {
                let mut fired = 0;
                for now in 0..=SPREAD_MS {
                    while h.peek().is_some_and(|Reverse((d, _))| *d <= now) {
                        h.pop();
                        fired += 1;
                    }
                }
                assert_eq!(fired, N);
                h
            },
            BatchSize::PerIteration,
        )
    });
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
