//! Frame headers: the 56-byte header of the authentication frames (the input's first 56 bytes)
//! and the compact header of every later frame (the whole input) decode or fail, and what
//! decodes encodes back to the same bytes.
#![no_main]

use harp::wire::{Header, COMPACT_MAX, HEADER_LEN};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Some(b) = data.get(..HEADER_LEN) {
        let b: [u8; HEADER_LEN] = b.try_into().unwrap();
        if let Ok(h) = Header::decode(&b) {
            let mut again = h.encode();
            again[9..12].copy_from_slice(&b[9..12]);
            assert_eq!(again, b);
        }
    }
    if let Ok(h) = Header::decode_compact(data, 1, 2) {
        let mut again = [0u8; COMPACT_MAX];
        let n = h.encode_compact(&mut again);
        assert_eq!(&again[..n], data);
    }
});
