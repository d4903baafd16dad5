use clap::{Parser, Subcommand};
use std::path::PathBuf;

#[derive(Parser)]
#[command(
    name = "sluice",
    version,
    about = "A thread-per-core, Kafka-compatible streaming broker"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run the broker.
    Serve {
        /// TOML config file; flags override it.
        #[arg(long)]
        config: Option<PathBuf>,
        /// Listen address, HOST:PORT (default 127.0.0.1:9092).
        #[arg(long)]
        listen: Option<String>,
        /// Data directory (default ./data).
        #[arg(long)]
        data_dir: Option<PathBuf>,
        /// Number of shards; may exceed the core count (default: one per core).
        #[arg(long)]
        shards: Option<usize>,
        /// This node's id in its cluster (default 0).
        #[arg(long)]
        node_id: Option<i32>,
        /// Inter-node RPC address, HOST:PORT (needed with --voters).
        #[arg(long)]
        rpc_listen: Option<String>,
        /// The controller quorum: ID@HOST:PORT,... (the voters' RPC addresses). Without it the
        /// node runs alone.
        #[arg(long)]
        voters: Option<String>,
    },
    /// Load generator: drive any Kafka-compatible broker and report throughput and latency.
    #[cfg(feature = "bench")]
    Bench(sluice::bench::args::BenchArgs),
    /// This machine's limits: memcpy and CRC32C speed, 4 KiB fdatasync latency.
    #[cfg(feature = "bench")]
    Probe(sluice::bench::probe::ProbeArgs),
}

fn main() {
    let cli = Cli::parse();
    // The bench reports client errors itself, counted; librdkafka's own log lines would drown
    // its progress lines.
    let default_filter = match cli.command {
        Command::Serve { .. } => "info",
        #[cfg(feature = "bench")]
        Command::Bench(_) => "warn,rdkafka=off,librdkafka=off",
        #[cfg(feature = "bench")]
        Command::Probe(_) => "warn",
    };
    env_logger::Builder::from_env(env_logger::Env::default().default_filter_or(default_filter))
        .format_timestamp_millis()
        .init();
    let result = match cli.command {
        Command::Serve {
            config,
            listen,
            data_dir,
            shards,
            node_id,
            rpc_listen,
            voters,
        } => {
            let overrides = sluice::config::Overrides {
                listen,
                data_dir,
                shards,
                node_id,
                rpc_listen,
                voters,
            };
            sluice::config::Config::load(config.as_deref(), overrides).and_then(sluice::server::run)
        }
        #[cfg(feature = "bench")]
        Command::Bench(args) => match sluice::bench::run(args) {
            // Errors were reported and counted; a run that had any fails.
            Ok(report) if report.errors > 0 => {
                eprintln!("sluice bench: {} errors", report.errors);
                std::process::exit(2);
            }
            Ok(_) => Ok(()),
            Err(e) => Err(e),
        },
        #[cfg(feature = "bench")]
        Command::Probe(args) => sluice::bench::probe::run(args).map(|_| ()),
    };
    if let Err(e) = result {
        eprintln!("sluice: {e:#}");
        std::process::exit(1);
    }
}
