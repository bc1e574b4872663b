//! `buffer.memory`: the bytes all batches waiting to be sent may hold. An append that needs a new
//! batch waits here for up to `max.block.ms` while the pool is full (Java's BufferPool).

use std::time::Duration;

use parking_lot::Mutex;
use tokio::sync::Notify;

/// Why memory for a new batch could not be had.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AllocateError {
    /// The batch alone is bigger than `buffer.memory`.
    #[error("the record is {size} bytes when serialized, larger than the total memory buffer configured with buffer.memory ({total})")]
    TooLarge { size: u64, total: u64 },
    /// The pool stayed full for `max.block.ms`.
    #[error(
        "failed to allocate {size} bytes within the configured max blocking time {waited_ms} ms"
    )]
    Exhausted { size: u64, waited_ms: u64 },
    /// The producer closed while the append waited.
    #[error("producer closed while allocating memory")]
    Closed,
}

#[derive(Debug)]
struct State {
    available: u64,
    waiters: usize,
    closed: bool,
}

pub struct BufferPool {
    total: u64,
    state: Mutex<State>,
    freed: Notify,
}

impl BufferPool {
    pub fn new(total: u64) -> BufferPool {
        BufferPool {
            total,
            state: Mutex::new(State {
                available: total,
                waiters: 0,
                closed: false,
            }),
            freed: Notify::new(),
        }
    }

    /// Takes `size` bytes, waiting up to `max_block` for other batches to be sent.
    pub async fn allocate(&self, size: u64, max_block: Duration) -> Result<u64, AllocateError> {
        if size > self.total {
            return Err(AllocateError::TooLarge {
                size,
                total: self.total,
            });
        }
        let deadline = tokio::time::Instant::now() + max_block;
        let mut waiting = false;
        // Counted as a waiter from the first wait until it leaves, so that `queued` does not
        // flicker between a wake-up and the next wait.
        let leave = |s: &mut State, waiting: bool| {
            if waiting {
                s.waiters -= 1;
            }
        };
        loop {
            let notified = self.freed.notified();
            {
                let mut s = self.state.lock();
                if s.closed {
                    leave(&mut s, waiting);
                    return Err(AllocateError::Closed);
                }
                if s.available >= size {
                    s.available -= size;
                    leave(&mut s, waiting);
                    return Ok(size);
                }
                if !waiting {
                    s.waiters += 1;
                    waiting = true;
                }
            }
            if tokio::time::timeout_at(deadline, notified).await.is_err() {
                leave(&mut self.state.lock(), waiting);
                return Err(AllocateError::Exhausted {
                    size,
                    waited_ms: max_block.as_millis() as u64,
                });
            }
        }
    }

    /// Fails every waiting and later allocation.
    pub fn close(&self) {
        self.state.lock().closed = true;
        self.freed.notify_waiters();
    }

    /// Gives `size` bytes back and wakes the appends waiting for memory.
    pub fn deallocate(&self, size: u64) {
        {
            let mut s = self.state.lock();
            s.available = (s.available + size).min(self.total);
        }
        self.freed.notify_waiters();
    }

    /// Appends waiting for memory: while any wait, every batch is sendable (Java's `exhausted`).
    pub fn queued(&self) -> usize {
        self.state.lock().waiters
    }

    pub fn available(&self) -> u64 {
        self.state.lock().available
    }

    pub fn total(&self) -> u64 {
        self.total
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[tokio::test]
    async fn an_allocation_waits_for_freed_memory_and_gives_up_after_max_block() {
        let pool = Arc::new(BufferPool::new(100));
        pool.allocate(80, Duration::ZERO).await.unwrap();
        assert_eq!(
            pool.allocate(30, Duration::from_millis(50)).await,
            Err(AllocateError::Exhausted {
                size: 30,
                waited_ms: 50
            })
        );
        let p = pool.clone();
        let waiter = tokio::spawn(async move { p.allocate(30, Duration::from_secs(5)).await });
        while pool.queued() == 0 {
            tokio::task::yield_now().await;
        }
        pool.deallocate(80);
        assert_eq!(waiter.await.unwrap(), Ok(30));
        assert_eq!(pool.available(), 70);
        assert!(matches!(
            pool.allocate(101, Duration::ZERO).await,
            Err(AllocateError::TooLarge { .. })
        ));
        // Closing fails a waiting append at once, not after max.block.ms.
        let p = pool.clone();
        let blocked = tokio::spawn(async move { p.allocate(90, Duration::from_secs(30)).await });
        while pool.queued() == 0 {
            tokio::task::yield_now().await;
        }
        pool.close();
        assert_eq!(blocked.await.unwrap(), Err(AllocateError::Closed));
        assert_eq!(pool.queued(), 0);
    }
}
