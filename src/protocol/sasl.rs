//! Kafka's SaslServerAuthenticator for one connection on a SASL listener: ApiVersions, then
//! SaslHandshake and SaslAuthenticate until the client is authenticated, with nothing else
//! served before; PLAIN against the listener's JAAS users, SCRAM against the metadata log's
//! credentials; KIP-368 session lifetimes and re-authentication.

use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use kafka_protocol::messages::{
    ApiKey, SaslAuthenticateRequest, SaslAuthenticateResponse, SaslHandshakeRequest,
    SaslHandshakeResponse,
};
use kafka_protocol::protocol::StrBytes;

use crate::config::auth::ListenerSasl;
use crate::protocol::listener::{CloseReason, Connection};
use crate::protocol::{self, api_versions, errors, DecodedRequest, FrameError, RawHeader};
use crate::security::sasl::{
    Credentials, Mechanism, SaslServer, SaslStep, ScramCredential, ScramMechanism,
};

/// Where SCRAM credentials come from: the node's metadata image (the user's credential for
/// that mechanism, if any).
pub type ScramLookup<'a> = &'a dyn Fn(&str, ScramMechanism) -> Option<ScramCredential>;

/// What the connection does with a request on a SASL listener.
pub enum Step {
    /// Not a SASL request, and the session allows it: handle it as usual.
    Serve,
    /// Answer with this frame and go on.
    Answer(Bytes),
    /// Answer with this frame, then close the connection for this reason.
    AnswerAndClose(Bytes, String),
    /// A failed login: answer, then close after `connection.failed.authentication.delay.ms`.
    Failed(Bytes, String),
    /// Close the connection without an answer, for this reason.
    Close(String),
    /// Authenticated as this principal: answer with this frame.
    Authenticated(Bytes, String),
}

enum State {
    /// Waiting for SaslHandshake (ApiVersions allowed).
    Handshake,
    /// Exchanging SaslAuthenticate messages.
    Authenticate(SaslServer),
    /// Authenticated; the session ends at the instant given (KIP-368), if any.
    Done(Option<Instant>),
}

/// One connection's SASL state.
pub struct SaslAuthenticator {
    listener: String,
    settings: Arc<ListenerSasl>,
    reauth: Option<Duration>,
    state: State,
    reauthenticating: bool,
    /// Who the first login made the client: a re-authentication may not change it.
    principal: Option<String>,
}

impl SaslAuthenticator {
    pub fn new(listener: &str, settings: Arc<ListenerSasl>, reauth_ms: u64) -> SaslAuthenticator {
        SaslAuthenticator {
            listener: listener.to_string(),
            settings,
            reauth: (reauth_ms > 0).then(|| Duration::from_millis(reauth_ms)),
            state: State::Handshake,
            reauthenticating: false,
            principal: None,
        }
    }

    /// What to do with `frame`, whose header the connection peeked (`raw`); SCRAM logins are
    /// checked against `scram`.
    pub fn on_request(
        &mut self,
        scram: ScramLookup<'_>,
        frame: &Bytes,
        raw: Option<RawHeader>,
    ) -> Step {
        let Some(raw) = raw else {
            return Step::Serve; // the handler answers a bad frame as it always does
        };
        let key = ApiKey::try_from(raw.api_key).ok();
        match (&self.state, key) {
            (_, Some(ApiKey::SaslHandshake)) => self.handshake(frame),
            (State::Authenticate(_), Some(ApiKey::SaslAuthenticate)) => {
                self.authenticate(scram, frame)
            }
            (State::Done(expiry), _) => match expiry {
                Some(at) if Instant::now() >= *at => Step::Close(format!(
                    "the SASL session on {} expired (connections.max.reauth.ms) and the \
                     client did not re-authenticate",
                    self.listener
                )),
                _ => Step::Serve,
            },
            (State::Handshake, Some(ApiKey::ApiVersions)) => Step::Serve,
            _ => Step::Close(format!(
                "Unexpected Kafka request of type {} during SASL handshake.",
                key.map_or_else(|| raw.api_key.to_string(), |k| format!("{k:?}"))
            )),
        }
    }

    /// SaslHandshake: the mechanism is chosen, or refused with the enabled list and the
    /// connection closed.
    fn handshake(&mut self, frame: &Bytes) -> Step {
        let (header, req) = match decode_handshake(frame) {
            Ok(r) => r,
            Err(e) => return Step::Close(e),
        };
        if let State::Done(_) = self.state {
            self.reauthenticating = true;
        }
        let enabled: Vec<StrBytes> = self
            .settings
            .mechanisms
            .iter()
            .map(|m| StrBytes::from_string(m.clone()))
            .collect();
        let asked = req.mechanism.to_string();
        let chosen = Mechanism::from_name(&asked)
            .filter(|m| self.settings.mechanisms.iter().any(|e| e == m.name()));
        let body = SaslHandshakeResponse::default().with_mechanisms(enabled);
        let Some(mechanism) = chosen else {
            let body = body.with_error_code(errors::UNSUPPORTED_SASL_MECHANISM);
            return match frame_of(&header, &body) {
                Ok(f) => Step::AnswerAndClose(
                    f,
                    format!(
                        "Unsupported SASL mechanism {asked} (enabled: {})",
                        self.settings.mechanisms.join(", ")
                    ),
                ),
                Err(e) => Step::Close(e),
            };
        };
        self.state = State::Authenticate(SaslServer::new(mechanism));
        frame_of(&header, &body).map_or_else(Step::Close, Step::Answer)
    }

    /// One SaslAuthenticate message.
    fn authenticate(&mut self, scram: ScramLookup<'_>, frame: &Bytes) -> Step {
        let (header, req) = match decode_authenticate(frame) {
            Ok(r) => r,
            Err(e) => return Step::Close(e),
        };
        let State::Authenticate(server) = &mut self.state else {
            return Step::Close("SaslAuthenticate before SaslHandshake".into());
        };
        let mechanism = server.mechanism();
        let users = &self.settings.plain_users;
        let plain = |user: &str, password: &str| {
            users
                .get(user)
                .is_some_and(|p| constant_time_eq(p.as_bytes(), password.as_bytes()))
        };
        let credentials = Credentials {
            scram,
            plain: &plain,
        };
        let lifetime = self.reauth;
        let body = SaslAuthenticateResponse::default();
        match server.evaluate(&req.auth_bytes, &credentials) {
            Ok(SaslStep::Challenge(bytes)) => {
                frame_of(&header, &body.with_auth_bytes(bytes.into()))
                    .map_or_else(Step::Close, Step::Answer)
            }
            Ok(SaslStep::Complete {
                authorization_id,
                final_bytes,
            }) => {
                let principal = format!("User:{authorization_id}");
                if let Some(first) = self.principal.as_ref().filter(|p| **p != principal) {
                    let text = format!(
                        "Cannot change principals during re-authentication from {first}: {principal}"
                    );
                    let body = body
                        .with_error_code(errors::SASL_AUTHENTICATION_FAILED)
                        .with_error_message(Some(StrBytes::from_string(text.clone())));
                    return frame_of(&header, &body)
                        .map_or_else(Step::Close, |f| Step::Failed(f, text));
                }
                self.principal = Some(principal.clone());
                self.state = State::Done(lifetime.map(|d| Instant::now() + d));
                let body = body
                    .with_auth_bytes(final_bytes.into())
                    .with_session_lifetime_ms(lifetime.map_or(0, |d| d.as_millis() as i64));
                frame_of(&header, &body)
                    .map_or_else(Step::Close, |f| Step::Authenticated(f, principal))
            }
            Err(e) => {
                let text = e.client_message(mechanism, self.reauthenticating);
                let body = body
                    .with_error_code(match e.is_illegal_state() {
                        true => errors::ILLEGAL_SASL_STATE,
                        false => errors::SASL_AUTHENTICATION_FAILED,
                    })
                    .with_error_message(Some(StrBytes::from_string(text.clone())));
                match frame_of(&header, &body) {
                    Ok(f) => Step::Failed(f, format!("{text} ({e})")),
                    Err(err) => Step::Close(err),
                }
            }
        }
    }
}

/// Compares two secrets in time that does not depend on where they differ.
fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    use subtle::ConstantTimeEq;
    a.ct_eq(b).into()
}

type Header = kafka_protocol::messages::RequestHeader;

/// Decodes a SaslHandshake or SaslAuthenticate frame.
fn decode(frame: &Bytes) -> Result<(Header, DecodedRequest), String> {
    protocol::decode_request_for(frame.clone(), api_versions::BROKER)
        .map_err(|e: FrameError| e.to_string())
}

fn decode_handshake(frame: &Bytes) -> Result<(Header, SaslHandshakeRequest), String> {
    match decode(frame)? {
        (h, DecodedRequest::SaslHandshake(r)) => Ok((h, r)),
        _ => Err("not a SaslHandshake request".into()),
    }
}

fn decode_authenticate(frame: &Bytes) -> Result<(Header, SaslAuthenticateRequest), String> {
    match decode(frame)? {
        (h, DecodedRequest::SaslAuthenticate(r)) => Ok((h, r)),
        _ => Err("not a SaslAuthenticate request".into()),
    }
}

fn frame_of<R>(header: &Header, body: &R) -> Result<Bytes, String>
where
    R: kafka_protocol::protocol::Encodable + kafka_protocol::protocol::HeaderVersion,
{
    protocol::encode_response(header.request_api_version, header.correlation_id, body)
        .map_err(|e| format!("cannot encode the SASL response: {e:#}"))
}

/// What a SASL listener's connection does after the authenticator's turn at a request.
pub enum Turn {
    /// Not the authenticator's: serve the request as usual.
    Serve,
    /// Answered; read the next request.
    Answered,
    /// Answered: the client logged in as this principal (full-size frames may follow).
    LoggedIn(String),
    /// Answered a failed login: close the connection for this reason, after
    /// `connection.failed.authentication.delay.ms`.
    Refused(String),
}

/// The authenticator's `step` (from `on_request`) carried out on `conn`: its answer written,
/// what comes next returned; an error closes the connection (a refused mechanism, a request
/// before the login, an ended session).
pub async fn answer(conn: &mut Connection, step: Step) -> Result<Turn, CloseReason> {
    match step {
        Step::Serve => Ok(Turn::Serve),
        Step::Answer(f) => conn.write(&f).await.map(|_| Turn::Answered),
        Step::Authenticated(f, principal) => {
            conn.write(&f).await?;
            Ok(Turn::LoggedIn(principal))
        }
        Step::AnswerAndClose(f, reason) => {
            conn.write(&f).await?;
            Err(CloseReason::Handler(reason))
        }
        Step::Failed(f, reason) => {
            conn.write(&f).await?;
            Ok(Turn::Refused(reason))
        }
        Step::Close(reason) => Err(CloseReason::Handler(reason)),
    }
}

/// SaslHandshake where no exchange is expected (a listener without SASL, or after
/// authentication on the request path): Kafka's ILLEGAL_SASL_STATE.
pub fn handshake_after_authentication(_: SaslHandshakeRequest) -> SaslHandshakeResponse {
    SaslHandshakeResponse::default().with_error_code(errors::ILLEGAL_SASL_STATE)
}

/// SaslAuthenticate where no exchange is in progress: Kafka's ILLEGAL_SASL_STATE.
pub fn authenticate_after_authentication() -> SaslAuthenticateResponse {
    SaslAuthenticateResponse::default()
        .with_error_code(errors::ILLEGAL_SASL_STATE)
        .with_error_message(Some(StrBytes::from_static_str(
            "Unexpected SaslAuthenticate request: no SASL exchange is in progress",
        )))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn secrets_compare_whole() {
        assert!(constant_time_eq(b"secret", b"secret"));
        assert!(!constant_time_eq(b"secret", b"secreT"));
        assert!(!constant_time_eq(b"secret", b"secret!"));
    }
}
