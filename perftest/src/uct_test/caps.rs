//! Whether a transport can run a test: the capability flags, limits and memory-domain flags
//! the test needs, with an error that says what is missing and what to try instead.

use super::*;

fn flag_names(f: IfaceFlags) -> String {
    let names: Vec<&str> = f.iter_names().map(|(n, _)| n).collect();
    if names.is_empty() {
        "none".into()
    } else {
        names.join("|")
    }
}

fn too_long(tl: &str, what: &str, size: usize, max: usize, hint: &str) -> Error {
    Error::Unsupported(format!(
        "message size {size} exceeds {tl}'s {what} limit of {max} bytes{hint}"
    ))
}

/// Checks that a transport with `attr` (and memory domain flags `md`) can run `p`; the error
/// says what is missing and what to try instead.
pub fn check_caps(p: &TestParams, tl: &str, attr: &IfaceAttr, md: MdFlags) -> Result<()> {
    let size = p.size();
    let parts = p.sizes.len();
    let t = p.test;
    let need = |flag: IfaceFlags, what: &str| -> Result<()> {
        if attr.flags.contains(flag) {
            Ok(())
        } else {
            Err(Error::Unsupported(format!(
                "{tl} cannot run {t} with -D {}: it has no {what} (its operations: {})",
                p.layout,
                flag_names(attr.flags)
            )))
        }
    };
    let iov_ok = |max_iov: usize| -> Result<()> {
        if parts > 1 && max_iov > 0 && parts > max_iov {
            Err(Error::Unsupported(format!(
                "{tl} takes at most {max_iov} iov parts, -s gave {parts}"
            )))
        } else {
            Ok(())
        }
    };
    if (t.needs_rkey() || p.layout == Layout::Zcopy)
        && !md.intersects(MdFlags::ALLOC | MdFlags::REG)
    {
        return Err(Error::Unsupported(format!(
            "{tl}'s memory domain can neither allocate nor register memory, which {t} with -D {} needs",
            p.layout
        )));
    }
    match t {
        TestId::AmLat | TestId::AmBw => {
            match p.layout {
                Layout::Short | Layout::ShortIov => {
                    need(IfaceFlags::AM_SHORT, "am_short")?;
                    if size > attr.am.max_short {
                        return Err(too_long(
                            tl,
                            "am_short",
                            size,
                            attr.am.max_short,
                            "; try -D bcopy",
                        ));
                    }
                    if p.layout == Layout::ShortIov {
                        iov_ok(attr.am.max_iov)?;
                    }
                }
                Layout::Bcopy => {
                    need(IfaceFlags::AM_BCOPY, "am_bcopy")?;
                    if size > attr.am.max_bcopy {
                        return Err(too_long(
                            tl,
                            "am_bcopy",
                            size,
                            attr.am.max_bcopy,
                            "; try -D zcopy",
                        ));
                    }
                }
                Layout::Zcopy => {
                    need(IfaceFlags::AM_ZCOPY, "am_zcopy")?;
                    if size - 8 > attr.am.max_zcopy {
                        return Err(too_long(tl, "am_zcopy", size - 8, attr.am.max_zcopy, ""));
                    }
                    if attr.am.max_hdr < 8 {
                        return Err(Error::Unsupported(format!(
                            "{tl}'s am_zcopy carries a header of at most {} bytes; the test needs 8",
                            attr.am.max_hdr
                        )));
                    }
                    iov_ok(attr.am.max_iov)?;
                }
                _ => unreachable_layout(p.layout)?,
            }
            if t == TestId::AmBw
                && !attr
                    .flags
                    .intersects(IfaceFlags::AM_SHORT | IfaceFlags::AM_BCOPY)
            {
                return Err(Error::Unsupported(format!(
                    "{tl} has neither am_short nor am_bcopy to return flow-control credits"
                )));
            }
        }
        TestId::PutLat | TestId::PutBw => match p.layout {
            Layout::Short => {
                need(IfaceFlags::PUT_SHORT, "put_short")?;
                if size > attr.put.max_short {
                    return Err(too_long(
                        tl,
                        "put_short",
                        size,
                        attr.put.max_short,
                        "; try -D bcopy",
                    ));
                }
            }
            Layout::Bcopy => {
                need(IfaceFlags::PUT_BCOPY, "put_bcopy")?;
                if size > attr.put.max_bcopy {
                    return Err(too_long(
                        tl,
                        "put_bcopy",
                        size,
                        attr.put.max_bcopy,
                        "; try -D zcopy",
                    ));
                }
            }
            Layout::Zcopy => {
                need(IfaceFlags::PUT_ZCOPY, "put_zcopy")?;
                if size > attr.put.max_zcopy {
                    return Err(too_long(tl, "put_zcopy", size, attr.put.max_zcopy, ""));
                }
                iov_ok(attr.put.max_iov)?;
            }
            _ => unreachable_layout(p.layout)?,
        },
        TestId::GetLat | TestId::GetBw => match p.layout {
            Layout::Short => {
                need(IfaceFlags::GET_SHORT, "get_short")?;
                if size > attr.get.max_short {
                    return Err(too_long(
                        tl,
                        "get_short",
                        size,
                        attr.get.max_short,
                        "; try -D bcopy",
                    ));
                }
            }
            Layout::Bcopy => {
                need(IfaceFlags::GET_BCOPY, "get_bcopy")?;
                if size > attr.get.max_bcopy {
                    return Err(too_long(
                        tl,
                        "get_bcopy",
                        size,
                        attr.get.max_bcopy,
                        "; try -D zcopy",
                    ));
                }
            }
            Layout::Zcopy => {
                need(IfaceFlags::GET_ZCOPY, "get_zcopy")?;
                if size > attr.get.max_zcopy {
                    return Err(too_long(tl, "get_zcopy", size, attr.get.max_zcopy, ""));
                }
                iov_ok(attr.get.max_iov)?;
            }
            _ => unreachable_layout(p.layout)?,
        },
        TestId::AddLat | TestId::AddMr | TestId::FaddLat | TestId::SwapLat | TestId::CswapLat => {
            let (post, fetch) = if size == 8 {
                (attr.atomics.op64, attr.atomics.fop64)
            } else {
                (attr.atomics.op32, attr.atomics.fop32)
            };
            let (set, op, name) = match t {
                TestId::AddLat | TestId::AddMr => (post, AtomicOps::ADD, "atomic add"),
                TestId::FaddLat => (fetch, AtomicOps::ADD, "atomic fetch-and-add"),
                TestId::SwapLat => (fetch, AtomicOps::SWAP, "atomic swap"),
                _ => (fetch, AtomicOps::CSWAP, "atomic compare-and-swap"),
            };
            if !set.contains(op) {
                return Err(Error::Unsupported(format!(
                    "{tl} has no {}-bit {name}, which {t} needs",
                    size * 8
                )));
            }
        }
        other => {
            return Err(Error::Unsupported(format!(
                "{other} is a ucp test; it takes no -x/-d"
            )))
        }
    }
    Ok(())
}

fn unreachable_layout(l: Layout) -> Result<()> {
    Err(Error::InvalidParam(format!(
        "-D {l} is not a uct data layout"
    )))
}
