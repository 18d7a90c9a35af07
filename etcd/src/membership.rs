//! The membership an etcd prefix describes: `P/<id>` keys with an empty value (weight 1) or a
//! JSON object with optional `"weight"` (0..=2^32-1), `"tag"` (0..=2^64-1), `"locality"`
//! (`"region/zone/sub_zone"`) and `"priority"` (0..=2^32-1), nothing else.
//!
//! A key whose change is rejected keeps its last good value (or stays absent), so one bad
//! write never empties or reshapes the balancer. Nodes come out sorted by id, bytewise (the
//! order of `BTreeMap<String, _>`): every process, in every language, builds the same table.

use liblb_core::Node;
use serde::de::{Deserialize, Deserializer, IgnoredAny, MapAccess, Visitor};
use serde_json::value::RawValue;
use std::borrow::Cow;
use std::collections::BTreeMap;

/// Why a key's change was rejected: the key (lossy UTF-8) and the problem.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Rejection {
    pub(crate) key: String,
    pub(crate) reason: String,
}

/// One member's settings, from its value (see [`parse_member`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Member {
    /// The node's weight (default 1; 0 drains it).
    pub weight: u32,
    /// The caller's tag (default 0).
    pub tag: u64,
    /// Where the node runs, `"region/zone/sub_zone"` (default `""`).
    pub locality: String,
    /// Its priority level (default 0, the most preferred).
    pub priority: u32,
}

impl Default for Member {
    fn default() -> Member {
        Member {
            weight: 1,
            tag: 0,
            locality: String::new(),
            priority: 0,
        }
    }
}

/// A value has at most this many `{` and `[` (in strings too): a valid one has one `{` and
/// whatever its locality string holds. The Python reader bounds its parser's recursion with
/// the same rule, so both refuse the same values.
const MAX_BRACKETS: usize = 32;

/// Parses a member's value (empty, or `{"weight": W, "tag": T}` with both optional) into
/// `(weight, tag)`, or says what is wrong with it: [`parse_member`] without the locality and
/// priority (a value with them is accepted, and they are dropped).
pub fn parse_value(value: &[u8]) -> Result<(u32, u64), String> {
    parse_member(value).map(|m| (m.weight, m.tag))
}

/// Parses a member's value into its [`Member`] settings, or says what is wrong with it;
/// public so tools can check a value before writing it.
///
/// The rules (one table for every language: `tests/membership/values.json`): an empty value is
/// weight 1, tag 0, the unnamed locality, priority 0; otherwise the value is one JSON text
/// (RFC 8259; whitespace around it is fine, a byte order mark or anything after it is not)
/// holding an object with only the optional fields `"weight"` (0..=4294967295, default 1),
/// `"tag"` (0..=18446744073709551615, default 0), `"locality"` (a string, at most three
/// `/`-separated parts `region/zone/sub_zone`, no NUL; default `""`) and `"priority"`
/// (0..=4294967295, default 0), each **at most once** (also when spelled with escapes,
/// `"w\u0065ight"`). A number counts only as an **integer literal**: `1.0` and `1e2` are
/// refused although integral, and `-0` is the integer 0. A value holds at most 32 `{` and `[`,
/// strings included. Nesting deeper than serde_json's recursion limit (128) is no stack risk:
/// the text is checked without recursion (serde_json skips a raw value iteratively), and a
/// nested value is simply not an integer. Error texts quote at most 100 characters of the value.
pub fn parse_member(value: &[u8]) -> Result<Member, String> {
    if value.is_empty() {
        return Ok(Member::default());
    }
    let text = std::str::from_utf8(value).map_err(|_| "value is not UTF-8".to_string())?;
    let brackets = text.bytes().filter(|b| matches!(b, b'{' | b'[')).count();
    if brackets > MAX_BRACKETS {
        return Err(format!(
            "value is not a flat JSON object: {brackets} '{{' or '[' (at most {MAX_BRACKETS})"
        ));
    }
    // First the JSON text as a whole (syntax, trailing data, depth), then its shape.
    let whole: &RawValue = serde_json::from_str(text)
        .map_err(|e| format!("value is not JSON ({e}): {}", shown(text)))?;
    if !whole.get().starts_with('{') {
        return Err(format!(
            "value must be a JSON object like {{\"weight\": 3}}, not {}",
            shown(text)
        ));
    }
    let Fields(fields) = serde_json::from_str(whole.get())
        .map_err(|e| format!("value is not JSON ({e}): {}", shown(text)))?;
    let (mut weight, mut tag, mut locality, mut priority) = (None, None, None, None);
    let u32_field = |name: &str, field: &str| {
        integer(field, u64::from(u32::MAX))
            .map(|n| n as u32)
            .ok_or_else(|| {
                format!(
                    "\"{name}\" must be an integer in 0..=4294967295, not {}",
                    cut(field)
                )
            })
    };
    for (name, field) in fields {
        let field = field.get();
        match name.as_ref() {
            "weight" if weight.is_none() => weight = Some(u32_field("weight", field)?),
            "priority" if priority.is_none() => priority = Some(u32_field("priority", field)?),
            "tag" if tag.is_none() => {
                tag = Some(integer(field, u64::MAX).ok_or_else(|| {
                    format!(
                        "\"tag\" must be an integer in 0..=18446744073709551615, not {}",
                        cut(field)
                    )
                })?);
            }
            "locality" if locality.is_none() => {
                let text: String = serde_json::from_str(field).map_err(|_| {
                    format!(
                        "\"locality\" must be a string like \"us-east/us-east-1a\", not {}",
                        cut(field)
                    )
                })?;
                liblb_core::validate_locality(&text).map_err(|e| e.to_string())?;
                locality = Some(text);
            }
            "weight" | "tag" | "locality" | "priority" => {
                return Err(format!("duplicate field {name:?} in {}", shown(text)));
            }
            other => {
                return Err(format!(
                    "unknown field {other:?} (a value has only \"weight\", \"tag\", \
                     \"locality\" and \"priority\")"
                ));
            }
        }
    }
    Ok(Member {
        weight: weight.unwrap_or(1),
        tag: tag.unwrap_or(0),
        locality: locality.unwrap_or_default(),
        priority: priority.unwrap_or(0),
    })
}

/// `text` for an error message: quoted, and cut after 100 characters.
fn shown(text: &str) -> String {
    match text.char_indices().nth(100) {
        Some((cut, _)) => format!("{:?}... ({} bytes)", &text[..cut], text.len()),
        None => format!("{text:?}"),
    }
}

/// A JSON text for an error message, as it is: cut after 100 characters.
fn cut(json: &str) -> String {
    match json.char_indices().nth(100) {
        Some((cut, _)) => format!("{}... ({} bytes)", &json[..cut], json.len()),
        None => json.to_string(),
    }
}

/// An integer literal in `0..=max` (`-0` is 0), from the JSON text of a value; `None` for
/// anything else: a fraction or exponent, a string, `true`, `null`, an array, out of range.
fn integer(literal: &str, max: u64) -> Option<u64> {
    let (negative, digits) = match literal.strip_prefix('-') {
        Some(digits) => (true, digits),
        None => (false, literal),
    };
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    // serde_json already refused leading zeros; only the value is left to check.
    let n: u64 = digits.parse().ok()?;
    match (negative, n) {
        (true, 0) => Some(0),
        (true, _) => None,
        (false, n) => (n <= max).then_some(n),
    }
}

/// An object's fields in order, duplicates included (serde_json's `Map` would keep the last),
/// each value as its JSON text.
struct Fields<'a>(Vec<(Cow<'a, str>, &'a RawValue)>);

impl<'de> Deserialize<'de> for Fields<'de> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Visit;
        impl<'de> Visitor<'de> for Visit {
            type Value = Fields<'de>;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a JSON object")
            }
            fn visit_map<M: MapAccess<'de>>(self, mut map: M) -> Result<Fields<'de>, M::Error> {
                let mut fields = Vec::new();
                // At most a few fields are valid; stop collecting early on a long object.
                while let Some(name) = map.next_key::<Cow<'de, str>>()? {
                    fields.push((name, map.next_value::<&'de RawValue>()?));
                    if fields.len() > 4 {
                        break;
                    }
                }
                if fields.len() > 4 {
                    // Drain the rest so the caller sees the fields, not a parse error.
                    while map.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {}
                }
                Ok(Fields(fields))
            }
        }
        d.deserialize_map(Visit)
    }
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
        let m = parse_member(value).map_err(reject)?;
        let node = Node::with_tag(id, m.weight, m.tag).located(m.locality, m.priority);
        self.nodes.insert(id.to_string(), node);
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
