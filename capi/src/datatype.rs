//! `ucp_datatype_t`: contiguous (`ucp_dt_make_contig(n)` = `n << 3`), IOV (class 2: an array
//! of `ucp_dt_iov_t`), and generic (class 7: `ucp_dt_create_generic`, packed and unpacked
//! through the client's callbacks). The strided class is not supported.

use crate::ffi::*;
use crate::guard::{ffi, refuse};
use std::ffi::c_void;

/// A generic datatype: the client's callbacks and context.
pub struct GenericDt {
    ops: GenericDtOps,
    context: *mut c_void,
}

/// What a send sends: the client's bytes in place, or bytes gathered/packed into a vector.
pub enum SendData<'a> {
    /// Contiguous client memory.
    Slice(&'a [u8]),
    /// Gathered (IOV) or packed (generic) bytes.
    Owned(Vec<u8>),
}

impl SendData<'_> {
    /// The bytes.
    pub fn bytes(&self) -> &[u8] {
        match self {
            SendData::Slice(s) => s,
            SendData::Owned(v) => v,
        }
    }
}

/// Where received bytes go once the operation completes.
pub enum Finish {
    /// Nowhere else (received in place, or a send).
    None,
    /// Contiguous client memory of `cap` bytes (copied into when received into a vector).
    Copy {
        /// Destination.
        dst: *mut u8,
        /// Its capacity.
        cap: usize,
    },
    /// Scatter over the client's IOV entries.
    Iov(Vec<DtIov>),
    /// Write the fetched value of an atomic (`size` 4 or 8 bytes) to `dst`.
    Fetch {
        /// The client's result location.
        dst: *mut u8,
        /// Operand size.
        size: usize,
    },
    /// Received into `buf` (rucx wrote into its memory in place), then delivered by `then`
    /// (IOV and generic receives whose transfer needs one contiguous target).
    Staged {
        /// The bytes, as long as the receive's capacity.
        buf: Vec<u8>,
        /// Where they go.
        then: Box<Finish>,
    },
    /// Unpack through a generic datatype's callbacks, then `finish` its state.
    Generic {
        /// The callbacks (of a datatype the client keeps until the operation completes, as
        /// UCX requires).
        ops: &'static GenericDtOps,
        /// The state `start_unpack` gave.
        state: *mut c_void,
    },
}

#[inline(always)]
fn elem_size(dt: Datatype) -> usize {
    (dt >> UCP_DATATYPE_SHIFT) as usize
}

fn generic(dt: Datatype) -> &'static GenericDt {
    // SAFETY: a class-7 datatype is a GenericDt pointer from ucp_dt_create_generic.
    unsafe { &*((dt & !UCP_DATATYPE_CLASS_MASK) as *const GenericDt) }
}

/// The contiguous byte length of `count` elements of a contiguous datatype.
#[inline(always)]
pub fn contig_len(name: &str, count: usize, dt: Datatype) -> Result<usize, Status> {
    count.checked_mul(elem_size(dt)).ok_or_else(|| {
        refuse(
            name,
            UCS_ERR_INVALID_PARAM,
            "count * element size overflows",
        )
    })
}

/// A slice of client memory (empty when `len` is 0, whatever the pointer).
///
/// # Safety
/// `ptr` valid for `len` bytes when `len > 0`.
#[inline(always)]
pub unsafe fn slice<'a>(ptr: *const c_void, len: usize) -> &'a [u8] {
    if len == 0 {
        &[]
    } else {
        // SAFETY: per the contract.
        unsafe { std::slice::from_raw_parts(ptr as *const u8, len) }
    }
}

/// The data of a send of `count` elements of `dt` at `buffer`.
///
/// # Safety
/// `buffer` describes valid memory for the datatype, as the UCX documentation requires.
#[inline(always)]
pub unsafe fn send_data<'a>(
    name: &str,
    buffer: *const c_void,
    count: usize,
    dt: Datatype,
) -> Result<SendData<'a>, Status> {
    if dt & UCP_DATATYPE_CLASS_MASK == UCP_DATATYPE_CONTIG {
        let len = contig_len(name, count, dt)?;
        if len > 0 && buffer.is_null() {
            return Err(refuse(name, UCS_ERR_INVALID_PARAM, "buffer is NULL"));
        }
        // SAFETY: the client's buffer of `len` bytes.
        return Ok(SendData::Slice(unsafe { slice(buffer, len) }));
    }
    // SAFETY: forwarded contract.
    unsafe { send_data_other(name, buffer, count, dt) }
}

/// [`send_data`] of the IOV and generic classes (and the refusal of the others).
///
/// # Safety
/// As [`send_data`].
#[inline(never)]
unsafe fn send_data_other<'a>(
    name: &str,
    buffer: *const c_void,
    count: usize,
    dt: Datatype,
) -> Result<SendData<'a>, Status> {
    match dt & UCP_DATATYPE_CLASS_MASK {
        UCP_DATATYPE_IOV => {
            let iov = iov_list(name, buffer, count)?;
            let total = iov.iter().map(|e| e.length).sum();
            let mut v = Vec::with_capacity(total);
            for e in &iov {
                // SAFETY: the client's IOV entries.
                v.extend_from_slice(unsafe { slice(e.buffer, e.length) });
            }
            Ok(SendData::Owned(v))
        }
        UCP_DATATYPE_GENERIC => {
            let g = generic(dt);
            let (Some(start), Some(size), Some(pack), Some(fin)) = (
                g.ops.start_pack,
                g.ops.packed_size,
                g.ops.pack,
                g.ops.finish,
            ) else {
                return Err(refuse(
                    name,
                    UCS_ERR_INVALID_PARAM,
                    "generic datatype lacks a pack callback",
                ));
            };
            // SAFETY: the client's callbacks, called as documented: start, size, pack, finish.
            unsafe {
                let state = start(g.context, buffer, count);
                let total = size(state);
                let mut v = vec![0u8; total];
                let mut off = 0;
                while off < total {
                    let n = pack(state, off, v.as_mut_ptr().add(off).cast(), total - off);
                    if n == 0 {
                        // A pack that makes no progress would send short data: refused.
                        fin(state);
                        return Err(refuse(
                            name,
                            UCS_ERR_INVALID_PARAM,
                            format!(
                                "the generic datatype's pack gave 0 bytes at offset {off} of \
                                 {total} (packed_size)"
                            ),
                        ));
                    }
                    off += n.min(total - off);
                }
                fin(state);
                Ok(SendData::Owned(v))
            }
        }
        c => Err(refuse(
            name,
            UCS_ERR_UNSUPPORTED,
            format!("datatype class {c} is not supported"),
        )),
    }
}

fn iov_list(name: &str, buffer: *const c_void, count: usize) -> Result<Vec<DtIov>, Status> {
    if count > 0 && buffer.is_null() {
        return Err(refuse(name, UCS_ERR_INVALID_PARAM, "IOV array is NULL"));
    }
    if count == 0 {
        return Ok(Vec::new());
    }
    // SAFETY: the client's array of `count` ucp_dt_iov_t.
    Ok(unsafe { std::slice::from_raw_parts(buffer as *const DtIov, count) }.to_vec())
}

/// The packed size of `count` elements of `dt` at `buffer` (`ucp_dt_query`).
///
/// # Safety
/// As [`send_data`] (contiguous data needs no buffer).
pub unsafe fn packed_size(
    name: &str,
    buffer: *const c_void,
    count: usize,
    dt: Datatype,
) -> Result<usize, Status> {
    match dt & UCP_DATATYPE_CLASS_MASK {
        UCP_DATATYPE_CONTIG => contig_len(name, count, dt),
        UCP_DATATYPE_IOV => Ok(iov_list(name, buffer, count)?
            .iter()
            .map(|e| e.length)
            .sum()),
        UCP_DATATYPE_GENERIC => {
            let g = generic(dt);
            let (Some(start), Some(size), Some(fin)) =
                (g.ops.start_pack, g.ops.packed_size, g.ops.finish)
            else {
                return Err(refuse(
                    name,
                    UCS_ERR_INVALID_PARAM,
                    "generic datatype lacks callbacks",
                ));
            };
            // SAFETY: the client's callbacks, called as documented.
            unsafe {
                let state = start(g.context, buffer, count);
                let n = size(state);
                fin(state);
                Ok(n)
            }
        }
        c => Err(refuse(
            name,
            UCS_ERR_UNSUPPORTED,
            format!("datatype class {c} is not supported"),
        )),
    }
}

/// The receive capacity for `count` elements of `dt` at `buffer`, and how to deliver.
/// Contiguous memory gives `Finish::Copy` (receivers post it as raw memory instead of copying
/// when they can).
///
/// # Safety
/// As [`send_data`].
#[inline(always)]
pub unsafe fn recv_target(
    name: &str,
    buffer: *mut c_void,
    count: usize,
    dt: Datatype,
) -> Result<(usize, Finish), Status> {
    if dt & UCP_DATATYPE_CLASS_MASK == UCP_DATATYPE_CONTIG {
        let len = contig_len(name, count, dt)?;
        if len > 0 && buffer.is_null() {
            return Err(refuse(name, UCS_ERR_INVALID_PARAM, "buffer is NULL"));
        }
        return Ok((
            len,
            Finish::Copy {
                dst: buffer as *mut u8,
                cap: len,
            },
        ));
    }
    // SAFETY: forwarded contract.
    unsafe { recv_target_other(name, buffer, count, dt) }
}

/// [`recv_target`] of the IOV and generic classes (and the refusal of the others).
///
/// # Safety
/// As [`send_data`].
#[inline(never)]
unsafe fn recv_target_other(
    name: &str,
    buffer: *mut c_void,
    count: usize,
    dt: Datatype,
) -> Result<(usize, Finish), Status> {
    match dt & UCP_DATATYPE_CLASS_MASK {
        UCP_DATATYPE_IOV => {
            let iov = iov_list(name, buffer, count)?;
            Ok((iov.iter().map(|e| e.length).sum(), Finish::Iov(iov)))
        }
        UCP_DATATYPE_GENERIC => {
            let g = generic(dt);
            let (Some(start), Some(size), Some(_), Some(_)) = (
                g.ops.start_unpack,
                g.ops.packed_size,
                g.ops.unpack,
                g.ops.finish,
            ) else {
                return Err(refuse(
                    name,
                    UCS_ERR_INVALID_PARAM,
                    "generic datatype lacks an unpack callback",
                ));
            };
            // SAFETY: the client's callbacks.
            let (state, cap) = unsafe {
                let state = start(g.context, buffer, count);
                (state, size(state))
            };
            Ok((cap, Finish::Generic { ops: &g.ops, state }))
        }
        c => Err(refuse(
            name,
            UCS_ERR_UNSUPPORTED,
            format!("datatype class {c} is not supported"),
        )),
    }
}

impl Finish {
    /// Delivers received bytes (`data`, of a message of `len` bytes; only what fits is
    /// delivered). Gives a status when the delivery itself failed (a generic `unpack` error).
    pub fn deliver(self, data: Option<&[u8]>, len: usize) -> Option<Status> {
        let data = data.map(|d| &d[..d.len().min(len)]).unwrap_or(&[]);
        match self {
            Finish::None | Finish::Fetch { .. } => None,
            Finish::Staged { buf, then } => then.deliver(Some(&buf), len),
            Finish::Copy { dst, cap } => {
                let n = data.len().min(cap);
                if n > 0 {
                    // SAFETY: the client's receive buffer of `cap` bytes, not overlapping ours.
                    unsafe { std::ptr::copy_nonoverlapping(data.as_ptr(), dst, n) };
                }
                None
            }
            Finish::Iov(iov) => {
                let mut rest = data;
                for e in iov {
                    if rest.is_empty() {
                        break;
                    }
                    let n = rest.len().min(e.length);
                    // SAFETY: the client's IOV entry of `e.length` bytes.
                    unsafe { std::ptr::copy_nonoverlapping(rest.as_ptr(), e.buffer as *mut u8, n) };
                    rest = &rest[n..];
                }
                None
            }
            Finish::Generic { ops, state } => {
                let mut st = None;
                // SAFETY: the client's callbacks on the state start_unpack gave.
                unsafe {
                    if let (Some(unpack), false) = (ops.unpack, data.is_empty()) {
                        let s = unpack(state, 0, data.as_ptr().cast(), data.len());
                        if s != UCS_OK {
                            st = Some(s);
                        }
                    }
                    if let Some(fin) = ops.finish {
                        fin(state);
                    }
                }
                st
            }
        }
    }

    /// Releases what an operation that never started holds (a generic state).
    pub fn abort(self) {
        match self {
            Finish::Generic { ops, state } => {
                if let Some(fin) = ops.finish {
                    // SAFETY: the state start_unpack gave, finished once.
                    unsafe { fin(state) };
                }
            }
            Finish::Staged { then, .. } => then.abort(),
            _ => {}
        }
    }
}

/// `ucs_status_t ucp_dt_create_generic(const ucp_generic_dt_ops_t *ops, void *context,
/// ucp_datatype_t *datatype_p)`.
///
/// # Safety
/// `ops` points to the six callbacks; `datatype_p` is writable.
#[no_mangle]
pub unsafe extern "C" fn ucp_dt_create_generic(
    ops: *const GenericDtOps,
    context: *mut c_void,
    datatype_p: *mut Datatype,
) -> Status {
    const NAME: &str = "ucp_dt_create_generic";
    ffi(NAME, UCS_ERR_NO_MEMORY, || {
        if ops.is_null() || datatype_p.is_null() {
            return refuse(NAME, UCS_ERR_INVALID_PARAM, "NULL argument");
        }
        // SAFETY: the caller's ops table.
        let ops = unsafe { *ops };
        let g = Box::new(GenericDt { ops, context });
        let p = Box::into_raw(g) as u64;
        debug_assert_eq!(p & UCP_DATATYPE_CLASS_MASK, 0);
        // SAFETY: checked non-null.
        unsafe { *datatype_p = p | UCP_DATATYPE_GENERIC };
        UCS_OK
    })
}

/// `void ucp_dt_destroy(ucp_datatype_t datatype)`: frees a generic datatype (others have
/// nothing to free).
///
/// # Safety
/// A datatype no running operation uses.
#[no_mangle]
pub unsafe extern "C" fn ucp_dt_destroy(datatype: Datatype) {
    ffi("ucp_dt_destroy", (), || {
        if datatype & UCP_DATATYPE_CLASS_MASK == UCP_DATATYPE_GENERIC {
            let p = (datatype & !UCP_DATATYPE_CLASS_MASK) as *mut GenericDt;
            if !p.is_null() {
                // SAFETY: created by ucp_dt_create_generic.
                drop(unsafe { Box::from_raw(p) });
            }
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn contig_and_iov() {
        let data = [1u8, 2, 3, 4, 5, 6];
        // SAFETY: a local buffer.
        let s = unsafe { send_data("t", data.as_ptr().cast(), 3, 2 << 3) }.unwrap();
        assert_eq!(s.bytes(), &data);
        let mut a = [0u8; 2];
        let mut b = [0u8; 3];
        let iov = [
            DtIov {
                buffer: a.as_mut_ptr().cast(),
                length: 2,
            },
            DtIov {
                buffer: b.as_mut_ptr().cast(),
                length: 3,
            },
        ];
        // SAFETY: local buffers.
        let (cap, fin) =
            unsafe { recv_target("t", iov.as_ptr() as *mut c_void, 2, UCP_DATATYPE_IOV) }.unwrap();
        assert_eq!(cap, 5);
        assert!(fin.deliver(Some(&data[..5]), 5).is_none());
        assert_eq!(a, [1, 2]);
        assert_eq!(b, [3, 4, 5]);
        // SAFETY: strided is refused before touching memory.
        let e = unsafe { send_data("t", std::ptr::null(), 1, UCP_DATATYPE_STRIDED) };
        assert_eq!(e.err(), Some(UCS_ERR_UNSUPPORTED));
    }
}
