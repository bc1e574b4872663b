//! `evenkeel perf auth`: how many secured connections a broker accepts per second — each a TCP
//! connect, the TLS handshake, ApiVersions and a SASL login (SCRAM or PLAIN), then closed.
//!
//! The client is ours (`client::Connection::connect_with`) against either broker, so the figure
//! compares the servers. rustls's default client session cache stays on: later connections
//! resume TLS sessions where the server allows it (both Kafka's JDK and rustls do), as a real
//! client's reconnects would.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context;

use crate::client::{ClientSecurity, Connection, SaslLogin};
use crate::config::security::SecurityProtocol;
use crate::security::sasl::Mechanism;

/// `evenkeel perf auth` options.
#[derive(clap::Args)]
pub struct AuthArgs {
    /// The secured listener.
    #[arg(long, default_value = "127.0.0.1:9093")]
    bootstrap: String,
    /// PLAINTEXT, SSL, SASL_PLAINTEXT or SASL_SSL.
    #[arg(long, default_value = "SASL_SSL", value_parser = parse_protocol)]
    security_protocol: SecurityProtocol,
    #[arg(long, default_value = "SCRAM-SHA-512")]
    sasl_mechanism: String,
    #[arg(long, default_value = "admin")]
    username: String,
    #[arg(long, default_value = "admin-secret")]
    password: String,
    /// PEM file of the CAs the broker's certificate chains to (TLS protocols).
    #[arg(long)]
    truststore: Option<std::path::PathBuf>,
    /// Connections opened at once, each closed as soon as its login succeeded.
    #[arg(long, default_value_t = 8)]
    concurrency: usize,
    #[arg(long, default_value_t = 10)]
    seconds: u64,
}

fn parse_protocol(s: &str) -> Result<SecurityProtocol, String> {
    s.parse()
        .map_err(|()| format!("{s:?} is not PLAINTEXT, SSL, SASL_PLAINTEXT or SASL_SSL"))
}

/// What one run measured.
struct AuthReport {
    logins: u64,
    failures: u64,
    elapsed: Duration,
    first_error: Option<String>,
}

pub fn run(a: AuthArgs) -> anyhow::Result<()> {
    let security = client_security(&a)?;
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
        "perf auth: {} for {} s with {} connections at once against {addr}",
        a.security_protocol, a.seconds, a.concurrency
    );
    let r = rt.block_on(measure(
        addr,
        security,
        a.concurrency.max(1),
        Duration::from_secs(a.seconds),
    ));
    let secs = r.elapsed.as_secs_f64();
    println!(
        "{} logins in {:.1} s: {:.1} logins/sec ({} {}, {} at once), {} failed",
        r.logins,
        secs,
        r.logins as f64 / secs,
        a.security_protocol,
        a.sasl_mechanism,
        a.concurrency,
        r.failures
    );
    if let Some(e) = r.first_error {
        eprintln!("perf auth: the first failure: {e}");
    }
    Ok(())
}

/// The connections' security from the options.
fn client_security(a: &AuthArgs) -> anyhow::Result<ClientSecurity> {
    let tls = match (&a.truststore, a.security_protocol.is_tls()) {
        (Some(path), true) => Some(trusting(path)?),
        (None, true) => anyhow::bail!("{} needs --truststore", a.security_protocol),
        (_, false) => None,
    };
    let mechanism = Mechanism::from_name(&a.sasl_mechanism)
        .with_context(|| format!("{:?} is not a SASL mechanism", a.sasl_mechanism))?;
    let sasl = a.security_protocol.is_sasl().then(|| SaslLogin {
        mechanism,
        username: a.username.clone(),
        password: a.password.clone(),
    });
    Ok(ClientSecurity::new(a.security_protocol, tls, sasl)?)
}

/// A rustls client that trusts the PEM certificates in `path`.
fn trusting(path: &std::path::Path) -> anyhow::Result<Arc<rustls::ClientConfig>> {
    use rustls::pki_types::{pem::PemObject, CertificateDer};
    let mut roots = rustls::RootCertStore::empty();
    let certs = CertificateDer::pem_file_iter(path)
        .with_context(|| format!("reading {}", path.display()))?;
    for cert in certs {
        roots.add(cert.with_context(|| format!("a certificate in {}", path.display()))?)?;
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()?
        .with_root_certificates(roots)
        .with_no_client_auth();
    Ok(Arc::new(config))
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
