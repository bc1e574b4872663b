//! The proxy's HTTPS listener: TCP connections accepted, each TLS handshake run on a task of its
//! own (bounded by the handshake timeout), and only finished handshakes handed to the HTTP
//! server. A handshake that fails (plain HTTP on the HTTPS port, a client that gives up) closes
//! that connection and nothing else. The keystore file is re-read when it changes.

use std::net::SocketAddr;
use std::sync::Arc;

use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;
use tokio_rustls::server::TlsStream;

use crate::security::tls::TlsServer;

/// Handshakes finished and not yet taken by the server.
const READY_QUEUE: usize = 64;

pub(super) struct TlsListener {
    addr: SocketAddr,
    ready: mpsc::Receiver<(TlsStream<TcpStream>, SocketAddr)>,
    accepting: tokio::task::JoinHandle<()>,
    reloading: Option<tokio::task::JoinHandle<()>>,
}

impl Drop for TlsListener {
    fn drop(&mut self) {
        self.accepting.abort();
        if let Some(r) = &self.reloading {
            r.abort();
        }
    }
}

impl TlsListener {
    /// Accepts on `tcp` (already bound) with `server`'s certificate.
    pub fn new(tcp: TcpListener, server: TlsServer) -> TlsListener {
        let addr = tcp
            .local_addr()
            .unwrap_or_else(|_| SocketAddr::from(([0, 0, 0, 0], 0)));
        let server = Arc::new(server);
        let reloading = server.watch_files();
        let (tx, ready) = mpsc::channel(READY_QUEUE);
        let accepting = tokio::spawn(accept_loop(tcp, server, tx));
        TlsListener {
            addr,
            ready,
            accepting,
            reloading,
        }
    }
}

async fn accept_loop(
    tcp: TcpListener,
    server: Arc<TlsServer>,
    ready: mpsc::Sender<(TlsStream<TcpStream>, SocketAddr)>,
) {
    loop {
        let (stream, peer) = match tcp.accept().await {
            Ok(accepted) => accepted,
            Err(e) => {
                // Out of file descriptors and the like: wait a moment rather than spin.
                tracing::warn!(error = %e, "cannot accept a connection");
                tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                continue;
            }
        };
        if let Err(e) = stream.set_nodelay(true) {
            tracing::debug!(error = %e, "cannot set TCP_NODELAY on a connection");
        }
        let (server, ready) = (server.clone(), ready.clone());
        tokio::spawn(async move {
            match server.accept(stream).await {
                Ok((tls, _)) => {
                    let _ = ready.send((tls, peer)).await;
                }
                Err(e) => tracing::debug!(%peer, error = %e, "HTTPS handshake failed"),
            }
        });
    }
}

impl axum::serve::Listener for TlsListener {
    type Io = TlsStream<TcpStream>;
    type Addr = SocketAddr;

    async fn accept(&mut self) -> (Self::Io, Self::Addr) {
        match self.ready.recv().await {
            Some(accepted) => accepted,
            // The accept loop ended (it does not, but for the type's sake): no more connections.
            None => std::future::pending().await,
        }
    }

    fn local_addr(&self) -> std::io::Result<SocketAddr> {
        Ok(self.addr)
    }
}
