//! Moving a running cluster's controller listener between PLAINTEXT and mutual TLS, one rolling
//! restart per step, through a spare controller listener on another port: the layout the
//! StatefulSet records (`ControllerLayout`) and the next one once a roll is done (`next_layout`).
//!
//! Every node serves each controller listener it has and dials the first one named, on the
//! ports `controller.quorum.voters` gives. A step only changes what nodes on both sides of its
//! roll serve: a spare with the wanted protocol is added; everyone dials it; the controller
//! port's protocol changes while nobody dials it; everyone dials the controller port again; the
//! spare goes. The cluster ends as one created that way would be.

use super::crd::KafkaCluster;
use super::resources::{CONTROLLER_PORT, INTERNAL_PORT, METRICS_PORT};

/// StatefulSet annotation recording the spare controller listener while one is there:
/// `SSL:9090` or `PLAINTEXT:9090`, with `:dialled` once the nodes dial it.
pub const CONTROLLER_SPARE_ANNOTATION: &str = "kafka.evenkeel.dev/controller-spare";

/// The spare controller listener's name in server.properties.
pub const SPARE_LISTENER: &str = "CONTROLLER_SPARE";

/// The first port tried for the spare; lower ones after it, past the spec's listeners.
const FIRST_SPARE_PORT: i32 = 9090;

/// The second controller listener a move goes through.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SpareListener {
    pub tls: bool,
    pub port: i32,
    /// Whether the nodes dial it (first in `controller.listener.names`, its port in
    /// `controller.quorum.voters`) rather than the controller port.
    pub dialled: bool,
}

impl SpareListener {
    /// The annotation's spelling.
    pub fn annotation(&self) -> String {
        let protocol = if self.tls { "SSL" } else { "PLAINTEXT" };
        let dialled = if self.dialled { ":dialled" } else { "" };
        format!("{protocol}:{}{dialled}", self.port)
    }

    pub fn parse(s: &str) -> Option<SpareListener> {
        let mut parts = s.split(':');
        let tls = match parts.next()? {
            "SSL" => true,
            "PLAINTEXT" => false,
            _ => return None,
        };
        let port = parts
            .next()?
            .parse()
            .ok()
            .filter(|p| (1..=65535).contains(p))?;
        let dialled = match parts.next() {
            None => false,
            Some("dialled") => true,
            Some(_) => return None,
        };
        parts
            .next()
            .is_none()
            .then_some(SpareListener { tls, port, dialled })
    }
}

/// The controller listeners: the controller port's protocol, and the spare while a move is
/// under way.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ControllerLayout {
    pub tls: bool,
    pub spare: Option<SpareListener>,
}

impl ControllerLayout {
    /// Whether nothing is left to move for a controller listener that should be `want_tls`.
    pub fn settled(&self, want_tls: bool) -> bool {
        self.spare.is_none() && self.tls == want_tls
    }

    /// The port the nodes dial.
    pub fn dialled_port(&self) -> i32 {
        match self.spare {
            Some(s) if s.dialled => s.port,
            _ => CONTROLLER_PORT,
        }
    }

    /// What the layout is, for events and conditions.
    pub fn describe(&self) -> String {
        let protocol = |tls: bool| if tls { "mutual TLS" } else { "PLAINTEXT" };
        let main = format!("controller port {CONTROLLER_PORT} {}", protocol(self.tls));
        match self.spare {
            None => main,
            Some(s) => format!(
                "{main}, spare controller listener on {} {}; the nodes dial {}",
                s.port,
                protocol(s.tls),
                self.dialled_port()
            ),
        }
    }
}

/// The layout one roll nearer a controller listener that is `want_tls`, its spare (if it needs
/// one) on `spare_port`. Whatever `at` is, nodes rolled onto the result and nodes still on `at`
/// serve every listener the others dial, with the protocol they dial it with.
pub fn next_layout(at: ControllerLayout, want_tls: bool, spare_port: i32) -> ControllerLayout {
    match at.spare {
        None if at.tls == want_tls => at,
        None => ControllerLayout {
            tls: at.tls,
            spare: Some(SpareListener {
                tls: want_tls,
                port: spare_port,
                dialled: false,
            }),
        },
        // Nobody dials the spare: it can go once the controller port is right, else it is
        // dialled if it is right, else it goes so a right one can come.
        Some(s) if !s.dialled => ControllerLayout {
            tls: at.tls,
            spare: (at.tls != want_tls && s.tls == want_tls)
                .then_some(SpareListener { dialled: true, ..s }),
        },
        // Everyone dials the spare: the controller port changes, then is dialled again.
        Some(s) if at.tls != want_tls => ControllerLayout {
            tls: want_tls,
            spare: Some(s),
        },
        Some(s) => ControllerLayout {
            tls: at.tls,
            spare: Some(SpareListener {
                dialled: false,
                ..s
            }),
        },
    }
}

/// The spare's port for `kc`: 9090, or the next lower port no listener of the spec, the internal
/// listener, the controller or the metrics take.
pub fn spare_port(kc: &KafkaCluster) -> i32 {
    let taken = |p: i32| {
        [CONTROLLER_PORT, INTERNAL_PORT, METRICS_PORT].contains(&p)
            || kc.spec.listeners.iter().any(|l| l.port == p)
    };
    (1..=FIRST_SPARE_PORT)
        .rev()
        .find(|p| !taken(*p))
        .unwrap_or(FIRST_SPARE_PORT)
}

#[cfg(test)]
mod tests {
    use super::*;

    const PLAIN: ControllerLayout = ControllerLayout {
        tls: false,
        spare: None,
    };

    fn walk(from: ControllerLayout, want_tls: bool) -> Vec<ControllerLayout> {
        let mut at = from;
        let mut out = Vec::new();
        while !at.settled(want_tls) {
            at = next_layout(at, want_tls, 9090);
            out.push(at);
            assert!(out.len() <= 6, "no end: {out:?}");
        }
        out
    }

    /// Which (port, tls) a node on `l` dials, and which it serves.
    fn dials(l: &ControllerLayout) -> (i32, bool) {
        match l.spare {
            Some(s) if s.dialled => (s.port, s.tls),
            _ => (CONTROLLER_PORT, l.tls),
        }
    }

    fn serves(l: &ControllerLayout, dialled: (i32, bool)) -> bool {
        dialled == (CONTROLLER_PORT, l.tls) || l.spare.is_some_and(|s| dialled == (s.port, s.tls))
    }

    #[test]
    fn securing_the_controller_listener_takes_five_rolls_and_ends_as_a_created_secured_one() {
        let steps = walk(PLAIN, true);
        let spare = |dialled| {
            Some(SpareListener {
                tls: true,
                port: 9090,
                dialled,
            })
        };
        let expected = [
            ControllerLayout {
                tls: false,
                spare: spare(false),
            },
            ControllerLayout {
                tls: false,
                spare: spare(true),
            },
            ControllerLayout {
                tls: true,
                spare: spare(true),
            },
            ControllerLayout {
                tls: true,
                spare: spare(false),
            },
            ControllerLayout {
                tls: true,
                spare: None,
            },
        ];
        assert_eq!(steps, expected);
        let back = walk(*expected.last().unwrap(), false);
        assert_eq!(back.len(), 5, "{back:?}");
        assert_eq!(back.last(), Some(&PLAIN));
    }

    #[test]
    fn nodes_on_either_side_of_every_roll_reach_each_other_even_when_the_spec_turns_back() {
        // Every layout a move passes through, turned back at each point.
        let mut starts = vec![PLAIN];
        starts.extend(walk(PLAIN, true));
        for start in starts {
            for want in [true, false] {
                let mut at = start;
                for next in walk(start, want) {
                    for (a, b) in [(at, next), (next, at)] {
                        assert!(serves(&a, dials(&b)), "{b:?} cannot reach {a:?}");
                    }
                    at = next;
                }
            }
        }
    }

    #[test]
    fn the_spare_is_recorded_and_read_back() {
        for spare in [
            SpareListener {
                tls: true,
                port: 9090,
                dialled: false,
            },
            SpareListener {
                tls: false,
                port: 9089,
                dialled: true,
            },
        ] {
            assert_eq!(SpareListener::parse(&spare.annotation()), Some(spare));
        }
        for bad in [
            "",
            "SSL",
            "TLS:9090",
            "SSL:x",
            "SSL:9090:yes",
            "SSL:0",
            "SSL:9090:dialled:1",
        ] {
            assert_eq!(SpareListener::parse(bad), None, "{bad}");
        }
    }
}
