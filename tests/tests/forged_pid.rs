//! A peer can make rucx touch only memory of a process that granted it access: a lying peer
//! that names another process's pid (a `memory_victim`) in a cma interface address, a cma
//! remote key or a posix/sysv segment key gets an error, and the victim's memory is neither
//! read nor written. Positive controls: once the victim itself grants access (it creates an
//! endpoint to us), the same accesses work. `forged_pid_ucp.rs` runs the forged rendezvous
//! read (RTS) and write (RTR, put mode) through ucp over tcp and posix.

mod forged;

use forged::{holds_pattern, pattern, Victim, LEN};
use std::ptr::NonNull;
use uct::{CompletionId, Endpoint, EpId, Error, EventSink, Iface, Iov, MemoryDomain};

#[derive(Default)]
struct Errors(Vec<(EpId, Error)>);

impl EventSink for Errors {
    fn am(&mut self, _id: u8, _data: &[u8]) {}
    fn completion(&mut self, _comp: CompletionId, _result: uct::Result<u64>) {}
    fn ep_error(&mut self, ep: EpId, err: Error) {
        self.0.push((ep, err));
    }
}

fn forged_cma_key(victim: &Victim) -> Vec<u8> {
    let mut k = Vec::new();
    uct::cma::CmaRkey {
        pid: victim.pid,
        base: victim.addr,
        len: LEN as u64,
    }
    .encode(&mut k);
    k
}

#[test]
fn cma_read_and_write_of_a_process_that_did_not_grant_are_refused() {
    let mut victim = Victim::spawn("rucx");
    let (md, mut iface) = uct::open("cma", "memory").unwrap();
    let dev = iface.device_address().to_vec();
    let mut forged = Vec::new();
    uct::cma::CmaIfaceAddr { pid: victim.pid }.encode(&mut forged);
    let mut ep = iface.ep_create_connected(&dev, &forged).unwrap();
    let rkey = md.rkey_unpack(&forged_cma_key(&victim)).unwrap();
    let mut recv = vec![0u8; LEN];
    // SAFETY: `recv` outlives the handle (dropped below before it is read).
    let rh = unsafe { md.mem_reg(NonNull::new(recv.as_mut_ptr()).unwrap(), LEN) }.unwrap();
    let mut junk = vec![0xeeu8; LEN];
    // SAFETY: as above.
    let jh = unsafe { md.mem_reg(NonNull::new(junk.as_mut_ptr()).unwrap(), LEN) }.unwrap();
    let r = ep.get_zcopy(&[Iov::whole(&rh)], victim.addr, &rkey, CompletionId(1));
    let e = r.expect_err("a forged read must fail");
    assert!(matches!(e, Error::RemoteAccess(_)), "{e}");
    assert!(
        e.to_string().contains(&format!("process {}", victim.pid)),
        "{e}"
    );
    let r = ep.put_zcopy(&[Iov::whole(&jh)], victim.addr, &rkey, CompletionId(2));
    assert!(matches!(r, Err(Error::RemoteAccess(_))), "{r:?}");
    let mut errs = Errors::default();
    for _ in 0..1000 {
        iface.progress(&mut errs);
    }
    assert_eq!(
        errs.0.len(),
        1,
        "the endpoint fails, reported once: {:?}",
        errs.0
    );
    assert!(matches!(errs.0[0].1, Error::RemoteAccess(_)));
    drop((rh, jh));
    assert!(
        recv.iter().all(|&b| b == 0),
        "nothing was read into the receive"
    );
    victim.assert_intact();

    // Control: once the victim grants us access, a new endpoint reads it.
    victim.grant(&dev, iface.iface_address());
    let mut ep = iface.ep_create_connected(&dev, &forged).unwrap();
    // SAFETY: `recv` outlives the handle.
    let rh = unsafe { md.mem_reg(NonNull::new(recv.as_mut_ptr()).unwrap(), LEN) }.unwrap();
    assert!(ep
        .get_zcopy(&[Iov::whole(&rh)], victim.addr, &rkey, CompletionId(3))
        .unwrap()
        .is_done());
    drop(rh);
    assert!(recv.iter().enumerate().all(|(i, &b)| b == pattern(i)));
}

#[test]
fn cma_endpoint_to_a_process_that_is_not_a_rucx_peer_fails() {
    let mut victim = Victim::spawn("plain");
    let (_md, mut iface) = uct::open("cma", "memory").unwrap();
    let dev = iface.device_address().to_vec();
    let mut forged = Vec::new();
    uct::cma::CmaIfaceAddr { pid: victim.pid }.encode(&mut forged);
    let e = iface
        .ep_create_connected(&dev, &forged)
        .map(|_| ())
        .expect_err("no endpoint to a process that is not a rucx peer");
    assert!(matches!(e, Error::Unreachable(_)), "{e}");
    assert!(e.to_string().contains("not a rucx process"), "{e}");
    victim.assert_intact();
}

#[test]
fn shared_memory_keys_naming_a_process_that_did_not_grant_are_refused() {
    let mut victim = Victim::spawn("rucx");
    for (tl, key) in [
        ("posix", victim.posix_rkey.clone().unwrap()),
        ("sysv", victim.sysv_rkey.clone().unwrap()),
    ] {
        let (md, _iface) = uct::open(tl, "memory").unwrap();
        let e = md
            .rkey_unpack(&key)
            .map(|_| ())
            .expect_err("mapping another process's segment must fail");
        assert!(matches!(e, Error::RemoteAccess(_)), "{tl}: {e}");
        assert!(
            e.to_string().contains(&format!("process {}", victim.pid)),
            "{e}"
        );
    }
    victim.assert_intact();

    // Control: once the victim grants us access, its keys map and hold its pattern.
    let (_cmd, ci) = uct::open("cma", "memory").unwrap();
    victim.grant(ci.device_address(), ci.iface_address());
    for key in [victim.posix_rkey.clone(), victim.sysv_rkey.clone()] {
        let key = key.unwrap();
        let tl = if key[1] == 1 { "posix" } else { "sysv" };
        let (md, _iface) = uct::open(tl, "memory").unwrap();
        let rk = md.rkey_unpack(&key).unwrap();
        let p = rk.local_ptr(rk.remote_base, LEN).unwrap();
        // SAFETY: local_ptr checked LEN bytes inside the mapping kept by `rk`.
        let got = unsafe { std::slice::from_raw_parts(p, LEN) };
        assert!(holds_pattern(got) && got[100] == pattern(100), "{tl}");
    }
    victim.assert_intact();
}
