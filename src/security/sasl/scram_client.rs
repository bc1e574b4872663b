//! The client side of SCRAM-SHA-256/512 (Kafka's ScramSaslClient): builds client-first and
//! client-final, and verifies the server's signature; for tests and inter-broker SASL.

use subtle::ConstantTimeEq;

use super::scram::{check_iterations, random_nonce, xor, ScramCredentialError, ScramMechanism};
use super::scram_messages::{self as msg, ServerFinal};

/// Why a client-side exchange failed, in the words of Kafka's ScramSaslClient.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ScramClientError {
    #[error("Unexpected challenge in Sasl client state {0}")]
    IllegalState(&'static str),
    #[error("Invalid SCRAM server first message format: {0}")]
    InvalidServerFirstMessage(&'static str),
    #[error("Invalid server nonce: does not start with client nonce")]
    InvalidServerNonce,
    #[error(
        "Requested iterations {iterations} is less than the minimum {minimum} for {mechanism}"
    )]
    IterationsBelowMinimum {
        iterations: i32,
        minimum: i32,
        mechanism: ScramMechanism,
    },
    /// Not in Kafka's client: refusing more work than any Kafka credential asks for.
    #[error(
        "Requested iterations {iterations} is more than the maximum {maximum} for {mechanism}"
    )]
    IterationsAboveMaximum {
        iterations: i32,
        maximum: i32,
        mechanism: ScramMechanism,
    },
    #[error("Invalid SCRAM server final message format: {0}")]
    InvalidServerFinalMessage(&'static str),
    #[error("Sasl authentication using {mechanism} failed with error: {error}")]
    ServerError {
        mechanism: ScramMechanism,
        error: String,
    },
    #[error("Invalid server signature in server final message")]
    InvalidServerSignature,
}

/// One client-side SCRAM exchange: [`ScramClient::client_first`], then
/// [`ScramClient::server_first`] (answers client-final), then [`ScramClient::server_final`].
#[derive(Debug)]
pub struct ScramClient {
    mechanism: ScramMechanism,
    user: String,
    password: String,
    nonce: String,
    state: State,
}

#[derive(Debug)]
enum State {
    SendClientFirst,
    ReceiveServerFirst { client_first_bare: String },
    ReceiveServerFinal { server_signature: Vec<u8> },
    Complete,
    Failed,
}

impl State {
    fn name(&self) -> &'static str {
        match self {
            State::SendClientFirst => "SEND_CLIENT_FIRST_MESSAGE",
            State::ReceiveServerFirst { .. } => "RECEIVE_SERVER_FIRST_MESSAGE",
            State::ReceiveServerFinal { .. } => "RECEIVE_SERVER_FINAL_MESSAGE",
            State::Complete => "COMPLETE",
            State::Failed => "FAILED",
        }
    }
}

const GS2_HEADER: &str = "n,,";

impl ScramClient {
    pub fn new(mechanism: ScramMechanism, user: &str, password: &str) -> Self {
        Self::with_nonce(mechanism, user, password, &random_nonce())
    }

    /// A client with a chosen nonce (printable ASCII without commas): for test vectors only.
    pub fn with_nonce(mechanism: ScramMechanism, user: &str, password: &str, nonce: &str) -> Self {
        ScramClient {
            mechanism,
            user: user.to_string(),
            password: password.to_string(),
            nonce: nonce.to_string(),
            state: State::SendClientFirst,
        }
    }

    /// The first message, `n,,n=<user>,r=<nonce>`.
    pub fn client_first(&mut self) -> Result<Vec<u8>, ScramClientError> {
        if let Some(error) = self.out_of_order(|s| matches!(s, State::SendClientFirst)) {
            return Err(error);
        }
        let bare = format!("n={},r={}", msg::escape_saslname(&self.user), self.nonce);
        let message = format!("{GS2_HEADER}{bare}").into_bytes();
        self.state = State::ReceiveServerFirst {
            client_first_bare: bare,
        };
        Ok(message)
    }

    /// Takes server-first and returns client-final, `c=biws,r=<nonce>,p=<proof>`.
    pub fn server_first(&mut self, challenge: &[u8]) -> Result<Vec<u8>, ScramClientError> {
        let client_first_bare = match std::mem::replace(&mut self.state, State::Failed) {
            State::ReceiveServerFirst { client_first_bare } => client_first_bare,
            other => return Err(ScramClientError::IllegalState(other.name())),
        };
        let first = msg::parse_server_first(challenge)
            .map_err(ScramClientError::InvalidServerFirstMessage)?;
        if !first.nonce.starts_with(&self.nonce) || first.nonce.len() == self.nonce.len() {
            return Err(ScramClientError::InvalidServerNonce);
        }
        self.check_iterations(first.iterations)?;
        let m = self.mechanism;
        let salted = m.salted_password(&self.password, &first.salt, first.iterations);
        let without_proof = msg::client_final_without_proof(GS2_HEADER, first.nonce);
        let auth_message = [
            client_first_bare.as_bytes(),
            b",",
            challenge,
            b",",
            without_proof.as_bytes(),
        ];
        let client_key = m.client_key(&salted);
        let client_signature = m.hmac(&m.hash(&client_key), &auth_message);
        let proof = xor(&client_key, &client_signature);
        let server_signature = m.hmac(&m.server_key(&salted), &auth_message);
        self.state = State::ReceiveServerFinal { server_signature };
        let proof = base64::Engine::encode(&base64::engine::general_purpose::STANDARD, proof);
        Ok(format!("{without_proof},p={proof}").into_bytes())
    }

    /// Takes server-final: complete if it carries the expected server signature.
    pub fn server_final(&mut self, message: &[u8]) -> Result<(), ScramClientError> {
        let server_signature = match std::mem::replace(&mut self.state, State::Failed) {
            State::ReceiveServerFinal { server_signature } => server_signature,
            other => return Err(ScramClientError::IllegalState(other.name())),
        };
        let verifier = match msg::parse_server_final(message) {
            Ok(ServerFinal::Verifier(verifier)) => verifier,
            Ok(ServerFinal::Error(error)) => {
                return Err(ScramClientError::ServerError {
                    mechanism: self.mechanism,
                    error: error.to_string(),
                })
            }
            Err(reason) => return Err(ScramClientError::InvalidServerFinalMessage(reason)),
        };
        if !bool::from(verifier.ct_eq(&server_signature)) {
            return Err(ScramClientError::InvalidServerSignature);
        }
        self.state = State::Complete;
        Ok(())
    }

    /// Kafka's iteration bounds, in the client's words.
    fn check_iterations(&self, iterations: i32) -> Result<(), ScramClientError> {
        let mechanism = self.mechanism;
        check_iterations(iterations).map_err(|e| match e {
            ScramCredentialError::TooFewIterations { minimum, .. } => {
                ScramClientError::IterationsBelowMinimum {
                    iterations,
                    minimum,
                    mechanism,
                }
            }
            ScramCredentialError::TooManyIterations { maximum, .. } => {
                ScramClientError::IterationsAboveMaximum {
                    iterations,
                    maximum,
                    mechanism,
                }
            }
        })
    }

    /// The error for a call the state does not expect; the exchange is failed afterwards.
    fn out_of_order(&mut self, expected: impl Fn(&State) -> bool) -> Option<ScramClientError> {
        if expected(&self.state) {
            return None;
        }
        let error = ScramClientError::IllegalState(self.state.name());
        self.state = State::Failed;
        Some(error)
    }
}
