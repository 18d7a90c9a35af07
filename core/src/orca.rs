//! ORCA load reports: what a backend says about its own load, decoded the same way in every
//! language.
//!
//! A backend attaches an `OrcaLoadReport` to its responses (gRPC trailers, HTTP headers) so the
//! client can weight it by the load it reports (gRFC A58 `weighted_round_robin`, Envoy's
//! `client_side_weighted_round_robin`). [`parse_orca`] turns one report into a [`LoadReport`].
//!
//! Sources:
//! - The message: cncf/xds `xds/data/orca/v3/orca_load_report.proto` (commit
//!   `5cf4b19495289a9e992ce5e2c3ffb08f2cf387be`, 2025-10-31), `OrcaLoadReport`: fields 1
//!   `cpu_utilization`, 2 `mem_utilization`, 6 `rps_fractional`, 7 `eps`, 9
//!   `application_utilization` (`double`, wire type 1), 3 `rps` (deprecated `uint64`, wire type
//!   0), 4 `request_cost`, 5 `utilization`, 8 `named_metrics` (`map<string, double>`: repeated
//!   entries `{1: string key, 2: double value}`, wire type 2).
//! - The header forms: Envoy `source/common/orca/orca_parser.h` (commit `a49e36ac`) and
//!   `orca_parser.cc` (commit `977c287b`): the `endpoint-load-metrics` header holds `BIN
//!   <base64 of the proto>`, `JSON <proto3 JSON>` or `TEXT <name>:<value>, ...`; the legacy gRPC
//!   trailer `endpoint-load-metrics-bin` holds the base64 proto without a prefix. The tests port
//!   Envoy's `test/common/orca/orca_parser_test.cc` (commit `b2087b3d`).
//!
//! **Which form.** An input starting with `BIN `, `JSON ` or `TEXT ` (upper case, one space: the
//! prefixes of Envoy's `kHeaderFormatPrefix*`) is a header value; anything else is the serialized
//! proto. No valid report is mistaken for a header value: as a proto, `B` (0x42) opens field 8
//! with a length `I` (73) whose entry starts with `N` (0x4E, wire type 6, which does not exist),
//! `J` (0x4A) is field 9 with the wrong wire type and `T` (0x54) an end-group tag with no group.
//! Values of `endpoint-load-metrics-bin` arrive decoded from gRPC (pass the bytes); from raw
//! HTTP headers, prefix them with `BIN ` (or decode them yourself). Input that fails as proto
//! bytes but reads as text (4 bytes or more, a letter first, printable ASCII) was most likely a
//! header value with another prefix: its error starts with Envoy's words, `unsupported ORCA
//! header format: <first word, at most 5 characters>`, followed by the proto reason.
//!
//! **Proto bytes** follow the protobuf wire rules, decoded by hand:
//! - Unknown fields of every wire type are skipped, groups (wire types 3/4) included, nested at
//!   most [`MAX_GROUP_DEPTH`] deep (protobuf's default recursion limit); an end-group tag
//!   without its start, wire types 6 and 7, field number 0 or above 2^29 - 1 are errors.
//! - A known field with the wrong wire type is an error (`field 2 (mem_utilization) has wire
//!   type 0 (varint), expected 1 (64-bit)`). Protobuf libraries file such a field among the
//!   unknown ones and leave the field at 0; liblb refuses, because a report whose utilisation
//!   silently reads 0 would be weighted as wrongly as a report can be.
//! - A repeated scalar field: the last one wins. A repeated map key: the last value wins, at
//!   the position where the key first appeared (maps keep wire order otherwise). Inside a map
//!   entry, a missing key is `""` and a missing value `0.0`; keys must be UTF-8 (proto3).
//! - Truncation: input that ends between two fields is a valid, shorter report (protobuf has
//!   no end marker); input that ends inside a field is an error naming the byte.
//! - Varints longer than 10 bytes or above 2^64 - 1 are errors; a length is checked against
//!   the bytes left before anything is allocated, so memory stays proportional to the input.
//! - Empty input is the empty report (all zeros), as protobuf parses it.
//!
//! **`BIN `**: standard base64 with padding (Envoy's `Base64::decode` refuses input whose length
//! is not a multiple of 4), not empty, decoding to a proto as above.
//!
//! **`JSON `**: the proto3 JSON mapping, parsed with `serde_json`: one object whose keys are the
//! field names or their lowerCamelCase JSON names; doubles as numbers, numeric strings, `"NaN"`,
//! `"Infinity"` or `"-Infinity"`; `rps` as an integer or a string of digits; maps as objects;
//! `null` for the default. Unknown fields are an error (Envoy's test `JsonHeaderUnknownField`),
//! and so are a field given twice (also under both names) and a map key given twice (protobuf's
//! JSON conformance tests refuse duplicate fields; a JSON object should not repeat a name).
//!
//! **`TEXT `**: Envoy's native HTTP form, `name:value` pairs separated by commas: names
//! `cpu_utilization`, `mem_utilization`, `application_utilization`, `rps_fractional`, `eps` and
//! `named_metrics.<key>` (no `rps`, `request_cost.` or `utilization.`: Envoy has none). Envoy's
//! rules: empty items are skipped, whitespace around an item and around a value is ignored (a
//! space between a name and its `:` is part of the name), a name or
//! a value that is missing, a value that is not a number (as `absl::SimpleAtod` reads them), NaN
//! or infinite, an unknown name, an empty named-metric key and a name given twice are errors.
//! One addition: an item without a `:` may separate name and value with `=`, the form vLLM
//! writes (`TEXT named_metrics.kv_cache_usage_perc=0.4, ...`: vllm-project/vllm
//! `create_orca_header`, `vllm/entrypoints/openai/orca_metrics.py`, PR #24905), which Envoy
//! refuses as "metric values cannot be empty strings". Every item Envoy accepts reads the same.
//!
//! **Values are not judged.** NaN, infinite and negative numbers in proto bytes and JSON are
//! kept, as protobuf, Envoy and gRPC keep them (the `.proto`'s `validate.rules` bounds are not
//! enforced by any of their parsers); only `TEXT ` refuses NaN and infinity, as Envoy does.
//! Deciding what a report is worth is the consumer's job: gRFC A58 ignores a report whose
//! utilisation or qps is not positive.
//!
//! Cost: one pass over the input; allocation is the map keys and entries (at most a small
//! multiple of the input), and repeated map keys are found by one sort, never quadratically.

use alloc::format;
use alloc::string::{String, ToString};
use alloc::vec::Vec;
use core::fmt;

use crate::error::{Error, Result};

/// The HTTP header carrying a report in one of the `BIN `/`JSON `/`TEXT ` forms (Envoy's
/// `kEndpointLoadMetricsHeader`).
pub const ENDPOINT_LOAD_METRICS: &str = "endpoint-load-metrics";
/// The gRPC trailer carrying the serialized report (base64 on the wire, as every `-bin`
/// metadata; Envoy's `kEndpointLoadMetricsHeaderBin`).
pub const ENDPOINT_LOAD_METRICS_BIN: &str = "endpoint-load-metrics-bin";
/// How deep unknown groups may nest in proto bytes (protobuf's default recursion limit).
pub const MAX_GROUP_DEPTH: usize = 100;

/// One ORCA load report: the fields of cncf/xds `OrcaLoadReport`, 0 (or empty) when absent.
///
/// Maps are `(key, value)` pairs in the order keys first appeared, with unique keys (see the
/// module docs); they are small, so a linear lookup ([`LoadReport::named_metric`]) is the
/// fastest one. Compare reports with `==` only when no value is NaN.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct LoadReport {
    /// Field 1: CPU utilisation as a fraction of the available CPU (may exceed 1.0).
    pub cpu_utilization: f64,
    /// Field 2: memory utilisation as a fraction of the available memory.
    pub mem_utilization: f64,
    /// Field 9: application-specific utilisation (may exceed 1.0); gRFC A58 prefers it to CPU.
    pub application_utilization: f64,
    /// Field 3: requests per second, deprecated in favour of `rps_fractional`.
    pub rps: u64,
    /// Field 6: requests per second served by the endpoint.
    pub rps_fractional: f64,
    /// Field 7: errors per second served by the endpoint.
    pub eps: f64,
    /// Field 4: application-specific costs of the request (absolute values).
    pub request_cost: Vec<(String, f64)>,
    /// Field 5: resource utilisations, each a fraction of the resource.
    pub utilization: Vec<(String, f64)>,
    /// Field 8: application-specific opaque metrics.
    pub named_metrics: Vec<(String, f64)>,
}

impl LoadReport {
    /// The named metric `name` (field 8), if the report has it.
    pub fn named_metric(&self, name: &str) -> Option<f64> {
        lookup(&self.named_metrics, name)
    }

    /// The utilisation of resource `name` (field 5), if the report has it.
    pub fn utilization_of(&self, name: &str) -> Option<f64> {
        lookup(&self.utilization, name)
    }

    /// The request cost `name` (field 4), if the report has it.
    pub fn request_cost_of(&self, name: &str) -> Option<f64> {
        lookup(&self.request_cost, name)
    }
}

/// The header forms a backend can write a report in ([`LoadReport::to_header`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HeaderForm {
    /// `BIN <base64 of the serialized proto>`: carries every field.
    Bin,
    /// `TEXT name:value, ...`: Envoy's native form, readable, but without `rps`, `request_cost`
    /// and `utilization` (Envoy's TEXT has no names for them).
    Text,
}

impl HeaderForm {
    /// The forms' names, as the bindings take them (`header(form="bin")`), in the order of
    /// [`HeaderForm::ALL`].
    pub const NAMES: [&'static str; 2] = ["text", "bin"];
    /// Every form.
    pub const ALL: [HeaderForm; 2] = [HeaderForm::Text, HeaderForm::Bin];
}

/// A form by its name in [`HeaderForm::NAMES`]; another name is an
/// [`Error::InvalidOptionValue`] for the option `form`.
impl core::str::FromStr for HeaderForm {
    type Err = Error;

    fn from_str(name: &str) -> Result<HeaderForm> {
        (Self::NAMES.iter().position(|n| *n == name))
            .map(|i| Self::ALL[i])
            .ok_or_else(|| Error::InvalidOptionValue {
                option: "form",
                value: name.into(),
                expected: "\"text\" or \"bin\"",
            })
    }
}

impl LoadReport {
    /// The report as a serialized `OrcaLoadReport`, what [`parse_orca`] reads back exactly,
    /// laid out as protobuf writes it: fields in number order, a value only when its bits are
    /// not zero (so `-0.0` is written, `0.0` and `""` are not, in map entries too), map entries
    /// in the report's order.
    pub fn to_proto(&self) -> Vec<u8> {
        let mut out = Vec::new();
        let double = |out: &mut Vec<u8>, field: u32, value: f64| {
            if value.to_bits() != 0 {
                put_varint(out, u64::from(field << 3 | 1));
                out.extend_from_slice(&value.to_le_bytes());
            }
        };
        let map = |out: &mut Vec<u8>, field: u32, pairs: &[(String, f64)]| {
            for (key, value) in pairs {
                let mut entry = Vec::with_capacity(key.len() + 12);
                if !key.is_empty() {
                    put_varint(&mut entry, 1 << 3 | 2);
                    put_varint(&mut entry, key.len() as u64);
                    entry.extend_from_slice(key.as_bytes());
                }
                if value.to_bits() != 0 {
                    put_varint(&mut entry, 2 << 3 | 1);
                    entry.extend_from_slice(&value.to_le_bytes());
                }
                put_varint(out, u64::from(field << 3 | 2));
                put_varint(out, entry.len() as u64);
                out.extend_from_slice(&entry);
            }
        };
        double(&mut out, 1, self.cpu_utilization);
        double(&mut out, 2, self.mem_utilization);
        if self.rps != 0 {
            put_varint(&mut out, 3 << 3);
            put_varint(&mut out, self.rps);
        }
        map(&mut out, 4, &self.request_cost);
        map(&mut out, 5, &self.utilization);
        double(&mut out, 6, self.rps_fractional);
        double(&mut out, 7, self.eps);
        map(&mut out, 8, &self.named_metrics);
        double(&mut out, 9, self.application_utilization);
        out
    }

    /// The report as an `endpoint-load-metrics` header value, what [`parse_orca`] reads back
    /// exactly. `Bin` carries anything but the all-zero report (whose serialized form is
    /// empty, and an empty `BIN ` payload is refused). `Text` writes the non-zero numbers and
    /// the named metrics; it refuses
    /// ([`Error::InvalidLoadReport`]) what it cannot carry: `rps`, `request_cost` or
    /// `utilization` entries, NaN or infinite values, and metric names that are empty or hold
    /// a comma, colon, `=` or whitespace.
    pub fn to_header(&self, form: HeaderForm) -> Result<String> {
        match form {
            HeaderForm::Bin => {
                use base64::Engine as _;
                let proto = self.to_proto();
                if proto.is_empty() {
                    // Envoy refuses `BIN ` with nothing after it; so does `parse_orca`.
                    return Err(Error::InvalidLoadReport(
                        "an all-zero report has no BIN form (an empty payload is refused): \
                         send no header, or TEXT"
                            .into(),
                    ));
                }
                let encoded = base64::engine::general_purpose::STANDARD.encode(proto);
                Ok(format!("BIN {encoded}"))
            }
            HeaderForm::Text => self.to_text().map_err(Error::InvalidLoadReport),
        }
    }

    fn to_text(&self) -> Result<String, String> {
        if self.rps != 0 || !self.request_cost.is_empty() || !self.utilization.is_empty() {
            return Err("TEXT cannot carry rps, request_cost or utilization: write BIN".into());
        }
        let scalars = [
            ("cpu_utilization", self.cpu_utilization),
            ("mem_utilization", self.mem_utilization),
            ("application_utilization", self.application_utilization),
            ("rps_fractional", self.rps_fractional),
            ("eps", self.eps),
        ];
        let metrics = self.named_metrics.iter().map(|(k, v)| (k.as_str(), *v));
        let mut items = Vec::new();
        for (name, value) in scalars.into_iter().filter(|(_, v)| v.to_bits() != 0) {
            items.push(text_item(name, "", value)?);
        }
        for (key, value) in metrics {
            let unfit = |c: char| is_space(c) || matches!(c, ',' | ':' | '=');
            if key.is_empty() || key.contains(unfit) {
                return Err(format!(
                    "TEXT cannot carry the metric name {key:?}: write BIN"
                ));
            }
            items.push(text_item("named_metrics.", key, value)?);
        }
        Ok(format!("TEXT {}", items.join(",")))
    }
}

/// One `name:value` item of a TEXT header; Rust's shortest round-trip decimal for the value.
fn text_item(prefix: &str, name: &str, value: f64) -> Result<String, String> {
    if !value.is_finite() {
        return Err(format!(
            "TEXT cannot carry {prefix}{name} = {value}: write BIN"
        ));
    }
    Ok(format!("{prefix}{name}:{value}"))
}

/// Appends `value` as a protobuf varint.
fn put_varint(out: &mut Vec<u8>, mut value: u64) {
    while value >= 0x80 {
        out.push(value as u8 | 0x80);
        value >>= 7;
    }
    out.push(value as u8);
}

fn lookup(map: &[(String, f64)], name: &str) -> Option<f64> {
    map.iter().find(|(k, _)| k == name).map(|&(_, v)| v)
}

/// Parses one ORCA load report: the serialized `OrcaLoadReport` proto, or an
/// `endpoint-load-metrics` header value starting `BIN `, `JSON ` or `TEXT ` (see the module docs
/// for the rules of each form).
///
/// Every malformed input gives [`Error::InvalidLoadReport`] naming the problem (and, in proto
/// bytes, the byte); nothing panics, and allocation never exceeds a small multiple of `data`.
///
/// ```
/// let report = liblb_core::parse_orca(b"TEXT cpu_utilization:0.5, named_metrics.rif:3")?;
/// assert_eq!(report.cpu_utilization, 0.5);
/// assert_eq!(report.named_metric("rif"), Some(3.0));
/// # Ok::<(), liblb_core::Error>(())
/// ```
pub fn parse_orca(data: &[u8]) -> Result<LoadReport> {
    let parsed = if let Some(payload) = data.strip_prefix(b"BIN ") {
        parse_bin(payload)
    } else if let Some(payload) = data.strip_prefix(b"JSON ") {
        parse_json(payload)
    } else if let Some(payload) = data.strip_prefix(b"TEXT ") {
        parse_text(payload)
    } else {
        parse_proto(data).map_err(|reason| as_unknown_header(data, reason))
    };
    parsed.map_err(Error::InvalidLoadReport)
}

/// Proto bytes that failed to parse but read as text were most likely a header value with a
/// wrong prefix: say so, with Envoy's words (`unsupported ORCA header format: <first word>`,
/// at most 5 characters), and keep the proto reason.
fn as_unknown_header(data: &[u8], reason: String) -> String {
    // Text: at least as long as the shortest prefix, starting with a letter, all printable
    // ASCII. (Short or binary-looking input keeps the plain proto reason.)
    let text = data.len() >= 4
        && data[0].is_ascii_alphabetic()
        && data.iter().all(|&b| (0x20..0x7f).contains(&b));
    if !text {
        return reason;
    }
    let head = &data[..data.len().min(5)];
    let word = head.split(|&b| b == b' ').next().unwrap_or(head);
    // Printable ASCII checked above, so this is UTF-8.
    let word = core::str::from_utf8(word).unwrap_or("");
    format!(
        "unsupported ORCA header format: {word} (a header value starts with `BIN `, `JSON ` or \
         `TEXT `; read as proto bytes: {reason})"
    )
}

// ---------------------------------------------------------------------------------------------
// Proto bytes
// ---------------------------------------------------------------------------------------------

/// Field names by number (index 0 is not a field).
const FIELD_NAMES: [&str; 10] = [
    "",
    "cpu_utilization",
    "mem_utilization",
    "rps",
    "request_cost",
    "utilization",
    "rps_fractional",
    "eps",
    "named_metrics",
    "application_utilization",
];

const VARINT: u8 = 0;
const I64: u8 = 1;
const LEN: u8 = 2;
const SGROUP: u8 = 3;
const EGROUP: u8 = 4;
const I32: u8 = 5;

fn wire_name(wire: u8) -> &'static str {
    match wire {
        VARINT => "varint",
        I64 => "64-bit",
        LEN => "length-delimited",
        SGROUP => "start-group",
        EGROUP => "end-group",
        _ => "32-bit",
    }
}

/// A field as named in messages: `field 2 (mem_utilization)`, or `field 1 (key) of a
/// named_metrics entry`.
struct Field {
    number: u32,
    name: &'static str,
    entry_of: Option<&'static str>,
}

impl fmt::Display for Field {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "field {} ({})", self.number, self.name)?;
        match self.entry_of {
            Some(map) => write!(f, " of a {map} entry"),
            None => Ok(()),
        }
    }
}

/// An unknown field, as named in messages.
struct Unknown(u32);

impl fmt::Display for Unknown {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "unknown field {}", self.0)
    }
}

/// A cursor over `data[..end]`; positions are absolute, so messages name the byte of the whole
/// input even inside a map entry.
struct Reader<'a> {
    data: &'a [u8],
    pos: usize,
    end: usize,
}

impl<'a> Reader<'a> {
    fn done(&self) -> bool {
        self.pos >= self.end
    }

    /// A base-128 varint of at most 10 bytes whose value fits 64 bits.
    fn varint(&mut self) -> Result<u64, String> {
        let start = self.pos;
        let mut value = 0u64;
        for i in 0..10 {
            if self.pos >= self.end {
                return Err(format!("truncated varint at byte {start}"));
            }
            let byte = self.data[self.pos];
            self.pos += 1;
            // The tenth byte holds bit 63 only: more is an overflow (or, with its continuation
            // bit, an eleventh byte, refused after the loop).
            if i == 9 && byte > 1 && byte & 0x80 == 0 {
                return Err(format!("varint at byte {start} overflows 64 bits"));
            }
            value |= u64::from(byte & 0x7f) << (7 * i);
            if byte & 0x80 == 0 {
                return Ok(value);
            }
        }
        Err(format!("varint at byte {start} is longer than 10 bytes"))
    }

    /// A tag: (field number, wire type), both valid.
    fn tag(&mut self) -> Result<(u32, u8), String> {
        let at = self.pos;
        let key = self.varint()?;
        let number = key >> 3;
        let wire = (key & 7) as u8;
        if number == 0 {
            return Err(format!("field number 0 at byte {at}"));
        }
        if number > (1 << 29) - 1 {
            return Err(format!(
                "field number {number} at byte {at} is above 536870911 (2^29 - 1)"
            ));
        }
        if wire > I32 {
            return Err(format!(
                "invalid wire type {wire} at byte {at} (field {number})"
            ));
        }
        Ok((number as u32, wire))
    }

    /// `n` bytes, or an error naming what was cut short.
    fn take(&mut self, n: usize, what: &dyn fmt::Display, at: usize) -> Result<&'a [u8], String> {
        let left = self.end - self.pos;
        if n > left {
            return Err(format!(
                "truncated {what} at byte {at}: {n} bytes needed, {left} left"
            ));
        }
        let bytes = &self.data[self.pos..self.pos + n];
        self.pos += n;
        Ok(bytes)
    }

    /// The 8 little-endian bytes of a double.
    fn double(&mut self, field: &Field, at: usize) -> Result<f64, String> {
        let bytes = self.take(8, &format_args!("64-bit value of {field}"), at)?;
        let mut le = [0u8; 8];
        le.copy_from_slice(bytes);
        Ok(f64::from_le_bytes(le))
    }

    /// A length prefix and the `(start, end)` of the bytes it covers, checked against what is
    /// left before anything is allocated.
    fn delimited(&mut self, what: &dyn fmt::Display, at: usize) -> Result<(usize, usize), String> {
        let len = self.varint()?;
        let left = self.end - self.pos;
        if len > left as u64 {
            return Err(format!(
                "{what} at byte {at}: length {len} runs past the end ({left} bytes left)"
            ));
        }
        let start = self.pos;
        self.pos += len as usize;
        Ok((start, self.pos))
    }

    /// Skips the value of an unknown field whose tag (at byte `at`) was just read.
    fn skip(&mut self, number: u32, wire: u8, at: usize) -> Result<(), String> {
        let what = Unknown(number);
        match wire {
            VARINT => self.varint().map(drop),
            I64 => self.take(8, &what, at).map(drop),
            I32 => self.take(4, &what, at).map(drop),
            LEN => self.delimited(&what, at).map(drop),
            SGROUP => self.skip_group(number, at),
            _ => Err(format!(
                "end-group tag of field {number} at byte {at} without a start-group"
            )),
        }
    }

    /// Skips a group whose start tag (field `number`, at byte `at`) was just read, down to its
    /// matching end tag; nested groups are tracked on a fixed stack, without recursion.
    fn skip_group(&mut self, number: u32, at: usize) -> Result<(), String> {
        let mut open = [0u32; MAX_GROUP_DEPTH];
        open[0] = number;
        let mut depth = 1;
        while depth > 0 {
            if self.done() {
                return Err(format!(
                    "group of field {number} started at byte {at} has no end-group tag"
                ));
            }
            let tag_at = self.pos;
            let (inner, wire) = self.tag()?;
            match wire {
                SGROUP if depth == MAX_GROUP_DEPTH => {
                    return Err(format!(
                        "groups nested deeper than {MAX_GROUP_DEPTH} at byte {tag_at}"
                    ));
                }
                SGROUP => {
                    open[depth] = inner;
                    depth += 1;
                }
                EGROUP if inner != open[depth - 1] => {
                    return Err(format!(
                        "end-group tag of field {inner} at byte {tag_at} closes the group of \
                         field {}",
                        open[depth - 1]
                    ));
                }
                EGROUP => depth -= 1,
                _ => self.skip(inner, wire, tag_at)?,
            }
        }
        Ok(())
    }
}

/// The wire type each known field must have.
fn expected_wire(number: u32) -> u8 {
    match number {
        3 => VARINT,
        4 | 5 | 8 => LEN,
        _ => I64,
    }
}

fn wrong_wire(field: &Field, wire: u8, expected: u8, at: usize) -> String {
    format!(
        "{field} at byte {at} has wire type {wire} ({}), expected {expected} ({})",
        wire_name(wire),
        wire_name(expected)
    )
}

/// Decodes a serialized `OrcaLoadReport`. Errors name the byte offset into `data`.
fn parse_proto(data: &[u8]) -> Result<LoadReport, String> {
    let mut r = Reader {
        data,
        pos: 0,
        end: data.len(),
    };
    let mut report = LoadReport::default();
    while !r.done() {
        let at = r.pos;
        let (number, wire) = r.tag()?;
        let Some(&name) = FIELD_NAMES.get(number as usize) else {
            r.skip(number, wire, at)?;
            continue;
        };
        let field = Field {
            number,
            name,
            entry_of: None,
        };
        let expected = expected_wire(number);
        if wire != expected {
            // Wire type 4 is never expected: an end-group here has no start, which is the
            // more useful thing to say.
            if wire == EGROUP {
                return Err(format!(
                    "end-group tag of field {number} at byte {at} without a start-group"
                ));
            }
            return Err(wrong_wire(&field, wire, expected, at));
        }
        match number {
            1 => report.cpu_utilization = r.double(&field, at)?,
            2 => report.mem_utilization = r.double(&field, at)?,
            3 => report.rps = r.varint()?,
            6 => report.rps_fractional = r.double(&field, at)?,
            7 => report.eps = r.double(&field, at)?,
            9 => report.application_utilization = r.double(&field, at)?,
            _ => {
                let (start, end) = r.delimited(&field, at)?;
                let entry = parse_entry(data, start, end, name)?;
                match number {
                    4 => report.request_cost.push(entry),
                    5 => report.utilization.push(entry),
                    _ => report.named_metrics.push(entry),
                }
            }
        }
    }
    for map in [
        &mut report.request_cost,
        &mut report.utilization,
        &mut report.named_metrics,
    ] {
        last_value_wins(map);
    }
    Ok(report)
}

/// One map entry, `data[start..end]`: `{1: string key, 2: double value}`, unknown fields
/// skipped, the last of a repeated field winning.
fn parse_entry(
    data: &[u8],
    start: usize,
    end: usize,
    map: &'static str,
) -> Result<(String, f64), String> {
    let mut r = Reader {
        data,
        pos: start,
        end,
    };
    let mut key: (&[u8], usize) = (&[], start);
    let mut value = 0.0;
    while !r.done() {
        let at = r.pos;
        let (number, wire) = r.tag()?;
        let name = match number {
            1 => "key",
            2 => "value",
            _ => {
                r.skip(number, wire, at)?;
                continue;
            }
        };
        let field = Field {
            number,
            name,
            entry_of: Some(map),
        };
        let expected = if number == 1 { LEN } else { I64 };
        if wire != expected {
            return Err(wrong_wire(&field, wire, expected, at));
        }
        if number == 1 {
            let (s, e) = r.delimited(&field, at)?;
            key = (&data[s..e], s);
        } else {
            value = r.double(&field, at)?;
        }
    }
    match core::str::from_utf8(key.0) {
        Ok(text) => Ok((text.to_string(), value)),
        Err(e) => Err(format!(
            "the key of a {map} entry at byte {} is not valid UTF-8 (at byte {})",
            key.1,
            key.1 + e.valid_up_to()
        )),
    }
}

/// Keeps one pair per key: the last value, at the first position. One sort of indices, so a
/// hostile report with many keys costs O(n log n), never O(n^2).
fn last_value_wins(map: &mut Vec<(String, f64)>) {
    if map.len() < 2 {
        return;
    }
    let mut order: Vec<usize> = (0..map.len()).collect();
    // Stable by construction: ties broken by position.
    order.sort_unstable_by(|&a, &b| map[a].0.cmp(&map[b].0).then(a.cmp(&b)));
    let mut keep = alloc::vec![true; map.len()];
    let mut any = false;
    let mut i = 0;
    while i < order.len() {
        let mut j = i + 1;
        while j < order.len() && map[order[j]].0 == map[order[i]].0 {
            keep[order[j]] = false;
            j += 1;
        }
        if j > i + 1 {
            map[order[i]].1 = map[order[j - 1]].1;
            any = true;
        }
        i = j;
    }
    if any {
        let mut at = 0;
        map.retain(|_| {
            at += 1;
            keep[at - 1]
        });
    }
}

/// The first key that appears twice, if any (O(n log n)).
fn first_duplicate(map: &[(String, f64)]) -> Option<&str> {
    let mut order: Vec<usize> = (0..map.len()).collect();
    order.sort_unstable_by(|&a, &b| map[a].0.cmp(&map[b].0).then(a.cmp(&b)));
    // Of all repeated keys, name the one whose second appearance comes first.
    order
        .windows(2)
        .filter(|w| map[w[0]].0 == map[w[1]].0)
        .map(|w| w[1])
        .min()
        .map(|i| map[i].0.as_str())
}

// ---------------------------------------------------------------------------------------------
// BIN
// ---------------------------------------------------------------------------------------------

fn parse_bin(payload: &[u8]) -> Result<LoadReport, String> {
    use base64::Engine as _;
    if payload.is_empty() {
        return Err("BIN: the base64 payload is empty".into());
    }
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(payload)
        .map_err(|e| format!("BIN: the payload is not padded standard base64: {e}"))?;
    parse_proto(&bytes).map_err(|reason| format!("BIN: {reason} (of the decoded payload)"))
}

// ---------------------------------------------------------------------------------------------
// TEXT
// ---------------------------------------------------------------------------------------------

/// absl's ASCII whitespace (`absl::ascii_isspace`): space, \t, \n, \v, \f, \r.
fn is_space(c: char) -> bool {
    matches!(c, ' ' | '\t' | '\n' | '\x0b' | '\x0c' | '\r')
}

/// A number as `absl::SimpleAtod` reads it: surrounding whitespace ignored, one leading `+`
/// allowed (not before a `-`), then decimal or exponent notation, `inf`/`infinity`/`nan` in any
/// case; too large is infinite.
fn simple_atod(text: &str) -> Option<f64> {
    let text = text.trim_matches(is_space);
    let body = match text.strip_prefix('+') {
        Some(rest) if rest.starts_with(['+', '-']) => return None,
        Some(rest) => rest,
        None => text,
    };
    body.parse::<f64>().ok()
}

const TEXT_NAMES: &str = "cpu_utilization, mem_utilization, application_utilization, rps_fractional, eps, named_metrics.<key>";

fn parse_text(payload: &[u8]) -> Result<LoadReport, String> {
    let body = core::str::from_utf8(payload)
        .map_err(|e| format!("TEXT: not valid UTF-8 (at byte {})", 5 + e.valid_up_to()))?;
    let mut report = LoadReport::default();
    let mut seen = alloc::collections::BTreeSet::new();
    for item in body.split(',') {
        let item = item.trim_matches(is_space);
        if item.is_empty() {
            continue;
        }
        // Envoy: `StrSplit(item, MaxSplits(':', 1), SkipWhitespace())` into a pair, so blank
        // pieces drop out and the pair is the first two pieces left.
        // The separator is Envoy's `:`; an item without one may use vLLM's `=` instead.
        let separator = if item.contains(':') { ':' } else { '=' };
        let mut pieces = item
            .splitn(2, separator)
            .filter(|p| !p.trim_matches(is_space).is_empty());
        let name = pieces.next().unwrap_or("");
        let value = pieces.next().unwrap_or("");
        if !seen.insert(name) {
            return Err(format!("TEXT: duplicate metric `{name}`"));
        }
        if name.is_empty() {
            return Err(format!("TEXT: `{item}` has an empty metric name"));
        }
        if value.is_empty() {
            return Err(format!(
                "TEXT: `{name}` has no value (expected `name:value`)"
            ));
        }
        let Some(number) = simple_atod(value) else {
            return Err(format!(
                "TEXT: the value of `{name}` is not a number: `{value}`"
            ));
        };
        if number.is_nan() {
            return Err(format!("TEXT: the value of `{name}` is NaN"));
        }
        if number.is_infinite() {
            return Err(format!("TEXT: the value of `{name}` is infinite"));
        }
        if let Some(key) = name.strip_prefix("named_metrics.") {
            if key.is_empty() {
                return Err("TEXT: `named_metrics.` has an empty metric key".into());
            }
            // Names are unique (checked above), so keys are too.
            report.named_metrics.push((key.to_string(), number));
            continue;
        }
        let slot = match name {
            "cpu_utilization" => &mut report.cpu_utilization,
            "mem_utilization" => &mut report.mem_utilization,
            "application_utilization" => &mut report.application_utilization,
            "rps_fractional" => &mut report.rps_fractional,
            "eps" => &mut report.eps,
            _ => {
                return Err(format!(
                    "TEXT: unsupported metric `{name}` (supported: {TEXT_NAMES})"
                ));
            }
        };
        *slot = number;
    }
    Ok(report)
}

// ---------------------------------------------------------------------------------------------
// JSON
// ---------------------------------------------------------------------------------------------

fn parse_json(payload: &[u8]) -> Result<LoadReport, String> {
    use serde::Deserializer as _;
    let mut de = serde_json::Deserializer::from_slice(payload);
    let report = de
        .deserialize_map(json::Report)
        .and_then(|report| de.end().map(|()| report))
        .map_err(|e| format!("JSON: invalid JSON for an OrcaLoadReport: {e}"))?;
    Ok(report)
}

/// serde visitors for the proto3 JSON mapping of `OrcaLoadReport`: only the shapes the message
/// has, so nesting is bounded by the schema (two objects deep), whatever the input.
mod json {
    use super::{LoadReport, first_duplicate};
    use alloc::format;
    use alloc::string::String;
    use alloc::vec::Vec;
    use core::fmt;
    use serde::de::{self, DeserializeSeed, Deserializer, Error as _, MapAccess, Visitor};

    /// The top-level object.
    pub(super) struct Report;

    /// Which field a JSON name stands for (proto name or lowerCamelCase JSON name).
    fn field_number(name: &str) -> Option<u32> {
        Some(match name {
            "cpu_utilization" | "cpuUtilization" => 1,
            "mem_utilization" | "memUtilization" => 2,
            "rps" => 3,
            "request_cost" | "requestCost" => 4,
            "utilization" => 5,
            "rps_fractional" | "rpsFractional" => 6,
            "eps" => 7,
            "named_metrics" | "namedMetrics" => 8,
            "application_utilization" | "applicationUtilization" => 9,
            _ => return None,
        })
    }

    impl<'de> Visitor<'de> for Report {
        type Value = LoadReport;

        fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("an OrcaLoadReport object")
        }

        fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<LoadReport, A::Error> {
            let mut report = LoadReport::default();
            let mut seen = 0u32;
            while let Some(name) = map.next_key::<String>()? {
                let Some(number) = field_number(&name) else {
                    return Err(A::Error::custom(format!("unknown field `{name}`")));
                };
                if seen & (1 << number) != 0 {
                    return Err(A::Error::custom(format!("field `{name}` given twice")));
                }
                seen |= 1 << number;
                match number {
                    1 => report.cpu_utilization = map.next_value_seed(Double)?,
                    2 => report.mem_utilization = map.next_value_seed(Double)?,
                    3 => report.rps = map.next_value_seed(Uint64)?,
                    6 => report.rps_fractional = map.next_value_seed(Double)?,
                    7 => report.eps = map.next_value_seed(Double)?,
                    9 => report.application_utilization = map.next_value_seed(Double)?,
                    _ => {
                        let entries = map.next_value_seed(Map)?;
                        if let Some(key) = first_duplicate(&entries) {
                            return Err(A::Error::custom(format!(
                                "key `{key}` given twice in `{name}`"
                            )));
                        }
                        match number {
                            4 => report.request_cost = entries,
                            5 => report.utilization = entries,
                            _ => report.named_metrics = entries,
                        }
                    }
                }
            }
            Ok(report)
        }
    }

    /// A `double` field: a number, a numeric string, `"NaN"`, `"Infinity"`, `"-Infinity"`, or
    /// `null` (0).
    struct Double;

    impl<'de> DeserializeSeed<'de> for Double {
        type Value = f64;
        fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<f64, D::Error> {
            d.deserialize_any(DoubleVisitor { null: true })
        }
    }

    struct DoubleVisitor {
        /// Whether `null` is allowed (a field's default; map values may not be null).
        null: bool,
    }

    impl<'de> Visitor<'de> for DoubleVisitor {
        type Value = f64;

        fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("a number, a numeric string, \"NaN\", \"Infinity\" or \"-Infinity\"")
        }
        fn visit_f64<E: de::Error>(self, v: f64) -> Result<f64, E> {
            Ok(v)
        }
        fn visit_u64<E: de::Error>(self, v: u64) -> Result<f64, E> {
            Ok(v as f64)
        }
        fn visit_i64<E: de::Error>(self, v: i64) -> Result<f64, E> {
            Ok(v as f64)
        }
        fn visit_str<E: de::Error>(self, v: &str) -> Result<f64, E> {
            match v {
                "NaN" => Ok(f64::NAN),
                "Infinity" => Ok(f64::INFINITY),
                "-Infinity" => Ok(f64::NEG_INFINITY),
                _ => {
                    // A JSON number written as a string; Rust's own words (`inf`, `nan`) are
                    // not the JSON mapping's, and too large a number is an error there.
                    let numeric = !v.is_empty()
                        && v.bytes()
                            .all(|b| b.is_ascii_digit() || b"+-.eE".contains(&b));
                    match v.parse::<f64>() {
                        Ok(x) if numeric && x.is_finite() => Ok(x),
                        _ => Err(E::invalid_value(de::Unexpected::Str(v), &self)),
                    }
                }
            }
        }
        fn visit_unit<E: de::Error>(self) -> Result<f64, E> {
            if self.null {
                Ok(0.0)
            } else {
                Err(E::invalid_type(de::Unexpected::Unit, &self))
            }
        }
    }

    /// The deprecated `uint64 rps`: a non-negative integer (or a double with an integral value
    /// in range), a string of digits, or `null` (0).
    struct Uint64;

    impl<'de> DeserializeSeed<'de> for Uint64 {
        type Value = u64;
        fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<u64, D::Error> {
            d.deserialize_any(self)
        }
    }

    impl<'de> Visitor<'de> for Uint64 {
        type Value = u64;

        fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("an integer from 0 to 18446744073709551615, or one as a string")
        }
        fn visit_u64<E: de::Error>(self, v: u64) -> Result<u64, E> {
            Ok(v)
        }
        fn visit_i64<E: de::Error>(self, v: i64) -> Result<u64, E> {
            u64::try_from(v).map_err(|_| E::invalid_value(de::Unexpected::Signed(v), &self))
        }
        fn visit_f64<E: de::Error>(self, v: f64) -> Result<u64, E> {
            // 2^64 is exact as a double; `as` saturates, so the round trip tells integral
            // values in range from the rest.
            if (0.0..18_446_744_073_709_551_616.0).contains(&v) && (v as u64) as f64 == v {
                Ok(v as u64)
            } else {
                Err(E::invalid_value(de::Unexpected::Float(v), &self))
            }
        }
        fn visit_str<E: de::Error>(self, v: &str) -> Result<u64, E> {
            match v.parse::<u64>() {
                Ok(x) if !v.starts_with('+') => Ok(x),
                _ => Err(E::invalid_value(de::Unexpected::Str(v), &self)),
            }
        }
        fn visit_unit<E: de::Error>(self) -> Result<u64, E> {
            Ok(0)
        }
    }

    /// A `map<string, double>`: an object of numbers (in the order given), or `null` (empty).
    struct Map;

    impl<'de> DeserializeSeed<'de> for Map {
        type Value = Vec<(String, f64)>;
        fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
            d.deserialize_any(self)
        }
    }

    impl<'de> Visitor<'de> for Map {
        type Value = Vec<(String, f64)>;

        fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("an object of string keys and number values")
        }
        fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
            let mut entries = Vec::new();
            while let Some(key) = map.next_key::<String>()? {
                let value = map.next_value_seed(MapValue)?;
                entries.push((key, value));
            }
            Ok(entries)
        }
        fn visit_unit<E: de::Error>(self) -> Result<Self::Value, E> {
            Ok(Vec::new())
        }
    }

    /// A map value: as a `double` field, but never `null`.
    struct MapValue;

    impl<'de> DeserializeSeed<'de> for MapValue {
        type Value = f64;
        fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<f64, D::Error> {
            d.deserialize_any(DoubleVisitor { null: false })
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloc::vec;

    fn pairs(list: &[(&str, f64)]) -> Vec<(String, f64)> {
        list.iter().map(|&(k, v)| (k.to_string(), v)).collect()
    }

    #[test]
    fn last_value_wins_keeps_first_position() {
        let mut map = pairs(&[("a", 1.0), ("b", 2.0), ("a", 3.0), ("c", 4.0), ("b", 5.0)]);
        last_value_wins(&mut map);
        assert_eq!(map, pairs(&[("a", 3.0), ("b", 5.0), ("c", 4.0)]));
        let mut one = pairs(&[("x", 1.0)]);
        last_value_wins(&mut one);
        assert_eq!(one, pairs(&[("x", 1.0)]));
    }

    #[test]
    fn first_duplicate_names_the_earliest_repeat() {
        let map = pairs(&[("a", 1.0), ("b", 2.0), ("b", 3.0), ("a", 4.0)]);
        assert_eq!(first_duplicate(&map), Some("b"));
        assert_eq!(first_duplicate(&pairs(&[("a", 1.0)])), None);
    }

    #[test]
    fn simple_atod_follows_absl() {
        assert_eq!(simple_atod(" 0.5 "), Some(0.5));
        assert_eq!(simple_atod("+1e3"), Some(1000.0));
        assert_eq!(simple_atod("+-1"), None);
        assert_eq!(simple_atod("++1"), None);
        assert_eq!(simple_atod("0x10"), None);
        assert_eq!(simple_atod("1e400"), Some(f64::INFINITY));
        assert!(simple_atod("NaN").is_some_and(f64::is_nan));
        assert_eq!(simple_atod("\"0.7\""), None);
    }

    #[test]
    fn varint_limits() {
        let ten = [0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01];
        let mut r = Reader {
            data: &ten,
            pos: 0,
            end: 10,
        };
        assert_eq!(r.varint(), Ok(u64::MAX));
        let over = [0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x02];
        let mut r = Reader {
            data: &over,
            pos: 0,
            end: 10,
        };
        assert!(r.varint().unwrap_err().contains("overflows"));
        let long = vec![0x80; 11];
        let mut r = Reader {
            data: &long,
            pos: 0,
            end: 11,
        };
        assert!(r.varint().unwrap_err().contains("longer than 10 bytes"));
    }
}
