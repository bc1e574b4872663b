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

fn run(cli: Cli) -> anyhow::Result<()> {
    match cli.command {
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
