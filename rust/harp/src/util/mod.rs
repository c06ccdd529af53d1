//! The bottom of the engine: small tools every layer may use, which use nothing of the crate but
//! [`crate::error`].
//!
//! * [`quote`]: a token or line quoted in an error message, cut to [`QUOTE_MAX`] bytes (a
//!   100 MB line must not become a 100 MB message).
//! * [`hash`]: the two stable hashes, [`splitmix64`] and [`fnv1a64`] (the job and group ids,
//!   the key → partition and label → receivers hashes).
//! * [`rng`]: the engine's random generator [`Rng`] (xoshiro256**), whose sequence for a seed
//!   never changes.
//! * [`memory`]: how much memory this host has, to refuse an input or a size that cannot fit
//!   with a clear error instead of an aborted allocation.

pub mod hash;
pub mod memory;
pub mod rng;

pub use hash::{fnv1a64, splitmix64};
pub use rng::Rng;

/// The longest part of a token or line that an error message quotes, in bytes.
pub const QUOTE_MAX: usize = 64;

/// `bytes` quoted for an error message: `'text'`, with control characters escaped and invalid
/// UTF-8 shown as U+FFFD; longer than [`QUOTE_MAX`] bytes, the first ones (cut at a character
/// boundary) followed by `…' (N bytes)`.
pub fn quote(bytes: &[u8]) -> String {
    let (head, cut) = if bytes.len() > QUOTE_MAX {
        // Back off to a character start so a multi-byte character is not split.
        let mut end = QUOTE_MAX;
        while end > QUOTE_MAX - 3 && end < bytes.len() && (bytes[end] & 0xC0) == 0x80 {
            end -= 1;
        }
        (&bytes[..end], true)
    } else {
        (bytes, false)
    };
    let mut s = String::with_capacity(head.len() + 24);
    s.push('\'');
    for c in String::from_utf8_lossy(head).chars() {
        if c.is_control() {
            s.extend(c.escape_default());
        } else {
            s.push(c);
        }
    }
    if cut {
        s.push_str(&format!("…' ({} bytes)", bytes.len()));
    } else {
        s.push('\'');
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quotes_are_cut_to_a_bounded_length() {
        assert_eq!(quote(b"oops"), "'oops'");
        assert_eq!(quote(b"a\tb\x00"), "'a\\tb\\u{0}'");
        assert_eq!(quote(b"\xff1"), "'\u{fffd}1'");
        let exact = "x".repeat(QUOTE_MAX);
        assert_eq!(quote(exact.as_bytes()), format!("'{exact}'"));
        let huge = "y".repeat(100 << 20);
        let q = quote(huge.as_bytes());
        assert_eq!(
            q,
            format!("'{}…' ({} bytes)", "y".repeat(QUOTE_MAX), 100 << 20)
        );
        // A multi-byte character across the cut is left out whole, not split.
        let mixed = format!("{}é{}", "z".repeat(QUOTE_MAX - 1), "z".repeat(10));
        let q = quote(mixed.as_bytes());
        assert!(
            q.starts_with(&format!("'{}…'", "z".repeat(QUOTE_MAX - 1))),
            "{q}"
        );
        assert!(q.ends_with(&format!("({} bytes)", mixed.len())), "{q}");
    }
}
