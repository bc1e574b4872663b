//! A real Kubernetes control plane for tests: etcd, kube-apiserver (RBAC authorizer) and
//! kube-controller-manager (garbage collector and namespace controller only) on loopback, built
//! by `scripts/kube-testenv`, found through EVENKEEL_KUBE_ASSETS. One control plane per test
//! binary, started on first use and stopped when the binary exits; each test works in a
//! namespace of its own. The operator runs as the real `evenkeel operator` process, under the
//! chart's ServiceAccount identity (impersonation).
#![allow(dead_code)]

use std::fs;
use std::io::Write;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Namespace;
use kube::api::{Api, DynamicObject, Patch, PatchParams, PostParams};
use kube::discovery::{Discovery, Scope};
use kube::{Client, Config};
use serde_json::{json, Value};

use crate::common::free_port;

/// The chart's release, as the tests install it.
pub const RELEASE_NAMESPACE: &str = "evenkeel-system";
pub const SERVICE_ACCOUNT: &str = "evenkeel";
/// Field manager of everything the tests apply (the operator's is `evenkeel-operator`).
pub const TEST_MANAGER: &str = "evenkeel-test";
const ADMIN_TOKEN: &str = "evenkeel-test-admin-token";

/// EVENKEEL_KUBE_ASSETS: the directory `scripts/kube-testenv` prints.
pub fn assets() -> Option<PathBuf> {
    std::env::var_os("EVENKEEL_KUBE_ASSETS")
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
}

/// Fails the test, saying what to do, when no control plane was built.
#[macro_export]
macro_rules! require_kube {
    () => {
        assert!(
            kubeenv::assets().is_some(),
            "set EVENKEEL_KUBE_ASSETS: EVENKEEL_KUBE_ASSETS=$(scripts/kube-testenv --print-dir) \
             cargo test --features tier-kube-apiserver --test kube_apiserver (.ci/run does)"
        );
    };
}

/// The repository root (crds/, charts/, examples/).
pub fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

pub struct ControlPlane {
    pub dir: PathBuf,
    pub assets: PathBuf,
    pub server: String,
    /// kubeconfig of the admin (group system:masters).
    pub admin_kubeconfig: PathBuf,
    /// kubeconfig that impersonates the operator's ServiceAccount.
    pub operator_kubeconfig: PathBuf,
}

/// Children to stop when the test binary exits (and the temp dir to remove).
static CHILDREN: Mutex<Vec<u32>> = Mutex::new(Vec::new());
static TEMP: Mutex<Option<PathBuf>> = Mutex::new(None);
static PLANE: OnceLock<ControlPlane> = OnceLock::new();

extern "C" fn stop_all() {
    if let Ok(pids) = CHILDREN.lock() {
        for pid in pids.iter().rev() {
            unsafe {
                libc::kill(*pid as i32, libc::SIGKILL);
                libc::waitpid(*pid as i32, std::ptr::null_mut(), 0);
            }
        }
    }
    if let Ok(Some(dir)) = TEMP.lock().map(|d| d.clone()) {
        if std::env::var_os("EVENKEEL_KUBE_KEEP").is_none() {
            let _ = fs::remove_dir_all(dir);
        }
    }
}

/// Spawns `cmd` so that it dies with the test binary: SIGKILL when the spawning thread (a thread
/// that lives as long as the binary) goes, and an atexit hook for a normal exit, which also
/// reaps it (waitpid in `stop_all`).
#[allow(clippy::zombie_processes)]
fn spawn_for_life(mut cmd: Command, log: &Path) {
    let out = fs::File::create(log).unwrap();
    cmd.stdout(out.try_clone().unwrap()).stderr(out);
    unsafe {
        cmd.pre_exec(|| {
            libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
            Ok(())
        });
    }
    let child = cmd
        .spawn()
        .unwrap_or_else(|e| panic!("cannot start {cmd:?}: {e}"));
    CHILDREN.lock().unwrap().push(child.id());
}

fn run(cmd: &mut Command) -> String {
    let out = cmd.output().unwrap_or_else(|e| panic!("{cmd:?}: {e}"));
    assert!(
        out.status.success(),
        "{cmd:?} failed: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

fn wait_tcp(port: u16, what: &str, log: &Path) {
    let deadline = Instant::now() + Duration::from_secs(120);
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        if Instant::now() > deadline {
            panic!(
                "{what} did not listen on {port}:\n{}",
                tail(&fs::read_to_string(log).unwrap_or_default(), 40)
            );
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

pub fn tail(s: &str, lines: usize) -> String {
    let all: Vec<&str> = s.lines().collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}

fn kubeconfig(server: &str, user: Value) -> String {
    serde_json::to_string_pretty(&json!({
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "test", "cluster": {"server": server, "insecure-skip-tls-verify": true}}],
        "users": [{"name": "user", "user": user}],
        "contexts": [{"name": "test", "context": {"cluster": "test", "user": "user"}}],
        "current-context": "test",
    }))
    .unwrap()
}

/// The admin token impersonating ServiceAccount `namespace/name`, with the groups its own token
/// would carry: exactly what RBAC grants that account.
fn service_account_user(namespace: &str, name: &str) -> Value {
    json!({
        "token": ADMIN_TOKEN,
        "as": format!("system:serviceaccount:{namespace}:{name}"),
        "as-groups": [
            "system:serviceaccounts",
            format!("system:serviceaccounts:{namespace}"),
            "system:authenticated",
        ],
    })
}

/// The control plane, started on first call.
pub fn plane() -> &'static ControlPlane {
    PLANE.get_or_init(|| {
        let (tx, rx) = std::sync::mpsc::channel();
        // The processes' parent thread lives as long as the binary (PR_SET_PDEATHSIG is per
        // thread): a panicking test cannot take them down with it.
        std::thread::spawn(move || {
            let plane = start();
            tx.send(plane).unwrap();
            loop {
                std::thread::park();
            }
        });
        rx.recv().expect("control plane started")
    })
}

fn start() -> ControlPlane {
    let assets = assets().expect("EVENKEEL_KUBE_ASSETS");
    for bin in [
        "etcd",
        "kube-apiserver",
        "kube-controller-manager",
        "helm",
        "kubeconform",
    ] {
        assert!(
            assets.join(bin).exists(),
            "{} missing: run scripts/kube-testenv",
            assets.join(bin).display()
        );
    }
    let dir = tempfile::Builder::new()
        .prefix("evenkeel-kube-")
        .tempdir()
        .unwrap()
        .keep();
    *TEMP.lock().unwrap() = Some(dir.clone());
    unsafe {
        libc::atexit(stop_all);
    }
    let started = Instant::now();

    // etcd
    let (client_port, peer_port) = (free_port(), free_port());
    let mut etcd = Command::new(assets.join("etcd"));
    let client_url = format!("http://127.0.0.1:{client_port}");
    let peer_url = format!("http://127.0.0.1:{peer_port}");
    etcd.arg("--data-dir")
        .arg(dir.join("etcd"))
        .args(["--name", "test"])
        .args(["--listen-client-urls", &client_url])
        .args(["--advertise-client-urls", &client_url])
        .args(["--listen-peer-urls", &peer_url])
        .args(["--initial-advertise-peer-urls", &peer_url])
        .args(["--initial-cluster", &format!("test={peer_url}")])
        .args(["--unsafe-no-fsync", "--log-level", "warn"]);
    spawn_for_life(etcd, &dir.join("etcd.log"));
    wait_tcp(client_port, "etcd", &dir.join("etcd.log"));

    // Service-account signing key, admin token.
    let sa_key = dir.join("sa.key");
    run(Command::new("openssl")
        .args(["genrsa", "-out"])
        .arg(&sa_key)
        .arg("2048"));
    let sa_pub = dir.join("sa.pub");
    run(Command::new("openssl")
        .args(["rsa", "-pubout", "-in"])
        .arg(&sa_key)
        .arg("-out")
        .arg(&sa_pub));
    fs::write(
        dir.join("tokens.csv"),
        format!("{ADMIN_TOKEN},evenkeel-test-admin,1,\"system:masters\"\n"),
    )
    .unwrap();

    // kube-apiserver
    let port = free_port();
    let server = format!("https://127.0.0.1:{port}");
    let mut api = Command::new(assets.join("kube-apiserver"));
    api.args(["--etcd-servers", &client_url])
        .args([
            "--bind-address",
            "127.0.0.1",
            "--advertise-address",
            "127.0.0.1",
        ])
        .args(["--secure-port", &port.to_string()])
        .arg("--cert-dir")
        .arg(dir.join("certs"))
        .arg("--token-auth-file")
        .arg(dir.join("tokens.csv"))
        .args(["--authorization-mode", "RBAC"])
        .args(["--service-account-issuer", "https://kubernetes.default.svc"])
        .arg("--service-account-key-file")
        .arg(&sa_pub)
        .arg("--service-account-signing-key-file")
        .arg(&sa_key)
        .args(["--service-cluster-ip-range", "10.0.0.0/24"])
        .args(["--allow-privileged=true", "--v=1"]);
    spawn_for_life(api, &dir.join("kube-apiserver.log"));
    wait_tcp(port, "kube-apiserver", &dir.join("kube-apiserver.log"));

    let admin_kubeconfig = dir.join("admin.kubeconfig");
    fs::write(
        &admin_kubeconfig,
        kubeconfig(&server, json!({ "token": ADMIN_TOKEN })),
    )
    .unwrap();
    let operator_kubeconfig = dir.join("operator.kubeconfig");
    fs::write(
        &operator_kubeconfig,
        kubeconfig(
            &server,
            service_account_user(RELEASE_NAMESPACE, SERVICE_ACCOUNT),
        ),
    )
    .unwrap();

    // Ready: /readyz as the admin (the RBAC bootstrap policy is in place by then).
    let deadline = Instant::now() + Duration::from_secs(180);
    loop {
        let out = Command::new("curl")
            .args(["-sk", "-o", "/dev/null", "-w", "%{http_code}"])
            .args(["-H", &format!("Authorization: Bearer {ADMIN_TOKEN}")])
            .arg(format!("{server}/readyz"))
            .output();
        if matches!(&out, Ok(o) if o.stdout == b"200") {
            break;
        }
        if Instant::now() > deadline {
            panic!(
                "kube-apiserver not ready:\n{}",
                tail(
                    &fs::read_to_string(dir.join("kube-apiserver.log")).unwrap_or_default(),
                    60
                )
            );
        }
        std::thread::sleep(Duration::from_millis(250));
    }

    // kube-controller-manager: the garbage collector (owned objects go with their owner) and the
    // namespace controller (namespace deletion). No workload controllers: no pods here.
    let mut kcm = Command::new(assets.join("kube-controller-manager"));
    kcm.arg("--kubeconfig")
        .arg(&admin_kubeconfig)
        .args(["--controllers", "garbagecollector,namespace"])
        .args(["--leader-elect=false", "--bind-address", "127.0.0.1"])
        .args(["--secure-port", &free_port().to_string()])
        .arg("--authentication-kubeconfig")
        .arg(&admin_kubeconfig)
        .arg("--authorization-kubeconfig")
        .arg(&admin_kubeconfig)
        .args(["--v=1"]);
    spawn_for_life(kcm, &dir.join("kube-controller-manager.log"));
    eprintln!(
        "control plane up in {:.1} s at {server} (logs in {})",
        started.elapsed().as_secs_f64(),
        dir.display()
    );
    ControlPlane {
        dir,
        assets,
        server,
        admin_kubeconfig,
        operator_kubeconfig,
    }
}

async fn client_from(path: &Path) -> Client {
    let kc = kube::config::Kubeconfig::read_from(path).unwrap();
    let config = Config::from_custom_kubeconfig(kc, &Default::default())
        .await
        .unwrap();
    Client::try_from(config).unwrap()
}

/// A client in group system:masters. One per test: a kube Client belongs to its tokio runtime.
pub async fn admin() -> Client {
    client_from(&plane().admin_kubeconfig).await
}

/// A client that is the operator's ServiceAccount (impersonated), with only the chart's RBAC.
pub async fn as_operator() -> Client {
    client_from(&plane().operator_kubeconfig).await
}

/// A kubeconfig (written on first use) that is ServiceAccount `namespace/name`, impersonated.
pub fn service_account_kubeconfig(namespace: &str, name: &str) -> PathBuf {
    let plane = plane();
    let path = plane.dir.join(format!("sa-{namespace}-{name}.kubeconfig"));
    if !path.exists() {
        fs::write(
            &path,
            kubeconfig(&plane.server, service_account_user(namespace, name)),
        )
        .unwrap();
    }
    path
}

/// A client that is ServiceAccount `namespace/name` (impersonated), with only what RBAC grants it.
pub async fn as_service_account(namespace: &str, name: &str) -> Client {
    client_from(&service_account_kubeconfig(namespace, name)).await
}

/// `helm template` of the chart (release `evenkeel` in evenkeel-system) with extra flags.
pub fn helm_template(extra: &[&str]) -> String {
    run(Command::new(plane().assets.join("helm"))
        .args(["template", "evenkeel"])
        .arg(repo().join("charts/evenkeel"))
        .args(["--namespace", RELEASE_NAMESPACE, "--kube-version", "1.34.0"])
        .args(extra)
        .env("HELM_CACHE_HOME", plane().dir.join("helm/cache"))
        .env("HELM_CONFIG_HOME", plane().dir.join("helm/config"))
        .env("HELM_DATA_HOME", plane().dir.join("helm/data")))
}

/// Every document of a multi-document YAML stream, as JSON (empty documents dropped).
pub fn yaml_docs(text: &str) -> Vec<Value> {
    use serde::Deserialize;
    serde_yaml::Deserializer::from_str(text)
        .filter_map(|d| {
            let v = Value::deserialize(d).unwrap();
            (!v.is_null()).then_some(v)
        })
        .collect()
}

/// Server-side applies each object (force, as TEST_MANAGER), resolving kinds by discovery.
/// Namespaced objects without a namespace go to `default_ns`.
pub async fn apply_all(client: &Client, docs: &[Value], default_ns: &str) -> Vec<DynamicObject> {
    let discovery = Discovery::new(client.clone()).run().await.unwrap();
    let pp = PatchParams::apply(TEST_MANAGER).force();
    let mut applied = Vec::new();
    for doc in docs {
        let obj: DynamicObject = serde_json::from_value(doc.clone()).unwrap();
        let tm = obj.types.clone().expect("apiVersion and kind");
        let gvk = kube::api::GroupVersionKind::try_from(&tm).unwrap();
        let (ar, caps) = discovery
            .resolve_gvk(&gvk)
            .unwrap_or_else(|| panic!("the API server does not serve {gvk:?}"));
        let name = obj.metadata.name.clone().expect("metadata.name");
        let api: Api<DynamicObject> = match caps.scope {
            Scope::Namespaced => Api::namespaced_with(
                client.clone(),
                obj.metadata.namespace.as_deref().unwrap_or(default_ns),
                &ar,
            ),
            Scope::Cluster => Api::all_with(client.clone(), &ar),
        };
        let out = api
            .patch(&name, &pp, &Patch::Apply(doc))
            .await
            .unwrap_or_else(|e| panic!("apply {} {name}: {e}", gvk.kind));
        applied.push(out);
    }
    applied
}

/// crds/*.yaml, server-side applied, then waited on until Established.
pub async fn install_crds(client: &Client) -> Vec<DynamicObject> {
    use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
    let mut docs = Vec::new();
    let mut files: Vec<_> = fs::read_dir(repo().join("crds"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    files.sort();
    for f in files {
        docs.extend(yaml_docs(&fs::read_to_string(f).unwrap()));
    }
    let applied = apply_all(client, &docs, "default").await;
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    for crd in &applied {
        let name = crd.metadata.name.clone().unwrap();
        wait_for(&format!("CRD {name} Established"), 60, || async {
            let c = crds.get(&name).await.ok()?;
            c.status?
                .conditions?
                .iter()
                .any(|c| c.type_ == "Established" && c.status == "True")
                .then_some(())
        })
        .await;
    }
    applied
}

/// The chart's ServiceAccount and RBAC (templates/serviceaccount.yaml, templates/rbac.yaml) with
/// default values, applied in evenkeel-system.
pub async fn install_chart_rbac(client: &Client) {
    create_namespace(client, RELEASE_NAMESPACE).await;
    let text = helm_template(&[
        "--show-only",
        "templates/serviceaccount.yaml",
        "--show-only",
        "templates/rbac.yaml",
    ]);
    apply_all(client, &yaml_docs(&text), RELEASE_NAMESPACE).await;
}

/// CRDs and the chart's RBAC: what every operator test needs (idempotent).
pub async fn install_base(client: &Client) {
    install_crds(client).await;
    install_chart_rbac(client).await;
}

pub async fn create_namespace(client: &Client, name: &str) {
    let api: Api<Namespace> = Api::all(client.clone());
    let ns: Namespace = serde_json::from_value(json!({"metadata": {"name": name}})).unwrap();
    match api.create(&PostParams::default(), &ns).await {
        Ok(_) => {}
        Err(kube::Error::Api(e)) if e.code == 409 => {}
        Err(e) => panic!("create namespace {name}: {e}"),
    }
}

/// What an operator test starts from: the admin client, the CRDs and the chart's RBAC
/// installed, and a fresh namespace named after `prefix`.
pub async fn operator_test(prefix: &str) -> (Client, String) {
    let client = admin().await;
    install_base(&client).await;
    let ns = test_namespace(&client, prefix).await;
    (client, ns)
}

/// A fresh namespace for one test.
pub async fn test_namespace(client: &Client, prefix: &str) -> String {
    let name = format!(
        "{prefix}-{}",
        &uuid::Uuid::new_v4().simple().to_string()[..6]
    );
    create_namespace(client, &name).await;
    name
}

/// Polls `f` every 250 ms until it returns Some, or panics after `secs` seconds.
pub async fn wait_for<T, F, Fut>(what: &str, secs: u64, mut f: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let deadline = Instant::now() + Duration::from_secs(secs);
    loop {
        if let Some(v) = f().await {
            return v;
        }
        if Instant::now() > deadline {
            panic!("timed out after {secs} s waiting for {what}");
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

/// `evenkeel operator` as a process, authenticated as the chart's ServiceAccount.
pub struct Operator {
    child: Child,
    pub log: PathBuf,
}

impl Operator {
    /// Watches `namespace` only; reaches every cluster's brokers at `bootstrap`.
    pub fn start(namespace: &str, bootstrap: &str, leader_election: bool) -> Operator {
        let plane = plane();
        let log = plane.dir.join(format!("operator-{namespace}.log"));
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_evenkeel"));
        cmd.args(["operator", "--namespace", namespace])
            .args(["--metrics-address", &format!("127.0.0.1:{}", free_port())])
            .args(["--resync-seconds", "5"])
            .args(["--bootstrap-override", bootstrap])
            .args(["--broker-image", "evenkeel-test:1"])
            .env("KUBECONFIG", &plane.operator_kubeconfig)
            .env("POD_NAMESPACE", RELEASE_NAMESPACE)
            .env("POD_NAME", format!("operator-{namespace}"))
            .env(
                "EVENKEEL_LOG",
                "info,evenkeel=debug,kube_runtime=info,kube_client=info",
            )
            .env_remove("KUBE_RS_DEBUG_IMPERSONATE_USER")
            .env_remove("KUBE_RS_DEBUG_IMPERSONATE_GROUP");
        if !leader_election {
            cmd.arg("--no-leader-election");
        }
        let out = fs::File::create(&log).unwrap();
        cmd.stdout(out.try_clone().unwrap()).stderr(out);
        let child = cmd.spawn().expect("start evenkeel operator");
        CHILDREN.lock().unwrap().push(child.id());
        Operator { child, log }
    }

    pub fn log(&self) -> String {
        fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// The operator was never refused by RBAC (a refused event publish is only a log line).
    pub fn assert_never_forbidden(&self) {
        let log = self.log();
        let refused: Vec<&str> = log
            .lines()
            // RBAC's refusal: `... is forbidden: User "system:serviceaccount:..." cannot ...`
            // (not admission's, e.g. "forbidden: unable to create new content in namespace ...
            // because it is being terminated", which any operator meets in a dying namespace).
            // And RBAC's escalation check: a Role granting what the operator does not hold.
            .filter(|l| {
                l.contains("is forbidden: User")
                    || l.contains("attempting to grant RBAC permissions not currently held")
            })
            .collect();
        assert!(
            refused.is_empty(),
            "the operator was refused by RBAC:\n{}",
            refused.join("\n")
        );
    }
}

impl Drop for Operator {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        if std::thread::panicking() {
            eprintln!("--- operator log ({}):", self.log.display());
            eprintln!("{}", tail(&self.log(), 80));
        }
    }
}

/// The condition `type_` of an object's status.conditions, as (status, reason, message).
pub fn condition(obj: &Value, type_: &str) -> Option<(String, String, String)> {
    let cs = obj.pointer("/status/conditions")?.as_array()?;
    let c = cs.iter().find(|c| c["type"] == type_)?;
    Some((
        c["status"].as_str()?.to_string(),
        c["reason"].as_str().unwrap_or_default().to_string(),
        c["message"].as_str().unwrap_or_default().to_string(),
    ))
}

/// Writes `text` to `path` (for tools fed from files).
pub fn write(path: &Path, text: &str) {
    let mut f = fs::File::create(path).unwrap();
    f.write_all(text.as_bytes()).unwrap();
}

/// `evenkeel rebalancer` as a process reporting to a KafkaCluster, authenticated as that
/// cluster's `<cluster>-rebalancer` ServiceAccount, as the sidecar would be.
pub struct Rebalancer {
    child: Child,
    pub log: PathBuf,
}

impl Rebalancer {
    /// `evenkeel rebalancer --bootstrap BOOTSTRAP --kafka-cluster CLUSTER ARGS…` in `namespace`
    /// (POD_NAMESPACE), beside pod `<cluster>-kafka-0`, its health and metrics on a free port.
    pub fn start(namespace: &str, cluster: &str, bootstrap: &str, args: &[&str]) -> Rebalancer {
        let plane = plane();
        let log = plane.dir.join(format!("rebalancer-{namespace}.log"));
        let account = format!("{cluster}-rebalancer");
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_evenkeel"));
        cmd.args(["rebalancer", "--bootstrap", bootstrap])
            .args(["--kafka-cluster", cluster])
            .args(["--listen", &format!("127.0.0.1:{}", free_port())])
            .args(args)
            .env(
                "KUBECONFIG",
                service_account_kubeconfig(namespace, &account),
            )
            .env("POD_NAMESPACE", namespace)
            .env("POD_NAME", format!("{cluster}-kafka-0"))
            .env("EVENKEEL_LOG", "info,kube_client=info")
            .env_remove("KUBE_RS_DEBUG_IMPERSONATE_USER")
            .env_remove("KUBE_RS_DEBUG_IMPERSONATE_GROUP");
        let out = fs::File::create(&log).unwrap();
        cmd.stdout(out.try_clone().unwrap()).stderr(out);
        let child = cmd.spawn().expect("start evenkeel rebalancer");
        CHILDREN.lock().unwrap().push(child.id());
        Rebalancer { child, log }
    }

    pub fn log(&self) -> String {
        fs::read_to_string(&self.log).unwrap_or_default()
    }
}

impl Drop for Rebalancer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        if std::thread::panicking() {
            eprintln!("--- rebalancer log ({}):", self.log.display());
            eprintln!("{}", tail(&self.log(), 80));
        }
    }
}
