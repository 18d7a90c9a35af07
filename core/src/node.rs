//! Nodes: an id (non-empty UTF-8 without NUL), a weight (0 = drained), a caller tag, and where
//! the node is: its locality (`region/zone/sub_zone`, Envoy's `Locality`) and priority level
//! (0 = most preferred; see `route`).

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
    /// Where the node runs: `region/zone/sub_zone`, any part may be empty, trailing empty
    /// parts may be left out (`"us-east/us-east-1a"`); `""` (the default) is the unnamed
    /// locality. Compared by [`locality_key`].
    pub locality: Box<str>,
    /// Its priority level: 0 (the default) is the most preferred; higher levels take traffic
    /// as the lower ones lose health (Envoy's priority levels, see `route`).
    pub priority: u32,
}

impl Node {
    /// A node with tag 0.
    pub fn new(id: impl Into<Box<str>>, weight: u32) -> Node {
        Node::with_tag(id, weight, 0)
    }

    /// A node with a caller-chosen tag.
    pub fn with_tag(id: impl Into<Box<str>>, weight: u32, tag: u64) -> Node {
        Node {
            id: id.into(),
            weight,
            tag,
            locality: Box::default(),
            priority: 0,
        }
    }

    /// This node in `locality` (`region/zone/sub_zone`) at `priority` (0 = most preferred).
    pub fn located(mut self, locality: impl Into<Box<str>>, priority: u32) -> Node {
        self.locality = locality.into();
        self.priority = priority;
        self
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

/// Checks a locality: at most three `/`-separated parts (region, zone, sub-zone), no NUL.
pub fn validate_locality(locality: &str) -> Result<()> {
    if locality.as_bytes().contains(&0) || locality_key(locality).split('/').count() > 3 {
        return Err(Error::InvalidLocality(locality.to_string()));
    }
    Ok(())
}

/// A locality's canonical form: trailing empty parts dropped, so `"us-east/"`,
/// `"us-east//"` and `"us-east"` name the same locality (Envoy compares all three fields,
/// empty ones included).
pub fn locality_key(locality: &str) -> &str {
    locality.trim_end_matches('/')
}

/// Decodes an id handed over as bytes (C, Node buffers): UTF-8 or [`Error::InvalidUtf8`].
pub fn id_from_utf8(bytes: &[u8]) -> Result<&str> {
    core::str::from_utf8(bytes).map_err(|_| Error::InvalidUtf8)
}
