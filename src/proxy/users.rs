//! HTTP basic auth mapped to SASL identities (REST Proxy's `authentication.method=BASIC` with
//! principal propagation): a request's user name and password are the SASL login of a producer
//! for that user, made on the user's first request and kept (at most `max_users`, the least
//! recently used without a request in progress given up first), so the cluster's ACLs apply to
//! the HTTP user. The cluster checks the password: the proxy keeps no user list of its own. A
//! login the cluster refused is answered from memory for a while, and few logins are tried at
//! once, so wrong passwords cannot make the proxy hammer the cluster.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use base64::Engine;
use parking_lot::Mutex;
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

use super::errors::{self, ApiError};
use crate::client::producer::{Producer, ProducerConfig};

/// The realm named in `WWW-Authenticate`.
pub const REALM: &str = "evenkeel-proxy";

/// How long a producer given up for room may take to send what it still holds.
const CLOSE_GRACE: Duration = Duration::from_secs(30);

/// How long a login the cluster refused is refused again from memory, without asking it.
pub const REFUSED_FOR: Duration = Duration::from_secs(30);

/// The most refused logins remembered; past it the expired ones go, then all.
const MAX_REFUSED: usize = 10_000;

/// The most logins tried against the cluster at once; further ones wait their turn.
const MAX_CONCURRENT_LOGINS: usize = 4;

/// Basic auth's settings.
#[derive(Clone, Debug)]
pub struct BasicAuth {
    /// The most users whose producers are kept at once.
    pub max_users: usize,
}

/// A user's credentials from an `Authorization: Basic` header.
pub struct Credentials {
    pub username: String,
    password: String,
}

impl std::fmt::Debug for Credentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Credentials")
            .field("username", &self.username)
            .finish_non_exhaustive()
    }
}

/// The credentials of `headers`: `Authorization: Basic base64(user:password)`; `None` when
/// missing or malformed.
pub fn credentials(headers: &HeaderMap) -> Option<Credentials> {
    let value = headers.get(header::AUTHORIZATION)?.to_str().ok()?;
    let (scheme, token) = value.trim().split_once(' ')?;
    if !scheme.eq_ignore_ascii_case("basic") {
        return None;
    }
    let decoded = base64::engine::general_purpose::STANDARD
        .decode(token.trim())
        .ok()?;
    let text = String::from_utf8(decoded).ok()?;
    let (username, password) = text.split_once(':')?;
    if username.is_empty() {
        return None;
    }
    Some(Credentials {
        username: username.to_string(),
        password: password.to_string(),
    })
}

/// 401 with REST Proxy's JSON body and the challenge.
pub fn unauthorized(message: impl Into<String>) -> Response {
    let mut r =
        ApiError::new(StatusCode::UNAUTHORIZED, errors::UNAUTHORIZED, message).into_response();
    if let Ok(v) = HeaderValue::from_str(&format!("Basic realm=\"{REALM}\", charset=\"UTF-8\"")) {
        r.headers_mut().insert(header::WWW_AUTHENTICATE, v);
    }
    r
}

/// 401 for a login the cluster refused.
fn login_refused(user: &str) -> Response {
    unauthorized(format!("the Kafka cluster refused the login of {user}"))
}

struct Held {
    /// SHA-256 of the password the producer logged in with.
    password: [u8; 32],
    producer: Arc<Producer>,
    last_used: Instant,
}

/// The producers of the users seen, by user name.
pub(crate) struct UserProducers {
    base: ProducerConfig,
    max_users: usize,
    held: Mutex<HashMap<String, Held>>,
    /// Logins the cluster refused (user, password digest), with when.
    refused: Mutex<HashMap<(String, [u8; 32]), Instant>>,
    /// Turns to try a login against the cluster.
    logins: tokio::sync::Semaphore,
    /// Logins tried against the cluster.
    attempts: AtomicU64,
}

fn digest(password: &str) -> [u8; 32] {
    Sha256::digest(password.as_bytes()).into()
}

impl UserProducers {
    /// `base` is the proxy's producer config, whose SASL login each user's replaces.
    pub fn new(base: ProducerConfig, auth: &BasicAuth) -> UserProducers {
        UserProducers {
            base,
            max_users: auth.max_users.max(1),
            held: Mutex::new(HashMap::new()),
            refused: Mutex::new(HashMap::new()),
            logins: tokio::sync::Semaphore::new(MAX_CONCURRENT_LOGINS),
            attempts: AtomicU64::new(0),
        }
    }

    /// The producer of `c`'s user: the one held when it logged in with the same password,
    /// else a new one whose login the cluster is asked to accept first (401 when it refuses,
    /// or refused within `REFUSED_FOR`; 503 when no broker answers).
    pub async fn producer_for(&self, c: &Credentials) -> Result<Arc<Producer>, Response> {
        let password = digest(&c.password);
        if let Some(p) = self.held_for(&c.username, &password) {
            return Ok(p);
        }
        if self.recently_refused(&c.username, &password) {
            return Err(login_refused(&c.username));
        }
        let _turn = self
            .logins
            .acquire()
            .await
            .map_err(|_| ApiError::unavailable("the proxy is shutting down").into_response())?;
        // While this one waited, a request with the same login may have got its answer.
        if let Some(p) = self.held_for(&c.username, &password) {
            return Ok(p);
        }
        if self.recently_refused(&c.username, &password) {
            return Err(login_refused(&c.username));
        }
        self.attempts.fetch_add(1, Ordering::Relaxed);
        match self.start(c).await {
            Ok(producer) => Ok(self.keep(&c.username, password, Arc::new(producer))),
            Err(refused) if refused.status() == StatusCode::UNAUTHORIZED => {
                self.remember_refused(&c.username, password);
                Err(refused)
            }
            Err(other) => Err(other),
        }
    }

    /// Logins tried against the cluster so far (the rest were answered by a held producer or
    /// a remembered refusal).
    pub fn login_attempts(&self) -> u64 {
        self.attempts.load(Ordering::Relaxed)
    }

    fn recently_refused(&self, user: &str, password: &[u8; 32]) -> bool {
        let refused = self.refused.lock();
        refused
            .get(&(user.to_string(), *password))
            .is_some_and(|at| at.elapsed() < REFUSED_FOR)
    }

    fn remember_refused(&self, user: &str, password: [u8; 32]) {
        let mut refused = self.refused.lock();
        if refused.len() >= MAX_REFUSED {
            refused.retain(|_, at| at.elapsed() < REFUSED_FOR);
            if refused.len() >= MAX_REFUSED {
                refused.clear();
            }
        }
        refused.insert((user.to_string(), password), Instant::now());
    }

    fn held_for(&self, user: &str, password: &[u8; 32]) -> Option<Arc<Producer>> {
        let mut held = self.held.lock();
        let h = held.get_mut(user)?;
        if !bool::from(h.password.ct_eq(password)) {
            return None;
        }
        h.last_used = Instant::now();
        Some(h.producer.clone())
    }

    /// A producer logged in as `c`, once the cluster accepted the login.
    async fn start(&self, c: &Credentials) -> Result<Producer, Response> {
        let mut config = self.base.clone();
        let Some(security) = config.security.with_credentials(&c.username, &c.password) else {
            return Err(
                ApiError::unavailable("the proxy's producer has no SASL login").into_response(),
            );
        };
        config.security = security;
        let producer = Producer::start(config)
            .await
            .map_err(|e| ApiError::unavailable(e).into_response())?;
        match producer.cluster_id().await {
            Ok(_) => Ok(producer),
            Err(e) if e.is_login_refused() => {
                tracing::info!(user = %c.username, "the cluster refused the user's login");
                Err(login_refused(&c.username))
            }
            Err(e) => Err(ApiError::unavailable(e).into_response()),
        }
    }

    /// Keeps `producer` for `user` (replacing one with an older password) and returns the one
    /// to use: a producer made meanwhile by a request of the same login wins.
    fn keep(&self, user: &str, password: [u8; 32], producer: Arc<Producer>) -> Arc<Producer> {
        let mut held = self.held.lock();
        if let Some(h) = held.get_mut(user) {
            if bool::from(h.password.ct_eq(&password)) {
                h.last_used = Instant::now();
                return h.producer.clone();
            }
        } else if held.len() >= self.max_users {
            make_room(&mut held);
        }
        let old = held.insert(
            user.to_string(),
            Held {
                password,
                producer: producer.clone(),
                last_used: Instant::now(),
            },
        );
        if let Some(old) = old {
            close_later(old.producer);
        }
        producer
    }

    /// Every held producer, for metrics and shutdown.
    pub fn all(&self) -> Vec<(String, Arc<Producer>)> {
        self.held
            .lock()
            .iter()
            .map(|(u, h)| (u.clone(), h.producer.clone()))
            .collect()
    }
}

/// Gives up the least recently used producer no request holds; when every one is in use,
/// the map grows past its bound until they are done.
fn make_room(held: &mut HashMap<String, Held>) {
    let idle = held
        .iter()
        .filter(|(_, h)| Arc::strong_count(&h.producer) == 1)
        .min_by_key(|(_, h)| h.last_used)
        .map(|(u, _)| u.clone());
    if let Some(user) = idle {
        if let Some(h) = held.remove(&user) {
            tracing::debug!(%user, "giving up the least recently used user's producer");
            close_later(h.producer);
        }
    }
}

fn close_later(p: Arc<Producer>) {
    tokio::spawn(async move { p.close(CLOSE_GRACE).await });
}

#[cfg(test)]
mod tests {
    use super::*;

    fn with_auth(value: &str) -> HeaderMap {
        let mut h = HeaderMap::new();
        h.insert(header::AUTHORIZATION, HeaderValue::from_str(value).unwrap());
        h
    }

    #[test]
    fn basic_credentials_are_read_and_anything_else_is_none() {
        let token = base64::engine::general_purpose::STANDARD.encode("alice:s3cr:et");
        let c = credentials(&with_auth(&format!("Basic {token}"))).unwrap();
        assert_eq!(
            (c.username.as_str(), c.password.as_str()),
            ("alice", "s3cr:et")
        );
        assert!(!format!("{c:?}").contains("s3cr"));
        let empty_user = base64::engine::general_purpose::STANDARD.encode(":pw");
        for bad in [
            "Bearer abc".to_string(),
            "Basic !!!".to_string(),
            format!("Basic {empty_user}"),
            "Basic".to_string(),
        ] {
            assert!(credentials(&with_auth(&bad)).is_none(), "{bad}");
        }
        assert!(credentials(&HeaderMap::new()).is_none());
    }

    fn names(users: &UserProducers) -> Vec<String> {
        let mut n: Vec<String> = users.all().into_iter().map(|(u, _)| u).collect();
        n.sort();
        n
    }

    #[tokio::test]
    async fn the_least_recently_used_idle_users_producer_makes_room() {
        // No broker is needed to hold producers.
        let base = ProducerConfig::new("127.0.0.1:1");
        let users = UserProducers::new(base.clone(), &BasicAuth { max_users: 2 });
        let start = || async { Arc::new(Producer::start(base.clone()).await.unwrap()) };
        let in_use = users.keep("a", digest("pa"), start().await);
        users.keep("b", digest("pb"), start().await);
        assert!(users.held_for("a", &digest("pa")).is_some());
        assert!(
            users.held_for("a", &digest("wrong")).is_none(),
            "another password"
        );
        // Full: a is in use by a request, so b goes though a is older.
        users.keep("c", digest("pc"), start().await);
        assert_eq!(names(&users), ["a", "c"]);
        // Done with a, the least recently used: it goes next.
        drop(in_use);
        users.keep("d", digest("pd"), start().await);
        assert_eq!(names(&users), ["c", "d"]);
        // The same login made twice at once: the first kept wins.
        let first = users.held_for("c", &digest("pc")).unwrap();
        let second = users.keep("c", digest("pc"), start().await);
        assert!(Arc::ptr_eq(&first, &second));
    }

    #[test]
    fn a_refusal_is_401_with_a_challenge_and_rest_proxys_body() {
        let r = unauthorized("no");
        assert_eq!(r.status(), StatusCode::UNAUTHORIZED);
        let challenge = r.headers()[header::WWW_AUTHENTICATE].to_str().unwrap();
        assert!(
            challenge.starts_with("Basic realm=\"evenkeel-proxy\""),
            "{challenge}"
        );
    }
}
