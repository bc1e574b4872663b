//! The broker's SASL servers (PLAIN, SCRAM-SHA-256, SCRAM-SHA-512) fed arbitrary client messages.
//! Any input may be refused with an error; none may panic, and none may log in without the password.
#![no_main]

#[path = "common/alice.rs"]
mod alice;

use evenkeel::security::sasl::{Credentials, Mechanism, SaslServer, SaslStep, ScramMechanism};
use libfuzzer_sys::fuzz_target;

/// Splits the input into client messages; 0xFF never occurs in UTF-8, so no valid message needs it.
const SEPARATOR: u8 = 0xff;

fuzz_target!(|data: &[u8]| {
    let Some((&selector, rest)) = data.split_first() else {
        return;
    };
    let mechanism = Mechanism::ALL[usize::from(selector) % Mechanism::ALL.len()];
    let scram = |user: &str, m: ScramMechanism| (user == "alice").then(|| alice::scram(m));
    let plain = |user: &str, password: &str| user == "alice" && password == alice::PASSWORD;
    let credentials = Credentials {
        scram: &scram,
        plain: &plain,
    };
    let mut server = SaslServer::new(mechanism);
    for message in rest.split(|&b| b == SEPARATOR) {
        match server.evaluate(message, &credentials) {
            Ok(SaslStep::Challenge(_)) => {}
            Ok(SaslStep::Complete {
                authorization_id, ..
            }) => {
                // Only PLAIN with the password in the input can complete; a SCRAM proof cannot be guessed.
                assert_eq!(mechanism, Mechanism::PLAIN);
                assert_eq!(authorization_id, "alice");
            }
            Err(error) => {
                let _ = error.client_message(mechanism, false);
                let _ = error.is_illegal_state();
            }
        }
    }
});
