//! Lingering close: a request body that is dropped before its end (its request was refused, or
//! cut short) is read out and thrown away for a while before the connection closes. Closing at
//! once, with the client still sending, resets the connection, and a reset can lose the answer.

use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use axum::body::Body;
use axum::extract::Request;
use axum::http::header;
use axum::middleware::Next;
use axum::response::Response;
use futures::StreamExt;
use http_body::{Body as HttpBody, Frame, SizeHint};
use tokio::time::{timeout_at, Instant};

/// How long the rest of a dropped body is read for, at most.
const LINGER_TIME: Duration = Duration::from_secs(10);
/// How long a quiet client is waited for before the connection closes.
const LINGER_IDLE: Duration = Duration::from_secs(2);
/// How much of a dropped body is read, at most.
const LINGER_BYTES: usize = 64 << 20;

/// The middleware: every request body is read out if a handler drops it early. A client that
/// asked `Expect: 100-continue` is left alone: it sends nothing until the body is asked for.
pub(super) async fn lingering_bodies(req: Request, next: Next) -> Response {
    if req.headers().contains_key(header::EXPECT) {
        return next.run(req).await;
    }
    next.run(req.map(|b| Body::new(Lingering(Some(b))))).await
}

/// A request body that, dropped before its end, reads out the rest in the background.
struct Lingering(Option<Body>);

impl HttpBody for Lingering {
    type Data = bytes::Bytes;
    type Error = axum::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Self::Data>, Self::Error>>> {
        let Some(body) = self.0.as_mut() else {
            return Poll::Ready(None);
        };
        let frame = Pin::new(body).poll_frame(cx);
        if matches!(frame, Poll::Ready(None)) {
            self.0 = None; // read to its end: nothing to read out
        }
        frame
    }

    fn is_end_stream(&self) -> bool {
        self.0.as_ref().is_none_or(HttpBody::is_end_stream)
    }

    fn size_hint(&self) -> SizeHint {
        self.0
            .as_ref()
            .map_or_else(|| SizeHint::with_exact(0), HttpBody::size_hint)
    }
}

impl Drop for Lingering {
    fn drop(&mut self) {
        let Some(body) = self.0.take().filter(|b| !b.is_end_stream()) else {
            return;
        };
        // Outside a runtime (the proxy shutting down) the connection goes with it anyway.
        if let Ok(rt) = tokio::runtime::Handle::try_current() {
            rt.spawn(discard(body));
        }
    }
}

/// Reads and discards `body` for up to `LINGER_TIME` and `LINGER_BYTES`.
async fn discard(body: Body) {
    let mut stream = body.into_data_stream();
    let deadline = Instant::now() + LINGER_TIME;
    let mut read = 0usize;
    while read < LINGER_BYTES {
        let idle = (Instant::now() + LINGER_IDLE).min(deadline);
        match timeout_at(idle, stream.next()).await {
            Ok(Some(Ok(chunk))) => read += chunk.len(),
            _ => break,
        }
    }
    tracing::debug!(bytes = read, "read out the rest of a dropped request body");
}
