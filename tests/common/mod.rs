//! Starts the real `evenkeel` binary on an ephemeral loopback port for black-box tests.
#![allow(dead_code)]

pub mod cluster;
pub mod http;
pub mod pki;
pub mod rebalancer;
pub mod relay;

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

pub struct BrokerProcess {
    child: Option<Child>,
    pub bootstrap: String,
    pub data: PathBuf,
    _tmp: Option<tempfile::TempDir>,
}

impl BrokerProcess {
    /// `evenkeel dev --port 0` in a fresh temp dir.
    pub fn start(overrides: &[&str]) -> BrokerProcess {
        let tmp = tempfile::tempdir().unwrap();
        let data = tmp.path().to_path_buf();
        let mut b = Self::start_in(&data, overrides);
        b._tmp = Some(tmp);
        b
    }

    /// `evenkeel dev --port 0` on an existing data dir (for restarts).
    pub fn start_in(data: &Path, overrides: &[&str]) -> BrokerProcess {
        Self::start_on(data, 0, overrides)
    }

    /// `evenkeel dev --port PORT` on a data dir (a fixed port lets clients reconnect after a restart).
    pub fn start_on(data: &Path, port: u16, overrides: &[&str]) -> BrokerProcess {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_evenkeel"));
        cmd.args([
            "dev",
            "--brokers",
            "1",
            "--port",
            &port.to_string(),
            "--data",
        ])
        .arg(data)
        .arg("--no-proxy")
        .args(["--override", "evenkeel.metrics.address=127.0.0.1:0"]);
        for o in overrides {
            cmd.args(["--override", o]);
        }
        let mut child = cmd
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("start evenkeel");
        let stdout = child.stdout.take().unwrap();
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let mut lines = BufReader::new(stdout).lines();
            for line in lines.by_ref() {
                let Ok(line) = line else { return };
                if let Some(rest) = line.split(" ready on ").nth(1) {
                    let addr = rest.split_whitespace().next().unwrap_or("").to_string();
                    let _ = tx.send(addr);
                }
            }
        });
        let bootstrap = rx
            .recv_timeout(Duration::from_secs(60))
            .expect("broker did not print its ready line");
        BrokerProcess {
            child: Some(child),
            bootstrap,
            data: data.to_path_buf(),
            _tmp: None,
        }
    }

    /// SIGTERM and wait: a clean shutdown. Returns the exit status success.
    pub fn stop(&mut self) -> bool {
        let Some(mut child) = self.child.take() else {
            return true;
        };
        unsafe_sigterm(child.id());
        let deadline = std::time::Instant::now() + Duration::from_secs(30);
        loop {
            if let Ok(Some(status)) = child.try_wait() {
                return status.success();
            }
            if std::time::Instant::now() > deadline {
                let _ = child.kill();
                let _ = child.wait();
                return false;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// SIGSTOP (`true`) or SIGCONT (`false`): a broker that stops answering, then resumes.
    pub fn freeze(&self, frozen: bool) {
        if let Some(child) = &self.child {
            let sig = if frozen { "-STOP" } else { "-CONT" };
            let _ = Command::new("kill")
                .args([sig, &child.id().to_string()])
                .status();
        }
    }

    /// SIGKILL: a crash.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    pub fn take_tempdir(&mut self) -> Option<tempfile::TempDir> {
        self._tmp.take()
    }
}

/// `GET path` on a loopback port: (status, the whole HTTP response).
pub fn http_get(port: u16, path: &str) -> (u16, String) {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut body = String::new();
    s.read_to_string(&mut body).unwrap();
    let status = body
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    (status, body)
}

/// The value of the first Prometheus sample whose line starts with `series`.
pub fn metric_value(text: &str, series: &str) -> f64 {
    text.lines()
        .find(|l| l.starts_with(series))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("no series {series}"))
}

/// A loopback port nobody listens on, handed out once per test process, with the port 10,000
/// above it free as well (`evenkeel dev --port P` puts its controller on P + 10000). The kernel's
/// choice (a bind to port 0) can give a port to a node of another test running alongside
/// between the pick and the node's bind, or while the node is stopped, and the node then cannot
/// start on it. These ports come from 10000..20000, and their partners from 20000..30000, both
/// below the kernel's ephemeral range, so no bind to port 0 and no outgoing connection takes one.
/// A count a long test takes from the environment (its rounds or kills; `.ci/run` asks for
/// fewer, `scripts/validate` for more), else `default`. Zero or junk counts as unset.
pub fn env_count(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .filter(|n| *n > 0)
        .unwrap_or(default)
}

pub fn free_port() -> u16 {
    use std::sync::atomic::{AtomicU16, Ordering};
    const FIRST: u16 = 10_000;
    const SPAN: u16 = 10_000;
    static NEXT: AtomicU16 = AtomicU16::new(0);
    let free = |port: u16| std::net::TcpListener::bind(("127.0.0.1", port)).is_ok();
    loop {
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        assert!(
            n < SPAN,
            "no free loopback port left in {FIRST}..{}",
            FIRST + SPAN
        );
        let port = FIRST + n;
        if free(port) && free(port + SPAN) {
            return port;
        }
    }
}

pub fn unsafe_sigterm(pid: u32) {
    let _ = Command::new("kill")
        .arg("-TERM")
        .arg(pid.to_string())
        .status();
}

/// Creates a topic with the rdkafka admin client and checks it worked.
pub async fn create_topic(bootstrap: &str, name: &str, partitions: i32, configs: &[(&str, &str)]) {
    use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
    let admin: AdminClient<rdkafka::client::DefaultClientContext> = rdkafka::ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .create()
        .unwrap();
    let mut t = NewTopic::new(name, partitions, TopicReplication::Fixed(1));
    for (k, v) in configs {
        t = t.set(k, v);
    }
    let r = admin
        .create_topics(&[t], &AdminOptions::new())
        .await
        .unwrap();
    assert!(r[0].is_ok(), "{r:?}");
}

/// Sets `topic`'s whole configuration to `configs` (AlterConfigs with the rdkafka admin client:
/// keys not named go back to their defaults) and checks it worked.
pub async fn alter_topic_configs(bootstrap: &str, topic: &str, configs: &[(&str, &str)]) {
    use rdkafka::admin::{AdminClient, AdminOptions, AlterConfig, ResourceSpecifier};
    let admin: AdminClient<rdkafka::client::DefaultClientContext> = rdkafka::ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .create()
        .unwrap();
    let mut alter = AlterConfig::new(ResourceSpecifier::Topic(topic));
    for (k, v) in configs {
        alter = alter.set(k, v);
    }
    let r = admin
        .alter_configs(&[alter], &AdminOptions::new())
        .await
        .unwrap();
    assert!(r[0].is_ok(), "{r:?}");
}

/// A record read back: (partition, offset, key, value).
pub type ReadRecord = (i32, i64, Option<Vec<u8>>, Vec<u8>);

/// Every record of `topic`'s partitions `0..partitions`, read with librdkafka from the start
/// until `expect` are in or `within` passes.
pub fn read_all(
    bootstrap: &str,
    topic: &str,
    partitions: i32,
    expect: usize,
    within: Duration,
) -> Vec<ReadRecord> {
    use rdkafka::consumer::{BaseConsumer, Consumer};
    use rdkafka::Message;
    let c: BaseConsumer = rdkafka::ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .set("group.id", "test-reader")
        .set("enable.auto.commit", "false")
        .create()
        .unwrap();
    let mut tpl = rdkafka::TopicPartitionList::new();
    for p in 0..partitions {
        tpl.add_partition_offset(topic, p, rdkafka::Offset::Beginning)
            .unwrap();
    }
    c.assign(&tpl).unwrap();
    let mut out = Vec::new();
    let deadline = std::time::Instant::now() + within;
    while out.len() < expect && std::time::Instant::now() < deadline {
        if let Some(Ok(m)) = c.poll(Duration::from_millis(100)) {
            out.push((
                m.partition(),
                m.offset(),
                m.key().map(<[u8]>::to_vec),
                m.payload().unwrap_or_default().to_vec(),
            ));
        }
    }
    out
}

/// A record of a non-transactional, non-idempotent client, as kafka-protocol's encoder takes it.
pub fn plain_record(
    offset: i64,
    timestamp: i64,
    value: bytes::Bytes,
) -> kafka_protocol::records::Record {
    kafka_protocol::records::Record {
        transactional: false,
        control: false,
        delete_horizon: false,
        partition_leader_epoch: -1,
        producer_id: -1,
        producer_epoch: -1,
        timestamp_type: kafka_protocol::records::TimestampType::Creation,
        offset,
        sequence: -1,
        timestamp,
        key: None,
        value: Some(value),
        headers: Default::default(),
    }
}

/// A FutureProducer with Java's partitioner (murmur2) and the given extra properties.
pub fn producer(bootstrap: &str, extra: &[(&str, &str)]) -> rdkafka::producer::FutureProducer {
    let mut c = rdkafka::ClientConfig::new();
    c.set("bootstrap.servers", bootstrap)
        .set("linger.ms", "5")
        .set("partitioner", "murmur2_random");
    for (k, v) in extra {
        c.set(*k, *v);
    }
    c.create().unwrap()
}

impl Drop for BrokerProcess {
    fn drop(&mut self) {
        self.kill();
    }
}

/// A bare Kafka protocol connection for requests no client library sends.
pub mod raw {
    use std::io::{Read, Write};
    use std::net::TcpStream;
    use std::time::Duration;

    use bytes::{Bytes, BytesMut};
    use kafka_protocol::messages::fetch_request::{FetchPartition, FetchTopic};
    use kafka_protocol::messages::{
        ApiKey, FetchRequest, RequestHeader, ResponseHeader, TopicName,
    };
    use kafka_protocol::protocol::{Decodable, Encodable, StrBytes};

    pub fn connect(bootstrap: &str) -> TcpStream {
        let s = TcpStream::connect(bootstrap).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        s
    }

    /// Writes one request frame.
    pub fn send<R: Encodable>(
        s: &mut TcpStream,
        key: ApiKey,
        version: i16,
        correlation_id: i32,
        body: &R,
    ) {
        let header = RequestHeader::default()
            .with_request_api_key(key as i16)
            .with_request_api_version(version)
            .with_correlation_id(correlation_id)
            .with_client_id(Some(StrBytes::from_static_str("raw-test")));
        let hv = key.request_header_version(version);
        let mut buf = BytesMut::new();
        header.encode(&mut buf, hv).unwrap();
        body.encode(&mut buf, version).unwrap();
        let mut frame = (buf.len() as i32).to_be_bytes().to_vec();
        frame.extend_from_slice(&buf);
        s.write_all(&frame).unwrap();
    }

    /// Reads one response frame; `None` when the broker closed the connection.
    pub fn read_frame(s: &mut TcpStream) -> Option<Bytes> {
        let mut size = [0u8; 4];
        if s.read_exact(&mut size).is_err() {
            return None;
        }
        let mut frame = vec![0u8; i32::from_be_bytes(size) as usize];
        s.read_exact(&mut frame).ok()?;
        Some(Bytes::from(frame))
    }

    /// Sends a request and decodes the response body.
    pub fn call<Req: Encodable, Resp: Decodable>(
        s: &mut TcpStream,
        key: ApiKey,
        version: i16,
        body: &Req,
    ) -> Resp {
        send(s, key, version, 7, body);
        let mut frame = read_frame(s).expect("a response");
        let header =
            ResponseHeader::decode(&mut frame, key.response_header_version(version)).unwrap();
        assert_eq!(header.correlation_id, 7);
        Resp::decode(&mut frame, version).unwrap()
    }

    /// True when the broker has closed the connection.
    pub fn is_closed(s: &mut TcpStream) -> bool {
        let mut b = [0u8; 1];
        matches!(s.read(&mut b), Ok(0) | Err(_))
    }

    /// A consumer's Fetch of `topic`'s partition 0 from offset 0 that waits up to
    /// `max_wait_ms` for a byte (it parks while the partition has none).
    pub fn waiting_fetch(topic: &'static str, max_wait_ms: i32) -> FetchRequest {
        FetchRequest::default()
            .with_replica_id((-1).into())
            .with_max_wait_ms(max_wait_ms)
            .with_min_bytes(1)
            .with_max_bytes(1 << 20)
            .with_session_epoch(-1)
            .with_topics(vec![FetchTopic::default()
                .with_topic(TopicName(StrBytes::from_static_str(topic)))
                .with_partitions(vec![FetchPartition::default()
                    .with_partition(0)
                    .with_fetch_offset(0)
                    .with_partition_max_bytes(1 << 20)
                    .with_current_leader_epoch(-1)
                    .with_last_fetched_epoch(-1)
                    .with_log_start_offset(-1)])])
    }
}

/// A loopback TCP proxy in front of a broker that, now and then, swallows a response frame and
/// cuts the connection, so clients must retry requests the broker has already carried out.
pub mod lossy_proxy {
    use std::io::{Read, Write};
    use std::net::{Shutdown, TcpListener, TcpStream};
    use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
    use std::sync::Arc;

    pub struct Proxy {
        pub port: u16,
        pub dropped: Arc<AtomicU64>,
        stop: Arc<AtomicBool>,
    }

    impl Drop for Proxy {
        fn drop(&mut self) {
            self.stop.store(true, Ordering::SeqCst);
        }
    }

    /// Listens on `port` and forwards to `127.0.0.1:target`; every `drop_every`-th response
    /// frame is dropped and both sides of that connection are closed.
    pub fn start(port: u16, target: u16, drop_every: u64) -> Proxy {
        let listener = TcpListener::bind(("127.0.0.1", port)).unwrap();
        let dropped = Arc::new(AtomicU64::new(0));
        let stop = Arc::new(AtomicBool::new(false));
        let counter = Arc::new(AtomicU64::new(0));
        let (d, s) = (dropped.clone(), stop.clone());
        std::thread::spawn(move || {
            for client in listener.incoming() {
                if s.load(Ordering::SeqCst) {
                    return;
                }
                let Ok(client) = client else { continue };
                let Ok(server) = TcpStream::connect(("127.0.0.1", target)) else {
                    continue;
                };
                let (c2, s2) = (client.try_clone().unwrap(), server.try_clone().unwrap());
                // Requests: copied as they come.
                std::thread::spawn(move || {
                    let (mut from, mut to) = (c2, s2);
                    let _ = std::io::copy(&mut from, &mut to);
                    let _ = to.shutdown(Shutdown::Both);
                });
                let (d, counter) = (d.clone(), counter.clone());
                // Responses: frame by frame, some swallowed.
                std::thread::spawn(move || {
                    let (mut from, mut to) = (server, client);
                    loop {
                        let mut size = [0u8; 4];
                        if from.read_exact(&mut size).is_err() {
                            break;
                        }
                        let mut frame = vec![0u8; i32::from_be_bytes(size) as usize];
                        if from.read_exact(&mut frame).is_err() {
                            break;
                        }
                        let n = counter.fetch_add(1, Ordering::SeqCst) + 1;
                        // Keep the first few responses (ApiVersions, Metadata) so clients get going.
                        if n > 5 && n % drop_every == 0 {
                            d.fetch_add(1, Ordering::SeqCst);
                            break;
                        }
                        if to
                            .write_all(&size)
                            .and_then(|_| to.write_all(&frame))
                            .is_err()
                        {
                            break;
                        }
                    }
                    let _ = from.shutdown(Shutdown::Both);
                    let _ = to.shutdown(Shutdown::Both);
                });
            }
        });
        Proxy {
            port,
            dropped,
            stop,
        }
    }
}
