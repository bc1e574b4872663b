//! The `evenkeel` command line: one binary, several roles. Errors end here as one readable line.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;
use clap::{Parser, Subcommand};

/// Huge claimed lengths in requests must not abort the broker (see `evenkeel::alloc`).
#[global_allocator]
static ALLOC: evenkeel::alloc::EvenkeelAlloc = evenkeel::alloc::EvenkeelAlloc;

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
    /// Run a node (broker, controller or both, as process.roles says) from a server.properties file.
    Broker {
        /// Kafka-style server.properties.
        #[arg(long)]
        config: PathBuf,
        /// Override one property: --override key=value (repeatable).
        #[arg(long = "override", value_name = "KEY=VALUE")]
        overrides: Vec<String>,
    },
    /// Run the whole system on this machine: a cluster of local broker processes with their
    /// data under ./.evenkeel/.
    Dev {
        /// Brokers to run; the first three also vote in the metadata quorum. 1 runs a single
        /// node in this process.
        #[arg(long, default_value_t = 3)]
        brokers: usize,
        /// Port for Kafka clients of the first broker (the others count up from it); 0 picks
        /// free ports.
        #[arg(long, default_value_t = 9092)]
        port: u16,
        /// Data directory.
        #[arg(long, default_value = "./.evenkeel")]
        data: PathBuf,
        /// Override one broker property: --override key=value (repeatable).
        #[arg(long = "override", value_name = "KEY=VALUE")]
        overrides: Vec<String>,
        /// Port of the HTTP producer proxy on 127.0.0.1 (0 picks a free one; so does --port 0).
        #[arg(long, default_value_t = 8080)]
        proxy_port: u16,
        /// Do not start the producer proxy.
        #[arg(long)]
        no_proxy: bool,
        /// Port of the leadership rebalancer's /metrics on 127.0.0.1 (0 picks a free one; so
        /// does --port 0). With several brokers only.
        #[arg(long, default_value_t = 8081)]
        rebalancer_port: u16,
        /// Do not start the leadership rebalancer.
        #[arg(long)]
        no_rebalancer: bool,
    },
    /// Run the HTTP producer proxy: REST Proxy v2/v3 produce through our producer and Java's
    /// built-in (KIP-794) partitioner.
    Proxy {
        /// Kafka bootstrap servers, host:port[,host:port...].
        #[arg(long)]
        bootstrap: String,
        /// Address to serve HTTP on.
        #[arg(long, default_value = "127.0.0.1:8080")]
        listen: std::net::SocketAddr,
        /// Java producer properties: --producer-props key=value ... (as Kafka's perf tool
        /// takes them; --producer-property key=value repeated works too), e.g. acks=1
        /// linger.ms=10 compression.type=lz4.
        #[arg(long = "producer-props", visible_alias = "producer-property", value_name = "KEY=VALUE", num_args = 1..)]
        producer_props: Vec<String>,
        /// At SIGTERM, go on serving (unready) this long before taking no new connection: the
        /// time a load balancer needs to stop sending new ones (the operator sets 5000).
        #[arg(long, default_value_t = 0)]
        shutdown_delay_ms: u64,
        /// Serve HTTPS with this PEM file: the private key and its certificate chain (REST
        /// Proxy's ssl.keystore.location, in PEM as a broker's).
        #[arg(long, value_name = "PEM")]
        ssl_keystore_location: Option<PathBuf>,
        /// REST Proxy's authentication.method: NONE, or BASIC (HTTP basic auth whose user and
        /// password become the SASL login of that user's producer).
        #[arg(long, default_value = "NONE", value_name = "NONE|BASIC")]
        authentication_method: String,
        /// With BASIC, the most users whose producers are kept at once.
        #[arg(long, default_value_t = 64)]
        max_users: usize,
    },
    /// Format a log directory for a broker (writes meta.properties), like kafka-storage format
    /// (same flags: -c/--config, -t/--cluster-id, -g/--ignore-formatted, -s/--standalone,
    /// -I/--initial-controllers, -N/--no-initial-controllers, -S/--add-scram).
    Format {
        #[arg(short = 'c', long)]
        config: PathBuf,
        /// Cluster id; a new random one when omitted. It may start with '-'.
        #[arg(short = 't', long, allow_hyphen_values = true)]
        cluster_id: Option<String>,
        /// Succeed without change when the directory is already formatted (as kafka-storage's
        /// --ignore-formatted); for containers that format on every start.
        #[arg(short = 'g', long)]
        ignore_formatted: bool,
        /// The controller is the only voter of its quorum (Kafka's quickstart, with
        /// controller.quorum.bootstrap.servers naming this node's controller listener).
        #[arg(short = 's', long, conflicts_with_all = ["initial_controllers", "no_initial_controllers"])]
        standalone: bool,
        /// The voters a new dynamic quorum starts with: id@host:port:directory-id, comma-separated
        /// (the directory ids as kafka-storage random-uuid prints them); this node's entry gives
        /// its directory id.
        #[arg(
            short = 'I',
            long,
            value_name = "ID@HOST:PORT:DIRECTORY-ID,...",
            conflicts_with = "no_initial_controllers"
        )]
        initial_controllers: Option<String>,
        /// A controller of a dynamic quorum that starts as a non-voter and waits to be added
        /// (kafka-metadata-quorum add-controller).
        #[arg(short = 'N', long)]
        no_initial_controllers: bool,
        /// A SCRAM credential the new cluster starts with (KIP-900), as kafka-storage takes it:
        /// 'SCRAM-SHA-512=[name=alice,password=alice-secret]'. Repeatable.
        #[arg(
            short = 'S',
            long = "add-scram",
            value_name = "MECHANISM=[name=...,password=...]"
        )]
        add_scram: Vec<String>,
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
        what: evenkeel::perf::cli::PerfCommand,
    },
    /// Write the KafkaCluster, KafkaTopic and KafkaUser CustomResourceDefinitions as YAML.
    Crdgen {
        /// Directory for the files (`crds/` in the repository).
        #[arg(long, default_value = "crds")]
        out: PathBuf,
        /// Do not write; exit non-zero when the files in --out differ from the generated ones.
        #[arg(long)]
        check: bool,
    },
    /// Run the Kubernetes operator for KafkaCluster, KafkaTopic and KafkaUser resources.
    Operator(evenkeel::operator::OperatorArgs),
    /// Watch the brokers' leader counts and overload metrics and even out partition
    /// leadership with the fewest changes (a sidecar beside each broker; the one beside the
    /// active controller acts).
    Rebalancer(evenkeel::rebalancer::cli::RebalancerArgs),
}

fn main() -> ExitCode {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("EVENKEEL_LOG")
                // openraft reports every unreachable voter, twice a second, as an error; the
                // quorum's own warnings say what matters.
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn,openraft=off")),
        )
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
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
    let overrides = evenkeel::config::parse_key_values(overrides).context("--override")?;
    props.extend(overrides);
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

/// Runs a node until SIGTERM or Ctrl-C (or until it cannot go on), then shuts it down cleanly.
fn serve(
    config: evenkeel::config::broker::BrokerConfig,
    banner: bool,
    proxy_port: Option<u16>,
) -> anyhow::Result<()> {
    let rt = tokio::runtime::Runtime::new()?;
    rt.block_on(async move {
        let node = evenkeel::node::Node::start(config).await?;
        print_ready(&node, banner);
        let client = node.client_addrs().first().map(|a| a.to_string());
        let _proxy = match (proxy_port, client) {
            (Some(port), Some(addr)) => start_dev_proxy(&addr, port).await,
            _ => None,
        };
        let fatal = tokio::select! {
            _ = wait_for_signal() => None,
            reason = wait_for_fatal(&node) => Some(reason),
        };
        match &fatal {
            // Said now: a controlled shutdown can take a while before the exit repeats it.
            Some(reason) => eprintln!("shutting down: {reason}"),
            None => eprintln!("shutting down ..."),
        }
        node.shutdown().await?;
        if let Some(reason) = fatal {
            anyhow::bail!("{reason}");
        }
        eprintln!("stopped cleanly");
        Ok(())
    })
}

/// Resolves with the reason once the node cannot go on (e.g. its registration was refused).
async fn wait_for_fatal(node: &evenkeel::node::Node) -> String {
    loop {
        if let Some(r) = node.fatal() {
            return r;
        }
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    }
}

/// The line a script waits for, and for `evenkeel dev` a banner of what to try.
fn print_ready(node: &evenkeel::node::Node, banner: bool) {
    use std::io::Write;
    let id = node.config.node_id;
    let Some(broker) = node.broker() else {
        let at = node
            .controller_addr()
            .map(|a| a.to_string())
            .unwrap_or_default();
        println!(
            "evenkeel controller {id} ready on {at} (cluster {})",
            node.cluster_id
        );
        let _ = std::io::stdout().flush();
        return;
    };
    let ep = broker.endpoint();
    let bootstrap = format!("{}:{}", ep.host, ep.port);
    if let Some(m) = node.metrics_addr() {
        println!("evenkeel broker {id} metrics on http://{m}/metrics");
    }
    let controller = node.controller_addr().map(|a| a.to_string());
    if let Some(c) = &controller {
        println!("evenkeel broker {id} controller listener on {c}");
    }
    println!(
        "evenkeel broker {id} ready on {bootstrap} (cluster {})",
        node.cluster_id
    );
    if banner {
        let metrics: Vec<String> = node
            .metrics_addr()
            .map(|a| format!("http://{a}/metrics"))
            .into_iter()
            .collect();
        print_banner(
            &bootstrap,
            controller.as_deref(),
            &[node.config.log_dir.display().to_string()],
            &metrics,
        );
    }
    let _ = std::io::stdout().flush();
}

fn print_banner(bootstrap: &str, controller: Option<&str>, data: &[String], metrics: &[String]) {
    println!();
    println!("  bootstrap servers:  {bootstrap}");
    if let Some(c) = controller {
        println!("  controller:         {c}");
    }
    println!("  data:               {}", data.join(" "));
    if !metrics.is_empty() {
        println!("  metrics:            {}", metrics.join(" "));
    }
    println!();
    println!("  try:");
    println!("    kcat -b {bootstrap} -L");
    println!("    echo hello | kcat -b {bootstrap} -t demo -P");
    println!("    kcat -b {bootstrap} -t demo -C -e");
    println!(
        "    kafka-topics.sh --bootstrap-server {bootstrap} --create --topic orders --partitions 3"
    );
    println!("    kafka-console-producer.sh --bootstrap-server {bootstrap} --topic orders");
    println!("    kafka-console-consumer.sh --bootstrap-server {bootstrap} --topic orders --from-beginning");
    if let Some(c) = controller {
        println!("    kafka-metadata-quorum.sh --bootstrap-controller {c} describe --status");
    }
    println!();
    println!("  Ctrl-C stops every broker cleanly.");
}

/// The leadership rebalancer beside `evenkeel dev`'s brokers, with its metrics on
/// 127.0.0.1:`port`. One that cannot start is reported and left out; the brokers run on.
async fn start_dev_rebalancer(
    bootstrap: &str,
    metrics: &std::collections::BTreeMap<i32, String>,
    port: u16,
) -> Option<evenkeel::rebalancer::RebalancerHandle> {
    use evenkeel::rebalancer::{MetricsSource, Rebalancer, RebalancerConfig};
    let mut config = RebalancerConfig::new(bootstrap);
    config.metrics = MetricsSource::Urls(metrics.clone());
    let interval = config.interval;
    let started = match Rebalancer::connect(config).await {
        Ok(r) => r
            .spawn(&format!("127.0.0.1:{port}"))
            .await
            .map_err(|e| e.to_string()),
        Err(e) => Err(e.to_string()),
    };
    match started {
        Ok(r) => {
            println!(
                "  rebalancer:         evens out partition leadership every {} s; http://{}/metrics",
                interval.as_secs(),
                r.addr
            );
            use std::io::Write;
            let _ = std::io::stdout().flush();
            Some(r)
        }
        Err(e) => {
            eprintln!(
                "evenkeel dev: the rebalancer did not start ({e}); the brokers run without it"
            );
            None
        }
    }
}

/// The producer proxy beside `evenkeel dev`'s brokers, on 127.0.0.1:`port`. A proxy that
/// cannot start (the port is taken) is reported and left out; the brokers run on.
async fn start_dev_proxy(bootstrap: &str, port: u16) -> Option<evenkeel::proxy::ProxyHandle> {
    let listen = std::net::SocketAddr::from(([127, 0, 0, 1], port));
    let started = match evenkeel::proxy::ProxyConfig::new(listen, bootstrap, &[]) {
        Ok(config) => evenkeel::proxy::start(config)
            .await
            .map_err(|e| e.to_string()),
        Err(e) => Err(e.to_string()),
    };
    match started {
        Ok(p) => {
            println!(
                "  producer proxy:     http://{} (topic orders created as above)",
                p.addr
            );
            println!(
                "    curl -X POST -H 'Content-Type: application/vnd.kafka.json.v2+json' --data '{{\"records\":[{{\"value\":{{\"hello\":\"world\"}}}}]}}' http://{}/topics/orders",
                p.addr
            );
            println!();
            use std::io::Write;
            let _ = std::io::stdout().flush();
            Some(p)
        }
        Err(e) => {
            eprintln!(
                "evenkeel dev: the producer proxy did not start ({e}); the brokers run without it"
            );
            None
        }
    }
}

/// `evenkeel proxy`: serves until SIGTERM or Ctrl-C.
/// `evenkeel proxy`'s flags beyond the producer's.
struct ProxyFlags {
    shutdown_delay_ms: u64,
    ssl_keystore_location: Option<PathBuf>,
    authentication_method: String,
    max_users: usize,
}

fn cmd_proxy(
    bootstrap: String,
    listen: std::net::SocketAddr,
    producer_props: Vec<String>,
    flags: ProxyFlags,
) -> anyhow::Result<()> {
    let props = evenkeel::config::parse_key_values(&producer_props)?;
    let mut config = evenkeel::proxy::ProxyConfig::new(listen, &bootstrap, &props)?;
    config.shutdown_delay = std::time::Duration::from_millis(flags.shutdown_delay_ms);
    if let Some(keystore) = &flags.ssl_keystore_location {
        config = config.with_https(keystore)?;
    }
    match flags.authentication_method.to_ascii_uppercase().as_str() {
        "NONE" => {}
        "BASIC" => {
            let auth = evenkeel::proxy::users::BasicAuth {
                max_users: flags.max_users,
            };
            config = config.with_basic_auth(auth)?;
        }
        other => anyhow::bail!("--authentication-method {other}: must be NONE or BASIC"),
    }
    let scheme = if config.tls.is_some() {
        "https"
    } else {
        "http"
    };
    let rt = tokio::runtime::Runtime::new()?;
    let grace = config.shutdown_grace();
    rt.block_on(async move {
        let mut proxy = evenkeel::proxy::start(config).await?;
        let cluster = match &proxy.cluster_id {
            Some(id) => format!("cluster {id}"),
            None => "no broker answers yet: not ready".to_string(),
        };
        println!(
            "evenkeel proxy ready on {scheme}://{} ({cluster}, bootstrap {bootstrap})",
            proxy.addr
        );
        use std::io::Write;
        let _ = std::io::stdout().flush();
        tokio::select! {
            _ = wait_for_signal() => {}
            _ = proxy.wait() => anyhow::bail!("the proxy stopped serving"),
        }
        eprintln!("stopping: answering the requests in progress, then flushing the producer");
        proxy.shutdown(grace).await;
        eprintln!("stopped");
        Ok(())
    })
}

/// What `evenkeel dev` runs beside its brokers: the ports of the producer proxy and of the
/// rebalancer's metrics (`None`: not started).
struct DevSidecars {
    proxy: Option<u16>,
    rebalancer: Option<u16>,
}

fn cmd_dev(
    brokers: usize,
    port: u16,
    data: PathBuf,
    overrides: Vec<String>,
    sidecars: DevSidecars,
) -> anyhow::Result<()> {
    if brokers == 0 {
        anyhow::bail!("--brokers must be at least 1");
    }
    if brokers == 1 {
        // One broker leads everything: there is no leadership to even out.
        return dev_single(port, data, overrides, sidecars.proxy);
    }
    let opts = evenkeel::dev::DevOptions {
        brokers,
        port,
        data: data.clone(),
        overrides: load_props(None, &overrides)?.into_iter().collect(),
    };
    let exe = std::env::current_exe()?;
    eprintln!("starting {brokers} brokers under {} ...", data.display());
    let mut cluster = evenkeel::dev::start_cluster(&exe, &opts)?;
    let bootstrap = cluster.bootstrap.join(",");
    println!(
        "evenkeel dev: {brokers} brokers ready on {bootstrap} (cluster {})",
        cluster.cluster_id
    );
    let dirs: Vec<String> = (1..=brokers)
        .map(|i| data.join(format!("broker-{i}")).display().to_string())
        .collect();
    let metrics: Vec<String> = cluster.metrics.values().cloned().collect();
    print_banner(&bootstrap, None, &dirs, &metrics);
    use std::io::Write;
    let _ = std::io::stdout().flush();
    let rt = tokio::runtime::Runtime::new()?;
    let exited = rt.block_on(async {
        let _proxy = match sidecars.proxy {
            Some(p) => start_dev_proxy(&bootstrap, p).await,
            None => None,
        };
        let _rebalancer = match sidecars.rebalancer {
            Some(p) => start_dev_rebalancer(&bootstrap, &cluster.metrics, p).await,
            None => None,
        };
        loop {
            tokio::select! {
                _ = wait_for_signal() => return None,
                _ = tokio::time::sleep(std::time::Duration::from_millis(500)) => {
                    if let Some(e) = cluster.exited() {
                        return Some(e);
                    }
                }
            }
        }
    });
    eprintln!("stopping {brokers} brokers ...");
    let clean = cluster.stop();
    if let Some((id, status)) = exited {
        anyhow::bail!("broker {id} exited on its own ({status}); the others were stopped");
    }
    if !clean {
        anyhow::bail!("not every broker stopped cleanly");
    }
    eprintln!("stopped cleanly");
    Ok(())
}

/// `evenkeel dev --brokers 1`: one node in this process, a cluster of one.
fn dev_single(
    port: u16,
    data: PathBuf,
    overrides: Vec<String>,
    proxy: Option<u16>,
) -> anyhow::Result<()> {
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
    // One machine, quick feedback: groups form without the 3 s initial delay.
    props.insert(
        "group.initial.rebalance.delay.ms".to_string(),
        "0".to_string(),
    );
    props.extend(load_props(None, &overrides)?);
    let config = broker_config(&props)?;
    let meta = evenkeel::broker::format_log_dir(
        &config.log_dir,
        &evenkeel::broker::random_cluster_id(),
        config.node_id,
    )?;
    tracing::info!(cluster = %meta.cluster_id, "data directory ready");
    serve(config, true, proxy)
}

/// `evenkeel format`'s flags besides the config.
struct FormatOptions {
    cluster_id: Option<String>,
    ignore_formatted: bool,
    quorum: InitialQuorum,
    add_scram: Vec<String>,
}

/// What `format` says of a dynamic quorum's first voters.
enum InitialQuorum {
    /// None of the flags: as the configuration says.
    Unsaid,
    /// `--standalone`: this controller alone.
    Standalone,
    /// `--initial-controllers`.
    Controllers(String),
    /// `--no-initial-controllers`: this controller waits to be added.
    NoControllers,
}

/// The initial voters the flags give, checked against the configuration (read before anything
/// is written); `None` when nothing is to be written.
fn initial_voters(
    quorum: &InitialQuorum,
    props: &std::collections::BTreeMap<String, String>,
    config: &evenkeel::config::broker::BrokerConfig,
) -> anyhow::Result<Option<Vec<evenkeel::metadata::initial_voters::InitialVoter>>> {
    use evenkeel::metadata::initial_voters::{self, InitialVoter};
    let flag = match quorum {
        InitialQuorum::Unsaid => return Ok(None),
        InitialQuorum::Standalone => "--standalone",
        InitialQuorum::Controllers(_) => "--initial-controllers",
        InitialQuorum::NoControllers => "--no-initial-controllers",
    };
    if props.contains_key("controller.quorum.voters") {
        anyhow::bail!("You cannot specify controller.quorum.voters and format the node with {flag}. If you want to use dynamic quorum, please remove controller.quorum.voters and specify controller.quorum.bootstrap.servers instead.");
    }
    if !config.cluster.roles.controller {
        anyhow::bail!("{flag} is for a controller: process.roles has no controller");
    }
    Ok(Some(match quorum {
        InitialQuorum::Controllers(list) => initial_voters::parse(list)
            .map_err(|e| anyhow::anyhow!("--initial-controllers: {e}"))?,
        InitialQuorum::NoControllers => Vec::new(),
        _ => {
            let l = config.cluster.controller_listeners.first().ok_or_else(|| {
                anyhow::anyhow!("--standalone: controller.listener.names names no listener")
            })?;
            // Where others reach it: the bootstrap server on its port (its name as the
            // cluster knows it), else the listener's host when it names one.
            let named = config.cluster.bootstrap_servers.iter().find_map(|b| {
                let (h, p) = b.rsplit_once(':')?;
                (p.parse::<u16>().ok()? == l.port).then(|| h.trim_matches(['[', ']']).to_string())
            });
            let host = match (named, l.host.as_str()) {
                (Some(h), _) => h,
                (None, "" | "0.0.0.0" | "::") => "localhost".to_string(),
                (None, h) => h.to_string(),
            };
            vec![InitialVoter {
                id: config.node_id,
                host,
                port: l.port,
                directory_id: evenkeel::storage::KafkaUuid::random(),
            }]
        }
    }))
}

fn cmd_format(
    config: PathBuf,
    options: FormatOptions,
    overrides: Vec<String>,
) -> anyhow::Result<()> {
    let FormatOptions {
        cluster_id,
        ignore_formatted,
        quorum,
        add_scram,
    } = options;
    // Read before anything is written, so a bad argument leaves the directory untouched.
    let bootstrap = scram_bootstrap(&add_scram)?;
    let props = load_props(Some(&config), &overrides)?;
    let config = broker_config(&props)?;
    let voters = initial_voters(&quorum, &props, &config)?;
    if let Some(existing) = evenkeel::storage::MetaProperties::read(&config.log_dir)? {
        let what = format!(
            "{} is already formatted (cluster {}, node {})",
            config.log_dir.display(),
            existing.cluster_id,
            existing.node_id
        );
        if ignore_formatted {
            if cluster_id
                .as_ref()
                .is_some_and(|id| *id != existing.cluster_id)
            {
                anyhow::bail!("{what}, not for cluster {}", cluster_id.unwrap_or_default());
            }
            println!("{what}");
            return Ok(());
        }
        anyhow::bail!("{what}");
    }
    let id = cluster_id.unwrap_or_else(evenkeel::broker::random_cluster_id);
    if evenkeel::storage::KafkaUuid::parse(&id).is_none() {
        anyhow::bail!("--cluster-id {id:?} is not a Kafka cluster id (22 characters of URL-safe base64, as kafka-storage random-uuid prints)");
    }
    // The bootstrap records first (always, replacing any left by an interrupted format):
    // meta.properties is the mark of a formatted directory, so it must come last.
    std::fs::create_dir_all(&config.log_dir)?;
    evenkeel::metadata::bootstrap::write(&config.log_dir, &bootstrap)?;
    let mut directory_id = evenkeel::storage::KafkaUuid::random();
    if let Some(voters) = &voters {
        if let Some(me) = voters.iter().find(|v| v.id == config.node_id) {
            directory_id = me.directory_id;
        }
        evenkeel::metadata::initial_voters::write(&config.log_dir, voters)?;
    }
    evenkeel::broker::format_log_dir_as(&config.log_dir, &id, config.node_id, directory_id)?;
    println!(
        "Formatting {} with cluster.id {id} and node.id {}",
        config.log_dir.display(),
        config.node_id
    );
    Ok(())
}

/// The UserScramCredentialRecords of `--add-scram` arguments.
fn scram_bootstrap(
    arguments: &[String],
) -> anyhow::Result<Vec<evenkeel::metadata::records::MetadataRecord>> {
    use evenkeel::metadata::records::{MetadataRecord, ScramCredentialRecord};
    arguments
        .iter()
        .map(|a| {
            let s = evenkeel::security::sasl::parse_add_scram(a)
                .map_err(|e| anyhow::anyhow!("--add-scram: {e}"))?;
            Ok(MetadataRecord::UserScramCredential(
                ScramCredentialRecord::new(&s.user, s.mechanism, s.credential),
            ))
        })
        .collect()
}

fn cmd_crdgen(out: PathBuf, check: bool) -> anyhow::Result<()> {
    let mut stale = Vec::new();
    for (name, yaml) in evenkeel::operator::crd::crd_files() {
        let path = out.join(name);
        if check {
            let on_disk = std::fs::read_to_string(&path).unwrap_or_default();
            if on_disk != yaml {
                stale.push(path.display().to_string());
            }
        } else {
            std::fs::create_dir_all(&out)?;
            std::fs::write(&path, yaml)?;
            println!("wrote {}", path.display());
        }
    }
    if !stale.is_empty() {
        anyhow::bail!(
            "CRD files differ from the code, run `evenkeel crdgen`: {}",
            stale.join(", ")
        );
    }
    Ok(())
}

fn cmd_dump_log(
    files: Vec<PathBuf>,
    print_data_log: bool,
    deep_iteration: bool,
) -> anyhow::Result<()> {
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

fn run(cli: Cli) -> anyhow::Result<()> {
    match cli.command {
        Command::Broker { config, overrides } => {
            let props = load_props(Some(&config), &overrides)?;
            serve(broker_config(&props)?, false, None)
        }
        Command::Dev {
            brokers,
            port,
            data,
            overrides,
            proxy_port,
            no_proxy,
            rebalancer_port,
            no_rebalancer,
        } => {
            // --port 0 picks free ports for everything, the proxy's and the rebalancer's too.
            let pick = |wanted: u16| if port == 0 { 0 } else { wanted };
            let sidecars = DevSidecars {
                proxy: (!no_proxy).then_some(pick(proxy_port)),
                rebalancer: (!no_rebalancer).then_some(pick(rebalancer_port)),
            };
            cmd_dev(brokers, port, data, overrides, sidecars)
        }
        Command::Proxy {
            bootstrap,
            listen,
            producer_props,
            shutdown_delay_ms,
            ssl_keystore_location,
            authentication_method,
            max_users,
        } => cmd_proxy(
            bootstrap,
            listen,
            producer_props,
            ProxyFlags {
                shutdown_delay_ms,
                ssl_keystore_location,
                authentication_method,
                max_users,
            },
        ),
        Command::Format {
            config,
            cluster_id,
            ignore_formatted,
            standalone,
            initial_controllers,
            no_initial_controllers,
            add_scram,
            overrides,
        } => cmd_format(
            config,
            FormatOptions {
                cluster_id,
                ignore_formatted,
                quorum: match (standalone, initial_controllers, no_initial_controllers) {
                    (true, _, _) => InitialQuorum::Standalone,
                    (_, Some(list), _) => InitialQuorum::Controllers(list),
                    (_, _, true) => InitialQuorum::NoControllers,
                    _ => InitialQuorum::Unsaid,
                },
                add_scram,
            },
            overrides,
        ),
        Command::Crdgen { out, check } => cmd_crdgen(out, check),
        Command::Operator(args) => evenkeel::operator::run(args),
        Command::Rebalancer(args) => evenkeel::rebalancer::cli::run(args),
        Command::DumpLog {
            files,
            print_data_log,
            deep_iteration,
        } => cmd_dump_log(files, print_data_log, deep_iteration),
        Command::Perf { what } => evenkeel::perf::cli::run(what),
    }
}
