//! Reproducible test data: Gaussian blobs and uniform initial centroids.
//!
//! The generator uses the engine's own PRNG ([`crate::util::Rng`]: xoshiro256** seeded by
//! splitmix64, normals by Box–Muller), so the output for a given seed never changes with crate
//! versions. Points are generated in fixed chunks of [`GEN_CHUNK`] points, each with its own
//! derived seed, so the output is also the same whatever the number of threads or of output
//! files.

use rayon::prelude::*;

use super::input::{format_centroids, Format, Points};
use crate::error::{Error, Result};
use crate::storage::Storage;
use crate::util::{memory, splitmix64, Rng};

/// Points per independently seeded generation chunk.
pub const GEN_CHUNK: usize = 8192;
/// Half-width of the box the blob centres and the initial centroids are drawn from.
const BOX: f64 = 10.0;
/// Standard deviation of each blob.
const SD: f64 = 1.0;

const TAG_CENTRES: u64 = 0x63656e7472657300; // "centres"
const TAG_POINTS: u64 = 0x706f696e74730000; // "points"
const TAG_INIT: u64 = 0x696e697400000000; // "init"

/// A seed for stream `idx` of purpose `tag` derived from the user's `seed`.
fn derive(seed: u64, tag: u64, idx: u64) -> u64 {
    splitmix64(splitmix64(seed ^ tag).wrapping_add(idx))
}

/// Appends `v` rounded to 6 decimals, in the shortest form that reads back as the same f64
/// (`-1.5`, `3`, `0.000001`). Returns the value written.
fn push_fixed6(out: &mut Vec<u8>, v: f64) -> f64 {
    let q = (v * 1e6).round() as i64;
    if q < 0 {
        out.push(b'-');
    }
    let a = q.unsigned_abs();
    let (int, frac) = (a / 1_000_000, a % 1_000_000);
    let mut digits = [0u8; 20];
    let mut i = digits.len();
    let mut x = int;
    loop {
        i -= 1;
        digits[i] = b'0' + (x % 10) as u8;
        x /= 10;
        if x == 0 {
            break;
        }
    }
    out.extend_from_slice(&digits[i..]);
    if frac != 0 {
        let mut f = [0u8; 6];
        let mut x = frac;
        for d in f.iter_mut().rev() {
            *d = b'0' + (x % 10) as u8;
            x /= 10;
        }
        let len = 6 - f.iter().rev().take_while(|&&d| d == b'0').count();
        out.push(b'.');
        out.extend_from_slice(&f[..len]);
    }
    q as f64 / 1e6
}

/// The blob centres for `seed`: `clusters × dim`, uniform in [-10, 10]; an error, not an
/// abort, when their memory cannot be had.
fn centres(seed: u64, clusters: usize, dim: usize) -> Result<Vec<f64>> {
    let n = clusters.checked_mul(dim).ok_or_else(|| {
        Error::config(format!(
            "{clusters} blob centres of dimension {dim}: too many values"
        ))
    })?;
    let mut rng = Rng::new(derive(seed, TAG_CENTRES, 0));
    let mut c =
        memory::try_with_capacity(&format!("{clusters} blob centres of dimension {dim}"), n)?;
    c.extend((0..n).map(|_| rng.uniform(-BOX, BOX)));
    Ok(c)
}

/// Generates points `[from, to)` of the global sequence, all inside chunk `from / GEN_CHUNK`,
/// and appends them to `out` in `format`.
fn gen_piece(
    seed: u64,
    centres: &[f64],
    dim: usize,
    from: usize,
    to: usize,
    format: Format,
    out: &mut Vec<u8>,
) -> Result<()> {
    let chunk = from / GEN_CHUNK;
    let mut rng = Rng::new(derive(seed, TAG_POINTS, chunk as u64));
    let clusters = centres.len() / dim;
    let mut row = memory::try_with_capacity(&format!("a point of dimension {dim}"), dim)?;
    row.resize(dim, 0.0);
    for i in chunk * GEN_CHUNK..to {
        let c = rng.below(clusters);
        for (j, v) in row.iter_mut().enumerate() {
            *v = centres[c * dim + j] + SD * rng.normal();
        }
        if i < from {
            continue; // skipped to reach the start of this file inside the chunk
        }
        match format {
            Format::Text => {
                for (j, &v) in row.iter().enumerate() {
                    if j > 0 {
                        out.push(b' ');
                    }
                    push_fixed6(out, v);
                }
                out.push(b'\n');
            }
            Format::F32 => {
                for &v in &row {
                    out.extend_from_slice(&(v as f32).to_le_bytes());
                }
            }
        }
    }
    Ok(())
}

/// The most bytes one generated value takes: text `-dd.dddddd` and a separator, or an f32.
fn value_bytes(format: Format) -> u128 {
    match format {
        Format::Text => 12,
        Format::F32 => 4,
    }
}

/// The memory [`generate_points`] needs at most: the blob centres, one row per thread, and one
/// file's bytes twice (its pieces, then the file written in one piece). None on overflow.
fn points_memory(
    n: usize,
    dim: usize,
    files: usize,
    clusters: usize,
    format: Format,
) -> Option<u128> {
    let (n, dim, files, clusters) = (n as u128, dim as u128, files as u128, clusters as u128);
    let centres = clusters.checked_mul(dim)?.checked_mul(8)?;
    let rows = (rayon::current_num_threads() as u128)
        .checked_mul(dim)?
        .checked_mul(8)?;
    let file = n
        .div_ceil(files)
        .checked_mul(dim)?
        .checked_mul(value_bytes(format))?
        .checked_mul(2)?;
    centres.checked_add(rows)?.checked_add(file)
}

/// Fails with a clear error, before anything is generated, when [`generate_points`] with these
/// sizes cannot fit in this host's memory (or its sizes overflow).
pub fn check_points_memory(
    n: usize,
    dim: usize,
    files: usize,
    clusters: usize,
    format: Format,
) -> Result<()> {
    memory::check_fits(
        &format!(
            "{n} points of dimension {dim} in {files} {format} file(s) from {clusters} blobs \
             (the blob centres, clusters x dim f64, and one whole file in memory; more --files \
             make each file smaller)"
        ),
        points_memory(n, dim, files.max(1), clusters, format),
    )
}

/// Fails with a clear error when [`generate_init`] with these sizes cannot fit in memory.
pub fn check_init_memory(k: usize, dim: usize) -> Result<()> {
    // The values (8 bytes) and their text (at most 25 bytes each).
    let need = (k as u128)
        .checked_mul(dim as u128)
        .and_then(|v| v.checked_mul(8 + 25));
    memory::check_fits(&format!("{k} initial centroids of dimension {dim}"), need)
}

/// Writes `n` points of dimension `dim`, drawn from a mixture of `clusters` Gaussian blobs
/// (centres uniform in [-10, 10]^dim, standard deviation 1), into
/// `out_dir/points/part-00000.txt` … (`.f32` for [`Format::F32`]), split evenly into `files`
/// files. Text values are rounded to 6 decimals; the file is the truth. The same seed always
/// gives the same points, whatever `files` and the number of threads. Sizes that cannot fit in
/// memory are refused first ([`check_points_memory`]).
#[allow(clippy::too_many_arguments)]
pub fn generate_points(
    storage: &dyn Storage,
    out_dir: &str,
    n: usize,
    dim: usize,
    seed: u64,
    files: usize,
    format: Format,
    clusters: usize,
) -> Result<()> {
    if dim == 0 || files == 0 || clusters == 0 {
        return Err(Error::config(format!(
            "generate: dim ({dim}), files ({files}) and clusters ({clusters}) must be at least 1"
        )));
    }
    check_points_memory(n, dim, files, clusters, format)?;
    let centres = centres(seed, clusters, dim)?;
    let dir = format!("{}/points", out_dir.trim_end_matches('/'));
    storage.create_dir_all(&dir)?;
    for f in 0..files {
        let cut = |f: usize| (n as u128 * f as u128 / files as u128) as usize;
        let (from, to) = (cut(f), cut(f + 1));
        // Pieces: [from, to) cut at chunk boundaries.
        let mut cuts = vec![from];
        let mut c = (from / GEN_CHUNK + 1) * GEN_CHUNK;
        while c < to {
            cuts.push(c);
            c += GEN_CHUNK;
        }
        cuts.push(to);
        // Every buffer is allocated fallibly: a size that passed the memory check can still
        // fail to be allocated when other processes took the memory meanwhile.
        let what = |bytes: usize| format!("{bytes} bytes of points for file {f}");
        let pieces: Vec<Vec<u8>> = cuts
            .par_windows(2)
            .map(|w| {
                let len = (w[1] - w[0])
                    .checked_mul(dim)
                    .and_then(|v| v.checked_mul(value_bytes(format) as usize))
                    .ok_or_else(|| {
                        Error::config(format!("points {}..{}: too large", w[0], w[1]))
                    })?;
                let mut out = memory::try_with_capacity(&what(len), len)?;
                if w[0] < w[1] {
                    gen_piece(seed, &centres, dim, w[0], w[1], format, &mut out)?;
                }
                Ok(out)
            })
            .collect::<Result<_>>()?;
        let total = pieces.iter().map(Vec::len).sum();
        let mut bytes = memory::try_with_capacity(&what(total), total)?;
        for p in pieces {
            bytes.extend_from_slice(&p);
        }
        storage.write_all(&format!("{dir}/part-{f:05}.{}", format.extension()), &bytes)?;
    }
    Ok(())
}

/// Writes `k` initial centroids of dimension `dim`, uniform in [-10, 10]^dim, as text (one per
/// line, exact round trip) to `out_path`.
pub fn generate_init(
    storage: &dyn Storage,
    out_path: &str,
    k: usize,
    dim: usize,
    seed: u64,
) -> Result<()> {
    if k == 0 || dim == 0 {
        return Err(Error::config(format!(
            "generate: k ({k}) and dim ({dim}) must be at least 1"
        )));
    }
    check_init_memory(k, dim)?;
    let mut rng = Rng::new(derive(seed, TAG_INIT, 0));
    let n = k
        .checked_mul(dim)
        .ok_or_else(|| Error::config(format!("{k} centroids of dimension {dim}: too many")))?;
    let mut data =
        memory::try_with_capacity(&format!("{k} initial centroids of dimension {dim}"), n)?;
    data.extend((0..n).map(|_| rng.uniform(-BOX, BOX)));
    let c = Points { n: k, dim, data };
    storage.write_all(out_path, format_centroids(&c).as_bytes())
}

/// `n` points of the same blob mixture as [`generate_points`], in memory and unrounded.
pub fn blobs_in_memory(n: usize, dim: usize, clusters: usize, seed: u64) -> Vec<f64> {
    // A benchmark's own sizes (`bench_kernel`), not input: an allocation that fails aborts.
    let centres = centres(seed, clusters.max(1), dim).expect("the blob centres fit in memory");
    let chunks: Vec<usize> = (0..n.div_ceil(GEN_CHUNK)).collect();
    let parts: Vec<Vec<f64>> = chunks
        .par_iter()
        .map(|&c| {
            let mut rng = Rng::new(derive(seed, TAG_POINTS, c as u64));
            let m = GEN_CHUNK.min(n - c * GEN_CHUNK);
            let mut out = Vec::with_capacity(m * dim);
            for _ in 0..m {
                let k = rng.below(centres.len() / dim);
                for j in 0..dim {
                    out.push(centres[k * dim + j] + SD * rng.normal());
                }
            }
            out
        })
        .collect();
    parts.concat()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::apps::kmeans::input::{load_share, read_centroids};
    use crate::storage::LocalStorage;

    #[test]
    fn fixed6_is_exact_and_short() {
        for &(v, s) in &[
            (1.5, "1.5"),
            (-0.0000004, "0"),
            (-2.0, "-2"),
            (0.000001, "0.000001"),
            (-12.3456789, "-12.345679"),
            (9.9999999, "10"),
        ] {
            let mut out = Vec::new();
            let w = push_fixed6(&mut out, v);
            assert_eq!(std::str::from_utf8(&out).unwrap(), s);
            assert_eq!(s.parse::<f64>().unwrap(), w);
            assert_eq!(format!("{w}"), s, "same as the shortest round-trip form");
        }
        let mut r = Rng::new(3);
        for _ in 0..100_000 {
            let v = r.uniform(-30.0, 30.0);
            let mut out = Vec::new();
            let w = push_fixed6(&mut out, v);
            let s = std::str::from_utf8(&out).unwrap();
            assert_eq!(s.parse::<f64>().unwrap().to_bits(), w.to_bits());
            assert_eq!(format!("{w}"), s);
        }
    }

    #[test]
    fn generated_points_are_reproducible_and_readable() {
        let d = std::env::temp_dir().join(format!("harp-gen-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        let s = LocalStorage;
        let (n, dim) = (GEN_CHUNK + 1000, 3);
        let a = d.join("a");
        let b = d.join("b");
        generate_points(&s, a.to_str().unwrap(), n, dim, 9, 1, Format::Text, 4).unwrap();
        generate_points(&s, b.to_str().unwrap(), n, dim, 9, 3, Format::Text, 4).unwrap();
        let one = s
            .read_all(a.join("points/part-00000.txt").to_str().unwrap())
            .unwrap();
        let mut three = Vec::new();
        for f in 0..3 {
            three.extend(
                s.read_all(b.join(format!("points/part-{f:05}.txt")).to_str().unwrap())
                    .unwrap(),
            );
        }
        assert_eq!(one, three, "the number of files does not change the points");
        let p = load_share(
            &s,
            b.join("points").to_str().unwrap(),
            Format::Text,
            0,
            dim,
            0,
            1,
        )
        .unwrap();
        assert_eq!(p.n, n);
        // Same points as in memory, up to the 6-decimal rounding.
        let mem = blobs_in_memory(n, dim, 4, 9);
        assert!(p
            .data
            .iter()
            .zip(&mem)
            .all(|(x, y)| (x - y).abs() <= 5e-7 + 1e-15));
        // A different seed gives different points.
        generate_points(&s, a.to_str().unwrap(), 10, dim, 10, 1, Format::Text, 4).unwrap();
        let other = s
            .read_all(a.join("points/part-00000.txt").to_str().unwrap())
            .unwrap();
        assert_ne!(&one[..other.len()], &other[..]);

        // f32: same values, as f32.
        let a = d.join("c");
        generate_points(&s, a.to_str().unwrap(), n, dim, 9, 2, Format::F32, 4).unwrap();
        let q = load_share(
            &s,
            a.join("points").to_str().unwrap(),
            Format::F32,
            0,
            dim,
            0,
            1,
        )
        .unwrap();
        assert_eq!(q.n, n);
        assert!(q
            .data
            .iter()
            .zip(&mem)
            .all(|(x, y)| *x == (*y as f32) as f64));

        let init = d.join("init.txt");
        generate_init(&s, init.to_str().unwrap(), 5, dim, 1).unwrap();
        let c = read_centroids(&s, init.to_str().unwrap()).unwrap();
        assert_eq!((c.n, c.dim), (5, dim));
        assert!(c.data.iter().all(|v| (-10.0..10.0).contains(v)));
        std::fs::remove_dir_all(&d).unwrap();
    }

    /// Sizes that cannot fit in memory (or overflow) are refused before anything is written,
    /// with both figures; ordinary sizes pass.
    #[test]
    fn sizes_beyond_memory_are_refused_before_writing() {
        let d = std::env::temp_dir().join(format!("harp-gen-mem-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        let s = LocalStorage;
        let ds = d.to_str().unwrap();
        for (n, dim, files, clusters) in [
            (1_000_000, 100_000_000, 4, 16), // 600 TB: no host has it
            (usize::MAX, usize::MAX, 1, usize::MAX),
            (usize::MAX, 3, 1, 16),
            (10, 1 << 62, 1, 16),
        ] {
            let e = generate_points(&s, ds, n, dim, 1, files, Format::Text, clusters)
                .unwrap_err()
                .to_string();
            assert!(
                e.contains(&format!("{n} points of dimension {dim}"))
                    && (e.contains("available")
                        || e.contains("overflows")
                        || e.contains("address")),
                "{e}"
            );
        }
        assert!(!d.exists(), "nothing is written");
        let e = generate_init(&s, ds, usize::MAX, 2, 1)
            .unwrap_err()
            .to_string();
        assert!(e.contains("initial centroids"), "{e}");
        let e = check_init_memory(1 << 20, 1 << 20).unwrap_err().to_string();
        assert!(
            e.contains("1048576 initial centroids of dimension 1048576: 33.0 TiB"),
            "{e}"
        );
        check_points_memory(1_000_000, 100, 4, 16, Format::F32).unwrap();
        assert!(!d.exists());
    }
}
