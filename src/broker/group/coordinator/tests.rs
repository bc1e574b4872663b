use super::*;

fn cfg() -> GroupConfig {
    GroupConfig {
        initial_rebalance_delay: Duration::ZERO,
        ..GroupConfig::default()
    }
}

fn join_req(group: &str, member: &str, protocols: &[&str]) -> JoinRequest {
    JoinRequest {
        group_id: group.into(),
        member_id: member.into(),
        group_instance_id: None,
        client_id: "client".into(),
        client_host: "/127.0.0.1".into(),
        session_timeout_ms: 10_000,
        rebalance_timeout_ms: 10_000,
        protocol_type: "consumer".into(),
        protocols: protocols
            .iter()
            .map(|p| (p.to_string(), p.as_bytes().to_vec()))
            .collect(),
        require_known_member_id: true,
    }
}

fn now_result<T: std::fmt::Debug>(p: Pending<T>) -> T {
    match p {
        Pending::Now(t) => t,
        Pending::Later(_) => panic!("expected an immediate answer"),
    }
}

fn later<T>(p: Pending<T>) -> oneshot::Receiver<T> {
    match p {
        Pending::Later(rx) => rx,
        Pending::Now(_) => panic!("expected a pending answer"),
    }
}

/// Joins a new dynamic member through MEMBER_ID_REQUIRED; returns its id and its pending join.
fn join_new(
    c: &Coordinator,
    group: &str,
    protocols: &[&str],
) -> (String, oneshot::Receiver<JoinResult>) {
    let first = now_result(c.join(join_req(group, "", protocols), Instant::now()));
    assert_eq!(first.error, codes::MEMBER_ID_REQUIRED);
    assert!(first.member_id.starts_with("client-"));
    let rx = later(c.join(join_req(group, &first.member_id, protocols), Instant::now()));
    (first.member_id, rx)
}

#[test]
fn two_members_join_sync_and_become_stable() {
    let c = Coordinator::new(cfg());
    let (a, mut ja) = join_new(&c, "g", &["range", "roundrobin"]);
    // A alone completes at once (no initial delay in this config).
    let ra = ja.try_recv().unwrap();
    assert_eq!(
        (ra.error, ra.generation, ra.leader.clone()),
        (0, 1, a.clone())
    );
    assert_eq!(ra.members.len(), 1);
    // B joins: the group rebalances and waits for A to rejoin.
    let (b, mut jb) = join_new(&c, "g", &["roundrobin", "range"]);
    assert!(jb.try_recv().is_err());
    assert_eq!(
        c.heartbeat("g", 1, &a, Instant::now()),
        codes::REBALANCE_IN_PROGRESS
    );
    let mut ja = later(c.join(join_req("g", &a, &["range", "roundrobin"]), Instant::now()));
    let (ra, rb) = (ja.try_recv().unwrap(), jb.try_recv().unwrap());
    assert_eq!((ra.generation, rb.generation), (2, 2));
    assert_eq!(ra.leader, rb.leader);
    let leader_view = if ra.leader == a { &ra } else { &rb };
    assert_eq!(leader_view.members.len(), 2);
    assert!(ra.protocol_name.is_some());
    // The follower's sync waits for the leader's.
    let (leader, follower) = if ra.leader == a { (&a, &b) } else { (&b, &a) };
    let mut fs = later(c.sync("g", 2, follower, vec![]).answer);
    assert!(fs.try_recv().is_err());
    let start = c.sync(
        "g",
        2,
        leader,
        vec![(a.clone(), b"A".to_vec()), (b.clone(), b"B".to_vec())],
    );
    assert!(start.store, "the leader's sync stores the assignment");
    let mut ls = later(start.answer);
    // Nobody has an assignment before it is stored.
    assert!(fs.try_recv().is_err() && ls.try_recv().is_err());
    c.complete_sync("g", 2, Ok(()));
    let (fr, lr) = (fs.try_recv().unwrap(), ls.try_recv().unwrap());
    assert_eq!(fr.error, 0);
    let expect = |m: &String| {
        if *m == a {
            b"A".to_vec()
        } else {
            b"B".to_vec()
        }
    };
    assert_eq!(fr.assignment, expect(follower));
    assert_eq!(lr.assignment, expect(leader));
    c.with_group("g", |g| assert_eq!(g.state, GroupState::Stable));
    assert_eq!(c.heartbeat("g", 2, &a, Instant::now()), codes::NONE);
    assert_eq!(
        c.heartbeat("g", 1, &a, Instant::now()),
        codes::ILLEGAL_GENERATION
    );
    assert_eq!(
        c.heartbeat("g", 2, "nobody", Instant::now()),
        codes::UNKNOWN_MEMBER_ID
    );
}

#[test]
fn an_assignment_that_cannot_be_stored_reaches_nobody_and_the_group_rebalances() {
    let c = Coordinator::new(cfg());
    let (a, mut ja) = join_new(&c, "g", &["range"]);
    assert_eq!(ja.try_recv().unwrap().generation, 1);
    let start = c.sync("g", 1, &a, vec![(a.clone(), b"A".to_vec())]);
    assert!(start.store);
    let mut answer = later(start.answer);
    // A write for another generation changes nothing.
    c.complete_sync("g", 0, Err(codes::COORDINATOR_NOT_AVAILABLE));
    assert!(answer.try_recv().is_err());
    c.complete_sync("g", 1, Err(codes::COORDINATOR_NOT_AVAILABLE));
    let r = answer.try_recv().unwrap();
    assert_eq!(
        (r.error, r.assignment.len()),
        (codes::COORDINATOR_NOT_AVAILABLE, 0)
    );
    c.with_group("g", |g| {
        assert_eq!(g.state, GroupState::PreparingRebalance);
        assert!(g.members[&a].assignment.is_empty());
    });
    assert_eq!(
        c.heartbeat("g", 1, &a, Instant::now()),
        codes::REBALANCE_IN_PROGRESS
    );
}

#[test]
fn bad_joins_get_kafkas_errors() {
    let c = Coordinator::new(cfg());
    assert_eq!(
        now_result(c.join(join_req("", "", &["range"]), Instant::now())).error,
        codes::INVALID_GROUP_ID
    );
    let mut short = join_req("g", "", &["range"]);
    short.session_timeout_ms = 10;
    assert_eq!(
        now_result(c.join(short, Instant::now())).error,
        codes::INVALID_SESSION_TIMEOUT
    );
    let (_a, _ja) = join_new(&c, "g", &["range"]);
    let mut other = join_req("g", "", &["range"]);
    other.protocol_type = "connect".into();
    assert_eq!(
        now_result(c.join(other, Instant::now())).error,
        codes::INCONSISTENT_GROUP_PROTOCOL
    );
    assert_eq!(
        now_result(c.join(join_req("g", "", &["sticky"]), Instant::now())).error,
        codes::INCONSISTENT_GROUP_PROTOCOL
    );
    assert_eq!(
        now_result(c.join(join_req("g", "made-up", &["range"]), Instant::now())).error,
        codes::UNKNOWN_MEMBER_ID
    );
}

#[test]
fn an_expired_session_triggers_a_rebalance_without_the_member() {
    let c = Coordinator::new(cfg());
    let (a, mut ja) = join_new(&c, "g", &["range"]);
    ja.try_recv().unwrap();
    let (b, _jb) = join_new(&c, "g", &["range"]);
    let mut ja = later(c.join(join_req("g", &a, &["range"]), Instant::now()));
    ja.try_recv().unwrap();
    // Nobody syncs; then A stops heartbeating.
    let later_now = Instant::now() + Duration::from_secs(11);
    assert_eq!(c.heartbeat("g", 2, &b, later_now), codes::NONE);
    c.tick(later_now);
    c.with_group("g", |g| {
        assert!(!g.members.contains_key(&a));
        assert_eq!(g.state, GroupState::PreparingRebalance);
    });
}

#[test]
fn leaving_members_rebalance_the_rest_and_the_last_one_empties_the_group() {
    let c = Coordinator::new(cfg());
    let (a, mut ja) = join_new(&c, "g", &["range"]);
    ja.try_recv().unwrap();
    assert_eq!(c.leave("g", &[(a.clone(), None)], Instant::now()), vec![0]);
    c.with_group("g", |g| assert_eq!(g.state, GroupState::Empty));
    assert_eq!(
        c.leave("g", &[(a, None)], Instant::now()),
        vec![codes::UNKNOWN_MEMBER_ID]
    );
}

#[test]
fn commits_need_a_current_member_unless_the_group_is_empty() {
    let c = Coordinator::new(cfg());
    assert_eq!(
        c.check_commit("", -1, "", 8),
        CommitCheck::Error(codes::INVALID_GROUP_ID)
    );
    assert_eq!(c.check_commit("g", -1, "", 8), CommitCheck::Ok);
    let (a, mut ja) = join_new(&c, "g", &["range"]);
    ja.try_recv().unwrap();
    assert_eq!(
        c.check_commit("g", -1, "", 8),
        CommitCheck::Error(codes::UNKNOWN_MEMBER_ID)
    );
    assert_eq!(
        c.check_commit("g", 1, "stranger", 8),
        CommitCheck::Error(codes::UNKNOWN_MEMBER_ID)
    );
    assert_eq!(
        c.check_commit("g", 0, &a, 8),
        CommitCheck::Error(codes::ILLEGAL_GENERATION)
    );
    assert_eq!(
        c.check_commit("g", 1, &a, 8),
        CommitCheck::Error(codes::REBALANCE_IN_PROGRESS)
    );
    drop(later(c.sync("g", 1, &a, vec![(a.clone(), vec![])]).answer));
    c.complete_sync("g", 1, Ok(()));
    assert_eq!(c.check_commit("g", 1, &a, 8), CommitCheck::Ok);
    assert_eq!(c.delete_group("g"), Err(codes::NON_EMPTY_GROUP));
    assert_eq!(c.delete_group("nope"), Err(codes::GROUP_ID_NOT_FOUND));
}

#[test]
fn a_static_member_rejoining_with_the_same_metadata_does_not_rebalance() {
    let c = Coordinator::new(cfg());
    let mut r = join_req("g", "", &["range"]);
    r.group_instance_id = Some("instance-1".into());
    let mut j = later(c.join(r.clone(), Instant::now()));
    let first = j.try_recv().unwrap();
    assert_eq!(first.error, 0);
    drop(later(
        c.sync(
            "g",
            first.generation,
            &first.member_id,
            vec![(first.member_id.clone(), b"x".to_vec())],
        )
        .answer,
    ));
    c.complete_sync("g", first.generation, Ok(()));
    c.with_group("g", |g| assert_eq!(g.state, GroupState::Stable));
    // The same instance restarts: a new member id, the same generation, no rebalance.
    let again = now_result(c.join(r, Instant::now()));
    assert_eq!(again.error, 0);
    assert_ne!(again.member_id, first.member_id);
    assert_eq!(again.generation, first.generation);
    c.with_group("g", |g| assert_eq!(g.state, GroupState::Stable));
    assert_eq!(
        c.heartbeat("g", first.generation, &first.member_id, Instant::now()),
        codes::UNKNOWN_MEMBER_ID
    );
}

#[test]
fn protocol_selection_takes_the_most_preferred_common_protocol() {
    let c = Coordinator::new(cfg());
    let (a, mut ja) = join_new(&c, "g", &["cooperative-sticky", "range"]);
    ja.try_recv().unwrap();
    let (_b, mut jb) = join_new(&c, "g", &["cooperative-sticky", "range"]);
    drop(later(c.join(
        join_req("g", &a, &["cooperative-sticky", "range"]),
        Instant::now(),
    )));
    assert_eq!(
        jb.try_recv().unwrap().protocol_name.as_deref(),
        Some("cooperative-sticky")
    );
}

#[test]
fn consumer_subscriptions_are_read_from_member_metadata() {
    // ConsumerProtocolSubscription v0: version, [topics], user data.
    let mut m = vec![0, 0, 0, 0, 0, 2];
    for t in ["a", "bc"] {
        m.extend((t.len() as i16).to_be_bytes());
        m.extend(t.as_bytes());
    }
    m.extend([0xff, 0xff, 0xff, 0xff]);
    assert_eq!(
        consumer_subscription(&m),
        vec!["a".to_string(), "bc".to_string()]
    );
    assert!(consumer_subscription(&m[..7]).is_empty());
}

#[test]
fn offsets_of_groups_empty_past_retention_expire() {
    let c = Coordinator::new(GroupConfig {
        offsets_retention: Duration::from_secs(60),
        ..cfg()
    });
    let old = crate::storage::log::now_ms() - 120_000;
    c.store_offsets(
        "g",
        vec![(
            ("t".into(), 0),
            CommittedOffset {
                offset: 5,
                leader_epoch: -1,
                metadata: String::new(),
                commit_timestamp: old,
            },
        )],
    );
    c.with_group("g", |g| g.state_changed_ms = old);
    // A group with members keeps its offsets.
    let (_a, _ja) = join_new(&c, "busy", &["range"]);
    c.store_offsets(
        "busy",
        vec![(
            ("t".into(), 0),
            CommittedOffset {
                offset: 1,
                leader_epoch: -1,
                metadata: String::new(),
                commit_timestamp: old,
            },
        )],
    );
    let expired = c.expire_offsets(crate::storage::log::now_ms());
    assert_eq!(expired, vec![("g".to_string(), ("t".to_string(), 0))]);
    assert!(c.fetch_offsets("g").is_empty());
    assert_eq!(c.fetch_offsets("busy").len(), 1);
}
