//! `evenkeel perf proxy`: keyed load through the producer proxy's HTTP API from many concurrent
//! clients (REST Proxy v2 and v3 side by side), printed like kafka-producer-perf-test, then every
//! record read back and checked: on its key's partition, in order per key, where its answer said.
//!
//! Each client is one keep-alive HTTP/1.1 connection that sends its requests one after another,
//! so the order of a client's records is defined; the client's keys are its own, so the order of
//! each key is too. With `--rate`, requests are due on a fixed schedule and latency counts from
//! when a request was due (no coordinated omission). Every client connects before the schedule
//! starts and drives its connection in its own task, so the generator adds little to the tail.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use base64::Engine;
use bytes::Bytes;
use futures::TryStreamExt;
use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt, Full, StreamBody};
use hyper::body::Frame;
use hyper::client::conn::http1;
use hyper::{header, Request};
use hyper_util::rt::TokioIo;
use serde_json::Value;

use super::kafka::{self, PerfError, ProduceReport, ReadBack, TopicError};

/// What `evenkeel perf proxy` is told.
#[derive(Debug, Clone, clap::Args)]
pub struct ProxyLoadArgs {
    /// The proxy's address (host:port).
    #[arg(long, default_value = "127.0.0.1:8080")]
    pub proxy: String,
    /// A broker of the cluster behind the proxy, to create the topic and read it back.
    #[arg(long, default_value = "127.0.0.1:9092")]
    pub bootstrap: String,
    /// A new topic (an existing one is refused, so that the read-back sees only this run).
    #[arg(long, default_value = "proxy-load")]
    pub topic: String,
    /// Write to a topic that exists already, with its own layout (--partitions is then read
    /// from it); records from before count as "not of this run" in the read-back.
    #[arg(long)]
    pub existing_topic: bool,
    #[arg(long, default_value_t = 12)]
    pub partitions: i32,
    #[arg(long, default_value_t = 1)]
    pub replication_factor: i32,
    /// Records in all, shared by the clients.
    #[arg(long, default_value_t = 1_000_000)]
    pub num_records: u64,
    /// Concurrent clients: the first half post REST Proxy v2 (binary), the rest v3 streams.
    #[arg(long, default_value_t = 16)]
    pub clients: usize,
    /// Which API the clients use: mixed (half each), v2 or v3.
    #[arg(long, default_value = "mixed", value_parser = ["mixed", "v2", "v3"])]
    pub api: String,
    /// Value bytes per record (at least 24: the value starts with the record's identity).
    #[arg(long, default_value_t = 512)]
    pub record_size: usize,
    /// Keys per client; a client's records go round its keys.
    #[arg(long, default_value_t = 8)]
    pub keys_per_client: usize,
    /// Records per HTTP request.
    #[arg(long, default_value_t = 200)]
    pub batch: usize,
    /// Send no keys (the partitioner places every record; the read-back then checks only
    /// that each record is there once, where it was answered).
    #[arg(long)]
    pub keyless: bool,
    /// Records per second over all clients; -1 for as fast as they are answered.
    #[arg(long, default_value_t = -1.0, allow_hyphen_values = true)]
    pub throughput: f64,
    /// Skip reading the topic back.
    #[arg(long)]
    pub no_verify: bool,
    /// HTTP basic credentials sent with every request, for a proxy with basic auth (its
    /// users' logins on the cluster).
    #[arg(long, value_name = "USER:PASSWORD")]
    pub basic_auth: Option<String>,
}

impl ProxyLoadArgs {
    /// The `Authorization` header of `--basic-auth`.
    fn authorization(&self) -> Option<String> {
        use base64::Engine;
        let credentials = self.basic_auth.as_ref()?;
        let token = base64::engine::general_purpose::STANDARD.encode(credentials);
        Some(format!("Basic {token}"))
    }
}

/// The HTTP API a client speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Api {
    V2,
    V3,
}

impl Api {
    fn name(self) -> &'static str {
        match self {
            Api::V2 => "v2",
            Api::V3 => "v3",
        }
    }
}

/// The figures of one API's clients.
#[derive(Debug, Clone)]
pub struct ApiFigures {
    pub api: &'static str,
    pub clients: usize,
    /// Each record's latency, from its request's due time (or send time) to its answer.
    pub records: ProduceReport,
    /// Each request's latency to its last answer.
    pub request_p99_ms: f64,
}

/// What reading the topic back found.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Verification {
    pub read: u64,
    pub missing: u64,
    pub duplicated: u64,
    pub out_of_order: u64,
    pub wrong_partition: u64,
    pub not_where_answered: u64,
    pub foreign: u64,
}

impl Verification {
    pub fn clean(&self) -> bool {
        *self
            == Verification {
                read: self.read,
                ..Default::default()
            }
    }
}

impl std::fmt::Display for Verification {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "read back: {} records, {} missing, {} duplicated, {} out of order for their key, {} not on their key's partition, {} not at the offset they were answered with, {} not of this run",
            self.read, self.missing, self.duplicated, self.out_of_order, self.wrong_partition,
            self.not_where_answered, self.foreign
        )
    }
}

#[derive(Debug, Clone)]
pub struct ProxyLoadReport {
    /// Each record's latency from when its request was due (with `--throughput`).
    pub total: ProduceReport,
    /// Each record's latency from when its request went out, as kafka-producer-perf-test
    /// measures from its `send()`: the same as `total` when the clients keep to the schedule.
    pub from_send: ProduceReport,
    pub per_api: Vec<ApiFigures>,
    /// Records answered with an error (each with its HTTP status or error code).
    pub errors: Vec<String>,
    pub verification: Option<Verification>,
}

impl std::fmt::Display for ProxyLoadReport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        for a in &self.per_api {
            writeln!(
                f,
                "{} ({} clients): {} request p99 {:.0} ms",
                a.api, a.clients, a.records, a.request_p99_ms
            )?;
        }
        writeln!(f, "{}", self.total)?;
        writeln!(
            f,
            "latency from each request's send: {:.2} ms avg latency, {:.0} ms 99th, {:.0} ms 99.9th.",
            self.from_send.avg_ms, self.from_send.p99_ms, self.from_send.p999_ms
        )?;
        if !self.errors.is_empty() {
            writeln!(
                f,
                "{} records answered with an error, first: {}",
                self.errors.len(),
                self.errors[0]
            )?;
        }
        if let Some(v) = &self.verification {
            writeln!(f, "{v}")?;
        }
        Ok(())
    }
}

/// Who a record is: its client, its key (of that client's) and its place in that key's order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Identity {
    client: usize,
    key: usize,
    seq: u64,
}

/// Value bytes are `c{client:04}k{key:04}s{seq:012}|` then filler.
const IDENTITY_LEN: usize = 24;

fn key_bytes(client: usize, key: usize) -> String {
    format!("client-{client}-key-{key}")
}

fn value_bytes(id: Identity, size: usize) -> Vec<u8> {
    let mut v = format!("c{:04}k{:04}s{:012}|", id.client, id.key, id.seq).into_bytes();
    v.resize(size.max(IDENTITY_LEN), b'x');
    v
}

fn parse_identity(value: &[u8]) -> Option<Identity> {
    let head = std::str::from_utf8(value.get(..IDENTITY_LEN)?).ok()?;
    if !(head.starts_with('c') && &head[5..6] == "k" && &head[10..11] == "s" && head.ends_with('|'))
    {
        return None;
    }
    Some(Identity {
        client: head[1..5].parse().ok()?,
        key: head[6..10].parse().ok()?,
        seq: head[11..23].parse().ok()?,
    })
}

/// The plan one client follows: its records, in the order it sends them.
#[derive(Debug, Clone)]
struct ClientPlan {
    client: usize,
    api: Api,
    records: u64,
    keys: usize,
    keyless: bool,
}

impl ClientPlan {
    /// The `i`-th record this client sends: round its keys.
    fn identity(&self, i: u64) -> Identity {
        Identity {
            client: self.client,
            key: (i % self.keys as u64) as usize,
            seq: i / self.keys as u64,
        }
    }

    fn index_of(&self, id: Identity) -> u64 {
        id.seq * self.keys as u64 + id.key as u64
    }
}

fn plans(o: &ProxyLoadArgs) -> Vec<ClientPlan> {
    let n = o.clients.max(1);
    (0..n)
        .map(|c| ClientPlan {
            client: c,
            api: match o.api.as_str() {
                "v2" => Api::V2,
                "v3" => Api::V3,
                _ if c < n / 2 => Api::V2,
                _ => Api::V3,
            },
            records: o.num_records / n as u64 + u64::from((c as u64) < o.num_records % n as u64),
            keys: o.keys_per_client.max(1),
            keyless: o.keyless,
        })
        .collect()
}

/// What one client saw: each record's answer (partition, offset; -1 when refused) and latency.
struct ClientOutcome {
    plan: ClientPlan,
    answered_at: Vec<(i32, i64)>,
    latencies_us: Vec<u32>,
    /// As `latencies_us`, from when the request went out rather than when it was due.
    sent_latencies_us: Vec<u32>,
    request_latencies_us: Vec<u32>,
    errors: Vec<String>,
}

fn b64(data: &[u8]) -> String {
    base64::engine::general_purpose::STANDARD.encode(data)
}

/// A v2 request body: `{"records":[{"key":…,"value":…},…]}`, binary embedded format.
fn v2_body(plan: &ClientPlan, range: std::ops::Range<u64>, size: usize) -> Bytes {
    let mut s = String::from("{\"records\":[");
    for (n, i) in range.enumerate() {
        let id = plan.identity(i);
        if n > 0 {
            s.push(',');
        }
        if plan.keyless {
            s.push_str("{\"value\":\"");
        } else {
            s.push_str("{\"key\":\"");
            s.push_str(&b64(key_bytes(id.client, id.key).as_bytes()));
            s.push_str("\",\"value\":\"");
        }
        s.push_str(&b64(&value_bytes(id, size)));
        s.push_str("\"}");
    }
    s.push_str("]}");
    Bytes::from(s)
}

/// A v3 record object of type STRING, one line of a stream.
fn v3_record(plan: &ClientPlan, i: u64, size: usize) -> Bytes {
    let id = plan.identity(i);
    let value = value_bytes(id, size);
    let value = String::from_utf8_lossy(&value);
    let line = if plan.keyless {
        format!("{{\"value\":{{\"type\":\"STRING\",\"data\":\"{value}\"}}}}\n")
    } else {
        format!(
            "{{\"key\":{{\"type\":\"STRING\",\"data\":\"{}\"}},\"value\":{{\"type\":\"STRING\",\"data\":\"{value}\"}}}}\n",
            key_bytes(id.client, id.key),
        )
    };
    Bytes::from(line)
}

/// Connections opened at the same time before a run (the listen backlog is finite).
const CONNECTS_AT_ONCE: usize = 256;

type Body = BoxBody<Bytes, std::convert::Infallible>;

struct Connection {
    sender: http1::SendRequest<Body>,
    addr: String,
    /// Sent with every request (`--basic-auth`).
    authorization: Option<String>,
}

/// What keeps a connection going: hyper's half that reads and writes the socket. A client polls
/// it in its own task (see `run_client`), so a request and its answer cross no task boundary.
type Driver = http1::Connection<TokioIo<tokio::net::TcpStream>, Body>;

impl Connection {
    async fn open(
        addr: &str,
        authorization: Option<String>,
    ) -> Result<(Connection, Driver), PerfError> {
        let stream = tokio::net::TcpStream::connect(addr)
            .await
            .map_err(|e| setup(format!("cannot connect to the proxy at {addr}: {e}")))?;
        let _ = stream.set_nodelay(true);
        let (sender, driver) = http1::handshake(TokioIo::new(stream))
            .await
            .map_err(|e| setup(format!("HTTP handshake with {addr}: {e}")))?;
        let conn = Connection {
            sender,
            addr: addr.to_string(),
            authorization,
        };
        Ok((conn, driver))
    }

    /// Opens a connection whose driver runs as a task of its own (for a one-off request).
    async fn open_detached(
        addr: &str,
        authorization: Option<String>,
    ) -> Result<Connection, PerfError> {
        let (conn, driver) = Connection::open(addr, authorization).await?;
        tokio::spawn(drive(driver));
        Ok(conn)
    }

    async fn post(
        &mut self,
        path: &str,
        content_type: &str,
        body: Body,
    ) -> Result<hyper::Response<hyper::body::Incoming>, PerfError> {
        let mut req = Request::post(path)
            .header(header::HOST, &self.addr)
            .header(header::CONTENT_TYPE, content_type);
        if let Some(a) = &self.authorization {
            req = req.header(header::AUTHORIZATION, a);
        }
        let req = req.body(body).map_err(|e| setup(e.to_string()))?;
        self.sender
            .ready()
            .await
            .map_err(|e| setup(format!("proxy connection: {e}")))?;
        self.sender
            .send_request(req)
            .await
            .map_err(|e| setup(format!("proxy request: {e}")))
    }
}

/// Runs a connection until it closes.
async fn drive(driver: Driver) {
    if let Err(e) = driver.await {
        tracing::debug!(error = %e, "proxy connection ended");
    }
}

fn setup(e: impl std::fmt::Display) -> PerfError {
    PerfError::Setup(e.to_string())
}

fn micros(d: Duration) -> u32 {
    d.as_micros().min(u32::MAX as u128) as u32
}

/// One request's records, when it was due, and when it went out.
struct Batch {
    range: std::ops::Range<u64>,
    due: Instant,
    sent: Instant,
}

impl Batch {
    /// A record of this request was answered now.
    fn answered(&self, out: &mut ClientOutcome) {
        out.latencies_us.push(micros(self.due.elapsed()));
        out.sent_latencies_us.push(micros(self.sent.elapsed()));
    }
}

/// Runs one client to the end of its plan, polling its connection in the same task.
async fn run_client(
    o: Arc<ProxyLoadArgs>,
    plan: ClientPlan,
    (mut conn, driver): (Connection, Driver),
    cluster_id: String,
    start: Instant,
    answered: Arc<AtomicU64>,
) -> Result<ClientOutcome, PerfError> {
    let proxy = o.proxy.clone();
    // Biased to the client: an answer and a close seen in the same poll report the answer.
    tokio::select! {
        biased;
        r = client_requests(o, plan, &mut conn, cluster_id, start, answered) => r,
        () = drive(driver) => Err(setup(format!("the proxy at {proxy} closed the connection"))),
    }
}

/// Sends one client's requests, each when it is due, and records their answers.
async fn client_requests(
    o: Arc<ProxyLoadArgs>,
    plan: ClientPlan,
    conn: &mut Connection,
    cluster_id: String,
    start: Instant,
    answered: Arc<AtomicU64>,
) -> Result<ClientOutcome, PerfError> {
    let mut out = ClientOutcome {
        answered_at: vec![(-1, -1); plan.records as usize],
        latencies_us: Vec::with_capacity(plan.records as usize),
        sent_latencies_us: Vec::with_capacity(plan.records as usize),
        request_latencies_us: Vec::new(),
        errors: Vec::new(),
        plan: plan.clone(),
    };
    let batch = o.batch.max(1) as u64;
    let clients = o.clients.max(1) as f64;
    let mut first = 0u64;
    let mut n = 0u32;
    while first < plan.records {
        // The clients' requests interleave: request j of client c is the (j × clients + c)-th
        // of the whole schedule, so the load is even over time, not in bursts.
        let due = if o.throughput > 0.0 {
            let slot = first as f64 * clients + (plan.client as u64 * batch) as f64;
            let at = start + Duration::from_secs_f64(slot / o.throughput);
            tokio::time::sleep_until(at.into()).await;
            at
        } else {
            Instant::now()
        };
        let mut req = Batch {
            range: first..(first + batch).min(plan.records),
            due,
            sent: due,
        };
        first = req.range.end;
        let done = match plan.api {
            Api::V2 => post_v2(&o, conn, &mut req, &mut out).await?,
            Api::V3 => post_v3(&o, conn, &cluster_id, &mut req, &mut out).await?,
        };
        out.request_latencies_us.push(micros(due.elapsed()));
        answered.fetch_add(done, Ordering::Relaxed);
        n += 1;
    }
    tracing::debug!(client = plan.client, requests = n, "client done");
    Ok(out)
}

/// Posts one v2 request and records its answers; returns how many records it answered.
async fn post_v2(
    o: &ProxyLoadArgs,
    conn: &mut Connection,
    req: &mut Batch,
    out: &mut ClientOutcome,
) -> Result<u64, PerfError> {
    let body = v2_body(&out.plan, req.range.clone(), o.record_size);
    req.sent = Instant::now();
    let resp = conn
        .post(
            &format!("/topics/{}", o.topic),
            "application/vnd.kafka.binary.v2+json",
            Full::new(body).boxed(),
        )
        .await?;
    let status = resp.status();
    let bytes = resp
        .into_body()
        .collect()
        .await
        .map_err(|e| setup(format!("reading a v2 answer: {e}")))?
        .to_bytes();
    let doc: Value = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
    let offsets = doc.get("offsets").and_then(Value::as_array);
    for (n, i) in req.range.clone().enumerate() {
        let answer = offsets.and_then(|a| a.get(n));
        match answer.and_then(written_at_v2) {
            Some(at) if status.is_success() => {
                out.answered_at[i as usize] = at;
                req.answered(out);
            }
            _ => out.errors.push(format!(
                "v2 HTTP {status}: {}",
                answer.map_or_else(
                    || String::from_utf8_lossy(&bytes).into_owned(),
                    Value::to_string
                )
            )),
        }
    }
    Ok(req.range.end - req.range.start)
}

fn written_at_v2(answer: &Value) -> Option<(i32, i64)> {
    if answer.get("error_code").is_some_and(|c| !c.is_null()) {
        return None;
    }
    Some((
        answer.get("partition")?.as_i64()? as i32,
        answer.get("offset")?.as_i64()?,
    ))
}

/// Posts one v3 stream (chunked, ten records a chunk) and records each report as it arrives.
async fn post_v3(
    o: &ProxyLoadArgs,
    conn: &mut Connection,
    cluster_id: &str,
    req: &mut Batch,
    out: &mut ClientOutcome,
) -> Result<u64, PerfError> {
    let chunks: Vec<Result<Frame<Bytes>, std::convert::Infallible>> = req
        .range
        .clone()
        .collect::<Vec<_>>()
        .chunks(10)
        .map(|ids| {
            let mut chunk = Vec::new();
            for i in ids {
                chunk.extend_from_slice(&v3_record(&out.plan, *i, o.record_size));
            }
            Ok(Frame::data(Bytes::from(chunk)))
        })
        .collect();
    let body = StreamBody::new(futures::stream::iter(chunks)).boxed();
    let path = format!("/v3/clusters/{cluster_id}/topics/{}/records", o.topic);
    req.sent = Instant::now();
    let resp = conn.post(&path, "application/json", body).await?;
    let status = resp.status();
    let mut body = resp.into_body();
    let mut pending = Vec::new();
    let mut next = req.range.start;
    while let Some(frame) = body.frame().await {
        let frame = frame.map_err(|e| setup(format!("reading a v3 stream: {e}")))?;
        let Ok(data) = frame.into_data() else {
            continue;
        };
        pending.extend_from_slice(&data);
        while let Some(nl) = pending.iter().position(|b| *b == b'\n') {
            let line: Vec<u8> = pending.drain(..=nl).collect();
            if next < req.range.end {
                v3_report(&line, next, status, req, out);
            }
            next += 1;
        }
    }
    for _ in next..req.range.end {
        out.errors.push(format!(
            "v3 HTTP {status}: the stream ended before this record's report"
        ));
    }
    Ok(req.range.end - req.range.start)
}

fn v3_report(line: &[u8], i: u64, status: hyper::StatusCode, req: &Batch, out: &mut ClientOutcome) {
    let doc: Value = serde_json::from_slice(line).unwrap_or(Value::Null);
    let ok = doc.get("error_code").and_then(Value::as_i64) == Some(200);
    let at = doc
        .get("partition_id")
        .and_then(Value::as_i64)
        .zip(doc.get("offset").and_then(Value::as_i64));
    match at {
        Some((p, off)) if ok => {
            out.answered_at[i as usize] = (p as i32, off);
            req.answered(out);
        }
        _ => out.errors.push(format!(
            "v3 HTTP {status}: {}",
            String::from_utf8_lossy(line).trim()
        )),
    }
}

/// The cluster id a v3 client puts in its paths, from `GET /v3/clusters`.
async fn cluster_id(addr: &str, authorization: Option<String>) -> Result<String, PerfError> {
    let mut conn = Connection::open_detached(addr, authorization).await?;
    let mut req = Request::get("/v3/clusters").header(header::HOST, addr);
    if let Some(a) = &conn.authorization {
        req = req.header(header::AUTHORIZATION, a);
    }
    let req = req.body(Full::new(Bytes::new()).boxed()).map_err(setup)?;
    conn.sender.ready().await.map_err(setup)?;
    let resp = conn.sender.send_request(req).await.map_err(setup)?;
    let bytes = resp.into_body().collect().await.map_err(setup)?.to_bytes();
    let doc: Value = serde_json::from_slice(&bytes).map_err(setup)?;
    doc.pointer("/data/0/cluster_id")
        .and_then(Value::as_str)
        .map(str::to_string)
        .ok_or_else(|| setup(format!("GET /v3/clusters gave no cluster id: {doc}")))
}

/// Runs the load and, unless told not to, reads the topic back and checks every record.
pub async fn run(
    o: ProxyLoadArgs,
    progress: &mut (dyn FnMut(String) + Send),
) -> Result<ProxyLoadReport, PerfError> {
    if o.record_size < IDENTITY_LEN {
        return Err(setup(format!(
            "--record-size must be at least {IDENTITY_LEN} (the value carries the record's identity)"
        )));
    }
    let mut o = o;
    if o.existing_topic {
        o.partitions = kafka::partition_count(&o.bootstrap, &o.topic)?;
    } else {
        new_topic(&o).await?;
    }
    let id = cluster_id(&o.proxy, o.authorization()).await?;
    let o = Arc::new(o);
    let answered = Arc::new(AtomicU64::new(0));
    // Every client connects first, so that connecting is not counted as latency.
    let plans = plans(&o);
    let connects = futures::stream::iter(
        plans
            .iter()
            .map(|_| Connection::open(&o.proxy, o.authorization())),
    );
    let conns: Vec<(Connection, Driver)> = futures::StreamExt::buffered(connects, CONNECTS_AT_ONCE)
        .try_collect()
        .await?;
    let start = Instant::now()
        + if o.throughput > 0.0 {
            Duration::from_millis(100)
        } else {
            Duration::ZERO
        };
    let tasks: Vec<_> = plans
        .into_iter()
        .zip(conns)
        .map(|(p, c)| {
            tokio::spawn(run_client(
                o.clone(),
                p,
                c,
                id.clone(),
                start,
                answered.clone(),
            ))
        })
        .collect();
    let mut outcomes = Vec::new();
    let mut tick = tokio::time::interval(Duration::from_secs(5));
    tick.tick().await;
    let mut joined = futures::future::join_all(tasks);
    let results = loop {
        tokio::select! {
            r = &mut joined => break r,
            _ = tick.tick() => {
                let n = answered.load(Ordering::Relaxed);
                let secs = Instant::now().saturating_duration_since(start).as_secs_f64().max(1e-3);
                progress(format!("{n} records answered, {:.1} records/sec ({:.2} MB/sec).",
                    n as f64 / secs, n as f64 * o.record_size as f64 / 1048576.0 / secs));
            }
        }
    };
    let seconds = Instant::now()
        .saturating_duration_since(start)
        .as_secs_f64();
    for r in results {
        outcomes.push(r.map_err(|e| setup(format!("a client task failed: {e}")))??);
    }
    let mut report = summarize(&o, &outcomes, seconds);
    if !o.no_verify {
        progress(format!("reading {} back", o.topic));
        let o2 = o.clone();
        report.verification = Some(
            tokio::task::spawn_blocking(move || verify(&o2, &outcomes))
                .await
                .map_err(setup)??,
        );
    }
    Ok(report)
}

async fn new_topic(o: &ProxyLoadArgs) -> Result<(), PerfError> {
    match kafka::create_topic(&o.bootstrap, &o.topic, o.partitions, o.replication_factor).await {
        Ok(()) => Ok(()),
        Err(TopicError::Exists) => Err(setup(format!(
            "topic {} exists already; name a new one (--topic) so the read-back sees only this run, or pass --existing-topic",
            o.topic
        ))),
        Err(TopicError::Other(e)) => Err(e),
    }
}

fn summarize(o: &ProxyLoadArgs, outcomes: &[ClientOutcome], seconds: f64) -> ProxyLoadReport {
    let figures = |api: Option<Api>| {
        let mine: Vec<&ClientOutcome> = outcomes
            .iter()
            .filter(|c| api.is_none_or(|a| c.plan.api == a))
            .collect();
        let lat: Vec<u32> = mine.iter().flat_map(|c| c.latencies_us.clone()).collect();
        let req: Vec<u32> = mine
            .iter()
            .flat_map(|c| c.request_latencies_us.clone())
            .collect();
        let failed = mine.iter().map(|c| c.errors.len() as u64).sum();
        let r = ProduceReport::from_latencies(lat, failed, seconds, o.record_size);
        (
            mine.len(),
            r,
            ProduceReport::from_latencies(req, 0, seconds, 0).p99_ms,
        )
    };
    let per_api = [Api::V2, Api::V3]
        .into_iter()
        .filter_map(|api| {
            let (clients, records, request_p99_ms) = figures(Some(api));
            (clients > 0).then_some(ApiFigures {
                api: api.name(),
                clients,
                records,
                request_p99_ms,
            })
        })
        .collect();
    let sent: Vec<u32> = outcomes
        .iter()
        .flat_map(|c| c.sent_latencies_us.clone())
        .collect();
    ProxyLoadReport {
        from_send: ProduceReport::from_latencies(sent, 0, seconds, o.record_size),
        total: figures(None).1,
        per_api,
        errors: outcomes.iter().flat_map(|c| c.errors.clone()).collect(),
        verification: None,
    }
}

/// Reads the topic from the start and checks each record against what its client sent and
/// what the proxy answered.
fn verify(o: &ProxyLoadArgs, outcomes: &[ClientOutcome]) -> Result<Verification, PerfError> {
    let expected: u64 = outcomes.iter().map(|c| c.plan.records).sum();
    let mut seen: Vec<Vec<bool>> = outcomes
        .iter()
        .map(|c| vec![false; c.plan.records as usize])
        .collect();
    let mut next_seq: Vec<Vec<u64>> = outcomes.iter().map(|c| vec![0; c.plan.keys]).collect();
    let mut v = Verification::default();
    let opts = kafka::ConsumeOptions {
        bootstrap: o.bootstrap.clone(),
        topic: o.topic.clone(),
        messages: expected,
        timeout: Duration::from_secs(30),
        props: vec![],
    };
    let (read, _) = kafka::consume_each(&opts, &mut |r| {
        check_record(o, outcomes, &r, &mut seen, &mut next_seq, &mut v)
    })?;
    v.read = read;
    v.missing = seen.iter().flatten().filter(|s| !**s).count() as u64;
    Ok(v)
}

fn check_record(
    o: &ProxyLoadArgs,
    outcomes: &[ClientOutcome],
    r: &ReadBack<'_>,
    seen: &mut [Vec<bool>],
    next_seq: &mut [Vec<u64>],
    v: &mut Verification,
) {
    let Some(id) = parse_identity(r.value).filter(|id| {
        outcomes
            .get(id.client)
            .is_some_and(|c| id.key < c.plan.keys && c.plan.index_of(*id) < c.plan.records)
    }) else {
        v.foreign += 1;
        return;
    };
    let c = &outcomes[id.client];
    let i = c.plan.index_of(id) as usize;
    if std::mem::replace(&mut seen[id.client][i], true) {
        v.duplicated += 1;
        return;
    }
    if c.answered_at[i] != (r.partition, r.offset) {
        v.not_where_answered += 1;
    }
    if o.keyless {
        return;
    }
    let key = key_bytes(id.client, id.key);
    if r.key != Some(key.as_bytes())
        || r.partition != crate::protocol::murmur2::partition_for_key(key.as_bytes(), o.partitions)
    {
        v.wrong_partition += 1;
    }
    let want = &mut next_seq[id.client][id.key];
    if id.seq != *want {
        v.out_of_order += 1;
    }
    *want = (*want).max(id.seq + 1);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_value_carries_its_identity_and_is_padded_to_size() {
        let id = Identity {
            client: 15,
            key: 7,
            seq: 62_499,
        };
        let v = value_bytes(id, 512);
        assert_eq!(v.len(), 512);
        assert_eq!(parse_identity(&v), Some(id));
        assert_eq!(parse_identity(b"c0001k0002s00000000000x|"), None);
        assert_eq!(parse_identity(b"short"), None);
    }

    fn args(records: u64, clients: usize) -> ProxyLoadArgs {
        ProxyLoadArgs {
            proxy: String::new(),
            bootstrap: String::new(),
            topic: "t".into(),
            existing_topic: false,
            partitions: 12,
            replication_factor: 1,
            num_records: records,
            clients,
            api: "mixed".into(),
            record_size: 64,
            keys_per_client: 8,
            batch: 100,
            keyless: false,
            throughput: -1.0,
            no_verify: false,
            basic_auth: None,
        }
    }

    #[test]
    fn basic_auth_becomes_the_authorization_header() {
        assert_eq!(args(1, 1).authorization(), None);
        let mut a = args(1, 1);
        a.basic_auth = Some("alice:s3cret:x".into());
        // base64("alice:s3cret:x"): the password may hold colons, only the first splits.
        assert_eq!(
            a.authorization().as_deref(),
            Some("Basic YWxpY2U6czNjcmV0Ong=")
        );
    }

    #[test]
    fn the_records_are_shared_out_and_half_the_clients_speak_v3() {
        let p = plans(&args(1_000_003, 16));
        assert_eq!(p.iter().map(|c| c.records).sum::<u64>(), 1_000_003);
        assert_eq!(p[0].records, 62_501);
        assert_eq!(p[15].records, 62_500);
        assert_eq!(p.iter().filter(|c| c.api == Api::V3).count(), 8);
        let c = &p[3];
        for i in [0, 1, 7, 8, 62_499] {
            assert_eq!(c.index_of(c.identity(i)), i);
        }
    }

    #[test]
    fn a_v2_body_is_the_binary_embedded_format() {
        let plan = plans(&args(10, 1)).remove(0);
        let body: Value = serde_json::from_slice(&v2_body(&plan, 8..10, 40)).unwrap();
        let recs = body["records"].as_array().unwrap();
        assert_eq!(recs.len(), 2);
        let key = base64::engine::general_purpose::STANDARD
            .decode(recs[1]["key"].as_str().unwrap())
            .unwrap();
        assert_eq!(key, b"client-0-key-1");
        let value = base64::engine::general_purpose::STANDARD
            .decode(recs[1]["value"].as_str().unwrap())
            .unwrap();
        assert_eq!(
            parse_identity(&value),
            Some(Identity {
                client: 0,
                key: 1,
                seq: 1
            })
        );
        let line: Value = serde_json::from_slice(&v3_record(&plan, 9, 40)).unwrap();
        assert_eq!(line["key"]["data"], "client-0-key-1");
    }

    #[test]
    fn the_check_counts_each_kind_of_fault() {
        let o = args(16, 1);
        let plan = plans(&o).remove(0);
        let p_of =
            |k: usize| crate::protocol::murmur2::partition_for_key(key_bytes(0, k).as_bytes(), 12);
        let mut outcome = ClientOutcome {
            answered_at: (0..16).map(|i| (p_of(i as usize % 8), i as i64)).collect(),
            latencies_us: vec![],
            sent_latencies_us: vec![],
            request_latencies_us: vec![],
            errors: vec![],
            plan: plan.clone(),
        };
        outcome.answered_at[3] = (p_of(3), 99);
        let outcomes = [outcome];
        let (mut seen, mut next) = (vec![vec![false; 16]], vec![vec![0u64; 8]]);
        let mut v = Verification::default();
        let mut feed = |i: u64, partition: i32, offset: i64, v: &mut Verification| {
            let id = plan.identity(i);
            let key = key_bytes(0, id.key);
            let value = value_bytes(id, 64);
            let r = ReadBack {
                partition,
                offset,
                key: Some(key.as_bytes()),
                value: &value,
            };
            check_record(&o, &outcomes, &r, &mut seen, &mut next, v);
        };
        // Key 1's second record (i = 9) read before its first (i = 1).
        feed(9, p_of(1), 9, &mut v);
        feed(1, p_of(1), 1, &mut v);
        feed(0, p_of(0), 0, &mut v);
        feed(0, p_of(0), 0, &mut v);
        feed(2, (p_of(2) + 1) % 12, 2, &mut v);
        feed(3, p_of(3), 3, &mut v);
        assert_eq!(
            v,
            Verification {
                read: 0,
                missing: 0,
                duplicated: 1,
                out_of_order: 2,
                wrong_partition: 1,
                not_where_answered: 2,
                foreign: 0,
            }
        );
    }
}
