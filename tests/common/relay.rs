//! A loopback TCP relay a test can cut and heal: it forwards every connection to a target port;
//! `cut` closes the live connections and refuses new ones until `heal`. Brokers advertise the
//! relay as their replication listener, so a test controls the link between leader and
//! followers without touching client or controller traffic.
#![allow(dead_code)]

use std::net::{Shutdown, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

pub struct Relay {
    pub port: u16,
    cut: Arc<AtomicBool>,
    live: Arc<Mutex<Vec<TcpStream>>>,
    stop: Arc<AtomicBool>,
}

impl Relay {
    /// Listens on a free port and forwards to `127.0.0.1:target`.
    pub fn start(target: u16) -> Relay {
        let listener = TcpListener::bind(("127.0.0.1", 0)).unwrap();
        let port = listener.local_addr().unwrap().port();
        Self::serve(listener, port, target)
    }

    /// As `start`, on a port chosen beforehand.
    pub fn start_on(port: u16, target: u16) -> Relay {
        let listener = TcpListener::bind(("127.0.0.1", port)).unwrap();
        Self::serve(listener, port, target)
    }

    fn serve(listener: TcpListener, port: u16, target: u16) -> Relay {
        let cut = Arc::new(AtomicBool::new(false));
        let live: Arc<Mutex<Vec<TcpStream>>> = Arc::default();
        let stop = Arc::new(AtomicBool::new(false));
        let (c, l, s) = (cut.clone(), live.clone(), stop.clone());
        std::thread::spawn(move || {
            for client in listener.incoming() {
                if s.load(Ordering::SeqCst) {
                    return;
                }
                let Ok(client) = client else { continue };
                if c.load(Ordering::SeqCst) {
                    let _ = client.shutdown(Shutdown::Both);
                    continue;
                }
                let Ok(server) = TcpStream::connect(("127.0.0.1", target)) else {
                    let _ = client.shutdown(Shutdown::Both);
                    continue;
                };
                let _ = client.set_nodelay(true);
                let _ = server.set_nodelay(true);
                {
                    let mut live = l.lock().unwrap();
                    live.retain(|s| s.peer_addr().is_ok());
                    if let (Ok(a), Ok(b)) = (client.try_clone(), server.try_clone()) {
                        live.push(a);
                        live.push(b);
                    }
                }
                pipe(client.try_clone().unwrap(), server.try_clone().unwrap());
                pipe(server, client);
            }
        });
        Relay {
            port,
            cut,
            live,
            stop,
        }
    }

    /// Closes every connection through the relay and refuses new ones.
    pub fn cut(&self) {
        self.cut.store(true, Ordering::SeqCst);
        for s in self.live.lock().unwrap().drain(..) {
            let _ = s.shutdown(Shutdown::Both);
        }
    }

    /// Lets connections through again.
    pub fn heal(&self) {
        self.cut.store(false, Ordering::SeqCst);
    }
}

impl Drop for Relay {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        self.cut();
        // Wake the accept loop so it sees `stop`.
        let _ = TcpStream::connect(("127.0.0.1", self.port));
    }
}

fn pipe(mut from: TcpStream, mut to: TcpStream) {
    std::thread::spawn(move || {
        let _ = std::io::copy(&mut from, &mut to);
        let _ = to.shutdown(Shutdown::Both);
        let _ = from.shutdown(Shutdown::Both);
    });
}
