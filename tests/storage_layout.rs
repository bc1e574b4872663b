//! Seed 002's experiment: with `segment.bytes` = 1 MiB, 4,000 × 1 KiB records make four segments
//! named by their base offsets, with trimmed indexes on the closed ones and a preallocated
//! 10 MiB index on the active one. Then Kafka's root files, and `evenkeel dump-log` on the result.

use std::path::Path;
use std::process::Command;

use evenkeel::config::LogConfig;
use evenkeel::storage::batch::{build_batch, KeyValue};
use evenkeel::storage::{KafkaUuid, LogManager, LogManagerConfig, TopicPartition};

fn file_len(p: &Path) -> u64 {
    std::fs::metadata(p).unwrap().len()
}

#[test]
fn four_thousand_1kib_records_with_1mib_segments_make_four_segments() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = LogConfig {
        segment_bytes: 1024 * 1024,
        ..LogConfig::default()
    };
    let mgr = LogManager::open(LogManagerConfig::new(dir.path(), cfg)).unwrap();
    let tp = TopicPartition::new("seg-demo", 0);
    let log = mgr
        .get_or_create_log(&tp, Some(KafkaUuid::random()), None)
        .unwrap();
    // kafka-producer-perf-test with the default batch.size packs 15 records of 1 KiB per batch.
    let value = vec![b'r'; 1024];
    let mut sent = 0;
    while sent < 4000 {
        let n = 15.min(4000 - sent);
        let recs: Vec<KeyValue<'_>> = (0..n).map(|_| (None, Some(value.as_slice()))).collect();
        let mut b = build_batch(&recs, 1_787_577_612_677 + sent as i64);
        log.lock().append_as_leader(&mut b, 0).unwrap();
        sent += n;
    }
    let pdir = dir.path().join("seg-demo-0");
    let (bases, last_offsets): (Vec<i64>, Vec<i64>) = {
        let l = log.lock();
        assert_eq!(l.log_end_offset(), 4000);
        l.segments()
            .map(|s| (s.base_offset(), s.next_offset() - 1))
            .unzip()
    };
    assert_eq!(bases.len(), 4, "segments start at {bases:?}");
    assert_eq!(bases[0], 0);
    for w in 0..3 {
        // Each segment starts right after the previous one ends.
        assert_eq!(bases[w + 1], last_offsets[w] + 1);
    }
    for (i, base) in bases.iter().enumerate() {
        let name = |suffix: &str| pdir.join(format!("{base:020}{suffix}"));
        let log_len = file_len(&name(".log"));
        assert!(log_len <= 1024 * 1024, "segment {base} is {log_len} bytes");
        let index = file_len(&name(".index"));
        let timeindex = file_len(&name(".timeindex"));
        if i < 3 {
            assert!(
                log_len > 1000 * 1024,
                "closed segment {base} is only {log_len} bytes"
            );
            // Trimmed to their entries: one per ~16 KiB batch after the first.
            assert!(
                index > 0 && index < 4096 && index.is_multiple_of(8),
                "{base}.index is {index}"
            );
            assert!(timeindex > 0 && timeindex < 4096 && timeindex.is_multiple_of(12));
        } else {
            assert_eq!(index, 10_485_760);
            assert_eq!(timeindex, 10_485_756);
        }
    }
    assert_eq!(
        std::fs::read_to_string(pdir.join("leader-epoch-checkpoint")).unwrap(),
        "0\n1\n0 0\n"
    );
    assert_eq!(file_len(&pdir.join("partition.metadata")), 43);
    mgr.shutdown().unwrap();
    for f in [
        "recovery-point-offset-checkpoint",
        "log-start-offset-checkpoint",
        "replication-offset-checkpoint",
        ".kafka_cleanshutdown",
    ] {
        assert!(dir.path().join(f).exists(), "{f} missing");
    }
    assert_eq!(
        std::fs::read_to_string(dir.path().join("recovery-point-offset-checkpoint")).unwrap(),
        "0\n1\nseg-demo 0 4000\n"
    );

    // dump-log reads the files through the real binary.
    let seg2 = pdir.join(format!("{:020}.log", bases[1]));
    let out = Command::new(env!("CARGO_BIN_EXE_evenkeel"))
        .args(["dump-log", "--files"])
        .arg(&seg2)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(
        text.contains(&format!("Log starting offset: {}", bases[1])),
        "{text}"
    );
    assert!(
        text.contains(&format!("baseOffset: {} lastOffset:", bases[1])),
        "{text}"
    );
    assert!(text.contains("magic: 2 compresscodec: none"));
    assert!(!text.contains("isvalid: false"));
    let idx = pdir.join(format!("{:020}.index", bases[0]));
    let out = Command::new(env!("CARGO_BIN_EXE_evenkeel"))
        .args(["dump-log", "--files"])
        .arg(&idx)
        .output()
        .unwrap();
    let text = String::from_utf8(out.stdout).unwrap();
    assert_eq!(
        text.lines().filter(|l| l.starts_with("offset: ")).count() as u64,
        file_len(&idx) / 8
    );
}

#[test]
fn dump_log_of_a_missing_file_fails_with_one_line() {
    let out = Command::new(env!("CARGO_BIN_EXE_evenkeel"))
        .args([
            "dump-log",
            "--files",
            "/nonexistent/00000000000000000000.log",
        ])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8(out.stderr).unwrap();
    assert_eq!(err.trim().lines().count(), 1, "{err}");
    assert!(
        err.contains("/nonexistent/00000000000000000000.log"),
        "{err}"
    );
}

/// `evenkeel format` takes a cluster id that starts with '-' (one in 64 random ids, and the
/// operator's ids from a KafkaCluster's uid) in either form, as a value and not a flag.
/// `evenkeel format --config <file> args`, the file `properties` plus `log.dirs` in a new
/// temporary directory (its `data`); the directory and the command's output.
fn format_node(properties: &str, args: &[String]) -> (tempfile::TempDir, std::process::Output) {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("server.properties");
    let data = dir.path().join("data");
    std::fs::write(
        &config,
        format!("log.dirs={}\n{properties}\n", data.display()),
    )
    .unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_evenkeel"))
        .arg("format")
        .arg("--config")
        .arg(&config)
        .args(args)
        .output()
        .unwrap();
    (dir, out)
}

#[test]
fn format_takes_a_cluster_id_that_starts_with_a_dash() {
    let id = "-jsa4ssDSKSixsZ4B1D70w";
    for form in [
        vec![format!("--cluster-id={id}")],
        vec!["-t".into(), id.into()],
    ] {
        let (dir, out) = format_node(
            "process.roles=broker,controller\nnode.id=1\n\
             controller.quorum.voters=1@127.0.0.1:19093\n\
             listeners=PLAINTEXT://127.0.0.1:19092,CONTROLLER://127.0.0.1:19093\n\
             controller.listener.names=CONTROLLER",
            &form,
        );
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "{form:?}: {err}");
        let meta = std::fs::read_to_string(dir.path().join("data/meta.properties")).unwrap();
        assert!(
            meta.contains(&format!("cluster.id={id}\n")),
            "{form:?}: {meta}"
        );
    }
}

/// `evenkeel format` with `kafka-storage format`'s dynamic-quorum flags: the initial voters are
/// kept in the log directory and this node's entry gives its directory id; static voters and the
/// flags together, a malformed voter, or two of the flags at once are refused with nothing
/// written.
#[test]
fn format_keeps_a_dynamic_quorums_initial_voters() {
    use evenkeel::metadata::initial_voters;
    use evenkeel::storage::{KafkaUuid, MetaProperties};
    let (d1, d2) = (KafkaUuid::random(), KafkaUuid::random());
    let run = |quorum: &str, args: &[String]| {
        format_node(
            &format!(
                "process.roles=controller\nnode.id=2\n\
                 listeners=CONTROLLER://127.0.0.1:19095\n\
                 controller.listener.names=CONTROLLER\n{quorum}"
            ),
            args,
        )
    };
    let dynamic = "controller.quorum.bootstrap.servers=127.0.0.1:19093";
    let list = format!("1@127.0.0.1:19093:{d1},2@127.0.0.1:19095:{d2}");
    let (dir, out) = run(dynamic, &["-I".into(), list.clone()]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let data = dir.path().join("data");
    let voters = initial_voters::read(&data)
        .unwrap()
        .expect("the voters kept");
    assert_eq!(voters, initial_voters::parse(&list).unwrap());
    let meta = MetaProperties::read(&data).unwrap().unwrap();
    assert_eq!(
        meta.directory_id, d2,
        "node 2's directory id is its entry's"
    );

    let (dir, out) = run(dynamic, &["--no-initial-controllers".into()]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let data = dir.path().join("data");
    assert_eq!(initial_voters::read(&data).unwrap(), Some(Vec::new()));

    let (dir, out) = run(dynamic, &["--standalone".into()]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let data = dir.path().join("data");
    let alone = initial_voters::read(&data).unwrap().expect("one voter");
    let meta = MetaProperties::read(&data).unwrap().unwrap();
    assert_eq!(
        (
            alone.len(),
            alone[0].id,
            alone[0].port,
            alone[0].directory_id
        ),
        (1, 2, 19095, meta.directory_id)
    );

    let refusals: [(&str, Vec<String>, &str); 4] = [
        (
            "controller.quorum.voters=2@127.0.0.1:19095",
            vec!["-I".into(), list.clone()],
            "You cannot specify controller.quorum.voters",
        ),
        (
            dynamic,
            vec!["-I".into(), "2@127.0.0.1:19095".into()],
            "is not id@host:port:directory-id",
        ),
        (
            dynamic,
            vec!["-s".into(), "-N".into()],
            "cannot be used with",
        ),
        (
            "process.roles=broker\nlisteners=PLAINTEXT://127.0.0.1:19096",
            vec!["-N".into()],
            "is for a controller",
        ),
    ];
    for (quorum, args, why) in refusals {
        let (dir, out) = run(&format!("{dynamic}\n{quorum}"), &args);
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{args:?} was accepted");
        assert!(err.contains(why), "{args:?}: {err}");
        assert!(
            !dir.path().join("data/meta.properties").exists(),
            "{args:?}"
        );
    }
}
