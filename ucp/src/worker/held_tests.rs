//! What the worker settles for the families: a request another family holds part of, which
//! `Core::finish` leaves to `State::finish` (`held_done`), and an endpoint a family found
//! failed (`to_fail`), both on the next progress call and only if the request or endpoint is
//! still the one they named.

use crate::worker::req::SendData;
use crate::{EpHandle, Features, Worker};
use ucs::Error;

/// Two workers over posix shared memory; the first has an endpoint to the second.
fn pair() -> (Worker, Worker, EpHandle) {
    crate::test_pair::pair(&["posix"], Features::TAG)
}

/// A send on `a`'s endpoint `ep` that tag offload is marked as holding an entry of.
fn held_send(a: &mut Worker, ep: EpHandle) -> usize {
    let idx = a.st.ep_idx(ep).expect("endpoint");
    let key = a.st.new_send(idx, 5, SendData::Owned(vec![1; 64]), false);
    a.st.send_mut(key).tm_held = true;
    key
}

#[test]
fn a_held_request_finishes_through_the_worker_on_the_next_progress_call() {
    let (mut a, _b, ep) = pair();
    let key = held_send(&mut a, ep);
    a.st.core.finish(key, Ok(()));
    assert!(
        !a.st.req(key).is_finished(),
        "the core left the request to the worker"
    );
    assert_eq!(a.st.core.held_done.len(), 1);
    // Twice is still once.
    a.st.core.finish(key, Ok(()));
    assert_eq!(a.st.core.held_done.len(), 1);
    a.progress();
    assert!(a.st.core.held_done.is_empty());
    assert!(a.st.req(key).is_finished(), "settled by progress");
    assert!(!a.st.send_mut(key).tm_held, "the hold was released first");
}

#[test]
fn a_held_request_whose_slot_was_reused_leaves_the_new_request_alone() {
    let (mut a, _b, ep) = pair();
    let key = held_send(&mut a, ep);
    a.st.core.finish(key, Ok(()));
    // Finished meanwhile by the worker itself (as failing its endpoint does), then freed.
    a.st.finish(key, Err(Error::Canceled));
    assert!(a.st.req(key).is_finished());
    a.st.drop_req(key);
    let idx = a.st.ep_idx(ep).expect("endpoint");
    let again = a.st.new_send(idx, 6, SendData::Owned(vec![2; 64]), false);
    assert_eq!(again, key, "the slot is reused");
    a.progress();
    assert!(
        !a.st.req(again).is_finished(),
        "the new request was finished by the old one's settlement"
    );
    a.st.drop_req(again);
}

#[test]
fn an_endpoint_a_family_found_failed_fails_on_the_next_progress_call() {
    let (mut a, _b, ep) = pair();
    let idx = a.st.ep_idx(ep).expect("endpoint");
    a.st.fail_ep_soon(idx, Error::ConnectionReset("found failed".into()));
    assert!(!a.st.ep(idx).is_down(), "not before progress");
    a.progress();
    assert!(a.st.ep(idx).is_down(), "failed by progress");
    assert!(a.st.core.to_fail.is_empty());
}

#[test]
fn a_held_request_keeps_its_result_when_its_endpoint_fails_before_it_settles() {
    // An ATS finishes a tag-offload send (left to the worker), then the peer's close fails
    // the endpoint in the same progress call: the send succeeded.
    let (mut a, _b, ep) = pair();
    let key = held_send(&mut a, ep);
    a.st.core.finish(key, Ok(()));
    let idx = a.st.ep_idx(ep).expect("endpoint");
    a.st.fail_ep(
        idx,
        Error::ConnectionReset("the peer closed its endpoint".into()),
    );
    let r = a.st.req(key);
    assert!(
        r.is_finished(),
        "finished with the endpoint's failure or before it"
    );
    let done = a.st.core.reqs[key].done.as_ref().expect("a result");
    assert!(
        done.status.is_ok(),
        "the earlier success was kept: {:?}",
        done.status
    );
}
