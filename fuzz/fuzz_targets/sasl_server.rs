//! The broker's SASL servers (PLAIN, SCRAM-SHA-256, SCRAM-SHA-512) fed arbitrary client messages.
//! Any input may be refused with an error; none may panic, and none may log in without the password.
#![no_main]

use std::sync::OnceLock;

use evenkeel::security::sasl::{
    Credentials, Mechanism, SaslServer, SaslStep, ScramCredential, ScramMechanism,
};
use libfuzzer_sys::fuzz_target;

/// Splits the input into client messages; 0xFF never occurs in UTF-8, so no valid message needs it.
const SEPARATOR: u8 = 0xff;

/// alice's credentials, derived once (PBKDF2 per input would starve the fuzzer).
fn alice(mechanism: ScramMechanism) -> ScramCredential {
    static CREDENTIALS: OnceLock<[ScramCredential; 2]> = OnceLock::new();
    let [sha256, sha512] = CREDENTIALS.get_or_init(|| {
        ScramMechanism::ALL.map(|m| {
            ScramCredential::from_password(m, "alice-secret", b"fuzz-salt", 4096)
                .expect("4096 iterations are within Kafka's bounds")
        })
    });
    match mechanism {
        ScramMechanism::Sha256 => sha256.clone(),
        ScramMechanism::Sha512 => sha512.clone(),
    }
}

fuzz_target!(|data: &[u8]| {
    let Some((&selector, rest)) = data.split_first() else {
        return;
    };
    let mechanism = Mechanism::ALL[usize::from(selector) % Mechanism::ALL.len()];
    let scram = |user: &str, m: ScramMechanism| (user == "alice").then(|| alice(m));
    let plain = |user: &str, password: &str| user == "alice" && password == "alice-secret";
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
