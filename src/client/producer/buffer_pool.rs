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
}

#[derive(Debug)]
struct State {
    available: u64,
    waiters: usize,
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
        loop {
            let notified = self.freed.notified();
            {
                let mut s = self.state.lock();
                if s.available >= size {
                    s.available -= size;
                    return Ok(size);
                }
                s.waiters += 1;
            }
            let timed_out = tokio::time::timeout_at(deadline, notified).await.is_err();
            self.state.lock().waiters -= 1;
            if timed_out {
                return Err(AllocateError::Exhausted {
                    size,
                    waited_ms: max_block.as_millis() as u64,
                });
            }
        }
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
    }
}
