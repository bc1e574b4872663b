//! Status conditions for both custom resources: set one without losing its transition time, and
//! read one back. Times are RFC 3339 in UTC, as `metav1.Condition` has them.

use super::crd::Condition;

pub const READY: &str = "Ready";
pub const RECONCILING: &str = "Reconciling";
pub const DEGRADED: &str = "Degraded";
pub const RESOURCE_CONFLICT: &str = "ResourceConflict";

/// The current time as RFC 3339 in UTC, to the second (`2026-11-29T14:00:00Z`), as
/// `metav1.Condition` has it.
pub fn now_rfc3339() -> String {
    use k8s_openapi::jiff::{Timestamp, Unit};
    let now = Timestamp::now();
    now.round(Unit::Second).unwrap_or(now).to_string()
}

/// Sets condition `type_`, keeping its lastTransitionTime when the status does not change.
pub fn set_condition(
    conditions: &mut Vec<Condition>,
    type_: &str,
    status: bool,
    reason: &str,
    message: impl Into<String>,
    generation: Option<i64>,
    now: &str,
) {
    let status = if status { "True" } else { "False" }.to_string();
    let message = message.into();
    match conditions.iter_mut().find(|c| c.type_ == type_) {
        Some(c) => {
            if c.status != status {
                c.last_transition_time = now.to_string();
            }
            c.status = status;
            c.reason = reason.to_string();
            c.message = message;
            c.observed_generation = generation;
        }
        None => conditions.push(Condition {
            type_: type_.to_string(),
            status,
            reason: reason.to_string(),
            message,
            last_transition_time: now.to_string(),
            observed_generation: generation,
        }),
    }
}

/// Removes condition `type_` if present.
pub fn clear_condition(conditions: &mut Vec<Condition>, type_: &str) {
    conditions.retain(|c| c.type_ != type_);
}

/// The condition of `type_`, if set.
pub fn condition<'a>(conditions: &'a [Condition], type_: &str) -> Option<&'a Condition> {
    conditions.iter().find(|c| c.type_ == type_)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn now_is_rfc3339_to_the_second() {
        let now = now_rfc3339();
        assert_eq!(now.len(), 20, "{now}");
        assert!(now.ends_with('Z') && now.as_bytes()[10] == b'T', "{now}");
        assert!(now.parse::<k8s_openapi::jiff::Timestamp>().is_ok(), "{now}");
    }

    #[test]
    fn transition_time_changes_only_with_the_status() {
        let mut c = Vec::new();
        set_condition(&mut c, READY, false, "Creating", "m1", Some(1), "t1");
        set_condition(&mut c, READY, false, "Waiting", "m2", Some(2), "t2");
        assert_eq!(c.len(), 1);
        assert_eq!(c[0].last_transition_time, "t1");
        assert_eq!(c[0].reason, "Waiting");
        set_condition(&mut c, READY, true, "Ready", "", Some(2), "t3");
        assert_eq!(c[0].last_transition_time, "t3");
        assert_eq!(
            condition(&c, READY).map(|c| c.status.as_str()),
            Some("True")
        );
        clear_condition(&mut c, READY);
        assert!(c.is_empty());
    }
}
