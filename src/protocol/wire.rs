//! Kafka's framing on a socket: every request and response is a 4-byte big-endian size and that
//! many bytes. The one frame reader of the broker's and the controller's listeners, the
//! quorum's network and our client; each says which sizes it accepts.

use std::time::Duration;

use bytes::Bytes;
use tokio::io::{AsyncRead, AsyncReadExt};

/// Why no frame was read.
#[derive(Debug, thiserror::Error)]
pub enum FrameReadError {
    /// The peer closed the connection where a frame would start.
    #[error("the peer closed the connection")]
    Closed,
    /// The size prefix is outside what the reader accepts; the connection is out of step.
    #[error("frame size {size} is outside {min}..={max}")]
    Size { size: i32, min: usize, max: usize },
    /// The socket failed, or closed in the middle of a frame.
    #[error("read failed: {0}")]
    Io(#[from] std::io::Error),
}

impl From<FrameReadError> for std::io::Error {
    fn from(e: FrameReadError) -> Self {
        match e {
            FrameReadError::Io(e) => e,
            FrameReadError::Closed => std::io::ErrorKind::UnexpectedEof.into(),
            size @ FrameReadError::Size { .. } => {
                std::io::Error::new(std::io::ErrorKind::InvalidData, size.to_string())
            }
        }
    }
}

/// Reads one size-prefixed frame whose size is within `min..=max` bytes; returns its bytes
/// after the prefix. Nothing past the frame is read.
pub async fn read_frame<R: AsyncRead + Unpin>(
    r: &mut R,
    min: usize,
    max: usize,
) -> Result<Bytes, FrameReadError> {
    let first = read_first_byte(r).await?;
    read_frame_from(first, r, min, max).await
}

/// The first byte of the next frame; `Closed` when the peer closed the connection before it.
/// Reading one byte consumes nothing when cancelled, so it can race a timer.
async fn read_first_byte<R: AsyncRead + Unpin>(r: &mut R) -> Result<u8, FrameReadError> {
    let mut first = [0u8; 1];
    match r.read(&mut first).await? {
        0 => Err(FrameReadError::Closed),
        _ => Ok(first[0]),
    }
}

/// The rest of a frame whose first size byte is `first`.
async fn read_frame_from<R: AsyncRead + Unpin>(
    first: u8,
    r: &mut R,
    min: usize,
    max: usize,
) -> Result<Bytes, FrameReadError> {
    let mut size = [first, 0, 0, 0];
    r.read_exact(&mut size[1..]).await?;
    let size = i32::from_be_bytes(size);
    if size < 0 || (size as usize) < min || size as usize > max {
        return Err(FrameReadError::Size { size, min, max });
    }
    let mut frame = vec![0u8; size as usize];
    r.read_exact(&mut frame).await?;
    Ok(Bytes::from(frame))
}

/// Why a listener's connection stops reading requests.
#[derive(Debug, thiserror::Error)]
pub enum RequestReadError {
    /// No byte of a next request within the idle timeout (`connections.max.idle.ms`).
    #[error("no request for {} ms (connections.max.idle.ms)", .0.as_millis())]
    Idle(Duration),
    /// A size outside `0..=socket.request.max.bytes`: the connection is out of step.
    #[error("request {0} (socket.request.max.bytes)")]
    Size(#[source] FrameReadError),
    /// The socket failed, or closed in the middle of a frame.
    #[error("{0}")]
    Read(#[source] FrameReadError),
}

/// A listener's next request: the frame, or `None` once the peer closed the connection or
/// `stop` fired. With `idle`, the first byte of the request must arrive within it (time
/// spent on the rest of the frame does not count). A size outside `0..=max`
/// (`socket.request.max.bytes`), a failed read or the idle timeout is the reason to close the
/// connection.
pub async fn read_request<R: AsyncRead + Unpin>(
    r: &mut R,
    stop: &mut tokio::sync::watch::Receiver<bool>,
    max: usize,
    idle: Option<Duration>,
) -> Result<Option<Bytes>, RequestReadError> {
    let read = async {
        let first = match idle {
            Some(idle) => tokio::time::timeout(idle, read_first_byte(r))
                .await
                .map_err(|_| RequestReadError::Idle(idle))?,
            None => read_first_byte(r).await,
        };
        let frame = match first {
            Ok(first) => read_frame_from(first, r, 0, max).await,
            Err(e) => Err(e),
        };
        match frame {
            Ok(frame) => Ok(Some(frame)),
            Err(FrameReadError::Closed) => Ok(None),
            Err(e @ FrameReadError::Size { .. }) => Err(RequestReadError::Size(e)),
            Err(e) => Err(RequestReadError::Read(e)),
        }
    };
    tokio::select! {
        _ = stop.changed() => Ok(None),
        read = read => read,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn framed(body: &[u8]) -> Vec<u8> {
        let mut v = (body.len() as i32).to_be_bytes().to_vec();
        v.extend_from_slice(body);
        v
    }

    #[tokio::test]
    async fn frames_are_read_one_at_a_time_then_the_close_is_seen() {
        let mut bytes = framed(b"abc");
        bytes.extend(framed(b""));
        let mut r = bytes.as_slice();
        assert_eq!(&read_frame(&mut r, 0, 10).await.unwrap()[..], b"abc");
        assert_eq!(read_frame(&mut r, 0, 10).await.unwrap().len(), 0);
        assert!(matches!(
            read_frame(&mut r, 0, 10).await,
            Err(FrameReadError::Closed)
        ));
    }

    #[tokio::test]
    async fn sizes_outside_the_bounds_are_refused_before_any_allocation() {
        for (prefix, min, max) in [(-1i32, 0, 10), (11, 0, 10), (3, 4, 10), (i32::MAX, 0, 10)] {
            let bytes = prefix.to_be_bytes();
            let mut r = &bytes[..];
            assert!(
                matches!(read_frame(&mut r, min, max).await, Err(FrameReadError::Size { size, .. }) if size == prefix),
                "{prefix} in {min}..={max}"
            );
        }
    }

    #[tokio::test]
    async fn a_frame_cut_short_is_an_io_error_not_a_close() {
        let bytes = framed(b"abcdef");
        let mut r = &bytes[..7];
        assert!(matches!(
            read_frame(&mut r, 0, 10).await,
            Err(FrameReadError::Io(_))
        ));
    }

    /// On tokio's paused clock: the timers fire in order without real waiting.
    #[tokio::test(start_paused = true)]
    async fn an_idle_connection_times_out_before_the_first_byte_only() {
        let (_stop_tx, mut stop) = tokio::sync::watch::channel(false);
        let idle = Some(Duration::from_millis(50));
        let (mut client, mut server) = tokio::io::duplex(64);
        let e = read_request(&mut server, &mut stop, 10, idle)
            .await
            .unwrap_err();
        assert!(matches!(e, RequestReadError::Idle(_)), "{e}");
        // A frame begun in time may take longer than the timeout to finish.
        use tokio::io::AsyncWriteExt;
        client.write_all(&[0]).await.unwrap();
        let rest = tokio::spawn(async move {
            // Longer than the idle timeout, on the paused clock.
            tokio::time::sleep(Duration::from_millis(120)).await;
            client.write_all(&[0, 0, 2, b'o', b'k']).await.unwrap();
            client
        });
        let frame = read_request(&mut server, &mut stop, 10, idle)
            .await
            .unwrap();
        assert_eq!(frame.as_deref(), Some(&b"ok"[..]));
        drop(rest.await.unwrap());
        assert!(read_request(&mut server, &mut stop, 10, idle)
            .await
            .unwrap()
            .is_none());
    }
}
