use super::*;
use crate::ep::Endpoint;
use crate::iface::{EventSink, Iface};
use crate::registry::AnyEp;
use crate::{CompletionId, EpId, Error, PendingId, Worker};

#[test]
fn a_live_process_is_found_again_and_an_exited_one_never() {
    let procs = PeerProcs::new();
    let me = std::process::id();
    assert!(procs.find(me).is_none());
    let a = procs.get(me).unwrap();
    let b = procs.get(me).unwrap();
    assert!(Rc::ptr_eq(&a, &b), "one entry per process");
    assert!(procs.find(me + 1).is_none(), "another pid is not it");
    assert_eq!(procs.len(), 1);
    drop((a, b));
    assert!(procs.is_empty(), "a process no endpoint holds is forgotten");

    // A process that exits is not handed out again, even while endpoints still hold it.
    // (Added without a grant: a process that is not a rucx peer refuses grants.)
    let mut child = std::process::Command::new("sleep")
        .arg("100")
        .spawn()
        .unwrap();
    let pid = child.id();
    let p = procs.insert_ungranted(pid, PeerWatch::new(pid));
    assert!(procs.find(pid).is_some_and(|q| Rc::ptr_eq(&p, &q)));
    child.kill().unwrap();
    child.wait().unwrap();
    assert!(procs.find(pid).is_none(), "an exited process is not reused");
    assert!(p.exited(), "and it stays exited for those holding it");
    assert_eq!(procs.len(), 1, "its holder still holds it");

    // An access that found the process gone retires it too, whatever its watch says later
    // (a watch without pidfd asks `kill`, which a new process with the pid would answer).
    let own = procs.get(me).unwrap();
    own.set_exited();
    assert!(own.exited());
    let fresh = procs.get(me).unwrap();
    assert!(!Rc::ptr_eq(&own, &fresh), "a retired entry is never reused");
    assert!(!fresh.exited());
}

/// Opens `tl` on the shared-memory device through `w`.
fn open_in(w: &mut Worker, tl: &str) -> usize {
    let (_md, iface) = w.open_iface(tl, "memory").unwrap();
    w.add_iface(iface).unwrap().0
}

/// An endpoint of interface `from` to interface `to` of worker `w`.
fn connect(w: &mut Worker, from: usize, to: usize) -> AnyEp {
    let dev = w[to].device_address().to_vec();
    let addr = w[to].iface_address().to_vec();
    w[from].ep_create_connected(&dev, &addr).unwrap()
}

fn proc_of(ep: &AnyEp) -> &Rc<PeerProc> {
    match ep {
        AnyEp::Posix(e) | AnyEp::Sysv(e) => e.peer_proc(),
        AnyEp::Cma(e) => e.peer_proc(),
        _ => panic!("not a shared-memory or cma endpoint"),
    }
}

#[derive(Default)]
struct Errors(Vec<EpId>);

impl EventSink for Errors {
    fn am(&mut self, _id: u8, _data: &[u8]) {}
    fn completion(&mut self, _comp: CompletionId, _result: ucs::Result<u64>) {}
    fn pending(&mut self, _ep: EpId, _req: PendingId) -> bool {
        true
    }
    fn ep_error(&mut self, ep: EpId, _err: Error) {
        self.0.push(ep);
    }
}

#[test]
fn shared_memory_and_cma_endpoints_to_one_process_share_one_entry() {
    if crate::registry::devices_of("cma").is_err() {
        eprintln!("cma is unavailable here: only the shared-memory half is checked");
    }
    let mut w = Worker::new();
    let posix = open_in(&mut w, "posix");
    let cma = crate::registry::devices_of("cma")
        .is_ok()
        .then(|| open_in(&mut w, "cma"));
    let mut eps = vec![connect(&mut w, posix, posix), connect(&mut w, posix, posix)];
    if let Some(cma) = cma {
        eps.push(connect(&mut w, cma, cma));
        eps.push(connect(&mut w, cma, cma));
    }
    let first = proc_of(&eps[0]).clone();
    assert!(
        eps.iter().all(|e| Rc::ptr_eq(proc_of(e), &first)),
        "every endpoint of the worker to this process holds the one entry"
    );
    assert_eq!(w.peer_procs().len(), 1);

    // Interfaces opened on their own share nothing with the worker's.
    let (_md, mut alone) = crate::open("posix", "memory").unwrap();
    let other = {
        let dev = w[posix].device_address().to_vec();
        let addr = w[posix].iface_address().to_vec();
        alone.ep_create_connected(&dev, &addr).unwrap()
    };
    assert!(!Rc::ptr_eq(proc_of(&other), &first));
    assert_eq!(w.peer_procs().len(), 1);

    // The process is found gone: no interface of the worker hands its entry out again, and
    // the endpoints holding it fail.
    first.set_exited();
    let again = connect(&mut w, posix, posix);
    assert!(
        !Rc::ptr_eq(proc_of(&again), &first),
        "posix got a new entry"
    );
    if let Some(cma) = cma {
        let c = connect(&mut w, cma, cma);
        assert!(Rc::ptr_eq(proc_of(&c), proc_of(&again)), "cma shares it");
    }
    assert_eq!(w.peer_procs().len(), 2, "the old entry is still held");
    let old_ids: Vec<EpId> = eps[..2].iter().map(|e| e.id()).collect();
    w[posix].event_arm(crate::EventFlags::empty()).unwrap_err();
    let mut sink = Errors::default();
    w[posix].progress(&mut sink);
    sink.0.sort();
    assert_eq!(
        sink.0, old_ids,
        "the endpoints to the old entry failed, once"
    );
    drop((eps, first));
    assert_eq!(
        w.peer_procs().len(),
        1,
        "the old entry went with its holders"
    );
    drop((again, other));
    assert!(w.peer_procs().is_empty());
}
