//! The committed CRD files match the code (`evenkeel crdgen --check`), and the Helm chart ships
//! exactly those files.

use std::path::Path;
use std::process::Command;

#[test]
fn committed_crds_match_the_generated_ones() {
    let out = Command::new(env!("CARGO_BIN_EXE_evenkeel"))
        .args(["crdgen", "--check", "--out"])
        .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("crds"))
        .output()
        .expect("evenkeel runs");
    assert!(
        out.status.success(),
        "crds/ is stale: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn crdgen_check_fails_on_a_stale_file() {
    let dir = tempfile::tempdir().unwrap();
    let write = Command::new(env!("CARGO_BIN_EXE_evenkeel"))
        .args(["crdgen", "--out"])
        .arg(dir.path())
        .output()
        .unwrap();
    assert!(write.status.success());
    let file = dir.path().join("kafkatopics.kafka.evenkeel.dev.yaml");
    let text = std::fs::read_to_string(&file).unwrap();
    std::fs::write(&file, text.replace("self >= oldSelf", "true")).unwrap();
    let check = Command::new(env!("CARGO_BIN_EXE_evenkeel"))
        .args(["crdgen", "--check", "--out"])
        .arg(dir.path())
        .output()
        .unwrap();
    assert!(!check.status.success());
    let err = String::from_utf8_lossy(&check.stderr);
    assert!(err.contains("kafkatopics.kafka.evenkeel.dev.yaml"), "{err}");
}

#[test]
fn chart_ships_the_same_crds() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    for name in [
        "kafkaclusters.kafka.evenkeel.dev.yaml",
        "kafkatopics.kafka.evenkeel.dev.yaml",
        "kafkausers.kafka.evenkeel.dev.yaml",
    ] {
        let top = std::fs::read_to_string(root.join("crds").join(name)).unwrap();
        let chart = std::fs::read_to_string(root.join("charts/evenkeel/crds").join(name))
            .unwrap_or_else(|e| panic!("charts/evenkeel/crds/{name}: {e}"));
        assert_eq!(
            top, chart,
            "charts/evenkeel/crds/{name} differs from crds/{name}: copy it"
        );
    }
}

/// Words a YAML 1.1 parser (Kubernetes' and kubectl's) reads as a boolean when unquoted.
const YAML11_BOOLEANS: &[&str] = &[
    "y", "Y", "yes", "Yes", "YES", "n", "N", "no", "No", "NO", "true", "True", "TRUE", "false",
    "False", "FALSE", "on", "On", "ON", "off", "Off", "OFF",
];

#[test]
fn no_enum_value_reads_as_a_boolean_to_the_api_server() {
    // serde_yaml writes YAML 1.2, where `on` and `off` are strings; the API server's parser
    // reads them as booleans, and the CRD would then refuse the very values it lists.
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    for entry in std::fs::read_dir(root.join("crds")).unwrap() {
        let path = entry.unwrap().path();
        let text = std::fs::read_to_string(&path).unwrap();
        for (n, line) in text.lines().enumerate() {
            let item = line.trim_start().strip_prefix("- ").map(str::trim);
            assert!(
                !item.is_some_and(|v| YAML11_BOOLEANS.contains(&v)),
                "{}:{}: {line:?} is a boolean to YAML 1.1: quote it or rename the value",
                path.display(),
                n + 1
            );
        }
    }
}
