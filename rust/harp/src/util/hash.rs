//! The engine's two stable hashes. Their values are part of the wire format and of Java's copy
//! (the job id, a group's id, the key → partition hash, the label → receivers hash), so they
//! never change; `tests` pins them.

/// splitmix64 (Steele, Lea, Flood), a bijective 64-bit mix: `z += 0x9e3779b97f4a7c15;
/// z = (z ^ z>>30) · 0xbf58476d1ce4e5b9; z = (z ^ z>>27) · 0x94d049bb133111eb; z ^ z>>31`
/// (wrapping).
pub fn splitmix64(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// FNV-1a 64 of `bytes`: `h = 0xcbf29ce484222325; for b in bytes { h = (h ^ b) · 0x100000001b3 }`
/// (wrapping).
pub fn fnv1a64(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, &b| {
        (h ^ b as u64).wrapping_mul(0x0100_0000_01b3)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hashes_keep_their_published_values() {
        assert_eq!(fnv1a64(b""), 0xcbf2_9ce4_8422_2325);
        assert_eq!(fnv1a64(b"a"), 0xaf63_dc4c_8601_ec8c);
        assert_eq!(fnv1a64(b"foobar"), 0x8594_4171_f739_67e8);
        assert_eq!(splitmix64(0), 0xe220_a839_7b1d_cdaf);
    }
}
