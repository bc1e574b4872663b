//! A SASL listener's front door fed arbitrary request frames: the broker's SaslAuthenticator
//! (ApiVersions, SaslHandshake, SaslAuthenticate; anything else refused before a login) over
//! the frames of one connection. Any frame may be refused or close the connection; none may
//! panic, and no login may succeed without the password.
#![no_main]

#[path = "common/alice.rs"]
mod alice;

use std::collections::BTreeMap;
use std::sync::{Arc, OnceLock};

use bytes::Bytes;
use evenkeel::broker::sasl::{SaslAuthenticator, Step};
use evenkeel::config::auth::ListenerSasl;
use evenkeel::protocol::peek_header;
use evenkeel::security::sasl::ScramMechanism;
use libfuzzer_sys::fuzz_target;

fn settings() -> Arc<ListenerSasl> {
    static SETTINGS: OnceLock<Arc<ListenerSasl>> = OnceLock::new();
    SETTINGS
        .get_or_init(|| {
            Arc::new(ListenerSasl {
                mechanisms: ["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"]
                    .map(String::from)
                    .into(),
                plain_users: BTreeMap::from([("alice".to_string(), alice::PASSWORD.to_string())]),
            })
        })
        .clone()
}

/// The input as frames, each a big-endian u16 length and that many bytes (the last one cut
/// short if the input ends).
fn frames(mut data: &[u8]) -> Vec<Bytes> {
    let mut out = Vec::new();
    while data.len() >= 2 {
        let len = usize::from(u16::from_be_bytes([data[0], data[1]]));
        let end = (2 + len).min(data.len());
        out.push(Bytes::copy_from_slice(&data[2..end]));
        data = &data[end..];
    }
    out
}

fuzz_target!(|data: &[u8]| {
    let scram = |user: &str, m: ScramMechanism| (user == "alice").then(|| alice::scram(m));
    let mut door = SaslAuthenticator::new("SASL_PLAINTEXT", settings(), 0);
    for frame in frames(data) {
        let raw = peek_header(&frame).ok();
        match door.on_request(&scram, &frame, raw) {
            Step::Serve | Step::Answer(_) => {}
            Step::Authenticated(_, principal) => {
                // Only PLAIN with the password in the input can log in; a SCRAM proof cannot
                // be guessed.
                assert_eq!(principal, "User:alice");
                let text = String::from_utf8_lossy(&frame);
                assert!(
                    text.contains(alice::PASSWORD),
                    "a login without the password"
                );
            }
            // The connection is closed: nothing more is read from it.
            Step::AnswerAndClose(..) | Step::Failed(..) | Step::Close(_) => return,
        }
    }
});
