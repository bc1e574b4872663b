//! Kafka's small text files: offset checkpoints, `partition.metadata`, `meta.properties` and the
//! clean-shutdown marker, each written atomically (tmp file, fsync, rename, fsync of the directory).

use std::collections::BTreeMap;
use std::fs::File;
use std::io::Write;
use std::path::{Path, PathBuf};

use base64::Engine;

use super::error::{Result, StorageError};

pub const RECOVERY_POINT_CHECKPOINT: &str = "recovery-point-offset-checkpoint";
pub const LOG_START_OFFSET_CHECKPOINT: &str = "log-start-offset-checkpoint";
pub const REPLICATION_OFFSET_CHECKPOINT: &str = "replication-offset-checkpoint";
pub const CLEANER_OFFSET_CHECKPOINT: &str = "cleaner-offset-checkpoint";
pub const PARTITION_METADATA: &str = "partition.metadata";
pub const META_PROPERTIES: &str = "meta.properties";
pub const CLEAN_SHUTDOWN_MARKER: &str = ".kafka_cleanshutdown";

/// A topic and partition, printed as Kafka prints it: `topic-partition`.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct TopicPartition {
    pub topic: String,
    pub partition: i32,
}

impl TopicPartition {
    pub fn new(topic: impl Into<String>, partition: i32) -> Self {
        TopicPartition {
            topic: topic.into(),
            partition,
        }
    }

    /// The partition directory name, `<topic>-<partition>`.
    pub fn dir_name(&self) -> String {
        format!("{}-{}", self.topic, self.partition)
    }

    /// Parses a partition directory name; the topic may itself contain dashes.
    pub fn from_dir_name(name: &str) -> Option<TopicPartition> {
        let (topic, part) = name.rsplit_once('-')?;
        if topic.is_empty() || part.is_empty() || !part.bytes().all(|b| b.is_ascii_digit()) {
            return None;
        }
        Some(TopicPartition::new(topic, part.parse().ok()?))
    }
}

impl std::fmt::Display for TopicPartition {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}-{}", self.topic, self.partition)
    }
}

/// Writes `content` to `path` atomically: `<path>.tmp`, fsync, rename, fsync of the parent.
pub fn write_atomic(path: &Path, content: &[u8]) -> Result<()> {
    let mut tmp = path.as_os_str().to_owned();
    tmp.push(".tmp");
    let tmp = PathBuf::from(tmp);
    {
        let mut f = File::create(&tmp).map_err(StorageError::io(&tmp))?;
        f.write_all(content).map_err(StorageError::io(&tmp))?;
        f.sync_all().map_err(StorageError::io(&tmp))?;
    }
    std::fs::rename(&tmp, path).map_err(StorageError::io(path))?;
    if let Some(parent) = path.parent() {
        sync_dir(parent)?;
    }
    Ok(())
}

/// fsyncs a directory so a rename or a new file in it survives a crash.
pub fn sync_dir(dir: &Path) -> Result<()> {
    File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(StorageError::io(dir))
}

fn malformed(path: &Path, reason: impl Into<String>) -> StorageError {
    StorageError::MalformedFile {
        path: path.to_path_buf(),
        reason: reason.into(),
    }
}

/// Reads a version-0 checkpoint body: a version line, a count line, then `count` entry lines.
fn read_versioned_lines(path: &Path) -> Result<Option<Vec<String>>> {
    let text = match std::fs::read_to_string(path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(StorageError::io(path)(e)),
    };
    let mut lines = text.lines();
    let version = lines.next().ok_or_else(|| malformed(path, "empty file"))?;
    if version.trim() != "0" {
        return Err(malformed(path, format!("unsupported version {version:?}")));
    }
    let count: usize = lines
        .next()
        .and_then(|l| l.trim().parse().ok())
        .ok_or_else(|| malformed(path, "missing or bad entry count"))?;
    let entries: Vec<String> = lines
        .filter(|l| !l.trim().is_empty())
        .map(str::to_string)
        .collect();
    if entries.len() != count {
        return Err(malformed(
            path,
            format!("expected {count} entries, found {}", entries.len()),
        ));
    }
    Ok(Some(entries))
}

fn write_versioned_lines(path: &Path, entries: &[String]) -> Result<()> {
    let mut s = format!("0\n{}\n", entries.len());
    for e in entries {
        s.push_str(e);
        s.push('\n');
    }
    write_atomic(path, s.as_bytes())
}

/// `recovery-point-offset-checkpoint` and friends: `topic partition offset` per line.
pub struct OffsetCheckpointFile {
    path: PathBuf,
}

impl OffsetCheckpointFile {
    pub fn new(path: PathBuf) -> Self {
        OffsetCheckpointFile { path }
    }

    pub fn write(&self, offsets: &BTreeMap<TopicPartition, i64>) -> Result<()> {
        let lines: Vec<String> = offsets
            .iter()
            .map(|(tp, o)| format!("{} {} {}", tp.topic, tp.partition, o))
            .collect();
        write_versioned_lines(&self.path, &lines)
    }

    /// The checkpointed offsets; empty when the file does not exist.
    pub fn read(&self) -> Result<BTreeMap<TopicPartition, i64>> {
        let mut out = BTreeMap::new();
        for line in read_versioned_lines(&self.path)?.unwrap_or_default() {
            let parts: Vec<&str> = line.split_whitespace().collect();
            let [topic, partition, offset] = parts[..] else {
                return Err(malformed(&self.path, format!("bad line {line:?}")));
            };
            let partition = partition
                .parse()
                .map_err(|_| malformed(&self.path, format!("bad partition in {line:?}")))?;
            let offset = offset
                .parse()
                .map_err(|_| malformed(&self.path, format!("bad offset in {line:?}")))?;
            out.insert(TopicPartition::new(topic, partition), offset);
        }
        Ok(out)
    }
}

/// `leader-epoch-checkpoint`: `epoch start_offset` per line.
pub fn write_epoch_checkpoint(path: &Path, entries: &[(i32, i64)]) -> Result<()> {
    let lines: Vec<String> = entries.iter().map(|(e, o)| format!("{e} {o}")).collect();
    write_versioned_lines(path, &lines)
}

pub fn read_epoch_checkpoint(path: &Path) -> Result<Vec<(i32, i64)>> {
    let mut out = Vec::new();
    for line in read_versioned_lines(path)?.unwrap_or_default() {
        let mut it = line.split_whitespace();
        let (Some(e), Some(o), None) = (it.next(), it.next(), it.next()) else {
            return Err(malformed(path, format!("bad line {line:?}")));
        };
        let e = e
            .parse()
            .map_err(|_| malformed(path, format!("bad epoch in {line:?}")))?;
        let o = o
            .parse()
            .map_err(|_| malformed(path, format!("bad offset in {line:?}")))?;
        out.push((e, o));
    }
    Ok(out)
}

/// A 16-byte Kafka UUID, printed as Kafka does: URL-safe base64 without padding.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub struct KafkaUuid(pub [u8; 16]);

impl KafkaUuid {
    pub const ZERO: KafkaUuid = KafkaUuid([0; 16]);

    /// A random UUID that is neither zero nor Kafka's reserved METADATA_TOPIC_ID and does not
    /// start with '-' when printed, as Kafka's `Uuid.randomUuid` ensures.
    pub fn random() -> KafkaUuid {
        loop {
            let u = KafkaUuid(*uuid::Uuid::new_v4().as_bytes());
            let reserved =
                u == KafkaUuid::ZERO || u.0 == [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1];
            if !reserved && !u.to_string().starts_with('-') {
                return u;
            }
        }
    }

    pub fn parse(s: &str) -> Option<KafkaUuid> {
        let v = base64::engine::general_purpose::URL_SAFE_NO_PAD
            .decode(s.trim())
            .ok()?;
        Some(KafkaUuid(v.try_into().ok()?))
    }
}

/// The wire's UUIDs (kafka-protocol uses the uuid crate) and ours are the same 16 bytes.
impl From<uuid::Uuid> for KafkaUuid {
    fn from(u: uuid::Uuid) -> Self {
        KafkaUuid(*u.as_bytes())
    }
}

impl From<KafkaUuid> for uuid::Uuid {
    fn from(u: KafkaUuid) -> Self {
        uuid::Uuid::from_bytes(u.0)
    }
}

impl std::fmt::Display for KafkaUuid {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(self.0))
    }
}

/// `partition.metadata`: `version: 0` and `topic_id: <uuid>` (no trailing newline, as Kafka writes it).
pub fn write_partition_metadata(dir: &Path, topic_id: KafkaUuid) -> Result<()> {
    let s = format!("version: 0\ntopic_id: {topic_id}");
    write_atomic(&dir.join(PARTITION_METADATA), s.as_bytes())
}

pub fn read_partition_metadata(dir: &Path) -> Result<Option<KafkaUuid>> {
    let path = dir.join(PARTITION_METADATA);
    let text = match std::fs::read_to_string(&path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(StorageError::io(&path)(e)),
    };
    let mut version = None;
    let mut id = None;
    for line in text.lines() {
        if let Some(v) = line.strip_prefix("version:") {
            version = Some(v.trim().to_string());
        } else if let Some(v) = line.strip_prefix("topic_id:") {
            id = KafkaUuid::parse(v);
        }
    }
    if version.as_deref() != Some("0") {
        return Err(malformed(&path, "missing or unsupported version"));
    }
    id.map(Some)
        .ok_or_else(|| malformed(&path, "missing or bad topic_id"))
}

/// The fields of `meta.properties` (KRaft, version 1).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MetaProperties {
    pub cluster_id: String,
    pub node_id: i32,
    pub directory_id: KafkaUuid,
}

impl MetaProperties {
    pub fn write(&self, log_dir: &Path) -> Result<()> {
        let s = format!(
            "#\n#{}\nnode.id={}\ndirectory.id={}\nversion=1\ncluster.id={}\n",
            httpdate_now(),
            self.node_id,
            self.directory_id,
            self.cluster_id
        );
        write_atomic(&log_dir.join(META_PROPERTIES), s.as_bytes())
    }

    pub fn read(log_dir: &Path) -> Result<Option<MetaProperties>> {
        let path = log_dir.join(META_PROPERTIES);
        let text = match std::fs::read_to_string(&path) {
            Ok(t) => t,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(StorageError::io(&path)(e)),
        };
        let props = crate::config::parse_properties(&text);
        if props.get("version").map(String::as_str) != Some("1") {
            return Err(malformed(
                &path,
                "only meta.properties version=1 (KRaft) is supported",
            ));
        }
        let cluster_id = props
            .get("cluster.id")
            .cloned()
            .ok_or_else(|| malformed(&path, "missing cluster.id"))?;
        let node_id = props
            .get("node.id")
            .and_then(|v| v.parse().ok())
            .ok_or_else(|| malformed(&path, "missing or bad node.id"))?;
        let directory_id = props
            .get("directory.id")
            .and_then(|v| KafkaUuid::parse(v))
            .unwrap_or(KafkaUuid::ZERO);
        Ok(Some(MetaProperties {
            cluster_id,
            node_id,
            directory_id,
        }))
    }
}

/// The comment line Java's `Properties.store` writes; only informative.
fn httpdate_now() -> String {
    let secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    format!("written at {secs} (seconds since the epoch)")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn offset_checkpoint_round_trips_in_kafkas_format() {
        let dir = tempfile::tempdir().unwrap();
        let f = OffsetCheckpointFile::new(dir.path().join(RECOVERY_POINT_CHECKPOINT));
        assert!(f.read().unwrap().is_empty());
        let mut m = BTreeMap::new();
        m.insert(TopicPartition::new("orders-eu", 0), 42);
        m.insert(TopicPartition::new("a", 3), 7);
        f.write(&m).unwrap();
        let text = std::fs::read_to_string(dir.path().join(RECOVERY_POINT_CHECKPOINT)).unwrap();
        assert_eq!(text, "0\n2\na 3 7\norders-eu 0 42\n");
        assert_eq!(f.read().unwrap(), m);
        assert!(!dir
            .path()
            .join("recovery-point-offset-checkpoint.tmp")
            .exists());
    }

    #[test]
    fn truncated_checkpoint_is_an_error() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("x");
        std::fs::write(&p, "0\n2\na 0 1\n").unwrap();
        assert!(OffsetCheckpointFile::new(p).read().is_err());
    }

    #[test]
    fn partition_metadata_is_kafkas_43_bytes() {
        let dir = tempfile::tempdir().unwrap();
        let id = KafkaUuid::random();
        write_partition_metadata(dir.path(), id).unwrap();
        let len = std::fs::metadata(dir.path().join(PARTITION_METADATA))
            .unwrap()
            .len();
        assert_eq!(len, 43);
        assert_eq!(read_partition_metadata(dir.path()).unwrap(), Some(id));
        // Kafka's own printed id parses.
        let k = KafkaUuid::parse("zvtYTgbUSOWL8GQLFewUSQ").unwrap();
        assert_eq!(k.to_string(), "zvtYTgbUSOWL8GQLFewUSQ");
    }

    #[test]
    fn meta_properties_round_trip() {
        let dir = tempfile::tempdir().unwrap();
        let m = MetaProperties {
            cluster_id: "MkU3OEVBNTcwNTJENDM2Qk".into(),
            node_id: 1,
            directory_id: KafkaUuid::random(),
        };
        m.write(dir.path()).unwrap();
        assert_eq!(MetaProperties::read(dir.path()).unwrap(), Some(m));
    }

    #[test]
    fn partition_dir_names_parse() {
        assert_eq!(
            TopicPartition::from_dir_name("order-events-12"),
            Some(TopicPartition::new("order-events", 12))
        );
        assert_eq!(TopicPartition::from_dir_name("nodash"), None);
        assert_eq!(TopicPartition::from_dir_name("x-1.abc-delete"), None);
    }

    #[test]
    fn epoch_checkpoint_round_trips() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("leader-epoch-checkpoint");
        write_epoch_checkpoint(&p, &[(0, 0)]).unwrap();
        assert_eq!(std::fs::metadata(&p).unwrap().len(), 8);
        assert_eq!(read_epoch_checkpoint(&p).unwrap(), vec![(0, 0)]);
    }
}
