//! DescribeLogDirs (`kafka-log-dirs --describe`, and `kafka-reassign-partitions` of Kafka 4.x's
//! tools): this broker's log directory with its disk's size and free space, and the size of
//! each partition's log in it, as Kafka's ReplicaManager.describeLogDirs reports them.

use std::collections::{BTreeMap, HashSet};
use std::path::Path;
use std::sync::Arc;

use kafka_protocol::messages::describe_log_dirs_response::{
    DescribeLogDirsPartition, DescribeLogDirsResult, DescribeLogDirsTopic,
};
use kafka_protocol::messages::{DescribeLogDirsRequest, DescribeLogDirsResponse, TopicName};

use super::auth::{Action, Session};
use super::replica_manager::LocalLog;
use super::Broker;
use crate::protocol::errors;
use crate::protocol::str_bytes as s;
use crate::security::acl::AclOperation;
use crate::storage::TopicPartition;

/// DescribeLogDirs: DESCRIBE on the cluster, else CLUSTER_AUTHORIZATION_FAILED and no
/// directory. `topics` null asks for every partition; a partition this broker has no log of is
/// left out, as Kafka leaves it out.
pub fn describe_log_dirs(
    broker: &Arc<Broker>,
    session: &Session,
    req: DescribeLogDirsRequest,
) -> DescribeLogDirsResponse {
    if !broker.authorize(session, Action::cluster(AclOperation::Describe)) {
        return DescribeLogDirsResponse::default()
            .with_error_code(errors::CLUSTER_AUTHORIZATION_FAILED)
            .with_results(Vec::new());
    }
    let wanted: Option<HashSet<TopicPartition>> = req.topics.map(|topics| {
        topics
            .iter()
            .flat_map(|t| {
                t.partitions
                    .iter()
                    .map(|p| TopicPartition::new(t.topic.as_str(), *p))
            })
            .collect()
    });
    let replicas = &broker.replicas;
    let logs = replicas.local_logs(wanted.as_ref());
    let result = log_dir_result(replicas.log_dir(), &logs);
    DescribeLogDirsResponse::default().with_results(vec![result])
}

/// One directory's answer: its absolute path, the disk's total and usable bytes (-1 when they
/// cannot be read), and `logs` grouped by topic.
fn log_dir_result(dir: &Path, logs: &[LocalLog]) -> DescribeLogDirsResult {
    let path = std::path::absolute(dir).unwrap_or_else(|_| dir.to_path_buf());
    let (total, usable) = disk_space(&path).unwrap_or((-1, -1));
    let mut topics: BTreeMap<&str, Vec<DescribeLogDirsPartition>> = BTreeMap::new();
    for log in logs {
        topics.entry(&log.tp.topic).or_default().push(
            DescribeLogDirsPartition::default()
                .with_partition_index(log.tp.partition)
                .with_partition_size(i64::try_from(log.size).unwrap_or(i64::MAX))
                .with_offset_lag(log.offset_lag)
                .with_is_future_key(false),
        );
    }
    let topics = topics
        .into_iter()
        .map(|(name, partitions)| {
            DescribeLogDirsTopic::default()
                .with_name(TopicName(s(name)))
                .with_partitions(partitions)
        })
        .collect();
    DescribeLogDirsResult::default()
        .with_error_code(errors::NONE)
        .with_log_dir(s(path.to_string_lossy().as_ref()))
        .with_topics(topics)
        .with_total_bytes(total)
        .with_usable_bytes(usable)
}

/// The total and usable bytes of the file system `dir` is on (`statvfs`; usable is what an
/// unprivileged process may still write, as Java's `FileStore.getUsableSpace`).
fn disk_space(dir: &Path) -> Option<(i64, i64)> {
    use std::os::unix::ffi::OsStrExt;
    let path = std::ffi::CString::new(dir.as_os_str().as_bytes()).ok()?;
    let mut st = std::mem::MaybeUninit::<libc::statvfs>::uninit();
    // SAFETY: `path` is a NUL-terminated string and `st` a buffer of the size statvfs writes.
    let rc = unsafe { libc::statvfs(path.as_ptr(), st.as_mut_ptr()) };
    if rc != 0 {
        return None;
    }
    // SAFETY: statvfs returned 0, so it filled `st`.
    let st = unsafe { st.assume_init() };
    // The fields are u64 on 64-bit Linux and narrower elsewhere.
    #[allow(clippy::unnecessary_cast)]
    let (frsize, blocks, available) = (st.f_frsize as u64, st.f_blocks as u64, st.f_bavail as u64);
    // Kafka's adjustForLargeFileSystems: a size past i64 is i64::MAX.
    let bytes = |n: u64| i64::try_from(n.saturating_mul(frsize)).unwrap_or(i64::MAX);
    Some((bytes(blocks), bytes(available)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_directory_lists_its_logs_by_topic_with_the_disks_space() {
        let dir = tempfile::tempdir().unwrap();
        let logs = [
            LocalLog {
                tp: TopicPartition::new("a", 1),
                size: 10,
                offset_lag: 0,
            },
            LocalLog {
                tp: TopicPartition::new("a", 0),
                size: 0,
                offset_lag: 3,
            },
            LocalLog {
                tp: TopicPartition::new("b", 0),
                size: 7,
                offset_lag: 0,
            },
        ];
        let r = log_dir_result(dir.path(), &logs);
        assert_eq!(r.error_code, errors::NONE);
        assert_eq!(r.log_dir.as_str(), dir.path().to_str().unwrap());
        assert!(r.total_bytes > 0 && r.usable_bytes >= 0 && r.usable_bytes <= r.total_bytes);
        let names: Vec<&str> = r.topics.iter().map(|t| t.name.0.as_str()).collect();
        assert_eq!(names, ["a", "b"]);
        let a: Vec<(i32, i64, i64)> = r.topics[0]
            .partitions
            .iter()
            .map(|p| (p.partition_index, p.partition_size, p.offset_lag))
            .collect();
        assert_eq!(a, [(1, 10, 0), (0, 0, 3)]);
        assert!(r.topics[1].partitions.iter().all(|p| !p.is_future_key));
    }

    #[test]
    fn a_directory_that_cannot_be_read_reports_no_space() {
        assert_eq!(disk_space(Path::new("/nonexistent/evenkeel")), None);
        let r = log_dir_result(Path::new("/nonexistent/evenkeel"), &[]);
        assert_eq!((r.total_bytes, r.usable_bytes), (-1, -1));
        assert!(r.topics.is_empty());
    }
}
