//! `sluice-sim`: the deterministic cluster simulator (see `src/sim/`). Run it through
//! `scripts/simulate`, which builds it with the `simulation` feature.

fn main() {
    std::process::exit(sluice::sim::cli::main());
}
