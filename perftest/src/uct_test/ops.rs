//! One operation of a measurement loop: the parameters the loops read ([`Ctx`]), and sending
//! an active message or credits, put, get and atomics, each retried after progress on
//! back-pressure.

use super::*;

/// What the loops read.
pub(super) struct Ctx<'a> {
    pub(super) p: &'a TestParams,
    /// The message size (`p.size()`, computed once).
    pub(super) size: usize,
    pub(super) recv: Option<&'a Region>,
    pub(super) send: Option<&'a Region>,
    pub(super) rkey: Option<&'a RemoteKey>,
    pub(super) peer: u64,
}

impl<'a> Ctx<'a> {
    pub(super) fn rkey(&self) -> Result<&'a RemoteKey> {
        self.rkey
            .ok_or_else(|| Error::InvalidParam("no remote key: connect() first".into()))
    }
    pub(super) fn recv(&self) -> Result<&'a Region> {
        self.recv
            .ok_or_else(|| Error::InvalidParam("no exposed memory".into()))
    }
    pub(super) fn send(&self) -> Result<&'a Region> {
        self.send
            .ok_or_else(|| Error::InvalidParam("no registered send memory".into()))
    }
    /// The zero-copy pieces over the send region: the `-s` parts, minus `skip` leading bytes
    /// (the active-message header, sent separately).
    pub(super) fn iovs(&self, skip: usize) -> Result<([Iov<'a>; crate::params::MAX_IOV], usize)> {
        let region = self.send()?;
        let mut arr = [Iov::whole(&region.memh); crate::params::MAX_IOV];
        let mut n = 0;
        let mut off = 0usize;
        let mut skip = skip;
        for &s in &self.p.sizes {
            let mut s = s as usize;
            let cut = s.min(skip);
            skip -= cut;
            off += cut;
            s -= cut;
            if s > 0 {
                arr[n] = Iov::new(&region.memh, off, s)?;
                n += 1;
                off += s;
            }
        }
        Ok((arr, n))
    }
}

#[inline]
pub(super) fn sn(i: u64) -> u8 {
    (i % 255) as u8 + 1
}

#[inline]
pub(super) fn send_am(
    eng: &mut Engine<'_>,
    ctx: &Ctx<'_>,
    buf: &[u8],
    zc: &[Iov<'_>],
    shortiov: &[&[u8]],
    i: u64,
) -> Result<()> {
    let size = ctx.size;
    match ctx.p.layout {
        Layout::Short => {
            eng.issue(|ep| ep.am_short(AM_DATA, i, &buf[8..size]))?;
        }
        Layout::ShortIov => {
            eng.issue(|ep| ep.am_short_iov(AM_DATA, shortiov))?;
        }
        Layout::Bcopy => {
            eng.issue(|ep| {
                ep.am_bcopy(AM_DATA, |dst| {
                    let n = size.min(dst.len());
                    dst[..n].copy_from_slice(&buf[..n]);
                    n
                })
                .map(Outcome::unit)
            })?;
        }
        _ => {
            eng.window(ctx.p.outstanding as u64)?;
            eng.issue(|ep| ep.am_zcopy(AM_DATA, &buf[..8], zc, COMP_OP))?;
        }
    }
    Ok(())
}

#[inline]
pub(super) fn send_credit(eng: &mut Engine<'_>, count: u64, short: bool) -> Result<()> {
    if short {
        eng.issue(|ep| ep.am_short(AM_CREDIT, count, &[]))?;
    } else {
        let b = count.to_le_bytes();
        eng.issue(|ep| {
            ep.am_bcopy(AM_CREDIT, |dst| {
                let n = dst.len().min(8);
                dst[..n].copy_from_slice(&b[..n]);
                n
            })
            .map(Outcome::unit)
        })?;
    }
    Ok(())
}

#[inline]
pub(super) fn set_sn(ctx: &Ctx<'_>, buf: &mut [u8], i: u64) -> Result<()> {
    let size = ctx.size;
    if ctx.p.layout == Layout::Zcopy {
        ctx.send()?.memh.write(size - 1, &[sn(i)])
    } else {
        buf[size - 1] = sn(i);
        Ok(())
    }
}

#[inline]
pub(super) fn put(eng: &mut Engine<'_>, ctx: &Ctx<'_>, buf: &[u8], zc: &[Iov<'_>]) -> Result<()> {
    let size = ctx.size;
    let rkey = ctx.rkey()?;
    let addr = ctx.peer;
    match ctx.p.layout {
        Layout::Short => {
            eng.issue(|ep| ep.put_short(&buf[..size], addr, rkey))?;
        }
        Layout::Bcopy => {
            eng.issue(|ep| {
                ep.put_bcopy(
                    |dst| {
                        let n = size.min(dst.len());
                        dst[..n].copy_from_slice(&buf[..n]);
                        n
                    },
                    addr,
                    rkey,
                )
                .map(Outcome::unit)
            })?;
        }
        _ => {
            eng.window(ctx.p.outstanding as u64)?;
            eng.issue(|ep| ep.put_zcopy(zc, addr, rkey, COMP_OP))?;
        }
    }
    Ok(())
}

#[inline]
pub(super) fn get(
    eng: &mut Engine<'_>,
    ctx: &Ctx<'_>,
    buf: &mut [u8],
    zc: &[Iov<'_>],
) -> Result<()> {
    let size = ctx.size;
    let rkey = ctx.rkey()?;
    let addr = ctx.peer;
    eng.window(ctx.p.outstanding as u64)?;
    match ctx.p.layout {
        Layout::Short => {
            eng.issue(|ep| ep.get_short(&mut buf[..size], addr, rkey))?;
        }
        Layout::Bcopy => {
            eng.issue(|ep| {
                ep.get_bcopy(size, addr, rkey, COMP_OP, &mut |data: &[u8]| {
                    let n = data.len().min(buf.len());
                    buf[..n].copy_from_slice(&data[..n]);
                })
            })?;
        }
        _ => {
            eng.issue(|ep| ep.get_zcopy(zc, addr, rkey, COMP_OP))?;
        }
    }
    Ok(())
}

#[inline]
pub(super) fn atomic_post_add(eng: &mut Engine<'_>, ctx: &Ctx<'_>) -> Result<()> {
    let rkey = ctx.rkey()?;
    let addr = ctx.peer;
    eng.window(ctx.p.outstanding as u64)?;
    if ctx.size == 8 {
        eng.issue(|ep| ep.atomic64_post(AtomicOp::Add, 1, addr, rkey))?;
    } else {
        eng.issue(|ep| ep.atomic32_post(AtomicOp::Add, 1, addr, rkey))?;
    }
    Ok(())
}

#[inline]
pub(super) fn atomic_fetch(eng: &mut Engine<'_>, ctx: &Ctx<'_>, i: u64) -> Result<()> {
    let rkey = ctx.rkey()?;
    let addr = ctx.peer;
    let wide = ctx.size == 8;
    match (ctx.p.test, wide) {
        (TestId::FaddLat, true) => eng.issue(|ep| {
            ep.atomic64_fetch(AtomicOp::Add, 1, addr, rkey, COMP_OP)
                .map(Outcome::unit)
        }),
        (TestId::FaddLat, false) => eng.issue(|ep| {
            ep.atomic32_fetch(AtomicOp::Add, 1, addr, rkey, COMP_OP)
                .map(Outcome::unit)
        }),
        (TestId::SwapLat, true) => eng.issue(|ep| {
            ep.atomic64_fetch(AtomicOp::Swap, i, addr, rkey, COMP_OP)
                .map(Outcome::unit)
        }),
        (TestId::SwapLat, false) => eng.issue(|ep| {
            ep.atomic32_fetch(AtomicOp::Swap, i as u32, addr, rkey, COMP_OP)
                .map(Outcome::unit)
        }),
        (_, true) => eng.issue(|ep| {
            ep.atomic_cswap64(i, i + 1, addr, rkey, COMP_OP)
                .map(Outcome::unit)
        }),
        (_, false) => eng.issue(|ep| {
            ep.atomic_cswap32(i as u32, i as u32 + 1, addr, rkey, COMP_OP)
                .map(Outcome::unit)
        }),
    }?;
    // One at a time: the latency is that of one whole operation.
    eng.drain()
}

#[inline]
pub(super) fn counter_reached(w: &Watch, wide: bool, target: u64) -> bool {
    if wide {
        w.word64() >= target
    } else {
        w.word32() == target as u32
    }
}
