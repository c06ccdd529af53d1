//! The 56-byte frame header: decodes or fails, and what decodes encodes back.
#![no_main]

use harp::wire::{Header, HEADER_LEN};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Some(b) = data.get(..HEADER_LEN) else { return };
    let b: [u8; HEADER_LEN] = b.try_into().unwrap();
    if let Ok(h) = Header::decode(&b) {
        let mut again = h.encode();
        again[9..12].copy_from_slice(&b[9..12]);
        assert_eq!(again, b);
    }
});
