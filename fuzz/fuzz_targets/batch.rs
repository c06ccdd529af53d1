//! A `Batch` payload through the receive path: decode, absorb (gather/allgather/regroup) and
//! write (reduce root). Must never panic.
#![no_main]

use harp::collective::framing::decode_inline_batch;
use harp::collective::{absorb, write_pieces};
use harp::data::{Array, Combiner, DType, Table};
use harp::pool::Pool;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|body: &[u8]| {
    let pool = Pool::default();
    let mut t = Table::new(Combiner::Sum);
    t.add(1, Array::zeros(&pool, DType::F64, 4)).unwrap();
    if let Ok(pieces) = decode_inline_batch(&pool, pool.copy_of(body)) {
        let _ = absorb(&mut t, &pool, pieces);
    }
    if let Ok(pieces) = decode_inline_batch(&pool, pool.copy_of(body)) {
        let _ = write_pieces(&mut Table::new(Combiner::Sum), &pool, pieces);
    }
});
