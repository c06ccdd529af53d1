//! How much memory this host has, so that a size given by a user (a benchmark message, a
//! generated data set, an input share) that cannot fit is refused with a clear error before
//! anything is allocated, instead of aborting on a failed allocation (or being killed by the
//! kernel once the pages are touched).

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

/// [`check_fits_in`] this host's [`available`] memory.
pub fn check_fits(what: &str, need: Option<u128>) -> Result<()> {
    check_fits_in(what, need, available())
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
        assert_eq!(human(1536), "1.5 KiB");
    }
}
