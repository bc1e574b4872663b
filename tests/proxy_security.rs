//! The producer proxy against a secured cluster: a broker with a SASL_SSL listener (SCRAM-SHA-512,
//! a test CA) and the StandardAuthorizer, set up as the ANONYMOUS super user on its PLAINTEXT
//! listener. The proxy's producer logs in over SASL_SSL with Kafka's client keys; served over
//! HTTPS with basic auth, each HTTP user's requests go through a producer logged in as that
//! user, so the cluster's ACLs decide (alice may write topic `t`, bob may not); bad settings
//! stop the proxy at start with one readable line.

mod common;

use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use base64::Engine;
use common::cluster::{admin, Cluster};
use common::http::{self, Head, ProxyProcess, Response};
use common::pki::Pki;
use evenkeel::metadata::records::{MetadataRecord, ScramCredentialRecord};
use evenkeel::security::acl::{
    AclBinding, AclOperation, PatternType, PermissionType, ResourcePattern, ResourceType,
};

const JSON_V2: &str = "application/vnd.kafka.json.v2+json";
const TOPIC: &str = "t";

/// The cluster's credentials: SCRAM-SHA-512 for admin (a super user), alice, bob and dave;
/// alice may write `t`, dave may only describe it, bob has no ACL at all.
fn bootstrap_records() -> Vec<MetadataRecord> {
    let mut records = Vec::new();
    for (user, password) in [
        ("admin", "admin-secret"),
        ("alice", "alice-secret"),
        ("bob", "bob-secret"),
        ("dave", "dave-secret"),
    ] {
        let arg = format!("SCRAM-SHA-512=[name={user},password={password}]");
        let scram = evenkeel::security::sasl::parse_add_scram(&arg).unwrap();
        records.push(MetadataRecord::UserScramCredential(
            ScramCredentialRecord::new(&scram.user, scram.mechanism, scram.credential),
        ));
    }
    for (user, operation) in [
        ("alice", AclOperation::Write),
        ("dave", AclOperation::Describe),
    ] {
        records.push(MetadataRecord::AccessControlEntry {
            id: evenkeel::storage::KafkaUuid::random(),
            acl: AclBinding {
                pattern: ResourcePattern {
                    resource_type: ResourceType::Topic,
                    name: TOPIC.into(),
                    pattern_type: PatternType::Literal,
                },
                principal: format!("User:{user}"),
                host: "*".into(),
                operation,
                permission: PermissionType::Allow,
            },
        });
    }
    records
}

/// One node: PLAINTEXT (the ANONYMOUS super user, for setup and reading back), SECURE
/// (SASL_SSL, SCRAM-SHA-512) and MTLS (SSL with client certificates required; the certificate
/// `CN=proxy` is the super user `proxy`), with its addresses on SECURE and MTLS.
struct Secured {
    cluster: Cluster,
    secure: String,
    mtls: String,
    ca: PathBuf,
    pki: Pki,
    dir: tempfile::TempDir,
}

fn start() -> Secured {
    let dir = tempfile::tempdir().unwrap();
    let pki = Pki::new(dir.path(), "ca");
    let keystore = dir.path().join("broker.pem");
    pki.leaf("broker").write_keystore(&keystore);
    let ca = pki.ca_file().to_path_buf();
    let (port, mtls) = (common::free_port(), common::free_port());
    let overrides = [
        "listener.security.protocol.map=PLAINTEXT:PLAINTEXT,SECURE:SASL_SSL,MTLS:SSL,CONTROLLER:PLAINTEXT"
            .to_string(),
        "listener.name.mtls.ssl.keystore.type=PEM".into(),
        format!(
            "listener.name.mtls.ssl.keystore.location={}",
            keystore.display()
        ),
        "listener.name.mtls.ssl.truststore.type=PEM".into(),
        format!("listener.name.mtls.ssl.truststore.location={}", ca.display()),
        "listener.name.mtls.ssl.client.auth=required".into(),
        "ssl.principal.mapping.rules=RULE:^CN=(.*?),O=acme$/$1/,DEFAULT".into(),
        "listener.name.secure.ssl.keystore.type=PEM".into(),
        format!(
            "listener.name.secure.ssl.keystore.location={}",
            keystore.display()
        ),
        "listener.name.secure.sasl.enabled.mechanisms=SCRAM-SHA-512".into(),
        "authorizer.class.name=org.apache.kafka.metadata.authorizer.StandardAuthorizer".into(),
        "super.users=User:admin;User:ANONYMOUS;User:proxy".into(),
    ];
    let overrides: Vec<&str> = overrides.iter().map(String::as_str).collect();
    let records = bootstrap_records();
    let cluster = Cluster::start_prepared(
        1,
        &overrides,
        |_, ports| {
            let (client, ctrl) = (ports.client, ports.controller);
            vec![
                (
                    "listeners".into(),
                    format!("PLAINTEXT://127.0.0.1:{client},SECURE://127.0.0.1:{port},MTLS://127.0.0.1:{mtls},CONTROLLER://127.0.0.1:{ctrl}"),
                ),
                (
                    "advertised.listeners".into(),
                    format!("PLAINTEXT://127.0.0.1:{client},SECURE://127.0.0.1:{port},MTLS://127.0.0.1:{mtls}"),
                ),
            ]
        },
        |d| evenkeel::metadata::bootstrap::write(d, &records).unwrap(),
    );
    Secured {
        cluster,
        secure: format!("127.0.0.1:{port}"),
        mtls: format!("127.0.0.1:{mtls}"),
        ca,
        pki,
        dir,
    }
}

/// The producer properties of a SASL_SSL login as `user`.
fn sasl_ssl_props(ca: &Path, user: &str, password: &str) -> Vec<String> {
    vec![
        "security.protocol=SASL_SSL".into(),
        "ssl.truststore.type=PEM".into(),
        format!("ssl.truststore.location={}", ca.display()),
        "sasl.mechanism=SCRAM-SHA-512".into(),
        format!(
            "sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required \
             username=\"{user}\" password=\"{password}\";"
        ),
    ]
}

async fn create_topic(s: &Secured) {
    admin(&s.cluster.addr(1))
        .await
        .create_topic(TOPIC, 1, 1, &Default::default())
        .await
        .unwrap();
}

/// `t`'s records, read as the super user until `expect` are in (or 20 s).
fn records(s: &Secured, expect: usize) -> Vec<common::ReadRecord> {
    common::read_all(
        &s.cluster.addr(1),
        TOPIC,
        1,
        expect,
        Duration::from_secs(20),
    )
}

fn body(n: u32) -> String {
    format!(r#"{{"records":[{{"value":{{"n":{n}}}}}]}}"#)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn proxy_produces_to_a_sasl_ssl_cluster() {
    let s = start();
    create_topic(&s).await;
    let props = sasl_ssl_props(&s.ca, "admin", "admin-secret");
    let props: Vec<&str> = props.iter().map(String::as_str).collect();
    let proxy = ProxyProcess::start(&s.secure, &props);
    let r = http::post(&proxy.addr, "/topics/t", JSON_V2, &body(1));
    assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
    assert_eq!(r.json()["offsets"][0]["offset"], 0);
    let read = records(&s, 1);
    assert_eq!(read.len(), 1);
    assert_eq!(read[0].3, br#"{"n":1}"#);

    // A proxy whose own login the cluster refuses does not start, and says why in one line.
    let props = sasl_ssl_props(&s.ca, "admin", "not-the-password");
    let mut args = vec!["--producer-props"];
    args.extend(props.iter().map(String::as_str));
    let (status, stderr) = refused_start(&s.secure, &args);
    assert!(!status.success());
    assert_eq!(stderr.trim().lines().count(), 1, "{stderr}");
    assert!(
        stderr.contains("refused the proxy's own login") && stderr.contains("SaslAuthenticate"),
        "{stderr}"
    );
    assert!(!stderr.contains("not-the-password"), "{stderr}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn proxy_presents_its_certificate_to_a_mutual_tls_listener() {
    let s = start();
    create_topic(&s).await;
    let trust = [
        "security.protocol=SSL".to_string(),
        "ssl.truststore.type=PEM".into(),
        format!("ssl.truststore.location={}", s.ca.display()),
    ];
    // Without a certificate the listener refuses every connection: 503, nothing written.
    let props: Vec<&str> = trust.iter().map(String::as_str).collect();
    let without = ProxyProcess::start(&s.mtls, &props);
    let r = http::post(&without.addr, "/topics/t", JSON_V2, &body(1));
    assert_eq!(r.status, 503, "{}", String::from_utf8_lossy(&r.body));
    // With its certificate (CN=proxy, a super user) the proxy writes.
    let keystore = s.dir.path().join("proxy-client.pem");
    s.pki.leaf("proxy").write_keystore(&keystore);
    let mut with = trust.to_vec();
    with.push("ssl.keystore.type=PEM".into());
    with.push(format!("ssl.keystore.location={}", keystore.display()));
    let props: Vec<&str> = with.iter().map(String::as_str).collect();
    let proxy = ProxyProcess::start(&s.mtls, &props);
    let r = http::post(&proxy.addr, "/topics/t", JSON_V2, &body(2));
    assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
    assert_eq!(
        r.json()["offsets"][0]["offset"],
        0,
        "the refused record was not written"
    );
    assert_eq!(records(&s, 1)[0].3, br#"{"n":2}"#);
}

/// An HTTPS client of the proxy, trusting the test CA.
struct Https {
    addr: String,
    config: std::sync::Arc<rustls::ClientConfig>,
}

impl Https {
    fn request(
        &self,
        method: &str,
        path: &str,
        auth: Option<(&str, &str)>,
        body: &str,
    ) -> Response {
        let extra: Vec<(&str, String)> = auth
            .map(|(u, p)| {
                let token = base64::engine::general_purpose::STANDARD.encode(format!("{u}:{p}"));
                ("Authorization", format!("Basic {token}"))
            })
            .into_iter()
            .collect();
        let name = rustls::pki_types::ServerName::try_from("127.0.0.1").unwrap();
        let conn = rustls::ClientConnection::new(self.config.clone(), name).unwrap();
        let tcp = TcpStream::connect(&self.addr).unwrap();
        tcp.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
        let mut tls = rustls::StreamOwned::new(conn, tcp);
        let head = Head {
            addr: &self.addr,
            method,
            path,
            content_type: JSON_V2,
            extra: &extra,
        };
        http::request_on(&mut tls, &head, body.as_bytes())
    }

    fn produce(&self, auth: Option<(&str, &str)>, n: u32) -> Response {
        self.request("POST", "/topics/t", auth, &body(n))
    }
}

/// A 401 in REST Proxy's shape, with a basic-auth challenge.
fn assert_unauthorized(r: &Response) {
    assert_eq!(r.status, 401, "{}", String::from_utf8_lossy(&r.body));
    assert_eq!(r.json()["error_code"], 401);
    assert!(r.json()["message"].is_string());
    let challenge = r.header("www-authenticate").unwrap_or_default();
    assert!(challenge.starts_with("Basic realm="), "{challenge:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn proxy_https_with_basic_auth_maps_users_to_sasl_identities() {
    let s = start();
    create_topic(&s).await;
    let keystore = s.dir.path().join("proxy.pem");
    s.pki.leaf("proxy").write_keystore(&keystore);
    let props = sasl_ssl_props(&s.ca, "admin", "admin-secret");
    let props: Vec<&str> = props.iter().map(String::as_str).collect();
    let keystore = keystore.display().to_string();
    let flags = [
        "--ssl-keystore-location",
        keystore.as_str(),
        "--authentication-method",
        "BASIC",
    ];
    let proxy = ProxyProcess::start_with(&s.secure, &props, &flags);
    let https = Https {
        addr: proxy.addr.clone(),
        config: s.pki.client_config(None),
    };

    // Probes need no credentials; everything else does.
    assert_eq!(https.request("GET", "/healthz", None, "").status, 200);
    assert_unauthorized(&https.produce(None, 0));
    // A wrong password is refused by the cluster once; asked again, the proxy answers from
    // memory instead of logging in again (login_attempts below counts one).
    for _ in 0..3 {
        assert_unauthorized(&https.produce(Some(("alice", "not-her-password")), 0));
    }

    // alice writes t as herself.
    let r = https.produce(Some(("alice", "alice-secret")), 1);
    assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
    assert_eq!(r.json()["offsets"][0]["offset"], 0);

    // bob logs in, but the cluster does not let him near t.
    let r = https.produce(Some(("bob", "bob-secret")), 2);
    assert_eq!(r.status, 403, "{}", String::from_utf8_lossy(&r.body));
    assert_eq!(r.json()["error_code"], 40301);
    // dave may see t but not write it: his producer is refused its id, his record with it.
    let r = https.produce(Some(("dave", "dave-secret")), 2);
    assert_eq!(r.status, 403, "{}", String::from_utf8_lossy(&r.body));
    assert_eq!(r.json()["error_code"], 40301);

    // alice again (her producer kept): the next offset is hers, bob wrote nothing between.
    let r = https.produce(Some(("alice", "alice-secret")), 3);
    assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
    assert_eq!(r.json()["offsets"][0]["offset"], 1);
    let read = records(&s, 2);
    let values: Vec<&[u8]> = read.iter().map(|r| r.3.as_slice()).collect();
    assert_eq!(values, vec![&br#"{"n":1}"#[..], br#"{"n":3}"#]);

    // Plain HTTP on the HTTPS port is closed, and the proxy goes on serving.
    let mut plain = TcpStream::connect(&proxy.addr).unwrap();
    plain
        .set_read_timeout(Some(Duration::from_secs(20)))
        .unwrap();
    let answer = http::request_on(
        &mut plain,
        &Head {
            addr: &proxy.addr,
            method: "GET",
            path: "/healthz",
            content_type: JSON_V2,
            extra: &[],
        },
        b"",
    );
    assert_ne!(answer.status, 200, "plain HTTP is not served");
    assert_eq!(https.request("GET", "/healthz", None, "").status, 200);

    let metrics = String::from_utf8(https.request("GET", "/metrics", None, "").body).unwrap();
    assert!(metrics.contains("evenkeel_proxy_users 3"), "{metrics}");
    assert!(
        metrics.contains("evenkeel_proxy_authentication_failures_total{reason=\"missing\"} 1")
            && metrics
                .contains("evenkeel_proxy_authentication_failures_total{reason=\"refused\"} 3"),
        "{metrics}"
    );
    // alice wrong, alice, bob, dave: alice's second and third wrong tries reached no broker.
    assert!(
        metrics.contains("evenkeel_proxy_login_attempts_total 4"),
        "{metrics}"
    );
    assert!(
        metrics.contains("kafka_producer_producer_metrics_record_send_total 2"),
        "{metrics}"
    );
}

/// `evenkeel proxy` of `bootstrap` with `args` that must not start: its exit status and what
/// it printed.
fn refused_start(bootstrap: &str, args: &[&str]) -> (std::process::ExitStatus, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_evenkeel"))
        .args(["proxy", "--bootstrap", bootstrap, "--listen", "127.0.0.1:0"])
        .args(args)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .output()
        .unwrap();
    (
        out.status,
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn bad_security_settings_stop_the_proxy_with_one_line_naming_the_key() {
    let jaas = "sasl.jaas.config=org.apache.kafka.common.security.plain.PlainLoginModule required \
                username=\"a\" password=\"hunter2\";";
    for (args, key) in [
        (
            vec!["--producer-props", "security.protocol=SASL_SSL", jaas],
            "ssl.truststore.location",
        ),
        (
            vec!["--producer-props", "security.protocol=SASL_PLAINTEXT"],
            "sasl.jaas.config",
        ),
        (
            vec![
                "--producer-props",
                "security.protocol=SSL",
                "ssl.truststore.type=PEM",
                "ssl.truststore.location=/no/such/ca.pem",
            ],
            "ssl.truststore.location",
        ),
        (
            vec!["--authentication-method", "BASIC"],
            "security.protocol",
        ),
        (
            vec!["--ssl-keystore-location", "/no/such/proxy.pem"],
            "ssl.keystore.location",
        ),
    ] {
        let (status, stderr) = refused_start("127.0.0.1:1", &args);
        assert!(!status.success(), "{args:?} started");
        let lines: Vec<&str> = stderr.lines().filter(|l| !l.trim().is_empty()).collect();
        assert_eq!(lines.len(), 1, "{args:?}: {stderr}");
        assert!(lines[0].contains(key), "{args:?}: {stderr}");
        assert!(!stderr.contains("hunter2"), "{stderr}");
        assert!(!stderr.contains("panicked"), "{stderr}");
    }
}
