//! The stall watch of one followed partition: when a follower stays out of the ISR while its
//! fetches move nothing and the leader has nothing newer for it, for `replica.lag.time.max.ms`,
//! the fetcher reports it once (a WARN and a gauge) and again when it moves.

use std::time::{Duration, Instant};

/// What one fetch answer showed of a followed partition.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Observation {
    /// The answer appended, truncated or reset something: the next fetch asks anew.
    pub moved: bool,
    /// The metadata this broker applied has it in the partition's ISR.
    pub in_isr: bool,
    /// The leader's high watermark is at or below this replica's fetch offset: the leader has
    /// nothing committed that this replica lacks, so only the leader can let it back in.
    pub leader_has_nothing_newer: bool,
}

impl Observation {
    fn stalled(&self) -> bool {
        !self.moved && !self.in_isr && self.leader_has_nothing_newer
    }
}

/// A change to report.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StallEvent {
    /// Stalled for at least the lag time, since `Instant`.
    Began(Instant),
    /// A reported stall is over.
    Ended,
}

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct StallWatch {
    since: Option<Instant>,
    reported: bool,
}

impl StallWatch {
    /// Takes one answer's observation at `now`; returns what to report, if anything.
    pub fn observe(&mut self, o: Observation, now: Instant, lag: Duration) -> Option<StallEvent> {
        if !o.stalled() {
            self.since = None;
            return std::mem::take(&mut self.reported).then_some(StallEvent::Ended);
        }
        let since = *self.since.get_or_insert(now);
        if self.reported || now.saturating_duration_since(since) < lag {
            return None;
        }
        self.reported = true;
        Some(StallEvent::Began(since))
    }

    /// Whether a stall has been reported and not yet ended (its gauge is set).
    pub fn reported(&self) -> bool {
        self.reported
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const LAG: Duration = Duration::from_millis(3000);
    const STUCK: Observation = Observation {
        moved: false,
        in_isr: false,
        leader_has_nothing_newer: true,
    };

    #[test]
    fn a_stall_is_reported_once_after_the_lag_time_and_ended_when_the_follower_moves() {
        let t0 = Instant::now();
        let mut w = StallWatch::default();
        assert_eq!(w.observe(STUCK, t0, LAG), None);
        assert_eq!(
            w.observe(STUCK, t0 + LAG - Duration::from_millis(1), LAG),
            None
        );
        assert_eq!(w.observe(STUCK, t0 + LAG, LAG), Some(StallEvent::Began(t0)));
        assert!(w.reported());
        assert_eq!(w.observe(STUCK, t0 + LAG * 5, LAG), None, "reported once");
        let moved = Observation {
            moved: true,
            ..STUCK
        };
        assert_eq!(w.observe(moved, t0 + LAG * 6, LAG), Some(StallEvent::Ended));
        assert_eq!(w.observe(moved, t0 + LAG * 7, LAG), None);
        assert!(!w.reported());
        // A new stall counts from its own start.
        let t1 = t0 + LAG * 8;
        assert_eq!(w.observe(STUCK, t1, LAG), None);
        assert_eq!(w.observe(STUCK, t1 + LAG, LAG), Some(StallEvent::Began(t1)));
    }

    #[test]
    fn in_the_isr_or_behind_a_leader_with_newer_records_is_no_stall() {
        let t0 = Instant::now();
        let later = t0 + LAG * 2;
        for o in [
            Observation {
                in_isr: true,
                ..STUCK
            },
            // A throttled follower catching up gets empty answers while the leader has more.
            Observation {
                leader_has_nothing_newer: false,
                ..STUCK
            },
        ] {
            let mut w = StallWatch::default();
            assert_eq!(w.observe(o, t0, LAG), None);
            assert_eq!(w.observe(o, later, LAG), None, "{o:?}");
        }
        // An interruption restarts the count.
        let mut w = StallWatch::default();
        w.observe(STUCK, t0, LAG);
        w.observe(
            Observation {
                in_isr: true,
                ..STUCK
            },
            t0 + LAG / 2,
            LAG,
        );
        assert_eq!(w.observe(STUCK, t0 + LAG, LAG), None);
    }
}
