use super::*;
use crate::config::consumer_groups::ConsumerGroupConfig;

fn topic_id(n: u8) -> KafkaUuid {
    KafkaUuid([n; 16])
}

fn topics() -> TopicsView {
    BTreeMap::from([
        ("orders".to_string(), (topic_id(1), 4)),
        ("audit".to_string(), (topic_id(2), 2)),
    ])
}

fn settings() -> ConsumerGroupConfig {
    ConsumerGroupConfig {
        max_size: 3,
        ..ConsumerGroupConfig::default()
    }
}

/// One heartbeat of group "g" over topics `t` (no regex matches anything).
fn send(
    g: &mut ConsumerGroup,
    hb: &Heartbeat,
    t: &TopicsView,
    s: &ConsumerGroupConfig,
    now: Instant,
) -> Result<HeartbeatAnswer, Refused> {
    let none = |_: &str| BTreeSet::new();
    let topic = |n: &str| t.get(n).copied();
    let cluster = Cluster {
        topic: &topic,
        matching: &none,
    };
    g.heartbeat("g", hb, &cluster, s, now)
}

/// An empty group, the cluster's topics, the settings and the time.
fn fresh() -> (ConsumerGroup, TopicsView, ConsumerGroupConfig, Instant) {
    (
        ConsumerGroup::default(),
        topics(),
        settings(),
        Instant::now(),
    )
}

fn join(id: &str, topic: &str) -> Heartbeat {
    Heartbeat {
        member_id: id.to_string(),
        member_epoch: 0,
        rebalance_timeout_ms: 30_000,
        topic_names: Some(vec![topic.to_string()]),
        owned: Some(Assignment::new()),
        ..Heartbeat::default()
    }
}

/// A heartbeat at `epoch` that says the member owns `owned`.
fn beat(id: &str, epoch: i32, owned: &Assignment) -> Heartbeat {
    Heartbeat {
        member_id: id.to_string(),
        member_epoch: epoch,
        rebalance_timeout_ms: -1,
        owned: Some(owned.clone()),
        ..Heartbeat::default()
    }
}

fn count(a: &Assignment) -> usize {
    a.values().map(|s| s.len()).sum()
}

#[test]
fn a_second_member_gets_partitions_only_after_the_first_revokes_them() {
    let (mut g, t, s, now) = fresh();
    let a1 = send(&mut g, &join("a", "orders"), &t, &s, now).unwrap();
    assert_eq!((a1.member_epoch, g.state_name()), (1, "Stable"));
    let a_owned = a1.assignment.unwrap();
    assert_eq!(count(&a_owned), 4);

    let b1 = send(&mut g, &join("b", "orders"), &t, &s, now).unwrap();
    // b is at the new epoch but everything of its target is still a's.
    assert_eq!(b1.member_epoch, 2);
    assert_eq!(b1.assignment, Some(Assignment::new()));
    assert_eq!(g.members["b"].state, MemberState::UnreleasedPartitions);

    // a is asked to revoke half: its epoch stays until it has.
    let a2 = send(&mut g, &beat("a", 1, &a_owned), &t, &s, now).unwrap();
    assert_eq!(a2.member_epoch, 1);
    let a_kept = a2.assignment.unwrap();
    assert_eq!(count(&a_kept), 2);
    assert_eq!(g.members["a"].state, MemberState::UnrevokedPartitions);
    assert_eq!(g.state_name(), "Reconciling");

    // b still gets nothing while a owns them.
    let b2 = send(&mut g, &beat("b", 2, &Assignment::new()), &t, &s, now).unwrap();
    assert_eq!(b2.assignment, None, "nothing changed, nothing sent");
    assert_eq!(g.members["b"].assigned, Assignment::new());

    // a says it revoked: it moves to epoch 2; then b gets the two partitions.
    let a3 = send(&mut g, &beat("a", 1, &a_kept), &t, &s, now).unwrap();
    assert_eq!(a3.member_epoch, 2);
    let b3 = send(&mut g, &beat("b", 2, &Assignment::new()), &t, &s, now).unwrap();
    let b_owned = b3.assignment.unwrap();
    assert_eq!(count(&b_owned), 2);
    assert!(b_owned[&topic_id(1)].is_disjoint(&a_kept[&topic_id(1)]));
    assert_eq!(g.state_name(), "Stable");
}

#[test]
fn epochs_ahead_or_behind_are_fenced_except_a_lost_answer() {
    let (mut g, mut t, s, now) = fresh();
    let a = send(&mut g, &join("a", "orders"), &t, &s, now).unwrap();
    // A wider subscription moves a to epoch 2 with more partitions (nothing to revoke).
    let mut wider = beat("a", 1, &a.assignment.unwrap());
    wider.topic_names = Some(vec!["orders".into(), "audit".into()]);
    let a = send(&mut g, &wider, &t, &s, now).unwrap();
    assert_eq!(a.member_epoch, 2);
    // audit grows: a moves to epoch 3.
    t.insert("audit".into(), (topic_id(2), 3));
    let a = send(&mut g, &beat("a", 2, &a.assignment.unwrap()), &t, &s, now).unwrap();
    assert_eq!(a.member_epoch, 3);
    let owned = a.assignment.unwrap();
    assert_eq!(count(&owned), 7);
    let ahead = send(&mut g, &beat("a", 9, &owned), &t, &s, now).unwrap_err();
    assert_eq!(ahead.code, codes::FENCED_MEMBER_EPOCH);
    assert!(
        ahead
            .message
            .as_deref()
            .unwrap_or_default()
            .contains("greater member epoch (9)"),
        "{:?}",
        ahead.message
    );
    let behind = send(&mut g, &beat("a", 1, &owned), &t, &s, now).unwrap_err();
    assert_eq!(behind.code, codes::FENCED_MEMBER_EPOCH);
    // The previous epoch with a partition it was not given is fenced too.
    let partial = BTreeMap::from([(topic_id(9), BTreeSet::from([0]))]);
    let stale = send(&mut g, &beat("a", 2, &partial), &t, &s, now).unwrap_err();
    assert_eq!(stale.code, codes::FENCED_MEMBER_EPOCH);
    // The previous epoch (2) owning part of what it was given (what it held before the
    // answer that grew it got lost): let through, as Kafka does.
    let before_growth = BTreeMap::from([(topic_id(1), BTreeSet::from([0, 1, 2, 3]))]);
    let lost = send(&mut g, &beat("a", 2, &before_growth), &t, &s, now).unwrap();
    assert_eq!(lost.member_epoch, 3);
    // The previous epoch (2) with what it was given: the member missed the answer.
    assert_eq!(
        send(&mut g, &beat("a", 2, &owned), &t, &s, now)
            .unwrap()
            .member_epoch,
        3
    );
    let stranger = send(&mut g, &beat("x", 3, &owned), &t, &s, now).unwrap_err();
    assert_eq!(stranger.code, codes::UNKNOWN_MEMBER_ID);
    assert_eq!(
        stranger.message.as_deref(),
        Some("Member x is not a member of group g.")
    );
}

#[test]
fn a_leaving_member_frees_its_partitions_at_once() {
    let (mut g, t, s, now) = fresh();
    send(&mut g, &join("a", "orders"), &t, &s, now).unwrap();
    send(&mut g, &join("b", "orders"), &t, &s, now).unwrap();
    let epoch = g.group_epoch;
    let left = send(
        &mut g,
        &beat("a", LEAVE_EPOCH, &Assignment::new()),
        &t,
        &s,
        now,
    )
    .unwrap();
    assert_eq!(left.member_epoch, LEAVE_EPOCH);
    assert!(g.group_epoch > epoch);
    let b = send(&mut g, &beat("b", 2, &Assignment::new()), &t, &s, now).unwrap();
    assert_eq!(count(&b.assignment.unwrap()), 4);
}

#[test]
fn silent_members_and_members_that_do_not_revoke_are_removed() {
    let (mut g, t, s, now) = fresh();
    let a = send(&mut g, &join("a", "orders"), &t, &s, now).unwrap();
    let owned = a.assignment.unwrap();
    send(&mut g, &join("b", "orders"), &t, &s, now).unwrap();
    send(&mut g, &beat("a", 1, &owned), &t, &s, now).unwrap();
    assert_eq!(g.members["a"].state, MemberState::UnrevokedPartitions);
    // a keeps heartbeating but never revokes: its rebalance timeout (30 s) removes it.
    let later = now + Duration::from_secs(31);
    send(
        &mut g,
        &beat("a", 1, &owned),
        &t,
        &s,
        later - Duration::from_secs(1),
    )
    .unwrap();
    assert!(g.expire(&s, later).contains(&"a".to_string()));
    // b's session (45 s) has run out too by then.
    assert_eq!(
        g.expire(&s, now + Duration::from_secs(46)),
        vec!["b".to_string()]
    );
    assert_eq!(g.state_name(), "Empty");
}

#[test]
fn a_static_member_takes_its_place_back_after_a_temporary_leave() {
    let (mut g, t, s, now) = fresh();
    let mut hb = join("a", "orders");
    hb.instance_id = Some("i1".into());
    let a = send(&mut g, &hb, &t, &s, now).unwrap();
    let mut other = join("z", "orders");
    other.instance_id = Some("i1".into());
    let taken = send(&mut g, &other, &t, &s, now).unwrap_err();
    assert_eq!(taken.code, codes::UNRELEASED_INSTANCE_ID);
    send(
        &mut g,
        &beat("a", STATIC_LEAVE_EPOCH, &Assignment::new()),
        &t,
        &s,
        now,
    )
    .unwrap();
    let epoch = g.group_epoch;
    let back = send(&mut g, &other, &t, &s, now).unwrap();
    assert_eq!(back.assignment, a.assignment);
    assert_eq!(back.member_epoch, a.member_epoch);
    assert_eq!(
        g.group_epoch, epoch,
        "no rebalance for a returning static member"
    );
    // The member id it replaced is fenced; an instance id nobody holds is unknown.
    let mut zombie = beat("a", back.member_epoch, &Assignment::new());
    zombie.instance_id = Some("i1".into());
    let fenced = send(&mut g, &zombie, &t, &s, now).unwrap_err();
    assert_eq!(fenced.code, codes::FENCED_INSTANCE_ID);
    assert_eq!(
        fenced.message.as_deref(),
        Some("Static member a with instance id i1 was fenced by member z.")
    );
    zombie.instance_id = Some("i9".into());
    let unknown = send(&mut g, &zombie, &t, &s, now).unwrap_err();
    assert_eq!(unknown.code, codes::UNKNOWN_MEMBER_ID);
    assert_eq!(
        unknown.message.as_deref(),
        Some("Instance id i9 is unknown.")
    );
}

#[test]
fn a_static_member_leaving_for_now_frees_what_it_was_giving_up() {
    let (mut g, t, s, now) = fresh();
    let mut a = join("a", "orders");
    a.instance_id = Some("ia".into());
    let first = send(&mut g, &a, &t, &s, now).unwrap();
    send(&mut g, &join("b", "orders"), &t, &s, now).unwrap();
    let mut asked = beat("a", 1, &first.assignment.unwrap());
    asked.instance_id = Some("ia".into());
    send(&mut g, &asked, &t, &s, now).unwrap();
    assert_eq!(g.members["a"].state, MemberState::UnrevokedPartitions);
    asked.member_epoch = STATIC_LEAVE_EPOCH;
    send(&mut g, &asked, &t, &s, now).unwrap();
    // b gets the two partitions a was giving up at once, not after a's session.
    let b = send(&mut g, &beat("b", 2, &Assignment::new()), &t, &s, now).unwrap();
    assert_eq!(count(&b.assignment.unwrap()), 2);
}

#[test]
fn the_group_refuses_members_past_its_size_and_follows_topic_changes() {
    let (mut g, mut t, s, now) = fresh();
    for id in ["a", "b", "c"] {
        send(&mut g, &join(id, "audit"), &t, &s, now).unwrap();
    }
    let full = send(&mut g, &join("d", "audit"), &t, &s, now).unwrap_err();
    assert_eq!(full.code, codes::GROUP_MAX_SIZE_REACHED);
    // A member subscribed to a topic that does not exist yet gets it once it is created.
    let mut g = ConsumerGroup::default();
    let a = send(&mut g, &join("a", "later"), &t, &s, now).unwrap();
    assert_eq!(a.assignment, Some(Assignment::new()));
    t.insert("later".into(), (topic_id(3), 3));
    let a = send(
        &mut g,
        &beat("a", a.member_epoch, &Assignment::new()),
        &t,
        &s,
        now,
    );
    assert_eq!(count(&a.unwrap().assignment.unwrap()), 3);
}

#[test]
fn commits_need_the_members_current_epoch() {
    let (mut g, t, s, now) = fresh();
    send(&mut g, &join("a", "orders"), &t, &s, now).unwrap();
    assert_eq!(g.check_member_epoch("a", 1), Ok(()));
    assert_eq!(g.check_member_epoch("a", 0), Err(codes::STALE_MEMBER_EPOCH));
    assert_eq!(g.check_member_epoch("b", 1), Err(codes::UNKNOWN_MEMBER_ID));
}

#[test]
fn a_group_read_back_from_its_records_goes_on_where_it_was() {
    let (mut g, t, s, now) = fresh();
    let a = send(&mut g, &join("a", "orders"), &t, &s, now).unwrap();
    let mut b = join("b", "orders");
    b.instance_id = Some("i-b".into());
    send(&mut g, &b, &t, &s, now).unwrap();
    // a is mid-revocation when the coordinator moves.
    send(&mut g, &beat("a", 1, &a.assignment.unwrap()), &t, &s, now).unwrap();
    assert_eq!(g.members["a"].state, MemberState::UnrevokedPartitions);
    let mut copy = ConsumerGroup::default();
    for (k, v) in g.records("g") {
        let bytes = v.try_encode().unwrap();
        let read = super::super::consumer_records::ConsumerRecordValue::decode(&k, &bytes);
        copy.replay(&k, Some(read.unwrap()), now);
    }
    assert_eq!((copy.group_epoch, copy.assignment_epoch), (2, 2));
    assert_eq!(copy.target, g.target);
    for id in ["a", "b"] {
        let (was, is) = (&g.members[id], &copy.members[id]);
        assert_eq!(
            (was.member_epoch, was.state),
            (is.member_epoch, is.state),
            "{id}"
        );
        assert_eq!(was.assigned, is.assigned, "{id}");
        assert_eq!(was.pending_revocation, is.pending_revocation, "{id}");
        assert_eq!(was.instance_id, is.instance_id, "{id}");
        assert_eq!(was.topic_names, is.topic_names, "{id}");
    }
    // The first heartbeat on the new coordinator moves nothing; a's revocation completes.
    let kept = copy.members["a"].assigned.clone();
    let a = send(&mut copy, &beat("a", 1, &kept), &t, &s, now).unwrap();
    assert_eq!(a.member_epoch, 2);
    assert_eq!(copy.group_epoch, 2, "reading the group back moves no epoch");
    // A member's tombstone removes it.
    let gone = super::super::consumer_records::ConsumerRecordKey::MemberMetadata {
        group: "g".into(),
        member: "b".into(),
    };
    copy.replay(&gone, None, now);
    assert!(!copy.members.contains_key("b"));
}

/// `g`'s records replayed into a new group in `order` of record types, then loaded.
fn read_back(g: &ConsumerGroup, types_first: &[&str], now: Instant) -> ConsumerGroup {
    use super::super::consumer_records::ConsumerRecordValue as V;
    let mut records = g.records("g");
    let rank = |v: &V| {
        let name = format!("{v:?}");
        types_first
            .iter()
            .position(|t| name.starts_with(t))
            .unwrap_or(types_first.len())
    };
    records.sort_by_key(|(_, v)| rank(v));
    let mut copy = ConsumerGroup::default();
    for (k, v) in records {
        copy.replay(&k, Some(v), now);
    }
    copy.after_load(now);
    copy
}

#[test]
fn a_revoking_member_read_back_in_any_order_keeps_its_whole_timeout() {
    let (mut g, t, s, now) = fresh();
    let a = send(&mut g, &join("a", "orders"), &t, &s, now).unwrap();
    send(&mut g, &join("b", "orders"), &t, &s, now).unwrap();
    send(&mut g, &beat("a", 1, &a.assignment.unwrap()), &t, &s, now).unwrap();
    // Compaction can leave a member's assignment (8) before its subscription (5).
    let mut copy = read_back(&g, &["CurrentMemberAssignment"], now);
    assert_eq!(copy.members["a"].state, MemberState::UnrevokedPartitions);
    assert!(copy.expire(&s, now + Duration::from_secs(1)).is_empty());
    assert_eq!(
        copy.expire(&s, now + Duration::from_secs(31)),
        vec!["a".to_string()],
        "the 30 s rebalance timeout runs from the load"
    );
}

#[test]
fn a_group_read_back_moves_its_epoch_only_for_what_changed_meanwhile() {
    let (mut g, mut t, s, now) = fresh();
    let mut by_regex = join("r", "orders");
    by_regex.topic_names = None;
    by_regex.topic_regex = Some("ord.*".into());
    let matching = |re: &str| -> BTreeSet<String> {
        t.keys()
            .filter(|n| n.starts_with(&re[..3]))
            .cloned()
            .collect()
    };
    let topic = |n: &str| t.get(n).copied();
    let cluster = Cluster {
        topic: &topic,
        matching: &matching,
    };
    let r = g.heartbeat("g", &by_regex, &cluster, &s, now).unwrap();
    assert_eq!(count(r.assignment.as_ref().unwrap()), 4);
    // The regex member's first heartbeat after a load moves nothing.
    let mut copy = read_back(&g, &[], now);
    let epoch = copy.group_epoch;
    let again = beat("r", r.member_epoch, &r.assignment.clone().unwrap());
    let r2 = copy.heartbeat("g", &again, &cluster, &s, now).unwrap();
    assert_eq!((copy.group_epoch, r2.member_epoch), (epoch, r.member_epoch));
    // A topic that grew while the group was being moved is assigned after the load.
    t.insert("orders".into(), (topic_id(1), 6));
    let grown_topic = |n: &str| t.get(n).copied();
    let grown_cluster = Cluster {
        topic: &grown_topic,
        matching: &|_: &str| BTreeSet::from(["orders".to_string()]),
    };
    let mut moved = read_back(&g, &[], now);
    let grown = moved
        .heartbeat("g", &again, &grown_cluster, &s, now)
        .unwrap();
    assert_eq!(moved.group_epoch, epoch + 1);
    assert_eq!(count(&grown.assignment.unwrap()), 6);
}
