//! A small HTTP/1.1 client over a plain socket for the proxy's tests (content-length and chunked
//! answers, chunked request bodies sent piece by piece), and the `evenkeel proxy` process.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

#[derive(Debug)]
pub struct Response {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl Response {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    pub fn json(&self) -> serde_json::Value {
        serde_json::from_slice(&self.body).unwrap_or_else(|e| {
            panic!(
                "status {}: body is not JSON ({e}): {}",
                self.status,
                String::from_utf8_lossy(&self.body)
            )
        })
    }

    /// A body of one JSON value per line.
    pub fn json_lines(&self) -> Vec<serde_json::Value> {
        String::from_utf8_lossy(&self.body)
            .lines()
            .filter(|l| !l.trim().is_empty())
            .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
            .collect()
    }
}

fn connect(addr: &str) -> TcpStream {
    let s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(120))).unwrap();
    s
}

/// One request with a content-length body; reads the answer to the end.
pub fn request(addr: &str, method: &str, path: &str, content_type: &str, body: &[u8]) -> Response {
    let head = Head {
        addr,
        method,
        path,
        content_type,
        extra: &[],
    };
    request_on(&mut connect(addr), &head, body)
}

/// A request's line and headers.
pub struct Head<'a> {
    pub addr: &'a str,
    pub method: &'a str,
    pub path: &'a str,
    pub content_type: &'a str,
    /// More headers, e.g. `("Authorization", "Basic …")`.
    pub extra: &'a [(&'a str, String)],
}

/// One request with a content-length body on an open stream (plain or TLS); reads the answer
/// to the end.
pub fn request_on<S: Read + Write>(s: &mut S, h: &Head, body: &[u8]) -> Response {
    let extra: String = h
        .extra
        .iter()
        .map(|(k, v)| format!("{k}: {v}\r\n"))
        .collect();
    let head = format!(
        "{} {} HTTP/1.1\r\nHost: {}\r\nConnection: close\r\nContent-Type: {}\r\n{extra}Content-Length: {}\r\n\r\n",
        h.method,
        h.path,
        h.addr,
        h.content_type,
        body.len()
    );
    s.write_all(head.as_bytes()).unwrap();
    // A server may answer (413) and close before taking the whole body.
    let _ = s.write_all(body);
    let _ = s.flush();
    read_response(s)
}

/// Announces a body of `len` bytes with `Expect: 100-continue`, as curl does for large bodies,
/// and reads the answer before sending any of it (a server that refuses it answers at once).
pub fn post_announcing(addr: &str, path: &str, content_type: &str, len: usize) -> Response {
    let mut s = connect(addr);
    let head = format!(
        "POST {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\nContent-Type: {content_type}\r\nContent-Length: {len}\r\nExpect: 100-continue\r\n\r\n"
    );
    s.write_all(head.as_bytes()).unwrap();
    read_response(&mut s)
}

pub fn get(addr: &str, path: &str) -> Response {
    request(addr, "GET", path, "application/json", b"")
}

pub fn post(addr: &str, path: &str, content_type: &str, body: &str) -> Response {
    request(addr, "POST", path, content_type, body.as_bytes())
}

/// Starts a chunked POST; the caller writes chunks with `chunk` and ends with `finish`.
pub fn start_chunked(addr: &str, path: &str) -> TcpStream {
    start_chunked_as(addr, path, "application/json")
}

/// `start_chunked` with the given content type.
pub fn start_chunked_as(addr: &str, path: &str, content_type: &str) -> TcpStream {
    let mut s = connect(addr);
    let head = format!(
        "POST {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\nContent-Type: {content_type}\r\nTransfer-Encoding: chunked\r\n\r\n"
    );
    s.write_all(head.as_bytes()).unwrap();
    s
}

pub fn chunk(s: &mut TcpStream, data: &[u8]) {
    write!(s, "{:x}\r\n", data.len()).unwrap();
    s.write_all(data).unwrap();
    s.write_all(b"\r\n").unwrap();
    s.flush().unwrap();
}

pub fn finish(mut s: TcpStream) -> Response {
    s.write_all(b"0\r\n\r\n").unwrap();
    read_response(&mut s)
}

pub fn read_response<S: Read>(s: &mut S) -> Response {
    let mut r = BufReader::new(s);
    let mut line = String::new();
    r.read_line(&mut line).unwrap();
    let status = line
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    let mut headers = Vec::new();
    loop {
        let mut h = String::new();
        if r.read_line(&mut h).unwrap_or(0) == 0 || h.trim().is_empty() {
            break;
        }
        if let Some((k, v)) = h.split_once(':') {
            headers.push((k.trim().to_string(), v.trim().to_string()));
        }
    }
    let chunked = headers
        .iter()
        .any(|(k, v)| k.eq_ignore_ascii_case("transfer-encoding") && v.contains("chunked"));
    let mut body = Vec::new();
    if chunked {
        loop {
            let mut size = String::new();
            if r.read_line(&mut size).unwrap_or(0) == 0 {
                break;
            }
            let n = usize::from_str_radix(size.trim(), 16).unwrap_or(0);
            if n == 0 {
                break;
            }
            let mut buf = vec![0; n + 2];
            if r.read_exact(&mut buf).is_err() {
                break;
            }
            body.extend_from_slice(&buf[..n]);
        }
    } else {
        let _ = r.read_to_end(&mut body);
    }
    Response {
        status,
        headers,
        body,
    }
}

/// `evenkeel proxy` on a free loopback port.
pub struct ProxyProcess {
    child: Child,
    pub addr: String,
}

impl ProxyProcess {
    pub fn start(bootstrap: &str, producer_props: &[&str]) -> ProxyProcess {
        Self::start_with(bootstrap, producer_props, &[])
    }

    /// As `start`, with more flags for `evenkeel proxy` (e.g. `--shutdown-delay-ms`).
    pub fn start_with(bootstrap: &str, producer_props: &[&str], flags: &[&str]) -> ProxyProcess {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_evenkeel"));
        cmd.args(["proxy", "--bootstrap", bootstrap, "--listen", "127.0.0.1:0"]);
        cmd.args(flags);
        for p in producer_props {
            cmd.args(["--producer-property", p]);
        }
        let mut child = cmd
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("start evenkeel proxy");
        let stdout = child.stdout.take().unwrap();
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { return };
                let after = ["ready on http://", "ready on https://"]
                    .iter()
                    .find_map(|marker| line.split(marker).nth(1));
                if let Some(rest) = after {
                    let addr = rest.split_whitespace().next().unwrap_or("").to_string();
                    let _ = tx.send(addr);
                }
            }
        });
        let addr = rx
            .recv_timeout(Duration::from_secs(60))
            .expect("the proxy did not print its ready line");
        ProxyProcess { child, addr }
    }
}

impl ProxyProcess {
    /// SIGTERM: a clean shutdown begins.
    pub fn sigterm(&self) {
        super::unsafe_sigterm(self.child.id());
    }

    /// Waits up to `within` for the process to exit: its status, or `None` if it did not.
    pub fn wait_exit(&mut self, within: Duration) -> Option<std::process::ExitStatus> {
        let deadline = std::time::Instant::now() + within;
        while std::time::Instant::now() < deadline {
            if let Ok(Some(status)) = self.child.try_wait() {
                return Some(status);
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        None
    }
}

/// Reads a chunked answer's body as it comes, until `done` holds for what was read so far or
/// `within` passes; what was read.
pub fn read_until(s: &mut TcpStream, within: Duration, done: impl Fn(&str) -> bool) -> String {
    let deadline = std::time::Instant::now() + within;
    let mut seen = Vec::new();
    let _ = s.set_read_timeout(Some(Duration::from_millis(100)));
    let mut buf = [0u8; 4096];
    while std::time::Instant::now() < deadline && !done(&String::from_utf8_lossy(&seen)) {
        match s.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => seen.extend_from_slice(&buf[..n]),
            Err(_) => {}
        }
    }
    String::from_utf8_lossy(&seen).into_owned()
}

impl Drop for ProxyProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
