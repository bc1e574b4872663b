//! Unit tests of `replacement`: the order of the steps, and when a roll counts as done.

use super::*;

#[test]
fn a_replacement_goes_trust_sign_finish_each_after_a_roll() {
    use Phase::*;
    // Not asked for, none going on: the renewal applies.
    assert_eq!(next_step(None, None, false, false, true), None);
    assert_eq!(next_step(None, None, true, false, false), Some(Step::Start));
    // A next key whose certificate is not trusted yet (a stop between the two writes).
    assert_eq!(
        next_step(Some(Trusting), None, false, false, true),
        Some(Step::Trust)
    );
    assert_eq!(
        next_step(Some(Trusting), None, false, true, true),
        Some(Step::Trust),
        "the generation was not raised for step 1"
    );
    assert_eq!(
        next_step(Some(Trusting), Some(Trusting), false, true, false),
        Some(Step::Wait)
    );
    assert_eq!(
        next_step(Some(Trusting), Some(Trusting), true, true, true),
        Some(Step::Sign)
    );
    // The keys swapped, the generation not raised yet: raised whatever the pods run.
    assert_eq!(
        next_step(Some(Signing), Some(Trusting), false, false, false),
        Some(Step::RecordSigning)
    );
    assert_eq!(
        next_step(Some(Signing), Some(Signing), false, false, false),
        Some(Step::Wait)
    );
    assert_eq!(
        next_step(Some(Signing), Some(Signing), false, false, true),
        Some(Step::Finish)
    );
}

#[test]
fn the_phase_is_read_from_the_secrets() {
    let ca = Ca::generate("main-cluster-ca").unwrap();
    assert_eq!(Phase::of(&ca, None), None);
    let next = Ca::generate("main-cluster-ca").unwrap();
    assert_eq!(Phase::of(&ca, Some(&next.key_pem)), Some(Phase::Trusting));
    let mut both = ca.clone();
    both.trusted.push(next.cert_pem.clone());
    assert_eq!(Phase::of(&both, None), Some(Phase::Signing));
    assert_eq!(next_certificate(&ca, &next.key_pem), None);
    assert_eq!(next_certificate(&both, &next.key_pem), Some(next.cert_pem));
    for p in [Phase::Trusting, Phase::Signing] {
        assert_eq!(Phase::parse(p.as_str()), Some(p));
    }
    assert_eq!(Phase::parse("other"), None);
}

#[test]
fn a_bundle_is_read_back_with_the_certificate_of_the_key_first() {
    let old = Ca::generate("main-cluster-ca").unwrap();
    let new = Ca::generate("main-cluster-ca").unwrap();
    let bundle = format!("{}{}", old.cert_pem, new.cert_pem);
    let signing_old = Ca::from_pem(&bundle, old.key_pem.clone(), "s").unwrap();
    assert_eq!(signing_old.cert_pem, old.cert_pem);
    assert_eq!(signing_old.trusted_pem(), bundle);
    let signing_new = Ca::from_pem(&bundle, new.key_pem.clone(), "s").unwrap();
    assert_eq!(signing_new.cert_pem, new.cert_pem);
    assert_eq!(
        signing_new.trusted(),
        [new.cert_pem.clone(), old.cert_pem.clone()]
    );
    let leaf = signing_new.sign("x", &[], 1).unwrap();
    assert!(super::super::signed_by(&leaf.cert_pem, &new.cert_pem));
    assert!(!super::super::signed_by(&leaf.cert_pem, &old.cert_pem));
    // A key none of the certificates belongs to.
    let stranger = Ca::generate("main-cluster-ca").unwrap();
    let err = Ca::from_pem(&bundle, stranger.key_pem, "main-cluster-ca-cert")
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("none of its 2 certificates belongs to its key"),
        "{err}"
    );
}

fn pod(generation: &str, ready: bool, deleting: bool) -> Pod {
    serde_json::from_value(serde_json::json!({
        "metadata": {
            "name": "p",
            "annotations": {"kafka.evenkeel.dev/cluster-ca-cert-generation": generation},
            "deletionTimestamp": if deleting { Some("2026-12-06T00:00:00Z") } else { None },
        },
        "status": {"conditions": [{"type": "Ready", "status": if ready { "True" } else { "False" }}]},
    }))
    .unwrap()
}

#[test]
fn a_roll_is_done_when_every_broker_runs_the_generation_and_is_ready() {
    let key = CaKind::Cluster.generation_annotation();
    let done = Rollout::of(&[pod("2", true, false), pod("2", true, false)], 2);
    assert!(done.rolled_to(key, 2));
    assert!(!done.rolled_to(key, 3));
    assert!(!done.rolled_to(CaKind::Clients.generation_annotation(), 2));
    let stale = Rollout::of(&[pod("2", true, false), pod("1", true, false)], 2);
    assert!(!stale.rolled_to(key, 2));
    let not_ready = Rollout::of(&[pod("2", true, false), pod("2", false, false)], 2);
    assert!(!not_ready.rolled_to(key, 2));
    // A pod being deleted is not counted; one missing is not done.
    let missing = Rollout::of(&[pod("2", true, false), pod("1", true, true)], 2);
    assert!(!missing.rolled_to(key, 2));
    let replaced = Rollout::of(
        &[
            pod("2", true, false),
            pod("2", true, false),
            pod("1", false, true),
        ],
        2,
    );
    assert!(replaced.rolled_to(key, 2));
    assert!(!Rollout::of(&[], 0).rolled_to(key, 2));
}

#[test]
fn the_new_ca_is_named_apart_from_the_old_one() {
    assert_eq!(next_subject("main-cluster-ca"), "main-cluster-ca v1");
    assert_eq!(next_subject("main-cluster-ca v1"), "main-cluster-ca v2");
    assert_eq!(next_subject("main-cluster-ca v9"), "main-cluster-ca v10");
    assert_eq!(next_subject("a v"), "a v v1");
    assert_eq!(next_subject("a vx"), "a vx v1");
}
