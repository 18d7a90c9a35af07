//! Unit tests that drive the exported functions exactly as C does: through raw pointers, with
//! NULLs, short buffers and bad bytes. They also run under Miri
//! (`cargo +nightly miri test -p liblb-ffi`), which checks every pointer access for undefined
//! behaviour; sizes are kept small for it (the ring uses a few vnodes).

use crate::*;
use core::ffi::{CStr, c_char, c_void};
use core::ptr::{null, null_mut};
use liblb_core::{Algorithm, Error, OptionValue, Options};

/// The C-side view of a string argument.
fn s(text: &str) -> (*const c_char, usize) {
    (text.as_ptr().cast(), text.len())
}

fn cstr(ptr: *const c_char) -> &'static str {
    assert!(!ptr.is_null());
    // SAFETY: every string liblb returns is static and NUL-terminated.
    unsafe { CStr::from_ptr(ptr) }.to_str().unwrap()
}

/// Owns a balancer handle for a test and frees it at the end.
struct Handle(*mut lb_balancer);

impl Drop for Handle {
    fn drop(&mut self) {
        lb_balancer_free(self.0);
    }
}

fn node(id: &str, weight: u32, tag: u64) -> lb_node {
    lb_node {
        id: id.as_ptr().cast(),
        id_len: id.len(),
        weight,
        tag,
    }
}

fn new(
    algorithm: &str,
    options: *const lb_options,
    nodes: &[lb_node],
) -> Result<Handle, lb_result> {
    let (name, name_len) = s(algorithm);
    let mut out = null_mut();
    match lb_balancer_new(
        name,
        name_len,
        options,
        nodes.as_ptr(),
        nodes.len(),
        &mut out,
    ) {
        lb_result::Ok => {
            assert!(!out.is_null());
            Ok(Handle(out))
        }
        err => {
            assert!(out.is_null(), "output written on error");
            Err(err)
        }
    }
}

/// A balancer over nodes a, b, c (weights 1, tags 10, 11, 12).
fn abc(algorithm: &str) -> Handle {
    let nodes = [node("a", 1, 10), node("b", 1, 11), node("c", 1, 12)];
    new(algorithm, null(), &nodes).unwrap()
}

fn pick_id(b: &Handle, key: Option<&str>) -> Result<(String, u64), lb_result> {
    let (key, key_len) = key.map_or((null(), 0), |k| (k.as_ptr().cast::<c_void>(), k.len()));
    let mut tag = u64::MAX;
    let mut buf = [0x55 as c_char; 32];
    let mut size = usize::MAX;
    let r = lb_balancer_pick(
        b.0,
        key,
        key_len,
        &mut tag,
        buf.as_mut_ptr(),
        buf.len(),
        &mut size,
    );
    if r != lb_result::Ok {
        assert_eq!(tag, u64::MAX, "tag written on error");
        return Err(r);
    }
    assert_eq!(buf[size - 1], 0, "id is NUL-terminated");
    let id = cstr(buf.as_ptr()).to_string();
    assert_eq!(id.len() + 1, size);
    Ok((id, tag))
}

/// Lists the nodes as (id, weight, tag), checking the sizes the listing reports.
fn list(b: &Handle) -> Vec<(String, u32, u64)> {
    let (mut count, mut size) = (0usize, 0usize);
    let r = lb_balancer_nodes(b.0, null_mut(), 0, null_mut(), 0, &mut count, &mut size);
    if count == 0 {
        assert_eq!(r, lb_result::Ok);
        return Vec::new();
    }
    assert_eq!(r, lb_result::BufferTooSmall);
    let mut nodes: Vec<lb_node> = (0..count).map(|_| node("", 0, 0)).collect();
    let mut buf = vec![0 as c_char; size];
    let (mut count2, mut size2) = (0, 0);
    let r = lb_balancer_nodes(
        b.0,
        nodes.as_mut_ptr(),
        count,
        buf.as_mut_ptr(),
        size,
        &mut count2,
        &mut size2,
    );
    assert_eq!(r, lb_result::Ok);
    assert_eq!((count2, size2), (count, size));
    nodes
        .iter()
        .map(|n| {
            // SAFETY: `id` points into `buf`, NUL-terminated, `id_len` bytes before the NUL.
            let id = unsafe { CStr::from_ptr(n.id) }
                .to_str()
                .unwrap()
                .to_string();
            assert_eq!(id.len(), n.id_len);
            (id, n.weight, n.tag)
        })
        .collect()
}

#[test]
fn every_core_error_has_its_own_code_with_the_core_name() {
    let errors = [
        Error::NoNodes,
        Error::EmptyId,
        Error::IdContainsNul("a\0".into()),
        Error::InvalidUtf8,
        Error::DuplicateNode("a".into()),
        Error::UnknownNode("a".into()),
        Error::KeyRequired("ring"),
        Error::InvalidVnodes(0),
        Error::TooManyNodes(1 << 25),
        Error::UnknownAlgorithm("x".into()),
        Error::UnknownOption("x".into()),
        Error::UnknownHash("x".into()),
        Error::InvalidOptionValue {
            option: "vnodes",
            value: "x".into(),
            expected: "a number",
        },
        Error::BatchTooLarge(1 << 25),
        Error::HashUnsupported("random"),
        Error::InvalidOutcome("x".into()),
        Error::NoUsableNodes,
        Error::InvalidLocality("a/b/c/d".into()),
        Error::InvalidLoadReport("x".into()),
    ];
    let mut seen = Vec::new();
    for error in errors {
        let code = error.code();
        let summary = error.summary();
        let result = lb_result::from(error);
        assert_ne!(
            result,
            lb_result::OtherError,
            "{code} has no code of its own"
        );
        assert_eq!(cstr(lb_result_name(result as u32)), code);
        // The text is the core's static description of the kind.
        assert_eq!(cstr(lb_result_str(result as u32)), summary);
        assert!(!seen.contains(&result), "{code} shares a result code");
        seen.push(result);
    }
}

#[test]
fn result_texts_and_names_are_static_and_total() {
    let all = crate::result::ALL_RESULTS;
    for (i, &result) in all.iter().enumerate() {
        // Numbers and names are unique, and every number maps back to its code.
        assert!(all[..i].iter().all(|r| *r as u32 != result as u32));
        assert!(
            all[..i]
                .iter()
                .all(|r| cstr(lb_result_name(*r as u32)) != cstr(lb_result_name(result as u32)))
        );
        let name = cstr(lb_result_name(result as u32));
        assert!(name.starts_with("LB_"));
        assert!(!cstr(lb_result_str(result as u32)).is_empty());
    }
    assert_eq!(cstr(lb_result_str(lb_result::Ok as u32)), "success");
    assert_eq!(cstr(lb_result_str(99)), "unknown lb_result code");
    assert_eq!(cstr(lb_result_name(u32::MAX)), "LB_UNKNOWN_RESULT");
    // The limits quoted in the texts are the core's.
    let vnodes = cstr(lb_result_str(lb_result::InvalidVnodes as u32));
    assert!(
        vnodes.ends_with(&liblb_core::MAX_VNODES.to_string()),
        "{vnodes}"
    );
    let too_many = cstr(lb_result_str(lb_result::TooManyNodes as u32));
    assert!(
        too_many.contains(&liblb_core::MAX_NODES.to_string()),
        "{too_many}"
    );
}

#[test]
fn version_and_algorithm_names_match_the_crates() {
    assert_eq!(cstr(lb_version()), env!("CARGO_PKG_VERSION"));
    let version = format!("{LB_VERSION_MAJOR}.{LB_VERSION_MINOR}.{LB_VERSION_PATCH}");
    assert_eq!(version, env!("CARGO_PKG_VERSION"));
    let names: Vec<&str> = (0..)
        .map(|i| lb_algorithm_name(i))
        .take_while(|p| !p.is_null())
        .map(cstr)
        .collect();
    assert_eq!(names, Algorithm::NAMES);
    for name in Algorithm::NAMES {
        let b = new(name, null(), &[]).unwrap();
        let mut out = null();
        assert_eq!(lb_balancer_algorithm(b.0, &mut out), lb_result::Ok);
        assert_eq!(cstr(out), *name);
    }
}

#[test]
fn panics_become_lb_result_panic() {
    fn index_out_of_bounds() -> lb_result {
        crate::panic::ffi_panic_boundary! {
            let results: Vec<lb_result> = Vec::new();
            results[usize::from(std::hint::black_box(3u8))]
        }
    }
    fn text() -> *const c_char {
        crate::panic::ffi_panic_boundary! {
            if std::hint::black_box(true) {
                panic!("boom");
            }
            c"no panic".as_ptr()
        }
    }
    // `lb_algorithm_name`'s boundary: NULL ends the caller's listing loop, so a panic must
    // give NULL, not the static panic text (which would be listed as an algorithm forever).
    fn name_list_entry() -> *const c_char {
        crate::panic::ffi_panic_boundary! { on_panic: null();
            if std::hint::black_box(true) {
                panic!("boom");
            }
            c"no panic".as_ptr()
        }
    }
    fn name_list_entry_ok() -> *const c_char {
        crate::panic::ffi_panic_boundary! { on_panic: null(); c"ring".as_ptr() }
    }
    let hook = std::panic::take_hook();
    std::panic::set_hook(Box::new(|_| {}));
    let (result, message, entry) = (index_out_of_bounds(), text(), name_list_entry());
    std::panic::set_hook(hook);
    assert_eq!(result, lb_result::Panic);
    assert_eq!(cstr(message), "panic inside liblb");
    assert!(entry.is_null());
    assert_eq!(cstr(name_list_entry_ok()), "ring");
}

#[test]
fn options_are_set_by_name_with_specific_errors() {
    let mut options = null_mut();
    assert_eq!(lb_options_new(null_mut()), lb_result::NullParameter);
    assert_eq!(lb_options_new(&mut options), lb_result::Ok);
    let set_int = |name: &str, v: u64| {
        let (n, l) = s(name);
        lb_options_set_int(options, n, l, v)
    };
    let set_str = |name: &str, v: &[u8]| {
        let (n, l) = s(name);
        lb_options_set_str(options, n, l, v.as_ptr().cast(), v.len())
    };
    assert_eq!(set_int("vnodes", 4), lb_result::Ok);
    assert_eq!(set_int("seed", 7), lb_result::Ok);
    assert_eq!(set_str("hash", b"xxh3"), lb_result::Ok);
    assert_eq!(set_int("vnodes", 0), lb_result::InvalidVnodes);
    assert_eq!(set_int("vnodes", 65537), lb_result::InvalidVnodes);
    assert_eq!(set_str("vnodes", b"many"), lb_result::InvalidOptionValue);
    assert_eq!(set_int("hash", 1), lb_result::InvalidOptionValue);
    assert_eq!(set_str("hash", b"md5"), lb_result::UnknownHash);
    assert_eq!(set_int("vnode", 1), lb_result::UnknownOption);
    assert_eq!(set_str("hash", b"\xff"), lb_result::InvalidUtf8);
    assert_eq!(
        lb_options_set_int(options, b"\xc3".as_ptr().cast(), 1, 1),
        lb_result::InvalidUtf8
    );
    assert_eq!(
        lb_options_set_int(options, null(), 6, 1),
        lb_result::NullParameter
    );
    assert_eq!(
        lb_options_set_int(options, null(), 0, 1),
        lb_result::UnknownOption
    );
    assert_eq!(
        lb_options_set_str(options, s("hash").0, 4, null(), 3),
        lb_result::NullParameter
    );
    assert_eq!(
        lb_options_set_int(null_mut(), s("seed").0, 4, 1),
        lb_result::NullParameter
    );
    assert_eq!(
        lb_options_set_int(options, s("seed").0, usize::MAX, 1),
        lb_result::InvalidLength
    );
    // Failed sets changed nothing.
    let mut expected = Options::default();
    expected.set("vnodes", OptionValue::Int(4)).unwrap();
    expected.set("seed", OptionValue::Int(7)).unwrap();
    expected.set("hash", OptionValue::Str("xxh3")).unwrap();
    // SAFETY: `options` is a live handle made by `lb_options_new`, not used concurrently.
    assert_eq!(unsafe { crate::ptr::try_ref(options) }, Ok(&expected));
    // Two balancers built from the same seeded options give the same sequence, and the
    // options can be freed right after.
    let nodes = [node("a", 1, 0), node("b", 1, 1), node("c", 1, 2)];
    let one = new("random", options, &nodes).unwrap();
    let two = new("random", options, &nodes).unwrap();
    lb_options_free(options);
    lb_options_free(null_mut());
    for _ in 0..8 {
        assert_eq!(pick_id(&one, None), pick_id(&two, None));
    }
}

#[test]
fn new_rejects_bad_arguments_without_writing_the_output() {
    let mut out = null_mut();
    let (ring, ring_len) = s("ring");
    assert_eq!(
        new("rings", null(), &[]).err(),
        Some(lb_result::UnknownAlgorithm)
    );
    assert_eq!(
        new("", null(), &[]).err(),
        Some(lb_result::UnknownAlgorithm)
    );
    assert_eq!(
        lb_balancer_new(b"\xff".as_ptr().cast(), 1, null(), null(), 0, &mut out),
        lb_result::InvalidUtf8
    );
    assert_eq!(
        lb_balancer_new(null(), 4, null(), null(), 0, &mut out),
        lb_result::NullParameter
    );
    assert_eq!(
        lb_balancer_new(ring, ring_len, null(), null(), 3, &mut out),
        lb_result::NullParameter
    );
    assert_eq!(
        lb_balancer_new(ring, ring_len, null(), null(), 0, null_mut()),
        lb_result::NullParameter
    );
    assert_eq!(
        lb_balancer_new(ring, usize::MAX, null(), null(), 0, &mut out),
        lb_result::InvalidLength
    );
    let dup = [node("a", 1, 0), node("a", 2, 1)];
    assert_eq!(
        new("ring", null(), &dup).err(),
        Some(lb_result::DuplicateNode)
    );
    assert_eq!(
        new("ring", null(), &[node("", 1, 0)]).err(),
        Some(lb_result::EmptyId)
    );
    assert_eq!(
        new("ring", null(), &[node("a\0b", 1, 0)]).err(),
        Some(lb_result::IdContainsNul)
    );
    let bad = lb_node {
        id: b"\xfe".as_ptr().cast(),
        id_len: 1,
        weight: 1,
        tag: 0,
    };
    assert_eq!(
        new("ring", null(), &[bad]).err(),
        Some(lb_result::InvalidUtf8)
    );
    let null_id = lb_node {
        id: null(),
        id_len: 2,
        weight: 1,
        tag: 0,
    };
    assert_eq!(
        new("ring", null(), &[null_id]).err(),
        Some(lb_result::NullParameter)
    );
    assert!(out.is_null());
    lb_balancer_free(null_mut());
}

#[test]
fn membership_changes_and_their_errors_leave_the_balancer_unchanged_on_failure() {
    let b = abc("round_robin");
    let (d, d_len) = s("d");
    assert_eq!(lb_balancer_add(b.0, d, d_len, 2, 13), lb_result::Ok);
    let before = list(&b);
    assert_eq!(
        before,
        [
            ("a".into(), 1, 10),
            ("b".into(), 1, 11),
            ("c".into(), 1, 12),
            ("d".into(), 2, 13)
        ]
    );
    // Every failure, then the same listing.
    assert_eq!(
        lb_balancer_add(b.0, d, d_len, 1, 0),
        lb_result::DuplicateNode
    );
    assert_eq!(lb_balancer_add(b.0, null(), 0, 1, 0), lb_result::EmptyId);
    assert_eq!(
        lb_balancer_add(b.0, null(), 1, 1, 0),
        lb_result::NullParameter
    );
    assert_eq!(
        lb_balancer_add(b.0, "x\0y".as_ptr().cast(), 3, 1, 0),
        lb_result::IdContainsNul
    );
    assert_eq!(
        lb_balancer_add(b.0, b"\xc3\x28".as_ptr().cast(), 2, 1, 0),
        lb_result::InvalidUtf8
    );
    assert_eq!(
        lb_balancer_add(null(), d, d_len, 1, 0),
        lb_result::NullParameter
    );
    assert_eq!(
        lb_balancer_remove(b.0, s("zz").0, 2),
        lb_result::UnknownNode
    );
    assert_eq!(
        lb_balancer_remove(b.0, b"\xff".as_ptr().cast(), 1),
        lb_result::InvalidUtf8
    );
    assert_eq!(
        lb_balancer_remove(null(), d, d_len),
        lb_result::NullParameter
    );
    assert_eq!(
        lb_balancer_set_weight(b.0, s("zz").0, 2, 5),
        lb_result::UnknownNode
    );
    assert_eq!(
        lb_balancer_set_weight(b.0, null(), 1, 5),
        lb_result::NullParameter
    );
    let bad = [node("x", 1, 0), node("y", 1, 0), node("x", 1, 0)];
    assert_eq!(
        lb_balancer_update(b.0, bad.as_ptr(), bad.len()),
        lb_result::DuplicateNode
    );
    assert_eq!(lb_balancer_update(b.0, null(), 1), lb_result::NullParameter);
    assert_eq!(
        lb_balancer_update(b.0, bad.as_ptr(), usize::MAX / 8),
        lb_result::InvalidLength
    );
    assert_eq!(list(&b), before);
    // Successful changes.
    assert_eq!(lb_balancer_set_weight(b.0, s("a").0, 1, 0), lb_result::Ok);
    assert_eq!(lb_balancer_remove(b.0, s("b").0, 1), lb_result::Ok);
    assert_eq!(
        list(&b),
        [
            ("a".into(), 0, 10),
            ("c".into(), 1, 12),
            ("d".into(), 2, 13)
        ]
    );
    let mut contains = false;
    assert_eq!(
        lb_balancer_contains(b.0, s("c").0, 1, &mut contains),
        lb_result::Ok
    );
    assert!(contains);
    assert_eq!(
        lb_balancer_contains(b.0, s("b").0, 1, &mut contains),
        lb_result::Ok
    );
    assert!(!contains);
    assert_eq!(
        lb_balancer_contains(b.0, s("b").0, 1, null_mut()),
        lb_result::NullParameter
    );
    let mut len = 0;
    assert_eq!(lb_balancer_len(b.0, &mut len), lb_result::Ok);
    assert_eq!(len, 3);
    assert_eq!(lb_balancer_len(null(), &mut len), lb_result::NullParameter);
    // A listing can be fed straight back to update.
    let (mut count, mut size) = (0, 0);
    let mut nodes: Vec<lb_node> = (0..3).map(|_| node("", 0, 0)).collect();
    let mut buf = [0 as c_char; 16];
    let r = lb_balancer_nodes(
        b.0,
        nodes.as_mut_ptr(),
        3,
        buf.as_mut_ptr(),
        buf.len(),
        &mut count,
        &mut size,
    );
    assert_eq!((r, count, size), (lb_result::Ok, 3, 6));
    assert_eq!(
        lb_balancer_update(b.0, nodes[1..].as_ptr(), 2),
        lb_result::Ok
    );
    assert_eq!(list(&b), [("c".into(), 1, 12), ("d".into(), 2, 13)]);
    assert_eq!(lb_balancer_update(b.0, null(), 0), lb_result::Ok);
    assert_eq!(list(&b), []);
    assert_eq!(pick_id(&b, None), Err(lb_result::NoNodes));
}

fn bound(b: &Handle) -> usize {
    let mut size = usize::MAX;
    assert_eq!(lb_balancer_id_size_bound(b.0, &mut size), lb_result::Ok);
    size
}

#[test]
fn the_id_size_bound_is_the_longest_current_id() {
    let b = new("random", null(), &[]).unwrap();
    assert_eq!(bound(&b), 0);
    assert_eq!(lb_balancer_add(b.0, s("abc").0, 3, 1, 0), lb_result::Ok);
    assert_eq!(bound(&b), 4);
    let longer = [node("x", 1, 0), node("longer-id", 1, 1), node("mid", 1, 2)];
    assert_eq!(lb_balancer_update(b.0, longer.as_ptr(), 3), lb_result::Ok);
    assert_eq!(bound(&b), 10);
    assert_eq!(
        lb_balancer_set_weight(b.0, s("longer-id").0, 9, 5),
        lb_result::Ok
    );
    assert_eq!(bound(&b), 10);
    // Removing a shorter id keeps it; removing the longest lowers it to the next longest.
    assert_eq!(lb_balancer_remove(b.0, s("x").0, 1), lb_result::Ok);
    assert_eq!(bound(&b), 10);
    assert_eq!(lb_balancer_remove(b.0, s("longer-id").0, 9), lb_result::Ok);
    assert_eq!(
        bound(&b),
        4,
        "the bound follows the longest id that is left"
    );
    let short = [node("z", 1, 0)];
    assert_eq!(lb_balancer_update(b.0, short.as_ptr(), 1), lb_result::Ok);
    assert_eq!(bound(&b), 2, "update sets the bound of the new membership");
    assert_eq!(lb_balancer_update(b.0, null(), 0), lb_result::Ok);
    assert_eq!(bound(&b), 0);
    assert_eq!(bound(&abc("round_robin")), 2);
    assert_eq!(
        lb_balancer_id_size_bound(null(), &mut 0),
        lb_result::NullParameter
    );
    assert_eq!(
        lb_balancer_id_size_bound(b.0, null_mut()),
        lb_result::NullParameter
    );
}

#[test]
fn a_rejected_long_id_leaves_the_id_size_bound_alone() {
    // Issue 9, finding 5: the bound was raised before validation and never lowered, so one
    // rejected huge id made lb.hpp allocate that size for every later pick.
    let b = abc("round_robin");
    let long = "L".repeat(if cfg!(miri) { 300 } else { 1 << 20 });
    let with_nul = format!("{long}\0");
    let (id, len) = s(&with_nul);
    assert_eq!(
        lb_balancer_add(b.0, id, len, 1, 0),
        lb_result::IdContainsNul
    );
    assert_eq!(bound(&b), 2);
    // A valid long id in an update that fails on another node.
    let bad_update = [node(&long, 1, 0), node("", 1, 1)];
    assert_eq!(
        lb_balancer_update(b.0, bad_update.as_ptr(), 2),
        lb_result::EmptyId
    );
    assert_eq!(bound(&b), 2);
    let duplicate = [node(&long, 1, 0), node(&long, 1, 1)];
    assert_eq!(
        lb_balancer_update(b.0, duplicate.as_ptr(), 2),
        lb_result::DuplicateNode
    );
    assert_eq!(bound(&b), 2);
    // Accepted, then gone again: the bound goes up and back down.
    let (id, len) = s(&long);
    assert_eq!(lb_balancer_add(b.0, id, len, 1, 0), lb_result::Ok);
    assert_eq!(bound(&b), long.len() + 1);
    assert_eq!(
        lb_balancer_add(b.0, id, len, 1, 0),
        lb_result::DuplicateNode
    );
    assert_eq!(bound(&b), long.len() + 1);
    assert_eq!(lb_balancer_remove(b.0, id, len), lb_result::Ok);
    assert_eq!(bound(&b), 2);
    assert_eq!(list(&b).len(), 3);
}

#[test]
fn the_id_size_bound_always_fits_the_membership_while_writers_race() {
    // Writers add and remove long ids from several threads; after every change the bound must
    // still fit every id listed afterwards (a writer's bound update must never overwrite a
    // later change's), and once all have finished it is exact.
    let b = abc("round_robin");
    let handle = b.0 as usize;
    let rounds = if cfg!(miri) { 3 } else { 200 };
    std::thread::scope(|scope| {
        for t in 0..2usize {
            scope.spawn(move || {
                let b = handle as *const lb_balancer;
                let id = format!("{}{t}", "w".repeat(100 * (t + 1)));
                let (p, len) = s(&id);
                for _ in 0..rounds {
                    assert_eq!(lb_balancer_add(b, p, len, 1, 0), lb_result::Ok);
                    let mut size = 0;
                    assert_eq!(lb_balancer_id_size_bound(b, &mut size), lb_result::Ok);
                    assert!(
                        size > len,
                        "the bound must fit an id this thread just added"
                    );
                    assert_eq!(lb_balancer_remove(b, p, len), lb_result::Ok);
                }
            });
        }
    });
    assert_eq!(bound(&b), 2);
}

#[test]
fn picks_return_tags_and_copied_ids() {
    let b = abc("round_robin");
    let got: Vec<_> = (0..4).map(|_| pick_id(&b, None).unwrap()).collect();
    assert_eq!(
        got,
        [
            ("a".into(), 10),
            ("b".into(), 11),
            ("c".into(), 12),
            ("a".into(), 10)
        ]
    );
    // Tag only; then everything NULL (the pick still counts).
    let mut tag = 0;
    assert_eq!(
        lb_balancer_pick(b.0, null(), 0, &mut tag, null_mut(), 0, null_mut()),
        lb_result::Ok
    );
    assert_eq!(tag, 11);
    assert_eq!(
        lb_balancer_pick(b.0, null(), 0, null_mut(), null_mut(), 0, null_mut()),
        lb_result::Ok
    );
    // A short buffer: the size needed, nothing else.
    let mut buf = [7 as c_char; 1];
    let (mut size, mut tag) = (0, 99);
    let r = lb_balancer_pick(b.0, null(), 0, &mut tag, buf.as_mut_ptr(), 1, &mut size);
    assert_eq!(
        (r, size, tag, buf[0]),
        (lb_result::BufferTooSmall, 2, 99, 7)
    );
    let r = lb_balancer_pick(b.0, null(), 0, &mut tag, null_mut(), 0, &mut size);
    assert_eq!((r, size, tag), (lb_result::BufferTooSmall, 2, 99));
    // NULL buffer with a length, NULL key with a length, NULL handle.
    assert_eq!(
        lb_balancer_pick(b.0, null(), 0, &mut tag, null_mut(), 8, &mut size),
        lb_result::NullParameter
    );
    assert_eq!(
        lb_balancer_pick(b.0, null(), 3, &mut tag, null_mut(), 0, null_mut()),
        lb_result::NullParameter
    );
    assert_eq!(
        lb_balancer_pick(null(), null(), 0, &mut tag, null_mut(), 0, null_mut()),
        lb_result::NullParameter
    );
    assert_eq!(
        lb_balancer_pick(b.0, null(), usize::MAX, &mut tag, null_mut(), 0, null_mut()),
        lb_result::InvalidLength
    );
    assert_eq!(tag, 99);
}

fn small_ring() -> Handle {
    let mut options = null_mut();
    assert_eq!(lb_options_new(&mut options), lb_result::Ok);
    assert_eq!(
        lb_options_set_int(options, s("vnodes").0, 6, 3),
        lb_result::Ok
    );
    let nodes = [
        node("NodeA", 1, 1),
        node("NodeB", 1, 2),
        node("NodeC", 1, 3),
    ];
    let b = new("ring", options, &nodes).unwrap();
    lb_options_free(options);
    b
}

#[test]
fn keyed_picks_match_the_core_and_need_a_key() {
    let b = small_ring();
    let core = liblb_core::Balancer::new(
        Algorithm::Ring,
        ["NodeA", "NodeB", "NodeC"],
        Options {
            vnodes: 3,
            ..Options::default()
        },
    )
    .unwrap();
    for key in ["Key1", "", "user:42", "今天天气不错啊"] {
        let (id, tag) = pick_id(&b, Some(key)).unwrap();
        assert_eq!(id, core.pick(Some(key.as_bytes())).unwrap().id());
        assert_eq!(tag, id.as_bytes()[4] as u64 - b'A' as u64 + 1);
    }
    assert_eq!(pick_id(&b, Some("Key1")).unwrap().0, "NodeB"); // seed 001's example
    assert_eq!(pick_id(&b, None), Err(lb_result::KeyRequired));
    let mut picks = [lb_pick {
        tag: 0,
        id: null(),
        id_len: 0,
    }; 2];
    let r = lb_balancer_pick_n(b.0, 2, picks.as_mut_ptr(), null_mut(), 0, null_mut());
    assert_eq!(r, lb_result::KeyRequired);
}

fn pick_ids(picks: &[lb_pick]) -> Vec<String> {
    picks
        .iter()
        .map(|p| {
            // SAFETY: `id` points at a NUL-terminated copy in the test's buffer.
            let id = unsafe { CStr::from_ptr(p.id) }.to_str().unwrap();
            assert_eq!(id.len(), p.id_len);
            id.to_string()
        })
        .collect()
}

#[test]
fn pick_many_pick_n_and_attempts_fill_caller_arrays() {
    let b = small_ring();
    let keys_text = ["Key1", "user:42", ""];
    let keys: Vec<lb_key> = keys_text
        .iter()
        .map(|k| lb_key {
            key: k.as_ptr().cast(),
            key_len: k.len(),
        })
        .collect();
    let empty = lb_pick {
        tag: 0,
        id: null(),
        id_len: 0,
    };
    let mut picks = [empty; 3];
    let mut buf = [0 as c_char; 64];
    let mut size = 0;
    let r = lb_balancer_pick_many(
        b.0,
        keys.as_ptr(),
        3,
        picks.as_mut_ptr(),
        buf.as_mut_ptr(),
        buf.len(),
        &mut size,
    );
    assert_eq!(r, lb_result::Ok);
    let ids = pick_ids(&picks);
    let singles: Vec<String> = keys_text
        .iter()
        .map(|k| pick_id(&b, Some(k)).unwrap().0)
        .collect();
    assert_eq!(ids, singles);
    assert_eq!(size, ids.iter().map(|i| i.len() + 1).sum::<usize>());
    // Tags only.
    let mut tags_only = [empty; 3];
    let r = lb_balancer_pick_many(
        b.0,
        keys.as_ptr(),
        3,
        tags_only.as_mut_ptr(),
        null_mut(),
        0,
        null_mut(),
    );
    assert_eq!(r, lb_result::Ok);
    assert!(
        tags_only
            .iter()
            .zip(&picks)
            .all(|(t, p)| t.tag == p.tag && t.id.is_null())
    );
    // Too small: size needed, picks untouched.
    let mut untouched = [empty; 3];
    let r = lb_balancer_pick_many(
        b.0,
        keys.as_ptr(),
        3,
        untouched.as_mut_ptr(),
        buf.as_mut_ptr(),
        5,
        &mut size,
    );
    assert_eq!((r, size), (lb_result::BufferTooSmall, 18));
    assert!(untouched.iter().all(|p| p.id.is_null() && p.tag == 0));
    // Bad keys.
    let null_key = [lb_key {
        key: null(),
        key_len: 1,
    }];
    let r = lb_balancer_pick_many(
        b.0,
        null_key.as_ptr(),
        1,
        untouched.as_mut_ptr(),
        null_mut(),
        0,
        null_mut(),
    );
    assert_eq!(r, lb_result::NullParameter);
    let r = lb_balancer_pick_many(b.0, keys.as_ptr(), 3, null_mut(), null_mut(), 0, null_mut());
    assert_eq!(r, lb_result::NullParameter);
    let r = lb_balancer_pick_many(b.0, null(), 0, null_mut(), null_mut(), 0, null_mut());
    assert_eq!(r, lb_result::Ok);
    // Attempts: distinct, first = pick, count written.
    let mut tries = [empty; 5];
    let mut count = 0;
    let (key, key_len) = s("Key1");
    let r = lb_balancer_attempts(
        b.0,
        key.cast(),
        key_len,
        tries.as_mut_ptr(),
        5,
        buf.as_mut_ptr(),
        buf.len(),
        &mut size,
        &mut count,
    );
    assert_eq!((r, count), (lb_result::Ok, 3));
    let tried = pick_ids(&tries[..count]);
    assert_eq!(tried[0], "NodeB");
    let mut sorted = tried.clone();
    sorted.sort();
    assert_eq!(sorted, ["NodeA", "NodeB", "NodeC"]);
    let r = lb_balancer_attempts(
        b.0,
        key.cast(),
        key_len,
        tries.as_mut_ptr(),
        2,
        buf.as_mut_ptr(),
        buf.len(),
        &mut size,
        null_mut(),
    );
    assert_eq!(r, lb_result::NullParameter);
    let r = lb_balancer_attempts(
        b.0,
        null(),
        0,
        tries.as_mut_ptr(),
        2,
        null_mut(),
        0,
        null_mut(),
        &mut count,
    );
    assert_eq!(r, lb_result::KeyRequired);
    let r = lb_balancer_attempts(
        b.0,
        key.cast(),
        key_len,
        tries.as_mut_ptr(),
        2,
        buf.as_mut_ptr(),
        3,
        &mut size,
        &mut count,
    );
    assert_eq!((r, size, count), (lb_result::BufferTooSmall, 12, 3));
    // pick_n on an unkeyed balancer.
    let rr = abc("round_robin");
    let mut five = [empty; 5];
    let r = lb_balancer_pick_n(
        rr.0,
        5,
        five.as_mut_ptr(),
        buf.as_mut_ptr(),
        buf.len(),
        &mut size,
    );
    assert_eq!((r, size), (lb_result::Ok, 10));
    assert_eq!(pick_ids(&five), ["a", "b", "c", "a", "b"]);
    assert_eq!(five.map(|p| p.tag), [10, 11, 12, 10, 11]);
    let r = lb_balancer_pick_n(rr.0, 5, null_mut(), null_mut(), 0, null_mut());
    assert_eq!(r, lb_result::NullParameter);
}

#[test]
fn picks_stay_valid_while_another_thread_changes_membership() {
    // Two pickers and one updater sharing a `const lb_balancer *`, as the C pthreads test does.
    struct Shared(*mut lb_balancer);
    // SAFETY: the balancer is Send + Sync (a compile-time assertion in the core) and every
    // function used here takes a shared pointer; the handle outlives the scope.
    unsafe impl Sync for Shared {}
    let b = abc("weighted_round_robin");
    let shared = Shared(b.0);
    let rounds = if cfg!(miri) { 20 } else { 2000 };
    std::thread::scope(|scope| {
        for _ in 0..2 {
            scope.spawn(|| {
                let shared = &shared;
                for _ in 0..rounds {
                    let mut buf = [0 as c_char; 8];
                    let (mut tag, mut size) = (0, 0);
                    let r = lb_balancer_pick(
                        shared.0,
                        null(),
                        0,
                        &mut tag,
                        buf.as_mut_ptr(),
                        8,
                        &mut size,
                    );
                    assert_eq!(r, lb_result::Ok);
                    let id = cstr(buf.as_ptr());
                    // Every pick is a node of the set it was drawn from, with that node's tag.
                    assert_eq!(u64::from(id.as_bytes()[0] - b'a') + 10, tag, "{id}");
                }
            });
        }
        scope.spawn(|| {
            let shared = &shared;
            for i in 0..rounds {
                let nodes = if i % 2 == 0 {
                    vec![node("d", 2, 13), node("e", 1, 14)]
                } else {
                    vec![node("a", 1, 10), node("b", 3, 11), node("c", 1, 12)]
                };
                assert_eq!(
                    lb_balancer_update(shared.0, nodes.as_ptr(), nodes.len()),
                    lb_result::Ok
                );
            }
        });
    });
}

#[test]
fn empty_batches_and_huge_counts_fail_like_a_single_pick() {
    // Review finding: `pick_n(0)` / `pick_many` with no keys answered OK where a single pick
    // fails, and a huge count on an empty balancer reserved memory (an abort) before failing.
    let empty = new("round_robin", null(), &[]).unwrap();
    let mut picks = [lb_pick {
        tag: 7,
        id: null(),
        id_len: 0,
    }; 2];
    let pick_n = |b: &Handle, count: usize, picks: &mut [lb_pick]| {
        lb_balancer_pick_n(b.0, count, picks.as_mut_ptr(), null_mut(), 0, null_mut())
    };
    assert_eq!(pick_n(&empty, 0, &mut picks), lb_result::NoNodes);
    assert_eq!(
        lb_balancer_pick_many(empty.0, null(), 0, null_mut(), null_mut(), 0, null_mut()),
        lb_result::NoNodes
    );
    // The largest batch: the pick fails first, so nothing is reserved and nothing is written
    // (the array really has 2 entries).
    assert_eq!(pick_n(&empty, LB_MAX_BATCH, &mut picks), lb_result::NoNodes);
    let largest = isize::MAX as usize / core::mem::size_of::<lb_pick>();
    assert_eq!(
        pick_n(&empty, largest + 1, &mut picks),
        lb_result::BatchTooLarge
    );
    let ring = small_ring();
    assert_eq!(pick_n(&ring, 0, &mut picks), lb_result::KeyRequired);
    assert_eq!(
        pick_n(&ring, LB_MAX_BATCH, &mut picks),
        lb_result::KeyRequired
    );
    assert!(picks.iter().all(|p| p.tag == 7 && p.id.is_null()));
    // Keyed batches with no keys are fine (no key is missing); empty balancers are not.
    assert_eq!(
        lb_balancer_pick_many(ring.0, null(), 0, null_mut(), null_mut(), 0, null_mut()),
        lb_result::Ok
    );
}

#[test]
fn id_sizes_that_overflow_are_invalid_length() {
    // Review finding: on 32-bit targets the ids of one batch or listing can add up past
    // `SIZE_MAX`; the sum must fail, not wrap (and not panic).
    use crate::balancer::ids_size;
    assert_eq!(ids_size([1, 2].into_iter()), Ok(5));
    assert_eq!(ids_size([].into_iter()), Ok(0));
    assert_eq!(ids_size([usize::MAX - 1].into_iter()), Ok(usize::MAX));
    assert_eq!(
        ids_size([usize::MAX].into_iter()),
        Err(lb_result::InvalidLength)
    );
    assert_eq!(
        ids_size([usize::MAX / 2, usize::MAX / 2].into_iter()),
        Err(lb_result::InvalidLength)
    );
}

#[test]
fn zero_length_arrays_never_touch_their_pointer() {
    // Review finding: a non-NULL but misaligned pointer with length 0 reached
    // `slice::from_raw_parts` (undefined behaviour; a debug build aborts). C may pass any
    // pointer with length 0.
    let storage = [0u64; 8];
    let misaligned = storage.as_ptr().cast::<u8>().wrapping_add(1);
    let mut out_storage = [0u64; 8];
    let misaligned_out = out_storage.as_mut_ptr().cast::<u8>().wrapping_add(1);
    let b = abc("round_robin");
    assert_eq!(
        lb_balancer_update(b.0, misaligned.cast::<lb_node>(), 0),
        lb_result::Ok
    );
    assert_eq!(list(&b), []);
    let (name, name_len) = s("random");
    let mut out = null_mut();
    assert_eq!(
        lb_balancer_new(
            name,
            name_len,
            null(),
            misaligned.cast::<lb_node>(),
            0,
            &mut out
        ),
        lb_result::Ok
    );
    let empty = Handle(out);
    let rr = abc("round_robin");
    let r = lb_balancer_pick_many(
        rr.0,
        misaligned.cast::<lb_key>(),
        0,
        misaligned_out.cast::<lb_pick>(),
        null_mut(),
        0,
        null_mut(),
    );
    assert_eq!(r, lb_result::Ok);
    let mut count = usize::MAX;
    let r = lb_balancer_attempts(
        rr.0,
        misaligned.cast(),
        0,
        misaligned_out.cast::<lb_pick>(),
        0,
        null_mut(),
        0,
        null_mut(),
        &mut count,
    );
    assert_eq!((r, count), (lb_result::Ok, 0));
    let mut size = 0;
    let r = lb_balancer_nodes(
        empty.0,
        misaligned_out.cast::<lb_node>(),
        0,
        misaligned_out.cast(),
        0,
        &mut count,
        &mut size,
    );
    assert_eq!((r, count, size), (lb_result::Ok, 0, 0));
}

#[test]
fn an_id_buffer_without_a_size_output_is_a_null_parameter() {
    // Review finding: `id_buf` given but `id_size_out` NULL answered OK and silently left the
    // buffer unwritten. Nothing is picked either: round robin does not move.
    let b = abc("round_robin");
    let mut buf = [0x55 as c_char; 8];
    let mut tag = 99;
    let r = lb_balancer_pick(b.0, null(), 0, &mut tag, buf.as_mut_ptr(), 8, null_mut());
    assert_eq!((r, tag, buf[0]), (lb_result::NullParameter, 99, 0x55));
    let r = lb_balancer_pick(b.0, null(), 0, &mut tag, buf.as_mut_ptr(), 0, null_mut());
    assert_eq!(r, lb_result::NullParameter);
    let r = lb_balancer_pick(b.0, null(), 0, &mut tag, null_mut(), 5, null_mut());
    assert_eq!(r, lb_result::NullParameter);
    let empty = lb_pick {
        tag: 7,
        id: null(),
        id_len: 0,
    };
    let mut picks = [empty; 3];
    let r = lb_balancer_pick_n(b.0, 3, picks.as_mut_ptr(), null_mut(), 99, null_mut());
    assert_eq!(r, lb_result::NullParameter);
    let r = lb_balancer_pick_n(b.0, 3, picks.as_mut_ptr(), buf.as_mut_ptr(), 8, null_mut());
    assert_eq!(r, lb_result::NullParameter);
    let keys = [lb_key {
        key: null(),
        key_len: 0,
    }];
    let r = lb_balancer_pick_many(
        b.0,
        keys.as_ptr(),
        1,
        picks.as_mut_ptr(),
        buf.as_mut_ptr(),
        8,
        null_mut(),
    );
    assert_eq!(r, lb_result::NullParameter);
    let mut count = 0xCCCC;
    let r = lb_balancer_attempts(
        b.0,
        null(),
        0,
        picks.as_mut_ptr(),
        3,
        buf.as_mut_ptr(),
        8,
        null_mut(),
        &mut count,
    );
    assert_eq!((r, count), (lb_result::NullParameter, 0xCCCC));
    assert!(picks.iter().all(|p| p.tag == 7));
    assert_eq!(buf, [0x55; 8]);
    // None of the rejected calls picked: round robin still starts at "a".
    assert_eq!(pick_id(&b, None).unwrap().0, "a");
    // NULL with length 0 and no size output is the tag-only pick; an empty non-NULL buffer
    // with a size output is the size query.
    let r = lb_balancer_pick(b.0, null(), 0, &mut tag, null_mut(), 0, null_mut());
    assert_eq!((r, tag), (lb_result::Ok, 11));
    let mut size = 0;
    let r = lb_balancer_pick(b.0, null(), 0, &mut tag, buf.as_mut_ptr(), 0, &mut size);
    assert_eq!((r, size), (lb_result::BufferTooSmall, 2));
}

#[test]
fn buffer_too_small_still_counts_the_picks() {
    // Documented (lb.h, docs/c.md): a batch or attempts call that fails with
    // LB_RESULT_BUFFER_TOO_SMALL has already picked, so round robin has moved on.
    let b = abc("round_robin");
    let empty = lb_pick {
        tag: 7,
        id: null(),
        id_len: 0,
    };
    let mut picks = [empty; 2];
    let mut buf = [0 as c_char; 1];
    let (mut size, mut count) = (0, 0xCCCC);
    let r = lb_balancer_attempts(
        b.0,
        null(),
        0,
        picks.as_mut_ptr(),
        2,
        buf.as_mut_ptr(),
        1,
        &mut size,
        &mut count,
    );
    assert_eq!((r, size, count), (lb_result::BufferTooSmall, 4, 0xCCCC));
    assert_eq!(pick_id(&b, None).unwrap().0, "b");
    let r = lb_balancer_pick_n(b.0, 2, picks.as_mut_ptr(), buf.as_mut_ptr(), 1, &mut size);
    assert_eq!((r, size), (lb_result::BufferTooSmall, 4));
    assert!(picks.iter().all(|p| p.tag == 7));
    assert_eq!(pick_id(&b, None).unwrap().0, "b");
}

#[test]
fn batches_beyond_lb_max_batch_are_refused_before_anything_is_picked() {
    // Issue 9: a count must never reach an allocation. Above LB_MAX_BATCH the call fails with
    // its own code before the core sees it (the arrays really have 2 entries: nothing may be
    // written), and round robin has not moved.
    let b = abc("round_robin");
    let mut picks = [lb_pick {
        tag: 7,
        id: null(),
        id_len: 0,
    }; 2];
    for count in [LB_MAX_BATCH + 1, 1 << 40] {
        assert_eq!(
            lb_balancer_pick_n(b.0, count, picks.as_mut_ptr(), null_mut(), 0, null_mut()),
            lb_result::BatchTooLarge
        );
    }
    let keys = [lb_key {
        key: null(),
        key_len: 0,
    }; 2];
    assert_eq!(
        lb_balancer_pick_many(
            b.0,
            keys.as_ptr(),
            LB_MAX_BATCH + 1,
            picks.as_mut_ptr(),
            null_mut(),
            0,
            null_mut()
        ),
        lb_result::BatchTooLarge
    );
    assert!(picks.iter().all(|p| p.tag == 7 && p.id.is_null()));
    assert_eq!(pick_id(&b, None).unwrap().0, "a", "nothing was picked");
    assert_eq!(cstr(lb_result_name(105)), "LB_BATCH_TOO_LARGE");
}

// ---------------------------------------------------------------------------------------------
// Feedback and hash picks
// ---------------------------------------------------------------------------------------------

/// Stats as (id, weight, tag, in_flight, requests, failures, latency_ns).
type Stat = (String, u32, u64, usize, u64, u64, u64);

fn stats(b: &Handle) -> Vec<Stat> {
    let (mut count, mut size) = (0usize, 0usize);
    let r = lb_balancer_stats(b.0, null_mut(), 0, null_mut(), 0, &mut count, &mut size);
    if count == 0 {
        assert_eq!(r, lb_result::Ok);
        return Vec::new();
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
    let mut buf = vec![0 as c_char; size];
    // One entry short: too small, nothing written but the sizes.
    let (mut c2, mut s2) = (0, 0);
    let r = lb_balancer_stats(
        b.0,
        out.as_mut_ptr(),
        count - 1,
        buf.as_mut_ptr(),
        size,
        &mut c2,
        &mut s2,
    );
    assert_eq!((r, c2, s2), (lb_result::BufferTooSmall, count, size));
    assert!(out[0].id.is_null(), "written on BUFFER_TOO_SMALL");
    let r = lb_balancer_stats(
        b.0,
        out.as_mut_ptr(),
        count,
        buf.as_mut_ptr(),
        size,
        &mut c2,
        &mut s2,
    );
    assert_eq!((r, c2, s2), (lb_result::Ok, count, size));
    out.iter()
        .map(|n| {
            // SAFETY: `id` points into `buf`, NUL-terminated.
            let id = unsafe { CStr::from_ptr(n.id) }
                .to_str()
                .unwrap()
                .to_string();
            assert_eq!(id.len(), n.id_len);
            let l = n.latency_ns;
            (id, n.weight, n.tag, n.in_flight, n.requests, n.failures, l)
        })
        .collect()
}

/// Acquires a lease (no key) and returns it with its id and tag.
fn acquire(b: &Handle, key: Option<&str>) -> Result<(*mut lb_lease, String, u64), lb_result> {
    let (key, key_len) = key.map_or((null(), 0), |k| (k.as_ptr().cast::<c_void>(), k.len()));
    let mut lease = null_mut();
    let mut tag = u64::MAX;
    let mut buf = [0 as c_char; 16];
    let mut size = usize::MAX;
    let r = lb_balancer_acquire(
        b.0,
        key,
        key_len,
        &mut lease,
        &mut tag,
        buf.as_mut_ptr(),
        buf.len(),
        &mut size,
    );
    if r != lb_result::Ok {
        assert!(lease.is_null(), "lease written on error");
        assert_eq!(tag, u64::MAX, "tag written on error");
        return Err(r);
    }
    Ok((lease, cstr(buf.as_ptr()).to_string(), tag))
}

const NONE: u64 = LB_LATENCY_NONE;

#[test]
fn leases_count_in_flight_requests_and_failures() {
    let b = abc("round_robin");
    assert_eq!(stats(&b)[0], ("a".into(), 1, 10, 0, 0, 0, NONE));
    let (l0, id0, tag0) = acquire(&b, None).unwrap();
    let (l1, id1, _) = acquire(&b, None).unwrap();
    let (l2, _, _) = acquire(&b, None).unwrap();
    assert_eq!((id0.as_str(), tag0, id1.as_str()), ("a", 10, "b"));
    assert!(stats(&b).iter().all(|s| s.3 == 1));
    // The lease names its node.
    let (mut tag, mut buf, mut size) = (0, [0 as c_char; 4], 0);
    let r = lb_lease_node(l1, &mut tag, buf.as_mut_ptr(), buf.len(), &mut size);
    assert_eq!(
        (r, tag, size, cstr(buf.as_ptr())),
        (lb_result::Ok, 11, 2, "b")
    );
    let r = lb_lease_node(l1, &mut tag, buf.as_mut_ptr(), 1, &mut size);
    assert_eq!((r, size), (lb_result::BufferTooSmall, 2));
    let mut elapsed = u64::MAX;
    assert_eq!(lb_lease_elapsed(l0, &mut elapsed), lb_result::Ok);
    assert_ne!(elapsed, u64::MAX);
    // A bad outcome changes nothing and the lease stays the caller's.
    assert_eq!(lb_lease_finish(l0, 7, 1), lb_result::InvalidOutcome);
    assert_eq!(
        lb_lease_finish(l0, LB_OUTCOME_SUCCESS, 5_000_000),
        lb_result::Ok
    );
    assert_eq!(
        lb_lease_finish(l1, LB_OUTCOME_FAILURE, 9_000_000),
        lb_result::Ok
    );
    lb_lease_cancel(l2);
    lb_lease_cancel(null_mut());
    let st = stats(&b);
    assert_eq!(st[0], ("a".into(), 1, 10, 0, 1, 0, 5_000_000));
    // A failure costs at least the failure penalty (5 s by default, failure_penalty_ms).
    assert_eq!(st[1], ("b".into(), 1, 11, 0, 1, 1, 5_000_000_000));
    assert_eq!(st[2], ("c".into(), 1, 12, 0, 0, 0, NONE));
    // report: no in-flight change; unknown ids and bad outcomes record nothing.
    let (id, id_len) = s("c");
    assert_eq!(
        lb_balancer_report(b.0, id, id_len, LB_OUTCOME_FAILURE, 2),
        lb_result::Ok
    );
    let (nope, nope_len) = s("nope");
    let r = lb_balancer_report(b.0, nope, nope_len, LB_OUTCOME_SUCCESS, 2);
    assert_eq!(r, lb_result::UnknownNode);
    assert_eq!(
        lb_balancer_report(b.0, id, id_len, 4, 2),
        lb_result::InvalidOutcome
    );
    assert_eq!(
        lb_balancer_report(null(), id, id_len, 0, 2),
        lb_result::NullParameter
    );
    assert_eq!(stats(&b)[2], ("c".into(), 1, 12, 0, 1, 1, 5_000_000_000));
}

#[test]
fn lease_errors_write_nothing() {
    let b = abc("ring");
    assert_eq!(acquire(&b, None).unwrap_err(), lb_result::KeyRequired);
    let empty = new("round_robin", null(), &[]).unwrap();
    assert_eq!(acquire(&empty, None).unwrap_err(), lb_result::NoNodes);
    let mut lease = null_mut();
    let r = lb_balancer_acquire(
        b.0,
        null(),
        0,
        null_mut(),
        null_mut(),
        null_mut(),
        0,
        null_mut(),
    );
    assert_eq!(r, lb_result::NullParameter);
    let r = lb_balancer_acquire(
        null(),
        null(),
        0,
        &mut lease,
        null_mut(),
        null_mut(),
        0,
        null_mut(),
    );
    assert_eq!(r, lb_result::NullParameter);
    // An id buffer without its size output: refused before picking.
    let mut buf = [0 as c_char; 4];
    let rr = abc("round_robin");
    let r = lb_balancer_acquire(
        rr.0,
        null(),
        0,
        &mut lease,
        null_mut(),
        buf.as_mut_ptr(),
        4,
        null_mut(),
    );
    assert_eq!(r, lb_result::NullParameter);
    // Too small for the id: the lease is cancelled at once, nothing stays in flight.
    let mut size = 0;
    let r = lb_balancer_acquire(
        rr.0,
        null(),
        0,
        &mut lease,
        null_mut(),
        buf.as_mut_ptr(),
        1,
        &mut size,
    );
    assert_eq!((r, size), (lb_result::BufferTooSmall, 2));
    assert!(lease.is_null());
    assert!(stats(&rr).iter().all(|s| s.3 == 0 && s.4 == 0));
    assert_eq!(lb_lease_finish(null_mut(), 0, 0), lb_result::NullParameter);
    let mut ns = 0;
    assert_eq!(lb_lease_elapsed(null(), &mut ns), lb_result::NullParameter);
    let (l, _, _) = acquire(&rr, None).unwrap();
    assert_eq!(lb_lease_elapsed(l, null_mut()), lb_result::NullParameter);
    // Ending a lease after its node is gone, and after the balancer is gone, is harmless.
    let (l2, id2, _) = acquire(&rr, None).unwrap();
    let (id, id_len) = s(&id2);
    assert_eq!(lb_balancer_remove(rr.0, id, id_len), lb_result::Ok);
    assert_eq!(lb_lease_finish(l2, LB_OUTCOME_SUCCESS, 1), lb_result::Ok);
    drop(rr);
    let mut tag = 0;
    assert_eq!(
        lb_lease_node(l, &mut tag, null_mut(), 0, null_mut()),
        lb_result::Ok
    );
    assert_eq!(lb_lease_finish(l, LB_OUTCOME_FAILURE, 1), lb_result::Ok);
}

/// Each node's (status, until_ns), in order.
fn statuses(b: &Handle) -> Vec<(lb_node_status, u64)> {
    let (mut count, mut size) = (0usize, 0usize);
    lb_balancer_stats(b.0, null_mut(), 0, null_mut(), 0, &mut count, &mut size);
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
    let mut buf = vec![0 as c_char; size];
    let r = lb_balancer_stats(
        b.0,
        out.as_mut_ptr(),
        count,
        buf.as_mut_ptr(),
        size,
        &mut count,
        &mut size,
    );
    assert_eq!(r, lb_result::Ok);
    out.iter().map(|n| (n.status, n.until_ns)).collect()
}

fn info(outcome: lb_outcome, latency_ns: u64, retry_after_ns: u64) -> lb_outcome_info {
    lb_outcome_info {
        outcome,
        latency_ns,
        retry_after_ns,
    }
}

fn now(b: &Handle) -> u64 {
    let mut now = 0;
    assert_eq!(lb_balancer_now_ns(b.0, &mut now), lb_result::Ok);
    now
}

#[test]
fn an_overloaded_report_pauses_its_node_and_bad_outcomes_record_nothing() {
    let b = abc("round_robin");
    let (a, a_len) = s("a");
    let before = now(&b);
    let busy = info(LB_OUTCOME_OVERLOADED, NONE, 5_000_000_000);
    assert_eq!(lb_balancer_report_info(b.0, a, a_len, &busy), lb_result::Ok);
    let (status, until) = statuses(&b)[0];
    assert_eq!(status, LB_NODE_OVERLOADED);
    assert!(until >= before + 5_000_000_000 && until <= now(&b) + 5_000_000_000);
    for _ in 0..6 {
        assert_ne!(
            pick_id(&b, None).unwrap().0,
            "a",
            "a paused node was picked"
        );
    }
    // A failure without a latency counts the penalty (5 s), the retry-after when longer.
    assert_eq!(stats(&b)[0], ("a".into(), 1, 10, 0, 1, 1, 5_000_000_000));
    // Refused, recording nothing: a success with a retry-after or without a latency, an
    // unknown code, a NULL info.
    let before = stats(&b);
    for bad in [
        info(LB_OUTCOME_SUCCESS, 1, 0),
        info(LB_OUTCOME_SUCCESS, NONE, NONE),
        info(4, 1, NONE),
    ] {
        let r = lb_balancer_report_info(b.0, a, a_len, &bad);
        assert_eq!(r, lb_result::InvalidOutcome);
    }
    let r = lb_balancer_report(b.0, a, a_len, LB_OUTCOME_SUCCESS, NONE);
    assert_eq!(r, lb_result::InvalidOutcome);
    let r = lb_balancer_report_info(b.0, a, a_len, null());
    assert_eq!(r, lb_result::NullParameter);
    let r = lb_balancer_report_info(null(), a, a_len, &busy);
    assert_eq!(r, lb_result::NullParameter);
    let (nope, nope_len) = s("nope");
    let r = lb_balancer_report_info(b.0, nope, nope_len, &busy);
    assert_eq!(r, lb_result::UnknownNode);
    assert_eq!(stats(&b), before);
    assert_eq!(statuses(&b)[0], (status, until));
}

/// Errors and timeouts extend the failure streak (5 by default); overloaded answers leave it
/// alone.
#[test]
fn timeouts_count_towards_ejection_and_overloaded_answers_do_not() {
    let b = abc("round_robin");
    let (a, a_len) = s("a");
    for _ in 0..4 {
        let r = lb_balancer_report(b.0, a, a_len, LB_OUTCOME_ERROR, 1_000);
        assert_eq!(r, lb_result::Ok);
    }
    for _ in 0..3 {
        let r = lb_balancer_report(b.0, a, a_len, LB_OUTCOME_OVERLOADED, NONE);
        assert_eq!(r, lb_result::Ok);
    }
    assert_eq!(statuses(&b)[0], (LB_NODE_HEALTHY, 0));
    let r = lb_balancer_report(b.0, a, a_len, LB_OUTCOME_TIMEOUT, NONE);
    assert_eq!(r, lb_result::Ok);
    assert_eq!(statuses(&b)[0].0, LB_NODE_EJECTED);
    assert_eq!(stats(&b)[0].5, 8);
}

#[test]
fn leases_finish_with_a_kind_a_retry_after_or_a_measured_latency() {
    let b = abc("round_robin");
    let (l0, id0, _) = acquire(&b, None).unwrap();
    let (l1, _, _) = acquire(&b, None).unwrap();
    let (l2, _, _) = acquire(&b, None).unwrap();
    assert_eq!(id0, "a");
    // Bad outcomes leave the lease open and the caller's.
    let bad = info(LB_OUTCOME_SUCCESS, 1, 1);
    assert_eq!(lb_lease_finish_info(l0, &bad), lb_result::InvalidOutcome);
    assert_eq!(lb_lease_finish_info(l0, null()), lb_result::NullParameter);
    let busy = info(LB_OUTCOME_OVERLOADED, 2_000_000, 10_000_000_000);
    assert_eq!(
        lb_lease_finish_info(null_mut(), &busy),
        lb_result::NullParameter
    );
    assert_eq!(lb_lease_finish(l0, 9, 1), lb_result::InvalidOutcome);
    assert_eq!(stats(&b)[0].3, 1, "still in flight");
    assert_eq!(lb_lease_finish_info(l0, &busy), lb_result::Ok);
    assert_eq!(statuses(&b)[0].0, LB_NODE_OVERLOADED);
    // The retry-after (10 s) is longer than the penalty: it is the sample.
    assert_eq!(stats(&b)[0], ("a".into(), 1, 10, 0, 1, 1, 10_000_000_000));
    // LB_LATENCY_NONE on a lease: measured since acquire, success or failure.
    assert_eq!(lb_lease_finish(l1, LB_OUTCOME_SUCCESS, NONE), lb_result::Ok);
    let measured = stats(&b)[1].6;
    assert!(measured < 60_000_000_000, "measured {measured} ns");
    let timeout = info(LB_OUTCOME_TIMEOUT, NONE, NONE);
    assert_eq!(lb_lease_finish_info(l2, &timeout), lb_result::Ok);
    assert_eq!(stats(&b)[2], ("c".into(), 1, 12, 0, 1, 1, 5_000_000_000));
}

#[test]
fn stats_checks_its_pointers() {
    let b = abc("random");
    let (mut count, mut size) = (0, 0);
    let r = lb_balancer_stats(null(), null_mut(), 0, null_mut(), 0, &mut count, &mut size);
    assert_eq!(r, lb_result::NullParameter);
    let r = lb_balancer_stats(b.0, null_mut(), 0, null_mut(), 0, null_mut(), &mut size);
    assert_eq!(r, lb_result::NullParameter);
    let r = lb_balancer_stats(b.0, null_mut(), 1, null_mut(), 0, &mut count, &mut size);
    assert_eq!(r, lb_result::NullParameter);
    assert_eq!((count, size), (0, 0), "written on error");
    let empty = new("random", null(), &[]).unwrap();
    assert!(stats(&empty).is_empty());
}

#[test]
fn pick_hash_matches_attempts_hash_and_refuses_unhashed_algorithms() {
    let (vn, vn_len) = s("table_size");
    let mut options = null_mut();
    assert_eq!(lb_options_new(&mut options), lb_result::Ok);
    assert_eq!(lb_options_set_int(options, vn, vn_len, 7), lb_result::Ok);
    let nodes = [node("a", 1, 10), node("b", 1, 11), node("c", 1, 12)];
    let b = new("maglev", options, &nodes).unwrap();
    lb_options_free(options);
    for hash in [0, 1, 42, u64::MAX] {
        let (mut tag, mut buf, mut size) = (0, [0 as c_char; 4], 0);
        let r = lb_balancer_pick_hash(b.0, hash, &mut tag, buf.as_mut_ptr(), 4, &mut size);
        assert_eq!(r, lb_result::Ok);
        let mut picks = [lb_pick {
            tag: 0,
            id: null(),
            id_len: 0,
        }; 3];
        let (mut ids, mut ids_size, mut count) = ([0 as c_char; 8], 0, 0);
        let r = lb_balancer_attempts_hash(
            b.0,
            hash,
            picks.as_mut_ptr(),
            3,
            ids.as_mut_ptr(),
            ids.len(),
            &mut ids_size,
            &mut count,
        );
        assert_eq!((r, count, ids_size), (lb_result::Ok, 3, 6));
        assert_eq!(picks[0].tag, tag);
        assert_eq!(cstr(picks[0].id), cstr(buf.as_ptr()));
        let mut all: Vec<u64> = picks.iter().map(|p| p.tag).collect();
        all.sort();
        assert_eq!(all, [10, 11, 12]);
    }
    let rr = abc("round_robin");
    let mut tag = 7;
    let r = lb_balancer_pick_hash(rr.0, 1, &mut tag, null_mut(), 0, null_mut());
    assert_eq!((r, tag), (lb_result::HashUnsupported, 7));
    let mut count = 9;
    let mut picks = [lb_pick {
        tag: 0,
        id: null(),
        id_len: 0,
    }; 1];
    let r = lb_balancer_attempts_hash(
        rr.0,
        1,
        picks.as_mut_ptr(),
        1,
        null_mut(),
        0,
        null_mut(),
        &mut count,
    );
    assert_eq!((r, count), (lb_result::HashUnsupported, 9));
    let r = lb_balancer_pick_hash(null(), 1, &mut tag, null_mut(), 0, null_mut());
    assert_eq!(r, lb_result::NullParameter);
}

// ---------------------------------------------------------------------------------------------
// Localities and priority levels (locality.rs)
// ---------------------------------------------------------------------------------------------

fn located(id: &str, weight: u32, tag: u64, locality: &str, priority: u32) -> lb_located_node {
    lb_located_node {
        id: id.as_ptr().cast(),
        id_len: id.len(),
        weight,
        tag,
        locality: locality.as_ptr().cast(),
        locality_len: locality.len(),
        priority,
    }
}

fn new_located(algorithm: &str, nodes: &[lb_located_node]) -> Result<Handle, lb_result> {
    let (name, name_len) = s(algorithm);
    let mut out = null_mut();
    match lb_balancer_new_located(
        name,
        name_len,
        null(),
        nodes.as_ptr(),
        nodes.len(),
        &mut out,
    ) {
        lb_result::Ok => Ok(Handle(out)),
        err => {
            assert!(out.is_null(), "output written on error");
            Err(err)
        }
    }
}

/// Lists the nodes as (id, weight, tag, locality, priority), checking the sizes reported and
/// that every string is NUL-terminated inside the caller's buffer.
fn places(b: &Handle) -> Vec<(String, u32, u64, String, u32)> {
    let (mut count, mut size) = (0usize, 0usize);
    let r = lb_balancer_located_nodes(b.0, null_mut(), 0, null_mut(), 0, &mut count, &mut size);
    if count == 0 {
        assert_eq!((r, size), (lb_result::Ok, 0));
        return Vec::new();
    }
    assert_eq!(r, lb_result::BufferTooSmall);
    let mut nodes: Vec<lb_located_node> = (0..count).map(|_| located("", 0, 0, "", 0)).collect();
    let mut buf = vec![0x55 as c_char; size];
    let (mut count2, mut size2) = (0, 0);
    let r = lb_balancer_located_nodes(
        b.0,
        nodes.as_mut_ptr(),
        count,
        buf.as_mut_ptr(),
        size,
        &mut count2,
        &mut size2,
    );
    assert_eq!((r, count2, size2), (lb_result::Ok, count, size));
    let range = buf.as_ptr_range();
    let text = |ptr: *const c_char, len: usize| {
        assert!(
            range.contains(&ptr),
            "strings point into the caller's buffer"
        );
        // SAFETY: `ptr` points into `buf`, NUL-terminated, `len` bytes before the NUL.
        let text = unsafe { CStr::from_ptr(ptr) }.to_str().unwrap().to_string();
        assert_eq!(text.len(), len);
        text
    };
    nodes
        .iter()
        .map(|n| {
            let id = text(n.id, n.id_len);
            let locality = text(n.locality, n.locality_len);
            (id, n.weight, n.tag, locality, n.priority)
        })
        .collect()
}

fn place(
    id: &str,
    weight: u32,
    tag: u64,
    locality: &str,
    priority: u32,
) -> (String, u32, u64, String, u32) {
    (id.into(), weight, tag, locality.into(), priority)
}

#[test]
fn located_nodes_carry_their_place_and_bad_ones_change_nothing() {
    let nodes = [
        located("a", 1, 10, "r/za", 0),
        located("b", 2, 11, "r/zb/s", 0),
        lb_located_node {
            locality: null(),
            locality_len: 0,
            ..located("s", 1, 12, "", 1)
        },
    ];
    let b = new_located("round_robin", &nodes).unwrap();
    let before = places(&b);
    assert_eq!(
        before,
        [
            place("a", 1, 10, "r/za", 0),
            place("b", 2, 11, "r/zb/s", 0),
            place("s", 1, 12, "", 1)
        ]
    );
    // The standby at priority 1 takes nothing while level 0 is healthy.
    for _ in 0..4 {
        assert_ne!(pick_id(&b, None).unwrap().0, "s");
    }
    // Constructor errors.
    let four = [located("x", 1, 0, "a/b/c/d", 0)];
    let nul = [located("x", 1, 0, "r\0z", 0)];
    let utf8 = [lb_located_node {
        locality: b"\xc3\x28".as_ptr().cast(),
        locality_len: 2,
        ..located("x", 1, 0, "", 0)
    }];
    let null_locality = [lb_located_node {
        locality: null(),
        locality_len: 3,
        ..located("x", 1, 0, "", 0)
    }];
    assert_eq!(
        new_located("round_robin", &four).err(),
        Some(lb_result::InvalidLocality)
    );
    assert_eq!(
        new_located("round_robin", &nul).err(),
        Some(lb_result::InvalidLocality)
    );
    assert_eq!(
        new_located("round_robin", &utf8).err(),
        Some(lb_result::InvalidUtf8)
    );
    assert_eq!(
        new_located("round_robin", &null_locality).err(),
        Some(lb_result::NullParameter)
    );
    assert_eq!(
        new_located("rr", &nodes).err(),
        Some(lb_result::UnknownAlgorithm)
    );
    // Membership errors leave the places as they were.
    let (c, c_len) = s("c");
    let (r, r_len) = s("r");
    let (bad, bad_len) = s("1/2/3/4");
    assert_eq!(
        lb_balancer_add_located(b.0, c, c_len, 1, 13, bad, bad_len, 0),
        lb_result::InvalidLocality
    );
    assert_eq!(
        lb_balancer_add_located(b.0, c, c_len, 1, 13, b"\xff".as_ptr().cast(), 1, 0),
        lb_result::InvalidUtf8
    );
    assert_eq!(
        lb_balancer_add_located(b.0, c, c_len, 1, 13, null(), 1, 0),
        lb_result::NullParameter
    );
    assert_eq!(
        lb_balancer_add_located(b.0, s("a").0, 1, 1, 13, r, r_len, 0),
        lb_result::DuplicateNode
    );
    assert_eq!(
        lb_balancer_add_located(null(), c, c_len, 1, 13, r, r_len, 0),
        lb_result::NullParameter
    );
    assert_eq!(
        lb_balancer_update_located(b.0, four.as_ptr(), 1),
        lb_result::InvalidLocality
    );
    assert_eq!(
        lb_balancer_update_located(b.0, null(), 1),
        lb_result::NullParameter
    );
    assert_eq!(
        lb_balancer_update_located(b.0, nodes.as_ptr(), usize::MAX / 8),
        lb_result::InvalidLength
    );
    assert_eq!(
        lb_balancer_set_location(b.0, s("zz").0, 2, r, r_len, 0),
        lb_result::UnknownNode
    );
    assert_eq!(
        lb_balancer_set_location(b.0, s("a").0, 1, bad, bad_len, 0),
        lb_result::InvalidLocality
    );
    assert_eq!(
        lb_balancer_set_location(b.0, b"\x80".as_ptr().cast(), 1, r, r_len, 0),
        lb_result::InvalidUtf8
    );
    assert_eq!(
        lb_balancer_set_location(null(), s("a").0, 1, r, r_len, 0),
        lb_result::NullParameter
    );
    assert_eq!(places(&b), before);
    // Successes.
    assert_eq!(
        lb_balancer_add_located(b.0, c, c_len, 3, 13, r, r_len, 2),
        lb_result::Ok
    );
    assert_eq!(
        lb_balancer_set_location(b.0, s("a").0, 1, null(), 0, 4),
        lb_result::Ok
    );
    assert_eq!(places(&b)[0], place("a", 1, 10, "", 4));
    assert_eq!(places(&b)[3], place("c", 3, 13, "r", 2));
    // The plain listing is unchanged in form; the located one feeds update_located back.
    assert_eq!(list(&b).len(), 4);
    let snapshot = places(&b);
    let again: Vec<_> = snapshot
        .iter()
        .map(|(id, w, t, l, p)| located(id, *w, *t, l, *p))
        .collect();
    assert_eq!(
        lb_balancer_update_located(b.0, again.as_ptr(), again.len()),
        lb_result::Ok
    );
    assert_eq!(places(&b), snapshot);
    // A plain update puts the nodes back in "" at priority 0.
    let plain = [node("p", 1, 7)];
    assert_eq!(lb_balancer_update(b.0, plain.as_ptr(), 1), lb_result::Ok);
    assert_eq!(places(&b), [place("p", 1, 7, "", 0)]);
    // The id size bound follows located adds too.
    let long = "l".repeat(40);
    assert_eq!(
        lb_balancer_add_located(b.0, s(&long).0, long.len(), 1, 0, r, r_len, 0),
        lb_result::Ok
    );
    assert_eq!(bound(&b), 41);
}

#[test]
fn located_listing_checks_its_buffers() {
    let b = new_located("random", &[located("a", 1, 1, "r/z", 0)]).unwrap();
    let mut nodes = [located("", 0, 0, "", 0); 2];
    let mut buf = [0 as c_char; 16];
    let (mut count, mut size) = (usize::MAX, usize::MAX);
    // "a\0" + "r/z\0": 6 bytes.
    let r = lb_balancer_located_nodes(
        b.0,
        nodes.as_mut_ptr(),
        2,
        buf.as_mut_ptr(),
        5,
        &mut count,
        &mut size,
    );
    assert_eq!((r, count, size), (lb_result::BufferTooSmall, 1, 6));
    let r = lb_balancer_located_nodes(
        b.0,
        nodes.as_mut_ptr(),
        0,
        buf.as_mut_ptr(),
        16,
        &mut count,
        &mut size,
    );
    assert_eq!((r, count, size), (lb_result::BufferTooSmall, 1, 6));
    let (mut count, mut size) = (usize::MAX, usize::MAX);
    for r in [
        lb_balancer_located_nodes(
            null(),
            nodes.as_mut_ptr(),
            2,
            buf.as_mut_ptr(),
            16,
            &mut count,
            &mut size,
        ),
        lb_balancer_located_nodes(
            b.0,
            nodes.as_mut_ptr(),
            2,
            buf.as_mut_ptr(),
            16,
            null_mut(),
            &mut size,
        ),
        lb_balancer_located_nodes(
            b.0,
            nodes.as_mut_ptr(),
            2,
            buf.as_mut_ptr(),
            16,
            &mut count,
            null_mut(),
        ),
        lb_balancer_located_nodes(
            b.0,
            null_mut(),
            2,
            buf.as_mut_ptr(),
            16,
            &mut count,
            &mut size,
        ),
        lb_balancer_located_nodes(
            b.0,
            nodes.as_mut_ptr(),
            2,
            null_mut(),
            16,
            &mut count,
            &mut size,
        ),
    ] {
        assert_eq!(r, lb_result::NullParameter);
    }
    let r = lb_balancer_located_nodes(
        b.0,
        nodes.as_mut_ptr(),
        usize::MAX,
        buf.as_mut_ptr(),
        16,
        &mut count,
        &mut size,
    );
    assert_eq!(r, lb_result::InvalidLength);
    assert_eq!(
        (count, size),
        (usize::MAX, usize::MAX),
        "nothing written on error"
    );
    let r = lb_balancer_located_nodes(
        b.0,
        nodes.as_mut_ptr(),
        2,
        buf.as_mut_ptr(),
        16,
        &mut count,
        &mut size,
    );
    assert_eq!((r, count, size), (lb_result::Ok, 1, 6));
    // Zero-length arrays are never looked at, whatever the pointer.
    let storage = [0u64; 4];
    let misaligned = storage.as_ptr().cast::<u8>().wrapping_add(1);
    assert_eq!(
        lb_balancer_update_located(b.0, misaligned.cast(), 0),
        lb_result::Ok
    );
    assert_eq!(
        lb_balancer_set_locality_weights(b.0, misaligned.cast(), 0),
        lb_result::Ok
    );
    assert_eq!(
        lb_balancer_set_local_localities(b.0, misaligned.cast(), 0),
        lb_result::Ok
    );
    assert_eq!(places(&b), []);
}

#[test]
fn locality_routing_setters_validate_and_reach_the_core() {
    let b = new_located(
        "round_robin",
        &[located("a0", 1, 0, "r/a", 0), located("b0", 1, 1, "r/b", 0)],
    )
    .unwrap();
    let weight = |locality: &'static str, weight: u32| lb_locality_weight {
        locality: locality.as_ptr().cast(),
        locality_len: locality.len(),
        weight,
    };
    let count = |locality: &'static str, count: u64| lb_locality_count {
        locality: locality.as_ptr().cast(),
        locality_len: locality.len(),
        count,
    };
    let only_b = [weight("r/b", 1)];
    assert_eq!(
        lb_balancer_set_locality_weights(b.0, only_b.as_ptr(), 1),
        lb_result::Ok
    );
    let routing = || {
        // SAFETY: the handle is live for the test.
        unsafe { &*b.0.cast::<crate::balancer::FfiBalancer>() }.routing()
    };
    let before = routing();
    assert_eq!(before.locality_weights, [("r/b".into(), 1)]);
    let bad = [weight("r/a", 1), weight("a/b/c/d", 1)];
    let utf8 = [lb_locality_weight {
        locality: b"\xff".as_ptr().cast(),
        locality_len: 1,
        weight: 1,
    }];
    let (loc, loc_len) = s("r/a");
    let (bad_loc, bad_loc_len) = s("a/b/c/d");
    let spread = [count("r/a", 2), count("", 1)];
    let bad_spread = [count("r\0a", 2)];
    for (r, want) in [
        (
            lb_balancer_set_locality_weights(b.0, bad.as_ptr(), 2),
            lb_result::InvalidLocality,
        ),
        (
            lb_balancer_set_locality_weights(b.0, utf8.as_ptr(), 1),
            lb_result::InvalidUtf8,
        ),
        (
            lb_balancer_set_locality_weights(b.0, null(), 1),
            lb_result::NullParameter,
        ),
        (
            lb_balancer_set_locality_weights(null(), only_b.as_ptr(), 1),
            lb_result::NullParameter,
        ),
        (
            lb_balancer_set_local_locality(b.0, bad_loc, bad_loc_len),
            lb_result::InvalidLocality,
        ),
        (
            lb_balancer_set_local_locality(b.0, b"\xc3".as_ptr().cast(), 1),
            lb_result::InvalidUtf8,
        ),
        (
            lb_balancer_set_local_locality(b.0, null(), 1),
            lb_result::NullParameter,
        ),
        (
            lb_balancer_set_local_locality(null(), loc, loc_len),
            lb_result::NullParameter,
        ),
        (
            lb_balancer_clear_local_locality(null()),
            lb_result::NullParameter,
        ),
        (
            lb_balancer_set_local_localities(b.0, bad_spread.as_ptr(), 1),
            lb_result::InvalidLocality,
        ),
        (
            lb_balancer_set_local_localities(b.0, null(), 2),
            lb_result::NullParameter,
        ),
        (
            lb_balancer_set_local_localities(b.0, spread.as_ptr(), usize::MAX),
            lb_result::InvalidLength,
        ),
        (
            lb_balancer_set_local_localities(null(), spread.as_ptr(), 2),
            lb_result::NullParameter,
        ),
    ] {
        assert_eq!(r, want);
    }
    assert_eq!(routing(), before, "failed calls change no routing");
    // NULL with 0 is the unnamed locality; only clear unsets it.
    assert_eq!(
        lb_balancer_set_local_locality(b.0, null(), 0),
        lb_result::Ok
    );
    assert_eq!(routing().local_locality.as_deref(), Some(""));
    assert_eq!(
        lb_balancer_set_local_localities(b.0, spread.as_ptr(), 2),
        lb_result::Ok
    );
    assert_eq!(
        routing().local_localities,
        [("r/a".into(), 2), ("".into(), 1)]
    );
    assert_eq!(lb_balancer_clear_local_locality(b.0), lb_result::Ok);
    assert_eq!(routing().local_locality, None);
    assert_eq!(
        lb_balancer_set_locality_weights(b.0, null(), 0),
        lb_result::Ok
    );
    assert!(routing().locality_weights.is_empty());
}

/// `lb_balancer_subset` under Miri: the two-call protocol, short buffers written nowhere but
/// the sizes, and the subset the options chose by name (deterministic subsetting, 3 of 6).
#[test]
fn subset_lists_the_client_subset_through_caller_buffers() {
    let mut options = null_mut();
    assert_eq!(lb_options_new(&mut options), lb_result::Ok);
    for (name, value) in [("subset", "deterministic"), ("subset_size", "3")] {
        let (n, l) = s(name);
        let (v, vl) = s(value);
        assert_eq!(lb_options_set_str(options, n, l, v, vl), lb_result::Ok);
    }
    let ids = ["a", "b", "c", "d", "e", "f"];
    let nodes: Vec<lb_node> = (0..6).map(|i| node(ids[i], 1, i as u64)).collect();
    let b = new("round_robin", options, &nodes).unwrap();
    lb_options_free(options);
    let (mut count, mut size) = (usize::MAX, usize::MAX);
    let r = lb_balancer_subset(b.0, null_mut(), 0, null_mut(), 0, &mut count, &mut size);
    assert_eq!((r, count, size), (lb_result::BufferTooSmall, 3, 6));
    let blank = lb_pick {
        tag: u64::MAX,
        id: null(),
        id_len: 0,
    };
    let mut picks = [blank; 3];
    let mut buf = [0x55 as c_char; 6];
    let r = lb_balancer_subset(
        b.0,
        picks.as_mut_ptr(),
        3,
        buf.as_mut_ptr(),
        5,
        &mut count,
        &mut size,
    );
    assert_eq!((r, count, size), (lb_result::BufferTooSmall, 3, 6));
    assert!(
        picks.iter().all(|p| p.tag == u64::MAX),
        "entries written on error"
    );
    let r = lb_balancer_subset(
        b.0,
        picks.as_mut_ptr(),
        3,
        buf.as_mut_ptr(),
        6,
        &mut count,
        &mut size,
    );
    assert_eq!((r, count, size), (lb_result::Ok, 3, 6));
    let listed: Vec<&str> = picks.iter().map(|p| cstr(p.id)).collect();
    assert!(picks.windows(2).all(|w| w[0].tag < w[1].tag), "node order");
    for p in &picks {
        assert_eq!(cstr(p.id), ids[p.tag as usize]);
    }
    let mut o = Options::default();
    o.set("subset", OptionValue::Str("deterministic")).unwrap();
    o.set("subset_size", OptionValue::Int(3)).unwrap();
    let core = liblb_core::Balancer::new(Algorithm::RoundRobin, ids.map(|id| (id, 1)), o);
    let members: Vec<String> = core.unwrap().subset().ids().map(String::from).collect();
    assert_eq!(listed, members, "the core's subset");
    for _ in 0..10 {
        let (id, _) = pick_id(&b, None).unwrap();
        assert!(listed.contains(&id.as_str()));
    }
    assert_eq!(
        lb_balancer_subset(
            null(),
            picks.as_mut_ptr(),
            3,
            buf.as_mut_ptr(),
            6,
            &mut count,
            &mut size
        ),
        lb_result::NullParameter
    );
    assert_eq!(
        lb_balancer_subset(
            b.0,
            picks.as_mut_ptr(),
            3,
            buf.as_mut_ptr(),
            6,
            null_mut(),
            &mut size
        ),
        lb_result::NullParameter
    );
}
