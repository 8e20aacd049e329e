//! The worker's request slots: a vector of [`Req`]s that are reused in place, with a stack of
//! vacant ones.
//!
//! It offers what the worker used from `slab::Slab` (get, index, remove, iterate), plus the two
//! calls of the data path, which move no whole request: [`ReqTable::insert_with`] writes a new
//! request's fields into a vacant slot, and [`ReqTable::take_done`] moves a finished request's
//! result out and marks its slot vacant. A vacant slot keeps `VACANT` in its generation (so no
//! handle or wire id matches it), no result, `Notify::Take` and an empty kind.
#![cfg_attr(
    not(test),
    deny(
        clippy::unwrap_used,
        clippy::expect_used,
        clippy::unreachable,
        clippy::panic
    )
)]

use crate::request::{Completion, Received};
use crate::worker::req::{Done, Notify, Req, ReqKind};

/// Generation bit of a vacant slot. Generations use the low 28 bits (see `Core::new_req`), so
/// no live request's generation, handle or wire id has it.
const VACANT: u32 = 1 << 30;

/// What [`ReqTable::take_recv`] found.
pub(crate) enum TakeRecv {
    /// The request is still running.
    Running,
    /// A finished receive, now freed: what it received.
    Taken(Received),
    /// Anything else (a vacant slot or other generation, an error, another kind of request,
    /// a result for a callback, token or waker): left as it was.
    Other,
}

/// Request slots, reused in place (see the module doc).
#[derive(Default)]
pub(crate) struct ReqTable {
    slots: Vec<Req>,
    /// Vacant slots; the last one is used next.
    free: Vec<u32>,
    /// Live requests.
    len: usize,
}

impl Req {
    fn vacant(gen: u32) -> Req {
        Req {
            gen: gen | VACANT,
            ep: None,
            kind: ReqKind::Close,
            done: None,
            notify: Notify::Take,
        }
    }

    #[inline]
    fn live(&self) -> bool {
        self.gen & VACANT == 0
    }
}

impl ReqTable {
    /// Live requests.
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    #[cfg(test)]
    pub(crate) fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The key the next [`ReqTable::insert_with`] gives.
    pub(crate) fn vacant_key(&self) -> usize {
        self.free.last().map_or(self.slots.len(), |&k| k as usize)
    }

    /// A new request with generation `gen` (below `VACANT`), unfinished and kept for
    /// `request_take`: its fields are written into a vacant slot (or a new one).
    #[inline]
    pub(crate) fn insert_with(&mut self, gen: u32, ep: Option<usize>, kind: ReqKind) -> usize {
        debug_assert_eq!(gen & VACANT, 0);
        self.len += 1;
        if let Some(k) = self.free.pop() {
            let k = k as usize;
            if let Some(r) = self.slots.get_mut(k) {
                // A vacant slot has no result and `Notify::Take` already, and its kind
                // (`Close`) owns nothing: it is overwritten without running its drop code.
                r.gen = gen;
                r.ep = ep;
                std::mem::forget(std::mem::replace(&mut r.kind, kind));
                return k;
            }
        }
        self.slots.push(Req {
            gen,
            ep,
            kind,
            done: None,
            notify: Notify::Take,
        });
        self.slots.len() - 1
    }

    #[inline]
    pub(crate) fn get(&self, key: usize) -> Option<&Req> {
        self.slots.get(key).filter(|r| r.live())
    }

    #[inline]
    pub(crate) fn get_mut(&mut self, key: usize) -> Option<&mut Req> {
        self.slots.get_mut(key).filter(|r| r.live())
    }

    /// The unfinished request of wire id `wire` (generation above, key below bit 32) with its
    /// key. One comparison checks both the generation and that the slot is live: the
    /// generation is cut to the 28 bits generations use, so it never has `VACANT`, which a
    /// vacant slot's has (whatever the id's upper bits say).
    #[inline(always)]
    pub(crate) fn waiting_by_wire(&mut self, wire: u64) -> Option<(usize, &mut Req)> {
        let key = (wire & 0xFFFF_FFFF) as usize;
        let gen = (wire >> 32) & 0x0FFF_FFFF;
        let r = self.slots.get_mut(key)?;
        (u64::from(r.gen) == gen && r.done.is_none()).then_some((key, r))
    }

    pub(crate) fn contains(&self, key: usize) -> bool {
        self.get(key).is_some()
    }

    /// Frees live request `key`, moving its result out (`None` when it has none, or when `key`
    /// is not live). What else the slot holds is dropped in place.
    #[inline]
    pub(crate) fn take_done(&mut self, key: usize) -> Option<Completion> {
        let c = self
            .slots
            .get_mut(key)
            .filter(|r| r.live())?
            .done
            .take()
            .map(Completion::from);
        self.free(key);
        c
    }

    /// Frees request `key` of generation `gen` if it is a finished receive kept for
    /// `request_take` that succeeded and holds nothing but its result's buffer (the common
    /// receive), giving what it received; otherwise leaves it as it is. One comparison checks
    /// both the generation and that the slot is live (a vacant slot's has `VACANT`, which no
    /// handle's has).
    #[inline(always)]
    pub(crate) fn take_recv(&mut self, key: usize, gen: u32) -> TakeRecv {
        let Some(r) = self.slots.get_mut(key).filter(|r| r.gen == gen) else {
            return TakeRecv::Other;
        };
        let plain = match &r.done {
            None => return TakeRecv::Running,
            Some(d) => {
                d.status.is_ok()
                    && d.buf.is_some()
                    && matches!(r.notify, Notify::Take)
                    && matches!(&r.kind, ReqKind::Recv(rv) if rv.owns_nothing())
            }
        };
        if !plain {
            return TakeRecv::Other;
        }
        let (buf, len, tag) = match r.done.take() {
            Some(Done {
                buf: Some(buf),
                len,
                tag,
                ..
            }) => (buf, len, tag),
            other => {
                r.done = other;
                return TakeRecv::Other;
            }
        };
        // Its kind owns nothing and its notify is `Take` (checked above).
        self.free_plain(key);
        TakeRecv::Taken(Received { buf, len, tag })
    }

    /// Frees live request `key` whose result was moved out, dropping what else the slot holds
    /// in place.
    #[inline]
    pub(crate) fn free(&mut self, key: usize) {
        let r = &mut self.slots[key];
        debug_assert!(r.live() && r.done.is_none());
        r.gen |= VACANT;
        r.ep = None;
        // A finished eager or stream receive (the common requests) owns nothing: its fields
        // are overwritten without running their drop code.
        let plain = match &r.kind {
            ReqKind::Recv(rv) => rv.owns_nothing(),
            ReqKind::StreamRecv(sr) => sr.owns_nothing(),
            _ => false,
        };
        if plain && matches!(r.notify, Notify::Take | Notify::Hook(_) | Notify::Token(_)) {
            std::mem::forget(std::mem::replace(&mut r.kind, ReqKind::Close));
            std::mem::forget(std::mem::replace(&mut r.notify, Notify::Take));
        } else {
            r.kind = ReqKind::Close;
            r.notify = Notify::Take;
        }
        self.free.push(key as u32);
        self.len -= 1;
    }

    /// [`ReqTable::free`] of a live request whose kind and notify own nothing (an eager receive
    /// whose buffer was moved out, with a token): they are overwritten without running their
    /// drop code. Were they to own something, it would leak, never be freed twice.
    #[inline(always)]
    pub(crate) fn free_plain(&mut self, key: usize) {
        let r = &mut self.slots[key];
        debug_assert!(r.live() && r.done.is_none());
        r.gen |= VACANT;
        r.ep = None;
        std::mem::forget(std::mem::replace(&mut r.kind, ReqKind::Close));
        std::mem::forget(std::mem::replace(&mut r.notify, Notify::Take));
        self.free.push(key as u32);
        self.len -= 1;
    }

    /// Frees live request `key`, giving it whole. The key must be live, as with `Slab::remove`.
    pub(crate) fn remove(&mut self, key: usize) -> Req {
        debug_assert!(self.contains(key), "request {key} is not live");
        let gen = self.slots[key].gen;
        let r = std::mem::replace(&mut self.slots[key], Req::vacant(gen));
        self.free.push(key as u32);
        self.len -= 1;
        r
    }

    /// Frees request `key` if it is live.
    pub(crate) fn try_remove(&mut self, key: usize) -> Option<Req> {
        self.contains(key).then(|| self.remove(key))
    }

    /// Live requests with their keys.
    pub(crate) fn iter(&self) -> impl Iterator<Item = (usize, &Req)> {
        self.slots.iter().enumerate().filter(|(_, r)| r.live())
    }
}

impl std::ops::Index<usize> for ReqTable {
    type Output = Req;
    /// Live request `key` (an internal invariant of the callers: they index keys they created
    /// or checked).
    #[inline]
    fn index(&self, key: usize) -> &Req {
        let r = &self.slots[key];
        debug_assert!(r.live(), "request {key} is not live");
        r
    }
}

impl std::ops::IndexMut<usize> for ReqTable {
    #[inline]
    fn index_mut(&mut self, key: usize) -> &mut Req {
        let r = &mut self.slots[key];
        debug_assert!(r.live(), "request {key} is not live");
        r
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn atomic(v: u64) -> ReqKind {
        ReqKind::Atomic { value: v }
    }

    #[test]
    fn slots_are_reused_and_vacant_ones_are_invisible() {
        let mut t = ReqTable::default();
        let a = t.insert_with(1, Some(3), atomic(10));
        let b = t.insert_with(2, None, atomic(20));
        assert_eq!((a, b, t.len()), (0, 1, 2));
        t[a].done = Some(Completion::ok().into());
        assert!(t.take_done(a).is_some());
        assert!(t.get(a).is_none() && !t.contains(a));
        assert_eq!(t.len(), 1);
        assert_eq!(t.vacant_key(), a);
        assert_eq!(t.iter().map(|(k, _)| k).collect::<Vec<_>>(), vec![b]);
        // The vacant slot comes back clean, with the new fields.
        let c = t.insert_with(3, None, atomic(30));
        assert_eq!(c, a);
        let r = &t[c];
        assert!(r.done.is_none() && r.ep.is_none() && matches!(r.notify, Notify::Take));
        assert!(matches!(r.kind, ReqKind::Atomic { value: 30 }));
        assert_eq!(r.gen, 3);
        let r = t.remove(b);
        assert!(matches!(r.kind, ReqKind::Atomic { value: 20 }));
        assert!(t.try_remove(b).is_none());
        assert_eq!(t.len(), 1);
        assert_eq!(t.vacant_key(), b);
        assert!(t.take_done(c).is_none());
        assert!(t.is_empty());
        assert!(t.take_done(99).is_none());
    }

    #[test]
    fn a_waiting_request_is_found_by_wire_id_and_a_vacant_one_never() {
        let mut t = ReqTable::default();
        let a = t.insert_with(5, None, atomic(0));
        let wire = 5u64 << 32 | a as u64;
        assert_eq!(t.waiting_by_wire(wire).map(|(k, _)| k), Some(a));
        assert!(t.waiting_by_wire(6u64 << 32 | a as u64).is_none());
        t[a].done = Some(Completion::ok().into());
        assert!(t.waiting_by_wire(wire).is_none());
        assert!(t.take_done(a).is_some());
        // The vacant slot keeps generation 5 with `VACANT`: an id naming that is no match.
        let forged = u64::from(5 | VACANT) << 32 | a as u64;
        assert!(t.waiting_by_wire(forged).is_none());
        assert!(t.waiting_by_wire(wire).is_none());
        assert!(t.waiting_by_wire(99).is_none());
    }

    #[test]
    fn a_vacant_slot_never_matches_a_generation() {
        let mut t = ReqTable::default();
        let a = t.insert_with(7, None, atomic(0));
        t.remove(a);
        // Its generation keeps the old value with `VACANT` added, which no live request has.
        assert!(t.slots[a].gen & VACANT != 0);
        assert_ne!(t.slots[a].gen, 7);
    }
}
