//! `buffer.memory`: the bytes all batches waiting to be sent may hold (Java's BufferPool). An
//! append that needs a new batch waits here for up to `max.block.ms` while the pool is full.
//!
//! Waiters are served in arrival order, as Java's `waiters` deque serves them: memory freed goes
//! to the first waiter, which gathers it until it has all it asked for, and a later allocation
//! never overtakes an earlier one that is still waiting, however small it is. A waiter that gives
//! up (timeout, close, or its future dropped) leaves the queue and hands what it had gathered to
//! the next.

use std::collections::{HashSet, VecDeque};
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

/// One blocked allocation, in arrival order.
#[derive(Debug)]
struct Waiter {
    id: u64,
    size: u64,
    /// Bytes already set aside for it (Java's `accumulated`).
    gathered: u64,
}

#[derive(Debug)]
struct State {
    /// Bytes neither allocated nor set aside for a waiter. While anyone waits this is 0: all
    /// free memory has gone to the first waiter.
    available: u64,
    waiters: VecDeque<Waiter>,
    /// Waiters that gathered all they asked for, not yet back from their wait.
    granted: HashSet<u64>,
    next_id: u64,
    closed: bool,
}

impl State {
    /// Gives the free memory to the waiters from the first on; returns whether one is served.
    fn serve_waiters(&mut self) -> bool {
        let mut served = false;
        while let Some(first) = self.waiters.front_mut() {
            let got = (first.size - first.gathered).min(self.available);
            first.gathered += got;
            self.available -= got;
            if first.gathered < first.size {
                break;
            }
            let id = first.id;
            self.waiters.pop_front();
            self.granted.insert(id);
            served = true;
        }
        served
    }

    /// A waiter of `size` bytes gives up: it leaves the queue, and what it was given or had
    /// gathered goes to the waiters behind it. Returns whether one of them is served.
    fn leave(&mut self, id: u64, size: u64) -> bool {
        if self.granted.remove(&id) {
            // Served just as it gave up.
            self.available += size;
        } else if let Some(at) = self.waiters.iter().position(|w| w.id == id) {
            if let Some(w) = self.waiters.remove(at) {
                self.available += w.gathered;
            }
        }
        self.serve_waiters()
    }
}

pub struct BufferPool {
    total: u64,
    state: Mutex<State>,
    /// Wakes the waiters when one is served or the pool closes; each checks its own turn.
    changed: Notify,
}

/// A waiter's place in the queue, given up on drop unless the allocation succeeded (so a
/// timed-out, closed or abandoned wait blocks no one behind it).
struct Place<'a> {
    pool: &'a BufferPool,
    id: u64,
    size: u64,
    served: bool,
}

impl Drop for Place<'_> {
    fn drop(&mut self) {
        if self.served {
            return;
        }
        let woke = self.pool.state.lock().leave(self.id, self.size);
        if woke {
            self.pool.changed.notify_waiters();
        }
    }
}

impl BufferPool {
    pub fn new(total: u64) -> BufferPool {
        BufferPool {
            total,
            state: Mutex::new(State {
                available: total,
                waiters: VecDeque::new(),
                granted: HashSet::new(),
                next_id: 0,
                closed: false,
            }),
            changed: Notify::new(),
        }
    }

    /// Takes `size` bytes, waiting up to `max_block` behind the allocations that came first.
    pub async fn allocate(&self, size: u64, max_block: Duration) -> Result<u64, AllocateError> {
        if size > self.total {
            return Err(AllocateError::TooLarge {
                size,
                total: self.total,
            });
        }
        let deadline = tokio::time::Instant::now() + max_block;
        let id = {
            let mut s = self.state.lock();
            if s.closed {
                return Err(AllocateError::Closed);
            }
            if s.waiters.is_empty() && s.available >= size {
                s.available -= size;
                return Ok(size);
            }
            let id = s.next_id;
            s.next_id += 1;
            s.waiters.push_back(Waiter {
                id,
                size,
                gathered: 0,
            });
            // First in line: it takes what is free now and waits for the rest.
            s.serve_waiters();
            id
        };
        let mut place = Place {
            pool: self,
            id,
            size,
            served: false,
        };
        loop {
            let changed = self.changed.notified();
            tokio::pin!(changed);
            // Registered before the check, so that a wake-up in between is not lost.
            changed.as_mut().enable();
            {
                let mut s = self.state.lock();
                if s.granted.remove(&id) {
                    place.served = true;
                    return Ok(size);
                }
                if s.closed {
                    return Err(AllocateError::Closed);
                }
            }
            if tokio::time::timeout_at(deadline, changed).await.is_err() {
                if self.state.lock().granted.remove(&id) {
                    place.served = true;
                    return Ok(size);
                }
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
        self.changed.notify_waiters();
    }

    /// Gives `size` bytes back; they go to the first waiter.
    pub fn deallocate(&self, size: u64) {
        let woke = {
            let mut s = self.state.lock();
            s.available = (s.available + size).min(self.total);
            s.serve_waiters()
        };
        if woke {
            self.changed.notify_waiters();
        }
    }

    /// Appends waiting for memory: while any wait, every batch is sendable (Java's `exhausted`).
    pub fn queued(&self) -> usize {
        self.state.lock().waiters.len()
    }

    /// Bytes free and not set aside for a waiter.
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

    /// Spawns `allocate(size, max_block)` and waits until it is queued behind `ahead` others.
    async fn blocked(
        pool: &Arc<BufferPool>,
        size: u64,
        max_block: Duration,
        ahead: usize,
    ) -> tokio::task::JoinHandle<Result<u64, AllocateError>> {
        let p = pool.clone();
        let task = tokio::spawn(async move { p.allocate(size, max_block).await });
        while pool.queued() <= ahead {
            tokio::task::yield_now().await;
        }
        task
    }

    /// Lets every other task run a few times.
    async fn settle() {
        for _ in 0..10 {
            tokio::task::yield_now().await;
        }
    }

    #[tokio::test]
    async fn an_earlier_big_waiter_is_served_before_a_later_small_one_even_when_small_memory_frees_first(
    ) {
        const KB: u64 = 1024;
        let pool = Arc::new(BufferPool::new(10 * KB));
        pool.allocate(9 * KB, Duration::ZERO).await.unwrap();
        pool.allocate(KB, Duration::ZERO).await.unwrap();
        let big = blocked(&pool, 10 * KB, Duration::from_secs(30), 0).await;
        let small = blocked(&pool, KB, Duration::from_secs(30), 1).await;
        // 1 KB frees first: it goes to the 10 KB waiter at the head, not to the 1 KB one.
        pool.deallocate(KB);
        settle().await;
        assert!(!small.is_finished(), "the later 1 KB allocation overtook");
        assert_eq!(pool.queued(), 2);
        assert_eq!(pool.available(), 0, "the head waiter gathers what is freed");
        // A new small allocation queues behind both, even with nothing free to fight over.
        assert_eq!(
            pool.allocate(1, Duration::ZERO).await,
            Err(AllocateError::Exhausted {
                size: 1,
                waited_ms: 0
            })
        );
        pool.deallocate(9 * KB);
        assert_eq!(big.await.unwrap(), Ok(10 * KB));
        settle().await;
        assert!(
            !small.is_finished(),
            "nothing is left for the 1 KB waiter yet"
        );
        pool.deallocate(10 * KB);
        assert_eq!(small.await.unwrap(), Ok(KB));
        assert_eq!((pool.queued(), pool.available()), (0, 9 * KB));
    }

    #[tokio::test]
    async fn a_timed_out_waiter_leaves_the_queue_and_does_not_block_the_next() {
        // BufferPoolTest.testCleanupMemoryAvailabilityWaiterOnBlockTimeout, and what the waiter
        // had gathered goes on to the next one in line.
        let pool = Arc::new(BufferPool::new(100));
        pool.allocate(90, Duration::ZERO).await.unwrap();
        pool.allocate(10, Duration::ZERO).await.unwrap();
        let first = blocked(&pool, 100, Duration::from_millis(50), 0).await;
        let next = blocked(&pool, 10, Duration::from_secs(30), 1).await;
        pool.deallocate(10);
        settle().await;
        assert!(!next.is_finished(), "the next waits behind the first");
        assert_eq!(pool.available(), 0, "gathered by the first waiter");
        assert_eq!(
            first.await.unwrap(),
            Err(AllocateError::Exhausted {
                size: 100,
                waited_ms: 50
            })
        );
        let served = tokio::time::timeout(Duration::from_secs(10), next).await;
        assert_eq!(
            served.expect("not left blocked").unwrap(),
            Ok(10),
            "served from what the first gave back"
        );
        assert_eq!((pool.queued(), pool.available()), (0, 0));
    }

    #[tokio::test]
    async fn an_abandoned_allocation_gives_back_what_it_gathered() {
        let pool = Arc::new(BufferPool::new(100));
        pool.allocate(100, Duration::ZERO).await.unwrap();
        let gone = blocked(&pool, 60, Duration::from_secs(30), 0).await;
        pool.deallocate(40);
        settle().await;
        assert_eq!(pool.available(), 0);
        gone.abort();
        assert!(gone.await.unwrap_err().is_cancelled());
        assert_eq!((pool.queued(), pool.available()), (0, 40));
        assert_eq!(pool.allocate(40, Duration::ZERO).await, Ok(40));
    }
}
