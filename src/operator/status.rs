//! Status conditions for both custom resources: set one without losing its transition time, and
//! read one back. Times are RFC 3339 in UTC, as `metav1.Condition` has them.

use super::crd::Condition;

pub const READY: &str = "Ready";
pub const RECONCILING: &str = "Reconciling";
pub const DEGRADED: &str = "Degraded";
pub const RESOURCE_CONFLICT: &str = "ResourceConflict";

/// The current time as RFC 3339 (`2026-11-29T14:00:00Z`).
pub fn now_rfc3339() -> String {
    let secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs() as i64)
        .unwrap_or(0);
    rfc3339(secs)
}

/// Seconds since the epoch as RFC 3339 in UTC (civil-from-days, proleptic Gregorian).
pub fn rfc3339(secs: i64) -> String {
    let days = secs.div_euclid(86_400);
    let rem = secs.rem_euclid(86_400);
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
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
    fn rfc3339_matches_known_instants() {
        assert_eq!(rfc3339(0), "1970-01-01T00:00:00Z");
        assert_eq!(rfc3339(951_782_400), "2000-02-29T00:00:00Z");
        assert_eq!(rfc3339(1_795_960_800), "2026-11-29T14:00:00Z");
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
