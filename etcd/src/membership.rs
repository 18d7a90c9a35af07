//! The membership an etcd prefix describes: `P/<id>` keys with an empty value (weight 1) or a
//! JSON object with optional `"weight"` (0..=2^32-1) and `"tag"` (0..=2^64-1), nothing else.
//!
//! A key whose change is rejected keeps its last good value (or stays absent), so one bad
//! write never empties or reshapes the balancer. Nodes come out sorted by id, bytewise (the
//! order of `BTreeMap<String, _>`): every process, in every language, builds the same table.

use liblb_core::Node;
use serde_json::Value;
use std::collections::BTreeMap;

/// Why a key's change was rejected: the key (lossy UTF-8) and the problem.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Rejection {
    pub(crate) key: String,
    pub(crate) reason: String,
}

/// Parses a member's value (empty, or `{"weight": W, "tag": T}` with both optional) into
/// `(weight, tag)`, or says what is wrong with it; public so tools can check a value before
/// writing it.
pub fn parse_value(value: &[u8]) -> Result<(u32, u64), String> {
    if value.is_empty() {
        return Ok((1, 0));
    }
    let text = std::str::from_utf8(value).map_err(|_| "value is not UTF-8".to_string())?;
    let json: Value =
        serde_json::from_str(text).map_err(|e| format!("value is not JSON ({e}): {text:?}"))?;
    let Value::Object(fields) = json else {
        return Err(format!(
            "value must be a JSON object like {{\"weight\": 3}}, not {text:?}"
        ));
    };
    let (mut weight, mut tag) = (1, 0);
    for (name, field) in &fields {
        match name.as_str() {
            "weight" => {
                weight = field
                    .as_u64()
                    .and_then(|w| u32::try_from(w).ok())
                    .ok_or_else(|| {
                        format!("\"weight\" must be an integer in 0..=4294967295, not {field}")
                    })?;
            }
            "tag" => {
                tag = field.as_u64().ok_or_else(|| {
                    format!("\"tag\" must be an integer in 0..=18446744073709551615, not {field}")
                })?;
            }
            other => {
                return Err(format!(
                    "unknown field {other:?} (a value has only \"weight\" and \"tag\")"
                ));
            }
        }
    }
    Ok((weight, tag))
}

/// The nodes under one prefix, by id.
#[derive(Debug)]
pub(crate) struct Membership {
    /// The prefix with its `/`: keys are `prefix + id`.
    prefix: String,
    nodes: BTreeMap<String, Node>,
}

impl Membership {
    pub(crate) fn new(prefix: &str) -> Membership {
        Membership {
            prefix: format!("{prefix}/"),
            nodes: BTreeMap::new(),
        }
    }

    /// The bytes every member key starts with.
    pub(crate) fn key_prefix(&self) -> &[u8] {
        self.prefix.as_bytes()
    }

    /// The node id a key names, or why it names none.
    fn id<'k>(&self, key: &'k [u8]) -> Result<&'k str, String> {
        let rest = key
            .strip_prefix(self.prefix.as_bytes())
            .ok_or_else(|| format!("key is not under {:?}", self.prefix))?;
        let id = std::str::from_utf8(rest).map_err(|_| "node id is not UTF-8".to_string())?;
        liblb_core::validate_id(id).map_err(|e| format!("invalid node id: {e}"))?;
        Ok(id)
    }

    /// Applies a put; on rejection the key keeps its last good value.
    pub(crate) fn put(&mut self, key: &[u8], value: &[u8]) -> Result<(), Rejection> {
        let reject = |reason| Rejection {
            key: String::from_utf8_lossy(key).into_owned(),
            reason,
        };
        let id = self.id(key).map_err(reject)?;
        let (weight, tag) = parse_value(value).map_err(reject)?;
        self.nodes
            .insert(id.to_string(), Node::with_tag(id, weight, tag));
        Ok(())
    }

    /// Applies a delete (a key that never held a good value is already absent).
    pub(crate) fn delete(&mut self, key: &[u8]) {
        if let Ok(id) = self.id(key) {
            self.nodes.remove(id);
        }
    }

    /// Replaces the membership with a full read of the prefix: keys that are gone are removed;
    /// a key with a bad value keeps its last good value. Returns the rejections.
    pub(crate) fn replace<'a>(
        &mut self,
        kvs: impl IntoIterator<Item = (&'a [u8], &'a [u8])>,
    ) -> Vec<Rejection> {
        let mut old = std::mem::take(&mut self.nodes);
        let mut rejected = Vec::new();
        for (key, value) in kvs {
            if let Err(rejection) = self.put(key, value) {
                if let Some(kept) = self.id(key).ok().and_then(|id| old.remove(id)) {
                    self.nodes.insert(kept.id.to_string(), kept);
                }
                rejected.push(rejection);
            }
        }
        rejected
    }

    /// The nodes, sorted by id bytewise.
    pub(crate) fn nodes(&self) -> Vec<Node> {
        self.nodes.values().cloned().collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_parse_or_say_why_not() {
        assert_eq!(parse_value(b""), Ok((1, 0)));
        assert_eq!(parse_value(b"{}"), Ok((1, 0)));
        assert_eq!(parse_value(br#"{"weight": 3}"#), Ok((3, 0)));
        assert_eq!(parse_value(br#"{"weight":0,"tag":7}"#), Ok((0, 7)));
        assert_eq!(parse_value(br#"{"weight":4294967295}"#), Ok((u32::MAX, 0)));
        assert_eq!(
            parse_value(br#"{"tag":18446744073709551615}"#),
            Ok((1, u64::MAX))
        );
        for (value, why) in [
            (
                &br#"{"weight":4294967296}"#[..],
                "\"weight\" must be an integer",
            ),
            (br#"{"weight":-1}"#, "\"weight\" must be an integer"),
            (br#"{"weight":1.5}"#, "\"weight\" must be an integer"),
            (br#"{"weight":"3"}"#, "\"weight\" must be an integer"),
            (br#"{"weight":null}"#, "\"weight\" must be an integer"),
            (
                br#"{"tag":18446744073709551616}"#,
                "\"tag\" must be an integer",
            ),
            (br#"{"weight":1,"zone":"a"}"#, "unknown field \"zone\""),
            (b"3", "must be a JSON object"),
            (b"[1]", "must be a JSON object"),
            (b"{weight:3", "not JSON"),
            (b" ", "not JSON"),
            (b"\xff", "not UTF-8"),
        ] {
            let e = parse_value(value).unwrap_err();
            assert!(e.contains(why), "{value:?}: {e}");
        }
    }

    #[test]
    fn bad_changes_keep_the_last_good_value() {
        let mut m = Membership::new("svc");
        m.put(b"svc/b", br#"{"weight":2}"#).unwrap();
        m.put(b"svc/a", b"").unwrap();
        m.put(b"svc/x/y", b"").unwrap();
        let r = m.put(b"svc/b", b"{oops").unwrap_err();
        assert_eq!(r.key, "svc/b");
        assert!(
            m.put(b"svc/", b"")
                .unwrap_err()
                .reason
                .contains("invalid node id")
        );
        assert!(m.put(b"svc/a\0", b"").is_err());
        assert!(m.put(b"other/a", b"").is_err());
        let ids: Vec<_> = m
            .nodes()
            .iter()
            .map(|n| (n.id.to_string(), n.weight))
            .collect();
        assert_eq!(ids, [("a".into(), 1), ("b".into(), 2), ("x/y".into(), 1)]);
        m.delete(b"svc/a");
        m.delete(b"svc/never");
        // A resync removes what is gone and keeps b's last good weight.
        let r = m.replace([(&b"svc/b"[..], &b"[]"[..]), (b"svc/c", b"")]);
        assert_eq!(r.len(), 1);
        let ids: Vec<_> = m
            .nodes()
            .iter()
            .map(|n| (n.id.to_string(), n.weight))
            .collect();
        assert_eq!(ids, [("b".into(), 2), ("c".into(), 1)]);
    }

    #[test]
    fn nodes_sort_bytewise() {
        let mut m = Membership::new("p");
        for id in ["b", "B", "a", "é", "aa", "Z"] {
            m.put(format!("p/{id}").as_bytes(), b"").unwrap();
        }
        let ids: Vec<_> = m.nodes().iter().map(|n| n.id.to_string()).collect();
        assert_eq!(ids, ["B", "Z", "a", "aa", "b", "é"]);
    }
}
