//! Control messages and batch metadata (bincode values) from a peer: decode or fail.
#![no_main]

use harp::data::Layout;
use harp::wire::{self, BatchMeta};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let _ = wire::decode::<BatchMeta>(data);
    let _ = wire::decode::<Layout>(data);
    let _ = wire::decode::<(u32, Vec<u64>, String)>(data);
    let _ = wire::decode::<Vec<(u32, u64)>>(data);
});
