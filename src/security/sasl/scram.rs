//! SCRAM-SHA-256 and SCRAM-SHA-512 (RFC 5802, RFC 7677) on the server: the mechanisms with Kafka's
//! iteration bounds, the stored credential (salt, StoredKey, ServerKey) and the exchange's state machine.

use std::fmt;
use std::sync::OnceLock;

use hmac::{Hmac, Mac};
use rand::{Rng, RngCore};
use sha2::{Digest, Sha256, Sha512};
use subtle::ConstantTimeEq;

use super::scram_messages::{self as msg, ClientFirst};
use super::{SaslError, SaslStep};

/// A SCRAM mechanism, with Kafka's name and record type.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ScramMechanism {
    Sha256,
    Sha512,
}

impl ScramMechanism {
    /// Kafka's ScramMechanism.minIterations, for both hashes.
    pub const MIN_ITERATIONS: i32 = 4096;
    /// Kafka's ScramMechanism.maxIterations (and the controller's MAX_ITERATIONS).
    pub const MAX_ITERATIONS: i32 = 16384;
    /// What `kafka-storage format --add-scram` uses when no `iterations=` is given.
    pub const DEFAULT_ITERATIONS: i32 = 4096;
    pub const ALL: [ScramMechanism; 2] = [ScramMechanism::Sha256, ScramMechanism::Sha512];

    /// `SCRAM-SHA-256` or `SCRAM-SHA-512`.
    pub fn name(self) -> &'static str {
        match self {
            ScramMechanism::Sha256 => "SCRAM-SHA-256",
            ScramMechanism::Sha512 => "SCRAM-SHA-512",
        }
    }

    pub fn from_name(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|m| m.name() == name)
    }

    /// The Java enum constant's name (`SCRAM_SHA_256`), which some of Kafka's messages print.
    pub fn java_name(self) -> &'static str {
        match self {
            ScramMechanism::Sha256 => "SCRAM_SHA_256",
            ScramMechanism::Sha512 => "SCRAM_SHA_512",
        }
    }

    /// The `mechanism` byte of UserScramCredentialRecord and the admin API (1 and 2).
    pub fn type_code(self) -> i8 {
        match self {
            ScramMechanism::Sha256 => 1,
            ScramMechanism::Sha512 => 2,
        }
    }

    pub fn from_type_code(code: i8) -> Option<Self> {
        Self::ALL.into_iter().find(|m| m.type_code() == code)
    }

    /// The hash's output length: the length of keys, signatures and proofs.
    pub fn hash_len(self) -> usize {
        match self {
            ScramMechanism::Sha256 => 32,
            ScramMechanism::Sha512 => 64,
        }
    }

    /// `Hi(password, salt, iterations)`: PBKDF2 with this HMAC, one block (RFC 5802 section 2.2).
    /// Kafka applies no SASLprep: the password's UTF-8 bytes. `iterations` of 0 or less count as 1.
    pub fn salted_password(self, password: &str, salt: &[u8], iterations: i32) -> Vec<u8> {
        let rounds = u32::try_from(iterations).unwrap_or(1).max(1);
        let mut out = vec![0; self.hash_len()];
        match self {
            ScramMechanism::Sha256 => {
                pbkdf2::pbkdf2_hmac::<Sha256>(password.as_bytes(), salt, rounds, &mut out)
            }
            ScramMechanism::Sha512 => {
                pbkdf2::pbkdf2_hmac::<Sha512>(password.as_bytes(), salt, rounds, &mut out)
            }
        }
        out
    }

    /// `HMAC(key, parts concatenated)`.
    pub(crate) fn hmac(self, key: &[u8], parts: &[&[u8]]) -> Vec<u8> {
        match self {
            ScramMechanism::Sha256 => hmac_of::<Hmac<Sha256>>(key, parts),
            ScramMechanism::Sha512 => hmac_of::<Hmac<Sha512>>(key, parts),
        }
    }

    /// `H(data)`.
    pub(crate) fn hash(self, data: &[u8]) -> Vec<u8> {
        match self {
            ScramMechanism::Sha256 => Sha256::digest(data).to_vec(),
            ScramMechanism::Sha512 => Sha512::digest(data).to_vec(),
        }
    }

    /// `ClientKey = HMAC(SaltedPassword, "Client Key")`.
    pub(crate) fn client_key(self, salted_password: &[u8]) -> Vec<u8> {
        self.hmac(salted_password, &[b"Client Key"])
    }

    /// `ServerKey = HMAC(SaltedPassword, "Server Key")`.
    pub(crate) fn server_key(self, salted_password: &[u8]) -> Vec<u8> {
        self.hmac(salted_password, &[b"Server Key"])
    }
}

fn hmac_of<M: Mac + hmac::digest::KeyInit>(key: &[u8], parts: &[&[u8]]) -> Vec<u8> {
    // HMAC takes keys of any length (longer ones are hashed), so this cannot fail.
    let Ok(mut mac) = <M as hmac::digest::KeyInit>::new_from_slice(key) else {
        unreachable!("HMAC accepts keys of any length")
    };
    for part in parts {
        mac.update(part);
    }
    mac.finalize().into_bytes().to_vec()
}

impl fmt::Display for ScramMechanism {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// `a XOR b` over the shorter length (callers check that lengths match).
pub(crate) fn xor(a: &[u8], b: &[u8]) -> Vec<u8> {
    a.iter().zip(b).map(|(x, y)| x ^ y).collect()
}

/// A user's stored SCRAM credential, as UserScramCredentialRecord holds it (no password).
#[derive(Clone, PartialEq, Eq)]
pub struct ScramCredential {
    pub salt: Vec<u8>,
    pub stored_key: Vec<u8>,
    pub server_key: Vec<u8>,
    pub iterations: i32,
}

impl fmt::Debug for ScramCredential {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Like Kafka's toString: nothing a dictionary attack could start from.
        f.write_str("ScramCredential { [hidden] }")
    }
}

/// A credential refused for its iteration count, with the controller's UNACCEPTABLE_CREDENTIAL texts.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ScramCredentialError {
    #[error("Too few iterations")]
    TooFewIterations { iterations: i32, minimum: i32 },
    #[error("Too many iterations")]
    TooManyIterations { iterations: i32, maximum: i32 },
}

impl ScramCredential {
    /// The credential for `password`, with Kafka's bounds on `iterations`.
    pub fn from_password(
        mechanism: ScramMechanism,
        password: &str,
        salt: &[u8],
        iterations: i32,
    ) -> Result<Self, ScramCredentialError> {
        check_iterations(iterations)?;
        let salted = mechanism.salted_password(password, salt, iterations);
        Self::from_salted_password(mechanism, salt, &salted, iterations)
    }

    /// The credential of an already salted password (`Hi(password, salt, iterations)`).
    pub fn from_salted_password(
        mechanism: ScramMechanism,
        salt: &[u8],
        salted_password: &[u8],
        iterations: i32,
    ) -> Result<Self, ScramCredentialError> {
        check_iterations(iterations)?;
        Ok(Self::derive(mechanism, salt, salted_password, iterations))
    }

    /// StoredKey and ServerKey of a salted password, the iterations unchecked.
    fn derive(
        mechanism: ScramMechanism,
        salt: &[u8],
        salted_password: &[u8],
        iterations: i32,
    ) -> Self {
        ScramCredential {
            salt: salt.to_vec(),
            stored_key: mechanism.hash(&mechanism.client_key(salted_password)),
            server_key: mechanism.server_key(salted_password),
            iterations,
        }
    }
}

/// Kafka's bounds: at least [`ScramMechanism::MIN_ITERATIONS`], at most [`ScramMechanism::MAX_ITERATIONS`].
pub fn check_iterations(iterations: i32) -> Result<(), ScramCredentialError> {
    if iterations < ScramMechanism::MIN_ITERATIONS {
        return Err(ScramCredentialError::TooFewIterations {
            iterations,
            minimum: ScramMechanism::MIN_ITERATIONS,
        });
    }
    if iterations > ScramMechanism::MAX_ITERATIONS {
        return Err(ScramCredentialError::TooManyIterations {
            iterations,
            maximum: ScramMechanism::MAX_ITERATIONS,
        });
    }
    Ok(())
}

const NONCE_ALPHABET: &[u8] = b"0123456789abcdefghijklmnopqrstuvwxyz";
/// 26 base-36 characters: over 130 random bits, like Kafka's `new BigInteger(130, random)`.
const NONCE_LEN: usize = 26;

/// A random nonce (and Kafka-style salt) of base-36 characters from a cryptographic generator.
pub(crate) fn random_nonce() -> String {
    let mut rng = rand::thread_rng();
    (0..NONCE_LEN)
        .map(|_| NONCE_ALPHABET[rng.gen_range(0..NONCE_ALPHABET.len())] as char)
        .collect()
}

/// The credential an unknown user is answered with, so that the exchange runs to its end: a salt
/// stable per user within this process (as a real user's is), keys that no proof can match.
fn unknown_user_credential(mechanism: ScramMechanism, user: &str) -> ScramCredential {
    static SECRET: OnceLock<[u8; 32]> = OnceLock::new();
    let secret = SECRET.get_or_init(|| rand::thread_rng().gen());
    let digest = ScramMechanism::Sha256.hmac(
        secret,
        &[mechanism.name().as_bytes(), b"\0", user.as_bytes()],
    );
    let salt = digest
        .iter()
        .take(NONCE_LEN)
        .map(|b| NONCE_ALPHABET[usize::from(*b) % NONCE_ALPHABET.len()])
        .collect();
    let random_key = || {
        let mut key = vec![0; mechanism.hash_len()];
        rand::thread_rng().fill_bytes(&mut key);
        key
    };
    ScramCredential {
        salt,
        stored_key: random_key(),
        server_key: random_key(),
        iterations: ScramMechanism::DEFAULT_ITERATIONS,
    }
}

/// One SCRAM exchange on the server: client-first, then client-final, then complete.
#[derive(Debug)]
pub struct ScramServer {
    mechanism: ScramMechanism,
    /// The nonce part a test vector fixes; production always draws a random one.
    #[cfg(test)]
    server_nonce: Option<String>,
    state: State,
}

#[derive(Debug)]
enum State {
    ReceiveClientFirst,
    ReceiveClientFinal(Box<Pending>),
    Complete,
    Failed,
}

/// What the final message is checked against.
#[derive(Debug)]
struct Pending {
    user: String,
    known_user: bool,
    credential: ScramCredential,
    gs2_header: String,
    client_first_bare: String,
    server_first: String,
    nonce: String,
}

impl ScramServer {
    pub fn new(mechanism: ScramMechanism) -> Self {
        ScramServer {
            mechanism,
            #[cfg(test)]
            server_nonce: None,
            state: State::ReceiveClientFirst,
        }
    }

    /// A server whose nonce part is `server_nonce` instead of a random one: for test vectors.
    #[cfg(test)]
    pub fn with_server_nonce(mechanism: ScramMechanism, server_nonce: &str) -> Self {
        ScramServer {
            server_nonce: Some(server_nonce.to_string()),
            ..Self::new(mechanism)
        }
    }

    pub fn mechanism(&self) -> ScramMechanism {
        self.mechanism
    }

    /// Takes the client's next message; `lookup(user, mechanism)` gives the user's credential.
    pub fn evaluate(
        &mut self,
        response: &[u8],
        lookup: &dyn Fn(&str, ScramMechanism) -> Option<ScramCredential>,
    ) -> Result<SaslStep, SaslError> {
        let state = std::mem::replace(&mut self.state, State::Failed);
        match state {
            State::ReceiveClientFirst => {
                let pending = self.client_first(response, lookup)?;
                let challenge = pending.server_first.clone().into_bytes();
                self.state = State::ReceiveClientFinal(Box::new(pending));
                Ok(SaslStep::Challenge(challenge))
            }
            State::ReceiveClientFinal(pending) => {
                let final_bytes = self.client_final(response, &pending)?;
                self.state = State::Complete;
                Ok(SaslStep::Complete {
                    authorization_id: pending.user,
                    final_bytes,
                })
            }
            State::Complete => {
                self.state = State::Complete;
                Err(SaslError::IllegalState("COMPLETE"))
            }
            State::Failed => Err(SaslError::IllegalState("FAILED")),
        }
    }

    fn client_first(
        &self,
        response: &[u8],
        lookup: &dyn Fn(&str, ScramMechanism) -> Option<ScramCredential>,
    ) -> Result<Pending, SaslError> {
        let first: ClientFirst<'_> = msg::parse_client_first(response)?;
        if first.token_auth {
            return Err(SaslError::TokenAuthNotSupported);
        }
        // Checked whether or not the user exists, so that the answer tells nothing about it.
        if !first.authzid.is_empty() && first.authzid != first.user {
            return Err(SaslError::AuthorizationIdMismatch);
        }
        let (credential, known_user) = match lookup(&first.user, self.mechanism) {
            Some(credential) => (credential, true),
            None => (unknown_user_credential(self.mechanism, &first.user), false),
        };
        if credential.iterations < ScramMechanism::MIN_ITERATIONS {
            return Err(SaslError::IterationsBelowMinimum {
                iterations: credential.iterations,
                minimum: ScramMechanism::MIN_ITERATIONS,
                mechanism: self.mechanism,
            });
        }
        let server_nonce = self.server_nonce();
        let nonce = format!("{}{server_nonce}", first.nonce);
        let server_first = msg::server_first(&nonce, &credential.salt, credential.iterations);
        Ok(Pending {
            user: first.user,
            known_user,
            credential,
            gs2_header: first.gs2_header.to_string(),
            client_first_bare: first.bare.to_string(),
            server_first,
            nonce,
        })
    }

    #[cfg(not(test))]
    fn server_nonce(&self) -> String {
        random_nonce()
    }

    #[cfg(test)]
    fn server_nonce(&self) -> String {
        self.server_nonce.clone().unwrap_or_else(random_nonce)
    }

    /// Checks the final message and returns the server-final message `v=<ServerSignature>`.
    fn client_final(&self, response: &[u8], pending: &Pending) -> Result<Vec<u8>, SaslError> {
        let fin = msg::parse_client_final(response)?;
        if fin.nonce != pending.nonce {
            return Err(SaslError::NonceMismatch);
        }
        if fin.channel_binding != pending.gs2_header.as_bytes() {
            return Err(SaslError::ChannelBindingMismatch);
        }
        if fin.proof.len() != self.mechanism.hash_len() {
            return Err(SaslError::InvalidClientFinalMessage(
                "proof length is not the hash length",
            ));
        }
        let auth_message = [
            pending.client_first_bare.as_bytes(),
            b",",
            pending.server_first.as_bytes(),
            b",",
            fin.without_proof.as_bytes(),
        ];
        let credential = &pending.credential;
        let client_signature = self.mechanism.hmac(&credential.stored_key, &auth_message);
        let client_key = xor(&fin.proof, &client_signature);
        let stored_key = self.mechanism.hash(&client_key);
        let proof_ok: bool = stored_key.ct_eq(&credential.stored_key).into();
        if !(proof_ok && pending.known_user) {
            return Err(SaslError::InvalidCredentials);
        }
        let server_signature = self.mechanism.hmac(&credential.server_key, &auth_message);
        Ok(msg::server_final(&server_signature).into_bytes())
    }
}

#[cfg(test)]
mod tests;
