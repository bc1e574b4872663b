//! Kafka's framing on a socket: every request and response is a 4-byte big-endian size and that
//! many bytes. The one frame reader of the broker's and the controller's listeners, the
//! quorum's network and our client; each says which sizes it accepts.

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
    let mut size = [0u8; 4];
    match r.read_exact(&mut size).await {
        Ok(_) => {}
        Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => {
            return Err(FrameReadError::Closed)
        }
        Err(e) => return Err(e.into()),
    }
    let size = i32::from_be_bytes(size);
    if size < 0 || (size as usize) < min || size as usize > max {
        return Err(FrameReadError::Size { size, min, max });
    }
    let mut frame = vec![0u8; size as usize];
    r.read_exact(&mut frame).await?;
    Ok(Bytes::from(frame))
}

/// A listener's next request: the frame, or `None` once the peer closed the connection or
/// `stop` fired. A size outside `0..=max` (`socket.request.max.bytes`) or a failed read is the
/// reason to close the connection.
pub async fn read_request<R: AsyncRead + Unpin>(
    r: &mut R,
    stop: &mut tokio::sync::watch::Receiver<bool>,
    max: usize,
) -> Result<Option<Bytes>, String> {
    tokio::select! {
        _ = stop.changed() => Ok(None),
        read = read_frame(r, 0, max) => match read {
            Ok(frame) => Ok(Some(frame)),
            Err(FrameReadError::Closed) => Ok(None),
            Err(e @ FrameReadError::Size { .. }) => {
                Err(format!("request {e} (socket.request.max.bytes)"))
            }
            Err(e) => Err(e.to_string()),
        }
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
}
