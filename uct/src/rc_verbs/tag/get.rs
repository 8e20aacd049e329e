//! Split gets: the receiving side of a rendezvous that went unexpected.
//!
//! A rendezvous announcement that finds no posted receive goes up as unexpected, and the layer
//! above reads the data itself with `get_zcopy` once its receive is posted (ucp's software
//! rendezvous). The interface remembers the last [`UNEXP_REMEMBERED`] such announcements
//! (endpoint, address, rkey, length, the sender's operation id). A `get_zcopy` on the same
//! endpoint of exactly one remembered announcement's data, of at least
//! `RUCX_RC_TM_RNDV_SPLIT` bytes, into a one-piece buffer is then moved as a matched one is
//! (`tag/mod.rs`, split rendezvous): the sender's interface writes the tail (it still holds the
//! operation: the layer above cancels it only after this get completed) while the head is
//! read; the get completes when the READ has completed and the sender's report has come. A
//! sender that no longer holds the operation (a stale announcement: it reused the buffer for a
//! rendezvous the transport never saw) writes nothing and says so, and the tail is then read
//! here too, so the get never fails for it, and the stale entry is gone. Several
//! announcements of the same data may be live at once (a sender sending one buffer again and
//! again, as perftest's tag_bw does): a get takes the oldest, which ucp reads first. Keeping
//! only the newest of them measured 20% slower at 64 KiB (tag_bw, offload on, 40.5 against
//! 49.1 MB/s alternating in one boot): the later gets found none and read it all.
//!
//! Why: with a window of receives reposted as the earlier ones complete (MPI codes, tag_bw),
//! the next announcement often arrives before its receive is posted: `tag_bw` 64 KiB with 16
//! receives ahead matched 82 of 320 rendezvous in the transport (`tag_offload_stats`), so most
//! were read by one READ on the receiver's CPU alone. The split is the transport's business
//! only; the get's contract (data in place, then one completion) does not change.
//!
//! A split get's slot carries [`GET_SLOT`] in its `TxKind::TagRead` and in the write request,
//! so completions and reports find it beside the matched rendezvous' READs.

use super::state::{SplitGet, TailRead, Unexp, GET_SLOT, UNEXP_REMEMBERED};
use super::wire::PutReqHdr;
use crate::ep::CompletionId;
use crate::md::{Iov, RemoteKey};
use crate::rc_verbs::ffi::{self, ibv_send_wr, ibv_sge};
use crate::rc_verbs::mem_of;
use crate::rc_verbs::state::{Inner, TxKind};
use ucs::{Error, Outcome, Result};

impl Inner {
    /// Remembers unexpected announcement `u` (forgetting the oldest when full).
    pub(super) fn tag_remember_unexp(&mut self, u: Unexp) {
        if u.length < self.cfg.tm_split {
            return;
        }
        let q = &mut self.tag.unexp;
        if q.len() == UNEXP_REMEMBERED {
            q.pop_front();
        }
        q.push_back(u);
    }

    /// `get_zcopy` of `len` bytes at `remote_addr`/`rkey` into `iov` on endpoint `key`: when it
    /// reads exactly a remembered announcement's data and can be split now, posts the write
    /// request and the READ of the head and gives `Some`; `None`: the caller reads it all.
    pub(in crate::rc_verbs) fn tag_split_get(
        &mut self,
        key: usize,
        iov: &[Iov<'_>],
        remote_addr: u64,
        remote_key: &RemoteKey,
        comp: CompletionId,
    ) -> Result<Option<Outcome>> {
        let [v] = iov else {
            return Ok(None);
        };
        let len = v.len() as u64;
        if self.tag.unexp.is_empty() || len < self.cfg.tm_split || len > u32::MAX as u64 {
            return Ok(None);
        }
        let rkey = remote_key.tl_value as u32;
        let gen = self.eps[key].gen;
        let Some(i) =
            self.tag.unexp.iter().position(|u| {
                u.key == key && u.gen == gen && u.addr == remote_addr && u.rkey == rkey
            })
        else {
            return Ok(None);
        };
        if self.tag.unexp[i].length != len {
            return Ok(None);
        }
        remote_key.check(remote_addr, len as usize)?;
        let ep = &self.eps[key];
        ep.status()?;
        if !ep.pending.is_empty() || ep.sq_avail < 2 || ep.am_credits() == 0 {
            return Ok(None);
        }
        let mem = mem_of(v.memh(), self.md_name)?;
        let (lkey, local_rkey) = (mem.lkey(), mem.rkey());
        // The head ends on a page boundary (READ responses then fill whole pages).
        let head = (len / 2) & !4095;
        if head == 0 {
            return Ok(None);
        }
        let Some(u) = self.tag.unexp.remove(i) else {
            return Ok(None);
        };
        let slot = self.tag.gets.insert(SplitGet {
            comp,
            op_id: u.op_id,
            key,
            gen,
            reads_out: 1,
            report_due: true,
            tail: TailRead {
                local: v.ptr() as u64 + head,
                lkey,
                remote: remote_addr + head,
                rkey,
                len: (len - head) as u32,
            },
        }) as u32;
        let req = PutReqHdr {
            op_id: u.op_id,
            offset: head,
            length: len - head,
            addr: v.ptr() as u64 + head,
            rkey: local_rkey,
            slot: slot | GET_SLOT,
        }
        .encode();
        if let Err(e) = self.post_inline_am(key, &req) {
            self.fail_ep(key, e.clone());
            self.tag.gets.remove(slot as usize);
            return Err(e);
        }
        let mut sge = ibv_sge {
            addr: v.ptr() as u64,
            length: head as u32,
            lkey,
        };
        let mut wr = ibv_send_wr {
            sg_list: &mut sge,
            num_sge: 1,
            opcode: ffi::IBV_WR_RDMA_READ,
            ..Default::default()
        };
        wr.set_rdma(remote_addr, rkey);
        if let Err(e) = self.post(key, &mut wr, TxKind::TagRead(slot | GET_SLOT), true) {
            self.fail_ep(key, e.clone());
            self.tag.gets.remove(slot as usize);
            return Err(e);
        }
        self.tag.split_gets += 1;
        Ok(Some(Outcome::InProgress))
    }

    /// A READ of split get `slot` completed (or failed with `err`).
    pub(super) fn tag_get_read_done(&mut self, slot: usize, err: Option<Error>) {
        let Some(g) = self.tag.gets.get_mut(slot) else {
            return;
        };
        if let Some(e) = err {
            return self.tag_get_finish(slot, Err(e));
        }
        g.reads_out = g.reads_out.saturating_sub(1);
        if g.reads_out == 0 && !g.report_due {
            self.tag_get_finish(slot, Ok(0));
        }
    }

    /// The sender's report on the tail of split get `slot` (`ok`: it wrote it). When it could
    /// not (it no longer holds the operation: a stale announcement), the tail is read here.
    pub(super) fn tag_get_put_done(
        &mut self,
        slot: usize,
        key: usize,
        gen: u16,
        op_id: u64,
        ok: bool,
    ) {
        let Some(g) = self.tag.gets.get_mut(slot) else {
            return;
        };
        if g.op_id != op_id || g.key != key || g.gen != gen || !g.report_due {
            return;
        }
        g.report_due = false;
        if !ok {
            self.tag_get_read_tail(slot);
        } else if g.reads_out == 0 {
            self.tag_get_finish(slot, Ok(0));
        }
    }

    /// Posts the READ of split get `slot`'s tail, or queues it until the endpoint has a send
    /// slot.
    pub(super) fn tag_get_read_tail(&mut self, slot: usize) {
        let Some(g) = self.tag.gets.get(slot) else {
            return;
        };
        let (key, gen, t) = (g.key, g.gen, g.tail);
        let ready = match self.ep(key, gen) {
            None => Err(Error::ConnectionReset(
                "the endpoint of a split get was closed".into(),
            )),
            Some(ep) => match &ep.failed {
                Some(e) => Err(e.clone()),
                None => Ok(ep.sq_avail > 0),
            },
        };
        match ready {
            Err(e) => return self.tag_get_finish(slot, Err(e)),
            Ok(false) => {
                self.tag.gets_waiting.push_back(slot);
                self.eps_attention = true;
                return;
            }
            Ok(true) => {}
        }
        let mut sge = ibv_sge {
            addr: t.local,
            length: t.len,
            lkey: t.lkey,
        };
        let mut wr = ibv_send_wr {
            sg_list: &mut sge,
            num_sge: 1,
            opcode: ffi::IBV_WR_RDMA_READ,
            ..Default::default()
        };
        wr.set_rdma(t.remote, t.rkey);
        let kind = TxKind::TagRead(slot as u32 | GET_SLOT);
        match self.post(key, &mut wr, kind, true) {
            Ok(()) => {
                if let Some(g) = self.tag.gets.get_mut(slot) {
                    g.reads_out += 1;
                }
            }
            Err(e) => {
                self.fail_ep(key, e.clone());
                self.tag_get_finish(slot, Err(e));
            }
        }
    }

    /// Completes split get `slot` with `res`.
    fn tag_get_finish(&mut self, slot: usize, res: Result<u64>) {
        let Some(g) = self.tag.gets.try_remove(slot) else {
            return;
        };
        if !self.tag.gets_waiting.is_empty() {
            self.tag.gets_waiting.retain(|&s| s != slot);
        }
        self.tag.comps.push_back((g.comp, res));
        self.eps_attention = true;
    }

    /// Endpoint `key`/`gen` failed with `err`: its split gets with no READ in flight (waiting
    /// for a report or a send slot that will not come) complete with the error; it forgets its
    /// announcements. Those with a READ in flight complete on its flushed completion.
    pub(super) fn tag_gets_ep_failed(&mut self, key: usize, gen: u16, err: &Error) {
        self.tag.unexp.retain(|u| !(u.key == key && u.gen == gen));
        while let Some(slot) = self
            .tag
            .gets
            .iter()
            .find(|(_, g)| g.key == key && g.gen == gen && g.reads_out == 0)
            .map(|(slot, _)| slot)
        {
            self.tag_get_finish(slot, Err(err.clone()));
        }
    }

    /// Endpoint `key`/`gen` is being dropped: its split gets go without completion (as its
    /// other operations do), its announcements are forgotten.
    pub(super) fn tag_gets_ep_gone(&mut self, key: usize, gen: u16) {
        self.tag.unexp.retain(|u| !(u.key == key && u.gen == gen));
        self.tag.gets.retain(|_, g| !(g.key == key && g.gen == gen));
        let gets = &self.tag.gets;
        self.tag.gets_waiting.retain(|&s| gets.contains(s));
    }
}
