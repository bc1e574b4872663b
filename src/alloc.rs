//! The global allocator: mimalloc, except that very large requests get lazily backed,
//! unreserved memory, so that a hostile length prefix cannot abort the broker.
//!
//! mimalloc rather than glibc's malloc: the proxy's JSON path and the broker's request path
//! allocate per record, and glibc's malloc was a quarter of the proxy's CPU profile.
//!
//! The kafka-protocol decoder reserves `Vec::with_capacity(n)` for an array's claimed length
//! before it checks that the bytes are there. A 14-byte Metadata request claiming 2^31 topics
//! asks for ~150 GB; the system allocator refuses and Rust aborts the process. Kafka refuses such
//! a request and closes one connection. Here a request that large is mapped with
//! `MAP_NORESERVE`: nothing is touched, the decoder fails on the missing bytes, the mapping is
//! released, and only that connection closes. No legitimate allocation is that large (requests
//! are capped by `socket.request.max.bytes`, 100 MiB by default).

use std::alloc::{GlobalAlloc, Layout};

use mimalloc::MiMalloc;

/// Allocations from this size on are mapped lazily.
pub const LAZY_THRESHOLD: usize = 1 << 30;

pub struct EvenkeelAlloc;

fn page_aligned(layout: &Layout) -> bool {
    layout.align() <= 4096
}

unsafe impl GlobalAlloc for EvenkeelAlloc {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        if layout.size() >= LAZY_THRESHOLD && page_aligned(&layout) {
            // SAFETY: an anonymous private mapping; the result is checked.
            let p = unsafe {
                libc::mmap(
                    std::ptr::null_mut(),
                    layout.size(),
                    libc::PROT_READ | libc::PROT_WRITE,
                    libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
                    -1,
                    0,
                )
            };
            return if p == libc::MAP_FAILED {
                std::ptr::null_mut()
            } else {
                p as *mut u8
            };
        }
        // SAFETY: forwarded as given.
        unsafe { MiMalloc.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        if layout.size() >= LAZY_THRESHOLD && page_aligned(&layout) {
            // SAFETY: `ptr` came from the mmap above with this size.
            unsafe {
                libc::munmap(ptr as *mut libc::c_void, layout.size());
            }
            return;
        }
        // SAFETY: forwarded as given.
        unsafe { MiMalloc.dealloc(ptr, layout) }
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        if layout.size() >= LAZY_THRESHOLD && page_aligned(&layout) {
            // Fresh anonymous mappings are zero-filled.
            // SAFETY: as in `alloc`.
            return unsafe { self.alloc(layout) };
        }
        // SAFETY: forwarded as given.
        unsafe { MiMalloc.alloc_zeroed(layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        let lazy = |size: usize| size >= LAZY_THRESHOLD && page_aligned(&layout);
        if !lazy(layout.size()) && !lazy(new_size) {
            // SAFETY: forwarded as given.
            return unsafe { MiMalloc.realloc(ptr, layout, new_size) };
        }
        // SAFETY: the new layout has the old alignment and a size the caller vouches for.
        let new_layout = unsafe { Layout::from_size_align_unchecked(new_size, layout.align()) };
        // SAFETY: as in `alloc`.
        let new = unsafe { self.alloc(new_layout) };
        if !new.is_null() {
            // SAFETY: both blocks are valid for the smaller of the two sizes and do not overlap.
            unsafe {
                std::ptr::copy_nonoverlapping(ptr, new, layout.size().min(new_size));
                self.dealloc(ptr, layout);
            }
        }
        new
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_huge_lazy_allocation_succeeds_and_is_usable() {
        let a = EvenkeelAlloc;
        let layout = Layout::from_size_align(64 << 30, 8).unwrap();
        // SAFETY: a valid layout; the memory is written within bounds and freed once.
        unsafe {
            let p = a.alloc(layout);
            assert!(!p.is_null(), "64 GiB of unreserved address space");
            *p = 7;
            *p.add((64 << 30) - 1) = 9;
            assert_eq!(*p, 7);
            a.dealloc(p, layout);
        }
    }

    #[test]
    fn small_allocations_and_their_growth_go_to_mimalloc() {
        let a = EvenkeelAlloc;
        let layout = Layout::from_size_align(128, 16).unwrap();
        // SAFETY: as above.
        unsafe {
            let p = a.alloc(layout);
            assert!(!p.is_null());
            let q = a.realloc(p, layout, 256);
            assert!(!q.is_null());
            a.dealloc(q, Layout::from_size_align(256, 16).unwrap());
        }
    }
}
