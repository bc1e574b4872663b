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
