//! The `evenkeel` command line: one binary, several roles. Errors end here as one readable line.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(
    name = "evenkeel",
    version,
    about = "Kafka-compatible streaming for Kubernetes"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run a broker from a server.properties file.
    Broker {
        /// Kafka-style server.properties.
        #[arg(long)]
        config: PathBuf,
        /// Override one property: --override key=value (repeatable).
        #[arg(long = "override", value_name = "KEY=VALUE")]
        overrides: Vec<String>,
    },
    /// Run the whole system on this machine: one broker with its data under ./.evenkeel/.
    Dev {
        /// Port for Kafka clients.
        #[arg(long, default_value_t = 9092)]
        port: u16,
        /// Data directory.
        #[arg(long, default_value = "./.evenkeel")]
        data: PathBuf,
        /// Override one broker property: --override key=value (repeatable).
        #[arg(long = "override", value_name = "KEY=VALUE")]
        overrides: Vec<String>,
    },
    /// Format a log directory for a broker (writes meta.properties), like kafka-storage format.
    Format {
        #[arg(long)]
        config: PathBuf,
        /// Cluster id; a new random one when omitted.
        #[arg(long)]
        cluster_id: Option<String>,
        #[arg(long = "override", value_name = "KEY=VALUE")]
        overrides: Vec<String>,
    },
    /// Print segment (.log), offset index (.index) and time index (.timeindex) files as kafka-dump-log does.
    DumpLog {
        /// Files to dump.
        #[arg(long = "files", num_args = 1.., value_delimiter = ',', required = true)]
        files: Vec<PathBuf>,
        /// Print record keys and values.
        #[arg(long)]
        print_data_log: bool,
        /// Print one line per record.
        #[arg(long)]
        deep_iteration: bool,
    },
    /// Benchmarks that print figures.
    Perf {
        #[command(subcommand)]
        what: PerfCommand,
    },
}

#[derive(Subcommand)]
enum PerfCommand {
    /// Append and read throughput of the partition log, beside dd's figures.
    Storage {
        /// Directory for the benchmark files (on the disk to measure).
        #[arg(long, default_value = "./.evenkeel-perf")]
        dir: PathBuf,
        /// MiB to append per run.
        #[arg(long, default_value_t = 2048)]
        mib: u64,
        #[arg(long, default_value_t = 1024)]
        record_size: usize,
        #[arg(long, default_value_t = 16384)]
        batch_bytes: usize,
        /// Runs per measurement; the median is printed with the range.
        #[arg(long, default_value_t = 3)]
        runs: usize,
    },
}

fn main() -> ExitCode {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("EVENKEEL_LOG")
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn")),
        )
        .with_writer(std::io::stderr)
        .init();
    match run(Cli::parse()) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("evenkeel: {e:#}");
            ExitCode::FAILURE
        }
    }
}

/// Properties from a file plus `key=value` overrides; bad overrides are an error.
fn load_props(
    file: Option<&std::path::Path>,
    overrides: &[String],
) -> anyhow::Result<std::collections::BTreeMap<String, String>> {
    let mut props = match file {
        Some(f) => evenkeel::config::load_properties(f)?,
        None => Default::default(),
    };
    for o in overrides {
        let (k, v) = o
            .split_once('=')
            .ok_or_else(|| anyhow::anyhow!("--override {o:?} is not key=value"))?;
        props.insert(k.trim().to_string(), v.trim().to_string());
    }
    Ok(props)
}

fn broker_config(
    props: &std::collections::BTreeMap<String, String>,
) -> anyhow::Result<evenkeel::config::broker::BrokerConfig> {
    let (config, unknown) = evenkeel::config::broker::BrokerConfig::from_props(props)?;
    for k in unknown {
        tracing::warn!(key = %k, "unknown configuration key; ignored");
    }
    Ok(config)
}

async fn wait_for_signal() {
    #[cfg(unix)]
    {
        let mut term =
            match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
                Ok(s) => s,
                Err(_) => {
                    let _ = tokio::signal::ctrl_c().await;
                    return;
                }
            };
        tokio::select! {
            _ = tokio::signal::ctrl_c() => {}
            _ = term.recv() => {}
        }
    }
    #[cfg(not(unix))]
    let _ = tokio::signal::ctrl_c().await;
}

/// Runs a broker until SIGTERM or Ctrl-C, then shuts it down cleanly.
fn serve(config: evenkeel::config::broker::BrokerConfig, banner: bool) -> anyhow::Result<()> {
    let rt = tokio::runtime::Runtime::new()?;
    rt.block_on(async move {
        let broker = evenkeel::broker::Broker::open(config)?;
        let server = evenkeel::broker::server::Server::start(broker.clone()).await?;
        let ep = broker.endpoint();
        let bootstrap = format!("{}:{}", ep.host, ep.port);
        // One line a script can wait for.
        println!("evenkeel broker {} ready on {bootstrap} (cluster {})", broker.node_id(), broker.cluster_id);
        if banner {
            println!();
            println!("  bootstrap servers:  {bootstrap}");
            println!("  data:               {}", broker.config.log_dir.display());
            println!("  metrics:            http://{}/metrics", server.metrics_addr);
            println!();
            println!("  try:");
            println!("    kcat -b {bootstrap} -L");
            println!("    echo hello | kcat -b {bootstrap} -t demo -P");
            println!("    kcat -b {bootstrap} -t demo -C -e");
            println!("    kafka-topics.sh --bootstrap-server {bootstrap} --create --topic orders --partitions 3");
            println!("    kafka-console-producer.sh --bootstrap-server {bootstrap} --topic orders");
            println!("    kafka-console-consumer.sh --bootstrap-server {bootstrap} --topic orders --from-beginning");
            println!();
            println!("  Ctrl-C stops the broker cleanly.");
        }
        use std::io::Write;
        let _ = std::io::stdout().flush();
        wait_for_signal().await;
        eprintln!("shutting down ...");
        server.stop().await;
        broker.shutdown()?;
        eprintln!("stopped cleanly");
        Ok(())
    })
}

fn run(cli: Cli) -> anyhow::Result<()> {
    match cli.command {
        Command::Broker { config, overrides } => {
            let props = load_props(Some(&config), &overrides)?;
            serve(broker_config(&props)?, false)
        }
        Command::Dev {
            port,
            data,
            overrides,
        } => {
            let mut props = std::collections::BTreeMap::new();
            props.insert("node.id".to_string(), "1".to_string());
            props.insert(
                "listeners".to_string(),
                format!("PLAINTEXT://127.0.0.1:{port}"),
            );
            props.insert(
                "log.dirs".to_string(),
                data.join("broker-1").display().to_string(),
            );
            props.insert(
                "evenkeel.metrics.address".to_string(),
                "127.0.0.1:9404".to_string(),
            );
            let extra = load_props(None, &overrides)?;
            props.extend(extra);
            let config = broker_config(&props)?;
            let meta = evenkeel::broker::format_log_dir(
                &config.log_dir,
                &evenkeel::broker::random_cluster_id(),
                config.node_id,
            )?;
            tracing::info!(cluster = %meta.cluster_id, "data directory ready");
            serve(config, true)
        }
        Command::Format {
            config,
            cluster_id,
            overrides,
        } => {
            let props = load_props(Some(&config), &overrides)?;
            let config = broker_config(&props)?;
            if let Some(existing) = evenkeel::storage::MetaProperties::read(&config.log_dir)? {
                anyhow::bail!(
                    "{} is already formatted (cluster {}, node {})",
                    config.log_dir.display(),
                    existing.cluster_id,
                    existing.node_id
                );
            }
            let id = cluster_id.unwrap_or_else(evenkeel::broker::random_cluster_id);
            evenkeel::broker::format_log_dir(&config.log_dir, &id, config.node_id)?;
            println!(
                "Formatting {} with cluster.id {id} and node.id {}",
                config.log_dir.display(),
                config.node_id
            );
            Ok(())
        }
        Command::DumpLog {
            files,
            print_data_log,
            deep_iteration,
        } => {
            let opts = evenkeel::tools::dump_log::DumpOptions {
                print_data_log,
                deep_iteration,
            };
            let stdout = std::io::stdout();
            let mut out = std::io::BufWriter::new(stdout.lock());
            for f in files {
                evenkeel::tools::dump_log::dump_file(&f, opts, &mut out)?;
            }
            Ok(())
        }
        Command::Perf {
            what:
                PerfCommand::Storage {
                    dir,
                    mib,
                    record_size,
                    batch_bytes,
                    runs,
                },
        } => {
            let opts = evenkeel::perf::storage::StoragePerfOptions {
                dir: dir.clone(),
                total_bytes: mib * 1024 * 1024,
                record_size,
                batch_bytes,
                fsync_every_bytes: 1024 * 1024,
            };
            eprintln!(
                "measuring in {} ({mib} MiB per run, {runs} runs each, sync before each) ...",
                dir.display()
            );
            let report = evenkeel::perf::storage::run(&opts, runs)?;
            let _ = std::fs::remove_dir(&dir);
            println!("{:<52} {:>12}   range MB/s", "measurement", "median MB/s");
            for r in &report.rows {
                println!(
                    "{:<52} {:>12.1}   {:.1} .. {:.1}",
                    r.name, r.median_mb_s, r.min_mb_s, r.max_mb_s
                );
            }
            if let Some(ratio) = report.fsync_vs_dd_ratio {
                println!(
                    "append with fsync every 1 MiB / dd conv=fdatasync, same round (median): {:.0} %",
                    100.0 * ratio
                );
            }
            Ok(())
        }
    }
}
