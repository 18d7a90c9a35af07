//! `round_robin`: the next node in insertion order.
//!
//! Source: seed 000 "完全轮询" (FullRound) and seed 002's first strategy. Where FullRound keeps
//! a plain `static int index` (a data race under threads), here the position is one atomic
//! counter shared by the balancer: `fetch_add(1, Relaxed) % n`, no lock. The counter lives in
//! the balancer's [`State`], not in the table, so the position survives membership updates.
//! `attempts` takes one position and returns the following distinct nodes, so a retry does not
//! skew the rotation. Cost: one atomic add and one division per pick.
//!
//! Option `thread_rounds` (default 0): one exact global order needs one shared counter, which
//! threads contend for pick by pick (2 threads measured 0.93x the throughput of one). With
//! `thread_rounds = r` each thread takes `r` whole rounds of positions at once and serves them
//! itself: shares stay exact over every block (every node once per round), a single thread
//! still sees the global order, but concurrent threads interleave blocks rather than
//! positions.

use super::Ctx;
use super::Select;
use crate::{Node, Options};
use alloc::vec::Vec;

pub(crate) struct RoundRobin {
    /// Active node indices, in insertion order.
    active: Vec<u32>,
    /// Positions a thread takes at once (`thread_rounds` x n); 0 = one exact global order.
    block: u64,
}

impl RoundRobin {
    pub(crate) fn new(active: Vec<u32>) -> RoundRobin {
        RoundRobin { active, block: 0 }
    }
}

impl Select for RoundRobin {
    fn build(_nodes: &[Node], active: Vec<u32>, options: &Options) -> RoundRobin {
        let block = u64::from(options.thread_rounds) * active.len() as u64;
        RoundRobin {
            block,
            ..RoundRobin::new(active)
        }
    }

    #[inline]
    fn pick(&self, _key: &[u8], ctx: &Ctx<'_>) -> u32 {
        let n = self.active.len() as u64;
        self.active[(ctx.next_position(self.block) % n) as usize]
    }

    fn attempts(&self, _key: &[u8], ctx: &Ctx<'_>, limit: usize, out: &mut Vec<u32>) {
        let n = self.active.len();
        let start = (ctx.next_position(self.block) % n as u64) as usize;
        out.extend((0..limit.min(n)).map(|i| self.active[(start + i) % n]));
    }
}
