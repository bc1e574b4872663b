//! Kafka's connection limits on a running broker (`max.connections.per.ip` and its overrides,
//! `connections.max.idle.ms`) and its stop with connections open: raw sockets against the real
//! binary.

mod common;

use std::io::Read;
use std::net::TcpStream;
use std::time::{Duration, Instant};

use kafka_protocol::messages::{ApiKey, ApiVersionsRequest, ApiVersionsResponse};

use common::raw;

/// ApiVersions v2 on `s` answers without error.
fn api_versions_answer(s: &mut TcpStream) -> bool {
    let r: ApiVersionsResponse =
        raw::call(s, ApiKey::ApiVersions, 2, &ApiVersionsRequest::default());
    r.error_code == 0 && !r.api_keys.is_empty()
}

/// Whether the broker closes `s` within `within` (EOF or a reset; no answer is not a close).
fn closed_within(s: &mut TcpStream, within: Duration) -> bool {
    s.set_read_timeout(Some(within)).unwrap();
    let mut b = [0u8; 1];
    let closed = match s.read(&mut b) {
        Ok(0) => true,
        Ok(_) => panic!("the broker sent bytes nobody asked for"),
        Err(e) => e.kind() == std::io::ErrorKind::ConnectionReset,
    };
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    closed
}

/// A new connection that the broker serves, waiting while it refuses them (a closed
/// connection's place comes back once the broker has seen the close).
fn serving_connection(bootstrap: &str, within: Duration) -> TcpStream {
    let deadline = Instant::now() + within;
    loop {
        let mut s = raw::connect(bootstrap);
        if !closed_within(&mut s, Duration::from_millis(200)) && api_versions_answer(&mut s) {
            return s;
        }
        assert!(
            Instant::now() < deadline,
            "no connection served within {within:?}"
        );
    }
}

#[test]
fn connections_over_max_connections_per_ip_are_closed_while_the_first_keep_working() {
    let b = common::BrokerProcess::start(&["max.connections.per.ip=2"]);
    let mut first = raw::connect(&b.bootstrap);
    let mut second = raw::connect(&b.bootstrap);
    assert!(api_versions_answer(&mut first));
    assert!(api_versions_answer(&mut second));
    let mut third = raw::connect(&b.bootstrap);
    assert!(
        closed_within(&mut third, Duration::from_secs(10)),
        "a third connection from 127.0.0.1 is closed"
    );
    assert!(api_versions_answer(&mut first), "the first still answers");
    assert!(api_versions_answer(&mut second), "the second still answers");
    drop(first);
    let mut again = serving_connection(&b.bootstrap, Duration::from_secs(10));
    assert!(
        api_versions_answer(&mut again),
        "a closed connection frees its place"
    );
    assert!(api_versions_answer(&mut second));
}

#[test]
fn max_connections_per_ip_overrides_set_the_limit_of_their_host() {
    // Zero for every address but 127.0.0.1, which may hold one: Kafka's allow-list form.
    let b = common::BrokerProcess::start(&[
        "max.connections.per.ip=0",
        "max.connections.per.ip.overrides=127.0.0.1:1",
    ]);
    let mut first = raw::connect(&b.bootstrap);
    assert!(api_versions_answer(&mut first));
    let mut second = raw::connect(&b.bootstrap);
    assert!(closed_within(&mut second, Duration::from_secs(10)));
    assert!(api_versions_answer(&mut first));
}

#[test]
fn an_idle_connection_is_closed_after_connections_max_idle_ms_while_a_busy_one_is_kept() {
    let idle = Duration::from_millis(1000);
    let b = common::BrokerProcess::start(&["connections.max.idle.ms=1000"]);
    let mut busy = raw::connect(&b.bootstrap);
    let mut quiet = raw::connect(&b.bootstrap);
    let busy_since = Instant::now();
    assert!(api_versions_answer(&mut quiet));
    let quiet_since = Instant::now();
    // The busy connection asks about every 100 ms (the wait for the quiet one's close).
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        assert!(
            api_versions_answer(&mut busy),
            "the busy connection is served"
        );
        if closed_within(&mut quiet, Duration::from_millis(100)) {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the quiet connection is still open"
        );
    }
    let quiet_for = quiet_since.elapsed();
    assert!(
        quiet_for >= idle,
        "closed after {quiet_for:?} without a request"
    );
    while busy_since.elapsed() < idle * 3 {
        assert!(
            api_versions_answer(&mut busy),
            "the busy connection is kept"
        );
    }
}

#[tokio::test]
async fn the_broker_stops_promptly_with_connections_open_and_a_fetch_parked() {
    const FETCH_PURGATORY: &str =
        "kafka_server_delayedoperationpurgatory_purgatorysize{delayedOperation=\"Fetch\"}";
    let port = common::free_port();
    let metrics = format!("evenkeel.metrics.address=127.0.0.1:{port}");
    let mut b = common::BrokerProcess::start(&[&metrics]);
    common::create_topic(&b.bootstrap, "quiet", 1, &[]).await;
    let mut idle = raw::connect(&b.bootstrap);
    assert!(api_versions_answer(&mut idle));
    let mut fetching = raw::connect(&b.bootstrap);
    raw::send(
        &mut fetching,
        ApiKey::Fetch,
        12,
        1,
        &raw::waiting_fetch("quiet", 60_000),
    );
    let parked = || common::metric_value(&common::http_get(port, "/metrics").1, FETCH_PURGATORY);
    let deadline = Instant::now() + Duration::from_secs(10);
    while parked() < 1.0 {
        assert!(Instant::now() < deadline, "the fetch never parked");
        std::thread::sleep(Duration::from_millis(20));
    }
    let stopping = Instant::now();
    // A drain that waited for the fetch would take its minute (and stop() gives up at 30 s).
    assert!(b.stop(), "the broker exits cleanly");
    let took = stopping.elapsed();
    assert!(took < Duration::from_secs(20), "stopping took {took:?}");
    assert!(closed_within(&mut idle, Duration::from_secs(1)));
    assert!(closed_within(&mut fetching, Duration::from_secs(1)));
}
