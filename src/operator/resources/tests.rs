//! Field-by-field checks of the objects the KafkaCluster reconciler applies.

use std::collections::BTreeSet;

use super::*;
use crate::operator::crd::{KafkaClusterSpec, Rack, SecurityStage};

fn cluster(yaml_spec: &str) -> KafkaCluster {
    let spec: KafkaClusterSpec = serde_yaml::from_str(yaml_spec).expect("spec parses");
    let mut kc = KafkaCluster::new("main", spec);
    kc.metadata.namespace = Some("streams".into());
    kc.metadata.uid = Some("0f2a6b3c-1d4e-4f50-8a6b-7c8d9e0f1a2b".into());
    kc
}

fn yaml<T: serde::Serialize>(obj: &T) -> serde_yaml::Value {
    serde_yaml::to_value(obj).expect("serializes")
}

fn at<'a>(v: &'a serde_yaml::Value, path: &str) -> &'a serde_yaml::Value {
    let mut cur = v;
    for part in path.split('.') {
        cur = match part.parse::<usize>() {
            Ok(i) => &cur[i],
            Err(_) => &cur[part],
        };
    }
    cur
}

fn s(v: &serde_yaml::Value) -> &str {
    v.as_str().unwrap_or("<not a string>")
}

#[test]
fn every_object_is_owned_by_the_cluster_and_labelled() {
    let kc = cluster("replicas: 3");
    let objects = [
        yaml(&config_map(&kc, 3).unwrap()),
        yaml(&headless_service(&kc).unwrap()),
        yaml(&bootstrap_service(&kc).unwrap()),
        yaml(&pod_disruption_budget(&kc).unwrap()),
        yaml(&statefulset(&kc, "evenkeel:test", 3).unwrap()),
    ];
    for o in &objects {
        assert_eq!(s(at(o, "metadata.namespace")), "streams");
        let owner = at(o, "metadata.ownerReferences.0");
        assert_eq!(s(&owner["kind"]), "KafkaCluster");
        assert_eq!(s(&owner["apiVersion"]), "kafka.evenkeel.dev/v1alpha1");
        assert_eq!(s(&owner["name"]), "main");
        assert_eq!(s(&owner["uid"]), "0f2a6b3c-1d4e-4f50-8a6b-7c8d9e0f1a2b");
        assert_eq!(owner["controller"].as_bool(), Some(true));
        assert_eq!(
            s(at(o, "metadata.labels.kafka.evenkeel.dev/cluster")),
            "<not a string>"
        );
        assert_eq!(
            s(&at(o, "metadata.labels")["kafka.evenkeel.dev/cluster"]),
            "main"
        );
        assert_eq!(
            s(&at(o, "metadata.labels")["app.kubernetes.io/managed-by"]),
            "evenkeel-operator"
        );
    }
    assert_eq!(s(at(&objects[0], "metadata.name")), "main-kafka-config");
    assert_eq!(s(at(&objects[1], "metadata.name")), "main-kafka-brokers");
    assert_eq!(s(at(&objects[2], "metadata.name")), "main-kafka-bootstrap");
    assert_eq!(s(at(&objects[3], "metadata.name")), "main-kafka");
    assert_eq!(s(at(&objects[4], "metadata.name")), "main-kafka");
}

#[test]
fn server_properties_hold_kraft_settings_and_user_config() {
    let kc = cluster("replicas: 3\nconfig:\n  num.io.threads: '16'\n  log.retention.hours: '24'\n");
    let props = server_properties(&kc, 3).unwrap();
    let lines: Vec<&str> = props.lines().filter(|l| !l.starts_with('#')).collect();
    assert_eq!(
        lines,
        [
            "listeners=PLAIN://0.0.0.0:9092,CONTROLLER://0.0.0.0:9093",
            "listener.security.protocol.map=PLAIN:PLAINTEXT,CONTROLLER:PLAINTEXT",
            "controller.listener.names=CONTROLLER",
            "inter.broker.listener.name=PLAIN",
            "controller.quorum.voters=0@main-kafka-0.main-kafka-brokers.streams.svc:9093,\
             1@main-kafka-1.main-kafka-brokers.streams.svc:9093,\
             2@main-kafka-2.main-kafka-brokers.streams.svc:9093",
            "log.dirs=/var/lib/evenkeel/data",
            "evenkeel.metrics.address=0.0.0.0:9404",
            "log.retention.hours=24",
            "num.io.threads=16",
        ]
    );
    let cm = yaml(&config_map(&kc, 3).unwrap());
    assert_eq!(s(at(&cm, "data.server.properties")), "<not a string>");
    assert_eq!(s(&at(&cm, "data")["server.properties"]), props);
}

#[test]
fn reserved_settings_are_refused_with_a_message() {
    let err = server_properties(&cluster("replicas: 1\nconfig:\n  node.id: '7'\n"), 3).unwrap_err();
    assert_eq!(
        err.to_string(),
        "spec.config.node.id is set by the operator and cannot be overridden"
    );
    let err = server_properties(
        &cluster(
            "replicas: 1\nlisteners:\n- {name: plain, port: 9092}\n- {name: other, port: 9092}\n",
        ),
        3,
    )
    .unwrap_err();
    assert!(err.to_string().contains("share a name or a port"), "{err}");
    let err = server_properties(
        &cluster("replicas: 1\nlisteners:\n- {name: plain, port: 9404}\n"),
        3,
    )
    .unwrap_err();
    assert!(err.to_string().contains("port 9404 is taken"), "{err}");
    let err =
        server_properties(&cluster("replicas: 1\nconfig:\n  a: \"x\\ny=z\"\n"), 3).unwrap_err();
    assert!(err.to_string().contains("newlines"), "{err}");
}

#[test]
fn services_expose_listeners_and_the_headless_one_publishes_unready_pods() {
    let kc = cluster(
        "replicas: 3\nlisteners:\n- {name: plain, port: 9092}\n- {name: internal, port: 9095}\n",
    );
    let h = yaml(&headless_service(&kc).unwrap());
    assert_eq!(s(at(&h, "spec.clusterIP")), "None");
    assert_eq!(
        at(&h, "spec.publishNotReadyAddresses").as_bool(),
        Some(true)
    );
    let names: Vec<&str> = at(&h, "spec.ports")
        .as_sequence()
        .unwrap()
        .iter()
        .map(|p| s(&p["name"]))
        .collect();
    assert_eq!(names, ["plain", "internal", "controller", "metrics"]);
    let b = yaml(&bootstrap_service(&kc).unwrap());
    assert_eq!(s(at(&b, "spec.type")), "ClusterIP");
    let ports: Vec<i64> = at(&b, "spec.ports")
        .as_sequence()
        .unwrap()
        .iter()
        .map(|p| p["port"].as_i64().unwrap())
        .collect();
    assert_eq!(ports, [9092, 9095]);
    assert_eq!(
        s(&at(&b, "spec.selector")["app.kubernetes.io/component"]),
        "broker"
    );
    assert_eq!(at(&b, "spec.selector").as_mapping().unwrap().len(), 4);
}

#[test]
fn pdb_allows_one_broker_down() {
    let p = yaml(&pod_disruption_budget(&cluster("replicas: 3")).unwrap());
    assert_eq!(at(&p, "spec.maxUnavailable").as_i64(), Some(1));
    assert_eq!(
        s(&at(&p, "spec.selector.matchLabels")["kafka.evenkeel.dev/cluster"]),
        "main"
    );
}

#[test]
fn statefulset_runs_brokers_on_delete_with_probes_storage_and_hash() {
    let kc = cluster(
        "replicas: 3\nstorage: {size: 50Gi, storageClassName: fast, deleteClaim: true}\n\
         resources: {requests: {cpu: '1', memory: 2Gi}, limits: {memory: 4Gi}}\n",
    );
    let st = yaml(&statefulset(&kc, "ghcr.io/evenkeel/evenkeel:0.1.0", 3).unwrap());
    assert_eq!(at(&st, "spec.replicas").as_i64(), Some(3));
    assert_eq!(s(at(&st, "spec.serviceName")), "main-kafka-brokers");
    assert_eq!(s(at(&st, "spec.updateStrategy.type")), "OnDelete");
    assert_eq!(
        s(at(
            &st,
            "spec.persistentVolumeClaimRetentionPolicy.whenDeleted"
        )),
        "Delete"
    );
    let hash = s(&at(&st, "spec.template.metadata.annotations")[CONFIG_HASH_ANNOTATION]);
    assert_eq!(
        hash,
        config_hash(
            &server_properties(&kc, 3).unwrap(),
            "ghcr.io/evenkeel/evenkeel:0.1.0"
        )
    );
    assert_eq!(hash.len(), 16);
    let pod = at(&st, "spec.template.spec");
    assert_eq!(
        at(pod, "securityContext.runAsNonRoot").as_bool(),
        Some(true)
    );
    let broker = at(pod, "containers.0");
    assert_eq!(s(&broker["name"]), "broker");
    assert_eq!(s(&broker["image"]), "ghcr.io/evenkeel/evenkeel:0.1.0");
    let args: Vec<&str> = broker["args"]
        .as_sequence()
        .unwrap()
        .iter()
        .map(s)
        .collect();
    assert_eq!(
        args,
        [
            "broker",
            "--config",
            "/etc/evenkeel/server.properties",
            "--override",
            "node.id=$(POD_INDEX)",
            "--override",
            "advertised.listeners=PLAIN://$(POD_NAME).main-kafka-brokers.streams.svc:9092",
        ]
    );
    assert_eq!(s(at(broker, "readinessProbe.httpGet.path")), "/readyz");
    assert_eq!(
        at(broker, "readinessProbe.httpGet.port").as_i64(),
        Some(9404)
    );
    assert_eq!(s(at(broker, "livenessProbe.httpGet.path")), "/healthz");
    assert_eq!(s(at(broker, "resources.requests.memory")), "2Gi");
    assert_eq!(s(at(broker, "resources.limits.memory")), "4Gi");
    let ports: Vec<i64> = broker["ports"]
        .as_sequence()
        .unwrap()
        .iter()
        .map(|p| p["containerPort"].as_i64().unwrap())
        .collect();
    assert_eq!(ports, [9092, 9093, 9404]);
    let init = at(pod, "initContainers.0");
    let init_args: Vec<&str> = init["args"].as_sequence().unwrap().iter().map(s).collect();
    assert_eq!(
        init_args[..4],
        [
            "format",
            "--config",
            "/etc/evenkeel/server.properties",
            "--cluster-id=DyprPB1OT1CKa3yNng8aKw"
        ]
    );
    assert!(init_args.contains(&"--ignore-formatted"));
    let claim = at(&st, "spec.volumeClaimTemplates.0");
    assert_eq!(s(at(claim, "metadata.name")), "data");
    assert_eq!(s(at(claim, "spec.resources.requests.storage")), "50Gi");
    assert_eq!(s(at(claim, "spec.storageClassName")), "fast");
    assert_eq!(
        pod["containers"].as_sequence().unwrap().len(),
        1,
        "no sidecar unless enabled"
    );
}

#[test]
fn config_change_changes_the_hash_and_nothing_else_in_the_selector() {
    let a = cluster("replicas: 3");
    let b = cluster("replicas: 3\nconfig: {num.io.threads: '16'}\n");
    let sa = yaml(&statefulset(&a, "img", 3).unwrap());
    let sb = yaml(&statefulset(&b, "img", 3).unwrap());
    let hash = |st: &serde_yaml::Value| {
        s(&at(st, "spec.template.metadata.annotations")[CONFIG_HASH_ANNOTATION]).to_string()
    };
    assert_ne!(hash(&sa), hash(&sb));
    assert_eq!(at(&sa, "spec.selector"), at(&sb, "spec.selector"));
    // A new image is a restart too.
    let sc = yaml(&statefulset(&a, "img2", 3).unwrap());
    assert_ne!(hash(&sa), hash(&sc));
    // Scaling is not: the voters stay the first three pods.
    let sd = yaml(&statefulset(&cluster("replicas: 4"), "img", 3).unwrap());
    assert_eq!(
        server_properties(&cluster("replicas: 3"), 3).unwrap(),
        server_properties(&cluster("replicas: 4"), 3).unwrap()
    );
    assert_eq!(hash(&sa), hash(&sd));
}

#[test]
fn rack_awareness_and_the_rebalancer_sidecar() {
    let mut kc =
        cluster("replicas: 3\nrebalancer: {enabled: true, dryRun: true, intervalSeconds: 20, threshold: 1.25, minHandlerIdlePercent: 15}\n");
    kc.spec.rack = Some(Rack {
        topology_key: "topology.kubernetes.io/zone".into(),
    });
    let st = yaml(&statefulset(&kc, "img", 3).unwrap());
    let pod = at(&st, "spec.template.spec");
    assert_eq!(
        s(at(pod, "topologySpreadConstraints.0.topologyKey")),
        "topology.kubernetes.io/zone"
    );
    let broker = at(pod, "containers.0");
    let args: Vec<&str> = broker["args"]
        .as_sequence()
        .unwrap()
        .iter()
        .map(s)
        .collect();
    assert!(args.contains(&"broker.rack=$(BROKER_RACK)"), "{args:?}");
    let env = broker["env"].as_sequence().unwrap();
    let rack = env
        .iter()
        .find(|e| s(&e["name"]) == "BROKER_RACK")
        .expect("BROKER_RACK env");
    assert_eq!(
        s(at(rack, "valueFrom.fieldRef.fieldPath")),
        "metadata.labels['topology.kubernetes.io/zone']"
    );
    let side = at(pod, "containers.1");
    assert_eq!(s(&side["name"]), "rebalancer");
    let args: Vec<&str> = side["args"].as_sequence().unwrap().iter().map(s).collect();
    assert_eq!(args[0], "rebalancer");
    assert!(args.contains(&"--dry-run=true"));
    assert!(args.windows(2).any(|w| w == ["--interval", "20s"]));
    assert!(args.windows(2).any(|w| w == ["--threshold", "1.25"]));
    assert!(args
        .windows(2)
        .any(|w| w == ["--min-handler-idle-percent", "15"]));
    assert!(args
        .windows(2)
        .any(|w| w == ["--min-network-idle-percent", "30"]));
    assert!(args
        .windows(2)
        .any(|w| w == ["--broker-id", "$(POD_INDEX)"]));
}

#[test]
fn a_proxy_runs_as_a_deployment_and_service_beside_the_brokers() {
    let kc = cluster(
        "replicas: 3\nlisteners:\n- {name: plain, port: 9095}\n\
         proxy: {replicas: 2, resources: {requests: {cpu: 250m}, limits: {memory: 256Mi}}}\n",
    );
    let d = yaml(&proxy_deployment(&kc, "ghcr.io/evenkeel/evenkeel:0.1.0").unwrap());
    assert_eq!(s(at(&d, "kind")), "Deployment");
    assert_eq!(s(at(&d, "metadata.name")), "main-proxy");
    assert_eq!(s(at(&d, "metadata.namespace")), "streams");
    assert_eq!(s(at(&d, "metadata.ownerReferences.0.kind")), "KafkaCluster");
    assert_eq!(
        at(&d, "metadata.ownerReferences.0.controller").as_bool(),
        Some(true)
    );
    assert_eq!(
        s(&at(&d, "metadata.labels")["app.kubernetes.io/managed-by"]),
        "evenkeel-operator"
    );
    assert_eq!(at(&d, "spec.replicas").as_i64(), Some(2));
    let proxy = at(&d, "spec.template.spec.containers.0");
    assert_eq!(s(&proxy["name"]), "proxy");
    assert_eq!(s(&proxy["image"]), "ghcr.io/evenkeel/evenkeel:0.1.0");
    let args: Vec<&str> = proxy["args"].as_sequence().unwrap().iter().map(s).collect();
    assert_eq!(
        args,
        [
            "proxy",
            "--bootstrap",
            "main-kafka-bootstrap.streams.svc:9095",
            "--listen",
            "0.0.0.0:8080",
            "--shutdown-delay-ms",
            "5000",
        ]
    );
    assert_eq!(s(at(proxy, "ports.0.name")), "http");
    assert_eq!(at(proxy, "ports.0.containerPort").as_i64(), Some(8080));
    assert_eq!(s(at(proxy, "readinessProbe.httpGet.path")), "/readyz");
    assert_eq!(
        at(proxy, "readinessProbe.httpGet.port").as_i64(),
        Some(8080)
    );
    assert_eq!(s(at(proxy, "livenessProbe.httpGet.path")), "/healthz");
    assert_eq!(s(at(proxy, "resources.requests.cpu")), "250m");
    assert_eq!(s(at(proxy, "resources.limits.memory")), "256Mi");
    assert_eq!(
        at(proxy, "securityContext.readOnlyRootFilesystem").as_bool(),
        Some(true)
    );
    assert_eq!(
        at(&d, "spec.template.spec.securityContext.runAsNonRoot").as_bool(),
        Some(true)
    );
    assert_eq!(
        at(&d, "spec.template.spec.containers")
            .as_sequence()
            .unwrap()
            .len(),
        1
    );

    let svc = yaml(&proxy_service(&kc).unwrap());
    assert_eq!(s(at(&svc, "metadata.name")), "main-proxy");
    assert_eq!(s(at(&svc, "metadata.ownerReferences.0.name")), "main");
    assert_eq!(s(at(&svc, "spec.type")), "ClusterIP");
    assert_eq!(s(at(&svc, "spec.ports.0.name")), "http");
    assert_eq!(at(&svc, "spec.ports.0.port").as_i64(), Some(8080));
    assert_eq!(s(at(&svc, "spec.ports.0.targetPort")), "http");
    // The Service reaches exactly the Deployment's pods.
    assert_eq!(
        at(&svc, "spec.selector"),
        at(&d, "spec.selector.matchLabels")
    );
    let template_labels = at(&d, "spec.template.metadata.labels")
        .as_mapping()
        .unwrap();
    for (k, v) in at(&d, "spec.selector.matchLabels").as_mapping().unwrap() {
        assert_eq!(template_labels.get(k), Some(v), "template lacks {k:?}");
    }
}

#[test]
fn a_proxy_roll_keeps_every_pod_serving_and_gives_a_stopping_one_its_delivery_timeout() {
    let d =
        yaml(&proxy_deployment(&cluster("replicas: 3\nproxy: {replicas: 2}\n"), "img").unwrap());
    assert_eq!(
        at(&d, "spec.strategy.rollingUpdate.maxUnavailable").as_i64(),
        Some(0)
    );
    // At SIGTERM the proxy serves 5 s more, unready, then waits for answers up to its
    // delivery.timeout.ms (30 s by default) and 5 s; the kubelet waits 5 s beyond that.
    assert_eq!(
        at(&d, "spec.template.spec.terminationGracePeriodSeconds").as_i64(),
        Some(45)
    );
    let longer =
        cluster("replicas: 3\nproxy: {replicas: 2, config: {delivery.timeout.ms: \"120000\"}}\n");
    let d = yaml(&proxy_deployment(&longer, "img").unwrap());
    assert_eq!(
        at(&d, "spec.template.spec.terminationGracePeriodSeconds").as_i64(),
        Some(135)
    );
}

#[test]
fn proxy_pods_are_not_selected_by_the_broker_pdb() {
    let kc = cluster("replicas: 3\nproxy: {replicas: 1}\n");
    let d = yaml(&proxy_deployment(&kc, "img").unwrap());
    let pod_labels = at(&d, "spec.template.metadata.labels")
        .as_mapping()
        .unwrap();
    assert_eq!(
        s(&at(&d, "spec.template.metadata.labels")["app.kubernetes.io/component"]),
        "proxy"
    );
    let selects = |selector: &serde_yaml::Value| {
        selector
            .as_mapping()
            .unwrap()
            .iter()
            .all(|(k, v)| pod_labels.get(k) == Some(v))
    };
    let pdb = yaml(&pod_disruption_budget(&kc).unwrap());
    assert!(!selects(at(&pdb, "spec.selector.matchLabels")), "the PDB");
    let sts = yaml(&statefulset(&kc, "img", 3).unwrap());
    assert!(
        !selects(at(&sts, "spec.selector.matchLabels")),
        "the StatefulSet"
    );
    for svc in [
        headless_service(&kc).unwrap(),
        bootstrap_service(&kc).unwrap(),
    ] {
        let svc = yaml(&svc);
        assert!(
            !selects(at(&svc, "spec.selector")),
            "{:?}",
            svc["metadata"]["name"]
        );
    }
    // ...and the proxy's own selector picks no broker pod.
    let broker_labels = at(&sts, "spec.template.metadata.labels")
        .as_mapping()
        .unwrap();
    let proxy_selector = at(&d, "spec.selector.matchLabels").as_mapping().unwrap();
    assert!(!proxy_selector
        .iter()
        .all(|(k, v)| broker_labels.get(k) == Some(v)));
}

#[test]
fn a_proxy_without_a_listener_or_a_spec_is_refused() {
    let err = proxy_deployment(&cluster("replicas: 3"), "img").unwrap_err();
    assert_eq!(err.to_string(), "KafkaCluster has no spec.proxy");
    let err = proxy_deployment(
        &cluster("replicas: 3\nlisteners: []\nproxy: {replicas: 1}\n"),
        "img",
    )
    .unwrap_err();
    assert_eq!(err.to_string(), "spec.listeners is empty");
}

fn proxy_args_of(yaml_spec: &str) -> Result<Vec<String>, BuildError> {
    let kc = cluster(yaml_spec);
    let d = proxy_deployment(&kc, "img")?;
    let container = &d.spec.unwrap().template.spec.unwrap().containers[0];
    Ok(container.args.clone().unwrap_or_default())
}

#[test]
fn proxy_config_becomes_producer_props_in_key_order() {
    let args = proxy_args_of(
        "replicas: 3\nproxy:\n  replicas: 1\n  config:\n    linger.ms: \"20\"\n    acks: \"1\"\n    \
         compression.type: lz4\n",
    )
    .unwrap();
    assert_eq!(
        args,
        [
            "proxy",
            "--bootstrap",
            "main-kafka-bootstrap.streams.svc:9092",
            "--listen",
            "0.0.0.0:8080",
            "--shutdown-delay-ms",
            "5000",
            "--producer-props",
            "acks=1",
            "--producer-props",
            "compression.type=lz4",
            "--producer-props",
            "linger.ms=20",
        ]
    );
    // A changed value changes the pod template, so the Deployment rolls its pods.
    let changed = proxy_args_of(
        "replicas: 3\nproxy:\n  replicas: 1\n  config: {acks: all, linger.ms: \"20\"}\n",
    )
    .unwrap();
    assert_eq!(
        &changed[7..],
        [
            "--producer-props",
            "acks=all",
            "--producer-props",
            "linger.ms=20"
        ]
    );
}

#[test]
fn proxy_config_may_not_set_the_bootstrap_servers() {
    let err = proxy_args_of(
        "replicas: 3\nproxy: {replicas: 1, config: {bootstrap.servers: \"elsewhere:9092\"}}\n",
    )
    .unwrap_err();
    assert!(matches!(err, BuildError::Invalid(_)), "{err:?}");
    assert_eq!(
        err.to_string(),
        "spec.proxy.config.bootstrap.servers is set by the operator and cannot be overridden"
    );
}

#[test]
fn proxy_config_the_proxy_would_refuse_at_start_is_refused() {
    for (config, names) in [
        ("{acks: \"2\"}", "acks"),
        ("{compression.type: brotli}", "compression.type"),
        // The proxy's own timeouts (request.timeout.ms 15000) make this too short.
        ("{delivery.timeout.ms: \"1000\"}", "delivery.timeout.ms"),
        ("{\"linger ms\": \"5\"}", "\"linger ms\""),
        ("{\"a=b\": \"5\"}", "\"a=b\""),
    ] {
        let err = proxy_args_of(&format!(
            "replicas: 3\nproxy: {{replicas: 1, config: {config}}}\n"
        ))
        .unwrap_err();
        let msg = err.to_string();
        assert!(matches!(err, BuildError::Invalid(_)), "{config}: {err:?}");
        assert!(
            msg.starts_with("spec.proxy.config") && msg.contains(names),
            "{config}: {msg}"
        );
    }
    // What the proxy takes passes through unchanged, known or not (Java only warns on unknown).
    let args = proxy_args_of(
        "replicas: 3\nproxy: {replicas: 1, config: {acks: \"0\", client.id: web, batch.size: \"65536\"}}\n",
    )
    .unwrap();
    assert_eq!(
        &args[7..],
        [
            "--producer-props",
            "acks=0",
            "--producer-props",
            "batch.size=65536",
            "--producer-props",
            "client.id=web",
        ]
    );
}

#[test]
fn a_tls_proxy_serves_https_with_its_secret_mounted_and_probed_over_https() {
    let kc = cluster("replicas: 3\nproxy: {replicas: 1, tls: true}\n");
    assert!(proxy_tls(&kc));
    let d = proxy_deployment(&kc, "img").unwrap();
    let pod = d.spec.unwrap().template.spec.unwrap();
    let c = &pod.containers[0];
    let args = c.args.clone().unwrap();
    let at = args
        .iter()
        .position(|a| a == "--ssl-keystore-location")
        .unwrap();
    assert_eq!(args[at + 1], "/etc/evenkeel-tls/proxy/proxy.pem");
    let mount = &c.volume_mounts.as_ref().unwrap()[0];
    assert_eq!(mount.mount_path, "/etc/evenkeel-tls/proxy");
    let volume = &pod.volumes.unwrap()[0];
    assert_eq!(volume.name, mount.name);
    let secret = volume.secret.as_ref().unwrap().secret_name.clone();
    assert_eq!(secret.as_deref(), Some("main-proxy-certs"));
    for probe in [&c.readiness_probe, &c.liveness_probe] {
        let get = probe.as_ref().unwrap().http_get.as_ref().unwrap();
        assert_eq!(get.scheme.as_deref(), Some("HTTPS"));
    }
    assert_eq!(
        Names::of(&kc).unwrap().proxy_url(true),
        "https://main-proxy.streams.svc:8080"
    );
    // Without tls: plain HTTP, no volume.
    let plain = cluster("replicas: 3\nproxy: {replicas: 1}\n");
    assert!(!proxy_tls(&plain));
    let pod = proxy_deployment(&plain, "img")
        .unwrap()
        .spec
        .unwrap()
        .template
        .spec
        .unwrap();
    assert!(pod.volumes.is_none());
    assert!(!pod.containers[0]
        .args
        .as_ref()
        .unwrap()
        .contains(&"--ssl-keystore-location".to_string()));
}

#[test]
fn on_a_secured_cluster_the_sidecar_and_the_proxy_log_in_with_their_own_certificates() {
    let kc = cluster(
        &format!("{SECURED}rebalancer: {{enabled: true}}\nproxy: {{replicas: 1}}\n")
            .replace("port: 9093", "port: 9095"),
    );
    // The sidecar: the pod's own name on the internal listener, its client keys in the ConfigMap.
    let st = yaml(&statefulset(&kc, "img", 3).unwrap());
    let side = at(&st, "spec.template.spec.containers.1");
    let args: Vec<&str> = side["args"].as_sequence().unwrap().iter().map(s).collect();
    assert!(
        args.windows(2).any(|w| w
            == [
                "--bootstrap",
                "$(POD_NAME).main-kafka-brokers.streams.svc:9091"
            ]),
        "{args:?}"
    );
    assert!(args
        .windows(2)
        .any(|w| w == ["--command-config", "/etc/evenkeel/rebalancer.properties"]));
    let mounts: Vec<&str> = side["volumeMounts"]
        .as_sequence()
        .unwrap()
        .iter()
        .map(|m| s(&m["mountPath"]))
        .collect();
    assert!(
        mounts.contains(&"/etc/evenkeel-tls/rebalancer"),
        "{mounts:?}"
    );
    let volumes = at(&st, "spec.template.spec.volumes").as_sequence().unwrap();
    assert!(volumes
        .iter()
        .any(|v| s(at(v, "secret.secretName")) == "main-rebalancer-certs"));
    let cm = config_map(&kc, 3).unwrap();
    let client = &cm.data.unwrap()["rebalancer.properties"];
    let props = crate::config::parse_properties(client);
    assert_eq!(props["security.protocol"], "SSL");
    assert_eq!(
        props["ssl.keystore.location"],
        "/etc/evenkeel-tls/rebalancer/rebalancer.pem"
    );
    assert_eq!(
        props["ssl.truststore.location"],
        "/etc/evenkeel-tls/cluster-ca/ca.crt"
    );
    // The proxy: its certificate and the cluster CA mounted, its producer on mutual TLS.
    let d = proxy_deployment(&kc, "img").unwrap();
    let pod = d.spec.unwrap().template.spec.unwrap();
    let args = pod.containers[0].args.clone().unwrap();
    for kv in [
        "security.protocol=SSL",
        "ssl.keystore.location=/etc/evenkeel-tls/proxy/proxy.pem",
        "ssl.truststore.location=/etc/evenkeel-tls/cluster-ca/ca.crt",
    ] {
        assert!(
            args.windows(2)
                .any(|w| w[0] == "--producer-props" && w[1] == kv),
            "{kv} missing from {args:?}"
        );
    }
    let secrets: Vec<String> = pod
        .volumes
        .unwrap()
        .iter()
        .filter_map(|v| v.secret.as_ref()?.secret_name.clone())
        .collect();
    assert_eq!(secrets, ["main-proxy-certs", "main-cluster-ca-cert"]);
    // The operator owns the proxy's security keys on a secured cluster.
    let mut own = kc.clone();
    own.spec.proxy.as_mut().unwrap().config =
        [("security.protocol".to_string(), "PLAINTEXT".to_string())].into();
    let err = proxy_deployment(&own, "img").unwrap_err().to_string();
    assert!(
        err.contains("spec.proxy.config.security.protocol is set by the operator"),
        "{err}"
    );
    // Unsecured: neither gets anything of that.
    let plain = cluster("replicas: 3\nrebalancer: {enabled: true}\n");
    let st = yaml(&statefulset(&plain, "img", 3).unwrap());
    let side = at(&st, "spec.template.spec.containers.1");
    assert!(side.get("volumeMounts").is_none());
    assert!(config_map(&plain, 3).unwrap().data.unwrap().len() == 1);
}

/// The `--producer-props` values of a proxy Deployment's container, and its Secret volumes.
fn proxy_pod_of(kc: &KafkaCluster) -> (Vec<String>, Vec<String>, Vec<String>) {
    let d = proxy_deployment(kc, "img").unwrap();
    let pod = d.spec.unwrap().template.spec.unwrap();
    let args = pod.containers[0].args.clone().unwrap();
    let props = args
        .windows(2)
        .filter(|w| w[0] == "--producer-props")
        .map(|w| w[1].clone())
        .collect();
    let secrets = pod
        .volumes
        .unwrap_or_default()
        .iter()
        .filter_map(|v| v.secret.as_ref()?.secret_name.clone())
        .collect();
    (args, props, secrets)
}

#[test]
fn a_proxy_with_basic_auth_logs_in_with_scram_from_its_own_kafkausers_secret() {
    let kc = cluster(
        &format!("{SECURED}proxy: {{replicas: 2, tls: true, authentication: {{type: basic}}}}\n")
            .replace("port: 9093", "port: 9095"),
    );
    let (args, props, secrets) = proxy_pod_of(&kc);
    // On the SCRAM listener (SASL_SSL: it has TLS), its users' logins passed on.
    assert!(
        args.windows(2)
            .any(|w| w == ["--bootstrap", "main-kafka-bootstrap.streams.svc:9095"]),
        "{args:?}"
    );
    assert!(
        args.windows(2)
            .any(|w| w == ["--authentication-method", "BASIC"]),
        "{args:?}"
    );
    for kv in [
        "security.protocol=SASL_SSL",
        "sasl.mechanism=SCRAM-SHA-512",
        "sasl.jaas.config=${secrets:/etc/evenkeel-tls/proxy-user:sasl.jaas.config}",
        "ssl.truststore.location=/etc/evenkeel-tls/cluster-ca/ca.crt",
    ] {
        assert!(props.iter().any(|p| p == kv), "{kv} missing from {props:?}");
    }
    assert!(
        !props.iter().any(|p| p.starts_with("ssl.keystore")),
        "{props:?}"
    );
    // Its HTTPS certificate, the CA, and the password Secret of KafkaUser main-proxy.
    assert_eq!(
        secrets,
        ["main-proxy-certs", "main-proxy", "main-cluster-ca-cert"]
    );
    let user = proxy_user(&kc).unwrap();
    assert_eq!(user.metadata.name.as_deref(), Some("main-proxy"));
    assert_eq!(user.spec.cluster_ref, "main");
    assert_eq!(
        user.spec.authentication.as_ref().map(|a| a.type_),
        Some(AuthenticationType::ScramSha512)
    );
    let acls = user.acl_bindings().expect("an authorization");
    assert!(
        acls.is_empty(),
        "the proxy's own login needs no ACL: {acls:?}"
    );
    assert_eq!(
        user.metadata.owner_references.unwrap()[0].uid,
        kc.metadata.uid.clone().unwrap()
    );
    // The properties the pod gets resolve, with the Secret mounted, to the user's JAAS line.
    let dir = tempfile::tempdir().unwrap();
    let jaas = "org.apache.kafka.common.security.scram.ScramLoginModule required username=\"main-proxy\" password=\"p\";";
    std::fs::write(dir.path().join("sasl.jaas.config"), jaas).unwrap();
    let local: Vec<(String, String)> = props
        .iter()
        .filter_map(|kv| kv.split_once('='))
        .map(|(k, v)| {
            (
                k.to_string(),
                v.replace(
                    "/etc/evenkeel-tls/proxy-user",
                    &dir.path().display().to_string(),
                ),
            )
        })
        .filter(|(k, _)| !k.starts_with("ssl."))
        .map(|(k, v)| {
            if k == "security.protocol" {
                (k, "SASL_PLAINTEXT".into())
            } else {
                (k, v)
            }
        })
        .collect();
    let listen = "127.0.0.1:0".parse().unwrap();
    let config = crate::proxy::ProxyConfig::new(listen, "b:9093", &local).unwrap();
    assert_eq!(config.producer.security.username(), Some("main-proxy"));

    // A plaintext SCRAM listener: SASL_PLAINTEXT, no truststore; the TLS one is preferred.
    let both = cluster(
        "replicas: 3\nlisteners:\n- {name: plain, port: 9092, authentication: {type: scram-sha-512}}\n\
         - {name: tls, port: 9095, tls: true, authentication: {type: scram-sha-512}}\n\
         proxy: {replicas: 1, authentication: {type: basic}}\n",
    );
    assert_eq!(proxy_login_listener(&both).unwrap().unwrap().name, "tls");
    let plain = cluster(
        "replicas: 3\nlisteners:\n- {name: plain, port: 9092, authentication: {type: scram-sha-512}}\n\
         proxy: {replicas: 1, authentication: {type: basic}}\n",
    );
    let (_, props, secrets) = proxy_pod_of(&plain);
    assert!(props
        .iter()
        .any(|p| p == "security.protocol=SASL_PLAINTEXT"));
    assert!(!props.iter().any(|p| p.starts_with("ssl.")), "{props:?}");
    assert_eq!(secrets, ["main-proxy", "main-cluster-ca-cert"]);
    assert!(proxy_user(&plain).unwrap().spec.authorization.is_none());
    // No listener takes SCRAM: refused, saying why.
    let none = cluster(
        "replicas: 3\nlisteners:\n- {name: mtls, port: 9094, tls: true, authentication: {type: tls}}\n\
         proxy: {replicas: 1, authentication: {type: basic}}\n",
    );
    let err = proxy_deployment(&none, "img").unwrap_err().to_string();
    assert!(err.contains("scram-sha-512"), "{err}");
}

#[test]
fn cluster_id_is_the_uid_in_kafka_form() {
    let kc = cluster("replicas: 1");
    let id = cluster_id(&kc).unwrap();
    assert_eq!(id.len(), 22);
    assert_eq!(id, "DyprPB1OT1CKa3yNng8aKw");
}

#[test]
fn the_first_three_pods_vote_and_the_rest_are_brokers() {
    use k8s_openapi::api::apps::v1::StatefulSet;
    // A new cluster: up to three controllers.
    assert_eq!(controller_count(&cluster("replicas: 1"), None), 1);
    assert_eq!(controller_count(&cluster("replicas: 5"), None), 3);
    // An existing one keeps what its StatefulSet recorded, whatever the spec says now.
    let st = statefulset(&cluster("replicas: 1"), "img", 1).unwrap();
    assert_eq!(
        st.metadata.annotations.as_ref().unwrap()[CONTROLLERS_ANNOTATION],
        "1"
    );
    assert_eq!(controller_count(&cluster("replicas: 6"), Some(&st)), 1);
    assert_eq!(
        controller_count(&cluster("replicas: 6"), Some(&StatefulSet::default())),
        3
    );
    // Pod 4 of a five-pod cluster reads the shared file as a broker that follows pods 0-2.
    let props = server_properties(&cluster("replicas: 5"), 3).unwrap();
    let mut p = crate::config::parse_properties(&props);
    for (k, v) in [
        ("node.id", "4"),
        ("advertised.listeners", "PLAIN://main-kafka-4:9092"),
    ] {
        p.insert(k.into(), v.into());
    }
    let (broker, _) = crate::config::broker::BrokerConfig::from_props(&p).unwrap();
    assert!(broker.cluster.roles.broker && !broker.cluster.roles.controller);
    assert_eq!(broker.cluster.voters.len(), 3);
    p.insert("node.id".into(), "2".into());
    let (voter, _) = crate::config::broker::BrokerConfig::from_props(&p).unwrap();
    assert!(voter.cluster.roles.broker && voter.cluster.roles.controller);
}

#[test]
fn the_rebalancers_identity_is_owned_labelled_and_named_after_the_cluster() {
    let kc = cluster("replicas: 3\nrebalancer: {enabled: true}\n");
    let objects = [
        (
            "ServiceAccount",
            yaml(&rebalancer_service_account(&kc).unwrap()),
        ),
        ("Role", yaml(&rebalancer_role(&kc).unwrap())),
        ("RoleBinding", yaml(&rebalancer_role_binding(&kc).unwrap())),
    ];
    for (kind, o) in &objects {
        assert_eq!(s(at(o, "kind")), *kind);
        assert_eq!(s(at(o, "metadata.name")), "main-rebalancer");
        assert_eq!(s(at(o, "metadata.namespace")), "streams");
        let owner = at(o, "metadata.ownerReferences.0");
        assert_eq!(s(&owner["kind"]), "KafkaCluster");
        assert_eq!(s(&owner["uid"]), "0f2a6b3c-1d4e-4f50-8a6b-7c8d9e0f1a2b");
        assert_eq!(owner["controller"].as_bool(), Some(true));
        let labels = at(o, "metadata.labels");
        assert_eq!(s(&labels["app.kubernetes.io/component"]), "rebalancer");
        assert_eq!(s(&labels["kafka.evenkeel.dev/cluster"]), "main");
        assert_eq!(
            s(&labels["app.kubernetes.io/managed-by"]),
            "evenkeel-operator"
        );
    }
    let binding = &objects[2].1;
    assert_eq!(
        serde_json::to_value(rebalancer_role_binding(&kc).unwrap()).unwrap()["roleRef"],
        serde_json::json!({"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "main-rebalancer"})
    );
    assert_eq!(at(binding, "subjects").as_sequence().map(Vec::len), Some(1));
    assert_eq!(s(at(binding, "subjects.0.kind")), "ServiceAccount");
    assert_eq!(s(at(binding, "subjects.0.name")), "main-rebalancer");
    assert_eq!(s(at(binding, "subjects.0.namespace")), "streams");
}

#[test]
fn the_rebalancers_role_grants_events_and_its_own_cluster_and_status_only() {
    let role = rebalancer_role(&cluster("replicas: 3\nrebalancer: {enabled: true}\n")).unwrap();
    assert_eq!(
        serde_json::to_value(&role.rules).unwrap(),
        serde_json::json!([
            {"apiGroups": [""], "resources": ["events"], "verbs": ["create", "patch"]},
            {"apiGroups": ["events.k8s.io"], "resources": ["events"], "verbs": ["create", "patch"]},
            {"apiGroups": ["kafka.evenkeel.dev"], "resources": ["kafkaclusters"],
             "resourceNames": ["main"], "verbs": ["get"]},
            {"apiGroups": ["kafka.evenkeel.dev"], "resources": ["kafkaclusters/status"],
             "resourceNames": ["main"], "verbs": ["get", "patch"]},
        ])
    );
}

#[test]
fn broker_pods_run_as_the_rebalancers_account_only_while_it_is_enabled() {
    let on = yaml(
        &statefulset(
            &cluster("replicas: 3\nrebalancer: {enabled: true}\n"),
            "img",
            3,
        )
        .unwrap(),
    );
    assert_eq!(
        s(at(&on, "spec.template.spec.serviceAccountName")),
        "main-rebalancer"
    );
    // The deprecated field too, or the API server would copy it back when the rebalancer goes.
    assert_eq!(
        s(at(&on, "spec.template.spec.serviceAccount")),
        "main-rebalancer"
    );
    let side = at(&on, "spec.template.spec.containers.1");
    let args: Vec<&str> = side["args"].as_sequence().unwrap().iter().map(s).collect();
    assert!(args.windows(2).any(|w| w == ["--kafka-cluster", "main"]));
    let off = yaml(&statefulset(&cluster("replicas: 3"), "img", 3).unwrap());
    for field in ["serviceAccountName", "serviceAccount"] {
        assert!(
            at(&off, "spec.template.spec")[field].is_null(),
            "{field}: the namespace's default account without the rebalancer"
        );
    }
}

#[test]
fn a_cluster_id_that_starts_with_a_dash_reaches_format_as_one_argument() {
    // A uid whose first byte is 0xf8 encodes to an id starting with '-': given as its own
    // argument, `evenkeel format` took it for a flag and every broker's init container failed.
    let mut kc = cluster("replicas: 3");
    kc.metadata.uid = Some("f8b2c6e3-1d4e-4f50-8a6b-7c8d9e0f1a2b".into());
    let id = cluster_id(&kc).unwrap();
    assert!(id.starts_with('-'), "{id}");
    let st = yaml(&statefulset(&kc, "img", 3).unwrap());
    let init = at(&st, "spec.template.spec.initContainers.0");
    let args: Vec<&str> = init["args"].as_sequence().unwrap().iter().map(s).collect();
    assert!(
        args.contains(&format!("--cluster-id={id}").as_str()),
        "{args:?}"
    );
    assert!(!args.contains(&id.as_str()), "{args:?}");
}

/// A secured cluster: `tls` with SCRAM-SHA-512, `mtls` with client certificates, simple
/// authorization.
const SECURED: &str = "replicas: 3
listeners:
- {name: tls, port: 9093, tls: true, authentication: {type: scram-sha-512}}
- {name: mtls, port: 9094, tls: true, authentication: {type: tls}}
authorization: {type: simple, superUsers: [admin, 'CN=ops,O=acme']}
";

/// `SECURED` with the first listener on 9095 (9093 is the controller's).
fn secured() -> KafkaCluster {
    cluster(&SECURED.replace("port: 9093", "port: 9095"))
}

fn property<'a>(props: &'a str, key: &str) -> Option<&'a str> {
    props
        .lines()
        .find_map(|l| l.strip_prefix(key)?.strip_prefix('='))
}

#[test]
fn a_secured_cluster_renders_ssl_sasl_the_internal_listener_and_the_authorizer() {
    let props = server_properties(&secured(), 3).unwrap();
    let p = |k| property(&props, k);
    assert_eq!(
        p("listeners"),
        Some("REPLICATION://0.0.0.0:9091,TLS://0.0.0.0:9095,MTLS://0.0.0.0:9094,CONTROLLER://0.0.0.0:9093")
    );
    assert_eq!(
        p("listener.security.protocol.map"),
        Some("REPLICATION:SSL,TLS:SASL_SSL,MTLS:SSL,CONTROLLER:SSL")
    );
    assert_eq!(p("inter.broker.listener.name"), Some("REPLICATION"));
    // The internal and the controller listener: mutual TLS against the cluster CA, not the
    // clients CA.
    for l in ["replication", "controller"] {
        let ssl =
            |k: &str| property(&props, &format!("listener.name.{l}.ssl.{k}")).map(str::to_string);
        assert_eq!(ssl("keystore.type").as_deref(), Some("PEM"), "{l}");
        assert_eq!(ssl("client.auth").as_deref(), Some("required"), "{l}");
        assert_eq!(
            ssl("truststore.location").as_deref(),
            Some("/etc/evenkeel-tls/cluster-ca/ca.crt"),
            "{l}"
        );
    }
    assert_eq!(p("listener.name.tls.ssl.keystore.type"), Some("PEM"));
    assert_eq!(
        p("listener.name.tls.sasl.enabled.mechanisms"),
        Some("SCRAM-SHA-512")
    );
    assert_eq!(p("listener.name.tls.ssl.client.auth"), None);
    assert_eq!(p("listener.name.mtls.ssl.client.auth"), Some("required"));
    assert_eq!(p("listener.name.mtls.ssl.truststore.type"), Some("PEM"));
    assert_eq!(
        p("listener.name.mtls.ssl.truststore.location"),
        Some("/etc/evenkeel-tls/clients-ca/ca.crt")
    );
    assert_eq!(p("listener.name.mtls.sasl.enabled.mechanisms"), None);
    assert_eq!(
        p("authorizer.class.name"),
        Some("org.apache.kafka.metadata.authorizer.StandardAuthorizer")
    );
    assert_eq!(
        p("super.users"),
        Some(
            "User:CN=main-kafka,O=evenkeel.dev;User:CN=evenkeel-operator,O=evenkeel.dev;\
             User:admin;User:CN=ops,O=acme"
        )
    );
}

#[test]
fn the_rendered_properties_are_what_the_broker_accepts() {
    // The broker's own parser, with the overrides the pod adds on its command line.
    let props = server_properties(&secured(), 3).unwrap();
    let mut map: std::collections::BTreeMap<String, String> = props
        .lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(|l| l.split_once('='))
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    map.insert("node.id".into(), "0".into());
    for l in ["replication", "controller", "tls", "mtls"] {
        map.insert(
            format!("listener.name.{l}.ssl.keystore.location"),
            "/etc/evenkeel-tls/brokers/main-kafka-0.pem".into(),
        );
    }
    map.insert(
        "advertised.listeners".into(),
        "REPLICATION://b:9091,TLS://b:9095,MTLS://b:9094".into(),
    );
    let (_, unknown) = crate::config::broker::BrokerConfig::from_props(&map)
        .unwrap_or_else(|e| panic!("the broker refuses what the operator renders: {e}"));
    assert!(
        unknown.is_empty(),
        "keys the broker does not know: {unknown:?}"
    );
}

#[test]
fn a_plain_cluster_keeps_its_first_listener_for_everything() {
    let kc = cluster("replicas: 1");
    let props = server_properties(&kc, 1).unwrap();
    assert_eq!(
        property(&props, "inter.broker.listener.name"),
        Some("PLAIN")
    );
    assert_eq!(property(&props, "authorizer.class.name"), None);
    assert!(!props.contains("REPLICATION"));
    assert_eq!(internal_port(&kc), 9092);
    let sts = yaml(&statefulset(&kc, "evenkeel:test", 1).unwrap());
    let volumes = at(&sts, "spec.template.spec.volumes")
        .as_sequence()
        .unwrap();
    assert_eq!(volumes.len(), 1, "{volumes:?}");
}

#[test]
fn a_secured_cluster_mounts_its_secrets_and_names_each_pods_keystore() {
    let kc = secured();
    let sts = yaml(&statefulset(&kc, "evenkeel:test", 3).unwrap());
    let pod = at(&sts, "spec.template.spec");
    let secrets: Vec<&str> = pod["volumes"]
        .as_sequence()
        .unwrap()
        .iter()
        .filter_map(|v| v["secret"]["secretName"].as_str())
        .collect();
    assert_eq!(
        secrets,
        [
            "main-kafka-brokers",
            "main-cluster-ca-cert",
            "main-clients-ca-cert"
        ]
    );
    for container in [&pod["containers"][0], &pod["initContainers"][0]] {
        let mounts: Vec<&str> = container["volumeMounts"]
            .as_sequence()
            .unwrap()
            .iter()
            .filter_map(|m| m["mountPath"].as_str())
            .collect();
        assert!(mounts.contains(&"/etc/evenkeel-tls/brokers"), "{mounts:?}");
        assert!(
            mounts.contains(&"/etc/evenkeel-tls/clients-ca"),
            "{mounts:?}"
        );
        let args: Vec<&str> = container["args"]
            .as_sequence()
            .unwrap()
            .iter()
            .filter_map(|a| a.as_str())
            .collect();
        for l in ["tls", "mtls"] {
            let want = format!(
                "listener.name.{l}.ssl.keystore.location=/etc/evenkeel-tls/brokers/$(POD_NAME).pem"
            );
            assert!(args.contains(&want.as_str()), "{args:?}");
        }
    }
    let args = &pod["containers"][0]["args"];
    let advertised = args
        .as_sequence()
        .unwrap()
        .iter()
        .filter_map(|a| a.as_str()?.strip_prefix("advertised.listeners="))
        .next()
        .unwrap();
    assert!(
        advertised.starts_with("REPLICATION://$(POD_NAME).main-kafka-brokers.streams.svc:9091,"),
        "{advertised}"
    );
    let ports: Vec<i64> = yaml(&bootstrap_service(&kc).unwrap())["spec"]["ports"]
        .as_sequence()
        .unwrap()
        .iter()
        .filter_map(|p| p["port"].as_i64())
        .collect();
    assert_eq!(ports, [9095, 9094, 9091]);
    assert_eq!(internal_port(&kc), 9091);
}

#[test]
fn securing_a_listener_changes_the_config_hash() {
    let plain = cluster("replicas: 1\nlisteners:\n- {name: tls, port: 9095}\n");
    let tls = cluster("replicas: 1\nlisteners:\n- {name: tls, port: 9095, tls: true}\n");
    let hash = |kc: &KafkaCluster| config_hash(&server_properties(kc, 1).unwrap(), "img");
    assert_ne!(hash(&plain), hash(&tls));
}

#[test]
fn insecure_combinations_are_refused_with_a_message() {
    let refusal = |spec: &str| {
        server_properties(&cluster(spec), 1)
            .unwrap_err()
            .to_string()
    };
    let err =
        refusal("replicas: 1\nlisteners:\n- {name: m, port: 9094, authentication: {type: tls}}\n");
    assert!(
        err.contains("authentication type tls needs tls: true"),
        "{err}"
    );
    let err = refusal(
        "replicas: 1\nlisteners:\n- {name: a, port: 9091, tls: true, authentication: {type: tls}}\n",
    );
    assert!(
        err.contains("taken by the operator's own listeners"),
        "{err}"
    );
    let err = refusal(
        "replicas: 1\nlisteners:\n- {name: replication, port: 9094, authentication: {type: scram-sha-512}}\n",
    );
    assert!(
        err.contains("taken by the operator's own listeners"),
        "{err}"
    );
    let spec = format!(
        "{}config:\n  super.users: User:x\n",
        SECURED.replace("port: 9093", "port: 9095")
    );
    assert_eq!(
        refusal(&spec),
        "spec.config.super.users is set by the operator and cannot be overridden"
    );
    let spec = SECURED
        .replace("port: 9093", "port: 9095")
        .replace("[admin,", "['a;b',");
    assert!(refusal(&spec).contains("is not a user name"));
}

#[test]
fn the_controller_listener_stays_as_the_statefulset_records_it() {
    let tls = secured();
    let protocols = |q: QuorumShape| {
        let props = server_properties(&tls, q).unwrap();
        property(&props, "listener.security.protocol.map").map(str::to_string)
    };
    let new = quorum_shape(&tls, None);
    assert_eq!(new.tls, None);
    assert!(protocols(new).unwrap().ends_with(",CONTROLLER:SSL"));
    // Recorded on the StatefulSet, with each pod's keystore on its command line.
    let running = statefulset(&tls, "img", new).unwrap();
    let annotations = running.metadata.annotations.clone().unwrap();
    assert_eq!(annotations[CONTROLLER_TLS_ANNOTATION], "true");
    let pod = running
        .spec
        .as_ref()
        .unwrap()
        .template
        .spec
        .as_ref()
        .unwrap();
    let keystore = "listener.name.controller.ssl.keystore.location=";
    for c in pod
        .init_containers
        .iter()
        .flatten()
        .chain(&pod.containers[..1])
    {
        let args = c.args.as_ref().unwrap();
        assert!(args.iter().any(|a| a.starts_with(keystore)), "{args:?}");
    }
    assert_eq!(quorum_shape(&tls, Some(&running)).tls, Some(true));
    // A secured cluster an earlier operator made: no record, so its listener is PLAINTEXT
    // (until it moves: `controller_move`).
    let mut earlier = running.clone();
    earlier.metadata.annotations = Some([(CONTROLLERS_ANNOTATION.to_string(), "3".into())].into());
    let kept = quorum_shape(&tls, Some(&earlier));
    assert_eq!(
        kept,
        QuorumShape {
            controllers: 3,
            tls: Some(false),
            spare: None,
        }
    );
    assert!(protocols(kept).unwrap().ends_with(",CONTROLLER:PLAINTEXT"));
    let old = statefulset(&tls, "img", kept).unwrap();
    assert_eq!(
        old.metadata.annotations.unwrap()[CONTROLLER_TLS_ANNOTATION],
        "false"
    );
    // An unsecured cluster's controller listener is PLAINTEXT.
    let plain = cluster("replicas: 3\nlisteners:\n- {name: tls, port: 9095}\n");
    let props = server_properties(&plain, 3).unwrap();
    assert!(property(&props, "listener.security.protocol.map")
        .unwrap()
        .ends_with(",CONTROLLER:PLAINTEXT"));
}

/// What an operator applies to `running`, pass after pass, each once the last roll is done
/// (`migration::next_steps`), until a pass changes nothing: each step's stage, properties and
/// StatefulSet.
fn walk(target: &KafkaCluster, running: &StatefulSet) -> Vec<(SecurityStage, String, StatefulSet)> {
    let mut sts = running.clone();
    let mut out = Vec::new();
    loop {
        let recorded = quorum_shape(target, Some(&sts));
        let at = migration::recorded(Some(&sts));
        let (stage, quorum) = migration::next_steps(target, at, recorded, true);
        if Some(stage) == at && quorum == recorded {
            return out;
        }
        let view = migration::staged(target, stage);
        sts = statefulset(&view, "img", quorum).unwrap();
        out.push((
            stage,
            server_properties(&view, quorum).unwrap(),
            sts.clone(),
        ));
        assert!(
            out.len() <= 8,
            "no end: {:?}",
            out.iter().map(|o| o.0).collect::<Vec<_>>()
        );
    }
}

/// `SECURED` with its first listener PLAINTEXT on 9092, and the same cluster unsecured.
fn secured_and_plain() -> (KafkaCluster, KafkaCluster) {
    let target = cluster(&SECURED.replace("name: tls, port: 9093", "name: plain, port: 9092"));
    let plain = cluster("replicas: 3\nlisteners:\n- {name: plain, port: 9092}\n");
    (target, plain)
}

#[test]
fn a_running_cluster_is_secured_in_five_rolls_ending_as_one_created_secured() {
    use SecurityStage::*;
    let (target, plain) = secured_and_plain();
    let running = statefulset(&plain, "img", 3).unwrap();
    assert_eq!(migration::recorded(Some(&running)), Some(Unsecured));
    assert!(migration::check(Some(&running)).is_ok());
    let steps = walk(&target, &running);
    let stages: Vec<SecurityStage> = steps.iter().map(|s| s.0).collect();
    assert_eq!(stages, [Internal, InterBroker, Secured, Secured, Secured]);
    let p = |i: usize, k: &str| property(&steps[i].1, k).map(str::to_string);
    let voters_on = |i: usize| {
        let voters = p(i, "controller.quorum.voters").unwrap();
        let ports: BTreeSet<&str> = voters
            .split(',')
            .filter_map(|v| v.rsplit(':').next())
            .collect();
        ports.into_iter().map(str::to_string).collect::<Vec<_>>()
    };

    // Step 1: the internal listener and a spare controller listener (mutual TLS) are added,
    // both unused; replication stays on the first listener, PLAINTEXT, without an authorizer.
    assert_eq!(
        p(0, "listeners").as_deref(),
        Some("PLAIN://0.0.0.0:9092,MTLS://0.0.0.0:9094,REPLICATION://0.0.0.0:9091,CONTROLLER://0.0.0.0:9093,CONTROLLER_SPARE://0.0.0.0:9090")
    );
    assert_eq!(
        p(0, "listener.security.protocol.map").as_deref(),
        Some("PLAIN:PLAINTEXT,MTLS:PLAINTEXT,REPLICATION:SSL,CONTROLLER:PLAINTEXT,CONTROLLER_SPARE:SSL")
    );
    assert_eq!(
        p(0, "controller.listener.names").as_deref(),
        Some("CONTROLLER,CONTROLLER_SPARE")
    );
    assert_eq!(voters_on(0), ["9093"]);
    assert_eq!(p(0, "inter.broker.listener.name").as_deref(), Some("PLAIN"));
    assert_eq!(p(0, "authorizer.class.name"), None);
    assert_eq!(
        p(0, "listener.name.controller_spare.ssl.client.auth").as_deref(),
        Some("required")
    );
    let args = yaml(&steps[0].2);
    let args = at(&args, "spec.template.spec.containers.0.args");
    let keystore = "listener.name.controller_spare.ssl.keystore.location=";
    assert!(
        args.as_sequence()
            .unwrap()
            .iter()
            .any(|a| s(a).starts_with(keystore)),
        "{args:?}"
    );
    assert_eq!(
        internal_port(&migration::staged(&target, Internal)),
        9092,
        "the operator still uses the first listener"
    );

    // Step 2: replication on the internal listener; everyone dials the spare.
    assert_eq!(
        p(1, "inter.broker.listener.name").as_deref(),
        Some("REPLICATION")
    );
    assert_eq!(
        p(1, "controller.listener.names").as_deref(),
        Some("CONTROLLER_SPARE,CONTROLLER")
    );
    assert_eq!(voters_on(1), ["9090"]);
    assert_eq!(p(1, "authorizer.class.name"), None);
    assert_eq!(
        internal_port(&migration::staged(&target, InterBroker)),
        9091
    );

    // Step 3: the spec's listeners and authorizer; the controller port turns mutual TLS while
    // nobody dials it.
    assert_eq!(
        p(2, "listener.security.protocol.map").as_deref(),
        Some("REPLICATION:SSL,PLAIN:SASL_SSL,MTLS:SSL,CONTROLLER_SPARE:SSL,CONTROLLER:SSL")
    );
    assert_eq!(voters_on(2), ["9090"]);
    assert!(p(2, "authorizer.class.name").is_some());

    // Steps 4 and 5: the controller port dialled again, then the spare gone: as created.
    assert_eq!(
        p(3, "controller.listener.names").as_deref(),
        Some("CONTROLLER,CONTROLLER_SPARE")
    );
    assert_eq!(voters_on(3), ["9093"]);
    let created = server_properties(&target, 3).unwrap();
    assert_eq!(
        steps[4].1, created,
        "the last step renders what a created secured cluster has"
    );
    let annotations = steps[4].2.metadata.annotations.clone().unwrap();
    assert_eq!(annotations[CONTROLLER_TLS_ANNOTATION], "true");
    assert!(
        !annotations.contains_key(CONTROLLER_SPARE_ANNOTATION),
        "{annotations:?}"
    );
    assert!(
        controller_network_policy(&target, quorum_shape(&target, Some(&steps[4].2)), &[])
            .unwrap()
            .is_none(),
        "nothing left to fence"
    );
}

#[test]
fn a_secured_cluster_is_unsecured_in_five_rolls_its_controller_listener_first() {
    use SecurityStage::*;
    let (target, plain) = secured_and_plain();
    // Created secured, and secured while running: both walk back to what a created
    // unsecured cluster has.
    let created = statefulset(&target, "img", 3).unwrap();
    let secured_later = walk(&target, &statefulset(&plain, "img", 3).unwrap())
        .pop()
        .unwrap()
        .2;
    for running in [created, secured_later] {
        let steps = walk(&plain, &running);
        let stages: Vec<SecurityStage> = steps.iter().map(|s| s.0).collect();
        assert_eq!(
            stages,
            [InterBroker, Internal, Unsecured, Unsecured, Unsecured]
        );
        let p = |i: usize, k: &str| property(&steps[i].1, k).map(str::to_string);
        // The spare comes PLAINTEXT and fenced; the controller port turns PLAINTEXT only once
        // nobody dials it, and the certificates go with it.
        assert_eq!(
            p(0, "listener.security.protocol.map").as_deref(),
            Some("REPLICATION:SSL,PLAIN:PLAINTEXT,CONTROLLER:SSL,CONTROLLER_SPARE:PLAINTEXT")
        );
        let quorum = quorum_shape(&plain, Some(&steps[0].2));
        let policy =
            controller_network_policy(&migration::staged(&plain, InterBroker), quorum, &[])
                .unwrap()
                .map(|p| yaml(&p))
                .expect("the PLAINTEXT spare is fenced");
        assert_eq!(
            at(&policy, "spec.ingress.0.ports.0.port").as_i64(),
            Some(9090)
        );
        assert_eq!(
            at(&policy, "spec.ingress.1.ports.1.port").as_i64(),
            Some(9091)
        );
        assert_eq!(
            p(1, "controller.listener.names").as_deref(),
            Some("CONTROLLER_SPARE,CONTROLLER")
        );
        assert_eq!(
            p(2, "listener.security.protocol.map").as_deref(),
            Some("PLAIN:PLAINTEXT,CONTROLLER_SPARE:PLAINTEXT,CONTROLLER:PLAINTEXT")
        );
        assert_eq!(steps[4].1, server_properties(&plain, 3).unwrap());
    }
}

#[test]
fn a_listener_on_the_spare_controller_port_is_refused_while_it_is_there() {
    let (target, plain) = secured_and_plain();
    let steps = walk(&target, &statefulset(&plain, "img", 3).unwrap());
    let quorum = quorum_shape(&target, Some(&steps[0].2));
    let taken = cluster(&SECURED.replace("name: tls, port: 9093", "name: plain, port: 9090"));
    let err = server_properties(&taken, quorum).unwrap_err().to_string();
    assert!(
        err.contains("port 9090 is taken by the spare controller listener"),
        "{err}"
    );
    // A new move picks a port no listener takes.
    assert_eq!(crate::operator::controller_move::spare_port(&taken), 9089);
}

#[test]
fn a_plaintext_controller_listener_is_fenced_to_the_brokers_and_a_tls_one_is_not() {
    use SecurityStage::*;
    let plain = cluster("replicas: 3\nlisteners:\n- {name: plain, port: 9092}\n");
    let before = statefulset(&plain, "img", 3).unwrap();
    let target = cluster(&SECURED.replace("name: tls, port: 9093", "name: plain, port: 9092"));
    let quorum = quorum_shape(&target, Some(&before));
    let policy = |kc: &KafkaCluster, q| {
        controller_network_policy(kc, q, &[])
            .unwrap()
            .map(|p| yaml(&p))
    };
    assert!(policy(&migration::staged(&plain, Unsecured), quorum).is_none());
    assert!(
        policy(&secured(), 3.into()).is_none(),
        "created secured: mutual TLS"
    );
    for stage in [Internal, InterBroker, Secured] {
        let p = policy(&migration::staged(&target, stage), quorum).expect("a policy");
        assert_eq!(s(at(&p, "metadata.name")), "main-kafka-controller");
        let brokers = at(&p, "spec.podSelector.matchLabels");
        assert_eq!(s(&brokers["app.kubernetes.io/component"]), "broker");
        let controller = at(&p, "spec.ingress.0");
        assert_eq!(
            &controller["from"][0]["podSelector"]["matchLabels"],
            brokers
        );
        assert_eq!(controller["ports"][0]["port"].as_i64(), Some(9093));
        // Every other port, the metrics', the listeners' and the internal one's, from anywhere.
        let open = at(&p, "spec.ingress.1");
        assert!(open.get("from").is_none());
        let range = |i: usize| {
            let r = &open["ports"][i];
            (r["port"].as_i64().unwrap(), r["endPort"].as_i64().unwrap())
        };
        assert_eq!((range(0), range(1)), ((1, 9092), (9094, 65535)));
    }
}

#[test]
fn a_cluster_whose_internal_listener_an_earlier_operator_made_plaintext_is_refused() {
    let tls = secured();
    let running_tls = statefulset(&tls, "img", 3).unwrap();
    assert!(migration::check(Some(&running_tls)).is_ok());
    // A cluster an earlier operator secured: its internal listener has no keystore (PLAINTEXT).
    let mut earlier = running_tls.clone();
    let pod = earlier
        .spec
        .as_mut()
        .unwrap()
        .template
        .spec
        .as_mut()
        .unwrap();
    let args = pod.containers[0].args.as_mut().unwrap();
    args.retain(|a| !a.starts_with("listener.name.replication.ssl.keystore.location="));
    let err = migration::check(Some(&earlier)).unwrap_err().to_string();
    assert!(
        err.contains("is PLAINTEXT (it was secured by an earlier operator)"),
        "{err}"
    );
}

#[test]
fn the_ports_left_open_are_every_other_tcp_port() {
    assert_eq!(open_ranges(&[9093]), [(1, 9092), (9094, 65535)]);
    assert_eq!(
        open_ranges(&[9093, 9090]),
        [(1, 9089), (9091, 9092), (9094, 65535)]
    );
    assert_eq!(open_ranges(&[1, 2, 65535]), [(3, 65534)]);
}

#[test]
fn ports_pods_not_yet_rolled_serve_plaintext_stay_fenced() {
    let kc = secured();
    let tls = quorum_shape(&kc, None);
    assert!(controller_network_policy(&kc, tls, &[]).unwrap().is_none());
    let policy = controller_network_policy(&kc, tls, &[9093, 9093])
        .unwrap()
        .expect("9093 still fenced");
    assert_eq!(fenced_ports(&policy), [9093]);
    let spare = QuorumShape {
        spare: Some(crate::operator::controller_move::SpareListener {
            tls: false,
            port: 9090,
            dialled: true,
        }),
        ..tls
    };
    let policy = controller_network_policy(&kc, spare, &[9093])
        .unwrap()
        .unwrap();
    assert_eq!(fenced_ports(&policy), [9090, 9093]);
}
