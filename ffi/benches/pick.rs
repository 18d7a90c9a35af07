//! What the C boundary costs: `lb_balancer_pick` (panic boundary, NULL checks, out-pointer
//! writes) against the core's own `Balancer::pick`, on the same balancer, in the same run.
//!
//! `cargo bench -p liblb-ffi --bench pick` (release profile; not part of the test command).
//! A plain timing harness (no criterion, so the workspace needs no extra dependency), built for
//! a noisy shared machine: the variants (an opaque-call floor, the core, the C pick with a tag,
//! the C pick with a tag and the id) are measured in interleaved rounds of 2^18 picks, 31
//! rounds, so interference hits them alike; the table gives each variant's fastest round and
//! the median over rounds of the per-round difference to the core. The results are in
//! docs/benchmarks-c.md; tests/c/bench_pick.c measures the same call from C through liblb.so.

use core::ffi::c_char;
use core::ptr::{null, null_mut};
use lb::*;
use liblb_core::{Algorithm, Balancer, Node, Options};
use std::hint::black_box;
use std::time::Instant;

const ROUNDS: usize = 31;
const ITERS: usize = 1 << 18;

/// ns per call of `f` (one pick per call) over one sample of `ITERS` calls.
fn sample(f: &mut impl FnMut(usize) -> u64) -> f64 {
    let start = Instant::now();
    let mut sink = 0u64;
    for i in 0..ITERS {
        sink = sink.wrapping_add(f(i));
    }
    black_box(sink);
    start.elapsed().as_nanos() as f64 / ITERS as f64
}

/// `lb_balancer_pick`'s signature.
type PickFn = extern "C" fn(
    *const lb_balancer,
    *const core::ffi::c_void,
    usize,
    *mut u64,
    *mut c_char,
    usize,
    *mut usize,
) -> lb_result;

/// The floor any C entry point pays: an opaque (never inlined) `extern "C"` call with
/// `lb_balancer_pick`'s signature that only writes the tag.
#[inline(never)]
extern "C" fn opaque_call(
    _balancer: *const lb_balancer,
    _key: *const core::ffi::c_void,
    key_len: usize,
    tag_out: *mut u64,
    _id_buf: *mut c_char,
    _id_buf_len: usize,
    _id_size_out: *mut usize,
) -> lb_result {
    // SAFETY: the bench passes a valid `tag_out`.
    unsafe { *tag_out = key_len as u64 };
    lb_result::Ok
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v[v.len() / 2]
}

fn min(v: &[f64]) -> f64 {
    v.iter().copied().fold(f64::INFINITY, f64::min)
}

fn main() {
    let ids: Vec<String> = (0..16).map(|i| format!("10.0.0.{i}:8080")).collect();
    let keys: Vec<String> = (0..1024).map(|i| format!("user-{i}")).collect();
    println!(
        "| algorithm | core `Balancer::pick` (ns, best round) | `lb_balancer_pick`, tag (ns) | \
         tag + id copy (ns) | overhead, tag (ns, median paired) | overhead, tag + id (ns) | \
         opaque extern \"C\" call floor (ns) |"
    );
    println!("|---|---|---|---|---|---|---|");
    for algorithm in Algorithm::ALL {
        let nodes: Vec<Node> = ids
            .iter()
            .enumerate()
            .map(|(i, id)| Node::with_tag(id.as_str(), 1 + (i as u32 % 3), i as u64))
            .collect();
        let options = Options {
            seed: Some(1),
            ..Options::default()
        };
        let core = Balancer::new(algorithm, nodes.clone(), options).unwrap();
        let c_nodes: Vec<lb_node> = nodes
            .iter()
            .map(|n| lb_node {
                id: n.id.as_ptr().cast(),
                id_len: n.id.len(),
                weight: n.weight,
                tag: n.tag,
            })
            .collect();
        let mut handle = null_mut();
        let name = algorithm.name();
        let mut c_options = null_mut();
        assert_eq!(lb_options_new(&mut c_options), lb_result::Ok);
        assert_eq!(
            lb_options_set_int(c_options, c"seed".as_ptr(), 4, 1),
            lb_result::Ok
        );
        let r = lb_balancer_new(
            name.as_ptr().cast(),
            name.len(),
            c_options,
            c_nodes.as_ptr(),
            c_nodes.len(),
            &mut handle,
        );
        assert_eq!(r, lb_result::Ok);
        lb_options_free(c_options);
        let handle = handle.cast_const();
        let keyed = algorithm.is_keyed();
        let key = |i: usize| keyed.then(|| keys[i % keys.len()].as_bytes());

        let mut core_pick = |i: usize| core.pick(black_box(key(i))).unwrap().tag();
        let mut c_tag = |i: usize| {
            let (kp, kl) = key(i).map_or((null(), 0), |k| (k.as_ptr().cast(), k.len()));
            let mut tag = 0;
            let r = lb_balancer_pick(
                black_box(handle),
                kp,
                kl,
                &mut tag,
                null_mut(),
                0,
                null_mut(),
            );
            debug_assert_eq!(r, lb_result::Ok);
            tag
        };
        let mut c_id = |i: usize| {
            let (kp, kl) = key(i).map_or((null(), 0), |k| (k.as_ptr().cast(), k.len()));
            let mut tag = 0;
            let mut buf = [0 as c_char; 32];
            let mut size = 0;
            let r = lb_balancer_pick(
                black_box(handle),
                kp,
                kl,
                &mut tag,
                buf.as_mut_ptr(),
                buf.len(),
                &mut size,
            );
            debug_assert_eq!(r, lb_result::Ok);
            tag ^ black_box(buf)[0] as u64
        };
        let mut floor = |i: usize| {
            let (kp, kl) = key(i).map_or((null(), 0), |k| (k.as_ptr().cast(), k.len()));
            let mut tag = 0;
            let call: PickFn = black_box(opaque_call);
            call(
                black_box(handle),
                kp,
                kl,
                &mut tag,
                null_mut(),
                0,
                null_mut(),
            );
            tag
        };
        let (mut core_ns, mut tag_ns, mut id_ns, mut floor_ns) = (vec![], vec![], vec![], vec![]);
        for _ in 0..ROUNDS {
            floor_ns.push(sample(&mut floor));
            core_ns.push(sample(&mut core_pick));
            tag_ns.push(sample(&mut c_tag));
            id_ns.push(sample(&mut c_id));
        }
        let tag_overhead = median(tag_ns.iter().zip(&core_ns).map(|(c, r)| c - r).collect());
        let id_overhead = median(id_ns.iter().zip(&core_ns).map(|(c, r)| c - r).collect());
        println!(
            "| {name} | {:.2} | {:.2} | {:.2} | {tag_overhead:+.2} | {id_overhead:+.2} | {:.2} |",
            min(&core_ns),
            min(&tag_ns),
            min(&id_ns),
            min(&floor_ns),
        );
        lb_balancer_free(handle.cast_mut());
    }
}
