//! Lingering close: when a request is refused before its body was read to the end, the rest of
//! the body is read and thrown away for a while before the connection closes. Closing at once,
//! with the client still sending, resets the connection, and a reset can discard the answer.

use std::time::Duration;

use axum::body::{Body, BodyDataStream};
use futures::StreamExt;
use tokio::time::{timeout_at, Instant};

/// How long the rest of a refused body is read for, at most.
const LINGER_TIME: Duration = Duration::from_secs(10);
/// How long a quiet client is waited for before the connection closes.
const LINGER_IDLE: Duration = Duration::from_secs(2);
/// How much of a refused body is read, at most.
const LINGER_BYTES: usize = 64 << 20;

/// Reads and discards what is left of a refused request's body, in the background.
pub(super) fn discard_body(body: Body) {
    discard_rest(body.into_data_stream());
}

/// Reads and discards what is left of `stream`, in the background.
pub(super) fn discard_rest(mut stream: BodyDataStream) {
    tokio::spawn(async move {
        let deadline = Instant::now() + LINGER_TIME;
        let mut read = 0usize;
        while read < LINGER_BYTES {
            let idle = (Instant::now() + LINGER_IDLE).min(deadline);
            match timeout_at(idle, stream.next()).await {
                Ok(Some(Ok(chunk))) => read += chunk.len(),
                _ => break,
            }
        }
        tracing::debug!(bytes = read, "discarded the rest of a refused body");
    });
}
