//! The packed, versioned worker address a peer needs to create an endpoint to a worker.
//!
//! ```text
//!  0        1                9        10
//!  +--------+----------------+--------+---------------------------------------------+
//!  |version |  uuid (u64 LE) | n_tl   |  n_tl × transport entry                      |
//!  +--------+----------------+--------+---------------------------------------------+
//!  transport entry:
//!  +---------+-----------+-----------------+-----------+------------------+-----------+
//!  |name_len | name      | dev_len (u16 LE)| dev addr  | iface_len (u16 LE)| iface addr|
//!  |  (u8)   | (ASCII)   |                 |           |                  |           |
//!  +---------+-----------+-----------------+-----------+------------------+-----------+
//! ```
#![cfg_attr(
    not(test),
    deny(
        clippy::unwrap_used,
        clippy::expect_used,
        clippy::unreachable,
        clippy::panic
    )
)]

use ucs::{Error, Result};

/// Current address format version (the first byte).
pub const ADDRESS_VERSION: u8 = 1;

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

fn short(what: &str, need: usize, have: usize) -> Error {
    Error::Wire(format!(
        "worker address truncated in {what}: need {need} more bytes, have {have}"
    ))
}

struct Reader<'a> {
    buf: &'a [u8],
    pos: usize,
}

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize, what: &str) -> Result<&'a [u8]> {
        let rest = &self.buf[self.pos..];
        if rest.len() < n {
            return Err(short(what, n, rest.len()));
        }
        self.pos += n;
        Ok(&rest[..n])
    }
    fn u8(&mut self, what: &str) -> Result<u8> {
        Ok(self.take(1, what)?[0])
    }
    fn u16(&mut self, what: &str) -> Result<u16> {
        let b = self.take(2, what)?;
        Ok(u16::from_le_bytes([b[0], b[1]]))
    }
    fn u64(&mut self, what: &str) -> Result<u64> {
        let b = self.take(8, what)?;
        let mut a = [0u8; 8];
        a.copy_from_slice(b);
        Ok(u64::from_le_bytes(a))
    }
}

impl WorkerAddress {
    /// Fixed part: version, uuid and transport count.
    pub const HEADER_LEN: usize = 10;

    /// Packed length.
    pub fn packed_len(&self) -> usize {
        Self::HEADER_LEN
            + self
                .tls
                .iter()
                .map(|t| 1 + t.tl_name.len() + 2 + t.device_addr.len() + 2 + t.iface_addr.len())
                .sum::<usize>()
    }

    /// Appends the packed address to `out`. Fails if a field is too long for its length prefix.
    pub fn encode(&self, out: &mut Vec<u8>) -> Result<()> {
        if self.tls.len() > u8::MAX as usize {
            return Err(Error::InvalidParam(format!(
                "{} transports do not fit a worker address",
                self.tls.len()
            )));
        }
        out.push(ADDRESS_VERSION);
        out.extend_from_slice(&self.uuid.to_le_bytes());
        out.push(self.tls.len() as u8);
        for t in &self.tls {
            if t.tl_name.len() > u8::MAX as usize
                || t.device_addr.len() > u16::MAX as usize
                || t.iface_addr.len() > u16::MAX as usize
            {
                return Err(Error::InvalidParam(format!(
                    "transport {} has an address too long to pack",
                    t.tl_name
                )));
            }
            out.push(t.tl_name.len() as u8);
            out.extend_from_slice(t.tl_name.as_bytes());
            out.extend_from_slice(&(t.device_addr.len() as u16).to_le_bytes());
            out.extend_from_slice(&t.device_addr);
            out.extend_from_slice(&(t.iface_addr.len() as u16).to_le_bytes());
            out.extend_from_slice(&t.iface_addr);
        }
        Ok(())
    }

    /// The packed address as a new vector.
    pub fn to_bytes(&self) -> Result<Vec<u8>> {
        let mut v = Vec::with_capacity(self.packed_len());
        self.encode(&mut v)?;
        Ok(v)
    }

    /// Decodes a packed address; truncated, trailing or unknown-version input gives [`Error::Wire`].
    pub fn decode(buf: &[u8]) -> Result<Self> {
        let mut r = Reader { buf, pos: 0 };
        let version = r.u8("version")?;
        if version != ADDRESS_VERSION {
            return Err(Error::Wire(format!(
                "worker address version {version} is not supported (this build reads version {ADDRESS_VERSION})"
            )));
        }
        let uuid = r.u64("uuid")?;
        let n = r.u8("transport count")?;
        let mut tls = Vec::with_capacity(n as usize);
        for _ in 0..n {
            let nl = r.u8("transport name length")? as usize;
            let name = r.take(nl, "transport name")?;
            let tl_name = std::str::from_utf8(name)
                .map_err(|_| Error::Wire("transport name in worker address is not UTF-8".into()))?
                .to_owned();
            let dl = r.u16("device address length")? as usize;
            let device_addr = r.take(dl, "device address")?.to_vec();
            let il = r.u16("interface address length")? as usize;
            let iface_addr = r.take(il, "interface address")?.to_vec();
            tls.push(TlAddress {
                tl_name,
                device_addr,
                iface_addr,
            });
        }
        if r.pos != buf.len() {
            return Err(Error::Wire(format!(
                "worker address has {} trailing bytes",
                buf.len() - r.pos
            )));
        }
        Ok(WorkerAddress { uuid, tls })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> WorkerAddress {
        WorkerAddress {
            uuid: 0x0102_0304_0506_0708,
            tls: vec![
                TlAddress {
                    tl_name: "self".into(),
                    device_addr: vec![1, 2, 3],
                    iface_addr: vec![9; 8],
                },
                TlAddress {
                    tl_name: "tcp".into(),
                    device_addr: vec![127, 0, 0, 1],
                    iface_addr: vec![],
                },
            ],
        }
    }

    #[test]
    fn round_trip() {
        let a = sample();
        let b = a.to_bytes().unwrap();
        assert_eq!(b.len(), a.packed_len());
        assert_eq!(b[0], ADDRESS_VERSION);
        assert_eq!(&b[1..9], &0x0102_0304_0506_0708u64.to_le_bytes());
        assert_eq!(WorkerAddress::decode(&b).unwrap(), a);
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
        assert!(matches!(WorkerAddress::decode(&t), Err(Error::Wire(_))));
        let mut v = b;
        v[0] = 77;
        let e = WorkerAddress::decode(&v).unwrap_err().to_string();
        assert!(e.contains("version 77"), "{e}");
    }
}
