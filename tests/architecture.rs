//! The crate's layering, read from its source: no two top-level modules reach into each other,
//! directly or around a loop (`crate::broker` may use `crate::metadata`, never the other way
//! round and back). docs/architecture.md draws the layers.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// The top-level module a file of `src/` belongs to (`None` for lib.rs and main.rs).
fn top_module(src: &Path, file: &Path) -> Option<String> {
    let first = file.strip_prefix(src).ok()?.components().next()?;
    let name = first
        .as_os_str()
        .to_str()?
        .trim_end_matches(".rs")
        .to_string();
    (name != "lib" && name != "main").then_some(name)
}

/// Which top-level modules each one names as `crate::<module>`.
fn module_edges() -> BTreeMap<String, BTreeSet<String>> {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    let tops: BTreeSet<String> = files.iter().filter_map(|f| top_module(&src, f)).collect();
    let mut edges: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for f in &files {
        let Some(from) = top_module(&src, f) else {
            continue;
        };
        let text = std::fs::read_to_string(f).unwrap();
        for (i, _) in text.match_indices("crate::") {
            let name: String = text[i + 7..]
                .chars()
                .take_while(|c| c.is_ascii_lowercase() || *c == '_')
                .collect();
            if name != from && tops.contains(&name) {
                edges.entry(from.clone()).or_default().insert(name);
            }
        }
    }
    edges
}

/// A path from `from` back to `to`, if the edges have one.
fn path_to(
    edges: &BTreeMap<String, BTreeSet<String>>,
    from: &str,
    to: &str,
    seen: &mut BTreeSet<String>,
) -> Option<Vec<String>> {
    if from == to {
        return Some(vec![to.to_string()]);
    }
    if !seen.insert(from.to_string()) {
        return None;
    }
    for next in edges.get(from).into_iter().flatten() {
        if let Some(mut rest) = path_to(edges, next, to, seen) {
            rest.insert(0, from.to_string());
            return Some(rest);
        }
    }
    None
}

#[test]
fn no_import_loop_among_top_level_modules() {
    let edges = module_edges();
    assert!(
        edges.get("broker").is_some_and(|e| e.contains("metadata")),
        "the scan found no broker -> metadata import: it reads nothing"
    );
    let mut loops = Vec::new();
    for (from, tos) in &edges {
        for to in tos {
            if let Some(back) = path_to(&edges, to, from, &mut BTreeSet::new()) {
                loops.push(format!("{from} -> {}", back.join(" -> ")));
            }
        }
    }
    assert!(loops.is_empty(), "import loops: {loops:#?}");
}

/// The broker core: ReplicaManager, the partitions it owns, the purgatories, and the fetchers
/// that feed its followers. Request handlers go through ReplicaManager.
const BROKER_CORE: &[&str] = &[
    "broker/mod.rs",
    "broker/partition",
    "broker/replica_manager",
    "broker/purgatory.rs",
    "broker/producer_state.rs",
    "broker/replication",
];

#[test]
fn only_the_broker_core_touches_partitions_and_purgatories() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    let mut offenders = Vec::new();
    for f in &files {
        let rel = f
            .strip_prefix(&src)
            .unwrap()
            .to_string_lossy()
            .replace('\\', "/");
        if BROKER_CORE.iter().any(|core| rel.starts_with(core)) {
            continue;
        }
        let text = std::fs::read_to_string(f).unwrap();
        for needle in [
            "super::partition::",
            "broker::partition::",
            "super::purgatory::",
            "broker::purgatory::",
            "producer_state::",
        ] {
            if text.contains(needle) {
                offenders.push(format!("{rel} names {needle}"));
            }
        }
    }
    assert!(
        offenders.is_empty(),
        "handlers reach past ReplicaManager: {offenders:?}"
    );
}
