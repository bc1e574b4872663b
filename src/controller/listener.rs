//! The controller listener: accepts connections from voters, brokers and admin tools, reads
//! size-prefixed frames (`socket.request.max.bytes`) and answers them in order, one request in
//! flight per connection, through `ControllerNode::handle`.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use tokio::io::AsyncWriteExt;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;

use super::apis::ControllerNode;
use crate::protocol::wire::read_request;

/// A bound controller listener.
pub struct ControllerListener {
    pub addr: SocketAddr,
    stop: watch::Sender<bool>,
    task: tokio::task::JoinHandle<()>,
}

impl ControllerListener {
    /// Binds `host:port` (port 0: any) and serves `node` on it.
    pub async fn start(
        node: Arc<ControllerNode>,
        host: &str,
        port: u16,
        max_request_bytes: usize,
    ) -> std::io::Result<ControllerListener> {
        let host = if host.is_empty() { "0.0.0.0" } else { host };
        let listener = TcpListener::bind((host, port)).await?;
        let addr = listener.local_addr()?;
        let (stop, rx) = watch::channel(false);
        let task = tokio::spawn(accept_loop(listener, node, rx, max_request_bytes));
        tracing::info!(address = %addr, "controller listener");
        Ok(ControllerListener { addr, stop, task })
    }

    pub async fn stop(self) {
        let _ = self.stop.send(true);
        self.task.abort();
        let _ = self.task.await;
    }
}

async fn accept_loop(
    listener: TcpListener,
    node: Arc<ControllerNode>,
    mut stop: watch::Receiver<bool>,
    max_request_bytes: usize,
) {
    loop {
        tokio::select! {
            _ = stop.changed() => return,
            accepted = listener.accept() => match accepted {
                Ok((stream, peer)) => {
                    let _ = stream.set_nodelay(true);
                    let (node, stop) = (node.clone(), stop.clone());
                    tokio::spawn(async move {
                        if let Err(reason) = connection(stream, peer, node, stop, max_request_bytes).await {
                            tracing::debug!(%peer, %reason, "closing controller connection");
                        }
                    });
                }
                Err(e) => {
                    tracing::warn!(error = %e, "accept failed on the controller listener");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
            }
        }
    }
}

async fn connection(
    mut stream: TcpStream,
    _peer: SocketAddr,
    node: Arc<ControllerNode>,
    mut stop: watch::Receiver<bool>,
    max_request_bytes: usize,
) -> Result<(), String> {
    loop {
        let Some(frame) = read_request(&mut stream, &mut stop, max_request_bytes).await? else {
            return Ok(());
        };
        match node.handle(frame).await {
            Ok(Some(resp)) => stream
                .write_all(&resp)
                .await
                .map_err(|e| format!("write failed: {e}"))?,
            Ok(None) => {}
            Err(e) => return Err(e.to_string()),
        }
    }
}
