//! Random sequences of C API calls — with NULL pointers, bad UTF-8, NUL bytes, empty ids,
//! short buffers, id buffers without their size output, lengths and counts past `PTRDIFF_MAX`,
//! huge batch counts and attempt limits, and unknown ids — checked against two references:
//!
//! - a simple model (a `Vec` of id, weight, tag) that predicts every result code, the node
//!   listing, and which ids a pick may return;
//! - a `liblb_core::Balancer` mirror built with the same seed and given the same successful
//!   calls, so every answer (ids and tags, in order) must be exactly the core's.
//!
//! Leases (acquire, finish, cancel), reports and stats run against the mirror too: the same
//! answers, and the same in-flight, request and failure counts.
//!
//! Run: `cd fuzz && cargo +nightly fuzz run c_api` (see docs/c.md for long runs).
#![no_main]

use arbitrary::Arbitrary;
use core::ffi::{CStr, c_char, c_void};
use core::ptr::{null, null_mut};
use lb::*;
use libfuzzer_sys::fuzz_target;
use liblb_core::{Algorithm, Balancer, Node, Options};

/// An id: one of a few valid names (so calls hit existing nodes), or arbitrary bytes (empty,
/// invalid UTF-8, embedded NUL, long).
#[derive(Arbitrary, Debug, Clone)]
enum Id {
    Known(u8),
    Raw(Vec<u8>),
}

impl Id {
    fn bytes(&self) -> Vec<u8> {
        match self {
            Id::Known(i) => format!("node-{}", i % 6).into_bytes(),
            Id::Raw(bytes) => bytes.clone(),
        }
    }
}

/// How a call hands over a buffer: the capacity in bytes (the buffer really has it), NULL with
/// a non-zero length (must be rejected), or, for picks, a real buffer of that capacity whose
/// size output is NULL (must be rejected before picking; elsewhere it is `Cap`).
#[derive(Arbitrary, Debug, Clone, Copy)]
enum Buf {
    Cap(u8),
    Big,
    NullWithLen,
    NoSizeOut(u8),
}

impl Buf {
    /// Whether a pick with this id buffer must fail with `LB_RESULT_NULL_PARAMETER` up front.
    fn rejected(ids: Option<Buf>) -> bool {
        matches!(ids, Some(Buf::NullWithLen | Buf::NoSizeOut(_)))
    }

    /// The size output a pick passes along with this id buffer.
    fn size_out(ids: Option<Buf>, size: &mut usize) -> *mut usize {
        match ids {
            None | Some(Buf::NoSizeOut(_)) => null_mut(),
            Some(_) => size,
        }
    }
}

/// A length or count past `PTRDIFF_MAX` bytes (so `LB_RESULT_INVALID_LENGTH` whatever the
/// element type), or for arrays of `T` the first count whose size passes that limit.
#[derive(Arbitrary, Debug, Clone, Copy)]
enum Huge {
    Max(u8),
    PastIsize(u8),
    JustOver,
}

impl Huge {
    fn len<T>(self) -> usize {
        match self {
            Huge::Max(k) => usize::MAX - usize::from(k),
            Huge::PastIsize(k) => isize::MAX as usize + 1 + usize::from(k),
            Huge::JustOver => isize::MAX as usize / core::mem::size_of::<T>().max(1) + 1,
        }
    }
}

/// A locality: one of a few valid ones (the unnamed one included), one of the invalid kinds
/// (four parts, a NUL byte), or arbitrary bytes.
#[derive(Arbitrary, Debug, Clone)]
enum Locality {
    Known(u8),
    Bad(bool),
    Raw(Vec<u8>),
}

impl Locality {
    fn bytes(&self) -> Vec<u8> {
        const KNOWN: [&str; 6] = ["", "r/a", "r/b", "r/a/x", "q", "r/b/"];
        match self {
            Locality::Known(i) => KNOWN[usize::from(*i) % KNOWN.len()].into(),
            Locality::Bad(four) => if *four { "a/b/c/d" } else { "r\0z" }.into(),
            Locality::Raw(bytes) => bytes.clone(),
        }
    }
}

/// The lb_result of a core call, as the C API maps it.
fn code(result: liblb_core::Result<()>) -> lb_result {
    result.map_or_else(lb_result::from, |()| lb_result::Ok)
}

#[derive(Arbitrary, Debug)]
enum Op {
    /// `lb_balancer_add_located`, mirrored (the model only tracks id, weight and tag; picks
    /// and attempts are compared with the mirror, which knows the places).
    AddLocated {
        id: Id,
        weight: u8,
        tag: u64,
        locality: Locality,
        priority: u8,
    },
    /// `lb_balancer_set_location`, mirrored.
    SetLocation {
        id: Id,
        locality: Locality,
        priority: u8,
    },
    /// Locality routing, mirrored: `which` picks weights, local locality (set or clear) or
    /// the local spread; an empty list turns weights or spread off.
    Routing {
        which: u8,
        localities: Vec<(Locality, u8)>,
    },
    Add {
        id: Id,
        weight: u8,
        tag: u64,
    },
    Remove {
        id: Id,
    },
    SetWeight {
        id: Id,
        weight: u8,
    },
    Update {
        nodes: Vec<(Id, u8)>,
    },
    Pick {
        key: Option<Vec<u8>>,
        want_tag: bool,
        id_buf: Option<Buf>,
    },
    PickMany {
        keys: Vec<Vec<u8>>,
        ids: Option<Buf>,
    },
    PickN {
        count: u8,
        ids: Option<Buf>,
    },
    Attempts {
        key: Option<Vec<u8>>,
        limit: u8,
        ids: Option<Buf>,
    },
    Nodes {
        cap: u8,
        ids: Buf,
    },
    /// `lb_balancer_subset`: with no subsetting option, every node of weight > 0.
    Subset {
        cap: u8,
        ids: Buf,
    },
    Contains {
        id: Id,
    },
    Len,
    IdSizeBound,
    /// `lb_balancer_acquire`: a lease kept open until Finish / Cancel (or the end).
    Acquire {
        key: Option<Vec<u8>>,
        id_buf: Option<Buf>,
    },
    /// `lb_lease_finish` of an open lease; `bad` passes an invalid outcome first (which must
    /// leave the lease open and change nothing).
    Finish {
        lease: u8,
        ok: bool,
        latency_ms: u8,
        bad: bool,
    },
    /// `lb_lease_cancel` of an open lease.
    Cancel {
        lease: u8,
    },
    /// `lb_balancer_report`, possibly with an invalid outcome.
    Report {
        id: Id,
        ok: bool,
        latency_ms: u8,
        bad: bool,
    },
    /// `lb_balancer_mark_down` (`down`) or `lb_balancer_mark_up`, mirrored.
    Health {
        id: Id,
        down: bool,
    },
    /// `lb_balancer_stats`, checked against the mirror's counters.
    Stats,
    /// A call with a NULL balancer handle.
    NullHandle(u8),
    /// A membership call with a NULL id pointer and a non-zero length.
    NullId(u8),
    /// A call with one length or count past `PTRDIFF_MAX` bytes: `LB_RESULT_INVALID_LENGTH`,
    /// nothing picked or changed.
    TooLong {
        which: u8,
        huge: Huge,
    },
    /// `pick_n` / `attempts` with a count or limit whose array size is valid but huge:
    /// `pick_n` only where no pick can succeed (it must fail before reserving anything),
    /// `attempts` anywhere (it answers at most one entry per node).
    HugeBatch {
        shift: u8,
        attempts: bool,
        key: Option<Vec<u8>>,
        ids: Option<Buf>,
    },
}

#[derive(Arbitrary, Debug)]
struct Input {
    algorithm: u8,
    seed: u64,
    vnodes: u8,
    xxh3: bool,
    initial: Vec<(Id, u8)>,
    ops: Vec<Op>,
}

/// The model's view of one node.
#[derive(Debug, Clone, PartialEq)]
struct ModelNode {
    id: String,
    weight: u32,
    tag: u64,
}

/// What the C API must answer for an id given as bytes, before membership is considered.
fn id_error(bytes: &[u8]) -> Option<lb_result> {
    match core::str::from_utf8(bytes) {
        Err(_) => Some(lb_result::InvalidUtf8),
        Ok("") => Some(lb_result::EmptyId),
        Ok(s) if s.contains('\0') => Some(lb_result::IdContainsNul),
        Ok(_) => None,
    }
}

/// A fixed tag per id, so updates (which carry tags too) stay checkable.
fn tag_for(id: &[u8]) -> u64 {
    id.iter().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ u64::from(*b)).wrapping_mul(0x100_0000_01b3)
    })
}

/// An id buffer for a call: (pointer, length) plus the storage keeping it alive.
fn buffer(buf: Buf) -> (Vec<c_char>, *mut c_char, usize) {
    match buf {
        Buf::Cap(n) => {
            let mut storage = vec![0 as c_char; usize::from(n)];
            let ptr = if n == 0 {
                null_mut()
            } else {
                storage.as_mut_ptr()
            };
            (storage, ptr, usize::from(n))
        }
        Buf::Big => {
            let mut storage = vec![0 as c_char; 1 << 16];
            let ptr = storage.as_mut_ptr();
            (storage, ptr, 1 << 16)
        }
        Buf::NullWithLen => (Vec::new(), null_mut(), 7),
        Buf::NoSizeOut(n) => {
            // Never NULL, even with capacity 0: a buffer is there, its size output is not.
            let mut storage = vec![0 as c_char; usize::from(n).max(1)];
            let ptr = storage.as_mut_ptr();
            (storage, ptr, usize::from(n))
        }
    }
}

fn read_id(p: &lb_pick) -> String {
    assert!(!p.id.is_null());
    // SAFETY: liblb wrote a NUL-terminated id at `p.id` inside our live buffer.
    let id = unsafe { CStr::from_ptr(p.id) }
        .to_str()
        .expect("ids are UTF-8")
        .to_string();
    assert_eq!(id.len(), p.id_len);
    id
}

/// `lb_balancer_attempts` for [`Harness::batch`]: (result, count), the count untouched on error.
#[allow(clippy::too_many_arguments)]
fn attempts(
    handle: *mut lb_balancer,
    key: *const c_void,
    key_len: usize,
    picks: *mut lb_pick,
    limit: usize,
    buf: *mut c_char,
    cap: usize,
    size: *mut usize,
) -> (lb_result, usize) {
    let mut count = 0xCCCC;
    let r = lb_balancer_attempts(
        handle, key, key_len, picks, limit, buf, cap, size, &mut count,
    );
    if r != lb_result::Ok {
        assert_eq!(count, 0xCCCC, "count written on error");
    }
    (r, count)
}

struct Harness {
    handle: *mut lb_balancer,
    mirror: Balancer,
    model: Vec<ModelNode>,
    keyed: bool,
    /// Smallest and largest value `lb_balancer_id_size_bound` may report: it covers every id
    /// ever held, and may also count valid-UTF-8 ids of changes that failed.
    bound_min: usize,
    bound_max: usize,
    /// Open leases: the C lease and the mirror's, acquired by the same call.
    leases: Vec<(*mut lb_lease, liblb_core::Lease)>,
    /// Whether latencies may be recorded as given: not for `peak_ewma`, whose choices then
    /// depend on each balancer's own clock (the C balancer and the mirror read theirs at
    /// slightly different moments), so there every latency is 0, which decays to 0 exactly.
    latencies: bool,
}

impl Harness {
    fn active(&self) -> bool {
        self.model.iter().any(|n| n.weight > 0)
    }

    /// The error a pick must fail with before any buffer is considered, if any.
    fn pick_error(&self, has_key: bool) -> Option<Vec<lb_result>> {
        let mut errors = Vec::new();
        if self.keyed && !has_key {
            errors.push(lb_result::KeyRequired);
        }
        if !self.active() {
            errors.push(lb_result::NoNodes);
        }
        (!errors.is_empty()).then_some(errors)
    }

    /// Checks that an answer names a pickable model node with its own tag.
    fn check_answer(&self, id: &str, tag: u64) {
        let node = self
            .model
            .iter()
            .find(|n| n.id == id)
            .expect("answer is a current node");
        assert_eq!(node.tag, tag, "tag of {id}");
        assert!(node.weight > 0, "drained node {id} picked");
    }

    fn check_listing(&self) {
        let (mut count, mut size) = (0usize, 0usize);
        let mut nodes = vec![
            lb_node {
                id: null(),
                id_len: 0,
                weight: 0,
                tag: 0
            };
            self.model.len()
        ];
        let mut ids = vec![0 as c_char; 1 << 16];
        let r = lb_balancer_nodes(
            self.handle,
            nodes.as_mut_ptr(),
            nodes.len(),
            ids.as_mut_ptr(),
            ids.len(),
            &mut count,
            &mut size,
        );
        assert_eq!(r, lb_result::Ok);
        assert_eq!(count, self.model.len());
        for (n, m) in nodes.iter().zip(&self.model) {
            // SAFETY: `id` points into `ids`, NUL-terminated.
            let id = unsafe { CStr::from_ptr(n.id) }.to_str().unwrap();
            assert_eq!((id, n.weight, n.tag), (&*m.id, m.weight, m.tag));
        }
        assert_eq!(
            size,
            self.model.iter().map(|m| m.id.len() + 1).sum::<usize>()
        );
    }

    fn membership(&mut self, op: &Op) {
        let before = self.model.clone();
        let (r, expected) = match op {
            Op::Add { id, weight, tag } => {
                let bytes = id.bytes();
                let expected = id_error(&bytes).or_else(|| {
                    let s = core::str::from_utf8(&bytes).unwrap();
                    self.model
                        .iter()
                        .any(|n| n.id == s)
                        .then_some(lb_result::DuplicateNode)
                });
                let r = lb_balancer_add(
                    self.handle,
                    bytes.as_ptr().cast(),
                    bytes.len(),
                    (*weight).into(),
                    *tag,
                );
                if core::str::from_utf8(&bytes).is_ok() {
                    self.bound_max = self.bound_max.max(bytes.len() + 1);
                }
                if r == lb_result::Ok {
                    let s = String::from_utf8(bytes).unwrap();
                    self.bound_min = self.bound_min.max(s.len() + 1);
                    self.mirror
                        .add(Node::with_tag(s.as_str(), (*weight).into(), *tag))
                        .unwrap();
                    self.model.push(ModelNode {
                        id: s,
                        weight: (*weight).into(),
                        tag: *tag,
                    });
                }
                (r, vec![expected.unwrap_or(lb_result::Ok)])
            }
            Op::Remove { id } | Op::SetWeight { id, .. } => {
                let bytes = id.bytes();
                let found = core::str::from_utf8(&bytes)
                    .ok()
                    .and_then(|s| self.model.iter().position(|n| n.id == s));
                let expected = match (core::str::from_utf8(&bytes), found) {
                    (Err(_), _) => lb_result::InvalidUtf8,
                    (Ok(_), None) => lb_result::UnknownNode,
                    (Ok(_), Some(_)) => lb_result::Ok,
                };
                let r = if let Op::SetWeight { weight, .. } = op {
                    lb_balancer_set_weight(
                        self.handle,
                        bytes.as_ptr().cast(),
                        bytes.len(),
                        (*weight).into(),
                    )
                } else {
                    lb_balancer_remove(self.handle, bytes.as_ptr().cast(), bytes.len())
                };
                if let (lb_result::Ok, Some(i)) = (r, found) {
                    let id = self.model[i].id.clone();
                    if let Op::SetWeight { weight, .. } = op {
                        self.model[i].weight = (*weight).into();
                        self.mirror.set_weight(&id, (*weight).into()).unwrap();
                    } else {
                        self.model.remove(i);
                        self.mirror.remove(&id).unwrap();
                    }
                }
                (r, vec![expected])
            }
            Op::Update { nodes } => {
                let raw: Vec<(Vec<u8>, u32)> = nodes
                    .iter()
                    .map(|(id, w)| (id.bytes(), (*w).into()))
                    .collect();
                let c: Vec<lb_node> = raw
                    .iter()
                    .map(|(id, w)| lb_node {
                        id: id.as_ptr().cast(),
                        id_len: id.len(),
                        weight: *w,
                        tag: tag_for(id),
                    })
                    .collect();
                // Expected: the first invalid UTF-8 wins (checked while copying), then the core
                // validates ids in order, then duplicates; any of the present kinds is accepted
                // when several apply, exactly one when only one does.
                let mut expected = Vec::new();
                if raw.iter().any(|(id, _)| core::str::from_utf8(id).is_err()) {
                    expected.push(lb_result::InvalidUtf8);
                } else {
                    let first_bad = raw.iter().find_map(|(id, _)| id_error(id));
                    if let Some(e) = first_bad {
                        expected.push(e);
                    } else {
                        let mut ids: Vec<&Vec<u8>> = raw.iter().map(|(id, _)| id).collect();
                        ids.sort();
                        if ids.windows(2).any(|w| w[0] == w[1]) {
                            expected.push(lb_result::DuplicateNode);
                        }
                    }
                }
                if expected.is_empty() {
                    expected.push(lb_result::Ok);
                }
                let r = lb_balancer_update(self.handle, c.as_ptr(), c.len());
                if raw.iter().all(|(id, _)| core::str::from_utf8(id).is_ok()) {
                    let longest = raw.iter().map(|(id, _)| id.len() + 1).max().unwrap_or(0);
                    self.bound_max = self.bound_max.max(longest);
                }
                if r == lb_result::Ok {
                    self.model = raw
                        .iter()
                        .map(|(id, w)| ModelNode {
                            id: String::from_utf8(id.clone()).unwrap(),
                            weight: *w,
                            tag: tag_for(id),
                        })
                        .collect();
                    let longest = self.model.iter().map(|n| n.id.len() + 1).max().unwrap_or(0);
                    self.bound_min = self.bound_min.max(longest);
                    self.mirror
                        .update(
                            self.model
                                .iter()
                                .map(|n| Node::with_tag(n.id.as_str(), n.weight, n.tag)),
                        )
                        .unwrap();
                }
                (r, expected)
            }
            _ => unreachable!(),
        };
        assert!(
            expected.contains(&r),
            "{op:?}: got {r:?}, expected one of {expected:?}"
        );
        if r != lb_result::Ok {
            assert_eq!(self.model, before);
        }
        self.check_listing();
    }

    /// The locality calls: each must give the code the mirror's core call gives (after the C
    /// side's own UTF-8 and NULL checks), change nothing on error, and keep the two balancers
    /// answering alike (every later pick is compared with the mirror's).
    fn located(&mut self, op: &Op) {
        let before = self.model.clone();
        let (r, expected) = match op {
            Op::AddLocated {
                id,
                weight,
                tag,
                locality,
                priority,
            } => {
                let (bytes, place) = (id.bytes(), locality.bytes());
                let r = lb_balancer_add_located(
                    self.handle,
                    bytes.as_ptr().cast(),
                    bytes.len(),
                    (*weight).into(),
                    *tag,
                    place.as_ptr().cast(),
                    place.len(),
                    (*priority).into(),
                );
                if core::str::from_utf8(&bytes).is_ok() {
                    self.bound_max = self.bound_max.max(bytes.len() + 1);
                }
                let expected = match (core::str::from_utf8(&bytes), core::str::from_utf8(&place)) {
                    (Ok(s), Ok(l)) => {
                        let node = Node::with_tag(s, (*weight).into(), *tag);
                        code(self.mirror.add(node.located(l, (*priority).into())))
                    }
                    _ => lb_result::InvalidUtf8,
                };
                if r == lb_result::Ok {
                    let s = String::from_utf8(bytes).unwrap();
                    self.bound_min = self.bound_min.max(s.len() + 1);
                    self.model.push(ModelNode {
                        id: s,
                        weight: (*weight).into(),
                        tag: *tag,
                    });
                }
                (r, expected)
            }
            Op::SetLocation {
                id,
                locality,
                priority,
            } => {
                let (bytes, place) = (id.bytes(), locality.bytes());
                let r = lb_balancer_set_location(
                    self.handle,
                    bytes.as_ptr().cast(),
                    bytes.len(),
                    place.as_ptr().cast(),
                    place.len(),
                    (*priority).into(),
                );
                let expected = match (core::str::from_utf8(&bytes), core::str::from_utf8(&place)) {
                    (Ok(s), Ok(l)) => code(self.mirror.set_location(s, l, (*priority).into())),
                    _ => lb_result::InvalidUtf8,
                };
                (r, expected)
            }
            Op::Routing { which, localities } => {
                let raw: Vec<(Vec<u8>, u8)> =
                    localities.iter().map(|(l, n)| (l.bytes(), *n)).collect();
                let strs: Option<Vec<(&str, u8)>> = raw
                    .iter()
                    .map(|(l, n)| core::str::from_utf8(l).ok().map(|l| (l, *n)))
                    .collect();
                let (r, expected) = match which % 3 {
                    0 => {
                        let c: Vec<lb_locality_weight> = raw
                            .iter()
                            .map(|(l, n)| lb_locality_weight {
                                locality: l.as_ptr().cast(),
                                locality_len: l.len(),
                                weight: (*n).into(),
                            })
                            .collect();
                        let r = lb_balancer_set_locality_weights(self.handle, c.as_ptr(), c.len());
                        let expected = strs.map_or(lb_result::InvalidUtf8, |w| {
                            code(self.mirror.set_locality_weights(
                                w.into_iter().map(|(l, n)| (l, u32::from(n))),
                            ))
                        });
                        (r, expected)
                    }
                    1 => match raw.first() {
                        None => (
                            lb_balancer_clear_local_locality(self.handle),
                            code(self.mirror.set_local_locality(None)),
                        ),
                        Some((l, _)) => {
                            let r = lb_balancer_set_local_locality(
                                self.handle,
                                l.as_ptr().cast(),
                                l.len(),
                            );
                            let expected = core::str::from_utf8(l)
                                .map_or(lb_result::InvalidUtf8, |l| {
                                    code(self.mirror.set_local_locality(Some(l)))
                                });
                            (r, expected)
                        }
                    },
                    _ => {
                        let c: Vec<lb_locality_count> = raw
                            .iter()
                            .map(|(l, n)| lb_locality_count {
                                locality: l.as_ptr().cast(),
                                locality_len: l.len(),
                                count: (*n).into(),
                            })
                            .collect();
                        let r = lb_balancer_set_local_localities(self.handle, c.as_ptr(), c.len());
                        let expected = strs.map_or(lb_result::InvalidUtf8, |w| {
                            code(self.mirror.set_local_localities(
                                w.into_iter().map(|(l, n)| (l, u64::from(n))),
                            ))
                        });
                        (r, expected)
                    }
                };
                (r, expected)
            }
            _ => unreachable!(),
        };
        assert_eq!(r, expected, "{op:?}");
        if r != lb_result::Ok {
            assert_eq!(self.model, before);
        }
        self.check_listing();
        self.check_places();
    }

    /// The located listing agrees with the mirror's nodes, places included.
    fn check_places(&self) {
        let want = self.mirror.nodes();
        let mut nodes = vec![
            lb_located_node {
                id: null(),
                id_len: 0,
                weight: 0,
                tag: 0,
                locality: null(),
                locality_len: 0,
                priority: 0,
            };
            want.len()
        ];
        let mut buf = vec![0 as c_char; 1 << 16];
        let (mut count, mut size) = (0usize, 0usize);
        let r = lb_balancer_located_nodes(
            self.handle,
            nodes.as_mut_ptr(),
            nodes.len(),
            buf.as_mut_ptr(),
            buf.len(),
            &mut count,
            &mut size,
        );
        assert_eq!((r, count), (lb_result::Ok, want.len()));
        for (n, w) in nodes.iter().zip(&want) {
            // SAFETY: `id` and `locality` point into `buf`, NUL-terminated.
            let (id, locality) = unsafe { (CStr::from_ptr(n.id), CStr::from_ptr(n.locality)) };
            assert_eq!(id.to_str().unwrap(), w.id);
            assert_eq!(locality.to_str().unwrap(), w.locality);
            assert_eq!((n.weight, n.tag, n.priority), (w.weight, w.tag, w.priority));
        }
    }

    fn pick(&mut self, key: &Option<Vec<u8>>, want_tag: bool, id_buf: Option<Buf>) {
        let (kp, kl) = key
            .as_ref()
            .map_or((null(), 0), |k| (k.as_ptr().cast::<c_void>(), k.len()));
        let mut tag = 0xAAAA_u64;
        let mut size = 0xBBBB_usize;
        let (_storage, buf, cap) = id_buf.map_or((Vec::new(), null_mut(), 0), buffer);
        let r = lb_balancer_pick(
            self.handle,
            kp,
            kl,
            if want_tag { &mut tag } else { null_mut() },
            buf,
            cap,
            Buf::size_out(id_buf, &mut size),
        );
        if Buf::rejected(id_buf) {
            // Rejected before picking: the mirror does not pick either, so any later answer
            // would differ had this call moved round robin or a generator on.
            assert_eq!((r, tag), (lb_result::NullParameter, 0xAAAA));
            return;
        }
        let mirrored = self.mirror.pick(key.as_deref());
        if let Some(errors) = self.pick_error(key.is_some()) {
            assert!(errors.contains(&r), "pick: {r:?} not in {errors:?}");
            assert!(mirrored.is_err());
            assert_eq!((tag, size), (0xAAAA, 0xBBBB), "outputs written on error");
            return;
        }
        let expected = mirrored.expect("the core picks too");
        let needed = expected.id().len() + 1;
        if id_buf.is_some() && cap < needed {
            assert_eq!((r, size, tag), (lb_result::BufferTooSmall, needed, 0xAAAA));
            return;
        }
        assert_eq!(r, lb_result::Ok);
        if want_tag {
            assert_eq!(tag, expected.tag());
        }
        if id_buf.is_some() {
            assert_eq!(size, needed);
            // SAFETY: liblb wrote a NUL-terminated id at the start of our buffer.
            let id = unsafe { CStr::from_ptr(buf) }.to_str().unwrap();
            assert_eq!(id, expected.id());
            self.check_answer(id, expected.tag());
        }
    }

    /// Shared checks of pick_many / pick_n / attempts: `call` gets (picks_out, ids_buf, cap,
    /// ids_size_out); `core` gives the mirror's answers.
    fn batch(
        &mut self,
        slots: usize,
        ids: Option<Buf>,
        errors: Option<Vec<lb_result>>,
        call: impl FnOnce(*mut lb_pick, *mut c_char, usize, *mut usize) -> (lb_result, usize),
        core: impl FnOnce(&Balancer) -> liblb_core::Result<liblb_core::Picks>,
    ) {
        let empty = lb_pick {
            tag: 0x5555,
            id: null(),
            id_len: 0,
        };
        // `slots` entries really exist; the count or limit passed may claim more (HugeBatch)
        // where liblb can write at most `slots`.
        let mut picks = vec![empty; slots];
        let (_storage, buf, cap) = ids.map_or((Vec::new(), null_mut(), 0), buffer);
        let mut size = 0xBBBB_usize;
        let (r, count) = call(picks.as_mut_ptr(), buf, cap, Buf::size_out(ids, &mut size));
        if Buf::rejected(ids) {
            assert_eq!(r, lb_result::NullParameter);
            assert!(picks.iter().all(|p| p.tag == 0x5555));
            return;
        }
        let mirrored = core(&self.mirror);
        if let Some(errors) = errors {
            assert!(errors.contains(&r), "batch: {r:?} not in {errors:?}");
            assert!(mirrored.is_err());
            assert!(
                picks.iter().all(|p| p.tag == 0x5555),
                "outputs written on error"
            );
            return;
        }
        let expected = mirrored.expect("the core answers too");
        let needed: usize = expected.ids().map(|id| id.len() + 1).sum();
        if ids.is_some() && cap < needed {
            assert_eq!((r, size), (lb_result::BufferTooSmall, needed));
            assert!(
                picks.iter().all(|p| p.tag == 0x5555),
                "picks written on BUFFER_TOO_SMALL"
            );
            return;
        }
        assert_eq!(r, lb_result::Ok);
        assert_eq!(count, expected.len());
        let tags: Vec<u64> = expected.tags().collect();
        for (i, (p, id)) in picks.iter().zip(expected.ids()).enumerate() {
            assert_eq!(p.tag, tags[i]);
            if ids.is_some() {
                assert_eq!(read_id(p), id);
                self.check_answer(id, p.tag);
            } else {
                assert!(p.id.is_null());
            }
        }
        if ids.is_some() {
            assert_eq!(size, needed);
        }
    }

    /// One call with a length or count past `PTRDIFF_MAX` bytes: rejected with
    /// `LB_RESULT_INVALID_LENGTH` before anything is read, picked or changed. (The pointers are
    /// real but far shorter than claimed: liblb must not touch them.)
    fn too_long(&mut self, which: u8, huge: Huge) {
        let id = c"node-0".as_ptr();
        let mut tag = 0xAAAA_u64;
        let mut size = 0xBBBB_usize;
        let mut count = 0xCCCC_usize;
        let mut found = false;
        let mut buf = [0 as c_char; 8];
        let empty = lb_pick {
            tag: 0x5555,
            id: null(),
            id_len: 0,
        };
        let mut picks = [empty; 2];
        let mut nodes = [lb_node {
            id: null(),
            id_len: 0,
            weight: 0,
            tag: 0x7777,
        }; 2];
        let keys = [lb_key {
            key: id.cast(),
            key_len: huge.len::<u8>(),
        }];
        let one_node = [lb_node {
            id,
            id_len: huge.len::<u8>(),
            weight: 1,
            tag: 0,
        }];
        let h = self.handle;
        let r = match which % 16 {
            0 => lb_balancer_add(h, id, huge.len::<u8>(), 1, 0),
            1 => lb_balancer_remove(h, id, huge.len::<u8>()),
            2 => lb_balancer_set_weight(h, id, huge.len::<u8>(), 1),
            3 => lb_balancer_contains(h, id, huge.len::<u8>(), &mut found),
            4 => lb_balancer_update(h, nodes.as_ptr(), huge.len::<lb_node>()),
            5 => lb_balancer_update(h, one_node.as_ptr(), 1),
            6 => {
                let mut out = null_mut();
                let r = lb_balancer_new(
                    c"ring".as_ptr(),
                    huge.len::<u8>(),
                    null(),
                    null(),
                    0,
                    &mut out,
                );
                assert!(out.is_null());
                r
            }
            7 => {
                let mut out = null_mut();
                let r = lb_balancer_new(
                    c"ring".as_ptr(),
                    4,
                    null(),
                    nodes.as_ptr(),
                    huge.len::<lb_node>(),
                    &mut out,
                );
                assert!(out.is_null());
                r
            }
            8 => lb_balancer_pick(
                h,
                id.cast(),
                huge.len::<u8>(),
                &mut tag,
                null_mut(),
                0,
                null_mut(),
            ),
            9 => lb_balancer_pick(
                h,
                null(),
                0,
                &mut tag,
                buf.as_mut_ptr(),
                huge.len::<u8>(),
                &mut size,
            ),
            10 => lb_balancer_pick_many(
                h,
                keys.as_ptr(),
                huge.len::<lb_key>(),
                picks.as_mut_ptr(),
                null_mut(),
                0,
                null_mut(),
            ),
            11 => lb_balancer_pick_many(
                h,
                keys.as_ptr(),
                1,
                picks.as_mut_ptr(),
                null_mut(),
                0,
                null_mut(),
            ),
            12 => lb_balancer_pick_n(
                h,
                huge.len::<lb_pick>(),
                picks.as_mut_ptr(),
                null_mut(),
                0,
                null_mut(),
            ),
            13 => lb_balancer_attempts(
                h,
                null(),
                0,
                picks.as_mut_ptr(),
                huge.len::<lb_pick>(),
                buf.as_mut_ptr(),
                buf.len(),
                &mut size,
                &mut count,
            ),
            14 => lb_balancer_nodes(
                h,
                nodes.as_mut_ptr(),
                huge.len::<lb_node>(),
                buf.as_mut_ptr(),
                buf.len(),
                &mut count,
                &mut size,
            ),
            _ => {
                let mut options = null_mut();
                assert_eq!(lb_options_new(&mut options), lb_result::Ok);
                let r = if matches!(huge, Huge::Max(k) if k % 2 == 0) {
                    lb_options_set_int(options, id, huge.len::<u8>(), 1)
                } else {
                    lb_options_set_str(options, c"hash".as_ptr(), 4, id, huge.len::<u8>())
                };
                lb_options_free(options);
                r
            }
        };
        // Batches are first checked against LB_MAX_BATCH (issue 9), before any array.
        let expected = match which % 16 {
            10 | 12 => lb_result::BatchTooLarge,
            _ => lb_result::InvalidLength,
        };
        assert_eq!(r, expected, "call {}", which % 16);
        assert_eq!((tag, size, count, found), (0xAAAA, 0xBBBB, 0xCCCC, false));
        assert!(picks.iter().all(|p| p.tag == 0x5555));
        assert!(nodes.iter().all(|n| n.tag == 0x7777));
        self.check_listing();
    }

    fn acquire(&mut self, key: &Option<Vec<u8>>, id_buf: Option<Buf>) {
        let (kp, kl) = key
            .as_ref()
            .map_or((null(), 0), |k| (k.as_ptr().cast::<c_void>(), k.len()));
        let mut lease = null_mut();
        let mut tag = 0xAAAA_u64;
        let mut size = 0xBBBB_usize;
        let (_storage, buf, cap) = id_buf.map_or((Vec::new(), null_mut(), 0), buffer);
        let r = lb_balancer_acquire(
            self.handle,
            kp,
            kl,
            &mut lease,
            &mut tag,
            buf,
            cap,
            Buf::size_out(id_buf, &mut size),
        );
        if Buf::rejected(id_buf) {
            assert_eq!((r, tag), (lb_result::NullParameter, 0xAAAA));
            assert!(lease.is_null());
            return;
        }
        let mirrored = self.mirror.acquire(key.as_deref());
        if let Some(errors) = self.pick_error(key.is_some()) {
            assert!(errors.contains(&r), "acquire: {r:?} not in {errors:?}");
            assert!(mirrored.is_err());
            assert_eq!((tag, size), (0xAAAA, 0xBBBB), "outputs written on error");
            assert!(lease.is_null());
            return;
        }
        let expected = mirrored.expect("the core acquires too");
        let needed = expected.id().len() + 1;
        if id_buf.is_some() && cap < needed {
            // The C lease was cancelled at once: cancel the mirror's too (dropped here).
            assert_eq!((r, size, tag), (lb_result::BufferTooSmall, needed, 0xAAAA));
            assert!(lease.is_null());
            return;
        }
        assert_eq!(r, lb_result::Ok);
        assert!(!lease.is_null());
        assert_eq!(tag, expected.tag());
        if id_buf.is_some() {
            assert_eq!(size, needed);
            // SAFETY: liblb wrote a NUL-terminated id at the start of our buffer.
            let id = unsafe { CStr::from_ptr(buf) }.to_str().unwrap();
            assert_eq!(id, expected.id());
            self.check_answer(id, expected.tag());
        }
        self.leases.push((lease, expected));
    }

    fn outcome(&self, ok: bool, latency_ms: u8) -> (u32, liblb_core::Outcome) {
        let ms = if self.latencies {
            u64::from(latency_ms)
        } else {
            0
        };
        let latency = core::time::Duration::from_millis(ms);
        if ok {
            return (LB_OUTCOME_SUCCESS, liblb_core::Outcome::Success(latency));
        }
        // Every failure kind, chosen by the latency byte. No retry-after: a pause would end at
        // a time each balancer's own clock reads differently, and the mirror could diverge.
        let (code, kind) = match latency_ms % 3 {
            0 => (LB_OUTCOME_FAILURE, liblb_core::FailureKind::Error),
            1 => (LB_OUTCOME_TIMEOUT, liblb_core::FailureKind::Timeout),
            _ => (LB_OUTCOME_OVERLOADED, liblb_core::FailureKind::Overloaded),
        };
        let failure = liblb_core::Failure::of(kind).after(latency);
        (code, liblb_core::Outcome::Failed(failure))
    }

    fn check_stats(&self) {
        let (mut count, mut size) = (0xCCCC_usize, 0xBBBB_usize);
        let r = lb_balancer_stats(
            self.handle,
            null_mut(),
            0,
            null_mut(),
            0,
            &mut count,
            &mut size,
        );
        let expected = self.mirror.stats();
        assert_eq!(count, self.model.len());
        if expected.is_empty() {
            assert_eq!((r, size), (lb_result::Ok, 0));
            return;
        }
        assert_eq!(r, lb_result::BufferTooSmall);
        let blank = lb_node_stats {
            id: null(),
            id_len: 0,
            weight: 0,
            tag: 0,
            in_flight: 0,
            requests: 0,
            failures: 0,
            latency_ns: 0,
            status: u32::MAX,
            until_ns: u64::MAX,
        };
        let mut out = vec![blank; count];
        let mut ids = vec![0 as c_char; size];
        let r = lb_balancer_stats(
            self.handle,
            out.as_mut_ptr(),
            count,
            ids.as_mut_ptr(),
            size,
            &mut count,
            &mut size,
        );
        assert_eq!(r, lb_result::Ok);
        for ((s, e), m) in out.iter().zip(&expected).zip(&self.model) {
            // SAFETY: `id` points into `ids`, NUL-terminated.
            let id = unsafe { CStr::from_ptr(s.id) }.to_str().unwrap();
            assert_eq!((id, s.weight, s.tag), (&*m.id, m.weight, m.tag));
            assert_eq!(
                (s.in_flight, s.requests, s.failures),
                (e.in_flight, e.requests, e.failures),
                "stats of {id}"
            );
            assert_eq!(s.latency_ns == LB_LATENCY_NONE, e.latency.is_none());
        }
    }

    fn run(&mut self, op: &Op) {
        match op {
            Op::Acquire { key, id_buf } => self.acquire(key, *id_buf),
            Op::Finish {
                lease,
                ok,
                latency_ms,
                bad,
            } => {
                if self.leases.is_empty() {
                    return;
                }
                let i = usize::from(*lease) % self.leases.len();
                if *bad {
                    // Codes past LB_OUTCOME_OVERLOADED (3) are not outcomes.
                    let r = lb_lease_finish(self.leases[i].0, 4 + u32::from(*latency_ms), 1);
                    assert_eq!(r, lb_result::InvalidOutcome);
                    return;
                }
                let (lease, mirror) = self.leases.swap_remove(i);
                let (c, outcome) = self.outcome(*ok, *latency_ms);
                let ns = if self.latencies {
                    u64::from(*latency_ms) * 1_000_000
                } else {
                    0
                };
                assert_eq!(lb_lease_finish(lease, c, ns), lb_result::Ok);
                mirror.finish(outcome);
            }
            Op::Cancel { lease } => {
                if self.leases.is_empty() {
                    lb_lease_cancel(null_mut());
                    return;
                }
                let i = usize::from(*lease) % self.leases.len();
                let (lease, mirror) = self.leases.swap_remove(i);
                lb_lease_cancel(lease);
                drop(mirror);
            }
            Op::Report {
                id,
                ok,
                latency_ms,
                bad,
            } => {
                let bytes = id.bytes();
                let (c, outcome) = self.outcome(*ok, *latency_ms);
                let ns = if self.latencies {
                    u64::from(*latency_ms) * 1_000_000
                } else {
                    0
                };
                let c = if *bad { 4 + u32::from(*latency_ms) } else { c };
                let r = lb_balancer_report(self.handle, bytes.as_ptr().cast(), bytes.len(), c, ns);
                let expected = match core::str::from_utf8(&bytes) {
                    Err(_) => lb_result::InvalidUtf8,
                    Ok(_) if *bad => lb_result::InvalidOutcome,
                    Ok(s) => match self.mirror.report(s, outcome) {
                        Ok(()) => lb_result::Ok,
                        Err(e) => {
                            assert!(!self.model.iter().any(|n| n.id == s), "{e}");
                            lb_result::UnknownNode
                        }
                    },
                };
                assert_eq!(r, expected);
            }
            Op::Health { id, down } => {
                let bytes = id.bytes();
                let (ptr, len) = (bytes.as_ptr().cast(), bytes.len());
                let r = if *down {
                    lb_balancer_mark_down(self.handle, ptr, len)
                } else {
                    lb_balancer_mark_up(self.handle, ptr, len)
                };
                let expected = match core::str::from_utf8(&bytes) {
                    Err(_) => lb_result::InvalidUtf8,
                    Ok(s) => {
                        let mirrored = if *down {
                            self.mirror.mark_down(s)
                        } else {
                            self.mirror.mark_up(s)
                        };
                        match mirrored {
                            Ok(()) => lb_result::Ok,
                            Err(e) => {
                                assert!(!self.model.iter().any(|n| n.id == s), "{e}");
                                lb_result::UnknownNode
                            }
                        }
                    }
                };
                assert_eq!(r, expected);
            }
            Op::Stats => self.check_stats(),
            Op::AddLocated { .. } | Op::SetLocation { .. } | Op::Routing { .. } => self.located(op),
            Op::Add { .. } | Op::Remove { .. } | Op::SetWeight { .. } | Op::Update { .. } => {
                self.membership(op)
            }
            Op::Pick {
                key,
                want_tag,
                id_buf,
            } => self.pick(key, *want_tag, *id_buf),
            Op::PickMany { keys, ids } => {
                let c: Vec<lb_key> = keys
                    .iter()
                    .map(|k| lb_key {
                        key: k.as_ptr().cast(),
                        key_len: k.len(),
                    })
                    .collect();
                // Even an empty batch fails like a pick would (every entry is a key).
                let errors = self.pick_error(true);
                let handle = self.handle;
                self.batch(
                    keys.len(),
                    *ids,
                    errors,
                    |picks, buf, cap, size| {
                        (
                            lb_balancer_pick_many(
                                handle,
                                c.as_ptr(),
                                c.len(),
                                picks,
                                buf,
                                cap,
                                size,
                            ),
                            keys.len(),
                        )
                    },
                    |core| core.pick_many(keys.iter().map(|k| k.as_slice())),
                );
            }
            Op::PickN { count, ids } => {
                let n = usize::from(*count % 16);
                // Even `n == 0` fails like a single unkeyed pick would.
                let errors = self.pick_error(false);
                let handle = self.handle;
                self.batch(
                    n,
                    *ids,
                    errors,
                    |picks, buf, cap, size| {
                        (lb_balancer_pick_n(handle, n, picks, buf, cap, size), n)
                    },
                    |core| core.pick_n(n),
                );
            }
            Op::Attempts { key, limit, ids } => {
                let limit = usize::from(*limit % 12);
                let errors = self.pick_error(key.is_some());
                let handle = self.handle;
                let (kp, kl) = key
                    .as_ref()
                    .map_or((null(), 0), |k| (k.as_ptr().cast::<c_void>(), k.len()));
                self.batch(
                    limit,
                    *ids,
                    errors,
                    |picks, buf, cap, size| attempts(handle, kp, kl, picks, limit, buf, cap, size),
                    |core| core.attempts(key.as_deref(), limit),
                );
            }
            Op::HugeBatch {
                shift,
                attempts: true,
                key,
                ids,
            } => {
                // Valid for the length check (at most PTRDIFF_MAX bytes of lb_pick), far more
                // than exist: liblb writes one entry per node at most.
                let limit = (isize::MAX as usize / core::mem::size_of::<lb_pick>()) >> (shift % 40);
                let errors = self.pick_error(key.is_some());
                let handle = self.handle;
                let (kp, kl) = key
                    .as_ref()
                    .map_or((null(), 0), |k| (k.as_ptr().cast::<c_void>(), k.len()));
                self.batch(
                    self.model.len(),
                    *ids,
                    errors,
                    |picks, buf, cap, size| attempts(handle, kp, kl, picks, limit, buf, cap, size),
                    |core| core.attempts(key.as_deref(), limit),
                );
            }
            Op::HugeBatch {
                shift,
                attempts: false,
                ids,
                ..
            } => {
                let count = (isize::MAX as usize / core::mem::size_of::<lb_pick>()) >> (shift % 40);
                let handle = self.handle;
                if count > LB_MAX_BATCH {
                    // Refused before anything else (issue 9), whatever the balancer and the
                    // id buffer: nothing picked, nothing written.
                    let mut picks = [lb_pick {
                        tag: 0x5555,
                        id: null(),
                        id_len: 0,
                    }; 2];
                    let (_storage, buf, cap) = ids.map_or((Vec::new(), null_mut(), 0), buffer);
                    let mut size = 0xBBBB_usize;
                    let r = lb_balancer_pick_n(
                        handle,
                        count,
                        picks.as_mut_ptr(),
                        buf,
                        cap,
                        Buf::size_out(*ids, &mut size),
                    );
                    assert_eq!(r, lb_result::BatchTooLarge);
                    assert!(picks.iter().all(|p| p.tag == 0x5555) && size == 0xBBBB);
                    return;
                }
                let Some(errors) = self.pick_error(false) else {
                    return; // it would really pick `count` times
                };
                self.batch(
                    2,
                    *ids,
                    Some(errors),
                    |picks, buf, cap, size| {
                        (lb_balancer_pick_n(handle, count, picks, buf, cap, size), 0)
                    },
                    |core| core.pick_n(count),
                );
            }
            Op::TooLong { which, huge } => self.too_long(*which, *huge),
            Op::Nodes { cap, ids } => {
                let cap = usize::from(*cap % 8);
                let mut nodes = vec![
                    lb_node {
                        id: null(),
                        id_len: 0,
                        weight: 0,
                        tag: 0x7777
                    };
                    cap
                ];
                let (_storage, buf, buf_len) = buffer(*ids);
                let (mut count, mut size) = (0xCCCC_usize, 0xBBBB_usize);
                let r = lb_balancer_nodes(
                    self.handle,
                    nodes.as_mut_ptr(),
                    cap,
                    buf,
                    buf_len,
                    &mut count,
                    &mut size,
                );
                if matches!(ids, Buf::NullWithLen) {
                    assert_eq!(r, lb_result::NullParameter);
                    return;
                }
                let needed: usize = self.model.iter().map(|n| n.id.len() + 1).sum();
                assert_eq!((count, size), (self.model.len(), needed));
                if cap < self.model.len() || buf_len < needed {
                    assert_eq!(r, lb_result::BufferTooSmall);
                    assert!(nodes.iter().all(|n| n.tag == 0x7777));
                } else {
                    assert_eq!(r, lb_result::Ok);
                    for (n, m) in nodes.iter().zip(&self.model) {
                        assert_eq!((n.id_len, n.weight, n.tag), (m.id.len(), m.weight, m.tag));
                    }
                }
            }
            Op::Subset { cap, ids } => {
                let members: Vec<&ModelNode> = self.model.iter().filter(|n| n.weight > 0).collect();
                let cap = usize::from(*cap % 8);
                let untouched = lb_pick {
                    tag: 0x7777,
                    id: null(),
                    id_len: 0,
                };
                let mut picks = vec![untouched; cap];
                let (_storage, buf, buf_len) = buffer(*ids);
                let (mut count, mut size) = (0xCCCC_usize, 0xBBBB_usize);
                let r = lb_balancer_subset(
                    self.handle,
                    picks.as_mut_ptr(),
                    cap,
                    buf,
                    buf_len,
                    &mut count,
                    &mut size,
                );
                if matches!(ids, Buf::NullWithLen) {
                    assert_eq!(r, lb_result::NullParameter);
                    return;
                }
                let needed: usize = members.iter().map(|n| n.id.len() + 1).sum();
                assert_eq!((count, size), (members.len(), needed));
                if cap < members.len() || buf_len < needed {
                    assert_eq!(r, lb_result::BufferTooSmall);
                    assert!(picks.iter().all(|p| p.tag == 0x7777 && p.id.is_null()));
                } else {
                    assert_eq!(r, lb_result::Ok);
                    for (p, m) in picks.iter().zip(&members) {
                        // SAFETY: `id` points into the caller's buffer, NUL-terminated.
                        let id = unsafe { CStr::from_ptr(p.id) }.to_bytes();
                        assert_eq!((id, p.id_len, p.tag), (m.id.as_bytes(), m.id.len(), m.tag));
                    }
                }
            }
            Op::Contains { id } => {
                let bytes = id.bytes();
                let mut found = false;
                let r = lb_balancer_contains(
                    self.handle,
                    bytes.as_ptr().cast(),
                    bytes.len(),
                    &mut found,
                );
                match core::str::from_utf8(&bytes) {
                    Err(_) => assert_eq!(r, lb_result::InvalidUtf8),
                    Ok(s) => {
                        assert_eq!(r, lb_result::Ok);
                        assert_eq!(found, self.model.iter().any(|n| n.id == s));
                    }
                }
            }
            Op::Len => {
                let mut len = 0;
                assert_eq!(lb_balancer_len(self.handle, &mut len), lb_result::Ok);
                assert_eq!(len, self.model.len());
            }
            Op::IdSizeBound => {
                let mut bound = 0;
                assert_eq!(
                    lb_balancer_id_size_bound(self.handle, &mut bound),
                    lb_result::Ok
                );
                assert!(
                    (self.bound_min..=self.bound_max).contains(&bound),
                    "bound {bound}"
                );
            }
            Op::NullHandle(which) => {
                let (mut tag, mut len) = (0u64, 0usize);
                let r = match which % 6 {
                    0 => lb_balancer_add(null(), c"x".as_ptr(), 1, 1, 0),
                    1 => lb_balancer_remove(null(), c"x".as_ptr(), 1),
                    2 => lb_balancer_pick(null(), null(), 0, &mut tag, null_mut(), 0, null_mut()),
                    3 => lb_balancer_len(null(), &mut len),
                    4 => lb_balancer_update(null(), null(), 0),
                    _ => {
                        lb_balancer_nodes(null(), null_mut(), 0, null_mut(), 0, &mut len, &mut len)
                    }
                };
                assert_eq!(r, lb_result::NullParameter);
            }
            Op::NullId(which) => {
                let bad = [lb_node {
                    id: null(),
                    id_len: 3,
                    weight: 1,
                    tag: 0,
                }];
                let r = match which % 4 {
                    0 => lb_balancer_add(self.handle, null(), 3, 1, 0),
                    1 => lb_balancer_remove(self.handle, null(), 3),
                    2 => lb_balancer_set_weight(self.handle, null(), 3, 1),
                    _ => lb_balancer_update(self.handle, bad.as_ptr(), 1),
                };
                assert_eq!(r, lb_result::NullParameter);
                self.check_listing();
            }
        }
    }
}

fuzz_target!(|input: Input| {
    let algorithm = Algorithm::ALL[usize::from(input.algorithm) % Algorithm::ALL.len()];
    // Few vnodes keep ring rebuilds cheap, so the fuzzer explores call sequences, not SHA-256.
    let vnodes = u64::from(input.vnodes % 8) + 1;
    let mut options = null_mut();
    assert_eq!(lb_options_new(&mut options), lb_result::Ok);
    assert_eq!(
        lb_options_set_int(options, c"seed".as_ptr(), 4, input.seed),
        lb_result::Ok
    );
    assert_eq!(
        lb_options_set_int(options, c"vnodes".as_ptr(), 6, vnodes),
        lb_result::Ok
    );
    if input.xxh3 {
        assert_eq!(
            lb_options_set_str(options, c"hash".as_ptr(), 4, c"xxh3".as_ptr(), 4),
            lb_result::Ok
        );
    }
    // peak_ewma's choices must not depend on each balancer's own clock (see `latencies`): a
    // failure penalty would be a non-zero sample that decays differently in each, so it is off.
    let peak_ewma = algorithm == Algorithm::PeakEwma;
    if peak_ewma {
        let r = lb_options_set_int(options, c"failure_penalty_ms".as_ptr(), 18, 0);
        assert_eq!(r, lb_result::Ok);
    }
    // Initial nodes: keep the valid, distinct ones (creation errors are covered by Update).
    let mut model: Vec<ModelNode> = Vec::new();
    for (id, weight) in &input.initial {
        let bytes = id.bytes();
        if id_error(&bytes).is_none() {
            let s = String::from_utf8(bytes.clone()).unwrap();
            if !model.iter().any(|n| n.id == s) {
                model.push(ModelNode {
                    id: s,
                    weight: (*weight).into(),
                    tag: tag_for(&bytes),
                });
            }
        }
    }
    let c: Vec<lb_node> = model
        .iter()
        .map(|n| lb_node {
            id: n.id.as_ptr().cast(),
            id_len: n.id.len(),
            weight: n.weight,
            tag: n.tag,
        })
        .collect();
    let name = algorithm.name();
    let mut handle = null_mut();
    let r = lb_balancer_new(
        name.as_ptr().cast(),
        name.len(),
        options,
        c.as_ptr(),
        c.len(),
        &mut handle,
    );
    assert_eq!(r, lb_result::Ok);
    lb_options_free(options);
    let mut core_options = Options {
        seed: Some(input.seed),
        vnodes: vnodes as u32,
        ..Options::default()
    };
    if input.xxh3 {
        core_options.hash = Some(liblb_core::HashKind::Xxh3);
    }
    if peak_ewma {
        core_options.failure_penalty = core::time::Duration::ZERO;
    }
    let mirror = Balancer::new(
        algorithm,
        model
            .iter()
            .map(|n| Node::with_tag(n.id.as_str(), n.weight, n.tag)),
        core_options,
    )
    .unwrap();
    let longest = model.iter().map(|n| n.id.len() + 1).max().unwrap_or(0);
    let mut harness = Harness {
        handle,
        mirror,
        model,
        keyed: algorithm.is_keyed(),
        bound_min: longest,
        bound_max: longest,
        leases: Vec::new(),
        latencies: algorithm != Algorithm::PeakEwma,
    };
    for op in input.ops.iter().take(64) {
        harness.run(op);
    }
    harness.check_stats();
    lb_balancer_free(harness.handle);
    // Leases still open outlive their balancer: ending them now is harmless.
    for (i, (lease, mirror)) in harness.leases.drain(..).enumerate() {
        if i % 2 == 0 {
            lb_lease_cancel(lease);
        } else {
            assert_eq!(lb_lease_finish(lease, LB_OUTCOME_SUCCESS, 1), lb_result::Ok);
        }
        drop(mirror);
    }
});
