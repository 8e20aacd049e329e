//! The packed, versioned worker address a peer needs to create an endpoint to a worker.
//!
//! ```text
//!  0        1                9        10
//!  +--------+----------------+--------+------------------------+--------+-------------------+
//!  |version |  uuid (u64 LE) | n_dev  | n_dev × device address | n_tl   | n_tl × transport  |
//!  +--------+----------------+--------+------------------------+--------+-------------------+
//!  device address: len (varint) | bytes
//!  transport:      tl id (u8) [| name_len (u8) | name] | device index (u8) | len (varint) | iface addr
//! ```
//!
//! Transports that share a device address (posix, sysv and cma all carry the same host and
//! namespace identity) point at one copy of it: the device table holds each distinct device
//! address once, in the order the transports first use it. A transport known to every build
//! ([`TL_IDS`]) is named by its id; any other has id 0 followed by its name. Varints are
//! unsigned LEB128 ([`ucs::varint`]).
//!
//! Every address has exactly one encoding, and [`WorkerAddress::decode`] accepts only that one:
//! it rejects truncated or trailing bytes, another version, overlong varints, a device address
//! listed twice, unused or out of first-use order, a device index past the table, an unknown
//! transport id, an empty or non-ASCII name, and a known transport sent by name.
#![cfg_attr(
    not(test),
    deny(
        clippy::unwrap_used,
        clippy::expect_used,
        clippy::unreachable,
        clippy::panic
    )
)]

use ucs::codec::{Reader, Writer};
use ucs::varint;
use ucs::{Error, Result};

/// Current address format version (the first byte).
pub const ADDRESS_VERSION: u8 = 2;

/// Transports named by a one-byte id in a packed address: id `i + 1` is `TL_IDS[i]`. Append
/// only (ids are wire values).
pub const TL_IDS: [&str; 6] = ["self", "posix", "sysv", "cma", "tcp", "rc_verbs"];

/// Largest device or interface address a worker address carries.
pub const MAX_TL_ADDR: usize = u16::MAX as usize;

/// One transport interface a worker listens on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TlAddress {
    /// Transport name (`self`, `posix`, `tcp`…).
    pub tl_name: String,
    /// The interface's device address.
    pub device_addr: Vec<u8>,
    /// The interface address peers connect to.
    pub iface_addr: Vec<u8>,
}

/// A worker's address: its identity and every interface it can be reached on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WorkerAddress {
    /// Random identity of the worker, unique per worker instance.
    pub uuid: u64,
    /// The worker's transport interfaces.
    pub tls: Vec<TlAddress>,
}

fn tl_id(name: &str) -> Option<u8> {
    TL_IDS.iter().position(|n| *n == name).map(|i| i as u8 + 1)
}

fn too_long(what: impl std::fmt::Display) -> Error {
    Error::InvalidParam(format!("{what} does not fit a worker address"))
}

/// One transport of a packed address, borrowed from it (or from a [`TlAddress`]).
#[derive(Clone, Copy)]
struct TlRef<'a> {
    name: &'a str,
    dev: &'a [u8],
    iface: &'a [u8],
}

impl<'a> From<&'a TlAddress> for TlRef<'a> {
    fn from(t: &'a TlAddress) -> Self {
        TlRef {
            name: &t.tl_name,
            dev: &t.device_addr,
            iface: &t.iface_addr,
        }
    }
}

/// The distinct device addresses of `tls` in first-use order, and each transport's index
/// among them.
fn device_table<'a>(tls: &[TlRef<'a>]) -> (Vec<&'a [u8]>, Vec<usize>) {
    let mut devs: Vec<&[u8]> = Vec::new();
    let index = tls
        .iter()
        .map(|t| match devs.iter().position(|d| *d == t.dev) {
            Some(i) => i,
            None => {
                devs.push(t.dev);
                devs.len() - 1
            }
        })
        .collect();
    (devs, index)
}

fn packed_len(tls: &[TlRef<'_>]) -> usize {
    let (devs, _) = device_table(tls);
    let devs: usize = devs
        .iter()
        .map(|d| varint::len(d.len() as u64) + d.len())
        .sum();
    let tls: usize = tls
        .iter()
        .map(|t| {
            let name = if tl_id(t.name).is_some() {
                0
            } else {
                1 + t.name.len()
            };
            1 + name + 1 + varint::len(t.iface.len() as u64) + t.iface.len()
        })
        .sum();
    WorkerAddress::HEADER_LEN + devs + tls
}

fn encode(uuid: u64, tls: &[TlRef<'_>], out: &mut Vec<u8>) -> Result<()> {
    let (devs, index) = device_table(tls);
    if tls.len() > u8::MAX as usize || devs.len() > u8::MAX as usize {
        return Err(too_long(format_args!("{} transports", tls.len())));
    }
    for t in tls {
        let bad_name = t.name.is_empty() || !t.name.is_ascii();
        if bad_name || t.name.len() > u8::MAX as usize {
            return Err(too_long(format_args!("transport name {:?}", t.name)));
        }
        if t.dev.len() > MAX_TL_ADDR || t.iface.len() > MAX_TL_ADDR {
            return Err(too_long(format_args!("the address of {}", t.name)));
        }
    }
    out.reserve(packed_len(tls));
    let mut w = Writer::new(out);
    w.u8(ADDRESS_VERSION).u64(uuid).u8(devs.len() as u8);
    for d in &devs {
        w.var_bytes(d);
    }
    w.u8(tls.len() as u8);
    for (t, &dev) in tls.iter().zip(&index) {
        match tl_id(t.name) {
            Some(id) => w.u8(id),
            None => w.u8(0).u8(t.name.len() as u8).bytes(t.name.as_bytes()),
        };
        w.u8(dev as u8).var_bytes(t.iface);
    }
    Ok(())
}

/// Decodes a packed address into borrowed views (see [`WorkerAddress::decode`]).
fn parse(buf: &[u8]) -> Result<(u64, Vec<TlRef<'_>>)> {
    let mut r = Reader::new(buf, "worker address");
    let version = r.u8("version")?;
    if version != ADDRESS_VERSION {
        return Err(Error::Wire(format!(
            "worker address version {version} is not supported (this build reads version {ADDRESS_VERSION})"
        )));
    }
    let uuid = r.u64("uuid")?;
    let n_dev = r.u8("device count")? as usize;
    let mut devs: Vec<&[u8]> = Vec::with_capacity(n_dev);
    for i in 0..n_dev {
        let d = r.var_bytes("device address")?;
        if d.len() > MAX_TL_ADDR {
            return Err(r.err("device address", format_args!("{} bytes", d.len())));
        }
        if devs.contains(&d) {
            return Err(r.err("device table", format_args!("entry {i} is listed twice")));
        }
        devs.push(d);
    }
    let n_tl = r.u8("transport count")? as usize;
    let mut tls = Vec::with_capacity(n_tl);
    let mut used = 0usize;
    for _ in 0..n_tl {
        let name = parse_name(&mut r)?;
        let dev = r.u8("device index")? as usize;
        if dev > used || dev >= n_dev {
            return Err(r.err(
                "device index",
                format_args!(
                    "{dev} of {name} is past the table ({n_dev} entries) or out of first-use order"
                ),
            ));
        }
        used = used.max(dev + 1);
        let iface = r.var_bytes("interface address")?;
        if iface.len() > MAX_TL_ADDR {
            return Err(r.err("interface address", format_args!("{} bytes", iface.len())));
        }
        tls.push(TlRef {
            name,
            dev: devs[dev],
            iface,
        });
    }
    if used != n_dev {
        return Err(r.err(
            "device table",
            format_args!("{} of its {n_dev} entries are not used", n_dev - used),
        ));
    }
    r.finish()?;
    Ok((uuid, tls))
}

/// A transport's id, or id 0 and its name.
fn parse_name<'a>(r: &mut Reader<'a>) -> Result<&'a str> {
    let id = r.u8("transport id")? as usize;
    if id > 0 {
        return match TL_IDS.get(id - 1) {
            Some(n) => Ok(n),
            None => Err(r.err("transport id", format_args!("{id} is unknown"))),
        };
    }
    let n = r.u8("transport name length")? as usize;
    let name = r.bytes(n, "transport name")?;
    let name = match std::str::from_utf8(name) {
        Ok(s) if !s.is_empty() && s.is_ascii() => s,
        _ => return Err(r.err("transport name", "is empty or not ASCII")),
    };
    if tl_id(name).is_some() {
        return Err(r.err(
            "transport name",
            format_args!("{name} must be sent by its id"),
        ));
    }
    Ok(name)
}

impl WorkerAddress {
    /// Fixed part: version, uuid and the two counts.
    pub const HEADER_LEN: usize = 11;

    fn refs(&self) -> Vec<TlRef<'_>> {
        self.tls.iter().map(TlRef::from).collect()
    }

    /// Packed length.
    pub fn packed_len(&self) -> usize {
        packed_len(&self.refs())
    }

    /// Appends the packed address to `out`. Fails if a count, name or address is too long for
    /// the format, or a name is empty or not ASCII.
    pub fn encode(&self, out: &mut Vec<u8>) -> Result<()> {
        encode(self.uuid, &self.refs(), out)
    }

    /// The packed address as a new vector.
    pub fn to_bytes(&self) -> Result<Vec<u8>> {
        let mut v = Vec::new();
        self.encode(&mut v)?;
        Ok(v)
    }

    /// Decodes a packed address; anything but the one encoding of an address gives
    /// [`Error::Wire`] with the reason (see the module documentation).
    pub fn decode(buf: &[u8]) -> Result<Self> {
        let (uuid, tls) = parse(buf)?;
        let tls = tls
            .iter()
            .map(|t| TlAddress {
                tl_name: t.name.to_owned(),
                device_addr: t.dev.to_vec(),
                iface_addr: t.iface.to_vec(),
            })
            .collect();
        Ok(WorkerAddress { uuid, tls })
    }

    /// Checks `packed` as [`WorkerAddress::decode`] does, without copying it out; gives its
    /// uuid.
    pub fn check(packed: &[u8]) -> Result<u64> {
        parse(packed).map(|(uuid, _)| uuid)
    }

    /// The packed address `packed` with only the transports whose positions `keep` accepts,
    /// packed without building a [`WorkerAddress`] (a hub does it once per endpoint).
    pub fn subset(packed: &[u8], keep: impl Fn(usize) -> bool) -> Result<Vec<u8>> {
        let (uuid, mut tls) = parse(packed)?;
        let mut i = 0;
        tls.retain(|_| {
            i += 1;
            keep(i - 1)
        });
        let mut out = Vec::new();
        encode(uuid, &tls, &mut out)?;
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tl(name: &str, dev: &[u8], iface: &[u8]) -> TlAddress {
        TlAddress {
            tl_name: name.into(),
            device_addr: dev.to_vec(),
            iface_addr: iface.to_vec(),
        }
    }

    fn sample() -> WorkerAddress {
        let host = [7u8; 30];
        WorkerAddress {
            uuid: 0x0102_0304_0506_0708,
            tls: vec![
                tl("self", &[1, 2, 3], &[9; 8]),
                tl("posix", &host, &[5; 20]),
                tl("sysv", &host, &[6; 19]),
                tl("cma", &host, &[]),
                tl("fault_tcp", &[127, 0, 0, 1], &[]),
            ],
        }
    }

    fn wire_err(b: &[u8]) -> String {
        match WorkerAddress::decode(b) {
            Err(Error::Wire(m)) => m,
            other => panic!("expected a wire error, got {other:?}"),
        }
    }

    #[test]
    fn round_trip_shares_device_addresses_and_names_known_transports_by_id() {
        let a = sample();
        let b = a.to_bytes().unwrap();
        assert_eq!(b.len(), a.packed_len());
        assert_eq!(b[0], ADDRESS_VERSION);
        assert_eq!(&b[1..9], &0x0102_0304_0506_0708u64.to_le_bytes());
        assert_eq!(
            b[9], 3,
            "self's, the shared host's and tcp's device addresses"
        );
        assert_eq!(WorkerAddress::decode(&b).unwrap(), a);
        // Header, 3 devices (len + bytes), 4 known transports (id, index, len, iface), one by name.
        let devs = (1 + 3) + (1 + 30) + (1 + 4);
        let tls = (3 + 8) + (3 + 20) + (3 + 19) + 3 + (2 + 9 + 2);
        assert_eq!(b.len(), WorkerAddress::HEADER_LEN + devs + tls);
        let host = b.windows(30).filter(|w| *w == [7u8; 30]).count();
        assert_eq!(host, 1, "the host identity is packed once");
    }

    #[test]
    fn subset_keeps_the_chosen_transports_and_drops_unused_devices() {
        let a = sample();
        let b = a.to_bytes().unwrap();
        let sub = WorkerAddress::subset(&b, |i| i == 1 || i == 4).unwrap();
        let d = WorkerAddress::decode(&sub).unwrap();
        assert_eq!(d.uuid, a.uuid);
        assert_eq!(d.tls, vec![a.tls[1].clone(), a.tls[4].clone()]);
        assert_eq!(sub[9], 2, "self's device address is gone");
        assert_eq!(WorkerAddress::subset(&b, |_| true).unwrap(), b);
        assert_eq!(WorkerAddress::check(&b).unwrap(), a.uuid);
        assert!(matches!(
            WorkerAddress::check(&sub[1..]),
            Err(Error::Wire(_))
        ));
        assert!(matches!(
            WorkerAddress::subset(&b[..20], |_| true),
            Err(Error::Wire(_))
        ));
    }

    #[test]
    fn empty_address_round_trips() {
        let a = WorkerAddress {
            uuid: 5,
            tls: vec![],
        };
        let b = a.to_bytes().unwrap();
        assert_eq!(b.len(), WorkerAddress::HEADER_LEN);
        assert_eq!(WorkerAddress::decode(&b).unwrap(), a);
    }

    #[test]
    fn encode_refuses_what_the_format_cannot_carry() {
        let mut a = sample();
        a.tls[0].tl_name = String::new();
        assert!(matches!(a.to_bytes(), Err(Error::InvalidParam(_))));
        let mut a = sample();
        a.tls[1].iface_addr = vec![0; MAX_TL_ADDR + 1];
        assert!(matches!(a.to_bytes(), Err(Error::InvalidParam(_))));
        let mut a = sample();
        a.tls = (0..256).map(|_| tl("self", &[], &[])).collect();
        assert!(matches!(a.to_bytes(), Err(Error::InvalidParam(_))));
    }

    #[test]
    fn truncated_and_trailing_inputs_fail() {
        let b = sample().to_bytes().unwrap();
        for n in 0..b.len() {
            assert!(
                matches!(WorkerAddress::decode(&b[..n]), Err(Error::Wire(_))),
                "prefix {n}"
            );
        }
        let mut t = b.clone();
        t.push(0);
        assert!(wire_err(&t).contains("1 trailing"));
        let mut v = b;
        v[0] = 1;
        assert!(wire_err(&v).contains("version 1"));
    }

    /// Hand-built addresses: header, device table, transports.
    fn raw(devs: &[&[u8]], tls: &[&[u8]]) -> Vec<u8> {
        let mut b = vec![ADDRESS_VERSION];
        b.extend_from_slice(&9u64.to_le_bytes());
        b.push(devs.len() as u8);
        for d in devs {
            b.push(d.len() as u8);
            b.extend_from_slice(d);
        }
        b.push(tls.len() as u8);
        for t in tls {
            b.extend_from_slice(t);
        }
        b
    }

    #[test]
    fn non_canonical_or_inconsistent_input_is_rejected_with_its_reason() {
        let ok = raw(&[b"ab"], &[&[1, 0, 1, 7]]);
        assert_eq!(WorkerAddress::decode(&ok).unwrap().tls[0].tl_name, "self");
        let cases: [(Vec<u8>, &str); 9] = [
            (
                raw(&[b"ab", b"ab"], &[&[1, 0, 0], &[2, 1, 0]]),
                "listed twice",
            ),
            (raw(&[b"ab"], &[&[1, 1, 0]]), "past the table"),
            (
                raw(&[b"ab", b"cd"], &[&[1, 1, 0], &[2, 0, 0]]),
                "first-use order",
            ),
            (
                raw(&[b"ab", b"cd"], &[&[1, 0, 0]]),
                "1 of its 2 entries are not used",
            ),
            (raw(&[b"ab"], &[&[42, 0, 0]]), "42 is unknown"),
            (
                raw(&[b"ab"], &[&[0, 4, b's', b'e', b'l', b'f', 0, 0]]),
                "by its id",
            ),
            (raw(&[b"ab"], &[&[0, 0, 0, 0]]), "empty or not ASCII"),
            (raw(&[b"ab"], &[&[0, 1, 0xc3, 0, 0]]), "empty or not ASCII"),
            (raw(&[b"ab"], &[&[1, 0, 0x80, 0x00]]), "shortest form"),
        ];
        for (b, why) in cases {
            let e = wire_err(&b);
            assert!(e.contains(why), "{b:?}: {e}");
        }
    }
}
