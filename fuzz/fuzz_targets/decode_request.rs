//! Request decoding as the broker does it, on arbitrary frames (without the 4-byte size prefix).
//! Any input may be refused with an error; none may panic, abort or exhaust memory.
#![no_main]

use bytes::Bytes;
use libfuzzer_sys::fuzz_target;

/// The broker's allocator, so a claimed length is handled as the broker handles it.
#[global_allocator]
static ALLOC: evenkeel::alloc::EvenkeelAlloc = evenkeel::alloc::EvenkeelAlloc;

fuzz_target!(|data: &[u8]| {
    let _ = evenkeel::protocol::decode_request(Bytes::copy_from_slice(data));
});
