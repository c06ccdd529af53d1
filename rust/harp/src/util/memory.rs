//! How much memory this host has, so that a size given by a user (a benchmark message, a
//! generated data set, an input share) that cannot fit is refused with a clear error before
//! anything is allocated, instead of aborting on a failed allocation (or being killed by the
//! kernel once the pages are touched).

use std::sync::atomic::{AtomicUsize, Ordering};

use crate::error::{Error, Result};

/// The memory that can be allocated without swapping, in bytes: `MemAvailable` of
/// `/proc/meminfo` (Linux). None where that is not known.
pub fn available() -> Option<u64> {
    let text = std::fs::read_to_string("/proc/meminfo").ok()?;
    meminfo_field(&text, "MemAvailable")
}

/// The value of `field` (written in kB) of a `/proc/meminfo` text, in bytes.
fn meminfo_field(text: &str, field: &str) -> Option<u64> {
    text.lines().find_map(|l| {
        let rest = l.strip_prefix(field)?.strip_prefix(':')?;
        let kb: u64 = rest.trim().trim_end_matches("kB").trim().parse().ok()?;
        kb.checked_mul(1024)
    })
}

/// `n` bytes in the largest binary unit that keeps at least 1 (`1.5 GiB`).
pub fn human(n: u128) -> String {
    const UNITS: [&str; 7] = ["bytes", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"];
    let mut v = n as f64;
    let mut u = 0;
    while v >= 1024.0 && u + 1 < UNITS.len() {
        v /= 1024.0;
        u += 1;
    }
    if u == 0 {
        format!("{n} bytes")
    } else {
        format!("{v:.1} {}", UNITS[u])
    }
}

/// Fails unless `need` bytes (None: more than 2^128, an overflowed size) fit in `available`
/// bytes (None: unknown, then only sizes an allocation can never have, above `isize::MAX`, are
/// refused). `what` says what needs the memory, e.g. "--bytes 100g: each worker's tables".
pub fn check_fits_in(what: &str, need: Option<u128>, available: Option<u64>) -> Result<()> {
    let Some(need) = need else {
        return Err(Error::config(format!(
            "{what}: more memory than any computer has (the size overflows)"
        )));
    };
    if need > isize::MAX as u128 {
        return Err(Error::config(format!(
            "{what}: {} of memory, more than a process can address",
            human(need)
        )));
    }
    match available {
        Some(avail) if need > avail as u128 => Err(Error::config(format!(
            "{what}: {} of memory, but this host has only {} available \
             (MemAvailable in /proc/meminfo)",
            human(need),
            human(avail as u128)
        ))),
        _ => Ok(()),
    }
}

/// How many workers of the job run on this host, this one included (1 unless told otherwise
/// by [`set_workers_on_host`]).
static WORKERS_ON_HOST: AtomicUsize = AtomicUsize::new(1);

/// Declares that `n` workers of the job (this process's included) run on this host: the local
/// launcher's `--workers`, or the lines of a hosts file naming this worker's host. From then
/// on [`check_fits`] compares `n` times a worker's need with the host's memory, since every
/// one of them needs as much.
pub fn set_workers_on_host(n: usize) {
    WORKERS_ON_HOST.store(n.max(1), Ordering::Relaxed);
}

/// The workers on this host ([`set_workers_on_host`]).
pub fn workers_on_host() -> usize {
    WORKERS_ON_HOST.load(Ordering::Relaxed)
}

/// [`check_fits_in`] for `workers` workers on one host, each needing `need` bytes: their sum
/// must fit in `available`.
pub fn check_fits_shared(
    what: &str,
    need: Option<u128>,
    workers: usize,
    available: Option<u64>,
) -> Result<()> {
    check_fits_in(what, need, None)?;
    let (Some(need), Some(avail)) = (need, available) else {
        return Ok(());
    };
    if workers <= 1 {
        return check_fits_in(what, Some(need), available);
    }
    let total = need.saturating_mul(workers as u128);
    if total > avail as u128 {
        return Err(Error::config(format!(
            "{what}: {} per worker; the {workers} workers on this host need {} of memory, \
             but this host has only {} available (MemAvailable in /proc/meminfo)",
            human(need),
            human(total),
            human(avail as u128)
        )));
    }
    Ok(())
}

/// [`check_fits_shared`] for this host's workers ([`workers_on_host`]) and its [`available`]
/// memory.
pub fn check_fits(what: &str, need: Option<u128>) -> Result<()> {
    check_fits_shared(what, need, workers_on_host(), available())
}

/// An empty vector with room for `n` values, or a clear error naming `what` when the memory
/// cannot be had (instead of aborting the process): for every size that comes from input.
pub fn try_with_capacity<T>(what: &str, n: usize) -> Result<Vec<T>> {
    let mut v = Vec::new();
    v.try_reserve_exact(n).map_err(|_| {
        Error::config(format!(
            "{what}: cannot allocate {} of memory",
            human((n as u128).saturating_mul(std::mem::size_of::<T>() as u128))
        ))
    })?;
    Ok(v)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn meminfo_is_read_in_bytes() {
        let t = "MemTotal:       24000000 kB\nMemFree: 1 kB\nMemAvailable:   22000000 kB\n";
        assert_eq!(meminfo_field(t, "MemAvailable"), Some(22_000_000 * 1024));
        assert_eq!(meminfo_field(t, "MemTotal"), Some(24_000_000 * 1024));
        assert_eq!(meminfo_field(t, "Mem"), None);
        assert_eq!(meminfo_field("MemAvailable: x kB", "MemAvailable"), None);
        if std::path::Path::new("/proc/meminfo").exists() {
            assert!(available().unwrap() > 0);
        }
    }

    #[test]
    fn sizes_above_the_memory_are_refused_with_both_figures() {
        assert!(check_fits_in("x", Some(10), Some(10)).is_ok());
        assert!(check_fits_in("x", Some(1 << 40), None).is_ok());
        let e = check_fits_in("--bytes 100g: tables", Some(300 << 30), Some(21 << 30))
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("--bytes 100g: tables: 300.0 GiB of memory, but")
                && e.contains("only 21.0 GiB available"),
            "{e}"
        );
        let e = check_fits_in("points", None, Some(1))
            .unwrap_err()
            .to_string();
        assert!(e.contains("overflows"), "{e}");
        let e = check_fits_in("points", Some(u128::MAX), None)
            .unwrap_err()
            .to_string();
        assert!(e.contains("more than a process can address"), "{e}");
        assert_eq!(human(1023), "1023 bytes");
    }

    /// Workers on one host share its memory: 4 workers needing 6 GiB each do not fit in
    /// 23 GiB, though one does.
    #[test]
    fn the_workers_of_a_host_are_checked_together() {
        let (need, host) = (Some(6u128 << 30), Some(23u64 << 30));
        check_fits_shared("--k 1", need, 1, host).unwrap();
        check_fits_shared("--k 1", need, 3, host).unwrap();
        let e = check_fits_shared("--k 1", need, 4, host).unwrap_err();
        let want = "--k 1: 6.0 GiB per worker; the 4 workers on this host need 24.0 GiB of \
                    memory, but this host has only 23.0 GiB available";
        assert!(e.to_string().contains(want), "{e}");
        check_fits_shared("x", Some(1 << 40), 4, None).unwrap();
        let e = check_fits_shared("x", Some(u128::MAX), 4, None)
            .unwrap_err()
            .to_string();
        assert!(e.contains("more than a process can address"), "{e}");
    }

    #[test]
    fn failed_allocations_are_errors() {
        let v: Vec<u64> = try_with_capacity("ok", 10).unwrap();
        assert!(v.capacity() >= 10);
        let e = try_with_capacity::<u64>("the blob centres", usize::MAX / 8)
            .unwrap_err()
            .to_string();
        assert!(e.starts_with("the blob centres: cannot allocate"), "{e}");
        assert_eq!(human(1536), "1.5 KiB");
    }
}
