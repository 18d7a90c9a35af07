//! Key and point hashes. Every hash here is specified byte for byte, so every language and
//! platform maps a key to the same 64-bit value.
//!
//! - `sha256`: the first 8 bytes of SHA-256, big-endian — exactly seed 001's `hash()`. Java reads
//!   them as a signed `long`, but on a ring only the cyclic order matters, and signed and unsigned
//!   order are the same cycle cut at different places, so the clockwise successor is identical.
//! - `xxh3`: XXH3-64 with seed 0 (Collet), ~10x faster than SHA-256 on short keys.

use crate::{Error, Result};
use alloc::string::ToString;
use core::fmt;
use core::str::FromStr;
use sha2::{Digest, Sha256};

/// A 64-bit hash of bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum HashKind {
    /// First 8 bytes of SHA-256, big-endian (seed 001).
    Sha256,
    /// XXH3-64, seed 0.
    Xxh3,
}

impl HashKind {
    /// Every hash's name.
    pub const NAMES: &'static [&'static str] = &["sha256", "xxh3"];

    /// The hash's name.
    pub fn name(self) -> &'static str {
        match self {
            HashKind::Sha256 => "sha256",
            HashKind::Xxh3 => "xxh3",
        }
    }

    /// Hashes `bytes` to 64 bits.
    #[inline]
    pub fn hash(self, bytes: &[u8]) -> u64 {
        match self {
            HashKind::Sha256 => sha256_prefix(bytes),
            HashKind::Xxh3 => xxhash_rust::xxh3::xxh3_64(bytes),
        }
    }
}

/// The first 8 bytes of SHA-256(`bytes`), big-endian. Out of line: inlined, the digest's
/// code made every caller's frame large, xxh3's picks included.
#[inline(never)]
fn sha256_prefix(bytes: &[u8]) -> u64 {
    let digest: [u8; 32] = Sha256::digest(bytes).into();
    let mut prefix = [0u8; 8];
    prefix.copy_from_slice(&digest[..8]);
    u64::from_be_bytes(prefix)
}

impl fmt::Display for HashKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for HashKind {
    type Err = Error;

    fn from_str(name: &str) -> Result<HashKind> {
        match name {
            "sha256" => Ok(HashKind::Sha256),
            "xxh3" => Ok(HashKind::Xxh3),
            _ => Err(Error::UnknownHash(name.to_string())),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sha256_prefix_is_big_endian() {
        // SHA-256("abc") = ba7816bf 8f01cfea ... (FIPS 180-2, appendix B.1).
        assert_eq!(HashKind::Sha256.hash(b"abc"), 0xba78_16bf_8f01_cfea);
    }

    #[test]
    fn xxh3_matches_reference() {
        // XXH3_64bits("", 0) from the xxHash reference test suite.
        assert_eq!(HashKind::Xxh3.hash(b""), 0x2D06_8005_38D3_94C2);
    }
}
