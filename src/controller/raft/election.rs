//! When this voter stands for election. openraft draws one election timeout per process and
//! checks it only on its tick (every 375 ms), so two voters started together campaign at the
//! same instants, each votes for itself, and they stay in step, splitting every vote. This timer
//! draws a fresh random timeout for every wait and looks every 10 ms; openraft's own election
//! trigger is off (`enable_elect: false`).

use std::sync::Arc;
use std::time::{Duration, Instant};

use openraft::ServerState;
use rand::Rng;

use super::{NodeId, Raft};

/// How often the timer looks at the clock.
const CHECK: Duration = Duration::from_millis(10);

/// The waits, from openraft's configuration.
#[derive(Debug, Clone, Copy)]
pub struct Timeouts {
    /// The random part of every wait is drawn from `min..max`.
    pub min: Duration,
    pub max: Duration,
    /// How long after hearing from a leader the voters still refuse to vote for anyone else
    /// (openraft's leader lease): a follower waits this out before it stands.
    pub lease: Duration,
    /// Extra wait once a voter with a longer log refused this node: that voter can win, this one
    /// cannot, so it gets the first chance.
    pub defer: Duration,
}

/// The election timer, shared by the quorum's network (which reports what it heard) and the
/// task that triggers elections.
#[derive(Clone)]
pub struct ElectionTimer(Arc<parking_lot::Mutex<Timer>>);

struct Timer {
    timeouts: Timeouts,
    /// When the wait began: this node last heard from a leader, granted a vote or stood
    /// itself (a leader, learner or non-voter restarts it on every look).
    since: Instant,
    /// The random part of the current wait.
    drawn: Duration,
    /// A voter with a longer log refused this node's last campaign.
    deferred: bool,
    /// AppendEntries and vote requests being handled (written and fsynced) right now: openraft
    /// took note of their sender when they arrived, so this node must not stand meanwhile.
    in_flight: usize,
    /// When this node last stood.
    stood: Option<Instant>,
}

impl Timer {
    fn restart(&mut self, now: Instant) {
        self.since = now;
        let t = self.timeouts;
        self.drawn = match t.max > t.min {
            true => rand::thread_rng().gen_range(t.min..t.max),
            false => t.min,
        };
    }
}

/// Held while a request from another voter is handled (`ElectionTimer::handling`).
pub struct Handling(ElectionTimer);

impl Drop for Handling {
    fn drop(&mut self) {
        let mut t = self.0 .0.lock();
        t.in_flight = t.in_flight.saturating_sub(1);
    }
}

impl ElectionTimer {
    pub fn new(timeouts: Timeouts) -> ElectionTimer {
        let mut t = Timer {
            timeouts,
            since: Instant::now(),
            drawn: Duration::ZERO,
            deferred: false,
            in_flight: 0,
            stood: None,
        };
        t.restart(t.since);
        ElectionTimer(Arc::new(parking_lot::Mutex::new(t)))
    }

    /// A leader's AppendEntries was accepted or a vote granted: wait again, from now. A
    /// deferral belonged to the election that is now over.
    pub fn heard(&self) {
        let mut t = self.0.lock();
        t.deferred = false;
        t.restart(Instant::now());
    }

    /// Marks a request from another voter as being handled until the guard drops: a leader's
    /// AppendEntries that takes long to write (a catch-up on a slow disk) must not look like
    /// silence.
    pub fn handling(&self) -> Handling {
        self.0.lock().in_flight += 1;
        Handling(self.clone())
    }

    /// A voter with a longer log refused this node's vote request.
    pub fn defer(&self) {
        self.0.lock().deferred = true;
    }

    /// Whether to stand at `now`. `followed_leader`: this node's vote is a leader's committed
    /// one, so it first waits out that leader's lease (the other voters refuse until then).
    fn due(&self, now: Instant, followed_leader: bool) -> bool {
        let t = self.0.lock();
        if t.in_flight > 0 {
            return false;
        }
        let mut wait = t.drawn;
        if followed_leader {
            wait += t.timeouts.lease;
        }
        if t.deferred {
            wait += t.timeouts.defer;
        }
        now.saturating_duration_since(t.since) >= wait
    }

    /// Whether a voter alone in the quorum stands at `now`: at once the first time, then again
    /// only after `min`, so that a campaign openraft has not finished (its vote still being
    /// written) is not started over and over.
    fn due_alone(&self, now: Instant) -> bool {
        let t = self.0.lock();
        t.stood
            .is_none_or(|at| now.saturating_duration_since(at) >= t.timeouts.min)
    }

    /// This node stands now: the next wait starts afresh.
    fn stood(&self, now: Instant) {
        let mut t = self.0.lock();
        t.deferred = false;
        t.stood = Some(now);
        t.restart(now);
    }
}

/// What the timer needs from openraft's metrics.
struct View {
    state: ServerState,
    voter: bool,
    alone: bool,
    followed_leader: bool,
}

fn view(raft: &Raft, id: NodeId) -> View {
    let m = raft.metrics();
    let m = m.borrow();
    let membership = m.membership_config.membership();
    View {
        state: m.state,
        voter: membership.voter_ids().any(|v| v == id),
        alone: membership.voter_ids().count() == 1,
        followed_leader: m.vote.is_committed(),
    }
}

/// Triggers an election whenever this voter's wait runs out, until openraft shuts down.
pub async fn run(raft: Raft, id: NodeId, timer: ElectionTimer) {
    let mut tick = tokio::time::interval(CHECK);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
    loop {
        tick.tick().await;
        let v = view(&raft, id);
        let stand = match v.state {
            ServerState::Shutdown => return,
            // A leader or learner that becomes a follower waits a whole timeout first.
            ServerState::Leader | ServerState::Learner => {
                timer.heard();
                false
            }
            _ if !v.voter => {
                timer.heard();
                false
            }
            // Alone, there is nobody to wait for.
            _ if v.alone => timer.due_alone(Instant::now()),
            _ => timer.due(Instant::now(), v.followed_leader),
        };
        if !stand {
            continue;
        }
        timer.stood(Instant::now());
        tracing::debug!(node = id, "election timeout passed; standing for election");
        if raft.trigger().elect().await.is_err() {
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn timeouts() -> Timeouts {
        Timeouts {
            min: Duration::from_millis(500),
            max: Duration::from_millis(1000),
            lease: Duration::from_millis(1000),
            defer: Duration::from_millis(2000),
        }
    }

    fn drawn(t: &ElectionTimer) -> Duration {
        t.0.lock().drawn
    }

    #[test]
    fn every_wait_draws_a_fresh_timeout_in_range() {
        let t = ElectionTimer::new(timeouts());
        let mut seen = std::collections::HashSet::new();
        for _ in 0..50 {
            t.heard();
            let d = drawn(&t);
            assert!(d >= timeouts().min && d < timeouts().max, "{d:?}");
            seen.insert(d);
        }
        assert!(seen.len() > 10, "the waits repeat: {seen:?}");
    }

    #[test]
    fn a_request_being_handled_holds_the_election_off() {
        let t = ElectionTimer::new(timeouts());
        let since = t.0.lock().since;
        let late = since + Duration::from_secs(10);
        let guard = t.handling();
        assert!(
            !t.due(late, false),
            "stood while a leader's request was being written"
        );
        drop(guard);
        assert!(t.due(late, false));
    }

    #[test]
    fn a_lone_voter_stands_at_once_and_then_not_again_before_min() {
        let t = ElectionTimer::new(timeouts());
        let now = Instant::now();
        assert!(t.due_alone(now));
        t.stood(now);
        assert!(!t.due_alone(now + Duration::from_millis(10)));
        assert!(t.due_alone(now + timeouts().min));
    }

    #[test]
    fn a_follower_waits_out_the_lease_and_a_deferred_candidate_longer() {
        let t = ElectionTimer::new(timeouts());
        let since = t.0.lock().since;
        let d = drawn(&t);
        assert!(!t.due(since + d - Duration::from_millis(1), false));
        assert!(t.due(since + d, false));
        assert!(
            !t.due(since + d, true),
            "the leader's lease is still running"
        );
        assert!(t.due(since + d + timeouts().lease, true));
        t.defer();
        assert!(!t.due(since + d + timeouts().lease, true));
        assert!(t.due(since + d + timeouts().lease + timeouts().defer, true));
        // Standing clears the deferral and starts a new wait.
        let now = since + Duration::from_secs(10);
        t.stood(now);
        let d = drawn(&t);
        assert!(!t.due(now + d - Duration::from_millis(1), false));
        assert!(t.due(now + d, false));
    }
}
