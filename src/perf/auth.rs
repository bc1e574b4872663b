//! `evenkeel perf auth`: how many secured connections a broker accepts per second — each a TCP
//! connect, the TLS handshake, ApiVersions and a SASL login (SCRAM or PLAIN), then closed.
//!
//! The client is ours (`client::Connection::connect_with`, set up from a client.properties by
//! `ClientSecurity::from_properties`) against either broker, so the figure
//! compares the servers. rustls's default client session cache stays on: later connections
//! resume TLS sessions where the server allows it (both Kafka's JDK and rustls do), as a real
//! client's reconnects would.

use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context;

use crate::client::{ClientSecurity, Connection};
use crate::config::load_properties;

/// `evenkeel perf auth` options.
#[derive(clap::Args)]
pub struct AuthArgs {
    /// The secured listener.
    #[arg(long, default_value = "127.0.0.1:9093")]
    bootstrap: String,
    /// A client.properties as Kafka's tools take it: security.protocol, ssl.truststore.*,
    /// sasl.mechanism, sasl.jaas.config.
    #[arg(long)]
    command_config: PathBuf,
    /// Connections opened at once, each closed as soon as its login succeeded.
    #[arg(long, default_value_t = 8)]
    concurrency: usize,
    #[arg(long, default_value_t = 10)]
    seconds: u64,
}

/// What one run measured.
struct AuthReport {
    logins: u64,
    failures: u64,
    elapsed: Duration,
    first_error: Option<String>,
}

pub fn run(a: AuthArgs) -> anyhow::Result<()> {
    let props = load_properties(&a.command_config)?;
    let security = ClientSecurity::from_properties(&props)?;
    let what = ["security.protocol", "sasl.mechanism"]
        .map(|k| props.get(k).map_or("-", String::as_str))
        .join(" ");
    let rt = tokio::runtime::Runtime::new()?;
    let addr = a.bootstrap.clone();
    // One login first: a wrong setting is one clear error, not a run of failures.
    rt.block_on(Connection::connect_with(
        &addr,
        Duration::from_secs(10),
        &security,
    ))
    .with_context(|| format!("logging in to {addr}"))?;
    eprintln!(
        "perf auth: {what} for {} s with {} connections at once against {addr}",
        a.seconds, a.concurrency
    );
    let r = rt.block_on(measure(
        addr,
        security,
        a.concurrency.max(1),
        Duration::from_secs(a.seconds),
    ));
    let secs = r.elapsed.as_secs_f64();
    println!(
        "{} logins in {:.1} s: {:.1} logins/sec ({what}, {} at once), {} failed",
        r.logins,
        secs,
        r.logins as f64 / secs,
        a.concurrency,
        r.failures
    );
    if let Some(e) = r.first_error {
        eprintln!("perf auth: the first failure: {e}");
    }
    Ok(())
}

/// `concurrency` tasks log in and close, again and again, until `length` has passed.
async fn measure(
    addr: String,
    security: ClientSecurity,
    concurrency: usize,
    length: Duration,
) -> AuthReport {
    let logins = Arc::new(AtomicU64::new(0));
    let failures = Arc::new(AtomicU64::new(0));
    let first_error = Arc::new(parking_lot::Mutex::new(None));
    let start = Instant::now();
    let end = start + length;
    let mut tasks = tokio::task::JoinSet::new();
    for _ in 0..concurrency {
        let (addr, security) = (addr.clone(), security.clone());
        let (logins, failures, first_error) =
            (logins.clone(), failures.clone(), first_error.clone());
        tasks.spawn(async move {
            while Instant::now() < end {
                match Connection::connect_with(&addr, Duration::from_secs(10), &security).await {
                    Ok(_) => logins.fetch_add(1, Ordering::Relaxed),
                    Err(e) => {
                        first_error.lock().get_or_insert(e.to_string());
                        failures.fetch_add(1, Ordering::Relaxed)
                    }
                };
            }
        });
    }
    while tasks.join_next().await.is_some() {}
    let first_error = first_error.lock().take();
    AuthReport {
        logins: logins.load(Ordering::Relaxed),
        failures: failures.load(Ordering::Relaxed),
        elapsed: start.elapsed(),
        first_error,
    }
}
