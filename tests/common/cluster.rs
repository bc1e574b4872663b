//! A cluster of real `evenkeel broker` processes on loopback, laid out as `evenkeel dev
//! --brokers N` lays it out (the first three vote), with kill -9, SIGTERM, SIGSTOP/SIGCONT and
//! restart per node, for black-box cluster tests.
#![allow(dead_code)]

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use evenkeel::dev::{node_properties, DevOptions, NodePorts};

pub struct Node {
    pub id: usize,
    child: Option<Child>,
    config: PathBuf,
    pub ports: NodePorts,
    /// Where the node serves /metrics (bound when it starts).
    pub metrics: Option<u16>,
}

pub struct Cluster {
    pub nodes: Vec<Node>,
    pub data: PathBuf,
    pub cluster_id: String,
    /// With `start_relayed`: the relay in front of each node's replication listener.
    pub relays: Vec<super::relay::Relay>,
    _tmp: tempfile::TempDir,
}

/// Reads the node's stdout until its ready line; returns the metrics port from its banner
/// if any. Keeps draining stdout afterwards.
fn wait_ready(child: &mut Child, timeout: Duration) -> Result<Option<u16>, String> {
    let stdout = child.stdout.take().ok_or("no stdout")?;
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut metrics = None;
        for line in BufReader::new(stdout).lines() {
            let Ok(line) = line else { return };
            if let Some(url) = line.split(" metrics on ").nth(1) {
                metrics = url
                    .trim()
                    .trim_start_matches("http://")
                    .trim_end_matches("/metrics")
                    .rsplit(':')
                    .next()
                    .and_then(|p| p.parse::<u16>().ok());
            }
            if line.contains(" ready on ") {
                let _ = tx.send(metrics);
            }
        }
    });
    let deadline = Instant::now() + timeout;
    loop {
        if let Ok(metrics) = rx.recv_timeout(Duration::from_millis(100)) {
            return Ok(metrics);
        }
        if let Ok(Some(status)) = child.try_wait() {
            return Err(format!("exited with {status}"));
        }
        if Instant::now() > deadline {
            return Err("no ready line in time".into());
        }
    }
}

/// GET /metrics over a plain TCP socket.
fn scrape(port: u16) -> Option<String> {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    s.write_all(b"GET /metrics HTTP/1.0\r\nHost: localhost\r\n\r\n")
        .ok()?;
    let mut out = String::new();
    s.read_to_string(&mut out).ok()?;
    out.split_once("\r\n\r\n").map(|(_, body)| body.to_string())
}

fn signal(pid: u32, sig: &str) {
    let _ = Command::new("kill").arg(sig).arg(pid.to_string()).status();
}

impl Cluster {
    /// Starts `n` nodes (all at once, as a cluster must) with extra `key=value` overrides for
    /// every node, and waits until each is ready.
    pub fn start(n: usize, overrides: &[&str]) -> Cluster {
        Self::start_with(n, overrides, |_, _| Vec::new())
    }

    /// As `start`, with per-node overrides (e.g. `broker.rack`), given the node's ports; an
    /// empty value removes the key.
    pub fn start_with(
        n: usize,
        overrides: &[&str],
        per_node: impl Fn(usize, &NodePorts) -> Vec<(String, String)>,
    ) -> Cluster {
        Self::start_prepared(n, overrides, per_node, |_| {})
    }

    /// The per-node listeners of a node with a SASL listener on `sasl` beside its PLAINTEXT
    /// and CONTROLLER ones (map `SASL` in `listener.security.protocol.map`), for `start_with`.
    pub fn sasl_listeners(ports: &NodePorts, sasl: u16) -> Vec<(String, String)> {
        let (client, ctrl) = (ports.client, ports.controller);
        vec![
            (
                "listeners".into(),
                format!(
                    "PLAINTEXT://127.0.0.1:{client},SASL://127.0.0.1:{sasl},CONTROLLER://127.0.0.1:{ctrl}"
                ),
            ),
            (
                "advertised.listeners".into(),
                format!("PLAINTEXT://127.0.0.1:{client},SASL://127.0.0.1:{sasl}"),
            ),
        ]
    }

    /// As `start_with`, calling `prepare` on each node's log directory once it is formatted
    /// and before the node starts (e.g. to write bootstrap records).
    pub fn start_prepared(
        n: usize,
        overrides: &[&str],
        per_node: impl Fn(usize, &NodePorts) -> Vec<(String, String)>,
        prepare: impl Fn(&std::path::Path),
    ) -> Cluster {
        let tmp = tempfile::tempdir().unwrap();
        let data = tmp.path().to_path_buf();
        let mut opts = DevOptions {
            brokers: n,
            port: 0,
            data: data.clone(),
            overrides: overrides
                .iter()
                .map(|kv| {
                    let (k, v) = kv.split_once('=').unwrap();
                    (k.to_string(), v.to_string())
                })
                .collect(),
        };
        opts.overrides
            .push(("evenkeel.metrics.address".into(), "127.0.0.1:0".into()));
        // Ports from outside the ephemeral range, so a restarted node finds its own still free.
        let ports: Vec<NodePorts> = (0..n)
            .map(|_| NodePorts {
                client: super::free_port(),
                controller: super::free_port(),
                metrics: 0,
            })
            .collect();
        let cluster_id = evenkeel::broker::random_cluster_id();
        let mut nodes = Vec::new();
        for id in 1..=n {
            let mut props: BTreeMap<String, String> = node_properties(&opts, &ports, id);
            for (k, v) in per_node(id, &ports[id - 1]) {
                match v.is_empty() {
                    true => props.remove(&k),
                    false => props.insert(k, v),
                };
            }
            let dir = data.join(format!("broker-{id}"));
            evenkeel::broker::format_log_dir(&dir, &cluster_id, id as i32).unwrap();
            prepare(&dir);
            let config = data.join(format!("broker-{id}.properties"));
            let text: String = props.iter().map(|(k, v)| format!("{k}={v}\n")).collect();
            std::fs::write(&config, text).unwrap();
            nodes.push(Node {
                id,
                child: None,
                config,
                ports: ports[id - 1],
                metrics: None,
            });
        }
        let mut c = Cluster {
            nodes,
            data,
            cluster_id,
            relays: Vec::new(),
            _tmp: tmp,
        };
        for i in 0..n {
            c.spawn(i + 1);
        }
        for i in 0..n {
            c.wait(i + 1);
        }
        c
    }

    /// As `start`, with each node's replication traffic on its own listener (REPLICATION,
    /// the inter-broker listener) behind a relay the test can cut: followers reach a leader
    /// only through the leader's relay.
    pub fn start_relayed(n: usize, overrides: &[&str]) -> Cluster {
        let repl: Vec<u16> = (0..n).map(|_| super::free_port()).collect();
        let relays: Vec<super::relay::Relay> = repl
            .iter()
            .map(|p| super::relay::Relay::start(*p))
            .collect();
        let relay_ports: Vec<u16> = relays.iter().map(|r| r.port).collect();
        let mut c = Self::start_with(n, overrides, |id, ports| {
            let (client, ctrl, r) = (ports.client, ports.controller, repl[id - 1]);
            let mut listeners =
                format!("PLAINTEXT://127.0.0.1:{client},REPLICATION://127.0.0.1:{r}");
            if id <= 3 {
                listeners.push_str(&format!(",CONTROLLER://127.0.0.1:{ctrl}"));
            }
            vec![
                ("listeners".into(), listeners),
                (
                    "advertised.listeners".into(),
                    format!(
                        "PLAINTEXT://127.0.0.1:{client},REPLICATION://127.0.0.1:{}",
                        relay_ports[id - 1]
                    ),
                ),
                (
                    "listener.security.protocol.map".into(),
                    "PLAINTEXT:PLAINTEXT,REPLICATION:PLAINTEXT,CONTROLLER:PLAINTEXT".into(),
                ),
                ("inter.broker.listener.name".into(), "REPLICATION".into()),
            ]
        });
        c.relays = relays;
        c
    }

    fn node(&mut self, id: usize) -> &mut Node {
        &mut self.nodes[id - 1]
    }

    /// Starts node `id` (again) without waiting.
    pub fn spawn(&mut self, id: usize) {
        let n = self.node(id);
        assert!(n.child.is_none(), "node {id} is running");
        // stderr (the node's log) goes to a file beside its config, kept across restarts.
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(n.config.with_extension("stderr"))
            .expect("a log file");
        let child = Command::new(env!("CARGO_BIN_EXE_evenkeel"))
            .arg("broker")
            .arg("--config")
            .arg(&n.config)
            .stdout(Stdio::piped())
            .stderr(Stdio::from(log))
            .spawn()
            .expect("start evenkeel");
        n.child = Some(child);
    }

    /// Waits for node `id`'s ready line.
    pub fn wait(&mut self, id: usize) {
        let n = self.node(id);
        let child = n.child.as_mut().expect("started");
        match wait_ready(child, Duration::from_secs(90)) {
            Ok(metrics) => n.metrics = metrics,
            Err(e) => panic!(
                "node {id} did not start: {e}; the end of each node's log:\n{}",
                self.log_tails(40)
            ),
        }
    }

    /// The last `lines` of every node's log (stderr, kept across restarts), for a failure's
    /// message: a node that does not start is often waiting on another.
    pub fn log_tails(&self, lines: usize) -> String {
        let mut out = String::new();
        for n in &self.nodes {
            let log = self.log(n.id);
            let tail: Vec<&str> = log.lines().rev().take(lines).collect();
            out.push_str(&format!("--- node {}\n", n.id));
            for l in tail.into_iter().rev() {
                out.push_str(l);
                out.push('\n');
            }
        }
        out
    }

    /// Rewrites keys of node `id`'s server.properties (read at its next start); an empty value
    /// removes the key.
    pub fn set_config(&mut self, id: usize, pairs: &[(&str, String)]) {
        let path = self.node(id).config.clone();
        let text = std::fs::read_to_string(&path).expect("the node's config");
        let mut props = evenkeel::config::parse_properties(&text);
        for (k, v) in pairs {
            match v.is_empty() {
                true => props.remove(*k),
                false => props.insert(k.to_string(), v.clone()),
            };
        }
        let text: String = props.iter().map(|(k, v)| format!("{k}={v}\n")).collect();
        std::fs::write(&path, text).expect("the node's config written");
    }

    /// Starts node `id` and waits until it is ready.
    pub fn restart(&mut self, id: usize) {
        self.spawn(id);
        self.wait(id);
    }

    pub fn is_running(&mut self, id: usize) -> bool {
        let n = self.node(id);
        match n.child.as_mut() {
            Some(c) => c.try_wait().ok().flatten().is_none(),
            None => false,
        }
    }

    /// kill -9.
    pub fn kill(&mut self, id: usize) {
        if let Some(mut c) = self.node(id).child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// SIGTERM and wait; true when it exited cleanly.
    pub fn stop(&mut self, id: usize) -> bool {
        let Some(mut c) = self.node(id).child.take() else {
            return true;
        };
        signal(c.id(), "-TERM");
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            if let Ok(Some(s)) = c.try_wait() {
                return s.success();
            }
            if Instant::now() > deadline {
                let _ = c.kill();
                let _ = c.wait();
                return false;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    pub fn sigstop(&mut self, id: usize) {
        if let Some(c) = &self.node(id).child {
            signal(c.id(), "-STOP");
        }
    }

    pub fn sigcont(&mut self, id: usize) {
        if let Some(c) = &self.node(id).child {
            signal(c.id(), "-CONT");
        }
    }

    /// `127.0.0.1:port` of node `id`'s client listener.
    pub fn addr(&self, id: usize) -> String {
        format!("127.0.0.1:{}", self.nodes[id - 1].ports.client)
    }

    /// One series of node `id`'s /metrics, summed over its labels (None when the node
    /// cannot be scraped or has no such series).
    pub fn metric(&self, id: usize, name: &str) -> Option<f64> {
        self.metric_where(id, name, "")
    }

    /// As `metric`, over the samples whose labels contain `labels` (e.g.
    /// `request="FetchConsumer"`).
    pub fn metric_where(&self, id: usize, name: &str, labels: &str) -> Option<f64> {
        let port = self.nodes[id - 1].metrics?;
        let body = scrape(port)?;
        let mut total = None;
        for line in body.lines().filter(|l| !l.starts_with('#')) {
            let (series, value) = line.rsplit_once(' ')?;
            let bare = series.split('{').next().unwrap_or(series);
            if bare == name && series.contains(labels) {
                *total.get_or_insert(0.0) += value.parse::<f64>().ok()?;
            }
        }
        total
    }

    /// Everything node `id` logged to stderr so far, all its runs (a log cut mid-character by a
    /// kill still reads, with a replacement character there).
    pub fn log(&self, id: usize) -> String {
        std::fs::read(self.nodes[id - 1].config.with_extension("stderr"))
            .map(|b| String::from_utf8_lossy(&b).into_owned())
            .unwrap_or_default()
    }

    /// Every node's client address, comma-separated.
    pub fn bootstrap(&self) -> String {
        (1..=self.nodes.len())
            .map(|i| self.addr(i))
            .collect::<Vec<_>>()
            .join(",")
    }

    /// The client addresses of the running nodes.
    pub fn live_bootstrap(&mut self) -> String {
        let ids: Vec<usize> = (1..=self.nodes.len())
            .filter(|i| self.is_running(*i))
            .collect();
        ids.iter()
            .map(|i| self.addr(*i))
            .collect::<Vec<_>>()
            .join(",")
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        for n in &mut self.nodes {
            if let Some(mut c) = n.child.take() {
                signal(c.id(), "-CONT");
                let _ = c.kill();
                let _ = c.wait();
            }
        }
    }
}

// --- helpers the cluster tests share ----------------------------------------------------------

/// An admin client on `addr`, retried for up to 30 s while the node starts.
pub async fn admin(addr: &str) -> evenkeel::client::AdminClient {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        match evenkeel::client::AdminClient::connect(addr, Duration::from_secs(20)).await {
            Ok(a) => return a,
            Err(e) if Instant::now() > deadline => panic!("cannot reach {addr}: {e}"),
            Err(_) => tokio::time::sleep(Duration::from_millis(200)).await,
        }
    }
}

/// Polls `check` every 100 ms until it returns Some or `within` passes.
pub async fn eventually<T, F, Fut>(within: Duration, mut check: F) -> Option<T>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let deadline = Instant::now() + within;
    loop {
        if let Some(v) = check().await {
            return Some(v);
        }
        if Instant::now() > deadline {
            return None;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// As `eventually`, failing the test with `what` when time runs out.
pub async fn until<T, F, Fut>(what: &str, within: Duration, check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    match eventually(within, check).await {
        Some(v) => v,
        None => panic!("timed out waiting for {what}"),
    }
}

/// Partition `p` of `topic` as the broker at `addr` describes it (None while it does not know).
pub async fn partition(addr: &str, topic: &str, p: i32) -> Option<evenkeel::client::PartitionInfo> {
    let a = evenkeel::client::AdminClient::connect(addr, Duration::from_secs(20))
        .await
        .ok()?;
    let t = a
        .describe_topics(Some(&[topic.to_string()]))
        .await
        .ok()?
        .into_iter()
        .next()?;
    t.partitions.into_iter().find(|x| x.partition == p)
}

/// A librdkafka producer with `acks`, no retries and no idempotence (tests count offsets).
pub fn producer(bootstrap: &str, acks: &str) -> rdkafka::producer::FutureProducer {
    rdkafka::ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .set("acks", acks)
        .set("linger.ms", "2")
        .set("message.timeout.ms", "30000")
        .set("retries", "0")
        .set("enable.idempotence", "false")
        .create()
        .unwrap()
}

/// Sends `values` to partition 0 one at a time; returns their offsets (panics on a failure).
pub async fn produce(
    p: &rdkafka::producer::FutureProducer,
    topic: &str,
    values: impl IntoIterator<Item = String>,
) -> Vec<i64> {
    let mut out = Vec::new();
    for v in values {
        let d = p
            .send(
                rdkafka::producer::FutureRecord::<(), _>::to(topic)
                    .partition(0)
                    .payload(&v),
                Duration::from_secs(30),
            )
            .await
            .unwrap_or_else(|(e, _)| panic!("{v} not acked: {e}"));
        out.push(d.offset);
    }
    out
}

/// `prefix0`, `prefix1`, … `prefix{n-1}`.
pub fn values(prefix: &str, n: usize) -> Vec<String> {
    (0..n).map(|i| format!("{prefix}{i}")).collect()
}

/// Partition 0 of `topic` from its start: up to `expect` (offset, value) pairs, within 30 s.
pub fn read_partition(
    bootstrap: &str,
    topic: &str,
    expect: usize,
    extra: &[(&str, &str)],
) -> Vec<(i64, String)> {
    use rdkafka::consumer::{BaseConsumer, Consumer};
    use rdkafka::Message;
    let mut cfg = rdkafka::ClientConfig::new();
    cfg.set("bootstrap.servers", bootstrap)
        .set("group.id", "cluster-test-reader")
        .set("enable.auto.commit", "false");
    for (k, v) in extra {
        cfg.set(*k, *v);
    }
    let c: BaseConsumer = cfg.create().unwrap();
    let mut tpl = rdkafka::TopicPartitionList::new();
    tpl.add_partition_offset(topic, 0, rdkafka::Offset::Beginning)
        .unwrap();
    c.assign(&tpl).unwrap();
    let mut out = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(30);
    while out.len() < expect && Instant::now() < deadline {
        if let Some(Ok(m)) = c.poll(Duration::from_millis(200)) {
            let v = String::from_utf8_lossy(m.payload().unwrap_or_default()).into_owned();
            out.push((m.offset(), v));
        }
    }
    out
}

/// Creates `topic` through node 1 with an explicit assignment and topic configs.
pub async fn create_assigned(
    c: &Cluster,
    topic: &str,
    assignment: Vec<Vec<i32>>,
    configs: &[(&str, &str)],
) {
    let configs: BTreeMap<String, String> = configs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    admin(&c.addr(1))
        .await
        .create_topic_with_assignment(topic, &assignment, &configs)
        .await
        .unwrap();
}

/// A client's security from Kafka's client keys, given as pairs.
pub fn client_security(pairs: &[(&str, &str)]) -> evenkeel::client::ClientSecurity {
    let props: BTreeMap<String, String> = pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    evenkeel::client::ClientSecurity::from_properties(&props).unwrap()
}

/// What a controller listener answers `security`: the error codes of a BrokerHeartbeat and of
/// a DescribeQuorum.
pub async fn controller_answers(
    controller: &str,
    security: &evenkeel::client::ClientSecurity,
) -> Result<(i16, i16), evenkeel::client::ClientError> {
    use kafka_protocol::messages::{BrokerHeartbeatRequest, BrokerId, DescribeQuorumRequest};
    let wait = Duration::from_secs(60);
    let conn = evenkeel::client::Connection::connect_with(controller, wait, security).await?;
    let heartbeat = BrokerHeartbeatRequest::default()
        .with_broker_id(BrokerId(7))
        .with_broker_epoch(1);
    let heartbeat = conn.call_at(&heartbeat, 1).await?.error_code;
    let quorum = DescribeQuorumRequest::default();
    let quorum = conn.call_at(&quorum, 1).await?.error_code;
    Ok((heartbeat, quorum))
}
