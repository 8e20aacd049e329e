//! Client/server connections: `ucp_listener_h`, `ucp_conn_request_h`, and endpoints created
//! from a socket address or a connection request.
//!
//! A listener is rucx's [`ucp::Listener`] (a TCP socket that exchanges worker addresses);
//! `ucp_worker_progress` polls it (every [`SOCKET_POLL_EVERY`] calls, and on the call after a
//! wake-up) and hands each complete request to the connection handler, or, with an accept
//! handler, creates the endpoint and hands that over. `ucp_ep_create` from a socket address
//! returns at once: the request goes out without blocking ([`ucp::Connecting`]) and progress
//! creates the endpoint when the server's address comes back. An operation on the endpoint
//! before then waits for the answer (only that socket, without running callbacks), as UCX
//! would queue it; a connection that fails runs the endpoint's error handler from progress
//! (`UCS_ERR_UNREACHABLE` when nobody listens, `UCS_ERR_REJECTED` when the server rejects,
//! `UCS_ERR_TIMED_OUT` without an answer).

use crate::ffi::*;
use crate::guard::{check_mask, ffi, refuse};
use crate::handles::{new_ep, ucp_params, worker_ref, Ep, EpExt, Worker};
use crate::worker_ext::SOCKET_POLL_EVERY;
use std::ffi::c_void;
use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr, SocketAddrV4, SocketAddrV6};
use ucp::{ConnectPoll, EpHandle};

/// A listener.
pub struct Listener {
    worker: *const Worker,
    l: std::cell::RefCell<ucp::Listener>,
    accept: Option<(AcceptCb, *mut c_void)>,
    conn: Option<(ConnCb, *mut c_void)>,
    addr: SocketAddr,
}

/// A connection request (consumed by `ucp_ep_create` or `ucp_listener_reject`).
pub struct ConnRequest {
    req: Option<ucp::ConnRequest>,
    listener: *const Listener,
    client: SocketAddr,
    client_id: u64,
}

/// A socket address from C (`struct sockaddr *` and its length): IPv4 or IPv6.
///
/// # Safety
/// `sa` NULL or valid for `len` bytes.
pub unsafe fn sockaddr_from_c(sa: &SockAddr) -> Result<SocketAddr, String> {
    if sa.addr.is_null() {
        return Err("socket address is NULL".into());
    }
    let len = sa.addrlen as usize;
    if len < 2 {
        return Err(format!("socket address of {len} bytes"));
    }
    // SAFETY: at least 2 bytes (checked).
    let family = unsafe { (sa.addr as *const u16).read_unaligned() } as i32;
    match family {
        libc::AF_INET if len >= std::mem::size_of::<libc::sockaddr_in>() => {
            // SAFETY: long enough for a sockaddr_in.
            let s = unsafe { (sa.addr as *const libc::sockaddr_in).read_unaligned() };
            let ip = Ipv4Addr::from(u32::from_be(s.sin_addr.s_addr));
            Ok(SocketAddr::V4(SocketAddrV4::new(
                ip,
                u16::from_be(s.sin_port),
            )))
        }
        libc::AF_INET6 if len >= std::mem::size_of::<libc::sockaddr_in6>() => {
            // SAFETY: long enough for a sockaddr_in6.
            let s = unsafe { (sa.addr as *const libc::sockaddr_in6).read_unaligned() };
            let ip = Ipv6Addr::from(s.sin6_addr.s6_addr);
            Ok(SocketAddr::V6(SocketAddrV6::new(
                ip,
                u16::from_be(s.sin6_port),
                s.sin6_flowinfo,
                s.sin6_scope_id,
            )))
        }
        f => Err(format!(
            "socket address family {f} of {len} bytes (IPv4 and IPv6 are supported)"
        )),
    }
}

/// Writes a socket address into a C `struct sockaddr_storage`.
pub fn sockaddr_to_c(a: &SocketAddr, out: &mut SockaddrStorage) {
    out.0 = [0; 128];
    match a {
        SocketAddr::V4(v4) => {
            let s = libc::sockaddr_in {
                sin_family: libc::AF_INET as libc::sa_family_t,
                sin_port: v4.port().to_be(),
                sin_addr: libc::in_addr {
                    s_addr: u32::from(*v4.ip()).to_be(),
                },
                sin_zero: [0; 8],
            };
            // SAFETY: a sockaddr_in fits in the 128 bytes.
            unsafe { (out.0.as_mut_ptr() as *mut libc::sockaddr_in).write_unaligned(s) };
        }
        SocketAddr::V6(v6) => {
            let s = libc::sockaddr_in6 {
                sin6_family: libc::AF_INET6 as libc::sa_family_t,
                sin6_port: v6.port().to_be(),
                sin6_flowinfo: v6.flowinfo(),
                sin6_addr: libc::in6_addr {
                    s6_addr: v6.ip().octets(),
                },
                sin6_scope_id: v6.scope_id(),
            };
            // SAFETY: a sockaddr_in6 fits in the 128 bytes.
            unsafe { (out.0.as_mut_ptr() as *mut libc::sockaddr_in6).write_unaligned(s) };
        }
    }
}

/// The UCX status of a failed connection.
fn conn_status(e: &ucs::Error) -> Status {
    match e {
        ucs::Error::Unreachable(_) => UCS_ERR_UNREACHABLE,
        ucs::Error::ConnectionReset(m) if m.contains("rejected") => UCS_ERR_REJECTED,
        ucs::Error::Timeout(_) => UCS_ERR_TIMED_OUT,
        e => crate::guard::status_of(e),
    }
}

/// A handle that names no endpoint (a connecting client endpoint's until it connects).
fn no_handle() -> EpHandle {
    // SAFETY: EpHandle is three integers; all-zero is a valid value (one no worker gives out
    // to a live endpoint of the client's, and never passed to rucx: `connecting` is checked
    // first).
    unsafe { std::mem::zeroed() }
}

/// [`crate::ep::ucp_ep_create`] from a socket address: starts the connection and gives a
/// connecting endpoint.
pub fn ep_to_sockaddr(name: &str, w: &Worker, p: &EpParams) -> Result<*mut Ep, Status> {
    // SAFETY: the caller's socket address.
    let server = unsafe { sockaddr_from_c(&p.sockaddr) }
        .map_err(|why| refuse(name, UCS_ERR_INVALID_PARAM, why))?;
    let local = if p.field_mask & UCP_EP_PARAM_FIELD_LOCAL_SOCK_ADDR != 0 {
        // SAFETY: the caller's socket address.
        Some(
            unsafe { sockaddr_from_c(&p.local_sockaddr) }
                .map_err(|why| refuse(name, UCS_ERR_INVALID_PARAM, why))?,
        )
    } else {
        None
    };
    let send_id = p.field_mask & UCP_EP_PARAM_FIELD_FLAGS != 0
        && p.flags & UCP_EP_PARAMS_FLAGS_SEND_CLIENT_ID != 0;
    let _g = w.lock.lock();
    let c = w
        .inner
        .borrow()
        .w
        .connect_start(server, local, send_id.then_some(w.client_id))
        .map_err(|e| refuse(name, conn_status(&e), e))?;
    let ep = new_ep(w, no_handle(), p, true);
    let fd = c.fd();
    // SAFETY: the endpoint just made.
    let x = unsafe { (*ep).ext.get_or_insert_with(Box::default) };
    x.conn = Some(c);
    x.conn_failed = UCS_OK;
    let mut ext = w.ext.borrow_mut();
    ext.watch(fd, true);
    ext.connecting.push(ep as usize);
    ext.countdown = 1;
    w.sockets.set(true);
    Ok(ep)
}

/// [`crate::ep::ucp_ep_create`] from a connection request (which it consumes).
pub fn ep_from_request(name: &str, w: &Worker, p: &EpParams) -> Result<*mut Ep, Status> {
    let cr = p.conn_request as *mut ConnRequest;
    if cr.is_null() {
        return Err(refuse(name, UCS_ERR_INVALID_PARAM, "conn_request is NULL"));
    }
    // SAFETY: a connection request this library gave, consumed here.
    let cr = unsafe { Box::from_raw(cr) };
    let Some(req) = cr.req else {
        return Err(refuse(
            name,
            UCS_ERR_INVALID_PARAM,
            "the connection request was used",
        ));
    };
    let local = req.local_addr();
    let (err_cb, _) = crate::handles::err_handler_of(p);
    let _g = w.lock.lock();
    let params = ucp_params(w, err_cb);
    let res = w.inner.borrow_mut().w.accept(req, params);
    let h = res.map_err(|e| crate::guard::fail(name, &e))?;
    let ep = new_ep(w, h, p, false);
    if let Some(local) = local {
        // SAFETY: the endpoint just made.
        unsafe { (*ep).ext.get_or_insert_with(Box::default).sockaddrs = Some((local, cr.client)) };
    }
    Ok(ep)
}

/// An operation on a connecting client endpoint: waits (this socket only, no callbacks) for
/// the server's answer and creates the endpoint, or gives the failure.
///
/// # Safety
/// A live endpoint with `connecting` set.
pub unsafe fn await_connection<'a>(
    name: &str,
    ep: *mut Ep,
) -> Result<(&'a Worker, EpHandle), Status> {
    // SAFETY: a live endpoint; its worker outlives it.
    let w = unsafe { &*(*ep).worker };
    let _g = w.lock.lock();
    // SAFETY: as above.
    let e = unsafe { &mut *ep };
    if !e.connecting {
        return Ok((w, e.h));
    }
    let x = e.ext.get_or_insert_with(Box::default);
    let Some(c) = x.conn.as_mut() else {
        return Err(refuse(
            name,
            x.conn_failed,
            "the endpoint's connection failed",
        ));
    };
    match c.wait(ucp::listener::CM_TIMEOUT) {
        Ok(ConnectPoll::Accepted(addr)) => match connected(w, ep, &addr) {
            Ok(h) => Ok((w, h)),
            Err(s) => Err(refuse(name, s, "the endpoint's connection failed")),
        },
        Ok(ConnectPoll::Pending) => {
            let s = UCS_ERR_TIMED_OUT;
            conn_failed(w, ep, s, "no answer from the server");
            Err(refuse(name, s, "the endpoint's connection failed"))
        }
        Err(err) => {
            let s = conn_status(&err);
            conn_failed(w, ep, s, &err.to_string());
            Err(refuse(name, s, err))
        }
    }
}

/// The server accepted: creates the rucx endpoint to `addr` and makes the client endpoint
/// ready. On failure the endpoint is failed (its handler runs from progress).
fn connected(w: &Worker, ep: *mut Ep, addr: &[u8]) -> Result<EpHandle, Status> {
    // SAFETY: a live connecting endpoint of `w`.
    let e = unsafe { &mut *ep };
    let params = ucp_params(w, e.err_cb);
    let res = w.inner.borrow_mut().w.ep_create(addr, params);
    match res {
        Ok(h) => {
            let x = e.ext.get_or_insert_with(Box::default);
            if let Some(c) = x.conn.take() {
                w.ext.borrow().unwatch(c.fd());
                if let Some(local) = c.local_addr() {
                    x.sockaddrs = Some((local, c.server()));
                }
            }
            e.h = h;
            e.connecting = false;
            // SAFETY: a live endpoint, not in the index yet.
            unsafe { w.inner.borrow_mut().eps.insert(ep) };
            w.ext.borrow_mut().connecting.retain(|&x| x != ep as usize);
            Ok(h)
        }
        Err(err) => {
            let s = crate::guard::status_of(&err);
            conn_failed(w, ep, s, &err.to_string());
            Err(s)
        }
    }
}

/// Marks a client connection failed; the next socket poll runs the error handler.
fn conn_failed(w: &Worker, ep: *mut Ep, s: Status, why: &str) {
    tracing::debug!("client connection failed: {why}");
    // SAFETY: a live connecting endpoint of `w`.
    let x = unsafe { (*ep).ext.get_or_insert_with(Box::default) };
    if let Some(c) = x.conn.take() {
        w.ext.borrow().unwatch(c.fd());
    }
    x.conn_failed = s;
    let mut ext = w.ext.borrow_mut();
    ext.countdown = 1;
    w.sockets.set(true);
}

/// Closes a connecting (or failed) client endpoint: nothing was sent, so nothing to flush.
///
/// # Safety
/// A live endpoint with `connecting` set, not used afterwards.
pub unsafe fn close_connecting(ep: *mut Ep) -> StatusPtr {
    // SAFETY: a live endpoint; its worker outlives it.
    let w = unsafe { &*(*ep).worker };
    let _g = w.lock.lock();
    {
        let mut ext = w.ext.borrow_mut();
        ext.connecting.retain(|&x| x != ep as usize);
        // SAFETY: as above.
        if let Some(c) = unsafe { (*ep).ext.as_ref() }.and_then(|x| x.conn.as_ref()) {
            ext.unwatch(c.fd());
        }
        w.sockets.set(ext.has_sockets());
    }
    // SAFETY: created by ucp_ep_create, freed once.
    drop(unsafe { Box::from_raw(ep) });
    std::ptr::null_mut()
}

/// Polls the worker's listeners and client connections (every [`SOCKET_POLL_EVERY`]
/// progress calls): hands complete requests to the listeners' handlers, makes the endpoints
/// of accepted connections, runs the error handlers of failed ones. Worker locked, nothing
/// borrowed. Gives the number of events.
#[cold]
#[inline(never)]
pub fn poll_sockets(w: &Worker) -> usize {
    let (listeners, conns) = {
        let mut x = w.ext.borrow_mut();
        if x.countdown > 1 {
            x.countdown -= 1;
            return 0;
        }
        x.countdown = SOCKET_POLL_EVERY;
        (x.listeners.clone(), x.connecting.clone())
    };
    let mut n = 0;
    for l in listeners {
        n += poll_listener(w, l);
    }
    for ep in conns {
        n += poll_connection(w, ep);
    }
    w.sockets.set(w.ext.borrow().has_sockets());
    n
}

/// Polls one listener (if it still exists): its complete requests go to its handler.
fn poll_listener(w: &Worker, l: usize) -> usize {
    let mut reqs = Vec::new();
    {
        if !w.ext.borrow().listeners.contains(&l) {
            return 0;
        }
        // SAFETY: a live listener of `w` (destroy removes it from the list first).
        let lst = unsafe { &*(l as *const Listener) };
        let mut inner = lst.l.borrow_mut();
        for _ in 0..64 {
            match inner.poll() {
                Ok(Some(r)) => reqs.push(r),
                Ok(None) => break,
                Err(e) => tracing::debug!("listener on {}: {e}", lst.addr),
            }
        }
    }
    let n = reqs.len();
    for r in reqs {
        if !w.ext.borrow().listeners.contains(&l) {
            // The listener was destroyed by a handler: the rest are refused.
            let _ = r.reject();
            continue;
        }
        // SAFETY: checked live just above.
        let lst = unsafe { &*(l as *const Listener) };
        let client = r.peer_addr();
        if let Some((cb, arg)) = lst.conn {
            let client_id = r.client_id().unwrap_or(0);
            let cr = Box::into_raw(Box::new(ConnRequest {
                req: Some(r),
                listener: lst,
                client,
                client_id,
            }));
            // SAFETY: the client's connection handler with its documented arguments.
            unsafe { cb(cr.cast(), arg) };
        } else if let Some((cb, arg)) = lst.accept {
            let local = r.local_addr();
            let res = w.inner.borrow_mut().w.accept(r, ucp_params(w, None));
            match res {
                Ok(h) => {
                    // SAFETY: a zeroed parameter struct is "no fields".
                    let p: EpParams = unsafe { std::mem::zeroed() };
                    let ep = new_ep(w, h, &p, false);
                    if let Some(local) = local {
                        // SAFETY: the endpoint just made.
                        unsafe {
                            (*ep)
                                .ext
                                .get_or_insert_with(Box::<EpExt>::default)
                                .sockaddrs = Some((local, client))
                        };
                    }
                    // SAFETY: the client's accept handler with its documented arguments.
                    unsafe { cb(ep.cast(), arg) };
                }
                Err(e) => tracing::warn!("accepting {client}: {e}"),
            }
        } else {
            let _ = r.reject();
        }
    }
    n
}

/// Polls one client connection: creates its endpoint when the server answered, or runs its
/// error handler when it failed.
fn poll_connection(w: &Worker, ep: usize) -> usize {
    if !w.ext.borrow().connecting.contains(&ep) {
        return 0;
    }
    let ep = ep as *mut Ep;
    // SAFETY: a live connecting endpoint (close takes it off the list first).
    let x = unsafe { (*ep).ext.get_or_insert_with(Box::default) };
    let polled = x.conn.as_mut().map(|c| c.poll());
    match polled {
        Some(Ok(ConnectPoll::Pending)) => 0,
        Some(Ok(ConnectPoll::Accepted(addr))) => {
            let _ = connected(w, ep, &addr);
            1
        }
        Some(Err(e)) => {
            conn_failed(w, ep, conn_status(&e), &e.to_string());
            1
        }
        None => {
            // Failed: report it once, then it waits for the client's close.
            w.ext.borrow_mut().connecting.retain(|&x| x != ep as usize);
            // SAFETY: as above.
            let e = unsafe { &mut *ep };
            let status = e
                .ext
                .as_ref()
                .map_or(UCS_ERR_UNREACHABLE, |x| x.conn_failed);
            if !e.failed {
                e.failed = true;
                if let Some(cb) = e.err_cb {
                    // SAFETY: the client's error handler with its documented arguments.
                    unsafe { cb(e.err_arg, ep.cast(), status) };
                }
            }
            1
        }
    }
}

const LISTENER_KNOWN: u64 = UCP_LISTENER_PARAM_FIELD_SOCK_ADDR
    | UCP_LISTENER_PARAM_FIELD_ACCEPT_HANDLER
    | UCP_LISTENER_PARAM_FIELD_CONN_HANDLER;

/// `ucs_status_t ucp_listener_create(ucp_worker_h worker, const ucp_listener_params_t
/// *params, ucp_listener_h *listener_p)`: listens on the socket address (port 0: the kernel
/// picks one, see `ucp_listener_query`). Exactly one of the accept and connection handlers
/// must be set. An address in use gives `UCS_ERR_BUSY`.
///
/// # Safety
/// A live worker; valid `params` and `listener_p`.
#[no_mangle]
pub unsafe extern "C" fn ucp_listener_create(
    worker: *mut Worker,
    params: *const ListenerParams,
    listener_p: *mut *mut Listener,
) -> Status {
    const NAME: &str = "ucp_listener_create";
    ffi(NAME, UCS_ERR_NO_MEMORY, || {
        let w = match worker_ref(NAME, worker) {
            Ok(w) => w,
            Err(s) => return s,
        };
        if params.is_null() || listener_p.is_null() {
            return refuse(NAME, UCS_ERR_INVALID_PARAM, "NULL argument");
        }
        // SAFETY: the caller's params.
        let p = unsafe { &*params };
        if let Err(s) = check_mask(
            NAME,
            "ucp_listener_params_t.field_mask",
            p.field_mask,
            LISTENER_KNOWN,
        ) {
            return s;
        }
        let has = |b: u64| p.field_mask & b != 0;
        if !has(UCP_LISTENER_PARAM_FIELD_SOCK_ADDR) {
            return refuse(
                NAME,
                UCS_ERR_INVALID_PARAM,
                "no socket address (UCP_LISTENER_PARAM_FIELD_SOCK_ADDR)",
            );
        }
        let accept = has(UCP_LISTENER_PARAM_FIELD_ACCEPT_HANDLER)
            .then_some(p.accept_handler)
            .and_then(|h| h.cb.map(|cb| (cb, h.arg)));
        let conn = has(UCP_LISTENER_PARAM_FIELD_CONN_HANDLER)
            .then_some(p.conn_handler)
            .and_then(|h| h.cb.map(|cb| (cb, h.arg)));
        if accept.is_some() == conn.is_some() {
            return refuse(
                NAME,
                UCS_ERR_INVALID_PARAM,
                "exactly one of the accept and connection handlers must be given",
            );
        }
        // SAFETY: the caller's socket address.
        let at = match unsafe { sockaddr_from_c(&p.sockaddr) } {
            Ok(a) => a,
            Err(why) => return refuse(NAME, UCS_ERR_INVALID_PARAM, why),
        };
        let l = match ucp::Listener::bind(at) {
            Ok(l) => l,
            Err(e) => {
                let s = match &e {
                    ucs::Error::Io {
                        kind: std::io::ErrorKind::AddrInUse,
                        ..
                    } => UCS_ERR_BUSY,
                    ucs::Error::Io {
                        kind: std::io::ErrorKind::AddrNotAvailable,
                        ..
                    } => UCS_ERR_INVALID_ADDR,
                    e => crate::guard::status_of(e),
                };
                return refuse(NAME, s, e);
            }
        };
        let addr = l.local_addr().unwrap_or(at);
        let fd = l.event_fd();
        let raw = Box::into_raw(Box::new(Listener {
            worker: w,
            l: std::cell::RefCell::new(l),
            accept,
            conn,
            addr,
        }));
        let _g = w.lock.lock();
        let mut x = w.ext.borrow_mut();
        x.watch(fd, false);
        x.listeners.push(raw as usize);
        x.countdown = 1;
        w.sockets.set(true);
        // SAFETY: checked non-null.
        unsafe { *listener_p = raw };
        UCS_OK
    })
}

/// `void ucp_listener_destroy(ucp_listener_h listener)`: stops listening; requests not
/// taken yet are dropped.
///
/// # Safety
/// A listener from `ucp_listener_create`, destroyed once.
#[no_mangle]
pub unsafe extern "C" fn ucp_listener_destroy(listener: *mut Listener) {
    ffi("ucp_listener_destroy", (), || {
        if listener.is_null() {
            refuse(
                "ucp_listener_destroy",
                UCS_ERR_INVALID_PARAM,
                "listener is NULL",
            );
            return;
        }
        // SAFETY: a live listener; its worker outlives it.
        let w = unsafe { &*(*listener).worker };
        let _g = w.lock.lock();
        {
            let mut x = w.ext.borrow_mut();
            x.listeners.retain(|&l| l != listener as usize);
            // SAFETY: as above.
            x.unwatch(unsafe { (*listener).l.borrow().event_fd() });
            w.sockets.set(x.has_sockets());
        }
        // SAFETY: created by ucp_listener_create, freed once.
        drop(unsafe { Box::from_raw(listener) });
    })
}

/// `ucs_status_t ucp_listener_query(ucp_listener_h listener, ucp_listener_attr_t *attr)`:
/// the address listened on, with the port the kernel picked.
///
/// # Safety
/// A live listener and a writable `attr`.
#[no_mangle]
pub unsafe extern "C" fn ucp_listener_query(
    listener: *mut Listener,
    attr: *mut ListenerAttr,
) -> Status {
    const NAME: &str = "ucp_listener_query";
    ffi(NAME, UCS_ERR_INVALID_PARAM, || {
        if listener.is_null() || attr.is_null() {
            return refuse(NAME, UCS_ERR_INVALID_PARAM, "NULL argument");
        }
        // SAFETY: caller pointers.
        let (l, a) = unsafe { (&*listener, &mut *attr) };
        if let Err(s) = check_mask(
            NAME,
            "ucp_listener_attr_t.field_mask",
            a.field_mask,
            UCP_LISTENER_ATTR_FIELD_SOCKADDR,
        ) {
            return s;
        }
        if a.field_mask & UCP_LISTENER_ATTR_FIELD_SOCKADDR != 0 {
            sockaddr_to_c(&l.addr, &mut a.sockaddr);
        }
        UCS_OK
    })
}

/// `ucs_status_t ucp_listener_reject(ucp_listener_h listener, ucp_conn_request_h
/// conn_request)`: refuses the request (the client's endpoint fails with `UCS_ERR_REJECTED`)
/// and frees it.
///
/// # Safety
/// A live listener and one of its requests, not used afterwards.
#[no_mangle]
pub unsafe extern "C" fn ucp_listener_reject(
    listener: *mut Listener,
    conn_request: *mut ConnRequest,
) -> Status {
    const NAME: &str = "ucp_listener_reject";
    ffi(NAME, UCS_ERR_INVALID_PARAM, || {
        if listener.is_null() || conn_request.is_null() {
            return refuse(NAME, UCS_ERR_INVALID_PARAM, "NULL argument");
        }
        // SAFETY: a request this library gave, consumed here.
        let cr = unsafe { Box::from_raw(conn_request) };
        if !std::ptr::eq(cr.listener, listener) {
            tracing::debug!("{NAME}: the request came from another listener");
        }
        match cr.req {
            Some(r) => match r.reject() {
                Ok(()) => UCS_OK,
                // The client went away: nothing left to tell it.
                Err(e) => {
                    tracing::debug!("{NAME}: {e}");
                    UCS_OK
                }
            },
            None => refuse(
                NAME,
                UCS_ERR_INVALID_PARAM,
                "the connection request was used",
            ),
        }
    })
}

/// `ucs_status_t ucp_conn_request_query(ucp_conn_request_h conn_request,
/// ucp_conn_request_attr_t *attr)`: the client's socket address, and the id the client's
/// worker was given (`UCP_WORKER_PARAM_FIELD_CLIENT_ID`) when its endpoint sent it
/// (`UCP_EP_PARAMS_FLAGS_SEND_CLIENT_ID`; 0 otherwise).
///
/// # Safety
/// A live request and a writable `attr`.
#[no_mangle]
pub unsafe extern "C" fn ucp_conn_request_query(
    conn_request: *mut ConnRequest,
    attr: *mut ConnRequestAttr,
) -> Status {
    const NAME: &str = "ucp_conn_request_query";
    ffi(NAME, UCS_ERR_INVALID_PARAM, || {
        if conn_request.is_null() || attr.is_null() {
            return refuse(NAME, UCS_ERR_INVALID_PARAM, "NULL argument");
        }
        // SAFETY: caller pointers.
        let (cr, a) = unsafe { (&*conn_request, &mut *attr) };
        let known = UCP_CONN_REQUEST_ATTR_FIELD_CLIENT_ADDR | UCP_CONN_REQUEST_ATTR_FIELD_CLIENT_ID;
        if let Err(s) = check_mask(
            NAME,
            "ucp_conn_request_attr_t.field_mask",
            a.field_mask,
            known,
        ) {
            return s;
        }
        if a.field_mask & UCP_CONN_REQUEST_ATTR_FIELD_CLIENT_ADDR != 0 {
            sockaddr_to_c(&cr.client, &mut a.client_address);
        }
        if a.field_mask & UCP_CONN_REQUEST_ATTR_FIELD_CLIENT_ID != 0 {
            a.client_id = cr.client_id;
        }
        UCS_OK
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn socket_addresses_round_trip_through_c() {
        for a in [
            "0.0.0.0:0".parse().unwrap(),
            "127.0.0.1:4321".parse().unwrap(),
            "[::1]:99".parse().unwrap(),
        ] {
            let mut st = SockaddrStorage([0; 128]);
            sockaddr_to_c(&a, &mut st);
            let len = if a.is_ipv4() { 16 } else { 28 };
            let c = SockAddr {
                addr: st.0.as_ptr().cast(),
                addrlen: len,
            };
            // SAFETY: a local buffer of 128 bytes.
            assert_eq!(unsafe { sockaddr_from_c(&c) }.unwrap(), a);
        }
        let short = SockAddr {
            addr: [2u8, 0].as_ptr().cast(),
            addrlen: 2,
        };
        // SAFETY: two valid bytes.
        assert!(unsafe { sockaddr_from_c(&short) }.is_err());
    }
}
