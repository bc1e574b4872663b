//! `evenkeel dev --brokers N`: a whole cluster on one machine — N nodes as local processes of
//! this binary, the first three (or all, if fewer) voting in the metadata quorum — with one
//! bootstrap list printed and every node stopped cleanly together.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// The most voters a dev cluster has; later nodes are brokers only.
pub const MAX_VOTERS: usize = 3;
const READY_TIMEOUT: Duration = Duration::from_secs(120);
const STOP_TIMEOUT: Duration = Duration::from_secs(30);

#[derive(Debug, thiserror::Error)]
pub enum DevError {
    #[error("{0}")]
    Io(#[from] std::io::Error),
    #[error("node {node} did not start: {reason}")]
    NodeFailed { node: usize, reason: String },
    #[error("{0}")]
    Broker(#[from] crate::broker::BrokerError),
}

/// How to lay out the cluster.
#[derive(Debug, Clone)]
pub struct DevOptions {
    pub brokers: usize,
    /// The first node's client port (0: ephemeral ports for everything).
    pub port: u16,
    pub data: PathBuf,
    pub overrides: Vec<(String, String)>,
}

/// The ports of one node.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NodePorts {
    pub client: u16,
    pub controller: u16,
    pub metrics: u16,
}

/// The first port of the kernel's ephemeral range (where outgoing connections get theirs).
fn ephemeral_start() -> u16 {
    std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|r| r.split_whitespace().next()?.parse().ok())
        .unwrap_or(32768)
}

/// A loopback port free a moment ago, not handed out before in this process. Taken from just
/// below the ephemeral range (30000 up to it; the test suite's ports are 10000..30000) when
/// there is room: a port the kernel picked (a bind to port 0) can go to another process's
/// outgoing connection between this pick and the node's bind, and the node then cannot listen
/// (seen in CI right after a Kafka cluster stopped).
fn free_port(taken: &mut std::collections::HashSet<u16>) -> std::io::Result<u16> {
    use rand::Rng;
    const FLOOR: u16 = 30_000;
    let top = ephemeral_start();
    if top > FLOOR + 500 {
        let mut rng = rand::thread_rng();
        for _ in 0..200 {
            let p = rng.gen_range(FLOOR..top);
            if !taken.contains(&p) && std::net::TcpListener::bind(("127.0.0.1", p)).is_ok() {
                taken.insert(p);
                return Ok(p);
            }
        }
    }
    let p = std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port();
    taken.insert(p);
    Ok(p)
}

/// Ports by node: from `port` upwards (controllers 10000 above, metrics from 9404), or all
/// free ones when `port` is 0.
pub fn plan_ports(nodes: usize, port: u16) -> std::io::Result<Vec<NodePorts>> {
    let mut taken = std::collections::HashSet::new();
    (0..nodes)
        .map(|i| {
            if port == 0 {
                Ok(NodePorts {
                    client: free_port(&mut taken)?,
                    controller: free_port(&mut taken)?,
                    metrics: 0,
                })
            } else {
                let i = i as u16;
                Ok(NodePorts {
                    client: port + i,
                    controller: port.saturating_add(10_000) + i,
                    metrics: 9404 + i,
                })
            }
        })
        .collect()
}

/// The `server.properties` of node `id` (1-based): Kafka's combined or broker-only keys.
pub fn node_properties(
    opts: &DevOptions,
    ports: &[NodePorts],
    id: usize,
) -> BTreeMap<String, String> {
    let voters = ports.len().min(MAX_VOTERS);
    let p = ports[id - 1];
    let voter = id <= voters;
    let mut props = BTreeMap::new();
    let mut set = |k: &str, v: String| {
        props.insert(k.to_string(), v);
    };
    set("node.id", id.to_string());
    set(
        "process.roles",
        if voter { "broker,controller" } else { "broker" }.into(),
    );
    set(
        "controller.quorum.voters",
        (1..=voters)
            .map(|v| format!("{v}@127.0.0.1:{}", ports[v - 1].controller))
            .collect::<Vec<_>>()
            .join(","),
    );
    set(
        "listeners",
        if voter {
            format!(
                "PLAINTEXT://127.0.0.1:{},CONTROLLER://127.0.0.1:{}",
                p.client, p.controller
            )
        } else {
            format!("PLAINTEXT://127.0.0.1:{}", p.client)
        },
    );
    set(
        "advertised.listeners",
        format!("PLAINTEXT://127.0.0.1:{}", p.client),
    );
    set("controller.listener.names", "CONTROLLER".into());
    set(
        "listener.security.protocol.map",
        "CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT".into(),
    );
    set("inter.broker.listener.name", "PLAINTEXT".into());
    set(
        "log.dirs",
        opts.data.join(format!("broker-{id}")).display().to_string(),
    );
    set(
        "evenkeel.metrics.address",
        format!("127.0.0.1:{}", p.metrics),
    );
    set(
        "offsets.topic.replication.factor",
        ports.len().min(3).to_string(),
    );
    // One machine, quick feedback: groups form without the 3 s initial delay.
    set("group.initial.rebalance.delay.ms", "0".into());
    for (k, v) in &opts.overrides {
        set(k, v.clone());
    }
    props
}

fn write_properties(path: &Path, props: &BTreeMap<String, String>) -> std::io::Result<()> {
    let mut text = String::from("# Written by `evenkeel dev`; rewritten at every start.\n");
    for (k, v) in props {
        text.push_str(&format!("{k}={v}\n"));
    }
    std::fs::write(path, text)
}

/// The cluster id of `data`, made once.
fn cluster_id(data: &Path) -> std::io::Result<String> {
    let path = data.join("cluster.id");
    match std::fs::read_to_string(&path) {
        Ok(id) if !id.trim().is_empty() => Ok(id.trim().to_string()),
        _ => {
            let id = crate::broker::random_cluster_id();
            std::fs::write(&path, &id)?;
            Ok(id)
        }
    }
}

struct Running {
    id: usize,
    child: Child,
}

fn sigterm(pid: u32) {
    // SAFETY: kill(2) with a pid this process spawned; no memory is touched.
    unsafe {
        libc::kill(pid as i32, libc::SIGTERM);
    }
}

/// Waits for a node's "ready on host:port" line on its stdout; returns that address and the
/// URL of its earlier "metrics on URL" line. Its stdout is drained after.
fn wait_ready(id: usize, child: &mut Child) -> Result<(String, Option<String>), DevError> {
    let stdout = child.stdout.take().ok_or_else(|| DevError::NodeFailed {
        node: id,
        reason: "no stdout".into(),
    })?;
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut metrics = None;
        for line in BufReader::new(stdout).lines() {
            let Ok(line) = line else { return };
            if let Some(url) = line.split(" metrics on ").nth(1) {
                metrics = url.split_whitespace().next().map(str::to_string);
            }
            if let Some(rest) = line.split(" ready on ").nth(1) {
                let addr = rest.split_whitespace().next().unwrap_or("").to_string();
                let _ = tx.send((addr, metrics.clone()));
            }
        }
    });
    let deadline = Instant::now() + READY_TIMEOUT;
    loop {
        if let Ok(ready) = rx.recv_timeout(Duration::from_millis(200)) {
            return Ok(ready);
        }
        if let Ok(Some(status)) = child.try_wait() {
            return Err(DevError::NodeFailed {
                node: id,
                reason: format!("it exited ({status}); its log is above"),
            });
        }
        if Instant::now() > deadline {
            return Err(DevError::NodeFailed {
                node: id,
                reason: format!("no ready line within {} s", READY_TIMEOUT.as_secs()),
            });
        }
    }
}

/// Starts the nodes of a dev cluster with the binary `exe`, returns the bootstrap list once
/// every node is ready, and the handles to stop them.
pub fn start_cluster(exe: &Path, opts: &DevOptions) -> Result<DevCluster, DevError> {
    std::fs::create_dir_all(&opts.data)?;
    let ports = plan_ports(opts.brokers, opts.port)?;
    let id = cluster_id(&opts.data)?;
    let mut running = Vec::new();
    for n in 1..=opts.brokers {
        let props = node_properties(opts, &ports, n);
        let dir = opts.data.join(format!("broker-{n}"));
        std::fs::create_dir_all(&dir)?;
        crate::broker::format_log_dir(&dir, &id, n as i32)?;
        let path = opts.data.join(format!("broker-{n}.properties"));
        write_properties(&path, &props)?;
        let child = Command::new(exe)
            .arg("broker")
            .arg("--config")
            .arg(&path)
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()?;
        running.push(Running { id: n, child });
    }
    let mut cluster = DevCluster {
        nodes: running,
        bootstrap: Vec::new(),
        metrics: BTreeMap::new(),
        cluster_id: id,
    };
    for r in cluster.nodes.iter_mut() {
        let (addr, metrics) = wait_ready(r.id, &mut r.child)?;
        cluster.bootstrap.push(addr);
        if let Some(url) = metrics {
            cluster.metrics.insert(r.id as i32, url);
        }
    }
    Ok(cluster)
}

/// A running dev cluster: stopping it (or dropping it) stops every node.
pub struct DevCluster {
    nodes: Vec<Running>,
    pub bootstrap: Vec<String>,
    /// Each node's metrics URL, by node id, as its banner printed it.
    pub metrics: BTreeMap<i32, String>,
    pub cluster_id: String,
}

impl DevCluster {
    /// A node that exited on its own, if any: `(node id, status)`.
    pub fn exited(&mut self) -> Option<(usize, std::process::ExitStatus)> {
        self.nodes
            .iter_mut()
            .find_map(|r| r.child.try_wait().ok().flatten().map(|s| (r.id, s)))
    }

    /// SIGTERM to every node at once (each moves its leaderships away), then waits; a node
    /// still running after 30 s is killed. Returns whether all stopped cleanly.
    pub fn stop(&mut self) -> bool {
        for r in &self.nodes {
            sigterm(r.child.id());
        }
        let deadline = Instant::now() + STOP_TIMEOUT;
        let mut clean = true;
        for r in self.nodes.iter_mut() {
            loop {
                match r.child.try_wait() {
                    Ok(Some(s)) => {
                        clean &= s.success();
                        break;
                    }
                    Ok(None) if Instant::now() < deadline => {
                        std::thread::sleep(Duration::from_millis(50))
                    }
                    _ => {
                        let _ = r.child.kill();
                        let _ = r.child.wait();
                        clean = false;
                        break;
                    }
                }
            }
        }
        self.nodes.clear();
        clean
    }
}

impl Drop for DevCluster {
    fn drop(&mut self) {
        if !self.nodes.is_empty() {
            self.stop();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn opts(n: usize) -> DevOptions {
        DevOptions {
            brokers: n,
            port: 9092,
            data: PathBuf::from("/tmp/ek"),
            overrides: vec![("num.partitions".into(), "3".into())],
        }
    }

    #[test]
    fn free_ports_are_distinct_and_below_the_ephemeral_range() {
        let ports = plan_ports(5, 0).unwrap();
        let all: Vec<u16> = ports
            .iter()
            .flat_map(|p| [p.client, p.controller])
            .collect();
        let distinct: std::collections::HashSet<u16> = all.iter().copied().collect();
        assert_eq!(distinct.len(), all.len(), "{all:?}");
        let top = ephemeral_start();
        if top > 30_500 {
            assert!(all.iter().all(|p| (30_000..top).contains(p)), "{all:?}");
        }
    }

    #[test]
    fn the_first_three_nodes_vote_and_the_rest_are_brokers() {
        let o = opts(4);
        let ports = plan_ports(4, 9092).unwrap();
        let first = node_properties(&o, &ports, 1);
        assert_eq!(first["process.roles"], "broker,controller");
        assert_eq!(
            first["controller.quorum.voters"],
            "1@127.0.0.1:19092,2@127.0.0.1:19093,3@127.0.0.1:19094"
        );
        assert_eq!(
            first["listeners"],
            "PLAINTEXT://127.0.0.1:9092,CONTROLLER://127.0.0.1:19092"
        );
        let fourth = node_properties(&o, &ports, 4);
        assert_eq!(fourth["process.roles"], "broker");
        assert_eq!(fourth["listeners"], "PLAINTEXT://127.0.0.1:9095");
        assert_eq!(fourth["num.partitions"], "3");
        assert_eq!(fourth["offsets.topic.replication.factor"], "3");
        // The properties are a valid node configuration.
        let (c, unknown) = crate::config::broker::BrokerConfig::from_props(&first).unwrap();
        assert!(unknown.is_empty(), "{unknown:?}");
        assert_eq!(c.cluster.voters.len(), 3);
    }
}
