//! An answer body that calls back once it is done: sent to its end, or dropped because the
//! client went away. The request histogram uses it to time streamed answers to their last byte.

use std::pin::Pin;
use std::task::{Context, Poll};

use axum::body::Body;
use http_body::{Body as HttpBody, Frame, SizeHint};

/// `inner`, with `done` called once when it ends or is dropped.
pub(super) struct Timed<F: FnOnce() + Send + Unpin + 'static> {
    inner: Body,
    done: Option<F>,
}

impl<F: FnOnce() + Send + Unpin + 'static> Timed<F> {
    pub(super) fn body(inner: Body, done: F) -> Body {
        Body::new(Timed {
            inner,
            done: Some(done),
        })
    }

    fn finish(&mut self) {
        if let Some(done) = self.done.take() {
            done();
        }
    }
}

impl<F: FnOnce() + Send + Unpin + 'static> HttpBody for Timed<F> {
    type Data = bytes::Bytes;
    type Error = axum::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Self::Data>, Self::Error>>> {
        let frame = Pin::new(&mut self.inner).poll_frame(cx);
        if matches!(frame, Poll::Ready(None) | Poll::Ready(Some(Err(_)))) {
            self.finish();
        }
        frame
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

impl<F: FnOnce() + Send + Unpin + 'static> Drop for Timed<F> {
    fn drop(&mut self) {
        self.finish();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http_body_util::BodyExt;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;

    #[tokio::test]
    async fn done_is_called_once_after_the_last_frame_not_before() {
        let calls = Arc::new(AtomicUsize::new(0));
        let c = calls.clone();
        let (mut tx, rx) =
            futures::channel::mpsc::channel::<Result<bytes::Bytes, std::io::Error>>(2);
        let mut body = Timed::body(Body::from_stream(rx), move || {
            c.fetch_add(1, Ordering::SeqCst);
        });
        tx.try_send(Ok(bytes::Bytes::from_static(b"one"))).unwrap();
        let first = body.frame().await.unwrap().unwrap();
        assert_eq!(first.into_data().unwrap(), "one");
        assert_eq!(calls.load(Ordering::SeqCst), 0, "the stream goes on");
        drop(tx);
        assert!(body.frame().await.is_none());
        assert_eq!(calls.load(Ordering::SeqCst), 1, "called at the end");
        drop(body);
        assert_eq!(calls.load(Ordering::SeqCst), 1, "and only once");
    }

    #[test]
    fn a_body_dropped_unsent_is_done_too() {
        let calls = Arc::new(AtomicUsize::new(0));
        let c = calls.clone();
        drop(Timed::body(Body::from("x"), move || {
            c.fetch_add(1, Ordering::SeqCst);
        }));
        assert_eq!(calls.load(Ordering::SeqCst), 1);
    }
}
