//! Benchmarks the K-means map kernel and prints one JSON line per thread count.
//!
//! Usage: `cargo run --release -p harp --example kernel_bench -- [n] [dim] [k] [threads,...] [reps]`
//! (defaults: 1000000 32 256 1,2 3).

use harp::apps::kmeans::bench::bench_kernel;

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let num = |i: usize, default: usize| -> usize {
        args.get(i).map_or(default, |s| {
            s.parse().unwrap_or_else(|_| panic!("bad number '{s}'"))
        })
    };
    let (n, dim, k) = (num(0, 1_000_000), num(1, 32), num(2, 256));
    let threads: Vec<usize> = args
        .get(3)
        .map_or("1,2", |s| s.as_str())
        .split(',')
        .map(|t| {
            t.parse()
                .unwrap_or_else(|_| panic!("bad thread count '{t}'"))
        })
        .collect();
    let reps = num(4, 3);
    for t in threads {
        let b = bench_kernel(n, dim, k, t, reps, 1);
        println!(
            "{}",
            serde_json::to_string(&b).expect("serialising the result")
        );
    }
}
