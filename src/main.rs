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
    },
}

fn main() {
    env_logger::Builder::from_env(env_logger::Env::default().default_filter_or("info"))
        .format_timestamp_millis()
        .init();
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Serve {
            config,
            listen,
            data_dir,
            shards,
        } => {
            let overrides = sluice::config::Overrides {
                listen,
                data_dir,
                shards,
            };
            sluice::config::Config::load(config.as_deref(), overrides).and_then(sluice::server::run)
        }
    };
    if let Err(e) = result {
        eprintln!("sluice: {e:#}");
        std::process::exit(1);
    }
}
