//! Nodes: an id (non-empty UTF-8 without NUL), a weight (0 = drained) and a caller tag.

use crate::{Error, Result};
use alloc::boxed::Box;
use alloc::string::ToString;

/// A backend. Weight 0 means *drained*: never picked while any node has weight > 0.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Node {
    /// Unique id within a balancer; what `pick` returns.
    pub id: Box<str>,
    /// Relative capacity; default 1.
    pub weight: u32,
    /// Opaque 64-bit value chosen by the caller (the C ABI hands it back from picks).
    pub tag: u64,
}

impl Node {
    /// A node with tag 0.
    pub fn new(id: impl Into<Box<str>>, weight: u32) -> Node {
        Node {
            id: id.into(),
            weight,
            tag: 0,
        }
    }

    /// A node with a caller-chosen tag.
    pub fn with_tag(id: impl Into<Box<str>>, weight: u32, tag: u64) -> Node {
        Node {
            id: id.into(),
            weight,
            tag,
        }
    }
}

impl From<&str> for Node {
    fn from(id: &str) -> Node {
        Node::new(id, 1)
    }
}

impl From<(&str, u32)> for Node {
    fn from((id, weight): (&str, u32)) -> Node {
        Node::new(id, weight)
    }
}

/// Checks a node id: non-empty and free of NUL bytes.
pub fn validate_id(id: &str) -> Result<()> {
    if id.is_empty() {
        Err(Error::EmptyId)
    } else if id.as_bytes().contains(&0) {
        Err(Error::IdContainsNul(id.to_string()))
    } else {
        Ok(())
    }
}

/// Decodes an id handed over as bytes (C, Node buffers): UTF-8 or [`Error::InvalidUtf8`].
pub fn id_from_utf8(bytes: &[u8]) -> Result<&str> {
    core::str::from_utf8(bytes).map_err(|_| Error::InvalidUtf8)
}
