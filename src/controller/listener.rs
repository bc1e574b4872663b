//! The controller listener: accepts connections from voters, brokers and admin tools through
//! the shared accept loop (`protocol::listener`), over TLS when it is SSL, after a SASL login
//! when it is SASL, and answers their frames in order, one request in flight per connection,
//! through `ControllerNode::handle`.
//!
//! Kafka's controller applies the broker's connection limits on its own socket server; here
//! the controller listener has none (no `max.connections`, no per-ip limit, no idle timeout):
//! its clients are the quorum's voters and the brokers, whose pooled connections (the raft
//! network's, the controller channels') come from few addresses and sit idle between
//! elections and admin calls, and a limit sized for clients would cut them off.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;

use tokio::net::TcpListener;
use tokio::sync::watch;

use super::apis::ControllerNode;
use super::refusals::Caller;
use crate::config::auth::ListenerSasl;
use crate::protocol::listener::{
    serve, CloseReason, Connection, ConnectionQuotas, Handler, ListenerSettings, DEFAULT_DRAIN,
};
use crate::protocol::sasl::{self, SaslAuthenticator, Turn};
use crate::security::sasl::ScramMechanism;
use crate::security::tls::TlsServer;

/// SASL on the controller listener, as on a broker's SASL listener: the mechanisms and PLAIN's
/// users, the session lifetime (`connections.max.reauth.ms`), the largest frame before a login
/// (`sasl.server.max.receive.size`) and the pause before a failed login's connection closes.
/// SCRAM logins are checked against the credentials in this voter's metadata image.
pub struct ControllerSasl {
    pub settings: Arc<ListenerSasl>,
    pub reauth_ms: u64,
    pub max_receive_bytes: usize,
    pub failed_delay: Duration,
}

/// A bound controller listener.
pub struct ControllerListener {
    pub addr: SocketAddr,
    stop: watch::Sender<bool>,
    task: tokio::task::JoinHandle<()>,
}

/// One controller listener to bind: its name and address (port 0: any), the largest request
/// it reads, TLS when it is SSL, SASL when it is SASL, and whether its callers are checked by
/// the authorizer (an SSL or SASL listener of a node that has one).
pub struct ControllerListenerSettings {
    pub name: String,
    pub host: String,
    pub port: u16,
    pub max_request_bytes: usize,
    pub tls: Option<Arc<TlsServer>>,
    pub sasl: Option<ControllerSasl>,
    pub checks_callers: bool,
}

impl ControllerListener {
    /// Binds the listener of `s` and serves `node` on it: plain TCP, or TLS (an SSL controller
    /// listener, whose callers are known by their client certificates).
    pub async fn start(
        node: Arc<ControllerNode>,
        s: ControllerListenerSettings,
    ) -> std::io::Result<ControllerListener> {
        let host = if s.host.is_empty() {
            "0.0.0.0"
        } else {
            &s.host
        };
        let listener = TcpListener::bind((host, s.port)).await?;
        let addr = listener.local_addr()?;
        let (stop, rx) = watch::channel(false);
        let mut settings = ListenerSettings::plaintext(&s.name, s.max_request_bytes);
        settings.tls = s.tls;
        let (name, max_request_bytes, checked) = (s.name, s.max_request_bytes, s.checks_callers);
        let sasl = s.sasl.map(|sasl| {
            Arc::new(Login {
                listener: name.clone(),
                max_request_bytes,
                sasl,
            })
        });
        let handler: Handler =
            Arc::new(move |conn| Box::pin(connection(conn, node.clone(), sasl.clone(), checked)));
        let task = tokio::spawn(serve(
            listener,
            settings,
            ConnectionQuotas::unlimited(),
            handler,
            rx,
        ));
        tracing::info!(address = %addr, listener = %name, "controller listener");
        Ok(ControllerListener { addr, stop, task })
    }

    /// Stops accepting and waits for the open connections to finish the request in hand (as
    /// long as the accept loop's drain allows).
    pub async fn stop(mut self) {
        let _ = self.stop.send(true);
        let bound = DEFAULT_DRAIN + std::time::Duration::from_secs(1);
        if tokio::time::timeout(bound, &mut self.task).await.is_err() {
            self.task.abort();
        }
    }
}

/// What a connection needs for its SASL login.
struct Login {
    listener: String,
    max_request_bytes: usize,
    sasl: ControllerSasl,
}

async fn connection(
    mut conn: Connection,
    node: Arc<ControllerNode>,
    login: Option<Arc<Login>>,
    checked: bool,
) -> Result<(), CloseReason> {
    let mut caller = Caller {
        principal: conn.principal().to_string(),
        host: conn.peer().ip().to_canonical().to_string(),
        checked,
    };
    let mut sasl = login.map(|login| {
        // Until a SASL client has logged in it may send only small frames.
        conn.set_max_request_bytes(login.sasl.max_receive_bytes);
        let s = &login.sasl;
        let auth = SaslAuthenticator::new(&login.listener, s.settings.clone(), s.reauth_ms);
        (auth, login)
    });
    loop {
        let Some(frame) = conn.next_request().await? else {
            return Ok(());
        };
        if let Some((auth, login)) = sasl.as_mut() {
            if sasl_turn(&mut conn, auth, login, &node, &frame, &mut caller).await? {
                continue;
            }
        }
        match node.handle(frame, &caller).await {
            Ok(Some(resp)) => conn.write(&resp).await?,
            Ok(None) => {}
            Err(e) => return Err(CloseReason::Handler(e.to_string())),
        }
    }
}

/// The SASL authenticator's turn at a request: `Ok(true)` when it answered it (after a login,
/// `caller` names the principal and full-size frames are read again), `Ok(false)` when the
/// controller serves it; an error closes the connection.
async fn sasl_turn(
    conn: &mut Connection,
    auth: &mut SaslAuthenticator,
    login: &Login,
    node: &ControllerNode,
    frame: &Bytes,
    caller: &mut Caller,
) -> Result<bool, CloseReason> {
    let step = {
        let scram = |user: &str, m: ScramMechanism| {
            let image = node.quorum.image();
            let c = image.security().scram_credential(user, m.type_code());
            c.map(|c| c.credential())
        };
        auth.on_request(&scram, frame, crate::protocol::peek_header(frame).ok())
    };
    match sasl::answer(conn, step).await? {
        Turn::Serve => Ok(false),
        Turn::Answered => Ok(true),
        Turn::LoggedIn(principal) => {
            caller.principal = principal;
            conn.set_max_request_bytes(login.max_request_bytes);
            Ok(true)
        }
        Turn::Refused(reason) => {
            tokio::time::sleep(login.sasl.failed_delay).await;
            Err(CloseReason::Handler(reason))
        }
    }
}
