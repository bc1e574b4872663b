//! The controller listener: accepts connections from voters, brokers and admin tools through
//! the shared accept loop (`protocol::listener`), over TLS when it is SSL, and answers their
//! frames in order, one request in flight per connection, through `ControllerNode::handle`.
//!
//! Kafka's controller applies the broker's connection limits on its own socket server; here
//! the controller listener has none (no `max.connections`, no per-ip limit, no idle timeout):
//! its clients are the quorum's voters and the brokers, whose pooled connections (the raft
//! network's, the controller channels') come from few addresses and sit idle between
//! elections and admin calls, and a limit sized for clients would cut them off.

use std::net::SocketAddr;
use std::sync::Arc;

use tokio::net::TcpListener;
use tokio::sync::watch;

use super::apis::ControllerNode;
use super::refusals::Caller;
use crate::protocol::listener::{
    serve, CloseReason, Connection, ConnectionQuotas, Handler, ListenerSettings, DEFAULT_DRAIN,
};
use crate::security::tls::TlsServer;

/// A bound controller listener.
pub struct ControllerListener {
    pub addr: SocketAddr,
    stop: watch::Sender<bool>,
    task: tokio::task::JoinHandle<()>,
}

impl ControllerListener {
    /// Binds `host:port` (port 0: any) and serves `node` on it as the listener `name`: plain
    /// TCP, or TLS with `tls` (an SSL controller listener, whose callers are known by their
    /// client certificates).
    pub async fn start(
        node: Arc<ControllerNode>,
        name: &str,
        host: &str,
        port: u16,
        max_request_bytes: usize,
        tls: Option<Arc<TlsServer>>,
    ) -> std::io::Result<ControllerListener> {
        let host = if host.is_empty() { "0.0.0.0" } else { host };
        let listener = TcpListener::bind((host, port)).await?;
        let addr = listener.local_addr()?;
        let (stop, rx) = watch::channel(false);
        let mut settings = ListenerSettings::plaintext(name, max_request_bytes);
        settings.tls = tls;
        let handler: Handler = Arc::new(move |conn| Box::pin(connection(conn, node.clone())));
        let task = tokio::spawn(serve(
            listener,
            settings,
            ConnectionQuotas::unlimited(),
            handler,
            rx,
        ));
        tracing::info!(address = %addr, "controller listener");
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

async fn connection(mut conn: Connection, node: Arc<ControllerNode>) -> Result<(), CloseReason> {
    let caller = Caller {
        principal: conn.principal().to_string(),
        host: conn.peer().ip().to_canonical().to_string(),
    };
    loop {
        let Some(frame) = conn.next_request().await? else {
            return Ok(());
        };
        match node.handle(frame, &caller).await {
            Ok(Some(resp)) => conn.write(&resp).await?,
            Ok(None) => {}
            Err(e) => return Err(CloseReason::Handler(e.to_string())),
        }
    }
}
