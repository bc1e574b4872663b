//! alice, the one user the SASL fuzz targets know: her password and her SCRAM credentials.

use std::sync::OnceLock;

use evenkeel::security::sasl::{ScramCredential, ScramMechanism};

pub const PASSWORD: &str = "alice-secret";

/// alice's SCRAM credential for `mechanism`, derived once (PBKDF2 per input would starve the
/// fuzzer).
pub fn scram(mechanism: ScramMechanism) -> ScramCredential {
    static CREDENTIALS: OnceLock<[ScramCredential; 2]> = OnceLock::new();
    let [sha256, sha512] = CREDENTIALS.get_or_init(|| {
        ScramMechanism::ALL.map(|m| {
            ScramCredential::from_password(m, PASSWORD, b"fuzz-salt", 4096)
                .expect("4096 iterations are within Kafka's bounds")
        })
    });
    match mechanism {
        ScramMechanism::Sha256 => sha256.clone(),
        ScramMechanism::Sha512 => sha512.clone(),
    }
}
