//! Reading the brokers: the layout (leaders, replicas, ISR) through our admin client, and each
//! broker's `/metrics` page over HTTP, parsed from Prometheus's text format into samples.

use std::collections::BTreeMap;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::client::admin::AdminClient;
use crate::client::ClientError;

/// The largest `/metrics` page read (a broker with many partitions exports a few MB).
const MAX_PAGE_BYTES: usize = 64 * 1024 * 1024;

#[derive(Debug, thiserror::Error)]
pub enum ScrapeError {
    #[error("{url}: {reason}")]
    Http { url: String, reason: String },
    #[error("{url}: line {line} is not a Prometheus sample: {text:?}")]
    Garbage {
        url: String,
        line: usize,
        text: String,
    },
    #[error("{0}")]
    Client(#[from] ClientError),
}

/// One sample of a metrics page: `name{labels} value`.
#[derive(Debug, Clone, PartialEq)]
pub struct Sample {
    pub name: String,
    pub labels: BTreeMap<String, String>,
    pub value: f64,
}

/// A parsed `/metrics` page.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Page {
    pub samples: Vec<Sample>,
}

impl Page {
    /// The value of the first sample named `name` whose labels include every pair of `labels`.
    pub fn value(&self, name: &str, labels: &[(&str, &str)]) -> Option<f64> {
        self.matching(name, labels).next().map(|s| s.value)
    }

    /// Every sample named `name` whose labels include every pair of `labels`.
    pub fn matching<'a>(
        &'a self,
        name: &'a str,
        labels: &'a [(&'a str, &'a str)],
    ) -> impl Iterator<Item = &'a Sample> + 'a {
        self.samples.iter().filter(move |s| {
            s.name == name
                && labels
                    .iter()
                    .all(|(k, v)| s.labels.get(*k).map(String::as_str) == Some(*v))
        })
    }
}

/// One partition as Metadata shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PartitionState {
    pub topic: String,
    pub partition: i32,
    pub leader: i32,
    pub replicas: Vec<i32>,
    pub isr: Vec<i32>,
}

/// The cluster's layout at one moment: live brokers and every partition of every topic
/// (internal ones included: their leaders weigh on a broker like any other).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Layout {
    /// Broker id → `host:port` of its Kafka listener.
    pub brokers: BTreeMap<i32, String>,
    pub controller: i32,
    pub partitions: Vec<PartitionState>,
}

impl Layout {
    /// Why the layout cannot be acted on, if it cannot: a partition without a leader, or one
    /// whose leader is not a live broker (the metadata is mid-change or a broker is gone).
    pub fn incomplete(&self) -> Option<String> {
        self.partitions.iter().find_map(|p| {
            if p.leader < 0 {
                Some(format!("{}-{} has no leader", p.topic, p.partition))
            } else if !self.brokers.contains_key(&p.leader) {
                Some(format!(
                    "{}-{} is led by broker {}, which is not live",
                    p.topic, p.partition, p.leader
                ))
            } else {
                None
            }
        })
    }

    /// Partitions whose ISR is smaller than their replica set.
    pub fn under_replicated(&self) -> usize {
        self.partitions
            .iter()
            .filter(|p| p.isr.len() < p.replicas.len())
            .count()
    }

    /// Why the cluster is under-replicated, naming the first such partition, the replicas out
    /// of its ISR, and those whose own metrics (`pages`, by broker) say their fetches have
    /// stalled (`evenkeel_replica_fetch_stalled`). `None` when every ISR is full.
    pub fn under_replicated_reason(&self, pages: &BTreeMap<i32, Page>) -> Option<String> {
        let count = self.under_replicated();
        let p = self
            .partitions
            .iter()
            .find(|p| p.isr.len() < p.replicas.len())?;
        let partition = p.partition.to_string();
        let labels = [
            ("topic", p.topic.as_str()),
            ("partition", partition.as_str()),
        ];
        let out: Vec<String> = p
            .replicas
            .iter()
            .filter(|r| !p.isr.contains(r))
            .map(|r| {
                let stalled = pages
                    .get(r)
                    .and_then(|page| page.value("evenkeel_replica_fetch_stalled", &labels))
                    .is_some_and(|v| v > 0.0);
                if stalled {
                    format!("{r} (its fetches make no progress)")
                } else {
                    r.to_string()
                }
            })
            .collect();
        Some(format!(
            "{count} partition(s) under-replicated; first {}-{}: ISR {:?} of replicas {:?}, out of it: {}",
            p.topic,
            p.partition,
            p.isr,
            p.replicas,
            out.join(", ")
        ))
    }

    /// Leaders per live broker (zero for a broker that leads nothing).
    pub fn leader_counts(&self) -> BTreeMap<i32, usize> {
        let mut counts: BTreeMap<i32, usize> = self.brokers.keys().map(|b| (*b, 0)).collect();
        for p in &self.partitions {
            if let Some(c) = counts.get_mut(&p.leader) {
                *c += 1;
            }
        }
        counts
    }
}

/// Reads the layout: DescribeCluster for brokers and controller, Metadata for every topic.
pub async fn layout(admin: &AdminClient) -> Result<Layout, ScrapeError> {
    let cluster = admin.describe_cluster().await?;
    let topics = admin.describe_topics(None).await?;
    let brokers = cluster
        .brokers
        .iter()
        .map(|b| (b.id, format!("{}:{}", b.host, b.port)))
        .collect();
    let partitions = topics
        .into_iter()
        .flat_map(|t| {
            let name = t.name;
            t.partitions.into_iter().map(move |p| PartitionState {
                topic: name.clone(),
                partition: p.partition,
                leader: p.leader,
                replicas: p.replicas,
                isr: p.isr,
            })
        })
        .collect();
    Ok(Layout {
        brokers,
        controller: cluster.controller_id,
        partitions,
    })
}

/// Fetches and parses one `/metrics` page (`http://host:port/path`).
pub async fn page(url: &str, timeout: Duration) -> Result<Page, ScrapeError> {
    let body = tokio::time::timeout(timeout, get(url))
        .await
        .map_err(|_| http_err(url, format!("no answer within {timeout:?}")))??;
    parse(url, &body)
}

fn http_err(url: &str, reason: impl Into<String>) -> ScrapeError {
    ScrapeError::Http {
        url: url.to_string(),
        reason: reason.into(),
    }
}

/// A plain HTTP/1.1 GET (the brokers' metrics endpoints speak nothing fancier), body as text.
async fn get(url: &str) -> Result<String, ScrapeError> {
    let rest = url
        .strip_prefix("http://")
        .ok_or_else(|| http_err(url, "only http:// URLs are supported"))?;
    let (authority, path) = match rest.find('/') {
        Some(i) => (&rest[..i], &rest[i..]),
        None => (rest, "/metrics"),
    };
    let mut stream = tokio::net::TcpStream::connect(authority)
        .await
        .map_err(|e| http_err(url, e.to_string()))?;
    let request =
        format!("GET {path} HTTP/1.1\r\nHost: {authority}\r\nAccept: text/plain\r\nConnection: close\r\n\r\n");
    stream
        .write_all(request.as_bytes())
        .await
        .map_err(|e| http_err(url, e.to_string()))?;
    let mut raw = Vec::new();
    (&mut stream)
        .take(MAX_PAGE_BYTES as u64 + 1)
        .read_to_end(&mut raw)
        .await
        .map_err(|e| http_err(url, e.to_string()))?;
    if raw.len() > MAX_PAGE_BYTES {
        return Err(http_err(url, "the page is larger than 64 MiB"));
    }
    let text = String::from_utf8(raw).map_err(|_| http_err(url, "the page is not UTF-8"))?;
    response_body(url, &text)
}

/// The body of an HTTP response, checking its status (chunked bodies are de-chunked).
fn response_body(url: &str, text: &str) -> Result<String, ScrapeError> {
    let (head, body) = text
        .split_once("\r\n\r\n")
        .ok_or_else(|| http_err(url, "not an HTTP response"))?;
    let status = head
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse::<u16>().ok())
        .ok_or_else(|| http_err(url, "not an HTTP response"))?;
    if status != 200 {
        return Err(http_err(url, format!("HTTP status {status}")));
    }
    let chunked = head.lines().any(|l| {
        let l = l.to_ascii_lowercase();
        l.starts_with("transfer-encoding:") && l.contains("chunked")
    });
    if chunked {
        dechunk(body).ok_or_else(|| http_err(url, "a broken chunked body"))
    } else {
        Ok(body.to_string())
    }
}

fn dechunk(mut body: &str) -> Option<String> {
    let mut out = String::new();
    loop {
        let (size, rest) = body.split_once("\r\n")?;
        let size = usize::from_str_radix(size.split(';').next()?.trim(), 16).ok()?;
        if size == 0 {
            return Some(out);
        }
        out.push_str(rest.get(..size)?);
        body = rest.get(size..)?.strip_prefix("\r\n")?;
    }
}

/// Parses Prometheus's text exposition format. Comments and blank lines are skipped; any other
/// line that is not `name[{labels}] value [timestamp]` makes the whole page garbage.
pub fn parse(url: &str, text: &str) -> Result<Page, ScrapeError> {
    let mut samples = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        samples.push(parse_line(line).ok_or_else(|| ScrapeError::Garbage {
            url: url.to_string(),
            line: i + 1,
            text: line.chars().take(120).collect(),
        })?);
    }
    Ok(Page { samples })
}

fn parse_line(line: &str) -> Option<Sample> {
    let name_end = line
        .find(|c: char| c == '{' || c.is_whitespace())
        .unwrap_or(line.len());
    let name = &line[..name_end];
    if name.is_empty()
        || !name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == ':')
    {
        return None;
    }
    let mut rest = &line[name_end..];
    let mut labels = BTreeMap::new();
    if let Some(after) = rest.strip_prefix('{') {
        rest = parse_labels(after, &mut labels)?;
    }
    let mut fields = rest.split_whitespace();
    let value = parse_value(fields.next()?)?;
    if fields.nth(1).is_some() {
        return None;
    }
    Some(Sample {
        name: name.to_string(),
        labels,
        value,
    })
}

/// Parses `k="v",…}` and returns what follows the closing brace.
fn parse_labels<'a>(mut s: &'a str, labels: &mut BTreeMap<String, String>) -> Option<&'a str> {
    loop {
        s = s.trim_start();
        if let Some(rest) = s.strip_prefix('}') {
            return Some(rest);
        }
        let eq = s.find('=')?;
        let key = s[..eq].trim();
        if key.is_empty() {
            return None;
        }
        let (value, rest) = quoted(s[eq + 1..].trim_start())?;
        labels.insert(key.to_string(), value);
        s = rest.trim_start();
        s = s.strip_prefix(',').unwrap_or(s);
    }
}

/// A `"…"` label value with Prometheus's escapes, and what follows it.
fn quoted(s: &str) -> Option<(String, &str)> {
    let mut chars = s.strip_prefix('"')?.char_indices();
    let mut out = String::new();
    while let Some((i, c)) = chars.next() {
        match c {
            '"' => return Some((out, &s[i + 2..])),
            '\\' => match chars.next()?.1 {
                'n' => out.push('\n'),
                other => out.push(other),
            },
            c => out.push(c),
        }
    }
    None
}

fn parse_value(s: &str) -> Option<f64> {
    match s {
        "+Inf" | "Inf" => Some(f64::INFINITY),
        "-Inf" => Some(f64::NEG_INFINITY),
        "NaN" => Some(f64::NAN),
        _ => s.parse().ok(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const PAGE: &str =
        "# HELP kafka_server_replicamanager_leadercount Partitions this broker leads\n\
# TYPE kafka_server_replicamanager_leadercount gauge\n\
kafka_server_replicamanager_leadercount 42\n\
kafka_network_requestmetrics_localtimems_sum{request=\"FetchFollower\"} 12.5\n\
kafka_network_requestmetrics_localtimems_bucket{request=\"FetchFollower\",le=\"+Inf\"} 7\n\
weird_label{path=\"a\\\"b\\\\c\",x=\"\"} 1e3 1700000000000\n\
\n";

    #[test]
    fn a_metrics_page_parses_into_samples() {
        let page = parse("u", PAGE).unwrap();
        assert_eq!(page.samples.len(), 4);
        assert_eq!(
            page.value("kafka_server_replicamanager_leadercount", &[]),
            Some(42.0)
        );
        assert_eq!(
            page.value(
                "kafka_network_requestmetrics_localtimems_sum",
                &[("request", "FetchFollower")]
            ),
            Some(12.5)
        );
        assert_eq!(
            page.value(
                "kafka_network_requestmetrics_localtimems_bucket",
                &[("le", "+Inf")]
            ),
            Some(7.0)
        );
        let weird = &page.samples[3];
        assert_eq!(weird.labels["path"], "a\"b\\c");
        assert_eq!(weird.labels["x"], "");
        assert_eq!(weird.value, 1000.0);
        assert_eq!(
            page.value(
                "kafka_network_requestmetrics_localtimems_sum",
                &[("request", "Produce")]
            ),
            None
        );
    }

    #[test]
    fn a_page_that_is_not_prometheus_text_is_garbage() {
        for bad in [
            "<html><body>Not Found</body></html>",
            "metric{a=\"b\" 1",
            "metric{a=b} 1",
            "metric one",
            "metric 1 2 3",
            "{a=\"b\"} 1",
        ] {
            assert!(
                matches!(parse("u", bad), Err(ScrapeError::Garbage { line: 1, .. })),
                "{bad:?} parsed"
            );
        }
    }

    #[test]
    fn an_http_response_gives_its_body_or_its_status() {
        let ok = "HTTP/1.1 200 OK\r\ncontent-type: text/plain\r\n\r\na 1\n";
        assert_eq!(response_body("u", ok).unwrap(), "a 1\n");
        let chunked =
            "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n4\r\na 1\n\r\n4\r\nb 2\n\r\n0\r\n\r\n";
        assert_eq!(response_body("u", chunked).unwrap(), "a 1\nb 2\n");
        let missing = "HTTP/1.1 404 Not Found\r\n\r\nnope";
        assert!(response_body("u", missing)
            .unwrap_err()
            .to_string()
            .contains("404"));
    }

    fn layout(partitions: Vec<(i32, Vec<i32>, Vec<i32>)>) -> Layout {
        Layout {
            brokers: [(1, "a:1".to_string()), (2, "b:1".to_string())]
                .into_iter()
                .collect(),
            controller: 1,
            partitions: partitions
                .into_iter()
                .enumerate()
                .map(|(i, (leader, replicas, isr))| PartitionState {
                    topic: "t".into(),
                    partition: i as i32,
                    leader,
                    replicas,
                    isr,
                })
                .collect(),
        }
    }

    #[test]
    fn the_under_replicated_reason_names_the_partition_and_a_stalled_follower() {
        let l = layout(vec![
            (1, vec![1, 2], vec![1, 2]),
            (1, vec![1, 2], vec![1]),
            (2, vec![2, 1], vec![2]),
        ]);
        assert_eq!(
            l.under_replicated_reason(&BTreeMap::new()).as_deref(),
            Some("2 partition(s) under-replicated; first t-1: ISR [1] of replicas [1, 2], out of it: 2")
        );
        let stalled = parse(
            "http://b/metrics",
            "evenkeel_replica_fetch_stalled{topic=\"t\",partition=\"1\"} 1\n",
        )
        .unwrap();
        let other = parse(
            "http://b/metrics",
            "evenkeel_replica_fetch_stalled{topic=\"t\",partition=\"2\"} 1\n",
        )
        .unwrap();
        let reason = |page: &Page| {
            l.under_replicated_reason(&[(2, page.clone())].into_iter().collect())
                .unwrap()
        };
        assert!(reason(&stalled).ends_with("out of it: 2 (its fetches make no progress)"));
        assert!(
            reason(&other).ends_with("out of it: 2"),
            "another partition's stall"
        );
        assert_eq!(
            layout(vec![(1, vec![1, 2], vec![1, 2])]).under_replicated_reason(&BTreeMap::new()),
            None
        );
    }

    #[test]
    fn a_leaderless_partition_or_a_dead_leader_makes_the_layout_incomplete() {
        let good = layout(vec![(1, vec![1, 2], vec![1, 2]), (2, vec![2, 1], vec![2])]);
        assert_eq!(good.incomplete(), None);
        assert_eq!(good.under_replicated(), 1);
        assert_eq!(good.leader_counts(), [(1, 1), (2, 1)].into_iter().collect());
        assert!(layout(vec![(-1, vec![1], vec![])])
            .incomplete()
            .unwrap()
            .contains("no leader"));
        assert!(layout(vec![(3, vec![3], vec![3])])
            .incomplete()
            .unwrap()
            .contains("not live"));
    }
}
