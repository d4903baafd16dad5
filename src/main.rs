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
    #[cfg(feature = "tools")]
    Bench(sluice::bench::args::BenchArgs),
    /// This machine's limits: memcpy and CRC32C speed, 4 KiB fdatasync latency.
    #[cfg(feature = "tools")]
    Probe(sluice::bench::probe::ProbeArgs),
    /// The operator commands (topic, produce, consume, group, cluster).
    #[cfg(feature = "tools")]
    #[command(flatten)]
    Tool(sluice::cli::Tool),
    /// Print a shell completion script: sluice completions bash > /etc/bash_completion.d/sluice
    Completions {
        #[arg(value_enum)]
        shell: clap_complete::Shell,
    },
}

fn main() {
    let cli = Cli::parse();
    // The bench reports client errors itself, counted; librdkafka's own log lines would drown
    // its progress lines.
    let default_filter = match cli.command {
        Command::Serve { .. } => "info",
        #[cfg(feature = "tools")]
        Command::Bench(_) => "warn,rdkafka=off,librdkafka=off",
        #[cfg(feature = "tools")]
        Command::Probe(_) => "warn",
        // A command's failure is its one line on stderr; librdkafka's own lines stay out.
        #[cfg(feature = "tools")]
        Command::Tool(_) => "warn,rdkafka=off,librdkafka=off",
        Command::Completions { .. } => "warn",
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
        #[cfg(feature = "tools")]
        Command::Bench(args) => match sluice::bench::run(args) {
            // Errors were reported and counted; a run that had any fails.
            Ok(report) if report.errors > 0 => {
                eprintln!("sluice bench: {} errors", report.errors);
                std::process::exit(2);
            }
            Ok(_) => Ok(()),
            Err(e) => Err(e),
        },
        #[cfg(feature = "tools")]
        Command::Probe(args) => sluice::bench::probe::run(args).map(|_| ()),
        #[cfg(feature = "tools")]
        Command::Tool(tool) => match sluice::cli::run(tool) {
            Ok(0) => Ok(()),
            Ok(code) => std::process::exit(code),
            Err(e) => Err(e),
        },
        Command::Completions { shell } => {
            use clap::CommandFactory;
            clap_complete::generate(shell, &mut Cli::command(), "sluice", &mut std::io::stdout());
            Ok(())
        }
    };
    if let Err(e) = result {
        eprintln!("sluice: {e:#}");
        std::process::exit(1);
    }
}
