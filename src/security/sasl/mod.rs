//! The broker's side of SASL, pure and I/O-free: Kafka's mechanisms (PLAIN, SCRAM-SHA-256/512),
//! a server turning each client message into a challenge, a completion or a Kafka-worded error.

pub mod plain;
pub mod scram;
pub mod scram_arg;
pub mod scram_client;
mod scram_messages;

use std::fmt;

pub use plain::PlainServer;
pub use scram::{ScramCredential, ScramCredentialError, ScramMechanism, ScramServer};
pub use scram_arg::{parse_add_scram, AddScram, AddScramError};
pub use scram_client::{ScramClient, ScramClientError};

/// A SASL mechanism this broker serves, named as Kafka names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Mechanism {
    Plain,
    Scram(ScramMechanism),
}

impl Mechanism {
    pub const PLAIN: Mechanism = Mechanism::Plain;
    pub const SCRAM_SHA_256: Mechanism = Mechanism::Scram(ScramMechanism::Sha256);
    pub const SCRAM_SHA_512: Mechanism = Mechanism::Scram(ScramMechanism::Sha512);
    /// Every mechanism, in the order a SaslHandshake response lists them.
    pub const ALL: [Mechanism; 3] = [Self::PLAIN, Self::SCRAM_SHA_256, Self::SCRAM_SHA_512];

    /// Kafka's name: `PLAIN`, `SCRAM-SHA-256`, `SCRAM-SHA-512`.
    pub fn name(self) -> &'static str {
        match self {
            Mechanism::Plain => "PLAIN",
            Mechanism::Scram(scram) => scram.name(),
        }
    }

    /// The mechanism of a Kafka name (exact, case-sensitive, as Kafka matches it); `None` if unknown.
    pub fn from_name(name: &str) -> Option<Mechanism> {
        Self::ALL.into_iter().find(|m| m.name() == name)
    }

    /// The SCRAM variant, if this is SCRAM.
    pub fn scram(self) -> Option<ScramMechanism> {
        match self {
            Mechanism::Plain => None,
            Mechanism::Scram(scram) => Some(scram),
        }
    }
}

impl From<ScramMechanism> for Mechanism {
    fn from(scram: ScramMechanism) -> Self {
        Mechanism::Scram(scram)
    }
}

impl fmt::Display for Mechanism {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Where a server looks users up: SCRAM credentials by user and mechanism, PLAIN passwords checked
/// by the caller (which may compare against a hash). Neither may tell the client which user exists.
pub struct Credentials<'a> {
    pub scram: &'a dyn Fn(&str, ScramMechanism) -> Option<ScramCredential>,
    pub plain: &'a dyn Fn(&str, &str) -> bool,
}

/// What the server says after a client message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SaslStep {
    /// Send these bytes (SaslAuthenticate `auth_bytes`) and wait for the client's next message.
    Challenge(Vec<u8>),
    /// Authenticated as `authorization_id` (the principal `User:<authorization_id>`); send
    /// `final_bytes` (empty for PLAIN, SCRAM's server-final `v=...`) with error code NONE.
    Complete {
        authorization_id: String,
        final_bytes: Vec<u8>,
    },
}

/// Why an exchange failed. `Display` is the server-side text (for logs); what the client may be
/// told is [`SaslError::client_message`]; [`SaslError::is_illegal_state`] picks its error code.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SaslError {
    // Kafka's SaslAuthenticationException: the message goes to the client as it is.
    #[error("Invalid SASL/PLAIN response: expected 3 tokens, got {0}")]
    PlainTokenCount(usize),
    #[error("Authentication failed: username not specified")]
    UsernameNotSpecified,
    #[error("Authentication failed: password not specified")]
    PasswordNotSpecified,
    #[error("Authentication failed: Invalid username or password")]
    InvalidUsernameOrPassword,
    #[error("Authentication failed: Client requested an authorization id that is different from username")]
    AuthorizationIdMismatch,
    /// Kafka's IllegalSaslStateException: a message after the exchange completed or failed.
    #[error("Unexpected challenge in Sasl server state {0}")]
    IllegalState(&'static str),

    // Kafka's SaslException: the client only hears that its credentials were invalid.
    #[error("Invalid SCRAM client first message format: {0}")]
    InvalidClientFirstMessage(&'static str),
    #[error("Invalid SCRAM client final message format: {0}")]
    InvalidClientFinalMessage(&'static str),
    #[error("SCRAM channel binding (gs2 flag p=) is not supported")]
    ChannelBindingNotSupported,
    #[error("SCRAM delegation token authentication (tokenauth) is not supported")]
    TokenAuthNotSupported,
    #[error("Iterations {iterations} is less than the minimum {minimum} for {mechanism}")]
    IterationsBelowMinimum {
        iterations: i32,
        minimum: i32,
        mechanism: ScramMechanism,
    },
    #[error("Invalid channel binding in the final client message.")]
    ChannelBindingMismatch,
    #[error("Invalid client nonce in the final client message.")]
    NonceMismatch,
    /// A wrong proof and an unknown user alike (so that users cannot be enumerated).
    #[error("Invalid client credentials")]
    InvalidCredentials,
}

impl SaslError {
    /// Whether Kafka sends this error's own text to the client (SaslAuthenticationException and
    /// IllegalSaslStateException); the others are hidden behind a generic message.
    pub fn is_client_visible(&self) -> bool {
        matches!(
            self,
            SaslError::PlainTokenCount(_)
                | SaslError::UsernameNotSpecified
                | SaslError::PasswordNotSpecified
                | SaslError::InvalidUsernameOrPassword
                | SaslError::AuthorizationIdMismatch
                | SaslError::IllegalState(_)
        )
    }

    /// Whether the exchange was in no state to take the message (Kafka's
    /// IllegalSaslStateException, ILLEGAL_SASL_STATE on the wire) rather than a failed login
    /// (SASL_AUTHENTICATION_FAILED).
    pub fn is_illegal_state(&self) -> bool {
        matches!(self, SaslError::IllegalState(_))
    }

    /// The SaslAuthenticate response's error message, as Kafka's SaslServerAuthenticator words it.
    pub fn client_message(&self, mechanism: Mechanism, reauthenticating: bool) -> String {
        if self.is_client_visible() {
            return self.to_string();
        }
        let during = if reauthenticating {
            "re-authentication"
        } else {
            "authentication"
        };
        format!("Authentication failed during {during} due to invalid credentials with SASL mechanism {mechanism}")
    }
}

/// A server-side SASL exchange for one mechanism on one connection. The caller owns the transport
/// (SaslHandshake / SaslAuthenticate) and the credential store: it creates a server for the
/// mechanism the handshake chose, feeds it each `auth_bytes` with [`Credentials`] to look users up
/// in, and answers with what [`SaslStep`] or [`SaslError`] says.
#[derive(Debug)]
pub enum SaslServer {
    Plain(PlainServer),
    Scram(ScramServer),
}

impl SaslServer {
    /// A fresh exchange for the mechanism the SaslHandshake chose.
    pub fn new(mechanism: Mechanism) -> Self {
        match mechanism {
            Mechanism::Plain => SaslServer::Plain(PlainServer::new()),
            Mechanism::Scram(scram) => SaslServer::Scram(ScramServer::new(scram)),
        }
    }

    pub fn mechanism(&self) -> Mechanism {
        match self {
            SaslServer::Plain(_) => Mechanism::Plain,
            SaslServer::Scram(server) => Mechanism::Scram(server.mechanism()),
        }
    }

    /// Takes the client's next message. After an error the exchange is failed: any further message
    /// gives [`SaslError::IllegalState`].
    pub fn evaluate(
        &mut self,
        response: &[u8],
        credentials: &Credentials<'_>,
    ) -> Result<SaslStep, SaslError> {
        match self {
            SaslServer::Plain(server) => server.evaluate(response, credentials.plain),
            SaslServer::Scram(server) => server.evaluate(response, credentials.scram),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mechanisms_have_kafkas_names() {
        let names: Vec<_> = Mechanism::ALL.iter().map(|m| m.name()).collect();
        assert_eq!(names, ["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"]);
        for m in Mechanism::ALL {
            assert_eq!(Mechanism::from_name(m.name()), Some(m));
        }
        assert_eq!(Mechanism::from_name("scram-sha-256"), None);
        assert_eq!(Mechanism::from_name("OAUTHBEARER"), None);
    }

    #[test]
    fn hidden_errors_get_kafkas_generic_message() {
        let e = SaslError::InvalidCredentials;
        assert!(!e.is_client_visible());
        assert_eq!(
            e.client_message(Mechanism::SCRAM_SHA_512, false),
            "Authentication failed during authentication due to invalid credentials with SASL mechanism SCRAM-SHA-512"
        );
        assert_eq!(
            e.client_message(Mechanism::SCRAM_SHA_256, true),
            "Authentication failed during re-authentication due to invalid credentials with SASL mechanism SCRAM-SHA-256"
        );
        assert!(!e.is_illegal_state());
    }

    #[test]
    fn visible_errors_go_to_the_client_as_they_are() {
        let e = SaslError::InvalidUsernameOrPassword;
        assert_eq!(
            e.client_message(Mechanism::PLAIN, false),
            "Authentication failed: Invalid username or password"
        );
        let e = SaslError::IllegalState("COMPLETE");
        assert!(e.is_illegal_state());
        assert_eq!(
            e.client_message(Mechanism::PLAIN, false),
            "Unexpected challenge in Sasl server state COMPLETE"
        );
    }

    #[test]
    fn server_reports_its_mechanism() {
        for m in Mechanism::ALL {
            let server = SaslServer::new(m);
            assert_eq!(server.mechanism(), m);
        }
    }
}
