//! SASL/PLAIN on the server (RFC 4616, `[authzid] NUL authcid NUL passwd`) with the checks and
//! messages of Kafka's PlainSaslServer: one message, then complete or failed.

use super::{SaslError, SaslStep};

/// One PLAIN exchange: a single client message.
#[derive(Debug, Default)]
pub struct PlainServer {
    state: State,
}

#[derive(Debug, Default)]
enum State {
    #[default]
    Initial,
    Complete,
    Failed,
}

impl PlainServer {
    pub fn new() -> Self {
        Self::default()
    }

    /// Takes the client's message; `check(user, password)` says whether the password is right.
    pub fn evaluate(
        &mut self,
        response: &[u8],
        check: &dyn Fn(&str, &str) -> bool,
    ) -> Result<SaslStep, SaslError> {
        match self.state {
            State::Initial => {}
            State::Complete => return Err(SaslError::IllegalState("COMPLETE")),
            State::Failed => return Err(SaslError::IllegalState("FAILED")),
        }
        match authenticate(response, check) {
            Ok(user) => {
                self.state = State::Complete;
                Ok(SaslStep::Complete {
                    authorization_id: user,
                    final_bytes: Vec::new(),
                })
            }
            Err(e) => {
                self.state = State::Failed;
                Err(e)
            }
        }
    }
}

/// Kafka's order of checks: token count, empty user, empty password, the password itself, and only
/// then the authorization id (so that a mismatch does not tell whether the password was right).
fn authenticate(response: &[u8], check: &dyn Fn(&str, &str) -> bool) -> Result<String, SaslError> {
    let tokens = split_tokens(response)?;
    let [authzid, user, password] = tokens;
    if user.is_empty() {
        return Err(SaslError::UsernameNotSpecified);
    }
    if password.is_empty() {
        return Err(SaslError::PasswordNotSpecified);
    }
    // Kafka decodes with replacement characters; bytes that are not UTF-8 cannot be a password.
    let (Ok(user), Ok(password)) = (std::str::from_utf8(user), std::str::from_utf8(password))
    else {
        return Err(SaslError::InvalidUsernameOrPassword);
    };
    if !check(user, password) {
        return Err(SaslError::InvalidUsernameOrPassword);
    }
    if !authzid.is_empty() && authzid != user.as_bytes() {
        return Err(SaslError::AuthorizationIdMismatch);
    }
    Ok(user.to_string())
}

/// Splits on NUL as Kafka does: exactly three tokens, or an error counting at most four.
fn split_tokens(response: &[u8]) -> Result<[&[u8]; 3], SaslError> {
    let tokens: Vec<&[u8]> = response.splitn(4, |&b| b == 0).collect();
    match tokens.as_slice() {
        [authzid, user, password] => Ok([authzid, user, password]),
        other => Err(SaslError::PlainTokenCount(other.len())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn alice(user: &str, password: &str) -> bool {
        user == "alice" && password == "alice-secret"
    }

    fn run(message: &[u8]) -> Result<SaslStep, SaslError> {
        PlainServer::new().evaluate(message, &alice)
    }

    #[test]
    fn right_password_completes_as_the_user() {
        let done = SaslStep::Complete {
            authorization_id: "alice".into(),
            final_bytes: vec![],
        };
        assert_eq!(run(b"\0alice\0alice-secret"), Ok(done.clone()));
        assert_eq!(run(b"alice\0alice\0alice-secret"), Ok(done));
    }

    #[test]
    fn wrong_password_and_unknown_user_read_the_same() {
        assert_eq!(
            run(b"\0alice\0wrong"),
            Err(SaslError::InvalidUsernameOrPassword)
        );
        assert_eq!(
            run(b"\0mallory\0alice-secret"),
            Err(SaslError::InvalidUsernameOrPassword)
        );
        assert_eq!(
            SaslError::InvalidUsernameOrPassword.to_string(),
            "Authentication failed: Invalid username or password"
        );
    }

    #[test]
    fn different_authorization_id_is_refused() {
        assert_eq!(
            run(b"bob\0alice\0alice-secret"),
            Err(SaslError::AuthorizationIdMismatch)
        );
        // Checked after the password, as Kafka does.
        assert_eq!(
            run(b"bob\0alice\0wrong"),
            Err(SaslError::InvalidUsernameOrPassword)
        );
    }

    #[test]
    fn empty_user_or_password_is_refused() {
        assert_eq!(run(b"\0\0pw"), Err(SaslError::UsernameNotSpecified));
        assert_eq!(run(b"\0alice\0"), Err(SaslError::PasswordNotSpecified));
        assert_eq!(
            SaslError::UsernameNotSpecified.to_string(),
            "Authentication failed: username not specified"
        );
    }

    #[test]
    fn token_count_is_kafkas() {
        assert_eq!(run(b""), Err(SaslError::PlainTokenCount(1)));
        assert_eq!(run(b"alice\0pw"), Err(SaslError::PlainTokenCount(2)));
        assert_eq!(run(b"a\0b\0c\0d\0e"), Err(SaslError::PlainTokenCount(4)));
        assert_eq!(
            SaslError::PlainTokenCount(2).to_string(),
            "Invalid SASL/PLAIN response: expected 3 tokens, got 2"
        );
    }

    #[test]
    fn bytes_that_are_not_utf8_are_a_wrong_password() {
        assert_eq!(
            run(b"\0alice\0\xff\xfe"),
            Err(SaslError::InvalidUsernameOrPassword)
        );
    }

    #[test]
    fn no_second_message() {
        let mut server = PlainServer::new();
        assert_eq!(
            server.evaluate(b"\0alice\0alice-secret", &alice),
            Ok(SaslStep::Complete {
                authorization_id: "alice".into(),
                final_bytes: Vec::new(),
            })
        );
        assert_eq!(
            server.evaluate(b"\0alice\0alice-secret", &alice),
            Err(SaslError::IllegalState("COMPLETE"))
        );
        let mut server = PlainServer::new();
        assert_eq!(
            server.evaluate(b"\0alice\0wrong", &alice),
            Err(SaslError::InvalidUsernameOrPassword)
        );
        assert_eq!(
            server.evaluate(b"\0alice\0alice-secret", &alice),
            Err(SaslError::IllegalState("FAILED"))
        );
    }
}
