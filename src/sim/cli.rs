//! `sluice-sim`'s command line (the contract `scripts/simulate` passes through):
//!
//! - `--seeds N [--from S]`: run seeds S..S+N (S = 1 by default); one summary line, exit 0 when
//!   every seed is clean;
//! - `--seed S`: run one seed;
//! - `--inject NAME`: plant a bug that exists only in simulation builds (`--list-injections`);
//! - `--check-injections`: every planted bug must be caught within `--seeds` seeds (200 by
//!   default, issue 17's bound);
//! - `--regressions FILE`: replay the seeds listed there (one per line, `#` comments).
//!
//! On a violation: the seed, the invariant, its details and the trace's tail, then exit 1. None
//! of that depends on timing, so a seed always prints the same.

use super::run_seed;
use crate::inject::Bug;
use clap::Parser;
use std::time::Instant;

#[derive(Parser)]
#[command(
    name = "sluice-sim",
    about = "Deterministic simulation of a Sluice cluster"
)]
struct Args {
    /// Run this many seeds.
    #[arg(long)]
    seeds: Option<u64>,
    /// The first seed of `--seeds`.
    #[arg(long, default_value_t = 1)]
    from: u64,
    /// Run one seed.
    #[arg(long)]
    seed: Option<u64>,
    /// Plant the named bug.
    #[arg(long)]
    inject: Option<String>,
    /// Print the bugs `--inject` can plant, one per line with its description.
    #[arg(long)]
    list_injections: bool,
    /// Check that every planted bug is caught within `--seeds` seeds (default 200).
    #[arg(long)]
    check_injections: bool,
    /// Replay the seeds listed in this file.
    #[arg(long)]
    regressions: Option<std::path::PathBuf>,
    /// Trace lines printed with a violation (the trace keeps the last 2000).
    #[arg(long, default_value_t = 40)]
    trace: usize,
}

pub fn main() -> i32 {
    let args = Args::parse();
    // Panics are reported as violations, with the seed and trace; the default hook's message
    // and backtrace would only repeat them.
    std::panic::set_hook(Box::new(|_| {}));
    if args.list_injections {
        for bug in Bug::ALL {
            println!("{}\t{}", bug.name(), bug.description());
        }
        return 0;
    }
    let bug = match args.inject.as_deref().map(|n| (n, Bug::parse(n))) {
        None => None,
        Some((_, Some(bug))) => Some(bug),
        Some((name, None)) => {
            eprintln!("sluice-sim: no injection named {name:?} (see --list-injections)");
            return 2;
        }
    };
    if args.check_injections {
        return check_injections(args.seeds.unwrap_or(200));
    }
    let seeds: Vec<u64> = match (&args.regressions, args.seed, args.seeds) {
        (Some(path), _, _) => match read_seeds(path) {
            Ok(s) => s,
            Err(e) => {
                eprintln!("sluice-sim: {}: {e}", path.display());
                return 2;
            }
        },
        (None, Some(s), _) => vec![s],
        (None, None, Some(n)) => (args.from..args.from + n).collect(),
        (None, None, None) => {
            eprintln!("sluice-sim: give --seeds N, --seed S or --regressions FILE (see --help)");
            return 2;
        }
    };
    run_seeds(&seeds, bug, args.seed.is_none(), args.trace)
}

/// Runs `seeds` in order, stopping at the first violation. `summary`: print the summary line
/// (with the run's time, so not for single-seed runs).
fn run_seeds(seeds: &[u64], bug: Option<Bug>, summary: bool, trace_lines: usize) -> i32 {
    let started = Instant::now();
    let mut total = super::world::Stats::default();
    for &seed in seeds {
        let run = run_seed(seed, bug, trace_lines);
        add(&mut total, &run.stats);
        if let Some((v, trace)) = run.violation {
            println!("seed {seed}: invariant broken: {}", v.invariant);
            println!("  {}", v.detail);
            println!("trace (last {} events):", trace.len());
            for line in trace {
                println!("  {line}");
            }
            return 1;
        }
        if !summary {
            println!("seed {seed}: clean ({})", counts(&run.stats));
        }
    }
    if summary {
        let secs = started.elapsed().as_secs_f64();
        println!(
            "sluice-sim: {} seeds clean ({}); {secs:.1} s, {:.1} seeds/s",
            seeds.len(),
            counts(&total),
            seeds.len() as f64 / secs.max(1e-9)
        );
    }
    0
}

fn counts(s: &super::world::Stats) -> String {
    format!(
        "{} events, {} crashes, {} power cuts, {} pauses, {} cut links, {} clock jumps, {} disk faults, {} elections, {} entries committed, {} idempotent batches acknowledged, {} batches consumed, {} offset commits acknowledged, {} offset fetches checked, {} group generations joined, {} transactions ended, {} batches read committed, {} torn log tails cut by recovery, {} segments rolled",
        s.events, s.crashes, s.power_cuts, s.pauses, s.cuts, s.clock_jumps, s.disk_faults, s.elections, s.committed, s.idempotent_acked, s.consumed, s.offsets_committed, s.offsets_fetched, s.generations_joined, s.txns_ended, s.read_committed, s.tails_cut, s.rolls
    )
}

fn add(total: &mut super::world::Stats, s: &super::world::Stats) {
    total.events += s.events;
    total.crashes += s.crashes;
    total.power_cuts += s.power_cuts;
    total.pauses += s.pauses;
    total.cuts += s.cuts;
    total.clock_jumps += s.clock_jumps;
    total.idempotent_acked += s.idempotent_acked;
    total.consumed += s.consumed;
    total.offsets_committed += s.offsets_committed;
    total.offsets_fetched += s.offsets_fetched;
    total.generations_joined += s.generations_joined;
    total.disk_faults += s.disk_faults;
    total.elections += s.elections;
    total.committed += s.committed;
    total.txns_ended += s.txns_ended;
    total.read_committed += s.read_committed;
    total.tails_cut += s.tails_cut;
    total.rolls += s.rolls;
}

/// Each planted bug must break an invariant within `limit` seeds.
fn check_injections(limit: u64) -> i32 {
    let mut missed = 0;
    for bug in Bug::ALL {
        let caught = (1..=limit).find_map(|seed| {
            let run = run_seed(seed, Some(bug), 0);
            run.violation.map(|(v, _)| (seed, v.invariant))
        });
        match caught {
            Some((seed, invariant)) => {
                println!("{}: caught by seed {seed} ({invariant})", bug.name())
            }
            None => {
                println!("{}: NOT caught within {limit} seeds", bug.name());
                missed += 1;
            }
        }
    }
    i32::from(missed > 0)
}

fn read_seeds(path: &std::path::Path) -> std::io::Result<Vec<u64>> {
    let text = std::fs::read_to_string(path)?;
    let mut out = Vec::new();
    for line in text.lines() {
        let line = line.split('#').next().unwrap_or("").trim();
        if line.is_empty() {
            continue;
        }
        let seed = line.parse().map_err(|_| {
            std::io::Error::new(
                std::io::ErrorKind::InvalidData,
                format!("not a seed: {line:?}"),
            )
        })?;
        out.push(seed);
    }
    Ok(out)
}
